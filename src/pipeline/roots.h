/* Data roots: the directories a server's file sources may read (--data-root).
 *
 * A server started with data roots refuses every file a pipeline names outside them: the
 * dispatcher when a dataset is registered, the worker before it opens anything. A path is judged
 * by where it really leads: symbolic links and ".." are resolved first (realpath), so a link
 * inside a root that points outside, or "ROOT/../secret", is outside. Inside means equal to a
 * root or below it, component by component: /data2 is not inside /data. Without data roots,
 * files are not confined at all.
 *
 * The path logic (pipe_path_normalize, pipe_path_within, pipe_glob_dir_len) is pure; the rest
 * asks the file system (realpath, glob) and may be called from any thread, but not from a libuv
 * loop thread, since it may block on disk. */
#ifndef SLUICE_PIPELINE_ROOTS_H
#define SLUICE_PIPELINE_ROOTS_H

#include "objurl.h"
#include "spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* A set of data roots: absolute directories without symbolic links, "." or ".." components, and
 * object URL prefixes ("s3://BUCKET/PREFIX", "https://HOST/PREFIX", in obj_root_normalize's
 * form), which confine the URLs a source names (obj_url_within). */
struct pipe_roots {
    char **dirs;
    size_t n;
    /* Set on a worker's roots: objects are never listed here (what the dispatcher pinned is
     * read; an s3:// snapshot's chunks are pinned by their first answer instead). Copied. */
    bool no_listing;
};

/* Pure. Writes the lexical normal form of path into out: absolute (a relative path is taken
 * relative to cwd, which must be absolute), no "." or ".." components, no repeated or trailing
 * slashes ("/" alone for the root; ".." at the root stays at the root). Symbolic links are not
 * looked at. Returns 0, SLUICE_ERR_INVALID for an empty path or a relative one without an
 * absolute cwd, or SLUICE_ERR_TOO_LARGE when the result does not fit outlen. */
int pipe_path_normalize(const char *cwd, const char *path, char *out, size_t outlen);

/* Pure. Whether path equals root or lies below it, comparing whole components; both must be in
 * normal form (pipe_path_normalize). "/data/x" is within "/data", "/data2" is not, and every
 * absolute path is within "/". Inline, so that code outside the engine (the py runtime, linked
 * beside libsluice.so) can use it. */
