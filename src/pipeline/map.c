/* map() and filter() iterators. Both work on the caller's element in place, so they add no
 * copies and no allocation to the chain. A function with per-op state (pipe_fn.bind) is bound
 * when the first element arrives, on the thread that runs the chain, and unbound when the
 * iterator is destroyed. */
#include "map.h"

#include "common/error.h"
#include "common/perm.h"
#include "shuffle.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

struct map_iter {
    struct pipe_iter base;
    struct pipe_iter *up;
    const struct pipe_fn *fn;
    enum pipe_fn_kind kind; /* what this op uses fn as: PIPE_FN_MAP or PIPE_FN_FILTER */
    struct sluice_fn_args args;
    bool origin;                  /* ctx->origin is the origin of the element in hand */
    void *user;                   /* fn->user, or the state bind returned */
    bool bound;                   /* bind succeeded: unbind on destroy */
    int rc;                       /* sticky error */
    bool done;                    /* upstream ended */
    char why[SLUICE_ERRMSG_SIZE]; /* the function's reason for a failure */
};

/* Records a function's failure with the op in front of its reason: "map(NAME): why", or
 * "map(NAME, "ARG0"): why" for a function whose first argument names what runs; and the
 * record's origin after it when it is known. */
static int fn_failed(struct map_iter *m, int rc, const char *why)
{
    if (rc >= 0)
        rc = SLUICE_ERR_FN;
    const char *kind = m->kind == PIPE_FN_MAP ? "map" : "filter";
    const char *reason = why[0] ? why : sluice_strerror(rc);
    struct pipe_ctx *ctx = m->base.ctx;
    char where[320] = "";
    if (m->origin && ctx->origin.file)
        snprintf(where, sizeof where, " (record at %s offset %" PRIu64 ")", ctx->origin.file,
                 ctx->origin.offset);
    const struct pipe_value *a0 = m->args.n > 0 ? &m->args.v[0] : NULL;
    if (m->fn->label_arg0 && a0 && a0->kind == PIPE_VAL_BYTES)
        m->rc = err_set(ctx->err, sizeof(ctx->err), rc, "%s(%s, \"%.*s\"): %s%s", kind, m->fn->name,
                        (int)(a0->slen > 200 ? 200 : a0->slen), a0->s ? a0->s : "", reason, where);
    else
        m->rc = err_set(ctx->err, sizeof(ctx->err), rc, "%s(%s): %s%s", kind, m->fn->name, reason,
                        where);
    return m->rc;
}

/* Binds the function's per-op state before its first call; 0 or the op's failure. */
static int bind_once(struct map_iter *m)
{
    if (m->bound || !m->fn->bind)
        return 0;
    m->why[0] = '\0';
    void *state = NULL;
    int rc = m->fn->bind(&m->args, m->fn->user, &state, m->why, sizeof(m->why));
    if (rc)
        return fn_failed(m, rc, m->why);
    m->user = state;
    m->bound = true;
    return 0;
}

/* Two values into one, order-sensitive. */
static uint64_t combine(uint64_t a, uint64_t b)
{
    return perm_mix64(a ^ perm_mix64(b + 0x9e3779b97f4a7c15ULL));
}

uint64_t pipe_fn_seed(const struct sluice_fn_args *args, bool has_seed, int64_t seed)
{
    uint64_t key;
    if (args->split_keyed)
        key = combine(args->key, has_seed ? (uint64_t)seed : 0);
    else if (has_seed)
        key = pipe_salt_mix(combine(0x243f6a8885a308d3ULL, (uint64_t)seed), args->salt);
    else
        key = args->key;
    return combine(key, args->index);
}

static int map_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct map_iter *m = (struct map_iter *)it;
    if (m->rc || m->done)
        return m->rc;
    int rc = pipe_next(m->up, out);
    if (rc != 1) {
        if (rc < 0)
            m->rc = rc;
        m->done = rc == 0;
        return rc;
    }
    if ((rc = bind_once(m)) != 0)
        return rc;
    m->why[0] = '\0';
    /* Refused before the function allocates, when its output's size is known up front. */
    struct pipe_ctx *ctx = it->ctx;
    uint64_t size = ctx->max_element_bytes && m->fn->size ? m->fn->size(out, &m->args) : 0;
    if (pipe_over_limit(ctx, size))
        return fn_failed(
            m, pipe_limit_msg(m->why, sizeof(m->why), "", size, ctx->max_element_bytes, false),
            m->why);
    rc = m->fn->map(out, &m->args, m->user, m->why, sizeof(m->why));
    m->args.index++;
    if (rc)
        return fn_failed(m, rc, m->why);
    /* Any other function (a plugin's, py): its element goes no further than here. */
    if (ctx->max_element_bytes && pipe_over_limit(ctx, size = pipe_elem_size(out)))
        return fn_failed(
            m, pipe_limit_msg(m->why, sizeof(m->why), "", size, ctx->max_element_bytes, false),
            m->why);
    return 1;
}

static int filter_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct map_iter *m = (struct map_iter *)it;
    if (m->rc || m->done)
        return m->rc;
    for (;;) {
        int rc = pipe_next(m->up, out);
        if (rc != 1) {
            if (rc < 0)
                m->rc = rc;
            m->done = rc == 0;
            return rc;
        }
        if ((rc = bind_once(m)) != 0)
            return rc;
        int keep = 0;
        m->why[0] = '\0';
        rc = m->fn->filter(out, &m->args, m->user, &keep, m->why, sizeof(m->why));
        m->args.index++;
        if (rc)
            return fn_failed(m, rc, m->why);
        if (keep)
            return 1;
        /* A filter may drop elements for ever; cancellation must still get through. */
        if (pipe_cancelled(it->ctx)) {
            m->rc = err_set(it->ctx->err, sizeof(it->ctx->err), SLUICE_ERR_CANCELLED, "cancelled");
            return m->rc;
        }
    }
}

static void map_destroy(struct pipe_iter *it)
{
    struct map_iter *m = (struct map_iter *)it;
    m->up->ops->destroy(m->up);
    if (m->bound && m->fn->unbind)
        m->fn->unbind(m->user, m->fn->user);
    free(m);
}

static const struct pipe_iter_ops map_ops = {map_next, map_destroy};
static const struct pipe_iter_ops filter_ops = {filter_next, map_destroy};

int pipe_map_open(const struct pipe_fn *fn, enum pipe_fn_kind kind, const struct pipe_value *args,
                  size_t nargs, const struct pipe_map_env *env, struct pipe_iter *upstream,
                  struct pipe_ctx *ctx, struct pipe_iter **out)
{
    static const struct pipe_map_env none = {false, 0, 0, false};
    if (!env)
        env = &none;
    struct map_iter *m = calloc(1, sizeof(*m));
    if (!m) {
        upstream->ops->destroy(upstream);
        return SLUICE_ERR_NOMEM;
    }
    m->args.key = pipe_salt_mix(env->key, env->salt);
    m->args.salt = env->salt;
    m->args.split_keyed = env->split_keyed;
    m->args.ctx = ctx;
    m->origin = env->origin;
    m->base.ops = kind == PIPE_FN_MAP ? &map_ops : &filter_ops;
    m->base.ctx = ctx;
    m->up = upstream;
    m->fn = fn;
    m->kind = kind;
    m->args.v = args;
    m->args.n = nargs;
    m->user = fn->user;
    *out = &m->base;
    return 0;
}
