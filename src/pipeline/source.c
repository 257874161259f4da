/* range() and list() sources over index spans, and the conversion of list() literals. */
#include "source.h"

#include "common/error.h"
#include "common/perm.h"
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Span cursor, shared by both sources --------------------------------------------------- */

struct cursor {
    struct pipe_span *spans; /* owned; points at whole when reading the whole sequence */
    struct pipe_span whole;
    size_t nspans, next_span;
    uint64_t len;    /* sequence length, for clamping */
    uint64_t k, end; /* current span: next position and end */
    uint64_t pass;   /* current span's pass */
    bool viewed;     /* spans are positions of view, mapped to indices below len */
    struct pipe_dist view;
    /* global_shuffle: the permutation of the pass perm_pass, prepared when the pass changes. */
    struct pipe_src_shuffle shuffle;
    struct perm perm;
    uint64_t perm_pass;
};

static int cursor_init(struct cursor *c, uint64_t len, const struct pipe_span *spans, size_t nspans,
                       const struct pipe_dist *view, const struct pipe_src_shuffle *shuffle)
{
    c->len = len;
    if (shuffle) {
        c->shuffle = *shuffle;
        c->perm_pass = shuffle->pass;
        perm_init(&c->perm, perm_key(shuffle->seed, shuffle->pass, 0), len);
    }
    /* A view that maps every position to itself (the plain source split up) is no view: the
     * per-element mapping is skipped. Not under global_shuffle, whose passes come from it. */
    c->viewed = view && (shuffle || !(view->offset == 0 && view->stride == 1 && view->skip == 0 &&
                                      view->count == len && view->len == len));
    if (c->viewed)
        c->view = *view;
    c->k = c->end = 0;
    c->next_span = 0;
    if (!spans) {
        c->whole = (struct pipe_span){0, len};
        c->spans = &c->whole;
        c->nspans = 1;
        return 0;
    }
    c->nspans = nspans;
    c->spans = NULL;
    if (nspans == 0)
        return 0;
    c->spans = malloc(nspans * sizeof(*spans));
    if (!c->spans)
        return SLUICE_ERR_NOMEM;
    memcpy(c->spans, spans, nspans * sizeof(*spans));
    return 0;
}

static void cursor_release(struct cursor *c)
{
    if (c->spans != &c->whole)
        free(c->spans);
}

/* Returns the next index into *k, or false at the end of the last span. */
static inline bool cursor_next(struct cursor *c, uint64_t *k)
{
    uint64_t lim = c->viewed ? c->view.len : c->len;
    while (c->k == c->end) {
        if (c->next_span == c->nspans)
            return false;
        const struct pipe_span *s = &c->spans[c->next_span++];
        c->pass = s->pass;
        c->k = s->begin < lim ? s->begin : lim;
        c->end = s->end < lim ? s->end : lim;
        if (c->end < c->k)
            c->end = c->k;
    }
    *k = c->k++;
    if (c->viewed) {
        *k = pipe_dist_index(&c->view, *k);
        /* A view from a plan that does not fit this source ends the sequence rather than read
         * outside it (workers check plans against their own analysis first). */
        if (*k >= c->len) {
            c->k = c->end;
            c->next_span = c->nspans;
            return false;
        }
    }
    return true;
}

/* cursor_next through global_shuffle's permutation. */
static bool cursor_next_shuffled(struct cursor *c, uint64_t *k)
{
    if (!cursor_next(c, k))
        return false;
    if (c->viewed) {
        /* c->k - 1 is the view position just read (of the span cursor_next moved to). */
        uint64_t pass = pipe_dist_pass(&c->view, c->pass, c->k - 1);
        if (pass != c->perm_pass) {
            c->perm_pass = pass;
            perm_init(&c->perm, perm_key(c->shuffle.seed, pass, 0), c->len);
        }
    }
    *k = perm_apply(&c->perm, *k);
    return true;
}

/* ---- range() ----------------------------------------------------------------------------- */

struct range_iter {
    struct pipe_iter base;
    struct cursor cur;
    uint64_t start, step; /* as two's complement bits: start + k * step wraps exactly */
    int rc;               /* sticky error */
};

