/* The LMDB journal. Every call takes the journal's mutex, begins one transaction, and ends it
 * before returning: nothing read from the map is used after its transaction ends (values are
 * copied out or handed to a callback inside it), and no transaction is touched after
 * mdb_txn_commit(), which frees it even when it fails.
 *
 * Failure modes: a write that finds the map full aborts, doubles the map (up to the ceiling) and
 * runs again from the start; at the ceiling, or on a full disk, it fails with SLUICE_ERR_FULL.
 * A failed commit leaves the previous state of the journal intact: LMDB only switches to the new
 * pages by writing a meta page after the rest is on disk. */
#include "journal.h"

#include "layout.h"
#include "record.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define ENV_DIR JOURNAL_ENV_DIR
#define FORMAT 1
#define META_FORMAT "format"
#define META_SNAPSHOT "snapshot"

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
};

/* ---- errors: the one place LMDB's codes become sluice's -------------------------------------- */

/* LMDB returns its own codes (MDB_*, all negative) and passes system errors through as positive
 * errno values. A full map and a full disk are both SLUICE_ERR_FULL, so the dispatcher can say
 * "storage full" whichever filled; damage LMDB detects is SLUICE_ERR_CORRUPT like a failed
 * checksum; other system errors stay negative errno, as everywhere in sluice. */
static int from_lmdb(int rc)
{
    switch (rc) {
    case 0:
        return 0;
    case MDB_MAP_FULL:
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return SLUICE_ERR_FULL;
    case MDB_NOTFOUND:
        return SLUICE_ERR_NOT_FOUND;
    case MDB_KEYEXIST:
        return SLUICE_ERR_EXISTS;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
        return SLUICE_ERR_CORRUPT;
    case MDB_TXN_FULL:
    case MDB_PAGE_FULL:
    case MDB_CURSOR_FULL:
    case MDB_BAD_VALSIZE:
        return SLUICE_ERR_TOO_LARGE;
    default:
        return rc > 0 ? -rc : SLUICE_ERR_JOURNAL;
    }
}

/* Records "what: LMDB's reason" and returns the converted code. */
static int lmdb_fail(char *err, size_t errlen, int rc, const char *what)
{
    return err_set(err, errlen, from_lmdb(rc), "%s: %s", what, mdb_strerror(rc));
}

/* A write that fails for lack of room often reaches LMDB as a short write, which it reports as
 * EIO; this finds out whether the disk or the file size limit is what ran out, so the message
 * says so. Returns SLUICE_ERR_FULL with such a message, or lmdb_fail()'s result otherwise. */
static int storage_fail(const struct journal *j, int rc, char *err, size_t errlen)
{
    struct statvfs vfs;
    struct rlimit lim;
    struct stat st;
    if (rc != EIO && rc != ENOSPC && rc != EFBIG && rc != EDQUOT)
        return lmdb_fail(err, errlen, rc, "commit");
    if (statvfs(j->path, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < (1u << 20))
        return err_set(err, errlen, SLUICE_ERR_FULL,
                       "commit: the disk is full (%" PRIu64 " KiB free)",
                       (uint64_t)vfs.f_bavail * vfs.f_frsize >> 10);
    if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        stat(j->data_path, &st) == 0 && (uint64_t)st.st_size + (1u << 16) >= (uint64_t)lim.rlim_cur)
        return err_set(err, errlen, SLUICE_ERR_FULL,
                       "commit: the data file reached the file size limit of %" PRIu64 " bytes",
                       (uint64_t)lim.rlim_cur);
    return lmdb_fail(err, errlen, rc, "commit");
}

/* ---- small helpers --------------------------------------------------------------------------- */

static void put_be64(uint8_t *p, uint64_t v)
{
    journal_seq_key(v, p);
}

static uint64_t get_be64(const uint8_t *p)
{
    return journal_seq_from_key(p);
}

static size_t page_round(size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t p = page > 0 ? (size_t)page : 4096;
    return n < p ? p : n / p * p;
}

/* Begins a transaction, adopting a map another process grew since this one last looked. */
static int txn_begin(struct journal *j, unsigned flags, MDB_txn **txn)
{
    int rc = mdb_txn_begin(j->env, NULL, flags, txn);
    if (rc == MDB_MAP_RESIZED) {
        rc = mdb_env_set_mapsize(j->env, 0);
        if (rc == 0)
            rc = mdb_txn_begin(j->env, NULL, flags, txn);
    }
    return rc;
}

static MDB_val str_val(const char *s)
{
    return (MDB_val){.mv_size = strlen(s), .mv_data = (void *)s};
}

/* Reads a framed value under key into a checked payload pointing into the map (valid in txn). */
static int get_framed(MDB_txn *txn, MDB_dbi dbi, MDB_val key, const uint8_t **payload, size_t *len,
                      const char **why)
{
    MDB_val v;
    int rc = mdb_get(txn, dbi, &key, &v);
    if (rc == MDB_NOTFOUND)
        return SLUICE_ERR_NOT_FOUND;
    if (rc != 0) {
        *why = mdb_strerror(rc);
        return from_lmdb(rc);
    }
    return journal_record_decode(v.mv_data, v.mv_size, key.mv_data, key.mv_size, payload, len, why);
}

