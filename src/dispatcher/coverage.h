/* What consumers reported receiving of the splits of distributed_epoch iterations that are not
 * finished yet, merged across consumers: a split is finished once the union covers all of its
 * positions and some consumer saw its end marker (docs/design.md §4). Pure: no clock, no I/O.
 *
 * This is soft state beside struct state: it is not journaled, because consumers repeat their
 * coverage of unfinished splits with every heartbeat until the dispatcher confirms them
 * finished, so a restarted dispatcher rebuilds it within one heartbeat. A single consumer
 * reports a split once it holds all of it, and the split is finished on that report; the
 * merging matters for shared jobs, where a split's elements are spread over several consumers.
 *
 * Memory: one entry per split some consumer reported in part and that is not finished; entries
 * go when their split finishes (coverage_forget) or their iteration ends
 * (coverage_forget_iteration). */
#ifndef SLUICE_DISPATCHER_COVERAGE_H
#define SLUICE_DISPATCHER_COVERAGE_H

#include "common/ranges.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* owner: the consumer (client id) that reported positions of the split, when one alone did;
 * COVERAGE_SHARED when several did. A split produced again (its worker died, or a deterministic
 * reader asked for it) skips what got holds and goes to its owner (docs/design.md §4). */
#define COVERAGE_SHARED UINT64_MAX

struct coverage_entry {
    uint64_t iteration, seq;
    bool ended;
    uint64_t total;
    struct ranges got;
    uint64_t owner;
};

struct coverage {
    struct coverage_entry *v; /* sorted by (iteration, seq) */
    size_t n, cap;
};

void coverage_init(struct coverage *c);
void coverage_release(struct coverage *c);

/* Checks one report: bounds holds nbounds values, begin/end pairs with begin < end, sorted and
 * disjoint, all at most total when ended. Returns 0 or SLUICE_ERR_INVALID with a message. */
int coverage_check(uint64_t seq, bool ended, uint64_t total, const uint64_t *bounds, size_t nbounds,
                   char *err, size_t errlen);

/* Merges a checked report of split seq of an iteration from consumer client. *complete receives
 * whether the split is now fully received (some report had its end marker and the union covers [0,
 * total)). A report whose total differs from an earlier one is SLUICE_ERR_CORRUPT (the split was
 * processed differently twice). Returns 0, SLUICE_ERR_NOMEM or SLUICE_ERR_CORRUPT. */
int coverage_merge(struct coverage *c, uint64_t iteration, uint64_t seq, uint64_t client,
                   bool ended, uint64_t total, const uint64_t *bounds, size_t nbounds,
                   bool *complete);

/* The entry of split seq of an iteration, or NULL when no consumer reported part of it (or it
 * finished). */
const struct coverage_entry *coverage_find(const struct coverage *c, uint64_t iteration,
                                           uint64_t seq);

void coverage_forget(struct coverage *c, uint64_t iteration, uint64_t seq);
void coverage_forget_iteration(struct coverage *c, uint64_t iteration);

#endif
