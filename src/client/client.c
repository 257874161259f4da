/* The client object: its loop thread, the op queue that feeds it, calls to the dispatcher with
 * retries, shared worker connections, and the public calls that are one dispatcher request
 * (sluice_register, sluice_status). See client.h for the happy path and failure modes. */
#include "client.h"

#include "retry.h"
#include "waiting.h"

#include "common/backoff.h"
#include "common/bufpool.h"
#include "common/error.h"
#include "common/loop_thread.h"
#include "common/names.h"
#include "common/security.h"
#include "pipeline/def.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/spec.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the op queue ------------------------------------------------------------------------- */

bool client_owned(const struct sluice_client *c)
{
    return getpid() == c->pid;
}

int client_submit(struct sluice_client *c, struct client_op *op)
{
    if (!client_owned(c))
        return SLUICE_ERR_INVALID;
    op->done = false;
    op->next = NULL;
    uv_mutex_lock(&c->mu);
    if (c->ops_tail)
        c->ops_tail->next = op;
    else
        c->ops_head = op;
    c->ops_tail = op;
    uv_mutex_unlock(&c->mu);
    uv_async_send(&c->wake);

    uv_mutex_lock(&c->mu);
    while (!op->done)
        uv_cond_wait(&c->cond, &c->mu);
    uv_mutex_unlock(&c->mu);
    return op->rc;
}

void client_op_done(struct sluice_client *c, struct client_op *op, int rc)
{
    uv_mutex_lock(&c->mu);
    op->rc = rc;
    op->done = true;
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
}

void client_wake(struct sluice_client *c)
{
    uv_async_send(&c->wake);
}

void client_waker_add(struct sluice_client *c, struct client_waker *w)
{
    w->prev = NULL;
    w->next = c->wakers;
    if (c->wakers)
        c->wakers->prev = w;
    c->wakers = w;
}

