/* The built-in map and filter functions of docs/design.md §3.
 *
 *   map:    square, add(K), mul(K), mod(K), identity, sleep_us(N), wait_us(N), bytes(N);
 *           parse_example(SPEC, ...) (example.h); decode_jpeg([MAX_PIXELS]) (jpeg.h);
 *           resize(H, W), center_crop(H, W), random_crop(H, W[, SEED]), normalize(MEAN, STD)
 *           (image.h); tokenize("TOKENIZER"[, "special"][, "bos"][, "eos"]), byte-level BPE
 *           from a tiktoken rank file or a tokenizer.json (tokenize.h, bpe.h)
 *   filter: even, odd, lt(K), ge(K)
 *   both:   py("module:function", ARG...), a user Python function (pyfn.h)
 *
 * Arithmetic maps apply to every numeric component elementwise and keep its dtype (integers
 * wrap); an integer component with a float K becomes float64; mod follows Python's sign rule.
 * Filters look at a scalar numeric first component. All functions are stateless and
 * thread-safe; random_crop draws from the call's seed (map.h), never from shared state.
 * tokenize and py keep per-op state (registry.h: bind), made on the op's own thread. */

/* Built-in map and filter functions.
 *
 * Every function checks what it needs of the element and reports a one-line reason otherwise;
 * the map/filter iterator prefixes it with "map(NAME): ". The common case of a scalar int64
 * element takes a short path without the per-dtype loops. Arguments were validated by the check
 * callbacks when the pipeline was opened, so a function may read them directly. */
#include "common/error.h"
#include "common/perm.h"
#include "element.h"
#include "example.h"
#include "image.h"
#include "jpeg.h"
#include "pyfn.h"
#include "registry.h"
#include "tokenize.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The largest bytes(N): elements must fit in a frame and in memory. */
#define BYTES_MAX ((int64_t)1 << 30)
/* sleep_us(N), wait_us(N): one minute of simulated work per element at most. */
#define SLEEP_US_MAX ((int64_t)60000000)

enum arith { ARITH_SQUARE, ARITH_ADD, ARITH_MUL, ARITH_MOD };

/* A numeric literal argument: K of add/mul/mod/lt/ge. */
struct num {
    bool is_float;
    int64_t i;
    double f; /* also set for integers */
};

static struct num arg_num(const struct sluice_fn_args *a)
{
    const struct pipe_value *v = &a->v[0];
    struct num k = {false, 0, 0.0};
    if (v->kind == PIPE_VAL_FLOAT) {
        k.is_float = true;
        k.f = v->f;
    } else {
        k.i = v->i;
        k.f = (double)v->i;
    }
    return k;
}

static bool is_float(enum sluice_dtype d)
{
    return d == SLUICE_FLOAT32 || d == SLUICE_FLOAT64;
}

/* ---- Python-style modulo: the result takes the sign of the divisor ----------------------- */

static int64_t pymod_i64(int64_t x, int64_t k)
{
    if (k == -1)
        return 0; /* INT64_MIN % -1 overflows in C; the answer is 0 for every x */
    int64_t r = x % k;
    if (r != 0 && ((r < 0) != (k < 0)))
        r += k;
    return r;
}

/* For an unsigned x with a negative k the result is negative; it is returned wrapped, which is
 * what storing it in the unsigned dtype does anyway. */
static uint64_t pymod_u64(uint64_t x, int64_t k)
{
    if (k > 0)
        return x % (uint64_t)k;
    uint64_t m = (uint64_t)0 - (uint64_t)k;
    uint64_t r = x % m;
    return r == 0 ? 0 : r - m;
}

static double pymod_f(double x, double k)
{
    double r = fmod(x, k);
    if (r != 0) {
        if ((r < 0) != (k < 0))
            r += k;
    } else {
        r = copysign(0.0, k);
    }
    return r;
}

/* ---- Arithmetic maps --------------------------------------------------------------------- */

