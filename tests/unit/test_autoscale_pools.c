/* The autoscaling recommendation per pool (dispatcher/autoscale_pools.h): workers grouped by a
 * label's value (and the pool "" without it, draining ones left out), readers' demand split over
 * the pools their job's selector matches in proportion to the matching workers, a job matching
 * no worker counted towards the pools its selector names, each pool's recommendation exactly
 * autoscale_recommend() over its own figures and its own previous answer. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dispatcher/autoscale_pools.h"

/* Workers: 0 and 1 in pool a (busy), 2 in pool b (mostly idle), 3 without labels (busy), 4 in
 * pool b but draining, 5 in pool a without figures yet. */
static const struct autoscale_pool_worker fleet[] = {
    {"pool=a,zone=x", false, true, 100, 0}, {"pool=a", false, true, 100, 0},
    {"pool=b", false, true, 50, 0.8},       {"", false, true, 100, 0},
    {"pool=b", true, true, 100, 0},         {"pool=a,zone=y", false, false, 0, 0},
};
#define NFLEET (sizeof fleet / sizeof fleet[0])

static const struct autoscale_pool *find(const struct autoscale_pool *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0)
            return &v[i];
    fail_msg("no pool '%s'", name);
    return NULL;
}

static bool near(double a, double b)
{
    return fabs(a - b) < 1e-9 * (1 + fabs(b));
}

