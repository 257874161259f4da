/* The cross-trainer cache: a ring of chunks of records with a cursor per trainer id. */

#include "xtcache.h"

#include "common/error.h"
#include "common/varint.h"

#include <stdlib.h>
#include <string.h>

int xtc_init(struct xtc *c, uint64_t bound, size_t max_trainers, uint64_t idle_ms)
{
    memset(c, 0, sizeof *c);
    c->bound = bound ? bound : XTC_DEFAULT_BYTES;
    c->max_trainers = max_trainers ? max_trainers : XTC_MAX_TRAINERS;
    c->idle_ms = idle_ms;
    return 0;
}

static struct xtc_chunk *chunk_at(const struct xtc *c, size_t i)
{
    return &c->chunks[(c->head + i) % c->cap];
}

static void chunk_release(struct xtc_chunk *k)
{
    free(k->data);
    free(k->off);
    k->data = NULL;
    k->off = NULL;
}

void xtc_free(struct xtc *c)
{
    for (size_t i = 0; i < c->n; i++)
        chunk_release(chunk_at(c, i));
    free(c->chunks);
    free(c->trainers);
    memset(c, 0, sizeof *c);
}

static uint64_t record_cost(const struct xtc_chunk *k, uint32_t i)
{
    return (uint64_t)(k->off[i + 1] - k->off[i]) + XTC_RECORD_OVERHEAD;
}

/* Evicts the oldest held element. */
static void evict_one(struct xtc *c)
{
    struct xtc_chunk *k = chunk_at(c, 0);
    c->bytes -= record_cost(k, k->dropped);
    k->dropped++;
    c->records--;
    c->first++;
    c->evicted++;
    if (k->dropped == k->count) {
        chunk_release(k);
        c->head = (c->head + 1) % c->cap;
        c->n--;
    }
}

int xtc_push(struct xtc *c, const uint8_t *payload, size_t len, uint32_t count)
{
    if (count == 0)
        return SLUICE_ERR_CORRUPT;
    if (len > UINT32_MAX)
        return SLUICE_ERR_INVALID;
    uint32_t *off = malloc(((size_t)count + 1) * sizeof *off);
    if (!off)
        return SLUICE_ERR_NOMEM;
    size_t pos = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t rlen;
        off[i] = (uint32_t)pos;
        if (!varint_get(payload, len, &pos, VARINT_MAX_LEN, &rlen) || rlen > len - pos) {
            free(off);
            return SLUICE_ERR_CORRUPT;
        }
        pos += (size_t)rlen;
    }
    if (pos != len) {
        free(off);
        return SLUICE_ERR_CORRUPT;
    }
    off[count] = (uint32_t)len;
    uint8_t *data = malloc(len ? len : 1);
    if (!data) {
        free(off);
        return SLUICE_ERR_NOMEM;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct xtc_chunk *v = malloc(cap * sizeof *v);
        if (!v) {
            free(data);
            free(off);
            return SLUICE_ERR_NOMEM;
        }
        for (size_t i = 0; i < c->n; i++)
            v[i] = *chunk_at(c, i);
        free(c->chunks);
        c->chunks = v;
        c->cap = cap;
        c->head = 0;
    }
    memcpy(data, payload, len);
    struct xtc_chunk *k = chunk_at(c, c->n);
    *k = (struct xtc_chunk){.first = c->next, .count = count, .data = data, .off = off};
    c->n++;
    c->next += count;
    c->records += count;
    c->bytes += len + (uint64_t)count * XTC_RECORD_OVERHEAD;
    /* The newest element stays, whatever its size: the fastest trainer needs it next. */
    while (c->bytes > c->bound && c->records > 1)
        evict_one(c);
    return 0;
}

