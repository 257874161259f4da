/* Which peer address each client owner came from, so that the jobs held from one address can be
 * counted (--max-jobs-per-address). An owner is the incarnation a sluice_client sends when it
 * connects (state.h, st_client.owner), which the client chooses: --max-jobs-per-client counts by
 * it, and a peer that reconnects with a new incarnation starts that count afresh, but not this
 * one, since its address stays.
 *
 * Soft state of the shell, never journalled: after a restart owners are learned again as they
 * ask for jobs, and clients restored from the journal whose owner is not known yet count for no
 * address until then. Loop thread only. */
#ifndef SLUICE_DISPATCHER_OWNERS_H
#define SLUICE_DISPATCHER_OWNERS_H

#include "dispatcher/state.h"

#include <stddef.h>
#include <stdint.h>

#define OWNERS_ADDR_MAX 64

struct owner_addr {
    uint64_t owner;
    char addr[OWNERS_ADDR_MAX];
};

/* Zero-initialised; sorted by owner. */
struct owners {
    struct owner_addr *v;
    size_t n, cap;
    size_t pruned_at; /* n after the last prune */
};

/* Records that owner (0: unknown, ignored) connects from addr (truncated to fit). Drops the
 * owners that hold no client in s now and then, so the table stays about as large as the set of
 * owners with open reads. Returns 0 or SLUICE_ERR_NOMEM. */
int owners_note(struct owners *o, const struct state *s, uint64_t owner, const char *addr);

/* The clients (reads) in s held by owners recorded from addr. */
size_t owners_held(const struct owners *o, const struct state *s, const char *addr);

void owners_free(struct owners *o);

#endif
