/* The dispatcher's server shell.
 *
 * Happy path: a request arrives on the loop thread; its handler checks what needs no state
 * (lengths, enums, the --worker-addresses list), plans against the state (state.h: pure, appends
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
#include "server.h"

#include "journal_thread.h"
#include "observe.h"
#include "record.h"
#include "common/rows.h"
#include "coverage.h"
#include "state.h"
#include "status.h"

#include "common/error.h"
#include "common/log.h"
#include "common/rpc.h"
#include "journal/journal.h"
#include "pipeline/def.h"
#include "pipeline/spec.h"
#include "pipeline/split.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_WORKER_TIMEOUT_MS 10000
#define DEFAULT_CLIENT_TIMEOUT_MS 30000
#define DEFAULT_JOB_GC_TIMEOUT_MS 60000
#define DEFAULT_SNAPSHOT_EVERY 10000
#define META_INCARNATION "incarnation"
#define MAX_SPLITS_PER_REQUEST 4096 /* bounds one GetSplits reply */
#define ERRLEN 512

struct soft {
    uint64_t id;
    uint64_t t; /* uv_now() milliseconds */
};

/* A map from id to time, sorted by id. */
struct soft_table {
    struct soft *v;
    size_t n, cap;
};

struct def_cache_entry {
    char id[ST_ID_MAX];
    Sluice__DatasetDef *def; /* unpacked from the dataset's bytes, owned */
};

struct job_ctx;

struct dispatcher {
    uv_loop_t *loop;
    struct rpc_server *rpc;
    uv_timer_t timer;
    struct state st;
    struct st_update_list ups; /* planning scratch; empty between requests */

    struct soft_table worker_seen, client_seen, idle_since;
    /* distributed_epoch tasks: since when the worker reports a task settled (everything it
     * produced was fetched) while it still holds leases, and when it was last leased splits. */
    struct soft_table settled_since, leased_at;
    struct coverage cov; /* consumers' partial reports of unfinished splits */
    struct def_cache_entry *defs;
    size_t ndefs, cap_defs;

    char **worker_addresses;
    size_t nworker_addresses;
    uint32_t worker_timeout_ms, client_timeout_ms, gc_timeout_ms;
    uint32_t worker_hb_ms, client_hb_ms;
    uint64_t incarnation;
    struct observe *obs; /* metrics and the autoscaling window (observe.h) */

    struct job_ctx *works; /* split-plan work queued or running, for cancelling at close */

    /* Fault-tolerant mode only (NULL otherwise). */
    char *work_dir;
    struct journal *journal;
    struct journal_thread *jt;
    uint64_t snapshot_every; /* updates between snapshots */
    uint64_t since_snapshot; /* updates journaled since the last snapshot (or the start) */

    bool fatal;
    bool closing;
    unsigned closing_parts; /* the timer and the rpc server, until their close callbacks */
    void (*close_cb)(void *user);
    void *close_user;
    void (*on_fatal)(void *user, const char *msg);
    void *user;
};

typedef void (*commit_cb)(struct dispatcher *d, int status, void *ctx);

/* ---- small helpers --------------------------------------------------------------------------- */

uint32_t dispatcher_heartbeat_ms(uint32_t timeout_ms)
{
    uint32_t ms = timeout_ms / 5;
    if (ms < 50)
        ms = 50;
    if (ms > 1000)
        ms = 1000;
    return ms;
}

/* How long a task may sit settled with leases before they are leased again: a client reports a
 * split within ITER_ACK_MS of receiving its end, or at its next heartbeat, and a worker reports
 * a task settled at its heartbeat; three of the longer interval, plus a second for a loaded
 * machine, keep a healthy consumer from ever being overtaken. */
static uint32_t reissue_grace_ms(const struct dispatcher *d)
{
    uint32_t hb = d->client_hb_ms > d->worker_hb_ms ? d->client_hb_ms : d->worker_hb_ms;
    return 3 * hb + 1000;
}

static struct soft *soft_find(struct soft_table *t, uint64_t id, size_t *pos)
{
    size_t lo = rows_lower(t->v, t->n, sizeof *t->v, offsetof(struct soft, id), id);
    if (pos)
        *pos = lo;
    return lo < t->n && t->v[lo].id == id ? &t->v[lo] : NULL;
}

/* Soft state is an optimisation of eviction, so running out of memory here only means an entry
 * is missing, which the next tick treats as "heard from now". */
static void soft_set(struct soft_table *t, uint64_t id, uint64_t when)
{
    size_t pos;
    struct soft *e = soft_find(t, id, &pos);
    if (!e)
        e = rows_insert_at((void **)&t->v, &t->n, &t->cap, sizeof *t->v, pos);
    if (e)
        *e = (struct soft){id, when};
}

static void soft_del(struct soft_table *t, uint64_t id)
{
    size_t pos;
    if (soft_find(t, id, &pos)) {
        memmove(&t->v[pos], &t->v[pos + 1], (t->n - pos - 1) * sizeof *t->v);
        t->n--;
    }
}

static void fatal(struct dispatcher *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fatal(struct dispatcher *d, const char *fmt, ...)
{
    char msg[ERRLEN];
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
                 st_mode_name((enum st_mode)u->mode));
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
    int rc = record_update_encode(u, &bytes, &len);
    if (rc == 0)
        rc =
            journal_thread_add(d->jt, bytes, len, u->type == ST_DATASET_REGISTERED ? u->name : NULL,
                               u->def, u->def_len);
    if (rc < 0)
        fatal(d, "journal: %s: queueing %s %" PRIu64 ": %s", d->work_dir, st_update_name(u->type),
              u->id, sluice_strerror(rc));
    return rc;
}

/* Every snapshot_every updates the whole state goes to the journal, which then drops the records
 * before it: a restart replays at most that many updates, whatever the history. */
static int maybe_snapshot(struct dispatcher *d, size_t n)
{
    d->since_snapshot += n;
    if (d->since_snapshot < d->snapshot_every)
        return 0;
    uint8_t *bytes;
    size_t len;
    int rc = record_snapshot_encode(&d->st, &bytes, &len);
    if (rc == 0)
        rc = journal_thread_snapshot(d->jt, bytes, len);
    if (rc < 0) {
        fatal(d, "journal: %s: queueing a snapshot: %s", d->work_dir, sluice_strerror(rc));
        return rc;
    }
    log_debug("snapshot of %zu bytes after %" PRIu64 " updates", len, d->since_snapshot);
    d->since_snapshot = 0;
    return 0;
}

