/* Several tasks' split requests in one GetSplitsBatch, with the real binaries.
 *
 * The protocol, the test speaking it as a worker with a task in each of two jobs: each request of
 * a batch is answered as on its own, in order (a lease each; a repeated request number gets its
 * lease again; two requests of one task lease distinct splits); a request with a wrong worker key
 * or an unknown task is refused in its own result only; a batch of no requests or of more than
 * 256 is refused whole; sluice_split_requests_batched_total counts the requests batched.
 *
 * A real worker: two distributed_epoch reads at once on one worker, whose two tasks ask together
 * (the worker batches them), each read gets its range exactly once, and the dispatcher counted
 * batched requests.
 *
 * A real worker against a dispatcher of an earlier version (a fake on the test's loop, which
 * answers GetSplitsBatch SLUICE_ERR_UNSUPPORTED as such a dispatcher does): after the first batch
 * it asks for each task on its own, never in a batch again, and both tasks produce and report
 * every split of their iterations exactly once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "common/rpc_server.h"
#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/loop.h"
#include "lib/peer.h"
#include "lib/proc.h"
#include "lib/scrape.h"
#include "lib/tmp.h"
#include "pipeline/def.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 20000
#define TOO_MANY 257 /* one over the dispatcher's MAX_SPLITS_BATCH */

static const uint8_t worker_key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static Sluice__Envelope *call_ok(struct peer *p, Sluice__Envelope *env,
                                 Sluice__Envelope__BodyCase want, const char *what)
{
    struct peer_result r;
    Sluice__Envelope *rep = peer_call(p, env, WAIT_MS, &r);
    if (!rep || rep->body_case != want)
        fail_msg("%s: %d %s", what, r.status, r.msg);
    return rep;
}

static void register_pairs(struct peer *p)
{
    Sluice__SourceDef src = SLUICE__SOURCE_DEF__INIT;
    src.kind = SLUICE__SOURCE_DEF__KIND__RANGE;
    src.stop = 40;
    src.step = 1;
    Sluice__DatasetDef def = SLUICE__DATASET_DEF__INIT;
    def.source = &src;
    Sluice__RegisterDatasetRequest body = SLUICE__REGISTER_DATASET_REQUEST__INIT;
    body.dataset = &def;
    body.dataset_id = "pairs";
    body.split_size = 2; /* 20 splits */
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_REGISTER_DATASET;
    env.register_dataset = &body;
    sluice__envelope__free_unpacked(
        call_ok(p, &env, SLUICE__ENVELOPE__BODY_REGISTER_DATASET_REPLY, "register"), NULL);
}

static uint64_t join_job(struct peer *p, const char *name)
{
    Sluice__GetOrCreateJobRequest body = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    body.dataset_id = "pairs";
    body.job_name = (char *)name;
    body.mode = SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &body;
    Sluice__Envelope *rep =
        call_ok(p, &env, SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB_REPLY, "get_or_create_job");
    uint64_t it = rep->get_or_create_job_reply->iteration_id;
    sluice__envelope__free_unpacked(rep, NULL);
    return it;
}

/* The worker's heartbeat; returns the reply (free it). */
static Sluice__Envelope *heartbeat(struct peer *wk)
{
    Sluice__WorkerHeartbeatRequest whb = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    whb.address = "127.0.0.1:1";
    whb.worker_key.data = (uint8_t *)worker_key;
    whb.worker_key.len = sizeof worker_key;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &whb;
    return call_ok(wk, &env, SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY, "worker heartbeat");
}

static Sluice__GetSplitsRequest ask(uint64_t task, uint32_t max, uint64_t seq)
{
    Sluice__GetSplitsRequest r = SLUICE__GET_SPLITS_REQUEST__INIT;
    r.task_id = task;
    r.max_splits = max;
    r.request_seq = seq;
    r.worker_key.data = (uint8_t *)worker_key;
    r.worker_key.len = sizeof worker_key;
    return r;
}

/* Sends the n requests in one batch; returns the reply (status 0) or NULL with r filled. */
static Sluice__Envelope *batch(struct peer *wk, Sluice__GetSplitsRequest *reqs, size_t n,
                               struct peer_result *r)
{
    Sluice__GetSplitsRequest **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    assert_non_null(ptrs);
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &reqs[i];
    Sluice__GetSplitsBatchRequest body = SLUICE__GET_SPLITS_BATCH_REQUEST__INIT;
    body.n_requests = n;
    body.requests = ptrs;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH;
    env.get_splits_batch = &body;
    Sluice__Envelope *rep = peer_call(wk, &env, WAIT_MS, r);
    free(ptrs);
    if (rep)
        assert_int_equal(rep->body_case, SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH_REPLY);
    return rep;
}

