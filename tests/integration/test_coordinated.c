/* Coordinated reads end to end: consumers of one named job read in lockstep rounds, every round
 * from one task for all of them, also while workers join, drain, die and restart.
 *
 * With two workers each running range(1000000) | repeat() (parallel_epochs), the k-th round a
 * task serves is its elements 2k and 2k + 1: consumer 0 gets 2k and consumer 1 gets 2k + 1. Both
 * workers are registered before the job is created (the test waits for them), so the schedule
 * starts with both tasks: round i is served by task i mod 2, as its round i / 2, and consumer 0
 * reads 0, 0, 2, 2, 4, 4, ... while consumer 1 reads 1, 1, 3, 3, 5, 5, ...
 *
 * The churn test reads through the C API in three threads, so it can act on the cluster as the
 * read progresses and record, for every element, its round and task (sluice_iterator_round). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/net.h"
#include "lib/text.h"
#include "lib/tmp.h"
#include "sluice/sluice.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 20

static int setup(void **state)
{
    return (*state = cluster_new(NULL, NULL, 0, 0)) ? 0 : -1;
}

/* Parses ROUNDS lines of "ROUND TASK VALUE" (--format rounds) into rounds, tasks and v. */
static void parse_lines(const char *text, long rounds[ROUNDS], long tasks[ROUNDS], long v[ROUNDS])
{
    assert_int_equal(count_lines(text), ROUNDS);
    const char *p = text;
    for (int i = 0; i < ROUNDS; i++) {
        char *end;
        rounds[i] = strtol(p, &end, 10);
        assert_true(end != p && *end == ' ');
        p = end + 1;
        tasks[i] = strtol(p, &end, 10);
        assert_true(end != p && *end == ' ');
        p = end + 1;
        v[i] = strtol(p, &end, 10);
        assert_true(end != p && *end == '\n');
        p = end + 1;
    }
}

/* Runs both consumers of job "co" over two workers, the second starting delay_ms after the
 * first, and asserts the exact elements each one read. */
static void run_two_consumers(struct cluster *c, int delay_ms)
{
    assert_true(cluster_add_worker(c) >= 0);
    assert_true(cluster_add_worker(c) >= 0);
    cluster_wait_registered(c);

    struct proc r0, r1;
    const char *pipeline = "range(1000000) | repeat()";
    assert_int_equal(cluster_cli_spawn(c, &r0, "read", pipeline, "--mode", "parallel_epochs",
                                       "--job-name", "co", "--num-consumers", "2",
                                       "--consumer-index", "0", "--limit", "20", "--format",
                                       "rounds", NULL),
                     0);
    if (delay_ms > 0)
        usleep((useconds_t)delay_ms * 1000);
    assert_int_equal(cluster_cli_spawn(c, &r1, "read", pipeline, "--mode", "parallel_epochs",
                                       "--job-name", "co", "--num-consumers", "2",
                                       "--consumer-index", "1", "--limit", "20", "--format",
                                       "rounds", NULL),
                     0);
    char *o0 = proc_read_all(&r0, 60000);
    char *o1 = proc_read_all(&r1, 60000);
    assert_int_equal(proc_wait(&r0, 10000), 0);
    assert_int_equal(proc_wait(&r1, 10000), 0);

    long r0s[ROUNDS], r1s[ROUNDS], t0[ROUNDS], t1[ROUNDS], v0[ROUNDS], v1[ROUNDS];
    parse_lines(o0, r0s, t0, v0);
    parse_lines(o1, r1s, t1, v1);
    for (int i = 0; i < ROUNDS; i++) {
        /* Round i is round i / 2 of one task: its two consecutive elements, one per consumer. */
        assert_int_equal(r0s[i], i);
        assert_int_equal(r1s[i], i);
        assert_int_equal(t0[i], t1[i]);
        assert_int_equal(t0[i], t0[i % 2]);
        assert_int_equal(v0[i], 2 * (i / 2));
        assert_int_equal(v1[i], 2 * (i / 2) + 1);
    }
    assert_int_not_equal(t0[0], t0[1]);
    free(o0);
    free(o1);
}

static void test_two_consumers_lockstep(void **state)
{
    run_two_consumers(*state, 0);
}

