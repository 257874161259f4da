#include "payload_block.h"

#include "common/bufpool.h"
#include "common/shm_region.h"

#include <stdlib.h>

static void block_hold(struct pipe_lender *l)
{
    struct payload_block *b = (struct payload_block *)l;
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

static void block_release(struct pipe_lender *l)
{
    payload_block_unref((struct payload_block *)l);
}

/* Only a shared region's bytes can be mapped by another process. */
static int block_locate(struct pipe_lender *l, const void *p, size_t len,
                        struct sluice_shm_place *out)
{
    const struct shm_region *r = ((struct payload_block *)l)->region;
    uint64_t off;
    if (!r || shm_region_fd(r) < 0 || shm_region_offset_of(r, p, len, &off) != 0)
        return SLUICE_ERR_NOT_FOUND;
    *out = (struct sluice_shm_place){.fd = shm_region_fd(r),
                                     .offset = off,
                                     .region_len = shm_region_file_len(r),
                                     .region_id = shm_region_id(r)};
    return 0;
}

static struct payload_block *block_new(void)
{
    struct payload_block *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->lender.hold = block_hold;
    b->lender.release = block_release;
    b->lender.locate = block_locate;
    atomic_init(&b->refs, 1);
    return b;
}

struct payload_block *payload_block_shm(struct shm_region *region, uint64_t pos)
{
    struct payload_block *b = block_new();
    if (b) {
        b->region = region;
        b->pos = pos;
    }
    return b;
}

struct payload_block *payload_block_heap(void *mem, size_t cap, struct bufpool *pool)
{
    struct payload_block *b = block_new();
    if (b) {
        b->mem = mem;
        b->cap = cap;
        b->pool = pool;
        b->lender.lend_min = cap / 4;
    }
    return b;
}

void payload_block_unref(struct payload_block *b)
{
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->region)
        shm_region_release(b->region, b->pos);
    else if (b->pool)
        bufpool_put(b->pool, b->mem, b->cap);
    else
        free(b->mem);
    free(b);
}
