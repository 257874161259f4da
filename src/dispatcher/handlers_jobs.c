/* RPC handlers for jobs and iterations: GetOrCreateJob, with its split plan built on the thread
 * pool for a new distributed_epoch iteration. */

#include "plan.h"
#include "server_internal.h"

#include "common/cap.h"
#include "common/hostid.h"

_Static_assert(ST_KEY_LEN == CAP_KEY_LEN, "an iteration's secret is a capability key");

/* ---- GetOrCreateJob -------------------------------------------------------------------------- */

struct job_ctx {
    struct req r;
    /* What is planned: its strings point into the arrays below, its resume (when the read is
     * restored from a checkpoint) to resume_view, which points into resume_bounds; its split
     * plan is set when planning. */
    struct plan_job_request job;
    char dataset_id[ST_ID_MAX];
    char job_name[ST_ID_MAX];
    char host[ST_HOST_MAX];         /* the reader's host id; "" unknown */
    char selector[ST_SELECTOR_MAX]; /* the job's worker selector, canonical; "" every worker */
    uint64_t repetition; /* a repeating reader's next pass (plan_job_repetition); 0: none */
    uint64_t *resume_bounds;
    struct plan_resume resume_view;
    struct plan_job_result ids; /* once planned */

    /* Building the split plan on the thread pool. */
    uv_work_t work;
    struct job_ctx *prev, *next; /* on d->works */
    uint8_t *def;
    size_t def_len;
    uint64_t split_size;
    const struct pipe_roots *roots; /* d's data roots; d outlives the work (d->works) */
    struct split_plan plan;
    int rc;
    char err[SLUICE_ERRMSG_SIZE];
};

static void job_ctx_free(struct job_ctx *c)
{
    free(c->def);
    free(c->resume_bounds);
    split_plan_release(&c->plan);
    free(c);
}

static void job_done(struct dispatcher *d, int status, void *ctx)
{
    struct job_ctx *c = ctx;
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
    } else {
        dispatcher_soft_set(&d->client_seen, c->ids.client_id, uv_now(d->loop));
        dispatcher_client_heard(d, c->ids.client_id, c->r.conn);
        if (dispatcher_coverage_settling(d))
            dispatcher_soft_set(&d->client_reported, c->ids.client_id, uv_now(d->loop));
        Sluice__GetOrCreateJobReply body = SLUICE__GET_OR_CREATE_JOB_REPLY__INIT;
        body.job_id = c->ids.job_id;
        body.iteration_id = c->ids.iteration_id;
        body.client_id = c->ids.client_id;
        body.heartbeat_ms = d->client_hb_ms;
        uint8_t key[CAP_KEY_LEN];
        const struct st_iteration *it = state_iteration(&d->st, c->ids.iteration_id);
        if (it && it->key.set) {
            cap_client_key(it->key.b, c->ids.client_id, key);
            body.client_key.data = key;
            body.client_key.len = sizeof key;
        }
        if (it)
            body.repetition = it->repetition;
        if (it && it->distributed) {
            body.plan_fingerprint = split_plan_fingerprint(&it->plan);
            body.split_total = it->split_total;
        }
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB_REPLY;
        env.get_or_create_job_reply = &body;
        dispatcher_send_reply(&c->r, &env);
    }
    dispatcher_req_done(&c->r);
    job_ctx_free(c);
}

int dispatcher_draw_iteration_keys(struct dispatcher *d, size_t from, char *err, size_t errlen)
{
    for (size_t i = from; i < d->ups.n; i++) {
        struct st_update *u = &d->ups.v[i];
        if (u->type != ST_ITERATION_CREATED)
            continue;
        int rc = cap_random(u->key.b);
        if (rc < 0) {
            err_set(err, errlen, rc, "drawing the iteration's secret: %s", sluice_strerror(rc));
            while (d->ups.n > from)
                st_update_release(&d->ups.v[--d->ups.n]);
            return rc;
        }
        u->key.set = true;
    }
    return 0;
}

static void repetition_collected(struct dispatcher *d, int status, void *ctx)
{
    /* A journal failure stops the dispatcher; the read that follows reports it. */
    (void)d;
    (void)status;
    (void)ctx;
}

