/* RPC handlers for clients: ClientHeartbeat and ReleaseClient. */

#include "plan.h"
#include "server_internal.h"

#include "common/cap.h"
#include "common/fnv.h"

bool dispatcher_client_key_ok(const struct dispatcher *d, const struct st_client *cl,
                              const uint8_t *key, size_t len, char *err, size_t errlen)
{
    const struct st_iteration *it = state_iteration(&d->st, cl->iteration_id);
    if (!it || !it->key.set || cap_client_ok(it->key.b, cl->id, key, len))
        return true;
    snprintf(err, errlen, "client %" PRIu64 ": wrong client key: not a consumer of job %" PRIu64,
             cl->id, it->job_id);
    return false;
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
    uint64_t *reported; /* split seqs the client reported coverage of; the finished ones first */
    size_t nreported;
    /* Taken once this request's updates are applied (client_heartbeat_applied): of the reported
     * splits, how many are finished (the first nfinished of reported), and whether the iteration
     * finished or failed. A client stops reporting a split it is told finished, and a reader
     * ends when told its iteration did: told of a finish that a change of leader or a crash then
     * takes back, a shared job's other reader would get that split's elements again. */
    size_t nfinished;
    bool applied, iteration_finished, nomem;
    char *iteration_error;
    /* What the reply says of the iteration's tasks and rounds, taken when the request was
     * planned: a later request's changes may not be durable yet when this reply leaves, and a
     * consumer must never act on a schedule or a grant that a crash could take back. */
    Sluice__TaskInfo *infos;
    Sluice__TaskInfo **info_ptrs;
    uint8_t (*info_keys)[CAP_KEY_LEN]; /* each task's capability for this client */
    size_t ninfos;
    uint64_t tasks_digest;
    bool tasks_unchanged; /* the client holds the list: infos is empty */
    uint64_t rounds_granted;
    uint64_t finished_below; /* state_splits_finished_below when planned */
    bool redo_deferred;      /* the request's redo seqs are to be asked for again */
    Sluice__RoundEpoch *epochs;
    Sluice__RoundEpoch **epoch_ptrs;
    size_t nepochs;
};

static void client_ctx_free(struct client_ctx *c)
{
    for (size_t i = 0; i < c->ninfos; i++) {
        free(c->infos[i].worker_address);
        free(c->infos[i].worker_host_id);
    }
    for (size_t i = 0; i < c->nepochs; i++)
        free(c->epochs[i].task_ids);
    free(c->iteration_error);
    free(c->infos);
    free(c->info_ptrs);
    free(c->info_keys);
    free(c->epochs);
    free(c->epoch_ptrs);
    free(c->reported);
    free(c);
}

/* The digest of the task list client_view_take lists: its tasks by task id and worker id (a
 * task's worker always exists: a worker goes only once its tasks went). O(1): the state keeps
 * the sum of the tasks' mixes. Never 0, which means "no list". */
static uint64_t task_list_digest(const struct st_iteration *it)
{
    uint64_t h = it->tasks_sum ^ FNV1A_OFFSET;
    return h ? h : 1;
}

/* Copies the iteration's task list (unless the client holds one with the digest known, the
 * request's tasks_digest), and for a coordinated one its grant and the epochs from the one
 * holding round on, into c. Returns 0 or SLUICE_ERR_NOMEM. */
