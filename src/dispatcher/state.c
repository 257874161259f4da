/* The dispatcher's state machine: its lifecycle and state_apply(). The tables' sorted lists and
 * rows are in state_tables.c, the names, lookups and queries in state_query.c, state_digest() in
 * digest.c, the planners in plan.c and plan_*.c.
 *
 * state_apply() checks an update completely against the state, and reserves every allocation it
 * needs, before it changes anything, so a refused update (or a failed allocation) leaves the
 * state exactly as it was. */
#include "state_internal.h"

#include "common/mix64.h"
#include "common/sha256.h"

#include <assert.h>

/* ---- small helpers --------------------------------------------------------------------------- */

static bool str_fits(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* ---- lifecycle and lookups ------------------------------------------------------------------- */

void state_init(struct state *s)
{
    memset(s, 0, sizeof *s);
    s->next_dataset_id = s->next_job_id = s->next_iteration_id = s->next_task_id =
        s->next_worker_id = s->next_client_id = 1;
}

static void epochs_release(struct st_iteration *it)
{
    for (size_t i = 0; i < it->nepochs; i++)
        state_seq_release(&it->epochs[i].tasks);
    free(it->epochs);
    it->epochs = NULL;
    it->nepochs = 0;
}

static void iteration_release(struct st_iteration *it)
{
    free(it->error);
    it->error = NULL;
    split_plan_release(&it->plan);
    state_seq_release(&it->pool);
    u64map_release(&it->held);
    epochs_release(it);
}

static void jobpos_release(struct st_jobpos *r)
{
    for (size_t i = 0; i < r->nconsumers; i++)
        for (size_t k = 0; k < r->consumers[i].nreports; k++)
            free(r->consumers[i].reports[k].bytes);
    free(r->consumers);
}

void state_release(struct state *s)
{
    for (size_t i = 0; i < s->ndatasets; i++) {
        free(s->datasets[i].def);
        free(s->datasets[i].text);
    }
    for (size_t i = 0; i < s->niterations; i++)
        iteration_release(&s->iterations[i]);
    for (size_t i = 0; i < s->ntasks; i++) {
        state_seq_release(&s->tasks[i].leased);
        state_seq_release(&s->tasks[i].granted);
    }
    for (size_t i = 0; i < s->nmixes; i++) {
        for (size_t k = 0; k < s->mixes[i].nchanges; k++)
            free(s->mixes[i].changes[k].weights);
        free(s->mixes[i].changes);
    }
    free(s->mixes);
    for (size_t i = 0; i < s->njobpos; i++)
        jobpos_release(&s->jobpos[i]);
    free(s->jobpos);
    for (size_t i = 0; i < s->nsaves; i++) {
        free(s->saves[i].path);
        free(s->saves[i].error);
    }
    free(s->saves);
    free(s->datasets);
    free(s->jobs);
    free(s->iterations);
    free(s->tasks);
    free(s->by_worker);
    free(s->by_iteration);
    free(s->by_address);
    free(s->workers);
    free(s->clients);
    memset(s, 0, sizeof *s);
}

static bool worker_has_tasks(const struct state *s, uint64_t worker_id)
{
    size_t n;
    state_worker_tasks(s, worker_id, &n);
    return n > 0;
}

/* ---- applying -------------------------------------------------------------------------------- */

#define CORRUPT SLUICE_ERR_CORRUPT

static int apply_dataset(struct state *s, const struct st_update *u)
{
    if (!str_fits(u->name, ST_ID_MAX) || u->name[0] == '\0' || (u->def_len > 0 && !u->def))
        return CORRUPT;
    if (u->id != 0) {
        char expect[32];
        snprintf(expect, sizeof expect, "%" PRIu64, u->id);
        if (strcmp(expect, u->name) != 0)
            return CORRUPT;
    }
    size_t i = state_dataset_lower(s, u->name);
    if (i < s->ndatasets && strcmp(s->datasets[i].id, u->name) == 0)
        return CORRUPT;
    uint8_t *def = malloc(u->def_len ? u->def_len : 1);
    char *text = strdup(u->text ? u->text : "");
    if (!def || !text ||
        state_grow((void **)&s->datasets, &s->cap_datasets, s->ndatasets + 1,
                   sizeof *s->datasets)) {
        free(def);
        free(text);
        return SLUICE_ERR_NOMEM;
    }
    if (u->def_len)
        memcpy(def, u->def, u->def_len);
    memmove(&s->datasets[i + 1], &s->datasets[i], (s->ndatasets - i) * sizeof *s->datasets);
    s->ndatasets++;
    struct st_dataset *d = &s->datasets[i];
    memset(d, 0, sizeof *d);
    memcpy(d->id, u->name, strlen(u->name) + 1);
    d->def = def;
    d->def_len = u->def_len;
    d->compression = u->compression;
    d->split_size = u->split_size;
    d->text = text;
    sha256_hex(text, strlen(text), d->digest);
    d->generated = u->id != 0;
    if (u->id != 0)
        s->next_dataset_id = max_u64(s->next_dataset_id, u->id + 1);
    return 0;
}

/* Whether a JOB_CREATED's selector, weight and bounds are what planning writes. */
static bool job_bounds_valid(const struct st_update *u)
{
    if (u->selector && !state_selector_valid(u->selector))
        return false;
    if (!(u->job_weight >= 0 && u->job_weight <= ST_WEIGHT_MAX))
        return false;
    return !(u->min_workers && u->max_workers && u->min_workers > u->max_workers);
}

static int apply_job_created(struct state *s, const struct st_update *u)
{
    if (u->id == 0 || state_job(s, u->id) || !str_fits(u->name, ST_ID_MAX) ||
        !str_fits(u->name2, ST_ID_MAX) || !state_dataset(s, u->name2) ||
        (unsigned)u->mode >= MODE_COUNT || !target_workers_valid(u->target_workers) ||
        !job_bounds_valid(u))
        return CORRUPT;
    /* A job is identified by its dataset and name. A key whose job was garbage-collected is
     * free again: the new job replaces the old one and its collected iteration. A live job's
     * key never is. */
    struct st_job *old =
        u->name[0] ? (struct st_job *)state_job_by_key(s, u->name2, u->name) : NULL;
    struct st_iteration *old_it = old ? STATE_FIND(s, iterations, old->iteration_id) : NULL;
    if (old && (!old_it || old_it->state != ST_ITER_GC))
        return CORRUPT;
    if (state_grow((void **)&s->jobs, &s->cap_jobs, s->njobs + 1, sizeof *s->jobs))
        return SLUICE_ERR_NOMEM;
    if (old) {
        iteration_release(old_it);
        state_row_erase(s->iterations, &s->niterations, sizeof *s->iterations, old_it);
        old = (struct st_job *)state_job_by_key(s, u->name2, u->name);
        state_row_erase(s->jobs, &s->njobs, sizeof *s->jobs, old);
    }
    struct st_job *j = state_row_insert(s->jobs, &s->njobs, sizeof *s->jobs, u->id);
    memcpy(j->name, u->name, strlen(u->name) + 1);
    memcpy(j->dataset_id, u->name2, strlen(u->name2) + 1);
    j->mode = (enum sluice_mode)u->mode;
    j->num_consumers = u->num_consumers;
    j->deterministic = u->deterministic;
    j->xtc_bytes = u->xtc_bytes;
    j->target_workers = (enum sluice_target_workers)u->target_workers;
    if (u->selector)
        memcpy(j->selector, u->selector, strlen(u->selector) + 1);
    else
        j->selector[0] = '\0';
    j->weight = u->job_weight > 0 ? u->job_weight : 1;
    j->min_workers = u->min_workers;
    j->max_workers = u->max_workers;
    j->iteration_id = 0;
    s->next_job_id = max_u64(s->next_job_id, u->id + 1);
    return 0;
}

static int apply_iteration_created(struct state *s, const struct st_update *u)
{
    struct st_job *j = STATE_FIND(s, jobs, u->ref);
    if (u->id == 0 || state_iteration(s, u->id) || !j)
        return CORRUPT;
    struct st_iteration *old = NULL;
    if (j->iteration_id != 0) {
        old = STATE_FIND(s, iterations, j->iteration_id);
        if (!old || old->state != ST_ITER_GC)
            return CORRUPT;
    }
    if ((j->mode == SLUICE_DISTRIBUTED_EPOCH) != u->distributed)
        return CORRUPT;
    if (u->start != 0 || u->seqs.n != 0) {
        if (!u->distributed || u->start > split_plan_total(&u->plan) || u->seqs.n > u->start ||
            !state_seq_strictly_increasing(&u->seqs) ||
            (u->seqs.n && u->seqs.v[u->seqs.n - 1] >= u->start))
            return CORRUPT;
    }
    struct split_plan plan = {0};
    struct st_seq_list pool = {0};
    if (u->distributed && split_plan_copy(&plan, &u->plan) < 0)
        return SLUICE_ERR_NOMEM;
    if (u->seqs.n && state_seq_assign(&pool, u->seqs.v, u->seqs.n) < 0) {
        split_plan_release(&plan);
        return SLUICE_ERR_NOMEM;
    }
    if (state_grow((void **)&s->iterations, &s->cap_iterations, s->niterations + 1,
                   sizeof *s->iterations)) {
        split_plan_release(&plan);
        free(pool.v);
        return SLUICE_ERR_NOMEM;
    }
    /* A job keeps one iteration row: the collected one it replaces goes now. Growing the table
     * may have moved it. */
    if (old) {
        old = STATE_FIND(s, iterations, j->iteration_id);
        iteration_release(old);
        state_row_erase(s->iterations, &s->niterations, sizeof *s->iterations, old);
    }
    struct st_iteration *it =
        state_row_insert(s->iterations, &s->niterations, sizeof *s->iterations, u->id);
    it->job_id = u->ref;
    it->repetition = u->ref2;
    it->state = ST_ITER_ACTIVE;
    it->distributed = u->distributed;
    it->plan = plan;
    it->split_total = u->distributed ? split_plan_total(&plan) : 0;
    it->key = u->key;
    it->resume_id = u->resume_id;
    /* A restored read starts past the splits its reader had: the cursor at start, the gaps
     * below it in the pool (checked above: increasing, below start). */
    it->split_cursor = u->start;
    it->pool = pool;
    it->splits_finished = u->start - pool.n;
    j->iteration_id = u->id;
    s->next_iteration_id = max_u64(s->next_iteration_id, u->id + 1);
    return 0;
}

/* The position of (key, task_id) in the index v[0, n), or where it would go. */
size_t state_ref_lower(const struct st_task_ref *v, size_t n, uint64_t key, uint64_t task_id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct st_task_ref *r = &v[mid];
        if (r->key < key || (r->key == key && r->task_id < task_id))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Inserts (key, task_id) into an index with room for one more. */
static void ref_insert(struct st_task_ref *v, size_t *n, uint64_t key, uint64_t task_id)
{
    size_t at = state_ref_lower(v, *n, key, task_id);
    memmove(&v[at + 1], &v[at], (*n - at) * sizeof *v);
    v[at] = (struct st_task_ref){key, task_id};
    (*n)++;
}

static void ref_erase(struct st_task_ref *v, size_t *n, uint64_t key, uint64_t task_id)
{
    size_t at = state_ref_lower(v, *n, key, task_id);
    if (at < *n && v[at].key == key && v[at].task_id == task_id) {
        memmove(&v[at], &v[at + 1], (*n - at - 1) * sizeof *v);
        (*n)--;
    }
}

static int cmp_task_ref(const void *a, const void *b)
{
    const struct st_task_ref *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->task_id < y->task_id ? -1 : x->task_id > y->task_id;
}

/* A split of it leased to task_id: into its held index (room reserved by the caller). */
static void held_add(struct st_iteration *it, uint64_t seq, uint64_t task_id)
{
    if (it->held.n == 0 || seq < it->held_low)
        it->held_low = seq;
    (void)u64map_put(&it->held, seq, task_id);
}

/* A split of it no longer leased. When it was the lowest, the next lowest is found by a walk up
 * from it, a step or two as splits finish about in order, or by a scan of the index when the
 * walk grows longer than the scan would be. */
static void held_del(struct st_iteration *it, uint64_t seq)
{
    if (!u64map_del(&it->held, seq) || it->held.n == 0 || seq != it->held_low)
        return;
    for (uint64_t next = seq + 1, steps = 0; steps < it->held.cap; next++, steps++) {
        if (u64map_get(&it->held, next, NULL)) {
            it->held_low = next;
            return;
        }
    }
    (void)u64map_min(&it->held, &it->held_low);
}

uint64_t state_task_mix(uint64_t task_id, uint64_t worker_id)
{
    /* Not FNV-1a: its hashes of small ids are nearly linear in them, so sums collided (tasks 1
     * and 4 summed to what tasks 6 and 7 did, each on the worker of its number, and a reader kept
     * a dead worker's task). */
    return mix64(mix64(task_id) ^ worker_id);
}

static int cmp_worker_address(const void *a, const void *b)
{
    const struct st_worker *const *x = a, *const *y = b;
    return strcmp((*x)->address, (*y)->address);
}

int state_reindex(struct state *s)
{
    s->nby_worker = s->nby_iteration = 0;
    if (state_grow((void **)&s->by_worker, &s->cap_by_worker, s->ntasks, sizeof *s->by_worker) ||
        state_grow((void **)&s->by_iteration, &s->cap_by_iteration, s->ntasks,
                   sizeof *s->by_iteration))
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < s->ntasks; i++) {
        s->by_worker[i] = (struct st_task_ref){s->tasks[i].worker_id, s->tasks[i].id};
        s->by_iteration[i] = (struct st_task_ref){s->tasks[i].iteration_id, s->tasks[i].id};
    }
    s->nby_worker = s->nby_iteration = s->ntasks;
    if (s->ntasks > 1) {
        qsort(s->by_worker, s->nby_worker, sizeof *s->by_worker, cmp_task_ref);
        qsort(s->by_iteration, s->nby_iteration, sizeof *s->by_iteration, cmp_task_ref);
    }
    s->nby_address = 0;
    if (state_grow((void **)&s->by_address, &s->cap_by_address, s->nworkers, sizeof *s->by_address))
        goto nomem;
    if (s->nworkers > 0) {
        const struct st_worker **order = malloc(s->nworkers * sizeof *order);
        if (!order)
            goto nomem;
        for (size_t i = 0; i < s->nworkers; i++)
            order[i] = &s->workers[i];
        qsort(order, s->nworkers, sizeof *order, cmp_worker_address);
        for (size_t i = 0; i < s->nworkers; i++)
            s->by_address[i] = order[i]->id;
        free(order);
    }
    s->nby_address = s->nworkers;
    for (size_t i = 0; i < s->niterations; i++) {
        struct st_iteration *it = &s->iterations[i];
        u64map_clear(&it->held);
        it->tasks_sum = 0;
        if (u64map_reserve(&it->held, it->splits_leased) < 0)
            goto nomem;
    }
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        struct st_iteration *it = STATE_FIND(s, iterations, t->iteration_id);
        if (it)
            it->tasks_sum += state_task_mix(t->id, t->worker_id);
        for (size_t k = 0; it && k < t->leased.n; k++) {
            if (u64map_reserve(&it->held, it->held.n + 1) < 0)
                goto nomem;
            held_add(it, t->leased.v[k], t->id);
        }
    }
    return 0;
nomem:
    s->nby_worker = s->nby_iteration = s->nby_address = 0;
    for (size_t i = 0; i < s->niterations; i++)
        u64map_clear(&s->iterations[i].held);
    return SLUICE_ERR_NOMEM;
}