/* ---- readers waiting for a repetition (struct rep_waiter) ----------------------------------- */

static struct rep_waiter *rep_waiter_find(struct dispatcher *d, uint64_t job_id,
                                          uint64_t repetition, uint64_t owner)
{
    for (size_t i = 0; i < d->nrep_waiters; i++) {
        struct rep_waiter *w = &d->rep_waiters[i];
        if (w->job_id == job_id && w->repetition == repetition && w->owner == owner)
            return w;
    }
    return NULL;
}

/* Notes (or refreshes) that owner waits to read repetition of job_id. */
static void rep_waiter_note(struct dispatcher *d, uint64_t job_id, uint64_t repetition,
                            uint64_t owner, uint64_t now)
{
    struct rep_waiter *w = rep_waiter_find(d, job_id, repetition, owner);
    if (w) {
        w->seen = now;
        return;
    }
    if (d->nrep_waiters >= REP_WAITERS_MAX)
        return;
    if (d->nrep_waiters % 16 == 0) {
        struct rep_waiter *v =
            realloc(d->rep_waiters, (d->nrep_waiters + 16) * sizeof *d->rep_waiters);
        if (!v)
            return;
        d->rep_waiters = v;
    }
    d->rep_waiters[d->nrep_waiters++] = (struct rep_waiter){job_id, repetition, owner, now};
}

static void rep_waiter_forget(struct dispatcher *d, uint64_t job_id, uint64_t repetition,
                              uint64_t owner)
{
    struct rep_waiter *w = rep_waiter_find(d, job_id, repetition, owner);
    if (w)
        *w = d->rep_waiters[--d->nrep_waiters];
}

/* Drops the waiters that have not asked again within the client timeout (a reader that gave up
 * or died), then counts those of job_id waiting for repetition, owner's own excepted. */
static size_t rep_waiters_for(struct dispatcher *d, uint64_t job_id, uint64_t repetition,
                              uint64_t owner, uint64_t now)
{
    size_t n = 0;
    for (size_t i = 0; i < d->nrep_waiters;) {
        struct rep_waiter *w = &d->rep_waiters[i];
        if (now - w->seen > d->client_timeout_ms) {
            *w = d->rep_waiters[--d->nrep_waiters];
            continue;
        }
        n += w->job_id == job_id && w->repetition == repetition && w->owner != owner;
        i++;
    }
    return n;
}

/* A repeating reader asks for repetition want of its named job, whose current repetition is
 * want - 1: the job moves on only once every reader that asked for that current repetition
 * while others still held the one before has joined it. Otherwise a reader waiting (with its
 * backoff) for repetition 1 would find the job at repetition 2, read whole by a faster reader
 * meanwhile. Returns 0, or SLUICE_ERR_UNAVAILABLE with err (the reader retries). */
static int rep_waiters_check(struct dispatcher *d, const struct job_ctx *c, uint64_t now, char *err,
                             size_t errlen)
{
    const struct st_job *job = state_job_by_key(&d->st, c->dataset_id, c->job_name);
    const struct st_iteration *cur = job ? state_iteration(&d->st, job->iteration_id) : NULL;
    if (!cur || cur->repetition + 1 != c->repetition || cur->state == ST_ITER_GC)
        return 0;
    size_t n = rep_waiters_for(d, job->id, cur->repetition, c->job.owner, now);
    if (n == 0)
        return 0;
    rep_waiter_note(d, job->id, c->repetition, c->job.owner, now);
    return err_set(err, errlen, SLUICE_ERR_UNAVAILABLE,
                   "job '%s': repetition %" PRIu64 " is still to be read by %zu reader%s that "
                   "asked for it; repetition %" PRIu64 " starts once they finish",
                   c->job_name, cur->repetition, n, n == 1 ? "" : "s", c->repetition);
}

