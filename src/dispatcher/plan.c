/* The dispatcher's planning functions (plan_* in state.h): they read the state and append the
 * updates a request or a tick implies, or refuse with a code and a message. When one plan appends
 * several updates whose effects build on each other (a task finished, then its iteration
 * finished), the later decisions look at the updates already appended by the same call. */

#include "state_internal.h"

#include "common/hostid.h"
#include "common/names.h"

_Static_assert(NAME_ID_MAX < ST_ID_MAX && NAME_ADDR_MAX < ST_ADDR_MAX,
               "a valid name fits its field with the NUL");
_Static_assert(HOSTID_MAX < ST_HOST_MAX, "a valid host id fits its field with the NUL");

/* ---- planning -------------------------------------------------------------------------------- */

#define NOMEM_MSG(err, errlen) err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory")

static struct st_update *push(struct st_update_list *out, enum st_update_type type, uint64_t id)
{
    struct st_update *u = st_update_list_push(out, type);
    if (u)
        u->id = id;
    return u;
}

/* Whether the updates appended since start include one of type for id. */
static bool pending(const struct st_update_list *out, size_t start, enum st_update_type type,
                    uint64_t id)
{
    for (size_t i = start; i < out->n; i++) {
        if (out->v[i].type == type && out->v[i].id == id)
            return true;
    }
    return false;
}

/* The number of different workers with a finished task of the iteration, counting the tasks
 * finished by the updates appended since start. */
static uint32_t finished_workers(const struct state *s, const struct st_iteration *it,
                                 const struct st_update_list *out, size_t start)
{
    uint32_t n = 0;
    size_t nrefs;
    const struct st_task_ref *refs = state_iteration_tasks(s, it->id, &nrefs);
    for (size_t i = 0; i < nrefs; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t->iteration_id != it->id ||
            (!t->finished && !pending(out, start, ST_TASK_FINISHED, t->id)))
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) {
            const struct st_task *u = state_task(s, refs[j].task_id);
            seen = u->iteration_id == it->id && u->worker_id == t->worker_id &&
                   (u->finished || pending(out, start, ST_TASK_FINISHED, u->id));
        }
        n += !seen;
    }
    return n;
}

/* Whether the iteration is finished once the updates appended since start are applied: it has at
 * least one task left, every one finished, and (distributed) every split finished. The plans that
 * call this never lease splits or take them from the pool; returning leases (which refills the
 * pool) or creating a task rules finishing out. */
static bool iteration_finishes(const struct state *s, const struct st_iteration *it,
                               const struct st_update_list *out, size_t start)
{
    if (it->state != ST_ITER_ACTIVE)
        return false;
    uint64_t finished_now = 0;
    for (size_t i = start; i < out->n; i++) {
        const struct st_update *u = &out->v[i];
        if ((u->type == ST_ITERATION_FINISHED && u->id == it->id) ||
            (u->type == ST_TASK_CREATED && u->ref == it->id) ||
            ((u->type == ST_SPLITS_RETURNED || u->type == ST_SPLITS_LEASED) && u->ref == it->id))
            return false;
        if (u->type == ST_SPLITS_FINISHED && u->ref == it->id)
            finished_now += u->seqs.n;
    }
    size_t remaining = 0;
    size_t nrefs;
    const struct st_task_ref *refs = state_iteration_tasks(s, it->id, &nrefs);
    for (size_t i = 0; i < nrefs; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t->iteration_id != it->id || pending(out, start, ST_TASK_REMOVED, t->id))
            continue;
        remaining++;
        if (!t->finished && !pending(out, start, ST_TASK_FINISHED, t->id))
            return false;
    }
    if (remaining == 0)
        return false;
    /* Static sharding: each fixed worker holds one shard, so the data is complete only once as
     * many different workers finished their tasks (a worker that registers late must not find
     * its shard's iteration already over). */
    const struct st_job *job = state_job(s, it->job_id);
    if (job && mode_static(job->mode) && finished_workers(s, it, out, start) < s->static_workers)
        return false;
    if (it->distributed && (it->split_cursor != it->split_total || it->pool.n != 0 ||
                            it->splits_leased != finished_now))
        return false;
    return true;
}

/* Appends ITERATION_FINISHED for every iteration touched by a task finished or removed since
 * start that is now finished, in order of first mention. */
static int finish_touched(const struct state *s, struct st_update_list *out, size_t start)
{
    size_t end = out->n;
    for (size_t i = start; i < end; i++) {
        const struct st_update *u = &out->v[i];
        if (u->type != ST_TASK_FINISHED && u->type != ST_TASK_REMOVED)
            continue;
        const struct st_task *t = state_task(s, u->id);
        const struct st_iteration *it = t ? state_iteration(s, t->iteration_id) : NULL;
        if (!it || !iteration_finishes(s, it, out, start))
            continue;
        if (!push(out, ST_ITERATION_FINISHED, it->id))
            return SLUICE_ERR_NOMEM;
    }
    return 0;
}

/* ---- coordinated rounds ---- */

/* Whether the worker is draining once the updates appended since start are applied (a worker
 * registered by them is not, unless they also mark it draining). */
static bool worker_draining_after(const struct state *s, uint64_t worker_id,
                                  const struct st_update_list *out, size_t start)
{
    const struct st_worker *w = state_worker(s, worker_id);
    return (w && w->draining) || pending(out, start, ST_WORKER_DRAINING, worker_id);
}

/* Sets l to the tasks that serve rounds of iteration it_id once the updates appended since start
 * are applied: not removed, not finished, on a worker that is not draining; increasing ids. */
static int serving_tasks(const struct state *s, uint64_t it_id, const struct st_update_list *out,
                         size_t start, struct st_seq_list *l)
{
    l->n = 0;
    size_t nrefs;
    const struct st_task_ref *refs = state_iteration_tasks(s, it_id, &nrefs);
    for (size_t i = 0; i < nrefs; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t->iteration_id != it_id || t->finished ||
            pending(out, start, ST_TASK_REMOVED, t->id) ||
            pending(out, start, ST_TASK_FINISHED, t->id) ||
            worker_draining_after(s, t->worker_id, out, start))
            continue;
        if (state_seq_reserve(l, 1) < 0)
            return SLUICE_ERR_NOMEM;
        l->v[l->n++] = t->id; /* the table is sorted by id */
    }
    /* Tasks created by this plan have ids above every existing one, in the order appended. */
    for (size_t i = start; i < out->n; i++) {
        const struct st_update *u = &out->v[i];
        if (u->type != ST_TASK_CREATED || u->ref != it_id ||
            pending(out, start, ST_TASK_REMOVED, u->id) ||
            worker_draining_after(s, u->ref2, out, start))
            continue;
        if (state_seq_reserve(l, 1) < 0)
            return SLUICE_ERR_NOMEM;
        l->v[l->n++] = u->id;
    }
    return 0;
}

static bool seq_equal(const struct st_seq_list *a, const struct st_seq_list *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->v, b->v, a->n * sizeof *a->v) == 0);
}

/* Appends ROUNDS_SCHEDULED for every active coordinated iteration whose serving tasks differ,
 * once the updates appended since start are applied, from those of its latest epoch: the
 * change takes effect at the first round not granted yet, which no consumer has reached. */
