/* The fault-tolerant dispatcher, as a real process on 127.0.0.1: a fresh work dir, SIGKILL and
 * restart on the same work dir and port (the same incarnation, the split cursor exactly where it
 * was, ids going on), every acknowledged registration surviving a SIGKILL in the middle of
 * traffic, `sluice journal verify` and `dump` (also on a journal in use), and a damaged record
 * stopping the start with exit status 1 and a message naming the record and the work dir. The
 * test speaks the wire protocol itself, as a client and as a fake worker, so it decides every
 * request. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>

#include "common/error.h"
#include "common/rpc_client.h"
#include "lib/peer.h"
#include "lib/proc.h"
#include "lib/tmp.h"
#include "journal/journal.h"
#include "journal/record.h"

#include <inttypes.h>
#include <lmdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_MS 15000

/* ---- a synchronous RPC client (lib/peer.h) --------------------------------------------------- */

/* Sends req and waits for its answer; returns the reply copy (status 0) or NULL with r->msg.
 * A call that finds its connection gone (the dispatcher was restarted under it) is sent again,
 * as every peer of a restarting dispatcher does. */
static Sluice__Envelope *call(struct peer *c, Sluice__Envelope *req, struct peer_result *r)
{
    for (int attempt = 0;; attempt++) {
        Sluice__Envelope *rep = peer_call(c, req, WAIT_MS, r);
        if (r->status != SLUICE_ERR_UNAVAILABLE || attempt == 20)
            return rep;
    }
}

/* ---- requests -------------------------------------------------------------------------------- */

static Sluice__Envelope *get_or_create_job(struct peer *c, const char *dataset, const char *name)
{
    Sluice__GetOrCreateJobRequest body = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    body.dataset_id = (char *)dataset;
    body.job_name = (char *)name;
    body.mode = SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &body;
    struct peer_result r;
    Sluice__Envelope *rep = call(c, &env, &r);
    if (!rep || rep->body_case != SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB_REPLY)
        fail_msg("get_or_create_job: %s", r.msg);
    return rep;
}

/* The secret this test's worker registers with, and proves itself with afterwards. */
static uint8_t worker_key[16] = {'f', 't', ' ', 'w', 'o', 'r', 'k', 'e',
                                 'r', ' ', 's', 'e', 'c', 'r', 'e', 't'};

static Sluice__Envelope *heartbeat(struct peer *c, const char *address)
{
    Sluice__WorkerHeartbeatRequest body = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    body.address = (char *)address;
    body.worker_key.data = worker_key;
    body.worker_key.len = sizeof worker_key;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &body;
    struct peer_result r;
    Sluice__Envelope *rep = call(c, &env, &r);
    if (!rep || rep->body_case != SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY)
        fail_msg("worker_heartbeat: %s", r.msg);
    return rep;
}

/* Leases up to max splits, reporting finished ones; returns the seqs as "a,b,c". */
static void get_splits(struct peer *c, uint64_t task, uint64_t *finished, size_t nfinished,
                       uint32_t max, char *out, size_t outlen)
{
    Sluice__GetSplitsRequest body = SLUICE__GET_SPLITS_REQUEST__INIT;
    body.task_id = task;
    body.worker_key.data = worker_key;
    body.worker_key.len = sizeof worker_key;
    body.max_splits = max;
    body.n_finished = nfinished;
    body.finished = finished;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS;
    env.get_splits = &body;
    struct peer_result r;
    Sluice__Envelope *rep = call(c, &env, &r);
    if (!rep || rep->body_case != SLUICE__ENVELOPE__BODY_GET_SPLITS_REPLY)
        fail_msg("get_splits: %s", r.msg);
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < rep->get_splits_reply->n_seqs; i++)
        n += (size_t)snprintf(out + n, outlen - n, "%s%" PRIu64, i ? "," : "",
                              rep->get_splits_reply->seqs[i]);
    sluice__envelope__free_unpacked(rep, NULL);
}

