/* parse_example: a bounds-checked protobuf wire decoder for tf.train.Example.
 *
 * The schema (proto/example.proto):
 *   Example   { Features features = 1; }
 *   Features  { map<string, Feature> feature = 1; }   // entries: { string key = 1; Feature value =
 * 2; } Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List
 * int64_list = 3; } } BytesList { repeated bytes value = 1; }  FloatList { repeated float value =
 * 1; } Int64List { repeated int64 value = 1; }
 *
 * Decoding runs in three steps over the record, none of which copies it: find, for each spec,
 * the last map entry whose key is its name; count the values of that entry's feature (checking
 * its kind and its wire format); then write the values into the output tensor, sized once. Every
 * length is checked against the bytes that remain before it is used. */
#include "example.h"

#include "common/error.h"
#include "common/varint.h"
#include "registry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most values one spec's shape may ask for: far more than a record holds, small enough that
 * sizes computed from it never overflow. */
#define MAX_SHAPE_VALUES ((uint64_t)1 << 30)

/* ---- Specs ------------------------------------------------------------------------------- */

static int spec_fail(char *err, size_t errlen, const char *text, size_t len, const char *why)
{
    return err_set(err, errlen, SLUICE_ERR_INVALID, "'%.*s': %s", (int)(len > 200 ? 200 : len),
                   text, why);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* Parses a decimal integer at text[*i, len) (optional '-'); false when there is none or it
 * overflows. */
static bool parse_dim(const char *text, size_t len, size_t *i, int64_t *out)
{
    size_t k = *i;
    bool neg = false;
    if (k < len && text[k] == '-') {
        neg = true;
        k++;
    }
    if (k == len || text[k] < '0' || text[k] > '9')
        return false;
    int64_t v = 0;
    while (k < len && text[k] >= '0' && text[k] <= '9') {
        if (v > (INT64_MAX - (text[k] - '0')) / 10)
            return false;
        v = v * 10 + (text[k] - '0');
        k++;
    }
    *out = neg ? -v : v;
    *i = k;
    return true;
}

static int parse_default(struct pipe_feature_spec *s, const char *text, size_t len, size_t at,
                         char *err, size_t errlen)
{
    const char *d = text + at;
    size_t dlen = len - at;
    if (s->variable)
        return spec_fail(err, errlen, text, len,
                         "a default needs a fixed shape (not a variable first dimension)");
    if (s->dtype == SLUICE_BYTES) {
        s->def_s = d;
        s->def_len = dlen;
        s->has_default = true;
        return 0;
    }
    char buf[64];
    if (dlen == 0 || dlen >= sizeof(buf))
        return spec_fail(err, errlen, text, len, "the default is not a number");
    memcpy(buf, d, dlen);
    buf[dlen] = '\0';
    char *end = NULL;
    errno = 0;
    if (s->dtype == SLUICE_INT64) {
        long long v = strtoll(buf, &end, 10);
        if (errno || *end || is_space(buf[0]))
            return spec_fail(err, errlen, text, len, "the default is not a 64-bit integer");
        s->def_i = (int64_t)v;
    } else {
        float v = strtof(buf, &end);
        if (errno || *end || is_space(buf[0]))
            return spec_fail(err, errlen, text, len, "the default is not a float32 number");
        s->def_f = v;
    }
    s->has_default = true;
    return 0;
}

int pipe_feature_spec_parse(const char *text, size_t len, struct pipe_feature_spec *out, char *err,
                            size_t errlen)
{
    memset(out, 0, sizeof(*out));
    const char *colon = memchr(text, ':', len);
    if (!colon)
        return spec_fail(err, errlen, text, len, "expected NAME:DTYPE[SHAPE]=DEFAULT");
    size_t name_len = (size_t)(colon - text);
    if (name_len == 0)
        return spec_fail(err, errlen, text, len, "the feature name is empty");
    if (name_len > PIPE_FEATURE_NAME_MAX)
        return spec_fail(err, errlen, text, len, "the feature name is too long");
    out->name = text;
    out->name_len = name_len;

    size_t i = name_len + 1, w = i;
    while (i < len && text[i] != '[' && text[i] != '=')
        i++;
    size_t wlen = i - w;
    if (wlen == 5 && memcmp(text + w, "bytes", 5) == 0) {
        out->dtype = SLUICE_BYTES;
    } else if (wlen == 5 && memcmp(text + w, "int64", 5) == 0) {
        out->dtype = SLUICE_INT64;
    } else if (wlen == 7 && memcmp(text + w, "float32", 7) == 0) {
        out->dtype = SLUICE_FLOAT32;
    } else {
        char why[SLUICE_ERRMSG_SIZE];
        snprintf(why, sizeof(why), "unknown dtype '%.*s' (bytes, int64 or float32)",
                 (int)(wlen > 32 ? 32 : wlen), text + w);
        return spec_fail(err, errlen, text, len, why);
    }

    out->inner = 1;
    if (i < len && text[i] == '[') {
        i++;
        while (i < len && is_space(text[i]))
            i++;
        if (i < len && text[i] == ']') {
            i++;
        } else {
            for (;;) {
                int64_t dim;
                if (!parse_dim(text, len, &i, &dim))
                    return spec_fail(err, errlen, text, len, "expected a dimension in the shape");
                if (out->rank == SLUICE_MAX_RANK)
                    return spec_fail(err, errlen, text, len, "a shape has at most 8 dimensions");
                if (dim == -1 && out->rank == 0) {
                    out->variable = true;
                } else if (dim < 0) {
                    return spec_fail(err, errlen, text, len,
                                     "dimensions are >= 0; only the first may be -1 (variable)");
                } else {
                    if (dim > 0 && out->inner > MAX_SHAPE_VALUES / (uint64_t)dim)
                        return spec_fail(err, errlen, text, len, "the shape is too large");
                    out->inner *= (uint64_t)dim;
                }
                out->shape[out->rank++] = dim;
                while (i < len && is_space(text[i]))
                    i++;
                if (i < len && text[i] == ']') {
                    i++;
                    break;
                }
                if (i == len || text[i] != ',')
                    return spec_fail(err, errlen, text, len, "expected ',' or ']' in the shape");
                i++;
                while (i < len && is_space(text[i]))
                    i++;
            }
        }
    }
    if (i < len && text[i] == '=')
        return parse_default(out, text, len, i + 1, err, errlen);
    if (i != len)
        return spec_fail(err, errlen, text, len, "unexpected text after the shape");
    return 0;
}

/* ---- Wire format ------------------------------------------------------------------------- */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

/* Reads a varint of at most 10 bytes at d[*pos, end), keeping the low 64 bits: bits a tenth byte
 * carries past them are dropped, as protobuf-c does. Returns false when it does not end in time. */
static bool get_varint(const uint8_t *d, size_t end, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < VARINT_MAX_LEN && *pos < end; i++) {
        uint8_t b = d[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* One field: its number and wire type; a LEN field's payload is d[start, start + len), a
 * VARINT's value is v. */
struct field {
    uint32_t num;
    int wt;
    uint64_t v;
    size_t start, len;
};

/* Reads the field at d[*pos, end). Returns 1 with *f filled, 0 at end, or -1 with a reason in
 * *why when the bytes are not a valid field. */
static int next_field(const uint8_t *d, size_t *pos, size_t end, struct field *f, const char **why)
{
    if (*pos >= end)
        return 0;
    /* A tag is a varint of at most 5 bytes, of which the low 32 bits count (as protobuf-c and
     * protobuf's readers take it). */
    uint64_t tag;
    if (!varint_get(d, end, pos, 5, &tag)) {
        *why = "bad field tag";
        return -1;
    }
    f->num = (uint32_t)tag >> 3; /* 0 is no field of these messages: skipped as unknown */
    f->wt = (int)(tag & 7);
    switch (f->wt) {
    case WT_VARINT:
        if (!get_varint(d, end, pos, &f->v)) {
            *why = "truncated or overlong varint";
            return -1;
        }
        return 1;
    case WT_I64:
        if (end - *pos < 8) {
            *why = "truncated fixed64";
            return -1;
        }
        *pos += 8;
        return 1;
    case WT_I32:
        if (end - *pos < 4) {
            *why = "truncated fixed32";
            return -1;
        }
        f->start = *pos;
        *pos += 4;
        return 1;
    case WT_LEN: {
        uint64_t n;
        if (!get_varint(d, end, pos, &n)) {
            *why = "bad length";
            return -1;
        }
        if (n > end - *pos) {
            *why = "length past the end";
            return -1;
        }
        f->start = *pos;
        f->len = (size_t)n;
        *pos += (size_t)n;
        return 1;
    }
    default:
        *why = f->wt == WT_SGROUP || f->wt == WT_EGROUP ? "groups are not supported"
                                                        : "unknown wire type";
        return -1;
    }
}

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
#endif

/* ---- Locating the features --------------------------------------------------------------- */

/* A map entry: d[start, end) is its body; found is false for specs without an entry. */
struct entry {
    bool found;
    size_t start, end;
};

static int malformed(char *err, size_t errlen, const char *where, const char *why)
{
    return err_set(err, errlen, SLUICE_ERR_CORRUPT, "malformed Example: %s: %s", where, why);
}

/* Reads a map entry's key (the last one, "" when absent), checking the entry's own framing. */
static int entry_key(const uint8_t *d, size_t start, size_t end, size_t *kstart, size_t *klen,
                     char *err, size_t errlen)
{
    *kstart = start;
    *klen = 0;
    size_t pos = start;
    struct field f;
    const char *why = NULL;
    int r;
    while ((r = next_field(d, &pos, end, &f, &why)) == 1) {
        if ((f.num == 1 || f.num == 2) && f.wt != WT_LEN)
            return malformed(err, errlen, "feature map entry", "key or value of the wrong type");
        if (f.num == 1) {
            *kstart = f.start;
            *klen = f.len;
        }
    }
    if (r < 0)
        return malformed(err, errlen, "feature map entry", why);
    return 0;
}

/* Walks Example.features (every occurrence: repeated message fields merge) and their map
 * entries, recording for each spec the last entry whose key is its name. */
static int locate(const uint8_t *d, size_t len, const struct pipe_feature_spec *specs, size_t n,
                  struct entry *ent, char *err, size_t errlen)
{
    size_t pos = 0;
    struct field f;
    const char *why = NULL;
    int r;
    while ((r = next_field(d, &pos, len, &f, &why)) == 1) {
        if (f.num != 1)
            continue;
        if (f.wt != WT_LEN)
            return malformed(err, errlen, "Example.features", "not a message");
        size_t fpos = f.start, fend = f.start + f.len;
        struct field e;
        int r2;
        while ((r2 = next_field(d, &fpos, fend, &e, &why)) == 1) {
            if (e.num != 1)
                continue;
            if (e.wt != WT_LEN)
                return malformed(err, errlen, "Features.feature", "not a map entry");
            size_t ks, kl;
            int rc = entry_key(d, e.start, e.start + e.len, &ks, &kl, err, errlen);
            if (rc)
                return rc;
            for (size_t i = 0; i < n; i++) {
                if (specs[i].name_len == kl && memcmp(specs[i].name, d + ks, kl) == 0)
                    ent[i] = (struct entry){true, e.start, e.start + e.len};
            }
        }
        if (r2 < 0)
            return malformed(err, errlen, "Features", why);
    }
    if (r < 0)
        return malformed(err, errlen, "Example", why);
    return 0;
}

/* ---- Reading one feature ----------------------------------------------------------------- */

/* Feature.kind's field numbers, and the dtype each one holds. */
enum { KIND_NONE = 0, KIND_BYTES = 1, KIND_FLOAT = 2, KIND_INT64 = 3 };

static enum sluice_dtype kind_dtype(int kind)
{
    return kind == KIND_BYTES ? SLUICE_BYTES : kind == KIND_FLOAT ? SLUICE_FLOAT32 : SLUICE_INT64;
}

/* Where the feature's final oneof member begins: the value occurrence (counting the entry's
 * field-2 fields from 0) and the offset of the member's first field inside it. Occurrences of
 * that member from there on merge; an earlier member, or an earlier run of this one interrupted
 * by another, was replaced. */
struct kind_run {
    int kind;
    size_t occ, off;
};

/* Counts the varints of a packed list p[0, len): every one ends in a byte below 0x80. Returns 0,
 * or -1 when the last one does not end or one is longer than 10 bytes. */
static int packed_varints(const uint8_t *p, size_t len, uint64_t *count)
{
    uint64_t n = 0;
    unsigned run = 0; /* continuation bytes before the current byte */
    for (size_t i = 0; i < len; i++) {
        if (p[i] < 0x80) {
            n++;
            run = 0;
        } else if (++run == VARINT_MAX_LEN) {
            return -1;
        }
    }
    if (run)
        return -1;
    *count = n;
    return 0;
}

/* Reads the varints of a packed list checked by packed_varints() into out. */
static void read_varints(const uint8_t *p, size_t len, int64_t *out)
{
    size_t i = 0;
    while (i < len) {
        uint64_t v = p[i] & 0x7f;
        unsigned shift = 7;
        while (p[i++] & 0x80) {
            v |= (uint64_t)(p[i] & 0x7f) << shift; /* shift <= 63: at most 10 bytes */
            shift += 7;
        }
        *out++ = (int64_t)v;
    }
}

/* Counts a list message's values (and, for bytes, their total length), checking its wire
 * format. Returns 0 or -1 with *why set. */
static int list_count(const uint8_t *d, size_t start, size_t end, int kind, uint64_t *count,
                      uint64_t *bytes, const char **why)
{
    size_t pos = start;
    struct field f;
    int r;
    while ((r = next_field(d, &pos, end, &f, why)) == 1) {
        if (f.num != 1)
            continue;
        switch (kind) {
        case KIND_BYTES:
            if (f.wt != WT_LEN) {
                *why = "a bytes value that is not length-delimited";
                return -1;
            }
            (*count)++;
            *bytes += f.len;
            break;
        case KIND_FLOAT:
            if (f.wt == WT_I32) {
                (*count)++;
            } else if (f.wt == WT_LEN) {
                if (f.len % 4 != 0) {
                    *why = "a packed float list whose length is not a multiple of 4";
                    return -1;
                }
                *count += f.len / 4;
            } else {
                *why = "a float value of the wrong wire type";
                return -1;
            }
            break;
        default:
            if (f.wt == WT_VARINT) {
                (*count)++;
            } else if (f.wt == WT_LEN) {
                uint64_t n;
                if (packed_varints(d + f.start, f.len, &n) < 0) {
                    *why = "a bad varint in a packed int64 list";
                    return -1;
                }
                *count += n;
            } else {
                *why = "an int64 value of the wrong wire type";
                return -1;
            }
            break;
        }
    }
    return r < 0 ? -1 : 0;
}

static int feature_fail(char *err, size_t errlen, int code, const struct pipe_feature_spec *s,
                        const char *why)
{
    return err_set(err, errlen, code, "feature '%.*s': malformed: %s", (int)s->name_len, s->name,
                   why);
}

/* Finds the final kind of the entry's feature and counts its values. */
static int feature_count(const uint8_t *d, const struct entry *ent,
                         const struct pipe_feature_spec *s, struct kind_run *run, uint64_t *count,
                         uint64_t *bytes, char *err, size_t errlen)
{
    run->kind = KIND_NONE;
    run->occ = run->off = 0;
    *count = *bytes = 0;
    size_t pos = ent->start, occ = 0;
    struct field v;
    const char *why = NULL;
    int r;
    while ((r = next_field(d, &pos, ent->end, &v, &why)) == 1) {
        if (v.num != 2)
            continue;
        size_t fpos = v.start, fend = v.start + v.len;
        struct field f;
        int r2;
        for (;;) {
            size_t at = fpos;
            r2 = next_field(d, &fpos, fend, &f, &why);
            if (r2 != 1)
                break;
            if (f.num < 1 || f.num > 3)
                continue;
            if (f.wt != WT_LEN)
                return feature_fail(err, errlen, SLUICE_ERR_CORRUPT, s,
                                    "a list that is not a message");
            if ((int)f.num != run->kind) {
                run->kind = (int)f.num;
                run->occ = occ;
                run->off = at - v.start;
                *count = *bytes = 0;
            }
            if (list_count(d, f.start, f.start + f.len, run->kind, count, bytes, &why) < 0)
                return feature_fail(err, errlen, SLUICE_ERR_CORRUPT, s, why);
        }
        if (r2 < 0)
            return feature_fail(err, errlen, SLUICE_ERR_CORRUPT, s, why);
        occ++;
    }
    if (r < 0)
        return feature_fail(err, errlen, SLUICE_ERR_CORRUPT, s, why);
    return 0;
}

/* Appends a list message's values (checked by list_count already) to t at *k. */
static void list_write(const uint8_t *d, size_t start, size_t end, int kind, struct pipe_tensor *t,
                       uint64_t *k, size_t *boff)
{
    size_t pos = start;
    struct field f;
    const char *why;
    while (next_field(d, &pos, end, &f, &why) == 1) {
        if (f.num != 1)
            continue;
        if (kind == KIND_BYTES) {
            if (f.len)
                memcpy(t->data + *boff, d + f.start, f.len);
            *boff += f.len;
            t->offs[++*k] = *boff;
        } else if (kind == KIND_FLOAT) {
            size_t n = f.wt == WT_I32 ? 1 : f.len / 4;
            if (n == 0)
                continue; /* an empty packed list; t->data may be NULL */
            float *out = (float *)(void *)t->data + *k;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            memcpy(out, d + f.start, 4 * n);
#else
            for (size_t j = 0; j < n; j++) {
                uint32_t u = load_le32(d + f.start + 4 * j);
                memcpy(&out[j], &u, 4);
            }
#endif
            *k += n;
        } else {
            int64_t *out = (int64_t *)(void *)t->data;
            if (f.wt == WT_VARINT) {
                out[(*k)++] = (int64_t)f.v;
            } else if (f.len > 0) {
                uint64_t n = 0;
                packed_varints(d + f.start, f.len, &n);
                read_varints(d + f.start, f.len, out + *k);
                *k += n;
            }
        }
    }
}

/* Writes the values of the entry's final run (as counted) into t. */
static void feature_write(const uint8_t *d, const struct entry *ent, const struct kind_run *run,
                          struct pipe_tensor *t)
{
    size_t pos = ent->start, occ = 0;
    uint64_t k = 0;
    size_t boff = 0;
    if (run->kind == KIND_BYTES)
        t->offs[0] = 0;
    struct field v;
    const char *why;
    while (next_field(d, &pos, ent->end, &v, &why) == 1) {
        if (v.num != 2)
            continue;
        if (occ++ < run->occ)
            continue;
        size_t fpos = v.start + (occ - 1 == run->occ ? run->off : 0), fend = v.start + v.len;
        struct field f;
        while (next_field(d, &fpos, fend, &f, &why) == 1)
            if ((int)f.num == run->kind)
                list_write(d, f.start, f.start + f.len, run->kind, t, &k, &boff);
    }
}

/* Sets t's dtype and shape for count values of spec s (count fits the shape). */
static void set_shape(struct pipe_tensor *t, const struct pipe_feature_spec *s, uint64_t count)
{
    t->dtype = s->dtype;
    t->rank = s->rank;
    memcpy(t->shape, s->shape, sizeof(t->shape));
    if (s->variable)
        t->shape[0] = s->inner ? (int64_t)(count / s->inner) : 0;
}

static void format_shape(const struct pipe_feature_spec *s, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->rank && off < len; i++)
        off +=
            (size_t)snprintf(buf + off, len - off, "%s%lld", i ? ", " : "", (long long)s->shape[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

static int check_count(const struct pipe_feature_spec *s, uint64_t count, char *err, size_t errlen)
{
    if (s->variable ? (s->inner == 0 ? count == 0 : count % s->inner == 0) : count == s->inner)
        return 0;
    char shape[160];
    format_shape(s, shape, sizeof(shape));
    const char *values = count == 1 ? "value" : "values";
    if (s->variable)
        return err_set(err, errlen, SLUICE_ERR_TYPE,
                       "feature '%.*s': has %llu %s, not a multiple of %llu (shape %s)",
                       (int)s->name_len, s->name, (unsigned long long)count, values,
                       (unsigned long long)s->inner, shape);
    if (s->rank == 0)
        return err_set(err, errlen, SLUICE_ERR_TYPE, "feature '%.*s': has %llu %s, expected 1",
                       (int)s->name_len, s->name, (unsigned long long)count, values);
    return err_set(err, errlen, SLUICE_ERR_TYPE,
                   "feature '%.*s': has %llu %s, expected %llu (shape %s)", (int)s->name_len,
                   s->name, (unsigned long long)count, values, (unsigned long long)s->inner, shape);
}

static int nomem(char *err, size_t errlen, const struct pipe_feature_spec *s)
{
    return err_set(err, errlen, SLUICE_ERR_NOMEM, "feature '%.*s': out of memory", (int)s->name_len,
                   s->name);
}

/* Fills t with spec s's default, repeated over its shape. */
static int write_default(const struct pipe_feature_spec *s, struct pipe_tensor *t, char *err,
                         size_t errlen)
{
    uint64_t n = s->inner;
    size_t size = s->dtype == SLUICE_BYTES ? s->def_len : sluice_dtype_size(s->dtype);
    if (size && n > SIZE_MAX / 2 / size)
        return nomem(err, errlen, s);
    t->dtype = s->dtype;
    if (pipe_tensor_reserve(t, (size_t)(n * size), (size_t)n))
        return nomem(err, errlen, s);
    set_shape(t, s, n);
    t->len = (size_t)(n * size);
    for (uint64_t j = 0; j < n; j++) {
        if (s->dtype == SLUICE_BYTES) {
            if (size)
                memcpy(t->data + j * size, s->def_s, size);
        } else if (s->dtype == SLUICE_INT64) {
            memcpy(t->data + j * 8, &s->def_i, 8);
        } else {
            memcpy(t->data + j * 4, &s->def_f, 4);
        }
    }
    if (s->dtype == SLUICE_BYTES)
        for (uint64_t j = 0; j <= n; j++)
            t->offs[j] = j * size;
    return 0;
}

int pipe_example_decode(const uint8_t *rec, size_t len, const struct pipe_feature_spec *specs,
                        size_t n, struct pipe_tensor *out, char *err, size_t errlen)
{
    struct entry ent[PIPE_MAX_COMPONENTS];
    if (n > PIPE_MAX_COMPONENTS)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "more than %d features",
                       PIPE_MAX_COMPONENTS);
    memset(ent, 0, n * sizeof(ent[0]));
    int rc = locate(rec, len, specs, n, ent, err, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const struct pipe_feature_spec *s = &specs[i];
        struct pipe_tensor *t = &out[i];
        if (!ent[i].found) {
            if (!s->has_default)
                return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "feature '%.*s': missing",
                               (int)s->name_len, s->name);
            rc = write_default(s, t, err, errlen);
            if (rc)
                return rc;
            continue;
        }
        struct kind_run run;
        uint64_t count, bytes;
        rc = feature_count(rec, &ent[i], s, &run, &count, &bytes, err, errlen);
        if (rc)
            return rc;
        /* A feature with no list set holds no values, of whatever dtype was asked for. */
        if (run.kind != KIND_NONE && kind_dtype(run.kind) != s->dtype)
            return err_set(err, errlen, SLUICE_ERR_TYPE,
                           "feature '%.*s': holds %s values, expected %s", (int)s->name_len,
                           s->name, sluice_dtype_name(kind_dtype(run.kind)),
                           sluice_dtype_name(s->dtype));
        rc = check_count(s, count, err, errlen);
        if (rc)
            return rc;
        /* count and bytes are bounded by len, so these sizes cannot overflow. */
        size_t nbytes =
            s->dtype == SLUICE_BYTES ? (size_t)bytes : (size_t)count * sluice_dtype_size(s->dtype);
        t->dtype = s->dtype;
        if (pipe_tensor_reserve(t, nbytes, (size_t)count))
            return nomem(err, errlen, s);
        set_shape(t, s, count);
        t->len = nbytes;
        if (run.kind == KIND_NONE) {
            if (s->dtype == SLUICE_BYTES)
                t->offs[0] = 0;
            continue;
        }
        feature_write(rec, &ent[i], &run, t);
    }
    return 0;
}

/* ---- The map function -------------------------------------------------------------------- */

static int parse_specs(const struct sluice_fn_args *a, struct pipe_feature_spec *specs, char *err,
                       size_t errlen)
{
    if (a->n > PIPE_MAX_COMPONENTS)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "at most %d features", PIPE_MAX_COMPONENTS);
    for (size_t i = 0; i < a->n; i++) {
        const struct pipe_value *v = &a->v[i];
        if (v->kind != PIPE_VAL_BYTES)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "argument %zu must be a string \"NAME:DTYPE[SHAPE]=DEFAULT\"", i + 1);
        int rc = pipe_feature_spec_parse(v->s ? v->s : "", v->slen, &specs[i], err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

int pipe_check_parse_example(const struct sluice_fn_args *args, char *err, size_t errlen)
{
    struct pipe_feature_spec specs[PIPE_MAX_COMPONENTS];
    return parse_specs(args, specs, err, errlen);
}

int pipe_fn_parse_example(struct sluice_element *e, const struct sluice_fn_args *args, void *user,
                          char *err, size_t errlen)
{
    struct pipe_feature_spec specs[PIPE_MAX_COMPONENTS];
    int rc = parse_specs(args, specs, err, errlen);
    if (rc)
        return rc;
    if (e->n == 0 || e->t[0].dtype != SLUICE_BYTES || e->t[0].rank != 0)
        return err_set(err, errlen, SLUICE_ERR_TYPE,
                       "component 0 must be a scalar bytes record (a serialized Example)");
    size_t k = args->n, rest = e->n - 1;
    if (k + rest > PIPE_MAX_COMPONENTS)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%zu features and %zu more components exceed %d components", k, rest,
                       PIPE_MAX_COMPONENTS);
    /* Lay the element out as [features..., the other components..., the record]: the record
     * moves to a spare slot past the end, where it keeps its buffer for the next element, and
     * the other components move up behind the features. */
    rc = pipe_elem_reserve(e, k + rest + 1);
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    pipe_tensor_swap(&e->t[0], &e->t[k + rest]);
    for (size_t i = rest; i >= 1 && k > 1; i--)
        pipe_tensor_swap(&e->t[i], &e->t[k + i - 1]);
    const struct pipe_tensor *r = &e->t[k + rest];
    rc = pipe_example_decode(r->data, r->len, specs, k, e->t, err, errlen);
    /* The features are valid tensors only after a success; a failure leaves no component. */
    e->n = rc ? 0 : k + rest;
    return rc;
}
