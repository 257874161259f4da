/* A small table that decides whether an event of some key (a peer's IP address, say) is worth a
 * log line: at most one per key per interval, however often it happens, in bounded memory.
 *
 * The table has RATELIMIT_SLOTS slots; a key not in it takes a free slot, or the one used least
 * recently. So with more distinct keys than slots an evicted key may be logged again early, but
 * the table never grows. Pure: the caller passes the time. One owner; not thread-safe. */
#ifndef SLUICE_COMMON_RATELIMIT_H
#define SLUICE_COMMON_RATELIMIT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#define RATELIMIT_SLOTS 64
#define RATELIMIT_KEY_MAX 64

struct ratelimit_slot {
    char key[RATELIMIT_KEY_MAX]; /* "" when free */
    uint64_t last_ms;            /* when the key was last allowed */
    uint64_t suppressed;         /* events of the key refused since then */
};

struct ratelimit {
    uint64_t interval_ms;
    struct ratelimit_slot slots[RATELIMIT_SLOTS];
};

void ratelimit_init(struct ratelimit *r, uint64_t interval_ms);

/* Records an event of key (cut to RATELIMIT_KEY_MAX - 1 bytes) at now_ms. Returns true when it
 * should be logged: the key was not seen within the interval. Then *suppressed (may be NULL)
 * gets how many of its events were refused since it was last allowed, and the count restarts. */
bool ratelimit_allow(struct ratelimit *r, const char *key, uint64_t now_ms, uint64_t *suppressed);

/* The host part of "IP:PORT" or "[IPv6]:PORT" (without brackets) into out; text without a port
 * is copied whole. */
void ratelimit_host_of(const char *peer, char *out, unsigned outlen);

/* The one impure convenience: logs "<prefix><peer>: <message>" at warn level when ratelimit_allow
 * lets the peer's host through at now_ms, adding how many lines were skipped since the last
 * one. For events a hostile peer can provoke at will (failed handshakes, refused capabilities),
 * so that it can never flood the log. */
void ratelimit_warn(struct ratelimit *r, uint64_t now_ms, const char *prefix, const char *peer,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void ratelimit_vwarn(struct ratelimit *r, uint64_t now_ms, const char *prefix, const char *peer,
                     const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

#endif
