/* Deterministic reads of distributed_epoch (sluice_read_options.deterministic): the elements of
 * splits arriving from several tasks in any interleaving are handed to the reader in the
 * canonical order, splits by increasing sequence number and each split's elements by increasing
 * position. Pure: no locks, no I/O, no clock.
 *
 * Two halves, owned by different threads:
 *
 *   - struct reorder_accept, the loop thread's judge. A record (seq, pos) is accepted only when
 *     pos is the next position expected of its split, so the accepted records of every split are
 *     a prefix of it, and only while there is room (the queue's bytes are under its bound) or
 *     the split is the lowest one not complete yet, `need` (whose records are always taken, so
 *     the read always progresses). Others are dropped: a duplicate (a position taken before)
 *     costs nothing; a record at or past the next position (no room, or a gap left by an earlier
 *     drop or a lost reply) makes the split lossy. A split whose end marker arrives while its
 *     prefix is short of the count is incomplete: it must be produced again from its start
 *     (reorder_redo_due lists those to ask the dispatcher for), and the consumer then keeps
 *     only the positions it lacks. A split is complete once its end marker arrived and its
 *     prefix reached the count.
 *
 *   - struct reorder_queue, shared between the loop (which pushes accepted runs of records and
 *     marks splits complete) and the reader (which takes runs in the canonical order), guarded
 *     by the iterator's mutex. A run is a byte range of a received payload (struct
 *     reorder_blob, reference counted: a payload is freed once every run of it was read), so
 *     elements are never copied. The queue's bytes count every payload it holds in full.
 *
 * Skipping: splits below `skip_below` (the dispatcher's splits_finished_below: finished because
 * another consumer of a shared job, or an earlier reader of the job, received them) that the
 * reader holds nothing more of are passed over, and so is every missing split once the read
 * ended. A single consumer that reads a job from its start never skips: every split reaches it.
 *
 * Memory: the queue holds at most its bound plus what arrives while it is over the bound, which
 * is only ever runs of `need` fetched because the reader had nothing left to read
 * (reorder_queue_starved): the iterator then has at most max_outstanding_requests replies under
 * way. The judge holds one small entry per split seen and not yet complete-and-below-need. */
#ifndef SLUICE_CLIENT_REORDER_H
#define SLUICE_CLIENT_REORDER_H

#include "prefetch.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the judge (loop thread) ----------------------------------------------------------------- */

struct reorder_split {
    uint64_t seq;
    uint64_t next;  /* positions [0, next) accepted */
    bool ended;     /* an end marker arrived */
    uint64_t total; /* its count, when ended */
    bool redo;      /* incomplete after an end marker: to be produced again (not asked yet) */
    /* The production whose end marker left the split incomplete: the task that served it and
     * when (the caller's clock, milliseconds). A redo request names it, so that the dispatcher
     * can tell it from a production begun since (which the request must not cut short). */
    uint64_t end_task;
    uint64_t end_ms;
};

struct reorder_accept {
    struct reorder_split *v; /* sorted by seq; every seq >= need */
    size_t n, cap;
    uint64_t need;    /* the lowest split not complete; every split below it is */
    uint64_t dropped; /* records dropped for want of room or after a gap */
};

enum reorder_verdict {
    REORDER_DUP = 0,    /* taken before (or of a complete split): ignore it */
    REORDER_ACCEPT = 1, /* take it: the split's next position */
    REORDER_LAST = 2,   /* take it, and the split is complete with it (its end came before) */
    REORDER_DROP = 3    /* not taken; the split needs its positions from here again */
};

void reorder_accept_init(struct reorder_accept *a);
void reorder_accept_release(struct reorder_accept *a);

/* Judges element pos of split seq; room says whether splits other than need may take records
 * now. An accepted record advances the split's next position. Returns a verdict, or
 * SLUICE_ERR_NOMEM (nothing changed). */
int reorder_judge(struct reorder_accept *a, uint64_t seq, uint64_t pos, bool room);

/* Records the end marker of split seq, served by task at now_ms: it has total elements. Returns
 * 1 when the split became complete with it, 0 when it was complete already or is still
 * incomplete (then it is marked for a redo of that production), SLUICE_ERR_CORRUPT when an earlier
 * marker or the accepted prefix disagree with total (the split was processed differently: a
 * nondeterministic pipeline), or SLUICE_ERR_NOMEM. */
int reorder_end(struct reorder_accept *a, uint64_t seq, uint64_t total, uint64_t task,
                uint64_t now_ms);

/* A read restored from a checkpoint had positions [0, next) of split seq already: they are
 * taken as accepted (and never handed out again). Returns 0 or SLUICE_ERR_NOMEM. */
int reorder_accept_seed(struct reorder_accept *a, uint64_t seq, uint64_t next);

/* The next position split seq expects (0 for a split not seen; UINT64_MAX below need). */
uint64_t reorder_next(const struct reorder_accept *a, uint64_t seq);

/* Whether split seq is complete (all of it accepted, or below need). */
bool reorder_complete(const struct reorder_accept *a, uint64_t seq);

