/* The chunk FIFO behind a task's element buffer. A take is planned first (walking the record
 * length prefixes, without changing anything), then the payload is located or gathered, then the
 * plan is committed; so a failure to grow the scratch buffer leaves the buffer as it was. */
#include "buffer.h"

#include "common/error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void wbuf_init(struct wbuf *b)
{
    memset(b, 0, sizeof *b);
}

size_t wbuf_read_varint(const uint8_t *p, size_t len, uint64_t *value)
{
    uint64_t v = 0;
    for (size_t i = 0; i < len && i < 10; i++) {
        uint64_t byte = p[i] & 0x7f;
        /* The tenth byte may only carry the top bit of a 64-bit value. */
        if (i == 9 && byte > 1)
            return 0;
        v |= byte << (7 * i);
        if ((p[i] & 0x80) == 0) {
            *value = v;
            return i + 1;
        }
    }
    return 0;
}

void wbuf_push(struct wbuf *b, struct wbuf_chunk *c)
{
    assert(c->count > 0 && c->pos == 0 && c->taken == 0);
    c->next = NULL;
    if (b->tail)
        b->tail->next = c;
    else
        b->head = c;
    b->tail = c;
    b->bytes += c->data.len;
    b->count += c->count;
    b->chunks++;
}

/* Where a planned take ends: in chunk last, before byte end and record k. */
struct take_plan {
    struct wbuf_chunk *last;
    size_t end;
    uint32_t k;
    uint32_t n;
    uint64_t bytes;
};

static int plan_take(const struct wbuf *b, uint32_t max_elements, uint64_t max_bytes,
                     struct take_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    for (struct wbuf_chunk *c = b->head; c; c = c->next) {
        const uint8_t *data = (const uint8_t *)c->data.p;
        size_t p = c->pos;
        uint32_t k = c->taken;
        while (k < c->count) {
            if (pl->n == max_elements)
                return 0;
            uint64_t l;
            size_t h = wbuf_read_varint(data + p, c->data.len - p, &l);
            if (h == 0 || l > c->data.len - p - h)
                return SLUICE_ERR_CORRUPT;
            uint64_t rec = h + l;
            if (pl->n > 0 && pl->bytes + rec > max_bytes)
                return 0;
            pl->bytes += rec;
            pl->n++;
            p += rec;
            k++;
            pl->last = c;
            pl->end = p;
            pl->k = k;
        }
        if (p != c->data.len)
            return SLUICE_ERR_CORRUPT;
        /* The chunk is used up. Going on means copying, which pays only for small replies. */
        if ((uint64_t)pl->n * 2 >= max_elements || pl->bytes * 2 >= max_bytes)
            return 0;
    }
    return 0;
}

static int reserve(struct pipe_buf *scratch, size_t len)
{
    if (scratch->cap >= len)
        return 0;
    char *p = realloc(scratch->p, len);
    if (!p)
        return SLUICE_ERR_NOMEM;
    scratch->p = p;
    scratch->cap = len;
    return 0;
}

int wbuf_take(struct wbuf *b, uint32_t max_elements, uint64_t max_bytes, struct pipe_buf *scratch,
              struct wbuf_take *out)
{
    assert(max_elements >= 1);
    memset(out, 0, sizeof *out);
    struct take_plan pl;
    int rc = plan_take(b, max_elements, max_bytes, &pl);
    if (rc < 0)
        return rc;
    if (pl.n == 0)
        return 0;

    struct wbuf_chunk *head = b->head;
    if (pl.last == head) {
        out->payload = (const uint8_t *)head->data.p + head->pos;
        out->len = pl.end - head->pos;
    } else {
        rc = reserve(scratch, pl.bytes);
        if (rc < 0)
            return rc;
        size_t off = 0;
        for (struct wbuf_chunk *c = head;; c = c->next) {
            size_t end = c == pl.last ? pl.end : c->data.len;
            memcpy(scratch->p + off, c->data.p + c->pos, end - c->pos);
            off += end - c->pos;
            if (c == pl.last)
                break;
        }
        assert(off == pl.bytes);
        scratch->len = off;
        out->payload = (const uint8_t *)scratch->p;
        out->len = off;
        out->copied = true;
    }
    out->count = pl.n;

    /* Commit: chunks before last are used up; last is used up when its final record went. */
    struct wbuf_chunk **spent_tail = &out->spent;
    while (b->head != pl.last) {
        struct wbuf_chunk *c = b->head;
        b->head = c->next;
        c->next = NULL;
        *spent_tail = c;
        spent_tail = &c->next;
        b->chunks--;
    }
    pl.last->pos = pl.end;
    pl.last->taken = pl.k;
    if (pl.last->taken == pl.last->count) {
        b->head = pl.last->next;
        if (!b->head)
            b->tail = NULL;
        pl.last->next = NULL;
        *spent_tail = pl.last;
        b->chunks--;
    }
    b->bytes -= pl.bytes;
    b->count -= pl.n;
    return 0;
}

void wbuf_chunk_free(struct wbuf_chunk *c)
{
    if (!c)
        return;
    pipe_buf_release(&c->data);
    free(c);
}

void wbuf_clear(struct wbuf *b)
{
    struct wbuf_chunk *c = b->head;
    while (c) {
        struct wbuf_chunk *next = c->next;
        wbuf_chunk_free(c);
        c = next;
    }
    wbuf_init(b);
}
