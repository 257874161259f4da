#include "shm_block.h"

#include "common/shm_region.h"

#include <stdlib.h>

static void block_hold(struct pipe_lender *l)
{
    struct shm_block *b = (struct shm_block *)l;
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

static void block_release(struct pipe_lender *l)
{
    shm_block_unref((struct shm_block *)l);
}

static int block_locate(struct pipe_lender *l, const void *p, size_t len,
                        struct sluice_shm_place *out)
{
    const struct shm_region *r = ((struct shm_block *)l)->region;
    uint64_t off;
    if (shm_region_fd(r) < 0 || shm_region_offset_of(r, p, len, &off) != 0)
        return SLUICE_ERR_NOT_FOUND;
    *out = (struct sluice_shm_place){.fd = shm_region_fd(r),
                                     .offset = off,
                                     .region_len = shm_region_file_len(r),
                                     .region_id = shm_region_id(r)};
    return 0;
}

struct shm_block *shm_block_new(struct shm_region *region, uint64_t pos)
{
    struct shm_block *b = malloc(sizeof *b);
    if (!b)
        return NULL;
    b->lender.hold = block_hold;
    b->lender.release = block_release;
    b->lender.locate = block_locate;
    atomic_init(&b->refs, 1);
    b->region = region;
    b->pos = pos;
    return b;
}

void shm_block_unref(struct shm_block *b)
{
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    shm_region_release(b->region, b->pos);
    free(b);
}
