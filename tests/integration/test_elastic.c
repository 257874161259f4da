/* Elastic workers, end to end: real dispatcher, worker and `sluice` processes on 127.0.0.1 while
 * workers die (SIGKILL), drain (SIGTERM), come back at the same address, and readers vanish.
 *
 * The contract tested (docs/design.md §4): in distributed_epoch nothing is lost when workers die
 * or drain, and a single reader sees every element exactly once (the dispatcher hands the splits
 * of a lost worker out again; the reader drops what it already has). A draining worker exits 0
 * within its drain bound and leaves the dispatcher's worker list. A worker restarted at the same
 * address replaces the old one at once. A killed reader is released and its iteration collected.
 *
 * Every read of range(N) is tallied exactly: lost values, extra copies and lines that are no value
 * of the range; each reading test prints its tally. Every wait is bounded. SLUICE_TEST_FILTER
 * selects tests by cmocka's wildcard syntax. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/net.h"
#include "lib/tmp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 15000
/* How long a slowed read of a few seconds may take, kills and re-issued splits included. */
#define READ_MS 40000
/* How long a draining worker may take to exit: its --drain-timeout-ms plus slack. */
#define DRAIN_TIMEOUT_MS 5000
#define DRAIN_BOUND_MS (DRAIN_TIMEOUT_MS + 5000)

/* Short timeouts, so a killed worker is evicted (and its splits handed out again) within about
 * a second. Appended after the helper's own flags; the later value of a flag wins. */
static const char *const short_timeouts[] = {"--worker-timeout-ms",
                                             "1000",
                                             "--client-timeout-ms",
                                             "2000",
                                             "--job-gc-timeout-ms",
                                             "2000",
                                             "--log-level",
                                             "info",
                                             NULL};
static const char *const worker_flags[] = {"--drain-timeout-ms", "5000", NULL};

/* The relay of test_reader_reconnects_not_released while it runs (0: none), killed by teardown
 * when the test fails before it does. */
static pid_t relay_pid;

/* A fixture: a dispatcher started with dispatcher_args (NULL: none started) and workers that
 * will get worker_flags. */
static int setup_with(void **state, const char *const *dispatcher_args)
{
    struct cluster *c = calloc(1, sizeof(*c));
    if (!c)
        return -1;
    c->dispatcher_args = dispatcher_args;
    c->worker_args = worker_flags;
    if (dispatcher_args && cluster_start_dispatcher(c, 0, 0) != 0) {
        free(c);
        return -1;
    }
    *state = c;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, short_timeouts);
}

/* Client and worker timeouts of two minutes: a killed reader (worker) is released (removed)
 * because its connection closed, two seconds later (two heartbeat intervals, the least a grace
 * may be), or a read waiting on its splits fails at READ_MS. */
static int setup_grace(void **state)
{
    static const char *const args[] = {"--worker-timeout-ms",
                                       "120000",
                                       "--client-timeout-ms",
                                       "120000",
                                       "--disconnect-grace-ms",
                                       "2000",
                                       "--log-level",
                                       "info",
                                       NULL};
    return setup_with(state, args);
}

/* For a live reader whose connection breaks: a grace of 4 s (several of the reader's 1 s
 * heartbeats, so a reader slowed by a loaded machine still comes back in time), timeouts of two
 * minutes. */
static int setup_reconnect(void **state)
{
    static const char *const args[] = {"--worker-timeout-ms",
                                       "120000",
                                       "--client-timeout-ms",
                                       "120000",
                                       "--disconnect-grace-ms",
                                       "4000",
                                       "--log-level",
                                       "info",
                                       NULL};
    return setup_with(state, args);
}

/* The same with the grace off: only the (2 s) client timeout releases a killed reader. */
static int setup_no_grace(void **state)
{
    static const char *const args[] = {"--worker-timeout-ms",
                                       "1000",
                                       "--client-timeout-ms",
                                       "2000",
                                       "--disconnect-grace-ms",
                                       "0",
                                       "--log-level",
                                       "info",
                                       NULL};
    return setup_with(state, args);
}

static int setup_long_worker_timeout(void **state)
{
    /* A worker timeout of a minute: whatever replaces a worker within seconds is its new
     * incarnation at the same address, not the timeout. */
    static const char *const args[] = {"--worker-timeout-ms", "60000", "--log-level", "info", NULL};
    return setup_with(state, args);
}

