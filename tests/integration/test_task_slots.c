/* Task slots and minimums end to end (docs/operations.md "Task slots"): two workers with
 * --task-slots 1; a job with --min-workers 2 takes both; a heavier job that arrives takes neither
 * (a task is never taken away), waits with its reason in the status and on its reader's stderr,
 * keeps waiting with the same reason through a dispatcher restart, and starts when the first job
 * ends; both read every element exactly once. Then, with workers without slots, a third job
 * that joins two saturating weighted jobs gets its first element within one worker heartbeat
 * interval (in practice milliseconds). Every wait is bounded. */
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

#include "sluice/sluice.h"

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/tmp.h"

/* The readers a test starts: stopped by the teardown when a failed assertion left them running. */
static struct proc readers[3];

static int teardown(void **state)
{
    for (int i = 0; i < 3; i++)
        proc_stop(&readers[i], SIGTERM, 5000);
    int rc = cluster_teardown(state);
    tmp_cleanup();
    return rc;
}

/* The status entry of the job named name, or NULL; borrowed from doc. */
static json_t *job_named(json_t *doc, const char *name)
{
    json_t *arr = json_object_get(doc, "jobs"), *e;
    size_t i;
    json_array_foreach(arr, i, e)
    {
        const char *v = json_string_value(json_object_get(e, "name"));
        if (v && strcmp(v, name) == 0)
            return e;
    }
    return NULL;
}

/* The job's "waiting" once it equals want, checking every 50 ms for up to timeout_ms; fails the
 * test with the last value otherwise. */
static void wait_reason(struct cluster *c, const char *name, const char *want, int timeout_ms)
{
    long long t0 = now_ms();
    char last[512] = "(none)";
    for (;;) {
        json_t *doc = cluster_status(c);
        json_t *job = job_named(doc, name);
        const char *why = job ? json_string_value(json_object_get(job, "waiting")) : NULL;
        if (why)
            snprintf(last, sizeof last, "%s", why);
        bool ok = why && strcmp(why, want) == 0;
        json_decref(doc);
        if (ok)
            return;
        if (now_ms() - t0 > timeout_ms)
            fail_msg("job '%s': waiting is '%s', not '%s'", name, last, want);
        sleep_ms(50);
    }
}

/* The number of tasks of the job named name in the status (-1: no such job). */
static long ntasks(struct cluster *c, const char *name)
{
    json_t *doc = cluster_status(c);
    json_t *job = job_named(doc, name);
    long n = job ? (long)json_array_size(json_object_get(job, "tasks")) : -1;
    json_decref(doc);
    return n;
}

static void expect_every_element_once(struct proc *r, long n, const char *what)
{
    char *out = proc_read_all(r, 90000);
    assert_non_null(out);
    assert_int_equal(proc_wait(r, 10000), 0);
    struct tally t = tally_range(out, n);
    print_tally(what, t);
    assert_int_equal(t.lines, n);
    assert_int_equal(t.lost + t.duplicated + t.unexpected, 0);
    free(out);
}

/* One thread and one task slot each: the light job's 24,000 elements of 500 us take about 6 s
 * on the two workers, long enough for the heavy job to arrive and the dispatcher to restart. */
static const char *const slot_workers[] = {"--threads", "1", "--task-slots", "1", NULL};
#define LIGHT_ELEMS 24000
#define LIGHT "range(24000) | map(wait_us, 500)"
#define HEAVY_ELEMS 2000

static int setup_slots(void **state)
{
    return (*state = cluster_new(NULL, slot_workers, 1, 2)) ? 0 : -1;
}

static void test_min_workers_keep_their_slots(void **state)
{
    struct cluster *c = *state;
    cluster_wait_registered(c);
    json_t *doc = cluster_status(c);
    json_t *w0 = json_array_get(json_object_get(doc, "workers"), 0);
    assert_int_equal(json_integer_value(json_object_get(w0, "task_slots")), 1);
    json_decref(doc);

    struct proc *light = &readers[0], *heavy = &readers[1];
    assert_int_equal(cluster_cli_spawn(c, light, "read", LIGHT, "--mode", "distributed_epoch",
                                       "--job-name", "light", "--min-workers", "2", NULL),
                     0);
    json_t *jl = cluster_wait_job(c, "light", 2, 20000);
    json_decref(jl);
    assert_int_equal(cluster_cli_spawn(c, heavy, "read", "range(2000)", "--mode",
                                       "distributed_epoch", "--job-name", "heavy", "--weight", "5",
                                       NULL),
                     0);
    const char *why = "waiting for a worker: 2 of 2 task slots taken by jobs that started earlier";
    wait_reason(c, "heavy", why, 20000);
    /* The light job keeps both workers, the heavy one has none; the light one, at its minimum,
     * does not wait. */
    assert_int_equal(ntasks(c, "light"), 2);
    assert_int_equal(ntasks(c, "heavy"), 0);
    doc = cluster_status(c);
    assert_null(json_object_get(job_named(doc, "light"), "waiting"));
    json_decref(doc);
    /* Its reader says why (its first note comes after 2 s without progress). */
    doc = cluster_status(c);
    long long heavy_id = json_integer_value(json_object_get(job_named(doc, "heavy"), "id"));
    json_decref(doc);
    char want[512];
    snprintf(want, sizeof want, "job %lld: %s (still waiting; --timeout-ms to give up)", heavy_id,
             why);
    assert_true(proc_wait_log(heavy, want, 20000) >= 0);

    /* The reason survives a restart of the dispatcher: slots and tasks are journaled. */
    assert_int_equal(cluster_restart_dispatcher(c, SIGTERM), 0);
    wait_reason(c, "heavy", why, 10000);
    assert_int_equal(ntasks(c, "light"), 2);
    assert_int_equal(proc_wait(light, 0), -2); /* the light job was still reading */

    /* The light job ends: the heavy one gets the freed slots and reads everything. */
    expect_every_element_once(light, LIGHT_ELEMS, "light (min 2) read");
    expect_every_element_once(heavy, HEAVY_ELEMS, "heavy (weight 5) read");
}

