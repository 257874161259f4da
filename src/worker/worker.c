/* The worker shell (see worker.h): the task table, wakeups, draining, the tick, start and
 * close; serving readers is in serve.c and talking to the dispatcher in heartbeat.c. Everything
 * here runs on the loop thread and only moves data between the network and the tasks; decisions
 * about leasing live in lease.c, buffering in buffer.c and task.c, sharding in shard.c.
 *
 * Handles: one uv_async (producers wake the loop through it), a heartbeat timer and a tick
 * timer, plus the rpc server and the dispatcher client. The tick runs every
 * WORKER_TICK_FAST_MS while some reader waits (to publish elements a producer holds back, and to
 * answer waits that ran out) and every WORKER_TICK_SLOW_MS otherwise (to retry and report
 * leases).
 *
 * Task lifetime: a task is live (in w->tasks, found by id) until the dispatcher removes it, the
 * dispatcher is found to have restarted, or the worker closes; it then moves to w->dying, where
 * it stays until its producers have exited and its GetSplits call (if any) has completed, and
 * is then freed. Ids are looked up only among live tasks, so a new task may reuse the id of a
 * dying one. */

#include "worker_internal.h"

#include "common/inproc.h"
#include "common/shm_region.h"
#include "common/rpc_metrics.h"
#include "pipeline/objstore.h"
#include "common/mode.h"

_Static_assert(WORKER_MAX_ELEMENT_BYTES_LIMIT == TASK_MAX_RECORD - (64u << 10),
               "an element at the limit still fits in one reply frame");

static void drain_check(struct worker *w);

unsigned worker_default_threads(void)
{
    unsigned n = 2 * uv_available_parallelism();
    if (n < WORKER_MIN_DEFAULT_THREADS)
        n = WORKER_MIN_DEFAULT_THREADS;
    return n > POOL_MAX_THREADS ? POOL_MAX_THREADS : n;
}

uint64_t worker_now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

struct wtask *worker_find_task(struct worker *w, uint64_t id)
{
    for (struct wtask *wt = w->tasks; wt; wt = wt->next)
        if (wt->id == id)
            return wt;
    return NULL;
}

/* ---- task table ------------------------------------------------------------------------- */

static void maybe_finish_close(struct worker *w);

void worker_reap(struct worker *w)
{
    struct wtask **pp = &w->dying;
    while (*pp) {
        struct wtask *wt = *pp;
        if (wt->splits_inflight || wt->replies_inflight ||
            (!wt->abandoned && !task_exited(wt->task))) {
            pp = &wt->next;
            continue;
        }
        *pp = wt->next;
        if (!wt->abandoned)
            task_free(wt->task);
        rounds_free(&wt->rounds);
        xtc_free(&wt->xtc);
        free(wt->deliveries);
        free(wt);
    }
    maybe_finish_close(w);
}

void worker_remove_task(struct worker *w, struct wtask *wt, int code, const char *why)
{
    struct wtask **pp = &w->tasks;
    while (*pp != wt)
        pp = &(*pp)->next;
    *pp = wt->next;
    worker_drop_waiters(w, wt, code, why);
    task_stop(wt->task);
    wt->dying = true;
    wt->dying_since_ms = worker_now_ms();
    wt->next = w->dying;
    w->dying = wt;
}

void worker_log_failure(struct wtask *wt)
{
    const char *msg;
    if (wt->failure_logged || task_error(wt->task, &msg) == 0)
        return;
    wt->failure_logged = true;
    log_error("task %" PRIu64 " failed: %s", wt->id, msg);
}

/* Turns a TaskDef's dataset into a checked spec. Protobuf stops here: the DatasetDef is
 * serialized again and decoded by the one decoder that validates it. */
