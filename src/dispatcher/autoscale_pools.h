/* The autoscaling recommendation per worker pool (docs/operations.md "Autoscaling by pool"): the
 * policy of autoscale.h applied to each pool on its own, so that each pool's Deployment scales
 * from its own jobs' demand.
 *
 * Pure: no clock, no I/O, no state of its own; any thread may call it.
 *
 * Pools. A worker's pool is the value of its label KEY (the dispatcher's --autoscale-pool-label,
 * "pool" by default); a worker without that label is in the pool named "". A pool exists while
 * it has a registered worker that is not draining, or while a job's demand names it (below).
 *
 * Demand. A client (a reader) counts towards the pools of the workers its job's selector
 * matches, split in proportion to the matching workers that are not draining: a job whose
 * selector matches 2 workers of pool a and 6 of pool b puts a quarter of its reader's rate on a
 * and three quarters on b (its wait share goes to both unchanged). A job without a selector
 * matches every worker, so its demand is spread over all pools by their sizes. A job whose
 * selector matches no worker counts towards the pools its selector names for KEY (KEY=v, KEY==v,
 * KEY in (v,w)), evenly; failing that, evenly towards every existing pool; failing that, towards
 * the pool "". So a pool that has no worker yet but a waiting job is recommended 1 worker.
 *
 * Each pool then gets autoscale_recommend() with its own workers (those measured), its share of
 * the clients, current = its workers that are not draining, previous = its own last
 * recommendation, and no_consumers when no client counts towards it. */
#ifndef SLUICE_DISPATCHER_AUTOSCALE_POOLS_H
#define SLUICE_DISPATCHER_AUTOSCALE_POOLS_H

#include "dispatcher/autoscale.h"

#include "common/labels.h"

/* The most pools the dispatcher reports; once that many are found (the workers' pools in the
 * workers' order, then those jobs name), the others are left out. */
#define AUTOSCALE_POOLS_MAX 256

struct autoscale_pool_worker {
    const char *labels; /* its canonical label text (common/labels.h); "" none */
    bool draining;      /* a draining worker is in no pool */
    bool measured;      /* rate and idle hold the last window's figures */
    double rate;        /* elements/s its tasks produced */
    double idle;        /* idle share, in [0, 1] */
};

struct autoscale_pool_client {
    const char *selector; /* its job's canonical worker selector; "" or NULL: every worker */
    bool measured;        /* rate and wait hold the last window's figures */
    double rate;          /* elements/s consumed */
    double wait;          /* wait share, in [0, 1] */
};

/* A pool's recommendation at the previous window. */
struct autoscale_pool_previous {
    const char *name;
    uint32_t workers;
};

struct autoscale_pools_input {
    const char *key; /* the label key that names a worker's pool; NULL or "": "pool" */
    const struct autoscale_pool_worker *workers;
    size_t nworkers;
    const struct autoscale_pool_client *clients;
    size_t nclients;
    const struct autoscale_pool_previous *previous;
    size_t nprevious;
};

struct autoscale_pool {
    char name[LABEL_VALUE_MAX + 1];
    uint32_t current;     /* its workers that are not draining */
    uint32_t recommended; /* autoscale_recommend()'s answer for it */
    double clients;       /* the clients counted towards it (fractions summed) */
    struct autoscale_decision decision;
};

/* The pool of a worker with canonical labels under key, into out (LABEL_VALUE_MAX + 1 bytes):
 * the label's value, or "" without it. */
void autoscale_pool_of(const char *labels, const char *key, char out[LABEL_VALUE_MAX + 1]);

/* Applies the rules above. Writes the pools, sorted by name, to out (room for max) and their
 * number to *nout. Returns 0, or SLUICE_ERR_NOMEM (nothing written). params NULL: the
 * defaults. A client whose selector does not parse counts as one without a selector. */
int autoscale_pools_recommend(const struct autoscale_params *params,
                              const struct autoscale_pools_input *in, struct autoscale_pool *out,
                              size_t max, size_t *nout);

#endif
