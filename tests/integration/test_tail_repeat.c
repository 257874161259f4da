/* A repeat in a local tail (`--local 'repeat(3)'`) reads the job's whole stream again, as a new
 * job per repetition, or a named job's next repetition: exact multisets through the CLI and the
 * C API, two readers sharing every repetition of a named job, batches across repetitions, each
 * repetition in the canonical order of a deterministic read, parallel_epochs, an empty dataset
 * under repeat() ending, a worker killed in the middle of a repetition, and the reads it cannot
 * serve exactly refused with their reason. Real dispatcher and workers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include "sluice/sluice.h"

#include <jansson.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 15000
#define READ_MS 60000

static const char *const short_timeouts[] = {"--worker-timeout-ms", "1000", "--client-timeout-ms",
                                             "2000", NULL};

static int setup(void **state)
{
    return (*state = cluster_new(short_timeouts, NULL, 0, 2)) ? 0 : -1;
}

static int teardown(void **state)
{
    int rc = cluster_free(*state);
    tmp_cleanup();
    return rc;
}

/* Whether two status values (strings or integers) are equal. */
static bool same_value(json_t *a, json_t *b)
{
    if (json_is_string(a) && json_is_string(b))
        return strcmp(json_string_value(a), json_string_value(b)) == 0;
    if (json_is_integer(a) && json_is_integer(b))
        return json_integer_value(a) == json_integer_value(b);
    return false;
}

/* The jobs of the dataset registered with pipeline: how many, how many of them active, and the
 * clients they still have. */
struct jobs_seen {
    int jobs, active, clients;
    long long finished, total; /* splits of the last active one (distributed_epoch) */
};

static struct jobs_seen jobs_of(json_t *doc, const char *pipeline)
{
    struct jobs_seen s = {0};
    json_t *datasets = json_object_get(doc, "datasets"), *jobs = json_object_get(doc, "jobs");
    assert_true(json_is_array(datasets) && json_is_array(jobs));
    json_t *id = NULL, *d, *j;
    size_t i;
    json_array_foreach(datasets, i, d)
    {
        const char *p = json_string_value(json_object_get(d, "pipeline"));
        if (p && strcmp(p, pipeline) == 0)
            id = json_object_get(d, "id");
    }
    if (!id)
        return s;
    json_array_foreach(jobs, i, j)
    {
        if (!same_value(json_object_get(j, "dataset_id"), id))
            continue;
        s.jobs++;
        const char *st = json_string_value(json_object_get(j, "state"));
        bool active = st && strcmp(st, "active") == 0;
        s.active += active;
        json_t *sp = json_object_get(j, "splits");
        if (active && json_is_object(sp) && json_is_integer(json_object_get(sp, "total"))) {
            s.finished = json_integer_value(json_object_get(sp, "finished"));
            s.total = json_integer_value(json_object_get(sp, "total"));
        }
        json_t *cl = json_object_get(j, "clients");
        s.clients += json_is_integer(cl) ? (int)json_integer_value(cl) : 0;
    }
    return s;
}

/* "0\n1\n...\n" for range(n), times times over in order. */
static char *in_order(long n, int times)
{
    size_t cap = (size_t)n * (size_t)times * 21 + 1, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    s[0] = '\0';
    for (int t = 0; t < times; t++)
        for (long v = 0; v < n; v++)
            len += (size_t)snprintf(s + len, cap - len, "%ld\n", v);
    return s;
}

/* ---- the CLI ----------------------------------------------------------------------------------
 */

static void test_cli_distributed_repeat(void **state)
{
    struct cluster *c = *state;
    const char *pipeline = "range(1000)";
    char *out = cluster_run(c, 0, NULL, "read", pipeline, "--mode", "distributed_epoch", "--local",
                            "repeat(3)", NULL);
    char *got = sorted_lines(out), *want = expected_range(1000, 3);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    /* A job per repetition, each released by its reader. */
    json_t *doc = cluster_status(c);
    struct jobs_seen s = jobs_of(doc, pipeline);
    json_decref(doc);
    assert_int_equal(s.jobs, 3);
    assert_int_equal(s.active, 0);
    assert_int_equal(s.clients, 0);
}

