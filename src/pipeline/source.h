/* In-memory sources: range() and list() (docs/design.md §3).
 *
 * Both read their source sequence through a list of index spans, so the same iterator serves a
 * whole source (one span covering everything) and the splits of distributed processing (one
 * span per split, in the order given). Spans are clamped to the sequence. */
#ifndef SLUICE_PIPELINE_SOURCE_H
#define SLUICE_PIPELINE_SOURCE_H

#include "iter.h"
#include "spec.h"

#include <stddef.h>
#include <stdint.h>

struct pipe_dist; /* dist.h */

/* Element indices [begin, end) of a source sequence, or positions of a view (dist.h), of the
 * split sequence's repetition pass (which global_shuffle needs; 0 otherwise). */
struct pipe_span {
    uint64_t begin, end;
    uint64_t pass;
};

/* global_shuffle(seed) applied by a range() or list() source. Reading the whole sequence (spans
 * NULL) it yields element perm(k) at position k, perm keyed by (seed, pass) over the source
 * length; reading spans of a view, position g of a span maps to view index x =
 * pipe_dist_index(view, g) and yields element perm(x), perm keyed by (seed,
 * pipe_dist_pass(view, span.pass, g)). */
struct pipe_src_shuffle {
    int64_t seed;
    uint64_t pass; /* whole sequence only */
};

/* A source of scalar int64: element k of the sequence is start + k * step, for k < len. With
 * spans NULL the whole sequence is read; otherwise spans are copied. With view non-NULL (copied)
 * the spans are positions of that view, read as source elements pipe_dist_index(view, g). With
 * shuffle non-NULL (copied) the indices go through global_shuffle's permutation; NULL reads
 * exactly as without the op, at the same cost. Returns 0 or SLUICE_ERR_NOMEM; *out is owned by
 * the caller's chain (destroy through its ops). */
int pipe_range_open(int64_t start, int64_t step, uint64_t len, const struct pipe_span *spans,
                    size_t nspans, const struct pipe_dist *view,
                    const struct pipe_src_shuffle *shuffle, struct pipe_ctx *ctx,
                    struct pipe_iter **out);

/* Converts list() literals into elements, one per value: ints to int64 scalars, floats to
 * float64, strings to scalar bytes, booleans to bool, [lists] to tensors of rank >= 1 (ints
 * mixed with floats give float64; an empty list is float64 of shape [0]), (tuples) to elements
 * of several components. On success *out is a malloc'd array of n elements, freed with
 * pipe_list_elems_free(). On failure returns SLUICE_ERR_INVALID (or SLUICE_ERR_NOMEM) with
 * "column C: list value I: ..." in err, where C is the source's column. */
int pipe_list_convert(const struct pipe_value *values, size_t n, int column,
                      struct sluice_element **out, char *err, size_t errlen);
void pipe_list_elems_free(struct sluice_element *elems, size_t n);

/* A source yielding copies of elems (borrowed: they must outlive the iterator) through spans,
 * as pipe_range_open(). */
int pipe_list_open(const struct sluice_element *elems, size_t n, const struct pipe_span *spans,
                   size_t nspans, const struct pipe_dist *view,
                   const struct pipe_src_shuffle *shuffle, struct pipe_ctx *ctx,
                   struct pipe_iter **out);

#endif
