/* The rounds of a task read by coordinated consumers (docs/design.md §4, src/dispatcher/state.h):
 * pure bookkeeping, no I/O, no clock; the worker's loop thread owns a table.
 *
 * Rounds are numbered as the dispatcher's schedule numbers them (global round indices: a task
 * serves only the rounds the schedule gives it, an increasing subsequence). The worker serves
 * a round only when every one of the n consumers has a read of that round waiting, and then
 * answers all n reads at once (worker.c): round r of this task is either served to every
 * consumer or to none, so when a task's worker dies its unserved rounds can be skipped by every
 * consumer alike. Serving a round takes n elements from the task's buffer, in buffer order, the
 * c-th for consumer c: they are staged one at a time (rounds_stage) and become round r
 * together (rounds_commit). The last ROUNDS_KEPT rounds served stay for reads repeated after a
 * lost reply.
 *
 * Invariants: rounds are committed in strictly increasing order; kept holds the last
 * min(committed, ROUNDS_KEPT) of them, the newest at (head + nkept - 1) % ROUNDS_KEPT; 0 <=
 * staged <= n. */
#ifndef SLUICE_WORKER_ROUNDS_H
#define SLUICE_WORKER_ROUNDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ROUNDS_KEPT 4u
/* Far more consumers than any real job has; bounds the tables a TaskDef can ask for. */
#define ROUNDS_MAX_CONSUMERS 65536u

struct rounds_set {
    uint64_t round;
    uint8_t **rec; /* rec[c]: consumer c's element as one codec record (owned), len[c] bytes */
    size_t *len;
};

struct rounds {
    uint32_t n; /* consumers; 0: the task is not read in rounds */
    struct rounds_set kept[ROUNDS_KEPT];
    unsigned head, nkept;
    struct rounds_set stage; /* staged elements (its round is not set yet) */
    uint32_t staged;
    bool ended; /* the task's elements ran out: no round is served any more */
};

/* Sets up a table for n consumers (0: an empty table of a task not read in rounds). Returns 0,
 * SLUICE_ERR_INVALID for n above ROUNDS_MAX_CONSUMERS, or SLUICE_ERR_NOMEM (then r is empty). */
int rounds_init(struct rounds *r, uint32_t n);
void rounds_free(struct rounds *r);

enum rounds_lookup {
    ROUNDS_READY,   /* the round was served: *rec and *len hold the consumer's element */
    ROUNDS_WAITING, /* the round has not been served yet */
    ROUNDS_GONE     /* a round at or below the last one served that is no longer kept */
};

/* Looks up consumer c's element of round (c < n). The record stays owned by r and valid until
 * the next commit. */
enum rounds_lookup rounds_lookup(const struct rounds *r, uint32_t c, uint64_t round,
                                 const uint8_t **rec, size_t *len);

/* Whether n elements are staged (the next round can be committed). */
bool rounds_stage_full(const struct rounds *r);

/* Stages rec (len bytes, malloc'd; ownership moves to r) as the next element. The stage must
 * not be full. */
void rounds_stage(struct rounds *r, uint8_t *rec, size_t len);

/* Makes the staged elements round `round`, which must be above the last round committed,
 * dropping the oldest kept round beyond ROUNDS_KEPT. The stage must be full. */
void rounds_commit(struct rounds *r, uint64_t round);

/* The elements ran out: the staged ones are dropped and ended is set (every later read of a
 * round not served is answered with the end). */
void rounds_end(struct rounds *r);

#endif
