/* The Parquet reader: the footer and schema (pq_open), and a cursor that streams one column
 * chunk page by page. A page is read whole (its header first, in bounded pieces), checked
 * against its CRC, decompressed, and then decoded a batch of PQ_BATCH levels and values at a
 * time; rows are handed out of the batch. Failure modes: every inconsistency in the file is
 * SLUICE_ERR_INVALID naming the file, row group, column and page offset; a cursor that failed
 * stays failed. */
#include "parquet.h"

#include "common/error.h"
#include "common/grow.h"
#include "parquet_enc.h"
#include "parquet_thrift.h"

#include <brotli/decode.h>
#include <errno.h>
#include <inttypes.h>
#include <lz4.h>
#include <snappy-c.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

/* A page header is read in pieces from this size up to HEADER_MAX. */
#define HEADER_FIRST 256
#define HEADER_MAX ((size_t)16 << 20)
#define MSG 512

struct pq_col {
    struct pq_column_info info;
    char *why;   /* owned text of info.why_unsupported */
    size_t leaf; /* the column chunk's index in each row group */
    int32_t phys;
    int max_def, max_rep;
    int def_row;  /* lists: a definition level below this is a null row */
    int def_elem; /* lists: a definition level at or above this is an element */
    struct pq_conv conv;
};

struct pq_file {
    struct pq_io io;
    struct pqt_file_meta meta;
    struct pq_col *cols;
    size_t ncols;
    uint64_t data_end; /* where the footer starts: no column chunk reaches past it */
};

/* ---- I/O --------------------------------------------------------------------------------------
 */

/* Reads from memory. The reader checks every read against io.size before it asks, so the range
 * is always inside the buffer. */
static int mem_read(void *user, void *buf, size_t len, uint64_t off, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    memcpy(buf, (const uint8_t *)user + off, len);
    return 0;
}

void pq_io_mem(struct pq_io *io, const void *data, size_t len, const char *name)
{
    io->read = mem_read;
    io->user = (void *)(uintptr_t)data;
    io->size = len;
    io->name = name;
}

