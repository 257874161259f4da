#include "relet.h"

#include "common/error.h"
#include "common/rows.h"

#include <stdlib.h>
#include <string.h>

static struct relet_iteration *find(const struct relet_table *t, uint64_t iteration)
{
    return rows_find(t->v, t->n, sizeof *t->v, offsetof(struct relet_iteration, iteration),
                     iteration);
}

int relet_note(struct relet_table *t, uint64_t iteration, uint64_t seq, uint64_t now_ms)
{
    struct relet_iteration *e = find(t, iteration);
    if (!e) {
        size_t i = rows_lower(t->v, t->n, sizeof *t->v, offsetof(struct relet_iteration, iteration),
                              iteration);
        e = rows_insert_at((void **)&t->v, &t->n, &t->cap, sizeof *t->v, i);
        if (!e)
            return SLUICE_ERR_NOMEM;
        e->iteration = iteration;
    }
    return u64map_put(&e->at, seq, now_ms) < 0 ? SLUICE_ERR_NOMEM : 0;
}

bool relet_stale(const struct relet_table *t, uint64_t iteration, uint64_t seq, uint64_t now_ms,
                 uint64_t age_ms)
{
    const struct relet_iteration *e = find(t, iteration);
    uint64_t at;
    if (!e || !u64map_get(&e->at, seq, &at))
        return false;
    /* The end was received at now - age (later by the request's transit, which only makes a
     * stale request look fresh when it took longer than the time between that end and the new
     * lease: a re-issue grace, or a reader's heartbeat). */
    uint64_t seen = now_ms > age_ms ? now_ms - age_ms : 0;
    return at > seen;
}

static bool still_held(uint64_t seq, uint64_t at, void *ctx)
{
    (void)at;
    return u64map_get(ctx, seq, NULL);
}

int relet_prune(struct relet_table *t, uint64_t iteration, const struct u64map *held)
{
    struct relet_iteration *e = find(t, iteration);
    if (!e || e->at.n <= 64 || e->at.n <= held->n)
        return 0;
    return u64map_retain(&e->at, still_held, (void *)held);
}

void relet_forget(struct relet_table *t, uint64_t iteration)
{
    struct relet_iteration *e = find(t, iteration);
    if (!e)
        return;
    u64map_release(&e->at);
    size_t i = (size_t)(e - t->v);
    memmove(t->v + i, t->v + i + 1, (t->n - i - 1) * sizeof *t->v);
    t->n--;
}

uint64_t relet_iteration_at(const struct relet_table *t, size_t i)
{
    return t->v[i].iteration;
}

void relet_release(struct relet_table *t)
{
    for (size_t i = 0; i < t->n; i++)
        u64map_release(&t->v[i].at);
    free(t->v);
    memset(t, 0, sizeof *t);
}
