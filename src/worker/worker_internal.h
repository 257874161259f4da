/* What the worker shell's files share: the worker and its task table. worker.c holds the task
 * table, wakeups, draining, the tick, start and close; serve.c answers readers (GetElements,
 * coordinated rounds, waiting readers); heartbeat.c talks to the dispatcher (heartbeats and
 * split leasing). Everything here runs on the worker's loop thread. */

#ifndef SLUICE_WORKER_WORKER_INTERNAL_H
#define SLUICE_WORKER_WORKER_INTERNAL_H

#include "worker.h"

#include "common/error.h"
#include "common/log.h"
#include "common/rpc.h"
#include "lease.h"
#include "rounds.h"
#include "pipeline/def.h"
#include "pipeline/registry.h"
#include "pipeline/split.h"
#include "task.h"
#include "wmetrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WORKER_TICK_FAST_MS 2
#define WORKER_TICK_SLOW_MS 50
#define WORKER_HEARTBEAT_TIMEOUT_MS 10000
#define WORKER_SPLITS_TIMEOUT_MS 10000

struct waiter {
    struct waiter *next;
    struct rpc_conn *conn; /* referenced */
    uint64_t id;
    uint32_t max_elements;
    uint64_t max_bytes;
    uint64_t deadline_ms;
    uint64_t task_id;  /* a parked read (see park) */
    uint64_t hb_need;  /* a parked read: answered once heartbeat number hb_need has returned */
    uint32_t consumer; /* coordinated reads: the reader's consumer index */
    uint64_t round;    /* coordinated reads: the round asked for */
};

struct wtask {
    /* Draining: the buffered count last seen and when it last went down. */
    uint64_t drain_buffered, drain_progress_ms;
    struct wtask *next;
    struct worker *w;
    uint64_t id;
    struct task *task;
    struct waiter *wait_head, *wait_tail; /* FIFO: readers are served in arrival order */
    size_t nwait;
    bool dying;
    bool splits_inflight;
    bool failure_logged;
    bool end_reported;         /* the dispatcher was told at once that this task finished */
    unsigned replies_inflight; /* replies sent from the task's chunks and not yet written */
    unsigned splits_failures;
    /* The request_seq of the task's GetSplits calls. */
    struct lease_numbers splits_numbers;
    uint64_t incarnation; /* of the dispatcher that assigned the task */
    uint64_t rate_produced, rate_at_ms;
    double rate;
    struct rounds rounds; /* coordinated reads (rounds.h); n 0 for other tasks */
};

struct worker {
    uv_loop_t *loop;
    const struct sluice_registry *reg;
    unsigned threads;
    uint64_t buffer_bytes, buffer_records;
    struct rpc_server *srv;
    struct rpc_client *disp;
    uint64_t incarnation;
    uint64_t disp_incarnation; /* 0 before the first handshake */
    uv_async_t wake;
    uv_timer_t hb_timer;
    uv_timer_t tick_timer;
    uint64_t tick_ms;
    uint32_t hb_ms;
    bool hb_fixed;
    bool hb_inflight;
    bool hb_again; /* send another heartbeat as soon as the one in flight returns */
    unsigned hb_failures;
    uint64_t hb_seq; /* heartbeats sent; the one in flight (if any) has this number */
    /* Reads of tasks not known yet, answered after the next heartbeat reply (FIFO). */
    struct waiter *parked_head, *parked_tail;
    struct wtask *tasks;
    struct wtask *dying;
    size_t nwaiters;
    char host[256];
    int port;
    char address[512];
    char disp_address[512];
    struct pipe_buf scratch;
    struct wmetrics *wm; /* owned; see wmetrics.h */

    /* Draining (worker_drain): no new tasks or splits; done once every task finished or the
     * deadline passed, then the worker deregisters (leaving) and calls drain_cb. */
    bool draining, leaving;
    uint64_t drain_deadline_ms;
    uint64_t last_fetch_ms; /* when a reader last asked for elements */
    void (*drain_cb)(void *user, bool complete);
    void *drain_user;

    bool closing;
    bool srv_open, disp_open;
    unsigned handles; /* open uv handles of our own */
    bool handles_closing;
    void (*close_cb)(void *user);
    void *close_user;
};

/* heartbeat.c */

void worker_hb_send(struct worker *w);
void worker_lease_pump(struct worker *w, struct wtask *wt);
void worker_on_connect(struct rpc_client *client, uint64_t incarnation, void *user);
void worker_on_hb_timer(uv_timer_t *t);

/* serve.c */

void worker_drop_waiters(struct worker *w, struct wtask *wt, int code, const char *why);
void worker_expire_waiters(struct worker *w, struct wtask *wt, uint64_t now);
void worker_on_conn_close(struct rpc_server *srv, struct rpc_conn *conn, void *user);
void worker_on_request(struct rpc_server *srv, struct rpc_conn *conn, const Sluice__Envelope *req,
                       void *user);
void worker_report_end(struct worker *w, struct wtask *wt);
void worker_serve_waiters(struct worker *w, struct wtask *wt);
void worker_tick_adjust(struct worker *w);
void worker_unpark(struct worker *w, uint64_t hb_done, bool force);

/* worker.c */

void worker_add_task(struct worker *w, const Sluice__TaskDef *td);
struct wtask *worker_find_task(struct worker *w, uint64_t id);
void worker_log_failure(struct wtask *wt);
uint64_t worker_now_ms(void);
void worker_on_tick(uv_timer_t *t);
void worker_reap(struct worker *w);
void worker_remove_task(struct worker *w, struct wtask *wt, int code, const char *why);

#endif