void client_waker_remove(struct sluice_client *c, struct client_waker *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else if (c->wakers == w)
        c->wakers = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

/* ---- dispatcher calls --------------------------------------------------------------------- */

struct disp_call {
    struct sluice_client *c;
    Sluice__Envelope *req;
    uint32_t timeout_ms;
    bool retry;
    uint64_t started, due; /* loop time, ms */
    uint32_t attempt;
    char why[SLUICE_ERRMSG_SIZE]; /* the last transient failure */
    client_disp_cb cb;
    void *user;
    const atomic_int *cancel;           /* gives up once non-zero; NULL: never */
    struct disp_call *next;             /* in c->retrying */
    struct disp_call *next_cancellable; /* in c->cancellable while an attempt is under way */
};

/* A call with a cancel flag is listed while an attempt is under way, so that a wake can
 * withdraw it. */
static void cancellable_add(struct disp_call *dc)
{
    if (!dc->cancel)
        return;
    dc->next_cancellable = dc->c->cancellable;
    dc->c->cancellable = dc;
}

static void cancellable_remove(struct disp_call *dc)
{
    if (!dc->cancel)
        return;
    for (struct disp_call **p = &dc->c->cancellable; *p; p = &(*p)->next_cancellable) {
        if (*p == dc) {
            *p = dc->next_cancellable;
            break;
        }
    }
    dc->next_cancellable = NULL;
}

static bool disp_cancelled(const struct disp_call *dc)
{
    return dc->cancel && atomic_load(dc->cancel);
}

static void disp_attempt(struct disp_call *dc);

static void disp_finish(struct disp_call *dc, int status, const char *msg,
                        const Sluice__Envelope *reply)
{
    struct sluice_client *c = dc->c;
    uint64_t inc = c->disp ? rpc_client_peer_incarnation(c->disp) : 0;
    assert(c->disp_pending > 0);
    c->disp_pending--;
    if (status == 0)
        c->disp_why[0] = '\0';
    dc->cb(status, msg, reply, inc, dc->user);
    free(dc);
}

/* Ends a call whose bound ran out, naming the dispatcher and how long it was tried. */
static void disp_give_up(struct disp_call *dc)
{
    char msg[CLIENT_ADDR_MAX + sizeof dc->why + 64];
    /* The rpc layer's own timeout message repeats the address and the wait; only the reason
     * after them is worth quoting. */
    const char *why = dc->why;
    const char *after = strstr(why, " ms: ");
    if (strncmp(why, "no connection to ", 17) == 0 && after)
        why = after + 5;
    if (rpc_client_connected(dc->c->disp))
        snprintf(msg, sizeof msg, "dispatcher %s did not answer within %" PRIu32 " ms",
                 dc->c->address, dc->timeout_ms);
    else
        snprintf(msg, sizeof msg, "dispatcher %s unreachable for %" PRIu32 " ms%s%s",
                 dc->c->address, dc->timeout_ms, why[0] ? ": " : "", why);
    disp_finish(dc, SLUICE_ERR_TIMEOUT, msg, NULL);
}

static void on_retry_timer(uv_timer_t *t);

static void rearm_retry_timer(struct sluice_client *c)
{
    if (!c->retrying) {
        uv_timer_stop(&c->retry_timer);
        return;
    }
    uint64_t due = c->retrying->due;
    for (struct disp_call *dc = c->retrying->next; dc; dc = dc->next)
        if (dc->due < due)
            due = dc->due;
    uint64_t now = uv_now(&c->loop);
    uv_timer_start(&c->retry_timer, on_retry_timer, due > now ? due - now : 0, 0);
}

static void on_retry_timer(uv_timer_t *t)
{
    struct sluice_client *c = t->data;
    uint64_t now = uv_now(&c->loop);
    /* Take the due calls out first: an attempt may fail at once and queue itself again. */
    struct disp_call *due = NULL, **p = &c->retrying;
    while (*p) {
        struct disp_call *dc = *p;
        if (dc->due <= now) {
            *p = dc->next;
            dc->next = due;
            due = dc;
        } else {
            p = &dc->next;
        }
    }
    while (due) {
        struct disp_call *dc = due;
        due = dc->next;
        dc->next = NULL;
        disp_attempt(dc);
    }
    rearm_retry_timer(c);
}

/* Handles a transient failure: waits and tries again, or gives up at the bound. */
static void disp_retry(struct disp_call *dc, const char *why)
{
    struct sluice_client *c = dc->c;
    if (why && *why)
        snprintf(dc->why, sizeof dc->why, "%s", why);
    if (disp_cancelled(dc)) {
        disp_finish(dc, SLUICE_ERR_CANCELLED, "interrupted", NULL);
        return;
    }
    uint64_t now = uv_now(&c->loop);
    uint64_t deadline = dc->started + dc->timeout_ms;
    if (dc->timeout_ms && now >= deadline) {
        disp_give_up(dc);
        return;
    }
    uint64_t due =
        now + backoff_delay(dc->attempt, RETRY_BASE_MS, RETRY_MAX_MS, backoff_random(&c->rnd));
    if (dc->attempt < UINT32_MAX)
        dc->attempt++;
    if (dc->timeout_ms && due > deadline)
        due = deadline;
    dc->due = due;
    dc->next = c->retrying;
    c->retrying = dc;
    rearm_retry_timer(c);
}

static void on_disp_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct disp_call *dc = user;
    cancellable_remove(dc);
    if (status < 0 && disp_cancelled(dc)) {
        disp_finish(dc, SLUICE_ERR_CANCELLED, "interrupted", NULL);
        return;
    }
    if (status < 0 && retry_transient(status) && msg && *msg)
        snprintf(dc->c->disp_why, sizeof dc->c->disp_why, "%s", msg);
    if (status < 0 && dc->retry && !dc->c->stopping && retry_transient(status)) {
        disp_retry(dc, msg);
        return;
    }
    disp_finish(dc, status, msg, reply);
}

static void disp_attempt(struct disp_call *dc)
{
    struct sluice_client *c = dc->c;
    if (c->stopping) {
        disp_finish(dc, SLUICE_ERR_CANCELLED, "client closed", NULL);
        return;
    }
    if (disp_cancelled(dc)) {
        disp_finish(dc, SLUICE_ERR_CANCELLED, "interrupted", NULL);
        return;
    }
    uint32_t timeout = 0;
    if (dc->timeout_ms) {
        uint64_t elapsed = uv_now(&c->loop) - dc->started;
        if (elapsed >= dc->timeout_ms) {
            disp_give_up(dc);
            return;
        }
        timeout = (uint32_t)(dc->timeout_ms - elapsed);
    }
    int rc = rpc_call(c->disp, dc->req, timeout, on_disp_reply, dc);
    if (rc == 0) {
        cancellable_add(dc);
        return;
    }
    if (dc->retry && rc != SLUICE_ERR_CLOSED)
        disp_retry(dc, sluice_strerror(rc));
    else
        disp_finish(dc, rc, sluice_strerror(rc), NULL);
}

