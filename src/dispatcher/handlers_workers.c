/* RPC handlers for workers: WorkerHeartbeat and GetSplits. */

#include "plan.h"
#include "server_internal.h"

#include "coverage.h"

#include "common/cap.h"

/* A new incarnation may take over the address of a worker silent for this long: a process
 * restarted at the same address. One that heartbeats (a worker beats every worker_hb_ms) keeps
 * its address, so a peer that only knows its address and incarnation cannot displace it. */
static bool worker_replaceable(struct dispatcher *d, const char *address)
{
    const struct st_worker *w = state_worker_by_address(&d->st, address);
    if (!w)
        return true;
    /* Not heard from since this dispatcher started: counts as heard from now (see server.c),
     * and the timer tick records it so. */
    const struct soft *seen = dispatcher_soft_find(&d->worker_seen, w->id, NULL);
    uint64_t now = uv_now(d->loop);
    return seen && now - seen->t > 2 * (uint64_t)d->worker_hb_ms;
}

/* ---- WorkerHeartbeat ------------------------------------------------------------------------- */

struct worker_ctx {
    struct req r;
    bool leaving; /* a deregistration: answered with an empty reply */
    uint64_t worker_id;
    uint64_t *reported; /* task ids the worker listed, sorted */
    size_t nreported;
    /* Taken once the request's updates are applied (worker_reply_take), not when the reply
     * leaves, when later requests may have applied changes that are not durable yet: the tasks
     * new to the worker (assigned, unfinished, not listed) and those it listed that are no longer
     * its own. taken: they were; found: the worker was there; nomem: taking them failed. */
    uint64_t *fresh, *removed;
    size_t nfresh, nremoved;
    bool taken, found, nomem;
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

/* Fills def for task t (which must be this worker's); strings point into the state, the task's
 * secret into key. */
static int fill_task_def(struct dispatcher *d, const struct st_task *t, const char *address,
                         Sluice__TaskDef *def, uint8_t key[CAP_KEY_LEN])
{
    const struct st_iteration *it = state_iteration(&d->st, t->iteration_id);
    const struct st_job *job = it ? state_job(&d->st, it->job_id) : NULL;
    const struct st_dataset *ds = job ? state_dataset(&d->st, job->dataset_id) : NULL;
    const Sluice__DatasetDef *dd = ds ? dispatcher_dataset_def(d, ds) : NULL;
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
    def->cross_trainer_cache_bytes = job->xtc_bytes;
    def->weight = job->weight;
    /* A running save's task writes chunks into the snapshot directory instead of serving. */
    const struct st_save *sv = state_save_running(&d->st, it->id);
    if (sv)
        def->snapshot_path = sv->path;
    if (it->key.set) {
        cap_task_key(it->key.b, t->id, key);
        def->task_key.data = key;
        def->task_key.len = CAP_KEY_LEN;
    }
    if (mode_static(job->mode)) {
        long index = worker_index(d, address);
        if (index < 0)
            return SLUICE_ERR_INVALID;
        def->num_workers = (uint32_t)d->nworker_addresses;
        def->worker_index = (uint32_t)index;
    }
    return 0;
}

static void worker_reply_take(struct dispatcher *d, void *ctx)
{
    struct worker_ctx *c = ctx;
    const struct st_worker *w = state_worker(&d->st, c->worker_id);
    c->taken = true;
    if (c->leaving || !(c->found = w != NULL))
        return;
    /* New: assigned, unfinished, and not yet known to the worker. The worker's own tasks are
     * looked at, not every task of the cluster. */
    size_t nmine;
    const struct st_task_ref *mine = state_worker_tasks(&d->st, w->id, &nmine);
    c->fresh = calloc(nmine ? nmine : 1, sizeof *c->fresh);
    c->removed = calloc(c->nreported ? c->nreported : 1, sizeof *c->removed);
    if (!c->fresh || !c->removed) {
        c->nomem = true;
        return;
    }
    for (size_t i = 0; i < nmine; i++) {
        const struct st_task *t = state_task(&d->st, mine[i].task_id);
        if (t && !t->finished && !reported(c, t->id))
            c->fresh[c->nfresh++] = t->id;
    }
    /* Removed: reported, but no longer this worker's. */
    for (size_t i = 0; i < c->nreported; i++) {
        const struct st_task *t = state_task(&d->st, c->reported[i]);
        if ((!t || t->worker_id != w->id) &&
            (c->nremoved == 0 || c->removed[c->nremoved - 1] != c->reported[i]))
            c->removed[c->nremoved++] = c->reported[i];
    }
}

static void worker_heartbeat_done(struct dispatcher *d, int status, void *ctx)
{
    struct worker_ctx *c = ctx;
    const struct st_worker *w = state_worker(&d->st, c->worker_id);
    Sluice__TaskDef *defs = NULL, **ptrs = NULL;
    uint8_t(*keys)[CAP_KEY_LEN] = NULL;
    size_t ndefs = 0;
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
        goto out;
    }
    if (!c->taken)
        worker_reply_take(d, c);
    if (c->leaving) {
        Sluice__WorkerHeartbeatReply body = SLUICE__WORKER_HEARTBEAT_REPLY__INIT;
        body.heartbeat_ms = d->worker_hb_ms;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY;
        env.worker_heartbeat_reply = &body;
        dispatcher_send_reply(&c->r, &env);
        goto out;
    }
    if (!w || !c->found) {
        char msg[SLUICE_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "worker %" PRIu64 " not found", c->worker_id);
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOT_FOUND, msg);
        goto out;
    }
    if (c->nomem) {
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    dispatcher_soft_set(&d->worker_seen, w->id, uv_now(d->loop));
    dispatcher_worker_heard(d, w->id, c->r.conn);
    defs = calloc(c->nfresh ? c->nfresh : 1, sizeof *defs);
    ptrs = calloc(c->nfresh ? c->nfresh : 1, sizeof *ptrs);
    keys = calloc(c->nfresh ? c->nfresh : 1, sizeof *keys);
    if (!defs || !ptrs || !keys) {
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < c->nfresh; k++) {
        /* A task that a later change removed since goes in the next reply's removed list. */
        const struct st_task *t = state_task(&d->st, c->fresh[k]);
        if (!t)
            continue;
        int rc = fill_task_def(d, t, w->address, &defs[ndefs], keys[ndefs]);
        if (rc < 0) {
            char msg[SLUICE_ERRMSG_SIZE];
            snprintf(msg, sizeof msg, "task %" PRIu64 ": %s", t->id,
                     rc == SLUICE_ERR_INVALID ? "worker address is not in --worker-addresses"
                                              : sluice_strerror(rc));
            dispatcher_refuse(c->r.conn, c->r.id, rc, msg);
            goto out;
        }
        ptrs[ndefs] = &defs[ndefs];
        ndefs++;
    }
    Sluice__WorkerHeartbeatReply body = SLUICE__WORKER_HEARTBEAT_REPLY__INIT;
    body.worker_id = w->id;
    body.n_new_tasks = ndefs;
    body.new_tasks = ptrs;
    body.n_removed_task_ids = c->nremoved;
    body.removed_task_ids = c->removed;
    body.heartbeat_ms = d->worker_hb_ms;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY;
    env.worker_heartbeat_reply = &body;
    dispatcher_send_reply(&c->r, &env);
out:
    free(defs);
    free(ptrs);
    free(keys);
    free(c->fresh);
    free(c->removed);
    free(c->reported);
    dispatcher_req_done(&c->r);
    free(c);
}

