#include "rates.h"

/* The k-th newest sample (0: the newest); k < r->n. */
static const struct rate_sample *nth_newest(const struct rate_ring *r, unsigned k)
{
    return &r->v[(r->head + RATE_SAMPLES - k) % RATE_SAMPLES];
}

void rate_ring_add(struct rate_ring *r, const struct rate_sample *s)
{
    if (r->n > 0) {
        const struct rate_sample *last = nth_newest(r, 0);
        if (s->t_ms < last->t_ms || s->elements < last->elements || s->bytes < last->bytes ||
            s->busy_ns < last->busy_ns) {
            r->n = 0;
        } else if (s->t_ms == last->t_ms) {
            r->v[r->head] = *s;
            return;
        }
    }
    r->head = r->n == 0 ? 0 : (r->head + 1) % RATE_SAMPLES;
    r->v[r->head] = *s;
    if (r->n < RATE_SAMPLES)
        r->n++;
}

struct rate rate_ring_rate(const struct rate_ring *r, uint64_t now_ms, uint32_t window_ms)
{
    struct rate out = {0};
    if (r->n < 2)
        return out;
    uint64_t start = now_ms > window_ms ? now_ms - window_ms : 0;
    const struct rate_sample *last = nth_newest(r, 0);
    if (last->t_ms <= start)
        return out;
    /* The newest sample at or before the window's start, else the oldest kept. */
    unsigned k = 1;
    while (k + 1 < r->n && nth_newest(r, k)->t_ms > start)
        k++;
    const struct rate_sample *base = nth_newest(r, k);
    out.span_ms = last->t_ms - base->t_ms;
    double secs = (double)out.span_ms / 1000.0;
    out.elements_per_second = (double)(last->elements - base->elements) / secs;
    out.bytes_per_second = (double)(last->bytes - base->bytes) / secs;
    out.busy_per_second = (double)(last->busy_ns - base->busy_ns) / 1e9 / secs;
    return out;
}
