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

void wbuf_push(struct wbuf *b, struct wbuf_chunk *c)
{
    assert(c->count > 0 && c->pos == 0 && c->taken == 0);
    assert(c->ext == NULL || (c->count == 1 && c->ext_at <= c->data.len));
    c->next = NULL;
    if (b->tail)
        b->tail->next = c;
    else
        b->head = c;
    b->tail = c;
    b->bytes += c->data.len + c->ext_len;
    b->count += c->count;
    b->chunks++;
}

/* Checks an external chunk's one record: its length prefix covers the rest of data and the
 * external bytes, which are spliced in after the prefix. */
static bool ext_consistent(const struct wbuf_chunk *c)
{
    uint64_t l;
    size_t h = wbuf_read_varint((const uint8_t *)c->data.p, c->data.len, &l);
    return h > 0 && c->ext_at >= h && c->ext_at <= c->data.len && l == c->data.len - h + c->ext_len;
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
        if (c->ext) {
            /* One record, taken whole or not at all. */
            if (pl->n == max_elements)
                return 0;
            if (!ext_consistent(c))
                return SLUICE_ERR_CORRUPT;
            uint64_t rec = c->data.len + c->ext_len;
            if (pl->n > 0 && pl->bytes + rec > max_bytes)
                return 0;
            pl->bytes += rec;
            pl->n++;
            pl->last = c;
            pl->end = c->data.len;
            pl->k = 1;
            if ((uint64_t)pl->n * 2 >= max_elements || pl->bytes * 2 >= max_bytes)
                return 0;
            continue;
        }
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
    if (pl.last == head && !head->ext) {
        out->payload = (const uint8_t *)head->data.p + head->pos;
        out->len = pl.end - head->pos;
    } else {
        rc = reserve(scratch, pl.bytes);
        if (rc < 0)
            return rc;
        size_t off = 0;
        for (struct wbuf_chunk *c = head;; c = c->next) {
            if (c->ext) {
                struct wbuf_piece pieces[3];
                unsigned n = wbuf_chunk_pieces(c, pieces);
                for (unsigned i = 0; i < n; i++) {
                    memcpy(scratch->p + off, pieces[i].p, pieces[i].len);
                    off += pieces[i].len;
                }
            } else {
                size_t end = c == pl.last ? pl.end : c->data.len;
                memcpy(scratch->p + off, c->data.p + c->pos, end - c->pos);
                off += end - c->pos;
            }
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

int wbuf_take_whole(struct wbuf *b, uint32_t max_elements, uint64_t max_bytes, unsigned max_chunks,
                    struct wbuf_take *out)
{
    memset(out, 0, sizeof *out);
    uint64_t bytes = 0, count = 0;
    unsigned n = 0;
    struct wbuf_chunk *end = b->head;
    while (end && n < max_chunks) {
        uint64_t cb = end->data.len - end->pos + end->ext_len;
        uint64_t cn = end->count - end->taken;
        if (count + cn > max_elements || bytes + cb > max_bytes || (end->inplace && n > 0) ||
            (end->inplace && end->pos == 0)) {
            /* An external chunk cannot be cut, so it goes alone when over a limit; one laid
             * out in a reader's arena goes alone always. */
            if (n == 0 && end->ext) {
                bytes = cb;
                count = cn;
                n = 1;
                end = end->next;
            }
            break;
        }
        bytes += cb;
        count += cn;
        n++;
        end = end->next;
    }
    if (n == 0)
        return 0;

    struct wbuf_chunk **spent_tail = &out->spent;
    while (b->head != end) {
        struct wbuf_chunk *c = b->head;
        b->head = c->next;
        c->next = NULL;
        *spent_tail = c;
        spent_tail = &c->next;
        b->chunks--;
    }
    if (!b->head)
        b->tail = NULL;
    b->bytes -= bytes;
    b->count -= count;
    out->len = (size_t)bytes;
    out->count = (uint32_t)count;
    out->whole = true;
    return 0;
}

unsigned wbuf_chunk_pieces(const struct wbuf_chunk *c, struct wbuf_piece out[3])
{
    const uint8_t *data = (const uint8_t *)c->data.p;
    unsigned n = 0;
    if (!c->ext) {
        if (c->data.len > c->pos)
            out[n++] = (struct wbuf_piece){data + c->pos, c->data.len - c->pos};
        return n;
    }
    assert(c->pos <= c->ext_at);
    if (c->ext_at > c->pos)
        out[n++] = (struct wbuf_piece){data + c->pos, c->ext_at - c->pos};
    if (c->ext_len)
        out[n++] = (struct wbuf_piece){c->ext, c->ext_len};
    if (c->data.len > c->ext_at)
        out[n++] = (struct wbuf_piece){data + c->ext_at, c->data.len - c->ext_at};
    return n;
}

void wbuf_chunk_free(struct wbuf_chunk *c)
{
    if (!c)
        return;
    pipe_buf_release(&c->data);
    wbuf_chunk_drop_ext(c);
    free(c);
}

void wbuf_chunk_drop_ext(struct wbuf_chunk *c)
{
    if (c->ext_lender)
        c->ext_lender->release(c->ext_lender);
    else
        free(c->ext);
    c->ext = NULL;
    c->ext_lender = NULL;
    c->inplace = false;
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

uint64_t wbuf_front(struct wbuf *b, bool (*ok)(const struct wbuf_chunk *c, void *ctx), void *ctx,
                    unsigned max_chunks, uint64_t max_bytes)
{
    struct wbuf_chunk *front = NULL, *front_last = NULL;
    struct wbuf_chunk **pp = &b->head, *kept_last = NULL; /* the last chunk left in place */
    uint64_t records = 0, bytes = 0;
    unsigned n = 0;
    while (*pp && n < max_chunks && bytes < max_bytes) {
        struct wbuf_chunk *c = *pp;
        if (!ok(c, ctx)) {
            kept_last = c;
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        c->next = NULL;
        if (front_last)
            front_last->next = c;
        else
            front = c;
        front_last = c;
        records += c->count - c->taken;
        bytes += c->data.len - c->pos + c->ext_len;
        n++;
    }
    if (!front)
        return 0;
    /* Where the scan reached the end, the chunks left in place now end at kept_last. */
    if (!*pp)
        b->tail = kept_last;
    front_last->next = b->head;
    b->head = front;
    if (!b->tail)
        b->tail = front_last;
    return records;
}
