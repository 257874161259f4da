/* One read: see iterator.h for the happy path, the failure modes and the lifetime rules.
 *
 * The struct has three parts. The shared part (state, prefetch buffer, consumption counters) is
 * guarded by mu; the loop thread fills the buffer and moves the state to ENDED or FAILED, the
 * reader's thread takes payloads and waits on cond. The reader part (the payload being decoded,
 * the element handed out, the local tail) is touched only by the thread calling next (or the
 * tail's prefetch thread, which then is the only one pulling from the buffer). The loop part
 * (tasks, timers, requests) is touched only on the client's loop thread. */
#include "iterator.h"

#include "client.h"
#include "ledger.h"
#include "prefetch.h"
#include "retry.h"
#include "status_json.h"
#include "tasks.h"

#include "common/error.h"
#include "pipeline/codec.h"
#include "pipeline/def.h"
#include "pipeline/dist.h"
#include "pipeline/element.h"
#include "pipeline/format.h"
#include "pipeline/iter.h"
#include "pipeline/prefetch.h"
#include "pipeline/registry.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATASET_ID_MAX 256
#define MSG_MAX 512

enum iter_state { ITER_RUNNING, ITER_ENDED, ITER_FAILED };

/* The dispatcher's names of the modes (as in its status document), by enum sluice_mode. */
static const char *const mode_names[] = {
    "parallel_epochs", "distributed_epoch", "file", "data", "file_or_data", "hint"};

struct sluice_iterator {
    struct sluice_client *c;
    /* Fixed once open. */
    char dataset_id[DATASET_ID_MAX];
    char job_name[DATASET_ID_MAX];
    enum sluice_mode mode;
    uint8_t *def; /* the dataset's definition as the dispatcher sent it (packed) */
    size_t def_len;
    uint64_t job_id, iteration_id, client_id;
    uint32_t consumer_index;
    bool coordinated;

    /* Shared, guarded by mu. */
    uv_mutex_t mu;
    uv_cond_t cond;
    struct prefetch pf;
    enum iter_state state;
    int fail_rc;
    char fail_msg[MSG_MAX];
    /* Elements handed to the reader so far: stored by the reader alone (relaxed, once per
     * element, no lock), read by the loop for the consumption rate. */
    atomic_uint_fast64_t taken;
    uint64_t wait_ns; /* time the reader spent waiting on an empty buffer */
    atomic_int interrupted;

    /* Reader. */
    struct prefetch_item cur; /* the payload being decoded; data NULL when none */
    size_t cur_pos;
    uint32_t cur_decoded; /* records of cur read so far (elements, skipped ones, end markers) */
    uint32_t cur_skip;    /* entries of cur.skip passed */
    uint64_t taken_local; /* elements handed out (published in taken) */
    struct pipe_buf scratch;
    struct sluice_element elem;
    struct pipe_spec *tail_spec;
    struct pipe_run *tail;
    uint64_t deadline_ns; /* of the current next() call; 0 without a limit */
    uint32_t call_timeout_ms;
    int reader_rc; /* a decoding failure, reported once the payloads before it are read */
    char reader_msg[MSG_MAX];
    bool have_round; /* coordinated: the round and task of the last element handed out */
    uint64_t last_round, last_task;

    /* Loop thread. */
    struct client_waker waker;
    struct ct_set tasks;
    struct fetch *coord_fetch; /* coordinated reads: the one request under way, or NULL */
    bool grant_stalled;        /* the last heartbeat reply left the read waiting for a grant */
    uv_timer_t hb_timer, pump_timer;
    unsigned refs; /* the open iterator, its two timers, and each request under way */
    bool started, closing;
    bool hb_busy;     /* a heartbeat or status request is under way */
    bool hb_soon;     /* send the next heartbeat at once */
    uint64_t hb_sent; /* heartbeats sent so far; the one under way has this number */
    uint32_t heartbeat_ms;
    uint64_t created_incarnation; /* the dispatcher incarnation that created the job */
    uint64_t job_incarnation;     /* the dispatcher incarnation known to hold the job */
    uint64_t verify_incarnation;  /* the incarnation being asked whether it holds the job */
    uint64_t last_hb_ok, last_stats_ms, last_taken, last_wait_ns;
    uint64_t *finished;
    size_t finished_cap;
    /* distributed_epoch: the splits received, by (split, position), recorded as replies arrive
     * (note_payload) and reported with heartbeats. */
    struct ledger ledger;
    bool acks_due;              /* a split completed since the last heartbeat was built */
    Sluice__SplitCoverage *cov; /* the coverage reported by the heartbeat under way */
    Sluice__SplitCoverage **cov_ptrs;
    uint64_t *cov_bounds;
    size_t cov_n;
    Sluice__ClientHeartbeatRequest hb_req;
    Sluice__Envelope hb_env;
    Sluice__StatusRequest st_req;
    Sluice__Envelope st_env;
    Sluice__GetDatasetRequest ds_req;
    Sluice__Envelope ds_env;
    Sluice__ReleaseClientRequest rel_req;
    Sluice__Envelope rel_env;
    struct client_op *close_op;
};

/* ---- shared state ------------------------------------------------------------------------- */

static void iter_free(struct sluice_iterator *it)
{
    prefetch_release(&it->pf);
    ct_release(&it->tasks);
    ledger_release(&it->ledger);
    free(it->cov);
    free(it->cov_ptrs);
    free(it->cov_bounds);
    free(it->finished);
    free(it->def);
    uv_cond_destroy(&it->cond);
    uv_mutex_destroy(&it->mu);
    free(it);
}

/* Ends the read with an error unless it already ended; the reader sees it after the payloads
 * already buffered. */
static void iter_fail(struct sluice_iterator *it, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void iter_fail(struct sluice_iterator *it, int rc, const char *fmt, ...)
{
    uv_mutex_lock(&it->mu);
    if (it->state == ITER_RUNNING) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(it->fail_msg, sizeof it->fail_msg, fmt, ap);
        va_end(ap);
        if (!it->fail_msg[0])
            snprintf(it->fail_msg, sizeof it->fail_msg, "%s", sluice_strerror(rc));
        it->fail_rc = rc;
        it->state = ITER_FAILED;
        uv_cond_broadcast(&it->cond);
    }
    uv_mutex_unlock(&it->mu);
}

static void iter_end(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    if (it->state == ITER_RUNNING) {
        it->state = ITER_ENDED;
        uv_cond_broadcast(&it->cond);
    }
    uv_mutex_unlock(&it->mu);
}

static enum iter_state iter_state(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    enum iter_state s = it->state;
    uv_mutex_unlock(&it->mu);
    return s;
}

void iter_interrupt(struct sluice_iterator *it)
{
    atomic_store(&it->interrupted, 1);
    client_wake(it->c);
}

/* ---- loop thread: fetching elements ------------------------------------------------------- */

static void iter_unref(struct sluice_iterator *it)
{
    if (--it->refs == 0)
        iter_free(it);
}

static void pump(struct sluice_iterator *it);
static void hasten_heartbeat(struct sluice_iterator *it);
static void schedule_heartbeat(struct sluice_iterator *it, uint64_t delay);
static void schedule_acks(struct sluice_iterator *it);

/* Drops tasks the dispatcher no longer lists and that have nothing outstanding, notices the end
 * of the read, and sends what can be sent. */
static void settle(struct sluice_iterator *it)
{
    struct ct_task t;
    while (ct_reap(&it->tasks, &t))
        if (t.conn)
            client_conn_release(it->c, t.conn);
    if (ct_done(&it->tasks))
        iter_end(it);
    else
        hasten_heartbeat(it);
    pump(it);
}

