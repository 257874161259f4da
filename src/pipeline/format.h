/* The text output format of docs/design.md §3: one element per line. */
#ifndef SLUICE_PIPELINE_FORMAT_H
#define SLUICE_PIPELINE_FORMAT_H

#include "element.h"

#include <stddef.h>

/* A growable output buffer, reused across elements. Once anything has been appended, p holds
 * len bytes followed by a NUL (not counted in len). The owner resets len to 0 to start over and
 * frees the memory with pipe_buf_release(). */
struct pipe_buf {
    char *p;
    size_t len, cap;
};

void pipe_buf_release(struct pipe_buf *b);

/* Appends the text form of e (without a newline) to b. Integers in decimal; floats in the
 * shortest form that round-trips (from "%.17g"); bytes with \\, \n, \t and bytes outside
 * 0x20-0x7e escaped as \xNN (lowercase hex); rank >= 1 as [a, b] nested, an empty dimension as
 * []; several components as (c0, c1). Returns 0, SLUICE_ERR_NOMEM, or SLUICE_ERR_INVALID when a
 * tensor's buffers do not hold what its dtype and shape promise; on failure b is unchanged. */
int pipe_format_elem(struct pipe_buf *b, const struct sluice_element *e);

/* Writes the shortest text that reads back (strtod / strtof) as exactly v into buf, which must
 * hold at least PIPE_FLOAT_BUF bytes, and returns its length. The text is "%.17g" (for float32
 * "%.9g") with as few significant digits as round-trip allows, so the notation (fixed or
 * exponent) is the one that format would choose: 100 prints as "100", 1e100 as "1e+100", -0.0 as
 * "-0". Infinities and NaN print as "inf", "-inf" and "nan". */
#define PIPE_FLOAT_BUF 32
size_t pipe_format_f64(double v, char *buf);
size_t pipe_format_f32(float v, char *buf);

#endif
