/* Planning splits (plan.h): a task's GetSplits (handlers_workers.c), consumers' reports of
 * splits received in full or lost (handlers_clients.c), leases handed back after a lost reply
 * (tick.c). */

#include "plan_internal.h"

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

/* Sets l to the seqs of v[0, n) that are in `in` or keys of held (may be NULL) and not in
 * exclude (may be NULL): sorted and once each, as every list of an update must be. Reports from
 * the network may repeat seqs, name seqs that were never leased, or arrive in any order. Returns
 * 0 or SLUICE_ERR_NOMEM. */
static int seq_assign_members(struct st_seq_list *l, const uint64_t *v, size_t n,
                              const struct st_seq_list *in, const struct u64map *held,
                              const struct st_seq_list *exclude)
{
    if (state_seq_assign(l, v, n) < 0)
        return SLUICE_ERR_NOMEM;
    qsort(l->v, l->n, sizeof *l->v, plan_cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        uint64_t seq = l->v[i];
        bool member = state_seq_contains(in, seq) || (held && u64map_get(held, seq, NULL));
        if ((k > 0 && l->v[k - 1] == seq) || !member ||
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
    struct st_update *u = plan_push(out, type, 0);
    if (!u)
        return SLUICE_ERR_NOMEM;
    const struct st_seq_list *exclude = exclude_at == NO_UPDATE ? NULL : &out->v[exclude_at].seqs;
    u->ref = t->iteration_id;
    u->ref2 = t->id;
    if (seq_assign_members(&u->seqs, v, n, &t->leased, NULL, exclude) < 0)
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
    /* Guided self-scheduling (req->share): sixteen shards on eight workers whose lease queues
     * hold four splits each are spread over the eight instead of going to the first four to ask,
     * and the end of an epoch is shared the same way. */
    size_t ntasks = 0;
    if (req->share)
        (void)state_iteration_tasks(s, it->id, &ntasks);
    if (ntasks > 1 && it->split_total != UINT64_MAX) {
        /* The splits not finished (held by any task, or still to lease) divided evenly, less
         * what this task holds after this request's reports. */
        uint64_t gone = done + back;
        uint64_t holds = t->leased.n > gone ? t->leased.n - gone : 0;
        uint64_t all = left + (req->pool_held ? 0 : it->pool.n) +
                       (it->splits_leased > gone ? it->splits_leased - gone : 0);
        uint64_t share = all / ntasks + (all % ntasks != 0);
        share = share > holds ? share - holds : 0;
        if (share < max)
            max = (uint32_t)share;
    }
    uint64_t from_pool = req->pool_held ? 0 : it->pool.n < max ? it->pool.n : max;
    uint64_t from_cursor = max - from_pool < left ? max - from_pool : left;
    /* A deterministic reader's window: nothing from the cursor past it (the pool's splits, which
     * lie below the cursor, are leased whatever it says). */
    if (lease_below <= it->split_cursor)
        from_cursor = 0;
    else if (lease_below - it->split_cursor < from_cursor)
        from_cursor = lease_below - it->split_cursor;
    if (from_pool + from_cursor > 0) {
        if (!(u = plan_push(out, ST_SPLITS_LEASED, request_seq)))
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
    /* One update for all of them, whichever task holds each (found by the held index) or in the
     * pool: a heartbeat's coverage is one journal record, not one per task. */
    struct st_update *u = plan_push(out, ST_SPLITS_FINISHED, 0);
    if (!u || seq_assign_members(&u->seqs, seqs, n, &it->pool, &it->held, NULL) < 0) {
        if (u)
            state_list_truncate(out, out->n - 1);
        return NOMEM_MSG(err, errlen);
    }
    u->ref = iteration_id;
    if (u->seqs.n == 0)
        state_list_truncate(out, out->n - 1);
    return 0;
}

int plan_return_task_splits(const struct state *s, uint64_t task_id, struct st_update_list *out,
                            char *err, size_t errlen)
{
    const struct st_task *t = state_task(s, task_id);
    if (!t)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "task %" PRIu64 " not found", task_id);
    size_t start = out->n;
    if (plan_push_leases_back(t, out) < 0) {
        state_list_truncate(out, start);
        return NOMEM_MSG(err, errlen);
    }
    return 0;
}

int plan_splits_redo(const struct state *s, uint64_t iteration_id, const uint64_t *seqs,
                     const uint64_t *tasks, size_t n, struct st_update_list *out, char *err,
                     size_t errlen)
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
        uint64_t holder;
        if (tasks && (!u64map_get(&it->held, seqs[k], &holder) || holder != tasks[k]))
            continue;
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
