/* Backoff: the ceiling for every attempt (doubling, the cap, saturation, odd parameters), the
 * full-jitter delay at the ends of its window and across it, and the generator feeding it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/backoff.h"

struct ceiling_case {
    uint32_t attempt, base, max, want;
};

static void test_ceiling_table(void **state)
{
    static const struct ceiling_case cases[] = {
        {0, 50, 2000, 50},
        {1, 50, 2000, 100},
        {2, 50, 2000, 200},
        {3, 50, 2000, 400},
        {4, 50, 2000, 800},
        {5, 50, 2000, 1600},
        {6, 50, 2000, 2000},
        {7, 50, 2000, 2000},
        {31, 50, 2000, 2000},
        {32, 50, 2000, 2000},
        {64, 50, 2000, 2000},
        {1000000, 50, 2000, 2000},
        {UINT32_MAX, 50, 2000, 2000},
        /* No overflow on the way to a cap near the top of the range. */
        {31, 1, UINT32_MAX, 1u << 31},
        {32, 1, UINT32_MAX, UINT32_MAX},
        {UINT32_MAX, 1, UINT32_MAX, UINT32_MAX},
        {1, UINT32_MAX, UINT32_MAX, UINT32_MAX},
        /* Degenerate parameters. */
        {0, 0, 2000, 0},
        {UINT32_MAX, 0, 2000, 0},
        {0, 500, 100, 100},
        {3, 500, 100, 100},
        {0, 100, 0, 0},
        {5, 7, 7, 7},
        {2, 3, 10, 10},
        {1, 3, 10, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct ceiling_case *c = &cases[i];
        uint32_t got = backoff_ceiling(c->attempt, c->base, c->max);
        if (got != c->want)
            fail_msg("case %zu: ceiling(%u, %u, %u) = %u, want %u", i, c->attempt, c->base, c->max,
                     got, c->want);
    }
}

static void test_delay_window_ends(void **state)
{
    for (uint32_t attempt = 0; attempt < 10; attempt++) {
        uint32_t ceiling = backoff_ceiling(attempt, 50, 2000);
        assert_int_equal(backoff_delay(attempt, 50, 2000, 0), 0);
        /* Only the high 32 bits count: the low ones alone never leave 0. */
        assert_int_equal(backoff_delay(attempt, 50, 2000, UINT32_MAX), 0);
        assert_int_equal(backoff_delay(attempt, 50, 2000, UINT64_MAX), ceiling);
        /* The middle of the random range lands in the middle of the window. */
        assert_int_equal(backoff_delay(attempt, 50, 2000, 1ull << 63), (ceiling + 1) / 2);
    }
    assert_int_equal(backoff_delay(0, 0, 2000, UINT64_MAX), 0);
    assert_int_equal(backoff_delay(40, 1, UINT32_MAX, UINT64_MAX), UINT32_MAX);
    assert_int_equal(backoff_delay(40, 1, UINT32_MAX, 0), 0);
}

/* Every delay lies in [0, ceiling], the window is covered evenly (each tenth of it gets a fair
 * share of draws), and the mean is the middle. */
static void test_delay_distribution(void **state)
{
    enum { DRAWS = 100000, BINS = 10 };
    uint64_t rng = 42;
    uint32_t ceiling = backoff_ceiling(3, 50, 2000);
    assert_int_equal(ceiling, 400);
    unsigned bins[BINS] = {0};
    uint64_t sum = 0;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int i = 0; i < DRAWS; i++) {
        uint32_t d = backoff_delay(3, 50, 2000, backoff_random(&rng));
        assert_true(d <= ceiling);
        sum += d;
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        bins[d * BINS / (ceiling + 1)]++;
    }
    assert_int_equal(lo, 0);
    assert_int_equal(hi, ceiling);
    double mean = (double)sum / DRAWS;
    assert_true(mean > 195.0 && mean < 205.0);
    for (int b = 0; b < BINS; b++)
        assert_true(bins[b] > DRAWS / BINS * 9 / 10 && bins[b] < DRAWS / BINS * 11 / 10);
}

static void test_random_generator(void **state)
{
    /* Deterministic for a seed, different across seeds, and never stuck (seed 0 included). */
    uint64_t a = 0, b = 0, c = 1;
    uint64_t first_a = backoff_random(&a);
    assert_int_equal(first_a, backoff_random(&b));
    assert_true(first_a != backoff_random(&c));
    uint64_t prev = first_a;
    for (int i = 0; i < 1000; i++) {
        uint64_t v = backoff_random(&a);
        assert_true(v != prev);
        prev = v;
    }
    /* The reference value of splitmix64 from seed 0. */
    uint64_t s = 0;
    assert_true(backoff_random(&s) == 0xe220a8397b1dcdafull);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ceiling_table),
        cmocka_unit_test(test_delay_window_ends),
        cmocka_unit_test(test_delay_distribution),
        cmocka_unit_test(test_random_generator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
