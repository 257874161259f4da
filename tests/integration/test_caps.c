/* Capabilities, end to end: a real dispatcher, workers and `sluice read` on 127.0.0.1, and a
 * stranger that speaks the wire protocol itself with everything `sluice status` shows (job, task
 * and worker ids, addresses, incarnations) and every client id it can guess:
 *
 *   - it cannot heartbeat, release or read as another job's client: the dispatcher and the
 *     worker refuse with SLUICE_ERR_DENIED and an exact message, also when it presents the valid
 *     capabilities of a job of its own; its own capabilities work for its own job (the control);
 *   - it cannot deregister, drain or displace a live worker with the worker's visible
 *     incarnation, nor hand back its splits: the worker stays, and the victim's read completes
 *     with the exact multiset;
 *   - a read with --whole-copies (parallel_epochs) whose worker is killed mid-copy exits 1 naming
 *     the task and the worker; without it the copy is cut short, counted, and the read exits 0;
 *     a drained worker's shortened copy is complete for its reader (exit 0);
 *     a raw reader of a whole copy gets an end of sequence that counts exactly what it got; and
 *     the readers of a shared job each check exactly their own part;
 *   - capabilities survive a SIGKILL and restart of a fault-tolerant dispatcher (journal and
 *     snapshots).
 *
 * Every wait is bounded. SLUICE_TEST_FILTER selects tests by cmocka's wildcard syntax. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/peer.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 15000
#define READ_MS 60000

/* ---- requests of a synchronous RPC peer (lib/peer.h) ----------------------------------------- */

/* Asserts that the call failed with code and exactly the message want. */
static void assert_refused(const struct peer_result *r, int code, const char *want)
{
    if (r->status != code || strcmp(r->msg, want) != 0)
        fail_msg("expected %d \"%s\", got %d \"%s\"", code, want, r->status, r->msg);
}

static Sluice__Envelope *client_heartbeat(struct peer *c, uint64_t client, const uint8_t *key,
                                          size_t key_len, struct peer_result *r)
{
    Sluice__ClientHeartbeatRequest body = SLUICE__CLIENT_HEARTBEAT_REQUEST__INIT;
    body.client_id = client;
    body.client_key.data = (uint8_t *)key;
    body.client_key.len = key_len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT;
    env.client_heartbeat = &body;
    return peer_call(c, &env, WAIT_MS, r);
}

static Sluice__Envelope *release_client(struct peer *c, uint64_t client, const uint8_t *key,
                                        size_t key_len, struct peer_result *r)
{
    Sluice__ReleaseClientRequest body = SLUICE__RELEASE_CLIENT_REQUEST__INIT;
    body.client_id = client;
    body.client_key.data = (uint8_t *)key;
    body.client_key.len = key_len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_RELEASE_CLIENT;
    env.release_client = &body;
    return peer_call(c, &env, WAIT_MS, r);
}

static Sluice__Envelope *get_elements(struct peer *c, uint64_t task, uint64_t client,
                                      const uint8_t *key, size_t key_len, struct peer_result *r)
{
    Sluice__GetElementsRequest body = SLUICE__GET_ELEMENTS_REQUEST__INIT;
    body.task_id = task;
    body.client_id = client;
    body.client_key.data = (uint8_t *)key;
    body.client_key.len = key_len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS;
    env.get_elements = &body;
    return peer_call(c, &env, WAIT_MS, r);
}

static Sluice__Envelope *worker_heartbeat(struct peer *c, const char *address, const uint8_t *key,
                                          size_t key_len, bool draining, bool leaving,
                                          struct peer_result *r)
{
    Sluice__WorkerHeartbeatRequest body = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    body.address = (char *)address;
    body.worker_key.data = (uint8_t *)key;
    body.worker_key.len = key_len;
    body.draining = draining;
    body.leaving = leaving;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &body;
    return peer_call(c, &env, WAIT_MS, r);
}

/* Joins the job name (a new one for "") on dataset ds as a new client: its client id, its job
 * id and its capability (16 bytes). */
