/* The dashboard's charts: the last HISTORY_SPAN_MS of the cluster's served rates, kept in memory
 * by the dispatcher. Pure: times are passed in (milliseconds of the dispatcher's monotonic clock),
 * the figures come from the status document's own (status_job_figures, status_worker_figures),
 * so the charts and `sluice status` agree; any thread may call these on a history it owns.
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

/* Zero-initialised is empty. About HISTORY_SAMPLES * 2.1 KB: allocate it, do not put it on a
 * stack. */
struct history {
    struct history_sample v[HISTORY_SAMPLES];
    unsigned head; /* index of the newest sample when n > 0 */
    unsigned n;
};

/* Whether a sample is due at now_ms: none kept yet, or the newest is HISTORY_INTERVAL_MS old (or
 * from a later time: a clock that went back starts afresh at the next sample). */
bool history_due(const struct history *h, uint64_t now_ms);

/* Takes a sample of s at now_ms with x's figures (x NULL: counts only, rates 0) into the ring,
 * dropping the oldest once HISTORY_SAMPLES are kept; a sample older than the newest empties the
 * ring first. */
void history_take(struct history *h, const struct state *s, const struct status_extra *x,
                  uint64_t now_ms);

/* The samples kept, oldest first: the i-th of history_count(). */
size_t history_count(const struct history *h);
const struct history_sample *history_at(const struct history *h, size_t i);

/* Builds the document above. Returns 0 with *out (NUL-terminated, malloc'd; the caller frees
 * it), or SLUICE_ERR_NOMEM. */
int history_json(const struct history *h, uint64_t now_ms, char **out);

#endif
