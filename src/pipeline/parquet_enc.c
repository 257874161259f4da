#include "parquet_enc.h"

#include "common/error.h"
#include "common/grow.h"
#include "parquet_thrift.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the Parquet reader copies little-endian values as they are"
#endif

/* The most bytes of strings a decoder builds for one batch (DELTA_BYTE_ARRAY,
 * BYTE_STREAM_SPLIT): past it a batch stops early (after one string at least). */
#define ARENA_LIMIT ((size_t)16 << 20)

float pq_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* A subnormal half is mant * 2^-24, exactly representable as a normal float. */
        float f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* An unsigned LEB128 varint; returns its length, or 0 when it runs past end or past 64 bits. */
static size_t uvarint(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 10 && p + i < end; i++) {
        uint8_t b = p[i];
        if (i == 9 && b > 1)
            return 0;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    return 0;
}

static int64_t unzigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* Up to 8 little-endian bytes at p, of which avail (>= 1) are readable; the rest read as 0. */
static inline uint64_t load64(const uint8_t *p, size_t avail)
{
    uint64_t w = 0;
    memcpy(&w, p, avail >= 8 ? 8 : avail);
    return w;
}

/* bw (1..64) bits at bit offset pos of the nbytes at b; the caller has checked that they lie
 * inside. */
static inline uint64_t bits_at(const uint8_t *b, size_t nbytes, uint64_t pos, int bw)
{
    size_t byte = (size_t)(pos >> 3);
    int sh = (int)(pos & 7);
    uint64_t w = load64(b + byte, nbytes - byte) >> sh;
    if (sh + bw > 64)
        w |= (uint64_t)b[byte + 8] << (64 - sh);
    return bw == 64 ? w : w & ((UINT64_C(1) << bw) - 1);
}

/* ---- RLE / bit-packed hybrid ---------------------------------------------------------------- */

int pq_rle_init(struct pq_rle *r, const uint8_t *p, size_t len, int bit_width, char *err,
                size_t errlen)
{
    if (bit_width < 0 || bit_width > 32)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "RLE bit width %d over 32", bit_width);
    memset(r, 0, sizeof(*r));
    r->p = p;
    r->end = len ? p + len : p; /* p may be NULL when there are no bytes */
    r->bw = bit_width;
    return 0;
}

static int rle_next_run(struct pq_rle *r, char *err, size_t errlen)
{
    if (r->p >= r->end && r->bw == 0) {
        /* Zero-width values need no bytes: the rest are zeros. */
        r->packed = false;
        r->value = 0;
        r->left = UINT64_MAX;
        return 0;
    }
    uint64_t h;
    size_t n = uvarint(r->p, r->end, &h);
    if (!n)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "RLE data ends early");
    r->p += n;
    size_t avail = (size_t)(r->end - r->p);
    if (h & 1) {
        uint64_t groups = h >> 1;
        if (groups > (UINT64_C(1) << 56))
            return err_set(err, errlen, SLUICE_ERR_INVALID, "RLE run too long");
        uint64_t count = groups * 8;
        uint64_t bytes = groups * (uint64_t)r->bw;
        /* A writer may stop the last run's bytes at the last value it holds. */
        size_t take = bytes < avail ? (size_t)bytes : avail;
        uint64_t have = r->bw ? (uint64_t)take * 8 / (uint64_t)r->bw : count;
        r->packed = true;
        r->bits = r->p;
        r->nbits_bytes = take;
        r->bitpos = 0;
        r->left = count < have ? count : have;
        r->p += take;
        if (r->left == 0 && count > 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "RLE data ends early");
    } else {
        size_t vbytes = ((size_t)r->bw + 7) / 8;
        if (vbytes > avail)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "RLE data ends early");
        uint32_t v = 0;
        for (size_t i = 0; i < vbytes; i++)
            v |= (uint32_t)r->p[i] << (8 * i);
        r->p += vbytes;
        r->packed = false;
        r->value = v;
        r->left = h >> 1;
    }
    return 0;
}

