/* global_shuffle over file sources: a file's records loaded, then yielded in permuted order. */
#include "gshuffle.h"

#include "common/error.h"
#include "common/perm.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct gfile_iter {
    struct pipe_iter base;
    struct pipe_gshuffle_file *files; /* owned, paths too */
    size_t nfiles, next_file;
    int64_t seed;
    uint64_t max_bytes;
    pipe_file_open_cb open;
    void *arg;
    struct sluice_element *recs; /* the current file's records; [pos, n) not yet yielded */
    size_t n, cap;
    uint64_t pos;
    struct perm perm;
    int rc; /* sticky */
};

/* What e holds in memory. */
static uint64_t held(const struct sluice_element *e)
{
    uint64_t b = sizeof *e + e->cap * sizeof(struct pipe_tensor);
    for (size_t i = 0; i < e->cap; i++)
        b += e->t[i].cap + e->t[i].offs_cap * sizeof(uint64_t);
    return b;
}

static void drop_records(struct gfile_iter *g)
{
    for (size_t i = 0; i < g->n; i++)
        pipe_elem_release(&g->recs[i]);
    g->n = 0;
    g->pos = 0;
}

static int fail(struct gfile_iter *g, int rc)
{
    drop_records(g);
    g->rc = rc;
    return rc;
}

/* Reads the next file's records and prepares their permutation. */
static int load(struct gfile_iter *g)
{
    struct pipe_ctx *ctx = g->base.ctx;
    const struct pipe_gshuffle_file *f = &g->files[g->next_file++];
    char *path = (char *)f->path;
    struct pipe_iter *in = NULL;
    int rc = g->open(g->arg, &path, 1, ctx, &in);
    if (rc)
        return err_set(ctx->err, sizeof ctx->err, rc, "%s: %s", f->path, sluice_strerror(rc));
    uint64_t bytes = 0;
    for (;;) {
        if (g->n == g->cap) {
            size_t ncap = g->cap ? g->cap * 2 : 256;
            struct sluice_element *r = realloc(g->recs, ncap * sizeof *r);
            if (!r) {
                rc = err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_NOMEM, "global_shuffle: %s",
                             sluice_strerror(SLUICE_ERR_NOMEM));
                break;
            }
            g->recs = r;
            g->cap = ncap;
        }
        struct sluice_element *e = &g->recs[g->n];
        pipe_elem_init(e);
        rc = pipe_next(in, e);
        if (rc <= 0) {
            pipe_elem_release(e);
            break;
        }
        g->n++;
        bytes += held(e);
        if (bytes > g->max_bytes) {
            bool mib = g->max_bytes >= (1u << 20);
            rc = err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_TOO_LARGE,
                         "global_shuffle: %s holds more than %llu %s of records, the most one "
                         "file may hold to be shuffled in memory; cut it into smaller files",
                         f->path, (unsigned long long)(mib ? g->max_bytes >> 20 : g->max_bytes),
                         mib ? "MiB" : "bytes");
            break;
        }
        if ((g->n & 1023) == 0 && pipe_cancelled(ctx)) {
            rc = err_set(ctx->err, sizeof ctx->err, SLUICE_ERR_CANCELLED, "cancelled");
            break;
        }
    }
    in->ops->destroy(in);
    if (rc < 0)
        return rc;
    perm_init(&g->perm, perm_key(g->seed, f->pass, f->index + 1), g->n);
    return 0;
}

static int gfile_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct gfile_iter *g = (struct gfile_iter *)it;
    if (g->rc)
        return g->rc;
    while (g->pos == g->n) {
        drop_records(g);
        if (g->next_file == g->nfiles)
            return 0;
        int rc = load(g);
        if (rc < 0)
            return fail(g, rc);
    }
    /* The record moves out; the slot takes the caller's old buffers, freed with the file. */
    pipe_elem_swap(out, &g->recs[perm_apply(&g->perm, g->pos++)]);
    return 1;
}

static void gfile_destroy(struct pipe_iter *it)
{
    struct gfile_iter *g = (struct gfile_iter *)it;
    drop_records(g);
    free(g->recs);
    for (size_t i = 0; i < g->nfiles; i++)
        free((char *)g->files[i].path);
    free(g->files);
    free(g);
}

static const struct pipe_iter_ops gfile_ops = {gfile_next, gfile_destroy};

int pipe_gshuffle_files_open(const struct pipe_gshuffle_file *files, size_t nfiles, int64_t seed,
                             uint64_t max_bytes, pipe_file_open_cb open, void *arg,
                             struct pipe_ctx *ctx, struct pipe_iter **out)
{
    struct gfile_iter *g = calloc(1, sizeof *g);
    if (!g)
        return SLUICE_ERR_NOMEM;
    g->files = calloc(nfiles ? nfiles : 1, sizeof *g->files);
    if (!g->files) {
        free(g);
        return SLUICE_ERR_NOMEM;
    }
    for (; g->nfiles < nfiles; g->nfiles++) {
        g->files[g->nfiles] = files[g->nfiles];
        g->files[g->nfiles].path = strdup(files[g->nfiles].path);
        if (!g->files[g->nfiles].path) {
            gfile_destroy(&g->base);
            return SLUICE_ERR_NOMEM;
        }
    }
    g->base.ops = &gfile_ops;
    g->base.ctx = ctx;
    g->seed = seed;
    g->max_bytes = max_bytes;
    g->open = open;
    g->arg = arg;
    *out = &g->base;
    return 0;
}