static int spec_from_taskdef(const struct worker *w, const Sluice__TaskDef *td,
                             struct pipe_spec **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!td->dataset)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "the task comes without a dataset");
    if (!mode_valid(td->mode))
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "unknown processing mode %d",
                       (int)td->mode);
    size_t len = sluice__dataset_def__get_packed_size(td->dataset);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    sluice__dataset_def__pack(td->dataset, buf);
    struct pipe_spec *spec;
    int rc = pipe_spec_decode(buf, len, &spec, err, errlen);
    free(buf);
    if (rc < 0)
        return rc;
    /* The client checked the pipeline against its own functions: one this worker lacks is a
     * plugin the client loaded and the worker was started without. Said so, with the worker's
     * address, since the reader sees this message far from here. */
    for (size_t i = 0; i < spec->nops; i++) {
        const struct pipe_op *op = &spec->ops[i];
        if ((op->kind == PIPE_OP_MAP || op->kind == PIPE_OP_FILTER) &&
            !pipe_registry_find(w->reg, op->fn ? op->fn : "")) {
            rc = err_set(err, errlen, SLUICE_ERR_PLUGIN,
                         "worker %s: %s(%s): unknown function (worker started without the plugin "
                         "that provides it: sluice-worker --plugin LIB.so)",
                         w->address, op->kind == PIPE_OP_MAP ? "map" : "filter",
                         op->fn ? op->fn : "");
            pipe_spec_free(spec);
            return rc;
        }
    }
    rc = pipe_registry_check(w->reg, spec, err, errlen);
    if (rc < 0) {
        char why[SLUICE_ERRMSG_SIZE];
        snprintf(why, sizeof why, "%s", err);
        err_set(err, errlen, rc, "worker %s: %s", w->address, why);
        pipe_spec_free(spec);
        return rc;
    }
    *out = spec;
    return 0;
}

/* Whether one more task fits the worker's limits: 0, or SLUICE_ERR_LIMIT with the reason (for
 * the task's readers) in err. A task counts against --max-tasks while its producers run (their
 * turns on the pool), and against --max-buffer-bytes at its buffer's bound while they run, then at
 * what its buffer still holds: a task that produced everything and waits to be collected costs no
 * thread, so short reads one after another (a repeating tail opens a job per pass) never pile up.
 */
static int admit_task(struct worker *w, char *err, size_t errlen)
{
    unsigned running = 0;
    uint64_t held = 0; /* bytes still buffered by tasks whose producers exited */
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        if (!wt->running || !wt->task)
            continue;
        if (!task_exited(wt->task)) {
            running++;
            continue;
        }
        struct task_progress p;
        task_progress(wt->task, &p);
        held += p.buffered_bytes;
    }
    if (w->max_tasks && running >= w->max_tasks)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "worker %s: task limit reached: it runs %u tasks (--max-tasks)", w->address,
                       running);
    uint64_t each = w->buffer_bytes ? w->buffer_bytes : TASK_BUFFER_BYTES;
    if (w->max_buffer_bytes && (uint64_t)(running + 1) * each + held > w->max_buffer_bytes) {
        char more[96] = "";
        if (held)
            snprintf(more, sizeof more, " and finished tasks holding %" PRIu64 " bytes", held);
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "worker %s: buffer limit reached: %u tasks buffering up to %" PRIu64
                       " bytes each%s, of --max-buffer-bytes %" PRIu64,
                       w->address, running, each, more, w->max_buffer_bytes);
    }
    return 0;
}

