/* Data roots (roots.h): pure path logic first, then the checks that ask the file system. */
#include "roots.h"

#include "common/error.h"
#include "objstore.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Pure path logic --------------------------------------------------------------------- */

/* Applies the components of p (relative to what out holds, of length *len) to out. */
static int apply_components(const char *p, char *out, size_t outlen, size_t *len)
{
    while (*p) {
        while (*p == '/')
            p++;
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 0)
            break;
        if (n == 1 && p[0] == '.') {
            /* "." names where we are. */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            /* ".." removes the last component; at the root it stays at the root. */
            while (*len > 1 && out[*len - 1] != '/')
                (*len)--;
            if (*len > 1)
                (*len)--;
            out[*len] = '\0';
        } else {
            size_t need = *len + (*len > 1 ? 1 : 0) + n + 1;
            if (need > outlen)
                return SLUICE_ERR_TOO_LARGE;
            if (*len > 1)
                out[(*len)++] = '/';
            memcpy(out + *len, p, n);
            *len += n;
            out[*len] = '\0';
        }
        p += n;
    }
    return 0;
}

int pipe_path_normalize(const char *cwd, const char *path, char *out, size_t outlen)
{
    if (!path || !*path)
        return SLUICE_ERR_INVALID;
    if (path[0] != '/' && (!cwd || cwd[0] != '/'))
        return SLUICE_ERR_INVALID;
    if (outlen < 2)
        return SLUICE_ERR_TOO_LARGE;
    size_t len = 1;
    out[0] = '/';
    out[1] = '\0';
    int rc = 0;
    if (path[0] != '/')
        rc = apply_components(cwd, out, outlen, &len);
    if (rc == 0)
        rc = apply_components(path, out, outlen, &len);
    return rc;
}

size_t pipe_glob_dir_len(const char *glob)
{
    size_t meta = strcspn(glob, "*?[\\");
    /* The last slash before the first metacharacter, or before the end for a literal path. */
    size_t slash = SIZE_MAX;
    for (size_t i = 0; i < meta; i++)
        if (glob[i] == '/')
            slash = i;
    if (slash == SIZE_MAX)
        return 0;
    /* Trailing slashes of the directory part ("/a//b?") go with it. */
    while (slash > 0 && glob[slash - 1] == '/')
        slash--;
    return slash == 0 ? 1 : slash;
}

const char *pipe_source_name(enum pipe_source_kind kind)
{
    switch (kind) {
    case PIPE_SRC_RANGE:
        return "range";
    case PIPE_SRC_LIST:
        return "list";
    case PIPE_SRC_TFRECORD:
        return "tfrecord";
    case PIPE_SRC_LINES:
        return "lines";
    case PIPE_SRC_TAR:
        return "tar";
    case PIPE_SRC_SNAPSHOT:
        return "snapshot";
    case PIPE_SRC_PARQUET:
        return "parquet";
    case PIPE_SRC_JSONL:
        return "jsonl";
    case PIPE_SRC_MEGATRON:
        return "megatron";
    case PIPE_SRC_SAMPLE:
        return "sample_from_datasets";
    case PIPE_SRC_CHOOSE:
        return "choose_from_datasets";
    }
    return "source";
}

/* ---- Resolution -------------------------------------------------------------------------- */

/* Errors after which a shorter prefix of the path may still resolve. */
static bool walkable(int e)
{
    return e == ENOENT || e == ENOTDIR || e == EACCES || e == ELOOP;
}