int pq_rle_get(struct pq_rle *r, uint32_t *out, size_t n, char *err, size_t errlen)
{
    while (n) {
        if (r->left == 0) {
            int rc = rle_next_run(r, err, errlen);
            if (rc)
                return rc;
            continue;
        }
        size_t k = r->left < n ? (size_t)r->left : n;
        if (!r->packed || r->bw == 0) {
            uint32_t v = r->packed ? 0 : r->value;
            for (size_t i = 0; i < k; i++)
                out[i] = v;
        } else {
            const uint8_t *b = r->bits;
            size_t nb = r->nbits_bytes;
            uint64_t pos = r->bitpos;
            int bw = r->bw;
            for (size_t i = 0; i < k; i++, pos += (uint64_t)bw)
                out[i] = (uint32_t)bits_at(b, nb, pos, bw);
            r->bitpos = pos;
        }
        out += k;
        n -= k;
        r->left -= k;
    }
    return 0;
}

/* ---- DELTA_BINARY_PACKED -------------------------------------------------------------------- */

static int delta_bad(char *err, size_t errlen, const char *what)
{
    return err_set(err, errlen, SLUICE_ERR_INVALID, "DELTA_BINARY_PACKED: %s", what);
}

int pq_delta_init(struct pq_delta *d, const uint8_t *p, size_t len, int max_bits, char *err,
                  size_t errlen)
{
    memset(d, 0, sizeof(*d));
    const uint8_t *end = p + len;
    uint64_t block, mbs, total, first;
    size_t n;
    if (!(n = uvarint(p, end, &block)))
        return delta_bad(err, errlen, "header ends early");
    p += n;
    if (!(n = uvarint(p, end, &mbs)))
        return delta_bad(err, errlen, "header ends early");
    p += n;
    if (!(n = uvarint(p, end, &total)))
        return delta_bad(err, errlen, "header ends early");
    p += n;
    if (!(n = uvarint(p, end, &first)))
        return delta_bad(err, errlen, "header ends early");
    p += n;
    if (block == 0 || block % 128 || block > (UINT64_C(1) << 31) || mbs == 0 || block % mbs ||
        (block / mbs) % 8)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "DELTA_BINARY_PACKED: block of %llu values in %llu miniblocks",
                       (unsigned long long)block, (unsigned long long)mbs);
    d->p = p;
    d->end = end;
    d->total = total;
    d->mb_count = mbs;
    d->mb_size = block / mbs;
    d->last = unzigzag(first);
    d->mb = mbs;
    d->max_bw = max_bits;
    return 0;
}

/* Moves to the next miniblock, reading a block header first when the block is done. remaining:
 * the values still to come, which bounds the bytes the miniblock must have. */
static int delta_next_mb(struct pq_delta *d, uint64_t remaining, char *err, size_t errlen)
{
    if (d->mb >= d->mb_count) {
        uint64_t z;
        size_t n = uvarint(d->p, d->end, &z);
        if (!n)
            return delta_bad(err, errlen, "block header ends early");
        d->p += n;
        if (d->mb_count > (uint64_t)(d->end - d->p))
            return delta_bad(err, errlen, "block header ends early");
        d->min_delta = unzigzag(z);
        d->widths = d->p;
        d->p += d->mb_count;
        d->mb = 0;
    }
    int bw = d->widths[d->mb];
    if (bw > d->max_bw)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "DELTA_BINARY_PACKED: bit width %d over %d",
                       bw, d->max_bw);
    uint64_t bytes = d->mb_size * (uint64_t)bw / 8;
    uint64_t k = remaining < d->mb_size ? remaining : d->mb_size;
    uint64_t need = (k * (uint64_t)bw + 7) / 8;
    size_t avail = (size_t)(d->end - d->p);
    if (need > avail)
        return delta_bad(err, errlen, "miniblock ends early");
    size_t take = bytes < avail ? (size_t)bytes : avail;
    d->bits = d->p;
    d->nbits_bytes = take;
    d->bitpos = 0;
    d->bw = bw;
    d->p += take;
    d->mb++;
    d->mb_left = d->mb_size;
    return 0;
}

