/* The dispatcher's state machine: tables, state_apply() and the planning functions.
 *
 * state_apply() checks an update completely against the state, and reserves every allocation it
 * needs, before it changes anything, so a refused update (or a failed allocation) leaves the
 * state exactly as it was. The planning functions only read the state; when one plan appends
 * several updates whose effects build on each other (a task finished, then its iteration
 * finished), the later decisions look at the updates already appended by the same call. */
#include "state.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every table but the datasets is an array of rows that begin with their uint64_t id. */
_Static_assert(offsetof(struct st_job, id) == 0, "row id first");
_Static_assert(offsetof(struct st_iteration, id) == 0, "row id first");
_Static_assert(offsetof(struct st_task, id) == 0, "row id first");
_Static_assert(offsetof(struct st_worker, id) == 0, "row id first");
_Static_assert(offsetof(struct st_client, id) == 0, "row id first");

#define ST_MODE_COUNT 6

/* ---- names ----------------------------------------------------------------------------------- */

static const char *const mode_names[ST_MODE_COUNT] = {
    "parallel_epochs", "distributed_epoch", "file", "data", "file_or_data", "hint"};

const char *st_iteration_state_name(enum st_iteration_state state)
{
    switch (state) {
    case ST_ITER_ACTIVE:
        return "active";
    case ST_ITER_FINISHED:
        return "finished";
    case ST_ITER_GC:
        return "garbage_collected";
    }
    return "unknown";
}

const char *st_mode_name(enum st_mode mode)
{
    if ((unsigned)mode < ST_MODE_COUNT)
        return mode_names[mode];
    return "unknown";
}

int st_mode_parse(const char *text, enum st_mode *out)
{
    for (int i = 0; i < ST_MODE_COUNT; i++) {
        if (strcmp(text, mode_names[i]) == 0) {
            *out = (enum st_mode)i;
            return 0;
        }
    }
    if (strcmp(text, "off") == 0) {
        *out = ST_MODE_PARALLEL_EPOCHS;
        return 0;
    }
    if (strcmp(text, "dynamic") == 0) {
        *out = ST_MODE_DISTRIBUTED_EPOCH;
        return 0;
    }
    return SLUICE_ERR_INVALID;
}

static const char *const update_names[] = {
    [ST_DATASET_REGISTERED] = "dataset_registered",
    [ST_JOB_CREATED] = "job_created",
    [ST_ITERATION_CREATED] = "iteration_created",
    [ST_TASK_CREATED] = "task_created",
    [ST_TASK_FINISHED] = "task_finished",
    [ST_TASK_REMOVED] = "task_removed",
    [ST_WORKER_REGISTERED] = "worker_registered",
    [ST_WORKER_REMOVED] = "worker_removed",
    [ST_CLIENT_ACQUIRED] = "client_acquired",
    [ST_CLIENT_RELEASED] = "client_released",
    [ST_SPLITS_LEASED] = "splits_leased",
    [ST_SPLITS_FINISHED] = "splits_finished",
    [ST_SPLITS_RETURNED] = "splits_returned",
    [ST_ITERATION_FINISHED] = "iteration_finished",
    [ST_ITERATION_GC] = "iteration_gc",
    [ST_WORKER_DRAINING] = "worker_draining",
    [ST_ROUNDS_SCHEDULED] = "rounds_scheduled",
    [ST_ROUNDS_GRANTED] = "rounds_granted",
};

const char *st_update_name(enum st_update_type type)
{
    if ((unsigned)type < sizeof update_names / sizeof update_names[0] && update_names[type])
        return update_names[type];
    return "unknown";
}

/* Compression values as Sluice__Compression numbers them; state.c does not see protobuf. */
static const char *compression_name(int compression)
{
    switch (compression) {
    case 0:
        return "auto";
    case 1:
        return "none";
    default:
        return "unknown";
    }
}

/* ---- small helpers --------------------------------------------------------------------------- */

static int grow(void **v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    void *p = realloc(*v, c * size);
    if (!p)
        return SLUICE_ERR_NOMEM;
    *v = p;
    *cap = c;
    return 0;
}

