/* The iterator's loop thread, talking to the dispatcher: client heartbeats (tasks, rounds,
 * coverage of finished splits), verifying the job after the dispatcher restarts, and the loop
 * side of starting and closing a read. */

#include "iterator_internal.h"

#include "common/shm_region.h"
#include "common/shm_ring.h"

#include "common/mode.h"

/* ---- loop thread: heartbeats -------------------------------------------------------------- */

static void on_hb_timer(uv_timer_t *t);

void iter_schedule_heartbeat(struct sluice_iterator *it, uint64_t delay)
{
    if (!it->closing)
        uv_timer_start(&it->hb_timer, on_hb_timer, delay, 0);
}

/* Whether the read only waits for the dispatcher to say the iteration is finished. */
static bool end_phase(const struct sluice_iterator *it)
{
    return it->tasks.have_list && !it->tasks.iteration_finished && !tasks_active(&it->tasks);
}

/* Coordinated reads: how soon the read needs news from the dispatcher (UINT64_MAX: not
 * sooner than the regular heartbeat). At once when the round is not granted yet, or half the
 * rounds granted by the last reply are used up (the next grant then arrives before they run
 * out); within ITER_ROUND_POLL_MS while no task serves the round (waiting for a worker) or the
 * round's task is failing (its worker may be gone, and the dispatcher says so once it evicts
 * it). */
static uint64_t coord_delay(const struct sluice_iterator *it)
{
    const struct tasks_set *s = &it->tasks;
    if (!it->coordinated || !s->have_schedule)
        return UINT64_MAX;
    if (s->where == TASKS_ROUND_GRANT)
        return it->grant_stalled ? ITER_ROUND_POLL_MS : 0;
    uint64_t left = s->granted > s->round ? s->granted - s->round : 0;
    if (left < s->span - s->span / 2)
        return 0;
    if (s->where == TASKS_ROUND_SCHEDULE)
        return ITER_ROUND_POLL_MS;
    long i = s->where == TASKS_ROUND_TASK ? tasks_find(s, s->round_task) : -1;
    if (i >= 0 && (s->v[i].fail_streak > 0 || s->v[i].error))
        return ITER_ROUND_POLL_MS;
    return UINT64_MAX;
}

void iter_coord_news(struct sluice_iterator *it)
{
    uint64_t delay = coord_delay(it);
    if (delay == UINT64_MAX || it->closing || it->hb_busy)
        return;
    if (!uv_is_active((uv_handle_t *)&it->hb_timer) || uv_timer_get_due_in(&it->hb_timer) > delay)
        iter_schedule_heartbeat(it, delay);
}

/* The interval to the next heartbeat after a successful one. */
static uint64_t next_heartbeat(struct sluice_iterator *it)
{
    if (it->hb_soon) {
        it->hb_soon = false;
        return 0;
    }
    uint64_t coord = coord_delay(it);
    if (coord < it->heartbeat_ms)
        return coord;
    if (end_phase(it) && it->heartbeat_ms > ITER_END_POLL_MS)
        return ITER_END_POLL_MS;
    if (it->acks_due && it->heartbeat_ms > ITER_ACK_MS)
        return ITER_ACK_MS;
    return it->heartbeat_ms;
}

void iter_schedule_acks(struct sluice_iterator *it)
{
    if (!it->closing && !it->hb_busy &&
        (!uv_is_active((uv_handle_t *)&it->hb_timer) ||
         uv_timer_get_due_in(&it->hb_timer) > ITER_ACK_MS))
        iter_schedule_heartbeat(it, ITER_ACK_MS);
}

void iter_hasten_redo(struct sluice_iterator *it)
{
    if (it->closing || uv_now(&it->c->loop) < it->redo_calm_until)
        return;
    if (it->hb_busy)
        it->hb_soon = true;
    else if (!uv_is_active((uv_handle_t *)&it->hb_timer) || uv_timer_get_due_in(&it->hb_timer) > 0)
        iter_schedule_heartbeat(it, 0);
}

void iter_report_check(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    uint64_t wanted = it->report_wanted;
    uv_mutex_unlock(&it->mu);
    if (wanted == it->report_taken)
        return;
    /* The next heartbeat sent carries everything received so far (the one under way may not). */
    it->report_taken = wanted;
    it->report_target = it->hb_sent + 1;
    iter_hasten_redo(it);
}

