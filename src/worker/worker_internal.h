/* What the worker shell's files share: the worker and its task table. worker.c holds the task
 * table, wakeups, draining, the tick, start and close; serve.c answers readers (GetElements,
 * coordinated rounds, waiting readers); heartbeat.c talks to the dispatcher (heartbeats and
 * split leasing). Everything here runs on the worker's loop thread. */

#ifndef SLUICE_WORKER_WORKER_INTERNAL_H
#define SLUICE_WORKER_WORKER_INTERNAL_H

#include "worker.h"

#include "common/labels.h"
#include "common/ratelimit.h"
#include "common/cap.h"
#include "common/hostid.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/shm_sock.h"
#include "lease.h"
#include "pool.h"
#include "rounds.h"
#include "pipeline/def.h"
#include "pipeline/registry.h"
#include "pipeline/split.h"
#include "task.h"
#include "wmetrics.h"
#include "xtcache.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WORKER_TICK_FAST_MS 2
#define WORKER_TICK_SLOW_MS 50
#define WORKER_HEARTBEAT_TIMEOUT_MS 10000
#define WORKER_SPLITS_TIMEOUT_MS 10000
/* Tasks' split requests sent in one GetSplitsBatch at most (the dispatcher takes 256). */
#define WORKER_SPLITS_BATCH_MAX 64
/* A trainer id that has not read from a task's cross-trainer cache for this long is forgotten:
 * the dispatcher's default client timeout, after which it releases a silent reader. */
#define WORKER_XTC_IDLE_MS 30000
/* After a close begins, how long a stopped task's producers may take to exit before they are
 * abandoned (task_abandon). */
#define WORKER_ABANDON_MS 3000

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
    uint64_t client_id;
    bool whole; /* a deterministic reader: it takes splits whole (splitown.h) */
    /* A parked read: the capability it presented, checked once its task is known. */
    uint8_t client_key[CAP_KEY_LEN];
    size_t client_key_len;
    /* A task with a cross-trainer cache: the reading trainer's id ("" when the request had
     * none; one longer than XTC_TRAINER_ID_MAX is cut short to XTC_TRAINER_ID_MAX + 1 bytes, and
     * refused). */
    char trainer[XTC_TRAINER_ID_MAX + 2];
};

/* Elements a task sent one reader (client id), for the count its end of sequence carries. */
struct delivery {
    uint64_t client_id;
    uint64_t elements;
    bool ended; /* the reader was sent the end of sequence */
};
/* Readers a task counts for; a task read by more (a huge shared job) stops counting for new
 * ones, whose end of sequence then carries no count. */
#define WORKER_MAX_DELIVERIES 4096

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
    bool abandoned; /* its producers did not stop in time: forgotten, never freed (task_abandon) */
    bool running;   /* its producers were started (it counts against max_tasks) */
    bool stuck_logged;       /* said once that its producers outlive their cancellation (and
                              * their pool threads were retired, task_retire) */
    uint64_t dying_since_ms; /* when it was removed (stopped) */
    bool splits_inflight;
    bool failure_logged;
    bool end_reported;         /* the dispatcher was told at once that this task finished */
    unsigned replies_inflight; /* replies sent from the task's chunks and not yet written */
    struct shm_region *arena;  /* the one the task builds in (task_set_arena), NULL for none */
    unsigned splits_failures;
    /* The request_seq of the task's GetSplits calls. */
    struct lease_numbers splits_numbers;
    uint64_t incarnation; /* of the dispatcher that assigned the task */
    uint64_t rate_produced, rate_at_ms;
    double rate;
    /* Elements and encoded bytes sent to readers, reported in every heartbeat. */
    uint64_t served_elements, served_bytes;
    /* Nanoseconds spent sending the task's replies: from the take to the reply's bytes being
     * written (summed over replies; a stage of TaskProgress.stages). */
    uint64_t send_ns;
    struct rounds rounds; /* coordinated reads (rounds.h); n 0 for other tasks */
    uint64_t job_id;
    /* The task's secret: only requests with the capability derived from it for their client id
     * are served (cap.h). Not set for a task of an older iteration (not checked). */
    bool has_key;
    uint8_t task_key[CAP_KEY_LEN];
    /* Whether the end of sequence carries a count (not in splits, not in rounds), and the
     * counts, sorted by client id. */
    bool counted;
    struct delivery *deliveries;
    size_t ndeliveries;
    /* A task of a job read with a cross-trainer cache (xtcache.h): every read is served from
     * its trainer's cursor in the cache, which takes elements from the task's buffer when a
     * trainer has read everything it holds. */
    bool has_xtc;
    struct xtc xtc;
};

