/* The autoscaling policy: how many workers the cluster should have, from what workers and clients
 * measured over the last window.
 *
 * Pure: no clock, no I/O, no state of its own. The caller collects the measurements (workers and
 * clients report them with their heartbeats), keeps the previous recommendation, and calls
 * autoscale_recommend() once per window (say every 10 to 60 seconds); the same inputs always give
 * the same answer. Any thread may call it.
 *
 * Inputs, per window:
 *   - each worker: the rate (elements/s) at which each of its tasks produced elements, and its
 *     idle share: the fraction of the window in which it had nothing to do because its buffers
 *     were full (its consumers were not asking). A worker that only knows whether it was idle
 *     passes 1 or 0. A worker with no tasks, or with a rate or idle share that is not a finite
 *     number in range, has no data yet and is left out.
 *   - each client: the rate (elements/s) at which it consumed elements, and its wait share: the
 *     fraction of the window it spent waiting on an empty buffer. A client whose numbers are not
 *     finite and in range is left out.
 *   - the current number of workers n (0 counts as 1) and the previous recommendation (0: none).
 *
 * The policy, with the parameters of struct autoscale_params in capitals (defaults in brackets):
 *
 * 1. Demand. A client that waited a share w of the window consumed at rate r only while it was
 *    not waiting, so what it would have consumed had elements always been there is r / (1 - w).
 *    Demand D = sum over clients of r / (1 - min(w, WAIT_CAP [0.9])); the cap keeps a starving
 *    client from counting as infinite demand. Served S = sum of r. The unmet share u = 1 - S / D
 *    (u = mean w when D is 0): how much of the demand went unserved.
 *
 * 2. Capacity. A worker's throughput R is the sum of its task rates. A worker idle for a share i
 *    of the window produced R in (1 - i) of it, so its capacity is R / (1 - i). Capacity per
 *    worker C = mean of R / (1 - i) over the busy workers (i < BUSY_BELOW [0.5]), whose figures
 *    are close to measured; if no worker is busy, the mean over all measured workers with i
 *    capped at IDLE_CAP [0.9]. Idle mean I = mean i over the measured workers.
 *
 * 3. Targets. T_up = ceil(D / C): the workers that would serve the whole demand.
 *    T_down = ceil(D * (1 + HEADROOM [0.1]) / C): the same with spare capacity, used only for
 *    shrinking, so a cluster that scaled up to exactly T_up does not shrink again at once, and a
 *    cluster does not oscillate between n and n + 1 at the edge of its capacity. (Both are
 *    computed with a relative tolerance of 1e-9, so 3.0000000000000004 counts as 3.)
 *
 * 4. Decision. step_up(n) = max(1, floor(STEP_UP [0.25] * n)), step_down likewise with
 *    STEP_DOWN [0.25].
 *    - IDLE CLUSTER: when no client is registered at all (no_consumers), n > 1 and the figures
 *      give no decision below, nothing is being read: DOWN to max(1, n - step_down(n)).
 *    - NO_DATA when no worker or no client has data, or C is 0 (workers produced nothing, so
 *      there is no throughput to divide by): keep n.
 *    - UP when u >= WAIT_UP [0.05] and T_up > n: min(max(T_up, previous), n + step_up(n)).
 *      Clients waiting is the evidence that more workers help; T_up says how many, the step
 *      bounds how fast, and a larger scale-up already in flight is kept.
 *    - DOWN when u < WAIT_DOWN [0.01] and I >= IDLE_DOWN [0.2] and T_down < n:
 *      max(T_down, n - step_down(n)). All three must hold: consumers (almost) never wait, workers
 *      are visibly idle, and the measured capacity covers demand with headroom with fewer
 *      workers.
 *    - HOLD otherwise: the previous recommendation when it is above n (a scale-up in flight is not
 *      cancelled by a quiet window), capped at n + step_up(n); else n (a scale-down in flight is
 *      cancelled as soon as the cluster is not clearly over-provisioned).
 *    Consumers that wait while workers sit idle (u high, T_up <= n) are a HOLD: the bottleneck is
 *    elsewhere (network, the clients themselves), and more workers would not help.
 *
 * 5. Bounds. The answer is then clamped to [max(1, MIN_WORKERS [1]), MAX_WORKERS [0: none]]
 *    (MIN_WORKERS wins if the two cross); this clamp is the only thing that may move it further
 *    than one step from n.
 *
 * Properties (tested): the answer is at least 1; without the clamp of 5 it lies in
 * [n - step_down(n), n + step_up(n)]; NO_DATA answers n, UP more than n, DOWN less than n, HOLD
 * at least n; and raising any client's wait share never lowers the answer.
 *
 * Compared with dividing the sum of consumption rates by the mean worker throughput (tf.data
 * service's rule): measured consumption cannot exceed production, so that ratio never asks for
 * more workers than are producing when clients starve; here waiting inflates demand. Idle
 * workers' rates show demand rather than capacity; here capacity is extrapolated from busy time.
 * And growth and shrinkage are bounded per decision, with hysteresis between them. */