static int fd_read(void *user, void *buf, size_t len, uint64_t off, char *err, size_t errlen)
{
    int fd = (int)(intptr_t)user;
    uint8_t *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return err_set(err, errlen, -errno, "read at %" PRIu64 ": %s", off, strerror(errno));
        if (n == 0)
            return err_set(err, errlen, SLUICE_ERR_TRUNCATED, "file ends at %" PRIu64, off);
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int pq_io_fd(struct pq_io *io, int fd, const char *name, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return err_set(err, errlen, -errno, "%s: %s", name, strerror(errno));
    io->read = fd_read;
    io->user = (void *)(intptr_t)fd;
    io->size = (uint64_t)st.st_size;
    io->name = name;
    return 0;
}

static int io_read(const struct pq_io *io, void *buf, size_t len, uint64_t off, char *err,
                   size_t errlen)
{
    return io->read(io->user, buf, len, off, err, errlen);
}

/* ---- Schema -----------------------------------------------------------------------------------
 */

static int level_width(int max)
{
    int w = 0;
    while (max >> w)
        w++;
    return w;
}

static bool is_list(const struct pqt_schema *s)
{
    return s->converted == PQT_CT_LIST || s->logical == PQT_LT_LIST;
}

static bool is_decimal(const struct pqt_schema *s)
{
    return s->converted == PQT_CT_DECIMAL || s->logical == PQT_LT_DECIMAL;
}

/* The sluice dtype of a primitive leaf, or a reason it has none (into why). */
static bool leaf_dtype(const struct pqt_schema *s, struct pq_conv *conv, char *why, size_t whylen)
{
    memset(conv, 0, sizeof(*conv));
    conv->phys = s->type;
    conv->width = s->type_length;
    if (is_decimal(s)) {
        snprintf(why, whylen, "column %s: DECIMAL is not supported", s->name);
        return false;
    }
    int bits = 0;
    bool sign = true;
    if (s->logical == PQT_LT_INTEGER) {
        bits = s->int_bits;
        sign = s->int_signed;
    } else if (s->converted >= PQT_CT_UINT_8 && s->converted <= PQT_CT_INT_64) {
        static const int b[] = {8, 16, 32, 64, 8, 16, 32, 64};
        bits = b[s->converted - PQT_CT_UINT_8];
        sign = s->converted >= PQT_CT_INT_8;
    }
    switch (s->type) {
    case PQT_BOOLEAN:
        conv->dtype = SLUICE_BOOL;
        return true;
    case PQT_INT32:
        if (bits == 8)
            conv->dtype = sign ? SLUICE_INT8 : SLUICE_UINT8;
        else if (bits == 16)
            conv->dtype = sign ? SLUICE_INT16 : SLUICE_UINT16;
        else if (bits == 32 && !sign)
            conv->dtype = SLUICE_UINT32;
        else
            conv->dtype = SLUICE_INT32;
        return true;
    case PQT_INT64:
        conv->dtype = bits == 64 && !sign ? SLUICE_UINT64 : SLUICE_INT64;
        return true;
    case PQT_INT96:
        snprintf(why, whylen, "column %s: INT96 is not supported", s->name);
        return false;
    case PQT_FLOAT:
        conv->dtype = SLUICE_FLOAT32;
        return true;
    case PQT_DOUBLE:
        conv->dtype = SLUICE_FLOAT64;
        return true;
    case PQT_BYTE_ARRAY:
        conv->dtype = SLUICE_BYTES;
        return true;
    case PQT_FIXED_LEN_BYTE_ARRAY:
        if (s->type_length <= 0) {
            snprintf(why, whylen, "column %s: FIXED_LEN_BYTE_ARRAY of length %d", s->name,
                     s->type_length);
            return false;
        }
        if (s->logical == PQT_LT_FLOAT16) {
            if (s->type_length != 2) {
                snprintf(why, whylen, "column %s: FLOAT16 of length %d", s->name, s->type_length);
                return false;
            }
            conv->f16 = true;
            conv->dtype = SLUICE_FLOAT32;
            return true;
        }
        conv->dtype = SLUICE_BYTES;
        return true;
    default:
        snprintf(why, whylen, "column %s: physical type %d is not known", s->name, s->type);
        return false;
    }
}

static bool is_group(const struct pqt_schema *s)
{
    return s->num_children > 0 || s->type < 0;
}

/* Walks the subtree at *i (depth-first, as the schema lists it), counting its leaves; *i moves
 * past it. */
static int subtree(const struct pqt_file_meta *m, size_t *i, int depth, size_t *leaves, char *err,
                   size_t errlen)
{
    if (*i >= m->num_schema)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "schema ends inside a group");
    if (depth > 64)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "schema nests deeper than 64");
    const struct pqt_schema *s = &m->schema[(*i)++];
    if (s->num_children < 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "schema element %s has %d children",
                       s->name, s->num_children);
    if (!is_group(s)) {
        (*leaves)++;
        return 0;
    }
    if (s->num_children == 0)
        return 0;
    if ((size_t)s->num_children > m->num_schema - *i)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "schema element %s has %d children, the schema holds %zu more", s->name,
                       s->num_children, m->num_schema - *i);
    for (int32_t k = 0; k < s->num_children; k++) {
        int rc = subtree(m, i, depth + 1, leaves, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* Describes the top-level column whose schema element is at index i. */
static int describe(struct pq_file *f, struct pq_col *c, size_t i, char *err, size_t errlen)
{
    const struct pqt_file_meta *m = &f->meta;
    const struct pqt_schema *s = &m->schema[i];
    char why[MSG];
    why[0] = 0;
    c->info.name = s->name;
    c->info.supported = false;
    bool opt = s->repetition == PQT_OPTIONAL;
    const struct pqt_schema *leaf = NULL;
    bool elem_opt = false;
    if (!is_group(s)) {
        leaf = s;
        if (s->repetition == PQT_REPEATED) {
            /* A bare repeated field: a list of required values. */
            c->info.list = true;
            c->def_row = 0;
            c->def_elem = 1;
            c->max_def = 1;
            c->max_rep = 1;
        } else {
            c->max_def = opt ? 1 : 0;
        }
    } else if (is_list(s) && s->num_children == 1 && s->repetition != PQT_REPEATED &&
               i + 1 < m->num_schema) {
        const struct pqt_schema *r = &m->schema[i + 1];
        if (r->repetition != PQT_REPEATED) {
            snprintf(why, sizeof(why), "column %s: a LIST whose child is not repeated", s->name);
        } else if (!is_group(r)) {
            leaf = r; /* two levels: the repeated field is the element */
        } else if (r->num_children == 1 && i + 2 < m->num_schema && !is_group(&m->schema[i + 2]) &&
                   strcmp(r->name, "array") != 0 &&
                   !(strncmp(r->name, s->name, strlen(s->name)) == 0 &&
                     strcmp(r->name + strlen(s->name), "_tuple") == 0)) {
            leaf = &m->schema[i + 2];
            if (leaf->repetition == PQT_REPEATED) {
                snprintf(why, sizeof(why), "column %s: a list of lists", s->name);
                leaf = NULL;
            }
            elem_opt = leaf && leaf->repetition == PQT_OPTIONAL;
        } else {
            snprintf(why, sizeof(why), "column %s: a list of non-primitive values", s->name);
        }
        c->info.list = true;
        c->def_row = opt ? 1 : 0;
        c->def_elem = c->def_row + 1;
        c->max_def = c->def_elem + (elem_opt ? 1 : 0);
        c->max_rep = 1;
    } else if (s->converted == PQT_CT_MAP || s->converted == PQT_CT_MAP_KEY_VALUE ||
               s->logical == PQT_LT_MAP) {
        snprintf(why, sizeof(why), "column %s: a map", s->name);
    } else {
        snprintf(why, sizeof(why), "column %s: a nested group", s->name);
    }
    c->info.optional = opt;
    if (leaf && leaf_dtype(leaf, &c->conv, why, sizeof(why))) {
        c->info.dtype = c->conv.dtype;
        c->phys = leaf->type;
        c->info.supported = true;
        return 0;
    }
    c->why = strdup(why[0] ? why : "not supported");
    if (!c->why)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", f->io.name);
    c->info.why_unsupported = c->why;
    return 0;
}

static int read_schema(struct pq_file *f, char *err, size_t errlen)
{
    const struct pqt_file_meta *m = &f->meta;
    const char *name = f->io.name;
    char msg[MSG];
    if (m->num_schema == 0 || !is_group(&m->schema[0]))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: schema has no root group", name);
    size_t top = (size_t)m->schema[0].num_children;
    if (top > m->num_schema - 1)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: schema root has %zu children, the schema holds %zu", name, top,
                       m->num_schema - 1);
    f->cols = calloc(top ? top : 1, sizeof(*f->cols));
    if (!f->cols)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", name);
    f->ncols = top;
    size_t i = 1, leaves = 0;
    for (size_t k = 0; k < top; k++) {
        size_t at = i;
        f->cols[k].leaf = leaves;
        int rc = subtree(m, &i, 1, &leaves, msg, sizeof(msg));
        if (rc)
            return err_set(err, errlen, rc, "%s: %s", name, msg);
        if ((rc = describe(f, &f->cols[k], at, err, errlen)))
            return rc;
    }
    if (i != m->num_schema)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: schema has %zu elements past its root's children", name,
                       m->num_schema - i);
    int64_t rows = 0;
    for (size_t g = 0; g < m->num_row_groups; g++) {
        const struct pqt_row_group *rg = &m->row_groups[g];
        if (rg->num_columns != leaves)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s: row group %zu has %zu column chunks, the schema %zu columns", name,
                           g, rg->num_columns, leaves);
        if (rg->num_rows < 0 || rg->num_rows > INT64_MAX - rows)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s: row group %zu has %" PRId64 " rows", name, g, rg->num_rows);
        rows += rg->num_rows;
    }
    if (m->num_rows != rows)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: footer says %" PRId64 " rows, its row groups hold %" PRId64, name,
                       m->num_rows, rows);
    return 0;
}

