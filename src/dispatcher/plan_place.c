/* Where tasks go (plan_internal.h): a job's selector and max_workers, local jobs' hosts, and
 * the workers' task slots. A worker registered with --task-slots N holds at most N unfinished
 * tasks of active iterations; its free slots go to the iterations that want one in the order of
 * plan_rank_before (short of min_workers first, then the heaviest, then the oldest job), and a
 * task once placed is never taken away for a heavier job. A worker without slots (0) takes a
 * task of every iteration that wants one, as before slots existed. */

#include "plan_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether worker_id has a task of iteration_id, counting those created in out since start. */
static bool worker_has_task_of(const struct state *s, uint64_t worker_id, uint64_t iteration_id,
                               const struct st_update_list *out, size_t start)
{
    size_t n;
    const struct st_task_ref *refs = state_worker_tasks(s, worker_id, &n);
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t && t->iteration_id == iteration_id)
            return true;
    }
    for (size_t i = start; i < out->n; i++) {
        const struct st_update *u = &out->v[i];
        if (u->type == ST_TASK_CREATED && u->ref == iteration_id && u->ref2 == worker_id)
            return true;
    }
    return false;
}

bool plan_worker_serves(const struct state *s, const struct st_job *j, uint64_t iteration_id,
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

void plan_place_of(const struct st_job *j, struct plan_place *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->weight = 1;
    if (!j)
        return;
    pl->max_workers = j->max_workers;
    pl->min_workers = j->min_workers;
    pl->weight = j->weight > 0 ? j->weight : 1;
    pl->job_id = j->id;
    char err[128];
    if (j->selector[0] && selector_parse(j->selector, &pl->sel, err, sizeof err) < 0) {
        /* Unreachable with a state that apply or a snapshot checked: "!x,x" matches nothing. */
        selector_parse("!x,x", &pl->sel, err, sizeof err);
    }
}

size_t plan_iteration_ntasks(const struct state *s, uint64_t iteration_id,
                             const struct st_update_list *out, size_t start)
{
    size_t n, busy = 0;
    const struct st_task_ref *refs = state_iteration_tasks(s, iteration_id, &n);
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t && !plan_pending(out, start, ST_TASK_REMOVED, t->id))
            busy++;
    }
    for (size_t i = start; i < out->n; i++)
        busy += out->v[i].type == ST_TASK_CREATED && out->v[i].ref == iteration_id;
    return busy;
}

bool plan_place_allows(const struct state *s, const struct plan_place *pl,
                       const struct st_worker *w, uint64_t iteration_id,
                       const struct st_update_list *out, size_t start)
{
    if (!pl)
        return true;
    if (pl->sel.n && !selector_matches(&pl->sel, w->labels))
        return false;
    if (!pl->max_workers)
        return true;
    return plan_iteration_ntasks(s, iteration_id, out, start) < pl->max_workers;
}

/* Whether an iteration is over once the updates in out since start apply: a task of it then
 * holds no slot. */
static bool iteration_over(const struct st_iteration *it, const struct st_update_list *out,
                           size_t start)
{
    return it->state != ST_ITER_ACTIVE || it->error ||
           plan_pending(out, start, ST_ITERATION_FINISHED, it->id) ||
           plan_pending(out, start, ST_ITERATION_FAILED, it->id) ||
           plan_pending(out, start, ST_ITERATION_GC, it->id);
}

uint32_t plan_worker_slots_used(const struct state *s, uint64_t worker_id,
                                const struct st_update_list *out, size_t start)
{
    uint32_t used = 0;
    size_t n;
    const struct st_task_ref *refs = state_worker_tasks(s, worker_id, &n);
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (!t || t->worker_id != worker_id || t->finished ||
            plan_pending(out, start, ST_TASK_FINISHED, t->id) ||
            plan_pending(out, start, ST_TASK_REMOVED, t->id))
            continue;
        const struct st_iteration *it = state_iteration(s, t->iteration_id);
        if (it && !iteration_over(it, out, start))
            used++;
    }
    for (size_t i = start; i < out->n; i++)
        used += out->v[i].type == ST_TASK_CREATED && out->v[i].ref2 == worker_id;
    return used;
}

bool plan_rank_before(const struct plan_rank *a, const struct plan_rank *b)
{
    if (a->short_of_min != b->short_of_min)
        return a->short_of_min;
    if (a->weight != b->weight)
        return a->weight > b->weight;
    if (a->job_id != b->job_id)
        return a->job_id < b->job_id;
    return a->iteration_id < b->iteration_id;
}

