#include "retry.h"

#include "common/error.h"

/* Negative errno values are above SLUICE_ERR_BASE; this bound keeps stray large codes out. */
#define ERRNO_MIN (-4095)

bool retry_transient(int code)
{
    if (code == SLUICE_ERR_UNAVAILABLE || code == SLUICE_ERR_TIMEOUT)
        return true;
    return code < 0 && code >= ERRNO_MIN;
}

bool retry_task(int code)
{
    switch (code) {
    case SLUICE_ERR_CLOSED:
    case SLUICE_ERR_CANCELLED:
    case SLUICE_ERR_RESTARTED:
        return true;
    default:
        return retry_transient(code);
    }
}
