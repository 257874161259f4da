/* Why training waits (sluice status --why, docs/operations.md "Why is training waiting?"): the
 * attribution the dispatcher makes from the readers' exposed waits and the workers' stage times.
 *
 *   - a reader that never sleeps, over a pipeline with a slow map(sleep_us), is reported
 *     input-bound, and that map is named as where the worker's time goes;
 *   - a reader that sleeps between its get-next calls, over a fast pipeline, is reported not
 *     input-bound;
 *   - of three workers serving one job (a cluster of their own), the one stopped (SIGSTOP) four
 *     fifths of the time is named the slowest, below 0.6 of the median (it runs at about 0.2;
 *     the reader keeps 32 requests in flight, so those the stopped worker holds do not starve
 *     the others).
 *
 * Each reader runs on a thread of its own while the test asks `sluice status --why JOB --json`
 * every 250 ms until the verdict it expects, bounded by WAIT_MS. The verdicts do not hang on a
 * close figure: the never-sleeping reader waits nearly all the time (the map sleeps 2 ms per
 * element, the reader does nothing), the sleeping one nearly never once its start is behind it
 * (the worker fills its buffer far faster than 50 elements/s), and the stopped worker runs a
 * fifth of the time. STALL_DEBUG=1 in the environment prints each attribution asked for. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "lib/cluster.h"

#include "sluice/sluice.h"

#define WAIT_MS 60000

/* A reader on a thread: reads until told to stop, sleeping sleep_ms between calls. */
struct reader {
    struct sluice_client *client;
    const char *pipeline, *job;
    enum sluice_mode mode;
    long sleep_ms;
    uint32_t outstanding; /* max_outstanding_requests (0: the default) */
    atomic_int stop;
    atomic_llong read;
    int rc;
    char err[SLUICE_ERRMSG_SIZE];
    pthread_t thread;
};

static void *read_loop(void *arg)
{
    struct reader *r = arg;
    struct sluice_read_options ro = {.pipeline = r->pipeline,
                                     .job_name = r->job,
                                     .mode = r->mode,
                                     .max_outstanding_requests = r->outstanding};
    struct sluice_iterator *it = NULL;
    r->rc = sluice_iterator_open(r->client, &ro, &it, r->err, sizeof r->err);
    while (r->rc == 0 && !atomic_load(&r->stop)) {
        const struct sluice_element *e;
        int rc = sluice_iterator_next(it, &e, 20000, r->err, sizeof r->err);
        if (rc != 1) {
            r->rc = rc == 0 ? -1 : rc;
            if (rc == 0)
                snprintf(r->err, sizeof r->err, "the read ended");
            break;
        }
        atomic_fetch_add(&r->read, 1);
        if (r->sleep_ms)
            sleep_ms(r->sleep_ms);
    }
    if (it)
        sluice_iterator_close(it);
    return NULL;
}

static void reader_start(struct reader *r, struct cluster *c, const char *pipeline, const char *job,
                         enum sluice_mode mode, long sleep_ms, uint32_t outstanding)
{
    memset(r, 0, sizeof *r);
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_client_options co = {.dispatcher = c->dispatcher.addr, .timeout_ms = WAIT_MS};
    if (sluice_client_open(&co, &r->client, err, sizeof err) != 0)
        fail_msg("client: %s", err);
    r->pipeline = pipeline;
    r->job = job;
    r->mode = mode;
    r->sleep_ms = sleep_ms;
    r->outstanding = outstanding;
    assert_int_equal(pthread_create(&r->thread, NULL, read_loop, r), 0);
}

static void reader_stop(struct reader *r)
{
    atomic_store(&r->stop, 1);
    pthread_join(r->thread, NULL);
    sluice_client_close(r->client);
    if (r->rc != 0)
        fail_msg("reader of job %s: %s (%d)", r->job, r->err, r->rc);
}

/* The job's "why" object (a new reference), or NULL when the status has none yet. */
static json_t *why_of(struct cluster *c, const char *job)
{
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "status", "--why", job, "--json", NULL);
    json_t *why = rc == 0 && out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    free(err);
    return why;
}

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* Asks for the job's attribution every 250 ms until done(why) holds, at most WAIT_MS; fails the
 * test with the last text otherwise. Returns the last "why" (a new reference). */
static json_t *wait_why(struct cluster *c, const char *job, bool (*done)(const json_t *),
                        const char *what)
{
    long long deadline = now_ms() + WAIT_MS;
    json_t *why = NULL;
    for (;;) {
        json_decref(why);
        why = why_of(c, job);
        if (getenv("STALL_DEBUG"))
            fprintf(stderr, "%lld %s\n", now_ms() % 100000, why ? str(why, "text") : "-");
        if (why && done(why))
            return why;
        if (now_ms() > deadline)
            fail_msg("job %s: no %s within %d ms; last: %s", job, what, WAIT_MS,
                     why ? str(why, "text") : "(no attribution)");
        sleep_ms(250);
    }
}

static bool slow_map_named(const json_t *why)
{
    return json_is_true(json_object_get(why, "input_bound")) &&
           strcmp(str(why, "dominant_stage"), "map(sleep_us)#1") == 0;
}

