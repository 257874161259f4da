/* The element model: tensors that keep their buffers across reuse, and the public element API.
 *
 * Invariants of a component in use (index < n):
 *   - fixed-width dtype: len == num_values * dtype size, data holds at least len bytes;
 *   - SLUICE_BYTES: offs holds num_values + 1 entries, offs[0] == 0, offs[num_values] == len,
 *     non-decreasing;
 *   - rank <= SLUICE_MAX_RANK and every dimension >= 0.
 * Components past n (up to cap) are spare: they keep their buffers for later reuse and their
 * metadata means nothing until pipe_elem_resize() brings them back into use. */
#include "element.h"

#include "common/error.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Returned for empty data so callers may always pass the pointer to memcpy. */
static const uint8_t empty_data[1];

const char *sluice_dtype_name(enum sluice_dtype dtype)
{
    switch (dtype) {
    case SLUICE_BOOL:
        return "bool";
    case SLUICE_INT8:
        return "int8";
    case SLUICE_INT16:
        return "int16";
    case SLUICE_INT32:
        return "int32";
    case SLUICE_INT64:
        return "int64";
    case SLUICE_UINT8:
        return "uint8";
    case SLUICE_UINT16:
        return "uint16";
    case SLUICE_UINT32:
        return "uint32";
    case SLUICE_UINT64:
        return "uint64";
    case SLUICE_FLOAT32:
        return "float32";
    case SLUICE_FLOAT64:
        return "float64";
    case SLUICE_BYTES:
        return "bytes";
    }
    return "unknown";
}

size_t sluice_dtype_size(enum sluice_dtype dtype)
{
    return pipe_dtype_size(dtype);
}

/* ---- Tensors ----------------------------------------------------------------------------- */

uint64_t pipe_tensor_num_values(const struct pipe_tensor *t)
{
    uint64_t nv = 1;
    for (int d = 0; d < t->rank; d++)
        nv *= (uint64_t)t->shape[d];
    return nv;
}

/* Capacity growth: at least doubling, so a growing stream of sizes reallocates O(log n) times. */
static size_t grow_cap(size_t cap, size_t need)
{
    size_t c = cap < 16 ? 16 : cap;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return need;
        c *= 2;
    }
    return c;
}

/* Gives back lent values (pipe_tensor_lend), leaving t with no data buffer. */
static void tensor_unlend(struct pipe_tensor *t)
{
    t->lender->release(t->lender);
    t->lender = NULL;
    t->data = NULL;
    t->cap = 0;
}

void pipe_tensor_lend(struct pipe_tensor *t, const uint8_t *data, size_t len,
                      struct pipe_lender *lender)
{
    lender->hold(lender);
    if (t->lender)
        tensor_unlend(t);
    free(t->data);
    /* Never written through: a lent tensor has cap 0, so any writer reserves (and copies) first. */
    t->data = (uint8_t *)data;
    t->len = len;
    t->cap = 0;
    t->lender = lender;
}

void pipe_tensor_loan(struct pipe_tensor *t, uint8_t *block, size_t cap, struct pipe_lender *lender)
{
    if (t->lender)
        tensor_unlend(t);
    free(t->data);
    t->data = block;
    t->len = 0;
    t->cap = cap;
    t->lender = lender;
}

int pipe_tensor_unloan(struct pipe_tensor *t)
{
    if (!t->lender || t->cap == 0)
        return 0;
    uint8_t *p = NULL;
    if (t->len) {
        p = malloc(t->len);
        if (!p)
            return SLUICE_ERR_NOMEM;
        memcpy(p, t->data, t->len);
    }
    size_t len = t->len;
    tensor_unlend(t);
    t->data = p;
    t->len = len;
    t->cap = len;
    return 0;
}

/* Makes room for len data bytes and noffs offsets; on failure the tensor is unchanged. */
static int tensor_reserve(struct pipe_tensor *t, size_t len, size_t noffs)
{
    /* A block on loan for writing (pipe_tensor_loan) is kept while len fits in it. */
    if (t->lender && (t->cap == 0 || len > t->cap)) {
        /* Lent values become the tensor's own, as far as its length (the contract of reserve). */
        size_t keep = t->len < len ? t->len : len;
        uint8_t *p = malloc(grow_cap(0, len));
        if (!p)
            return SLUICE_ERR_NOMEM;
        memcpy(p, t->data, keep);
        tensor_unlend(t);
        t->data = p;
        t->cap = grow_cap(0, len);
    }
    if (len > t->cap) {
        size_t cap = grow_cap(t->cap, len);
        uint8_t *p = realloc(t->data, cap);
        if (!p)
            return SLUICE_ERR_NOMEM;
        t->data = p;
        t->cap = cap;
    }
    if (noffs > t->offs_cap) {
        size_t cap = grow_cap(t->offs_cap, noffs);
        if (cap > SIZE_MAX / sizeof(uint64_t))
            return SLUICE_ERR_NOMEM;
        uint64_t *o = realloc(t->offs, cap * sizeof(uint64_t));
        if (!o)
            return SLUICE_ERR_NOMEM;
        t->offs = o;
        t->offs_cap = cap;
    }
    return 0;
}

