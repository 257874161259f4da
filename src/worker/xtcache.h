/* The cross-trainer cache of one task (docs/reading.md "Cross-trainer cache"): the elements the
 * task produced, kept in order in a ring bounded by bytes, and a read cursor per trainer id.
 * Several trainers reading a job with the cache share the one stream the task produces instead of
 * each taking its own elements from it. Pure: no locks, no threads, no clock (callers pass the
 * time); the worker's loop thread owns one per task (serve.c).
 *
 * Positions: the task's elements are numbered 0, 1, 2, ... in the order they are pushed. The
 * cache holds the positions [first, next): next is the position the next pushed element gets,
 * first the oldest still held.
 *
 * Trainers: a trainer id seen for the first time joins at first, the oldest element still held
 * (everything the cache has is new to it; a cache that has not evicted yet starts it at 0). A
 * read by a known id continues that id's cursor, so two readers with one id split the stream
 * between them and never get the same element. A cursor that fell below first (its elements
 * were evicted before it read them) skips ahead to first, and the read counts what it skipped:
 * a slow trainer never holds the cache back, and what it gets is the stream with gaps. A cursor
 * at next means the trainer has everything: the caller pushes more (production follows the
 * fastest trainer) or makes it wait. At most max_trainers ids are known at once; an id unseen
 * for idle_ms is forgotten (a later read by it joins again at first), and a new id when every
 * slot is taken by an active one is refused.
 *
 * Memory: every held element costs its record bytes (length prefix included) plus
 * XTC_RECORD_OVERHEAD. After each push the oldest elements are evicted until the cost is at most
 * the bound, but the newest element is never evicted: the cost exceeds the bound only when that
 * one element alone does. Evicted elements of a chunk (one pushed payload) are freed with the
 * chunk's last element, so the allocation exceeds the cost by at most one chunk.
 *
 * Invariants: first <= next; records == next - first; the chunks hold exactly the positions
 * [first, next) in order; every trainer's cursor is <= next; trainers are sorted by id. */
#ifndef SLUICE_WORKER_XTCACHE_H
#define SLUICE_WORKER_XTCACHE_H

#include "pipeline/format.h"
#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The default bound per task (sluice_read_options.cross_trainer_cache_bytes 0). */
#define XTC_DEFAULT_BYTES SLUICE_CROSS_TRAINER_CACHE_BYTES
/* Trainer ids a task's cache knows at once. */
#define XTC_MAX_TRAINERS 1024u
/* The longest trainer id, in bytes. */
#define XTC_TRAINER_ID_MAX 127u
/* A trainer that has read everything the cache holds takes at most bound / XTC_PULL_PARTS bytes
 * (at least one element) from the task's buffer at a time, so one pull evicts at most that much:
 * a trainer less than the rest of the bound behind the tail never skips because another one
 * pulled. */
#define XTC_PULL_PARTS 8u
/* What an element costs besides its record bytes: its offset in the chunk. */
#define XTC_RECORD_OVERHEAD 4u

struct xtc_chunk {
    uint64_t first;   /* position of record 0 */
    uint32_t count;   /* records */
    uint32_t dropped; /* records evicted from the front */
    uint8_t *data;    /* the records in the codec's batch format (varint length, record) */
    uint32_t *off;    /* off[i]: offset of record i in data; off[count]: the data's length */
};

struct xtc_trainer {
    char id[XTC_TRAINER_ID_MAX + 1];
    uint64_t cursor;  /* the next position it reads */
    uint64_t seen_ms; /* its last read */
    uint64_t skipped; /* positions it skipped in all (evicted before it read them) */
};

struct xtc {
    uint64_t bound;
    size_t max_trainers;
    uint64_t idle_ms;
    struct xtc_chunk *chunks; /* a ring of cap descriptors: n from head */
    size_t cap, head, n;
    uint64_t first, next;
    uint64_t bytes;   /* cost of the held elements (see Memory) */
    uint64_t records; /* held elements */
    uint64_t evicted; /* elements evicted in all */
    struct xtc_trainer *trainers;
    size_t ntrainers;
};

/* Sets up an empty cache: bound bytes (0: XTC_DEFAULT_BYTES), at most max_trainers ids (0:
 * XTC_MAX_TRAINERS), each forgotten after idle_ms without a read (0: never). Returns 0. */
int xtc_init(struct xtc *c, uint64_t bound, size_t max_trainers, uint64_t idle_ms);
/* Frees everything; c is empty afterwards. */
void xtc_free(struct xtc *c);

/* Appends count records (payload[0, len) in the codec's batch format, count >= 1; copied) at
 * positions next, next + 1, ... and evicts as the bound requires. Returns 0, SLUICE_ERR_CORRUPT
 * when the framing does not hold exactly count records, SLUICE_ERR_INVALID for a record over
 * 4 GiB, or SLUICE_ERR_NOMEM; on failure c is unchanged. */
int xtc_push(struct xtc *c, const uint8_t *payload, size_t len, uint32_t count);

struct xtc_read {
    uint64_t first;         /* position of the first record returned */
    uint32_t count;         /* records returned; 0: the trainer has everything held */
    uint64_t skipped;       /* positions skipped by this read (evicted before it came) */
    bool joined;            /* the trainer id was not known: it joined at this read */
    const uint8_t *payload; /* the records, in a chunk or in scratch; valid until the next */
    size_t len;             /* push, free, or use of scratch */
};

/* Reads for trainer id (non-empty, at most XTC_TRAINER_ID_MAX bytes) at now_ms: the held records
 * from its cursor on (after skipping what was evicted), at most max_elements (>= 1) and
 * max_bytes, but at least one when there is one; the cursor moves past them. Records of several
 * chunks are gathered into scratch. Returns 0 (out->count may be 0), SLUICE_ERR_INVALID for a
 * bad id, SLUICE_ERR_LIMIT when id is new and max_trainers active ids are known, or
 * SLUICE_ERR_NOMEM (scratch could not grow, or the id could not be added; then nothing moved). */
int xtc_read(struct xtc *c, const char *id, uint64_t now_ms, uint32_t max_elements,
             uint64_t max_bytes, struct pipe_buf *scratch, struct xtc_read *out);

/* Forgets the ids whose last read is idle_ms or more before now_ms (nothing with idle_ms 0).
 * Returns how many were forgotten. */
size_t xtc_expire(struct xtc *c, uint64_t now_ms);

/* The trainer with this id, or NULL. The pointer is valid until the next read or expire. */
const struct xtc_trainer *xtc_trainer(const struct xtc *c, const char *id);

#endif
