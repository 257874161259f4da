/* The arena of a shared-memory region (docs/design.md "Shared-memory reads"): where a worker
 * builds large values of the elements it will send to the region's reader, so that a reply is
 * announced in place instead of copied into the ring. Pure: no system call, no lock; the shell
 * (shm_region.h) holds the memory, the lock and the reader's release bits.
 *
 * The arena is n granules of SHM_ARENA_GRANULE bytes. A block is a run of granules, named by its
 * first one. Its references: one for the worker (the tensor or chunk that holds it), and one
 * more while it is lent to the reader (shm_arena_lend). The reader gives a lent block back by
 * setting the bit of its first granule in the release bitmap of the region's control page;
 * shm_arena_collect trusts a bit only for a block that is lent now, so a reader that sets
 * others, or sets one twice, changes nothing. A block is free again once both references are
 * gone. */
#ifndef SLUICE_COMMON_SHM_ARENA_H
#define SLUICE_COMMON_SHM_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_ARENA_GRANULE ((uint64_t)64 << 10)
/* The release bitmap lies in the region's control page after the head: this many granules at
 * most, so an arena holds at most SHM_ARENA_MAX_GRANULES * SHM_ARENA_GRANULE bytes (1.94 GiB). */
#define SHM_ARENA_MAX_GRANULES 31744u
/* A region of less than this has no arena: its ring alone. */
#define SHM_ARENA_REGION_MIN ((uint64_t)64 << 20)

/* How a region of total bytes (shm_ring_check_size) is split: the arena takes half of it in
 * whole granules (at most SHM_ARENA_MAX_GRANULES), none below SHM_ARENA_REGION_MIN; the ring the
 * rest. */
void shm_arena_split(uint64_t total, uint64_t *ring, uint64_t *arena);

struct shm_arena {
    uint32_t n;     /* granules */
    uint32_t used;  /* granules in blocks */
    uint32_t *len;  /* per granule: the block's granules when one starts there, else 0 */
    uint8_t *refs;  /* per granule: the block's references when one starts there */
    uint8_t *lent;  /* per granule: whether the block starting there is lent */
    uint64_t *busy; /* one bit per granule in a block */
};

/* An arena of n granules (at most SHM_ARENA_MAX_GRANULES). Returns 0 or SLUICE_ERR_NOMEM. */
int shm_arena_init(struct shm_arena *a, uint32_t n);
void shm_arena_destroy(struct shm_arena *a);

/* Takes a block of at least bytes (>= 1), with the worker's reference: the first run of free
 * granules long enough, so that the same few blocks are used over and over while the reader keeps
 * up (their pages stay mapped and warm; a sweep over the whole arena faulted in page after page,
 * and the pages it left behind went cold). Returns its first granule, or -1 when no run of free
 * granules is long enough. */
int64_t shm_arena_alloc(struct shm_arena *a, uint64_t bytes);

/* The block that starts at granule g: its granules, or 0 when none starts there. */
uint32_t shm_arena_block(const struct shm_arena *a, uint32_t g);

/* Drops one reference of the block starting at g (which must be one); the last frees it. */
void shm_arena_unref(struct shm_arena *a, uint32_t g);

/* Lends the block starting at g to the reader (one more reference) for bytes [at, at + len) of
 * the arena. Returns false, changing nothing, when no block starts at g, it is lent already, or
 * the range does not start in its first granule and lie within it. */
bool shm_arena_lend(struct shm_arena *a, uint32_t g, uint64_t at, uint64_t len);

/* Applies one word of the release bitmap (bits, for granules 64 * word ...): every bit of a block
 * lent now gives it back; others are ignored. Returns the blocks given back. */
unsigned shm_arena_collect(struct shm_arena *a, uint32_t word, uint64_t bits);

#endif
