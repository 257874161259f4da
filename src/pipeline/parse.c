/* The pipeline expression parser: a hand-written recursive-descent parser over an on-demand
 * lexer. Every error names the 1-based column of the token it is about.
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
 * Recursion happens only over values, so its depth is bounded by the list nesting limit. */
#include "parse.h"

#include "common/error.h"
#include "element.h"
#include "wds.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum tok_kind {
    T_END,
    T_IDENT,
    T_NUM,    /* anything shaped like a number; validated when used */
    T_STR,    /* a complete "..." literal; escapes are checked when it is decoded */
    T_BADSTR, /* a string literal that runs to the end of the input */
    T_PUNCT,  /* one of ( ) [ ] , | */
    T_BAD     /* any other byte */
};

struct tok {
    enum tok_kind kind;
    size_t start, len;
};

struct parser {
    const char *s;
    size_t pos; /* the next byte not yet consumed */
    char *err;
    size_t errlen;
};

/* ---- Lexer -------------------------------------------------------------------------------- */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident_char(char c)
{
    return is_ident_start(c) || is_digit(c);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Reads the token at p->pos without consuming it. */
static void peek(const struct parser *p, struct tok *t)
{
    const char *s = p->s;
    size_t i = p->pos;
    while (is_space(s[i]))
        i++;
    t->start = i;
    char c = s[i];
    if (c == '\0') {
        t->kind = T_END;
    } else if (is_ident_start(c)) {
        t->kind = T_IDENT;
        while (is_ident_char(s[i]))
            i++;
    } else if (is_digit(c) || (c == '.' && is_digit(s[i + 1])) ||
               ((c == '+' || c == '-') &&
                (is_digit(s[i + 1]) || (s[i + 1] == '.' && is_digit(s[i + 2]))))) {
        /* Take the whole run of number-like bytes, so "1x" or "1.2.3" is reported as one bad
         * number rather than as a number followed by something unexpected. */
        t->kind = T_NUM;
        i++;
        while (is_ident_char(s[i]) || s[i] == '.' ||
               ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E')))
            i++;
    } else if (c == '"') {
        i++;
        while (s[i] != '\0' && s[i] != '"')
            i += (s[i] == '\\' && s[i + 1] != '\0') ? 2 : 1;
        if (s[i] == '"') {
            t->kind = T_STR;
            i++;
        } else {
            t->kind = T_BADSTR;
        }
    } else if (strchr("()[],|", c)) {
        t->kind = T_PUNCT;
        i++;
    } else {
        t->kind = T_BAD;
        i++;
    }
    t->len = i - t->start;
}

static void consume(struct parser *p, const struct tok *t)
{
    p->pos = t->start + t->len;
}

static bool is_punct(const struct tok *t, const struct parser *p, char c)
{
    return t->kind == T_PUNCT && p->s[t->start] == c;
}

static bool is_word(const struct tok *t, const struct parser *p, const char *w)
{
    return t->kind == T_IDENT && t->len == strlen(w) && memcmp(p->s + t->start, w, t->len) == 0;
}

/* ---- Errors ------------------------------------------------------------------------------- */

/* Large enough for quote_span's worst case: 32 escaped bytes, the ellipsis and the quotes. */
#define QUOTE_BUF (32 * 4 + 8)

/* Quotes s[0..n) for a message: printable ASCII as is, other bytes as \xNN, cut at 32 bytes. */
static void quote_span(const char *s, size_t n, char out[QUOTE_BUF])
{
    static const char hex[] = "0123456789abcdef";
    const size_t max = 32;
    size_t o = 0;
    out[o++] = '\'';
    for (size_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c <= 0x7e) {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (n > max) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '\'';
    out[o] = '\0';
}

static void describe(const struct parser *p, const struct tok *t, char out[QUOTE_BUF])
{
    if (t->kind == T_END)
        memcpy(out, "end of input", sizeof("end of input"));
    else
        quote_span(p->s + t->start, t->len, out);
}

static int column_of(size_t at)
{
    return at >= INT_MAX ? INT_MAX : (int)at + 1;
}

static int fail(struct parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct parser *p, size_t at, const char *fmt, ...)
{
    if (p->err && p->errlen > 0) {
        int n = snprintf(p->err, p->errlen, "column %d: ", column_of(at));
        if (n >= 0 && (size_t)n < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return SLUICE_ERR_PARSE;
}

/* "column C: expected WHAT, found TOKEN". */
static int expected(struct parser *p, const struct tok *t, const char *what)
{
    char found[QUOTE_BUF];
    describe(p, t, found);
    return fail(p, t->start, "expected %s, found %s", what, found);
}

static int nomem(struct parser *p)
{
    return err_set(p->err, p->errlen, SLUICE_ERR_NOMEM, "out of memory");
}

/* Consumes the punctuation c, or fails with "expected WHAT". */
static int expect_punct(struct parser *p, char c, const char *what)
{
    struct tok t;
    peek(p, &t);
    if (!is_punct(&t, p, c))
        return expected(p, &t, what);
    consume(p, &t);
    return 0;
}

/* ---- Numbers ------------------------------------------------------------------------------ */

enum num_class { NUM_BAD, NUM_INT, NUM_FLOAT };

/* Decimal only: [+-] digits [. digits] [e [+-] digits], with digits on at least one side of the
 * point. A '.' or an exponent makes it a float. */
static enum num_class classify(const char *s, size_t n)
{
    size_t i = 0, digits = 0;
    bool is_float = false;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    while (i < n && is_digit(s[i]))
        i++, digits++;
    if (i < n && s[i] == '.') {
        is_float = true;
        i++;
        while (i < n && is_digit(s[i]))
            i++, digits++;
    }
    if (digits == 0)
        return NUM_BAD;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        is_float = true;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t exp_digits = 0;
        while (i < n && is_digit(s[i]))
            i++, exp_digits++;
        if (exp_digits == 0)
            return NUM_BAD;
    }
    if (i != n)
        return NUM_BAD;
    return is_float ? NUM_FLOAT : NUM_INT;
}

/* Converts a token classified NUM_INT; false when it does not fit in int64. */
static bool to_i64(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (s[0] == '+' || s[0] == '-') {
        neg = s[0] == '-';
        i++;
    }
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    for (; i < n; i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (limit - d) / 10)
            return false;
        v = v * 10 + d;
    }
    /* Negation in unsigned arithmetic, then a well-defined conversion for INT64_MIN. */
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return true;
}

/* Converts a token classified NUM_FLOAT; false when it overflows to infinity. strtod stops
 * exactly at the token's end, because the lexer ends a number token only at a byte that cannot
 * continue a decimal float. */
static bool to_f64(const char *s, size_t n, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end != s + n || isinf(v) || isnan(v))
        return false;
    *out = v;
    return true;
}

/* Reads an integer argument. *t receives its token so range errors can point at it; when the
 * next token is not a number at all the error is "expected NOT_A_NUMBER". */
static int parse_int(struct parser *p, const char *not_a_number, int64_t *v, struct tok *t)
{
    peek(p, t);
    if (t->kind != T_NUM)
        return expected(p, t, not_a_number);
    const char *s = p->s + t->start;
    switch (classify(s, t->len)) {
    case NUM_BAD:
        return expected(p, t, "a number");
    case NUM_FLOAT:
        return expected(p, t, "an integer");
    case NUM_INT:
        if (!to_i64(s, t->len, v))
            return expected(p, t, "a 64-bit integer");
        break;
    }
    consume(p, t);
    return 0;
}

/* An integer argument of at least min; otherwise "expected RANGE, found TOKEN". */
static int parse_count(struct parser *p, int64_t min, const char *range, int64_t *v)
{
    struct tok t;
    int rc = parse_int(p, "a number", v, &t);
    if (rc)
        return rc;
    if (*v < min)
        return expected(p, &t, range);
    return 0;
}

/* ---- Strings ------------------------------------------------------------------------------ */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes the T_STR token t into a new NUL-terminated buffer (*out, *outlen without the NUL). */
static int decode_string(struct parser *p, const struct tok *t, char **out, size_t *outlen)
{
    const char *s = p->s + t->start + 1;
    size_t n = t->len - 2;
    char *d = malloc(n + 1);
    if (!d)
        return nomem(p);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            d[o++] = s[i];
            continue;
        }
        char e = s[i + 1]; /* the lexer guarantees a byte after every backslash */
        int hi = -1, lo = -1;
        if (e == 'x' && i + 3 < n) {
            hi = hex_digit(s[i + 2]);
            lo = hi >= 0 ? hex_digit(s[i + 3]) : -1;
        }
        if (e == '\\' || e == '"') {
            d[o++] = e;
        } else if (e == 'n') {
            d[o++] = '\n';
        } else if (e == 't') {
            d[o++] = '\t';
        } else if (e == 'x' && hi >= 0 && lo >= 0) {
            d[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            char found[QUOTE_BUF];
            size_t bad = e == 'x' ? (hi >= 0 ? 4 : 3) : 2;
            if (bad > n - i)
                bad = n - i;
            quote_span(s + i, bad, found);
            free(d);
            return fail(p, t->start + 1 + i, "expected \\\\, \\\", \\n, \\t or \\xNN, found %s",
                        found);
        }
        i++;
    }
    d[o] = '\0';
    *out = d;
    *outlen = o;
    return 0;
}

/* Reads a string literal (for file patterns). */
static int parse_string(struct parser *p, char **out, size_t *outlen)
{
    struct tok t;
    peek(p, &t);
    if (t.kind == T_BADSTR)
        return fail(p, t.start, "unterminated string");
    if (t.kind != T_STR)
        return expected(p, &t, "a string");
    int rc = decode_string(p, &t, out, outlen);
    if (rc)
        return rc;
    consume(p, &t);
    return 0;
}

/* ---- Values ------------------------------------------------------------------------------- */

static int push_value(struct parser *p, struct pipe_value **arr, size_t *n, size_t *cap,
                      struct pipe_value *v)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        struct pipe_value *a = realloc(*arr, nc * sizeof(*a));
        if (!a) {
            pipe_value_release(v);
            return nomem(p);
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
        peek(p, &t);
        if (tmpl) {
            if (n < tmpl->nitems) {
                if (!is_punct(&t, p, ',')) {
                    rc = expected(p, &t, "','");
                    goto fail;
                }
            } else if (!is_punct(&t, p, close)) {
                rc = expected(p, &t, is_list ? "']'" : "')'");
                goto fail;
            }
        } else if (is_list) {
            if (!is_punct(&t, p, ',') && !is_punct(&t, p, ']')) {
                rc = expected(p, &t, "',' or ']'");
                goto fail;
            }
        } else if (is_punct(&t, p, ')') && n < 2) {
            rc = expected(p, &t, "',' (a tuple has at least 2 components)");
            goto fail;
        } else if (is_punct(&t, p, ',') && n == PIPE_MAX_COMPONENTS) {
            rc = expected(p, &t, "')' (a tuple has at most 64 components)");
            goto fail;
        } else if (!is_punct(&t, p, ',') && !is_punct(&t, p, ')')) {
            rc = expected(p, &t, "',' or ')'");
            goto fail;
        }
        consume(p, &t);
        if (is_punct(&t, p, close))
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
    peek(p, &t);
    const char *want = tmpl ? kind_wanted(tmpl) : "a value";
    const char *s = p->s + t.start;
    switch (t.kind) {
    case T_NUM: {
        enum num_class c = classify(s, t.len);
        if (c == NUM_BAD)
            return expected(p, &t, "a number");
        if (tmpl && tmpl->kind != (c == NUM_INT ? PIPE_VAL_INT : PIPE_VAL_FLOAT))
            return expected(p, &t, want);
        if (c == NUM_INT) {
            if (!to_i64(s, t.len, &out->i))
                return expected(p, &t, "a 64-bit integer");
            out->kind = PIPE_VAL_INT;
        } else {
            if (!to_f64(s, t.len, &out->f))
                return expected(p, &t, "a finite number");
            out->kind = PIPE_VAL_FLOAT;
        }
        consume(p, &t);
        return 0;
    }
    case T_STR: {
        if (tmpl && tmpl->kind != PIPE_VAL_BYTES)
            return expected(p, &t, want);
        int rc = decode_string(p, &t, &out->s, &out->slen);
        if (rc)
            return rc;
        out->kind = PIPE_VAL_BYTES;
        consume(p, &t);
        return 0;
    }
    case T_BADSTR:
        return fail(p, t.start, "unterminated string");
    case T_IDENT:
        if (!is_word(&t, p, "true") && !is_word(&t, p, "false"))
            return expected(p, &t, want);
        if (tmpl && tmpl->kind != PIPE_VAL_BOOL)
            return expected(p, &t, want);
        out->kind = PIPE_VAL_BOOL;
        out->i = is_word(&t, p, "true");
        consume(p, &t);
        return 0;
    case T_PUNCT:
        if (is_punct(&t, p, '[')) {
            if (tmpl && tmpl->kind != PIPE_VAL_LIST)
                return expected(p, &t, want);
            if (lists >= SLUICE_MAX_RANK)
                return expected(p, &t, "a scalar (lists nest at most 8 deep)");
            consume(p, &t);
            return parse_items(p, out, tmpl, lists, ']');
        }
        if (is_punct(&t, p, '(')) {
            if (tmpl && tmpl->kind != PIPE_VAL_TUPLE)
                return expected(p, &t, want);
            if (!tuple_ok)
                return fail(p, t.start, "a tuple is only allowed as a whole list() value");
            consume(p, &t);
            return parse_items(p, out, tmpl, lists, ')');
        }
        return expected(p, &t, want);
    case T_END:
    case T_BAD:
        break;
    }
    return expected(p, &t, want);
}

/* ---- Sources ------------------------------------------------------------------------------ */

static int parse_range(struct parser *p, struct pipe_source *src)
{
    int64_t a[3];
    size_t n = 0;
    struct tok t;
    for (;;) {
        int rc = parse_int(p, "a number", &a[n], &t);
        if (rc)
            return rc;
        if (n == 2 && a[2] == 0)
            return expected(p, &t, "a nonzero step");
        n++;
        peek(p, &t);
        if (is_punct(&t, p, ')'))
            break;
        if (n == 3 || !is_punct(&t, p, ','))
            return expected(p, &t, n == 3 ? "')'" : "',' or ')'");
        consume(p, &t);
    }
    consume(p, &t);
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
        peek(p, &t);
        if (is_punct(&t, p, ')'))
            break;
        if (!is_punct(&t, p, ','))
            return expected(p, &t, "',' or ')'");
        consume(p, &t);
    }
    consume(p, &t);
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
            return nomem(p);
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
    peek(p, &t);
    size_t at = t.start;
    char *g = NULL;
    size_t glen = 0;
    int rc = parse_string(p, &g, &glen);
    if (rc)
        return rc;
    if (strlen(g) != glen) {
        free(g);
        return fail(p, at, "a file pattern cannot contain a NUL byte");
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
        peek(p, &t);
        if (is_punct(&t, p, ')'))
            break;
        if (!is_punct(&t, p, ','))
            return expected(p, &t, "',' or ')'");
        consume(p, &t);
    }
    consume(p, &t);
    return 0;
}