void worker_add_task(struct worker *w, const Sluice__TaskDef *td)
{
    if (!td || worker_find_task(w, td->task_id))
        return;
    struct wtask *wt = calloc(1, sizeof *wt);
    if (!wt) {
        log_error("task %" PRIu64 ": %s", td->task_id, sluice_strerror(SLUICE_ERR_NOMEM));
        return;
    }
    wt->w = w;
    wt->id = td->task_id;
    wt->incarnation = w->disp_incarnation;
    wt->rate_at_ms = worker_now_ms();
    wt->job_id = td->job_id;
    if (td->task_key.len == CAP_KEY_LEN && td->task_key.data) {
        wt->has_key = true;
        memcpy(wt->task_key, td->task_key.data, CAP_KEY_LEN);
    }
    wt->counted =
        td->mode != SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH && td->num_consumers == 0;
    if (td->cross_trainer_cache_bytes) {
        /* Trainers each read the whole stream from their join point: nothing to count. */
        wt->has_xtc = true;
        wt->counted = false;
        xtc_init(&wt->xtc, td->cross_trainer_cache_bytes, XTC_MAX_TRAINERS, WORKER_XTC_IDLE_MS);
    }

    char err[SLUICE_ERRMSG_SIZE] = "";
    struct pipe_spec *spec;
    int rc = admit_task(w, err, sizeof err);
    if (rc == 0)
        rc = spec_from_taskdef(w, td, &spec, err, sizeof err);
    if (rc == 0) {
        struct task_config cfg = {
            .id = td->task_id,
            .mode = (enum sluice_mode)td->mode,
            .compress = td->compression == SLUICE__COMPRESSION__COMPRESSION_AUTO,
            .num_workers = td->num_workers,
            .worker_index = td->worker_index,
            .producers = w->producers,
            .pool = w->pool,
            .reg = w->reg,
            .wake = &w->wake,
            .buffer_bytes = w->buffer_bytes,
            .buffer_records = w->buffer_records,
            .max_element_bytes = w->max_element_bytes,
            .snapshot_path = td->snapshot_path,
            .weight = td->weight,
        };
        rc = task_start(&cfg, spec, &wt->task, err, sizeof err);
        wt->running = rc == 0;
    }
    if (rc < 0) {
        log_error("task %" PRIu64 " failed: %s", td->task_id, err);
        wt->failure_logged = true;
        if (task_new_failed(td->task_id, rc, err, &wt->task) < 0) {
            free(wt);
            return;
        }
    } else {
        log_info("task %" PRIu64 " started: dataset %s, iteration %" PRIu64 ", %s%s%s", td->task_id,
                 td->dataset_id ? td->dataset_id : "?", td->iteration_id,
                 mode_name((enum sluice_mode)td->mode),
                 td->snapshot_path && td->snapshot_path[0] ? ", saving into " : "",
                 td->snapshot_path ? td->snapshot_path : "");
    }
    rc = rounds_init(&wt->rounds, td->num_consumers);
    if (rc == SLUICE_ERR_INVALID)
        task_fail(wt->task, rc, "too many consumers");
    else if (rc < 0)
        task_fail(wt->task, rc, "no memory for the task's rounds");
    wt->next = w->tasks;
    w->tasks = wt;
}

/* ---- wakeups ---------------------------------------------------------------------------- */

static void on_wake(uv_async_t *a)
{
    struct worker *w = a->data;
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        if (wt->wait_head)
            worker_serve_waiters(w, wt);
        worker_log_failure(wt);
        worker_lease_pump(w, wt);
    }
    worker_reap(w);
    drain_check(w);
    worker_tick_adjust(w);
}

/* ---- draining ---------------------------------------------------------------------------- */

static void leave_done(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct worker *w = user;
    (void)reply;
    bool complete = w->drain_deadline_ms != 0;
    if (status < 0)
        log_warn("deregistering from dispatcher %s failed: %s (it will evict this worker after "
                 "its timeout and lease its splits again)",
                 w->disp_address, msg ? msg : sluice_strerror(status));
    else
        log_info("deregistered from dispatcher %s", w->disp_address);
    void (*cb)(void *, bool) = w->drain_cb;
    w->drain_cb = NULL;
    if (cb && !w->closing)
        cb(w->drain_user, complete);
}

/* Whether the drain is over: every task finished (or failed), or the deadline passed. Then the
 * worker deregisters: the dispatcher removes it, and anything it still held goes back to the
 * pool for other workers. */
