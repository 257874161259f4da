/* megatron(): the documents of a Megatron-LM indexed dataset (megatron.h).
 *
 * Happy path: map PREFIX.idx and PREFIX.bin (through the data roots; objects of a URL prefix are
 * opened for reads at random instead, and every number is read through them), check the index's
 * header against both sizes, then per document check its indices and sequences and widen its tokens
 * into an int32 tensor. The first failure is recorded once in the context's message and
 * returned by every later next(). */
#include "megatron.h"

#include "objstore.h"
#include "paths.h"
#include "registry.h"
#include "roots.h"
#include "spec.h"

#include "common/error.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

/* ---- The index ---------------------------------------------------------------------------- */

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

const char *pipe_megatron_dtype_name(unsigned code)
{
    static const char *const names[] = {NULL,    "uint8",   "int8",    "int16", "int32",
                                        "int64", "float64", "float32", "uint16"};
    return code < sizeof names / sizeof names[0] ? names[code] : NULL;
}

static unsigned dtype_width(unsigned code)
{
    static const unsigned widths[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
    return code < sizeof widths / sizeof widths[0] ? widths[code] : 0;
}

/* Where the arrays of the index begin. */
static uint64_t lengths_at(uint64_t s)
{
    return PIPE_MEGATRON_HEADER_BYTES + 4 * s;
}

static uint64_t pointers_at(const struct pipe_megatron_index *ix, uint64_t s)
{
    return PIPE_MEGATRON_HEADER_BYTES + 4 * ix->nseqs + 8 * s;
}

static uint64_t docs_at(const struct pipe_megatron_index *ix, uint64_t d)
{
    return PIPE_MEGATRON_HEADER_BYTES + 12 * ix->nseqs + 8 * d;
}

/* len bytes of the index at off (inside it) into dst: from memory, or through read_idx. */
static int idx_get(const struct pipe_megatron_index *ix, uint64_t off, void *dst, size_t len,
                   char *err, size_t errlen)
{
    if (ix->idx) {
        memcpy(dst, ix->idx + off, len);
        return 0;
    }
    return ix->read_idx(ix->read_arg, dst, len, off, err, errlen);
}

static int idx_u64(const struct pipe_megatron_index *ix, uint64_t off, uint64_t *v, char *err,
                   size_t errlen)
{
    uint8_t b[8];
    int rc = idx_get(ix, off, b, sizeof b, err, errlen);
    *v = rc < 0 ? 0 : le64(b);
    return rc;
}

static int idx_i32(const struct pipe_megatron_index *ix, uint64_t off, int32_t *v, char *err,
                   size_t errlen)
{
    uint8_t b[4];
    int rc = idx_get(ix, off, b, sizeof b, err, errlen);
    *v = rc < 0 ? 0 : (int32_t)le32(b);
    return rc;
}

static int check_header(struct pipe_megatron_index *ix, char *err, size_t errlen);

int pipe_megatron_index_init(struct pipe_megatron_index *ix, const uint8_t *idx, uint64_t idx_len,
                             const uint8_t *bin, uint64_t bin_len, const char *idx_name,
                             const char *bin_name, char *err, size_t errlen)
{
    memset(ix, 0, sizeof *ix);
    ix->idx = idx;
    ix->idx_len = idx_len;
    ix->bin = bin;
    ix->bin_len = bin_len;
    ix->idx_name = idx_name;
    ix->bin_name = bin_name;
    return check_header(ix, err, errlen);
}

int pipe_megatron_index_init_read(struct pipe_megatron_index *ix, pipe_megatron_read_fn read_idx,
                                  pipe_megatron_read_fn read_bin, void *arg, uint64_t idx_len,
                                  uint64_t bin_len, const char *idx_name, const char *bin_name,
                                  char *err, size_t errlen)
{
    memset(ix, 0, sizeof *ix);
    ix->read_idx = read_idx;
    ix->read_bin = read_bin;
    ix->read_arg = arg;
    ix->idx_len = idx_len;
    ix->bin_len = bin_len;
    ix->idx_name = idx_name;
    ix->bin_name = bin_name;
    return check_header(ix, err, errlen);
}

static int check_header(struct pipe_megatron_index *ix, char *err, size_t errlen)
{
    const char *n = ix->idx_name, *bin_name = ix->bin_name;
    uint64_t idx_len = ix->idx_len, bin_len = ix->bin_len;
    uint8_t idx[PIPE_MEGATRON_HEADER_BYTES];
    size_t have = idx_len < sizeof idx ? (size_t)idx_len : sizeof idx;
    int rc = have ? idx_get(ix, 0, idx, have, err, errlen) : 0;
    if (rc < 0)
        return rc;
    if (have > sizeof magic)
        have = sizeof magic;
    if (have == 0 || memcmp(idx, magic, have) != 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset 0: not a Megatron index (bad magic)", n);
    if (idx_len < PIPE_MEGATRON_HEADER_BYTES)
        return err_set(err, errlen, SLUICE_ERR_TRUNCATED,
                       "%s: offset %" PRIu64 ": truncated header (the header has %d bytes)", n,
                       idx_len, PIPE_MEGATRON_HEADER_BYTES);
    uint64_t version = le64(idx + 9);
    if (version != 1)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "%s: offset 9: version %" PRIu64 ", expected 1", n, version);
    ix->code = idx[17];
    const char *dtype = pipe_megatron_dtype_name(ix->code);
    if (!dtype)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "%s: offset 17: unknown dtype code %u", n,
                       ix->code);
    if (ix->code == 6 || ix->code == 7)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "%s: offset 17: dtype %s (code %u) holds no token ids", n, dtype, ix->code);
    ix->width = dtype_width(ix->code);
    uint64_t S = le64(idx + 18), D = le64(idx + 26);
    /* Bounded first, so that the size below cannot overflow. */
    uint64_t body = idx_len - PIPE_MEGATRON_HEADER_BYTES;
    if (S > body / 12 || D > body / 8)
        return err_set(err, errlen, SLUICE_ERR_TRUNCATED,
                       "%s: offset %" PRIu64 ": truncated: %" PRIu64 " sequences and %" PRIu64
                       " document indices need more than its %" PRIu64 " bytes",
                       n, idx_len, S, D, idx_len);
    if (12 * S + 8 * D > body)
        return err_set(err, errlen, SLUICE_ERR_TRUNCATED,
                       "%s: offset %" PRIu64 ": truncated: %" PRIu64 " sequences and %" PRIu64
                       " document indices need %" PRIu64 " bytes",
                       n, idx_len, S, D, PIPE_MEGATRON_HEADER_BYTES + 12 * S + 8 * D);
    ix->nseqs = S;
    uint64_t end = docs_at(ix, D);
    if (idx_len > end) {
        uint64_t extra = idx_len - end;
        bool modes = S > 0 && extra == S;
        return err_set(err, errlen, modes ? SLUICE_ERR_UNSUPPORTED : SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": %" PRIu64 " byte%s after the document indices%s", n,
                       end, extra, extra == 1 ? "" : "s",
                       modes ? " (a multimodal index's sequence modes: not supported)" : "");
    }
    if (D == 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset 26: no document index (an index has at least the leading 0)", n);
    uint64_t u;
    if ((rc = idx_u64(ix, docs_at(ix, 0), &u, err, errlen)) < 0)
        return rc;
    int64_t first = (int64_t)u;
    if (first != 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": the first document index is %" PRId64
                       ", expected 0",
                       n, docs_at(ix, 0), first);
    if ((rc = idx_u64(ix, docs_at(ix, D - 1), &u, err, errlen)) < 0)
        return rc;
    int64_t last = (int64_t)u;
    if (last < 0 || (uint64_t)last != S)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": the last document index is %" PRId64
                       ", expected %" PRIu64 " (the number of sequences)",
                       n, docs_at(ix, D - 1), last, S);
    ix->ndocs = D - 1;
    if (S == 0) {
        if (bin_len != 0)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "%s: offset 18: no sequences, but %s has %" PRIu64 " bytes", n, bin_name,
                           bin_len);
        return 0;
    }
    /* The ends: the first sequence starts the bin and the last one ends it. The ones between
     * are checked as their documents are read. */
    if ((rc = idx_u64(ix, pointers_at(ix, 0), &u, err, errlen)) < 0)
        return rc;
    int64_t p0 = (int64_t)u;
    if (p0 != 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": sequence 0 starts at byte %" PRId64
                       " of %s, expected 0",
                       n, pointers_at(ix, 0), p0, bin_name);
    int32_t len;
    if ((rc = idx_i32(ix, lengths_at(S - 1), &len, err, errlen)) < 0 ||
        (rc = idx_u64(ix, pointers_at(ix, S - 1), &u, err, errlen)) < 0)
        return rc;
    int64_t p = (int64_t)u;
    if (len < 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": sequence %" PRIu64 " has length %" PRId32, n,
                       lengths_at(S - 1), S - 1, len);
    uint64_t bytes = (uint64_t)len * ix->width;
    if (p < 0 || (uint64_t)p > bin_len || bytes != bin_len - (uint64_t)p)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": the last sequence (%" PRId32
                       " tokens of %u bytes from byte %" PRId64
                       ") does not end where %s does (%" PRIu64 " bytes)",
                       n, pointers_at(ix, S - 1), len, ix->width, p, bin_name, bin_len);
    return 0;
}

