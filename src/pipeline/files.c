/* File sources: tfrecord() and lines().
 *
 * Both readers share one shape: a list of paths opened one at a time as reading reaches them,
 * and a fixed read buffer that holds the unconsumed bytes of the current file. A record or line
 * that lies wholly inside the buffer is handed to the element straight from it; one that spans
 * refills is gathered in a reused record buffer, which grows to the largest record seen and no
 * further. A gzip- or zstd-compressed file (recognised by its first bytes when a file is opened)
 * is read through zlib or libzstd: reader_read() then decompresses from a fixed buffer of
 * compressed input instead of reading the file, and everything above it sees the uncompressed
 * bytes, so offsets in messages count uncompressed bytes. Failure modes: a file that cannot be
 * opened or read, a TFRecord checksum mismatch, a record cut short by the end of its file, a
 * record or line over MAX_RECORD, and a corrupt or truncated gzip or zstd stream. Each is reported
 * once in the context's message and then returned by every later next(). */
#include "files.h"

#include "common/crc32c.h"
#include "common/error.h"
#include "common/grow.h"
#include "objstore.h"
#include "paths.h"
#include "registry.h"
#include "roots.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

/* The read buffer's size: large enough that a read(2) per refill is cheap against the bytes it
 * moves, small enough that many concurrent readers cost little memory. */
#define READ_BUF_SIZE (256u * 1024u)

/* The longest record or line accepted. A corrupt or hostile length field must not make the
 * reader allocate without bound; real records are far smaller. */
#define MAX_RECORD ((uint64_t)1 << 30)

/* The TFRecord header (length, masked crc of the length) and trailer (masked crc of the data). */
#define TFR_HEADER 12u
#define TFR_TRAILER 4u

/* The compressed input buffer of a gzip file. */
#define GZ_IN_SIZE (64u * 1024u)

/* How many first bytes of a file decide whether it is gzip: the magic 1f 8b 08 (deflate), and
 * for a TFRecord file the record header that could look like it. */
#define SNIFF_LEN TFR_HEADER

/* The inflater of a gzip file, made when the reader meets its first one and reused for the
 * files after it. */
struct gz {
    z_stream zs;  /* next_in/avail_in: the unconsumed part of in */
    uint8_t *in;  /* GZ_IN_SIZE bytes */
    bool in_eof;  /* the file has returned end of file */
    bool between; /* a member has ended; another may follow */
};

/* The decompressor of a zstd file, made when the reader meets its first one and reused. */
struct zst {
    ZSTD_DStream *d;
    uint8_t *in;       /* GZ_IN_SIZE bytes */
    ZSTD_inBuffer src; /* the unconsumed part of in */
    bool in_eof;       /* the file has returned end of file */
    size_t ret;        /* ZSTD_decompressStream's last answer: 0 at a frame's end */
};

struct file_reader {
    struct pipe_iter base;
    char **paths; /* owned copies */
    size_t npaths;
    size_t next_path;       /* index of the file to open after the current one */
    const char *path;       /* the current file, paths[next_path - 1]; NULL when none is open */
    int fd;                 /* the current file, -1 when none is open */
    struct obj_reader *obj; /* the current object when the file is a URL, else NULL */
    bool eof;               /* the current file's (uncompressed) bytes have ended */
    /* Whether first bytes that begin with the gzip magic still belong to an uncompressed file of
     * this source (a TFRecord header whose length happens to start with them); NULL: never. */
    bool (*plain)(const uint8_t *head, size_t n);
    bool gzip;       /* the current file is gzip-compressed */
    struct gz *gz;   /* NULL until the first gzip file */
    bool zstd;       /* the current file is zstd-compressed */
    struct zst *zst; /* NULL until the first zstd file */
    /* buf[pos, end) holds unconsumed bytes of the current file; off is the file offset of
     * buf[pos]. */
    uint8_t *buf;
    size_t pos, end;
    uint64_t off;
    /* The record buffer for records and lines that span refills. */
    uint8_t *rec;
    size_t rec_len, rec_cap;
    /* 1 while running; 0 after the end; a negative code after an error. */
    int status;
};