/* tar(PATTERN, EXT, ...) or tar([PATTERN, ...], EXT, ...); the '(' is consumed. */
static int parse_tar(struct parser *p, struct pipe_source *src)
{
    size_t cap = 0;
    struct tok t;
    peek(p, &t);
    if (is_punct(&t, p, '[')) {
        consume(p, &t);
        for (;;) {
            int rc = parse_glob(p, src, &cap);
            if (rc)
                return rc;
            peek(p, &t);
            if (is_punct(&t, p, ']'))
                break;
            if (!is_punct(&t, p, ','))
                return expected(p, &t, "',' or ']'");
            consume(p, &t);
        }
        consume(p, &t);
    } else {
        int rc = parse_glob(p, src, &cap);
        if (rc)
            return rc;
    }
    cap = 0;
    for (;;) {
        peek(p, &t);
        if (src->nexts > 0 && is_punct(&t, p, ')'))
            break;
        if (!is_punct(&t, p, ','))
            return expected(p, &t, src->nexts > 0 ? "',' or ')'" : "',' and a member extension");
        if (src->nexts == PIPE_MAX_COMPONENTS)
            return expected(p, &t, "')' (an element has at most 64 components)");
        consume(p, &t);
        peek(p, &t);
        char *e = NULL;
        size_t elen = 0;
        int rc = parse_string(p, &e, &elen);
        if (rc)
            return rc;
        const char *want =
            strlen(e) != elen ? "an extension without NUL bytes" : pipe_wds_ext_problem(e);
        for (size_t i = 0; !want && i < src->nexts; i++)
            if (strcmp(src->exts[i], e) == 0)
                want = "an extension not listed before";
        if (want) {
            free(e);
            return expected(p, &t, want);
        }
        rc = push_str(p, &src->exts, &src->nexts, &cap, e);
        if (rc)
            return rc;
    }
    consume(p, &t);
    return 0;
}