/* Checks sequence s alone: a length not negative, a span inside the bin, which goes to
 * [*beg, *end). */
static int sequence_span(const struct pipe_megatron_index *ix, uint64_t s, uint64_t *beg,
                         uint64_t *end, char *err, size_t errlen)
{
    int32_t len;
    uint64_t u;
    int rc;
    if ((rc = idx_i32(ix, lengths_at(s), &len, err, errlen)) < 0 ||
        (rc = idx_u64(ix, pointers_at(ix, s), &u, err, errlen)) < 0)
        return rc;
    int64_t p = (int64_t)u;
    if (len < 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": sequence %" PRIu64 " has length %" PRId32,
                       ix->idx_name, lengths_at(s), s, len);
    if (p < 0 || (uint64_t)p > ix->bin_len)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": sequence %" PRIu64 " starts at byte %" PRId64
                       ", outside %s (%" PRIu64 " bytes)",
                       ix->idx_name, pointers_at(ix, s), s, p, ix->bin_name, ix->bin_len);
    uint64_t bytes = (uint64_t)len * ix->width;
    if (bytes > ix->bin_len - (uint64_t)p)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": sequence %" PRIu64 " (%" PRId32
                       " tokens of %u bytes from byte %" PRId64
                       ") ends past the end of %s (%" PRIu64 " bytes)",
                       ix->idx_name, pointers_at(ix, s), s, len, ix->width, p, ix->bin_name,
                       ix->bin_len);
    *beg = (uint64_t)p;
    *end = (uint64_t)p + bytes;
    return 0;
}

