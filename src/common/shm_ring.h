/* The ring of a shared-memory connection (docs/design.md "Shared-memory reads"): where a worker
 * puts an element payload in a region it shares with one reader, how the reader finds it, and
 * how the reader gives the space back. Pure: no system call, no lock, no clock; the shell
 * (shm_region.h) holds the memory and the locks.
 *
 * Positions are byte counters that only grow; a position p lies at offset p % size of the ring.
 * The writer (the worker) owns wpos, the reader owns rpos and head:
 *
 *     head <= rpos == wpos (once the reader has taken every block announced)
 *     wpos - head <= size
 *
 * A block is a SHM_RING_HDR-byte header followed by its payload, padded to SHM_RING_ALIGN bytes;
 * it never wraps: when it does not fit before the end of the ring, a pad header fills the rest
 * and the block starts at offset 0. When the ring is empty and at least SHM_RING_RESET blocks fit
 * before the writer's offset, the writer pads to the end too, so a reader that keeps up reuses
 * the same few pages instead of sweeping (and faulting in) the whole region; the pad then counts
 * as held until the block after it is released, which still leaves room for SHM_RING_RESET - 1
 * more such blocks. (Padding back whenever the ring is empty would let one held block and its
 * pad take the whole ring.) A large ring (SHM_RING_EARLY_MIN or more) that is not empty starts
 * over too when its held blocks lie in one piece and at least an eighth of it (and
 * SHM_RING_EARLY_BLOCKS blocks) is free before them, however much they hold: a consumer that
 * keeps a few elements (a DataLoader's prefetch, a reader's 8 replies of 32 MiB) never empties
 * the ring, and would otherwise sweep every page of a fresh region. The blocks these rules count
 * are of the largest size the reader may have asked for: the new one's, the largest placed before,
 * or a reply of SHM_RING_REPLY_BYTES, whichever is largest. The reader, which allows for a pad of
 * about a reply at the ring's end when it decides to ask for more (client/iterator_fetch.c
 * shm_full), does not see that pad coming; the room left in front holds every reply its requests on
 * the way can bring, so none falls back to the socket for it.
 *
 * The reader releases blocks in any order (a view may outlive later ones); head moves over the
 * released blocks at the front only, so the writer never overwrites a block still held. */
#ifndef SLUICE_COMMON_SHM_RING_H
#define SLUICE_COMMON_SHM_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Blocks and payloads start at multiples of this; a block's header takes one such unit. */
#define SHM_RING_ALIGN 64u
#define SHM_RING_HDR 64u
/* The smallest and largest ring a region may hold. */
#define SHM_RING_MIN ((uint64_t)1 << 20)
#define SHM_RING_MAX ((uint64_t)1 << 40)
/* The payload bytes of a reply a reader allows for when it decides to ask for more
 * (client/iterator_fetch.c shm_full: its requests' max_bytes, or its largest reply when
 * larger); the writer allows for as much when it starts the ring over. */
#define SHM_RING_REPLY_BYTES ((uint64_t)2 << 20)
/* An empty ring starts over at 0 once this many blocks of the next one's size (or of the
 * largest before it, or of SHM_RING_REPLY_BYTES, whichever is largest) fit before the writer. */
#define SHM_RING_RESET 4u
/* A ring that is not empty starts over once this fraction of it (1/N) is free before its held
 * blocks, they take at most as much, and SHM_RING_EARLY_BLOCKS blocks fit before them; only in a
 * ring of SHM_RING_EARLY_MIN bytes or more. The blocks must hold the replies a reader may have
 * on their way (at most SHM_RING_RESET, client/iterator_fetch.c shm_full): the simulation in
 * tests/unit/test_shm_ring.c loses a reply's room with 3 and none with 4; 6 leaves a margin. More
 * kept a loader's batches of 32 MiB from ever starting over early (16 of them are half a 1 GiB
 * ring). */
#define SHM_RING_EARLY_DIV 8u
#define SHM_RING_EARLY_BLOCKS 6u
#define SHM_RING_EARLY_MIN ((uint64_t)256 << 20)

/* A header's first word: a magic number in the high bits and the kind in the low byte. */
#define SHM_RING_MAGIC 0x534c5348u /* "SLSH" */
enum { SHM_RING_DATA = 1, SHM_RING_PAD = 2, SHM_RING_EXTERN = 3 };
/* An SHM_RING_EXTERN block announces a payload that lies in the region's arena (shm_arena.h)
 * instead of following its header: the header's len is the payload's bytes and the word after
 * it (bytes 16-23) the payload's offset in the arena. The block is placed as one of
 * SHM_RING_EXTERN_LEN payload bytes, which it never writes. */
#define SHM_RING_EXTERN_LEN 1u

