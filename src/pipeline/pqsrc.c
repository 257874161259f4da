/* parquet(): the rows of Parquet files, read with parquet.h.
 *
 * Happy path: open a file (through the data roots), resolve the asked-for columns against its
 * schema, then for each row group open one cursor per column and build an element per row from
 * the cursors' values. Nulls take the column's default when it has one. The first failure is
 * recorded once in the context's message and returned by every later next(). */
#include "pqsrc.h"

#include "objstore.h"
#include "parquet.h"
#include "paths.h"
#include "registry.h"
#include "roots.h"
#include "spec.h"

#include "common/error.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One asked-for column as resolved in the current file. */
struct column {
    const char *arg;  /* the argument, "NAME" or "NAME=DEFAULT" (owned by the reader) */
    const char *name; /* the column's name: a copy of the NAME part */
    size_t index;     /* the column's index in the file */
    bool has_default;
    struct pipe_tensor fill;    /* the default as a value of the column's dtype */
    struct pq_column_info info; /* as the first file gave it; later files must agree */
    bool known;
    struct pq_cursor *cur;
};

struct pq_reader {
    struct pipe_iter base;
    char **paths; /* owned copies */
    size_t npaths;
    size_t next_path;
    char **args; /* owned copies; NULL/0: every column of each file */
    size_t nargs;
    struct column *cols;
    size_t ncols, capcols;
    /* The current file; f NULL when none is open. */
    char *key;  /* the file's name as listed (without a row group mark; a URL with its pin) */
    char *path; /* the file's path or URL, for messages */
    int fd;
    struct obj_reader *obj; /* the object when the file is a URL, else NULL */
    struct pq_io io;
    struct pq_file *f;
    size_t rg;        /* the current row group */
    size_t rg_end;    /* the row group after the last one of the entry to read */
    bool rg_open;     /* its cursors are open */
    uint64_t rg_left; /* rows of it not yet read */
    uint64_t row;     /* the next row's number in the file */
    int status;       /* 1 running, 0 ended, negative after an error */
};

static void close_cursors(struct pq_reader *r)
{
    for (size_t i = 0; i < r->ncols; i++) {
        pq_cursor_free(r->cols[i].cur);
        r->cols[i].cur = NULL;
    }
    r->rg_open = false;
}

static void close_file(struct pq_reader *r)
{
    close_cursors(r);
    pq_close(r->f);
    r->f = NULL;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    obj_close(r->obj);
    r->obj = NULL;
    free(r->key);
    r->key = NULL;
    free(r->path);
    r->path = NULL;
}

static int fail(struct pq_reader *r, int code)
{
    close_file(r);
    r->status = code;
    return code;
}

static int failf(struct pq_reader *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int failf(struct pq_reader *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->base.ctx->err, sizeof r->base.ctx->err, fmt, ap);
    va_end(ap);
    return fail(r, code);
}

static bool is_int_dtype(enum sluice_dtype d)
{
    return d >= SLUICE_INT8 && d <= SLUICE_UINT64;
}

/* Parses a default's text as a scalar of dtype into t. Returns 0, or SLUICE_ERR_INVALID with
 * what was expected in why. */
