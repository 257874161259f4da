/* Split providers: the source of a pipeline cut into a numbered sequence of splits.
 *
 * Building the plan is arithmetic on (source length, split size, repeat count) except the glob
 * expansion at init, and reading it is split_plan_at()'s, so a split number always names the
 * same split on every machine that built the provider from the same spec and the same file
 * list. */
#include "split.h"

#include "megatron.h"
#include "pqsrc.h"

#include "common/error.h"
#include "objurl.h"
#include "paths.h"
#include "roots.h"
#include "snapsrc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* See split.h: aim at SPLIT_TARGET splits per pass, never fewer than SPLIT_MIN_SIZE nor more
 * than SPLIT_MAX_SIZE elements in one split. */
#define SPLIT_TARGET 256u
#define SPLIT_MIN_SIZE 16u
#define SPLIT_MAX_SIZE 16384u

uint64_t pipe_split_default_size(uint64_t len)
{
    /* A source too small for two splits of the minimum is cut in two halves, so two workers
     * still share it. */
    if (len < 2 * SPLIT_MIN_SIZE)
        return len < 2 ? 1 : len / 2 + len % 2;
    /* Rounding down makes a source of at least SPLIT_TARGET * SPLIT_MIN_SIZE elements give at
     * least SPLIT_TARGET splits (and fewer than twice that until the size cap is reached). */
    uint64_t size = len / SPLIT_TARGET;
    if (size < SPLIT_MIN_SIZE)
        size = SPLIT_MIN_SIZE;
    if (size > SPLIT_MAX_SIZE)
        size = SPLIT_MAX_SIZE;
    return size;
}

void pipe_split_plan_reads(const struct pipe_spec *spec, struct split_plan *plan)
{
    plan->kind = pipe_source_reads_files(spec->source.kind) ? SPLIT_FILES : SPLIT_RANGES;
    plan->seed = 0;
    plan->shuffled = pipe_spec_global_shuffle(spec, &plan->seed);
}

int pipe_split_provider_init(struct pipe_split_provider *p, const struct pipe_spec *spec,
                             uint64_t split_size, char *err, size_t errlen)
{
    return pipe_split_provider_init_confined(p, spec, NULL, split_size, err, errlen);
}

static int source_entries(const struct pipe_source *src, const struct pipe_roots *roots,
                          uint64_t split_size, char ***paths, size_t *npaths, char *err,
                          size_t errlen);

int pipe_split_provider_init_confined(struct pipe_split_provider *p, const struct pipe_spec *spec,
                                      const struct pipe_roots *roots, uint64_t split_size,
                                      char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    int rc = pipe_dist_analyze(spec, &p->dist, err, errlen);
    if (rc < 0)
        return rc;
    struct split_plan *plan = &p->plan;
    pipe_split_plan_reads(spec, plan);
    plan->passes = p->dist.passes;
    switch (spec->source.kind) {
    case PIPE_SRC_RANGE:
    case PIPE_SRC_LIST:
        /* The splits cut the view's positions, not the source's indices (dist.h). */
        plan->source_len = p->dist.len;
        plan->split_size =
            pipe_dist_split_size(&p->dist, split_size, pipe_split_default_size(plan->source_len));
        plan->per_pass = split_per_pass(plan->source_len, plan->split_size);
        return 0;
    case PIPE_SRC_TFRECORD:
    case PIPE_SRC_LINES:
    case PIPE_SRC_TAR:
    case PIPE_SRC_PARQUET:
    case PIPE_SRC_JSONL:
    case PIPE_SRC_SNAPSHOT:
    case PIPE_SRC_MEGATRON: {
        rc = source_entries(&spec->source, roots, split_size, &plan->paths, &plan->npaths, err,
                            errlen);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < plan->npaths; i++) {
            if (strlen(plan->paths[i]) >= SPLIT_PATH_MAX) {
                rc = err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "path too long: %.64s...",
                             plan->paths[i]);
                pipe_split_provider_release(p);
                return rc;
            }
        }
        plan->per_pass = plan->npaths;
        return 0;
    }
    case PIPE_SRC_SAMPLE:
    case PIPE_SRC_CHOOSE:
        break; /* pipe_dist_analyze refuses a mix */
    }
    return err_set(err, errlen, SLUICE_ERR_INVALID, "unknown source kind %d",
                   (int)spec->source.kind);
}