static void drain_check(struct worker *w)
{
    if (!w->draining || w->leaving || w->closing)
        return;
    bool all = true;
    uint64_t now = worker_now_ms();
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        struct task_progress tp;
        task_progress(wt->task, &tp);
        if (tp.buffered < wt->drain_buffered || wt->drain_progress_ms == 0)
            wt->drain_progress_ms = now;
        wt->drain_buffered = tp.buffered;
        /* A stopped copy (not distributed_epoch) whose readers stopped taking from it has
         * nothing more to give: its copy ends here anyway. */
        bool stalled = !task_is_distributed(wt->task) && tp.done &&
                       now - wt->drain_progress_ms >= WORKER_DRAIN_IDLE_MS;
        /* A whole copy is over for its readers once each got its end of sequence with the count
         * of what it was sent: leaving before would look like a lost worker to them. */
        bool ends = !wt->counted || worker_ends_sent(wt);
        if (!((tp.finished && ends) || tp.failed || stalled))
            all = false;
    }
    /* Readers that stopped asking (gone, or done with this worker) are not waited for. */
    bool idle = now - w->last_fetch_ms >= WORKER_DRAIN_IDLE_MS;
    if (!all && !idle && now < w->drain_deadline_ms)
        return;
    if (!all && idle) {
        log_info("drain: no reader asked for elements for %u ms: leaving (what is undelivered "
                 "goes to other workers)",
                 (unsigned)WORKER_DRAIN_IDLE_MS);
    } else if (!all) {
        log_warn("drain: not every task finished within the drain timeout: leaving anyway (its "
                 "unfinished splits go to other workers)");
        w->drain_deadline_ms = 0; /* marks the drain incomplete */
    } else {
        log_info("drain: every task finished and was fetched");
    }
    w->leaving = true;
    Sluice__WorkerHeartbeatRequest req = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    req.address = w->address;
    req.draining = true;
    req.leaving = true;
    req.worker_key.data = w->key;
    req.worker_key.len = sizeof w->key;
    req.host_id = w->host_id;
    req.n_labels = w->nlabels;
    req.labels = w->label_v;
    req.task_slots = w->task_slots;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &req;
    /* An unreachable dispatcher is not waited for: it evicts this worker after its timeout. */
    int rc = rpc_client_connected(w->disp)
                 ? rpc_call(w->disp, &env, WORKER_LEAVE_TIMEOUT_MS, leave_done, w)
                 : SLUICE_ERR_UNAVAILABLE;
    if (rc < 0)
        leave_done(rc, "dispatcher not connected", NULL, w);
}

void worker_drain(struct worker *w, uint32_t timeout_ms, void (*cb)(void *user, bool complete),
                  void *user)
{
    if (w->closing || w->draining)
        return;
    w->draining = true;
    w->drain_deadline_ms = worker_now_ms() + (timeout_ms ? timeout_ms : 1);
    if (w->last_fetch_ms < worker_now_ms())
        w->last_fetch_ms = worker_now_ms(); /* the idle clock starts now */
    w->drain_cb = cb;
    w->drain_user = user;
    size_t n = 0;
    for (struct wtask *wt = w->tasks; wt; wt = wt->next, n++) {
        /* A task read in rounds keeps producing: the dispatcher moves its consumers to other
         * tasks at a round they have not reached yet, and it serves its rounds until then
         * (the drain ends once no reader has asked for a while). */
        if (wt->rounds.n > 0)
            continue;
        if (task_drain(wt->task) < 0)
            log_warn("task %" PRIu64 ": cannot hand its splits back: %s (they go back when the "
                     "worker leaves)",
                     wt->id, sluice_strerror(SLUICE_ERR_NOMEM));
        worker_lease_pump(w, wt);
    }
    log_info("draining: %zu task(s) finish what they started and serve it; at most %" PRIu32 " ms",
             n, timeout_ms);
    /* Tell the dispatcher now, so it leases this worker nothing more. */
    if (w->hb_inflight)
        w->hb_again = true;
    else
        worker_hb_send(w);
    drain_check(w);
}

