/* The worker's metrics: the idle share formula over a table of cases, the passes over the tasks
 * (what a heartbeat and a scrape count, a task seen again, a task gone, an id reused by another
 * task, a task whose producers exited) and the exact rendered samples. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/wmetrics.h"

#include "common/obj_metrics.h"

#define MS 1000000ull

static double sample(struct wmetrics *m, const char *name)
{
    char *body;
    size_t len;
    assert_int_equal(wmetrics_render(m, &body, &len), 0);
    assert_int_equal(strlen(body), len);
    double v = NAN;
    size_t n = strlen(name);
    for (char *line = body; line && *line;) {
        char *nl = strchr(line, '\n');
        if (strncmp(line, name, n) == 0 && line[n] == ' ')
            v = strtod(line + n + 1, NULL);
        line = nl ? nl + 1 : NULL;
    }
    free(body);
    return v;
}

static void test_idle_share(void **unused)
{
    (void)unused;
    static const struct {
        uint64_t blocked;
        unsigned producers;
        uint64_t interval;
        double want;
    } cases[] = {
        {0, 1, 100 * MS, 0},           {50 * MS, 1, 100 * MS, 0.5},   {100 * MS, 1, 100 * MS, 1},
        {150 * MS, 1, 100 * MS, 1}, /* a block that began before the interval: clamped */
        {100 * MS, 4, 100 * MS, 0.25}, {300 * MS, 4, 100 * MS, 0.75}, {100 * MS, 0, 100 * MS, 0},
        {100 * MS, 2, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_true(
            fabs(wmetrics_idle_share(cases[i].blocked, cases[i].producers, cases[i].interval) -
                 cases[i].want) < 1e-12);
}

static void test_passes(void **unused)
{
    (void)unused;
    struct wmetrics *m;
    assert_int_equal(wmetrics_create(&m), 0);
    assert_int_equal(sample(m, "sluice_worker_tasks"), 0);

    /* First heartbeat: counts what was produced so far; no interval yet, so idle 0. */
    struct task_progress a = {
        .buffered = 10, .produced = 100, .blocked_ns = 5 * MS, .producers = 2};
    struct task_progress b = {.buffered = 1, .produced = 7, .blocked_ns = 0, .producers = 1};
    wmetrics_pass_begin(m);
    assert_true(wmetrics_task_heartbeat(m, 1, &a, 1000 * MS) == 0);
    assert_true(wmetrics_task_heartbeat(m, 2, &b, 1000 * MS) == 0);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_tasks"), 2);
    assert_int_equal(sample(m, "sluice_worker_buffered_elements"), 11);
    assert_int_equal(sample(m, "sluice_worker_elements_produced_total"), 107);

    /* A scrape counts production but leaves the idle interval alone. */
    a.produced = 150;
    a.blocked_ns = 105 * MS;
    wmetrics_pass_begin(m);
    wmetrics_task_seen(m, 1, &a);
    wmetrics_task_seen(m, 2, &b);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_elements_produced_total"), 157);

    /* Next heartbeat 200 ms later: task 1 blocked 200 of its 400 producer-ms, task 2 not. */
    a.blocked_ns = 205 * MS;
    wmetrics_pass_begin(m);
    assert_true(fabs(wmetrics_task_heartbeat(m, 1, &a, 1200 * MS) - 0.5) < 1e-12);
    assert_true(wmetrics_task_heartbeat(m, 2, &b, 1200 * MS) == 0);
    wmetrics_pass_end(m);
    assert_true(fabs(sample(m, "sluice_worker_idle_share") - 0.25) < 1e-12);

    /* Task 2 is gone; task 1's producers exited: it has nothing to do. */
    a.done = true;
    a.produced = 160;
    wmetrics_pass_begin(m);
    assert_true(wmetrics_task_heartbeat(m, 1, &a, 1300 * MS) == 1);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_tasks"), 1);
    assert_int_equal(sample(m, "sluice_worker_buffered_elements"), 10);
    assert_int_equal(sample(m, "sluice_worker_elements_produced_total"), 167);
    assert_true(sample(m, "sluice_worker_idle_share") == 1);

    /* Id 2 comes back as a new task: counted from zero, first heartbeat idle 0. */
    struct task_progress c = {.produced = 3, .blocked_ns = 1 * MS, .producers = 1};
    wmetrics_pass_begin(m);
    wmetrics_task_heartbeat(m, 1, &a, 1400 * MS);
    assert_true(wmetrics_task_heartbeat(m, 2, &c, 1400 * MS) == 0);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_elements_produced_total"), 170);
    /* Id 1 reused by another task whose counts are below the old ones. */
    struct task_progress d = {.produced = 4, .blocked_ns = 0, .producers = 1};
    wmetrics_pass_begin(m);
    assert_true(wmetrics_task_heartbeat(m, 1, &d, 1500 * MS) == 0);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_elements_produced_total"), 174);

    /* A finished task and a failed one are still held but run no more. */
    struct task_progress fin = {.done = true, .finished = true, .produced = 4, .producers = 1};
    struct task_progress bad = {.done = true, .failed = true, .producers = 1};
    wmetrics_pass_begin(m);
    wmetrics_task_seen(m, 1, &fin);
    wmetrics_task_seen(m, 3, &bad);
    wmetrics_task_seen(m, 2, &c);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_tasks"), 1);

    /* No tasks: the gauges are 0. */
    wmetrics_pass_begin(m);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_tasks"), 0);
    assert_int_equal(sample(m, "sluice_worker_buffered_elements"), 0);
    assert_true(sample(m, "sluice_worker_idle_share") == 0);
    wmetrics_destroy(m);
}

