/* The shared-memory ring (common/shm_ring.h): where blocks go, the bound the writer keeps, what
 * the reader accepts from the headers it finds, and releases in any order. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/shm_ring.h"
#include "sluice/sluice.h"

#define MIB ((uint64_t)1 << 20)

static void test_check_size(void **state)
{
    (void)state;
    assert_int_equal(shm_ring_check_size(MIB), 0);
    assert_int_equal(shm_ring_check_size((uint64_t)1 << 30), 0);
    assert_int_equal(shm_ring_check_size(MIB - 64), SLUICE_ERR_INVALID);
    assert_int_equal(shm_ring_check_size(MIB + 1), SLUICE_ERR_INVALID);
    assert_int_equal(shm_ring_check_size(SHM_RING_MAX * 2), SLUICE_ERR_INVALID);
}

static void test_choose(void **state)
{
    (void)state;
    const struct {
        bool same_host, off;
        uint64_t asked, want;
    } cases[] = {
        {true, false, 0, 1000}, {true, false, 4 * MIB, 4 * MIB},
        {true, true, 0, 0},     {true, true, 4 * MIB, 0},
        {false, false, 0, 0},   {false, false, 4 * MIB, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(shm_ring_choose(cases[i].same_host, cases[i].off, cases[i].asked, 1000),
                         cases[i].want);
}

static void test_place_table(void **state)
{
    (void)state;
    const uint64_t S = MIB;
    const struct {
        uint64_t wpos, head, len;
        int rc;
        uint64_t pad, off, total;
    } cases[] = {
        /* An empty ring at 0: header and payload rounded up to 64. */
        {0, 0, 1, 0, 0, 0, 128},
        {0, 0, 64, 0, 0, 0, 128},
        {0, 0, 65, 0, 0, 0, 192},
        /* The largest block fills the ring. */
        {0, 0, S - 64, 0, 0, 0, S},
        {0, 0, S - 63, SLUICE_ERR_TOO_LARGE, 0, 0, 0},
        {0, 0, 0, SLUICE_ERR_TOO_LARGE, 0, 0, 0},
        /* Behind a held block. */
        {128, 0, 100, 0, 0, 128, 192},
        /* Full: the held space leaves too little. */
        {S - 64, 0, 1, SLUICE_ERR_LIMIT, 0, 0, 0},
        /* Does not fit before the end: pad to the end, start at 0 (space before head is free). */
        {S - 128, S - 256, 100, 0, 128, 0, 128 + 192},
        /* Same, but the space at the start is still held. */
        {S - 128, 64, 100, SLUICE_ERR_LIMIT, 0, 0, 0},
        /* An empty ring mid-way, too small to hold 4 replies (test_place_reset): where the
         * writer is. */
        {4096, 4096, 100, 0, 0, 4096, 192},
        {S / 2, S / 2, 100, 0, 0, S / 2, 192},
        {4096, 4096, 8192, 0, 0, 4096, 8256},
        /* Not empty: where the writer is. */
        {4096 + 192, 4096, 100, 0, 0, 4096 + 192, 192},
        /* Not empty, a small ring: where the writer is, whatever is free before it. */
        {S / 2, S / 2 - 192, 100, 0, 0, S / 2, 192},
        /* After a reset, 3 more blocks of the size fit behind the held one, not a 4th. */
        {S + 192 * 3, 768, 100, 0, 0, 576, 192},
        {S + 192 * 4, 768, 100, SLUICE_ERR_LIMIT, 0, 0, 0},
        /* A head the reader cannot have. */
        {128, 192, 1, SLUICE_ERR_PROTOCOL, 0, 0, 0},
        {S + 128, 64, 1, SLUICE_ERR_PROTOCOL, 0, 0, 0},
        /* Positions past the first lap. */
        {5 * S + 64, 5 * S, 10, 0, 0, 64, 128},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct shm_ring_place p = {0};
        int rc = shm_ring_place(S, cases[i].wpos, cases[i].head, cases[i].len, 0, &p);
        if (rc != cases[i].rc)
            print_message("case %zu\n", i);
        assert_int_equal(rc, cases[i].rc);
        if (rc != 0)
            continue;
        assert_int_equal(p.pad, cases[i].pad);
        assert_int_equal(p.off, cases[i].off);
        assert_int_equal(p.total, cases[i].total);
    }
}

