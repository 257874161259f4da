/* The text format (docs/design.md §3) and the shortest round-trip float text it relies on. */
#include "format.h"

#include "common/error.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Floats ------------------------------------------------------------------------------- */

/* The decimal exponent of a "%g" text in exponent notation, or INT32_MIN when it has none. */
static int exponent_of(const char *s)
{
    const char *e = strchr(s, 'e');
    return e ? atoi(e + 1) : INT32_MIN;
}

/* Shared by both widths: the fewest significant digits p (1..maxp) whose "%.*g" text reads
 * back as v. "%.*g" switches to exponent notation once the exponent reaches p, earlier than
 * "%.{maxp}g" would; such a text is reprinted in fixed notation when that spells the same
 * digits followed by zeros (100 rather than 1e+02) and kept otherwise (3.0689523e+08 for the
 * float 306895232, whose last digit is not needed to read back). */
static size_t shortest(double v, bool f32, char *buf)
{
    if (isnan(v)) {
        memcpy(buf, "nan", 4);
        return 3;
    }
    if (isinf(v)) {
        const char *s = v < 0 ? "-inf" : "inf";
        memcpy(buf, s, strlen(s) + 1);
        return strlen(s);
    }
    int maxp = f32 ? 9 : 17;
    int p = 1, n = 0;
    /* "%.17g" needs at most 24 bytes ("-1.2345678901234567e-308"), so nothing is cut. */
    for (; p <= maxp; p++) {
        n = snprintf(buf, PIPE_FLOAT_BUF, "%.*g", p, v);
        if (p == maxp || (f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v))
            break;
    }
    int x = exponent_of(buf);
    if (x != INT32_MIN && x >= -4 && x < maxp) {
        char fixed[PIPE_FLOAT_BUF];
        int m = snprintf(fixed, sizeof(fixed), "%.*g", x + 1, v);
        /* The fixed text is [-]D...D with x + 1 digits; the last x + 1 - p must be zeros. */
        bool zeros = m > 0 && m < PIPE_FLOAT_BUF && m >= x + 1 - p;
        for (int i = m - (x + 1 - p); zeros && i < m; i++)
            zeros = fixed[i] == '0';
        if (zeros && (f32 ? strtof(fixed, NULL) == (float)v : strtod(fixed, NULL) == v)) {
            memcpy(buf, fixed, (size_t)m + 1);
            n = m;
        }
    }
    return n > 0 ? (size_t)n : 0;
}

size_t pipe_format_f64(double v, char *buf)
{
    return shortest(v, false, buf);
}

size_t pipe_format_f32(float v, char *buf)
{
    return shortest((double)v, true, buf);
}

/* ---- Buffer ------------------------------------------------------------------------------- */

void pipe_buf_release(struct pipe_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
}

/* Makes room for n more bytes plus the terminating NUL. */
static int reserve(struct pipe_buf *b, size_t n)
{
    if (n < b->cap - b->len && b->p)
        return 0;
    if (n > SIZE_MAX / 2 - b->len - 1)
        return SLUICE_ERR_NOMEM;
    size_t need = b->len + n + 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return SLUICE_ERR_NOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int append(struct pipe_buf *b, const void *s, size_t n)
{
    int rc = reserve(b, n);
    if (rc)
        return rc;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* ---- Elements ----------------------------------------------------------------------------- */

static int append_bytes_escaped(struct pipe_buf *b, const uint8_t *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    /* Worst case every byte becomes four; reserving once keeps the loop free of checks. */
    if (n > SIZE_MAX / 4)
        return SLUICE_ERR_NOMEM;
    int rc = reserve(b, 4 * n);
    if (rc)
        return rc;
    char *o = b->p + b->len;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c == '\\') {
            *o++ = '\\';
            *o++ = '\\';
        } else if (c == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else if (c == '\t') {
            *o++ = '\\';
            *o++ = 't';
        } else if (c < 0x20 || c > 0x7e) {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        } else {
            *o++ = (char)c;
        }
    }
    b->len = (size_t)(o - b->p);
    b->p[b->len] = '\0';
    return 0;
}

/* Appends value k of t; the caller has checked that t's buffers hold it. */
static int append_value(struct pipe_buf *b, const struct pipe_tensor *t, uint64_t k)
{
    char tmp[PIPE_FLOAT_BUF];
    int n = 0;
    const uint8_t *p = t->data + k * sluice_dtype_size(t->dtype);
    switch (t->dtype) {
    case SLUICE_BOOL:
        return p[0] ? append(b, "true", 4) : append(b, "false", 5);
    case SLUICE_INT8: {
        int8_t v;
        memcpy(&v, p, 1);
        n = snprintf(tmp, sizeof(tmp), "%d", v);
        break;
    }
    case SLUICE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        n = snprintf(tmp, sizeof(tmp), "%d", v);
        break;
    }
    case SLUICE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        n = snprintf(tmp, sizeof(tmp), "%" PRId32, v);
        break;
    }
    case SLUICE_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        n = snprintf(tmp, sizeof(tmp), "%" PRId64, v);
        break;
    }
    case SLUICE_UINT8:
        n = snprintf(tmp, sizeof(tmp), "%u", p[0]);
        break;
    case SLUICE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        n = snprintf(tmp, sizeof(tmp), "%u", v);
        break;
    }
    case SLUICE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        n = snprintf(tmp, sizeof(tmp), "%" PRIu32, v);
        break;
    }
    case SLUICE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
        break;
    }
    case SLUICE_FLOAT32: {
        float v;
        memcpy(&v, p, 4);
        n = (int)pipe_format_f32(v, tmp);
        break;
    }
    case SLUICE_FLOAT64: {
        double v;
        memcpy(&v, p, 8);
        n = (int)pipe_format_f64(v, tmp);
        break;
    }
    case SLUICE_BYTES:
        return append_bytes_escaped(b, t->data + t->offs[k], t->offs[k + 1] - t->offs[k]);
    }
    return append(b, tmp, (size_t)n);
}

