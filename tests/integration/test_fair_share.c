/* Weighted fair sharing of the workers' threads end to end (docs/operations.md "Sharing the
 * workers"): two saturating jobs (every element sleeps 2 ms on a worker thread) weighted 2:1
 * share three workers of one thread each; over a window while both run, the workers' per-job
 * thread time (sluice_worker_job_cpu_seconds_total{job}) is about 2:1 and the dispatcher's
 * worker_time_share agrees; the same holds over a second window after the dispatcher restarted
 * (the weights are journaled); each job still reads every element exactly once. Without the
 * weights the threads are shared about 1:1, which the tolerance below rejects. Every wait is
 * bounded. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/scrape.h"
#include "lib/tmp.h"

#define NWORKERS 3
/* Elements per job: at 2 ms each, the heavy job's two thirds of 3 threads take 20 s. Few,
 * costly elements keep the readers' share of the machine small: a reader starved of CPU by a
 * loaded host lets its job's buffer fill, its producer parks, and the other job takes the
 * thread (work-conserving, and not what this test measures). For the same reason the elements
 * spin (sleep_us) rather than wait (wait_us): spinning workers slow down with their readers on a
 * loaded machine, where waiting ones outran them (ratio 1.56 beside CPU hogs). */
#define NELEMS 20000
#define PIPELINE "range(20000) | map(sleep_us, 2000)"

static const char *const worker_args[] = {"--metrics-port", "0", "--threads", "1", NULL};

static int setup(void **state)
{
    return (*state = cluster_new(NULL, worker_args, 1, NWORKERS)) ? 0 : -1;
}

/* The two readers: stopped by the teardown when a failed assertion left them running. */
static struct proc readers[2];

static int teardown(void **state)
{
    for (int i = 0; i < 2; i++)
        proc_stop(&readers[i], SIGTERM, 5000);
    int rc = cluster_teardown(state);
    tmp_cleanup();
    return rc;
}

static char metrics_at[NWORKERS][64];

/* Seconds of thread time jobs h and l took on worker i so far (0 before a job's first series),
 * from one scrape, so that both are read at the same instant. */
static void job_seconds(struct cluster *c, int i, uint64_t h, uint64_t l, double *sh, double *sl)
{
    if (!metrics_at[i][0])
        assert_int_equal(cluster_read_address(&c->workers[i], " metrics on ", metrics_at[i],
                                              sizeof metrics_at[i], 10000),
                         0);
    struct expo e;
    char err[512] = "", labels[48];
    if (scrape_metrics(metrics_at[i], &e, err, sizeof err) != 0)
        fail_msg("worker %d: %s", i, err);
    const uint64_t ids[2] = {h, l};
    double *out[2] = {sh, sl};
    for (int k = 0; k < 2; k++) {
        snprintf(labels, sizeof labels, "job=\"%" PRIu64 "\"", ids[k]);
        if (expo_value(&e, "sluice_worker_job_cpu_seconds_total", labels, out[k]) != 0)
            *out[k] = 0;
    }
    expo_free(&e);
}

/* The thread time of jobs h and l on every worker so far. Each worker's two figures come from one
 * scrape: read apart (a scrape per job), the two jobs' windows differed by the time the scrapes
 * took, which on a loaded machine skewed the ratio (1.68 once). */
static void total_seconds(struct cluster *c, uint64_t h, uint64_t l, double *sh, double *sl)
{
    *sh = *sl = 0;
    for (int i = 0; i < NWORKERS; i++) {
        double a, b;
        job_seconds(c, i, h, l, &a, &b);
        *sh += a;
        *sl += b;
    }
}

