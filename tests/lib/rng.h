/* A deterministic generator for randomized tests: a failure reproduces from its seed. */
#ifndef SLUICE_TESTS_LIB_RNG_H
#define SLUICE_TESTS_LIB_RNG_H

#include <stdint.h>

/* The next value of the xorshift64 sequence in *state (which must not be 0), advancing it. */
uint64_t rng_next(uint64_t *state);

#endif
