/* The jsonl() source: JSON Lines files (docs/design.md §3), one element per line.
 *
 * The lines come from the lines() reader (files.h: streamed, gzip and zstd recognised by
 * content); each is parsed with jansson and must be a JSON object. The element is a tuple of the
 * asked-for fields in the order given (one field: a one-component element): a string becomes
 * scalar bytes (UTF-8 as written), an integer int64, any other number float64, true/false a
 * bool, and an array a 1-D tensor: of int64 when every item is an integer, float64 when every
 * item is a number and one is not, bytes when every item is a string (an empty array is float64
 * of shape [0]). Blank lines (nothing but spaces and tabs) hold no element. Errors name the file,
 * the line (counted from 1) and the field, and end the stream: "data.jsonl: line 7: not JSON:
 * '[' or '{' expected near 'x'", "...: line 7: field "text": missing", "...: field "text": null",
 * "...: field "meta": an object, expected a string, number, boolean or array", "...: field
 * "ids": an array of mixed or nested values". */
#ifndef SLUICE_PIPELINE_JSONL_H
#define SLUICE_PIPELINE_JSONL_H

#include "iter.h"

#include <stddef.h>

/* Creates a source iterator over the files (paths copied) yielding the fields (copied; 1 to
 * PIPE_MAX_COMPONENTS distinct ones, each passing pipe_jsonl_field_problem() of spec.h). Files are
 * opened lazily as reading reaches them. Returns 0 or SLUICE_ERR_NOMEM (SLUICE_ERR_INVALID for bad
 * arguments); *out is owned by the caller's chain. */
int pipe_jsonl_open(char *const *paths, size_t npaths, char *const *fields, size_t nfields,
                    struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
