/* The snapshot("DIR") source: chunk files read one after the other with snap_reader.
 *
 * Happy path: open the next chunk through the data roots, hand out its elements, close it at its
 * footer, go on. A chunk not there yet is waited for while the save may still write it (see
 * snapsrc.h); every other failure (damage, a failed save, a missing chunk of a complete snapshot,
 * an element over the worker's limit) is reported once in the context's message and then returned
 * by every later next(). */
#include "snapsrc.h"

#include "common/error.h"
#include "registry.h"
#include "roots.h"
#include "snapshot.h"
#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How long one sleep of a wait lasts at most, so a cancel is seen promptly. */
#define POLL_SLICE_MS 10u

int pipe_snapshot_paths(const char *dir, char ***paths, size_t *npaths, char *err, size_t errlen)
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
    *paths = out;
    *npaths = (size_t)n;
    return 0;
}

struct snap_iter {
    struct pipe_iter base;
    char *dir;
    char **paths;
    size_t npaths;
    size_t next_path; /* the chunk to open after the current one */
    struct snap_reader *r;
    int state; /* 0 reading, 1 at the end, < 0 failed (message in ctx->err) */
};

static int iter_fail(struct snap_iter *s, int code)
{
    snap_reader_close(s->r);
    s->r = NULL;
    s->state = code;
    return code;
}

static bool exists_in(const char *dir, const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

/* The first line of DIR/FAILED into why, or "" when it cannot be read. */
static void failed_reason(const char *dir, char *why, size_t len)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/" SNAP_FAILED_FILE, dir);
    why[0] = '\0';
    FILE *f = fopen(path, "rbe");
    if (!f)
        return;
    if (fgets(why, (int)len, f))
        why[strcspn(why, "\r\n")] = '\0';
    else
        why[0] = '\0';
    fclose(f);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Opens chunk path into s->r, waiting while the save may still write it. Returns 0 or a negative
 * code with the message in ctx->err. */
static int open_chunk(struct snap_iter *s, const char *path)
{
    struct pipe_ctx *ctx = s->base.ctx;
    const struct pipe_roots *roots = pipe_registry_roots(ctx->reg);
    unsigned delay = PIPE_SNAPSHOT_POLL_FIRST_MS;
    bool complete = false;
    for (;;) {
        int fd = pipe_roots_open_file(roots, PIPE_SRC_SNAPSHOT, path, ctx->err, sizeof ctx->err);
        if (fd >= 0) {
            FILE *f = fdopen(fd, "rb");
            if (!f) {
                int e = errno;
                close(fd);
                return err_set(ctx->err, sizeof ctx->err, -e, "snapshot chunk %s: %s", path,
                               strerror(e));
            }
            setvbuf(f, NULL, _IOFBF, 256u * 1024u);
            return snap_reader_open_file(f, path, &s->r, ctx->err, sizeof ctx->err);
        }
        if (fd != -ENOENT)
            return fd;
        /* The manifest is written after every chunk is in place, so a chunk missing once the
         * manifest was seen (and looked for again after that) is missing for good. */
        if (complete)
            return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_NOT_FOUND,
                           "snapshot chunk %s: not found (the snapshot is complete without it)",
                           path);
        if (exists_in(s->dir, SNAP_FAILED_FILE)) {
            char why[SLUICE_ERRMSG_SIZE];
            failed_reason(s->dir, why, sizeof why);
            return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_TASK_FAILED,
                           "snapshot %s: the save failed: %s", s->dir,
                           why[0] ? why : "no reason given");
        }
        if (exists_in(s->dir, SNAP_MANIFEST_FILE)) {
            complete = true;
            continue;
        }
        if (!exists_in(s->dir, SNAP_META_FILE))
            return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_NOT_FOUND,
                           "snapshot %s: not a snapshot (no " SNAP_META_FILE ")", s->dir);
        /* The save is still running: wait, and give up only when the chain is cancelled. */
        for (unsigned slept = 0; slept < delay; slept += POLL_SLICE_MS) {
            if (pipe_cancelled(ctx))
                return err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_CANCELLED,
                               "snapshot chunk %s: cancelled while waiting for the save to write "
                               "it",
                               path);
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
            int rc = open_chunk(s, s->paths[s->next_path]);
            if (rc)
                return iter_fail(s, rc);
            s->next_path++;
        }
        int rc = snap_reader_next(s->r, out, ctx->err, sizeof ctx->err);
        if (rc < 0)
            return iter_fail(s, rc);
        if (rc == 0) {
            snap_reader_close(s->r);
            s->r = NULL;
            continue;
        }
        const char *path = s->paths[s->next_path - 1];
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
    snap_reader_close(s->r);
    pipe_paths_free(s->paths, s->npaths);
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
    if (!s->dir || !s->paths) {
        free(s->dir);
        free(s->paths);
        free(s);
        return SLUICE_ERR_NOMEM;
    }
    for (size_t i = 0; i < npaths; i++) {
        s->paths[i] = strdup(paths[i]);
        if (!s->paths[i]) {
            s->npaths = i;
            snap_iter_destroy(&s->base);
            return SLUICE_ERR_NOMEM;
        }
    }
    s->npaths = npaths;
    *out = &s->base;
    return 0;
}
