/* Base-128 varints as protobuf writes them: the one codec of the element records, the
 * hand-encoded element replies and the dataset-definition scanner. Pure, header-only. */
#ifndef SLUICE_COMMON_VARINT_H
#define SLUICE_COMMON_VARINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VARINT_MAX_LEN 10 /* a 64-bit value; protobuf-c stops looking for the end here */

/* Bytes varint_put() writes for v (1 to 10). */
static inline size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes v at out (room for varint_len(v) bytes) and returns the bytes written. */
static inline size_t varint_put(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* Reads a varint of at most max bytes (1 to VARINT_MAX_LEN) from d[*pos, end) into *out and
 * advances *pos past it. Returns false, with *pos somewhere inside, when it does not end within
 * max bytes or before end, or when a tenth byte carries more than the top bit of 64. */
static inline bool varint_get(const uint8_t *d, size_t end, size_t *pos, unsigned max,
                              uint64_t *out)
{
    /* One byte (a value under 128), the common case of lengths, ranks and small tags, and two
     * (under 16384: split numbers and positions within a split): no loop. */
    if (*pos < end && max > 0 && d[*pos] < 0x80) {
        *out = d[(*pos)++];
        return true;
    }
    if (*pos + 1 < end && max > 1 && d[*pos + 1] < 0x80) {
        *out = (uint64_t)(d[*pos] & 0x7f) | (uint64_t)d[*pos + 1] << 7;
        *pos += 2;
        return true;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < max && i < VARINT_MAX_LEN; i++) {
        if (*pos >= end)
            return false;
        uint8_t b = d[(*pos)++];
        if (i == 9 && b > 1)
            return false;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

#endif