int pq_delta_get(struct pq_delta *d, int64_t *out, size_t n, char *err, size_t errlen)
{
    size_t i = 0;
    if (n == 0)
        return 0;
    if (n > d->total - d->done)
        return delta_bad(err, errlen, "fewer values than the page holds");
    if (d->done == 0) {
        out[i++] = d->last;
        d->done = 1;
    }
    while (i < n) {
        if (d->mb_left == 0) {
            int rc = delta_next_mb(d, d->total - d->done, err, errlen);
            if (rc)
                return rc;
        }
        size_t k = n - i;
        if (k > d->mb_left)
            k = (size_t)d->mb_left;
        uint64_t last = (uint64_t)d->last, min = (uint64_t)d->min_delta;
        if (d->bw == 0) {
            for (size_t j = 0; j < k; j++) {
                last += min;
                out[i + j] = (int64_t)last;
            }
        } else {
            uint64_t pos = d->bitpos;
            for (size_t j = 0; j < k; j++, pos += (uint64_t)d->bw) {
                last += min + bits_at(d->bits, d->nbits_bytes, pos, d->bw);
                out[i + j] = (int64_t)last;
            }
            d->bitpos = pos;
        }
        d->last = (int64_t)last;
        d->mb_left -= k;
        d->done += k;
        i += k;
    }
    return 0;
}

int pq_delta_size(const uint8_t *p, size_t len, size_t *size, char *err, size_t errlen)
{
    struct pq_delta d;
    int rc = pq_delta_init(&d, p, len, 64, err, errlen);
    if (rc)
        return rc;
    uint64_t remaining = d.total ? d.total - 1 : 0;
    while (remaining) {
        if ((rc = delta_next_mb(&d, remaining, err, errlen)))
            return rc;
        remaining -= remaining < d.mb_size ? remaining : d.mb_size;
    }
    *size = (size_t)(d.p - p);
    return 0;
}

/* ---- Values --------------------------------------------------------------------------------- */

static int phys_width(const struct pq_conv *c)
{
    switch (c->phys) {
    case PQT_INT32:
    case PQT_FLOAT:
        return 4;
    case PQT_INT64:
    case PQT_DOUBLE:
        return 8;
    case PQT_INT96:
        return 12;
    case PQT_FIXED_LEN_BYTE_ARRAY:
        return c->width;
    default:
        return 0;
    }
}

uint64_t pq_plain_max(const struct pq_conv *conv, size_t len)
{
    if (conv->phys == PQT_BOOLEAN)
        return (uint64_t)len * 8;
    if (conv->phys == PQT_BYTE_ARRAY)
        return len / 4;
    int w = phys_width(conv);
    return w > 0 ? len / (size_t)w : 0;
}

/* n fixed-width physical values at src into out, converted to the dtype. */
static void conv_fixed(const struct pq_conv *c, const uint8_t *src, size_t n, uint8_t *out)
{
    switch (c->phys) {
    case PQT_INT32:
        switch (sluice_dtype_size(c->dtype)) {
        case 1:
            for (size_t i = 0; i < n; i++)
                out[i] = src[4 * i];
            return;
        case 2:
            for (size_t i = 0; i < n; i++)
                memcpy(out + 2 * i, src + 4 * i, 2);
            return;
        default:
            memcpy(out, src, n * 4);
            return;
        }
    case PQT_FIXED_LEN_BYTE_ARRAY: /* f16 */
        for (size_t i = 0; i < n; i++) {
            float f = pq_half_to_float((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
            memcpy(out + 4 * i, &f, 4);
        }
        return;
    default:
        memcpy(out, src, n * (size_t)phys_width(c));
        return;
    }
}

/* n integers into out, truncated to the dtype's width. */
static void conv_ints(enum sluice_dtype dtype, const int64_t *src, size_t n, uint8_t *out)
{
    switch (sluice_dtype_size(dtype)) {
    case 1:
        for (size_t i = 0; i < n; i++)
            out[i] = (uint8_t)src[i];
        break;
    case 2:
        for (size_t i = 0; i < n; i++) {
            uint16_t v = (uint16_t)src[i];
            memcpy(out + 2 * i, &v, 2);
        }
        break;
    case 4:
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)src[i];
            memcpy(out + 4 * i, &v, 4);
        }
        break;
    default:
        memcpy(out, src, n * 8);
        break;
    }
}