static bool str_fits(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* ---- sequence lists -------------------------------------------------------------------------- */

static void seq_release(struct st_seq_list *l)
{
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static int seq_reserve(struct st_seq_list *l, size_t extra)
{
    return grow((void **)&l->v, &l->cap, l->n + extra, sizeof *l->v);
}

/* Index of the first entry >= v. */
static size_t seq_lower(const struct st_seq_list *l, uint64_t v)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->v[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool seq_contains(const struct st_seq_list *l, uint64_t v)
{
    size_t i = seq_lower(l, v);
    return i < l->n && l->v[i] == v;
}

/* Inserts v (absent) keeping the list sorted; capacity must be reserved. */
static void seq_insert(struct st_seq_list *l, uint64_t v)
{
    size_t i = seq_lower(l, v);
    memmove(l->v + i + 1, l->v + i, (l->n - i) * sizeof *l->v);
    l->v[i] = v;
    l->n++;
}

/* Removes v, which must be present. */
static void seq_remove(struct st_seq_list *l, uint64_t v)
{
    size_t i = seq_lower(l, v);
    memmove(l->v + i, l->v + i + 1, (l->n - i - 1) * sizeof *l->v);
    l->n--;
}

static int seq_assign(struct st_seq_list *dst, const uint64_t *v, size_t n)
{
    dst->n = 0;
    if (n == 0)
        return 0;
    int rc = seq_reserve(dst, n);
    if (rc < 0)
        return rc;
    memcpy(dst->v, v, n * sizeof *v);
    dst->n = n;
    return 0;
}

static bool seq_strictly_increasing(const struct st_seq_list *l)
{
    for (size_t i = 1; i < l->n; i++) {
        if (l->v[i] <= l->v[i - 1])
            return false;
    }
    return true;
}

/* ---- split plans ----------------------------------------------------------------------------- */

void st_split_plan_release(struct st_split_plan *p)
{
    for (size_t i = 0; i < p->npaths; i++)
        free(p->paths[i]);
    free(p->paths);
    memset(p, 0, sizeof *p);
}

int st_split_plan_copy(struct st_split_plan *dst, const struct st_split_plan *src)
{
    memset(dst, 0, sizeof *dst);
    dst->source_len = src->source_len;
    dst->split_size = src->split_size;
    dst->per_pass = src->per_pass;
    dst->passes = src->passes;
    if (src->npaths == 0)
        return 0;
    dst->paths = calloc(src->npaths, sizeof *dst->paths);
    if (!dst->paths)
        goto fail;
    for (size_t i = 0; i < src->npaths; i++) {
        dst->paths[i] = strdup(src->paths[i]);
        if (!dst->paths[i]) {
            dst->npaths = i;
            goto fail;
        }
    }
    dst->npaths = src->npaths;
    return 0;
fail:
    st_split_plan_release(dst);
    return SLUICE_ERR_NOMEM;
}

uint64_t st_split_plan_total(const struct st_split_plan *p)
{
    if (p->per_pass == 0 || p->passes == 0)
        return 0;
    if (p->passes == UINT64_MAX || p->passes > UINT64_MAX / p->per_pass)
        return UINT64_MAX;
    return p->per_pass * p->passes;
}

/* ---- update lists ---------------------------------------------------------------------------- */

void st_update_release(struct st_update *u)
{
    free(u->def);
    free(u->text);
    st_split_plan_release(&u->plan);
    seq_release(&u->seqs);
    u->def = NULL;
    u->def_len = 0;
    u->text = NULL;
}

struct st_update *st_update_list_push(struct st_update_list *l, enum st_update_type type)
{
    if (grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) < 0)
        return NULL;
    struct st_update *u = &l->v[l->n++];
    memset(u, 0, sizeof *u);
    u->type = type;
    return u;
}

void st_update_list_clear(struct st_update_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        st_update_release(&l->v[i]);
    l->n = 0;
}

void st_update_list_release(struct st_update_list *l)
{
    st_update_list_clear(l);
    free(l->v);
    l->v = NULL;
    l->cap = 0;
}

/* Drops the updates appended after start: a plan that fails leaves the list as it found it. */
static void list_truncate(struct st_update_list *l, size_t start)
{
    while (l->n > start)
        st_update_release(&l->v[--l->n]);
}

/* ---- id tables ------------------------------------------------------------------------------- */

static uint64_t row_id(const void *base, size_t i, size_t size)
{
    uint64_t id;
    memcpy(&id, (const char *)base + i * size, sizeof id);
    return id;
}

/* Index of the first row whose id is >= id. */
static size_t row_lower(const void *base, size_t n, size_t size, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (row_id(base, mid, size) < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void *row_find(const void *base, size_t n, size_t size, uint64_t id)
{
    size_t i = row_lower(base, n, size, id);
    if (i < n && row_id(base, i, size) == id)
        return (char *)base + i * size;
    return NULL;
}

/* Opens a zeroed row for id (absent) at its sorted place; capacity must be reserved. */
static void *row_insert(void *base, size_t *n, size_t size, uint64_t id)
{
    size_t i = row_lower(base, *n, size, id);
    char *at = (char *)base + i * size;
    memmove(at + size, at, (*n - i) * size);
    memset(at, 0, size);
    memcpy(at, &id, sizeof id);
    (*n)++;
    return at;
}

static void row_erase(void *base, size_t *n, size_t size, void *row)
{
    size_t i = (size_t)((char *)row - (char *)base) / size;
    memmove(row, (char *)row + size, (*n - i - 1) * size);
    (*n)--;
}

#define FIND(s, table, id) row_find((s)->table, (s)->n##table, sizeof *(s)->table, (id))

static size_t dataset_lower(const struct state *s, const char *id)
{
    size_t lo = 0, hi = s->ndatasets;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(s->datasets[mid].id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
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
        seq_release(&it->epochs[i].tasks);
    free(it->epochs);
    it->epochs = NULL;
    it->nepochs = 0;
}

static void iteration_release(struct st_iteration *it)
{
    st_split_plan_release(&it->plan);
    seq_release(&it->pool);
    epochs_release(it);
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
        seq_release(&s->tasks[i].leased);
        seq_release(&s->tasks[i].granted);
    }
    free(s->datasets);
    free(s->jobs);
    free(s->iterations);
    free(s->tasks);
    free(s->workers);
    free(s->clients);
    memset(s, 0, sizeof *s);
}

const struct st_dataset *state_dataset(const struct state *s, const char *id)
{
    size_t i = dataset_lower(s, id);
    if (i < s->ndatasets && strcmp(s->datasets[i].id, id) == 0)
        return &s->datasets[i];
    return NULL;
}

const struct st_job *state_job(const struct state *s, uint64_t id)
{
    return FIND(s, jobs, id);
}

const struct st_job *state_job_by_key(const struct state *s, const char *dataset_id,
                                      const char *name)
{
    if (!name || !*name || !dataset_id)
        return NULL;
    for (size_t i = 0; i < s->njobs; i++) {
        if (strcmp(s->jobs[i].name, name) == 0 && strcmp(s->jobs[i].dataset_id, dataset_id) == 0)
            return &s->jobs[i];
    }
    return NULL;
}

const struct st_iteration *state_iteration(const struct state *s, uint64_t id)
{
    return FIND(s, iterations, id);
}

const struct st_task *state_task(const struct state *s, uint64_t id)
{
    return FIND(s, tasks, id);
}

const struct st_worker *state_worker(const struct state *s, uint64_t id)
{
    return FIND(s, workers, id);
}

const struct st_worker *state_worker_by_address(const struct state *s, const char *address)
{
    for (size_t i = 0; i < s->nworkers; i++) {
        if (strcmp(s->workers[i].address, address) == 0)
            return &s->workers[i];
    }
    return NULL;
}

const struct st_client *state_client(const struct state *s, uint64_t id)
{
    return FIND(s, clients, id);
}

bool state_iteration_coordinated(const struct state *s, const struct st_iteration *it)
{
    const struct st_job *j = it ? state_job(s, it->job_id) : NULL;
    return j && j->num_consumers > 0;
}

long state_round_epoch(const struct st_iteration *it, uint64_t round)
{
    /* Few epochs are kept: a scan from the newest is as fast as a search. */
    for (size_t i = it->nepochs; i-- > 0;) {
        if (it->epochs[i].start <= round)
            return (long)i;
    }
    return -1;
}

size_t state_iteration_clients(const struct state *s, uint64_t iteration_id)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nclients; i++)
        n += s->clients[i].iteration_id == iteration_id;
    return n;
}

static bool worker_has_tasks(const struct state *s, uint64_t worker_id)
{
    for (size_t i = 0; i < s->ntasks; i++) {
        if (s->tasks[i].worker_id == worker_id)
            return true;
    }
    return false;
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
    size_t i = dataset_lower(s, u->name);
    if (i < s->ndatasets && strcmp(s->datasets[i].id, u->name) == 0)
        return CORRUPT;
    uint8_t *def = malloc(u->def_len ? u->def_len : 1);
    char *text = strdup(u->text ? u->text : "");
    if (!def || !text ||
        grow((void **)&s->datasets, &s->cap_datasets, s->ndatasets + 1, sizeof *s->datasets)) {
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
    d->generated = u->id != 0;
    if (u->id != 0)
        s->next_dataset_id = max_u64(s->next_dataset_id, u->id + 1);
    return 0;
}

static int apply_job_created(struct state *s, const struct st_update *u)
{
    if (u->id == 0 || state_job(s, u->id) || !str_fits(u->name, ST_ID_MAX) ||
        !str_fits(u->name2, ST_ID_MAX) || !state_dataset(s, u->name2) ||
        (unsigned)u->mode >= ST_MODE_COUNT)
        return CORRUPT;
    /* A job is identified by its dataset and name. A key whose job was garbage-collected is
     * free again: the new job replaces the old one and its collected iteration. A live job's
     * key never is. */
    struct st_job *old =
        u->name[0] ? (struct st_job *)state_job_by_key(s, u->name2, u->name) : NULL;
    struct st_iteration *old_it = old ? FIND(s, iterations, old->iteration_id) : NULL;
    if (old && (!old_it || old_it->state != ST_ITER_GC))
        return CORRUPT;
    if (grow((void **)&s->jobs, &s->cap_jobs, s->njobs + 1, sizeof *s->jobs))
        return SLUICE_ERR_NOMEM;
    if (old) {
        iteration_release(old_it);
        row_erase(s->iterations, &s->niterations, sizeof *s->iterations, old_it);
        old = (struct st_job *)state_job_by_key(s, u->name2, u->name);
        row_erase(s->jobs, &s->njobs, sizeof *s->jobs, old);
    }
    struct st_job *j = row_insert(s->jobs, &s->njobs, sizeof *s->jobs, u->id);
    memcpy(j->name, u->name, strlen(u->name) + 1);
    memcpy(j->dataset_id, u->name2, strlen(u->name2) + 1);
    j->mode = (enum st_mode)u->mode;
    j->num_consumers = u->num_consumers;
    j->iteration_id = 0;
    s->next_job_id = max_u64(s->next_job_id, u->id + 1);
    return 0;
}

static int apply_iteration_created(struct state *s, const struct st_update *u)
{
    struct st_job *j = FIND(s, jobs, u->ref);
    if (u->id == 0 || state_iteration(s, u->id) || !j)
        return CORRUPT;
    struct st_iteration *old = NULL;
    if (j->iteration_id != 0) {
        old = FIND(s, iterations, j->iteration_id);
        if (!old || old->state != ST_ITER_GC)
            return CORRUPT;
    }
    if ((j->mode == ST_MODE_DISTRIBUTED_EPOCH) != u->distributed)
        return CORRUPT;
    struct st_split_plan plan = {0};
    if (u->distributed && st_split_plan_copy(&plan, &u->plan) < 0)
        return SLUICE_ERR_NOMEM;
    if (grow((void **)&s->iterations, &s->cap_iterations, s->niterations + 1,
             sizeof *s->iterations)) {
        st_split_plan_release(&plan);
        return SLUICE_ERR_NOMEM;
    }
    /* A job keeps one iteration row: the collected one it replaces goes now. Growing the table
     * may have moved it. */
    if (old) {
        old = FIND(s, iterations, j->iteration_id);
        iteration_release(old);
        row_erase(s->iterations, &s->niterations, sizeof *s->iterations, old);
    }
    struct st_iteration *it =
        row_insert(s->iterations, &s->niterations, sizeof *s->iterations, u->id);
    it->job_id = u->ref;
    it->repetition = u->ref2;
    it->state = ST_ITER_ACTIVE;
    it->distributed = u->distributed;
    it->plan = plan;
    it->split_total = u->distributed ? st_split_plan_total(&plan) : 0;
    j->iteration_id = u->id;
    s->next_iteration_id = max_u64(s->next_iteration_id, u->id + 1);
    return 0;
}

static int apply_task_created(struct state *s, const struct st_update *u)
{
    const struct st_iteration *it = state_iteration(s, u->ref);
    if (u->id == 0 || state_task(s, u->id) || !it || it->state != ST_ITER_ACTIVE ||
        !state_worker(s, u->ref2))
        return CORRUPT;
    for (size_t i = 0; i < s->ntasks; i++) {
        if (s->tasks[i].iteration_id == u->ref && s->tasks[i].worker_id == u->ref2)
            return CORRUPT;
    }
    if (grow((void **)&s->tasks, &s->cap_tasks, s->ntasks + 1, sizeof *s->tasks))
        return SLUICE_ERR_NOMEM;
    struct st_task *t = row_insert(s->tasks, &s->ntasks, sizeof *s->tasks, u->id);
    t->iteration_id = u->ref;
    t->worker_id = u->ref2;
    s->next_task_id = max_u64(s->next_task_id, u->id + 1);
    return 0;
}

static int apply_task_finished(struct state *s, const struct st_update *u)
{
    struct st_task *t = FIND(s, tasks, u->id);
    if (!t || t->finished || t->leased.n > 0)
        return CORRUPT;
    t->finished = true;
    return 0;
}

static int apply_task_removed(struct state *s, const struct st_update *u)
{
    struct st_task *t = FIND(s, tasks, u->id);
    if (!t)
        return CORRUPT;
    struct st_iteration *it = FIND(s, iterations, t->iteration_id);
    if (it)
        it->splits_leased -= t->leased.n;
    seq_release(&t->leased);
    seq_release(&t->granted);
    row_erase(s->tasks, &s->ntasks, sizeof *s->tasks, t);
    return 0;
}

static int apply_worker_registered(struct state *s, const struct st_update *u)
{
    if (u->id == 0 || state_worker(s, u->id) || !str_fits(u->address, ST_ADDR_MAX) ||
        u->address[0] == '\0' || state_worker_by_address(s, u->address))
        return CORRUPT;
    if (grow((void **)&s->workers, &s->cap_workers, s->nworkers + 1, sizeof *s->workers))
        return SLUICE_ERR_NOMEM;
    struct st_worker *w = row_insert(s->workers, &s->nworkers, sizeof *s->workers, u->id);
    memcpy(w->address, u->address, strlen(u->address) + 1);
    w->incarnation = u->incarnation;
    s->next_worker_id = max_u64(s->next_worker_id, u->id + 1);
    return 0;
}

static int apply_worker_removed(struct state *s, const struct st_update *u)
{
    struct st_worker *w = FIND(s, workers, u->id);
    if (!w || worker_has_tasks(s, u->id))
        return CORRUPT;
    row_erase(s->workers, &s->nworkers, sizeof *s->workers, w);
    return 0;
}

static int apply_worker_draining(struct state *s, const struct st_update *u)
{
    struct st_worker *w = FIND(s, workers, u->id);
    if (!w || w->draining)
        return CORRUPT;
    w->draining = true;
    return 0;
}

static int apply_client_acquired(struct state *s, const struct st_update *u)
{
    const struct st_iteration *it = state_iteration(s, u->ref);
    if (u->id == 0 || state_client(s, u->id) || !it || it->state == ST_ITER_GC)
        return CORRUPT;
    if (grow((void **)&s->clients, &s->cap_clients, s->nclients + 1, sizeof *s->clients))
        return SLUICE_ERR_NOMEM;
    struct st_client *c = row_insert(s->clients, &s->nclients, sizeof *s->clients, u->id);
    c->iteration_id = u->ref;
    s->next_client_id = max_u64(s->next_client_id, u->id + 1);
    return 0;
}

static int apply_client_released(struct state *s, const struct st_update *u)
{
    struct st_client *c = FIND(s, clients, u->id);
    if (!c)
        return CORRUPT;
    row_erase(s->clients, &s->nclients, sizeof *s->clients, c);
    return 0;
}

/* The iteration and task a SPLITS_* update names, checked to belong together. */
static int split_target(struct state *s, const struct st_update *u, struct st_iteration **it,
                        struct st_task **t)
{
    *it = FIND(s, iterations, u->ref);
    *t = FIND(s, tasks, u->ref2);
    if (!*it || !*t || !(*it)->distributed || (*t)->iteration_id != u->ref || u->seqs.n == 0 ||
        !seq_strictly_increasing(&u->seqs))
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
            if (!seq_contains(&it->pool, seq))
                return CORRUPT;
        } else {
            if (seq != next || seq >= it->split_total)
                return CORRUPT;
            next++;
        }
    }
    if (seq_reserve(&t->leased, u->seqs.n) < 0)
        return SLUICE_ERR_NOMEM;
    if (u->id != 0) {
        struct st_seq_list granted = {0};
        if (seq_assign(&granted, u->seqs.v, u->seqs.n) < 0)
            return SLUICE_ERR_NOMEM;
        seq_release(&t->granted);
        t->granted = granted;
        t->last_request = u->id;
    }
    for (size_t i = 0; i < u->seqs.n; i++) {
        if (u->seqs.v[i] < it->split_cursor)
            seq_remove(&it->pool, u->seqs.v[i]);
        seq_insert(&t->leased, u->seqs.v[i]);
    }
    it->split_cursor = next;
    it->splits_leased += u->seqs.n;
    return 0;
}

/* SPLITS_FINISHED with no task: splits in the pool (returned, not leased again yet) that a
 * consumer has received in full, so they are not leased again. */
static int apply_pool_finished(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = FIND(s, iterations, u->ref);
    if (!it || !it->distributed || u->seqs.n == 0 || !seq_strictly_increasing(&u->seqs))
        return CORRUPT;
    for (size_t i = 0; i < u->seqs.n; i++) {
        if (!seq_contains(&it->pool, u->seqs.v[i]))
            return CORRUPT;
    }
    for (size_t i = 0; i < u->seqs.n; i++)
        seq_remove(&it->pool, u->seqs.v[i]);
    it->splits_finished += u->seqs.n;
    return 0;
}

static int apply_splits_done(struct state *s, const struct st_update *u, bool returned)
{
    struct st_iteration *it;
    struct st_task *t;
    if (!returned && u->ref2 == 0)
        return apply_pool_finished(s, u);
    if (split_target(s, u, &it, &t) < 0)
        return CORRUPT;
    for (size_t i = 0; i < u->seqs.n; i++) {
        if (!seq_contains(&t->leased, u->seqs.v[i]))
            return CORRUPT;
    }
    if (returned && seq_reserve(&it->pool, u->seqs.n) < 0)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < u->seqs.n; i++) {
        seq_remove(&t->leased, u->seqs.v[i]);
        if (returned)
            seq_insert(&it->pool, u->seqs.v[i]);
    }
    it->splits_leased -= u->seqs.n;
    if (!returned)
        it->splits_finished += u->seqs.n;
    return 0;
}