struct fetch {
    struct sluice_iterator *it;
    uint64_t task_id;
    uint64_t round;         /* coordinated reads: the round asked for */
    struct rpc_client *rpc; /* the connection the request went out on */
};

/* Makes a prefetch item of a reply's payload. A payload received in a frame buffer of its own is
 * taken over with that buffer; a small one is copied. Returns 0 or SLUICE_ERR_NOMEM. */
static int item_from_reply(struct sluice_iterator *it, struct rpc_client *rpc,
                           const Sluice__GetElementsReply *r, struct prefetch_item *item)
{
    if (r->payload.len) {
        item->block = rpc_client_take_reply(rpc, &item->block_cap);
        if (item->block) {
            item->data = r->payload.data;
            item->pool = it->c->pool;
            return 0;
        }
    }
    item->data = malloc(r->payload.len ? r->payload.len : 1);
    if (!item->data)
        return SLUICE_ERR_NOMEM;
    if (r->payload.len)
        memcpy(item->data, r->payload.data, r->payload.len);
    return 0;
}

/* distributed_epoch: records in the ledger the elements and end markers of a payload that just
 * arrived, and lists in item->skip the records the reader is to step over: elements received
 * before (a re-issued split, a retried request) and end markers. Returns 0, SLUICE_ERR_NOMEM,
 * or SLUICE_ERR_CORRUPT with a message in err. */
static int note_payload(struct sluice_iterator *it, struct prefetch_item *item, char *err,
                        size_t errlen)
{
    size_t pos = 0, cap = 0;
    uint32_t index = 0;
    bool run = false; /* [run_begin, run_end) of split run_seq: new positions not yet recorded */
    uint64_t run_seq = 0, run_begin = 0, run_end = 0, run_limit = 0;
    int rc = 0;
    for (;; index++) {
        struct codec_mark m;
        int kind = codec_scan_record(item->data, item->len, &pos, &m);
        if (kind == CODEC_NO_MORE)
            break;
        if (kind < 0) {
            rc = err_set(err, errlen, SLUICE_ERR_CORRUPT,
                         "elements of task %" PRIu64 ": record %" PRIu32 " is damaged",
                         item->task_id, index);
            break;
        }
        if (kind == CODEC_ELEMENT && !m.tagged)
            continue;
        bool fresh = false;
        if (kind == CODEC_ELEMENT) {
            if (run && m.seq == run_seq && m.pos == run_end && m.pos < run_limit) {
                run_end++;
                continue;
            }
            if (run && (rc = ledger_add(&it->ledger, run_seq, run_begin, run_end)) < 0)
                break;
            run = false;
            uint64_t limit = 0;
            fresh = ledger_is_new(&it->ledger, m.seq, m.pos, &limit);
            if (fresh) {
                run = true;
                run_seq = m.seq;
                run_begin = m.pos;
                run_end = m.pos + 1;
                run_limit = limit;
                continue;
            }
            it->ledger.dropped++;
        } else {
            if (run && (rc = ledger_add(&it->ledger, run_seq, run_begin, run_end)) < 0)
                break;
            run = false;
            rc = ledger_end(&it->ledger, m.seq, m.pos);
            if (rc == SLUICE_ERR_CORRUPT) {
                err_set(err, errlen, rc,
                        "split %" PRIu64 " ended with %" PRIu64
                        " elements and with another count before: its pipeline is not "
                        "deterministic",
                        m.seq, m.pos);
                break;
            }
            if (rc < 0)
                break;
            if (ledger_complete(&it->ledger, m.seq))
                it->acks_due = true;
        }
        if (item->nskip == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            uint32_t *v = realloc(item->skip, ncap * sizeof *v);
            if (!v) {
                rc = SLUICE_ERR_NOMEM;
                break;
            }
            item->skip = v;
            cap = ncap;
        }
        item->skip[item->nskip++] = index;
    }
    if (rc == 0 && run)
        rc = ledger_add(&it->ledger, run_seq, run_begin, run_end);
    if (rc == SLUICE_ERR_NOMEM)
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    return rc;
}