/* Plans with the split plan (when one was built) and commits; takes c. */
static void job_plan_and_commit(struct dispatcher *d, struct job_ctx *c, bool have_plan)
{
    char err[SLUICE_ERRMSG_SIZE];
    /* A repeating reader's next pass: the job's previous repetition is collected first when
     * nobody holds it any more, in its own commit, so the read below plans against it. */
    size_t before = d->ups.n;
    uint64_t now = uv_now(d->loop);
    int rc = c->repetition ? rep_waiters_check(d, c, now, err, sizeof err) : 0;
    if (rc == 0)
        rc = plan_job_repetition(&d->st, c->dataset_id, c->job_name, c->repetition, &d->ups, err,
                                 sizeof err);
    /* A restored read of a named job nobody reads now starts from its checkpoint (when the plan
     * for a new iteration was built: a reader that left meanwhile is joined as planned). */
    if (rc == 0 && c->job.resume && have_plan)
        rc = plan_job_resume_fresh(&d->st, c->dataset_id, c->job_name, c->job.resume, &d->ups, err,
                                   sizeof err);
    /* Others still read the current repetition: this reader waits for the next one. */
    if (rc == SLUICE_ERR_UNAVAILABLE && c->repetition) {
        const struct st_job *job = state_job_by_key(&d->st, c->dataset_id, c->job_name);
        if (job)
            rep_waiter_note(d, job->id, c->repetition, c->job.owner, now);
    }
    if (rc == 0 && d->ups.n > before) {
        for (size_t i = before; i < d->ups.n; i++) {
            if (d->ups.v[i].type == ST_ITERATION_GC)
                dispatcher_soft_del(&d->idle_since, d->ups.v[i].id);
        }
        dispatcher_commit(d, &d->ups, repetition_collected, NULL);
    }
    size_t from = d->ups.n;
    if (rc == 0) {
        c->job.plan = have_plan ? &c->plan : NULL;
        rc = plan_get_or_create_job(&d->st, &c->job, &c->ids, &d->ups, err, sizeof err);
    }
    /* A new iteration's secret is drawn here, in the shell, and journaled with it. */
    if (rc == 0)
        rc = dispatcher_draw_iteration_keys(d, from, err, sizeof err);
    if (rc == 0 && c->repetition)
        rep_waiter_forget(d, c->ids.job_id, c->repetition, c->job.owner);
    if (rc < 0) {
        dispatcher_refuse(c->r.conn, c->r.id, rc, err);
        dispatcher_req_done(&c->r);
        job_ctx_free(c);
        return;
    }
    dispatcher_commit(d, &d->ups, job_done, c);
}

int dispatcher_split_dataset(const uint8_t *def, size_t def_len, const struct pipe_roots *roots,
                             uint64_t split_size, struct pipe_spec **spec,
                             struct pipe_split_provider *p, bool *decoded, char *why, size_t whylen)
{
    *spec = NULL;
    *decoded = false;
    int rc = pipe_spec_decode(def, def_len, spec, why, whylen);
    if (rc < 0)
        return rc;
    *decoded = true;
    rc = pipe_roots_check_source(roots, &(*spec)->source, why, whylen);
    if (rc == 0)
        rc = pipe_split_provider_init_confined(p, *spec, roots, split_size, why, whylen);
    if (rc < 0) {
        pipe_spec_free(*spec);
        *spec = NULL;
    }
    return rc;
}

void dispatcher_plan_take(struct pipe_split_provider *p, struct split_plan *plan)
{
    *plan = p->plan;
    memset(&p->plan, 0, sizeof p->plan);
    plan->kind = SPLIT_UNSET;
    plan->shuffled = false;
    plan->seed = 0;
}

/* On the thread pool: decode the definition and build the split plan. Touches only c. */
static void job_plan_work(uv_work_t *w)
{
    struct job_ctx *c = w->data;
    struct pipe_spec *spec;
    struct pipe_split_provider p;
    bool decoded;
    char why[SLUICE_ERRMSG_SIZE];
    c->rc = dispatcher_split_dataset(c->def, c->def_len, c->roots, c->split_size, &spec, &p,
                                     &decoded, why, sizeof why);
    if (c->rc < 0) {
        err_set(c->err, sizeof c->err, c->rc,
                decoded ? "splitting dataset '%s': %s" : "dataset '%s': %s", c->dataset_id, why);
        return;
    }
    pipe_spec_free(spec);
    dispatcher_plan_take(&p, &c->plan);
    pipe_split_provider_release(&p);
}

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
        dispatcher_req_done(&c->r);
        job_ctx_free(c);
        dispatcher_maybe_finish_close(d);
        return;
    }
    if (c->rc < 0) {
        dispatcher_refuse(c->r.conn, c->r.id, c->rc, c->err);
        dispatcher_req_done(&c->r);
        job_ctx_free(c);
        return;
    }
    job_plan_and_commit(d, c, true);
}

