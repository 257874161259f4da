/* The dispatcher's server shell: start, close, commit and the dispatch table. The RPC handlers
 * live in handlers_*.c by family and the timer in tick.c; server_internal.h is what they share.
 *
 * Happy path: a request arrives on the loop thread; its handler checks what needs no state
 * (lengths, enums, the --worker-addresses list), plans against the state (plan.h: pure, appends
 * updates to d->ups or refuses with a message), hands the updates to commit(), and replies from
 * the commit's callback while holding a reference on the connection. GetOrCreateJob for a new
 * distributed_epoch iteration first builds the split plan on the thread pool (file globs read
 * directories) and plans when that is done, against the state as it is then. In fault-tolerant
 * mode commit() also queues each update for the journal's group commit (journal_thread.h), and
 * the callback waits for that transaction; the state was rebuilt from the journal at start.
 *
 * Failure modes: a refused request gets an Error with the plan's code and message; a request
 * the dispatcher does not serve gets SLUICE_ERR_UNSUPPORTED; a reply that cannot be sent (the
 * connection went away) is dropped, the state change stands. An update that does not apply to
 * the state it was planned against is a bug or a damaged memory, and a journal that cannot
 * write (disk full, map at its ceiling, I/O error) cannot keep what it acknowledges: either way
 * the dispatcher refuses every later commit and reports through on_fatal.
 *
 * Soft state (not journaled, rebuilt from nothing after a restart): when each worker and client
 * was last heard from, since when each iteration has had no clients, and each dataset's decoded
 * DatasetDef for building TaskDefs. An id the state knows but the soft state does not (right
 * after a start) counts from the first timer tick that sees it, so nothing is evicted for
 * silence it had no chance to break. */

#include "server_internal.h"
#include "replica.h"
#include "common/fnv.h"
#include "common/rpc_metrics.h"
#include "pipeline/objstore.h"

#include <jansson.h>

/* ---- small helpers --------------------------------------------------------------------------- */

/* How long a task may sit settled with leases before they are leased again: a client reports a
 * split within ITER_ACK_MS of receiving its end, or at its next heartbeat, and a worker reports
 * a task settled at its heartbeat; three of the longer interval, plus a second for a loaded
 * machine, keep a healthy consumer from ever being overtaken. */
uint32_t dispatcher_reissue_grace_ms(const struct dispatcher *d)
{
    uint32_t hb = d->client_hb_ms > d->worker_hb_ms ? d->client_hb_ms : d->worker_hb_ms;
    return 3 * hb + 1000;
}

bool dispatcher_consumers_heard_since(struct dispatcher *d, uint64_t iteration_id, uint64_t since)
{
    for (size_t i = 0; i < d->st.nclients; i++) {
        const struct st_client *c = &d->st.clients[i];
        if (c->iteration_id != iteration_id)
            continue;
        const struct soft *seen = dispatcher_soft_find(&d->client_seen_before, c->id, NULL);
        if (!seen || seen->t < since)
            return false;
    }
    return true;
}

bool dispatcher_coverage_settling(const struct dispatcher *d)
{
    return uv_now(d->loop) - d->started_ms <= dispatcher_reissue_grace_ms(d);
}

struct soft *dispatcher_soft_find(struct soft_table *t, uint64_t id, size_t *pos)
{
    size_t lo = rows_lower(t->v, t->n, sizeof *t->v, offsetof(struct soft, id), id);
    if (pos)
        *pos = lo;
    return lo < t->n && t->v[lo].id == id ? &t->v[lo] : NULL;
}

/* Soft state is an optimisation of eviction, so running out of memory here only means an entry
 * is missing, which the next tick treats as "heard from now". */
void dispatcher_soft_set(struct soft_table *t, uint64_t id, uint64_t when)
{
    size_t pos;
    struct soft *e = dispatcher_soft_find(t, id, &pos);
    if (!e)
        e = rows_insert_at((void **)&t->v, &t->n, &t->cap, sizeof *t->v, pos);
    if (e)
        *e = (struct soft){id, when};
}

void dispatcher_soft_del(struct soft_table *t, uint64_t id)
{
    size_t pos;
    if (dispatcher_soft_find(t, id, &pos)) {
        memmove(&t->v[pos], &t->v[pos + 1], (t->n - pos - 1) * sizeof *t->v);
        t->n--;
    }
}

/* id was heard over conn now (dispatcher_client_heard, dispatcher_worker_heard). */
static void peer_heard(struct dispatcher *d, struct soft_table *conns, struct soft_table *gone,
                       uint64_t id, const struct rpc_conn *conn)
{
    if (!rpc_conn_is_open(conn)) {
        /* It closed while the request was planned or committed: on_conn_closed has run. */
        dispatcher_soft_del(conns, id);
        if (!dispatcher_soft_find(gone, id, NULL))
            dispatcher_soft_set(gone, id, uv_now(d->loop));
        return;
    }
    dispatcher_soft_set(conns, id, rpc_conn_serial(conn));
    dispatcher_soft_del(gone, id);
}

void dispatcher_client_heard(struct dispatcher *d, uint64_t id, const struct rpc_conn *conn)
{
    if (d->client_grace_ms != UINT32_MAX)
        peer_heard(d, &d->client_conn, &d->client_gone, id, conn);
}

void dispatcher_worker_heard(struct dispatcher *d, uint64_t id, const struct rpc_conn *conn)
{
    if (d->worker_grace_ms != UINT32_MAX)
        peer_heard(d, &d->worker_conn, &d->worker_gone, id, conn);
}

