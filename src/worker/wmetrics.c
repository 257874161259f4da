#include "wmetrics.h"

#include "common/error.h"
#include "common/metrics.h"
#include "common/obj_metrics.h"
#include "common/rpc_metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the passes remember of one task. */
struct wm_task {
    uint64_t id;
    uint64_t produced;                  /* as of the last pass that saw it */
    uint64_t chunks;                    /* snapshot chunks committed, likewise */
    uint64_t blocked_ns;                /* as of the last heartbeat that saw it */
    uint64_t at_ns;                     /* when that heartbeat was */
    bool primed;                        /* a heartbeat has seen it */
    uint64_t stage_ns[TASK_STAGES_MAX]; /* as of the last pass that saw it */
    uint64_t busy_ns;                   /* likewise */
    bool seen;                          /* seen in the current pass */
};

struct wmetrics {
    struct metrics *reg;
    struct metrics_series *tasks_g, *requests_c, *served_c, *bytes_c, *produced_c, *buffered_g,
        *idle_g, *xtc_bytes_g, *xtc_skipped_c, *local_requests_c, *local_served_c, *chunks_c,
        *shm_bytes_c, *shm_elements_c, *shm_inplace_c;
    struct metrics_family *stages_f, *busy_f;
    /* Jobs with stage series: those of the last pass, and those the current pass saw (the
     * series of a job no pass sees any more are removed at the pass's end). */
    uint64_t *jobs, *pass_jobs;
    size_t njobs, npass_jobs, cap_jobs;
    struct rpc_metrics conns;
    struct obj_metrics objects;
    struct wm_task *tasks; /* unordered; a worker runs a handful of tasks */
    size_t n, cap;
    /* The current pass. */
    uint64_t pass_tasks, pass_buffered, pass_xtc_bytes;
    double pass_idle;
    size_t pass_beats;
};

static int scalar(struct metrics *reg, bool counter, const char *name, const char *help,
                  struct metrics_series **out)
{
    return metrics_scalar(reg, counter, name, help, METRICS_U64, out);
}

int wmetrics_create(struct wmetrics **out)
{
    struct wmetrics *m = calloc(1, sizeof *m);
    if (!m)
        return SLUICE_ERR_NOMEM;
    int rc = metrics_create(&m->reg);
    if (rc == 0)
        rc = scalar(m->reg, false, "sluice_worker_tasks",
                    "Tasks running on this worker (not finished or failed).", &m->tasks_g);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_requests_total", "GetElements requests received.",
                    &m->requests_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_elements_served_total",
                    "Elements sent to readers in GetElements replies.", &m->served_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_bytes_served_total",
                    "Encoded element bytes sent to readers in GetElements replies.", &m->bytes_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_local_requests_total",
                    "GetElements requests received from readers in this process, over in-process "
                    "connections (no TCP).",
                    &m->local_requests_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_local_elements_served_total",
                    "Elements sent to readers in this process, over in-process connections.",
                    &m->local_served_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_shm_elements_total",
                    "Elements sent to readers on this host through a shared-memory region.",
                    &m->shm_elements_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_shm_bytes_total",
                    "Encoded element bytes written into shared-memory regions of readers on this "
                    "host.",
                    &m->shm_bytes_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_shm_inplace_bytes_total",
                    "Of the bytes sent through shared-memory regions, the ones announced in "
                    "place: built by the pipeline in the region's arena, never copied.",
                    &m->shm_inplace_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_elements_produced_total",
                    "Elements the tasks' pipelines published into their buffers (counted at each "
                    "heartbeat and scrape).",
                    &m->produced_c);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_snapshot_chunks_committed_total",
                    "Snapshot chunks the tasks of saves wrote and committed.", &m->chunks_c);
    if (rc == 0)
        rc = scalar(m->reg, false, "sluice_worker_buffered_elements",
                    "Elements waiting in the tasks' buffers for readers.", &m->buffered_g);
    if (rc == 0)
        rc = scalar(m->reg, false, "sluice_worker_cross_trainer_cache_bytes",
                    "Bytes the tasks' cross-trainer caches hold: each element's record (length "
                    "prefix included) plus 4 for its offset.",
                    &m->xtc_bytes_g);
    if (rc == 0)
        rc = scalar(m->reg, true, "sluice_worker_cross_trainer_skipped_total",
                    "Elements trainers skipped because the cross-trainer cache evicted them "
                    "before they read them.",
                    &m->xtc_skipped_c);
    if (rc == 0)
        rc = metrics_scalar(m->reg, false, "sluice_worker_idle_share",
                            "Mean over the tasks of the share of the last heartbeat interval "
                            "their producers waited on a full buffer.",
                            METRICS_DOUBLE, &m->idle_g);
    if (rc == 0)
        rc = metrics_counter(m->reg, "sluice_worker_stage_seconds_total",
                             "Seconds the tasks of a job spent in each stage on this worker: "
                             "the pipeline's source and operations (by name and position, "
                             "estimated by sampling one call in 64), buffer_wait (producers "
                             "waiting for room in a full buffer) and send (replies being "
                             "written).",
                             METRICS_DOUBLE, &m->stages_f);
    if (rc == 0)
        rc = metrics_counter(m->reg, "sluice_worker_job_cpu_seconds_total",
                             "Seconds of thread time the tasks of a job took on this worker's "
                             "threads (waits inside the pipeline's functions included): what "
                             "the threads are shared by, in proportion to the jobs' weights.",
                             METRICS_DOUBLE, &m->busy_f);
    /* The same names as the dispatcher's: they describe the RPC server both run. */
    if (rc == 0)
        rc = rpc_metrics_create(m->reg, &m->conns);
    /* The same names as the dispatcher's: they count this process's object-store requests. */
    if (rc == 0)
        rc = obj_metrics_create(m->reg, &m->objects);
    if (rc < 0) {
        wmetrics_destroy(m);
        return SLUICE_ERR_NOMEM;
    }
    *out = m;
    return 0;
}