int pipe_megatron_document(const struct pipe_megatron_index *ix, uint64_t d, uint64_t *offset,
                           uint64_t *ntokens, char *err, size_t errlen)
{
    assert(d < ix->ndocs);
    const char *n = ix->idx_name;
    uint64_t ua, ub;
    int rc;
    if ((rc = idx_u64(ix, docs_at(ix, d), &ua, err, errlen)) < 0 ||
        (rc = idx_u64(ix, docs_at(ix, d + 1), &ub, err, errlen)) < 0)
        return rc;
    int64_t a = (int64_t)ua, b = (int64_t)ub;
    if (a < 0 || (uint64_t)a > ix->nseqs)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": document %" PRIu64 " starts at sequence %" PRId64
                       ", outside the %" PRIu64 " sequences",
                       n, docs_at(ix, d), d, a, ix->nseqs);
    if (b < a)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": document %" PRIu64 " ends at sequence %" PRId64
                       ", before it starts (%" PRId64 ")",
                       n, docs_at(ix, d + 1), d, b, a);
    if ((uint64_t)b > ix->nseqs)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "%s: offset %" PRIu64 ": document %" PRIu64 " ends at sequence %" PRId64
                       ", outside the %" PRIu64 " sequences",
                       n, docs_at(ix, d + 1), d, b, ix->nseqs);
    /* The document's sequences must follow each other and the one before them, so that their
     * tokens are one span of the bin (and every byte of the bin belongs to one sequence). */
    uint64_t at = 0, beg, end;
    if (a > 0) {
        rc = sequence_span(ix, (uint64_t)a - 1, &beg, &at, err, errlen);
        if (rc < 0)
            return rc;
    }
    *offset = at;
    for (uint64_t s = (uint64_t)a; s < (uint64_t)b; s++) {
        rc = sequence_span(ix, s, &beg, &end, err, errlen);
        if (rc < 0)
            return rc;
        if (beg != at) {
            if (s == 0)
                return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                               "%s: offset %" PRIu64 ": sequence 0 starts at byte %" PRIu64
                               " of %s, expected 0",
                               n, pointers_at(ix, 0), beg, ix->bin_name);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "%s: offset %" PRIu64 ": sequence %" PRIu64 " starts at byte %" PRIu64
                           " of %s, but sequence %" PRIu64 " ends at byte %" PRIu64,
                           n, pointers_at(ix, s), s, beg, ix->bin_name, s - 1, at);
        }
        at = end;
    }
    *ntokens = (at - *offset) / ix->width;
    return 0;
}