/* Checks a ring size: a multiple of SHM_RING_ALIGN from SHM_RING_MIN to SHM_RING_MAX. Returns 0
 * or SLUICE_ERR_INVALID. */
int shm_ring_check_size(uint64_t size);

/* The ring size a reader asks of a worker: 0 (TCP) when the worker is not on the reader's host
 * or shared memory is turned off, else asked, or default_size when asked is 0. */
uint64_t shm_ring_choose(bool same_host, bool off, uint64_t asked, uint64_t default_size);

/* Where the writer puts the next block. */
struct shm_ring_place {
    uint64_t pad;   /* bytes of the pad block before it (0: none), at wpos's offset */
    uint64_t off;   /* the block's offset in the ring (its header; the payload follows) */
    uint64_t total; /* pad + the block's bytes: wpos advances by this */
};

/* Places a block of len payload bytes (len >= 1) in a ring of size bytes whose writer is at wpos
 * and whose reader has released everything before head; big is the largest block (header and
 * padding included, shm_ring_place.total less its pad) placed in the ring before, 0 for none.
 * Returns 0 and *out; SLUICE_ERR_LIMIT when there is no room until the reader releases more;
 * SLUICE_ERR_TOO_LARGE when the block can never fit; SLUICE_ERR_PROTOCOL when head is not
 * within [wpos - size, wpos]. */
int shm_ring_place(uint64_t size, uint64_t wpos, uint64_t head, uint64_t len, uint64_t big,
                   struct shm_ring_place *out);

/* Whether the head a reader published is possible: not behind the one seen before (prev) and
 * not past the writer (wpos). */
bool shm_ring_head_ok(uint64_t wpos, uint64_t prev, uint64_t head);

/* Writes the header of a block (kind SHM_RING_DATA or SHM_RING_PAD; len: the payload bytes, or
 * for a pad the bytes it covers, header included) into hdr (SHM_RING_HDR bytes). */
void shm_ring_put_header(uint8_t *hdr, unsigned kind, uint64_t len);
/* Writes the header of an SHM_RING_EXTERN block: len bytes at offset at of the arena. */
void shm_ring_put_extern(uint8_t *hdr, uint64_t at, uint64_t len);

/* A block the reader found. */
struct shm_ring_block {
    uint64_t start; /* its position, any pad before it included */
    uint64_t off;   /* the payload's offset in the ring (ext: in the arena, unchecked) */
    uint64_t len;   /* payload bytes */
    uint64_t next;  /* the position after it */
    bool ext;       /* an SHM_RING_EXTERN block: the payload lies in the arena */
};

/* Reads the block at rpos in ring (size bytes) whose reader's head is head. Each header is read
 * once into local memory before it is checked, so a writer changing it meanwhile cannot make the
 * result point outside the ring. Returns 0 and *out, or SLUICE_ERR_PROTOCOL when the headers do
 * not describe a block that lies in the ring within size bytes after head. */
int shm_ring_read(const uint8_t *ring, uint64_t size, uint64_t rpos, uint64_t head,
                  struct shm_ring_block *out);

/* The blocks a reader holds, in the order received, and how far head has moved. */
struct shm_held {
    uint64_t start, end;
    uint64_t tag; /* the caller's (shm_tracker_add) */
    bool released;
};

struct shm_tracker {
    struct shm_held *v; /* a ring of cap entries; n of them from first on are held */
    size_t cap, first, n;
    uint64_t head; /* everything before it is released */
    uint64_t tail; /* the end of the last block added (== head when none is held) */
};

/* An empty tracker at position 0. */
void shm_tracker_init(struct shm_tracker *t);
void shm_tracker_release_all(struct shm_tracker *t);

/* Notes a block [start, end) received, with a tag of the caller's; start must be the tail and end
 * after it. Holds at most max entries (the ring's size / SHM_RING_ALIGN). Returns 0,
 * SLUICE_ERR_PROTOCOL when the block does not follow the tail or max are held, or
 * SLUICE_ERR_NOMEM. */
int shm_tracker_add(struct shm_tracker *t, uint64_t start, uint64_t end, uint64_t tag, size_t max);

/* Releases the held block starting at start and moves head past the released blocks at the
 * front; *tag (when tag is not NULL) gets the block's tag. Returns 0, or SLUICE_ERR_INVALID when
 * no held block starts there (never handed out, or released already). */
int shm_tracker_release(struct shm_tracker *t, uint64_t start, uint64_t *tag);

/* The 8 bytes at p as a little-endian integer, and back: the layout of the ring's headers and of
 * the socket's hello (shm_sock.h). */
uint64_t shm_get_u64(const uint8_t *p);
void shm_put_u64(uint8_t *p, uint64_t v);

#endif
