/* Planning clients' heartbeats and releases (plan.h; handlers_clients.c and tick.c call
 * them). */

#include "plan_internal.h"

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
    struct st_update *u = plan_push(out, ST_ROUNDS_GRANTED, 0);
    if (!u)
        return NOMEM_MSG(err, errlen);
    u->ref = it->id;
    u->ref2 = round + window;
    *granted_out = u->ref2;
    return 0;
}

/* A local job's tasks on a host serve only that host's readers: when the last of them leaves
 * (client c, released by the updates since start), the tasks go (their leases back to the pool),
 * so no split waits on a task nobody reads. A reader coming back brings them again. */
static int release_local_tasks(const struct state *s, const struct st_client *c,
                               struct st_update_list *out, size_t start)
{
    const struct st_iteration *it = state_iteration(s, c->iteration_id);
    const struct st_job *j = it ? state_job(s, it->job_id) : NULL;
    if (!j || j->target_workers != SLUICE_TARGET_WORKERS_LOCAL || it->state != ST_ITER_ACTIVE ||
        !c->host_id[0])
        return 0;
    for (size_t i = 0; i < s->nclients; i++) {
        const struct st_client *o = &s->clients[i];
        if (o->id != c->id && o->iteration_id == it->id && strcmp(o->host_id, c->host_id) == 0)
            return 0;
    }
    size_t nrefs;
    const struct st_task_ref *refs = state_iteration_tasks(s, it->id, &nrefs);
    for (size_t i = 0; i < nrefs; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        const struct st_worker *w = t ? state_worker(s, t->worker_id) : NULL;
        if (!w || strcmp(w->host_id, c->host_id) != 0)
            continue;
        if (plan_push_task_removal(t, out) < 0)
            return SLUICE_ERR_NOMEM;
    }
    return plan_finish_touched(s, out, start);
}

int plan_release_client(const struct state *s, uint64_t client_id, struct st_update_list *out,
                        char *err, size_t errlen)
{
    const struct st_client *c = state_client(s, client_id);
    if (!c)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "client %" PRIu64 " not found",
                       client_id);
    size_t start = out->n;
    if (!plan_push(out, ST_CLIENT_RELEASED, client_id) ||
        release_local_tasks(s, c, out, start) < 0) {
        state_list_truncate(out, start);
        return NOMEM_MSG(err, errlen);
    }
    return 0;
}
