/* Cross-trainer caches end to end: trainers reading one job with the cache share each worker
 * task's stream.
 *
 * The pipeline is range(1000000000) | repeat() in parallel_epochs: every worker's task produces
 * 0, 1, 2, ... so an element's value is its position in its task's stream, and
 * sluice_iterator_task() says which task it came from. "The same sequence" is then exact: for
 * every task, what each trainer got from it is a window of that task's stream, in order, starting
 * at its join point; a trainer that never fell behind the cache got a contiguous window; one that
 * fell behind got strictly increasing positions with gaps where it skipped.
 *
 * Reads go through the C API (the values and their tasks); the refusals go through the CLI, with
 * their exact messages. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/tmp.h"
#include "sluice/sluice.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PIPELINE "range(1000000000) | repeat()"
#define WAIT_MS 30000
#define MAX_TASKS 8

static int setup(void **state)
{
    return (*state = cluster_new(NULL, NULL, 0, 0)) ? 0 : -1;
}

/* One trainer's read: the values it got and the task of each. */
struct trainer {
    char dispatcher[64];
    const char *dataset_id;
    const char *job;
    const char *id;
    uint64_t cache_bytes;
    uint32_t outstanding; /* max_outstanding_requests; 0: the default */
    struct sluice_client *client;
    struct sluice_iterator *it;
    int64_t *value;
    uint64_t *task;
    size_t n, cap;
    /* Threaded reads: stop after target elements; pause_us between elements. */
    size_t target;
    unsigned pause_us;
    atomic_bool stop;
    int rc;
    char err[SLUICE_ERRMSG_SIZE];
    double seconds;
};

static void trainer_open(struct trainer *t, struct cluster *c, const char *dataset_id,
                         const char *job, const char *id, uint64_t cache_bytes,
                         uint32_t outstanding)
{
    memset(t, 0, sizeof *t);
    snprintf(t->dispatcher, sizeof t->dispatcher, "127.0.0.1:%d", c->port);
    t->dataset_id = dataset_id;
    t->job = job;
    t->id = id;
    t->cache_bytes = cache_bytes;
    atomic_init(&t->stop, false);
    struct sluice_client_options co = {.dispatcher = t->dispatcher, .timeout_ms = WAIT_MS};
    if (sluice_client_open(&co, &t->client, t->err, sizeof t->err) != 0)
        fail_msg("client: %s", t->err);
    struct sluice_read_options ro = {.dataset_id = dataset_id,
                                     .mode = SLUICE_PARALLEL_EPOCHS,
                                     .job_name = job,
                                     .cross_trainer_cache = id != NULL,
                                     .trainer_id = id,
                                     .cross_trainer_cache_bytes = cache_bytes,
                                     .max_outstanding_requests = outstanding};
    if (sluice_iterator_open(t->client, &ro, &t->it, t->err, sizeof t->err) != 0)
        fail_msg("trainer %s: open: %s", id ? id : "-", t->err);
}

/* Reads n more elements; returns 0 or the failure code (message in t->err). */
static int trainer_read(struct trainer *t, size_t n)
{
    if (t->cap < t->n + n) {
        t->cap = t->n + n;
        t->value = realloc(t->value, t->cap * sizeof *t->value);
        t->task = realloc(t->task, t->cap * sizeof *t->task);
        if (!t->value || !t->task)
            return SLUICE_ERR_NOMEM;
    }
    for (size_t i = 0; i < n && !atomic_load(&t->stop); i++) {
        const struct sluice_element *e;
        int rc = sluice_iterator_next(t->it, &e, WAIT_MS, t->err, sizeof t->err);
        if (rc != 1) {
            if (rc == 0)
                snprintf(t->err, sizeof t->err, "the read ended");
            return rc ? rc : SLUICE_ERR_CLOSED;
        }
        size_t len;
        const void *data = sluice_element_data(e, 0, &len);
        if (sluice_element_dtype(e, 0) != SLUICE_INT64 || len != 8 ||
            sluice_iterator_task(t->it, &t->task[t->n]) != 0) {
            snprintf(t->err, sizeof t->err, "element %zu is not an int64 with a task", t->n);
            return SLUICE_ERR_INVALID;
        }
        memcpy(&t->value[t->n], data, 8);
        t->n++;
        if (t->pause_us)
            usleep(t->pause_us);
    }
    return 0;
}