/* Integer arithmetic on the two's complement bits: x holds the value sign-extended for signed
 * dtypes; the caller truncates the result to the dtype's width, which makes every op wrap. */
static inline uint64_t int_apply(enum arith op, bool is_signed, uint64_t x, int64_t k)
{
    switch (op) {
    case ARITH_SQUARE:
        return x * x;
    case ARITH_ADD:
        return x + (uint64_t)k;
    case ARITH_MUL:
        return x * (uint64_t)k;
    case ARITH_MOD:
        return is_signed ? (uint64_t)pymod_i64((int64_t)x, k) : pymod_u64(x, k);
    }
    return x;
}

static inline double float_apply(enum arith op, double x, double k)
{
    switch (op) {
    case ARITH_SQUARE:
        return x * x;
    case ARITH_ADD:
        return x + k;
    case ARITH_MUL:
        return x * k;
    case ARITH_MOD:
        return pymod_f(x, k);
    }
    return x;
}

#define INT_LOOP(T, SIGNED)                                                                        \
    do {                                                                                           \
        T *p = (T *)(void *)t->data;                                                               \
        for (uint64_t j = 0; j < nv; j++) {                                                        \
            uint64_t x = (SIGNED) ? (uint64_t)(int64_t)p[j] : (uint64_t)p[j];                      \
            p[j] = (T)int_apply(op, (SIGNED), x, k);                                               \
        }                                                                                          \
    } while (0)

static void int_tensor_apply(struct pipe_tensor *t, uint64_t nv, enum arith op, int64_t k)
{
    switch (t->dtype) {
    case SLUICE_INT8:
        INT_LOOP(int8_t, true);
        break;
    case SLUICE_INT16:
        INT_LOOP(int16_t, true);
        break;
    case SLUICE_INT32:
        INT_LOOP(int32_t, true);
        break;
    case SLUICE_INT64:
        INT_LOOP(int64_t, true);
        break;
    case SLUICE_UINT8:
        INT_LOOP(uint8_t, false);
        break;
    case SLUICE_UINT16:
        INT_LOOP(uint16_t, false);
        break;
    case SLUICE_UINT32:
        INT_LOOP(uint32_t, false);
        break;
    case SLUICE_UINT64:
        INT_LOOP(uint64_t, false);
        break;
    default:
        break;
    }
}

static void float_tensor_apply(struct pipe_tensor *t, uint64_t nv, enum arith op, double k)
{
    if (t->dtype == SLUICE_FLOAT64) {
        double *p = (double *)(void *)t->data;
        for (uint64_t j = 0; j < nv; j++)
            p[j] = float_apply(op, p[j], k);
    } else {
        float *p = (float *)(void *)t->data;
        for (uint64_t j = 0; j < nv; j++)
            p[j] = (float)float_apply(op, (double)p[j], k);
    }
}

static double int_load_double(const uint8_t *data, enum sluice_dtype d, uint64_t j)
{
    switch (d) {
    case SLUICE_INT8:
        return (double)((const int8_t *)(const void *)data)[j];
    case SLUICE_INT16:
        return (double)((const int16_t *)(const void *)data)[j];
    case SLUICE_INT32:
        return (double)((const int32_t *)(const void *)data)[j];
    case SLUICE_INT64:
        return (double)((const int64_t *)(const void *)data)[j];
    case SLUICE_UINT8:
        return (double)((const uint8_t *)(const void *)data)[j];
    case SLUICE_UINT16:
        return (double)((const uint16_t *)(const void *)data)[j];
    case SLUICE_UINT32:
        return (double)((const uint32_t *)(const void *)data)[j];
    case SLUICE_UINT64:
        return (double)((const uint64_t *)(const void *)data)[j];
    default:
        return 0.0;
    }
}

/* An integer tensor meets a float K: it becomes float64 in place. Values are converted from the
 * last to the first, so each write (at 8 * j) only covers source values already read. */