/* snapshot("DIR"); the '(' is consumed. DIR is a path, kept as the source's one glob. */
static int parse_snapshot(struct parser *p, struct pipe_source *src)
{
    struct tok t;
    peek(p, &t);
    size_t at = t.start;
    char *d = NULL;
    size_t dlen = 0;
    int rc = parse_string(p, &d, &dlen);
    if (rc)
        return rc;
    if (strlen(d) != dlen || dlen == 0) {
        free(d);
        return fail(p, at,
                    dlen ? "a snapshot directory cannot contain a NUL byte"
                         : "a snapshot directory cannot be empty");
    }
    size_t cap = 0;
    rc = push_str(p, &src->globs, &src->nglobs, &cap, d);
    if (rc)
        return rc;
    return expect_punct(p, ')', "')'");
}

/* Parses the source into spec->source; on failure the caller frees spec, which releases
 * whatever was built so far (counts only ever cover complete entries). */
static int parse_source(struct parser *p, struct pipe_source *src)
{
    struct tok t;
    peek(p, &t);
    if (t.kind != T_IDENT)
        return expected(p, &t, "a source");
    char name[QUOTE_BUF];
    src->column = column_of(t.start);
    if (is_word(&t, p, "range"))
        src->kind = PIPE_SRC_RANGE;
    else if (is_word(&t, p, "list"))
        src->kind = PIPE_SRC_LIST;
    else if (is_word(&t, p, "tfrecord"))
        src->kind = PIPE_SRC_TFRECORD;
    else if (is_word(&t, p, "lines"))
        src->kind = PIPE_SRC_LINES;
    else if (is_word(&t, p, "tar"))
        src->kind = PIPE_SRC_TAR;
    else if (is_word(&t, p, "snapshot"))
        src->kind = PIPE_SRC_SNAPSHOT;
    else {
        describe(p, &t, name);
        return fail(p, t.start, "unknown source %s", name);
    }
    consume(p, &t);
    int rc = expect_punct(p, '(', "'('");
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
        return parse_tar(p, src);
    case PIPE_SRC_SNAPSHOT:
        return parse_snapshot(p, src);
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
};