static int parse_default(const char *text, enum sluice_dtype dtype, struct pipe_tensor *t,
                         const char **why)
{
    char *end = NULL;
    errno = 0;
    if (dtype == SLUICE_BYTES)
        return pipe_tensor_set_bytes(t, text, strlen(text));
    if (dtype == SLUICE_BOOL) {
        uint8_t v;
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
            v = 1;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
            v = 0;
        else {
            *why = "true or false";
            return SLUICE_ERR_INVALID;
        }
        return pipe_tensor_set_scalar(t, dtype, &v);
    }
    if (dtype == SLUICE_FLOAT32 || dtype == SLUICE_FLOAT64) {
        double v = strtod(text, &end);
        if (!*text || *end || errno == ERANGE) {
            *why = "a number";
            return SLUICE_ERR_INVALID;
        }
        if (dtype == SLUICE_FLOAT32) {
            float f = (float)v;
            return pipe_tensor_set_scalar(t, dtype, &f);
        }
        return pipe_tensor_set_scalar(t, dtype, &v);
    }
    if (!is_int_dtype(dtype)) {
        *why = "a value of a supported type";
        return SLUICE_ERR_INVALID;
    }
    bool is_unsigned = dtype >= SLUICE_UINT8;
    uint8_t buf[8];
    if (is_unsigned) {
        if (text[0] == '-' || !*text) {
            *why = "an integer of the column's unsigned type";
            return SLUICE_ERR_INVALID;
        }
        unsigned long long v = strtoull(text, &end, 10);
        size_t size = sluice_dtype_size(dtype);
        unsigned long long max = size == 8 ? ULLONG_MAX : (1ull << (8 * size)) - 1;
        if (*end || errno == ERANGE || v > max) {
            *why = "an integer of the column's unsigned type";
            return SLUICE_ERR_INVALID;
        }
        if (size == 1)
            buf[0] = (uint8_t)v;
        else if (size == 2) {
            uint16_t x = (uint16_t)v;
            memcpy(buf, &x, 2);
        } else if (size == 4) {
            uint32_t x = (uint32_t)v;
            memcpy(buf, &x, 4);
        } else {
            uint64_t x = v;
            memcpy(buf, &x, 8);
        }
        return pipe_tensor_set_scalar(t, dtype, buf);
    }
    long long v = strtoll(text, &end, 10);
    size_t size = sluice_dtype_size(dtype);
    long long lo = size == 8 ? LLONG_MIN : -(1ll << (8 * size - 1));
    long long hi = size == 8 ? LLONG_MAX : (1ll << (8 * size - 1)) - 1;
    if (!*text || *end || errno == ERANGE || v < lo || v > hi) {
        *why = "an integer of the column's type";
        return SLUICE_ERR_INVALID;
    }
    if (size == 1)
        buf[0] = (uint8_t)(int8_t)v;
    else if (size == 2) {
        int16_t x = (int16_t)v;
        memcpy(buf, &x, 2);
    } else if (size == 4) {
        int32_t x = (int32_t)v;
        memcpy(buf, &x, 4);
    } else {
        int64_t x = v;
        memcpy(buf, &x, 8);
    }
    return pipe_tensor_set_scalar(t, dtype, buf);
}

/* Makes t an empty 1-D tensor of dtype. */
static int set_empty_list(struct pipe_tensor *t, enum sluice_dtype dtype)
{
    t->dtype = dtype;
    int rc = pipe_tensor_reserve(t, 0, 0);
    if (rc)
        return rc;
    t->rank = 1;
    t->shape[0] = 0;
    t->len = 0;
    if (dtype == SLUICE_BYTES)
        t->offs[0] = 0;
    return 0;
}

/* Copies the default src (a scalar or an empty list) into t. */
static int put_default(struct pipe_tensor *t, const struct pipe_tensor *src)
{
    if (src->rank == 1)
        return set_empty_list(t, src->dtype);
    if (src->dtype == SLUICE_BYTES)
        return pipe_tensor_set_bytes(t, src->data, src->len);
    return pipe_tensor_set_scalar(t, src->dtype, src->data);
}

/* Lists the file's columns into buf for a message. */
static void list_columns(const struct pq_file *f, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    size_t n = pq_num_columns(f);
    for (size_t i = 0; i < n && used + 1 < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", pq_column(f, i)->name);
        if (w < 0)
            break;
        used += (size_t)w < len - used ? (size_t)w : len - used - 1;
    }
}

static const char *dtype_text(const struct pq_column_info *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", c->list ? "list of " : "", sluice_dtype_name(c->dtype),
             c->optional ? " (optional)" : "");
    return buf;
}

/* Makes room for n column slots, keeping what is there. */
static int grow_cols(struct pq_reader *r, size_t n)
{
    if (n <= r->capcols)
        return 0;
    struct column *c = realloc(r->cols, n * sizeof *c);
    if (!c)
        return SLUICE_ERR_NOMEM;
    memset(c + r->capcols, 0, (n - r->capcols) * sizeof *c);
    r->cols = c;
    r->capcols = n;
    return 0;
}