static int int_tensor_to_float(struct pipe_tensor *t, uint64_t nv, enum arith op, double k,
                               char *err, size_t errlen)
{
    if (nv > SIZE_MAX / 8)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "tensor too large");
    int rc = pipe_tensor_reserve(t, (size_t)nv * 8, (size_t)nv);
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    enum sluice_dtype from = t->dtype;
    for (uint64_t j = nv; j-- > 0;) {
        double x = float_apply(op, int_load_double(t->data, from, j), k);
        memcpy(t->data + j * 8, &x, 8);
    }
    t->dtype = SLUICE_FLOAT64;
    t->len = (size_t)nv * 8;
    return 0;
}

static int arith(struct sluice_element *e, enum arith op, const struct sluice_fn_args *a, char *err,
                 size_t errlen)
{
    struct num k = {false, 0, 0.0};
    if (op != ARITH_SQUARE)
        k = arg_num(a);
    if (op == ARITH_MOD && (k.is_float ? k.f == 0.0 : k.i == 0))
        return err_set(err, errlen, SLUICE_ERR_FN, "modulo by zero");
    /* Check every component before changing any, so a failure leaves the element intact. */
    for (size_t i = 0; i < e->n; i++) {
        enum sluice_dtype d = e->t[i].dtype;
        if (d == SLUICE_BOOL || d == SLUICE_BYTES)
            return err_set(err, errlen, SLUICE_ERR_TYPE,
                           "component %zu has dtype %s, which is not numeric", i,
                           sluice_dtype_name(d));
    }
    for (size_t i = 0; i < e->n; i++) {
        struct pipe_tensor *t = &e->t[i];
        uint64_t nv = pipe_tensor_num_values(t);
        if (is_float(t->dtype)) {
            float_tensor_apply(t, nv, op, k.f);
        } else if (k.is_float) {
            int rc = int_tensor_to_float(t, nv, op, k.f, err, errlen);
            if (rc)
                return rc;
        } else {
            int_tensor_apply(t, nv, op, k.i);
        }
    }
    return 0;
}

/* The scalar int64 element with an integer K: the shape every benchmark and most tests use. */
static inline bool fast_i64(const struct sluice_element *e)
{
    return e->n == 1 && e->t[0].dtype == SLUICE_INT64 && e->t[0].rank == 0;
}

static inline int64_t *i64_slot(struct sluice_element *e)
{
    return (int64_t *)(void *)e->t[0].data;
}

static int fn_square(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                     char *err, size_t errlen)
{
    if (fast_i64(e)) {
        uint64_t x = (uint64_t)*i64_slot(e);
        *i64_slot(e) = (int64_t)(x * x);
        return 0;
    }
    return arith(e, ARITH_SQUARE, a, err, errlen);
}

static int fn_add(struct sluice_element *e, const struct sluice_fn_args *a, void *user, char *err,
                  size_t errlen)
{
    if (fast_i64(e) && a->v[0].kind == PIPE_VAL_INT) {
        *i64_slot(e) = (int64_t)((uint64_t)*i64_slot(e) + (uint64_t)a->v[0].i);
        return 0;
    }
    return arith(e, ARITH_ADD, a, err, errlen);
}

static int fn_mul(struct sluice_element *e, const struct sluice_fn_args *a, void *user, char *err,
                  size_t errlen)
{
    if (fast_i64(e) && a->v[0].kind == PIPE_VAL_INT) {
        *i64_slot(e) = (int64_t)((uint64_t)*i64_slot(e) * (uint64_t)a->v[0].i);
        return 0;
    }
    return arith(e, ARITH_MUL, a, err, errlen);
}

static int fn_mod(struct sluice_element *e, const struct sluice_fn_args *a, void *user, char *err,
                  size_t errlen)
{
    if (fast_i64(e) && a->v[0].kind == PIPE_VAL_INT && a->v[0].i != 0) {
        *i64_slot(e) = pymod_i64(*i64_slot(e), a->v[0].i);
        return 0;
    }
    return arith(e, ARITH_MOD, a, err, errlen);
}