/* The first consumer runs ahead alone: it takes its elements of the rounds each worker holds,
 * then waits (long polls that end empty and are repeated) until the second one catches up; the
 * elements each consumer reads are the same as when they run side by side. */
static void test_consumer_ahead_waits(void **state)
{
    run_two_consumers(*state, 2500);
}

/* A consumer index outside the job's consumers is refused before anything is read. */
static void test_bad_consumer_index(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", "range(10) | repeat()", "--job-name", "bad",
                         "--num-consumers", "2", "--consumer-index", "2", "--limit", "1", NULL);
    assert_int_not_equal(rc, 0);
    assert_string_equal(out, "");
    free(out);
    free(err);
}

static int setup_ft(void **state)
{
    return (*state = cluster_new(NULL, NULL, 1, 0)) ? 0 : -1;
}

/* The schedule and the grants are journaled: three consumers read on while a fault-tolerant
 * dispatcher is killed and restarted twice, and every round is exactly what it would have been
 * without the restarts (round i from task i mod 2, its elements 3 (i / 2) + c). */
static void test_dispatcher_restarts(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    assert_true(cluster_add_worker(c) >= 0);
    cluster_wait_registered(c);
    enum { N = 3, LIMIT = 3000 };
    struct proc r[N];
    const char *pipeline = "range(1000000) | repeat() | map(wait_us, 200)";
    for (int i = 0; i < N; i++) {
        char index[8];
        snprintf(index, sizeof index, "%d", i);
        assert_int_equal(cluster_cli_spawn(c, &r[i], "read", pipeline, "--job-name", "ft",
                                           "--num-consumers", "3", "--consumer-index", index,
                                           "--limit", "3000", "--format", "rounds", NULL),
                         0);
    }
    for (int k = 0; k < 2; k++) {
        usleep(700 * 1000);
        assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);
    }
    for (int i = 0; i < N; i++) {
        char *out = proc_read_all(&r[i], 60000);
        assert_int_equal(proc_wait(&r[i], 10000), 0);
        assert_int_equal(count_lines(out), LIMIT);
        const char *p = out;
        long first_task = -1, second_task = -1;
        for (long round = 0; round < LIMIT; round++) {
            char *end;
            long got_round = strtol(p, &end, 10);
            long task = strtol(end, &end, 10);
            long value = strtol(end, &end, 10);
            assert_true(*end == '\n');
            p = end + 1;
            assert_int_equal(got_round, round);
            long *slot = round % 2 ? &second_task : &first_task;
            if (*slot < 0)
                *slot = task;
            assert_int_equal(task, *slot);
            assert_int_equal(value, 3 * (round / 2) + i);
        }
        assert_true(first_task != second_task);
        free(out);
    }
}

/* A consumer that comes back after the others moved on cannot read rounds they were served:
 * it gets a clear error, not some other round's element. */
static void test_consumer_behind(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    assert_true(cluster_add_worker(c) >= 0);
    cluster_wait_registered(c);
    struct proc r0, r1;
    const char *pipeline = "range(1000000) | repeat()";
    assert_int_equal(cluster_cli_spawn(c, &r0, "read", pipeline, "--job-name", "late",
                                       "--num-consumers", "2", "--consumer-index", "0", "--limit",
                                       "50", "--format", "count", NULL),
                     0);
    assert_int_equal(cluster_cli_spawn(c, &r1, "read", pipeline, "--job-name", "late",
                                       "--num-consumers", "2", "--consumer-index", "1", "--limit",
                                       "50", "--format", "count", NULL),
                     0);
    char *o0 = proc_read_all(&r0, 60000), *o1 = proc_read_all(&r1, 60000);
    assert_int_equal(proc_wait(&r0, 10000), 0);
    assert_int_equal(proc_wait(&r1, 10000), 0);
    assert_string_equal(o0, "50\n");
    assert_string_equal(o1, "50\n");
    free(o0);
    free(o1);
    /* Consumer 1 starts again from round 0, which task 1 (the first of the schedule) served. */
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", pipeline, "--job-name", "late", "--num-consumers",
                         "2", "--consumer-index", "1", "--limit", "5", NULL);
    assert_int_equal(rc, 1);
    assert_string_equal(out, "");
    assert_string_equal(err, "sluice: read: consumer 1 fell too far behind: round 0 of task 1 was "
                             "served to the other consumers and is gone\n");
    free(out);
    free(err);
}

