/* What the dispatcher observes about its cluster beyond the journaled state: the Prometheus
 * registry it serves at GET /metrics, and the autoscaling window (autoscale.h) with the figures
 * workers and clients report in their heartbeats.
 *
 * Figures. Each worker heartbeat carries, per task, the rate at which the task produced elements
 * and the share of the interval its producers were idle on a full buffer; each client heartbeat
 * carries the client's consumption rate and the share of the interval it waited on an empty
 * buffer. These are soft state: never journaled, rebuilt from the next heartbeats after a restart,
 * and forgotten when the worker is removed or the client released. Per worker, one report becomes
 * one pair (rate, idle): the rate is the sum over its unfinished tasks, the idle share their mean;
 * a report with no unfinished task (or with numbers that are not finite and in range) says that
 * the worker has no data. Per client, one report is one pair (rate, wait).
 *
 * Window. Every window_ms the reports that arrived during the window are averaged per worker and
 * per client (heartbeats come at a fixed interval, so the plain mean is the mean over time); a
 * worker or client that sent nothing during the window keeps the figures of its last window, and
 * one whose reports all had no data has none. Those figures go to autoscale_recommend() together
 * with the number of registered workers that are not draining (draining workers' figures are left
 * out: they are on their way out and take no new work) and the previous recommendation. Until the
 * first window has closed, the recommendation is that same worker count (at least 1).
 *
 * Metrics (every name starts with sluice_; gauges are computed from the state at each scrape):
 *   sluice_workers, sluice_workers_draining, sluice_datasets, sluice_jobs, sluice_tasks,
 *   sluice_clients                                   gauges: rows of the state
 *   sluice_iterations{state="active|finished|garbage_collected"}
 *   sluice_updates_applied_total                     counter: state updates applied
 *   sluice_splits_leased_total, sluice_splits_finished_total, sluice_splits_returned_total
 *                                                    counters: seqs of applied split updates
 *   sluice_journal_commit_seconds                    histogram: one group-commit transaction
 *   sluice_journal_bytes_total                       counter: bytes of committed transactions
 *   sluice_request_seconds{call="..."}               histogram: a request's arrival to its reply
 *                                                    (observe_request), by enum observe_call
 *   sluice_client_wait_share                         gauge: mean of the clients' last wait shares
 *   sluice_client_exposed_wait_seconds_total{job,consumer}
 *                                                    counter: seconds each consumer's caller
 *                                                    was blocked in get-next
 *                                                    (observe_client_exposed)
 *   sluice_client_copies_cut_total                   counter: copies the clients read cut short
 *                                                    (observe_client_cut)
 *   sluice_hedged_splits_total                       counter: copies of slow splits leased to a
 *                                                    second task (observe_hedged; hedge.h)
 *   sluice_split_requests_batched_total              counter: tasks' GetSplits that came in a
 *                                                    GetSplitsBatch (observe_batched)
 *   sluice_consumption_elements_per_second           gauge: sum of the clients' last rates
 *   sluice_production_elements_per_second            gauge: sum of the workers' last rates
 *   sluice_recommended_workers                       gauge: observe_recommended()
 *   sluice_autoscale_recommended_workers{pool="..."} gauge: each pool's recommendation at the
 *                                                    last window (autoscale_pools.h); a pool
 *                                                    gone loses its series
 *   sluice_autoscale_windows_total{reason="..."}     counter: windows closed, by decision reason
 *   sluice_autoscale_demand_elements_per_second, sluice_autoscale_capacity_elements_per_second,
 *   sluice_autoscale_unmet_share, sluice_autoscale_idle_share
 *                                                    gauges: the last decision's figures
 *   sluice_served_elements_per_second, sluice_served_bytes_per_second
 *                                                    gauges: summed served rates of the jobs
 *   sluice_buffered_elements, sluice_buffered_bytes  gauges: summed buffers of the workers
 *   sluice_splits_outstanding                        gauge: leased and not finished, over jobs
 *   sluice_job_{clients,tasks,workers,splits_finished,splits_outstanding,elements_per_second,
 *   bytes_per_second}{job="ID"}                      gauges: status_job_figures() per job
 *   sluice_workers_{tasks,buffered_elements,buffered_bytes,served_elements_per_second,
 *   served_bytes_per_second}{worker="ID"}            gauges: status_worker_figures() per worker
 *   sluice_auth_failures_total, sluice_connections_refused_total,
 *   sluice_handshake_timeouts_total,
 *   sluice_handshake_evictions_total                 counters: of the RPC server (rpc.h), as
 *                                                    observe_connections last set them
 *   sluice_object_requests_total{op,code},
 *   sluice_object_bytes_total,                       counters: the process's object-store
 *   sluice_object_bytes_sent_total                   requests (listings, Parquet footers,
 *                                                    a save's files) and bytes received and
 *                                                    sent, as observe_objects last set them
 *
 * Served rates. Each worker heartbeat carries, per task, the elements and bytes sent to readers
 * since the task started and what its buffer holds; the dispatcher samples the counters at the
 * heartbeat's arrival and measures rates over the last window (rates.h), for the status document
 * and the labelled gauges alike.
 *
 * Threading: the loop thread only, like the state. Ownership: struct observe owns its registry and
 * tables; nothing passed in is kept. */