int pq_open(const struct pq_io *io, struct pq_file **out, char *err, size_t errlen)
{
    const char *name = io->name;
    char msg[MSG];
    uint8_t head[4], tail[8];
    int rc;
    if (io->size < 12)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: not a Parquet file (%" PRIu64 " bytes)", name, io->size);
    if ((rc = io_read(io, head, 4, 0, msg, sizeof(msg))) ||
        (rc = io_read(io, tail, 8, io->size - 8, msg, sizeof(msg))))
        return err_set(err, errlen, rc, "%s: %s", name, msg);
    if (memcmp(head, "PAR1", 4) != 0 && memcmp(head, "PARE", 4) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: not a Parquet file (no PAR1 magic)",
                       name);
    if (memcmp(tail + 4, "PARE", 4) == 0)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "%s: encrypted Parquet files are not supported", name);
    if (memcmp(tail + 4, "PAR1", 4) != 0 || memcmp(head, "PAR1", 4) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: not a Parquet file (no PAR1 magic at its end)", name);
    uint32_t flen = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 |
                    (uint32_t)tail[3] << 24;
    if (flen > io->size - 12)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: footer length %" PRIu32 " exceeds the file (%" PRIu64 " bytes)", name,
                       flen, io->size);
    struct pq_file *f = calloc(1, sizeof(*f));
    uint8_t *foot = malloc(flen ? flen : 1);
    if (!f || !foot) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", name);
        goto fail;
    }
    f->io = *io;
    f->data_end = io->size - 8 - flen;
    if ((rc = io_read(io, foot, flen, f->data_end, msg, sizeof(msg)))) {
        rc = err_set(err, errlen, rc, "%s: %s", name, msg);
        goto fail;
    }
    if ((rc = pqt_read_file_meta(foot, flen, &f->meta, msg, sizeof(msg)))) {
        rc = err_set(err, errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_INVALID,
                     "%s: footer: %s", name, msg);
        goto fail;
    }
    free(foot);
    foot = NULL;
    if (f->meta.encrypted) {
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                     "%s: encrypted Parquet files are not supported", name);
        goto fail;
    }
    if ((rc = read_schema(f, err, errlen)))
        goto fail;
    *out = f;
    return 0;
fail:
    free(foot);
    pq_close(f);
    return rc;
}

void pq_close(struct pq_file *f)
{
    if (!f)
        return;
    if (f->cols)
        for (size_t i = 0; i < f->ncols; i++)
            free(f->cols[i].why);
    free(f->cols);
    pqt_file_meta_free(&f->meta);
    free(f);
}

uint64_t pq_num_rows(const struct pq_file *f)
{
    return (uint64_t)f->meta.num_rows;
}

size_t pq_num_row_groups(const struct pq_file *f)
{
    return f->meta.num_row_groups;
}

uint64_t pq_row_group_rows(const struct pq_file *f, size_t rg)
{
    return rg < f->meta.num_row_groups ? (uint64_t)f->meta.row_groups[rg].num_rows : 0;
}

size_t pq_num_columns(const struct pq_file *f)
{
    return f->ncols;
}

const struct pq_column_info *pq_column(const struct pq_file *f, size_t col)
{
    return col < f->ncols ? &f->cols[col].info : NULL;
}

long pq_column_find(const struct pq_file *f, const char *name)
{
    for (size_t i = 0; i < f->ncols; i++)
        if (strcmp(f->cols[i].info.name, name) == 0)
            return (long)i;
    return -1;
}

uint64_t pq_chunk_bytes(const struct pq_file *f, size_t rg, size_t col)
{
    if (rg >= f->meta.num_row_groups || col >= f->ncols)
        return 0;
    const struct pqt_chunk *ch = &f->meta.row_groups[rg].columns[f->cols[col].leaf];
    return ch->total_compressed_size > 0 ? (uint64_t)ch->total_compressed_size : 0;
}

/* ---- Cursor -----------------------------------------------------------------------------------
 */

struct pq_cursor {
    struct pq_file *f;
    const struct pq_col *col;
    const struct pqt_chunk *ch;
    size_t rg;
    uint64_t off, end; /* the next page header; the chunk's end */
    /* Bytes of the chunk read ahead of off while reading a page header: ahead bytes at the start
     * of hbuf hold the file's bytes from off on (0: none). */
    size_t ahead;
    uint64_t page_off; /* the current page's header, for messages */
    uint64_t rows, rows_done;
    bool failed, data_seen, have_dict;
    char msg[MSG];

    /* The current page: levels not decoded yet, and the decoders over its bytes. */
    uint64_t page_left;
    struct pq_rle rep_rle, def_rle;
    struct pq_values vals;

    /* The current batch: levels [lpos, lcnt), values [vpos, vcnt); vneed values of the batch's
     * levels are still to be decoded. */
    size_t lpos, lcnt, vpos, vcnt, vneed;
    uint32_t def[PQ_BATCH], rep[PQ_BATCH];
    uint8_t vbuf[PQ_BATCH * 8];
    struct pq_ref vref[PQ_BATCH];

    /* The dictionary: dict_n values, packed or struct pq_ref into dbuf. */
    void *dict;
    size_t dict_n;

    uint8_t *hbuf, *cbuf, *pbuf, *dbuf;
    size_t hcap, ccap, pcap, dcap;
    ZSTD_DCtx *zstd;
};

static int reserve(uint8_t **buf, size_t *cap, size_t need)
{
    return grow_bytes(buf, cap, need, 4096);
}

/* Formats the cursor's failure: file, row group, column, offset, then c->msg. */
static int cur_fail(struct pq_cursor *c, int rc, char *err, size_t errlen)
{
    c->failed = true;
    return err_set(err, errlen, rc, "%s: row group %zu: column %s: offset %" PRIu64 ": %s",
                   c->f->io.name, c->rg, c->col->info.name, c->page_off, c->msg);
}

static int bad(struct pq_cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct pq_cursor *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
    va_end(ap);
    return SLUICE_ERR_INVALID;
}