/* A consumer alone is never served (a round goes out only once every consumer asks for it),
 * and when it gives up it says which round it waited for, from which task, and why. */
static void test_lone_consumer_says_why(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    cluster_wait_registered(c);
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", "range(10) | repeat()", "--job-name", "alone",
                         "--num-consumers", "2", "--consumer-index", "0", "--limit", "1",
                         "--timeout-ms", "3000", NULL);
    assert_int_equal(rc, 1);
    assert_string_equal(out, "");
    /* The waiting note may come first (after 2 s); the last line is the failure. */
    const char *last = strstr(err, "sluice: read: ");
    assert_non_null(last);
    assert_string_equal(last, "sluice: read: no progress for 3000 ms: job 1: waiting for round 0 "
                              "from task 1, which serves a round once all 2 consumers ask for "
                              "it\n");
    free(out);
    free(err);
}

/* A coordinated read of a pipeline that ends is refused when the job is created, with one line
 * that says why; one that never ends is read (a filter after repeat() keeps it endless). */
static void test_finite_pipeline_refused(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    static const char *const finite[][2] = {
        {"range(100)", "'range(100)' ends"},
        {"range(10) | repeat(3)", "'range(10) | repeat(3)' ends"},
        {"range(10) | repeat() | take(5)", "'range(10) | repeat() | take(5)' ends"},
    };
    for (size_t i = 0; i < sizeof finite / sizeof finite[0]; i++) {
        char *out = NULL, *err = NULL;
        int rc = cluster_cli(c, &out, &err, "read", finite[i][0], "--job-name", "f",
                             "--num-consumers", "1", "--consumer-index", "0", "--limit", "1", NULL);
        char want[256];
        snprintf(want, sizeof want,
                 "sluice: read: num_consumers needs an infinite pipeline: %s; add repeat()\n",
                 finite[i][1]);
        assert_int_equal(rc, 1);
        assert_string_equal(out, "");
        assert_string_equal(err, want);
        free(out);
        free(err);
    }
    char *out = NULL, *err = NULL;
    int rc =
        cluster_cli(c, &out, &err, "read", "range(10) | repeat() | filter(even)", "--job-name", "e",
                    "--num-consumers", "1", "--consumer-index", "0", "--limit", "7", NULL);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "0\n2\n4\n6\n8\n0\n2\n");
    free(out);
    free(err);
}

/* ---- churn ------------------------------------------------------------------------------ */

#define CHURN_CONSUMERS 3
#define CHURN_MAX 100000 /* elements a consumer may record */
#define CHURN_STEP 300   /* elements read between two changes of the cluster */
#define CHURN_WAIT_MS 30000
#define CHURN_PIPELINE "range(1000000) | repeat() | map(wait_us, 200)"

struct consumer {
    pthread_t thread;
    const char *dispatcher;
    uint32_t index;
    /* Stop after the first element of a round at or past this one. Consumers stop at a round,
     * not after a number of elements: a round that reached only some consumers (see test_churn)
     * leaves the others one element short, and a consumer that waited for one more element
     * would wait for a round nobody else asks for. */
    atomic_uint_least64_t stop_round;
    atomic_size_t n; /* elements recorded (entries below n are complete) */
    uint64_t round[CHURN_MAX], task[CHURN_MAX];
    int64_t value[CHURN_MAX];
    int rc;
    char err[SLUICE_ERRMSG_SIZE];
};

