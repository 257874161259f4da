/* sluice: the dispatcher and the worker as objects a program starts itself.
 *
 * `sluice-dispatcher` and `sluice-worker` are these calls behind a command line; a program (a
 * test, a notebook, the trainer itself) can start any number of each in its own process, the
 * way tf.data service's DispatchServer and WorkerServer are objects:
 *
 *     struct sluice_dispatcher *d;
 *     struct sluice_dispatcher_options dopts = {0};              // 127.0.0.1, a free port
 *     sluice_dispatcher_start(&dopts, &d, err, sizeof err);
 *     struct sluice_worker *w;
 *     struct sluice_worker_options wopts = {.dispatcher = sluice_dispatcher_target(d)};
 *     sluice_worker_start(&wopts, &w, err, sizeof err);
 *     ... read with the client of <sluice/sluice.h>, dispatcher = sluice_dispatcher_target(d) ...
 *     sluice_worker_stop(w);                                     // drains, then stops
 *     sluice_dispatcher_stop(d);
 *
 * Threads: each server runs its own event loop on a thread of its own, plus the threads it
 * starts (pipeline producers, the journal writer). Those threads block every asynchronous
 * signal, so the program's signals (SIGINT, SIGTERM, ...) reach the program's own threads, and a
 * peer that vanishes mid-write costs that connection an error, never the process a SIGPIPE.
 * Servers install no signal handlers: `sluice-worker` maps SIGTERM to sluice_worker_drain and
 * SIGINT to sluice_worker_shutdown itself. Every function below may be called from any thread
 * (but never from a pipeline function running inside the server).
 *
 * Logging: each server logs to stderr, one line per event ("info sluice-worker: ..."), at the
 * level of its options; servers in one process log independently.
 *
 * Errors: functions returning int return 0 or a negative code of <sluice/sluice.h>
 * (sluice_strerror), with a one-line message in err (errlen bytes, always NUL-terminated when
 * errlen > 0; err may be NULL; SLUICE_ERRMSG_SIZE bytes hold it). Options that are out of range or
 * missing are SLUICE_ERR_INVALID with a message naming the field ("port: expected a number from 0
 * to 65535, got 70000"); a start that fails leaves nothing running and nothing to free. */
#ifndef SLUICE_SERVER_H
#define SLUICE_SERVER_H

#include <sluice/sluice.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Dispatcher -------------------------------------------------------------------------- */

/* Keeps the cluster's state: datasets, jobs, iterations, tasks, workers, clients, split leases.
 * Readers and workers reach it at its target address. */
struct sluice_dispatcher;

/* Every field of the `sluice-dispatcher` command line has one here; a zero-initialised struct
 * (or NULL) gives the defaults. Strings and lists are copied by sluice_dispatcher_start. */
