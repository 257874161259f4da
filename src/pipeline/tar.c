/* tar(): WebDataset shards through libarchive.
 *
 * Happy path: open a shard, read member headers one by one, feed each name to the grouping
 * (wds.c), keep the bytes of asked-for members in per-component buffers, and emit the buffers as
 * an element whenever the grouping says a sample is complete. The member whose header ended a
 * sample is held (its data not yet read or skipped) until the next call, so the element goes out
 * before its buffer is reused or damage in that member can hold it back. Every member's data is
 * read or skipped explicitly before the next header, so damage anywhere surfaces as an error and
 * the archive position after the last member is known: libarchive accepts an archive that simply
 * stops at a member boundary, and only the end-of-archive blocks it then does not consume tell such
 * a truncated shard from a whole one. Every failure is recorded once in the context's message and
 * returned by every later next().
 *
 * libarchive is opened on first use (dlopen of libarchive.so.13, common/dynlib.h), not linked:
 * with libxml2 and ICU it is a dozen libraries every start of every program would load. */
#include "tar.h"

#include "common/dynlib.h"
#include "common/error.h"
#include "objstore.h"
#include "paths.h"
#include "registry.h"
#include "roots.h"
#include "split.h"
#include "wds.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libarchive's read block size: what one read(2) asks for. */
#define TAR_BLOCK_SIZE (64u * 1024u)

/* The largest member accepted, as for a TFRecord record: a damaged size field must not make
 * the reader allocate without bound. */
#define MAX_MEMBER ((uint64_t)1 << 30)

/* A member buffer starts at most this large and grows as data arrives, so a header that
 * claims a huge size in a short archive costs little before the truncation is noticed. */
#define FIRST_RESERVE ((size_t)1 << 20)

enum { NONE = -1, SKIP = -2 };

struct component {
    uint8_t *data;
    size_t len, cap;
};

struct tar_reader {
    struct pipe_iter base;
    char **paths; /* owned copies */
    size_t npaths;
    size_t next_path;
    char **exts; /* owned copies */
    size_t nexts;
    struct pipe_wds group;
    struct component *comps; /* nexts of them: the current sample's members */
    /* The current shard; a NULL archive when none is open. */
    const char *path;
    int fd;
    struct obj_reader *obj; /* the shard when it is an object, read through obj_buf */
    uint8_t *obj_buf;       /* TAR_BLOCK_SIZE bytes, allocated with the first object */
    struct archive *a;
    struct archive_entry *entry; /* the current member, valid until the next header */
    uint64_t entry_at;           /* the archive offset of its header */
    bool any_entry;              /* the shard has had a member */
    /* What the next call does first with the current member's data: NONE, SKIP, or read it
     * into component pending (>= 0). */
    int pending;
    /* 1 while running; 0 after the end; a negative code after an error. */
    int status;
};

/* The libarchive functions used, resolved once by load_archive() (typed as archive.h and
 * archive_entry.h declare them). */
static struct archive_api {
    __typeof__(archive_read_new) *read_new;
    __typeof__(archive_read_free) *read_free;
    __typeof__(archive_read_support_format_tar) *read_support_format_tar;
    __typeof__(archive_read_support_format_empty) *read_support_format_empty;
    __typeof__(archive_read_support_filter_gzip) *read_support_filter_gzip;
    __typeof__(archive_read_open) *read_open;
    __typeof__(archive_read_open_fd) *read_open_fd;
    __typeof__(archive_read_next_header) *read_next_header;
    __typeof__(archive_read_data) *read_data;
    __typeof__(archive_read_data_skip) *read_data_skip;
    __typeof__(archive_filter_bytes) *filter_bytes;
    __typeof__(archive_errno) *errnum;
    __typeof__(archive_error_string) *error_string;
    __typeof__(archive_set_error) *set_error;
    __typeof__(archive_entry_pathname) *entry_pathname;
    __typeof__(archive_entry_pathname_utf8) *entry_pathname_utf8;
    __typeof__(archive_entry_size) *entry_size;
    __typeof__(archive_entry_filetype) *entry_filetype;
    __typeof__(archive_entry_hardlink) *entry_hardlink;
} ar;

