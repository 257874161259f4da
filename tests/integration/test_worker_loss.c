/* parallel_epochs reads through the loss of workers, end to end: a real dispatcher and workers on
 * 127.0.0.1, read by `sluice read` and by the library in this process.
 *
 *   - 4 of 5 workers killed in the middle of a read with max_outstanding_requests 1 and
 *     --limit 3000: the read gets its 3000 elements from the survivor and exits 0;
 *   - the one worker of a read of range(400) killed and restarted, on the same port and on a new
 *     one: the read waits meanwhile (saying why), takes the restarted worker's new copy from 0 in
 *     order, and ends normally; the lost copy is the prefix it had, counted as cut short;
 *   - the same with whole copies asked for (C and `--whole-copies`): the read fails naming the
 *     lost task and its worker;
 *   - an endless read through a rolling restart of all its workers keeps delivering, each new
 *     copy from its start, and the copies cut short reach the dispatcher's status and metrics.
 *
 * Every wait is bounded. SLUICE_TEST_FILTER selects tests by cmocka's wildcard syntax. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/scrape.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include "sluice/sluice.h"

#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 30000
#define READ_MS 120000

/* The dispatcher's metrics address (HOST:PORT), read at its start. */
static char metrics[128];

static int setup(void **state)
{
    /* The metrics endpoint, for the copies cut short (test_rolling_restart). */
    static const char *const args[] = {"--metrics-port", "0", NULL};
    struct cluster *c = cluster_new(args, NULL, 0, 0);
    if (!c)
        return -1;
    if (cluster_read_address(&c->dispatcher, " metrics on ", metrics, sizeof metrics, WAIT_MS)) {
        cluster_free(c);
        return -1;
    }
    *state = c;
    return 0;
}

/* The port of a worker's address. */
static int port_of(const struct proc *p)
{
    const char *colon = strrchr(p->addr, ':');
    return colon ? atoi(colon + 1) : -1;
}

/* ---- the status document --------------------------------------------------------------------- */

/* The value of metric name (no labels) in the dispatcher's exposition, or -1. */
static double scrape_metric(const char *addr, const char *name)
{
    char *resp = NULL;
    if (scrape_request(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                       WAIT_MS, &resp) != 0)
        return -1;
    double v = -1;
    const char *body = scrape_body(resp);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = body ? strstr(body, key) : NULL;
    if (p)
        v = strtod(p + strlen(key), NULL);
    free(resp);
    return v;
}

/* The "copies_cut" of the status document's only job, or -1 when it has none. */
static long long status_copies_cut(struct cluster *c)
{
    json_t *doc = cluster_status(c);
    json_t *jobs = json_object_get(doc, "jobs");
    json_t *v =
        json_array_size(jobs) == 1 ? json_object_get(json_array_get(jobs, 0), "copies_cut") : NULL;
    long long n = json_is_integer(v) ? json_integer_value(v) : -1;
    json_decref(doc);
    return n;
}

/* ---- a read in this process ------------------------------------------------------------------ */

struct reader {
    struct sluice_client *client;
    struct sluice_iterator *it;
    char err[SLUICE_ERRMSG_SIZE];
};

static void reader_open(struct reader *r, struct cluster *c, const char *pipeline,
                        bool whole_copies)
{
    char disp[64];
    snprintf(disp, sizeof disp, "127.0.0.1:%d", c->port);
    struct sluice_client_options co = {.dispatcher = disp, .timeout_ms = WAIT_MS};
    memset(r, 0, sizeof *r);
    if (sluice_client_open(&co, &r->client, r->err, sizeof r->err) != 0)
        fail_msg("client: %s", r->err);
    struct sluice_read_options ro = {
        .pipeline = pipeline, .mode = SLUICE_PARALLEL_EPOCHS, .whole_copies = whole_copies};
    if (sluice_iterator_open(r->client, &ro, &r->it, r->err, sizeof r->err) != 0)
        fail_msg("open: %s", r->err);
}

static void reader_close(struct reader *r)
{
    sluice_iterator_close(r->it);
    sluice_client_close(r->client);
}

/* The next element (an int64) and its task. Returns 1, 0 at the end, or the error (r->err).
 * SLUICE_ERR_TIMEOUT after timeout_ms without an element. */
static int reader_next(struct reader *r, uint32_t timeout_ms, int64_t *value, uint64_t *task)
{
    const struct sluice_element *e;
    int rc = sluice_iterator_next(r->it, &e, timeout_ms, r->err, sizeof r->err);
    if (rc != 1)
        return rc;
    size_t len = 0;
    const void *data = sluice_element_data(e, 0, &len);
    assert_int_equal(sluice_element_dtype(e, 0), SLUICE_INT64);
    assert_int_equal(len, 8);
    memcpy(value, data, 8);
    assert_int_equal(sluice_iterator_task(r->it, task), 0);
    return 1;
}