/* A RegisterDatasetRequest for range(stop) under an explicit id. */
struct register_req {
    Sluice__SourceDef src;
    Sluice__DatasetDef def;
    Sluice__RegisterDatasetRequest body;
    Sluice__Envelope env;
    char id[32];
};

static void register_init(struct register_req *q, int i)
{
    Sluice__SourceDef src = SLUICE__SOURCE_DEF__INIT;
    Sluice__DatasetDef def = SLUICE__DATASET_DEF__INIT;
    Sluice__RegisterDatasetRequest body = SLUICE__REGISTER_DATASET_REQUEST__INIT;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    q->src = src;
    q->def = def;
    q->body = body;
    q->env = env;
    q->src.kind = SLUICE__SOURCE_DEF__KIND__RANGE;
    q->src.stop = i + 1;
    q->src.step = 1;
    q->def.source = &q->src;
    snprintf(q->id, sizeof q->id, "d%d", i);
    q->body.dataset = &q->def;
    q->body.dataset_id = q->id;
    q->body.split_size = 1; /* one split per element: the tests count splits */
    q->env.body_case = SLUICE__ENVELOPE__BODY_REGISTER_DATASET;
    q->env.register_dataset = &q->body;
}

/* ---- processes ------------------------------------------------------------------------------- */

static void start_dispatcher(struct proc *p, const char *wd, const char *port,
                             const char *snapshot_every)
{
    char *const argv[] = {(char *)bin_path("sluice-dispatcher"),
                          "--fault-tolerant",
                          "--work-dir",
                          (char *)wd,
                          "--port",
                          (char *)port,
                          "--snapshot-every",
                          (char *)snapshot_every,
                          "--log-level",
                          "warn",
                          NULL};
    assert_int_equal(proc_start(p, argv, WAIT_MS), 0);
}

static int journal_cmd(const char *action, const char *wd, char **out, char **err)
{
    char *const argv[] = {
        (char *)bin_path("sluice"), "journal", (char *)action, "--work-dir", (char *)wd, NULL};
    return run_cmd(argv, WAIT_MS, out, err);
}

static const char *port_of(const struct proc *p)
{
    const char *colon = strrchr(p->addr, ':');
    assert_non_null(colon);
    return colon + 1;
}

