/* The dashboard's history (dispatcher/history.h): when a sample is due, the ring keeping the last
 * HISTORY_SAMPLES oldest first, a clock that goes back, the rates of each sample taken from the
 * served counts' differences since the previous one (a new job or iteration counting from 0, an
 * older job back among those kept and a previous sample without counts giving none), the bound on
 * the series kept per sample (the newest jobs and workers), and the exact JSON document. */
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

static void count_set(struct history_count *c, uint64_t id, uint64_t elements)
{
    *c = (struct history_count){id, elements, 10 * elements};
}

/* A sample's rates are what was served since the previous sample over the time between them:
 * none at the first, per job (its iteration's counts), per worker and in all at the next. */
static void test_rates(void **state)
{
    (void)state;
    /* Jobs 1 and 2, each with a task on workers 1 and 2. */
    struct harness hs;
    harness_init(&hs);
    harness_run_script(&hs, PAR2 "job 1\n");
    struct state *st = &hs.s;
    assert_int_equal(st->njobs, 2);
    uint64_t it1 = st->jobs[0].iteration_id, it2 = st->jobs[1].iteration_id;
    assert_true(it1 < it2);
    struct history_count its[2], ws[2];
    struct history_served in = {100, 1000, its, 2, ws, 2};
    count_set(&its[0], it1, 70);
    count_set(&its[1], it2, 30);
    count_set(&ws[0], 1, 60);
    count_set(&ws[1], 2, 40);
    struct history *h = new_history();
    history_take(h, st, &in, 5000);
    const struct history_sample *s = history_at(h, 0);
    assert_int_equal(s->workers, 2);
    assert_true(s->elements_per_second == 0);
    assert_int_equal(s->njobs, 2);
    assert_int_equal(s->jobs[0].elements, 70);
    assert_true(s->jobs[0].elements_per_second == 0);
    assert_int_equal(s->nworkers, 2);
    assert_int_equal(s->workers_v[1].elements, 40);

    /* 5 s later: job 1 served 500 more (all on worker 1), job 2 nothing. */
    in.elements = 600;
    in.bytes = 6000;
    count_set(&its[0], it1, 570);
    count_set(&ws[0], 1, 560);
    history_take(h, st, &in, 10000);
    s = history_at(h, 1);
    assert_true(s->elements_per_second == 100);
    assert_true(s->bytes_per_second == 1000);
    assert_int_equal(s->jobs[0].id, 1);
    assert_true(s->jobs[0].elements_per_second == 100);
    assert_true(s->jobs[0].bytes_per_second == 1000);
    assert_int_equal(s->jobs[0].elements, 570);
    assert_true(s->jobs[1].elements_per_second == 0);
    assert_int_equal(s->jobs[1].elements, 30);
    assert_true(s->workers_v[0].elements_per_second == 100);
    assert_true(s->workers_v[1].elements_per_second == 0);

    char *json = NULL;
    assert_int_equal(history_json(h, 11500, &json), 0);
    assert_string_equal(
        json, "{\"interval_ms\":5000,\"span_ms\":900000,\"now_ms\":11500,\"samples\":["
              "{\"age_ms\":6500,\"elements_per_second\":0.0,\"bytes_per_second\":0.0,"
              "\"workers\":2,\"jobs\":["
              "{\"id\":1,\"elements_per_second\":0.0,\"bytes_per_second\":0.0,"
              "\"elements\":70,\"splits_finished\":0},"
              "{\"id\":2,\"elements_per_second\":0.0,\"bytes_per_second\":0.0,"
              "\"elements\":30,\"splits_finished\":0}],"
              "\"worker_rates\":["
              "{\"id\":1,\"elements_per_second\":0.0,\"bytes_per_second\":0.0},"
              "{\"id\":2,\"elements_per_second\":0.0,\"bytes_per_second\":0.0}]},"
              "{\"age_ms\":1500,\"elements_per_second\":100.0,\"bytes_per_second\":1000.0,"
              "\"workers\":2,\"jobs\":["
              "{\"id\":1,\"elements_per_second\":100.0,\"bytes_per_second\":1000.0,"
              "\"elements\":570,\"splits_finished\":0},"
              "{\"id\":2,\"elements_per_second\":0.0,\"bytes_per_second\":0.0,"
              "\"elements\":30,\"splits_finished\":0}],"
              "\"worker_rates\":["
              "{\"id\":1,\"elements_per_second\":100.0,\"bytes_per_second\":1000.0},"
              "{\"id\":2,\"elements_per_second\":0.0,\"bytes_per_second\":0.0}]}]}");
    free(json);

    /* Job 2 moves to a new iteration (99), which counts from 0: 50 in 10 s. */
    st->jobs[1].iteration_id = 99;
    struct history_count its2[3] = {its[0], its[1]};
    count_set(&its2[2], 99, 50);
    in.iterations = its2;
    in.niterations = 3;
    history_take(h, st, &in, 20000);
    s = history_at(h, 2);
    assert_int_equal(s->jobs[1].elements, 50);
    assert_true(s->jobs[1].elements_per_second == 5);
    assert_true(s->jobs[1].bytes_per_second == 50);
    assert_true(s->elements_per_second == 0);

    /* A sample without counts has no rates, and neither has the next: it has nothing to start
     * from. */
    history_take(h, st, NULL, 25000);
    s = history_at(h, 3);
    assert_int_equal(s->workers, 2);
    assert_int_equal(s->jobs[0].elements, 0);
    in.elements = 1100;
    history_take(h, st, &in, 30000);
    s = history_at(h, 4);
    assert_true(s->elements_per_second == 0);
    assert_int_equal(s->jobs[0].elements, 570);
    in.elements = 1600;
    history_take(h, st, &in, 35000);
    assert_true(history_at(h, 5)->elements_per_second == 100);

    /* Counts that went back (a new leader's) give no rate for that sample, then rates again. */
    in.elements = 100;
    count_set(&its2[0], it1, 20);
    history_take(h, st, &in, 40000);
    s = history_at(h, 6);
    assert_true(s->elements_per_second == 0);
    assert_true(s->jobs[0].elements_per_second == 0);
    assert_int_equal(s->jobs[0].elements, 20);
    in.elements = 600;
    count_set(&its2[0], it1, 520);
    history_take(h, st, &in, 45000);
    assert_true(history_at(h, 7)->jobs[0].elements_per_second == 100);
    free(h);
    harness_release(&hs);
}

