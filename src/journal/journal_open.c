/* Opening, checking and closing the LMDB journal: creating a new one, the checks of its head and
 * pages before LMDB maps it (the damage report of journal_open_damage), the tables and the format
 * record, and the work dir's paths. */
#include "journal_internal.h"

#include "layout.h"
#include "record.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ENV_DIR JOURNAL_ENV_DIR
#define FORMAT 1

/* Opens the three tables (creating them only in a journal being created) and checks the format
 * record (writing it only then). */
static int open_dbs(struct journal *j, bool create, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = journal_txn_begin(j, create ? 0 : MDB_RDONLY, &txn);
    if (rc != 0)
        return journal_lmdb_fail(err, errlen, rc, "begin a transaction");
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
            return journal_lmdb_fail(err, errlen, rc, "open a table");
        }
    }
    const uint8_t *p;
    size_t len;
    const char *why = NULL;
    if (create) {
        uint8_t v[8];
        journal_put_be64(v, FORMAT);
        rc = journal_put_framed(txn, j->meta, journal_str_val(JOURNAL_META_FORMAT), v, 8, NULL, 0,
                                0);
        if (rc != 0) {
            mdb_txn_abort(txn);
            return journal_lmdb_fail(err, errlen, rc, "write the format");
        }
    } else {
        rc = journal_get_framed(txn, j->meta, journal_str_val(JOURNAL_META_FORMAT), &p, &len, &why);
        if (rc == SLUICE_ERR_NOT_FOUND) {
            mdb_txn_abort(txn);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "journal damaged: no format record in the meta table");
        } else if (rc < 0) {
            mdb_txn_abort(txn);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "journal damaged: format record: %s",
                           why);
        } else if (len != 8 || journal_get_be64(p) != FORMAT) {
            uint64_t f = len == 8 ? journal_get_be64(p) : 0;
            mdb_txn_abort(txn);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "journal format %" PRIu64 " is not one this build reads (%d)", f,
                           FORMAT);
        }
    }
    /* Committing, also a read-only transaction, keeps the table handles for later ones. */
    rc = mdb_txn_commit(txn);
    if (rc != 0)
        return journal_lmdb_fail(err, errlen, rc, create ? "create the tables" : "open the tables");
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
        return journal_lmdb_fail(err, errlen, rc, "create the environment");
    rc = mdb_env_set_maxdbs(fresh.env, 4);
    if (rc == 0)
        rc = mdb_env_open(fresh.env, p->fresh, MDB_NOTLS, 0644);
    if (rc != 0) {
        mdb_env_close(fresh.env);
        return journal_lmdb_fail(err, errlen, rc, "create the journal");
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
        rc = journal_txn_begin(j, MDB_RDONLY, &pin);
        if (rc != 0)
            return journal_lmdb_fail(err, errlen, rc, "begin a read transaction");
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

/* Frees what a journal handle holds besides its LMDB environment: the lock file, the mutex,
 * the paths and the handle. */
static void release_handle(struct journal *j)
{
    if (j->lock_fd >= 0)
        close(j->lock_fd);
    pthread_mutex_destroy(&j->mu);
    free(j->work_dir);
    free(j->path);
    free(j->data_path);
    free(j);
}

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
    j->map_max = journal_page_round(opts->map_max ? opts->map_max : JOURNAL_DEFAULT_MAP_MAX);
    size_t map_size =
        journal_page_round(opts->map_size ? opts->map_size : JOURNAL_DEFAULT_MAP_SIZE);
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
        map_size = journal_page_round((size_t)file_size + (size_t)sysconf(_SC_PAGESIZE) - 1);
    rc = mdb_env_create(&j->env);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "create the environment");
        goto fail_alloc;
    }
    rc = mdb_env_set_maxdbs(j->env, 4);
    if (rc == 0)
        rc = mdb_env_set_mapsize(j->env, map_size);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "configure the environment");
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
        rc = journal_lmdb_fail(err, errlen, rc, "open");
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
    release_handle(j);
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
    release_handle(j);
}

const char *journal_work_dir(const struct journal *j)
{
    return j->work_dir;
}

const char *journal_data_path(const struct journal *j)
{
    return j->data_path;
}
