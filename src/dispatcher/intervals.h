/* Intervals the dispatcher derives from its timeouts (intervals.c). Pure; any thread. */
#ifndef SLUICE_DISPATCHER_INTERVALS_H
#define SLUICE_DISPATCHER_INTERVALS_H

#include <stdint.h>

/* The heartbeat interval told to workers or clients for a given timeout: timeout / 5, clamped to
 * [50, 1000] ms, so several heartbeats fit in one timeout. */
uint32_t dispatcher_heartbeat_ms(uint32_t timeout_ms);

/* How long after its connection closed a client (worker) that sent no heartbeat since is
 * released (removed), from the option (dispatcher_opts.disconnect_grace_ms: 0 for the default,
 * 5000 ms; UINT32_MAX for never) and the kind's timeout: never longer than the timeout, never
 * shorter than two heartbeat intervals (a live peer reconnects with its next heartbeat).
 * UINT32_MAX: never. */
uint32_t dispatcher_disconnect_grace_ms(uint32_t option_ms, uint32_t timeout_ms);

#endif
