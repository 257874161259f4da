/* splitmix64's output function: a bijection of 64-bit integers whose every output bit depends on
 * every input bit, so nearby inputs give unrelated outputs. Pure, header-only. For seeding and
 * stepping generators, and wherever hashes of small integers are combined by addition (a sum of
 * FNV-1a hashes of small ids is close to linear in the ids, so two different sets of them can
 * have the same sum). */
#ifndef SLUICE_COMMON_MIX64_H
#define SLUICE_COMMON_MIX64_H

#include <stdint.h>

/* 2^64 / phi, odd: splitmix64's step. */
#define MIX64_GOLDEN 0x9e3779b97f4a7c15ull

/* The splitmix64 output for state x (x + MIX64_GOLDEN, finalized). */
static inline uint64_t mix64(uint64_t x)
{
    x += MIX64_GOLDEN;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif
