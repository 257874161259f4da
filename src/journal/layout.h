/* Where a journal lives in a work dir, and the file operations that keep it whole:
 *
 *   WORK_DIR/journal.lock   the writer's lock (flock), held by the one process that writes: a
 *                           dispatcher, or `sluice journal restore`
 *   WORK_DIR/journal/       the LMDB environment: data.mdb (the data file) and lock.mdb (LMDB's
 *                           table of readers, rebuilt when nobody has it open)
 *   WORK_DIR/journal.new/   a journal being put in place (created, or restored from a backup);
 *                           renamed to journal/ only once it is complete and on disk
 *
 * So a work dir either holds a whole journal or none: a crash while one is being created leaves
 * journal.new/ behind, which the next creation clears. A work dir that holds neither journal/ nor
 * only those leftovers is not a fresh one, and no journal is created in it.
 *
 * Synchronous file system calls; any thread. Messages are "what: why" without the work dir. */
#ifndef SLUICE_JOURNAL_LAYOUT_H
#define SLUICE_JOURNAL_LAYOUT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define JOURNAL_ENV_DIR "journal"
#define JOURNAL_DATA_FILE "data.mdb"

struct journal_paths {
    char dir[PATH_MAX];   /* WORK_DIR/journal */
    char data[PATH_MAX];  /* WORK_DIR/journal/data.mdb */
    char lock[PATH_MAX];  /* WORK_DIR/journal.lock */
    char fresh[PATH_MAX]; /* WORK_DIR/journal.new */
};

/* Fills the paths. Returns 0, or -ENAMETOOLONG with a message. */
int journal_paths_init(struct journal_paths *p, const char *work_dir, char *err, size_t errlen);

/* Creates the work dir (with its parents) when missing and takes the writer's lock. Returns 0 and
 * the lock's descriptor in *fd (close it to release the lock), SLUICE_ERR_EXISTS when another
 * process holds it ("another dispatcher is writing this journal"), or a negative errno. */
int journal_layout_lock(const char *work_dir, const struct journal_paths *p, int *fd, char *err,
                        size_t errlen);

/* What the work dir holds. */
enum journal_presence {
    JOURNAL_PRESENT, /* WORK_DIR/journal exists (whatever its state) */
    JOURNAL_FRESH,   /* missing, or empty but for the lock file and an unfinished journal.new */
    JOURNAL_FOREIGN, /* other files, and no journal/: not a work dir a journal may be made in */
};

/* Looks at the work dir. Returns 0 and *out, or a negative errno with a message. */
int journal_layout_probe(const char *work_dir, const struct journal_paths *p,
                         enum journal_presence *out, char *err, size_t errlen);

/* Removes WORK_DIR/journal.new and what an unfinished creation or restore leaves in it (a data
 * file and LMDB's lock file), then creates it empty. Returns 0 or a negative errno with a
 * message; refuses (SLUICE_ERR_EXISTS) when journal.new holds anything else. */
int journal_layout_fresh(const struct journal_paths *p, char *err, size_t errlen);

/* Puts journal.new in place as WORK_DIR/journal: syncs it, renames it, syncs the work dir. When
 * a journal is there already, it is first renamed to WORK_DIR/journal.replaced-<UTC time>, whose
 * path is written to replaced (may be NULL; "" when nothing was replaced). Returns 0 or a
 * negative errno with a message. */
int journal_layout_publish(const char *work_dir, const struct journal_paths *p, char *replaced,
                           size_t replaced_len, char *err, size_t errlen);

/* Copies the file from to a new file to (mode 0644, refused when it exists) and syncs it.
 * Returns 0, or a negative errno with a message; on failure to is removed. */
int journal_copy_file(const char *from, const char *to, char *err, size_t errlen);

/* fsync() of a file or directory by path. Returns 0 or a negative errno. */
int journal_sync_path(const char *path);

/* The directory part of path into out ("." when it has none). */
void journal_dir_of(const char *path, char *out, size_t len);

#endif
