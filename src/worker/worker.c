/* The worker shell (see worker.h). Everything here runs on the loop thread and only moves data
 * between the network and the tasks; decisions about leasing live in lease.c, buffering in
 * buffer.c and task.c, sharding in shard.c.
 *
 * Handles: one uv_async (producers wake the loop through it), a heartbeat timer and a tick
 * timer, plus the rpc server and the dispatcher client. The tick runs every
 * WORKER_TICK_FAST_MS while some reader waits (to publish elements a producer holds back, and to
 * answer waits that ran out) and every WORKER_TICK_SLOW_MS otherwise (to retry and report
 * leases).
 *
 * Task lifetime: a task is live (in w->tasks, found by id) until the dispatcher removes it, the
 * dispatcher is found to have restarted, or the worker closes; it then moves to w->dying, where
 * it stays until its producers have exited and its GetSplits call (if any) has completed, and
 * is then freed. Ids are looked up only among live tasks, so a new task may reuse the id of a
 * dying one. */
#include "worker.h"

#include "common/error.h"
#include "common/log.h"
#include "common/rpc.h"
#include "lease.h"
#include "rounds.h"
#include "pipeline/def.h"
#include "pipeline/registry.h"
#include "pipeline/split.h"
#include "task.h"
#include "wmetrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WORKER_TICK_FAST_MS 2
#define WORKER_TICK_SLOW_MS 50
#define WORKER_HEARTBEAT_TIMEOUT_MS 10000
#define WORKER_SPLITS_TIMEOUT_MS 10000

struct waiter {
    struct waiter *next;
    struct rpc_conn *conn; /* referenced */
    uint64_t id;
    uint32_t max_elements;
    uint64_t max_bytes;
    uint64_t deadline_ms;
    uint64_t task_id;  /* a parked read (see park) */
    uint64_t hb_need;  /* a parked read: answered once heartbeat number hb_need has returned */
    uint32_t consumer; /* coordinated reads: the reader's consumer index */
    uint64_t round;    /* coordinated reads: the round asked for */
};

struct wtask {
    /* Draining: the buffered count last seen and when it last went down. */
    uint64_t drain_buffered, drain_progress_ms;
    struct wtask *next;
    struct worker *w;
    uint64_t id;
    struct task *task;
    struct waiter *wait_head, *wait_tail; /* FIFO: readers are served in arrival order */
    size_t nwait;
    bool dying;
    bool splits_inflight;
    bool failure_logged;
    bool end_reported;         /* the dispatcher was told at once that this task finished */
    unsigned replies_inflight; /* replies sent from the task's chunks and not yet written */
    unsigned splits_failures;
    /* The request_seq of the task's GetSplits calls. */
    struct lease_numbers splits_numbers;
    uint64_t incarnation; /* of the dispatcher that assigned the task */
    uint64_t rate_produced, rate_at_ms;
    double rate;
    struct rounds rounds; /* coordinated reads (rounds.h); n 0 for other tasks */
};

struct worker {
    uv_loop_t *loop;
    const struct sluice_registry *reg;
    unsigned threads;
    uint64_t buffer_bytes, buffer_records;
    struct rpc_server *srv;
    struct rpc_client *disp;
    uint64_t incarnation;
    uint64_t disp_incarnation; /* 0 before the first handshake */
    uv_async_t wake;
    uv_timer_t hb_timer;
    uv_timer_t tick_timer;
    uint64_t tick_ms;
    uint32_t hb_ms;
    bool hb_fixed;
    bool hb_inflight;
    bool hb_again; /* send another heartbeat as soon as the one in flight returns */
    unsigned hb_failures;
    uint64_t hb_seq; /* heartbeats sent; the one in flight (if any) has this number */
    /* Reads of tasks not known yet, answered after the next heartbeat reply (FIFO). */
    struct waiter *parked_head, *parked_tail;
    struct wtask *tasks;
    struct wtask *dying;
    size_t nwaiters;
    char host[256];
    int port;
    char address[512];
    char disp_address[512];
    struct pipe_buf scratch;
    struct wmetrics *wm; /* owned; see wmetrics.h */

    /* Draining (worker_drain): no new tasks or splits; done once every task finished or the
     * deadline passed, then the worker deregisters (leaving) and calls drain_cb. */
    bool draining, leaving;
    uint64_t drain_deadline_ms;
    uint64_t last_fetch_ms; /* when a reader last asked for elements */
    void (*drain_cb)(void *user, bool complete);
    void *drain_user;

    bool closing;
    bool srv_open, disp_open;
    unsigned handles; /* open uv handles of our own */
    bool handles_closing;
    void (*close_cb)(void *user);
    void *close_user;
};

static void on_tick(uv_timer_t *t);
static void on_hb_timer(uv_timer_t *t);
static void drain_check(struct worker *w);
static void report_end(struct worker *w, struct wtask *wt);

static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

static struct wtask *find_task(struct worker *w, uint64_t id)
{
    for (struct wtask *wt = w->tasks; wt; wt = wt->next)
        if (wt->id == id)
            return wt;
    return NULL;
}

/* ---- replies and waiting readers -------------------------------------------------------- */

static void reply_elements(struct rpc_conn *conn, uint64_t id, uint32_t count, bool eos,
                           const uint8_t *payload, size_t len)
{
    Sluice__GetElementsReply r = SLUICE__GET_ELEMENTS_REPLY__INIT;
    r.count = count;
    r.end_of_sequence = eos;
    r.payload.data = (uint8_t *)payload;
    r.payload.len = len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY;
    env.get_elements_reply = &r;
    rpc_conn_reply(conn, id, &env);
}

/* A task this worker does not run (yet: the dispatcher may have told the reader before this
 * worker's next heartbeat; or no longer: the worker restarted). The reader retries until the
 * dispatcher's task list settles, so this is UNAVAILABLE, distinct from a task that failed. */
static void reply_not_found(struct rpc_conn *conn, uint64_t id, uint64_t task_id)
{
    rpc_conn_reply_error(conn, id, SLUICE_ERR_UNAVAILABLE,
                         "task %" PRIu64 " is not running on this worker", task_id);
}

/* A reply written straight from the chunks it was taken from: the take is released (the chunks
 * go back to the task for reuse) only once the bytes are written. */
struct sent_reply {
    struct wtask *wt;
    struct task_take tk;
};

static void reap(struct worker *w);

static void on_reply_sent(void *arg, int status)
{
    struct sent_reply *sr = arg;
    struct wtask *wt = sr->wt;
    task_take_release(wt->task, &sr->tk);
    free(sr);
    wt->replies_inflight--;
    if (wt->dying)
        reap(wt->w);
}

