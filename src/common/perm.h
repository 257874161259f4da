/* Keyed pseudo-random permutations of [0, n) in O(1) memory, for global_shuffle. Pure.
 *
 * It lives in common rather than in the pipeline because the split plan (split_plan.h), which
 * the pipeline, the worker and the dispatcher core share, orders the files of a pass with it,
 * and the dispatcher core links no pipeline.
 *
 * The permutation is a keyed Feistel network over the smallest power of two 2^b >= n (b bits
 * split into two halves of floor(b/2) and ceil(b/2) bits, PERM_ROUNDS rounds), restricted
 * to [0, n) by cycle walking: a value that lands at or above n is enciphered again until it
 * falls below n. The network is a bijection of [0, 2^b), so cycle walking gives a bijection of
 * [0, n); since 2^b < 2n, a value takes fewer than two rounds of the network on average. The
 * round function is the splitmix64 finalizer (Steele, Lea, Flood: "Fast splittable
 * pseudorandom number generators", 2014) of the round key xor the half, and the round keys
 * come from splitmix64 over the key: statistically good mixing, not a cryptographic PRF.
 *
 * These functions define the order global_shuffle gives; the unit tests pin known values, so
 * a change here that changes any order fails them. */
#ifndef SLUICE_COMMON_PERM_H
#define SLUICE_COMMON_PERM_H

#include <stdint.h>

#define PERM_ROUNDS 6

struct perm {
    uint64_t n;       /* the domain: [0, n) */
    unsigned bits;    /* b: the network permutes [0, 2^b), 2^b >= n */
    unsigned lo_bits; /* the right half's width in even rounds (odd rounds: bits - lo_bits) */
    uint64_t keys[PERM_ROUNDS];
};

/* The splitmix64 finalizer: a bijection of 64-bit values with full avalanche. */
uint64_t perm_mix64(uint64_t x);

/* The key of one permutation of global_shuffle(seed): pass (epoch) e of the pipeline, and part
 * p: for range() and list() p is 0 (the whole source is one permutation); for file sources
 * part 0 orders the files and part j + 1 orders the records of file j (in sorted name order). */
uint64_t perm_key(int64_t seed, uint64_t pass, uint64_t part);

/* Prepares the permutation of [0, n) for key. n may be anything (0 and 1 give the identity). */
void perm_init(struct perm *p, uint64_t key, uint64_t n);

/* The image of x < n; x >= n is returned unchanged. */
uint64_t perm_apply(const struct perm *p, uint64_t x);

/* The inverse: perm_invert(p, perm_apply(p, x)) == x for every x < n. */
uint64_t perm_invert(const struct perm *p, uint64_t y);

#endif
