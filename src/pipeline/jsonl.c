/* jsonl(): the lines of lines() parsed as JSON objects, their fields made components.
 *
 * Happy path: take the next line from the lines reader, count it (the line number restarts when
 * the reader moves to another file, which its origin tells), skip it when blank, parse it, and
 * convert each asked-for field. The first failure is recorded once in the context's message and
 * returned by every later next(). */
#include "jsonl.h"

#include "files.h"
#include "paths.h"
#include "spec.h"

#include "common/error.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jsonl_reader {
    struct pipe_iter base;
    struct pipe_iter *lines; /* the lines() reader beneath */
    char **fields;           /* owned copies */
    size_t nfields;
    struct sluice_element line; /* the current line */
    const char *file;           /* the file of the last line (the lines reader's string) */
    uint64_t lineno;            /* its number in that file, from 1 */
    int status;                 /* 1 running, 0 ended, negative after an error */
};

static int fail(struct jsonl_reader *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct jsonl_reader *r, int code, const char *fmt, ...)
{
    char *err = r->base.ctx->err;
    size_t errlen = sizeof r->base.ctx->err;
    int n = snprintf(err, errlen, "%s: line %" PRIu64 ": ", r->file ? r->file : "jsonl", r->lineno);
    if (n >= 0 && (size_t)n < errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    r->status = code;
    return code;
}

static bool blank(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
            return false;
    return true;
}

/* Makes t a 1-D tensor of n values of dtype (bytes: total string bytes in len). */
static int shape_1d(struct pipe_tensor *t, enum sluice_dtype dtype, size_t n, size_t len)
{
    t->dtype = dtype;
    int rc = pipe_tensor_reserve(t, len, n);
    if (rc)
        return rc;
    t->rank = 1;
    t->shape[0] = (int64_t)n;
    t->len = len;
    return 0;
}

/* Converts an array into t: int64, float64 or bytes as its items are, else SLUICE_ERR_INVALID. */
static int put_array(const json_t *a, struct pipe_tensor *t)
{
    size_t n = json_array_size(a);
    bool ints = true, numbers = true, strings = true;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        ints = ints && json_is_integer(v);
        numbers = numbers && json_is_number(v);
        strings = strings && json_is_string(v);
        if (json_is_string(v))
            bytes += json_string_length(v);
    }
    if (n == 0)
        return shape_1d(t, SLUICE_FLOAT64, 0, 0);
    if (strings) {
        int rc = shape_1d(t, SLUICE_BYTES, n, bytes);
        if (rc)
            return rc;
        size_t at = 0;
        t->offs[0] = 0;
        for (size_t i = 0; i < n; i++) {
            const json_t *v = json_array_get(a, i);
            size_t len = json_string_length(v);
            memcpy(t->data + at, json_string_value(v), len);
            at += len;
            t->offs[i + 1] = at;
        }
        return 0;
    }
    if (!numbers)
        return SLUICE_ERR_INVALID;
    int rc = shape_1d(t, ints ? SLUICE_INT64 : SLUICE_FLOAT64, n, n * 8);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (ints) {
            int64_t x = (int64_t)json_integer_value(v);
            memcpy(t->data + 8 * i, &x, 8);
        } else {
            double x = json_number_value(v);
            memcpy(t->data + 8 * i, &x, 8);
        }
    }
    return 0;
}

