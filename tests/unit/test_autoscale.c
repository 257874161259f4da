/* The autoscaling policy: a table of situations (no data, consumers waiting, workers idle,
 * bounded steps both ways, hysteresis, the previous recommendation, a single worker, bad numbers,
 * the parameter bounds) with the exact recommendation and reason for each; the figures behind a
 * decision; a closed-loop simulation of a cluster following the recommendations as demand rises
 * and falls; and the policy's invariants over a hundred thousand random inputs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dispatcher/autoscale.h"

#define MAX_ENTRIES 256

/* count workers that each ran one task at rate with the idle share idle; rate < 0 makes them
 * workers without tasks. */
struct wgroup {
    unsigned count;
    double rate, idle;
};

struct cgroup {
    unsigned count;
    double rate, wait;
};

struct scale_case {
    const char *name;
    uint32_t current, previous;
    struct wgroup w[3];
    struct cgroup c[3];
    uint32_t want;
    enum autoscale_reason reason;
};

struct built {
    double rates[MAX_ENTRIES];
    struct autoscale_worker workers[MAX_ENTRIES];
    struct autoscale_client clients[MAX_ENTRIES];
    struct autoscale_input in;
};

static void build(struct built *b, const struct scale_case *c)
{
    memset(b, 0, sizeof *b);
    size_t nw = 0, nc = 0;
    for (size_t g = 0; g < 3; g++) {
        for (unsigned i = 0; i < c->w[g].count; i++) {
            assert_true(nw < MAX_ENTRIES);
            b->rates[nw] = c->w[g].rate;
            b->workers[nw].task_rates = &b->rates[nw];
            b->workers[nw].ntasks = c->w[g].rate < 0 ? 0 : 1;
            b->workers[nw].idle = c->w[g].idle;
            nw++;
        }
        for (unsigned i = 0; i < c->c[g].count; i++) {
            assert_true(nc < MAX_ENTRIES);
            b->clients[nc].rate = c->c[g].rate;
            b->clients[nc].wait = c->c[g].wait;
            nc++;
        }
    }
    b->in = (struct autoscale_input){b->workers, nw, b->clients, nc, c->current, c->previous};
}

static const enum autoscale_reason NO_DATA = AUTOSCALE_NO_DATA, UP = AUTOSCALE_UP,
                                   DOWN = AUTOSCALE_DOWN, HOLD = AUTOSCALE_HOLD;

static void run_cases(const struct autoscale_params *p, const struct scale_case *cases, size_t n)
{
    static struct built b;
    for (size_t i = 0; i < n; i++) {
        const struct scale_case *c = &cases[i];
        build(&b, c);
        struct autoscale_decision d;
        uint32_t got = autoscale_recommend(p, &b.in, &d);
        if (got != c->want || d.reason != c->reason || d.workers != got)
            fail_msg("%s: %u (%s), want %u (%s); demand %g capacity %g unmet %g idle %g "
                     "targets %u/%u",
                     c->name, got, autoscale_reason_name(d.reason), c->want,
                     autoscale_reason_name(c->reason), d.demand, d.capacity, d.unmet, d.idle,
                     d.target_up, d.target_down);
    }
}

