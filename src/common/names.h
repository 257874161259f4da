/* Names that peers send and the services store, log or render: job names, dataset ids, worker
 * addresses. Pure: no allocation except name_escape_dup, no I/O, any thread.
 *
 * A valid name is valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF),
 * holds no control character (U+0000 to U+001F, U+007F, and the C1 controls U+0080 to U+009F),
 * and is at most a bounded number of bytes long. Those rules are what keeps a name printable
 * on one line of a log, a status table or a metrics label, and acceptable to JSON.
 *
 * Names stored before validation existed (in an old journal) may break the rules; everything
 * that renders a name passes it through name_escape first, which never fails on such bytes. */
#ifndef SLUICE_COMMON_NAMES_H
#define SLUICE_COMMON_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* The longest job name and dataset id, in bytes (the state keeps them in 128-byte fields). */
#define NAME_ID_MAX 127
/* The longest worker address, in bytes (the state keeps it in a 256-byte field). */
#define NAME_ADDR_MAX 255

/* Checks s (NUL-terminated; empty is allowed, callers that need a name say so themselves)
 * against the rules above with at most max bytes. Returns 0, or SLUICE_ERR_INVALID with a
 * message naming field and the offending byte's 0-based offset in err:
 *   "job name: not valid UTF-8 at byte 3"
 *   "worker address: control character at byte 9"
 *   "dataset id: 300 bytes, longer than the limit of 127"
 * The first offending byte is reported; the length is checked last, so a long name that also
 * holds bad bytes is reported for its bytes. */
int name_check(const char *field, const char *s, size_t max, char *err, size_t errlen);

/* The length of the UTF-8 sequence starting at s[0] (at most n bytes available) when it is a
 * valid one and not a control character; 0 otherwise. */
size_t name_char_len(const char *s, size_t n);

/* Writes s into out (outlen bytes; always NUL-terminated when outlen > 0) with every byte that is
 * not part of a valid, non-control UTF-8 character replaced by the four characters \xNN
 * (lowercase hex). The result is valid UTF-8 without control characters, so it goes into JSON,
 * a log line or a table as it is. Returns the length the whole result needs (without the NUL),
 * like snprintf; the output is cut only between whole characters or escapes. */
size_t name_escape(const char *s, char *out, size_t outlen);

/* name_escape into a malloc'd string (the caller frees it); NULL when out of memory. */
char *name_escape_dup(const char *s);

/* Whether name_escape would change s (s breaks the character rules, whatever its length). */
bool name_needs_escape(const char *s);

#endif
