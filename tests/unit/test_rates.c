/* Rates over a window from cumulative counters (dispatcher/rates.h): the base sample the window
 * picks, a silent or idle task measuring 0, counters that restart, samples at the same time, and
 * the ring dropping its oldest samples. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "dispatcher/rates.h"

#include <math.h>

static void expect_rate(const struct rate_ring *r, uint64_t now, uint32_t window, double eps,
                        double bps, uint64_t span)
{
    struct rate got = rate_ring_rate(r, now, window);
    if (got.elements_per_second != eps || got.bytes_per_second != bps || got.span_ms != span)
        fail_msg("now %llu window %u: got %.17g el/s, %.17g B/s over %llu ms; want %.17g, %.17g "
                 "over %llu",
                 (unsigned long long)now, window, got.elements_per_second, got.bytes_per_second,
                 (unsigned long long)got.span_ms, eps, bps, (unsigned long long)span);
}

static void test_empty_and_single(void **state)
{
    (void)state;
    struct rate_ring r = {0};
    expect_rate(&r, 1000, 1000, 0, 0, 0);
    rate_ring_add(&r, &(struct rate_sample){1000, 50, 500});
    expect_rate(&r, 1000, 1000, 0, 0, 0);
}

/* Thread time measures seconds of it per second over the same window, and going back starts the
 * ring over like the other counters. */
static void test_busy(void **state)
{
    (void)state;
    struct rate_ring r = {0};
    for (uint64_t t = 0; t <= 2000; t += 500)
        rate_ring_add(&r, &(struct rate_sample){t, t, t, t * 1500000}); /* 1.5 s/s */
    struct rate got = rate_ring_rate(&r, 2000, 1000);
    assert_int_equal(got.span_ms, 1000);
    assert_true(fabs(got.busy_per_second - 1.5) < 1e-12);
    assert_true(fabs(got.elements_per_second - 1000) < 1e-9);
    rate_ring_add(&r, &(struct rate_sample){2500, 2500, 2500, 0});
    got = rate_ring_rate(&r, 2500, 1000);
    assert_int_equal(got.span_ms, 0);
    assert_true(got.busy_per_second == 0);
}

static void test_window_picks_base(void **state)
{
    (void)state;
    /* A sample every 100 ms; 10 elements and 1000 bytes between samples until t = 1000. */
    struct rate_ring r = {0};
    for (uint64_t t = 100; t <= 1000; t += 100)
        rate_ring_add(&r, &(struct rate_sample){t, t / 10, t * 10});
    /* Window 500 at now 1000: base is the sample at 500 (at the window's start). */
    expect_rate(&r, 1000, 500, 100, 10000, 500);
    /* Window 450 at now 1000: base is the newest at or before 550, the sample at 500. */
    expect_rate(&r, 1000, 450, 100, 10000, 500);
    /* A window longer than the history: the oldest sample. */
    expect_rate(&r, 1000, 5000, 90.0 / 0.9, 9000 / 0.9, 900);
    /* A window shorter than the heartbeat interval still spans one interval. */
    expect_rate(&r, 1000, 50, 100, 10000, 100);
}

static void test_idle_and_silent(void **state)
{
    (void)state;
    struct rate_ring r = {0};
    rate_ring_add(&r, &(struct rate_sample){0, 0, 0});
    rate_ring_add(&r, &(struct rate_sample){1000, 1000, 4000});
    /* Serving stops: the counters stay. Within the window the old progress still counts. */
    rate_ring_add(&r, &(struct rate_sample){2000, 1000, 4000});
    expect_rate(&r, 2000, 1500, 500, 2000, 2000);
    rate_ring_add(&r, &(struct rate_sample){3000, 1000, 4000});
    /* Once the window lies after the last progress, the rate is exactly 0. */
    expect_rate(&r, 3000, 1000, 0, 0, 1000);
    /* Silent: nothing reported during the window. */
    expect_rate(&r, 4000, 1000, 0, 0, 0);
    expect_rate(&r, 9000, 1000, 0, 0, 0);
}

static void test_restart_and_same_time(void **state)
{
    (void)state;
    struct rate_ring r = {0};
    rate_ring_add(&r, &(struct rate_sample){0, 100, 100});
    rate_ring_add(&r, &(struct rate_sample){1000, 200, 300});
    /* The worker restarted: its counters begin again and the old samples are dropped. */
    rate_ring_add(&r, &(struct rate_sample){2000, 5, 5});
    expect_rate(&r, 2000, 10000, 0, 0, 0);
    rate_ring_add(&r, &(struct rate_sample){3000, 105, 1005});
    expect_rate(&r, 3000, 10000, 100, 1000, 1000);
    /* A second report at the same time replaces the first. */
    rate_ring_add(&r, &(struct rate_sample){3000, 205, 2005});
    expect_rate(&r, 3000, 10000, 200, 2000, 1000);
    /* A clock that went back starts over too. */
    rate_ring_add(&r, &(struct rate_sample){2500, 300, 3000});
    expect_rate(&r, 2500, 10000, 0, 0, 0);
}

static void test_ring_keeps_the_newest(void **state)
{
    (void)state;
    struct rate_ring r = {0};
    /* Twice as many samples as the ring holds; the first half counted 2 per ms, the rest 1. */
    uint64_t e = 0;
    for (uint64_t t = 0; t < 2 * RATE_SAMPLES; t++) {
        rate_ring_add(&r, &(struct rate_sample){t * 10, e, e});
        e += t < RATE_SAMPLES ? 20 : 10;
    }
    assert_int_equal(r.n, RATE_SAMPLES);
    /* The whole ring: RATE_SAMPLES - 1 intervals of 10 ms, 10 elements each. */
    uint64_t now = (2 * RATE_SAMPLES - 1) * 10;
    expect_rate(&r, now, 100000, 1000, 1000, (RATE_SAMPLES - 1) * 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_single),      cmocka_unit_test(test_window_picks_base),
        cmocka_unit_test(test_idle_and_silent),       cmocka_unit_test(test_restart_and_same_time),
        cmocka_unit_test(test_ring_keeps_the_newest), cmocka_unit_test(test_busy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