static int fn_identity(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                       char *err, size_t errlen)
{
    return 0;
}

/* ---- sleep_us: simulated preprocessing --------------------------------------------------- */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Burns CPU rather than sleeping: the point is to occupy a core the way real preprocessing
 * does, so thread counts and prefetching behave as they would under load. N is at most
 * SLEEP_US_MAX (check_sleep), and the chain's cancellation is noticed within about a
 * millisecond. */
static int fn_sleep_us(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                       char *err, size_t errlen)
{
    int64_t us = a->v[0].i;
    if (us <= 0)
        return 0;
    int64_t now = mono_ns();
    int64_t deadline = now + us * 1000;
    int64_t next_check = now + 1000000;
    while ((now = mono_ns()) < deadline) {
        if (now >= next_check) {
            if (sluice_fn_cancelled(a))
                return err_set(err, errlen, SLUICE_ERR_CANCELLED, "cancelled");
            next_check = now + 1000000;
        }
    }
    return 0;
}

/* wait_us(N) waits N µs an element without occupying a core, as work bound by I/O does (a fetch
 * from a remote store), where sleep_us burns the core. A thread's sleep overshoots by tens of
 * microseconds, so waits are added up per thread and slept a millisecond or more at a time, the
 * overshoot counted as paid: each thread gives about one element per N µs, those of short waits
 * in bursts of a millisecond. The chain's cancellation is noticed within about a millisecond. */
#define WAIT_SLICE_NS ((int64_t)1000000)

static _Thread_local int64_t wait_owed_ns;

static int fn_wait_us(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                      char *err, size_t errlen)
{
    (void)e;
    (void)user;
    int64_t us = a->v[0].i;
    if (us <= 0)
        return 0;
    wait_owed_ns += us * 1000;
    if (wait_owed_ns < WAIT_SLICE_NS)
        return 0;
    int64_t now = mono_ns();
    int64_t deadline = now + wait_owed_ns;
    while (now < deadline) {
        if (sluice_fn_cancelled(a)) {
            wait_owed_ns = 0;
            return err_set(err, errlen, SLUICE_ERR_CANCELLED, "cancelled");
        }
        int64_t step = deadline - now < WAIT_SLICE_NS ? deadline - now : WAIT_SLICE_NS;
        struct timespec ts = {.tv_sec = step / 1000000000, .tv_nsec = step % 1000000000};
        nanosleep(&ts, NULL);
        now = mono_ns();
    }
    /* Overslept: the next elements' waits are paid up to a slice. */
    wait_owed_ns = deadline - now < -WAIT_SLICE_NS ? -WAIT_SLICE_NS : deadline - now;
    return 0;
}

/* ---- bytes(N): a deterministic payload of N bytes ---------------------------------------- */

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t hash_bytes(uint64_t h, const uint8_t *p, size_t len)
{
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = rotl64(h ^ w, 29) * 0x9e3779b97f4a7c15ULL;
        p += 8;
        len -= 8;
    }
    uint64_t w = 0;
    if (len)
        memcpy(&w, p, len);
    return rotl64(h ^ w ^ ((uint64_t)len << 56), 29) * 0x9e3779b97f4a7c15ULL;
}

/* Hashes structure and values, so elements that differ in any way get different payloads. */
static uint64_t hash_elem(const struct sluice_element *e)
{
    uint64_t h = 0x243f6a8885a308d3ULL ^ e->n;
    for (size_t i = 0; i < e->n; i++) {
        const struct pipe_tensor *t = &e->t[i];
        h = hash_bytes(h, (const uint8_t *)&t->dtype, sizeof(t->dtype));
        h = hash_bytes(h, (const uint8_t *)t->shape, (size_t)t->rank * sizeof(int64_t));
        h = hash_bytes(h, t->data, t->len);
        if (t->dtype == SLUICE_BYTES)
            h = hash_bytes(h, (const uint8_t *)t->offs,
                           ((size_t)pipe_tensor_num_values(t) + 1) * sizeof(uint64_t));
    }
    return perm_mix64(h);
}

