/* The dispatcher's observation module: how worker and client reports become the figures of a
 * window (means over the window's reports, the last window's figures kept through a silent one,
 * finished tasks and bad numbers left out), the recommendation before and after the first window,
 * when a window is due, draining workers, forgetting removed workers and released clients, the
 * split counters, the status document's additions and the exact rendered samples. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dispatcher/autoscale_pools.h"
#include "dispatcher/observe.h"
#include "dispatcher/state.h"
#include "dispatcher/status.h"

#define WINDOW_MS 1000

struct fixture {
    struct state st;
    struct observe *o;
};

static void apply(struct state *st, struct st_update *u)
{
    assert_int_equal(state_apply(st, u), 0);
    st_update_release(u);
}

static void add_worker(struct state *st, uint64_t id)
{
    struct st_update u = {.type = ST_WORKER_REGISTERED, .id = id, .incarnation = id};
    snprintf(u.address, sizeof u.address, "w%" PRIu64 ":1", id);
    apply(st, &u);
}

/* A dataset, a job and its iteration, for clients to belong to. */
static void add_iteration(struct state *st)
{
    struct st_update d = {.type = ST_DATASET_REGISTERED, .id = 1};
    snprintf(d.name, sizeof d.name, "1");
    d.def = malloc(1);
    d.def_len = 1;
    d.def[0] = 0;
    apply(st, &d);
    struct st_update j = {.type = ST_JOB_CREATED, .id = 1};
    snprintf(j.name2, sizeof j.name2, "1");
    apply(st, &j);
    struct st_update it = {.type = ST_ITERATION_CREATED, .id = 1, .ref = 1, .ref2 = 1};
    apply(st, &it);
}

