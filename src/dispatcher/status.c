#include "status.h"

#include "hedge.h"
#include "autoscale_pools.h"
#include "plan.h"

#include "common/error.h"
#include "common/names.h"
#include "common/rows.h"

#include <inttypes.h>
#include <stddef.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jansson reports a failed allocation as NULL values and -1 returns; every builder below
 * funnels both into one flag so the document is either complete or refused. */
struct builder {
    bool failed;
    /* With figures: every job's and worker's (status_all_figures; NULL when out of memory: one
     * by one) and the thread time of all tasks (busy_total), computed once per document. */
    const struct status_figures *jobs, *workers;
    double busy_all;
};

static void put(struct builder *b, json_t *obj, const char *key, json_t *value)
{
    /* json_object_set_new() consumes value even when it fails, and refuses NULL. */
    if (json_object_set_new(obj, key, value) != 0)
        b->failed = true;
}

static void append(struct builder *b, json_t *arr, json_t *value)
{
    if (json_array_append_new(arr, value) != 0)
        b->failed = true;
}

/* A string that came from a peer (names, addresses, pipeline text): escaped (common/names.h),
 * since json_string() refuses bytes that are not UTF-8 and a name stored before names were
 * checked (an old journal) may hold some. NULL only when out of memory. */
static json_t *text(const char *s)
{
    if (!name_needs_escape(s))
        return json_string(s);
    char *esc = name_escape_dup(s);
    json_t *v = esc ? json_string(esc) : NULL;
    free(esc);
    return v;
}

static json_t *u64(uint64_t v)
{
    return json_integer((json_int_t)v);
}

static const struct status_task_figures *task_figures(const struct status_extra *x, uint64_t id)
{
    if (!x || !x->tasks)
        return NULL;
    size_t lo = 0, hi = x->ntasks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->tasks[mid].task_id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < x->ntasks && x->tasks[lo].task_id == id ? &x->tasks[lo] : NULL;
}

/* Worker thread seconds per second over every task reported: what "worker_time_share" divides. */
static double busy_total(const struct status_extra *x)
{
    double sum = 0;
    for (size_t i = 0; x->tasks && i < x->ntasks; i++)
        sum += x->tasks[i].busy_per_second;
    return sum;
}

/* Adds task t's figures f (NULL: it has none) to out. */
static void add_figures(struct status_figures *out, const struct status_task_figures *f)
{
    out->tasks++;
    if (!f)
        return;
    out->elements_per_second += f->elements_per_second;
    out->bytes_per_second += f->bytes_per_second;
    out->busy_per_second += f->busy_per_second;
    out->buffered += f->buffered;
    out->buffered_bytes += f->buffered_bytes;
    out->elements += f->elements;
    out->bytes += f->bytes;
}

static void add_task(struct status_figures *out, const struct status_extra *x,
                     const struct st_task *t)
{
    add_figures(out, task_figures(x, t->id));
}

struct iteration_job {
    uint64_t iteration_id;
    size_t job; /* index in s->jobs */
};

static int cmp_iteration_job(const void *a, const void *b)
{
    uint64_t x = ((const struct iteration_job *)a)->iteration_id;
    uint64_t y = ((const struct iteration_job *)b)->iteration_id;
    return x < y ? -1 : x > y;
}

int status_all_figures(const struct state *s, const struct status_extra *x,
                       struct status_figures *jobs, struct status_figures *workers)
{
    /* The jobs by their current iteration (a job with none, 0, takes no task). */
    struct iteration_job *by_it = malloc((s->njobs ? s->njobs : 1) * sizeof *by_it);
    if (!by_it)
        return SLUICE_ERR_NOMEM;
    size_t nby = 0;
    for (size_t i = 0; i < s->njobs; i++) {
        jobs[i] = (struct status_figures){0};
        if (s->jobs[i].iteration_id)
            by_it[nby++] = (struct iteration_job){s->jobs[i].iteration_id, i};
    }
    qsort(by_it, nby, sizeof *by_it, cmp_iteration_job);
    for (size_t i = 0; i < s->nworkers; i++)
        workers[i] = (struct status_figures){.workers = 1};
    const struct status_task_figures *f = x && x->tasks ? x->tasks : NULL;
    size_t nf = f ? x->ntasks : 0, k = 0;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        while (k < nf && f[k].task_id < t->id)
            k++;
        const struct status_task_figures *tf = k < nf && f[k].task_id == t->id ? &f[k] : NULL;
        size_t lo = 0, hi = s->nworkers;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (s->workers[mid].id < t->worker_id)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < s->nworkers && s->workers[lo].id == t->worker_id)
            add_figures(&workers[lo], tf);
        struct iteration_job key = {t->iteration_id, 0};
        const struct iteration_job *ij =
            nby ? bsearch(&key, by_it, nby, sizeof *by_it, cmp_iteration_job) : NULL;
        if (ij) {
            add_figures(&jobs[ij->job], tf);
            /* An iteration has at most one task per worker: its unfinished tasks count them. */
            jobs[ij->job].workers += !t->finished;
        }
    }
    free(by_it);
    return 0;
}

