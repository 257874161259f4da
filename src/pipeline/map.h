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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the builder of the chain knows about where a map or filter runs. */
struct pipe_map_env {
    /* The key random functions draw from: in distributed_epoch (split_keyed) the key of the split
     * the chain processes (pipe_open_splits), so a split processed again yields the same
     * elements; otherwise one drawn at random when the run was opened. */
    bool split_keyed;
    uint64_t key;
    uint64_t salt; /* the repeat() pass the chain is built for, mixed into the key */
    /* The context's origin (iter.h) is the origin of each element that reaches this iterator:
     * nothing between the source and it holds elements back or reorders them. */
    bool origin;
};

/* Builds a map (kind PIPE_FN_MAP) or a filter (PIPE_FN_FILTER; fn->kind must include kind)
 * over upstream, calling fn with the arguments args[0..nargs) (borrowed: they must outlive the
 * iterator). env is copied; NULL means none of it is known (key 0). Takes ownership of
 * upstream, also on failure (then it is destroyed). Returns 0 or SLUICE_ERR_NOMEM.
 *
 * A function's failure stops the chain with "map(NAME): REASON" ("map(NAME, "ARG0"): REASON"
 * for a function whose first argument names what runs), followed by
 * " (record at FILE offset N)" when env->origin holds and the source is a file source. */
int pipe_map_open(const struct pipe_fn *fn, enum pipe_fn_kind kind, const struct pipe_value *args,
                  size_t nargs, const struct pipe_map_env *env, struct pipe_iter *upstream,
                  struct pipe_ctx *ctx, struct pipe_iter **out);

/* The seed of a random function's draw for the element in hand, from the call's context
 * (sluice_fn_args in registry.h) and the function's own SEED argument when it has one:
 *   - distributed_epoch: from the split's key, SEED and the element's index in the split, so a
 *     split processed again after a worker failure draws the same numbers;
 *   - otherwise with SEED: from SEED, the repeat() pass and the element's index, the same in
 *     every run;
 *   - otherwise: from the key drawn at random when the run was opened, the pass and the
 *     index.
 * Pure. */
uint64_t pipe_fn_seed(const struct sluice_fn_args *args, bool has_seed, int64_t seed);

#endif
