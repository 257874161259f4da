#include "shm_ring.h"

#include "sluice/sluice.h"

#include <stdlib.h>
#include <string.h>

static uint64_t round_up(uint64_t n)
{
    return (n + SHM_RING_ALIGN - 1) / SHM_RING_ALIGN * SHM_RING_ALIGN;
}

int shm_ring_check_size(uint64_t size)
{
    if (size < SHM_RING_MIN || size > SHM_RING_MAX || size % SHM_RING_ALIGN != 0)
        return SLUICE_ERR_INVALID;
    return 0;
}

uint64_t shm_ring_choose(bool same_host, bool off, uint64_t asked, uint64_t default_size)
{
    if (!same_host || off)
        return 0;
    return asked ? asked : default_size;
}

bool shm_ring_head_ok(uint64_t wpos, uint64_t prev, uint64_t head)
{
    return head >= prev && head <= wpos;
}

int shm_ring_place(uint64_t size, uint64_t wpos, uint64_t head, uint64_t len, uint64_t big,
                   struct shm_ring_place *out)
{
    if (head > wpos || wpos - head > size)
        return SLUICE_ERR_PROTOCOL;
    if (len == 0 || len > size - SHM_RING_HDR)
        return SLUICE_ERR_TOO_LARGE;
    uint64_t need = round_up(SHM_RING_HDR + len);
    /* The block size the rules below allow for: the largest of this one, the largest placed
     * before and the reply a reader asks for, as the reader allows for them (shm_full). Counting
     * this block alone would let a small one start the ring over with room for a few of its
     * size only, and a larger reply already asked for miss its room (the socket then carries
     * it). */
    uint64_t unit = round_up(SHM_RING_HDR + SHM_RING_REPLY_BYTES);
    if (big > unit)
        unit = big;
    if (need > unit)
        unit = need;
    uint64_t off = wpos % size;
    uint64_t room = size - (wpos - head);
    /* A block that does not fit before the end starts over at 0. So does one written into an
     * empty ring that far enough along (SHM_RING_RESET blocks of unit bytes fit before the
     * writer): a reader that keeps up keeps reusing the same pages, and at least
     * SHM_RING_RESET - 1 more such blocks fit behind it before the reader releases any. A small
     * ring (under SHM_RING_RESET units) never starts over early; it is swept whole, which costs
     * little. */
    /* A large ring not empty: once its held blocks, in one piece, leave an eighth of it (and
     * SHM_RING_EARLY_BLOCKS units) free before them, however much they hold: a reader behind with
     * more than four replies of 32 MiB held more than an eighth of a 1 GiB ring, and bounding
     * what they hold (by an eighth, once) kept it from ever starting over early, so that it was
     * swept whole and every page of it faulted in. */
    uint64_t held = wpos - head;
    uint64_t eighth = size / SHM_RING_EARLY_DIV;
    uint64_t early = eighth > SHM_RING_EARLY_BLOCKS * unit ? eighth : SHM_RING_EARLY_BLOCKS * unit;
    bool restart = size >= SHM_RING_EARLY_MIN && held > 0 && held <= off && off - held >= early;
    uint64_t pad = 0;
    if (off + need > size || (head == wpos && off >= SHM_RING_RESET * unit) || restart)
        pad = size - off;
    if (pad + need > room)
        return SLUICE_ERR_LIMIT;
    *out = (struct shm_ring_place){.pad = pad, .off = pad ? 0 : off, .total = pad + need};
    return 0;
}

void shm_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t shm_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void shm_ring_put_header(uint8_t *hdr, unsigned kind, uint64_t len)
{
    memset(hdr, 0, SHM_RING_HDR);
    shm_put_u64(hdr, (uint64_t)SHM_RING_MAGIC << 32 | kind);
    shm_put_u64(hdr + 8, len);
}

void shm_ring_put_extern(uint8_t *hdr, uint64_t at, uint64_t len)
{
    shm_ring_put_header(hdr, SHM_RING_EXTERN, len);
    shm_put_u64(hdr + 16, at);
}