static void trainer_close(struct trainer *t)
{
    sluice_iterator_close(t->it);
    sluice_client_close(t->client);
    free(t->value);
    free(t->task);
}

static void *trainer_thread(void *arg)
{
    struct trainer *t = arg;
    long long t0 = now_ms();
    t->rc = trainer_read(t, t->target);
    t->seconds = (double)(now_ms() - t0) / 1000.0;
    return NULL;
}

/* What a trainer got from one task: the values in the order they came. */
struct run {
    uint64_t task;
    int64_t *v;
    size_t n;
};

/* Splits t's elements by task (at most MAX_TASKS), in order. Returns the number of tasks. */
static size_t by_task(const struct trainer *t, size_t from, struct run runs[MAX_TASKS])
{
    size_t nruns = 0;
    for (size_t i = from; i < t->n; i++) {
        size_t r = 0;
        while (r < nruns && runs[r].task != t->task[i])
            r++;
        if (r == nruns) {
            assert_true(nruns < MAX_TASKS);
            runs[r] = (struct run){.task = t->task[i], .v = malloc(t->n * sizeof(int64_t))};
            assert_non_null(runs[r].v);
            nruns++;
        }
        runs[r].v[runs[r].n++] = t->value[i];
    }
    return nruns;
}

static void free_runs(struct run *runs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(runs[i].v);
}

static const struct run *run_of(const struct run *runs, size_t n, uint64_t task)
{
    for (size_t i = 0; i < n; i++)
        if (runs[i].task == task)
            return &runs[i];
    return NULL;
}

/* Every run is the contiguous window [first, first + n) of its task's stream, first being
 * want_first (negative: any). */
static void assert_contiguous(const char *who, const struct run *runs, size_t n,
                              long long want_first)
{
    for (size_t r = 0; r < n; r++) {
        if (want_first >= 0 && runs[r].v[0] != want_first)
            fail_msg("%s, task %" PRIu64 ": starts at %" PRId64 ", expected %lld", who,
                     runs[r].task, runs[r].v[0], want_first);
        for (size_t i = 1; i < runs[r].n; i++)
            if (runs[r].v[i] != runs[r].v[i - 1] + 1)
                fail_msg("%s, task %" PRIu64 ": element %zu is %" PRId64 " after %" PRId64, who,
                         runs[r].task, i, runs[r].v[i], runs[r].v[i - 1]);
    }
}

/* The number of tasks t got elements from. */
static int tasks_seen(const struct trainer *t)
{
    uint64_t seen[MAX_TASKS];
    int n = 0;
    for (size_t i = 0; i < t->n; i++) {
        int k = 0;
        while (k < n && seen[k] != t->task[i])
            k++;
        if (k == n && n < MAX_TASKS)
            seen[n++] = t->task[i];
    }
    return n;
}

static char *register_dataset(struct cluster *c, const char *pipeline)
{
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "register", pipeline, NULL), 0);
    size_t len = strlen(out);
    while (len && out[len - 1] == '\n')
        out[--len] = '\0';
    free(err);
    return out;
}

#define N 20000

/* Trainer a reads N elements; trainer b joins and reads N; a reads N more; then a second reader
 * with a's id reads N while a still holds its prefetched elements. With nothing evicted yet
 * (the default 256 MiB holds millions of these), b joins at position 0 of every task: for each
 * task, a and b got the same contiguous window from 0. The second "a" continues a's cursor: its
 * positions are past everything a's reads moved the cursor over, and a and it never get the same
 * position. */