static int setup_gc(void **state)
{
    static const char *const args[] = {"--worker-timeout-ms",
                                       "1000",
                                       "--client-timeout-ms",
                                       "1000",
                                       "--job-gc-timeout-ms",
                                       "1000",
                                       "--log-level",
                                       "info",
                                       NULL};
    return setup_with(state, args);
}

static int setup_no_dispatcher(void **state)
{
    return setup_with(state, NULL);
}

/* The readers a test started in the background; the teardown kills those a failed assertion
 * left running (a reader retries an absent dispatcher for ever). */
static struct proc readers[4];
static int nreaders;

static struct proc *new_reader(void)
{
    assert_true(nreaders < (int)(sizeof(readers) / sizeof(readers[0])));
    return &readers[nreaders++];
}

static int teardown(void **state)
{
    struct cluster *c = *state;
    if (relay_pid > 0) {
        kill(relay_pid, SIGKILL);
        waitpid(relay_pid, NULL, 0);
        relay_pid = 0;
    }
    for (int i = 0; i < nreaders; i++)
        proc_stop(&readers[i], SIGKILL, WAIT_MS);
    nreaders = 0;
    return cluster_free(c);
}

/* ---- tallies --------------------------------------------------------------------------------- */

/* Asserts that t is the tally of range(n) read exactly once. */
static void assert_tally_exact(struct tally t, long n)
{
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    assert_int_equal(t.lines, n);
}

/* Asserts that text is range(n), every value exactly once, in any order. Frees text (before
 * asserting, so a failure leaks nothing). */
static void assert_exactly_once(const char *what, char *text, long n)
{
    struct tally t = tally_range(text, n);
    free(text);
    print_tally(what, t);
    assert_tally_exact(t, n);
}

/* a followed by b; frees both. */
static char *concat(char *a, char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *out = malloc(la + lb + 1);
    assert_non_null(out);
    memcpy(out, a, la);
    memcpy(out + la, b, lb + 1);
    free(a);
    free(b);
    return out;
}

/* ---- reads ----------------------------------------------------------------------------------- */

/* Starts `sluice read` of range(n) slowed by wait_us microseconds per element, in
 * distributed_epoch, under job_name when not NULL. */
static void spawn_read(struct cluster *c, struct proc *r, long n, int wait_us, const char *job_name)
{
    char pipeline[128];
    snprintf(pipeline, sizeof(pipeline), "range(%ld) | map(wait_us, %d)", n, wait_us);
    if (job_name)
        assert_int_equal(cluster_cli_spawn(c, r, "read", pipeline, "--mode", "distributed_epoch",
                                           "--job-name", job_name, NULL),
                         0);
    else
        assert_int_equal(
            cluster_cli_spawn(c, r, "read", pipeline, "--mode", "distributed_epoch", NULL), 0);
}

/* Asserts the reader has not finished yet: a test that kills a worker after the read ended
 * proves nothing. */
static void assert_still_reading(struct proc *r)
{
    int rc = proc_wait(r, 0);
    if (rc != -2)
        fprintf(stderr, "the read ended (status %d) before the fault; make it longer\n", rc);
    assert_int_equal(rc, -2);
}

/* Reads r's output, waits for it to exit 0, and returns the output. The reader's stdout is fully
 * buffered (64 KiB), so its output is read only here, at the end; a read of range(4000) fits in
 * the pipe meanwhile. */
static char *finish_read(struct proc *r)
{
    char *out = proc_read_all(r, READ_MS);
    int rc = proc_wait(r, WAIT_MS);
    if (rc != 0) {
        fprintf(stderr, "sluice read exited with %d\n", rc);
        print_file(r->log, 100);
        proc_stop(r, SIGKILL, WAIT_MS);
    }
    assert_int_equal(rc, 0);
    return out;
}

/* ---- the status document --------------------------------------------------------------------- */

/* The number of workers listed at addr; the incarnation of the last one goes to inc. */
static int workers_at(json_t *doc, const char *addr, char *inc, size_t len)
{
    json_t *workers = json_object_get(doc, "workers");
    assert_true(json_is_array(workers));
    int n = 0;
    size_t i;
    json_t *w;
    json_array_foreach(workers, i, w)
    {
        const char *a = json_string_value(json_object_get(w, "address"));
        if (a && strcmp(a, addr) == 0) {
            n++;
            if (inc)
                snprintf(inc, len, "%s", json_string_value(json_object_get(w, "incarnation")));
        }
    }
    return n;
}

