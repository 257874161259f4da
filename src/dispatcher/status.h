/* The dispatcher's status document: the JSON that StatusReply carries and `sluice status --json`
 * prints. Pure: built from the state alone, with jansson.
 *
 *   {
 *     "workers":  [{"id": 1, "address": "host:5051", "incarnation": "5f0c...e1" (16 hex digits),
 *                   "draining": false, "tasks": [3, 4],
 *                   "buffered": 120, "buffered_bytes": 98304, "elements_per_second": 5120.5,
 *                   "bytes_per_second": 4194304.0, "heartbeat_age_ms": 310 (null: none yet)}],
 *     "datasets": [{"id": "1", "pipeline": "range(10) | map(square)", "pipeline_bytes": 23,
 *                   "pipeline_digest": "9f2b...c4" (SHA-256 of the text, 64 hex digits),
 *                   "pipeline_truncated": false, "compression": "auto", "split_size": null}],
 *     "recommended_workers": 3,
 *     "config":   {"worker_timeout_ms": 10000, "client_timeout_ms": 30000,
 *                  "job_gc_timeout_ms": 60000, "worker_heartbeat_ms": 1000,
 *                  "client_heartbeat_ms": 1000, "client_disconnect_grace_ms": 5000 (0: off),
 *                  "worker_disconnect_grace_ms": 5000 (0: off),
 *                  "autoscale_window_ms": 10000},
 *     "jobs":     [{"id": 1, "name": "shared" (or null when anonymous), "dataset_id": "1",
 *                   "mode": "distributed_epoch", "iteration_id": 2, "repetition": 1,
 *                   "state": "active" | "finished" | "garbage_collected",
 *                   "clients": 2,
 *                   "tasks": [{"id": 3, "worker": "host:5051", "finished": false}],
 *                   "workers": 1, "elements_per_second": 5120.5, "bytes_per_second": 4194304.0,
 *                   "elements": 81920, "bytes": 67108864,
 *                   "splits": {"total": 8 (null when endless), "cursor": 5, "leased": 2,
 *                              "returned": 1, "finished": 2}}]
 *   }
 *
 * A pipeline's text is there whole only up to STATUS_PIPELINE_PREVIEW bytes; a longer one is cut
 * to its first bytes ("pipeline_truncated": true), so the document grows with the number of
 * datasets and not with their texts (80 datasets of 1 MB made an 80 MB reply, built again for
 * every request); status_dataset_json() has one dataset's whole text.
 *
 * Workers are listed by id, datasets by id, jobs by id. "splits" is present only for
 * distributed_epoch jobs whose iteration is not collected; "returned" counts splits handed back
 * by a lost worker and waiting to be leased again. The incarnation is a hex string because a
 * 64-bit value does not survive JSON numbers. "recommended_workers" and "config" come from the
 * server shell (struct status_extra) and are left out by status_json(), like the workers' buffers,
 * rates and heartbeat ages and the jobs' "workers" and rates. Rates are of elements and encoded
 * bytes served to readers, over the dispatcher's window (see observe.h). */
#ifndef SLUICE_DISPATCHER_STATUS_H
#define SLUICE_DISPATCHER_STATUS_H

#include "state.h"
#include "why.h" /* struct status_stage, struct status_consumer */

struct hedge;

/* The most bytes of a pipeline's text the document carries (see above). */
#define STATUS_PIPELINE_PREVIEW 256

/* Builds the document. On success returns 0 and *out is a NUL-terminated, malloc'd string the
 * caller frees with free(). Returns SLUICE_ERR_NOMEM on allocation failure. */
int status_json(const struct state *s, char **out);

/* The document of one dataset, with its whole text: {"datasets": [{...}]}. Returns as
 * status_json(), or SLUICE_ERR_NOT_FOUND when there is no dataset_id. */
int status_dataset_json(const struct state *s, const char *dataset_id, char **out);

/* What a task's worker last reported of it, with its rates over the dispatcher's window
 * (dispatcher/rates.h): elements and encoded bytes served to readers per second, and what its
 * buffer holds. */
struct status_task_figures {
    uint64_t task_id;
    double elements_per_second, bytes_per_second;
    double busy_per_second; /* seconds of its worker's thread time per second */
    uint64_t buffered, buffered_bytes;
    uint64_t elements, bytes; /* served to readers since the task started, as last reported */
    const struct status_stage *stages; /* borrowed, nstages of them */
    size_t nstages;
};

/* Copies a job's readers read cut short, as they reported them (parallel_epochs and static
 * sharding: a task whose worker was lost after it sent part of its copy). */
struct status_job_cut {
    uint64_t job_id;
    uint64_t cut;
};

/* The elements the readers of a named mix job drew from each of its inputs, as they last
 * reported them (observe_mix_drawn): the realized shares. */
struct status_mix_drawn {
    char dataset_id[ST_ID_MAX];
    char job_name[ST_ID_MAX];
    uint64_t drawn[ST_MIX_INPUTS_MAX];
    size_t n;
};

/* How long ago a worker's last heartbeat arrived. */
struct status_worker_seen {
    uint64_t worker_id;
    uint64_t age_ms;
};

/* What the server shell adds to the document: the autoscaling recommendation and the settings
 * it runs with (the defaults filled in), and the soft figures of tasks and workers. */
/* A dispatcher replica's own view of its Raft group (replica.h), for "raft" in the status. */
#define STATUS_RAFT_MEMBERS_MAX 7
struct status_raft {
    uint64_t id, leader_id, term, commit_index, applied_index, last_index;
    const char *role; /* "leader", "follower", "candidate", "unavailable" */
    bool serving;     /* the leader, and its announcement is applied */
    /* "voter"; "new" (its directory is new and it asks its peers whether to bootstrap or
     * join); "joining" (it joins a group that runs, and votes once the leader added it back) */
    const char *membership;
    uint64_t leader_changes;
    char state_digest[17]; /* of the committed state, hex */
    size_t nmembers;
    struct {
        uint64_t id;
        const char *raft_address;
        const char *rpc_address; /* "" until it announced itself as leader */
    } members[STATUS_RAFT_MEMBERS_MAX];
};

