/* take(), skip() and shard(). Each keeps a count of upstream elements seen; once it reports the
 * end or an error it keeps reporting the same without touching upstream again. */
#include "slice.h"

#include "common/error.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>

struct slice_iter {
    struct pipe_iter base;
    struct pipe_iter *up;
    int64_t n, index;
    uint64_t seen; /* upstream elements pulled so far */
    int rc;
    bool done;
};

/* Records the upstream's end or error; returns what next() must return. */
static int finish(struct slice_iter *s, int rc)
{
    if (rc < 0)
        s->rc = rc;
    s->done = true;
    return rc;
}

static int cancelled(struct slice_iter *s)
{
    struct pipe_ctx *ctx = s->base.ctx;
    return finish(s, err_set(ctx->err, sizeof(ctx->err), SLUICE_ERR_CANCELLED, "cancelled"));
}

static int take_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct slice_iter *s = (struct slice_iter *)it;
    if (s->done)
        return s->rc;
    if (s->n >= 0 && s->seen >= (uint64_t)s->n)
        return finish(s, 0);
    int rc = pipe_next(s->up, out);
    if (rc != 1)
        return finish(s, rc);
    s->seen++;
    return 1;
}

static int skip_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct slice_iter *s = (struct slice_iter *)it;
    if (s->done)
        return s->rc;
    for (;;) {
        int rc = pipe_next(s->up, out);
        if (rc != 1)
            return finish(s, rc);
        if (s->n >= 0 && s->seen >= (uint64_t)s->n)
            return 1;
        s->seen++;
        if (pipe_cancelled(it->ctx))
            return cancelled(s);
    }
}

static int shard_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct slice_iter *s = (struct slice_iter *)it;
    if (s->done)
        return s->rc;
    for (;;) {
        int rc = pipe_next(s->up, out);
        if (rc != 1)
            return finish(s, rc);
        uint64_t k = s->seen++;
        if (k % (uint64_t)s->n == (uint64_t)s->index)
            return 1;
        if (pipe_cancelled(it->ctx))
            return cancelled(s);
    }
}

static void slice_destroy(struct pipe_iter *it)
{
    struct slice_iter *s = (struct slice_iter *)it;
    s->up->ops->destroy(s->up);
    free(s);
}

static const struct pipe_iter_ops take_ops = {take_next, slice_destroy};
static const struct pipe_iter_ops skip_ops = {skip_next, slice_destroy};
static const struct pipe_iter_ops shard_ops = {shard_next, slice_destroy};

static int slice_open(const struct pipe_iter_ops *ops, int64_t n, int64_t index,
                      struct pipe_iter *upstream, struct pipe_ctx *ctx, struct pipe_iter **out)
{
    struct slice_iter *s = calloc(1, sizeof(*s));
    if (!s) {
        upstream->ops->destroy(upstream);
        return SLUICE_ERR_NOMEM;
    }
    s->base.ops = ops;
    s->base.ctx = ctx;
    s->up = upstream;
    s->n = n;
    s->index = index;
    *out = &s->base;
    return 0;
}

int pipe_take_open(int64_t n, struct pipe_iter *upstream, struct pipe_ctx *ctx,
                   struct pipe_iter **out)
{
    return slice_open(&take_ops, n, 0, upstream, ctx, out);
}

int pipe_skip_open(int64_t n, struct pipe_iter *upstream, struct pipe_ctx *ctx,
                   struct pipe_iter **out)
{
    return slice_open(&skip_ops, n, 0, upstream, ctx, out);
}

int pipe_shard_open(int64_t n, int64_t index, struct pipe_iter *upstream, struct pipe_ctx *ctx,
                    struct pipe_iter **out)
{
    assert(n >= 1 && index >= 0 && index < n);
    return slice_open(&shard_ops, n, index, upstream, ctx, out);
}