void status_job_figures(const struct state *s, const struct status_extra *x, const struct st_job *j,
                        struct status_figures *out)
{
    *out = (struct status_figures){0};
    size_t n;
    const struct st_task_ref *refs = state_iteration_tasks(s, j->iteration_id, &n);
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        add_task(out, x, t);
        /* An iteration has at most one task per worker (the state machine refuses a second),
         * so its unfinished tasks count its workers. */
        out->workers += !t->finished;
    }
}

void status_worker_figures(const struct state *s, const struct status_extra *x,
                           const struct st_worker *w, struct status_figures *out)
{
    *out = (struct status_figures){.workers = 1};
    size_t n;
    const struct st_task_ref *refs = state_worker_tasks(s, w->id, &n);
    for (size_t i = 0; i < n; i++)
        add_task(out, x, state_task(s, refs[i].task_id));
}

static json_t *worker_json(struct builder *b, const struct state *s, const struct status_extra *x,
                           const struct st_worker *w)
{
    json_t *o = json_object(), *tasks = json_array();
    char inc[17];
    snprintf(inc, sizeof inc, "%016" PRIx64, w->incarnation);
    if (!o || !tasks) {
        b->failed = true;
        json_decref(tasks);
        return o;
    }
    put(b, o, "id", u64(w->id));
    put(b, o, "address", text(w->address));
    put(b, o, "incarnation", json_string(inc));
    put(b, o, "draining", json_boolean(w->draining));
    if (w->host_id[0])
        put(b, o, "host_id", text(w->host_id));
    if (w->labels[0])
        put(b, o, "labels", text(w->labels));
    /* Only for workers with a slot limit, so other documents stay as they were. */
    if (w->task_slots)
        put(b, o, "task_slots", u64(w->task_slots));
    size_t ntasks;
    const struct st_task_ref *refs = state_worker_tasks(s, w->id, &ntasks);
    for (size_t i = 0; i < ntasks; i++)
        append(b, tasks, u64(refs[i].task_id));
    put(b, o, "tasks", tasks);
    if (x) {
        struct status_figures f;
        if (b->workers)
            f = b->workers[w - s->workers];
        else
            status_worker_figures(s, x, w, &f);
        put(b, o, "buffered", u64(f.buffered));
        put(b, o, "buffered_bytes", u64(f.buffered_bytes));
        put(b, o, "elements_per_second", json_real(f.elements_per_second));
        put(b, o, "bytes_per_second", json_real(f.bytes_per_second));
        put(b, o, "elements", u64(f.elements));
        put(b, o, "bytes", u64(f.bytes));
        const struct status_worker_seen *seen = NULL;
        size_t lo = 0, hi = x->seen ? x->nseen : 0;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (x->seen[mid].worker_id < w->id)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (x->seen && lo < x->nseen && x->seen[lo].worker_id == w->id)
            seen = &x->seen[lo];
        put(b, o, "heartbeat_age_ms", seen ? u64(seen->age_ms) : json_null());
    }
    return o;
}

/* The pipeline text, whole when full or when it fits STATUS_PIPELINE_PREVIEW bytes, else its
 * first bytes (cut at a character boundary). */
static json_t *pipeline_text(const char *s, bool full)
{
    size_t len = strlen(s);
    if (full || len <= STATUS_PIPELINE_PREVIEW)
        return text(s);
    size_t cut = STATUS_PIPELINE_PREVIEW;
    while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
        cut--;
    char preview[STATUS_PIPELINE_PREVIEW + 1];
    memcpy(preview, s, cut);
    preview[cut] = '\0';
    return text(preview);
}

