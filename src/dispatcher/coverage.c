#include "coverage.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void coverage_init(struct coverage *c)
{
    memset(c, 0, sizeof *c);
}

void coverage_release(struct coverage *c)
{
    for (size_t i = 0; i < c->n; i++)
        ranges_release(&c->v[i].got);
    free(c->v);
    memset(c, 0, sizeof *c);
}

static bool before(const struct coverage_entry *e, uint64_t iteration, uint64_t seq)
{
    return e->iteration < iteration || (e->iteration == iteration && e->seq < seq);
}

static size_t lower(const struct coverage *c, uint64_t iteration, uint64_t seq)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (before(&c->v[mid], iteration, seq))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int coverage_check(uint64_t seq, bool ended, uint64_t total, const uint64_t *bounds, size_t nbounds,
                   char *err, size_t errlen)
{
    if (nbounds % 2)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "coverage of split %" PRIu64 ": an odd number of bounds", seq);
    for (size_t i = 0; i < nbounds; i += 2) {
        if (bounds[i] >= bounds[i + 1] || (i > 0 && bounds[i] < bounds[i - 1]) ||
            (ended && bounds[i + 1] > total))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "coverage of split %" PRIu64 ": bad range [%" PRIu64 ", %" PRIu64 ")",
                           seq, bounds[i], bounds[i + 1]);
    }
    return 0;
}

int coverage_merge(struct coverage *c, uint64_t iteration, uint64_t seq, uint64_t client,
                   bool ended, uint64_t total, const uint64_t *bounds, size_t nbounds,
                   bool *complete)
{
    *complete = false;
    /* The common case, one consumer reporting a whole split, keeps no entry. */
    size_t i = lower(c, iteration, seq);
    bool have = i < c->n && c->v[i].iteration == iteration && c->v[i].seq == seq;
    if (!have && ended && (total == 0 || (nbounds == 2 && bounds[0] == 0 && bounds[1] >= total))) {
        *complete = true;
        return 0;
    }
    if (!have) {
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 16;
            struct coverage_entry *v = realloc(c->v, cap * sizeof *v);
            if (!v)
                return SLUICE_ERR_NOMEM;
            c->v = v;
            c->cap = cap;
        }
        memmove(&c->v[i + 1], &c->v[i], (c->n - i) * sizeof *c->v);
        memset(&c->v[i], 0, sizeof c->v[i]);
        c->v[i].iteration = iteration;
        c->v[i].seq = seq;
        c->n++;
    }
    struct coverage_entry *e = &c->v[i];
    if (ended) {
        if (e->ended && e->total != total)
            return SLUICE_ERR_CORRUPT;
        e->ended = true;
        e->total = total;
    }
    for (size_t k = 0; k < nbounds; k += 2) {
        if (ranges_add(&e->got, bounds[k], bounds[k + 1]) < 0)
            return SLUICE_ERR_NOMEM;
    }
    if (nbounds > 0 && e->owner != client)
        e->owner = e->owner == 0 ? client : COVERAGE_SHARED;
    *complete = e->ended && ranges_covers(&e->got, e->total);
    return 0;
}

const struct coverage_entry *coverage_find(const struct coverage *c, uint64_t iteration,
                                           uint64_t seq)
{
    size_t i = lower(c, iteration, seq);
    if (i < c->n && c->v[i].iteration == iteration && c->v[i].seq == seq)
        return &c->v[i];
    return NULL;
}

void coverage_forget(struct coverage *c, uint64_t iteration, uint64_t seq)
{
    size_t i = lower(c, iteration, seq);
    if (i < c->n && c->v[i].iteration == iteration && c->v[i].seq == seq) {
        ranges_release(&c->v[i].got);
        memmove(&c->v[i], &c->v[i + 1], (c->n - i - 1) * sizeof *c->v);
        c->n--;
    }
}

void coverage_forget_iteration(struct coverage *c, uint64_t iteration)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->v[i].iteration == iteration)
            ranges_release(&c->v[i].got);
        else
            c->v[k++] = c->v[i];
    }
    c->n = k;
}
