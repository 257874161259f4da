/* A client heartbeat's reply tells the client only what was durable when its request was
 * planned, with the real binaries: a group of three dispatcher replicas, the test speaking the
 * wire protocol as a worker and as the two readers of a shared distributed_epoch job.
 *
 * A reader stops reporting a split once a reply says it is finished, and ends once a reply says
 * its iteration is. Were it told so of a change that later requests applied but that was not
 * committed yet, a change of leader (or a crash) could take that change back: the split would be
 * leased again, and the other reader would get the elements this one already has. So: with the
 * followers stopped (nothing commits, the leader keeps leading), one connection sends a dataset
 * registration (a change in flight), reader A's heartbeat (no change of its own: it waits for the
 * registration) and reader B's heartbeat, whose report completes split 0 (a change applied at
 * once). Once the followers go on, A's reply must not name split 0 finished nor the iteration
 * finished, and B's must name split 0; A's next heartbeat then names it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/loop.h"
#include "lib/net.h"
#include "lib/peer.h"
#include "lib/proc.h"
#include "lib/tmp.h"

#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 20000

static struct cluster group[3];

static int stop_group(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        if (group[i].dispatcher.pid > 0) {
            kill(group[i].dispatcher.pid, SIGCONT);
            proc_stop(&group[i].dispatcher, SIGKILL, 10000);
        }
        memset(&group[i], 0, sizeof group[i]);
    }
    return 0;
}

/* The index of the replica that serves, waiting (bounded) until one does and the other two
 * follow it in its term: a replica that still serves after an election it did not hear of
 * would step down at the first message of the new leader, answering the requests with an
 * error. */
static int wait_leader(void)
{
    long long t0 = now_ms();
    for (;;) {
        int serving = -1;
        uint64_t term[3] = {0}, leader_id[3] = {0};
        for (int i = 0; i < 3; i++) {
            json_t *st = cluster_status(&group[i]);
            json_t *raft = json_object_get(st, "raft");
            if (json_is_true(json_object_get(raft, "serving")))
                serving = i;
            term[i] = (uint64_t)json_integer_value(json_object_get(raft, "term"));
            leader_id[i] = (uint64_t)json_integer_value(json_object_get(raft, "leader_id"));
            json_decref(st);
        }
        bool followed = serving >= 0;
        for (int i = 0; followed && i < 3; i++)
            followed = term[i] == term[serving] && leader_id[i] == (uint64_t)serving + 1;
        if (followed)
            return serving;
        if (now_ms() - t0 > WAIT_MS)
            fail_msg("no replica serves with the others following it after %d ms", WAIT_MS);
        sleep_ms(50);
    }
}

/* Waits (bounded) until every replica is a voter: a replica joins the group's configuration
 * after the start, and until then the leader commits with fewer followers. */
static void wait_voters(void)
{
    long long t0 = now_ms();
    for (;;) {
        int voters = 0;
        for (int i = 0; i < 3; i++) {
            json_t *st = cluster_status(&group[i]);
            const char *m =
                json_string_value(json_object_get(json_object_get(st, "raft"), "membership"));
            voters += m && strcmp(m, "voter") == 0;
            json_decref(st);
        }
        if (voters == 3)
            return;
        if (now_ms() - t0 > WAIT_MS)
            fail_msg("the replicas are not all voters after %d ms", WAIT_MS);
        sleep_ms(50);
    }
}

static Sluice__Envelope *call_ok(struct peer *p, Sluice__Envelope *env,
                                 Sluice__Envelope__BodyCase want, const char *what)
{
    struct peer_result r;
    Sluice__Envelope *rep = peer_call(p, env, WAIT_MS, &r);
    if (!rep || rep->body_case != want)
        fail_msg("%s: %d %s", what, r.status, r.msg);
    return rep;
}

/* A RegisterDatasetRequest for range(stop) in splits of two elements, under id. */
struct register_req {
    Sluice__SourceDef src;
    Sluice__DatasetDef def;
    Sluice__RegisterDatasetRequest body;
    Sluice__Envelope env;
};