/* Waits (at most 30 s) until jobs h and l have both taken thread time on every worker. */
static void wait_both_running(struct cluster *c, uint64_t h, uint64_t l)
{
    long long deadline = now_ms() + 30000;
    for (;;) {
        int running = 0;
        for (int i = 0; i < NWORKERS; i++) {
            double a, b;
            job_seconds(c, i, h, l, &a, &b);
            running += a > 0 && b > 0;
        }
        if (running == NWORKERS)
            return;
        if (now_ms() > deadline)
            fail_msg("after 30 s, both jobs run on %d of %d workers", running, NWORKERS);
        sleep_ms(100);
    }
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

static void expect_every_element_once(struct proc *r, const char *what)
{
    char *out = proc_read_all(r, 90000);
    assert_non_null(out);
    assert_int_equal(proc_wait(r, 10000), 0);
    struct tally t = tally_range(out, NELEMS);
    print_tally(what, t);
    assert_int_equal(t.lines, NELEMS);
    assert_int_equal(t.lost + t.duplicated + t.unexpected, 0);
    free(out);
}

/* Measures the thread time of jobs h (weight 2) and l (weight 1) over 4 s, while both readers
 * still read, and checks it and the dispatcher's worker_time_share against 2:1. */
static void measure(struct cluster *c, uint64_t h, uint64_t l, struct proc *heavy,
                    struct proc *light, const char *when)
{
    double h0, l0, h1, l1;
    long long t0 = now_ms();
    total_seconds(c, h, l, &h0, &l0);
    sleep_ms(4000);
    total_seconds(c, h, l, &h1, &l1);
    long long t1 = now_ms();
    /* Both still want more: a window that outlasted either read measures nothing. */
    assert_int_equal(proc_wait(heavy, 0), -2);
    assert_int_equal(proc_wait(light, 0), -2);
    double dh = h1 - h0, dl = l1 - l0, secs = (double)(t1 - t0) / 1000.0;
    double ratio = dl > 0 ? dh / dl : 0;
    printf("    %s, over %.1f s: heavy %.2f thread-s, light %.2f thread-s, ratio %.3f (want 2)\n",
           when, secs, dh, dl, ratio);
    /* The threads were busy: most of their time is accounted. */
    assert_true(dh + dl > 0.5 * NWORKERS * secs);
    /* 2:1 within 5 % (measured 1.99 to 2.02 beside CPU hogs at load 11 to 14): 1:1 (no
     * weighting) and 3:1 both fail. */
    assert_true(ratio > 1.9 && ratio < 2.1);
    /* The dispatcher's window (10 s of heartbeat samples) agrees, more loosely. */
    json_t *doc = cluster_status(c);
    json_t *sh = json_object_get(job_named(doc, "heavy"), "worker_time_share");
    json_t *sl = json_object_get(job_named(doc, "light"), "worker_time_share");
    assert_true(json_is_real(sh) && json_is_real(sl));
    printf("    %s, dispatcher worker_time_share: heavy %.3f, light %.3f\n", when,
           json_real_value(sh), json_real_value(sl));
    assert_true(json_real_value(sh) > 0.55 && json_real_value(sh) < 0.78);
    assert_true(json_real_value(sl) > 0.22 && json_real_value(sl) < 0.45);
    json_decref(doc);
}

static void test_weights_share_threads(void **state)
{
    struct cluster *c = *state;
    cluster_wait_registered(c);
    struct proc *heavy = &readers[0], *light = &readers[1];
    assert_int_equal(cluster_cli_spawn(c, heavy, "read", PIPELINE, "--mode", "distributed_epoch",
                                       "--job-name", "heavy", "--weight", "2", NULL),
                     0);
    assert_int_equal(cluster_cli_spawn(c, light, "read", PIPELINE, "--mode", "distributed_epoch",
                                       "--job-name", "light", NULL),
                     0);
    json_t *jh = cluster_wait_job(c, "heavy", NWORKERS, 30000);
    json_t *jl = cluster_wait_job(c, "light", NWORKERS, 30000);
    uint64_t h = (uint64_t)json_integer_value(json_object_get(jh, "id"));
    uint64_t l = (uint64_t)json_integer_value(json_object_get(jl, "id"));
    assert_true(json_real_value(json_object_get(jh, "weight")) == 2.0);
    json_decref(jh);
    json_decref(jl);

    /* Both jobs want more for about 20 s (the heavy one ends first): one window of 4 s once
     * both jobs run on every worker, another after the dispatcher restarted. A task's producers
     * start at its reader's first request, which on a loaded machine comes late (the reader
     * starts, heartbeats, connects to each worker: more than 3 s beside the sanitizer build once,
     * where the light job had a worker to itself for the first 0.9 s of the window and the ratio
     * was 1.47); until then that worker's thread goes to the other job, work-conserving. */
    wait_both_running(c, h, l);
    sleep_ms(1000);
    measure(c, h, l, heavy, light, "before the restart");
    assert_int_equal(cluster_restart_dispatcher(c, SIGTERM), 0);
    sleep_ms(1500);
    json_t *doc = cluster_status(c);
    assert_true(json_real_value(json_object_get(job_named(doc, "heavy"), "weight")) == 2.0);
    json_decref(doc);
    measure(c, h, l, heavy, light, "after the restart");

    expect_every_element_once(heavy, "heavy (weight 2) read");
    expect_every_element_once(light, "light (weight 1) read");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_weights_share_threads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