static int disp_call_start(struct sluice_client *c, Sluice__Envelope *req, uint32_t timeout_ms,
                           bool retry, const atomic_int *cancel, client_disp_cb cb, void *user)
{
    if (c->stopping)
        return SLUICE_ERR_CLOSED;
    struct disp_call *dc = calloc(1, sizeof *dc);
    if (!dc)
        return SLUICE_ERR_NOMEM;
    dc->c = c;
    dc->cancel = cancel;
    dc->req = req;
    dc->timeout_ms = timeout_ms;
    dc->retry = retry;
    dc->started = uv_now(&c->loop);
    dc->cb = cb;
    dc->user = user;
    c->disp_pending++;
    int rc = rpc_call(c->disp, req, timeout_ms, on_disp_reply, dc);
    if (rc == 0) {
        cancellable_add(dc);
        return 0;
    }
    if (retry && rc != SLUICE_ERR_CLOSED) {
        disp_retry(dc, sluice_strerror(rc));
        return 0;
    }
    c->disp_pending--;
    free(dc);
    return rc;
}

int client_disp_call(struct sluice_client *c, Sluice__Envelope *req, uint32_t timeout_ms,
                     bool retry, client_disp_cb cb, void *user)
{
    return disp_call_start(c, req, timeout_ms, retry, NULL, cb, user);
}

/* Ends the calls whose caller gave up (on a wake, which the caller sends after setting its
 * flag): those waiting to be retried at once, those waiting for a connection once withdrawn
 * (their callback then runs from a timer). A call already written waits for its answer. */
static void disp_cancel_retries(struct sluice_client *c)
{
    for (struct disp_call *dc = c->cancellable; dc; dc = dc->next_cancellable)
        if (disp_cancelled(dc))
            rpc_client_withdraw(c->disp, on_disp_reply, dc);
    struct disp_call *gone = NULL, **p = &c->retrying;
    while (*p) {
        struct disp_call *dc = *p;
        if (disp_cancelled(dc)) {
            *p = dc->next;
            dc->next = gone;
            gone = dc;
        } else {
            p = &dc->next;
        }
    }
    if (!gone)
        return;
    while (gone) {
        struct disp_call *dc = gone;
        gone = dc->next;
        disp_finish(dc, SLUICE_ERR_CANCELLED, "interrupted", NULL);
    }
    rearm_retry_timer(c);
}

/* A blocking request: the op runs the call on the loop thread and copies the answer out. */
struct request_op {
    struct client_op op;
    struct sluice_client *c;
    Sluice__Envelope *req;
    Sluice__Envelope__BodyCase want;
    client_take_fn take;
    void *user;
    const atomic_int *cancel;
    uint64_t incarnation;
    char *err;
    size_t errlen;
};

static void on_request_reply(int status, const char *msg, const Sluice__Envelope *reply,
                             uint64_t incarnation, void *user)
{
    struct request_op *r = user;
    r->incarnation = incarnation;
    int rc = status;
    if (rc < 0) {
        err_set(r->err, r->errlen, rc, "%s", msg && *msg ? msg : sluice_strerror(rc));
    } else if (!reply || reply->body_case != r->want) {
        rc = err_set(r->err, r->errlen, SLUICE_ERR_PROTOCOL,
                     "dispatcher %s sent an unexpected reply", r->c->address);
    } else if (r->take) {
        rc = r->take(reply, r->user, r->err, r->errlen);
    }
    client_op_done(r->c, &r->op, rc);
}

