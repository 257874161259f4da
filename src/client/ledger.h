/* What a consumer received of a distributed_epoch iteration's splits, by (split, position): the
 * consumer's side of "a split is finished when its consumer has received all of its elements"
 * (docs/design.md §4). Pure: no locks, no I/O, no clock.
 *
 * Every element a worker serves in distributed_epoch carries its split's sequence number and its
 * position in the split, and after a split's last element comes an end marker with the split's
 * element count (pipeline/codec.h). A split is processed the same way every time, so when a
 * split is re-issued after its worker died, the consumer keeps only the positions it has not
 * received: the ledger says which those are.
 *
 * A split is complete once its end marker and every position below its count arrived. Complete
 * splits, and partial ones, are reported to the dispatcher with every heartbeat (ledger_report)
 * until the dispatcher confirms them finished (ledger_confirmed); a confirmed split moves to the
 * done set, a compact set of sequence numbers, and elements of it that still arrive are dropped.
 * Partial reports let the dispatcher finish a split whose elements went to several consumers of
 * a shared job.
 *
 * Memory: one entry per split received in part or complete and not yet confirmed (the splits in
 * flight, plus those completed since the last heartbeat), and the done set, which stays a few
 * ranges because splits are leased mostly in order. */
#ifndef SLUICE_CLIENT_LEDGER_H
#define SLUICE_CLIENT_LEDGER_H

#include "common/ranges.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ledger_split {
    uint64_t seq;
    bool had;       /* a split of the had set that arrived again: reported as had whole */
    bool ended;     /* the end marker arrived */
    uint64_t total; /* its count, when ended */
    struct ranges got;
};

struct ledger {
    struct ledger_split *v; /* sorted by seq */
    size_t n, cap;
    struct ranges done; /* splits confirmed finished */
    /* Splits the consumer had whole before it was restored from a checkpoint, which the
     * dispatcher may not know finished (a job joined again): their elements are dropped, and a
     * split of them that arrives gets an entry (had set) so the heartbeat reports it as had
     * whole, until the dispatcher confirms it finished. */
    struct ranges had;
    uint64_t received; /* new elements recorded */
    uint64_t dropped;  /* elements refused as already received */
};

void ledger_init(struct ledger *l);
void ledger_release(struct ledger *l);

/* Whether element pos of split seq is new (neither received before nor of a done split). When
 * new, *limit receives the first position after pos already received (UINT64_MAX: none), so a
 * caller can take pos + 1, pos + 2, ... below it as new without asking again. */
bool ledger_is_new(const struct ledger *l, uint64_t seq, uint64_t pos, uint64_t *limit);

/* The first position >= pos of split seq not received yet: pos when pos itself is new (or the
 * split is done or unknown). */
uint64_t ledger_first_missing(const struct ledger *l, uint64_t seq, uint64_t pos);

/* Records positions [begin, end) of split seq as received (a split already done is left alone).
 * Returns 0 or SLUICE_ERR_NOMEM. */
int ledger_add(struct ledger *l, uint64_t seq, uint64_t begin, uint64_t end);

/* Records the end marker of split seq: it has total elements. A second marker with another
 * count is SLUICE_ERR_CORRUPT (the split was processed differently: a nondeterministic pipeline
 * or a damaged reply). Returns 0, SLUICE_ERR_NOMEM or SLUICE_ERR_CORRUPT. */
int ledger_end(struct ledger *l, uint64_t seq, uint64_t total);

/* Split seq of the had set arrived again: it gets an entry with had set (once), to be reported.
 * Returns 0 or SLUICE_ERR_NOMEM. */
int ledger_note_had(struct ledger *l, uint64_t seq);

/* Whether split seq is complete here (or done). */
bool ledger_complete(const struct ledger *l, uint64_t seq);

/* The dispatcher confirmed these splits finished: they become done and their entries go. Seqs
 * that the ledger never saw are made done too (their elements will be dropped). Returns 0 or
 * SLUICE_ERR_NOMEM (then the entries stay, to be confirmed again). */
int ledger_confirmed(struct ledger *l, const uint64_t *seqs, size_t n);

#endif
