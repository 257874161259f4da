#include "codec.h"

#include "common/error.h"
#include "common/varint.h"

#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the element codec writes values in native order and assumes a little-endian machine"
#endif

#define FLAG_SNAPPY 0x01u
#define FLAG_TAGGED 0x02u
#define FLAG_SPLIT_END 0x04u
#define FLAG_SPLIT_FROM 0x08u
#define FLAG_PAD 0x10u

/* Pad records of 2 to CODEC_PAD_MAX bytes, length prefix included: row n is the one of n bytes
 * (its length, n - 1, fits the one-byte varint; what follows the flags is zeros). */
#define PAD_ROW(n)                                                                                 \
    {                                                                                              \
        (uint8_t)((n)-1), FLAG_PAD                                                                 \
    }
#define PAD_ROWS8(n)                                                                               \
    PAD_ROW(n), PAD_ROW((n) + 1), PAD_ROW((n) + 2), PAD_ROW((n) + 3), PAD_ROW((n) + 4),            \
        PAD_ROW((n) + 5), PAD_ROW((n) + 6), PAD_ROW((n) + 7)
static const uint8_t pad_rows[CODEC_PAD_MAX + 1][CODEC_PAD_MAX] = {
    {0},           {0},           PAD_ROWS8(2),  PAD_ROWS8(10), PAD_ROWS8(18),
    PAD_ROWS8(26), PAD_ROWS8(34), PAD_ROWS8(42), PAD_ROWS8(50), PAD_ROWS8(58),
};
_Static_assert(CODEC_PAD_MAX == 65, "pad_rows holds rows 2 to 65");

size_t codec_pad_len(uint64_t at, uint64_t skip)
{
    uint64_t n = (CODEC_ALIGN - (at + skip) % CODEC_ALIGN) % CODEC_ALIGN;
    return (size_t)(n == 1 ? n + CODEC_ALIGN : n);
}

const uint8_t *codec_pad_record(size_t n)
{
    return n >= 2 && n <= CODEC_PAD_MAX ? pad_rows[n] : NULL;
}

static int buf_reserve(struct pipe_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2)
            return SLUICE_ERR_NOMEM;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p)
        return SLUICE_ERR_NOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* The exact size of an element's uncompressed body. */
static size_t body_size(const struct sluice_element *e)
{
    size_t n = 1;
    for (size_t c = 0; c < e->n; c++) {
        const struct pipe_tensor *t = &e->t[c];
        n += 2;
        for (int d = 0; d < t->rank; d++)
            n += varint_len((uint64_t)t->shape[d]);
        if (t->dtype == SLUICE_BYTES) {
            uint64_t nv = pipe_tensor_num_values(t);
            for (uint64_t k = 0; k < nv; k++)
                n += varint_len(t->offs[k + 1] - t->offs[k]);
            n += t->offs[nv];
        } else {
            n += t->len;
        }
    }
    return n;
}

/* The bytes of a tensor's values in the body: the strings of a bytes tensor, else its data. */
static size_t values_size(const struct pipe_tensor *t)
{
    return t->dtype == SLUICE_BYTES ? t->offs[pipe_tensor_num_values(t)] : t->len;
}

/* Writes the body of e at p and returns its end. The values of component skip (when it is a
 * component index) are left out; *skip_at then receives where they belong. */
static uint8_t *write_body_skipping(uint8_t *p, const struct sluice_element *e, size_t skip,
                                    uint8_t **skip_at)
{
    *p++ = (uint8_t)e->n;
    for (size_t c = 0; c < e->n; c++) {
        const struct pipe_tensor *t = &e->t[c];
        *p++ = (uint8_t)t->dtype;
        *p++ = (uint8_t)t->rank;
        for (int d = 0; d < t->rank; d++)
            p += varint_put(p, (uint64_t)t->shape[d]);
        if (t->dtype == SLUICE_BYTES) {
            uint64_t nv = pipe_tensor_num_values(t);
            for (uint64_t k = 0; k < nv; k++)
                p += varint_put(p, t->offs[k + 1] - t->offs[k]);
        }
        if (c == skip) {
            *skip_at = p;
            continue;
        }
        size_t n = values_size(t);
        memcpy(p, t->data, n);
        p += n;
    }
    return p;
}