static int apply_task_created(struct state *s, const struct st_update *u)
{
    const struct st_iteration *it = state_iteration(s, u->ref);
    if (u->id == 0 || state_task(s, u->id) || !it || it->state != ST_ITER_ACTIVE ||
        !state_worker(s, u->ref2))
        return CORRUPT;
    size_t nmine;
    const struct st_task_ref *mine = state_worker_tasks(s, u->ref2, &nmine);
    for (size_t i = 0; i < nmine; i++) {
        const struct st_task *t = state_task(s, mine[i].task_id);
        if (t && t->iteration_id == u->ref)
            return CORRUPT;
    }
    if (state_grow((void **)&s->tasks, &s->cap_tasks, s->ntasks + 1, sizeof *s->tasks) ||
        state_grow((void **)&s->by_worker, &s->cap_by_worker, s->nby_worker + 1,
                   sizeof *s->by_worker) ||
        state_grow((void **)&s->by_iteration, &s->cap_by_iteration, s->nby_iteration + 1,
                   sizeof *s->by_iteration))
        return SLUICE_ERR_NOMEM;
    struct st_task *t = state_row_insert(s->tasks, &s->ntasks, sizeof *s->tasks, u->id);
    t->iteration_id = u->ref;
    t->worker_id = u->ref2;
    ref_insert(s->by_worker, &s->nby_worker, u->ref2, u->id);
    ref_insert(s->by_iteration, &s->nby_iteration, u->ref, u->id);
    s->next_task_id = max_u64(s->next_task_id, u->id + 1);
    struct st_iteration *it_w = STATE_FIND(s, iterations, u->ref); /* checked above */
    it_w->tasks_sum += state_task_mix(u->id, u->ref2);
    return 0;
}