static int apply_iteration_finished(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = FIND(s, iterations, u->id);
    if (!it || it->state != ST_ITER_ACTIVE)
        return CORRUPT;
    it->state = ST_ITER_FINISHED;
    return 0;
}

static int apply_iteration_gc(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = FIND(s, iterations, u->id);
    if (!it || it->state == ST_ITER_GC || state_iteration_clients(s, u->id) > 0)
        return CORRUPT;
    for (size_t i = 0; i < s->ntasks; i++) {
        if (s->tasks[i].iteration_id == u->id)
            return CORRUPT;
    }
    struct st_job *j = FIND(s, jobs, it->job_id);
    if (!j || j->iteration_id != u->id)
        return CORRUPT;
    iteration_release(it);
    if (j->name[0] == '\0') {
        /* Nothing can refer to an anonymous job once its only iteration is gone. */
        row_erase(s->iterations, &s->niterations, sizeof *s->iterations, it);
        row_erase(s->jobs, &s->njobs, sizeof *s->jobs, j);
        return 0;
    }
    it->state = ST_ITER_GC;
    it->split_total = it->split_cursor = 0;
    it->rounds_granted = 0;
    return 0;
}

static int apply_rounds_scheduled(struct state *s, const struct st_update *u)
{
    struct st_iteration *it = FIND(s, iterations, u->ref);
    if (!it || it->state != ST_ITER_ACTIVE || !state_iteration_coordinated(s, it) ||
        u->ref2 != it->rounds_granted || !seq_strictly_increasing(&u->seqs))
        return CORRUPT;
    for (size_t i = 0; i < u->seqs.n; i++) {
        const struct st_task *t = state_task(s, u->seqs.v[i]);
        if (!t || t->iteration_id != it->id)
            return CORRUPT;
    }
    struct st_seq_list tasks = {0};
    if (seq_assign(&tasks, u->seqs.v, u->seqs.n) < 0)
        return SLUICE_ERR_NOMEM;
    /* An epoch starting at the same round was never read: the new one replaces it. */
    if (it->nepochs > 0 && it->epochs[it->nepochs - 1].start == u->ref2) {
        struct st_round_epoch *last = &it->epochs[it->nepochs - 1];
        seq_release(&last->tasks);
        last->tasks = tasks;
        return 0;
    }
    if (it->nepochs == ST_ROUND_EPOCHS_MAX) {
        seq_release(&it->epochs[0].tasks);
        memmove(&it->epochs[0], &it->epochs[1], (it->nepochs - 1) * sizeof *it->epochs);
        it->nepochs--;
    } else {
        size_t cap = it->nepochs;
        if (grow((void **)&it->epochs, &cap, it->nepochs + 1, sizeof *it->epochs) < 0) {
            seq_release(&tasks);
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
    struct st_iteration *it = FIND(s, iterations, u->ref);
    if (!it || it->state != ST_ITER_ACTIVE || !state_iteration_coordinated(s, it) ||
        u->ref2 <= it->rounds_granted)
        return CORRUPT;
    it->rounds_granted = u->ref2;
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
    default:
        rc = CORRUPT;
        break;
    }
    if (rc == 0)
        s->applied++;
    return rc;
}

/* ---- digest ---------------------------------------------------------------------------------- */

struct fnv {
    uint64_t h;
};

static void fnv_bytes(struct fnv *f, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        f->h ^= p[i];
        f->h *= 0x100000001b3ull;
    }
}