static uint8_t *write_body(uint8_t *p, const struct sluice_element *e)
{
    uint8_t *unused;
    return write_body_skipping(p, e, SIZE_MAX, &unused);
}

/* The bytes a tag takes after the flags byte. */
static size_t tag_len(const struct codec_tag *tag)
{
    return tag ? varint_len(tag->seq) + varint_len(tag->pos) : 0;
}

static uint8_t *tag_put(uint8_t *p, const struct codec_tag *tag)
{
    if (tag) {
        p += varint_put(p, tag->seq);
        p += varint_put(p, tag->pos);
    }
    return p;
}

int codec_append_tagged(struct pipe_buf *out, const struct sluice_element *e, bool compress,
                        struct pipe_buf *scratch, const struct codec_tag *tag)
{
    size_t raw = body_size(e);
    uint8_t flags = tag ? FLAG_TAGGED : 0;
    size_t tl = tag_len(tag);
    if (compress && raw >= 64) {
        /* Encode the body into scratch, compress straight into out, and keep the result only
         * when it saves at least an eighth. */
        scratch->len = 0;
        if (buf_reserve(scratch, raw))
            return SLUICE_ERR_NOMEM;
        write_body((uint8_t *)scratch->p, e);
        size_t max = snappy_max_compressed_length(raw);
        size_t head = 1 + tl + varint_len(raw);
        if (buf_reserve(out, 10 + head + max))
            return SLUICE_ERR_NOMEM;
        uint8_t *rec = (uint8_t *)out->p + out->len + 10;
        size_t clen = max;
        if (snappy_compress(scratch->p, raw, (char *)rec + head, &clen) == SNAPPY_OK &&
            clen <= raw - raw / 8) {
            size_t reclen = head + clen;
            uint8_t *p = (uint8_t *)out->p + out->len;
            size_t lp = varint_put(p, reclen);
            p += lp;
            /* Slide the record down to sit right after its length prefix. */
            rec[0] = flags | FLAG_SNAPPY;
            varint_put(tag_put(rec + 1, tag), raw);
            memmove(p, rec, reclen);
            out->len += lp + reclen;
            return 0;
        }
    }
    size_t reclen = 1 + tl + raw;
    if (buf_reserve(out, varint_len(reclen) + reclen))
        return SLUICE_ERR_NOMEM;
    uint8_t *p = (uint8_t *)out->p + out->len;
    p += varint_put(p, reclen);
    *p++ = flags;
    p = tag_put(p, tag);
    uint8_t *end = write_body(p, e);
    out->len = (size_t)((char *)end - out->p);
    return 0;
}

int codec_append_elem(struct pipe_buf *out, const struct sluice_element *e, bool compress,
                      struct pipe_buf *scratch)
{
    return codec_append_tagged(out, e, compress, scratch, NULL);
}

/* Appends a marker record: flag, then two varints. */
static int append_marker(struct pipe_buf *out, uint8_t flag, uint64_t seq, uint64_t n)
{
    size_t reclen = 1 + varint_len(seq) + varint_len(n);
    if (buf_reserve(out, varint_len(reclen) + reclen))
        return SLUICE_ERR_NOMEM;
    uint8_t *p = (uint8_t *)out->p + out->len;
    p += varint_put(p, reclen);
    *p++ = flag;
    p += varint_put(p, seq);
    p += varint_put(p, n);
    out->len = (size_t)((char *)p - out->p);
    return 0;
}

int codec_append_split_end(struct pipe_buf *out, uint64_t seq, uint64_t count)
{
    return append_marker(out, FLAG_SPLIT_END, seq, count);
}

int codec_append_split_from(struct pipe_buf *out, uint64_t seq, uint64_t from)
{
    return append_marker(out, FLAG_SPLIT_FROM, seq, from);
}

/* The component with the most value bytes, if it has at least min_ext of them; else SIZE_MAX. */
static size_t split_component(const struct sluice_element *e, size_t min_ext, size_t *len)
{
    size_t best = SIZE_MAX;
    *len = 0;
    for (size_t c = 0; c < e->n; c++) {
        size_t n = values_size(&e->t[c]);
        if (n >= min_ext && n > *len) {
            best = c;
            *len = n;
        }
    }
    return best;
}