/* The job named name, borrowed from doc, or NULL. */
static json_t *job_named(json_t *doc, const char *name)
{
    json_t *jobs = json_object_get(doc, "jobs");
    assert_true(json_is_array(jobs));
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        const char *n = json_string_value(json_object_get(j, "name"));
        if (n && strcmp(n, name) == 0)
            return j;
    }
    return NULL;
}

static long long int_field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        fail_msg("\"%s\" is missing or not an integer", key);
    return (long long)json_integer_value(v);
}

/* The active job named name (NULL: the newest active anonymous one), borrowed from doc, or
 * NULL. */
static json_t *active_job(json_t *doc, const char *name)
{
    json_t *jobs = json_object_get(doc, "jobs");
    assert_true(json_is_array(jobs));
    json_t *found = NULL, *j;
    size_t i;
    json_array_foreach(jobs, i, j)
    {
        json_t *n = json_object_get(j, "name");
        if (name ? !json_is_string(n) || strcmp(json_string_value(n), name) != 0 : !json_is_null(n))
            continue;
        const char *st = json_string_value(json_object_get(j, "state"));
        if (st && strcmp(st, "active") == 0)
            found = j;
    }
    return found;
}

/* Waits until the active distributed_epoch job (as active_job finds it) has finished at least a
 * quarter of its splits, then asserts that the reader r is still going: whatever the caller does
 * next lands in the middle of the epoch. Watching the dispatcher, not r's output, because the
 * CLI writes its output in 64 KiB blocks. */
static void wait_mid_epoch(struct cluster *c, struct proc *r, const char *name)
{
    long long t0 = now_ms(), finished = 0, total = 0, leased = 0;
    for (;;) {
        json_t *doc = cluster_status(c);
        json_t *job = active_job(doc, name);
        json_t *splits = job ? json_object_get(job, "splits") : NULL;
        if (splits && json_is_integer(json_object_get(splits, "total"))) {
            finished = int_field(splits, "finished");
            total = int_field(splits, "total");
            leased = int_field(splits, "leased");
        }
        json_decref(doc);
        if ((total > 0 && 4 * finished >= total) || now_ms() - t0 > READ_MS)
            break;
        usleep(20 * 1000);
    }
    printf("    the fault lands with %lld of %lld splits finished, %lld leased\n", finished, total,
           leased);
    fflush(stdout);
    assert_true(total > 0 && 4 * finished >= total);
    assert_still_reading(r);
}

/* ---- workers killed and drained mid-epoch ---------------------------------------------------- */

static void test_kill_one_worker(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 3);
    struct proc *r = new_reader();
    spawn_read(c, r, 4000, 1000, NULL);
    wait_mid_epoch(c, r, NULL);
    assert_int_equal(proc_stop(&c->workers[1], SIGKILL, WAIT_MS), 128 + SIGKILL);
    assert_still_reading(r);
    char *out = finish_read(r);
    assert_exactly_once("one worker killed", out, 4000);
}

static void test_kill_two_workers(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 3);
    struct proc *r = new_reader();
    spawn_read(c, r, 4000, 1000, NULL);
    wait_mid_epoch(c, r, NULL);
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
    assert_int_equal(proc_stop(&c->workers[2], SIGKILL, WAIT_MS), 128 + SIGKILL);
    assert_still_reading(r);
    /* A fresh worker joins, so the work is not left to the one survivor alone. */
    cluster_add_workers(c, 1);
    char *out = finish_read(r);
    assert_exactly_once("two workers killed, one joined", out, 4000);
}

static void test_drain_worker(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 3);
    char addr[128];
    snprintf(addr, sizeof(addr), "%s", c->workers[1].addr);
    struct proc *r = new_reader();
    spawn_read(c, r, 4000, 1000, NULL);
    wait_mid_epoch(c, r, NULL);
    /* SIGTERM drains: the worker takes no more splits, hands back the ones it has not started,
     * serves what it holds, deregisters and exits 0, all within its drain timeout. */
    long long t0 = now_ms();
    int rc = proc_stop(&c->workers[1], SIGTERM, DRAIN_BOUND_MS);
    long long took = now_ms() - t0;
    /* Deregistered before it exited: the dispatcher no longer lists it. */
    json_t *doc = cluster_status(c);
    int listed = workers_at(doc, addr, NULL, 0);
    json_decref(doc);
    printf("    the drained worker exited with %d after %lld ms (%s), then listed %d time(s)\n", rc,
           took, rc >= 200 ? "killed at the bound" : "on its own", listed);
    if (rc != 0 && rc < 200)
        print_file(c->workers[1].log, 100); /* proc_stop printed it when it had to kill */
    /* The read is finished and tallied before the verdict on the worker, so a failing drain
     * still shows what it cost the reader. */
    char *out = finish_read(r);
    struct tally t = tally_range(out, 4000);
    free(out);
    print_tally("one worker drained", t);
    assert_int_equal(rc, 0);
    assert_true(took <= DRAIN_BOUND_MS);
    assert_int_equal(listed, 0);
    assert_tally_exact(t, 4000);
}