static void join_job(struct peer *d, char *ds, char *name, uint64_t *client, uint64_t *job,
                     uint8_t key[16])
{
    Sluice__GetOrCreateJobRequest body = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    body.dataset_id = ds;
    body.job_name = name;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &body;
    struct peer_result r;
    Sluice__Envelope *rep = peer_call(d, &env, WAIT_MS, &r);
    if (!rep)
        fail_msg("get_or_create_job: %s", r.msg);
    const Sluice__GetOrCreateJobReply *reply = rep->get_or_create_job_reply;
    assert_int_equal(reply->client_key.len, 16);
    *client = reply->client_id;
    *job = reply->job_id;
    memcpy(key, reply->client_key.data, 16);
    sluice__envelope__free_unpacked(rep, NULL);
}

/* Releases the client with its capability, which must succeed. */
static void leave_job(struct peer *d, uint64_t client, const uint8_t key[16])
{
    struct peer_result r;
    assert_non_null(release_client(d, client, key, 16, &r));
    sluice__envelope__free_unpacked(r.reply, NULL);
}

/* ---- the cluster ----------------------------------------------------------------------------- */

/* A worker timeout long enough that a loaded machine does not evict a live worker (which fails a
 * whole-copy read, as it should), short enough that a killed one goes within seconds. */
static const char *const short_timeouts[] = {"--worker-timeout-ms", "5000", "--log-level", "info",
                                             NULL};

/* Starts a dispatcher with args (fault-tolerant or not) into *state. */
static int start_cluster(void **state, const char *const *args, int fault_tolerant)
{
    return (*state = cluster_new(args, NULL, fault_tolerant, 0)) ? 0 : -1;
}

static int setup(void **state)
{
    return start_cluster(state, short_timeouts, 0);
}

static long long int_field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

/* The worker listed at address: its id, incarnation and draining flag. Returns how many workers
 * are listed in all. */
static size_t worker_at(struct cluster *c, const char *address, uint64_t *id, uint64_t *inc,
                        bool *draining)
{
    json_t *doc = cluster_status(c);
    json_t *ws = json_object_get(doc, "workers");
    size_t n = json_array_size(ws);
    *id = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *w = json_array_get(ws, i);
        if (strcmp(json_string_value(json_object_get(w, "address")), address) != 0)
            continue;
        *id = (uint64_t)int_field(w, "id");
        *inc = strtoull(json_string_value(json_object_get(w, "incarnation")), NULL, 16);
        *draining = json_is_true(json_object_get(w, "draining"));
    }
    json_decref(doc);
    return n;
}

/* The whole of a (small) file, NUL-terminated. */
/* Reads the reader's output to its end and asserts it exited 0 with every value of range(n)
 * exactly once. */
static void assert_read_exact(struct proc *r, long n)
{
    char *out = proc_read_all(r, READ_MS);
    int rc = proc_wait(r, 5000);
    if (rc != 0) {
        char *log = read_text_file(r->log);
        fprintf(stderr, "reader exited %d: %s", rc, log);
        free(log);
    }
    assert_int_equal(rc, 0);
    char *got = sorted_lines(out);
    char *want = expected_range(n, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
}

static char *register_dataset(struct cluster *c, const char *pipeline)
{
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "register", pipeline, NULL), 0);
    free(err);
    out[strcspn(out, "\n")] = '\0';
    return out;
}

/* ---- a stranger guessing client and task ids ------------------------------------------------- */

#define VICTIM "range(3000) | map(wait_us, 1000)"

