/* The state's read-only side (state.h): names, lookups and the queries that the planners, the
 * shell and the status document ask. Nothing here changes the state. */
#include "state_internal.h"

/* ---- names ----------------------------------------------------------------------------------- */

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

const char *st_save_state_name(enum st_save_state state)
{
    switch (state) {
    case ST_SV_RUNNING:
        return "running";
    case ST_SV_FINISHED:
        return "finished";
    case ST_SV_FAILED:
        return "failed";
    }
    return "unknown";
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
    [ST_ITERATION_FAILED] = "iteration_failed",
    [ST_SAVE_STARTED] = "save_started",
    [ST_SAVE_FINISHED] = "save_finished",
    [ST_SAVE_FAILED] = "save_failed",
    [ST_MIX_WEIGHTS] = "mix_weights",
    [ST_JOB_POSITION] = "job_position",
};

const char *st_update_name(enum st_update_type type)
{
    if ((unsigned)type < sizeof update_names / sizeof update_names[0] && update_names[type])
        return update_names[type];
    return "unknown";
}

const char *state_compression_name(int compression)
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

/* ---- lookups --------------------------------------------------------------------------------- */

const struct st_dataset *state_dataset(const struct state *s, const char *id)
{
    size_t i = state_dataset_lower(s, id);
    if (i < s->ndatasets && strcmp(s->datasets[i].id, id) == 0)
        return &s->datasets[i];
    return NULL;
}

const struct st_job *state_job(const struct state *s, uint64_t id)
{
    return STATE_FIND(s, jobs, id);
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
    return STATE_FIND(s, iterations, id);
}

const struct st_task *state_task(const struct state *s, uint64_t id)
{
    return STATE_FIND(s, tasks, id);
}

const struct st_worker *state_worker(const struct state *s, uint64_t id)
{
    return STATE_FIND(s, workers, id);
}

uint64_t st_update_worker(const struct state *s, const struct st_update *u)
{
    switch (u->type) {
    case ST_TASK_CREATED:
        return u->ref2;
    case ST_TASK_FINISHED:
    case ST_TASK_REMOVED: {
        const struct st_task *t = state_task(s, u->id);
        return t ? t->worker_id : 0;
    }
    case ST_WORKER_REGISTERED:
    case ST_WORKER_REMOVED:
    case ST_WORKER_DRAINING:
        return u->id;
    default:
        return 0;
    }
}

const struct st_worker *state_worker_by_address(const struct state *s, const char *address)
{
    size_t i = state_address_lower(s, address);
    if (i < s->nby_address) {
        const struct st_worker *w = state_worker(s, s->by_address[i]);
        if (strcmp(w->address, address) == 0)
            return w;
    }
    return NULL;
}

const struct st_client *state_client(const struct state *s, uint64_t id)
{
    return STATE_FIND(s, clients, id);
}

const struct st_save *state_save(const struct state *s, uint64_t id)
{
    return STATE_FIND(s, saves, id);
}

const struct st_save *state_save_by_path(const struct state *s, const char *path)
{
    /* The newest: a failed save may have been started again into the same path. */
    for (size_t i = s->nsaves; i-- > 0;) {
        if (strcmp(s->saves[i].path, path) == 0)
            return &s->saves[i];
    }
    return NULL;
}

const struct st_save *state_save_running(const struct state *s, uint64_t iteration_id)
{
    size_t lo = 0, hi = s->nsaves;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->saves[mid].iteration_id < iteration_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (iteration_id == 0 || lo == s->nsaves || s->saves[lo].iteration_id != iteration_id ||
        s->saves[lo].state != ST_SV_RUNNING)
        return NULL;
    return &s->saves[lo];
}

uint64_t state_save_committed(const struct state *s, const struct st_save *sv)
{
    if (sv->state == ST_SV_FINISHED)
        return sv->chunks;
    const struct st_iteration *it = state_iteration(s, sv->iteration_id);
    if (!it || !it->distributed || it->state == ST_ITER_GC)
        return 0;
    return it->state == ST_ITER_FINISHED ? it->split_total : it->splits_finished;
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

size_t state_owner_clients(const struct state *s, uint64_t owner)
{
    size_t n = 0;
    for (size_t i = 0; owner != 0 && i < s->nclients; i++)
        n += s->clients[i].owner == owner;
    return n;
}

size_t state_iteration_clients(const struct state *s, uint64_t iteration_id)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nclients; i++)
        n += s->clients[i].iteration_id == iteration_id;
    return n;
}

bool st_key_matches(const struct st_key *key, const uint8_t *p, size_t len)
{
    if (!key->set || len != ST_KEY_LEN || !p)
        return false;
    /* Constant time: every byte is compared whatever the first difference. */
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < ST_KEY_LEN; i++)
        diff |= (uint8_t)(key->b[i] ^ p[i]);
    return diff == 0;
}

bool state_worker_key_ok(const struct st_worker *w, const uint8_t *key, size_t key_len)
{
    return !w->key.set || st_key_matches(&w->key, key, key_len);
}

/* ---- task indexes ---------------------------------------------------------------------------- */

/* The entries of key in v[0, n). */
static const struct st_task_ref *ref_range(const struct st_task_ref *v, size_t n, uint64_t key,
                                           size_t *count)
{
    size_t from = state_ref_lower(v, n, key, 0);
    size_t to = key == UINT64_MAX ? n : state_ref_lower(v, n, key + 1, 0);
    *count = to - from;
    return v + from;
}

const struct st_task_ref *state_worker_tasks(const struct state *s, uint64_t worker_id, size_t *n)
{
    return ref_range(s->by_worker, s->nby_worker, worker_id, n);
}

const struct st_task_ref *state_iteration_tasks(const struct state *s, uint64_t iteration_id,
                                                size_t *n)
{
    return ref_range(s->by_iteration, s->nby_iteration, iteration_id, n);
}

/* ---- splits ---------------------------------------------------------------------------------- */

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

bool state_split_pooled(const struct state *s, uint64_t iteration_id, uint64_t seq)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    return it && state_seq_contains(&it->pool, seq);
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

const struct st_jobpos *state_jobpos(const struct state *s, const char *job_name)
{
    for (size_t i = 0; i < s->njobpos; i++)
        if (strcmp(s->jobpos[i].job_name, job_name) == 0)
            return &s->jobpos[i];
    return NULL;
}

const struct st_mix *state_mix(const struct state *s, const char *dataset_id, const char *job_name)
{
    for (size_t i = 0; i < s->nmixes; i++)
        if (strcmp(s->mixes[i].dataset_id, dataset_id) == 0 &&
            strcmp(s->mixes[i].job_name, job_name) == 0)
            return &s->mixes[i];
    return NULL;
}