int pq_cursor_open(struct pq_file *f, size_t rg, size_t col, struct pq_cursor **out, char *err,
                   size_t errlen)
{
    const char *name = f->io.name;
    if (rg >= f->meta.num_row_groups || col >= f->ncols)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: no row group %zu column %zu", name, rg,
                       col);
    const struct pq_col *c = &f->cols[col];
    if (!c->info.supported)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED, "%s: %s", name,
                       c->info.why_unsupported);
    const struct pqt_chunk *ch = &f->meta.row_groups[rg].columns[c->leaf];
    const char *cn = c->info.name;
    if (!ch->has_meta)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: row group %zu: column %s: no column metadata", name, rg, cn);
    if (ch->has_file_path)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "%s: row group %zu: column %s: column chunk in another file", name, rg, cn);
    if (ch->type != c->phys)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: row group %zu: column %s: chunk of type %d, schema says %d", name, rg,
                       cn, ch->type, c->phys);
    switch (ch->codec) {
    case PQT_UNCOMPRESSED:
    case PQT_SNAPPY:
    case PQT_GZIP:
    case PQT_BROTLI:
    case PQT_ZSTD:
    case PQT_LZ4_RAW:
        break;
    default:
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "%s: row group %zu: column %s: compression codec %d not supported", name, rg,
                       cn, ch->codec);
    }
    int64_t start = ch->data_page_offset;
    if (ch->dictionary_page_offset >= 4 && ch->dictionary_page_offset < start)
        start = ch->dictionary_page_offset;
    if (start < 4 || ch->total_compressed_size < 0 || (uint64_t)start > f->data_end ||
        (uint64_t)ch->total_compressed_size > f->data_end - (uint64_t)start)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: row group %zu: column %s: chunk of %" PRId64 " bytes at %" PRId64
                       " outside the file's data (%" PRIu64 " bytes)",
                       name, rg, cn, ch->total_compressed_size, start, f->data_end);
    struct pq_cursor *k = calloc(1, sizeof(*k));
    if (!k)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", name);
    k->f = f;
    k->col = c;
    k->ch = ch;
    k->rg = rg;
    k->off = k->page_off = (uint64_t)start;
    k->end = (uint64_t)start + (uint64_t)ch->total_compressed_size;
    k->rows = (uint64_t)f->meta.row_groups[rg].num_rows;
    *out = k;
    return 0;
}

void pq_cursor_free(struct pq_cursor *c)
{
    if (!c)
        return;
    pq_values_free(&c->vals);
    free(c->dict);
    free(c->hbuf);
    free(c->cbuf);
    free(c->pbuf);
    free(c->dbuf);
    ZSTD_freeDCtx(c->zstd);
    free(c);
}

/* ---- Pages ------------------------------------------------------------------------------------
 */

static int size_mismatch(struct pq_cursor *c, size_t got, bool more, size_t want)
{
    return bad(c, "page decompresses to %s%zu bytes, header says %zu", more ? "more than " : "",
               got, want);
}

/* Grows the output of a streaming decompressor: geometrically, and never past want + 1 bytes,
 * so memory follows what the data really produces, not what a header claims. */
/* The room for a decompressor's next output at used bytes of *buf: what is left of it, up to
 * one byte past the page's size want (so output beyond it shows), growing *buf when none is. */
static int out_room(struct pq_cursor *c, uint8_t **buf, size_t *cap, size_t used, size_t want,
                    size_t *room)
{
    *room = *cap > used ? *cap - used : 0;
    if (*room > want + 1 - used)
        *room = want + 1 - used;
    if (*room > 0)
        return 0;
    size_t target = used < 65536 ? 65536 : used * 2;
    if (target > want + 1)
        target = want + 1;
    if (target <= used)
        return size_mismatch(c, want, true, want);
    if (reserve(buf, cap, target))
        return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
    *room = target - used;
    return 0;
}

static int inflate_page(struct pq_cursor *c, const uint8_t *src, size_t slen, uint8_t **buf,
                        size_t *cap, size_t want)
{
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, 15 + 32) != Z_OK)
        return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
    zs.next_in = (Bytef *)(uintptr_t)src;
    zs.avail_in = (uInt)slen;
    size_t used = 0;
    int rc = 0;
    for (;;) {
        size_t room;
        if ((rc = out_room(c, buf, cap, used, want, &room)))
            break;
        zs.next_out = *buf + used;
        zs.avail_out = (uInt)room;
        int z = inflate(&zs, Z_NO_FLUSH);
        used += room - zs.avail_out;
        if (used > want) {
            rc = size_mismatch(c, want, true, want);
            break;
        }
        if (z == Z_STREAM_END) {
            /* Concatenated gzip members continue. */
            if (zs.avail_in > 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b &&
                inflateReset(&zs) == Z_OK)
                continue;
            break;
        }
        if (z == Z_BUF_ERROR && zs.avail_out != 0) {
            rc = bad(c, "GZIP data ends early");
            break;
        }
        if (z != Z_OK && z != Z_BUF_ERROR) {
            rc = bad(c, "GZIP data damaged (%s)", zs.msg ? zs.msg : "inflate failed");
            break;
        }
    }
    inflateEnd(&zs);
    if (!rc && used != want)
        rc = size_mismatch(c, used, false, want);
    return rc;
}

static int zstd_page(struct pq_cursor *c, const uint8_t *src, size_t slen, uint8_t **buf,
                     size_t *cap, size_t want)
{
    if (!c->zstd && !(c->zstd = ZSTD_createDCtx()))
        return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
    ZSTD_DCtx_reset(c->zstd, ZSTD_reset_session_only);
    ZSTD_inBuffer in = {src, slen, 0};
    size_t used = 0, ret = 1;
    while (in.pos < in.size || ret != 0) {
        size_t room;
        int rc = out_room(c, buf, cap, used, want, &room);
        if (rc)
            return rc;
        ZSTD_outBuffer o = {*buf + used, room, 0};
        size_t before = in.pos;
        ret = ZSTD_decompressStream(c->zstd, &o, &in);
        if (ZSTD_isError(ret))
            return bad(c, "ZSTD data damaged (%s)", ZSTD_getErrorName(ret));
        used += o.pos;
        if (used > want)
            return size_mismatch(c, want, true, want);
        if (ret != 0 && in.pos == in.size && o.pos < room && in.pos == before)
            return bad(c, "ZSTD data ends early");
    }
    if (used != want)
        return size_mismatch(c, used, false, want);
    return 0;
}