/* Offsets are reserved only for tensors whose dtype is already SLUICE_BYTES: a fixed-width
 * tensor never needs them, and callers building a bytes tensor set the dtype first. */
int pipe_tensor_reserve_more(struct pipe_tensor *t, size_t len, size_t nvalues)
{
    size_t noffs = 0;
    if (t->dtype == SLUICE_BYTES) {
        if (nvalues == SIZE_MAX)
            return SLUICE_ERR_NOMEM;
        noffs = nvalues + 1;
    }
    return tensor_reserve(t, len, noffs);
}

int pipe_tensor_set_scalar(struct pipe_tensor *t, enum sluice_dtype dtype, const void *value)
{
    size_t size = sluice_dtype_size(dtype);
    if (size == 0)
        return SLUICE_ERR_TYPE;
    int rc = tensor_reserve(t, size, 0);
    if (rc)
        return rc;
    t->dtype = dtype;
    t->rank = 0;
    t->len = size;
    memcpy(t->data, value, size);
    return 0;
}

int pipe_tensor_set_bytes(struct pipe_tensor *t, const void *data, size_t len)
{
    int rc = tensor_reserve(t, len, 2);
    if (rc)
        return rc;
    t->dtype = SLUICE_BYTES;
    t->rank = 0;
    t->len = len;
    if (len)
        memmove(t->data, data, len);
    t->offs[0] = 0;
    t->offs[1] = len;
    return 0;
}

static int tensor_copy(struct pipe_tensor *dst, const struct pipe_tensor *src)
{
    uint64_t nv = pipe_tensor_num_values(src);
    size_t noffs = src->dtype == SLUICE_BYTES ? (size_t)nv + 1 : 0;
    int rc = tensor_reserve(dst, src->len, noffs);
    if (rc)
        return rc;
    dst->dtype = src->dtype;
    dst->rank = src->rank;
    memcpy(dst->shape, src->shape, (size_t)src->rank * sizeof(int64_t));
    dst->len = src->len;
    if (src->len)
        memcpy(dst->data, src->data, src->len);
    if (noffs)
        memcpy(dst->offs, src->offs, noffs * sizeof(uint64_t));
    return 0;
}

static bool tensor_equal(const struct pipe_tensor *a, const struct pipe_tensor *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank || a->len != b->len)
        return false;
    if (memcmp(a->shape, b->shape, (size_t)a->rank * sizeof(int64_t)) != 0)
        return false;
    if (a->len && memcmp(a->data, b->data, a->len) != 0)
        return false;
    if (a->dtype == SLUICE_BYTES) {
        size_t noffs = (size_t)pipe_tensor_num_values(a) + 1;
        if (memcmp(a->offs, b->offs, noffs * sizeof(uint64_t)) != 0)
            return false;
    }
    return true;
}

/* ---- Elements ---------------------------------------------------------------------------- */

void pipe_elem_init(struct sluice_element *e)
{
    e->n = 0;
    e->cap = 0;
    e->t = NULL;
    e->lent = false;
}

void pipe_elem_release(struct sluice_element *e)
{
    for (size_t i = 0; i < e->cap; i++) {
        if (e->t[i].lender)
            tensor_unlend(&e->t[i]);
        free(e->t[i].data);
        free(e->t[i].offs);
    }
    free(e->t);
    pipe_elem_init(e);
}

void pipe_elem_unlend_all(struct sluice_element *e)
{
    for (size_t i = 0; i < e->cap; i++)
        if (e->t[i].lender && e->t[i].cap == 0)
            tensor_unlend(&e->t[i]);
    e->lent = false;
}

void pipe_elem_swap(struct sluice_element *a, struct sluice_element *b)
{
    struct sluice_element tmp = *a;
    *a = *b;
    *b = tmp;
}

int pipe_elem_reserve(struct sluice_element *e, size_t n)
{
    if (n > PIPE_MAX_COMPONENTS + 1)
        return SLUICE_ERR_INVALID;
    if (n > e->cap) {
        struct pipe_tensor *t = realloc(e->t, n * sizeof(*t));
        if (!t)
            return SLUICE_ERR_NOMEM;
        memset(t + e->cap, 0, (n - e->cap) * sizeof(*t));
        e->t = t;
        e->cap = n;
    }
    return 0;
}