#ifndef SLUICE_DISPATCHER_OBSERVE_H
#define SLUICE_DISPATCHER_OBSERVE_H

#include "dispatcher/autoscale.h"
#include "dispatcher/history.h"
#include "dispatcher/state.h"
#include "dispatcher/status.h"

#include "wire.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OBSERVE_DEFAULT_WINDOW_MS 10000

struct observe;
struct rpc_counts; /* common/rpc_metrics.h */

/* The dispatcher's settings, as reported in the status document's "config". */
struct observe_config {
    uint32_t window_ms; /* 0: OBSERVE_DEFAULT_WINDOW_MS */
    /* The label key naming a worker's pool (autoscale_pools.h; NULL or "": "pool"), copied. */
    const char *pool_label;
    uint32_t worker_timeout_ms, client_timeout_ms, job_gc_timeout_ms;
    uint32_t worker_heartbeat_ms, client_heartbeat_ms;
    uint32_t client_disconnect_grace_ms, worker_disconnect_grace_ms; /* 0: off */
};

/* Makes the registry and empty tables; the first window ends window_ms after now_ms. params NULL
 * means autoscale_params_default(). Returns 0 and *out (the caller owns it), or SLUICE_ERR_NOMEM.
 */
int observe_create(const struct observe_config *cfg, const struct autoscale_params *params,
                   uint64_t now_ms, struct observe **out);

/* Frees everything. NULL is allowed. */
void observe_destroy(struct observe *o);

/* The window length in use (the default filled in). */
uint32_t observe_window_ms(const struct observe *o);

/* ---- figures --------------------------------------------------------------------------------- */

/* One task of a worker report. */
struct observe_task {
    double rate; /* elements/s produced over the worker's last interval */
    double idle; /* share of that interval its producers waited on a full buffer, in [0, 1] */
    bool finished;
};

/* Records a worker report (tasks[0..ntasks) only read). A worker id not seen before gets an
 * entry; running out of memory only loses the report. */
void observe_worker_report(struct observe *o, uint64_t worker_id, const struct observe_task *tasks,
                           size_t ntasks);

/* Records a client report: rate in elements/s, wait a share in [0, 1]. */
void observe_client_report(struct observe *o, uint64_t client_id, double rate, double wait);

/* Records that client client_id, a reader of job job_id, has read cut copies cut short so far
 * (cumulative, as its heartbeats carry it): what it adds to the client's last count goes to
 * sluice_client_copies_cut_total and to the job's count (observe_figures). A smaller count than
 * the last (a report that arrived late) adds nothing. Soft state, like the rest: a restarted
 * dispatcher counts again from the clients' next reports. */
void observe_client_cut(struct observe *o, uint64_t client_id, uint64_t job_id, uint64_t cut);

