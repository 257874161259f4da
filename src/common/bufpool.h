/* A bounded stock of large heap blocks kept for reuse, so that a stream of large frames does not
 * allocate (and fault in fresh pages for) a new block for each one, and a block freed on one
 * thread can serve an allocation on another.
 *
 * Every block is an ordinary malloc'd block: one may be handed back to the pool that did not come
 * from it, and one taken from the pool may simply be freed. The pool keeps at most max_bytes of
 * blocks, each no larger than max_block; anything beyond is freed when given back.
 *
 * Threading: every function may be called from any thread; a mutex guards the stock. The pool
 * must outlive every call that gives a block back to it. */
#ifndef SLUICE_COMMON_BUFPOOL_H
#define SLUICE_COMMON_BUFPOOL_H

#include <stddef.h>

struct bufpool;

/* Creates an empty pool. Returns 0 or SLUICE_ERR_NOMEM. */
int bufpool_new(size_t max_bytes, size_t max_block, struct bufpool **out);
/* Frees the pool and every block it keeps. NULL is fine. */
void bufpool_free(struct bufpool *p);

/* Returns a block of at least len bytes, *cap receiving its size: the smallest kept block that
 * is large enough and not more than twice len (the most recently given back of those), else a
 * new one of exactly len bytes. NULL when out of memory. The caller owns the block. */
void *bufpool_get(struct bufpool *p, size_t len, size_t *cap);

/* Gives a block of cap bytes back: the pool keeps it if it fits its bounds, evicting older
 * blocks as needed, and frees it otherwise. NULL is fine. */
void bufpool_put(struct bufpool *p, void *block, size_t cap);

/* Blocks and bytes kept now (for tests and status). */
size_t bufpool_count(struct bufpool *p);
size_t bufpool_bytes(struct bufpool *p);

#endif
