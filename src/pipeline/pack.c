/* pack(): documents of tokens into fixed-length sequences (see pack.h).
 *
 * The open sequences ("bins") live in a table of WINDOW slots whose buffers are allocated when a
 * slot is first used and kept for the iterator's life, so a steady stream allocates nothing. A
 * document is converted to int32 once into a buffer of the iterator's and then consumed chunk by
 * chunk across calls: one call of next() emits at most one sequence. */
#include "pack.h"

#include "common/error.h"
#include "common/grow.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bin {
    int32_t *tok, *seg, *pos; /* seq_len each, allocated on first use */
    uint32_t used;            /* tokens placed */
    uint32_t nseg;            /* documents placed */
    uint64_t order;           /* when it was opened: the tie-break and the flush order */
    bool open;
};

struct pack_iter {
    struct pipe_iter base;
    struct pipe_iter *up;
    uint32_t seq_len;
    bool first_fit;
    uint32_t window;
    struct bin *bins; /* window slots */
    uint32_t nopen;
    uint64_t opened; /* bins opened so far: the next bin's order */
    struct sluice_element scratch;
    uint8_t *doc; /* the document being placed, as int32 */
    size_t doc_cap;
    uint64_t doc_len, doc_off; /* tokens, and tokens already placed or emitted */
    uint64_t pulled;           /* upstream elements seen, for messages */
    int rc;
    bool ended; /* upstream ended: flushing the open bins */
    bool done;
};

const char *pipe_pack_problem(int64_t seq_len, int64_t window)
{
    if (seq_len < 1 || seq_len > PIPE_PACK_SEQ_LEN_MAX)
        return "the sequence length must be in [1, 16777216]";
    if (window < 1 || window > PIPE_PACK_WINDOW_MAX)
        return "the window must be in [1, 4096] open sequences";
    if (seq_len * window > PIPE_PACK_OPEN_TOKENS_MAX)
        return "the window's open sequences would hold more than 67108864 tokens (window "
               "times sequence length)";
    return NULL;
}

static int fail(struct pack_iter *p, struct sluice_element *out, int rc)
{
    pipe_elem_resize(out, 0);
    p->rc = rc;
    p->done = true;
    return rc;
}

/* Converts the scratch element (one document) into p->doc as int32. */
static int take_document(struct pack_iter *p)
{
    struct pipe_ctx *ctx = p->base.ctx;
    const struct sluice_element *e = &p->scratch;
    unsigned long long idx = (unsigned long long)(p->pulled - 1);
    if (e->n != 1)
        return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_TYPE,
                       "pack: element %llu has %zu components; pack takes one 1-D integer tensor "
                       "of tokens per document",
                       idx, e->n);
    const struct pipe_tensor *t = &e->t[0];
    enum sluice_dtype d = t->dtype;
    bool integer = d == SLUICE_INT8 || d == SLUICE_INT16 || d == SLUICE_INT32 ||
                   d == SLUICE_INT64 || d == SLUICE_UINT8 || d == SLUICE_UINT16 ||
                   d == SLUICE_UINT32 || d == SLUICE_UINT64;
    if (t->rank != 1 || !integer)
        return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_TYPE,
                       "pack: element %llu is a rank-%d %s tensor; pack takes a 1-D integer "
                       "tensor of tokens (map(tokenize, ...) makes one)",
                       idx, t->rank, sluice_dtype_name(d));
    uint64_t n = (uint64_t)t->shape[0];
    if (n > SIZE_MAX / 4)
        return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_TOO_LARGE,
                       "pack: element %llu: %" PRIu64 " tokens", idx, n);
    int rc = grow_bytes(&p->doc, &p->doc_cap, (size_t)n * 4, 4096);
    if (rc)
        return err_set(ctx->err, sizeof ctx->err, rc, "pack: %s", sluice_strerror(rc));
    int32_t *dst = (int32_t *)(void *)p->doc;
    const uint8_t *src = t->data;
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        switch (d) {
        case SLUICE_INT8:
            v = ((const int8_t *)src)[i];
            break;
        case SLUICE_INT16:
            v = ((const int16_t *)(const void *)src)[i];
            break;
        case SLUICE_INT32:
            v = ((const int32_t *)(const void *)src)[i];
            break;
        case SLUICE_UINT8:
            v = src[i];
            break;
        case SLUICE_UINT16:
            v = ((const uint16_t *)(const void *)src)[i];
            break;
        case SLUICE_UINT32:
            v = ((const uint32_t *)(const void *)src)[i];
            break;
        case SLUICE_UINT64: {
            uint64_t u = ((const uint64_t *)(const void *)src)[i];
            v = u > INT32_MAX ? INT64_MAX : (int64_t)u;
            break;
        }
        default:
            v = ((const int64_t *)(const void *)src)[i];
            break;
        }
        if (v < INT32_MIN || v > INT32_MAX)
            return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_TYPE,
                           "pack: element %llu: token %" PRIu64 " does not fit in int32", idx, i);
        dst[i] = (int32_t)v;
    }
    p->doc_len = n;
    p->doc_off = 0;
    return 0;
}