bool codec_can_split_exact(const struct sluice_element *e, size_t min_ext)
{
    size_t len;
    return split_component(e, min_ext, &len) != SIZE_MAX;
}

bool codec_sample_compresses(const struct sluice_element *e, size_t min_ext, size_t sample,
                             struct pipe_buf *scratch)
{
    size_t len;
    size_t c = split_component(e, min_ext, &len);
    if (c == SIZE_MAX || sample == 0 || len < 2 * sample)
        return true;
    /* The middle: a file's header or a tensor's leading zeros say little about the rest. */
    const char *v = (const char *)e->t[c].data + (len - sample) / 2;
    size_t max = snappy_max_compressed_length(sample);
    scratch->len = 0;
    if (buf_reserve(scratch, max))
        return true;
    size_t clen = max;
    return snappy_compress(v, sample, scratch->p, &clen) == SNAPPY_OK &&
           clen <= sample - sample / 8;
}

int codec_append_split(struct pipe_buf *out, const struct sluice_element *e, size_t min_ext,
                       struct codec_split *split)
{
    return codec_append_split_tagged(out, e, min_ext, NULL, split);
}

int codec_append_split_tagged(struct pipe_buf *out, const struct sluice_element *e, size_t min_ext,
                              const struct codec_tag *tag, struct codec_split *split)
{
    size_t best_len;
    size_t best = split_component(e, min_ext, &best_len);
    if (best == SIZE_MAX)
        return 0;
    size_t reclen = 1 + tag_len(tag) + body_size(e);
    size_t inline_len = varint_len(reclen) + reclen - best_len;
    if (buf_reserve(out, inline_len))
        return SLUICE_ERR_NOMEM;
    uint8_t *p = (uint8_t *)out->p + out->len;
    p += varint_put(p, reclen);
    *p++ = tag ? FLAG_TAGGED : 0;
    p = tag_put(p, tag);
    uint8_t *at = NULL;
    uint8_t *end = write_body_skipping(p, e, best, &at);
    split->comp = best;
    split->at = (size_t)(at - (uint8_t *)out->p);
    split->len = best_len;
    out->len = (size_t)((char *)end - out->p);
    return 1;
}

static int corrupt(char *err, size_t errlen, size_t at, const char *what)
{
    return err_set(err, errlen, SLUICE_ERR_CORRUPT, "element codec: offset %zu: %s", at, what);
}