static const struct dynlib_fn ar_fns[] = {
    DYNLIB_FN(struct archive_api, read_new, archive_read_new),
    DYNLIB_FN(struct archive_api, read_free, archive_read_free),
    DYNLIB_FN(struct archive_api, read_support_format_tar, archive_read_support_format_tar),
    DYNLIB_FN(struct archive_api, read_support_format_empty, archive_read_support_format_empty),
    DYNLIB_FN(struct archive_api, read_support_filter_gzip, archive_read_support_filter_gzip),
    DYNLIB_FN(struct archive_api, read_open, archive_read_open),
    DYNLIB_FN(struct archive_api, read_open_fd, archive_read_open_fd),
    DYNLIB_FN(struct archive_api, read_next_header, archive_read_next_header),
    DYNLIB_FN(struct archive_api, read_data, archive_read_data),
    DYNLIB_FN(struct archive_api, read_data_skip, archive_read_data_skip),
    DYNLIB_FN(struct archive_api, filter_bytes, archive_filter_bytes),
    DYNLIB_FN(struct archive_api, errnum, archive_errno),
    DYNLIB_FN(struct archive_api, error_string, archive_error_string),
    DYNLIB_FN(struct archive_api, set_error, archive_set_error),
    DYNLIB_FN(struct archive_api, entry_pathname, archive_entry_pathname),
    DYNLIB_FN(struct archive_api, entry_pathname_utf8, archive_entry_pathname_utf8),
    DYNLIB_FN(struct archive_api, entry_size, archive_entry_size),
    DYNLIB_FN(struct archive_api, entry_filetype, archive_entry_filetype),
    DYNLIB_FN(struct archive_api, entry_hardlink, archive_entry_hardlink),
};

static struct dynlib ar_lib = DYNLIB_INIT("libarchive.so.13", "tar shards", ar_fns, &ar);

static const char *entry_name(struct archive_entry *e)
{
    const char *n = ar.entry_pathname_utf8(e);
    return n ? n : ar.entry_pathname(e);
}

static void close_shard(struct tar_reader *r)
{
    if (r->a)
        ar.read_free(r->a);
    r->a = NULL;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    obj_close(r->obj);
    r->obj = NULL;
    r->path = NULL;
    r->entry = NULL;
    r->pending = NONE;
}

static int fail(struct tar_reader *r, int code)
{
    close_shard(r);
    r->status = code;
    return code;
}

/* The code for libarchive's current error. */
static int archive_code(struct archive *a)
{
    return ar.errnum(a) == ENOMEM ? SLUICE_ERR_NOMEM : SLUICE_ERR_CORRUPT;
}

static const char *archive_msg(struct archive *a)
{
    const char *m = ar.error_string(a);
    return m ? m : "damaged tar archive";
}

/* Fails with libarchive's error while reading the current member's data. */
static int fail_member(struct tar_reader *r)
{
    const char *name = r->entry ? entry_name(r->entry) : NULL;
    int code = archive_code(r->a);
    err_set(r->base.ctx->err, sizeof r->base.ctx->err, code,
            "%s: offset %" PRIu64 ": member %s: %s", r->path, r->entry_at, name ? name : "?",
            archive_msg(r->a));
    return fail(r, code);
}

/* libarchive's read callback over an object: the next block of its bytes. */
static la_ssize_t obj_block(struct archive *a, void *user, const void **block)
{
    struct tar_reader *r = user;
    char why[512];
    ssize_t n = obj_read(r->obj, r->obj_buf, TAR_BLOCK_SIZE, why, sizeof why);
    if (n < 0) {
        ar.set_error(a, n == SLUICE_ERR_NOMEM ? ENOMEM : EIO, "%s", why);
        return -1;
    }
    *block = r->obj_buf;
    return n;
}

/* Whether the chain reading an object was cancelled (objstore.h's struct obj_cancel). */
static bool ctx_cancelled(const void *ctx)
{
    return pipe_cancelled(ctx);
}

