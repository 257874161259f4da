/* Planning workers' heartbeats, removals and task failures (plan.h; handlers_workers.c and
 * tick.c call them). */

#include "plan_internal.h"

#include "common/hostid.h"
#include "common/names.h"

/* Appends the removal of worker w: leases returned, tasks removed, the worker removed. */
static int plan_remove_worker_updates(const struct state *s, const struct st_worker *w,
                                      struct st_update_list *out)
{
    size_t nrefs;
    const struct st_task_ref *refs = state_worker_tasks(s, w->id, &nrefs);
    for (size_t i = 0; i < nrefs; i++) {
        const struct st_task *t = state_task(s, refs[i].task_id);
        if (t->worker_id != w->id)
            continue;
        if (plan_push_task_removal(t, out) < 0)
            return SLUICE_ERR_NOMEM;
    }
    if (!plan_push(out, ST_WORKER_REMOVED, w->id))
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
    if (plan_remove_worker_updates(s, w, out) < 0 || plan_finish_touched(s, out, start) < 0 ||
        plan_round_schedules(s, out, start) < 0) {
        state_list_truncate(out, start);
        return NOMEM_MSG(err, errlen);
    }
    return 0;
}

int plan_tasks_failed(const struct state *s, uint64_t worker_id,
                      const struct plan_task_failure *failed, size_t nfailed,
                      struct st_update_list *out, char *err, size_t errlen)
{
    size_t start = out->n;
    for (size_t i = 0; i < nfailed; i++) {
        const struct st_task *t = state_task(s, failed[i].task_id);
        const struct st_iteration *it = t ? state_iteration(s, t->iteration_id) : NULL;
        /* The updates already in out (the same heartbeat's) count as applied: a task they
         * finish or remove, or an iteration they finish, fail or collect, is left alone, so the
         * list always applies whatever a worker reports. */
        if (!it || t->worker_id != worker_id || t->finished || it->state != ST_ITER_ACTIVE ||
            it->error || plan_pending(out, 0, ST_TASK_FINISHED, t->id) ||
            plan_pending(out, 0, ST_TASK_REMOVED, t->id) ||
            plan_pending(out, 0, ST_ITERATION_FINISHED, it->id) ||
            plan_pending(out, 0, ST_ITERATION_FAILED, it->id) ||
            plan_pending(out, 0, ST_ITERATION_GC, it->id))
            continue;
        struct st_update *u = plan_push(out, ST_ITERATION_FAILED, it->id);
        char msg[PLAN_ERROR_MAX + 1], *esc = name_escape_dup(failed[i].msg ? failed[i].msg : "");
        if (!u || !esc) {
            free(esc);
            state_list_truncate(out, start);
            return NOMEM_MSG(err, errlen);
        }
        /* Cut at a character: the escaped text is ASCII escapes and whole UTF-8 sequences. */
        int n =
            snprintf(msg, sizeof msg, "task %" PRIu64 ": %s", t->id, esc[0] ? esc : "task failed");
        free(esc);
        if (n > PLAN_ERROR_MAX) {
            size_t k = PLAN_ERROR_MAX;
            while (k > 0 && ((unsigned char)msg[k] & 0xc0) == 0x80)
                k--;
            msg[k] = '\0';
        }
        u->text = strdup(msg);
        if (!u->text) {
            state_list_truncate(out, start);
            return NOMEM_MSG(err, errlen);
        }
    }
    return 0;
}