struct sluice_dispatcher_options {
    /* Address to listen on (--host); NULL: "127.0.0.1". "0.0.0.0" serves other machines. */
    const char *host;
    /* Port to listen on (--port), 0 to 65535; 0 picks a free one (the binary's default is 5050,
     * an embedded dispatcher's is 0). */
    int port;
    /* Fault tolerance (--fault-tolerant, --work-dir): every change is journaled under
     * work_dir/journal/ before any reply that depends on it, and a dispatcher started again on
     * the same work_dir carries on where the last one stopped. fault_tolerant needs work_dir,
     * and work_dir is used only with fault_tolerant. One work_dir serves one dispatcher at a
     * time, in this process or any other. */
    bool fault_tolerant;
    const char *work_dir;
    /* With fault_tolerant: snapshot the state every this many changes, so a start replays at
     * most that many (--snapshot-every; 1 to 10^12). 0: the default, at least every 10000
     * changes, and not before the changes since the last snapshot take twice its size in the
     * journal (a start then replays changes bounded by the state's size). */
    uint64_t snapshot_every;
    /* With fault_tolerant: the most the journal may grow to, in MiB (--journal-max-mb; 1 to
     * 16777216; 0: 16384). A full journal stops the dispatcher (see sluice_dispatcher_wait). */
    uint64_t journal_max_mb;
    /* With fault_tolerant: commit every change in its own transaction instead of grouping
     * them (--journal-per-update). Only a baseline for benchmarks; it is much slower. */
    bool journal_per_update;
    /* A worker that does not heartbeat this long is removed and its splits are handed out
     * again (--worker-timeout-ms; 0: 10000). */
    uint32_t worker_timeout_ms;
    /* A client that does not heartbeat this long is released (--client-timeout-ms; 0: 30000). */
    uint32_t client_timeout_ms;
    /* An iteration without clients this long is garbage-collected (--job-gc-timeout-ms;
     * 0: 60000). */
    uint32_t job_gc_timeout_ms;
    /* How often the recommended number of workers is recomputed (--autoscale-window-ms;
     * 0: 10000). */
    uint32_t autoscale_window_ms;
    /* The label key whose value names a worker's pool for the per-pool recommendations
     * (--autoscale-pool-label; NULL or "": "pool"); workers without it form the pool "". A key
     * that is not a valid label key is SLUICE_ERR_INVALID ("autoscale_pool_label: key: ' ' is
     * not allowed at byte 2"). */
    const char *autoscale_pool_label;
    /* The fixed workers of the static sharding modes (--worker-addresses): nworker_addresses
     * entries "HOST:PORT" (or "sluice://HOST:PORT"), each listed once. */
    const char *const *worker_addresses;
    size_t nworker_addresses;
    /* Directories file sources may read (--data-root, repeatable): ndata_roots entries, each
     * resolved (realpath) at start; a missing one is a start error naming it. With data roots,
     * RegisterDataset refuses a pipeline whose files (or glob directories) lie outside them
     * once ".." and symbolic links are resolved, with SLUICE_ERR_DENIED and
     * 'lines("/etc/shadow"): /etc/shadow is outside the data roots (/srv/data)', and checks
     * again when it lists a dataset's files for a distributed_epoch job. Workers check again with
     * their own roots before they open anything (theirs are the files read). None: not
     * confined; set them on any dispatcher others can reach. */
    const char *const *data_roots;
    size_t ndata_roots;
    /* Serve Prometheus metrics at GET /metrics on metrics_host, port metrics_port (0 to 65535, 0
     * picks a free one) when metrics is true (--metrics-port, --metrics-host). metrics_host NULL:
     * "127.0.0.1"; beyond loopback it follows the same rule as host (a token, or insecure). With
     * a token, a scrape must send "Authorization: Bearer TOKEN" (else 401). */
    bool metrics;
    int metrics_port;
    const char *metrics_host;
    /* "debug", "info", "warn", "error" or "off" (--log-level); NULL: "info". */
    const char *log_level;
    /* With fault_tolerant (--recover-to-last-good): when only the tail of the journal's log is
     * damaged, start from the last good snapshot and the records before the damage, dropping
     * the damaged record and every one after it (logged, and the damaged journal kept as
     * work_dir/journal.damaged-<time>.mdb) instead of refusing to start. Any other damage is
     * refused whatever this says. Never the default. */
    bool recover_to_last_good;
    /* Authentication and TLS for every connection (--auth-token-file, --tls-cert, --tls-key,
     * --tls-ca, --insecure; see <sluice/sluice.h>). */
    struct sluice_security_options security;
    /* Bounds on what peers can make the dispatcher hold; a request past one is refused with
     * SLUICE_ERR_LIMIT and a message naming the flag, nothing is journaled, and everyone else
     * is served as before. Lowering a limit below what a journal already holds refuses only
     * new requests. */
    /* Datasets registered at once (--max-datasets; 0: 10000). Registering a dataset that
     * exists already is never refused. */
    uint64_t max_datasets;
    /* The size of a registered pipeline: its serialized definition and its canonical text,
     * in bytes (--max-pipeline-bytes; 0: 1048576). */
    uint64_t max_pipeline_bytes;
    /* Reads (jobs joined) one client holds open at once (--max-jobs-per-client; 0: 1000). A
     * client is one sluice_client (one sluice_client_open; one process of `sluice read`),
     * known by the incarnation it sends when it connects; a read it closes, or that times out
     * (client_timeout_ms), frees its place. */
    uint64_t max_jobs_per_client;
    /* Reads held at once by all the clients that connect from one address, whatever
     * incarnations they send (--max-jobs-per-address; 0: 1000): a peer cannot escape
     * max_jobs_per_client by reconnecting as a new client. */
    uint64_t max_jobs_per_address;
    /* Connection limits (--handshake-timeout-ms, --max-connections, --max-handshakes): a
     * connection that has not completed its handshake (authentication included) this long after
     * it was accepted is closed (0: 10000); at most max_connections connections are open at once
     * (0: 4096; never more than the open-file limit less 64), beyond which a new connection is
     * closed at once; at most max_handshakes are in their handshake (0: 256), and at most 64 of
     * them from one address: a newcomer past either closes the oldest of those that has sent
     * nothing (else the oldest), and one that sends nothing is closed 3 s after it connected, so
     * idle sockets cannot keep out a peer that authenticates promptly. */
    uint32_t handshake_timeout_ms;
    unsigned max_connections;
    unsigned max_handshakes;
    /* A replica of a group of 3 or 5 dispatchers on Raft (--raft-id, --raft-address,
     * --raft-cluster; docs/operations.md "Dispatcher replicas") when raft_id is not 0:
     * raft_cluster lists the group, "1=HOST:PORT,2=HOST:PORT,3=HOST:PORT" (the Raft addresses),
     * raft_address is this replica's (as listed). It needs work_dir (its Raft log lives in
     * work_dir/raft) and implies fault_tolerant; the leader serves, the others answer "not the
     * leader" with the leader's address (advertise: the RPC address this replica gives for
     * that, --advertise; NULL: the bound host and port). raft_bind: listen for Raft there
     * instead (--raft-bind, e.g. "0.0.0.0:7001"); raft_election_timeout_ms 0: 600 (from 100
     * to 60000). Stopping the leader hands leadership to a caught-up follower first. */
    uint64_t raft_id;
    const char *raft_address;
    const char *raft_cluster;
    const char *raft_bind;
    const char *advertise;
    uint32_t raft_election_timeout_ms;
    /* With raft_id (--raft-seed-journal DIR): a single fault-tolerant dispatcher's work dir
     * (stopped, or a copy) whose journal a NEW group starts from: the first leader commits its
     * state before serving, so every replica has it. Read, never changed; ignored by a replica
     * whose Raft directory exists already. */
    const char *raft_seed_journal;
    /* A client or worker whose connection closed (its process died, or closed it) and that sent
     * no heartbeat since is released (removed) this long after the close, without waiting out
     * client_timeout_ms (worker_timeout_ms): a killed trainer's or worker's splits go to others
     * within seconds (--disconnect-grace-ms; 0: 5000; for each kind never more than its timeout
     * nor less than two of its heartbeat intervals; UINT32_MAX: off, only the timeouts). */
    uint32_t disconnect_grace_ms;
};