/* An empty ring starts over at 0 once 4 blocks fit before the writer, of the largest of the new
 * block's size, the largest placed before (big) and a reply of SHM_RING_REPLY_BYTES; the pad
 * counts as held. */
static void test_place_reset(void **state)
{
    (void)state;
    const uint64_t R = 64 * MIB, U = SHM_RING_REPLY_BYTES + 64, B = 3 * MIB + 64;
    const uint64_t N = 5 * MIB + 64; /* a block of 5 MiB of payload */
    const struct {
        uint64_t wpos, len, big;
        uint64_t pad, off;
    } cases[] = {
        /* 4 replies fit before the writer: back to 0. */
        {4 * U, 100, 0, R - 4 * U, 0},
        {R + 4 * U, 100, U, R - 4 * U, 0},
        /* One 64-byte unit fewer: where the writer is. */
        {4 * U - 64, 100, 0, 0, 4 * U - 64},
        /* A larger block placed before: 4 of those must fit. */
        {4 * U, 100, B, 0, 4 * U},
        {4 * B - 64, 100, B, 0, 4 * B - 64},
        {4 * B, 100, B, R - 4 * B, 0},
        /* The new block is the largest: 4 of it must fit. */
        {4 * N - 64, 5 * MIB, B, 0, 4 * N - 64},
        {4 * N, 5 * MIB, B, R - 4 * N, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct shm_ring_place p = {0};
        assert_int_equal(
            shm_ring_place(R, cases[i].wpos, cases[i].wpos, cases[i].len, cases[i].big, &p), 0);
        if (p.pad != cases[i].pad || p.off != cases[i].off)
            print_message("case %zu\n", i);
        assert_int_equal(p.pad, cases[i].pad);
        assert_int_equal(p.off, cases[i].off);
    }
}

/* A large ring that is not empty starts over when its held blocks, in one piece, leave an eighth
 * of it (and 6 blocks) free before them, however much they hold. */
static void test_place_large_ring(void **state)
{
    (void)state;
    const uint64_t G = (uint64_t)1 << 30, E = G / 8, L = G / 32 + 64;
    const struct {
        uint64_t wpos, head, len;
        uint64_t pad, off;
    } cases[] = {
        /* Back to 0: the held blocks and the pad count as held. */
        {G / 2, G / 2 - 192, 100, G / 2, 0},
        {E + 192, E, 100, G - E - 192, 0},
        /* Just under an eighth free before them: where the writer is. */
        {E + 128, E - 64, 100, 0, E + 128},
        /* Held blocks of more than an eighth (a reader's prefetch of large replies) with an
         * eighth free before them: back to 0 too; with less free: where the writer is. */
        {G / 2 + E + 64, G / 2 - 64, 100, G / 2 - E - 64, 0},
        {G / 2 + E + 64, E - 64, 100, 0, G / 2 + E + 64},
        /* The held blocks wrap: where the writer is. */
        {G + 256, G - 256, 100, 0, 256},
        /* An eighth free but fewer than 6 blocks of a large one (32 MiB): where the writer is;
         * 6 of them free: back to 0. */
        {6 * L, 6 * L - 192, G / 32, 0, 6 * L},
        {6 * L + 192, 6 * L, G / 32, G - 6 * L - 192, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct shm_ring_place p = {0};
        assert_int_equal(shm_ring_place(G, cases[i].wpos, cases[i].head, cases[i].len, 0, &p), 0);
        if (p.pad != cases[i].pad || p.off != cases[i].off)
            print_message("case %zu\n", i);
        assert_int_equal(p.pad, cases[i].pad);
        assert_int_equal(p.off, cases[i].off);
    }
}

/* A small PRNG for the simulation below. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A reader and a writer taking turns at random over many laps of a ring of size bytes: the
 * reader asks for replies by the iterator's rule (client/iterator_fetch.c shm_full: each reply
 * counted as SHM_RING_REPLY_BYTES or the largest it has read, whichever is larger; at most
 * SHM_MAX_COMING = 4 on the way; room for those, this one and a pad) and keeps a random few
 * blocks, released in any order; the writer places every reply as a worker does (shm_region.c),
 * mostly small ones and now and then one of maxlen bytes (mixed) or all of maxlen bytes (a
 * pipeline's batches of one size). Every reply the rule let the reader
 * ask for must fit when the writer places it: none may fall back to the socket. Returns how many
 * times the writer started over at 0 before the ring's end. */
static unsigned simulate(uint64_t size, uint64_t maxlen, bool mixed, uint64_t seed, unsigned steps,
                         unsigned *nblocks)
{
    uint8_t *ring = calloc(1, size);
    assert_non_null(ring);
    struct shm_tracker tr;
    shm_tracker_init(&tr);
    uint64_t wpos = 0, rpos = 0, big = 0, largest = 0;
    unsigned asked = 0, placed = 0, early = 0, blocks = 0;
    uint64_t lens[8];
    for (unsigned step = 0; step < steps; step++) {
        unsigned what = (unsigned)(rnd(&seed) % 4);
        unsigned coming = asked + placed;
        uint64_t each = largest > SHM_RING_REPLY_BYTES ? largest : SHM_RING_REPLY_BYTES;
        if (what == 0 && coming < 4) {
            uint64_t held = tr.tail - tr.head;
            if ((held == 0 && coming == 0) || held + coming * each + 2 * each <= size)
                asked++;
        } else if (what == 1 && asked > 0) {
            /* Mostly small replies, now and then one of the largest size. */
            uint64_t len = !mixed || rnd(&seed) % 8 == 0 ? maxlen : 1 + rnd(&seed) % (maxlen / 8);
            struct shm_ring_place p;
            int rc = shm_ring_place(size, wpos, tr.head, len, big, &p);
            if (rc != 0)
                print_message("step %u: %d at wpos %llu head %llu len %llu big %llu\n", step, rc,
                              (unsigned long long)wpos, (unsigned long long)tr.head,
                              (unsigned long long)len, (unsigned long long)big);
            assert_int_equal(rc, 0);
            uint64_t off = wpos % size;
            if (p.pad && off + p.total - p.pad <= size)
                early++;
            if (p.pad)
                shm_ring_put_header(ring + off, SHM_RING_PAD, p.pad);
            shm_ring_put_header(ring + p.off, SHM_RING_DATA, len);
            if (p.total - p.pad > big)
                big = p.total - p.pad;
            lens[placed] = len;
            wpos += p.total;
            asked--;
            placed++;
        } else if (what == 2 && placed > 0) {
            struct shm_ring_block b;
            assert_int_equal(shm_ring_read(ring, size, rpos, tr.head, &b), 0);
            assert_int_equal(b.len, lens[0]);
            if (b.len > largest)
                largest = b.len;
            memmove(lens, lens + 1, sizeof lens - sizeof lens[0]);
            assert_int_equal(shm_tracker_add(&tr, b.start, b.next, 0, size / SHM_RING_ALIGN), 0);
            rpos = b.next;
            placed--;
            blocks++;
        } else if (what == 3 && tr.n > 0) {
            /* Keep up to 5 blocks, releasing one of them at random. */
            size_t held = 0;
            for (size_t k = 0; k < tr.n; k++)
                held += !tr.v[(tr.first + k) % tr.cap].released;
            if (held <= rnd(&seed) % 6)
                continue;
            size_t k = (size_t)(rnd(&seed) % tr.n);
            while (tr.v[(tr.first + k) % tr.cap].released)
                k = (k + 1) % tr.n;
            assert_int_equal(shm_tracker_release(&tr, tr.v[(tr.first + k) % tr.cap].start, NULL),
                             0);
        }
    }
    *nblocks = blocks;
    shm_tracker_release_all(&tr);
    free(ring);
    return early;
}

/* Rings small and large (where a ring that is not empty starts over too), replies of up to a
 * few MiB or much less: a larger reply after smaller ones still finds its room after the ring
 * started over, and a ring that holds SHM_RING_RESET replies does start over before its end. */
static void test_replies_keep_their_room(void **state)
{
    (void)state;
    const struct {
        uint64_t size, maxlen;
        bool mixed;
    } cases[] = {
        {MIB, 48u << 10, true},       {8 * MIB, 256u << 10, true},    {64 * MIB, 48u << 10, true},
        {64 * MIB, 2 * MIB, true},    {64 * MIB, 5 * MIB, true},      {256 * MIB, 2 * MIB, true},
        {256 * MIB, 16 * MIB, true},  {256 * MIB, 2 * MIB, false},    {1024 * MIB, 32 * MIB, false},
        {1024 * MIB, 32 * MIB, true}, {1024 * MIB, 100 * MIB, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned blocks;
        unsigned early = simulate(cases[i].size, cases[i].maxlen, cases[i].mixed,
                                  0x9e3779b97f4a7c15ull + i, 200000, &blocks);
        print_message("ring %llu, replies up to %llu: %u blocks, %u starts over before the end\n",
                      (unsigned long long)cases[i].size, (unsigned long long)cases[i].maxlen,
                      blocks, early);
        assert_true(blocks > 2000);
        uint64_t unit =
            cases[i].maxlen > SHM_RING_REPLY_BYTES ? cases[i].maxlen : SHM_RING_REPLY_BYTES;
        if (cases[i].size >= 2 * SHM_RING_RESET * unit)
            assert_true(early > 10);
        else if (cases[i].size < SHM_RING_RESET * unit)
            assert_int_equal(early, 0);
    }
}

static void test_head_ok(void **state)
{
    (void)state;
    assert_true(shm_ring_head_ok(100, 0, 0));
    assert_true(shm_ring_head_ok(100, 50, 100));
    assert_false(shm_ring_head_ok(100, 50, 40));
    assert_false(shm_ring_head_ok(100, 0, 101));
}

/* Writes a block as the writer does: pad header, block header, payload. */
static uint64_t write_block(uint8_t *ring, uint64_t size, uint64_t wpos, uint64_t head,
                            uint64_t len, uint8_t fill)
{
    struct shm_ring_place p;
    assert_int_equal(shm_ring_place(size, wpos, head, len, 0, &p), 0);
    if (p.pad)
        shm_ring_put_header(ring + wpos % size, SHM_RING_PAD, p.pad);
    shm_ring_put_header(ring + p.off, SHM_RING_DATA, len);
    memset(ring + p.off + SHM_RING_HDR, fill, len);
    return wpos + p.total;
}

static void test_write_then_read_laps(void **state)
{
    (void)state;
    const uint64_t S = MIB;
    uint8_t *ring = calloc(1, S);
    assert_non_null(ring);
    uint64_t wpos = 0, rpos = 0, head = 0;
    /* Many laps of blocks of varied sizes, each read back and released at once. */
    for (unsigned i = 0; i < 200; i++) {
        uint64_t len = 1 + (i * 7919u) % (300u << 10);
        uint64_t next = write_block(ring, S, wpos, head, len, (uint8_t)i);
        struct shm_ring_block b;
        assert_int_equal(shm_ring_read(ring, S, rpos, head, &b), 0);
        assert_int_equal(b.start, rpos);
        assert_int_equal(b.len, len);
        assert_int_equal(b.next, next);
        assert_int_equal(ring[b.off], (uint8_t)i);
        assert_int_equal(ring[b.off + len - 1], (uint8_t)i);
        assert_int_equal(b.off % SHM_RING_ALIGN, 0);
        rpos = wpos = head = next;
    }
    free(ring);
}

static void test_read_rejects_bad_headers(void **state)
{
    (void)state;
    const uint64_t S = MIB;
    uint8_t *ring = calloc(1, S);
    assert_non_null(ring);
    struct shm_ring_block b;
    /* Nothing written: no magic. */
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), SLUICE_ERR_PROTOCOL);
    /* A length past the end of the ring. */
    shm_ring_put_header(ring, SHM_RING_DATA, S);
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), SLUICE_ERR_PROTOCOL);
    shm_ring_put_header(ring + 4096, SHM_RING_DATA, S - 4096);
    assert_int_equal(shm_ring_read(ring, S, 4096, 4096, &b), SLUICE_ERR_PROTOCOL);
    /* Zero length, unknown kind. */
    shm_ring_put_header(ring, SHM_RING_DATA, 0);
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), SLUICE_ERR_PROTOCOL);
    shm_ring_put_header(ring, 9, 10);
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), SLUICE_ERR_PROTOCOL);
    /* A pad that does not reach the end, and a pad at offset 0. */
    shm_ring_put_header(ring + 4096, SHM_RING_PAD, 64);
    assert_int_equal(shm_ring_read(ring, S, 4096, 4096, &b), SLUICE_ERR_PROTOCOL);
    shm_ring_put_header(ring, SHM_RING_PAD, S);
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), SLUICE_ERR_PROTOCOL);
    /* A block overlapping space the reader still holds (head far behind). */
    shm_ring_put_header(ring + 8192, SHM_RING_DATA, 8192);
    assert_int_equal(shm_ring_read(ring, S, S + 8192, 8192 + 4096, &b), SLUICE_ERR_PROTOCOL);
    assert_int_equal(shm_ring_read(ring, S, S + 8192, 16448, &b), 0);
    /* A position before head or misaligned. */
    assert_int_equal(shm_ring_read(ring, S, 8192, 16384, &b), SLUICE_ERR_PROTOCOL);
    assert_int_equal(shm_ring_read(ring, S, 8193, 0, &b), SLUICE_ERR_PROTOCOL);
    free(ring);
}