void dispatcher_on_worker_heartbeat(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env)
{
    const Sluice__WorkerHeartbeatRequest *req = env->worker_heartbeat;
    char err[SLUICE_ERRMSG_SIZE];
    uint64_t *finished = NULL;
    struct plan_task_failure *failed = NULL;
    size_t nfinished = 0, nfailed = 0;
    int rc;
    if (name_check("worker address", req->address, NAME_ADDR_MAX, err, sizeof err) < 0) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    if (d->nworker_addresses > 0 && worker_index(d, req->address) < 0) {
        snprintf(err, sizeof err, "worker address '%.*s' is not in --worker-addresses", ST_ADDR_MAX,
                 req->address);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    struct worker_ctx *c = calloc(1, sizeof *c);
    if (c)
        c->reported = calloc(req->n_tasks ? req->n_tasks : 1, sizeof *c->reported);
    finished = calloc(req->n_tasks ? req->n_tasks : 1, sizeof *finished);
    failed = calloc(req->n_tasks ? req->n_tasks : 1, sizeof *failed);
    if (!c || !c->reported || !finished || !failed) {
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
        if (tp->failed)
            failed[nfailed++] = (struct plan_task_failure){tp->task_id, tp->error};
        if (tp->settled) {
            if (!dispatcher_soft_find(&d->settled_since, tp->task_id, NULL))
                dispatcher_soft_set(&d->settled_since, tp->task_id, now);
        } else {
            dispatcher_soft_del(&d->settled_since, tp->task_id);
        }
    }
    qsort(c->reported, c->nreported, sizeof *c->reported, cmp_u64);
    if (req->leaving) {
        /* A drained worker deregisters: what it still holds goes back to the pool. */
        const struct st_worker *lw = state_worker_by_address(&d->st, req->address);
        c->leaving = true;
        if (lw && lw->incarnation == rpc_conn_peer_incarnation(conn) &&
            !state_worker_key_ok(lw, req->worker_key.data, req->worker_key.len)) {
            ratelimit_warn(&d->refusals, uv_now(d->loop), "", rpc_conn_peer_name(conn),
                           "refused a deregistration of worker %" PRIu64 " at %s: wrong worker key",
                           lw->id, lw->address);
            rc = err_set(err, sizeof err, SLUICE_ERR_DENIED,
                         "worker at %s: the worker key does not match its registration",
                         lw->address);
            goto refused;
        }
        if (lw && lw->incarnation == rpc_conn_peer_incarnation(conn)) {
            log_info("worker %" PRIu64 " at %s deregistered", lw->id, lw->address);
            rc = plan_remove_worker(&d->st, lw->id, &d->ups, err, sizeof err);
            if (rc < 0)
                goto refused;
            dispatcher_soft_del(&d->worker_seen, lw->id);
            dispatcher_soft_del(&d->worker_conn, lw->id);
            dispatcher_soft_del(&d->worker_gone, lw->id);
        }
        free(finished);
        free(failed);
        dispatcher_req_init(&c->r, d, conn, env->id);
        dispatcher_commit_applied(d, &d->ups, worker_reply_take, worker_heartbeat_done, c);
        return;
    }
    struct plan_heartbeat_request hb = {
        .address = req->address,
        .incarnation = rpc_conn_peer_incarnation(conn),
        .key = req->worker_key.data,
        .key_len = req->worker_key.len,
        .may_replace = worker_replaceable(d, req->address),
        .host = req->host_id,
        .labels = (const char *const *)req->labels,
        .nlabels = req->n_labels,
        .task_slots = req->task_slots,
        .finished = finished,
        .nfinished = nfinished,
        .draining = req->draining,
    };
    rc = plan_worker_heartbeat(&d->st, &hb, &c->worker_id, &d->ups, err, sizeof err);
    if (rc == SLUICE_ERR_DENIED)
        ratelimit_warn(&d->refusals, uv_now(d->loop), "", rpc_conn_peer_name(conn),
                       "refused a heartbeat: %s", err);
    /* A failed task's iteration records the failure: it gets no more tasks on other workers,
     * and its readers get the message. */
    if (rc == 0 && nfailed > 0)
        rc = plan_tasks_failed(&d->st, c->worker_id, failed, nfailed, &d->ups, err, sizeof err);
    if (rc < 0) {
        st_update_list_clear(&d->ups);
        goto refused;
    }
    /* Before the commit, which forgets the figures of a worker it removes. */
    observe_worker_heartbeat(d->obs, c->worker_id, req);
    observe_task_heartbeat(d->obs, &d->st, c->worker_id, uv_now(d->loop), req);
    free(finished);
    free(failed);
    dispatcher_req_init(&c->r, d, conn, env->id);
    dispatcher_commit_worker(d, &d->ups, c->worker_id, worker_reply_take, worker_heartbeat_done, c);
    return;

refused:
    dispatcher_refuse(conn, env->id, rc, err);
    free(finished);
    free(failed);
    if (c)
        free(c->reported);
    free(c);
}

/* ---- GetSplits ------------------------------------------------------------------------------- */

/* Whether the dispatcher knows what every consumer of the iteration received (client_reported):
 * false after a restart until each has sent a heartbeat, was released, or the re-issue grace
 * has passed since the start. */
static bool coverage_known(struct dispatcher *d, uint64_t iteration_id)
{
    if (!dispatcher_coverage_settling(d))
        return true;
    for (size_t i = 0; i < d->st.nclients; i++) {
        const struct st_client *c = &d->st.clients[i];
        if (c->iteration_id == iteration_id &&
            !dispatcher_soft_find(&d->client_reported, c->id, NULL))
            return false;
    }
    return true;
}

struct splits_batch;

/* One GetSplits: on its own (r), or a request of a GetSplitsBatch (batch). */
struct splits_ctx {
    struct req r;
    struct splits_batch *batch;
    int code;  /* a batch's request: 0, or its refusal (or its commit's failure) */
    char *msg; /* the refusal's message (owned; NULL: out of memory) */
    uint64_t iteration_id;
    struct plan_splits_result lease;
    uint64_t dropped[HEDGE_PICK_MAX]; /* GetSplitsReply.dropped (hedge_take_drops) */
    size_t ndropped;
};

/* A GetSplitsBatch: its requests, planned and committed one by one, answered together once
 * the last is durable. */
struct splits_batch {
    struct req r;
    size_t n, pending;
    struct splits_ctx *v;
};

/* The resume entries of a lease: for each leased split some consumer received part of, what to
 * leave out and whom to serve it (coverage.h). Fills *out (NULL when none) and returns how many,
 * or SLUICE_ERR_NOMEM. Free with free_resume. */
static int lease_resume(const struct dispatcher *d, uint64_t iteration_id, const uint64_t *seqs,
                        size_t nseqs, Sluice__SplitResume ***out)
{
    *out = NULL;
    size_t n = 0;
    for (size_t i = 0; i < nseqs; i++) {
        const struct coverage_entry *e = coverage_find(&d->cov, iteration_id, seqs[i]);
        n += e && e->got.n > 0;
    }
    if (n == 0)
        return 0;
    Sluice__SplitResume **v = calloc(n, sizeof *v);
    if (!v)
        return SLUICE_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < nseqs && k < n; i++) {
        const struct coverage_entry *e = coverage_find(&d->cov, iteration_id, seqs[i]);
        if (!e || e->got.n == 0)
            continue;
        Sluice__SplitResume *r = malloc(sizeof *r);
        uint64_t *covered = malloc(2 * e->got.n * sizeof *covered);
        if (!r || !covered) {
            free(r);
            free(covered);
            for (size_t j = 0; j < k; j++) {
                free(v[j]->covered);
                free(v[j]);
            }
            free(v);
            return SLUICE_ERR_NOMEM;
        }
        sluice__split_resume__init(r);
        r->seq = seqs[i];
        for (size_t j = 0; j < e->got.n; j++) {
            covered[2 * j] = e->got.v[j].begin;
            covered[2 * j + 1] = e->got.v[j].end;
        }
        r->covered = covered;
        r->n_covered = 2 * e->got.n;
        /* A consumer that left gets nothing more; several owners: nobody in particular. */
        if (e->owner != COVERAGE_SHARED && state_client(&d->st, e->owner))
            r->owner = e->owner;
        log_debug("split %" PRIu64 " of iteration %" PRIu64 " leased leaving out %zu range(s) "
                  "consumers received, the first [%" PRIu64 ", %" PRIu64
                  "), for reader %016" PRIx64,
                  seqs[i], iteration_id, e->got.n, covered[0], covered[1], r->owner);
        v[k++] = r;
    }
    *out = v;
    return (int)k;
}

