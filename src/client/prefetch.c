#include "prefetch.h"

#include "common/bufpool.h"
#include "payload_block.h"
#include "common/error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int prefetch_init(struct prefetch *p, unsigned cap)
{
    assert(cap >= 1);
    memset(p, 0, sizeof *p);
    p->ring = calloc(cap, sizeof *p->ring);
    if (!p->ring)
        return SLUICE_ERR_NOMEM;
    p->cap = cap;
    return 0;
}

void prefetch_item_free(struct prefetch_item *item)
{
    if (item->lent)
        payload_block_unref(item->lent);
    else if (item->block && item->pool)
        bufpool_put(item->pool, item->block, item->block_cap);
    else
        free(item->block ? item->block : item->data);
    free(item->skip);
    memset(item, 0, sizeof *item);
}

void prefetch_release(struct prefetch *p)
{
    for (unsigned k = 0; k < p->queued; k++)
        prefetch_item_free(&p->ring[(p->head + k) % p->cap]);
    free(p->ring);
    memset(p, 0, sizeof *p);
}

unsigned prefetch_free_slots(const struct prefetch *p)
{
    return p->cap - p->reserved - p->queued - p->held;
}

bool prefetch_reserve(struct prefetch *p)
{
    if (prefetch_free_slots(p) == 0)
        return false;
    p->reserved++;
    return true;
}

void prefetch_cancel(struct prefetch *p)
{
    assert(p->reserved > 0);
    p->reserved--;
}

void prefetch_fill(struct prefetch *p, struct prefetch_item item)
{
    assert(p->reserved > 0 && p->queued < p->cap);
    p->reserved--;
    p->ring[(p->head + p->queued) % p->cap] = item;
    p->queued++;
    p->bytes += item.len;
}

bool prefetch_take(struct prefetch *p, struct prefetch_item *out)
{
    if (p->queued == 0)
        return false;
    *out = p->ring[p->head];
    memset(&p->ring[p->head], 0, sizeof p->ring[p->head]);
    p->head = (p->head + 1) % p->cap;
    p->queued--;
    p->held++;
    p->bytes -= out->len;
    return true;
}

void prefetch_done(struct prefetch *p)
{
    assert(p->held > 0);
    p->held--;
}

uint32_t prefetch_pace(uint64_t rate, unsigned cap, uint32_t horizon_ms, uint32_t min, uint32_t max)
{
    assert(cap >= 1 && min <= max);
    /* rate * horizon_ms / 1000 / cap without overflow: rates beyond 2^44 a second are clamped. */
    if (rate > ((uint64_t)1 << 44))
        rate = (uint64_t)1 << 44;
    uint64_t each = rate * horizon_ms / 1000 / cap;
    return each < min ? min : each > max ? max : (uint32_t)each;
}
