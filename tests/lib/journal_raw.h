/* Raw LMDB access to a journal's tables, beneath the journal's own code, so that a test can damage
 * a journal the way a bad disk or a foreign writer would while the pages stay sound. Every step
 * fails the test when LMDB refuses it. */
#ifndef SLUICE_TESTS_LIB_JOURNAL_RAW_H
#define SLUICE_TESTS_LIB_JOURNAL_RAW_H

#include <lmdb.h>

struct journal_raw {
    MDB_env *env;
    MDB_txn *txn; /* NULL once the caller has committed it itself */
    MDB_dbi dbi;
};

/* Opens the journal of work dir wd (WD/journal) and begins a write transaction with table (a
 * named table of the journal, "meta" say) open in r->dbi. */
void journal_raw_open(struct journal_raw *r, const char *wd, const char *table);

/* Commits r->txn, unless the caller has (and set it NULL), and closes the environment. */
void journal_raw_close(struct journal_raw *r);

#endif