static json_t *dataset_json(struct builder *b, const struct st_dataset *d, bool full)
{
    json_t *o = json_object();
    if (!o) {
        b->failed = true;
        return NULL;
    }
    const char *pipeline = d->text ? d->text : "";
    size_t len = strlen(pipeline);
    put(b, o, "id", text(d->id));
    put(b, o, "pipeline", pipeline_text(pipeline, full));
    put(b, o, "pipeline_bytes", u64(len));
    put(b, o, "pipeline_digest", json_string(d->digest));
    put(b, o, "pipeline_truncated", json_boolean(!full && len > STATUS_PIPELINE_PREVIEW));
    put(b, o, "compression", json_string(d->compression == 1 ? "none" : "auto"));
    put(b, o, "split_size", d->split_size ? u64(d->split_size) : json_null());
    return o;
}

static json_t *splits_json(struct builder *b, const struct st_iteration *it,
                           const struct status_extra *x)
{
    json_t *o = json_object();
    if (!o) {
        b->failed = true;
        return NULL;
    }
    put(b, o, "total", it->split_total == UINT64_MAX ? json_null() : u64(it->split_total));
    put(b, o, "size", it->plan.split_size ? u64(it->plan.split_size) : json_null());
    put(b, o, "cursor", u64(it->split_cursor));
    put(b, o, "leased", u64(it->splits_leased));
    put(b, o, "returned", u64(it->pool.n));
    put(b, o, "finished", u64(it->splits_finished));
    const struct hedge_iter *r = x && x->hedge ? hedge_find(x->hedge, it->id) : NULL;
    if (x && x->hedge)
        put(b, o, "hedged", u64(hedge_count(x->hedge, it->id)));
    if (r && r->nms > 0) {
        json_t *t = json_object();
        if (!t)
            b->failed = true;
        put(b, t, "median", u64(hedge_quantile_ms(r, 0.5)));
        put(b, t, "p99", u64(hedge_quantile_ms(r, 0.99)));
        put(b, t, "max", u64(hedge_quantile_ms(r, 1)));
        put(b, t, "samples", u64(r->nms));
        put(b, o, "time_ms", t);
    }
    return o;
}

/* A coordinated job's rounds: the consumers, the rounds granted, and the schedule's epochs. */
static json_t *rounds_json(struct builder *b, const struct st_job *j, const struct st_iteration *it)
{
    json_t *o = json_object(), *epochs = json_array();
    if (!o || !epochs) {
        b->failed = true;
        json_decref(epochs);
        return o;
    }
    put(b, o, "consumers", u64(j->num_consumers));
    put(b, o, "granted", u64(it->rounds_granted));
    for (size_t k = 0; k < it->nepochs; k++) {
        json_t *e = json_object(), *tasks = json_array();
        if (!e || !tasks) {
            b->failed = true;
            json_decref(e);
            json_decref(tasks);
            continue;
        }
        for (size_t i = 0; i < it->epochs[k].tasks.n; i++)
            append(b, tasks, u64(it->epochs[k].tasks.v[i]));
        put(b, e, "from", u64(it->epochs[k].start));
        put(b, e, "tasks", tasks);
        append(b, epochs, e);
    }
    put(b, o, "schedule", epochs);
    return o;
}

/* The copies job_id's readers reported cut short (x->cuts is sorted by job id). */
static uint64_t job_cut(const struct status_extra *x, uint64_t job_id)
{
    size_t lo = rows_lower(x->cuts, x->ncuts, sizeof *x->cuts,
                           offsetof(struct status_job_cut, job_id), job_id);
    return lo < x->ncuts && x->cuts[lo].job_id == job_id ? x->cuts[lo].cut : 0;
}

static json_t *stages_json(struct builder *b, const struct status_stage *v, size_t n)
{
    json_t *a = json_array();
    if (!a) {
        b->failed = true;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_object();
        if (!e) {
            b->failed = true;
            continue;
        }
        put(b, e, "name", text(v[i].name));
        put(b, e, "seconds", json_real(v[i].seconds));
        append(b, a, e);
    }
    return a;
}

static json_t *consumers_json(struct builder *b, const struct status_extra *x, uint64_t job_id)
{
    json_t *a = json_array();
    if (!a) {
        b->failed = true;
        return NULL;
    }
    for (size_t i = 0; i < x->nconsumers; i++) {
        const struct status_consumer *c = &x->consumers[i];
        if (c->job_id != job_id)
            continue;
        json_t *e = json_object();
        if (!e) {
            b->failed = true;
            continue;
        }
        put(b, e, "id", u64(c->client_id));
        put(b, e, "exposed_wait_seconds", json_real(c->exposed_wait_seconds));
        put(b, e, "wait_share", c->has_share ? json_real(c->wait_share) : json_null());
        put(b, e, "elements_per_second", json_real(c->elements_per_second));
        append(b, a, e);
    }
    return a;
}

