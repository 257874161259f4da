#include "observe.h"

#include "autoscale_pools.h"
#include "rates.h"

#include "common/error.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/names.h"
#include "common/obj_metrics.h"
#include "common/rpc_metrics.h"
#include "common/rows.h"
#include "common/u64map.h"

#include <inttypes.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bucket bounds of the commit histogram: 100 microseconds doubling up to about 6.5 s, which spans a
 * page-cache commit on a fast disk to a stalled fsync. */
#define COMMIT_BUCKET_START 0.0001
#define COMMIT_BUCKET_COUNT 17

/* A client's exposed wait is measured over EXPOSED_WINDOW_MS from samples EXPOSED_SPACING_MS
 * apart: the ring reaches back EXPOSED_SAMPLES * EXPOSED_SPACING_MS. */
#define EXPOSED_WINDOW_MS 60000
#define EXPOSED_SPACING_MS 4000
#define EXPOSED_SAMPLES 16

/* The figures of one worker (rate = summed task rates, share = idle) or one client (rate =
 * consumption, share = wait). */
struct figures {
    uint64_t id;
    /* The last report. */
    bool has_last;
    double last_rate, last_share;
    /* The reports of the open window. */
    uint32_t reports, with_data;
    double sum_rate, sum_share;
    /* The last closed window that had reports. */
    bool has_win;
    double win_rate, win_share;
    /* A client: the copies it last said it read cut short (cumulative). */
    uint64_t cut;
    /* A client: its job and its exposed wait (observe_client_exposed): the last report, and
     * samples at least EXPOSED_SPACING_MS apart to measure the share over the last minute. */
    uint64_t job_id;
    bool has_exposed;
    uint64_t ex_last_ms, ex_last_us;
    uint64_t ex_ms[EXPOSED_SAMPLES], ex_us[EXPOSED_SAMPLES];
    unsigned ex_head, ex_n; /* ex_head: the newest sample when ex_n > 0 */
};

/* Sorted by id. */
struct table {
    struct figures *v;
    size_t n, cap;
};

/* What the worker last reported of one task, and the samples of its served counters. */
struct task_fig {
    uint64_t id;
    uint64_t worker_id;
    uint64_t buffered, buffered_bytes;
    struct rate_ring ring;
    /* Its stages as last reported (validated; NULL until a report has some). */
    struct status_stage *stages;
    size_t nstages;
};

/* In no order, indexed by id (task id -> position in v): a cluster of 5,000 workers each with
 * ten tasks reports its 50,000 tasks in the order of its heartbeats, and a row costs about
 * 800 bytes, so keeping v sorted would move megabytes per new task. */
struct task_table {
    struct task_fig *v;
    size_t n, cap;
    struct u64map index;
    /* v's positions by task id (observe_figures lists the tasks so), made again only after a
     * row came or went: a cluster's tasks mostly stay, and sorting 50,000 of them for every
     * sample of the history was a few ms of the loop each time. */
    size_t *order;
    bool order_stale;
};

/* The labelled gauges of one job or worker: the label value and the series. */
#define JOB_GAUGES 7
#define WORKER_GAUGES 5

/* The labelled series of one job or worker (one per gauge family), found once and kept until the
 * id is gone (drop_gone, the only place their series are removed), so that a render costs a
 * lookup per id instead of a search through every series of every family. */
struct labelled {
    uint64_t id;
    struct metrics_series *s[JOB_GAUGES > WORKER_GAUGES ? JOB_GAUGES : WORKER_GAUGES];
};

struct labelled_table {
    struct labelled *v; /* by increasing id */
    size_t n, cap;
};

static const enum autoscale_reason reasons[] = {AUTOSCALE_NO_DATA, AUTOSCALE_UP, AUTOSCALE_DOWN,
                                                AUTOSCALE_HOLD};
#define NREASONS (sizeof reasons / sizeof reasons[0])

static const enum st_iteration_state iteration_states[] = {ST_ITER_ACTIVE, ST_ITER_FINISHED,
                                                           ST_ITER_GC};
#define NSTATES (sizeof iteration_states / sizeof iteration_states[0])

struct served_table {
    struct history_count *v; /* by increasing id */
    size_t n, cap;
};

struct observe {
    struct observe_config cfg;
    struct autoscale_params params;
    struct table workers, clients;
    /* Copies cut short, per job: sorted by job id; a job the state no longer has is dropped
     * (prune). */
    struct status_job_cut *cuts;
    size_t ncuts, cap_cuts;
    /* What the readers of named mix jobs drew from each input (observe_mix_drawn): the sums per
     * job, and each reader's last report, bounded (the least recently heard is forgotten; what
     * it drew stays in the sums). */
    struct status_mix_drawn *mixes;
    size_t nmixes, cap_mixes;
    struct mix_reader *mix_readers;
    size_t nmix_readers, cap_mix_readers;
    uint64_t window_end_ms;
    bool has_decision;
    uint32_t recommended;

    struct metrics *reg;
    /* A replica's Raft figures (observe_raft): registered on the first call. */
    struct metrics_series *raft_role_g, *raft_term_g, *raft_commit_g, *raft_applied_g,
        *raft_changes_c;
    bool raft_made;
    struct metrics_series *workers_g, *draining_g, *datasets_g, *jobs_g, *tasks_g, *clients_g;
    /* Saves into snapshot directories (docs/snapshots.md). */
    struct metrics_series *saves_g[3], *save_chunks_g, *save_committed_g;
    struct metrics_series *iterations_g[NSTATES];
    struct metrics_series *failed_g; /* active iterations that failed */
    struct metrics_series *applied_c, *leased_c, *finished_c, *returned_c, *journal_bytes_c;
    struct metrics_series *commit_h;
    struct metrics_series *request_h[OBSERVE_CALLS];
    struct rpc_metrics conns;
    struct obj_metrics objects;
    struct metrics_series *wait_g, *consumption_g, *production_g, *cut_c, *hedged_c, *batched_c;
    struct metrics_family *exposed_f;  /* sluice_client_exposed_wait_seconds_total{job,consumer} */
    struct status_consumer *consumers; /* observe_figures' scratch */
    size_t cap_consumers;
    struct metrics_series *recommended_g;
    /* The recommendation per pool (autoscale_pools.h) at the last window, sorted by name, and
     * sluice_autoscale_recommended_workers{pool}, whose series follow the pools. */
    char pool_key[LABEL_KEY_MAX + 1];
    struct autoscale_pool *pools;
    size_t npools;
    struct metrics_family *pool_f;
    struct metrics_series *windows_c[NREASONS];
    struct metrics_series *demand_g, *capacity_g, *unmet_g, *idle_g;

    /* Served rates and buffers (observe_task_heartbeat), their sums and per-job and per-worker
     * figures as labelled gauges; the ids exported at the last render, whose series are removed
     * once they are gone. */
    struct task_table tasks;
    /* What the tasks served, summed over their reports: per iteration and per worker (by
     * increasing id) and in all, for the dashboard's history (observe_served). */
    struct served_table served_iterations, served_workers;
    uint64_t served_elements, served_bytes;
    struct status_task_figures *scratch;
    size_t cap_scratch;
    struct metrics_series *served_eps_g, *served_bps_g, *buffered_g, *buffered_bytes_g;
    struct metrics_series *splits_outstanding_g;
    struct metrics_family *job_f[JOB_GAUGES], *worker_f[WORKER_GAUGES];
    uint64_t *job_ids, *worker_ids;
    size_t njob_ids, nworker_ids;
    struct labelled_table job_series, worker_series;
};

/* ---- tables ---------------------------------------------------------------------------------- */

static struct figures *table_find(struct table *t, uint64_t id, size_t *pos)
{
    size_t lo = rows_lower(t->v, t->n, sizeof *t->v, offsetof(struct figures, id), id);
    if (pos)
        *pos = lo;
    return lo < t->n && t->v[lo].id == id ? &t->v[lo] : NULL;
}

/* The entry of id, made empty when missing; NULL when out of memory. */
static struct figures *table_get(struct table *t, uint64_t id)
{
    size_t pos;
    struct figures *f = table_find(t, id, &pos);
    if (f)
        return f;
    f = rows_insert_at((void **)&t->v, &t->n, &t->cap, sizeof *t->v, pos);
    if (f)
        *f = (struct figures){.id = id};
    return f;
}

