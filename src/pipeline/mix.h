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
    /* SLUICE_ERR_TIMEOUT from an input or the choice pipeline is a wait that ran out, not a
     * failure: next() returns it with the position unchanged, and the next call asks the same
     * input again (a choice already read is kept). A reader's inputs that are reads of their own
     * (the client's distributed mix) set this; pipelines never do. */
    bool timeouts_retry;
    /* SAMPLE, optional: called before the mix draws position pos at or past the schedule's
     * horizon (pipe_mix_set_schedule; 0 until set), to set a schedule reaching past pos. Returns 0,
     * or a negative code with the reason in err (SLUICE_ERR_TIMEOUT as above when
     * timeouts_retry). */
    int (*horizon)(void *user, struct pipe_iter *mix, uint64_t pos, char *err, size_t errlen);
    void *horizon_user;
};

/* A change of a sample_from_datasets' weights: from output position from on, weights (one per
 * input). */
struct pipe_mix_change {
    uint64_t from;
    const double *weights;
};

/* Sets the weights schedule of a SAMPLE mix: the changes (n, by increasing from; copied) replace
 * the ones set before, and the mix may draw positions below horizon without asking again. The
 * weights of position x are the last change's with from <= x, or the pipeline's own before the
 * first. When no input left has a weight above 0 the mix ends. Returns 0 or SLUICE_ERR_NOMEM. */
int pipe_mix_set_schedule(struct pipe_iter *mix, const struct pipe_mix_change *v, size_t n,
                          uint64_t horizon);

/* Where a mix stands, as a checkpoint keeps it: the output position, the choices read, the
 * input a choice read already named (pending, index + 1; 0: none), whether the mix ended, and
 * which inputs ended (done, one per input). */
struct pipe_mix_state {
    uint64_t pos, nchoices, pending;
    bool ended;
    bool *done;
};

/* Reads mix's state into st (st->done has room for the mix's inputs). Returns 0, or the mix's
 * error (a failed mix has no position). */
int pipe_mix_get_state(const struct pipe_iter *mix, struct pipe_mix_state *st);
/* Puts a mix that has returned nothing yet at st (a restored read: its inputs are restored to
 * their own positions). The inputs' structure is checked again at their next first elements. */
void pipe_mix_set_state(struct pipe_iter *mix, const struct pipe_mix_state *st);

/* Opens the mix over n inputs (and, for CHOOSE, the choice pipeline). Ownership of every input
 * passes in every case (on failure they have been released); the array inputs is the caller's.
 * The inputs' contexts should have ctx as their cancel parent. Returns 0 with *out the iterator,
 * or SLUICE_ERR_NOMEM. */
int pipe_mix_open(const struct pipe_mix_request *req, const struct pipe_mix_input *inputs,
                  struct pipe_mix_input choice, struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