static int widen(const struct pipe_megatron_index *ix, const uint8_t *p, uint64_t offset,
                 uint64_t ntokens, int32_t *o, char *err, size_t errlen);

int pipe_megatron_tokens(const struct pipe_megatron_index *ix, uint64_t offset, uint64_t ntokens,
                         struct pipe_tensor *t, char *err, size_t errlen)
{
    assert(offset <= ix->bin_len && ntokens <= (ix->bin_len - offset) / ix->width);
    if (ntokens > SIZE_MAX / 4)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", ix->bin_name);
    t->dtype = SLUICE_INT32;
    int rc = pipe_tensor_reserve(t, (size_t)ntokens * 4, (size_t)ntokens);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s: %s", ix->bin_name, sluice_strerror(rc));
    t->rank = 1;
    t->shape[0] = (int64_t)ntokens;
    t->len = (size_t)ntokens * 4;
    if (ntokens == 0)
        return 0;
    const uint8_t *p = ix->bin ? ix->bin + offset : NULL;
    uint8_t *fetched = NULL;
    if (!p) {
        /* Read through read_bin: at most 8 bytes a token, twice the tensor's size. */
        size_t bytes = (size_t)ntokens * ix->width;
        if (!(fetched = malloc(bytes)))
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", ix->bin_name);
        rc = ix->read_bin(ix->read_arg, fetched, bytes, offset, err, errlen);
        if (rc < 0) {
            free(fetched);
            return rc;
        }
        p = fetched;
    }
    rc = widen(ix, p, offset, ntokens, (int32_t *)(void *)t->data, err, errlen);
    free(fetched);
    return rc;
}

/* Widens ntokens tokens at p (from byte offset of the bin) into o. */
static int widen(const struct pipe_megatron_index *ix, const uint8_t *p, uint64_t offset,
                 uint64_t ntokens, int32_t *o, char *err, size_t errlen)
{
    size_t k = (size_t)ntokens;
    switch (ix->code) {
    case 1:
        for (size_t i = 0; i < k; i++)
            o[i] = p[i];
        break;
    case 2:
        for (size_t i = 0; i < k; i++)
            o[i] = (int8_t)p[i];
        break;
    case 3:
        for (size_t i = 0; i < k; i++)
            o[i] = (int16_t)(uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        break;
    case 8:
        for (size_t i = 0; i < k; i++)
            o[i] = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        break;
    case 4:
        for (size_t i = 0; i < k; i++)
            o[i] = (int32_t)le32(p + 4 * i);
        break;
    case 5:
        for (size_t i = 0; i < k; i++) {
            int64_t v = (int64_t)le64(p + 8 * i);
            if (v < INT32_MIN || v > INT32_MAX)
                return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                               "%s: offset %" PRIu64 ": token %" PRId64 " is outside int32's range",
                               ix->bin_name, offset + 8 * (uint64_t)i, v);
            o[i] = (int32_t)v;
        }
        break;
    default:
        /* pipe_megatron_index_init admits no other code. */
        assert(0);
        return SLUICE_ERR_CORRUPT;
    }
    return 0;
}

/* ---- Split entries ------------------------------------------------------------------------ */

/* A decimal without leading zeros (but "0"), the whole of [p, end). */
static bool decimal(const char *p, const char *end, uint64_t *v)
{
    if (p == end || (p[0] == '0' && end - p > 1))
        return false;
    uint64_t x = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned digit = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - digit) / 10)
            return false;
        x = x * 10 + digit;
    }
    *v = x;
    return true;
}

