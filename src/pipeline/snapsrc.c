/* The snapshot("DIR") source: chunk files read one after the other with snap_reader.
 *
 * Happy path: open the next chunk through the data roots, hand out its elements, close it at its
 * footer, go on. A chunk not there yet is waited for while the save may still write it (see
 * snapsrc.h); every other failure (damage, a failed save, a missing chunk of a complete snapshot,
 * an element over the worker's limit) is reported once in the context's message and then returned
 * by every later next(). */
#include "snapsrc.h"

#include "common/error.h"
#include "objstore.h"
#include "paths.h"
#include "registry.h"
#include "roots.h"
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/types.h>
#include <unistd.h>

/* How long one sleep of a wait lasts at most, so a cancel is seen promptly. */
#define POLL_SLICE_MS 10u

/* The chunks of an s3:// snapshot in paths[0, n) (their URLs, snap_chunk_path) replaced by
 * their URLs pinned to the size and ETag of one listing of DIR/chunks/ (objurl.h), so that a
 * chunk replaced after it was listed is an error naming it. A chunk not listed (not written yet,
 * or missing) keeps its plain URL and is looked for when reading reaches it. */
static int pin_chunks(const char *dir, char **paths, size_t n, char *err, size_t errlen)
{
    /* Chunk 0's URL, its number replaced by a '*'. */
    char pattern[4096];
    snap_chunk_path(dir, 0, pattern, sizeof pattern);
    size_t plen = strlen(pattern);
    if (plen + 1 >= sizeof pattern)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "snapshot %s: URL too long", dir);
    pattern[plen - 12] = '*';
    pattern[plen - 11] = '\0';
    char **listed = NULL;
    size_t nlisted = 0, cap = 0;
    char why[SLUICE_ERRMSG_SIZE];
    int rc = obj_glob(pattern, &listed, &nlisted, &cap, why, sizeof why);
    if (rc < 0) {
        pipe_paths_free(listed, nlisted);
        return err_set(err, errlen, rc, "snapshot %s: listing its chunks: %s", dir, why);
    }
    size_t base = strlen(pattern) - 1; /* where the chunk's number begins */
    for (size_t k = 0; k < nlisted; k++) {
        struct obj_pin pin;
        obj_pin_parse(listed[k], &pin);
        if (!pin.pinned || pin.url_len != base + 12)
            continue;
        uint64_t index = 0;
        bool digits = true;
        for (size_t i = base; i < pin.url_len; i++) {
            char c = listed[k][i];
            digits = digits && c >= '0' && c <= '9';
            index = index * 10 + (uint64_t)(c - '0');
        }
        if (!digits || index >= n || strncmp(paths[index], listed[k], pin.url_len) != 0 ||
            paths[index][pin.url_len] != '\0')
            continue;
        free(paths[index]);
        paths[index] = listed[k];
        listed[k] = NULL;
    }
    for (size_t k = 0; k < nlisted; k++)
        free(listed[k]);
    free(listed);
    return 0;
}

int pipe_snapshot_paths(const char *dir, bool list, char ***paths, size_t *npaths, char *err,
                        size_t errlen)
{
    *paths = NULL;
    *npaths = 0;
    struct snap_meta m;
    char why[SLUICE_ERRMSG_SIZE];
    int rc = snap_meta_read(dir, &m, why, sizeof why);
    if (rc)
        return err_set(err, errlen, rc, "snapshot %s", why);
    uint64_t n = m.chunks;
    snap_meta_release(&m);
    if (n > SIZE_MAX / sizeof(char *) - 1)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "snapshot %s: %" PRIu64 " chunks", dir,
                       n);
    char **out = calloc(n ? (size_t)n : 1, sizeof *out);
    if (!out)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "snapshot %s: out of memory", dir);
    char path[4096];
    for (uint64_t i = 0; i < n; i++) {
        snap_chunk_path(dir, i, path, sizeof path);
        if (strlen(path) + 1 >= sizeof path) {
            pipe_paths_free(out, (size_t)i);
            return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "snapshot %s: path too long", dir);
        }
        out[i] = strdup(path);
        if (!out[i]) {
            pipe_paths_free(out, (size_t)i);
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "snapshot %s: out of memory", dir);
        }
    }
    if (list && obj_url_scheme(dir) == OBJ_S3) {
        rc = pin_chunks(dir, out, (size_t)n, err, errlen);
        if (rc < 0) {
            pipe_paths_free(out, (size_t)n);
            return rc;
        }
    }
    *paths = out;
    *npaths = (size_t)n;
    return 0;
}

