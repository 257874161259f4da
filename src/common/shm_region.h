/* A memory region one reader and one worker share (docs/design.md "Shared-memory reads"): a
 * sealed memfd, one page of control (the reader's head and the arena's release bits) followed by
 * the ring of shm_ring.h and, in a region of SHM_ARENA_REGION_MIN bytes or more, the arena of
 * shm_arena.h (shm_arena_split says how the region's bytes are shared between them).
 *
 * The reader creates it (shm_region_create) and sends the descriptor to the worker, which checks
 * and maps it (shm_region_attach). The worker writes blocks (shm_region_write) and the reader
 * takes them in the same order (shm_region_take), then releases each, in any order and from any
 * thread, when its elements are freed (shm_region_release), which moves the shared head.
 *
 * No name exists in any file system: the memory goes when the last mapping does, so a killed
 * process leaks nothing. The descriptor returned by create is close-on-exec.
 *
 * References: create and attach return one reference; every block taken holds one more until
 * released; the last shm_region_unref unmaps. Threads: write is for one thread (the worker's
 * loop); take for one thread (the reader's loop); release and unref from any thread. */
#ifndef SLUICE_COMMON_SHM_REGION_H
#define SLUICE_COMMON_SHM_REGION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* The default ring size of a reader's region (--shm-bytes). */
#define SHM_REGION_DEFAULT ((uint64_t)1 << 30)
/* The control page before the ring. */
#define SHM_REGION_CONTROL 4096u

struct shm_region;

/* Creates a region of size bytes (shm_ring_check_size; ring and arena), mapped here. Returns 0 with
 * *out (one reference) and *fd (the caller sends and closes it), SLUICE_ERR_INVALID for a bad
 * size, or a negative errno. */
int shm_region_create(uint64_t size, struct shm_region **out, int *fd);

/* Maps a region received from a reader that announced size bytes: checks that fd is
 * sealed against shrinking and growing and has exactly that size. Does not take fd (the caller
 * closes it). Returns 0 and *out, SLUICE_ERR_PROTOCOL with the reason in err for a descriptor that
 * is not such a region, or a negative errno. */
int shm_region_attach(int fd, uint64_t size, struct shm_region **out, char *err, size_t errlen);

void shm_region_ref(struct shm_region *r);
/* Drops a reference; the last unmaps. NULL is fine. */
void shm_region_unref(struct shm_region *r);

/* The worker's side: copies the n pieces (len bytes together) into the ring as one block.
 * Returns 0; SLUICE_ERR_LIMIT when the reader has not released enough space for it now (nothing
 * was written); SLUICE_ERR_TOO_LARGE when it can never fit; SLUICE_ERR_PROTOCOL when the reader's
 * head is impossible (the connection must end). */
int shm_region_write(struct shm_region *r, const struct iovec *pieces, unsigned n, size_t len);

/* The worker's side, the arena: takes a block of at least bytes for a value it will build there,
 * with one reference of the block and one of the region. Returns 0 with *block (the block's
 * start, SHM_ARENA_GRANULE-aligned in the region) and *cap (its bytes), or SLUICE_ERR_LIMIT (no
 * arena, no room now, or shm_region_arena_stop was called). Any thread. */
int shm_region_arena_alloc(struct shm_region *r, uint64_t bytes, uint8_t **block, uint64_t *cap);
/* Drops the references a block from shm_region_arena_alloc holds. Any thread. */
void shm_region_arena_put(struct shm_region *r, const uint8_t *block);
/* No more blocks are handed out (the connection ended); those out stay valid. And whether that
 * happened. */
void shm_region_arena_stop(struct shm_region *r);
bool shm_region_arena_stopped(struct shm_region *r);
/* Whether the len bytes at p lie in the arena, and its size (0: none). */
bool shm_region_in_arena(const struct shm_region *r, const void *p, size_t len);
uint64_t shm_region_arena_size(const struct shm_region *r);
/* The worker's side: announces the len bytes at p, in the first granule of a block of the arena
 * and within it, as the next block's payload, without copying them: the block is lent to the
 * reader (one more reference) until the reader gives it back. Returns 0; SLUICE_ERR_NOT_FOUND
 * when they are not in such a block or it is lent already; SLUICE_ERR_LIMIT when the ring has
 * no room now; SLUICE_ERR_PROTOCOL as shm_region_write. */
int shm_region_write_extern(struct shm_region *r, const uint8_t *p, size_t len);

/* The reader's side: takes the next block. Returns 0 with *data (len bytes in the mapping) and
 * *pos (the block's position, for shm_region_release), adding a reference; or
 * SLUICE_ERR_PROTOCOL when the ring does not hold a valid block there, SLUICE_ERR_NOMEM. */
int shm_region_take(struct shm_region *r, uint8_t **data, uint64_t *len, uint64_t *pos);

/* Releases the block taken at pos (and gives the arena's block back, for a payload there) and
 * drops its reference. A position never taken or released
 * twice is a programmer error (asserted) since only this process's own reader calls it. In a
 * forked child (a view of the parent's inherited and freed there) it only drops the reference:
 * the space is the parent's to release. */
void shm_region_release(struct shm_region *r, uint64_t pos);

/* The reader's side (a region it created): the region's descriptor, which the region keeps
 * open until its last reference goes (-1 on the worker's side); its id, unique among the regions
 * of this process; and where the len bytes at p lie in it: their offset in the memory file, or
 * SLUICE_ERR_NOT_FOUND when they are not inside the mapping. */
int shm_region_fd(const struct shm_region *r);
uint64_t shm_region_id(const struct shm_region *r);
uint64_t shm_region_file_len(const struct shm_region *r);
int shm_region_offset_of(const struct shm_region *r, const void *p, size_t len, uint64_t *offset);

/* The ring's size, and (the reader's side) the ring's bytes taken and not yet released. */
uint64_t shm_region_size(const struct shm_region *r);
uint64_t shm_region_held(struct shm_region *r);

#endif
