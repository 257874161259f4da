/* The worker's side of the dispatcher: heartbeats (registration, task assignments and
 * removals) and split leasing through GetSplits. */

#include "worker_internal.h"

/* ---- split leasing ---------------------------------------------------------------------- */

/* Copies a wire plan's numbers and files; the rest is the task's to set from its dataset.
 * Returns 0 or SLUICE_ERR_NOMEM. */
static int plan_from_wire(const Sluice__SplitPlan *sp, struct split_plan *out)
{
    memset(out, 0, sizeof *out);
    out->source_len = sp->source_len;
    out->split_size = sp->split_size;
    out->per_pass = sp->per_pass;
    out->passes = sp->passes;
    if (sp->n_paths == 0)
        return 0;
    out->paths = calloc(sp->n_paths, sizeof *out->paths);
    if (!out->paths)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < sp->n_paths; i++) {
        out->paths[i] = strdup(sp->paths[i] ? sp->paths[i] : "");
        if (!out->paths[i]) {
            split_plan_release(out);
            return SLUICE_ERR_NOMEM;
        }
        out->npaths++;
    }
    return 0;
}

/* A task's GetSplits answered (r) or failed (r NULL, msg why). */
static void splits_apply(struct worker *w, struct wtask *wt, const char *msg,
                         const Sluice__GetSplitsReply *r)
{
    wt->splits_inflight = false;
    uint64_t now = worker_now_ms();
    if (!r) {
        if (!wt->dying && !w->closing && wt->splits_failures++ == 0)
            log_warn("task %" PRIu64 ": leasing splits failed: %s (retrying)", wt->id, msg);
        task_lease_failed(wt->task, now);
        lease_number_done(&wt->splits_numbers, false);
        return;
    }
    lease_number_done(&wt->splits_numbers, true);
    if (wt->splits_failures && !wt->dying)
        log_info("task %" PRIu64 ": leasing splits works again", wt->id);
    wt->splits_failures = 0;
    struct split_plan plan;
    bool have_plan = false;
    int rc = 0;
    if (r->plan) {
        rc = plan_from_wire(r->plan, &plan);
        have_plan = rc == 0;
    }
    /* What of the leased splits their consumers had, before a producer can start one. */
    for (size_t i = 0; rc == 0 && i < r->n_resume; i++) {
        const Sluice__SplitResume *sr = r->resume[i];
        if (sr &&
            (rc = task_lease_resume(wt->task, sr->seq, sr->covered, sr->n_covered, sr->owner)) <
                0 &&
            have_plan)
            split_plan_release(&plan);
    }
    if (rc < 0) {
        task_lease_granted(wt->task, NULL, NULL, 0, false, now);
        task_fail(wt->task, rc,
                  rc == SLUICE_ERR_INVALID ? "a bad resume entry in the lease"
                                           : "copying the lease: out of memory");
    } else {
        task_lease_granted(wt->task, have_plan ? &plan : NULL, r->seqs, r->n_seqs, r->end_of_splits,
                           now);
        /* Splits another task's copy finished first: not produced (again) here. */
        size_t dropped = r->n_dropped ? task_lease_drop(wt->task, r->dropped, r->n_dropped) : 0;
        if (dropped > 0)
            log_info("task %" PRIu64 ": %zu queued splits finished elsewhere (hedged): left out",
                     wt->id, dropped);
    }
    worker_log_failure(wt);
}

static void splits_done(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct wtask *wt = user;
    struct worker *w = wt->w;
    const Sluice__GetSplitsReply *r = NULL;
    if (status == 0 && reply && reply->body_case == SLUICE__ENVELOPE__BODY_GET_SPLITS_REPLY)
        r = reply->get_splits_reply;
    splits_apply(w, wt, status == 0 ? "unexpected reply" : msg, r);
    if (wt->dying)
        worker_reap(w);
    else
        worker_lease_pump(w, wt);
}

/* A GetSplitsBatch in flight: its tasks, in the order of its requests. */
struct splits_batch {
    struct worker *w;
    size_t n;
    struct wtask *tasks[WORKER_SPLITS_BATCH_MAX];
};

