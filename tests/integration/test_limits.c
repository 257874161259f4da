/* Bounded resources and checked names, with the real binaries on 127.0.0.1:
 *   - a worker refuses an element over --max-element-bytes before allocating it (bytes(1 GiB),
 *     a batch as it grows): the reader gets the exact message, the worker's peak memory stays
 *     small, the failure is recorded on the job (status, a second reader of the job, no task on
 *     a new worker), and the worker still serves a well-behaved read;
 *   - forty reads at once from a worker with --threads 4 each get exactly their elements while
 *     the worker's thread count stays what it was before them (its tasks share its pool);
 *   - the dispatcher's --max-datasets, --max-pipeline-bytes and --max-jobs-per-client refuse
 *     with the exact message while other clients are still served;
 *   - a job name, dataset id or worker address that is not valid UTF-8 or holds a control
 *     character is refused by the client library and, sent raw, by the dispatcher, naming the
 *     field and the byte;
 *   - a journal written before names were checked, holding such names, still renders in
 *     `sluice status` (table and JSON), with the bad bytes escaped. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/proc.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include "common/error.h"
#include "common/rpc_client.h"
#include "dispatcher/update_codec.h"
#include "journal/journal.h"
#include "pipeline/def.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"
#include "sluice/sluice.h"

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------- */

/* The first job named name in a status document, or NULL. */
static json_t *status_job(json_t *root, const char *name)
{
    json_t *jobs = json_object_get(root, "jobs"), *j;
    size_t i;
    json_array_foreach(jobs, i, j)
    {
        json_t *n = json_object_get(j, "name");
        if (json_is_string(n) && strcmp(json_string_value(n), name) == 0)
            return j;
    }
    return NULL;
}

/* `sluice read PIPELINE --format count --timeout-ms 30000` exits 0 and prints want. */
static void read_count(struct cluster *c, const char *pipeline, const char *want)
{
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", pipeline, "--format", "count", "--timeout-ms",
                         "30000", NULL);
    assert_int_equal(rc, 0);
    assert_string_equal(out, want);
    free(out);
    free(err);
}

/* A read of 1 GiB elements as the job "big" exits 1 naming the size and the worker's limit. */
static void read_big_refused(struct cluster *c)
{
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", "range(100) | map(bytes, 1073741824) | batch(8)",
                         "--job-name", "big", "--timeout-ms", "30000", NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, "map(bytes): element of 1073741824 bytes is over the worker's limit of "
                         "67108864 (--max-element-bytes)");
    free(out);
    free(err);
}

/* ---- one raw RPC to the dispatcher, bypassing the client library's checks ------------------ */

struct raw {
    bool done;
    int status;
    char msg[SLUICE_ERRMSG_SIZE];
    bool closed;
};

static void raw_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    (void)reply;
    struct raw *r = user;
    r->done = true;
    r->status = status;
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
}

static void raw_closed(void *user)
{
    ((struct raw *)user)->closed = true;
}

/* Sends env to the dispatcher as a peer of role and waits (at most 10 s) for the answer; returns
 * its status with the message in r->msg. */
static int raw_call(const char *address, Sluice__Role role, Sluice__Envelope *env, struct raw *r)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct rpc_client *cl = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    struct rpc_client_opts o = {.address = address, .role = role, .incarnation = 0x5eed};
    assert_int_equal(rpc_client_new(&loop, &o, &cl, err, sizeof err), 0);
    memset(r, 0, sizeof *r);
    assert_int_equal(rpc_call(cl, env, 10000, raw_reply, r), 0);
    while (!r->done)
        uv_run(&loop, UV_RUN_ONCE);
    rpc_client_close(cl, raw_closed, r);
    while (!r->closed)
        uv_run(&loop, UV_RUN_ONCE);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    return r->status;
}

/* ---- the worker's element limit ------------------------------------------------------------ */