void dispatcher_on_get_or_create_job(struct dispatcher *d, struct rpc_conn *conn,
                                     const Sluice__Envelope *env)
{
    const Sluice__GetOrCreateJobRequest *req = env->get_or_create_job;
    char msg[SLUICE_ERRMSG_SIZE];
    int code = SLUICE_ERR_INVALID;
    const struct st_dataset *ds = NULL;

    if (!mode_valid(req->mode)) {
        snprintf(msg, sizeof msg, "unknown processing mode %d", (int)req->mode);
        goto refused;
    }
    enum sluice_mode mode = (enum sluice_mode)req->mode;
    /* Names are checked first: nothing below may store, log or echo a bad one. */
    if (name_check("job name", req->job_name, NAME_ID_MAX, msg, sizeof msg) < 0 ||
        name_check("dataset id", req->dataset_id, NAME_ID_MAX, msg, sizeof msg) < 0)
        goto refused;
    if (mode_static(mode) && d->nworker_addresses == 0) {
        snprintf(msg, sizeof msg, "mode %s needs --worker-addresses on the dispatcher",
                 mode_name(mode));
        goto refused;
    }
    if (req->num_consumers > 0 && req->job_name[0] == '\0') {
        snprintf(msg, sizeof msg, "num_consumers needs a job name");
        goto refused;
    }
    if (req->repetition > 0 && req->job_name[0] == '\0') {
        snprintf(msg, sizeof msg, "repetition needs a job name");
        goto refused;
    }
    if (req->num_consumers > 0 && req->consumer_index >= req->num_consumers) {
        snprintf(msg, sizeof msg, "consumer_index %" PRIu32 " is not below num_consumers %" PRIu32,
                 req->consumer_index, req->num_consumers);
        goto refused;
    }
    if (!target_workers_valid((int)req->target_workers)) {
        snprintf(msg, sizeof msg, "unknown target_workers %d", (int)req->target_workers);
        goto refused;
    }
    if (req->host_id[0] && hostid_check("host id", req->host_id, msg, sizeof msg) < 0)
        goto refused;
    /* The selector is parsed here, where the request's text lives, and kept as canonical text
     * (at most SELECTOR_TEXT_MAX bytes), which the plan parses again. */
    char selector[ST_SELECTOR_MAX] = "";
    if (req->worker_selector[0]) {
        struct selector sel;
        char why[SLUICE_ERRMSG_SIZE / 2];
        if (selector_parse(req->worker_selector, &sel, why, sizeof why) < 0) {
            snprintf(msg, sizeof msg, "worker selector: %s", why);
            goto refused;
        }
        selector_format(&sel, selector, sizeof selector);
    }
    ds = state_dataset(&d->st, req->dataset_id);
    if (!ds) {
        code = SLUICE_ERR_NOT_FOUND;
        snprintf(msg, sizeof msg, "dataset '%s' not found", req->dataset_id);
        goto refused;
    }
    /* Counted by address, which a peer cannot change by reconnecting with a new incarnation
     * (the per-client limit counts by incarnation, in the plan). */
    char addr[OWNERS_ADDR_MAX];
    const char *peer = rpc_conn_peer_name(conn);
    const char *colon = strrchr(peer, ':');
    snprintf(addr, sizeof addr, "%.*s", (int)(colon ? colon - peer : (ptrdiff_t)strlen(peer)),
             peer);
    if (owners_note(&d->owners, &d->st, rpc_conn_peer_incarnation(conn), addr) < 0) {
        code = SLUICE_ERR_NOMEM;
        snprintf(msg, sizeof msg, "out of memory");
        goto refused;
    }
    size_t held = owners_held(&d->owners, &d->st, addr);
    if (d->max_jobs_per_address && held >= d->max_jobs_per_address) {
        code = SLUICE_ERR_LIMIT;
        snprintf(msg, sizeof msg,
                 "job limit reached: clients at %s hold %zu jobs (--max-jobs-per-address)", addr,
                 held);
        goto refused;
    }

    /* Coordinated reads and cross-trainer caches need a pipeline that never ends; the plan
     * refuses one that does. The definition is small and decoding it touches no disk. */
    bool endless = false;
    if (req->num_consumers > 0 || req->cross_trainer_cache) {
        struct pipe_spec *spec = NULL;
        char why[SLUICE_ERRMSG_SIZE / 2]; /* quoted in a longer message */
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
    memcpy(c->dataset_id, req->dataset_id, strlen(req->dataset_id) + 1);
    memcpy(c->job_name, req->job_name, strlen(req->job_name) + 1);
    memcpy(c->host, req->host_id, strlen(req->host_id) + 1);
    memcpy(c->selector, selector, sizeof selector);
    c->repetition = req->repetition;
    c->job = (struct plan_job_request){
        .dataset_id = c->dataset_id,
        .job_name = c->job_name,
        .mode = mode,
        .num_consumers = req->num_consumers,
        .deterministic = req->deterministic,
        .target = (enum sluice_target_workers)req->target_workers,
        .host = c->host,
        .endless = endless,
        .owner = rpc_conn_peer_incarnation(conn),
        .selector = c->selector,
        .weight = req->weight,
        .min_workers = req->min_workers,
        .max_workers = req->max_workers,
    };
    if (req->cross_trainer_cache)
        c->job.xtc_bytes = req->cross_trainer_cache_bytes ? req->cross_trainer_cache_bytes
                                                          : SLUICE_CROSS_TRAINER_CACHE_BYTES;
    if (req->resume) {
        c->job.resume = &c->resume_view;
        c->resume_view.plan_fingerprint = req->resume_plan;
        c->resume_view.id = req->resume_id;
        c->resume_view.nbounds = req->n_resume_done;
        if (req->n_resume_done) {
            c->resume_bounds = malloc(req->n_resume_done * sizeof *c->resume_bounds);
            if (!c->resume_bounds) {
                free(c);
                code = SLUICE_ERR_NOMEM;
                snprintf(msg, sizeof msg, "out of memory");
                goto refused;
            }
            memcpy(c->resume_bounds, req->resume_done,
                   req->n_resume_done * sizeof *c->resume_bounds);
        }
        c->resume_view.bounds = c->resume_bounds;
    }
    dispatcher_req_init(&c->r, d, conn, env->id);

    /* A split plan is needed only when a distributed_epoch iteration will be created. */
    const struct st_job *job = state_job_by_key(&d->st, c->dataset_id, c->job_name);
    const struct st_iteration *cur = job ? state_iteration(&d->st, job->iteration_id) : NULL;
    bool joining = cur && cur->state != ST_ITER_GC &&
                   !(c->repetition && c->repetition == cur->repetition + 1) &&
                   !(c->job.resume &&
                     plan_job_resume_collects(&d->st, c->dataset_id, c->job_name, c->job.resume));
    if (mode != SLUICE_DISTRIBUTED_EPOCH || joining) {
        job_plan_and_commit(d, c, false);
        return;
    }
    c->def = malloc(ds->def_len ? ds->def_len : 1);
    if (!c->def) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        dispatcher_req_done(&c->r);
        job_ctx_free(c);
        return;
    }
    memcpy(c->def, ds->def, ds->def_len);
    c->def_len = ds->def_len;
    c->split_size = ds->split_size;
    c->roots = &d->roots;
    c->work.data = c;
    int rc = uv_queue_work(d->loop, &c->work, job_plan_work, job_plan_after);
    if (rc < 0) {
        snprintf(msg, sizeof msg, "queueing work: %s", uv_strerror(rc));
        dispatcher_refuse(conn, env->id, rc, msg);
        dispatcher_req_done(&c->r);
        job_ctx_free(c);
        return;
    }
    c->next = d->works;
    if (d->works)
        d->works->prev = c;
    d->works = c;
    return;

refused:
    dispatcher_refuse(conn, env->id, code, msg);
}

void dispatcher_jobs_cancel(struct dispatcher *d)
{
    /* Queued work is dropped; work already running finishes and its callback frees it. */
    for (struct job_ctx *c = d->works; c; c = c->next)
        uv_cancel((uv_req_t *)&c->work);
}