/* Describes the payload of a take that is written in place: the pieces of whole chunks, or
 * the head chunk's records when the take used that chunk up. Returns the number of pieces, or 0
 * when the payload must be copied (it lies in scratch, or in a chunk still in the buffer, which
 * a later take may recycle before the write completes). */
static unsigned take_pieces(const struct task_take *tk, uv_buf_t segs[RPC_MAX_SEGS])
{
    if (tk->wb.whole) {
        unsigned n = 0;
        for (const struct wbuf_chunk *c = tk->wb.spent; c; c = c->next) {
            struct wbuf_piece pieces[3];
            unsigned k = wbuf_chunk_pieces(c, pieces);
            if (n + k > RPC_MAX_SEGS)
                return 0;
            for (unsigned i = 0; i < k; i++)
                segs[n++] = uv_buf_init((char *)pieces[i].p, (unsigned)pieces[i].len);
        }
        return n;
    }
    if (!tk->wb.copied && tk->wb.spent) {
        segs[0] = uv_buf_init((char *)tk->wb.payload, (unsigned)tk->wb.len);
        return 1;
    }
    return 0;
}

/* Packs the payload of a take into one contiguous buffer (a take of whole chunks is spread
 * over them). Returns the payload, NULL with *len 0 for an empty one, or NULL when out of
 * memory. */
static const uint8_t *take_payload(struct worker *w, const struct task_take *tk, size_t *len)
{
    *len = tk->wb.len;
    if (!tk->wb.whole)
        return tk->wb.payload;
    if (w->scratch.cap < tk->wb.len) {
        char *p = realloc(w->scratch.p, tk->wb.len);
        if (!p)
            return NULL;
        w->scratch.p = p;
        w->scratch.cap = tk->wb.len;
    }
    size_t off = 0;
    for (const struct wbuf_chunk *c = tk->wb.spent; c; c = c->next) {
        struct wbuf_piece pieces[3];
        unsigned k = wbuf_chunk_pieces(c, pieces);
        for (unsigned i = 0; i < k; i++) {
            memcpy(w->scratch.p + off, pieces[i].p, pieces[i].len);
            off += pieces[i].len;
        }
    }
    return (const uint8_t *)w->scratch.p;
}

/* Sends the records of a take. A payload that lies in chunks the take used up is written from
 * them without copying, and the take is released (its chunks go back to the task for reuse)
 * once the bytes are written; any other is packed (copied) and the take released at once. */
static void reply_take(struct worker *w, struct wtask *wt, struct rpc_conn *conn, uint64_t id,
                       struct task_take *tk)
{
    uv_buf_t segs[RPC_MAX_SEGS];
    unsigned nsegs = take_pieces(tk, segs);
    if (nsegs > 0) {
        struct sent_reply *sr = malloc(sizeof *sr);
        if (sr) {
            sr->wt = wt;
            sr->tk = *tk;
            int rc = rpc_conn_reply_elements(conn, id, tk->wb.count, false, segs, nsegs,
                                             on_reply_sent, sr);
            if (rc == 0) {
                wt->replies_inflight++;
                return;
            }
            free(sr);
            if (rc == SLUICE_ERR_CLOSED) {
                task_take_release(wt->task, tk);
                return;
            }
        }
    }
    size_t len;
    const uint8_t *payload = take_payload(w, tk, &len);
    if (payload || len == 0)
        reply_elements(conn, id, tk->wb.count, false, payload, len);
    else
        rpc_conn_reply_error(conn, id, SLUICE_ERR_NOMEM, "task %" PRIu64 ": %s", wt->id,
                             sluice_strerror(SLUICE_ERR_NOMEM));
    task_take_release(wt->task, tk);
}

/* Answers a read from the task's buffer if it can be answered now. Returns true when a reply
 * (elements, end of sequence, or the task's failure) went out, false when the buffer is empty
 * and more may come. */
static bool serve(struct worker *w, struct wtask *wt, struct rpc_conn *conn, uint64_t id,
                  uint32_t max_elements, uint64_t max_bytes)
{
    struct task_take tk;
    int st = task_take_whole(wt->task, max_elements, max_bytes, &w->scratch, &tk);
    switch (st) {
    case TASK_TAKE_DATA:
        wmetrics_served(w->wm, tk.wb.count, tk.wb.len);
        reply_take(w, wt, conn, id, &tk);
        /* A gathered reply may have grown the scratch buffer far past what most need. */
        if (w->scratch.cap > WORKER_DEFAULT_MAX_BYTES)
            pipe_buf_release(&w->scratch);
        return true;
    case TASK_TAKE_EMPTY:
        return false;
    case TASK_TAKE_END:
        reply_elements(conn, id, 0, true, NULL, 0);
        report_end(w, wt);
        return true;
    case TASK_TAKE_FAILED:
        /* One code for every pipeline failure, so readers never mistake it for a transport
         * problem to retry (the pipeline's own code may be -ENOENT, say). */
        rpc_conn_reply_error(conn, id, SLUICE_ERR_TASK_FAILED, "%s", tk.msg);
        return true;
    default:
        rpc_conn_reply_error(conn, id, st, "task %" PRIu64 ": %s", wt->id, sluice_strerror(st));
        return true;
    }
}

/* ---- coordinated reads ------------------------------------------------------------------ */

static void waiter_unlink(struct worker *w, struct wtask *wt, struct waiter **pp,
                          struct waiter *prev);
static void waiter_pop(struct worker *w, struct wtask *wt);

/* Stages one element of the task's buffer for the next round. Returns TASK_TAKE_DATA when one
 * was staged, else what the take reported (EMPTY, END, FAILED with tk->msg) or a negative
 * code. */
static int rounds_take_one(struct worker *w, struct wtask *wt, struct task_take *tk)
{
    int st = task_take_whole(wt->task, 1, WORKER_MAX_REPLY_BYTES, &w->scratch, tk);
    if (st != TASK_TAKE_DATA)
        return st;
    size_t len;
    const uint8_t *payload = take_payload(w, tk, &len);
    uint8_t *copy = (payload || len == 0) ? malloc(len ? len : 1) : NULL;
    if (!copy) {
        task_take_release(wt->task, tk);
        return SLUICE_ERR_NOMEM;
    }
    if (len)
        memcpy(copy, payload, len);
    task_take_release(wt->task, tk);
    rounds_stage(&wt->rounds, copy, len);
    return TASK_TAKE_DATA;
}

/* Answers the waiting reads of a task read in rounds that can be answered from what it holds:
 * a round served (kept), a round no longer kept (the consumer fell behind), the end, or a bad
 * consumer index. Leaves the others waiting. Returns whether any read was answered. */