int pipe_path_resolve(const char *path, char *out, size_t outlen)
{
    if (!path || !*path)
        return -ENOENT;
    if (outlen < PATH_MAX)
        return -ENAMETOOLONG;
    char real[PATH_MAX];
    if (realpath(path, real))
        return pipe_path_normalize(NULL, real, out, outlen) == 0 ? 0 : -ENAMETOOLONG;
    if (!walkable(errno))
        return -errno;
    size_t plen = strlen(path);
    char *prefix = malloc(plen + 2);
    if (!prefix)
        return -ENOMEM;
    memcpy(prefix, path, plen + 1);
    size_t end = plen;
    int rc;
    for (;;) {
        while (end > 1 && prefix[end - 1] == '/')
            end--;
        size_t k = end;
        while (k > 0 && prefix[k - 1] != '/')
            k--;
        /* prefix[k, end) is the last component; what precedes it is the next prefix. */
        const char *rest = path + k;
        const char *base;
        if (k == 0) {
            base = ".";
        } else if (k == 1) {
            base = "/";
        } else {
            prefix[k - 1] = '\0';
            base = prefix;
        }
        if (realpath(base, real)) {
            rc = pipe_path_normalize(real, rest, out, outlen) == 0 ? 0 : -ENAMETOOLONG;
            break;
        }
        if (!walkable(errno) || k <= 1) {
            rc = -errno;
            break;
        }
        end = k - 1;
    }
    free(prefix);
    return rc;
}

/* ---- Roots ------------------------------------------------------------------------------- */

void pipe_roots_release(struct pipe_roots *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        free(r->dirs[i]);
    free(r->dirs);
    r->dirs = NULL;
    r->n = 0;
}

static int roots_add(struct pipe_roots *r, const char *dir)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->dirs[i], dir) == 0)
            return 0;
    char **more = realloc(r->dirs, (r->n + 1) * sizeof(*more));
    if (!more)
        return SLUICE_ERR_NOMEM;
    r->dirs = more;
    r->dirs[r->n] = strdup(dir);
    if (!r->dirs[r->n])
        return SLUICE_ERR_NOMEM;
    r->n++;
    return 0;
}

int pipe_roots_init(struct pipe_roots *r, const char *const *dirs, size_t n, char *err,
                    size_t errlen)
{
    memset(r, 0, sizeof(*r));
    for (size_t i = 0; i < n; i++) {
        char real[PATH_MAX];
        struct stat st;
        if (!dirs[i] || !*dirs[i])
            return err_set(err, errlen, SLUICE_ERR_INVALID, "data root %zu is empty", i);
        if (obj_is_url(dirs[i])) {
            char why[600];
            int rc = obj_root_normalize(dirs[i], real, sizeof real, why, sizeof why);
            if (rc == 0)
                rc = roots_add(r, real);
            if (rc == SLUICE_ERR_NOMEM)
                return err_set(err, errlen, rc, "data roots: %s", sluice_strerror(rc));
            if (rc < 0)
                return err_set(err, errlen, rc, "data root %s", why);
            continue;
        }
        if (!realpath(dirs[i], real) || stat(real, &st) < 0) {
            int code = -errno;
            return err_set(err, errlen, code, "data root %s: %s", dirs[i], sluice_strerror(code));
        }
        if (!S_ISDIR(st.st_mode))
            return err_set(err, errlen, SLUICE_ERR_INVALID, "data root %s: not a directory",
                           dirs[i]);
        int rc = roots_add(r, real);
        if (rc < 0)
            return err_set(err, errlen, rc, "data roots: %s", sluice_strerror(rc));
    }
    return 0;
}

int pipe_roots_copy(struct pipe_roots *r, const struct pipe_roots *src)
{
    memset(r, 0, sizeof(*r));
    r->no_listing = src && src->no_listing;
    for (size_t i = 0; src && i < src->n; i++) {
        int rc = roots_add(r, src->dirs[i]);
        if (rc < 0) {
            pipe_roots_release(r);
            return rc;
        }
    }
    return 0;
}

/* "ROOT, ROOT2" into buf, cut short (with "...") when it does not fit. */
static void roots_list(const struct pipe_roots *r, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n && at < len; i++) {
        int n = snprintf(buf + at, len - at, "%s%s", i ? ", " : "", r->dirs[i]);
        if (n < 0 || (size_t)n >= len - at) {
            if (len > 4)
                memcpy(buf + len - 4, "...", 4);
            return;
        }
        at += (size_t)n;
    }
}