/* The attribution of job j (why.h) from x's figures. */
static json_t *why_json(struct builder *b, const struct state *s, const struct status_extra *x,
                        const struct st_job *j)
{
    size_t nc = 0, nrefs = 0;
    for (size_t i = 0; i < x->nconsumers; i++)
        nc += x->consumers[i].job_id == j->id;
    const struct st_task_ref *refs = state_iteration_tasks(s, j->iteration_id, &nrefs);
    struct status_consumer *cs = malloc((nc ? nc : 1) * sizeof *cs);
    struct why_worker *ws = malloc((nrefs ? nrefs : 1) * sizeof *ws);
    struct why_result *r = malloc(sizeof *r);
    json_t *o = json_object();
    if (!cs || !ws || !r || !o) {
        b->failed = true;
        goto done;
    }
    nc = 0;
    for (size_t i = 0; i < x->nconsumers; i++)
        if (x->consumers[i].job_id == j->id)
            cs[nc++] = x->consumers[i];
    size_t nw = 0;
    for (size_t i = 0; i < nrefs; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        const struct st_worker *w = t ? state_worker(s, t->worker_id) : NULL;
        const struct status_task_figures *tf = t ? task_figures(x, t->id) : NULL;
        if (!w || !tf || t->finished)
            continue;
        ws[nw++] =
            (struct why_worker){w->address, tf->elements_per_second, tf->stages, tf->nstages};
    }
    struct why_input in = {j->id, j->name, cs, nc, ws, nw};
    why_attribute(&in, r);
    put(b, o, "input_bound", r->has_wait ? json_boolean(r->input_bound) : json_null());
    put(b, o, "wait_share", r->has_wait ? json_real(r->wait_share) : json_null());
    put(b, o, "threshold", json_real(WHY_INPUT_BOUND_SHARE));
    put(b, o, "slowest_consumer", r->has_consumer ? u64(r->slowest_consumer) : json_null());
    put(b, o, "slowest_worker", r->has_worker ? text(r->slowest_worker) : json_null());
    put(b, o, "worker_rate_vs_median", r->has_worker ? json_real(r->worker_ratio) : json_null());
    put(b, o, "dominant_stage", r->has_stage ? text(r->stage) : json_null());
    put(b, o, "stage_share", r->has_stage ? json_real(r->stage_share) : json_null());
    put(b, o, "text", text(r->text));
done:
    free(cs);
    free(ws);
    free(r);
    return o;
}

