/* The keyed permutation behind global_shuffle (common/perm.h): a bijection of [0, n) for every
 * n, different for different keys, and pinned to known values so that the order a seed gives
 * never changes silently. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/perm.h"

#include <stdlib.h>
#include <string.h>

/* Every x < n maps below n, no two to the same value, and the inverse undoes it. */
static void check_bijection(uint64_t key, uint64_t n)
{
    struct perm p;
    perm_init(&p, key, n);
    uint8_t *seen = calloc(n / 8 + 1, 1);
    assert_non_null(seen);
    for (uint64_t x = 0; x < n; x++) {
        uint64_t y = perm_apply(&p, x);
        if (y >= n)
            fail_msg("n %llu: %llu maps to %llu", (unsigned long long)n, (unsigned long long)x,
                     (unsigned long long)y);
        if (seen[y / 8] & (1u << (y % 8)))
            fail_msg("n %llu: %llu is hit twice", (unsigned long long)n, (unsigned long long)y);
        seen[y / 8] |= (uint8_t)(1u << (y % 8));
        assert_int_equal(perm_invert(&p, y), x);
    }
    free(seen);
}

static void test_bijection_small_and_odd(void **state)
{
    (void)state;
    static const uint64_t sizes[] = {0,   1,   2,   3,    4,    5,    7,    8,    9,     13,
                                     16,  17,  31,  32,   33,   97,   100,  127,  128,   129,
                                     255, 256, 257, 1000, 1021, 1024, 4093, 4096, 65537, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int64_t seed = -2; seed < 3; seed++)
            for (uint64_t pass = 0; pass < 3; pass++)
                check_bijection(perm_key(seed, pass, 0), sizes[i]);
}

static void test_bijection_large_exhaustive(void **state)
{
    (void)state;
    check_bijection(perm_key(7, 0, 0), (1u << 22) + 1); /* the worst cycle-walking ratio */
    check_bijection(perm_key(7, 1, 0), 3000017);        /* a prime */
}

/* Domains too large to enumerate: images stay below n and the inverse undoes every sampled
 * value, which an injective map needs; samples are spread over the whole domain and its ends. */
static void test_bijection_huge_sampled(void **state)
{
    (void)state;
    static const uint64_t sizes[] = {
        100000000ull, 1ull << 32,       (1ull << 32) + 1, 1000000000000000003ull,
        1ull << 63,   (1ull << 63) + 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        uint64_t n = sizes[i];
        struct perm p;
        perm_init(&p, perm_key(42, 3, 0), n);
        uint64_t fixed = 0;
        for (uint64_t s = 0; s < 20000; s++) {
            uint64_t x = s < 100 ? s : s < 200 ? n - 1 - (s - 100) : perm_mix64(s) % n;
            uint64_t y = perm_apply(&p, x);
            assert_true(y < n);
            assert_int_equal(perm_invert(&p, y), x);
            fixed += y == x;
        }
        /* A random permutation fixes about one point: many fixed points mean no mixing. */
        assert_true(fixed < 10);
    }
}

/* The images of 0..9 under the permutation of [0, n) for a key. */
static void first_ten(uint64_t key, uint64_t n, uint64_t out[10])
{
    struct perm p;
    perm_init(&p, key, n);
    for (uint64_t x = 0; x < 10; x++)
        out[x] = perm_apply(&p, x);
}

static void test_keys_differ(void **state)
{
    (void)state;
    /* 200 seeds, passes and parts over [0, 1000): no two give the same start. */
    enum { N = 200 };
    uint64_t(*starts)[10] = calloc(3 * N, sizeof *starts);
    assert_non_null(starts);
    for (int i = 0; i < N; i++) {
        first_ten(perm_key(i, 0, 0), 1000, starts[i]);
        first_ten(perm_key(0, (uint64_t)i + 1, 0), 1000, starts[N + i]);
        first_ten(perm_key(0, 0, (uint64_t)i + 1), 1000, starts[2 * N + i]);
    }
    for (int i = 0; i < 3 * N; i++)
        for (int j = i + 1; j < 3 * N; j++)
            if (memcmp(starts[i], starts[j], sizeof starts[i]) == 0)
                fail_msg("keys %d and %d give the same order", i, j);
    free(starts);
}

/* Where 0 goes in [0, 10), over 20000 keys: each place about 2000 times. Deterministic, so the
 * bound cannot flake; a poor mix (a bias to small values, a fixed point) breaks it. */
static void test_roughly_uniform(void **state)
{
    (void)state;
    unsigned hits[10] = {0};
    for (int64_t seed = 0; seed < 20000; seed++) {
        struct perm p;
        perm_init(&p, perm_key(seed, 0, 0), 10);
        hits[perm_apply(&p, 0)]++;
    }
    for (int i = 0; i < 10; i++)
        if (hits[i] < 1800 || hits[i] > 2200)
            fail_msg("0 maps to %d %u times of 20000", i, hits[i]);
}

/* Known values: a change to the mixer, the key schedule, the rounds or the cycle walk changes
 * every global_shuffle order, and fails here first. */
static void test_known_values(void **state)
{
    (void)state;
    /* The splitmix64 reference: the first output for seed 0. */
    assert_int_equal(perm_mix64(0x9e3779b97f4a7c15ull), 0xe220a8397b1dcdafull);
    uint64_t got[10];
    /* sluice run 'range(20) | global_shuffle(7)' starts with these. */
    static const uint64_t seven_20[10] = {12, 14, 7, 15, 0, 2, 13, 8, 17, 4};
    first_ten(perm_key(7, 0, 0), 20, got);
    assert_memory_equal(got, seven_20, sizeof got);
    static const uint64_t key_7_0_0 = 0xf35fdccd6ae6ce28ull;
    assert_int_equal(perm_key(7, 0, 0), key_7_0_0);
    static const uint64_t seven_1e8[10] = {96272615, 60299184, 41705333, 77909126, 43283256,
                                           52764456, 24048850, 63879412, 93301978, 60591703};
    first_ten(perm_key(7, 0, 0), 100000000ull, got);
    assert_memory_equal(got, seven_1e8, sizeof got);
    static const uint64_t pass1_max[10] = {10153724808489348703ull, 13806870384469772148ull,
                                           7321865501168426780ull,  3958190413940885165ull,
                                           4858997336579112090ull,  13192552175645205244ull,
                                           12735582384542307554ull, 12134735090032892168ull,
                                           15233454135136728599ull, 4231351631833680050ull};
    first_ten(perm_key(-5, 1, 2), UINT64_MAX, got);
    assert_memory_equal(got, pass1_max, sizeof got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bijection_small_and_odd),
        cmocka_unit_test(test_bijection_large_exhaustive),
        cmocka_unit_test(test_bijection_huge_sampled),
        cmocka_unit_test(test_keys_differ),
        cmocka_unit_test(test_roughly_uniform),
        cmocka_unit_test(test_known_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
