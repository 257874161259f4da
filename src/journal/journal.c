/* The LMDB journal: LMDB's errors, appends and meta values, reads and replay, dropping the tail,
 * copies and sizes (journal_open.c opens and closes it). Every call takes the journal's mutex,
 * begins one transaction, and ends it before returning: nothing read from the map is used after its
 * transaction ends (values are copied out or handed to a callback inside it), and no transaction is
 * touched after mdb_txn_commit(), which frees it even when it fails.
 *
 * Failure modes: a write that finds the map full aborts, doubles the map (up to the ceiling) and
 * runs again from the start; at the ceiling, or on a full disk, it fails with SLUICE_ERR_FULL.
 * A failed commit leaves the previous state of the journal intact: LMDB only switches to the new
 * pages by writing a meta page after the rest is on disk. */
#include "journal_internal.h"

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
int journal_lmdb_fail(char *err, size_t errlen, int rc, const char *what)
{
    return err_set(err, errlen, from_lmdb(rc), "%s: %s", what, mdb_strerror(rc));
}

/* A write that fails for lack of room often reaches LMDB as a short write, which it reports as
 * EIO; this finds out whether the disk or the file size limit is what ran out, so the message
 * says so. Returns SLUICE_ERR_FULL with such a message, or journal_lmdb_fail()'s result otherwise.
 */
static int storage_fail(const struct journal *j, int rc, char *err, size_t errlen)
{
    struct statvfs vfs;
    struct rlimit lim;
    struct stat st;
    if (rc != EIO && rc != ENOSPC && rc != EFBIG && rc != EDQUOT)
        return journal_lmdb_fail(err, errlen, rc, "commit");
    if (statvfs(j->path, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < (1u << 20))
        return err_set(err, errlen, SLUICE_ERR_FULL,
                       "commit: the disk is full (%" PRIu64 " KiB free)",
                       (uint64_t)vfs.f_bavail * vfs.f_frsize >> 10);
    if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        stat(j->data_path, &st) == 0 && (uint64_t)st.st_size + (1u << 16) >= (uint64_t)lim.rlim_cur)
        return err_set(err, errlen, SLUICE_ERR_FULL,
                       "commit: the data file reached the file size limit of %" PRIu64 " bytes",
                       (uint64_t)lim.rlim_cur);
    return journal_lmdb_fail(err, errlen, rc, "commit");
}

/* ---- small helpers --------------------------------------------------------------------------- */

void journal_put_be64(uint8_t *p, uint64_t v)
{
    journal_seq_key(v, p);
}

uint64_t journal_get_be64(const uint8_t *p)
{
    return journal_seq_from_key(p);
}

size_t journal_page_round(size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t p = page > 0 ? (size_t)page : 4096;
    return n < p ? p : n / p * p;
}

/* Begins a transaction, adopting a map another process grew since this one last looked. */
int journal_txn_begin(struct journal *j, unsigned flags, MDB_txn **txn)
{
    int rc = mdb_txn_begin(j->env, NULL, flags, txn);
    if (rc == MDB_MAP_RESIZED) {
        rc = mdb_env_set_mapsize(j->env, 0);
        if (rc == 0)
            rc = mdb_txn_begin(j->env, NULL, flags, txn);
    }
    return rc;
}

MDB_val journal_str_val(const char *s)
{
    return (MDB_val){.mv_size = strlen(s), .mv_data = (void *)s};
}