static json_t *job_json(struct builder *b, const struct state *s, const struct status_extra *x,
                        const struct st_job *j)
{
    json_t *o = json_object(), *tasks = json_array();
    if (!o || !tasks) {
        b->failed = true;
        json_decref(tasks);
        return o;
    }
    const struct st_iteration *it = state_iteration(s, j->iteration_id);
    put(b, o, "id", u64(j->id));
    put(b, o, "name", j->name[0] ? text(j->name) : json_null());
    put(b, o, "dataset_id", text(j->dataset_id));
    put(b, o, "mode", json_string(mode_name(j->mode)));
    if (j->deterministic)
        put(b, o, "deterministic", json_true());
    if (j->xtc_bytes)
        put(b, o, "cross_trainer_cache_bytes", u64(j->xtc_bytes));
    /* Only when not the default, so documents of clusters that do not use it stay as they were. */
    if (j->target_workers != SLUICE_TARGET_WORKERS_ANY)
        put(b, o, "target_workers", json_string(target_workers_name(j->target_workers)));
    if (j->selector[0])
        put(b, o, "worker_selector", text(j->selector));
    put(b, o, "weight", json_real(j->weight));
    put(b, o, "min_workers", u64(j->min_workers));
    put(b, o, "max_workers", u64(j->max_workers));
    /* Why the job has no task, as its readers hear it, or fewer than its minimum
     * (plan_iteration_waiting). */
    char why[SELECTOR_TEXT_MAX + 160];
    if (it && plan_iteration_waiting(s, it->id, why, sizeof why) > 0)
        put(b, o, "waiting", text(why));
    put(b, o, "iteration_id", u64(j->iteration_id));
    put(b, o, "repetition", u64(it ? it->repetition : 0));
    /* A failed iteration is still active for the state machine (its readers are told, it is
     * collected like any other); status says "failed", with the message under "error". */
    put(b, o, "state",
        json_string(it && it->error && it->state == ST_ITER_ACTIVE
                        ? "failed"
                        : st_iteration_state_name(it ? it->state : ST_ITER_GC)));
    put(b, o, "clients", u64(state_iteration_clients(s, j->iteration_id)));
    if (it && it->error)
        put(b, o, "error", text(it->error));
    /* The iteration's tasks, by increasing id (the index is sorted by iteration, then task). */
    size_t ntasks;
    const struct st_task_ref *refs =
        j->iteration_id ? state_iteration_tasks(s, j->iteration_id, &ntasks) : NULL;
    if (!refs)
        ntasks = 0;
    for (size_t i = 0; i < ntasks; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (!t)
            continue;
        const struct st_worker *w = state_worker(s, t->worker_id);
        json_t *to = json_object();
        if (!to) {
            b->failed = true;
            continue;
        }
        put(b, to, "id", u64(t->id));
        put(b, to, "worker", text(w ? w->address : ""));
        put(b, to, "finished", json_boolean(t->finished));
        const struct status_task_figures *tf = task_figures(x, t->id);
        if (tf && tf->nstages > 0)
            put(b, to, "stages", stages_json(b, tf->stages, tf->nstages));
        append(b, tasks, to);
    }
    put(b, o, "tasks", tasks);
    if (x) {
        struct status_figures f;
        if (b->jobs)
            f = b->jobs[j - s->jobs];
        else
            status_job_figures(s, x, j, &f);
        put(b, o, "workers", u64(f.workers));
        put(b, o, "elements_per_second", json_real(f.elements_per_second));
        put(b, o, "bytes_per_second", json_real(f.bytes_per_second));
        put(b, o, "elements", u64(f.elements));
        put(b, o, "bytes", u64(f.bytes));
        double all = b->busy_all;
        put(b, o, "worker_time_share", all > 0 ? json_real(f.busy_per_second / all) : json_null());
        put(b, o, "copies_cut", u64(job_cut(x, j->id)));
        put(b, o, "consumers", consumers_json(b, x, j->id));
        put(b, o, "why", why_json(b, s, x, j));
    }
    if (it && it->distributed && it->state != ST_ITER_GC)
        put(b, o, "splits", splits_json(b, it, x));
    if (it && j->num_consumers > 0 && it->state != ST_ITER_GC)
        put(b, o, "rounds", rounds_json(b, j, it));
    return o;
}

static json_t *save_json(struct builder *b, const struct state *s, const struct st_save *sv)
{
    json_t *o = json_object();
    if (!o) {
        b->failed = true;
        return NULL;
    }
    put(b, o, "id", u64(sv->id));
    put(b, o, "dataset_id", text(sv->dataset_id));
    put(b, o, "path", text(sv->path));
    put(b, o, "state", json_string(st_save_state_name(sv->state)));
    put(b, o, "chunks", u64(sv->chunks));
    put(b, o, "chunks_committed", u64(state_save_committed(s, sv)));
    put(b, o, "job_id", u64(sv->job_id));
    put(b, o, "iteration_id", u64(sv->iteration_id));
    if (sv->error)
        put(b, o, "error", text(sv->error));
    return o;
}

/* A named mix job's weights schedule: the weights in force past the horizon (null: the
 * pipeline's own, before any change) and where they start. */