bool pipe_megatron_range_of(const char *name, size_t *prefix_len, uint64_t *start, uint64_t *count)
{
    const char *mark = NULL;
    for (const char *p = strstr(name, PIPE_MEGATRON_DOCS_MARK); p;
         p = strstr(p + 1, PIPE_MEGATRON_DOCS_MARK))
        mark = p;
    if (!mark)
        return false;
    const char *num = mark + strlen(PIPE_MEGATRON_DOCS_MARK);
    const char *plus = strchr(num, '+');
    uint64_t s, c;
    if (!plus || !decimal(num, plus, &s) || !decimal(plus + 1, plus + 1 + strlen(plus + 1), &c))
        return false;
    *prefix_len = (size_t)(mark - name);
    *start = s;
    *count = c;
    return true;
}

int pipe_megatron_range_names(const char *prefix, uint64_t ndocs, uint64_t per_split, char ***names,
                              size_t *nnames, char *err, size_t errlen)
{
    assert(per_split >= 1);
    *names = NULL;
    *nnames = 0;
    uint64_t n = ndocs / per_split + (ndocs % per_split != 0);
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / sizeof(char *))
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "megatron(\"%s\"): out of memory", prefix);
    char **v = calloc((size_t)n, sizeof *v);
    if (!v)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "megatron(\"%s\"): out of memory", prefix);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t start = i * per_split;
        uint64_t count = ndocs - start < per_split ? ndocs - start : per_split;
        if (asprintf(&v[i], "%s" PIPE_MEGATRON_DOCS_MARK "%" PRIu64 "+%" PRIu64, prefix, start,
                     count) < 0) {
            v[i] = NULL;
            pipe_paths_free(v, (size_t)i);
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "megatron(\"%s\"): out of memory",
                           prefix);
        }
    }
    *names = v;
    *nnames = (size_t)n;
    return 0;
}

/* ---- Files -------------------------------------------------------------------------------- */

/* One dataset's two files: mapped, or objects read at random (objstore.h). */
struct mg_files {
    char *prefix;              /* the entry's prefix, with its pin if any; NULL when none is open */
    char *name;                /* the prefix without its pin, for messages */
    char *idx_name, *bin_name; /* the files' paths or URLs, without pins */
    void *idx_map, *bin_map;   /* NULL for an empty file, or objects */
    struct obj_reader *idx_obj, *bin_obj;
    uint64_t idx_len, bin_len;
    struct pipe_megatron_index ix;
};

static void files_close(struct mg_files *f)
{
    if (f->idx_map)
        munmap(f->idx_map, (size_t)f->idx_len);
    if (f->bin_map)
        munmap(f->bin_map, (size_t)f->bin_len);
    obj_close(f->idx_obj);
    obj_close(f->bin_obj);
    free(f->prefix);
    free(f->name);
    free(f->idx_name);
    free(f->bin_name);
    memset(f, 0, sizeof *f);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* A prefix given with its extension is the likely mistake behind a missing file. */
static void hint_extension(const char *prefix, char *err, size_t errlen)
{
    if (ends_with(prefix, ".idx") || ends_with(prefix, ".bin")) {
        size_t at = strlen(err);
        snprintf(err + at, errlen - at, " (megatron() takes the prefix, without .idx or .bin)");
    }
}

/* Opens path (through roots) and maps it whole, read-only. */
static int map_file(const struct pipe_roots *roots, const char *path, const char *prefix,
                    void **map, uint64_t *len, char *err, size_t errlen)
{
    *map = NULL;
    *len = 0;
    int fd = pipe_roots_open_file(roots, PIPE_SRC_MEGATRON, path, err, errlen);
    if (fd < 0) {
        if (fd == -ENOENT)
            hint_extension(prefix, err, errlen);
        return fd;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        err_set(err, errlen, rc, "%s: %s", path, sluice_strerror(rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID, "%s: not a regular file", path);
    } else if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = -errno;
            err_set(err, errlen, rc, "%s: mmap: %s", path, sluice_strerror(rc));
        } else {
            *map = m;
            *len = (uint64_t)st.st_size;
        }
    }
    close(fd);
    return rc;
}