/* Stores a framed value under key, writing the payload straight into the map. */
static int put_framed(MDB_txn *txn, MDB_dbi dbi, MDB_val key, const void *a, size_t alen,
                      const void *b, size_t blen, unsigned flags)
{
    MDB_val v = {.mv_size = journal_record_size(alen + blen)};
    int rc = mdb_put(txn, dbi, &key, &v, flags | MDB_RESERVE);
    if (rc != 0)
        return rc;
    uint8_t *out = v.mv_data;
    if (alen)
        memcpy(out + JOURNAL_RECORD_HEADER, a, alen);
    if (blen)
        memcpy(out + JOURNAL_RECORD_HEADER + alen, b, blen);
    journal_record_seal(out, key.mv_data, key.mv_size, alen + blen);
    return 0;
}

/* ---- open and close -------------------------------------------------------------------------- */

/* Opens the three tables (creating them only in a journal being created) and checks the format
 * record (writing it only then). */
static int open_dbs(struct journal *j, bool create, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = txn_begin(j, create ? 0 : MDB_RDONLY, &txn);
    if (rc != 0)
        return lmdb_fail(err, errlen, rc, "begin a transaction");
    const char *names[] = {"log", "datasets", "meta"};
    MDB_dbi *dbis[] = {&j->log, &j->datasets, &j->meta};
    for (int i = 0; i < 3; i++) {
        rc = mdb_dbi_open(txn, names[i], create ? MDB_CREATE : 0, dbis[i]);
        if (rc == MDB_NOTFOUND) {
            mdb_txn_abort(txn);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "journal damaged: no '%s' table",
                           names[i]);
        }
        if (rc != 0) {
            mdb_txn_abort(txn);
            return lmdb_fail(err, errlen, rc, "open a table");
        }
    }
    const uint8_t *p;
    size_t len;
    const char *why = NULL;
    if (create) {
        uint8_t v[8];
        put_be64(v, FORMAT);
        rc = put_framed(txn, j->meta, str_val(META_FORMAT), v, 8, NULL, 0, 0);
        if (rc != 0) {
            mdb_txn_abort(txn);
            return lmdb_fail(err, errlen, rc, "write the format");
        }
    } else {
        rc = get_framed(txn, j->meta, str_val(META_FORMAT), &p, &len, &why);
        if (rc == SLUICE_ERR_NOT_FOUND) {
            mdb_txn_abort(txn);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "journal damaged: no format record in the meta table");
        } else if (rc < 0) {
            mdb_txn_abort(txn);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "journal damaged: format record: %s",
                           why);
        } else if (len != 8 || get_be64(p) != FORMAT) {
            uint64_t f = len == 8 ? get_be64(p) : 0;
            mdb_txn_abort(txn);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "journal format %" PRIu64 " is not one this build reads (%d)", f,
                           FORMAT);
        }
    }
    /* Committing, also a read-only transaction, keeps the table handles for later ones. */
    rc = mdb_txn_commit(txn);
    if (rc != 0)
        return lmdb_fail(err, errlen, rc, create ? "create the tables" : "open the tables");
    return 0;
}

/* Makes a new journal in WORK_DIR/journal.new (its three tables and its format record, in one
 * transaction) and renames it to WORK_DIR/journal: a crash leaves either no journal or a whole
 * one. The caller holds the work dir's lock. */
static int create_journal(struct journal *j, const struct journal_paths *p, char *err,
                          size_t errlen)
{
    int rc = journal_layout_fresh(p, err, errlen);
    if (rc < 0)
        return rc;
    struct journal fresh = {.read_only = false};
    rc = mdb_env_create(&fresh.env);
    if (rc != 0)
        return lmdb_fail(err, errlen, rc, "create the environment");
    rc = mdb_env_set_maxdbs(fresh.env, 4);
    if (rc == 0)
        rc = mdb_env_open(fresh.env, p->fresh, MDB_NOTLS, 0644);
    if (rc != 0) {
        mdb_env_close(fresh.env);
        return lmdb_fail(err, errlen, rc, "create the journal");
    }
    rc = open_dbs(&fresh, true, err, errlen);
    mdb_env_close(fresh.env);
    if (rc < 0)
        return rc;
    return journal_layout_publish(j->work_dir, p, NULL, 0, err, errlen);
}

/* Reads the start of the data file and checks its meta pages (check.h) before LMDB opens it. */
static int check_head(struct journal *j, struct journal_damage *d, uint64_t *file_size, char *err,
                      size_t errlen)
{
    int fd = open(j->data_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT && j->file_mode)
            return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "no journal here: %s is missing",
                           j->data_path);
        if (errno == ENOENT)
            return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                           "the journal's data file " ENV_DIR "/" JOURNAL_DATA_FILE " is missing");
        return err_set(err, errlen, -errno, "open %s: %s", j->data_path, strerror(errno));
    }
    struct stat st;
    uint8_t *head = NULL;
    ssize_t n = 0;
    int rc = 0;
    if (fstat(fd, &st) < 0) {
        rc = err_set(err, errlen, -errno, "open %s: %s", j->data_path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = err_set(err, errlen, SLUICE_ERR_CORRUPT, "journal damaged: %s is not a regular file",
                     j->data_path);
        goto out;
    }
    head = malloc(JOURNAL_CHECK_HEAD);
    if (!head) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "open: out of memory");
        goto out;
    }
    while ((size_t)n < JOURNAL_CHECK_HEAD) {
        ssize_t r = pread(fd, head + n, JOURNAL_CHECK_HEAD - (size_t)n, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = err_set(err, errlen, -errno, "read %s: %s", j->data_path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += r;
    }
    struct journal_file_info info;
    *file_size = (uint64_t)st.st_size;
    rc = journal_check_metas(head, (size_t)n, (uint64_t)st.st_size, &info, d);
    if (rc < 0)
        journal_damage_format(d, err, errlen);
out:
    free(head);
    close(fd);
    return rc;
}

/* The meta pages' transaction ids, to tell whether a writer committed meanwhile. */
static uint64_t metas_stamp(const uint8_t *map, size_t size)
{
    uint32_t psize;
    uint64_t t0, t1;
    if (size < JOURNAL_CHECK_HEAD / 32)
        return 0;
    memcpy(&psize, map + 40, 4);
    if (psize < 512 || psize > 32768 || size < (size_t)2 * psize)
        return 0;
    memcpy(&t0, map + 144, 8);
    memcpy(&t1, map + psize + 144, 8);
    return t0 > t1 ? t0 : t1;
}

/* Checks every page of the data file (check.h) while a read transaction holds the journal's
 * current state, so a writer that goes on meanwhile leaves the pages checked alone. A reader
 * whose check fails while a writer committed since tries again with the new state. */
static int check_pages(struct journal *j, struct journal_damage *d, char *err, size_t errlen)
{
    int rc = 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        MDB_txn *pin;
        rc = txn_begin(j, MDB_RDONLY, &pin);
        if (rc != 0)
            return lmdb_fail(err, errlen, rc, "begin a read transaction");
        int fd = open(j->data_path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            rc = err_set(err, errlen, -errno, "open %s: %s", j->data_path, strerror(errno));
            if (fd >= 0)
                close(fd);
            mdb_txn_abort(pin);
            return rc;
        }
        size_t size = (size_t)st.st_size;
        uint8_t *map = size ? mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0) : NULL;
        close(fd);
        if (size && map == MAP_FAILED) {
            rc = err_set(err, errlen, -errno, "map %s: %s", j->data_path, strerror(errno));
            mdb_txn_abort(pin);
            return rc;
        }
        uint64_t before = metas_stamp(map, size);
        if (j->progress)
            j->progress->phase = JOURNAL_PHASE_PAGES;
        rc = journal_check_pages(map, size, j->progress ? &j->progress->page : NULL, NULL, d);
        bool moved = metas_stamp(map, size) != before || before != mdb_txn_id(pin);
        if (map)
            munmap(map, size);
        mdb_txn_abort(pin);
        if (rc == SLUICE_ERR_NOMEM)
            return err_set(err, errlen, rc, "check the pages: out of memory");
        if (rc == 0 || !j->read_only || !moved)
            break;
    }
    if (rc < 0)
        journal_damage_format(d, err, errlen);
    return rc;
}

static const char no_journal_foreign[] =
    "no journal here (no " ENV_DIR "/), and the work dir is not empty: a journal is only created "
    "in an empty or new directory";

int journal_open_damage(const struct journal_opts *opts, struct journal **out,
                        struct journal_damage *d, char *err, size_t errlen)
{
    struct journal_paths paths;
    struct journal_damage unused;
    bool pages_checked = false;
    int rc;
    if (!d)
        d = &unused;
    memset(d, 0, sizeof *d);
    if ((!opts->work_dir || !*opts->work_dir) && (!opts->file || !*opts->file))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "no work dir given");
    bool file_mode = !opts->work_dir || !*opts->work_dir;
    if (file_mode && !opts->read_only)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a data file alone is opened read-only");
    if (!file_mode) {
        rc = journal_paths_init(&paths, opts->work_dir, err, errlen);
        if (rc < 0)
            return rc;
    }
    struct journal *j = calloc(1, sizeof *j);
    if (!j)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "open: out of memory");
    j->lock_fd = -1;
    j->read_only = opts->read_only;
    j->file_mode = file_mode;
    j->fault = opts->fault;
    j->fault_user = opts->fault_user;
    j->progress = opts->progress;
    j->map_max = page_round(opts->map_max ? opts->map_max : JOURNAL_DEFAULT_MAP_MAX);
    size_t map_size = page_round(opts->map_size ? opts->map_size : JOURNAL_DEFAULT_MAP_SIZE);
    if (map_size > j->map_max)
        map_size = j->map_max;
    pthread_mutex_init(&j->mu, NULL);
    j->work_dir = strdup(file_mode ? opts->file : opts->work_dir);
    j->path = strdup(file_mode ? opts->file : paths.dir);
    j->data_path = strdup(file_mode ? opts->file : paths.data);
    if (!j->work_dir || !j->path || !j->data_path) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "open: out of memory");
        goto fail_alloc;
    }
    if (j->progress)
        j->progress->phase = JOURNAL_PHASE_OPEN;

    if (!j->read_only) {
        enum journal_presence presence;
        rc = journal_layout_lock(j->work_dir, &paths, &j->lock_fd, err, errlen);
        if (rc == 0)
            rc = journal_layout_probe(j->work_dir, &paths, &presence, err, errlen);
        if (rc < 0)
            goto fail_alloc;
        if (presence == JOURNAL_FOREIGN) {
            rc = err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "%s", no_journal_foreign);
            goto fail_alloc;
        }
        if (presence == JOURNAL_FRESH && !opts->create) {
            rc = err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "no journal here");
            goto fail_alloc;
        }
        if (presence == JOURNAL_FRESH) {
            rc = create_journal(j, &paths, err, errlen);
            if (rc < 0)
                goto fail_alloc;
        }
        if (opts->gate) {
            rc = opts->gate(opts->gate_user, err, errlen);
            if (rc < 0)
                goto fail_alloc;
            pages_checked = rc > 0;
        }
    } else if (!file_mode) {
        enum journal_presence presence;
        rc = journal_layout_probe(j->work_dir, &paths, &presence, err, errlen);
        if (rc < 0)
            goto fail_alloc;
        if (presence != JOURNAL_PRESENT) {
            rc = err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "%s",
                         presence == JOURNAL_FOREIGN ? no_journal_foreign : "no journal here");
            goto fail_alloc;
        }
    }

    uint64_t file_size = 0;
    rc = check_head(j, d, &file_size, err, errlen);
    if (rc < 0)
        goto fail_alloc;
    /* A reader maps the file as it is rather than trusting the map size its meta page names. */
    if (j->read_only)
        map_size = page_round((size_t)file_size + (size_t)sysconf(_SC_PAGESIZE) - 1);
    rc = mdb_env_create(&j->env);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "create the environment");
        goto fail_alloc;
    }
    rc = mdb_env_set_maxdbs(j->env, 4);
    if (rc == 0)
        rc = mdb_env_set_mapsize(j->env, map_size);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "configure the environment");
        goto fail_env;
    }
    /* MDB_NOTLS: a read transaction is tied to the call that made it, not to a thread's slot,
     * so several threads may read. Syncing stays on: no MDB_NOSYNC, no MDB_NOMETASYNC. A data
     * file alone (a backup) has no lock file and no other user. LMDB reads only the meta pages
     * here, which check_head() checked. */
    unsigned flags = MDB_NOTLS | (j->read_only ? MDB_RDONLY : 0);
    if (file_mode)
        flags |= MDB_NOSUBDIR | MDB_NOLOCK;
    rc = mdb_env_open(j->env, j->path, flags, 0644);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "open");
        goto fail_env;
    }
    if (!j->read_only) {
        /* Reader slots of processes that died (a killed `sluice journal dump`) are freed. */
        int dead;
        mdb_reader_check(j->env, &dead);
    }
    /* Under the writer's lock nothing changes the file after the gate checked it. */
    rc = pages_checked ? 0 : check_pages(j, d, err, errlen);
    if (rc == 0) {
        if (j->progress)
            j->progress->phase = JOURNAL_PHASE_READ;
        rc = open_dbs(j, false, err, errlen);
    }
    if (rc < 0)
        goto fail_env;
    *out = j;
    return 0;