static void *consume(void *arg)
{
    struct consumer *k = arg;
    struct sluice_client_options co = {.dispatcher = k->dispatcher, .timeout_ms = CHURN_WAIT_MS};
    struct sluice_client *client = NULL;
    struct sluice_iterator *it = NULL;
    k->rc = sluice_client_open(&co, &client, k->err, sizeof k->err);
    if (k->rc)
        return NULL;
    struct sluice_read_options ro = {.pipeline = CHURN_PIPELINE,
                                     .mode = SLUICE_PARALLEL_EPOCHS,
                                     .job_name = "churn",
                                     .consumer_index = k->index,
                                     .num_consumers = CHURN_CONSUMERS};
    k->rc = sluice_iterator_open(client, &ro, &it, k->err, sizeof k->err);
    while (k->rc == 0) {
        size_t n = atomic_load(&k->n);
        if (n >= CHURN_MAX) {
            k->rc = SLUICE_ERR_LIMIT;
            snprintf(k->err, sizeof k->err, "read %d elements without reaching the stop round",
                     CHURN_MAX);
            break;
        }
        if (n > 0 && k->round[n - 1] >= atomic_load(&k->stop_round))
            break;
        const struct sluice_element *e;
        int rc = sluice_iterator_next(it, &e, CHURN_WAIT_MS, k->err, sizeof k->err);
        if (rc != 1) {
            k->rc = rc ? rc : SLUICE_ERR_CLOSED;
            if (!rc)
                snprintf(k->err, sizeof k->err, "the read ended");
            break;
        }
        size_t len;
        const void *data = sluice_element_data(e, 0, &len);
        if (sluice_element_dtype(e, 0) != SLUICE_INT64 || len != 8 ||
            sluice_iterator_round(it, &k->round[n], &k->task[n]) != 0) {
            k->rc = SLUICE_ERR_INVALID;
            snprintf(k->err, sizeof k->err, "element %zu is not an int64 with a round", n);
            break;
        }
        memcpy(&k->value[n], data, 8);
        atomic_store(&k->n, n + 1);
    }
    sluice_iterator_close(it);
    sluice_client_close(client);
    return NULL;
}

static size_t least_read(struct consumer *k)
{
    size_t m = SIZE_MAX;
    for (int i = 0; i < CHURN_CONSUMERS; i++) {
        size_t n = atomic_load(&k[i].n);
        m = n < m ? n : m;
    }
    return m;
}

/* Waits (bounded) until every consumer has read at least n elements. */
static void wait_read(struct consumer *k, size_t n, const char *what)
{
    long long t0 = now_ms();
    while (least_read(k) < n) {
        for (int i = 0; i < CHURN_CONSUMERS; i++)
            if (k[i].rc)
                fail_msg("%s: consumer %d failed: %s", what, i, k[i].err);
        if (now_ms() - t0 > CHURN_WAIT_MS)
            fail_msg("%s: the consumers read only %zu of %zu elements in %d ms", what,
                     least_read(k), n, CHURN_WAIT_MS);
        usleep(10 * 1000);
    }
}

/* The number of distinct tasks consumer 0 has read from so far; *newest receives the last one
 * that first appeared. */
static size_t tasks_seen(struct consumer *k, uint64_t *newest)
{
    uint64_t seen[64];
    size_t ns = 0, n = atomic_load(&k[0].n);
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < ns && seen[j] != k[0].task[i])
            j++;
        if (j == ns && ns < 64) {
            seen[ns++] = k[0].task[i];
            *newest = k[0].task[i];
        }
    }
    return ns;
}

/* Waits (bounded) until consumer 0 has read from want distinct tasks; returns the newest. */
static uint64_t wait_tasks(struct consumer *k, size_t want, const char *what)
{
    long long t0 = now_ms();
    uint64_t newest = 0;
    while (tasks_seen(k, &newest) < want) {
        for (int i = 0; i < CHURN_CONSUMERS; i++)
            if (k[i].rc)
                fail_msg("%s: consumer %d failed: %s", what, i, k[i].err);
        if (now_ms() - t0 > CHURN_WAIT_MS)
            fail_msg("%s: only %zu tasks served rounds within %d ms", what, tasks_seen(k, &newest),
                     CHURN_WAIT_MS);
        usleep(10 * 1000);
    }
    return newest;
}

/* Three consumers read an endless pipeline while the cluster changes under them: a worker joins,
 * one drains (SIGTERM), one is killed (SIGKILL), and one stops (SIGINT) and starts again on the
 * same port. Afterwards every round is checked across the consumers: each round read by all of
 * them came from one task, at one position of its sequence (the k-th round a task serves is its
 * elements 3k, 3k + 1, 3k + 2, consumer c getting 3k + c), every task served its rounds without
 * losing an element, and all consumers read the same rounds. The one exception the design
 * allows: a worker killed while it wrote one round's replies may have reached some consumers
 * and not the others, who skip that round (src/worker/rounds.h); at most one such round, of the
 * killed task, which then serves nothing more. Such a round leaves the consumers that missed it
 * one element behind the others for good, so the consumers stop at a common round, as a
 * training loop stepping by sluice_iterator_round() would, never after a common number of
 * elements: the one behind would wait for a round no other consumer asks for. */