/* The index of id in the sorted table, or where it belongs (*found false). */
static size_t trainer_find(const struct xtc *c, const char *id, bool *found)
{
    size_t lo = 0, hi = c->ntrainers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(c->trainers[mid].id, id);
        if (cmp == 0) {
            *found = true;
            return mid;
        }
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

const struct xtc_trainer *xtc_trainer(const struct xtc *c, const char *id)
{
    bool found;
    size_t i = trainer_find(c, id, &found);
    return found ? &c->trainers[i] : NULL;
}

size_t xtc_expire(struct xtc *c, uint64_t now_ms)
{
    if (c->idle_ms == 0)
        return 0;
    size_t kept = 0, gone = 0;
    for (size_t i = 0; i < c->ntrainers; i++) {
        const struct xtc_trainer *t = &c->trainers[i];
        if (now_ms >= t->seen_ms && now_ms - t->seen_ms >= c->idle_ms) {
            gone++;
            continue;
        }
        c->trainers[kept++] = *t;
    }
    c->ntrainers = kept;
    return gone;
}

/* The chunk holding position pos (first <= pos < next). */
static size_t chunk_of(const struct xtc *c, uint64_t pos)
{
    size_t lo = 0, hi = c->n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (chunk_at(c, mid)->first <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int xtc_read(struct xtc *c, const char *id, uint64_t now_ms, uint32_t max_elements,
             uint64_t max_bytes, struct pipe_buf *scratch, struct xtc_read *out)
{
    memset(out, 0, sizeof *out);
    size_t idlen = id ? strlen(id) : 0;
    if (idlen == 0 || idlen > XTC_TRAINER_ID_MAX)
        return SLUICE_ERR_INVALID;
    if (max_elements == 0)
        max_elements = 1;
    bool found;
    size_t ti = trainer_find(c, id, &found);
    if (!found) {
        if (c->ntrainers >= c->max_trainers) {
            xtc_expire(c, now_ms);
            ti = trainer_find(c, id, &found);
            if (c->ntrainers >= c->max_trainers)
                return SLUICE_ERR_LIMIT;
        }
        if (c->ntrainers % 16 == 0) {
            struct xtc_trainer *v = realloc(c->trainers, (c->ntrainers + 16) * sizeof *c->trainers);
            if (!v)
                return SLUICE_ERR_NOMEM;
            c->trainers = v;
        }
        memmove(&c->trainers[ti + 1], &c->trainers[ti], (c->ntrainers - ti) * sizeof *c->trainers);
        struct xtc_trainer *t = &c->trainers[ti];
        memset(t, 0, sizeof *t);
        memcpy(t->id, id, idlen + 1);
        t->cursor = c->first;
        c->ntrainers++;
        out->joined = true;
    }
    struct xtc_trainer *t = &c->trainers[ti];
    t->seen_ms = now_ms;
    uint64_t cursor = t->cursor;
    if (cursor < c->first) {
        out->skipped = c->first - cursor;
        cursor = c->first;
    }
    out->first = cursor;
    if (cursor >= c->next) {
        t->skipped += out->skipped;
        t->cursor = cursor;
        return 0;
    }

    /* The run within the cursor's chunk, then (gathered) the runs of the chunks after it. */
    size_t ki = chunk_of(c, cursor);
    const struct xtc_chunk *k = chunk_at(c, ki);
    uint32_t i = (uint32_t)(cursor - k->first);
    uint32_t end = i + 1;
    while (end < k->count && end - i < max_elements && k->off[end + 1] - k->off[i] <= max_bytes)
        end++;
    uint32_t count = end - i;
    size_t len = k->off[end] - k->off[i];
    bool more = end == k->count && ki + 1 < c->n && count < max_elements && len < max_bytes;
    if (!more) {
        out->payload = k->data + k->off[i];
    } else {
        /* How far the gathered run reaches, then one copy. */
        size_t total = len;
        uint32_t n = count;
        size_t last = ki, last_end = end;
        for (size_t kj = ki + 1; kj < c->n && n < max_elements; kj++) {
            const struct xtc_chunk *q = chunk_at(c, kj);
            uint32_t e = 0;
            while (e < q->count && n < max_elements &&
                   total + (q->off[e + 1] - q->off[0]) <= max_bytes) {
                e++;
                n++;
            }
            if (e == 0)
                break;
            total += q->off[e] - q->off[0];
            last = kj;
            last_end = e;
            if (e < q->count)
                break;
        }
        if (scratch->cap < total) {
            char *p = realloc(scratch->p, total);
            if (!p)
                return SLUICE_ERR_NOMEM;
            scratch->p = p;
            scratch->cap = total;
        }
        memcpy(scratch->p, k->data + k->off[i], len);
        size_t at = len;
        for (size_t kj = ki + 1; kj <= last; kj++) {
            const struct xtc_chunk *q = chunk_at(c, kj);
            uint32_t e = kj == last ? (uint32_t)last_end : q->count;
            memcpy(scratch->p + at, q->data, q->off[e]);
            at += q->off[e];
        }
        scratch->len = total;
        out->payload = (const uint8_t *)scratch->p;
        count = n;
        len = total;
    }
    out->count = count;
    out->len = len;
    t->skipped += out->skipped;
    t->cursor = cursor + count;
    return 0;
}
