#include "reorder.h"

#include "common/error.h"
#include "common/rows.h"

#include <stdlib.h>
#include <string.h>

/* ---- the judge ------------------------------------------------------------------------------- */

void reorder_accept_init(struct reorder_accept *a)
{
    memset(a, 0, sizeof *a);
}

void reorder_accept_release(struct reorder_accept *a)
{
    free(a->v);
    memset(a, 0, sizeof *a);
}

static struct reorder_split *acc_find(const struct reorder_accept *a, uint64_t seq)
{
    return rows_find(a->v, a->n, sizeof *a->v, offsetof(struct reorder_split, seq), seq);
}

/* The entry of seq (>= need), made when missing; NULL when out of memory. */
static struct reorder_split *acc_get(struct reorder_accept *a, uint64_t seq)
{
    size_t i = rows_lower(a->v, a->n, sizeof *a->v, offsetof(struct reorder_split, seq), seq);
    if (i < a->n && a->v[i].seq == seq)
        return &a->v[i];
    struct reorder_split *e = rows_insert_at((void **)&a->v, &a->n, &a->cap, sizeof *a->v, i);
    if (e)
        e->seq = seq;
    return e;
}

static bool split_done(const struct reorder_split *e)
{
    return e->ended && e->next >= e->total;
}

int reorder_judge(struct reorder_accept *a, uint64_t seq, uint64_t pos, bool room)
{
    if (seq < a->need)
        return REORDER_DUP;
    struct reorder_split *e = acc_find(a, seq);
    uint64_t next = e ? e->next : 0;
    if (pos < next || (e && e->ended && pos >= e->total))
        return REORDER_DUP;
    if (pos > next || (!room && seq != a->need)) {
        a->dropped++;
        return REORDER_DROP;
    }
    if (!e && !(e = acc_get(a, seq)))
        return SLUICE_ERR_NOMEM;
    e->next++;
    if (split_done(e)) {
        e->redo = false;
        return REORDER_LAST;
    }
    return REORDER_ACCEPT;
}

int reorder_end(struct reorder_accept *a, uint64_t seq, uint64_t total, uint64_t task,
                uint64_t now_ms)
{
    if (seq < a->need)
        return 0;
    struct reorder_split *e = acc_get(a, seq);
    if (!e)
        return SLUICE_ERR_NOMEM;
    if ((e->ended && e->total != total) || e->next > total)
        return SLUICE_ERR_CORRUPT;
    bool was_done = split_done(e);
    e->ended = true;
    e->total = total;
    if (was_done)
        return 0;
    if (split_done(e))
        return 1;
    /* The stream that brought this marker skipped positions we lack: produce it again. */
    e->redo = true;
    e->end_task = task;
    e->end_ms = now_ms;
    return 0;
}

int reorder_accept_seed(struct reorder_accept *a, uint64_t seq, uint64_t next)
{
    if (seq < a->need)
        return 0;
    struct reorder_split *e = acc_get(a, seq);
    if (!e)
        return SLUICE_ERR_NOMEM;
    if (next > e->next)
        e->next = next;
    return 0;
}

uint64_t reorder_next(const struct reorder_accept *a, uint64_t seq)
{
    if (seq < a->need)
        return UINT64_MAX;
    const struct reorder_split *e = acc_find(a, seq);
    return e ? e->next : 0;
}

bool reorder_complete(const struct reorder_accept *a, uint64_t seq)
{
    if (seq < a->need)
        return true;
    const struct reorder_split *e = acc_find(a, seq);
    return e && split_done(e);
}

/* Forgets the entries below need. */
static void acc_trim(struct reorder_accept *a)
{
    size_t k = 0;
    while (k < a->n && a->v[k].seq < a->need)
        k++;
    if (k > 0) {
        memmove(a->v, a->v + k, (a->n - k) * sizeof *a->v);
        a->n -= k;
    }
}

uint64_t reorder_advance(struct reorder_accept *a)
{
    size_t k = 0;
    while (k < a->n && a->v[k].seq == a->need && split_done(&a->v[k])) {
        a->need++;
        k++;
    }
    acc_trim(a);
    return a->need;
}

uint64_t reorder_accept_floor(struct reorder_accept *a, uint64_t floor)
{
    if (floor > a->need) {
        a->need = floor;
        acc_trim(a);
    }
    return reorder_advance(a);
}

size_t reorder_redo_due(struct reorder_accept *a, bool room, uint64_t *seqs, uint64_t *tasks,
                        uint64_t *ends_ms, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < a->n && n < max; i++) {
        struct reorder_split *e = &a->v[i];
        if (!e->redo || split_done(e) || (!room && e->seq != a->need))
            continue;
        e->redo = false;
        seqs[n] = e->seq;
        tasks[n] = e->end_task;
        ends_ms[n++] = e->end_ms;
    }
    return n;
}

bool reorder_need_redo(const struct reorder_accept *a)
{
    const struct reorder_split *e = acc_find(a, a->need);
    return e && e->redo;
}

void reorder_redo_failed(struct reorder_accept *a, const uint64_t *seqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct reorder_split *e = acc_find(a, seqs[i]);
        if (e && !split_done(e))
            e->redo = true;
    }
}

/* ---- the queue ------------------------------------------------------------------------------- */

void reorder_queue_init(struct reorder_queue *q, uint64_t bound)
{
    memset(q, 0, sizeof *q);
    q->bound = bound;
}

struct reorder_blob *reorder_blob_new(struct prefetch_item *item)
{
    struct reorder_blob *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->item = *item;
    memset(item, 0, sizeof *item);
    return b;
}