/* Shapes out as the tuple of three int32 tensors of seq_len, contents unset. */
static int shape_output(struct pack_iter *p, struct sluice_element *out)
{
    int rc = pipe_elem_resize(out, 3);
    size_t bytes = (size_t)p->seq_len * 4;
    for (int c = 0; c < 3 && !rc; c++) {
        struct pipe_tensor *t = &out->t[c];
        t->dtype = SLUICE_INT32;
        if ((rc = pipe_tensor_reserve(t, bytes, 0)) != 0)
            break;
        t->rank = 1;
        t->shape[0] = p->seq_len;
        t->len = bytes;
    }
    if (rc)
        return err_set(p->base.ctx->err, sizeof p->base.ctx->err, rc, "pack: %s",
                       sluice_strerror(rc));
    return 0;
}

/* Writes the tokens of bin b (padded) as the output tuple. */
static int emit(struct pack_iter *p, const struct bin *b, struct sluice_element *out)
{
    int rc = shape_output(p, out);
    if (rc)
        return rc;
    size_t bytes = (size_t)p->seq_len * 4, fill = (size_t)b->used * 4;
    const int32_t *src[3] = {b->tok, b->seg, b->pos};
    for (int c = 0; c < 3; c++) {
        memcpy(out->t[c].data, src[c], fill);
        memset(out->t[c].data + fill, 0, bytes - fill);
    }
    return 1;
}

/* Emits the chunk [off, off + seq_len) of the document as a sequence of its own. */
static int emit_chunk(struct pack_iter *p, struct sluice_element *out)
{
    int rc = shape_output(p, out);
    if (rc)
        return rc;
    memcpy(out->t[0].data, p->doc + p->doc_off * 4, (size_t)p->seq_len * 4);
    int32_t *seg = (int32_t *)(void *)out->t[1].data, *pos = (int32_t *)(void *)out->t[2].data;
    for (uint32_t i = 0; i < p->seq_len; i++) {
        seg[i] = 1;
        pos[i] = (int32_t)i;
    }
    p->doc_off += p->seq_len;
    return 1;
}

/* The open bin a piece of n tokens goes into, or NULL. */
static struct bin *find_bin(struct pack_iter *p, uint32_t n)
{
    struct bin *best = NULL;
    for (uint32_t i = 0; i < p->window; i++) {
        struct bin *b = &p->bins[i];
        if (!b->open || p->seq_len - b->used < n)
            continue;
        if (!best)
            best = b;
        else if (p->first_fit
                     ? b->order < best->order
                     : b->used > best->used || (b->used == best->used && b->order < best->order))
            best = b;
    }
    return best;
}

/* The open bin to emit to make room: the fullest (best_fit) or the oldest (first_fit), ties to
 * the oldest; with fullest false, the oldest (the flush at the end). */
static struct bin *victim(struct pack_iter *p, bool fullest)
{
    struct bin *v = NULL;
    for (uint32_t i = 0; i < p->window; i++) {
        struct bin *b = &p->bins[i];
        if (!b->open)
            continue;
        if (!v || (fullest && b->used > v->used) ||
            ((!fullest || b->used == v->used) && b->order < v->order))
            v = b;
    }
    return v;
}

static int open_bin(struct pack_iter *p, struct bin *b)
{
    if (!b->tok) {
        size_t bytes = (size_t)p->seq_len * 4;
        b->tok = malloc(bytes);
        b->seg = malloc(bytes);
        b->pos = malloc(bytes);
        if (!b->tok || !b->seg || !b->pos)
            return err_set(p->base.ctx->err, sizeof p->base.ctx->err, SLUICE_ERR_NOMEM, "pack: %s",
                           sluice_strerror(SLUICE_ERR_NOMEM));
    }
    b->used = 0;
    b->nseg = 0;
    b->order = p->opened++;
    b->open = true;
    p->nopen++;
    return 0;
}

