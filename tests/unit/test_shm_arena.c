/* The arena of a shared region (common/shm_arena.h), as plain data: how a region is split between
 * ring and arena; blocks taken first-fit from the start (so freed ones are reused before fresh
 * granules are touched), whole runs only, none when no run is long enough; a block free only once
 * both the worker's reference and the reader's loan are gone; and a reader's release bits trusted
 * only for a block lent now: bits of free granules, of a block's later granules, of a block never
 * lent, or set again after the block came back change nothing. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/shm_arena.h"
#include "sluice/sluice.h"

#define G SHM_ARENA_GRANULE
#define MIB ((uint64_t)1 << 20)

static void test_split(void **state)
{
    (void)state;
    uint64_t ring, arena;
    shm_arena_split(SHM_ARENA_REGION_MIN - 64, &ring, &arena);
    assert_true(arena == 0 && ring == SHM_ARENA_REGION_MIN - 64);
    shm_arena_split(SHM_ARENA_REGION_MIN, &ring, &arena);
    assert_true(arena == SHM_ARENA_REGION_MIN / 2 && ring == SHM_ARENA_REGION_MIN / 2);
    /* Whole granules: the ring takes what is left over. */
    shm_arena_split(100 * MIB + 64, &ring, &arena);
    assert_true(arena == 50 * MIB && ring == 50 * MIB + 64);
    shm_arena_split(1024 * MIB, &ring, &arena);
    assert_true(arena == 512 * MIB && ring == 512 * MIB);
    /* At most what the release bitmap covers. */
    shm_arena_split((uint64_t)64 << 30, &ring, &arena);
    assert_true(arena == (uint64_t)SHM_ARENA_MAX_GRANULES * G);
    assert_true(ring == ((uint64_t)64 << 30) - arena);
}

static void test_first_fit(void **state)
{
    (void)state;
    struct shm_arena a;
    assert_int_equal(shm_arena_init(&a, 100), 0);
    assert_true(shm_arena_alloc(&a, 0) == -1);
    assert_true(shm_arena_alloc(&a, 101 * G) == -1);
    assert_true(shm_arena_alloc(&a, 10 * G) == 0);
    assert_true(shm_arena_alloc(&a, 1) == 10);         /* one granule for a byte */
    assert_true(shm_arena_alloc(&a, 5 * G + 1) == 11); /* six */
    assert_int_equal(shm_arena_block(&a, 0), 10);
    assert_int_equal(shm_arena_block(&a, 11), 6);
    assert_int_equal(shm_arena_block(&a, 12), 0); /* not a block's start */
    assert_int_equal(a.used, 17);
    /* The first hole long enough is taken: the freed block at 0, not fresh granules. */
    shm_arena_unref(&a, 0);
    assert_true(shm_arena_alloc(&a, 4 * G) == 0);
    assert_true(shm_arena_alloc(&a, 7 * G) == 17); /* 4..9 is too short */
    assert_true(shm_arena_alloc(&a, 6 * G) == 4);
    /* 24..99 free: 76 granules, no more. */
    assert_true(shm_arena_alloc(&a, 77 * G) == -1);
    assert_true(shm_arena_alloc(&a, 76 * G) == 24);
    assert_true(shm_arena_alloc(&a, 1) == -1);
    assert_int_equal(a.used, 100);
    shm_arena_unref(&a, 24);
    shm_arena_unref(&a, 24); /* not a block any more: nothing */
    assert_int_equal(a.used, 24);
    shm_arena_unref(&a, 25); /* never one */
    assert_int_equal(a.used, 24);
    /* Runs across word boundaries of the busy bits (64 granules). */
    assert_true(shm_arena_alloc(&a, 70 * G) == 24);
    assert_true(shm_arena_alloc(&a, 7 * G) == -1);
    assert_true(shm_arena_alloc(&a, 6 * G) == 94);
    shm_arena_destroy(&a);
    assert_int_equal(shm_arena_init(&a, SHM_ARENA_MAX_GRANULES + 1), SLUICE_ERR_INVALID);
    assert_int_equal(shm_arena_init(&a, 0), 0);
    assert_true(shm_arena_alloc(&a, 1) == -1);
    shm_arena_destroy(&a);
}

static void test_lend_and_collect(void **state)
{
    (void)state;
    struct shm_arena a;
    assert_int_equal(shm_arena_init(&a, 200), 0);
    int64_t b0 = shm_arena_alloc(&a, 3 * G);   /* 0..2 */
    int64_t b1 = shm_arena_alloc(&a, 2 * G);   /* 3..4 */
    int64_t b2 = shm_arena_alloc(&a, 100 * G); /* 5..104: across the first word */
    assert_true(b0 == 0 && b1 == 3 && b2 == 5);
    /* Lent for a range that starts in its first granule and lies within it. */
    assert_false(shm_arena_lend(&a, 1, G, 10));           /* not a block's start */
    assert_false(shm_arena_lend(&a, 0, G, 10));           /* starts past the first granule */
    assert_false(shm_arena_lend(&a, 0, 100, 3 * G));      /* runs past the block */
    assert_false(shm_arena_lend(&a, 0, 100, 0));          /* empty */
    assert_true(shm_arena_lend(&a, 0, 100, 3 * G - 100)); /* exactly to its end */
    assert_false(shm_arena_lend(&a, 0, 100, 10));         /* lent already */
    assert_true(shm_arena_lend(&a, 5, 5 * G + 4096, 99 * G));
    /* The worker lets go of both: lent, they stay taken. */
    shm_arena_unref(&a, 0);
    shm_arena_unref(&a, 5);
    assert_int_equal(a.used, 105);
    /* Bits of free granules, of a block's later granules and of a block not lent: nothing. */
    assert_int_equal(shm_arena_collect(&a, 0,
                                       (uint64_t)1 << 1 | (uint64_t)1 << 3 | (uint64_t)1 << 6 |
                                           (uint64_t)1 << 63),
                     0);
    assert_int_equal(shm_arena_collect(&a, 2, ~(uint64_t)0), 0);
    assert_int_equal(shm_arena_collect(&a, 1000, ~(uint64_t)0), 0); /* past the arena */
    assert_int_equal(a.used, 105);
    /* The reader gives back block 0 and 5: both free now. */
    assert_int_equal(shm_arena_collect(&a, 0, (uint64_t)1 << 0 | (uint64_t)1 << 5), 2);
    assert_int_equal(a.used, 2);
    /* The same bits again: those blocks are gone, nothing happens. */
    assert_int_equal(shm_arena_collect(&a, 0, (uint64_t)1 << 0 | (uint64_t)1 << 5), 0);
    assert_int_equal(a.used, 2);
    /* A block given back by the reader before the worker lets go stays until the worker does. */
    assert_true(shm_arena_lend(&a, 3, 3 * G, 2 * G));
    assert_int_equal(shm_arena_collect(&a, 0, (uint64_t)1 << 3), 1);
    assert_int_equal(shm_arena_block(&a, 3), 2);
    assert_true(shm_arena_alloc(&a, 4 * G) == 5); /* 0..2 is too short, 5.. is free */
    assert_true(shm_arena_lend(&a, 3, 3 * G, 1)); /* lent again, */
    shm_arena_unref(&a, 3);                       /* the worker lets go, */
    assert_int_equal(shm_arena_block(&a, 3), 2);  /* still the reader's */
    assert_int_equal(shm_arena_collect(&a, 0, (uint64_t)1 << 3), 1);
    assert_int_equal(shm_arena_block(&a, 3), 0);
    shm_arena_destroy(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_first_fit),
        cmocka_unit_test(test_lend_and_collect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
