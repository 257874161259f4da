/* Mixing datasets: sample_from_datasets and choose_from_datasets (docs/pipelines.md, "Mixing
 * datasets").
 *
 * The draw is pure: the input of output position x is a function of (seed, x, the weights,
 * which inputs are exhausted) alone. It is a Weyl sequence, u_x = frac(phase(seed) + x / phi),
 * computed exactly in 64-bit fixed point, mapped through the cumulative weights of the inputs
 * not yet exhausted. A Weyl sequence of the golden ratio is low-discrepancy: over any run of N
 * consecutive positions the count that falls in an interval of length w differs from N * w by
 * O(log N), so realized shares track the weights in every window instead of drifting like
 * independent coins.
 *
 * The iterator pulls whole input pipelines, each a running pipeline of its own (open.c opens
 * them and hands them over, so this file needs nothing of open.h) whose
 * context is a child of the mix's, so cancelling the mix's chain cancels every input, and the
 * inputs observe the same element limit. Errors of an input are reported with its index. */
#ifndef SLUICE_PIPELINE_MIX_H
#define SLUICE_PIPELINE_MIX_H

#include "iter.h"
#include "spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The phase of the draw for seed: a 64-bit mix of the seed. */
uint64_t pipe_mix_phase(int64_t seed);

/* The input drawn for output position x: an index below n whose weight is above 0 and which is
 * not exhausted (exhausted may be NULL: none is), or -1 when there is none. weights are finite
 * and >= 0. Pure; the same arguments give the same index on every machine (IEEE doubles, the
 * sums taken in index order). */
int pipe_mix_pick(const double *weights, const bool *exhausted, size_t n, uint64_t phase,
                  uint64_t x);

/* One input (or the choice pipeline) of a mix: the chain it reads, whose context holds the
 * chain's error messages, and the owner that release frees it by (a running pipeline). */
struct pipe_mix_input {
    struct pipe_iter *it;
    void *owner;
};

/* What a mix iterator does; the fields of the mixing source (spec.h). */
struct pipe_mix_request {
    enum pipe_source_kind kind;   /* PIPE_SRC_SAMPLE or PIPE_SRC_CHOOSE */
    const double *weights;        /* SAMPLE: n of them (copied) */
    size_t n;                     /* inputs */
    int64_t seed;                 /* SAMPLE */
    bool stop_on_empty;           /* end at the first exhausted input chosen */
    void (*release)(void *owner); /* frees an input's owner (and so its chain) */
};

/* Opens the mix over n inputs (and, for CHOOSE, the choice pipeline). Ownership of every input
 * passes in every case (on failure they have been released); the array inputs is the caller's.
 * The inputs' contexts should have ctx as their cancel parent. Returns 0 with *out the iterator,
 * or SLUICE_ERR_NOMEM. */
int pipe_mix_open(const struct pipe_mix_request *req, const struct pipe_mix_input *inputs,
                  struct pipe_mix_input choice, struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
