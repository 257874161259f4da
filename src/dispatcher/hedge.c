/* Hedged splits: soft bookkeeping and the pure decision (see hedge.h). */

#include "hedge.h"

#include "common/error.h"
#include "common/rows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct hedge_iter *row_find(const struct hedge *h, uint64_t iteration_id, size_t *pos)
{
    size_t lo = rows_lower(h->v, h->n, sizeof *h->v, offsetof(struct hedge_iter, iteration_id),
                           iteration_id);
    if (pos)
        *pos = lo;
    return lo < h->n && h->v[lo].iteration_id == iteration_id ? &h->v[lo] : NULL;
}

static void row_release(struct hedge_iter *r)
{
    u64map_release(&r->since);
    u64map_release(&r->copies);
    u64map_release(&r->primaries);
    free(r->drops);
    r->drops = NULL;
    r->ndrops = r->capdrops = 0;
}

static void drop_push(struct hedge_iter *r, uint64_t task_id, uint64_t seq)
{
    if (r->ndrops == r->capdrops) {
        if (r->capdrops >= HEDGE_DROPS_MAX)
            return;
        size_t cap = r->capdrops ? 2 * r->capdrops : 16;
        struct hedge_drop *v = realloc(r->drops, cap * sizeof *v);
        if (!v)
            return;
        r->drops = v;
        r->capdrops = cap;
    }
    r->drops[r->ndrops++] = (struct hedge_drop){task_id, seq};
}

/* Removes the drops of task_id, taking up to max of their seqs into out (NULL: all are
 * forgotten). Returns how many were taken. */
static size_t drops_take(struct hedge_iter *r, uint64_t task_id, uint64_t *out, size_t max)
{
    size_t k = 0, taken = 0;
    for (size_t i = 0; i < r->ndrops; i++) {
        if (r->drops[i].task_id == task_id && (out == NULL || taken < max)) {
            if (out)
                out[taken++] = r->drops[i].seq;
            continue;
        }
        r->drops[k++] = r->drops[i];
    }
    r->ndrops = k;
    return taken;
}

static void row_remove(struct hedge *h, uint64_t iteration_id)
{
    size_t pos;
    struct hedge_iter *r = row_find(h, iteration_id, &pos);
    if (!r)
        return;
    row_release(r);
    memmove(&h->v[pos], &h->v[pos + 1], (h->n - pos - 1) * sizeof *h->v);
    h->n--;
}

void hedge_release(struct hedge *h)
{
    for (size_t i = 0; i < h->n; i++)
        row_release(&h->v[i]);
    free(h->v);
    memset(h, 0, sizeof *h);
}

bool hedge_allowed(const struct state *s, const struct st_iteration *it)
{
    if (!it || !it->distributed || it->state != ST_ITER_ACTIVE)
        return false;
    const struct st_job *j = state_job(s, it->job_id);
    return j && j->name[0] == '\0' && !j->deterministic && j->num_consumers == 0 &&
           j->xtc_bytes == 0 && !state_save_running(s, it->id);
}

const struct hedge_iter *hedge_find(const struct hedge *h, uint64_t iteration_id)
{
    return row_find(h, iteration_id, NULL);
}

int hedge_set(struct hedge *h, const struct state *s, uint64_t iteration_id, double factor,
              uint64_t now_ms)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    if (!(factor > 0))
        factor = 0;
    /* A finished iteration's row stays, with its count, until it is collected. */
    if (!hedge_allowed(s, it))
        return 0;
    if (factor > HEDGE_FACTOR_MAX)
        factor = HEDGE_FACTOR_MAX;
    size_t pos;
    struct hedge_iter *r = row_find(h, iteration_id, &pos);
    if (r) {
        r->factor = factor;
        return 0;
    }
    struct hedge_iter row = {.iteration_id = iteration_id, .factor = factor};
    /* What the iteration holds now is timed from now: a reader's first heartbeat comes after
     * the first leases. */
    if (u64map_reserve(&row.since, it->held.n) < 0)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < it->held.cap; i++)
        if (it->held.slots[2 * i] != 0)
            (void)u64map_put(&row.since, it->held.slots[2 * i] - 1, now_ms);
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 4;
        struct hedge_iter *v = realloc(h->v, cap * sizeof *v);
        if (!v) {
            row_release(&row);
            return SLUICE_ERR_NOMEM;
        }
        h->v = v;
        h->cap = cap;
    }
    memmove(&h->v[pos + 1], &h->v[pos], (h->n - pos) * sizeof *h->v);
    h->v[pos] = row;
    h->n++;
    return 0;
}

uint64_t hedge_median_ms(const struct hedge_iter *r)
{
    return r->nms < HEDGE_MIN_SAMPLES ? 0 : r->median;
}

uint64_t hedge_quantile_ms(const struct hedge_iter *r, double q)
{
    if (r->nms == 0)
        return 0;
    uint64_t v[HEDGE_SAMPLES];
    memcpy(v, r->ms, r->nms * sizeof *v);
    /* Insertion sort: at most HEDGE_SAMPLES entries. */
    for (size_t i = 1; i < r->nms; i++) {
        uint64_t x = v[i];
        size_t k = i;
        for (; k > 0 && v[k - 1] > x; k--)
            v[k] = v[k - 1];
        v[k] = x;
    }
    if (q == 0.5)
        return v[r->nms / 2];
    /* The k-th smallest with k = ceil(q n) - 1. */
    size_t k = (size_t)ceil(q * (double)r->nms);
    k = k == 0 ? 0 : k - 1;
    return v[k < r->nms ? k : r->nms - 1];
}

