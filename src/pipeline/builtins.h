/* The built-in map and filter functions of docs/design.md §3.
 *
 *   map:    square, add(K), mul(K), mod(K), identity, sleep_us(N), bytes(N);
 *           parse_example(SPEC, ...) (example.h); decode_jpeg([MAX_PIXELS]) (jpeg.h);
 *           resize(H, W), center_crop(H, W), random_crop(H, W[, SEED]), normalize(MEAN, STD)
 *           (image.h)
 *   filter: even, odd, lt(K), ge(K)
 *   both:   py("module:function", ARG...), a user Python function (pyfn.h)
 *
 * Arithmetic maps apply to every numeric component elementwise and keep its dtype (integers
 * wrap); an integer component with a float K becomes float64; mod follows Python's sign rule.
 * Filters look at a scalar numeric first component. All functions are stateless and
 * thread-safe; random_crop draws from the call's seed (map.h), never from shared state. */
#ifndef SLUICE_PIPELINE_BUILTINS_H
#define SLUICE_PIPELINE_BUILTINS_H

#include "sluice/sluice.h"

/* Registers every built-in function (and its argument check) through the public registration
 * calls. Returns 0 or the first registration error. Called by pipe_registry_new(). */
int pipe_builtins_register(struct sluice_registry *reg);

#endif