static void fatal(struct dispatcher *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fatal(struct dispatcher *d, const char *fmt, ...)
{
    char msg[SLUICE_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (d->fatal)
        return;
    d->fatal = true;
    /* The owner reports it (one line on stderr) and stops; without one, the log does. */
    if (d->on_fatal)
        d->on_fatal(d->user, msg);
    else
        log_error("%s", msg);
}

/* A one-line record of the changes an operator cares about: writes it into buf and returns its
 * log level, or -1 when the update is not worth a line. */
static int describe_update(const struct st_update *u, char *buf, size_t len)
{
    switch (u->type) {
    case ST_DATASET_REGISTERED:
        snprintf(buf, len, "dataset '%s' registered: %s", u->name, u->text ? u->text : "");
        return LOG_INFO;
    case ST_JOB_CREATED:
        snprintf(buf, len, "job %" PRIu64 "%s%s%s created on dataset '%s', mode %s", u->id,
                 u->name[0] ? " '" : "", u->name, u->name[0] ? "'" : "", u->name2,
                 mode_name((enum sluice_mode)u->mode));
        return LOG_INFO;
    case ST_WORKER_REGISTERED:
        snprintf(buf, len, "worker %" PRIu64 " registered at %s (incarnation %016" PRIx64 ")",
                 u->id, u->address, u->incarnation);
        return LOG_INFO;
    case ST_WORKER_REMOVED:
        snprintf(buf, len, "worker %" PRIu64 " removed", u->id);
        return LOG_INFO;
    case ST_WORKER_DRAINING:
        snprintf(buf, len, "worker %" PRIu64 " is draining", u->id);
        return LOG_INFO;
    case ST_SPLITS_RETURNED:
        snprintf(buf, len, "%zu splits of iteration %" PRIu64 " returned to the pool", u->seqs.n,
                 u->ref);
        return LOG_INFO;
    case ST_ITERATION_FINISHED:
        snprintf(buf, len, "iteration %" PRIu64 " finished", u->id);
        return LOG_INFO;
    case ST_ITERATION_GC:
        snprintf(buf, len, "iteration %" PRIu64 " garbage-collected", u->id);
        return LOG_INFO;
    case ST_ITERATION_FAILED:
        snprintf(buf, len, "iteration %" PRIu64 " failed: %s", u->id, u->text ? u->text : "");
        return LOG_WARN;
    case ST_SAVE_STARTED:
        snprintf(buf, len,
                 "save %" PRIu64 " of dataset '%s' into %s started (iteration %" PRIu64 ")", u->id,
                 u->name, u->text ? u->text : "", u->ref2);
        return LOG_INFO;
    case ST_SAVE_FINISHED:
        snprintf(buf, len, "save %" PRIu64 " finished", u->id);
        return LOG_INFO;
    case ST_SAVE_FAILED:
        snprintf(buf, len, "save %" PRIu64 " failed: %s", u->id, u->text ? u->text : "");
        return LOG_WARN;
    case ST_MIX_WEIGHTS:
        if (!u->nweights) {
            snprintf(buf, len, "job '%s' of mix '%s': horizon %" PRIu64, u->name, u->name2,
                     u->start);
            return LOG_DEBUG;
        }
        snprintf(buf, len, "job '%s' of mix '%s': %zu weights from position %" PRIu64, u->name,
                 u->name2, u->nweights, u->ref);
        return LOG_INFO;
    case ST_JOB_POSITION:
        snprintf(buf, len,
                 "job '%s': consumer %" PRIu64 " kept its position at step %" PRIu64
                 " (%zu bytes, iteration %" PRIu64 ")",
                 u->name, u->id, u->start, u->def_len, u->ref);
        return LOG_DEBUG;
    case ST_ROUNDS_SCHEDULED: {
        char tasks[256];
        size_t n = 0;
        tasks[0] = '\0';
        for (size_t i = 0; i < u->seqs.n && n < sizeof tasks - 32; i++)
            n += (size_t)snprintf(tasks + n, sizeof tasks - n, "%s%" PRIu64, i ? ", " : "",
                                  u->seqs.v[i]);
        snprintf(buf, len,
                 "iteration %" PRIu64 ": from round %" PRIu64 " rounds go to task%s %s in turn",
                 u->ref, u->ref2, u->seqs.n == 1 ? "" : "s", u->seqs.n ? tasks : "(none)");
        return LOG_INFO;
    }
    default:
        if (!log_enabled(LOG_DEBUG))
            return -1;
        snprintf(buf, len, "%s id=%" PRIu64 " ref=%" PRIu64 " ref2=%" PRIu64,
                 st_update_name(u->type), u->id, u->ref, u->ref2);
        return LOG_DEBUG;
    }
}

/* The lines of one commit, written to the log only once its updates are durable ("dataset 'x'
 * registered" must never appear for a change a full disk then refused). Each line is its level
 * (one byte) and its text, NUL-terminated. */
struct log_lines {
    char *buf;
    size_t len, cap;
};

static void log_lines_add(struct log_lines *l, const struct st_update *u)
{
    char line[1024];
    int level = describe_update(u, line, sizeof line);
    if (level < 0 || !log_enabled((enum log_level)level))
        return;
    size_t n = strlen(line) + 2;
    if (l->len + n > l->cap) {
        size_t cap = l->cap ? l->cap : 256;
        while (cap < l->len + n)
            cap *= 2;
        char *grown = realloc(l->buf, cap);
        if (!grown)
            return; /* a line lost to a lack of memory, not a change */
        l->buf = grown;
        l->cap = cap;
    }
    l->buf[l->len] = (char)level;
    memcpy(l->buf + l->len + 1, line, n - 1);
    l->len += n;
}

/* Writes the lines (when ok) and frees them. */
static void log_lines_flush(struct log_lines *l, bool ok)
{
    for (size_t i = 0; ok && i < l->len; i += strlen(l->buf + i + 1) + 2)
        log_write((enum log_level)l->buf[i], "%s", l->buf + i + 1);
    free(l->buf);
    *l = (struct log_lines){0};
}

/* ---- commit ---------------------------------------------------------------------------------- */

/* Carries out the updates in ups (consumed: the list is left empty) and calls cb(d, status,
 * ctx) once they are durable; status is 0, or negative when they could not be carried out (the
 * dispatcher is then failed and refuses every later commit).
 *
 * The updates are applied to the in-memory state before commit() returns, so the next request
 * plans against them. Without a journal cb runs before commit() returns. With the journal
 * (fault-tolerant mode) each update is serialized and queued for the group commit as it is
 * applied, and cb runs after the transaction holding the last of them commits, in commit order,
 * also for an empty list (a read-only request then waits for the changes before it), so no reply
 * can reveal a change that a crash could still lose. A reply therefore takes what the request
 * itself decided (ids, leased splits) from its planning, and only descriptions from the state
 * as it is in cb. A journal that fails stops the dispatcher (fatal), so a change applied here
 * but never written is never acknowledged, nor logged: the log line of a change (describe_update)
 * is written with its callback, once it is durable. */
struct durable_wait {
    struct dispatcher *d;
    commit_cb cb;
    void *ctx;
    struct log_lines lines;
};

static void on_durable(void *ctx, int status)
{
    struct durable_wait *w = ctx;
    struct dispatcher *d = w->d;
    commit_cb cb = w->cb;
    void *cb_ctx = w->ctx;
    log_lines_flush(&w->lines, status == 0);
    free(w);
    cb(d, status, cb_ctx);
}

/* Serializes u and queues it for the group commit. */
static int journal_update(struct dispatcher *d, const struct st_update *u)
{
    uint8_t *bytes;
    size_t len;
    int rc = update_codec_encode(u, &bytes, &len);
    d->since_snapshot_bytes += len;
    if (rc == 0)
        rc =
            journal_thread_add(d->jt, bytes, len, u->type == ST_DATASET_REGISTERED ? u->name : NULL,
                               u->def, u->def_len);
    if (rc < 0)
        fatal(d, "journal: %s: queueing %s %" PRIu64 ": %s", d->work_dir, st_update_name(u->type),
              u->id, sluice_strerror(rc));
    return rc;
}

/* A snapshot on its way to the journal: taken on the loop (a copy of the state), packed on the
 * thread pool, then queued to cover the records journaled up to its take. */
struct snapshot_work {
    uv_work_t req;
    struct dispatcher *d;
    struct update_codec_snapshot *copy;
    uint64_t seq;      /* the last record the state at the take had queued */
    uint64_t taken_ns; /* uv_hrtime() at the take */
    uint64_t take_ns;  /* how long the take held the loop */
    uint8_t *bytes;
    size_t len;
    int rc;
};

static void snapshot_pack(uv_work_t *req)
{
    struct snapshot_work *w = req->data;
    w->rc = update_codec_snapshot_pack(w->copy, &w->bytes, &w->len);
}

static void snapshot_packed(uv_work_t *req, int status)
{
    struct snapshot_work *w = req->data;
    struct dispatcher *d = w->d;
    d->snap_work = NULL;
    int rc = status < 0 ? status : w->rc;
    if (d->closing || !d->jt) {
        /* Not needed: a restart replays the records it would have covered. */
        free(w->bytes);
    } else if (rc < 0) {
        free(w->bytes);
        fatal(d, "journal: %s: packing a snapshot: %s", d->work_dir, sluice_strerror(rc));
    } else {
        rc = journal_thread_snapshot_at(d->jt, w->bytes, w->len, w->seq);
        if (rc < 0)
            fatal(d, "journal: %s: queueing a snapshot: %s", d->work_dir, sluice_strerror(rc));
        else
            log_debug("snapshot of %zu bytes at record %" PRIu64 ": %.1f ms on the loop, packed in "
                      "%.1f ms",
                      w->len, w->seq, (double)w->take_ns / 1e6,
                      (double)(uv_hrtime() - w->taken_ns) / 1e6);
        d->snapshot_bytes = w->len;
    }
    /* Its memory is kept for the next copy (snap_spare). */
    update_codec_snapshot_free(w->copy, &d->snap_spare);
    free(w);
    dispatcher_maybe_finish_close(d);
}

/* Every snapshot_every updates the whole state goes to the journal, which then drops the records
 * before it: a restart replays at most that many updates, whatever the history. By default (no
 * --snapshot-every) also not before the records since the last snapshot are SNAPSHOT_GROWTH times
 * its size, so a restart replays records bounded by the size of the state. The loop only copies
 * the state; the packing runs on the thread pool, and the journal thread deletes the records it
 * covers a bounded number per transaction (journal.h), so no reply waits for either. */
static int maybe_snapshot(struct dispatcher *d, size_t n)
{
    d->since_snapshot += n;
    if (d->since_snapshot < d->snapshot_every || d->snap_work)
        return 0;
    if (d->snapshot_by_size && d->since_snapshot_bytes / SNAPSHOT_GROWTH < d->snapshot_bytes)
        return 0;
    struct snapshot_work *w = calloc(1, sizeof *w);
    int rc = w ? 0 : SLUICE_ERR_NOMEM;
    uint64_t t0 = uv_hrtime();
    if (rc == 0)
        rc = update_codec_snapshot_take(&d->st, &d->snap_spare, &w->copy);
    if (rc == 0) {
        w->d = d;
        w->req.data = w;
        w->seq = journal_thread_next_seq(d->jt) - 1;
        w->taken_ns = uv_hrtime();
        w->take_ns = w->taken_ns - t0;
        rc = uv_queue_work(d->loop, &w->req, snapshot_pack, snapshot_packed);
    }
    if (rc < 0) {
        if (w)
            update_codec_snapshot_free(w->copy, &d->snap_spare);
        free(w);
        fatal(d, "journal: %s: taking a snapshot: %s", d->work_dir, sluice_strerror(rc));
        return rc;
    }
    d->snap_work = w;
    log_debug("snapshot taken after %" PRIu64 " updates (%" PRIu64 " bytes)", d->since_snapshot,
              d->since_snapshot_bytes);
    d->since_snapshot = 0;
    d->since_snapshot_bytes = 0;
    return 0;
}

void dispatcher_commit(struct dispatcher *d, struct st_update_list *ups, commit_cb cb, void *ctx)
{
    dispatcher_commit_applied(d, ups, NULL, cb, ctx);
}

void dispatcher_commit_applied(struct dispatcher *d, struct st_update_list *ups,
                               void (*applied)(struct dispatcher *d, void *ctx), commit_cb cb,
                               void *ctx)
{
    if (d->replica && (!replica_serving(d->replica) || !d->jt)) {
        /* A replica that does not lead changes nothing: work that finishes after it stopped
         * leading (a split plan, a save) is refused like a request would be. */
        st_update_list_clear(ups);
        cb(d, SLUICE_ERR_UNAVAILABLE, ctx);
        return;
    }
    int rc = d->fatal ? SLUICE_ERR_CLOSED : 0;
    struct log_lines lines = {0};
    bool saves_due = false;
    for (size_t i = 0; rc == 0 && i < ups->n; i++) {
        uint64_t touched = d->jt ? st_update_worker(&d->st, &ups->v[i]) : 0;
        rc = state_apply(&d->st, &ups->v[i]);
        if (rc == 0) {
            observe_applied(d->obs, &ups->v[i]);
            hedge_applied(&d->hedge, &ups->v[i], dispatcher_clock_ms());
            log_lines_add(&lines, &ups->v[i]);
            /* A save's iteration that finished or failed is finished off at once, not at the
             * next tick (the work queued never commits before this commit). */
            enum st_update_type t = ups->v[i].type;
            if ((t == ST_ITERATION_FINISHED || t == ST_ITERATION_FAILED) &&
                state_save_running(&d->st, ups->v[i].id))
                saves_due = true;
        }
        if (rc < 0)
            fatal(d, "state: applying %s %" PRIu64 ": %s", st_update_name(ups->v[i].type),
                  ups->v[i].id, sluice_strerror(rc));
        else if (d->jt)
            rc = journal_update(d, &ups->v[i]);
        if (rc == 0 && touched) {
            uint64_t seq = journal_thread_next_seq(d->jt) - 1;
            dispatcher_soft_set(&d->worker_touched, touched, seq);
            if (!dispatcher_soft_find(&d->worker_touched, touched, NULL))
                d->touched_all = seq;
        }
    }
    if (rc == 0 && d->jt && ups->n > 0)
        rc = maybe_snapshot(d, ups->n);
    st_update_list_clear(ups);
    if (applied && rc == 0)
        applied(d, ctx);
    if (saves_due && rc == 0)
        dispatcher_saves_tick(d);
    if (!d->jt || rc < 0) {
        /* In memory only, a change is as durable as it gets once applied. */
        log_lines_flush(&lines, !d->jt && rc == 0);
        cb(d, rc, ctx);
        return;
    }
    struct durable_wait *w = malloc(sizeof *w);
    if (w) {
        *w = (struct durable_wait){d, cb, ctx, lines};
        if (journal_thread_wait(d->jt, on_durable, w) == 0)
            return;
        free(w);
    }
    log_lines_flush(&lines, false);
    fatal(d, "journal: %s: waiting for a commit: out of memory", d->work_dir);
    cb(d, SLUICE_ERR_NOMEM, ctx);
}

void dispatcher_commit_worker(struct dispatcher *d, struct st_update_list *ups, uint64_t worker_id,
                              void (*applied)(struct dispatcher *d, void *ctx), commit_cb cb,
                              void *ctx)
{
    if (ups->n == 0 && d->jt && !d->fatal && !journal_thread_failed(d->jt)) {
        size_t pos;
        struct soft *t = dispatcher_soft_find(&d->worker_touched, worker_id, &pos);
        uint64_t durable = journal_thread_durable_seq(d->jt);
        if (d->touched_all > durable)
            goto wait;
        if (t && t->t <= durable) {
            dispatcher_soft_del(&d->worker_touched, worker_id);
            t = NULL;
        }
        if (!t) {
            applied(d, ctx);
            cb(d, 0, ctx);
            return;
        }
    }
wait:
    dispatcher_commit_applied(d, ups, applied, cb, ctx);
}

/* ---- requests and replies -------------------------------------------------------------------- */

void dispatcher_req_init(struct req *r, struct dispatcher *d, struct rpc_conn *conn, uint64_t id)
{
    r->d = d;
    r->conn = conn;
    r->id = id;
    rpc_conn_ref(conn);
}

void dispatcher_req_done(struct req *r)
{
    rpc_conn_unref(r->conn);
}

void dispatcher_refuse(struct rpc_conn *conn, uint64_t id, int code, const char *msg)
{
    log_debug("refused a request from %s: %s", rpc_conn_peer_name(conn), msg);
    rpc_conn_reply_error(conn, id, code, "%s", msg);
}

/* The error a failed commit answers with. */
void dispatcher_refuse_commit(struct req *r, int status)
{
    dispatcher_refuse(r->conn, r->id, status == SLUICE_ERR_CLOSED ? SLUICE_ERR_UNAVAILABLE : status,
                      "the dispatcher cannot record changes: it has failed");
}

void dispatcher_send_reply(struct req *r, Sluice__Envelope *env)
{
    int rc = rpc_conn_reply(r->conn, r->id, env);
    if (rc < 0 && rc != SLUICE_ERR_CLOSED) {
        log_warn("reply to %s: %s", rpc_conn_peer_name(r->conn), sluice_strerror(rc));
        rpc_conn_reply_error(r->conn, r->id, rc, "reply: %s", sluice_strerror(rc));
    }
}

const Sluice__DatasetDef *dispatcher_dataset_def(struct dispatcher *d, const struct st_dataset *ds)
{
    for (size_t i = 0; i < d->ndefs; i++) {
        if (strcmp(d->defs[i].id, ds->id) == 0)
            return d->defs[i].def;
    }
    if (d->ndefs == d->cap_defs) {
        size_t cap = d->cap_defs ? d->cap_defs * 2 : 8;
        struct def_cache_entry *v = realloc(d->defs, cap * sizeof *v);
        if (!v)
            return NULL;
        d->defs = v;
        d->cap_defs = cap;
    }
    Sluice__DatasetDef *def = sluice__dataset_def__unpack(NULL, ds->def_len, ds->def);
    if (!def)
        return NULL;
    struct def_cache_entry *e = &d->defs[d->ndefs++];
    memcpy(e->id, ds->id, strlen(ds->id) + 1);
    e->def = def;
    return def;
}

/* ---- Status ---------------------------------------------------------------------------------- */

/* A status request: the whole document, or one dataset's (dataset_id non-empty). */
struct status_req {
    struct req r; /* first member */
    char dataset_id[ST_ID_MAX];
    /* The whole document: its tree, built on the loop, written out on the pool. */
    uv_work_t work;
    struct json_t *tree;
    char *json;
    int rc;
};

/* At most this many status documents are written out on the pool at once; past it (a flood of
 * status requests) each is written on the loop as before, so the trees held stay bounded. */
#define STATUS_POOL_WORKS 2

/* Replies to r with the status document json. */
static void send_status(struct req *r, char *json)
{
    Sluice__StatusReply body = SLUICE__STATUS_REPLY__INIT;
    body.json = json;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_STATUS_REPLY;
    env.status_reply = &body;
    dispatcher_send_reply(r, &env);
}

/* On the pool: writes the tree out (and frees it). */
static void status_write(uv_work_t *w)
{
    struct status_req *sr = w->data;
    sr->rc = status_json_dump(sr->tree, &sr->json);
    sr->tree = NULL;
}

/* Replies with the written document, or the error that stopped it. */
static void status_answer(struct status_req *sr)
{
    if (sr->rc < 0 || !sr->json)
        dispatcher_refuse(sr->r.conn, sr->r.id, SLUICE_ERR_NOMEM, "out of memory");
    else
        send_status(&sr->r, sr->json);
    free(sr->json);
    sr->json = NULL;
}

static void status_written(uv_work_t *w, int status)
{
    struct status_req *sr = w->data;
    struct dispatcher *d = sr->r.d;
    d->status_works--;
    if (status < 0) {
        /* Cancelled before it ran: the tree is still ours. */
        json_decref(sr->tree);
        sr->rc = SLUICE_ERR_CANCELLED;
    }
    status_answer(sr);
    dispatcher_req_done(&sr->r);
    free(sr);
    dispatcher_maybe_finish_close(d);
}

static void status_done(struct dispatcher *d, int status, void *ctx)
{
    struct req *r = ctx;
    const char *dataset_id = ((struct status_req *)ctx)->dataset_id;
    char *json = NULL;
    int rc;
    if (status >= 0 && dataset_id[0]) {
        rc = status_dataset_json(&d->st, dataset_id, &json);
        if (rc == SLUICE_ERR_NOT_FOUND) {
            char msg[ST_ID_MAX + 64];
            snprintf(msg, sizeof msg, "dataset '%s' not found", dataset_id);
            dispatcher_refuse(r->conn, r->id, rc, msg);
        } else if (rc < 0) {
            dispatcher_refuse(r->conn, r->id, SLUICE_ERR_NOMEM, "out of memory");
        } else {
            send_status(r, json);
        }
        free(json);
        dispatcher_req_done(r);
        free(r);
        return;
    }
    struct status_req *sr = ctx;
    if (status >= 0 && d->status_works < STATUS_POOL_WORKS && !d->closing) {
        /* The tree is built where the state is; writing it out (most of the time at thousands
         * of workers) goes to the pool, so the loop serves heartbeats meanwhile. */
        if (dispatcher_status_tree(d, &sr->tree) < 0) {
            dispatcher_refuse(r->conn, r->id, SLUICE_ERR_NOMEM, "out of memory");
        } else {
            sr->work.data = sr;
            if (uv_queue_work(d->loop, &sr->work, status_write, status_written) == 0) {
                d->status_works++;
                return;
            }
            status_write(&sr->work);
            status_answer(sr);
        }
        dispatcher_req_done(r);
        free(r);
        return;
    }
    if (status < 0)
        dispatcher_refuse_commit(r, status);
    else if (dispatcher_status_render(d, &json) < 0)
        dispatcher_refuse(r->conn, r->id, SLUICE_ERR_NOMEM, "out of memory");
    else
        send_status(r, json);
    free(json);
    dispatcher_req_done(r);
    free(r);
}

/* The shell's additions to the status document (status_extra) at now; *seen is the heartbeat
 * ages x points to, for the caller to free. */
static int status_extra_fill(struct dispatcher *d, uint64_t now, struct status_extra *x,
                             struct status_worker_seen **seen)
{
    observe_status(d->obs, &d->st, x);
    /* The heartbeat ages, from the soft table (sorted by worker id, as status wants). */
    *seen = malloc((d->worker_seen.n ? d->worker_seen.n : 1) * sizeof **seen);
    if (!*seen)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < d->worker_seen.n; i++) {
        uint64_t t = d->worker_seen.v[i].t;
        (*seen)[i] = (struct status_worker_seen){d->worker_seen.v[i].id, now > t ? now - t : 0};
    }
    x->seen = *seen;
    x->nseen = d->worker_seen.n;
    x->raft = NULL;
    x->hedge = &d->hedge;
    if (d->replica) {
        replica_view(d->replica, &d->raft_view);
        x->raft = &d->raft_view;
    }
    return observe_figures(d->obs, &d->st, now, x);
}

int dispatcher_status_tree(struct dispatcher *d, struct json_t **out)
{
    struct status_extra extra;
    struct status_worker_seen *seen = NULL;
    int rc = status_extra_fill(d, uv_now(d->loop), &extra, &seen);
    if (rc == 0)
        rc = status_json_tree(&d->st, &extra, out);
    free(seen);
    return rc < 0 ? SLUICE_ERR_NOMEM : 0;
}

int dispatcher_status_render(struct dispatcher *d, char **out)
{
    struct status_extra extra;
    struct status_worker_seen *seen = NULL;
    int rc = status_extra_fill(d, uv_now(d->loop), &extra, &seen);
    if (rc == 0)
        rc = status_json_extra(&d->st, &extra, out);
    free(seen);
    return rc < 0 ? SLUICE_ERR_NOMEM : 0;
}

void dispatcher_history_sample(struct dispatcher *d)
{
    uint64_t now = uv_now(d->loop);
    if (!d->history || !history_due(d->history, now))
        return;
    struct history_served served;
    observe_served(d->obs, &d->st, &served);
    history_take(d->history, &d->st, &served, now);
}

int dispatcher_history_render(struct dispatcher *d, char **out)
{
    if (!d->history)
        return SLUICE_ERR_NOMEM;
    return history_json(d->history, uv_now(d->loop), out);
}

static void on_status(struct dispatcher *d, struct rpc_conn *conn, const Sluice__Envelope *env)
{
    const char *dataset_id = env->status && env->status->dataset_id ? env->status->dataset_id : "";
    if (strlen(dataset_id) >= ST_ID_MAX) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, "dataset id too long");
        return;
    }
    struct status_req *sr = calloc(1, sizeof *sr);
    if (!sr) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    strcpy(sr->dataset_id, dataset_id);
    struct req *r = &sr->r;
    dispatcher_req_init(r, d, conn, env->id);
    /* A replica that does not serve reports its own view at once: its state is what it
     * applied of the committed log. */
    if (d->replica && !dispatcher_serving(d)) {
        status_done(d, 0, r);
        return;
    }
    dispatcher_commit(d, &d->ups, status_done, r);
}

