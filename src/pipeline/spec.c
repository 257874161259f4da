/* Specs: release, deep copy, structural equality and the canonical text form.
 *
 * Every function here looks only at the fields that belong to a source's or an op's kind (a
 * batch has no function name, repeat() has no meaningful n), so two specs are equal exactly when
 * their canonical texts are equal. Values nest at most a few levels (the parser and the decoder
 * bound list nesting by the maximum rank), so the recursion over values is bounded. */
#include "spec.h"
#include "wds.h"

#include "common/error.h"
#include "format.h"
#include "pack.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Release ------------------------------------------------------------------------------ */

void pipe_value_release(struct pipe_value *v)
{
    if (!v)
        return;
    free(v->s);
    for (size_t i = 0; i < v->nitems; i++)
        pipe_value_release(&v->items[i]);
    free(v->items);
    v->s = NULL;
    v->slen = 0;
    v->items = NULL;
    v->nitems = 0;
}

static void values_free(struct pipe_value *values, size_t n)
{
    for (size_t i = 0; i < n; i++)
        pipe_value_release(&values[i]);
    free(values);
}

void pipe_spec_free(struct pipe_spec *spec)
{
    if (!spec)
        return;
    values_free(spec->source.values, spec->source.nvalues);
    for (size_t i = 0; i < spec->source.nglobs; i++)
        free(spec->source.globs[i]);
    free(spec->source.globs);
    for (size_t i = 0; i < spec->source.nexts; i++)
        free(spec->source.exts[i]);
    free(spec->source.exts);
    for (size_t i = 0; i < spec->source.ncolumns; i++)
        free(spec->source.columns[i]);
    free(spec->source.columns);
    for (size_t i = 0; i < spec->source.ninputs; i++)
        pipe_spec_free(spec->source.inputs[i]);
    free(spec->source.inputs);
    free(spec->source.weights);
    pipe_spec_free(spec->source.choice);
    for (size_t i = 0; i < spec->nops; i++) {
        free(spec->ops[i].fn);
        values_free(spec->ops[i].args, spec->ops[i].nargs);
    }
    free(spec->ops);
    free(spec);
}

/* ---- Clone -------------------------------------------------------------------------------- */

static int value_clone(const struct pipe_value *src, struct pipe_value *dst);

/* Copies n values into a new array; on failure nothing is left allocated. */
static int values_clone(const struct pipe_value *src, size_t n, struct pipe_value **out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    struct pipe_value *dst = calloc(n, sizeof(*dst));
    if (!dst)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = value_clone(&src[i], &dst[i]);
        if (rc) {
            values_free(dst, i);
            return rc;
        }
    }
    *out = dst;
    return 0;
}

static int value_clone(const struct pipe_value *src, struct pipe_value *dst)
{
    *dst = *src;
    dst->s = NULL;
    dst->items = NULL;
    if (src->s) {
        dst->s = malloc(src->slen + 1);
        if (!dst->s)
            return SLUICE_ERR_NOMEM;
        memcpy(dst->s, src->s, src->slen);
        dst->s[src->slen] = '\0';
    }
    int rc = values_clone(src->items, src->nitems, &dst->items);
    if (rc) {
        free(dst->s);
        dst->s = NULL;
        return rc;
    }
    return 0;
}