static void batch_done(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct splits_batch *b = user;
    struct worker *w = b->w;
    const Sluice__GetSplitsBatchReply *r = NULL;
    if (status == 0 && reply && reply->body_case == SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH_REPLY &&
        reply->get_splits_batch_reply->n_results == b->n)
        r = reply->get_splits_batch_reply;
    else if (status == 0)
        msg = "unexpected reply";
    if (status == SLUICE_ERR_UNSUPPORTED && !w->splits_one_by_one) {
        /* A dispatcher of an earlier version: its tasks ask on their own from now on (their
         * requests go again under their numbers after the usual delay). */
        w->splits_one_by_one = true;
        log_warn("dispatcher %s does not take several tasks' split requests in one (%s): each "
                 "task asks on its own",
                 w->disp_address, msg);
    }
    bool reap = false;
    for (size_t i = 0; i < b->n; i++) {
        const Sluice__GetSplitsResult *res = r ? r->results[i] : NULL;
        const Sluice__GetSplitsReply *one = res && res->code == 0 ? res->reply : NULL;
        const char *why = msg;
        if (res && !one)
            why = res->code < 0 && res->message ? res->message : "unexpected reply";
        splits_apply(w, b->tasks[i], why, one);
        reap |= b->tasks[i]->dying;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (!b->tasks[i]->dying)
            worker_lease_pump(w, b->tasks[i]);
    }
    if (reap)
        worker_reap(w);
    free(b);
}

/* Whether wt may send a GetSplits now, as far as the worker is concerned. */
static bool lease_ready(const struct worker *w, const struct wtask *wt)
{
    if (w->closing || wt->dying || wt->splits_inflight || !task_is_distributed(wt->task))
        return false;
    /* Lease traffic goes only to the dispatcher that assigned the task. Calls made while
     * disconnected would wait and go to whichever dispatcher answers next, which may be a
     * restarted one that reuses the task id for another task. */
    return rpc_client_connected(w->disp) && rpc_client_peer_incarnation(w->disp) == wt->incarnation;
}

/* Fills req with wt's request if it is to go now (task_lease_want; topup: beside another's);
 * the request counts as sent. */
static bool lease_ask(struct worker *w, struct wtask *wt, uint64_t now, bool topup,
                      Sluice__GetSplitsRequest *req)
{
    uint32_t max_splits;
    const uint64_t *finished, *returned;
    size_t nfinished, nreturned;
    if (!task_lease_want(wt->task, now, topup, &max_splits, &finished, &nfinished, &returned,
                         &nreturned))
        return false;
    sluice__get_splits_request__init(req);
    req->task_id = wt->id;
    req->max_splits = max_splits;
    req->n_finished = nfinished;
    req->finished = (uint64_t *)finished;
    req->n_returned = nreturned;
    req->returned = (uint64_t *)returned;
    /* After a failure this is the failed request again, under its number (lease.h). */
    req->request_seq = lease_number_next(&wt->splits_numbers);
    req->worker_key.data = w->key;
    req->worker_key.len = sizeof w->key;
    log_debug("task %" PRIu64 ": asking for %" PRIu32 " splits, reporting %zu finished", wt->id,
              max_splits, nfinished);
    return true;
}

static void lease_ask_failed(struct wtask *wt, uint64_t now)
{
    task_lease_failed(wt->task, now);
    lease_number_done(&wt->splits_numbers, false);
}

/* wt's request, with those of the worker's other tasks that have room for more splits or
 * splits to report (lease_want_topup), in one GetSplitsBatch; false when there are none (or no
 * memory), and wt's goes on its own. */
static bool lease_send_batch(struct worker *w, struct wtask *wt, uint64_t now,
                             const Sluice__GetSplitsRequest *first)
{
    struct splits_batch *b = malloc(sizeof *b);
    Sluice__GetSplitsRequest *reqs = malloc(WORKER_SPLITS_BATCH_MAX * sizeof *reqs);
    Sluice__GetSplitsRequest **ptrs = malloc(WORKER_SPLITS_BATCH_MAX * sizeof *ptrs);
    bool sent = false;
    if (!b || !reqs || !ptrs)
        goto out;
    b->w = w;
    b->tasks[0] = wt;
    reqs[0] = *first;
    b->n = 1;
    for (struct wtask *t = w->tasks; t && b->n < WORKER_SPLITS_BATCH_MAX; t = t->next) {
        if (t != wt && lease_ready(w, t) && lease_ask(w, t, now, true, &reqs[b->n]))
            b->tasks[b->n++] = t;
    }
    if (b->n == 1)
        goto out;
    for (size_t i = 0; i < b->n; i++)
        ptrs[i] = &reqs[i];
    Sluice__GetSplitsBatchRequest req = SLUICE__GET_SPLITS_BATCH_REQUEST__INIT;
    req.n_requests = b->n;
    req.requests = ptrs;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH;
    env.get_splits_batch = &req;
    sent = true;
    if (rpc_call(w->disp, &env, WORKER_SPLITS_TIMEOUT_MS, batch_done, b) < 0) {
        for (size_t i = 0; i < b->n; i++)
            lease_ask_failed(b->tasks[i], now);
        goto out;
    }
    for (size_t i = 0; i < b->n; i++)
        b->tasks[i]->splits_inflight = true;
    b = NULL;
out:
    /* Requests taken beside wt's and not sent are failed, to go again after the delay. */
    if (!sent && b) {
        for (size_t i = 1; i < b->n; i++)
            lease_ask_failed(b->tasks[i], now);
    }
    free(b);
    free(reqs);
    free(ptrs);
    return sent;
}