static void test_slow_stage_input_bound(void **state)
{
    struct cluster *c = *state;
    struct reader r;
    reader_start(&r, c, "range(100000000) | map(sleep_us, 2000)", "stall_slow",
                 SLUICE_PARALLEL_EPOCHS, 0, 0);
    json_t *why = wait_why(c, "stall_slow", slow_map_named, "input-bound verdict naming the map");
    const char *text = str(why, "text");
    printf("    %s\n", text);
    /* The paragraph: the verdict first, the stage last. */
    assert_non_null(strstr(text, " (stall_slow) is input-bound: trainers wait "));
    assert_non_null(strstr(text, "; its time goes to map(sleep_us)#1 ("));
    assert_true(json_real_value(json_object_get(why, "wait_share")) >= 0.10);
    json_decref(why);
    reader_stop(&r);
    assert_true(atomic_load(&r.read) > 0);
}

static bool not_input_bound(const json_t *why)
{
    return json_is_false(json_object_get(why, "input_bound"));
}

static void test_sleeping_reader_not_input_bound(void **state)
{
    struct cluster *c = *state;
    struct reader r;
    reader_start(&r, c, "range(100000000) | map(mul, 3)", "stall_sleepy", SLUICE_PARALLEL_EPOCHS,
                 20, 0);
    json_t *why = wait_why(c, "stall_sleepy", not_input_bound, "not-input-bound verdict");
    const char *text = str(why, "text");
    printf("    %s\n", text);
    assert_non_null(strstr(text, " (stall_sleepy) is not input-bound: trainers wait "));
    assert_true(json_real_value(json_object_get(why, "wait_share")) < 0.10);
    json_decref(why);
    reader_stop(&r);
}

/* The job's text status lists the reader as a consumer with its wait, and the dispatcher
 * exports it. */
static void test_consumers_listed(void **state)
{
    struct cluster *c = *state;
    struct reader r;
    reader_start(&r, c, "range(100000000) | map(sleep_us, 2000)", "stall_listed",
                 SLUICE_PARALLEL_EPOCHS, 0, 0);
    json_t *why = wait_why(c, "stall_listed", slow_map_named, "input-bound verdict");
    json_decref(why);
    char *out = cluster_run(c, 0, NULL, "status", NULL);
    const char *t = strstr(out, "\nconsumers (");
    if (!t || !strstr(t, "  JOB  CONSUMER  WAITED  WAIT_1M  ELEM/S\n"))
        fail_msg("no consumers table in:\n%s", out);
    free(out);
    reader_stop(&r);
}

/* Stops worker i for stop_ms of every period_ms until told to stop. */
struct burster {
    pid_t pid;
    atomic_int stop;
    pthread_t thread;
};

static void *burst_loop(void *arg)
{
    struct burster *b = arg;
    while (!atomic_load(&b->stop)) {
        kill(b->pid, SIGSTOP);
        sleep_ms(400);
        kill(b->pid, SIGCONT);
        sleep_ms(100);
    }
    kill(b->pid, SIGCONT);
    return NULL;
}

static const char *slow_address;

/* The stopped worker named, well below the median: it runs a fifth of the time, and the reader
 * has requests enough in flight that the ones it holds do not slow the others down. */
static bool slow_worker_named(const json_t *why)
{
    return strcmp(str(why, "slowest_worker"), slow_address) == 0 &&
           json_real_value(json_object_get(why, "worker_rate_vs_median")) < 0.6;
}

static const char *const dispatcher_args[] = {"--autoscale-window-ms", "3000", NULL};

/* On a cluster of its own, so that the three workers start equal (the group's first worker
 * still holds the tasks of the jobs read before). */
static void test_slowest_worker_named(void **state)
{
    (void)state;
    struct cluster *c = cluster_new(dispatcher_args, NULL, 0, 3);
    assert_non_null(c);
    cluster_wait_registered(c);
    struct reader r;
    reader_start(&r, c, "range(100000000) | map(sleep_us, 1000)", "stall_three",
                 SLUICE_DISTRIBUTED_EPOCH, 0, 32);
    json_decref(cluster_wait_job(c, "stall_three", 3, WAIT_MS));
    struct burster b = {.pid = c->workers[2].pid};
    slow_address = c->workers[2].addr;
    assert_int_equal(pthread_create(&b.thread, NULL, burst_loop, &b), 0);
    /* One window (--autoscale-window-ms) of bursts first, so the rates compared are the bursts'
     * and not those of the tasks' start. */
    sleep_ms(3000);
    json_t *why = wait_why(c, "stall_three", slow_worker_named, "slowest worker named");
    const char *text = str(why, "text");
    printf("    %s\n", text);
    char want[256];
    snprintf(want, sizeof want, "; worker %s runs at ", slow_address);
    assert_non_null(strstr(text, want));
    assert_true(json_real_value(json_object_get(why, "worker_rate_vs_median")) < 0.6);
    json_decref(why);
    atomic_store(&b.stop, 1);
    pthread_join(b.thread, NULL);
    reader_stop(&r);
    assert_int_equal(cluster_free(c), 0);
}

static int setup(void **state)
{
    return (*state = cluster_new(dispatcher_args, NULL, 0, 1)) ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_stage_input_bound),
        cmocka_unit_test(test_sleeping_reader_not_input_bound),
        cmocka_unit_test(test_consumers_listed),
        cmocka_unit_test(test_slowest_worker_named),
    };
    return cmocka_run_group_tests(tests, setup, cluster_teardown);
}