uint32_t pipe_tfrecord_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void store_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int pipe_tfrecord_write(FILE *f, const void *data, size_t len)
{
    uint8_t header[TFR_HEADER], trailer[TFR_TRAILER];
    store_le64(header, (uint64_t)len);
    store_le32(header + 8, pipe_tfrecord_mask(crc32c(header, 8)));
    store_le32(trailer, pipe_tfrecord_mask(crc32c(data, len)));
    errno = 0;
    if (fwrite(header, 1, sizeof header, f) != sizeof header ||
        (len > 0 && fwrite(data, 1, len, f) != len) ||
        fwrite(trailer, 1, sizeof trailer, f) != sizeof trailer)
        return errno ? -errno : -EIO;
    return 0;
}

/* ---- The shared reader ------------------------------------------------------------------- */

static void reader_close_file(struct file_reader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    obj_close(r->obj);
    r->obj = NULL;
    r->path = NULL;
    r->pos = r->end = 0;
    r->off = 0;
    r->eof = false;
    r->gzip = false;
    r->zstd = false;
}

/* Records an error in the chain's context and makes it sticky. */
static int reader_fail(struct file_reader *r, int code)
{
    reader_close_file(r);
    r->status = code;
    return code;
}

/* read(2) of the file itself, retried on EINTR. Returns the bytes read (0 at end of file) or a
 * negative errno with the message set, naming the offset at (of the bytes the reader sees). */
static ssize_t raw_read(struct file_reader *r, void *dst, size_t len, uint64_t at)
{
    if (r->obj) {
        char why[sizeof r->base.ctx->err];
        ssize_t n = obj_read(r->obj, dst, len, why, sizeof why);
        if (n < 0) {
            err_set(r->base.ctx->err, sizeof r->base.ctx->err, (int)n, "%s: offset %" PRIu64 ": %s",
                    r->path, at, why);
            return reader_fail(r, (int)n);
        }
        return n;
    }
    ssize_t n;
    do
        n = read(r->fd, dst, len);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        int code = -errno;
        err_set(r->base.ctx->err, sizeof r->base.ctx->err, code, "%s: offset %" PRIu64 ": %s",
                r->path, at, sluice_strerror(code));
        return reader_fail(r, code);
    }
    return n;
}

static int gz_fail(struct file_reader *r, int code, uint64_t at, const char *what)
{
    err_set(r->base.ctx->err, sizeof r->base.ctx->err, code, "%s: offset %" PRIu64 ": %s", r->path,
            at, what);
    return reader_fail(r, code);
}

/* Inflates up to len bytes of the current gzip file into dst; at is the uncompressed offset of
 * dst[0]. Returns at least one byte, 0 at the end of the last member, or a negative code with
 * the message set. Concatenated members read as one stream. */
static ssize_t gz_read(struct file_reader *r, uint8_t *dst, size_t len, uint64_t at)
{
    struct gz *z = r->gz;
    z->zs.next_out = dst;
    z->zs.avail_out = len > UINT_MAX ? UINT_MAX : (unsigned)len;
    unsigned want = z->zs.avail_out;
    while (z->zs.avail_out == want) {
        if (z->zs.avail_in == 0 && !z->in_eof) {
            ssize_t n = raw_read(r, z->in, GZ_IN_SIZE, at);
            if (n < 0)
                return n;
            z->in_eof = n == 0;
            z->zs.next_in = z->in;
            z->zs.avail_in = (unsigned)n;
        }
        if (z->between) {
            /* Anything after a member must be another member; inflate says so otherwise. */
            if (z->zs.avail_in == 0)
                return 0;
            if (inflateReset(&z->zs) != Z_OK)
                return gz_fail(r, SLUICE_ERR_CORRUPT, at, "corrupt gzip stream");
            z->between = false;
        }
        if (z->zs.avail_in == 0)
            return gz_fail(r, SLUICE_ERR_TRUNCATED, at, "truncated gzip stream");
        int zr = inflate(&z->zs, Z_NO_FLUSH);
        uint64_t here = at + (want - z->zs.avail_out);
        if (zr == Z_STREAM_END) {
            z->between = true;
        } else if (zr == Z_MEM_ERROR) {
            return gz_fail(r, SLUICE_ERR_NOMEM, here, "inflate: out of memory");
        } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
            char what[160];
            snprintf(what, sizeof what, "corrupt gzip stream: %s",
                     zr == Z_NEED_DICT ? "needs a preset dictionary"
                     : z->zs.msg       ? z->zs.msg
                                       : "invalid data");
            return gz_fail(r, SLUICE_ERR_CORRUPT, here, what);
        }
    }
    return (ssize_t)(want - z->zs.avail_out);
}