int pipe_elem_resize_to(struct sluice_element *e, size_t n)
{
    if (n > PIPE_MAX_COMPONENTS)
        return SLUICE_ERR_INVALID;
    int rc = pipe_elem_reserve(e, n);
    if (rc)
        return rc;
    /* Components coming into use start as int64 zeros, so every component in use is valid. */
    for (size_t i = e->n; i < n; i++) {
        rc = pipe_tensor_set_i64(&e->t[i], 0);
        if (rc) {
            e->n = i;
            return rc;
        }
    }
    e->n = n;
    return 0;
}

int pipe_elem_copy(struct sluice_element *dst, const struct sluice_element *src)
{
    if (dst == src)
        return 0;
    int rc = pipe_elem_resize(dst, src->n);
    if (rc)
        return rc;
    for (size_t i = 0; i < src->n; i++) {
        rc = tensor_copy(&dst->t[i], &src->t[i]);
        if (rc)
            return rc;
    }
    return 0;
}

bool pipe_elem_equal(const struct sluice_element *a, const struct sluice_element *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (!tensor_equal(&a->t[i], &b->t[i]))
            return false;
    return true;
}

/* ---- Public element API ------------------------------------------------------------------ */

struct sluice_element *sluice_element_new(void)
{
    struct sluice_element *e = malloc(sizeof(*e));
    if (e)
        pipe_elem_init(e);
    return e;
}

void sluice_element_free(struct sluice_element *elem)
{
    if (!elem)
        return;
    pipe_elem_release(elem);
    free(elem);
}

size_t sluice_element_num_components(const struct sluice_element *elem)
{
    return elem->n;
}

enum sluice_dtype sluice_element_dtype(const struct sluice_element *elem, size_t i)
{
    assert(i < elem->n);
    return elem->t[i].dtype;
}

int sluice_element_rank(const struct sluice_element *elem, size_t i)
{
    assert(i < elem->n);
    return elem->t[i].rank;
}

const int64_t *sluice_element_shape(const struct sluice_element *elem, size_t i)
{
    assert(i < elem->n);
    return elem->t[i].shape;
}

uint64_t sluice_element_num_values(const struct sluice_element *elem, size_t i)
{
    assert(i < elem->n);
    return pipe_tensor_num_values(&elem->t[i]);
}

const void *sluice_element_data(const struct sluice_element *elem, size_t i, size_t *nbytes)
{
    assert(i < elem->n);
    const struct pipe_tensor *t = &elem->t[i];
    if (nbytes)
        *nbytes = t->len;
    return t->len ? (const void *)t->data : (const void *)empty_data;
}

int sluice_element_shm_place(const struct sluice_element *elem, size_t i,
                             struct sluice_shm_place *out)
{
    assert(i < elem->n);
    const struct pipe_tensor *t = &elem->t[i];
    if (!t->lender || !t->lender->locate || t->len == 0)
        return SLUICE_ERR_NOT_FOUND;
    return t->lender->locate(t->lender, t->data, t->len, out);
}

int sluice_element_bytes_at(const struct sluice_element *elem, size_t i, uint64_t k,
                            const void **data, size_t *len)
{
    assert(i < elem->n);
    const struct pipe_tensor *t = &elem->t[i];
    if (t->dtype != SLUICE_BYTES)
        return SLUICE_ERR_TYPE;
    if (k >= pipe_tensor_num_values(t))
        return SLUICE_ERR_INVALID;
    uint64_t b = t->offs[k], e = t->offs[k + 1];
    *data = e > b ? (const void *)(t->data + b) : (const void *)empty_data;
    *len = (size_t)(e - b);
    return 0;
}

/* The mutators grow the element to reach component i, so a program may build an element by
 * setting its components in order without sizing it first. */
static int reach(struct sluice_element *elem, size_t i)
{
    if (i >= PIPE_MAX_COMPONENTS)
        return SLUICE_ERR_INVALID;
    return i < elem->n ? 0 : pipe_elem_resize(elem, i + 1);
}

int sluice_element_set_num_components(struct sluice_element *elem, size_t n)
{
    if (n == 0 || n > PIPE_MAX_COMPONENTS)
        return SLUICE_ERR_INVALID;
    return pipe_elem_resize(elem, n);
}

/* Checks a setter's component index and shape, and computes unit * product(shape) into *total
 * without overflowing: a tensor whose size does not fit in memory is refused, as it could not
 * match a caller's buffer anyway. */