/* Moves need past complete splits and forgets their entries (splits complete via
 * REORDER_LAST or reorder_end). Returns the new need. */
uint64_t reorder_advance(struct reorder_accept *a);

/* Splits below floor are treated as complete (finished elsewhere, see "Skipping"): need moves
 * at least to floor. Returns the new need. */
uint64_t reorder_accept_floor(struct reorder_accept *a, uint64_t floor);

/* Writes up to max seqs of splits due for a redo (incomplete after an end marker) that the
 * dispatcher should be asked for now: need always, others only while room; with each, the
 * production its request is about (tasks[k], ends_ms[k]: end_task and end_ms). Clears their redo
 * mark when taken (reorder_redo_failed sets it again). Returns how many were written. */
size_t reorder_redo_due(struct reorder_accept *a, bool room, uint64_t *seqs, uint64_t *tasks,
                        uint64_t *ends_ms, size_t max);
/* Whether need is marked for a redo not asked for yet: the read waits for it. */
bool reorder_need_redo(const struct reorder_accept *a);
/* The request that carried seqs was not answered: they are due again. */
void reorder_redo_failed(struct reorder_accept *a, const uint64_t *seqs, size_t n);

/* ---- the queue (loop and reader, under the iterator's mutex) --------------------------------- */

/* A received payload shared by the runs cut from it. */
struct reorder_blob {
    struct prefetch_item item;
    unsigned refs; /* runs not yet read */
    bool charged;  /* counted in the queue's bytes */
};

struct reorder_run {
    struct reorder_blob *blob;
    size_t begin, end; /* byte range of blob->item.data */
    uint32_t count;    /* element records in it */
};

struct reorder_qsplit {
    uint64_t seq;
    bool complete;  /* every run of the split was pushed */
    uint64_t total; /* its count, when complete */
    struct reorder_run *runs;
    size_t first, n, cap; /* runs[first, n) not taken yet */
};

struct reorder_queue {
    struct reorder_qsplit *v; /* sorted by seq; every seq >= head */
    size_t n, cap;
    uint64_t head;       /* the split being read */
    uint64_t skip_below; /* see "Skipping" */
    bool ended;          /* the read ended: missing splits are skipped */
    uint64_t bytes, bound;
    /* Complete splits the head moved past (read in full), with their counts, oldest first: the
     * reader records them as delivered whole (reorder_queue_passed). */
    struct reorder_passed {
        uint64_t seq, total;
    } * passed;
    size_t npassed, passed_cap;
};

/* bound: the bytes of payloads held before only need's records are taken. */
void reorder_queue_init(struct reorder_queue *q, uint64_t bound);
/* Frees every run and payload still held. */
void reorder_queue_release(struct reorder_queue *q);

/* Whether records other than need's may be taken (bytes under the bound). */
bool reorder_queue_room(const struct reorder_queue *q);

/* Appends a run of split seq (count records at [begin, end) of blob's payload); the queue holds
 * a reference to blob. Returns 0 or SLUICE_ERR_NOMEM. */
int reorder_queue_push(struct reorder_queue *q, uint64_t seq, struct reorder_blob *blob,
                       size_t begin, size_t end, uint32_t count);
/* Every run of split seq, which has total elements, was pushed. Returns 0 or SLUICE_ERR_NOMEM. */
int reorder_queue_complete(struct reorder_queue *q, uint64_t seq, uint64_t total);
/* Reader: the complete splits passed since the last call (*n of them, oldest first; valid until
 * the next call on the queue), then forgotten. */
const struct reorder_passed *reorder_queue_passed(struct reorder_queue *q, size_t *n);

/* Reader: the next run in the canonical order, moving the head past complete (and skippable)
 * splits. Returns true with *out (the caller holds its blob reference until
 * reorder_queue_done), false when nothing can be read now. */
bool reorder_queue_take(struct reorder_queue *q, struct reorder_run *out);
/* The caller finished reading a run of blob: returns blob when that was its last reference (the
 * caller then frees it with reorder_blob_free, outside any lock), else NULL. */
struct reorder_blob *reorder_queue_done(struct reorder_queue *q, struct reorder_blob *blob);
/* Whether the reader would find nothing to take now (moves the head as a take would). */
bool reorder_queue_starved(struct reorder_queue *q);

/* Whether the reader can read at least limit bytes, or at least elements element records, of
 * runs in order now, without waiting for anything to arrive (moves the head as a take would).
 * The iterator fetches no more while it can: as with the prefetch buffer, a reader that falls
 * behind holds the workers back, rather than letting them run ahead of the order it reads in;
 * and a reader of a shared job leaves the others their share (the element bound: about what it
 * consumes, as prefetch_pace). */
bool reorder_queue_ahead(struct reorder_queue *q, uint64_t limit, uint64_t elements);

/* A new blob owning item (taken over; item is cleared). NULL when out of memory (item is then
 * untouched). */
struct reorder_blob *reorder_blob_new(struct prefetch_item *item);
/* Frees a blob and its payload (prefetch_item_free). */
void reorder_blob_free(struct reorder_blob *b);

#endif