static char *str_clone(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Copies n strings into a new array at *out, raising *nout as each is copied, so a partial copy
 * is released with the rest of its spec. */
static int strs_clone(char *const *src, size_t n, char ***out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    if (n == 0)
        return 0;
    if (!(*out = calloc(n, sizeof(**out))))
        return SLUICE_ERR_NOMEM;
    for (; *nout < n; (*nout)++)
        if (!((*out)[*nout] = str_clone(src[*nout])))
            return SLUICE_ERR_NOMEM;
    return 0;
}

int pipe_spec_clone(const struct pipe_spec *spec, struct pipe_spec **out)
{
    *out = NULL;
    struct pipe_spec *c = calloc(1, sizeof(*c));
    if (!c)
        return SLUICE_ERR_NOMEM;
    /* Counts are raised only as entries are copied, so pipe_spec_free() can undo a partial copy. */
    const struct pipe_source *ss = &spec->source;
    struct pipe_source *cs = &c->source;
    c->deterministic = spec->deterministic;
    cs->kind = ss->kind;
    cs->start = ss->start;
    cs->stop = ss->stop;
    cs->step = ss->step;
    cs->column = ss->column;
    cs->seed = ss->seed;
    cs->stop_on_empty = ss->stop_on_empty;
    if (ss->ninputs) {
        if (!(cs->inputs = calloc(ss->ninputs, sizeof(*cs->inputs))))
            goto fail;
        for (; cs->ninputs < ss->ninputs; cs->ninputs++)
            if (pipe_spec_clone(ss->inputs[cs->ninputs], &cs->inputs[cs->ninputs]))
                goto fail;
    }
    if (ss->nweights) {
        if (!(cs->weights = malloc(ss->nweights * sizeof(*cs->weights))))
            goto fail;
        memcpy(cs->weights, ss->weights, ss->nweights * sizeof(*cs->weights));
        cs->nweights = ss->nweights;
    }
    if (ss->choice && pipe_spec_clone(ss->choice, &cs->choice))
        goto fail;
    if (values_clone(ss->values, ss->nvalues, &cs->values))
        goto fail;
    cs->nvalues = ss->nvalues;
    if (strs_clone(ss->globs, ss->nglobs, &cs->globs, &cs->nglobs) < 0 ||
        strs_clone(ss->exts, ss->nexts, &cs->exts, &cs->nexts) < 0 ||
        strs_clone(ss->columns, ss->ncolumns, &cs->columns, &cs->ncolumns) < 0)
        goto fail;
    if (spec->nops) {
        c->ops = calloc(spec->nops, sizeof(*c->ops));
        if (!c->ops)
            goto fail;
        for (; c->nops < spec->nops; c->nops++) {
            const struct pipe_op *so = &spec->ops[c->nops];
            struct pipe_op *co = &c->ops[c->nops];
            *co = *so;
            co->fn = NULL;
            co->args = NULL;
            co->nargs = 0;
            if (so->fn && !(co->fn = str_clone(so->fn)))
                goto fail;
            if (values_clone(so->args, so->nargs, &co->args))
                goto fail;
            co->nargs = so->nargs;
        }
    }
    *out = c;
    return 0;

fail:
    pipe_spec_free(c);
    return SLUICE_ERR_NOMEM;
}

/* ---- Equality ----------------------------------------------------------------------------- */

static bool value_equal(const struct pipe_value *a, const struct pipe_value *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case PIPE_VAL_INT:
        return a->i == b->i;
    case PIPE_VAL_BOOL:
        return (a->i != 0) == (b->i != 0);
    case PIPE_VAL_FLOAT:
        /* Bitwise, so that -0.0 and 0.0 differ: the canonical text keeps the sign. */
        return memcmp(&a->f, &b->f, sizeof(a->f)) == 0;
    case PIPE_VAL_BYTES:
        return a->slen == b->slen && (a->slen == 0 || memcmp(a->s, b->s, a->slen) == 0);
    case PIPE_VAL_LIST:
    case PIPE_VAL_TUPLE:
        if (a->nitems != b->nitems)
            return false;
        for (size_t i = 0; i < a->nitems; i++)
            if (!value_equal(&a->items[i], &b->items[i]))
                return false;
        return true;
    }
    return false;
}

static bool values_equal(const struct pipe_value *a, size_t na, const struct pipe_value *b,
                         size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (!value_equal(&a[i], &b[i]))
            return false;
    return true;
}

