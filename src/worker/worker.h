/* The worker process shell (docs/design.md §1, §2): an rpc server that answers GetElements from the
 * tasks' buffers, an rpc client that heartbeats the dispatcher and leases splits, and the table
 * of running tasks.
 *
 * Happy path: worker_start() listens at once and heartbeats the dispatcher (retrying until it
 * is reachable: a worker may start before its dispatcher). Each heartbeat reports every task's
 * progress; its reply starts new tasks (a TaskDef for a task already running is ignored), stops
 * removed ones and sets the heartbeat interval. GetElements takes whole encoded elements out of
 * a task's buffer, or, when the buffer is empty and more will come, waits up to
 * WORKER_POLL_MS for them (a long poll) before answering with none. A task read in coordinated
 * rounds answers a round only once every consumer waits for it, all at once (rounds.h). A reply
 * made of whole chunks is written from them without copying; the chunks go back to the task once it
 * is written. A GetElements for a task this worker does not know yet (the dispatcher has told the
 * reader before this worker's next heartbeat) sends a heartbeat at once and waits for its reply, so
 * the first read of a new task is served in a round trip rather than after the reader's backoff.
 *
 * Failure modes: while the dispatcher is unreachable, tasks keep producing and readers keep
 * reading; heartbeats and lease requests are retried. A dispatcher that comes back with another
 * incarnation (it restarted and lost its state) makes the worker drop every task and take the
 * new dispatcher's. A task that cannot run fails alone: it is logged, and its readers get the
 * error.
 *
 * Threading: every function here runs on the loop thread. */
#ifndef SLUICE_WORKER_WORKER_H
#define SLUICE_WORKER_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Longest a GetElements waits for elements before it is answered with none. It must stay well
 * below the readers' request timeout (ITER_FETCH_TIMEOUT_MS): a coordinated consumer skips a
 * round of a removed task only once its request has been answered or failed, so the worker must
 * never still count a read its reader has given up on. */
#define WORKER_POLL_MS 1000
/* How long a drain (SIGTERM) waits by default for readers to fetch what the worker holds. */
#define WORKER_DRAIN_TIMEOUT_MS 30000
/* A drain also ends once no reader has asked for elements for this long: nobody is left to
 * fetch what the worker holds (its splits go to other workers when it leaves). */
#define WORKER_DRAIN_IDLE_MS 2000
/* How long the deregistration at the end of a drain may take. */
#define WORKER_LEAVE_TIMEOUT_MS 3000
/* Heartbeat interval before the dispatcher has said otherwise. */
#define WORKER_DEFAULT_HEARTBEAT_MS 500
/* Reply sizes when a GetElements asks for 0 ("the default"), and the most any reply carries
 * (at least one element is always sent, however large). */
#define WORKER_DEFAULT_MAX_ELEMENTS 8192u
#define WORKER_DEFAULT_MAX_BYTES (8u << 20)
#define WORKER_MAX_REPLY_BYTES (64u << 20)
/* A read is answered only while its connection has less than this many bytes of replies queued
 * for writing (a reader that stopped reading holds at most this plus one reply). */
#define WORKER_MAX_PENDING_BYTES (64u << 20)
/* --max-element-bytes: the default, and the most it may be (an element must fit in one reply
 * frame, task.h's TASK_MAX_RECORD, with room for its encoding). */
#define WORKER_DEFAULT_MAX_ELEMENT_BYTES (128u << 20)
/* Tasks one worker runs at once, and the bytes their buffer bounds add up to (the defaults and
 * the ranges of --max-tasks and --max-buffer-bytes). */
#define WORKER_DEFAULT_MAX_TASKS 256u
#define WORKER_MAX_TASKS_LIMIT 100000u
#define WORKER_DEFAULT_MAX_BUFFER_BYTES (4ull << 30)
#define WORKER_MIN_BUFFER_BYTES (16ull << 20)
#define WORKER_MAX_ELEMENT_BYTES_LIMIT (267382784u - (64u << 10)) /* worker.c checks it */

/* The default size of the producer pool: enough threads for pipelines that block (sleeps, file
 * reads, Python functions) to keep the cores busy, and at least WORKER_MIN_DEFAULT_THREADS. */
#define WORKER_MIN_DEFAULT_THREADS 8u
/* The default pool size on this machine: max(WORKER_MIN_DEFAULT_THREADS, 2 x the cores this
 * process may run on), at most POOL_MAX_THREADS. Any thread. */
unsigned worker_default_threads(void);

struct sluice_registry;
struct worker;