static int plan_round_schedules(const struct state *s, struct st_update_list *out, size_t start)
{
    struct st_seq_list l = {0};
    int rc = 0;
    for (size_t i = 0; i < s->niterations; i++) {
        const struct st_iteration *it = &s->iterations[i];
        if (it->state != ST_ITER_ACTIVE || !state_iteration_coordinated(s, it) ||
            pending(out, start, ST_ITERATION_FINISHED, it->id) ||
            pending(out, start, ST_ITERATION_GC, it->id))
            continue;
        if ((rc = serving_tasks(s, it->id, out, start, &l)) < 0)
            break;
        static const struct st_seq_list none = {0};
        const struct st_seq_list *last = it->nepochs ? &it->epochs[it->nepochs - 1].tasks : &none;
        if (seq_equal(&l, last))
            continue;
        struct st_update *u = push(out, ST_ROUNDS_SCHEDULED, 0);
        if (!u || state_seq_assign(&u->seqs, l.v, l.n) < 0) {
            rc = SLUICE_ERR_NOMEM;
            break;
        }
        u->ref = it->id;
        u->ref2 = it->rounds_granted;
    }
    state_seq_release(&l);
    return rc;
}

int plan_register_dataset(const struct state *s, const char *id, const uint8_t *def, size_t def_len,
                          int compression, uint64_t split_size, const char *text, char *id_out,
                          struct st_update_list *out, char *err, size_t errlen)
{
    if (!id)
        id = "";
    int rc = name_check("dataset id", id, NAME_ID_MAX, err, errlen);
    if (rc < 0)
        return rc;
    uint64_t max_bytes = s->limits.max_pipeline_bytes;
    size_t text_len = text ? strlen(text) : 0;
    if (max_bytes && (def_len > max_bytes || text_len > max_bytes))
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "pipeline of %zu bytes is over the limit of %" PRIu64
                       " bytes (--max-pipeline-bytes)",
                       def_len > text_len ? def_len : text_len, max_bytes);
    if (*id) {
        const struct st_dataset *d = state_dataset(s, id);
        if (d) {
            if (d->def_len != def_len || (def_len && memcmp(d->def, def, def_len) != 0))
                return err_set(err, errlen, SLUICE_ERR_EXISTS,
                               "dataset '%s' already exists with a different pipeline", id);
            if (d->compression != compression)
                return err_set(err, errlen, SLUICE_ERR_EXISTS,
                               "dataset '%s' already exists with compression %s, not %s", id,
                               state_compression_name(d->compression),
                               state_compression_name(compression));
            if (d->split_size != split_size)
                return err_set(err, errlen, SLUICE_ERR_EXISTS,
                               "dataset '%s' already exists with split_size %" PRIu64
                               ", not %" PRIu64,
                               id, d->split_size, split_size);
            memcpy(id_out, id, strlen(id) + 1);
            return 0;
        }
    } else {
        for (size_t i = 0; i < s->ndatasets; i++) {
            const struct st_dataset *d = &s->datasets[i];
            if (d->generated && d->def_len == def_len &&
                (def_len == 0 || memcmp(d->def, def, def_len) == 0) &&
                d->compression == compression && d->split_size == split_size) {
                memcpy(id_out, d->id, strlen(d->id) + 1);
                return 0;
            }
        }
    }
    /* Only a new dataset counts: an existing one is still found when the limit is reached. */
    if (s->limits.max_datasets && s->ndatasets >= s->limits.max_datasets)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "dataset limit reached: %zu datasets (--max-datasets)", s->ndatasets);
    struct st_update *u = push(out, ST_DATASET_REGISTERED, 0);
    if (!u)
        return NOMEM_MSG(err, errlen);
    if (*id) {
        memcpy(u->name, id, strlen(id) + 1);
    } else {
        /* An explicit id may have taken a decimal name already: skip past it. */
        uint64_t n = s->next_dataset_id;
        for (;; n++) {
            snprintf(u->name, sizeof u->name, "%" PRIu64, n);
            if (!state_dataset(s, u->name))
                break;
        }
        u->id = n;
    }
    u->compression = compression;
    u->split_size = split_size;
    u->def_len = def_len;
    u->def = malloc(def_len ? def_len : 1);
    u->text = strdup(text ? text : "");
    if (!u->def || !u->text) {
        state_list_truncate(out, out->n - 1);
        return NOMEM_MSG(err, errlen);
    }
    if (def_len)
        memcpy(u->def, def, def_len);
    memcpy(id_out, u->name, strlen(u->name) + 1);
    return 0;
}

/* Whether a worker on host (its host id; "" unknown) may get a task of iteration_id of job j:
 * always, unless the job is read from local workers only; then when one of the iteration's
 * clients, or a client acquired by the updates appended to out since start, is on that host. */
static bool worker_serves(const struct state *s, const struct st_job *j, uint64_t iteration_id,
                          const char *host, const struct st_update_list *out, size_t start)
{
    if (!j || j->target_workers != SLUICE_TARGET_WORKERS_LOCAL)
        return true;
    if (!host[0])
        return false;
    for (size_t i = 0; i < s->nclients; i++) {
        const struct st_client *c = &s->clients[i];
        if (c->iteration_id == iteration_id && strcmp(c->host_id, host) == 0)
            return true;
    }
    for (size_t i = start; i < out->n; i++) {
        const struct st_update *u = &out->v[i];
        if (u->type == ST_CLIENT_ACQUIRED && u->ref == iteration_id &&
            strcmp(u->host_id, host) == 0)
            return true;
    }
    return false;
}

/* Whether a worker that is not draining runs on host (a non-empty host id). */
static bool host_has_worker(const struct state *s, const char *host)
{
    for (size_t i = 0; host[0] && i < s->nworkers; i++) {
        if (!s->workers[i].draining && strcmp(s->workers[i].host_id, host) == 0)
            return true;
    }
    return false;
}

/* Whether worker_id has a task of iteration_id. */
static bool worker_has_task_of(const struct state *s, uint64_t worker_id, uint64_t iteration_id)
{
    size_t n;
    const struct st_task_ref *refs = state_worker_tasks(s, worker_id, &n);
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t && t->iteration_id == iteration_id)
            return true;
    }
    return false;
}

/* Appends TASK_CREATED for the iteration on every non-draining worker, ids from *next_task; for
 * a job read from local workers only (local_host non-NULL), on those of local_host that have no
 * task of it yet. */
static int plan_tasks_for_iteration(const struct state *s, uint64_t iteration_id,
                                    const char *local_host, uint64_t *next_task,
                                    struct st_update_list *out)
{
    for (size_t i = 0; i < s->nworkers; i++) {
        if (s->workers[i].draining)
            continue;
        if (local_host && (strcmp(s->workers[i].host_id, local_host) != 0 ||
                           worker_has_task_of(s, s->workers[i].id, iteration_id)))
            continue;
        struct st_update *u = push(out, ST_TASK_CREATED, (*next_task)++);
        if (!u)
            return SLUICE_ERR_NOMEM;
        u->ref = iteration_id;
        u->ref2 = s->workers[i].id;
    }
    return 0;
}

/* Sets a new iteration's cursor and pool from the splits a restored reader had whole. */
static int resume_iteration(struct st_update *u, const struct st_resume *r, char *err,
                            size_t errlen)
{
    uint64_t total = split_plan_total(&u->plan);
    if (r->nbounds % 2)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "checkpoint: an odd number of split bounds");
    uint64_t prev = 0, gaps = 0;
    for (size_t i = 0; i < r->nbounds; i += 2) {
        uint64_t b = r->bounds[i], e = r->bounds[i + 1];
        if (b >= e || (i > 0 && b <= prev) || e > total)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint: its finished splits are not sorted ranges within the "
                           "%" PRIu64 " splits of the plan",
                           total);
        gaps += b - prev;
        if (gaps > ST_RESUME_POOL_MAX)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint: more than %u unfinished splits below its furthest "
                           "finished one",
                           ST_RESUME_POOL_MAX);
        prev = e;
    }
    if (state_seq_reserve(&u->seqs, (size_t)gaps) < 0)
        return NOMEM_MSG(err, errlen);
    prev = 0;
    for (size_t i = 0; i < r->nbounds; i += 2) {
        for (uint64_t v = prev; v < r->bounds[i]; v++)
            u->seqs.v[u->seqs.n++] = v;
        prev = r->bounds[i + 1];
    }
    u->start = prev;
    return 0;
}

