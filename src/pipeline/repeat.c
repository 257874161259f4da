/* repeat(): passes are counted from 0; pass p's chain is built with
 * pipe_salt_mix(rb.salt, p), so pass 0 equals the chain without repeat. */
#include "repeat.h"

#include "common/error.h"
#include "shuffle.h"

#include <stdbool.h>
#include <stdlib.h>

struct repeat_iter {
    struct pipe_iter base;
    struct pipe_iter *up; /* NULL once finished */
    struct pipe_rebuild rb;
    int64_t count;
    uint64_t pass;
    bool produced; /* the current pass yielded an element */
    int rc;
};

static int finish(struct repeat_iter *r, int rc)
{
    if (r->up) {
        r->up->ops->destroy(r->up);
        r->up = NULL;
    }
    r->rc = rc;
    return rc;
}

static int repeat_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct repeat_iter *r = (struct repeat_iter *)it;
    struct pipe_ctx *ctx = it->ctx;
    while (r->up) {
        int rc = pipe_next(r->up, out);
        if (rc == 1) {
            r->produced = true;
            return 1;
        }
        if (rc < 0)
            return finish(r, rc);
        /* The pass ended. An empty pass of repeat() would be empty for ever. */
        r->pass++;
        if ((r->count >= 0 && r->pass >= (uint64_t)r->count) || (r->count < 0 && !r->produced))
            return finish(r, 0);
        if (pipe_cancelled(ctx))
            return finish(r,
                          err_set(ctx->err, sizeof(ctx->err), SLUICE_ERR_CANCELLED, "cancelled"));
        r->up->ops->destroy(r->up);
        r->up = NULL;
        r->produced = false;
        /* Wrapping arithmetic: only a pipeline past 2^64 passes repeats pass numbers. */
        uint64_t pass =
            r->count >= 0 ? r->rb.pass * (uint64_t)r->count + r->pass : r->rb.pass + r->pass;
        rc = r->rb.build(&r->rb, pipe_salt_mix(r->rb.salt, r->pass), pass, ctx, &r->up);
        if (rc) {
            r->up = NULL;
            return finish(r, rc);
        }
    }
    return r->rc;
}

static void repeat_destroy(struct pipe_iter *it)
{
    struct repeat_iter *r = (struct repeat_iter *)it;
    if (r->up)
        r->up->ops->destroy(r->up);
    free(r);
}

static const struct pipe_iter_ops repeat_ops = {repeat_next, repeat_destroy};

int pipe_repeat_open(int64_t count, const struct pipe_rebuild *rb, struct pipe_iter *upstream,
                     struct pipe_ctx *ctx, struct pipe_iter **out)
{
    struct repeat_iter *r = calloc(1, sizeof(*r));
    if (!r) {
        upstream->ops->destroy(upstream);
        return SLUICE_ERR_NOMEM;
    }
    r->base.ops = &repeat_ops;
    r->base.ctx = ctx;
    r->rb = *rb;
    r->count = count;
    r->up = upstream;
    if (count == 0) {
        upstream->ops->destroy(upstream);
        r->up = NULL;
    }
    *out = &r->base;
    return 0;
}