/* Decompresses up to len bytes of the current zstd file into dst; at is the uncompressed offset
 * of dst[0]. Returns at least one byte, 0 at the end of the last frame, or a negative code with
 * the message set. Concatenated frames read as one stream. */
static ssize_t zst_read(struct file_reader *r, uint8_t *dst, size_t len, uint64_t at)
{
    struct zst *z = r->zst;
    ZSTD_outBuffer out = {dst, len, 0};
    while (out.pos == 0) {
        if (z->src.pos == z->src.size && !z->in_eof) {
            ssize_t n = raw_read(r, z->in, GZ_IN_SIZE, at);
            if (n < 0)
                return n;
            z->in_eof = n == 0;
            z->src = (ZSTD_inBuffer){z->in, (size_t)n, 0};
        }
        if (z->src.pos == z->src.size) {
            if (z->ret == 0)
                return 0;
            return gz_fail(r, SLUICE_ERR_TRUNCATED, at, "truncated zstd stream");
        }
        size_t ret = ZSTD_decompressStream(z->d, &out, &z->src);
        if (ZSTD_isError(ret)) {
            char what[160];
            snprintf(what, sizeof what, "corrupt zstd stream: %s", ZSTD_getErrorName(ret));
            return gz_fail(r,
                           ZSTD_getErrorCode(ret) == ZSTD_error_memory_allocation
                               ? SLUICE_ERR_NOMEM
                               : SLUICE_ERR_CORRUPT,
                           at + out.pos, what);
        }
        z->ret = ret;
    }
    return (ssize_t)out.pos;
}

/* Reads the next bytes the reader sees: the file's, or decompressed ones from a gzip or zstd
 * file. Returns the count (0 at the end, which sets eof) or a negative code with the message
 * set. */
static ssize_t reader_read(struct file_reader *r, void *dst, size_t len, uint64_t at)
{
    ssize_t n = r->gzip   ? gz_read(r, dst, len, at)
                : r->zstd ? zst_read(r, dst, len, at)
                          : raw_read(r, dst, len, at);
    if (n == 0)
        r->eof = true;
    return n;
}

/* Starts reading the zstd file just opened, whose first got bytes are in the read buffer. */
static int zst_start(struct file_reader *r, size_t got)
{
    if (!r->zst) {
        struct zst *z = calloc(1, sizeof *z);
        if (z && (!(z->in = malloc(GZ_IN_SIZE)) || !(z->d = ZSTD_createDStream()))) {
            free(z->in);
            free(z);
            z = NULL;
        }
        if (!z)
            return gz_fail(r, SLUICE_ERR_NOMEM, 0, "zstd: out of memory");
        r->zst = z;
    }
    struct zst *z = r->zst;
    ZSTD_DCtx_reset(z->d, ZSTD_reset_session_only);
    memcpy(z->in, r->buf, got);
    z->src = (ZSTD_inBuffer){z->in, got, 0};
    z->in_eof = false;
    z->ret = 1; /* inside a frame until one ends */
    r->zstd = true;
    return 0;
}

/* Reads the first bytes of the file just opened and decides whether it is gzip or zstd. A plain
 * file's first bytes stay in the read buffer; a compressed file's go to its decompressor. */
