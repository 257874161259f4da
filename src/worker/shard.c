/* Static sharding rewrites (see shard.h). Each works on a deep copy of the spec; the copy's
 * arrays and strings are malloc'd like every spec's, so they are replaced with malloc/free. */
#include "shard.h"

#include "common/error.h"
#include "common/mode.h"
#include "pipeline/objurl.h"

#include <stdlib.h>
#include <string.h>

/* A source whose globs a list of files can replace. A snapshot reads files too, but names its
 * directory, so static sharding shards its data. */
static bool is_file_source(const struct pipe_spec *spec)
{
    return pipe_source_globs(spec->source.kind);
}

bool shard_needs_files(const struct pipe_spec *spec, enum sluice_mode mode)
{
    return is_file_source(spec) && (mode == SLUICE_SHARD_FILE || mode == SLUICE_SHARD_FILE_OR_DATA);
}

char *shard_glob_escape(const char *path)
{
    size_t n = 0;
    for (const char *s = path; *s; s++)
        n += strchr("*?[\\", *s) ? 2 : 1;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    char *d = out;
    for (const char *s = path; *s; s++) {
        if (strchr("*?[\\", *s))
            *d++ = '\\';
        *d++ = *s;
    }
    *d = '\0';
    return out;
}

/* Replaces the source's globs by the files whose index is worker_index modulo num_workers. */
static int keep_files(struct pipe_spec *c, const struct shard_params *p, char *const *files,
                      size_t nfiles)
{
    size_t n = 0;
    for (size_t i = p->worker_index; i < nfiles; i += p->num_workers)
        n++;
    char **globs = calloc(n, sizeof *globs);
    if (!globs)
        return SLUICE_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = p->worker_index; i < nfiles; i += p->num_workers) {
        /* A URL is never a pattern here: pinned (listed) or an http(s) URL, taken as written. */
        globs[k] = obj_is_url(files[i]) ? strdup(files[i]) : shard_glob_escape(files[i]);
        if (!globs[k]) {
            for (size_t j = 0; j < k; j++)
                free(globs[j]);
            free(globs);
            return SLUICE_ERR_NOMEM;
        }
        k++;
    }
    for (size_t i = 0; i < c->source.nglobs; i++)
        free(c->source.globs[i]);
    free(c->source.globs);
    c->source.globs = globs;
    c->source.nglobs = n;
    return 0;
}

static int append_shard(struct pipe_spec *c, const struct shard_params *p)
{
    struct pipe_op *ops = realloc(c->ops, (c->nops + 1) * sizeof *ops);
    if (!ops)
        return SLUICE_ERR_NOMEM;
    c->ops = ops;
    struct pipe_op *op = &ops[c->nops++];
    memset(op, 0, sizeof *op);
    op->kind = PIPE_OP_SHARD;
    op->n = p->num_workers;
    op->index = p->worker_index;
    return 0;
}

static int fill_hints(struct pipe_spec *c, const struct shard_params *p, char *err, size_t errlen)
{
    /* The inputs of a mix are pipelines of their own, with hints of their own. */
    for (size_t i = 0; i < c->source.ninputs; i++) {
        int rc = fill_hints(c->source.inputs[i], p, err, errlen);
        if (rc < 0)
            return rc;
    }
    for (size_t i = 0; i < c->nops; i++) {
        struct pipe_op *op = &c->ops[i];
        if (op->kind != PIPE_OP_SHARD || !(op->n_is_hint || op->index_is_hint))
            continue;
        if (op->n_is_hint)
            op->n = p->num_workers;
        if (op->index_is_hint)
            op->index = p->worker_index;
        op->n_is_hint = op->index_is_hint = false;
        if (op->index >= op->n)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "column %d: hint sharding gives shard(%lld, %lld): the index must be "
                           "below the count",
                           op->column, (long long)op->n, (long long)op->index);
    }
    return 0;
}

int shard_rewrite(const struct pipe_spec *spec, const struct shard_params *p, char *const *files,
                  size_t nfiles, struct pipe_spec **out, char *err, size_t errlen)
{
    *out = NULL;
    enum sluice_mode mode = p->mode;
    if (mode_static(mode) && (p->num_workers == 0 || p->worker_index >= p->num_workers))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "static sharding needs a worker index below the number of workers, got "
                       "index %u of %u workers",
                       p->worker_index, p->num_workers);
    if (mode == SLUICE_SHARD_FILE_OR_DATA)
        mode = is_file_source(spec) && nfiles >= p->num_workers ? SLUICE_SHARD_FILE
                                                                : SLUICE_SHARD_DATA;
    if (mode == SLUICE_SHARD_FILE) {
        if (!is_file_source(spec))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "file sharding needs a tfrecord(), lines() or tar() source; use data "
                           "or file_or_data sharding");
        if (nfiles < p->num_workers)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "file sharding needs at least one file per worker, but there are %zu "
                           "files for %u workers; use data or file_or_data sharding",
                           nfiles, p->num_workers);
    }

    struct pipe_spec *c;
    int rc = pipe_spec_clone(spec, &c);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    switch (mode) {
    case SLUICE_SHARD_FILE:
        rc = keep_files(c, p, files, nfiles);
        break;
    case SLUICE_SHARD_DATA:
        rc = append_shard(c, p);
        break;
    case SLUICE_SHARD_HINT:
        rc = fill_hints(c, p, err, errlen);
        if (rc < 0) {
            pipe_spec_free(c);
            return rc;
        }
        break;
    default:
        break;
    }
    if (rc < 0) {
        pipe_spec_free(c);
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    }
    *out = c;
    return 0;
}