/* Result i is a lease of exactly seqs[0, n). */
static void expect_lease(const Sluice__GetSplitsBatchReply *b, size_t i, const uint64_t *seqs,
                         size_t n)
{
    assert_true(i < b->n_results);
    const Sluice__GetSplitsResult *res = b->results[i];
    if (res->code != 0)
        fail_msg("result %zu refused: %d %s", i, res->code, res->message);
    assert_non_null(res->reply);
    assert_int_equal(res->reply->n_seqs, n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(res->reply->seqs[k], seqs[k]);
    assert_false(res->reply->end_of_splits);
    assert_non_null(res->reply->plan); /* every lease names its plan */
}

static void expect_refused(const Sluice__GetSplitsBatchReply *b, size_t i, int code,
                           const char *msg)
{
    assert_true(i < b->n_results);
    const Sluice__GetSplitsResult *res = b->results[i];
    assert_null(res->reply);
    assert_int_equal(res->code, code);
    assert_string_equal(res->message, msg);
}

static double batched_total(const char *metrics_addr)
{
    struct expo e;
    char err[256];
    if (scrape_metrics(metrics_addr, &e, err, sizeof err) != 0)
        fail_msg("scrape %s: %s", metrics_addr, err);
    double v = -1;
    assert_int_equal(expo_value(&e, "sluice_split_requests_batched_total", "", &v), 0);
    expo_free(&e);
    return v;
}

static void test_batch_protocol(void **unused)
{
    (void)unused;
    static const char *const dargs[] = {"--metrics-port", "0", "--worker-timeout-ms", "120000",
                                        NULL};
    struct cluster c;
    memset(&c, 0, sizeof c);
    c.dispatcher_args = dargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 1), 0);
    char dm[64];
    assert_int_equal(cluster_read_address(&c.dispatcher, " metrics on ", dm, sizeof dm, 10000), 0);
    char at[64];
    snprintf(at, sizeof at, "127.0.0.1:%d", c.port);
    struct peer p, wk;
    peer_open(&p, at, SLUICE__ROLE__ROLE_CLIENT, 0x5eed);
    peer_open(&wk, at, SLUICE__ROLE__ROLE_WORKER, 0x7a5c);
    register_pairs(&p);
    sluice__envelope__free_unpacked(heartbeat(&wk), NULL);
    uint64_t it1 = join_job(&p, "one"), it2 = join_job(&p, "two");
    assert_true(it1 != it2);
    Sluice__Envelope *rep = heartbeat(&wk);
    const Sluice__WorkerHeartbeatReply *hr = rep->worker_heartbeat_reply;
    assert_int_equal(hr->n_new_tasks, 2);
    uint64_t ta = 0, tb = 0;
    for (size_t i = 0; i < 2; i++) {
        if (hr->new_tasks[i]->iteration_id == it1)
            ta = hr->new_tasks[i]->task_id;
        else if (hr->new_tasks[i]->iteration_id == it2)
            tb = hr->new_tasks[i]->task_id;
    }
    sluice__envelope__free_unpacked(rep, NULL);
    assert_true(ta != 0 && tb != 0);
    assert_true(batched_total(dm) == 0);

    /* Two tasks' leases, a wrong worker key and an unknown task, in one batch. */
    uint8_t guess[16];
    memset(guess, 0x42, sizeof guess);
    Sluice__GetSplitsRequest reqs[4] = {ask(ta, 2, 1), ask(tb, 3, 1), ask(ta, 2, 2),
                                        ask(987654, 1, 1)};
    reqs[2].worker_key.data = guess;
    struct peer_result r;
    rep = batch(&wk, reqs, 4, &r);
    if (!rep)
        fail_msg("batch: %d %s", r.status, r.msg);
    const Sluice__GetSplitsBatchReply *b = rep->get_splits_batch_reply;
    assert_int_equal(b->n_results, 4);
    static const uint64_t first2[] = {0, 1}, first3[] = {0, 1, 2};
    expect_lease(b, 0, first2, 2);
    expect_lease(b, 1, first3, 3);
    char want[256];
    snprintf(want, sizeof want, "task %" PRIu64 ": the worker key does not match its worker's", ta);
    expect_refused(b, 2, SLUICE_ERR_DENIED, want);
    expect_refused(b, 3, SLUICE_ERR_NOT_FOUND, "task 987654 not found");
    sluice__envelope__free_unpacked(rep, NULL);

    /* The same numbers again (a reply lost): the same leases. */
    rep = batch(&wk, reqs, 2, &r);
    assert_non_null(rep);
    expect_lease(rep->get_splits_batch_reply, 0, first2, 2);
    expect_lease(rep->get_splits_batch_reply, 1, first3, 3);
    sluice__envelope__free_unpacked(rep, NULL);

    /* One task twice: the second request is planned on what the first leased. */
    Sluice__GetSplitsRequest twice[2] = {ask(ta, 2, 2), ask(ta, 2, 3)};
    rep = batch(&wk, twice, 2, &r);
    assert_non_null(rep);
    static const uint64_t next[] = {2, 3}, after[] = {4, 5};
    expect_lease(rep->get_splits_batch_reply, 0, next, 2);
    expect_lease(rep->get_splits_batch_reply, 1, after, 2);
    sluice__envelope__free_unpacked(rep, NULL);

    /* Refused whole: no requests, or too many. */
    assert_null(batch(&wk, reqs, 0, &r));
    assert_int_equal(r.status, SLUICE_ERR_INVALID);
    assert_string_equal(r.msg, "a GetSplitsBatch carries 1 to 256 requests, this one 0: refused "
                               "whole");
    Sluice__GetSplitsRequest *many = calloc(TOO_MANY, sizeof *many);
    assert_non_null(many);
    for (size_t i = 0; i < TOO_MANY; i++)
        many[i] = ask(tb, 1, 2 + i);
    assert_null(batch(&wk, many, TOO_MANY, &r));
    free(many);
    assert_int_equal(r.status, SLUICE_ERR_INVALID);
    assert_string_equal(r.msg, "a GetSplitsBatch carries 1 to 256 requests, this one 257: refused "
                               "whole");
    /* Nothing of it was leased: task b's next request gets the splits after its first three. */
    Sluice__GetSplitsRequest one[1] = {ask(tb, 1, 2)};
    rep = batch(&wk, one, 1, &r);
    assert_non_null(rep);
    static const uint64_t fourth[] = {3};
    expect_lease(rep->get_splits_batch_reply, 0, fourth, 1);
    sluice__envelope__free_unpacked(rep, NULL);
    /* 4 + 2 + 2 + 1 requests came in batches. */
    assert_true(batched_total(dm) == 9);

    peer_close(&p);
    peer_close(&wk);
    assert_int_equal(cluster_stop(&c), 0);
}

