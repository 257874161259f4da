/* FNV-1a (64 bits): the one hash of digests and fingerprints that must be the same in every
 * process and after every restart (never for anything a peer could choose to collide). Pure,
 * header-only. Integers are hashed as 8 little-endian bytes, strings with their length first,
 * so adjacent fields cannot run into each other. */
#ifndef SLUICE_COMMON_FNV_H
#define SLUICE_COMMON_FNV_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FNV1A_OFFSET 0xcbf29ce484222325ull

static inline uint64_t fnv1a_bytes(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static inline uint64_t fnv1a_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return fnv1a_bytes(h, b, sizeof b);
}

static inline uint64_t fnv1a_str(uint64_t h, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return fnv1a_bytes(fnv1a_u64(h, n), s ? s : "", n);
}

#endif