fail_env:
    mdb_env_close(j->env);
fail_alloc:
    if (j->lock_fd >= 0)
        close(j->lock_fd);
    pthread_mutex_destroy(&j->mu);
    free(j->work_dir);
    free(j->path);
    free(j->data_path);
    free(j);
    return rc;
}

int journal_open(const struct journal_opts *opts, struct journal **out, char *err, size_t errlen)
{
    return journal_open_damage(opts, out, NULL, err, errlen);
}

void journal_close(struct journal *j)
{
    if (!j)
        return;
    mdb_env_close(j->env);
    if (j->lock_fd >= 0)
        close(j->lock_fd);
    pthread_mutex_destroy(&j->mu);
    free(j->work_dir);
    free(j->path);
    free(j->data_path);
    free(j);
}

const char *journal_work_dir(const struct journal *j)
{
    return j->work_dir;
}

const char *journal_data_path(const struct journal *j)
{
    return j->data_path;
}

/* ---- writing --------------------------------------------------------------------------------- */

/* The sequence number the next record must have: after the last record, else after the
 * snapshot, else 1. */
static int expected_seq(struct journal *j, MDB_txn *txn, uint64_t *out)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, j->log, &cur);
    if (rc != 0)
        return rc;
    rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    mdb_cursor_close(cur);
    if (rc == 0) {
        *out = k.mv_size == 8 ? get_be64(k.mv_data) + 1 : 0;
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    MDB_val key = str_val(META_SNAPSHOT);
    rc = mdb_get(txn, j->meta, &key, &v);
    if (rc == 0) {
        *out = v.mv_size >= JOURNAL_RECORD_HEADER + 8
                   ? get_be64((const uint8_t *)v.mv_data + JOURNAL_RECORD_HEADER) + 1
                   : 0;
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    *out = 1;
    return 0;
}

/* Deletes every record up to seq. */
static int truncate_log(struct journal *j, MDB_txn *txn, uint64_t seq)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, j->log, &cur);
    if (rc != 0)
        return rc;
    while ((rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) == 0) {
        if (k.mv_size == 8 && get_be64(k.mv_data) > seq)
            break;
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* One attempt at the whole batch in one transaction. Sets *map_full when the map must grow. */
static int append_txn(struct journal *j, uint64_t first, const struct journal_record *recs,
                      size_t n, const struct journal_snapshot *snap, bool *map_full, char *err,
                      size_t errlen)
{
    MDB_txn *txn;
    char what[128];
    uint64_t expect;
    *map_full = false;
    int rc = txn_begin(j, 0, &txn);
    if (rc != 0)
        return lmdb_fail(err, errlen, rc, "begin a write transaction");
    rc = expected_seq(j, txn, &expect);
    if (rc != 0) {
        snprintf(what, sizeof what, "find the last record");
        goto lmdb_failed;
    }
    if (first != expect) {
        mdb_txn_abort(txn);
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "append: record %" PRIu64 " does not follow the journal (next is %" PRIu64
                       ")",
                       first, expect);
    }
    uint64_t last = first + n - 1; /* first - 1 when n is 0 */
    if (snap && snap->seq > last) {
        mdb_txn_abort(txn);
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "append: a snapshot at %" PRIu64 " is past the last record %" PRIu64,
                       snap->seq, last);
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t key[8];
        journal_seq_key(first + i, key);
        /* MDB_APPEND also refuses a key that is not past the last one. */
        rc = put_framed(txn, j->log, (MDB_val){8, key}, recs[i].data, recs[i].len, NULL, 0,
                        MDB_APPEND);
        if (rc != 0) {
            snprintf(what, sizeof what, "write record %" PRIu64, first + i);
            goto lmdb_failed;
        }
        if (recs[i].dataset_id) {
            size_t idlen = strlen(recs[i].dataset_id);
            if (idlen == 0 || idlen > JOURNAL_ID_MAX) {
                mdb_txn_abort(txn);
                return err_set(err, errlen, SLUICE_ERR_INVALID, "append: a dataset id of %zu bytes",
                               idlen);
            }
            rc = put_framed(txn, j->datasets, str_val(recs[i].dataset_id), recs[i].dataset,
                            recs[i].dataset_len, NULL, 0, 0);
            if (rc != 0) {
                snprintf(what, sizeof what, "write dataset '%s'", recs[i].dataset_id);
                goto lmdb_failed;
            }
        }
    }
    if (snap) {
        uint8_t seq[8];
        put_be64(seq, snap->seq);
        rc = put_framed(txn, j->meta, str_val(META_SNAPSHOT), seq, 8, snap->data, snap->len, 0);
        if (rc != 0) {
            snprintf(what, sizeof what, "write the snapshot");
            goto lmdb_failed;
        }
        rc = truncate_log(j, txn, snap->seq);
        if (rc != 0) {
            snprintf(what, sizeof what, "delete the records the snapshot covers");
            goto lmdb_failed;
        }
    }
    if (j->fault)
        j->fault(JOURNAL_FAULT_BEFORE_COMMIT, j->fault_user);
    rc = mdb_txn_commit(txn);
    /* The transaction is gone now, committed or not. */
    if (rc != 0) {
        *map_full = rc == MDB_MAP_FULL;
        return storage_fail(j, rc, err, errlen);
    }
    if (j->fault)
        j->fault(JOURNAL_FAULT_AFTER_COMMIT, j->fault_user);
    return 0;

