/* Backups of a journal, and putting one back.
 *
 * A backup is one file: a compacted copy of the journal's data file as it was in one read
 * transaction (LMDB's mdb_env_copyfd2 with MDB_CP_COMPACT), so it is consistent while a
 * dispatcher goes on writing, and holds no free pages. It is written next to its destination
 * first, verified (journal_verify with the caller's deep check, the check `sluice journal verify`
 * makes) and only then renamed into place: a backup file that exists was whole and sound when it
 * was made.
 *
 * Restoring verifies the backup, takes the work dir's writer lock (so never under a running
 * dispatcher), refuses to replace a journal that is there unless told to (and then keeps the old
 * one beside it), and puts the copy in place in one rename (layout.h).
 *
 * Both block, fork for the verification (verify.h), and may be called from any thread. */
#ifndef SLUICE_JOURNAL_BACKUP_H
#define SLUICE_JOURNAL_BACKUP_H

#include "verify.h"

#include <stdbool.h>
#include <stddef.h>

/* Writes a verified backup of the journal in work_dir to the file `to` (replacing it). Returns
 * 0 with v->summary describing the copy, or a negative code with the message in err. */
int journal_backup(const char *work_dir, const char *to, journal_deep_cb deep, void *user,
                   struct journal_verdict *v, char *err, size_t errlen);

/* Puts the backup `from` in place as the journal of work_dir (created when missing). A journal
 * already there is refused with SLUICE_ERR_EXISTS unless force, which moves it aside first; its
 * new path is written to replaced ("" when there was none). Returns 0 with v->summary describing
 * the restored journal, or a negative code with the message in err. */
int journal_restore(const char *from, const char *work_dir, bool force, journal_deep_cb deep,
                    void *user, struct journal_verdict *v, char *replaced, size_t replaced_len,
                    char *err, size_t errlen);

#endif