static int reader_sniff(struct file_reader *r)
{
    size_t got = 0;
    while (got < SNIFF_LEN) {
        ssize_t n = raw_read(r, r->buf + got, SNIFF_LEN - got, got);
        if (n < 0)
            return (int)n;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    const uint8_t *h = r->buf;
    bool plain = r->plain && r->plain(h, got);
    bool gzip = got >= 3 && h[0] == 0x1f && h[1] == 0x8b && h[2] == 0x08 && !plain;
    /* A zstd frame's magic number, 0xFD2FB528 little-endian. */
    bool zstd = got >= 4 && h[0] == 0x28 && h[1] == 0xb5 && h[2] == 0x2f && h[3] == 0xfd && !plain;
    if (zstd)
        return zst_start(r, got);
    if (!gzip) {
        r->end = got;
        r->eof = got < SNIFF_LEN;
        return 0;
    }
    if (!r->gz) {
        struct gz *z = calloc(1, sizeof *z);
        if (z && !(z->in = malloc(GZ_IN_SIZE))) {
            free(z);
            z = NULL;
        }
        /* 16 + MAX_WBITS: a gzip wrapper, nothing else. */
        if (z && inflateInit2(&z->zs, 16 + MAX_WBITS) != Z_OK) {
            free(z->in);
            free(z);
            z = NULL;
        }
        if (!z)
            return gz_fail(r, SLUICE_ERR_NOMEM, 0, "inflate: out of memory");
        r->gz = z;
    } else if (inflateReset(&r->gz->zs) != Z_OK) {
        return gz_fail(r, SLUICE_ERR_CORRUPT, 0, "corrupt gzip stream");
    }
    memcpy(r->gz->in, h, got);
    r->gz->zs.next_in = r->gz->in;
    r->gz->zs.avail_in = (unsigned)got;
    r->gz->in_eof = false;
    r->gz->between = false;
    r->gzip = true;
    return 0;
}

/* Whether the chain reading an object was cancelled (objstore.h's struct obj_cancel). */
static bool ctx_cancelled(const void *ctx)
{
    return pipe_cancelled(ctx);
}

/* Opens the next file. Returns 1 when a file is open, 0 when there are no more files, or a
 * negative errno with the message set. */
static int reader_open_next(struct file_reader *r)
{
    if (r->next_path == r->npaths)
        return 0;
    /* Many files (empty ones, say) can pass without an element: cancellation is seen here. */
    if (pipe_cancelled(r->base.ctx))
        return reader_fail(r, err_set(r->base.ctx->err, sizeof r->base.ctx->err,
                                      SLUICE_ERR_CANCELLED, "cancelled"));
    const char *path = r->paths[r->next_path++];
    if (obj_is_url(path)) {
        struct obj_cancel cancel = {ctx_cancelled, r->base.ctx};
        int rc = pipe_roots_open_object(
            pipe_registry_roots(r->base.ctx->reg), r->plain ? PIPE_SRC_TFRECORD : PIPE_SRC_LINES,
            path, false, &cancel, &r->obj, r->base.ctx->err, sizeof r->base.ctx->err);
        if (rc < 0)
            return reader_fail(r, rc);
        r->path = obj_url(r->obj); /* its messages name the URL without its pin */
        rc = reader_sniff(r);
        return rc < 0 ? rc : 1;
    }
    int fd = pipe_roots_open_file(pipe_registry_roots(r->base.ctx->reg),
                                  r->plain ? PIPE_SRC_TFRECORD : PIPE_SRC_LINES, path,
                                  r->base.ctx->err, sizeof r->base.ctx->err);
    if (fd < 0)
        return reader_fail(r, fd);
    r->fd = fd;
    r->path = path;
    int rc = reader_sniff(r);
    return rc < 0 ? rc : 1;
}

/* Makes at least need (<= READ_BUF_SIZE) bytes available in buf[pos, end), unless the file ends
 * first. Returns 0 (check end - pos for what is there) or a negative errno. */
static int reader_fill(struct file_reader *r, size_t need)
{
    if (r->end - r->pos >= need || r->eof)
        return 0;
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->end - r->pos);
        r->end -= r->pos;
        r->pos = 0;
    }
    while (r->end < need && !r->eof) {
        ssize_t n = reader_read(r, r->buf + r->end, READ_BUF_SIZE - r->end, r->off + r->end);
        if (n < 0)
            return (int)n;
        r->end += (size_t)n;
    }
    return 0;
}

static void reader_consume(struct file_reader *r, size_t n)
{
    r->pos += n;
    r->off += n;
}

/* Grows the record buffer to hold cap bytes, keeping its content. */
static int reader_rec_reserve(struct file_reader *r, size_t cap)
{
    return grow_bytes(&r->rec, &r->rec_cap, cap, 4096);
}

