/* File lists: shell globs expanded to sorted regular files (see paths.h). */
#include "paths.h"

#include "common/error.h"
#include "objstore.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The length of a path, or of a URL without its pin (objurl.h). */
static size_t unpinned_len(const char *s)
{
    if (!obj_is_url(s))
        return strlen(s);
    struct obj_pin pin;
    obj_pin_parse(s, &pin);
    return pin.url_len;
}

/* Paths in strcmp order, pinned URLs by their URLs, so a listing sorts alike pinned or not. */
static int cmp_paths(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    size_t lx = unpinned_len(x), ly = unpinned_len(y);
    int c = memcmp(x, y, lx < ly ? lx : ly);
    if (c != 0)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x, y);
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

/* Doubles the capacity of a list. Returns 0 or SLUICE_ERR_NOMEM. */
static int grow_list(char ***paths, size_t *cap)
{
    size_t ncap = *cap ? *cap * 2 : 16;
    char **np = realloc(*paths, ncap * sizeof *np);
    if (!np)
        return SLUICE_ERR_NOMEM;
    *paths = np;
    *cap = ncap;
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
        if (obj_is_url(globs[i])) {
            /* s3:// globs by one listing; http(s) URLs and pinned URLs (already listed) as
             * written, never globbed. */
            struct obj_pin pin;
            obj_pin_parse(globs[i], &pin);
            char *bare = strndup(globs[i], pin.url_len);
            int added = bare ? obj_url_check(bare, err, errlen)
                             : err_set(err, errlen, SLUICE_ERR_NOMEM, "'%s': %s", globs[i],
                                       sluice_strerror(SLUICE_ERR_NOMEM));
            free(bare);
            if (added == 0 && obj_url_scheme(globs[i]) == OBJ_S3 && !pin.pinned) {
                added = obj_glob(globs[i], &out, &n, &cap, err, errlen);
            } else if (added == 0) {
                char *copy = strdup(globs[i]);
                added = copy ? 1
                             : err_set(err, errlen, SLUICE_ERR_NOMEM, "'%s': %s", globs[i],
                                       sluice_strerror(SLUICE_ERR_NOMEM));
                if (copy && (n < cap || grow_list(&out, &cap) == 0)) {
                    out[n++] = copy;
                } else if (copy) {
                    free(copy);
                    added = err_set(err, errlen, SLUICE_ERR_NOMEM, "'%s': %s", globs[i],
                                    sluice_strerror(SLUICE_ERR_NOMEM));
                }
            }
            if (added < 0) {
                rc = added;
                goto fail;
            }
            if (added == 0) {
                rc = err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "no object matches '%s'", globs[i]);
                goto fail;
            }
            continue;
        }
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