static void test_churn(void **state)
{
    struct cluster *c = *state;
    static char port[16];
    snprintf(port, sizeof port, "%d", free_port());
    static const char *const pinned[] = {"--port", port, NULL};
    c->worker_args = pinned;
    int a = cluster_add_worker(c);
    c->worker_args = NULL;
    int b = cluster_add_worker(c);
    assert_true(a >= 0 && b >= 0);
    cluster_wait_registered(c);
    char disp[64];
    snprintf(disp, sizeof disp, "127.0.0.1:%d", c->port);

    struct consumer *k = calloc(CHURN_CONSUMERS, sizeof *k);
    assert_non_null(k);
    long long t0 = now_ms();
    for (int i = 0; i < CHURN_CONSUMERS; i++) {
        k[i].dispatcher = disp;
        k[i].index = (uint32_t)i;
        atomic_init(&k[i].stop_round, UINT64_MAX);
        atomic_init(&k[i].n, 0);
        assert_int_equal(pthread_create(&k[i].thread, NULL, consume, &k[i]), 0);
    }
    uint64_t newest = 0;
    wait_read(k, CHURN_STEP, "start");
    /* Both tasks serve (more if a loaded machine made the dispatcher evict and take back a
     * worker: harmless, the checks below hold for any schedule). */
    assert_true(tasks_seen(k, &newest) >= 2);

    /* A worker joins: its task takes part from a round the dispatcher picks. */
    int w3 = cluster_add_worker(c);
    assert_true(w3 >= 0);
    uint64_t joined = wait_tasks(k, 3, "join");
    long long t_join = now_ms();

    /* One drains: it leaves the schedule at a round no consumer has reached. */
    assert_int_equal(kill(c->workers[b].pid, SIGTERM), 0);
    wait_read(k, least_read(k) + CHURN_STEP, "drain");

    /* The joined one is killed: its rounds not served yet are skipped once it is evicted. */
    assert_int_equal(proc_stop(&c->workers[w3], SIGKILL, 10000), 128 + SIGKILL);
    long long t_kill = now_ms();
    wait_read(k, least_read(k) + CHURN_STEP, "kill");
    long long t_resumed = now_ms();

    /* The first one stops and starts again on the same port: a new task replaces its old one. */
    assert_int_equal(proc_stop(&c->workers[a], SIGINT, 10000), 0);
    c->worker_args = pinned;
    int a2 = cluster_add_worker(c);
    c->worker_args = NULL;
    assert_true(a2 >= 0);
    assert_string_equal(c->workers[a2].addr, c->workers[a].addr);
    uint64_t restarted = wait_tasks(k, 4, "restart");
    assert_int_not_equal(restarted, joined);

    /* Every consumer stops at the same round, CHURN_STEP rounds past the furthest one read:
     * after the first element it reads of that round or a later one. */
    uint64_t furthest = 0;
    for (int i = 0; i < CHURN_CONSUMERS; i++) {
        size_t n = atomic_load(&k[i].n);
        if (n > 0 && k[i].round[n - 1] > furthest)
            furthest = k[i].round[n - 1];
    }
    for (int i = 0; i < CHURN_CONSUMERS; i++)
        atomic_store(&k[i].stop_round, furthest + CHURN_STEP);
    size_t nk[CHURN_CONSUMERS];
    for (int i = 0; i < CHURN_CONSUMERS; i++) {
        pthread_join(k[i].thread, NULL);
        if (k[i].rc)
            fail_msg("consumer %d failed: %s", i, k[i].err);
        nk[i] = atomic_load(&k[i].n);
        assert_true(nk[i] > 0);
    }
    /* They all stopped at the same round: the rounds after the changes reached every one. */
    for (int i = 1; i < CHURN_CONSUMERS; i++)
        assert_int_equal(k[i].round[nk[i] - 1], k[0].round[nk[0] - 1]);
    assert_true(k[0].round[nk[0] - 1] >= furthest + CHURN_STEP);
    long long t_end = now_ms();
    /* The drained worker left on its own, cleanly. */
    assert_int_equal(proc_wait(&c->workers[b], 20000), 0);

    /* Rounds increase along each consumer's read; compare up to the lowest last round. */
    uint64_t last = UINT64_MAX;
    for (int i = 0; i < CHURN_CONSUMERS; i++) {
        for (size_t j = 1; j < nk[i]; j++)
            assert_true(k[i].round[j] > k[i].round[j - 1]);
        last = k[i].round[nk[i] - 1] < last ? k[i].round[nk[i] - 1] : last;
    }
    size_t pos[CHURN_CONSUMERS] = {0};
    size_t common = 0, partial = 0, skipped = 0;
    uint64_t partial_task = 0, partial_round = 0, prev_round = 0;
    uint64_t tasks[16] = {0};
    int64_t next_value[16] = {0};
    size_t ntasks = 0;
    for (;;) {
        /* The next round any consumer read. */
        uint64_t r = UINT64_MAX;
        for (int i = 0; i < CHURN_CONSUMERS; i++)
            if (pos[i] < nk[i] && k[i].round[pos[i]] < r)
                r = k[i].round[pos[i]];
        if (r > last)
            break;
        int have = 0, first = -1;
        for (int i = 0; i < CHURN_CONSUMERS; i++) {
            if (pos[i] < nk[i] && k[i].round[pos[i]] == r) {
                have++;
                if (first < 0)
                    first = i;
            }
        }
        uint64_t task = k[first].task[pos[first]];
        int64_t base = k[first].value[pos[first]] - first;
        for (int i = 0; i < CHURN_CONSUMERS; i++) {
            if (pos[i] >= nk[i] || k[i].round[pos[i]] != r)
                continue;
            if (k[i].task[pos[i]] != task || k[i].value[pos[i]] != base + i)
                fail_msg("round %" PRIu64 ": consumer %d read %" PRId64 " from task %" PRIu64
                         ", consumer %d read %" PRId64 " from task %" PRIu64,
                         r, first, k[first].value[pos[first]], task, i, k[i].value[pos[i]],
                         k[i].task[pos[i]]);
            pos[i]++;
        }
        /* Each task serves its rounds in order, three elements each, from its first element. */
        size_t t = 0;
        while (t < ntasks && tasks[t] != task)
            t++;
        if (t == ntasks) {
            assert_true(ntasks < 16);
            tasks[ntasks++] = task;
        }
        assert_true(base % CHURN_CONSUMERS == 0);
        assert_int_equal(base, next_value[t]);
        next_value[t] = base + CHURN_CONSUMERS;
        assert_true(partial == 0 || task != partial_task); /* a killed task serves no more */
        if (have < CHURN_CONSUMERS) {
            partial++;
            partial_task = task;
            partial_round = r;
        } else {
            common++;
        }
        if (common + partial > 1)
            skipped += r - prev_round - 1;
        prev_round = r;
    }
    printf("    %zu rounds in %lld ms, %zu tasks, %zu rounds skipped, %zu read by only some "
           "consumers; joined after %lld ms, resumed %lld ms after the kill\n",
           common + partial, t_end - t0, ntasks, skipped, partial, t_join - t0, t_resumed - t_kill);
    if (partial)
        printf("    round %" PRIu64 " of task %" PRIu64 " reached some consumers only\n",
               partial_round, partial_task);
    assert_true(partial <= 1);
    assert_true(ntasks >= 4);
    /* Each consumer read every round all of them read, and the partial one if it reached it. */
    for (int i = 0; i < CHURN_CONSUMERS; i++)
        assert_true(nk[i] >= common && nk[i] <= common + partial);
    free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_consumers_lockstep, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_consumer_ahead_waits, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_bad_consumer_index, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_finite_pipeline_refused, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_consumer_behind, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_lone_consumer_says_why, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_churn, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_dispatcher_restarts, setup_ft, cluster_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmp_cleanup();
    return rc;
}