/* Hands a record (or line) that began at file offset at to the element, and records its origin
 * in the context for the functions downstream. */
static int reader_emit(struct file_reader *r, struct sluice_element *out, const void *data,
                       size_t len, uint64_t at)
{
    struct pipe_origin *o = &r->base.ctx->origin;
    o->file = r->paths[r->next_path - 1];
    o->offset = at;
    o->owner = r;
    /* A record or line that fit in the read buffer (longer ones were checked as they grew). */
    if (pipe_over_limit(r->base.ctx, len)) {
        char what[PATH_MAX + 64];
        snprintf(what, sizeof what, "%s: offset %" PRIu64 ": ", r->path ? r->path : "file source",
                 at);
        return reader_fail(r, pipe_limit_fail(r->base.ctx, what, len, false));
    }
    int rc = pipe_elem_resize(out, 1);
    if (rc == 0)
        rc = pipe_tensor_set_bytes(&out->t[0], data, len);
    if (rc < 0) {
        err_set(r->base.ctx->err, sizeof r->base.ctx->err, rc, "%s: %s",
                r->path ? r->path : "file source", sluice_strerror(rc));
        return reader_fail(r, rc);
    }
    return 1;
}

static void reader_destroy(struct pipe_iter *it)
{
    struct file_reader *r = (struct file_reader *)it;
    if (!r)
        return;
    if (r->base.ctx && r->base.ctx->origin.owner == r)
        memset(&r->base.ctx->origin, 0, sizeof(r->base.ctx->origin));
    reader_close_file(r);
    if (r->gz) {
        inflateEnd(&r->gz->zs);
        free(r->gz->in);
        free(r->gz);
    }
    if (r->zst) {
        ZSTD_freeDStream(r->zst->d);
        free(r->zst->in);
        free(r->zst);
    }
    pipe_paths_free(r->paths, r->npaths);
    free(r->buf);
    free(r->rec);
    free(r);
}

static int reader_new(char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                      const struct pipe_iter_ops *ops, struct pipe_iter **out)
{
    struct file_reader *r = calloc(1, sizeof *r);
    if (!r)
        return SLUICE_ERR_NOMEM;
    r->base.ops = ops;
    r->base.ctx = ctx;
    r->fd = -1;
    r->status = 1;
    r->buf = malloc(READ_BUF_SIZE);
    if (!r->buf)
        goto fail;
    if (npaths > 0) {
        r->paths = calloc(npaths, sizeof *r->paths);
        if (!r->paths)
            goto fail;
        for (size_t i = 0; i < npaths; i++) {
            r->paths[i] = strdup(paths[i]);
            if (!r->paths[i])
                goto fail;
            r->npaths = i + 1;
        }
    }
    *out = &r->base;
    return 0;
fail:
    reader_destroy(&r->base);
    return SLUICE_ERR_NOMEM;
}

/* ---- tfrecord() -------------------------------------------------------------------------- */

static int tfr_truncated(struct file_reader *r, uint64_t at, uint64_t need, uint64_t left)
{
    err_set(r->base.ctx->err, sizeof r->base.ctx->err, SLUICE_ERR_TRUNCATED,
            "%s: offset %" PRIu64 ": truncated record (needs %" PRIu64 " bytes, %" PRIu64 " left)",
            r->path, at, need, left);
    return reader_fail(r, SLUICE_ERR_TRUNCATED);
}

static int tfr_corrupt(struct file_reader *r, uint64_t at, const char *what)
{
    err_set(r->base.ctx->err, sizeof r->base.ctx->err, SLUICE_ERR_CORRUPT,
            "%s: offset %" PRIu64 ": %s", r->path, at, what);
    return reader_fail(r, SLUICE_ERR_CORRUPT);
}

/* Reads a record too large for the read buffer: its data goes to the record buffer, the part
 * already buffered copied and the rest read straight into place. On entry the header has been
 * checked and consumed. */