/* A heartbeat (number hb_sent) was answered: the reports it carried are done. */
static void report_answered(struct sluice_iterator *it)
{
    if (it->report_target == 0 || it->hb_sent < it->report_target)
        return;
    it->report_target = 0;
    uv_mutex_lock(&it->mu);
    it->report_done = it->report_taken;
    uv_cond_broadcast(&it->cond);
    uv_mutex_unlock(&it->mu);
}

void iter_hasten_heartbeat(struct sluice_iterator *it)
{
    if (it->closing || it->hb_busy || !end_phase(it))
        return;
    if (!uv_is_active((uv_handle_t *)&it->hb_timer) ||
        uv_timer_get_due_in(&it->hb_timer) > ITER_END_POLL_MS)
        iter_schedule_heartbeat(it, 0);
}

/* How long one heartbeat (or status request) may take: a few intervals, at most the client's
 * timeout. */
static uint32_t heartbeat_timeout(const struct sluice_iterator *it)
{
    uint32_t t = it->heartbeat_ms * 3;
    if (t < 5000)
        t = 5000;
    if (it->c->timeout_ms && it->c->timeout_ms < t)
        t = it->c->timeout_ms;
    return t;
}

/* Whether this reader can tell alone that its read is complete: only a read of whole copies
 * (parallel_epochs and the static sharding modes, not in rounds), where each task's end of
 * sequence says how many elements its copy held and the reader checks it received exactly that
 * many (tasks_check_end). In splits (distributed_epoch) a task's end says nothing of the epoch: a
 * worker that drains ends its task and hands the splits it holds back to the pool, for a worker
 * that may join later; only the dispatcher knows every split was delivered (iteration_finished).
 * Coordinated reads follow the dispatcher's schedule, which only it can end. */
static bool complete_without_dispatcher(const struct sluice_iterator *it)
{
    return it->mode != SLUICE_DISTRIBUTED_EPOCH && !it->coordinated;
}

/* Whether the read can go on without the dispatcher: some listed task has not ended and its
 * last request to its worker did not fail. */
static bool progressing(const struct sluice_iterator *it)
{
    for (size_t i = 0; i < it->tasks.n; i++) {
        const struct tasks_task *t = &it->tasks.v[i];
        if (t->listed && !t->ended && t->fail_streak == 0)
            return true;
    }
    return false;
}

/* After a dispatcher call failed with status: a read of whole copies whose every task has ended
 * (and that has a task: a job still waiting for its first worker has read nothing) ends (no worker
 * can join while the dispatcher is away, and each copy was accounted for). Any other read waits for
 * the dispatcher to confirm its end (sluice_iterator_waiting says it waits for the dispatcher);
 * with a client timeout, a read that cannot go on without the dispatcher (every task ended, or its
 * worker failing too) fails once the dispatcher has been unreachable that long
 * (SLUICE_ERR_UNAVAILABLE), and never ends with what it happens to hold. Returns true when the read
 * ended or failed, false when the caller should try again later. */
static bool dispatcher_lost(struct sluice_iterator *it, int status, const char *msg)
{
    if (retry_transient(status) && end_phase(it) && complete_without_dispatcher(it) &&
        tasks_all_ended(&it->tasks)) {
        iter_end(it);
        return true;
    }
    uint64_t now = uv_now(&it->c->loop);
    uint32_t limit = it->c->timeout_ms;
    if (!retry_transient(status) || !limit || now - it->last_hb_ok < limit || progressing(it))
        return false;
    /* Not SLUICE_ERR_TIMEOUT: a caller waiting for elements in short slices takes that for its
     * own wait running out, and would wait on. */
    iter_fail(it, SLUICE_ERR_UNAVAILABLE, "dispatcher %s unreachable for %" PRIu32 " ms%s%s",
              it->c->address, limit, msg && *msg ? ": " : "", msg ? msg : "");
    return true;
}

static void fail_gone(struct sluice_iterator *it)
{
    iter_fail(it, SLUICE_ERR_RESTARTED,
              "dispatcher restarted without --fault-tolerant; job %" PRIu64 " is gone", it->job_id);
}

