/* Rates over a window from cumulative counters: what a task's worker reports in each heartbeat
 * (elements and bytes served since the task started, thread time its slices took) becomes
 * elements/s and bytes/s over the dispatcher's observation window. Pure: times are passed in
 * (milliseconds of any monotonic clock), nothing is allocated; any thread may call these on a ring
 * it owns.
 *
 * A ring keeps the last RATE_SAMPLES samples. The rate at now is measured from a base sample to
 * the newest one: the base is the newest sample taken at or before now - window, so the span
 * covers the whole window when the history reaches back that far, or else the oldest sample kept.
 * Nothing reported during the window (the newest sample is at or before its start) measures 0:
 * a task that is silent or idle serves nothing now. Counters that go backwards (the worker process
 * restarted and counts from 0 again) start the ring over from that sample. */
#ifndef SLUICE_DISPATCHER_RATES_H
#define SLUICE_DISPATCHER_RATES_H

#include <stdbool.h>
#include <stdint.h>

#define RATE_SAMPLES 32

struct rate_sample {
    uint64_t t_ms;
    uint64_t elements, bytes;
    uint64_t busy_ns; /* worker thread time */
};

/* Zero-initialised is empty. */
struct rate_ring {
    struct rate_sample v[RATE_SAMPLES];
    unsigned head; /* index of the newest sample when n > 0 */
    unsigned n;
};

struct rate {
    double elements_per_second, bytes_per_second;
    double busy_per_second; /* seconds of worker thread time per second */
    uint64_t span_ms;       /* what the figures are measured over; 0: nothing to measure, both 0 */
};

/* Records a sample. A sample at the newest sample's time replaces it; one before it (a clock
 * that went back) or with a smaller counter starts the ring over. The oldest sample is dropped
 * once RATE_SAMPLES are kept. */
void rate_ring_add(struct rate_ring *r, const struct rate_sample *s);

/* The rates at now_ms over window_ms (see above). */
struct rate rate_ring_rate(const struct rate_ring *r, uint64_t now_ms, uint32_t window_ms);

#endif
