/* The dispatcher's timer: evictions of silent workers and clients, re-leasing of stalled
 * splits, and garbage collection of idle iterations. */

#include "plan.h"
#include "server_internal.h"
#include "replica.h"

/* ---- the timer: evictions and garbage collection --------------------------------------------- */

static void tick_done(struct dispatcher *d, int status, void *ctx)
{
    (void)d;
    (void)status;
    (void)ctx;
}

static bool expired(struct soft_table *t, uint64_t id, uint64_t now, uint32_t timeout)
{
    struct soft *e = dispatcher_soft_find(t, id, NULL);
    if (!e) {
        dispatcher_soft_set(t, id, now);
        return false;
    }
    return now - e->t > timeout;
}

/* Whether id's connection closed more than grace ms ago (UINT32_MAX: never) with no heartbeat
 * since. */
static bool gone_past(struct soft_table *gone, uint64_t id, uint64_t now, uint32_t grace)
{
    const struct soft *e = grace == UINT32_MAX ? NULL : dispatcher_soft_find(gone, id, NULL);
    return e && now - e->t > grace;
}

/* Deletes soft entries whose id the state no longer knows. */
static void soft_prune(struct soft_table *t, const struct state *s,
                       bool (*alive)(const struct state *, uint64_t))
{
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (alive(s, t->v[i].id))
            t->v[k++] = t->v[i];
    }
    t->n = k;
}

static bool worker_alive(const struct state *s, uint64_t id)
{
    return state_worker(s, id) != NULL;
}

static bool client_alive(const struct state *s, uint64_t id)
{
    return state_client(s, id) != NULL;
}

static bool client_known(void *user, uint64_t id)
{
    return state_client(user, id) != NULL;
}

static bool task_alive(const struct state *s, uint64_t id)
{
    return state_task(s, id) != NULL;
}

static bool iteration_active(const struct state *s, uint64_t id)
{
    const struct st_iteration *it = state_iteration(s, id);
    return it && it->state == ST_ITER_ACTIVE;
}

static bool iteration_known(void *user, uint64_t id)
{
    return iteration_active(user, id);
}

static bool iteration_idle(const struct state *s, uint64_t id)
{
    const struct st_iteration *it = state_iteration(s, id);
    /* A running save's iteration has no clients, yet its tasks are busy writing chunks. */
    return it && it->state != ST_ITER_GC && state_iteration_clients(s, id) == 0 &&
           !state_save_running(s, id);
}

/* A consumer's heartbeats this long after a task settled were sent after the task's last reply
 * reached it (the second of two, also when its process was stopped meanwhile), so they report
 * whatever it received of the task's splits. */
#define CONSUMER_REPORT_MARGIN_MS 1000

/* Room for the ids of up to n rows. The timer collects the ids it acts on before acting,
 * because every commit changes the tables it walks. */
static uint64_t *id_buffer(size_t n, size_t *count)
{
    *count = 0;
    return malloc((n ? n : 1) * sizeof(uint64_t));
}

/* A tick later than this past its interval means the dispatcher itself was away. */
#define TICK_ABSENCE_MS 500

/* Adds away to every time in t (a peer's last heartbeat, an iteration's idle start), up to now. */
static void credit_absence(struct soft_table *t, uint64_t away, uint64_t now)
{
    for (size_t i = 0; i < t->n; i++)
        t->v[i].t = t->v[i].t + away < now ? t->v[i].t + away : now;
}

/* The dispatcher's own absence: when its loop did not run the tick for much longer than the
 * interval (its process stopped or starved of CPU, a long stretch of work on the loop), the
 * heartbeats peers sent meanwhile still wait unread in its sockets, and this tick, which runs
 * before they are read, would find every peer silent. The time it was away is credited to every
 * age it times out on, so nobody is evicted, released or collected for the dispatcher's own
 * silence; a peer that is really gone is found out that much later. */
static void note_absence(struct dispatcher *d, uint64_t now, uint64_t interval)
{
    uint64_t last = d->last_tick_ms;
    d->last_tick_ms = now;
    if (last == 0 || now <= last + interval + TICK_ABSENCE_MS)
        return;
    uint64_t away = now - last - interval;
    log_warn("the dispatcher did not run for %" PRIu64 " ms (stopped, or starved of CPU): "
             "workers' and clients' silence meanwhile is not counted against them",
             away);
    credit_absence(&d->worker_seen, away, now);
    credit_absence(&d->worker_gone, away, now);
    credit_absence(&d->client_seen, away, now);
    credit_absence(&d->client_gone, away, now);
    credit_absence(&d->idle_since, away, now);
}