/* Counts n hedged copies leased (hedge.h) in sluice_hedged_splits_total. */
void observe_hedged(struct observe *o, uint64_t n);
/* Counts n tasks' requests of a GetSplitsBatch in sluice_split_requests_batched_total. */
void observe_batched(struct observe *o, uint64_t n);
/* A reader of named mix job job_name (of dataset_id) reports what it drew from each input since
 * it opened (n counts; reader: its random id): the growth since its last report is added to the
 * job's sums (status "drawn", "realized_shares"). At most OBSERVE_MIX_READERS_MAX readers are
 * remembered; reports of a mix with another input count are ignored. Soft state. */
#define OBSERVE_MIX_READERS_MAX 4096
void observe_mix_drawn(struct observe *o, const char *dataset_id, const char *job_name,
                       uint64_t reader, const uint64_t *drawn, size_t n, uint64_t now_ms);

/* The same from the heartbeat messages, at the protocol's edge: worker_id is the id the heartbeat
 * was planned under (the request does not carry it). */
void observe_worker_heartbeat(struct observe *o, uint64_t worker_id,
                              const Sluice__WorkerHeartbeatRequest *req);
void observe_client_heartbeat(struct observe *o, uint64_t job_id,
                              const Sluice__ClientHeartbeatRequest *req);

/* What a worker reports of one task: cumulative served counters, the thread time its slices
 * took, and its buffer now. */
struct observe_task_counts {
    uint64_t served_elements, served_bytes;
    uint64_t buffered, buffered_bytes;
    uint64_t busy_ns;
};

/* Records one task's report received at now_ms (a sample of its rate ring, rates.h), the task
 * being one of iteration iteration_id. A task reported by another worker than before starts its
 * samples over. What it served since its previous report (all it reports, the first time or when
 * its counters went back) is added to the served counts of its iteration, of its worker and of
 * the cluster (observe_served). Out of memory loses it. */
void observe_task_report(struct observe *o, uint64_t worker_id, uint64_t task_id,
                         uint64_t iteration_id, uint64_t now_ms,
                         const struct observe_task_counts *c);
/* observe_task_report() for every task of a heartbeat that st assigns to worker_id (a report of
 * any other task id is ignored, so a worker cannot fill the table with ids of its choosing). */
void observe_task_heartbeat(struct observe *o, const struct state *st, uint64_t worker_id,
                            uint64_t now_ms, const Sluice__WorkerHeartbeatRequest *req);

/* Records that client client_id, a reader of job job_id, has been blocked in get-next for
 * wait_us microseconds in all (ClientHeartbeatRequest.exposed_wait_us) at now_ms: the status
 * document's "consumers" of the job (its share of wall time over the last minute) and
 * sluice_client_exposed_wait_seconds_total{job,consumer}. Soft state, like the rest. */
void observe_client_exposed(struct observe *o, uint64_t client_id, uint64_t job_id, uint64_t now_ms,
                            uint64_t wait_us);

/* Copies one reported stage into *out when it is valid (status_stage: a name of 1 to
 * STATUS_STAGE_NAME_MAX - 1 bytes that needs no escaping, seconds finite and >= 0): returns 1,
 * else 0. */
int observe_stage_valid(const char *name, double seconds, struct status_stage *out);
/* Records the stages v[0..n) (valid, at most STATUS_STAGES_MAX are kept) of a task
 * observe_task_report() knows; any other task id is ignored. */
void observe_task_stages(struct observe *o, uint64_t task_id, const struct status_stage *v,
                         size_t n);

/* The served counts the dashboard's history takes its samples from (history.h), after dropping
 * those of iterations and workers st no longer has. Valid until the next call into o. */
void observe_served(struct observe *o, const struct state *st, struct history_served *out);

/* Forgets a worker's or client's figures (also done by observe_applied and at each window for ids
 * the state no longer has). */
void observe_forget_worker(struct observe *o, uint64_t worker_id);
void observe_forget_client(struct observe *o, uint64_t client_id);

/* ---- events ---------------------------------------------------------------------------------- */

/* Counts an update that state_apply() accepted: every update in sluice_updates_applied_total, the
 * seqs of SPLITS_LEASED, SPLITS_FINISHED and SPLITS_RETURNED in their counters; WORKER_REMOVED and
 * CLIENT_RELEASED forget the figures of their worker or client, ITERATION_GC its served counts. */