static int tfr_next_large(struct file_reader *r, struct sluice_element *out, uint64_t at,
                          size_t len)
{
    uint64_t need = TFR_HEADER + (uint64_t)len + TFR_TRAILER;
    int rc = reader_rec_reserve(r, len);
    if (rc < 0) {
        err_set(r->base.ctx->err, sizeof r->base.ctx->err, rc,
                "%s: offset %" PRIu64 ": record of %zu bytes: %s", r->path, at, len,
                sluice_strerror(rc));
        return reader_fail(r, rc);
    }
    size_t have = r->end - r->pos;
    if (have > len)
        have = len;
    memcpy(r->rec, r->buf + r->pos, have);
    reader_consume(r, have);
    while (have < len) {
        ssize_t n = reader_read(r, r->rec + have, len - have, r->off);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return tfr_truncated(r, at, need, TFR_HEADER + have);
        have += (size_t)n;
        r->off += (uint64_t)n;
    }
    rc = reader_fill(r, TFR_TRAILER);
    if (rc < 0)
        return rc;
    if (r->end - r->pos < TFR_TRAILER)
        return tfr_truncated(r, at, need, TFR_HEADER + len + (r->end - r->pos));
    if (load_le32(r->buf + r->pos) != pipe_tfrecord_mask(crc32c(r->rec, len)))
        return tfr_corrupt(r, at, "bad data checksum");
    reader_consume(r, TFR_TRAILER);
    return reader_emit(r, out, r->rec, len, at);
}

static int tfr_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct file_reader *r = (struct file_reader *)it;
    if (r->status <= 0)
        return r->status;
    for (;;) {
        if (r->fd < 0 && !r->obj) {
            int rc = reader_open_next(r);
            if (rc == 0)
                return r->status = 0;
            if (rc < 0)
                return rc;
        }
        uint64_t at = r->off;
        int rc = reader_fill(r, TFR_HEADER);
        if (rc < 0)
            return rc;
        size_t avail = r->end - r->pos;
        if (avail == 0) {
            reader_close_file(r);
            continue;
        }
        if (avail < TFR_HEADER)
            return tfr_truncated(r, at, TFR_HEADER, avail);
        const uint8_t *h = r->buf + r->pos;
        uint64_t len = load_le64(h);
        if (load_le32(h + 8) != pipe_tfrecord_mask(crc32c(h, 8)))
            return tfr_corrupt(r, at, "bad length checksum");
        /* The record's size is known from its header: over the worker's limit, it is refused
         * before anything is allocated for it. */
        if (pipe_over_limit(r->base.ctx, len)) {
            char what[PATH_MAX + 64];
            snprintf(what, sizeof what, "%s: offset %" PRIu64 ": ", r->path, at);
            return reader_fail(r, pipe_limit_fail(r->base.ctx, what, len, false));
        }
        if (len > MAX_RECORD) {
            err_set(r->base.ctx->err, sizeof r->base.ctx->err, SLUICE_ERR_TOO_LARGE,
                    "%s: offset %" PRIu64 ": record length %" PRIu64 " over limit", r->path, at,
                    len);
            return reader_fail(r, SLUICE_ERR_TOO_LARGE);
        }
        size_t need = TFR_HEADER + (size_t)len + TFR_TRAILER;
        if (need > READ_BUF_SIZE) {
            reader_consume(r, TFR_HEADER);
            return tfr_next_large(r, out, at, (size_t)len);
        }
        rc = reader_fill(r, need);
        if (rc < 0)
            return rc;
        avail = r->end - r->pos;
        if (avail < need)
            return tfr_truncated(r, at, need, avail);
        const uint8_t *data = r->buf + r->pos + TFR_HEADER;
        if (load_le32(data + len) != pipe_tfrecord_mask(crc32c(data, (size_t)len)))
            return tfr_corrupt(r, at, "bad data checksum");
        reader_consume(r, need);
        return reader_emit(r, out, data, (size_t)len, at);
    }
}

static const struct pipe_iter_ops tfr_ops = {.next = tfr_next, .destroy = reader_destroy};

/* A file of TFRecords that begins with a valid record header is a TFRecord file, whatever its
 * first bytes look like: a gzip header passes that check by chance once in 2^32. */
static bool tfr_plain(const uint8_t *head, size_t n)
{
    return n >= TFR_HEADER && load_le32(head + 8) == pipe_tfrecord_mask(crc32c(head, 8));
}