static void run_shared(struct cluster *c, int nworkers)
{
    for (int i = 0; i < nworkers; i++)
        assert_true(cluster_add_worker(c) >= 0);
    cluster_wait_registered(c);
    char *ds = register_dataset(c, PIPELINE);

    struct trainer a, b, a2;
    trainer_open(&a, c, ds, "shared", "a", 0, 0);
    assert_int_equal(trainer_read(&a, N), 0);
    trainer_open(&b, c, ds, "shared", "b", 0, 0);
    assert_int_equal(trainer_read(&b, N), 0);
    /* Replies are large: read on until both have elements of every task. */
    for (int round = 0; round < 50 && (tasks_seen(&a) < nworkers || tasks_seen(&b) < nworkers);
         round++) {
        assert_int_equal(trainer_read(&a, N), 0);
        assert_int_equal(trainer_read(&b, N), 0);
    }

    struct run ra[MAX_TASKS], rb[MAX_TASKS];
    size_t na = by_task(&a, 0, ra), nb = by_task(&b, 0, rb);
    /* Every worker's task served both (reads take from every task); same windows from 0. */
    assert_int_equal(na, (size_t)nworkers);
    assert_int_equal(nb, (size_t)nworkers);
    assert_contiguous("trainer a", ra, na, 0);
    assert_contiguous("trainer b", rb, nb, 0);
    size_t total_a = 0;
    for (size_t r = 0; r < na; r++) {
        assert_non_null(run_of(rb, nb, ra[r].task));
        total_a += ra[r].n;
    }
    assert_int_equal(total_a, a.n);
    print_message("    %d worker(s): trainers a and b read the same windows from 0 of %zu tasks\n",
                  nworkers, na);

    /* Another reader with a's id continues a's cursor: it starts past a's reads. */
    size_t a_before = a.n;
    trainer_open(&a2, c, ds, "shared", "a", 0, 0);
    assert_int_equal(trainer_read(&a2, N), 0);
    assert_int_equal(trainer_read(&a, N), 0);
    struct run r2[MAX_TASKS], ra_after[MAX_TASKS];
    size_t n2 = by_task(&a2, 0, r2), na_after = by_task(&a, a_before, ra_after);
    for (size_t r = 0; r < n2; r++) {
        const struct run *before = run_of(ra, na, r2[r].task);
        assert_non_null(before);
        /* Past what a read before it opened, and never a position a got. */
        assert_true(r2[r].v[0] > before->v[before->n - 1]);
        const struct run *after = run_of(ra_after, na_after, r2[r].task);
        for (size_t i = 1; i < r2[r].n; i++)
            assert_true(r2[r].v[i] > r2[r].v[i - 1]);
        for (size_t i = 0; after && i < after->n; i++) {
            for (size_t k = 0; k < r2[r].n; k++)
                if (after->v[i] == r2[r].v[k])
                    fail_msg("task %" PRIu64 ": position %" PRId64 " went to both readers of id a",
                             r2[r].task, after->v[i]);
        }
    }
    free_runs(r2, n2);
    free_runs(ra_after, na_after);
    free_runs(ra, na);
    free_runs(rb, nb);
    trainer_close(&a2);
    trainer_close(&b);
    trainer_close(&a);
    free(ds);
}

static void test_two_trainers_one_worker(void **state)
{
    run_shared(*state, 1);
}

static void test_two_trainers_two_workers(void **state)
{
    run_shared(*state, 2);
}

#define FAST_N 3000000
#define CACHE_BYTES (16u << 10)

/* Reads FAST_N elements with a fast trainer alone, then again (another job) with a slow trainer
 * reading at the same time with pauses, over a cache of 16 KiB. The fast one never skips: for
 * every task its positions are contiguous (from 0 alone; with the slow one from where it joined,
 * which may be later: the slow one's first requests may have filled the cache past its bound
 * before the fast one's reached the task). The slow one fell behind the cache: its positions are
 * strictly increasing and skip (there is a gap). The throughput ratio is printed, not
 * asserted. */