/* lender: see codec_next_record (NULL for a body decompressed into scratch). */
static int read_body(const uint8_t *d, size_t len, struct sluice_element *e, size_t base,
                     struct pipe_lender *lender, char *err, size_t errlen)
{
    size_t pos = 0;
    if (len < 1)
        return corrupt(err, errlen, base, "empty element");
    size_t ncomp = d[pos++];
    if (ncomp < 1 || ncomp > PIPE_MAX_COMPONENTS)
        return corrupt(err, errlen, base, "bad component count");
    /* What the previous element left lent goes back first: its values are about to be replaced,
     * and reserving over them would copy them. */
    pipe_elem_unlend(e);
    size_t lend_min =
        lender && lender->lend_min > CODEC_LEND_MIN ? lender->lend_min : CODEC_LEND_MIN;
    if (pipe_elem_resize(e, ncomp))
        return SLUICE_ERR_NOMEM;
    for (size_t c = 0; c < ncomp; c++) {
        struct pipe_tensor *t = &e->t[c];
        if (len - pos < 2)
            return corrupt(err, errlen, base + pos, "truncated component header");
        uint8_t dtype = d[pos++];
        uint8_t rank = d[pos++];
        if (dtype > SLUICE_BYTES)
            return corrupt(err, errlen, base + pos - 2, "unknown dtype");
        if (rank > SLUICE_MAX_RANK)
            return corrupt(err, errlen, base + pos - 1, "rank over limit");
        uint64_t nv = 1;
        int64_t shape[SLUICE_MAX_RANK];
        for (int k = 0; k < rank; k++) {
            uint64_t dim;
            if (!varint_get(d, len, &pos, VARINT_MAX_LEN, &dim) || dim > CODEC_MAX_ELEMENT)
                return corrupt(err, errlen, base + pos, "bad dimension");
            shape[k] = (int64_t)dim;
            if (dim && nv > CODEC_MAX_ELEMENT / dim)
                return corrupt(err, errlen, base + pos, "too many values");
            nv *= dim;
        }
        if (dtype == SLUICE_BYTES) {
            /* Each string takes at least one length byte, which bounds nv before allocating. */
            if (nv > len - pos)
                return corrupt(err, errlen, base + pos, "truncated string lengths");
            /* First pass: validate the lengths and total them; second pass: record offsets
             * once the buffers have their final size. */
            size_t lens_at = pos;
            uint64_t total = 0;
            for (uint64_t k = 0; k < nv; k++) {
                uint64_t sl;
                if (!varint_get(d, len, &pos, VARINT_MAX_LEN, &sl) || sl > len)
                    return corrupt(err, errlen, base + pos, "bad string length");
                total += sl;
                if (total > len)
                    return corrupt(err, errlen, base + pos, "strings longer than the element");
            }
            if (total > len - pos)
                return corrupt(err, errlen, base + pos, "truncated strings");
            t->dtype = SLUICE_BYTES; /* so that reserve makes room for offsets */
            bool lend = lender && total >= lend_min;
            if (pipe_tensor_reserve(t, lend ? 0 : total, nv))
                return SLUICE_ERR_NOMEM;
            size_t lp = lens_at;
            t->offs[0] = 0;
            for (uint64_t k = 0; k < nv; k++) {
                uint64_t sl = 0;
                /* Read once already (the first pass above), so it cannot fail here. */
                (void)varint_get(d, len, &lp, VARINT_MAX_LEN, &sl);
                t->offs[k + 1] = t->offs[k] + sl;
            }
            if (lend) {
                pipe_tensor_lend(t, d + pos, total, lender);
                e->lent = true;
            } else {
                memcpy(t->data, d + pos, total);
                t->len = total;
            }
            pos += total;
        } else {
            size_t width = pipe_dtype_size((enum sluice_dtype)dtype);
            uint64_t nbytes = nv * width;
            if (nbytes > len - pos)
                return corrupt(err, errlen, base + pos, "truncated values");
            t->dtype = (enum sluice_dtype)dtype;
            if (lender && nbytes >= lend_min && (uintptr_t)(d + pos) % width == 0) {
                pipe_tensor_lend(t, d + pos, nbytes, lender);
                e->lent = true;
            } else {
                if (pipe_tensor_reserve(t, nbytes, nv))
                    return SLUICE_ERR_NOMEM;
                memcpy(t->data, d + pos, nbytes);
                t->len = nbytes;
            }
            pos += nbytes;
        }
        t->dtype = (enum sluice_dtype)dtype;
        t->rank = rank;
        memcpy(t->shape, shape, sizeof(int64_t) * rank);
    }
    if (pos != len)
        return corrupt(err, errlen, base + pos, "trailing bytes after element");
    return 0;
}

/* A record's framing, flags and tag, read without touching its body. */
struct record_head {
    const uint8_t *rec; /* the record, after its length prefix */
    size_t len;         /* its length */
    size_t body;        /* where what follows the flags and tag starts in rec */
    uint8_t flags;
};

/* Reads the head of the record at data[*pos, len) into h and *mark and advances *pos past the
 * record. Returns CODEC_NO_MORE, CODEC_ELEMENT, CODEC_SPLIT_END or CODEC_SPLIT_FROM (whole: a
 * marker has no body), or
 * SLUICE_ERR_CORRUPT with *why saying what is wrong. */