static int brotli_page(struct pq_cursor *c, const uint8_t *src, size_t slen, uint8_t **buf,
                       size_t *cap, size_t want)
{
    BrotliDecoderState *s = BrotliDecoderCreateInstance(NULL, NULL, NULL);
    if (!s)
        return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
    size_t in_left = slen, used = 0;
    const uint8_t *in = src;
    int rc = 0;
    for (;;) {
        size_t room;
        if ((rc = out_room(c, buf, cap, used, want, &room)))
            break;
        uint8_t *o = *buf + used;
        size_t o_left = room;
        BrotliDecoderResult r = BrotliDecoderDecompressStream(s, &in_left, &in, &o_left, &o, NULL);
        used += room - o_left;
        if (used > want) {
            rc = size_mismatch(c, want, true, want);
            break;
        }
        if (r == BROTLI_DECODER_RESULT_SUCCESS)
            break;
        if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT) {
            rc = bad(c, "BROTLI data ends early");
            break;
        }
        if (r == BROTLI_DECODER_RESULT_ERROR) {
            rc = bad(c, "BROTLI data damaged (%s)",
                     BrotliDecoderErrorString(BrotliDecoderGetErrorCode(s)));
            break;
        }
    }
    BrotliDecoderDestroyInstance(s);
    if (!rc && used != want)
        rc = size_mismatch(c, used, false, want);
    return rc;
}

/* Decompresses slen bytes at src into *buf (grown as needed): exactly want bytes, or an error. */
static int decompress(struct pq_cursor *c, const uint8_t *src, size_t slen, uint8_t **buf,
                      size_t *cap, size_t want)
{
    switch (c->ch->codec) {
    case PQT_SNAPPY: {
        size_t n;
        if (snappy_uncompressed_length((const char *)src, slen, &n) != SNAPPY_OK)
            return bad(c, "SNAPPY data damaged");
        if (n != want)
            return size_mismatch(c, n, false, want);
        if (reserve(buf, cap, want ? want : 1))
            return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
        if (snappy_uncompress((const char *)src, slen, (char *)*buf, &n) != SNAPPY_OK || n != want)
            return bad(c, "SNAPPY data damaged");
        return 0;
    }
    case PQT_GZIP:
        return inflate_page(c, src, slen, buf, cap, want);
    case PQT_ZSTD:
        return zstd_page(c, src, slen, buf, cap, want);
    case PQT_BROTLI:
        return brotli_page(c, src, slen, buf, cap, want);
    case PQT_LZ4_RAW: {
        /* LZ4 expands at most 255 times. */
        if (want > (uint64_t)slen * 255 + 16)
            return bad(c, "page of %zu LZ4_RAW bytes cannot decompress to %zu", slen, want);
        if (reserve(buf, cap, want ? want : 1))
            return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
        if (slen > INT32_MAX || want > INT32_MAX)
            return bad(c, "LZ4_RAW page too large");
        int n = LZ4_decompress_safe((const char *)src, (char *)*buf, (int)slen, (int)want);
        if (n < 0)
            return bad(c, "LZ4_RAW data damaged or decompresses to more than %zu bytes", want);
        if ((size_t)n != want)
            return size_mismatch(c, (size_t)n, false, want);
        return 0;
    }
    default:
        return bad(c, "compression codec %d not supported", c->ch->codec), SLUICE_ERR_UNSUPPORTED;
    }
}

/* After a page of used bytes (header and body) at the start of the n bytes in hbuf: keeps the
 * bytes beyond it as the read-ahead of the next page's header. */
static void keep_ahead(struct pq_cursor *c, size_t n, uint64_t used)
{
    if (used < n) {
        memmove(c->hbuf, c->hbuf + used, n - (size_t)used);
        c->ahead = n - (size_t)used;
    } else {
        c->ahead = 0;
    }
}

/* Reads the page header at c->off (in growing pieces) and the page's bytes after it into cbuf. */
static int read_page(struct pq_cursor *c, struct pqt_page_header *h, bool *skip_ok,
                     uint64_t skippable, uint64_t *skipped)
{
    const struct pq_io *io = &c->f->io;
    uint64_t avail = c->end - c->off;
    size_t want = HEADER_FIRST, n, hlen;
    int rc;
    c->page_off = c->off;
    for (;;) {
        n = want < avail ? want : (size_t)avail;
        if (n < c->ahead)
            n = c->ahead;
        if (reserve(&c->hbuf, &c->hcap, n))
            return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
        /* What the last page's header read brought beyond that page is not asked for again. */
        if (n > c->ahead && (rc = io_read(io, c->hbuf + c->ahead, n - c->ahead, c->off + c->ahead,
                                          c->msg, sizeof(c->msg))))
            return rc;
        c->ahead = n;
        char m[MSG];
        rc = pqt_read_page_header(c->hbuf, n, h, &hlen, m, sizeof(m));
        if (rc == SLUICE_ERR_TRUNCATED && n < avail && want < HEADER_MAX) {
            want *= 4;
            continue;
        }
        if (rc)
            return bad(c, "page header: %s", m);
        break;
    }
    if (h->compressed_size < 0 || h->uncompressed_size < 0)
        return bad(c, "page sizes %d and %d", h->compressed_size, h->uncompressed_size);
    size_t comp = (size_t)h->compressed_size;
    if (comp > avail - hlen)
        return bad(c, "page of %zu bytes runs past the column chunk (%" PRIu64 " bytes left)", comp,
                   avail - hlen);
    /* A whole data page of rows being skipped need not be read at all. */
    *skip_ok = false;
    if (skippable) {
        uint64_t prow = UINT64_MAX;
        if (h->type == PQT_DATA_PAGE_V2 && h->has_data_v2 && h->num_rows >= 0)
            prow = (uint64_t)h->num_rows;
        else if (h->type == PQT_DATA_PAGE && h->has_data && c->col->max_rep == 0 &&
                 h->num_values >= 0)
            prow = (uint64_t)h->num_values;
        if (prow <= skippable) {
            *skip_ok = true;
            *skipped = prow;
            keep_ahead(c, n, hlen + comp);
            c->off += hlen + comp;
            return 0;
        }
    }
    if (reserve(&c->cbuf, &c->ccap, comp ? comp : 1))
        return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
    size_t have = n - hlen < comp ? n - hlen : comp;
    memcpy(c->cbuf, c->hbuf + hlen, have);
    if (have < comp && (rc = io_read(io, c->cbuf + have, comp - have, c->off + hlen + have, c->msg,
                                     sizeof(c->msg))))
        return rc;
    keep_ahead(c, n, hlen + comp);
    c->off += hlen + comp;
    if (h->has_crc) {
        uint32_t crc = (uint32_t)crc32(0, c->cbuf, (uInt)0);
        size_t done = 0;
        while (done < comp) {
            size_t k = comp - done > (1u << 30) ? (1u << 30) : comp - done;
            crc = (uint32_t)crc32(crc, c->cbuf + done, (uInt)k);
            done += k;
        }
        if (crc != h->crc)
            return bad(c, "page CRC %08" PRIx32 ", header says %08" PRIx32, crc, h->crc);
    }
    return 0;
}