static int shape_total(size_t i, int rank, const int64_t *shape, size_t unit, uint64_t *total)
{
    if (i >= PIPE_MAX_COMPONENTS || rank < 0 || rank > SLUICE_MAX_RANK || (rank > 0 && !shape))
        return SLUICE_ERR_INVALID;
    uint64_t t = unit;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0)
            return SLUICE_ERR_INVALID;
        uint64_t dim = (uint64_t)shape[d];
        if (dim != 0 && t > SIZE_MAX / dim)
            return SLUICE_ERR_INVALID;
        t *= dim;
    }
    *total = t;
    return 0;
}

/* Makes component i (reached first) a tensor of dtype and shape with room for len data bytes
 * (the new length) and noffs offsets; the caller writes the values. On failure the component
 * keeps what it held. */
static int prepare(struct sluice_element *elem, size_t i, enum sluice_dtype dtype, int rank,
                   const int64_t *shape, size_t len, size_t noffs, struct pipe_tensor **out)
{
    int rc = reach(elem, i);
    if (rc)
        return rc;
    struct pipe_tensor *t = &elem->t[i];
    rc = tensor_reserve(t, len, noffs);
    if (rc)
        return rc;
    t->dtype = dtype;
    t->rank = rank;
    if (rank > 0)
        memcpy(t->shape, shape, (size_t)rank * sizeof(int64_t));
    t->len = len;
    *out = t;
    return 0;
}

int sluice_element_set_tensor(struct sluice_element *elem, size_t i, enum sluice_dtype dtype,
                              int rank, const int64_t *shape, const void *data, size_t nbytes)
{
    size_t size = sluice_dtype_size(dtype);
    uint64_t total;
    int rc = shape_total(i, rank, shape, size ? size : 1, &total);
    if (rc)
        return rc;
    if (size == 0)
        return SLUICE_ERR_TYPE;
    if (total != nbytes || (nbytes > 0 && !data))
        return SLUICE_ERR_INVALID;
    struct pipe_tensor *t;
    rc = prepare(elem, i, dtype, rank, shape, nbytes, 0, &t);
    if (rc)
        return rc;
    if (nbytes)
        memmove(t->data, data, nbytes);
    return 0;
}

int sluice_element_set_bytes(struct sluice_element *elem, size_t i, const void *data, size_t len)
{
    if (len > 0 && !data)
        return SLUICE_ERR_INVALID;
    int rc = reach(elem, i);
    return rc ? rc : pipe_tensor_set_bytes(&elem->t[i], data, len);
}

int sluice_element_set_bytes_tensor(struct sluice_element *elem, size_t i, int rank,
                                    const int64_t *shape, const void *const *values,
                                    const size_t *lens)
{
    /* The offsets, one per value and one more, must fit in memory. */
    uint64_t offs_bytes;
    int rc = shape_total(i, rank, shape, sizeof(uint64_t), &offs_bytes);
    if (rc)
        return rc;
    uint64_t nv = offs_bytes / sizeof(uint64_t);
    if (nv == SIZE_MAX / sizeof(uint64_t))
        return SLUICE_ERR_INVALID;
    if (nv > 0 && (!values || !lens))
        return SLUICE_ERR_INVALID;
    size_t total = 0;
    for (uint64_t k = 0; k < nv; k++) {
        if ((lens[k] > 0 && !values[k]) || lens[k] > SIZE_MAX - total)
            return SLUICE_ERR_INVALID;
        total += lens[k];
    }
    struct pipe_tensor *t;
    rc = prepare(elem, i, SLUICE_BYTES, rank, shape, total, (size_t)nv + 1, &t);
    if (rc)
        return rc;
    size_t off = 0;
    t->offs[0] = 0;
    for (uint64_t k = 0; k < nv; k++) {
        if (lens[k])
            memcpy(t->data + off, values[k], lens[k]);
        off += lens[k];
        t->offs[k + 1] = off;
    }
    return 0;
}

int sluice_element_set_int64(struct sluice_element *elem, size_t i, int64_t value)
{
    int rc = reach(elem, i);
    return rc ? rc : pipe_tensor_set_i64(&elem->t[i], value);
}

int sluice_element_set_float64(struct sluice_element *elem, size_t i, double value)
{
    int rc = reach(elem, i);
    return rc ? rc : pipe_tensor_set_scalar(&elem->t[i], SLUICE_FLOAT64, &value);
}

void pipe_dtypes_text(const enum sluice_dtype *d, size_t n, char *buf, size_t len)
{
    size_t pos = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < n && pos < len; i++) {
        int w = snprintf(buf + pos, len - pos, "%s%s%s", i == 0 && n > 1 ? "(" : "",
                         sluice_dtype_name(d[i]),
                         i + 1 < n ? ", "
                         : n > 1   ? ")"
                                   : "");
        if (w < 0)
            break;
        pos += (size_t)w;
    }
}