static void test_policy_table(void **state)
{
    static const struct scale_case cases[] = {
        /* No data: keep the current count (at least 1). */
        {"nothing at all", 4, 0, {{0}}, {{0}}, 4, NO_DATA},
        {"nothing, no workers registered", 0, 0, {{0}}, {{0}}, 1, NO_DATA},
        {"nothing, previous ignored", 4, 6, {{0}}, {{0}}, 4, NO_DATA},
        {"no clients", 4, 0, {{4, 100, 0}}, {{0}}, 4, NO_DATA},
        {"no workers", 4, 0, {{0}}, {{1, 400, 0.5}}, 4, NO_DATA},
        {"workers without tasks", 4, 0, {{4, -1, 0}}, {{1, 400, 0.5}}, 4, NO_DATA},
        {"workers produced nothing yet", 3, 0, {{3, 0, 0}}, {{2, 0, 1}}, 3, NO_DATA},

        /* Balanced: every worker busy, consumers never wait. */
        {"balanced", 4, 0, {{4, 100, 0}}, {{1, 400, 0}}, 4, HOLD},
        {"balanced, many clients", 8, 0, {{8, 50, 0}}, {{4, 100, 0}}, 8, HOLD},

        /* Consumers wait: grow towards demand / capacity, at most max(1, 25%) per decision. */
        {"waiting, within one step", 8, 0, {{8, 100, 0}}, {{1, 800, 0.1}}, 9, UP},
        {"waiting, bounded to +1", 4, 0, {{4, 100, 0}}, {{1, 400, 0.5}}, 5, UP},
        {"waiting, bounded to +25%", 20, 0, {{20, 100, 0}}, {{1, 2000, 0.5}}, 25, UP},
        {"waiting, bounded to +25% rounds down", 11, 0, {{11, 100, 0}}, {{1, 1100, 0.5}}, 13, UP},
        {"single worker, starving client", 1, 0, {{1, 100, 0}}, {{1, 100, 0.9}}, 2, UP},
        {"starving beyond the cap", 1, 0, {{1, 100, 0}}, {{1, 100, 1}}, 2, UP},
        {"one of two clients waits", 2, 0, {{2, 100, 0}}, {{1, 100, 0}, {1, 100, 0.5}}, 3, UP},
        {"waiting, but demand fits the current count",
         20,
         0,
         {{20, 100, 0}},
         {{1, 1900, 0.05}},
         20,
         HOLD},
        {"waiting above the threshold", 20, 0, {{20, 100, 0}}, {{1, 2000, 0.06}}, 22, UP},
        {"waiting below the threshold", 4, 0, {{4, 100, 0}}, {{1, 400, 0.04}}, 4, HOLD},
        {"waiting, workers idle: not our bottleneck",
         4,
         0,
         {{4, 50, 0.5}},
         {{1, 200, 0.3}},
         4,
         HOLD},
        {"waiting, idle workers do not dilute capacity",
         4,
         0,
         {{2, 100, 0}, {2, 10, 0.95}},
         {{1, 220, 0.5}},
         5,
         UP},
        /* Counted as zero, the two workers without data would halve capacity and ask for 8. */
        {"waiting, workers without data ignored",
         4,
         0,
         {{2, 100, 0}, {2, -1, 0}},
         {{1, 200, 0.5}},
         4,
         HOLD},
        {"waiting, capacity extrapolated from busy share",
         10,
         0,
         {{10, 80, 0.2}},
         {{1, 800, 0.2}},
         10,
         HOLD},

        /* Over-provisioned: shrink only when consumers do not wait, workers are idle, and the
         * capacity with 10% headroom needs fewer workers; at most max(1, 25%) per decision. */
        {"idle, bounded to -25%", 10, 0, {{10, 30, 0.7}}, {{1, 300, 0}}, 8, DOWN},
        {"idle, bounded to -1", 6, 0, {{6, 50, 0.5}}, {{1, 300, 0}}, 5, DOWN},
        {"idle, stops at the target", 5, 0, {{5, 60, 0.4}}, {{1, 300, 0}}, 4, DOWN},
        {"idle, target with headroom reached", 4, 0, {{4, 75, 0.25}}, {{1, 300, 0}}, 4, HOLD},
        {"idle, from 100", 100, 0, {{100, 10, 0.9}}, {{10, 100, 0}}, 75, DOWN},
        {"idle, no demand at all", 8, 0, {{8, 10, 0.9}}, {{2, 0, 0}}, 6, DOWN},
        {"idle, consumers wait a little", 10, 0, {{10, 30, 0.7}}, {{1, 300, 0.02}}, 10, HOLD},
        {"idle, consumers wait just above the threshold",
         10,
         0,
         {{10, 30, 0.7}},
         {{1, 300, 0.011}},
         10,
         HOLD},
        {"idle, consumers wait below the threshold",
         10,
         0,
         {{10, 30, 0.7}},
         {{1, 300, 0.009}},
         8,
         DOWN},
        {"workers barely idle", 10, 0, {{10, 90, 0.1}}, {{1, 300, 0}}, 10, HOLD},
        {"workers idle at the threshold", 2, 0, {{2, 80, 0.2}}, {{1, 50, 0}}, 1, DOWN},
        {"single worker never goes below 1", 1, 0, {{1, 10, 0.9}}, {{1, 10, 0}}, 1, HOLD},
        {"two workers go to one", 2, 0, {{2, 10, 0.9}}, {{1, 20, 0}}, 1, DOWN},
        {"boolean idle signal", 4, 0, {{4, 25, 1}}, {{1, 100, 0}}, 3, DOWN},

        /* The previous recommendation: growth in flight survives a quiet window (capped at one
         * step), shrinkage in flight does not. */
        {"hold keeps growth in flight", 10, 12, {{10, 100, 0}}, {{1, 1000, 0}}, 12, HOLD},
        {"hold caps a stale previous", 4, 20, {{4, 100, 0}}, {{1, 400, 0}}, 5, HOLD},
        {"hold cancels shrinkage in flight", 10, 8, {{10, 100, 0}}, {{1, 1000, 0}}, 10, HOLD},
        {"up keeps larger growth in flight", 10, 12, {{10, 100, 0}}, {{1, 1000, 0.06}}, 12, UP},
        {"up goes past the previous", 10, 11, {{10, 100, 0}}, {{1, 1000, 0.5}}, 12, UP},
        {"down ignores the previous", 10, 12, {{10, 30, 0.7}}, {{1, 300, 0}}, 8, DOWN},

        /* Numbers that are not measurements are left out. */
        {"bad numbers ignored",
         4,
         0,
         {{4, 100, 0}, {1, NAN, 0}, {1, 100, 1.5}},
         {{1, 400, 0.5}, {1, -1, 0}, {1, 100, NAN}},
         5,
         UP},
        {"only bad numbers", 4, 0, {{2, INFINITY, 0}}, {{1, 400, -0.1}}, 4, NO_DATA},
    };
    run_cases(NULL, cases, sizeof cases / sizeof cases[0]);
}