static bool keep_other_holders(uint64_t key, uint64_t value, void *ctx)
{
    (void)key;
    return value != *(const uint64_t *)ctx;
}

void hedge_applied(struct hedge *h, const struct st_update *u, uint64_t now_ms)
{
    struct hedge_iter *r;
    switch (u->type) {
    case ST_SPLITS_LEASED:
        if (!(r = row_find(h, u->ref, NULL)))
            return;
        for (size_t i = 0; i < u->seqs.n; i++)
            (void)u64map_put(&r->since, u->seqs.v[i], now_ms);
        return;
    case ST_SPLITS_FINISHED:
    case ST_SPLITS_RETURNED:
        if (!(r = row_find(h, u->ref, NULL)))
            return;
        size_t timed_n = 0;
        for (size_t i = 0; i < u->seqs.n; i++) {
            uint64_t t0;
            bool timed = u64map_get(&r->since, u->seqs.v[i], &t0);
            if (timed && u->type == ST_SPLITS_FINISHED) {
                r->ms[r->next] = now_ms > t0 ? now_ms - t0 : 0;
                r->next = (r->next + 1) % HEDGE_SAMPLES;
                if (r->nms < HEDGE_SAMPLES)
                    r->nms++;
                timed_n++;
            }
            if (timed)
                (void)u64map_del(&r->since, u->seqs.v[i]);
            uint64_t copy, primary;
            if (u64map_get(&r->copies, u->seqs.v[i], &copy)) {
                /* Whichever production won, the other holder need not start it. */
                if (u->type == ST_SPLITS_FINISHED) {
                    drop_push(r, copy, u->seqs.v[i]);
                    if (u64map_get(&r->primaries, u->seqs.v[i], &primary))
                        drop_push(r, primary, u->seqs.v[i]);
                }
                (void)u64map_del(&r->copies, u->seqs.v[i]);
                (void)u64map_del(&r->primaries, u->seqs.v[i]);
            }
        }
        if (timed_n > 0)
            r->median = hedge_quantile_ms(r, 0.5);
        return;
    case ST_TASK_REMOVED:
        if (!(r = row_find(h, u->ref, NULL)))
            return;
        if (r->copies.n > 0)
            (void)u64map_retain(&r->copies, keep_other_holders, (void *)&u->id);
        (void)drops_take(r, u->id, NULL, 0);
        return;
    case ST_ITERATION_FINISHED:
    case ST_ITERATION_FAILED:
        /* The count stays for status until the iteration is collected. */
        if ((r = row_find(h, u->id, NULL))) {
            u64map_release(&r->since);
            u64map_release(&r->copies);
            u64map_release(&r->primaries);
            r->factor = 0;
        }
        return;
    case ST_ITERATION_GC:
        row_remove(h, u->id);
        return;
    default:
        return;
    }
}

size_t hedge_pick(const struct hedge_iter *r, const struct st_iteration *it, uint64_t task_id,
                  uint64_t now_ms, size_t room, uint64_t *out)
{
    if (!r || !(r->factor > 0) || room == 0)
        return 0;
    if (r->nms < HEDGE_MIN_SAMPLES)
        return 0;
    uint64_t median = hedge_median_ms(r);
    double limit = r->factor * (double)median;
    if (limit < HEDGE_MIN_MS)
        limit = HEDGE_MIN_MS;
    /* The room oldest leases past the limit, kept sorted by lease time in out (and their ages
     * beside), by insertion: room is a worker's queue, a handful. */
    size_t n = 0;
    uint64_t *age = malloc(room * sizeof *age);
    if (!age)
        return 0;
    for (size_t i = 0; i < r->since.cap; i++) {
        uint64_t key = r->since.slots[2 * i];
        if (key == 0)
            continue;
        uint64_t seq = key - 1, t0 = r->since.slots[2 * i + 1], holder;
        uint64_t a = now_ms > t0 ? now_ms - t0 : 0;
        if ((double)a <= limit || !u64map_get(&it->held, seq, &holder) || holder == task_id ||
            u64map_get(&r->copies, seq, NULL))
            continue;
        if (n == room && (age[n - 1] > a || (age[n - 1] == a && out[n - 1] < seq)))
            continue;
        size_t k = n < room ? n++ : n - 1;
        for (; k > 0 && (age[k - 1] < a || (age[k - 1] == a && out[k - 1] > seq)); k--) {
            age[k] = age[k - 1];
            out[k] = out[k - 1];
        }
        age[k] = a;
        out[k] = seq;
    }
    free(age);
    return n;
}

int hedge_leased(struct hedge *h, const struct st_iteration *it, uint64_t task_id,
                 const uint64_t *seqs, size_t n)
{
    struct hedge_iter *r = row_find(h, it->id, NULL);
    if (!r || n == 0)
        return 0;
    r->hedged += n;
    h->total += n;
    for (size_t i = 0; i < n; i++) {
        uint64_t primary;
        if (u64map_put(&r->copies, seqs[i], task_id) < 0)
            return SLUICE_ERR_NOMEM;
        if (u64map_get(&it->held, seqs[i], &primary) &&
            u64map_put(&r->primaries, seqs[i], primary) < 0)
            return SLUICE_ERR_NOMEM;
    }
    return 0;
}

size_t hedge_take_drops(struct hedge *h, uint64_t iteration_id, uint64_t task_id, uint64_t *out,
                        size_t max)
{
    struct hedge_iter *r = row_find(h, iteration_id, NULL);
    return r && max > 0 ? drops_take(r, task_id, out, max) : 0;
}

uint64_t hedge_count(const struct hedge *h, uint64_t iteration_id)
{
    const struct hedge_iter *r = row_find(h, iteration_id, NULL);
    return r ? r->hedged : 0;
}