int pipe_tfrecord_open(char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                       struct pipe_iter **out)
{
    int rc = reader_new(paths, npaths, ctx, &tfr_ops, out);
    if (rc == 0)
        ((struct file_reader *)*out)->plain = tfr_plain;
    return rc;
}

/* ---- lines() ----------------------------------------------------------------------------- */

/* Appends buf[pos, pos + n) to the record buffer and consumes it; at is the offset where the
 * line began, for the message when the line grows over the limit. */
static int lines_spill(struct file_reader *r, size_t n, uint64_t at)
{
    if (pipe_over_limit(r->base.ctx, (uint64_t)r->rec_len + n)) {
        char what[PATH_MAX + 64];
        snprintf(what, sizeof what, "%s: offset %" PRIu64 ": ", r->path, at);
        return reader_fail(r, pipe_limit_fail(r->base.ctx, what, (uint64_t)r->rec_len + n, true));
    }
    if ((uint64_t)r->rec_len + n > MAX_RECORD) {
        err_set(r->base.ctx->err, sizeof r->base.ctx->err, SLUICE_ERR_TOO_LARGE,
                "%s: offset %" PRIu64 ": line length over limit", r->path, at);
        return reader_fail(r, SLUICE_ERR_TOO_LARGE);
    }
    int rc = reader_rec_reserve(r, r->rec_len + n);
    if (rc < 0) {
        err_set(r->base.ctx->err, sizeof r->base.ctx->err, rc, "%s: offset %" PRIu64 ": %s",
                r->path, at, sluice_strerror(rc));
        return reader_fail(r, rc);
    }
    memcpy(r->rec + r->rec_len, r->buf + r->pos, n);
    r->rec_len += n;
    reader_consume(r, n);
    return 0;
}

static int lines_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct file_reader *r = (struct file_reader *)it;
    if (r->status <= 0)
        return r->status;
    /* scanned: bytes at buf[pos] already known to hold no newline. */
    size_t scanned = 0;
    r->rec_len = 0;
    uint64_t at = 0;
    for (;;) {
        if (r->fd < 0 && !r->obj) {
            int rc = reader_open_next(r);
            if (rc == 0)
                return r->status = 0;
            if (rc < 0)
                return rc;
        }
        if (r->rec_len == 0 && scanned == 0)
            at = r->off;
        size_t avail = r->end - r->pos;
        const uint8_t *start = r->buf + r->pos;
        const uint8_t *nl = avail > scanned ? memchr(start + scanned, '\n', avail - scanned) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - start);
            if (r->rec_len == 0) {
                reader_consume(r, n + 1);
                return reader_emit(r, out, start, n, at);
            }
            int rc = lines_spill(r, n, at);
            if (rc < 0)
                return rc;
            reader_consume(r, 1);
            return reader_emit(r, out, r->rec, r->rec_len, at);
        }
        scanned = avail;
        if (r->eof) {
            /* The last line of a file need not end in a newline; an empty remainder after the
             * final newline is no line at all. */
            if (avail == 0 && r->rec_len == 0) {
                reader_close_file(r);
                scanned = 0;
                continue;
            }
            int rc;
            if (r->rec_len == 0) {
                rc = reader_emit(r, out, start, avail, at);
            } else {
                rc = lines_spill(r, avail, at);
                if (rc < 0)
                    return rc;
                rc = reader_emit(r, out, r->rec, r->rec_len, at);
            }
            if (rc == 1)
                reader_close_file(r);
            return rc;
        }
        if (avail == READ_BUF_SIZE) {
            /* The buffer is full of one unfinished line: move it aside and read on. */
            int rc = lines_spill(r, avail, at);
            if (rc < 0)
                return rc;
            scanned = 0;
        }
        int rc = reader_fill(r, r->end - r->pos + 1);
        if (rc < 0)
            return rc;
    }
}

static const struct pipe_iter_ops lines_ops = {.next = lines_next, .destroy = reader_destroy};

int pipe_lines_open(char *const *paths, size_t npaths, struct pipe_ctx *ctx, struct pipe_iter **out)
{
    return reader_new(paths, npaths, ctx, &lines_ops, out);
}