/* Starts a dispatcher on a thread of its own: validates the options, recovers the state from
 * the journal (fault-tolerant mode; this blocks while the journal is read), binds and listens.
 * Returns 0 and *out, serving, or a negative code with a message in err: SLUICE_ERR_INVALID for
 * bad options; "listen on HOST:PORT: Address already in use"; "journal: DIR: journal damaged:
 * log record: checksum mismatch (at record seq 42)"; "metrics: listen on HOST:PORT: ...". *out is
 * the caller's until sluice_dispatcher_stop. */
int sluice_dispatcher_start(const struct sluice_dispatcher_options *options,
                            struct sluice_dispatcher **out, char *err, size_t errlen);

/* The address readers and workers use, "HOST:PORT" with the bound port (an IPv6 host in
 * brackets): sluice_client_options.dispatcher and sluice_worker_options.dispatcher take it as
 * it is. Valid until sluice_dispatcher_stop. */
const char *sluice_dispatcher_target(const struct sluice_dispatcher *d);

/* "HOST:PORT" of the metrics server, or NULL when options.metrics was false. */
const char *sluice_dispatcher_metrics_address(const struct sluice_dispatcher *d);

/* Asks the dispatcher to stop and returns at once: it stops listening, drops its connections,
 * writes what its journal still has queued and ends (as SIGTERM or SIGINT to the binary). A
 * second call does nothing. */
