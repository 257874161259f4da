/* take(), skip() and shard(): iterators that pass on a subsequence of their upstream.
 *
 * Each takes ownership of upstream, also on failure (then it is destroyed). */
#ifndef SLUICE_PIPELINE_SLICE_H
#define SLUICE_PIPELINE_SLICE_H

#include "iter.h"

#include <stdint.h>

/* The first n elements; n < 0 means all of them. Upstream is not pulled past the n-th. */
int pipe_take_open(int64_t n, struct pipe_iter *upstream, struct pipe_ctx *ctx,
                   struct pipe_iter **out);

/* All but the first n elements; n < 0 skips everything (upstream is still read to its end, so
 * its errors surface). */
int pipe_skip_open(int64_t n, struct pipe_iter *upstream, struct pipe_ctx *ctx,
                   struct pipe_iter **out);

/* Elements index, index + n, index + 2n, ... of upstream; 0 <= index < n. */
int pipe_shard_open(int64_t n, int64_t index, struct pipe_iter *upstream, struct pipe_ctx *ctx,
                    struct pipe_iter **out);

#endif