void wmetrics_destroy(struct wmetrics *m)
{
    if (!m)
        return;
    metrics_destroy(m->reg);
    free(m->tasks);
    free(m->jobs);
    free(m->pass_jobs);
    free(m);
}

void wmetrics_request(struct wmetrics *m, bool local)
{
    metrics_add_u64(m->requests_c, 1);
    if (local)
        metrics_add_u64(m->local_requests_c, 1);
}

void wmetrics_served(struct wmetrics *m, uint64_t elements, uint64_t bytes, bool local)
{
    metrics_add_u64(m->served_c, elements);
    metrics_add_u64(m->bytes_c, bytes);
    if (local)
        metrics_add_u64(m->local_served_c, elements);
}

void wmetrics_shm(struct wmetrics *m, uint64_t elements, uint64_t bytes, uint64_t inplace)
{
    if (inplace)
        metrics_add_u64(m->shm_inplace_c, inplace);
    if (elements)
        metrics_add_u64(m->shm_elements_c, elements);
    if (bytes)
        metrics_add_u64(m->shm_bytes_c, bytes);
}

double wmetrics_idle_share(uint64_t blocked_ns, unsigned producers, uint64_t interval_ns)
{
    if (producers == 0 || interval_ns == 0)
        return 0;
    double share = (double)blocked_ns / ((double)producers * (double)interval_ns);
    return share > 1 ? 1 : share;
}

void wmetrics_pass_begin(struct wmetrics *m)
{
    for (size_t i = 0; i < m->n; i++)
        m->tasks[i].seen = false;
    m->npass_jobs = 0;
    m->pass_tasks = m->pass_buffered = m->pass_xtc_bytes = 0;
    m->pass_idle = 0;
    m->pass_beats = 0;
}

/* The entry of task_id, counting what it published since the last pass; NULL when out of
 * memory (the task then goes uncounted until memory is back). */
static struct wm_task *see(struct wmetrics *m, uint64_t task_id, const struct task_progress *tp)
{
    /* A finished or failed task stays on the worker until the dispatcher removes it (when its
     * iteration is collected), but it no longer runs. */
    m->pass_tasks += !tp->finished && !tp->failed;
    m->pass_buffered += tp->buffered;
    struct wm_task *e = NULL;
    for (size_t i = 0; i < m->n && !e; i++)
        if (m->tasks[i].id == task_id)
            e = &m->tasks[i];
    if (!e) {
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 8;
            struct wm_task *v = realloc(m->tasks, cap * sizeof *v);
            if (!v)
                return NULL;
            m->tasks = v;
            m->cap = cap;
        }
        e = &m->tasks[m->n++];
        *e = (struct wm_task){.id = task_id};
    } else if (tp->produced < e->produced || tp->blocked_ns < e->blocked_ns ||
               tp->chunks_committed < e->chunks) {
        /* Counts only grow within a task, so this is another task under a reused id (a
         * restarted dispatcher numbers from 1 again). */
        *e = (struct wm_task){.id = task_id};
    }
    metrics_add_u64(m->produced_c, tp->produced - e->produced);
    e->produced = tp->produced;
    metrics_add_u64(m->chunks_c, tp->chunks_committed - e->chunks);
    e->chunks = tp->chunks_committed;
    e->seen = true;
    return e;
}

double wmetrics_task_heartbeat(struct wmetrics *m, uint64_t task_id, const struct task_progress *tp,
                               uint64_t now_ns)
{
    struct wm_task *e = see(m, task_id, tp);
    double idle = 0;
    if (e && e->primed && now_ns > e->at_ns)
        idle =
            wmetrics_idle_share(tp->blocked_ns - e->blocked_ns, tp->producers, now_ns - e->at_ns);
    if (tp->done)
        idle = 1;
    if (e) {
        e->primed = true;
        e->blocked_ns = tp->blocked_ns;
        e->at_ns = now_ns;
    }
    m->pass_idle += idle;
    m->pass_beats++;
    return idle;
}

