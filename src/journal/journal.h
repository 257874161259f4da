/* The journal (docs/design.md §6): an LMDB environment under WORK_DIR/journal that stores bytes and
 * knows nothing of what they mean. It holds three named databases:
 *
 *   "log"       record sequence number (8 bytes, big-endian) -> one record's payload
 *   "datasets"  dataset id -> the dataset's definition bytes
 *   "meta"      "format", "incarnation", "snapshot", ... -> small values
 *
 * Every value is framed by record.h (a crc32c over key and payload, and a format byte). The
 * snapshot is a meta value holding the sequence number of the last record it covers and the
 * caller's bytes. A restart reads the snapshot and the records after it, a bounded amount. The
 * records it covers are deleted in bounded steps, so that no one write stalls the writes behind
 * it: the snapshot's transaction and every later one deletes up to JOURNAL_TRIM_MIN of them plus
 * twice its own record count (so they go faster than records arrive), oldest first. Until they
 * are gone they stay in the log, unread.
 *
 * Durability: each write is one LMDB write transaction committed with LMDB's default syncing
 * (never MDB_NOSYNC or MDB_NOMETASYNC). When journal_append() returns 0 the batch survives a crash
 * of the process or of the machine; when it fails, nothing of the batch is written and every
 * batch committed before is intact (LMDB writes copies of pages and switches to them only when
 * the commit is complete).
 *
 * Size: the map starts at map_size and doubles whenever a write finds it full, up to map_max.
 * A write that does not fit under the ceiling, or that meets a full disk, fails with
 * SLUICE_ERR_FULL and a message saying which.
 *
 * Processes: one writer at a time. A journal opened for writing holds an exclusive lock on the
 * work dir for as long as it is open, so a second dispatcher on the same work dir is refused.
 * Readers (read_only) may open the journal while the writer uses it and see the last committed
 * state as of their read.
 *
 * Threads: a struct journal may be used from any thread; calls are serialized by a mutex inside
 * (LMDB lets a transaction live on one thread only, so no transaction outlives a call).
 *
 * Messages: failing functions write "what: why" into err without the directory; callers add it
 * ("journal: /var/lib/sluice: record 42: checksum mismatch"). */
#ifndef SLUICE_JOURNAL_JOURNAL_H
#define SLUICE_JOURNAL_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "check.h"

#define JOURNAL_DEFAULT_MAP_SIZE ((size_t)64 << 20)
#define JOURNAL_DEFAULT_MAP_MAX ((size_t)16 << 30)
#define JOURNAL_ID_MAX 511 /* longest dataset id in bytes (LMDB's key size limit) */
/* Covered records deleted per write transaction, at least (see above). */
#define JOURNAL_TRIM_MIN 1024

struct journal;

/* Points inside journal_append() at which a fault hook runs: the batch is written to the
 * transaction but not committed; the commit returned success. Tests stop a process there to
 * check that a crash at either point leaves a consistent journal. */
enum journal_fault { JOURNAL_FAULT_BEFORE_COMMIT = 1, JOURNAL_FAULT_AFTER_COMMIT = 2 };

/* Where a check or a replay is, kept up to date in memory the caller provides, so a process
 * that watches one running in another (journal_verify) can say where it stopped. */
struct journal_progress {
    volatile uint64_t page; /* the page of the data file the structural check reached */
    volatile uint64_t seq;  /* the record a replay reached */
    volatile int phase;     /* enum journal_phase */
};

enum journal_phase {
    JOURNAL_PHASE_OPEN = 0,  /* opening: the meta pages */
    JOURNAL_PHASE_PAGES = 1, /* checking every page */
    JOURNAL_PHASE_READ = 2,  /* reading through LMDB: tables, snapshot, records */
};

struct journal_opts {
    /* The work dir (the journal is WORK_DIR/journal, see layout.h). */
    const char *work_dir;
    /* Instead of a work dir: a journal's data file on its own (a backup), opened read-only. */
    const char *file;
    bool read_only; /* MDB_RDONLY: for inspecting a journal, possibly in use */
    /* Writing: make a new journal when the work dir is fresh (missing, or empty). Without it, or
     * when the work dir holds anything else, a missing journal is an error. */
    bool create;
    size_t map_size; /* initial map size in bytes; 0: JOURNAL_DEFAULT_MAP_SIZE */
    size_t map_max;  /* the ceiling the map may grow to; 0: JOURNAL_DEFAULT_MAP_MAX */
    /* Called at the points above when not NULL. Never set outside tests. */
    void (*fault)(enum journal_fault point, void *user);
    void *fault_user;
    struct journal_progress *progress; /* may be NULL */
    /* Writing: called once the work dir's lock is held (and a fresh journal created), before
     * the journal is opened; a negative return stops the open with that code and the message it
     * wrote into err, a positive one says the gate checked every page (check.h) meanwhile, so
     * the open does not check them again. journal_open_checked() verifies the journal here.
     * May be NULL. */
    int (*gate)(void *user, char *err, size_t errlen);
    void *gate_user;
};