static uint64_t copies_cut(struct reader *r)
{
    struct sluice_read_progress p;
    assert_int_equal(sluice_iterator_progress(r->it, &p), 0);
    return p.copies_cut;
}

/* What one task delivered: its values must be its copy's prefix, in order. */
struct copy {
    uint64_t task;
    int64_t next; /* the value expected next, and the count so far */
};

#define MAX_COPIES 16

struct copies {
    struct copy v[MAX_COPIES];
    size_t n;
};

/* Records value from task, asserting it continues that task's copy: 0, 1, 2, ... modulo period
 * (a copy that repeats). Returns the task's copy. */
static struct copy *copies_add(struct copies *cs, uint64_t task, int64_t value, int64_t period)
{
    struct copy *k = NULL;
    for (size_t i = 0; i < cs->n && !k; i++)
        if (cs->v[i].task == task)
            k = &cs->v[i];
    if (!k) {
        assert_true(cs->n < MAX_COPIES);
        k = &cs->v[cs->n++];
        *k = (struct copy){.task = task};
    }
    if (value != k->next % period)
        fail_msg("task %" PRIu64 ": value %" PRId64 " after %" PRId64 " values, expected %" PRId64,
                 task, value, k->next, k->next % period);
    k->next++;
    return k;
}

/* ---- 4 of 5 workers killed ------------------------------------------------------------------- */

/* Every element waits 7 ms: the survivor alone needs many seconds for the rest of the 3000
 * (about 14 s from the kill to the end here), far past the dispatcher's eviction of the killed
 * workers (--worker-timeout-ms 2000): the read must go on through the loss of their copies. */
#define FIVE_PIPELINE "range(1000000) | map(wait_us, 7000)"

static void test_kill_four_of_five(void **state)
{
    struct cluster *c = *state;
    for (int i = 0; i < 5; i++)
        assert_true(cluster_add_worker(c) >= 0);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", FIVE_PIPELINE, "--job-name", "five",
                                       "--max-outstanding-requests", "1", "--limit", "3000", NULL),
                     0);
    json_decref(cluster_wait_job(c, "five", 5, WAIT_MS));
    /* Long enough for the reader to have part of every copy. */
    usleep(1500 * 1000);
    for (int i = 1; i < 5; i++)
        assert_int_equal(proc_stop(&c->workers[i], SIGKILL, WAIT_MS), 128 + SIGKILL);
    char *out = proc_read_all(&r, READ_MS);
    int rc = proc_wait(&r, 5000);
    char *err = read_text_file(r.log);
    size_t lines = count_lines(out);
    printf("    exit %d, %zu lines; stderr: %s\n", rc, lines, err);
    assert_int_equal(rc, 0);
    assert_int_equal(lines, 3000);
    for (const char *p = out; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        assert_true(end != p && *end == '\n' && v >= 0 && v < 1000000);
        p = end + 1;
    }
    /* The killed workers' copies were cut short, and said so (each that had sent the reader
     * something: all four, unless one had not been asked yet). */
    const char *said = strstr(err, "sluice: read: ");
    assert_non_null(said);
    int cut = 0;
    char rest[128] = "";
    assert_int_equal(sscanf(said, "sluice: read: %d cop%127[^\n]", &cut, rest), 2);
    assert_true(cut >= 1 && cut <= 4);
    assert_string_equal(rest, cut == 1 ? "y cut short: its worker was lost in the middle "
                                         "(--whole-copies fails the read instead)"
                                       : "ies cut short: their workers were lost in the middle "
                                         "(--whole-copies fails the read instead)");
    free(err);
    free(out);
}

/* ---- a worker restarted ---------------------------------------------------------------------- */

/* range(400) at 10 ms an element (a wait, no CPU): a copy takes seconds, so the worker is killed
 * in the middle of it. */
#define COPY_PIPELINE "range(400) | map(wait_us, 10000)"
#define COPY_N 400

/* Reads until the reader has k elements, all from one task, 0 .. k-1. Returns that task. */
static uint64_t read_prefix(struct reader *r, struct copies *cs, int64_t k)
{
    uint64_t task = 0;
    for (int64_t i = 0; i < k; i++) {
        int64_t v;
        int rc = reader_next(r, WAIT_MS, &v, &task);
        if (rc != 1)
            fail_msg("element %" PRId64 ": %d %s", i, rc, r->err);
        copies_add(cs, task, v, COPY_N);
    }
    assert_int_equal(cs->n, 1);
    return task;
}