void sluice_dispatcher_shutdown(struct sluice_dispatcher *d);

/* Waits until the dispatcher has stopped, at most timeout_ms (0: without limit); for a program
 * that serves until something else stops the dispatcher (tf.data's join()). Returns 0 once it
 * stopped cleanly, SLUICE_ERR_TIMEOUT while it still runs, or SLUICE_ERR_SERVER when a failure
 * stopped it, with the message in err ("journal: DIR: append: the journal is full: ..."). Any
 * number of threads may wait at once, also while another calls sluice_dispatcher_stop. */
int sluice_dispatcher_wait(struct sluice_dispatcher *d, uint32_t timeout_ms, char *err,
                           size_t errlen);

/* Stops the dispatcher (as sluice_dispatcher_shutdown), waits until it has stopped (its journal
 * written and closed, every connection and handle closed, its threads joined) and frees d.
 * Returns in bounded time whatever the peers do. Call it exactly once per started dispatcher,
 * also after it stopped by itself; d is invalid afterwards. NULL is allowed.
 *
 * Forks: a server belongs to the process that started it. In a child forked from that process
 * the server's threads do not exist, so there sluice_dispatcher_stop and sluice_worker_stop
 * return at once and free nothing (the child's exit releases its copy), the drain and shutdown
 * calls do nothing, and the wait calls return SLUICE_ERR_INVALID at once. */
void sluice_dispatcher_stop(struct sluice_dispatcher *d);

/* ---- Worker ------------------------------------------------------------------------------ */

/* Runs dataset pipelines for a dispatcher and serves their elements to readers. */
struct sluice_worker;

/* Every field of the `sluice-worker` command line has one here; a zero-initialised struct gives
 * the defaults, except for dispatcher, which is required. Strings and lists are copied. */