static void table_del(struct table *t, uint64_t id)
{
    size_t pos;
    if (table_find(t, id, &pos)) {
        memmove(&t->v[pos], &t->v[pos + 1], (t->n - pos - 1) * sizeof *t->v);
        t->n--;
    }
}

static void served_add(struct served_table *t, uint64_t id, uint64_t elements, uint64_t bytes)
{
    size_t pos = rows_lower(t->v, t->n, sizeof *t->v, offsetof(struct history_count, id), id);
    struct history_count *c = pos < t->n && t->v[pos].id == id ? &t->v[pos] : NULL;
    if (!c && (c = rows_insert_at((void **)&t->v, &t->n, &t->cap, sizeof *t->v, pos)) != NULL)
        c->id = id;
    if (c) {
        c->elements += elements;
        c->bytes += bytes;
    }
}

static void served_del(struct served_table *t, uint64_t id)
{
    size_t pos = rows_lower(t->v, t->n, sizeof *t->v, offsetof(struct history_count, id), id);
    if (pos < t->n && t->v[pos].id == id) {
        memmove(&t->v[pos], &t->v[pos + 1], (t->n - pos - 1) * sizeof *t->v);
        t->n--;
    }
}

/* A report; has_data false records that the sender had nothing to measure. */
static void figures_report(struct figures *f, bool has_data, double rate, double share)
{
    f->reports++;
    f->has_last = has_data;
    if (!has_data)
        return;
    f->last_rate = rate;
    f->last_share = share;
    f->with_data++;
    f->sum_rate += rate;
    f->sum_share += share;
}

/* Ends the open window for f: the mean of its reports, or no data when every report had none;
 * without reports the last window's figures stay. */
static void figures_close(struct figures *f)
{
    if (f->with_data > 0) {
        f->has_win = true;
        f->win_rate = f->sum_rate / f->with_data;
        f->win_share = f->sum_share / f->with_data;
    } else if (f->reports > 0) {
        f->has_win = false;
    }
    f->reports = f->with_data = 0;
    f->sum_rate = f->sum_share = 0;
}

static bool is_share(double x)
{
    return isfinite(x) && x >= 0 && x <= 1;
}

static bool is_rate(double x)
{
    return isfinite(x) && x >= 0;
}

/* A histogram family of durations: buckets from 100 us doubling up to about 6.5 s. */
static int seconds_histogram(struct metrics *r, const char *name, const char *help,
                             struct metrics_family **f)
{
    double bounds[COMMIT_BUCKET_COUNT];
    int rc = metrics_exponential_buckets(COMMIT_BUCKET_START, 2, COMMIT_BUCKET_COUNT, bounds);
    return rc == 0 ? metrics_histogram(r, name, help, bounds, COMMIT_BUCKET_COUNT, f) : rc;
}

/* ---- the registry ---------------------------------------------------------------------------- */

#define SCALAR_RC(counter, name, help, kind, out)                                                  \
    do {                                                                                           \
        if (rc == 0)                                                                               \
            rc = metrics_scalar(r, counter, name, help, kind, out);                                \
    } while (0)

