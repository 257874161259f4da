/* The pipeline expression parser: a hand-written recursive-descent parser over an on-demand
 * lexer (parse_lex.c, with the error messages, numbers and strings). Every error names the 1-based
 * column of the token it is about.
 *
 * Invariants of the specs it builds (the decoder in def.c enforces the same ones, and the rest
 * of the engine relies on them):
 *   - range step != 0; batch, shuffle and prefetch sizes >= 1; take and skip >= -1 (-1 is all);
 *     a repeat count >= 0; a shard count >= 1 and an index >= 0, below the count when both are
 *     numbers;
 *   - global_shuffle is the first op or absent (never in a tail);
 *   - fields that do not belong to an op's or a source's kind are zero;
 *   - list values hold at least one item, all of one structure, nested at most SLUICE_MAX_RANK
 *     deep; a tuple has 2..PIPE_MAX_COMPONENTS components, none a tuple, and appears only as a
 *     whole list() value; every list() value has the structure of the first;
 *   - floats are finite; file patterns contain no NUL byte; function names are identifiers;
 *   - a tar() source has at least one pattern and 1..PIPE_MAX_COMPONENTS distinct extensions,
 *     each passing pipe_wds_ext_problem() and free of NUL bytes.
 *   - a mixing source has 1..PIPE_MIX_MAX_INPUTS input pipelines, each a whole pipeline in
 *     parentheses; sample_from_datasets one finite weight >= 0 per input, not all 0;
 *     choose_from_datasets one choice pipeline (pipe_mix_problem).
 * Recursion happens over values, bounded by the list nesting limit, and over the pipelines of
 * mixing sources, bounded by PIPE_MIX_MAX_DEPTH and PIPE_MIX_MAX_PIPELINES. */
#include "parse_internal.h"

#include "common/error.h"
#include "element.h"
#include "pack.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Values ------------------------------------------------------------------------------- */

static int push_value(struct parser *p, struct pipe_value **arr, size_t *n, size_t *cap,
                      struct pipe_value *v)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        struct pipe_value *a = realloc(*arr, nc * sizeof(*a));
        if (!a) {
            pipe_value_release(v);
            return pipe_parse_nomem(p);
        }
        *arr = a;
        *cap = nc;
    }
    (*arr)[(*n)++] = *v;
    return 0;
}

/* What a value of tmpl's structure must start with, for "expected ..." messages. */
static const char *kind_wanted(const struct pipe_value *tmpl)
{
    switch (tmpl->kind) {
    case PIPE_VAL_INT:
        return "an integer";
    case PIPE_VAL_FLOAT:
        return "a float";
    case PIPE_VAL_BYTES:
        return "a string";
    case PIPE_VAL_BOOL:
        return "true or false";
    case PIPE_VAL_LIST:
        return "'['";
    case PIPE_VAL_TUPLE:
        return "'('";
    }
    return "a value";
}

static int parse_value(struct parser *p, struct pipe_value *out, const struct pipe_value *tmpl,
                       int lists, bool tuple_ok);

/* Reads the items of a list (close = ']') or a tuple (close = ')') after the opening bracket.
 * With a template, every item must match the template's item at the same place and the count
 * must be the template's; without one, list items must match the first item. */
static int parse_items(struct parser *p, struct pipe_value *out, const struct pipe_value *tmpl,
                       int lists, char close)
{
    bool is_list = close == ']';
    struct pipe_value *items = NULL;
    size_t n = 0, cap = 0;
    int rc;
    for (;;) {
        const struct pipe_value *item_tmpl = NULL;
        if (tmpl)
            item_tmpl = &tmpl->items[is_list ? 0 : n];
        else if (is_list && n > 0)
            item_tmpl = &items[0];
        struct pipe_value item = {0};
        rc = parse_value(p, &item, item_tmpl, is_list ? lists + 1 : lists, false);
        if (rc)
            goto fail;
        rc = push_value(p, &items, &n, &cap, &item);
        if (rc)
            goto fail;
        struct tok t;
        pipe_parse_peek(p, &t);
        if (tmpl) {
            if (n < tmpl->nitems) {
                if (!pipe_parse_is_punct(&t, p, ',')) {
                    rc = pipe_parse_expected(p, &t, "','");
                    goto fail;
                }
            } else if (!pipe_parse_is_punct(&t, p, close)) {
                rc = pipe_parse_expected(p, &t, is_list ? "']'" : "')'");
                goto fail;
            }
        } else if (is_list) {
            if (!pipe_parse_is_punct(&t, p, ',') && !pipe_parse_is_punct(&t, p, ']')) {
                rc = pipe_parse_expected(p, &t, "',' or ']'");
                goto fail;
            }
        } else if (pipe_parse_is_punct(&t, p, ')') && n < 2) {
            rc = pipe_parse_expected(p, &t, "',' (a tuple has at least 2 components)");
            goto fail;
        } else if (pipe_parse_is_punct(&t, p, ',') && n == PIPE_MAX_COMPONENTS) {
            rc = pipe_parse_expected(p, &t, "')' (a tuple has at most 64 components)");
            goto fail;
        } else if (!pipe_parse_is_punct(&t, p, ',') && !pipe_parse_is_punct(&t, p, ')')) {
            rc = pipe_parse_expected(p, &t, "',' or ')'");
            goto fail;
        }
        pipe_parse_consume(p, &t);
        if (pipe_parse_is_punct(&t, p, close))
            break;
    }
    out->kind = is_list ? PIPE_VAL_LIST : PIPE_VAL_TUPLE;
    out->items = items;
    out->nitems = n;
    return 0;

fail:
    for (size_t i = 0; i < n; i++)
        pipe_value_release(&items[i]);
    free(items);
    return rc;
}

/* Reads one literal into out (zeroed by the caller). On failure out holds nothing. lists is the
 * number of lists around this value; tuple_ok says whether a tuple may stand here. */
static int parse_value(struct parser *p, struct pipe_value *out, const struct pipe_value *tmpl,
                       int lists, bool tuple_ok)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    const char *want = tmpl ? kind_wanted(tmpl) : "a value";
    const char *s = p->s + t.start;
    switch (t.kind) {
    case T_NUM: {
        enum num_class c = pipe_parse_classify(s, t.len);
        if (c == NUM_BAD)
            return pipe_parse_expected(p, &t, "a number");
        if (tmpl && tmpl->kind != (c == NUM_INT ? PIPE_VAL_INT : PIPE_VAL_FLOAT))
            return pipe_parse_expected(p, &t, want);
        if (c == NUM_INT) {
            if (!pipe_parse_to_i64(s, t.len, &out->i))
                return pipe_parse_expected(p, &t, "a 64-bit integer");
            out->kind = PIPE_VAL_INT;
        } else {
            if (!pipe_parse_to_f64(s, t.len, &out->f))
                return pipe_parse_expected(p, &t, "a finite number");
            out->kind = PIPE_VAL_FLOAT;
        }
        pipe_parse_consume(p, &t);
        return 0;
    }
    case T_STR: {
        if (tmpl && tmpl->kind != PIPE_VAL_BYTES)
            return pipe_parse_expected(p, &t, want);
        int rc = pipe_parse_decode_string(p, &t, &out->s, &out->slen);
        if (rc)
            return rc;
        out->kind = PIPE_VAL_BYTES;
        pipe_parse_consume(p, &t);
        return 0;
    }
    case T_BADSTR:
        return pipe_parse_fail(p, t.start, "unterminated string");
    case T_IDENT:
        if (!pipe_parse_is_word(&t, p, "true") && !pipe_parse_is_word(&t, p, "false"))
            return pipe_parse_expected(p, &t, want);
        if (tmpl && tmpl->kind != PIPE_VAL_BOOL)
            return pipe_parse_expected(p, &t, want);
        out->kind = PIPE_VAL_BOOL;
        out->i = pipe_parse_is_word(&t, p, "true");
        pipe_parse_consume(p, &t);
        return 0;
    case T_PUNCT:
        if (pipe_parse_is_punct(&t, p, '[')) {
            if (tmpl && tmpl->kind != PIPE_VAL_LIST)
                return pipe_parse_expected(p, &t, want);
            if (lists >= SLUICE_MAX_RANK)
                return pipe_parse_expected(p, &t, "a scalar (lists nest at most 8 deep)");
            pipe_parse_consume(p, &t);
            return parse_items(p, out, tmpl, lists, ']');
        }
        if (pipe_parse_is_punct(&t, p, '(')) {
            if (tmpl && tmpl->kind != PIPE_VAL_TUPLE)
                return pipe_parse_expected(p, &t, want);
            if (!tuple_ok)
                return pipe_parse_fail(p, t.start,
                                       "a tuple is only allowed as a whole list() value");
            pipe_parse_consume(p, &t);
            return parse_items(p, out, tmpl, lists, ')');
        }
        return pipe_parse_expected(p, &t, want);
    case T_END:
    case T_BAD:
        break;
    }
    return pipe_parse_expected(p, &t, want);
}

/* ---- Sources ------------------------------------------------------------------------------ */

static int parse_range(struct parser *p, struct pipe_source *src)
{
    int64_t a[3];
    size_t n = 0;
    struct tok t;
    for (;;) {
        int rc = pipe_parse_int(p, "a number", &a[n], &t);
        if (rc)
            return rc;
        if (n == 2 && a[2] == 0)
            return pipe_parse_expected(p, &t, "a nonzero step");
        n++;
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ')'))
            break;
        if (n == 3 || !pipe_parse_is_punct(&t, p, ','))
            return pipe_parse_expected(p, &t, n == 3 ? "')'" : "',' or ')'");
        pipe_parse_consume(p, &t);
    }
    pipe_parse_consume(p, &t);
    src->start = n == 1 ? 0 : a[0];
    src->stop = n == 1 ? a[0] : a[1];
    src->step = n == 3 ? a[2] : 1;
    return 0;
}