static void fnv_u64(struct fnv *f, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    fnv_bytes(f, b, sizeof b);
}

/* Strings are hashed with their length first, so adjacent strings cannot run into each other. */
static void fnv_str(struct fnv *f, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    fnv_u64(f, n);
    fnv_bytes(f, s ? s : "", n);
}

static void fnv_seqs(struct fnv *f, const struct st_seq_list *l)
{
    fnv_u64(f, l->n);
    for (size_t i = 0; i < l->n; i++)
        fnv_u64(f, l->v[i]);
}

uint64_t state_digest(const struct state *s)
{
    struct fnv f = {0xcbf29ce484222325ull};
    fnv_u64(&f, s->next_dataset_id);
    fnv_u64(&f, s->next_job_id);
    fnv_u64(&f, s->next_iteration_id);
    fnv_u64(&f, s->next_task_id);
    fnv_u64(&f, s->next_worker_id);
    fnv_u64(&f, s->next_client_id);
    fnv_u64(&f, s->applied);
    fnv_u64(&f, s->ndatasets);
    for (size_t i = 0; i < s->ndatasets; i++) {
        const struct st_dataset *d = &s->datasets[i];
        fnv_str(&f, d->id);
        fnv_u64(&f, d->def_len);
        fnv_bytes(&f, d->def, d->def_len);
        fnv_u64(&f, (uint64_t)(int64_t)d->compression);
        fnv_u64(&f, d->split_size);
        fnv_str(&f, d->text);
        fnv_u64(&f, d->generated);
    }
    fnv_u64(&f, s->njobs);
    for (size_t i = 0; i < s->njobs; i++) {
        const struct st_job *j = &s->jobs[i];
        fnv_u64(&f, j->id);
        fnv_str(&f, j->name);
        fnv_str(&f, j->dataset_id);
        fnv_u64(&f, j->mode);
        fnv_u64(&f, j->num_consumers);
        fnv_u64(&f, j->iteration_id);
    }
    fnv_u64(&f, s->niterations);
    for (size_t i = 0; i < s->niterations; i++) {
        const struct st_iteration *it = &s->iterations[i];
        fnv_u64(&f, it->id);
        fnv_u64(&f, it->job_id);
        fnv_u64(&f, it->repetition);
        fnv_u64(&f, it->state);
        fnv_u64(&f, it->distributed);
        fnv_u64(&f, it->plan.source_len);
        fnv_u64(&f, it->plan.split_size);
        fnv_u64(&f, it->plan.per_pass);
        fnv_u64(&f, it->plan.passes);
        fnv_u64(&f, it->plan.npaths);
        for (size_t k = 0; k < it->plan.npaths; k++)
            fnv_str(&f, it->plan.paths[k]);
        fnv_u64(&f, it->split_total);
        fnv_u64(&f, it->split_cursor);
        fnv_seqs(&f, &it->pool);
        fnv_u64(&f, it->splits_finished);
        fnv_u64(&f, it->splits_leased);
        fnv_u64(&f, it->rounds_granted);
        fnv_u64(&f, it->nepochs);
        for (size_t k = 0; k < it->nepochs; k++) {
            fnv_u64(&f, it->epochs[k].start);
            fnv_seqs(&f, &it->epochs[k].tasks);
        }
    }
    fnv_u64(&f, s->ntasks);
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        fnv_u64(&f, t->id);
        fnv_u64(&f, t->iteration_id);
        fnv_u64(&f, t->worker_id);
        fnv_u64(&f, t->finished);
        fnv_seqs(&f, &t->leased);
        fnv_u64(&f, t->last_request);
        fnv_seqs(&f, &t->granted);
    }
    fnv_u64(&f, s->nworkers);
    for (size_t i = 0; i < s->nworkers; i++) {
        const struct st_worker *w = &s->workers[i];
        fnv_u64(&f, w->id);
        fnv_str(&f, w->address);
        fnv_u64(&f, w->incarnation);
        fnv_u64(&f, w->draining);
    }
    fnv_u64(&f, s->nclients);
    for (size_t i = 0; i < s->nclients; i++) {
        fnv_u64(&f, s->clients[i].id);
        fnv_u64(&f, s->clients[i].iteration_id);
    }
    return f.h;
}

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
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        if (t->iteration_id != it->id || pending(out, start, ST_TASK_REMOVED, t->id))
            continue;
        remaining++;
        if (!t->finished && !pending(out, start, ST_TASK_FINISHED, t->id))
            return false;
    }
    if (remaining == 0)
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
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        if (t->iteration_id != it_id || t->finished ||
            pending(out, start, ST_TASK_REMOVED, t->id) ||
            pending(out, start, ST_TASK_FINISHED, t->id) ||
            worker_draining_after(s, t->worker_id, out, start))
            continue;
        if (seq_reserve(l, 1) < 0)
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
        if (seq_reserve(l, 1) < 0)
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
        if (!u || seq_assign(&u->seqs, l.v, l.n) < 0) {
            rc = SLUICE_ERR_NOMEM;
            break;
        }
        u->ref = it->id;
        u->ref2 = it->rounds_granted;
    }
    seq_release(&l);
    return rc;
}