/* The verification passed: the new incarnation's heartbeats are trusted from now on. */
static void verified(struct sluice_iterator *it, uint64_t incarnation)
{
    it->job_incarnation = incarnation;
    iter_schedule_heartbeat(it, 0);
}

int iter_pack_def(const Sluice__DatasetDef *def, uint8_t **out, size_t *len)
{
    *len = sluice__dataset_def__get_packed_size(def);
    *out = malloc(*len ? *len : 1);
    if (!*out)
        return SLUICE_ERR_NOMEM;
    sluice__dataset_def__pack(def, *out);
    return 0;
}

static void on_verified_dataset(int status, const char *msg, const Sluice__Envelope *reply,
                                uint64_t incarnation, void *user)
{
    struct sluice_iterator *it = user;
    it->hb_busy = false;
    if (it->closing || iter_state(it) == ITER_FAILED) {
        iter_unref(it);
        return;
    }
    const Sluice__GetDatasetReply *r =
        status == 0 && reply->body_case == SLUICE__ENVELOPE__BODY_GET_DATASET_REPLY
            ? reply->get_dataset_reply
            : NULL;
    if (status == SLUICE_ERR_NOT_FOUND && incarnation == it->verify_incarnation) {
        fail_gone(it);
    } else if (r && r->dataset && incarnation == it->verify_incarnation) {
        uint8_t *def;
        size_t len;
        if (iter_pack_def(r->dataset, &def, &len) != 0) {
            iter_schedule_heartbeat(it, it->heartbeat_ms);
        } else {
            /* Same id, other definition: a dataset registered anew after a restart. */
            if (len != it->def_len || memcmp(def, it->def, len) != 0)
                fail_gone(it);
            else
                verified(it, incarnation);
            free(def);
        }
    } else if (!dispatcher_lost(it, status, msg)) {
        /* No answer, or from yet another incarnation: ask again on the next beat. */
        iter_schedule_heartbeat(it, it->heartbeat_ms);
    }
    iter_unref(it);
}

static void on_verified_job(int status, const char *msg, const Sluice__Envelope *reply,
                            uint64_t incarnation, void *user)
{
    struct sluice_iterator *it = user;
    it->hb_busy = false;
    if (it->closing || iter_state(it) == ITER_FAILED) {
        iter_unref(it);
        return;
    }
    const Sluice__StatusReply *r =
        status == 0 && reply->body_case == SLUICE__ENVELOPE__BODY_STATUS_REPLY ? reply->status_reply
                                                                               : NULL;
    if (!it->verify_incarnation)
        it->verify_incarnation = incarnation;
    if (r && incarnation == it->job_incarnation) {
        /* Only the connection was new: the dispatcher is the one that made the job. */
        iter_schedule_heartbeat(it, 0);
    } else if (r && incarnation == it->verify_incarnation) {
        struct status_job_ref ref = {it->job_id, it->dataset_id, it->job_name, mode_name(it->mode),
                                     it->iteration_id};
        if (status_json_job(r->json ? r->json : "", &ref) == STATUS_JOB_GONE) {
            fail_gone(it);
        } else if (!it->def_len) {
            verified(it, incarnation);
        } else {
            /* The job is there; is its dataset still the one we read? */
            sluice__get_dataset_request__init(&it->ds_req);
            it->ds_req.dataset_id = it->dataset_id;
            sluice__envelope__init(&it->ds_env);
            it->ds_env.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET;
            it->ds_env.get_dataset = &it->ds_req;
            if (client_disp_call(it->c, &it->ds_env, heartbeat_timeout(it), false,
                                 on_verified_dataset, it) == 0) {
                it->hb_busy = true;
                it->refs++;
            } else {
                iter_schedule_heartbeat(it, it->heartbeat_ms);
            }
        }
    } else if (!dispatcher_lost(it, status, msg)) {
        iter_schedule_heartbeat(it, it->heartbeat_ms);
    }
    iter_unref(it);
}