static void add_client(struct state *st, uint64_t id)
{
    struct st_update u = {.type = ST_CLIENT_ACQUIRED, .id = id, .ref = 1};
    apply(st, &u);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    state_init(&f->st);
    add_iteration(&f->st);
    struct observe_config cfg = {
        .window_ms = WINDOW_MS,
        .worker_timeout_ms = 2000,
        .client_timeout_ms = 5000,
        .job_gc_timeout_ms = 60000,
        .worker_heartbeat_ms = 400,
        .client_heartbeat_ms = 1000,
        .client_disconnect_grace_ms = 5000,
        .worker_disconnect_grace_ms = 2000,
    };
    assert_int_equal(observe_create(&cfg, NULL, 0, &f->o), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    observe_destroy(f->o);
    state_release(&f->st);
    free(f);
    return 0;
}

/* Closes the window due at now and returns its outcome. */
static struct observe_window close_at(struct fixture *f, uint64_t now)
{
    struct observe_window w;
    memset(&w, 0, sizeof w);
    assert_int_equal(observe_window_close(f->o, &f->st, now, &w), 1);
    return w;
}

static void report_worker(struct fixture *f, uint64_t id, double rate, double idle)
{
    struct observe_task t = {rate, idle, false};
    observe_worker_report(f->o, id, &t, 1);
}

/* The value of the sample line that starts with name_and_labels followed by a space, or NAN, in
 * the metrics rendered at now. */
static double sample_at(struct fixture *f, uint64_t now, const char *name_and_labels)
{
    char *body;
    size_t len;
    assert_int_equal(observe_render(f->o, &f->st, now, &body, &len), 0);
    assert_int_equal(strlen(body), len);
    double v = NAN;
    size_t n = strlen(name_and_labels);
    for (char *line = body; line && *line;) {
        char *nl = strchr(line, '\n');
        if (strncmp(line, name_and_labels, n) == 0 && line[n] == ' ')
            v = strtod(line + n + 1, NULL);
        line = nl ? nl + 1 : NULL;
    }
    free(body);
    return v;
}

static double sample(struct fixture *f, const char *name_and_labels)
{
    return sample_at(f, 0, name_and_labels);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_window_timing(void **state)
{
    struct fixture *f = *state;
    struct observe_window w;
    assert_int_equal(observe_window_ms(f->o), WINDOW_MS);
    assert_int_equal(observe_window_close(f->o, &f->st, WINDOW_MS - 1, &w), 0);
    assert_int_equal(observe_window_close(f->o, &f->st, WINDOW_MS, &w), 1);
    /* A late close starts the next window at the close, not at the planned end. */
    assert_int_equal(observe_window_close(f->o, &f->st, 2 * WINDOW_MS + 500, &w), 1);
    assert_int_equal(observe_window_close(f->o, &f->st, 3 * WINDOW_MS + 499, &w), 0);
    assert_int_equal(observe_window_close(f->o, &f->st, 3 * WINDOW_MS + 500, &w), 1);
    assert_int_equal(sample(f, "sluice_autoscale_windows_total{reason=\"no_data\"}"), 3);
}

static void test_default_window(void **state)
{
    (void)state;
    struct observe_config cfg = {0};
    struct observe *o;
    assert_int_equal(observe_create(&cfg, NULL, 100, &o), 0);
    assert_int_equal(observe_window_ms(o), OBSERVE_DEFAULT_WINDOW_MS);
    struct state st;
    state_init(&st);
    struct observe_window w;
    assert_int_equal(observe_window_close(o, &st, 100 + OBSERVE_DEFAULT_WINDOW_MS - 1, &w), 0);
    assert_int_equal(observe_window_close(o, &st, 100 + OBSERVE_DEFAULT_WINDOW_MS, &w), 1);
    state_release(&st);
    observe_destroy(o);
}

static void test_recommended_before_first_window(void **state)
{
    struct fixture *f = *state;
    /* No workers: at least 1. */
    assert_int_equal(observe_recommended(f->o, &f->st), 1);
    add_worker(&f->st, 1);
    add_worker(&f->st, 2);
    add_worker(&f->st, 3);
    assert_int_equal(observe_recommended(f->o, &f->st), 3);
    struct st_update u = {.type = ST_WORKER_DRAINING, .id = 2};
    apply(&f->st, &u);
    assert_int_equal(observe_current_workers(&f->st), 2);
    assert_int_equal(observe_recommended(f->o, &f->st), 2);
    assert_int_equal(sample(f, "sluice_recommended_workers"), 2);
    assert_int_equal(sample(f, "sluice_workers"), 3);
    assert_int_equal(sample(f, "sluice_workers_draining"), 1);
    /* A window without data keeps the current count, and that is now a decision (a client is
     * registered: without any, the cluster would shrink, see test_no_consumers). */
    add_client(&f->st, 1);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_int_equal(w.decision.reason, AUTOSCALE_NO_DATA);
    assert_int_equal(w.before, 2);
    assert_int_equal(w.current, 2);
    assert_int_equal(w.decision.workers, 2);
    u = (struct st_update){.type = ST_WORKER_REGISTERED, .id = 4, .incarnation = 4};
    snprintf(u.address, sizeof u.address, "w4:1");
    apply(&f->st, &u);
    assert_int_equal(observe_recommended(f->o, &f->st), 2);
}

/* Consumers wait, the single worker is busy: scale up by one step, kept while nothing changes. */
static void test_rising(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_client(&f->st, 1);
    report_worker(f, 1, 500, 0);
    observe_client_report(f->o, 1, 500, 0.99);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_int_equal(w.decision.reason, AUTOSCALE_UP);
    assert_int_equal(w.decision.workers, 2);
    assert_int_equal(w.decision.workers_measured, 1);
    assert_int_equal(w.decision.clients_measured, 1);
    assert_int_equal(observe_recommended(f->o, &f->st), 2);
    assert_int_equal(sample(f, "sluice_recommended_workers"), 2);
    assert_int_equal(sample(f, "sluice_autoscale_windows_total{reason=\"up\"}"), 1);
    assert_true(fabs(sample(f, "sluice_autoscale_demand_elements_per_second") - 5000) < 1e-6);
    assert_true(fabs(sample(f, "sluice_autoscale_capacity_elements_per_second") - 500) < 1e-9);
    /* A silent window keeps the figures of the last one: still up, bounded by the step. */
    w = close_at(f, 2 * WINDOW_MS);
    assert_int_equal(w.decision.reason, AUTOSCALE_UP);
    assert_int_equal(w.decision.workers, 2);
}

/* Consumers never wait, three workers mostly idle: scale down by one step. */
static void test_falling(void **state)
{
    struct fixture *f = *state;
    for (uint64_t id = 1; id <= 3; id++)
        add_worker(&f->st, id);
    add_client(&f->st, 1);
    for (uint64_t id = 1; id <= 3; id++)
        report_worker(f, id, 160, 0.96);
    observe_client_report(f->o, 1, 500, 0);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_int_equal(w.decision.reason, AUTOSCALE_DOWN);
    assert_int_equal(w.before, 3);
    assert_int_equal(w.decision.workers, 2);
    assert_int_equal(observe_recommended(f->o, &f->st), 2);
}

/* The figures of a window are the means of its reports. */
static void test_window_means(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_client(&f->st, 1);
    report_worker(f, 1, 100, 0.2);
    report_worker(f, 1, 300, 0.4);
    observe_client_report(f->o, 1, 100, 0.5);
    observe_client_report(f->o, 1, 300, 0.7);
    struct observe_window w = close_at(f, WINDOW_MS);
    /* Capacity: 200 / (1 - 0.3); demand: 200 / (1 - 0.6). */
    assert_true(fabs(w.decision.capacity - 200 / 0.7) < 1e-9);
    assert_true(fabs(w.decision.demand - 200 / 0.4) < 1e-9);
    assert_true(fabs(w.decision.served - 200) < 1e-9);
    assert_true(fabs(w.decision.idle - 0.3) < 1e-9);
    /* The gauges show the last reports, not the means. */
    assert_true(fabs(sample(f, "sluice_client_wait_share") - 0.7) < 1e-12);
    assert_true(fabs(sample(f, "sluice_consumption_elements_per_second") - 300) < 1e-12);
    assert_true(fabs(sample(f, "sluice_production_elements_per_second") - 300) < 1e-12);
}

/* Finished tasks do not count; a report with only finished tasks, or bad numbers, has no data,
 * and a window whose reports all had none leaves the worker out. */
static void test_worker_reports(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_worker(&f->st, 2);
    add_client(&f->st, 1);
    struct observe_task tasks[] = {{100, 0.5, false}, {900, 0.0, true}, {300, 0.1, false}};
    observe_worker_report(f->o, 1, tasks, 3);
    struct observe_task bad[] = {{NAN, 0.1, false}};
    observe_worker_report(f->o, 2, bad, 1);
    observe_client_report(f->o, 1, 400, 0.5);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_int_equal(w.decision.workers_measured, 1);
    /* Rate 400, idle (0.5 + 0.1) / 2. */
    assert_true(fabs(w.decision.capacity - 400 / 0.7) < 1e-9);
    assert_true(fabs(w.decision.idle - 0.3) < 1e-9);

    struct observe_task done[] = {{900, 0.0, true}};
    observe_worker_report(f->o, 1, done, 1);
    observe_worker_report(f->o, 2, NULL, 0);
    w = close_at(f, 2 * WINDOW_MS);
    assert_int_equal(w.decision.workers_measured, 0);
    assert_int_equal(w.decision.reason, AUTOSCALE_NO_DATA);

    /* Out-of-range shares and negative rates are no data too. */
    struct observe_task out_of_range[] = {{10, 1.5, false}};
    observe_worker_report(f->o, 1, out_of_range, 1);
    observe_client_report(f->o, 1, -1, 0.2);
    w = close_at(f, 3 * WINDOW_MS);
    assert_int_equal(w.decision.workers_measured, 0);
    assert_int_equal(w.decision.clients_measured, 0);
}

/* Draining workers neither count as current nor contribute figures. */
static void test_draining(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_worker(&f->st, 2);
    add_client(&f->st, 1);
    struct st_update u = {.type = ST_WORKER_DRAINING, .id = 2};
    apply(&f->st, &u);
    report_worker(f, 1, 100, 0);
    report_worker(f, 2, 100, 0);
    observe_client_report(f->o, 1, 100, 0.5);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_int_equal(w.current, 1);
    assert_int_equal(w.decision.workers_measured, 1);
}

/* Removal and release forget figures; ids the state lost are pruned at the window. */
static void test_forget(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_worker(&f->st, 2);
    add_client(&f->st, 1);
    add_client(&f->st, 2);
    report_worker(f, 1, 100, 0);
    report_worker(f, 2, 100, 0);
    observe_client_report(f->o, 1, 100, 0.5);
    observe_client_report(f->o, 2, 100, 0.5);
    assert_true(fabs(sample(f, "sluice_consumption_elements_per_second") - 200) < 1e-12);

    struct st_update u = {.type = ST_WORKER_REMOVED, .id = 2};
    assert_int_equal(state_apply(&f->st, &u), 0);
    observe_applied(f->o, &u);
    u = (struct st_update){.type = ST_CLIENT_RELEASED, .id = 2};
    assert_int_equal(state_apply(&f->st, &u), 0);
    observe_applied(f->o, &u);
    assert_true(fabs(sample(f, "sluice_consumption_elements_per_second") - 100) < 1e-12);
    assert_true(fabs(sample(f, "sluice_production_elements_per_second") - 100) < 1e-12);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_int_equal(w.decision.workers_measured, 1);
    assert_int_equal(w.decision.clients_measured, 1);

    /* Figures of an id the state never had (a report that raced a removal) are pruned. */
    report_worker(f, 7, 100, 0);
    observe_client_report(f->o, 9, 100, 0.5);
    w = close_at(f, 2 * WINDOW_MS);
    assert_int_equal(w.decision.workers_measured, 1);
    assert_int_equal(w.decision.clients_measured, 1);
}

static void test_heartbeat_messages(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_client(&f->st, 1);
    Sluice__TaskProgress p1 = SLUICE__TASK_PROGRESS__INIT, p2 = SLUICE__TASK_PROGRESS__INIT;
    p1.task_id = 1;
    p1.elements_per_second = 250;
    p1.idle_fraction = 0.5;
    p2.task_id = 2;
    p2.elements_per_second = 50;
    p2.idle_fraction = 0.1;
    Sluice__TaskProgress *ps[] = {&p1, NULL, &p2};
    Sluice__WorkerHeartbeatRequest wr = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    wr.n_tasks = 3;
    wr.tasks = ps;
    observe_worker_heartbeat(f->o, 1, &wr);
    Sluice__ClientHeartbeatRequest cr = SLUICE__CLIENT_HEARTBEAT_REQUEST__INIT;
    cr.client_id = 1;
    cr.elements_per_second = 120;
    cr.wait_fraction = 0.25;
    observe_client_heartbeat(f->o, 1, &cr);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_true(fabs(w.decision.capacity - 300 / 0.7) < 1e-9);
    assert_true(fabs(w.decision.served - 120) < 1e-12);
    assert_true(fabs(sample(f, "sluice_client_wait_share") - 0.25) < 1e-12);
}

/* Copies cut short: each client's count is cumulative; what it adds goes to the counter and to
 * its job's count in the status document, and a report that arrives late (a smaller count) adds
 * nothing. */
static void test_copies_cut(void **state)
{
    struct fixture *f = *state;
    add_client(&f->st, 1);
    add_client(&f->st, 2);
    assert_int_equal(sample(f, "sluice_client_copies_cut_total"), 0);
    Sluice__ClientHeartbeatRequest cr = SLUICE__CLIENT_HEARTBEAT_REQUEST__INIT;
    cr.client_id = 1;
    const struct {
        uint64_t client, cut, total;
    } steps[] = {{1, 0, 0}, {1, 2, 2}, {1, 2, 2}, {1, 1, 2}, {1, 3, 3}, {2, 4, 7}, {2, 4, 7}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        cr.client_id = steps[i].client;
        cr.copies_cut = steps[i].cut;
        observe_client_heartbeat(f->o, 1, &cr);
        assert_int_equal(sample(f, "sluice_client_copies_cut_total"), steps[i].total);
    }
    struct status_extra x;
    observe_status(f->o, &f->st, &x);
    assert_int_equal(observe_figures(f->o, &f->st, 0, &x), 0);
    assert_int_equal(x.ncuts, 1);
    assert_int_equal(x.cuts[0].job_id, 1);
    assert_int_equal(x.cuts[0].cut, 7);
    char *json;
    assert_int_equal(status_json_extra(&f->st, &x, &json), 0);
    assert_non_null(strstr(json, "\"bytes_per_second\":0.0,\"elements\":0,\"bytes\":0,"
                                 "\"worker_time_share\":null,\"copies_cut\":7,"
                                 "\"consumers\":[],\"why\":{\"input_bound\":null,"));
    free(json);
    /* A job no reader reported on has none. */
    struct status_extra none;
    observe_status(f->o, &f->st, &none);
    assert_int_equal(status_json_extra(&f->st, &none, &json), 0);
    assert_non_null(strstr(json, "\"copies_cut\":0,\"consumers\":[]"));
    free(json);
}

static void test_counters(void **state)
{
    struct fixture *f = *state;
    uint64_t seqs[] = {1, 2, 3, 4, 5};
    struct {
        enum st_update_type type;
        size_t n;
    } ups[] = {{ST_SPLITS_LEASED, 5}, {ST_SPLITS_FINISHED, 2}, {ST_SPLITS_RETURNED, 3},
               {ST_SPLITS_LEASED, 3}, {ST_SPLITS_FINISHED, 3}, {ST_TASK_FINISHED, 0}};
    for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++) {
        struct st_update u = {.type = ups[i].type};
        u.seqs.v = seqs;
        u.seqs.n = ups[i].n;
        observe_applied(f->o, &u);
    }
    assert_int_equal(sample(f, "sluice_splits_leased_total"), 8);
    assert_int_equal(sample(f, "sluice_splits_finished_total"), 5);
    assert_int_equal(sample(f, "sluice_splits_returned_total"), 3);
    assert_int_equal(sample(f, "sluice_updates_applied_total"), 6);
}

static void test_state_gauges(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_client(&f->st, 1);
    add_client(&f->st, 2);
    assert_int_equal(sample(f, "sluice_workers"), 1);
    assert_int_equal(sample(f, "sluice_clients"), 2);
    assert_int_equal(sample(f, "sluice_datasets"), 1);
    assert_int_equal(sample(f, "sluice_jobs"), 1);
    assert_int_equal(sample(f, "sluice_tasks"), 0);
    assert_int_equal(sample(f, "sluice_iterations{state=\"active\"}"), 1);
    assert_int_equal(sample(f, "sluice_iterations{state=\"finished\"}"), 0);
    assert_int_equal(sample(f, "sluice_iterations{state=\"garbage_collected\"}"), 0);
    assert_int_equal(sample(f, "sluice_iterations_failed"), 0);
    /* Nothing reported: the means are 0, not NaN. */
    assert_int_equal(sample(f, "sluice_client_wait_share"), 0);
    /* A task's pipeline failed: the iteration counts as failed (and still as active). */
    struct st_update u = {.type = ST_ITERATION_FAILED,
                          .id = 1,
                          .text = strdup("worker 127.0.0.1:1: map(x): unknown function")};
    assert_non_null(u.text);
    apply(&f->st, &u);
    assert_int_equal(sample(f, "sluice_iterations_failed"), 1);
    assert_int_equal(sample(f, "sluice_iterations{state=\"active\"}"), 1);
}

static void add_task(struct state *st, uint64_t id, uint64_t worker_id)
{
    struct st_update u = {.type = ST_TASK_CREATED, .id = id, .ref = 1, .ref2 = worker_id};
    apply(st, &u);
}

/* Served counters become rates over the window; the status document and the labelled gauges
 * show the same figures per job and per worker, and a removed task or worker takes its figures
 * and series with it. */
static void test_served_figures(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_worker(&f->st, 2);
    add_task(&f->st, 10, 1);
    add_task(&f->st, 11, 2);
    add_client(&f->st, 5);
    /* Task 10 serves 100 elements (20000 bytes) a second, task 11 50 (1000 bytes). */
    for (uint64_t t = 0; t <= 1000; t += 250) {
        struct observe_task_counts a = {t / 10, t * 20, 7, 700};
        struct observe_task_counts b = {t / 20, t, 3, 30};
        observe_task_report(f->o, 1, 10, 1, t, &a);
        observe_task_report(f->o, 2, 11, 1, t, &b);
    }
    struct status_extra x;
    observe_status(f->o, &f->st, &x);
    assert_int_equal(observe_figures(f->o, &f->st, 1000, &x), 0);
    assert_int_equal(x.ntasks, 2);
    assert_int_equal(x.tasks[0].task_id, 10);
    assert_true(x.tasks[0].elements_per_second == 100);
    assert_true(x.tasks[0].bytes_per_second == 20000);
    assert_int_equal(x.tasks[0].buffered, 7);
    assert_int_equal(x.tasks[1].buffered_bytes, 30);
    struct status_worker_seen seen[] = {{1, 120}};
    x.seen = seen;
    x.nseen = 1;
    char *json;
    assert_int_equal(status_json_extra(&f->st, &x, &json), 0);
    /* The elements and bytes served are the last counters reported: 100 and 20000 (task 10),
     * 50 and 1000 (task 11). */
    assert_non_null(strstr(json, "\"tasks\":[10],\"buffered\":7,\"buffered_bytes\":700,"
                                 "\"elements_per_second\":100.0,\"bytes_per_second\":20000.0,"
                                 "\"elements\":100,\"bytes\":20000,\"heartbeat_age_ms\":120}"));
    assert_non_null(strstr(json, "\"tasks\":[11],\"buffered\":3,\"buffered_bytes\":30,"
                                 "\"elements_per_second\":50.0,\"bytes_per_second\":1000.0,"
                                 "\"elements\":50,\"bytes\":1000,\"heartbeat_age_ms\":null}"));
    assert_non_null(strstr(json, "\"workers\":2,\"elements_per_second\":150.0,"
                                 "\"bytes_per_second\":21000.0,\"elements\":150,\"bytes\":21000"));
    free(json);

    assert_int_equal(sample_at(f, 1000, "sluice_job_clients{job=\"1\"}"), 1);
    assert_int_equal(sample_at(f, 1000, "sluice_job_tasks{job=\"1\"}"), 2);
    assert_int_equal(sample_at(f, 1000, "sluice_job_workers{job=\"1\"}"), 2);
    assert_int_equal(sample_at(f, 1000, "sluice_job_elements_per_second{job=\"1\"}"), 150);
    assert_int_equal(sample_at(f, 1000, "sluice_job_bytes_per_second{job=\"1\"}"), 21000);
    assert_int_equal(sample_at(f, 1000, "sluice_served_elements_per_second"), 150);
    assert_int_equal(sample_at(f, 1000, "sluice_buffered_elements"), 10);
    assert_int_equal(sample_at(f, 1000, "sluice_buffered_bytes"), 730);
    assert_int_equal(sample_at(f, 1000, "sluice_workers_tasks{worker=\"2\"}"), 1);
    assert_int_equal(sample_at(f, 1000, "sluice_workers_served_bytes_per_second{worker=\"1\"}"),
                     20000);
    /* The served counts the history takes its rates from: per iteration, per worker, in all. */
    struct history_served sv;
    observe_served(f->o, &f->st, &sv);
    assert_int_equal(sv.elements, 150);
    assert_int_equal(sv.bytes, 21000);
    assert_int_equal(sv.niterations, 1);
    assert_int_equal(sv.iterations[0].id, 1);
    assert_int_equal(sv.iterations[0].elements, 150);
    assert_int_equal(sv.iterations[0].bytes, 21000);
    assert_int_equal(sv.nworkers, 2);
    assert_int_equal(sv.workers[0].id, 1);
    assert_int_equal(sv.workers[0].elements, 100);
    assert_int_equal(sv.workers[1].id, 2);
    assert_int_equal(sv.workers[1].bytes, 1000);
    /* A window later with no progress: the rates are 0, the counts stay. */
    for (uint64_t t = 1250; t <= 2250; t += 250) {
        struct observe_task_counts a = {100, 20000, 0, 0};
        observe_task_report(f->o, 1, 10, 1, t, &a);
    }
    observe_served(f->o, &f->st, &sv);
    assert_int_equal(sv.elements, 150);
    assert_int_equal(sv.workers[0].elements, 100);
    assert_int_equal(sample_at(f, 2250, "sluice_workers_served_elements_per_second{worker=\"1\"}"),
                     0);
    /* Worker 2's task is removed, then the worker: their figures and series go. */
    struct st_update rt = {.type = ST_TASK_REMOVED, .id = 11};
    observe_applied(f->o, &rt);
    apply(&f->st, &rt);
    struct st_update rm = {.type = ST_WORKER_REMOVED, .id = 2};
    observe_applied(f->o, &rm);
    apply(&f->st, &rm);
    assert_true(isnan(sample_at(f, 2250, "sluice_workers_tasks{worker=\"2\"}")));
    assert_int_equal(sample_at(f, 2250, "sluice_workers_tasks{worker=\"1\"}"), 1);
    assert_int_equal(observe_figures(f->o, &f->st, 2250, &x), 0);
    assert_int_equal(x.ntasks, 1);
    /* Worker 2's counts went with it; the iteration's and the cluster's keep what it served. A
     * task whose counters went back (its worker came back) counts from 0 again: 30 more. */
    struct observe_task_counts back = {30, 600, 0, 0};
    observe_task_report(f->o, 1, 10, 1, 2500, &back);
    observe_served(f->o, &f->st, &sv);
    assert_int_equal(sv.nworkers, 1);
    assert_int_equal(sv.workers[0].id, 1);
    assert_int_equal(sv.workers[0].elements, 130);
    assert_int_equal(sv.workers[0].bytes, 20600);
    assert_int_equal(sv.iterations[0].elements, 180);
    assert_int_equal(sv.elements, 180);
    assert_int_equal(sv.bytes, 21600);
    /* A collected iteration's counts go. */
    struct st_update gc = {.type = ST_ITERATION_GC, .id = 1};
    observe_applied(f->o, &gc);
    observe_served(f->o, &f->st, &sv);
    assert_int_equal(sv.niterations, 0);
    assert_int_equal(sv.elements, 180);
}

/* The figures of every job and worker at once equal those one by one: three jobs, tasks on
 * seven workers (not every worker has a task of every job), some finished, some without figures;
 * and the counts alone without figures. */
static void test_all_figures(void **state)
{
    struct fixture *f = *state;
    /* Jobs 2 and 3 with iterations 2 and 3 (job 1, iteration 1 come with the fixture). */
    for (uint64_t j = 2; j <= 3; j++) {
        struct st_update u = {.type = ST_JOB_CREATED, .id = j};
        snprintf(u.name, sizeof u.name, "j%" PRIu64, j);
        snprintf(u.name2, sizeof u.name2, "1");
        apply(&f->st, &u);
        struct st_update it = {.type = ST_ITERATION_CREATED, .id = j, .ref = j, .ref2 = 1};
        apply(&f->st, &it);
    }
    for (uint64_t w = 1; w <= 7; w++)
        add_worker(&f->st, w * 3);
    uint64_t id = 100;
    for (uint64_t w = 1; w <= 7; w++) {
        for (uint64_t it = 1; it <= 3; it++) {
            if ((w + it) % 4 == 0)
                continue; /* not every worker has a task of every job */
            struct st_update u = {.type = ST_TASK_CREATED, .id = id, .ref = it, .ref2 = w * 3};
            apply(&f->st, &u);
            if (id % 3 == 0) {
                struct st_update fin = {.type = ST_TASK_FINISHED, .id = id};
                apply(&f->st, &fin);
            }
            if (id % 5 != 0) {
                for (uint64_t t = 0; t <= 1000; t += 500) {
                    struct observe_task_counts c = {t * id / 100, t * id, id % 7, id * 11};
                    observe_task_report(f->o, w * 3, id, it, t, &c);
                }
            }
            id += 1 + id % 2;
        }
    }
    struct status_extra x;
    observe_status(f->o, &f->st, &x);
    assert_int_equal(observe_figures(f->o, &f->st, 1000, &x), 0);
    assert_true(x.ntasks > 0);
    struct status_figures jobs[3], workers[7], one;
    assert_int_equal(status_all_figures(&f->st, &x, jobs, workers), 0);
    assert_int_equal(f->st.njobs, 3);
    assert_int_equal(f->st.nworkers, 7);
    for (size_t i = 0; i < 3; i++) {
        status_job_figures(&f->st, &x, &f->st.jobs[i], &one);
        assert_memory_equal(&one, &jobs[i], sizeof one);
        assert_true(one.tasks > 0);
    }
    for (size_t i = 0; i < 7; i++) {
        status_worker_figures(&f->st, &x, &f->st.workers[i], &one);
        assert_memory_equal(&one, &workers[i], sizeof one);
    }
    /* Without figures: the counts only. */
    assert_int_equal(status_all_figures(&f->st, NULL, jobs, workers), 0);
    status_job_figures(&f->st, NULL, &f->st.jobs[1], &one);
    assert_memory_equal(&one, &jobs[1], sizeof one);
    assert_true(jobs[1].elements_per_second == 0 && jobs[1].tasks > 0);
}

/* Tasks are reported in any order (a large cluster reports them in the order of its workers'
 * heartbeats): the figures come out sorted by task id with each task's own numbers, through
 * removals of single tasks and of workers with their tasks. */
static void test_task_figures_any_order(void **state)
{
    struct fixture *f = *state;
    enum { TASKS = 400 };
    /* Task 1000 + t runs on worker t (one task per worker in an iteration). */
    for (uint64_t t = 1; t <= TASKS; t++) {
        add_worker(&f->st, t);
        add_task(&f->st, 1000 + t, t);
    }
    /* Task t buffers t elements; reported in a scrambled order (a stride coprime to TASKS). */
    for (uint64_t i = 0; i < TASKS; i++) {
        uint64_t t = 1 + (i * 7) % TASKS;
        struct observe_task_counts c = {0, 0, t, 10 * t};
        observe_task_report(f->o, t, 1000 + t, 1, 0, &c);
    }
    struct status_extra x;
    observe_status(f->o, &f->st, &x);
    assert_int_equal(observe_figures(f->o, &f->st, 0, &x), 0);
    assert_int_equal(x.ntasks, TASKS);
    for (size_t i = 0; i < x.ntasks; i++) {
        assert_int_equal(x.tasks[i].task_id, 1001 + i);
        assert_int_equal(x.tasks[i].buffered, i + 1);
        assert_int_equal(x.tasks[i].buffered_bytes, 10 * (i + 1));
    }
    /* Every tenth task goes; then every fourth worker (t % 4 == 1), whose task the observer
     * forgets with it (the state removes the task first). */
    for (uint64_t t = 1; t <= TASKS; t++) {
        if (t % 10 == 0 || t % 4 == 1) {
            struct st_update rt = {.type = ST_TASK_REMOVED, .id = 1000 + t};
            if (t % 10 == 0)
                observe_applied(f->o, &rt);
            apply(&f->st, &rt);
        }
        if (t % 4 == 1) {
            struct st_update rm = {.type = ST_WORKER_REMOVED, .id = t};
            observe_applied(f->o, &rm);
            apply(&f->st, &rm);
        }
    }
    /* A report for a task never made is not kept. */
    struct observe_task_counts late = {0, 0, 99, 99};
    observe_task_report(f->o, 1, 9999, 1, 0, &late);
    assert_int_equal(observe_figures(f->o, &f->st, 0, &x), 0);
    size_t n = 0;
    for (uint64_t t = 1; t <= TASKS; t++) {
        if (t % 10 == 0 || t % 4 == 1)
            continue;
        assert_true(n < x.ntasks);
        assert_int_equal(x.tasks[n].task_id, 1000 + t);
        assert_int_equal(x.tasks[n].buffered, t);
        n++;
    }
    assert_int_equal(x.ntasks, n);
    /* Reported again in reverse, every remaining task takes its new figures. */
    for (uint64_t t = TASKS; t >= 1; t--) {
        if (t % 10 == 0 || t % 4 == 1)
            continue;
        struct observe_task_counts c = {0, 0, 2 * t, 0};
        observe_task_report(f->o, t, 1000 + t, 1, 10, &c);
    }
    assert_int_equal(observe_figures(f->o, &f->st, 10, &x), 0);
    assert_int_equal(x.ntasks, n);
    for (size_t i = 0; i < x.ntasks; i++) {
        assert_true(i == 0 || x.tasks[i - 1].task_id < x.tasks[i].task_id);
        assert_int_equal(x.tasks[i].buffered, 2 * (x.tasks[i].task_id - 1000));
    }
    /* A task added after that (a new worker's) is listed too, in its place. */
    add_worker(&f->st, TASKS + 1);
    add_task(&f->st, 2000, TASKS + 1);
    struct observe_task_counts c = {0, 0, 5, 0};
    observe_task_report(f->o, TASKS + 1, 2000, 1, 20, &c);
    assert_int_equal(observe_figures(f->o, &f->st, 20, &x), 0);
    assert_int_equal(x.ntasks, n + 1);
    for (size_t i = 1; i < x.ntasks; i++)
        assert_true(x.tasks[i - 1].task_id < x.tasks[i].task_id);
    assert_int_equal(x.tasks[n].task_id, 2000);
    assert_int_equal(x.tasks[n].buffered, 5);
}

static void test_journal_histogram(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(sample(f, "sluice_journal_bytes_total"), 0);
    observe_journal_commit(f->o, 0.00005, 120);
    observe_journal_commit(f->o, 0.003, 0);
    observe_journal_commit(f->o, 100, 4000);
    assert_int_equal(sample(f, "sluice_journal_bytes_total"), 4120);
    assert_int_equal(sample(f, "sluice_journal_commit_seconds_bucket{le=\"0.0001\"}"), 1);
    assert_int_equal(sample(f, "sluice_journal_commit_seconds_bucket{le=\"0.0032\"}"), 2);
    assert_int_equal(sample(f, "sluice_journal_commit_seconds_bucket{le=\"6.5536\"}"), 2);
    assert_int_equal(sample(f, "sluice_journal_commit_seconds_bucket{le=\"+Inf\"}"), 3);
    assert_int_equal(sample(f, "sluice_journal_commit_seconds_count"), 3);
    assert_true(fabs(sample(f, "sluice_journal_commit_seconds_sum") - 100.00305) < 1e-9);
}

static void add_labelled_worker(struct state *st, uint64_t id, const char *labels)
{
    struct st_update u = {.type = ST_WORKER_REGISTERED, .id = id, .incarnation = id};
    snprintf(u.address, sizeof u.address, "w%" PRIu64 ":1", id);
    u.labels = strdup(labels);
    apply(st, &u);
}

/* The recommendation per pool: a reader of a job without a selector is split over pools a and
 * b (one worker each); both are busy and the reader starves, so each pool grows by one step;
 * the gauges and the status say so, and a pool whose last worker left loses its series. */
static void test_pools_window(void **state)
{
    struct fixture *f = *state;
    add_labelled_worker(&f->st, 1, "pool=a");
    add_labelled_worker(&f->st, 2, "pool=b,zone=x");
    add_client(&f->st, 1);
    report_worker(f, 1, 500, 0);
    report_worker(f, 2, 500, 0);
    observe_client_report(f->o, 1, 500, 0.99);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_int_equal(w.decision.reason, AUTOSCALE_UP);
    assert_int_equal(w.decision.workers, 3);
    assert_int_equal(sample(f, "sluice_autoscale_recommended_workers{pool=\"a\"}"), 2);
    assert_int_equal(sample(f, "sluice_autoscale_recommended_workers{pool=\"b\"}"), 2);
    assert_int_equal(sample(f, "sluice_recommended_workers"), 3);
    struct status_extra x;
    observe_status(f->o, &f->st, &x);
    assert_int_equal(x.npools, 2);
    assert_string_equal(x.pool_label, "pool");
    assert_string_equal(x.pools[0].name, "a");
    assert_true(fabs(x.pools[0].clients - 0.5) < 1e-12);
    /* Half the reader's demand, 500 / (1 - 0.9) / 2, on each pool. */
    assert_true(fabs(x.pools[1].decision.demand - 2500) < 1e-6);
    char *json;
    assert_int_equal(status_json_extra(&f->st, &x, &json), 0);
    assert_non_null(strstr(json, "\"autoscale\":{\"pool_label\":\"pool\",\"pools\":[{\"pool\":"
                                 "\"a\",\"workers\":1,\"recommended_workers\":2,\"reason\":"
                                 "\"up\",\"clients\":0.5,"));
    free(json);
    /* Worker 2 leaves: pool b is gone, pool a has the whole reader. */
    struct st_update rm = {.type = ST_WORKER_REMOVED, .id = 2};
    apply(&f->st, &rm);
    report_worker(f, 1, 500, 0);
    observe_client_report(f->o, 1, 500, 0.99);
    close_at(f, 2 * WINDOW_MS);
    assert_true(isnan(sample(f, "sluice_autoscale_recommended_workers{pool=\"b\"}")));
    /* Its previous answer was 2: up by one step from 1, and no further. */
    assert_int_equal(sample(f, "sluice_autoscale_recommended_workers{pool=\"a\"}"), 2);
    observe_status(f->o, &f->st, &x);
    assert_int_equal(x.npools, 1);
    assert_true(fabs(x.pools[0].clients - 1) < 1e-12);
}

static void test_status_extra(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    add_worker(&f->st, 2);
    struct status_extra x;
    observe_status(f->o, &f->st, &x);
    assert_int_equal(x.recommended_workers, 2);
    assert_int_equal(x.worker_timeout_ms, 2000);
    assert_int_equal(x.client_timeout_ms, 5000);
    assert_int_equal(x.job_gc_timeout_ms, 60000);
    assert_int_equal(x.worker_heartbeat_ms, 400);
    assert_int_equal(x.client_heartbeat_ms, 1000);
    assert_int_equal(x.autoscale_window_ms, WINDOW_MS);
    char *json;
    assert_int_equal(status_json_extra(&f->st, &x, &json), 0);
    assert_non_null(strstr(json, "\"recommended_workers\":2,\"config\":{\"worker_timeout_ms\":2000,"
                                 "\"client_timeout_ms\":5000,\"job_gc_timeout_ms\":60000,"
                                 "\"worker_heartbeat_ms\":400,\"client_heartbeat_ms\":1000,"
                                 "\"client_disconnect_grace_ms\":5000,"
                                 "\"worker_disconnect_grace_ms\":2000,"
                                 "\"autoscale_window_ms\":1000},\"autoscale\":{\"pool_label\":"
                                 "\"pool\",\"pools\":[]},\"workers\":["));
    free(json);
    /* Without the extra, the document is what it was. */
    assert_int_equal(status_json(&f->st, &json), 0);
    assert_null(strstr(json, "recommended_workers"));
    assert_null(strstr(json, "config"));
    free(json);
}

/* Nobody reads: the cluster shrinks a bounded step per window down to one worker, and stops
 * shrinking once a client registers. */
static void test_no_consumers(void **state)
{
    struct fixture *f = *state;
    for (uint64_t id = 1; id <= 8; id++)
        add_worker(&f->st, id);
    struct observe_window w = close_at(f, WINDOW_MS);
    assert_int_equal(w.decision.reason, AUTOSCALE_DOWN);
    assert_int_equal(w.decision.workers, 6); /* 8 - floor(0.25 * 8) */
    assert_int_equal(sample(f, "sluice_recommended_workers"), 6);
    add_client(&f->st, 1);
    w = close_at(f, 2 * WINDOW_MS);
    assert_int_equal(w.decision.reason, AUTOSCALE_NO_DATA);
    assert_int_equal(w.decision.workers, 8);
}

/* observe_tick runs the window only when due. */
static void test_tick(void **state)
{
    struct fixture *f = *state;
    add_worker(&f->st, 1);
    observe_tick(f->o, &f->st, WINDOW_MS / 2);
    assert_int_equal(sample(f, "sluice_autoscale_windows_total{reason=\"no_data\"}"), 0);
    observe_tick(f->o, &f->st, WINDOW_MS);
    assert_int_equal(sample(f, "sluice_autoscale_windows_total{reason=\"no_data\"}"), 1);
    observe_tick(f->o, &f->st, WINDOW_MS + 1);
    assert_int_equal(sample(f, "sluice_autoscale_windows_total{reason=\"no_data\"}"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_window_timing, setup, teardown),
        cmocka_unit_test(test_default_window),
        cmocka_unit_test_setup_teardown(test_recommended_before_first_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rising, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_consumers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_falling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_means, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_reports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_draining, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heartbeat_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copies_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_gauges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_served_figures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_figures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_task_figures_any_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_journal_histogram, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pools_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_extra, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tick, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