static void free_resume(Sluice__SplitResume **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i]->covered);
        free(v[i]);
    }
    free(v);
}

/* Appends the copies hedge_pick() chose to the lease the plan made (none of them is in it: the
 * plan leases splits no task holds) and records them. */
static int add_hedges(struct dispatcher *d, const struct st_task *t, struct plan_splits_result *l,
                      const uint64_t *hedges, size_t n)
{
    uint64_t *v = realloc(l->seqs, (l->nseqs + n) * sizeof *v);
    if (!v)
        return SLUICE_ERR_NOMEM;
    l->seqs = v;
    memcpy(v + l->nseqs, hedges, n * sizeof *v);
    l->nseqs += n;
    if (hedge_leased(&d->hedge, state_iteration(&d->st, t->iteration_id), t->id, hedges, n) < 0)
        log_warn("task %" PRIu64 ": out of memory noting hedged splits", t->id);
    observe_hedged(d->obs, n);
    log_info("task %" PRIu64 ": leased copies of %zu slow splits (from %" PRIu64 ")", t->id, n,
             hedges[0]);
    return 0;
}

/* Fills *body (with *plan and *resume, n_resume of them; free with free_resume) with c's lease.
 * Returns 0 or SLUICE_ERR_NOMEM. */
static int splits_reply(const struct dispatcher *d, const struct splits_ctx *c,
                        Sluice__GetSplitsReply *body, Sluice__SplitPlan *plan)
{
    const struct st_iteration *it = state_iteration(&d->st, c->iteration_id);
    sluice__split_plan__init(plan);
    sluice__get_splits_reply__init(body);
    body->n_seqs = c->lease.nseqs;
    body->seqs = c->lease.seqs;
    body->end_of_splits = c->lease.end;
    body->n_dropped = c->ndropped;
    body->dropped = (uint64_t *)c->dropped;
    if (it && it->distributed && it->state != ST_ITER_GC) {
        plan->source_len = it->plan.source_len;
        plan->split_size = it->plan.split_size;
        plan->per_pass = it->plan.per_pass;
        plan->passes = it->plan.passes;
        plan->n_paths = it->plan.npaths;
        plan->paths = it->plan.paths;
        body->plan = plan;
    }
    int n = lease_resume(d, c->iteration_id, c->lease.seqs, c->lease.nseqs, &body->resume);
    if (n < 0)
        return n;
    body->n_resume = (size_t)n;
    return 0;
}

