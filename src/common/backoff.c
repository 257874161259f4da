#include "backoff.h"

uint32_t backoff_ceiling(uint32_t attempt, uint32_t base_ms, uint32_t max_ms)
{
    if (base_ms == 0)
        return 0;
    uint64_t ceiling = base_ms;
    /* Doubling stops as soon as max_ms is reached, so the product never overflows and the loop
     * runs at most 32 times whatever attempt is. */
    for (uint32_t i = 0; i < attempt && ceiling < max_ms; i++)
        ceiling *= 2;
    return (uint32_t)(ceiling < max_ms ? ceiling : max_ms);
}

uint32_t backoff_delay(uint32_t attempt, uint32_t base_ms, uint32_t max_ms, uint64_t rnd)
{
    uint64_t span = (uint64_t)backoff_ceiling(attempt, base_ms, max_ms) + 1;
    /* Scaling by multiplication keeps every value of the window reachable and uses the high
     * bits, which are the better ones in most generators. */
    return (uint32_t)(((rnd >> 32) * span) >> 32);
}

uint64_t backoff_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