static int parse_list(struct parser *p, struct pipe_source *src)
{
    size_t cap = 0;
    struct tok t;
    for (;;) {
        struct pipe_value v = {0};
        int rc = parse_value(p, &v, src->nvalues ? &src->values[0] : NULL, 0, true);
        if (rc)
            return rc;
        rc = push_value(p, &src->values, &src->nvalues, &cap, &v);
        if (rc)
            return rc;
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ')'))
            break;
        if (!pipe_parse_is_punct(&t, p, ','))
            return pipe_parse_expected(p, &t, "',' or ')'");
        pipe_parse_consume(p, &t);
    }
    pipe_parse_consume(p, &t);
    return 0;
}

/* Appends s (taken over) to the array *arr of *n strings with capacity *cap. */
static int push_str(struct parser *p, char ***arr, size_t *n, size_t *cap, char *s)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        char **a = realloc(*arr, nc * sizeof(*a));
        if (!a) {
            free(s);
            return pipe_parse_nomem(p);
        }
        *arr = a;
        *cap = nc;
    }
    (*arr)[(*n)++] = s;
    return 0;
}

/* Reads one file pattern and appends it to the source's globs. */
static int parse_glob(struct parser *p, struct pipe_source *src, size_t *cap)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    size_t at = t.start;
    char *g = NULL;
    size_t glen = 0;
    int rc = pipe_parse_string(p, &g, &glen);
    if (rc)
        return rc;
    if (strlen(g) != glen) {
        free(g);
        return pipe_parse_fail(p, at, "a file pattern cannot contain a NUL byte");
    }
    return push_str(p, &src->globs, &src->nglobs, cap, g);
}

static int parse_globs(struct parser *p, struct pipe_source *src)
{
    size_t cap = 0;
    struct tok t;
    for (;;) {
        int rc = parse_glob(p, src, &cap);
        if (rc)
            return rc;
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ')'))
            break;
        if (!pipe_parse_is_punct(&t, p, ','))
            return pipe_parse_expected(p, &t, "',' or ')'");
        pipe_parse_consume(p, &t);
    }
    pipe_parse_consume(p, &t);
    return 0;
}

/* tar(PATTERN, EXT, ...) or tar([PATTERN, ...], EXT, ...), parquet(PATTERN, COLUMN, ...) or
 * parquet([PATTERN, ...], COLUMN, ...) with no column at all allowed, and jsonl(PATTERN, FIELD,
 * ...) or jsonl([PATTERN, ...], FIELD, ...); the '(' is consumed. */
static int parse_tar(struct parser *p, struct pipe_source *src)
{
    bool tar = src->kind == PIPE_SRC_TAR, jsonl = src->kind == PIPE_SRC_JSONL;
    bool parquet = !tar && !jsonl;
    char ***strs = tar ? &src->exts : &src->columns;
    size_t *nstrs = tar ? &src->nexts : &src->ncolumns;
    size_t cap = 0;
    struct tok t;
    pipe_parse_peek(p, &t);
    if (pipe_parse_is_punct(&t, p, '[')) {
        pipe_parse_consume(p, &t);
        for (;;) {
            int rc = parse_glob(p, src, &cap);
            if (rc)
                return rc;
            pipe_parse_peek(p, &t);
            if (pipe_parse_is_punct(&t, p, ']'))
                break;
            if (!pipe_parse_is_punct(&t, p, ','))
                return pipe_parse_expected(p, &t, "',' or ']'");
            pipe_parse_consume(p, &t);
        }
        pipe_parse_consume(p, &t);
    } else {
        int rc = parse_glob(p, src, &cap);
        if (rc)
            return rc;
    }
    cap = 0;
    for (;;) {
        pipe_parse_peek(p, &t);
        if ((*nstrs > 0 || parquet) && pipe_parse_is_punct(&t, p, ')'))
            break;
        if (!pipe_parse_is_punct(&t, p, ','))
            return pipe_parse_expected(p, &t,
                                       *nstrs > 0 || parquet ? "',' or ')'"
                                       : tar                 ? "',' and a member extension"
                                                             : "',' and a field");
        if (*nstrs == PIPE_MAX_COMPONENTS)
            return pipe_parse_expected(p, &t, "')' (an element has at most 64 components)");
        pipe_parse_consume(p, &t);
        pipe_parse_peek(p, &t);
        char *e = NULL;
        size_t elen = 0;
        int rc = pipe_parse_string(p, &e, &elen);
        if (rc)
            return rc;
        if (strlen(e) != elen) {
            free(e);
            return pipe_parse_expected(p, &t,
                                       tar     ? "an extension without NUL bytes"
                                       : jsonl ? "a field without NUL bytes"
                                               : "a column without NUL bytes");
        }
        rc = push_str(p, strs, nstrs, &cap, e);
        if (rc)
            return rc;
        const char *want = pipe_source_arg_problem(src->kind, *strs, *nstrs - 1);
        if (want) {
            (*nstrs)--;
            free(e);
            return pipe_parse_expected(p, &t, want);
        }
    }
    pipe_parse_consume(p, &t);
    return 0;
}

