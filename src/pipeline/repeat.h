/* repeat([N]): the upstream sequence N times over, or for ever.
 *
 * Each pass runs on a freshly built upstream chain (sources re-opened, shuffles re-seeded for
 * the pass), the way tf.data re-creates the iterator of the repeated dataset. repeat(0) yields
 * nothing; repeat() stops when a whole pass yields no element, so repeating an empty source
 * ends instead of spinning. */
#ifndef SLUICE_PIPELINE_REPEAT_H
#define SLUICE_PIPELINE_REPEAT_H

#include "iter.h"

#include <stddef.h>
#include <stdint.h>

/* How to build the repeated upstream again: build(rb, salt, pass, ctx, out) creates a new chain
 * reporting into ctx, for a pass whose salt and pass number are given. plan is the builder's
 * data and must outlive the repeat iterator.
 *
 * Pass numbers count the passes over the source, as the split sequence's repetitions do
 * (split.h), for global_shuffle: a repeat(N) in a chain of pass e builds its pass p as pass
 * e * N + p, so nested repeats number the source's passes 0, 1, 2, ... in order; repeat()
 * builds pass e + p. */
struct pipe_rebuild {
    int (*build)(const struct pipe_rebuild *rb, uint64_t salt, uint64_t pass, struct pipe_ctx *ctx,
                 struct pipe_iter **out);
    void *plan;
    size_t nops;   /* the builder's own: how many ops of the plan the upstream holds */
    uint64_t salt; /* the salt of the chain the repeat itself sits in */
    uint64_t pass; /* the pass number of that chain */
};

/* count < 0 repeats for ever. upstream is the first pass's chain, already built (with
 * rb->salt); the run takes ownership of it, also on failure. rb is copied. Returns 0 or
 * SLUICE_ERR_NOMEM. */
int pipe_repeat_open(int64_t count, const struct pipe_rebuild *rb, struct pipe_iter *upstream,
                     struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