void dispatcher_on_tick(uv_timer_t *timer)
{
    struct dispatcher *d = timer->data;
    if (d->fatal || d->closing)
        return;
    /* A replica that does not lead plans nothing: the leader evicts and collects. */
    if (d->replica && !replica_serving(d->replica))
        return;
    uint64_t now = uv_now(d->loop);
    note_absence(d, now, uv_timer_get_repeat(timer));
    char err[SLUICE_ERRMSG_SIZE];
    size_t n;
    uint64_t *ids;

    dispatcher_history_sample(d);
    soft_prune(&d->worker_seen, &d->st, worker_alive);
    soft_prune(&d->worker_conn, &d->st, worker_alive);
    soft_prune(&d->worker_gone, &d->st, worker_alive);
    soft_prune(&d->client_seen, &d->st, client_alive);
    soft_prune(&d->client_seen_before, &d->st, client_alive);
    soft_prune(&d->client_conn, &d->st, client_alive);
    soft_prune(&d->client_gone, &d->st, client_alive);
    soft_prune(&d->client_reported, &d->st, client_alive);
    soft_prune(&d->idle_since, &d->st, iteration_idle);
    soft_prune(&d->settled_since, &d->st, task_alive);
    soft_prune(&d->leased_at, &d->st, task_alive);
    soft_prune(&d->lease_below, &d->st, iteration_active);
    for (size_t i = 0; i < d->relet.n;) {
        uint64_t iteration = relet_iteration_at(&d->relet, i);
        const struct st_iteration *it = state_iteration(&d->st, iteration);
        if (!it || it->state != ST_ITER_ACTIVE) {
            relet_forget(&d->relet, iteration);
            continue;
        }
        (void)relet_prune(&d->relet, iteration, &it->held); /* out of memory: next time */
        i++;
    }
    capcache_prune(&d->caps, client_known, &d->st);
    capcache_prune_iterations(&d->caps, iteration_known, &d->st);
    if (d->jt) {
        /* Touches that became durable: such a worker's heartbeat no longer waits for them. */
        uint64_t durable = journal_thread_durable_seq(d->jt);
        size_t k = 0;
        for (size_t i = 0; i < d->worker_touched.n; i++) {
            if (d->worker_touched.v[i].t > durable)
                d->worker_touched.v[k++] = d->worker_touched.v[i];
        }
        d->worker_touched.n = k;
    }
    for (size_t i = 0; i < d->cov.n;) {
        const struct st_iteration *it = state_iteration(&d->st, d->cov.v[i].iteration);
        if (it && it->state == ST_ITER_ACTIVE) {
            i++;
            continue;
        }
        coverage_forget_iteration(&d->cov, d->cov.v[i].iteration);
    }

    /* A task whose consumers fetched everything it produced, yet still holds splits nobody
     * reported received after a grace of several heartbeats, lost a reply on the way (a
     * connection dropped mid-reply): its splits are leased again, and consumers take only the
     * elements they miss. Only once every consumer of the iteration was heard from since: one
     * that was not (a stopped process, or a dead one not released yet) may hold elements of
     * those splits it has not reported, which another consumer would then get too. */
    uint32_t grace = dispatcher_reissue_grace_ms(d);
    if ((ids = id_buffer(d->settled_since.n, &n))) {
        for (size_t i = 0; i < d->settled_since.n; i++) {
            const struct soft *e = &d->settled_since.v[i];
            const struct st_task *t = state_task(&d->st, e->id);
            const struct soft *l = dispatcher_soft_find(&d->leased_at, e->id, NULL);
            if (t && t->leased.n > 0 && now - e->t > grace && (!l || now - l->t > grace) &&
                dispatcher_consumers_heard_since(d, t->iteration_id,
                                                 e->t + CONSUMER_REPORT_MARGIN_MS))
                ids[n++] = e->id;
        }
        for (size_t i = 0; i < n; i++) {
            const struct st_task *t = state_task(&d->st, ids[i]);
            log_warn("task %" PRIu64 ": %zu splits produced and fetched were not reported "
                     "received within %" PRIu32 " ms: leasing them again",
                     ids[i], t ? t->leased.n : 0, grace);
            dispatcher_soft_del(&d->settled_since, ids[i]);
            if (plan_return_task_splits(&d->st, ids[i], &d->ups, err, sizeof err) < 0) {
                log_warn("returning the splits of task %" PRIu64 ": %s", ids[i], err);
                continue;
            }
            dispatcher_commit(d, &d->ups, tick_done, NULL);
        }
        free(ids);
    }

    /* Workers silent past their timeout, and workers whose connection closed (their process
     * died) that have not come back within the grace. */
    if ((ids = id_buffer(d->st.nworkers, &n))) {
        for (size_t i = 0; i < d->st.nworkers; i++) {
            uint64_t id = d->st.workers[i].id;
            if (expired(&d->worker_seen, id, now, d->worker_timeout_ms) ||
                gone_past(&d->worker_gone, id, now, d->worker_grace_ms))
                ids[n++] = id;
        }
        for (size_t i = 0; i < n; i++) {
            const struct st_worker *w = state_worker(&d->st, ids[i]);
            if (expired(&d->worker_seen, ids[i], now, d->worker_timeout_ms))
                log_warn("worker %" PRIu64 " at %s sent no heartbeat for %" PRIu32
                         " ms: removing it",
                         ids[i], w ? w->address : "?", d->worker_timeout_ms);
            else
                log_warn("worker %" PRIu64 " at %s: its connection closed and it sent no "
                         "heartbeat for %" PRIu32 " ms since: removing it",
                         ids[i], w ? w->address : "?", d->worker_grace_ms);
            if (plan_remove_worker(&d->st, ids[i], &d->ups, err, sizeof err) < 0) {
                log_warn("removing worker %" PRIu64 ": %s", ids[i], err);
                continue;
            }
            dispatcher_soft_del(&d->worker_seen, ids[i]);
            dispatcher_soft_del(&d->worker_conn, ids[i]);
            dispatcher_soft_del(&d->worker_gone, ids[i]);
            dispatcher_commit(d, &d->ups, tick_done, NULL);
        }
        free(ids);
    }

    /* Clients silent past their timeout, and clients whose connection closed (their process
     * died, or closed it) that have not come back within the grace. */
    if ((ids = id_buffer(d->st.nclients, &n))) {
        for (size_t i = 0; i < d->st.nclients; i++) {
            uint64_t id = d->st.clients[i].id;
            if (expired(&d->client_seen, id, now, d->client_timeout_ms) ||
                gone_past(&d->client_gone, id, now, d->client_grace_ms))
                ids[n++] = id;
        }
        for (size_t i = 0; i < n; i++) {
            if (expired(&d->client_seen, ids[i], now, d->client_timeout_ms))
                log_info("client %" PRIu64 " sent no heartbeat for %" PRIu32 " ms: releasing it",
                         ids[i], d->client_timeout_ms);
            else
                log_info("client %" PRIu64 ": its connection closed and it sent no heartbeat for "
                         "%" PRIu32 " ms since: releasing it",
                         ids[i], d->client_grace_ms);
            if (plan_release_client(&d->st, ids[i], &d->ups, err, sizeof err) < 0) {
                log_warn("releasing client %" PRIu64 ": %s", ids[i], err);
                continue;
            }
            dispatcher_soft_del(&d->client_seen, ids[i]);
            dispatcher_soft_del(&d->client_seen_before, ids[i]);
            dispatcher_soft_del(&d->client_conn, ids[i]);
            dispatcher_soft_del(&d->client_gone, ids[i]);
            dispatcher_commit(d, &d->ups, tick_done, NULL);
        }
        free(ids);
    }

    /* An iteration idle since the last tick that saw it so gets collected after the timeout;
     * the clock restarts whenever it has clients again (pruned above). */
    if ((ids = id_buffer(d->st.niterations, &n))) {
        for (size_t i = 0; i < d->st.niterations; i++) {
            const struct st_iteration *it = &d->st.iterations[i];
            if (iteration_idle(&d->st, it->id) &&
                expired(&d->idle_since, it->id, now, d->gc_timeout_ms))
                ids[n++] = it->id;
        }
        for (size_t i = 0; i < n; i++) {
            if (plan_gc_iteration(&d->st, ids[i], &d->ups, err, sizeof err) < 0) {
                log_warn("collecting iteration %" PRIu64 ": %s", ids[i], err);
                continue;
            }
            dispatcher_soft_del(&d->idle_since, ids[i]);
            dispatcher_commit(d, &d->ups, tick_done, NULL);
        }
        free(ids);
    }

    dispatcher_saves_tick(d);
    observe_tick(d->obs, &d->st, now);
}