static inline bool pipe_path_within(const char *path, const char *root)
{
    if (path[0] != '/' || root[0] != '/')
        return false;
    if (root[1] == '\0')
        return true;
    size_t n = strlen(root);
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Pure. The length of the literal directory part of a glob(3) pattern: the components before
 * the first one that holds a metacharacter (* ? [ or a backslash), without the slash after
 * them. "/srv/data/a?.txt" gives 9 ("/srv/data"), "/srv/data/a.txt" 9, "/a/[xy]/b" 2, "/x" 1
 * ("/"), and a relative pattern with a single component ("a?.txt") 0: the current directory. */
size_t pipe_glob_dir_len(const char *glob);

/* Resolves path the way opening it would: realpath(3) of it, or when some component does not
 * exist, realpath of its longest prefix that does with the rest appended and normalized
 * lexically. A relative path is taken relative to the current directory. Writes the result (in
 * normal form) into out, of outlen >= PATH_MAX bytes. Returns 0 or a negative errno. */
int pipe_path_resolve(const char *path, char *out, size_t outlen);

/* Resolves the n directories (realpath) into r, and takes URLs among them (s3://, https://,
 * http://) as URL roots in obj_root_normalize's form (a bad URL: SLUICE_ERR_INVALID, "data root
 * URL: reason"), which the caller releases with
 * pipe_roots_release (also after a failure). Each must exist and be a directory; otherwise
 * returns a negative code with "data root DIR: No such file or directory" (or "...: not a
 * directory") in err. Duplicates are kept once. */
int pipe_roots_init(struct pipe_roots *r, const char *const *dirs, size_t n, char *err,
                    size_t errlen);
/* Copies src (already resolved) into r. Returns 0 or SLUICE_ERR_NOMEM. */
int pipe_roots_copy(struct pipe_roots *r, const struct pipe_roots *src);
void pipe_roots_release(struct pipe_roots *r);

/* Whether r confines anything: non-NULL with at least one root. */
static inline bool pipe_roots_active(const struct pipe_roots *r)
{
    return r && r->n > 0;
}

/* Pure. Whether the local path resolved (in normal form) lies within one of the roots' local
 * directories (URL roots never contain a path). Inline and self-contained, as pipe_path_within,
 * for code linked beside libsluice.so (the py runtime's module directories). */
static inline bool pipe_roots_contain_path(const struct pipe_roots *r, const char *resolved)
{
    for (size_t i = 0; r && i < r->n; i++)
        if (pipe_path_within(resolved, r->dirs[i]))
            return true;
    return false;
}

/* Pure. Whether resolved (in normal form: a local path or a URL) lies within one of the
 * roots. */
static inline bool pipe_roots_contain(const struct pipe_roots *r, const char *resolved)
{
    bool url = obj_is_url(resolved);
    for (size_t i = 0; r && i < r->n; i++)
        if (url ? obj_url_within(resolved, r->dirs[i]) : pipe_path_within(resolved, r->dirs[i]))
            return true;
    return false;
}

/* Checks one file about to be opened: resolves path and, when r is active, refuses it unless
 * it lies within a root. On success writes the resolved path into resolved (outlen >= PATH_MAX)
 * when it is non-NULL. Returns 0, or SLUICE_ERR_DENIED with
 * "LABEL: RESOLVED is outside the data roots (ROOT, ...)" in err, SLUICE_ERR_INVALID with
 * "LABEL: an empty path names no file" for path "", or the resolution's negative errno with
 * "LABEL: PATH: reason". */
int pipe_roots_check_path(const struct pipe_roots *r, const char *label, const char *path,
                          char *resolved, size_t outlen, char *err, size_t errlen);

/* Checks a file source (tfrecord, lines, tar) against active roots r: for each glob, the
 * resolved literal directory part (pipe_glob_dir_len; for a pattern without metacharacters, the
 * path itself), checked before the directory is listed, and every file it matches now must lie
 * within a root. A glob that matches nothing is no failure here (its directory part is still
 * checked). A snapshot source's directory is checked as a path, resolved as a file would be (a
 * link out of the roots is refused); its chunk files are checked as they are opened. A megatron
 * source's two files, PREFIX.idx and PREFIX.bin, are checked as paths. Other sources, and
 * inactive roots, pass. Returns 0, or SLUICE_ERR_DENIED with
 * 'lines("GLOB"): RESOLVED is outside the data roots (ROOT, ...)' in err, or a negative code
 * for an out-of-memory glob. */
int pipe_roots_check_source(const struct pipe_roots *r, const struct pipe_source *src, char *err,
                            size_t errlen);

/* Checks a URL a source names: obj_url_check, and with r active, that it lies within a URL root.
 * Returns 0, SLUICE_ERR_INVALID with obj_url_check's message, or SLUICE_ERR_DENIED with
 * "LABEL: URL is outside the data roots (ROOT, ...)". Pure. */
int pipe_roots_check_url(const struct pipe_roots *r, const char *label, const char *url, char *err,
                         size_t errlen);

/* Opens an object a lines, tfrecord, jsonl, tar or parquet source names by URL (objstore.h; a
 * pinned URL is judged without its pin), checked first with pipe_roots_check_url (labelled
 * 'lines("URL")'); with obj_open_random when random (for reads at random offsets), else
 * obj_open; cancel as for obj_open. Returns 0 with *out set, or a negative code with the reason in
 * err. Blocks on the network. */
struct obj_reader;
struct obj_cancel;
int pipe_roots_open_object(const struct pipe_roots *r, enum pipe_source_kind kind, const char *url,
                           bool random, const struct obj_cancel *cancel, struct obj_reader **out,
                           char *err, size_t errlen);

/* Opens a file of a source of this kind for reading (O_RDONLY | O_CLOEXEC, retried on EINTR).
 * With r active the file is checked first (pipe_roots_check_path, labelled 'lines("PATH")') and
 * its resolved path is opened without following a symbolic link in the last component, so a
 * file swapped for a link after the check is not followed. Returns the descriptor, or a negative
 * code with the reason in err: SLUICE_ERR_DENIED as pipe_roots_check_path, else "PATH: reason";
 * a URL is SLUICE_ERR_UNSUPPORTED ('megatron("URL"): URLs are read by lines, tfrecord, jsonl,
 * tar and parquet only'). */
int pipe_roots_open_file(const struct pipe_roots *r, enum pipe_source_kind kind, const char *path,
                         char *err, size_t errlen);

/* The source's name as the pipeline text spells it: "lines", "tfrecord", "tar", "snapshot",
 * "parquet", "jsonl", "megatron". */
const char *pipe_source_name(enum pipe_source_kind kind);

#endif