static void on_elements(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct fetch *f = user;
    struct sluice_iterator *it = f->it;
    uint64_t task_id = f->task_id, round = f->round;
    struct rpc_client *rpc = f->rpc;
    if (it->coord_fetch == f)
        it->coord_fetch = NULL;
    free(f);

    if (it->closing) {
        uv_mutex_lock(&it->mu);
        prefetch_cancel(&it->pf);
        uv_mutex_unlock(&it->mu);
        iter_unref(it);
        return;
    }
    long i = ct_find(&it->tasks, task_id);
    /* A task with a request outstanding is never dropped. */
    assert(i >= 0);
    if (i < 0) {
        uv_mutex_lock(&it->mu);
        prefetch_cancel(&it->pf);
        uv_mutex_unlock(&it->mu);
        iter_unref(it);
        return;
    }
    uint64_t now = uv_now(&it->c->loop);
    const Sluice__GetElementsReply *r = NULL;
    if (status == 0) {
        r = reply->body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY
                ? reply->get_elements_reply
                : NULL;
        if (!r) {
            status = SLUICE_ERR_PROTOCOL;
            msg = "worker sent an unexpected reply to GetElements";
        }
    }
    if (status < 0) {
        uv_mutex_lock(&it->mu);
        prefetch_cancel(&it->pf);
        uv_mutex_unlock(&it->mu);
        ct_on_failure(&it->tasks, (size_t)i, now);
        /* A worker answers UNAVAILABLE for a task it does not run (yet), which is retried;
         * any other failure is the task's own (its pipeline failed) and ends the read. */
        if (!retry_task(status))
            iter_fail(it, status, "%s", msg ? msg : "");
    } else {
        bool has_data = r->count > 0 || r->payload.len > 0;
        int rc;
        struct prefetch_item item = {
            .len = r->payload.len, .count = r->count, .task_id = task_id, .round = round};
        if (has_data && item_from_reply(it, rpc, r, &item) != 0) {
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            ct_on_failure(&it->tasks, (size_t)i, now);
            iter_fail(it, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
            goto out;
        }
        char nmsg[MSG_MAX];
        if (has_data && it->mode == SLUICE_DISTRIBUTED_EPOCH &&
            (rc = note_payload(it, &item, nmsg, sizeof nmsg)) < 0) {
            prefetch_item_free(&item);
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            ct_on_failure(&it->tasks, (size_t)i, now);
            iter_fail(it, rc, "%s", nmsg);
            goto out;
        }
        if (it->acks_due)
            schedule_acks(it);
        uv_mutex_lock(&it->mu);
        /* Once the read has ended or failed, late elements (from a task the dispatcher had
         * dropped) are not handed out: the reader may have seen the end already. */
        if (has_data && it->state == ITER_RUNNING) {
            prefetch_fill(&it->pf, item);
            memset(&item, 0, sizeof item);
            uv_cond_broadcast(&it->cond);
        } else {
            prefetch_cancel(&it->pf);
        }
        uv_mutex_unlock(&it->mu);
        prefetch_item_free(&item);
        ct_on_reply(&it->tasks, (size_t)i, r->count, r->end_of_sequence, now);
    }
out:
    settle(it);
    iter_unref(it);
}

/* Sends a GetElements to task i. Returns 0 or the code of rpc_call. */
static int fetch(struct sluice_iterator *it, size_t i)
{
    struct ct_task *t = &it->tasks.v[i];
    struct fetch *f = malloc(sizeof *f);
    if (!f)
        return SLUICE_ERR_NOMEM;
    f->it = it;
    f->task_id = t->id;
    f->round = it->tasks.round;
    f->rpc = client_conn_rpc(t->conn);
    Sluice__GetElementsRequest req = SLUICE__GET_ELEMENTS_REQUEST__INIT;
    req.task_id = t->id;
    req.client_id = it->client_id;
    /* The worker chooses the element count (0); a coordinated round is one element per
     * consumer. */
    req.max_bytes = ITER_FETCH_MAX_BYTES;
    if (it->coordinated) {
        req.max_elements = 1;
        req.consumer_index = it->consumer_index;
        req.round = it->tasks.round;
    }
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS;
    env.get_elements = &req;
    int rc = rpc_call(f->rpc, &env, ITER_FETCH_TIMEOUT_MS, on_elements, f);
    if (rc) {
        free(f);
        return rc;
    }
    ct_sent(&it->tasks, i);
    it->refs++;
    if (it->coordinated)
        it->coord_fetch = f;
    return 0;
}

/* Coordinated reads: a request to a task the dispatcher no longer lists, still waiting for a
 * connection to its worker (which died), is withdrawn: the worker never saw it, so this consumer
 * may skip the task's rounds at once (tasks.h) instead of waiting out the request's timeout. A
 * request already written stays: its worker may still serve the round to every consumer. */
static void coord_withdraw(struct sluice_iterator *it)
{
    struct fetch *f = it->coord_fetch;
    long i = f ? ct_find(&it->tasks, f->task_id) : -1;
    if (i >= 0 && !it->tasks.v[i].listed)
        rpc_client_withdraw(f->rpc, on_elements, f);
}

static void on_pump_timer(uv_timer_t *t)
{
    pump(t->data);
}

static void arm_pump(struct sluice_iterator *it, uint64_t at, uint64_t now)
{
    uint64_t delay = at > now ? at - now : 0;
    if (uv_is_active((uv_handle_t *)&it->pump_timer) &&
        uv_timer_get_due_in(&it->pump_timer) <= delay)
        return;
    uv_timer_start(&it->pump_timer, on_pump_timer, delay, 0);
}

static void coord_news(struct sluice_iterator *it);

/* Sends requests while slots are free and some task may be asked. */
static void pump(struct sluice_iterator *it)
{
    if (it->closing || iter_state(it) != ITER_RUNNING)
        return;
    uint64_t now = uv_now(&it->c->loop);
    if (it->coordinated) {
        coord_withdraw(it);
        if (ct_advance(&it->tasks) == CT_ROUND_BEHIND) {
            iter_fail(it, SLUICE_ERR_INVALID,
                      "consumer %" PRIu32 " fell too far behind: it is at round %" PRIu64
                      ", but the job's rounds before %" PRIu64 " are gone",
                      it->consumer_index, it->tasks.round, it->tasks.epochs[0].start);
            return;
        }
        coord_news(it);
    }
    for (;;) {
        uint64_t wake_at;
        long i = ct_pick(&it->tasks, now, &wake_at);
        if (i < 0) {
            if (wake_at)
                arm_pump(it, wake_at, now);
            return;
        }
        uv_mutex_lock(&it->mu);
        bool reserved = it->state == ITER_RUNNING && prefetch_reserve(&it->pf);
        uv_mutex_unlock(&it->mu);
        if (!reserved)
            return;
        if (fetch(it, (size_t)i) != 0) {
            /* Could not even queue the request: give the slot back and let the task wait. */
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            ct_sent(&it->tasks, (size_t)i);
            ct_on_failure(&it->tasks, (size_t)i, now);
        }
    }
}

static void on_wake(struct client_waker *w)
{
    struct sluice_iterator *it =
        (struct sluice_iterator *)(void *)((char *)w - offsetof(struct sluice_iterator, waker));
    if (atomic_load(&it->interrupted))
        iter_fail(it, SLUICE_ERR_CANCELLED, "interrupted");
    pump(it);
}

/* ---- loop thread: heartbeats -------------------------------------------------------------- */

static void on_hb_timer(uv_timer_t *t);

static void schedule_heartbeat(struct sluice_iterator *it, uint64_t delay)
{
    if (!it->closing)
        uv_timer_start(&it->hb_timer, on_hb_timer, delay, 0);
}

/* Whether the read only waits for the dispatcher to say the iteration is finished. */
static bool end_phase(const struct sluice_iterator *it)
{
    return it->tasks.have_list && !it->tasks.iteration_finished && !ct_active(&it->tasks);
}

/* Coordinated reads: how soon the read needs news from the dispatcher (UINT64_MAX: not
 * sooner than the regular heartbeat). At once when the round is not granted yet, or half the
 * rounds granted by the last reply are used up (the next grant then arrives before they run
 * out); within ITER_ROUND_POLL_MS while no task serves the round (waiting for a worker) or the
 * round's task is failing (its worker may be gone, and the dispatcher says so once it evicts
 * it). */
static uint64_t coord_delay(const struct sluice_iterator *it)
{
    const struct ct_set *s = &it->tasks;
    if (!it->coordinated || !s->have_schedule)
        return UINT64_MAX;
    if (s->where == CT_ROUND_GRANT)
        return it->grant_stalled ? ITER_ROUND_POLL_MS : 0;
    uint64_t left = s->granted > s->round ? s->granted - s->round : 0;
    if (left < s->span - s->span / 2)
        return 0;
    if (s->where == CT_ROUND_SCHEDULE)
        return ITER_ROUND_POLL_MS;
    long i = s->where == CT_ROUND_TASK ? ct_find(s, s->round_task) : -1;
    if (i >= 0 && (s->v[i].fail_streak > 0 || s->v[i].error))
        return ITER_ROUND_POLL_MS;
    return UINT64_MAX;
}

/* Coordinated reads: brings the next heartbeat forward when the read needs news (coord_delay). A
 * heartbeat under way is followed by the next at the same pace (next_heartbeat). */
static void coord_news(struct sluice_iterator *it)
{
    uint64_t delay = coord_delay(it);
    if (delay == UINT64_MAX || it->closing || it->hb_busy)
        return;
    if (!uv_is_active((uv_handle_t *)&it->hb_timer) || uv_timer_get_due_in(&it->hb_timer) > delay)
        schedule_heartbeat(it, delay);
}

/* The interval to the next heartbeat after a successful one. */
static uint64_t next_heartbeat(struct sluice_iterator *it)
{
    if (it->hb_soon) {
        it->hb_soon = false;
        return 0;
    }
    uint64_t coord = coord_delay(it);
    if (coord < it->heartbeat_ms)
        return coord;
    if (end_phase(it) && it->heartbeat_ms > ITER_END_POLL_MS)
        return ITER_END_POLL_MS;
    if (it->acks_due && it->heartbeat_ms > ITER_ACK_MS)
        return ITER_ACK_MS;
    return it->heartbeat_ms;
}

/* A complete split is reported soon rather than at the next regular heartbeat: its worker holds
 * its lease until then, and the end of the read waits for the last ones. */
static void schedule_acks(struct sluice_iterator *it)
{
    if (!it->closing && !it->hb_busy &&
        (!uv_is_active((uv_handle_t *)&it->hb_timer) ||
         uv_timer_get_due_in(&it->hb_timer) > ITER_ACK_MS))
        schedule_heartbeat(it, ITER_ACK_MS);
}

/* In the end phase, brings the next heartbeat forward (the last task just ended). */
static void hasten_heartbeat(struct sluice_iterator *it)
{
    if (it->closing || it->hb_busy || !end_phase(it))
        return;
    if (!uv_is_active((uv_handle_t *)&it->hb_timer) ||
        uv_timer_get_due_in(&it->hb_timer) > ITER_END_POLL_MS)
        schedule_heartbeat(it, 0);
}

/* How long one heartbeat (or status request) may take: a few intervals, at most the client's
 * timeout. */
static uint32_t heartbeat_timeout(const struct sluice_iterator *it)
{
    uint32_t t = it->heartbeat_ms * 3;
    if (t < 5000)
        t = 5000;
    if (it->c->timeout_ms && it->c->timeout_ms < t)
        t = it->c->timeout_ms;
    return t;
}

/* After a dispatcher call failed with status: when every task this read knows has ended, the
 * read ends (no worker can join while the dispatcher is away, and a distributed task ends only
 * when the splits run out, so nothing is left to read and the dispatcher's confirmation is not
 * needed); otherwise, with a client timeout, a read that cannot go on without the dispatcher
 * fails once it has been unreachable that long. Returns true when the read ended or failed,
 * false when the caller should try again later. */
static bool dispatcher_lost(struct sluice_iterator *it, int status, const char *msg)
{
    if (retry_transient(status) && end_phase(it)) {
        iter_end(it);
        return true;
    }
    uint64_t now = uv_now(&it->c->loop);
    uint32_t limit = it->c->timeout_ms;
    if (!retry_transient(status) || !limit || now - it->last_hb_ok < limit || ct_active(&it->tasks))
        return false;
    iter_fail(it, SLUICE_ERR_TIMEOUT, "dispatcher %s unreachable for %" PRIu32 " ms%s%s",
              it->c->address, limit, msg && *msg ? ": " : "", msg ? msg : "");
    return true;
}

static void fail_gone(struct sluice_iterator *it)
{
    iter_fail(it, SLUICE_ERR_RESTARTED,
              "dispatcher restarted without --fault-tolerant; job %" PRIu64 " is gone", it->job_id);
}

/* The verification passed: the new incarnation's heartbeats are trusted from now on. */
static void verified(struct sluice_iterator *it, uint64_t incarnation)
{
    it->job_incarnation = incarnation;
    schedule_heartbeat(it, 0);
}

/* Packs a dataset definition into a new buffer. Returns 0 or SLUICE_ERR_NOMEM. */
static int pack_def(const Sluice__DatasetDef *def, uint8_t **out, size_t *len)
{
    *len = sluice__dataset_def__get_packed_size(def);
    *out = malloc(*len ? *len : 1);
    if (!*out)
        return SLUICE_ERR_NOMEM;
    sluice__dataset_def__pack(def, *out);
    return 0;
}

static void on_verified_dataset(int status, const char *msg, const Sluice__Envelope *reply,
                                uint64_t incarnation, void *user)
{
    struct sluice_iterator *it = user;
    it->hb_busy = false;
    if (it->closing || iter_state(it) == ITER_FAILED) {
        iter_unref(it);
        return;
    }
    const Sluice__GetDatasetReply *r =
        status == 0 && reply->body_case == SLUICE__ENVELOPE__BODY_GET_DATASET_REPLY
            ? reply->get_dataset_reply
            : NULL;
    if (status == SLUICE_ERR_NOT_FOUND && incarnation == it->verify_incarnation) {
        fail_gone(it);
    } else if (r && r->dataset && incarnation == it->verify_incarnation) {
        uint8_t *def;
        size_t len;
        if (pack_def(r->dataset, &def, &len) != 0) {
            schedule_heartbeat(it, it->heartbeat_ms);
        } else {
            /* Same id, other definition: a dataset registered anew after a restart. */
            if (len != it->def_len || memcmp(def, it->def, len) != 0)
                fail_gone(it);
            else
                verified(it, incarnation);
            free(def);
        }
    } else if (!dispatcher_lost(it, status, msg)) {
        /* No answer, or from yet another incarnation: ask again on the next beat. */
        schedule_heartbeat(it, it->heartbeat_ms);
    }
    iter_unref(it);
}

static void on_verified_job(int status, const char *msg, const Sluice__Envelope *reply,
                            uint64_t incarnation, void *user)
{
    struct sluice_iterator *it = user;
    it->hb_busy = false;
    if (it->closing || iter_state(it) == ITER_FAILED) {
        iter_unref(it);
        return;
    }
    const Sluice__StatusReply *r =
        status == 0 && reply->body_case == SLUICE__ENVELOPE__BODY_STATUS_REPLY ? reply->status_reply
                                                                               : NULL;
    if (!it->verify_incarnation)
        it->verify_incarnation = incarnation;
    if (r && incarnation == it->job_incarnation) {
        /* Only the connection was new: the dispatcher is the one that made the job. */
        schedule_heartbeat(it, 0);
    } else if (r && incarnation == it->verify_incarnation) {
        struct status_job_ref ref = {it->job_id, it->dataset_id, it->job_name, mode_names[it->mode],
                                     it->iteration_id};
        if (status_json_job(r->json ? r->json : "", &ref) == STATUS_JOB_GONE) {
            fail_gone(it);
        } else if (!it->def_len) {
            verified(it, incarnation);
        } else {
            /* The job is there; is its dataset still the one we read? */
            sluice__get_dataset_request__init(&it->ds_req);
            it->ds_req.dataset_id = it->dataset_id;
            sluice__envelope__init(&it->ds_env);
            it->ds_env.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET;
            it->ds_env.get_dataset = &it->ds_req;
            if (client_disp_call(it->c, &it->ds_env, heartbeat_timeout(it), false,
                                 on_verified_dataset, it) == 0) {
                it->hb_busy = true;
                it->refs++;
            } else {
                schedule_heartbeat(it, it->heartbeat_ms);
            }
        }
    } else if (!dispatcher_lost(it, status, msg)) {
        schedule_heartbeat(it, it->heartbeat_ms);
    }
    iter_unref(it);
}

/* The dispatcher answered from an incarnation other than the one that created the job, or the
 * connection to it is not known to lead to that one. Before it is sent anything that names our
 * client, it must show the job as we know it (status) reading the dataset as we know it
 * (GetDataset), both read-only requests: a dispatcher that restarted without its journal hands
 * out ids from scratch, so our client, job and dataset ids may now name someone else's read.
 * incarnation is the one to verify, or 0 for whichever answers. */
static void verify_job(struct sluice_iterator *it, uint64_t incarnation)
{
    it->verify_incarnation = incarnation;
    sluice__status_request__init(&it->st_req);
    sluice__envelope__init(&it->st_env);
    it->st_env.body_case = SLUICE__ENVELOPE__BODY_STATUS;
    it->st_env.status = &it->st_req;
    if (client_disp_call(it->c, &it->st_env, heartbeat_timeout(it), false, on_verified_job, it) !=
        0) {
        schedule_heartbeat(it, it->heartbeat_ms);
        return;
    }
    it->hb_busy = true;
    it->refs++;
}

/* Coordinated reads: takes the reply's round schedule and grant (tasks.h). Returns 0 or a
 * negative code. */
static int apply_schedule(struct sluice_iterator *it, const Sluice__ClientHeartbeatReply *r)
{
    struct ct_epoch *epochs = calloc(r->n_round_epochs ? r->n_round_epochs : 1, sizeof *epochs);
    if (!epochs)
        return SLUICE_ERR_NOMEM;
    size_t n = 0;
    for (size_t k = 0; k < r->n_round_epochs; k++) {
        const Sluice__RoundEpoch *e = r->round_epochs[k];
        if (!e)
            continue;
        epochs[n].start = e->start;
        epochs[n].tasks = e->task_ids;
        epochs[n].ntasks = e->n_task_ids;
        n++;
    }
    uint64_t before = it->tasks.granted;
    bool waiting = it->tasks.where == CT_ROUND_GRANT;
    int rc = ct_schedule(&it->tasks, epochs, n, r->rounds_granted);
    free(epochs);
    /* A reply that granted nothing to a read waiting for a grant: ask again, but not at once. */
    it->grant_stalled = rc == 0 && waiting && it->tasks.granted == before;
    return rc;
}

static void apply_heartbeat(struct sluice_iterator *it, const Sluice__ClientHeartbeatReply *r,
                            uint64_t now)
{
    if (r->heartbeat_ms)
        it->heartbeat_ms = r->heartbeat_ms;
    /* Out of memory leaves the entries to be reported and confirmed again. */
    if (r->n_finished_seqs)
        (void)ledger_confirmed(&it->ledger, r->finished_seqs, r->n_finished_seqs);
    struct ct_info *infos = calloc(r->n_tasks ? r->n_tasks : 1, sizeof *infos);
    if (!infos) {
        iter_fail(it, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        return;
    }
    size_t n = 0;
    for (size_t k = 0; k < r->n_tasks; k++) {
        const Sluice__TaskInfo *t = r->tasks[k];
        if (!t || (t->iteration_id && t->iteration_id != it->iteration_id))
            continue;
        infos[n].task_id = t->task_id;
        infos[n].address = t->worker_address ? t->worker_address : "";
        infos[n].worker_incarnation = t->worker_incarnation;
        n++;
    }
    int rc = ct_reconcile(&it->tasks, infos, n, r->iteration_finished, now);
    free(infos);
    if (rc == 0 && it->coordinated)
        rc = apply_schedule(it, r);
    if (rc) {
        iter_fail(it, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_PROTOCOL, "%s",
                  rc == SLUICE_ERR_NOMEM ? sluice_strerror(rc)
                                         : "dispatcher sent a malformed task list");
        return;
    }
    /* This heartbeat went out after a worker denied knowing a task the list still holds. */
    long bad = ct_confirmed_error(&it->tasks, it->hb_sent);
    if (bad >= 0) {
        iter_fail(it, it->tasks.v[bad].error, "%s", it->tasks.v[bad].error_msg);
        return;
    }
    for (size_t i = 0; i < it->tasks.n; i++) {
        struct ct_task *t = &it->tasks.v[i];
        if (t->conn || !t->listed)
            continue;
        char msg[MSG_MAX];
        t->conn = client_conn_acquire(it->c, t->address, msg, sizeof msg);
        if (!t->conn) {
            iter_fail(it, SLUICE_ERR_INVALID, "worker '%s' of task %" PRIu64 ": %s", t->address,
                      t->id, msg);
            return;
        }
    }
    settle(it);
}

static void on_heartbeat(int status, const char *msg, const Sluice__Envelope *reply,
                         uint64_t incarnation, void *user)
{
    struct sluice_iterator *it = user;
    it->hb_busy = false;
    if (it->closing || iter_state(it) == ITER_FAILED) {
        iter_unref(it);
        return;
    }
    uint64_t now = uv_now(&it->c->loop);
    const Sluice__ClientHeartbeatReply *r = NULL;
    if (status == 0) {
        r = reply->body_case == SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT_REPLY
                ? reply->client_heartbeat_reply
                : NULL;
        if (!r) {
            status = SLUICE_ERR_PROTOCOL;
            msg = "dispatcher sent an unexpected reply to ClientHeartbeat";
        }
    }
    if (status == 0 && incarnation != it->job_incarnation) {
        verify_job(it, incarnation);
    } else if (status == 0) {
        it->last_hb_ok = now;
        apply_heartbeat(it, r, now);
        schedule_heartbeat(it, next_heartbeat(it));
    } else if (status == SLUICE_ERR_NOT_FOUND) {
        if (incarnation != 0 && incarnation != it->created_incarnation)
            fail_gone(it);
        else
            iter_fail(it, status, "%s", msg ? msg : "");
    } else if (retry_transient(status)) {
        if (!dispatcher_lost(it, status, msg))
            schedule_heartbeat(it, it->heartbeat_ms);
    } else {
        iter_fail(it, status, "%s", msg ? msg : "");
    }
    iter_unref(it);
}

/* Fills it->cov with the ledger's splits (what the heartbeat reports). Returns 0 or
 * SLUICE_ERR_NOMEM (then nothing is reported this time). */
static int build_coverage(struct sluice_iterator *it)
{
    const struct ledger *l = &it->ledger;
    size_t nbounds = 0;
    for (size_t i = 0; i < l->n; i++)
        nbounds += 2 * l->v[i].got.n;
    free(it->cov);
    free(it->cov_ptrs);
    free(it->cov_bounds);
    it->cov = NULL;
    it->cov_ptrs = NULL;
    it->cov_bounds = NULL;
    it->cov_n = 0;
    if (l->n == 0)
        return 0;
    it->cov = calloc(l->n, sizeof *it->cov);
    it->cov_ptrs = calloc(l->n, sizeof *it->cov_ptrs);
    it->cov_bounds = calloc(nbounds ? nbounds : 1, sizeof *it->cov_bounds);
    if (!it->cov || !it->cov_ptrs || !it->cov_bounds)
        return SLUICE_ERR_NOMEM;
    uint64_t *b = it->cov_bounds;
    for (size_t i = 0; i < l->n; i++) {
        const struct ledger_split *sp = &l->v[i];
        Sluice__SplitCoverage *c = &it->cov[i];
        sluice__split_coverage__init(c);
        c->seq = sp->seq;
        c->ended = sp->ended;
        c->total = sp->total;
        c->bounds = b;
        c->n_bounds = 2 * sp->got.n;
        for (size_t k = 0; k < sp->got.n; k++) {
            *b++ = sp->got.v[k].begin;
            *b++ = sp->got.v[k].end;
        }
        it->cov_ptrs[i] = c;
    }
    it->cov_n = l->n;
    return 0;
}

static void send_heartbeat(struct sluice_iterator *it)
{
    uint64_t now = uv_now(&it->c->loop);
    size_t n = ct_finished_ids(&it->tasks, NULL, 0);
    if (n > it->finished_cap) {
        uint64_t *v = realloc(it->finished, n * sizeof *v);
        if (!v) {
            schedule_heartbeat(it, it->heartbeat_ms);
            return;
        }
        it->finished = v;
        it->finished_cap = n;
    }
    ct_finished_ids(&it->tasks, it->finished, n);

    uv_mutex_lock(&it->mu);
    uint64_t taken = atomic_load_explicit(&it->taken, memory_order_relaxed);
    uint64_t wait_ns = it->wait_ns;
    uv_mutex_unlock(&it->mu);
    if (build_coverage(it) == 0)
        it->acks_due = false;
    double dt_ms = (double)(now - it->last_stats_ms);
    double rate = 0, waiting = 0;
    if (dt_ms > 0) {
        rate = (double)(taken - it->last_taken) * 1000.0 / dt_ms;
        waiting = (double)(wait_ns - it->last_wait_ns) / (dt_ms * 1e6);
        if (waiting > 1)
            waiting = 1;
        it->last_stats_ms = now;
        it->last_taken = taken;
        it->last_wait_ns = wait_ns;
    }

    sluice__client_heartbeat_request__init(&it->hb_req);
    it->hb_req.client_id = it->client_id;
    it->hb_req.iteration_id = it->iteration_id;
    it->hb_req.n_finished_task_ids = n;
    it->hb_req.finished_task_ids = it->finished;
    it->hb_req.elements_per_second = rate;
    it->hb_req.wait_fraction = waiting;
    it->hb_req.n_splits = it->cov_n;
    it->hb_req.splits = it->cov_ptrs;
    it->hb_req.round = it->coordinated ? it->tasks.round : 0;
    sluice__envelope__init(&it->hb_env);
    it->hb_env.body_case = SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT;
    it->hb_env.client_heartbeat = &it->hb_req;
    if (client_disp_call(it->c, &it->hb_env, heartbeat_timeout(it), false, on_heartbeat, it) != 0) {
        schedule_heartbeat(it, it->heartbeat_ms);
        return;
    }
    it->hb_busy = true;
    it->hb_soon = false;
    it->hb_sent++;
    it->refs++;
}

/* Whether a request written now goes to the dispatcher incarnation that holds the job: the
 * client writes at once on a live connection, so this is exact when it returns true. */
static bool talking_to_job(const struct sluice_iterator *it)
{
    struct rpc_client *disp = it->c->disp;
    return rpc_client_connected(disp) && rpc_client_peer_incarnation(disp) == it->job_incarnation;
}

static void on_hb_timer(uv_timer_t *t)
{
    struct sluice_iterator *it = t->data;
    if (it->closing || iter_state(it) == ITER_FAILED)
        return;
    if (talking_to_job(it))
        send_heartbeat(it);
    else
        verify_job(it, 0);
}

/* ---- loop thread: start and close --------------------------------------------------------- */

static void on_timer_closed(uv_handle_t *h)
{
    iter_unref(h->data);
}

static void run_start(struct sluice_client *c, struct client_op *op)
{
    struct sluice_iterator *it = op->user;
    uv_timer_init(&c->loop, &it->hb_timer);
    uv_timer_init(&c->loop, &it->pump_timer);
    it->hb_timer.data = it->pump_timer.data = it;
    it->refs = 3;
    it->started = true;
    it->waker.fn = on_wake;
    client_waker_add(c, &it->waker);
    it->last_hb_ok = it->last_stats_ms = uv_now(&c->loop);
    uv_timer_start(&it->hb_timer, on_hb_timer, 0, 0);
    client_op_done(c, op, 0);
}

static void on_released(int status, const char *msg, const Sluice__Envelope *reply,
                        uint64_t incarnation, void *user)
{
    struct sluice_iterator *it = user;
    client_op_done(it->c, it->close_op, 0);
    iter_unref(it);
}

static void run_close(struct sluice_client *c, struct client_op *op)
{
    struct sluice_iterator *it = op->user;
    it->closing = true;
    client_waker_remove(c, &it->waker);
    uv_close((uv_handle_t *)&it->hb_timer, on_timer_closed);
    uv_close((uv_handle_t *)&it->pump_timer, on_timer_closed);
    /* Releasing the last reference to a connection fails its calls at once; on_elements sees
     * closing and only gives their slots back. */
    for (size_t i = 0; i < it->tasks.n; i++) {
        struct client_conn *conn = it->tasks.v[i].conn;
        it->tasks.v[i].conn = NULL;
        if (conn)
            client_conn_release(c, conn);
    }
    it->close_op = op;
    uint32_t timeout = ITER_RELEASE_TIMEOUT_MS;
    if (c->timeout_ms && c->timeout_ms < timeout)
        timeout = c->timeout_ms;
    sluice__release_client_request__init(&it->rel_req);
    it->rel_req.client_id = it->client_id;
    sluice__envelope__init(&it->rel_env);
    it->rel_env.body_case = SLUICE__ENVELOPE__BODY_RELEASE_CLIENT;
    it->rel_env.release_client = &it->rel_req;
    /* Our client id means someone else's client to a dispatcher that restarted without its
     * journal, so the release goes only to the one that holds the job; elsewhere the client
     * times out on its own. */
    if (it->client_id && talking_to_job(it) &&
        client_disp_call(c, &it->rel_env, timeout, false, on_released, it) == 0)
        it->refs++;
    else
        client_op_done(c, op, 0);
    iter_unref(it);
}

/* ---- reader ------------------------------------------------------------------------------- */

/* The reader is done with the payload it was decoding: frees it and its slot, and wakes the
 * loop to use the slot. */
static void finish_payload(struct sluice_iterator *it)
{
    prefetch_item_free(&it->cur);
    it->cur_pos = 0;
    it->cur_decoded = 0;
    it->cur_skip = 0;
    uv_mutex_lock(&it->mu);
    prefetch_done(&it->pf);
    uv_mutex_unlock(&it->mu);
    client_wake(it->c);
}

/* Waits for a payload. Returns 1 with it->cur set, 0 at the end of the read, or a negative code
 * with err. Buffered payloads come before the end or a failure. */
static int wait_payload(struct sluice_iterator *it, bool timed, char *err, size_t errlen)
{
    int rc;
    uv_mutex_lock(&it->mu);
    for (;;) {
        if (prefetch_take(&it->pf, &it->cur)) {
            it->cur_pos = 0;
            it->cur_decoded = 0;
            it->cur_skip = 0;
            rc = 1;
            break;
        }
        if (it->state == ITER_ENDED) {
            rc = 0;
            break;
        }
        if (it->state == ITER_FAILED) {
            rc = err_set(err, errlen, it->fail_rc, "%s", it->fail_msg);
            break;
        }
        if (atomic_load(&it->interrupted)) {
            rc = err_set(err, errlen, SLUICE_ERR_CANCELLED, "interrupted");
            break;
        }
        uint64_t t0 = uv_hrtime();
        if (timed && it->deadline_ns) {
            if (t0 >= it->deadline_ns) {
                rc = err_set(err, errlen, SLUICE_ERR_TIMEOUT, "no element within %" PRIu32 " ms",
                             it->call_timeout_ms);
                break;
            }
            uv_cond_timedwait(&it->cond, &it->mu, it->deadline_ns - t0);
        } else {
            uv_cond_wait(&it->cond, &it->mu);
        }
        it->wait_ns += uv_hrtime() - t0;
    }
    uv_mutex_unlock(&it->mu);
    return rc;
}

/* The next element as the service delivers it: 1, 0 at the end, or a negative code. */
static int raw_next(struct sluice_iterator *it, struct sluice_element *out, bool timed, char *err,
                    size_t errlen)
{
    for (;;) {
        if (atomic_load(&it->interrupted))
            return err_set(err, errlen, SLUICE_ERR_CANCELLED, "interrupted");
        if (it->reader_rc)
            return err_set(err, errlen, it->reader_rc, "%s", it->reader_msg);
        if (!it->cur.data) {
            int rc = wait_payload(it, timed, err, errlen);
            if (rc <= 0)
                return rc;
            continue;
        }
        char msg[400];
        int rc;
        if (it->cur_skip < it->cur.nskip && it->cur.skip[it->cur_skip] == it->cur_decoded) {
            /* Received before, or an end marker: stepped over without decoding. */
            struct codec_mark mark;
            it->cur_skip++;
            rc = codec_scan_record(it->cur.data, it->cur.len, &it->cur_pos, &mark);
            if (rc > 0) {
                it->cur_decoded++;
                continue;
            }
            snprintf(msg, sizeof msg, "a damaged record");
        } else {
            struct codec_mark mark;
            rc = codec_next_record(it->cur.data, it->cur.len, &it->cur_pos, out, &it->scratch,
                                   &mark, msg, sizeof msg);
            if (rc == CODEC_ELEMENT) {
                it->cur_decoded++;
                it->taken_local++;
                it->have_round = true;
                it->last_round = it->cur.round;
                it->last_task = it->cur.task_id;
                atomic_store_explicit(&it->taken, it->taken_local, memory_order_relaxed);
                return 1;
            }
            if (rc == CODEC_SPLIT_END) {
                it->cur_decoded++;
                continue;
            }
        }
        uint32_t decoded = it->cur_decoded, count = it->cur.count;
        uint64_t task = it->cur.task_id;
        finish_payload(it);
        if (rc < 0) {
            it->reader_rc = rc;
            snprintf(it->reader_msg, sizeof it->reader_msg, "elements of task %" PRIu64 ": %s",
                     task, msg);
        } else if (decoded != count) {
            it->reader_rc = SLUICE_ERR_CORRUPT;
            snprintf(it->reader_msg, sizeof it->reader_msg,
                     "a reply of task %" PRIu64 " announced %" PRIu32 " elements but held %" PRIu32,
                     task, count, decoded);
        }
    }
}

/* The upstream of a local tail: the elements of the service. */
struct upstream {
    struct pipe_iter base;
    struct sluice_iterator *it;
};

static int upstream_next(struct pipe_iter *pi, struct sluice_element *out)
{
    struct upstream *up = (struct upstream *)pi;
    return raw_next(up->it, out, false, pi->ctx->err, sizeof pi->ctx->err);
}

static void upstream_destroy(struct pipe_iter *pi)
{
    free(pi);
}

static const struct pipe_iter_ops upstream_ops = {upstream_next, upstream_destroy};

/* Makes a reader blocked in (or about to call) raw_next return, so a tail's prefetch thread can
 * be joined. */
static void reader_stop(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    if (it->state == ITER_RUNNING) {
        it->state = ITER_FAILED;
        it->fail_rc = SLUICE_ERR_CLOSED;
        snprintf(it->fail_msg, sizeof it->fail_msg, "iterator closed");
    }
    uv_cond_broadcast(&it->cond);
    uv_mutex_unlock(&it->mu);
    if (it->tail)
        pipe_run_cancel(it->tail);
}

static void reader_release(struct sluice_iterator *it)
{
    pipe_run_free(it->tail);
    it->tail = NULL;
    pipe_spec_free(it->tail_spec);
    it->tail_spec = NULL;
    prefetch_item_free(&it->cur);
    pipe_buf_release(&it->scratch);
    pipe_elem_release(&it->elem);
}

/* ---- public ------------------------------------------------------------------------------- */

/* what names the tail in messages: "local tail", or the operations a dataset leaves to the
 * reader. */
static int open_tail(struct sluice_iterator *it, const char *text, const char *what, char *err,
                     size_t errlen)
{
    char msg[MSG_MAX];
    int rc = pipe_parse_tail(text, &it->tail_spec, msg, sizeof msg);
    if (rc)
        return err_set(err, errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_PARSE, "%s: %s", what,
                       msg);
    /* A prefetch at the end runs the tail on a thread of its own, so a wait for its next
     * element can time out without breaking a half-built batch (see iter_next). */
    struct pipe_op *ops = realloc(it->tail_spec->ops, (it->tail_spec->nops + 1) * sizeof *ops);
    if (!ops)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    it->tail_spec->ops = ops;
    ops[it->tail_spec->nops++] = (struct pipe_op){.kind = PIPE_OP_PREFETCH, .n = 1};
    struct upstream *up = calloc(1, sizeof *up);
    if (!up)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    up->base.ops = &upstream_ops;
    up->it = it;
    /* The run owns up from here, also on failure. */
    rc = pipe_open_tail(it->tail_spec, it->c->reg, &up->base, &it->tail, msg, sizeof msg);
    if (rc)
        return err_set(err, errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_PARSE, "%s: %s", what,
                       msg);
    return 0;
}

/* Checks a local tail without opening it: it parses and names known functions. */
static int check_local(struct sluice_iterator *it, const char *text, char *err, size_t errlen)
{
    char msg[MSG_MAX];
    struct pipe_spec *spec = NULL;
    int rc = pipe_parse_tail(text, &spec, msg, sizeof msg);
    if (rc == 0)
        rc = pipe_registry_check(it->c->reg, spec, msg, sizeof msg);
    pipe_spec_free(spec);
    if (rc)
        return err_set(err, errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_PARSE,
                       "local tail: %s", msg);
    return 0;
}

/* In distributed_epoch, the operations that pipe_dist_analyze() places in the reader (a batch
 * after a filter, a take after a shuffle, a batch of file records...) run here over the merged
 * stream, before the local tail: the tail is reopened as the dataset's part, then the local
 * text. */
static int open_dataset_tail(struct sluice_iterator *it, const struct sluice_read_options *o,
                             char *err, size_t errlen)
{
    struct pipe_spec *spec = NULL;
    struct pipe_dist d;
    char msg[MSG_MAX];
    char *text = NULL;
    int rc = pipe_spec_decode(it->def, it->def_len, &spec, msg, sizeof msg);
    if (rc) {
        rc = err_set(err, errlen, rc, "dataset '%s': %s", it->dataset_id, msg);
        goto out;
    }
    rc = pipe_dist_analyze(spec, &d, msg, sizeof msg);
    if (rc) {
        rc = err_set(err, errlen, rc, "dataset '%s': %s", it->dataset_id, msg);
        goto out;
    }
    if (d.cut == spec->nops) {
        if (o->local && *o->local)
            rc = open_tail(it, o->local, "local tail", err, errlen);
        goto out;
    }
    if (d.client_slices && o->job_name && *o->job_name) {
        char first[128];
        pipe_spec_format_ops(spec, d.cut, d.cut + 1, first, sizeof first);
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                     "dataset '%s': in distributed_epoch its operations from %s on run in each "
                     "reader (%s), so a take, skip or shard among them cannot hold over a job "
                     "shared by several readers (--job-name); read it without a job name or "
                     "move them before the operation that needs the whole stream",
                     it->dataset_id, first, d.why);
        goto out;
    }
    int n = pipe_spec_format_ops(spec, d.cut, spec->nops, NULL, 0);
    size_t local = o->local && *o->local ? strlen(o->local) : 0;
    text = n < 0 ? NULL : malloc((size_t)n + local + 4);
    if (!text) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        goto out;
    }
    pipe_spec_format_ops(spec, d.cut, spec->nops, text, (size_t)n + 1);
    if (local)
        sprintf(text + n, " | %s", o->local);
    rc = open_tail(it, text, "operations run in the reader", err, errlen);
out:
    free(text);
    pipe_spec_free(spec);
    return rc;
}