/* Copies the header at off out of the ring and splits it; false when the magic is wrong. */
static bool get_header(const uint8_t *ring, uint64_t off, unsigned *kind, uint64_t *len,
                       uint64_t *at)
{
    uint8_t h[24];
    memcpy(h, ring + off, sizeof h);
    uint64_t w = shm_get_u64(h);
    if (w >> 32 != SHM_RING_MAGIC)
        return false;
    *kind = (unsigned)(w & 0xffffffffu);
    *len = shm_get_u64(h + 8);
    *at = shm_get_u64(h + 16);
    return true;
}

int shm_ring_read(const uint8_t *ring, uint64_t size, uint64_t rpos, uint64_t head,
                  struct shm_ring_block *out)
{
    if (rpos < head || rpos - head > size || rpos % SHM_RING_ALIGN != 0)
        return SLUICE_ERR_PROTOCOL;
    uint64_t pos = rpos;
    uint64_t off = pos % size;
    unsigned kind;
    uint64_t len, at;
    if (!get_header(ring, off, &kind, &len, &at))
        return SLUICE_ERR_PROTOCOL;
    if (kind == SHM_RING_PAD) {
        /* A pad covers the rest of the ring exactly, header included. */
        if (len != size - off || off == 0)
            return SLUICE_ERR_PROTOCOL;
        pos += len;
        off = 0;
        if (!get_header(ring, off, &kind, &len, &at))
            return SLUICE_ERR_PROTOCOL;
    }
    bool ext = kind == SHM_RING_EXTERN;
    if ((kind != SHM_RING_DATA && !ext) || len == 0 || (!ext && len > size - SHM_RING_HDR))
        return SLUICE_ERR_PROTOCOL;
    uint64_t need = round_up(SHM_RING_HDR + (ext ? SHM_RING_EXTERN_LEN : len));
    if (off + need > size || pos + need - head > size)
        return SLUICE_ERR_PROTOCOL;
    *out = (struct shm_ring_block){.start = rpos,
                                   .off = ext ? at : off + SHM_RING_HDR,
                                   .len = len,
                                   .next = pos + need,
                                   .ext = ext};
    return 0;
}

void shm_tracker_init(struct shm_tracker *t)
{
    *t = (struct shm_tracker){0};
}

void shm_tracker_release_all(struct shm_tracker *t)
{
    free(t->v);
    *t = (struct shm_tracker){0};
}

static struct shm_held *entry(const struct shm_tracker *t, size_t i)
{
    return &t->v[(t->first + i) % t->cap];
}

int shm_tracker_add(struct shm_tracker *t, uint64_t start, uint64_t end, uint64_t tag, size_t max)
{
    if (start != t->tail || end <= start || t->n >= max)
        return SLUICE_ERR_PROTOCOL;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        struct shm_held *v = malloc(cap * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        for (size_t i = 0; i < t->n; i++)
            v[i] = *entry(t, i);
        free(t->v);
        t->v = v;
        t->cap = cap;
        t->first = 0;
    }
    *entry(t, t->n) = (struct shm_held){.start = start, .end = end, .tag = tag};
    t->n++;
    t->tail = end;
    return 0;
}

int shm_tracker_release(struct shm_tracker *t, uint64_t start, uint64_t *tag)
{
    /* Blocks are usually released in order: the one sought is near the front. */
    size_t i = 0;
    while (i < t->n && entry(t, i)->start != start)
        i++;
    if (i == t->n || entry(t, i)->released)
        return SLUICE_ERR_INVALID;
    entry(t, i)->released = true;
    if (tag)
        *tag = entry(t, i)->tag;
    while (t->n > 0 && entry(t, 0)->released) {
        t->head = entry(t, 0)->end;
        t->first = (t->first + 1) % t->cap;
        t->n--;
    }
    return 0;
}