int pipe_roots_check_path(const struct pipe_roots *r, const char *label, const char *path,
                          char *resolved, size_t outlen, char *err, size_t errlen)
{
    char real[PATH_MAX];
    if (!*path)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: an empty path names no file", label);
    int rc = pipe_path_resolve(path, real, sizeof real);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s: %s: %s", label, path, sluice_strerror(rc));
    if (pipe_roots_active(r) && !pipe_roots_contain(r, real)) {
        char list[400];
        roots_list(r, list, sizeof list);
        return err_set(err, errlen, SLUICE_ERR_DENIED, "%s: %s is outside the data roots (%s)",
                       label, real, list);
    }
    if (resolved) {
        if (strlen(real) >= outlen)
            return err_set(err, errlen, -ENAMETOOLONG, "%s: %s: %s", label, path,
                           sluice_strerror(-ENAMETOOLONG));
        memcpy(resolved, real, strlen(real) + 1);
    }
    return 0;
}

int pipe_roots_check_url(const struct pipe_roots *r, const char *label, const char *url, char *err,
                         size_t errlen)
{
    int rc = obj_url_check(url, err, errlen);
    if (rc < 0)
        return rc;
    if (pipe_roots_active(r) && !pipe_roots_contain(r, url)) {
        char list[400];
        roots_list(r, list, sizeof list);
        return err_set(err, errlen, SLUICE_ERR_DENIED, "%s: %s is outside the data roots (%s)",
                       label, url, list);
    }
    return 0;
}

int pipe_roots_open_object(const struct pipe_roots *r, enum pipe_source_kind kind, const char *url,
                           bool random, const struct obj_cancel *cancel, struct obj_reader **out,
                           char *err, size_t errlen)
{
    char label[PATH_MAX + 32];
    snprintf(label, sizeof label, "%s(\"%s\")", pipe_source_name(kind), url);
    *out = NULL;
    int rc = pipe_roots_check_url(r, label, url, err, errlen);
    if (rc < 0)
        return rc;
    return random ? obj_open_random(url, cancel, out, err, errlen)
                  : obj_open(url, cancel, out, err, errlen);
}

/* Checks a URL glob: the part before its first metacharacter up to its last slash (every
 * object the glob can match lies below it, key by key: an object store has no links), or the
 * whole URL when it is literal; http(s) URLs are always literal. Nothing is listed. */
static int check_url_glob(const struct pipe_roots *r, const char *label, const char *pattern,
                          char *err, size_t errlen)
{
    int rc = obj_url_check(pattern, err, errlen);
    if (rc < 0)
        return rc;
    size_t meta =
        obj_url_scheme(pattern) == OBJ_S3 ? obj_glob_prefix_len(pattern) : strlen(pattern);
    if (pattern[meta] == '\0')
        return pipe_roots_check_url(r, label, pattern, err, errlen);
    size_t cut = meta;
    while (cut > 5 && pattern[cut - 1] != '/')
        cut--;
    /* "s3://b/x*" gives "s3://b/", judged as "s3://b". */
    while (cut > 5 && pattern[cut - 1] == '/')
        cut--;
    char *dir = strndup(pattern, cut);
    if (!dir)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: %s", label,
                       sluice_strerror(SLUICE_ERR_NOMEM));
    rc = pipe_roots_check_url(r, label, dir, err, errlen);
    if (rc == SLUICE_ERR_DENIED) {
        char list[400];
        roots_list(r, list, sizeof list);
        rc = err_set(err, errlen, SLUICE_ERR_DENIED, "%s: %s is outside the data roots (%s)", label,
                     pattern, list);
    }
    free(dir);
    return rc;
}