/* The rank of iteration_id under pl, its tasks counted as in plan_iteration_ntasks. */
static struct plan_rank rank_of(const struct state *s, const struct plan_place *pl,
                                uint64_t iteration_id, const struct st_update_list *out,
                                size_t start)
{
    struct plan_rank r = {
        .weight = pl->weight,
        .job_id = pl->job_id,
        .iteration_id = iteration_id,
    };
    r.short_of_min =
        pl->min_workers && plan_iteration_ntasks(s, iteration_id, out, start) < pl->min_workers;
    return r;
}

bool plan_iteration_wants(const struct state *s, const struct st_iteration *it,
                          const struct st_worker *w, const char *host,
                          const struct st_update_list *out, size_t start, struct plan_rank *rank)
{
    if (iteration_over(it, out, start))
        return false;
    /* Nobody reads an iteration without clients: a worker does not start producing for it (a
     * reader that comes back brings the tasks with the next heartbeats). */
    if (state_iteration_clients(s, it->id) == 0 && !state_save_running(s, it->id))
        return false;
    /* A local job's tasks run only on its readers' hosts. */
    const struct st_job *j = state_job(s, it->job_id);
    if (!plan_worker_serves(s, j, it->id, host, out, start))
        return false;
    struct plan_place place;
    plan_place_of(j, &place);
    if (!plan_place_allows(s, &place, w, it->id, out, start))
        return false;
    if (rank)
        *rank = rank_of(s, &place, it->id, out, start);
    return true;
}

/* How many iterations of the state that want a task on worker w, and have none there, rank
 * before rank: they take w's free slots first. */
static size_t ranked_ahead(const struct state *s, const struct st_worker *w,
                           const struct plan_rank *rank, const struct st_update_list *out,
                           size_t start)
{
    size_t ahead = 0;
    for (size_t i = 0; i < s->niterations; i++) {
        const struct st_iteration *it = &s->iterations[i];
        struct plan_rank r;
        if (it->id == rank->iteration_id ||
            !plan_iteration_wants(s, it, w, w->host_id, out, start, &r) ||
            worker_has_task_of(s, w->id, it->id, out, start))
            continue;
        ahead += plan_rank_before(&r, rank);
    }
    return ahead;
}

int plan_tasks_for_iteration(const struct state *s, uint64_t iteration_id, const char *local_host,
                             const struct plan_place *pl, uint64_t *next_task,
                             struct st_update_list *out)
{
    size_t start = out->n;
    for (size_t i = 0; i < s->nworkers; i++) {
        const struct st_worker *w = &s->workers[i];
        if (w->draining)
            continue;
        if (local_host && (strcmp(w->host_id, local_host) != 0 ||
                           worker_has_task_of(s, w->id, iteration_id, out, 0)))
            continue;
        if (!plan_place_allows(s, pl, w, iteration_id, out, start))
            continue;
        /* A job's task takes one of the worker's free slots, and only one that no iteration
         * ranked before it wants. A save (pl NULL) is not held back by slots. */
        if (pl && w->task_slots) {
            uint32_t used = plan_worker_slots_used(s, w->id, out, 0);
            struct plan_rank rank = rank_of(s, pl, iteration_id, out, start);
            if (used >= w->task_slots || ranked_ahead(s, w, &rank, out, 0) >= w->task_slots - used)
                continue;
        }
        struct st_update *u = plan_push(out, ST_TASK_CREATED, (*next_task)++);
        if (!u)
            return SLUICE_ERR_NOMEM;
        u->ref = iteration_id;
        u->ref2 = w->id;
    }
    return 0;
}

/* A candidate for a slot of one worker: the iteration and its rank. */
struct slot_candidate {
    uint64_t iteration_id;
    struct plan_rank rank;
};

static int candidate_cmp(const void *a, const void *b)
{
    const struct slot_candidate *x = a, *y = b;
    return plan_rank_before(&x->rank, &y->rank) ? -1 : plan_rank_before(&y->rank, &x->rank);
}

int plan_fill_worker(const struct state *s, const struct st_worker *w, uint64_t worker_id,
                     const char *host, const uint64_t *have, size_t nhave, uint64_t *next_task,
                     struct st_update_list *out, size_t start)
{
    /* A full worker takes nothing: no need to look for candidates. */
    uint32_t used = w->task_slots ? plan_worker_slots_used(s, worker_id, out, start) : 0;
    if (w->task_slots && used >= w->task_slots)
        return 0;
    struct slot_candidate *cand = malloc((s->niterations ? s->niterations : 1) * sizeof *cand);
    if (!cand)
        return SLUICE_ERR_NOMEM;
    size_t ncand = 0;
    for (size_t i = 0; i < s->niterations; i++) {
        const struct st_iteration *it = &s->iterations[i];
        if (nhave > 0 && bsearch(&it->id, have, nhave, sizeof *have, plan_cmp_u64))
            continue;
        struct plan_rank r;
        if (!plan_iteration_wants(s, it, w, host, out, start, &r))
            continue;
        cand[ncand].iteration_id = it->id;
        cand[ncand++].rank = r;
    }
    /* Without slots every candidate gets a task, in the state's order, as before slots. */
    if (w->task_slots)
        qsort(cand, ncand, sizeof *cand, candidate_cmp);
    for (size_t i = 0; i < ncand; i++) {
        if (w->task_slots && used >= w->task_slots)
            break;
        struct st_update *u = plan_push(out, ST_TASK_CREATED, (*next_task)++);
        if (!u) {
            free(cand);
            return SLUICE_ERR_NOMEM;
        }
        u->ref = cand[i].iteration_id;
        u->ref2 = worker_id;
        used++;
    }
    free(cand);
    return 0;
}