/* snapshot("DIR") or megatron("PREFIX"); the '(' is consumed. DIR or PREFIX is a path, kept as
 * the source's one glob. */
static int parse_snapshot(struct parser *p, struct pipe_source *src)
{
    bool megatron = src->kind == PIPE_SRC_MEGATRON;
    struct tok t;
    pipe_parse_peek(p, &t);
    if (megatron && t.kind != T_STR && t.kind != T_BADSTR)
        return pipe_parse_expected(p, &t,
                                   "a quoted prefix (megatron(\"PREFIX\") reads "
                                   "PREFIX.idx and PREFIX.bin)");
    size_t at = t.start;
    char *d = NULL;
    size_t dlen = 0;
    int rc = pipe_parse_string(p, &d, &dlen);
    if (rc)
        return rc;
    if (strlen(d) != dlen || dlen == 0) {
        free(d);
        if (megatron)
            return pipe_parse_fail(p, at,
                                   dlen ? "a megatron prefix cannot contain a NUL byte"
                                        : "a megatron prefix cannot be empty");
        return pipe_parse_fail(p, at,
                               dlen ? "a snapshot directory cannot contain a NUL byte"
                                    : "a snapshot directory cannot be empty");
    }
    size_t cap = 0;
    rc = push_str(p, &src->globs, &src->nglobs, &cap, d);
    if (rc)
        return rc;
    return pipe_parse_expect_punct(p, ')', megatron ? "')' (megatron takes one prefix)" : "')'");
}

static int parse_source(struct parser *p, struct pipe_source *src);
static int parse_ops(struct parser *p, struct pipe_spec *spec, size_t *cap, bool tail, bool nested);

/* Reads "(PIPELINE)", a mix's input or choice, into a new spec at *out. */
static int parse_nested(struct parser *p, struct pipe_spec **out)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    if (!pipe_parse_is_punct(&t, p, '('))
        return pipe_parse_expected(p, &t, "'(' and a pipeline");
    if (p->npipelines >= PIPE_MIX_MAX_PIPELINES)
        return pipe_parse_fail(p, t.start, "more than %d mixed pipelines in one pipeline",
                               PIPE_MIX_MAX_PIPELINES);
    p->npipelines++;
    pipe_parse_consume(p, &t);
    struct pipe_spec *spec = calloc(1, sizeof(*spec));
    if (!spec)
        return pipe_parse_nomem(p);
    size_t cap = 0;
    int rc = parse_source(p, &spec->source);
    if (!rc)
        rc = parse_ops(p, spec, &cap, false, true);
    if (!rc)
        rc = pipe_parse_expect_punct(p, ')', "')'");
    if (rc) {
        pipe_spec_free(spec);
        return rc;
    }
    *out = spec;
    return 0;
}

/* Inputs whose structures the text tells (pipe_spec_known_dtypes) must agree, as the mix checks
 * at each input's first element otherwise. */
static int check_mix_structure(struct parser *p, const struct pipe_source *src, size_t at)
{
    enum sluice_dtype ref[PIPE_MAX_COMPONENTS], d[PIPE_MAX_COMPONENTS];
    size_t nref = 0, n, ref_input = SIZE_MAX;
    for (size_t i = 0; i < src->ninputs; i++) {
        if (!pipe_spec_known_dtypes(src->inputs[i], d, &n))
            continue;
        if (ref_input == SIZE_MAX) {
            memcpy(ref, d, n * sizeof *d);
            nref = n;
            ref_input = i;
            continue;
        }
        if (n == nref && memcmp(d, ref, n * sizeof *d) == 0)
            continue;
        char a[128], b[128];
        pipe_dtypes_text(d, n, a, sizeof a);
        pipe_dtypes_text(ref, nref, b, sizeof b);
        return pipe_parse_fail(p, at,
                               "input %zu yields %s but input %zu yields %s; the inputs of a mix "
                               "must yield elements of one structure",
                               i, a, ref_input, b);
    }
    return 0;
}

/* sample_from_datasets([(P), ...], [W, ...], SEED[, stop_on_empty]) or
 * choose_from_datasets([(P), ...], (CHOICE)[, stop_on_empty]); the '(' is consumed. */
