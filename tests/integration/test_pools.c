/* Worker pools end to end (docs/operations.md "Pools and selectors"): two workers labelled
 * pool=a and pool=b; a job with --worker-selector reads every element exactly once and only from
 * the matching worker (its elements counted by the workers' metrics); a job whose selector
 * matches no worker waits with its reason, keeps its selector through a dispatcher restart (as
 * the workers keep their labels), and starts when a matching worker registers; bad labels,
 * selectors, weights and bounds are refused with their messages. Every wait is bounded. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/scrape.h"
#include "lib/tmp.h"

static const char *const worker_a[] = {"--metrics-port", "0", "--label", "pool=a", NULL};
static const char *const worker_b[] = {"--metrics-port", "0",      "--label", "pool=b",
                                       "--label",        "zone=x", NULL};
static const char *const worker_c[] = {"--label", "pool=c", NULL};

static int setup(void **state)
{
    struct cluster *c = cluster_new(NULL, NULL, 1, 0);
    if (!c)
        return -1;
    c->worker_args = worker_a;
    if (cluster_add_worker(c) != 0)
        goto fail;
    c->worker_args = worker_b;
    if (cluster_add_worker(c) != 1)
        goto fail;
    *state = c;
    return 0;
fail:
    cluster_free(c);
    return -1;
}

static int teardown(void **state)
{
    int rc = cluster_teardown(state);
    tmp_cleanup();
    return rc;
}

/* The metrics addresses of workers 0 and 1 (their " metrics on " lines are read once). */
static char metrics_at[2][64];

/* The elements worker i served so far. */
static double served(struct cluster *c, int i)
{
    if (!metrics_at[i][0])
        assert_int_equal(cluster_read_address(&c->workers[i], " metrics on ", metrics_at[i],
                                              sizeof metrics_at[i], 10000),
                         0);
    struct expo e;
    char err[512] = "";
    if (scrape_metrics(metrics_at[i], &e, err, sizeof err) != 0)
        fail_msg("worker %d: %s", i, err);
    double v = -1;
    assert_int_equal(expo_value(&e, "sluice_worker_elements_served_total", "", &v), 0);
    expo_free(&e);
    return v;
}

/* The entry of the status array section whose field key is value; borrowed from doc. */
static json_t *find(json_t *doc, const char *section, const char *key, const char *value)
{
    json_t *arr = json_object_get(doc, section), *e;
    size_t i;
    json_array_foreach(arr, i, e)
    {
        const char *v = json_string_value(json_object_get(e, key));
        if (v && strcmp(v, value) == 0)
            return e;
    }
    return NULL;
}

static void check_labels(struct cluster *c)
{
    json_t *doc = cluster_status(c);
    json_t *wa = find(doc, "workers", "address", c->workers[0].addr);
    json_t *wb = find(doc, "workers", "address", c->workers[1].addr);
    assert_non_null(wa);
    assert_non_null(wb);
    assert_string_equal(json_string_value(json_object_get(wa, "labels")), "pool=a");
    assert_string_equal(json_string_value(json_object_get(wb, "labels")), "pool=b,zone=x");
    json_decref(doc);
}

static void test_labels_in_status(void **state)
{
    struct cluster *c = *state;
    cluster_wait_registered(c);
    check_labels(c);
    char *out = cluster_run(c, 0, NULL, "status", NULL);
    assert_non_null(strstr(out, "LABELS"));
    assert_non_null(strstr(out, "pool=b,zone=x"));
    free(out);
}

static void test_selector_reads_only_matching(void **state)
{
    struct cluster *c = *state;
    cluster_wait_registered(c);
    double a0 = served(c, 0), b0 = served(c, 1);
    /* parallel_epochs gives every worker with a task the whole range: one copy means one
     * worker. */
    char *want = expected_range(300, 1);
    cluster_expect_read(c, want, "range(300)", "--worker-selector", "pool=b", "--job-name", "onb",
                        NULL);
    free(want);
    double a1 = served(c, 0), b1 = served(c, 1);
    printf("    pool=b read: worker a served %.0f, worker b %.0f\n", a1 - a0, b1 - b0);
    assert_true(a1 == a0);
    assert_true(b1 - b0 >= 300);
    /* distributed_epoch on pool=a, with a set selector. */
    char *out = cluster_run(c, 0, NULL, "read", "range(200)", "--mode", "distributed_epoch",
                            "--worker-selector", "pool in (a, q),!zone", NULL);
    struct tally t = tally_range(out, 200);
    print_tally("pool=a read", t);
    assert_int_equal(t.lines, 200);
    assert_int_equal(t.lost + t.duplicated + t.unexpected, 0);
    free(out);
    double a2 = served(c, 0), b2 = served(c, 1);
    assert_true(a2 - a1 >= 200);
    assert_true(b2 == b1);
    /* Without a selector both workers serve: two copies. */
    want = expected_range(50, 2);
    cluster_expect_read(c, want, "range(50)", NULL);
    free(want);
    json_t *doc = cluster_status(c);
    json_t *job = find(doc, "jobs", "name", "onb");
    assert_non_null(job);
    assert_string_equal(json_string_value(json_object_get(job, "worker_selector")), "pool=b");
    assert_true(json_real_value(json_object_get(job, "weight")) == 1.0);
    json_decref(doc);
}