static void test_params(void **state)
{
    struct autoscale_params p;
    autoscale_params_default(&p);
    assert_true(p.wait_cap == 0.9 && p.busy_below == 0.5 && p.idle_cap == 0.9);
    assert_true(p.headroom == 0.1 && p.wait_up == 0.05 && p.wait_down == 0.01);
    assert_true(p.idle_down == 0.2 && p.step_up == 0.25 && p.step_down == 0.25);
    assert_int_equal(p.min_workers, 1);
    assert_int_equal(p.max_workers, 0);

    p.max_workers = 6;
    p.min_workers = 4;
    static const struct scale_case bounded[] = {
        {"max caps growth", 6, 0, {{6, 100, 0}}, {{1, 600, 0.5}}, 6, UP},
        {"max caps the current count", 10, 0, {{10, 100, 0}}, {{1, 1000, 0}}, 6, HOLD},
        {"max caps no data", 10, 0, {{0}}, {{0}}, 6, NO_DATA},
        {"min stops shrinkage", 5, 0, {{5, 10, 0.9}}, {{1, 40, 0}}, 4, DOWN},
        {"min lifts the current count", 1, 0, {{1, 100, 0}}, {{1, 100, 0}}, 4, HOLD},
    };
    run_cases(&p, bounded, sizeof bounded / sizeof bounded[0]);

    /* Crossed bounds: the minimum wins. */
    p.min_workers = 8;
    static const struct scale_case crossed[] = {
        {"crossed bounds", 4, 0, {{4, 100, 0}}, {{1, 400, 0}}, 8, HOLD},
    };
    run_cases(&p, crossed, 1);

    /* Bigger steps and no headroom. */
    autoscale_params_default(&p);
    p.step_up = 1;
    p.step_down = 0.5;
    p.headroom = 0;
    static const struct scale_case steps[] = {
        {"doubling", 4, 0, {{4, 100, 0}}, {{1, 400, 0.9}}, 8, UP},
        {"halving", 10, 0, {{10, 10, 0.9}}, {{1, 100, 0}}, 5, DOWN},
        {"no headroom", 4, 0, {{4, 75, 0.25}}, {{1, 300, 0}}, 3, DOWN},
    };
    run_cases(&p, steps, sizeof steps / sizeof steps[0]);
}