/* Converts field k of obj into out->t[k]. */
static int put_field(struct jsonl_reader *r, const json_t *obj, size_t k,
                     struct sluice_element *out)
{
    const char *name = r->fields[k];
    const json_t *v = json_object_get(obj, name);
    struct pipe_tensor *t = &out->t[k];
    int rc;
    if (!v)
        return fail(r, SLUICE_ERR_INVALID, "field \"%s\": missing", name);
    switch (json_typeof(v)) {
    case JSON_STRING:
        rc = pipe_tensor_set_bytes(t, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER: {
        int64_t x = (int64_t)json_integer_value(v);
        rc = pipe_tensor_set_scalar(t, SLUICE_INT64, &x);
        break;
    }
    case JSON_REAL: {
        double x = json_real_value(v);
        rc = pipe_tensor_set_scalar(t, SLUICE_FLOAT64, &x);
        break;
    }
    case JSON_TRUE:
    case JSON_FALSE: {
        uint8_t x = json_is_true(v);
        rc = pipe_tensor_set_scalar(t, SLUICE_BOOL, &x);
        break;
    }
    case JSON_ARRAY:
        rc = put_array(v, t);
        if (rc == SLUICE_ERR_INVALID)
            return fail(r, rc, "field \"%s\": an array of mixed or nested values", name);
        break;
    case JSON_NULL:
        return fail(r, SLUICE_ERR_INVALID, "field \"%s\": null", name);
    case JSON_OBJECT:
    default:
        return fail(r, SLUICE_ERR_INVALID,
                    "field \"%s\": an object, expected a string, number, boolean or array", name);
    }
    if (rc < 0)
        return fail(r, rc, "field \"%s\": %s", name, sluice_strerror(rc));
    return 0;
}

static int jsonl_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct jsonl_reader *r = (struct jsonl_reader *)it;
    if (r->status <= 0)
        return r->status;
    for (;;) {
        int rc = pipe_next(r->lines, &r->line);
        if (rc <= 0) {
            r->status = rc;
            return rc;
        }
        const char *file = r->base.ctx->origin.file;
        if (file != r->file || !file) {
            r->file = file;
            r->lineno = 0;
        }
        r->lineno++;
        const struct pipe_tensor *l = &r->line.t[0];
        if (blank(l->data, l->len))
            continue;
        json_error_t jerr;
        json_t *obj = json_loadb((const char *)l->data, l->len, JSON_DECODE_ANY, &jerr);
        if (!obj)
            return fail(r, SLUICE_ERR_INVALID, "not JSON: %s", jerr.text);
        if (!json_is_object(obj)) {
            json_decref(obj);
            return fail(r, SLUICE_ERR_INVALID, "not a JSON object");
        }
        rc = pipe_elem_resize(out, r->nfields);
        for (size_t k = 0; rc == 0 && k < r->nfields; k++)
            rc = put_field(r, obj, k, out);
        json_decref(obj);
        if (rc < 0)
            return r->status < 0 ? r->status : fail(r, rc, "%s", sluice_strerror(rc));
        if (pipe_over_limit(r->base.ctx, pipe_elem_size(out))) {
            char what[64];
            snprintf(what, sizeof what, "line %" PRIu64 ": ", r->lineno);
            r->status = pipe_limit_fail(r->base.ctx, what, pipe_elem_size(out), false);
            return r->status;
        }
        return 1;
    }
}

static void jsonl_destroy(struct pipe_iter *it)
{
    struct jsonl_reader *r = (struct jsonl_reader *)it;
    if (!r)
        return;
    if (r->lines)
        r->lines->ops->destroy(r->lines);
    pipe_elem_release(&r->line);
    pipe_paths_free(r->fields, r->nfields);
    free(r);
}

static const struct pipe_iter_ops jsonl_ops = {.next = jsonl_next, .destroy = jsonl_destroy};

int pipe_jsonl_open(char *const *paths, size_t npaths, char *const *fields, size_t nfields,
                    struct pipe_ctx *ctx, struct pipe_iter **out)
{
    if (nfields == 0 || nfields > PIPE_MAX_COMPONENTS)
        return SLUICE_ERR_INVALID;
    for (size_t i = 0; i < nfields; i++)
        if (pipe_jsonl_field_problem(fields[i]))
            return SLUICE_ERR_INVALID;
    struct jsonl_reader *r = calloc(1, sizeof *r);
    if (!r)
        return SLUICE_ERR_NOMEM;
    r->base.ops = &jsonl_ops;
    r->base.ctx = ctx;
    r->status = 1;
    pipe_elem_init(&r->line);
    int rc = pipe_paths_copy(fields, nfields, &r->fields, &r->nfields);
    if (rc == 0)
        rc = pipe_lines_open(paths, npaths, ctx, &r->lines);
    if (rc < 0) {
        jsonl_destroy(&r->base);
        return rc;
    }
    *out = &r->base;
    return 0;
}
