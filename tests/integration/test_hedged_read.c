/* Hedged splits against a straggler (sluice read --hedge; docs/design.md "Hedged splits"), on
 * three workers of which one is slowed by SIGSTOP:
 *
 *   - bursts (stopped 400 ms of every 500, a fifth of its speed): the same distributed_epoch
 *     read of range(3600), 5 ms an element, without and with hedging, each element exactly once
 * both times; the split times the dispatcher measured (status: splits.time_ms, lease to finish) are
 * printed with the copies made, for the record, never asserted (they are timings);
 *   - stopped in the middle of a hedged read until its splits are copied (at most STOP_MS): the
 *     splits it holds are copied to the others (the dispatcher's worker timeout is far longer
 *     than the stop, so nothing but hedging moves them; a copy needs only a median split time
 *     below a third of STOP_MS),
 *     and every element arrives exactly once although both productions of those splits reach the
 *     reader once the worker runs again;
 *   - a hedged read with the straggler in bursts and another worker killed in the middle
 *     (the dispatcher's default test timeout, 2 s, removes it and its leases go back to the
 *     pool, while copies of them may be out): exactly once.
 *
 * Elements sleep in map(wait_us) (no CPU: a loaded machine slows all workers alike), 20 ms
 * each but in the bursts case, splits are ten elements. Every wait is bounded. */
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

#include "lib/clock.h"
#include "lib/cluster.h"

#define READ_MS 60000
#define STOP_MS 20000

/* Stops a worker for stop_ms of every period (stop_ms + run_ms) until told to stop. */
struct burster {
    pid_t pid;
    long stop_ms, run_ms;
    atomic_int stop;
    pthread_t thread;
};

static void *burst_loop(void *arg)
{
    struct burster *b = arg;
    while (!atomic_load(&b->stop)) {
        kill(b->pid, SIGSTOP);
        sleep_ms(b->stop_ms);
        kill(b->pid, SIGCONT);
        sleep_ms(b->run_ms);
    }
    kill(b->pid, SIGCONT);
    return NULL;
}

static void burst_start(struct burster *b, pid_t pid)
{
    memset(b, 0, sizeof *b);
    b->pid = pid;
    b->stop_ms = 400;
    b->run_ms = 100;
    assert_int_equal(pthread_create(&b->thread, NULL, burst_loop, b), 0);
}

static void burst_stop(struct burster *b)
{
    atomic_store(&b->stop, 1);
    pthread_join(b->thread, NULL);
}

/* The splits object of the newest job in the status (the read just done: each read is a job of
 * its own), a new reference; NULL while there is none. */
static json_t *last_splits(struct cluster *c)
{
    json_t *st = cluster_status(c);
    json_t *jobs = json_object_get(st, "jobs"), *last = NULL;
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        if (!last || json_integer_value(json_object_get(j, "id")) >
                         json_integer_value(json_object_get(last, "id")))
            last = j;
    }
    json_t *splits = last ? json_object_get(last, "splits") : NULL;
    json_incref(splits);
    json_decref(st);
    return splits;
}

/* The elements the worker at address served so far, as the status last heard (0 when unknown). */
static long long worker_elements(struct cluster *c, const char *address)
{
    json_t *st = cluster_status(c);
    size_t i;
    json_t *w;
    long long n = 0;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    {
        const char *a = json_string_value(json_object_get(w, "address"));
        if (a && strcmp(a, address) == 0)
            n = json_integer_value(json_object_get(w, "elements"));
    }
    json_decref(st);
    return n;
}

static long long num(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);
    if (b)
        v = json_object_get(v, b);
    return json_integer_value(v);
}

/* Reads range(n) (ten-element splits, us microseconds an element) with flag (--hedge or
 * --no-hedge); requires every element exactly once; prints the figures. Returns the splits
 * object. */
static json_t *read_range(struct cluster *c, long n, long us, const char *flag, long long *ms)
{
    char pipeline[64];
    snprintf(pipeline, sizeof pipeline, "range(%ld) | map(wait_us, %ld)", n, us);
    long long t0 = now_ms();
    char *out = cluster_run(c, 0, NULL, "read", pipeline, "--mode", "distributed_epoch",
                            "--split-size", "10", flag, NULL);
    *ms = now_ms() - t0;
    struct tally t = tally_range(out, n);
    print_tally(flag, t);
    assert_int_equal(t.lines, n);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    free(out);
    json_t *s = last_splits(c);
    assert_non_null(s);
    assert_int_equal(num(s, "finished", NULL), n / 10);
    printf("    %s: read %lld ms; split time median %lld ms, p99 %lld ms, max %lld ms "
           "(%lld splits); %lld hedged\n",
           flag, *ms, num(s, "time_ms", "median"), num(s, "time_ms", "p99"),
           num(s, "time_ms", "max"), num(s, "time_ms", "samples"), num(s, "hedged", NULL));
    return s;
}

static const char *const long_timeout[] = {"--worker-timeout-ms", "30000", NULL};

