/* Error codes shared by every part of sluice.
 *
 * Every function that can fail returns int: 0 on success, a negative code on failure. System
 * errors pass through as negative errno values (libuv's UV_E* codes are exactly those); sluice's
 * own codes below sit far below the errno range so the two never collide. sluice_strerror()
 * gives the message for either kind. Any thread may call these functions. */
#ifndef SLUICE_COMMON_ERROR_H
#define SLUICE_COMMON_ERROR_H

#include <stddef.h>

enum sluice_err {
    SLUICE_OK = 0,
    SLUICE_ERR_BASE = -20000,
    SLUICE_ERR_INVALID = -20001,     /* invalid argument or malformed input */
    SLUICE_ERR_PARSE = -20002,       /* pipeline text does not parse */
    SLUICE_ERR_NOT_FOUND = -20003,   /* unknown id, name or file */
    SLUICE_ERR_CORRUPT = -20004,     /* checksum mismatch or undecodable record */
    SLUICE_ERR_TRUNCATED = -20005,   /* input ended in the middle of a record */
    SLUICE_ERR_TOO_LARGE = -20006,   /* a length over its configured limit */
    SLUICE_ERR_NOMEM = -20007,       /* allocation failed */
    SLUICE_ERR_TYPE = -20008,        /* dtype or shape does not fit the operation */
    SLUICE_ERR_PROTOCOL = -20009,    /* peer broke the wire protocol */
    SLUICE_ERR_VERSION = -20010,     /* protocol version mismatch */
    SLUICE_ERR_EXISTS = -20011,      /* already exists with a different definition */
    SLUICE_ERR_TIMEOUT = -20012,     /* a bounded wait ran out */
    SLUICE_ERR_CLOSED = -20013,      /* the object or connection is closed */
    SLUICE_ERR_UNAVAILABLE = -20014, /* peer not reachable now; retry may succeed */
    SLUICE_ERR_PLUGIN = -20015,      /* a plugin failed to load or register */
    SLUICE_ERR_FN = -20016,          /* a pipeline function failed on an element */
    SLUICE_ERR_JOURNAL = -20017,     /* the journal failed */
    SLUICE_ERR_FULL = -20018,        /* storage is full */
    SLUICE_ERR_CANCELLED = -20019,   /* the operation was cancelled */
    SLUICE_ERR_RESTARTED = -20020,   /* peer restarted and lost the state asked about */
    SLUICE_ERR_UNSUPPORTED = -20021, /* the request is valid but not supported */
    SLUICE_ERR_TASK_FAILED = -20022, /* a worker task's pipeline failed; the message says why */
    SLUICE_ERR_LAST = -20023
};

/* Returns a static, human-readable message for any code: one of sluice's own, a negative errno,
 * or 0. Never returns NULL. */
const char *sluice_strerror(int code);

/* Formats into buf (always NUL-terminated when len > 0) and returns code, so a failure path can
 * record its reason and return in one statement: return err_set(err, errlen, rc, "...", ...). */
int err_set(char *buf, size_t len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