lmdb_failed:
    mdb_txn_abort(txn);
    *map_full = rc == MDB_MAP_FULL;
    return lmdb_fail(err, errlen, rc, what);
}

static void human_size(size_t n, char *buf, size_t len)
{
    if (n >= ((size_t)1 << 30) && n % ((size_t)1 << 30) == 0)
        snprintf(buf, len, "%zu GiB", n >> 30);
    else if (n >= ((size_t)1 << 20))
        snprintf(buf, len, "%zu MiB", n >> 20);
    else
        snprintf(buf, len, "%zu KiB", n >> 10);
}

/* Doubles the map, up to the ceiling. No transaction of this process is open (the mutex). */
static int grow(struct journal *j, char *err, size_t errlen)
{
    MDB_envinfo info;
    char size[32];
    int rc = mdb_env_info(j->env, &info);
    if (rc != 0)
        return lmdb_fail(err, errlen, rc, "read the map size");
    size_t cur = info.me_mapsize;
    if (cur >= j->map_max) {
        human_size(j->map_max, size, sizeof size);
        return err_set(err, errlen, SLUICE_ERR_FULL,
                       "append: the journal is full: it reached its size limit of %s", size);
    }
    size_t next = cur > j->map_max / 2 ? j->map_max : page_round(cur * 2);
    rc = mdb_env_set_mapsize(j->env, next);
    if (rc != 0)
        return lmdb_fail(err, errlen, rc, "grow the map");
    return 0;
}