/* Batches run across the repetitions, as over the repeated stream. */
static void test_cli_repeat_batch(void **state)
{
    struct cluster *c = *state;
    char *out = cluster_run(c, 0, NULL, "read", "range(1000) | map(add, 0)", "--mode",
                            "distributed_epoch", "--local", "repeat(2) | batch(7)", NULL);
    /* 2000 elements: 285 batches of 7 and one of 5, holding each value exactly twice. */
    int full = 0, last = 0, lines = 0;
    size_t cap = 2000 * 12 + 1, len = 0;
    char *flat = malloc(cap);
    assert_non_null(flat);
    flat[0] = '\0';
    for (char *p = out; *p;) {
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        *nl = '\0';
        assert_true(p[0] == '[' && nl[-1] == ']');
        int n = 0;
        for (char *q = p + 1; q < nl - 1;) {
            char *end;
            long v = strtol(q, &end, 10);
            assert_true(end > q);
            len += (size_t)snprintf(flat + len, cap - len, "%ld\n", v);
            n++;
            q = end;
            if (*q == ',')
                q += 2;
        }
        full += n == 7;
        last = n;
        lines++;
        p = nl + 1;
    }
    assert_int_equal(lines, 286);
    assert_int_equal(full, 285);
    assert_int_equal(last, 5);
    char *got = sorted_lines(flat), *want = expected_range(1000, 2);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(flat);
    free(out);
    /* In the canonical order the batches are exactly the local run's. */
    out = cluster_run(c, 0, NULL, "read", "range(20)", "--mode", "distributed_epoch",
                      "--deterministic", "--local", "repeat(2) | batch(7)", NULL);
    assert_string_equal(out, "[0, 1, 2, 3, 4, 5, 6]\n"
                             "[7, 8, 9, 10, 11, 12, 13]\n"
                             "[14, 15, 16, 17, 18, 19, 0]\n"
                             "[1, 2, 3, 4, 5, 6, 7]\n"
                             "[8, 9, 10, 11, 12, 13, 14]\n"
                             "[15, 16, 17, 18, 19]\n");
    free(out);
}

/* Each repetition of a deterministic read comes in the canonical order. */
static void test_cli_deterministic(void **state)
{
    struct cluster *c = *state;
    char *out =
        cluster_run(c, 0, NULL, "read", "range(500)", "--mode", "distributed_epoch",
                    "--deterministic", "--split-size", "16", "--local", "repeat(3)", NULL, NULL);
    char *want = in_order(500, 3);
    assert_string_equal(out, want);
    free(want);
    free(out);
}

/* parallel_epochs: every worker's copy, for every repetition. */
static void test_cli_parallel_epochs(void **state)
{
    struct cluster *c = *state;
    char *out = cluster_run(c, 0, NULL, "read", "range(300)", "--local", "repeat(2)", NULL, NULL,
                            NULL, NULL, NULL, NULL);
    char *got = sorted_lines(out), *want = expected_range(300, 4);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    /* A take before the repeat cuts each repetition short; its job is released early. */
    out = cluster_run(c, 0, NULL, "read", "range(300) | map(add, 1)", "--local",
                      "take(5) | repeat(3)", "--format", "count", NULL);
    assert_string_equal(out, "15\n");
    free(out);
    json_t *doc = cluster_status(c);
    struct jobs_seen s = jobs_of(doc, "range(300) | map(add, 1)");
    json_decref(doc);
    assert_int_equal(s.jobs, 3);
    assert_int_equal(s.clients, 0);
}