/* ---- dispatching requests -------------------------------------------------------------------- */

/* Every peer of conns whose connection was serial is gone from now. */
static void mark_gone(struct soft_table *conns, struct soft_table *gone, uint64_t serial,
                      uint64_t now)
{
    for (size_t i = 0; i < conns->n;) {
        if (conns->v[i].t != serial) {
            i++;
            continue;
        }
        dispatcher_soft_set(gone, conns->v[i].id, now);
        dispatcher_soft_del(conns, conns->v[i].id);
    }
}

/* A connection closed: the clients and workers whose last heartbeat came over it are gone from
 * now, unless they heartbeat again (over a new connection) within the grace (tick.c). */
static void on_conn_closed(struct rpc_server *srv, struct rpc_conn *conn, void *user)
{
    (void)srv;
    struct dispatcher *d = user;
    if (d->closing)
        return;
    uint64_t serial = rpc_conn_serial(conn), now = uv_now(d->loop);
    mark_gone(&d->client_conn, &d->client_gone, serial, now);
    mark_gone(&d->worker_conn, &d->worker_gone, serial, now);
}

/* sluice_request_seconds: the calls that make up the control plane's load, and the rest. */
static void on_answered(void *user, int body_case, double seconds)
{
    struct dispatcher *d = user;
    enum observe_call call = OBSERVE_CALL_OTHER;
    if (body_case == SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT)
        call = OBSERVE_CALL_WORKER_HEARTBEAT;
    else if (body_case == SLUICE__ENVELOPE__BODY_GET_SPLITS ||
             body_case == SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH)
        call = OBSERVE_CALL_GET_SPLITS;
    else if (body_case == SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT)
        call = OBSERVE_CALL_CLIENT_HEARTBEAT;
    observe_request(d->obs, call, seconds);
}