static bool strs_equal(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

static bool inputs_equal(const struct pipe_source *a, const struct pipe_source *b)
{
    if (a->ninputs != b->ninputs || a->stop_on_empty != b->stop_on_empty)
        return false;
    for (size_t i = 0; i < a->ninputs; i++)
        if (!pipe_spec_equal(a->inputs[i], b->inputs[i]))
            return false;
    return true;
}

static bool source_equal(const struct pipe_source *a, const struct pipe_source *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case PIPE_SRC_SAMPLE:
        /* Bitwise, as floats in values: the canonical text keeps every bit. */
        return inputs_equal(a, b) && a->seed == b->seed && a->nweights == b->nweights &&
               (a->nweights == 0 ||
                memcmp(a->weights, b->weights, a->nweights * sizeof(*a->weights)) == 0);
    case PIPE_SRC_CHOOSE:
        return inputs_equal(a, b) && (a->choice == NULL) == (b->choice == NULL) &&
               (!a->choice || pipe_spec_equal(a->choice, b->choice));
    case PIPE_SRC_RANGE:
        return a->start == b->start && a->stop == b->stop && a->step == b->step;
    case PIPE_SRC_LIST:
        return values_equal(a->values, a->nvalues, b->values, b->nvalues);
    case PIPE_SRC_TFRECORD:
    case PIPE_SRC_LINES:
    case PIPE_SRC_SNAPSHOT:
    case PIPE_SRC_MEGATRON:
        return strs_equal(a->globs, a->nglobs, b->globs, b->nglobs);
    case PIPE_SRC_TAR:
        return strs_equal(a->globs, a->nglobs, b->globs, b->nglobs) &&
               strs_equal(a->exts, a->nexts, b->exts, b->nexts);
    case PIPE_SRC_PARQUET:
    case PIPE_SRC_JSONL:
        return strs_equal(a->globs, a->nglobs, b->globs, b->nglobs) &&
               strs_equal(a->columns, a->ncolumns, b->columns, b->ncolumns);
    }
    return false;
}

static bool op_equal(const struct pipe_op *a, const struct pipe_op *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case PIPE_OP_MAP:
    case PIPE_OP_FILTER:
        return strcmp(a->fn ? a->fn : "", b->fn ? b->fn : "") == 0 &&
               values_equal(a->args, a->nargs, b->args, b->nargs);
    case PIPE_OP_SHUFFLE:
        return a->n == b->n && a->has_seed == b->has_seed && (!a->has_seed || a->seed == b->seed);
    case PIPE_OP_GLOBAL_SHUFFLE:
        return a->seed == b->seed;
    case PIPE_OP_BATCH:
        return a->n == b->n && a->drop_remainder == b->drop_remainder;
    case PIPE_OP_PACK:
        return a->n == b->n && a->first_fit == b->first_fit && a->window == b->window;
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
    case PIPE_OP_PREFETCH:
        return a->n == b->n;
    case PIPE_OP_REPEAT:
        return a->has_n == b->has_n && (!a->has_n || a->n == b->n);
    case PIPE_OP_SHARD:
        return a->n_is_hint == b->n_is_hint && (a->n_is_hint || a->n == b->n) &&
               a->index_is_hint == b->index_is_hint && (a->index_is_hint || a->index == b->index);
    }
    return false;
}

bool pipe_spec_equal(const struct pipe_spec *a, const struct pipe_spec *b)
{
    if (!source_equal(&a->source, &b->source) || a->nops != b->nops)
        return false;
    for (size_t i = 0; i < a->nops; i++)
        if (!op_equal(&a->ops[i], &b->ops[i]))
            return false;
    return true;
}

/* ---- Canonical text ----------------------------------------------------------------------- */

/* Writes like snprintf: counts every byte, stores only what fits (leaving room for the NUL). */
struct sink {
    char *buf;
    size_t len;
    size_t pos;
};

static void put(struct sink *k, const char *s, size_t n)
{
    if (k->pos < k->len) {
        size_t room = k->len - 1 - k->pos;
        memcpy(k->buf + k->pos, s, n < room ? n : room);
    }
    k->pos += n;
}

static void puts_(struct sink *k, const char *s)
{
    put(k, s, strlen(s));
}

static void put_i64(struct sink *k, int64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%" PRId64, v);
    put(k, tmp, (size_t)n);
}

/* A string literal: quotes, with \\ \" \n \t and every byte outside 0x20-0x7e as \xNN, so the
 * canonical text is plain printable ASCII. */