void pipe_split_provider_release(struct pipe_split_provider *p)
{
    split_plan_release(&p->plan);
}

int pipe_source_paths(const struct pipe_source *src, const struct pipe_roots *roots, char ***paths,
                      size_t *npaths, char *err, size_t errlen)
{
    return source_entries(src, roots, 0, paths, npaths, err, errlen);
}

static bool unpinned_s3(const char *glob)
{
    return obj_url_scheme(glob) == OBJ_S3 && !obj_is_pinned(glob);
}

bool pipe_source_needs_pin(const struct pipe_source *src)
{
    if (!pipe_source_globs(src->kind))
        return false;
    for (size_t i = 0; i < src->nglobs; i++)
        if (unpinned_s3(src->globs[i]))
            return true;
    return false;
}

int pipe_source_pin(struct pipe_source *src, char *err, size_t errlen)
{
    if (!pipe_source_needs_pin(src))
        return 0;
    char **out = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < src->nglobs && rc == 0; i++) {
        char **list = NULL, *one = NULL;
        size_t nlist = 0;
        if (unpinned_s3(src->globs[i])) {
            rc = pipe_glob_expand(&src->globs[i], 1, &list, &nlist, err, errlen);
        } else if ((one = strdup(src->globs[i]))) {
            list = &one;
            nlist = 1;
        } else {
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        }
        if (rc == 0 && n + nlist > cap) {
            size_t ncap = (n + nlist) * 2;
            char **grown = realloc(out, ncap * sizeof *grown);
            if (grown) {
                out = grown;
                cap = ncap;
            } else {
                rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
            }
        }
        for (size_t k = 0; k < nlist; k++) {
            if (rc == 0)
                out[n++] = list[k];
            else
                free(list[k]);
        }
        if (list != &one)
            free(list);
    }
    if (rc < 0) {
        pipe_paths_free(out, n);
        return rc;
    }
    pipe_paths_free(src->globs, src->nglobs);
    src->globs = out;
    src->nglobs = n;
    return 0;
}

/* pipe_source_paths(), a megatron() source cut into runs of split_size documents (0: the
 * default size for its document count). */
static int source_entries(const struct pipe_source *src, const struct pipe_roots *roots,
                          uint64_t split_size, char ***paths, size_t *npaths, char *err,
                          size_t errlen)
{
    *paths = NULL;
    *npaths = 0;
    if (src->kind == PIPE_SRC_MEGATRON) {
        if (src->nglobs != 1)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "a megatron source names one prefix, not %zu", src->nglobs);
        /* A URL prefix is pinned to the versions of its objects read here. */
        uint64_t ndocs = 0;
        char *prefix = NULL;
        int rc = pipe_megatron_plan(roots, src->globs[0], &ndocs, &prefix, err, errlen);
        if (rc < 0)
            return rc;
        uint64_t per_split = split_size ? split_size : pipe_split_default_size(ndocs);
        rc = pipe_megatron_range_names(prefix, ndocs, per_split, paths, npaths, err, errlen);
        free(prefix);
        return rc;
    }
    if (src->kind == PIPE_SRC_SNAPSHOT) {
        if (src->nglobs != 1)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "a snapshot source names one directory, not %zu", src->nglobs);
        return pipe_snapshot_paths(src->globs[0], !(roots && roots->no_listing), paths, npaths, err,
                                   errlen);
    }
    int rc = pipe_glob_expand(src->globs, src->nglobs, paths, npaths, err, errlen);
    if (rc < 0 || src->kind != PIPE_SRC_PARQUET)
        return rc;
    char **groups = NULL;
    size_t ngroups = 0;
    rc = pipe_parquet_row_groups(roots, *paths, *npaths, &groups, &ngroups, err, errlen);
    pipe_paths_free(*paths, *npaths);
    *paths = groups;
    *npaths = ngroups;
    return rc;
}
