/* File lists: shell globs expanded to sorted regular files (see paths.h). */
#include "paths.h"

#include "common/error.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_paths(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void pipe_paths_free(char **paths, size_t npaths)
{
    if (!paths)
        return;
    for (size_t i = 0; i < npaths; i++)
        free(paths[i]);
    free(paths);
}

int pipe_paths_copy(char *const *src, size_t n, char ***out, size_t *nout)
{
    if (n == 0)
        return 0;
    if (!(*out = calloc(n, sizeof **out)))
        return SLUICE_ERR_NOMEM;
    for (; *nout < n; (*nout)++)
        if (!((*out)[*nout] = strdup(src[*nout])))
            return SLUICE_ERR_NOMEM;
    return 0;
}

/* Appends the regular files among g's matches to *paths. Returns the number appended or
 * SLUICE_ERR_NOMEM. */
static int collect_regular(const glob_t *g, char ***paths, size_t *n, size_t *cap)
{
    int added = 0;
    for (size_t i = 0; i < g->gl_pathc; i++) {
        struct stat st;
        if (stat(g->gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (*n == *cap) {
            size_t ncap = *cap ? *cap * 2 : 16;
            char **np = realloc(*paths, ncap * sizeof *np);
            if (!np)
                return SLUICE_ERR_NOMEM;
            *paths = np;
            *cap = ncap;
        }
        char *copy = strdup(g->gl_pathv[i]);
        if (!copy)
            return SLUICE_ERR_NOMEM;
        (*paths)[(*n)++] = copy;
        added++;
    }
    return added;
}

int pipe_glob_expand(char *const *globs, size_t nglobs, char ***paths, size_t *npaths, char *err,
                     size_t errlen)
{
    char **out = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < nglobs; i++) {
        glob_t g;
        int grc = glob(globs[i], 0, NULL, &g);
        if (grc == GLOB_NOSPACE) {
            globfree(&g);
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "'%s': %s", globs[i],
                         sluice_strerror(SLUICE_ERR_NOMEM));
            goto fail;
        }
        if (grc == GLOB_ABORTED) {
            globfree(&g);
            rc = err_set(err, errlen, -EIO, "'%s': cannot read a directory", globs[i]);
            goto fail;
        }
        int added = grc == 0 ? collect_regular(&g, &out, &n, &cap) : 0;
        globfree(&g);
        if (added < 0) {
            rc = err_set(err, errlen, added, "'%s': %s", globs[i], sluice_strerror(added));
            goto fail;
        }
        /* A pattern whose matches are all directories or other non-files matches no file. */
        if (added == 0) {
            rc = err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "no file matches '%s'", globs[i]);
            goto fail;
        }
    }
    if (n > 1) {
        qsort(out, n, sizeof *out, cmp_paths);
        size_t w = 1;
        for (size_t r = 1; r < n; r++) {
            if (strcmp(out[r], out[w - 1]) == 0)
                free(out[r]);
            else
                out[w++] = out[r];
        }
        n = w;
    }
    *paths = out;
    *npaths = n;
    return 0;
fail:
    pipe_paths_free(out, n);
    *paths = NULL;
    *npaths = 0;
    return rc;
}
