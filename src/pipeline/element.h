/* The element model (docs/design.md §3): an element is a tuple of typed tensors.
 *
 * struct sluice_element is opaque in the public header; its layout is visible here to the
 * pipeline engine so operators can work on it without calls per value. Elements own their
 * buffers and keep them across reuse: an iterator writes into the caller's element, growing
 * buffers only when a value does not fit, so a steady stream of same-shaped elements performs
 * no allocation. Elements are not thread-safe; one thread uses an element at a time. */
#ifndef SLUICE_PIPELINE_ELEMENT_H
#define SLUICE_PIPELINE_ELEMENT_H

#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PIPE_MAX_COMPONENTS 64

/* Memory that a tensor's values may lie in without being copied (codec_next_record with a
 * lender: a received block of a shared region, or of an in-process worker's reply). hold adds one
 * reference, release drops one; the lender keeps the memory valid and unchanged while any is
 * held. Both may run on any thread. */
struct pipe_lender {
    void (*hold)(struct pipe_lender *l);
    void (*release)(struct pipe_lender *l);
    /* NULL, or: where the len bytes at p (in the lender's memory) lie in a memory file another
     * process can map (sluice_element_shm_place). Returns 0 or SLUICE_ERR_NOT_FOUND. */
    int (*locate)(struct pipe_lender *l, const void *p, size_t len, struct sluice_shm_place *out);
    /* The fewest value bytes a component needs to be lent, when more than CODEC_LEND_MIN (0: that
     * minimum): what a lent tensor keeps alive is the lender's memory whole. */
    size_t lend_min;
};

struct pipe_tensor {
    enum sluice_dtype dtype;
    int rank;
    int64_t shape[SLUICE_MAX_RANK];
    /* Fixed-width dtypes: num_values * dtype size bytes, row-major.
     * SLUICE_BYTES: the strings concatenated; offs[k]..offs[k+1] delimits string k. */
    uint8_t *data;
    size_t len, cap;
    uint64_t *offs; /* SLUICE_BYTES only: num_values + 1 entries */
    size_t offs_cap;
    /* Set when data is lent (pipe_tensor_lend): it lies in lender's memory, read-only to the
     * pipeline and held by one reference, cap is 0, and the first change of the tensor's size
     * (pipe_tensor_reserve) or pipe_elem_release gives it back. Also set, with cap > 0, for a
     * block on loan for writing (pipe_tensor_loan): the tensor writes up to cap bytes there, and
     * gives it back when it needs more (after copying what it keeps) or is released. */
    struct pipe_lender *lender;
};

/* sluice_dtype_size, inlined where it runs per element: the size in bytes of one value of a
 * fixed-width dtype, 0 for SLUICE_BYTES and for a value that is no dtype. */
static inline size_t pipe_dtype_size(enum sluice_dtype dtype)
{
    static const uint8_t size[] = {
        [SLUICE_BOOL] = 1,   [SLUICE_INT8] = 1,    [SLUICE_INT16] = 2,   [SLUICE_INT32] = 4,
        [SLUICE_INT64] = 8,  [SLUICE_UINT8] = 1,   [SLUICE_UINT16] = 2,  [SLUICE_UINT32] = 4,
        [SLUICE_UINT64] = 8, [SLUICE_FLOAT32] = 4, [SLUICE_FLOAT64] = 8, [SLUICE_BYTES] = 0,
    };
    return (unsigned)dtype < sizeof size ? size[dtype] : 0;
}

struct sluice_element {
    size_t n; /* components in use */
    size_t cap;
    struct pipe_tensor *t;
    /* Some tensor (spare slots included) may be lent: whoever lends one of its tensors
     * (pipe_tensor_lend) sets it, pipe_elem_unlend clears it. False: none is, and unlending has
     * nothing to do, which it then finds out without touching the tensors (a reader calls it
     * twice per element). */
    bool lent;
};

/* Initializes an element in place with no components and no buffers. */
void pipe_elem_init(struct sluice_element *e);
/* Frees the element's buffers (not the struct itself). The element may be re-initialized. */
void pipe_elem_release(struct sluice_element *e);
/* Exchanges two elements' contents, buffers included; never allocates. */
void pipe_elem_swap(struct sluice_element *a, struct sluice_element *b);
/* Makes dst a deep copy of src, reusing dst's buffers. Returns 0 or SLUICE_ERR_NOMEM. */
int pipe_elem_copy(struct sluice_element *dst, const struct sluice_element *src);
/* Writes "int64" or "(int64, bytes)" for a structure of n dtypes into buf (len bytes, always
 * NUL-terminated when len > 0; cut to fit). */
void pipe_dtypes_text(const enum sluice_dtype *d, size_t n, char *buf, size_t len);
/* Deep equality (dtype, shape and values; floats bitwise). */
bool pipe_elem_equal(const struct sluice_element *a, const struct sluice_element *b);

/* Gives back every lent tensor of e (pipe_tensor_lend), spare slots included. */
void pipe_elem_unlend_all(struct sluice_element *e);
static inline void pipe_elem_unlend(struct sluice_element *e)
{
    if (e->lent)
        pipe_elem_unlend_all(e);
}