int plan_register_dataset(const struct state *s, const char *id, const uint8_t *def, size_t def_len,
                          int compression, uint64_t split_size, const char *text, char *id_out,
                          struct st_update_list *out, char *err, size_t errlen)
{
    if (!id)
        id = "";
    if (strlen(id) >= ST_ID_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "dataset id is longer than %d bytes",
                       ST_ID_MAX - 1);
    if (*id) {
        const struct st_dataset *d = state_dataset(s, id);
        if (d) {
            if (d->def_len != def_len || (def_len && memcmp(d->def, def, def_len) != 0))
                return err_set(err, errlen, SLUICE_ERR_EXISTS,
                               "dataset '%s' already exists with a different pipeline", id);
            if (d->compression != compression)
                return err_set(err, errlen, SLUICE_ERR_EXISTS,
                               "dataset '%s' already exists with compression %s, not %s", id,
                               compression_name(d->compression), compression_name(compression));
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
        list_truncate(out, out->n - 1);
        return NOMEM_MSG(err, errlen);
    }
    if (def_len)
        memcpy(u->def, def, def_len);
    memcpy(id_out, u->name, strlen(u->name) + 1);
    return 0;
}

/* Appends TASK_CREATED for the iteration on every non-draining worker, ids from *next_task. */
static int plan_tasks_for_iteration(const struct state *s, uint64_t iteration_id,
                                    uint64_t *next_task, struct st_update_list *out)
{
    for (size_t i = 0; i < s->nworkers; i++) {
        if (s->workers[i].draining)
            continue;
        struct st_update *u = push(out, ST_TASK_CREATED, (*next_task)++);
        if (!u)
            return SLUICE_ERR_NOMEM;
        u->ref = iteration_id;
        u->ref2 = s->workers[i].id;
    }
    return 0;
}

int plan_get_or_create_job(const struct state *s, const char *dataset_id, const char *job_name,
                           enum st_mode mode, uint32_t num_consumers, bool endless,
                           const struct st_split_plan *plan, uint64_t *job_out,
                           uint64_t *iteration_out, uint64_t *client_out,
                           struct st_update_list *out, char *err, size_t errlen)
{
    if (!job_name)
        job_name = "";
    if ((unsigned)mode >= ST_MODE_COUNT)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "unknown processing mode %d", (int)mode);
    if (strlen(job_name) >= ST_ID_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "job name is longer than %d bytes",
                       ST_ID_MAX - 1);
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

