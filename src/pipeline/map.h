/* map() and filter(): run a registered function on every element.
 *
 * The function is resolved once when the iterator is built, and a function with per-op state
 * (pipe_fn.bind) is bound before its first element. A function's error, or its bind's, stops
 * the pipeline with "map(NAME): REASON" (or "filter(NAME): REASON"; with the first argument,
 * map(py, "aug:flip"): REASON, for pipe_fn.label_arg0) in the context. */
#ifndef SLUICE_PIPELINE_MAP_H
#define SLUICE_PIPELINE_MAP_H

#include "iter.h"
#include "registry.h"

#include <stddef.h>

/* Builds a map (kind PIPE_FN_MAP) or a filter (PIPE_FN_FILTER; fn->kind must include kind)
 * over upstream, calling fn with the arguments args[0..nargs) (borrowed: they must outlive the
 * iterator). Takes ownership of upstream, also on failure (then it is destroyed). Returns 0 or
 * SLUICE_ERR_NOMEM. */
int pipe_map_open(const struct pipe_fn *fn, enum pipe_fn_kind kind, const struct pipe_value *args,
                  size_t nargs, struct pipe_iter *upstream, struct pipe_ctx *ctx,
                  struct pipe_iter **out);

#endif
