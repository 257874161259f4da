#include "ratelimit.h"

#include "log.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ratelimit_init(struct ratelimit *r, uint64_t interval_ms)
{
    memset(r, 0, sizeof *r);
    r->interval_ms = interval_ms;
}

bool ratelimit_allow(struct ratelimit *r, const char *key, uint64_t now_ms, uint64_t *suppressed)
{
    char k[RATELIMIT_KEY_MAX];
    snprintf(k, sizeof k, "%s", key);
    struct ratelimit_slot *victim = NULL;
    for (unsigned i = 0; i < RATELIMIT_SLOTS; i++) {
        struct ratelimit_slot *s = &r->slots[i];
        if (s->key[0] != '\0' && strcmp(s->key, k) == 0) {
            if (now_ms - s->last_ms < r->interval_ms && now_ms >= s->last_ms) {
                s->suppressed++;
                return false;
            }
            if (suppressed)
                *suppressed = s->suppressed;
            s->suppressed = 0;
            s->last_ms = now_ms;
            return true;
        }
        if (victim == NULL ||
            (victim->key[0] != '\0' && (s->key[0] == '\0' || s->last_ms < victim->last_ms)))
            victim = s;
    }
    memcpy(victim->key, k, sizeof k);
    victim->last_ms = now_ms;
    victim->suppressed = 0;
    if (suppressed)
        *suppressed = 0;
    return true;
}

void ratelimit_host_of(const char *peer, char *out, unsigned outlen)
{
    if (outlen == 0)
        return;
    const char *start = peer, *end = NULL;
    if (peer[0] == '[') {
        start = peer + 1;
        end = strchr(start, ']');
    } else {
        end = strrchr(peer, ':');
    }
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, start, n);
    out[n] = '\0';
}

void ratelimit_vwarn(struct ratelimit *r, uint64_t now_ms, const char *prefix, const char *peer,
                     const char *fmt, va_list ap)
{
    char host[RATELIMIT_KEY_MAX];
    uint64_t suppressed = 0;
    ratelimit_host_of(peer, host, sizeof host);
    if (!ratelimit_allow(r, host, now_ms, &suppressed))
        return;
    char why[384];
    vsnprintf(why, sizeof why, fmt, ap);
    if (suppressed)
        log_warn("%s%s: %s (%" PRIu64 " more from %s since the last line; at most one line a "
                 "minute per address)",
                 prefix, peer, why, suppressed, host);
    else
        log_warn("%s%s: %s", prefix, peer, why);
}

void ratelimit_warn(struct ratelimit *r, uint64_t now_ms, const char *prefix, const char *peer,
                    const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ratelimit_vwarn(r, now_ms, prefix, peer, fmt, ap);
    va_end(ap);
}