static void commit(struct dispatcher *d, struct st_update_list *ups, commit_cb cb, void *ctx)
{
    int rc = d->fatal ? SLUICE_ERR_CLOSED : 0;
    struct log_lines lines = {0};
    for (size_t i = 0; rc == 0 && i < ups->n; i++) {
        rc = state_apply(&d->st, &ups->v[i]);
        if (rc == 0) {
            observe_applied(d->obs, &ups->v[i]);
            log_lines_add(&lines, &ups->v[i]);
        }
        if (rc < 0)
            fatal(d, "state: applying %s %" PRIu64 ": %s", st_update_name(ups->v[i].type),
                  ups->v[i].id, sluice_strerror(rc));
        else if (d->jt)
            rc = journal_update(d, &ups->v[i]);
    }
    if (rc == 0 && d->jt && ups->n > 0)
        rc = maybe_snapshot(d, ups->n);
    st_update_list_clear(ups);
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

/* ---- requests and replies -------------------------------------------------------------------- */

/* What every pending reply holds: the connection (referenced) and the request id. */
struct req {
    struct dispatcher *d;
    struct rpc_conn *conn;
    uint64_t id;
};

static void req_init(struct req *r, struct dispatcher *d, struct rpc_conn *conn, uint64_t id)
{
    r->d = d;
    r->conn = conn;
    r->id = id;
    rpc_conn_ref(conn);
}

static void req_done(struct req *r)
{
    rpc_conn_unref(r->conn);
}

static void refuse(struct rpc_conn *conn, uint64_t id, int code, const char *msg)
{
    log_debug("refused a request from %s: %s", rpc_conn_peer_name(conn), msg);
    rpc_conn_reply_error(conn, id, code, "%s", msg);
}

/* The error a failed commit answers with. */
static void refuse_commit(struct req *r, int status)
{
    refuse(r->conn, r->id, status == SLUICE_ERR_CLOSED ? SLUICE_ERR_UNAVAILABLE : status,
           "the dispatcher cannot record changes: it has failed");
}

static void send_reply(struct req *r, Sluice__Envelope *env)
{
    int rc = rpc_conn_reply(r->conn, r->id, env);
    if (rc < 0 && rc != SLUICE_ERR_CLOSED) {
        log_warn("reply to %s: %s", rpc_conn_peer_name(r->conn), sluice_strerror(rc));
        rpc_conn_reply_error(r->conn, r->id, rc, "reply: %s", sluice_strerror(rc));
    }
}

static const Sluice__DatasetDef *dataset_def(struct dispatcher *d, const struct st_dataset *ds)
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

/* ---- RegisterDataset ------------------------------------------------------------------------- */

struct register_ctx {
    struct req r;
    char dataset_id[ST_ID_MAX];
};

static void register_done(struct dispatcher *d, int status, void *ctx)
{
    struct register_ctx *c = ctx;
    if (status < 0) {
        refuse_commit(&c->r, status);
    } else {
        Sluice__RegisterDatasetReply body = SLUICE__REGISTER_DATASET_REPLY__INIT;
        body.dataset_id = c->dataset_id;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_REGISTER_DATASET_REPLY;
        env.register_dataset_reply = &body;
        send_reply(&c->r, &env);
    }
    req_done(&c->r);
    free(c);
}

static void on_register_dataset(struct dispatcher *d, struct rpc_conn *conn,
                                const Sluice__Envelope *env)
{
    const Sluice__RegisterDatasetRequest *req = env->register_dataset;
    char err[ERRLEN], why[ERRLEN];
    uint8_t *packed = NULL, *canon = NULL;
    size_t canon_len = 0;
    char *text = NULL;
    struct pipe_spec *spec = NULL;
    struct register_ctx *c = NULL;
    int rc;

    if (!req->dataset) {
        refuse(conn, env->id, SLUICE_ERR_INVALID, "register_dataset needs a dataset");
        return;
    }
    if (req->compression != SLUICE__COMPRESSION__COMPRESSION_AUTO &&
        req->compression != SLUICE__COMPRESSION__COMPRESSION_NONE) {
        snprintf(err, sizeof err, "unknown compression %d", (int)req->compression);
        refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    /* Decoding the definition is the validation: what the workers will build from it must parse
     * now. The stored bytes are the canonical encoding of what was decoded. */
    size_t len = sluice__dataset_def__get_packed_size(req->dataset);
    packed = malloc(len ? len : 1);
    if (!packed) {
        rc = err_set(err, sizeof err, SLUICE_ERR_NOMEM, "out of memory");
        goto refused;
    }
    sluice__dataset_def__pack(req->dataset, packed);
    rc = pipe_spec_decode(packed, len, &spec, why, sizeof why);
    if (rc < 0) {
        err_set(err, sizeof err, rc, "%s", why);
        goto refused;
    }
    rc = pipe_spec_encode(spec, &canon, &canon_len);
    if (rc < 0) {
        err_set(err, sizeof err, rc, "encoding the dataset definition: %s", sluice_strerror(rc));
        goto refused;
    }
    rc = pipe_spec_format(spec, NULL, 0);
    if (rc >= 0) {
        text = malloc((size_t)rc + 1);
        if (!text)
            rc = SLUICE_ERR_NOMEM;
        else
            pipe_spec_format(spec, text, (size_t)rc + 1);
    }
    if (rc < 0) {
        err_set(err, sizeof err, rc, "formatting the pipeline: %s", sluice_strerror(rc));
        goto refused;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        rc = err_set(err, sizeof err, SLUICE_ERR_NOMEM, "out of memory");
        goto refused;
    }
    rc = plan_register_dataset(&d->st, req->dataset_id, canon, canon_len, (int)req->compression,
                               req->split_size, text, c->dataset_id, &d->ups, err, sizeof err);
    if (rc < 0)
        goto refused;
    req_init(&c->r, d, conn, env->id);
    commit(d, &d->ups, register_done, c);
    c = NULL;
    goto out;

refused:
    refuse(conn, env->id, rc, err);
out:
    free(c);
    free(text);
    free(canon);
    free(packed);
    pipe_spec_free(spec);
}

/* ---- GetDataset ------------------------------------------------------------------------------ */

struct get_dataset_ctx {
    struct req r;
    char dataset_id[ST_ID_MAX];
};

static void get_dataset_done(struct dispatcher *d, int status, void *ctx)
{
    struct get_dataset_ctx *c = ctx;
    const struct st_dataset *ds = state_dataset(&d->st, c->dataset_id);
    const Sluice__DatasetDef *def = ds ? dataset_def(d, ds) : NULL;
    if (status < 0) {
        refuse_commit(&c->r, status);
    } else if (!ds) {
        char msg[ERRLEN];
        snprintf(msg, sizeof msg, "dataset '%s' not found", c->dataset_id);
        refuse(c->r.conn, c->r.id, SLUICE_ERR_NOT_FOUND, msg);
    } else if (!def) {
        refuse(c->r.conn, c->r.id, SLUICE_ERR_NOMEM, "out of memory");
    } else {
        Sluice__GetDatasetReply body = SLUICE__GET_DATASET_REPLY__INIT;
        /* protobuf-c packs through const pointers; the generated struct just lacks const. */
        body.dataset = (Sluice__DatasetDef *)def;
        body.compression = (Sluice__Compression)ds->compression;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET_REPLY;
        env.get_dataset_reply = &body;
        send_reply(&c->r, &env);
    }
    req_done(&c->r);
    free(c);
}

static void on_get_dataset(struct dispatcher *d, struct rpc_conn *conn, const Sluice__Envelope *env)
{
    const char *id = env->get_dataset->dataset_id;
    char msg[ERRLEN];
    if (strlen(id) >= ST_ID_MAX || !state_dataset(&d->st, id)) {
        snprintf(msg, sizeof msg, "dataset '%.*s' not found", ST_ID_MAX, id);
        refuse(conn, env->id, SLUICE_ERR_NOT_FOUND, msg);
        return;
    }
    struct get_dataset_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    memcpy(c->dataset_id, id, strlen(id) + 1);
    req_init(&c->r, d, conn, env->id);
    commit(d, &d->ups, get_dataset_done, c);
}

/* ---- GetOrCreateJob -------------------------------------------------------------------------- */

struct job_ctx {
    struct req r;
    char dataset_id[ST_ID_MAX];
    char job_name[ST_ID_MAX];
    enum st_mode mode;
    uint32_t num_consumers;
    bool endless; /* the dataset's pipeline never ends (pipe_spec_endless) */
    uint64_t job_id, iteration_id, client_id;

    /* Building the split plan on the thread pool. */
    uv_work_t work;
    struct job_ctx *prev, *next; /* on d->works */
    uint8_t *def;
    size_t def_len;
    uint64_t split_size;
    struct st_split_plan plan;
    int rc;
    char err[ERRLEN];
};

static void job_ctx_free(struct job_ctx *c)
{
    free(c->def);
    st_split_plan_release(&c->plan);
    free(c);
}

static void job_done(struct dispatcher *d, int status, void *ctx)
{
    struct job_ctx *c = ctx;
    if (status < 0) {
        refuse_commit(&c->r, status);
    } else {
        soft_set(&d->client_seen, c->client_id, uv_now(d->loop));
        Sluice__GetOrCreateJobReply body = SLUICE__GET_OR_CREATE_JOB_REPLY__INIT;
        body.job_id = c->job_id;
        body.iteration_id = c->iteration_id;
        body.client_id = c->client_id;
        body.heartbeat_ms = d->client_hb_ms;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB_REPLY;
        env.get_or_create_job_reply = &body;
        send_reply(&c->r, &env);
    }
    req_done(&c->r);
    job_ctx_free(c);
}

/* Plans with the split plan (when one was built) and commits; takes c. */
static void job_plan_and_commit(struct dispatcher *d, struct job_ctx *c, bool have_plan)
{
    char err[ERRLEN];
    int rc = plan_get_or_create_job(&d->st, c->dataset_id, c->job_name, c->mode, c->num_consumers,
                                    c->endless, have_plan ? &c->plan : NULL, &c->job_id,
                                    &c->iteration_id, &c->client_id, &d->ups, err, sizeof err);
    if (rc < 0) {
        refuse(c->r.conn, c->r.id, rc, err);
        req_done(&c->r);
        job_ctx_free(c);
        return;
    }
    commit(d, &d->ups, job_done, c);
}

/* On the thread pool: decode the definition and build the split plan. Touches only c. */
static void job_plan_work(uv_work_t *w)
{
    struct job_ctx *c = w->data;
    struct pipe_spec *spec = NULL;
    struct pipe_split_provider p;
    char why[ERRLEN];
    c->rc = pipe_spec_decode(c->def, c->def_len, &spec, why, sizeof why);
    if (c->rc < 0) {
        err_set(c->err, sizeof c->err, c->rc, "dataset '%s': %s", c->dataset_id, why);
        return;
    }
    c->rc = pipe_split_provider_init(&p, spec, c->split_size, why, sizeof why);
    pipe_spec_free(spec);
    if (c->rc < 0) {
        err_set(c->err, sizeof c->err, c->rc, "splitting dataset '%s': %s", c->dataset_id, why);
        return;
    }
    struct st_split_plan view = {
        .source_len = p.source_len,
        .split_size = p.split_size,
        .per_pass = p.per_pass,
        .passes = p.passes,
        .paths = p.paths,
        .npaths = p.npaths,
    };
    c->rc = st_split_plan_copy(&c->plan, &view);
    if (c->rc < 0)
        err_set(c->err, sizeof c->err, c->rc, "out of memory");
    pipe_split_provider_release(&p);
}

static void maybe_finish_close(struct dispatcher *d);

static void job_plan_after(uv_work_t *w, int status)
{
    struct job_ctx *c = w->data;
    struct dispatcher *d = c->r.d;
    if (c->prev)
        c->prev->next = c->next;
    else
        d->works = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (status < 0 || d->closing) {
        req_done(&c->r);
        job_ctx_free(c);
        maybe_finish_close(d);
        return;
    }
    if (c->rc < 0) {
        refuse(c->r.conn, c->r.id, c->rc, c->err);
        req_done(&c->r);
        job_ctx_free(c);
        return;
    }
    job_plan_and_commit(d, c, true);
}

static bool static_mode(enum st_mode mode)
{
    return mode == ST_MODE_FILE || mode == ST_MODE_DATA || mode == ST_MODE_FILE_OR_DATA ||
           mode == ST_MODE_HINT;
}

static void on_get_or_create_job(struct dispatcher *d, struct rpc_conn *conn,
                                 const Sluice__Envelope *env)
{
    const Sluice__GetOrCreateJobRequest *req = env->get_or_create_job;
    char msg[ERRLEN];
    int code = SLUICE_ERR_INVALID;
    const struct st_dataset *ds = NULL;

    if ((unsigned)req->mode > (unsigned)ST_MODE_HINT) {
        snprintf(msg, sizeof msg, "unknown processing mode %d", (int)req->mode);
        goto refused;
    }
    enum st_mode mode = (enum st_mode)req->mode;
    if (strlen(req->job_name) >= ST_ID_MAX) {
        snprintf(msg, sizeof msg, "job name is longer than %d bytes", ST_ID_MAX - 1);
        goto refused;
    }
    if (static_mode(mode) && d->nworker_addresses == 0) {
        snprintf(msg, sizeof msg, "mode %s needs --worker-addresses on the dispatcher",
                 st_mode_name(mode));
        goto refused;
    }
    if (req->num_consumers > 0 && req->job_name[0] == '\0') {
        snprintf(msg, sizeof msg, "num_consumers needs a job name");
        goto refused;
    }
    if (req->num_consumers > 0 && req->consumer_index >= req->num_consumers) {
        snprintf(msg, sizeof msg, "consumer_index %" PRIu32 " is not below num_consumers %" PRIu32,
                 req->consumer_index, req->num_consumers);
        goto refused;
    }
    if (strlen(req->dataset_id) < ST_ID_MAX)
        ds = state_dataset(&d->st, req->dataset_id);
    if (!ds) {
        code = SLUICE_ERR_NOT_FOUND;
        snprintf(msg, sizeof msg, "dataset '%.*s' not found", ST_ID_MAX, req->dataset_id);
        goto refused;
    }

    /* Coordinated reads need a pipeline that never ends; the plan refuses one that does. The
     * definition is small and decoding it touches no disk. */
    bool endless = false;
    if (req->num_consumers > 0) {
        struct pipe_spec *spec = NULL;
        char why[256];
        int rc = pipe_spec_decode(ds->def, ds->def_len, &spec, why, sizeof why);
        if (rc < 0) {
            code = rc;
            snprintf(msg, sizeof msg, "dataset '%s': %s", ds->id, why);
            goto refused;
        }
        endless = pipe_spec_endless(spec);
        pipe_spec_free(spec);
    }

    struct job_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        code = SLUICE_ERR_NOMEM;
        snprintf(msg, sizeof msg, "out of memory");
        goto refused;
    }
    c->endless = endless;
    memcpy(c->dataset_id, req->dataset_id, strlen(req->dataset_id) + 1);
    memcpy(c->job_name, req->job_name, strlen(req->job_name) + 1);
    c->mode = mode;
    c->num_consumers = req->num_consumers;
    req_init(&c->r, d, conn, env->id);

    /* A split plan is needed only when a distributed_epoch iteration will be created. */
    const struct st_job *job = state_job_by_key(&d->st, c->dataset_id, c->job_name);
    const struct st_iteration *cur = job ? state_iteration(&d->st, job->iteration_id) : NULL;
    bool joining = cur && cur->state != ST_ITER_GC;
    if (mode != ST_MODE_DISTRIBUTED_EPOCH || joining) {
        job_plan_and_commit(d, c, false);
        return;
    }
    c->def = malloc(ds->def_len ? ds->def_len : 1);
    if (!c->def) {
        refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        req_done(&c->r);
        job_ctx_free(c);
        return;
    }
    memcpy(c->def, ds->def, ds->def_len);
    c->def_len = ds->def_len;
    c->split_size = ds->split_size;
    c->work.data = c;
    int rc = uv_queue_work(d->loop, &c->work, job_plan_work, job_plan_after);
    if (rc < 0) {
        snprintf(msg, sizeof msg, "queueing work: %s", uv_strerror(rc));
        refuse(conn, env->id, rc, msg);
        req_done(&c->r);
        job_ctx_free(c);
        return;
    }
    c->next = d->works;
    if (d->works)
        d->works->prev = c;
    d->works = c;
    return;

refused:
    refuse(conn, env->id, code, msg);
}

/* ---- ClientHeartbeat and ReleaseClient ------------------------------------------------------- */

/* A coordinated read's rounds are granted this far ahead of a consumer's progress: the rounds
 * it reads in ROUND_WINDOW_S at its current rate, at least ROUND_WINDOW_MIN. A consumer asks for
 * more once half are left (src/client/iterator.c), so a heartbeat round trip is hidden behind
 * the reads; and a change of tasks takes effect within about that time. */
#define ROUND_WINDOW_MIN 64
#define ROUND_WINDOW_MAX (1u << 20)
#define ROUND_WINDOW_S 0.5

struct client_ctx {
    struct req r;
    uint64_t client_id, iteration_id;
    uint64_t *reported; /* split seqs the client reported coverage of */
    size_t nreported;
    /* What the reply says of the iteration's tasks and rounds, taken when the request was
     * planned: a later request's changes may not be durable yet when this reply leaves, and a
     * consumer must never act on a schedule or a grant that a crash could take back. */
    Sluice__TaskInfo *infos;
    Sluice__TaskInfo **info_ptrs;
    size_t ninfos;
    uint64_t rounds_granted;
    Sluice__RoundEpoch *epochs;
    Sluice__RoundEpoch **epoch_ptrs;
    size_t nepochs;
};

static void client_ctx_free(struct client_ctx *c)
{
    for (size_t i = 0; i < c->ninfos; i++)
        free(c->infos[i].worker_address);
    for (size_t i = 0; i < c->nepochs; i++)
        free(c->epochs[i].task_ids);
    free(c->infos);
    free(c->info_ptrs);
    free(c->epochs);
    free(c->epoch_ptrs);
    free(c->reported);
    free(c);
}

/* Copies the iteration's task list, and for a coordinated one its grant and the epochs from the
 * one holding round on, into c. Returns 0 or SLUICE_ERR_NOMEM. */
static int client_view_take(struct dispatcher *d, struct client_ctx *c,
                            const struct st_iteration *it, uint64_t round, uint64_t granted)
{
    size_t n = 0;
    for (size_t i = 0; i < d->st.ntasks; i++)
        n += d->st.tasks[i].iteration_id == it->id;
    c->infos = calloc(n ? n : 1, sizeof *c->infos);
    c->info_ptrs = calloc(n ? n : 1, sizeof *c->info_ptrs);
    if (!c->infos || !c->info_ptrs)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < d->st.ntasks; i++) {
        const struct st_task *t = &d->st.tasks[i];
        const struct st_worker *w = state_worker(&d->st, t->worker_id);
        if (t->iteration_id != it->id || !w)
            continue;
        Sluice__TaskInfo *ti = &c->infos[c->ninfos];
        sluice__task_info__init(ti);
        ti->task_id = t->id;
        ti->iteration_id = t->iteration_id;
        ti->worker_incarnation = w->incarnation;
        if (!(ti->worker_address = strdup(w->address)))
            return SLUICE_ERR_NOMEM;
        c->info_ptrs[c->ninfos++] = ti;
    }
    if (!state_iteration_coordinated(&d->st, it))
        return 0;
    c->rounds_granted = granted;
    long first = state_round_epoch(it, round);
    size_t from = first < 0 ? 0 : (size_t)first;
    size_t ne = it->nepochs - from;
    c->epochs = calloc(ne ? ne : 1, sizeof *c->epochs);
    c->epoch_ptrs = calloc(ne ? ne : 1, sizeof *c->epoch_ptrs);
    if (!c->epochs || !c->epoch_ptrs)
        return SLUICE_ERR_NOMEM;
    for (size_t k = from; k < it->nepochs; k++) {
        const struct st_round_epoch *e = &it->epochs[k];
        Sluice__RoundEpoch *re = &c->epochs[c->nepochs];
        sluice__round_epoch__init(re);
        re->start = e->start;
        if (e->tasks.n) {
            if (!(re->task_ids = malloc(e->tasks.n * sizeof *re->task_ids)))
                return SLUICE_ERR_NOMEM;
            memcpy(re->task_ids, e->tasks.v, e->tasks.n * sizeof *re->task_ids);
            re->n_task_ids = e->tasks.n;
        }
        c->epoch_ptrs[c->nepochs++] = re;
    }
    return 0;
}