int journal_append(struct journal *j, uint64_t first_seq, const struct journal_record *recs,
                   size_t n, const struct journal_snapshot *snap, char *err, size_t errlen)
{
    if (j->read_only)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "append: the journal is open read-only");
    if (n == 0 && !snap)
        return 0;
    pthread_mutex_lock(&j->mu);
    int rc;
    for (;;) {
        bool map_full;
        rc = append_txn(j, first_seq, recs, n, snap, &map_full, err, errlen);
        if (rc == 0 || !map_full)
            break;
        rc = grow(j, err, errlen);
        if (rc < 0)
            break;
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int journal_meta_put_u64(struct journal *j, const char *key, uint64_t value, char *err,
                         size_t errlen)
{
    if (j->read_only)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "write: the journal is open read-only");
    size_t klen = strlen(key);
    if (klen == 0 || klen > JOURNAL_ID_MAX || strcmp(key, META_SNAPSHOT) == 0 ||
        strcmp(key, META_FORMAT) == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "write: '%s' is not a key to set", key);
    uint8_t v[8];
    put_be64(v, value);
    pthread_mutex_lock(&j->mu);
    int rc;
    for (;;) {
        MDB_txn *txn;
        rc = txn_begin(j, 0, &txn);
        if (rc != 0) {
            rc = lmdb_fail(err, errlen, rc, "begin a write transaction");
            break;
        }
        rc = put_framed(txn, j->meta, str_val(key), v, 8, NULL, 0, 0);
        if (rc != 0)
            mdb_txn_abort(txn);
        else
            rc = mdb_txn_commit(txn);
        if (rc == MDB_MAP_FULL) {
            rc = grow(j, err, errlen);
            if (rc == 0)
                continue;
            break;
        }
        if (rc != 0)
            rc = lmdb_fail(err, errlen, rc, "write meta");
        break;
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* ---- reading --------------------------------------------------------------------------------- */

/* Copies a checked value out of its transaction. */
static int copy_out(const uint8_t *p, size_t len, uint8_t **data, size_t *dlen)
{
    uint8_t *c = malloc(len ? len : 1);
    if (!c)
        return SLUICE_ERR_NOMEM;
    if (len)
        memcpy(c, p, len);
    *data = c;
    *dlen = len;
    return 0;
}

/* Reads the framed value of key in dbi in a read transaction of its own and copies it out
 * (*data is malloc'd). Returns 0; SLUICE_ERR_NOT_FOUND; SLUICE_ERR_CORRUPT with the reason in
 * *why; SLUICE_ERR_NOMEM; or an LMDB failure already described in err (*why left NULL). */
static int read_framed(struct journal *j, MDB_dbi dbi, const char *key, uint8_t **data, size_t *len,
                       const char **why, char *err, size_t errlen)
{
    MDB_txn *txn;
    *why = NULL;
    pthread_mutex_lock(&j->mu);
    int rc = txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    const uint8_t *p;
    size_t n;
    rc = get_framed(txn, dbi, str_val(key), &p, &n, why);
    if (rc == SLUICE_ERR_TRUNCATED)
        rc = SLUICE_ERR_CORRUPT;
    if (rc == 0)
        rc = copy_out(p, n, data, len);
    mdb_txn_abort(txn);
out:
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* Finishes a read_framed() failure: "<what>: <why>" for damage, out of memory, or the LMDB
 * message already in err. NOT_FOUND passes through untouched. */
static int read_failed(int rc, const char *why, const char *what, char *err, size_t errlen)
{
    if (rc == SLUICE_ERR_NOMEM)
        return err_set(err, errlen, rc, "%s: out of memory", what);
    if (rc != SLUICE_ERR_NOT_FOUND && why)
        return err_set(err, errlen, rc, "%s: %s", what, why);
    return rc;
}

int journal_meta_get_u64(struct journal *j, const char *key, uint64_t *value, char *err,
                         size_t errlen)
{
    uint8_t *data = NULL;
    size_t len = 0;
    const char *why = NULL;
    char what[96];
    snprintf(what, sizeof what, "meta '%s'", key);
    int rc = read_framed(j, j->meta, key, &data, &len, &why, err, errlen);
    if (rc == 0 && len != 8) {
        why = "not an 8-byte number";
        rc = SLUICE_ERR_CORRUPT;
    }
    if (rc == 0)
        *value = get_be64(data);
    free(data);
    return rc == 0 ? 0 : read_failed(rc, why, what, err, errlen);
}

int journal_snapshot_read(struct journal *j, uint64_t *seq, uint8_t **data, size_t *len, char *err,
                          size_t errlen)
{
    uint8_t *raw = NULL;
    size_t n = 0;
    const char *why = NULL;
    int rc = read_framed(j, j->meta, META_SNAPSHOT, &raw, &n, &why, err, errlen);
    if (rc == 0 && n < 8) {
        why = "shorter than its sequence number";
        rc = SLUICE_ERR_CORRUPT;
    }
    if (rc == 0) {
        *seq = get_be64(raw);
        rc = copy_out(raw + 8, n - 8, data, len);
    }
    free(raw);
    return rc == 0 ? 0 : read_failed(rc, why, "snapshot", err, errlen);
}

int journal_dataset_read(struct journal *j, const char *id, uint8_t **data, size_t *len, char *err,
                         size_t errlen)
{
    size_t idlen = strlen(id);
    if (idlen == 0 || idlen > JOURNAL_ID_MAX)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                       "dataset '%.64s' is not in the datasets table", id);
    const char *why = NULL;
    int rc = read_framed(j, j->datasets, id, data, len, &why, err, errlen);
    if (rc == SLUICE_ERR_NOT_FOUND)
        return err_set(err, errlen, rc, "dataset '%s' is not in the datasets table", id);
    if (rc != 0) {
        char what[JOURNAL_ID_MAX + 16];
        snprintf(what, sizeof what, "dataset '%s'", id);
        return read_failed(rc, why, what, err, errlen);
    }
    return 0;
}

struct replay {
    journal_damage_cb on_damage;
    void *user;
    int first; /* 0, or SLUICE_ERR_CORRUPT once damage was seen */
    char *err;
    size_t errlen;
};

/* Reports one piece of damage. Returns nonzero when the replay must stop. */
static int damage(struct replay *r, uint64_t seq, const char *why)
{
    if (r->first == 0)
        err_set(r->err, r->errlen, SLUICE_ERR_CORRUPT, "%s", why);
    r->first = SLUICE_ERR_CORRUPT;
    if (!r->on_damage)
        return 1;
    r->on_damage(r->user, seq, why);
    return 0;
}

int journal_replay(struct journal *j, uint64_t from, journal_record_cb on_record,
                   journal_damage_cb on_damage, void *user, uint64_t *last, char *err,
                   size_t errlen)
{
    return journal_replay_to(j, from, UINT64_MAX, on_record, on_damage, user, last, err, errlen);
}

int journal_replay_to(struct journal *j, uint64_t from, uint64_t to, journal_record_cb on_record,
                      journal_damage_cb on_damage, void *user, uint64_t *last, char *err,
                      size_t errlen)
{
    struct replay r = {.on_damage = on_damage, .user = user, .err = err, .errlen = errlen};
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    char why[SLUICE_ERRMSG_SIZE];
    uint64_t expect = from, seen = from - 1;
    int rc, stop = 0;
    pthread_mutex_lock(&j->mu);
    rc = txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    rc = mdb_cursor_open(txn, j->log, &cur);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "open a cursor");
        goto out_txn;
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !stop;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8) {
            snprintf(why, sizeof why, "a record after %" PRIu64 " has a key of %zu bytes", seen,
                     k.mv_size);
            stop = damage(&r, seen + 1, why);
            continue;
        }
        uint64_t seq = get_be64(k.mv_data);
        if (seq > to)
            break;
        if (j->progress)
            j->progress->seq = seq;
        if (seq < from) {
            snprintf(why, sizeof why,
                     "record %" PRIu64 " is still in the log, but the snapshot covers it", seq);
            stop = damage(&r, seq, why);
            continue;
        }
        if (seq > expect) {
            if (seq == expect + 1)
                snprintf(why, sizeof why, "record %" PRIu64 " is missing", expect);
            else
                snprintf(why, sizeof why, "records %" PRIu64 " to %" PRIu64 " are missing", expect,
                         seq - 1);
            if ((stop = damage(&r, expect, why)))
                continue;
        }
        expect = seq + 1;
        seen = seq;
        const uint8_t *p;
        size_t n;
        const char *reason;
        if (journal_record_decode(v.mv_data, v.mv_size, k.mv_data, 8, &p, &n, &reason) < 0) {
            snprintf(why, sizeof why, "record %" PRIu64 ": %s", seq, reason);
            stop = damage(&r, seq, why);
            continue;
        }
        int crc = on_record(user, seq, p, n);
        if (crc != 0) {
            rc = crc;
            goto out_cursor;
        }
    }
    if (rc != 0 && rc != MDB_NOTFOUND) {
        rc = lmdb_fail(err, errlen, rc, "read the log");
        goto out_cursor;
    }
    rc = r.first;