static const char *enc_name(int e)
{
    switch (e) {
    case PQT_PLAIN:
        return "PLAIN";
    case PQT_PLAIN_DICTIONARY:
        return "PLAIN_DICTIONARY";
    case PQT_RLE:
        return "RLE";
    case PQT_BIT_PACKED:
        return "BIT_PACKED";
    case PQT_DELTA_BINARY_PACKED:
        return "DELTA_BINARY_PACKED";
    case PQT_DELTA_LENGTH_BYTE_ARRAY:
        return "DELTA_LENGTH_BYTE_ARRAY";
    case PQT_DELTA_BYTE_ARRAY:
        return "DELTA_BYTE_ARRAY";
    case PQT_RLE_DICTIONARY:
        return "RLE_DICTIONARY";
    case PQT_BYTE_STREAM_SPLIT:
        return "BYTE_STREAM_SPLIT";
    default:
        return "unknown";
    }
}

int pq_values_init(struct pq_values *v, int encoding, const struct pq_conv *conv, const uint8_t *p,
                   size_t len, const void *dict, size_t dict_n, char *err, size_t errlen)
{
    int phys = conv->phys;
    bool bytes_type = phys == PQT_BYTE_ARRAY || phys == PQT_FIXED_LEN_BYTE_ARRAY;
    bool ok;
    switch (encoding) {
    case PQT_PLAIN:
    case PQT_PLAIN_DICTIONARY:
    case PQT_RLE_DICTIONARY:
        ok = true;
        break;
    case PQT_RLE:
        ok = phys == PQT_BOOLEAN;
        break;
    case PQT_DELTA_BINARY_PACKED:
        ok = phys == PQT_INT32 || phys == PQT_INT64;
        break;
    case PQT_DELTA_LENGTH_BYTE_ARRAY:
        ok = phys == PQT_BYTE_ARRAY;
        break;
    case PQT_DELTA_BYTE_ARRAY:
        ok = bytes_type;
        break;
    case PQT_BYTE_STREAM_SPLIT:
        ok = phys != PQT_BOOLEAN && phys != PQT_BYTE_ARRAY && phys != PQT_INT96;
        break;
    default:
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED, "encoding %s (%d) not supported",
                       enc_name(encoding), encoding);
    }
    if (!ok)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "encoding %s on a column of type %d",
                       enc_name(encoding), phys);
    v->encoding = encoding;
    v->conv = *conv;
    v->vsize = sluice_dtype_size(conv->dtype);
    v->p = p;
    v->end = p + len;
    v->bitpos = 0;
    v->dict = dict;
    v->dict_n = dict_n;
    v->tpos = v->tcnt = 0;
    int rc = 0;
    size_t size;
    switch (encoding) {
    case PQT_PLAIN_DICTIONARY:
    case PQT_RLE_DICTIONARY:
        if (!dict)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "dictionary-encoded page without a dictionary page");
        if (len < 1)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "dictionary indices missing");
        return pq_rle_init(&v->rle, p + 1, len - 1, p[0], err, errlen);
    case PQT_RLE: {
        if (len < 4)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "RLE booleans: length missing");
        uint32_t n;
        memcpy(&n, p, 4);
        if (n > len - 4)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "RLE booleans: length %u in %zu bytes",
                           n, len - 4);
        return pq_rle_init(&v->rle, p + 4, n, 1, err, errlen);
    }
    case PQT_DELTA_BINARY_PACKED:
        return pq_delta_init(&v->d1, p, len, phys == PQT_INT32 ? 32 : 64, err, errlen);
    case PQT_DELTA_LENGTH_BYTE_ARRAY:
        if ((rc = pq_delta_size(p, len, &size, err, errlen)) ||
            (rc = pq_delta_init(&v->d1, p, size, 32, err, errlen)))
            return rc;
        v->data = p + size;
        return 0;
    case PQT_DELTA_BYTE_ARRAY: {
        size_t size2;
        if ((rc = pq_delta_size(p, len, &size, err, errlen)) ||
            (rc = pq_delta_init(&v->d1, p, size, 32, err, errlen)) ||
            (rc = pq_delta_size(p + size, len - size, &size2, err, errlen)) ||
            (rc = pq_delta_init(&v->d2, p + size, size2, 32, err, errlen)))
            return rc;
        if (v->d1.total != v->d2.total)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "DELTA_BYTE_ARRAY: %llu prefix lengths but %llu suffixes",
                           (unsigned long long)v->d1.total, (unsigned long long)v->d2.total);
        v->data = p + size + size2;
        v->prev_len = 0;
        return 0;
    }
    case PQT_BYTE_STREAM_SPLIT: {
        size_t w = (size_t)phys_width(conv);
        if (w == 0 || len % w)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "BYTE_STREAM_SPLIT: %zu bytes are not whole values of %zu", len, w);
        v->bss_n = len / w;
        v->bss_i = 0;
        return 0;
    }
    default:
        return 0;
    }
}

