#include "ranges.h"

#include "error.h"
#include "rows.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void ranges_release(struct ranges *r)
{
    free(r->v);
    r->v = NULL;
    r->n = r->cap = 0;
}

/* The index of the first range whose end is >= v (so it holds v or lies after it, or touches v
 * from below), or n. Ranges are sorted by end as well as by begin. */
static size_t first_ending_at_or_after(const struct ranges *r, uint64_t v)
{
    return rows_lower(r->v, r->n, sizeof *r->v, offsetof(struct range, end), v);
}

int ranges_add(struct ranges *r, uint64_t begin, uint64_t end)
{
    if (begin >= end)
        return 0;
    size_t i = first_ending_at_or_after(r, begin);
    /* Ranges i .. j-1 touch or overlap [begin, end): merge them into one. */
    size_t j = i;
    while (j < r->n && r->v[j].begin <= end)
        j++;
    if (j > i) {
        if (r->v[i].begin < begin)
            begin = r->v[i].begin;
        if (r->v[j - 1].end > end)
            end = r->v[j - 1].end;
        r->v[i].begin = begin;
        r->v[i].end = end;
        memmove(&r->v[i + 1], &r->v[j], (r->n - j) * sizeof *r->v);
        r->n -= j - i - 1;
        return 0;
    }
    struct range *e = rows_insert_at((void **)&r->v, &r->n, &r->cap, sizeof *r->v, i);
    if (!e)
        return SLUICE_ERR_NOMEM;
    e->begin = begin;
    e->end = end;
    return 0;
}

bool ranges_contains(const struct ranges *r, uint64_t v)
{
    return v != UINT64_MAX && ranges_next_in(r, v) == v;
}

uint64_t ranges_next_in(const struct ranges *r, uint64_t v)
{
    /* The first range ending after v holds v or starts after it. */
    if (v == UINT64_MAX)
        return UINT64_MAX; /* no range ends after it */
    size_t lo = first_ending_at_or_after(r, v + 1);
    if (lo == r->n)
        return UINT64_MAX;
    return r->v[lo].begin > v ? r->v[lo].begin : v;
}

uint64_t ranges_first_missing(const struct ranges *r, uint64_t v)
{
    if (v == UINT64_MAX)
        return v;
    size_t lo = first_ending_at_or_after(r, v + 1);
    return lo < r->n && r->v[lo].begin <= v ? r->v[lo].end : v;
}

bool ranges_covers(const struct ranges *r, uint64_t total)
{
    if (total == 0)
        return true;
    return r->n > 0 && r->v[0].begin == 0 && r->v[0].end >= total;
}

uint64_t ranges_count(const struct ranges *r)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < r->n; i++) {
        uint64_t len = r->v[i].end - r->v[i].begin;
        if (sum > UINT64_MAX - len)
            return UINT64_MAX;
        sum += len;
    }
    return sum;
}
