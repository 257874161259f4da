/* The worker's serving side: GetElements and Read requests, replies that borrow the task's
 * buffers, coordinated rounds and readers waiting for elements. */

#include "worker_internal.h"

#include "common/shm_region.h"
#include "pipeline/codec.h"

/* ---- replies and waiting readers -------------------------------------------------------- */

/* Replies with elements packed in one frame; one that goes through a shared region (conn.h) is
 * counted there. */
static void reply_elements(struct worker *w, struct rpc_conn *conn, uint64_t id, uint32_t count,
                           bool eos, const uint8_t *payload, size_t len)
{
    Sluice__GetElementsReply r = SLUICE__GET_ELEMENTS_REPLY__INIT;
    r.count = count;
    r.end_of_sequence = eos;
    r.payload.data = (uint8_t *)payload;
    r.payload.len = len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY;
    env.get_elements_reply = &r;
    uint64_t e0, b0, i0, e1, b1, i1;
    rpc_conn_shm_sent(conn, &e0, &b0, &i0);
    if (rpc_conn_reply(conn, id, &env) == 0) {
        rpc_conn_shm_sent(conn, &e1, &b1, &i1);
        wmetrics_shm(w->wm, e1 - e0, b1 - b0, i1 - i0);
    }
}

/* The entry of client_id in wt's counts, added when missing; NULL when the table is full or
 * out of memory (that reader's end then carries no count). */
static struct delivery *delivery_of(struct wtask *wt, uint64_t client_id)
{
    size_t lo = 0, hi = wt->ndeliveries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (wt->deliveries[mid].client_id < client_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < wt->ndeliveries && wt->deliveries[lo].client_id == client_id)
        return &wt->deliveries[lo];
    if (wt->ndeliveries >= WORKER_MAX_DELIVERIES)
        return NULL;
    struct delivery *v = realloc(wt->deliveries, (wt->ndeliveries + 1) * sizeof *v);
    if (!v)
        return NULL;
    wt->deliveries = v;
    memmove(&v[lo + 1], &v[lo], (wt->ndeliveries - lo) * sizeof *v);
    v[lo] = (struct delivery){.client_id = client_id};
    wt->ndeliveries++;
    return &v[lo];
}

/* The end of a task's sequence for reader client_id: with the count of elements the task sent
 * that reader, when the task keeps one (see struct wtask). */
static void reply_end(struct wtask *wt, struct rpc_conn *conn, uint64_t id, uint64_t client_id)
{
    Sluice__GetElementsReply r = SLUICE__GET_ELEMENTS_REPLY__INIT;
    r.end_of_sequence = true;
    struct delivery *d = wt->counted ? delivery_of(wt, client_id) : NULL;
    if (d) {
        r.counted = true;
        r.delivered = d->elements;
        d->ended = true;
    }
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
    uint64_t t0; /* when the reply was begun (uv_hrtime): its time counts as the task's sending */
};

static void on_reply_sent(void *arg, int status)
{
    struct sent_reply *sr = arg;
    struct wtask *wt = sr->wt;
    task_take_release(wt->task, &sr->tk);
    wt->send_ns += uv_hrtime() - sr->t0;
    free(sr);
    wt->replies_inflight--;
    if (wt->dying) {
        worker_reap(wt->w);
        return;
    }
    /* Reads that waited for this connection's queued replies to drain may go now. */
    if (status == 0 && wt->wait_head)
        worker_serve_waiters(wt->w, wt);
}

/* Describes the payload of a take that is written in place: the pieces of whole chunks, or
 * the head chunk's records when the take used that chunk up. With align, a pad record goes
 * before each external chunk's record so that the values written from its block start at a
 * multiple of CODEC_ALIGN bytes of the payload (a reader of a shared region then finds them
 * aligned to any dtype). Returns the number of pieces, or 0 when the payload must be copied (it
 * lies in scratch, or in a chunk still in the buffer, which a later take may recycle before the
 * write completes). */