static void test_waits_then_starts(void **state)
{
    struct cluster *c = *state;
    cluster_wait_registered(c);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", "range(40)", "--job-name", "onc",
                                       "--worker-selector", "pool=c", "--weight", "2.5",
                                       "--max-workers", "3", NULL),
                     0);
    const char *why = "waiting for a worker matching pool=c (none of 2 workers match)";
    /* The reader says why (its first note comes after 2 s without progress). */
    char want[256];
    snprintf(want, sizeof want, ": %s (still waiting; --timeout-ms to give up)", why);
    assert_true(proc_wait_log(&r, want, 30000) >= 0);
    json_t *doc = cluster_status(c), *job = find(doc, "jobs", "name", "onc");
    assert_non_null(job);
    assert_string_equal(json_string_value(json_object_get(job, "waiting")), why);
    json_decref(doc);

    /* The selector, the weight and the labels survive a restart of the dispatcher. It stays
     * away longer than a heartbeat's timeout: the reader, whose task list is empty, must wait for
     * it rather than take the empty list for the end of the read. */
    assert_int_equal(proc_stop(&c->dispatcher, SIGTERM, 10000), 0);
    sleep_ms(6000);                         /* past the reader's heartbeat timeout (5 s) */
    assert_int_equal(proc_wait(&r, 0), -2); /* still reading */
    assert_int_equal(cluster_start_dispatcher(c, c->port, 1), 0);
    doc = cluster_status(c);
    job = find(doc, "jobs", "name", "onc");
    assert_non_null(job);
    assert_string_equal(json_string_value(json_object_get(job, "worker_selector")), "pool=c");
    assert_true(json_real_value(json_object_get(job, "weight")) == 2.5);
    assert_int_equal(json_integer_value(json_object_get(job, "max_workers")), 3);
    assert_string_equal(json_string_value(json_object_get(job, "waiting")), why);
    json_decref(doc);
    check_labels(c);

    /* A matching worker registers: the read starts there and gets every element once. */
    c->worker_args = worker_c;
    assert_int_equal(cluster_add_worker(c), 2);
    char *out = proc_read_all(&r, 60000);
    assert_int_equal(proc_wait(&r, 10000), 0);
    struct tally t = tally_range(out, 40);
    print_tally("pool=c read", t);
    assert_int_equal(t.lines, 40);
    assert_int_equal(t.lost + t.duplicated + t.unexpected, 0);
    free(out);
}

/* Runs argv and expects exit status 2 with exactly want on stderr. */
static void expect_usage(char *const argv[], const char *want)
{
    char *err = NULL;
    int rc = run_cmd(argv, 30000, NULL, &err);
    if (rc != 2 || strcmp(err, want) != 0)
        fail_msg("%s %s: exit %d, stderr:\n%s\nwanted:\n%s", argv[0], argv[1], rc, err, want);
    free(err);
}

static void test_bad_input(void **state)
{
    (void)state;
    char *sluice = (char *)bin_path("sluice"), *worker = (char *)bin_path("sluice-worker");
    {
        char *argv[] = {
            sluice,     "read", "--dispatcher", "127.0.0.1:1", "--worker-selector", "pool=a b",
            "range(3)", NULL};
        expect_usage(argv, "sluice: usage: --worker-selector: expected ',' at byte 7\n");
    }
    {
        char *argv[] = {
            sluice,     "read", "--dispatcher", "127.0.0.1:1", "--worker-selector", "pool in (a,",
            "range(3)", NULL};
        expect_usage(argv, "sluice: usage: --worker-selector: expected a value at byte 11\n");
    }
    {
        char *argv[] = {sluice,     "read", "--dispatcher", "127.0.0.1:1",
                        "--weight", "0",    "range(3)",     NULL};
        expect_usage(argv,
                     "sluice: usage: --weight takes a number above 0 and at most 1000000, not "
                     "'0'\n");
    }
    {
        char *argv[] = {sluice,     "read", "--dispatcher", "127.0.0.1:1",
                        "--weight", "nan",  "range(3)",     NULL};
        expect_usage(argv,
                     "sluice: usage: --weight takes a number above 0 and at most 1000000, not "
                     "'nan'\n");
    }
    {
        char *argv[] = {sluice,          "read", "--dispatcher",  "127.0.0.1:1",
                        "--min-workers", "3",    "--max-workers", "2",
                        "range(3)",      NULL};
        expect_usage(argv, "sluice: usage: --min-workers 3 is above --max-workers 2\n");
    }
    {
        char *argv[] = {worker, "--dispatcher", "127.0.0.1:1", "--label", "po ol=a", NULL};
        expect_usage(argv, "sluice-worker: --label po ol=a: key: ' ' is not allowed at byte 2\n"
                           "Try 'sluice-worker --help'.\n");
    }
    {
        char *argv[] = {worker, "--dispatcher", "127.0.0.1:1", "--label", "pool", NULL};
        expect_usage(argv, "sluice-worker: --label pool: expected KEY=VALUE\n"
                           "Try 'sluice-worker --help'.\n");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_labels_in_status),
        cmocka_unit_test(test_selector_reads_only_matching),
        cmocka_unit_test(test_waits_then_starts),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
