/* Recovery: rebuilding the dispatcher's state from its journal (recovery.c). The function keeps
 * the journal_thread_ name it had when it lived in journal_thread.c, beside the group commit that
 * writes what it reads; journal_thread.h includes this header. */
#ifndef SLUICE_DISPATCHER_RECOVERY_H
#define SLUICE_DISPATCHER_RECOVERY_H

#include "dispatcher/state.h"

#include "journal/journal.h"
#include "journal/verify.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct journal_recovery {
    uint64_t snapshot_seq; /* the last record the snapshot covered; 0 without a snapshot */
    uint64_t replayed;     /* records applied after the snapshot */
    uint64_t next_seq;     /* the sequence number the next record gets */
    /* What --recover-to-last-good cut (recovery_open): records dropped_from to dropped_to
     * and dropped_datasets dataset definitions; dropped_from is 0 when nothing was cut. */
    uint64_t dropped_from, dropped_to, dropped_datasets;
};

/* Rebuilds the state: the snapshot (its datasets' definitions from the datasets table), then
 * every record after it, decoded and applied with state_apply(), the function live traffic
 * uses. *st is overwritten (not released first); on failure it is an empty state. Returns 0, or
 * a negative code with a message naming what is damaged: "snapshot at 120: ...", "record 142:
 * checksum mismatch", "record 142: does not decode: unknown update type 99", "record 142: does
 * not apply: task_created 7: corrupt data", "records 7 to 9 are missing". Any thread. */
int recovery_replay(struct journal *j, struct state *st, struct journal_recovery *info, char *err,
                    size_t errlen);

/* The deep check of journal_verify() for a dispatcher's journal (a journal_deep_cb; user is not
 * used): every value of the meta and datasets tables passes its checksum, and the state is
 * rebuilt exactly as recovery_replay() rebuilds it, which is all a starting dispatcher
 * reads. Damage at a record after the snapshot is a damaged tail (v->damage.tail, seq: that
 * record). On success v->summary reads "snapshot at 150, 46 records after it (next 197), 196
 * updates in all; 31 datasets, 1 jobs, 0 tasks, 0 workers, 0 clients". */
int recovery_check(struct journal *j, void *user, struct journal_verdict *v);

/* Opens the dispatcher's journal under opts->work_dir for writing (a new one on a first start in
 * a fresh work dir), refuses a journal that `sluice journal verify` rejects (it runs the same
 * journal_verify() with recovery_check), and rebuilds the state (recovery_replay).
 *
 * With recover_to_last_good, a journal whose only damage is in the tail of its log is cut back
 * first: the damaged data file is copied to WORK_DIR/journal.damaged-<UTC time>.mdb, the records
 * from the first damaged one to the last and the dataset definitions only they registered are
 * deleted in one transaction, and the journal is verified again; the state is then the snapshot
 * and the records before the damage. What was dropped is logged (one warning line naming the
 * records, the first damage and the copy) and returned in info. Any other damage is refused
 * whatever the flag.
 *
 * *st is overwritten (not released first); on failure it is an empty state. Returns 0 with *out
 * and *st, or a negative code with "what: why" in err ("journal damaged:
 * log record: checksum mismatch (at record seq 42)"). Blocks; any thread, before the loop runs
 * (it forks for the verification). */
int recovery_open(const struct journal_opts *opts, bool recover_to_last_good, struct journal **out,
                  struct state *st, struct journal_recovery *info, char *err, size_t errlen);

#endif