/* A replica that does not serve: the caller goes to the leader (or the next address). */
static void reply_not_leader(struct dispatcher *d, struct rpc_conn *conn, uint64_t id)
{
    const char *leader = replica_leader_rpc(d->replica);
    if (leader[0])
        rpc_conn_reply_not_leader(conn, id, leader, "not the leader: the leader is %s", leader);
    else
        rpc_conn_reply_not_leader(conn, id, "",
                                  "not the leader: no leader is known (an election is under way)");
}

static void on_request(struct rpc_server *srv, struct rpc_conn *conn, const Sluice__Envelope *env,
                       void *user)
{
    struct dispatcher *d = user;
    if (d->closing)
        return;
    if (d->replica && !replica_serving(d->replica) &&
        env->body_case != SLUICE__ENVELOPE__BODY_STATUS) {
        reply_not_leader(d, conn, env->id);
        return;
    }
    switch (env->body_case) {
    case SLUICE__ENVELOPE__BODY_REGISTER_DATASET:
        dispatcher_on_register_dataset(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_DATASET:
        dispatcher_on_get_dataset(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB:
        dispatcher_on_get_or_create_job(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT:
        dispatcher_on_client_heartbeat(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_RELEASE_CLIENT:
        dispatcher_on_release_client(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT:
        dispatcher_on_worker_heartbeat(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_SPLITS:
        dispatcher_on_get_splits(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH:
        dispatcher_on_get_splits_batch(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_STATUS:
        on_status(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_SAVE_SNAPSHOT:
        dispatcher_on_save_snapshot(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_SNAPSHOT_STATUS:
        dispatcher_on_snapshot_status(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_SET_MIX_WEIGHTS:
        dispatcher_on_set_mix_weights(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_MIX_SCHEDULE:
        dispatcher_on_get_mix_schedule(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_REPORT_POSITION:
        dispatcher_on_report_position(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_JOB_POSITION:
        dispatcher_on_get_job_position(d, conn, env);
        break;
    default: {
        char msg[SLUICE_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "the dispatcher does not serve message %d", (int)env->body_case);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_UNSUPPORTED, msg);
        break;
    }
    }
    /* Every handler leaves the scratch list empty: planned updates went to commit(). */
    if (d->ups.n > 0) {
        st_update_list_clear(&d->ups);
        fatal(d, "state: a handler left planned updates uncommitted");
    }
    if (d->jt && !d->closing && !d->fatal)
        journal_thread_poll(d->jt);
}

/* ---- start and close ------------------------------------------------------------------------- */

static void dispatcher_free(struct dispatcher *d)
{
    journal_close(d->journal);
    free(d->work_dir);
    state_release(&d->st);
    update_codec_spare_release(&d->snap_spare);
    st_update_list_release(&d->ups);
    free(d->worker_seen.v);
    owners_free(&d->owners);
    free(d->worker_touched.v);
    free(d->client_seen.v);
    free(d->client_seen_before.v);
    free(d->client_conn.v);
    free(d->client_gone.v);
    free(d->worker_conn.v);
    free(d->worker_gone.v);
    free(d->idle_since.v);
    free(d->rep_waiters);
    free(d->settled_since.v);
    relet_release(&d->relet);
    hedge_release(&d->hedge);
    free(d->leased_at.v);
    free(d->client_reported.v);
    free(d->lease_below.v);
    coverage_release(&d->cov);
    capcache_release(&d->caps);
    observe_destroy(d->obs);
    free(d->history);
    for (size_t i = 0; i < d->ndefs; i++)
        sluice__dataset_def__free_unpacked(d->defs[i].def, NULL);
    free(d->defs);
    for (size_t i = 0; i < d->nworker_addresses; i++)
        free(d->worker_addresses[i]);
    free(d->worker_addresses);
    pipe_roots_release(&d->roots);
    free(d);
}

static void on_journal_fail(void *user, int code, const char *msg)
{
    struct dispatcher *d = user;
    (void)code;
    fatal(d, "journal: %s: %s", d->work_dir, msg);
}

/* ---- a Raft replica's dispatcher (replica.h) ------------------------------------------------- */

static void on_journal_commit(void *user, double seconds, size_t records, uint64_t bytes);

/* A replica's journal thread failed: expected once it stopped leading (its batches are refused);
 * a failure while it still serves means it can no longer commit. */
static void on_replica_journal_fail(void *user, int code, const char *msg)
{
    struct dispatcher *d = user;
    (void)code;
    if (d->replica && replica_serving(d->replica))
        fatal(d, "raft: %s: %s", d->work_dir, msg);
    else
        log_debug("raft: commits refused after leading: %s", msg);
}

static void soft_clear(struct soft_table *t)
{
    t->n = 0;
}

/* The replica's calls (replica_opts). serve: it leads and its log holds every earlier entry: a
 * journal thread with the replica's sink starts, the soft state starts afresh (as after a
 * restart) and requests are served. unserve: it stopped leading: the journal thread is closed
 * (what waits on it fails), and nothing is served. */
static void replica_serve(void *user)
{
    struct dispatcher *d = user;
    /* As after a restart: every worker and client gets a fresh timeout, coverage and the
     * re-issue grace start again. */
    soft_clear(&d->worker_seen);
    soft_clear(&d->client_seen);
    soft_clear(&d->client_seen_before);
    soft_clear(&d->client_conn);
    soft_clear(&d->client_gone);
    soft_clear(&d->worker_conn);
    soft_clear(&d->worker_gone);
    soft_clear(&d->idle_since);
    soft_clear(&d->settled_since);
    soft_clear(&d->leased_at);
    soft_clear(&d->lease_below);
    soft_clear(&d->client_reported);
    soft_clear(&d->worker_touched);
    d->touched_all = 0;
    d->nrep_waiters = 0;
    relet_release(&d->relet);
    memset(&d->relet, 0, sizeof d->relet);
    hedge_release(&d->hedge);
    coverage_release(&d->cov);
    memset(&d->cov, 0, sizeof d->cov);
    capcache_release(&d->caps);
    memset(&d->caps, 0, sizeof d->caps);
    d->started_ms = uv_now(d->loop);
    d->last_tick_ms = 0;
    struct journal_thread_opts to = {
        .next_seq = 1,
        .on_fail = on_replica_journal_fail,
        .on_commit = on_journal_commit,
        .user = d,
        .sink = replica_sink,
        .sink_user = d->replica,
    };
    char why[SLUICE_ERRMSG_SIZE];
    int rc = journal_thread_start(d->loop, &to, &d->jt, why, sizeof why);
    if (rc < 0) {
        fatal(d, "raft: starting to serve: %s", why);
        return;
    }
    d->saves_resumed = false;
    dispatcher_saves_tick(d);
}

static void on_replica_jt_closed(void *user)
{
    struct dispatcher *d = user;
    d->closing_jts--;
    dispatcher_maybe_finish_close(d);
}

static void replica_unserve(void *user)
{
    struct dispatcher *d = user;
    if (!d->jt)
        return;
    struct journal_thread *jt = d->jt;
    d->jt = NULL;
    d->closing_jts++;
    journal_thread_close(jt, on_replica_jt_closed, d);
}

static void replica_fatal(void *user, const char *msg)
{
    fatal(user, "%s", msg);
}

static void on_journal_commit(void *user, double seconds, size_t records, uint64_t bytes)
{
    struct dispatcher *d = user;
    (void)records;
    observe_journal_commit(d->obs, seconds, bytes);
}

/* Fault-tolerant start: opens the journal, rebuilds the state from it, and takes the
 * incarnation it keeps (made on the first start), so workers and clients that reconnect see the
 * same dispatcher and keep their tasks. */
static int journal_recover(struct dispatcher *d, const struct dispatcher_opts *opts, char *err,
                           size_t errlen)
{
    char why[SLUICE_ERRMSG_SIZE];
    struct journal_recovery info;
    uint64_t inc = 0;
    d->work_dir = strdup(opts->work_dir);
    if (!d->work_dir)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "start: out of memory");
    d->snapshot_every = opts->snapshot_every ? opts->snapshot_every : DEFAULT_SNAPSHOT_EVERY;
    d->snapshot_by_size = opts->snapshot_every == 0;
    struct journal_opts jo = {
        .work_dir = opts->work_dir, .create = true, .map_max = opts->journal_max_bytes};
    state_release(&d->st);
    int rc =
        recovery_open(&jo, opts->recover_to_last_good, &d->journal, &d->st, &info, why, sizeof why);
    if (rc == 0) {
        rc = journal_meta_get_u64(d->journal, META_INCARNATION, &inc, why, sizeof why);
        if (rc == SLUICE_ERR_NOT_FOUND) {
            inc = rpc_new_incarnation();
            rc = journal_meta_put_u64(d->journal, META_INCARNATION, inc, why, sizeof why);
        }
    }
    if (rc < 0)
        return err_set(err, errlen, rc, "journal: %s: %s", opts->work_dir, why);
    d->incarnation = inc;
    d->since_snapshot = info.replayed;
    log_info("journal %s: recovered %" PRIu64 " updates (snapshot at record %" PRIu64 ", %" PRIu64
             " records after it); incarnation %016" PRIx64,
             opts->work_dir, d->st.applied, info.snapshot_seq, info.replayed, inc);
    struct journal_thread_opts to = {
        .journal = d->journal,
        .next_seq = info.next_seq,
        .max_records = opts->journal_per_update ? 1 : 0,
        .on_fail = on_journal_fail,
        .on_commit = on_journal_commit,
        .user = d,
    };
    rc = journal_thread_start(d->loop, &to, &d->jt, why, sizeof why);
    if (rc < 0)
        return err_set(err, errlen, rc, "journal: %s: %s", opts->work_dir, why);
    return 0;
}

/* The state of a single dispatcher's journal (read only), for a new group of replicas to start
 * from; limits and static workers from cfg. */
static int seed_from_journal(const char *work_dir, const struct state *cfg, struct state **out,
                             char *err, size_t errlen)
{
    struct journal *j;
    char why[SLUICE_ERRMSG_SIZE];
    struct journal_opts jo = {.work_dir = work_dir, .read_only = true};
    int rc = journal_open(&jo, &j, why, sizeof why);
    if (rc < 0)
        return err_set(err, errlen, rc, "raft seed journal: %s: %s", work_dir, why);
    struct state *s = malloc(sizeof *s);
    struct journal_recovery info;
    rc = s ? recovery_replay(j, s, &info, why, sizeof why) : SLUICE_ERR_NOMEM;
    journal_close(j);
    if (rc < 0) {
        free(s);
        return err_set(err, errlen, rc, "raft seed journal: %s: %s", work_dir,
                       rc == SLUICE_ERR_NOMEM ? "out of memory" : why);
    }
    s->limits = cfg->limits;
    s->static_workers = cfg->static_workers;
    log_info("raft: seed journal %s: %" PRIu64 " updates, %zu datasets, %zu jobs", work_dir,
             s->applied, s->ndatasets, s->njobs);
    *out = s;
    return 0;
}

int dispatcher_start(uv_loop_t *loop, const struct dispatcher_opts *opts, struct dispatcher **out,
                     char *err, size_t errlen)
{
    int rc;
    struct dispatcher *d = calloc(1, sizeof *d);
    if (!d)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "start: out of memory");
    d->loop = loop;
    state_init(&d->st);
    d->worker_timeout_ms =
        opts->worker_timeout_ms ? opts->worker_timeout_ms : DEFAULT_WORKER_TIMEOUT_MS;
    d->client_timeout_ms =
        opts->client_timeout_ms ? opts->client_timeout_ms : DEFAULT_CLIENT_TIMEOUT_MS;
    d->gc_timeout_ms =
        opts->job_gc_timeout_ms ? opts->job_gc_timeout_ms : DEFAULT_JOB_GC_TIMEOUT_MS;
    d->worker_hb_ms = dispatcher_heartbeat_ms(d->worker_timeout_ms);
    d->client_hb_ms = dispatcher_heartbeat_ms(d->client_timeout_ms);
    d->client_grace_ms =
        dispatcher_disconnect_grace_ms(opts->disconnect_grace_ms, d->client_timeout_ms);
    d->worker_grace_ms =
        dispatcher_disconnect_grace_ms(opts->disconnect_grace_ms, d->worker_timeout_ms);
    d->on_fatal = opts->on_fatal;
    d->user = opts->user;
    d->incarnation = rpc_new_incarnation();
    ratelimit_init(&d->refusals, 60000);
    struct observe_config oc = {
        .window_ms = opts->autoscale_window_ms,
        .pool_label = opts->autoscale_pool_label,
        .worker_timeout_ms = d->worker_timeout_ms,
        .client_timeout_ms = d->client_timeout_ms,
        .job_gc_timeout_ms = d->gc_timeout_ms,
        .worker_heartbeat_ms = d->worker_hb_ms,
        .client_heartbeat_ms = d->client_hb_ms,
        .client_disconnect_grace_ms = d->client_grace_ms == UINT32_MAX ? 0 : d->client_grace_ms,
        .worker_disconnect_grace_ms = d->worker_grace_ms == UINT32_MAX ? 0 : d->worker_grace_ms,
    };
    rc = observe_create(&oc, NULL, uv_now(loop), &d->obs);
    if (rc < 0) {
        err_set(err, errlen, rc, "start: out of memory");
        goto fail;
    }
    d->history = calloc(1, sizeof *d->history);
    if (!d->history) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "start: out of memory");
        goto fail;
    }
    if (opts->raft_id) {
        /* A replica: its state comes from the Raft log once Raft runs (below); the
         * incarnation is the group's, the same on every replica, so callers that move to
         * another replica see the dispatcher they knew. */
        uint64_t ids[REPLICA_MEMBERS_MAX];
        char addrs[REPLICA_MEMBERS_MAX][REPLICA_ADDR_MAX], canon[REPLICA_MEMBERS_MAX * 300];
        size_t n;
        rc = replica_parse_cluster(opts->raft_cluster, opts->raft_id, opts->raft_address, ids,
                                   addrs, &n, canon, sizeof canon, err, errlen);
        if (rc < 0)
            goto fail;
        if (!opts->work_dir) {
            rc = err_set(err, errlen, SLUICE_ERR_INVALID, "raft: a replica needs a work dir");
            goto fail;
        }
        d->work_dir = strdup(opts->work_dir);
        if (!d->work_dir) {
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "start: out of memory");
            goto fail;
        }
        d->snapshot_every = UINT64_MAX;
        d->incarnation = fnv1a_str(FNV1A_OFFSET, canon) | 1;
    } else if (opts->work_dir) {
        rc = journal_recover(d, opts, err, errlen);
        if (rc < 0)
            goto fail;
    }
    if (opts->nworker_addresses > 0) {
        d->worker_addresses = calloc(opts->nworker_addresses, sizeof *d->worker_addresses);
        if (!d->worker_addresses) {
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "start: out of memory");
            goto fail;
        }
        for (size_t i = 0; i < opts->nworker_addresses; i++) {
            d->worker_addresses[i] = strdup(opts->worker_addresses[i]);
            if (!d->worker_addresses[i]) {
                rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "start: out of memory");
                goto fail;
            }
            d->nworker_addresses++;
        }
    }
    d->st.static_workers = (uint32_t)d->nworker_addresses;
    if (pipe_roots_copy(&d->roots, opts->roots) < 0) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "start: out of memory");
        goto fail;
    }
    d->max_jobs_per_address = opts->max_jobs_per_address ? opts->max_jobs_per_address
                                                         : DISPATCHER_DEFAULT_MAX_JOBS_PER_ADDRESS;
    d->st.limits = (struct st_limits){
        .max_datasets = opts->max_datasets ? opts->max_datasets : DISPATCHER_DEFAULT_MAX_DATASETS,
        .max_pipeline_bytes = opts->max_pipeline_bytes ? opts->max_pipeline_bytes
                                                       : DISPATCHER_DEFAULT_MAX_PIPELINE_BYTES,
        .max_jobs_per_client = opts->max_jobs_per_client ? opts->max_jobs_per_client
                                                         : DISPATCHER_DEFAULT_MAX_JOBS_PER_CLIENT,
    };

    struct rpc_server_opts ro = {
        .host = opts->host,
        .port = opts->port,
        .role = SLUICE__ROLE__ROLE_DISPATCHER,
        .incarnation = d->incarnation,
        /* Replies to the dispatcher's requests are small: a peer that stops reading them is
         * cut off from sending more well before it costs memory. */
        .max_pending_write = DISPATCHER_MAX_PENDING_WRITE,
        .handshake_timeout_ms = opts->handshake_timeout_ms,
        .max_connections = opts->max_connections,
        .max_handshakes = opts->max_handshakes,
        .on_request = on_request,
        .on_close = on_conn_closed,
        .on_answered = on_answered,
        .user = d,
        .sec = opts->sec,
    };
    rc = rpc_server_start(loop, &ro, &d->rpc, err, errlen);
    if (rc < 0)
        goto fail;
    if (opts->raft_id) {
        if (opts->advertise)
            snprintf(d->advertise, sizeof d->advertise, "%s", opts->advertise);
        else if (strchr(rpc_server_host(d->rpc), ':'))
            snprintf(d->advertise, sizeof d->advertise, "[%s]:%d", rpc_server_host(d->rpc),
                     rpc_server_port(d->rpc));
        else
            snprintf(d->advertise, sizeof d->advertise, "%s:%d", rpc_server_host(d->rpc),
                     rpc_server_port(d->rpc));
        struct state *seed = NULL;
        if (opts->raft_seed_journal) {
            rc = seed_from_journal(opts->raft_seed_journal, &d->st, &seed, err, errlen);
            if (rc < 0)
                goto fail;
        }
        struct replica_opts ro2 = {
            .loop = loop,
            .id = opts->raft_id,
            .address = opts->raft_address,
            .cluster = opts->raft_cluster,
            .bind = opts->raft_bind,
            .rpc = d->advertise,
            .work_dir = opts->work_dir,
            .election_timeout_ms = opts->raft_election_timeout_ms,
            .snapshot_threshold = opts->snapshot_every,
            .sec = opts->sec,
            .work = &d->st,
            .seed = seed,
            .serve = replica_serve,
            .unserve = replica_unserve,
            .fatal = replica_fatal,
            .user = d,
        };
        rc = replica_start(&ro2, &d->replica, err, errlen);
        if (rc < 0)
            goto fail;
    }

    /* The timer runs often enough that no deadline is overshot by more than a quarter: the
     * timeouts' and the disconnect graces' (UINT32_MAX when off; never longer than their
     * timeouts). */
    uint32_t shortest = d->worker_timeout_ms;
    if (d->client_timeout_ms < shortest)
        shortest = d->client_timeout_ms;
    if (d->gc_timeout_ms < shortest)
        shortest = d->gc_timeout_ms;
    if (d->client_grace_ms < shortest)
        shortest = d->client_grace_ms;
    if (d->worker_grace_ms < shortest)
        shortest = d->worker_grace_ms;
    uint64_t interval = shortest / 4;
    /* The autoscaling window closes on the first tick at or after its end. */
    if (interval > observe_window_ms(d->obs))
        interval = observe_window_ms(d->obs);
    if (interval < 10)
        interval = 10;
    if (interval > 1000)
        interval = 1000;
    d->started_ms = uv_now(loop);
    uv_timer_init(loop, &d->timer);
    d->timer.data = d;
    uv_timer_start(&d->timer, dispatcher_on_tick, interval, interval);
    /* Saves the journal holds as running are taken up at once (their work is queued). */
    dispatcher_saves_tick(d);
    *out = d;
    return 0;

fail:
    if (d->jt) {
        /* Nothing is queued yet: the thread stops at once; its handles close on the next run. */
        journal_thread_close(d->jt, NULL, NULL);
        d->jt = NULL;
    }
    if (d->rpc) {
        /* Started before the replica (which failed): its listener would keep the loop running.
         * No connection was accepted yet, so no callback reaches d. */
        rpc_server_close(d->rpc, NULL, NULL);
        d->rpc = NULL;
    }
    dispatcher_free(d);
    return rc;
}

const char *dispatcher_host(const struct dispatcher *d)
{
    return rpc_server_host(d->rpc);
}

int dispatcher_port(const struct dispatcher *d)
{
    return rpc_server_port(d->rpc);
}

uint64_t dispatcher_incarnation(const struct dispatcher *d)
{
    return d->incarnation;
}

bool dispatcher_serving(const struct dispatcher *d)
{
    return !d->replica || replica_serving(d->replica);
}

void dispatcher_handover(struct dispatcher *d, void (*cb)(void *user), void *user)
{
    if (!d->replica || d->closing) {
        cb(user);
        return;
    }
    replica_handover(d->replica, cb, user);
}

/* Sets the gauges the shell feeds observe (connections, Raft, object stores) before a scrape. */
static int metrics_feed(struct dispatcher *d)
{
    struct rpc_counts c = {rpc_server_auth_failures(d->rpc), rpc_server_refused(d->rpc),
                           rpc_server_handshake_timeouts(d->rpc),
                           rpc_server_handshake_evictions(d->rpc)};
    observe_connections(d->obs, &c);
    if (d->replica) {
        replica_view(d->replica, &d->raft_view);
        if (observe_raft(d->obs, &d->raft_view) < 0)
            return SLUICE_ERR_NOMEM;
    }
    /* About 10 KB: on the heap, away from the loop thread's stack. */
    struct obj_stats *os = malloc(sizeof *os);
    if (!os)
        return SLUICE_ERR_NOMEM;
    obj_stats(os);
    int rc = observe_objects(d->obs, os);
    free(os);
    return rc;
}

int dispatcher_metrics_render(struct dispatcher *d, char **body, size_t *len)
{
    int rc = metrics_feed(d);
    return rc < 0 ? rc : observe_render(d->obs, &d->st, uv_now(d->loop), body, len);
}

int dispatcher_metrics_freeze(struct dispatcher *d, struct metrics_frozen **out)
{
    int rc = metrics_feed(d);
    return rc < 0 ? rc : observe_freeze(d->obs, &d->st, uv_now(d->loop), out);
}

void dispatcher_maybe_finish_close(struct dispatcher *d)
{
    if (!d->closing || d->closing_parts > 0 || d->works || d->save_works || d->checks > 0 ||
        d->status_works > 0 || d->snap_work || d->closing_jts > 0)
        return;
    void (*cb)(void *) = d->close_cb;
    void *user = d->close_user;
    dispatcher_free(d);
    if (cb)
        cb(user);
}

static void on_timer_closed(uv_handle_t *h)
{
    struct dispatcher *d = h->data;
    d->closing_parts--;
    dispatcher_maybe_finish_close(d);
}

static void on_journal_closed(void *user)
{
    struct dispatcher *d = user;
    d->jt = NULL;
    d->closing_parts--;
    dispatcher_maybe_finish_close(d);
}

static void on_rpc_closed(void *user)
{
    struct dispatcher *d = user;
    d->rpc = NULL;
    d->closing_parts--;
    dispatcher_maybe_finish_close(d);
}

static void on_replica_closed(void *user)
{
    struct dispatcher *d = user;
    d->replica = NULL;
    d->closing_parts--;
    dispatcher_maybe_finish_close(d);
}

void dispatcher_close(struct dispatcher *d, void (*cb)(void *user), void *user)
{
    d->closing = true;
    d->close_cb = cb;
    d->close_user = user;
    if (d->replica) {
        /* Its journal thread closes with the leadership; Raft cancels what is in flight. */
        replica_unserve(d);
        d->closing_parts = 3;
        uv_timer_stop(&d->timer);
        uv_close((uv_handle_t *)&d->timer, on_timer_closed);
        rpc_server_close(d->rpc, on_rpc_closed, d);
        replica_close(d->replica, on_replica_closed, d);
        dispatcher_jobs_cancel(d);
        dispatcher_saves_cancel(d);
        return;
    }
    d->closing_parts = d->jt ? 3 : 2;
    uv_timer_stop(&d->timer);
    uv_close((uv_handle_t *)&d->timer, on_timer_closed);
    rpc_server_close(d->rpc, on_rpc_closed, d);
    if (d->jt) {
        /* What is queued is still written: those changes are applied, so they must not vanish
         * on restart. */
        struct journal_thread_stats st;
        journal_thread_get_stats(d->jt, &st);
        log_info("journal: %" PRIu64 " records in %" PRIu64 " transactions (at most %" PRIu64
                 " in one), %" PRIu64 " snapshots",
                 st.records, st.transactions, st.largest, st.snapshots);
        journal_thread_close(d->jt, on_journal_closed, d);
    }
    dispatcher_jobs_cancel(d);
    dispatcher_saves_cancel(d);
}