#ifndef SLUICE_DISPATCHER_AUTOSCALE_H
#define SLUICE_DISPATCHER_AUTOSCALE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct autoscale_params {
    double wait_cap;      /* WAIT_CAP: wait share above which demand stops growing */
    double busy_below;    /* BUSY_BELOW: a worker idle less than this counts as busy */
    double idle_cap;      /* IDLE_CAP: idle share cap when extrapolating from idle workers */
    double headroom;      /* HEADROOM: spare capacity kept when shrinking */
    double wait_up;       /* WAIT_UP: unmet share from which to grow */
    double wait_down;     /* WAIT_DOWN: unmet share below which shrinking is allowed */
    double idle_down;     /* IDLE_DOWN: mean idle share from which shrinking is allowed */
    double step_up;       /* STEP_UP: largest growth per decision, as a share of n */
    double step_down;     /* STEP_DOWN: largest shrinkage per decision, as a share of n */
    uint32_t min_workers; /* MIN_WORKERS: 0 means 1 */
    uint32_t max_workers; /* MAX_WORKERS: 0 means no limit */
};

/* The defaults given in brackets above. */
void autoscale_params_default(struct autoscale_params *p);

struct autoscale_worker {
    const double *task_rates; /* elements/s of each task over the window; the caller's array */
    size_t ntasks;
    double idle; /* share of the window with nothing to do, in [0, 1] */
};

struct autoscale_client {
    double rate; /* elements/s consumed over the window */
    double wait; /* share of the window spent waiting on an empty buffer, in [0, 1] */
};

struct autoscale_input {
    const struct autoscale_worker *workers;
    size_t nworkers;
    const struct autoscale_client *clients;
    size_t nclients;
    uint32_t current;  /* workers registered now */
    uint32_t previous; /* the previous recommendation, 0 when there is none */
    bool no_consumers; /* no client is registered at all (nothing is being read) */
};

enum autoscale_reason { AUTOSCALE_NO_DATA, AUTOSCALE_UP, AUTOSCALE_DOWN, AUTOSCALE_HOLD };

/* What was decided and why, for logs and metrics. Rates are elements/s. */
struct autoscale_decision {
    uint32_t workers; /* the recommendation, as returned */
    enum autoscale_reason reason;
    double demand;        /* D */
    double served;        /* S */
    double unmet;         /* u */
    double capacity;      /* C; 0 when unknown */
    double idle;          /* I */
    uint32_t target_up;   /* T_up; 0 when C is unknown */
    uint32_t target_down; /* T_down; 0 when C is unknown */
    size_t workers_measured, clients_measured;
};

/* Applies the policy above and returns the recommended number of workers, always >= 1. params
 * NULL means the defaults. out, when not NULL, receives the details. The input's arrays are only
 * read. */
uint32_t autoscale_recommend(const struct autoscale_params *params,
                             const struct autoscale_input *in, struct autoscale_decision *out);

/* A static name for reason: "no_data", "up", "down" or "hold". */
const char *autoscale_reason_name(enum autoscale_reason reason);

#endif
