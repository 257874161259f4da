/* A hash map from uint64 keys to uint64 values: open addressing with linear probing, at most
 * half full, deletion by backward shift (no tombstones). Pure: no locks, no I/O. The dispatcher
 * indexes the splits leased in an iteration by it (split seq -> task id), so that a report of k
 * splits costs k lookups, whatever the number of tasks.
 *
 * Every key but UINT64_MAX may be stored. A zeroed struct is an empty map; the caller owns it
 * and releases it with u64map_release(). */
#ifndef SLUICE_COMMON_U64MAP_H
#define SLUICE_COMMON_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct u64map {
    uint64_t *slots; /* cap pairs: key + 1 (0: empty), value */
    size_t cap;      /* 0 or a power of two */
    size_t n;        /* keys stored */
};

/* Makes room for n keys in all, so that u64map_put of new keys never allocates while the map
 * holds at most n. Returns 0, or SLUICE_ERR_NOMEM with the map unchanged. */
int u64map_reserve(struct u64map *m, size_t n);

/* Sets key's value, adding the key when it is new: returns 1 when added, 0 when replaced, or
 * SLUICE_ERR_NOMEM (the map unchanged) when a new key found no room and growing failed. */
int u64map_put(struct u64map *m, uint64_t key, uint64_t value);

/* Whether key is stored; its value into *value (when not NULL). */
bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *value);

/* The smallest key stored into *key; false when the map is empty. A scan of the whole table. */
bool u64map_min(const struct u64map *m, uint64_t *key);

/* Removes key; returns whether it was stored. Never allocates. */
bool u64map_del(struct u64map *m, uint64_t key);

/* Keeps the keys for which keep(key, value, ctx) is true and removes the others, in one pass over
 * the table (into a new one of the same size). Returns 0, or SLUICE_ERR_NOMEM with the map
 * unchanged. */
int u64map_retain(struct u64map *m, bool (*keep)(uint64_t key, uint64_t value, void *ctx),
                  void *ctx);

/* Empties the map, keeping its memory. */
void u64map_clear(struct u64map *m);

/* Frees the map's memory; it is then empty (and may be used again). */
void u64map_release(struct u64map *m);

#endif