static int make_registry(struct observe *o)
{
    struct metrics *r = o->reg;
    struct metrics_family *f;
    int rc = 0;
#define SCALAR(counter, name, help, kind, out)                                                     \
    do {                                                                                           \
        if (rc == 0)                                                                               \
            rc = metrics_scalar(r, counter, name, help, kind, out);                                \
    } while (0)
    SCALAR(false, "sluice_workers", "Workers registered with the dispatcher.", METRICS_U64,
           &o->workers_g);
    SCALAR(false, "sluice_workers_draining", "Registered workers that are draining.", METRICS_U64,
           &o->draining_g);
    SCALAR(false, "sluice_datasets", "Datasets registered.", METRICS_U64, &o->datasets_g);
    SCALAR(false, "sluice_jobs", "Jobs known to the dispatcher.", METRICS_U64, &o->jobs_g);
    if (rc == 0)
        rc = metrics_gauge(r, "sluice_iterations", "Current iterations of the jobs, by state.",
                           METRICS_U64, &f);
    for (size_t i = 0; rc == 0 && i < NSTATES; i++) {
        struct metrics_label l = {"state", st_iteration_state_name(iteration_states[i])};
        rc = metrics_series_get(f, &l, 1, &o->iterations_g[i]);
    }
    SCALAR(false, "sluice_iterations_failed",
           "Current iterations that failed (a task's pipeline failed); counted as active too.",
           METRICS_U64, &o->failed_g);
    SCALAR(false, "sluice_tasks", "Tasks assigned to workers, finished ones included.", METRICS_U64,
           &o->tasks_g);
    SCALAR(false, "sluice_clients", "Clients reading.", METRICS_U64, &o->clients_g);
    if (rc == 0)
        rc = metrics_gauge(r, "sluice_saves", "Saves into snapshot directories, by state.",
                           METRICS_U64, &f);
    for (int i = 0; rc == 0 && i < 3; i++) {
        struct metrics_label l = {"state", st_save_state_name((enum st_save_state)i)};
        rc = metrics_series_get(f, &l, 1, &o->saves_g[i]);
    }
    SCALAR(false, "sluice_save_chunks", "Chunks of the running saves' snapshots.", METRICS_U64,
           &o->save_chunks_g);
    SCALAR(false, "sluice_save_chunks_committed",
           "Chunks of the running saves written and recorded so far.", METRICS_U64,
           &o->save_committed_g);
    SCALAR(true, "sluice_updates_applied_total", "State updates applied since the start.",
           METRICS_U64, &o->applied_c);
    SCALAR(true, "sluice_splits_leased_total", "Splits leased to tasks (distributed_epoch).",
           METRICS_U64, &o->leased_c);
    SCALAR(true, "sluice_splits_finished_total",
           "Splits finished: reported by their tasks, or received in full by a consumer.",
           METRICS_U64, &o->finished_c);
    SCALAR(true, "sluice_splits_returned_total",
           "Leased splits returned to the pool to be issued again (their worker was lost or "
           "drained).",
           METRICS_U64, &o->returned_c);
    if (rc == 0)
        rc = seconds_histogram(r, "sluice_journal_commit_seconds",
                               "Duration of one journal transaction (group commit, fsync "
                               "included); none without --fault-tolerant.",
                               &f);
    if (rc == 0)
        rc = metrics_series_get(f, NULL, 0, &o->commit_h);
    if (rc == 0)
        rc = seconds_histogram(r, "sluice_request_seconds",
                               "Time from a request's arrival (read and decoded) to its reply "
                               "(queued to the socket), by call: worker_heartbeat, get_splits (a "
                               "GetSplits, or a worker's GetSplitsBatch for several tasks), "
                               "client_heartbeat or other.",
                               &f);
    for (int i = 0; rc == 0 && i < OBSERVE_CALLS; i++) {
        struct metrics_label l = {"call", observe_call_names[i]};
        rc = metrics_series_get(f, &l, 1, &o->request_h[i]);
    }
    SCALAR(true, "sluice_journal_bytes_total",
           "Bytes written to the journal: update records, dataset definitions and snapshots "
           "(none without --fault-tolerant).",
           METRICS_U64, &o->journal_bytes_c);
    SCALAR(false, "sluice_client_wait_share",
           "Mean over clients of the share of their last heartbeat interval spent waiting for "
           "elements.",
           METRICS_DOUBLE, &o->wait_g);
    if (rc == 0)
        rc = metrics_counter(r, "sluice_client_exposed_wait_seconds_total",
                             "Seconds a consumer's caller spent blocked in get-next waiting for "
                             "an element (the wait its trainer sees), as its heartbeats last "
                             "reported it; by job and consumer (client id).",
                             METRICS_DOUBLE, &o->exposed_f);
    SCALAR(true, "sluice_client_copies_cut_total",
           "Copies the clients read cut short (parallel_epochs and static sharding): a task whose "
           "worker was lost after it sent part of its copy; from the clients' heartbeats, counted "
           "again from the live clients' reports after a dispatcher restart.",
           METRICS_U64, &o->cut_c);
    SCALAR(true, "sluice_hedged_splits_total",
           "Hedged splits: copies of a split leased longer than its reader's hedge factor times "
           "the median split time, leased again to a second task (soft state: counted again "
           "from 0 after a dispatcher restart).",
           METRICS_U64, &o->hedged_c);
    SCALAR(true, "sluice_split_requests_batched_total",
           "Tasks' split requests that came in a worker's GetSplitsBatch, with its other "
           "tasks' (soft state: counted again from 0 after a dispatcher restart).",
           METRICS_U64, &o->batched_c);
    SCALAR(false, "sluice_consumption_elements_per_second",
           "Elements per second the clients consumed, summed, as of their last heartbeats.",
           METRICS_DOUBLE, &o->consumption_g);
    SCALAR(false, "sluice_production_elements_per_second",
           "Elements per second the workers' tasks produced, summed, as of their last "
           "heartbeats.",
           METRICS_DOUBLE, &o->production_g);
    SCALAR(false, "sluice_recommended_workers",
           "Workers the autoscaling policy recommends (the current count before the first "
           "window).",
           METRICS_U64, &o->recommended_g);
    if (rc == 0)
        rc = metrics_gauge(r, "sluice_autoscale_recommended_workers",
                           "Workers the autoscaling policy recommends for each pool (the workers' "
                           "label --autoscale-pool-label, \"\" for those without it) from that "
                           "pool's own jobs' demand, at the last window; no series before the "
                           "first window.",
                           METRICS_U64, &o->pool_f);
    if (rc == 0)
        rc = metrics_counter(r, "sluice_autoscale_windows_total",
                             "Autoscaling windows closed, by the reason of their decision.",
                             METRICS_U64, &f);
    for (size_t i = 0; rc == 0 && i < NREASONS; i++) {
        struct metrics_label l = {"reason", autoscale_reason_name(reasons[i])};
        rc = metrics_series_get(f, &l, 1, &o->windows_c[i]);
    }
    SCALAR(false, "sluice_autoscale_demand_elements_per_second",
           "Demand at the last window: consumption inflated by the clients' wait shares.",
           METRICS_DOUBLE, &o->demand_g);
    SCALAR(false, "sluice_autoscale_capacity_elements_per_second",
           "Capacity of one worker at the last window, extrapolated from its busy time; 0 when "
           "unknown.",
           METRICS_DOUBLE, &o->capacity_g);
    SCALAR(false, "sluice_autoscale_unmet_share",
           "Share of the demand that went unserved at the last window.", METRICS_DOUBLE,
           &o->unmet_g);
    SCALAR(false, "sluice_autoscale_idle_share",
           "Mean idle share of the workers at the last window.", METRICS_DOUBLE, &o->idle_g);
    SCALAR(false, "sluice_served_elements_per_second",
           "Elements per second the workers sent to readers, summed over the tasks of the jobs, "
           "over the last window.",
           METRICS_DOUBLE, &o->served_eps_g);
    SCALAR(false, "sluice_served_bytes_per_second",
           "Encoded bytes per second the workers sent to readers, summed over the tasks of the "
           "jobs, over the last window.",
           METRICS_DOUBLE, &o->served_bps_g);
    SCALAR(false, "sluice_buffered_elements",
           "Elements in the workers' buffers, as of their last heartbeats.", METRICS_U64,
           &o->buffered_g);
    SCALAR(false, "sluice_buffered_bytes",
           "Encoded bytes in the workers' buffers, as of their last heartbeats.", METRICS_U64,
           &o->buffered_bytes_g);
    SCALAR(false, "sluice_splits_outstanding",
           "Splits leased and not finished, summed over the jobs' current iterations.", METRICS_U64,
           &o->splits_outstanding_g);
    static const struct {
        const char *name, *help;
        enum metrics_kind kind;
    } job_gauges[JOB_GAUGES] = {
        {"sluice_job_clients", "Clients reading the job.", METRICS_U64},
        {"sluice_job_tasks", "Tasks of the job's current iteration.", METRICS_U64},
        {"sluice_job_workers", "Workers running an unfinished task of the job.", METRICS_U64},
        {"sluice_job_splits_finished",
         "Splits of the job's iteration finished (distributed_epoch; 0 in other modes).",
         METRICS_U64},
        {"sluice_job_splits_outstanding",
         "Splits of the job's iteration leased and not finished (distributed_epoch; 0 in other "
         "modes).",
         METRICS_U64},
        {"sluice_job_elements_per_second",
         "Elements per second served to the job's readers over the last window.", METRICS_DOUBLE},
        {"sluice_job_bytes_per_second",
         "Encoded bytes per second served to the job's readers over the last window.",
         METRICS_DOUBLE},
    };
    for (size_t i = 0; rc == 0 && i < JOB_GAUGES; i++)
        rc = metrics_gauge(r, job_gauges[i].name, job_gauges[i].help, job_gauges[i].kind,
                           &o->job_f[i]);
    static const struct {
        const char *name, *help;
        enum metrics_kind kind;
    } worker_gauges[WORKER_GAUGES] = {
        {"sluice_workers_tasks", "Tasks assigned to the worker, finished ones included.",
         METRICS_U64},
        {"sluice_workers_buffered_elements", "Elements in the worker's buffers.", METRICS_U64},
        {"sluice_workers_buffered_bytes", "Encoded bytes in the worker's buffers.", METRICS_U64},
        {"sluice_workers_served_elements_per_second",
         "Elements per second the worker sent to readers over the last window.", METRICS_DOUBLE},
        {"sluice_workers_served_bytes_per_second",
         "Encoded bytes per second the worker sent to readers over the last window.",
         METRICS_DOUBLE},
    };
    for (size_t i = 0; rc == 0 && i < WORKER_GAUGES; i++)
        rc = metrics_gauge(r, worker_gauges[i].name, worker_gauges[i].help, worker_gauges[i].kind,
                           &o->worker_f[i]);
    if (rc == 0)
        rc = rpc_metrics_create(r, &o->conns);
    if (rc == 0)
        rc = obj_metrics_create(r, &o->objects);
#undef SCALAR
    return rc;
}

/* ---- life ------------------------------------------------------------------------------------ */

int observe_create(const struct observe_config *cfg, const struct autoscale_params *params,
                   uint64_t now_ms, struct observe **out)
{
    struct observe *o = calloc(1, sizeof *o);
    if (!o)
        return SLUICE_ERR_NOMEM;
    o->cfg = *cfg;
    if (o->cfg.window_ms == 0)
        o->cfg.window_ms = OBSERVE_DEFAULT_WINDOW_MS;
    if (params)
        o->params = *params;
    else
        autoscale_params_default(&o->params);
    o->window_end_ms = now_ms + o->cfg.window_ms;
    snprintf(o->pool_key, sizeof o->pool_key, "%s",
             cfg->pool_label && cfg->pool_label[0] ? cfg->pool_label : "pool");
    o->cfg.pool_label = o->pool_key;
    o->pools = calloc(AUTOSCALE_POOLS_MAX, sizeof *o->pools);
    int rc = o->pools ? metrics_create(&o->reg) : SLUICE_ERR_NOMEM;
    if (rc == 0)
        rc = make_registry(o);
    if (rc < 0) {
        observe_destroy(o);
        /* The names and bounds are fixed, so only memory can be missing. */
        return SLUICE_ERR_NOMEM;
    }
    *out = o;
    return 0;
}

void observe_destroy(struct observe *o)
{
    if (!o)
        return;
    metrics_destroy(o->reg);
    free(o->pools);
    free(o->workers.v);
    free(o->clients.v);
    free(o->cuts);
    free(o->mixes);
    free(o->mix_readers);
    for (size_t i = 0; i < o->tasks.n; i++)
        free(o->tasks.v[i].stages);
    free(o->tasks.v);
    free(o->tasks.order);
    free(o->served_iterations.v);
    free(o->served_workers.v);
    u64map_release(&o->tasks.index);
    free(o->consumers);
    free(o->scratch);
    free(o->job_ids);
    free(o->worker_ids);
    free(o->job_series.v);
    free(o->worker_series.v);
    free(o);
}