static int parse_mix(struct parser *p, struct pipe_source *src)
{
    bool sample = src->kind == PIPE_SRC_SAMPLE;
    struct tok t;
    size_t at = p->pos;
    int rc = pipe_parse_expect_punct(p, '[', "'[' and the input pipelines, each in parentheses");
    for (; !rc;) {
        pipe_parse_peek(p, &t);
        if (src->ninputs == PIPE_MIX_MAX_INPUTS)
            return pipe_parse_expected(p, &t, "']' (a mix has at most 64 inputs)");
        struct pipe_spec **a = realloc(src->inputs, (src->ninputs + 1) * sizeof(*a));
        if (!a)
            return pipe_parse_nomem(p);
        src->inputs = a;
        if ((rc = parse_nested(p, &src->inputs[src->ninputs])) != 0)
            return rc;
        src->ninputs++;
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ']'))
            break;
        if (!pipe_parse_is_punct(&t, p, ','))
            return pipe_parse_expected(p, &t, "',' or ']'");
        pipe_parse_consume(p, &t);
    }
    if (rc)
        return rc;
    pipe_parse_consume(p, &t);
    if ((rc = pipe_parse_expect_punct(p, ',',
                                      sample ? "',' and the weights"
                                             : "',' and the "
                                               "choice pipeline")))
        return rc;
    if (sample) {
        pipe_parse_peek(p, &t);
        size_t wat = t.start;
        if ((rc = pipe_parse_expect_punct(p, '[', "'[' and one weight per input")))
            return rc;
        for (;;) {
            pipe_parse_peek(p, &t);
            double w;
            enum num_class c =
                t.kind == T_NUM ? pipe_parse_classify(p->s + t.start, t.len) : NUM_BAD;
            int64_t iv;
            if (c == NUM_INT && pipe_parse_to_i64(p->s + t.start, t.len, &iv))
                w = (double)iv;
            else if (c != NUM_FLOAT || !pipe_parse_to_f64(p->s + t.start, t.len, &w))
                return pipe_parse_expected(p, &t, "a weight (a finite number >= 0)");
            if (w < 0)
                return pipe_parse_expected(p, &t, "a weight >= 0");
            if (src->nweights == PIPE_MIX_MAX_INPUTS)
                return pipe_parse_expected(p, &t, "']' (one weight per input)");
            double *a = realloc(src->weights, (src->nweights + 1) * sizeof(*a));
            if (!a)
                return pipe_parse_nomem(p);
            src->weights = a;
            src->weights[src->nweights++] = w == 0 ? 0 : w; /* no -0.0 */
            pipe_parse_consume(p, &t);
            pipe_parse_peek(p, &t);
            if (pipe_parse_is_punct(&t, p, ']'))
                break;
            if (!pipe_parse_is_punct(&t, p, ','))
                return pipe_parse_expected(p, &t, "',' or ']'");
            pipe_parse_consume(p, &t);
        }
        pipe_parse_consume(p, &t);
        if (src->nweights != src->ninputs)
            return pipe_parse_fail(p, wat, "expected %zu weights (one per input), found %zu",
                                   src->ninputs, src->nweights);
        if ((rc = pipe_parse_expect_punct(p, ',', "',' and a seed")))
            return rc;
        if ((rc = pipe_parse_int(p, "a seed", &src->seed, &t)))
            return rc;
    } else {
        if ((rc = parse_nested(p, &src->choice)))
            return rc;
    }
    src->stop_on_empty = !sample; /* tf.data's defaults */
    pipe_parse_peek(p, &t);
    if (pipe_parse_is_punct(&t, p, ',')) {
        pipe_parse_consume(p, &t);
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_word(&t, p, "stop_on_empty") || pipe_parse_is_word(&t, p, "true"))
            src->stop_on_empty = true;
        else if (pipe_parse_is_word(&t, p, "false"))
            src->stop_on_empty = false;
        else
            return pipe_parse_expected(p, &t, "stop_on_empty, true or false");
        pipe_parse_consume(p, &t);
    }
    if ((rc = pipe_parse_expect_punct(p, ')', "')'")))
        return rc;
    const char *want = pipe_mix_problem(src);
    if (want)
        return pipe_parse_fail(p, at, "expected %s", want);
    return check_mix_structure(p, src, at);
}

/* Parses the source into spec->source; on failure the caller frees spec, which releases
 * whatever was built so far (counts only ever cover complete entries). */