static int apply_task_finished(struct state *s, const struct st_update *u)
{
    struct st_task *t = STATE_FIND(s, tasks, u->id);
    if (!t || t->finished || t->leased.n > 0)
        return CORRUPT;
    t->finished = true;
    return 0;
}

static int apply_task_removed(struct state *s, const struct st_update *u)
{
    struct st_task *t = STATE_FIND(s, tasks, u->id);
    if (!t)
        return CORRUPT;
    struct st_iteration *it = STATE_FIND(s, iterations, t->iteration_id);
    if (it) {
        it->tasks_sum -= state_task_mix(t->id, t->worker_id);
        it->splits_leased -= t->leased.n;
        for (size_t i = 0; i < t->leased.n; i++)
            held_del(it, t->leased.v[i]);
    }
    state_seq_release(&t->leased);
    state_seq_release(&t->granted);
    ref_erase(s->by_worker, &s->nby_worker, t->worker_id, t->id);
    ref_erase(s->by_iteration, &s->nby_iteration, t->iteration_id, t->id);
    state_row_erase(s->tasks, &s->ntasks, sizeof *s->tasks, t);
    return 0;
}

static int apply_worker_registered(struct state *s, const struct st_update *u)
{
    if (u->id == 0 || state_worker(s, u->id) || !str_fits(u->address, ST_ADDR_MAX) ||
        u->address[0] == '\0' || state_worker_by_address(s, u->address) ||
        !str_fits(u->host_id, ST_HOST_MAX) || (u->labels && !state_labels_valid(u->labels)) ||
        u->task_slots > ST_TASK_SLOTS_MAX)
        return CORRUPT;
    if (state_grow((void **)&s->workers, &s->cap_workers, s->nworkers + 1, sizeof *s->workers) ||
        state_grow((void **)&s->by_address, &s->cap_by_address, s->nby_address + 1,
                   sizeof *s->by_address))
        return SLUICE_ERR_NOMEM;
    size_t at = state_address_lower(s, u->address);
    memmove(s->by_address + at + 1, s->by_address + at,
            (s->nby_address - at) * sizeof *s->by_address);
    s->by_address[at] = u->id;
    s->nby_address++;
    struct st_worker *w = state_row_insert(s->workers, &s->nworkers, sizeof *s->workers, u->id);
    memcpy(w->address, u->address, strlen(u->address) + 1);
    w->incarnation = u->incarnation;
    w->key = u->key;
    memcpy(w->host_id, u->host_id, strlen(u->host_id) + 1);
    if (u->labels)
        memcpy(w->labels, u->labels, strlen(u->labels) + 1);
    else
        w->labels[0] = '\0';
    w->task_slots = u->task_slots;
    s->next_worker_id = max_u64(s->next_worker_id, u->id + 1);
    return 0;
}

