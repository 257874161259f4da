/* Intervals the dispatcher derives from its timeouts (intervals.c). Pure; any thread. */
#ifndef SLUICE_DISPATCHER_INTERVALS_H
#define SLUICE_DISPATCHER_INTERVALS_H

#include <stdint.h>

/* The heartbeat interval told to workers or clients for a given timeout: timeout / 5, clamped to
 * [50, 1000] ms, so several heartbeats fit in one timeout. */
uint32_t dispatcher_heartbeat_ms(uint32_t timeout_ms);

#endif
