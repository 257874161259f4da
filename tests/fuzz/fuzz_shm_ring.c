/* Fuzzes what a reader accepts from a shared-memory ring (common/shm_ring.h), written by a worker
 * it does not have to trust, and the release tracker behind it.
 * - The input's first 16 bytes choose the reader's position and head (aligned, head at most one
 *   ring behind); of the rest, the first half is copied into a ring of SHM_RING_MIN bytes at the
 *   position's offset and the second half at offset 0 (where a block after a pad lies). Whenever
 * shm_ring_read accepts the block, its payload must lie inside the ring, start aligned, and end
 * within one ring of head; the block must follow rpos.
 * - The accepted block and the input's last bytes then drive the tracker: adds of blocks that
 *   follow each other and releases at positions the input picks; head never moves backwards,
 *   never passes the tail, and every release of a position not held is refused. */
#include "fuzz.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/shm_ring.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint8_t *ring;

static void check_read(const uint8_t *data, size_t size, struct shm_ring_block *out, bool *ok)
{
    const uint64_t S = SHM_RING_MIN;
    uint64_t rpos = get_u64(data) % (64 * S) / SHM_RING_ALIGN * SHM_RING_ALIGN;
    uint64_t back = get_u64(data + 8) % (S + SHM_RING_ALIGN);
    uint64_t head = back > rpos ? 0 : rpos - back;
    memset(ring, 0, S);
    size_t n = (size - 16) / 2, m = size - 16 - n;
    uint64_t off = rpos % S;
    memcpy(ring, data + 16 + n, m < S ? m : S);
    memcpy(ring + off, data + 16, n < S - off ? n : S - off);
    struct shm_ring_block b;
    *ok = shm_ring_read(ring, S, rpos, head, &b) == 0;
    if (!*ok)
        return;
    CHECK(b.start == rpos);
    CHECK(b.len >= 1);
    /* An arena payload's place is the region's to check (shm_region_take). */
    if (!b.ext) {
        CHECK(b.off >= SHM_RING_HDR && b.off % SHM_RING_ALIGN == 0);
        CHECK(b.off + b.len <= S);
    }
    CHECK(b.next > rpos && b.next - head <= S);
    *out = b;
}

static void check_tracker(const uint8_t *data, size_t size, const struct shm_ring_block *b)
{
    struct shm_tracker t;
    shm_tracker_init(&t);
    uint64_t start = 0, len = b ? b->next - b->start : 64;
    /* Up to 32 blocks of the accepted length, then releases in the input's order. */
    size_t nblocks = size % 32 + 1;
    for (size_t i = 0; i < nblocks; i++) {
        CHECK(shm_tracker_add(&t, start, start + len, i, 1000) == 0);
        start += len;
    }
    bool released[32] = {false};
    uint64_t prev_head = t.head;
    for (size_t i = 0; i < size && i < 256; i++) {
        size_t k = data[size - 1 - i] % 40;
        uint64_t pos = (uint64_t)k * len + (data[i] & 1); /* sometimes not a block's start */
        uint64_t tag = UINT64_MAX;
        int rc = shm_tracker_release(&t, pos, &tag);
        bool valid = (data[i] & 1) == 0 && k < nblocks && !released[k];
        CHECK((rc == 0) == valid);
        if (valid) {
            released[k] = true;
            CHECK(tag == k);
        }
        CHECK(t.head >= prev_head && t.head <= t.tail);
        prev_head = t.head;
    }
    size_t lead = 0;
    while (lead < nblocks && released[lead])
        lead++;
    CHECK(t.head == lead * len);
    shm_tracker_release_all(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ring && !(ring = malloc(SHM_RING_MIN)))
        return 0;
    if (size < 16)
        return 0;
    struct shm_ring_block b;
    bool ok;
    check_read(data, size, &b, &ok);
    check_tracker(data, size, ok ? &b : NULL);
    return 0;
}