/* ---- a worker back at the same address ------------------------------------------------------- */

static void test_restart_same_address(void **state)
{
    struct cluster *c = *state;
    static char port[16];
    snprintf(port, sizeof(port), "%d", free_port());
    static const char *const pinned[] = {"--port", port, "--drain-timeout-ms", "5000", NULL};
    c->worker_args = pinned;
    cluster_add_workers(c, 1);
    char addr[128], inc[64] = "", inc2[64] = "";
    snprintf(addr, sizeof(addr), "%s", c->workers[0].addr);

    char *out = NULL, *err = NULL;
    assert_int_equal(
        cluster_cli(c, &out, &err, "read", "range(100)", "--mode", "distributed_epoch", NULL), 0);
    free(err);
    assert_exactly_once("before the restart", out, 100);
    json_t *doc = cluster_status(c);
    assert_int_equal(workers_at(doc, addr, inc, sizeof(inc)), 1);
    json_decref(doc);

    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
    long long t0 = now_ms();
    cluster_add_workers(c, 1);
    assert_string_equal(c->workers[1].addr, addr);
    /* Exactly one worker at that address, the new incarnation, within a few seconds. */
    int at = -1;
    size_t total = 0;
    for (;;) {
        doc = cluster_status(c);
        at = workers_at(doc, addr, inc2, sizeof(inc2));
        total = json_array_size(json_object_get(doc, "workers"));
        json_decref(doc);
        if ((at == 1 && total == 1 && strcmp(inc2, inc) != 0) || now_ms() - t0 > 5000)
            break;
        usleep(50 * 1000);
    }
    printf("    replaced after %lld ms: %d worker(s) at %s, %zu in all, incarnation %s -> %s\n",
           now_ms() - t0, at, addr, total, inc, inc2);
    assert_int_equal(at, 1);
    assert_int_equal(total, 1);
    assert_string_not_equal(inc2, inc);

    assert_int_equal(
        cluster_cli(c, &out, &err, "read", "range(2000)", "--mode", "distributed_epoch", NULL), 0);
    free(err);
    assert_exactly_once("after the restart", out, 2000);
}

/* ---- a killed reader, its job collected, the name used again --------------------------------- */

/* Twice the client and collection timeouts of setup_gc. */
#define GC_BOUND_MS (2 * (1000 + 1000))
#define ENDLESS "range(10) | repeat() | map(wait_us, 200)"

/* SIGKILLs a reader of the endless pipeline under job name and asserts its iteration is
 * garbage_collected within twice the client and collection timeouts. Returns the collected
 * iteration id. */
static long long kill_reader_until_collected(struct cluster *c, const char *name)
{
    struct proc *r = new_reader();
    assert_int_equal(cluster_cli_spawn(c, r, "read", ENDLESS, "--job-name", name, NULL), 0);
    /* The reader holds the job: it is active with one client. */
    long long t0 = now_ms(), clients = 0, iteration = 0;
    for (;;) {
        json_t *doc = cluster_status(c);
        json_t *job = active_job(doc, name);
        if (job) {
            clients = int_field(job, "clients");
            iteration = int_field(job, "iteration_id");
        }
        json_decref(doc);
        if (clients == 1 || now_ms() - t0 > WAIT_MS)
            break;
        usleep(20 * 1000);
    }
    assert_int_equal(clients, 1);
    assert_still_reading(r);

    assert_int_equal(proc_stop(r, SIGKILL, WAIT_MS), 128 + SIGKILL);
    t0 = now_ms();
    char state[64] = "";
    for (;;) {
        json_t *doc = cluster_status(c);
        json_t *job = job_named(doc, name);
        assert_non_null(job);
        snprintf(state, sizeof(state), "%s", json_string_value(json_object_get(job, "state")));
        json_decref(doc);
        if (strcmp(state, "garbage_collected") == 0 || now_ms() - t0 > GC_BOUND_MS)
            break;
        usleep(50 * 1000);
    }
    printf("    job '%s' is %s %lld ms after its reader was killed\n", name, state, now_ms() - t0);
    assert_string_equal(state, "garbage_collected");
    return iteration;
}