static inline uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

/* Four independent xorshift lanes keep the CPU's pipelines full, so filling runs at about the
 * speed of writing memory; the output is not compressible, like real payloads. */
static void fill_pattern(uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t s[4];
    for (int l = 0; l < 4; l++) {
        s[l] = perm_mix64(seed + (uint64_t)(l + 1) * 0x9e3779b97f4a7c15ULL);
        if (s[l] == 0)
            s[l] = 0x6a09e667f3bcc909ULL;
    }
    while (len >= 32) {
        uint64_t w[4] = {xorshift(&s[0]), xorshift(&s[1]), xorshift(&s[2]), xorshift(&s[3])};
        memcpy(p, w, 32);
        p += 32;
        len -= 32;
    }
    while (len > 0) {
        uint64_t w = xorshift(&s[0]);
        size_t n = len < 8 ? len : 8;
        memcpy(p, &w, n);
        p += n;
        len -= n;
    }
}

static int fn_bytes(struct sluice_element *e, const struct sluice_fn_args *a, void *user, char *err,
                    size_t errlen)
{
    size_t n = (size_t)a->v[0].i;
    uint64_t seed = hash_elem(e);
    int rc = pipe_elem_resize(e, 1);
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    struct pipe_tensor *t = &e->t[0];
    /* An empty bytes scalar first, so the reservation below also keeps the offsets. */
    rc = pipe_tensor_set_bytes(t, NULL, 0);
    if (!rc)
        rc = pipe_tensor_reserve(t, n, 1);
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    fill_pattern(t->data, n, seed);
    t->len = n;
    t->offs[1] = n;
    return 0;
}

/* bytes(N) makes a scalar of N bytes, whatever its input. */
static uint64_t size_bytes(const struct sluice_element *in, const struct sluice_fn_args *a)
{
    (void)in;
    return (uint64_t)a->v[0].i;
}

/* ---- Filters ----------------------------------------------------------------------------- */

enum scalar_kind { SCALAR_SIGNED, SCALAR_UNSIGNED, SCALAR_FLOAT };

struct scalar {
    enum scalar_kind kind;
    int64_t i;
    uint64_t u;
    double f;
};