static bool rounds_answer(struct worker *w, struct wtask *wt)
{
    struct rounds *r = &wt->rounds;
    bool answered = false;
    struct waiter **pp = &wt->wait_head, *prev = NULL;
    while (*pp) {
        struct waiter *q = *pp;
        const uint8_t *rec;
        size_t len;
        enum rounds_lookup st = ROUNDS_WAITING;
        if (!rpc_conn_is_open(q->conn)) {
            /* nothing to answer */
        } else if (q->consumer >= r->n) {
            rpc_conn_reply_error(q->conn, q->id, SLUICE_ERR_INVALID,
                                 "consumer index %" PRIu32 " is not below num_consumers %" PRIu32,
                                 q->consumer, r->n);
        } else if ((st = rounds_lookup(r, q->consumer, q->round, &rec, &len)) == ROUNDS_READY) {
            wmetrics_served(w->wm, 1, len);
            reply_elements(q->conn, q->id, 1, false, rec, len);
        } else if (st == ROUNDS_GONE) {
            rpc_conn_reply_error(q->conn, q->id, SLUICE_ERR_INVALID,
                                 "consumer %" PRIu32 " fell too far behind: round %" PRIu64
                                 " of task %" PRIu64
                                 " was served to the other consumers and is gone",
                                 q->consumer, q->round, wt->id);
        } else if (r->ended) {
            reply_elements(q->conn, q->id, 0, true, NULL, 0);
        } else {
            prev = q;
            pp = &q->next;
            continue;
        }
        waiter_unlink(w, wt, pp, prev);
        answered = true;
    }
    return answered;
}

/* Serves the waiting reads of a task read in rounds as far as it can now. A round is served only
 * at a moment when each of the n consumers has a read of it waiting that has not run out (a
 * reader whose wait ran out may since have skipped the round, see src/client/tasks.h): then
 * its n elements are taken from the buffer and every one of those reads is answered in this
 * call, so a round reaches every consumer or none. */
static void serve_rounds(struct worker *w, struct wtask *wt)
{
    struct rounds *r = &wt->rounds;
    uint64_t now = now_ms();
    bool *seen = NULL;
    for (;;) {
        rounds_answer(w, wt);
        /* The lowest round waited for, by reads still live. */
        bool have = false;
        uint64_t round = 0;
        for (struct waiter *q = wt->wait_head; q; q = q->next) {
            if (q->deadline_ms > now && rpc_conn_is_open(q->conn) && (!have || q->round < round)) {
                round = q->round;
                have = true;
            }
        }
        if (!have)
            break;
        if (!seen && !(seen = malloc(r->n * sizeof *seen)))
            break; /* no memory: the reads wait and are asked again */
        memset(seen, 0, r->n * sizeof *seen);
        uint32_t count = 0;
        for (struct waiter *q = wt->wait_head; q; q = q->next) {
            if (q->round == round && q->deadline_ms > now && rpc_conn_is_open(q->conn) &&
                !seen[q->consumer]) {
                seen[q->consumer] = true;
                count++;
            }
        }
        if (count < r->n)
            break;
        int st = TASK_TAKE_DATA;
        struct task_take tk;
        while (!rounds_stage_full(r) && (st = rounds_take_one(w, wt, &tk)) == TASK_TAKE_DATA)
            continue;
        if (st == TASK_TAKE_EMPTY)
            break;
        if (st == TASK_TAKE_END) {
            rounds_end(r);
            report_end(w, wt);
            continue; /* the reads are answered with the end */
        }
        if (st != TASK_TAKE_DATA) {
            int code = st == TASK_TAKE_FAILED ? SLUICE_ERR_TASK_FAILED : st;
            while (wt->wait_head) {
                struct waiter *q = wt->wait_head;
                if (rpc_conn_is_open(q->conn)) {
                    if (st == TASK_TAKE_FAILED)
                        rpc_conn_reply_error(q->conn, q->id, code, "%s", tk.msg);
                    else
                        rpc_conn_reply_error(q->conn, q->id, code, "task %" PRIu64 ": %s", wt->id,
                                             sluice_strerror(st));
                }
                waiter_pop(w, wt);
            }
            break;
        }
        rounds_commit(r, round);
    }
    free(seen);
}

/* Answers a read the way the task is read: reads in rounds only ever wait (see serve_rounds);
 * others are answered from the buffer. */
static bool serve_read(struct worker *w, struct wtask *wt, const struct waiter *q)
{
    if (wt->rounds.n > 0)
        return false;
    return serve(w, wt, q->conn, q->id, q->max_elements, q->max_bytes);
}

static void hb_send(struct worker *w);
static uint64_t hb_soon(struct worker *w);

/* A task just ended for its readers: tell the dispatcher now rather than at the next tick, so
 * the iteration is marked finished and readers end without waiting out a heartbeat interval. */
static void report_end(struct worker *w, struct wtask *wt)
{
    if (wt->end_reported)
        return;
    wt->end_reported = true;
    hb_soon(w);
}

static void waiter_pop(struct worker *w, struct wtask *wt)
{
    struct waiter *q = wt->wait_head;
    wt->wait_head = q->next;
    if (!wt->wait_head)
        wt->wait_tail = NULL;
    wt->nwait--;
    w->nwaiters--;
    rpc_conn_unref(q->conn);
    free(q);
}

static void tick_adjust(struct worker *w)
{
    uint64_t want = w->nwaiters ? WORKER_TICK_FAST_MS : WORKER_TICK_SLOW_MS;
    if (w->closing || want == w->tick_ms)
        return;
    w->tick_ms = want;
    uv_timer_start(&w->tick_timer, on_tick, want, want);
}

/* Unlinks waiter *pp (prev is the one before it, or NULL) from wt's queue and frees it. */
static void waiter_unlink(struct worker *w, struct wtask *wt, struct waiter **pp,
                          struct waiter *prev)
{
    struct waiter *q = *pp;
    *pp = q->next;
    if (wt->wait_tail == q)
        wt->wait_tail = prev;
    wt->nwait--;
    w->nwaiters--;
    rpc_conn_unref(q->conn);
    free(q);
}

/* Serves waiting readers in arrival order for as long as the buffer has elements for them; a
 * task read in rounds serves whole rounds (serve_rounds). */
static void serve_waiters(struct worker *w, struct wtask *wt)
{
    if (wt->rounds.n > 0) {
        serve_rounds(w, wt);
    } else {
        while (wt->wait_head) {
            struct waiter *q = wt->wait_head;
            if (rpc_conn_is_open(q->conn) && !serve_read(w, wt, q))
                break;
            waiter_pop(w, wt);
        }
    }
    task_set_waiting(wt->task, wt->nwait > 0);
}

