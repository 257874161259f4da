/* The worker's metrics: a Prometheus registry (metrics.h) fed by the worker shell, and the idle
 * share each heartbeat reports per task (TaskProgress.idle_fraction).
 *
 * Counters move when something happens (a request arrives, a reply carries elements); the
 * per-task figures come from task_progress() in passes over the live tasks, made by every
 * heartbeat and every scrape: wmetrics_pass_begin(), one wmetrics_task_*() call per live task,
 * wmetrics_pass_end(). A pass sets the task and buffer gauges, adds to the produced counter what
 * each task published since it was last seen, and forgets tasks it did not see (their elements
 * published after the last pass that saw them are not counted).
 *
 * Metrics:
 *   sluice_worker_tasks                     gauge: tasks not finished or failed
 *   sluice_worker_requests_total            counter: GetElements requests received
 *   sluice_worker_elements_served_total     counter: elements sent in GetElements replies
 *   sluice_worker_bytes_served_total        counter: encoded element bytes in those replies
 *   sluice_worker_local_requests_total      counter: of those requests, the ones from readers in
 *                                           this process (in-process connections, no TCP)
 *   sluice_worker_local_elements_served_total
 *                                           counter: of those elements, the ones sent to them
 *   sluice_worker_shm_elements_total        counter: of the elements served, the ones written
 *                                           into a shared-memory region of a reader on this host
 *   sluice_worker_shm_bytes_total           counter: the bytes of those
 *   sluice_worker_shm_inplace_bytes_total   counter: of those bytes, the ones announced where the
 *                                           pipeline built them, in the region's arena (no copy)
 *   sluice_worker_elements_produced_total   counter: elements the tasks published into their
 *                                           buffers
 *   sluice_worker_buffered_elements         gauge: elements waiting in the tasks' buffers
 *   sluice_worker_idle_share                gauge: mean idle share of the tasks at the last
 *                                           heartbeat
 *   sluice_worker_stage_seconds_total{job,stage}
 *                                           counter: seconds the tasks of the job spent in
 *                                           each stage (task_stages: the pipeline's source
 *                                           and operations, buffer_wait, send); a job's
 *                                           series go once no pass sees a task of it
 *   sluice_worker_job_cpu_seconds_total{job}
 *                                           counter: seconds of thread time the slices of the
 *                                           job's tasks took on the worker's threads (fair.h;
 *                                           waits inside the pipeline included): what weighted
 *                                           sharing divides; gone with the job's stage series
 *   sluice_worker_cross_trainer_cache_bytes gauge: what the tasks' cross-trainer caches hold
 *                                           (xtcache.h's cost: record bytes plus overhead)
 *   sluice_worker_cross_trainer_skipped_total
 *                                           counter: elements trainers skipped because the
 *                                           cache evicted them before they read them
 *   sluice_auth_failures_total,             counters: of the worker's RPC server (rpc.h) and,
 *   sluice_connections_refused_total,       for authentication, its dispatcher connection too,
 *   sluice_handshake_timeouts_total,        as wmetrics_connections last set them
 *   sluice_handshake_evictions_total
 *   sluice_object_requests_total{op,code},  counters: the process's object-store requests and
 *   sluice_object_bytes_total,              bytes received and sent (obj_metrics.h), as
 *   sluice_object_bytes_sent_total          wmetrics_objects last set them
 *
 * Threading: the loop thread only. Ownership: struct wmetrics owns its registry and table. */
#ifndef SLUICE_WORKER_WMETRICS_H
#define SLUICE_WORKER_WMETRICS_H

#include "task.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wmetrics;

/* Returns 0 and *out (the caller owns it), or SLUICE_ERR_NOMEM. */
int wmetrics_create(struct wmetrics **out);
/* NULL is allowed. */
void wmetrics_destroy(struct wmetrics *m);

/* A GetElements request arrived; local: over an in-process connection. */
void wmetrics_request(struct wmetrics *m, bool local);
/* A reply carried elements records making up bytes bytes; local: over an in-process
 * connection. */
void wmetrics_served(struct wmetrics *m, uint64_t elements, uint64_t bytes, bool local);
/* Of those, elements and bytes that went through a reader's shared-memory region. */
void wmetrics_shm(struct wmetrics *m, uint64_t elements, uint64_t bytes, uint64_t inplace);

/* The share of an interval of interval_ns in which producers producers were blocked, given the
 * nanoseconds they spent blocked during it, summed over them: blocked_ns / (producers *
 * interval_ns), clamped to [0, 1]; 0 when producers or interval_ns is 0. Pure. */
double wmetrics_idle_share(uint64_t blocked_ns, unsigned producers, uint64_t interval_ns);

void wmetrics_pass_begin(struct wmetrics *m);
/* A heartbeat's view of a live task at now_ns (uv_hrtime): returns its idle share since the
 * previous heartbeat that saw it (wmetrics_idle_share of the growth of tp->blocked_ns), 0 the
 * first time; 1 once every producer has exited (done), since the task then has nothing to do. */
double wmetrics_task_heartbeat(struct wmetrics *m, uint64_t task_id, const struct task_progress *tp,
                               uint64_t now_ns);
/* In a pass, after the task's wmetrics_task_heartbeat or wmetrics_task_seen: the task of job
 * job_id spent st[0..TASK_STAGES_MAX)'s nanoseconds in its stages so far (task_stages); what
 * each grew since the last pass goes to sluice_worker_stage_seconds_total{job,stage}. */
void wmetrics_task_stages(struct wmetrics *m, uint64_t job_id, uint64_t task_id,
                          const struct task_stage *st);
/* In a pass, like wmetrics_task_stages: the task of job job_id took busy_ns of thread time so
 * far (task_progress); its growth since the last pass goes to
 * sluice_worker_job_cpu_seconds_total{job}. */
void wmetrics_task_busy(struct wmetrics *m, uint64_t job_id, uint64_t task_id, uint64_t busy_ns);
/* A scrape's view of a live task: counts and gauges only, the idle share's interval untouched. */
void wmetrics_task_seen(struct wmetrics *m, uint64_t task_id, const struct task_progress *tp);
/* In a pass: a task's cross-trainer cache holds bytes (its cost). */
void wmetrics_xtc_seen(struct wmetrics *m, uint64_t bytes);
void wmetrics_pass_end(struct wmetrics *m);
/* A trainer skipped elements of a cross-trainer cache (they were evicted before it read them). */
void wmetrics_xtc_skipped(struct wmetrics *m, uint64_t elements);

/* Sets the connection counters of the worker's RPC server (rpc_metrics.h), which the server
 * keeps itself. */
struct rpc_counts;
void wmetrics_connections(struct wmetrics *m, const struct rpc_counts *c);

/* Sets the object-store counters (obj_metrics.h) to the process's totals. Returns 0 or
 * SLUICE_ERR_NOMEM. */
struct obj_stats;
int wmetrics_objects(struct wmetrics *m, const struct obj_stats *s);

/* Renders the registry. Returns 0 with *body (malloc'd, the caller frees it) and *len, or
 * SLUICE_ERR_NOMEM. */
int wmetrics_render(struct wmetrics *m, char **body, size_t *len);

#endif