static int take_job(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    struct sluice_iterator *it = user;
    const Sluice__GetOrCreateJobReply *r = reply->get_or_create_job_reply;
    if (!r || !r->client_id)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "dispatcher sent no client id");
    it->job_id = r->job_id;
    it->iteration_id = r->iteration_id;
    it->client_id = r->client_id;
    it->heartbeat_ms = r->heartbeat_ms ? r->heartbeat_ms : ITER_DEFAULT_HEARTBEAT_MS;
    return 0;
}

static int take_dataset(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    struct sluice_iterator *it = user;
    const Sluice__GetDatasetReply *r = reply->get_dataset_reply;
    if (!r || !r->dataset)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "dispatcher sent no dataset definition");
    if (pack_def(r->dataset, &it->def, &it->def_len) != 0)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    return 0;
}

static int check_options(const struct sluice_read_options *o, char *err, size_t errlen)
{
    bool has_dataset = o->dataset_id && *o->dataset_id;
    bool has_pipeline = o->pipeline && *o->pipeline;
    if (has_dataset == has_pipeline)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "exactly one of a dataset id and a pipeline is required");
    if (has_dataset && strlen(o->dataset_id) >= DATASET_ID_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "dataset id longer than %d bytes",
                       DATASET_ID_MAX - 1);
    if ((int)o->mode < SLUICE_PARALLEL_EPOCHS || (int)o->mode > SLUICE_SHARD_HINT)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "unknown mode %d", (int)o->mode);
    if (o->num_consumers > 0) {
        if (!o->job_name || !*o->job_name)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "coordinated reads (num_consumers) need a job name");
        if (o->consumer_index >= o->num_consumers)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "consumer index %" PRIu32 " is not below num_consumers %" PRIu32,
                           o->consumer_index, o->num_consumers);
    } else if (o->consumer_index != 0) {
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a consumer index needs num_consumers");
    }
    return 0;
}

