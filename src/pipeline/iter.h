/* Iterators: the pipeline engine's running form, and the interface every operator implements.
 *
 * pipe_open() (open.h) turns a spec into a chain of iterators, source first. next() fills the
 * caller's element and returns 1 (an element), 0 (end of sequence) or a negative code with a
 * message in the iterator's context. After 0 or an error, next() keeps returning the same. An
 * iterator chain belongs to one thread at a time (prefetch runs its upstream on a thread of its
 * own). */
#ifndef SLUICE_PIPELINE_ITER_H
#define SLUICE_PIPELINE_ITER_H

#include "element.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sluice_registry;

/* Where the record a file source yielded last came from: the file (NULL when the chain has no
 * file source or it has yielded nothing yet) and the byte offset of the record in it. The source
 * writes it for every record and clears it when it is destroyed; owner is the source. Elements do
 * not carry their origin, so only a map or filter with nothing between it and the source that
 * holds elements back or reorders them (shuffle, batch, prefetch) may read it as the origin of the
 * element in hand (open.c decides that when it builds the chain). */
struct pipe_origin {
    const char *file;
    uint64_t offset;
    const void *owner;
};

/* Shared by all iterators of one chain: the registry, the first error's message and the origin
 * of the last record read.
 *
 * cancel may be set from any thread (pipe_run_cancel) to make a chain give up: iterators that
 * loop over upstream elements without returning (filter, skip, shard, repeat) check it and
 * return SLUICE_ERR_CANCELLED, so even a filter that never matches on an infinite source ends.
 * A prefetch runs its upstream under a context of its own whose parent is the chain's, so
 * cancelling the chain reaches the prefetch thread too. parent may be NULL. */
struct pipe_ctx {
    const struct sluice_registry *reg;
    char err[SLUICE_ERRMSG_SIZE];
    atomic_int cancel;
    const struct pipe_ctx *parent;
    struct pipe_origin origin;
    /* The most bytes one element may hold (pipe_elem_size), 0 for no limit: a worker's
     * --max-element-bytes (struct pipe_limits, open.h). Set before the chain is built and read-only
     * afterwards; a prefetch's context copies it. Operators that know an element's size before
     * allocating it (bytes(N), batch as it grows, record readers from the record's header)
     * refuse it then, with pipe_limit_fail. */
    uint64_t max_element_bytes;
    /* Where the chain's time goes (prof.h), or NULL: set before the chain is built, read-only
     * afterwards; a prefetch's context copies it. The other prof_ fields are the sampling state
     * of the chain's timing iterators, touched only by the thread running the chain. */
    struct pipe_prof *prof;
    bool prof_on;
    uint64_t prof_below, prof_weight;
};

/* Whether an element of bytes bytes goes past ctx's limit. */
static inline bool pipe_over_limit(const struct pipe_ctx *ctx, uint64_t bytes)
{
    return ctx->max_element_bytes != 0 && bytes > ctx->max_element_bytes;
}

/* Writes "<what>element of <bytes> bytes is over the worker's limit of <limit>
 * (--max-element-bytes)" into ctx->err (what may be "" or a prefix such as "batch: "; at_least
 * says "at least <bytes>" for a size found while growing) and returns SLUICE_ERR_LIMIT. */
int pipe_limit_fail(struct pipe_ctx *ctx, const char *what, uint64_t bytes, bool at_least);
/* The same message into buf (len bytes), for a limit of limit bytes; returns SLUICE_ERR_LIMIT. */
int pipe_limit_msg(char *buf, size_t len, const char *what, uint64_t bytes, uint64_t limit,
                   bool at_least);

/* True when ctx or any of its parents was cancelled. */
static inline bool pipe_cancelled(const struct pipe_ctx *ctx)
{
    for (; ctx; ctx = ctx->parent)
        if (atomic_load_explicit(&ctx->cancel, memory_order_relaxed))
            return true;
    return false;
}

struct pipe_iter;

struct pipe_iter_ops {
    int (*next)(struct pipe_iter *it, struct sluice_element *out);
    void (*destroy)(struct pipe_iter *it); /* frees it and its upstream */
};

struct pipe_iter {
    const struct pipe_iter_ops *ops;
    struct pipe_ctx *ctx;
};

static inline int pipe_next(struct pipe_iter *it, struct sluice_element *out)
{
    return it->ops->next(it, out);
}

#endif
