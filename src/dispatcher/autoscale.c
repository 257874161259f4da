#include "autoscale.h"

#include <math.h>
#include <stdbool.h>

void autoscale_params_default(struct autoscale_params *p)
{
    *p = (struct autoscale_params){
        .wait_cap = 0.9,
        .busy_below = 0.5,
        .idle_cap = 0.9,
        .headroom = 0.1,
        .wait_up = 0.05,
        .wait_down = 0.01,
        .idle_down = 0.2,
        .step_up = 0.25,
        .step_down = 0.25,
        .min_workers = 1,
        .max_workers = 0,
    };
}

const char *autoscale_reason_name(enum autoscale_reason reason)
{
    switch (reason) {
    case AUTOSCALE_NO_DATA:
        return "no_data";
    case AUTOSCALE_UP:
        return "up";
    case AUTOSCALE_DOWN:
        return "down";
    case AUTOSCALE_HOLD:
        return "hold";
    }
    return "unknown";
}

static bool is_share(double x)
{
    return isfinite(x) && x >= 0 && x <= 1;
}

static bool is_rate(double x)
{
    return isfinite(x) && x >= 0;
}

/* The worker's summed task rates, or -1 when it has no usable data. */
static double worker_rate(const struct autoscale_worker *w)
{
    if (w->ntasks == 0 || w->task_rates == NULL || !is_share(w->idle))
        return -1;
    double sum = 0;
    for (size_t i = 0; i < w->ntasks; i++) {
        if (!is_rate(w->task_rates[i]))
            return -1;
        sum += w->task_rates[i];
    }
    return isfinite(sum) ? sum : -1;
}

/* ceil(x) that forgives rounding noise of relative size 1e-9, as a worker count: at least 1, at
 * most UINT32_MAX. */
static uint32_t count_for(double x)
{
    double c = ceil(x - 1e-9 * x);
    if (!(c >= 1))
        return 1;
    if (c >= (double)UINT32_MAX)
        return UINT32_MAX;
    return (uint32_t)c;
}

/* max(1, floor(share * n)), as a number of workers. */
static uint64_t step(double share, uint32_t n)
{
    double s = floor(share * (double)n);
    if (!(s >= 1))
        return 1;
    return s >= (double)UINT32_MAX ? UINT32_MAX : (uint64_t)s;
}

static uint32_t clamp_u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

uint32_t autoscale_recommend(const struct autoscale_params *params,
                             const struct autoscale_input *in, struct autoscale_decision *out)
{
    struct autoscale_params defaults;
    if (params == NULL) {
        autoscale_params_default(&defaults);
        params = &defaults;
    }
    const struct autoscale_params *p = params;
    uint32_t n = in->current ? in->current : 1;
    struct autoscale_decision d = {.reason = AUTOSCALE_NO_DATA};

    /* Demand, served and unmet share of the clients with data. */
    double wait_sum = 0;
    for (size_t i = 0; i < in->nclients; i++) {
        const struct autoscale_client *c = &in->clients[i];
        if (!is_rate(c->rate) || !is_share(c->wait))
            continue;
        double w = c->wait < p->wait_cap ? c->wait : p->wait_cap;
        d.demand += c->rate / (1 - w);
        d.served += c->rate;
        wait_sum += c->wait;
        d.clients_measured++;
    }
    if (d.clients_measured > 0)
        d.unmet = d.demand > 0 ? 1 - d.served / d.demand : wait_sum / (double)d.clients_measured;

    /* Capacity per worker: from the busy workers when there are any, else from all, extrapolated
     * over the time they were busy. */
    double busy_sum = 0, all_sum = 0, idle_sum = 0;
    size_t busy = 0;
    for (size_t i = 0; i < in->nworkers; i++) {
        const struct autoscale_worker *w = &in->workers[i];
        double rate = worker_rate(w);
        if (rate < 0)
            continue;
        double idle = w->idle < p->idle_cap ? w->idle : p->idle_cap;
        all_sum += rate / (1 - idle);
        idle_sum += w->idle;
        if (w->idle < p->busy_below) {
            busy_sum += rate / (1 - w->idle);
            busy++;
        }
        d.workers_measured++;
    }
    if (d.workers_measured > 0) {
        d.idle = idle_sum / (double)d.workers_measured;
        d.capacity = busy > 0 ? busy_sum / (double)busy : all_sum / (double)d.workers_measured;
    }

    uint64_t up_cap = (uint64_t)n + step(p->step_up, n);
    uint64_t rec = n;
    if (d.clients_measured > 0 && d.workers_measured > 0 && d.capacity > 0 &&
        isfinite(d.capacity)) {
        d.target_up = count_for(d.demand / d.capacity);
        d.target_down = count_for(d.demand * (1 + p->headroom) / d.capacity);
        if (d.unmet >= p->wait_up && d.target_up > n) {
            /* Never below what HOLD would answer, so more waiting never lowers the answer. */
            d.reason = AUTOSCALE_UP;
            uint64_t want = d.target_up > in->previous ? d.target_up : in->previous;
            rec = want < up_cap ? want : up_cap;
        } else if (d.unmet < p->wait_down && d.idle >= p->idle_down && d.target_down < n) {
            d.reason = AUTOSCALE_DOWN;
            uint64_t down_step = step(p->step_down, n);
            uint64_t floor_n = n > down_step ? n - down_step : 1;
            rec = d.target_down > floor_n ? d.target_down : floor_n;
        } else {
            d.reason = AUTOSCALE_HOLD;
            if (in->previous > n)
                rec = in->previous < up_cap ? in->previous : up_cap;
        }
    } else if (in->no_consumers && n > 1) {
        /* Nobody reads: the cluster shrinks toward its minimum, one bounded step at a time. */
        uint64_t down_step = step(p->step_down, n);
        rec = n > down_step ? n - down_step : 1;
        d.reason = rec < n ? AUTOSCALE_DOWN : AUTOSCALE_HOLD;
        d.capacity = 0;
    } else {
        d.capacity = 0;
    }

    uint64_t lo = p->min_workers > 1 ? p->min_workers : 1;
    uint64_t hi = p->max_workers ? p->max_workers : UINT32_MAX;
    if (rec > hi)
        rec = hi;
    if (rec < lo)
        rec = lo;
    d.workers = clamp_u32(rec);
    if (out)
        *out = d;
    return d.workers;
}