/* Answers waits that ran out with no elements (the reader simply asks again). */
static void expire_waiters(struct worker *w, struct wtask *wt, uint64_t now)
{
    /* Every wait has the same bound, so deadlines grow along the queue. */
    while (wt->wait_head && wt->wait_head->deadline_ms <= now) {
        struct waiter *q = wt->wait_head;
        if (rpc_conn_is_open(q->conn))
            reply_elements(q->conn, q->id, 0, false, NULL, 0);
        waiter_pop(w, wt);
    }
    task_set_waiting(wt->task, wt->nwait > 0);
}

static void drop_waiters(struct worker *w, struct wtask *wt, int code, const char *why)
{
    while (wt->wait_head) {
        struct waiter *q = wt->wait_head;
        if (rpc_conn_is_open(q->conn)) {
            if (code == SLUICE_ERR_NOT_FOUND)
                reply_not_found(q->conn, q->id, wt->id);
            else
                rpc_conn_reply_error(q->conn, q->id, code, "%s", why);
        }
        waiter_pop(w, wt);
    }
}

/* Asks the dispatcher for news now: at once, or right after the heartbeat in flight. Returns
 * the number of the heartbeat whose reply will carry it. */
static uint64_t hb_soon(struct worker *w)
{
    if (w->hb_inflight) {
        w->hb_again = true;
        return w->hb_seq + 1;
    }
    hb_send(w);
    return w->hb_inflight ? w->hb_seq : w->hb_seq + 1;
}

/* A read of a task this worker does not know: typically the dispatcher has told the reader
 * about a task it assigned to this worker, and this worker will hear of it at its next
 * heartbeat. Rather than have the reader back off and retry, the read waits for the reply to a
 * heartbeat sent now, and is then served or told the task is unknown (unpark). Parked reads are
 * bounded by WORKER_POLL_MS like any wait. */
static void park(struct worker *w, struct rpc_conn *conn, uint64_t id, uint64_t task_id,
                 uint32_t max_elements, uint64_t max_bytes, uint32_t consumer, uint64_t round)
{
    struct waiter *q = calloc(1, sizeof *q);
    if (!q) {
        reply_not_found(conn, id, task_id);
        return;
    }
    rpc_conn_ref(conn);
    q->conn = conn;
    q->id = id;
    q->task_id = task_id;
    q->max_elements = max_elements;
    q->max_bytes = max_bytes;
    q->consumer = consumer;
    q->round = round;
    q->deadline_ms = now_ms() + WORKER_POLL_MS;
    if (w->parked_tail)
        w->parked_tail->next = q;
    else
        w->parked_head = q;
    w->parked_tail = q;
    w->nwaiters++;
    q->hb_need = hb_soon(w);
    tick_adjust(w);
}

static void handle_read(struct worker *w, struct rpc_conn *conn, uint64_t id, uint64_t task_id,
                        uint32_t max_elements, uint64_t max_bytes, uint32_t consumer,
                        uint64_t round, bool may_park);

/* Answers the parked reads that were waiting for heartbeat hb_done (all of them with force):
 * served when their task is known now, else told it is not. */
static void unpark(struct worker *w, uint64_t hb_done, bool force)
{
    struct waiter *ready = NULL, **ready_tail = &ready;
    struct waiter **pp = &w->parked_head;
    w->parked_tail = NULL;
    while (*pp) {
        struct waiter *q = *pp;
        if (force || q->hb_need <= hb_done || q->deadline_ms <= now_ms()) {
            *pp = q->next;
            q->next = NULL;
            *ready_tail = q;
            ready_tail = &q->next;
        } else {
            w->parked_tail = q;
            pp = &q->next;
        }
    }
    while (ready) {
        struct waiter *q = ready;
        ready = q->next;
        w->nwaiters--;
        if (rpc_conn_is_open(q->conn)) {
            if (w->closing)
                rpc_conn_reply_error(q->conn, q->id, SLUICE_ERR_UNAVAILABLE,
                                     "the worker is shutting down");
            else
                handle_read(w, q->conn, q->id, q->task_id, q->max_elements, q->max_bytes,
                            q->consumer, q->round, false);
        }
        rpc_conn_unref(q->conn);
        free(q);
    }
}

static void handle_get_elements(struct worker *w, struct rpc_conn *conn, uint64_t id,
                                const Sluice__GetElementsRequest *req)
{
    uint32_t max_elements = req->max_elements ? req->max_elements : WORKER_DEFAULT_MAX_ELEMENTS;
    uint64_t max_bytes = req->max_bytes ? req->max_bytes : WORKER_DEFAULT_MAX_BYTES;
    if (max_bytes > WORKER_MAX_REPLY_BYTES)
        max_bytes = WORKER_MAX_REPLY_BYTES;
    handle_read(w, conn, id, req->task_id, max_elements, max_bytes, req->consumer_index, req->round,
                true);
}