static void run_request(struct sluice_client *c, struct client_op *op)
{
    struct request_op *r = (struct request_op *)op;
    int rc = disp_call_start(c, r->req, c->timeout_ms, true, r->cancel, on_request_reply, r);
    if (rc < 0)
        client_op_done(c, op, err_set(r->err, r->errlen, rc, "%s", sluice_strerror(rc)));
}

int client_request(struct sluice_client *c, Sluice__Envelope *req, Sluice__Envelope__BodyCase want,
                   client_take_fn take, void *user, uint64_t *incarnation, char *err, size_t errlen)
{
    return client_request_cancellable(c, req, want, take, user, incarnation, NULL, err, errlen);
}

int client_request_cancellable(struct sluice_client *c, Sluice__Envelope *req,
                               Sluice__Envelope__BodyCase want, client_take_fn take, void *user,
                               uint64_t *incarnation, const atomic_int *cancel, char *err,
                               size_t errlen)
{
    struct request_op r = {
        .op = {.run = run_request},
        .c = c,
        .req = req,
        .want = want,
        .take = take,
        .user = user,
        .cancel = cancel,
        .err = err,
        .errlen = errlen,
    };
    if (!client_owned(c))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the client was opened by process %ld, not this one (a forked child)",
                       (long)c->pid);
    int rc = client_submit(c, &r.op);
    if (incarnation)
        *incarnation = r.incarnation;
    return rc;
}

/* ---- worker connections ------------------------------------------------------------------- */

struct client_conn {
    struct client_conn *next;
    struct rpc_client *rpc;
    unsigned refs;
    uint64_t shm_bytes;
    char address[CLIENT_ADDR_MAX];
};

struct client_conn *client_conn_acquire(struct sluice_client *c, const char *address,
                                        uint64_t incarnation, uint64_t shm_bytes, char *err,
                                        size_t errlen)
{
    for (struct client_conn *w = c->conns; w; w = w->next) {
        if (strcmp(w->address, address) == 0 && w->shm_bytes == shm_bytes) {
            w->refs++;
            return w;
        }
    }
    if (strlen(address) >= CLIENT_ADDR_MAX) {
        err_set(err, errlen, SLUICE_ERR_INVALID, "worker address too long");
        return NULL;
    }
    struct client_conn *w = calloc(1, sizeof *w);
    if (!w) {
        err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        return NULL;
    }
    strcpy(w->address, address);
    w->shm_bytes = shm_bytes;
    struct rpc_client_opts opts = {
        .address = address,
        .role = SLUICE__ROLE__ROLE_CLIENT,
        .incarnation = c->incarnation,
        .pool = c->pool,
        .sec = c->sec,
        /* Workers only: the dispatcher is verified against the host it is dialled by. */
        .tls_name = c->sec ? c->sec->tls_worker_name : NULL,
        .local = true,
        .local_incarnation = incarnation,
        .shm_bytes = shm_bytes,
    };
    if (rpc_client_new(&c->loop, &opts, &w->rpc, err, errlen) != 0) {
        free(w);
        return NULL;
    }
    w->refs = 1;
    w->next = c->conns;
    c->conns = w;
    return w;
}

static void on_conn_closed(void *user)
{
    free(user);
}

void client_conn_release(struct sluice_client *c, struct client_conn *conn)
{
    assert(conn->refs > 0);
    if (--conn->refs > 0)
        return;
    for (struct client_conn **p = &c->conns; *p; p = &(*p)->next) {
        if (*p == conn) {
            *p = conn->next;
            break;
        }
    }
    /* Pending calls fail from inside rpc_client_close; their owners expect that. */
    rpc_client_close(conn->rpc, on_conn_closed, conn);
}

struct rpc_client *client_conn_rpc(const struct client_conn *conn)
{
    return conn->rpc;
}

/* ---- the loop thread ---------------------------------------------------------------------- */

static void shutdown_loop(struct sluice_client *c)
{
    /* Every iterator must be closed before its client. */
    assert(c->wakers == NULL);
    c->stopping = true;
    /* Calls waiting for a retry end now; calls in flight end from rpc_client_close. */
    while (c->retrying) {
        struct disp_call *dc = c->retrying;
        c->retrying = dc->next;
        disp_finish(dc, SLUICE_ERR_CANCELLED, "client closed", NULL);
    }
    rpc_client_close(c->disp, NULL, NULL);
    c->disp = NULL;
    while (c->conns) {
        struct client_conn *w = c->conns;
        c->conns = w->next;
        rpc_client_close(w->rpc, on_conn_closed, w);
    }
    uv_close((uv_handle_t *)&c->retry_timer, NULL);
    uv_close((uv_handle_t *)&c->wake, NULL);
}