uint32_t observe_window_ms(const struct observe *o)
{
    return o->cfg.window_ms;
}

/* ---- figures --------------------------------------------------------------------------------- */

void observe_worker_report(struct observe *o, uint64_t worker_id, const struct observe_task *tasks,
                           size_t ntasks)
{
    double rate = 0, idle = 0;
    size_t n = 0;
    bool valid = true;
    for (size_t i = 0; i < ntasks; i++) {
        if (tasks[i].finished)
            continue;
        valid &= is_rate(tasks[i].rate) && is_share(tasks[i].idle);
        rate += tasks[i].rate;
        idle += tasks[i].idle;
        n++;
    }
    struct figures *f = table_get(&o->workers, worker_id);
    if (!f)
        return;
    bool has_data = n > 0 && valid && isfinite(rate);
    figures_report(f, has_data, rate, has_data ? idle / (double)n : 0);
}

void observe_client_report(struct observe *o, uint64_t client_id, double rate, double wait)
{
    struct figures *f = table_get(&o->clients, client_id);
    if (!f)
        return;
    bool has_data = is_rate(rate) && is_share(wait);
    figures_report(f, has_data, rate, wait);
}

/* Tasks per report handled without allocating; a report with more is cut to this many. A worker
 * runs one task per iteration it serves, so real reports are far smaller. */
#define MAX_REPORT_TASKS 1024

void observe_worker_heartbeat(struct observe *o, uint64_t worker_id,
                              const Sluice__WorkerHeartbeatRequest *req)
{
    struct observe_task tasks[64] = {{0}};
    struct observe_task *v = tasks;
    size_t n = req->n_tasks < MAX_REPORT_TASKS ? req->n_tasks : MAX_REPORT_TASKS;
    if (n > sizeof tasks / sizeof tasks[0]) {
        v = malloc(n * sizeof *v);
        if (!v)
            return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const Sluice__TaskProgress *p = req->tasks[i];
        if (!p)
            continue;
        v[k++] = (struct observe_task){p->elements_per_second, p->idle_fraction, p->finished};
    }
    observe_worker_report(o, worker_id, v, k);
    if (v != tasks)
        free(v);
}

static struct task_fig *task_find(struct task_table *t, uint64_t id)
{
    uint64_t pos;
    return u64map_get(&t->index, id, &pos) ? &t->v[pos] : NULL;
}

/* A new zeroed row for id (not in t), or NULL when out of memory (t unchanged). */
static struct task_fig *task_add(struct task_table *t, uint64_t id)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        struct task_fig *v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return NULL;
        t->v = v;
        t->cap = cap;
    }
    if (u64map_put(&t->index, id, t->n) < 0)
        return NULL;
    struct task_fig *f = &t->v[t->n++];
    memset(f, 0, sizeof *f);
    f->id = id;
    t->order_stale = true;
    return f;
}

/* Removes the row at pos: the last row takes its place. */
static void task_remove_at(struct task_table *t, size_t pos)
{
    u64map_del(&t->index, t->v[pos].id);
    free(t->v[pos].stages);
    if (pos + 1 < t->n) {
        t->v[pos] = t->v[t->n - 1];
        u64map_put(&t->index, t->v[pos].id, pos); /* replaces: never allocates */
    }
    t->n--;
    t->order_stale = true;
}

/* Keeps the rows keep() accepts, in their order, and indexes them again. */
static void task_keep(struct task_table *t, bool (*keep)(const struct task_fig *, const void *),
                      const void *arg)
{
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (keep(&t->v[i], arg))
            t->v[k++] = t->v[i];
        else
            free(t->v[i].stages);
    }
    if (k == t->n)
        return;
    t->n = k;
    t->order_stale = true;
    u64map_clear(&t->index);
    for (size_t i = 0; i < t->n; i++)
        u64map_put(&t->index, t->v[i].id, i); /* at most as many keys as before: no allocation */
}

void observe_task_report(struct observe *o, uint64_t worker_id, uint64_t task_id,
                         uint64_t iteration_id, uint64_t now_ms,
                         const struct observe_task_counts *c)
{
    struct task_fig *f = task_find(&o->tasks, task_id);
    if (!f && !(f = task_add(&o->tasks, task_id)))
        return;
    if (f->worker_id != worker_id) {
        f->ring = (struct rate_ring){0}; /* another worker's counters start elsewhere */
        f->nstages = 0;
    }
    f->worker_id = worker_id;
    /* What it served since its last report: the difference from its newest sample, or all of it
     * when it has none or its counters went back (a worker that came back starts from 0). */
    uint64_t elements = c->served_elements, bytes = c->served_bytes;
    const struct rate_sample *last = f->ring.n ? &f->ring.v[f->ring.head] : NULL;
    if (last && last->elements <= elements && last->bytes <= bytes) {
        elements -= last->elements;
        bytes -= last->bytes;
    }
    if (elements || bytes) {
        served_add(&o->served_iterations, iteration_id, elements, bytes);
        served_add(&o->served_workers, worker_id, elements, bytes);
        o->served_elements += elements;
        o->served_bytes += bytes;
    }
    f->buffered = c->buffered;
    f->buffered_bytes = c->buffered_bytes;
    rate_ring_add(&f->ring,
                  &(struct rate_sample){now_ms, c->served_elements, c->served_bytes, c->busy_ns});
}

void observe_task_heartbeat(struct observe *o, const struct state *st, uint64_t worker_id,
                            uint64_t now_ms, const Sluice__WorkerHeartbeatRequest *req)
{
    size_t n = req->n_tasks < MAX_REPORT_TASKS ? req->n_tasks : MAX_REPORT_TASKS;
    for (size_t i = 0; i < n; i++) {
        const Sluice__TaskProgress *p = req->tasks[i];
        const struct st_task *t = p ? state_task(st, p->task_id) : NULL;
        if (!t || t->worker_id != worker_id)
            continue;
        struct observe_task_counts c = {p->served_elements, p->served_bytes, p->buffered,
                                        p->buffered_bytes, p->busy_ns};
        observe_task_report(o, worker_id, p->task_id, t->iteration_id, now_ms, &c);
        if (p->n_stages > 0) {
            struct status_stage v[STATUS_STAGES_MAX];
            size_t k = 0;
            for (size_t s = 0; s < p->n_stages && k < STATUS_STAGES_MAX; s++) {
                const Sluice__StageTime *tm = p->stages[s];
                if (tm && tm->name)
                    k += observe_stage_valid(tm->name, tm->seconds, &v[k]);
            }
            observe_task_stages(o, p->task_id, v, k);
        }
    }
}

int observe_stage_valid(const char *name, double seconds, struct status_stage *out)
{
    size_t len = strlen(name);
    if (len == 0 || len >= STATUS_STAGE_NAME_MAX || name_needs_escape(name) || !isfinite(seconds) ||
        seconds < 0)
        return 0;
    memcpy(out->name, name, len + 1);
    out->seconds = seconds;
    return 1;
}

void observe_task_stages(struct observe *o, uint64_t task_id, const struct status_stage *v,
                         size_t n)
{
    struct task_fig *f = task_find(&o->tasks, task_id);
    if (!f)
        return;
    if (n > STATUS_STAGES_MAX)
        n = STATUS_STAGES_MAX;
    if (!f->stages && !(f->stages = malloc(STATUS_STAGES_MAX * sizeof *f->stages)))
        return;
    memcpy(f->stages, v, n * sizeof *v);
    f->nstages = n;
}

static bool not_of_worker(const struct task_fig *f, const void *worker_id)
{
    return f->worker_id != *(const uint64_t *)worker_id;
}

static void forget_tasks_of(struct observe *o, uint64_t worker_id)
{
    task_keep(&o->tasks, not_of_worker, &worker_id);
}

struct mix_reader {
    uint64_t reader;
    size_t mix; /* index into o->mixes */
    uint64_t drawn[ST_MIX_INPUTS_MAX];
    uint64_t seen_ms;
};