static json_t *mix_json(struct builder *b, const struct status_extra *x, const struct st_mix *m)
{
    json_t *o = json_object();
    if (!o) {
        b->failed = true;
        return NULL;
    }
    put(b, o, "job_name", text(m->job_name));
    put(b, o, "dataset_id", text(m->dataset_id));
    put(b, o, "horizon", u64(m->horizon));
    put(b, o, "changes", u64(m->nchanges));
    if (m->nchanges) {
        const struct st_mix_change *c = &m->changes[m->nchanges - 1];
        json_t *w = json_array();
        for (size_t i = 0; w && i < c->nweights; i++)
            if (json_array_append_new(w, json_real(c->weights[i])) < 0)
                b->failed = true;
        if (!w)
            b->failed = true;
        put(b, o, "weights", w);
        put(b, o, "weights_from", u64(c->from));
    } else {
        put(b, o, "weights", json_null());
        put(b, o, "weights_from", json_null());
    }
    /* What the readers drew from each input, and the shares that makes. */
    const struct status_mix_drawn *dr = NULL;
    for (size_t i = 0; x && i < x->nmixes && !dr; i++)
        if (strcmp(x->mixes[i].dataset_id, m->dataset_id) == 0 &&
            strcmp(x->mixes[i].job_name, m->job_name) == 0)
            dr = &x->mixes[i];
    if (dr) {
        json_t *drawn = json_array(), *shares = json_array();
        uint64_t total = 0;
        for (size_t i = 0; i < dr->n; i++)
            total += dr->drawn[i];
        for (size_t i = 0; drawn && shares && i < dr->n; i++)
            if (json_array_append_new(drawn, u64(dr->drawn[i])) < 0 ||
                json_array_append_new(shares, total
                                                  ? json_real((double)dr->drawn[i] / (double)total)
                                                  : json_null()) < 0)
                b->failed = true;
        if (!drawn || !shares)
            b->failed = true;
        put(b, o, "drawn", drawn);
        put(b, o, "realized_shares", shares);
    }
    return o;
}

static json_t *config_json(struct builder *b, const struct status_extra *x)
{
    json_t *o = json_object();
    if (!o) {
        b->failed = true;
        return NULL;
    }
    put(b, o, "worker_timeout_ms", u64(x->worker_timeout_ms));
    put(b, o, "client_timeout_ms", u64(x->client_timeout_ms));
    put(b, o, "job_gc_timeout_ms", u64(x->job_gc_timeout_ms));
    put(b, o, "worker_heartbeat_ms", u64(x->worker_heartbeat_ms));
    put(b, o, "client_heartbeat_ms", u64(x->client_heartbeat_ms));
    put(b, o, "client_disconnect_grace_ms", u64(x->client_disconnect_grace_ms));
    put(b, o, "worker_disconnect_grace_ms", u64(x->worker_disconnect_grace_ms));
    put(b, o, "autoscale_window_ms", u64(x->autoscale_window_ms));
    return o;
}

static json_t *autoscale_json(struct builder *b, const struct status_extra *x)
{
    json_t *o = json_object(), *pools = json_array();
    if (!o || !pools) {
        json_decref(o);
        json_decref(pools);
        b->failed = true;
        return NULL;
    }
    put(b, o, "pool_label", text(x->pool_label));
    for (size_t i = 0; i < x->npools; i++) {
        const struct autoscale_pool *p = &x->pools[i];
        json_t *e = json_object();
        if (!e) {
            b->failed = true;
            break;
        }
        put(b, e, "pool", text(p->name));
        put(b, e, "workers", u64(p->current));
        put(b, e, "recommended_workers", u64(p->recommended));
        put(b, e, "reason", json_string(autoscale_reason_name(p->decision.reason)));
        put(b, e, "clients", json_real(p->clients));
        put(b, e, "demand", json_real(p->decision.demand));
        put(b, e, "served", json_real(p->decision.served));
        put(b, e, "unmet", json_real(p->decision.unmet));
        put(b, e, "capacity", json_real(p->decision.capacity));
        put(b, e, "idle", json_real(p->decision.idle));
        append(b, pools, e);
    }
    put(b, o, "pools", pools);
    return o;
}

/* Writes root (released here) as compact JSON into *out (malloc'd). */
static int dump(struct builder *b, json_t *root, char **out)
{
    char *text = b->failed ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        return SLUICE_ERR_NOMEM;
    /* Hand out memory from plain malloc whatever allocator jansson was given. */
    *out = strdup(text);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(text);
    return *out ? 0 : SLUICE_ERR_NOMEM;
}

int status_json(const struct state *s, char **out)
{
    return status_json_extra(s, NULL, out);
}

