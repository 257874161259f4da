/* Conversions between the state machine's structs and the journal's messages. Encoding points
 * the protobuf-c structs at the C data (nothing copied until the pack); decoding copies out of
 * the unpacked message and frees it before returning. */
#include "update_codec.h"

#include "journal.pb-c.h"

#include "common/crc32c.h"
#include "common/error.h"
#include "common/sha256.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UPDATE_TYPE_MAX ST_JOB_POSITION

/* ---- shared helpers -------------------------------------------------------------------------- */

static bool str_fits(const char *s, size_t cap)
{
    return s && strlen(s) < cap;
}

static uint32_t def_crc(const uint8_t *def, size_t len)
{
    return len ? crc32c(def, len) : 0;
}

static bool plan_empty(const struct split_plan *p)
{
    return !p->source_len && !p->split_size && !p->per_pass && !p->passes && !p->npaths;
}

static void plan_to_msg(const struct split_plan *p, Sluice__JournalSplitPlan *m)
{
    m->source_len = p->source_len;
    m->split_size = p->split_size;
    m->per_pass = p->per_pass;
    m->passes = p->passes;
    m->n_paths = p->npaths;
    m->paths = p->paths;
}

/* Copies a plan message (m may be NULL: an empty plan). */
static int plan_from_msg(const Sluice__JournalSplitPlan *m, struct split_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!m)
        return 0;
    for (size_t i = 0; i < m->n_paths; i++) {
        if (!m->paths[i])
            return SLUICE_ERR_CORRUPT;
    }
    struct split_plan view = {
        .source_len = m->source_len,
        .split_size = m->split_size,
        .per_pass = m->per_pass,
        .passes = m->passes,
        .paths = m->paths,
        .npaths = m->n_paths,
    };
    return split_plan_copy(p, &view);
}

static int seqs_copy(struct st_seq_list *l, const uint64_t *v, size_t n)
{
    memset(l, 0, sizeof *l);
    if (n == 0)
        return 0;
    l->v = malloc(n * sizeof *v);
    if (!l->v)
        return SLUICE_ERR_NOMEM;
    memcpy(l->v, v, n * sizeof *v);
    l->n = l->cap = n;
    return 0;
}

static bool strictly_increasing(const uint64_t *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (v[i] <= v[i - 1])
            return false;
    }
    return true;
}

/* ---- updates --------------------------------------------------------------------------------- */

int update_codec_encode(const struct st_update *u, uint8_t **out, size_t *len)
{
    Sluice__Update m = SLUICE__UPDATE__INIT;
    Sluice__JournalSplitPlan plan = SLUICE__JOURNAL_SPLIT_PLAN__INIT;
    /* protobuf-c packs through these pointers without writing; its structs just lack const. */
    m.type = (Sluice__Update__Type)u->type;
    m.id = u->id;
    m.ref = u->ref;
    m.ref2 = u->ref2;
    m.name = (char *)u->name;
    m.name2 = (char *)u->name2;
    m.address = (char *)u->address;
    m.incarnation = u->incarnation;
    m.mode = u->mode;
    m.num_consumers = u->num_consumers;
    m.deterministic = u->deterministic;
    m.cross_trainer_cache_bytes = u->xtc_bytes;
    m.target_workers = u->target_workers;
    m.host_id = (char *)u->host_id;
    m.compression = u->compression;
    m.split_size = u->split_size;
    m.def.data = u->def;
    m.def.len = u->def_len;
    m.text = u->text ? u->text : (char *)"";
    m.distributed = u->distributed;
    if (!plan_empty(&u->plan)) {
        plan_to_msg(&u->plan, &plan);
        m.plan = &plan;
    }
    m.n_seqs = u->seqs.n;
    m.seqs = u->seqs.v;
    m.start = u->start;
    if (u->key.set) {
        m.key.data = (uint8_t *)u->key.b;
        m.key.len = ST_KEY_LEN;
    }
    m.n_weights = u->nweights;
    m.weights = u->weights;
    m.resume_id = u->resume_id;
    m.labels = u->labels ? u->labels : (char *)"";
    m.worker_selector = u->selector ? u->selector : (char *)"";
    m.job_weight = u->job_weight;
    m.min_workers = u->min_workers;
    m.max_workers = u->max_workers;
    m.task_slots = u->task_slots;
    size_t n = sluice__update__get_packed_size(&m);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return SLUICE_ERR_NOMEM;
    sluice__update__pack(&m, b);
    *out = b;
    *len = n;
    return 0;
}

int update_codec_decode(const uint8_t *data, size_t len, struct st_update *u, char *err,
                        size_t errlen)
{
    memset(u, 0, sizeof *u);
    Sluice__Update *m = sluice__update__unpack(NULL, len, data);
    if (!m)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "not an Update message");
    int rc = SLUICE_ERR_CORRUPT;
    /* Shape checks first: *u stays empty until every one has passed. */
    if ((unsigned)m->type < 1 || (unsigned)m->type > UPDATE_TYPE_MAX) {
        err_set(err, errlen, rc, "unknown update type %d", (int)m->type);
        goto out;
    }
    const char *what = st_update_name((enum st_update_type)m->type);
    if (!str_fits(m->name, ST_ID_MAX) || !str_fits(m->name2, ST_ID_MAX)) {
        err_set(err, errlen, rc, "%s: a name of %d bytes or more", what, ST_ID_MAX);
        goto out;
    }
    if (!str_fits(m->address, ST_ADDR_MAX)) {
        err_set(err, errlen, rc, "%s: an address of %d bytes or more", what, ST_ADDR_MAX);
        goto out;
    }
    if (!str_fits(m->host_id, ST_HOST_MAX)) {
        err_set(err, errlen, rc, "%s: a host id of %d bytes or more", what, ST_HOST_MAX);
        goto out;
    }
    if (!str_fits(m->labels, ST_LABELS_MAX) || !str_fits(m->worker_selector, ST_SELECTOR_MAX)) {
        err_set(err, errlen, rc, "%s: labels or a selector too long", what);
        goto out;
    }
    if (!m->text || (m->def.len > 0 && !m->def.data)) {
        err_set(err, errlen, rc, "%s: malformed", what);
        goto out;
    }
    if (m->key.len != 0 && (m->key.len != ST_KEY_LEN || !m->key.data)) {
        err_set(err, errlen, rc, "%s: a key of %zu bytes, not %d", what, m->key.len, ST_KEY_LEN);
        goto out;
    }
    /* Ids come from counters that start at 1; the last value would wrap the counter past it
     * (state_apply() raises it to id + 1), so no journal holds it. */
    if (m->id == UINT64_MAX) {
        err_set(err, errlen, rc, "%s: id %" PRIu64 " is out of range", what, m->id);
        goto out;
    }
    u->type = (enum st_update_type)m->type;
    u->id = m->id;
    u->ref = m->ref;
    u->ref2 = m->ref2;
    memcpy(u->name, m->name, strlen(m->name) + 1);
    memcpy(u->name2, m->name2, strlen(m->name2) + 1);
    memcpy(u->address, m->address, strlen(m->address) + 1);
    u->incarnation = m->incarnation;
    u->mode = m->mode;
    u->num_consumers = m->num_consumers;
    u->deterministic = m->deterministic;
    u->xtc_bytes = m->cross_trainer_cache_bytes;
    u->target_workers = m->target_workers;
    memcpy(u->host_id, m->host_id, strlen(m->host_id) + 1);
    u->compression = m->compression;
    u->split_size = m->split_size;
    u->distributed = m->distributed;
    u->start = m->start;
    u->resume_id = m->resume_id;
    u->job_weight = m->job_weight;
    u->min_workers = m->min_workers;
    u->max_workers = m->max_workers;
    u->task_slots = m->task_slots;
    if (m->key.len == ST_KEY_LEN) {
        u->key.set = true;
        memcpy(u->key.b, m->key.data, ST_KEY_LEN);
    }
    rc = SLUICE_ERR_NOMEM;
    if (m->def.len > 0 || u->type == ST_DATASET_REGISTERED) {
        u->def = malloc(m->def.len ? m->def.len : 1);
        if (!u->def)
            goto fail;
        if (m->def.len)
            memcpy(u->def, m->def.data, m->def.len);
        u->def_len = m->def.len;
    }
    if (m->text[0] || u->type == ST_DATASET_REGISTERED) {
        u->text = strdup(m->text);
        if (!u->text)
            goto fail;
    }
    if (m->labels[0] && !(u->labels = strdup(m->labels)))
        goto fail;
    if (m->worker_selector[0] && !(u->selector = strdup(m->worker_selector)))
        goto fail;
    if (m->n_weights > ST_MIX_INPUTS_MAX) {
        rc = SLUICE_ERR_CORRUPT;
        err_set(err, errlen, rc, "%s: %zu weights, more than %d", what, m->n_weights,
                ST_MIX_INPUTS_MAX);
        st_update_release(u);
        memset(u, 0, sizeof *u);
        goto out;
    }
    if (m->n_weights) {
        if (!(u->weights = malloc(m->n_weights * sizeof *u->weights)))
            goto fail;
        memcpy(u->weights, m->weights, m->n_weights * sizeof *u->weights);
        u->nweights = m->n_weights;
    }
    rc = plan_from_msg(m->plan, &u->plan);
    if (rc == 0)
        rc = seqs_copy(&u->seqs, m->seqs, m->n_seqs);
    if (rc < 0)
        goto fail;
    rc = 0;
    goto out;
