/* The pipeline expression parser (docs/design.md §3). Pure: no I/O, no global state.
 *
 *   pipeline := source { "|" op }
 *
 * Literals: integers (decimal, optional sign), floats (with '.' or exponent), strings in double
 * quotes with \\ \" \n \t \xNN escapes, true/false, [lists], (tuples) in list() values. */
#ifndef SLUICE_PIPELINE_PARSE_H
#define SLUICE_PIPELINE_PARSE_H

#include "spec.h"

#include <stddef.h>

/* Parses text into a new spec. On success returns 0 and *out owns the spec. On failure returns
 * SLUICE_ERR_PARSE (or SLUICE_ERR_NOMEM), leaves *out NULL, and writes a one-line message to err
 * of the form "column C: expected X, found Y" (C is 1-based). Checks syntax and argument
 * ranges (batch size >= 1, step != 0, shard index < count, ...); function names are checked
 * against a registry separately (pipe_registry_check). */
int pipe_parse(const char *text, struct pipe_spec **out, char *err, size_t errlen);

/* Parses a pipeline tail: "op | op | ..." with no source (the --local argument). The result has
 * source.kind == PIPE_SRC_RANGE with start = stop = 0 and must not be opened on its own; use
 * pipe_open_tail(). Same error contract as pipe_parse(). */
int pipe_parse_tail(const char *text, struct pipe_spec **out, char *err, size_t errlen);

#endif