/* Opens the journal. Before LMDB reads anything but the meta pages, the data file passes the
 * structural checks of check.h (for the transaction a reader holds while the check runs, so a
 * writer may go on); nothing is created or written in a journal that fails them, and LMDB never
 * creates a table in an existing journal. Writing, the work dir's lock is taken first, and a
 * journal is created (with its format record, in one step: layout.h) only when opts->create and
 * the work dir is fresh.
 *
 * Returns 0 and *out, or a negative code with a message in err: SLUICE_ERR_NOT_FOUND when there
 * is no journal ("no journal here"; "the journal's data file journal/data.mdb is missing"; a
 * work dir that is not empty but holds no journal), SLUICE_ERR_EXISTS when another process
 * writes it, SLUICE_ERR_CORRUPT when it is damaged ("journal damaged: ... (at page N)") or of a
 * format this build does not read, negative errno for system errors. */
int journal_open(const struct journal_opts *opts, struct journal **out, char *err, size_t errlen);

/* journal_open(), also returning what damage it found (d is filled when it returns
 * SLUICE_ERR_CORRUPT because of damage; d->what is then also in err, formatted). */
int journal_open_damage(const struct journal_opts *opts, struct journal **out,
                        struct journal_damage *d, char *err, size_t errlen);

/* Closes the environment and releases the lock. j may be NULL. */
void journal_close(struct journal *j);

/* The work dir as given to journal_open, or the file (owned by j). */
const char *journal_work_dir(const struct journal *j);

/* The path of the data file (owned by j). */
const char *journal_data_path(const struct journal *j);

/* ---- writing --------------------------------------------------------------------------------- */

/* One record of a batch: its payload, and optionally a dataset definition to store under
 * dataset_id in the datasets table in the same transaction. Pointers are borrowed for the call. */
struct journal_record {
    const uint8_t *data;
    size_t len;
    const char *dataset_id; /* NULL: nothing to store; else at most JOURNAL_ID_MAX bytes */
    const uint8_t *dataset;
    size_t dataset_len;
};

/* A snapshot to write with a batch: the caller's bytes, covering every record up to seq. */
struct journal_snapshot {
    uint64_t seq;
    const uint8_t *data;
    size_t len;
};

/* Writes n records with sequence numbers first_seq, first_seq + 1, ..., and then, when snap is
 * not NULL, the snapshot (replacing the previous one), all in ONE write transaction, which also
 * deletes the next records the snapshot covers (see the top). first_seq must follow the last record
 * written (or the snapshot, when the log is empty; 1 in a new journal) and snap->seq must not be
 * past the last record of the batch; otherwise nothing is written and SLUICE_ERR_INVALID is
 * returned. n may be 0 (a snapshot alone). Returns 0 once the transaction is durable, or a negative
 * code with a message: SLUICE_ERR_FULL (map ceiling, or disk full), SLUICE_ERR_TOO_LARGE (a batch
 * too large for one transaction), SLUICE_ERR_INVALID (read-only, or the sequence above), others
 * from the system. After a failure the journal holds exactly what it held before the call. */
int journal_append(struct journal *j, uint64_t first_seq, const struct journal_record *recs,
                   size_t n, const struct journal_snapshot *snap, char *err, size_t errlen);

/* Stores a u64 under a meta key (not "snapshot"; at most JOURNAL_ID_MAX bytes) in its own write
 * transaction. Returns 0 or a negative code with a message, as journal_append. */
int journal_meta_put_u64(struct journal *j, const char *key, uint64_t value, char *err,
                         size_t errlen);

/* ---- reading --------------------------------------------------------------------------------- */

/* Reads a u64 stored with journal_meta_put_u64. SLUICE_ERR_NOT_FOUND when absent (no message),
 * SLUICE_ERR_CORRUPT with a message when it fails its check. */
int journal_meta_get_u64(struct journal *j, const char *key, uint64_t *value, char *err,
                         size_t errlen);

/* Copies out the snapshot: *seq the last record it covers, *data (malloc'd, the caller frees;
 * non-NULL even when *len is 0) and *len. SLUICE_ERR_NOT_FOUND when there is none (no message),
 * SLUICE_ERR_CORRUPT ("snapshot: checksum mismatch") when it fails its check. */
int journal_snapshot_read(struct journal *j, uint64_t *seq, uint8_t **data, size_t *len, char *err,
                          size_t errlen);