fail:
    if (rc == SLUICE_ERR_CORRUPT)
        err_set(err, errlen, rc, "%s: malformed split plan", what);
    else
        err_set(err, errlen, rc, "out of memory");
    st_update_release(u);
    memset(u, 0, sizeof *u);
out:
    sluice__update__free_unpacked(m, NULL);
    return rc;
}

/* ---- snapshot encoding ----------------------------------------------------------------------- */

/* A snapshot taken: the message, and an arena holding every array and string it points at (a
 * copy of the state's, so the state may change while another thread packs it). */
struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    max_align_t data[];
};

struct update_codec_snapshot {
    Sluice__Snapshot m;
    struct arena_block *blocks;
    struct update_codec_spare *spare; /* during the take: where blocks come from first */
};

#define ARENA_BLOCK ((size_t)1 << 20)

/* A block of cap bytes: the smallest spare one that holds them (a standard block only for a
 * standard one), else a new one. */
static struct arena_block *block_get(struct update_codec_snapshot *c, size_t cap)
{
    struct arena_block **best = NULL;
    for (struct arena_block **p = c->spare ? &c->spare->blocks : NULL; p && *p; p = &(*p)->next) {
        size_t have = (*p)->cap;
        if (have >= cap && (cap > ARENA_BLOCK || have == ARENA_BLOCK) &&
            (!best || have < (*best)->cap))
            best = p;
    }
    struct arena_block *b;
    if (best) {
        b = *best;
        *best = b->next;
    } else {
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
    }
    b->next = NULL;
    b->used = 0;
    return b;
}

/* n bytes from the arena, aligned for anything, not zeroed (every caller writes all it asks
 * for); NULL when out of memory. Allocations of a block or more get a block of their own. */