void observe_mix_drawn(struct observe *o, const char *dataset_id, const char *job_name,
                       uint64_t reader, const uint64_t *drawn, size_t n, uint64_t now_ms)
{
    if (n == 0 || n > ST_MIX_INPUTS_MAX || !reader)
        return;
    size_t mi = 0;
    while (mi < o->nmixes && (strcmp(o->mixes[mi].dataset_id, dataset_id) != 0 ||
                              strcmp(o->mixes[mi].job_name, job_name) != 0))
        mi++;
    if (mi == o->nmixes) {
        struct status_mix_drawn *m =
            o->nmixes < ST_MIX_MAX ? rows_insert_at((void **)&o->mixes, &o->nmixes, &o->cap_mixes,
                                                    sizeof *o->mixes, o->nmixes)
                                   : NULL;
        if (!m)
            return;
        memset(m, 0, sizeof *m);
        snprintf(m->dataset_id, sizeof m->dataset_id, "%s", dataset_id);
        snprintf(m->job_name, sizeof m->job_name, "%s", job_name);
        m->n = n;
    }
    struct status_mix_drawn *m = &o->mixes[mi];
    if (m->n != n)
        return; /* not this mix's inputs: a confused or hostile reader */
    struct mix_reader *r = NULL;
    for (size_t i = 0; i < o->nmix_readers && !r; i++)
        if (o->mix_readers[i].reader == reader && o->mix_readers[i].mix == mi)
            r = &o->mix_readers[i];
    if (!r) {
        if (o->nmix_readers >= OBSERVE_MIX_READERS_MAX) {
            size_t old = 0;
            for (size_t i = 1; i < o->nmix_readers; i++)
                if (o->mix_readers[i].seen_ms < o->mix_readers[old].seen_ms)
                    old = i;
            r = &o->mix_readers[old];
        } else if (!(r = rows_insert_at((void **)&o->mix_readers, &o->nmix_readers,
                                        &o->cap_mix_readers, sizeof *o->mix_readers,
                                        o->nmix_readers))) {
            return;
        }
        memset(r, 0, sizeof *r);
        r->reader = reader;
        r->mix = mi;
    }
    /* Counts only grow; a smaller one (a report that arrived late) adds nothing. */
    for (size_t i = 0; i < n; i++)
        if (drawn[i] > r->drawn[i]) {
            m->drawn[i] += drawn[i] - r->drawn[i];
            r->drawn[i] = drawn[i];
        }
    r->seen_ms = now_ms;
}

void observe_client_cut(struct observe *o, uint64_t client_id, uint64_t job_id, uint64_t cut)
{
    struct figures *f = table_get(&o->clients, client_id);
    if (!f || cut <= f->cut)
        return;
    uint64_t delta = cut - f->cut;
    size_t pos = rows_lower(o->cuts, o->ncuts, sizeof *o->cuts,
                            offsetof(struct status_job_cut, job_id), job_id);
    struct status_job_cut *j =
        pos < o->ncuts && o->cuts[pos].job_id == job_id ? &o->cuts[pos] : NULL;
    if (!j) {
        j = rows_insert_at((void **)&o->cuts, &o->ncuts, &o->cap_cuts, sizeof *o->cuts, pos);
        if (!j)
            return; /* retried with the next report: the client's count is not taken yet */
        *j = (struct status_job_cut){.job_id = job_id};
    }
    j->cut += delta;
    f->cut = cut;
    metrics_add_u64(o->cut_c, delta);
}

void observe_hedged(struct observe *o, uint64_t n)
{
    metrics_add_u64(o->hedged_c, n);
}

void observe_batched(struct observe *o, uint64_t n)
{
    metrics_add_u64(o->batched_c, n);
}

void observe_client_heartbeat(struct observe *o, uint64_t job_id,
                              const Sluice__ClientHeartbeatRequest *req)
{
    observe_client_report(o, req->client_id, req->elements_per_second, req->wait_fraction);
    if (req->copies_cut)
        observe_client_cut(o, req->client_id, job_id, req->copies_cut);
}

void observe_forget_worker(struct observe *o, uint64_t worker_id)
{
    table_del(&o->workers, worker_id);
    forget_tasks_of(o, worker_id);
    served_del(&o->served_workers, worker_id);
}

/* Keeps the rows of t whose id has(st, id). */
static void served_prune(struct served_table *t, const struct state *st,
                         bool (*has)(const struct state *, uint64_t))
{
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (has(st, t->v[i].id))
            t->v[k++] = t->v[i];
    t->n = k;
}

static bool has_iteration(const struct state *st, uint64_t id)
{
    return state_iteration(st, id) != NULL;
}

static bool has_worker(const struct state *st, uint64_t id)
{
    return state_worker(st, id) != NULL;
}

void observe_served(struct observe *o, const struct state *st, struct history_served *out)
{
    /* Removals drop their rows as they apply; this catches one that raced a report. */
    served_prune(&o->served_iterations, st, has_iteration);
    served_prune(&o->served_workers, st, has_worker);
    *out = (struct history_served){
        .elements = o->served_elements,
        .bytes = o->served_bytes,
        .iterations = o->served_iterations.v,
        .niterations = o->served_iterations.n,
        .workers = o->served_workers.v,
        .nworkers = o->served_workers.n,
    };
}

void observe_forget_client(struct observe *o, uint64_t client_id)
{
    table_del(&o->clients, client_id);
}

void observe_client_exposed(struct observe *o, uint64_t client_id, uint64_t job_id, uint64_t now_ms,
                            uint64_t wait_us)
{
    struct figures *f = table_get(&o->clients, client_id);
    if (!f)
        return;
    /* A count that went back (or another job under the id) starts the samples over. */
    if (!f->has_exposed || wait_us < f->ex_last_us || now_ms < f->ex_last_ms || f->job_id != job_id)
        f->ex_n = 0;
    f->has_exposed = true;
    f->job_id = job_id;
    f->ex_last_ms = now_ms;
    f->ex_last_us = wait_us;
    /* The series outlives the client: it goes with its job (drop_gone removes every series
     * labelled with the job), so a consumer's total stays readable once it left. */
    char job[24], consumer[24];
    snprintf(job, sizeof job, "%" PRIu64, job_id);
    snprintf(consumer, sizeof consumer, "%" PRIu64, client_id);
    struct metrics_label l[2] = {{"job", job}, {"consumer", consumer}};
    struct metrics_series *s;
    if (metrics_series_get(o->exposed_f, l, 2, &s) == 0)
        metrics_set_double(s, (double)wait_us / 1e6);
    if (f->ex_n > 0 && now_ms - f->ex_ms[f->ex_head] < EXPOSED_SPACING_MS)
        return;
    f->ex_head = f->ex_n > 0 ? (f->ex_head + 1) % EXPOSED_SAMPLES : 0;
    f->ex_ms[f->ex_head] = now_ms;
    f->ex_us[f->ex_head] = wait_us;
    if (f->ex_n < EXPOSED_SAMPLES)
        f->ex_n++;
}

/* The share of wall time f waited over the last EXPOSED_WINDOW_MS before its last report: from
 * the newest sample at or before the window's start (or the oldest kept) to the last report. */
static bool exposed_share(const struct figures *f, double *share)
{
    if (!f->has_exposed || f->ex_n == 0)
        return false;
    unsigned base = (f->ex_head + EXPOSED_SAMPLES - (f->ex_n - 1)) % EXPOSED_SAMPLES;
    for (unsigned k = 0; k < f->ex_n; k++) {
        unsigned i = (f->ex_head + EXPOSED_SAMPLES - k) % EXPOSED_SAMPLES;
        if (f->ex_last_ms - f->ex_ms[i] >= EXPOSED_WINDOW_MS) {
            base = i;
            break;
        }
    }
    if (f->ex_last_ms <= f->ex_ms[base])
        return false;
    double s = (double)(f->ex_last_us - f->ex_us[base]) / 1000.0 /
               (double)(f->ex_last_ms - f->ex_ms[base]);
    *share = s > 1 ? 1 : s;
    return true;
}

/* ---- events ---------------------------------------------------------------------------------- */