/* The refusals of target workers that do not depend on the state. */
static int target_check(enum sluice_target_workers target, const char *host, enum sluice_mode mode,
                        uint32_t num_consumers, char *err, size_t errlen)
{
    if (!target_workers_valid((int)target))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "unknown target_workers %d", (int)target);
    if (host[0]) {
        int rc = hostid_check("host id", host, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (target == SLUICE_TARGET_WORKERS_ANY)
        return 0;
    /* As in tf.data service: every consumer of a round reads the same task, wherever it runs. */
    if (num_consumers > 0)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "target_workers %s cannot be combined with num_consumers: coordinated "
                       "reads need every worker",
                       target_workers_name(target));
    if (target == SLUICE_TARGET_WORKERS_LOCAL && mode_static(mode))
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "target_workers local cannot be used with mode %s: its shards are on the "
                       "--worker-addresses workers, wherever they run",
                       mode_name(mode));
    if (target == SLUICE_TARGET_WORKERS_LOCAL && !host[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "target_workers local needs the reader's host id");
    return 0;
}

/* The refusals of a cross-trainer cache that do not depend on the dataset. */
static int xtc_check(const char *job_name, enum sluice_mode mode, uint32_t num_consumers,
                     bool deterministic, uint64_t xtc_bytes, char *err, size_t errlen)
{
    if (!xtc_bytes)
        return 0;
    if (!job_name[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "cross_trainer_cache needs a job name: the trainers share one job");
    if (mode == SLUICE_DISTRIBUTED_EPOCH)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "cross_trainer_cache cannot be used with mode distributed_epoch: its splits "
                       "are handed out once, not shared between trainers");
    if (num_consumers > 0)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "cross_trainer_cache cannot be combined with num_consumers");
    if (deterministic)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "cross_trainer_cache cannot be combined with deterministic");
    if (xtc_bytes > ST_XTC_MAX_BYTES)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "cross_trainer_cache_bytes %" PRIu64 " is over the limit of %" PRIu64,
                       xtc_bytes, (uint64_t)ST_XTC_MAX_BYTES);
    return 0;
}

int plan_get_or_create_job(const struct state *s, const struct plan_job_request *req,
                           struct plan_job_result *res, struct st_update_list *out, char *err,
                           size_t errlen)
{
    const char *dataset_id = req->dataset_id;
    const char *job_name = req->job_name ? req->job_name : "";
    const char *host = req->host ? req->host : "";
    enum sluice_mode mode = req->mode;
    uint32_t num_consumers = req->num_consumers;
    bool deterministic = req->deterministic;
    uint64_t xtc_bytes = req->xtc_bytes;
    enum sluice_target_workers target = req->target;
    const struct split_plan *plan = req->plan;
    const struct st_resume *resume = req->resume;
    bool endless = req->endless;
    uint64_t owner = req->owner;
    if ((unsigned)mode >= MODE_COUNT)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "unknown processing mode %d", (int)mode);
    int xrc = xtc_check(job_name, mode, num_consumers, deterministic, xtc_bytes, err, errlen);
    if (xrc == 0)
        xrc = target_check(target, host, mode, num_consumers, err, errlen);
    if (xrc < 0)
        return xrc;
    if (deterministic && (mode != SLUICE_DISTRIBUTED_EPOCH || num_consumers > 0))
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "deterministic reads need mode distributed_epoch without num_consumers, "
                       "not %s%s",
                       mode_name(mode), num_consumers > 0 ? " with num_consumers" : "");
    int rc = name_check("job name", job_name, NAME_ID_MAX, err, errlen);
    if (rc == 0)
        rc = name_check("dataset id", dataset_id, NAME_ID_MAX, err, errlen);
    if (rc < 0)
        return rc;
    uint64_t max_jobs = s->limits.max_jobs_per_client;
    size_t held = state_owner_clients(s, owner);
    if (max_jobs && held >= max_jobs)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "job limit reached: this client holds %zu jobs (--max-jobs-per-client)",
                       held);
    const struct st_dataset *ds = state_dataset(s, dataset_id);
    if (!ds)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "dataset '%s' not found", dataset_id);
    /* Every round of a coordinated read gives each consumer one element: a pipeline that ends
     * would leave the last rounds short, or uneven between consumers. */
    if (num_consumers > 0 && !endless) {
        if (ds->text && ds->text[0])
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "num_consumers needs an infinite pipeline: '%s' ends; add repeat()",
                           ds->text);
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "num_consumers needs an infinite pipeline: dataset '%s' ends; add repeat()",
                       dataset_id);
    }
    /* Trainers sharing a cache read from where they join: a stream that ends would end for the
     * late ones before they had what the early ones had. */
    if (xtc_bytes && !endless) {
        if (ds->text && ds->text[0])
            return err_set(
                err, errlen, SLUICE_ERR_UNSUPPORTED,
                "cross_trainer_cache needs an infinite pipeline: '%s' ends; add repeat()",
                ds->text);
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "cross_trainer_cache needs an infinite pipeline: dataset '%s' ends; add "
                       "repeat()",
                       dataset_id);
    }

    /* Jobs are identified by (dataset, name), as in tf.data service: the same name on another
     * dataset is another job. */
    const struct st_job *job = state_job_by_key(s, dataset_id, job_name);
    const struct st_iteration *cur = NULL;
    if (job) {
        /* A collected job's key is free for another mode or consumer count: a new job takes it
         * (JOB_CREATED replaces the collected one). */
        const struct st_iteration *last = state_iteration(s, job->iteration_id);
        if (last && last->state == ST_ITER_GC &&
            (job->mode != mode || job->num_consumers != num_consumers ||
             job->deterministic != deterministic || job->xtc_bytes != xtc_bytes ||
             job->target_workers != target))
            job = NULL;
    }
    if (job) {
        if (job->mode != mode)
            return err_set(err, errlen, SLUICE_ERR_EXISTS, "job '%s' exists with mode %s, not %s",
                           job_name, mode_name(job->mode), mode_name(mode));
        if (job->num_consumers != num_consumers)
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "job '%s' exists with num_consumers %" PRIu32 ", not %" PRIu32, job_name,
                           job->num_consumers, num_consumers);
        if (job->deterministic != deterministic)
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "job '%s' exists with deterministic %s, not %s", job_name,
                           job->deterministic ? "true" : "false", deterministic ? "true" : "false");
        if ((job->xtc_bytes != 0) != (xtc_bytes != 0))
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "job '%s' exists with cross_trainer_cache %s, not %s", job_name,
                           job->xtc_bytes ? "on" : "off", xtc_bytes ? "on" : "off");
        if (job->xtc_bytes != xtc_bytes)
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "job '%s' exists with cross_trainer_cache_bytes %" PRIu64
                           ", not %" PRIu64,
                           job_name, job->xtc_bytes, xtc_bytes);
        if (job->target_workers != target)
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "job '%s' exists with target_workers %s, not %s", job_name,
                           target_workers_name(job->target_workers), target_workers_name(target));
        cur = state_iteration(s, job->iteration_id);
    }
    /* A local read needs a worker beside it: its tasks are created only there. */
    if (target == SLUICE_TARGET_WORKERS_LOCAL && !host_has_worker(s, host))
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                       "no local worker: target_workers local needs a worker on this host (host "
                       "id %s), and none is registered",
                       host);
    bool new_iteration = !cur || cur->state == ST_ITER_GC;
    if (new_iteration && mode == SLUICE_DISTRIBUTED_EPOCH && !plan)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "a distributed_epoch iteration needs a split plan");

    if (resume && mode != SLUICE_DISTRIBUTED_EPOCH)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "a checkpoint restores distributed_epoch reads only, not %s",
                       mode_name(mode));
    const struct split_plan *fit = new_iteration ? plan : &cur->plan;
    if (resume && split_plan_fingerprint(fit) != resume->plan_fingerprint)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the checkpoint does not fit dataset '%s': its split plan changed since "
                       "the checkpoint was taken (now %" PRIu64
                       " splits; its files, split size or pipeline differ)",
                       dataset_id, split_plan_total(fit));

    size_t start = out->n;
    uint64_t job_id = job ? job->id : s->next_job_id;
    uint64_t iteration_id = new_iteration ? s->next_iteration_id : cur->id;
    uint64_t next_task = s->next_task_id;
    struct st_update *u;
    if (!job) {
        if (!(u = push(out, ST_JOB_CREATED, job_id)))
            goto nomem;
        memcpy(u->name, job_name, strlen(job_name) + 1);
        memcpy(u->name2, dataset_id, strlen(dataset_id) + 1);
        u->mode = (int)mode;
        u->num_consumers = num_consumers;
        u->deterministic = deterministic;
        u->xtc_bytes = xtc_bytes;
        u->target_workers = (int)target;
    }
    if (new_iteration) {
        if (!(u = push(out, ST_ITERATION_CREATED, iteration_id)))
            goto nomem;
        u->ref = job_id;
        u->ref2 = cur ? cur->repetition + 1 : 0;
        u->distributed = mode == SLUICE_DISTRIBUTED_EPOCH;
        if (u->distributed && split_plan_copy(&u->plan, plan) < 0)
            goto nomem;
        if (resume && (rc = resume_iteration(u, resume, err, errlen)) < 0) {
            state_list_truncate(out, start);
            return rc;
        }
        size_t first_task = out->n;
        if (plan_tasks_for_iteration(s, iteration_id,
                                     target == SLUICE_TARGET_WORKERS_LOCAL ? host : NULL,
                                     &next_task, out) < 0)
            goto nomem;
        /* A coordinated iteration's rounds start with an epoch at round 0, of the tasks just
         * created (possibly none: consumers then wait for a worker). */
        if (num_consumers > 0) {
            if (!(u = push(out, ST_ROUNDS_SCHEDULED, 0)))
                goto nomem;
            u->ref = iteration_id;
            if (state_seq_reserve(&u->seqs, out->n - first_task) < 0)
                goto nomem;
            for (size_t i = first_task; i < out->n; i++) {
                if (out->v[i].type == ST_TASK_CREATED)
                    u->seqs.v[u->seqs.n++] = out->v[i].id;
            }
        }
    }
    /* A reader joining a local job from another host brings the job to that host's workers. */
    if (!new_iteration && target == SLUICE_TARGET_WORKERS_LOCAL && cur->state == ST_ITER_ACTIVE &&
        !cur->error && plan_tasks_for_iteration(s, iteration_id, host, &next_task, out) < 0)
        goto nomem;
    if (!(u = push(out, ST_CLIENT_ACQUIRED, s->next_client_id)))
        goto nomem;
    u->ref = iteration_id;
    u->incarnation = owner;
    memcpy(u->host_id, host, strlen(host) + 1);
    res->job_id = job_id;
    res->iteration_id = iteration_id;
    res->client_id = s->next_client_id;
    return 0;