/* More jobs and workers than a sample keeps: the newest (highest ids) are kept, the totals still
 * count every job; a job made since the previous sample counts from 0, an older one back among
 * those kept has no rate until the next sample. */
static void test_bounded(void **state)
{
    (void)state;
    /* n workers, then n jobs with a task on every worker. */
    struct harness hs;
    harness_init(&hs);
    size_t n = HISTORY_SERIES_MAX + 5;
    char line[64];
    harness_run(&hs, "ds - r4");
    for (size_t i = 1; i <= n; i++) {
        snprintf(line, sizeof line, "hb w%zu:1 %zu", i, i);
        harness_run(&hs, line);
    }
    for (uint64_t i = 1; i <= n; i++)
        harness_run(&hs, "job 1");
    struct state *st = &hs.s;
    assert_int_equal(st->ntasks, n * n);
    /* Every job's iteration and every worker served 10 elements a second, from 0. */
    struct history_count *its = calloc(n + 1, sizeof *its), *ws = calloc(n, sizeof *ws);
    assert_non_null(its);
    assert_non_null(ws);
    struct history_served in = {0, 0, its, n, ws, n};
    struct history *h = new_history();
    for (uint64_t t = 0; t <= 1; t++) {
        for (size_t i = 0; i < n; i++) {
            count_set(&its[i], st->jobs[i].iteration_id, 50 * t);
            count_set(&ws[i], st->workers[i].id, 50 * t);
        }
        in.elements = 50 * t * n;
        history_take(h, st, &in, t * HISTORY_INTERVAL_MS);
    }
    const struct history_sample *s = history_at(h, 1);
    assert_int_equal(s->workers, n);
    assert_true(s->elements_per_second == 10.0 * (double)n);
    assert_int_equal(s->njobs, HISTORY_SERIES_MAX);
    assert_int_equal(s->nworkers, HISTORY_SERIES_MAX);
    assert_int_equal(s->jobs[0].id, 6);
    assert_int_equal(s->jobs[HISTORY_SERIES_MAX - 1].id, n);
    assert_int_equal(s->workers_v[0].id, 6);
    for (size_t i = 0; i < HISTORY_SERIES_MAX; i++) {
        assert_true(s->jobs[i].elements_per_second == 10);
        assert_true(s->workers_v[i].elements_per_second == 10);
    }
    /* A new job (its iteration served 50 since it was made): 10 a second. */
    harness_run(&hs, "job 1");
    assert_int_equal(st->njobs, n + 1);
    count_set(&its[n], st->jobs[n].iteration_id, 50);
    in.niterations = n + 1;
    history_take(h, st, &in, 2 * HISTORY_INTERVAL_MS);
    s = history_at(h, 2);
    assert_int_equal(s->jobs[HISTORY_SERIES_MAX - 1].id, n + 1);
    assert_true(s->jobs[HISTORY_SERIES_MAX - 1].elements_per_second == 10);
    assert_true(s->jobs[0].elements_per_second == 0); /* job 7, still kept: nothing more */
    /* The newest job gone from the state's list (as a collected one): job 6 is kept again and
     * has no mark, so no rate this sample; the next one has. */
    st->njobs--;
    count_set(&its[5], st->jobs[5].iteration_id, 100);
    history_take(h, st, &in, 3 * HISTORY_INTERVAL_MS);
    s = history_at(h, 3);
    assert_int_equal(s->jobs[0].id, 6);
    assert_int_equal(s->jobs[0].elements, 100);
    assert_true(s->jobs[0].elements_per_second == 0);
    count_set(&its[5], st->jobs[5].iteration_id, 150);
    history_take(h, st, &in, 4 * HISTORY_INTERVAL_MS);
    assert_true(history_at(h, 4)->jobs[0].elements_per_second == 10);
    st->njobs++;

    /* The empty history's document. */
    memset(h, 0, sizeof *h);
    char *json = NULL;
    assert_int_equal(history_json(h, 7, &json), 0);
    assert_string_equal(json,
                        "{\"interval_ms\":5000,\"span_ms\":900000,\"now_ms\":7,\"samples\":[]}");
    free(json);
    free(h);
    free(its);
    free(ws);
    harness_release(&hs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_due_and_ring),
        cmocka_unit_test(test_rates),
        cmocka_unit_test(test_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