static void handle_read(struct worker *w, struct rpc_conn *conn, uint64_t id, uint64_t task_id,
                        uint32_t max_elements, uint64_t max_bytes, uint32_t consumer,
                        uint64_t round, bool may_park)
{
    struct wtask *wt = find_task(w, task_id);
    if (!wt) {
        /* Only while the dispatcher is reachable can a heartbeat bring the task. */
        if (may_park && rpc_client_connected(w->disp))
            park(w, conn, id, task_id, max_elements, max_bytes, consumer, round);
        else
            reply_not_found(conn, id, task_id);
        return;
    }
    const struct waiter rd = {.conn = conn,
                              .id = id,
                              .max_elements = max_elements,
                              .max_bytes = max_bytes,
                              .consumer = consumer,
                              .round = round};
    /* Earlier readers go first; a new one is served at once only when nobody waits. Reads in
     * rounds always wait with the others (serve_rounds). */
    if (!wt->wait_head && serve_read(w, wt, &rd))
        return;

    struct waiter *q = malloc(sizeof *q);
    if (!q) {
        rpc_conn_reply_error(conn, id, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        return;
    }
    *q = rd;
    rpc_conn_ref(conn);
    q->deadline_ms = now_ms() + WORKER_POLL_MS;
    if (wt->wait_tail)
        wt->wait_tail->next = q;
    else
        wt->wait_head = q;
    wt->wait_tail = q;
    wt->nwait++;
    w->nwaiters++;
    task_set_waiting(wt->task, true);
    /* Elements a producer holds back for batching are due now if they have lingered; and
     * elements may have arrived for earlier waiters before the producer's wakeup is handled. */
    task_steal(wt->task, uv_hrtime());
    serve_waiters(w, wt);
    tick_adjust(w);
}

static void on_request(struct rpc_server *srv, struct rpc_conn *conn, const Sluice__Envelope *req,
                       void *user)
{
    struct worker *w = user;
    if (req->body_case != SLUICE__ENVELOPE__BODY_GET_ELEMENTS || !req->get_elements) {
        rpc_conn_reply_error(conn, req->id, SLUICE_ERR_UNSUPPORTED,
                             "a worker answers only GetElements requests");
        return;
    }
    wmetrics_request(w->wm);
    if (w->closing) {
        rpc_conn_reply_error(conn, req->id, SLUICE_ERR_UNAVAILABLE, "the worker is shutting down");
        return;
    }
    w->last_fetch_ms = now_ms();
    handle_get_elements(w, conn, req->id, req->get_elements);
}

/* A closed connection's waiting reads can never be answered; forget them now. */
static void on_conn_close(struct rpc_server *srv, struct rpc_conn *conn, void *user)
{
    struct worker *w = user;
    struct waiter **pp = &w->parked_head;
    w->parked_tail = NULL;
    while (*pp) {
        struct waiter *q = *pp;
        if (q->conn != conn) {
            w->parked_tail = q;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        w->nwaiters--;
        rpc_conn_unref(q->conn);
        free(q);
    }
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        struct waiter **pp = &wt->wait_head;
        struct waiter *prev = NULL;
        while (*pp) {
            struct waiter *q = *pp;
            if (q->conn != conn) {
                prev = q;
                pp = &q->next;
                continue;
            }
            waiter_unlink(w, wt, pp, prev);
        }
        task_set_waiting(wt->task, wt->nwait > 0);
    }
}

/* ---- task table ------------------------------------------------------------------------- */

static void maybe_finish_close(struct worker *w);

/* Frees dying tasks whose producers have exited, whose GetSplits call has completed and whose
 * replies sent from their chunks are written. */
static void reap(struct worker *w)
{
    struct wtask **pp = &w->dying;
    while (*pp) {
        struct wtask *wt = *pp;
        if (wt->splits_inflight || wt->replies_inflight || !task_exited(wt->task)) {
            pp = &wt->next;
            continue;
        }
        *pp = wt->next;
        task_free(wt->task);
        rounds_free(&wt->rounds);
        free(wt);
    }
    maybe_finish_close(w);
}

static void remove_task(struct worker *w, struct wtask *wt, int code, const char *why)
{
    struct wtask **pp = &w->tasks;
    while (*pp != wt)
        pp = &(*pp)->next;
    *pp = wt->next;
    drop_waiters(w, wt, code, why);
    task_stop(wt->task);
    wt->dying = true;
    wt->next = w->dying;
    w->dying = wt;
}

static void log_failure(struct wtask *wt)
{
    const char *msg;
    if (wt->failure_logged || task_error(wt->task, &msg) == 0)
        return;
    wt->failure_logged = true;
    log_error("task %" PRIu64 " failed: %s", wt->id, msg);
}

static const char *mode_name(Sluice__ProcessingMode mode)
{
    switch (mode) {
    case SLUICE__PROCESSING_MODE__MODE_PARALLEL_EPOCHS:
        return "parallel_epochs";
    case SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH:
        return "distributed_epoch";
    case SLUICE__PROCESSING_MODE__MODE_FILE:
        return "file";
    case SLUICE__PROCESSING_MODE__MODE_DATA:
        return "data";
    case SLUICE__PROCESSING_MODE__MODE_FILE_OR_DATA:
        return "file_or_data";
    case SLUICE__PROCESSING_MODE__MODE_HINT:
        return "hint";
    default:
        return NULL;
    }
}

/* Turns a TaskDef's dataset into a checked spec. Protobuf stops here: the DatasetDef is
 * serialized again and decoded by the one decoder that validates it. */
static int spec_from_taskdef(const struct worker *w, const Sluice__TaskDef *td,
                             struct pipe_spec **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!td->dataset)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "the task comes without a dataset");
    if (!mode_name(td->mode))
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "unknown processing mode %d",
                       (int)td->mode);
    size_t len = sluice__dataset_def__get_packed_size(td->dataset);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    sluice__dataset_def__pack(td->dataset, buf);
    struct pipe_spec *spec;
    int rc = pipe_spec_decode(buf, len, &spec, err, errlen);
    free(buf);
    if (rc < 0)
        return rc;
    rc = pipe_registry_check(w->reg, spec, err, errlen);
    if (rc < 0) {
        pipe_spec_free(spec);
        return rc;
    }
    *out = spec;
    return 0;
}

static void add_task(struct worker *w, const Sluice__TaskDef *td)
{
    if (!td || find_task(w, td->task_id))
        return;
    struct wtask *wt = calloc(1, sizeof *wt);
    if (!wt) {
        log_error("task %" PRIu64 ": %s", td->task_id, sluice_strerror(SLUICE_ERR_NOMEM));
        return;
    }
    wt->w = w;
    wt->id = td->task_id;
    wt->incarnation = w->disp_incarnation;
    wt->rate_at_ms = now_ms();

    char err[512] = "";
    struct pipe_spec *spec;
    int rc = spec_from_taskdef(w, td, &spec, err, sizeof err);
    if (rc == 0) {
        struct task_config cfg = {
            .id = td->task_id,
            .mode = (enum sluice_mode)td->mode,
            .compress = td->compression == SLUICE__COMPRESSION__COMPRESSION_AUTO,
            .num_workers = td->num_workers,
            .worker_index = td->worker_index,
            .threads = w->threads,
            .reg = w->reg,
            .wake = &w->wake,
            .buffer_bytes = w->buffer_bytes,
            .buffer_records = w->buffer_records,
        };
        rc = task_start(&cfg, spec, &wt->task, err, sizeof err);
    }
    if (rc < 0) {
        log_error("task %" PRIu64 " failed: %s", td->task_id, err);
        wt->failure_logged = true;
        if (task_new_failed(td->task_id, rc, err, &wt->task) < 0) {
            free(wt);
            return;
        }
    } else {
        log_info("task %" PRIu64 " started: dataset %s, iteration %" PRIu64 ", %s", td->task_id,
                 td->dataset_id ? td->dataset_id : "?", td->iteration_id, mode_name(td->mode));
    }
    rc = rounds_init(&wt->rounds, td->num_consumers);
    if (rc == SLUICE_ERR_INVALID)
        task_fail(wt->task, rc, "too many consumers");
    else if (rc < 0)
        task_fail(wt->task, rc, "no memory for the task's rounds");
    wt->next = w->tasks;
    w->tasks = wt;
}

/* ---- split leasing ---------------------------------------------------------------------- */

static void lease_pump(struct worker *w, struct wtask *wt);

/* Copies a wire plan into a lease plan. Returns 0 or SLUICE_ERR_NOMEM. */
static int plan_from_wire(const Sluice__SplitPlan *sp, struct lease_plan *out)
{
    memset(out, 0, sizeof *out);
    out->source_len = sp->source_len;
    out->split_size = sp->split_size;
    out->per_pass = sp->per_pass;
    out->passes = sp->passes;
    if (sp->n_paths == 0)
        return 0;
    out->paths = calloc(sp->n_paths, sizeof *out->paths);
    if (!out->paths)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < sp->n_paths; i++) {
        out->paths[i] = strdup(sp->paths[i] ? sp->paths[i] : "");
        if (!out->paths[i]) {
            lease_plan_release(out);
            return SLUICE_ERR_NOMEM;
        }
        out->npaths++;
    }
    return 0;
}