static void put_quoted(struct sink *k, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    put(k, "\"", 1);
    size_t run = 0; /* bytes of s[i - run .. i) that need no escape, written in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[4];
        size_t elen = 0;
        if (c == '\\' || c == '"') {
            esc[0] = '\\';
            esc[1] = (char)c;
            elen = 2;
        } else if (c == '\n') {
            memcpy(esc, "\\n", 2);
            elen = 2;
        } else if (c == '\t') {
            memcpy(esc, "\\t", 2);
            elen = 2;
        } else if (c < 0x20 || c > 0x7e) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[c >> 4];
            esc[3] = hex[c & 15];
            elen = 4;
        }
        if (elen == 0) {
            run++;
            continue;
        }
        put(k, s + i - run, run);
        run = 0;
        put(k, esc, elen);
    }
    put(k, s + n - run, run);
    put(k, "\"", 1);
}

static void put_value(struct sink *k, const struct pipe_value *v)
{
    switch (v->kind) {
    case PIPE_VAL_INT:
        put_i64(k, v->i);
        return;
    case PIPE_VAL_BOOL:
        puts_(k, v->i ? "true" : "false");
        return;
    case PIPE_VAL_FLOAT: {
        char tmp[PIPE_FLOAT_BUF + 2];
        size_t n = pipe_format_f64(v->f, tmp);
        /* A float literal needs a '.' or an exponent, or it would read back as an integer. */
        if (!memchr(tmp, '.', n) && !memchr(tmp, 'e', n)) {
            memcpy(tmp + n, ".0", 3);
            n += 2;
        }
        put(k, tmp, n);
        return;
    }
    case PIPE_VAL_BYTES:
        put_quoted(k, v->s ? v->s : "", v->slen);
        return;
    case PIPE_VAL_LIST:
    case PIPE_VAL_TUPLE:
        put(k, v->kind == PIPE_VAL_LIST ? "[" : "(", 1);
        for (size_t i = 0; i < v->nitems; i++) {
            if (i)
                put(k, ", ", 2);
            put_value(k, &v->items[i]);
        }
        put(k, v->kind == PIPE_VAL_LIST ? "]" : ")", 1);
        return;
    }
}

static void put_values(struct sink *k, const struct pipe_value *v, size_t n, bool lead_comma)
{
    for (size_t i = 0; i < n; i++) {
        if (i || lead_comma)
            put(k, ", ", 2);
        put_value(k, &v[i]);
    }
}

/* Writes "\"a\", \"b\"". */
static void put_strs(struct sink *k, char *const *strs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            put(k, ", ", 2);
        put_quoted(k, strs[i], strlen(strs[i]));
    }
}

static void put_source(struct sink *k, const struct pipe_source *s);
static void put_op(struct sink *k, const struct pipe_op *op);

/* A whole pipeline in parentheses, as a mix's input or choice. */
static void put_spec(struct sink *k, const struct pipe_spec *spec)
{
    put(k, "(", 1);
    put_source(k, &spec->source);
    for (size_t i = 0; i < spec->nops; i++) {
        put(k, " | ", 3);
        put_op(k, &spec->ops[i]);
    }
    put(k, ")", 1);
}

static void put_float(struct sink *k, double f)
{
    struct pipe_value v = {.kind = PIPE_VAL_FLOAT, .f = f};
    put_value(k, &v);
}

