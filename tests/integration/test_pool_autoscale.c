/* The autoscaling recommendation per pool end to end (docs/operations.md "Autoscaling by
 * pool"): a dispatcher with a 500 ms window and two workers of pool a and one of pool b; while a
 * job on pool a reads, its demand counts towards a only; a job waiting for pool bigmem (no
 * worker) makes that pool appear with 0 workers and a recommendation of 1; the status
 * ("autoscale": {"pools": [...]}) and sluice_autoscale_recommended_workers{pool} agree, and the
 * unlabelled sluice_recommended_workers is still there. A bad --autoscale-pool-label is refused.
 * Every wait is bounded. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/scrape.h"
#include "lib/tmp.h"

static const char *const dargs[] = {"--autoscale-window-ms", "500", "--metrics-port", "0", NULL};
static const char *const pool_a[] = {"--threads", "1", "--label", "pool=a", NULL};
static const char *const pool_b[] = {"--threads", "1", "--label", "pool=b", NULL};

static struct proc readers[2];

static int setup(void **state)
{
    struct cluster *c = cluster_new(dargs, pool_a, 0, 2);
    if (!c)
        return -1;
    c->worker_args = pool_b;
    if (cluster_add_worker(c) != 2) {
        cluster_free(c);
        return -1;
    }
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < 2; i++)
        proc_stop(&readers[i], SIGTERM, 5000);
    int rc = cluster_teardown(state);
    tmp_cleanup();
    return rc;
}

/* The entry of pool name in doc's "autoscale"."pools", or NULL; borrowed. */
static json_t *pool_entry(json_t *doc, const char *name)
{
    json_t *pools = json_object_get(json_object_get(doc, "autoscale"), "pools"), *e;
    size_t i;
    json_array_foreach(pools, i, e)
    {
        const char *v = json_string_value(json_object_get(e, "pool"));
        if (v && strcmp(v, name) == 0)
            return e;
    }
    return NULL;
}

/* The status once pool a counts more than 0.9 clients and pool bigmem is listed (want_bigmem),
 * checking every 100 ms for up to 20 s: a new reference. */
static json_t *wait_pools(struct cluster *c, bool want_bigmem)
{
    long long t0 = now_ms();
    for (;;) {
        json_t *doc = cluster_status(c);
        json_t *a = pool_entry(doc, "a");
        if (a && json_real_value(json_object_get(a, "clients")) > 0.9 &&
            (!want_bigmem || pool_entry(doc, "bigmem")))
            return doc;
        json_decref(doc);
        if (now_ms() - t0 > 20000)
            fail_msg("the pools' figures did not appear");
        sleep_ms(100);
    }
}

static double recommended_metric(const char *addr, const char *labels)
{
    struct expo e;
    char err[512] = "";
    if (scrape_metrics(addr, &e, err, sizeof err) != 0)
        fail_msg("dispatcher: %s", err);
    double v = -1;
    if (expo_value(&e, "sluice_autoscale_recommended_workers", labels, &v) != 0)
        v = -1;
    double fleet = -1;
    assert_int_equal(expo_value(&e, "sluice_recommended_workers", "", &fleet), 0);
    assert_true(fleet >= 1);
    expo_free(&e);
    return v;
}