/* Resolves the asked-for columns (or all of them) in the file just opened. */
static int resolve_columns(struct pq_reader *r)
{
    size_t want = r->nargs ? r->nargs : pq_num_columns(r->f);
    if (want > PIPE_MAX_COMPONENTS)
        return failf(r, SLUICE_ERR_INVALID,
                     "%s: %zu columns, more than an element holds (%d): name the columns to read",
                     r->path, want, PIPE_MAX_COMPONENTS);
    if (want == 0)
        return failf(r, SLUICE_ERR_INVALID, "%s: the file has no columns", r->path);
    if (r->ncols && r->ncols != want)
        return failf(r, SLUICE_ERR_INVALID,
                     "%s: %zu columns, where the files before have %zu: read files of one "
                     "schema, or name the columns",
                     r->path, want, r->ncols);
    if (grow_cols(r, want) < 0)
        return failf(r, SLUICE_ERR_NOMEM, "%s: out of memory", r->path);
    char a[64], b[64];
    for (size_t i = 0; i < want; i++) {
        struct column *c = &r->cols[i];
        long idx;
        if (r->nargs) {
            const char *arg = r->args[i];
            size_t nlen = pipe_parquet_column_name_len(arg);
            if (!c->name) {
                char *name = strndup(arg, nlen);
                if (!name)
                    return failf(r, SLUICE_ERR_NOMEM, "%s: out of memory", r->path);
                c->name = name;
                c->arg = arg;
            }
            idx = pq_column_find(r->f, c->name);
            if (idx < 0) {
                char cols[512];
                list_columns(r->f, cols, sizeof cols);
                return failf(r, SLUICE_ERR_INVALID, "%s: no column \"%s\" (the file has: %s)",
                             r->path, c->name, cols);
            }
        } else {
            idx = (long)i;
            const char *name = pq_column(r->f, i)->name;
            if (c->name && strcmp(c->name, name) != 0)
                return failf(r, SLUICE_ERR_INVALID,
                             "%s: column %zu is \"%s\", where the files before have \"%s\"",
                             r->path, i, name, c->name);
            if (!c->name && !(c->name = strdup(name)))
                return failf(r, SLUICE_ERR_NOMEM, "%s: out of memory", r->path);
        }
        const struct pq_column_info *info = pq_column(r->f, (size_t)idx);
        if (!info->supported)
            return failf(r, SLUICE_ERR_INVALID, "%s: column %s: %s", r->path, c->name,
                         info->why_unsupported ? info->why_unsupported : "not supported");
        if (c->known && (c->info.dtype != info->dtype || c->info.list != info->list))
            return failf(r, SLUICE_ERR_INVALID,
                         "%s: column %s is %s, where the files before have %s", r->path, c->name,
                         dtype_text(info, a, sizeof a), dtype_text(&c->info, b, sizeof b));
        c->index = (size_t)idx;
        if (!c->known) {
            c->info = *info;
            c->info.name = NULL; /* owned by the file */
            c->info.why_unsupported = NULL;
            c->known = true;
            const char *eq = c->arg ? strchr(c->arg, '=') : NULL;
            if (eq) {
                const char *why = NULL;
                int rc;
                if (info->list)
                    rc = strcmp(eq + 1, "[]") == 0
                             ? set_empty_list(&c->fill, info->dtype)
                             : (why = "[] (an empty list)", SLUICE_ERR_INVALID);
                else
                    rc = parse_default(eq + 1, info->dtype, &c->fill, &why);
                if (rc == SLUICE_ERR_INVALID)
                    return failf(r, rc, "%s: column %s: default \"%s\": expected %s for %s",
                                 r->path, c->name, eq + 1, why, dtype_text(info, a, sizeof a));
                if (rc < 0)
                    return failf(r, rc, "%s: %s", r->path, sluice_strerror(rc));
                c->has_default = true;
            }
        }
    }
    r->ncols = want;
    return 0;
}

bool pipe_parquet_row_group_of(const char *name, size_t *path_len, uint64_t *rg)
{
    const char *mark = NULL;
    for (const char *p = strstr(name, PIPE_PARQUET_ROW_GROUP_MARK); p;
         p = strstr(p + 1, PIPE_PARQUET_ROW_GROUP_MARK))
        mark = p;
    if (!mark)
        return false;
    const char *num = mark + strlen(PIPE_PARQUET_ROW_GROUP_MARK);
    if (*num < '0' || *num > '9' || (num[0] == '0' && num[1]))
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(num, &end, 10);
    if (*end || errno == ERANGE)
        return false;
    *path_len = (size_t)(mark - name);
    *rg = v;
    return true;
}

/* pq_io's read over an object. */
static int obj_io_read(void *user, void *buf, size_t len, uint64_t off, char *err, size_t errlen)
{
    return obj_pread(user, buf, len, off, err, errlen);
}

/* Whether the chain reading an object was cancelled (objstore.h's struct obj_cancel). */
static bool ctx_cancelled(const void *ctx)
{
    return pipe_cancelled(ctx);
}

/* Opens path as a pq_io: a local file through the data roots (*fd set), or an object (*obj set,
 * io.name its URL without the pin). cancel may be NULL. */