static void put_source(struct sink *k, const struct pipe_source *s)
{
    switch (s->kind) {
    case PIPE_SRC_SAMPLE:
    case PIPE_SRC_CHOOSE:
        puts_(k, s->kind == PIPE_SRC_SAMPLE ? "sample_from_datasets([" : "choose_from_datasets([");
        for (size_t i = 0; i < s->ninputs; i++) {
            if (i)
                put(k, ", ", 2);
            put_spec(k, s->inputs[i]);
        }
        put(k, "], ", 3);
        if (s->kind == PIPE_SRC_SAMPLE) {
            put(k, "[", 1);
            for (size_t i = 0; i < s->nweights; i++) {
                if (i)
                    put(k, ", ", 2);
                put_float(k, s->weights[i]);
            }
            put(k, "], ", 3);
            put_i64(k, s->seed);
            if (s->stop_on_empty)
                puts_(k, ", stop_on_empty");
        } else {
            if (s->choice)
                put_spec(k, s->choice);
            if (!s->stop_on_empty)
                puts_(k, ", false");
        }
        put(k, ")", 1);
        return;
    case PIPE_SRC_RANGE:
        puts_(k, "range(");
        if (s->start != 0 || s->step != 1) {
            put_i64(k, s->start);
            put(k, ", ", 2);
        }
        put_i64(k, s->stop);
        if (s->step != 1) {
            put(k, ", ", 2);
            put_i64(k, s->step);
        }
        put(k, ")", 1);
        return;
    case PIPE_SRC_LIST:
        puts_(k, "list(");
        put_values(k, s->values, s->nvalues, false);
        put(k, ")", 1);
        return;
    case PIPE_SRC_TFRECORD:
    case PIPE_SRC_LINES:
        puts_(k, s->kind == PIPE_SRC_TFRECORD ? "tfrecord(" : "lines(");
        put_strs(k, s->globs, s->nglobs);
        put(k, ")", 1);
        return;
    case PIPE_SRC_TAR:
    case PIPE_SRC_PARQUET:
    case PIPE_SRC_JSONL: {
        /* One pattern is written bare, several as a [list] (static file sharding makes those),
         * so the extensions, columns or fields that follow are never mistaken for patterns. */
        bool tar = s->kind == PIPE_SRC_TAR;
        puts_(k, tar ? "tar(" : s->kind == PIPE_SRC_PARQUET ? "parquet(" : "jsonl(");
        if (s->nglobs != 1)
            put(k, "[", 1);
        put_strs(k, s->globs, s->nglobs);
        if (s->nglobs != 1)
            put(k, "]", 1);
        if (tar ? s->nexts : s->ncolumns)
            put(k, ", ", 2);
        put_strs(k, tar ? s->exts : s->columns, tar ? s->nexts : s->ncolumns);
        put(k, ")", 1);
        return;
    }
    case PIPE_SRC_SNAPSHOT:
    case PIPE_SRC_MEGATRON:
        puts_(k, s->kind == PIPE_SRC_SNAPSHOT ? "snapshot(" : "megatron(");
        put_strs(k, s->globs, s->nglobs);
        put(k, ")", 1);
        return;
    }
}

static void put_op(struct sink *k, const struct pipe_op *op)
{
    switch (op->kind) {
    case PIPE_OP_MAP:
    case PIPE_OP_FILTER:
        puts_(k, op->kind == PIPE_OP_MAP ? "map(" : "filter(");
        puts_(k, op->fn ? op->fn : "");
        put_values(k, op->args, op->nargs, true);
        break;
    case PIPE_OP_GLOBAL_SHUFFLE:
        puts_(k, "global_shuffle(");
        put_i64(k, op->seed);
        break;
    case PIPE_OP_SHUFFLE:
        puts_(k, "shuffle(");
        put_i64(k, op->n);
        if (op->has_seed) {
            put(k, ", ", 2);
            put_i64(k, op->seed);
        }
        break;
    case PIPE_OP_BATCH:
        puts_(k, "batch(");
        put_i64(k, op->n);
        if (op->drop_remainder)
            puts_(k, ", drop_remainder");
        break;
    case PIPE_OP_PACK:
        puts_(k, "pack(");
        put_i64(k, op->n);
        if (op->first_fit || op->window != PIPE_PACK_WINDOW_DEFAULT)
            puts_(k, op->first_fit ? ", \"first_fit\"" : ", \"best_fit\"");
        if (op->window != PIPE_PACK_WINDOW_DEFAULT) {
            put(k, ", ", 2);
            put_i64(k, op->window);
        }
        break;
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
    case PIPE_OP_PREFETCH:
        puts_(k, op->kind == PIPE_OP_TAKE   ? "take("
                 : op->kind == PIPE_OP_SKIP ? "skip("
                                            : "prefetch(");
        put_i64(k, op->n);
        break;
    case PIPE_OP_REPEAT:
        puts_(k, "repeat(");
        if (op->has_n)
            put_i64(k, op->n);
        break;
    case PIPE_OP_SHARD:
        puts_(k, "shard(");
        if (op->n_is_hint)
            puts_(k, "SHARD_HINT");
        else
            put_i64(k, op->n);
        put(k, ", ", 2);
        if (op->index_is_hint)
            puts_(k, "SHARD_HINT");
        else
            put_i64(k, op->index);
        break;
    }
    put(k, ")", 1);
}

static int format_ops(const struct pipe_spec *spec, bool source, size_t from, size_t to, char *buf,
                      size_t len)
{
    struct sink k = {buf, len, 0};
    if (source)
        put_source(&k, &spec->source);
    for (size_t i = from; i < to && i < spec->nops; i++) {
        if (source || i > from)
            put(&k, " | ", 3);
        put_op(&k, &spec->ops[i]);
    }
    if (len > 0)
        buf[k.pos < len ? k.pos : len - 1] = '\0';
    if (k.pos > INT_MAX)
        return SLUICE_ERR_TOO_LARGE;
    return (int)k.pos;
}