static json_t *raft_json(struct builder *b, const struct status_raft *r)
{
    json_t *o = json_object(), *members = json_array();
    if (!o || !members) {
        json_decref(members);
        json_decref(o);
        b->failed = true;
        return NULL;
    }
    put(b, o, "id", u64(r->id));
    put(b, o, "role", json_string(r->role));
    put(b, o, "serving", json_boolean(r->serving));
    put(b, o, "membership", json_string(r->membership ? r->membership : "voter"));
    put(b, o, "leader_id", r->leader_id ? u64(r->leader_id) : json_null());
    put(b, o, "term", u64(r->term));
    put(b, o, "commit_index", u64(r->commit_index));
    put(b, o, "applied_index", u64(r->applied_index));
    put(b, o, "last_index", u64(r->last_index));
    put(b, o, "leader_changes", u64(r->leader_changes));
    put(b, o, "state_digest", json_string(r->state_digest));
    for (size_t i = 0; i < r->nmembers && i < STATUS_RAFT_MEMBERS_MAX; i++) {
        json_t *m = json_object();
        if (!m) {
            b->failed = true;
            continue;
        }
        put(b, m, "id", u64(r->members[i].id));
        put(b, m, "raft_address", json_string(r->members[i].raft_address));
        put(b, m, "rpc_address",
            r->members[i].rpc_address[0] ? json_string(r->members[i].rpc_address) : json_null());
        append(b, members, m);
    }
    put(b, o, "members", members);
    return o;
}

int status_json_tree(const struct state *s, const struct status_extra *x, json_t **out)
{
    struct builder b = {false};
    json_t *root = json_object(), *workers = json_array(), *datasets = json_array(),
           *jobs = json_array();
    if (!root || !workers || !datasets || !jobs) {
        json_decref(workers);
        json_decref(datasets);
        json_decref(jobs);
        json_decref(root);
        return SLUICE_ERR_NOMEM;
    }
    struct status_figures *figs = NULL;
    if (x) {
        b.busy_all = busy_total(x);
        figs = malloc((s->njobs + s->nworkers + 1) * sizeof *figs);
        if (figs && status_all_figures(s, x, figs, figs + s->njobs) == 0) {
            b.jobs = figs;
            b.workers = figs + s->njobs;
        }
    }
    for (size_t i = 0; i < s->nworkers; i++)
        append(&b, workers, worker_json(&b, s, x, &s->workers[i]));
    for (size_t i = 0; i < s->ndatasets; i++)
        append(&b, datasets, dataset_json(&b, &s->datasets[i], false));
    for (size_t i = 0; i < s->njobs; i++)
        append(&b, jobs, job_json(&b, s, x, &s->jobs[i]));
    if (x) {
        put(&b, root, "recommended_workers", u64(x->recommended_workers));
        put(&b, root, "config", config_json(&b, x));
        if (x->pool_label)
            put(&b, root, "autoscale", autoscale_json(&b, x));
        if (x->raft)
            put(&b, root, "raft", raft_json(&b, x->raft));
    }
    put(&b, root, "workers", workers);
    put(&b, root, "datasets", datasets);
    put(&b, root, "jobs", jobs);
    /* Only when there are saves, so a cluster that never saved reports what it always did. */
    if (s->nsaves) {
        json_t *saves = json_array();
        if (!saves)
            b.failed = true;
        for (size_t i = 0; saves && i < s->nsaves; i++)
            append(&b, saves, save_json(&b, s, &s->saves[i]));
        put(&b, root, "saves", saves);
    }
    /* The same for weights schedules of named mix jobs. */
    if (s->nmixes) {
        json_t *mixes = json_array();
        if (!mixes)
            b.failed = true;
        for (size_t i = 0; mixes && i < s->nmixes; i++)
            append(&b, mixes, mix_json(&b, x, &s->mixes[i]));
        put(&b, root, "mixes", mixes);
    }
    free(figs);
    if (b.failed) {
        json_decref(root);
        return SLUICE_ERR_NOMEM;
    }
    *out = root;
    return 0;
}

int status_json_dump(json_t *root, char **out)
{
    struct builder b = {false};
    return dump(&b, root, out);
}

int status_json_extra(const struct state *s, const struct status_extra *x, char **out)
{
    json_t *root;
    int rc = status_json_tree(s, x, &root);
    return rc < 0 ? rc : status_json_dump(root, out);
}

int status_dataset_json(const struct state *s, const char *dataset_id, char **out)
{
    const struct st_dataset *d = state_dataset(s, dataset_id);
    if (d == NULL)
        return SLUICE_ERR_NOT_FOUND;
    struct builder b = {false};
    json_t *root = json_object(), *datasets = json_array();
    if (!root || !datasets) {
        json_decref(datasets);
        json_decref(root);
        return SLUICE_ERR_NOMEM;
    }
    append(&b, datasets, dataset_json(&b, d, true));
    put(&b, root, "datasets", datasets);
    return dump(&b, root, out);
}