static int apply_worker_removed(struct state *s, const struct st_update *u)
{
    struct st_worker *w = STATE_FIND(s, workers, u->id);
    if (!w || worker_has_tasks(s, u->id))
        return CORRUPT;
    size_t at = state_address_lower(s, w->address);
    assert(at < s->nby_address && s->by_address[at] == u->id);
    memmove(s->by_address + at, s->by_address + at + 1,
            (s->nby_address - at - 1) * sizeof *s->by_address);
    s->nby_address--;
    state_row_erase(s->workers, &s->nworkers, sizeof *s->workers, w);
    return 0;
}

static int apply_worker_draining(struct state *s, const struct st_update *u)
{
    struct st_worker *w = STATE_FIND(s, workers, u->id);
    if (!w || w->draining)
        return CORRUPT;
    w->draining = true;
    return 0;
}

static int apply_client_acquired(struct state *s, const struct st_update *u)
{
    const struct st_iteration *it = state_iteration(s, u->ref);
    if (u->id == 0 || state_client(s, u->id) || !it || it->state == ST_ITER_GC ||
        !str_fits(u->host_id, ST_HOST_MAX))
        return CORRUPT;
    if (state_grow((void **)&s->clients, &s->cap_clients, s->nclients + 1, sizeof *s->clients))
        return SLUICE_ERR_NOMEM;
    struct st_client *c = state_row_insert(s->clients, &s->nclients, sizeof *s->clients, u->id);
    c->iteration_id = u->ref;
    c->owner = u->incarnation;
    memcpy(c->host_id, u->host_id, strlen(u->host_id) + 1);
    s->next_client_id = max_u64(s->next_client_id, u->id + 1);
    return 0;
}