struct snap_iter {
    struct pipe_iter base;
    char *dir;
    char **paths;
    char **names; /* the paths without a pin (objurl.h), for messages */
    size_t npaths;
    size_t next_path; /* the chunk to open after the current one */
    struct snap_reader *r;
    struct obj_fail fail; /* of the chunk object being read */
    int state;            /* 0 reading, 1 at the end, < 0 failed (message in ctx->err) */
};

static void close_chunk(struct snap_iter *s)
{
    snap_reader_close(s->r);
    s->r = NULL;
}

static int iter_fail(struct snap_iter *s, int code)
{
    close_chunk(s);
    s->state = code;
    return code;
}

/* Whether DIR/NAME exists: 1, 0, or a negative code with the message in ctx->err (an object
 * that cannot be asked about). */
static int exists_in(struct snap_iter *s, const char *name)
{
    if (obj_is_url(s->dir)) {
        char *text = NULL;
        size_t len = 0;
        char why[SLUICE_ERRMSG_SIZE];
        int rc = snap_read_small(s->dir, name, &text, &len, why, sizeof why);
        free(text);
        if (rc == -ENOENT)
            return 0;
        if (rc < 0)
            return err_set(s->base.ctx->err, sizeof s->base.ctx->err, rc, "snapshot %s: %s", s->dir,
                           why);
        return 1;
    }
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

/* The first line of DIR/FAILED into why, or "" when it cannot be read. */
static void failed_reason(const char *dir, char *why, size_t len)
{
    char *text = NULL;
    size_t n = 0;
    char err[SLUICE_ERRMSG_SIZE];
    why[0] = '\0';
    if (snap_read_small(dir, SNAP_FAILED_FILE, &text, &n, err, sizeof err) == 0)
        snprintf(why, len, "%.*s", (int)strcspn(text, "\r\n"), text);
    free(text);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Whether the chain reading an object was cancelled (objstore.h's struct obj_cancel). */
static bool ctx_cancelled(const void *ctx)
{
    return pipe_cancelled(ctx);
}

/* A chunk object's read failed inside the stream: its reason, with the URL and the offset, in
 * ctx->err instead of the stream's EIO. Returns the code to fail with. */
static int object_failure(struct snap_iter *s, const char *name, int rc)
{
    struct pipe_ctx *ctx = s->base.ctx;
    if (s->fail.code == 0)
        return rc;
    return err_set(ctx->err, sizeof ctx->err, s->fail.code,
                   "snapshot chunk %s: offset %" PRIu64 ": %s", name, s->fail.at, s->fail.why);
}

/* Opens chunk path (named name) into s->r once: 0, 1 when it is not there (yet), or a negative
 * code with the message in ctx->err. */
static int try_open(struct snap_iter *s, const char *path, const char *name)
{
    struct pipe_ctx *ctx = s->base.ctx;
    const struct pipe_roots *roots = pipe_registry_roots(ctx->reg);
    if (obj_is_url(path)) {
        struct obj_cancel cancel = {ctx_cancelled, ctx};
        struct obj_reader *r = NULL;
        int rc = pipe_roots_open_object(roots, PIPE_SRC_SNAPSHOT, path, false, &cancel, &r,
                                        ctx->err, sizeof ctx->err);
        if (rc == SLUICE_ERR_NOT_FOUND)
            return 1;
        if (rc < 0)
            return rc;
        FILE *f = obj_fopen(r, &s->fail);
        if (!f) {
            obj_close(r);
            return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_NOMEM,
                           "snapshot chunk %s: out of memory", name);
        }
        setvbuf(f, NULL, _IOFBF, 256u * 1024u);
        rc = snap_reader_open_file(f, name, &s->r, ctx->err, sizeof ctx->err);
        return rc < 0 ? object_failure(s, name, rc) : 0;
    }
    int fd = pipe_roots_open_file(roots, PIPE_SRC_SNAPSHOT, path, ctx->err, sizeof ctx->err);
    if (fd == -ENOENT)
        return 1;
    if (fd < 0)
        return fd;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return err_set(ctx->err, sizeof ctx->err, -e, "snapshot chunk %s: %s", path, strerror(e));
    }
    setvbuf(f, NULL, _IOFBF, 256u * 1024u);
    return snap_reader_open_file(f, path, &s->r, ctx->err, sizeof ctx->err);
}

/* Opens chunk path into s->r, waiting while the save may still write it. Returns 0 or a negative
 * code with the message in ctx->err. */
static int open_chunk(struct snap_iter *s, const char *path, const char *name)
{
    struct pipe_ctx *ctx = s->base.ctx;
    unsigned delay = PIPE_SNAPSHOT_POLL_FIRST_MS;
    bool complete = false;
    for (;;) {
        int rc = try_open(s, path, name);
        if (rc <= 0)
            return rc;
        /* The manifest is written after every chunk is in place, so a chunk missing once the
         * manifest was seen (and looked for again after that) is missing for good. */
        if (complete)
            return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_NOT_FOUND,
                           "snapshot chunk %s: not found (the snapshot is complete without it)",
                           name);
        if ((rc = exists_in(s, SNAP_FAILED_FILE)) != 0) {
            if (rc < 0)
                return rc;
            char why[SLUICE_ERRMSG_SIZE];
            failed_reason(s->dir, why, sizeof why);
            return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_TASK_FAILED,
                           "snapshot %s: the save failed: %s", s->dir,
                           why[0] ? why : "no reason given");
        }
        if ((rc = exists_in(s, SNAP_MANIFEST_FILE)) != 0) {
            if (rc < 0)
                return rc;
            complete = true;
            continue;
        }
        if ((rc = exists_in(s, SNAP_META_FILE)) <= 0) {
            if (rc < 0)
                return rc;
            return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_NOT_FOUND,
                           "snapshot %s: not a snapshot (no " SNAP_META_FILE ")", s->dir);
        }
        /* The save is still running: wait, and give up only when the chain is cancelled. */
        for (unsigned slept = 0; slept < delay; slept += POLL_SLICE_MS) {
            if (pipe_cancelled(ctx))
                return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_CANCELLED,
                               "snapshot chunk %s: cancelled while waiting for the save to "
                               "write it",
                               name);
            sleep_ms(delay - slept < POLL_SLICE_MS ? delay - slept : POLL_SLICE_MS);
        }
        delay = delay * 2 > PIPE_SNAPSHOT_POLL_MAX_MS ? PIPE_SNAPSHOT_POLL_MAX_MS : delay * 2;
    }
}