/* The figures behind one decision, and a worker with several tasks. */
static void test_decision_details(void **state)
{
    const double rates_a[] = {60, 40}; /* 100 elements/s over two tasks */
    const double rates_b[] = {50};
    const double rates_c[] = {5};
    const struct autoscale_worker workers[] = {
        {rates_a, 2, 0},    {rates_b, 1, 0.2}, /* busy 80% of the time: capacity 62.5 */
        {rates_c, 1, 0.95},                    /* idle: not used for capacity */
        {NULL, 0, 0},                          /* no tasks: left out */
        {rates_b, 1, -0.5},                    /* bad idle share: left out */
    };
    const struct autoscale_client clients[] = {
        {100, 0.5}, /* would take 200 */
        {55, 0},
    };
    struct autoscale_input in = {workers, 5, clients, 2, 5, 0};
    struct autoscale_decision d;
    uint32_t got = autoscale_recommend(NULL, &in, &d);
    assert_int_equal(d.workers_measured, 3);
    assert_int_equal(d.clients_measured, 2);
    assert_true(fabs(d.demand - 255) < 1e-9);
    assert_true(d.served == 155);
    assert_true(fabs(d.unmet - 100.0 / 255) < 1e-12);
    assert_true(fabs(d.capacity - (100 + 62.5) / 2) < 1e-9);
    assert_true(fabs(d.idle - (0 + 0.2 + 0.95) / 3) < 1e-12);
    assert_int_equal(d.target_up, 4);   /* 255 / 81.25 = 3.14 */
    assert_int_equal(d.target_down, 4); /* 280.5 / 81.25 = 3.45 */
    assert_int_equal(d.reason, AUTOSCALE_HOLD);
    assert_int_equal(got, 5);
    assert_int_equal(d.workers, 5);

    /* out may be NULL; nothing in the input is written. */
    assert_int_equal(autoscale_recommend(NULL, &in, NULL), 5);
    assert_true(rates_a[0] == 60 && clients[0].wait == 0.5);

    assert_string_equal(autoscale_reason_name(AUTOSCALE_NO_DATA), "no_data");
    assert_string_equal(autoscale_reason_name(AUTOSCALE_UP), "up");
    assert_string_equal(autoscale_reason_name(AUTOSCALE_DOWN), "down");
    assert_string_equal(autoscale_reason_name(AUTOSCALE_HOLD), "hold");
}

/* ---- a cluster following its recommendations ------------------------------------------------- */

/* One window of a model cluster: each of n workers can produce `capacity` elements/s, one client
 * wants `demand`. What is served is the smaller of the two; the client waits for the share of its
 * demand not served, the workers idle for the share of their capacity not used. */
static uint32_t simulate_window(uint32_t n, double capacity, double demand, uint32_t previous)
{
    static double rates[MAX_ENTRIES];
    static struct autoscale_worker workers[MAX_ENTRIES];
    assert_true(n <= MAX_ENTRIES);
    double served = fmin(demand, n * capacity);
    for (uint32_t i = 0; i < n; i++) {
        rates[i] = served / n;
        workers[i] = (struct autoscale_worker){&rates[i], 1, 1 - served / (n * capacity)};
    }
    struct autoscale_client client = {served, 1 - served / demand};
    struct autoscale_input in = {workers, n, &client, 1, n, previous};
    return autoscale_recommend(NULL, &in, NULL);
}

/* The rule of dividing consumption by the mean worker throughput, for comparison. */
static uint32_t ratio_rule(uint32_t n, double capacity, double demand)
{
    double served = fmin(demand, n * capacity);
    return (uint32_t)ceil(served / (served / n));
}