static void test_killed_reader_job_collected_name_reused(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    kill_reader_until_collected(c, "gc");
    /* The collected name serves a new, finite read. */
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", "range(30)", "--job-name", "gc", NULL);
    if (rc != 0) {
        fprintf(stderr, "the read under the collected name exited with %d: %s", rc, err);
        free(out);
        free(err);
    }
    assert_int_equal(rc, 0);
    free(err);
    assert_exactly_once("under the collected name", out, 30);
}

static void test_collected_job_new_iteration(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    long long collected = kill_reader_until_collected(c, "again");
    /* Asking for the name again (same pipeline) starts a new iteration from the beginning: one
     * worker in parallel_epochs serves it in order. */
    char *out = NULL, *err = NULL;
    assert_int_equal(
        cluster_cli(c, &out, &err, "read", ENDLESS, "--job-name", "again", "--limit", "25", NULL),
        0);
    assert_string_equal(out, "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n"
                             "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n"
                             "0\n1\n2\n3\n4\n");
    free(out);
    free(err);
    json_t *doc = cluster_status(c);
    json_t *job = job_named(doc, "again");
    assert_non_null(job);
    assert_true(int_field(job, "iteration_id") > collected);
    assert_string_not_equal(json_string_value(json_object_get(job, "state")), "garbage_collected");
    json_decref(doc);
}

/* ---- a shared job losing a worker ------------------------------------------------------------ */

static void test_shared_job_worker_killed(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 3);
    struct proc *r1 = new_reader(), *r2 = new_reader();
    spawn_read(c, r1, 4000, 1000, "shared");
    spawn_read(c, r2, 4000, 1000, "shared");
    wait_mid_epoch(c, r1, "shared");
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
    assert_still_reading(r1);
    assert_still_reading(r2);
    char *o1 = finish_read(r1);
    char *o2 = finish_read(r2);
    struct tally t1 = tally_range(o1, 4000), t2 = tally_range(o2, 4000);
    char *both = concat(o1, o2);
    struct tally t = tally_range(both, 4000);
    free(both);
    print_tally("reader 1", t1);
    print_tally("reader 2", t2);
    print_tally("both readers", t);
    /* Each reader on its own never sees a value twice; together they cover the range. Whether a
     * value may reach both readers after a worker is lost is what the tally shows. */
    assert_int_equal(t1.duplicated, 0);
    assert_int_equal(t2.duplicated, 0);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.unexpected, 0);
}

/* A reader of job name killed (-9) in the middle of its epoch, then a second reader of the job
 * reading to the end: it ends, with nothing twice, and the job's iteration finished with every
 * split finished. Returns the status document at the end (the caller frees it). */
static json_t *kill_reader_then_finish(struct cluster *c, const char *name)
{
    cluster_add_workers(c, 2);
    struct proc *a = new_reader();
    spawn_read(c, a, 4000, 1000, name);
    wait_mid_epoch(c, a, name);
    assert_int_equal(proc_stop(a, SIGKILL, WAIT_MS), 128 + SIGKILL);
    struct proc *b = new_reader();
    spawn_read(c, b, 4000, 1000, name);
    char *out = finish_read(b);
    struct tally t = tally_range(out, 4000);
    free(out);
    print_tally("the next reader", t);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    assert_true(t.lines > 0);
    json_t *doc = cluster_status(c);
    json_t *job = job_named(doc, name);
    assert_non_null(job);
    assert_string_equal(json_string_value(json_object_get(job, "state")), "finished");
    json_t *splits = json_object_get(job, "splits");
    assert_int_equal(int_field(splits, "finished"), int_field(splits, "total"));
    return doc;
}

/* A reader of a named job is killed mid-epoch, with splits it received only in part. Nobody
 * reports those splits received, so once their workers have handed out everything they produced
 * (settled) the dispatcher leases them again, and the next reader of the job finishes the epoch
 * instead of waiting forever: it ends, exits 0, and never sees a value twice. (The killed reader
 * took, and acknowledged, values it never printed, so the union is not checked here.) */
static void test_dead_reader_splits_reissued(void **state)
{
    json_decref(kill_reader_then_finish(*state, "dead"));
}

/* A reader killed (-9) in the middle of a shared epoch: its process's connections close with
 * it, so the dispatcher releases it one grace (--disconnect-grace-ms) after, not at its
 * timeout (two minutes here), and the next reader of the job gets the dead one's splits: the
 * epoch completes, nothing twice, and the log says why the client went. With the grace off, the
 * timeout releases it. */