static void test_slow_trainer_skips(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    assert_true(cluster_add_worker(c) >= 0);
    cluster_wait_registered(c);
    char *ds = register_dataset(c, PIPELINE);

    struct trainer alone;
    trainer_open(&alone, c, ds, "alone", "fast", CACHE_BYTES, 0);
    alone.target = FAST_N;
    trainer_thread(&alone);
    assert_int_equal(alone.rc, 0);

    struct trainer fast, slow;
    trainer_open(&fast, c, ds, "pair", "fast", CACHE_BYTES, 0);
    /* One request at a time: what it has prefetched is small against what it reads. */
    trainer_open(&slow, c, ds, "pair", "slow", CACHE_BYTES, 1);
    fast.target = FAST_N;
    slow.target = FAST_N;
    slow.pause_us = 50;
    pthread_t tf, ts;
    assert_int_equal(pthread_create(&ts, NULL, trainer_thread, &slow), 0);
    assert_int_equal(pthread_create(&tf, NULL, trainer_thread, &fast), 0);
    assert_int_equal(pthread_join(tf, NULL), 0);
    atomic_store(&slow.stop, true);
    assert_int_equal(pthread_join(ts, NULL), 0);
    if (fast.rc || slow.rc)
        fail_msg("fast: %s; slow: %s", fast.err, slow.err);
    assert_int_equal(fast.n, FAST_N);

    struct run rf[MAX_TASKS], rs[MAX_TASKS], r1[MAX_TASKS];
    size_t nf = by_task(&fast, 0, rf), ns = by_task(&slow, 0, rs), n1 = by_task(&alone, 0, r1);
    assert_int_equal(nf, 2);
    assert_contiguous("fast trainer", rf, nf, -1);
    assert_contiguous("fast trainer alone", r1, n1, 0);
    size_t gaps = 0;
    for (size_t r = 0; r < ns; r++) {
        const struct run *f = run_of(rf, nf, rs[r].task);
        assert_non_null(f);
        for (size_t i = 1; i < rs[r].n; i++) {
            if (rs[r].v[i] <= rs[r].v[i - 1])
                fail_msg("slow trainer, task %" PRIu64 ": %" PRId64 " after %" PRId64, rs[r].task,
                         rs[r].v[i], rs[r].v[i - 1]);
            gaps += rs[r].v[i] != rs[r].v[i - 1] + 1;
        }
    }
    assert_true(slow.n > 0);
    assert_true(gaps > 0);
    print_message(
        "    fast trainer: %.0f elements/s alone, %.0f with a slow one (with/alone %.2f); "
        "slow trainer: %zu elements, %zu gaps\n",
        FAST_N / alone.seconds, FAST_N / fast.seconds, alone.seconds / fast.seconds, slow.n, gaps);
    free_runs(rf, nf);
    free_runs(rs, ns);
    free_runs(r1, n1);
    trainer_close(&slow);
    trainer_close(&fast);
    trainer_close(&alone);
    free(ds);
}