/* Reads to the end of the read; every element continues its task's copy. */
static void read_to_end(struct reader *r, struct copies *cs)
{
    long long t0 = now_ms();
    for (;;) {
        int64_t v;
        uint64_t task;
        int rc = reader_next(r, WAIT_MS, &v, &task);
        if (rc == 0)
            return;
        if (rc != 1)
            fail_msg("read: %d %s", rc, r->err);
        copies_add(cs, task, v, COPY_N);
        if (now_ms() - t0 > READ_MS)
            fail_msg("the read did not end within %d ms", READ_MS);
    }
}

/* The one worker of a read of range(400) is killed after 20 elements. While no worker is left
 * the read waits (it must not end: the dispatcher has not said its tasks ended) and says why;
 * then a worker is started (on the same port, or a new one) and its copy is read from 0 in
 * order, to the end of the read. */
static void restart_one(struct cluster *c, bool same_port)
{
    assert_true(cluster_add_worker(c) >= 0);
    int port = port_of(&c->workers[0]);
    struct reader r;
    reader_open(&r, c, COPY_PIPELINE, false);
    struct copies cs = {0};
    uint64_t lost = read_prefix(&r, &cs, 20);
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);

    /* No worker left: the read waits, and says so once the dispatcher dropped the task. */
    long long t0 = now_ms();
    char why[SLUICE_ERRMSG_SIZE] = "";
    const char *want = "no worker left (1 copy cut short); waiting for a worker to register";
    for (;;) {
        int64_t v;
        uint64_t task;
        int rc = reader_next(&r, 100, &v, &task);
        if (rc == 1) {
            copies_add(&cs, task, v, COPY_N); /* what the worker had sent before it died */
            continue;
        }
        if (rc != SLUICE_ERR_TIMEOUT)
            fail_msg("the read did not wait for a worker: %d %s", rc, r.err);
        assert_true(sluice_iterator_waiting(r.it, why, sizeof why) > 0);
        const char *tail = strstr(why, ": ");
        if (strncmp(why, "job ", 4) == 0 && tail && strcmp(tail + 2, want) == 0)
            break;
        if (now_ms() - t0 > WAIT_MS)
            fail_msg("waiting reason: \"%s\"", why);
    }
    printf("    waiting: %s\n", why);
    assert_int_equal(copies_cut(&r), 1);
    int64_t had = cs.v[0].next;
    assert_true(had >= 20 && had < COPY_N);

    assert_true(cluster_add_worker_on(c, same_port ? port : 0) >= 0);
    if (same_port)
        assert_int_equal(port_of(&c->workers[1]), port);
    read_to_end(&r, &cs);
    /* The lost copy's prefix, then the new task's whole copy from 0 in order. */
    assert_int_equal(cs.n, 2);
    assert_true(cs.v[0].task == lost && cs.v[0].next == had);
    assert_true(cs.v[1].task != lost);
    assert_int_equal(cs.v[1].next, COPY_N);
    assert_int_equal(copies_cut(&r), 1);
    printf("    task %" PRIu64 " cut after %" PRId64 " elements, task %" PRIu64 " whole\n", lost,
           had, cs.v[1].task);
    reader_close(&r);
    /* The dispatcher heard of it from the reader. */
    assert_int_equal(scrape_metric(metrics, "sluice_client_copies_cut_total"), 1);
    assert_int_equal(status_copies_cut(c), 1);
}

static void test_restart_same_port(void **state)
{
    restart_one(*state, true);
}

static void test_restart_new_port(void **state)
{
    restart_one(*state, false);
}

/* With whole copies asked for, the same loss fails the read, naming the lost task. */
static void test_whole_copies_restart(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    int port = port_of(&c->workers[0]);
    char addr[128];
    snprintf(addr, sizeof addr, "%s", c->workers[0].addr);
    struct reader r;
    reader_open(&r, c, COPY_PIPELINE, true);
    struct copies cs = {0};
    uint64_t lost = read_prefix(&r, &cs, 20);
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
    assert_true(cluster_add_worker_on(c, port) >= 0);
    int rc;
    long long t0 = now_ms();
    for (;;) {
        int64_t v;
        uint64_t task;
        rc = reader_next(&r, WAIT_MS, &v, &task);
        if (rc != 1)
            break;
        /* What the lost worker sent before it died, and maybe the start of the new task's copy
         * (read until the dispatcher drops the lost task). */
        copies_add(&cs, task, v, COPY_N);
        if (now_ms() - t0 > READ_MS)
            fail_msg("the read did not fail within %d ms", READ_MS);
    }
    printf("    %d: %s\n", rc, r.err);
    assert_int_equal(rc, SLUICE_ERR_TRUNCATED);
    char want[512];
    snprintf(want, sizeof want,
             "task %" PRIu64 " on worker %s: the worker was lost after %" PRId64
             " elements: its copy is incomplete",
             lost, addr, cs.v[0].next);
    assert_string_equal(r.err, want);
    assert_int_equal(cs.v[0].task, lost);
    assert_int_equal(copies_cut(&r), 0);
    reader_close(&r);
}

