/* Lease queues: bookkeeping only (see lease.h). */
#include "lease.h"

#include "common/error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_BACKOFF_MIN_MS 100
#define LEASE_BACKOFF_MAX_MS 1000

int lease_queue_init(struct lease_queue *q, size_t target)
{
    assert(target >= 1);
    memset(q, 0, sizeof *q);
    q->seqs = malloc(target * sizeof *q->seqs);
    if (!q->seqs)
        return SLUICE_ERR_NOMEM;
    q->cap = target;
    q->target = target;
    q->low = target / 2;
    return 0;
}

void lease_queue_release(struct lease_queue *q)
{
    free(q->seqs);
    free(q->finished);
    free(q->returning);
    memset(q, 0, sizeof *q);
}

int lease_pop(struct lease_queue *q, uint64_t *seq)
{
    if (q->len == 0 || q->draining)
        return 0;
    /* The lowest seq first: a split handed back to the pool and leased again (its worker died,
     * or a deterministic reader needs it produced again) is usually the one its readers wait
     * for, so it goes before splits leased earlier but further along. */
    size_t low = q->head;
    for (size_t i = 1; i < q->len; i++) {
        size_t k = (q->head + i) % q->cap;
        if (q->seqs[k] < q->seqs[low])
            low = k;
    }
    uint64_t first = q->seqs[q->head];
    q->seqs[q->head] = q->seqs[low];
    q->seqs[low] = first;
    *seq = q->seqs[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    q->busy++;
    return 1;
}

int lease_finish(struct lease_queue *q, uint64_t seq, uint64_t now_ms)
{
    assert(q->busy > 0);
    if (q->nfinished == q->finished_cap) {
        size_t cap = q->finished_cap ? q->finished_cap * 2 : 16;
        uint64_t *f = realloc(q->finished, cap * sizeof *f);
        if (!f)
            return SLUICE_ERR_NOMEM;
        q->finished = f;
        q->finished_cap = cap;
    }
    if (q->nfinished == q->reporting)
        q->first_finished_ms = now_ms;
    q->finished[q->nfinished++] = seq;
    q->busy--;
    /* An empty answer backed off: with a split finished this task holds less than its share
     * (the dispatcher's guided self-scheduling), so the next ask need not wait. */
    if (!q->inflight && !q->resend) {
        q->failures = 0;
        q->retry_at_ms = 0;
    }
    return 0;
}

void lease_abandon(struct lease_queue *q)
{
    assert(q->busy > 0);
    q->busy--;
}

size_t lease_drop(struct lease_queue *q, const uint64_t *seqs, size_t n)
{
    size_t kept = 0;
    for (size_t i = 0; i < q->len; i++) {
        uint64_t s = q->seqs[(q->head + i) % q->cap];
        bool drop = false;
        for (size_t k = 0; k < n && !drop; k++)
            drop = seqs[k] == s;
        /* Compacted in place: kept <= i, so nothing unread is overwritten. */
        if (!drop)
            q->seqs[(q->head + kept++) % q->cap] = s;
    }
    size_t dropped = q->len - kept;
    q->len = kept;
    return dropped;
}

bool lease_want(const struct lease_queue *q, uint64_t now_ms, uint32_t *max_splits,
                size_t *nfinished)
{
    if (q->inflight || now_ms < q->retry_at_ms)
        return false;
    if (q->resend) {
        /* The dispatcher may have acted on the failed request: only the same request, under
         * the same number, gets its answer back. */
        *max_splits = q->asked;
        *nfinished = q->reporting;
        return true;
    }
    if (q->draining) {
        /* Hand back what is queued, report, and otherwise poll for the end. */
        *max_splits = 0;
        *nfinished = q->nfinished;
        return !q->end_of_splits || q->nreturning > 0 || q->nfinished > 0;
    }
    bool need = !q->end_of_splits && q->len <= q->low;
    bool report = q->nfinished > 0 && (q->end_of_splits || q->nfinished >= LEASE_REPORT_COUNT ||
                                       now_ms - q->first_finished_ms >= LEASE_REPORT_MS);
    if (!need && !report)
        return false;
    size_t room = q->end_of_splits ? 0 : q->target - (q->len < q->target ? q->len : q->target);
    *max_splits = room > UINT32_MAX ? UINT32_MAX : (uint32_t)room;
    *nfinished = q->nfinished;
    return true;
}

bool lease_want_topup(const struct lease_queue *q, uint64_t now_ms, uint32_t *max_splits,
                      size_t *nfinished)
{
    if (lease_want(q, now_ms, max_splits, nfinished))
        return true;
    if (q->inflight || q->resend || q->draining || now_ms < q->retry_at_ms)
        return false;
    size_t room = q->end_of_splits ? 0 : q->target - (q->len < q->target ? q->len : q->target);
    /* Halfway from the low-water mark to the target: a queue just topped up waits. */
    bool more = room > 0 && q->len <= q->low + (q->target - q->low) / 2;
    if (!more && q->nfinished == 0)
        return false;
    *max_splits = room > UINT32_MAX ? UINT32_MAX : (uint32_t)room;
    *nfinished = q->nfinished;
    return true;
}

void lease_sent(struct lease_queue *q, uint32_t max_splits, size_t nfinished)
{
    assert(!q->inflight && nfinished <= q->nfinished);
    assert(!q->resend || (max_splits == q->asked && nfinished == q->reporting));
    if (!q->resend)
        q->returning_sent = q->nreturning;
    q->inflight = true;
    q->resend = false;
    q->asked = max_splits;
    q->reporting = nfinished;
}

static void back_off(struct lease_queue *q, uint64_t now_ms)
{
    if (q->failures < 16)
        q->failures++;
    uint64_t delay = (uint64_t)LEASE_BACKOFF_MIN_MS << (q->failures - 1);
    q->retry_at_ms = now_ms + (delay > LEASE_BACKOFF_MAX_MS ? LEASE_BACKOFF_MAX_MS : delay);
}

static int ring_grow(struct lease_queue *q, size_t need)
{
    if (need <= q->cap)
        return 0;
    size_t cap = q->cap * 2 > need ? q->cap * 2 : need;
    uint64_t *s = malloc(cap * sizeof *s);
    if (!s)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < q->len; i++)
        s[i] = q->seqs[(q->head + i) % q->cap];
    free(q->seqs);
    q->seqs = s;
    q->cap = cap;
    q->head = 0;
    return 0;
}