static int open_io(const struct pipe_roots *roots, const char *path,
                   const struct obj_cancel *cancel, int *fd, struct obj_reader **obj,
                   struct pq_io *io, char *err, size_t errlen)
{
    *fd = -1;
    *obj = NULL;
    if (obj_is_url(path)) {
        int rc =
            pipe_roots_open_object(roots, PIPE_SRC_PARQUET, path, true, cancel, obj, err, errlen);
        if (rc < 0)
            return rc;
        io->read = obj_io_read;
        io->user = *obj;
        io->size = obj_size(*obj);
        io->name = obj_url(*obj);
        return 0;
    }
    *fd = pipe_roots_open_file(roots, PIPE_SRC_PARQUET, path, err, errlen);
    if (*fd < 0)
        return *fd;
    return pq_io_fd(io, *fd, path, err, errlen);
}

/* Opens the file of path (plen bytes; a copy is kept), unless it is the one open. */
static int open_file(struct pq_reader *r, const char *path, size_t plen)
{
    if (r->f && strlen(r->key) == plen && memcmp(r->key, path, plen) == 0)
        return 0;
    close_file(r);
    char *err = r->base.ctx->err;
    size_t errlen = sizeof r->base.ctx->err;
    if (!(r->key = strndup(path, plen)) || !(r->path = strdup(r->key)))
        return failf(r, SLUICE_ERR_NOMEM, "%.*s: out of memory", (int)plen, path);
    struct obj_cancel cancel = {ctx_cancelled, r->base.ctx};
    int rc = open_io(pipe_registry_roots(r->base.ctx->reg), r->key, &cancel, &r->fd, &r->obj,
                     &r->io, err, errlen);
    if (rc == 0 && r->obj) {
        /* Messages name the URL without its pin. */
        free(r->path);
        if (!(r->path = strdup(obj_url(r->obj))))
            return failf(r, SLUICE_ERR_NOMEM, "%.*s: out of memory", (int)plen, path);
        r->io.name = r->path;
    }
    if (rc == 0)
        rc = pq_open(&r->io, &r->f, err, errlen);
    if (rc < 0)
        return fail(r, rc);
    return resolve_columns(r);
}

/* Opens the next entry: a whole file, or one row group of one. Returns 1 when one is open, 0
 * when there are no more, or an error. */
static int open_next(struct pq_reader *r)
{
    if (r->next_path == r->npaths)
        return 0;
    const char *name = r->paths[r->next_path++];
    size_t plen = strlen(name);
    uint64_t one = 0;
    bool single = pipe_parquet_row_group_of(name, &plen, &one);
    int rc = open_file(r, name, plen);
    if (rc < 0)
        return rc;
    size_t ngroups = pq_num_row_groups(r->f);
    if (single && one >= ngroups)
        return failf(r, SLUICE_ERR_INVALID,
                     "%s: row group %" PRIu64 " asked for, the file has %zu (did it change "
                     "after the dataset was planned?)",
                     r->path, one, ngroups);
    r->rg = single ? (size_t)one : 0;
    r->rg_end = single ? (size_t)one + 1 : ngroups;
    r->row = 0;
    for (size_t g = 0; g < r->rg; g++)
        r->row += pq_row_group_rows(r->f, g);
    r->rg_open = false;
    return 1;
}

int pipe_parquet_row_groups(const struct pipe_roots *roots, char *const *files, size_t nfiles,
                            char ***names, size_t *nnames, char *err, size_t errlen)
{
    *names = NULL;
    *nnames = 0;
    size_t cap = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < nfiles; i++) {
        int fd;
        struct obj_reader *obj;
        struct pq_io io;
        struct pq_file *f = NULL;
        rc = open_io(roots, files[i], NULL, &fd, &obj, &io, err, errlen);
        if (rc == 0)
            rc = pq_open(&io, &f, err, errlen);
        size_t n = rc == 0 ? pq_num_row_groups(f) : 0;
        for (size_t g = 0; rc == 0 && g < n; g++) {
            if (*nnames == cap) {
                size_t ncap = cap ? 2 * cap : 64;
                char **v = realloc(*names, ncap * sizeof *v);
                if (!v) {
                    rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
                    break;
                }
                *names = v;
                cap = ncap;
            }
            char *name = NULL;
            if (asprintf(&name, "%s" PIPE_PARQUET_ROW_GROUP_MARK "%zu", files[i], g) < 0) {
                rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
                break;
            }
            (*names)[(*nnames)++] = name;
        }
        pq_close(f);
        if (fd >= 0)
            close(fd);
        obj_close(obj);
    }
    if (rc < 0) {
        pipe_paths_free(*names, *nnames);
        *names = NULL;
        *nnames = 0;
    }
    return rc;
}