/* sluice_worker_job_cpu_seconds_total{job}: the growth of each task's thread time, summed per
 * job; a reused task id counts from its new value; a job no pass sees loses its series. */
static void test_job_busy(void **unused)
{
    (void)unused;
    struct wmetrics *m;
    assert_int_equal(wmetrics_create(&m), 0);
    struct task_progress tp = {.producers = 1};
    wmetrics_pass_begin(m);
    wmetrics_task_seen(m, 1, &tp);
    wmetrics_task_busy(m, 5, 1, 1500 * MS);
    wmetrics_task_seen(m, 2, &tp);
    wmetrics_task_busy(m, 5, 2, 500 * MS);
    wmetrics_task_seen(m, 3, &tp);
    wmetrics_task_busy(m, 6, 3, 0);
    wmetrics_pass_end(m);
    assert_true(sample(m, "sluice_worker_job_cpu_seconds_total{job=\"5\"}") == 2.0);
    assert_true(sample(m, "sluice_worker_job_cpu_seconds_total{job=\"6\"}") == 0.0);
    /* Task 1 grows by 250 ms; task 2 is another task under a reused id (below its old value):
     * it counts from there; job 6 is gone. */
    wmetrics_pass_begin(m);
    wmetrics_task_seen(m, 1, &tp);
    wmetrics_task_busy(m, 5, 1, 1750 * MS);
    wmetrics_task_seen(m, 2, &tp);
    wmetrics_task_busy(m, 5, 2, 100 * MS);
    wmetrics_pass_end(m);
    assert_true(fabs(sample(m, "sluice_worker_job_cpu_seconds_total{job=\"5\"}") - 2.25) < 1e-9);
    assert_true(isnan(sample(m, "sluice_worker_job_cpu_seconds_total{job=\"6\"}")));
    wmetrics_pass_begin(m);
    wmetrics_task_seen(m, 2, &tp);
    wmetrics_task_busy(m, 5, 2, 400 * MS);
    wmetrics_pass_end(m);
    assert_true(fabs(sample(m, "sluice_worker_job_cpu_seconds_total{job=\"5\"}") - 2.55) < 1e-9);
    wmetrics_destroy(m);
}

static void test_counters(void **unused)
{
    (void)unused;
    struct wmetrics *m;
    assert_int_equal(wmetrics_create(&m), 0);
    wmetrics_request(m, false);
    wmetrics_request(m, true);
    wmetrics_served(m, 8192, 100000, false);
    wmetrics_served(m, 1, 12, true);
    assert_int_equal(sample(m, "sluice_worker_requests_total"), 2);
    assert_int_equal(sample(m, "sluice_worker_elements_served_total"), 8193);
    assert_int_equal(sample(m, "sluice_worker_bytes_served_total"), 100012);
    /* Of those, the ones over in-process connections. */
    assert_int_equal(sample(m, "sluice_worker_local_requests_total"), 1);
    assert_int_equal(sample(m, "sluice_worker_local_elements_served_total"), 1);
    char *body;
    size_t len;
    assert_int_equal(wmetrics_render(m, &body, &len), 0);
    assert_non_null(strstr(body, "# HELP sluice_worker_requests_total GetElements requests "
                                 "received.\n# TYPE sluice_worker_requests_total counter\n"
                                 "sluice_worker_requests_total 2\n"));
    free(body);
    wmetrics_destroy(m);
    wmetrics_destroy(NULL);
}