struct sluice_worker_options {
    /* The dispatcher, "HOST:PORT" or "sluice://HOST:PORT", or the replicas of a dispatcher
     * group as a comma-separated list "H1:P,H2:P,H3:P" of which the worker finds the leader
     * (--dispatcher); required. It need not be up yet: the worker retries until it is. */
    const char *dispatcher;
    /* Address to listen on (--host); NULL: "127.0.0.1". */
    const char *host;
    /* Port to listen on (--port), 0 to 65535; 0 picks a free one. */
    int port;
    /* The "HOST:PORT" readers use to reach this worker (--advertise); NULL: the bound address,
     * or the machine's host name with the port when bound to a wildcard address. */
    const char *advertise;
    /* Heartbeat interval (--heartbeat-ms; at most 3600000; 0: as the dispatcher says). */
    uint32_t heartbeat_ms;
    /* Threads that run every task's pipeline, in turns (--threads; at most 4096; 0: twice the
     * cores this process may run on, at least 8). They start with the worker and are all it
     * runs pipelines on, however many tasks it has (a snapshot save's task excepted: it runs on
     * threads of its own while it lasts). A distributed_epoch task runs up to min(cores, threads)
     * of its splits at once. */
    unsigned threads;
    /* Paths of plugin shared objects to load (--plugin, repeatable; see Plugins in
     * <sluice/sluice.h>): nplugins entries. */
    const char *const *plugins;
    size_t nplugins;
    /* Directories for the modules of py functions (map(py, "module:function"); --python-path,
     * repeatable): npython_path entries, put at the front of the interpreter's sys.path in this
     * order when the worker starts. They apply to the process's one interpreter: the program's
     * own when it is Python (sluice.WorkerServer), or the one `sluice-worker` embeds. A program
     * without Python support refuses them (SLUICE_ERR_UNSUPPORTED). */
    const char *const *python_path;
    size_t npython_path;
    /* Directories file sources may read (--data-root, repeatable): ndata_roots entries, each
     * resolved (realpath) when the worker starts; a missing one is a start error naming it.
     * With data roots, every file a pipeline names (lines, tfrecord, tar) must lie within one
     * of them once ".." and symbolic links are resolved, checked before anything is opened:
     * otherwise the task fails with SLUICE_ERR_DENIED, 'lines("/etc/shadow"): /etc/shadow is
     * outside the data roots (/srv/data)'. Without data roots files are not confined: set them
     * on every worker that serves anyone but its own user. py functions are always confined:
     * their module must be found in one of the python_path directories (not on the rest of
     * sys.path, PYTHONPATH included), else "map(py, "os:system"): module 'os' is not in the
     * worker's --python-path". */
    const char *const *data_roots;
    size_t ndata_roots;
    /* The worker's labels (--label, repeatable), nlabels entries of "KEY=VALUE": at most 16 with
     * distinct keys, keys of 1 to 63 bytes and values of 0 to 63, UTF-8 without control
     * characters, white space or any of = ! , ( ) (else SLUICE_ERR_INVALID, "labels: label 2:
     * key: ' ' is not allowed at byte 2"). Sent when the worker registers; a job read with a
     * worker_selector (struct sluice_read_options) runs only on workers whose labels match. */
    const char *const *labels;
    size_t nlabels;
    /* Serve Prometheus metrics at GET /metrics on metrics_host, port metrics_port (0 to 65535, 0
     * picks a free one) when metrics is true (--metrics-port, --metrics-host). metrics_host NULL:
     * "127.0.0.1"; beyond loopback it follows the same rule as host (a token, or insecure). With
     * a token, a scrape must send "Authorization: Bearer TOKEN" (else 401). */
    bool metrics;
    int metrics_port;
    const char *metrics_host;
    /* How long a drain waits for readers to fetch what this worker holds before leaving
     * anyway (--drain-timeout-ms; at most 86400000; 0: 30000). */
    uint32_t drain_timeout_ms;
    /* The most bytes one element (or batch) of a task may hold: its tensors' value bytes, plus
     * 8 per string of a bytes tensor that is not a scalar (--max-element-bytes; 1 to 267317248,
     * which keeps an element within one reply frame; 0: 134217728, 128 MiB). An element over
     * it fails its task with SLUICE_ERR_TASK_FAILED and "element of N bytes is over the
     * worker's limit of M (--max-element-bytes)", which reaches the readers. Where the size is
     * known before the memory is allocated (bytes(N), batch as it grows, a TFRecord's length,
     * a text line as it is read) it is refused before the allocation. The task's iteration then
     * fails for all its readers and is handed to no other worker. A task holds at most its
     * buffer (16 MiB, or one more element when elements are larger), per producer thread
     * about two elements being built, and per reader the reply being written (a reader that
     * stops reading pins at most 64 MiB of replies and one more). */
    uint64_t max_element_bytes;
    /* "debug", "info", "warn", "error" or "off" (--log-level); NULL: "info". */
    const char *log_level;
    /* Authentication and TLS, both towards the dispatcher and for readers (--auth-token-file,
     * --tls-cert, --tls-key, --tls-ca, --insecure; see <sluice/sluice.h>). The worker talks only
     * to a dispatcher that proves the same token. */
    struct sluice_security_options security;
    /* Connection limits of the worker's port, as for the dispatcher (--handshake-timeout-ms,
     * --max-connections, --max-handshakes; 0: 10000, 4096, 256). */
    uint32_t handshake_timeout_ms;
    unsigned max_connections;
    unsigned max_handshakes;
    /* Readers in this process (sluice_iterator_open with a client of this process) reach an
     * embedded worker without the network: instead of a TCP connection to its address, an
     * in-process socket pair, which no other process can reach, with the same handshake (token,
     * TLS) and the same checks of every request (docs/reading.md "Local workers"). true turns that
     * off: they connect over TCP like any other reader. */
    bool no_in_process_reads;
    /* Readers in other processes on this host (the same host id) reach the worker over a Unix
     * socket of its own and take element payloads from a memory region they share with it,
     * written once by the worker and never copied through a socket (docs/reading.md "Local
     * workers"). true turns that off: they connect over TCP (--no-shm). */
    bool no_shm;
    /* The most tasks the worker runs at once (--max-tasks; 1 to 100000; 0: 256), and the most
     * bytes their buffers may hold together, counting each task's full buffer bound of 16 MiB
     * (--max-buffer-bytes; at least 16777216; 0: 4294967296). A task past either is not started:
     * it fails with SLUICE_ERR_TASK_FAILED and "worker HOST:PORT: task limit reached: it runs
     * N tasks (--max-tasks)" (or "buffer limit reached: ..."), which reaches its readers. */
    unsigned max_tasks;
    uint64_t max_buffer_bytes;
    /* How many tasks the dispatcher places on this worker at once (--task-slots; 0: no limit,
     * every job whose selector matches gets a task here; at most max_tasks, else
     * SLUICE_ERR_INVALID, "task_slots: expected a number from 0 to 256 (max_tasks), got 300").
     * Sent when the worker registers. With slots, jobs take the free ones heaviest first, a task
     * is never taken away, and a job that gets none waits with the reason (docs/operations.md
     * "Task slots"). */
    unsigned task_slots;
};

