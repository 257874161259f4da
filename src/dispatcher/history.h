/* The dashboard's charts: the last HISTORY_SPAN_MS of the cluster's served rates, kept in memory
 * by the dispatcher. Pure: times are passed in (milliseconds of the dispatcher's monotonic clock),
 * and so are the served counts (struct history_served, which the dispatcher's observation module
 * sums as the workers' heartbeats report them); any thread may call these on a history it owns.
 *
 * A sample's rates are what was served between the previous sample and it, over the time between
 * them: the difference of two sums, so a sample costs the jobs and workers it keeps, not the
 * cluster's tasks (at 5,000 workers with ten jobs each, rates per task took 10-20 ms of the loop
 * every sample). `sluice status` gives rates over its own window (the autoscaling window), so the
 * two agree on a steady load and differ while it changes. A job's elements are those its current
 * iteration's tasks served; a worker's, those all of its tasks served.
 *
 * Bounded. One sample every HISTORY_INTERVAL_MS at most, HISTORY_SAMPLES of them in a ring (the
 * oldest dropped), each with the totals and at most HISTORY_SERIES_MAX jobs and as many workers
 * (those with the highest ids, the newest, when there are more): a fixed amount of memory
 * whatever the cluster's size or age. Nothing is journaled: a restarted dispatcher starts with
 * empty charts.
 *
 * The document history_json() builds (GET /api/history of the dashboard):
 *   {"interval_ms": 5000, "span_ms": 900000, "now_ms": 123456,
 *    "samples": [{"age_ms": 5000, "elements_per_second": 5120.5, "bytes_per_second": 4194304.0,
 *                 "workers": 2,
 *                 "jobs": [{"id": 1, "elements_per_second": 5120.5,
 *                           "bytes_per_second": 4194304.0, "elements": 81920,
 *                           "splits_finished": 3}],
 *                 "worker_rates": [{"id": 1, "elements_per_second": 5120.5,
 *                                   "bytes_per_second": 4194304.0}]}]}
 * samples oldest first; age_ms is now_ms minus the sample's time. */
#ifndef SLUICE_DISPATCHER_HISTORY_H
#define SLUICE_DISPATCHER_HISTORY_H

#include "state.h"
#include "status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HISTORY_INTERVAL_MS 5000
#define HISTORY_SPAN_MS (15 * 60 * 1000)
#define HISTORY_SAMPLES (HISTORY_SPAN_MS / HISTORY_INTERVAL_MS)
#define HISTORY_SERIES_MAX 32

/* One job's or worker's figures at a sample. */
struct history_point {
    uint64_t id;
    double elements_per_second, bytes_per_second;
    uint64_t elements;        /* jobs: served so far */
    uint64_t splits_finished; /* jobs: of the current distributed iteration, else 0 */
};

struct history_sample {
    uint64_t t_ms;
    double elements_per_second, bytes_per_second; /* summed over the jobs */
    uint32_t workers;                             /* registered */
    struct history_point jobs[HISTORY_SERIES_MAX];
    size_t njobs;
    struct history_point workers_v[HISTORY_SERIES_MAX];
    size_t nworkers;
};

/* Elements and bytes served by one iteration's or one worker's tasks, summed over their reports
 * since the dispatcher started leading. */
struct history_count {
    uint64_t id;
    uint64_t elements, bytes;
};

/* The served counts a sample is taken from. */
struct history_served {
    uint64_t elements, bytes;               /* by every task */
    const struct history_count *iterations; /* by increasing iteration id */
    size_t niterations;
    const struct history_count *workers; /* by increasing worker id */
    size_t nworkers;
};

/* A kept job's or worker's counts at the newest sample (iteration_id: a job's iteration then). */
struct history_mark {
    uint64_t id, iteration_id;
    uint64_t elements, bytes;
};

/* Zero-initialised is empty. About HISTORY_SAMPLES * 2.1 KB: allocate it, do not put it on a
 * stack. */
struct history {
    struct history_sample v[HISTORY_SAMPLES];
    unsigned head; /* index of the newest sample when n > 0 */
    unsigned n;
    /* The counts at the newest sample, which the next one's rates start from (marked: it had
     * counts): the totals, the kept series', and the highest job and worker id then. A kept job
     * or worker without a mark and with a higher id is new since, and counts from 0; one with a
     * lower id (back in the kept series as newer ones went) has no rate until the next sample. A
     * job whose iteration changed counts its new iteration from 0. */
    bool marked;
    uint64_t mark_elements, mark_bytes, mark_job, mark_worker;
    struct history_mark mark_jobs[HISTORY_SERIES_MAX], mark_workers[HISTORY_SERIES_MAX];
    size_t nmark_jobs, nmark_workers;
};

/* Whether a sample is due at now_ms: none kept yet, or the newest is HISTORY_INTERVAL_MS old (or
 * from a later time: a clock that went back starts afresh at the next sample). */
bool history_due(const struct history *h, uint64_t now_ms);

/* Takes a sample of s at now_ms with the served counts in (NULL: the numbers of workers only,
 * rates and elements 0) into the ring, dropping the oldest once HISTORY_SAMPLES are kept; a
 * sample older than the newest empties the ring first. The first sample (and one after a sample
 * without counts) has no rates: they need a previous one. */
void history_take(struct history *h, const struct state *s, const struct history_served *in,
                  uint64_t now_ms);

/* The samples kept, oldest first: the i-th of history_count(). */
size_t history_count(const struct history *h);
const struct history_sample *history_at(const struct history *h, size_t i);

/* Builds the document above. Returns 0 with *out (NUL-terminated, malloc'd; the caller frees
 * it), or SLUICE_ERR_NOMEM. */
int history_json(const struct history *h, uint64_t now_ms, char **out);

#endif