struct worker {
    uv_loop_t *loop;
    const struct sluice_registry *reg;
    struct pool *pool;  /* every task's producers run here (a save's task excepted) */
    unsigned producers; /* per distributed_epoch task: min(cores, pool size) */
    uint64_t buffer_bytes, buffer_records;
    uint64_t max_element_bytes;
    unsigned max_tasks;        /* 0: no limit */
    unsigned task_slots;       /* sent in heartbeats; 0: no limit */
    uint64_t max_buffer_bytes; /* 0: no limit */
    struct rpc_server *srv;
    struct rpc_client *disp;
    uint64_t incarnation;
    uint8_t key[CAP_KEY_LEN];     /* this process's secret (cap.h); never logged */
    char host_id[HOSTID_MAX + 1]; /* this process's host (hostid.h), sent in heartbeats */
    /* Its labels (worker_opts.labels), sent in heartbeats: nlabels strings in label_buf. */
    char label_buf[LABELS_TEXT_MAX + 1];
    char *label_v[LABELS_MAX];
    size_t nlabels;
    /* Reads refused for a wrong client key, logged at most once a minute per peer address. */
    struct ratelimit refusals;
    uint64_t disp_incarnation; /* 0 before the first handshake */
    uv_async_t wake;
    /* In-process connections (worker_opts.in_process): the registry's entry, and the accepted
     * ends handed over by readers' threads (under local_mu), adopted on the loop thread when
     * local_async fires. */
    struct inproc_entry *local;
    /* The shared-memory socket (worker_opts.shm), NULL when off or closed. */
    struct shm_listener *shm;
    uv_async_t local_async;
    uv_mutex_t local_mu;
    struct local_pending {
        uv_os_sock_t fd;
        struct inproc_link *link;
    } * local_fds;
    size_t nlocal_fds, cap_local_fds;
    uv_timer_t hb_timer;
    uv_timer_t tick_timer;
    uint64_t tick_ms;
    uint32_t hb_ms;
    bool hb_fixed;
    /* The dispatcher answered a GetSplitsBatch SLUICE_ERR_UNSUPPORTED: tasks ask on their own. */
    bool splits_one_by_one;
    bool hb_inflight;
    bool hb_again; /* send another heartbeat as soon as the one in flight returns */
    unsigned hb_failures;
    bool hb_ok;         /* the last heartbeat was answered: registered with the dispatcher */
    uint64_t hb_seq;    /* heartbeats sent; the one in flight (if any) has this number */
    uint64_t worker_id; /* the id the dispatcher last answered with; 0 before the first */
    /* Reads of tasks not known yet, answered after the next heartbeat reply (FIFO). */
    struct waiter *parked_head, *parked_tail;
    struct wtask *tasks;
    struct wtask *dying;
    size_t nwaiters;
    char host[256];
    int port;
    char address[512];
    char disp_address[RPC_ADDRESS_LIST_MAX]; /* as given: one address, or the replicas' */
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

/* Sends a heartbeat to the dispatcher now (task states, leases, draining); its reply adds and
 * removes tasks. */
void worker_hb_send(struct worker *w);
/* Asks the dispatcher that assigned wt for splits (reporting finished and returned ones) when
 * its task needs them and no GetSplits call is in flight. */
void worker_lease_pump(struct worker *w, struct wtask *wt);
/* The dispatcher client connected (incarnation: the dispatcher's); reports at once. */
void worker_on_connect(struct rpc_client *client, uint64_t incarnation, void *user);
/* The heartbeat timer. */
void worker_on_hb_timer(uv_timer_t *t);

/* serve.c */

/* Answers every reader waiting on wt with code (not found, or an error with why) and frees them. */
void worker_drop_waiters(struct worker *w, struct wtask *wt, int code, const char *why);
/* Answers waits that ran out with no elements (the reader simply asks again). */
void worker_expire_waiters(struct worker *w, struct wtask *wt, uint64_t now);
/* A closed connection's waiting reads can never be answered; forget them now. */
void worker_on_conn_close(struct rpc_server *srv, struct rpc_conn *conn, void *user);
/* The rpc server's request callback: GetElements and Read. */
void worker_on_request(struct rpc_server *srv, struct rpc_conn *conn, const Sluice__Envelope *req,
                       void *user);
/* A task just ended for its readers: tell the dispatcher now rather than at the next tick, so
 * the iteration is marked finished and readers end without waiting out a heartbeat interval. */
void worker_report_end(struct worker *w, struct wtask *wt);
/* Whether every reader the task sent elements to (as far as it counts them) was also sent the end
 * of sequence, with its count. */
bool worker_ends_sent(const struct wtask *wt);
/* Serves waiting readers in arrival order for as long as the buffer has elements for them; a
 * task read in rounds serves whole rounds (serve_rounds). */
void worker_serve_waiters(struct worker *w, struct wtask *wt);
/* Runs the tick fast while readers wait and slowly otherwise. */
void worker_tick_adjust(struct worker *w);
/* Answers the parked reads that were waiting for heartbeat hb_done (all of them with force):
 * served when their task is known now, else told it is not. */
void worker_unpark(struct worker *w, uint64_t hb_done, bool force);

/* worker.c */

/* Starts the task td describes, unless it is already live (a failure to start is logged). */
void worker_add_task(struct worker *w, const Sluice__TaskDef *td);
/* The live task with this id, or NULL. */
struct wtask *worker_find_task(struct worker *w, uint64_t id);
/* Logs the task's failure, once. */
void worker_log_failure(struct wtask *wt);
/* A monotonic clock in milliseconds. */
uint64_t worker_now_ms(void);
/* The tick timer: publishes held-back elements, expires waits, retries and reports leases. */
void worker_on_tick(uv_timer_t *t);
/* Frees dying tasks whose producers have exited, whose GetSplits call has completed and whose
 * replies sent from their chunks are written. */
void worker_reap(struct worker *w);
/* Takes wt off the live list (its waiting readers get code and why), stops it and moves it to
 * the dying list, where worker_reap frees it. */
void worker_remove_task(struct worker *w, struct wtask *wt, int code, const char *why);

#endif