/* The reads of an index over objects (pipe_megatron_read_fn). */
static int read_object(struct obj_reader *r, const char *name, void *dst, size_t len, uint64_t off,
                       char *err, size_t errlen)
{
    char why[SLUICE_ERRMSG_SIZE];
    int rc = obj_pread(r, dst, len, off, why, sizeof why);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s: offset %" PRIu64 ": %s", name, off, why);
    return 0;
}

static int read_idx_object(void *arg, void *dst, size_t len, uint64_t off, char *err, size_t errlen)
{
    struct mg_files *f = arg;
    return read_object(f->idx_obj, f->idx_name, dst, len, off, err, errlen);
}

static int read_bin_object(void *arg, void *dst, size_t len, uint64_t off, char *err, size_t errlen)
{
    struct mg_files *f = arg;
    return read_object(f->bin_obj, f->bin_name, dst, len, off, err, errlen);
}

/* Where the pin of a prefix (PIPE_MEGATRON_PIN_MARK) begins within its first plen bytes, or
 * plen when it has none. */
static size_t pin_at(const char *prefix, size_t plen)
{
    size_t m = strlen(PIPE_MEGATRON_PIN_MARK), at = plen;
    for (size_t i = 0; i + m <= plen; i++)
        if (memcmp(prefix + i, PIPE_MEGATRON_PIN_MARK, m) == 0)
            at = i;
    return at;
}

/* Opens the objects of a URL prefix into f (names set): PREFIX.idx and PREFIX.bin, each with
 * its pin ("SIZE:ETAG" of pins[k]) when the prefix has one. */
static int objects_open(struct mg_files *f, const struct pipe_roots *roots, const char *pin,
                        size_t pinlen, const struct obj_cancel *cancel, char *err, size_t errlen)
{
    /* The pin: "ISIZE:IETAG:BSIZE:BETAG", the ETags percent-encoded (so without ':'). */
    const char *parts[2] = {NULL, NULL};
    size_t lens[2] = {0, 0};
    if (pin) {
        const char *p = pin, *end = pin + pinlen;
        for (int k = 0; k < 2; k++) {
            const char *c1 = memchr(p, ':', (size_t)(end - p));
            const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
            const char *stop = k == 0 ? c2 : end;
            if (!c1 || !stop || (k == 1 && c2)) {
                return err_set(err, errlen, SLUICE_ERR_INVALID, "megatron(\"%s\"): bad pin '%.*s'",
                               f->name, (int)pinlen, pin);
            }
            parts[k] = p;
            lens[k] = (size_t)(stop - p);
            p = stop + 1;
        }
    }
    const char *names[2] = {f->idx_name, f->bin_name};
    struct obj_reader **objs[2] = {&f->idx_obj, &f->bin_obj};
    for (int k = 0; k < 2; k++) {
        char *url = NULL;
        int n = parts[k]
                    ? asprintf(&url, "%s" OBJ_PIN_MARK "%.*s", names[k], (int)lens[k], parts[k])
                    : asprintf(&url, "%s", names[k]);
        if (n < 0)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "megatron(\"%s\"): out of memory",
                           f->name);
        int rc = pipe_roots_open_object(roots, PIPE_SRC_MEGATRON, url, true, cancel, objs[k], err,
                                        errlen);
        free(url);
        if (rc == SLUICE_ERR_NOT_FOUND)
            hint_extension(f->name, err, errlen);
        if (rc < 0)
            return rc;
    }
    f->idx_len = obj_size(f->idx_obj);
    f->bin_len = obj_size(f->bin_obj);
    return pipe_megatron_index_init_read(&f->ix, read_idx_object, read_bin_object, f, f->idx_len,
                                         f->bin_len, f->idx_name, f->bin_name, err, errlen);
}

