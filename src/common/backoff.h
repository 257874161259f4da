/* Exponential backoff with full jitter, for retrying connections.
 *
 * Pure: no clock and no randomness of its own. The caller keeps the attempt count (0 for the
 * first retry after a failure, reset after a success) and passes a uniformly distributed random
 * value; the same inputs always give the same delay, so the policy is tested exhaustively.
 * Any thread may call these functions. */
#ifndef SLUICE_COMMON_BACKOFF_H
#define SLUICE_COMMON_BACKOFF_H

#include <stdint.h>

/* The largest delay for retry number attempt: min(max_ms, base_ms * 2^attempt), computed without
 * overflow for every attempt. base_ms 0 gives 0; max_ms below base_ms caps every ceiling at
 * max_ms. */
uint32_t backoff_ceiling(uint32_t attempt, uint32_t base_ms, uint32_t max_ms);

/* The delay before retry number attempt, drawn uniformly from [0, backoff_ceiling(...)] by the
 * high 32 bits of rnd ("full jitter": retries of many clients spread over the whole window
 * instead of arriving together). rnd 0 gives 0 and rnd UINT64_MAX gives the ceiling. */
uint32_t backoff_delay(uint32_t attempt, uint32_t base_ms, uint32_t max_ms, uint64_t rnd);

/* Advances *state and returns the next value of a small, fast, non-cryptographic generator
 * (splitmix64), good enough for jitter. Any seed, including 0, is valid. */
uint64_t backoff_random(uint64_t *state);

#endif
