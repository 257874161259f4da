/* shuffle(BUFFER [, SEED]): a uniformly random pick from a sliding buffer, as tf.data.
 *
 * The buffer is filled with the first BUFFER elements; each output is a uniformly random slot,
 * which is then refilled from upstream. Elements move by swapping buffers (pipe_elem_swap), never
 * by copying. With a seed the order is a pure function of (seed, salt, upstream sequence); the
 * generator is xoshiro256** seeded through splitmix64. Without a seed a random one is drawn
 * from getrandom(). */
#ifndef SLUICE_PIPELINE_SHUFFLE_H
#define SLUICE_PIPELINE_SHUFFLE_H

#include "iter.h"

#include <stdbool.h>
#include <stdint.h>

/* buffer >= 1. salt varies the seeded order per pass of an enclosing repeat (0 for the first
 * pass, which then matches the same shuffle without repeat). Takes ownership of upstream, also
 * on failure (then it is destroyed). Returns 0, SLUICE_ERR_NOMEM, or -errno when no random seed
 * could be drawn. */
int pipe_shuffle_open(int64_t buffer, bool has_seed, int64_t seed, uint64_t salt,
                      struct pipe_iter *upstream, struct pipe_ctx *ctx, struct pipe_iter **out);

/* Mixes a pass number into a salt; pipe_salt_mix(s, 0) == s. Used by repeat for each pass. */
uint64_t pipe_salt_mix(uint64_t salt, uint64_t pass);

#endif