void worker_on_tick(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t now = worker_now_ms();
    uint64_t now_ns = uv_hrtime();
    if (w->parked_head)
        worker_unpark(w, 0, false);
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        if (wt->wait_head) {
            if (task_steal(wt->task, now_ns) > 0)
                worker_serve_waiters(w, wt);
            worker_expire_waiters(w, wt, now);
        }
        if (wt->has_xtc)
            xtc_expire(&wt->xtc, now);
        worker_lease_pump(w, wt);
    }
    worker_reap(w);
    /* A stopped task whose producers still run holds a thread (and a core, if it spins) until
     * its function returns, or the worker closes, when it is abandoned: said once, so it does
     * not go unnoticed, and its pool thread is given up to it so the other tasks keep the
     * whole pool. */
    for (struct wtask *wt = w->dying; wt; wt = wt->next) {
        if (wt->stuck_logged || wt->abandoned || now < wt->dying_since_ms + WORKER_ABANDON_MS ||
            task_exited(wt->task))
            continue;
        wt->stuck_logged = true;
        unsigned retired = task_retire(wt->task);
        log_warn("task %" PRIu64 ": its pipeline has not stopped %d ms after its cancellation (a "
                 "function that neither returns nor notices cancellation); it keeps its thread "
                 "until the function returns or the worker stops%s",
                 wt->id, WORKER_ABANDON_MS,
                 retired ? ", and the pool starts another in its place" : "");
    }
    drain_check(w);
    worker_tick_adjust(w);
}

/* ---- start and close -------------------------------------------------------------------- */

static void derive_address(struct worker *w, const char *advertise)
{
    if (advertise && *advertise) {
        snprintf(w->address, sizeof w->address, "%s", advertise);
        return;
    }
    const char *host = w->host;
    char name[256];
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 || host[0] == '\0') {
        if (gethostname(name, sizeof name) == 0) {
            name[sizeof name - 1] = '\0';
            host = name;
        }
    }
    if (strchr(host, ':'))
        snprintf(w->address, sizeof w->address, "[%s]:%d", host, w->port);
    else
        snprintf(w->address, sizeof w->address, "%s:%d", host, w->port);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct worker *w = h->data;
    if (--w->handles > 0)
        return;
    void (*cb)(void *) = w->close_cb;
    void *user = w->close_user;
    pipe_buf_release(&w->scratch);
    wmetrics_destroy(w->wm);
    for (size_t i = 0; i < w->nlocal_fds; i++) {
        close(w->local_fds[i].fd);
        inproc_link_unref(w->local_fds[i].link);
    }
    free(w->local_fds);
    uv_mutex_destroy(&w->local_mu);
    /* Every task was freed or abandoned: the pool's threads are idle, but for those retired. */
    pool_destroy(w->pool);
    free(w);
    if (cb)
        cb(user);
}

/* The last step of closing: once the server, the client and every task are gone, the handles
 * close, and the last close callback frees the worker. */
static void maybe_finish_close(struct worker *w)
{
    if (!w->closing || w->handles_closing || w->srv_open || w->disp_open || w->dying)
        return;
    w->handles_closing = true;
    uv_close((uv_handle_t *)&w->hb_timer, on_handle_closed);
    uv_close((uv_handle_t *)&w->tick_timer, on_handle_closed);
    uv_close((uv_handle_t *)&w->wake, on_handle_closed);
    uv_close((uv_handle_t *)&w->local_async, on_handle_closed);
}

/* inproc.h's accept callback, on a reader's thread with the registry locked: queue the end for
 * the loop thread. */
static int local_accept(void *user, uv_os_sock_t fd, struct inproc_link *link)
{
    struct worker *w = user;
    uv_mutex_lock(&w->local_mu);
    if (w->nlocal_fds == w->cap_local_fds) {
        size_t cap = w->cap_local_fds ? 2 * w->cap_local_fds : 4;
        struct local_pending *v = realloc(w->local_fds, cap * sizeof *v);
        if (!v) {
            uv_mutex_unlock(&w->local_mu);
            return SLUICE_ERR_NOMEM;
        }
        w->local_fds = v;
        w->cap_local_fds = cap;
    }
    w->local_fds[w->nlocal_fds++] = (struct local_pending){fd, link};
    uv_mutex_unlock(&w->local_mu);
    uv_async_send(&w->local_async);
    return 0;
}