/* An SHM_RING_EXTERN block: a header alone (placed as SHM_RING_EXTERN_LEN payload bytes) naming a
 * payload in the arena, after a pad too; zero bytes refused; the arena's bounds are not the
 * ring's to check (shm_region_take does). Tags come back with their blocks. */
static void test_read_extern(void **state)
{
    (void)state;
    const uint64_t S = MIB;
    uint8_t *ring = calloc(1, S);
    assert_non_null(ring);
    struct shm_ring_block b;
    struct shm_ring_place p;
    assert_int_equal(shm_ring_place(S, 0, 0, SHM_RING_EXTERN_LEN, 0, &p), 0);
    assert_true(p.pad == 0 && p.off == 0 && p.total == 2 * SHM_RING_HDR);
    shm_ring_put_extern(ring, 123456, 789);
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), 0);
    assert_true(b.ext && b.off == 123456 && b.len == 789 && b.next == 2 * SHM_RING_HDR);
    shm_ring_put_extern(ring, 1, 0);
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), SLUICE_ERR_PROTOCOL);
    /* Lengths beyond the ring's are fine: the payload is not in it. */
    shm_ring_put_extern(ring, 0, 4 * S);
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), 0);
    assert_true(b.ext && b.len == 4 * S);
    /* After a pad at the ring's end. */
    shm_ring_put_header(ring + S - 128, SHM_RING_PAD, 128);
    shm_ring_put_extern(ring, 64, 10);
    assert_int_equal(shm_ring_read(ring, S, 3 * S - 128, 2 * S + 256, &b), 0);
    assert_true(b.ext && b.off == 64 && b.start == 3 * S - 128 && b.next == 3 * S + 128);
    /* A plain data block still reads as one. */
    shm_ring_put_header(ring, SHM_RING_DATA, 10);
    assert_int_equal(shm_ring_read(ring, S, 0, 0, &b), 0);
    assert_true(!b.ext && b.off == SHM_RING_HDR && b.len == 10);
    free(ring);
    struct shm_tracker t;
    shm_tracker_init(&t);
    assert_int_equal(shm_tracker_add(&t, 0, 128, 7, 100), 0);
    assert_int_equal(shm_tracker_add(&t, 128, 256, 0, 100), 0);
    uint64_t tag = 99;
    assert_int_equal(shm_tracker_release(&t, 128, &tag), 0);
    assert_int_equal(tag, 0);
    assert_int_equal(shm_tracker_release(&t, 0, &tag), 0);
    assert_int_equal(tag, 7);
    assert_int_equal(t.head, 256);
    shm_tracker_release_all(&t);
}