static int apply_client_released(struct state *s, const struct st_update *u)
{
    struct st_client *c = STATE_FIND(s, clients, u->id);
    if (!c)
        return CORRUPT;
    state_row_erase(s->clients, &s->nclients, sizeof *s->clients, c);
    return 0;
}

/* The iteration and task a SPLITS_* update names, checked to belong together. */
static int split_target(struct state *s, const struct st_update *u, struct st_iteration **it,
                        struct st_task **t)
{
    *it = STATE_FIND(s, iterations, u->ref);
    *t = STATE_FIND(s, tasks, u->ref2);
    if (!*it || !*t || !(*it)->distributed || (*t)->iteration_id != u->ref || u->seqs.n == 0 ||
        !state_seq_strictly_increasing(&u->seqs))
        return CORRUPT;
    return 0;
}

static int apply_splits_leased(struct state *s, const struct st_update *u)
{
    struct st_iteration *it;
    struct st_task *t;
    if (split_target(s, u, &it, &t) < 0 || it->state != ST_ITER_ACTIVE || t->finished)
        return CORRUPT;
    /* A numbered lease answers a request newer than the last one: a repeated number is answered
     * from the task's record, never leased again. */
    if (u->id != 0 && u->id <= t->last_request)
        return CORRUPT;
    /* Pool entries (all below the cursor) come first, then a run from the cursor. */
    uint64_t next = it->split_cursor;
    for (size_t i = 0; i < u->seqs.n; i++) {
        uint64_t seq = u->seqs.v[i];
        if (seq < it->split_cursor) {
            if (!state_seq_contains(&it->pool, seq))
                return CORRUPT;
        } else {
            if (seq != next || seq >= it->split_total)
                return CORRUPT;
            next++;
        }
    }
    if (state_seq_reserve(&t->leased, u->seqs.n) < 0 ||
        u64map_reserve(&it->held, it->held.n + u->seqs.n) < 0)
        return SLUICE_ERR_NOMEM;
    if (u->id != 0) {
        struct st_seq_list granted = {0};
        if (state_seq_assign(&granted, u->seqs.v, u->seqs.n) < 0)
            return SLUICE_ERR_NOMEM;
        state_seq_release(&t->granted);
        t->granted = granted;
        t->last_request = u->id;
    }
    for (size_t i = 0; i < u->seqs.n; i++) {
        if (u->seqs.v[i] < it->split_cursor)
            state_seq_remove(&it->pool, u->seqs.v[i]);
        state_seq_insert(&t->leased, u->seqs.v[i]);
        held_add(it, u->seqs.v[i], t->id); /* room reserved above */
    }
    it->split_cursor = next;
    it->splits_leased += u->seqs.n;
    return 0;
}

/* SPLITS_FINISHED with no task: splits a consumer received in full, wherever they are: leased
 * to a task of the iteration (found by the held index) or back in its pool. One update carries a
 * whole client heartbeat's finished splits, whichever tasks hold them. */
static int apply_finished_anywhere(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = STATE_FIND(s, iterations, u->ref);
    if (!it || !it->distributed || u->seqs.n == 0 || !state_seq_strictly_increasing(&u->seqs))
        return CORRUPT;
    /* Checked whole before anything changes: a corrupt update leaves the state as it was. */
    for (size_t i = 0; i < u->seqs.n; i++) {
        uint64_t seq = u->seqs.v[i], task_id;
        if (u64map_get(&it->held, seq, &task_id)) {
            const struct st_task *t = STATE_FIND(s, tasks, task_id);
            if (!t || t->iteration_id != it->id || !state_seq_contains(&t->leased, seq))
                return CORRUPT;
        } else if (!state_seq_contains(&it->pool, seq)) {
            return CORRUPT;
        }
    }
    for (size_t i = 0; i < u->seqs.n; i++) {
        uint64_t seq = u->seqs.v[i], task_id;
        if (u64map_get(&it->held, seq, &task_id)) {
            struct st_task *t = STATE_FIND(s, tasks, task_id);
            state_seq_remove(&t->leased, seq);
            held_del(it, seq);
            it->splits_leased--;
        } else {
            state_seq_remove(&it->pool, seq);
        }
    }
    it->splits_finished += u->seqs.n;
    return 0;
}

static int apply_splits_done(struct state *s, const struct st_update *u, bool returned)
{
    struct st_iteration *it;
    struct st_task *t;
    if (!returned && u->ref2 == 0)
        return apply_finished_anywhere(s, u);
    if (split_target(s, u, &it, &t) < 0)
        return CORRUPT;
    for (size_t i = 0; i < u->seqs.n; i++) {
        if (!state_seq_contains(&t->leased, u->seqs.v[i]))
            return CORRUPT;
    }
    if (returned && state_seq_reserve(&it->pool, u->seqs.n) < 0)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < u->seqs.n; i++) {
        state_seq_remove(&t->leased, u->seqs.v[i]);
        held_del(it, u->seqs.v[i]);
        if (returned)
            state_seq_insert(&it->pool, u->seqs.v[i]);
    }
    it->splits_leased -= u->seqs.n;
    if (!returned)
        it->splits_finished += u->seqs.n;
    return 0;
}

static int apply_iteration_finished(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = STATE_FIND(s, iterations, u->id);
    if (!it || it->state != ST_ITER_ACTIVE)
        return CORRUPT;
    it->state = ST_ITER_FINISHED;
    return 0;
}