/* Object-store counters: the series of get, list and put with status 200 from the start, one more
 * per status counted (PUTs and DELETEs too), "error" for attempts without an answer; the bytes. */
static void test_objects(void **unused)
{
    (void)unused;
    struct wmetrics *m;
    assert_int_equal(wmetrics_create(&m), 0);
    char *body;
    size_t len;
    assert_int_equal(wmetrics_render(m, &body, &len), 0);
    assert_non_null(strstr(body, "sluice_object_requests_total{op=\"get\",code=\"200\"} 0\n"
                                 "sluice_object_requests_total{op=\"list\",code=\"200\"} 0\n"
                                 "sluice_object_requests_total{op=\"put\",code=\"200\"} 0\n"));
    assert_non_null(strstr(body, "\nsluice_object_bytes_total 0\n"));
    assert_non_null(strstr(body, "\nsluice_object_bytes_sent_total 0\n"));
    free(body);
    struct obj_stats *st = calloc(1, sizeof *st);
    assert_non_null(st);
    st->requests[OBJ_OP_GET][206] = 40;
    st->requests[OBJ_OP_GET][503] = 3;
    st->requests[OBJ_OP_GET][0] = 2;
    st->requests[OBJ_OP_LIST][200] = 3;
    st->requests[OBJ_OP_PUT][200] = 7;
    st->requests[OBJ_OP_DELETE][204] = 2;
    st->bytes = 163840;
    st->bytes_sent = 4096;
    assert_int_equal(wmetrics_objects(m, st), 0);
    assert_int_equal(wmetrics_render(m, &body, &len), 0);
    assert_non_null(strstr(body, "# TYPE sluice_object_requests_total counter\n"));
    assert_non_null(strstr(body, "sluice_object_requests_total{op=\"get\",code=\"200\"} 0\n"
                                 "sluice_object_requests_total{op=\"list\",code=\"200\"} 3\n"
                                 "sluice_object_requests_total{op=\"put\",code=\"200\"} 7\n"
                                 "sluice_object_requests_total{op=\"get\",code=\"error\"} 2\n"
                                 "sluice_object_requests_total{op=\"get\",code=\"206\"} 40\n"
                                 "sluice_object_requests_total{op=\"get\",code=\"503\"} 3\n"
                                 "sluice_object_requests_total{op=\"delete\",code=\"204\"} 2\n"));
    assert_non_null(strstr(body, "\nsluice_object_bytes_total 163840\n"));
    assert_non_null(strstr(body, "\nsluice_object_bytes_sent_total 4096\n"));
    free(body);
    free(st);
    wmetrics_destroy(m);
}

/* Cross-trainer caches: a pass sums what the caches hold; skipped elements add up. */
static void test_xtc(void **unused)
{
    (void)unused;
    struct wmetrics *m;
    assert_int_equal(wmetrics_create(&m), 0);
    assert_int_equal(sample(m, "sluice_worker_cross_trainer_cache_bytes"), 0);
    assert_int_equal(sample(m, "sluice_worker_cross_trainer_skipped_total"), 0);
    wmetrics_pass_begin(m);
    wmetrics_xtc_seen(m, 1000);
    wmetrics_xtc_seen(m, 234);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_cross_trainer_cache_bytes"), 1234);
    wmetrics_pass_begin(m);
    wmetrics_pass_end(m);
    assert_int_equal(sample(m, "sluice_worker_cross_trainer_cache_bytes"), 0);
    wmetrics_xtc_skipped(m, 7);
    wmetrics_xtc_skipped(m, 5);
    assert_int_equal(sample(m, "sluice_worker_cross_trainer_skipped_total"), 12);
    wmetrics_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_share), cmocka_unit_test(test_objects),
        cmocka_unit_test(test_passes),     cmocka_unit_test(test_job_busy),
        cmocka_unit_test(test_counters),   cmocka_unit_test(test_xtc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