/* The dispatcher answered from an incarnation other than the one that created the job, or the
 * connection to it is not known to lead to that one. Before it is sent anything that names our
 * client, it must show the job as we know it (status) reading the dataset as we know it
 * (GetDataset), both read-only requests: a dispatcher that restarted without its journal hands
 * out ids from scratch, so our client, job and dataset ids may now name someone else's read.
 * incarnation is the one to verify, or 0 for whichever answers. */
static void verify_job(struct sluice_iterator *it, uint64_t incarnation)
{
    it->verify_incarnation = incarnation;
    sluice__status_request__init(&it->st_req);
    sluice__envelope__init(&it->st_env);
    it->st_env.body_case = SLUICE__ENVELOPE__BODY_STATUS;
    it->st_env.status = &it->st_req;
    if (client_disp_call(it->c, &it->st_env, heartbeat_timeout(it), false, on_verified_job, it) !=
        0) {
        iter_schedule_heartbeat(it, it->heartbeat_ms);
        return;
    }
    it->hb_busy = true;
    it->refs++;
}

/* Coordinated reads: takes the reply's round schedule and grant (tasks.h). Returns 0 or a
 * negative code. */
static int apply_schedule(struct sluice_iterator *it, const Sluice__ClientHeartbeatReply *r)
{
    struct tasks_epoch *epochs = calloc(r->n_round_epochs ? r->n_round_epochs : 1, sizeof *epochs);
    if (!epochs)
        return SLUICE_ERR_NOMEM;
    size_t n = 0;
    for (size_t k = 0; k < r->n_round_epochs; k++) {
        const Sluice__RoundEpoch *e = r->round_epochs[k];
        if (!e)
            continue;
        epochs[n].start = e->start;
        epochs[n].tasks = e->task_ids;
        epochs[n].ntasks = e->n_task_ids;
        n++;
    }
    uint64_t before = it->tasks.granted;
    bool waiting = it->tasks.where == TASKS_ROUND_GRANT;
    int rc = tasks_schedule(&it->tasks, epochs, n, r->rounds_granted);
    free(epochs);
    /* A reply that granted nothing to a read waiting for a grant: ask again, but not at once. */
    it->grant_stalled = rc == 0 && waiting && it->tasks.granted == before;
    return rc;
}

