/* When splits were last leased again, per iteration: soft state of the dispatcher's shell, kept
 * by the core's rules here. Pure: no clock (callers pass their times), no I/O.
 *
 * A split taken from the pool (leased before, then returned: its worker died, it was not
 * reported received within the re-issue grace, or a reader asked for it again) starts a new
 * production. A deterministic reader's request to produce a split again (ClientHeartbeatRequest
 * redo_seqs) is about the production whose end marker it received some milliseconds ago; when
 * the split was leased again after that, another production is under way, and returning the
 * split again would cut it short without stopping it: two productions of one split reach two
 * readers. relet_stale() tells such a request apart.
 *
 * Memory: one entry per split leased again and still leased; relet_prune() forgets the others,
 * relet_forget() an iteration no longer active. */
#ifndef SLUICE_DISPATCHER_RELET_H
#define SLUICE_DISPATCHER_RELET_H

#include "common/u64map.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct relet_iteration {
    uint64_t iteration;
    struct u64map at; /* seq -> when it was last leased again (milliseconds) */
};

struct relet_table {
    struct relet_iteration *v; /* sorted by iteration */
    size_t n, cap;
};

/* Split seq of iteration was leased again at now_ms. Returns 0 or SLUICE_ERR_NOMEM. */
int relet_note(struct relet_table *t, uint64_t iteration, uint64_t seq, uint64_t now_ms);

/* Whether a request about a production of seq whose end was received age_ms before now_ms is
 * stale: the split was leased again after that. */
bool relet_stale(const struct relet_table *t, uint64_t iteration, uint64_t seq, uint64_t now_ms,
                 uint64_t age_ms);

/* Forgets the seqs of iteration that held (seq -> task: the splits leased now) does not hold,
 * once there are more than 64 of them and than held holds: a split no longer leased has no
 * production a request could be about. Returns 0 or SLUICE_ERR_NOMEM (nothing forgotten). */
int relet_prune(struct relet_table *t, uint64_t iteration, const struct u64map *held);

/* Forgets iteration. */
void relet_forget(struct relet_table *t, uint64_t iteration);

/* The iteration of entry i (i < t->n; entries are sorted by iteration). */
uint64_t relet_iteration_at(const struct relet_table *t, size_t i);

void relet_release(struct relet_table *t);

#endif