static int parse_fn(struct parser *p, struct pipe_op *op)
{
    struct tok t;
    peek(p, &t);
    if (t.kind != T_IDENT)
        return expected(p, &t, "a function name");
    op->fn = malloc(t.len + 1);
    if (!op->fn)
        return nomem(p);
    memcpy(op->fn, p->s + t.start, t.len);
    op->fn[t.len] = '\0';
    consume(p, &t);
    size_t cap = 0;
    for (;;) {
        peek(p, &t);
        if (is_punct(&t, p, ')'))
            break;
        if (!is_punct(&t, p, ','))
            return expected(p, &t, "',' or ')'");
        consume(p, &t);
        struct pipe_value v = {0};
        int rc = parse_value(p, &v, NULL, 0, false);
        if (rc)
            return rc;
        rc = push_value(p, &op->args, &op->nargs, &cap, &v);
        if (rc)
            return rc;
    }
    consume(p, &t);
    return 0;
}

/* A shard argument: a number (checked against min and, when max > 0, below max) or SHARD_HINT. */
static int parse_shard_arg(struct parser *p, int64_t *v, bool *hint, int64_t min, int64_t max)
{
    struct tok t;
    peek(p, &t);
    if (is_word(&t, p, "SHARD_HINT")) {
        *hint = true;
        consume(p, &t);
        return 0;
    }
    int rc = parse_int(p, "a number or SHARD_HINT", v, &t);
    if (rc)
        return rc;
    if (min == 1 && *v < 1)
        return expected(p, &t, "a shard count >= 1");
    if (max > 0 && (*v < 0 || *v >= max)) {
        char range[64];
        snprintf(range, sizeof(range), "a shard index in [0, %lld)", (long long)max);
        return expected(p, &t, range);
    }
    if (min == 0 && *v < 0)
        return expected(p, &t, "a shard index >= 0");
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
        rc = parse_count(p, 1, "a buffer size >= 1", &op->n);
        if (rc)
            return rc;
        peek(p, &t);
        if (is_punct(&t, p, ',')) {
            consume(p, &t);
            rc = parse_int(p, "a number", &op->seed, &t);
            if (rc)
                return rc;
            op->has_seed = true;
            return expect_punct(p, ')', "')'");
        }
        return expect_punct(p, ')', "',' or ')'");
    case PIPE_OP_BATCH:
        rc = parse_count(p, 1, "a batch size >= 1", &op->n);
        if (rc)
            return rc;
        peek(p, &t);
        if (is_punct(&t, p, ',')) {
            consume(p, &t);
            peek(p, &t);
            if (is_word(&t, p, "drop_remainder") || is_word(&t, p, "true"))
                op->drop_remainder = true;
            else if (!is_word(&t, p, "false"))
                return expected(p, &t, "drop_remainder, true or false");
            consume(p, &t);
            return expect_punct(p, ')', "')'");
        }
        return expect_punct(p, ')', "',' or ')'");
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
        rc = parse_count(p, -1, "a count >= 0 (or -1 for all)", &op->n);
        return rc ? rc : expect_punct(p, ')', "')'");
    case PIPE_OP_REPEAT:
        peek(p, &t);
        if (is_punct(&t, p, ')')) {
            consume(p, &t);
            return 0;
        }
        rc = parse_count(p, 0, "a count >= 0", &op->n);
        if (rc)
            return rc;
        op->has_n = true;
        return expect_punct(p, ')', "')'");
    case PIPE_OP_SHARD:
        rc = parse_shard_arg(p, &op->n, &op->n_is_hint, 1, 0);
        if (!rc)
            rc = expect_punct(p, ',', "','");
        if (!rc)
            rc = parse_shard_arg(p, &op->index, &op->index_is_hint, 0, op->n_is_hint ? 0 : op->n);
        if (rc)
            return rc;
        if (op->n_is_hint)
            op->n = 0;
        if (op->index_is_hint)
            op->index = 0;
        return expect_punct(p, ')', "')'");
    case PIPE_OP_PREFETCH:
        rc = parse_count(p, 1, "a buffer size >= 1", &op->n);
        return rc ? rc : expect_punct(p, ')', "')'");
    case PIPE_OP_GLOBAL_SHUFFLE:
        rc = parse_int(p, "a seed", &op->seed, &t);
        return rc ? rc : expect_punct(p, ')', "')'");
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
        return fail(p, t->start,
                    "global_shuffle shuffles a source, and a pipeline tail has none; put it "
                    "right after the source of the dataset");
    for (size_t k = 0; k < spec->nops; k++)
        if (spec->ops[k].kind == PIPE_OP_GLOBAL_SHUFFLE)
            return fail(p, t->start, "a second global_shuffle (the first is at column %d)",
                        spec->ops[k].column);
    if (spec->nops > 0)
        return fail(p, t->start,
                    "global_shuffle must come right after the source, before any "
                    "other operation");
    return 0;
}