out_cursor:
    mdb_cursor_close(cur);
out_txn:
    mdb_txn_abort(txn);
out:
    pthread_mutex_unlock(&j->mu);
    if (last)
        *last = seen;
    return rc;
}

int journal_datasets_each(struct journal *j, journal_dataset_cb cb, void *user, char *err,
                          size_t errlen)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    pthread_mutex_lock(&j->mu);
    int rc = txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    rc = mdb_cursor_open(txn, j->datasets, &cur);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "open a cursor");
        goto out_txn;
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        char id[JOURNAL_ID_MAX + 1];
        size_t idlen = k.mv_size <= JOURNAL_ID_MAX ? k.mv_size : JOURNAL_ID_MAX;
        memcpy(id, k.mv_data, idlen);
        id[idlen] = '\0';
        const uint8_t *p;
        size_t n;
        const char *why;
        int drc = journal_record_decode(v.mv_data, v.mv_size, k.mv_data, k.mv_size, &p, &n, &why);
        if (drc < 0) {
            rc = err_set(err, errlen, SLUICE_ERR_CORRUPT, "dataset '%s': %s", id, why);
            goto out_cursor;
        }
        int crc = cb(user, id, p, n);
        if (crc != 0) {
            rc = crc;
            goto out_cursor;
        }
    }
    rc = rc == MDB_NOTFOUND ? 0 : lmdb_fail(err, errlen, rc, "read the datasets");
out_cursor:
    mdb_cursor_close(cur);
out_txn:
    mdb_txn_abort(txn);
out:
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int journal_check_meta(struct journal *j, char *err, size_t errlen)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    pthread_mutex_lock(&j->mu);
    int rc = txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    rc = mdb_cursor_open(txn, j->meta, &cur);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "open a cursor");
        goto out_txn;
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        char key[JOURNAL_ID_MAX + 1];
        size_t klen = k.mv_size <= JOURNAL_ID_MAX ? k.mv_size : JOURNAL_ID_MAX;
        memcpy(key, k.mv_data, klen);
        key[klen] = '\0';
        const uint8_t *p;
        size_t n;
        const char *why;
        if (journal_record_decode(v.mv_data, v.mv_size, k.mv_data, k.mv_size, &p, &n, &why) < 0) {
            rc = err_set(err, errlen, SLUICE_ERR_CORRUPT, "meta '%s': %s", key, why);
            goto out_cursor;
        }
        bool number = strcmp(key, META_FORMAT) == 0 || strcmp(key, "incarnation") == 0;
        if ((number && n != 8) || (strcmp(key, META_SNAPSHOT) == 0 && n < 8)) {
            rc =
                err_set(err, errlen, SLUICE_ERR_CORRUPT, "meta '%s': a value of %zu bytes", key, n);
            goto out_cursor;
        }
    }
    rc = rc == MDB_NOTFOUND ? 0 : lmdb_fail(err, errlen, rc, "read the meta table");
out_cursor:
    mdb_cursor_close(cur);
out_txn:
    mdb_txn_abort(txn);