/* Opens the dataset of the prefix's first plen bytes into f (empty before). */
static int files_open(struct mg_files *f, const struct pipe_roots *roots, const char *prefix,
                      size_t plen, const struct obj_cancel *cancel, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    bool url = obj_is_url(prefix);
    size_t nlen = url ? pin_at(prefix, plen) : plen;
    f->prefix = strndup(prefix, plen);
    f->name = strndup(prefix, nlen);
    if (f->name && (asprintf(&f->idx_name, "%s.idx", f->name) < 0 ||
                    asprintf(&f->bin_name, "%s.bin", f->name) < 0)) {
        free(f->idx_name);
        f->idx_name = NULL;
        f->bin_name = NULL;
    }
    if (!f->prefix || !f->name || !f->idx_name || !f->bin_name) {
        files_close(f);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "megatron(\"%.*s\"): out of memory",
                       (int)plen, prefix);
    }
    int rc;
    if (url) {
        size_t m = strlen(PIPE_MEGATRON_PIN_MARK);
        rc = objects_open(f, roots, nlen < plen ? prefix + nlen + m : NULL,
                          nlen < plen ? plen - nlen - m : 0, cancel, err, errlen);
    } else {
        rc = map_file(roots, f->idx_name, f->prefix, &f->idx_map, &f->idx_len, err, errlen);
        if (rc == 0)
            rc = map_file(roots, f->bin_name, f->prefix, &f->bin_map, &f->bin_len, err, errlen);
        if (rc == 0)
            rc = pipe_megatron_index_init(&f->ix, f->idx_map, f->idx_len, f->bin_map, f->bin_len,
                                          f->idx_name, f->bin_name, err, errlen);
    }
    if (rc < 0)
        files_close(f);
    return rc;
}

int pipe_megatron_count(const struct pipe_roots *roots, const char *prefix, uint64_t *ndocs,
                        char *err, size_t errlen)
{
    struct mg_files f;
    *ndocs = 0;
    int rc = files_open(&f, roots, prefix, strlen(prefix), NULL, err, errlen);
    if (rc < 0)
        return rc;
    *ndocs = f.ix.ndocs;
    files_close(&f);
    return 0;
}

/* Appends ":SIZE:ETAG" of r (the ETag percent-encoded) to out at *at. */
static int pin_part(struct obj_reader *r, bool first, char *out, size_t outlen, size_t *at)
{
    int n = snprintf(out + *at, outlen - *at, "%s%" PRIu64 ":", first ? "" : ":", obj_size(r));
    if (n < 0 || (size_t)n >= outlen - *at)
        return SLUICE_ERR_TOO_LARGE;
    *at += (size_t)n;
    const char *etag = obj_etag(r);
    int rc = obj_encode(etag, strlen(etag), false, out + *at, outlen - *at);
    if (rc < 0)
        return rc;
    *at += strlen(out + *at);
    return 0;
}

int pipe_megatron_plan(const struct pipe_roots *roots, const char *prefix, uint64_t *ndocs,
                       char **planned, char *err, size_t errlen)
{
    struct mg_files f;
    *ndocs = 0;
    *planned = NULL;
    int rc = files_open(&f, roots, prefix, strlen(prefix), NULL, err, errlen);
    if (rc < 0)
        return rc;
    *ndocs = f.ix.ndocs;
    if (f.idx_obj) {
        char pin[2048];
        size_t at = 0;
        rc = pin_part(f.idx_obj, true, pin, sizeof pin, &at);
        if (rc == 0)
            rc = pin_part(f.bin_obj, false, pin, sizeof pin, &at);
        if (rc < 0)
            err_set(err, errlen, rc, "megatron(\"%s\"): pinning its objects: %s", f.name,
                    sluice_strerror(rc));
        else if (asprintf(planned, "%s" PIPE_MEGATRON_PIN_MARK "%s", f.name, pin) < 0)
            *planned = NULL;
    } else {
        *planned = strdup(prefix);
    }
    if (rc == 0 && !*planned)
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "megatron(\"%s\"): out of memory", prefix);
    files_close(&f);
    return rc;
}

/* ---- The source --------------------------------------------------------------------------- */

struct mg_reader {
    struct pipe_iter base;
    char **entries; /* owned copies */
    size_t nentries, next_entry;
    struct mg_files f;     /* the open dataset, if any */
    uint64_t doc, doc_end; /* the documents of the current entry not yet read */
    int status;            /* 1 running, 0 ended, negative after an error */
};

static void close_files(struct mg_reader *r)
{
    struct pipe_ctx *ctx = r->base.ctx;
    if (ctx && ctx->origin.owner == r)
        memset(&ctx->origin, 0, sizeof ctx->origin);
    files_close(&r->f);
}

