/* Hedged splits (docs/design.md §4 "Hedged splits"): a split of a distributed_epoch iteration
 * leased longer than factor times the iteration's median split time is leased again, as a copy,
 * to a task that asks for splits (its worker has room: fewer splits queued than it wants). The
 * first production its reader receives in full finishes the split (the reader's heartbeat
 * reports it, whichever task produced it); the reader's ledger drops the positions of the other
 * production it already received, and the split's coverage (coverage.h) tells the copy's worker
 * which positions to leave out.
 *
 * A copy is soft state, like a deterministic reader's lease bound: never journaled, never in the
 * state (struct state still has one holder per leased split: the task whose lease the journal
 * recorded), and forgotten by a restarted dispatcher. A task's report of a copy finished or
 * handed back names a split not leased to it, which planning ignores (plan_get_splits), so a
 * copy never finishes, returns or moves a split in the state. Exactly-once rests on the reader's
 * ledger, as it does when a split is leased again after its worker died: hedging is offered
 * only to iterations whose elements all go to one reader (see hedge_allowed()), so both
 * productions reach the same ledger.
 *
 * Split time: from the commit of a split's lease to the commit of its finish, in dispatcher
 * milliseconds, over the last HEDGE_SAMPLES splits finished in the iteration (a ring); no split
 * is hedged before HEDGE_MIN_SAMPLES finished.
 *
 * A slow task's splits are copied without waiting for each to grow old: a task is slow when the
 * median of its own last HEDGE_TASK_SAMPLES production times (from a split's lease to its
 * worker's report of it produced, hedge_produced; at least HEDGE_TASK_MIN_SAMPLES of them) is
 * more than factor / 2 times its peers' (the lower median of the medians of the tasks with that
 * many times), and at least HEDGE_MIN_MS. A production time includes the worker's queue, which
 * every task has, so a task five times slower than the rest shows times only two to four times
 * theirs; measured against its peers rather than against every split, a cluster that slows
 * down as a whole (a loaded host) has no slow task. A straggler holds a queue of splits, each
 * of which would otherwise wait the limit before its copy starts: this way the wait is paid
 * for its first splits, not for every split it holds.
 *
 * Every iteration that may hedge is timed from its reader's first heartbeat, hedging or not
 * (factor 0), so that status shows its split times (median and p99) either way. Memory per such
 * iteration: two entries per split leased and not finished, one per copy out, the ring, and
 * HEDGE_TASK_SAMPLES times per task that reported a split produced.
 *
 * Pure: no clock (the shell passes now_ms), no I/O, no locks. Loop thread only, like the state. */
#ifndef SLUICE_DISPATCHER_HEDGE_H
#define SLUICE_DISPATCHER_HEDGE_H

#include "common/u64map.h"
#include "dispatcher/state.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HEDGE_SAMPLES 256
#define HEDGE_MIN_SAMPLES 4
/* The default factor: a split is hedged once leased three times the median split time. */
#define HEDGE_FACTOR_DEFAULT 3.0
/* Factors above this are refused by the readers' option parsing and clamped here. */
#define HEDGE_FACTOR_MAX 1000.0
/* No split is hedged before it was leased this long, whatever the median (a median of a few
 * milliseconds would otherwise hedge splits delayed by a heartbeat's interval). */
#define HEDGE_MIN_MS 50
/* At most this many copies go with one lease (the shell's bound on hedge_pick's room), and at
 * most this many drops with one reply. */
#define HEDGE_PICK_MAX 16
/* Drops waiting for their task's next GetSplits, per iteration; past it a finished copy's
 * other holder is not told (it produces the split for nothing, which the ledger drops). */
#define HEDGE_DROPS_MAX 4096

/* A split a task holds (leased, or a copy) that finished with the other production: the task
 * is told with its next GetSplits reply (GetSplitsReply.dropped) and leaves it out if it has not
 * started it. */
struct hedge_drop {
    uint64_t task_id, seq;
};

/* Production times kept per task, for telling a slow task (hedge_pick). */
#define HEDGE_TASK_SAMPLES 8
/* A task is judged on its own production times once this many are known. */
#define HEDGE_TASK_MIN_SAMPLES 2

/* A task's last production times, a ring. */
struct hedge_task {
    uint64_t task_id;
    uint64_t ms[HEDGE_TASK_SAMPLES];
    uint8_t n, next;
};

/* One iteration that hedges. */
struct hedge_iter {
    uint64_t iteration_id;
    double factor;           /* > 0 */
    struct u64map since;     /* split leased and not finished -> the time of its lease (ms) */
    struct u64map copies;    /* split with a copy out -> the task holding the copy */
    struct u64map primaries; /* split with a copy out -> the task it was leased to */
    struct u64map holders;   /* split leased, not finished, not yet reported produced -> its task */
    struct hedge_task *tasks; /* sorted by task id: tasks with a split time known */
    size_t ntasks, captasks;
    struct hedge_drop *drops; /* in the order the splits finished */
    size_t ndrops, capdrops;
    uint64_t ms[HEDGE_SAMPLES]; /* split times, a ring */
    size_t nms, next;
    uint64_t median; /* hedge_quantile_ms(r, 0.5), kept as the ring changes */
    uint64_t hedged; /* copies leased over the iteration's life */
};

