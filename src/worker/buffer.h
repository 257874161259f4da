/* A task's element buffer as plain data: a FIFO of chunks of encoded element records, with the
 * accounting producers are throttled by and the rule that cuts a GetElements reply out of it.
 * Pure: no locks, no threads, no clock; task.c wraps it in a mutex.
 *
 * A chunk is a run of whole records in the element codec's batch format (pipeline/codec.h):
 * each record is preceded by its varint length, so any run of whole records is itself a valid
 * reply payload. Producers fill a chunk privately, then push it; from then on only the consumer
 * side (wbuf_take, wbuf_take_whole) reads or changes it. A reply that fits in the head chunk is a
 * pointer into that chunk (no copy); one that spans chunks is gathered into a scratch buffer,
 * unless it is taken as whole chunks, whose bytes are then written from where they lie.
 *
 * An external chunk holds one record whose bulk (the values of one large tensor) stays in the
 * block the producer built the element in, instead of being copied into data: the record is
 * data.p[0, ext_at), then ext[0, ext_len), then data.p[ext_at, data.len). Such a chunk is only
 * ever taken whole.
 *
 * Invariants: bytes and count are the sums over queued chunks of their untaken bytes (external
 * bytes included) and records, chunks is their number; every queued chunk has at least one
 * untaken record. */
#ifndef SLUICE_WORKER_BUFFER_H
#define SLUICE_WORKER_BUFFER_H

#include "pipeline/format.h"

#include "common/varint.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wbuf_chunk {
    struct wbuf_chunk *next;
    struct pipe_buf data; /* records data.p[0, data.len); the chunk owns data.p */
    size_t pos;           /* bytes taken from the front */
    uint32_t count;       /* records in data */
    uint32_t taken;       /* records taken from the front */
    uint64_t born_ns;     /* monotonic time of its first record (set by the producer) */
    /* distributed_epoch: the split whose records it holds (a producer's chunk holds one split's),
     * and whether the split's end marker is among them. */
    bool tagged, ends;
    uint64_t seq;
    /* External chunks only (ext != NULL; count is 1): the block of ext_cap bytes (from malloc,
     * owned by the chunk) whose first ext_len bytes belong at offset ext_at of data. */
    uint8_t *ext;
    size_t ext_len, ext_cap, ext_at;
    /* When set, ext is not the chunk's to free but on loan from ext_lender (a reader's arena,
     * worker/task.h), whose reference the chunk holds. */
    struct pipe_lender *ext_lender;
    /* The whole record also lies in one piece around ext: data.p[0, ext_at) right before it and
     * data.p[ext_at, data.len) right after its ext_len bytes (data keeps its copy). */
    bool inplace;
};

/* One contiguous piece of a reply written from chunks in place. */
struct wbuf_piece {
    const uint8_t *p;
    size_t len;
};

struct wbuf {
    struct wbuf_chunk *head, *tail;
    uint64_t bytes;  /* untaken record bytes, length prefixes included */
    uint64_t count;  /* untaken records */
    uint64_t chunks; /* queued chunks */
};

/* The result of one wbuf_take or wbuf_take_whole. For wbuf_take, payload/len is the reply
 * payload: it points either into a chunk or into the scratch buffer passed to wbuf_take, and
 * stays valid until the chunks in spent are recycled or freed and scratch is next used. For
 * wbuf_take_whole, payload is NULL and the reply is the bytes of the chunks in spent, in order,
 * each from its pos on (see wbuf_chunk_pieces); len is their total. spent lists the chunks the
 * take used up; they are no longer in the buffer and belong to the caller. */
struct wbuf_take {
    const uint8_t *payload;
    size_t len;
    uint32_t count;
    bool copied; /* payload is in scratch */
    bool whole;  /* a wbuf_take_whole: the reply is the chunks in spent */
    struct wbuf_chunk *spent;
};

void wbuf_init(struct wbuf *b);

/* Appends chunk c (which must hold at least one record and have pos == taken == 0) at the tail.
 * The buffer owns c until a take hands it back in spent. */
void wbuf_push(struct wbuf *b, struct wbuf_chunk *c);

/* Takes the oldest records, in order: at most max_elements records (>= 1) and at most
 * max_bytes bytes of records, but always at least one record when the buffer is not empty, even
 * one larger than max_bytes. The records of one chunk are returned in place; the take continues
 * into the next chunks (gathering into scratch) only while what it has is less than half of
 * both limits, so large replies are never copied here. Returns 0 (out->count is 0 for an empty
 * buffer), SLUICE_ERR_NOMEM when scratch cannot grow (the buffer is then unchanged), or
 * SLUICE_ERR_CORRUPT when a chunk's record framing is inconsistent with its count. */
int wbuf_take(struct wbuf *b, uint32_t max_elements, uint64_t max_bytes, struct pipe_buf *scratch,
              struct wbuf_take *out);

/* Takes whole chunks from the head, for a reply written from them without copying: the head
 * chunk's untaken records and those of the chunks after it, as long as the reply stays within
 * max_elements records, max_bytes bytes and max_chunks chunks. When the head chunk alone is over
 * a limit nothing is taken (out->count is 0), and the caller falls back to wbuf_take; external
 * chunks are always taken this way. A chunk whose record lies whole in a reader's arena
 * (inplace) goes alone, so that its reply is announced where it lies: at the head it is the whole
 * take, and a take of chunks before it stops there. The spent chunks keep their pos. Returns 0. */
int wbuf_take_whole(struct wbuf *b, uint32_t max_elements, uint64_t max_bytes, unsigned max_chunks,
                    struct wbuf_take *out);

/* Moves to the head the queued chunks that ok accepts, scanning from the head, keeping their
 * order and that of the others: at most max_chunks of them, and no more once they hold max_bytes
 * bytes. ok is called once per chunk looked at, in queue order (it may note that it accepted
 * one). Returns the number of records of the moved chunks, 0 when none was accepted. */
uint64_t wbuf_front(struct wbuf *b, bool (*ok)(const struct wbuf_chunk *c, void *ctx), void *ctx,
                    unsigned max_chunks, uint64_t max_bytes);

/* Writes the pieces of c's bytes from c->pos on (at most three: data, the external block, the
 * rest of data; empty pieces are left out) to out and returns how many there are. */
unsigned wbuf_chunk_pieces(const struct wbuf_chunk *c, struct wbuf_piece out[3]);

/* Frees a chunk, its data and its external block; NULL is fine. */
void wbuf_chunk_free(struct wbuf_chunk *c);
/* Gives an external chunk's block back: to its lender, or to free. */
void wbuf_chunk_drop_ext(struct wbuf_chunk *c);

/* Frees every queued chunk and resets the buffer to empty. */
void wbuf_clear(struct wbuf *b);

/* Reads a varint (LEB128, at most 10 bytes) at p[0, len). Returns the number of bytes read, or
 * 0 when the bytes end first or the value does not fit in 64 bits. */
static inline size_t wbuf_read_varint(const uint8_t *p, size_t len, uint64_t *value)
{
    size_t pos = 0;
    return varint_get(p, len, &pos, VARINT_MAX_LEN, value) ? pos : 0;
}

#endif