static void get_splits_done(struct dispatcher *d, int status, void *ctx)
{
    struct splits_ctx *c = ctx;
    Sluice__SplitPlan plan;
    Sluice__GetSplitsReply body;
    if (status < 0 || (status = splits_reply(d, c, &body, &plan)) < 0) {
        dispatcher_refuse_commit(&c->r, status);
    } else {
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS_REPLY;
        env.get_splits_reply = &body;
        dispatcher_send_reply(&c->r, &env);
        free_resume(body.resume, body.n_resume);
    }
    dispatcher_req_done(&c->r);
    free(c->lease.seqs);
    free(c);
}

/* Checks and plans one GetSplits: returns 0 with the lease in c and its updates in d->ups, for
 * the caller to commit, or a negative code with the refusal in err (nothing planned). */
static int splits_plan(struct dispatcher *d, struct rpc_conn *conn,
                       const Sluice__GetSplitsRequest *req, struct splits_ctx *c, char *err,
                       size_t errlen)
{
    int rc;
    const struct st_task *t = state_task(&d->st, req->task_id);
    const struct st_worker *w = t ? state_worker(&d->st, t->worker_id) : NULL;
    /* A previous incarnation at the worker's address lost its tasks when the new one
     * registered; its late requests must not take splits. */
    if (w && w->incarnation != rpc_conn_peer_incarnation(conn)) {
        snprintf(err, errlen, "task %" PRIu64 " belongs to another worker incarnation",
                 req->task_id);
        return SLUICE_ERR_INVALID;
    }
    /* The incarnation is public; only the worker knows its secret. */
    if (w && !state_worker_key_ok(w, req->worker_key.data, req->worker_key.len)) {
        ratelimit_warn(&d->refusals, uv_now(d->loop), "", rpc_conn_peer_name(conn),
                       "refused GetSplits for task %" PRIu64 ": wrong worker key", req->task_id);
        snprintf(err, errlen, "task %" PRIu64 ": the worker key does not match its worker's",
                 req->task_id);
        return SLUICE_ERR_DENIED;
    }
    uint32_t max =
        req->max_splits < MAX_SPLITS_PER_REQUEST ? req->max_splits : MAX_SPLITS_PER_REQUEST;
    /* A repeated request number plans nothing and is answered with the lease it got before;
     * its reply still waits in commit() for everything journaled before it, that lease too. */
    /* The seqs a worker reports finished are splits it produced; they stay leased to its task
     * until their consumers report them received (ClientHeartbeat), so they are not passed on:
     * if the worker dies first, they are leased again and nothing is lost. */
    /* A save's task is the exception: it has no consumers, and it reports a split finished
     * only once the split's chunk is committed to disk, so its report finishes the split. */
    bool saving = t && state_save_running(&d->st, t->iteration_id);
    const struct st_iteration *tit = t ? state_iteration(&d->st, t->iteration_id) : NULL;
    const struct soft *bound =
        t ? dispatcher_soft_find(&d->lease_below, t->iteration_id, NULL) : NULL;
    /* Hedged splits (hedge.h) go first, so that a straggler's splits are copied during the
     * epoch, not only once the cursor runs out; the rest of the room is leased as usual. A
     * repeated request, a finished task and a draining worker get none. */
    uint64_t hedges[HEDGE_PICK_MAX];
    size_t nhedges = 0;
    const struct hedge_iter *hr = tit ? hedge_find(&d->hedge, tit->id) : NULL;
    if (hr && !saving && !t->finished && !(w && w->draining) &&
        !(req->request_seq != 0 && req->request_seq <= t->last_request))
        nhedges = hedge_pick(hr, tit, t->id, dispatcher_clock_ms(),
                             max < HEDGE_PICK_MAX ? max : HEDGE_PICK_MAX, hedges);
    struct plan_splits_request sr = {
        .task_id = req->task_id,
        .request_seq = req->request_seq,
        .finished = saving ? req->finished : NULL,
        .nfinished = saving ? req->n_finished : 0,
        .returned = req->returned,
        .nreturned = req->n_returned,
        .max = max - (uint32_t)nhedges,
        .lease_below = bound ? bound->t : 0,
        .pool_held = tit && tit->pool.n > 0 && !coverage_known(d, tit->id),
        .share = true,
    };
    /* A task's report of splits produced times its own production (hedge_produced). */
    if (hr && !saving && req->n_finished > 0)
        hedge_produced(&d->hedge, tit->id, t->id, req->finished, req->n_finished,
                       dispatcher_clock_ms());
    rc = plan_get_splits(&d->st, &sr, &c->lease, &d->ups, err, errlen);
    if (rc < 0)
        return rc;
    if (nhedges > 0 && !c->lease.end && add_hedges(d, t, &c->lease, hedges, nhedges) < 0)
        log_warn("task %" PRIu64 ": out of memory leasing hedged splits: none this time",
                 req->task_id);
    c->ndropped = hedge_take_drops(&d->hedge, t->iteration_id, t->id, c->dropped, HEDGE_PICK_MAX);
    /* Splits from the pool start new productions (relet.h); the pool is as it was before this
     * lease until the commit applies it. */
    const struct st_job *tjob = tit ? state_job(&d->st, tit->job_id) : NULL;
    uint64_t leased_ms = dispatcher_clock_ms();
    for (size_t i = 0; tjob && tjob->deterministic && i < c->lease.nseqs; i++) {
        if (state_split_pooled(&d->st, tit->id, c->lease.seqs[i]) &&
            relet_note(&d->relet, tit->id, c->lease.seqs[i], leased_ms) < 0)
            log_warn("iteration %" PRIu64 ": out of memory noting split %" PRIu64
                     " leased again: a reader's late request may have it produced twice",
                     tit->id, c->lease.seqs[i]);
    }
    if (req->request_seq != 0 && req->request_seq == t->last_request && !t->finished)
        log_info("task %" PRIu64 ": request %" PRIu64 " repeated: its lease answers it again (%zu "
                 "splits still held)",
                 req->task_id, req->request_seq, c->lease.nseqs);
    c->iteration_id = t->iteration_id;
    if (req->n_returned > 0)
        log_info("task %" PRIu64 " handed back %zu unstarted splits", req->task_id,
                 req->n_returned);
    if (c->lease.nseqs > 0)
        dispatcher_soft_set(&d->leased_at, req->task_id, uv_now(d->loop));
    return 0;
}