/* Checks one glob: its directory part, then its matches. */
static int check_glob(const struct pipe_roots *r, const char *label, const char *pattern, char *err,
                      size_t errlen)
{
    /* A literal pattern is checked as the file it names. Otherwise the directory part is
     * checked before it is listed, so a refusal never names a file found outside. */
    bool literal = pattern[strcspn(pattern, "*?[\\")] == '\0';
    size_t dlen = pipe_glob_dir_len(pattern);
    char *dir = literal ? strdup(pattern) : dlen ? strndup(pattern, dlen) : strdup(".");
    if (!dir)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: %s", label,
                       sluice_strerror(SLUICE_ERR_NOMEM));
    int rc = pipe_roots_check_path(r, label, dir, NULL, 0, err, errlen);
    free(dir);
    if (rc < 0)
        return rc;
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc == GLOB_NOSPACE) {
        globfree(&g);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: %s", label,
                       sluice_strerror(SLUICE_ERR_NOMEM));
    }
    /* No match, or an unreadable directory: nothing here is opened, and expanding the glob for
     * reading reports it. */
    for (size_t i = 0; grc == 0 && rc == 0 && i < g.gl_pathc; i++)
        rc = pipe_roots_check_path(r, label, g.gl_pathv[i], NULL, 0, err, errlen);
    globfree(&g);
    return rc;
}

/* Checks the two files of a megatron prefix as paths. */
static int check_megatron(const struct pipe_roots *r, const char *label, const char *prefix,
                          char *err, size_t errlen)
{
    static const char *const exts[] = {".idx", ".bin"};
    for (size_t k = 0; k < 2; k++) {
        char *path = NULL;
        if (asprintf(&path, "%s%s", prefix, exts[k]) < 0)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: %s", label,
                           sluice_strerror(SLUICE_ERR_NOMEM));
        int rc = pipe_roots_check_path(r, label, path, NULL, 0, err, errlen);
        free(path);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int pipe_roots_check_source(const struct pipe_roots *r, const struct pipe_source *src, char *err,
                            size_t errlen)
{
    if (!pipe_roots_active(r))
        return 0;
    /* A mix's files are its input pipelines' (nesting is bounded, spec.h). */
    for (size_t i = 0; i < src->ninputs; i++) {
        int rc = pipe_roots_check_source(r, &src->inputs[i]->source, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (src->choice) {
        int rc = pipe_roots_check_source(r, &src->choice->source, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (!pipe_source_reads_files(src->kind))
        return 0;
    for (size_t i = 0; i < src->nglobs; i++) {
        char label[PATH_MAX + 32];
        snprintf(label, sizeof label, "%s(\"%s\")", pipe_source_name(src->kind), src->globs[i]);
        /* A megatron prefix names two files, PREFIX.idx and PREFIX.bin, each of which must lie
         * within a root (checked again as they are opened). */
        if (src->kind == PIPE_SRC_MEGATRON && !obj_is_url(src->globs[i])) {
            int rc = check_megatron(r, label, src->globs[i], err, errlen);
            if (rc < 0)
                return rc;
            continue;
        }
        /* A snapshot names its directory, not a pattern: the directory must lie within a root
         * (its chunk files are checked again as they are opened). */
        int rc = obj_is_url(src->globs[i]) ? check_url_glob(r, label, src->globs[i], err, errlen)
                 : src->kind == PIPE_SRC_SNAPSHOT
                     ? pipe_roots_check_path(r, label, src->globs[i], NULL, 0, err, errlen)
                     : check_glob(r, label, src->globs[i], err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int pipe_roots_open_file(const struct pipe_roots *r, enum pipe_source_kind kind, const char *path,
                         char *err, size_t errlen)
{
    char real[PATH_MAX];
    const char *target = path;
    int flags = O_RDONLY | O_CLOEXEC;
    if (obj_is_url(path))
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "%s(\"%s\"): URLs are read by lines, tfrecord, jsonl, tar and parquet only",
                       pipe_source_name(kind), path);
    if (pipe_roots_active(r)) {
        char label[PATH_MAX + 32];
        snprintf(label, sizeof label, "%s(\"%s\")", pipe_source_name(kind), path);
        int rc = pipe_roots_check_path(r, label, path, real, sizeof real, err, errlen);
        if (rc < 0)
            return rc;
        target = real;
        flags |= O_NOFOLLOW;
    }
    int fd;
    do
        fd = open(target, flags);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int code = -errno;
        return err_set(err, errlen, code, "%s: %s", path, sluice_strerror(code));
    }
    return fd;
}