int pipe_spec_format(const struct pipe_spec *spec, char *buf, size_t len)
{
    return format_ops(spec, true, 0, spec->nops, buf, len);
}

int pipe_spec_format_ops(const struct pipe_spec *spec, size_t from, size_t to, char *buf,
                         size_t len)
{
    return format_ops(spec, false, from, to, buf, len);
}

/* Whether a mix never ends: sample_from_datasets while an input with a weight does (every such
 * input, with stop_on_empty), choose_from_datasets while its choice pipeline does. */
static bool source_endless(const struct pipe_source *s)
{
    if (s->kind == PIPE_SRC_CHOOSE)
        return s->choice && pipe_spec_endless(s->choice);
    if (s->kind != PIPE_SRC_SAMPLE)
        return false;
    bool any = false, all = true;
    for (size_t i = 0; i < s->ninputs && i < s->nweights; i++) {
        if (s->weights[i] <= 0)
            continue;
        bool e = pipe_spec_endless(s->inputs[i]);
        any = any || e;
        all = all && e;
    }
    return s->stop_on_empty ? all && any : any;
}

bool pipe_spec_endless(const struct pipe_spec *spec)
{
    bool endless = source_endless(&spec->source);
    for (size_t i = 0; i < spec->nops; i++) {
        const struct pipe_op *op = &spec->ops[i];
        if (op->kind == PIPE_OP_REPEAT) {
            if (op->has_n && op->n == 0)
                endless = false; /* repeat(0) yields nothing */
            else if (!op->has_n || op->n < 0)
                endless = true;
        } else if (op->kind == PIPE_OP_TAKE && op->n >= 0) {
            endless = false;
        }
    }
    return endless;
}

const struct pipe_op *pipe_spec_first_repeat(const struct pipe_spec *spec)
{
    for (size_t k = 0; k < spec->nops; k++) {
        const struct pipe_op *op = &spec->ops[k];
        if (op->kind == PIPE_OP_REPEAT && !(op->has_n && op->n == 1))
            return op;
    }
    return NULL;
}

uint64_t pipe_range_len(int64_t start, int64_t stop, int64_t step)
{
    /* Differences are taken in uint64_t, where stop - start cannot overflow once ordered. */
    if (step > 0) {
        if (stop <= start)
            return 0;
        return ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
    }
    if (step < 0) {
        if (stop >= start)
            return 0;
        uint64_t mag = (uint64_t)0 - (uint64_t)step;
        return ((uint64_t)start - (uint64_t)stop - 1) / mag + 1;
    }
    return 0;
}

/* ---- Source arguments ---------------------------------------------------------------------- */

const char *pipe_mix_problem(const struct pipe_source *src)
{
    if (src->ninputs == 0)
        return "at least one input pipeline";
    if (src->ninputs > PIPE_MIX_MAX_INPUTS)
        return "at most 64 input pipelines";
    if (src->kind == PIPE_SRC_CHOOSE)
        return src->choice ? NULL : "a choice pipeline";
    if (src->nweights != src->ninputs)
        return "one weight per input pipeline";
    bool any = false;
    for (size_t i = 0; i < src->nweights; i++) {
        double w = src->weights[i];
        if (!isfinite(w) || w < 0)
            return "weights that are finite numbers >= 0";
        any = any || w > 0;
    }
    return any ? NULL : "at least one weight above 0";
}

/* A column or field name: 1 to 255 bytes without control characters ("what" names it). */
static const char *name_problem(const char *s, size_t n, bool column)
{
    if (n == 0)
        return column ? "a column name before any '='" : "a non-empty field name";
    if (n > 255)
        return column ? "a column name of at most 255 bytes" : "a field name of at most 255 bytes";
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return column ? "a column without control characters"
                          : "a field name without control characters";
    return NULL;
}

size_t pipe_parquet_column_name_len(const char *arg)
{
    const char *eq = strchr(arg, '=');
    return eq ? (size_t)(eq - arg) : strlen(arg);
}

const char *pipe_parquet_column_problem(const char *arg)
{
    return name_problem(arg, pipe_parquet_column_name_len(arg), true);
}