nomem:
    state_list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}

int plan_job_repetition(const struct state *s, const char *dataset_id, const char *job_name,
                        uint64_t want, struct st_update_list *out, char *err, size_t errlen)
{
    if (want == 0 || !job_name || !job_name[0])
        return 0;
    const struct st_job *job = state_job_by_key(s, dataset_id, job_name);
    const struct st_iteration *cur = job ? state_iteration(s, job->iteration_id) : NULL;
    if (!cur)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                       "job '%s' of dataset '%s' not found (asked for its repetition %" PRIu64 ")",
                       job_name, dataset_id, want);
    bool gc = cur->state == ST_ITER_GC;
    if (cur->repetition == want && !gc)
        return 0;
    if (cur->repetition + 1 != want) {
        if (cur->repetition >= want)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "job '%s': repetition %" PRIu64
                           " was read without this reader; the job is at repetition %" PRIu64 "%s",
                           job_name, want, cur->repetition, gc ? " (collected)" : "");
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "job '%s': no repetition %" PRIu64 " to read next; the job is at "
                       "repetition %" PRIu64,
                       job_name, want, cur->repetition);
    }
    if (gc)
        return 0;
    size_t clients = state_iteration_clients(s, cur->id);
    if (clients > 0)
        return err_set(err, errlen, SLUICE_ERR_UNAVAILABLE,
                       "job '%s': repetition %" PRIu64 " is still being read by %zu reader%s; "
                       "repetition %" PRIu64 " starts once they finish",
                       job_name, cur->repetition, clients, clients == 1 ? "" : "s", want);
    return plan_gc_iteration(s, cur->id, out, err, errlen);
}

/* Appends the removal of task t: its leased splits back to the pool, the task removed. */
static int push_task_removal(const struct st_task *t, struct st_update_list *out)
{
    struct st_update *u;
    if (t->leased.n > 0) {
        if (!(u = push(out, ST_SPLITS_RETURNED, 0)))
            return SLUICE_ERR_NOMEM;
        u->ref = t->iteration_id;
        u->ref2 = t->id;
        if (state_seq_assign(&u->seqs, t->leased.v, t->leased.n) < 0)
            return SLUICE_ERR_NOMEM;
    }
    if (!(u = push(out, ST_TASK_REMOVED, t->id)))
        return SLUICE_ERR_NOMEM;
    u->ref = t->iteration_id;
    return 0;
}

/* Appends the removal of worker w: leases returned, tasks removed, the worker removed. */
static int plan_remove_worker_updates(const struct state *s, const struct st_worker *w,
                                      struct st_update_list *out)
{
    size_t nrefs;
    const struct st_task_ref *refs = state_worker_tasks(s, w->id, &nrefs);
    for (size_t i = 0; i < nrefs; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t->worker_id != w->id)
            continue;
        if (push_task_removal(t, out) < 0)
            return SLUICE_ERR_NOMEM;
    }
    if (!push(out, ST_WORKER_REMOVED, w->id))
        return SLUICE_ERR_NOMEM;
    return 0;
}