/* Opens the next shard. Returns 1 when one is open, 0 when there are no more, or an error. */
static int open_next(struct tar_reader *r)
{
    if (r->next_path == r->npaths)
        return 0;
    const char *path = r->paths[r->next_path++];
    char *err = r->base.ctx->err;
    size_t errlen = sizeof r->base.ctx->err;
    int lrc = dynlib_load(&ar_lib, err, errlen);
    if (lrc < 0)
        return fail(r, lrc);
    const struct pipe_roots *roots = pipe_registry_roots(r->base.ctx->reg);
    int fd = -1;
    if (obj_is_url(path)) {
        struct obj_cancel cancel = {ctx_cancelled, r->base.ctx};
        if (!r->obj_buf && !(r->obj_buf = malloc(TAR_BLOCK_SIZE))) {
            err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: %s", path,
                    sluice_strerror(SLUICE_ERR_NOMEM));
            return fail(r, SLUICE_ERR_NOMEM);
        }
        int rc =
            pipe_roots_open_object(roots, PIPE_SRC_TAR, path, false, &cancel, &r->obj, err, errlen);
        if (rc < 0)
            return fail(r, rc);
        path = obj_url(r->obj); /* messages name the URL without its pin */
    } else {
        fd = pipe_roots_open_file(roots, PIPE_SRC_TAR, path, err, errlen);
        if (fd < 0)
            return fail(r, fd);
        r->fd = fd;
    }
    r->path = path;
    r->a = ar.read_new();
    if (!r->a) {
        err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: %s", path, sluice_strerror(SLUICE_ERR_NOMEM));
        return fail(r, SLUICE_ERR_NOMEM);
    }
    /* Plain tar (ustar, pax, GNU), optionally gzip-compressed; an empty file is an empty shard.
     * Nothing that would run an external program. */
    if (ar.read_support_format_tar(r->a) != ARCHIVE_OK ||
        ar.read_support_format_empty(r->a) != ARCHIVE_OK ||
        ar.read_support_filter_gzip(r->a) != ARCHIVE_OK ||
        (r->obj ? ar.read_open(r->a, r, NULL, obj_block, NULL)
                : ar.read_open_fd(r->a, fd, TAR_BLOCK_SIZE)) != ARCHIVE_OK) {
        int code = archive_code(r->a);
        err_set(err, errlen, code, "%s: %s", path, archive_msg(r->a));
        return fail(r, code);
    }
    r->any_entry = false;
    r->entry = NULL;
    r->pending = NONE;
    pipe_wds_reset(&r->group);
    return 1;
}

static int reserve(struct component *c, size_t cap)
{
    if (cap <= c->cap)
        return 0;
    size_t ncap = c->cap ? c->cap : 4096;
    while (ncap < cap)
        ncap *= 2;
    uint8_t *p = realloc(c->data, ncap);
    if (!p)
        return SLUICE_ERR_NOMEM;
    c->data = p;
    c->cap = ncap;
    return 0;
}

/* Skips the current member's data. */
static int skip_member(struct tar_reader *r)
{
    return ar.read_data_skip(r->a) < ARCHIVE_WARN ? fail_member(r) : 0;
}

/* Reads the current member's data into component k. */
static int read_member(struct tar_reader *r, int k)
{
    struct component *c = &r->comps[k];
    char *err = r->base.ctx->err;
    size_t errlen = sizeof r->base.ctx->err;
    c->len = 0;
    int64_t size = ar.entry_size(r->entry);
    if (size < 0 || (uint64_t)size > MAX_MEMBER) {
        err_set(err, errlen, SLUICE_ERR_TOO_LARGE,
                "%s: offset %" PRIu64 ": member %s: size %" PRId64 " over limit", r->path,
                r->entry_at, entry_name(r->entry), size);
        return fail(r, SLUICE_ERR_TOO_LARGE);
    }
    int rc = reserve(c, (size_t)size < FIRST_RESERVE ? (size_t)size + 1 : FIRST_RESERVE);
    for (;;) {
        if (rc == 0 && c->len == c->cap)
            rc = c->len > MAX_MEMBER ? SLUICE_ERR_TOO_LARGE : reserve(c, c->cap * 2);
        if (rc < 0) {
            err_set(err, errlen, rc, "%s: offset %" PRIu64 ": member %s: %s", r->path, r->entry_at,
                    entry_name(r->entry), sluice_strerror(rc));
            return fail(r, rc);
        }
        la_ssize_t n = ar.read_data(r->a, c->data + c->len, c->cap - c->len);
        if (n < 0)
            return fail_member(r);
        if (n == 0)
            return 0;
        c->len += (size_t)n;
    }
}

/* Copies the collected members into out. */
static int emit(struct tar_reader *r, struct sluice_element *out)
{
    int rc = pipe_elem_resize(out, r->nexts);
    for (size_t i = 0; rc == 0 && i < r->nexts; i++)
        rc = pipe_tensor_set_bytes(&out->t[i], r->comps[i].data, r->comps[i].len);
    if (rc < 0) {
        err_set(r->base.ctx->err, sizeof r->base.ctx->err, rc, "%s: %s", r->path ? r->path : "tar",
                sluice_strerror(rc));
        return fail(r, rc);
    }
    return 1;
}