    /* Jobs are identified by (dataset, name), as in tf.data service: the same name on another
     * dataset is another job. */
    const struct st_job *job = state_job_by_key(s, dataset_id, job_name);
    const struct st_iteration *cur = NULL;
    if (job) {
        /* A collected job's key is free for another mode or consumer count: a new job takes it
         * (JOB_CREATED replaces the collected one). */
        const struct st_iteration *last = state_iteration(s, job->iteration_id);
        if (last && last->state == ST_ITER_GC &&
            (job->mode != mode || job->num_consumers != num_consumers))
            job = NULL;
    }
    if (job) {
        if (job->mode != mode)
            return err_set(err, errlen, SLUICE_ERR_EXISTS, "job '%s' exists with mode %s, not %s",
                           job_name, st_mode_name(job->mode), st_mode_name(mode));
        if (job->num_consumers != num_consumers)
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "job '%s' exists with num_consumers %" PRIu32 ", not %" PRIu32, job_name,
                           job->num_consumers, num_consumers);
        cur = state_iteration(s, job->iteration_id);
    }
    bool new_iteration = !cur || cur->state == ST_ITER_GC;
    if (new_iteration && mode == ST_MODE_DISTRIBUTED_EPOCH && !plan)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "a distributed_epoch iteration needs a split plan");

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
    }
    if (new_iteration) {
        if (!(u = push(out, ST_ITERATION_CREATED, iteration_id)))
            goto nomem;
        u->ref = job_id;
        u->ref2 = cur ? cur->repetition + 1 : 0;
        u->distributed = mode == ST_MODE_DISTRIBUTED_EPOCH;
        if (u->distributed && st_split_plan_copy(&u->plan, plan) < 0)
            goto nomem;
        size_t first_task = out->n;
        if (plan_tasks_for_iteration(s, iteration_id, &next_task, out) < 0)
            goto nomem;
        /* A coordinated iteration's rounds start with an epoch at round 0, of the tasks just
         * created (possibly none: consumers then wait for a worker). */
        if (num_consumers > 0) {
            if (!(u = push(out, ST_ROUNDS_SCHEDULED, 0)))
                goto nomem;
            u->ref = iteration_id;
            if (seq_reserve(&u->seqs, out->n - first_task) < 0)
                goto nomem;
            for (size_t i = first_task; i < out->n; i++) {
                if (out->v[i].type == ST_TASK_CREATED)
                    u->seqs.v[u->seqs.n++] = out->v[i].id;
            }
        }
    }
    if (!(u = push(out, ST_CLIENT_ACQUIRED, s->next_client_id)))
        goto nomem;
    u->ref = iteration_id;
    *job_out = job_id;
    *iteration_out = iteration_id;
    *client_out = s->next_client_id;
    return 0;