/* Reads a framed value under key into a checked payload pointing into the map (valid in txn). */
int journal_get_framed(MDB_txn *txn, MDB_dbi dbi, MDB_val key, const uint8_t **payload, size_t *len,
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
int journal_put_framed(MDB_txn *txn, MDB_dbi dbi, MDB_val key, const void *a, size_t alen,
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
        *out = k.mv_size == 8 ? journal_get_be64(k.mv_data) + 1 : 0;
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    MDB_val key = journal_str_val(JOURNAL_META_SNAPSHOT);
    rc = mdb_get(txn, j->meta, &key, &v);
    if (rc == 0) {
        *out = v.mv_size >= JOURNAL_RECORD_HEADER + 8
                   ? journal_get_be64((const uint8_t *)v.mv_data + JOURNAL_RECORD_HEADER) + 1
                   : 0;
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    *out = 1;
    return 0;
}

/* Deletes records up to seq from the start of the log, at most limit of them; *left says whether
 * some remain. */
static int trim_covered(struct journal *j, MDB_txn *txn, uint64_t seq, size_t limit, bool *left)
{
    MDB_cursor *cur;
    MDB_val k, v;
    size_t deleted = 0;
    *left = true;
    int rc = mdb_cursor_open(txn, j->log, &cur);
    if (rc != 0)
        return rc;
    while (deleted < limit && (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) == 0) {
        if (k.mv_size == 8 && journal_get_be64(k.mv_data) > seq) {
            *left = false;
            break;
        }
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0)
            break;
        deleted++;
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND) {
        *left = false;
        rc = 0;
    }
    return rc;
}

/* The sequence number the snapshot covers up to, or 0 without one. */
static int snapshot_seq(struct journal *j, MDB_txn *txn, uint64_t *out)
{
    MDB_val key = journal_str_val(JOURNAL_META_SNAPSHOT), v;
    int rc = mdb_get(txn, j->meta, &key, &v);
    *out = rc == 0 && v.mv_size >= JOURNAL_RECORD_HEADER + 8
               ? journal_get_be64((const uint8_t *)v.mv_data + JOURNAL_RECORD_HEADER)
               : 0;
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
    int rc = journal_txn_begin(j, 0, &txn);
    if (rc != 0)
        return journal_lmdb_fail(err, errlen, rc, "begin a write transaction");
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
        rc = journal_put_framed(txn, j->log, (MDB_val){8, key}, recs[i].data, recs[i].len, NULL, 0,
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
            rc = journal_put_framed(txn, j->datasets, journal_str_val(recs[i].dataset_id),
                                    recs[i].dataset, recs[i].dataset_len, NULL, 0, 0);
            if (rc != 0) {
                snprintf(what, sizeof what, "write dataset '%s'", recs[i].dataset_id);
                goto lmdb_failed;
            }
        }
    }
    uint64_t trim_to = j->trim_to;
    bool trim = j->trim_left || !j->trim_known;
    if (snap) {
        uint8_t seq[8];
        journal_put_be64(seq, snap->seq);
        rc = journal_put_framed(txn, j->meta, journal_str_val(JOURNAL_META_SNAPSHOT), seq, 8,
                                snap->data, snap->len, 0);
        if (rc != 0) {
            snprintf(what, sizeof what, "write the snapshot");
            goto lmdb_failed;
        }
        trim_to = snap->seq;
        trim = true;
    } else if (!j->trim_known && (rc = snapshot_seq(j, txn, &trim_to)) != 0) {
        snprintf(what, sizeof what, "read the snapshot's position");
        goto lmdb_failed;
    }
    bool left = false;
    if (trim && trim_to > 0) {
        rc = trim_covered(j, txn, trim_to, JOURNAL_TRIM_MIN + 2 * n, &left);
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
    j->trim_known = true;
    j->trim_to = trim_to;
    j->trim_left = left;
    if (j->fault)
        j->fault(JOURNAL_FAULT_AFTER_COMMIT, j->fault_user);
    return 0;

lmdb_failed:
    mdb_txn_abort(txn);
    *map_full = rc == MDB_MAP_FULL;
    return journal_lmdb_fail(err, errlen, rc, what);
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
        return journal_lmdb_fail(err, errlen, rc, "read the map size");
    size_t cur = info.me_mapsize;
    if (cur >= j->map_max) {
        human_size(j->map_max, size, sizeof size);
        return err_set(err, errlen, SLUICE_ERR_FULL,
                       "append: the journal is full: it reached its size limit of %s", size);
    }
    size_t next = cur > j->map_max / 2 ? j->map_max : journal_page_round(cur * 2);
    rc = mdb_env_set_mapsize(j->env, next);
    if (rc != 0)
        return journal_lmdb_fail(err, errlen, rc, "grow the map");
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
    if (klen == 0 || klen > JOURNAL_ID_MAX || strcmp(key, JOURNAL_META_SNAPSHOT) == 0 ||
        strcmp(key, JOURNAL_META_FORMAT) == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "write: '%s' is not a key to set", key);
    uint8_t v[8];
    journal_put_be64(v, value);
    pthread_mutex_lock(&j->mu);
    int rc;
    for (;;) {
        MDB_txn *txn;
        rc = journal_txn_begin(j, 0, &txn);
        if (rc != 0) {
            rc = journal_lmdb_fail(err, errlen, rc, "begin a write transaction");
            break;
        }
        rc = journal_put_framed(txn, j->meta, journal_str_val(key), v, 8, NULL, 0, 0);
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
            rc = journal_lmdb_fail(err, errlen, rc, "write meta");
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
    int rc = journal_txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    const uint8_t *p;
    size_t n;
    rc = journal_get_framed(txn, dbi, journal_str_val(key), &p, &n, why);
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
        *value = journal_get_be64(data);
    free(data);
    return rc == 0 ? 0 : read_failed(rc, why, what, err, errlen);
}

int journal_snapshot_read(struct journal *j, uint64_t *seq, uint8_t **data, size_t *len, char *err,
                          size_t errlen)
{
    uint8_t *raw = NULL;
    size_t n = 0;
    const char *why = NULL;
    int rc = read_framed(j, j->meta, JOURNAL_META_SNAPSHOT, &raw, &n, &why, err, errlen);
    if (rc == 0 && n < 8) {
        why = "shorter than its sequence number";
        rc = SLUICE_ERR_CORRUPT;
    }
    if (rc == 0) {
        *seq = journal_get_be64(raw);
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
    rc = journal_txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    rc = mdb_cursor_open(txn, j->log, &cur);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "open a cursor");
        goto out_txn;
    }
    /* Records before `from` are covered by the snapshot and not read: the journal deletes them
     * a bounded number per write (journal.h). */
    uint8_t from_key[8];
    journal_put_be64(from_key, from);
    k.mv_size = 8;
    k.mv_data = from_key;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && !stop;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8) {
            snprintf(why, sizeof why, "a record after %" PRIu64 " has a key of %zu bytes", seen,
                     k.mv_size);
            stop = damage(&r, seen + 1, why);
            continue;
        }
        uint64_t seq = journal_get_be64(k.mv_data);
        if (seq > to)
            break;
        if (j->progress)
            j->progress->seq = seq;
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
        rc = journal_lmdb_fail(err, errlen, rc, "read the log");
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
    int rc = journal_txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    rc = mdb_cursor_open(txn, j->datasets, &cur);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "open a cursor");
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
    rc = rc == MDB_NOTFOUND ? 0 : journal_lmdb_fail(err, errlen, rc, "read the datasets");
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
    int rc = journal_txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "begin a read transaction");
        goto out;
    }
    rc = mdb_cursor_open(txn, j->meta, &cur);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "open a cursor");
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
        bool number = strcmp(key, JOURNAL_META_FORMAT) == 0 || strcmp(key, "incarnation") == 0;
        if ((number && n != 8) || (strcmp(key, JOURNAL_META_SNAPSHOT) == 0 && n < 8)) {
            rc =
                err_set(err, errlen, SLUICE_ERR_CORRUPT, "meta '%s': a value of %zu bytes", key, n);
            goto out_cursor;
        }
    }
    rc = rc == MDB_NOTFOUND ? 0 : journal_lmdb_fail(err, errlen, rc, "read the meta table");
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
    int rc = journal_txn_begin(j, 0, &txn);
    if (rc != 0)
        return journal_lmdb_fail(err, errlen, rc, what);
    /* The records, from the last one back. */
    what = "delete records";
    rc = mdb_cursor_open(txn, j->log, &cur);
    while (rc == 0 && (rc = mdb_cursor_get(cur, &k, &v, MDB_LAST)) == 0) {
        if (k.mv_size == 8 && journal_get_be64(k.mv_data) < from)
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
        MDB_val key = journal_str_val(ids[i]);
        rc = mdb_del(txn, j->datasets, &key, NULL);
        nds += rc == 0;
    }
    free(ids);
    if (rc != 0) {
        mdb_txn_abort(txn);
        *map_full = rc == MDB_MAP_FULL;
        return journal_lmdb_fail(err, errlen, rc, what);
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
        rc = journal_txn_begin(j, MDB_RDONLY, &txn);
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
        return journal_lmdb_fail(err, errlen, rc, "copy");
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
    int rc = journal_txn_begin(j, MDB_RDONLY, &txn);
    if (rc != 0) {
        rc = journal_lmdb_fail(err, errlen, rc, "begin a read transaction");
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
        info->first_seq = journal_get_be64(k.mv_data);
    if (mdb_cursor_get(cur, &k, &v, MDB_LAST) == 0 && k.mv_size == 8)
        info->last_seq = journal_get_be64(k.mv_data);
    mdb_cursor_close(cur);
    k = journal_str_val(JOURNAL_META_SNAPSHOT);
    if (mdb_get(txn, j->meta, &k, &v) == 0 && v.mv_size >= JOURNAL_RECORD_HEADER + 8)
        info->snapshot_seq = journal_get_be64((const uint8_t *)v.mv_data + JOURNAL_RECORD_HEADER);
    if ((rc = mdb_env_info(j->env, &ei)) != 0 || (rc = mdb_env_stat(j->env, &st)) != 0)
        goto failed;
    info->map_size = ei.me_mapsize;
    info->map_used = (ei.me_last_pgno + 1) * (size_t)st.ms_psize;
    mdb_txn_abort(txn);
    pthread_mutex_unlock(&j->mu);
    return 0;
failed:
    rc = journal_lmdb_fail(err, errlen, rc, "read the journal's size");
    mdb_txn_abort(txn);
out:
    pthread_mutex_unlock(&j->mu);
    return rc;
}