static uint64_t incarnation_of(struct peer *c)
{
    struct peer_result r;
    Sluice__StatusRequest body = SLUICE__STATUS_REQUEST__INIT;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_STATUS;
    env.status = &body;
    Sluice__Envelope *rep = call(c, &env, &r);
    if (!rep)
        fail_msg("status: %s", r.msg);
    sluice__envelope__free_unpacked(rep, NULL);
    return rpc_client_peer_incarnation(c->c);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_usage(void **unused)
{
    (void)unused;
    char *out = NULL, *err = NULL;
    char *const a1[] = {(char *)bin_path("sluice-dispatcher"), "--fault-tolerant", "--port", "0",
                        NULL};
    assert_int_equal(run_cmd(a1, WAIT_MS, &out, &err), 2);
    assert_string_equal(err, "sluice-dispatcher: usage: --fault-tolerant needs --work-dir\n");
    free(out);
    free(err);
    char *const a2[] = {(char *)bin_path("sluice"), "journal", "verify", NULL};
    assert_int_equal(run_cmd(a2, WAIT_MS, &out, &err), 2);
    assert_string_equal(err, "sluice: usage: journal verify needs --work-dir DIR\n");
    free(out);
    free(err);
    char wd[512];
    snprintf(wd, sizeof wd, "%s/no-journal-here", tmp_dir());
    assert_int_equal(journal_cmd("verify", wd, &out, &err), 1);
    char want[600];
    snprintf(want, sizeof want, "sluice: journal: %s: no journal here\n", wd);
    assert_string_equal(err, want);
    free(out);
    free(err);
}

static void test_restart_keeps_everything(void **unused)
{
    (void)unused;
    char wd[512], port[16];
    snprintf(wd, sizeof wd, "%s/ft/work", tmp_dir()); /* does not exist yet */
    struct proc d;
    start_dispatcher(&d, wd, "0", "5");
    snprintf(port, sizeof port, "%s", port_of(&d));

    struct peer cl, wk;
    peer_open(&cl, d.addr, SLUICE__ROLE__ROLE_CLIENT, 1001);
    peer_open(&wk, d.addr, SLUICE__ROLE__ROLE_WORKER, 777);
    uint64_t inc = incarnation_of(&cl);
    assert_true(inc != 0);

    struct register_req q;
    register_init(&q, 29); /* range(30) */
    struct peer_result r;
    Sluice__Envelope *rep = call(&cl, &q.env, &r);
    assert_non_null(rep);
    assert_string_equal(rep->register_dataset_reply->dataset_id, "d29");
    sluice__envelope__free_unpacked(rep, NULL);

    rep = get_or_create_job(&cl, "d29", "shared");
    uint64_t job = rep->get_or_create_job_reply->job_id;
    uint64_t it = rep->get_or_create_job_reply->iteration_id;
    uint64_t client = rep->get_or_create_job_reply->client_id;
    sluice__envelope__free_unpacked(rep, NULL);
    rep = heartbeat(&wk, "127.0.0.1:1");
    assert_int_equal(rep->worker_heartbeat_reply->n_new_tasks, 1);
    uint64_t task = rep->worker_heartbeat_reply->new_tasks[0]->task_id;
    sluice__envelope__free_unpacked(rep, NULL);

    char seqs[256];
    get_splits(&wk, task, NULL, 0, 3, seqs, sizeof seqs);
    assert_string_equal(seqs, "0,1,2");
    uint64_t fin[] = {0};
    get_splits(&wk, task, fin, 1, 2, seqs, sizeof seqs);
    assert_string_equal(seqs, "3,4");

    /* dump and verify read the journal while the dispatcher uses it. */
    char *out = NULL, *err = NULL;
    assert_int_equal(journal_cmd("verify", wd, &out, &err), 0);
    assert_string_equal(err, "");
    free(out);
    free(err);

    /* Killed without warning, restarted on the same work dir and port. */
    assert_int_equal(proc_stop(&d, SIGKILL, WAIT_MS), 128 + SIGKILL);
    start_dispatcher(&d, wd, port, "1000");     /* the records from here on stay in the log */
    assert_int_equal(incarnation_of(&cl), inc); /* the same dispatcher to its peers */
    assert_int_equal(incarnation_of(&wk), inc);

    /* The cursor is exactly where it was: leased splits stay leased, the next ones follow. */
    uint64_t fin2[] = {1, 2};
    get_splits(&wk, task, fin2, 2, 2, seqs, sizeof seqs);
    assert_string_equal(seqs, "5,6");
    /* Ids go on after the ones handed out before the restart. */
    rep = get_or_create_job(&cl, "d29", "");
    assert_true(rep->get_or_create_job_reply->job_id == job + 1);
    assert_true(rep->get_or_create_job_reply->iteration_id == it + 1);
    assert_true(rep->get_or_create_job_reply->client_id == client + 1);
    sluice__envelope__free_unpacked(rep, NULL);
    /* The named job is joined, not made again. */
    rep = get_or_create_job(&cl, "d29", "shared");
    assert_true(rep->get_or_create_job_reply->job_id == job);
    assert_true(rep->get_or_create_job_reply->iteration_id == it);
    sluice__envelope__free_unpacked(rep, NULL);

    peer_close(&cl);
    peer_close(&wk);
    assert_int_equal(proc_stop(&d, SIGTERM, WAIT_MS), 0);

    /* verify and dump after a clean stop. */
    assert_int_equal(journal_cmd("verify", wd, &out, &err), 0);
    char want[600];
    snprintf(want, sizeof want, "journal %s: ok: snapshot at ", wd);
    assert_true(strncmp(out, want, strlen(want)) == 0);
    assert_non_null(strstr(out, "1 datasets, 2 jobs, 2 tasks, 1 workers, 3 clients\n"));
    free(out);
    free(err);
    assert_int_equal(journal_cmd("dump", wd, &out, &err), 0);
    assert_string_equal(err, "");
    assert_non_null(strstr(out, "\nsnapshot "));
    assert_non_null(strstr(out, "\ndataset 'd29' def_bytes="));
    assert_non_null(strstr(out, " splits_leased iteration=1 task=1 splits=2 seqs=5-6\n"));
    assert_non_null(
        strstr(out, " job_created job=2 name='' dataset='d29' mode=distributed_epoch\n"));
    free(out);
    free(err);

    /* The same as one JSON document, for tools. */
    char *const json_argv[] = {
        (char *)bin_path("sluice"), "journal", "dump", "--work-dir", (char *)wd, "--json", NULL};
    assert_int_equal(run_cmd(json_argv, WAIT_MS, &out, &err), 0);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (!doc)
        fail_msg("journal dump --json is not JSON (%s): %.200s", jerr.text, out);
    free(out);
    free(err);
    assert_true(json_is_false(json_object_get(doc, "damaged")));
    assert_true(json_is_object(json_object_get(doc, "snapshot")));
    json_t *ds = json_array_get(json_object_get(doc, "datasets"), 0);
    assert_string_equal(json_string_value(json_object_get(ds, "id")), "d29");
    assert_true(json_is_string(json_object_get(ds, "pipeline")));
    bool leased = false, created = false;
    size_t i;
    json_t *rec;
    json_array_foreach(json_object_get(doc, "log"), i, rec)
    {
        const char *type = json_string_value(json_object_get(rec, "type"));
        assert_non_null(type);
        assert_true(json_integer_value(json_object_get(rec, "seq")) > 0);
        json_t *splits = json_object_get(rec, "splits");
        if (strcmp(type, "splits_leased") == 0 && json_array_size(splits) == 1 &&
            json_integer_value(json_array_get(json_array_get(splits, 0), 0)) == 5 &&
            json_integer_value(json_array_get(json_array_get(splits, 0), 1)) == 6)
            leased = true;
        if (strcmp(type, "job_created") == 0 &&
            json_integer_value(json_object_get(rec, "job")) == 2 &&
            strcmp(json_string_value(json_object_get(rec, "dataset")), "d29") == 0 &&
            strcmp(json_string_value(json_object_get(rec, "mode")), "distributed_epoch") == 0)
            created = true;
    }
    assert_true(leased && created);
    json_decref(doc);
}

/* ---- acknowledged changes survive a SIGKILL in the middle of traffic ------------------------- */

struct flood {
    struct peer *c;
    struct register_req *reqs;
    bool *acked;
    int next, n, outstanding, nacked, failed;
};

static void flood_send(struct flood *f);

struct pending {
    struct flood *f;
    int i;
};

static void on_flood_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct pending *p = user;
    struct flood *f = p->f;
    (void)msg;
    f->outstanding--;
    if (status == 0 && reply && reply->body_case == SLUICE__ENVELOPE__BODY_REGISTER_DATASET_REPLY) {
        f->acked[p->i] = true;
        f->nacked++;
    } else {
        f->failed++;
    }
    free(p);
    flood_send(f);
}