void observe_applied(struct observe *o, const struct st_update *u);

/* The calls sluice_request_seconds tells apart, and their label values. */
enum observe_call {
    OBSERVE_CALL_WORKER_HEARTBEAT,
    OBSERVE_CALL_GET_SPLITS,
    OBSERVE_CALL_CLIENT_HEARTBEAT,
    OBSERVE_CALL_OTHER,
    OBSERVE_CALLS
};
extern const char *const observe_call_names[OBSERVE_CALLS];

/* A request of that call answered `seconds` after it arrived (rpc_server_opts.on_answered). */
void observe_request(struct observe *o, enum observe_call call, double seconds);

/* One journal transaction committed in seconds, with bytes handed to the journal. */
void observe_journal_commit(struct observe *o, double seconds, uint64_t bytes);

/* ---- the window ------------------------------------------------------------------------------ */

struct observe_window {
    uint32_t before;  /* observe_recommended() just before the window closed */
    uint32_t current; /* registered workers that are not draining */
    struct autoscale_decision decision;
};

/* Closes the window if now_ms is at or past its end (the next one then ends window_ms after
 * now_ms, so a late call does not cause a burst of windows). Returns 1 with *out filled in when
 * a window closed, 0 when none was due, or SLUICE_ERR_NOMEM (the window stays open and is
 * retried at the next call). */
int observe_window_close(struct observe *o, const struct state *st, uint64_t now_ms,
                         struct observe_window *out);

/* observe_window_close(), then, when a window closed and the recommendation differs from what
 * observe_recommended() said before it, one info line with the decision and its figures. */
void observe_tick(struct observe *o, const struct state *st, uint64_t now_ms);

/* The recommendation of the last closed window, or before the first one the number of registered
 * workers that are not draining (at least 1). */
uint32_t observe_recommended(const struct observe *o, const struct state *st);

/* Registered workers that are not draining. */
uint32_t observe_current_workers(const struct state *st);

/* ---- exposition ------------------------------------------------------------------------------ */

/* Fills what the status document adds to the state: the recommendation and the configuration. */
void observe_status(const struct observe *o, const struct state *st, struct status_extra *out);

/* Sets x->tasks and x->ntasks to the figures of the tasks st has, their rates over the window
 * (window_ms) ending at now_ms, and x->cuts and x->ncuts to the copies cut short per job. The
 * arrays belong to o and stay valid until the next call into o. Returns 0 or SLUICE_ERR_NOMEM (x
 * unchanged). */
int observe_figures(struct observe *o, const struct state *st, uint64_t now_ms,
                    struct status_extra *x);

/* Sets the connection counters of the RPC server (rpc_metrics.h), which the server keeps
 * itself. */
/* A replica's Raft figures (replica.h) for /metrics: sluice_raft_role, _term, _commit_index,
 * _applied_index, _leader_changes_total. Returns 0 or SLUICE_ERR_NOMEM. */
struct status_raft;
int observe_raft(struct observe *o, const struct status_raft *v);

void observe_connections(struct observe *o, const struct rpc_counts *c);

/* Sets the object-store counters (obj_metrics.h) to the process's totals. Returns 0 or
 * SLUICE_ERR_NOMEM. */
struct obj_stats; /* common/obj_metrics.h */
int observe_objects(struct observe *o, const struct obj_stats *s);

/* Refreshes the gauges from st and the figures, and renders the registry (metrics.h). Returns 0
 * with *body (malloc'd, the caller frees it) and *len, or SLUICE_ERR_NOMEM. */
int observe_render(struct observe *o, const struct state *st, uint64_t now_ms, char **body,
                   size_t *len);

/* Refreshes the gauges as observe_render does and freezes the registry (metrics_freeze) for a
 * render elsewhere: off the loop thread, a scrape costs the loop the figures and a copy of the
 * lines' text, not the formatting of every number. Returns 0 with *out, or SLUICE_ERR_NOMEM. */
struct metrics_frozen;
int observe_freeze(struct observe *o, const struct state *st, uint64_t now_ms,
                   struct metrics_frozen **out);

#endif