static void splits_done(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct wtask *wt = user;
    struct worker *w = wt->w;
    wt->splits_inflight = false;
    uint64_t now = now_ms();
    const Sluice__GetSplitsReply *r = NULL;
    if (status == 0 && reply && reply->body_case == SLUICE__ENVELOPE__BODY_GET_SPLITS_REPLY)
        r = reply->get_splits_reply;
    if (!r) {
        if (status == 0)
            msg = "unexpected reply";
        if (!wt->dying && !w->closing && wt->splits_failures++ == 0)
            log_warn("task %" PRIu64 ": leasing splits failed: %s (retrying)", wt->id, msg);
        task_lease_failed(wt->task, now);
        lease_number_done(&wt->splits_numbers, false);
    } else {
        lease_number_done(&wt->splits_numbers, true);
        if (wt->splits_failures && !wt->dying)
            log_info("task %" PRIu64 ": leasing splits works again", wt->id);
        wt->splits_failures = 0;
        struct lease_plan plan;
        bool have_plan = false;
        int rc = 0;
        if (r->plan) {
            rc = plan_from_wire(r->plan, &plan);
            have_plan = rc == 0;
        }
        if (rc < 0) {
            task_lease_granted(wt->task, NULL, NULL, 0, false, now);
            task_fail(wt->task, rc, "copying the split plan: out of memory");
        } else {
            task_lease_granted(wt->task, have_plan ? &plan : NULL, r->seqs, r->n_seqs,
                               r->end_of_splits, now);
        }
        log_failure(wt);
    }
    if (wt->dying)
        reap(w);
    else
        lease_pump(w, wt);
}

static void lease_pump(struct worker *w, struct wtask *wt)
{
    if (w->closing || wt->dying || wt->splits_inflight || !task_is_distributed(wt->task))
        return;
    /* Lease traffic goes only to the dispatcher that assigned the task. Calls made while
     * disconnected would wait and go to whichever dispatcher answers next, which may be a
     * restarted one that reuses the task id for another task. */
    if (!rpc_client_connected(w->disp) || rpc_client_peer_incarnation(w->disp) != wt->incarnation)
        return;
    uint64_t now = now_ms();
    uint32_t max_splits;
    const uint64_t *finished, *returned;
    size_t nfinished, nreturned;
    if (!task_lease_want(wt->task, now, &max_splits, &finished, &nfinished, &returned, &nreturned))
        return;
    Sluice__GetSplitsRequest req = SLUICE__GET_SPLITS_REQUEST__INIT;
    req.task_id = wt->id;
    req.max_splits = max_splits;
    req.n_finished = nfinished;
    req.finished = (uint64_t *)finished;
    req.n_returned = nreturned;
    req.returned = (uint64_t *)returned;
    /* After a failure this is the failed request again, under its number (lease.h). */
    req.request_seq = lease_number_next(&wt->splits_numbers);
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS;
    env.get_splits = &req;
    int rc = rpc_call(w->disp, &env, WORKER_SPLITS_TIMEOUT_MS, splits_done, wt);
    if (rc < 0) {
        task_lease_failed(wt->task, now);
        lease_number_done(&wt->splits_numbers, false);
        return;
    }
    wt->splits_inflight = true;
    log_debug("task %" PRIu64 ": asked for %" PRIu32 " splits, reported %zu finished", wt->id,
              max_splits, nfinished);
}

/* ---- heartbeats ------------------------------------------------------------------------- */

static void hb_send(struct worker *w);

static void hb_apply(struct worker *w, const Sluice__WorkerHeartbeatReply *r)
{
    for (size_t i = 0; i < r->n_removed_task_ids; i++) {
        struct wtask *wt = find_task(w, r->removed_task_ids[i]);
        if (wt) {
            log_info("task %" PRIu64 " removed", wt->id);
            remove_task(w, wt, SLUICE_ERR_NOT_FOUND, NULL);
        }
    }
    /* A draining worker starts nothing new (a task assigned just before the dispatcher heard
     * of the drain goes to the pool with the rest when the worker leaves). */
    for (size_t i = 0; i < r->n_new_tasks && !w->draining; i++)
        add_task(w, r->new_tasks[i]);
    if (!w->hb_fixed && r->heartbeat_ms && r->heartbeat_ms != w->hb_ms) {
        w->hb_ms = r->heartbeat_ms;
        uv_timer_start(&w->hb_timer, on_hb_timer, w->hb_ms, w->hb_ms);
    }
    for (struct wtask *wt = w->tasks; wt; wt = wt->next)
        lease_pump(w, wt);
    reap(w);
}

static void hb_done(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct worker *w = user;
    w->hb_inflight = false;
    if (w->closing)
        return;
    uint64_t seq = w->hb_seq;
    if (w->hb_again) {
        w->hb_again = false;
        uv_timer_start(&w->hb_timer, on_hb_timer, 0, w->hb_ms);
    }
    const Sluice__WorkerHeartbeatReply *r = NULL;
    if (status == 0 && reply && reply->body_case == SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY)
        r = reply->worker_heartbeat_reply;
    if (!r) {
        if (status == 0)
            msg = "unexpected reply";
        /* One line when the dispatcher goes away, not one per heartbeat. */
        if (w->hb_failures++ == 0)
            log_warn("heartbeat to dispatcher %s failed: %s (retrying; tasks keep serving)",
                     w->disp_address, msg);
        /* No news is coming soon: the parked reads learn that their task is unknown. */
        unpark(w, seq, true);
        return;
    }
    if (w->hb_failures)
        log_info("dispatcher %s reachable again", w->disp_address);
    w->hb_failures = 0;
    hb_apply(w, r);
    unpark(w, seq, false);
}