static void killed_reader_released(struct cluster *c, bool grace)
{
    json_t *doc = kill_reader_then_finish(c, "gone");
    assert_int_equal(int_field(json_object_get(doc, "config"), "client_disconnect_grace_ms"),
                     grace ? 2000 : 0);
    json_decref(doc);
    const char *closed = ": its connection closed and it sent no heartbeat for 2000 ms since: "
                         "releasing it";
    const char *silent = " sent no heartbeat for 2000 ms: releasing it";
    /* The release comes one grace or timeout after the kill, whether or not the next reader
     * needed it: a dead reader that held no split in part leaves nothing to re-issue, and the
     * next reader may finish first. */
    assert_true(proc_wait_log(&c->dispatcher, grace ? closed : silent, WAIT_MS) >= 0);
    char *log = read_text_file(c->dispatcher.log);
    assert_non_null(log);
    if (grace) {
        assert_non_null(strstr(log, closed));
        assert_null(strstr(log, "sent no heartbeat for 120000 ms"));
    } else {
        assert_non_null(strstr(log, silent));
        assert_null(strstr(log, "its connection closed"));
    }
    free(log);
}

/* ---- a relay whose death closes a live reader's connection to the dispatcher ---------------- */

#define RELAY_PAIRS 16

/* The relay's loop (in its own process): every connection accepted on ls is joined to a new
 * one to 127.0.0.1:to; when either end closes, both do. Each accept appends a line to log. */
static void relay_run(int ls, int to, const char *log)
{
    int a[RELAY_PAIRS], b[RELAY_PAIRS], n = 0;
    char buf[65536];
    for (;;) {
        struct pollfd p[1 + 2 * RELAY_PAIRS];
        p[0] = (struct pollfd){.fd = ls, .events = POLLIN};
        for (int i = 0; i < n; i++) {
            p[1 + 2 * i] = (struct pollfd){.fd = a[i], .events = POLLIN};
            p[2 + 2 * i] = (struct pollfd){.fd = b[i], .events = POLLIN};
        }
        if (poll(p, (nfds_t)(1 + 2 * n), -1) < 0)
            continue;
        int gone = -1;
        for (int k = 1; k < 1 + 2 * n && gone < 0; k++) {
            if (!p[k].revents)
                continue;
            int i = (k - 1) / 2, from = p[k].fd, dst = from == a[i] ? b[i] : a[i];
            ssize_t got = read(from, buf, sizeof buf), put = 0;
            while (got > 0 && put < got) {
                ssize_t w = write(dst, buf + put, (size_t)(got - put));
                if (w <= 0)
                    break;
                put += w;
            }
            if (got <= 0 || put < got)
                gone = i;
        }
        if (gone >= 0) {
            close(a[gone]);
            close(b[gone]);
            a[gone] = a[n - 1];
            b[gone] = b[n - 1];
            n--;
            continue;
        }
        if (p[0].revents && n < RELAY_PAIRS) {
            int in = accept(ls, NULL, NULL);
            int out = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)to)};
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            if (in >= 0 && out >= 0 && connect(out, (struct sockaddr *)&sa, sizeof sa) == 0) {
                a[n] = in;
                b[n++] = out;
                FILE *f = fopen(log, "a");
                if (f) {
                    fputs("accepted\n", f);
                    fclose(f);
                }
            } else {
                if (in >= 0)
                    close(in);
                if (out >= 0)
                    close(out);
            }
        }
    }
}

/* Starts the relay on 127.0.0.1:port (listening before this returns) to 127.0.0.1:to, logging
 * its accepts to log. Returns its pid. */
static pid_t relay_start(int port, int to, const char *log)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(ls >= 0);
    int one = 1;
    assert_int_equal(setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(ls, 16), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* It dies with the test, even one that crashes, rather than hold its output open. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        relay_run(ls, to, log);
        _exit(0);
    }
    close(ls);
    relay_pid = pid;
    return pid;
}

static void relay_kill(pid_t pid)
{
    relay_pid = 0;
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
}

/* A live reader whose connection to the dispatcher breaks (the relay it reads the dispatcher
 * through is killed twice in the middle of its read, and started again at once) reconnects with
 * its next heartbeat, through the new relay, and is not released: the read ends with every
 * element once, and the dispatcher released nobody. */