static int fail(struct mg_reader *r, int code)
{
    close_files(r);
    r->status = code;
    return code;
}

/* Whether the chain reading an object was cancelled (objstore.h's struct obj_cancel). */
static bool ctx_cancelled(const void *ctx)
{
    return pipe_cancelled(ctx);
}

/* Starts the next entry. Returns 1 when its run is ready, 0 when there are no more entries, or
 * an error. */
static int next_entry(struct mg_reader *r)
{
    if (r->next_entry == r->nentries)
        return 0;
    const char *name = r->entries[r->next_entry++];
    size_t plen = strlen(name);
    uint64_t start = 0, count = 0;
    bool run = pipe_megatron_range_of(name, &plen, &start, &count);
    char *err = r->base.ctx->err;
    size_t errlen = sizeof r->base.ctx->err;
    if (!r->f.prefix || strlen(r->f.prefix) != plen || memcmp(r->f.prefix, name, plen) != 0) {
        close_files(r);
        struct obj_cancel cancel = {ctx_cancelled, r->base.ctx};
        int rc = files_open(&r->f, pipe_registry_roots(r->base.ctx->reg), name, plen, &cancel, err,
                            errlen);
        if (rc < 0)
            return fail(r, rc);
    }
    uint64_t ndocs = r->f.ix.ndocs;
    if (!run) {
        start = 0;
        count = ndocs;
    } else if (start > ndocs || count > ndocs - start) {
        err_set(err, errlen, SLUICE_ERR_INVALID,
                "%s: documents [%" PRIu64 ", %" PRIu64 ") asked for, the index has %" PRIu64
                " (did it change after the dataset was planned?)",
                r->f.name, start, start + count, ndocs);
        return fail(r, SLUICE_ERR_INVALID);
    }
    r->doc = start;
    r->doc_end = start + count;
    return 1;
}

static int mg_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct mg_reader *r = (struct mg_reader *)it;
    if (r->status <= 0)
        return r->status;
    struct pipe_ctx *ctx = r->base.ctx;
    while (r->doc == r->doc_end) {
        int rc = next_entry(r);
        if (rc <= 0) {
            if (rc == 0) {
                close_files(r);
                r->status = 0;
            }
            return rc;
        }
    }
    uint64_t d = r->doc, offset, ntokens;
    int rc = pipe_megatron_document(&r->f.ix, d, &offset, &ntokens, ctx->err, sizeof ctx->err);
    if (rc < 0)
        return fail(r, rc);
    if (pipe_over_limit(ctx, 4 * ntokens)) {
        char what[80];
        snprintf(what, sizeof what, "%s: document %" PRIu64 ": ", r->f.name, d);
        return fail(r, pipe_limit_fail(ctx, what, 4 * ntokens, false));
    }
    rc = pipe_elem_resize(out, 1);
    if (rc < 0) {
        err_set(ctx->err, sizeof ctx->err, rc, "%s: %s", r->f.name, sluice_strerror(rc));
        return fail(r, rc);
    }
    rc = pipe_megatron_tokens(&r->f.ix, offset, ntokens, &out->t[0], ctx->err, sizeof ctx->err);
    if (rc < 0)
        return fail(r, rc);
    ctx->origin.file = r->f.bin_name;
    ctx->origin.offset = offset;
    ctx->origin.owner = r;
    r->doc++;
    return 1;
}

static void mg_destroy(struct pipe_iter *it)
{
    struct mg_reader *r = (struct mg_reader *)it;
    if (!r)
        return;
    close_files(r);
    pipe_paths_free(r->entries, r->nentries);
    free(r);
}

static const struct pipe_iter_ops mg_ops = {.next = mg_next, .destroy = mg_destroy};

int pipe_megatron_open(char *const *entries, size_t nentries, struct pipe_ctx *ctx,
                       struct pipe_iter **out)
{
    struct mg_reader *r = calloc(1, sizeof *r);
    if (!r)
        return SLUICE_ERR_NOMEM;
    r->base.ops = &mg_ops;
    r->base.ctx = ctx;
    r->status = 1;
    if (pipe_paths_copy(entries, nentries, &r->entries, &r->nentries) < 0) {
        mg_destroy(&r->base);
        return SLUICE_ERR_NOMEM;
    }
    *out = &r->base;
    return 0;
}