struct worker_opts {
    const char *dispatcher; /* HOST:PORT or sluice://HOST:PORT; required */
    const char *host;       /* NULL: 127.0.0.1 */
    int port;               /* 0: any free port */
    const char *advertise;  /* HOST:PORT readers use; NULL: derived from the bound address */
    uint32_t heartbeat_ms;  /* 0: as the dispatcher says (WORKER_DEFAULT_HEARTBEAT_MS before) */
    /* The producer pool's threads (pool.h), 1 to POOL_MAX_THREADS; 0: WORKER_DEFAULT_THREADS.
     * Every task's producers run on them (a save's task excepted: it has threads of its own). */
    unsigned threads;
    const struct sluice_registry *reg; /* read-only from now on; outlives the worker */
    /* Per-task buffer bounds; 0 for the defaults of task.h. */
    uint64_t buffer_bytes;
    uint64_t buffer_records;
    /* The largest element a task may produce (pipe_elem_size); 0: no limit. */
    uint64_t max_element_bytes;
    /* The most tasks running at once, and the most bytes their buffer bounds (buffer_bytes, or
     * TASK_BUFFER_BYTES) add up to; 0: no limit. A task past either fails at its start. */
    unsigned max_tasks;
    uint64_t max_buffer_bytes;
    /* How many tasks the dispatcher may place here at once, sent in every heartbeat (the
     * dispatcher records it at registration); 0: no limit. */
    unsigned task_slots;
    /* The worker's labels, their canonical text (common/labels.h; NULL or "": none), sent in
     * every heartbeat (the dispatcher records them at registration). Copied. */
    const char *labels;
    /* Authentication and TLS for both the server and the dispatcher connection
     * (common/security.h); NULL for neither. It outlives the worker. */
    const struct security_ctx *sec;
    /* Connection limits of the RPC port (rpc_server_opts; 0: the defaults). */
    uint32_t handshake_timeout_ms;
    unsigned max_connections, max_handshakes;
    /* Serve readers in this process over in-process connections (common/inproc.h): the worker
     * registers under its address and incarnation, and a reader in the same process that dials
     * it gets a socket pair instead of a TCP connection (an embedded worker). */
    bool in_process;
    /* Serve readers in other processes on this host over the shared-memory socket
     * (common/shm_sock.h, docs/design.md "Shared-memory reads"). */
    bool shm;
};

/* Listens and starts heartbeating. Returns 0 and *out, or a negative code with a message in err
 * ("listen on HOST:PORT: why", "dispatcher: why"). After a failure the caller still runs the
 * loop until it has no more work before uv_loop_close(), because handles may be closing. */
int worker_start(uv_loop_t *loop, const struct worker_opts *opts, struct worker **out, char *err,
                 size_t errlen);

/* The bound host and port (the port is the real one when opts->port was 0). */
const char *worker_host(const struct worker *w);
int worker_port(const struct worker *w);
/* The address sent to the dispatcher for readers: opts->advertise, else the bound HOST:PORT, or
 * the machine's host name with the port when bound to a wildcard address. */
const char *worker_address(const struct worker *w);

/* Renders the worker's metrics in the Prometheus text format (wmetrics.h lists them), for an
 * http_render_cb: returns 0 with *body (malloc'd, the caller frees it) and *len, or
 * SLUICE_ERR_NOMEM. */
int worker_metrics_render(struct worker *w, char **body, size_t *len);

/* For GET /readyz: whether the worker is registered with its dispatcher (its last heartbeat was
 * answered) and not leaving; else false with the reason in why. Loop thread. */
bool worker_ready(const struct worker *w, char *why, size_t whylen);

/* Drains the worker (SIGTERM, docs/design.md §2): tells the dispatcher at once (it leases nothing
 * more to this worker and gives it no new tasks); distributed_epoch tasks hand back the splits
 * they have not started, finish the ones in progress and serve them; tasks read in coordinated
 * rounds keep producing (the dispatcher moves their consumers to other tasks at a round they have
 * not reached, and the task serves its rounds until then); other tasks stop producing and serve
 * what they buffered (their copy ends early). Once every task has finished (its
 * consumers received everything; for distributed_epoch the dispatcher confirmed it) or after
 * timeout_ms, the worker deregisters and cb(user, complete) is called, complete being false when
 * the timeout cut the drain short (what was not delivered then goes to other workers). The
 * caller then closes the worker. A second call is a no-op. */
void worker_drain(struct worker *w, uint32_t timeout_ms, void (*cb)(void *user, bool complete),
                  void *user);

/* Stops everything: answers waiting readers, stops the tasks, closes the server and the
 * dispatcher client, waits (without blocking the loop) for every producer to exit, closes every
 * handle, joins the pool's threads and then calls cb (may be NULL) and frees w. Calling it twice
 * is a no-op. */
void worker_close(struct worker *w, void (*cb)(void *user), void *user);

#endif