/* Keeps 32 registrations in flight while the dispatcher answers. */
static void flood_send(struct flood *f)
{
    while (f->failed == 0 && f->outstanding < 32 && f->next < f->n) {
        struct pending *p = malloc(sizeof *p);
        assert_non_null(p);
        *p = (struct pending){f, f->next};
        if (rpc_call(f->c->c, &f->reqs[f->next].env, 2000, on_flood_reply, p) < 0) {
            free(p);
            return;
        }
        f->next++;
        f->outstanding++;
    }
}

static void test_acknowledged_survive_kill(void **unused)
{
    (void)unused;
    char wd[512], port[16];
    snprintf(wd, sizeof wd, "%s/kill", tmp_dir());
    struct proc d;
    start_dispatcher(&d, wd, "0", "50");
    snprintf(port, sizeof port, "%s", port_of(&d));
    struct peer cl;
    peer_open(&cl, d.addr, SLUICE__ROLE__ROLE_CLIENT, 2002);

    enum { N = 20000 };
    struct flood f = {.c = &cl, .n = N};
    f.reqs = calloc(N, sizeof *f.reqs);
    f.acked = calloc(N, sizeof *f.acked);
    assert_non_null(f.reqs);
    assert_non_null(f.acked);
    for (int i = 0; i < N; i++)
        register_init(&f.reqs[i], i);
    flood_send(&f);
    /* Run until a few hundred are acknowledged, then kill the dispatcher mid-flood. */
    while (f.nacked < 300 && f.failed == 0 && f.next < N)
        uv_run(&cl.loop, UV_RUN_ONCE);
    assert_int_equal(proc_stop(&d, SIGKILL, WAIT_MS), 128 + SIGKILL);
    /* The calls in flight fail (the connection is gone); acknowledgements stop there. */
    while (f.outstanding > 0)
        uv_run(&cl.loop, UV_RUN_ONCE);
    int acked = f.nacked;
    assert_true(acked >= 300);
    peer_close(&cl);

    start_dispatcher(&d, wd, port, "50");
    peer_open(&cl, d.addr, SLUICE__ROLE__ROLE_CLIENT, 2003);
    int present = 0, missing = 0;
    for (int i = 0; i < f.next; i++) {
        Sluice__GetDatasetRequest body = SLUICE__GET_DATASET_REQUEST__INIT;
        body.dataset_id = f.reqs[i].id;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET;
        env.get_dataset = &body;
        struct peer_result r;
        Sluice__Envelope *rep = call(&cl, &env, &r);
        if (rep) {
            present++;
            assert_int_equal(rep->get_dataset_reply->dataset->source->stop, i + 1);
            sluice__envelope__free_unpacked(rep, NULL);
        } else if (f.acked[i]) {
            fail_msg("dataset %s was acknowledged before the kill and is gone: %s", f.reqs[i].id,
                     r.msg);
        } else {
            missing++;
        }
    }
    /* Every acknowledged one is there; some not yet acknowledged may be too. */
    assert_true(present >= acked);
    assert_int_equal(present + missing, f.next);
    peer_close(&cl);
    assert_int_equal(proc_stop(&d, SIGTERM, WAIT_MS), 0);
    char *out = NULL, *err = NULL;
    assert_int_equal(journal_cmd("verify", wd, &out, &err), 0);
    free(out);
    free(err);
    free(f.reqs);
    free(f.acked);
}

