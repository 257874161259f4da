/* What the journal's files share (journal.c: errors, helpers, writing, reading; journal_open.c:
 * opening, checking and closing): the journal's struct and the helpers around LMDB. */
#ifndef SLUICE_JOURNAL_JOURNAL_INTERNAL_H
#define SLUICE_JOURNAL_JOURNAL_INTERNAL_H

#include "journal.h"

#include <lmdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNAL_META_FORMAT "format"
#define JOURNAL_META_SNAPSHOT "snapshot"

struct journal {
    MDB_env *env;
    MDB_dbi log, datasets, meta;
    char *work_dir;  /* or the data file, in file mode */
    char *path;      /* WORK_DIR/journal (the data file in file mode) */
    char *data_path; /* WORK_DIR/journal/data.mdb */
    bool read_only;
    bool file_mode;
    struct journal_progress *progress;
    size_t map_max;
    int lock_fd;
    pthread_mutex_t mu;
    void (*fault)(enum journal_fault point, void *user);
    void *fault_user;
    /* Writing: records up to trim_to (the snapshot's) are deleted at most JOURNAL_TRIM_MIN plus
     * twice the batch per transaction; trim_left says some remain. Both are known once a write
     * committed (trim_known), and read from the journal by the first. */
    bool trim_known, trim_left;
    uint64_t trim_to;
};

/* Records "what: LMDB's reason" and returns LMDB's code converted to sluice's. */
int journal_lmdb_fail(char *err, size_t errlen, int rc, const char *what);
/* Big-endian sequence keys (journal_seq_key). */
void journal_put_be64(uint8_t *p, uint64_t v);
uint64_t journal_get_be64(const uint8_t *p);
/* n rounded down to whole pages, at least one page. */
size_t journal_page_round(size_t n);
/* Begins a transaction, adopting a map another process grew since this one last looked. */
int journal_txn_begin(struct journal *j, unsigned flags, MDB_txn **txn);
MDB_val journal_str_val(const char *s);
/* Reads a framed value under key into a checked payload pointing into the map (valid in txn). */
int journal_get_framed(MDB_txn *txn, MDB_dbi dbi, MDB_val key, const uint8_t **payload, size_t *len,
                       const char **why);
/* Stores a framed value under key, writing the payload straight into the map. */
int journal_put_framed(MDB_txn *txn, MDB_dbi dbi, MDB_val key, const void *a, size_t alen,
                       const void *b, size_t blen, unsigned flags);

#endif
