/* The dashboard's history (dispatcher/history.h): when a sample is due, the ring keeping the last
 * HISTORY_SAMPLES oldest first, a clock that goes back, the figures of each sample taken from the
 * status document's own (status_job_figures, status_worker_figures), the bound on the series kept
 * per sample (the newest jobs and workers), and the exact JSON document. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatcher/history.h"
#include "dispatcher/state.h"
#include "dispatcher/status.h"
#include "lib/state_harness.h"

static struct history *new_history(void)
{
    struct history *h = calloc(1, sizeof *h);
    assert_non_null(h);
    return h;
}

static void test_due_and_ring(void **state)
{
    (void)state;
    struct state st;
    state_init(&st);
    struct history *h = new_history();
    assert_true(history_due(h, 0));
    assert_int_equal(history_count(h), 0);
    history_take(h, &st, NULL, 1000);
    assert_int_equal(history_count(h), 1);
    assert_false(history_due(h, 1000));
    assert_false(history_due(h, 1000 + HISTORY_INTERVAL_MS - 1));
    assert_true(history_due(h, 1000 + HISTORY_INTERVAL_MS));
    /* A clock that went back makes a sample due, and that sample starts the ring over. */
    assert_true(history_due(h, 999));
    history_take(h, &st, NULL, 2000);
    assert_int_equal(history_count(h), 2);
    history_take(h, &st, NULL, 500);
    assert_int_equal(history_count(h), 1);
    assert_int_equal(history_at(h, 0)->t_ms, 500);

    /* Full: the oldest goes, the rest stay in order. */
    memset(h, 0, sizeof *h);
    for (uint64_t i = 0; i < HISTORY_SAMPLES + 7; i++)
        history_take(h, &st, NULL, i * HISTORY_INTERVAL_MS);
    assert_int_equal(history_count(h), HISTORY_SAMPLES);
    for (size_t i = 0; i < HISTORY_SAMPLES; i++)
        assert_int_equal(history_at(h, i)->t_ms, (i + 7) * HISTORY_INTERVAL_MS);
    assert_int_equal(HISTORY_SAMPLES * HISTORY_INTERVAL_MS, HISTORY_SPAN_MS);
    free(h);
    state_release(&st);
}

/* The figures of a sample are the status document's: per job and per worker, summed over tasks;
 * the totals over every job. */
static void test_figures(void **state)
{
    (void)state;
    /* Jobs 1 and 2 with a task on each of workers 1 and 2 (tasks 1, 2 and 3, 4); task 3 has
     * no figures. */
    struct harness hs;
    harness_init(&hs);
    harness_run_script(&hs, PAR2 "job 1\n");
    const struct state *st = &hs.s;
    const struct status_task_figures tasks[] = {
        {.task_id = 1, .elements_per_second = 100, .bytes_per_second = 1000, .elements = 7},
        {.task_id = 2, .elements_per_second = 50, .bytes_per_second = 500, .elements = 3},
        {.task_id = 4, .elements_per_second = 1, .bytes_per_second = 2, .elements = 40},
    };
    struct status_extra x = {.tasks = tasks, .ntasks = 3};
    struct history *h = new_history();
    history_take(h, st, &x, 5000);
    const struct history_sample *s = history_at(h, 0);
    assert_int_equal(s->workers, 2);
    assert_true(s->elements_per_second == 151);
    assert_true(s->bytes_per_second == 1502);
    assert_int_equal(s->njobs, 2);
    assert_int_equal(s->jobs[0].id, 1);
    assert_true(s->jobs[0].elements_per_second == 150);
    assert_true(s->jobs[0].bytes_per_second == 1500);
    assert_int_equal(s->jobs[0].elements, 10);
    assert_int_equal(s->jobs[1].id, 2);
    assert_int_equal(s->jobs[1].elements, 40);
    assert_int_equal(s->nworkers, 2);
    assert_int_equal(s->workers_v[0].id, 1);
    assert_true(s->workers_v[0].elements_per_second == 100);
    assert_int_equal(s->workers_v[1].id, 2);
    assert_true(s->workers_v[1].elements_per_second == 51);

    char *json = NULL;
    assert_int_equal(history_json(h, 6500, &json), 0);
    assert_string_equal(
        json, "{\"interval_ms\":5000,\"span_ms\":900000,\"now_ms\":6500,\"samples\":["
              "{\"age_ms\":1500,\"elements_per_second\":151.0,\"bytes_per_second\":1502.0,"
              "\"workers\":2,\"jobs\":["
              "{\"id\":1,\"elements_per_second\":150.0,\"bytes_per_second\":1500.0,"
              "\"elements\":10,\"splits_finished\":0},"
              "{\"id\":2,\"elements_per_second\":1.0,\"bytes_per_second\":2.0,"
              "\"elements\":40,\"splits_finished\":0}],"
              "\"worker_rates\":["
              "{\"id\":1,\"elements_per_second\":100.0,\"bytes_per_second\":1000.0},"
              "{\"id\":2,\"elements_per_second\":51.0,\"bytes_per_second\":502.0}]}]}");
    free(json);
    free(h);
    harness_release(&hs);
}

/* More jobs and workers than a sample keeps: the newest (highest ids) are kept, the totals still
 * count every job. */
static void test_bounded(void **state)
{
    (void)state;
    /* n workers, then n jobs with a task on every worker (job i's are tasks (i-1)n+1 to in);
     * each job's task on worker 1 has figures. */
    struct harness hs;
    harness_init(&hs);
    size_t n = HISTORY_SERIES_MAX + 5;
    char line[64];
    harness_run(&hs, "ds - r4");
    for (size_t i = 1; i <= n; i++) {
        snprintf(line, sizeof line, "hb w%zu:1 %zu", i, i);
        harness_run(&hs, line);
    }
    struct status_task_figures *tasks = calloc(n, sizeof *tasks);
    assert_non_null(tasks);
    for (uint64_t i = 1; i <= n; i++) {
        harness_run(&hs, "job 1");
        tasks[i - 1] =
            (struct status_task_figures){.task_id = (i - 1) * n + 1, .elements_per_second = 1};
    }
    const struct state *st = &hs.s;
    assert_int_equal(st->ntasks, n * n);
    struct status_extra x = {.tasks = tasks, .ntasks = n};
    struct history *h = new_history();
    history_take(h, st, &x, 0);
    const struct history_sample *s = history_at(h, 0);
    assert_int_equal(s->workers, n);
    assert_true(s->elements_per_second == (double)n);
    assert_int_equal(s->njobs, HISTORY_SERIES_MAX);
    assert_int_equal(s->nworkers, HISTORY_SERIES_MAX);
    assert_int_equal(s->jobs[0].id, 6);
    assert_int_equal(s->jobs[HISTORY_SERIES_MAX - 1].id, n);
    assert_int_equal(s->workers_v[0].id, 6);
    /* The empty history's document. */
    memset(h, 0, sizeof *h);
    char *json = NULL;
    assert_int_equal(history_json(h, 7, &json), 0);
    assert_string_equal(json,
                        "{\"interval_ms\":5000,\"span_ms\":900000,\"now_ms\":7,\"samples\":[]}");
    free(json);
    free(h);
    free(tasks);
    harness_release(&hs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_due_and_ring),
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
