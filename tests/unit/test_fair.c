/* Weighted fair sharing of a worker's threads (worker/fair.h): shares that all want more get
 * thread time in proportion to their weights whatever their slices cost; a share that was idle
 * does not bank the time it did not use; weights that are not positive and finite count as 1;
 * jobs of no share go first, and ties keep the queue's order. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "worker/fair.h"

#include <math.h>

/* The index of the share whose queued job a free thread takes among q[0..n) (queue order), as
 * the pool does: the first one no later one goes before. */
static size_t pick(struct fair_share *const *q, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (q[i] != q[best] && fair_before(q[i], q[best]))
            best = i;
    return best;
}

/* One slice on one thread over the queue q[0..n) of jobs that always want more: the job picked
 * runs for cost_ns, yields (queued again at the tail, then charged, as the pool does). Returns
 * the share that ran. */
static struct fair_share *step(struct fair_share **q, size_t n, struct fair_clock *c,
                               uint64_t cost_ns)
{
    size_t i = pick(q, n);
    struct fair_share *run = q[i];
    for (size_t j = i; j + 1 < n; j++)
        q[j] = q[j + 1];
    fair_picked(run, c);
    q[n - 1] = run;
    fair_enter(run, c);
    fair_charge(run, cost_ns);
    return run;
}

/* Runs slices on one thread over shares s[0..n) that always want more, each share's slice
 * costing cost_ns[i]; the shares hold their busy time. */
static void run_saturated(struct fair_share *s, const uint64_t *cost_ns, size_t n, unsigned slices)
{
    struct fair_clock c = {0};
    struct fair_share *q[8];
    for (size_t i = 0; i < n; i++) {
        q[i] = &s[i];
        fair_enter(&s[i], &c);
    }
    for (unsigned k = 0; k < slices; k++) {
        size_t i = pick(q, n);
        step(q, n, &c, cost_ns[q[i] - s]);
    }
}

static void test_weights_share_time(void **state)
{
    (void)state;
    static const struct {
        double w[3];
        uint64_t cost[3];
        size_t n;
    } cases[] = {
        {{2, 1}, {1000, 1000}, 2}, {{2, 1}, {1000, 7000}, 2}, /* the light share's slices cost 7
                                                                 times more */
        {{1, 1}, {5000, 1000}, 2}, {{3, 2, 1}, {1000, 2000, 3000}, 3}, {{0.5, 4}, {3000, 1000}, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct fair_share s[3];
        double wsum = 0;
        for (size_t i = 0; i < cases[c].n; i++) {
            fair_share_init(&s[i], cases[c].w[i]);
            wsum += cases[c].w[i];
        }
        run_saturated(s, cases[c].cost, cases[c].n, 20000);
        uint64_t total = 0;
        for (size_t i = 0; i < cases[c].n; i++)
            total += s[i].busy_ns;
        for (size_t i = 0; i < cases[c].n; i++) {
            double got = (double)s[i].busy_ns / (double)total, want = cases[c].w[i] / wsum;
            if (fabs(got - want) > 0.01)
                fail_msg("case %zu share %zu: got %.4f of the time, want %.4f", c, i, got, want);
            assert_int_equal(s[i].active, 1); /* queued again after each slice */
        }
    }
}

static void test_idle_share_banks_nothing(void **state)
{
    (void)state;
    struct fair_clock c = {0};
    struct fair_share a, b;
    fair_share_init(&a, 1);
    fair_share_init(&b, 1);
    /* a runs alone for 100 slices while b is idle (parked). */
    fair_enter(&a, &c);
    struct fair_share *alone[1] = {&a};
    for (int k = 0; k < 100; k++)
        step(alone, 1, &c, 1000);
    assert_true(c.vnow >= 99000);
    /* b wakes: it starts at the clock, not 100 slices ahead of a. */
    fair_enter(&b, &c);
    assert_true(b.vtime >= c.vnow);
    struct fair_share *q[2] = {&a, &b};
    unsigned runs_b = 0;
    for (int k = 0; k < 10; k++)
        runs_b += step(q, 2, &c, 1000) == &b;
    assert_true(runs_b >= 4 && runs_b <= 6);
}

static void test_weight_defaults_and_order(void **state)
{
    (void)state;
    struct fair_share s;
    static const double bad[] = {0, -1, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fair_share_init(&s, bad[i]);
        assert_true(s.weight == 1);
        assert_int_equal(s.busy_ns, 0);
    }
    fair_share_init(&s, 2.5);
    assert_true(s.weight == 2.5);
    /* No share goes first; equal virtual times keep the queue's order. */
    struct fair_share a, b;
    fair_share_init(&a, 1);
    fair_share_init(&b, 3);
    assert_true(fair_before(NULL, &a));
    assert_false(fair_before(&a, NULL));
    assert_false(fair_before(NULL, NULL));
    assert_false(fair_before(&a, &b));
    assert_false(fair_before(&b, &a));
    struct fair_share *q[3] = {&a, &b, NULL};
    assert_int_equal(pick(q, 3), 2);
    assert_int_equal(pick(q, 2), 0);
    /* Charging divides by the weight. */
    struct fair_clock c = {0};
    fair_enter(&a, &c);
    fair_enter(&b, &c);
    fair_charge(&a, 3000);
    fair_charge(&b, 3000);
    assert_true(a.vtime == 3000 && b.vtime == 1000);
    assert_true(fair_before(&b, &a));
    assert_int_equal(a.busy_ns, 3000);
    assert_int_equal(a.active, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_share_time),
        cmocka_unit_test(test_idle_share_banks_nothing),
        cmocka_unit_test(test_weight_defaults_and_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