/* The loop thread serves the ends readers in this process handed over. */
static void on_local_async(uv_async_t *a)
{
    struct worker *w = a->data;
    for (;;) {
        uv_mutex_lock(&w->local_mu);
        bool have = w->nlocal_fds > 0;
        struct local_pending p =
            have ? w->local_fds[--w->nlocal_fds] : (struct local_pending){-1, NULL};
        uv_mutex_unlock(&w->local_mu);
        if (!have)
            return;
        if (w->closing || !w->srv_open) {
            close(p.fd);
            inproc_link_unref(p.link);
            continue;
        }
        /* The link is rpc_server_adopt's in any case; fd is ours again when it fails. */
        int rc = rpc_server_adopt(w->srv, p.fd, p.link, NULL);
        if (rc < 0) {
            log_debug("in-process connection refused: %s", sluice_strerror(rc));
            close(p.fd);
        }
    }
}

/* shm_sock.h's accept callback, on the loop thread: a reader of this host with its region. */
static void on_shm_accept(void *user, uv_os_sock_t fd, struct shm_region *region)
{
    struct worker *w = user;
    if (w->closing || !w->srv_open) {
        close(fd);
        shm_region_unref(region);
        return;
    }
    int rc = rpc_server_adopt(w->srv, fd, NULL, region);
    if (rc < 0) {
        log_debug("shared-memory connection refused: %s", sluice_strerror(rc));
        close(fd);
    }
}

/* The shared-memory listener has closed: one handle fewer to wait for. */
static void on_shm_closed(void *user)
{
    struct worker *w = user;
    on_handle_closed((uv_handle_t *)&w->wake);
}

static void on_srv_closed(void *user)
{
    struct worker *w = user;
    w->srv_open = false;
    maybe_finish_close(w);
}

static void on_disp_closed(void *user)
{
    struct worker *w = user;
    w->disp_open = false;
    maybe_finish_close(w);
}