static void format_shape(const struct pipe_tensor *t, char *buf, size_t len)
{
    size_t off = 0;
    off += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < t->rank && off < len; d++)
        off +=
            (size_t)snprintf(buf + off, len - off, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

/* Reads the first component as a number; filters need a numeric scalar there. */
static int first_scalar(const struct sluice_element *e, struct scalar *out, char *err,
                        size_t errlen)
{
    if (e->n == 0)
        return err_set(err, errlen, SLUICE_ERR_TYPE, "the element has no components");
    const struct pipe_tensor *t = &e->t[0];
    if (t->rank != 0) {
        char shape[128];
        format_shape(t, shape, sizeof(shape));
        return err_set(err, errlen, SLUICE_ERR_TYPE,
                       "component 0 has shape %s, expected a numeric scalar", shape);
    }
    const void *p = t->data;
    switch (t->dtype) {
    case SLUICE_INT8:
        *out = (struct scalar){SCALAR_SIGNED, *(const int8_t *)p, 0, 0};
        return 0;
    case SLUICE_INT16:
        *out = (struct scalar){SCALAR_SIGNED, *(const int16_t *)p, 0, 0};
        return 0;
    case SLUICE_INT32:
        *out = (struct scalar){SCALAR_SIGNED, *(const int32_t *)p, 0, 0};
        return 0;
    case SLUICE_INT64:
        *out = (struct scalar){SCALAR_SIGNED, *(const int64_t *)p, 0, 0};
        return 0;
    case SLUICE_UINT8:
        *out = (struct scalar){SCALAR_UNSIGNED, 0, *(const uint8_t *)p, 0};
        return 0;
    case SLUICE_UINT16:
        *out = (struct scalar){SCALAR_UNSIGNED, 0, *(const uint16_t *)p, 0};
        return 0;
    case SLUICE_UINT32:
        *out = (struct scalar){SCALAR_UNSIGNED, 0, *(const uint32_t *)p, 0};
        return 0;
    case SLUICE_UINT64:
        *out = (struct scalar){SCALAR_UNSIGNED, 0, *(const uint64_t *)p, 0};
        return 0;
    case SLUICE_FLOAT32:
        *out = (struct scalar){SCALAR_FLOAT, 0, 0, *(const float *)p};
        return 0;
    case SLUICE_FLOAT64:
        *out = (struct scalar){SCALAR_FLOAT, 0, 0, *(const double *)p};
        return 0;
    default:
        return err_set(err, errlen, SLUICE_ERR_TYPE,
                       "component 0 has dtype %s, expected a numeric scalar",
                       sluice_dtype_name(t->dtype));
    }
}

static double scalar_double(const struct scalar *x)
{
    switch (x->kind) {
    case SCALAR_SIGNED:
        return (double)x->i;
    case SCALAR_UNSIGNED:
        return (double)x->u;
    case SCALAR_FLOAT:
        break;
    }
    return x->f;
}

/* Three-way comparison of x with K: -1, 0 or 1, and 2 when unordered (a NaN is involved).
 * Integers compare exactly; anything involving a float compares as doubles. */
static int compare(const struct scalar *x, const struct num *k)
{
    if (!k->is_float && x->kind == SCALAR_SIGNED)
        return x->i < k->i ? -1 : x->i > k->i;
    if (!k->is_float && x->kind == SCALAR_UNSIGNED) {
        if (k->i < 0)
            return 1;
        return x->u < (uint64_t)k->i ? -1 : x->u > (uint64_t)k->i;
    }
    double a = scalar_double(x), b = k->f;
    if (isnan(a) || isnan(b))
        return 2;
    return a < b ? -1 : a > b;
}

static int fn_even(const struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                   int *keep, char *err, size_t errlen)
{
    if (fast_i64(e)) {
        *keep = (*(const int64_t *)(const void *)e->t[0].data & 1) == 0;
        return 0;
    }
    struct scalar x;
    int rc = first_scalar(e, &x, err, errlen);
    if (rc)
        return rc;
    if (x.kind == SCALAR_FLOAT)
        *keep = fmod(x.f, 2.0) == 0.0;
    else
        *keep = ((x.kind == SCALAR_SIGNED ? (uint64_t)x.i : x.u) & 1) == 0;
    return 0;
}

static int fn_odd(const struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                  int *keep, char *err, size_t errlen)
{
    if (fast_i64(e)) {
        *keep = (*(const int64_t *)(const void *)e->t[0].data & 1) != 0;
        return 0;
    }
    struct scalar x;
    int rc = first_scalar(e, &x, err, errlen);
    if (rc)
        return rc;
    if (x.kind == SCALAR_FLOAT)
        *keep = fabs(fmod(x.f, 2.0)) == 1.0;
    else
        *keep = ((x.kind == SCALAR_SIGNED ? (uint64_t)x.i : x.u) & 1) != 0;
    return 0;
}

static int fn_lt(const struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                 int *keep, char *err, size_t errlen)
{
    if (fast_i64(e) && a->v[0].kind == PIPE_VAL_INT) {
        *keep = *(const int64_t *)(const void *)e->t[0].data < a->v[0].i;
        return 0;
    }
    struct scalar x;
    int rc = first_scalar(e, &x, err, errlen);
    if (rc)
        return rc;
    struct num k = arg_num(a);
    *keep = compare(&x, &k) == -1;
    return 0;
}

static int fn_ge(const struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                 int *keep, char *err, size_t errlen)
{
    if (fast_i64(e) && a->v[0].kind == PIPE_VAL_INT) {
        *keep = *(const int64_t *)(const void *)e->t[0].data >= a->v[0].i;
        return 0;
    }
    struct scalar x;
    int rc = first_scalar(e, &x, err, errlen);
    if (rc)
        return rc;
    struct num k = arg_num(a);
    int c = compare(&x, &k);
    *keep = c == 0 || c == 1;
    return 0;
}

/* ---- Argument checks --------------------------------------------------------------------- */

static int check_number(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    enum pipe_value_kind kind = a->v[0].kind;
    if (kind != PIPE_VAL_INT && kind != PIPE_VAL_FLOAT)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "K must be a number");
    return 0;
}