static int ends_early(char *err, size_t errlen, int encoding)
{
    return err_set(err, errlen, SLUICE_ERR_INVALID, "%s values end before the page's count",
                   enc_name(encoding));
}

static int arena_reserve(struct pq_values *v, size_t need)
{
    return grow_bytes(&v->arena, &v->arena_cap, need, 4096);
}

/* A byte string a decoder built or found: a reference for bytes columns, a float for FLOAT16;
 * FIXED_LEN_BYTE_ARRAY values must have the type's length. */
static int put_string(struct pq_values *v, const uint8_t *s, size_t len, size_t i, uint8_t *out,
                      struct pq_ref *refs, char *err, size_t errlen)
{
    if (v->conv.phys == PQT_FIXED_LEN_BYTE_ARRAY && len != (size_t)v->conv.width)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s value of %zu bytes in a column of FIXED_LEN_BYTE_ARRAY(%d)",
                       enc_name(v->encoding), len, v->conv.width);
    if (v->conv.f16) {
        float f = pq_half_to_float((uint16_t)(s[0] | s[1] << 8));
        memcpy(out + 4 * i, &f, 4);
    } else {
        refs[i].p = s;
        refs[i].len = len;
    }
    return 0;
}

static int plain_fixed(struct pq_values *v, size_t n, uint8_t *out, char *err, size_t errlen)
{
    size_t w = (size_t)phys_width(&v->conv);
    if (n > (size_t)(v->end - v->p) / w)
        return ends_early(err, errlen, v->encoding);
    conv_fixed(&v->conv, v->p, n, out);
    v->p += n * w;
    return 0;
}

static int plain_get(struct pq_values *v, size_t n, uint8_t *out, struct pq_ref *refs, char *err,
                     size_t errlen)
{
    size_t avail = (size_t)(v->end - v->p);
    switch (v->conv.phys) {
    case PQT_BOOLEAN: {
        if (n > (uint64_t)avail * 8 - v->bitpos)
            return ends_early(err, errlen, v->encoding);
        for (size_t i = 0; i < n; i++, v->bitpos++)
            out[i] = (v->p[v->bitpos >> 3] >> (v->bitpos & 7)) & 1;
        return 0;
    }
    case PQT_BYTE_ARRAY:
        for (size_t i = 0; i < n; i++) {
            uint32_t len;
            if (v->end - v->p < 4)
                return ends_early(err, errlen, v->encoding);
            memcpy(&len, v->p, 4);
            if (len > (size_t)(v->end - v->p) - 4)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "PLAIN string of %u bytes runs past the page", len);
            refs[i].p = v->p + 4;
            refs[i].len = len;
            v->p += 4 + (size_t)len;
        }
        return 0;
    case PQT_FIXED_LEN_BYTE_ARRAY:
        if (!v->conv.f16) {
            size_t w = (size_t)v->conv.width;
            if (n > avail / w)
                return ends_early(err, errlen, v->encoding);
            for (size_t i = 0; i < n; i++) {
                refs[i].p = v->p + i * w;
                refs[i].len = w;
            }
            v->p += n * w;
            return 0;
        }
        return plain_fixed(v, n, out, err, errlen); /* FLOAT16 */
    default:
        return plain_fixed(v, n, out, err, errlen);
    }
}