static int snap_iter_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct snap_iter *s = (struct snap_iter *)it;
    struct pipe_ctx *ctx = it->ctx;
    if (s->state)
        return s->state > 0 ? 0 : s->state;
    for (;;) {
        if (!s->r) {
            if (s->next_path == s->npaths) {
                s->state = 1;
                return 0;
            }
            int rc = open_chunk(s, s->paths[s->next_path], s->names[s->next_path]);
            if (rc)
                return iter_fail(s, rc);
            s->next_path++;
        }
        int rc = snap_reader_next(s->r, out, ctx->err, sizeof ctx->err);
        if (rc < 0)
            return iter_fail(s, object_failure(s, s->names[s->next_path - 1], rc));
        if (rc == 0) {
            close_chunk(s);
            continue;
        }
        const char *path = s->names[s->next_path - 1];
        uint64_t at = snap_reader_offset(s->r);
        ctx->origin.file = path;
        ctx->origin.offset = at;
        ctx->origin.owner = s;
        uint64_t size = pipe_elem_size(out);
        if (pipe_over_limit(ctx, size)) {
            char what[PATH_MAX + 64];
            snprintf(what, sizeof what, "snapshot chunk %s: offset %" PRIu64 ": ", path, at);
            return iter_fail(s, pipe_limit_fail(ctx, what, size, false));
        }
        return 1;
    }
}

static void snap_iter_destroy(struct pipe_iter *it)
{
    struct snap_iter *s = (struct snap_iter *)it;
    if (it->ctx && it->ctx->origin.owner == s)
        memset(&it->ctx->origin, 0, sizeof it->ctx->origin);
    close_chunk(s);
    pipe_paths_free(s->paths, s->npaths);
    pipe_paths_free(s->names, s->npaths);
    free(s->dir);
    free(s);
}

static const struct pipe_iter_ops snap_iter_ops = {snap_iter_next, snap_iter_destroy};

int pipe_snapshot_open(const char *dir, char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                       struct pipe_iter **out)
{
    *out = NULL;
    struct snap_iter *s = calloc(1, sizeof *s);
    if (!s)
        return SLUICE_ERR_NOMEM;
    s->base.ops = &snap_iter_ops;
    s->base.ctx = ctx;
    s->dir = strdup(dir);
    s->paths = calloc(npaths ? npaths : 1, sizeof *s->paths);
    s->names = calloc(npaths ? npaths : 1, sizeof *s->names);
    if (!s->dir || !s->paths || !s->names) {
        free(s->dir);
        free(s->paths);
        free(s->names);
        free(s);
        return SLUICE_ERR_NOMEM;
    }
    for (size_t i = 0; i < npaths; i++) {
        struct obj_pin pin;
        obj_pin_parse(paths[i], &pin);
        s->paths[i] = strdup(paths[i]);
        s->names[i] = strndup(paths[i], pin.url_len);
        if (!s->paths[i] || !s->names[i]) {
            s->npaths = i + 1; /* a NULL one is freed as such */
            snap_iter_destroy(&s->base);
            return SLUICE_ERR_NOMEM;
        }
    }
    s->npaths = npaths;
    *out = &s->base;
    return 0;
}