struct hedge {
    struct hedge_iter *v; /* sorted by iteration id */
    size_t n, cap;
    uint64_t total; /* copies leased, all iterations (sluice_hedged_splits_total) */
};

/* A zeroed struct hedge is empty; hedge_release() frees it. */
void hedge_release(struct hedge *h);

/* Whether the iteration may hedge: distributed, active, its job anonymous (no second reader can
 * join it), not deterministic (an ordered read asks for splits again itself), not coordinated,
 * without a cross-trainer cache, and not a save's (its tasks write chunk files, not elements to
 * a ledger). */
bool hedge_allowed(const struct state *s, const struct st_iteration *it);

/* Sets the iteration's factor, as its reader's heartbeat sent it (0: time its splits, hedge
 * none; not a number or below 0 is 0, above HEDGE_FACTOR_MAX is HEDGE_FACTOR_MAX). An iteration
 * that may not hedge gets no row, and one that no longer may (finished) keeps its row as it is.
 * A new row's splits held now count as leased at now_ms. Returns 0 or SLUICE_ERR_NOMEM (nothing
 * changed). */
int hedge_set(struct hedge *h, const struct state *s, uint64_t iteration_id, double factor,
              uint64_t now_ms);

/* The row of iteration_id, or NULL when it does not hedge. */
const struct hedge_iter *hedge_find(const struct hedge *h, uint64_t iteration_id);

/* The median of the row's split times (ms); 0 when fewer than HEDGE_MIN_SAMPLES are known. */
uint64_t hedge_median_ms(const struct hedge_iter *r);

/* The q-quantile (0 < q <= 1) of the row's split times (ms): the smallest time at least a share
 * q of them are at or below; 0 when none is known. */
uint64_t hedge_quantile_ms(const struct hedge_iter *r, double q);

/* Follows an update state_apply() just applied, at now_ms: SPLITS_LEASED times its splits,
 * SPLITS_FINISHED adds their times to the ring, forgets them and their copies, and queues a drop
 * for both holders of each that had a copy out, SPLITS_RETURNED forgets them and their copies,
 * TASK_REMOVED forgets the copies and drops of its task, ITERATION_FINISHED and ITERATION_FAILED
 * stop the row's hedging (its count, times and drops stay), ITERATION_GC forgets the row. Out of
 * memory, a split goes untimed (never hedged), or a drop is not queued. */
void hedge_applied(struct hedge *h, const struct st_update *u, uint64_t now_ms);

/* The decision, pure: which splits task_id (of iteration it, its worker asking for up to room
 * splits) gets copies of at now_ms, oldest lease first, into out (room entries): splits held by
 * another task (it->held), without a copy out yet, and either held longer than the limit (factor
 * times the median split time, at least HEDGE_MIN_MS) or held at least HEDGE_MIN_MS by a slow
 * task (see above). Returns how many. */
size_t hedge_pick(const struct hedge_iter *r, const struct st_iteration *it, uint64_t task_id,
                  uint64_t now_ms, size_t room, uint64_t *out);

/* task_id reports seqs[0, n) of the iteration produced (GetSplitsRequest.finished): each it
 * holds the lease of, reported for the first time, adds the time from its lease to now_ms to
 * the task's own split times. A copy's production and a split its reader finished first add
 * nothing: a straggler whose splits were won by copies is judged on what it produced itself. */
void hedge_produced(struct hedge *h, uint64_t iteration_id, uint64_t task_id, const uint64_t *seqs,
                    size_t n, uint64_t now_ms);

/* Records that task_id holds copies of seqs[0, n) (hedge_pick's choice, sent) of iteration it,
 * beside the tasks holding their leases (it->held), and counts them. Returns 0 or
 * SLUICE_ERR_NOMEM (a copy not recorded may be hedged again). */
int hedge_leased(struct hedge *h, const struct st_iteration *it, uint64_t task_id,
                 const uint64_t *seqs, size_t n);

/* Takes up to max of the drops queued for task_id of the iteration into out, oldest first, and
 * forgets them. Returns how many. */
size_t hedge_take_drops(struct hedge *h, uint64_t iteration_id, uint64_t task_id, uint64_t *out,
                        size_t max);

/* Whether task_id's own production times say it is slow against its peers' (see above). */
bool hedge_task_slow(const struct hedge_iter *r, uint64_t task_id);

/* Copies leased in the iteration so far (0 when it does not hedge). */
uint64_t hedge_count(const struct hedge *h, uint64_t iteration_id);

#endif