/* ---- a damaged record stops the start -------------------------------------------------------- */

static void flip_last_record(const char *wd, uint64_t *seq_out)
{
    char path[600];
    snprintf(path, sizeof path, "%s/journal", wd);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 4), 0);
    assert_int_equal(mdb_env_open(env, path, MDB_NOTLS, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "log", 0, &dbi), 0);
    assert_int_equal(mdb_cursor_open(txn, dbi, &cur), 0);
    assert_int_equal(mdb_cursor_get(cur, &k, &v, MDB_LAST), 0);
    *seq_out = journal_seq_from_key(k.mv_data);
    uint8_t key[8], *copy = malloc(v.mv_size);
    assert_non_null(copy);
    memcpy(key, k.mv_data, 8);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size - 1] ^= 0x01;
    mdb_cursor_close(cur);
    MDB_val nk = {8, key}, nv = {v.mv_size, copy};
    assert_int_equal(mdb_put(txn, dbi, &nk, &nv, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    free(copy);
}

static void test_damaged_record_stops_start(void **unused)
{
    (void)unused;
    char wd[512];
    snprintf(wd, sizeof wd, "%s/damaged", tmp_dir());
    struct proc d;
    start_dispatcher(&d, wd, "0", "1000");
    struct peer cl;
    peer_open(&cl, d.addr, SLUICE__ROLE__ROLE_CLIENT, 3003);
    for (int i = 0; i < 5; i++) {
        struct register_req q;
        register_init(&q, i);
        struct peer_result r;
        Sluice__Envelope *rep = call(&cl, &q.env, &r);
        assert_non_null(rep);
        sluice__envelope__free_unpacked(rep, NULL);
    }
    peer_close(&cl);
    assert_int_equal(proc_stop(&d, SIGTERM, WAIT_MS), 0);

    uint64_t seq;
    flip_last_record(wd, &seq);
    assert_int_equal(seq, 5);
    char *const argv[] = {(char *)bin_path("sluice-dispatcher"),
                          "--fault-tolerant",
                          "--work-dir",
                          wd,
                          "--port",
                          "0",
                          NULL};
    char *out = NULL, *err = NULL, want[1024];
    assert_int_equal(run_cmd(argv, WAIT_MS, &out, &err), 1);
    assert_string_equal(out, ""); /* it never listened */
    snprintf(want, sizeof want,
             "sluice-dispatcher: journal: %s: journal damaged: log record: checksum mismatch (at "
             "record seq 5)\n",
             wd);
    assert_string_equal(err, want);
    free(out);
    free(err);

    /* verify says the same without starting anything; dump shows the damaged line. */
    assert_int_equal(journal_cmd("verify", wd, &out, &err), 1);
    snprintf(want, sizeof want,
             "sluice: journal: %s: journal damaged: log record: checksum mismatch (at record seq "
             "5); only the tail of the log is damaged: sluice-dispatcher --recover-to-last-good "
             "would drop records 5 to 5\n",
             wd);
    assert_string_equal(err, want);
    free(out);
    free(err);
    assert_int_equal(journal_cmd("dump", wd, &out, &err), 1);
    assert_non_null(strstr(out, "\n4 dataset_registered dataset='d3' def_bytes="));
    assert_non_null(strstr(out, "\n5 damaged: record 5: checksum mismatch\n"));
    free(out);
    free(err);
    char *const json_argv[] = {
        (char *)bin_path("sluice"), "journal", "dump", "--work-dir", (char *)wd, "--json", NULL};
    assert_int_equal(run_cmd(json_argv, WAIT_MS, &out, &err), 1);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_true(json_is_true(json_object_get(doc, "damaged")));
    json_t *rec = json_array_get(json_object_get(doc, "log"), 4);
    assert_int_equal(json_integer_value(json_object_get(rec, "seq")), 5);
    assert_string_equal(json_string_value(json_object_get(rec, "damaged")),
                        "record 5: checksum mismatch");
    json_decref(doc);
    free(out);
    free(err);
}

/* ---- a journal that fills up stops the dispatcher ----------------------------------------------
 */

/* A RegisterDatasetRequest for a list() of 200 values of 500 bytes: about 100 KB of definition. */
struct big_req {
    Sluice__Value values[200];
    Sluice__Value *ptrs[200];
    uint8_t bytes[500];
    struct register_req q;
};

static void big_init(struct big_req *b, int i)
{
    register_init(&b->q, i);
    memset(b->bytes, 'a' + i % 26, sizeof b->bytes);
    for (int k = 0; k < 200; k++) {
        Sluice__Value v = SLUICE__VALUE__INIT;
        v.kind_case = SLUICE__VALUE__KIND_BYTES_VALUE;
        v.bytes_value.data = b->bytes;
        v.bytes_value.len = sizeof b->bytes;
        b->values[k] = v;
        b->ptrs[k] = &b->values[k];
    }
    b->q.src.kind = SLUICE__SOURCE_DEF__KIND__LIST;
    b->q.src.stop = 0;
    b->q.src.step = 0;
    b->q.src.n_values = 200;
    b->q.src.values = b->ptrs;
}

static void test_full_journal_is_fatal(void **unused)
{
    (void)unused;
    char wd[512];
    snprintf(wd, sizeof wd, "%s/full", tmp_dir());
    char *const argv[] = {(char *)bin_path("sluice-dispatcher"),
                          "--fault-tolerant",
                          "--work-dir",
                          wd,
                          "--port",
                          "0",
                          "--journal-max-mb",
                          "1",
                          "--log-level",
                          "info",
                          NULL};
    struct proc d;
    assert_int_equal(proc_start(&d, argv, WAIT_MS), 0);
    struct peer cl;
    peer_open(&cl, d.addr, SLUICE__ROLE__ROLE_CLIENT, 4004);
    static struct big_req b;
    int acked = 0;
    char refused[SLUICE_ERRMSG_SIZE] = "";
    for (int i = 0; i < 40 && !refused[0]; i++) {
        big_init(&b, i);
        struct peer_result r;
        if (peer_call(&cl, &b.q.env, WAIT_MS, &r)) {
            acked++;
            sluice__envelope__free_unpacked(r.reply, NULL);
        } else {
            snprintf(refused, sizeof refused, "%s", r.msg);
        }
    }
    peer_close(&cl);
    /* The write that did not fit is refused, never acknowledged; the dispatcher exits 1 with one
     * line naming the journal and the reason. */
    assert_true(acked >= 2);
    assert_true(refused[0] != '\0');
    assert_int_equal(proc_wait(&d, WAIT_MS), 1);
    FILE *f = fopen(d.log, "r");
    assert_non_null(f);
    char line[1024], want[700];
    snprintf(want, sizeof want,
             "sluice-dispatcher: journal: %s: append: the journal is full: it reached its size "
             "limit of 1 MiB\n",
             wd);
    bool found = false;
    int logged = 0;
    char refused_line[64];
    snprintf(refused_line, sizeof refused_line, "dataset 'd%d' registered", acked);
    while (fgets(line, sizeof line, f)) {
        found |= strcmp(line, want) == 0;
        /* A change is logged only once it is durable: every acknowledged registration, and
         * not the one the full journal refused. */
        logged += strstr(line, "info sluice-dispatcher: dataset 'd") != NULL;
        if (strstr(line, refused_line))
            fail_msg("logged a registration that never became durable: %s", line);
    }
    fclose(f);
    assert_true(found);
    assert_int_equal(logged, acked);

    /* Restarted with room, it has every registration it acknowledged. */
    char *const argv2[] = {(char *)bin_path("sluice-dispatcher"),
                           "--fault-tolerant",
                           "--work-dir",
                           wd,
                           "--port",
                           "0",
                           "--log-level",
                           "warn",
                           NULL};
    assert_int_equal(proc_start(&d, argv2, WAIT_MS), 0);
    peer_open(&cl, d.addr, SLUICE__ROLE__ROLE_CLIENT, 4005);
    for (int i = 0; i < acked; i++) {
        Sluice__GetDatasetRequest body = SLUICE__GET_DATASET_REQUEST__INIT;
        char id[32];
        snprintf(id, sizeof id, "d%d", i);
        body.dataset_id = id;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET;
        env.get_dataset = &body;
        struct peer_result r;
        Sluice__Envelope *rep = call(&cl, &env, &r);
        if (!rep)
            fail_msg("acknowledged dataset %s is gone: %s", id, r.msg);
        assert_int_equal(rep->get_dataset_reply->dataset->source->n_values, 200);
        sluice__envelope__free_unpacked(rep, NULL);
    }
    peer_close(&cl);
    assert_int_equal(proc_stop(&d, SIGTERM, WAIT_MS), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_restart_keeps_everything),
        cmocka_unit_test(test_acknowledged_survive_kill),
        cmocka_unit_test(test_damaged_record_stops_start),
        cmocka_unit_test(test_full_journal_is_fatal),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
