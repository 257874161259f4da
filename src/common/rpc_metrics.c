#include "rpc_metrics.h"

#include "metrics.h"

#include <stddef.h>

static int counter(struct metrics *reg, const char *name, const char *help,
                   struct metrics_series **out)
{
    return metrics_scalar(reg, true, name, help, METRICS_U64, out);
}

int rpc_metrics_create(struct metrics *reg, struct rpc_metrics *m)
{
    int rc = counter(reg, "sluice_auth_failures_total",
                     "Connections that failed authentication: a wrong or missing token on either "
                     "side, or TLS (on a worker, its connection to the dispatcher counts too).",
                     &m->auth_failures);
    if (rc == 0)
        rc = counter(reg, "sluice_connections_refused_total",
                     "Connections closed at accept because --max-connections was reached.",
                     &m->refused);
    if (rc == 0)
        rc = counter(reg, "sluice_handshake_timeouts_total",
                     "Connections closed because their handshake did not finish within "
                     "--handshake-timeout-ms (or, having sent nothing, within 3 s).",
                     &m->hs_timeouts);
    if (rc == 0)
        rc = counter(reg, "sluice_handshake_evictions_total",
                     "Connections still in their handshake closed to make room for a newcomer "
                     "because --max-handshakes (or one address's share of 64) was full: the oldest "
                     "that had sent nothing, else the oldest.",
                     &m->hs_evictions);
    return rc;
}

void rpc_metrics_set(struct rpc_metrics *m, const struct rpc_counts *c)
{
    metrics_set_u64(m->auth_failures, c->auth_failures);
    metrics_set_u64(m->refused, c->refused);
    metrics_set_u64(m->hs_timeouts, c->handshake_timeouts);
    metrics_set_u64(m->hs_evictions, c->handshake_evictions);
}