static int dict_get(struct pq_values *v, size_t n, uint8_t *out, struct pq_ref *refs, char *err,
                    size_t errlen)
{
    int rc = pq_rle_get(&v->rle, v->idx, n, err, errlen);
    if (rc)
        return rc;
    size_t dn = v->dict_n;
    for (size_t i = 0; i < n; i++)
        if (v->idx[i] >= dn)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "dictionary index %u out of range (dictionary of %zu)", v->idx[i], dn);
    if (v->vsize == 0) {
        const struct pq_ref *d = v->dict;
        for (size_t i = 0; i < n; i++)
            refs[i] = d[v->idx[i]];
        return 0;
    }
    const uint8_t *d = v->dict;
    switch (v->vsize) {
    case 1:
        for (size_t i = 0; i < n; i++)
            out[i] = d[v->idx[i]];
        break;
    case 2:
        for (size_t i = 0; i < n; i++)
            memcpy(out + 2 * i, d + 2 * (size_t)v->idx[i], 2);
        break;
    case 4:
        for (size_t i = 0; i < n; i++)
            memcpy(out + 4 * i, d + 4 * (size_t)v->idx[i], 4);
        break;
    default:
        for (size_t i = 0; i < n; i++)
            memcpy(out + 8 * i, d + 8 * (size_t)v->idx[i], 8);
        break;
    }
    return 0;
}

static int dlba_get(struct pq_values *v, size_t n, uint8_t *out, struct pq_ref *refs, char *err,
                    size_t errlen)
{
    int rc = pq_delta_get(&v->d1, v->tmp, n, err, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        int64_t len = v->tmp[i];
        if (len < 0 || (uint64_t)len > (uint64_t)(v->end - v->data))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "DELTA_LENGTH_BYTE_ARRAY: string of %lld bytes in %zu", (long long)len,
                           (size_t)(v->end - v->data));
        if ((rc = put_string(v, v->data, (size_t)len, i, out, refs, err, errlen)))
            return rc;
        v->data += len;
    }
    return 0;
}

/* DELTA_BYTE_ARRAY: each string is a prefix of the one before plus a suffix of its own. They are
 * built in the arena, at most ARENA_LIMIT bytes a batch (the lengths decoded but not used yet
 * wait in tmp and tmp2 for the next call); references are fixed up at the end since the arena
 * may move while it grows. */
static int dba_get(struct pq_values *v, size_t n, uint8_t *out, struct pq_ref *refs, size_t *got,
                   char *err, size_t errlen)
{
    int rc;
    if (v->tpos == v->tcnt) {
        if ((rc = pq_delta_get(&v->d1, v->tmp, n, err, errlen)) ||
            (rc = pq_delta_get(&v->d2, v->tmp2, n, err, errlen)))
            return rc;
        v->tpos = 0;
        v->tcnt = n;
    }
    if (n > v->tcnt - v->tpos)
        n = v->tcnt - v->tpos;
    size_t used = 0;
    *got = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t pre = v->tmp[v->tpos], suf = v->tmp2[v->tpos];
        v->tpos++;
        if (pre < 0 || (uint64_t)pre > v->prev_len)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "DELTA_BYTE_ARRAY: prefix of %lld bytes after a string of %zu",
                           (long long)pre, v->prev_len);
        if (suf < 0 || (uint64_t)suf > (uint64_t)(v->end - v->data))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "DELTA_BYTE_ARRAY: suffix of %lld bytes in %zu", (long long)suf,
                           (size_t)(v->end - v->data));
        /* The previous string stays in prev and the new one is assembled over it: its prefix
         * is already in place. */
        size_t len = (size_t)pre + (size_t)suf;
        if (grow_bytes(&v->prev, &v->prev_cap, len, 64) < 0)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        if (suf)
            memcpy(v->prev + pre, v->data, (size_t)suf);
        v->data += suf;
        v->prev_len = len;
        if (v->conv.phys == PQT_FIXED_LEN_BYTE_ARRAY && len != (size_t)v->conv.width)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "DELTA_BYTE_ARRAY value of %zu bytes in a column of "
                           "FIXED_LEN_BYTE_ARRAY(%d)",
                           len, v->conv.width);
        if (v->conv.f16) {
            float f = pq_half_to_float((uint16_t)(v->prev[0] | v->prev[1] << 8));
            memcpy(out + 4 * i, &f, 4);
        } else {
            if (arena_reserve(v, used + len))
                return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
            if (len)
                memcpy(v->arena + used, v->prev, len);
            refs[i].p = NULL;
            refs[i].len = len;
            used += len;
        }
        *got = i + 1;
        if (used > ARENA_LIMIT)
            break;
    }
    if (!v->conv.f16) {
        size_t at = 0;
        for (size_t i = 0; i < *got; i++) {
            refs[i].p = v->arena + at;
            at += refs[i].len;
        }
    }
    return 0;
}

