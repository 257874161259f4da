/* The dispatcher's server shell: the RPC handlers around the pure state machine (state.h), the
 * soft state that is not journaled (heartbeat times, idle times, decoded dataset definitions),
 * and the timer that evicts silent workers, releases silent clients and garbage-collects idle
 * iterations.
 *
 * Every request goes validate -> plan (plan.h, pure) -> commit -> reply, and the reply leaves
 * only from the commit's callback, so once commits are journaled no answer can get ahead of
 * its record (docs/design.md §1).
 *
 * Threading: everything here runs on the loop thread, except the work of building a
 * distributed_epoch split plan (which expands file globs, i.e. reads directories) on the
 * libuv thread pool. */
#ifndef SLUICE_DISPATCHER_SERVER_H
#define SLUICE_DISPATCHER_SERVER_H

#include "dispatcher/intervals.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct dispatcher;

struct pipe_roots;

struct dispatcher_opts {
    const char *host;           /* default "127.0.0.1" */
    int port;                   /* 0 picks a free port */
    uint32_t worker_timeout_ms; /* 0: 10000 */
    uint32_t client_timeout_ms; /* 0: 30000 */
    /* A client (worker) whose connection closed (its process died, or it closed it) and that
     * sent no heartbeat since is released (removed) this long after the close; 0: 5000, at most
     * the kind's timeout (intervals.h); UINT32_MAX: only the timeouts. */
    uint32_t disconnect_grace_ms;
    uint32_t job_gc_timeout_ms; /* 0: 60000 */
    /* How often the autoscaling recommendation is made (observe.h); 0: 10000. */
    uint32_t autoscale_window_ms;
    /* The label key naming a worker's pool for the per-pool recommendations; NULL or "":
     * "pool". */
    const char *autoscale_pool_label;
    /* The fixed worker list of static sharding (--worker-addresses), copied at start. When it
     * is not empty, only workers whose heartbeat address is in it are accepted, and a task's
     * worker_index is the position of its worker's address. */
    const char *const *worker_addresses;
    size_t nworker_addresses;
    /* Data roots (pipeline/roots.h, resolved), copied at start: RegisterDataset refuses a file
     * source with a file or glob directory outside them (SLUICE_ERR_DENIED). NULL or none: not
     * confined. */
    const struct pipe_roots *roots;
    /* Called (at most once) when the dispatcher can no longer keep its state consistent, e.g.
     * an update that does not apply; the owner should close it and exit with failure. May be
     * NULL. */
    void (*on_fatal)(void *user, const char *msg);
    void *user;
    /* Authentication and TLS for the RPC port (common/security.h); NULL for neither. It
     * outlives the dispatcher. */
    const struct security_ctx *sec;
    /* Connection limits of the RPC port (rpc_server_opts; 0: the defaults). */
    uint32_t handshake_timeout_ms;
    unsigned max_connections, max_handshakes;

    /* Fault-tolerant mode (docs/design.md §6) when work_dir is set: the state is rebuilt from the
     * journal under work_dir at start, every change is journaled before any reply that reveals
     * it, and the incarnation is kept in the journal, the same across restarts. A journal that
     * fails is fatal (on_fatal). */
    const char *work_dir;
    uint64_t snapshot_every;  /* updates between snapshots; 0: 10000, and see SNAPSHOT_GROWTH */
    size_t journal_max_bytes; /* the journal's size ceiling; 0: the journal's default */
    /* Commit every update in its own transaction instead of grouping: a baseline for the
     * benchmark, never for use. */
    bool journal_per_update;
    /* A journal whose only damage is in the tail of its log is cut back to the record before
     * the damage instead of refused (recovery_open says what is dropped). Never the
     * default. */
    bool recover_to_last_good;
    /* Limits (state.h, struct st_limits); 0: the defaults below. */
    uint64_t max_datasets;        /* 0: DISPATCHER_DEFAULT_MAX_DATASETS */
    uint64_t max_pipeline_bytes;  /* 0: DISPATCHER_DEFAULT_MAX_PIPELINE_BYTES */
    uint64_t max_jobs_per_client; /* 0: DISPATCHER_DEFAULT_MAX_JOBS_PER_CLIENT */
    /* Reads held by all the clients connecting from one address (owners.h); 0:
     * DISPATCHER_DEFAULT_MAX_JOBS_PER_ADDRESS. */
    uint64_t max_jobs_per_address;