static void test_element_limit(void **unused)
{
    (void)unused;
    struct cluster c = {0};
    static const char *const wargs[] = {"--max-element-bytes", "67108864", NULL};
    c.worker_args = wargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    pid_t worker = c.workers[0].pid;

    /* bytes(1 GiB) is refused before it is allocated: the reader gets the size and the limit. */
    read_big_refused(&c);
    long peak = proc_status_kb(worker, "VmHWM");
    long rss = proc_status_kb(worker, "VmRSS");
    fprintf(stderr, "worker after bytes(1 GiB): VmHWM %ld kB, VmRSS %ld kB\n", peak, rss);
    assert_true(peak > 0 && peak < 64 * 1024);

    /* The job records the failure: status shows it, a second reader of the job gets it from
     * the dispatcher, and a worker that joins now gets no task of it. */
    sleep_ms(1500); /* the worker reports the failure with its next heartbeat */
    json_t *st = cluster_status(&c);
    json_t *job = status_job(st, "big");
    assert_non_null(job);
    json_t *e = json_object_get(job, "error");
    assert_true(json_is_string(e));
    assert_contains(json_string_value(e), "element of 1073741824 bytes is over the worker's limit");
    assert_string_equal(json_string_value(json_object_get(job, "state")), "failed");
    json_decref(st);
    assert_true(cluster_add_worker(&c) >= 0);
    read_big_refused(&c);
    sleep_ms(1500);
    st = cluster_status(&c);
    json_t *workers = json_object_get(st, "workers");
    assert_int_equal(json_array_size(workers), 2);
    size_t with_tasks = 0, i;
    json_t *w;
    json_array_foreach(workers, i, w)
    {
        with_tasks += json_array_size(json_object_get(w, "tasks")) > 0;
    }
    assert_int_equal(with_tasks, 1); /* only the first worker's failed task */
    json_decref(st);

    /* A batch is refused as it grows past the limit: four elements of 20000000 bytes (and 8
     * bytes of offset each) are more than 64 MiB. */
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(&c, &out, &err, "read", "range(10) | map(bytes, 20000000) | batch(8)",
                         "--timeout-ms", "30000", NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, "batch: element of at least 80000032 bytes is over the worker's limit of "
                         "67108864 (--max-element-bytes)");
    free(out);
    free(err);
    peak = proc_status_kb(worker, "VmHWM");
    fprintf(stderr, "worker after the growing batch: VmHWM %ld kB\n", peak);
    assert_true(peak > 0 && peak < 256 * 1024);

    /* The worker still serves a well-behaved reader, large elements under the limit too. */
    read_count(&c, "range(1000)", "2000\n"); /* parallel_epochs: each of the two workers, in full */
    /* Two batches from each of the two workers. */
    read_count(&c, "range(6) | map(bytes, 4000000) | batch(3)", "4\n");
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- a reader that dies ---------------------------------------------------------------------- */

/* The job of the first entry of "jobs" in a status document, or NULL when there is none. */
static json_t *first_job(json_t *root)
{
    return json_array_get(json_object_get(root, "jobs"), 0);
}

/* Tasks listed for the worker at address in a status document (-1: no such worker). */
static long worker_tasks(json_t *root, const char *address)
{
    json_t *workers = json_object_get(root, "workers"), *w;
    size_t i;
    json_array_foreach(workers, i, w)
    {
        json_t *a = json_object_get(w, "address");
        if (json_is_string(a) && strcmp(json_string_value(a), address) == 0)
            return (long)json_array_size(json_object_get(w, "tasks"));
    }
    return -1;
}

#if defined(__SANITIZE_ADDRESS__)
#define DEAD_READER_RSS_KB (192 * 1024)
#else
#define DEAD_READER_RSS_KB (96 * 1024)
#endif

/* A reader of an endless pipeline is SIGKILLed: its task stops producing once its buffer is
 * full (the worker's memory stays flat), a worker that joins once the reader's client is
 * released gets no task for the job, and once the job is collected its task is gone from every
 * worker; the workers then serve a new reader. */
static void test_dead_reader(void **unused)
{
    (void)unused;
    struct cluster c = {0};
    static const char *const dargs[] = {"--job-gc-timeout-ms", "4000", NULL};
    c.dispatcher_args = dargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    pid_t worker = c.workers[0].pid;

    struct proc reader;
    assert_int_equal(cluster_cli_spawn(&c, &reader, "read",
                                       "range(1000000000) | map(bytes, 1000000)", "--format",
                                       "count", NULL),
                     0);
    sleep_ms(2000);
    assert_int_equal(proc_stop(&reader, SIGKILL, 5000), 128 + SIGKILL);

    /* The task's producer blocks on its full buffer: 16 MiB of elements and a few in hand. */
    long rss[4];
    for (int i = 0; i < 4; i++) {
        sleep_ms(500);
        rss[i] = proc_status_kb(worker, "VmRSS");
    }
    fprintf(stderr, "worker with a dead reader: VmRSS %ld, %ld, %ld, %ld kB\n", rss[0], rss[1],
            rss[2], rss[3]);
    /* Flat while it waits, and bounded: 16 MiB of buffer, the elements in hand, the code. Under
     * AddressSanitizer freed blocks stay resident in its quarantine for a while, so the bound
     * there also holds recently freed elements. */
    for (int i = 0; i < 4; i++)
        assert_true(rss[i] > 0 && rss[i] < DEAD_READER_RSS_KB);
    assert_true(rss[3] <= rss[0] + 8 * 1024);

    /* The dispatcher releases the silent client (--client-timeout-ms 5000 in the helper). */
    json_t *st = NULL;
    for (int tries = 0;; tries++) {
        st = cluster_status(&c);
        json_t *job = first_job(st);
        assert_non_null(job);
        if (json_integer_value(json_object_get(job, "clients")) == 0)
            break;
        json_decref(st);
        assert_true(tries < 100); /* 10 s */
        sleep_ms(100);
    }
    assert_string_equal(json_string_value(json_object_get(first_job(st), "state")), "active");
    json_decref(st);
    /* A worker that joins now gets no task for the job nobody reads. */
    int second = cluster_add_worker(&c);
    assert_true(second >= 0);
    sleep_ms(1500);
    st = cluster_status(&c);
    /* Not collected yet (--job-gc-timeout-ms 4000 from the release on), so the check means
     * something: the first worker still has its task, the new one has none. */
    json_t *job = first_job(st);
    assert_non_null(job);
    assert_int_equal(worker_tasks(st, c.workers[second].addr), 0);
    assert_int_equal(worker_tasks(st, c.workers[0].addr), 1);
    json_decref(st);

    /* Once collected, the job and its task are gone everywhere. */
    for (int tries = 0;; tries++) {
        st = cluster_status(&c);
        bool gone = json_array_size(json_object_get(st, "jobs")) == 0 &&
                    worker_tasks(st, c.workers[0].addr) == 0 &&
                    worker_tasks(st, c.workers[second].addr) == 0;
        json_decref(st);
        if (gone)
            break;
        assert_true(tries < 150); /* 15 s */
        sleep_ms(100);
    }
    read_count(&c, "range(10)", "20\n"); /* parallel_epochs: both workers, in full */
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- the dispatcher's limits ---------------------------------------------------------------- */

static void test_dispatcher_limits(void **unused)
{
    (void)unused;
    struct cluster c = {0};
    static const char *const dargs[] = {
        "--max-datasets", "2", "--max-pipeline-bytes", "200", "--max-jobs-per-client", "1", NULL};
    c.dispatcher_args = dargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    char *out = NULL, *err = NULL;

    /* Pipelines over 200 bytes are refused. */
    char big[512] = "list(";
    for (int i = 0; i < 60; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s%d", i ? ", " : "", 1000 + i);
    strcat(big, ")");
    int rc = cluster_cli(&c, &out, &err, "register", big, NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, "is over the limit of 200 bytes (--max-pipeline-bytes)");
    assert_contains(err, "pipeline of ");
    free(out);
    free(err);

    /* Two datasets fit; a third is refused; registering an existing one is still answered. */
    assert_int_equal(cluster_cli(&c, &out, &err, "register", "range(5)", NULL), 0);
    free(out);
    free(err);
    assert_int_equal(cluster_cli(&c, &out, &err, "register", "range(7)", NULL), 0);
    free(out);
    free(err);
    rc = cluster_cli(&c, &out, &err, "register", "range(9)", NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, "dataset limit reached: 2 datasets (--max-datasets)");
    free(out);
    free(err);
    assert_int_equal(cluster_cli(&c, &out, &err, "register", "range(5)", NULL), 0);
    assert_string_equal(out, "1\n");
    free(out);
    free(err);

    /* One client with one read open may not open a second; another client is served. */
    struct sluice_client *client = NULL;
    struct sluice_iterator *first = NULL, *second = NULL;
    char msg[SLUICE_ERRMSG_SIZE];
    struct sluice_client_options co = {.dispatcher = c.dispatcher.addr, .timeout_ms = 10000};
    assert_int_equal(sluice_client_open(&co, &client, msg, sizeof msg), 0);
    struct sluice_read_options ro = {.dataset_id = "1"};
    assert_int_equal(sluice_iterator_open(client, &ro, &first, msg, sizeof msg), 0);
    rc = sluice_iterator_open(client, &ro, &second, msg, sizeof msg);
    assert_int_equal(rc, SLUICE_ERR_LIMIT);
    assert_string_equal(msg, "job limit reached: this client holds 1 jobs (--max-jobs-per-client)");
    assert_null(second);
    rc = cluster_cli(&c, &out, &err, "read", "--dataset-id", "2", "--format", "count",
                     "--timeout-ms", "30000", NULL);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "7\n");
    free(out);
    free(err);
    /* The first read still works, and once it is closed the client may read again. */
    const struct sluice_element *elem;
    long n = 0;
    while ((rc = sluice_iterator_next(first, &elem, 10000, msg, sizeof msg)) == 1)
        n++;
    assert_int_equal(rc, 0);
    assert_int_equal(n, 5);
    sluice_iterator_close(first);
    assert_int_equal(sluice_iterator_open(client, &ro, &second, msg, sizeof msg), 0);
    sluice_iterator_close(second);
    sluice_client_close(client);
    assert_int_equal(cluster_stop(&c), 0);
}

/* Clients that connect with new incarnations cannot escape --max-jobs-per-client: the reads
 * held from one address are bounded too (--max-jobs-per-address), with the exact message, and a
 * read closed frees its place. Before, three connections with different incarnations got three
 * times the per-client limit. */
static void test_jobs_per_address(void **unused)
{
    (void)unused;
    static const char *const dargs[] = {"--max-jobs-per-client", "2", "--max-jobs-per-address", "3",
                                        NULL};
    struct cluster c = {0};
    c.dispatcher_args = dargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(&c, &out, &err, "register", "range(5)", NULL), 0);
    free(out);
    free(err);
    struct sluice_client *clients[3] = {NULL};
    struct sluice_client_options co = {.dispatcher = c.dispatcher.addr, .timeout_ms = 10000};
    char msg[SLUICE_ERRMSG_SIZE];
    for (int i = 0; i < 3; i++)
        assert_int_equal(sluice_client_open(&co, &clients[i], msg, sizeof msg), 0);
    struct sluice_read_options ro = {.dataset_id = "1"};
    struct sluice_iterator *a1 = NULL, *a2 = NULL, *b1 = NULL, *refused = NULL;
    assert_int_equal(sluice_iterator_open(clients[0], &ro, &a1, msg, sizeof msg), 0);
    assert_int_equal(sluice_iterator_open(clients[0], &ro, &a2, msg, sizeof msg), 0);
    assert_int_equal(sluice_iterator_open(clients[1], &ro, &b1, msg, sizeof msg), 0);
    /* The second client has room of its own, the third is new: the address has none. */
    for (int i = 1; i < 3; i++) {
        assert_int_equal(sluice_iterator_open(clients[i], &ro, &refused, msg, sizeof msg),
                         SLUICE_ERR_LIMIT);
        assert_string_equal(msg, "job limit reached: clients at 127.0.0.1 hold 3 jobs "
                                 "(--max-jobs-per-address)");
        assert_null(refused);
    }
    /* A read closed frees its place for any client of the address. */
    sluice_iterator_close(a1);
    assert_int_equal(sluice_iterator_open(clients[2], &ro, &refused, msg, sizeof msg), 0);
    sluice_iterator_close(refused);
    sluice_iterator_close(a2);
    sluice_iterator_close(b1);
    for (int i = 0; i < 3; i++)
        sluice_client_close(clients[i]);
    assert_int_equal(cluster_stop(&c), 0);
}

/* Jobs nobody reads cost a worker nothing: 40 jobs of a pipeline of 100 kB elements, created
 * without a reader, give the worker 40 tasks but no thread and no buffered element each (before,
 * every task spawned its producer at once and filled its 16 MiB buffer: about 650 MB and 40
 * more threads). A read of one of them then runs its task and gets every element. */
static void test_unread_jobs_cost_nothing(void **unused)
{
    (void)unused;
    struct cluster c = {0};
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    pid_t worker = c.workers[0].pid;
    char *out = NULL, *err = NULL;
    assert_int_equal(
        cluster_cli(&c, &out, &err, "register", "range(1000) | map(bytes, 100000)", NULL), 0);
    free(out);
    free(err);
    long threads0 = proc_status_kb(worker, "Threads");
    assert_true(threads0 > 0);
    enum { JOBS = 40 };
    for (int i = 0; i < JOBS; i++) {
        char name[32];
        snprintf(name, sizeof name, "unread-%d", i);
        Sluice__GetOrCreateJobRequest req = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
        req.dataset_id = "1";
        req.job_name = name;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
        env.get_or_create_job = &req;
        struct raw r;
        if (raw_call(c.dispatcher.addr, SLUICE__ROLE__ROLE_CLIENT, &env, &r) != 0)
            fail_msg("job %d: %s", i, r.msg);
    }
    /* The worker learns of its tasks at its heartbeats. */
    for (int tries = 0;; tries++) {
        json_t *st = cluster_status(&c);
        long n = worker_tasks(st, c.workers[0].addr);
        json_decref(st);
        if (n == JOBS)
            break;
        assert_true(tries < 150); /* 15 s */
        sleep_ms(100);
    }
    sleep_ms(1000); /* what an eager task would make of it by now: 16 MiB of its buffer */
    long threads = proc_status_kb(worker, "Threads"), rss = proc_status_kb(worker, "VmRSS");
    fprintf(stderr, "worker with %d unread tasks: %ld threads (%ld before), VmRSS %ld kB\n", JOBS,
            threads, threads0, rss);
    assert_true(threads <= threads0 + 2);
    assert_true(rss > 0 && rss < 96 * 1024);
    /* Read one of them: its task starts now and delivers the whole dataset. */
    assert_int_equal(cluster_cli(&c, &out, &err, "read", "--dataset-id", "1", "--job-name",
                                 "unread-7", "--format", "count", NULL),
                     0);
    if (strcmp(out, "1000\n") != 0)
        fail_msg("read of an unread job: got '%s', stderr '%s'", out, err);
    free(out);
    free(err);
    assert_int_equal(cluster_stop(&c), 0);
}

/* Forty reads at once from one worker started with --threads 4: every read gets exactly its
 * elements (parallel_epochs and distributed_epoch, each element taking a millisecond), while the
 * worker's threads stay what it had after a first read (its four pool threads among them): its
 * tasks take turns on the pool. Before, each running task had producer threads of its own (one
 * per parallel_epochs task, --threads per distributed_epoch task): 3 threads became 102. */
static void test_concurrent_reads_share_the_pool(void **unused)
{
    (void)unused;
    static const char *const wargs[] = {"--threads", "4", NULL};
    struct cluster c = {0};
    c.worker_args = wargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    pid_t worker = c.workers[0].pid;
    struct sluice_client *client = NULL;
    char msg[SLUICE_ERRMSG_SIZE];
    struct sluice_client_options co = {.dispatcher = c.dispatcher.addr, .timeout_ms = 30000};
    assert_int_equal(sluice_client_open(&co, &client, msg, sizeof msg), 0);
    /* The threads of a worker that has served a read (some start only once it is registered). */
    read_count(&c, "range(3)", "3\n");
    long threads0 = proc_status_kb(worker, "Threads");
    assert_true(threads0 > 0);

    enum { READS = 40, LEN = 150 };
    struct sluice_iterator *its[READS];
    static char seen[READS][LEN];
    memset(seen, 0, sizeof seen);
    int got[READS] = {0};
    bool ended[READS] = {false};
    for (int i = 0; i < READS; i++) {
        char text[96];
        snprintf(text, sizeof text, "range(%d) | map(wait_us, 1000) | map(add, %d)", LEN, i * LEN);
        struct sluice_read_options ro = {
            .pipeline = text,
            .mode = i % 2 ? SLUICE_DISTRIBUTED_EPOCH : SLUICE_PARALLEL_EPOCHS,
        };
        if (sluice_iterator_open(client, &ro, &its[i], msg, sizeof msg) != 0)
            fail_msg("read %d: %s", i, msg);
    }
    /* Every read takes an element in turn, so all forty tasks run at once. */
    long threads_max = 0;
    int left = READS;
    while (left > 0) {
        for (int i = 0; i < READS; i++) {
            if (ended[i])
                continue;
            const struct sluice_element *elem;
            int rc = sluice_iterator_next(its[i], &elem, 30000, msg, sizeof msg);
            if (rc == 0) {
                ended[i] = true;
                left--;
                sluice_iterator_close(its[i]);
                continue;
            }
            if (rc != 1)
                fail_msg("read %d after %d elements: %s", i, got[i], msg);
            size_t len = 0;
            const int64_t *v = sluice_element_data(elem, 0, &len);
            assert_int_equal(len, sizeof *v);
            int64_t k = *v - (int64_t)i * LEN;
            if (k < 0 || k >= LEN || seen[i][k])
                fail_msg("read %d: element %lld unexpected or seen twice", i, (long long)*v);
            seen[i][k] = 1;
            got[i]++;
        }
        long n = proc_status_kb(worker, "Threads");
        if (n > threads_max)
            threads_max = n;
    }
    for (int i = 0; i < READS; i++)
        assert_int_equal(got[i], LEN);
    fprintf(stderr,
            "worker with --threads 4 and %d reads at once: at most %ld threads (%ld before)\n",
            READS, threads_max, threads0);
    assert_true(threads_max <= threads0);
    sluice_client_close(client);
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- worker limits ------------------------------------------------------------------------ */

/* Opens a parallel_epochs read of an endless range and takes its first element: its task on the
 * worker runs. Returns the iterator, or NULL with the read's error in msg. */
static struct sluice_iterator *open_running(struct sluice_client *client, char *msg, size_t len)
{
    struct sluice_read_options ro = {.pipeline = "range(1000000000000)"};
    struct sluice_iterator *it = NULL;
    if (sluice_iterator_open(client, &ro, &it, msg, len) != 0)
        return NULL;
    const struct sluice_element *elem;
    if (sluice_iterator_next(it, &elem, 30000, msg, len) != 1) {
        sluice_iterator_close(it);
        return NULL;
    }
    return it;
}

/* Reads that end take no place once their tasks produced everything, even before their jobs
 * are collected: with --max-tasks 2, ten short reads one after another (as a repeating tail
 * makes, a job per pass) all go through, each whole. Before, the third was refused. */
static void test_finished_tasks_free_their_place(void **unused)
{
    (void)unused;
    static const char *const wargs[] = {"--max-tasks", "2", NULL};
    struct cluster c = {0};
    c.worker_args = wargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    struct sluice_client *client = NULL;
    char msg[SLUICE_ERRMSG_SIZE];
    struct sluice_client_options co = {.dispatcher = c.dispatcher.addr, .timeout_ms = 30000};
    assert_int_equal(sluice_client_open(&co, &client, msg, sizeof msg), 0);
    for (int i = 0; i < 10; i++) {
        struct sluice_read_options ro = {.pipeline = "range(3)"};
        struct sluice_iterator *it = NULL;
        if (sluice_iterator_open(client, &ro, &it, msg, sizeof msg) != 0)
            fail_msg("read %d: %s", i, msg);
        const struct sluice_element *elem;
        int64_t want = 0;
        int rc;
        while ((rc = sluice_iterator_next(it, &elem, 30000, msg, sizeof msg)) == 1) {
            size_t len = 0;
            const int64_t *v = sluice_element_data(elem, 0, &len);
            assert_int_equal(len, sizeof *v);
            assert_int_equal(*v, want);
            want++;
        }
        if (rc != 0)
            fail_msg("read %d after %lld elements: %s", i, (long long)want, msg);
        assert_int_equal(want, 3);
        sluice_iterator_close(it);
    }
    sluice_client_close(client);
    assert_int_equal(cluster_stop(&c), 0);
}

/* A worker runs at most --max-tasks tasks and buffers at most --max-buffer-bytes: a task past
 * either fails at once with the exact reason, which its reader gets; once a read is collected
 * its place is free again. Before, 1000 reads of one client took a worker to 2.1 GB and 1005
 * threads. */
static void test_worker_limits(void **unused)
{
    (void)unused;
    static const char *const dargs[] = {"--job-gc-timeout-ms", "500", NULL};
    static const char *const wargs[] = {"--max-tasks", "3", NULL};
    struct cluster c = {0};
    c.dispatcher_args = dargs;
    c.worker_args = wargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    struct sluice_client *client = NULL;
    char msg[SLUICE_ERRMSG_SIZE], want[512];
    struct sluice_client_options co = {.dispatcher = c.dispatcher.addr, .timeout_ms = 30000};
    assert_int_equal(sluice_client_open(&co, &client, msg, sizeof msg), 0);
    struct sluice_iterator *its[3];
    for (int i = 0; i < 3; i++) {
        its[i] = open_running(client, msg, sizeof msg);
        if (its[i] == NULL)
            fail_msg("read %d: %s", i, msg);
    }
    assert_null(open_running(client, msg, sizeof msg));
    snprintf(want, sizeof want, "worker %s: task limit reached: it runs 3 tasks (--max-tasks)",
             c.workers[0].addr);
    if (strstr(msg, want) == NULL)
        fail_msg("got '%s', want '%s' in it", msg, want);
    /* A read closed and collected frees its place. */
    sluice_iterator_close(its[0]);
    struct sluice_iterator *again = NULL;
    for (long long end = now_ms() + 30000; again == NULL && now_ms() < end;) {
        again = open_running(client, msg, sizeof msg);
        if (again == NULL)
            usleep(200000);
    }
    if (again == NULL)
        fail_msg("no read after one was closed: %s", msg);
    sluice_iterator_close(again);
    for (int i = 1; i < 3; i++)
        sluice_iterator_close(its[i]);
    sluice_client_close(client);
    assert_int_equal(cluster_stop(&c), 0);

    /* 40 MB of buffers: two tasks of 16 MiB fit, a third does not. */
    static const char *const wargs2[] = {"--max-buffer-bytes", "40000000", NULL};
    struct cluster c2 = {0};
    c2.worker_args = wargs2;
    assert_int_equal(cluster_start_dispatcher(&c2, 0, 0), 0);
    assert_true(cluster_add_worker(&c2) >= 0);
    co.dispatcher = c2.dispatcher.addr;
    assert_int_equal(sluice_client_open(&co, &client, msg, sizeof msg), 0);
    for (int i = 0; i < 2; i++) {
        its[i] = open_running(client, msg, sizeof msg);
        if (its[i] == NULL)
            fail_msg("read %d: %s", i, msg);
    }
    assert_null(open_running(client, msg, sizeof msg));
    snprintf(want, sizeof want,
             "worker %s: buffer limit reached: 2 tasks buffering up to 16777216 bytes each, of "
             "--max-buffer-bytes 40000000",
             c2.workers[0].addr);
    if (strstr(msg, want) == NULL)
        fail_msg("got '%s', want '%s' in it", msg, want);
    for (int i = 0; i < 2; i++)
        sluice_iterator_close(its[i]);
    sluice_client_close(client);
    assert_int_equal(cluster_stop(&c2), 0);

    /* Bad values are refused with the flag's name. */
    char *out = NULL, *err = NULL;
    char *argv[] = {
        (char *)bin_path("sluice-worker"), "--dispatcher", "127.0.0.1:1", "--max-tasks", "0", NULL};
    assert_int_equal(run_cmd(argv, 10000, &out, &err), 2);
    assert_contains(err, "--max-tasks: expected a number from 1 to 100000, got '0'");
    free(out);
    free(err);
    char *argv2[] = {(char *)bin_path("sluice-worker"),
                     "--dispatcher",
                     "127.0.0.1:1",
                     "--max-buffer-bytes",
                     "1000",
                     NULL};
    assert_int_equal(run_cmd(argv2, 10000, &out, &err), 2);
    assert_contains(err, "--max-buffer-bytes: expected a number of at least 16777216, got '1000'");
    free(out);
    free(err);
}

/* ---- names ---------------------------------------------------------------------------------- */

static void test_bad_names(void **unused)
{
    (void)unused;
    struct cluster c = {0};
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    char *out = NULL, *err = NULL;

    /* The client library refuses before sending. */
    int rc = cluster_cli(&c, &out, &err, "read", "range(3)", "--job-name", "ab\xff", NULL);
    assert_int_equal(rc, 2); /* `sluice read` exits 2 for a read refused as invalid */
    assert_contains(err, "job name: not valid UTF-8 at byte 2");
    free(out);
    free(err);
    rc = cluster_cli(&c, &out, &err, "register", "range(3)", "--dataset-id", "x\ny", NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, "dataset id: control character at byte 1");
    free(out);
    free(err);

    /* The dispatcher refuses the same when the bytes come raw. */
    struct raw r;
    Sluice__GetOrCreateJobRequest job = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    job.dataset_id = "1";
    job.job_name = "abc\xff";
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &job;
    assert_int_equal(raw_call(c.dispatcher.addr, SLUICE__ROLE__ROLE_CLIENT, &env, &r),
                     SLUICE_ERR_INVALID);
    assert_string_equal(r.msg, "job name: not valid UTF-8 at byte 3");
    job.job_name = "";
    job.dataset_id = "d\x1b[2J";
    assert_int_equal(raw_call(c.dispatcher.addr, SLUICE__ROLE__ROLE_CLIENT, &env, &r),
                     SLUICE_ERR_INVALID);
    assert_string_equal(r.msg, "dataset id: control character at byte 1");

    Sluice__WorkerHeartbeatRequest hb = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    hb.address = "127.0.0.1\n:9";
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &hb;
    assert_int_equal(raw_call(c.dispatcher.addr, SLUICE__ROLE__ROLE_WORKER, &env, &r),
                     SLUICE_ERR_INVALID);
    assert_string_equal(r.msg, "worker address: control character at byte 9");

    /* Nothing of it was stored: one worker (the real one), no dataset, no job. */
    json_t *st = cluster_status(&c);
    assert_int_equal(json_array_size(json_object_get(st, "workers")), 1);
    assert_int_equal(json_array_size(json_object_get(st, "datasets")), 0);
    assert_int_equal(json_array_size(json_object_get(st, "jobs")), 0);
    json_decref(st);
    /* And everyone else is still served. */
    rc = cluster_cli(&c, &out, &err, "read", "range(4)", "--job-name", "caf\xc3\xa9", "--format",
                     "count", NULL);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "4\n");
    free(out);
    free(err);
    assert_int_equal(cluster_stop(&c), 0);
}

/* A journal as a dispatcher from before name checks could have written it: a dataset, a job and
 * a worker whose names hold bytes that are not UTF-8 and control characters. */
static void write_old_journal(const char *work_dir)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct journal *j = NULL;
    assert_int_equal(mkdir(work_dir, 0700), 0);
    struct journal_opts jo = {.work_dir = work_dir, .create = true};
    if (journal_open(&jo, &j, err, sizeof err) != 0)
        fail_msg("journal_open: %s", err);

    struct pipe_spec *spec = NULL;
    uint8_t *def = NULL;
    size_t def_len = 0;
    assert_int_equal(pipe_parse("range(3)", &spec, err, sizeof err), 0);
    assert_int_equal(pipe_spec_encode(spec, &def, &def_len), 0);
    pipe_spec_free(spec);

    static const char bad_id[] = "bad\xff\nid";
    struct st_update u[4];
    memset(u, 0, sizeof u);
    u[0].type = ST_DATASET_REGISTERED;
    snprintf(u[0].name, sizeof u[0].name, "%s", bad_id);
    u[0].def = def;
    u[0].def_len = def_len;
    char text[] = "range(3)";
    u[0].text = text;
    u[1].type = ST_JOB_CREATED;
    u[1].id = 1;
    snprintf(u[1].name, sizeof u[1].name, "job\x01\xc3");
    snprintf(u[1].name2, sizeof u[1].name2, "%s", bad_id);
    u[2].type = ST_ITERATION_CREATED;
    u[2].id = 1;
    u[2].ref = 1;
    u[3].type = ST_WORKER_REGISTERED;
    u[3].id = 1;
    u[3].incarnation = 42;
    snprintf(u[3].address, sizeof u[3].address, "127.0.0.1:1\ninfo forged line");
    struct journal_record recs[4];
    uint8_t *payload[4];
    for (int i = 0; i < 4; i++) {
        size_t len;
        assert_int_equal(update_codec_encode(&u[i], &payload[i], &len), 0);
        recs[i] = (struct journal_record){.data = payload[i], .len = len};
    }
    recs[0].dataset_id = bad_id;
    recs[0].dataset = def;
    recs[0].dataset_len = def_len;
    if (journal_append(j, 1, recs, 4, NULL, err, sizeof err) != 0)
        fail_msg("journal_append: %s", err);
    for (int i = 0; i < 4; i++)
        free(payload[i]);
    free(def);
    journal_close(j);
}