int plan_remove_worker(const struct state *s, uint64_t worker_id, struct st_update_list *out,
                       char *err, size_t errlen)
{
    const struct st_worker *w = state_worker(s, worker_id);
    if (!w)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "worker %" PRIu64 " not found",
                       worker_id);
    size_t start = out->n;
    if (plan_remove_worker_updates(s, w, out) < 0 || finish_touched(s, out, start) < 0 ||
        plan_round_schedules(s, out, start) < 0) {
        state_list_truncate(out, start);
        return NOMEM_MSG(err, errlen);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int plan_tasks_failed(const struct state *s, uint64_t worker_id,
                      const struct st_task_failure *failed, size_t nfailed,
                      struct st_update_list *out, char *err, size_t errlen)
{
    size_t start = out->n;
    for (size_t i = 0; i < nfailed; i++) {
        const struct st_task *t = state_task(s, failed[i].task_id);
        const struct st_iteration *it = t ? state_iteration(s, t->iteration_id) : NULL;
        /* The updates already in out (the same heartbeat's) count as applied: a task they
         * finish or remove, or an iteration they finish, fail or collect, is left alone, so the
         * list always applies whatever a worker reports. */
        if (!it || t->worker_id != worker_id || t->finished || it->state != ST_ITER_ACTIVE ||
            it->error || pending(out, 0, ST_TASK_FINISHED, t->id) ||
            pending(out, 0, ST_TASK_REMOVED, t->id) ||
            pending(out, 0, ST_ITERATION_FINISHED, it->id) ||
            pending(out, 0, ST_ITERATION_FAILED, it->id) ||
            pending(out, 0, ST_ITERATION_GC, it->id))
            continue;
        struct st_update *u = push(out, ST_ITERATION_FAILED, it->id);
        char msg[ST_ERROR_MAX + 1], *esc = name_escape_dup(failed[i].msg ? failed[i].msg : "");
        if (!u || !esc) {
            free(esc);
            state_list_truncate(out, start);
            return NOMEM_MSG(err, errlen);
        }
        /* Cut at a character: the escaped text is ASCII escapes and whole UTF-8 sequences. */
        int n =
            snprintf(msg, sizeof msg, "task %" PRIu64 ": %s", t->id, esc[0] ? esc : "task failed");
        free(esc);
        if (n > ST_ERROR_MAX) {
            size_t k = ST_ERROR_MAX;
            while (k > 0 && ((unsigned char)msg[k] & 0xc0) == 0x80)
                k--;
            msg[k] = '\0';
        }
        u->text = strdup(msg);
        if (!u->text) {
            state_list_truncate(out, start);
            return NOMEM_MSG(err, errlen);
        }
    }
    return 0;
}

int plan_worker_heartbeat(const struct state *s, const struct plan_heartbeat_request *req,
                          uint64_t *worker_out, struct st_update_list *out, char *err,
                          size_t errlen)
{
    const char *address = req->address;
    const char *host = req->host ? req->host : "";
    if (!address || !*address)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "worker address is empty");
    int rc = name_check("worker address", address, NAME_ADDR_MAX, err, errlen);
    if (rc < 0)
        return rc;
    const struct st_worker *w = state_worker_by_address(s, address);
    bool known = w && w->incarnation == req->incarnation;
    /* The host is recorded at registration; a known worker's later heartbeats repeat it. */
    if (!known && host[0] && (rc = hostid_check("worker host id", host, err, errlen)) < 0)
        return rc;
    /* Identity first, before anything is planned: the incarnation is public (status lists it),
     * the secret is not. */
    if (!req->unkeyed) {
        if (known && !state_worker_key_ok(w, req->key, req->key_len))
            return err_set(err, errlen, SLUICE_ERR_DENIED,
                           "worker at %s: the worker key does not match its registration", address);
        if (!known && req->key_len != ST_KEY_LEN)
            return err_set(err, errlen, SLUICE_ERR_DENIED,
                           "worker at %s: a worker key of %d bytes is required to register",
                           address, ST_KEY_LEN);
    }
    if (w && !known && !req->may_replace)
        return err_set(err, errlen, SLUICE_ERR_DENIED,
                       "address %s is held by worker %" PRIu64 ", which is still heartbeating",
                       address, w->id);
    size_t start = out->n;
    uint64_t *have = NULL; /* iterations the worker has a task in, sorted */
    size_t nhave = 0;
    struct st_update *u;
    uint64_t wid;
    if (known) {
        wid = w->id;
    } else {
        /* Another incarnation at this address is a restarted process: what the old one held
         * is gone with it. */
        if (w && plan_remove_worker_updates(s, w, out) < 0)
            goto nomem;
        wid = s->next_worker_id;
        if (!(u = push(out, ST_WORKER_REGISTERED, wid)))
            goto nomem;
        memcpy(u->address, address, strlen(address) + 1);
        u->incarnation = req->incarnation;
        memcpy(u->host_id, host, strlen(host) + 1);
        if (!req->unkeyed && req->key_len == ST_KEY_LEN) {
            u->key.set = true;
            memcpy(u->key.b, req->key, ST_KEY_LEN);
        }
    }

    if (known) {
        for (size_t i = 0; i < req->nfinished; i++) {
            const struct st_task *t = state_task(s, req->finished[i]);
            if (!t || t->worker_id != wid || t->finished ||
                pending(out, start, ST_TASK_FINISHED, t->id))
                continue;
            if (t->leased.n > 0) {
                if (!(u = push(out, ST_SPLITS_RETURNED, 0)))
                    goto nomem;
                u->ref = t->iteration_id;
                u->ref2 = t->id;
                if (state_seq_assign(&u->seqs, t->leased.v, t->leased.n) < 0)
                    goto nomem;
            }
            if (!push(out, ST_TASK_FINISHED, t->id))
                goto nomem;
        }
    }

    bool was_draining = known && w->draining;
    if (req->draining && !was_draining && !push(out, ST_WORKER_DRAINING, wid))
        goto nomem;
    if (!req->draining && !was_draining) {
        if (known) {
            size_t nmine;
            const struct st_task_ref *mine = state_worker_tasks(s, wid, &nmine);
            have = malloc((nmine ? nmine : 1) * sizeof *have);
            if (!have)
                goto nomem;
            for (size_t i = 0; i < nmine; i++) {
                const struct st_task *t = state_task(s, mine[i].task_id);
                if (t)
                    have[nhave++] = t->iteration_id;
            }
            qsort(have, nhave, sizeof *have, cmp_u64);
        }
        uint64_t next_task = s->next_task_id;
        for (size_t i = 0; i < s->niterations; i++) {
            const struct st_iteration *it = &s->iterations[i];
            if (it->state != ST_ITER_ACTIVE || it->error ||
                (nhave > 0 && bsearch(&it->id, have, nhave, sizeof *have, cmp_u64)))
                continue;
            /* Nobody reads an iteration without clients: a new worker does not start producing
             * for it (a reader that comes back brings the tasks with the next heartbeats). */
            if (state_iteration_clients(s, it->id) == 0 && !state_save_running(s, it->id))
                continue;
            /* A local job's tasks run only on its readers' hosts. */
            if (!worker_serves(s, state_job(s, it->job_id), it->id, known ? w->host_id : host, out,
                               start))
                continue;
            if (!(u = push(out, ST_TASK_CREATED, next_task++)))
                goto nomem;
            u->ref = it->id;
            u->ref2 = wid;
        }
    }
    if (finish_touched(s, out, start) < 0 || plan_round_schedules(s, out, start) < 0)
        goto nomem;
    free(have);
    *worker_out = wid;
    return 0;
nomem:
    free(have);
    state_list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}

/* The seqs of a lease the task still holds, less those the plan being made finishes or hands back:
 * the reply to a repeated request. *out (malloc'd) is NULL when there are none. */
static int still_held(const struct st_task *t, const struct st_seq_list *finishing,
                      const struct st_seq_list *returning, uint64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (t->granted.n == 0)
        return 0;
    uint64_t *v = malloc(t->granted.n * sizeof *v);
    if (!v)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < t->granted.n; i++) {
        uint64_t seq = t->granted.v[i];
        if (state_seq_contains(&t->leased, seq) &&
            !(finishing && state_seq_contains(finishing, seq)) &&
            !(returning && state_seq_contains(returning, seq)))
            v[(*n)++] = seq;
    }
    if (*n == 0) {
        free(v);
        return 0;
    }
    *out = v;
    return 0;
}