static void test_reader_reconnects_not_released(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    int port = free_port(), disp = c->port;
    char log[2][600];
    for (int i = 0; i < 2; i++)
        snprintf(log[i], sizeof log[i], "%s/relay%d.log", tmp_dir(), i);
    pid_t relay = relay_start(port, disp, log[0]);
    struct proc *r = new_reader();
    c->port = port; /* the reader's --dispatcher: the relay */
    /* 5000 elements of 10 ms on two workers of two threads each: about 12 s, paced by sleeps, so
     * a loaded machine only makes it longer. A quarter of it goes before the first cut, the
     * grace and a tick after it, and some 3 s are left to read after the second. */
    spawn_read(c, r, 5000, 10000, "relayed");
    c->port = disp;
    wait_mid_epoch(c, r, "relayed");
    relay_kill(relay);
    relay = relay_start(port, disp, log[1]);
    /* Past the grace (4 s) and the next tick (a quarter of the grace, 1 s): a reader that did not
     * come back is released by now, and its read fails. */
    usleep(5500 * 1000);
    assert_still_reading(r);
    relay_kill(relay);
    relay = relay_start(port, disp, log[1]);
    assert_exactly_once("read through a broken connection", finish_read(r), 5000);
    relay_kill(relay);
    /* The reader did reconnect through the relays started again. */
    char *accepts = read_text_file(log[1]);
    assert_non_null(accepts);
    assert_non_null(strstr(accepts, "accepted"));
    free(accepts);
    char *text = read_text_file(c->dispatcher.log);
    assert_non_null(text);
    assert_null(strstr(text, "releasing it"));
    free(text);
}

/* A worker killed (-9) in the middle of a read: its connection to the dispatcher closes with
 * it, so it is removed one grace after, not at its timeout (two minutes here), and its splits go
 * to the other worker: every element once. */
static void test_killed_worker_removed_on_close(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    struct proc *r = new_reader();
    spawn_read(c, r, 4000, 1000, NULL);
    wait_mid_epoch(c, r, NULL);
    assert_int_equal(proc_stop(&c->workers[1], SIGKILL, WAIT_MS), 128 + SIGKILL);
    assert_exactly_once("one worker killed", finish_read(r), 4000);
    /* The removal comes one grace after the kill, whether or not the read needed it: the other
     * worker may finish the read first. */
    const char *removed = ": its connection closed and it sent no heartbeat for 2000 ms since: "
                          "removing it";
    assert_true(proc_wait_log(&c->dispatcher, removed, WAIT_MS) >= 0);
    char *log = read_text_file(c->dispatcher.log);
    assert_non_null(log);
    assert_non_null(strstr(log, removed));
    assert_null(strstr(log, "sent no heartbeat for 120000 ms"));
    free(log);
    json_t *doc = cluster_status(c);
    assert_int_equal(json_array_size(json_object_get(doc, "workers")), 1);
    assert_int_equal(int_field(json_object_get(doc, "config"), "worker_disconnect_grace_ms"), 2000);
    json_decref(doc);
}

static void test_killed_reader_released_on_close(void **state)
{
    killed_reader_released(*state, true);
}

static void test_killed_reader_released_at_timeout(void **state)
{
    killed_reader_released(*state, false);
}

/* The dispatcher itself stopped (SIGSTOP) for twice the client timeout and four times the
 * worker timeout, in the middle of a read: the heartbeats sent meanwhile wait unread in its
 * sockets, and it must not take its own silence for theirs. The worker keeps its id and task, the
 * reader is not released, the read ends with every element once, and the dispatcher says it was
 * away. */
static void test_dispatcher_paused(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    json_t *doc = cluster_status(c);
    json_t *w0 = json_array_get(json_object_get(doc, "workers"), 0);
    assert_non_null(w0);
    long long worker_id = int_field(w0, "id");
    json_decref(doc);
    struct proc *r = new_reader();
    /* About 2 s of reading on the worker's two threads, three quarters of it after the pause
     * begins: the worker serves what it has leased meanwhile, and needs the dispatcher again for
     * the rest once it is back. */
    spawn_read(c, r, 1000, 4000, NULL);
    wait_mid_epoch(c, r, NULL);
    assert_int_equal(kill(c->dispatcher.pid, SIGSTOP), 0);
    usleep(4000 * 1000);
    assert_int_equal(kill(c->dispatcher.pid, SIGCONT), 0);
    assert_exactly_once("read through the pause", finish_read(r), 1000);
    doc = cluster_status(c);
    json_t *workers = json_object_get(doc, "workers");
    assert_int_equal(json_array_size(workers), 1);
    assert_int_equal(int_field(json_array_get(workers, 0), "id"), worker_id);
    json_decref(doc);
    char *log = read_text_file(c->dispatcher.log);
    assert_non_null(log);
    assert_non_null(strstr(log, "(stopped, or starved of CPU): workers' and clients' silence "
                                "meanwhile is not counted against them"));
    assert_null(strstr(log, "releasing it"));
    assert_null(strstr(log, ": removing it"));
    free(log);
}

