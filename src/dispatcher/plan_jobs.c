/* Planning jobs and iterations (plan.h; handlers_jobs.c calls them, tick.c collects idle
 * iterations): finding or creating a read's job and iteration, a repeating reader's next
 * repetition, garbage collection. */

#include "plan_internal.h"

#include "common/hostid.h"
#include "common/names.h"

/* Whether a worker that is not draining runs on host (a non-empty host id). */
static bool host_has_worker(const struct state *s, const char *host)
{
    for (size_t i = 0; host[0] && i < s->nworkers; i++) {
        if (!s->workers[i].draining && strcmp(s->workers[i].host_id, host) == 0)
            return true;
    }
    return false;
}

/* Sets a new iteration's cursor and pool from the splits a restored reader had whole. */
static int resume_iteration(struct st_update *u, const struct plan_resume *r, char *err,
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
        if (gaps > PLAN_RESUME_POOL_MAX)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint: more than %u unfinished splits below its furthest "
                           "finished one",
                           PLAN_RESUME_POOL_MAX);
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
    if (xtc_bytes > PLAN_XTC_MAX_BYTES)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "cross_trainer_cache_bytes %" PRIu64 " is over the limit of %" PRIu64,
                       xtc_bytes, (uint64_t)PLAN_XTC_MAX_BYTES);
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
    const struct plan_resume *resume = req->resume;
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
    /* The selector as the state keeps it: its canonical text. */
    char selector[ST_SELECTOR_MAX] = "";
    if (req->selector && req->selector[0]) {
        struct selector sel;
        char why[SLUICE_ERRMSG_SIZE];
        if (selector_parse(req->selector, &sel, why, sizeof why) < 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "worker selector: %s", why);
        selector_format(&sel, selector, sizeof selector);
    }
    double weight = req->weight == 0 ? 1 : req->weight;
    if (!(weight > 0 && weight <= ST_WEIGHT_MAX))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "weight must be a number above 0 and at most 1000000, not %g", req->weight);
    if (req->min_workers && req->max_workers && req->min_workers > req->max_workers)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "min_workers %" PRIu32 " is above max_workers %" PRIu32, req->min_workers,
                       req->max_workers);
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
             job->target_workers != target || strcmp(job->selector, selector) != 0 ||
             job->weight != weight || job->min_workers != req->min_workers ||
             job->max_workers != req->max_workers))
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
        if (strcmp(job->selector, selector) != 0)
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "job '%s' exists with worker selector '%s', not '%s'", job_name,
                           job->selector, selector);
        if (job->weight != weight || job->min_workers != req->min_workers ||
            job->max_workers != req->max_workers)
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "job '%s' exists with weight %g, min_workers %" PRIu32
                           ", max_workers %" PRIu32 ", not %g, %" PRIu32 ", %" PRIu32,
                           job_name, job->weight, job->min_workers, job->max_workers, weight,
                           req->min_workers, req->max_workers);
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
        if (!(u = plan_push(out, ST_JOB_CREATED, job_id)))
            goto nomem;
        memcpy(u->name, job_name, strlen(job_name) + 1);
        memcpy(u->name2, dataset_id, strlen(dataset_id) + 1);
        u->mode = (int)mode;
        u->num_consumers = num_consumers;
        u->deterministic = deterministic;
        u->xtc_bytes = xtc_bytes;
        u->target_workers = (int)target;
        if (selector[0] && !(u->selector = strdup(selector)))
            goto nomem;
        u->job_weight = weight;
        u->min_workers = req->min_workers;
        u->max_workers = req->max_workers;
    }
    /* Where the tasks go: the job's selector and bounds, as JOB_CREATED records them. */
    static const struct st_job none;
    struct st_job place_job = job ? *job : none;
    if (!job) {
        memcpy(place_job.selector, selector, sizeof selector);
        place_job.id = job_id;
        place_job.weight = weight;
        place_job.min_workers = req->min_workers;
        place_job.max_workers = req->max_workers;
    }
    struct plan_place place;
    plan_place_of(&place_job, &place);
    if (new_iteration) {
        if (!(u = plan_push(out, ST_ITERATION_CREATED, iteration_id)))
            goto nomem;
        u->ref = job_id;
        u->ref2 = cur ? cur->repetition + 1 : 0;
        u->distributed = mode == SLUICE_DISTRIBUTED_EPOCH;
        if (u->distributed && split_plan_copy(&u->plan, plan) < 0)
            goto nomem;
        if (resume)
            u->resume_id = resume->id;
        if (resume && (rc = resume_iteration(u, resume, err, errlen)) < 0) {
            state_list_truncate(out, start);
            return rc;
        }
        size_t first_task = out->n;
        if (plan_tasks_for_iteration(s, iteration_id,
                                     target == SLUICE_TARGET_WORKERS_LOCAL ? host : NULL, &place,
                                     &next_task, out) < 0)
            goto nomem;
        /* A coordinated iteration's rounds start with an epoch at round 0, of the tasks just
         * created (possibly none: consumers then wait for a worker). */
        if (num_consumers > 0) {
            if (!(u = plan_push(out, ST_ROUNDS_SCHEDULED, 0)))
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
        !cur->error && plan_tasks_for_iteration(s, iteration_id, host, &place, &next_task, out) < 0)
        goto nomem;
    if (!(u = plan_push(out, ST_CLIENT_ACQUIRED, s->next_client_id)))
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

/* The live iteration of named job job_name that no client holds and no save runs, and that was
 * not restored from the checkpoint r restores (a late member of a group restoring one merged
 * position joins what the others read), or NULL. */
static const struct st_iteration *unheld_iteration(const struct state *s, const char *dataset_id,
                                                   const char *job_name,
                                                   const struct plan_resume *r)
{
    if (!job_name || !job_name[0])
        return NULL;
    const struct st_job *job = state_job_by_key(s, dataset_id, job_name);
    const struct st_iteration *cur = job ? state_iteration(s, job->iteration_id) : NULL;
    if (!cur || cur->state == ST_ITER_GC || state_iteration_clients(s, cur->id) > 0 ||
        state_save_running(s, cur->id))
        return NULL;
    if (r && r->id && cur->resume_id == r->id)
        return NULL;
    return cur;
}

bool plan_job_resume_collects(const struct state *s, const char *dataset_id, const char *job_name,
                              const struct plan_resume *r)
{
    return unheld_iteration(s, dataset_id, job_name, r) != NULL;
}

int plan_job_resume_fresh(const struct state *s, const char *dataset_id, const char *job_name,
                          const struct plan_resume *r, struct st_update_list *out, char *err,
                          size_t errlen)
{
    const struct st_iteration *cur = unheld_iteration(s, dataset_id, job_name, r);
    return cur ? plan_gc_iteration(s, cur->id, out, err, errlen) : 0;
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
        if (!(u = plan_push(out, ST_TASK_REMOVED, refs[i].task_id)))
            goto nomem;
        u->ref = iteration_id;
    }
    if (!plan_push(out, ST_ITERATION_GC, iteration_id))
        goto nomem;
    return 0;
nomem:
    state_list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}
