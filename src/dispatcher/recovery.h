/* Recovery: rebuilding the dispatcher's state from its journal (recovery.c). The function keeps
 * the journal_thread_ name it had when it lived in journal_thread.c, beside the group commit that
 * writes what it reads; journal_thread.h includes this header. */
#ifndef SLUICE_DISPATCHER_RECOVERY_H
#define SLUICE_DISPATCHER_RECOVERY_H

#include "state.h"

#include "journal/journal.h"

#include <stddef.h>
#include <stdint.h>

struct journal_recovery {
    uint64_t snapshot_seq; /* the last record the snapshot covered; 0 without a snapshot */
    uint64_t replayed;     /* records applied after the snapshot */
    uint64_t next_seq;     /* the sequence number the next record gets */
};

/* Rebuilds the state: the snapshot (its datasets' definitions from the datasets table), then
 * every record after it, decoded and applied with state_apply(), the function live traffic
 * uses. *st is overwritten (not released first); on failure it is an empty state. Returns 0, or
 * a negative code with a message naming what is damaged: "snapshot at 120: ...", "record 142:
 * checksum mismatch", "record 142: does not decode: unknown update type 99", "record 142: does
 * not apply: task_created 7: corrupt data", "records 7 to 9 are missing". Any thread. */
int journal_thread_recover(struct journal *j, struct state *st, struct journal_recovery *info,
                           char *err, size_t errlen);

#endif