static int parse_source(struct parser *p, struct pipe_source *src)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    if (t.kind != T_IDENT)
        return pipe_parse_expected(p, &t, "a source");
    char name[QUOTE_BUF];
    src->column = pipe_parse_column_of(t.start);
    if (pipe_parse_is_word(&t, p, "range"))
        src->kind = PIPE_SRC_RANGE;
    else if (pipe_parse_is_word(&t, p, "list"))
        src->kind = PIPE_SRC_LIST;
    else if (pipe_parse_is_word(&t, p, "tfrecord"))
        src->kind = PIPE_SRC_TFRECORD;
    else if (pipe_parse_is_word(&t, p, "lines"))
        src->kind = PIPE_SRC_LINES;
    else if (pipe_parse_is_word(&t, p, "tar"))
        src->kind = PIPE_SRC_TAR;
    else if (pipe_parse_is_word(&t, p, "snapshot"))
        src->kind = PIPE_SRC_SNAPSHOT;
    else if (pipe_parse_is_word(&t, p, "parquet"))
        src->kind = PIPE_SRC_PARQUET;
    else if (pipe_parse_is_word(&t, p, "jsonl"))
        src->kind = PIPE_SRC_JSONL;
    else if (pipe_parse_is_word(&t, p, "megatron"))
        src->kind = PIPE_SRC_MEGATRON;
    else if (pipe_parse_is_word(&t, p, "sample_from_datasets"))
        src->kind = PIPE_SRC_SAMPLE;
    else if (pipe_parse_is_word(&t, p, "choose_from_datasets"))
        src->kind = PIPE_SRC_CHOOSE;
    else {
        pipe_parse_describe(p, &t, name);
        return pipe_parse_fail(p, t.start, "unknown source %s", name);
    }
    pipe_parse_consume(p, &t);
    int rc = pipe_parse_expect_punct(p, '(', "'('");
    if (rc)
        return rc;
    switch (src->kind) {
    case PIPE_SRC_RANGE:
        return parse_range(p, src);
    case PIPE_SRC_LIST:
        return parse_list(p, src);
    case PIPE_SRC_TFRECORD:
    case PIPE_SRC_LINES:
        return parse_globs(p, src);
    case PIPE_SRC_TAR:
    case PIPE_SRC_PARQUET:
    case PIPE_SRC_JSONL:
        return parse_tar(p, src);
    case PIPE_SRC_SNAPSHOT:
    case PIPE_SRC_MEGATRON:
        return parse_snapshot(p, src);
    case PIPE_SRC_SAMPLE:
    case PIPE_SRC_CHOOSE:
        if (p->mix_depth >= PIPE_MIX_MAX_DEPTH)
            return pipe_parse_fail(p, t.start, "mixes nest at most %d deep", PIPE_MIX_MAX_DEPTH);
        p->mix_depth++;
        rc = parse_mix(p, src);
        p->mix_depth--;
        return rc;
    }
    return 0;
}

/* ---- Operations --------------------------------------------------------------------------- */

static const struct {
    const char *name;
    enum pipe_op_kind kind;
} op_names[] = {
    {"map", PIPE_OP_MAP},           {"filter", PIPE_OP_FILTER},
    {"shuffle", PIPE_OP_SHUFFLE},   {"batch", PIPE_OP_BATCH},
    {"take", PIPE_OP_TAKE},         {"skip", PIPE_OP_SKIP},
    {"repeat", PIPE_OP_REPEAT},     {"shard", PIPE_OP_SHARD},
    {"prefetch", PIPE_OP_PREFETCH}, {"global_shuffle", PIPE_OP_GLOBAL_SHUFFLE},
    {"pack", PIPE_OP_PACK},
};

static int parse_fn(struct parser *p, struct pipe_op *op)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    if (t.kind != T_IDENT)
        return pipe_parse_expected(p, &t, "a function name");
    op->fn = malloc(t.len + 1);
    if (!op->fn)
        return pipe_parse_nomem(p);
    memcpy(op->fn, p->s + t.start, t.len);
    op->fn[t.len] = '\0';
    pipe_parse_consume(p, &t);
    size_t cap = 0;
    for (;;) {
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ')'))
            break;
        if (!pipe_parse_is_punct(&t, p, ','))
            return pipe_parse_expected(p, &t, "',' or ')'");
        pipe_parse_consume(p, &t);
        struct pipe_value v = {0};
        int rc = parse_value(p, &v, NULL, 0, false);
        if (rc)
            return rc;
        rc = push_value(p, &op->args, &op->nargs, &cap, &v);
        if (rc)
            return rc;
    }
    pipe_parse_consume(p, &t);
    return 0;
}

/* A shard argument: a number (checked against min and, when max > 0, below max) or SHARD_HINT. */
static int parse_shard_arg(struct parser *p, int64_t *v, bool *hint, int64_t min, int64_t max)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    if (pipe_parse_is_word(&t, p, "SHARD_HINT")) {
        *hint = true;
        pipe_parse_consume(p, &t);
        return 0;
    }
    int rc = pipe_parse_int(p, "a number or SHARD_HINT", v, &t);
    if (rc)
        return rc;
    if (min == 1 && *v < 1)
        return pipe_parse_expected(p, &t, "a shard count >= 1");
    if (max > 0 && (*v < 0 || *v >= max)) {
        char range[64];
        snprintf(range, sizeof(range), "a shard index in [0, %lld)", (long long)max);
        return pipe_parse_expected(p, &t, range);
    }
    if (min == 0 && *v < 0)
        return pipe_parse_expected(p, &t, "a shard index >= 0");
    return 0;
}