static void test_pool_recommendations(void **state)
{
    struct cluster *c = *state;
    cluster_wait_registered(c);
    char dm[64];
    assert_int_equal(cluster_read_address(&c->dispatcher, " metrics on ", dm, sizeof dm, 10000), 0);
    /* A reader of pool a, and one waiting for pool bigmem. */
    assert_int_equal(cluster_cli_spawn(c, &readers[0], "read", "range(1000000) | map(wait_us, 200)",
                                       "--worker-selector", "pool=a", "--job-name", "on_a", NULL),
                     0);
    assert_int_equal(cluster_cli_spawn(c, &readers[1], "read", "range(10)", "--worker-selector",
                                       "pool=bigmem", "--job-name", "on_bigmem", NULL),
                     0);
    json_t *doc = wait_pools(c, true);
    json_t *auto_ = json_object_get(doc, "autoscale");
    assert_string_equal(json_string_value(json_object_get(auto_, "pool_label")), "pool");
    json_t *a = pool_entry(doc, "a"), *b = pool_entry(doc, "b"), *big = pool_entry(doc, "bigmem");
    assert_non_null(b);
    assert_int_equal(json_integer_value(json_object_get(a, "workers")), 2);
    assert_int_equal(json_integer_value(json_object_get(b, "workers")), 1);
    assert_int_equal(json_integer_value(json_object_get(big, "workers")), 0);
    /* The bigmem job's reader counts towards bigmem only, the pool a job's towards a only. */
    assert_true(json_real_value(json_object_get(a, "clients")) == 1.0);
    assert_true(json_real_value(json_object_get(b, "clients")) == 0.0);
    assert_true(json_real_value(json_object_get(big, "clients")) == 1.0);
    assert_int_equal(json_integer_value(json_object_get(big, "recommended_workers")), 1);
    printf("    pool a: %lld workers, recommended %lld (%s), demand %.1f/s; pool b: recommended "
           "%lld; pool bigmem: recommended %lld\n",
           json_integer_value(json_object_get(a, "workers")),
           json_integer_value(json_object_get(a, "recommended_workers")),
           json_string_value(json_object_get(a, "reason")),
           json_real_value(json_object_get(a, "demand")),
           json_integer_value(json_object_get(b, "recommended_workers")),
           json_integer_value(json_object_get(big, "recommended_workers")));
    json_decref(doc);
    /* The gauges say the same as the status (both from the last window: read the gauge between
     * two status documents that agree, so no window closed in between). */
    for (int tries = 0;; tries++) {
        json_t *d1 = cluster_status(c);
        long long ra =
            json_integer_value(json_object_get(pool_entry(d1, "a"), "recommended_workers"));
        double ma = recommended_metric(dm, "pool=\"a\"");
        double mb = recommended_metric(dm, "pool=\"bigmem\"");
        json_t *d2 = cluster_status(c);
        long long ra2 =
            json_integer_value(json_object_get(pool_entry(d2, "a"), "recommended_workers"));
        json_decref(d1);
        json_decref(d2);
        if (ra == ra2 || tries == 20) {
            assert_int_equal(ra, ra2);
            assert_true(ma == (double)ra);
            assert_true(mb == 1.0);
            break;
        }
    }
    proc_stop(&readers[0], SIGTERM, 5000);
    proc_stop(&readers[1], SIGTERM, 5000);
}

/* Runs argv and expects exit status 2 with want in stderr. */
static void expect_usage(char *const argv[], const char *want)
{
    char *err = NULL;
    int rc = run_cmd(argv, 30000, NULL, &err);
    if (rc != 2 || !strstr(err, want))
        fail_msg("%s: exit %d, stderr:\n%s\nwanted:\n%s", argv[0], rc, err, want);
    free(err);
}

static void test_bad_pool_label(void **state)
{
    (void)state;
    char *disp = (char *)bin_path("sluice-dispatcher");
    {
        char *argv[] = {disp, "--port", "0", "--autoscale-pool-label", "po ol", NULL};
        expect_usage(argv, "sluice-dispatcher: usage: --autoscale-pool-label: 'po ol' is not a "
                           "label key (1 to 63 bytes, no white space or any of = ! , ( ))\n");
    }
    {
        char *argv[] = {disp, "--port", "0", "--autoscale-pool-label", "", NULL};
        expect_usage(argv, "sluice-dispatcher: usage: --autoscale-pool-label: expected a label "
                           "key, found ''\n");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pool_recommendations, setup, teardown),
        cmocka_unit_test(test_bad_pool_label),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
