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
 * batched requests. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "lib/cluster.h"
#include "lib/peer.h"
#include "lib/proc.h"
#include "lib/scrape.h"
#include "lib/tmp.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_protocol),
        cmocka_unit_test(test_worker_batches),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmp_cleanup();
    return rc;
}