/* Records that the current pass saw a task of job_id (out of memory: its series may be removed
 * and made again at the next pass). */
static void note_job(struct wmetrics *m, uint64_t job_id)
{
    for (size_t i = 0; i < m->npass_jobs; i++)
        if (m->pass_jobs[i] == job_id)
            return;
    if (m->npass_jobs == m->cap_jobs) {
        size_t cap = m->cap_jobs ? 2 * m->cap_jobs : 8;
        uint64_t *a = realloc(m->jobs, cap * sizeof *a);
        if (a)
            m->jobs = a;
        uint64_t *b = a ? realloc(m->pass_jobs, cap * sizeof *b) : NULL;
        if (!b)
            return;
        m->pass_jobs = b;
        m->cap_jobs = cap;
    }
    m->pass_jobs[m->npass_jobs++] = job_id;
}

/* The entry of task_id that the current pass saw, or NULL. */
static struct wm_task *find_task(struct wmetrics *m, uint64_t task_id)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->tasks[i].id == task_id)
            return &m->tasks[i];
    return NULL;
}

void wmetrics_task_stages(struct wmetrics *m, uint64_t job_id, uint64_t task_id,
                          const struct task_stage *st)
{
    struct wm_task *e = find_task(m, task_id);
    if (!e)
        return;
    note_job(m, job_id);
    char job[24];
    snprintf(job, sizeof job, "%" PRIu64, job_id);
    for (size_t k = 0; k < TASK_STAGES_MAX; k++) {
        if (!st[k].name[0] || st[k].ns <= e->stage_ns[k]) {
            if (st[k].ns < e->stage_ns[k])
                e->stage_ns[k] = st[k].ns; /* another task under a reused id */
            continue;
        }
        struct metrics_label labels[2] = {{"job", job}, {"stage", st[k].name}};
        struct metrics_series *s;
        if (metrics_series_get(m->stages_f, labels, 2, &s) != 0)
            continue; /* counted at the next pass */
        metrics_add_double(s, (double)(st[k].ns - e->stage_ns[k]) / 1e9);
        e->stage_ns[k] = st[k].ns;
    }
}

void wmetrics_task_busy(struct wmetrics *m, uint64_t job_id, uint64_t task_id, uint64_t busy_ns)
{
    struct wm_task *e = find_task(m, task_id);
    if (!e)
        return;
    note_job(m, job_id);
    if (busy_ns < e->busy_ns)
        e->busy_ns = busy_ns; /* another task under a reused id */
    char job[24];
    snprintf(job, sizeof job, "%" PRIu64, job_id);
    struct metrics_label label = {"job", job};
    struct metrics_series *s;
    if (metrics_series_get(m->busy_f, &label, 1, &s) != 0)
        return; /* counted at the next pass */
    metrics_add_double(s, (double)(busy_ns - e->busy_ns) / 1e9);
    e->busy_ns = busy_ns;
}

void wmetrics_task_seen(struct wmetrics *m, uint64_t task_id, const struct task_progress *tp)
{
    see(m, task_id, tp);
}

void wmetrics_xtc_seen(struct wmetrics *m, uint64_t bytes)
{
    m->pass_xtc_bytes += bytes;
}

void wmetrics_xtc_skipped(struct wmetrics *m, uint64_t elements)
{
    metrics_add_u64(m->xtc_skipped_c, elements);
}

void wmetrics_pass_end(struct wmetrics *m)
{
    for (size_t i = 0; i < m->njobs; i++) {
        bool seen = false;
        for (size_t k = 0; k < m->npass_jobs && !seen; k++)
            seen = m->pass_jobs[k] == m->jobs[i];
        if (!seen) {
            char job[24];
            snprintf(job, sizeof job, "%" PRIu64, m->jobs[i]);
            metrics_remove_label(m->reg, "job", job);
        }
    }
    if (m->npass_jobs > 0)
        memcpy(m->jobs, m->pass_jobs, m->npass_jobs * sizeof *m->jobs);
    m->njobs = m->npass_jobs;
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->tasks[i].seen)
            m->tasks[k++] = m->tasks[i];
    m->n = k;
    metrics_set_u64(m->tasks_g, m->pass_tasks);
    metrics_set_u64(m->buffered_g, m->pass_buffered);
    metrics_set_u64(m->xtc_bytes_g, m->pass_xtc_bytes);
    /* Only a heartbeat measures idleness; a scrape leaves the last heartbeat's figure. */
    if (m->pass_beats > 0 || m->pass_tasks == 0)
        metrics_set_double(m->idle_g, m->pass_beats ? m->pass_idle / (double)m->pass_beats : 0);
}

void wmetrics_connections(struct wmetrics *m, const struct rpc_counts *c)
{
    rpc_metrics_set(&m->conns, c);
}

int wmetrics_objects(struct wmetrics *m, const struct obj_stats *s)
{
    return obj_metrics_set(&m->objects, s);
}

int wmetrics_render(struct wmetrics *m, char **body, size_t *len)
{
    return metrics_render(m->reg, body, len);
}