void observe_applied(struct observe *o, const struct st_update *u)
{
    metrics_add_u64(o->applied_c, 1);
    switch (u->type) {
    case ST_SPLITS_LEASED:
        metrics_add_u64(o->leased_c, u->seqs.n);
        break;
    case ST_SPLITS_FINISHED:
        metrics_add_u64(o->finished_c, u->seqs.n);
        break;
    case ST_SPLITS_RETURNED:
        metrics_add_u64(o->returned_c, u->seqs.n);
        break;
    case ST_WORKER_REMOVED:
        observe_forget_worker(o, u->id);
        break;
    case ST_CLIENT_RELEASED:
        observe_forget_client(o, u->id);
        break;
    case ST_ITERATION_GC:
        served_del(&o->served_iterations, u->id);
        break;
    case ST_TASK_REMOVED: {
        const struct task_fig *f = task_find(&o->tasks, u->id);
        if (f)
            task_remove_at(&o->tasks, (size_t)(f - o->tasks.v));
        break;
    }
    default:
        break;
    }
}

const char *const observe_call_names[OBSERVE_CALLS] = {"worker_heartbeat", "get_splits",
                                                       "client_heartbeat", "other"};

void observe_request(struct observe *o, enum observe_call call, double seconds)
{
    metrics_observe(o->request_h[call], seconds);
}

void observe_journal_commit(struct observe *o, double seconds, uint64_t bytes)
{
    metrics_observe(o->commit_h, seconds);
    metrics_add_u64(o->journal_bytes_c, bytes);
}

/* ---- the window ------------------------------------------------------------------------------ */

uint32_t observe_current_workers(const struct state *st)
{
    uint32_t n = 0;
    for (size_t i = 0; i < st->nworkers; i++)
        n += !st->workers[i].draining;
    return n;
}

uint32_t observe_recommended(const struct observe *o, const struct state *st)
{
    if (o->has_decision)
        return o->recommended;
    uint32_t n = observe_current_workers(st);
    return n ? n : 1;
}

static bool in_state(const struct task_fig *f, const void *st)
{
    return state_task(st, f->id) != NULL;
}

/* Drops the figures of workers and clients the state no longer has. */
static void prune(struct observe *o, const struct state *st)
{
    size_t k = 0;
    for (size_t i = 0; i < o->workers.n; i++)
        if (state_worker(st, o->workers.v[i].id))
            o->workers.v[k++] = o->workers.v[i];
    o->workers.n = k;
    k = 0;
    for (size_t i = 0; i < o->clients.n; i++)
        if (state_client(st, o->clients.v[i].id))
            o->clients.v[k++] = o->clients.v[i];
    o->clients.n = k;
    /* A task's figures go as its removal applies (observe_applied) or its worker's; what is left
     * here is a report that raced a removal, or tasks an iteration took with it. Those make the
     * table larger than the state's task list sooner or later, and only then is it walked (every
     * window, 50,000 rows: about 12 ms of the loop). What it holds meanwhile is never shown:
     * observe_figures lists only tasks of the state. */
    if (o->tasks.n > st->ntasks)
        task_keep(&o->tasks, in_state, st);
    k = 0;
    for (size_t i = 0; i < o->ncuts; i++)
        if (state_job(st, o->cuts[i].job_id))
            o->cuts[k++] = o->cuts[i];
    o->ncuts = k;
}

/* The recommendation per pool: the workers' and clients' window figures (closed by the caller)
 * with their labels and their jobs' selectors, the pools' previous answers, and the gauges of
 * sluice_autoscale_recommended_workers{pool} set (those of pools gone removed). */
static int pools_close(struct observe *o, const struct state *st)
{
    struct autoscale_pool_worker *ws = calloc(st->nworkers ? st->nworkers : 1, sizeof *ws);
    struct autoscale_pool_client *cs = calloc(st->nclients ? st->nclients : 1, sizeof *cs);
    struct autoscale_pool_previous *prev = calloc(o->npools ? o->npools : 1, sizeof *prev);
    struct autoscale_pool *now = calloc(AUTOSCALE_POOLS_MAX, sizeof *now);
    if (!ws || !cs || !prev || !now) {
        free(ws);
        free(cs);
        free(prev);
        free(now);
        return SLUICE_ERR_NOMEM;
    }
    for (size_t i = 0; i < st->nworkers; i++) {
        const struct st_worker *w = &st->workers[i];
        const struct figures *f = table_find(&o->workers, w->id, NULL);
        ws[i] = (struct autoscale_pool_worker){
            .labels = w->labels,
            .draining = w->draining,
            .measured = f && f->has_win,
            .rate = f ? f->win_rate : 0,
            .idle = f ? f->win_share : 0,
        };
    }
    for (size_t i = 0; i < st->nclients; i++) {
        const struct st_client *c = &st->clients[i];
        const struct st_iteration *it = state_iteration(st, c->iteration_id);
        const struct st_job *j = it ? state_job(st, it->job_id) : NULL;
        const struct figures *f = table_find(&o->clients, c->id, NULL);
        cs[i] = (struct autoscale_pool_client){
            .selector = j ? j->selector : "",
            .measured = f && f->has_win,
            .rate = f ? f->win_rate : 0,
            .wait = f ? f->win_share : 0,
        };
    }
    for (size_t i = 0; i < o->npools; i++)
        prev[i] = (struct autoscale_pool_previous){o->pools[i].name, o->pools[i].recommended};
    struct autoscale_pools_input in = {
        .key = o->pool_key,
        .workers = ws,
        .nworkers = st->nworkers,
        .clients = cs,
        .nclients = st->nclients,
        .previous = prev,
        .nprevious = o->npools,
    };
    size_t n = 0;
    int rc = autoscale_pools_recommend(&o->params, &in, now, AUTOSCALE_POOLS_MAX, &n);
    if (rc == 0) {
        /* The series of pools gone go; then every pool's is set. */
        for (size_t i = 0; i < o->npools; i++) {
            bool kept = false;
            for (size_t k = 0; k < n && !kept; k++)
                kept = strcmp(now[k].name, o->pools[i].name) == 0;
            struct metrics_label l = {"pool", o->pools[i].name};
            struct metrics_series *s = kept ? NULL : metrics_series_find(o->pool_f, &l, 1);
            if (s)
                metrics_series_remove(s);
        }
        memcpy(o->pools, now, n * sizeof *now);
        o->npools = n;
        for (size_t i = 0; i < n && rc == 0; i++) {
            struct metrics_label l = {"pool", o->pools[i].name};
            struct metrics_series *s;
            rc = metrics_series_get(o->pool_f, &l, 1, &s);
            if (rc == 0)
                metrics_set_u64(s, o->pools[i].recommended);
        }
    }
    free(ws);
    free(cs);
    free(prev);
    free(now);
    return rc;
}

int observe_window_close(struct observe *o, const struct state *st, uint64_t now_ms,
                         struct observe_window *out)
{
    if (now_ms < o->window_end_ms)
        return 0;
    struct autoscale_worker *ws = malloc((o->workers.n ? o->workers.n : 1) * sizeof *ws);
    struct autoscale_client *cs = malloc((o->clients.n ? o->clients.n : 1) * sizeof *cs);
    if (!ws || !cs) {
        free(ws);
        free(cs);
        return SLUICE_ERR_NOMEM;
    }
    prune(o, st);
    struct autoscale_input in = {.workers = ws, .clients = cs};
    for (size_t i = 0; i < o->workers.n; i++) {
        struct figures *f = &o->workers.v[i];
        figures_close(f);
        const struct st_worker *w = state_worker(st, f->id);
        if (!f->has_win || w->draining)
            continue;
        ws[in.nworkers++] = (struct autoscale_worker){&f->win_rate, 1, f->win_share};
    }
    for (size_t i = 0; i < o->clients.n; i++) {
        struct figures *f = &o->clients.v[i];
        figures_close(f);
        if (f->has_win)
            cs[in.nclients++] = (struct autoscale_client){f->win_rate, f->win_share};
    }
    out->before = observe_recommended(o, st);
    out->current = observe_current_workers(st);
    in.current = out->current;
    in.no_consumers = st->nclients == 0;
    in.previous = o->has_decision ? o->recommended : 0;
    o->recommended = autoscale_recommend(&o->params, &in, &out->decision);
    o->has_decision = true;
    int prc = pools_close(o, st);
    o->window_end_ms = now_ms + o->cfg.window_ms;
    free(ws);
    free(cs);

