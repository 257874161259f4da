/* The shared-memory ring (common/shm_ring.h): where blocks go, the bound the writer keeps, what
 * the reader accepts from the headers it finds, and releases in any order. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

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
        /* An empty ring mid-way, not asked to start over: where the writer is. */
        {4096, 4096, 100, 0, 0, 4096, 192},
        {4096, 4096, 8192, 0, 0, 4096, 8256},
        /* Not empty: where the writer is. */
        {4096 + 192, 4096, 100, 0, 0, 4096 + 192, 192},
        {S / 2, S / 2 - 192, 100, 0, 0, S / 2, 192},
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

/* A ring that is not empty starts over where the reader asked, in the lap it asked in, when the
 * block fits before the reader's held blocks. */
static void test_place_restart(void **state)
{
    (void)state;
    const uint64_t S = MIB;
    const struct {
        uint64_t wpos, head, len, restart;
        uint64_t pad, off;
    } cases[] = {
        /* Asked at the writer's position or before it, in its lap: back to 0. */
        {S / 2, S / 2 - 192, 100, S / 2 + 1, S / 2, 0},
        {S / 2, S / 2 - 192, 100, S / 2 - 192 + 1, S / 2, 0},
        {5 * S + 4096, 5 * S + 1024, 100, 5 * S + 2048 + 1, S - 4096, 0},
        /* Not asked: where the writer is. */
        {S / 2, S / 2 - 192, 100, 0, 0, S / 2},
        /* Asked in an earlier lap (the reader has read past it since): where the writer is. */
        {S + 4096, S + 1024, 100, S / 2 + 1, 0, 4096},
        /* Asked at a position the writer has not reached (a reader that lies): ignored. */
        {S / 2, S / 2 - 192, 100, S / 2 + 64 + 1, 0, S / 2},
        /* The block does not fit before the held ones: where the writer is. */
        {S / 2, 128, 100, S / 2 + 1, 0, S / 2},
        /* The held blocks wrap (the head is in the lap before): where the writer is. */
        {S + 256, S - 256, 100, S + 256 + 1, 0, 256},
        /* At the lap's start already: no pad. */
        {2 * S, 2 * S - 192, 100, 2 * S + 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct shm_ring_place p = {0};
        assert_int_equal(
            shm_ring_place(S, cases[i].wpos, cases[i].head, cases[i].len, cases[i].restart, &p), 0);
        if (p.pad != cases[i].pad || p.off != cases[i].off)
            print_message("case %zu\n", i);
        assert_int_equal(p.pad, cases[i].pad);
        assert_int_equal(p.off, cases[i].off);
    }
}

/* What the reader counts as held, and when it asks to start over. */
static void test_reader_held(void **state)
{
    (void)state;
    const uint64_t S = MIB;
    const struct {
        uint64_t head, tail, want, restart;
        uint64_t held, restart_after;
    } cases[] = {
        /* want 0: never asks. */
        {S / 2, S / 2 + 1024, 0, 0, 1024, 0},
        /* Room enough before the held blocks: asks at the tail, and counts the lap's rest. */
        {S / 2, S / 2 + 1024, S / 4, 0, S / 2, S / 2 + 1024 + 1},
        {S / 2, S / 2 + 1024, S / 2, 0, S / 2, S / 2 + 1024 + 1},
        /* Not room enough: does not ask. */
        {S / 2, S / 2 + 1024, S / 2 + 1, 0, 1024, 0},
        /* Pending in this lap: the lap's rest counted, the request kept. */
        {S / 2 + 512, S / 2 + 4096, S, S / 2 + 1024 + 1, S / 2 - 512, S / 2 + 1024 + 1},
        /* Made in an earlier lap: spent; the held blocks wrap, so no new one. */
        {S - 4096, S + 1024, 64, S / 2 + 1, 5120, 0},
        /* Spent, and the held blocks in one lap again: a new one. */
        {S + 4096, S + 8192, 4096, S / 2 + 1, S - 4096, S + 8192 + 1},
        /* The tail at a lap's start: nothing to pad, no request. */
        {S - 4096, S, 64, 0, 4096, 0},
        /* Nothing held, mid-lap: asks (the next block then goes to 0). */
        {S / 2, S / 2, 1024, 0, S / 2, S / 2 + 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t restart = cases[i].restart;
        uint64_t held =
            shm_ring_reader_held(S, cases[i].head, cases[i].tail, cases[i].want, &restart);
        if (held != cases[i].held || restart != cases[i].restart_after)
            print_message("case %zu: held %llu, restart %llu\n", i, (unsigned long long)held,
                          (unsigned long long)restart);
        assert_int_equal(held, cases[i].held);
        assert_int_equal(restart, cases[i].restart_after);
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

/* A reader and a writer taking turns at random over many laps, the reader asking for replies
 * by the iterator's rule (client/iterator_fetch.c shm_full: each reply at most `each` bytes,
 * at most 3 on the way) and holding a random few blocks, released in any order: every reply the
 * rule let the reader ask for fits when the writer places it (none would fall back to the
 * socket), and the ring starts over before its end. */
static void test_restart_keeps_replies_in_the_ring(void **state)
{
    (void)state;
    const uint64_t S = MIB, each = 48u << 10;
    uint8_t *ring = calloc(1, S);
    assert_non_null(ring);
    struct shm_tracker tr;
    shm_tracker_init(&tr);
    uint64_t seed = 0x9e3779b97f4a7c15ull, wpos = 0, restart = 0, rpos = 0;
    unsigned asked = 0, placed = 0, restarts = 0, blocks = 0;
    uint64_t lens[4];
    uint64_t maxoff = 0;
    for (unsigned step = 0; step < 200000; step++) {
        unsigned what = (unsigned)(rnd(&seed) % 4);
        unsigned coming = asked + placed;
        if (what == 0 && coming < 3) {
            uint64_t want = coming * each + (2 + SHM_RING_RESTART_BLOCKS) * each;
            uint64_t held = shm_ring_reader_held(S, tr.head, tr.tail, want, &restart);
            if ((held == 0 && coming == 0) || held + coming * each + 2 * each <= S)
                asked++;
        } else if (what == 1 && asked > 0) {
            uint64_t len = 1 + rnd(&seed) % (each - 2 * SHM_RING_HDR);
            struct shm_ring_place p;
            int rc = shm_ring_place(S, wpos, tr.head, len, restart, &p);
            if (rc != 0)
                print_message("step %u: %d at wpos %llu head %llu len %llu\n", step, rc,
                              (unsigned long long)wpos, (unsigned long long)tr.head,
                              (unsigned long long)len);
            assert_int_equal(rc, 0);
            uint64_t off = wpos % S;
            if (p.pad && off + p.total - p.pad <= S)
                restarts++;
            if (p.pad)
                shm_ring_put_header(ring + off, SHM_RING_PAD, p.pad);
            shm_ring_put_header(ring + p.off, SHM_RING_DATA, len);
            if (p.off + p.total - p.pad > maxoff)
                maxoff = p.off + p.total - p.pad;
            lens[placed] = len;
            wpos += p.total;
            asked--;
            placed++;
        } else if (what == 2 && placed > 0) {
            struct shm_ring_block b;
            assert_int_equal(shm_ring_read(ring, S, rpos, tr.head, &b), 0);
            assert_int_equal(b.len, lens[0]);
            memmove(lens, lens + 1, sizeof lens - sizeof lens[0]);
            assert_int_equal(shm_tracker_add(&tr, b.start, b.next, S / SHM_RING_ALIGN), 0);
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
            assert_int_equal(shm_tracker_release(&tr, tr.v[(tr.first + k) % tr.cap].start), 0);
        }
    }
    print_message("%u blocks, %u early starts over, highest offset used %llu of %llu\n", blocks,
                  restarts, (unsigned long long)maxoff, (unsigned long long)S);
    assert_true(blocks > 10000);
    assert_true(restarts > 100);
    shm_tracker_release_all(&tr);
    free(ring);
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

static void test_tracker_out_of_order(void **state)
{
    (void)state;
    struct shm_tracker t;
    shm_tracker_init(&t);
    /* 40 blocks of 128 bytes (past the first growth of the entry ring). */
    for (uint64_t i = 0; i < 40; i++)
        assert_int_equal(shm_tracker_add(&t, i * 128, (i + 1) * 128, 1000), 0);
    /* A block that does not follow the tail. */
    assert_int_equal(shm_tracker_add(&t, 40 * 128 + 64, 42 * 128, 1000), SLUICE_ERR_PROTOCOL);
    /* Releasing the second leaves head where it is; the first then moves it past both. */
    assert_int_equal(shm_tracker_release(&t, 128), 0);
    assert_int_equal(t.head, 0);
    assert_int_equal(shm_tracker_release(&t, 128), SLUICE_ERR_INVALID);
    assert_int_equal(shm_tracker_release(&t, 0), 0);
    assert_int_equal(t.head, 256);
    /* Never handed out. */
    assert_int_equal(shm_tracker_release(&t, 64), SLUICE_ERR_INVALID);
    assert_int_equal(shm_tracker_release(&t, 1 << 20), SLUICE_ERR_INVALID);
    /* Backwards from the last. */
    for (uint64_t i = 39; i >= 2; i--) {
        assert_int_equal(shm_tracker_release(&t, i * 128), 0);
        assert_int_equal(t.head, i == 2 ? 40 * 128 : 256);
    }
    assert_int_equal(t.n, 0);
    /* Adding after wrapping around the entry ring. */
    assert_int_equal(shm_tracker_add(&t, 40 * 128, 41 * 128, 1000), 0);
    assert_int_equal(shm_tracker_release(&t, 40 * 128), 0);
    assert_int_equal(t.head, 41 * 128);
    shm_tracker_release_all(&t);
}

static void test_tracker_bound(void **state)
{
    (void)state;
    struct shm_tracker t;
    shm_tracker_init(&t);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(shm_tracker_add(&t, i * 64, (i + 1) * 64, 4), 0);
    assert_int_equal(shm_tracker_add(&t, 256, 320, 4), SLUICE_ERR_PROTOCOL);
    shm_tracker_release_all(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_size),
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_place_table),
        cmocka_unit_test(test_place_restart),
        cmocka_unit_test(test_reader_held),
        cmocka_unit_test(test_restart_keeps_replies_in_the_ring),
        cmocka_unit_test(test_head_ok),
        cmocka_unit_test(test_write_then_read_laps),
        cmocka_unit_test(test_read_rejects_bad_headers),
        cmocka_unit_test(test_tracker_out_of_order),
        cmocka_unit_test(test_tracker_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
