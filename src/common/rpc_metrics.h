/* The connection counters of an RPC server (rpc.h: rpc_server_auth_failures, _refused,
 * _handshake_timeouts and _handshake_evictions) as metrics, under the same names and help text in
 * the dispatcher's registry and the worker's, since they describe the RPC server both run:
 *
 *   sluice_auth_failures_total          counter
 *   sluice_connections_refused_total    counter
 *   sluice_handshake_timeouts_total     counter
 *   sluice_handshake_evictions_total    counter
 *
 * Pure, like metrics.h: call on the thread that owns the registry. */
#ifndef SLUICE_COMMON_RPC_METRICS_H
#define SLUICE_COMMON_RPC_METRICS_H

#include <stdint.h>

struct metrics;        /* metrics.h */
struct metrics_series; /* metrics.h */

/* Embedded in its owner; the series belong to the registry. */
struct rpc_metrics {
    struct metrics_series *auth_failures, *refused, *hs_timeouts, *hs_evictions;
};

/* The server's totals, as its owner reads them from rpc.h. */
struct rpc_counts {
    uint64_t auth_failures;       /* rpc_server_auth_failures (plus the owner's own dials) */
    uint64_t refused;             /* rpc_server_refused */
    uint64_t handshake_timeouts;  /* rpc_server_handshake_timeouts */
    uint64_t handshake_evictions; /* rpc_server_handshake_evictions */
};

/* Makes the four families in reg, in the order above, each with its one series in m.
 * Returns 0, or a negative code of metrics.h (reg may then hold some of them). */
int rpc_metrics_create(struct metrics *reg, struct rpc_metrics *m);

/* Sets the counters to the server's totals. */
void rpc_metrics_set(struct rpc_metrics *m, const struct rpc_counts *c);

#endif