/* Appends to buf at *at (len bytes in all), keeping it terminated. */
static void append(char *buf, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
    if (*at >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    if (n > 0)
        *at = *at + (size_t)n < len ? *at + (size_t)n : len - 1;
}

size_t plan_iteration_waiting(const struct state *s, uint64_t iteration_id, char *buf, size_t len)
{
    if (len)
        buf[0] = '\0';
    const struct st_iteration *it = state_iteration(s, iteration_id);
    const struct st_job *j = it ? state_job(s, it->job_id) : NULL;
    if (!j || it->state != ST_ITER_ACTIVE || it->error)
        return 0;
    static const struct st_update_list none;
    /* A job with tasks is waiting only while it has fewer than its minimum, for the workers
     * that have none of its tasks. */
    size_t have = plan_iteration_ntasks(s, iteration_id, &none, 0);
    if (have > 0 && !(j->min_workers && have < j->min_workers))
        return 0;
    struct plan_place place;
    plan_place_of(j, &place);
    size_t nmatch = 0;
    uint32_t slots = 0, taken = 0, heavier = 0;
    for (size_t i = 0; i < s->nworkers; i++) {
        const struct st_worker *w = &s->workers[i];
        if (w->draining || (place.sel.n && !selector_matches(&place.sel, w->labels)) ||
            (have > 0 && worker_has_task_of(s, w->id, iteration_id, &none, 0)))
            continue;
        nmatch++;
        /* A matching worker without a limit, or with a free slot, places the job's task with
         * its next heartbeat: nothing to explain. */
        if (!w->task_slots)
            return 0;
        uint32_t used = plan_worker_slots_used(s, w->id, &none, 0);
        if (used < w->task_slots)
            return 0;
        slots += w->task_slots;
        /* Who holds them: heavier jobs, or jobs that got them before this one. */
        uint32_t heavy = 0;
        size_t n;
        const struct st_task_ref *refs = state_worker_tasks(s, w->id, &n);
        for (size_t k = 0; k < n; k++) {
            const struct st_task *t = state_task(s, refs[k].task_id);
            const struct st_iteration *ti = t ? state_iteration(s, t->iteration_id) : NULL;
            if (!t || t->worker_id != w->id || t->finished || !ti || iteration_over(ti, &none, 0))
                continue;
            const struct st_job *tj = state_job(s, ti->job_id);
            heavy += tj && tj->weight > j->weight;
        }
        taken += w->task_slots;
        heavier += heavy < w->task_slots ? heavy : w->task_slots;
    }
    size_t at = 0;
    if (have > 0) {
        /* Short of its minimum. */
        if (j->selector[0])
            append(buf, len, &at, "waiting for a worker matching %s", j->selector);
        else
            append(buf, len, &at, "waiting for a worker");
        append(buf, len, &at, " (%zu of %" PRIu32 " minimum workers): ", have, j->min_workers);
        if (nmatch == 0) {
            append(buf, len, &at, "no other worker matches");
            return at;
        }
    } else if (nmatch == 0) {
        /* Without a selector, no worker at all: readers say so themselves. */
        if (!j->selector[0])
            return 0;
        append(buf, len, &at, "waiting for a worker matching %s (none of %zu worker%s match%s)",
               j->selector, s->nworkers, s->nworkers == 1 ? "" : "s", s->nworkers == 1 ? "es" : "");
        return at;
    } else if (j->selector[0]) {
        append(buf, len, &at, "waiting for a worker matching %s: ", j->selector);
    } else {
        append(buf, len, &at, "waiting for a worker: ");
    }
    append(buf, len, &at, "%" PRIu32 " of %" PRIu32 " task slot%s taken by ", taken, slots,
           slots == 1 ? "" : "s");
    if (heavier == taken)
        append(buf, len, &at, "heavier jobs");
    else if (heavier == 0)
        append(buf, len, &at, "jobs that started earlier");
    else
        append(buf, len, &at, "heavier jobs (%" PRIu32 ") and jobs that started earlier", heavier);
    return at;
}