static void register_init(struct register_req *q, const char *id, int64_t stop)
{
    *q = (struct register_req){.src = SLUICE__SOURCE_DEF__INIT,
                               .def = SLUICE__DATASET_DEF__INIT,
                               .body = SLUICE__REGISTER_DATASET_REQUEST__INIT,
                               .env = SLUICE__ENVELOPE__INIT};
    q->src.kind = SLUICE__SOURCE_DEF__KIND__RANGE;
    q->src.stop = stop;
    q->src.step = 1;
    q->def.source = &q->src;
    q->body.dataset = &q->def;
    q->body.dataset_id = (char *)id;
    q->body.split_size = 2;
    q->env.body_case = SLUICE__ENVELOPE__BODY_REGISTER_DATASET;
    q->env.register_dataset = &q->body;
}

struct reader {
    uint64_t client, iteration;
    uint8_t key[64];
    size_t key_len;
};

static void join_job(struct peer *p, struct reader *rd)
{
    Sluice__GetOrCreateJobRequest body = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    body.dataset_id = "pairs";
    body.job_name = "shared";
    body.mode = SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &body;
    Sluice__Envelope *rep =
        call_ok(p, &env, SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB_REPLY, "get_or_create_job");
    const Sluice__GetOrCreateJobReply *j = rep->get_or_create_job_reply;
    rd->client = j->client_id;
    rd->iteration = j->iteration_id;
    assert_true(j->client_key.len <= sizeof rd->key);
    memcpy(rd->key, j->client_key.data, j->client_key.len);
    rd->key_len = j->client_key.len;
    sluice__envelope__free_unpacked(rep, NULL);
}

/* A client heartbeat reporting positions [begin, end) of split seq (its end marker too when
 * total > 0), ready to send. */
struct heartbeat {
    Sluice__SplitCoverage cov;
    Sluice__SplitCoverage *covs[1];
    uint64_t bounds[2];
    Sluice__ClientHeartbeatRequest body;
    Sluice__Envelope env;
};

static void heartbeat_init(struct heartbeat *h, const struct reader *rd, uint64_t seq,
                           uint64_t begin, uint64_t end, uint64_t total)
{
    *h = (struct heartbeat){.cov = SLUICE__SPLIT_COVERAGE__INIT,
                            .body = SLUICE__CLIENT_HEARTBEAT_REQUEST__INIT,
                            .env = SLUICE__ENVELOPE__INIT};
    h->cov.seq = seq;
    h->cov.ended = total > 0;
    h->cov.total = total;
    h->bounds[0] = begin;
    h->bounds[1] = end;
    h->cov.bounds = h->bounds;
    h->cov.n_bounds = 2;
    h->covs[0] = &h->cov;
    h->body.client_id = rd->client;
    h->body.iteration_id = rd->iteration;
    h->body.client_key.data = (uint8_t *)rd->key;
    h->body.client_key.len = rd->key_len;
    h->body.n_splits = 1;
    h->body.splits = h->covs;
    h->env.body_case = SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT;
    h->env.client_heartbeat = &h->body;
}

static const Sluice__ClientHeartbeatReply *hb_reply(const struct peer_result *r, const char *who)
{
    if (r->status != 0 || !r->reply ||
        r->reply->body_case != SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT_REPLY)
        fail_msg("%s's heartbeat: %d %s", who, r->status, r->msg);
    return r->reply->client_heartbeat_reply;
}

static uint8_t worker_key[16] = "durable replies";

/* One try on a fresh group. Returns false, having stopped the group, when a request was answered
 * with an error while the followers were stopped (the leader stepped down: the case cannot be
 * judged then, and is tried again); an answer that succeeded then fails the test, since nothing
 * can commit without a follower. */