static inline int range_emit(struct pipe_iter *it, uint64_t k, struct sluice_element *out)
{
    struct range_iter *r = (struct range_iter *)it;
    int rc = 0;
    if (out->n != 1)
        rc = pipe_elem_resize(out, 1);
    if (!rc)
        rc = pipe_tensor_set_i64(&out->t[0], (int64_t)(r->start + k * r->step));
    if (rc) {
        r->rc = err_set(it->ctx->err, sizeof(it->ctx->err), rc, "range: %s", sluice_strerror(rc));
        return rc;
    }
    return 1;
}

static int range_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct range_iter *r = (struct range_iter *)it;
    uint64_t k;
    if (r->rc)
        return r->rc;
    if (!cursor_next(&r->cur, &k))
        return 0;
    return range_emit(it, k, out);
}

static int range_next_shuffled(struct pipe_iter *it, struct sluice_element *out)
{
    struct range_iter *r = (struct range_iter *)it;
    uint64_t k;
    if (r->rc)
        return r->rc;
    if (!cursor_next_shuffled(&r->cur, &k))
        return 0;
    return range_emit(it, k, out);
}

static void range_destroy(struct pipe_iter *it)
{
    struct range_iter *r = (struct range_iter *)it;
    cursor_release(&r->cur);
    free(r);
}

static const struct pipe_iter_ops range_ops = {range_next, range_destroy};
static const struct pipe_iter_ops range_shuffled_ops = {range_next_shuffled, range_destroy};

int pipe_range_open(int64_t start, int64_t step, uint64_t len, const struct pipe_span *spans,
                    size_t nspans, const struct pipe_dist *view,
                    const struct pipe_src_shuffle *shuffle, struct pipe_ctx *ctx,
                    struct pipe_iter **out)
{
    struct range_iter *r = calloc(1, sizeof(*r));
    if (!r)
        return SLUICE_ERR_NOMEM;
    if (cursor_init(&r->cur, len, spans, nspans, view, shuffle)) {
        free(r);
        return SLUICE_ERR_NOMEM;
    }
    r->base.ops = shuffle ? &range_shuffled_ops : &range_ops;
    r->base.ctx = ctx;
    r->start = (uint64_t)start;
    r->step = (uint64_t)step;
    *out = &r->base;
    return 0;
}

/* ---- list() ------------------------------------------------------------------------------ */

struct list_iter {
    struct pipe_iter base;
    struct cursor cur;
    const struct sluice_element *elems;
    int rc;
};

static inline int list_emit(struct list_iter *l, uint64_t k, struct sluice_element *out)
{
    struct pipe_iter *it = &l->base;
    int rc = pipe_elem_copy(out, &l->elems[k]);
    if (rc) {
        l->rc = err_set(it->ctx->err, sizeof(it->ctx->err), rc, "list: %s", sluice_strerror(rc));
        return rc;
    }
    return 1;
}

static int list_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct list_iter *l = (struct list_iter *)it;
    uint64_t k;
    if (l->rc)
        return l->rc;
    if (!cursor_next(&l->cur, &k))
        return 0;
    return list_emit(l, k, out);
}

static int list_next_shuffled(struct pipe_iter *it, struct sluice_element *out)
{
    struct list_iter *l = (struct list_iter *)it;
    uint64_t k;
    if (l->rc)
        return l->rc;
    if (!cursor_next_shuffled(&l->cur, &k))
        return 0;
    return list_emit(l, k, out);
}

static void list_destroy(struct pipe_iter *it)
{
    struct list_iter *l = (struct list_iter *)it;
    cursor_release(&l->cur);
    free(l);
}

static const struct pipe_iter_ops list_ops = {list_next, list_destroy};
static const struct pipe_iter_ops list_shuffled_ops = {list_next_shuffled, list_destroy};

int pipe_list_open(const struct sluice_element *elems, size_t n, const struct pipe_span *spans,
                   size_t nspans, const struct pipe_dist *view,
                   const struct pipe_src_shuffle *shuffle, struct pipe_ctx *ctx,
                   struct pipe_iter **out)
{
    struct list_iter *l = calloc(1, sizeof(*l));
    if (!l)
        return SLUICE_ERR_NOMEM;
    if (cursor_init(&l->cur, n, spans, nspans, view, shuffle)) {
        free(l);
        return SLUICE_ERR_NOMEM;
    }
    l->base.ops = shuffle ? &list_shuffled_ops : &list_ops;
    l->base.ctx = ctx;
    l->elems = elems;
    *out = &l->base;
    return 0;
}