void worker_lease_pump(struct worker *w, struct wtask *wt)
{
    if (!lease_ready(w, wt))
        return;
    uint64_t now = worker_now_ms();
    Sluice__GetSplitsRequest req;
    if (!lease_ask(w, wt, now, false, &req))
        return;
    if (!w->splits_one_by_one && lease_send_batch(w, wt, now, &req))
        return;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS;
    env.get_splits = &req;
    if (rpc_call(w->disp, &env, WORKER_SPLITS_TIMEOUT_MS, splits_done, wt) < 0) {
        lease_ask_failed(wt, now);
        return;
    }
    wt->splits_inflight = true;
}

/* ---- heartbeats ------------------------------------------------------------------------- */

static void hb_apply(struct worker *w, const Sluice__WorkerHeartbeatReply *r)
{
    /* A new id means the dispatcher registered this worker anew: first, or after it removed
     * the worker (silent past its timeout, as in a partition) or lost it (a dispatcher without
     * a journal restarted). */
    if (r->worker_id != w->worker_id) {
        if (w->worker_id == 0)
            log_info("registered with dispatcher %s as worker %" PRIu64, w->disp_address,
                     r->worker_id);
        else
            log_warn("registered again with dispatcher %s as worker %" PRIu64
                     ": it no longer knew worker %" PRIu64 " (removed after its heartbeats "
                     "stopped arriving, or the dispatcher lost its state)",
                     w->disp_address, r->worker_id, w->worker_id);
        w->worker_id = r->worker_id;
    }
    for (size_t i = 0; i < r->n_removed_task_ids; i++) {
        struct wtask *wt = worker_find_task(w, r->removed_task_ids[i]);
        if (wt) {
            log_info("task %" PRIu64 " removed", wt->id);
            worker_remove_task(w, wt, SLUICE_ERR_NOT_FOUND, NULL);
        }
    }
    /* A draining worker starts nothing new (a task assigned just before the dispatcher heard
     * of the drain goes to the pool with the rest when the worker leaves). */
    for (size_t i = 0; i < r->n_new_tasks && !w->draining; i++)
        worker_add_task(w, r->new_tasks[i]);
    if (!w->hb_fixed && r->heartbeat_ms && r->heartbeat_ms != w->hb_ms) {
        w->hb_ms = r->heartbeat_ms;
        uv_timer_start(&w->hb_timer, worker_on_hb_timer, w->hb_ms, w->hb_ms);
    }
    for (struct wtask *wt = w->tasks; wt; wt = wt->next)
        worker_lease_pump(w, wt);
    worker_reap(w);
}

static void hb_done(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct worker *w = user;
    w->hb_inflight = false;
    if (w->closing)
        return;
    uint64_t seq = w->hb_seq;
    if (w->hb_again) {
        w->hb_again = false;
        uv_timer_start(&w->hb_timer, worker_on_hb_timer, 0, w->hb_ms);
    }
    const Sluice__WorkerHeartbeatReply *r = NULL;
    if (status == 0 && reply && reply->body_case == SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY)
        r = reply->worker_heartbeat_reply;
    if (!r) {
        if (status == 0)
            msg = "unexpected reply";
        /* One line when the dispatcher goes away, not one per heartbeat. */
        if (w->hb_failures++ == 0)
            log_warn("heartbeat to dispatcher %s failed: %s (retrying; tasks keep serving)",
                     w->disp_address, msg);
        w->hb_ok = false;
        /* No news is coming soon: the parked reads learn that their task is unknown. */
        worker_unpark(w, seq, true);
        return;
    }
    w->hb_ok = true;
    if (w->hb_failures)
        log_info("dispatcher %s reachable again", w->disp_address);
    w->hb_failures = 0;
    hb_apply(w, r);
    worker_unpark(w, seq, false);
}