static int check_mod(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    int rc = check_number(a, err, errlen);
    if (rc)
        return rc;
    const struct pipe_value *v = &a->v[0];
    if (v->kind == PIPE_VAL_INT ? v->i == 0 : v->f == 0.0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "K must not be zero");
    return 0;
}

static int check_sleep(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    const struct pipe_value *v = &a->v[0];
    if (v->kind != PIPE_VAL_INT || v->i < 0 || v->i > SLEEP_US_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "N must be an integer from 0 to %lld",
                       (long long)SLEEP_US_MAX);
    return 0;
}

static int check_bytes(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    const struct pipe_value *v = &a->v[0];
    if (v->kind != PIPE_VAL_INT || v->i < 0 || v->i > BYTES_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "N must be an integer from 0 to %lld",
                       (long long)BYTES_MAX);
    return 0;
}

/* ---- Registration ------------------------------------------------------------------------ */

struct map_def {
    const char *name;
    int min_args, max_args; /* max_args < 0: no upper bound */
    sluice_map_cb fn;
    pipe_fn_check_cb check;
};

struct filter_def {
    const char *name;
    int nargs;
    sluice_filter_cb fn;
    pipe_fn_check_cb check;
};

static const struct map_def maps[] = {
    {"square", 0, 0, fn_square, NULL},
    {"add", 1, 1, fn_add, check_number},
    {"mul", 1, 1, fn_mul, check_number},
    {"mod", 1, 1, fn_mod, check_mod},
    {"identity", 0, 0, fn_identity, NULL},
    {"sleep_us", 1, 1, fn_sleep_us, check_sleep},
    {"wait_us", 1, 1, fn_wait_us, check_sleep},
    {"bytes", 1, 1, fn_bytes, check_bytes},
    /* Records and images: example.c, jpeg.c, image.c. */
    {"parse_example", 1, PIPE_MAX_COMPONENTS, pipe_fn_parse_example, pipe_check_parse_example},
    {"decode_jpeg", 0, 1, pipe_fn_decode_jpeg, pipe_check_decode_jpeg},
    {"resize", 2, 2, pipe_fn_resize, pipe_check_image_size},
    {"center_crop", 2, 2, pipe_fn_center_crop, pipe_check_image_size},
    {"random_crop", 2, 3, pipe_fn_random_crop, pipe_check_image_size},
    {"normalize", 2, 2, pipe_fn_normalize, pipe_check_normalize},
};

static const struct filter_def filters[] = {
    {"even", 0, fn_even, NULL},
    {"odd", 0, fn_odd, NULL},
    {"lt", 1, fn_lt, check_number},
    {"ge", 1, fn_ge, check_number},
};

int pipe_builtins_register(struct sluice_registry *reg)
{
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        const struct map_def *d = &maps[i];
        int rc = sluice_register_map(reg, d->name, d->min_args, d->max_args, d->fn, NULL);
        if (!rc && d->check)
            rc = pipe_registry_set_check(reg, d->name, d->check);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
        const struct filter_def *d = &filters[i];
        int rc = sluice_register_filter(reg, d->name, d->nargs, d->nargs, d->fn, NULL);
        if (!rc && d->check)
            rc = pipe_registry_set_check(reg, d->name, d->check);
        if (rc)
            return rc;
    }
    int rc = pipe_registry_set_size(reg, "bytes", size_bytes);
    if (!rc)
        rc = pipe_tokenize_register(reg);
    if (rc)
        return rc;
    return pipe_py_register(reg);
}