static void apply_heartbeat(struct sluice_iterator *it, const Sluice__ClientHeartbeatReply *r,
                            uint64_t now)
{
    if (r->heartbeat_ms)
        it->heartbeat_ms = r->heartbeat_ms;
    snprintf(it->sel_waiting, sizeof it->sel_waiting, "%s", r->waiting ? r->waiting : "");
    /* A task's pipeline failed: the read ends with its message (after what is buffered), as
     * when the worker itself answers with the failure. */
    if (r->iteration_error && r->iteration_error[0]) {
        iter_fail(it, SLUICE_ERR_TASK_FAILED, "%s", r->iteration_error);
        return;
    }
    /* Out of memory leaves the entries to be reported and confirmed again. */
    if (r->n_finished_seqs)
        (void)ledger_confirmed(&it->ledger, r->finished_seqs, r->n_finished_seqs);
    /* Deterministic: splits finished without this reader holding them are passed over. */
    if (it->det && r->splits_finished_below > it->ra.need) {
        reorder_accept_floor(&it->ra, r->splits_finished_below);
        uv_mutex_lock(&it->mu);
        if (r->splits_finished_below > it->rq.skip_below)
            it->rq.skip_below = r->splits_finished_below;
        uv_cond_broadcast(&it->cond);
        uv_mutex_unlock(&it->mu);
    }
    /* An unchanged list is the one applied last: the listed tasks, applied again (so the
     * finished flag and the rest of the reply take the one path). A reply that says so without
     * this reader holding a list carries no list to apply; the next heartbeat asks for it. */
    bool unchanged = r->tasks_unchanged && it->tasks.have_list && it->tasks_digest != 0 &&
                     r->tasks_digest == it->tasks_digest;
    if (r->tasks_unchanged && !unchanged) {
        it->tasks_digest = 0;
        return;
    }
    size_t cap = unchanged ? it->tasks.n : r->n_tasks;
    struct tasks_info *infos = calloc(cap ? cap : 1, sizeof *infos);
    /* The listed entries are copied out: reconciling writes the set they would point into. */
    struct tasks_task *held = unchanged ? malloc((cap ? cap : 1) * sizeof *held) : NULL;
    if (!infos || (unchanged && !held)) {
        free(infos);
        free(held);
        iter_fail(it, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        return;
    }
    size_t n = 0;
    for (size_t k = 0; unchanged && k < it->tasks.n; k++) {
        if (!it->tasks.v[k].listed)
            continue;
        held[n] = it->tasks.v[k];
        const struct tasks_task *t = &held[n];
        infos[n++] = (struct tasks_info){
            t->id,      t->address, t->worker_incarnation, t->key_len ? t->key : NULL,
            t->key_len, t->local};
    }
    for (size_t k = 0; !unchanged && k < r->n_tasks; k++) {
        const Sluice__TaskInfo *t = r->tasks[k];
        if (!t || (t->iteration_id && t->iteration_id != it->iteration_id))
            continue;
        infos[n].task_id = t->task_id;
        infos[n].address = t->worker_address ? t->worker_address : "";
        infos[n].worker_incarnation = t->worker_incarnation;
        infos[n].key = t->client_key.data;
        infos[n].key_len = t->client_key.len;
        infos[n].local = t->worker_host_id && t->worker_host_id[0] &&
                         strcmp(t->worker_host_id, it->host_id) == 0;
        n++;
    }
    int rc = tasks_reconcile(&it->tasks, infos, n, r->iteration_finished, now);
    free(infos);
    free(held);
    if (rc == 0)
        it->tasks_digest = r->tasks_digest;
    if (rc == 0 && it->coordinated)
        rc = apply_schedule(it, r);
    if (rc) {
        iter_fail(it, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_PROTOCOL, "%s",
                  rc == SLUICE_ERR_NOMEM ? sluice_strerror(rc)
                                         : "dispatcher sent a malformed task list");
        return;
    }
    /* This heartbeat went out after a worker denied knowing a task the list still holds. */
    long bad = tasks_confirmed_error(&it->tasks, it->hb_sent);
    if (bad >= 0) {
        iter_fail(it, it->tasks.v[bad].error, "%s", it->tasks.v[bad].error_msg);
        return;
    }
    for (size_t i = 0; i < it->tasks.n; i++) {
        struct tasks_task *t = &it->tasks.v[i];
        if (t->conn || !t->listed)
            continue;
        char msg[SLUICE_ERRMSG_SIZE];
        uint64_t shm = shm_ring_choose(t->local, it->no_shm, it->shm_bytes, SHM_REGION_DEFAULT);
        t->conn =
            client_conn_acquire(it->c, t->address, t->worker_incarnation, shm, msg, sizeof msg);
        if (!t->conn) {
            iter_fail(it, SLUICE_ERR_INVALID, "worker '%s' of task %" PRIu64 ": %s", t->address,
                      t->id, msg);
            return;
        }
    }
    iter_settle(it);
}

/* Deterministic reads: the splits to have produced again (reorder_redo_due) into it->redo as
 * the request's three lists: each split, the task whose production of it ended short, and how
 * long ago (now_ms, the clock of reorder_end). A heartbeat that fails gives them back
 * (redo_failed). Returns 0 or SLUICE_ERR_NOMEM. */
static int take_redo(struct sluice_iterator *it, uint64_t now_ms)
{
    it->nredo = 0;
    if (it->ra.n > it->redo_cap) {
        uint64_t *v = realloc(it->redo, 3 * it->ra.n * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        it->redo = v;
        it->redo_cap = it->ra.n;
    }
    uv_mutex_lock(&it->mu);
    bool room = reorder_queue_room(&it->rq);
    uv_mutex_unlock(&it->mu);
    uint64_t *seqs = it->redo, *tasks = seqs + it->redo_cap, *ages = tasks + it->redo_cap;
    it->nredo = reorder_redo_due(&it->ra, room, seqs, tasks, ages, it->redo_cap);
    for (size_t i = 0; i < it->nredo; i++) /* end times into ages */
        ages[i] = now_ms > ages[i] ? now_ms - ages[i] : 0;
    return 0;
}

/* Deterministic reads: the end of the reorder window, for the dispatcher to lease no split past
 * (wire lease_below): past the split the reader needs, as many splits as half the reorder bound
 * holds at the mean split size seen so far (what the reader holds of splits below the one it
 * needs counts too), at least ITER_WINDOW_MIN_SPLITS, plus the splits completed in the last
 * ITER_WINDOW_SLACK_MS at the rate of the last interval (the bound is as old as the last
 * heartbeat). 0 (no bound) until a split completed. The bound keeps workers from running far
 * ahead while the reader waits for one split, producing what it would have to drop. */
static uint64_t lease_below(struct sluice_iterator *it, uint64_t now)
{
    uint64_t done = it->det_splits - it->last_det_splits;
    uint64_t dt = now - it->last_det_ms;
    it->last_det_splits = it->det_splits;
    it->last_det_ms = now;
    if (it->det_splits == 0)
        return 0;
    uint64_t mean = it->det_bytes / it->det_splits;
    uint64_t window = mean ? it->rq.bound / 2 / mean : UINT64_MAX / 2;
    if (window < ITER_WINDOW_MIN_SPLITS)
        window = ITER_WINDOW_MIN_SPLITS;
    if (dt > 0 && window < UINT64_MAX / 2)
        window += done * ITER_WINDOW_SLACK_MS / dt;
    return window > UINT64_MAX - it->ra.need ? 0 : it->ra.need + window;
}

static void redo_failed(struct sluice_iterator *it)
{
    reorder_redo_failed(&it->ra, it->redo, it->nredo);
    it->nredo = 0;
}

static void on_heartbeat(int status, const char *msg, const Sluice__Envelope *reply,
                         uint64_t incarnation, void *user)
{
    struct sluice_iterator *it = user;
    it->hb_busy = false;
    /* Not answered, or not acted on for now: the splits are asked for again (a deferred request
     * with the regular heartbeats). */
    bool deferred = status == 0 &&
                    reply->body_case == SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT_REPLY &&
                    reply->client_heartbeat_reply->redo_deferred;
    if (deferred && it->nredo > 0)
        it->redo_calm_until = uv_now(&it->c->loop) + it->heartbeat_ms;
    if (status != 0 || incarnation != it->job_incarnation || deferred)
        redo_failed(it);
    it->nredo = 0;
    if (it->closing || iter_state(it) == ITER_FAILED) {
        iter_unref(it);
        return;
    }
    uint64_t now = uv_now(&it->c->loop);
    const Sluice__ClientHeartbeatReply *r = NULL;
    if (status == 0) {
        r = reply->body_case == SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT_REPLY
                ? reply->client_heartbeat_reply
                : NULL;
        if (!r) {
            status = SLUICE_ERR_PROTOCOL;
            msg = "dispatcher sent an unexpected reply to ClientHeartbeat";
        }
    }
    if (status == 0 && incarnation != it->job_incarnation) {
        verify_job(it, incarnation);
    } else if (status == 0) {
        it->last_hb_ok = now;
        it->hb_why[0] = '\0';
        report_answered(it);
        apply_heartbeat(it, r, now);
        iter_schedule_heartbeat(it, next_heartbeat(it));
    } else if (status == SLUICE_ERR_NOT_FOUND) {
        if (incarnation != 0 && incarnation != it->created_incarnation)
            fail_gone(it);
        else
            iter_fail(it, status, "%s", msg ? msg : "");
    } else if (retry_transient(status)) {
        snprintf(it->hb_why, sizeof it->hb_why, "%s", msg && *msg ? msg : sluice_strerror(status));
        if (!dispatcher_lost(it, status, msg))
            iter_schedule_heartbeat(it, it->heartbeat_ms);
    } else {
        iter_fail(it, status, "%s", msg ? msg : "");
    }
    iter_unref(it);
}

/* Fills it->cov with the ledger's splits (what the heartbeat reports). Returns 0 or
 * SLUICE_ERR_NOMEM (then nothing is reported this time). */
static int build_coverage(struct sluice_iterator *it)
{
    const struct ledger *l = &it->ledger;
    size_t nbounds = 0;
    for (size_t i = 0; i < l->n; i++)
        nbounds += 2 * l->v[i].got.n;
    free(it->cov);
    free(it->cov_ptrs);
    free(it->cov_bounds);
    it->cov = NULL;
    it->cov_ptrs = NULL;
    it->cov_bounds = NULL;
    it->cov_n = 0;
    if (l->n == 0)
        return 0;
    it->cov = calloc(l->n, sizeof *it->cov);
    it->cov_ptrs = calloc(l->n, sizeof *it->cov_ptrs);
    it->cov_bounds = calloc(nbounds ? nbounds : 1, sizeof *it->cov_bounds);
    if (!it->cov || !it->cov_ptrs || !it->cov_bounds)
        return SLUICE_ERR_NOMEM;
    uint64_t *b = it->cov_bounds;
    for (size_t i = 0; i < l->n; i++) {
        const struct ledger_split *sp = &l->v[i];
        Sluice__SplitCoverage *c = &it->cov[i];
        sluice__split_coverage__init(c);
        c->seq = sp->seq;
        c->had = sp->had;
        c->ended = sp->ended;
        c->total = sp->total;
        c->bounds = b;
        c->n_bounds = 2 * sp->got.n;
        for (size_t k = 0; k < sp->got.n; k++) {
            *b++ = sp->got.v[k].begin;
            *b++ = sp->got.v[k].end;
        }
        it->cov_ptrs[i] = c;
    }
    it->cov_n = l->n;
    return 0;
}

static void send_heartbeat(struct sluice_iterator *it)
{
    uint64_t now = uv_now(&it->c->loop);
    size_t n = tasks_finished_ids(&it->tasks, NULL, 0);
    if (n > it->finished_cap) {
        uint64_t *v = realloc(it->finished, n * sizeof *v);
        if (!v) {
            iter_schedule_heartbeat(it, it->heartbeat_ms);
            return;
        }
        it->finished = v;
        it->finished_cap = n;
    }
    tasks_finished_ids(&it->tasks, it->finished, n);

    uv_mutex_lock(&it->mu);
    uint64_t taken = atomic_load_explicit(&it->taken, memory_order_relaxed);
    uint64_t wait_ns = it->wait_ns;
    uv_mutex_unlock(&it->mu);
    if (build_coverage(it) == 0)
        it->acks_due = false;
    double dt_ms = (double)(now - it->last_stats_ms);
    double rate = 0, waiting = 0;
    if (dt_ms > 0) {
        rate = (double)(taken - it->last_taken) * 1000.0 / dt_ms;
        waiting = (double)(wait_ns - it->last_wait_ns) / (dt_ms * 1e6);
        if (waiting > 1)
            waiting = 1;
        it->last_stats_ms = now;
        it->last_taken = taken;
        it->last_wait_ns = wait_ns;
    }

    sluice__client_heartbeat_request__init(&it->hb_req);
    it->hb_req.client_id = it->client_id;
    it->hb_req.iteration_id = it->iteration_id;
    it->hb_req.client_key.data = it->client_key;
    it->hb_req.client_key.len = it->client_key_len;
    it->hb_req.n_finished_task_ids = n;
    it->hb_req.finished_task_ids = it->finished;
    it->hb_req.elements_per_second = rate;
    it->hb_req.wait_fraction = waiting;
    it->hb_req.exposed_wait_us = wait_ns / 1000u;
    it->hb_req.copies_cut = atomic_load(&it->copies_cut);
    it->hb_req.hedge_factor = it->det ? 0 : it->hedge_factor;
    it->hb_req.n_splits = it->cov_n;
    it->hb_req.splits = it->cov_ptrs;
    it->hb_req.round = it->coordinated ? it->tasks.round : 0;
    it->hb_req.tasks_digest = it->tasks.have_list ? it->tasks_digest : 0;
    if (it->det && take_redo(it, iter_clock_ms()) == 0) {
        it->hb_req.n_redo_seqs = it->nredo;
        it->hb_req.redo_seqs = it->redo;
        it->hb_req.n_redo_tasks = it->nredo;
        it->hb_req.redo_tasks = it->redo + it->redo_cap;
        it->hb_req.n_redo_ages_ms = it->nredo;
        it->hb_req.redo_ages_ms = it->redo + 2 * it->redo_cap;
    }
    if (it->det)
        it->hb_req.lease_below = lease_below(it, now);
    sluice__envelope__init(&it->hb_env);
    it->hb_env.body_case = SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT;
    it->hb_env.client_heartbeat = &it->hb_req;
    if (client_disp_call(it->c, &it->hb_env, heartbeat_timeout(it), false, on_heartbeat, it) != 0) {
        redo_failed(it);
        iter_schedule_heartbeat(it, it->heartbeat_ms);
        return;
    }
    it->hb_busy = true;
    it->hb_soon = false;
    it->hb_sent++;
    it->refs++;
}

/* Whether a request written now goes to the dispatcher incarnation that holds the job: the
 * client writes at once on a live connection, so this is exact when it returns true. */
static bool talking_to_job(const struct sluice_iterator *it)
{
    struct rpc_client *disp = it->c->disp;
    return rpc_client_connected(disp) && rpc_client_peer_incarnation(disp) == it->job_incarnation;
}

static void on_hb_timer(uv_timer_t *t)
{
    struct sluice_iterator *it = t->data;
    if (it->closing || iter_state(it) == ITER_FAILED)
        return;
    if (talking_to_job(it))
        send_heartbeat(it);
    else
        verify_job(it, 0);
}

/* ---- loop thread: start and close --------------------------------------------------------- */

static void on_timer_closed(uv_handle_t *h)
{
    iter_unref(h->data);
}

void iter_run_start(struct sluice_client *c, struct client_op *op)
{
    struct sluice_iterator *it = op->user;
    uv_timer_init(&c->loop, &it->hb_timer);
    uv_timer_init(&c->loop, &it->pump_timer);
    it->hb_timer.data = it->pump_timer.data = it;
    it->refs = 3;
    it->started = true;
    it->waker.fn = iter_on_wake;
    client_waker_add(c, &it->waker);
    it->last_hb_ok = it->last_stats_ms = uv_now(&c->loop);
    uv_timer_start(&it->hb_timer, on_hb_timer, 0, 0);
    client_op_done(c, op, 0);
}

static void on_released(int status, const char *msg, const Sluice__Envelope *reply,
                        uint64_t incarnation, void *user)
{
    struct sluice_iterator *it = user;
    client_op_done(it->c, it->close_op, 0);
    iter_unref(it);
}

void iter_run_close(struct sluice_client *c, struct client_op *op)
{
    struct sluice_iterator *it = op->user;
    it->closing = true;
    client_waker_remove(c, &it->waker);
    uv_close((uv_handle_t *)&it->hb_timer, on_timer_closed);
    uv_close((uv_handle_t *)&it->pump_timer, on_timer_closed);
    /* Releasing the last reference to a connection fails its calls at once; on_elements sees
     * closing and only gives their slots back. */
    for (size_t i = 0; i < it->tasks.n; i++) {
        struct client_conn *conn = it->tasks.v[i].conn;
        it->tasks.v[i].conn = NULL;
        if (conn)
            client_conn_release(c, conn);
    }
    it->close_op = op;
    uint32_t timeout = ITER_RELEASE_TIMEOUT_MS;
    if (c->timeout_ms && c->timeout_ms < timeout)
        timeout = c->timeout_ms;
    sluice__release_client_request__init(&it->rel_req);
    it->rel_req.client_id = it->client_id;
    it->rel_req.client_key.data = it->client_key;
    it->rel_req.client_key.len = it->client_key_len;
    it->rel_req.copies_cut = atomic_load(&it->copies_cut);
    sluice__envelope__init(&it->rel_env);
    it->rel_env.body_case = SLUICE__ENVELOPE__BODY_RELEASE_CLIENT;
    it->rel_env.release_client = &it->rel_req;
    /* Our client id means someone else's client to a dispatcher that restarted without its
     * journal, so the release goes only to the one that holds the job; elsewhere the client
     * times out on its own. */
    if (it->client_id && talking_to_job(it) &&
        client_disp_call(c, &it->rel_env, timeout, false, on_released, it) == 0)
        it->refs++;
    else
        client_op_done(c, op, 0);
    iter_unref(it);
}