static int apply_iteration_failed(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = STATE_FIND(s, iterations, u->id);
    if (!it || it->state != ST_ITER_ACTIVE || it->error)
        return CORRUPT;
    it->error = strdup(u->text && u->text[0] ? u->text : "task failed");
    return it->error ? 0 : SLUICE_ERR_NOMEM;
}

static int apply_iteration_gc(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = STATE_FIND(s, iterations, u->id);
    if (!it || it->state == ST_ITER_GC || state_iteration_clients(s, u->id) > 0 ||
        state_save_running(s, u->id))
        return CORRUPT;
    size_t ntasks;
    state_iteration_tasks(s, u->id, &ntasks);
    if (ntasks > 0)
        return CORRUPT;
    struct st_job *j = STATE_FIND(s, jobs, it->job_id);
    if (!j || j->iteration_id != u->id)
        return CORRUPT;
    iteration_release(it);
    if (j->name[0] == '\0') {
        /* Nothing can refer to an anonymous job once its only iteration is gone. */
        state_row_erase(s->iterations, &s->niterations, sizeof *s->iterations, it);
        state_row_erase(s->jobs, &s->njobs, sizeof *s->jobs, j);
        return 0;
    }
    it->state = ST_ITER_GC;
    it->split_total = it->split_cursor = 0;
    it->rounds_granted = 0;
    return 0;
}

static int apply_rounds_scheduled(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = STATE_FIND(s, iterations, u->ref);
    if (!it || it->state != ST_ITER_ACTIVE || !state_iteration_coordinated(s, it) ||
        u->ref2 != it->rounds_granted || !state_seq_strictly_increasing(&u->seqs))
        return CORRUPT;
    for (size_t i = 0; i < u->seqs.n; i++) {
        const struct st_task *t = state_task(s, u->seqs.v[i]);
        if (!t || t->iteration_id != it->id)
            return CORRUPT;
    }
    struct st_seq_list tasks = {0};
    if (state_seq_assign(&tasks, u->seqs.v, u->seqs.n) < 0)
        return SLUICE_ERR_NOMEM;
    /* An epoch starting at the same round was never read: the new one replaces it. */
    if (it->nepochs > 0 && it->epochs[it->nepochs - 1].start == u->ref2) {
        struct st_round_epoch *last = &it->epochs[it->nepochs - 1];
        state_seq_release(&last->tasks);
        last->tasks = tasks;
        return 0;
    }
    if (it->nepochs == ST_ROUND_EPOCHS_MAX) {
        state_seq_release(&it->epochs[0].tasks);
        memmove(&it->epochs[0], &it->epochs[1], (it->nepochs - 1) * sizeof *it->epochs);
        it->nepochs--;
    } else {
        size_t cap = it->nepochs;
        if (state_grow((void **)&it->epochs, &cap, it->nepochs + 1, sizeof *it->epochs) < 0) {
            state_seq_release(&tasks);
            return SLUICE_ERR_NOMEM;
        }
    }
    it->epochs[it->nepochs].start = u->ref2;
    it->epochs[it->nepochs].tasks = tasks;
    it->nepochs++;
    return 0;
}

static int apply_rounds_granted(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = STATE_FIND(s, iterations, u->ref);
    if (!it || it->state != ST_ITER_ACTIVE || !state_iteration_coordinated(s, it) ||
        u->ref2 <= it->rounds_granted)
        return CORRUPT;
    it->rounds_granted = u->ref2;
    return 0;
}

/* Whether a new save may go into path: no save did, or the last one there failed. */
static bool save_path_free(const struct state *s, const char *path)
{
    const struct st_save *sv = state_save_by_path(s, path);
    return !sv || sv->state == ST_SV_FAILED;
}

static int apply_save_started(struct state *s, const struct st_update *u)
{
    const struct st_job *j = state_job(s, u->ref);
    const struct st_iteration *it = state_iteration(s, u->ref2);
    uint64_t next = s->nsaves ? s->saves[s->nsaves - 1].id + 1 : 1;
    if (u->id != next || !j || j->name[0] || !it || it->job_id != j->id ||
        j->iteration_id != it->id || it->state != ST_ITER_ACTIVE || !it->distributed ||
        strcmp(j->dataset_id, u->name) != 0 || !str_fits(u->name, ST_ID_MAX) || !u->text ||
        (u->text[0] != '/' && strncmp(u->text, "s3://", 5) != 0) ||
        strlen(u->text) >= ST_PATH_MAX || !save_path_free(s, u->text) ||
        (s->nsaves && s->saves[s->nsaves - 1].iteration_id >= it->id))
        return CORRUPT;
    char *path = strdup(u->text);
    if (!path || state_grow((void **)&s->saves, &s->cap_saves, s->nsaves + 1, sizeof *s->saves)) {
        free(path);
        return SLUICE_ERR_NOMEM;
    }
    struct st_save *sv = &s->saves[s->nsaves++];
    memset(sv, 0, sizeof *sv);
    sv->id = u->id;
    memcpy(sv->dataset_id, u->name, strlen(u->name) + 1);
    sv->path = path;
    sv->job_id = j->id;
    sv->iteration_id = it->id;
    sv->chunks = it->split_total;
    sv->state = ST_SV_RUNNING;
    return 0;
}