/* Sets l to the seqs of v[0, n) that are in `in` and not in exclude (may be NULL): sorted and
 * once each, as every list of an update must be. Reports from the network may repeat seqs, name
 * seqs that were never leased, or arrive in any order. Returns 0 or SLUICE_ERR_NOMEM. */
static int seq_assign_members(struct st_seq_list *l, const uint64_t *v, size_t n,
                              const struct st_seq_list *in, const struct st_seq_list *exclude)
{
    if (state_seq_assign(l, v, n) < 0)
        return SLUICE_ERR_NOMEM;
    qsort(l->v, l->n, sizeof *l->v, cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        uint64_t seq = l->v[i];
        if ((k > 0 && l->v[k - 1] == seq) || !state_seq_contains(in, seq) ||
            (exclude && state_seq_contains(exclude, seq)))
            continue;
        l->v[k++] = seq;
    }
    l->n = k;
    return 0;
}

/* Appends an update of type moving the seqs of v[0, n) that are leased to task t (sorted, once
 * each), less those of the update at index exclude_at of out (NO_UPDATE: none), away from it.
 * *moved receives how many, *made_at the new update's index (NO_UPDATE when none was appended).
 * Updates are named by index, not pointer, because appending may move the list. */
#define NO_UPDATE SIZE_MAX
static int push_task_seqs(const struct st_task *t, enum st_update_type type, const uint64_t *v,
                          size_t n, size_t exclude_at, struct st_update_list *out, size_t *made_at,
                          uint64_t *moved)
{
    *moved = 0;
    *made_at = NO_UPDATE;
    if (n == 0)
        return 0;
    struct st_update *u = push(out, type, 0);
    if (!u)
        return SLUICE_ERR_NOMEM;
    const struct st_seq_list *exclude = exclude_at == NO_UPDATE ? NULL : &out->v[exclude_at].seqs;
    u->ref = t->iteration_id;
    u->ref2 = t->id;
    if (seq_assign_members(&u->seqs, v, n, &t->leased, exclude) < 0)
        return SLUICE_ERR_NOMEM;
    size_t k = u->seqs.n;
    *moved = k;
    if (k == 0)
        state_list_truncate(out, out->n - 1);
    else
        *made_at = out->n - 1;
    return 0;
}

int plan_get_splits(const struct state *s, const struct plan_splits_request *req,
                    struct plan_splits_result *res, struct st_update_list *out, char *err,
                    size_t errlen)
{
    uint64_t task_id = req->task_id, request_seq = req->request_seq;
    uint32_t max = req->max;
    uint64_t lease_below = req->lease_below ? req->lease_below : UINT64_MAX;
    res->end = false;
    res->seqs = NULL;
    res->nseqs = 0;
    const struct st_task *t = state_task(s, task_id);
    if (!t)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "task %" PRIu64 " not found", task_id);
    const struct st_iteration *it = state_iteration(s, t->iteration_id);
    if (!it)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "iteration %" PRIu64 " not found",
                       t->iteration_id);
    if (!it->distributed)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "task %" PRIu64 " is not in a distributed_epoch iteration", task_id);
    if (request_seq == UINT64_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "task %" PRIu64 ": request number %" PRIu64 " is out of range", task_id,
                       request_seq);
    /* A finished task holds no leases, so nothing it reports can be recorded. */
    if (it->state != ST_ITER_ACTIVE || t->finished) {
        res->end = true;
        return 0;
    }
    if (request_seq != 0 && request_seq < t->last_request)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "task %" PRIu64 ": stale request %" PRIu64 " (request %" PRIu64
                       " was answered)",
                       task_id, request_seq, t->last_request);
    bool repeat = request_seq != 0 && request_seq == t->last_request;
    size_t start = out->n;
    struct st_update *u;
    uint64_t done = 0, back = 0;
    size_t finishing_at, returning_at;
    /* Keep the seqs leased to this task, sorted and once each. */
    if (push_task_seqs(t, ST_SPLITS_FINISHED, req->finished, req->nfinished, NO_UPDATE, out,
                       &finishing_at, &done) < 0)
        goto nomem;
    /* Splits handed back go to the pool, where other tasks lease them; a seq reported both
     * finished and handed back counts as finished. */
    if (push_task_seqs(t, ST_SPLITS_RETURNED, req->returned, req->nreturned, finishing_at, out,
                       &returning_at, &back) < 0)
        goto nomem;
    const struct st_seq_list *finishing =
        finishing_at == NO_UPDATE ? NULL : &out->v[finishing_at].seqs;
    const struct st_seq_list *returning =
        returning_at == NO_UPDATE ? NULL : &out->v[returning_at].seqs;
    uint64_t left = it->split_total - it->split_cursor;
    /* Nothing left to lease now, and nothing out that could come back to the pool. */
    res->end = it->pool.n == 0 && back == 0 && left == 0 && it->splits_leased == done;
    const struct st_worker *w = state_worker(s, t->worker_id);
    if (w && w->draining) {
        /* A draining worker takes no new splits: its task ends once it holds none. */
        res->end = t->leased.n == done + back;
        max = 0;
    }
    if (repeat) {
        if (still_held(t, finishing, returning, &res->seqs, &res->nseqs) < 0)
            goto nomem;
        return 0;
    }
    uint64_t from_pool = it->pool.n < max ? it->pool.n : max;
    uint64_t from_cursor = max - from_pool < left ? max - from_pool : left;
    /* A deterministic reader's window: nothing from the cursor past it (the pool's splits, which
     * lie below the cursor, are leased whatever it says). */
    if (lease_below <= it->split_cursor)
        from_cursor = 0;
    else if (lease_below - it->split_cursor < from_cursor)
        from_cursor = lease_below - it->split_cursor;
    if (from_pool + from_cursor > 0) {
        if (!(u = push(out, ST_SPLITS_LEASED, request_seq)))
            goto nomem;
        u->ref = it->id;
        u->ref2 = t->id;
        if (state_seq_reserve(&u->seqs, (size_t)(from_pool + from_cursor)) < 0)
            goto nomem;
        for (uint64_t i = 0; i < from_pool; i++)
            u->seqs.v[u->seqs.n++] = it->pool.v[i];
        for (uint64_t i = 0; i < from_cursor; i++)
            u->seqs.v[u->seqs.n++] = it->split_cursor + i;
        res->seqs = malloc(u->seqs.n * sizeof *res->seqs);
        if (!res->seqs)
            goto nomem;
        memcpy(res->seqs, u->seqs.v, u->seqs.n * sizeof *res->seqs);
        res->nseqs = u->seqs.n;
    }
    return 0;
nomem:
    state_list_truncate(out, start);
    res->end = false;
    return NOMEM_MSG(err, errlen);
}

bool state_split_finished(const struct state *s, uint64_t iteration_id, uint64_t seq)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    if (!it || !it->distributed)
        return false;
    if (it->state != ST_ITER_ACTIVE)
        return it->state == ST_ITER_FINISHED;
    if (seq >= it->split_cursor || state_seq_contains(&it->pool, seq))
        return false;
    return !u64map_get(&it->held, seq, NULL);
}

int state_splits_finished_each(const struct state *s, uint64_t iteration_id, const uint64_t *seqs,
                               size_t n, bool *finished)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    if (!it || !it->distributed || it->state != ST_ITER_ACTIVE) {
        bool all = it && it->distributed && it->state == ST_ITER_FINISHED;
        for (size_t i = 0; i < n; i++)
            finished[i] = all;
        return 0;
    }
    /* Below the cursor, not in the pool and held by no task. */
    for (size_t i = 0; i < n; i++)
        finished[i] = seqs[i] < it->split_cursor && !state_seq_contains(&it->pool, seqs[i]) &&
                      !u64map_get(&it->held, seqs[i], NULL);
    return 0;
}

