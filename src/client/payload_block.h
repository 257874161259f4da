/* A received payload's block, shared by the payload's prefetch item and by the tensors decoded
 * from it without a copy (codec_next_record with this lender): either a block of a shared region
 * that a reader took (common/shm_region.h), which goes back to the region (shm_region_release),
 * or a block of the process's memory that an in-process worker filled (common/inproc.h), which
 * goes back to its pool (bufpool_put). Either happens when the last of them lets go, so a tensor
 * handed to the trainer keeps its bytes (and the region its mapping) for as long as it lives,
 * after its payload, its iterator and its connection are gone. Reference counts are atomic: any
 * thread. */
#ifndef SLUICE_CLIENT_PAYLOAD_BLOCK_H
#define SLUICE_CLIENT_PAYLOAD_BLOCK_H

#include "pipeline/element.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct bufpool;
struct shm_region;

struct payload_block {
    struct pipe_lender lender; /* first member: a lender is its block */
    atomic_uint refs;
    /* A shared region's block at pos, or else (region NULL) mem of cap bytes, given back to pool
     * (which must outlive every block: the process's, inproc_pool) or freed without one. */
    struct shm_region *region;
    uint64_t pos;
    void *mem;
    size_t cap;
    struct bufpool *pool;
};

/* Wraps the block taken at pos (shm_region_take; its reference to region passes to the result)
 * with one reference. Returns NULL when out of memory, the block still the caller's. */
struct payload_block *payload_block_shm(struct shm_region *region, uint64_t pos);
/* Wraps mem (cap bytes, malloc'd) with one reference. Only a component of at least a quarter of
 * cap bytes (and CODEC_LEND_MIN) is lent from it, so that a tensor kept keeps at most four times
 * its own bytes alive. Returns NULL when out of memory, mem still the caller's. */
struct payload_block *payload_block_heap(void *mem, size_t cap, struct bufpool *pool);
/* Drops a reference; the last gives the block back. NULL is fine. */
void payload_block_unref(struct payload_block *b);

#endif