/* repeat() of an empty stream ends, as tf.data's does, after one empty repetition. */
static void test_cli_empty_endless(void **state)
{
    struct cluster *c = *state;
    long long t0 = now_ms();
    char *out = cluster_run(c, 0, NULL, "read", "range(0)", "--mode", "distributed_epoch",
                            "--local", "repeat()", "--format", "count", NULL, NULL);
    assert_string_equal(out, "0\n");
    free(out);
    out = cluster_run(c, 0, NULL, "read", "range(50) | filter(lt, 0)", "--local",
                      "map(add, 1) | repeat()", "--format", "count", NULL);
    assert_string_equal(out, "0\n");
    free(out);
    assert_true(now_ms() - t0 < READ_MS);
    json_t *doc = cluster_status(c);
    struct jobs_seen s = jobs_of(doc, "range(0)");
    json_decref(doc);
    assert_int_equal(s.jobs, 1);
}

/* A named job is read again as its next repetition: one job, whose iteration is its third
 * repetition once the read is over, released by its reader. */
static void test_cli_named_job_repeat(void **state)
{
    struct cluster *c = *state;
    const char *pipeline = "range(500) | map(mul, 1)";
    char *out = cluster_run(c, 0, NULL, "read", pipeline, "--mode", "distributed_epoch",
                            "--job-name", "shared", "--local", "map(add, 0) | repeat(3)", NULL);
    char *got = sorted_lines(out), *want = expected_range(500, 3);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    json_t *doc = cluster_status(c);
    struct jobs_seen s = jobs_of(doc, pipeline);
    json_t *jobs = json_object_get(doc, "jobs"), *j;
    size_t i;
    long long repetition = -1;
    json_array_foreach(jobs, i, j)
    {
        const char *name = json_string_value(json_object_get(j, "name"));
        if (name && strcmp(name, "shared") == 0)
            repetition = json_integer_value(json_object_get(j, "repetition"));
    }
    json_decref(doc);
    assert_int_equal(s.jobs, 1);
    assert_int_equal(s.clients, 0);
    assert_int_equal(repetition, 2);
}

/* ---- the C API --------------------------------------------------------------------------------
 */

static struct sluice_client *client_for(struct cluster *c)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_client *client = NULL;
    struct sluice_client_options co = {.dispatcher = c->dispatcher.addr, .timeout_ms = WAIT_MS};
    if (sluice_client_open(&co, &client, err, sizeof err) != 0)
        fail_msg("client: %s", err);
    return client;
}