static int client_view_take(struct dispatcher *d, struct client_ctx *c,
                            const struct st_iteration *it, uint64_t known, uint64_t round,
                            uint64_t granted)
{
    size_t n;
    const struct st_task_ref *refs = state_iteration_tasks(&d->st, it->id, &n);
    c->tasks_digest = task_list_digest(it);
    c->tasks_unchanged = known != 0 && known == c->tasks_digest;
    if (c->tasks_unchanged)
        n = 0;
    c->infos = calloc(n ? n : 1, sizeof *c->infos);
    c->info_ptrs = calloc(n ? n : 1, sizeof *c->info_ptrs);
    c->info_keys = calloc(n ? n : 1, sizeof *c->info_keys);
    if (!c->infos || !c->info_ptrs || !c->info_keys)
        return SLUICE_ERR_NOMEM;
    /* An iteration's tasks were mostly created one per worker in the workers' order, so the
     * worker after the last one found is tried before a search. */
    size_t hint = 0;
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(&d->st, refs[i].task_id);
        if (!t)
            continue;
        const struct st_worker *w = hint < d->st.nworkers && d->st.workers[hint].id == t->worker_id
                                        ? &d->st.workers[hint]
                                        : state_worker(&d->st, t->worker_id);
        if (!w)
            continue;
        hint = (size_t)(w - d->st.workers) + 1;
        Sluice__TaskInfo *ti = &c->infos[c->ninfos];
        sluice__task_info__init(ti);
        ti->task_id = t->id;
        ti->iteration_id = t->iteration_id;
        ti->worker_incarnation = w->incarnation;
        ti->worker_host_id = NULL;
        c->info_ptrs[c->ninfos++] = ti;
        if (!(ti->worker_address = strdup(w->address)) ||
            !(ti->worker_host_id = strdup(w->host_id)))
            return SLUICE_ERR_NOMEM;
    }
    /* The client's capability for each task: derived once per client and task, then cached. */
    if (it->key.set && c->ninfos > 0) {
        uint64_t *ids = malloc(c->ninfos * sizeof *ids);
        if (!ids)
            return SLUICE_ERR_NOMEM;
        for (size_t i = 0; i < c->ninfos; i++)
            ids[i] = c->infos[i].task_id;
        capcache_client_keys(&d->caps, c->client_id, it->id, it->key.b, ids, c->ninfos,
                             c->info_keys);
        free(ids);
        for (size_t i = 0; i < c->ninfos; i++) {
            c->infos[i].client_key.data = c->info_keys[i];
            c->infos[i].client_key.len = CAP_KEY_LEN;
        }
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

static void client_heartbeat_applied(struct dispatcher *d, void *ctx)
{
    struct client_ctx *c = ctx;
    const struct st_iteration *it = state_iteration(&d->st, c->iteration_id);
    if (!it)
        return;
    c->applied = true;
    c->iteration_finished = it->state == ST_ITER_FINISHED;
    if (it->error && !(c->iteration_error = strdup(it->error)))
        c->nomem = true;
    bool *fin = calloc(c->nreported ? c->nreported : 1, sizeof *fin);
    if (!fin || state_splits_finished_each(&d->st, it->id, c->reported, c->nreported, fin) < 0) {
        free(fin);
        c->nomem = true;
        return;
    }
    for (size_t i = 0; i < c->nreported; i++)
        if (fin[i])
            c->reported[c->nfinished++] = c->reported[i];
    free(fin);
}

static void client_heartbeat_done(struct dispatcher *d, int status, void *ctx)
{
    struct client_ctx *c = ctx;
    const struct st_iteration *it = state_iteration(&d->st, c->iteration_id);
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
        goto out;
    }
    if (!it || !c->applied) {
        char msg[SLUICE_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "iteration %" PRIu64 " not found", c->iteration_id);
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOT_FOUND, msg);
        goto out;
    }
    if (c->nomem) {
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    /* Of the splits reported, those finished: the client stops reporting them. */
    for (size_t i = 0; i < c->nfinished; i++)
        coverage_forget(&d->cov, it->id, c->reported[i]);
    Sluice__ClientHeartbeatReply body = SLUICE__CLIENT_HEARTBEAT_REPLY__INIT;
    body.n_tasks = c->ninfos;
    body.tasks = c->info_ptrs;
    body.tasks_digest = c->tasks_digest;
    body.tasks_unchanged = c->tasks_unchanged;
    body.n_finished_seqs = c->nfinished;
    body.finished_seqs = c->reported;
    body.iteration_finished = c->iteration_finished;
    body.iteration_error = c->iteration_error ? c->iteration_error : "";
    body.heartbeat_ms = d->client_hb_ms;
    body.rounds_granted = c->rounds_granted;
    body.splits_finished_below = c->finished_below;
    body.n_round_epochs = c->nepochs;
    body.round_epochs = c->epoch_ptrs;
    body.redo_deferred = c->redo_deferred;
    char waiting[SLUICE_ERRMSG_SIZE] = "";
    size_t ntasks;
    state_iteration_tasks(&d->st, it->id, &ntasks);
    if (ntasks == 0)
        plan_iteration_waiting(&d->st, it->id, waiting, sizeof waiting);
    body.waiting = waiting;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT_REPLY;
    env.client_heartbeat_reply = &body;
    dispatcher_send_reply(&c->r, &env);
out:
    dispatcher_req_done(&c->r);
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
    bool *finished = calloc(req->n_splits, sizeof *finished);
    size_t ncomplete = 0;
    int rc = 0;
    if (!c->reported || !complete || !finished) {
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
    }
    /* Which reported splits are finished already, all at once (planning changes nothing yet). */
    if (state_splits_finished_each(&d->st, it->id, c->reported, c->nreported, finished) < 0) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0, k = 0; i < req->n_splits; i++) {
        const Sluice__SplitCoverage *sc = req->splits[i];
        if (!sc)
            continue;
        bool already = finished[k++];
        if (it->state != ST_ITER_ACTIVE || sc->seq >= it->split_cursor || already)
            continue;
        if (sc->had) {
            /* The consumer had it whole before a restore (its elements were handed out then). */
            coverage_forget(&d->cov, it->id, sc->seq);
            complete[ncomplete++] = sc->seq;
            continue;
        }
        bool done = false;
        rc = coverage_merge(&d->cov, it->id, sc->seq, req->client_id, sc->ended, sc->total,
                            sc->bounds, sc->n_bounds, &done);
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
    free(finished);
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

/* Acting on a redo request needs two heartbeats this recent from every consumer of the
 * iteration: the clients heartbeat at least every second, and a worker hands a split to another
 * reader only after its first one took nothing of it for 5 s, so such a first reader reported
 * what it had. */
#define REDO_HEARD_MS 3000

/* A deterministic reader's redo requests (ClientHeartbeatRequest.redo_seqs): the splits whose
 * production it saw end short go back to the pool. With the tasks and ages of those productions
 * (every client that sends them), a split leased to another task since, or leased again after the
 * reader received that end (relet.h), has a new production under way and is left alone. */
static int redo_splits(struct dispatcher *d, const Sluice__ClientHeartbeatRequest *req,
                       uint64_t iteration_id, bool *deferred, char *err, size_t errlen)
{
    size_t n = req->n_redo_seqs;
    /* A split asked for is often one its first reader stopped taking for 5 s (the worker then
     * serves it to the next reader that asks, worker/splitown.h): a first reader not heard from
     * twice within REDO_HEARD_MS may hold positions of it it has not reported, and a production
     * leaving out only what was reported would hand them to this reader too. Such requests are not
     * acted on now: the reply says so (redo_deferred) and the reader asks again with its next
     * heartbeat, until the silent one was heard from (its report then leaves out what it had) or
     * released. */
    if (!dispatcher_consumers_heard_since(d, iteration_id, uv_now(d->loop) - REDO_HEARD_MS)) {
        log_debug("client %016" PRIx64 " asks %zu split(s) of iteration %" PRIu64
                  " to be produced again, first %" PRIu64
                  ": not now, a consumer of the iteration sent fewer than 2 heartbeats in %d ms",
                  req->client_id, n, iteration_id, req->redo_seqs[0], REDO_HEARD_MS);
        *deferred = true;
        return 0;
    }
    bool named = req->n_redo_tasks == n && req->n_redo_ages_ms == n;
    uint64_t *seqs = malloc(2 * n * sizeof *seqs);
    if (!seqs)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    uint64_t *tasks = seqs + n, now = dispatcher_clock_ms();
    size_t k = 0, stale = 0;
    for (size_t i = 0; i < n; i++) {
        if (named &&
            relet_stale(&d->relet, iteration_id, req->redo_seqs[i], now, req->redo_ages_ms[i])) {
            stale++;
            continue;
        }
        seqs[k] = req->redo_seqs[i];
        tasks[k++] = named ? req->redo_tasks[i] : 0;
    }
    log_debug("client %016" PRIx64 " asks %zu split(s) of iteration %" PRIu64
              " to be produced again, first %" PRIu64 "; %zu leased again since it saw them",
              req->client_id, n, iteration_id, req->redo_seqs[0], stale);
    int rc =
        plan_splits_redo(&d->st, iteration_id, seqs, named ? tasks : NULL, k, &d->ups, err, errlen);
    free(seqs);
    return rc;
}

void dispatcher_on_client_heartbeat(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env)
{
    const Sluice__ClientHeartbeatRequest *req = env->client_heartbeat;
    char err[SLUICE_ERRMSG_SIZE];
    const struct st_client *cl = state_client(&d->st, req->client_id);
    if (!cl) {
        /* Most often a reader that was silent (stopped, starved of CPU, cut off) longer than
         * the client timeout: say so, since its read cannot go on. */
        snprintf(err, sizeof err,
                 "client %" PRIu64 " not found: released after %" PRIu32
                 " ms without a heartbeat (--client-timeout-ms), or never registered",
                 req->client_id, d->client_timeout_ms);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOT_FOUND, err);
        return;
    }
    if (!dispatcher_client_key_ok(d, cl, req->client_key.data, req->client_key.len, err,
                                  sizeof err)) {
        ratelimit_warn(&d->refusals, uv_now(d->loop), "", rpc_conn_peer_name(conn),
                       "refused a heartbeat for client %" PRIu64 ": wrong client key",
                       req->client_id);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_DENIED, err);
        return;
    }
    uint64_t iteration_id = req->iteration_id ? req->iteration_id : cl->iteration_id;
    if (!state_iteration(&d->st, iteration_id)) {
        snprintf(err, sizeof err, "iteration %" PRIu64 " not found", iteration_id);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOT_FOUND, err);
        return;
    }
    if (iteration_id != cl->iteration_id) {
        snprintf(err, sizeof err, "client %" PRIu64 " reads iteration %" PRIu64 ", not %" PRIu64,
                 req->client_id, cl->iteration_id, iteration_id);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    struct client_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    const struct soft *last = dispatcher_soft_find(&d->client_seen, req->client_id, NULL);
    if (last)
        dispatcher_soft_set(&d->client_seen_before, req->client_id, last->t);
    dispatcher_soft_set(&d->client_seen, req->client_id, uv_now(d->loop));
    dispatcher_client_heard(d, req->client_id, conn);
    const struct st_iteration *it = state_iteration(&d->st, iteration_id);
    observe_client_heartbeat(d->obs, it->job_id, req);
    observe_client_exposed(d->obs, req->client_id, it->job_id, uv_now(d->loop),
                           req->exposed_wait_us);
    c->client_id = req->client_id;
    c->iteration_id = iteration_id;
    uint64_t granted = 0;
    int rc = plan_coverage(d, req, it, c, err, sizeof err);
    if (rc == 0 && dispatcher_coverage_settling(d))
        dispatcher_soft_set(&d->client_reported, req->client_id, uv_now(d->loop));
    /* A deterministic reader lost part of these splits: they are produced again. Other jobs'
     * readers have no business asking, and are not refused a heartbeat for it. */
    const struct st_job *job = state_job(&d->st, it->job_id);
    bool det = job && job->deterministic && it->distributed;
    if (rc == 0 && det && req->n_redo_seqs > 0)
        rc = redo_splits(d, req, iteration_id, &c->redo_deferred, err, sizeof err);
    c->finished_below = state_splits_finished_below(&d->st, iteration_id);
    if (rc == 0 && det && req->lease_below > 0)
        dispatcher_soft_set(&d->lease_below, iteration_id, req->lease_below);
    /* Out of memory the iteration only goes without hedging until the next heartbeat. */
    if (rc == 0 && it->distributed &&
        hedge_set(&d->hedge, &d->st, iteration_id, req->hedge_factor, dispatcher_clock_ms()) < 0)
        log_warn("iteration %" PRIu64 ": out of memory: no hedged splits for now", iteration_id);
    if (rc == 0)
        rc = plan_client_heartbeat(&d->st, req->client_id, req->round, round_window(req), &d->ups,
                                   &granted, err, sizeof err);
    if (rc == 0 && client_view_take(d, c, it, req->tasks_digest, req->round, granted) < 0)
        rc = err_set(err, sizeof err, SLUICE_ERR_NOMEM, "out of memory");
    if (rc < 0) {
        st_update_list_clear(&d->ups);
        dispatcher_refuse(conn, env->id, rc, err);
        client_ctx_free(c);
        return;
    }
    dispatcher_req_init(&c->r, d, conn, env->id);
    dispatcher_commit_applied(d, &d->ups, client_heartbeat_applied, client_heartbeat_done, c);
}