nomem:
    list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}

/* Appends the removal of worker w: leases returned, tasks removed, the worker removed. */
static int plan_remove_worker_updates(const struct state *s, const struct st_worker *w,
                                      struct st_update_list *out)
{
    struct st_update *u;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        if (t->worker_id != w->id)
            continue;
        if (t->leased.n > 0) {
            if (!(u = push(out, ST_SPLITS_RETURNED, 0)))
                return SLUICE_ERR_NOMEM;
            u->ref = t->iteration_id;
            u->ref2 = t->id;
            if (seq_assign(&u->seqs, t->leased.v, t->leased.n) < 0)
                return SLUICE_ERR_NOMEM;
        }
        if (!(u = push(out, ST_TASK_REMOVED, t->id)))
            return SLUICE_ERR_NOMEM;
        u->ref = t->iteration_id;
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
        list_truncate(out, start);
        return NOMEM_MSG(err, errlen);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int plan_worker_heartbeat(const struct state *s, const char *address, uint64_t incarnation,
                          const uint64_t *finished, size_t nfinished, bool draining,
                          uint64_t *worker_out, struct st_update_list *out, char *err,
                          size_t errlen)
{
    if (!address || !*address)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "worker address is empty");
    if (strlen(address) >= ST_ADDR_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "worker address is longer than %d bytes",
                       ST_ADDR_MAX - 1);
    size_t start = out->n;
    uint64_t *have = NULL; /* iterations the worker has a task in, sorted */
    size_t nhave = 0;
    struct st_update *u;
    const struct st_worker *w = state_worker_by_address(s, address);
    bool known = w && w->incarnation == incarnation;
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
        u->incarnation = incarnation;
    }

    if (known) {
        for (size_t i = 0; i < nfinished; i++) {
            const struct st_task *t = state_task(s, finished[i]);
            if (!t || t->worker_id != wid || t->finished ||
                pending(out, start, ST_TASK_FINISHED, t->id))
                continue;
            if (t->leased.n > 0) {
                if (!(u = push(out, ST_SPLITS_RETURNED, 0)))
                    goto nomem;
                u->ref = t->iteration_id;
                u->ref2 = t->id;
                if (seq_assign(&u->seqs, t->leased.v, t->leased.n) < 0)
                    goto nomem;
            }
            if (!push(out, ST_TASK_FINISHED, t->id))
                goto nomem;
        }
    }

    bool was_draining = known && w->draining;
    if (draining && !was_draining && !push(out, ST_WORKER_DRAINING, wid))
        goto nomem;
    if (!draining && !was_draining) {
        if (known) {
            have = malloc((s->ntasks ? s->ntasks : 1) * sizeof *have);
            if (!have)
                goto nomem;
            for (size_t i = 0; i < s->ntasks; i++) {
                if (s->tasks[i].worker_id == wid)
                    have[nhave++] = s->tasks[i].iteration_id;
            }
            qsort(have, nhave, sizeof *have, cmp_u64);
        }
        uint64_t next_task = s->next_task_id;
        for (size_t i = 0; i < s->niterations; i++) {
            const struct st_iteration *it = &s->iterations[i];
            if (it->state != ST_ITER_ACTIVE ||
                (nhave > 0 && bsearch(&it->id, have, nhave, sizeof *have, cmp_u64)))
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
    list_truncate(out, start);
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
        if (seq_contains(&t->leased, seq) && !(finishing && seq_contains(finishing, seq)) &&
            !(returning && seq_contains(returning, seq)))
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
    if (seq_assign(l, v, n) < 0)
        return SLUICE_ERR_NOMEM;
    qsort(l->v, l->n, sizeof *l->v, cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        uint64_t seq = l->v[i];
        if ((k > 0 && l->v[k - 1] == seq) || !seq_contains(in, seq) ||
            (exclude && seq_contains(exclude, seq)))
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
        list_truncate(out, out->n - 1);
    else
        *made_at = out->n - 1;
    return 0;
}

int plan_get_splits_numbered(const struct state *s, uint64_t task_id, uint64_t request_seq,
                             const uint64_t *finished, size_t nfinished, uint32_t max,
                             struct st_update_list *out, uint64_t **seqs, size_t *nseqs, bool *end,
                             char *err, size_t errlen)
{
    return plan_get_splits_returning(s, task_id, request_seq, finished, nfinished, NULL, 0, max,
                                     out, seqs, nseqs, end, err, errlen);
}

int plan_get_splits_returning(const struct state *s, uint64_t task_id, uint64_t request_seq,
                              const uint64_t *finished, size_t nfinished, const uint64_t *returned,
                              size_t nreturned, uint32_t max, struct st_update_list *out,
                              uint64_t **seqs, size_t *nseqs, bool *end, char *err, size_t errlen)
{
    *end = false;
    *seqs = NULL;
    *nseqs = 0;
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
        *end = true;
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
    if (push_task_seqs(t, ST_SPLITS_FINISHED, finished, nfinished, NO_UPDATE, out, &finishing_at,
                       &done) < 0)
        goto nomem;
    /* Splits handed back go to the pool, where other tasks lease them; a seq reported both
     * finished and handed back counts as finished. */
    if (push_task_seqs(t, ST_SPLITS_RETURNED, returned, nreturned, finishing_at, out, &returning_at,
                       &back) < 0)
        goto nomem;
    const struct st_seq_list *finishing =
        finishing_at == NO_UPDATE ? NULL : &out->v[finishing_at].seqs;
    const struct st_seq_list *returning =
        returning_at == NO_UPDATE ? NULL : &out->v[returning_at].seqs;
    uint64_t left = it->split_total - it->split_cursor;
    /* Nothing left to lease now, and nothing out that could come back to the pool. */
    *end = it->pool.n == 0 && back == 0 && left == 0 && it->splits_leased == done;
    const struct st_worker *w = state_worker(s, t->worker_id);
    if (w && w->draining) {
        /* A draining worker takes no new splits: its task ends once it holds none. */
        *end = t->leased.n == done + back;
        max = 0;
    }
    if (repeat) {
        if (still_held(t, finishing, returning, seqs, nseqs) < 0)
            goto nomem;
        return 0;
    }
    uint64_t from_pool = it->pool.n < max ? it->pool.n : max;
    uint64_t from_cursor = max - from_pool < left ? max - from_pool : left;
    if (from_pool + from_cursor > 0) {
        if (!(u = push(out, ST_SPLITS_LEASED, request_seq)))
            goto nomem;
        u->ref = it->id;
        u->ref2 = t->id;
        if (seq_reserve(&u->seqs, (size_t)(from_pool + from_cursor)) < 0)
            goto nomem;
        for (uint64_t i = 0; i < from_pool; i++)
            u->seqs.v[u->seqs.n++] = it->pool.v[i];
        for (uint64_t i = 0; i < from_cursor; i++)
            u->seqs.v[u->seqs.n++] = it->split_cursor + i;
        *seqs = malloc(u->seqs.n * sizeof **seqs);
        if (!*seqs)
            goto nomem;
        memcpy(*seqs, u->seqs.v, u->seqs.n * sizeof **seqs);
        *nseqs = u->seqs.n;
    }
    return 0;
nomem:
    list_truncate(out, start);
    *end = false;
    return NOMEM_MSG(err, errlen);
}

bool state_split_finished(const struct state *s, uint64_t iteration_id, uint64_t seq)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    if (!it || !it->distributed)
        return false;
    if (it->state != ST_ITER_ACTIVE)
        return it->state == ST_ITER_FINISHED;
    if (seq >= it->split_cursor || seq_contains(&it->pool, seq))
        return false;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        if (t->iteration_id == iteration_id && seq_contains(&t->leased, seq))
            return false;
    }
    return true;
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
    size_t made_at;
    uint64_t moved;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        if (t->iteration_id != iteration_id || t->leased.n == 0)
            continue;
        if (push_task_seqs(t, ST_SPLITS_FINISHED, seqs, n, NO_UPDATE, out, &made_at, &moved) < 0)
            goto nomem;
    }
    /* Splits back in the pool that a consumer received in full are not leased again. */
    if (it->pool.n > 0) {
        if (!(u = push(out, ST_SPLITS_FINISHED, 0)))
            goto nomem;
        u->ref = iteration_id;
        if (seq_assign_members(&u->seqs, seqs, n, &it->pool, NULL) < 0)
            goto nomem;
        if (u->seqs.n == 0)
            list_truncate(out, out->n - 1);
    }
    return 0;