static void test_tracker_out_of_order(void **state)
{
    (void)state;
    struct shm_tracker t;
    shm_tracker_init(&t);
    /* 40 blocks of 128 bytes (past the first growth of the entry ring). */
    for (uint64_t i = 0; i < 40; i++)
        assert_int_equal(shm_tracker_add(&t, i * 128, (i + 1) * 128, 0, 1000), 0);
    /* A block that does not follow the tail. */
    assert_int_equal(shm_tracker_add(&t, 40 * 128 + 64, 42 * 128, 0, 1000), SLUICE_ERR_PROTOCOL);
    /* Releasing the second leaves head where it is; the first then moves it past both. */
    assert_int_equal(shm_tracker_release(&t, 128, NULL), 0);
    assert_int_equal(t.head, 0);
    assert_int_equal(shm_tracker_release(&t, 128, NULL), SLUICE_ERR_INVALID);
    assert_int_equal(shm_tracker_release(&t, 0, NULL), 0);
    assert_int_equal(t.head, 256);
    /* Never handed out. */
    assert_int_equal(shm_tracker_release(&t, 64, NULL), SLUICE_ERR_INVALID);
    assert_int_equal(shm_tracker_release(&t, 1 << 20, NULL), SLUICE_ERR_INVALID);
    /* Backwards from the last. */
    for (uint64_t i = 39; i >= 2; i--) {
        assert_int_equal(shm_tracker_release(&t, i * 128, NULL), 0);
        assert_int_equal(t.head, i == 2 ? 40 * 128 : 256);
    }
    assert_int_equal(t.n, 0);
    /* Adding after wrapping around the entry ring. */
    assert_int_equal(shm_tracker_add(&t, 40 * 128, 41 * 128, 0, 1000), 0);
    assert_int_equal(shm_tracker_release(&t, 40 * 128, NULL), 0);
    assert_int_equal(t.head, 41 * 128);
    shm_tracker_release_all(&t);
}

static void test_tracker_bound(void **state)
{
    (void)state;
    struct shm_tracker t;
    shm_tracker_init(&t);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(shm_tracker_add(&t, i * 64, (i + 1) * 64, 0, 4), 0);
    assert_int_equal(shm_tracker_add(&t, 256, 320, 0, 4), SLUICE_ERR_PROTOCOL);
    shm_tracker_release_all(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_size),
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_place_table),
        cmocka_unit_test(test_place_reset),
        cmocka_unit_test(test_place_large_ring),
        cmocka_unit_test(test_replies_keep_their_room),
        cmocka_unit_test(test_head_ok),
        cmocka_unit_test(test_write_then_read_laps),
        cmocka_unit_test(test_read_rejects_bad_headers),
        cmocka_unit_test(test_read_extern),
        cmocka_unit_test(test_tracker_out_of_order),
        cmocka_unit_test(test_tracker_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
