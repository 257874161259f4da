/* A synchronous RPC peer for integration tests that speak the wire protocol themselves (as a
 * client, as a fake worker or as a stranger): an rpc_client on a loop of its own, one call at a
 * time. Failures of the harness itself (a loop that does not close, a call that cannot be
 * queued) are cmocka assertions; the outcome of a call is the caller's to check. */
#ifndef SLUICE_TESTS_LIB_PEER_H
#define SLUICE_TESTS_LIB_PEER_H

#include "common/rpc_client.h"
#include "sluice/sluice.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct peer {
    uv_loop_t loop;
    struct rpc_client *c;
};

struct peer_result {
    bool done;
    int status;
    char msg[SLUICE_ERRMSG_SIZE];
    Sluice__Envelope *reply; /* a copy, freed by the caller */
};

/* Starts a client of addr (HOST:PORT) with role and incarnation on p's own loop; it connects
 * (and reconnects, backing off 200 ms at most) as calls need it. */
void peer_open(struct peer *p, const char *addr, Sluice__Role role, uint64_t incarnation);

/* Closes the client, runs the loop until it has closed, and closes the loop. */
void peer_close(struct peer *p);

/* Sends env and runs the loop until its answer (bounded by timeout_ms). Returns a copy of the
 * reply (status 0; also in r->reply), or NULL with the status and message in r. */
Sluice__Envelope *peer_call(struct peer *p, Sluice__Envelope *env, uint32_t timeout_ms,
                            struct peer_result *r);

/* Sends env without waiting for its answer: r (cleared here) is filled when the answer comes,
 * while p's loop runs (peer_wait, run_for). */
void peer_send(struct peer *p, Sluice__Envelope *env, uint32_t timeout_ms, struct peer_result *r);

/* Runs p's loop until r (of peer_send) has its answer; returns r->reply. */
Sluice__Envelope *peer_wait(struct peer *p, struct peer_result *r);

#endif
