#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const messages[] = {
    [-(SLUICE_ERR_INVALID - SLUICE_ERR_BASE)] = "invalid argument",
    [-(SLUICE_ERR_PARSE - SLUICE_ERR_BASE)] = "malformed pipeline",
    [-(SLUICE_ERR_NOT_FOUND - SLUICE_ERR_BASE)] = "not found",
    [-(SLUICE_ERR_CORRUPT - SLUICE_ERR_BASE)] = "corrupt data",
    [-(SLUICE_ERR_TRUNCATED - SLUICE_ERR_BASE)] = "truncated data",
    [-(SLUICE_ERR_TOO_LARGE - SLUICE_ERR_BASE)] = "too large",
    [-(SLUICE_ERR_NOMEM - SLUICE_ERR_BASE)] = "out of memory",
    [-(SLUICE_ERR_TYPE - SLUICE_ERR_BASE)] = "wrong type or shape",
    [-(SLUICE_ERR_PROTOCOL - SLUICE_ERR_BASE)] = "protocol error",
    [-(SLUICE_ERR_VERSION - SLUICE_ERR_BASE)] = "protocol version mismatch",
    [-(SLUICE_ERR_EXISTS - SLUICE_ERR_BASE)] = "already exists",
    [-(SLUICE_ERR_TIMEOUT - SLUICE_ERR_BASE)] = "timed out",
    [-(SLUICE_ERR_CLOSED - SLUICE_ERR_BASE)] = "closed",
    [-(SLUICE_ERR_UNAVAILABLE - SLUICE_ERR_BASE)] = "unavailable",
    [-(SLUICE_ERR_PLUGIN - SLUICE_ERR_BASE)] = "plugin error",
    [-(SLUICE_ERR_FN - SLUICE_ERR_BASE)] = "function failed",
    [-(SLUICE_ERR_JOURNAL - SLUICE_ERR_BASE)] = "journal error",
    [-(SLUICE_ERR_FULL - SLUICE_ERR_BASE)] = "storage full",
    [-(SLUICE_ERR_CANCELLED - SLUICE_ERR_BASE)] = "cancelled",
    [-(SLUICE_ERR_RESTARTED - SLUICE_ERR_BASE)] = "peer restarted",
    [-(SLUICE_ERR_UNSUPPORTED - SLUICE_ERR_BASE)] = "unsupported",
    [-(SLUICE_ERR_TASK_FAILED - SLUICE_ERR_BASE)] = "task failed",
    [-(SLUICE_ERR_SERVER - SLUICE_ERR_BASE)] = "server failed",
    [-(SLUICE_ERR_AUTH - SLUICE_ERR_BASE)] = "authentication failed",
    [-(SLUICE_ERR_DENIED - SLUICE_ERR_BASE)] = "permission denied",
    [-(SLUICE_ERR_LIMIT - SLUICE_ERR_BASE)] = "limit reached",
    [-(SLUICE_ERR_NOT_LEADER - SLUICE_ERR_BASE)] = "not the leader",
};

/* Every code has its message: the table ends exactly at the last code. */
_Static_assert(sizeof messages / sizeof messages[0] == (size_t)(SLUICE_ERR_BASE - SLUICE_ERR_LAST),
               "a sluice error code has no message");

const char *sluice_strerror(int code)
{
    if (code == 0)
        return "success";
    if (code < SLUICE_ERR_BASE && code > SLUICE_ERR_LAST) {
        const char *m = messages[-(code - SLUICE_ERR_BASE)];
        return m ? m : "unknown error";
    }
    if (code < 0 && code > -4096)
        return strerror(-code);
    return "unknown error";
}

int err_set(char *buf, size_t len, int code, const char *fmt, ...)
{
    if (buf && len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, len, fmt, ap);
        va_end(ap);
    }
    return code;
}