static void on_wake(uv_async_t *a)
{
    struct sluice_client *c = a->data;
    if (c->stopping)
        return;
    uv_mutex_lock(&c->mu);
    struct client_op *ops = c->ops_head;
    c->ops_head = c->ops_tail = NULL;
    bool stop = c->stop;
    uv_mutex_unlock(&c->mu);

    while (ops) {
        struct client_op *op = ops;
        ops = op->next;
        op->run(c, op);
    }
    for (struct client_waker *w = c->wakers, *next; w; w = next) {
        next = w->next;
        w->fn(w);
    }
    disp_cancel_retries(c);
    if (stop)
        shutdown_loop(c);
}

static void loop_main(void *arg)
{
    struct sluice_client *c = arg;
    uv_run(&c->loop, UV_RUN_DEFAULT);
}

/* ---- public: open and close --------------------------------------------------------------- */

int sluice_client_open(const struct sluice_client_options *options, struct sluice_client **out,
                       char *err, size_t errlen)
{
    int rc;
    struct rpc_address replicas[RPC_MAX_ADDRESSES];
    size_t nreplicas;
    if (out)
        *out = NULL;
    if (!options || !out || !options->dispatcher || !*options->dispatcher)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a dispatcher address is required");
    /* One address, or the replicas' (rpc_client.h finds the leader among them). */
    rc = rpc_parse_address_list(options->dispatcher, replicas, RPC_MAX_ADDRESSES, &nreplicas, err,
                                errlen);
    if (rc)
        return rc;
    if (strlen(options->dispatcher) >= CLIENT_ADDR_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "dispatcher address too long");
    if (options->nplugins > 0 && !options->plugins)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "plugins missing");

    struct sluice_client *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    strcpy(c->address, options->dispatcher);
    c->timeout_ms = options->timeout_ms;
    c->pid = getpid();
    c->incarnation = rpc_new_incarnation();
    c->rnd = c->incarnation;

    rc = security_ctx_new(&options->security, SECURITY_CLIENT, &c->sec, err, errlen);
    if (rc)
        goto fail_client;
    rc = bufpool_new(CLIENT_POOL_BYTES, CLIENT_POOL_MAX_BLOCK, &c->pool);
    if (rc) {
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        goto fail_sec;
    }
    rc = pipe_registry_new(&c->reg);
    if (rc) {
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        goto fail_pool;
    }
    for (size_t i = 0; i < options->nplugins; i++) {
        rc = pipe_registry_load_plugin(c->reg, options->plugins[i], err, errlen);
        if (rc)
            goto fail_registry;
    }
    rc = uv_loop_init(&c->loop);
    if (rc) {
        err_set(err, errlen, rc, "event loop: %s", uv_strerror(rc));
        goto fail_registry;
    }
    rc = uv_mutex_init(&c->mu);
    if (rc) {
        err_set(err, errlen, rc, "mutex: %s", uv_strerror(rc));
        goto fail_loop;
    }
    rc = uv_cond_init(&c->cond);
    if (rc) {
        err_set(err, errlen, rc, "condition variable: %s", uv_strerror(rc));
        goto fail_mutex;
    }
    rc = uv_async_init(&c->loop, &c->wake, on_wake);
    if (rc) {
        err_set(err, errlen, rc, "async handle: %s", uv_strerror(rc));
        goto fail_cond;
    }
    c->wake.data = c;
    uv_timer_init(&c->loop, &c->retry_timer);
    c->retry_timer.data = c;

    /* Made before the thread starts, so nothing else touches the loop yet. */
    struct rpc_client_opts ropts = {
        .address = c->address,
        .role = SLUICE__ROLE__ROLE_CLIENT,
        .incarnation = c->incarnation,
        .sec = c->sec,
    };
    rc = rpc_client_new(&c->loop, &ropts, &c->disp, err, errlen);
    if (rc)
        goto fail_handles;
    /* Signals blocked: the program's signals reach its own threads, and a worker that vanishes
     * mid-write costs the write EPIPE, not the program a SIGPIPE. */
    rc = loop_thread_spawn(&c->thread, loop_main, c);
    if (rc) {
        err_set(err, errlen, rc, "thread: %s", uv_strerror(rc));
        rpc_client_close(c->disp, NULL, NULL);
        goto fail_handles;
    }
    *out = c;
    return 0;