int lease_granted(struct lease_queue *q, const uint64_t *seqs, size_t n, bool end_of_splits,
                  uint64_t now_ms)
{
    assert(q->inflight);
    q->inflight = false;
    if (q->returning_sent) {
        memmove(q->returning, q->returning + q->returning_sent,
                (q->nreturning - q->returning_sent) * sizeof *q->returning);
        q->nreturning -= q->returning_sent;
        q->returning_sent = 0;
    }
    if (n == 0 && (q->asked > 0 || q->draining) && !end_of_splits) {
        back_off(q, now_ms);
    } else {
        q->failures = 0;
        q->retry_at_ms = 0;
    }
    if (q->reporting) {
        if (q->nfinished > q->reporting)
            memmove(q->finished, q->finished + q->reporting,
                    (q->nfinished - q->reporting) * sizeof *q->finished);
        q->nfinished -= q->reporting;
        q->reporting = 0;
    }
    if (end_of_splits)
        q->end_of_splits = true;
    int rc = ring_grow(q, q->len + n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        q->seqs[(q->head + q->len + i) % q->cap] = seqs[i];
    q->len += n;
    return q->draining ? lease_drain(q) : 0;
}

int lease_drain(struct lease_queue *q)
{
    if (q->nreturning + q->len > q->returning_cap) {
        size_t cap = q->nreturning + q->len + 16;
        uint64_t *v = realloc(q->returning, cap * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        q->returning = v;
        q->returning_cap = cap;
    }
    while (q->len > 0) {
        q->returning[q->nreturning++] = q->seqs[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
    q->draining = true;
    return 0;
}

const uint64_t *lease_returning(const struct lease_queue *q, size_t *n)
{
    *n = q->returning_sent;
    return q->returning;
}

void lease_failed(struct lease_queue *q, uint64_t now_ms)
{
    assert(q->inflight);
    q->inflight = false;
    q->resend = true;
    back_off(q, now_ms);
}

uint64_t lease_number_next(struct lease_numbers *n)
{
    if (!n->repeat)
        n->last++;
    n->repeat = false;
    return n->last;
}

void lease_number_done(struct lease_numbers *n, bool answered)
{
    n->repeat = !answered;
}

bool lease_more(const struct lease_queue *q)
{
    return !q->draining && !(q->end_of_splits && q->len == 0);
}

bool lease_settled(const struct lease_queue *q)
{
    return q->end_of_splits && q->len == 0 && q->busy == 0 && q->nfinished == 0 && !q->inflight;
}