static void release_client_done(struct dispatcher *d, int status, void *ctx)
{
    struct client_ctx *c = ctx;
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
    } else {
        dispatcher_soft_del(&d->client_seen, c->client_id);
        dispatcher_soft_del(&d->client_seen_before, c->client_id);
        dispatcher_soft_del(&d->client_reported, c->client_id);
        dispatcher_soft_del(&d->client_conn, c->client_id);
        dispatcher_soft_del(&d->client_gone, c->client_id);
        Sluice__ReleaseClientReply body = SLUICE__RELEASE_CLIENT_REPLY__INIT;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_RELEASE_CLIENT_REPLY;
        env.release_client_reply = &body;
        dispatcher_send_reply(&c->r, &env);
    }
    dispatcher_req_done(&c->r);
    free(c);
}

void dispatcher_on_release_client(struct dispatcher *d, struct rpc_conn *conn,
                                  const Sluice__Envelope *env)
{
    char err[SLUICE_ERRMSG_SIZE];
    const Sluice__ReleaseClientRequest *req = env->release_client;
    const struct st_client *cl = state_client(&d->st, req->client_id);
    if (cl && !dispatcher_client_key_ok(d, cl, req->client_key.data, req->client_key.len, err,
                                        sizeof err)) {
        ratelimit_warn(&d->refusals, uv_now(d->loop), "", rpc_conn_peer_name(conn),
                       "refused to release client %" PRIu64 ": wrong client key", req->client_id);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_DENIED, err);
        return;
    }
    struct client_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    c->client_id = req->client_id;
    /* Copies cut short since the client's last heartbeat, before its figures are forgotten. */
    const struct st_iteration *it = cl ? state_iteration(&d->st, cl->iteration_id) : NULL;
    if (it && req->copies_cut)
        observe_client_cut(d->obs, req->client_id, it->job_id, req->copies_cut);
    int rc = plan_release_client(&d->st, c->client_id, &d->ups, err, sizeof err);
    if (rc < 0) {
        dispatcher_refuse(conn, env->id, rc, err);
        free(c);
        return;
    }
    dispatcher_req_init(&c->r, d, conn, env->id);
    dispatcher_commit(d, &d->ups, release_client_done, c);
}
