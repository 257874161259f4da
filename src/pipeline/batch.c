/* batch(): upstream elements are pulled into a scratch element owned by the iterator and
 * appended to the caller's element, whose buffers grow only while batches grow; a steady stream
 * of equal batches performs no allocation. While a batch is being built, each output tensor's
 * len is the bytes filled so far and shape[0] is set when the batch is complete. */
#include "batch.h"

#include "common/error.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct batch_iter {
    struct pipe_iter base;
    struct pipe_iter *up;
    uint64_t n;
    bool drop_remainder;
    struct sluice_element scratch;
    uint64_t pulled; /* upstream elements seen, for error messages */
    uint64_t bytes;  /* the size (pipe_elem_size) of the batch being built, as it grows */
    int rc;
    bool done;
};

static void describe(const struct pipe_tensor *t, int skip_dims, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "%s [", sluice_dtype_name(t->dtype));
    for (int d = skip_dims; d < t->rank && off < len; d++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", d > skip_dims ? ", " : "",
                                (long long)t->shape[d]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

static int fail(struct batch_iter *b, struct sluice_element *out, int rc)
{
    /* The half-built output is left with no components, which is always a valid element. */
    pipe_elem_resize(out, 0);
    b->rc = rc;
    b->done = true;
    return rc;
}

/* Shapes the output after the first element of a batch: one more dimension, nothing filled. */
static int start_batch(struct batch_iter *b, struct sluice_element *out)
{
    const struct sluice_element *first = &b->scratch;
    struct pipe_ctx *ctx = b->base.ctx;
    for (size_t i = 0; i < first->n; i++)
        if (first->t[i].rank >= SLUICE_MAX_RANK)
            return err_set(ctx->err, sizeof(ctx->err), SLUICE_ERR_TYPE,
                           "batch: element %llu: component %zu already has rank %d, the maximum",
                           (unsigned long long)(b->pulled - 1), i, SLUICE_MAX_RANK);
    int rc = pipe_elem_resize(out, first->n);
    if (rc)
        return err_set(ctx->err, sizeof(ctx->err), rc, "batch: %s", sluice_strerror(rc));
    for (size_t i = 0; i < first->n; i++) {
        const struct pipe_tensor *s = &first->t[i];
        struct pipe_tensor *t = &out->t[i];
        if (s->dtype == SLUICE_BYTES && t->dtype != SLUICE_BYTES) {
            /* An empty bytes scalar makes later reservations include the offsets. */
            rc = pipe_tensor_set_bytes(t, NULL, 0);
            if (rc)
                return err_set(ctx->err, sizeof(ctx->err), rc, "batch: %s", sluice_strerror(rc));
        }
        t->dtype = s->dtype;
        t->rank = s->rank + 1;
        t->shape[0] = 0;
        memcpy(t->shape + 1, s->shape, (size_t)s->rank * sizeof(int64_t));
        t->len = 0;
        if (s->dtype == SLUICE_BYTES)
            t->offs[0] = 0;
    }
    return 0;
}

/* Whether e has the structure of the batch being built in out. */
static inline bool fits(const struct sluice_element *out, const struct sluice_element *e)
{
    if (e->n != out->n)
        return false;
    for (size_t i = 0; i < e->n; i++) {
        const struct pipe_tensor *o = &out->t[i], *t = &e->t[i];
        if (t->dtype != o->dtype || t->rank + 1 != o->rank)
            return false;
        for (int d = 0; d < t->rank; d++)
            if (t->shape[d] != o->shape[d + 1])
                return false;
    }
    return true;
}

static int mismatch(struct batch_iter *b, const struct sluice_element *out, uint64_t first)
{
    const struct sluice_element *e = &b->scratch;
    struct pipe_ctx *ctx = b->base.ctx;
    unsigned long long idx = (unsigned long long)(b->pulled - 1);
    if (e->n != out->n)
        return err_set(ctx->err, sizeof(ctx->err), SLUICE_ERR_TYPE,
                       "batch: element %llu has %zu components, but element %llu, the first of "
                       "its batch, has %zu",
                       idx, e->n, (unsigned long long)first, out->n);
    for (size_t i = 0; i < e->n; i++) {
        char got[160], want[160];
        describe(&e->t[i], 0, got, sizeof(got));
        describe(&out->t[i], 1, want, sizeof(want));
        if (strcmp(got, want) != 0)
            return err_set(ctx->err, sizeof(ctx->err), SLUICE_ERR_TYPE,
                           "batch: element %llu has component %zu of %s, but element %llu, the "
                           "first of its batch, has %s",
                           idx, i, got, (unsigned long long)first, want);
    }
    return err_set(ctx->err, sizeof(ctx->err), SLUICE_ERR_TYPE,
                   "batch: element %llu does not match the first of its batch", idx);
}

/* What e adds to the size of a batch (pipe_elem_size of the stacked output): its value bytes,
 * and 8 per value of a bytes component (the batch's offsets). */
static uint64_t batch_share(const struct sluice_element *e)
{
    uint64_t n = 0;
    for (size_t i = 0; i < e->n; i++) {
        n += e->t[i].len;
        if (e->t[i].dtype == SLUICE_BYTES)
            n += 8 * pipe_tensor_num_values(&e->t[i]);
    }
    return n;
}

/* Appends the scratch element to the batch in out; count values of it are already there. */
static inline int append(struct sluice_element *out, const struct sluice_element *e, uint64_t count)
{
    for (size_t i = 0; i < e->n; i++) {
        struct pipe_tensor *t = &out->t[i];
        const struct pipe_tensor *s = &e->t[i];
        size_t need = t->len + s->len;
        if (need < t->len)
            return SLUICE_ERR_TOO_LARGE;
        if (s->dtype != SLUICE_BYTES) {
            if (need > t->cap) {
                int rc = pipe_tensor_reserve(t, need, 0);
                if (rc)
                    return rc;
            }
            if (s->len == 8)
                memcpy(t->data + t->len, s->data, 8);
            else if (s->len)
                memcpy(t->data + t->len, s->data, s->len);
            t->len = need;
            continue;
        }
        uint64_t per = pipe_tensor_num_values(s);
        uint64_t base = count * per; /* offsets already written: base + 1 */
        int rc = pipe_tensor_reserve(t, need, (size_t)(base + per));
        if (rc)
            return rc;
        if (s->len)
            memcpy(t->data + t->len, s->data, s->len);
        for (uint64_t k = 1; k <= per; k++)
            t->offs[base + k] = t->len + s->offs[k];
        t->len = need;
    }
    return 0;
}

static int batch_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct batch_iter *b = (struct batch_iter *)it;
    struct pipe_ctx *ctx = it->ctx;
    if (b->done)
        return b->rc;
    int rc = pipe_next(b->up, &b->scratch);
    if (rc != 1) {
        b->rc = rc < 0 ? rc : 0;
        b->done = true;
        return rc;
    }
    uint64_t first = b->pulled++;
    /* The batch is checked against the limit as it grows, before each element is copied in. */
    b->bytes = batch_share(&b->scratch);
    if (pipe_over_limit(ctx, b->bytes))
        return fail(b, out, pipe_limit_fail(ctx, "batch: ", b->bytes, true));
    rc = start_batch(b, out);
    if (!rc)
        rc = append(out, &b->scratch, 0);
    if (rc) {
        if (rc == SLUICE_ERR_NOMEM || rc == SLUICE_ERR_TOO_LARGE)
            err_set(ctx->err, sizeof(ctx->err), rc, "batch: %s", sluice_strerror(rc));
        return fail(b, out, rc);
    }
    uint64_t count = 1;
    while (count < b->n) {
        rc = pipe_next(b->up, &b->scratch);
        if (rc < 0)
            return fail(b, out, rc);
        if (rc == 0) {
            b->done = true;
            break;
        }
        b->pulled++;
        /* The common case of fixed-width scalars with room left: no calls, no loops. */
        const struct sluice_element *e = &b->scratch;
        struct pipe_tensor *t = out->t;
        if (e->n == 1 && out->n == 1 && t->rank == 1 && e->t->rank == 0 &&
            e->t->dtype == t->dtype && t->dtype != SLUICE_BYTES && t->len + e->t->len <= t->cap) {
            b->bytes += e->t->len;
            if (pipe_over_limit(ctx, b->bytes))
                return fail(b, out, pipe_limit_fail(ctx, "batch: ", b->bytes, true));
            memcpy(t->data + t->len, e->t->data, e->t->len);
            t->len += e->t->len;
            count++;
            continue;
        }
        if (!fits(out, &b->scratch))
            return fail(b, out, mismatch(b, out, first));
        b->bytes += batch_share(&b->scratch);
        if (pipe_over_limit(ctx, b->bytes))
            return fail(b, out, pipe_limit_fail(ctx, "batch: ", b->bytes, true));
        rc = append(out, &b->scratch, count);
        if (rc)
            return fail(b, out,
                        err_set(ctx->err, sizeof(ctx->err), rc, "batch: %s", sluice_strerror(rc)));
        count++;
    }
    if (count < b->n && b->drop_remainder) {
        pipe_elem_resize(out, 0);
        return 0;
    }
    for (size_t i = 0; i < out->n; i++)
        out->t[i].shape[0] = (int64_t)count;
    return 1;
}

static void batch_destroy(struct pipe_iter *it)
{
    struct batch_iter *b = (struct batch_iter *)it;
    b->up->ops->destroy(b->up);
    pipe_elem_release(&b->scratch);
    free(b);
}

static const struct pipe_iter_ops batch_ops = {batch_next, batch_destroy};

int pipe_batch_open(int64_t n, bool drop_remainder, struct pipe_iter *upstream,
                    struct pipe_ctx *ctx, struct pipe_iter **out)
{
    assert(n >= 1);
    struct batch_iter *b = calloc(1, sizeof(*b));
    if (!b) {
        upstream->ops->destroy(upstream);
        return SLUICE_ERR_NOMEM;
    }
    b->base.ops = &batch_ops;
    b->base.ctx = ctx;
    b->up = upstream;
    b->n = (uint64_t)n;
    b->drop_remainder = drop_remainder;
    pipe_elem_init(&b->scratch);
    *out = &b->base;
    return 0;
}
