#include "ratelimit.h"

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