/* Parses one operation and appends it to spec. */
static int parse_op(struct parser *p, struct pipe_spec *spec, size_t *cap, bool tail)
{
    struct tok t;
    peek(p, &t);
    if (t.kind != T_IDENT)
        return expected(p, &t, "an operation");
    struct pipe_op op = {0};
    size_t k = 0;
    for (; k < sizeof(op_names) / sizeof(op_names[0]); k++)
        if (is_word(&t, p, op_names[k].name))
            break;
    if (k == sizeof(op_names) / sizeof(op_names[0])) {
        char name[QUOTE_BUF];
        describe(p, &t, name);
        return fail(p, t.start, "unknown operation %s", name);
    }
    op.kind = op_names[k].kind;
    op.column = column_of(t.start);
    if (op.kind == PIPE_OP_GLOBAL_SHUFFLE) {
        int rc = check_global_shuffle(p, spec, tail, &t);
        if (rc)
            return rc;
    }
    consume(p, &t);
    int rc = expect_punct(p, '(', "'('");
    if (!rc)
        rc = parse_op_args(p, &op);
    if (!rc && spec->nops == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        struct pipe_op *a = realloc(spec->ops, nc * sizeof(*a));
        if (!a)
            rc = nomem(p);
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

/* ---- Entry points ------------------------------------------------------------------------- */

static int parse_all(const char *text, bool tail, struct pipe_spec **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen > 0)
        err[0] = '\0';
    struct parser p = {text, 0, err, errlen};
    struct pipe_spec *spec = calloc(1, sizeof(*spec));
    if (!spec)
        return nomem(&p);
    size_t cap = 0;
    int rc;
    if (tail) {
        spec->source.kind = PIPE_SRC_RANGE;
        spec->source.step = 1;
        rc = parse_op(&p, spec, &cap, true);
    } else {
        rc = parse_source(&p, &spec->source);
    }
    while (rc == 0) {
        struct tok t;
        peek(&p, &t);
        if (t.kind == T_END)
            break;
        if (!is_punct(&t, &p, '|')) {
            rc = expected(&p, &t, "'|' or end of input");
            break;
        }
        consume(&p, &t);
        rc = parse_op(&p, spec, &cap, tail);
    }
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