static void hb_send(struct worker *w)
{
    if (w->closing || w->hb_inflight)
        return;
    size_t n = 0;
    for (struct wtask *wt = w->tasks; wt; wt = wt->next)
        n++;
    Sluice__TaskProgress *progs = calloc(n ? n : 1, sizeof *progs);
    Sluice__TaskProgress **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!progs || !ptrs) {
        free(progs);
        free(ptrs);
        return; /* the next tick tries again */
    }
    uint64_t now = now_ms();
    uint64_t now_ns = uv_hrtime();
    size_t i = 0;
    wmetrics_pass_begin(w->wm);
    for (struct wtask *wt = w->tasks; wt; wt = wt->next, i++) {
        struct task_progress tp;
        task_progress(wt->task, &tp);
        if (now > wt->rate_at_ms) {
            wt->rate =
                (double)(tp.produced - wt->rate_produced) * 1000.0 / (double)(now - wt->rate_at_ms);
            wt->rate_produced = tp.produced;
            wt->rate_at_ms = now;
        }
        sluice__task_progress__init(&progs[i]);
        progs[i].task_id = wt->id;
        progs[i].finished = tp.finished;
        progs[i].elements_per_second = wt->rate;
        progs[i].buffered = tp.buffered;
        progs[i].settled = tp.settled;
        progs[i].idle_fraction = wmetrics_task_heartbeat(w->wm, wt->id, &tp, now_ns);
        ptrs[i] = &progs[i];
    }
    wmetrics_pass_end(w->wm);
    Sluice__WorkerHeartbeatRequest req = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    req.address = w->address;
    req.n_tasks = n;
    req.tasks = ptrs;
    req.draining = w->draining;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &req;
    int rc = rpc_call(w->disp, &env, WORKER_HEARTBEAT_TIMEOUT_MS, hb_done, w);
    free(progs);
    free(ptrs);
    if (rc < 0) {
        log_warn("heartbeat: %s", sluice_strerror(rc));
        return;
    }
    w->hb_inflight = true;
    w->hb_seq++;
}

static void on_hb_timer(uv_timer_t *t)
{
    hb_send(t->data);
}

static void on_connect(struct rpc_client *client, uint64_t incarnation, void *user)
{
    struct worker *w = user;
    if (w->closing)
        return;
    if (w->disp_incarnation != 0 && incarnation != w->disp_incarnation) {
        size_t n = 0;
        for (struct wtask *wt = w->tasks; wt; wt = wt->next)
            n++;
        log_warn("dispatcher %s restarted without its state (incarnation %016" PRIx64
                 ", was %016" PRIx64 "): dropping %zu task(s)",
                 w->disp_address, incarnation, w->disp_incarnation, n);
        while (w->tasks)
            remove_task(w, w->tasks, SLUICE_ERR_NOT_FOUND, NULL);
        reap(w);
    }
    w->disp_incarnation = incarnation;
    /* Report at once, so a restarted dispatcher learns about this worker without waiting. */
    hb_send(w);
}

/* ---- wakeups ---------------------------------------------------------------------------- */

static void on_wake(uv_async_t *a)
{
    struct worker *w = a->data;
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        if (wt->wait_head)
            serve_waiters(w, wt);
        log_failure(wt);
        lease_pump(w, wt);
    }
    reap(w);
    drain_check(w);
    tick_adjust(w);
}

/* ---- draining ---------------------------------------------------------------------------- */

static void leave_done(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct worker *w = user;
    (void)reply;
    bool complete = w->drain_deadline_ms != 0;
    if (status < 0)
        log_warn("deregistering from dispatcher %s failed: %s (it will evict this worker after "
                 "its timeout and lease its splits again)",
                 w->disp_address, msg ? msg : sluice_strerror(status));
    else
        log_info("deregistered from dispatcher %s", w->disp_address);
    void (*cb)(void *, bool) = w->drain_cb;
    w->drain_cb = NULL;
    if (cb && !w->closing)
        cb(w->drain_user, complete);
}

/* Whether the drain is over: every task finished (or failed), or the deadline passed. Then the
 * worker deregisters: the dispatcher removes it, and anything it still held goes back to the
 * pool for other workers. */
static void drain_check(struct worker *w)
{
    if (!w->draining || w->leaving || w->closing)
        return;
    bool all = true;
    uint64_t now = now_ms();
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        struct task_progress tp;
        task_progress(wt->task, &tp);
        if (tp.buffered < wt->drain_buffered || wt->drain_progress_ms == 0)
            wt->drain_progress_ms = now;
        wt->drain_buffered = tp.buffered;
        /* A stopped copy (not distributed_epoch) whose readers stopped taking from it has
         * nothing more to give: its copy ends here anyway. */
        bool stalled = !task_is_distributed(wt->task) && tp.done &&
                       now - wt->drain_progress_ms >= WORKER_DRAIN_IDLE_MS;
        if (!(tp.finished || tp.failed || stalled))
            all = false;
    }
    /* Readers that stopped asking (gone, or done with this worker) are not waited for. */
    bool idle = now - w->last_fetch_ms >= WORKER_DRAIN_IDLE_MS;
    if (!all && !idle && now < w->drain_deadline_ms)
        return;
    if (!all && idle) {
        log_info("drain: no reader asked for elements for %u ms: leaving (what is undelivered "
                 "goes to other workers)",
                 (unsigned)WORKER_DRAIN_IDLE_MS);
    } else if (!all) {
        log_warn("drain: not every task finished within the drain timeout: leaving anyway (its "
                 "unfinished splits go to other workers)");
        w->drain_deadline_ms = 0; /* marks the drain incomplete */
    } else {
        log_info("drain: every task finished and was fetched");
    }
    w->leaving = true;
    Sluice__WorkerHeartbeatRequest req = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    req.address = w->address;
    req.draining = true;
    req.leaving = true;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &req;
    /* An unreachable dispatcher is not waited for: it evicts this worker after its timeout. */
    int rc = rpc_client_connected(w->disp)
                 ? rpc_call(w->disp, &env, WORKER_LEAVE_TIMEOUT_MS, leave_done, w)
                 : SLUICE_ERR_UNAVAILABLE;
    if (rc < 0)
        leave_done(rc, "dispatcher not connected", NULL, w);
}

void worker_drain(struct worker *w, uint32_t timeout_ms, void (*cb)(void *user, bool complete),
                  void *user)
{
    if (w->closing || w->draining)
        return;
    w->draining = true;
    w->drain_deadline_ms = now_ms() + (timeout_ms ? timeout_ms : 1);
    if (w->last_fetch_ms < now_ms())
        w->last_fetch_ms = now_ms(); /* the idle clock starts now */
    w->drain_cb = cb;
    w->drain_user = user;
    size_t n = 0;
    for (struct wtask *wt = w->tasks; wt; wt = wt->next, n++) {
        /* A task read in rounds keeps producing: the dispatcher moves its consumers to other
         * tasks at a round they have not reached yet, and it serves its rounds until then
         * (the drain ends once no reader has asked for a while). */
        if (wt->rounds.n > 0)
            continue;
        if (task_drain(wt->task) < 0)
            log_warn("task %" PRIu64 ": cannot hand its splits back: %s (they go back when the "
                     "worker leaves)",
                     wt->id, sluice_strerror(SLUICE_ERR_NOMEM));
        lease_pump(w, wt);
    }
    log_info("draining: %zu task(s) finish what they started and serve it; at most %" PRIu32 " ms",
             n, timeout_ms);
    /* Tell the dispatcher now, so it leases this worker nothing more. */
    if (w->hb_inflight)
        w->hb_again = true;
    else
        hb_send(w);
    drain_check(w);
}