/* `sluice read --whole-copies` through the same restart: exit 1 naming the task. */
static void test_whole_copies_cli(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    int port = port_of(&c->workers[0]);
    char addr[128];
    snprintf(addr, sizeof addr, "%s", c->workers[0].addr);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", COPY_PIPELINE, "--job-name", "whole",
                                       "--whole-copies", NULL),
                     0);
    json_t *j = cluster_wait_job(c, "whole", 1, WAIT_MS);
    uint64_t lost = cluster_task_on(j, addr);
    json_decref(j);
    usleep(1000 * 1000);
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
    assert_true(cluster_add_worker_on(c, port) >= 0);
    char *out = proc_read_all(&r, READ_MS);
    int rc = proc_wait(&r, 5000);
    char *err = read_text_file(r.log);
    printf("    exit %d, %zu lines; stderr: %s", rc, count_lines(out), err);
    assert_int_equal(rc, 1);
    char want[256];
    snprintf(want, sizeof want,
             "sluice: read: task %" PRIu64 " on worker %s: the worker was lost after ", lost, addr);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, " elements: its copy is incomplete\n"));
    free(err);
    free(out);
}

/* ---- an endless read through a rolling restart ----------------------------------------------- */

#define ENDLESS_PIPELINE "range(1000) | repeat() | map(wait_us, 2000)"
#define ENDLESS_PERIOD 1000
#define ROLLING_WORKERS 3

static void test_rolling_restart(void **state)
{
    struct cluster *c = *state;
    for (int i = 0; i < ROLLING_WORKERS; i++)
        assert_true(cluster_add_worker(c) >= 0);
    struct reader r;
    reader_open(&r, c, ENDLESS_PIPELINE, false);
    struct copies cs = {0};
    long long t0 = now_ms();
    /* Until every worker's first copy delivered something. */
    while (cs.n < ROLLING_WORKERS) {
        int64_t v;
        uint64_t task;
        int rc = reader_next(&r, WAIT_MS, &v, &task);
        if (rc != 1)
            fail_msg("read: %d %s", rc, r.err);
        copies_add(&cs, task, v, ENDLESS_PERIOD);
        if (now_ms() - t0 > READ_MS)
            fail_msg("not every worker delivered within %d ms", READ_MS);
    }
    /* Each worker in turn: killed, started again on its port, and read from until its new
     * task delivered 50 elements; the others deliver all along. */
    for (int w = 0; w < ROLLING_WORKERS; w++) {
        int port = port_of(&c->workers[w]);
        assert_int_equal(proc_stop(&c->workers[w], SIGKILL, WAIT_MS), 128 + SIGKILL);
        assert_true(cluster_add_worker_on(c, port) >= 0);
        size_t before = cs.n;
        t0 = now_ms();
        for (;;) {
            int64_t v;
            uint64_t task;
            int rc = reader_next(&r, WAIT_MS, &v, &task);
            if (rc != 1)
                fail_msg("read after restarting worker %d: %d %s", w, rc, r.err);
            struct copy *k = copies_add(&cs, task, v, ENDLESS_PERIOD);
            if (cs.n > before && k == &cs.v[cs.n - 1] && k->next >= 50)
                break;
            if (now_ms() - t0 > READ_MS)
                fail_msg("worker %d's new copy did not deliver within %d ms", w, READ_MS);
        }
        assert_int_equal(cs.n, before + 1);
        printf("    worker %d restarted on port %d: new task %" PRIu64 "\n", w, port,
               cs.v[cs.n - 1].task);
    }
    /* Every lost copy is counted, by the reader and, from its heartbeats, by the dispatcher. */
    t0 = now_ms();
    for (;;) {
        int64_t v;
        uint64_t task;
        int rc = reader_next(&r, WAIT_MS, &v, &task);
        if (rc != 1)
            fail_msg("read: %d %s", rc, r.err);
        copies_add(&cs, task, v, ENDLESS_PERIOD);
        if (copies_cut(&r) == ROLLING_WORKERS &&
            scrape_metric(metrics, "sluice_client_copies_cut_total") == ROLLING_WORKERS &&
            status_copies_cut(c) == ROLLING_WORKERS)
            break;
        if (now_ms() - t0 > WAIT_MS)
            fail_msg("copies cut: reader %" PRIu64 ", metric %g, status %lld", copies_cut(&r),
                     scrape_metric(metrics, "sluice_client_copies_cut_total"),
                     status_copies_cut(c));
    }
    assert_int_equal(cs.n, 2 * ROLLING_WORKERS);
    reader_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kill_four_of_five, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_restart_same_port, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_restart_new_port, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_whole_copies_restart, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_whole_copies_cli, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_rolling_restart, setup, cluster_teardown_lax),
    };
    if (getenv("SLUICE_TEST_FILTER"))
        cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