/* ---- the timeouts and heartbeats the dispatcher runs with ------------------------------------ */

/* Starts c's dispatcher with exactly the flags given (cluster_start_dispatcher adds timeouts of
 * its own). c has no dispatcher running. */
static void start_bare_dispatcher(struct cluster *c, const char *const *flags)
{
    char *argv[24];
    int n = 0;
    argv[n++] = (char *)bin_path("sluice-dispatcher");
    argv[n++] = "--port";
    argv[n++] = "0";
    for (int i = 0; flags && flags[i] && n < 23; i++)
        argv[n++] = (char *)flags[i];
    argv[n] = NULL;
    assert_int_equal(proc_start(&c->dispatcher, argv, WAIT_MS), 0);
    const char *colon = strrchr(c->dispatcher.addr, ':');
    assert_non_null(colon);
    c->port = atoi(colon + 1);
}

static void assert_config(struct cluster *c, long long worker_timeout, long long client_timeout,
                          long long gc_timeout, long long grace, long long worker_grace)
{
    json_t *doc = cluster_status(c);
    json_t *config = json_object_get(doc, "config");
    if (!json_is_object(config))
        fail_msg("the status document has no \"config\" object");
    assert_int_equal(int_field(config, "worker_timeout_ms"), worker_timeout);
    assert_int_equal(int_field(config, "client_timeout_ms"), client_timeout);
    assert_int_equal(int_field(config, "job_gc_timeout_ms"), gc_timeout);
    assert_int_equal(int_field(config, "client_disconnect_grace_ms"), grace);
    assert_int_equal(int_field(config, "worker_disconnect_grace_ms"), worker_grace);
    long long worker_hb = int_field(config, "worker_heartbeat_ms");
    long long client_hb = int_field(config, "client_heartbeat_ms");
    printf("    timeouts %lld/%lld/%lld ms: heartbeats worker %lld ms, client %lld ms\n",
           worker_timeout, client_timeout, gc_timeout, worker_hb, client_hb);
    /* At least three heartbeats fit in a timeout, so one or two lost ones evict no one. */
    assert_true(worker_hb > 0 && 3 * worker_hb < worker_timeout);
    assert_true(client_hb > 0 && 3 * client_hb < client_timeout);
    json_decref(doc);
}

static void test_defaults(void **state)
{
    struct cluster *c = *state;
    static const char *const quiet[] = {"--log-level", "warn", NULL};
    start_bare_dispatcher(c, quiet);
    assert_config(c, 10000, 30000, 60000, 5000, 5000);
    assert_int_equal(proc_stop(&c->dispatcher, SIGTERM, WAIT_MS), 0);

    static const char *const small[] = {"--worker-timeout-ms",
                                        "600",
                                        "--client-timeout-ms",
                                        "900",
                                        "--job-gc-timeout-ms",
                                        "1200",
                                        "--log-level",
                                        "warn",
                                        NULL};
    start_bare_dispatcher(c, small);
    /* The grace is never longer than a timeout. */
    assert_config(c, 600, 900, 1200, 900, 600);
    assert_int_equal(proc_stop(&c->dispatcher, SIGTERM, WAIT_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kill_one_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_two_workers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_same_address, setup_long_worker_timeout,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_killed_reader_job_collected_name_reused, setup_gc,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_collected_job_new_iteration, setup_gc, teardown),
        cmocka_unit_test_setup_teardown(test_shared_job_worker_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_reader_splits_reissued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dispatcher_paused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_reader_released_on_close, setup_grace,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_killed_worker_removed_on_close, setup_grace, teardown),
        cmocka_unit_test_setup_teardown(test_killed_reader_released_at_timeout, setup_no_grace,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reader_reconnects_not_released, setup_reconnect,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_defaults, setup_no_dispatcher, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    /* SLUICE_TEST_FILTER=pattern runs only the matching tests (cmocka's wildcard syntax). */
    if (getenv("SLUICE_TEST_FILTER"))
        cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    int rc = cmocka_run_group_tests_name("elastic workers", tests, NULL, NULL);
    tmp_cleanup();
    return rc;
}
