/* state_digest() (state.h): a digest of the whole durable state, FNV-1a over a canonical walk,
 * for tests comparing live, replayed and restored states. Pure. */
#include "state.h"

#include "common/fnv.h"

#include <string.h>

struct fnv {
    uint64_t h;
};

static void fnv_bytes(struct fnv *f, const void *data, size_t len)
{
    f->h = fnv1a_bytes(f->h, data, len);
}

static void fnv_u64(struct fnv *f, uint64_t v)
{
    f->h = fnv1a_u64(f->h, v);
}

static void fnv_str(struct fnv *f, const char *s)
{
    f->h = fnv1a_str(f->h, s);
}

static void fnv_key(struct fnv *f, const struct st_key *k)
{
    fnv_u64(f, k->set);
    if (k->set)
        fnv_bytes(f, k->b, sizeof k->b);
}

static void fnv_seqs(struct fnv *f, const struct st_seq_list *l)
{
    fnv_u64(f, l->n);
    for (size_t i = 0; i < l->n; i++)
        fnv_u64(f, l->v[i]);
}

uint64_t state_digest(const struct state *s)
{
    struct fnv f = {FNV1A_OFFSET};
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
        /* Only when set, so the digests of states without deterministic jobs do not change. */
        if (j->deterministic)
            fnv_u64(&f, 1);
        /* Likewise only for jobs with a cross-trainer cache. */
        if (j->xtc_bytes)
            fnv_u64(&f, j->xtc_bytes);
        /* Likewise only for jobs not read from any worker. */
        if (j->target_workers != SLUICE_TARGET_WORKERS_ANY)
            fnv_u64(&f, 0x7461726765740000ull + (uint64_t)j->target_workers);
        /* Likewise only for jobs with a selector, a weight other than 1, or bounds. */
        if (j->selector[0])
            fnv_str(&f, j->selector);
        if (j->weight != 1) {
            uint64_t bits;
            memcpy(&bits, &j->weight, sizeof bits);
            fnv_u64(&f, bits);
        }
        if (j->min_workers || j->max_workers)
            fnv_u64(&f, ((uint64_t)j->min_workers << 32) | j->max_workers);
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
        /* Only for restored iterations, so other digests do not change. */
        if (it->resume_id)
            fnv_u64(&f, it->resume_id);
        fnv_seqs(&f, &it->pool);
        fnv_u64(&f, it->splits_finished);
        fnv_u64(&f, it->splits_leased);
        fnv_u64(&f, it->rounds_granted);
        fnv_str(&f, it->error ? it->error : "");
        fnv_u64(&f, it->nepochs);
        for (size_t k = 0; k < it->nepochs; k++) {
            fnv_u64(&f, it->epochs[k].start);
            fnv_seqs(&f, &it->epochs[k].tasks);
        }
        fnv_key(&f, &it->key);
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
        fnv_key(&f, &w->key);
        /* Only when known, so the digests of states without host ids do not change. */
        if (w->host_id[0])
            fnv_str(&f, w->host_id);
        if (w->labels[0])
            fnv_str(&f, w->labels);
        /* Likewise only for workers with a slot limit. */
        if (w->task_slots)
            fnv_u64(&f, 0x736c6f7400000000ull + w->task_slots);
    }
    fnv_u64(&f, s->nclients);
    for (size_t i = 0; i < s->nclients; i++) {
        fnv_u64(&f, s->clients[i].id);
        fnv_u64(&f, s->clients[i].iteration_id);
        fnv_u64(&f, s->clients[i].owner);
        if (s->clients[i].host_id[0])
            fnv_str(&f, s->clients[i].host_id);
    }
    /* Only when there are saves, so the digests of states without any do not change. */
    if (s->nsaves)
        fnv_u64(&f, s->nsaves);
    for (size_t i = 0; i < s->nsaves; i++) {
        const struct st_save *sv = &s->saves[i];
        fnv_u64(&f, sv->id);
        fnv_str(&f, sv->dataset_id);
        fnv_str(&f, sv->path);
        fnv_u64(&f, sv->job_id);
        fnv_u64(&f, sv->iteration_id);
        fnv_u64(&f, sv->chunks);
        fnv_u64(&f, sv->state);
        fnv_str(&f, sv->error ? sv->error : "");
    }
    /* The same for weights schedules. */
    if (s->nmixes)
        fnv_u64(&f, s->nmixes);
    for (size_t i = 0; i < s->nmixes; i++) {
        const struct st_mix *m = &s->mixes[i];
        fnv_str(&f, m->dataset_id);
        fnv_str(&f, m->job_name);
        fnv_u64(&f, m->horizon);
        fnv_u64(&f, m->nchanges);
        for (size_t k = 0; k < m->nchanges; k++) {
            fnv_u64(&f, m->changes[k].from);
            fnv_u64(&f, m->changes[k].nweights);
            for (size_t j = 0; j < m->changes[k].nweights; j++) {
                uint64_t bits;
                memcpy(&bits, &m->changes[k].weights[j], sizeof bits);
                fnv_u64(&f, bits);
            }
        }
    }
    /* The same for kept job positions, in their order (which row goes first matters). */
    if (s->njobpos)
        fnv_u64(&f, s->njobpos);
    for (size_t i = 0; i < s->njobpos; i++) {
        const struct st_jobpos *r = &s->jobpos[i];
        fnv_str(&f, r->job_name);
        fnv_u64(&f, r->generation);
        fnv_u64(&f, r->nconsumers);
        for (size_t c = 0; c < r->nconsumers; c++) {
            fnv_u64(&f, r->consumers[c].client_id);
            fnv_u64(&f, r->consumers[c].nreports);
            for (size_t k = 0; k < r->consumers[c].nreports; k++) {
                fnv_u64(&f, r->consumers[c].reports[k].step);
                fnv_u64(&f, r->consumers[c].reports[k].len);
                fnv_bytes(&f, r->consumers[c].reports[k].bytes, r->consumers[c].reports[k].len);
            }
        }
    }
    return f.h;
}