/* A reported split and the task holding it. */
struct held_split {
    uint64_t task_id, seq;
};

static int cmp_held(const void *a, const void *b)
{
    const struct held_split *x = a, *y = b;
    if (x->task_id != y->task_id)
        return x->task_id < y->task_id ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int plan_splits_finished(const struct state *s, uint64_t iteration_id, const uint64_t *seqs,
                         size_t n, struct st_update_list *out, char *err, size_t errlen)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    if (!it)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "iteration %" PRIu64 " not found",
                       iteration_id);
    if (!it->distributed)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "iteration %" PRIu64 " is not a distributed_epoch iteration", iteration_id);
    if (it->state != ST_ITER_ACTIVE || n == 0)
        return 0;
    size_t start = out->n;
    struct st_update *u;
    /* The reported splits some task holds, found by lookup (it->held), grouped by task: one
     * SPLITS_FINISHED per task, by increasing task id, its seqs increasing. */
    struct held_split *hs = malloc(n * sizeof *hs);
    uint64_t *both = malloc(n * sizeof *both);
    if (!hs || !both) {
        free(hs);
        free(both);
        return NOMEM_MSG(err, errlen);
    }
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t task_id;
        if (u64map_get(&it->held, seqs[i], &task_id))
            hs[nh++] = (struct held_split){task_id, seqs[i]};
    }
    qsort(hs, nh, sizeof *hs, cmp_held);
    for (size_t i = 0; i < nh;) {
        size_t k = 0;
        uint64_t task_id = hs[i].task_id;
        for (; i < nh && hs[i].task_id == task_id; i++) {
            if (k == 0 || both[k - 1] != hs[i].seq) /* a seq reported twice counts once */
                both[k++] = hs[i].seq;
        }
        if (!(u = push(out, ST_SPLITS_FINISHED, 0)) || state_seq_assign(&u->seqs, both, k) < 0) {
            free(both);
            free(hs);
            goto nomem;
        }
        u->ref = iteration_id;
        u->ref2 = task_id;
    }
    free(both);
    free(hs);
    /* Splits back in the pool that a consumer received in full are not leased again. */
    if (it->pool.n > 0) {
        if (!(u = push(out, ST_SPLITS_FINISHED, 0)))
            goto nomem;
        u->ref = iteration_id;
        if (seq_assign_members(&u->seqs, seqs, n, &it->pool, NULL) < 0)
            goto nomem;
        if (u->seqs.n == 0)
            state_list_truncate(out, out->n - 1);
    }
    return 0;
nomem:
    state_list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}

int plan_return_task_splits(const struct state *s, uint64_t task_id, struct st_update_list *out,
                            char *err, size_t errlen)
{
    const struct st_task *t = state_task(s, task_id);
    if (!t)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "task %" PRIu64 " not found", task_id);
    if (t->leased.n == 0)
        return 0;
    size_t start = out->n;
    struct st_update *u = push(out, ST_SPLITS_RETURNED, 0);
    if (!u)
        return NOMEM_MSG(err, errlen);
    u->ref = t->iteration_id;
    u->ref2 = t->id;
    if (state_seq_assign(&u->seqs, t->leased.v, t->leased.n) < 0) {
        state_list_truncate(out, start);
        return NOMEM_MSG(err, errlen);
    }
    return 0;
}

int plan_splits_redo(const struct state *s, uint64_t iteration_id, const uint64_t *seqs, size_t n,
                     struct st_update_list *out, char *err, size_t errlen)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    if (!it)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "iteration %" PRIu64 " not found",
                       iteration_id);
    const struct st_job *job = state_job(s, it->job_id);
    if (!it->distributed || !job || !job->deterministic)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "iteration %" PRIu64 " is not read deterministically: no split is "
                       "produced again on request",
                       iteration_id);
    if (it->state != ST_ITER_ACTIVE || n == 0)
        return 0;
    /* Seqs that updates already in out finish or move (the same heartbeat's coverage) are left
     * alone: they are no longer leased once those apply. */
    uint64_t *keep = malloc(n * sizeof *keep);
    if (!keep)
        return NOMEM_MSG(err, errlen);
    size_t nkeep = 0;
    for (size_t k = 0; k < n; k++) {
        bool moving = false;
        for (size_t i = 0; i < out->n && !moving; i++) {
            const struct st_update *u = &out->v[i];
            moving = (u->type == ST_SPLITS_FINISHED || u->type == ST_SPLITS_RETURNED) &&
                     u->ref == iteration_id && state_seq_contains(&u->seqs, seqs[k]);
        }
        if (!moving)
            keep[nkeep++] = seqs[k];
    }
    size_t start = out->n;
    size_t made_at;
    uint64_t moved;
    size_t nrefs;
    const struct st_task_ref *refs = state_iteration_tasks(s, iteration_id, &nrefs);
    for (size_t i = 0; i < nrefs && nkeep > 0; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t->iteration_id != iteration_id || t->leased.n == 0)
            continue;
        if (push_task_seqs(t, ST_SPLITS_RETURNED, keep, nkeep, NO_UPDATE, out, &made_at, &moved) <
            0) {
            state_list_truncate(out, start);
            free(keep);
            return NOMEM_MSG(err, errlen);
        }
    }
    free(keep);
    return 0;
}

uint64_t state_splits_finished_below(const struct state *s, uint64_t iteration_id)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    if (!it || !it->distributed || it->state == ST_ITER_GC)
        return 0;
    if (it->state == ST_ITER_FINISHED)
        return it->split_total;
    uint64_t low = it->split_cursor;
    if (it->pool.n > 0 && it->pool.v[0] < low)
        low = it->pool.v[0];
    if (it->held.n > 0 && it->held_low < low)
        low = it->held_low;
    return low;
}

int plan_client_heartbeat(const struct state *s, uint64_t client_id, uint64_t round,
                          uint64_t window, struct st_update_list *out, uint64_t *granted_out,
                          char *err, size_t errlen)
{
    *granted_out = 0;
    const struct st_client *c = state_client(s, client_id);
    if (!c)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "client %" PRIu64 " not found",
                       client_id);
    const struct st_iteration *it = state_iteration(s, c->iteration_id);
    if (!it || !state_iteration_coordinated(s, it))
        return 0;
    *granted_out = it->rounds_granted;
    if (it->state != ST_ITER_ACTIVE)
        return 0;
    /* An iteration journaled before round schedules existed gets its first one now. */
    if (it->nepochs == 0 && plan_round_schedules(s, out, out->n) < 0)
        return NOMEM_MSG(err, errlen);
    if (window == 0)
        return 0;
    uint64_t ahead = it->rounds_granted > round ? it->rounds_granted - round : 0;
    if (ahead >= window / 2 || round > UINT64_MAX - 1 - window)
        return 0;
    struct st_update *u = push(out, ST_ROUNDS_GRANTED, 0);
    if (!u)
        return NOMEM_MSG(err, errlen);
    u->ref = it->id;
    u->ref2 = round + window;
    *granted_out = u->ref2;
    return 0;
}

/* A local job's tasks on a host serve only that host's readers: when the last of them leaves
 * (client c, released by the updates since start), the tasks go (their leases back to the pool),
 * so no split waits on a task nobody reads. A reader coming back brings them again. */