static void on_tick(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t now = now_ms();
    uint64_t now_ns = uv_hrtime();
    if (w->parked_head)
        unpark(w, 0, false);
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        if (wt->wait_head) {
            if (task_steal(wt->task, now_ns) > 0)
                serve_waiters(w, wt);
            expire_waiters(w, wt, now);
        }
        lease_pump(w, wt);
    }
    reap(w);
    drain_check(w);
    tick_adjust(w);
}

/* ---- start and close -------------------------------------------------------------------- */

static void derive_address(struct worker *w, const char *advertise)
{
    if (advertise && *advertise) {
        snprintf(w->address, sizeof w->address, "%s", advertise);
        return;
    }
    const char *host = w->host;
    char name[256];
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 || host[0] == '\0') {
        if (gethostname(name, sizeof name) == 0) {
            name[sizeof name - 1] = '\0';
            host = name;
        }
    }
    if (strchr(host, ':'))
        snprintf(w->address, sizeof w->address, "[%s]:%d", host, w->port);
    else
        snprintf(w->address, sizeof w->address, "%s:%d", host, w->port);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct worker *w = h->data;
    if (--w->handles > 0)
        return;
    void (*cb)(void *) = w->close_cb;
    void *user = w->close_user;
    pipe_buf_release(&w->scratch);
    wmetrics_destroy(w->wm);
    free(w);
    if (cb)
        cb(user);
}

/* The last step of closing: once the server, the client and every task are gone, the handles
 * close, and the last close callback frees the worker. */
static void maybe_finish_close(struct worker *w)
{
    if (!w->closing || w->handles_closing || w->srv_open || w->disp_open || w->dying)
        return;
    w->handles_closing = true;
    uv_close((uv_handle_t *)&w->hb_timer, on_handle_closed);
    uv_close((uv_handle_t *)&w->tick_timer, on_handle_closed);
    uv_close((uv_handle_t *)&w->wake, on_handle_closed);
}

static void on_srv_closed(void *user)
{
    struct worker *w = user;
    w->srv_open = false;
    maybe_finish_close(w);
}

static void on_disp_closed(void *user)
{
    struct worker *w = user;
    w->disp_open = false;
    maybe_finish_close(w);
}

int worker_start(uv_loop_t *loop, const struct worker_opts *opts, struct worker **out, char *err,
                 size_t errlen)
{
    if (!opts->dispatcher || !opts->reg)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "worker: no dispatcher or registry");
    if (opts->advertise && *opts->advertise) {
        char h[256];
        int p;
        int rc = rpc_parse_address(opts->advertise, h, sizeof h, &p, err, errlen);
        if (rc < 0)
            return rc;
    }
    struct worker *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "worker: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    if (wmetrics_create(&w->wm) < 0) {
        free(w);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "worker: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    }
    w->loop = loop;
    w->reg = opts->reg;
    w->threads = opts->threads ? opts->threads : 1;
    w->buffer_bytes = opts->buffer_bytes;
    w->buffer_records = opts->buffer_records;
    w->incarnation = rpc_new_incarnation();
    w->hb_fixed = opts->heartbeat_ms != 0;
    w->hb_ms = opts->heartbeat_ms ? opts->heartbeat_ms : WORKER_DEFAULT_HEARTBEAT_MS;
    snprintf(w->disp_address, sizeof w->disp_address, "%s", opts->dispatcher);

    /* The server first: a failed listen leaves nothing open. */
    struct rpc_server_opts so = {
        .host = opts->host,
        .port = opts->port,
        .role = SLUICE__ROLE__ROLE_WORKER,
        .incarnation = w->incarnation,
        .on_request = on_request,
        .on_close = on_conn_close,
        .user = w,
    };
    int rc = rpc_server_start(loop, &so, &w->srv, err, errlen);
    if (rc < 0) {
        wmetrics_destroy(w->wm);
        free(w);
        return rc;
    }
    w->srv_open = true;
    snprintf(w->host, sizeof w->host, "%s", rpc_server_host(w->srv));
    w->port = rpc_server_port(w->srv);
    derive_address(w, opts->advertise);

    struct rpc_client_opts co = {
        .address = opts->dispatcher,
        .role = SLUICE__ROLE__ROLE_WORKER,
        .incarnation = w->incarnation,
        .on_connect = on_connect,
        .user = w,
    };
    char cerr[256];
    rc = rpc_client_new(loop, &co, &w->disp, cerr, sizeof cerr);
    if (rc < 0) {
        err_set(err, errlen, rc, "dispatcher: %s", cerr);
        /* The server closes in the background; the caller runs the loop to let it finish. */
        wmetrics_destroy(w->wm);
        rpc_server_close(w->srv, free, w);
        return rc;
    }
    w->disp_open = true;

    /* Timers and async handles on a live loop cannot fail to initialize. */
    uv_async_init(loop, &w->wake, on_wake);
    uv_timer_init(loop, &w->hb_timer);
    uv_timer_init(loop, &w->tick_timer);
    w->wake.data = w->hb_timer.data = w->tick_timer.data = w;
    w->handles = 3;
    uv_timer_start(&w->hb_timer, on_hb_timer, 0, w->hb_ms);
    w->tick_ms = WORKER_TICK_SLOW_MS;
    uv_timer_start(&w->tick_timer, on_tick, w->tick_ms, w->tick_ms);
    *out = w;
    return 0;
}

const char *worker_host(const struct worker *w)
{
    return w->host;
}

int worker_port(const struct worker *w)
{
    return w->port;
}

const char *worker_address(const struct worker *w)
{
    return w->address;
}

int worker_metrics_render(struct worker *w, char **body, size_t *len)
{
    wmetrics_pass_begin(w->wm);
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        struct task_progress tp;
        task_progress(wt->task, &tp);
        wmetrics_task_seen(w->wm, wt->id, &tp);
    }
    wmetrics_pass_end(w->wm);
    return wmetrics_render(w->wm, body, len);
}

void worker_close(struct worker *w, void (*cb)(void *user), void *user)
{
    if (w->closing)
        return;
    w->closing = true;
    w->close_cb = cb;
    w->close_user = user;
    uv_timer_stop(&w->hb_timer);
    uv_timer_stop(&w->tick_timer);
    unpark(w, 0, true);
    while (w->tasks)
        remove_task(w, w->tasks, SLUICE_ERR_UNAVAILABLE, "the worker is shutting down");
    rpc_server_close(w->srv, on_srv_closed, w);
    rpc_client_close(w->disp, on_disp_closed, w);
    reap(w);
}