void reorder_blob_free(struct reorder_blob *b)
{
    if (!b)
        return;
    prefetch_item_free(&b->item);
    free(b);
}

void reorder_queue_release(struct reorder_queue *q)
{
    for (size_t i = 0; i < q->n; i++) {
        struct reorder_qsplit *s = &q->v[i];
        for (size_t k = s->first; k < s->n; k++)
            reorder_blob_free(reorder_queue_done(q, s->runs[k].blob));
        free(s->runs);
    }
    free(q->v);
    free(q->passed);
    memset(q, 0, sizeof *q);
}

bool reorder_queue_room(const struct reorder_queue *q)
{
    return q->bytes < q->bound;
}

static struct reorder_qsplit *q_get(struct reorder_queue *q, uint64_t seq)
{
    size_t i = rows_lower(q->v, q->n, sizeof *q->v, offsetof(struct reorder_qsplit, seq), seq);
    if (i < q->n && q->v[i].seq == seq)
        return &q->v[i];
    struct reorder_qsplit *s = rows_insert_at((void **)&q->v, &q->n, &q->cap, sizeof *q->v, i);
    if (s)
        s->seq = seq;
    return s;
}

int reorder_queue_push(struct reorder_queue *q, uint64_t seq, struct reorder_blob *blob,
                       size_t begin, size_t end, uint32_t count)
{
    /* The reader has moved past it (skipped as finished elsewhere): nothing to keep. */
    if (seq < q->head)
        return 0;
    struct reorder_qsplit *s = q_get(q, seq);
    if (!s)
        return SLUICE_ERR_NOMEM;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? 2 * s->cap : 4;
        struct reorder_run *v = realloc(s->runs, ncap * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        s->runs = v;
        s->cap = ncap;
    }
    s->runs[s->n++] = (struct reorder_run){blob, begin, end, count};
    blob->refs++;
    if (!blob->charged) {
        blob->charged = true;
        q->bytes += blob->item.len;
    }
    return 0;
}

int reorder_queue_complete(struct reorder_queue *q, uint64_t seq, uint64_t total)
{
    if (seq < q->head)
        return 0;
    /* Room to record it passed, so moving the head never fails. */
    if (q->npassed + q->n + 1 > q->passed_cap) {
        size_t ncap = 2 * (q->npassed + q->n + 1);
        struct reorder_passed *v = realloc(q->passed, ncap * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        q->passed = v;
        q->passed_cap = ncap;
    }
    struct reorder_qsplit *s = q_get(q, seq);
    if (!s)
        return SLUICE_ERR_NOMEM;
    s->complete = true;
    s->total = total;
    return 0;
}

const struct reorder_passed *reorder_queue_passed(struct reorder_queue *q, size_t *n)
{
    *n = q->npassed;
    q->npassed = 0;
    return q->passed;
}

/* Removes the first entry (the head's, all of whose runs were taken). */
static void q_pop_first(struct reorder_queue *q)
{
    free(q->v[0].runs);
    memmove(q->v, q->v + 1, (q->n - 1) * sizeof *q->v);
    q->n--;
}

/* Moves the head past splits read in full and splits to skip. Returns the head's entry when it
 * has a run to take, else NULL (the reader must wait). */
static struct reorder_qsplit *q_settle(struct reorder_queue *q)
{
    for (;;) {
        struct reorder_qsplit *s = q->n ? &q->v[0] : NULL; /* entries are all >= head */
        bool skipping = q->ended || q->head < q->skip_below;
        if (s && s->seq == q->head) {
            if (s->first < s->n)
                return s;
            if (!s->complete && !skipping)
                return NULL;
            if (s->complete && q->npassed < q->passed_cap)
                q->passed[q->npassed++] = (struct reorder_passed){s->seq, s->total};
            q_pop_first(q);
            q->head++;
            continue;
        }
        /* Nothing of the head split is here: passed over only when skipping. */
        if (!skipping)
            return NULL;
        uint64_t to = s ? s->seq : UINT64_MAX;
        if (!q->ended && q->skip_below < to)
            to = q->skip_below;
        if (to == UINT64_MAX)
            return NULL;
        q->head = to;
    }
}

bool reorder_queue_take(struct reorder_queue *q, struct reorder_run *out)
{
    struct reorder_qsplit *s = q_settle(q);
    if (!s)
        return false;
    *out = s->runs[s->first++];
    return true;
}

struct reorder_blob *reorder_queue_done(struct reorder_queue *q, struct reorder_blob *blob)
{
    if (!blob || --blob->refs > 0)
        return NULL;
    if (blob->charged)
        q->bytes -= blob->item.len;
    return blob;
}

bool reorder_queue_starved(struct reorder_queue *q)
{
    return q_settle(q) == NULL;
}

bool reorder_queue_ahead(struct reorder_queue *q, uint64_t limit, uint64_t elements)
{
    if (!q_settle(q))
        return limit == 0 || elements == 0;
    uint64_t sum = 0, count = 0, seq = q->head;
    for (size_t i = 0; i < q->n && q->v[i].seq == seq; i++, seq++) {
        const struct reorder_qsplit *s = &q->v[i];
        for (size_t k = s->first; k < s->n; k++) {
            sum += s->runs[k].end - s->runs[k].begin;
            count += s->runs[k].count;
            if (sum >= limit || count >= elements)
                return true;
        }
        if (!s->complete)
            break;
    }
    return sum >= limit || count >= elements;
}