int worker_start(uv_loop_t *loop, const struct worker_opts *opts, struct worker **out, char *err,
                 size_t errlen)
{
    if (!opts->dispatcher || !opts->reg)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "worker: no dispatcher or registry");
    if (opts->advertise && *opts->advertise) {
        char h[256];
        int p;
        int rc = rpc_parse_address(opts->advertise, h, sizeof h, &p, err, errlen);
        if (rc < 0)
            return rc;
    }
    struct worker *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "worker: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    if (wmetrics_create(&w->wm) < 0) {
        free(w);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "worker: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    }
    w->loop = loop;
    w->reg = opts->reg;
    unsigned threads = opts->threads ? opts->threads : worker_default_threads();
    unsigned cores = uv_available_parallelism();
    w->producers = cores < threads ? (cores ? cores : 1) : threads;
    w->buffer_bytes = opts->buffer_bytes;
    w->buffer_records = opts->buffer_records;
    w->max_element_bytes = opts->max_element_bytes;
    w->max_tasks = opts->max_tasks;
    w->task_slots = opts->task_slots;
    w->max_buffer_bytes = opts->max_buffer_bytes;
    w->incarnation = rpc_new_incarnation();
    ratelimit_init(&w->refusals, 60000);
    int krc = cap_random(w->key);
    if (krc < 0) {
        wmetrics_destroy(w->wm);
        free(w);
        return err_set(err, errlen, krc, "worker: drawing its secret: %s", sluice_strerror(krc));
    }
    snprintf(w->label_buf, sizeof w->label_buf, "%s", opts->labels ? opts->labels : "");
    for (char *p = w->label_buf; *p && w->nlabels < LABELS_MAX;) {
        w->label_v[w->nlabels++] = p;
        p = strchr(p, ',');
        if (!p)
            break;
        *p++ = '\0';
    }
    krc = hostid_get(w->host_id, sizeof w->host_id, err, errlen);
    if (krc < 0) {
        wmetrics_destroy(w->wm);
        free(w);
        return krc;
    }
    krc = pool_create(threads, &w->pool);
    if (krc < 0) {
        wmetrics_destroy(w->wm);
        free(w);
        return err_set(err, errlen, krc, "worker: starting %u producer threads: %s", threads,
                       sluice_strerror(krc));
    }
    w->hb_fixed = opts->heartbeat_ms != 0;
    w->hb_ms = opts->heartbeat_ms ? opts->heartbeat_ms : WORKER_DEFAULT_HEARTBEAT_MS;
    snprintf(w->disp_address, sizeof w->disp_address, "%s", opts->dispatcher);

    /* The server first: a failed listen leaves nothing open. */
    struct rpc_server_opts so = {
        .host = opts->host,
        .port = opts->port,
        .role = SLUICE__ROLE__ROLE_WORKER,
        .incarnation = w->incarnation,
        .handshake_timeout_ms = opts->handshake_timeout_ms,
        .max_connections = opts->max_connections,
        .max_handshakes = opts->max_handshakes,
        .on_request = worker_on_request,
        .on_close = worker_on_conn_close,
        .user = w,
        .sec = opts->sec,
    };
    int rc = rpc_server_start(loop, &so, &w->srv, err, errlen);
    if (rc < 0) {
        pool_destroy(w->pool);
        wmetrics_destroy(w->wm);
        free(w);
        return rc;
    }
    w->srv_open = true;
    snprintf(w->host, sizeof w->host, "%s", rpc_server_host(w->srv));
    w->port = rpc_server_port(w->srv);
    derive_address(w, opts->advertise);

    struct rpc_client_opts co = {
        .address = opts->dispatcher,
        .role = SLUICE__ROLE__ROLE_WORKER,
        .incarnation = w->incarnation,
        .on_connect = worker_on_connect,
        .user = w,
        .sec = opts->sec,
    };
    char cerr[SLUICE_ERRMSG_SIZE];
    rc = rpc_client_new(loop, &co, &w->disp, cerr, sizeof cerr);
    if (rc < 0) {
        err_set(err, errlen, rc, "dispatcher: %s", cerr);
        /* The server closes in the background; the caller runs the loop to let it finish. */
        pool_destroy(w->pool);
        wmetrics_destroy(w->wm);
        rpc_server_close(w->srv, free, w);
        return rc;
    }
    w->disp_open = true;

    /* Timers and async handles on a live loop cannot fail to initialize. */
    uv_async_init(loop, &w->wake, on_wake);
    uv_async_init(loop, &w->local_async, on_local_async);
    uv_mutex_init(&w->local_mu);
    uv_timer_init(loop, &w->hb_timer);
    uv_timer_init(loop, &w->tick_timer);
    w->wake.data = w->hb_timer.data = w->tick_timer.data = w->local_async.data = w;
    w->handles = 4;
    if (opts->in_process &&
        inproc_register(w->address, w->incarnation, local_accept, w, &w->local) < 0)
        log_warn("in-process reads: out of memory; readers in this process use TCP");
    if (opts->shm) {
        char why[SLUICE_ERRMSG_SIZE];
        if (shm_sock_listen(loop, w->incarnation, rpc_server_idle_timeout_ms(w->srv), on_shm_accept,
                            w, &w->shm, why, sizeof why) == 0)
            w->handles++;
        else
            log_warn("%s; readers on this host use TCP", why);
    }
    uv_timer_start(&w->hb_timer, worker_on_hb_timer, 0, w->hb_ms);
    w->tick_ms = WORKER_TICK_SLOW_MS;
    uv_timer_start(&w->tick_timer, worker_on_tick, w->tick_ms, w->tick_ms);
    *out = w;
    return 0;
}

const char *worker_host(const struct worker *w)
{
    return w->host;
}

int worker_port(const struct worker *w)
{
    return w->port;
}

const char *worker_address(const struct worker *w)
{
    return w->address;
}