static void client_heartbeat_done(struct dispatcher *d, int status, void *ctx)
{
    struct client_ctx *c = ctx;
    const struct st_iteration *it = state_iteration(&d->st, c->iteration_id);
    if (status < 0) {
        refuse_commit(&c->r, status);
        goto out;
    }
    if (!it) {
        char msg[ERRLEN];
        snprintf(msg, sizeof msg, "iteration %" PRIu64 " not found", c->iteration_id);
        refuse(c->r.conn, c->r.id, SLUICE_ERR_NOT_FOUND, msg);
        goto out;
    }
    /* Of the splits reported, those now finished: the client stops reporting them. */
    size_t nfin = 0;
    for (size_t i = 0; i < c->nreported; i++) {
        if (state_split_finished(&d->st, it->id, c->reported[i])) {
            coverage_forget(&d->cov, it->id, c->reported[i]);
            c->reported[nfin++] = c->reported[i];
        }
    }
    Sluice__ClientHeartbeatReply body = SLUICE__CLIENT_HEARTBEAT_REPLY__INIT;
    body.n_tasks = c->ninfos;
    body.tasks = c->info_ptrs;
    body.n_finished_seqs = nfin;
    body.finished_seqs = c->reported;
    body.iteration_finished = it->state == ST_ITER_FINISHED;
    body.heartbeat_ms = d->client_hb_ms;
    body.rounds_granted = c->rounds_granted;
    body.n_round_epochs = c->nepochs;
    body.round_epochs = c->epoch_ptrs;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT_REPLY;
    env.client_heartbeat_reply = &body;
    send_reply(&c->r, &env);
out:
    req_done(&c->r);
    client_ctx_free(c);
}