static void test_guessed_ids_refused(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    struct proc victim;
    assert_int_equal(cluster_cli_spawn(c, &victim, "read", VICTIM, "--job-name", "victim", NULL),
                     0);
    json_t *vj = cluster_wait_job(c, "victim", 1, WAIT_MS);
    uint64_t vjob = (uint64_t)int_field(vj, "id");
    uint64_t vtask = cluster_task_on(vj, c->workers[0].addr);
    json_decref(vj);

    /* The stranger joins a job of its own, on another dataset: a valid capability, for that
     * job only. */
    char *ds = register_dataset(c, "range(5)");
    struct peer d;
    peer_open(&d, c->dispatcher.addr, SLUICE__ROLE__ROLE_CLIENT, 0x5eed);
    uint64_t my_client, my_job;
    uint8_t my_key[16];
    join_job(&d, ds, "mine", &my_client, &my_job, my_key);
    struct peer_result r;
    Sluice__Envelope *rep;
    uint8_t guess[16];
    memset(guess, 0x42, sizeof guess);

    /* Every client id below its own is someone else's (the victim's among them). */
    assert_true(my_client >= 2);
    for (uint64_t g = 1; g < my_client; g++) {
        char want[256];
        snprintf(want, sizeof want,
                 "client %" PRIu64 ": wrong client key: not a consumer of job %" PRIu64, g, vjob);
        assert_null(client_heartbeat(&d, g, NULL, 0, &r));
        assert_refused(&r, SLUICE_ERR_DENIED, want);
        assert_null(client_heartbeat(&d, g, my_key, sizeof my_key, &r));
        assert_refused(&r, SLUICE_ERR_DENIED, want);
        assert_null(release_client(&d, g, NULL, 0, &r));
        assert_refused(&r, SLUICE_ERR_DENIED, want);
        assert_null(release_client(&d, g, guess, sizeof guess, &r));
        assert_refused(&r, SLUICE_ERR_DENIED, want);
    }
    /* The control: its own capability works for its own client. */
    rep = client_heartbeat(&d, my_client, my_key, sizeof my_key, &r);
    if (!rep)
        fail_msg("own heartbeat: %s", r.msg);
    assert_int_equal(rep->body_case, SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT_REPLY);
    /* Its task, with its capability for that task. */
    assert_int_equal(rep->client_heartbeat_reply->n_tasks, 1);
    const Sluice__TaskInfo *ti = rep->client_heartbeat_reply->tasks[0];
    uint64_t my_task = ti->task_id;
    assert_int_equal(ti->client_key.len, 16);
    uint8_t my_task_key[16];
    memcpy(my_task_key, ti->client_key.data, 16);
    sluice__envelope__free_unpacked(rep, NULL);
    assert_memory_not_equal(my_task_key, my_key, 16);

    /* At the worker: the victim's task, with guessed client ids and keys, or with the
     * stranger's own valid capability. */
    struct peer w;
    peer_open(&w, c->workers[0].addr, SLUICE__ROLE__ROLE_CLIENT, 0x5eed);
    char want[256];
    for (uint64_t g = 1; g < my_client; g++) {
        snprintf(want, sizeof want, "client %" PRIu64 " is not a consumer of job %" PRIu64, g,
                 vjob);
        assert_null(get_elements(&w, vtask, g, NULL, 0, &r));
        assert_refused(&r, SLUICE_ERR_DENIED, want);
        assert_null(get_elements(&w, vtask, g, guess, sizeof guess, &r));
        assert_refused(&r, SLUICE_ERR_DENIED, want);
        assert_null(get_elements(&w, vtask, g, my_task_key, sizeof my_task_key, &r));
        assert_refused(&r, SLUICE_ERR_DENIED, want);
    }
    snprintf(want, sizeof want, "client %" PRIu64 " is not a consumer of job %" PRIu64, my_client,
             vjob);
    assert_null(get_elements(&w, vtask, my_client, my_task_key, sizeof my_task_key, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    assert_null(get_elements(&w, vtask, my_client, my_key, sizeof my_key, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    /* Its own task, with its capability for it, serves it (the control); a flipped bit, or its
     * capability at the dispatcher, does not. */
    rep = get_elements(&w, my_task, my_client, my_task_key, sizeof my_task_key, &r);
    if (!rep)
        fail_msg("own elements: %s", r.msg);
    sluice__envelope__free_unpacked(rep, NULL);
    snprintf(want, sizeof want, "client %" PRIu64 " is not a consumer of job %" PRIu64, my_client,
             my_job);
    assert_null(get_elements(&w, my_task, my_client, my_key, sizeof my_key, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    my_task_key[0] ^= 1;
    assert_null(get_elements(&w, my_task, my_client, my_task_key, sizeof my_task_key, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    peer_close(&w);
    leave_job(&d, my_client, my_key);
    peer_close(&d);
    free(ds);

    /* The victim lost nothing. */
    assert_read_exact(&victim, 3000);
}

/* ---- a stranger posing as a worker ----------------------------------------------------------- */

static void test_forged_worker_refused(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    const char *addr = c->workers[0].addr;
    struct proc victim;
    assert_int_equal(cluster_cli_spawn(c, &victim, "read", VICTIM, "--mode", "distributed_epoch",
                                       "--job-name", "dist", NULL),
                     0);
    json_t *vj = cluster_wait_job(c, "dist", 1, WAIT_MS);
    uint64_t vtask = cluster_task_on(vj, addr);
    json_decref(vj);
    uint64_t wid, inc;
    bool draining;
    assert_int_equal(worker_at(c, addr, &wid, &inc, &draining), 1);
    assert_true(wid != 0);

    /* With the worker's visible incarnation and no secret, a guessed one, or none. */
    uint8_t guess[16];
    memset(guess, 0x42, sizeof guess);
    char want[256];
    snprintf(want, sizeof want, "worker at %s: the worker key does not match its registration",
             addr);
    struct peer f;
    peer_open(&f, c->dispatcher.addr, SLUICE__ROLE__ROLE_WORKER, inc);
    struct peer_result r;
    assert_null(worker_heartbeat(&f, addr, NULL, 0, true, true, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    assert_null(worker_heartbeat(&f, addr, guess, sizeof guess, true, true, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    assert_null(worker_heartbeat(&f, addr, guess, sizeof guess, true, false, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    assert_null(worker_heartbeat(&f, addr, guess, sizeof guess, false, false, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    /* Handing the task's splits back (which would have them produced twice). */
    Sluice__GetSplitsRequest gs = SLUICE__GET_SPLITS_REQUEST__INIT;
    uint64_t seqs[] = {0, 1, 2, 3};
    gs.task_id = vtask;
    gs.returned = seqs;
    gs.n_returned = 4;
    gs.worker_key.data = guess;
    gs.worker_key.len = sizeof guess;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS;
    env.get_splits = &gs;
    assert_null(peer_call(&f, &env, WAIT_MS, &r));
    snprintf(want, sizeof want, "task %" PRIu64 ": the worker key does not match its worker's",
             vtask);
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    peer_close(&f);

    /* A new incarnation claiming the live worker's address. */
    struct peer g;
    peer_open(&g, c->dispatcher.addr, SLUICE__ROLE__ROLE_WORKER, inc + 1);
    snprintf(want, sizeof want,
             "address %s is held by worker %" PRIu64 ", which is still heartbeating", addr, wid);
    assert_null(worker_heartbeat(&g, addr, guess, sizeof guess, false, false, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    peer_close(&g);

    /* The worker is still there, as it was, and the read completes exactly once. */
    uint64_t wid2, inc2;
    assert_int_equal(worker_at(c, addr, &wid2, &inc2, &draining), 1);
    assert_int_equal(wid2, wid);
    assert_int_equal(inc2, inc);
    assert_false(draining);
    assert_read_exact(&victim, 3000);
}

/* ---- capabilities across a dispatcher restart ----------------------------------------------- */

/* A fault-tolerant dispatcher that snapshots after every few changes, so a restart restores
 * iterations (and their secrets) from a snapshot as well as from records. */
static const char *const snapshotting[] = {
    "--worker-timeout-ms", "10000", "--snapshot-every", "3", "--log-level", "info", NULL};

static int setup_ft(void **state)
{
    return start_cluster(state, snapshotting, 1);
}

/* The client's capability for its only task, from a heartbeat (waiting for the task). */
static uint64_t task_and_key(struct peer *d, uint64_t client, const uint8_t key[16],
                             uint8_t task_key[16])
{
    struct peer_result r;
    long long t0 = now_ms();
    while (now_ms() - t0 < WAIT_MS) {
        Sluice__Envelope *rep = client_heartbeat(d, client, key, 16, &r);
        if (!rep && r.status == SLUICE_ERR_UNAVAILABLE) {
            usleep(50 * 1000); /* the dispatcher is restarting */
            continue;
        }
        if (!rep)
            fail_msg("heartbeat: %s", r.msg);
        uint64_t task = 0;
        if (rep->client_heartbeat_reply->n_tasks == 1) {
            const Sluice__TaskInfo *ti = rep->client_heartbeat_reply->tasks[0];
            assert_int_equal(ti->client_key.len, 16);
            memcpy(task_key, ti->client_key.data, 16);
            task = ti->task_id;
        }
        sluice__envelope__free_unpacked(rep, NULL);
        if (task)
            return task;
        usleep(50 * 1000);
    }
    fail_msg("no task within %d ms", WAIT_MS);
    return 0;
}

static void test_keys_survive_restart(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    char *ds = register_dataset(c, "range(10) | repeat()");
    struct peer d;
    peer_open(&d, c->dispatcher.addr, SLUICE__ROLE__ROLE_CLIENT, 0x5eed);
    uint64_t client, job;
    uint8_t key[16], task_key[16], task_key2[16];
    join_job(&d, ds, "kept", &client, &job, key);
    uint64_t task = task_and_key(&d, client, key, task_key);

    assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);

    /* The restarted dispatcher knows the iteration's secret: the same capabilities work, the same
     * task capability comes back, and a wrong one is still refused. */
    assert_int_equal(task_and_key(&d, client, key, task_key2), task);
    assert_memory_equal(task_key2, task_key, 16);
    uint8_t wrong[16];
    memcpy(wrong, key, 16);
    wrong[15] ^= 0x10;
    struct peer_result r;
    assert_null(client_heartbeat(&d, client, wrong, sizeof wrong, &r));
    char want[256];
    snprintf(want, sizeof want,
             "client %" PRIu64 ": wrong client key: not a consumer of job %" PRIu64, client, job);
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    /* The worker, which kept its task, serves it to the capability and to nothing else. */
    struct peer w;
    peer_open(&w, c->workers[0].addr, SLUICE__ROLE__ROLE_CLIENT, 0x5eed);
    long long t0 = now_ms();
    /* UNAVAILABLE: the worker has not heard of the task yet (its heartbeats were cut by the
     * restart). */
    Sluice__Envelope *rep;
    while (!(rep = get_elements(&w, task, client, task_key, sizeof task_key, &r)) &&
           r.status == SLUICE_ERR_UNAVAILABLE && now_ms() - t0 < WAIT_MS)
        usleep(50 * 1000);
    if (!rep)
        fail_msg("get_elements: %s", r.msg);
    sluice__envelope__free_unpacked(rep, NULL);
    snprintf(want, sizeof want, "client %" PRIu64 " is not a consumer of job %" PRIu64, client,
             job);
    assert_null(get_elements(&w, task, client, key, sizeof key, &r));
    assert_refused(&r, SLUICE_ERR_DENIED, want);
    peer_close(&w);
    leave_job(&d, client, key);
    peer_close(&d);
    free(ds);
}

/* ---- whole copies: exact accounting ---------------------------------------------------------- */

#define COPY "range(4000) | map(wait_us, 2000)"

/* Waits until the reader's job has a task on each worker, then long enough for both to have
 * served part of their copy, and well before either has made all of it (every element waits
 * 2 ms: a copy of 4000 takes seconds). */
static void wait_mid_copy(struct cluster *c, const char *name)
{
    json_t *j = cluster_wait_job(c, name, (size_t)c->nworkers, WAIT_MS);
    json_decref(j);
    usleep(1500 * 1000);
}

static void test_worker_killed_mid_copy(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    struct proc r;
    assert_int_equal(
        cluster_cli_spawn(c, &r, "read", COPY, "--job-name", "killed", "--whole-copies", NULL), 0);
    wait_mid_copy(c, "killed");
    json_t *j = cluster_wait_job(c, "killed", 2, WAIT_MS);
    uint64_t lost_task = cluster_task_on(j, c->workers[0].addr);
    json_decref(j);
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
    char *out = proc_read_all(&r, READ_MS);
    size_t lines = count_lines(out);
    free(out);
    /* Not a silent success with part of a copy: exit 1, naming the task and its worker. */
    int rc = proc_wait(&r, 5000);
    char *err = read_text_file(r.log);
    printf("    exit %d, %zu lines printed; stderr: %s", rc, lines, err);
    assert_int_equal(rc, 1);
    char want[256];
    snprintf(want, sizeof want, "task %" PRIu64 " on worker %s: the worker was lost after ",
             lost_task, c->workers[0].addr);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, " elements: its copy is incomplete"));
    free(err);
}

/* Without --whole-copies the same loss cuts the copy short: the read goes on, ends with the other
 * worker's whole copy and the part of the lost one it got, exits 0 and says what it lost. */
static void test_worker_killed_copy_cut(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", COPY, "--job-name", "cut", NULL), 0);
    wait_mid_copy(c, "cut");
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
    char *out = proc_read_all(&r, READ_MS);
    int rc = proc_wait(&r, 5000);
    char *err = read_text_file(r.log);
    size_t lines = count_lines(out);
    printf("    exit %d, %zu lines printed; stderr: %s", rc, lines, err);
    assert_int_equal(rc, 0);
    assert_true(lines > 4000 && lines < 8000);
    long *seen = calloc(4000, sizeof *seen);
    assert_non_null(seen);
    for (const char *p = out; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        assert_true(end != p && *end == '\n' && v >= 0 && v < 4000);
        seen[v]++;
        p = end + 1;
    }
    for (long v = 0; v < 4000; v++)
        assert_true(seen[v] >= 1 && seen[v] <= 2);
    free(seen);
    assert_non_null(strstr(err, "sluice: read: 1 copy cut short: its worker was lost in the "
                                "middle (--whole-copies fails the read instead)\n"));
    free(err);
    free(out);
}

static void test_drained_copy_is_complete(void **state)
{
    struct cluster *c = *state;
    static const char *const drain_flags[] = {"--drain-timeout-ms", "5000", NULL};
    c->worker_args = drain_flags;
    cluster_add_workers(c, 2);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", COPY, "--job-name", "drained", NULL), 0);
    wait_mid_copy(c, "drained");
    /* The drained worker's copy ends early (docs/operations.md, "Elastic workers"): what it sent
     * the reader is all the reader was promised from it, and got. */
    assert_int_equal(proc_stop(&c->workers[0], SIGTERM, WAIT_MS), 0);
    char *out = proc_read_all(&r, READ_MS);
    int rc = proc_wait(&r, 5000);
    if (rc != 0) {
        char *err = read_text_file(r.log);
        printf("    exit %d; stderr: %s", rc, err ? err : "");
        free(err);
    }
    assert_int_equal(rc, 0);
    /* The other worker's copy is whole: every value at least once; the drained one's part adds
     * fewer than a copy. */
    size_t lines = count_lines(out);
    printf("    %zu lines: a whole copy and part of another\n", lines);
    assert_true(lines >= 4000 && lines < 8000);
    long *seen = calloc(4000, sizeof *seen);
    assert_non_null(seen);
    for (const char *p = out; *p;) {
        long v = strtol(p, NULL, 10);
        assert_true(v >= 0 && v < 4000);
        seen[v]++;
        p = strchr(p, '\n');
        if (!p)
            break;
        p++;
    }
    for (long v = 0; v < 4000; v++)
        assert_true(seen[v] >= 1 && seen[v] <= 2);
    free(seen);
    free(out);
}

/* A shared job's copy is split between its readers first come, first served: each reader's end
 * counts what it was sent, so both reads succeed, and together they hold the copy exactly once. */
static void test_shared_copy_counts_per_reader(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    struct proc a, b;
    const char *pipe = "range(2000) | map(wait_us, 1000)";
    assert_int_equal(cluster_cli_spawn(c, &a, "read", pipe, "--job-name", "shared", NULL), 0);
    assert_int_equal(cluster_cli_spawn(c, &b, "read", pipe, "--job-name", "shared", NULL), 0);
    char *oa = proc_read_all(&a, READ_MS), *ob = proc_read_all(&b, READ_MS);
    assert_int_equal(proc_wait(&a, 5000), 0);
    assert_int_equal(proc_wait(&b, 5000), 0);
    printf("    the readers got %zu and %zu elements\n", count_lines(oa), count_lines(ob));
    char *both = malloc(strlen(oa) + strlen(ob) + 1);
    assert_non_null(both);
    strcpy(both, oa);
    strcat(both, ob);
    char *got = sorted_lines(both), *want = expected_range(2000, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(both);
    free(oa);
    free(ob);
}

/* A raw reader of a whole copy: the end of sequence counts exactly the elements it was sent. */
static void test_end_counts_what_was_sent(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    char *ds = register_dataset(c, "range(1000) | batch(7)");
    struct peer d;
    peer_open(&d, c->dispatcher.addr, SLUICE__ROLE__ROLE_CLIENT, 0x5eed);
    uint64_t client, job;
    uint8_t key[16];
    join_job(&d, ds, "", &client, &job, key);
    struct peer_result r;
    Sluice__Envelope *rep;
    uint64_t task = 0;
    uint8_t task_key[16];
    long long t0 = now_ms();
    while (task == 0 && now_ms() - t0 < WAIT_MS) {
        rep = client_heartbeat(&d, client, key, sizeof key, &r);
        assert_non_null(rep);
        if (rep->client_heartbeat_reply->n_tasks > 0) {
            const Sluice__TaskInfo *ti = rep->client_heartbeat_reply->tasks[0];
            task = ti->task_id;
            assert_int_equal(ti->client_key.len, 16);
            memcpy(task_key, ti->client_key.data, 16);
        }
        sluice__envelope__free_unpacked(rep, NULL);
        if (task == 0)
            usleep(50 * 1000);
    }
    assert_true(task != 0);

    struct peer w;
    peer_open(&w, c->workers[0].addr, SLUICE__ROLE__ROLE_CLIENT, 0x5eed);
    uint64_t got = 0;
    bool ended = false;
    t0 = now_ms();
    while (!ended && now_ms() - t0 < WAIT_MS) {
        rep = get_elements(&w, task, client, task_key, sizeof task_key, &r);
        if (!rep)
            fail_msg("get_elements: %s", r.msg);
        const Sluice__GetElementsReply *g = rep->get_elements_reply;
        got += g->count;
        if (g->end_of_sequence) {
            ended = true;
            assert_true(g->counted);
            assert_int_equal(g->delivered, got);
        }
        sluice__envelope__free_unpacked(rep, NULL);
    }
    assert_true(ended);
    /* 1000 values in batches of 7: 143 elements. */
    assert_int_equal(got, 143);
    peer_close(&w);
    leave_job(&d, client, key);
    peer_close(&d);
    free(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_guessed_ids_refused, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_forged_worker_refused, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_keys_survive_restart, setup_ft, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_end_counts_what_was_sent, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_shared_copy_counts_per_reader, setup,
                                        cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_worker_killed_mid_copy, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_worker_killed_copy_cut, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_drained_copy_is_complete, setup, cluster_teardown_lax),
    };
    if (getenv("SLUICE_TEST_FILTER"))
        cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