static bool try_once(void)
{
    static int tries;
    tries++;
    char raft[3][64], list[256] = "", rpc[256] = "", ids[3][4];
    const char *args[3][16];
    int rports[3];
    assert_int_equal(free_ports(rports, 3), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(raft[i], sizeof raft[i], "127.0.0.1:%d", rports[i]);
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d=%s", i ? "," : "", i + 1,
                 raft[i]);
        snprintf(ids[i], sizeof ids[i], "%d", i + 1);
    }
    for (int i = 0; i < 3; i++) {
        /* Long timeouts: the test's peers heartbeat only when it says so, and a leader cut off
         * from its followers for the half second below must go on leading. */
        const char *a[] = {"--raft-id",
                           ids[i],
                           "--raft-address",
                           raft[i],
                           "--raft-cluster",
                           list,
                           "--raft-election-timeout-ms",
                           "5000",
                           "--worker-timeout-ms",
                           "120000",
                           "--client-timeout-ms",
                           "120000",
                           NULL};
        memcpy(args[i], a, sizeof a);
        group[i].dispatcher_args = args[i];
        snprintf(group[i].work_dir, sizeof group[i].work_dir, "%s/try-%d/replica-%d", tmp_dir(),
                 tries, i + 1);
        assert_int_equal(cluster_start_dispatcher(&group[i], 0, 1), 0);
        snprintf(rpc + strlen(rpc), sizeof rpc - strlen(rpc), "%s127.0.0.1:%d", i ? "," : "",
                 group[i].port);
    }
    wait_voters();
    int leader = wait_leader();
    char at[64];
    snprintf(at, sizeof at, "127.0.0.1:%d", group[leader].port);

    struct peer p, wk;
    peer_open(&p, at, SLUICE__ROLE__ROLE_CLIENT, 0x5eed);
    peer_open(&wk, at, SLUICE__ROLE__ROLE_WORKER, 0x7a5c);

    struct register_req reg;
    register_init(&reg, "pairs", 4); /* splits 0 = [0, 1], 1 = [2, 3] */
    sluice__envelope__free_unpacked(
        call_ok(&p, &reg.env, SLUICE__ENVELOPE__BODY_REGISTER_DATASET_REPLY, "register"), NULL);
    /* The worker first, so that the job's task is made for it. */
    Sluice__WorkerHeartbeatRequest whb = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    whb.address = "127.0.0.1:1";
    whb.worker_key.data = worker_key;
    whb.worker_key.len = sizeof worker_key;
    Sluice__Envelope wenv = SLUICE__ENVELOPE__INIT;
    wenv.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    wenv.worker_heartbeat = &whb;
    sluice__envelope__free_unpacked(
        call_ok(&wk, &wenv, SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY, "worker heartbeat"),
        NULL);
    struct reader a, b;
    join_job(&p, &a);
    join_job(&p, &b);
    assert_true(a.iteration == b.iteration && a.client != b.client);
    Sluice__Envelope *rep =
        call_ok(&wk, &wenv, SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY, "worker heartbeat");
    assert_int_equal(rep->worker_heartbeat_reply->n_new_tasks, 1);
    uint64_t task = rep->worker_heartbeat_reply->new_tasks[0]->task_id;
    sluice__envelope__free_unpacked(rep, NULL);
    Sluice__GetSplitsRequest gs = SLUICE__GET_SPLITS_REQUEST__INIT;
    gs.task_id = task;
    gs.worker_key.data = worker_key;
    gs.worker_key.len = sizeof worker_key;
    gs.max_splits = 2;
    Sluice__Envelope genv = SLUICE__ENVELOPE__INIT;
    genv.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS;
    genv.get_splits = &gs;
    rep = call_ok(&wk, &genv, SLUICE__ENVELOPE__BODY_GET_SPLITS_REPLY, "get_splits");
    assert_int_equal(rep->get_splits_reply->n_seqs, 2);
    assert_int_equal(rep->get_splits_reply->seqs[0], 0);
    sluice__envelope__free_unpacked(rep, NULL);

    /* A received element 0 of split 0: reported, not finished. */
    struct heartbeat ha, hb;
    heartbeat_init(&ha, &a, 0, 0, 1, 0);
    struct peer_result ra, rb, rr;
    peer_send(&p, &ha.env, WAIT_MS, &ra);
    peer_wait(&p, &ra);
    assert_int_equal(hb_reply(&ra, "A")->n_finished_seqs, 0);
    sluice__envelope__free_unpacked(ra.reply, NULL);

    /* The followers stop: nothing commits. One connection, so the leader takes the three
     * requests in this order. */
    int followers[2], nf = 0;
    for (int i = 0; i < 3; i++)
        if (i != leader)
            followers[nf++] = i;
    for (int k = 0; k < 2; k++)
        if (proc_pause(group[followers[k]].dispatcher.pid, WAIT_MS) != 0)
            fail_msg("replica %d did not stop", followers[k] + 1);
    struct register_req more;
    register_init(&more, "more", 6);
    heartbeat_init(&hb, &b, 0, 1, 2, 2); /* element 1 and the end marker: split 0 complete */
    peer_send(&p, &more.env, WAIT_MS, &rr);
    peer_send(&p, &ha.env, WAIT_MS, &ra);
    peer_send(&p, &hb.env, WAIT_MS, &rb);
    run_for(&p.loop, 500);
    bool early = rr.done || ra.done || rb.done;
    /* An answer that succeeded would be a change committed without a quorum. */
    bool committed =
        (rr.done && rr.status == 0) || (ra.done && ra.status == 0) || (rb.done && rb.status == 0);
    for (int k = 0; k < 2; k++)
        assert_int_equal(kill(group[followers[k]].dispatcher.pid, SIGCONT), 0);
    if (committed) {
        for (int i = 0; i < 3; i++)
            print_file(group[i].dispatcher.log, 40);
        fail_msg("the leader answered with success while both followers were stopped "
                 "(registration %d %d, A %d %d, B %d %d)",
                 rr.done, rr.status, ra.done, ra.status, rb.done, rb.status);
    }
    if (early) {
        print_message("answered while the followers were stopped (registration %d %d, A %d %d, "
                      "B %d %d): trying again on a fresh group\n",
                      rr.done, rr.status, ra.done, ra.status, rb.done, rb.status);
        for (int i = 0; i < 3; i++)
            print_file(group[i].dispatcher.log, 20);
        peer_wait(&p, &rr);
        peer_wait(&p, &ra);
        peer_wait(&p, &rb);
        sluice__envelope__free_unpacked(rr.reply, NULL);
        sluice__envelope__free_unpacked(ra.reply, NULL);
        sluice__envelope__free_unpacked(rb.reply, NULL);
        peer_close(&p);
        peer_close(&wk);
        stop_group(NULL);
        return false;
    }
    peer_wait(&p, &rr);
    peer_wait(&p, &ra);
    peer_wait(&p, &rb);
    assert_int_equal(rr.status, 0);
    sluice__envelope__free_unpacked(rr.reply, NULL);

    /* A's request was planned before B's report finished split 0. */
    const Sluice__ClientHeartbeatReply *ar = hb_reply(&ra, "A");
    assert_int_equal(ar->n_finished_seqs, 0);
    assert_false(ar->iteration_finished);
    const Sluice__ClientHeartbeatReply *br = hb_reply(&rb, "B");
    assert_int_equal(br->n_finished_seqs, 1);
    assert_int_equal(br->finished_seqs[0], 0);
    sluice__envelope__free_unpacked(ra.reply, NULL);
    sluice__envelope__free_unpacked(rb.reply, NULL);

    /* Durable now: A's next heartbeat is told. */
    peer_send(&p, &ha.env, WAIT_MS, &ra);
    peer_wait(&p, &ra);
    ar = hb_reply(&ra, "A");
    assert_int_equal(ar->n_finished_seqs, 1);
    assert_int_equal(ar->finished_seqs[0], 0);
    sluice__envelope__free_unpacked(ra.reply, NULL);

    peer_close(&p);
    peer_close(&wk);
    return true;
}

static void test_reply_tells_only_durable(void **state)
{
    (void)state;
    for (int attempt = 0; attempt < 3; attempt++)
        if (try_once())
            return;
    fail_msg("three groups in a row lost their leader while the followers were stopped");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_reply_tells_only_durable, stop_group),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
