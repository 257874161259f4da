#include "shm_arena.h"

#include "sluice/sluice.h"

#include <stdlib.h>
#include <string.h>

void shm_arena_split(uint64_t total, uint64_t *ring, uint64_t *arena)
{
    uint64_t a = 0;
    if (total >= SHM_ARENA_REGION_MIN) {
        uint64_t g = total / 2 / SHM_ARENA_GRANULE;
        if (g > SHM_ARENA_MAX_GRANULES)
            g = SHM_ARENA_MAX_GRANULES;
        a = g * SHM_ARENA_GRANULE;
    }
    *arena = a;
    *ring = total - a;
}

int shm_arena_init(struct shm_arena *a, uint32_t n)
{
    memset(a, 0, sizeof *a);
    if (n > SHM_ARENA_MAX_GRANULES)
        return SLUICE_ERR_INVALID;
    a->n = n;
    size_t m = n ? n : 1;
    a->len = calloc(m, sizeof *a->len);
    a->refs = calloc(m, 1);
    a->lent = calloc(m, 1);
    a->busy = calloc((m + 63) / 64, sizeof *a->busy);
    if (!a->len || !a->refs || !a->lent || !a->busy) {
        shm_arena_destroy(a);
        return SLUICE_ERR_NOMEM;
    }
    return 0;
}

void shm_arena_destroy(struct shm_arena *a)
{
    free(a->len);
    free(a->refs);
    free(a->lent);
    free(a->busy);
    memset(a, 0, sizeof *a);
}

static bool busy(const struct shm_arena *a, uint32_t g)
{
    return a->busy[g / 64] >> (g % 64) & 1;
}

static void mark(struct shm_arena *a, uint32_t g, uint32_t k, bool on)
{
    for (uint32_t i = g; i < g + k; i++) {
        if (on)
            a->busy[i / 64] |= (uint64_t)1 << (i % 64);
        else
            a->busy[i / 64] &= ~((uint64_t)1 << (i % 64));
    }
}

/* The first run of k free granules in [from, to), or -1. */
static int64_t find_run(const struct shm_arena *a, uint32_t from, uint32_t to, uint32_t k)
{
    uint32_t run = 0;
    for (uint32_t g = from; g < to; g++) {
        if (g % 64 == 0 && run == 0 && g + 64 <= to && a->busy[g / 64] == ~(uint64_t)0) {
            g += 63;
            continue;
        }
        if (busy(a, g)) {
            run = 0;
            continue;
        }
        if (++run == k)
            return (int64_t)(g + 1 - k);
    }
    return -1;
}

int64_t shm_arena_alloc(struct shm_arena *a, uint64_t bytes)
{
    if (bytes == 0 || a->n == 0)
        return -1;
    uint64_t k = (bytes + SHM_ARENA_GRANULE - 1) / SHM_ARENA_GRANULE;
    if (k > a->n - a->used)
        return -1;
    int64_t g = find_run(a, 0, a->n, (uint32_t)k);
    if (g < 0)
        return -1;
    uint32_t s = (uint32_t)g;
    a->len[s] = (uint32_t)k;
    a->refs[s] = 1;
    a->lent[s] = 0;
    mark(a, s, (uint32_t)k, true);
    a->used += (uint32_t)k;
    return g;
}

uint32_t shm_arena_block(const struct shm_arena *a, uint32_t g)
{
    return g < a->n ? a->len[g] : 0;
}

void shm_arena_unref(struct shm_arena *a, uint32_t g)
{
    if (g >= a->n || a->len[g] == 0 || a->refs[g] == 0)
        return;
    if (--a->refs[g] > 0)
        return;
    uint32_t k = a->len[g];
    mark(a, g, k, false);
    a->used -= k;
    a->len[g] = 0;
    a->lent[g] = 0;
}

bool shm_arena_lend(struct shm_arena *a, uint32_t g, uint64_t at, uint64_t len)
{
    if (g >= a->n || a->len[g] == 0 || a->lent[g] || a->refs[g] == 0)
        return false;
    uint64_t lo = (uint64_t)g * SHM_ARENA_GRANULE;
    uint64_t hi = lo + (uint64_t)a->len[g] * SHM_ARENA_GRANULE;
    if (at < lo || at >= lo + SHM_ARENA_GRANULE || len == 0 || len > hi - at)
        return false;
    a->lent[g] = 1;
    a->refs[g]++;
    return true;
}

unsigned shm_arena_collect(struct shm_arena *a, uint32_t word, uint64_t bits)
{
    unsigned n = 0;
    while (bits) {
        unsigned b = (unsigned)__builtin_ctzll(bits);
        bits &= bits - 1;
        uint64_t g = (uint64_t)word * 64 + b;
        if (g >= a->n || a->len[g] == 0 || !a->lent[g])
            continue;
        a->lent[g] = 0;
        shm_arena_unref(a, (uint32_t)g);
        n++;
    }
    return n;
}