nomem:
    list_truncate(out, start);
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
    if (seq_assign(&u->seqs, t->leased.v, t->leased.n) < 0) {
        list_truncate(out, start);
        return NOMEM_MSG(err, errlen);
    }
    return 0;
}

int plan_get_splits(const struct state *s, uint64_t task_id, const uint64_t *finished,
                    size_t nfinished, uint32_t max, struct st_update_list *out, bool *end,
                    char *err, size_t errlen)
{
    uint64_t *seqs;
    size_t nseqs;
    int rc = plan_get_splits_numbered(s, task_id, 0, finished, nfinished, max, out, &seqs, &nseqs,
                                      end, err, errlen);
    free(seqs);
    return rc;
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

int plan_release_client(const struct state *s, uint64_t client_id, struct st_update_list *out,
                        char *err, size_t errlen)
{
    if (!state_client(s, client_id))
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "client %" PRIu64 " not found",
                       client_id);
    if (!push(out, ST_CLIENT_RELEASED, client_id))
        return NOMEM_MSG(err, errlen);
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
    size_t start = out->n;
    struct st_update *u;
    for (size_t i = 0; i < s->ntasks; i++) {
        if (s->tasks[i].iteration_id != iteration_id)
            continue;
        if (!(u = push(out, ST_TASK_REMOVED, s->tasks[i].id)))
            goto nomem;
        u->ref = iteration_id;
    }
    if (!push(out, ST_ITERATION_GC, iteration_id))
        goto nomem;
    return 0;
nomem:
    list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}