/* Merges a client's split coverage and plans SPLITS_FINISHED for the splits it completes. Fills
 * c->reported. Returns 0 or a negative code with err. */
static int plan_coverage(struct dispatcher *d, const Sluice__ClientHeartbeatRequest *req,
                         const struct st_iteration *it, struct client_ctx *c, char *err,
                         size_t errlen)
{
    if (req->n_splits == 0 || !it->distributed)
        return 0;
    c->reported = calloc(req->n_splits, sizeof *c->reported);
    uint64_t *complete = calloc(req->n_splits, sizeof *complete);
    size_t ncomplete = 0;
    int rc = 0;
    if (!c->reported || !complete) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < req->n_splits; i++) {
        const Sluice__SplitCoverage *sc = req->splits[i];
        if (!sc)
            continue;
        rc = coverage_check(sc->seq, sc->ended, sc->total, sc->bounds, sc->n_bounds, err, errlen);
        if (rc < 0)
            goto out;
        c->reported[c->nreported++] = sc->seq;
        if (it->state != ST_ITER_ACTIVE || sc->seq >= it->split_cursor ||
            state_split_finished(&d->st, it->id, sc->seq))
            continue;
        bool done = false;
        rc = coverage_merge(&d->cov, it->id, sc->seq, sc->ended, sc->total, sc->bounds,
                            sc->n_bounds, &done);
        if (rc == SLUICE_ERR_CORRUPT) {
            rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                         "split %" PRIu64 " was reported with %" PRIu64
                         " elements, and with another count before: its pipeline is not "
                         "deterministic",
                         sc->seq, sc->total);
            goto out;
        }
        if (rc < 0) {
            rc = err_set(err, errlen, rc, "%s", sluice_strerror(rc));
            goto out;
        }
        if (done)
            complete[ncomplete++] = sc->seq;
    }
    if (ncomplete > 0)
        rc = plan_splits_finished(&d->st, it->id, complete, ncomplete, &d->ups, err, errlen);