    /* A replica of a Raft group (replica.h) when raft_id is not 0: raft_address is this
     * replica's Raft address (HOST:PORT, as in raft_cluster), raft_cluster the group
     * "1=HOST:PORT,2=HOST:PORT,3=HOST:PORT", raft_bind where to listen for it instead (NULL:
     * raft_address). The Raft directory is work_dir/raft (needs work_dir); there is no LMDB
     * journal. advertise is the RPC address other replicas redirect callers to (NULL: the bound
     * host and port). raft_election_timeout_ms 0: 600. */
    uint64_t raft_id;
    const char *raft_address;
    const char *raft_cluster;
    const char *raft_bind;
    const char *advertise;
    uint32_t raft_election_timeout_ms;
    /* A single dispatcher's work dir whose journal a new group starts from (replica.h's seed):
     * read, not changed; used only when this replica's Raft directory is bootstrapped now. */
    const char *raft_seed_journal;
};

#define DISPATCHER_DEFAULT_MAX_DATASETS 10000u
#define DISPATCHER_DEFAULT_MAX_PIPELINE_BYTES (1u << 20)
#define DISPATCHER_DEFAULT_MAX_JOBS_PER_CLIENT 1000u
#define DISPATCHER_DEFAULT_MAX_JOBS_PER_ADDRESS 1000u

/* Recovers the state from the journal (fault-tolerant mode), binds, listens and starts the timer.
 * The Hello incarnation is the journal's in fault-tolerant mode, else a fresh random number per
 * call. Blocks while it reads the journal. On failure returns a negative code with "what: why"
 * in err (a damaged journal: "journal: DIR: journal damaged: log record: checksum mismatch (at
 * record seq 42)") and leaves nothing to
 * close (the loop may still need one run to finish closing handles that were started, as
 * rpc_server_start documents). */
int dispatcher_start(uv_loop_t *loop, const struct dispatcher_opts *opts, struct dispatcher **out,
                     char *err, size_t errlen);

/* The bound host and port (useful with port 0). */
const char *dispatcher_host(const struct dispatcher *d);
int dispatcher_port(const struct dispatcher *d);
uint64_t dispatcher_incarnation(const struct dispatcher *d);
/* Whether it serves requests: always, but for a replica (replica.h) that is not the serving
 * leader. */
bool dispatcher_serving(const struct dispatcher *d);
/* A leading replica hands leadership over (replica_handover), then cb runs; anything else runs
 * cb at once. */
void dispatcher_handover(struct dispatcher *d, void (*cb)(void *user), void *user);

/* Renders the dispatcher's metrics in the Prometheus text format (observe.h lists them), for an
 * http_render_cb: returns 0 with *body (malloc'd, the caller frees it) and *len, or
 * SLUICE_ERR_NOMEM. Loop thread. */
int dispatcher_metrics_render(struct dispatcher *d, char **body, size_t *len);

/* The same metrics frozen for a render elsewhere (observe_freeze): the loop pays the figures and
 * a copy of the text, not the formatting. Returns 0 with *out, or SLUICE_ERR_NOMEM. Loop thread. */
struct metrics_frozen;
int dispatcher_metrics_freeze(struct dispatcher *d, struct metrics_frozen **out);

/* The status document, as a StatusReply carries it (`sluice status --json`, and the dashboard's
 * GET /api/status): status_json_extra() with the shell's figures at this moment. Returns 0 with
 * *out (NUL-terminated, malloc'd; the caller frees it), or SLUICE_ERR_NOMEM. Loop thread. */
int dispatcher_status_render(struct dispatcher *d, char **out);

/* The same document as a tree (status_json_tree), to be written out elsewhere
 * (status_json_dump, on any thread). Returns 0 with *out, or SLUICE_ERR_NOMEM. Loop thread. */
struct json_t;
int dispatcher_status_tree(struct dispatcher *d, struct json_t **out);

/* Takes a sample for the dashboard's charts when one is due (history.h); the timer calls it.
 * Loop thread. */
void dispatcher_history_sample(struct dispatcher *d);

/* The charts' document (history_json(), GET /api/history). Returns as dispatcher_status_render().
 * Loop thread. */
int dispatcher_history_render(struct dispatcher *d, char **out);

/* Stops serving: closes the listener, every connection and the timer, cancels queued work,
 * waits for work already running, then frees d and calls cb (may be NULL). Pending requests get
 * no reply. Call once. */
void dispatcher_close(struct dispatcher *d, void (*cb)(void *user), void *user);

#endif