void dispatcher_on_get_splits(struct dispatcher *d, struct rpc_conn *conn,
                              const Sluice__Envelope *env)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct splits_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    int rc = splits_plan(d, conn, env->get_splits, c, err, sizeof err);
    if (rc < 0) {
        dispatcher_refuse(conn, env->id, rc, err);
        free(c);
        return;
    }
    dispatcher_req_init(&c->r, d, conn, env->id);
    dispatcher_commit(d, &d->ups, get_splits_done, c);
}

/* ---- GetSplitsBatch -------------------------------------------------------------------------- */

/* Every request of the batch is durable (or refused): one reply with a result for each. */
static void batch_reply(struct dispatcher *d, struct splits_batch *b)
{
    struct out {
        Sluice__GetSplitsResult res;
        Sluice__GetSplitsReply body;
        Sluice__SplitPlan plan;
    } *out = calloc(b->n, sizeof *out);
    Sluice__GetSplitsResult **results = calloc(b->n, sizeof *results);
    if (!out || !results) {
        dispatcher_refuse(b->r.conn, b->r.id, SLUICE_ERR_NOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < b->n; i++) {
            struct splits_ctx *c = &b->v[i];
            sluice__get_splits_result__init(&out[i].res);
            results[i] = &out[i].res;
            if (c->code == 0 && splits_reply(d, c, &out[i].body, &out[i].plan) < 0) {
                c->code = SLUICE_ERR_NOMEM;
                out[i].body.n_resume = 0;
            }
            if (c->code == 0) {
                out[i].res.reply = &out[i].body;
            } else {
                out[i].res.code = c->code;
                out[i].res.message = c->msg ? c->msg : "out of memory";
            }
        }
        Sluice__GetSplitsBatchReply body = SLUICE__GET_SPLITS_BATCH_REPLY__INIT;
        body.n_results = b->n;
        body.results = results;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH_REPLY;
        env.get_splits_batch_reply = &body;
        dispatcher_send_reply(&b->r, &env);
        for (size_t i = 0; i < b->n; i++) {
            if (out[i].res.reply)
                free_resume(out[i].body.resume, out[i].body.n_resume);
        }
    }
    free(out);
    free(results);
    dispatcher_req_done(&b->r);
    for (size_t i = 0; i < b->n; i++) {
        free(b->v[i].lease.seqs);
        free(b->v[i].msg);
    }
    free(b->v);
    free(b);
}