out:
    free(complete);
    return rc;
}

/* How many rounds to grant a consumer ahead of its progress (see ROUND_WINDOW_S). */
static uint64_t round_window(const Sluice__ClientHeartbeatRequest *req)
{
    double w = req->elements_per_second * ROUND_WINDOW_S;
    if (!(w >= ROUND_WINDOW_MIN))
        return ROUND_WINDOW_MIN;
    return w >= ROUND_WINDOW_MAX ? ROUND_WINDOW_MAX : (uint64_t)w;
}

static void on_client_heartbeat(struct dispatcher *d, struct rpc_conn *conn,
                                const Sluice__Envelope *env)
{
    const Sluice__ClientHeartbeatRequest *req = env->client_heartbeat;
    char err[ERRLEN];
    const struct st_client *cl = state_client(&d->st, req->client_id);
    if (!cl) {
        snprintf(err, sizeof err, "client %" PRIu64 " not found", req->client_id);
        refuse(conn, env->id, SLUICE_ERR_NOT_FOUND, err);
        return;
    }
    uint64_t iteration_id = req->iteration_id ? req->iteration_id : cl->iteration_id;
    if (!state_iteration(&d->st, iteration_id)) {
        snprintf(err, sizeof err, "iteration %" PRIu64 " not found", iteration_id);
        refuse(conn, env->id, SLUICE_ERR_NOT_FOUND, err);
        return;
    }
    if (iteration_id != cl->iteration_id) {
        snprintf(err, sizeof err, "client %" PRIu64 " reads iteration %" PRIu64 ", not %" PRIu64,
                 req->client_id, cl->iteration_id, iteration_id);
        refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    struct client_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    soft_set(&d->client_seen, req->client_id, uv_now(d->loop));
    observe_client_heartbeat(d->obs, req);
    c->client_id = req->client_id;
    c->iteration_id = iteration_id;
    const struct st_iteration *it = state_iteration(&d->st, iteration_id);
    uint64_t granted = 0;
    int rc = plan_coverage(d, req, it, c, err, sizeof err);
    if (rc == 0)
        rc = plan_client_heartbeat(&d->st, req->client_id, req->round, round_window(req), &d->ups,
                                   &granted, err, sizeof err);
    if (rc == 0 && client_view_take(d, c, it, req->round, granted) < 0)
        rc = err_set(err, sizeof err, SLUICE_ERR_NOMEM, "out of memory");
    if (rc < 0) {
        st_update_list_clear(&d->ups);
        refuse(conn, env->id, rc, err);
        client_ctx_free(c);
        return;
    }
    req_init(&c->r, d, conn, env->id);
    commit(d, &d->ups, client_heartbeat_done, c);
}

static void release_client_done(struct dispatcher *d, int status, void *ctx)
{
    struct client_ctx *c = ctx;
    if (status < 0) {
        refuse_commit(&c->r, status);
    } else {
        soft_del(&d->client_seen, c->client_id);
        Sluice__ReleaseClientReply body = SLUICE__RELEASE_CLIENT_REPLY__INIT;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_RELEASE_CLIENT_REPLY;
        env.release_client_reply = &body;
        send_reply(&c->r, &env);
    }
    req_done(&c->r);
    free(c);
}

static void on_release_client(struct dispatcher *d, struct rpc_conn *conn,
                              const Sluice__Envelope *env)
{
    char err[ERRLEN];
    struct client_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    c->client_id = env->release_client->client_id;
    int rc = plan_release_client(&d->st, c->client_id, &d->ups, err, sizeof err);
    if (rc < 0) {
        refuse(conn, env->id, rc, err);
        free(c);
        return;
    }
    req_init(&c->r, d, conn, env->id);
    commit(d, &d->ups, release_client_done, c);
}

/* ---- WorkerHeartbeat ------------------------------------------------------------------------- */

struct worker_ctx {
    struct req r;
    bool leaving; /* a deregistration: answered with an empty reply */
    uint64_t worker_id;
    uint64_t *reported; /* task ids the worker listed, sorted */
    size_t nreported;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool reported(const struct worker_ctx *c, uint64_t task_id)
{
    return c->nreported > 0 &&
           bsearch(&task_id, c->reported, c->nreported, sizeof *c->reported, cmp_u64) != NULL;
}

/* Position of address in --worker-addresses, or -1. */
static long worker_index(const struct dispatcher *d, const char *address)
{
    for (size_t i = 0; i < d->nworker_addresses; i++) {
        if (strcmp(d->worker_addresses[i], address) == 0)
            return (long)i;
    }
    return -1;
}

/* Fills def for task t (which must be this worker's); strings point into the state. */
static int fill_task_def(struct dispatcher *d, const struct st_task *t, const char *address,
                         Sluice__TaskDef *def)
{
    const struct st_iteration *it = state_iteration(&d->st, t->iteration_id);
    const struct st_job *job = it ? state_job(&d->st, it->job_id) : NULL;
    const struct st_dataset *ds = job ? state_dataset(&d->st, job->dataset_id) : NULL;
    const Sluice__DatasetDef *dd = ds ? dataset_def(d, ds) : NULL;
    if (!dd)
        return SLUICE_ERR_NOMEM; /* the rows exist (state invariants); only decoding can fail */
    Sluice__TaskDef init = SLUICE__TASK_DEF__INIT;
    *def = init;
    def->task_id = t->id;
    def->iteration_id = t->iteration_id;
    def->job_id = job->id;
    def->dataset_id = (char *)ds->id;
    def->dataset = (Sluice__DatasetDef *)dd;
    def->mode = (Sluice__ProcessingMode)job->mode;
    def->compression = (Sluice__Compression)ds->compression;
    def->num_consumers = job->num_consumers;
    if (static_mode(job->mode)) {
        long index = worker_index(d, address);
        if (index < 0)
            return SLUICE_ERR_INVALID;
        def->num_workers = (uint32_t)d->nworker_addresses;
        def->worker_index = (uint32_t)index;
    }
    return 0;
}

static void worker_heartbeat_done(struct dispatcher *d, int status, void *ctx)
{
    struct worker_ctx *c = ctx;
    const struct st_worker *w = state_worker(&d->st, c->worker_id);
    Sluice__TaskDef *defs = NULL, **ptrs = NULL;
    uint64_t *removed = NULL;
    size_t ndefs = 0, nremoved = 0;
    if (status < 0) {
        refuse_commit(&c->r, status);
        goto out;
    }
    if (c->leaving) {
        Sluice__WorkerHeartbeatReply body = SLUICE__WORKER_HEARTBEAT_REPLY__INIT;
        body.heartbeat_ms = d->worker_hb_ms;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY;
        env.worker_heartbeat_reply = &body;
        send_reply(&c->r, &env);
        goto out;
    }
    if (!w) {
        char msg[ERRLEN];
        snprintf(msg, sizeof msg, "worker %" PRIu64 " not found", c->worker_id);
        refuse(c->r.conn, c->r.id, SLUICE_ERR_NOT_FOUND, msg);
        goto out;
    }
    soft_set(&d->worker_seen, w->id, uv_now(d->loop));
    size_t n = 0;
    for (size_t i = 0; i < d->st.ntasks; i++)
        n += d->st.tasks[i].worker_id == w->id;
    defs = calloc(n ? n : 1, sizeof *defs);
    ptrs = calloc(n ? n : 1, sizeof *ptrs);
    removed = calloc(c->nreported ? c->nreported : 1, sizeof *removed);
    if (!defs || !ptrs || !removed) {
        refuse(c->r.conn, c->r.id, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    /* New: assigned, unfinished, and not yet known to the worker. */
    for (size_t i = 0; i < d->st.ntasks; i++) {
        const struct st_task *t = &d->st.tasks[i];
        if (t->worker_id != w->id || t->finished || reported(c, t->id))
            continue;
        int rc = fill_task_def(d, t, w->address, &defs[ndefs]);
        if (rc < 0) {
            char msg[ERRLEN];
            snprintf(msg, sizeof msg, "task %" PRIu64 ": %s", t->id,
                     rc == SLUICE_ERR_INVALID ? "worker address is not in --worker-addresses"
                                              : sluice_strerror(rc));
            refuse(c->r.conn, c->r.id, rc, msg);
            goto out;
        }
        ptrs[ndefs] = &defs[ndefs];
        ndefs++;
    }
    /* Removed: reported, but no longer this worker's. */
    for (size_t i = 0; i < c->nreported; i++) {
        const struct st_task *t = state_task(&d->st, c->reported[i]);
        if ((!t || t->worker_id != w->id) &&
            (nremoved == 0 || removed[nremoved - 1] != c->reported[i]))
            removed[nremoved++] = c->reported[i];
    }
    Sluice__WorkerHeartbeatReply body = SLUICE__WORKER_HEARTBEAT_REPLY__INIT;
    body.worker_id = w->id;
    body.n_new_tasks = ndefs;
    body.new_tasks = ptrs;
    body.n_removed_task_ids = nremoved;
    body.removed_task_ids = removed;
    body.heartbeat_ms = d->worker_hb_ms;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY;
    env.worker_heartbeat_reply = &body;
    send_reply(&c->r, &env);
out:
    free(defs);
    free(ptrs);
    free(removed);
    free(c->reported);
    req_done(&c->r);
    free(c);
}

static void on_worker_heartbeat(struct dispatcher *d, struct rpc_conn *conn,
                                const Sluice__Envelope *env)
{
    const Sluice__WorkerHeartbeatRequest *req = env->worker_heartbeat;
    char err[ERRLEN];
    uint64_t *finished = NULL;
    size_t nfinished = 0;
    int rc;
    if (d->nworker_addresses > 0 && worker_index(d, req->address) < 0) {
        snprintf(err, sizeof err, "worker address '%.*s' is not in --worker-addresses", ST_ADDR_MAX,
                 req->address);
        refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    struct worker_ctx *c = calloc(1, sizeof *c);
    if (c)
        c->reported = calloc(req->n_tasks ? req->n_tasks : 1, sizeof *c->reported);
    finished = calloc(req->n_tasks ? req->n_tasks : 1, sizeof *finished);
    if (!c || !c->reported || !finished) {
        rc = err_set(err, sizeof err, SLUICE_ERR_NOMEM, "out of memory");
        goto refused;
    }
    uint64_t now = uv_now(d->loop);
    for (size_t i = 0; i < req->n_tasks; i++) {
        const Sluice__TaskProgress *tp = req->tasks[i];
        if (!tp)
            continue;
        c->reported[c->nreported++] = tp->task_id;
        if (tp->finished)
            finished[nfinished++] = tp->task_id;
        if (tp->settled) {
            if (!soft_find(&d->settled_since, tp->task_id, NULL))
                soft_set(&d->settled_since, tp->task_id, now);
        } else {
            soft_del(&d->settled_since, tp->task_id);
        }
    }
    qsort(c->reported, c->nreported, sizeof *c->reported, cmp_u64);
    if (req->leaving) {
        /* A drained worker deregisters: what it still holds goes back to the pool. */
        const struct st_worker *lw = state_worker_by_address(&d->st, req->address);
        c->leaving = true;
        if (lw && lw->incarnation == rpc_conn_peer_incarnation(conn)) {
            log_info("worker %" PRIu64 " at %s deregistered", lw->id, lw->address);
            rc = plan_remove_worker(&d->st, lw->id, &d->ups, err, sizeof err);
            if (rc < 0)
                goto refused;
            soft_del(&d->worker_seen, lw->id);
        }
        free(finished);
        req_init(&c->r, d, conn, env->id);
        commit(d, &d->ups, worker_heartbeat_done, c);
        return;
    }
    rc = plan_worker_heartbeat(&d->st, req->address, rpc_conn_peer_incarnation(conn), finished,
                               nfinished, req->draining, &c->worker_id, &d->ups, err, sizeof err);
    if (rc < 0)
        goto refused;
    /* Before the commit, which forgets the figures of a worker it removes. */
    observe_worker_heartbeat(d->obs, c->worker_id, req);
    free(finished);
    req_init(&c->r, d, conn, env->id);
    commit(d, &d->ups, worker_heartbeat_done, c);
    return;

refused:
    refuse(conn, env->id, rc, err);
    free(finished);
    if (c)
        free(c->reported);
    free(c);
}

/* ---- GetSplits ------------------------------------------------------------------------------- */

struct splits_ctx {
    struct req r;
    uint64_t iteration_id;
    bool end;
    uint64_t *seqs;
    size_t nseqs;
};

static void get_splits_done(struct dispatcher *d, int status, void *ctx)
{
    struct splits_ctx *c = ctx;
    if (status < 0) {
        refuse_commit(&c->r, status);
    } else {
        const struct st_iteration *it = state_iteration(&d->st, c->iteration_id);
        Sluice__SplitPlan plan = SLUICE__SPLIT_PLAN__INIT;
        Sluice__GetSplitsReply body = SLUICE__GET_SPLITS_REPLY__INIT;
        body.n_seqs = c->nseqs;
        body.seqs = c->seqs;
        body.end_of_splits = c->end;
        if (it && it->distributed && it->state != ST_ITER_GC) {
            plan.source_len = it->plan.source_len;
            plan.split_size = it->plan.split_size;
            plan.per_pass = it->plan.per_pass;
            plan.passes = it->plan.passes;
            plan.n_paths = it->plan.npaths;
            plan.paths = it->plan.paths;
            body.plan = &plan;
        }
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS_REPLY;
        env.get_splits_reply = &body;
        send_reply(&c->r, &env);
    }
    req_done(&c->r);
    free(c->seqs);
    free(c);
}

static void on_get_splits(struct dispatcher *d, struct rpc_conn *conn, const Sluice__Envelope *env)
{
    const Sluice__GetSplitsRequest *req = env->get_splits;
    char err[ERRLEN];
    int rc;
    const struct st_task *t = state_task(&d->st, req->task_id);
    const struct st_worker *w = t ? state_worker(&d->st, t->worker_id) : NULL;
    /* A previous incarnation at the worker's address lost its tasks when the new one
     * registered; its late requests must not take splits. */
    if (w && w->incarnation != rpc_conn_peer_incarnation(conn)) {
        snprintf(err, sizeof err, "task %" PRIu64 " belongs to another worker incarnation",
                 req->task_id);
        refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    uint32_t max =
        req->max_splits < MAX_SPLITS_PER_REQUEST ? req->max_splits : MAX_SPLITS_PER_REQUEST;
    struct splits_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    /* A repeated request number plans nothing and is answered with the lease it got before;
     * its reply still waits in commit() for everything journaled before it, that lease too. */
    /* The seqs a worker reports finished are splits it produced; they stay leased to its task
     * until their consumers report them received (ClientHeartbeat), so they are not passed on:
     * if the worker dies first, they are leased again and nothing is lost. */
    rc = plan_get_splits_returning(&d->st, req->task_id, req->request_seq, NULL, 0, req->returned,
                                   req->n_returned, max, &d->ups, &c->seqs, &c->nseqs, &c->end, err,
                                   sizeof err);
    if (rc < 0) {
        refuse(conn, env->id, rc, err);
        free(c);
        return;
    }
    if (req->request_seq != 0 && req->request_seq == t->last_request && !t->finished)
        log_info("task %" PRIu64 ": request %" PRIu64 " repeated: its lease answers it again (%zu "
                 "splits still held)",
                 req->task_id, req->request_seq, c->nseqs);
    c->iteration_id = t->iteration_id;
    if (req->n_returned > 0)
        log_info("task %" PRIu64 " handed back %zu unstarted splits", req->task_id,
                 req->n_returned);
    if (c->nseqs > 0)
        soft_set(&d->leased_at, req->task_id, uv_now(d->loop));
    req_init(&c->r, d, conn, env->id);
    commit(d, &d->ups, get_splits_done, c);
}

/* ---- Status ---------------------------------------------------------------------------------- */

static void status_done(struct dispatcher *d, int status, void *ctx)
{
    struct req *r = ctx;
    char *json = NULL;
    struct status_extra extra;
    observe_status(d->obs, &d->st, &extra);
    if (status < 0) {
        refuse_commit(r, status);
    } else if (status_json_extra(&d->st, &extra, &json) < 0) {
        refuse(r->conn, r->id, SLUICE_ERR_NOMEM, "out of memory");
    } else {
        Sluice__StatusReply body = SLUICE__STATUS_REPLY__INIT;
        body.json = json;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_STATUS_REPLY;
        env.status_reply = &body;
        send_reply(r, &env);
    }
    free(json);
    req_done(r);
    free(r);
}

static void on_status(struct dispatcher *d, struct rpc_conn *conn, const Sluice__Envelope *env)
{
    struct req *r = calloc(1, sizeof *r);
    if (!r) {
        refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    req_init(r, d, conn, env->id);
    commit(d, &d->ups, status_done, r);
}

/* ---- dispatching requests -------------------------------------------------------------------- */

static void on_request(struct rpc_server *srv, struct rpc_conn *conn, const Sluice__Envelope *env,
                       void *user)
{
    struct dispatcher *d = user;
    if (d->closing)
        return;
    switch (env->body_case) {
    case SLUICE__ENVELOPE__BODY_REGISTER_DATASET:
        on_register_dataset(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_DATASET:
        on_get_dataset(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB:
        on_get_or_create_job(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT:
        on_client_heartbeat(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_RELEASE_CLIENT:
        on_release_client(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT:
        on_worker_heartbeat(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_GET_SPLITS:
        on_get_splits(d, conn, env);
        break;
    case SLUICE__ENVELOPE__BODY_STATUS:
        on_status(d, conn, env);
        break;
    default: {
        char msg[128];
        snprintf(msg, sizeof msg, "the dispatcher does not serve message %d", (int)env->body_case);
        refuse(conn, env->id, SLUICE_ERR_UNSUPPORTED, msg);
        break;
    }
    }
    /* Every handler leaves the scratch list empty: planned updates went to commit(). */
    if (d->ups.n > 0) {
        st_update_list_clear(&d->ups);
        fatal(d, "state: a handler left planned updates uncommitted");
    }
}

/* ---- the timer: evictions and garbage collection --------------------------------------------- */

static void tick_done(struct dispatcher *d, int status, void *ctx)
{
    (void)d;
    (void)status;
    (void)ctx;
}

static bool expired(struct soft_table *t, uint64_t id, uint64_t now, uint32_t timeout)
{
    struct soft *e = soft_find(t, id, NULL);
    if (!e) {
        soft_set(t, id, now);
        return false;
    }
    return now - e->t > timeout;
}

/* Deletes soft entries whose id the state no longer knows. */
static void soft_prune(struct soft_table *t, const struct state *s,
                       bool (*alive)(const struct state *, uint64_t))
{
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (alive(s, t->v[i].id))
            t->v[k++] = t->v[i];
    }
    t->n = k;
}

static bool worker_alive(const struct state *s, uint64_t id)
{
    return state_worker(s, id) != NULL;
}

static bool client_alive(const struct state *s, uint64_t id)
{
    return state_client(s, id) != NULL;
}

static bool task_alive(const struct state *s, uint64_t id)
{
    return state_task(s, id) != NULL;
}

static bool iteration_idle(const struct state *s, uint64_t id)
{
    const struct st_iteration *it = state_iteration(s, id);
    return it && it->state != ST_ITER_GC && state_iteration_clients(s, id) == 0;
}

/* Room for the ids of up to n rows. The timer collects the ids it acts on before acting,
 * because every commit changes the tables it walks. */
static uint64_t *id_buffer(size_t n, size_t *count)
{
    *count = 0;
    return malloc((n ? n : 1) * sizeof(uint64_t));
}

static void on_tick(uv_timer_t *timer)
{
    struct dispatcher *d = timer->data;
    if (d->fatal || d->closing)
        return;
    uint64_t now = uv_now(d->loop);
    char err[ERRLEN];
    size_t n;
    uint64_t *ids;

    soft_prune(&d->worker_seen, &d->st, worker_alive);
    soft_prune(&d->client_seen, &d->st, client_alive);
    soft_prune(&d->idle_since, &d->st, iteration_idle);
    soft_prune(&d->settled_since, &d->st, task_alive);
    soft_prune(&d->leased_at, &d->st, task_alive);
    for (size_t i = 0; i < d->cov.n;) {
        const struct st_iteration *it = state_iteration(&d->st, d->cov.v[i].iteration);
        if (it && it->state == ST_ITER_ACTIVE) {
            i++;
            continue;
        }
        coverage_forget_iteration(&d->cov, d->cov.v[i].iteration);
    }

    /* A task whose consumers fetched everything it produced, yet still holds splits nobody
     * reported received after a grace of several heartbeats, lost a reply on the way (a
     * connection dropped mid-reply): its splits are leased again, and consumers take only the
     * elements they miss. */
    uint32_t grace = reissue_grace_ms(d);
    if ((ids = id_buffer(d->settled_since.n, &n))) {
        for (size_t i = 0; i < d->settled_since.n; i++) {
            const struct soft *e = &d->settled_since.v[i];
            const struct st_task *t = state_task(&d->st, e->id);
            const struct soft *l = soft_find(&d->leased_at, e->id, NULL);
            if (t && t->leased.n > 0 && now - e->t > grace && (!l || now - l->t > grace))
                ids[n++] = e->id;
        }
        for (size_t i = 0; i < n; i++) {
            const struct st_task *t = state_task(&d->st, ids[i]);
            log_warn("task %" PRIu64 ": %zu splits produced and fetched were not reported "
                     "received within %" PRIu32 " ms: leasing them again",
                     ids[i], t ? t->leased.n : 0, grace);
            soft_del(&d->settled_since, ids[i]);
            if (plan_return_task_splits(&d->st, ids[i], &d->ups, err, sizeof err) < 0) {
                log_warn("returning the splits of task %" PRIu64 ": %s", ids[i], err);
                continue;
            }
            commit(d, &d->ups, tick_done, NULL);
        }
        free(ids);
    }

    if ((ids = id_buffer(d->st.nworkers, &n))) {
        for (size_t i = 0; i < d->st.nworkers; i++) {
            if (expired(&d->worker_seen, d->st.workers[i].id, now, d->worker_timeout_ms))
                ids[n++] = d->st.workers[i].id;
        }
        for (size_t i = 0; i < n; i++) {
            const struct st_worker *w = state_worker(&d->st, ids[i]);
            log_warn("worker %" PRIu64 " at %s sent no heartbeat for %" PRIu32 " ms: removing it",
                     ids[i], w ? w->address : "?", d->worker_timeout_ms);
            if (plan_remove_worker(&d->st, ids[i], &d->ups, err, sizeof err) < 0) {
                log_warn("removing worker %" PRIu64 ": %s", ids[i], err);
                continue;
            }
            soft_del(&d->worker_seen, ids[i]);
            commit(d, &d->ups, tick_done, NULL);
        }
        free(ids);
    }

    if ((ids = id_buffer(d->st.nclients, &n))) {
        for (size_t i = 0; i < d->st.nclients; i++) {
            if (expired(&d->client_seen, d->st.clients[i].id, now, d->client_timeout_ms))
                ids[n++] = d->st.clients[i].id;
        }
        for (size_t i = 0; i < n; i++) {
            log_info("client %" PRIu64 " sent no heartbeat for %" PRIu32 " ms: releasing it",
                     ids[i], d->client_timeout_ms);
            if (plan_release_client(&d->st, ids[i], &d->ups, err, sizeof err) < 0) {
                log_warn("releasing client %" PRIu64 ": %s", ids[i], err);
                continue;
            }
            soft_del(&d->client_seen, ids[i]);
            commit(d, &d->ups, tick_done, NULL);
        }
        free(ids);
    }

    /* An iteration idle since the last tick that saw it so gets collected after the timeout;
     * the clock restarts whenever it has clients again (pruned above). */
    if ((ids = id_buffer(d->st.niterations, &n))) {
        for (size_t i = 0; i < d->st.niterations; i++) {
            const struct st_iteration *it = &d->st.iterations[i];
            if (iteration_idle(&d->st, it->id) &&
                expired(&d->idle_since, it->id, now, d->gc_timeout_ms))
                ids[n++] = it->id;
        }
        for (size_t i = 0; i < n; i++) {
            if (plan_gc_iteration(&d->st, ids[i], &d->ups, err, sizeof err) < 0) {
                log_warn("collecting iteration %" PRIu64 ": %s", ids[i], err);
                continue;
            }
            soft_del(&d->idle_since, ids[i]);
            commit(d, &d->ups, tick_done, NULL);
        }
        free(ids);
    }

    observe_tick(d->obs, &d->st, now);
}

/* ---- start and close ------------------------------------------------------------------------- */

static void dispatcher_free(struct dispatcher *d)
{
    journal_close(d->journal);
    free(d->work_dir);
    state_release(&d->st);
    st_update_list_release(&d->ups);
    free(d->worker_seen.v);
    free(d->client_seen.v);
    free(d->idle_since.v);
    free(d->settled_since.v);
    free(d->leased_at.v);
    coverage_release(&d->cov);
    observe_destroy(d->obs);
    for (size_t i = 0; i < d->ndefs; i++)
        sluice__dataset_def__free_unpacked(d->defs[i].def, NULL);
    free(d->defs);
    for (size_t i = 0; i < d->nworker_addresses; i++)
        free(d->worker_addresses[i]);
    free(d->worker_addresses);
    free(d);
}

static void on_journal_fail(void *user, int code, const char *msg)
{
    struct dispatcher *d = user;
    (void)code;
    fatal(d, "journal: %s: %s", d->work_dir, msg);
}

static void on_journal_commit(void *user, double seconds, size_t records)
{
    struct dispatcher *d = user;
    (void)records;
    observe_journal_commit(d->obs, seconds);
}

/* Fault-tolerant start: opens the journal, rebuilds the state from it, and takes the
 * incarnation it keeps (made on the first start), so workers and clients that reconnect see the
 * same dispatcher and keep their tasks. */
static int journal_recover(struct dispatcher *d, const struct dispatcher_opts *opts, char *err,
                           size_t errlen)
{
    char why[512];
    struct journal_recovery info;
    uint64_t inc = 0;
    d->work_dir = strdup(opts->work_dir);
    if (!d->work_dir)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "start: out of memory");
    d->snapshot_every = opts->snapshot_every ? opts->snapshot_every : DEFAULT_SNAPSHOT_EVERY;
    struct journal_opts jo = {
        .work_dir = opts->work_dir, .create = true, .map_max = opts->journal_max_bytes};
    state_release(&d->st);
    int rc = journal_thread_open(&jo, opts->recover_to_last_good, &d->journal, &d->st, &info, why,
                                 sizeof why);
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
    d->on_fatal = opts->on_fatal;
    d->user = opts->user;
    d->incarnation = rpc_new_incarnation();
    struct observe_config oc = {
        .window_ms = opts->autoscale_window_ms,
        .worker_timeout_ms = d->worker_timeout_ms,
        .client_timeout_ms = d->client_timeout_ms,
        .job_gc_timeout_ms = d->gc_timeout_ms,
        .worker_heartbeat_ms = d->worker_hb_ms,
        .client_heartbeat_ms = d->client_hb_ms,
    };
    rc = observe_create(&oc, NULL, uv_now(loop), &d->obs);
    if (rc < 0) {
        err_set(err, errlen, rc, "start: out of memory");
        goto fail;
    }
    if (opts->work_dir) {
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

    struct rpc_server_opts ro = {
        .host = opts->host,
        .port = opts->port,
        .role = SLUICE__ROLE__ROLE_DISPATCHER,
        .incarnation = d->incarnation,
        .on_request = on_request,
        .user = d,
    };
    rc = rpc_server_start(loop, &ro, &d->rpc, err, errlen);
    if (rc < 0)
        goto fail;

    /* The timer runs often enough that no deadline is overshot by more than a quarter. */
    uint32_t shortest = d->worker_timeout_ms;
    if (d->client_timeout_ms < shortest)
        shortest = d->client_timeout_ms;
    if (d->gc_timeout_ms < shortest)
        shortest = d->gc_timeout_ms;
    uint64_t interval = shortest / 4;
    /* The autoscaling window closes on the first tick at or after its end. */
    if (interval > observe_window_ms(d->obs))
        interval = observe_window_ms(d->obs);
    if (interval < 10)
        interval = 10;
    if (interval > 1000)
        interval = 1000;
    uv_timer_init(loop, &d->timer);
    d->timer.data = d;
    uv_timer_start(&d->timer, on_tick, interval, interval);
    *out = d;
    return 0;

fail:
    if (d->jt) {
        /* Nothing is queued yet: the thread stops at once; its handles close on the next run. */
        journal_thread_close(d->jt, NULL, NULL);
        d->jt = NULL;
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

int dispatcher_metrics_render(struct dispatcher *d, char **body, size_t *len)
{
    return observe_render(d->obs, &d->st, body, len);
}

static void maybe_finish_close(struct dispatcher *d)
{
    if (!d->closing || d->closing_parts > 0 || d->works)
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
    maybe_finish_close(d);
}

static void on_journal_closed(void *user)
{
    struct dispatcher *d = user;
    d->jt = NULL;
    d->closing_parts--;
    maybe_finish_close(d);
}

static void on_rpc_closed(void *user)
{
    struct dispatcher *d = user;
    d->rpc = NULL;
    d->closing_parts--;
    maybe_finish_close(d);
}

void dispatcher_close(struct dispatcher *d, void (*cb)(void *user), void *user)
{
    d->closing = true;
    d->close_cb = cb;
    d->close_user = user;
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
    /* Queued work is dropped; work already running finishes and its callback frees it. */
    for (struct job_ctx *c = d->works; c; c = c->next)
        uv_cancel((uv_req_t *)&c->work);
}