static int release_local_tasks(const struct state *s, const struct st_client *c,
                               struct st_update_list *out, size_t start)
{
    const struct st_iteration *it = state_iteration(s, c->iteration_id);
    const struct st_job *j = it ? state_job(s, it->job_id) : NULL;
    if (!j || j->target_workers != SLUICE_TARGET_WORKERS_LOCAL || it->state != ST_ITER_ACTIVE ||
        !c->host_id[0])
        return 0;
    for (size_t i = 0; i < s->nclients; i++) {
        const struct st_client *o = &s->clients[i];
        if (o->id != c->id && o->iteration_id == it->id && strcmp(o->host_id, c->host_id) == 0)
            return 0;
    }
    size_t nrefs;
    const struct st_task_ref *refs = state_iteration_tasks(s, it->id, &nrefs);
    for (size_t i = 0; i < nrefs; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        const struct st_worker *w = t ? state_worker(s, t->worker_id) : NULL;
        if (!w || strcmp(w->host_id, c->host_id) != 0)
            continue;
        if (push_task_removal(t, out) < 0)
            return SLUICE_ERR_NOMEM;
    }
    return finish_touched(s, out, start);
}

int plan_release_client(const struct state *s, uint64_t client_id, struct st_update_list *out,
                        char *err, size_t errlen)
{
    const struct st_client *c = state_client(s, client_id);
    if (!c)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "client %" PRIu64 " not found",
                       client_id);
    size_t start = out->n;
    if (!push(out, ST_CLIENT_RELEASED, client_id) || release_local_tasks(s, c, out, start) < 0) {
        state_list_truncate(out, start);
        return NOMEM_MSG(err, errlen);
    }
    return 0;
}

int plan_gc_iteration(const struct state *s, uint64_t iteration_id, struct st_update_list *out,
                      char *err, size_t errlen)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    if (!it)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "iteration %" PRIu64 " not found",
                       iteration_id);
    if (it->state == ST_ITER_GC)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "iteration %" PRIu64 " is already garbage-collected", iteration_id);
    size_t clients = state_iteration_clients(s, iteration_id);
    if (clients > 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "iteration %" PRIu64 " has %zu clients",
                       iteration_id, clients);
    const struct st_save *sv = state_save_running(s, iteration_id);
    if (sv)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "iteration %" PRIu64 " runs save %" PRIu64,
                       iteration_id, sv->id);
    size_t start = out->n;
    struct st_update *u;
    size_t nrefs;
    const struct st_task_ref *refs = state_iteration_tasks(s, iteration_id, &nrefs);
    for (size_t i = 0; i < nrefs; i++) {
        if (!(u = push(out, ST_TASK_REMOVED, refs[i].task_id)))
            goto nomem;
        u->ref = iteration_id;
    }
    if (!push(out, ST_ITERATION_GC, iteration_id))
        goto nomem;
    return 0;
nomem:
    state_list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}

/* ---- saves (docs/snapshots.md) ---- */

int plan_save_check(const struct state *s, const char *dataset_id, const char *path, bool endless,
                    uint64_t *existing, char *err, size_t errlen)
{
    *existing = 0;
    int rc = name_check("dataset id", dataset_id, NAME_ID_MAX, err, errlen);
    if (rc < 0)
        return rc;
    if (!path || !path[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID, "snapshot path is empty");
    rc = name_check("snapshot path", path, ST_PATH_MAX - 1, err, errlen);
    if (rc < 0)
        return rc;
    if (path[0] != '/')
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "snapshot path '%s' is not absolute (dispatcher, workers and readers must "
                       "see it at the same absolute path)",
                       path);
    const struct st_dataset *ds = state_dataset(s, dataset_id);
    if (!ds)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "dataset '%s' not found", dataset_id);
    const struct st_save *sv = state_save_by_path(s, path);
    if (sv && strcmp(sv->dataset_id, dataset_id) != 0)
        return err_set(err, errlen, SLUICE_ERR_EXISTS,
                       "snapshot path '%s' holds a save of dataset '%s', not '%s'", path,
                       sv->dataset_id, dataset_id);
    /* A failed save of the same dataset is started again (a new save): the last one into a path
     * is the one that counts. */
    if (sv && sv->state != ST_SV_FAILED) {
        *existing = sv->id;
        return 0;
    }
    if (endless) {
        if (ds->text && ds->text[0])
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "cannot save dataset '%s': its pipeline '%s' never ends", dataset_id,
                           ds->text);
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "cannot save dataset '%s': its pipeline never ends", dataset_id);
    }
    return 0;
}

int plan_save_start(const struct state *s, const char *dataset_id, const char *path,
                    const struct split_plan *plan, bool endless, uint64_t *save_out,
                    struct st_update_list *out, char *err, size_t errlen)
{
    uint64_t existing;
    int rc = plan_save_check(s, dataset_id, path, endless, &existing, err, errlen);
    if (rc < 0)
        return rc;
    if (existing) {
        *save_out = existing;
        return 0;
    }
    if (!plan)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a save needs a split plan");
    if (split_plan_total(plan) == UINT64_MAX)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "cannot save dataset '%s': its splits never end", dataset_id);

    size_t start = out->n;
    uint64_t job_id = s->next_job_id, iteration_id = s->next_iteration_id;
    uint64_t next_task = s->next_task_id;
    uint64_t save_id = s->nsaves ? s->saves[s->nsaves - 1].id + 1 : 1;
    struct st_update *u;
    if (!(u = push(out, ST_JOB_CREATED, job_id)))
        goto nomem;
    memcpy(u->name2, dataset_id, strlen(dataset_id) + 1);
    u->mode = (int)SLUICE_DISTRIBUTED_EPOCH;
    if (!(u = push(out, ST_ITERATION_CREATED, iteration_id)))
        goto nomem;
    u->ref = job_id;
    u->distributed = true;
    if (split_plan_copy(&u->plan, plan) < 0)
        goto nomem;
    if (plan_tasks_for_iteration(s, iteration_id, NULL, &next_task, out) < 0)
        goto nomem;
    if (!(u = push(out, ST_SAVE_STARTED, save_id)))
        goto nomem;
    u->ref = job_id;
    u->ref2 = iteration_id;
    memcpy(u->name, dataset_id, strlen(dataset_id) + 1);
    if (!(u->text = strdup(path)))
        goto nomem;
    *save_out = save_id;
    return 0;
nomem:
    state_list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}

static int save_over(const struct state *s, uint64_t save_id, const char *why,
                     struct st_update_list *out, char *err, size_t errlen)
{
    const struct st_save *sv = state_save(s, save_id);
    if (!sv)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "save %" PRIu64 " not found", save_id);
    if (sv->state != ST_SV_RUNNING || pending(out, 0, ST_SAVE_FINISHED, save_id) ||
        pending(out, 0, ST_SAVE_FAILED, save_id))
        return 0;
    size_t start = out->n;
    struct st_update *u = push(out, why ? ST_SAVE_FAILED : ST_SAVE_FINISHED, save_id);
    if (!u)
        return NOMEM_MSG(err, errlen);
    if (why) {
        char msg[ST_ERROR_MAX + 1];
        name_escape(why[0] ? why : "save failed", msg, sizeof msg);
        if (!(u->text = strdup(msg))) {
            state_list_truncate(out, start);
            return NOMEM_MSG(err, errlen);
        }
    }
    return 0;
}

int plan_save_finished(const struct state *s, uint64_t save_id, struct st_update_list *out,
                       char *err, size_t errlen)
{
    return save_over(s, save_id, NULL, out, err, errlen);
}

int plan_save_failed(const struct state *s, uint64_t save_id, const char *why,
                     struct st_update_list *out, char *err, size_t errlen)
{
    return save_over(s, save_id, why ? why : "", out, err, errlen);
}