static void place(struct pack_iter *p, struct bin *b, uint32_t n)
{
    memcpy(b->tok + b->used, p->doc + p->doc_off * 4, (size_t)n * 4);
    int32_t s = (int32_t)++b->nseg;
    for (uint32_t i = 0; i < n; i++) {
        b->seg[b->used + i] = s;
        b->pos[b->used + i] = (int32_t)i;
    }
    b->used += n;
    p->doc_off += n;
}

static void close_bin(struct pack_iter *p, struct bin *b)
{
    b->open = false;
    p->nopen--;
}

static int pack_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct pack_iter *p = (struct pack_iter *)it;
    struct pipe_ctx *ctx = it->ctx;
    if (p->done)
        return p->rc;
    uint64_t bytes = (uint64_t)p->seq_len * 12;
    if (pipe_over_limit(ctx, bytes))
        return fail(p, out, pipe_limit_fail(ctx, "pack: ", bytes, false));
    for (;;) {
        if (p->ended) {
            struct bin *b = victim(p, false);
            if (!b) {
                p->done = true;
                return 0;
            }
            int rc = emit(p, b, out);
            close_bin(p, b);
            return rc < 0 ? fail(p, out, rc) : rc;
        }
        uint64_t left = p->doc_len - p->doc_off;
        if (left >= p->seq_len) {
            int rc = emit_chunk(p, out);
            return rc < 0 ? fail(p, out, rc) : rc;
        }
        if (left > 0) {
            uint32_t n = (uint32_t)left;
            struct bin *b = find_bin(p, n);
            if (b) {
                place(p, b, n);
                if (b->used < p->seq_len)
                    continue;
                int rc = emit(p, b, out);
                close_bin(p, b);
                return rc < 0 ? fail(p, out, rc) : rc;
            }
            bool emitted = false;
            if (p->nopen == p->window) {
                b = victim(p, !p->first_fit);
                int rc = emit(p, b, out);
                if (rc < 0)
                    return fail(p, out, rc);
                close_bin(p, b);
                emitted = true;
            } else {
                for (uint32_t i = 0; i < p->window && !b; i++)
                    if (!p->bins[i].open)
                        b = &p->bins[i];
            }
            assert(b);
            int rc = open_bin(p, b);
            if (rc)
                return fail(p, out, rc);
            place(p, b, n);
            if (emitted)
                return 1;
            continue;
        }
        if (pipe_cancelled(ctx))
            return fail(p, out,
                        err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_CANCELLED, "cancelled"));
        int rc = pipe_next(p->up, &p->scratch);
        if (rc < 0)
            return fail(p, out, rc);
        if (rc == 0) {
            p->ended = true;
            continue;
        }
        p->pulled++;
        if ((rc = take_document(p)) != 0)
            return fail(p, out, rc);
    }
}

static void pack_destroy(struct pipe_iter *it)
{
    struct pack_iter *p = (struct pack_iter *)it;
    p->up->ops->destroy(p->up);
    for (uint32_t i = 0; i < p->window; i++) {
        free(p->bins[i].tok);
        free(p->bins[i].seg);
        free(p->bins[i].pos);
    }
    free(p->bins);
    free(p->doc);
    pipe_elem_release(&p->scratch);
    free(p);
}

static const struct pipe_iter_ops pack_ops = {pack_next, pack_destroy};

int pipe_pack_open(int64_t seq_len, bool first_fit, int64_t window, struct pipe_iter *upstream,
                   struct pipe_ctx *ctx, struct pipe_iter **out)
{
    assert(!pipe_pack_problem(seq_len, window));
    struct pack_iter *p = calloc(1, sizeof *p);
    struct bin *bins = calloc((size_t)window, sizeof *bins);
    if (!p || !bins) {
        free(p);
        free(bins);
        upstream->ops->destroy(upstream);
        return SLUICE_ERR_NOMEM;
    }
    p->base.ops = &pack_ops;
    p->base.ctx = ctx;
    p->up = upstream;
    p->seq_len = (uint32_t)seq_len;
    p->first_fit = first_fit;
    p->window = (uint32_t)window;
    p->bins = bins;
    pipe_elem_init(&p->scratch);
    *out = &p->base;
    return 0;
}