/* Starts a worker on a thread of its own: validates the options, loads the plugins, puts the
 * python_path directories on sys.path, binds, listens and begins heartbeating the dispatcher.
 * Returns 0 and *out, or a negative code with a message in err: SLUICE_ERR_INVALID for bad
 * options ("dispatcher is required"); "plugin PATH: ..."; "python_path: this worker has no
 * Python support"; "listen on HOST:PORT: ..."; "metrics: ...". *out is the caller's until
 * sluice_worker_stop. */
int sluice_worker_start(const struct sluice_worker_options *options, struct sluice_worker **out,
                        char *err, size_t errlen);

/* The address the worker gives the dispatcher for readers ("HOST:PORT", see
 * options.advertise). Valid until sluice_worker_stop. */
const char *sluice_worker_address(const struct sluice_worker *w);

/* The bound "HOST:PORT" (an IPv6 host in brackets), what `sluice-worker` prints as
 * "listening on". Valid until sluice_worker_stop. */
const char *sluice_worker_listen_address(const struct sluice_worker *w);

/* "HOST:PORT" of the metrics server, or NULL when options.metrics was false. */
const char *sluice_worker_metrics_address(const struct sluice_worker *w);

/* Asks the worker to drain and returns at once (SIGTERM to `sluice-worker`): it tells the
 * dispatcher at once (no new tasks, no new splits), hands back the splits it has not started,
 * finishes and serves the ones in progress, and once its readers have received everything (or
 * none has asked for elements for 2 s, or options.drain_timeout_ms passed) it deregisters and
 * stops. Nothing it held is lost: what it did not deliver goes to other workers. A second call
 * does nothing. */
void sluice_worker_drain(struct sluice_worker *w);

/* Asks the worker to stop at once and returns (SIGINT to `sluice-worker`): readers waiting on
 * it get an error and its splits are handed out again once the dispatcher notices. Also cuts a
 * drain short. */
void sluice_worker_shutdown(struct sluice_worker *w);

/* Waits until the worker has stopped, at most timeout_ms (0: without limit). Returns 0 once it
 * stopped cleanly, SLUICE_ERR_TIMEOUT while it still runs, or a negative code with the message
 * in err. Any number of threads may wait at once, also while another calls
 * sluice_worker_stop. */
int sluice_worker_wait(struct sluice_worker *w, uint32_t timeout_ms, char *err, size_t errlen);

/* Drains the worker (as sluice_worker_drain), waits until it has stopped and frees w. Returns
 * in bounded time even when its dispatcher or its readers vanished: at most about
 * options.drain_timeout_ms plus 3 s for deregistering. Call it exactly once per started worker,
 * also after it stopped by itself; w is invalid afterwards. NULL is allowed. In a child forked
 * from the process that started it, returns at once (see sluice_dispatcher_stop). */
void sluice_worker_stop(struct sluice_worker *w);

#ifdef __cplusplus
}
#endif

#endif