    const struct autoscale_decision *d = &out->decision;
    for (size_t i = 0; i < NREASONS; i++)
        if (reasons[i] == d->reason)
            metrics_add_u64(o->windows_c[i], 1);
    metrics_set_double(o->demand_g, d->demand);
    metrics_set_double(o->capacity_g, d->capacity);
    metrics_set_double(o->unmet_g, d->unmet);
    metrics_set_double(o->idle_g, d->idle);
    return prc < 0 ? prc : 1;
}

void observe_tick(struct observe *o, const struct state *st, uint64_t now_ms)
{
    struct observe_window w;
    int rc = observe_window_close(o, st, now_ms, &w);
    if (rc <= 0 || w.decision.workers == w.before)
        return;
    const struct autoscale_decision *d = &w.decision;
    log_info("autoscale: recommending %" PRIu32 " worker%s (was %" PRIu32 ", %" PRIu32
             " serving): %s; demand %.1f/s, served %.1f/s, unmet share %.2f, capacity %.1f/s "
             "per worker, idle share %.2f, from %zu worker%s and %zu client%s",
             d->workers, d->workers == 1 ? "" : "s", w.before, w.current,
             autoscale_reason_name(d->reason), d->demand, d->served, d->unmet, d->capacity, d->idle,
             d->workers_measured, d->workers_measured == 1 ? "" : "s", d->clients_measured,
             d->clients_measured == 1 ? "" : "s");
}

/* ---- exposition ------------------------------------------------------------------------------ */

void observe_status(const struct observe *o, const struct state *st, struct status_extra *out)
{
    *out = (struct status_extra){
        .recommended_workers = observe_recommended(o, st),
        .worker_timeout_ms = o->cfg.worker_timeout_ms,
        .client_timeout_ms = o->cfg.client_timeout_ms,
        .job_gc_timeout_ms = o->cfg.job_gc_timeout_ms,
        .worker_heartbeat_ms = o->cfg.worker_heartbeat_ms,
        .client_heartbeat_ms = o->cfg.client_heartbeat_ms,
        .client_disconnect_grace_ms = o->cfg.client_disconnect_grace_ms,
        .worker_disconnect_grace_ms = o->cfg.worker_disconnect_grace_ms,
        .autoscale_window_ms = o->cfg.window_ms,
        .pools = o->pools,
        .npools = o->npools,
        .pool_label = o->pool_key,
    };
}

static int cmp_task_positions(const void *a, const void *b, void *arg)
{
    const struct task_fig *v = arg;
    uint64_t x = v[*(const size_t *)a].id, y = v[*(const size_t *)b].id;
    return x < y ? -1 : x > y;
}

/* Makes t->order again when rows came or went since. Returns 0 or SLUICE_ERR_NOMEM. */
static int task_order(struct task_table *t)
{
    if (!t->order_stale)
        return 0;
    size_t *order = realloc(t->order, (t->cap ? t->cap : 1) * sizeof *order);
    if (!order)
        return SLUICE_ERR_NOMEM;
    t->order = order;
    for (size_t i = 0; i < t->n; i++)
        order[i] = i;
    qsort_r(order, t->n, sizeof *order, cmp_task_positions, t->v);
    t->order_stale = false;
    return 0;
}

int observe_figures(struct observe *o, const struct state *st, uint64_t now_ms,
                    struct status_extra *x)
{
    if (o->tasks.n > o->cap_scratch) {
        struct status_task_figures *v = realloc(o->scratch, o->tasks.n * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        o->scratch = v;
        o->cap_scratch = o->tasks.n;
    }
    if (task_order(&o->tasks) < 0)
        return SLUICE_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < o->tasks.n; i++) {
        const struct task_fig *f = &o->tasks.v[o->tasks.order[i]];
        const struct st_task *t = state_task(st, f->id);
        if (!t || t->worker_id != f->worker_id)
            continue;
        struct rate r = rate_ring_rate(&f->ring, now_ms, o->cfg.window_ms);
        const struct rate_sample *last = f->ring.n ? &f->ring.v[f->ring.head] : NULL;
        o->scratch[n++] = (struct status_task_figures){
            .task_id = f->id,
            .elements_per_second = r.elements_per_second,
            .bytes_per_second = r.bytes_per_second,
            .busy_per_second = r.busy_per_second,
            .buffered = f->buffered,
            .buffered_bytes = f->buffered_bytes,
            .elements = last ? last->elements : 0,
            .bytes = last ? last->bytes : 0,
            .stages = f->stages,
            .nstages = f->nstages,
        };
    }
    x->tasks = o->scratch;
    x->ntasks = n;
    x->cuts = o->cuts;
    x->ncuts = o->ncuts;
    x->mixes = o->mixes;
    x->nmixes = o->nmixes;
    if (o->clients.n > o->cap_consumers) {
        struct status_consumer *v = realloc(o->consumers, o->clients.n * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        o->consumers = v;
        o->cap_consumers = o->clients.n;
    }
    size_t nc = 0;
    for (size_t i = 0; i < o->clients.n; i++) {
        const struct figures *f = &o->clients.v[i];
        if (!f->has_exposed || !state_client(st, f->id))
            continue;
        struct status_consumer *c = &o->consumers[nc++];
        *c = (struct status_consumer){.client_id = f->id,
                                      .job_id = f->job_id,
                                      .exposed_wait_seconds = (double)f->ex_last_us / 1e6,
                                      .elements_per_second = f->has_last ? f->last_rate : 0};
        c->has_share = exposed_share(f, &c->wait_share);
    }
    x->consumers = o->consumers;
    x->nconsumers = nc;
    return 0;
}

int observe_objects(struct observe *o, const struct obj_stats *s)
{
    return obj_metrics_set(&o->objects, s);
}

int observe_raft(struct observe *o, const struct status_raft *v)
{
    if (!o->raft_made) {
        struct metrics *r = o->reg;
        int rc = 0;
        SCALAR_RC(false, "sluice_raft_role",
                  "This dispatcher replica's Raft role: 2 leader (serving), 1 candidate, 0 "
                  "follower.",
                  METRICS_U64, &o->raft_role_g);
        SCALAR_RC(false, "sluice_raft_term", "This replica's current Raft term.", METRICS_U64,
                  &o->raft_term_g);
        SCALAR_RC(false, "sluice_raft_commit_index",
                  "The index of the last Raft entry this replica knows is committed.", METRICS_U64,
                  &o->raft_commit_g);
        SCALAR_RC(false, "sluice_raft_applied_index",
                  "The index of the last Raft entry this replica applied to its state.",
                  METRICS_U64, &o->raft_applied_g);
        SCALAR_RC(true, "sluice_raft_leader_changes_total",
                  "Times this replica saw the group's leader change.", METRICS_U64,
                  &o->raft_changes_c);
        if (rc < 0)
            return rc;
        o->raft_made = true;
    }
    uint64_t role = strcmp(v->role, "leader") == 0 ? 2 : strcmp(v->role, "candidate") == 0;
    metrics_set_u64(o->raft_role_g, role);
    metrics_set_u64(o->raft_term_g, v->term);
    metrics_set_u64(o->raft_commit_g, v->commit_index);
    metrics_set_u64(o->raft_applied_g, v->applied_index);
    metrics_set_u64(o->raft_changes_c, v->leader_changes);
    return 0;
}

void observe_connections(struct observe *o, const struct rpc_counts *c)
{
    rpc_metrics_set(&o->conns, c);
}

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Removes the series labelled name=id of every id in *old that is not in ids[0..n) (increasing),
 * with its row of t, and keeps ids as the new *old (unchanged when out of memory: the removal is
 * retried next time). */
static void drop_gone(struct observe *o, const char *name, struct labelled_table *t, uint64_t **old,
                      size_t *nold, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < *nold; i++) {
        if (n > 0 && bsearch(&(*old)[i], ids, n, sizeof *ids, cmp_id))
            continue;
        char v[24];
        snprintf(v, sizeof v, "%" PRIu64, (*old)[i]);
        metrics_remove_label(o->reg, name, v);
        size_t pos = rows_lower(t->v, t->n, sizeof *t->v, offsetof(struct labelled, id), (*old)[i]);
        if (pos < t->n && t->v[pos].id == (*old)[i]) {
            memmove(t->v + pos, t->v + pos + 1, (t->n - pos - 1) * sizeof *t->v);
            t->n--;
        }
    }
    uint64_t *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy)
        return;
    if (n)
        memcpy(copy, ids, n * sizeof *copy);
    free(*old);
    *old = copy;
    *nold = n;
}

