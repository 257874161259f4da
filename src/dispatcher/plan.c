/* What the planners share (plan_internal.h): finishing the iterations a plan touches, round
 * schedules, new iterations' tasks, task removals. When one plan appends several updates whose
 * effects build on each other (a task finished, then its iteration finished), the later
 * decisions look at the updates already appended by the same call. */

#include "plan_internal.h"

#include "common/hostid.h"
#include "common/names.h"

/* The planners copy names that passed name_check() and hostid_check() into update fields. */
_Static_assert(NAME_ID_MAX < ST_ID_MAX && NAME_ADDR_MAX < ST_ADDR_MAX,
               "a valid name fits its field with the NUL");
_Static_assert(HOSTID_MAX < ST_HOST_MAX, "a valid host id fits its field with the NUL");

/* ---- finishing iterations ---- */

/* Whether the updates appended since start include one of type for id. */
bool plan_pending(const struct st_update_list *out, size_t start, enum st_update_type type,
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
            (!t->finished && !plan_pending(out, start, ST_TASK_FINISHED, t->id)))
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) {
            const struct st_task *u = state_task(s, refs[j].task_id);
            seen = u->iteration_id == it->id && u->worker_id == t->worker_id &&
                   (u->finished || plan_pending(out, start, ST_TASK_FINISHED, u->id));
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
        if (t->iteration_id != it->id || plan_pending(out, start, ST_TASK_REMOVED, t->id))
            continue;
        remaining++;
        if (!t->finished && !plan_pending(out, start, ST_TASK_FINISHED, t->id))
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
int plan_finish_touched(const struct state *s, struct st_update_list *out, size_t start)
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
        if (!plan_push(out, ST_ITERATION_FINISHED, it->id))
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
    return (w && w->draining) || plan_pending(out, start, ST_WORKER_DRAINING, worker_id);
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
            plan_pending(out, start, ST_TASK_REMOVED, t->id) ||
            plan_pending(out, start, ST_TASK_FINISHED, t->id) ||
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
            plan_pending(out, start, ST_TASK_REMOVED, u->id) ||
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
int plan_round_schedules(const struct state *s, struct st_update_list *out, size_t start)
{
    struct st_seq_list l = {0};
    int rc = 0;
    for (size_t i = 0; i < s->niterations; i++) {
        const struct st_iteration *it = &s->iterations[i];
        if (it->state != ST_ITER_ACTIVE || !state_iteration_coordinated(s, it) ||
            plan_pending(out, start, ST_ITERATION_FINISHED, it->id) ||
            plan_pending(out, start, ST_ITERATION_GC, it->id))
            continue;
        if ((rc = serving_tasks(s, it->id, out, start, &l)) < 0)
            break;
        static const struct st_seq_list none = {0};
        const struct st_seq_list *last = it->nepochs ? &it->epochs[it->nepochs - 1].tasks : &none;
        if (seq_equal(&l, last))
            continue;
        struct st_update *u = plan_push(out, ST_ROUNDS_SCHEDULED, 0);
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

/* ---- tasks (placement: plan_place.c) ---- */

/* Appends SPLITS_RETURNED of every split leased to task t, if any. */
int plan_push_leases_back(const struct st_task *t, struct st_update_list *out)
{
    if (t->leased.n == 0)
        return 0;
    struct st_update *u = plan_push(out, ST_SPLITS_RETURNED, 0);
    if (!u)
        return SLUICE_ERR_NOMEM;
    u->ref = t->iteration_id;
    u->ref2 = t->id;
    return state_seq_assign(&u->seqs, t->leased.v, t->leased.n) < 0 ? SLUICE_ERR_NOMEM : 0;
}

/* Appends the removal of task t: its leased splits back to the pool, the task removed. */
int plan_push_task_removal(const struct st_task *t, struct st_update_list *out)
{
    struct st_update *u;
    if (plan_push_leases_back(t, out) < 0)
        return SLUICE_ERR_NOMEM;
    if (!(u = plan_push(out, ST_TASK_REMOVED, t->id)))
        return SLUICE_ERR_NOMEM;
    u->ref = t->iteration_id;
    return 0;
}

int plan_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