static void test_worker_batches(void **unused)
{
    (void)unused;
    static const char *const dargs[] = {"--metrics-port", "0", NULL};
    struct cluster c;
    memset(&c, 0, sizeof c);
    c.dispatcher_args = dargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    char dm[64];
    assert_int_equal(cluster_read_address(&c.dispatcher, " metrics on ", dm, sizeof dm, 10000), 0);
    assert_int_equal(cluster_add_worker(&c), 0);
    cluster_wait_registered(&c);
    /* Two reads at once, each its own job and so its own task on the one worker; paced, so
     * that the two tasks lease side by side for about a second. */
    struct proc rd[2];
    static const char *const pipelines[2] = {"range(3000) | map(wait_us, 300)",
                                             "range(5000, 8000) | map(wait_us, 300)"};
    for (int i = 0; i < 2; i++)
        assert_int_equal(cluster_cli_spawn(&c, &rd[i], "read", pipelines[i], "--mode",
                                           "distributed_epoch", "--split-size", "10", NULL),
                         0);
    for (int i = 0; i < 2; i++) {
        char *out = proc_read_all(&rd[i], 60000);
        assert_non_null(out);
        assert_int_equal(proc_wait(&rd[i], 10000), 0);
        long base = i == 0 ? 0 : 5000;
        size_t n = 0;
        static char seen[3000];
        memset(seen, 0, sizeof seen);
        for (char *s = strtok(out, "\n"); s; s = strtok(NULL, "\n")) {
            long v = strtol(s, NULL, 10) - base;
            assert_true(v >= 0 && v < 3000);
            assert_int_equal(seen[v], 0);
            seen[v] = 1;
            n++;
        }
        assert_int_equal(n, 3000);
        free(out);
    }
    double batched = batched_total(dm);
    printf("    split requests batched: %.0f\n", batched);
    assert_true(batched >= 2);
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- a dispatcher of an earlier version ------------------------------------------------------ */

#define OLD_TASKS 2
#define OLD_SPLITS 10 /* range(100) in splits of 10 */

struct old_dispatcher {
    struct rpc_server *srv;
    bool closed;
    Sluice__DatasetDef *def;
    bool give_tasks; /* the next heartbeat reply assigns the tasks */
    bool gave_tasks;
    unsigned heartbeats, batches, singles, singles_before_batch;
    uint64_t cursor[OLD_TASKS];               /* the next split to lease, per task */
    unsigned finished[OLD_TASKS][OLD_SPLITS]; /* times each split was reported finished */
    uint64_t last_seq[OLD_TASKS];             /* request numbers: each new one is greater */
    bool renumbered;                          /* a request number went backwards */
};

static void old_heartbeat(struct old_dispatcher *od, struct rpc_conn *conn, uint64_t id)
{
    Sluice__TaskDef defs[OLD_TASKS], *ptrs[OLD_TASKS];
    Sluice__WorkerHeartbeatReply body = SLUICE__WORKER_HEARTBEAT_REPLY__INIT;
    body.worker_id = 1;
    body.heartbeat_ms = 200;
    od->heartbeats++;
    if (od->give_tasks && !od->gave_tasks) {
        od->gave_tasks = true;
        for (int i = 0; i < OLD_TASKS; i++) {
            sluice__task_def__init(&defs[i]);
            defs[i].task_id = (uint64_t)i + 1;
            defs[i].iteration_id = (uint64_t)i + 1;
            defs[i].job_id = (uint64_t)i + 1;
            defs[i].dataset_id = "old";
            defs[i].dataset = od->def;
            defs[i].mode = SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH;
            defs[i].num_consumers = 1;
            ptrs[i] = &defs[i];
        }
        body.n_new_tasks = OLD_TASKS;
        body.new_tasks = ptrs;
    }
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY;
    env.worker_heartbeat_reply = &body;
    assert_int_equal(rpc_conn_reply(conn, id, &env), 0);
}

static void old_get_splits(struct old_dispatcher *od, struct rpc_conn *conn, uint64_t id,
                           const Sluice__GetSplitsRequest *req)
{
    if (req->task_id < 1 || req->task_id > OLD_TASKS) {
        rpc_conn_reply_error(conn, id, SLUICE_ERR_NOT_FOUND, "task %" PRIu64 " not found",
                             req->task_id);
        return;
    }
    size_t t = req->task_id - 1;
    od->singles++;
    if (od->batches == 0)
        od->singles_before_batch++;
    /* Numbers only grow (no reply is lost here, so none is sent again). */
    if (req->request_seq <= od->last_seq[t])
        od->renumbered = true;
    od->last_seq[t] = req->request_seq;
    for (size_t i = 0; i < req->n_finished; i++) {
        if (req->finished[i] < OLD_SPLITS)
            od->finished[t][req->finished[i]]++;
    }
    uint64_t seqs[OLD_SPLITS];
    size_t n = 0;
    while (n < req->max_splits && od->cursor[t] < OLD_SPLITS)
        seqs[n++] = od->cursor[t]++;
    Sluice__SplitPlan plan = SLUICE__SPLIT_PLAN__INIT;
    plan.source_len = 100;
    plan.split_size = 10;
    plan.per_pass = OLD_SPLITS;
    plan.passes = 1;
    Sluice__GetSplitsReply body = SLUICE__GET_SPLITS_REPLY__INIT;
    body.seqs = seqs;
    body.n_seqs = n;
    body.plan = &plan;
    /* The end once everything is leased and reported. */
    unsigned done = 0;
    for (size_t k = 0; k < OLD_SPLITS; k++)
        done += od->finished[t][k] > 0;
    body.end_of_splits = n == 0 && done == OLD_SPLITS;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS_REPLY;
    env.get_splits_reply = &body;
    assert_int_equal(rpc_conn_reply(conn, id, &env), 0);
}

static void old_on_request(struct rpc_server *srv, struct rpc_conn *conn,
                           const Sluice__Envelope *env, void *user)
{
    (void)srv;
    struct old_dispatcher *od = user;
    switch (env->body_case) {
    case SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT:
        old_heartbeat(od, conn, env->id);
        break;
    case SLUICE__ENVELOPE__BODY_GET_SPLITS:
        old_get_splits(od, conn, env->id, env->get_splits);
        break;
    default:
        /* What a dispatcher answers a message it does not know (server.c). */
        if (env->body_case == SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH)
            od->batches++;
        rpc_conn_reply_error(conn, env->id, SLUICE_ERR_UNSUPPORTED,
                             "the dispatcher does not serve message %d", (int)env->body_case);
        break;
    }
}

static bool old_all_finished(const struct old_dispatcher *od)
{
    for (int t = 0; t < OLD_TASKS; t++) {
        for (int k = 0; k < OLD_SPLITS; k++) {
            if (od->finished[t][k] == 0)
                return false;
        }
    }
    return true;
}

static void test_older_dispatcher(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct old_dispatcher od;
    memset(&od, 0, sizeof od);
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    assert_int_equal(pipe_parse("range(100)", &spec, err, sizeof err), 0);
    assert_int_equal(pipe_spec_encode(spec, &bytes, &len), 0);
    od.def = sluice__dataset_def__unpack(NULL, len, bytes);
    assert_non_null(od.def);
    free(bytes);
    pipe_spec_free(spec);
    struct rpc_server_opts opts = {.host = "127.0.0.1",
                                   .role = SLUICE__ROLE__ROLE_DISPATCHER,
                                   .incarnation = rpc_new_incarnation(),
                                   .on_request = old_on_request,
                                   .user = &od};
    if (rpc_server_start(&loop, &opts, &od.srv, err, sizeof err) != 0)
        fail_msg("rpc_server_start: %s", err);
    struct cluster c;
    memset(&c, 0, sizeof c);
    c.port = rpc_server_port(od.srv);
    assert_int_equal(cluster_add_worker(&c), 0);
    /* Heartbeats every 200 ms (the fake's replies say so). */
    RUN_UNTIL(&loop, od.heartbeats >= 2, WAIT_MS);
    /* A read of each task before the worker knows of either. With the fake's loop stopped the
     * worker's next heartbeat is on its way, unanswered, when both reads arrive: each waits for
     * the heartbeat after it (hb_soon), whose reply, once the fake's loop runs again, finds both
     * tasks assigned (by the reply before). The reads then start both tasks together, and their
     * first requests go in one batch. */
    sleep_ms(500);
    struct peer pe;
    peer_open(&pe, c.workers[0].addr, SLUICE__ROLE__ROLE_CLIENT, 0x4ead);
    Sluice__GetElementsRequest ge[OLD_TASKS];
    Sluice__Envelope genv[OLD_TASKS];
    struct peer_result gr[OLD_TASKS];
    for (int i = 0; i < OLD_TASKS; i++) {
        sluice__get_elements_request__init(&ge[i]);
        ge[i].task_id = (uint64_t)i + 1;
        ge[i].client_id = 77;
        ge[i].max_elements = 1000;
        sluice__envelope__init(&genv[i]);
        genv[i].body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS;
        genv[i].get_elements = &ge[i];
        peer_send(&pe, &genv[i], WAIT_MS, &gr[i]);
    }
    /* Sent once connected; parked for at most WORKER_POLL_MS (1 s) from their arrival. */
    RUN_UNTIL(&pe.loop, rpc_client_connected(pe.c), WAIT_MS);
    run_for(&pe.loop, 100);
    od.give_tasks = true;
    long long t0 = now_ms();
    while (!old_all_finished(&od) && now_ms() - t0 < WAIT_MS) {
        uv_run(&loop, UV_RUN_NOWAIT);
        uv_run(&pe.loop, UV_RUN_NOWAIT);
        sleep_ms(1);
    }
    if (!old_all_finished(&od)) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "tail -n 30 '%s'", c.workers[0].log);
        if (system(cmd) != 0)
            fprintf(stderr, "no worker log\n");
        fail_msg("not every split was reported finished: %u heartbeats, %u batches, %u single "
                 "requests",
                 od.heartbeats, od.batches, od.singles);
    }
    /* A little longer: nothing is reported twice, and no batch comes again. */
    run_for(&loop, 500);
    printf("    batches %u (refused), single requests %u\n", od.batches, od.singles);

    assert_int_equal(od.batches, 1);
    assert_int_equal(od.singles_before_batch, 0); /* the two tasks start together: they ask so */
    assert_true(od.singles >= 2 * 2); /* each task's lease of 4 at most, and its reports */
    assert_false(od.renumbered);
    for (int t = 0; t < OLD_TASKS; t++) {
        for (int k = 0; k < OLD_SPLITS; k++)
            assert_int_equal(od.finished[t][k], 1);
    }
    assert_true(proc_wait_log(&c.workers[0], "does not take several tasks' split requests in one",
                              WAIT_MS) >= 0);
    assert_int_equal(cluster_stop(&c), 0);
    peer_close(&pe);
    for (int i = 0; i < OLD_TASKS; i++) {
        if (gr[i].reply)
            sluice__envelope__free_unpacked(gr[i].reply, NULL);
    }
    rpc_server_close(od.srv, set_flag, &od.closed);
    RUN_UNTIL(&loop, od.closed, WAIT_MS);
    loop_finish(&loop);
    sluice__dataset_def__free_unpacked(od.def, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_protocol),
        cmocka_unit_test(test_worker_batches),
        cmocka_unit_test(test_older_dispatcher),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmp_cleanup();
    return rc;
}
