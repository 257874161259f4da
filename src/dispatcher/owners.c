#include "owners.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t lower(const struct owners *o, uint64_t owner)
{
    size_t lo = 0, hi = o->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (o->v[mid].owner < owner)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const char *addr_of(const struct owners *o, uint64_t owner)
{
    size_t i = lower(o, owner);
    return i < o->n && o->v[i].owner == owner ? o->v[i].addr : NULL;
}

static void prune(struct owners *o, const struct state *s)
{
    size_t kept = 0;
    for (size_t i = 0; i < o->n; i++)
        if (state_owner_clients(s, o->v[i].owner) > 0)
            o->v[kept++] = o->v[i];
    o->n = kept;
    o->pruned_at = kept;
}

int owners_note(struct owners *o, const struct state *s, uint64_t owner, const char *addr)
{
    if (owner == 0)
        return 0;
    size_t i = lower(o, owner);
    if (i < o->n && o->v[i].owner == owner) {
        snprintf(o->v[i].addr, sizeof o->v[i].addr, "%s", addr);
        return 0;
    }
    /* Owners whose reads all ended are dropped once the table has doubled since last time. */
    if (o->n >= 2 * o->pruned_at + 64) {
        prune(o, s);
        i = lower(o, owner);
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 16;
        struct owner_addr *v = realloc(o->v, cap * sizeof *v);
        if (v == NULL)
            return SLUICE_ERR_NOMEM;
        o->v = v;
        o->cap = cap;
    }
    memmove(&o->v[i + 1], &o->v[i], (o->n - i) * sizeof *o->v);
    o->n++;
    o->v[i].owner = owner;
    snprintf(o->v[i].addr, sizeof o->v[i].addr, "%s", addr);
    return 0;
}

size_t owners_held(const struct owners *o, const struct state *s, const char *addr)
{
    size_t held = 0;
    for (size_t i = 0; i < s->nclients; i++) {
        const char *a = s->clients[i].owner ? addr_of(o, s->clients[i].owner) : NULL;
        held += a != NULL && strcmp(a, addr) == 0;
    }
    return held;
}

void owners_free(struct owners *o)
{
    free(o->v);
    *o = (struct owners){0};
}
