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
    u64map_release(&r->holders);
    free(r->tasks);
    r->tasks = NULL;
    r->ntasks = r->captasks = 0;
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

static struct hedge_task *task_find(const struct hedge_iter *r, uint64_t task_id, size_t *pos)
{
    size_t lo = rows_lower(r->tasks, r->ntasks, sizeof *r->tasks,
                           offsetof(struct hedge_task, task_id), task_id);
    if (pos)
        *pos = lo;
    return lo < r->ntasks && r->tasks[lo].task_id == task_id ? &r->tasks[lo] : NULL;
}

/* Adds a split time to task_id's ring; out of memory, the time is not kept. */
static void task_sample(struct hedge_iter *r, uint64_t task_id, uint64_t ms)
{
    size_t pos;
    struct hedge_task *t = task_find(r, task_id, &pos);
    if (!t) {
        if (r->ntasks == r->captasks) {
            size_t cap = r->captasks ? 2 * r->captasks : 8;
            struct hedge_task *v = realloc(r->tasks, cap * sizeof *v);
            if (!v)
                return;
            r->tasks = v;
            r->captasks = cap;
        }
        memmove(&r->tasks[pos + 1], &r->tasks[pos], (r->ntasks - pos) * sizeof *r->tasks);
        r->ntasks++;
        t = &r->tasks[pos];
        memset(t, 0, sizeof *t);
        t->task_id = task_id;
    }
    t->ms[t->next] = ms;
    t->next = (uint8_t)((t->next + 1) % HEDGE_TASK_SAMPLES);
    if (t->n < HEDGE_TASK_SAMPLES)
        t->n++;
}

static void task_forget(struct hedge_iter *r, uint64_t task_id)
{
    size_t pos;
    if (!task_find(r, task_id, &pos))
        return;
    memmove(&r->tasks[pos], &r->tasks[pos + 1], (r->ntasks - pos - 1) * sizeof *r->tasks);
    r->ntasks--;
}

/* The k-th smallest of v[0, n) (n <= HEDGE_SAMPLES), by sorting a copy. */
static uint64_t kth_smallest(const uint64_t *v, size_t n, size_t k)
{
    uint64_t w[HEDGE_SAMPLES];
    memcpy(w, v, n * sizeof *w);
    /* Insertion sort: at most HEDGE_SAMPLES entries. */
    for (size_t i = 1; i < n; i++) {
        uint64_t x = w[i];
        size_t j = i;
        for (; j > 0 && w[j - 1] > x; j--)
            w[j] = w[j - 1];
        w[j] = x;
    }
    return w[k < n ? k : n - 1];
}

/* How long a split may be held before it is copied: factor times the median, at least
 * HEDGE_MIN_MS. */
static double row_limit(const struct hedge_iter *r)
{
    double limit = r->factor * (double)hedge_median_ms(r);
    return limit < HEDGE_MIN_MS ? HEDGE_MIN_MS : limit;
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
    if (u64map_reserve(&row.holders, it->held.n) < 0) {
        row_release(&row);
        return SLUICE_ERR_NOMEM;
    }
    for (size_t i = 0; i < it->held.cap; i++)
        if (it->held.slots[2 * i] != 0) {
            (void)u64map_put(&row.since, it->held.slots[2 * i] - 1, now_ms);
            (void)u64map_put(&row.holders, it->held.slots[2 * i] - 1, it->held.slots[2 * i + 1]);
        }
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
    if (q == 0.5)
        return kth_smallest(r->ms, r->nms, r->nms / 2);
    /* The k-th smallest with k = ceil(q n) - 1. */
    size_t k = (size_t)ceil(q * (double)r->nms);
    return kth_smallest(r->ms, r->nms, k == 0 ? 0 : k - 1);
}

/* The median of a task's own split times. */
static uint64_t task_median(const struct hedge_task *t)
{
    return kth_smallest(t->ms, t->n, t->n / 2);
}

/* What a task's median split time is compared with: the lower median of the medians of the
 * tasks with at least HEDGE_TASK_MIN_SAMPLES times (0 when fewer than two such tasks). */
