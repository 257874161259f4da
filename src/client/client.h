/* The client object (struct sluice_client of sluice.h) and its loop thread.
 *
 * Happy path: sluice_client_open() starts a thread running a libuv loop that owns every
 * connection of the client (one to the dispatcher, one per worker address). A public call
 * packages its work as a client_op, queues it under the client's mutex, wakes the loop
 * (uv_async_send) and waits on the client's condition variable until the loop marks the op done.
 * Calls to the dispatcher go through client_disp_call(), which retries transient failures with
 * backoff until the client's timeout (forever when it is 0), because a dispatcher may be
 * restarting. Failure modes: a dispatcher that stays unreachable past the timeout fails the call
 * with SLUICE_ERR_TIMEOUT and "dispatcher H:P unreachable for N ms"; a dispatcher that answers
 * with an error fails the call with its code and message.
 *
 * Threads: functions marked "loop thread" must run on the client's loop thread (inside an op or
 * a libuv callback); client_submit() and client_request() must run on any other thread. */
#ifndef SLUICE_CLIENT_CLIENT_H
#define SLUICE_CLIENT_CLIENT_H

#include "sluice/sluice.h"

#include "common/rpc_client.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* A dispatcher address, or the list of its replicas (rpc.h); or a worker address. */
#define CLIENT_ADDR_MAX RPC_ADDRESS_LIST_MAX
/* Bounds of the reply buffer pool: what it keeps for reuse, and the largest block it keeps. */
#define CLIENT_POOL_BYTES (64u << 20)
#define CLIENT_POOL_MAX_BLOCK (64u << 20)

struct client_op;
struct client_conn;
struct disp_call;

/* Runs on the loop thread; must lead to exactly one client_op_done(), now or later. */
typedef void (*client_op_fn)(struct sluice_client *c, struct client_op *op);

/* Work handed to the loop thread. The submitting thread owns the op and keeps it alive until
 * client_submit() returns; the loop never touches it after client_op_done(). */
struct client_op {
    client_op_fn run;
    void *user;
    int rc;    /* the result, set by client_op_done() */
    bool done; /* guarded by the client's mutex */
    struct client_op *next;
};

/* Called on the loop thread whenever the loop is woken (a queued op, a reader freeing buffer
 * space, an interrupt). Registered by iterators to refill their buffers. */
struct client_waker {
    void (*fn)(struct client_waker *w);
    struct client_waker *prev, *next;
};

struct security_ctx;

struct sluice_client {
    char address[CLIENT_ADDR_MAX]; /* the dispatcher, as given */
    uint32_t timeout_ms;
    struct sluice_registry *reg; /* built-ins and plugins; read-only after open */
    uint64_t incarnation;        /* sent in our Hello */
    /* Buffers of large replies: filled on the loop thread, handed to readers with the payloads
     * and given back by them when decoded. Any thread. */
    struct bufpool *pool;
    /* Authentication and TLS for every connection; read-only after open. */
    struct security_ctx *sec;

    uv_loop_t loop;
    uv_thread_t thread;
    pid_t pid; /* the process that opened the client: only it has the thread */
    uv_async_t wake;
    uv_timer_t retry_timer;

    uv_mutex_t mu;
    uv_cond_t cond;                        /* broadcast when an op is done */
    struct client_op *ops_head, *ops_tail; /* guarded by mu */
    bool stop;                             /* guarded by mu: sluice_client_close() was called */

    /* Loop thread only. */
    struct rpc_client *disp;
    struct client_conn *conns;     /* worker connections, shared by address */
    struct client_waker *wakers;   /* iterators to refill on wake */
    struct disp_call *retrying;    /* dispatcher calls waiting for their next attempt */
    struct disp_call *cancellable; /* calls under way that their caller may give up */
    uint64_t rnd;                  /* jitter generator state */
    bool stopping;
    unsigned disp_pending; /* dispatcher calls accepted and not yet finished */
    /* The last transient failure of a dispatcher call; "" after a success. */
    char disp_why[SLUICE_ERRMSG_SIZE];
};

/* Queues op, wakes the loop and waits until the loop marks it done; returns op->rc. Not on the
 * loop thread. In a child forked from the process that opened the client (client_owned false)
 * the op is not run and SLUICE_ERR_INVALID is returned at once: the loop thread is not there. */
int client_submit(struct sluice_client *c, struct client_op *op);

/* Whether the calling process is the one that opened c (a forked child has a copy of c but not
 * its thread, and a lock another thread held at the fork stays held in the copy). */
bool client_owned(const struct sluice_client *c);