int sluice_iterator_open(struct sluice_client *c, const struct sluice_read_options *o,
                         struct sluice_iterator **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!c || !o || !out)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "client, options and out are required");
    int rc = check_options(o, err, errlen);
    if (rc)
        return rc;
    unsigned cap =
        o->max_outstanding_requests ? o->max_outstanding_requests : ITER_DEFAULT_OUTSTANDING;
    if (cap > ITER_MAX_OUTSTANDING)
        cap = ITER_MAX_OUTSTANDING;

    struct sluice_iterator *it = calloc(1, sizeof *it);
    if (!it)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    it->c = c;
    it->coordinated = o->num_consumers > 0;
    it->consumer_index = o->consumer_index;
    atomic_init(&it->interrupted, 0);
    atomic_init(&it->taken, 0);
    pipe_elem_init(&it->elem);
    ledger_init(&it->ledger);
    ct_init(&it->tasks, it->coordinated, ITER_PER_TASK_MAX);
    if (uv_mutex_init(&it->mu) != 0) {
        free(it);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "mutex: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    }
    if (uv_cond_init(&it->cond) != 0) {
        uv_mutex_destroy(&it->mu);
        free(it);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "condition variable: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    }
    rc = prefetch_init(&it->pf, cap);
    if (rc) {
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        goto fail;
    }

    /* Everything that can be checked locally is, before the dispatcher hears of the read. The
     * tail is opened (and its thread started) only once the dataset's own part is known. */
    if (o->local && *o->local) {
        rc = check_local(it, o->local, err, errlen);
        if (rc)
            goto fail;
    }
    if (o->pipeline && *o->pipeline) {
        static const struct sluice_register_options defaults = {0};
        rc = client_register(c, o->pipeline, &defaults, it->dataset_id, sizeof it->dataset_id, err,
                             errlen);
        if (rc)
            goto fail;
    } else {
        strcpy(it->dataset_id, o->dataset_id);
    }

    if (o->job_name && strlen(o->job_name) >= sizeof it->job_name) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID, "job name longer than %zu bytes",
                     sizeof it->job_name - 1);
        goto fail;
    }
    strcpy(it->job_name, o->job_name ? o->job_name : "");
    it->mode = o->mode;

    /* The definition, to recognize the dataset after a dispatcher restart (see verify_job). */
    Sluice__GetDatasetRequest dreq = SLUICE__GET_DATASET_REQUEST__INIT;
    dreq.dataset_id = it->dataset_id;
    Sluice__Envelope denv = SLUICE__ENVELOPE__INIT;
    denv.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET;
    denv.get_dataset = &dreq;
    rc = client_request(c, &denv, SLUICE__ENVELOPE__BODY_GET_DATASET_REPLY, take_dataset, it, NULL,
                        err, errlen);
    if (rc)
        goto fail;
    if (o->mode == SLUICE_DISTRIBUTED_EPOCH)
        rc = open_dataset_tail(it, o, err, errlen);
    else if (o->local && *o->local)
        rc = open_tail(it, o->local, "local tail", err, errlen);
    if (rc)
        goto fail;

    Sluice__GetOrCreateJobRequest req = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    req.dataset_id = it->dataset_id;
    req.job_name = o->job_name ? (char *)o->job_name : "";
    req.mode = (Sluice__ProcessingMode)o->mode;
    req.num_consumers = o->num_consumers;
    req.consumer_index = o->consumer_index;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &req;
    rc = client_request(c, &env, SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB_REPLY, take_job, it,
                        &it->job_incarnation, err, errlen);
    if (rc)
        goto fail;

    it->created_incarnation = it->job_incarnation;
    struct client_op start = {.run = run_start, .user = it};
    client_submit(c, &start);
    *out = it;
    return 0;