fail_handles:
    uv_close((uv_handle_t *)&c->retry_timer, NULL);
    uv_close((uv_handle_t *)&c->wake, NULL);
    uv_run(&c->loop, UV_RUN_DEFAULT);
fail_cond:
    uv_cond_destroy(&c->cond);
fail_mutex:
    uv_mutex_destroy(&c->mu);
fail_loop:
    uv_loop_close(&c->loop);
fail_registry:
    pipe_registry_free(c->reg);
fail_pool:
    bufpool_free(c->pool);
fail_sec:
    security_ctx_free(c->sec);
fail_client:
    free(c);
    return rc;
}

void sluice_client_close(struct sluice_client *c)
{
    /* In a forked child the client is the parent's: its thread is not here to join, and the
     * child's exit releases the copy. */
    if (!c || !client_owned(c))
        return;
    uv_mutex_lock(&c->mu);
    c->stop = true;
    uv_mutex_unlock(&c->mu);
    uv_async_send(&c->wake);
    uv_thread_join(&c->thread);
    int rc = uv_loop_close(&c->loop);
    assert(rc == 0);
    (void)rc;
    uv_cond_destroy(&c->cond);
    uv_mutex_destroy(&c->mu);
    pipe_registry_free(c->reg);
    bufpool_free(c->pool);
    security_ctx_free(c->sec);
    free(c);
}

/* ---- public: what the client waits for -------------------------------------------------- */

void client_disp_facts(struct sluice_client *c, struct wait_facts *f)
{
    f->dispatcher = c->address;
    bool connected = c->disp && rpc_client_connected(c->disp);
    f->disp_down = !connected || c->disp_why[0];
    f->disp_why = !connected && c->disp ? rpc_client_why(c->disp) : c->disp_why;
    if (!connected && !*f->disp_why)
        f->disp_why = c->disp_why;
    f->disp_busy = c->disp_pending > 0;
}

struct waiting_op {
    struct client_op op;
    char *buf;
    size_t len;
};

static void run_waiting(struct sluice_client *c, struct client_op *op)
{
    struct waiting_op *w = (struct waiting_op *)op;
    struct wait_facts f = {0};
    client_disp_facts(c, &f);
    client_op_done(c, op, wait_reason(&f, w->buf, w->len));
}

int sluice_client_waiting(struct sluice_client *client, char *buf, size_t len)
{
    if (!client || !buf || len == 0)
        return SLUICE_ERR_INVALID;
    buf[0] = '\0';
    struct waiting_op w = {.op = {.run = run_waiting}, .buf = buf, .len = len};
    return client_submit(client, &w.op);
}

/* ---- public: register and status ---------------------------------------------------------- */

struct id_out {
    char *id;
    size_t idlen;
};

static int take_dataset_id(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    struct id_out *o = user;
    const Sluice__RegisterDatasetReply *r = reply->register_dataset_reply;
    if (!r || !r->dataset_id || !*r->dataset_id)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "dispatcher sent no dataset id");
    if (strlen(r->dataset_id) >= o->idlen)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE,
                       "dataset id '%s' does not fit in %zu bytes", r->dataset_id, o->idlen);
    strcpy(o->id, r->dataset_id);
    return 0;
}