static void test_grouping(void **unused)
{
    (void)unused;
    struct autoscale_pools_input in = {.workers = fleet, .nworkers = NFLEET};
    struct autoscale_pool out[8];
    size_t n = 0;
    assert_int_equal(autoscale_pools_recommend(NULL, &in, out, 8, &n), 0);
    /* Sorted by name; the draining worker counts nowhere. */
    assert_int_equal(n, 3);
    assert_string_equal(out[0].name, "");
    assert_string_equal(out[1].name, "a");
    assert_string_equal(out[2].name, "b");
    assert_int_equal(out[0].current, 1);
    assert_int_equal(out[1].current, 3);
    assert_int_equal(out[2].current, 1);
    /* No reader anywhere: every pool keeps what it has (at least 1) or shrinks when idle. */
    for (size_t i = 0; i < n; i++) {
        assert_true(out[i].clients == 0);
        assert_int_equal(out[i].decision.workers_measured, i == 1 ? 2 : 1);
    }
    /* Another key: zone. Workers without it (2, 3) are the pool "". */
    in.key = "zone";
    assert_int_equal(autoscale_pools_recommend(NULL, &in, out, 8, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(out[0].name, "");
    assert_int_equal(out[0].current, 3);
    assert_string_equal(out[1].name, "x");
    assert_string_equal(out[2].name, "y");
    /* Room for two pools only: the first two the workers' order meets. */
    in.key = NULL;
    assert_int_equal(autoscale_pools_recommend(NULL, &in, out, 2, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].name, "a");
    assert_string_equal(out[1].name, "b");
    char name[LABEL_VALUE_MAX + 1];
    autoscale_pool_of("pool=bigmem,zone=a", "pool", name);
    assert_string_equal(name, "bigmem");
    autoscale_pool_of("zone=a", "pool", name);
    assert_string_equal(name, "");
}

static void test_demand_split(void **unused)
{
    (void)unused;
    /* A reader of pool a waiting half the time at 200/s; a reader without a selector at 80/s,
     * never waiting, spread over the five non-draining workers (a: 3, b: 1, "": 1); a reader
     * of zone x (worker 0 only). */
    const struct autoscale_pool_client readers[] = {
        {"pool=a", true, 200, 0.5},
        {"", true, 80, 0},
        {"zone=x", true, 30, 0},
    };
    struct autoscale_pools_input in = {
        .workers = fleet, .nworkers = NFLEET, .clients = readers, .nclients = 3};
    struct autoscale_pool out[8];
    size_t n = 0;
    assert_int_equal(autoscale_pools_recommend(NULL, &in, out, 8, &n), 0);
    assert_int_equal(n, 3);
    const struct autoscale_pool *a = find(out, n, "a"), *b = find(out, n, "b"),
                                *none = find(out, n, "");
    /* Demand: 200 / (1 - 0.5) + 80 * 3/5 + 30 on a; 80 / 5 on b and on "". */
    assert_true(near(a->decision.demand, 400 + 48 + 30));
    assert_true(near(b->decision.demand, 16));
    assert_true(near(none->decision.demand, 16));
    assert_true(near(a->clients, 1 + 0.6 + 1));
    assert_true(near(b->clients, 0.2));
    /* Pool a: two busy workers of 100/s (the third has no figures yet) against 478/s, with
     * readers waiting: up, one step from its 3 workers. */
    assert_int_equal(a->decision.reason, AUTOSCALE_UP);
    assert_int_equal(a->recommended, 4);
    /* Exactly the policy over the pool's own figures. */
    double r0 = 100, r1 = 100;
    struct autoscale_worker ws[] = {{&r0, 1, 0}, {&r1, 1, 0}};
    struct autoscale_client cs[] = {{200, 0.5}, {48, 0}, {30, 0}};
    struct autoscale_input ai = {
        .workers = ws, .nworkers = 2, .clients = cs, .nclients = 3, .current = 3};
    struct autoscale_decision d;
    assert_int_equal(autoscale_recommend(NULL, &ai, &d), a->recommended);
    assert_true(near(d.demand, a->decision.demand));
    /* Pool b: an idle worker, demand it covers: no growth. */
    assert_true(b->recommended <= 1);
    assert_int_equal(b->current, 1);

    /* Its own previous answer: a scale-up in flight on a is kept through a quiet window. */
    struct autoscale_pool_previous prev[] = {{"a", 5}, {"b", 1}};
    in.previous = prev;
    in.nprevious = 2;
    const struct autoscale_pool_client quiet[] = {{"pool=a", true, 150, 0.02}};
    in.clients = quiet;
    in.nclients = 1;
    assert_int_equal(autoscale_pools_recommend(NULL, &in, out, 8, &n), 0);
    a = find(out, n, "a");
    assert_int_equal(a->decision.reason, AUTOSCALE_HOLD);
    assert_int_equal(a->recommended, 4); /* the previous 5, capped at one step above 3 */
    assert_true(find(out, n, "b")->clients == 0);
}

static void test_unmatched_jobs(void **unused)
{
    (void)unused;
    /* A job waiting for pool bigmem, which has no worker: the pool appears with 0 workers and
     * a recommendation of 1; a job for 'pool in (c,d)' puts half its reader on each. */
    const struct autoscale_pool_client readers[] = {
        {"pool=bigmem", false, 0, 0},
        {"pool in (c,d),gpu", true, 10, 1},
    };
    struct autoscale_pools_input in = {
        .workers = fleet, .nworkers = NFLEET, .clients = readers, .nclients = 2};
    struct autoscale_pool out[8];
    size_t n = 0;
    assert_int_equal(autoscale_pools_recommend(NULL, &in, out, 8, &n), 0);
    assert_int_equal(n, 6);
    const struct autoscale_pool *big = find(out, n, "bigmem"), *c = find(out, n, "c");
    assert_int_equal(big->current, 0);
    assert_int_equal(big->recommended, 1);
    assert_true(near(big->clients, 1));
    assert_true(near(c->clients, 0.5));
    assert_true(near(find(out, n, "d")->clients, 0.5));
    assert_true(near(find(out, n, "a")->clients, 0));
    /* No worker at all: a reader without a selector counts towards the pool "". */
    const struct autoscale_pool_client any[] = {{NULL, true, 10, 0.5}};
    struct autoscale_pools_input empty = {.clients = any, .nclients = 1};
    assert_int_equal(autoscale_pools_recommend(NULL, &empty, out, 8, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(out[0].name, "");
    assert_int_equal(out[0].current, 0);
    assert_int_equal(out[0].recommended, 1);
    /* Nothing at all: no pool. */
    struct autoscale_pools_input nothing = {0};
    assert_int_equal(autoscale_pools_recommend(NULL, &nothing, out, 8, &n), 0);
    assert_int_equal(n, 0);
}

/* Readers with the same selector, in any order, NULL and "" alike: each still counts on its
 * own (the selector is matched against the workers once per distinct text). */
static void test_shared_selectors(void **unused)
{
    (void)unused;
    const struct autoscale_pool_client readers[] = {
        {"pool=a", true, 200, 0.5},
        {"", true, 80, 0},
        {"pool=bigmem", false, 0, 0},
        {"pool=a", true, 100, 0},
        {NULL, true, 20, 0},
        {"zone=x", true, 30, 0},
        {"pool in (c,d),gpu", true, 10, 0},
        {"pool=bigmem", false, 0, 0},
        {"pool in (c,d),gpu", true, 10, 0},
    };
    struct autoscale_pools_input in = {
        .workers = fleet, .nworkers = NFLEET, .clients = readers, .nclients = 9};
    struct autoscale_pool out[8];
    size_t n = 0;
    assert_int_equal(autoscale_pools_recommend(NULL, &in, out, 8, &n), 0);
    assert_int_equal(n, 6);
    /* a: 200 / (1 - 0.5) + 100 + (80 + 20) * 3/5 + 30; b and "": (80 + 20) / 5 each. */
    assert_true(near(find(out, n, "a")->decision.demand, 400 + 100 + 60 + 30));
    assert_true(near(find(out, n, "a")->clients, 2 + 2 * 0.6 + 1));
    assert_true(near(find(out, n, "b")->decision.demand, 20));
    assert_true(near(find(out, n, "")->decision.demand, 20));
    assert_true(near(find(out, n, "b")->clients, 0.4));
    assert_true(near(find(out, n, "bigmem")->clients, 2));
    assert_true(near(find(out, n, "c")->clients, 1));
    assert_true(near(find(out, n, "d")->clients, 1));
    assert_true(near(find(out, n, "c")->decision.demand, 10));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grouping),
        cmocka_unit_test(test_demand_split),
        cmocka_unit_test(test_unmatched_jobs),
        cmocka_unit_test(test_shared_selectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