static void test_status_with_bad_names_in_old_journal(void **unused)
{
    (void)unused;
    struct cluster c = {0};
    snprintf(c.work_dir, sizeof c.work_dir, "%s/old-journal", tmp_dir());
    write_old_journal(c.work_dir);
    assert_int_equal(cluster_start_dispatcher(&c, 0, 1), 0);

    char *out = NULL, *err = NULL;
    int rc = cluster_cli(&c, &out, &err, "status", NULL);
    if (rc != 0)
        fail_msg("status: exit %d: %s", rc, err);
    assert_contains(out, "bad\\xff\\x0aid");
    assert_contains(out, "job\\x01\\xc3");
    assert_contains(out, "127.0.0.1:1\\x0ainfo forged line");
    assert_null(strstr(out, "\ninfo forged line"));
    free(out);
    free(err);

    json_t *st = cluster_status(&c);
    json_t *ds = json_array_get(json_object_get(st, "datasets"), 0);
    assert_string_equal(json_string_value(json_object_get(ds, "id")), "bad\\xff\\x0aid");
    json_t *job = json_array_get(json_object_get(st, "jobs"), 0);
    assert_string_equal(json_string_value(json_object_get(job, "name")), "job\\x01\\xc3");
    json_t *w = json_array_get(json_object_get(st, "workers"), 0);
    assert_string_equal(json_string_value(json_object_get(w, "address")),
                        "127.0.0.1:1\\x0ainfo forged line");
    json_decref(st);
    assert_int_equal(cluster_stop(&c), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_element_limit),
        cmocka_unit_test(test_dead_reader),
        cmocka_unit_test(test_dispatcher_limits),
        cmocka_unit_test(test_worker_limits),
        cmocka_unit_test(test_unread_jobs_cost_nothing),
        cmocka_unit_test(test_concurrent_reads_share_the_pool),
        cmocka_unit_test(test_finished_tasks_free_their_place),
        cmocka_unit_test(test_jobs_per_address),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_status_with_bad_names_in_old_journal),
    };
    if (getenv("SLUICE_TEST_FILTER"))
        cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
