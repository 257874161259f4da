/* File lists of file sources: shell globs expanded to a sorted, de-duplicated list of regular
 * files, and freeing such a list. Used by the split provider (the files of a pass), the file
 * sources and snapshot sources. */
#ifndef SLUICE_PIPELINE_PATHS_H
#define SLUICE_PIPELINE_PATHS_H

#include <stddef.h>

/* Expands shell globs (glob(3)) to a sorted, de-duplicated list of regular files. An s3:// URL
 * is expanded by one paginated listing (obj_glob) to the URLs of the objects it matches; an
 * http:// or https:// URL is taken as written; another URL is refused (obj_url_check). A
 * pattern that matches nothing is SLUICE_ERR_NOT_FOUND naming it in err ("no file matches
 * 'GLOB'", "no object matches 'URL'"). Blocks on the disk or the network. *paths (and each string)
 * is malloc'd; free with pipe_paths_free(). */
int pipe_glob_expand(char *const *globs, size_t nglobs, char ***paths, size_t *npaths, char *err,
                     size_t errlen);
void pipe_paths_free(char **paths, size_t npaths);
/* Copies n strings into *out (malloc'd, each string too), raising *nout as each is copied, so
 * that pipe_paths_free(*out, *nout) releases a partial copy after a failure. n == 0 leaves *out
 * as it is. Returns 0 or SLUICE_ERR_NOMEM. */
int pipe_paths_copy(char *const *src, size_t n, char ***out, size_t *nout);

#endif