int plan_worker_heartbeat(const struct state *s, const struct plan_heartbeat_request *req,
                          uint64_t *worker_out, struct st_update_list *out, char *err,
                          size_t errlen)
{
    const char *address = req->address;
    const char *host = req->host ? req->host : "";
    if (!address || !*address)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "worker address is empty");
    int rc = name_check("worker address", address, NAME_ADDR_MAX, err, errlen);
    if (rc < 0)
        return rc;
    const struct st_worker *w = state_worker_by_address(s, address);
    bool known = w && w->incarnation == req->incarnation;
    /* The host is recorded at registration; a known worker's later heartbeats repeat it. */
    if (!known && host[0] && (rc = hostid_check("worker host id", host, err, errlen)) < 0)
        return rc;
    /* The worker as its tasks are placed: its row, or the row its registration will make. */
    static const struct st_worker blank;
    struct st_worker me = blank;
    if (known) {
        me = *w;
    } else {
        char why[SLUICE_ERRMSG_SIZE];
        if (labels_canonical(req->labels, req->nlabels, me.labels, sizeof me.labels, why,
                             sizeof why) < 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "worker at %s: labels: %s", address,
                           why);
        if (req->task_slots > ST_TASK_SLOTS_MAX)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "worker at %s: %" PRIu32 " task slots, more than %d", address,
                           req->task_slots, ST_TASK_SLOTS_MAX);
        me.task_slots = req->task_slots;
    }
    /* Identity first, before anything is planned: the incarnation is public (status lists it),
     * the secret is not. */
    if (!req->unkeyed) {
        if (known && !state_worker_key_ok(w, req->key, req->key_len))
            return err_set(err, errlen, SLUICE_ERR_DENIED,
                           "worker at %s: the worker key does not match its registration", address);
        if (!known && req->key_len != ST_KEY_LEN)
            return err_set(err, errlen, SLUICE_ERR_DENIED,
                           "worker at %s: a worker key of %d bytes is required to register",
                           address, ST_KEY_LEN);
    }
    if (w && !known && !req->may_replace)
        return err_set(err, errlen, SLUICE_ERR_DENIED,
                       "address %s is held by worker %" PRIu64 ", which is still heartbeating",
                       address, w->id);
    size_t start = out->n;
    uint64_t *have = NULL; /* iterations the worker has a task in, sorted */
    size_t nhave = 0;
    struct st_update *u;
    uint64_t wid;
    if (known) {
        wid = w->id;
    } else {
        /* Another incarnation at this address is a restarted process: what the old one held
         * is gone with it. */
        if (w && plan_remove_worker_updates(s, w, out) < 0)
            goto nomem;
        wid = s->next_worker_id;
        if (!(u = plan_push(out, ST_WORKER_REGISTERED, wid)))
            goto nomem;
        memcpy(u->address, address, strlen(address) + 1);
        u->incarnation = req->incarnation;
        memcpy(u->host_id, host, strlen(host) + 1);
        if (me.labels[0] && !(u->labels = strdup(me.labels)))
            goto nomem;
        u->task_slots = me.task_slots;
        if (!req->unkeyed && req->key_len == ST_KEY_LEN) {
            u->key.set = true;
            memcpy(u->key.b, req->key, ST_KEY_LEN);
        }
    }

    if (known) {
        for (size_t i = 0; i < req->nfinished; i++) {
            const struct st_task *t = state_task(s, req->finished[i]);
            if (!t || t->worker_id != wid || t->finished ||
                plan_pending(out, start, ST_TASK_FINISHED, t->id))
                continue;
            if (plan_push_leases_back(t, out) < 0 || !plan_push(out, ST_TASK_FINISHED, t->id))
                goto nomem;
        }
    }

    bool was_draining = known && w->draining;
    if (req->draining && !was_draining && !plan_push(out, ST_WORKER_DRAINING, wid))
        goto nomem;
    if (!req->draining && !was_draining) {
        if (known) {
            size_t nmine;
            const struct st_task_ref *mine = state_worker_tasks(s, wid, &nmine);
            have = malloc((nmine ? nmine : 1) * sizeof *have);
            if (!have)
                goto nomem;
            for (size_t i = 0; i < nmine; i++) {
                const struct st_task *t = state_task(s, mine[i].task_id);
                if (t)
                    have[nhave++] = t->iteration_id;
            }
            qsort(have, nhave, sizeof *have, plan_cmp_u64);
        }
        uint64_t next_task = s->next_task_id;
        if (plan_fill_worker(s, &me, wid, known ? w->host_id : host, have, nhave, &next_task, out,
                             start) < 0)
            goto nomem;
    }
    if (plan_finish_touched(s, out, start) < 0 || plan_round_schedules(s, out, start) < 0)
        goto nomem;
    free(have);
    *worker_out = wid;
    return 0;
nomem:
    free(have);
    state_list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}