/* The series of families[0, nf) labelled name=id: from t, or made (and kept in t) the first time.
 * NULL when out of memory. */
static const struct labelled *labelled_of(struct labelled_table *t,
                                          struct metrics_family **families, size_t nf,
                                          const char *name, uint64_t id)
{
    size_t pos = rows_lower(t->v, t->n, sizeof *t->v, offsetof(struct labelled, id), id);
    if (pos < t->n && t->v[pos].id == id)
        return &t->v[pos];
    char v[24];
    snprintf(v, sizeof v, "%" PRIu64, id);
    struct metrics_label l = {name, v};
    struct labelled row = {.id = id};
    for (size_t k = 0; k < nf; k++) {
        if (metrics_series_get(families[k], &l, 1, &row.s[k]) < 0)
            return NULL;
    }
    struct labelled *at = rows_insert_at((void **)&t->v, &t->n, &t->cap, sizeof *t->v, pos);
    if (!at)
        return NULL;
    *at = row;
    return at;
}

/* The figures of the jobs and workers, from the same computation as the status document. */
static void render_figures(struct observe *o, const struct state *st, uint64_t now_ms)
{
    struct status_extra x = {0};
    if (observe_figures(o, st, now_ms, &x) < 0)
        x.tasks = NULL;
    double eps = 0, bps = 0;
    uint64_t buffered = 0, buffered_bytes = 0, outstanding = 0;
    uint64_t *ids =
        malloc((st->njobs > st->nworkers ? st->njobs : st->nworkers) * sizeof *ids + sizeof *ids);
    /* Every job's and worker's figures in one pass (status_all_figures); one by one when out of
     * memory. */
    struct status_figures *jf = malloc((st->njobs + st->nworkers + 1) * sizeof *jf);
    struct status_figures *wf = jf ? jf + st->njobs : NULL;
    if (jf && status_all_figures(st, &x, jf, wf) < 0) {
        free(jf);
        jf = wf = NULL;
    }
    for (size_t i = 0; i < st->njobs; i++) {
        const struct st_job *j = &st->jobs[i];
        const struct st_iteration *it = state_iteration(st, j->iteration_id);
        struct status_figures f;
        if (jf)
            f = jf[i];
        else
            status_job_figures(st, &x, j, &f);
        bool splits = it && it->distributed && it->state != ST_ITER_GC;
        uint64_t u[5] = {state_iteration_clients(st, j->iteration_id), f.tasks, f.workers,
                         splits ? it->splits_finished : 0, splits ? it->splits_leased : 0};
        const struct labelled *l = labelled_of(&o->job_series, o->job_f, JOB_GAUGES, "job", j->id);
        if (l) {
            for (size_t k = 0; k < 5; k++)
                metrics_set_u64(l->s[k], u[k]);
            metrics_set_double(l->s[5], f.elements_per_second);
            metrics_set_double(l->s[6], f.bytes_per_second);
        }
        eps += f.elements_per_second;
        bps += f.bytes_per_second;
        outstanding += u[4];
        if (ids)
            ids[i] = j->id;
    }
    if (ids)
        drop_gone(o, "job", &o->job_series, &o->job_ids, &o->njob_ids, ids, st->njobs);
    for (size_t i = 0; i < st->nworkers; i++) {
        const struct st_worker *w = &st->workers[i];
        struct status_figures f;
        if (wf)
            f = wf[i];
        else
            status_worker_figures(st, &x, w, &f);
        const struct labelled *l =
            labelled_of(&o->worker_series, o->worker_f, WORKER_GAUGES, "worker", w->id);
        if (l) {
            metrics_set_u64(l->s[0], f.tasks);
            metrics_set_u64(l->s[1], f.buffered);
            metrics_set_u64(l->s[2], f.buffered_bytes);
            metrics_set_double(l->s[3], f.elements_per_second);
            metrics_set_double(l->s[4], f.bytes_per_second);
        }
        buffered += f.buffered;
        buffered_bytes += f.buffered_bytes;
        if (ids)
            ids[i] = w->id;
    }
    if (ids)
        drop_gone(o, "worker", &o->worker_series, &o->worker_ids, &o->nworker_ids, ids,
                  st->nworkers);
    free(ids);
    free(jf);
    metrics_set_double(o->served_eps_g, eps);
    metrics_set_double(o->served_bps_g, bps);
    metrics_set_u64(o->buffered_g, buffered);
    metrics_set_u64(o->buffered_bytes_g, buffered_bytes);
    metrics_set_u64(o->splits_outstanding_g, outstanding);
}

/* Sets every gauge computed from the state and the figures at now_ms. */
static void observe_update(struct observe *o, const struct state *st, uint64_t now_ms)
{
    render_figures(o, st, now_ms);
    metrics_set_u64(o->workers_g, st->nworkers);
    metrics_set_u64(o->draining_g, st->nworkers - observe_current_workers(st));
    metrics_set_u64(o->datasets_g, st->ndatasets);
    metrics_set_u64(o->jobs_g, st->njobs);
    for (size_t k = 0; k < NSTATES; k++) {
        uint64_t n = 0;
        for (size_t i = 0; i < st->niterations; i++)
            n += st->iterations[i].state == iteration_states[k];
        metrics_set_u64(o->iterations_g[k], n);
    }
    uint64_t failed = 0;
    for (size_t i = 0; i < st->niterations; i++)
        failed += st->iterations[i].state == ST_ITER_ACTIVE && st->iterations[i].error;
    metrics_set_u64(o->failed_g, failed);
    uint64_t saves[3] = {0}, chunks = 0, committed = 0;
    for (size_t i = 0; i < st->nsaves; i++) {
        const struct st_save *sv = &st->saves[i];
        if ((unsigned)sv->state < 3)
            saves[sv->state]++;
        if (sv->state == ST_SV_RUNNING) {
            chunks += sv->chunks;
            committed += state_save_committed(st, sv);
        }
    }
    for (int k = 0; k < 3; k++)
        metrics_set_u64(o->saves_g[k], saves[k]);
    metrics_set_u64(o->save_chunks_g, chunks);
    metrics_set_u64(o->save_committed_g, committed);
    metrics_set_u64(o->tasks_g, st->ntasks);
    metrics_set_u64(o->clients_g, st->nclients);

    double wait = 0, consumption = 0, production = 0;
    size_t waiting = 0;
    for (size_t i = 0; i < o->clients.n; i++) {
        const struct figures *f = &o->clients.v[i];
        if (!f->has_last || !state_client(st, f->id))
            continue;
        wait += f->last_share;
        consumption += f->last_rate;
        waiting++;
    }
    for (size_t i = 0; i < o->workers.n; i++) {
        const struct figures *f = &o->workers.v[i];
        if (f->has_last && state_worker(st, f->id))
            production += f->last_rate;
    }
    metrics_set_double(o->wait_g, waiting ? wait / (double)waiting : 0);
    metrics_set_double(o->consumption_g, consumption);
    metrics_set_double(o->production_g, production);
    metrics_set_u64(o->recommended_g, observe_recommended(o, st));
}

int observe_render(struct observe *o, const struct state *st, uint64_t now_ms, char **body,
                   size_t *len)
{
    observe_update(o, st, now_ms);
    return metrics_render(o->reg, body, len);
}

int observe_freeze(struct observe *o, const struct state *st, uint64_t now_ms,
                   struct metrics_frozen **out)
{
    observe_update(o, st, now_ms);
    return metrics_freeze(o->reg, out);
}