static int load_dict(struct pq_cursor *c, const struct pqt_page_header *h)
{
    if (!h->has_dict)
        return bad(c, "dictionary page without its header");
    if (c->data_seen)
        return bad(c, "dictionary page after data pages");
    if (c->have_dict)
        return bad(c, "second dictionary page");
    if (h->encoding != PQT_PLAIN && h->encoding != PQT_PLAIN_DICTIONARY)
        return bad(c, "dictionary page of encoding %d", h->encoding);
    size_t comp = (size_t)h->compressed_size, ulen = (size_t)h->uncompressed_size;
    const uint8_t *p;
    int rc;
    if (c->ch->codec == PQT_UNCOMPRESSED) {
        if (comp != ulen)
            return size_mismatch(c, comp, false, ulen);
        /* The dictionary keeps the page's bytes: they swap buffers. */
        uint8_t *t = c->dbuf;
        size_t tc = c->dcap;
        c->dbuf = c->cbuf;
        c->dcap = c->ccap;
        c->cbuf = t;
        c->ccap = tc;
    } else if ((rc = decompress(c, c->cbuf, comp, &c->dbuf, &c->dcap, ulen))) {
        return rc;
    }
    p = c->dbuf;
    const struct pq_conv *conv = &c->col->conv;
    if (h->num_values < 0 || (uint64_t)h->num_values > pq_plain_max(conv, ulen))
        return bad(c, "dictionary of %d values in %zu bytes", h->num_values, ulen);
    size_t n = (size_t)h->num_values;
    size_t vsize = sluice_dtype_size(conv->dtype);
    size_t each = vsize ? vsize : sizeof(struct pq_ref);
    free(c->dict);
    c->dict = malloc(n ? n * each : 1);
    if (!c->dict)
        return bad(c, "out of memory"), SLUICE_ERR_NOMEM;
    if ((rc = pq_values_init(&c->vals, PQT_PLAIN, conv, p, ulen, NULL, 0, c->msg, sizeof(c->msg))))
        return rc;
    for (size_t i = 0; i < n;) {
        size_t k = n - i < PQ_BATCH ? n - i : PQ_BATCH, got;
        uint8_t *out = vsize ? (uint8_t *)c->dict + i * vsize : NULL;
        struct pq_ref *refs = vsize ? NULL : (struct pq_ref *)c->dict + i;
        if ((rc = pq_values_get(&c->vals, k, out, refs, &got, c->msg, sizeof(c->msg)))) {
            char m[MSG];
            snprintf(m, sizeof(m), "%s", c->msg);
            return bad(c, "dictionary page: %s", m);
        }
        i += got;
    }
    c->dict_n = n;
    c->have_dict = true;
    return 0;
}

static int levels_init(struct pq_cursor *c, struct pq_rle *r, const uint8_t **p, const uint8_t *end,
                       int enc, int max, const char *what)
{
    if (enc != PQT_RLE)
        return bad(c, "%s levels of encoding %d not supported", what, enc), SLUICE_ERR_UNSUPPORTED;
    if (end - *p < 4)
        return bad(c, "%s levels: length missing", what);
    uint32_t n;
    memcpy(&n, *p, 4);
    if (n > (size_t)(end - *p) - 4)
        return bad(c, "%s levels of %" PRIu32 " bytes run past the page", what, n);
    int rc = pq_rle_init(r, *p + 4, n, level_width(max), c->msg, sizeof(c->msg));
    *p += 4 + (size_t)n;
    return rc;
}

/* Loads the next data page (reading a dictionary page first if one comes). With skippable > 0,
 * a data page whose rows are all to be skipped is passed over unread: *skipped receives its
 * rows and nothing is loaded. Returns 0, or an error; PQ_END-like exhaustion of the chunk is
 * *none = true. */
