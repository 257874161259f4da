/* Which failures of a call are worth retrying. Pure; any thread may call these. */
#ifndef SLUICE_CLIENT_RETRY_H
#define SLUICE_CLIENT_RETRY_H

#include <stdbool.h>

/* Backoff between attempts of a dispatcher call (milliseconds, doubling, full jitter). */
#define RETRY_BASE_MS 50
#define RETRY_MAX_MS 2000

/* True for failures of the transport that a later attempt may not meet: the peer is unreachable
 * or restarting (SLUICE_ERR_UNAVAILABLE), the attempt ran out of time (SLUICE_ERR_TIMEOUT), or a
 * system error (negative errno such as ECONNREFUSED or ECONNRESET). Anything else is the peer's
 * answer and final. */
bool retry_transient(int code);

/* True for failures of a GetElements request that need not end the read: transient ones, the
 * worker not knowing the task (SLUICE_ERR_NOT_FOUND: it has not heard of it from the dispatcher
 * yet, or it restarted and the dispatcher will replace the task), a closed or cancelled
 * connection, or a restarted peer. Anything else (a pipeline that failed, a protocol error) ends
 * the read with the worker's message. A worker also reports a pipeline that failed with
 * SLUICE_ERR_NOT_FOUND (a missing file) with that code, so the iterator retries it only for a
 * while (see iterator.c). */
bool retry_task(int code);

#endif
