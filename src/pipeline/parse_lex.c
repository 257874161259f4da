/* The pipeline parser's lexer and its token-level steps: tokens read on demand, error messages
 * that name a column and quote what was found, integers and floats, and string literals with
 * their escapes (see parse.c for the grammar and the invariants). */
#include "parse_internal.h"

#include "common/error.h"
#include "common/hex.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
void pipe_parse_peek(const struct parser *p, struct tok *t)
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

void pipe_parse_consume(struct parser *p, const struct tok *t)
{
    p->pos = t->start + t->len;
}

bool pipe_parse_is_punct(const struct tok *t, const struct parser *p, char c)
{
    return t->kind == T_PUNCT && p->s[t->start] == c;
}

bool pipe_parse_is_word(const struct tok *t, const struct parser *p, const char *w)
{
    return t->kind == T_IDENT && t->len == strlen(w) && memcmp(p->s + t->start, w, t->len) == 0;
}

/* ---- Errors ------------------------------------------------------------------------------- */

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

void pipe_parse_describe(const struct parser *p, const struct tok *t, char out[QUOTE_BUF])
{
    if (t->kind == T_END)
        memcpy(out, "end of input", sizeof("end of input"));
    else
        quote_span(p->s + t->start, t->len, out);
}

int pipe_parse_column_of(size_t at)
{
    return at >= INT_MAX ? INT_MAX : (int)at + 1;
}

int pipe_parse_fail(struct parser *p, size_t at, const char *fmt, ...)
{
    if (p->err && p->errlen > 0) {
        int n = snprintf(p->err, p->errlen, "column %d: ", pipe_parse_column_of(at));
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
int pipe_parse_expected(struct parser *p, const struct tok *t, const char *what)
{
    char found[QUOTE_BUF];
    pipe_parse_describe(p, t, found);
    return pipe_parse_fail(p, t->start, "expected %s, found %s", what, found);
}

int pipe_parse_nomem(struct parser *p)
{
    return err_set(p->err, p->errlen, SLUICE_ERR_NOMEM, "out of memory");
}

/* Consumes the punctuation c, or fails with "expected WHAT". */
int pipe_parse_expect_punct(struct parser *p, char c, const char *what)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    if (!pipe_parse_is_punct(&t, p, c))
        return pipe_parse_expected(p, &t, what);
    pipe_parse_consume(p, &t);
    return 0;
}

/* ---- Numbers ------------------------------------------------------------------------------ */

/* Decimal only: [+-] digits [. digits] [e [+-] digits], with digits on at least one side of the
 * point. A '.' or an exponent makes it a float. */
enum num_class pipe_parse_classify(const char *s, size_t n)
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
bool pipe_parse_to_i64(const char *s, size_t n, int64_t *out)
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
bool pipe_parse_to_f64(const char *s, size_t n, double *out)
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
int pipe_parse_int(struct parser *p, const char *not_a_number, int64_t *v, struct tok *t)
{
    pipe_parse_peek(p, t);
    if (t->kind != T_NUM)
        return pipe_parse_expected(p, t, not_a_number);
    const char *s = p->s + t->start;
    switch (pipe_parse_classify(s, t->len)) {
    case NUM_BAD:
        return pipe_parse_expected(p, t, "a number");
    case NUM_FLOAT:
        return pipe_parse_expected(p, t, "an integer");
    case NUM_INT:
        if (!pipe_parse_to_i64(s, t->len, v))
            return pipe_parse_expected(p, t, "a 64-bit integer");
        break;
    }
    pipe_parse_consume(p, t);
    return 0;
}

/* An integer argument of at least min; otherwise "expected RANGE, found TOKEN". */
int pipe_parse_count(struct parser *p, int64_t min, const char *range, int64_t *v)
{
    struct tok t;
    int rc = pipe_parse_int(p, "a number", v, &t);
    if (rc)
        return rc;
    if (*v < min)
        return pipe_parse_expected(p, &t, range);
    return 0;
}

/* ---- Strings ------------------------------------------------------------------------------ */

/* Decodes the T_STR token t into a new NUL-terminated buffer (*out, *outlen without the NUL). */
int pipe_parse_decode_string(struct parser *p, const struct tok *t, char **out, size_t *outlen)
{
    const char *s = p->s + t->start + 1;
    size_t n = t->len - 2;
    char *d = malloc(n + 1);
    if (!d)
        return pipe_parse_nomem(p);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            d[o++] = s[i];
            continue;
        }
        char e = s[i + 1]; /* the lexer guarantees a byte after every backslash */
        int hi = -1, lo = -1;
        if (e == 'x' && i + 3 < n) {
            hi = hex_digit_value(s[i + 2]);
            lo = hi >= 0 ? hex_digit_value(s[i + 3]) : -1;
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
            return pipe_parse_fail(p, t->start + 1 + i,
                                   "expected \\\\, \\\", \\n, \\t or \\xNN, found %s", found);
        }
        i++;
    }
    d[o] = '\0';
    *out = d;
    *outlen = o;
    return 0;
}

/* Reads a string literal (for file patterns). */
int pipe_parse_string(struct parser *p, char **out, size_t *outlen)
{
    struct tok t;
    pipe_parse_peek(p, &t);
    if (t.kind == T_BADSTR)
        return pipe_parse_fail(p, t.start, "unterminated string");
    if (t.kind != T_STR)
        return pipe_parse_expected(p, &t, "a string");
    int rc = pipe_parse_decode_string(p, &t, out, outlen);
    if (rc)
        return rc;
    pipe_parse_consume(p, &t);
    return 0;
}