static void batch_part_done(struct dispatcher *d, int status, void *ctx)
{
    struct splits_ctx *c = ctx;
    if (status < 0) {
        c->code = status == SLUICE_ERR_CLOSED ? SLUICE_ERR_UNAVAILABLE : status;
        c->msg = strdup("the dispatcher cannot record changes: it has failed");
    }
    if (--c->batch->pending == 0)
        batch_reply(d, c->batch);
}

void dispatcher_on_get_splits_batch(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env)
{
    const Sluice__GetSplitsBatchRequest *req = env->get_splits_batch;
    char err[SLUICE_ERRMSG_SIZE];
    if (req->n_requests == 0 || req->n_requests > MAX_SPLITS_BATCH) {
        snprintf(err, sizeof err,
                 "a GetSplitsBatch carries 1 to %d requests, this one %zu: refused whole",
                 MAX_SPLITS_BATCH, req->n_requests);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    struct splits_batch *b = calloc(1, sizeof *b);
    struct splits_ctx *v = calloc(req->n_requests, sizeof *v);
    if (!b || !v) {
        free(b);
        free(v);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    b->n = req->n_requests;
    b->v = v;
    observe_batched(d->obs, b->n);
    /* One more than the requests until all are committed: a commit may call back at once
     * (without a journal, or once the dispatcher failed). */
    b->pending = b->n + 1;
    dispatcher_req_init(&b->r, d, conn, env->id);
    for (size_t i = 0; i < b->n; i++) {
        struct splits_ctx *c = &v[i];
        c->batch = b;
        /* Each request is planned on the state the ones before it changed: their commits
         * applied it (two requests for one iteration never lease one split twice). */
        c->code = splits_plan(d, conn, req->requests[i], c, err, sizeof err);
        if (c->code < 0) {
            c->msg = strdup(err);
            b->pending--;
            continue;
        }
        dispatcher_commit(d, &d->ups, batch_part_done, c);
    }
    if (--b->pending == 0)
        batch_reply(d, b);
}