bool worker_ready(const struct worker *w, char *why, size_t whylen)
{
    if (w->closing || w->leaving || w->draining) {
        snprintf(why, whylen, "%s", w->draining ? "draining" : "stopping");
        return false;
    }
    if (!w->hb_ok) {
        snprintf(why, whylen, "not registered with dispatcher %s (%s)", w->disp_address,
                 w->hb_failures ? "its heartbeats fail" : "no heartbeat answered yet");
        return false;
    }
    return true;
}

int worker_metrics_render(struct worker *w, char **body, size_t *len)
{
    wmetrics_pass_begin(w->wm);
    for (struct wtask *wt = w->tasks; wt; wt = wt->next) {
        struct task_progress tp;
        task_progress(wt->task, &tp);
        wmetrics_task_seen(w->wm, wt->id, &tp);
        struct task_stage st[TASK_STAGES_MAX];
        task_stages(wt->task, &tp, wt->send_ns, st);
        wmetrics_task_stages(w->wm, wt->job_id, wt->id, st);
        wmetrics_task_busy(w->wm, wt->job_id, wt->id, tp.busy_ns);
        if (wt->has_xtc)
            wmetrics_xtc_seen(w->wm, wt->xtc.bytes);
    }
    wmetrics_pass_end(w->wm);
    /* Authentication failures count on both sides of the worker: readers it refused, and the
     * dispatcher it dialled that could not prove the token (or refused the worker's). */
    if (w->srv_open) {
        struct rpc_counts c = {rpc_server_auth_failures(w->srv) +
                                   (w->disp_open ? rpc_client_auth_failures(w->disp) : 0),
                               rpc_server_refused(w->srv), rpc_server_handshake_timeouts(w->srv),
                               rpc_server_handshake_evictions(w->srv)};
        wmetrics_connections(w->wm, &c);
    }
    /* About 10 KB: on the heap, away from the loop thread's stack. */
    struct obj_stats *os = malloc(sizeof *os);
    if (!os)
        return SLUICE_ERR_NOMEM;
    obj_stats(os);
    int rc = wmetrics_objects(w->wm, os);
    free(os);
    return rc < 0 ? rc : wmetrics_render(w->wm, body, len);
}

/* WORKER_ABANDON_MS after the close began: tasks whose producers still run are abandoned, so a
 * function that never returns cannot hold the worker's shutdown. */
static void on_abandon_due(uv_timer_t *timer)
{
    struct worker *w = timer->data;
    for (struct wtask *wt = w->dying; wt; wt = wt->next) {
        if (wt->abandoned || task_exited(wt->task))
            continue;
        log_error("task %" PRIu64 ": its pipeline did not stop within %d ms of its cancellation "
                  "(a function that neither returns nor notices cancellation); its threads are "
                  "abandoned",
                  wt->id, WORKER_ABANDON_MS);
        task_abandon(wt->task);
        wt->abandoned = true;
    }
    worker_reap(w);
}

void worker_close(struct worker *w, void (*cb)(void *user), void *user)
{
    if (w->closing)
        return;
    w->closing = true;
    w->close_cb = cb;
    w->close_user = user;
    /* No reader in this process hands over another end from here on. */
    inproc_unregister(w->local);
    w->local = NULL;
    /* Nor does a reader on this host connect over shared memory. */
    if (w->shm) {
        shm_sock_close(w->shm, on_shm_closed, w);
        w->shm = NULL;
    }
    uv_timer_stop(&w->hb_timer);
    uv_timer_stop(&w->tick_timer);
    uv_timer_start(&w->tick_timer, on_abandon_due, WORKER_ABANDON_MS, 0);
    worker_unpark(w, 0, true);
    while (w->tasks)
        worker_remove_task(w, w->tasks, SLUICE_ERR_UNAVAILABLE, "the worker is shutting down");
    rpc_server_close(w->srv, on_srv_closed, w);
    rpc_client_close(w->disp, on_disp_closed, w);
    worker_reap(w);
}
