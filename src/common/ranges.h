/* A set of uint64 values kept as sorted, disjoint, non-adjacent half-open ranges [begin, end).
 * Pure: no locks, no I/O. Used for the positions of a split's elements a consumer received and
 * for the splits a consumer has complete, where values arrive mostly in runs, so the set stays
 * a handful of ranges however many values it holds.
 *
 * Ownership: the set owns its array; ranges_release() frees it. Not thread-safe. */
#ifndef SLUICE_COMMON_RANGES_H
#define SLUICE_COMMON_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct range {
    uint64_t begin, end; /* begin < end */
};

struct ranges {
    struct range *v;
    size_t n, cap;
};

void ranges_release(struct ranges *r); /* leaves r empty and usable */

/* Adds [begin, end) (nothing when begin >= end), merging with touching ranges. Returns 0 or
 * SLUICE_ERR_NOMEM (the set is then unchanged). */
int ranges_add(struct ranges *r, uint64_t begin, uint64_t end);

bool ranges_contains(const struct ranges *r, uint64_t v);

/* The smallest value of the set that is >= v, or UINT64_MAX when there is none. */
uint64_t ranges_next_in(const struct ranges *r, uint64_t v);

/* The smallest value >= v that the set does not hold (v itself when it holds none of them). */
uint64_t ranges_first_missing(const struct ranges *r, uint64_t v);
/* Whether the set holds every value of [0, total) (true for total 0). */
bool ranges_covers(const struct ranges *r, uint64_t total);

/* How many values the set holds (saturating at UINT64_MAX). */
uint64_t ranges_count(const struct ranges *r);

#endif