static int apply_save_over(struct state *s, const struct st_update *u, bool failed)
{
    struct st_save *sv = STATE_FIND(s, saves, u->id);
    if (!sv || sv->state != ST_SV_RUNNING)
        return CORRUPT;
    if (failed) {
        char *why = strdup(u->text && u->text[0] ? u->text : "save failed");
        if (!why)
            return SLUICE_ERR_NOMEM;
        sv->error = why;
        sv->state = ST_SV_FAILED;
    } else {
        sv->state = ST_SV_FINISHED;
    }
    return 0;
}

bool state_labels_valid(const char *labels)
{
    size_t len = strlen(labels);
    if (len >= ST_LABELS_MAX)
        return false;
    if (len == 0)
        return true;
    char copy[ST_LABELS_MAX], canon[ST_LABELS_MAX], err[128];
    const char *items[LABELS_MAX + 1];
    size_t n = 0;
    memcpy(copy, labels, len + 1);
    for (char *p = copy; p && n <= LABELS_MAX;) {
        items[n++] = p;
        p = strchr(p, ',');
        if (p)
            *p++ = '\0';
    }
    return n <= LABELS_MAX &&
           labels_canonical(items, n, canon, sizeof canon, err, sizeof err) == 0 &&
           strcmp(canon, labels) == 0;
}

bool state_selector_valid(const char *selector)
{
    struct selector sel;
    char canon[ST_SELECTOR_MAX], err[128];
    if (strlen(selector) >= ST_SELECTOR_MAX || selector_parse(selector, &sel, err, sizeof err) < 0)
        return false;
    selector_format(&sel, canon, sizeof canon);
    return strcmp(canon, selector) == 0;
}

bool state_mix_weights_valid(const double *w, size_t n)
{
    if (n == 0 || n > ST_MIX_INPUTS_MAX)
        return false;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (!(w[i] >= 0) || w[i] > 1e300)
            return false;
        any = any || w[i] > 0;
    }
    return any;
}

static int apply_mix_weights(struct state *s, const struct st_update *u)
{
    if (!u->name[0] || !str_fits(u->name, ST_ID_MAX) || !str_fits(u->name2, ST_ID_MAX) ||
        !state_dataset(s, u->name2))
        return CORRUPT;
    struct st_mix *m = (struct st_mix *)state_mix(s, u->name2, u->name);
    uint64_t horizon = m ? m->horizon : 0;
    if (u->start < horizon)
        return CORRUPT;
    if (u->nweights) {
        if (!state_mix_weights_valid(u->weights, u->nweights) || u->ref < horizon ||
            (m && m->nchanges && u->ref <= m->changes[m->nchanges - 1].from) ||
            (m && m->nchanges && m->changes[0].nweights != u->nweights))
            return CORRUPT;
    }
    if (!m) {
        if (state_grow((void **)&s->mixes, &s->cap_mixes, s->nmixes + 1, sizeof *s->mixes))
            return SLUICE_ERR_NOMEM;
        m = &s->mixes[s->nmixes++];
        memset(m, 0, sizeof *m);
        memcpy(m->dataset_id, u->name2, strlen(u->name2) + 1);
        memcpy(m->job_name, u->name, strlen(u->name) + 1);
    }
    if (u->nweights) {
        double *w = malloc(u->nweights * sizeof *w);
        struct st_mix_change *v = realloc(m->changes, (m->nchanges + 1) * sizeof *v);
        if (v)
            m->changes = v;
        if (!w || !v) {
            free(w);
            return SLUICE_ERR_NOMEM;
        }
        memcpy(w, u->weights, u->nweights * sizeof *w);
        v[m->nchanges++] = (struct st_mix_change){u->ref, w, u->nweights};
    }
    /* A change is known to every reader that reads up to it: none goes below it any more. */
    m->horizon = u->nweights && u->ref > u->start ? u->ref : u->start;
    return 0;
}

static void jobpos_clear(struct state *s, struct st_jobpos *r)
{
    for (size_t i = 0; i < r->nconsumers; i++)
        for (size_t k = 0; k < r->consumers[i].nreports; k++) {
            s->jobpos_bytes -= r->consumers[i].reports[k].len;
            free(r->consumers[i].reports[k].bytes);
        }
    free(r->consumers);
    r->consumers = NULL;
    r->nconsumers = 0;
}