fail:
    reader_stop(it);
    reader_release(it);
    iter_free(it);
    return rc;
}

/* The next element into it->elem: 1, 0 at the end, or a negative code with err. */
static int iter_next(struct sluice_iterator *it, uint32_t timeout_ms, char *err, size_t errlen)
{
    int rc;
    if (it->tail) {
        /* The tail ends in a prefetch (open_tail), so its operators run on a thread of their
         * own and a wait that runs out here interrupts nothing. */
        rc = pipe_prefetch_next_timed(it->tail->it, &it->elem, timeout_ms);
        if (rc == SLUICE_ERR_TIMEOUT)
            return err_set(err, errlen, rc, "no element within %" PRIu32 " ms", timeout_ms);
        if (rc < 0)
            return err_set(err, errlen, rc, "%s",
                           it->tail->ctx.err[0] ? it->tail->ctx.err : sluice_strerror(rc));
        return rc;
    }
    it->call_timeout_ms = timeout_ms;
    it->deadline_ns = timeout_ms ? uv_hrtime() + (uint64_t)timeout_ms * 1000000u : 0;
    return raw_next(it, &it->elem, true, err, errlen);
}

int sluice_iterator_next(struct sluice_iterator *it, const struct sluice_element **elem,
                         uint32_t timeout_ms, char *err, size_t errlen)
{
    if (!it || !elem)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "iterator and elem are required");
    *elem = NULL;
    int rc = iter_next(it, timeout_ms, err, errlen);
    if (rc == 1)
        *elem = &it->elem;
    return rc;
}

int sluice_iterator_next_into(struct sluice_iterator *it, struct sluice_element *elem,
                              uint32_t timeout_ms, char *err, size_t errlen)
{
    if (!it || !elem)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "iterator and elem are required");
    int rc = iter_next(it, timeout_ms, err, errlen);
    if (rc == 1)
        pipe_elem_swap(elem, &it->elem);
    return rc;
}

int sluice_iterator_round(const struct sluice_iterator *it, uint64_t *round, uint64_t *task_id)
{
    if (!it || !it->coordinated || it->tail || !it->have_round)
        return SLUICE_ERR_INVALID;
    if (round)
        *round = it->last_round;
    if (task_id)
        *task_id = it->last_task;
    return 0;
}

void sluice_iterator_close(struct sluice_iterator *it)
{
    if (!it)
        return;
    reader_stop(it);
    reader_release(it);
    struct client_op op = {.run = run_close, .user = it};
    client_submit(it->c, &op);
}