static unsigned take_pieces(const struct task_take *tk, bool align, struct shm_region *region,
                            uv_buf_t segs[RPC_MAX_SEGS])
{
    const struct wbuf_chunk *one = tk->wb.whole ? tk->wb.spent : NULL;
    if (one && !one->next && one->inplace && one->pos == 0 && region) {
        /* A record laid out whole in the reader's arena: one piece, announced where it lies. */
        const uint8_t *p = one->ext - one->ext_at;
        size_t len = one->data.len + one->ext_len;
        if (shm_region_in_arena(region, p, len)) {
            segs[0] = uv_buf_init((char *)p, (unsigned)len);
            return 1;
        }
    }
    if (tk->wb.whole) {
        unsigned n = 0;
        uint64_t at = 0;
        for (const struct wbuf_chunk *c = tk->wb.spent; c; c = c->next) {
            struct wbuf_piece pieces[3];
            unsigned k = wbuf_chunk_pieces(c, pieces);
            size_t pad = align && c->ext && c->pos == 0 ? codec_pad_len(at, c->ext_at) : 0;
            if (n + k + (pad > 0) > RPC_MAX_SEGS)
                return 0;
            if (pad) {
                segs[n++] = uv_buf_init((char *)codec_pad_record(pad), (unsigned)pad);
                at += pad;
            }
            for (unsigned i = 0; i < k; i++) {
                segs[n++] = uv_buf_init((char *)pieces[i].p, (unsigned)pieces[i].len);
                at += pieces[i].len;
            }
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
    uint64_t t0 = uv_hrtime();
    struct shm_region *region = rpc_conn_shm_region(conn);
    /* The task builds its large values in the arena of the reader it last replied to. The task
     * holds a reference of the region it builds in, so the pointer compared is never stale. */
    struct shm_region *arena = region && shm_region_arena_size(region) ? region : NULL;
    if (wt->arena != arena) {
        task_set_arena(wt->task, arena);
        wt->arena = arena;
    }
    unsigned nsegs = take_pieces(tk, region && rpc_conn_aligned(conn), region, segs);
    if (nsegs > 0) {
        struct sent_reply *sr = malloc(sizeof *sr);
        if (sr) {
            sr->wt = wt;
            sr->tk = *tk;
            sr->t0 = t0;
            uint64_t e0, b0, i0, e1, b1, i1;
            rpc_conn_shm_sent(conn, &e0, &b0, &i0);
            int rc = rpc_conn_reply_elements(conn, id, tk->wb.count, false, segs, nsegs,
                                             on_reply_sent, sr);
            if (rc == 0) {
                rpc_conn_shm_sent(conn, &e1, &b1, &i1);
                wmetrics_shm(w->wm, e1 - e0, b1 - b0, i1 - i0);
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
        reply_elements(w, conn, id, tk->wb.count, false, payload, len);
    else
        rpc_conn_reply_error(conn, id, SLUICE_ERR_NOMEM, "task %" PRIu64 ": %s", wt->id,
                             sluice_strerror(SLUICE_ERR_NOMEM));
    task_take_release(wt->task, tk);
    wt->send_ns += uv_hrtime() - t0;
}

/* Answers a read from the task's buffer if it can be answered now. Returns true when a reply
 * (elements, end of sequence, or the task's failure) went out, false when the buffer is empty
 * and more may come. */
static bool serve(struct worker *w, struct wtask *wt, struct rpc_conn *conn, uint64_t id,
                  uint64_t client_id, uint32_t max_elements, uint64_t max_bytes, bool whole)
{
    struct task_take tk;
    int st = task_take_whole(wt->task, max_elements, max_bytes, whole ? client_id : 0,
                             rpc_conn_serial(conn), &w->scratch, &tk);
    switch (st) {
    case TASK_TAKE_DATA:
        wmetrics_served(w->wm, tk.wb.count, tk.wb.len, rpc_conn_is_local(conn));
        wt->served_elements += tk.wb.count;
        wt->served_bytes += tk.wb.len;
        /* Counted once taken for this reader: from here the elements are its own, and if the
         * reply does not reach it they are lost to it, which its end of sequence then shows. */
        if (wt->counted) {
            struct delivery *d = delivery_of(wt, client_id);
            if (d)
                d->elements += tk.wb.count;
        }
        reply_take(w, wt, conn, id, &tk);
        /* A gathered reply may have grown the scratch buffer far past what most need. */
        if (w->scratch.cap > WORKER_DEFAULT_MAX_BYTES)
            pipe_buf_release(&w->scratch);
        return true;
    case TASK_TAKE_EMPTY:
        return false;
    case TASK_TAKE_END:
        reply_end(wt, conn, id, client_id);
        worker_report_end(w, wt);
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
    int st = task_take_whole(wt->task, 1, WORKER_MAX_REPLY_BYTES, 0, 0, &w->scratch, tk);
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
            wmetrics_served(w->wm, 1, len, rpc_conn_is_local(q->conn));
            wt->served_elements++;
            wt->served_bytes += len;
            reply_elements(w, q->conn, q->id, 1, false, rec, len);
        } else if (st == ROUNDS_GONE) {
            rpc_conn_reply_error(q->conn, q->id, SLUICE_ERR_INVALID,
                                 "consumer %" PRIu32 " fell too far behind: round %" PRIu64
                                 " of task %" PRIu64
                                 " was served to the other consumers and is gone",
                                 q->consumer, q->round, wt->id);
        } else if (r->ended) {
            reply_elements(w, q->conn, q->id, 0, true, NULL, 0);
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
    uint64_t now = worker_now_ms();
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
            worker_report_end(w, wt);
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

/* ---- cross-trainer cache ---------------------------------------------------------------- */

/* Answers a read of a task with a cross-trainer cache from its trainer's cursor (xtcache.h). A
 * trainer that has read everything the cache holds takes the next elements from the task's
 * buffer into the cache (evicting the oldest past the bound), so production follows the fastest
 * trainer and a slow one never holds it back. Returns true when a reply went out, false when the
 * trainer has everything and the buffer is empty (the read waits). */
static bool serve_xtc(struct worker *w, struct wtask *wt, const struct waiter *q)
{
    uint64_t now = worker_now_ms();
    for (int pass = 0;; pass++) {
        struct xtc_read r;
        int rc =
            xtc_read(&wt->xtc, q->trainer, now, q->max_elements, q->max_bytes, &w->scratch, &r);
        if (rc == SLUICE_ERR_LIMIT) {
            rpc_conn_reply_error(q->conn, q->id, SLUICE_ERR_LIMIT,
                                 "task %" PRIu64 ": the cross-trainer cache serves %zu trainers "
                                 "already; a new trainer id is refused until one is idle for "
                                 "%u ms",
                                 wt->id, wt->xtc.ntrainers, (unsigned)WORKER_XTC_IDLE_MS);
            return true;
        }
        if (rc == SLUICE_ERR_INVALID) {
            rpc_conn_reply_error(q->conn, q->id, SLUICE_ERR_INVALID,
                                 "task %" PRIu64 ": a trainer id is 1 to %u bytes", wt->id,
                                 (unsigned)XTC_TRAINER_ID_MAX);
            return true;
        }
        if (rc < 0) {
            rpc_conn_reply_error(q->conn, q->id, rc, "task %" PRIu64 ": %s", wt->id,
                                 sluice_strerror(rc));
            return true;
        }
        if (r.skipped > 0)
            wmetrics_xtc_skipped(w->wm, r.skipped);
        if (r.count > 0) {
            wmetrics_served(w->wm, r.count, r.len, rpc_conn_is_local(q->conn));
            wt->served_elements += r.count;
            wt->served_bytes += r.len;
            reply_elements(w, q->conn, q->id, r.count, false, r.payload, r.len);
            if (w->scratch.cap > WORKER_DEFAULT_MAX_BYTES)
                pipe_buf_release(&w->scratch);
            return true;
        }
        if (pass > 0)
            return false; /* a take always brings at least one element: not reached */
        struct task_take tk;
        uint64_t pull = wt->xtc.bound / XTC_PULL_PARTS;
        if (pull > q->max_bytes)
            pull = q->max_bytes;
        int st = task_take(wt->task, q->max_elements, pull ? pull : 1, &w->scratch, &tk);
        switch (st) {
        case TASK_TAKE_DATA:
            rc = xtc_push(&wt->xtc, tk.wb.payload, tk.wb.len, tk.wb.count);
            task_take_release(wt->task, &tk);
            if (rc < 0) {
                rpc_conn_reply_error(q->conn, q->id, rc, "task %" PRIu64 ": %s", wt->id,
                                     sluice_strerror(rc));
                return true;
            }
            continue;
        case TASK_TAKE_EMPTY:
            return false;
        case TASK_TAKE_END:
            /* A stream that never ends ends only when the worker stops the task (draining). */
            reply_elements(w, q->conn, q->id, 0, true, NULL, 0);
            worker_report_end(w, wt);
            return true;
        case TASK_TAKE_FAILED:
            rpc_conn_reply_error(q->conn, q->id, SLUICE_ERR_TASK_FAILED, "%s", tk.msg);
            return true;
        default:
            rpc_conn_reply_error(q->conn, q->id, st, "task %" PRIu64 ": %s", wt->id,
                                 sluice_strerror(st));
            return true;
        }
    }
}

/* Serves every waiting read of a task with a cross-trainer cache that can be served now: each
 * trainer has its own cursor, so a trainer with elements in the cache is not held up by one
 * waiting at the tail. A trainer's reads are answered in queue order. */
static void serve_xtc_waiters(struct worker *w, struct wtask *wt)
{
    struct waiter **pp = &wt->wait_head, *prev = NULL;
    while (*pp) {
        struct waiter *q = *pp;
        if (rpc_conn_is_open(q->conn) &&
            (rpc_conn_pending_write(q->conn) >= WORKER_MAX_PENDING_BYTES || !serve_xtc(w, wt, q))) {
            prev = q;
            pp = &q->next;
            continue;
        }
        waiter_unlink(w, wt, pp, prev);
    }
}

/* Answers a read the way the task is read: reads in rounds only ever wait (see serve_rounds);
 * others are answered from the buffer, or from the cross-trainer cache. */
static bool serve_read(struct worker *w, struct wtask *wt, const struct waiter *q)
{
    if (wt->rounds.n > 0)
        return false;
    /* A reader that does not read its socket leaves its replies queued on the connection: its
     * next read waits (like one on an empty buffer) until they drain below the bound, so what
     * a task hands out for writing stays bounded too, also with elements of many MiB. */
    if (rpc_conn_pending_write(q->conn) >= WORKER_MAX_PENDING_BYTES)
        return false;
    if (wt->has_xtc)
        return serve_xtc(w, wt, q);
    return serve(w, wt, q->conn, q->id, q->client_id, q->max_elements, q->max_bytes, q->whole);
}

static uint64_t hb_soon(struct worker *w);

bool worker_ends_sent(const struct wtask *wt)
{
    for (size_t i = 0; i < wt->ndeliveries; i++)
        if (wt->deliveries[i].elements > 0 && !wt->deliveries[i].ended)
            return false;
    return true;
}

void worker_report_end(struct worker *w, struct wtask *wt)
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

void worker_tick_adjust(struct worker *w)
{
    uint64_t want = w->nwaiters ? WORKER_TICK_FAST_MS : WORKER_TICK_SLOW_MS;
    if (w->closing || want == w->tick_ms)
        return;
    w->tick_ms = want;
    uv_timer_start(&w->tick_timer, worker_on_tick, want, want);
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

void worker_serve_waiters(struct worker *w, struct wtask *wt)
{
    if (wt->rounds.n > 0) {
        serve_rounds(w, wt);
    } else if (wt->has_xtc) {
        serve_xtc_waiters(w, wt);
    } else {
        /* In queue order. A read that cannot be answered leaves the buffer empty for the ones
         * after it, unless it takes splits whole: then others may still have theirs. */
        struct waiter **pp = &wt->wait_head, *prev = NULL;
        while (*pp) {
            struct waiter *q = *pp;
            if (rpc_conn_is_open(q->conn) && !serve_read(w, wt, q)) {
                if (!q->whole)
                    break;
                prev = q;
                pp = &q->next;
                continue;
            }
            waiter_unlink(w, wt, pp, prev);
        }
    }
    task_set_waiting(wt->task, wt->nwait > 0);
}

void worker_expire_waiters(struct worker *w, struct wtask *wt, uint64_t now)
{
    /* Every wait has the same bound, so deadlines grow along the queue. */
    while (wt->wait_head && wt->wait_head->deadline_ms <= now) {
        struct waiter *q = wt->wait_head;
        if (rpc_conn_is_open(q->conn))
            reply_elements(w, q->conn, q->id, 0, false, NULL, 0);
        waiter_pop(w, wt);
    }
    task_set_waiting(wt->task, wt->nwait > 0);
}

void worker_drop_waiters(struct worker *w, struct wtask *wt, int code, const char *why)
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
    worker_hb_send(w);
    return w->hb_inflight ? w->hb_seq : w->hb_seq + 1;
}

/* A read of a task this worker does not know: typically the dispatcher has told the reader
 * about a task it assigned to this worker, and this worker will hear of it at its next
 * heartbeat. Rather than have the reader back off and retry, the read waits for the reply to a
 * heartbeat sent now, and is then served or told the task is unknown (unpark). Parked reads are
 * bounded by WORKER_POLL_MS like any wait. */
static void park(struct worker *w, struct rpc_conn *conn, uint64_t id, uint64_t task_id,
                 uint32_t max_elements, uint64_t max_bytes, uint32_t consumer, uint64_t round,
                 uint64_t client_id, bool whole, const uint8_t *key, size_t key_len,
                 const char *trainer)
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
    q->client_id = client_id;
    q->whole = whole;
    q->client_key_len = key_len <= CAP_KEY_LEN ? key_len : CAP_KEY_LEN + 1;
    if (key_len == CAP_KEY_LEN)
        memcpy(q->client_key, key, CAP_KEY_LEN);
    snprintf(q->trainer, sizeof q->trainer, "%s", trainer);
    q->deadline_ms = worker_now_ms() + WORKER_POLL_MS;
    if (w->parked_tail)
        w->parked_tail->next = q;
    else
        w->parked_head = q;
    w->parked_tail = q;
    w->nwaiters++;
    q->hb_need = hb_soon(w);
    worker_tick_adjust(w);
}

static void handle_read(struct worker *w, struct rpc_conn *conn, uint64_t id, uint64_t task_id,
                        uint32_t max_elements, uint64_t max_bytes, uint32_t consumer,
                        uint64_t round, uint64_t client_id, bool whole, const uint8_t *key,
                        size_t key_len, const char *trainer, bool may_park);

void worker_unpark(struct worker *w, uint64_t hb_done, bool force)
{
    struct waiter *ready = NULL, **ready_tail = &ready;
    struct waiter **pp = &w->parked_head;
    w->parked_tail = NULL;
    while (*pp) {
        struct waiter *q = *pp;
        if (force || q->hb_need <= hb_done || q->deadline_ms <= worker_now_ms()) {
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
                            q->consumer, q->round, q->client_id, q->whole, q->client_key,
                            q->client_key_len, q->trainer, false);
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
    if (req->align_values)
        rpc_conn_set_aligned(conn);
    /* Cut short past the limit, so that the cache refuses it (xtc_read) without copying more. */
    char trainer[XTC_TRAINER_ID_MAX + 2];
    snprintf(trainer, sizeof trainer, "%s", req->trainer_id ? req->trainer_id : "");
    handle_read(w, conn, id, req->task_id, max_elements, max_bytes, req->consumer_index, req->round,
                req->client_id, req->whole_splits, req->client_key.data, req->client_key.len,
                trainer, true);
}

static void handle_read(struct worker *w, struct rpc_conn *conn, uint64_t id, uint64_t task_id,
                        uint32_t max_elements, uint64_t max_bytes, uint32_t consumer,
                        uint64_t round, uint64_t client_id, bool whole, const uint8_t *key,
                        size_t key_len, const char *trainer, bool may_park)
{
    struct wtask *wt = worker_find_task(w, task_id);
    if (!wt) {
        /* Only while the dispatcher is reachable can a heartbeat bring the task. */
        if (may_park && rpc_client_connected(w->disp))
            park(w, conn, id, task_id, max_elements, max_bytes, consumer, round, client_id, whole,
                 key, key_len, trainer);
        else
            reply_not_found(conn, id, task_id);
        return;
    }
    /* Only the job's consumers are served: the capability the dispatcher gave the reader for
     * this task and its client id, derived from the secret this task came with. */
    if (wt->has_key && !cap_client_ok(wt->task_key, client_id, key, key_len)) {
        ratelimit_warn(&w->refusals, uv_now(w->loop), "", rpc_conn_peer_name(conn),
                       "refused elements of task %" PRIu64 ": client %" PRIu64
                       " presented a wrong client key",
                       wt->id, client_id);
        rpc_conn_reply_error(conn, id, SLUICE_ERR_DENIED,
                             "client %" PRIu64 " is not a consumer of job %" PRIu64, client_id,
                             wt->job_id);
        return;
    }
    /* A job's identity includes its cache, so its readers all send a trainer id or none. */
    if (wt->has_xtc && !trainer[0]) {
        rpc_conn_reply_error(conn, id, SLUICE_ERR_INVALID,
                             "task %" PRIu64 " is read with a cross-trainer cache: the request "
                             "needs a trainer id",
                             wt->id);
        return;
    }
    if (!wt->has_xtc && trainer[0]) {
        rpc_conn_reply_error(conn, id, SLUICE_ERR_INVALID,
                             "task %" PRIu64 " has no cross-trainer cache: the request carries a "
                             "trainer id",
                             wt->id);
        return;
    }
    struct waiter rd = {.conn = conn,
                        .id = id,
                        .max_elements = max_elements,
                        .max_bytes = max_bytes,
                        .consumer = consumer,
                        .round = round,
                        .client_id = client_id,
                        .whole = whole};
    snprintf(rd.trainer, sizeof rd.trainer, "%s", trainer);
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
    q->deadline_ms = worker_now_ms() + WORKER_POLL_MS;
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
    worker_serve_waiters(w, wt);
    worker_tick_adjust(w);
}

void worker_on_request(struct rpc_server *srv, struct rpc_conn *conn, const Sluice__Envelope *req,
                       void *user)
{
    struct worker *w = user;
    if (req->body_case != SLUICE__ENVELOPE__BODY_GET_ELEMENTS || !req->get_elements) {
        rpc_conn_reply_error(conn, req->id, SLUICE_ERR_UNSUPPORTED,
                             "a worker answers only GetElements requests");
        return;
    }
    wmetrics_request(w->wm, rpc_conn_is_local(conn));
    if (w->closing) {
        rpc_conn_reply_error(conn, req->id, SLUICE_ERR_UNAVAILABLE, "the worker is shutting down");
        return;
    }
    w->last_fetch_ms = worker_now_ms();
    handle_get_elements(w, conn, req->id, req->get_elements);
}

void worker_on_conn_close(struct rpc_server *srv, struct rpc_conn *conn, void *user)
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
        struct waiter **wpp = &wt->wait_head;
        struct waiter *prev = NULL;
        while (*wpp) {
            struct waiter *q = *wpp;
            if (q->conn != conn) {
                prev = q;
                wpp = &q->next;
                continue;
            }
            waiter_unlink(w, wt, wpp, prev);
        }
        task_set_waiting(wt->task, wt->nwait > 0);
        struct shm_region *region = rpc_conn_closed_region(conn);
        if (region && wt->arena == region) {
            task_set_arena(wt->task, NULL);
            wt->arena = NULL;
            task_evict_arena(wt->task, region);
        }
        /* Splits a deterministic reader on that connection owned may go to the others now: the
         * reads waiting for them are answered at once rather than at the owner's idle time. */
        if (task_conn_closed(wt->task, rpc_conn_serial(conn)) && wt->wait_head)
            worker_serve_waiters(w, wt);
    }
}