static int apply_job_position(struct state *s, const struct st_update *u)
{
    if (!u->name[0] || !str_fits(u->name, ST_ID_MAX) || u->start == 0 ||
        u->start > ST_JOBPOS_STEP_MAX || !u->def || u->def_len == 0 ||
        u->def_len > ST_JOBPOS_BYTES_MAX)
        return CORRUPT;
    size_t at = s->njobpos;
    for (size_t i = 0; i < s->njobpos; i++)
        if (strcmp(s->jobpos[i].job_name, u->name) == 0)
            at = i;
    struct st_jobpos *r = at < s->njobpos ? &s->jobpos[at] : NULL;
    if (r && u->ref < r->generation)
        return CORRUPT;
    bool fresh = !r || u->ref > r->generation;
    struct st_jobpos_consumer *c = NULL;
    for (size_t i = 0; r && !fresh && i < r->nconsumers; i++)
        if (r->consumers[i].client_id == u->id)
            c = &r->consumers[i];
    /* Everything that can fail first: the state stays as it was. */
    uint8_t *b = malloc(u->def_len);
    if (!b)
        return SLUICE_ERR_NOMEM;
    memcpy(b, u->def, u->def_len);
    if (!c) {
        size_t n = fresh ? 0 : r->nconsumers;
        struct st_jobpos_consumer *v =
            fresh ? malloc(sizeof *v) : realloc(r->consumers, (n + 1) * sizeof *v);
        if (!v || (!r && state_grow((void **)&s->jobpos, &s->cap_jobpos, s->njobpos + 1,
                                    sizeof *s->jobpos))) {
            if (fresh)
                free(v);
            else if (v)
                r->consumers = v;
            free(b);
            return SLUICE_ERR_NOMEM;
        }
        if (!r) {
            if (s->njobpos >= ST_JOBPOS_MAX) {
                jobpos_clear(s, &s->jobpos[0]);
                memmove(&s->jobpos[0], &s->jobpos[1], (s->njobpos - 1) * sizeof *s->jobpos);
                s->njobpos--;
            }
            r = &s->jobpos[s->njobpos++];
            memset(r, 0, sizeof *r);
            memcpy(r->job_name, u->name, strlen(u->name) + 1);
            at = s->njobpos - 1;
        } else if (fresh) {
            jobpos_clear(s, r);
        }
        if (fresh) {
            r->consumers = v;
            r->nconsumers = 0;
        } else {
            r->consumers = v;
        }
        r->generation = u->ref;
        c = &r->consumers[r->nconsumers++];
        memset(c, 0, sizeof *c);
        c->client_id = u->id;
    }
    /* The report of this step replaces the one kept, or joins in order of step. */
    size_t k = 0;
    while (k < c->nreports && c->reports[k].step < u->start)
        k++;
    if (k < c->nreports && c->reports[k].step == u->start) {
        s->jobpos_bytes -= c->reports[k].len;
        free(c->reports[k].bytes);
    } else {
        if (c->nreports == ST_JOBPOS_STEPS) {
            if (k == 0) { /* older than every step kept: it would go at once */
                free(b);
                goto recent;
            }
            s->jobpos_bytes -= c->reports[0].len;
            free(c->reports[0].bytes);
            memmove(&c->reports[0], &c->reports[1], (c->nreports - 1) * sizeof c->reports[0]);
            c->nreports--;
            k--;
        }
        memmove(&c->reports[k + 1], &c->reports[k], (c->nreports - k) * sizeof c->reports[0]);
        c->nreports++;
    }
    c->reports[k] = (struct st_jobpos_report){u->start, b, u->def_len};
    s->jobpos_bytes += u->def_len;
recent:
    /* The row becomes the most recent. */
    if (at + 1 < s->njobpos) {
        struct st_jobpos tmp = s->jobpos[at];
        memmove(&s->jobpos[at], &s->jobpos[at + 1], (s->njobpos - at - 1) * sizeof tmp);
        s->jobpos[s->njobpos - 1] = tmp;
    }
    return 0;
}

int state_apply(struct state *s, const struct st_update *u)
{
    /* Ids come from counters that state_apply() raises to id + 1: the last value would wrap
     * one to 0, after which ids would repeat. */
    if (u->id == UINT64_MAX)
        return CORRUPT;
    int rc;
    switch (u->type) {
    case ST_DATASET_REGISTERED:
        rc = apply_dataset(s, u);
        break;
    case ST_JOB_CREATED:
        rc = apply_job_created(s, u);
        break;
    case ST_ITERATION_CREATED:
        rc = apply_iteration_created(s, u);
        break;
    case ST_TASK_CREATED:
        rc = apply_task_created(s, u);
        break;
    case ST_TASK_FINISHED:
        rc = apply_task_finished(s, u);
        break;
    case ST_TASK_REMOVED:
        rc = apply_task_removed(s, u);
        break;
    case ST_WORKER_REGISTERED:
        rc = apply_worker_registered(s, u);
        break;
    case ST_WORKER_REMOVED:
        rc = apply_worker_removed(s, u);
        break;
    case ST_WORKER_DRAINING:
        rc = apply_worker_draining(s, u);
        break;
    case ST_CLIENT_ACQUIRED:
        rc = apply_client_acquired(s, u);
        break;
    case ST_CLIENT_RELEASED:
        rc = apply_client_released(s, u);
        break;
    case ST_SPLITS_LEASED:
        rc = apply_splits_leased(s, u);
        break;
    case ST_SPLITS_FINISHED:
        rc = apply_splits_done(s, u, false);
        break;
    case ST_SPLITS_RETURNED:
        rc = apply_splits_done(s, u, true);
        break;
    case ST_ITERATION_FINISHED:
        rc = apply_iteration_finished(s, u);
        break;
    case ST_ITERATION_GC:
        rc = apply_iteration_gc(s, u);
        break;
    case ST_ROUNDS_SCHEDULED:
        rc = apply_rounds_scheduled(s, u);
        break;
    case ST_ROUNDS_GRANTED:
        rc = apply_rounds_granted(s, u);
        break;
    case ST_ITERATION_FAILED:
        rc = apply_iteration_failed(s, u);
        break;
    case ST_SAVE_STARTED:
        rc = apply_save_started(s, u);
        break;
    case ST_SAVE_FINISHED:
        rc = apply_save_over(s, u, false);
        break;
    case ST_SAVE_FAILED:
        rc = apply_save_over(s, u, true);
        break;
    case ST_MIX_WEIGHTS:
        rc = apply_mix_weights(s, u);
        break;
    case ST_JOB_POSITION:
        rc = apply_job_position(s, u);
        break;
    default:
        rc = CORRUPT;
        break;
    }
    if (rc == 0)
        s->applied++;
    return rc;
}