static int bss_get(struct pq_values *v, size_t n, uint8_t *out, struct pq_ref *refs, char *err,
                   size_t errlen)
{
    size_t w = (size_t)phys_width(&v->conv);
    if (n > v->bss_n - v->bss_i)
        return ends_early(err, errlen, v->encoding);
    if (arena_reserve(v, n * w))
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    const uint8_t *src = v->p;
    size_t stride = (size_t)v->bss_n, at = (size_t)v->bss_i;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < w; j++)
            v->arena[i * w + j] = src[j * stride + at + i];
    v->bss_i += n;
    if (v->vsize == 0) {
        for (size_t i = 0; i < n; i++) {
            refs[i].p = v->arena + i * w;
            refs[i].len = w;
        }
    } else {
        conv_fixed(&v->conv, v->arena, n, out);
    }
    return 0;
}

int pq_values_get(struct pq_values *v, size_t n, void *outp, struct pq_ref *refs, size_t *got,
                  char *err, size_t errlen)
{
    assert(n <= PQ_BATCH);
    uint8_t *out = outp;
    int rc;
    *got = n;
    switch (v->encoding) {
    case PQT_PLAIN:
        return plain_get(v, n, out, refs, err, errlen);
    case PQT_PLAIN_DICTIONARY:
    case PQT_RLE_DICTIONARY:
        return dict_get(v, n, out, refs, err, errlen);
    case PQT_RLE:
        if ((rc = pq_rle_get(&v->rle, v->idx, n, err, errlen)))
            return rc;
        for (size_t i = 0; i < n; i++)
            out[i] = (uint8_t)(v->idx[i] & 1);
        return 0;
    case PQT_DELTA_BINARY_PACKED:
        if ((rc = pq_delta_get(&v->d1, v->tmp, n, err, errlen)))
            return rc;
        conv_ints(v->conv.dtype, v->tmp, n, out);
        return 0;
    case PQT_DELTA_LENGTH_BYTE_ARRAY:
        return dlba_get(v, n, out, refs, err, errlen);
    case PQT_DELTA_BYTE_ARRAY:
        return dba_get(v, n, out, refs, got, err, errlen);
    case PQT_BYTE_STREAM_SPLIT: {
        /* Bound the arena by the value width: wide FIXED_LEN_BYTE_ARRAY values come fewer at a
         * time. */
        size_t w = (size_t)phys_width(&v->conv);
        if (n > 1 && n * w > ARENA_LIMIT)
            n = ARENA_LIMIT / w ? ARENA_LIMIT / w : 1;
        *got = n;
        return bss_get(v, n, out, refs, err, errlen);
    }
    default:
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED, "encoding %d not supported",
                       v->encoding);
    }
}

void pq_values_free(struct pq_values *v)
{
    free(v->prev);
    free(v->arena);
    v->prev = v->arena = NULL;
    v->prev_cap = v->arena_cap = 0;
}