static void test_api_repeat(void **state)
{
    struct cluster *c = *state;
    struct sluice_client *client = client_for(c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_read_options ro = {.pipeline = "range(1000) | map(mul, 1)",
                                     .mode = SLUICE_DISTRIBUTED_EPOCH,
                                     .local = "repeat(3)"};
    struct sluice_iterator *it = NULL;
    if (sluice_iterator_open(client, &ro, &it, err, sizeof err) != 0)
        fail_msg("open: %s", err);
    int seen[1000] = {0};
    long count = 0;
    int rc;
    const struct sluice_element *e;
    while ((rc = sluice_iterator_next(it, &e, WAIT_MS, err, sizeof err)) == 1) {
        size_t nb;
        const int64_t *v = sluice_element_data(e, 0, &nb);
        assert_int_equal(nb, sizeof *v);
        assert_true(*v >= 0 && *v < 1000);
        seen[*v]++;
        count++;
    }
    if (rc != 0)
        fail_msg("next: %s", err);
    assert_int_equal(count, 3000);
    for (int v = 0; v < 1000; v++)
        assert_int_equal(seen[v], 3);
    /* After the end the read stays ended. */
    assert_int_equal(sluice_iterator_next(it, &e, WAIT_MS, err, sizeof err), 0);
    /* Progress counts the elements of every repetition, and no splits. */
    struct sluice_read_progress p;
    assert_int_equal(sluice_iterator_progress(it, &p), 0);
    assert_int_equal(p.elements, 3000);
    assert_int_equal(p.splits_done, 0);
    assert_int_equal(p.splits_total, 0);
    uint8_t *bytes = NULL;
    size_t len = 0;
    assert_int_equal(sluice_iterator_save(it, &bytes, &len, err, sizeof err),
                     SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "a read with operations run in the reader (a local tail, or a "
                             "dataset whose operations run partly in the reader) cannot be "
                             "checkpointed: they hold elements its position cannot describe");
    assert_null(bytes);
    sluice_iterator_close(it);

    /* Closing in the middle of a repetition releases it. */
    ro.pipeline = "range(100000) | map(add, 0)";
    ro.local = "repeat()";
    assert_int_equal(sluice_iterator_open(client, &ro, &it, err, sizeof err), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(sluice_iterator_next(it, &e, WAIT_MS, err, sizeof err), 1);
    char why[SLUICE_ERRMSG_SIZE];
    assert_true(sluice_iterator_waiting(it, why, sizeof why) > 0);
    sluice_iterator_close(it);
    sluice_client_close(client);
    long long t0 = now_ms();
    struct jobs_seen s;
    for (;;) {
        json_t *doc = cluster_status(c);
        s = jobs_of(doc, "range(100000) | map(add, 0)");
        json_decref(doc);
        if (s.clients == 0 || now_ms() - t0 > WAIT_MS)
            break;
        usleep(50 * 1000);
    }
    assert_int_equal(s.jobs, 1);
    assert_int_equal(s.clients, 0);
}

/* Two readers of one named job, each repeating it three times: every repetition is shared
 * between them as one pass is, so together they get every element exactly three times, and the
 * one that finishes a pass first waits for the other before the next begins. */
struct shared_reader {
    struct sluice_client *client;
    const char *pipeline;
    long seen[2000];
    long count;
    int rc;
    bool slow;     /* pauses now and then, so the other reader waits for it */
    long pause_at; /* pauses 3 s once, after this many elements (0: never) */
    const char *job_name;
    char err[SLUICE_ERRMSG_SIZE];
};

static void *shared_read(void *arg)
{
    struct shared_reader *r = arg;
    struct sluice_read_options ro = {.pipeline = r->pipeline,
                                     .mode = SLUICE_DISTRIBUTED_EPOCH,
                                     .job_name = r->job_name,
                                     .local = "repeat(3)"};
    struct sluice_iterator *it = NULL;
    r->rc = sluice_iterator_open(r->client, &ro, &it, r->err, sizeof r->err);
    if (r->rc != 0)
        return NULL;
    const struct sluice_element *e;
    while ((r->rc = sluice_iterator_next(it, &e, READ_MS, r->err, sizeof r->err)) == 1) {
        size_t nb;
        const int64_t *v = sluice_element_data(e, 0, &nb);
        if (nb != sizeof *v || *v < 0 || *v >= 2000) {
            r->rc = -1;
            snprintf(r->err, sizeof r->err, "unexpected element");
            break;
        }
        r->seen[*v]++;
        r->count++;
        if (r->slow && r->count % 50 == 0)
            usleep(2000);
        if (r->pause_at && r->count == r->pause_at)
            usleep(3000 * 1000);
    }
    sluice_iterator_close(it);
    return NULL;
}

/* Runs two readers of job_name over range-like pipeline of n values (slow: the second pauses
 * now and then; pause_at: the second pauses 3 s once) and checks that together they read every
 * value exactly three times. */
static void read_shared_thrice(struct cluster *c, const char *pipeline, long n,
                               const char *job_name, bool slow, long pause_at)
{
    static struct shared_reader r[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].client = client_for(c);
        r[i].pipeline = pipeline;
        r[i].job_name = job_name;
        r[i].slow = slow && i == 1;
        r[i].pause_at = i == 1 ? pause_at : 0;
        assert_int_equal(pthread_create(&th[i], NULL, shared_read, &r[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        if (r[i].rc != 0)
            fail_msg("reader %d: %d: %s", i, r[i].rc, r[i].err);
        sluice_client_close(r[i].client);
    }
    assert_int_equal(r[0].count + r[1].count, 3 * n);
    for (long v = 0; v < n; v++) {
        if (r[0].seen[v] + r[1].seen[v] != 3)
            fail_msg("value %ld read %ld + %ld times", v, r[0].seen[v], r[1].seen[v]);
    }
}

static void test_api_shared_repeat(void **state)
{
    struct cluster *c = *state;
    const char *pipeline = "range(2000) | map(add, 7) | map(add, -7)";
    read_shared_thrice(c, pipeline, 2000, "twice-shared", true, 0);
    json_t *doc = cluster_status(c);
    struct jobs_seen s = jobs_of(doc, pipeline);
    json_decref(doc);
    assert_int_equal(s.jobs, 1);
    assert_int_equal(s.clients, 0);
}

/* One reader holds the first repetition for 3 s while the other, done with it, waits to read the
 * second (backing off meanwhile); the slow one then reads the whole short second repetition
 * before the other's next try. The job must not move on to the third before the waiting reader
 * has joined the second (it failed with "repetition 1 was read without this reader"). */
static void test_api_shared_repeat_waiter(void **state)
{
    read_shared_thrice(*state, "range(40)", 40, "waits-for-all", false, 5);
}

static void test_api_refusals(void **state)
{
    struct cluster *c = *state;
    struct sluice_client *client = client_for(c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_iterator *it = NULL;
    struct sluice_read_options ro = {
        .pipeline = "range(10)", .mode = SLUICE_DISTRIBUTED_EPOCH, .job_name = "j"};
    /* repeat(1) re-reads nothing and is fine in a shared job. */
    ro.local = "repeat(1)";
    assert_int_equal(sluice_iterator_open(client, &ro, &it, err, sizeof err), 0);
    const struct sluice_element *e;
    int n = 0;
    while (sluice_iterator_next(it, &e, WAIT_MS, err, sizeof err) == 1)
        n++;
    assert_int_equal(n, 10);
    sluice_iterator_close(it);
    /* A checkpoint cannot restore a read with a local tail. */
    ro.job_name = NULL;
    ro.local = NULL;
    assert_int_equal(sluice_iterator_open(client, &ro, &it, err, sizeof err), 0);
    assert_int_equal(sluice_iterator_next(it, &e, WAIT_MS, err, sizeof err), 1);
    uint8_t *ck = NULL;
    size_t cklen = 0;
    assert_int_equal(sluice_iterator_save(it, &ck, &cklen, err, sizeof err), 0);
    sluice_iterator_close(it);
    ro.local = "repeat(2)";
    ro.restore = ck;
    ro.restore_len = cklen;
    assert_int_equal(sluice_iterator_open(client, &ro, &it, err, sizeof err),
                     SLUICE_ERR_UNSUPPORTED);
    assert_null(it);
    assert_string_equal(err, "a checkpoint cannot restore a read with operations run in the "
                             "reader (a local tail, or a dataset whose operations run partly in "
                             "the reader)");
    free(ck);
    sluice_client_close(client);
}

/* ---- a worker killed in the middle of a repetition ---------------------------------------------
 */

static void test_worker_killed(void **state)
{
    struct cluster *c = *state;
    int w = cluster_add_worker(c);
    assert_true(w >= 0);
    const char *pipeline = "range(2000) | map(wait_us, 1000)";
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", pipeline, "--mode", "distributed_epoch",
                                       "--local", "repeat(3)", NULL),
                     0);
    /* Into the second repetition, a quarter of its splits done. */
    long long t0 = now_ms();
    struct jobs_seen s;
    for (;;) {
        json_t *doc = cluster_status(c);
        s = jobs_of(doc, pipeline);
        json_decref(doc);
        if ((s.jobs >= 2 && s.total > 0 && 4 * s.finished >= s.total) || now_ms() - t0 > READ_MS)
            break;
        usleep(20 * 1000);
    }
    printf("    the kill lands in repetition %d with %lld of %lld splits finished\n", s.jobs,
           s.finished, s.total);
    fflush(stdout);
    assert_true(s.jobs >= 2 && s.total > 0 && 4 * s.finished >= s.total);
    assert_true(s.finished < s.total);
    assert_int_equal(proc_wait(&r, 0), -2);
    assert_int_equal(proc_stop(&c->workers[w], SIGKILL, WAIT_MS), 128 + SIGKILL);
    char *out = proc_read_all(&r, READ_MS);
    int rc = proc_wait(&r, WAIT_MS);
    if (rc != 0)
        proc_stop(&r, SIGKILL, WAIT_MS);
    assert_int_equal(rc, 0);
    char *got = sorted_lines(out), *want = expected_range(2000, 3);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
}

/* ---- the dispatcher gone between repetitions ----------------------------------------------------
 */

/* Reads of take(1) | repeat() spend most of their time opening repetitions. With the dispatcher
 * killed, the next repetition cannot be opened; closing the read (C API) and Ctrl-C (CLI) still
 * end it at once, instead of waiting for a dispatcher that may never come back. */
static void test_dispatcher_gone(void **state)
{
    struct cluster *c = *state;
    struct sluice_client *client = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_client_options co = {.dispatcher = c->dispatcher.addr}; /* no timeout */
    assert_int_equal(sluice_client_open(&co, &client, err, sizeof err), 0);
    struct sluice_read_options ro = {.pipeline = "range(10) | map(mul, 2)",
                                     .mode = SLUICE_PARALLEL_EPOCHS,
                                     .local = "take(1) | repeat()"};
    struct sluice_iterator *it = NULL;
    if (sluice_iterator_open(client, &ro, &it, err, sizeof err) != 0)
        fail_msg("open: %s", err);
    const struct sluice_element *e;
    for (int i = 0; i < 5; i++)
        assert_int_equal(sluice_iterator_next(it, &e, WAIT_MS, err, sizeof err), 1);
    struct proc r;
    /* Each repetition waits 20 ms for its element: a repetition is a job with a task on every
     * worker, and a worker admits at most 256 unfinished tasks, which repetitions of a few
     * microseconds (their jobs collected only after --job-gc-timeout-ms) would exhaust. */
    assert_int_equal(cluster_cli_spawn(c, &r, "read",
                                       "range(10) | map(wait_us, 20000) | map(mul, 3)", "--local",
                                       "take(1) | repeat()", "--format", "count", NULL),
                     0);
    usleep(1000 * 1000);
    int early = proc_wait(&r, 0);
    if (early != -2) {
        char *o = proc_read_all(&r, WAIT_MS);
        printf("    the CLI read ended early (%d), printing: %s\n", early, o);
        free(o);
        print_file(r.log, 50);
    }
    assert_int_equal(early, -2);
    assert_int_equal(proc_stop(&c->dispatcher, SIGKILL, WAIT_MS), 128 + SIGKILL);
    /* Whatever the readers were doing, they now wait for the dispatcher. */
    int rc;
    long long t0 = now_ms();
    while ((rc = sluice_iterator_next(it, &e, 100, err, sizeof err)) == 1 &&
           now_ms() - t0 < WAIT_MS)
        ;
    assert_int_equal(rc, SLUICE_ERR_TIMEOUT);
    usleep(500 * 1000);
    t0 = now_ms();
    sluice_iterator_close(it);
    long long closed = now_ms() - t0;
    t0 = now_ms();
    kill(r.pid, SIGINT);
    int status = proc_wait(&r, WAIT_MS);
    long long interrupted = now_ms() - t0;
    printf("    closed in %lld ms, interrupted in %lld ms\n", closed, interrupted);
    assert_int_equal(status, 128 + SIGINT);
    assert_true(closed < 1000);
    assert_true(interrupted < 1000);
    sluice_client_close(client);
    assert_int_equal(cluster_restart_dispatcher(c, SIGTERM), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_distributed_repeat),
        cmocka_unit_test(test_cli_repeat_batch),
        cmocka_unit_test(test_cli_deterministic),
        cmocka_unit_test(test_cli_parallel_epochs),
        cmocka_unit_test(test_cli_empty_endless),
        cmocka_unit_test(test_cli_named_job_repeat),
        cmocka_unit_test(test_api_shared_repeat),
        cmocka_unit_test(test_api_shared_repeat_waiter),
        cmocka_unit_test(test_api_repeat),
        cmocka_unit_test(test_api_refusals),
        cmocka_unit_test(test_worker_killed),
        cmocka_unit_test(test_dispatcher_gone),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