static void test_closed_loop(void **state)
{
    struct phase {
        double demand;
        int windows;
        uint32_t want[12];
    };
    /* Capacity 100 elements/s per worker. Demand 1000 needs 10 workers; 300 needs 3, 4 with the
     * headroom kept when shrinking; back to 1000; 4% more stays inside the band where nothing
     * changes, 10% more adds a worker; then almost nothing. Each list is the worker count after
     * each window; the tail of each phase shows the count is stable. */
    static const struct phase phases[] = {
        {1000, 11, {2, 3, 4, 5, 6, 7, 8, 10, 10, 10, 10}},
        {300, 7, {8, 6, 5, 4, 4, 4, 4}},
        {1000, 8, {5, 6, 7, 8, 10, 10, 10, 10}},
        {1040, 2, {10, 10}},
        {1100, 3, {11, 11, 11}},
        {0.5, 12, {9, 7, 6, 5, 4, 3, 2, 1, 1, 1, 1, 1}},
    };
    uint32_t n = 1, previous = 0;
    for (size_t p = 0; p < sizeof phases / sizeof phases[0]; p++) {
        for (int w = 0; w < phases[p].windows; w++) {
            uint32_t next = simulate_window(n, 100, phases[p].demand, previous);
            if (next != phases[p].want[w])
                fail_msg("phase %zu window %d: %u workers -> %u, want %u", p, w, n, next,
                         phases[p].want[w]);
            previous = next;
            n = next;
        }
    }
    /* Where the ratio rule sees nothing to do: the single worker is saturated and the client
     * starves, yet consumption equals production. */
    assert_int_equal(ratio_rule(1, 100, 1000), 1);
    assert_int_equal(simulate_window(1, 100, 1000, 0), 2);
    assert_int_equal(ratio_rule(4, 100, 1000), 4);
    assert_int_equal(simulate_window(4, 100, 1000, 0), 5);
}

/* ---- invariants over random inputs ----------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1], with the ends and a few special values drawn often. */
static double rng_share(uint64_t *s)
{
    uint64_t r = rng_next(s);
    switch (r % 16) {
    case 0:
        return 0;
    case 1:
        return 1;
    case 2:
        return 0.5;
    default:
        return (double)(r >> 11) / (double)(1ull << 53);
    }
}

static uint32_t step_of(double share, uint32_t n)
{
    uint32_t s = (uint32_t)floor(share * n);
    return s ? s : 1;
}

static void test_invariants(void **state)
{
    static double rates[64][3];
    static struct autoscale_worker workers[64];
    static struct autoscale_client clients[16];
    uint64_t seed = 7;
    for (int iter = 0; iter < 100000; iter++) {
        size_t nw = rng_next(&seed) % 64, nc = rng_next(&seed) % 16;
        for (size_t i = 0; i < nw; i++) {
            workers[i].ntasks = rng_next(&seed) % 4;
            workers[i].task_rates = rates[i];
            for (size_t t = 0; t < 3; t++)
                rates[i][t] = rng_share(&seed) * 1000;
            workers[i].idle = rng_share(&seed);
        }
        for (size_t i = 0; i < nc; i++) {
            clients[i].rate = rng_share(&seed) * 5000;
            clients[i].wait = rng_share(&seed);
        }
        uint32_t n = (uint32_t)(rng_next(&seed) % 200);
        uint32_t previous = (uint32_t)(rng_next(&seed) % 250);
        struct autoscale_input in = {workers, nw, clients, nc, n, previous};
        struct autoscale_decision d;
        uint32_t got = autoscale_recommend(NULL, &in, &d);
        uint32_t eff = n ? n : 1;
        assert_true(got >= 1);
        assert_true(got <= eff + step_of(0.25, eff));
        assert_true(got + step_of(0.25, eff) >= eff);
        switch (d.reason) {
        case AUTOSCALE_NO_DATA:
            assert_int_equal(got, eff);
            break;
        case AUTOSCALE_UP:
            assert_true(got > eff);
            break;
        case AUTOSCALE_DOWN:
            assert_true(got < eff);
            break;
        case AUTOSCALE_HOLD:
            assert_true(got >= eff);
            break;
        }
        /* Raising one client's wait never lowers the answer. */
        if (nc > 0) {
            size_t k = rng_next(&seed) % nc;
            double saved = clients[k].wait;
            clients[k].wait = saved + (1 - saved) * rng_share(&seed);
            uint32_t more = autoscale_recommend(NULL, &in, NULL);
            if (more < got)
                fail_msg("iteration %d: raising a wait share from %g to %g lowered %u to %u", iter,
                         saved, clients[k].wait, got, more);
            clients[k].wait = saved;
        }
        /* The same input gives the same answer. */
        assert_int_equal(autoscale_recommend(NULL, &in, NULL), got);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_table),     cmocka_unit_test(test_params),
        cmocka_unit_test(test_decision_details), cmocka_unit_test(test_closed_loop),
        cmocka_unit_test(test_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
