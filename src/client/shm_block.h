/* A block of a shared region that a reader took (common/shm_region.h), shared by the payload it
 * holds and by the tensors decoded from it without a copy (codec_next_record with this lender):
 * the block goes back to the region (shm_region_release) when the last of them lets go, so a
 * tensor handed to the trainer keeps its bytes, and the region its mapping, for as long as it
 * lives, after its payload, its iterator and its connection are gone. Reference counts are
 * atomic: any thread. */
#ifndef SLUICE_CLIENT_SHM_BLOCK_H
#define SLUICE_CLIENT_SHM_BLOCK_H

#include "pipeline/element.h"

#include <stdatomic.h>
#include <stdint.h>

struct shm_region;

struct shm_block {
    struct pipe_lender lender; /* first member: a lender is its block */
    atomic_uint refs;
    struct shm_region *region;
    uint64_t pos;
};

/* Wraps the block taken at pos (shm_region_take; its reference to region passes to the result)
 * with one reference. Returns NULL when out of memory, the block still the caller's. */
struct shm_block *shm_block_new(struct shm_region *region, uint64_t pos);
/* Drops a reference; the last releases the block to its region. NULL is fine. */
void shm_block_unref(struct shm_block *b);

#endif