void worker_hb_send(struct worker *w)
{
    /* Once the deregistration is sent it is the worker's last word: a heartbeat after it would
     * register the worker again and leave it listed until its timeout. */
    if (w->closing || w->hb_inflight || w->leaving)
        return;
    size_t n = 0;
    for (struct wtask *wt = w->tasks; wt; wt = wt->next)
        n++;
    Sluice__TaskProgress *progs = calloc(n ? n : 1, sizeof *progs);
    Sluice__TaskProgress **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    struct task_stage *stages = calloc((n ? n : 1) * TASK_STAGES_MAX, sizeof *stages);
    Sluice__StageTime *times = calloc((n ? n : 1) * TASK_STAGES_MAX, sizeof *times);
    Sluice__StageTime **tptrs = calloc((n ? n : 1) * TASK_STAGES_MAX, sizeof *tptrs);
    if (!progs || !ptrs || !stages || !times || !tptrs) {
        free(progs);
        free(ptrs);
        free(stages);
        free(times);
        free(tptrs);
        return; /* the next tick tries again */
    }
    uint64_t now = worker_now_ms();
    uint64_t now_ns = uv_hrtime();
    size_t i = 0;
    wmetrics_pass_begin(w->wm);
    for (struct wtask *wt = w->tasks; wt; wt = wt->next, i++) {
        struct task_progress tp;
        task_progress(wt->task, &tp);
        if (now > wt->rate_at_ms) {
            wt->rate =
                (double)(tp.produced - wt->rate_produced) * 1000.0 / (double)(now - wt->rate_at_ms);
            wt->rate_produced = tp.produced;
            wt->rate_at_ms = now;
        }
        sluice__task_progress__init(&progs[i]);
        progs[i].task_id = wt->id;
        progs[i].finished = tp.finished;
        progs[i].elements_per_second = wt->rate;
        progs[i].buffered = tp.buffered;
        progs[i].buffered_bytes = tp.buffered_bytes;
        progs[i].served_elements = wt->served_elements;
        progs[i].served_bytes = wt->served_bytes;
        progs[i].busy_ns = tp.busy_ns;
        progs[i].settled = tp.settled;
        /* A failed task is reported, so the dispatcher records the failure for its readers
         * and hands its iteration to no other worker. */
        const char *why = NULL;
        if (tp.failed && task_error(wt->task, &why) < 0) {
            progs[i].failed = true;
            progs[i].error = (char *)(why ? why : "");
        }
        progs[i].idle_fraction = wmetrics_task_heartbeat(w->wm, wt->id, &tp, now_ns);
        /* Where the task's time went, the stages that took any (at most TASK_STAGES_MAX). */
        struct task_stage *st = stages + i * TASK_STAGES_MAX;
        task_stages(wt->task, &tp, wt->send_ns, st);
        wmetrics_task_stages(w->wm, wt->job_id, wt->id, st);
        wmetrics_task_busy(w->wm, wt->job_id, wt->id, tp.busy_ns);
        progs[i].stages = tptrs + i * TASK_STAGES_MAX;
        for (size_t k = 0; k < TASK_STAGES_MAX; k++) {
            if (!st[k].name[0] || st[k].ns == 0)
                continue;
            Sluice__StageTime *tm = times + i * TASK_STAGES_MAX + k;
            sluice__stage_time__init(tm);
            tm->name = st[k].name;
            tm->seconds = (double)st[k].ns / 1e9;
            progs[i].stages[progs[i].n_stages++] = tm;
        }
        if (wt->has_xtc)
            wmetrics_xtc_seen(w->wm, wt->xtc.bytes);
        ptrs[i] = &progs[i];
    }
    wmetrics_pass_end(w->wm);
    Sluice__WorkerHeartbeatRequest req = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    req.address = w->address;
    req.n_tasks = n;
    req.tasks = ptrs;
    req.draining = w->draining;
    req.worker_key.data = w->key;
    req.worker_key.len = sizeof w->key;
    req.host_id = w->host_id;
    req.n_labels = w->nlabels;
    req.labels = w->label_v;
    req.task_slots = w->task_slots;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &req;
    int rc = rpc_call(w->disp, &env, WORKER_HEARTBEAT_TIMEOUT_MS, hb_done, w);
    free(progs);
    free(ptrs);
    free(stages);
    free(times);
    free(tptrs);
    if (rc < 0) {
        log_warn("heartbeat: %s", sluice_strerror(rc));
        return;
    }
    w->hb_inflight = true;
    w->hb_seq++;
}

void worker_on_hb_timer(uv_timer_t *t)
{
    worker_hb_send(t->data);
}

void worker_on_connect(struct rpc_client *client, uint64_t incarnation, void *user)
{
    struct worker *w = user;
    if (w->closing)
        return;
    if (w->disp_incarnation != 0 && incarnation != w->disp_incarnation) {
        size_t n = 0;
        for (struct wtask *wt = w->tasks; wt; wt = wt->next)
            n++;
        log_warn("dispatcher %s restarted without its state (incarnation %016" PRIx64
                 ", was %016" PRIx64 "): dropping %zu task(s)",
                 rpc_client_current_address(client), incarnation, w->disp_incarnation, n);
        while (w->tasks)
            worker_remove_task(w, w->tasks, SLUICE_ERR_NOT_FOUND, NULL);
        worker_reap(w);
    }
    w->disp_incarnation = incarnation;
    /* Report at once, so a restarted dispatcher learns about this worker without waiting. */
    worker_hb_send(w);
}