/* Marks op done with result rc and wakes its submitter. Loop thread. */
void client_op_done(struct sluice_client *c, struct client_op *op, int rc);

/* ---- the dispatcher (loop thread) ------------------------------------------------------- */

/* Called exactly once per accepted dispatcher call. status, msg and reply as for rpc_reply_cb;
 * incarnation is the dispatcher's incarnation as known when the answer came (0 if it was never
 * reached). */
typedef void (*client_disp_cb)(int status, const char *msg, const Sluice__Envelope *reply,
                               uint64_t incarnation, void *user);

/* Sends req to the dispatcher. req is borrowed until cb runs. timeout_ms bounds the whole call
 * (0: no bound). With retry, transient failures (retry_transient) are retried with backoff
 * until the bound, then reported as SLUICE_ERR_TIMEOUT with "dispatcher H:P unreachable for N
 * ms: why" (or "... did not answer within N ms" when connected); without retry the first
 * failure is reported. Returns 0 and later calls cb; or SLUICE_ERR_NOMEM / SLUICE_ERR_CLOSED
 * (client stopping) without calling cb. Loop thread. */
int client_disp_call(struct sluice_client *c, Sluice__Envelope *req, uint32_t timeout_ms,
                     bool retry, client_disp_cb cb, void *user);

/* Copies what the caller needs out of a successful reply; runs on the loop thread while the
 * reply is valid. Returns 0 or a negative code with a message in err. */
typedef int (*client_take_fn)(const Sluice__Envelope *reply, void *user, char *err, size_t errlen);

/* A blocking dispatcher call with retries bounded by the client's timeout: sends req (owned by
 * the caller), checks that the answer's body is want, runs take on it. *incarnation (may be
 * NULL) receives the dispatcher's incarnation at the answer. Returns 0, or a negative code with
 * a message in err: the dispatcher's own for an Error reply. Not on the loop thread. */
int client_request(struct sluice_client *c, Sluice__Envelope *req, Sluice__Envelope__BodyCase want,
                   client_take_fn take, void *user, uint64_t *incarnation, char *err,
                   size_t errlen);
/* client_request() that gives up once *cancel is non-zero (cancel may be NULL: never): a
 * retry waiting for its next attempt ends at the next client_wake() with SLUICE_ERR_CANCELLED,
 * "interrupted"; an attempt already sent to a connected dispatcher waits for its answer. */
int client_request_cancellable(struct sluice_client *c, Sluice__Envelope *req,
                               Sluice__Envelope__BodyCase want, client_take_fn take, void *user,
                               uint64_t *incarnation, const atomic_int *cancel, char *err,
                               size_t errlen);

/* ---- workers (loop thread) -------------------------------------------------------------- */

/* A connection to the worker at address, shared by every task there: returns it with one more
 * reference, creating it on first use. NULL with a message in err for a bad address or no
 * memory. A worker of that incarnation (0: any) running in this process is reached over an
 * in-process connection (common/inproc.h) rather than TCP; with shm_bytes above 0, a worker
 * process of that incarnation on this host over shared memory (rpc_client_opts.shm_bytes).
 * Reads asking for different shm_bytes get connections of their own. */
struct client_conn *client_conn_acquire(struct sluice_client *c, const char *address,
                                        uint64_t incarnation, uint64_t shm_bytes, char *err,
                                        size_t errlen);
/* Drops a reference; the last one closes the connection, which fails its pending calls with
 * SLUICE_ERR_CANCELLED. */
void client_conn_release(struct sluice_client *c, struct client_conn *conn);
struct rpc_client *client_conn_rpc(const struct client_conn *conn);

/* ---- wakers (loop thread) --------------------------------------------------------------- */

void client_waker_add(struct sluice_client *c, struct client_waker *w);
void client_waker_remove(struct sluice_client *c, struct client_waker *w);

/* Wakes the loop from any thread (async-signal-safe, as uv_async_send is). */
void client_wake(struct sluice_client *c);

/* The facts about the dispatcher for wait_reason (waiting.h): the address, whether it is away
 * and why, whether a call is under way. Strings point into c and rpc state. Loop thread. */
struct wait_facts;
void client_disp_facts(struct sluice_client *c, struct wait_facts *f);

/* ---- shared with the iterator --------------------------------------------------------- */

/* Parses and checks pipeline text, registers it and writes the dataset id to id_out. The
 * engine behind sluice_register(). Not on the loop thread. */
int client_register(struct sluice_client *c, const char *pipeline,
                    const struct sluice_register_options *options, char *id_out, size_t idlen,
                    char *err, size_t errlen);

#endif
