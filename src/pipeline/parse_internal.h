/* What the pipeline parser's files share (parse.c: values, sources, operations, entry points;
 * parse_lex.c: the lexer, error messages, numbers and strings): the parser's state, tokens, and
 * the token-level steps. Every failure writes "column C: ..." into the parser's message buffer
 * and returns SLUICE_ERR_PARSE (SLUICE_ERR_NOMEM for pipe_parse_nomem). */
#ifndef SLUICE_PIPELINE_PARSE_INTERNAL_H
#define SLUICE_PIPELINE_PARSE_INTERNAL_H

#include "parse.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    int mix_depth;     /* mixing sources around the pipeline being read */
    size_t npipelines; /* input and choice pipelines read so far */
};

/* Large enough for quote_span's worst case: 32 escaped bytes, the ellipsis and the quotes. */
#define QUOTE_BUF (32 * 4 + 8)

enum num_class { NUM_BAD, NUM_INT, NUM_FLOAT };

/* ---- lexer ---- */

/* The next token, without consuming it. */
void pipe_parse_peek(const struct parser *p, struct tok *t);
void pipe_parse_consume(struct parser *p, const struct tok *t);
bool pipe_parse_is_punct(const struct tok *t, const struct parser *p, char c);
bool pipe_parse_is_word(const struct tok *t, const struct parser *p, const char *w);

/* ---- errors ---- */

/* Token t as it appears in a message (quoted, or "end of input"). */
void pipe_parse_describe(const struct parser *p, const struct tok *t, char out[QUOTE_BUF]);
/* The 1-based column of byte at. */
int pipe_parse_column_of(size_t at);
/* "column C: " and the formatted message; returns SLUICE_ERR_PARSE. */
int pipe_parse_fail(struct parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "column C: expected WHAT, found TOKEN". */
int pipe_parse_expected(struct parser *p, const struct tok *t, const char *what);
int pipe_parse_nomem(struct parser *p);
/* Consumes the punctuation c, or fails with "expected WHAT". */
int pipe_parse_expect_punct(struct parser *p, char c, const char *what);

/* ---- numbers and strings ---- */

enum num_class pipe_parse_classify(const char *s, size_t n);
bool pipe_parse_to_i64(const char *s, size_t n, int64_t *out);
bool pipe_parse_to_f64(const char *s, size_t n, double *out);
int pipe_parse_int(struct parser *p, const char *not_a_number, int64_t *v, struct tok *t);
int pipe_parse_count(struct parser *p, int64_t min, const char *range, int64_t *v);
int pipe_parse_decode_string(struct parser *p, const struct tok *t, char **out, size_t *outlen);
int pipe_parse_string(struct parser *p, char **out, size_t *outlen);

#endif
