/* prefetch(N): runs the upstream chain on a thread of its own, up to N elements ahead.
 *
 * The upstream chain reports into a context owned by the prefetch iterator (its parent is the
 * consumer's context, so cancelling the consumer's chain reaches the thread). Elements cross
 * the ring by swapping buffers. An upstream error reaches the consumer, with its message, after
 * the elements produced before it. Destroying the iterator stops and joins the thread
 * promptly, even over an infinite upstream or one that drops every element. */
#ifndef SLUICE_PIPELINE_PREFETCH_H
#define SLUICE_PIPELINE_PREFETCH_H

#include "iter.h"

#include <stdint.h>

/* Creates a prefetch of n >= 1 elements whose thread has not started. *upstream_ctx receives
 * the context the upstream chain must be built with. Returns 0 or SLUICE_ERR_NOMEM. */
int pipe_prefetch_new(int64_t n, struct pipe_ctx *ctx, struct pipe_iter **out,
                      struct pipe_ctx **upstream_ctx);

/* Hands the upstream chain (built with the upstream context) to the prefetch and starts its
 * thread. Takes ownership of upstream in every case. Returns 0, or -errno when the thread cannot
 * be started (the iterator must then still be destroyed). */
int pipe_prefetch_start(struct pipe_iter *it, struct pipe_iter *upstream);

/* Like pipe_next(), but when it is a prefetch waits at most timeout_ms (0: without limit) and
 * then returns SLUICE_ERR_TIMEOUT, changing nothing: the producer thread carries on and a later
 * call picks up where this one left. On any other iterator it is pipe_next(). */
int pipe_prefetch_next_timed(struct pipe_iter *it, struct sluice_element *out, uint32_t timeout_ms);

#endif