int client_register(struct sluice_client *c, const char *pipeline,
                    const struct sluice_register_options *options, char *id_out, size_t idlen,
                    char *err, size_t errlen)
{
    struct pipe_spec *spec = NULL;
    uint8_t *def_bytes = NULL;
    size_t def_len = 0;
    Sluice__DatasetDef *def = NULL;
    char *text = NULL;

    /* The dispatcher refuses a bad id the same way; checking first tells the user before any
     * round trip. */
    int rc = name_check("dataset id", options->dataset_id ? options->dataset_id : "", NAME_ID_MAX,
                        err, errlen);
    if (rc == 0)
        rc = pipe_parse(pipeline, &spec, err, errlen);
    if (rc == 0)
        rc = pipe_registry_check(c->reg, spec, err, errlen);
    if (rc)
        goto done;
    /* In the definition, so the dispatcher's identity of a dataset (its definition bytes)
     * tells the two apart. */
    spec->deterministic = options->deterministic;
    rc = pipe_spec_encode(spec, &def_bytes, &def_len);
    if (rc) {
        err_set(err, errlen, rc, "encode pipeline: %s", sluice_strerror(rc));
        goto done;
    }
    /* The request embeds the definition as a message, so the bytes are read back into one. */
    def = sluice__dataset_def__unpack(NULL, def_len, def_bytes);
    if (!def) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "encode pipeline: %s",
                     sluice_strerror(SLUICE_ERR_NOMEM));
        goto done;
    }
    int n = pipe_spec_format(spec, NULL, 0);
    if (n < 0) {
        rc = err_set(err, errlen, n, "format pipeline: %s", sluice_strerror(n));
        goto done;
    }
    text = malloc((size_t)n + 1);
    if (!text) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        goto done;
    }
    pipe_spec_format(spec, text, (size_t)n + 1);

    Sluice__RegisterDatasetRequest req = SLUICE__REGISTER_DATASET_REQUEST__INIT;
    req.dataset = def;
    req.dataset_id = options->dataset_id ? (char *)options->dataset_id : "";
    req.compression = options->compression == SLUICE_COMPRESSION_NONE
                          ? SLUICE__COMPRESSION__COMPRESSION_NONE
                          : SLUICE__COMPRESSION__COMPRESSION_AUTO;
    req.split_size = options->split_size;
    req.pipeline = text;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_REGISTER_DATASET;
    env.register_dataset = &req;
    struct id_out o = {id_out, idlen};
    rc = client_request(c, &env, SLUICE__ENVELOPE__BODY_REGISTER_DATASET_REPLY, take_dataset_id, &o,
                        NULL, err, errlen);
done:
    free(text);
    if (def)
        sluice__dataset_def__free_unpacked(def, NULL);
    free(def_bytes);
    pipe_spec_free(spec);
    return rc;
}

int sluice_register(struct sluice_client *client, const char *pipeline,
                    const struct sluice_register_options *options, char *id_out, size_t idlen,
                    char *err, size_t errlen)
{
    static const struct sluice_register_options defaults = {0};
    if (!client || !pipeline || !id_out || idlen == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "client, pipeline and an id buffer are required");
    if (!options)
        options = &defaults;
    if (options->compression != SLUICE_COMPRESSION_AUTO &&
        options->compression != SLUICE_COMPRESSION_NONE)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "unknown compression %d",
                       (int)options->compression);
    id_out[0] = '\0';
    return client_register(client, pipeline, options, id_out, idlen, err, errlen);
}

static int take_json(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    char **json = user;
    const Sluice__StatusReply *r = reply->status_reply;
    *json = strdup(r && r->json ? r->json : "{}");
    if (!*json)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    return 0;
}

int sluice_status_dataset(struct sluice_client *client, const char *dataset_id, char **json,
                          char *err, size_t errlen)
{
    if (!client || !json || !dataset_id || !dataset_id[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "client, dataset_id (not empty) and json are required");
    *json = NULL;
    Sluice__StatusRequest req = SLUICE__STATUS_REQUEST__INIT;
    req.dataset_id = (char *)dataset_id;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_STATUS;
    env.status = &req;
    return client_request(client, &env, SLUICE__ENVELOPE__BODY_STATUS_REPLY, take_json, json, NULL,
                          err, errlen);
}

int sluice_status(struct sluice_client *client, char **json, char *err, size_t errlen)
{
    if (!client || !json)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "client and json are required");
    *json = NULL;
    Sluice__StatusRequest req = SLUICE__STATUS_REQUEST__INIT;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_STATUS;
    env.status = &req;
    return client_request(client, &env, SLUICE__ENVELOPE__BODY_STATUS_REPLY, take_json, json, NULL,
                          err, errlen);
}