static int next_page(struct pq_cursor *c, uint64_t skippable, uint64_t *skipped, bool *none)
{
    struct pqt_page_header h;
    int rc;
    *none = false;
    *skipped = 0;
    for (;;) {
        if (c->off >= c->end) {
            *none = true;
            return 0;
        }
        bool skip_ok;
        if ((rc = read_page(c, &h, &skip_ok, skippable, skipped)))
            return rc;
        if (skip_ok) {
            c->data_seen = true;
            return 0;
        }
        if (h.type == PQT_DICTIONARY_PAGE) {
            if ((rc = load_dict(c, &h)))
                return rc;
            continue;
        }
        if (h.type != PQT_DATA_PAGE && h.type != PQT_DATA_PAGE_V2)
            continue; /* index pages and others carry nothing a reader needs */
        c->data_seen = true;
        size_t comp = (size_t)h.compressed_size, ulen = (size_t)h.uncompressed_size;
        const struct pq_col *col = c->col;
        const uint8_t *p, *end, *vp;
        size_t vlen;
        if (h.type == PQT_DATA_PAGE) {
            if (!h.has_data)
                return bad(c, "data page without its header");
            if (c->ch->codec == PQT_UNCOMPRESSED) {
                if (comp != ulen)
                    return size_mismatch(c, comp, false, ulen);
                p = c->cbuf;
            } else {
                if ((rc = decompress(c, c->cbuf, comp, &c->pbuf, &c->pcap, ulen)))
                    return rc;
                p = c->pbuf;
            }
            end = p + ulen;
            if (col->max_rep && (rc = levels_init(c, &c->rep_rle, &p, end, h.rep_encoding,
                                                  col->max_rep, "repetition")))
                return rc;
            if (col->max_def && (rc = levels_init(c, &c->def_rle, &p, end, h.def_encoding,
                                                  col->max_def, "definition")))
                return rc;
            vp = p;
            vlen = (size_t)(end - p);
        } else {
            if (!h.has_data_v2)
                return bad(c, "data page without its header");
            if (h.rep_bytes < 0 || h.def_bytes < 0 ||
                (uint64_t)h.rep_bytes + (uint64_t)h.def_bytes > comp ||
                (uint64_t)h.rep_bytes + (uint64_t)h.def_bytes > ulen)
                return bad(c, "levels of %d and %d bytes in a page of %zu", h.rep_bytes,
                           h.def_bytes, comp);
            size_t lb = (size_t)h.rep_bytes + (size_t)h.def_bytes;
            p = c->cbuf;
            if (col->max_rep &&
                (rc = pq_rle_init(&c->rep_rle, p, (size_t)h.rep_bytes, level_width(col->max_rep),
                                  c->msg, sizeof(c->msg))))
                return rc;
            if (col->max_def &&
                (rc = pq_rle_init(&c->def_rle, p + h.rep_bytes, (size_t)h.def_bytes,
                                  level_width(col->max_def), c->msg, sizeof(c->msg))))
                return rc;
            vlen = ulen - lb;
            if (h.is_compressed && c->ch->codec != PQT_UNCOMPRESSED) {
                if ((rc = decompress(c, c->cbuf + lb, comp - lb, &c->pbuf, &c->pcap, vlen)))
                    return rc;
                vp = c->pbuf;
            } else {
                if (comp != ulen)
                    return size_mismatch(c, comp, false, ulen);
                vp = c->cbuf + lb;
            }
        }
        if (h.num_values < 0)
            return bad(c, "page of %d values", h.num_values);
        if ((rc = pq_values_init(&c->vals, h.encoding, &col->conv, vp, vlen,
                                 c->have_dict ? c->dict : NULL, c->dict_n, c->msg, sizeof(c->msg))))
            return rc;
        c->page_left = (uint64_t)h.num_values;
        c->lpos = c->lcnt = c->vpos = c->vcnt = c->vneed = 0;
        return 0;
    }
}

/* Makes a level available at lpos, decoding the next batch, or the next page's first. *none:
 * the chunk has no level left. */
static int levels_ready(struct pq_cursor *c, bool *none)
{
    int rc;
    *none = false;
    while (c->lpos == c->lcnt) {
        if (c->page_left == 0) {
            uint64_t skipped;
            if ((rc = next_page(c, 0, &skipped, none)) || *none)
                return rc;
            continue;
        }
        size_t k = c->page_left < PQ_BATCH ? (size_t)c->page_left : PQ_BATCH;
        const struct pq_col *col = c->col;
        if (col->max_rep) {
            if ((rc = pq_rle_get(&c->rep_rle, c->rep, k, c->msg, sizeof(c->msg))))
                return rc;
            for (size_t i = 0; i < k; i++)
                if (c->rep[i] > (uint32_t)col->max_rep)
                    return bad(c, "repetition level %" PRIu32 " does not fit the schema (max %d)",
                               c->rep[i], col->max_rep);
        }
        size_t nn = k;
        if (col->max_def) {
            if ((rc = pq_rle_get(&c->def_rle, c->def, k, c->msg, sizeof(c->msg))))
                return rc;
            uint32_t md = (uint32_t)col->max_def;
            nn = 0;
            for (size_t i = 0; i < k; i++) {
                if (c->def[i] > md)
                    return bad(c, "definition level %" PRIu32 " does not fit the schema (max %d)",
                               c->def[i], col->max_def);
                nn += c->def[i] == md;
            }
        }
        c->page_left -= k;
        c->lpos = 0;
        c->lcnt = k;
        c->vneed += nn;
    }
    return 0;
}

/* Makes a value available at vpos. */
static int value_ready(struct pq_cursor *c)
{
    if (c->vpos < c->vcnt)
        return 0;
    size_t k = c->vneed < PQ_BATCH ? c->vneed : PQ_BATCH, got;
    if (k == 0)
        return bad(c, "value missing");
    int rc = pq_values_get(&c->vals, k, c->vbuf, c->vref, &got, c->msg, sizeof(c->msg));
    if (rc)
        return rc;
    c->vneed -= got;
    c->vpos = 0;
    c->vcnt = got;
    return 0;
}

static int nomem(struct pq_cursor *c)
{
    bad(c, "out of memory");
    return SLUICE_ERR_NOMEM;
}

/* Appends the value at vpos to the list being built in t (n values so far). */
static int list_append(struct pq_cursor *c, struct pipe_tensor *t, size_t n)
{
    size_t vsize = sluice_dtype_size(c->col->conv.dtype);
    if (vsize) {
        if (t->len + vsize > t->cap && pipe_tensor_reserve(t, t->len + vsize, 0))
            return nomem(c);
        memcpy(t->data + t->len, c->vbuf + c->vpos * vsize, vsize);
        t->len += vsize;
    } else {
        const struct pq_ref *r = &c->vref[c->vpos];
        if ((t->len + r->len > t->cap || n + 2 > t->offs_cap) &&
            pipe_tensor_reserve(t, t->len + r->len, n + 1))
            return nomem(c);
        if (r->len)
            memcpy(t->data + t->len, r->p, r->len);
        t->len += r->len;
        t->offs[n + 1] = t->len;
    }
    c->vpos++;
    return 0;
}