static uint64_t peer_median(const struct hedge_iter *r)
{
    uint64_t v[HEDGE_SAMPLES];
    size_t n = 0;
    for (size_t i = 0; i < r->ntasks; i++) {
        if (r->tasks[i].n < HEDGE_TASK_MIN_SAMPLES)
            continue;
        uint64_t m = task_median(&r->tasks[i]);
        if (n < HEDGE_SAMPLES) {
            v[n++] = m;
        } else {
            /* More tasks than the buffer: keep an even sample of them (the last replaces by
             * position), enough for a median. */
            v[i % HEDGE_SAMPLES] = m;
        }
    }
    return n < 2 ? 0 : kth_smallest(v, n, (n - 1) / 2);
}

static bool task_slow(const struct hedge_iter *r, const struct hedge_task *t, uint64_t peers)
{
    return peers > 0 && t->n >= HEDGE_TASK_MIN_SAMPLES && r->factor > 0 &&
           (double)task_median(t) > r->factor / 2 * (double)peers &&
           (double)task_median(t) >= HEDGE_MIN_MS;
}

bool hedge_task_slow(const struct hedge_iter *r, uint64_t task_id)
{
    const struct hedge_task *t = r ? task_find(r, task_id, NULL) : NULL;
    return t && task_slow(r, t, peer_median(r));
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
        for (size_t i = 0; i < u->seqs.n; i++) {
            (void)u64map_put(&r->since, u->seqs.v[i], now_ms);
            (void)u64map_put(&r->holders, u->seqs.v[i], u->ref2);
        }
        return;
    case ST_SPLITS_FINISHED:
    case ST_SPLITS_RETURNED:
        if (!(r = row_find(h, u->ref, NULL)))
            return;
        size_t timed_n = 0;
        for (size_t i = 0; i < u->seqs.n; i++) {
            uint64_t t0;
            bool timed = u64map_get(&r->since, u->seqs.v[i], &t0);
            (void)u64map_del(&r->holders, u->seqs.v[i]);
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
        task_forget(r, u->id);
        return;
    case ST_ITERATION_FINISHED:
    case ST_ITERATION_FAILED:
        /* The count stays for status until the iteration is collected. */
        if ((r = row_find(h, u->id, NULL))) {
            u64map_release(&r->since);
            u64map_release(&r->copies);
            u64map_release(&r->primaries);
            u64map_release(&r->holders);
            free(r->tasks);
            r->tasks = NULL;
            r->ntasks = r->captasks = 0;
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
    if (r->nms < HEDGE_MIN_SAMPLES || r->since.n == 0)
        return 0;
    double limit = row_limit(r);
    /* The slow tasks, by their own split times against their peers'. */
    struct u64map slow = {0};
    uint64_t peers = peer_median(r);
    for (size_t i = 0; i < r->ntasks; i++)
        if (r->tasks[i].task_id != task_id && task_slow(r, &r->tasks[i], peers) &&
            u64map_put(&slow, r->tasks[i].task_id, 1) < 0) {
            u64map_release(&slow);
            return 0;
        }
    /* The room oldest candidates, kept sorted by lease time in out (and their ages beside), by
     * insertion: room is a worker's queue, a handful. */
    size_t n = 0;
    uint64_t *age = malloc(room * sizeof *age);
    if (!age) {
        u64map_release(&slow);
        return 0;
    }
    for (size_t i = 0; i < r->since.cap; i++) {
        uint64_t key = r->since.slots[2 * i];
        if (key == 0)
            continue;
        uint64_t seq = key - 1, t0 = r->since.slots[2 * i + 1], holder;
        uint64_t a = now_ms > t0 ? now_ms - t0 : 0;
        if (a < HEDGE_MIN_MS || !u64map_get(&it->held, seq, &holder) || holder == task_id ||
            u64map_get(&r->copies, seq, NULL))
            continue;
        if ((double)a <= limit && !u64map_get(&slow, holder, NULL))
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
    u64map_release(&slow);
    return n;
}

void hedge_produced(struct hedge *h, uint64_t iteration_id, uint64_t task_id, const uint64_t *seqs,
                    size_t n, uint64_t now_ms)
{
    struct hedge_iter *r = row_find(h, iteration_id, NULL);
    for (size_t i = 0; r && i < n; i++) {
        uint64_t holder, t0;
        /* Its holder's first report of it (a repeated request reports it again): the time from
         * its lease to its production. */
        if (!u64map_get(&r->holders, seqs[i], &holder) || holder != task_id)
            continue;
        (void)u64map_del(&r->holders, seqs[i]);
        if (u64map_get(&r->since, seqs[i], &t0))
            task_sample(r, task_id, now_ms > t0 ? now_ms - t0 : 0);
    }
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