/* pack(SEQ_LEN[, "best_fit" | "first_fit"[, WINDOW]]); the policy may be written without quotes. */
static int parse_pack(struct parser *p, struct pipe_op *op)
{
    struct tok t;
    size_t at = p->pos;
    op->window = PIPE_PACK_WINDOW_DEFAULT;
    int rc = pipe_parse_count(p, 1, "a sequence length >= 1", &op->n);
    if (rc)
        return rc;
    pipe_parse_peek(p, &t);
    if (pipe_parse_is_punct(&t, p, ',')) {
        pipe_parse_consume(p, &t);
        pipe_parse_peek(p, &t);
        char *word = NULL;
        size_t len = 0;
        if (t.kind == T_STR) {
            if ((rc = pipe_parse_decode_string(p, &t, &word, &len)) != 0)
                return rc;
        } else if (t.kind == T_IDENT) {
            if (!(word = strndup(p->s + t.start, t.len)))
                return pipe_parse_nomem(p);
            len = t.len;
        }
        bool best = word && len == 8 && memcmp(word, "best_fit", 8) == 0;
        bool first = word && len == 9 && memcmp(word, "first_fit", 9) == 0;
        free(word);
        if (!best && !first)
            return pipe_parse_expected(p, &t, "\"best_fit\" or \"first_fit\"");
        op->first_fit = first;
        pipe_parse_consume(p, &t);
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ',')) {
            pipe_parse_consume(p, &t);
            rc = pipe_parse_count(p, 1, "a window >= 1", &op->window);
            if (rc)
                return rc;
            pipe_parse_peek(p, &t);
            if (!pipe_parse_is_punct(&t, p, ')'))
                return pipe_parse_expected(p, &t, "')'");
        } else if (!pipe_parse_is_punct(&t, p, ')')) {
            return pipe_parse_expected(p, &t, "',' or ')'");
        }
    } else if (!pipe_parse_is_punct(&t, p, ')')) {
        return pipe_parse_expected(p, &t, "',' or ')'");
    }
    const char *why = pipe_pack_problem(op->n, op->window);
    if (why)
        return pipe_parse_fail(p, at, "%s", why);
    pipe_parse_consume(p, &t);
    return 0;
}

/* Parses the arguments of op (its name and '(' are consumed) up to and including ')'. */
static int parse_op_args(struct parser *p, struct pipe_op *op)
{
    struct tok t;
    int rc = 0;
    switch (op->kind) {
    case PIPE_OP_MAP:
    case PIPE_OP_FILTER:
        return parse_fn(p, op);
    case PIPE_OP_SHUFFLE:
        rc = pipe_parse_count(p, 1, "a buffer size >= 1", &op->n);
        if (rc)
            return rc;
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ',')) {
            pipe_parse_consume(p, &t);
            rc = pipe_parse_int(p, "a number", &op->seed, &t);
            if (rc)
                return rc;
            op->has_seed = true;
            return pipe_parse_expect_punct(p, ')', "')'");
        }
        return pipe_parse_expect_punct(p, ')', "',' or ')'");
    case PIPE_OP_BATCH:
        rc = pipe_parse_count(p, 1, "a batch size >= 1", &op->n);
        if (rc)
            return rc;
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ',')) {
            pipe_parse_consume(p, &t);
            pipe_parse_peek(p, &t);
            if (pipe_parse_is_word(&t, p, "drop_remainder") || pipe_parse_is_word(&t, p, "true"))
                op->drop_remainder = true;
            else if (!pipe_parse_is_word(&t, p, "false"))
                return pipe_parse_expected(p, &t, "drop_remainder, true or false");
            pipe_parse_consume(p, &t);
            return pipe_parse_expect_punct(p, ')', "')'");
        }
        return pipe_parse_expect_punct(p, ')', "',' or ')'");
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
        rc = pipe_parse_count(p, -1, "a count >= 0 (or -1 for all)", &op->n);
        return rc ? rc : pipe_parse_expect_punct(p, ')', "')'");
    case PIPE_OP_REPEAT:
        pipe_parse_peek(p, &t);
        if (pipe_parse_is_punct(&t, p, ')')) {
            pipe_parse_consume(p, &t);
            return 0;
        }
        rc = pipe_parse_count(p, 0, "a count >= 0", &op->n);
        if (rc)
            return rc;
        op->has_n = true;
        return pipe_parse_expect_punct(p, ')', "')'");
    case PIPE_OP_SHARD:
        rc = parse_shard_arg(p, &op->n, &op->n_is_hint, 1, 0);
        if (!rc)
            rc = pipe_parse_expect_punct(p, ',', "','");
        if (!rc)
            rc = parse_shard_arg(p, &op->index, &op->index_is_hint, 0, op->n_is_hint ? 0 : op->n);
        if (rc)
            return rc;
        if (op->n_is_hint)
            op->n = 0;
        if (op->index_is_hint)
            op->index = 0;
        return pipe_parse_expect_punct(p, ')', "')'");
    case PIPE_OP_PREFETCH:
        rc = pipe_parse_count(p, 1, "a buffer size >= 1", &op->n);
        return rc ? rc : pipe_parse_expect_punct(p, ')', "')'");
    case PIPE_OP_GLOBAL_SHUFFLE:
        rc = pipe_parse_int(p, "a seed", &op->seed, &t);
        return rc ? rc : pipe_parse_expect_punct(p, ')', "')'");
    case PIPE_OP_PACK:
        return parse_pack(p, op);
    }
    return rc;
}

