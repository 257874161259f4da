/* batch(N [, drop_remainder]): stacks N consecutive elements along a new first axis.
 *
 * Every element of a batch must have the structure of its first element (component count,
 * dtypes, shapes); a mismatch stops the pipeline with an error naming the element's index in
 * the upstream sequence and both shapes. The last, shorter batch is kept unless
 * drop_remainder. Bytes components batch by concatenating strings and offsets. */
#ifndef SLUICE_PIPELINE_BATCH_H
#define SLUICE_PIPELINE_BATCH_H

#include "iter.h"

#include <stdbool.h>
#include <stdint.h>

/* n >= 1. Takes ownership of upstream, also on failure (then it is destroyed). Returns 0 or
 * SLUICE_ERR_NOMEM. */
int pipe_batch_open(int64_t n, bool drop_remainder, struct pipe_iter *upstream,
                    struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