struct autoscale_pool;

struct status_extra {
    uint32_t recommended_workers;
    uint32_t worker_timeout_ms, client_timeout_ms, job_gc_timeout_ms;
    uint32_t worker_heartbeat_ms, client_heartbeat_ms;
    uint32_t client_disconnect_grace_ms, worker_disconnect_grace_ms; /* 0: off */
    uint32_t autoscale_window_ms;
    /* Sorted by task id (by worker id); a task or worker missing has no figures (zeros, and a
     * heartbeat age of null). Borrowed: only read during the call. */
    const struct status_task_figures *tasks;
    size_t ntasks;
    const struct status_worker_seen *seen;
    size_t nseen;
    /* Copies cut short per job (observe_client_cut), sorted by job id; a job missing has 0. */
    const struct status_job_cut *cuts;
    size_t ncuts;
    /* Per named mix job, in any order. */
    const struct status_mix_drawn *mixes;
    size_t nmixes;
    /* NULL: not a replica (no "raft" in the document). */
    const struct status_raft *raft;
    /* The consumers' waits, sorted by client id. */
    const struct status_consumer *consumers;
    size_t nconsumers;
    /* The hedged splits (hedge.h): each distributed job's "splits" gets "hedged", the copies
     * leased in its iteration (0 once the dispatcher restarted), and, for an iteration timed,
     * "time_ms": {"median", "p99", "max", "samples"}, its split times over the last
     * HEDGE_SAMPLES splits finished. NULL: none. */
    const struct hedge *hedge;
    /* The recommendation per pool at the last window (autoscale_pools.h), sorted by name, and
     * the label key naming the pools: the top-level "autoscale" object, {"pool_label": "pool",
     * "pools": [{"pool": "bigmem", "workers": 2, "recommended_workers": 3, "reason": "up",
     * "clients": 1.5, "demand": 900.0, "served": 450.0, "unmet": 0.5, "capacity": 300.0,
     * "idle": 0.0}]} ("pools" empty before the first window). pool_label NULL: no "autoscale". */
    const struct autoscale_pool *pools;
    size_t npools;
    const char *pool_label;
};

/* status_json() with x's fields added: at the top level "recommended_workers" and the "config"
 * object (before "workers"); in each worker "buffered", "buffered_bytes", "elements_per_second",
 * "bytes_per_second", "elements", "bytes" and "heartbeat_age_ms" (null when unknown); in each
 * job "workers", "elements_per_second", "bytes_per_second", "elements" and "bytes"
 * (status_job_figures: elements and encoded bytes its tasks served so far, as last reported) and
 * "worker_time_share" (its tasks' share of the worker thread time every task took over the
 * window, from the workers' TaskProgress.busy_ns; null when none was measured), "copies_cut"
 * (x->cuts), in "splits" "hedged" (x->hedge), "consumers" (x->consumers of the job:
 * [{"id": CLIENT, "exposed_wait_seconds": 12.5, "wait_share": 0.41 (null: not measured yet),
 * "elements_per_second": 96.0}]) and "why" (why.h: {"input_bound", "wait_share", "threshold",
 * "slowest_consumer", "slowest_worker", "worker_rate_vs_median", "dominant_stage",
 * "stage_share", "text"}, null where unknown); in each task of a job that has them, "stages"
 * ([{"name": "map(decode_jpeg)#1", "seconds": 7.8}], as its worker last reported them).
 * x NULL is status_json().
 * Returns as status_json(). */
int status_json_extra(const struct state *s, const struct status_extra *x, char **out);

/* status_json_extra in two steps: the document as a tree (0 with *out, the caller's, or
 * SLUICE_ERR_NOMEM), built where the state is; then written out and freed by status_json_dump
 * (returns as status_json), which reads nothing but the tree and may run on any thread. */
struct json_t;
int status_json_tree(const struct state *s, const struct status_extra *x, struct json_t **out);
int status_json_dump(struct json_t *root, char **out);

/* The figures of a job or a worker, summed over its tasks. */
struct status_figures {
    uint64_t tasks;   /* job: tasks of its current iteration; worker: tasks it runs */
    uint64_t workers; /* job: distinct workers running an unfinished task of it; worker: 1 */
    double elements_per_second, bytes_per_second;
    double busy_per_second; /* worker thread seconds per second its tasks took */
    uint64_t buffered, buffered_bytes;
    uint64_t elements, bytes; /* served by its tasks, as last reported */
};

/* The figures of job j (of its current iteration) and of worker w from x's task figures (x NULL:
 * only the counts). The status document and the dispatcher's labelled gauges both come from
 * these, so the two agree. */
void status_job_figures(const struct state *s, const struct status_extra *x, const struct st_job *j,
                        struct status_figures *out);
void status_worker_figures(const struct state *s, const struct status_extra *x,
                           const struct st_worker *w, struct status_figures *out);

/* The figures of every job and every worker at once, in one pass over the tasks (both tables
 * sorted by task id, so no task is looked up): jobs[i] of s->jobs[i] and workers[i] of
 * s->workers[i], equal to what status_job_figures and status_worker_figures give one by one. At
 * thousands of workers the one-by-one lookups are most of a scrape. Returns 0, or
 * SLUICE_ERR_NOMEM (nothing set). */
int status_all_figures(const struct state *s, const struct status_extra *x,
                       struct status_figures *jobs, struct status_figures *workers);

#endif