static void op_release(struct pipe_op *op)
{
    free(op->fn);
    for (size_t i = 0; i < op->nargs; i++)
        pipe_value_release(&op->args[i]);
    free(op->args);
}

/* Where global_shuffle may stand: the source applies it (it permutes the source's positions),
 * so it is the first op of a pipeline, and a tail, which has no source, holds none. */
static int check_global_shuffle(struct parser *p, const struct pipe_spec *spec, bool tail,
                                const struct tok *t)
{
    if (tail)
        return pipe_parse_fail(
            p, t->start,
            "global_shuffle shuffles a source, and a pipeline tail has none; put it "
            "right after the source of the dataset");
    for (size_t k = 0; k < spec->nops; k++)
        if (spec->ops[k].kind == PIPE_OP_GLOBAL_SHUFFLE)
            return pipe_parse_fail(p, t->start,
                                   "a second global_shuffle (the first is at column %d)",
                                   spec->ops[k].column);
    if (spec->nops > 0)
        return pipe_parse_fail(p, t->start,
                               "global_shuffle must come right after the source, before any "
                               "other operation");
    if (pipe_source_mixes(spec->source.kind))
        return pipe_parse_fail(p, t->start,
                               "global_shuffle permutes a source's positions, and a mix has "
                               "none of its own; shuffle its inputs, or shuffle(N) after it");
    return 0;
}

/* Parses one operation and appends it to spec. */
static int parse_op(struct parser *p, struct pipe_spec *spec, size_t *cap, bool tail)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    if (t.kind != T_IDENT)
        return pipe_parse_expected(p, &t, "an operation");
    struct pipe_op op = {0};
    size_t k = 0;
    for (; k < sizeof(op_names) / sizeof(op_names[0]); k++)
        if (pipe_parse_is_word(&t, p, op_names[k].name))
            break;
    if (k == sizeof(op_names) / sizeof(op_names[0])) {
        char name[QUOTE_BUF];
        pipe_parse_describe(p, &t, name);
        return pipe_parse_fail(p, t.start, "unknown operation %s", name);
    }
    op.kind = op_names[k].kind;
    op.column = pipe_parse_column_of(t.start);
    if (op.kind == PIPE_OP_GLOBAL_SHUFFLE) {
        int rc = check_global_shuffle(p, spec, tail, &t);
        if (rc)
            return rc;
    }
    pipe_parse_consume(p, &t);
    int rc = pipe_parse_expect_punct(p, '(', "'('");
    if (!rc)
        rc = parse_op_args(p, &op);
    if (!rc && spec->nops == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        struct pipe_op *a = realloc(spec->ops, nc * sizeof(*a));
        if (!a)
            rc = pipe_parse_nomem(p);
        else {
            spec->ops = a;
            *cap = nc;
        }
    }
    if (rc) {
        op_release(&op);
        return rc;
    }
    spec->ops[spec->nops++] = op;
    return 0;
}

/* Reads "| op" after the source (or a tail's first op) up to the end of the input, or up to the
 * ')' that closes a nested pipeline, which is left unconsumed. */
static int parse_ops(struct parser *p, struct pipe_spec *spec, size_t *cap, bool tail, bool nested)
{
    for (;;) {
        struct tok t;
        pipe_parse_peek(p, &t);
        if (nested ? pipe_parse_is_punct(&t, p, ')') : t.kind == T_END)
            return 0;
        if (!pipe_parse_is_punct(&t, p, '|'))
            return pipe_parse_expected(p, &t, nested ? "'|' or ')'" : "'|' or end of input");
        pipe_parse_consume(p, &t);
        int rc = parse_op(p, spec, cap, tail);
        if (rc)
            return rc;
    }
}

/* ---- Entry points ------------------------------------------------------------------------- */

static int parse_all(const char *text, bool tail, struct pipe_spec **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen > 0)
        err[0] = '\0';
    struct parser p = {text, 0, err, errlen};
    struct pipe_spec *spec = calloc(1, sizeof(*spec));
    if (!spec)
        return pipe_parse_nomem(&p);
    size_t cap = 0;
    int rc;
    if (tail) {
        spec->source.kind = PIPE_SRC_RANGE;
        spec->source.step = 1;
        rc = parse_op(&p, spec, &cap, true);
    } else {
        rc = parse_source(&p, &spec->source);
    }
    if (rc == 0)
        rc = parse_ops(&p, spec, &cap, tail, false);
    if (rc) {
        pipe_spec_free(spec);
        return rc;
    }
    *out = spec;
    return 0;
}

int pipe_parse(const char *text, struct pipe_spec **out, char *err, size_t errlen)
{
    return parse_all(text, false, out, err, errlen);
}

int pipe_parse_tail(const char *text, struct pipe_spec **out, char *err, size_t errlen)
{
    return parse_all(text, true, out, err, errlen);
}
