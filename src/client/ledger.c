#include "ledger.h"

#include "common/error.h"
#include "common/rows.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void ledger_init(struct ledger *l)
{
    memset(l, 0, sizeof *l);
}

void ledger_release(struct ledger *l)
{
    for (size_t i = 0; i < l->n; i++)
        ranges_release(&l->v[i].got);
    free(l->v);
    ranges_release(&l->done);
    ranges_release(&l->had);
    memset(l, 0, sizeof *l);
}

/* The index of the entry for seq, or of where it belongs. */
static size_t lower(const struct ledger *l, uint64_t seq)
{
    return rows_lower(l->v, l->n, sizeof *l->v, offsetof(struct ledger_split, seq), seq);
}

static struct ledger_split *find(const struct ledger *l, uint64_t seq)
{
    return rows_find(l->v, l->n, sizeof *l->v, offsetof(struct ledger_split, seq), seq);
}

/* The entry for seq, made when missing. NULL when out of memory. */
static struct ledger_split *get(struct ledger *l, uint64_t seq)
{
    size_t i = lower(l, seq);
    if (i < l->n && l->v[i].seq == seq)
        return &l->v[i];
    struct ledger_split *e = rows_insert_at((void **)&l->v, &l->n, &l->cap, sizeof *l->v, i);
    if (e)
        e->seq = seq;
    return e;
}

bool ledger_is_new(const struct ledger *l, uint64_t seq, uint64_t pos, uint64_t *limit)
{
    if (ranges_contains(&l->done, seq) || (l->had.n && ranges_contains(&l->had, seq)))
        return false;
    const struct ledger_split *s = find(l, seq);
    if (!s) {
        *limit = UINT64_MAX;
        return true;
    }
    if (s->ended && pos >= s->total)
        return false; /* past the split's end: cannot be a real element */
    uint64_t next = ranges_next_in(&s->got, pos);
    if (next == pos)
        return false;
    *limit = next;
    if (s->ended && s->total < *limit)
        *limit = s->total;
    return true;
}

uint64_t ledger_first_missing(const struct ledger *l, uint64_t seq, uint64_t pos)
{
    const struct ledger_split *s = find(l, seq);
    if (!s || ranges_contains(&l->done, seq))
        return pos;
    uint64_t next = ranges_first_missing(&s->got, pos);
    return s->ended && next > s->total && pos <= s->total ? s->total : next;
}

int ledger_add(struct ledger *l, uint64_t seq, uint64_t begin, uint64_t end)
{
    if (begin >= end || ranges_contains(&l->done, seq))
        return 0;
    if (l->had.n && ranges_contains(&l->had, seq))
        return ledger_note_had(l, seq);
    struct ledger_split *s = get(l, seq);
    if (!s || ranges_add(&s->got, begin, end) < 0)
        return SLUICE_ERR_NOMEM;
    l->received += end - begin;
    return 0;
}

int ledger_end(struct ledger *l, uint64_t seq, uint64_t total)
{
    if (ranges_contains(&l->done, seq))
        return 0;
    if (l->had.n && ranges_contains(&l->had, seq))
        return ledger_note_had(l, seq);
    struct ledger_split *s = get(l, seq);
    if (!s)
        return SLUICE_ERR_NOMEM;
    if (s->ended && s->total != total)
        return SLUICE_ERR_CORRUPT;
    s->ended = true;
    s->total = total;
    return 0;
}

bool ledger_complete(const struct ledger *l, uint64_t seq)
{
    if (ranges_contains(&l->done, seq) || (l->had.n && ranges_contains(&l->had, seq)))
        return true;
    const struct ledger_split *s = find(l, seq);
    return s && s->ended && ranges_covers(&s->got, s->total);
}

int ledger_confirmed(struct ledger *l, const uint64_t *seqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (seqs[i] == UINT64_MAX)
            continue;
        if (ranges_add(&l->done, seqs[i], seqs[i] + 1) < 0)
            return SLUICE_ERR_NOMEM;
        size_t k = lower(l, seqs[i]);
        if (k < l->n && l->v[k].seq == seqs[i]) {
            ranges_release(&l->v[k].got);
            memmove(&l->v[k], &l->v[k + 1], (l->n - k - 1) * sizeof *l->v);
            l->n--;
        }
    }
    return 0;
}

int ledger_note_had(struct ledger *l, uint64_t seq)
{
    if (ranges_contains(&l->done, seq) || !ranges_contains(&l->had, seq) || find(l, seq))
        return 0;
    struct ledger_split *e = get(l, seq);
    if (!e)
        return SLUICE_ERR_NOMEM;
    e->had = true;
    return 0;
}