static int tar_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct tar_reader *r = (struct tar_reader *)it;
    char *err = r->base.ctx->err;
    size_t errlen = sizeof r->base.ctx->err;
    if (r->status <= 0)
        return r->status;
    if (r->pending != NONE) {
        int k = r->pending;
        r->pending = NONE;
        int rc = k == SKIP ? skip_member(r) : read_member(r, k);
        if (rc < 0)
            return rc;
    }
    for (;;) {
        /* Members skipped (another key's, a wanted extension missing) yield no element: a long
         * run of them must still see the chain's cancellation. */
        if (pipe_cancelled(r->base.ctx)) {
            err_set(err, errlen, SLUICE_ERR_CANCELLED, "cancelled");
            return fail(r, SLUICE_ERR_CANCELLED);
        }
        if (!r->a) {
            int rc = open_next(r);
            if (rc == 0)
                return r->status = 0;
            if (rc < 0)
                return rc;
        }
        uint64_t at = (uint64_t)ar.filter_bytes(r->a, 0);
        struct archive_entry *e = NULL;
        int arc = ar.read_next_header(r->a, &e);
        const char *name = NULL;
        r->entry = NULL;
        if (arc == ARCHIVE_EOF) {
            if (r->any_entry && (uint64_t)ar.filter_bytes(r->a, 0) == at) {
                err_set(err, errlen, SLUICE_ERR_TRUNCATED,
                        "%s: offset %" PRIu64 ": truncated tar archive (no end-of-archive blocks)",
                        r->path, at);
                return fail(r, SLUICE_ERR_TRUNCATED);
            }
        } else if (arc == ARCHIVE_OK || arc == ARCHIVE_WARN) {
            /* A warning (a name not representable in the locale, say) leaves a usable entry. */
            r->any_entry = true;
            r->entry = e;
            r->entry_at = at;
            if (ar.entry_filetype(e) != AE_IFREG || ar.entry_hardlink(e)) {
                int rc = skip_member(r);
                if (rc < 0)
                    return rc;
                continue;
            }
            name = entry_name(e);
            if (!name) {
                err_set(err, errlen, SLUICE_ERR_CORRUPT,
                        "%s: offset %" PRIu64 ": a member without a name", r->path, at);
                return fail(r, SLUICE_ERR_CORRUPT);
            }
        } else {
            /* Including ARCHIVE_RETRY for a damaged header: never skip damage silently. */
            int code = archive_code(r->a);
            err_set(err, errlen, code, "%s: offset %" PRIu64 ": %s", r->path, at,
                    archive_msg(r->a));
            return fail(r, code);
        }
        struct pipe_wds_step step;
        char why[sizeof r->base.ctx->err];
        int rc = pipe_wds_feed(&r->group, name, &step, why, sizeof why);
        if (rc < 0) {
            err_set(err, errlen, rc, "%s: %s", r->path, why);
            return fail(r, rc);
        }
        if (!name)
            close_shard(r);
        if (step.done) {
            /* The sample goes out now, even if this member turns out damaged: its data waits
             * for the next call. */
            if (name)
                r->pending = step.take >= 0 ? step.take : SKIP;
            return emit(r, out);
        }
        if (!name)
            continue;
        rc = step.take >= 0 ? read_member(r, step.take) : skip_member(r);
        if (rc < 0)
            return rc;
    }
}

static void tar_destroy(struct pipe_iter *it)
{
    struct tar_reader *r = (struct tar_reader *)it;
    if (!r)
        return;
    close_shard(r);
    pipe_wds_release(&r->group);
    if (r->comps)
        for (size_t i = 0; i < r->nexts; i++)
            free(r->comps[i].data);
    free(r->comps);
    free(r->obj_buf);
    pipe_paths_free(r->paths, r->npaths);
    pipe_paths_free(r->exts, r->nexts);
    free(r);
}

static const struct pipe_iter_ops tar_ops = {.next = tar_next, .destroy = tar_destroy};

int pipe_tar_open(char *const *paths, size_t npaths, char *const *exts, size_t nexts,
                  struct pipe_ctx *ctx, struct pipe_iter **out)
{
    if (nexts == 0 || nexts > PIPE_MAX_COMPONENTS)
        return SLUICE_ERR_INVALID;
    struct tar_reader *r = calloc(1, sizeof *r);
    if (!r)
        return SLUICE_ERR_NOMEM;
    r->base.ops = &tar_ops;
    r->base.ctx = ctx;
    r->fd = -1;
    r->pending = NONE;
    r->status = 1;
    if (pipe_paths_copy(paths, npaths, &r->paths, &r->npaths) < 0 ||
        pipe_paths_copy(exts, nexts, &r->exts, &r->nexts) < 0 ||
        !(r->comps = calloc(nexts, sizeof *r->comps))) {
        tar_destroy(&r->base);
        return SLUICE_ERR_NOMEM;
    }
    pipe_wds_init(&r->group, r->exts, r->nexts);
    *out = &r->base;
    return 0;
}