/* Opens the cursors of the current row group. */
static int open_row_group(struct pq_reader *r)
{
    char *err = r->base.ctx->err;
    size_t errlen = sizeof r->base.ctx->err;
    for (size_t i = 0; i < r->ncols; i++) {
        int rc = pq_cursor_open(r->f, r->rg, r->cols[i].index, &r->cols[i].cur, err, errlen);
        if (rc < 0)
            return fail(r, rc);
    }
    r->rg_left = pq_row_group_rows(r->f, r->rg);
    r->rg_open = true;
    return 0;
}

static int read_row(struct pq_reader *r, struct sluice_element *out)
{
    char *err = r->base.ctx->err;
    size_t errlen = sizeof r->base.ctx->err;
    int rc = pipe_elem_resize(out, r->ncols);
    if (rc < 0)
        return failf(r, rc, "%s: out of memory", r->path);
    for (size_t i = 0; i < r->ncols; i++) {
        struct column *c = &r->cols[i];
        rc = pq_cursor_next(c->cur, &out->t[i], err, errlen);
        if (rc < 0)
            return fail(r, rc);
        if (rc == PQ_END)
            return failf(r, SLUICE_ERR_CORRUPT,
                         "%s: row group %zu: column %s: ends before the row group's %" PRIu64
                         " rows",
                         r->path, r->rg, c->name, pq_row_group_rows(r->f, r->rg));
        if (rc == PQ_NULL) {
            if (!c->has_default)
                return failf(r, SLUICE_ERR_INVALID,
                             "%s: row group %zu: column %s: row %" PRIu64
                             ": null (give the column a default: \"%s=VALUE\")",
                             r->path, r->rg, c->name, r->row, c->name);
            rc = put_default(&out->t[i], &c->fill);
            if (rc < 0)
                return failf(r, rc, "%s: out of memory", r->path);
        }
    }
    r->rg_left--;
    r->row++;
    if (pipe_over_limit(r->base.ctx, pipe_elem_size(out))) {
        char what[64];
        snprintf(what, sizeof what, "row %" PRIu64 ": ", r->row - 1);
        rc = pipe_limit_fail(r->base.ctx, what, pipe_elem_size(out), false);
        return fail(r, rc);
    }
    return 1;
}

static int pq_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct pq_reader *r = (struct pq_reader *)it;
    if (r->status <= 0)
        return r->status;
    for (;;) {
        if (!r->f) {
            int rc = open_next(r);
            if (rc < 0)
                return rc;
            if (rc == 0) {
                r->status = 0;
                return 0;
            }
        }
        if (r->rg_open && r->rg_left > 0)
            return read_row(r, out);
        if (r->rg_open) {
            close_cursors(r);
            r->rg++;
        }
        if (r->rg >= r->rg_end) {
            /* The entry is read; the next may be a row group of the same file, which stays
             * open for it. */
            int rc = open_next(r);
            if (rc < 0)
                return rc;
            if (rc == 0) {
                close_file(r);
                r->status = 0;
                return 0;
            }
            continue;
        }
        int rc = open_row_group(r);
        if (rc < 0)
            return rc;
    }
}

static void pq_destroy(struct pipe_iter *it)
{
    struct pq_reader *r = (struct pq_reader *)it;
    if (!r)
        return;
    close_file(r);
    for (size_t i = 0; i < r->capcols; i++) {
        free((char *)r->cols[i].name);
        free(r->cols[i].fill.data);
        free(r->cols[i].fill.offs);
    }
    free(r->cols);
    pipe_paths_free(r->paths, r->npaths);
    pipe_paths_free(r->args, r->nargs);
    free(r);
}

static const struct pipe_iter_ops pq_ops = {.next = pq_next, .destroy = pq_destroy};

int pipe_parquet_open(char *const *paths, size_t npaths, char *const *columns, size_t ncolumns,
                      struct pipe_ctx *ctx, struct pipe_iter **out)
{
    if (ncolumns > PIPE_MAX_COMPONENTS)
        return SLUICE_ERR_INVALID;
    for (size_t i = 0; i < ncolumns; i++)
        if (pipe_parquet_column_problem(columns[i]))
            return SLUICE_ERR_INVALID;
    struct pq_reader *r = calloc(1, sizeof *r);
    if (!r)
        return SLUICE_ERR_NOMEM;
    r->base.ops = &pq_ops;
    r->base.ctx = ctx;
    r->fd = -1;
    r->status = 1;
    if (pipe_paths_copy(paths, npaths, &r->paths, &r->npaths) < 0 ||
        pipe_paths_copy(columns, ncolumns, &r->args, &r->nargs) < 0) {
        pq_destroy(&r->base);
        return SLUICE_ERR_NOMEM;
    }
    *out = &r->base;
    return 0;
}