/* Workers without slots, one thread each, heartbeating every HB_MS. */
#define HB_MS 1000
static const char *const hb_workers[] = {"--threads", "1", "--heartbeat-ms", "1000", NULL};
#define SATURATING "range(100000000) | map(wait_us, 500)"

static int setup_hb(void **state)
{
    return (*state = cluster_new(NULL, hb_workers, 0, 3)) ? 0 : -1;
}

/* Milliseconds from opening a distributed_epoch read of SATURATING as job name to its first
 * element. */
static long long first_element_ms(struct sluice_client *client, const char *name)
{
    char msg[SLUICE_ERRMSG_SIZE];
    struct sluice_read_options ro = {
        .pipeline = SATURATING, .mode = SLUICE_DISTRIBUTED_EPOCH, .job_name = name};
    struct sluice_iterator *it = NULL;
    long long t0 = now_ms();
    if (sluice_iterator_open(client, &ro, &it, msg, sizeof msg) != 0)
        fail_msg("%s: %s", name, msg);
    const struct sluice_element *elem;
    if (sluice_iterator_next(it, &elem, 30000, msg, sizeof msg) != 1)
        fail_msg("%s: no first element: %s", name, msg);
    long long ms = now_ms() - t0;
    sluice_iterator_close(it);
    return ms;
}

static void test_third_job_starts_within_a_heartbeat(void **state)
{
    struct cluster *c = *state;
    cluster_wait_registered(c);
    struct proc *heavy = &readers[0], *light = &readers[1];
    assert_int_equal(cluster_cli_spawn(c, heavy, "read", SATURATING, "--mode", "distributed_epoch",
                                       "--job-name", "heavy", "--weight", "2", "--format", "count",
                                       NULL),
                     0);
    assert_int_equal(cluster_cli_spawn(c, light, "read", SATURATING, "--mode", "distributed_epoch",
                                       "--job-name", "light", "--format", "count", NULL),
                     0);
    json_decref(cluster_wait_job(c, "heavy", 3, 20000));
    json_decref(cluster_wait_job(c, "light", 3, 20000));
    sleep_ms(1500); /* both keep the workers' threads busy */
    struct sluice_client *client = NULL;
    char msg[SLUICE_ERRMSG_SIZE];
    struct sluice_client_options co = {.dispatcher = c->dispatcher.addr, .timeout_ms = 30000};
    assert_int_equal(sluice_client_open(&co, &client, msg, sizeof msg), 0);
    long long worst = 0;
    for (int round = 0; round < 5; round++) {
        char name[16];
        snprintf(name, sizeof name, "third%d", round);
        long long ms = first_element_ms(client, name);
        printf("    %s: first element after %lld ms (worker heartbeat %d ms)\n", name, ms, HB_MS);
        worst = ms > worst ? ms : worst;
        /* The weighted jobs still read. */
        assert_int_equal(proc_wait(heavy, 0), -2);
        assert_int_equal(proc_wait(light, 0), -2);
    }
    sluice_client_close(client);
    /* No slack needed: a worker asked for a task it does not know yet heartbeats at once
     * (worker/serve.c), so the task arrives one dispatcher round trip after the reader's first
     * fetch, not with the next periodic heartbeat; and a newly runnable task starts at the
     * virtual time of the task picked last (worker/fair.h), so it waits for no backlog. */
    assert_true(worst <= HB_MS);
    proc_stop(heavy, SIGTERM, 5000);
    proc_stop(light, SIGTERM, 5000);
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

static void test_bad_slots(void **state)
{
    (void)state;
    char *worker = (char *)bin_path("sluice-worker");
    {
        char *argv[] = {worker, "--dispatcher", "127.0.0.1:1", "--task-slots", "-1", NULL};
        expect_usage(argv, "sluice-worker: --task-slots: expected a number from 0 to 100000, got "
                           "'-1'\nTry 'sluice-worker --help'.\n");
    }
    {
        char *argv[] = {worker, "--dispatcher", "127.0.0.1:1", "--task-slots", "100001", NULL};
        expect_usage(argv, "sluice-worker: --task-slots: expected a number from 0 to 100000, got "
                           "'100001'\nTry 'sluice-worker --help'.\n");
    }
    {
        char *argv[] = {worker, "--dispatcher", "127.0.0.1:1", "--max-tasks",
                        "4",    "--task-slots", "5",           NULL};
        expect_usage(argv, "sluice-worker: --task-slots 5 is above --max-tasks 4: the worker "
                           "would refuse the tasks past it\nTry 'sluice-worker --help'.\n");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_slots),
        cmocka_unit_test_setup_teardown(test_third_job_starts_within_a_heartbeat, setup_hb,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_min_workers_keep_their_slots, setup_slots, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