/* Sets the number of components, keeping existing buffers. Returns 0 or SLUICE_ERR_NOMEM. The
 * unchanged count (a decoder's case per element) returns without a call. */
int pipe_elem_resize_to(struct sluice_element *e, size_t n);
static inline int pipe_elem_resize(struct sluice_element *e, size_t n)
{
    return n == e->n ? 0 : pipe_elem_resize_to(e, n);
}

/* Makes room for n component slots (n <= PIPE_MAX_COMPONENTS + 1) without bringing any into
 * use: slots [e->n, n) are spare, keep whatever buffers they had and may be borrowed by a function
 * that builds a replacement for a component beside it (write the new tensor into a spare slot,
 * then exchange the two slots), so the old component's buffers stay in the element for the next
 * one instead of being freed. A spare slot's metadata means nothing: set its dtype before
 * pipe_tensor_reserve(). Returns 0 or SLUICE_ERR_NOMEM (SLUICE_ERR_INVALID for n too large). */
int pipe_elem_reserve(struct sluice_element *e, size_t n);

/* Exchanges two tensors, buffers included; never allocates. */
static inline void pipe_tensor_swap(struct pipe_tensor *a, struct pipe_tensor *b)
{
    struct pipe_tensor tmp = *a;
    *a = *b;
    *b = tmp;
}

/* Number of values in a tensor: the product of its shape (1 for rank 0). */
uint64_t pipe_tensor_num_values(const struct pipe_tensor *t);
/* The bytes a tensor holds, what a worker's --max-element-bytes bounds: its value bytes, plus 8
 * per value for a bytes tensor of rank 1 or more (its offsets). */
static inline uint64_t pipe_tensor_size(const struct pipe_tensor *t)
{
    uint64_t n = t->len;
    if (t->dtype == SLUICE_BYTES && t->rank > 0)
        n += 8 * pipe_tensor_num_values(t);
    return n;
}
/* The sum of pipe_tensor_size over the element's components (inline: a worker sizes every
 * element it produces). */
static inline uint64_t pipe_elem_size(const struct sluice_element *e)
{
    uint64_t n = 0;
    for (size_t i = 0; i < e->n; i++)
        n += pipe_tensor_size(&e->t[i]);
    return n;
}
/* Makes room for len data bytes (and, for bytes tensors, nvalues + 1 offsets); keeps content
 * only up to the old length. Returns 0 or SLUICE_ERR_NOMEM. "Bytes tensor" means t->dtype is
 * already SLUICE_BYTES when this is called: to turn another tensor into a bytes tensor, set its
 * dtype first (or start from pipe_tensor_set_bytes(t, NULL, 0)), then reserve. */
int pipe_tensor_reserve_more(struct pipe_tensor *t, size_t len, size_t nvalues);
static inline int pipe_tensor_reserve(struct pipe_tensor *t, size_t len, size_t nvalues)
{
    /* A fixed-width tensor of its own with room already (most elements of a stream): no call. */
    if (t->dtype != SLUICE_BYTES && !t->lender && len <= t->cap)
        return 0;
    return pipe_tensor_reserve_more(t, len, nvalues);
}
/* Gives t the block of cap bytes (cap >= 1) that lender lends for writing, with the reference
 * the caller holds, in place of its data (given back or freed); t's values are then empty.
 * Whoever takes the block out of t (a worker's chunk) takes lender with it. */
void pipe_tensor_loan(struct pipe_tensor *t, uint8_t *block, size_t cap,
                      struct pipe_lender *lender);
/* Gives a block on loan for writing back, t's values copied into memory of its own first (none
 * is a no-op). Returns 0, or SLUICE_ERR_NOMEM (t unchanged). */
int pipe_tensor_unloan(struct pipe_tensor *t);
/* Makes t's values the len bytes at data, which lie in lender's memory, without copying them:
 * holds one reference of lender (giving back what t held before). The caller sets dtype, rank
 * and shape, and the lent flag of the element t belongs to. */
void pipe_tensor_lend(struct pipe_tensor *t, const uint8_t *data, size_t len,
                      struct pipe_lender *lender);
/* Sets t to a scalar of a fixed-width dtype holding the given value bytes (size of dtype). */
int pipe_tensor_set_scalar(struct pipe_tensor *t, enum sluice_dtype dtype, const void *value);
/* Sets t to a scalar int64 without any branch on capacity after the first call. */
static inline int pipe_tensor_set_i64(struct pipe_tensor *t, int64_t v)
{
    if (t->cap < 8) {
        int rc = pipe_tensor_reserve(t, 8, 1);
        if (rc)
            return rc;
    }
    t->dtype = SLUICE_INT64;
    t->rank = 0;
    t->len = 8;
    *(int64_t *)(void *)t->data = v;
    return 0;
}
/* Sets t to a scalar bytes string (copied). */
int pipe_tensor_set_bytes(struct pipe_tensor *t, const void *data, size_t len);

#endif