/* Prints dimension d of t and everything inside it, consuming values from *k onwards. The
 * recursion is bounded by the rank (at most SLUICE_MAX_RANK). */
static int append_dim(struct pipe_buf *b, const struct pipe_tensor *t, int d, uint64_t *k)
{
    if (d == t->rank)
        return append_value(b, t, (*k)++);
    int rc = append(b, "[", 1);
    for (int64_t i = 0; rc == 0 && i < t->shape[d]; i++) {
        if (i)
            rc = append(b, ", ", 2);
        if (rc == 0)
            rc = append_dim(b, t, d + 1, k);
    }
    return rc ? rc : append(b, "]", 1);
}

/* Checks that t's buffers hold every value its shape promises, so printing never reads past
 * them: a tensor can arrive from outside the process. */
static int tensor_check(const struct pipe_tensor *t)
{
    if (t->rank < 0 || t->rank > SLUICE_MAX_RANK || (unsigned)t->dtype > SLUICE_BYTES)
        return SLUICE_ERR_INVALID;
    uint64_t nv = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] < 0)
            return SLUICE_ERR_INVALID;
        if (t->shape[d] == 0) {
            nv = 0;
            continue;
        }
        if (nv > UINT64_MAX / (uint64_t)t->shape[d])
            return SLUICE_ERR_INVALID;
        nv *= (uint64_t)t->shape[d];
    }
    if (nv == 0)
        return 0;
    if (t->dtype != SLUICE_BYTES) {
        size_t sz = sluice_dtype_size(t->dtype);
        if (nv > t->len / sz || !t->data)
            return SLUICE_ERR_INVALID;
        return 0;
    }
    if (!t->offs || nv >= UINT64_MAX || nv + 1 > t->offs_cap)
        return SLUICE_ERR_INVALID;
    for (uint64_t k = 0; k < nv; k++)
        if (t->offs[k] > t->offs[k + 1] || t->offs[k + 1] > t->len)
            return SLUICE_ERR_INVALID;
    if (t->len && !t->data)
        return SLUICE_ERR_INVALID;
    return 0;
}

static int append_tensor(struct pipe_buf *b, const struct pipe_tensor *t)
{
    int rc = tensor_check(t);
    if (rc)
        return rc;
    uint64_t k = 0;
    return append_dim(b, t, 0, &k);
}

int pipe_format_elem(struct pipe_buf *b, const struct sluice_element *e)
{
    size_t start = b->len;
    int rc = 0;
    if (e->n == 1) {
        rc = append_tensor(b, &e->t[0]);
    } else {
        rc = append(b, "(", 1);
        for (size_t i = 0; rc == 0 && i < e->n; i++) {
            if (i)
                rc = append(b, ", ", 2);
            if (rc == 0)
                rc = append_tensor(b, &e->t[i]);
        }
        if (rc == 0)
            rc = append(b, ")", 1);
    }
    if (rc) {
        /* Leave the buffer as it was, so a failed element adds nothing. */
        b->len = start;
        if (b->p)
            b->p[start] = '\0';
    }
    return rc;
}