/* What the dispatcher, the library and the CLI refuse, word for word. */
static void test_refusals(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    static const char *const cases[][8] = {
        {"range(100)", "--job-name", "j", "--cross-trainer-cache", "--trainer-id", "a", NULL,
         "sluice: read: cross_trainer_cache needs an infinite pipeline: 'range(100)' ends; add "
         "repeat()\n"},
        {"range(10) | repeat() | take(5)", "--job-name", "j", "--cross-trainer-cache",
         "--trainer-id", "a", NULL,
         "sluice: read: cross_trainer_cache needs an infinite pipeline: 'range(10) | repeat() | "
         "take(5)' ends; add repeat()\n"},
        {PIPELINE, "--job-name", "j", "--cross-trainer-cache", "--trainer-id", "a",
         "--mode=distributed_epoch",
         "sluice: read: cross_trainer_cache cannot be used with mode distributed_epoch: its "
         "splits are handed out once, not shared between trainers\n"},
        {PIPELINE, "--cross-trainer-cache", "--trainer-id", "a", NULL, NULL, NULL,
         "sluice: usage: --cross-trainer-cache needs --job-name NAME\n"},
        {PIPELINE, "--job-name", "j", "--cross-trainer-cache", NULL, NULL, NULL,
         "sluice: usage: --cross-trainer-cache needs --trainer-id ID\n"},
        {PIPELINE, "--job-name", "j", "--trainer-id", "a", NULL, NULL,
         "sluice: usage: --trainer-id goes with --cross-trainer-cache\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const *k = cases[i];
        const char *argv[12];
        int n = 0;
        argv[n++] = "read";
        for (int j = 0; j < 7 && k[j]; j++) {
            if (strncmp(k[j], "--mode=", 7) == 0) {
                argv[n++] = "--mode";
                argv[n++] = k[j] + 7;
            } else {
                argv[n++] = k[j];
            }
        }
        argv[n++] = "--limit";
        argv[n++] = "1";
        while (n < 12)
            argv[n++] = NULL;
        char *out = NULL, *err = NULL;
        int rc = cluster_cli(c, &out, &err, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5],
                             argv[6], argv[7], argv[8], argv[9], argv[10], NULL);
        bool usage = strstr(k[7], "sluice: usage:") == k[7];
        assert_int_equal(rc, usage ? 2 : 1);
        assert_string_equal(out, "");
        assert_string_equal(err, k[7]);
        free(out);
        free(err);
    }

    /* The library checks the trainer id before asking anyone. */
    struct sluice_client *client;
    char err[SLUICE_ERRMSG_SIZE], disp[64];
    snprintf(disp, sizeof disp, "127.0.0.1:%d", c->port);
    struct sluice_client_options co = {.dispatcher = disp, .timeout_ms = WAIT_MS};
    assert_int_equal(sluice_client_open(&co, &client, err, sizeof err), 0);
    struct sluice_read_options ro = {
        .pipeline = PIPELINE, .job_name = "j", .cross_trainer_cache = true, .trainer_id = ""};
    struct sluice_iterator *it = NULL;
    assert_int_equal(sluice_iterator_open(client, &ro, &it, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "cross_trainer_cache needs a trainer id");

    /* A job with the cache is joined only with it, and with its bound. */
    ro.trainer_id = "t0";
    ro.job_name = "with";
    assert_int_equal(sluice_iterator_open(client, &ro, &it, err, sizeof err), 0);
    char *out = NULL, *cerr = NULL;
    assert_int_equal(
        cluster_cli(c, &out, &cerr, "read", PIPELINE, "--job-name", "with", "--limit", "1", NULL),
        1);
    assert_string_equal(cerr, "sluice: read: job 'with' exists with cross_trainer_cache on, not "
                              "off\n");
    free(out);
    free(cerr);
    assert_int_equal(cluster_cli(c, &out, &cerr, "read", PIPELINE, "--job-name", "with",
                                 "--cross-trainer-cache", "--trainer-id", "t1",
                                 "--cross-trainer-cache-bytes", "1048576", "--limit", "1", NULL),
                     1);
    assert_string_equal(cerr, "sluice: read: job 'with' exists with cross_trainer_cache_bytes "
                              "268435456, not 1048576\n");
    free(out);
    free(cerr);
    /* The status document shows the job's bound. */
    assert_int_equal(cluster_cli(c, &out, &cerr, "status", "--json", NULL), 0);
    assert_non_null(strstr(out, "\"name\":\"with\""));
    assert_non_null(strstr(out, "\"cross_trainer_cache_bytes\":268435456"));
    free(out);
    free(cerr);
    /* The same options join it, and read from the oldest element held: 0. */
    assert_int_equal(cluster_cli(c, &out, &cerr, "read", PIPELINE, "--job-name", "with",
                                 "--cross-trainer-cache", "--trainer-id", "t1", "--limit", "3",
                                 NULL),
                     0);
    assert_string_equal(out, "0\n1\n2\n");
    free(out);
    free(cerr);
    sluice_iterator_close(it);

    /* And a job without it only without it. */
    struct sluice_read_options plain = {.pipeline = PIPELINE, .job_name = "without"};
    assert_int_equal(sluice_iterator_open(client, &plain, &it, err, sizeof err), 0);
    assert_int_equal(cluster_cli(c, &out, &cerr, "read", PIPELINE, "--job-name", "without",
                                 "--cross-trainer-cache", "--trainer-id", "t1", "--limit", "1",
                                 NULL),
                     1);
    assert_string_equal(cerr, "sluice: read: job 'without' exists with cross_trainer_cache off, "
                              "not on\n");
    free(out);
    free(cerr);
    sluice_iterator_close(it);
    sluice_client_close(client);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_trainers_one_worker, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_two_trainers_two_workers, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_slow_trainer_skips, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, cluster_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, tmp_teardown);
    return rc;
}