static void *arena_alloc(struct update_codec_snapshot *c, size_t n)
{
    const size_t align = sizeof(max_align_t);
    n = (n + align - 1) / align * align;
    if (n == 0)
        n = align;
    struct arena_block *b = c->blocks;
    if (!b || b->cap - b->used < n) {
        b = block_get(c, n > ARENA_BLOCK ? n : ARENA_BLOCK);
        if (!b)
            return NULL;
        if (n >= ARENA_BLOCK && c->blocks) {
            /* A large array: keep filling the current block afterwards. */
            b->next = c->blocks->next;
            c->blocks->next = b;
        } else {
            b->next = c->blocks;
            c->blocks = b;
        }
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

/* Arrays of n elements (NULL when n is 0, as protobuf-c allows with a count of 0). */
static bool arena_array(struct update_codec_snapshot *c, void **out, size_t n, size_t size)
{
    *out = n ? arena_alloc(c, n * size) : NULL;
    return !n || *out;
}

static bool arena_u64s(struct update_codec_snapshot *c, uint64_t **out, const uint64_t *v, size_t n)
{
    if (!arena_array(c, (void **)out, n, sizeof *v))
        return false;
    if (n)
        memcpy(*out, v, n * sizeof *v);
    return true;
}

static char *arena_str(struct update_codec_snapshot *c, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = arena_alloc(c, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static bool arena_key(struct update_codec_snapshot *c, ProtobufCBinaryData *out,
                      const struct st_key *k)
{
    if (!k->set)
        return true;
    out->data = arena_alloc(c, ST_KEY_LEN);
    if (!out->data)
        return false;
    memcpy(out->data, k->b, ST_KEY_LEN);
    out->len = ST_KEY_LEN;
    return true;
}

static void blocks_free(struct arena_block *b)
{
    for (struct arena_block *next; b; b = next) {
        next = b->next;
        free(b);
    }
}

void update_codec_snapshot_free(struct update_codec_snapshot *c, struct update_codec_spare *spare)
{
    if (!c)
        return;
    if (spare) {
        for (struct arena_block *b = c->blocks, *next; b; b = next) {
            next = b->next;
            b->next = spare->blocks;
            spare->blocks = b;
        }
    } else {
        blocks_free(c->blocks);
    }
    free(c);
}

void update_codec_spare_release(struct update_codec_spare *spare)
{
    blocks_free(spare->blocks);
    spare->blocks = NULL;
}

/* Each part of the state into the message; false when out of memory. */
static bool take_datasets(struct update_codec_snapshot *c, const struct state *s)
{
    Sluice__SnapshotDataset *ds;
    if (!arena_array(c, (void **)&ds, s->ndatasets, sizeof *ds) ||
        !arena_array(c, (void **)&c->m.datasets, s->ndatasets, sizeof *c->m.datasets))
        return false;
    for (size_t i = 0; i < s->ndatasets; i++) {
        const struct st_dataset *d = &s->datasets[i];
        Sluice__SnapshotDataset init = SLUICE__SNAPSHOT_DATASET__INIT;
        ds[i] = init;
        ds[i].id = arena_str(c, d->id);
        ds[i].compression = d->compression;
        ds[i].split_size = d->split_size;
        ds[i].text = arena_str(c, d->text ? d->text : "");
        ds[i].generated = d->generated;
        ds[i].def_len = d->def_len;
        ds[i].def_crc32c = def_crc(d->def, d->def_len);
        if (!ds[i].id || !ds[i].text)
            return false;
        c->m.datasets[i] = &ds[i];
    }
    c->m.n_datasets = s->ndatasets;
    return true;
}

static bool take_jobs(struct update_codec_snapshot *c, const struct state *s)
{
    Sluice__SnapshotJob *js;
    if (!arena_array(c, (void **)&js, s->njobs, sizeof *js) ||
        !arena_array(c, (void **)&c->m.jobs, s->njobs, sizeof *c->m.jobs))
        return false;
    for (size_t i = 0; i < s->njobs; i++) {
        const struct st_job *j = &s->jobs[i];
        Sluice__SnapshotJob init = SLUICE__SNAPSHOT_JOB__INIT;
        js[i] = init;
        js[i].id = j->id;
        js[i].name = arena_str(c, j->name);
        js[i].dataset_id = arena_str(c, j->dataset_id);
        js[i].mode = (int32_t)j->mode;
        js[i].num_consumers = j->num_consumers;
        js[i].iteration_id = j->iteration_id;
        js[i].deterministic = j->deterministic;
        js[i].cross_trainer_cache_bytes = j->xtc_bytes;
        js[i].target_workers = (int32_t)j->target_workers;
        js[i].worker_selector = arena_str(c, j->selector);
        js[i].weight = j->weight;
        js[i].min_workers = j->min_workers;
        js[i].max_workers = j->max_workers;
        if (!js[i].name || !js[i].dataset_id || !js[i].worker_selector)
            return false;
        c->m.jobs[i] = &js[i];
    }
    c->m.n_jobs = s->njobs;
    return true;
}

static bool take_plan(struct update_codec_snapshot *c, const struct split_plan *p,
                      Sluice__JournalSplitPlan *m)
{
    plan_to_msg(p, m);
    if (!arena_array(c, (void **)&m->paths, p->npaths, sizeof *m->paths))
        return false;
    for (size_t k = 0; k < p->npaths; k++) {
        if (!(m->paths[k] = arena_str(c, p->paths[k])))
            return false;
    }
    return true;
}

static bool take_iterations(struct update_codec_snapshot *c, const struct state *s)
{
    Sluice__SnapshotIteration *its;
    Sluice__JournalSplitPlan *plans;
    if (!arena_array(c, (void **)&its, s->niterations, sizeof *its) ||
        !arena_array(c, (void **)&plans, s->niterations, sizeof *plans) ||
        !arena_array(c, (void **)&c->m.iterations, s->niterations, sizeof *c->m.iterations))
        return false;
    for (size_t i = 0; i < s->niterations; i++) {
        const struct st_iteration *it = &s->iterations[i];
        Sluice__SnapshotIteration init = SLUICE__SNAPSHOT_ITERATION__INIT;
        Sluice__JournalSplitPlan pinit = SLUICE__JOURNAL_SPLIT_PLAN__INIT;
        its[i] = init;
        plans[i] = pinit;
        its[i].id = it->id;
        its[i].job_id = it->job_id;
        its[i].repetition = it->repetition;
        its[i].state = (int32_t)it->state;
        its[i].distributed = it->distributed;
        if (!plan_empty(&it->plan)) {
            if (!take_plan(c, &it->plan, &plans[i]))
                return false;
            its[i].plan = &plans[i];
        }
        its[i].split_total = it->split_total;
        its[i].split_cursor = it->split_cursor;
        its[i].resume_id = it->resume_id;
        its[i].n_pool = it->pool.n;
        its[i].splits_finished = it->splits_finished;
        its[i].splits_leased = it->splits_leased;
        its[i].rounds_granted = it->rounds_granted;
        its[i].error = arena_str(c, it->error ? it->error : "");
        Sluice__SnapshotRoundEpoch *eps;
        if (!arena_u64s(c, &its[i].pool, it->pool.v, it->pool.n) ||
            !arena_key(c, &its[i].key, &it->key) || !its[i].error ||
            !arena_array(c, (void **)&eps, it->nepochs, sizeof *eps) ||
            !arena_array(c, (void **)&its[i].epochs, it->nepochs, sizeof *its[i].epochs))
            return false;
        its[i].n_epochs = it->nepochs;
        for (size_t k = 0; k < it->nepochs; k++) {
            Sluice__SnapshotRoundEpoch einit = SLUICE__SNAPSHOT_ROUND_EPOCH__INIT;
            eps[k] = einit;
            eps[k].start = it->epochs[k].start;
            eps[k].n_tasks = it->epochs[k].tasks.n;
            if (!arena_u64s(c, &eps[k].tasks, it->epochs[k].tasks.v, it->epochs[k].tasks.n))
                return false;
            its[i].epochs[k] = &eps[k];
        }
        c->m.iterations[i] = &its[i];
    }
    c->m.n_iterations = s->niterations;
    return true;
}

static bool take_tasks(struct update_codec_snapshot *c, const struct state *s)
{
    Sluice__SnapshotTask *ts;
    if (!arena_array(c, (void **)&ts, s->ntasks, sizeof *ts) ||
        !arena_array(c, (void **)&c->m.tasks, s->ntasks, sizeof *c->m.tasks))
        return false;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        Sluice__SnapshotTask init = SLUICE__SNAPSHOT_TASK__INIT;
        ts[i] = init;
        ts[i].id = t->id;
        ts[i].iteration_id = t->iteration_id;
        ts[i].worker_id = t->worker_id;
        ts[i].finished = t->finished;
        ts[i].n_leased = t->leased.n;
        ts[i].last_request = t->last_request;
        ts[i].n_granted = t->granted.n;
        if (!arena_u64s(c, &ts[i].leased, t->leased.v, t->leased.n) ||
            !arena_u64s(c, &ts[i].granted, t->granted.v, t->granted.n))
            return false;
        c->m.tasks[i] = &ts[i];
    }
    c->m.n_tasks = s->ntasks;
    return true;
}

static bool take_workers_clients(struct update_codec_snapshot *c, const struct state *s)
{
    Sluice__SnapshotWorker *ws;
    Sluice__SnapshotClient *cs;
    if (!arena_array(c, (void **)&ws, s->nworkers, sizeof *ws) ||
        !arena_array(c, (void **)&c->m.workers, s->nworkers, sizeof *c->m.workers) ||
        !arena_array(c, (void **)&cs, s->nclients, sizeof *cs) ||
        !arena_array(c, (void **)&c->m.clients, s->nclients, sizeof *c->m.clients))
        return false;
    for (size_t i = 0; i < s->nworkers; i++) {
        const struct st_worker *w = &s->workers[i];
        Sluice__SnapshotWorker init = SLUICE__SNAPSHOT_WORKER__INIT;
        ws[i] = init;
        ws[i].id = w->id;
        ws[i].address = arena_str(c, w->address);
        ws[i].incarnation = w->incarnation;
        ws[i].draining = w->draining;
        ws[i].host_id = arena_str(c, w->host_id);
        ws[i].labels = arena_str(c, w->labels);
        ws[i].task_slots = w->task_slots;
        if (!ws[i].address || !ws[i].host_id || !ws[i].labels || !arena_key(c, &ws[i].key, &w->key))
            return false;
        c->m.workers[i] = &ws[i];
    }
    c->m.n_workers = s->nworkers;
    for (size_t i = 0; i < s->nclients; i++) {
        Sluice__SnapshotClient init = SLUICE__SNAPSHOT_CLIENT__INIT;
        cs[i] = init;
        cs[i].id = s->clients[i].id;
        cs[i].iteration_id = s->clients[i].iteration_id;
        cs[i].owner = s->clients[i].owner;
        cs[i].host_id = arena_str(c, s->clients[i].host_id);
        if (!cs[i].host_id)
            return false;
        c->m.clients[i] = &cs[i];
    }
    c->m.n_clients = s->nclients;
    return true;
}

static bool take_saves(struct update_codec_snapshot *c, const struct state *s)
{
    Sluice__SnapshotSave *svs;
    if (!arena_array(c, (void **)&svs, s->nsaves, sizeof *svs) ||
        !arena_array(c, (void **)&c->m.saves, s->nsaves, sizeof *c->m.saves))
        return false;
    for (size_t i = 0; i < s->nsaves; i++) {
        const struct st_save *sv = &s->saves[i];
        Sluice__SnapshotSave init = SLUICE__SNAPSHOT_SAVE__INIT;
        svs[i] = init;
        svs[i].id = sv->id;
        svs[i].dataset_id = arena_str(c, sv->dataset_id);
        svs[i].path = arena_str(c, sv->path ? sv->path : "");
        svs[i].job_id = sv->job_id;
        svs[i].iteration_id = sv->iteration_id;
        svs[i].chunks = sv->chunks;
        svs[i].state = (int32_t)sv->state;
        svs[i].error = arena_str(c, sv->error ? sv->error : "");
        if (!svs[i].dataset_id || !svs[i].path || !svs[i].error)
            return false;
        c->m.saves[i] = &svs[i];
    }
    c->m.n_saves = s->nsaves;
    return true;
}

static bool take_mixes(struct update_codec_snapshot *c, const struct state *s)
{
    Sluice__SnapshotMix *ms;
    if (!arena_array(c, (void **)&ms, s->nmixes, sizeof *ms) ||
        !arena_array(c, (void **)&c->m.mixes, s->nmixes, sizeof *c->m.mixes))
        return false;
    for (size_t i = 0; i < s->nmixes; i++) {
        const struct st_mix *mx = &s->mixes[i];
        Sluice__SnapshotMix init = SLUICE__SNAPSHOT_MIX__INIT;
        ms[i] = init;
        ms[i].dataset_id = arena_str(c, mx->dataset_id);
        ms[i].job_name = arena_str(c, mx->job_name);
        ms[i].horizon = mx->horizon;
        Sluice__SnapshotMixChange *ch;
        if (!ms[i].dataset_id || !ms[i].job_name ||
            !arena_array(c, (void **)&ch, mx->nchanges, sizeof *ch) ||
            !arena_array(c, (void **)&ms[i].changes, mx->nchanges, sizeof *ms[i].changes))
            return false;
        for (size_t k = 0; k < mx->nchanges; k++) {
            Sluice__SnapshotMixChange cinit = SLUICE__SNAPSHOT_MIX_CHANGE__INIT;
            ch[k] = cinit;
            ch[k].from = mx->changes[k].from;
            double *w = arena_alloc(c, mx->changes[k].nweights * sizeof *w);
            if (!w)
                return false;
            memcpy(w, mx->changes[k].weights, mx->changes[k].nweights * sizeof *w);
            ch[k].weights = w;
            ch[k].n_weights = mx->changes[k].nweights;
            ms[i].changes[k] = &ch[k];
        }
        ms[i].n_changes = mx->nchanges;
        c->m.mixes[i] = &ms[i];
    }
    c->m.n_mixes = s->nmixes;
    return true;
}

static bool take_jobpos(struct update_codec_snapshot *c, const struct state *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->njobpos; i++)
        for (size_t k = 0; k < s->jobpos[i].nconsumers; k++)
            n += s->jobpos[i].consumers[k].nreports;
    Sluice__SnapshotJobPosition *ps;
    if (!arena_array(c, (void **)&ps, n, sizeof *ps) ||
        !arena_array(c, (void **)&c->m.job_positions, n, sizeof *c->m.job_positions))
        return false;
    size_t at = 0;
    for (size_t i = 0; i < s->njobpos; i++) {
        const struct st_jobpos *r = &s->jobpos[i];
        for (size_t k = 0; k < r->nconsumers; k++)
            for (size_t j = 0; j < r->consumers[k].nreports; j++) {
                const struct st_jobpos_report *rep = &r->consumers[k].reports[j];
                Sluice__SnapshotJobPosition init = SLUICE__SNAPSHOT_JOB_POSITION__INIT;
                ps[at] = init;
                ps[at].job_name = arena_str(c, r->job_name);
                ps[at].generation = r->generation;
                ps[at].consumer = r->consumers[k].client_id;
                ps[at].step = rep->step;
                uint8_t *b = arena_alloc(c, rep->len);
                if (!ps[at].job_name || !b)
                    return false;
                memcpy(b, rep->bytes, rep->len);
                ps[at].position.data = b;
                ps[at].position.len = rep->len;
                c->m.job_positions[at] = &ps[at];
                at++;
            }
    }
    c->m.n_job_positions = n;
    return true;
}

int update_codec_snapshot_take(const struct state *s, struct update_codec_spare *spare,
                               struct update_codec_snapshot **out)
{
    struct update_codec_snapshot *c = calloc(1, sizeof *c);
    if (!c)
        return SLUICE_ERR_NOMEM;
    c->spare = spare;
    Sluice__Snapshot init = SLUICE__SNAPSHOT__INIT;
    c->m = init;
    c->m.next_dataset_id = s->next_dataset_id;
    c->m.next_job_id = s->next_job_id;
    c->m.next_iteration_id = s->next_iteration_id;
    c->m.next_task_id = s->next_task_id;
    c->m.next_worker_id = s->next_worker_id;
    c->m.next_client_id = s->next_client_id;
    c->m.applied = s->applied;
    if (!take_datasets(c, s) || !take_jobs(c, s) || !take_iterations(c, s) || !take_tasks(c, s) ||
        !take_workers_clients(c, s) || !take_saves(c, s) || !take_mixes(c, s) ||
        !take_jobpos(c, s)) {
        update_codec_snapshot_free(c, spare);
        return SLUICE_ERR_NOMEM;
    }
    /* What this copy did not need (the state shrank) goes back to the allocator. */
    if (spare)
        update_codec_spare_release(spare);
    c->spare = NULL;
    *out = c;
    return 0;
}

int update_codec_snapshot_pack(const struct update_codec_snapshot *c, uint8_t **out, size_t *len)
{
    size_t n = sluice__snapshot__get_packed_size(&c->m);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return SLUICE_ERR_NOMEM;
    sluice__snapshot__pack(&c->m, b);
    *out = b;
    *len = n;
    return 0;
}

int update_codec_snapshot_encode(const struct state *s, uint8_t **out, size_t *len)
{
    struct update_codec_snapshot *c;
    int rc = update_codec_snapshot_take(s, NULL, &c);
    if (rc < 0)
        return rc;
    rc = update_codec_snapshot_pack(c, out, len);
    update_codec_snapshot_free(c, NULL);
    return rc;
}

/* ---- snapshot decoding ----------------------------------------------------------------------- */

#define CORRUPT(...) err_set(err, errlen, SLUICE_ERR_CORRUPT, __VA_ARGS__)
#define NOMEM() err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory")

/* A split of an iteration that is in a pool or leased: each may be in one place only. */
struct split_ref {
    uint64_t iteration, seq;
};

static int cmp_split_ref(const void *a, const void *b)
{
    const struct split_ref *x = a, *y = b;
    if (x->iteration != y->iteration)
        return x->iteration < y->iteration ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool decimal_id(const char *s, uint64_t *out)
{
    if (!*s || (*s == '0') || strlen(s) > 20)
        return false;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return true;
}

static int decode_datasets(const Sluice__Snapshot *m, struct state *s,
                           update_codec_def_lookup_cb lookup, void *user, char *err, size_t errlen)
{
    s->datasets = calloc(m->n_datasets ? m->n_datasets : 1, sizeof *s->datasets);
    if (!s->datasets)
        return NOMEM();
    s->cap_datasets = m->n_datasets;
    for (size_t i = 0; i < m->n_datasets; i++) {
        const Sluice__SnapshotDataset *d = m->datasets[i];
        if (!d || !str_fits(d->id, ST_ID_MAX) || !d->id[0] || !d->text)
            return CORRUPT("dataset %zu is malformed", i);
        if (i > 0 && strcmp(s->datasets[i - 1].id, d->id) >= 0)
            return CORRUPT("dataset '%s' is out of order", d->id);
        uint64_t num;
        if (d->generated && (!decimal_id(d->id, &num) || num >= m->next_dataset_id))
            return CORRUPT("dataset '%s' is marked generated but is not a number below %" PRIu64,
                           d->id, m->next_dataset_id);
        struct st_dataset *row = &s->datasets[s->ndatasets++];
        memcpy(row->id, d->id, strlen(d->id) + 1);
        row->compression = d->compression;
        row->split_size = d->split_size;
        row->generated = d->generated;
        row->text = strdup(d->text);
        if (!row->text)
            return NOMEM();
        sha256_hex(row->text, strlen(row->text), row->digest);
        int rc = lookup(user, d->id, &row->def, &row->def_len, err, errlen);
        if (rc < 0)
            return rc;
        if (row->def_len != d->def_len || def_crc(row->def, row->def_len) != d->def_crc32c)
            return CORRUPT("dataset '%s': its definition does not match the snapshot", d->id);
    }
    return 0;
}

static int decode_jobs(const Sluice__Snapshot *m, struct state *s, char *err, size_t errlen)
{
    s->jobs = calloc(m->n_jobs ? m->n_jobs : 1, sizeof *s->jobs);
    if (!s->jobs)
        return NOMEM();
    s->cap_jobs = m->n_jobs;
    for (size_t i = 0; i < m->n_jobs; i++) {
        const Sluice__SnapshotJob *j = m->jobs[i];
        if (!j || !str_fits(j->name, ST_ID_MAX) || !str_fits(j->dataset_id, ST_ID_MAX) ||
            !str_fits(j->worker_selector, ST_SELECTOR_MAX) ||
            !state_selector_valid(j->worker_selector) || !(j->weight >= 0) ||
            j->weight > ST_WEIGHT_MAX ||
            (j->min_workers && j->max_workers && j->min_workers > j->max_workers))
            return CORRUPT("job %zu is malformed", i);
        if (j->id == 0 || j->id >= m->next_job_id || (i > 0 && s->jobs[i - 1].id >= j->id))
            return CORRUPT("job %" PRIu64 " is out of order or past the next id", j->id);
        if (!mode_valid(j->mode))
            return CORRUPT("job %" PRIu64 " has unknown mode %d", j->id, (int)j->mode);
        if (!target_workers_valid(j->target_workers))
            return CORRUPT("job %" PRIu64 " has unknown target_workers %d", j->id,
                           (int)j->target_workers);
        if (!state_dataset(s, j->dataset_id))
            return CORRUPT("job %" PRIu64 " names unknown dataset '%s'", j->id, j->dataset_id);
        if (j->name[0] && state_job_by_key(s, j->dataset_id, j->name))
            return CORRUPT("job name '%s' is used twice on dataset '%s'", j->name, j->dataset_id);
        struct st_job *row = &s->jobs[s->njobs++];
        row->id = j->id;
        memcpy(row->name, j->name, strlen(j->name) + 1);
        memcpy(row->dataset_id, j->dataset_id, strlen(j->dataset_id) + 1);
        row->mode = (enum sluice_mode)j->mode;
        row->num_consumers = j->num_consumers;
        row->iteration_id = j->iteration_id;
        row->deterministic = j->deterministic;
        row->xtc_bytes = j->cross_trainer_cache_bytes;
        row->target_workers = (enum sluice_target_workers)j->target_workers;
        memcpy(row->selector, j->worker_selector, strlen(j->worker_selector) + 1);
        row->weight = j->weight > 0 ? j->weight : 1;
        row->min_workers = j->min_workers;
        row->max_workers = j->max_workers;
    }
    return 0;
}

/* Copies a coordinated iteration's round schedule. Returns 0, SLUICE_ERR_NOMEM, or
 * SLUICE_ERR_CORRUPT when it does not fit (epochs out of order, past the grant, naming tasks
 * never created, or in an iteration that is not coordinated and active). */
static int decode_epochs(const Sluice__Snapshot *m, const Sluice__SnapshotIteration *it,
                         struct st_iteration *row, const struct st_job *j)
{
    if (it->n_epochs == 0 && it->rounds_granted == 0)
        return 0;
    if (j->num_consumers == 0 || row->state == ST_ITER_GC || it->n_epochs > ST_ROUND_EPOCHS_MAX)
        return SLUICE_ERR_CORRUPT;
    row->rounds_granted = it->rounds_granted;
    if (it->n_epochs == 0)
        return 0;
    row->epochs = calloc(it->n_epochs, sizeof *row->epochs);
    if (!row->epochs)
        return SLUICE_ERR_NOMEM;
    for (size_t k = 0; k < it->n_epochs; k++) {
        const Sluice__SnapshotRoundEpoch *e = it->epochs[k];
        if (!e || e->start > it->rounds_granted ||
            (k > 0 && row->epochs[k - 1].start >= e->start) ||
            !strictly_increasing(e->tasks, e->n_tasks) ||
            (e->n_tasks > 0 && e->tasks[e->n_tasks - 1] >= m->next_task_id))
            return SLUICE_ERR_CORRUPT;
        row->epochs[k].start = e->start;
        if (seqs_copy(&row->epochs[k].tasks, e->tasks, e->n_tasks) < 0)
            return SLUICE_ERR_NOMEM;
        row->nepochs++;
    }
    return 0;
}

static int decode_iterations(const Sluice__Snapshot *m, struct state *s, char *err, size_t errlen)
{
    s->iterations = calloc(m->n_iterations ? m->n_iterations : 1, sizeof *s->iterations);
    if (!s->iterations)
        return NOMEM();
    s->cap_iterations = m->n_iterations;
    for (size_t i = 0; i < m->n_iterations; i++) {
        const Sluice__SnapshotIteration *it = m->iterations[i];
        if (!it)
            return CORRUPT("iteration %zu is malformed", i);
        if (it->id == 0 || it->id >= m->next_iteration_id ||
            (i > 0 && s->iterations[i - 1].id >= it->id))
            return CORRUPT("iteration %" PRIu64 " is out of order or past the next id", it->id);
        const struct st_job *j = state_job(s, it->job_id);
        if (!j || j->iteration_id != it->id)
            return CORRUPT("iteration %" PRIu64 " is not the current one of a job", it->id);
        if (it->state < ST_ITER_ACTIVE || it->state > ST_ITER_GC)
            return CORRUPT("iteration %" PRIu64 " has unknown state %d", it->id, (int)it->state);
        if (it->distributed != (j->mode == SLUICE_DISTRIBUTED_EPOCH))
            return CORRUPT("iteration %" PRIu64 " does not match its job's mode", it->id);
        struct st_iteration *row = &s->iterations[s->niterations++];
        row->id = it->id;
        row->job_id = it->job_id;
        row->repetition = it->repetition;
        row->state = (enum st_iteration_state)it->state;
        row->distributed = it->distributed;
        int rc = plan_from_msg(it->plan, &row->plan);
        if (rc == SLUICE_ERR_CORRUPT)
            return CORRUPT("iteration %" PRIu64 " has a malformed split plan", it->id);
        if (rc < 0 || seqs_copy(&row->pool, it->pool, it->n_pool) < 0)
            return NOMEM();
        row->split_total = it->split_total;
        row->split_cursor = it->split_cursor;
        row->resume_id = it->resume_id;
        row->splits_finished = it->splits_finished;
        row->splits_leased = it->splits_leased;
        if (it->error[0]) {
            if (row->state == ST_ITER_GC)
                return CORRUPT("iteration %" PRIu64 " failed but is collected", it->id);
            if (!(row->error = strdup(it->error)))
                return NOMEM();
        }
        uint64_t total =
            it->distributed && row->state != ST_ITER_GC ? split_plan_total(&row->plan) : 0;
        if (row->split_total != total || row->split_cursor > total)
            return CORRUPT("iteration %" PRIu64 " has a split cursor that does not fit its plan",
                           it->id);
        if (!strictly_increasing(row->pool.v, row->pool.n) ||
            (row->pool.n > 0 && row->pool.v[row->pool.n - 1] >= row->split_cursor))
            return CORRUPT("iteration %" PRIu64 " has a malformed pool of returned splits", it->id);
        if (it->key.len != 0 && (it->key.len != ST_KEY_LEN || !it->key.data))
            return CORRUPT("iteration %" PRIu64 " has a key of %zu bytes", it->id, it->key.len);
        if (it->key.len == ST_KEY_LEN) {
            row->key.set = true;
            memcpy(row->key.b, it->key.data, ST_KEY_LEN);
        }
        int erc = decode_epochs(m, it, row, j);
        if (erc == SLUICE_ERR_NOMEM)
            return NOMEM();
        if (erc < 0)
            return CORRUPT("iteration %" PRIu64 " has a malformed round schedule", it->id);
    }
    for (size_t i = 0; i < s->njobs; i++) {
        if (s->jobs[i].iteration_id != 0 && !state_iteration(s, s->jobs[i].iteration_id))
            return CORRUPT("job %" PRIu64 " names unknown iteration %" PRIu64, s->jobs[i].id,
                           s->jobs[i].iteration_id);
    }
    return 0;
}

static int decode_workers(const Sluice__Snapshot *m, struct state *s, char *err, size_t errlen)
{
    s->workers = calloc(m->n_workers ? m->n_workers : 1, sizeof *s->workers);
    if (!s->workers)
        return NOMEM();
    s->cap_workers = m->n_workers;
    for (size_t i = 0; i < m->n_workers; i++) {
        const Sluice__SnapshotWorker *w = m->workers[i];
        if (!w || !str_fits(w->address, ST_ADDR_MAX) || !w->address[0] ||
            !str_fits(w->host_id, ST_HOST_MAX) || !str_fits(w->labels, ST_LABELS_MAX) ||
            !state_labels_valid(w->labels) || w->task_slots > ST_TASK_SLOTS_MAX)
            return CORRUPT("worker %zu is malformed", i);
        if (w->id == 0 || w->id >= m->next_worker_id || (i > 0 && s->workers[i - 1].id >= w->id))
            return CORRUPT("worker %" PRIu64 " is out of order or past the next id", w->id);
        if (state_worker_by_address(s, w->address))
            return CORRUPT("two workers have address '%s'", w->address);
        struct st_worker *row = &s->workers[s->nworkers++];
        row->id = w->id;
        memcpy(row->address, w->address, strlen(w->address) + 1);
        row->incarnation = w->incarnation;
        row->draining = w->draining;
        memcpy(row->host_id, w->host_id, strlen(w->host_id) + 1);
        memcpy(row->labels, w->labels, strlen(w->labels) + 1);
        row->task_slots = w->task_slots;
        if (w->key.len != 0 && (w->key.len != ST_KEY_LEN || !w->key.data))
            return CORRUPT("worker %" PRIu64 " has a key of %zu bytes", w->id, w->key.len);
        if (w->key.len == ST_KEY_LEN) {
            row->key.set = true;
            memcpy(row->key.b, w->key.data, ST_KEY_LEN);
        }
    }
    return 0;
}

/* Tasks, and the checks that tie leases, pools and counts together. */
static int decode_tasks(const Sluice__Snapshot *m, struct state *s, char *err, size_t errlen)
{
    struct split_ref *refs = NULL, *pairs = NULL;
    uint64_t *leased_sum = NULL;
    size_t nrefs = 0, cap = 0;
    int rc = 0;
    s->tasks = calloc(m->n_tasks ? m->n_tasks : 1, sizeof *s->tasks);
    pairs = calloc(m->n_tasks ? m->n_tasks : 1, sizeof *pairs);
    leased_sum = calloc(s->niterations ? s->niterations : 1, sizeof *leased_sum);
    for (size_t i = 0; i < s->niterations; i++)
        cap += s->iterations[i].pool.n;
    for (size_t i = 0; i < m->n_tasks; i++)
        cap += m->tasks[i] ? m->tasks[i]->n_leased : 0;
    refs = calloc(cap ? cap : 1, sizeof *refs);
    if (!s->tasks || !pairs || !leased_sum || !refs) {
        rc = NOMEM();
        goto out;
    }
    s->cap_tasks = m->n_tasks;
    for (size_t i = 0; i < s->niterations; i++) {
        for (size_t k = 0; k < s->iterations[i].pool.n; k++)
            refs[nrefs++] = (struct split_ref){s->iterations[i].id, s->iterations[i].pool.v[k]};
    }
    for (size_t i = 0; i < m->n_tasks; i++) {
        const Sluice__SnapshotTask *t = m->tasks[i];
        if (!t) {
            rc = CORRUPT("task %zu is malformed", i);
            goto out;
        }
        if (t->id == 0 || t->id >= m->next_task_id || (i > 0 && s->tasks[i - 1].id >= t->id)) {
            rc = CORRUPT("task %" PRIu64 " is out of order or past the next id", t->id);
            goto out;
        }
        const struct st_iteration *it = state_iteration(s, t->iteration_id);
        if (!it || it->state == ST_ITER_GC) {
            rc = CORRUPT("task %" PRIu64 " names unknown iteration %" PRIu64, t->id,
                         t->iteration_id);
            goto out;
        }
        if (!state_worker(s, t->worker_id)) {
            rc = CORRUPT("task %" PRIu64 " names unknown worker %" PRIu64, t->id, t->worker_id);
            goto out;
        }
        if (!strictly_increasing(t->leased, t->n_leased) ||
            (t->n_leased > 0 &&
             (t->finished || !it->distributed || t->leased[t->n_leased - 1] >= it->split_cursor))) {
            rc = CORRUPT("task %" PRIu64 " holds leases it cannot hold", t->id);
            goto out;
        }
        /* Its last lease came from below the cursor, and only a numbered request records one. */
        if (t->last_request == UINT64_MAX || !strictly_increasing(t->granted, t->n_granted) ||
            (t->n_granted > 0 && (t->last_request == 0 || !it->distributed ||
                                  t->granted[t->n_granted - 1] >= it->split_cursor))) {
            rc = CORRUPT("task %" PRIu64 " has a malformed record of its last lease", t->id);
            goto out;
        }
        struct st_task *row = &s->tasks[s->ntasks++];
        row->id = t->id;
        row->iteration_id = t->iteration_id;
        row->worker_id = t->worker_id;
        row->finished = t->finished;
        row->last_request = t->last_request;
        if (seqs_copy(&row->leased, t->leased, t->n_leased) < 0 ||
            seqs_copy(&row->granted, t->granted, t->n_granted) < 0) {
            rc = NOMEM();
            goto out;
        }
        pairs[i] = (struct split_ref){t->iteration_id, t->worker_id};
        leased_sum[it - s->iterations] += t->n_leased;
        for (size_t k = 0; k < t->n_leased; k++)
            refs[nrefs++] = (struct split_ref){t->iteration_id, t->leased[k]};
    }
    qsort(pairs, m->n_tasks, sizeof *pairs, cmp_split_ref);
    for (size_t i = 1; i < m->n_tasks; i++) {
        if (cmp_split_ref(&pairs[i - 1], &pairs[i]) == 0) {
            rc = CORRUPT("worker %" PRIu64 " has two tasks in iteration %" PRIu64, pairs[i].seq,
                         pairs[i].iteration);
            goto out;
        }
    }
    qsort(refs, nrefs, sizeof *refs, cmp_split_ref);
    for (size_t i = 1; i < nrefs; i++) {
        if (cmp_split_ref(&refs[i - 1], &refs[i]) == 0) {
            rc = CORRUPT("split %" PRIu64 " of iteration %" PRIu64 " is held twice", refs[i].seq,
                         refs[i].iteration);
            goto out;
        }
    }
    for (size_t i = 0; i < s->niterations; i++) {
        if (leased_sum[i] != s->iterations[i].splits_leased) {
            rc = CORRUPT("iteration %" PRIu64 " counts %" PRIu64 " leased splits, its tasks hold "
                         "%" PRIu64,
                         s->iterations[i].id, s->iterations[i].splits_leased, leased_sum[i]);
            goto out;
        }
    }
out:
    free(refs);
    free(pairs);
    free(leased_sum);
    return rc;
}

static int decode_clients(const Sluice__Snapshot *m, struct state *s, char *err, size_t errlen)
{
    s->clients = calloc(m->n_clients ? m->n_clients : 1, sizeof *s->clients);
    if (!s->clients)
        return NOMEM();
    s->cap_clients = m->n_clients;
    for (size_t i = 0; i < m->n_clients; i++) {
        const Sluice__SnapshotClient *c = m->clients[i];
        if (!c || !str_fits(c->host_id, ST_HOST_MAX))
            return CORRUPT("client %zu is malformed", i);
        if (c->id == 0 || c->id >= m->next_client_id || (i > 0 && s->clients[i - 1].id >= c->id))
            return CORRUPT("client %" PRIu64 " is out of order or past the next id", c->id);
        const struct st_iteration *it = state_iteration(s, c->iteration_id);
        if (!it || it->state == ST_ITER_GC)
            return CORRUPT("client %" PRIu64 " names unknown iteration %" PRIu64, c->id,
                           c->iteration_id);
        s->clients[s->nclients].id = c->id;
        s->clients[s->nclients].iteration_id = c->iteration_id;
        s->clients[s->nclients].owner = c->owner;
        memcpy(s->clients[s->nclients].host_id, c->host_id, strlen(c->host_id) + 1);
        s->nclients++;
    }
    return 0;
}

static int decode_saves(const Sluice__Snapshot *m, struct state *s, char *err, size_t errlen)
{
    s->saves = calloc(m->n_saves ? m->n_saves : 1, sizeof *s->saves);
    if (!s->saves)
        return NOMEM();
    s->cap_saves = m->n_saves;
    for (size_t i = 0; i < m->n_saves; i++) {
        const Sluice__SnapshotSave *sv = m->saves[i];
        if (!sv || !sv->dataset_id || !sv->path || !sv->error)
            return CORRUPT("save %zu is malformed", i);
        if (sv->id == 0 || sv->id == UINT64_MAX || sv->iteration_id == 0 ||
            (i > 0 &&
             (s->saves[i - 1].id >= sv->id || s->saves[i - 1].iteration_id >= sv->iteration_id)))
            return CORRUPT("save %" PRIu64 " is out of order", sv->id);
        if (!str_fits(sv->dataset_id, ST_ID_MAX) || !state_dataset(s, sv->dataset_id))
            return CORRUPT("save %" PRIu64 " names an unknown dataset", sv->id);
        /* A path is saved into again only after the save there failed. */
        const struct st_save *prev = state_save_by_path(s, sv->path);
        /* An absolute path, or an s3:// prefix. */
        if ((sv->path[0] != '/' && strncmp(sv->path, "s3://", 5) != 0) ||
            strlen(sv->path) >= ST_PATH_MAX || (prev && prev->state != ST_SV_FAILED))
            return CORRUPT("save %" PRIu64 " has a malformed or repeated path", sv->id);
        if (sv->state < ST_SV_RUNNING || sv->state > ST_SV_FAILED)
            return CORRUPT("save %" PRIu64 " has unknown state %d", sv->id, (int)sv->state);
        if (sv->state == ST_SV_RUNNING) {
            /* A running save's iteration is never collected (plan_gc_iteration). */
            const struct st_job *j = state_job(s, sv->job_id);
            const struct st_iteration *it = state_iteration(s, sv->iteration_id);
            if (!j || !it || j->iteration_id != it->id || it->job_id != j->id || !it->distributed ||
                it->state == ST_ITER_GC || it->split_total != sv->chunks ||
                strcmp(j->dataset_id, sv->dataset_id) != 0 ||
                state_save_running(s, sv->iteration_id))
                return CORRUPT("running save %" PRIu64 " does not fit its iteration", sv->id);
        }
        struct st_save *row = &s->saves[s->nsaves];
        row->id = sv->id;
        memcpy(row->dataset_id, sv->dataset_id, strlen(sv->dataset_id) + 1);
        row->job_id = sv->job_id;
        row->iteration_id = sv->iteration_id;
        row->chunks = sv->chunks;
        row->state = (enum st_save_state)sv->state;
        if (!(row->path = strdup(sv->path)))
            return NOMEM();
        if (sv->error[0] && !(row->error = strdup(sv->error))) {
            free(row->path);
            row->path = NULL;
            return NOMEM();
        }
        s->nsaves++;
    }
    return 0;
}

/* Weights schedules are checked as applying their updates checks them. */
static int decode_mixes(const Sluice__Snapshot *m, struct state *s, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n_mixes; i++) {
        const Sluice__SnapshotMix *mx = m->mixes[i];
        if (!mx || !mx->dataset_id || !mx->job_name || !str_fits(mx->dataset_id, ST_ID_MAX) ||
            !str_fits(mx->job_name, ST_ID_MAX) || !mx->job_name[0] ||
            !state_dataset(s, mx->dataset_id) || state_mix(s, mx->dataset_id, mx->job_name) ||
            mx->n_changes > ST_MIX_CHANGES_MAX)
            return CORRUPT("weights schedule %zu is malformed", i);
        for (size_t k = 0; k <= mx->n_changes; k++) {
            struct st_update u;
            memset(&u, 0, sizeof u);
            u.type = ST_MIX_WEIGHTS;
            memcpy(u.name, mx->job_name, strlen(mx->job_name) + 1);
            memcpy(u.name2, mx->dataset_id, strlen(mx->dataset_id) + 1);
            u.start = k < mx->n_changes ? mx->changes[k]->from : mx->horizon;
            if (k < mx->n_changes) {
                const Sluice__SnapshotMixChange *ch = mx->changes[k];
                if (!ch || ch->n_weights == 0)
                    return CORRUPT("weights schedule %zu: change %zu is malformed", i, k);
                u.ref = ch->from;
                u.weights = ch->weights;
                u.nweights = ch->n_weights;
            }
            int rc = state_apply(s, &u);
            if (rc == SLUICE_ERR_NOMEM)
                return NOMEM();
            if (rc < 0)
                return CORRUPT("weights schedule of job '%s' is malformed", mx->job_name);
        }
    }
    return 0;
}

/* Kept job positions are checked as applying their updates checks them. */
static int decode_jobpos(const Sluice__Snapshot *m, struct state *s, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n_job_positions; i++) {
        const Sluice__SnapshotJobPosition *p = m->job_positions[i];
        if (!p || !p->job_name || !str_fits(p->job_name, ST_ID_MAX))
            return CORRUPT("job position %zu is malformed", i);
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.type = ST_JOB_POSITION;
        memcpy(u.name, p->job_name, strlen(p->job_name) + 1);
        u.ref = p->generation;
        u.id = p->consumer;
        u.start = p->step;
        u.def = p->position.data;
        u.def_len = p->position.len;
        int rc = state_apply(s, &u);
        if (rc == SLUICE_ERR_NOMEM)
            return NOMEM();
        if (rc < 0)
            return CORRUPT("job position %zu (job '%s') is malformed", i, p->job_name);
    }
    return 0;
}

int update_codec_snapshot_decode(const uint8_t *data, size_t len, update_codec_def_lookup_cb lookup,
                                 void *user, struct state *out, char *err, size_t errlen)
{
    struct state s;
    state_init(&s);
    int rc;
    Sluice__Snapshot *m = sluice__snapshot__unpack(NULL, len, data);
    if (!m) {
        rc = CORRUPT("not a Snapshot message");
        goto fail;
    }
    if (!m->next_dataset_id || !m->next_job_id || !m->next_iteration_id || !m->next_task_id ||
        !m->next_worker_id || !m->next_client_id) {
        rc = CORRUPT("an id counter is 0");
        goto fail;
    }
    s.next_dataset_id = m->next_dataset_id;
    s.next_job_id = m->next_job_id;
    s.next_iteration_id = m->next_iteration_id;
    s.next_task_id = m->next_task_id;
    s.next_worker_id = m->next_worker_id;
    s.next_client_id = m->next_client_id;
    s.applied = m->applied;
    /* Each table refers only to tables decoded before it. */
    if ((rc = decode_datasets(m, &s, lookup, user, err, errlen)) < 0 ||
        (rc = decode_jobs(m, &s, err, errlen)) < 0 ||
        (rc = decode_iterations(m, &s, err, errlen)) < 0 ||
        (rc = decode_workers(m, &s, err, errlen)) < 0 ||
        (rc = decode_tasks(m, &s, err, errlen)) < 0 ||
        (rc = decode_clients(m, &s, err, errlen)) < 0 ||
        (rc = decode_saves(m, &s, err, errlen)) < 0)
        goto fail;
    /* Rebuilt by applying: that counts as applied updates, which the snapshot's count holds. */
    uint64_t applied = s.applied;
    if ((rc = decode_mixes(m, &s, err, errlen)) < 0 || (rc = decode_jobpos(m, &s, err, errlen)) < 0)
        goto fail;
    s.applied = applied;
    if (state_reindex(&s) < 0) {
        rc = NOMEM();
        goto fail;
    }
    sluice__snapshot__free_unpacked(m, NULL);
    *out = s;
    return 0;
fail:
    if (m)
        sluice__snapshot__free_unpacked(m, NULL);
    state_release(&s);
    state_init(out);
    return rc;
}
