/* Error codes shared by every part of sluice.
 *
 * Every function that can fail returns int: 0 on success, a negative code on failure. System
 * errors pass through as negative errno values (libuv's UV_E* codes are exactly those); sluice's
 * own codes (enum sluice_err) are defined once, in the public header include/sluice/sluice.h,
 * and their messages live in one table in error.c behind sluice_strerror(). Any thread may call
 * these functions. */
#ifndef SLUICE_COMMON_ERROR_H
#define SLUICE_COMMON_ERROR_H

#include "sluice/sluice.h"

#include <stddef.h>

/* Formats into buf (always NUL-terminated when len > 0) and returns code, so a failure path can
 * record its reason and return in one statement: return err_set(err, errlen, rc, "...", ...). */
int err_set(char *buf, size_t len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