/* ---- list() literals to elements --------------------------------------------------------- */

/* Leaf kinds seen in a [list] literal decide its dtype. */
struct leaves {
    bool ints, floats, bools, strings;
    uint64_t count;
    size_t bytes; /* total string length */
};

/* Walks a list literal of the given shape, checking that it is rectangular and that leaves are
 * scalars of compatible kinds. Returns 0 or SLUICE_ERR_INVALID with the reason in why. */
static int list_scan(const struct pipe_value *v, const int64_t *shape, int rank, int depth,
                     struct leaves *lv, char *why, size_t len)
{
    if (depth == rank) {
        switch (v->kind) {
        case PIPE_VAL_INT:
            lv->ints = true;
            break;
        case PIPE_VAL_FLOAT:
            lv->floats = true;
            break;
        case PIPE_VAL_BOOL:
            lv->bools = true;
            break;
        case PIPE_VAL_BYTES:
            lv->strings = true;
            if (v->slen > SIZE_MAX - lv->bytes)
                return err_set(why, len, SLUICE_ERR_INVALID, "strings too long");
            lv->bytes += v->slen;
            break;
        case PIPE_VAL_LIST:
            return err_set(why, len, SLUICE_ERR_INVALID,
                           "ragged list: a list where a scalar was expected at depth %d", depth);
        case PIPE_VAL_TUPLE:
            return err_set(why, len, SLUICE_ERR_INVALID, "a tuple inside a list");
        }
        lv->count++;
        return 0;
    }
    if (v->kind != PIPE_VAL_LIST)
        return err_set(why, len, SLUICE_ERR_INVALID,
                       "ragged list: a scalar where a list was expected at depth %d", depth);
    if ((int64_t)v->nitems != shape[depth])
        return err_set(why, len, SLUICE_ERR_INVALID,
                       "ragged list: %zu items at depth %d, expected %lld", v->nitems, depth,
                       (long long)shape[depth]);
    for (size_t i = 0; i < v->nitems; i++) {
        int rc = list_scan(&v->items[i], shape, rank, depth + 1, lv, why, len);
        if (rc)
            return rc;
    }
    return 0;
}

/* Appends the leaves of v, row-major, to t (already reserved); *k counts values written. */
static void list_fill(const struct pipe_value *v, struct pipe_tensor *t, uint64_t *k)
{
    if (v->kind == PIPE_VAL_LIST) {
        for (size_t i = 0; i < v->nitems; i++)
            list_fill(&v->items[i], t, k);
        return;
    }
    uint64_t j = (*k)++;
    switch (t->dtype) {
    case SLUICE_INT64:
        ((int64_t *)(void *)t->data)[j] = v->i;
        break;
    case SLUICE_FLOAT64:
        ((double *)(void *)t->data)[j] = v->kind == PIPE_VAL_FLOAT ? v->f : (double)v->i;
        break;
    case SLUICE_BOOL:
        t->data[j] = v->i != 0;
        break;
    case SLUICE_BYTES:
        if (v->slen)
            memcpy(t->data + t->offs[j], v->s, v->slen);
        t->offs[j + 1] = t->offs[j] + v->slen;
        break;
    default:
        break;
    }
}