out:
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* One attempt at journal_drop_tail(). */
static int drop_tail_txn(struct journal *j, uint64_t from, journal_keep_cb keep, void *user,
                         uint64_t *records, uint64_t *datasets, bool *map_full, char *err,
                         size_t errlen)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    uint64_t nrec = 0, nds = 0;
    const char *what = "begin a write transaction";
    char(*ids)[JOURNAL_ID_MAX + 1] = NULL;
    size_t nids = 0, cap = 0;
    *map_full = false;
    int rc = txn_begin(j, 0, &txn);
    if (rc != 0)
        return lmdb_fail(err, errlen, rc, what);
    /* The records, from the last one back. */
    what = "delete records";
    rc = mdb_cursor_open(txn, j->log, &cur);
    while (rc == 0 && (rc = mdb_cursor_get(cur, &k, &v, MDB_LAST)) == 0) {
        if (k.mv_size == 8 && get_be64(k.mv_data) < from)
            break;
        rc = mdb_cursor_del(cur, 0);
        nrec += rc == 0;
    }
    if (cur)
        mdb_cursor_close(cur);
    cur = NULL;
    if (rc == MDB_NOTFOUND)
        rc = 0;
    /* The dataset definitions keep() rejects: their ids first, then the deletions. */
    if (rc == 0) {
        what = "delete dataset definitions";
        rc = mdb_cursor_open(txn, j->datasets, &cur);
    }
    for (int op = MDB_FIRST; rc == 0 && (rc = mdb_cursor_get(cur, &k, &v, op)) == 0;
         op = MDB_NEXT) {
        size_t idlen = k.mv_size <= JOURNAL_ID_MAX ? k.mv_size : JOURNAL_ID_MAX;
        char id[JOURNAL_ID_MAX + 1];
        memcpy(id, k.mv_data, idlen);
        id[idlen] = '\0';
        if (keep(user, id))
            continue;
        if (nids == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            void *grown = realloc(ids, ncap * sizeof *ids);
            if (!grown) {
                rc = ENOMEM;
                break;
            }
            ids = grown;
            cap = ncap;
        }
        memcpy(ids[nids++], id, idlen + 1);
    }
    if (cur)
        mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND)
        rc = 0;
    for (size_t i = 0; rc == 0 && i < nids; i++) {
        MDB_val key = str_val(ids[i]);
        rc = mdb_del(txn, j->datasets, &key, NULL);
        nds += rc == 0;
    }
    free(ids);
    if (rc != 0) {
        mdb_txn_abort(txn);
        *map_full = rc == MDB_MAP_FULL;
        return lmdb_fail(err, errlen, rc, what);
    }
    rc = mdb_txn_commit(txn);
    if (rc != 0) {
        *map_full = rc == MDB_MAP_FULL;
        return storage_fail(j, rc, err, errlen);
    }
    if (records)
        *records = nrec;
    if (datasets)
        *datasets = nds;
    return 0;
}

int journal_drop_tail(struct journal *j, uint64_t from, journal_keep_cb keep, void *user,
                      uint64_t *records, uint64_t *datasets, char *err, size_t errlen)
{
    if (j->read_only)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "cut: the journal is open read-only");
    pthread_mutex_lock(&j->mu);
    int rc;
    for (;;) {
        bool map_full;
        rc = drop_tail_txn(j, from, keep, user, records, datasets, &map_full, err, errlen);
        if (rc == 0 || !map_full)
            break;
        rc = grow(j, err, errlen);
        if (rc < 0)
            break;
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int journal_copy(struct journal *j, int fd, char *err, size_t errlen)
{
    pthread_mutex_lock(&j->mu);
    int rc;
    /* The copy begins a read transaction of its own, which fails when a writer grew the map
     * past this reader's: adopt the new size and start the copy over. */
    for (int attempt = 0;; attempt++) {
        MDB_txn *txn;
        rc = txn_begin(j, MDB_RDONLY, &txn);
        if (rc != 0)
            break;
        mdb_txn_abort(txn);
        rc = mdb_env_copyfd2(j->env, fd, MDB_CP_COMPACT);
        if (rc != MDB_MAP_RESIZED || attempt == 4)
            break;
        if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
            rc = errno;
            break;
        }
    }
    pthread_mutex_unlock(&j->mu);
    if (rc != 0)
        return lmdb_fail(err, errlen, rc, "copy");
    if (fsync(fd) < 0)
        return err_set(err, errlen, -errno, "copy: sync: %s", strerror(errno));
    return 0;
}

int journal_get_info(struct journal *j, struct journal_info *info, char *err, size_t errlen)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    MDB_stat st;
    MDB_envinfo ei;
    MDB_val k, v;
    memset(info, 0, sizeof *info);
    pthread_mutex_lock(&j->mu);
    int rc = txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    if ((rc = mdb_stat(txn, j->log, &st)) != 0)
        goto failed;
    info->records = st.ms_entries;
    if ((rc = mdb_stat(txn, j->datasets, &st)) != 0)
        goto failed;
    info->datasets = st.ms_entries;
    if ((rc = mdb_cursor_open(txn, j->log, &cur)) != 0)
        goto failed;
    if (mdb_cursor_get(cur, &k, &v, MDB_FIRST) == 0 && k.mv_size == 8)
        info->first_seq = get_be64(k.mv_data);
    if (mdb_cursor_get(cur, &k, &v, MDB_LAST) == 0 && k.mv_size == 8)
        info->last_seq = get_be64(k.mv_data);
    mdb_cursor_close(cur);
    k = str_val(META_SNAPSHOT);
    if (mdb_get(txn, j->meta, &k, &v) == 0 && v.mv_size >= JOURNAL_RECORD_HEADER + 8)
        info->snapshot_seq = get_be64((const uint8_t *)v.mv_data + JOURNAL_RECORD_HEADER);
    if ((rc = mdb_env_info(j->env, &ei)) != 0 || (rc = mdb_env_stat(j->env, &st)) != 0)
        goto failed;
    info->map_size = ei.me_mapsize;
    info->map_used = (ei.me_last_pgno + 1) * (size_t)st.ms_psize;
    mdb_txn_abort(txn);
    pthread_mutex_unlock(&j->mu);
    return 0;
failed:
    rc = lmdb_fail(err, errlen, rc, "read the journal's size");
    mdb_txn_abort(txn);
out:
    pthread_mutex_unlock(&j->mu);
    return rc;
}