/* Copies out a dataset definition stored with a record (*data malloc'd, as above).
 * SLUICE_ERR_NOT_FOUND when absent (message "dataset 'x' is not in the datasets table"). */
int journal_dataset_read(struct journal *j, const char *id, uint8_t **data, size_t *len, char *err,
                         size_t errlen);

/* Called for each record in order. payload points into the map and is valid only during the
 * call: copy what you keep. A nonzero return stops the replay, which returns it. */
typedef int (*journal_record_cb)(void *user, uint64_t seq, const uint8_t *payload, size_t len);
/* Called for a damaged record (or a gap in the sequence) when the replay is told to go on;
 * why is "record 42: checksum mismatch" or "records 7 to 9 are missing". */
typedef void (*journal_damage_cb)(void *user, uint64_t seq, const char *why);

/* Replays the records from sequence number from (the snapshot's + 1, or 1) to the last, inside
 * one read transaction. The records must run without a gap from `from`; records before it (the
 * ones a snapshot covers and the journal has not deleted yet) are not read. A record that fails
 * its check, or a gap, is damage: with on_damage NULL the replay
 * stops there and returns SLUICE_ERR_CORRUPT with "record N: why" in err; otherwise on_damage
 * is called, the replay goes on with the next record, and SLUICE_ERR_CORRUPT with the first
 * damage's message is returned at the end. *last (may be NULL) receives the sequence number of
 * the last record seen, or from - 1 when there is none. Returns 0 when every record was replayed.
 */
int journal_replay(struct journal *j, uint64_t from, journal_record_cb on_record,
                   journal_damage_cb on_damage, void *user, uint64_t *last, char *err,
                   size_t errlen);

/* journal_replay() of the records from `from` to `to` only: records after `to` are neither
 * delivered nor checked. */
int journal_replay_to(struct journal *j, uint64_t from, uint64_t to, journal_record_cb on_record,
                      journal_damage_cb on_damage, void *user, uint64_t *last, char *err,
                      size_t errlen);

/* Checks every value of the meta table: its checksum, and the length of the values this module
 * and the dispatcher read ("format" and "incarnation": 8 bytes; "snapshot": at least 8).
 * Returns 0, or SLUICE_ERR_CORRUPT with "meta 'incarnation': checksum mismatch". */
int journal_check_meta(struct journal *j, char *err, size_t errlen);

/* Calls cb for every dataset definition, in id order, inside one read transaction (data valid
 * during the call only). A value that fails its check ends the walk with SLUICE_ERR_CORRUPT
 * ("dataset 'x': checksum mismatch"); a nonzero cb return ends it with that value. */
typedef int (*journal_dataset_cb)(void *user, const char *id, const uint8_t *data, size_t len);
int journal_datasets_each(struct journal *j, journal_dataset_cb cb, void *user, char *err,
                          size_t errlen);

/* ---- recovery and copies --------------------------------------------------------------------- */

/* Says whether the dataset id must stay in the datasets table (nonzero) or go. */
typedef int (*journal_keep_cb)(void *user, const char *id);

/* Cuts the log back: deletes every record from `from` on, and every dataset definition keep()
 * rejects, in one write transaction (the journal must be open for writing). *records and
 * *datasets (may be NULL) receive how many were deleted. Records may be damaged (their values
 * are not read); the pages must have passed the structural check, as journal_open ensures.
 * Returns 0 or a negative code with a message, as journal_append. */
int journal_drop_tail(struct journal *j, uint64_t from, journal_keep_cb keep, void *user,
                      uint64_t *records, uint64_t *datasets, char *err, size_t errlen);

/* Writes a compacted copy of the journal as it is in one read transaction (LMDB's
 * mdb_env_copyfd2 with MDB_CP_COMPACT) to fd, a new regular file, and syncs it. A writer may go
 * on meanwhile. Returns 0 or a negative code with a message. */
int journal_copy(struct journal *j, int fd, char *err, size_t errlen);

struct journal_info {
    uint64_t records;      /* records in the log */
    uint64_t first_seq;    /* of the first record; 0 when the log is empty */
    uint64_t last_seq;     /* of the last record; 0 when the log is empty */
    uint64_t snapshot_seq; /* the last record the snapshot covers; 0 without a snapshot */
    uint64_t datasets;     /* entries in the datasets table */
    size_t map_size;       /* bytes the map may use now */
    size_t map_used;       /* bytes of pages in use (the size the data file needs) */
};

/* Fills info from one read transaction. The snapshot's sequence number is taken from its value
 * without checking the checksum (journal_snapshot_read checks it). */
int journal_get_info(struct journal *j, struct journal_info *info, char *err, size_t errlen);

#endif
