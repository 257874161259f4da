/* The prefetch buffer of one read: reply payloads that arrived from workers and wait for the
 * reader, with the slot accounting that bounds the read's memory. Pure: no locks, no threads;
 * the iterator guards it with its mutex (the loop thread fills it, the reader's thread takes from
 * it).
 *
 * A read has cap slots. A slot is used from the moment a request is sent (prefetch_reserve)
 * until the reader is done decoding the payload that answered it (prefetch_done), or until the
 * request turns out to bring nothing (prefetch_cancel). So at any time
 *
 *     reserved (requests in flight) + queued (payloads waiting) + held (being decoded) <= cap,
 *
 * and the memory of a read is at most cap reply payloads. Payloads are handed out in the order
 * they were filled. */
#ifndef SLUICE_CLIENT_PREFETCH_H
#define SLUICE_CLIENT_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bufpool;
struct payload_block;

/* One reply payload: count element records in the element codec's batch format. The bytes are
 * in a block that tensors may borrow (lent), or in one malloc'd block: block when it is set (data
 * then points into it: a received frame taken over whole), else data itself. Whoever holds the item
 * owns the block; prefetch_item_free gives it back to pool (when both are set) or frees it. */
struct prefetch_item {
    uint8_t *data;
    size_t len;
    uint32_t count;
    uint64_t task_id;
    uint64_t round; /* coordinated reads: the round of its element */
    void *block;
    size_t block_cap;
    struct bufpool *pool; /* outlives the item */
    /* Or, when lent is set: the bytes lie in that block (payload_block.h: of a shared region, or
     * an in-process worker's reply), of which the item holds one reference, dropped by
     * prefetch_item_free (block and pool are unset); tensors decoded from it may hold more. */
    struct payload_block *lent;
    /* Indices (ascending) of records in data the reader skips: elements received before, and
     * split end markers (distributed_epoch). Owned. */
    uint32_t *skip;
    uint32_t nskip;
};

/* Frees (or pools) the item's block and clears the item. Any thread. */
void prefetch_item_free(struct prefetch_item *item);

struct prefetch {
    struct prefetch_item *ring; /* cap entries; queued items at head, head + 1, ... (mod cap) */
    unsigned cap;
    unsigned head, queued;
    unsigned reserved, held;
    uint64_t bytes; /* payload bytes queued */
};

/* Sets up a buffer of cap >= 1 slots. Returns 0 or SLUICE_ERR_NOMEM. */
int prefetch_init(struct prefetch *p, unsigned cap);
/* Frees the queued payloads and the ring. Items taken out are the taker's to free. */
void prefetch_release(struct prefetch *p);

/* Slots not in use. */
unsigned prefetch_free_slots(const struct prefetch *p);

/* Reserves a slot for a request about to be sent. Returns false when every slot is in use. */
bool prefetch_reserve(struct prefetch *p);
/* The request of a reserved slot brought nothing (failed, or an empty reply): frees the slot. */
void prefetch_cancel(struct prefetch *p);
/* The request of a reserved slot brought item: it is queued and the buffer owns item.data. */
void prefetch_fill(struct prefetch *p, struct prefetch_item item);

/* Moves the oldest queued payload to *out (the caller owns out->data and holds its slot until
 * prefetch_done). Returns false when nothing is queued. */
bool prefetch_take(struct prefetch *p, struct prefetch_item *out);
/* The caller finished with a taken payload: frees its slot (not its data). */
void prefetch_done(struct prefetch *p);

/* distributed_epoch: the element count one request of a read asks for (GetElementsRequest
 * .max_elements). A job's workers hand its elements to whichever reader asks first, so a reader
 * that fetched by bytes alone would take thousands of small elements a request, far more than it
 * consumes, and leave nothing to the job's other readers (a trainer rank slow to start would find
 * the epoch gone). The cap requests of a read together ask for about horizon_ms of what it
 * consumed lately (rate, elements a second): at least min each, at most max. Pure. */
uint32_t prefetch_pace(uint64_t rate, unsigned cap, uint32_t horizon_ms, uint32_t min,
                       uint32_t max);

#endif