/* The next row of a list column into t, or past it when t is NULL. */
static int next_list(struct pq_cursor *c, struct pipe_tensor *t)
{
    const struct pq_col *col = c->col;
    bool none;
    int rc = levels_ready(c, &none);
    if (rc)
        return rc;
    if (none)
        return bad(c, "column chunk ends after %" PRIu64 " of %" PRIu64 " rows", c->rows_done,
                   c->rows);
    if (c->rep[c->lpos] != 0)
        return bad(c,
                   "repetition level %" PRIu32 " at the start of row %" PRIu64
                   " does not fit the schema",
                   c->rep[c->lpos], c->rows_done);
    uint32_t d = c->def[c->lpos];
    if (d < (uint32_t)col->def_row) {
        c->lpos++;
        c->rows_done++;
        return PQ_NULL;
    }
    size_t n = 0;
    if (t) {
        t->dtype = col->conv.dtype;
        t->rank = 1;
        t->len = 0;
        if (t->dtype == SLUICE_BYTES) {
            if (t->offs_cap < 1 && pipe_tensor_reserve(t, 0, 0))
                return nomem(c);
            t->offs[0] = 0;
        }
    }
    bool first = true;
    for (;;) {
        d = c->def[c->lpos++];
        if (d >= (uint32_t)col->def_elem) {
            if (d < (uint32_t)col->max_def)
                return bad(c, "row %" PRIu64 ": a null element in a list", c->rows_done);
            if ((rc = value_ready(c)))
                return rc;
            if (t) {
                if ((rc = list_append(c, t, n)))
                    return rc;
            } else {
                c->vpos++;
            }
            n++;
        } else if (!first) {
            return bad(c, "row %" PRIu64 ": definition level %" PRIu32 " inside a list",
                       c->rows_done, d);
        }
        first = false;
        if ((rc = levels_ready(c, &none)))
            return rc;
        if (none || c->rep[c->lpos] == 0)
            break;
        if (d < (uint32_t)col->def_elem)
            return bad(c, "row %" PRIu64 ": an empty list continues", c->rows_done);
    }
    if (t)
        t->shape[0] = (int64_t)n;
    c->rows_done++;
    return PQ_VALUE;
}

int pq_cursor_next(struct pq_cursor *c, struct pipe_tensor *t, char *err, size_t errlen)
{
    if (c->failed)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: cursor failed before", c->f->io.name);
    if (c->rows_done >= c->rows)
        return PQ_END;
    const struct pq_col *col = c->col;
    int rc;
    if (col->info.list) {
        rc = next_list(c, t);
        return rc < 0 ? cur_fail(c, rc, err, errlen) : rc;
    }
    if (c->lpos == c->lcnt) {
        bool none;
        if ((rc = levels_ready(c, &none)))
            return cur_fail(c, rc, err, errlen);
        if (none) {
            bad(c, "column chunk ends after %" PRIu64 " of %" PRIu64 " rows", c->rows_done,
                c->rows);
            return cur_fail(c, SLUICE_ERR_INVALID, err, errlen);
        }
    }
    c->rows_done++;
    if (col->max_def && c->def[c->lpos++] < (uint32_t)col->max_def)
        return PQ_NULL;
    if (!col->max_def)
        c->lpos++;
    if (c->vpos == c->vcnt && (rc = value_ready(c)))
        return cur_fail(c, rc, err, errlen);
    size_t vsize = sluice_dtype_size(col->conv.dtype);
    if (vsize)
        rc = pipe_tensor_set_scalar(t, col->conv.dtype, c->vbuf + c->vpos * vsize);
    else
        rc = pipe_tensor_set_bytes(t, c->vref[c->vpos].p, c->vref[c->vpos].len);
    c->vpos++;
    if (rc)
        return cur_fail(c, nomem(c), err, errlen);
    return PQ_VALUE;
}

/* Passes over k values of the current batch, decoding what must be decoded. */
static int skip_values(struct pq_cursor *c, size_t k)
{
    while (k) {
        if (c->vpos == c->vcnt) {
            int rc = value_ready(c);
            if (rc)
                return rc;
        }
        size_t take = c->vcnt - c->vpos < k ? c->vcnt - c->vpos : k;
        c->vpos += take;
        k -= take;
    }
    return 0;
}

int pq_cursor_skip(struct pq_cursor *c, uint64_t n, char *err, size_t errlen)
{
    if (c->failed)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: cursor failed before", c->f->io.name);
    if (n > c->rows - c->rows_done)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: row group %zu: column %s: skip of %" PRIu64
                       " rows past the end (%" PRIu64 " left)",
                       c->f->io.name, c->rg, c->col->info.name, n, c->rows - c->rows_done);
    const struct pq_col *col = c->col;
    int rc;
    while (n) {
        if (col->info.list) {
            if (c->lpos == c->lcnt && c->page_left == 0) {
                uint64_t skipped;
                bool none;
                if ((rc = next_page(c, n, &skipped, &none)))
                    return cur_fail(c, rc, err, errlen);
                if (skipped) {
                    n -= skipped;
                    c->rows_done += skipped;
                    continue;
                }
                if (none) {
                    bad(c, "column chunk ends after %" PRIu64 " of %" PRIu64 " rows", c->rows_done,
                        c->rows);
                    return cur_fail(c, SLUICE_ERR_INVALID, err, errlen);
                }
            }
            if ((rc = next_list(c, NULL)) < 0)
                return cur_fail(c, rc, err, errlen);
            n--;
            continue;
        }
        if (c->lpos == c->lcnt && c->page_left == 0) {
            uint64_t skipped;
            bool none;
            if ((rc = next_page(c, n, &skipped, &none)))
                return cur_fail(c, rc, err, errlen);
            if (none) {
                bad(c, "column chunk ends after %" PRIu64 " of %" PRIu64 " rows", c->rows_done,
                    c->rows);
                return cur_fail(c, SLUICE_ERR_INVALID, err, errlen);
            }
            n -= skipped;
            c->rows_done += skipped;
            continue;
        }
        bool none;
        if ((rc = levels_ready(c, &none)))
            return cur_fail(c, rc, err, errlen);
        size_t k = c->lcnt - c->lpos;
        if (k > n)
            k = (size_t)n;
        size_t nn = k;
        if (col->max_def) {
            nn = 0;
            for (size_t i = 0; i < k; i++)
                nn += c->def[c->lpos + i] == (uint32_t)col->max_def;
        }
        if ((rc = skip_values(c, nn)))
            return cur_fail(c, rc, err, errlen);
        c->lpos += k;
        c->rows_done += k;
        n -= k;
    }
    return 0;
}