static void test_straggler_bursts(void **unused)
{
    (void)unused;
    struct cluster *c = cluster_new(long_timeout, NULL, 0, 3);
    assert_non_null(c);
    cluster_wait_registered(c);
    struct burster b;
    burst_start(&b, c->workers[2].pid);
    long long off_ms, on_ms;
    /* 360 splits of 50 ms: enough that the first splits the straggler takes, before it is
     * known slow, are not the whole p99. */
    json_t *off = read_range(c, 3600, 5000, "--no-hedge", &off_ms);
    json_t *on = read_range(c, 3600, 5000, "--hedge", &on_ms);
    burst_stop(&b);
    assert_int_equal(num(off, "hedged", NULL), 0);
    long long p_off = num(off, "time_ms", "p99"), p_on = num(on, "time_ms", "p99");
    printf("    p99 split time without / with hedging: %lld / %lld ms (%.2fx); read %lld / %lld "
           "ms (%.2fx)\n",
           p_off, p_on, p_on > 0 ? (double)p_off / (double)p_on : 0.0, off_ms, on_ms,
           on_ms > 0 ? (double)off_ms / (double)on_ms : 0.0);
    json_decref(off);
    json_decref(on);
    assert_int_equal(cluster_free(c), 0);
}

static void test_straggler_stopped(void **unused)
{
    (void)unused;
    struct cluster *c = cluster_new(long_timeout, NULL, 0, 3);
    assert_non_null(c);
    cluster_wait_registered(c);
    const long n = 600;
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", "range(600) | map(wait_us, 20000)", "--mode",
                                       "distributed_epoch", "--split-size", "10", "--hedge", NULL),
                     0);
    /* Once the straggler's task holds splits: it has served elements (of a split leased to it;
     * it holds more, its queue is two splits per producer, and 60 splits go to three workers). */
    long long deadline = now_ms() + READ_MS;
    for (;;) {
        if (worker_elements(c, c->workers[2].addr) > 0)
            break;
        assert_true(now_ms() < deadline);
        sleep_ms(50);
    }
    kill(c->workers[2].pid, SIGSTOP);
    long long stopped = now_ms();
    json_t *during = NULL;
    for (;;) {
        json_decref(during);
        during = last_splits(c);
        assert_non_null(during);
        if (num(during, "hedged", NULL) > 0 || now_ms() - stopped > STOP_MS)
            break;
        sleep_ms(250);
    }
    /* A little longer, for copies of every split it holds. */
    sleep_ms(1000);
    json_decref(during);
    during = last_splits(c);
    long long stopped_ms = now_ms() - stopped;
    kill(c->workers[2].pid, SIGCONT);
    char *out = proc_read_all(&r, READ_MS);
    int rc = proc_wait(&r, 5000);
    assert_int_equal(rc, 0);
    struct tally t = tally_range(out, n);
    print_tally("stopped straggler, --hedge", t);
    assert_int_equal(t.lines, n);
    assert_int_equal(t.lost + t.duplicated + t.unexpected, 0);
    free(out);
    json_t *s = last_splits(c);
    assert_non_null(s);
    printf("    after %lld ms stopped: %lld of %ld splits finished, %lld hedged; in the end %lld "
           "hedged, split time median %lld ms, p99 %lld ms\n",
           stopped_ms, num(during, "finished", NULL), n / 10, num(during, "hedged", NULL),
           num(s, "hedged", NULL), num(s, "time_ms", "median"), num(s, "time_ms", "p99"));
    /* The straggler's splits were copied while it was stopped. */
    assert_true(num(during, "hedged", NULL) > 0);
    assert_int_equal(num(s, "finished", NULL), n / 10);
    json_decref(during);
    json_decref(s);
    assert_int_equal(cluster_free(c), 0);
}

static void test_kill_with_hedging(void **unused)
{
    (void)unused;
    struct cluster *c = cluster_new(NULL, NULL, 0, 3);
    assert_non_null(c);
    cluster_wait_registered(c);
    struct burster b;
    burst_start(&b, c->workers[2].pid);
    const long n = 900;
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", "range(900) | map(wait_us, 20000)", "--mode",
                                       "distributed_epoch", "--split-size", "10", "--hedge", NULL),
                     0);
    /* In the middle: a third of the splits finished. */
    long long deadline = now_ms() + READ_MS;
    for (;;) {
        json_t *s = last_splits(c);
        long long done = s ? num(s, "finished", NULL) : 0;
        json_decref(s);
        if (done >= n / 30)
            break;
        assert_true(now_ms() < deadline);
        sleep_ms(50);
    }
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, READ_MS), 128 + SIGKILL);
    char *out = proc_read_all(&r, READ_MS);
    int rc = proc_wait(&r, 5000);
    burst_stop(&b);
    assert_int_equal(rc, 0);
    struct tally t = tally_range(out, n);
    print_tally("worker killed, --hedge", t);
    assert_int_equal(t.lines, n);
    assert_int_equal(t.lost + t.duplicated + t.unexpected, 0);
    free(out);
    json_t *s = last_splits(c);
    assert_non_null(s);
    printf("    %lld hedged; split time median %lld ms, p99 %lld ms\n", num(s, "hedged", NULL),
           num(s, "time_ms", "median"), num(s, "time_ms", "p99"));
    assert_int_equal(num(s, "finished", NULL), n / 10);
    json_decref(s);
    (void)cluster_free(c); /* the killed worker exits 137 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_straggler_bursts),
        cmocka_unit_test(test_straggler_stopped),
        cmocka_unit_test(test_kill_with_hedging),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