const char *pipe_jsonl_field_problem(const char *field)
{
    return name_problem(field, strlen(field), false);
}

const char *pipe_source_arg_problem(enum pipe_source_kind kind, char *const *args, size_t i)
{
    const char *a = args[i];
    bool parquet = kind == PIPE_SRC_PARQUET;
    const char *want = kind == PIPE_SRC_TAR     ? pipe_wds_ext_problem(a)
                       : kind == PIPE_SRC_JSONL ? pipe_jsonl_field_problem(a)
                                                : pipe_parquet_column_problem(a);
    if (want)
        return want;
    /* A parquet column is one name whatever its default. */
    size_t n = parquet ? pipe_parquet_column_name_len(a) : strlen(a);
    for (size_t j = 0; j < i; j++) {
        size_t m = parquet ? pipe_parquet_column_name_len(args[j]) : strlen(args[j]);
        if (m == n && memcmp(args[j], a, n) == 0)
            return kind == PIPE_SRC_TAR     ? "an extension not listed before"
                   : kind == PIPE_SRC_JSONL ? "a field not listed before"
                                            : "a column not listed before";
    }
    return NULL;
}

static bool value_dtype(const struct pipe_value *v, enum sluice_dtype *d)
{
    while (v->kind == PIPE_VAL_LIST) {
        if (v->nitems == 0)
            return false;
        v = &v->items[0];
    }
    switch (v->kind) {
    case PIPE_VAL_INT:
        *d = SLUICE_INT64;
        return true;
    case PIPE_VAL_FLOAT:
        *d = SLUICE_FLOAT64;
        return true;
    case PIPE_VAL_BOOL:
        *d = SLUICE_BOOL;
        return true;
    case PIPE_VAL_BYTES:
        *d = SLUICE_BYTES;
        return true;
    default:
        return false;
    }
}

bool pipe_spec_known_dtypes(const struct pipe_spec *spec, enum sluice_dtype *d, size_t *n)
{
    const struct pipe_source *src = &spec->source;
    *n = 0;
    switch (src->kind) {
    case PIPE_SRC_RANGE:
        d[(*n)++] = SLUICE_INT64;
        break;
    case PIPE_SRC_LINES:
    case PIPE_SRC_TFRECORD:
        d[(*n)++] = SLUICE_BYTES;
        break;
    case PIPE_SRC_LIST: {
        if (src->nvalues == 0)
            return false;
        const struct pipe_value *v = &src->values[0];
        if (v->kind == PIPE_VAL_TUPLE) {
            if (v->nitems == 0 || v->nitems > PIPE_MAX_COMPONENTS)
                return false;
            for (size_t i = 0; i < v->nitems; i++)
                if (!value_dtype(&v->items[i], &d[(*n)++]))
                    return false;
        } else if (!value_dtype(v, &d[(*n)++])) {
            return false;
        }
        break;
    }
    default:
        return false;
    }
    for (size_t k = 0; k < spec->nops; k++) {
        switch (spec->ops[k].kind) {
        case PIPE_OP_FILTER:
        case PIPE_OP_SHUFFLE:
        case PIPE_OP_TAKE:
        case PIPE_OP_SKIP:
        case PIPE_OP_SHARD:
        case PIPE_OP_REPEAT:
        case PIPE_OP_PREFETCH:
        case PIPE_OP_GLOBAL_SHUFFLE:
            break;
        default:
            return false;
        }
    }
    return true;
}

const char *pipe_op_name(enum pipe_op_kind k)
{
    switch (k) {
    case PIPE_OP_MAP:
        return "map";
    case PIPE_OP_FILTER:
        return "filter";
    case PIPE_OP_SHUFFLE:
        return "shuffle";
    case PIPE_OP_BATCH:
        return "batch";
    case PIPE_OP_TAKE:
        return "take";
    case PIPE_OP_SKIP:
        return "skip";
    case PIPE_OP_REPEAT:
        return "repeat";
    case PIPE_OP_SHARD:
        return "shard";
    case PIPE_OP_PREFETCH:
        return "prefetch";
    case PIPE_OP_GLOBAL_SHUFFLE:
        return "global_shuffle";
    case PIPE_OP_PACK:
        return "pack";
    }
    return "?";
}
