#include "u64map.h"

#include "common/error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CAP 16

static size_t slot_of(uint64_t key, size_t cap)
{
    /* Fibonacci hashing: the multiplication spreads sequential keys (split seqs) over the
     * table. */
    return (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

/* Places key (not stored yet) into slots of cap pairs, which has an empty slot. */
static void place(uint64_t *slots, size_t cap, uint64_t key, uint64_t value)
{
    size_t i = slot_of(key, cap);
    while (slots[2 * i] != 0)
        i = (i + 1) & (cap - 1);
    slots[2 * i] = key + 1;
    slots[2 * i + 1] = value;
}

int u64map_reserve(struct u64map *m, size_t n)
{
    if (n > SIZE_MAX / 8)
        return SLUICE_ERR_NOMEM;
    size_t want = MIN_CAP;
    while (want < 2 * n)
        want *= 2;
    if (want <= m->cap)
        return 0;
    uint64_t *slots = calloc(want, 2 * sizeof *slots);
    if (!slots)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[2 * i] != 0)
            place(slots, want, m->slots[2 * i] - 1, m->slots[2 * i + 1]);
    }
    free(m->slots);
    m->slots = slots;
    m->cap = want;
    return 0;
}

/* The slot holding key, or the empty slot where its probe ends. */
static size_t find(const struct u64map *m, uint64_t key)
{
    size_t i = slot_of(key, m->cap);
    while (m->slots[2 * i] != 0 && m->slots[2 * i] != key + 1)
        i = (i + 1) & (m->cap - 1);
    return i;
}

int u64map_put(struct u64map *m, uint64_t key, uint64_t value)
{
    assert(key != UINT64_MAX);
    if (m->cap > 0) {
        size_t i = find(m, key);
        if (m->slots[2 * i] != 0) {
            m->slots[2 * i + 1] = value;
            return 0;
        }
    }
    if (u64map_reserve(m, m->n + 1) < 0)
        return SLUICE_ERR_NOMEM;
    place(m->slots, m->cap, key, value);
    m->n++;
    return 1;
}

bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *value)
{
    if (m->n == 0 || key == UINT64_MAX)
        return false;
    size_t i = find(m, key);
    if (m->slots[2 * i] == 0)
        return false;
    if (value)
        *value = m->slots[2 * i + 1];
    return true;
}

bool u64map_min(const struct u64map *m, uint64_t *key)
{
    if (m->n == 0)
        return false;
    uint64_t best = UINT64_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[2 * i] != 0 && m->slots[2 * i] - 1 < best)
            best = m->slots[2 * i] - 1;
    }
    *key = best;
    return true;
}

bool u64map_del(struct u64map *m, uint64_t key)
{
    if (m->n == 0 || key == UINT64_MAX)
        return false;
    size_t mask = m->cap - 1;
    size_t hole = find(m, key);
    if (m->slots[2 * hole] == 0)
        return false;
    m->slots[2 * hole] = 0;
    m->n--;
    /* Backward shift: each key after the hole in its run moves into the hole when the hole lies
     * on its probe path (between its home slot and where it is), so every probe still finds it
     * without tombstones. */
    for (size_t j = (hole + 1) & mask; m->slots[2 * j] != 0; j = (j + 1) & mask) {
        size_t home = slot_of(m->slots[2 * j] - 1, m->cap);
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            m->slots[2 * hole] = m->slots[2 * j];
            m->slots[2 * hole + 1] = m->slots[2 * j + 1];
            m->slots[2 * j] = 0;
            hole = j;
        }
    }
    return true;
}

int u64map_retain(struct u64map *m, bool (*keep)(uint64_t key, uint64_t value, void *ctx),
                  void *ctx)
{
    if (m->n == 0)
        return 0;
    uint64_t *slots = calloc(m->cap, 2 * sizeof *slots);
    if (!slots)
        return SLUICE_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t key = m->slots[2 * i] - 1, value = m->slots[2 * i + 1];
        if (m->slots[2 * i] != 0 && keep(key, value, ctx)) {
            place(slots, m->cap, key, value);
            n++;
        }
    }
    free(m->slots);
    m->slots = slots;
    m->n = n;
    return 0;
}

void u64map_clear(struct u64map *m)
{
    if (m->slots)
        memset(m->slots, 0, m->cap * 2 * sizeof *m->slots);
    m->n = 0;
}

void u64map_release(struct u64map *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}