/* Inlined into both readers: it runs once per element on the reader's path. */
static inline __attribute__((always_inline)) int read_head(const uint8_t *data, size_t len,
                                                           size_t *pos, struct record_head *h,
                                                           struct codec_mark *mark,
                                                           const char **why)
{
    mark->tagged = false;
    mark->seq = mark->pos = 0;
    do {
        if (*pos >= len)
            return CODEC_NO_MORE;
        uint64_t reclen;
        if (!varint_get(data, len, pos, VARINT_MAX_LEN, &reclen) || reclen > len - *pos ||
            reclen < 1) {
            *why = "bad record length";
            return SLUICE_ERR_CORRUPT;
        }
        h->rec = data + *pos;
        h->len = reclen;
        h->body = 1;
        h->flags = h->rec[0];
        *pos += reclen;
        /* A pad (codec_pad_record) is stepped over, whatever it holds. */
    } while (h->flags == FLAG_PAD);
    if (h->flags & ~(FLAG_SNAPPY | FLAG_TAGGED | FLAG_SPLIT_END | FLAG_SPLIT_FROM)) {
        *why = "unknown record flags";
        return SLUICE_ERR_CORRUPT;
    }
    uint8_t marker = h->flags & (FLAG_SPLIT_END | FLAG_SPLIT_FROM);
    if (marker && (h->flags != marker || marker == (FLAG_SPLIT_END | FLAG_SPLIT_FROM))) {
        *why = "split marker with other flags";
        return SLUICE_ERR_CORRUPT;
    }
    if (h->flags & (FLAG_TAGGED | FLAG_SPLIT_END | FLAG_SPLIT_FROM)) {
        if (!varint_get(h->rec, h->len, &h->body, VARINT_MAX_LEN, &mark->seq) ||
            !varint_get(h->rec, h->len, &h->body, VARINT_MAX_LEN, &mark->pos) ||
            (marker && h->body != h->len)) {
            *why = marker ? "bad split marker" : "bad element tag";
            return SLUICE_ERR_CORRUPT;
        }
        mark->tagged = true;
    }
    if (marker)
        return marker == FLAG_SPLIT_END ? CODEC_SPLIT_END : CODEC_SPLIT_FROM;
    return CODEC_ELEMENT;
}

int codec_scan_record(const uint8_t *data, size_t len, size_t *pos, struct codec_mark *mark)
{
    struct record_head h;
    const char *why;
    return read_head(data, len, pos, &h, mark, &why);
}

int codec_next_record(const uint8_t *data, size_t len, size_t *pos, struct sluice_element *e,
                      struct pipe_buf *scratch, struct pipe_lender *lender, struct codec_mark *mark,
                      char *err, size_t errlen)
{
    size_t at = *pos;
    struct record_head h;
    const char *why = "";
    int kind = read_head(data, len, pos, &h, mark, &why);
    if (kind == SLUICE_ERR_CORRUPT)
        return corrupt(err, errlen, at, why);
    if (kind != CODEC_ELEMENT)
        return kind;
    const uint8_t *rec = h.rec;
    size_t reclen = h.len, recpos = h.body;
    uint8_t flags = h.flags;
    if (!(flags & FLAG_SNAPPY)) {
        int rc = read_body(rec + recpos, reclen - recpos, e, (size_t)(rec + recpos - data), lender,
                           err, errlen);
        return rc ? rc : CODEC_ELEMENT;
    }
    uint64_t raw;
    if (!varint_get(rec, reclen, &recpos, VARINT_MAX_LEN, &raw) || raw > CODEC_MAX_ELEMENT)
        return corrupt(err, errlen, at, "bad uncompressed length");
    size_t ulen;
    const char *cdata = (const char *)rec + recpos;
    size_t clen = reclen - recpos;
    if (snappy_uncompressed_length(cdata, clen, &ulen) != SNAPPY_OK || ulen != raw)
        return corrupt(err, errlen, at, "bad compressed record");
    scratch->len = 0;
    if (buf_reserve(scratch, raw ? raw : 1))
        return SLUICE_ERR_NOMEM;
    if (snappy_uncompress(cdata, clen, scratch->p, &ulen) != SNAPPY_OK || ulen != raw)
        return corrupt(err, errlen, at, "bad compressed record");
    int rc = read_body((const uint8_t *)scratch->p, raw, e, at, NULL, err, errlen);
    return rc ? rc : CODEC_ELEMENT;
}

int codec_next_elem(const uint8_t *data, size_t len, size_t *pos, struct sluice_element *e,
                    struct pipe_buf *scratch, char *err, size_t errlen)
{
    struct codec_mark mark;
    int rc;
    while ((rc = codec_next_record(data, len, pos, e, scratch, NULL, &mark, err, errlen)) ==
               CODEC_SPLIT_END ||
           rc == CODEC_SPLIT_FROM)
        ;
    return rc;
}