static int list_to_tensor(const struct pipe_value *v, struct pipe_tensor *t, char *why, size_t len)
{
    int64_t shape[SLUICE_MAX_RANK];
    int rank = 0;
    for (const struct pipe_value *c = v; c->kind == PIPE_VAL_LIST;) {
        if (rank == SLUICE_MAX_RANK)
            return err_set(why, len, SLUICE_ERR_INVALID, "more than %d nested lists",
                           SLUICE_MAX_RANK);
        shape[rank++] = (int64_t)c->nitems;
        if (c->nitems == 0)
            break;
        c = &c->items[0];
    }
    struct leaves lv = {0};
    int rc = list_scan(v, shape, rank, 0, &lv, why, len);
    if (rc)
        return rc;
    int kinds = (lv.ints || lv.floats) + lv.bools + lv.strings;
    if (kinds > 1)
        return err_set(why, len, SLUICE_ERR_INVALID, "a list mixes %s",
                       lv.strings && lv.bools ? "strings and booleans"
                       : lv.strings           ? "strings and numbers"
                                              : "booleans and numbers");

    enum sluice_dtype dtype = SLUICE_FLOAT64;
    if (lv.strings)
        dtype = SLUICE_BYTES;
    else if (lv.bools)
        dtype = SLUICE_BOOL;
    else if (lv.ints && !lv.floats)
        dtype = SLUICE_INT64;
    size_t nbytes = dtype == SLUICE_BYTES ? lv.bytes : (size_t)lv.count * sluice_dtype_size(dtype);

    /* An empty bytes scalar first makes the tensor a bytes tensor, so offsets get reserved. */
    rc = dtype == SLUICE_BYTES ? pipe_tensor_set_bytes(t, NULL, 0) : 0;
    if (!rc)
        rc = pipe_tensor_reserve(t, nbytes, (size_t)lv.count);
    if (rc)
        return err_set(why, len, rc, "%s", sluice_strerror(rc));
    t->dtype = dtype;
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof(int64_t));
    t->len = nbytes;
    if (dtype == SLUICE_BYTES)
        t->offs[0] = 0;
    uint64_t k = 0;
    list_fill(v, t, &k);
    return 0;
}

static int value_to_tensor(const struct pipe_value *v, struct pipe_tensor *t, char *why, size_t len)
{
    int rc = 0;
    switch (v->kind) {
    case PIPE_VAL_INT:
        rc = pipe_tensor_set_i64(t, v->i);
        break;
    case PIPE_VAL_FLOAT:
        rc = pipe_tensor_set_scalar(t, SLUICE_FLOAT64, &v->f);
        break;
    case PIPE_VAL_BOOL: {
        uint8_t b = v->i != 0;
        rc = pipe_tensor_set_scalar(t, SLUICE_BOOL, &b);
        break;
    }
    case PIPE_VAL_BYTES:
        rc = pipe_tensor_set_bytes(t, v->s, v->slen);
        break;
    case PIPE_VAL_LIST:
        return list_to_tensor(v, t, why, len);
    case PIPE_VAL_TUPLE:
        return err_set(why, len, SLUICE_ERR_INVALID, "a tuple inside a tuple");
    }
    if (rc)
        return err_set(why, len, rc, "%s", sluice_strerror(rc));
    return 0;
}

static int value_to_elem(const struct pipe_value *v, struct sluice_element *e, char *why,
                         size_t len)
{
    if (v->kind != PIPE_VAL_TUPLE) {
        int rc = pipe_elem_resize(e, 1);
        if (rc)
            return err_set(why, len, rc, "%s", sluice_strerror(rc));
        return value_to_tensor(v, &e->t[0], why, len);
    }
    if (v->nitems == 0 || v->nitems > PIPE_MAX_COMPONENTS)
        return err_set(why, len, SLUICE_ERR_INVALID, "a tuple needs 1 to %d items, has %zu",
                       PIPE_MAX_COMPONENTS, v->nitems);
    int rc = pipe_elem_resize(e, v->nitems);
    if (rc)
        return err_set(why, len, rc, "%s", sluice_strerror(rc));
    for (size_t i = 0; i < v->nitems; i++) {
        rc = value_to_tensor(&v->items[i], &e->t[i], why, len);
        if (rc)
            return rc;
    }
    return 0;
}

void pipe_list_elems_free(struct sluice_element *elems, size_t n)
{
    if (!elems)
        return;
    for (size_t i = 0; i < n; i++)
        pipe_elem_release(&elems[i]);
    free(elems);
}

int pipe_list_convert(const struct pipe_value *values, size_t n, int column,
                      struct sluice_element **out, char *err, size_t errlen)
{
    *out = NULL;
    struct sluice_element *elems = calloc(n ? n : 1, sizeof(*elems));
    if (!elems)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "column %d: list: out of memory", column);
    for (size_t i = 0; i < n; i++) {
        char why[SLUICE_ERRMSG_SIZE];
        int rc = value_to_elem(&values[i], &elems[i], why, sizeof(why));
        if (rc) {
            pipe_list_elems_free(elems, n);
            return err_set(err, errlen, rc, "column %d: list value %zu: %s", column, i, why);
        }
    }
    *out = elems;
    return 0;
}
