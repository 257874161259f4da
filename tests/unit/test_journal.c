/* The journal on a real disk (a fresh directory under /tmp per test), and the dispatcher's side
 * of it:
 *   - src/journal: a fresh work dir, append and replay, the sequence enforced, snapshot and
 *     truncation in one transaction, the datasets table, readers beside a writer, a second
 *     writer refused, damage (a flipped byte, a missing record, a value cut short) named by its
 *     sequence number, the map growing by itself and failing cleanly at its ceiling, a full disk
 *     (a file size limit), and crashes before, during and after a commit;
 *   - journal_thread: group commit (one transaction per loop iteration, one in flight), waiters
 *     in commit order, one transaction per record when asked, snapshots, failure, close;
 *   - recovery: a fresh start, ids continuing after a restart, an unknown update type, a record
 *     that does not apply, a damaged snapshot; and a dispatcher-like process killed at random
 *     moments, whose recovered state is always one it really had and never older than what it
 *     acknowledged. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/journal_raw.h"
#include "lib/loop.h"
#include "lib/tmp.h"

#include "common/error.h"
#include "dispatcher/journal_thread.h"
#include "dispatcher/update_codec.h"
#include "dispatcher/plan.h"
#include "dispatcher/state.h"
#include "journal.pb-c.h"
#include "journal/journal.h"
#include "journal/record.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

/* ---- directories ----------------------------------------------------------------------------- */

static char dir[256];

static int setup(void **unused)
{
    (void)unused;
    snprintf(dir, sizeof dir, "/tmp/sluice-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    tmp_remove(dir);
    return 0;
}

/* A work dir inside the test's directory (not yet created). */
static const char *work(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static struct journal *open_journal(const char *wd, size_t map_size, size_t map_max)
{
    struct journal *j = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct journal_opts o = {
        .work_dir = wd, .create = true, .map_size = map_size, .map_max = map_max};
    int rc = journal_open(&o, &j, err, sizeof err);
    if (rc < 0)
        fail_msg("journal_open %s: %s", wd, err);
    return j;
}

/* ---- records of opaque bytes ----------------------------------------------------------------- */

static void payload_of(uint64_t seq, char *buf, size_t len)
{
    snprintf(buf, len, "record %" PRIu64, seq);
}

/* Appends records first..first+n-1 whose payloads are payload_of(seq). */
static int append_n(struct journal *j, uint64_t first, size_t n, const struct journal_snapshot *s,
                    char *err, size_t errlen)
{
    struct journal_record recs[64];
    char bufs[64][32];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) {
        payload_of(first + i, bufs[i], sizeof bufs[i]);
        recs[i] = (struct journal_record){.data = (const uint8_t *)bufs[i], .len = strlen(bufs[i])};
    }
    return journal_append(j, first, recs, n, s, err, errlen);
}

struct seen {
    uint64_t seqs[4096];
    size_t n;
    bool payload_ok;
    uint64_t damaged[16];
    size_t ndamaged;
    char why[16][160];
};

static int on_record(void *user, uint64_t seq, const uint8_t *payload, size_t len)
{
    struct seen *s = user;
    char want[32];
    payload_of(seq, want, sizeof want);
    if (len != strlen(want) || memcmp(payload, want, len) != 0)
        s->payload_ok = false;
    if (s->n < 4096)
        s->seqs[s->n++] = seq;
    return 0;
}

static void on_damage(void *user, uint64_t seq, const char *why)
{
    struct seen *s = user;
    if (s->ndamaged < 16) {
        snprintf(s->why[s->ndamaged], sizeof s->why[0], "%s", why);
        s->damaged[s->ndamaged++] = seq;
    }
}

/* Replays from `from` and checks the records are exactly from..last with their payloads. */
static void expect_log(struct journal *j, uint64_t from, uint64_t last)
{
    struct seen *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->payload_ok = true;
    char err[SLUICE_ERRMSG_SIZE] = "";
    uint64_t got_last = 0;
    int rc = journal_replay(j, from, on_record, NULL, s, &got_last, err, sizeof err);
    if (rc != 0)
        fail_msg("replay from %" PRIu64 ": %s", from, err);
    assert_int_equal(s->n, last + 1 - from);
    for (size_t i = 0; i < s->n; i++)
        assert_int_equal(s->seqs[i], from + i);
    assert_true(s->payload_ok);
    assert_int_equal(got_last, last);
    free(s);
}

/* ---- raw LMDB access, to damage a journal the way a bad disk would ----------------------------
 */

static void raw_edit(const char *wd, const char *db, const void *key, size_t klen,
                     void (*edit)(MDB_txn *, MDB_dbi, MDB_val *, void *), void *arg)
{
    struct journal_raw r;
    journal_raw_open(&r, wd, db);
    MDB_val k = {klen, (void *)key};
    edit(r.txn, r.dbi, &k, arg);
    journal_raw_close(&r);
}

static void edit_flip(MDB_txn *txn, MDB_dbi dbi, MDB_val *k, void *arg)
{
    size_t at = *(size_t *)arg;
    MDB_val v;
    assert_int_equal(mdb_get(txn, dbi, k, &v), 0);
    uint8_t *copy = malloc(v.mv_size);
    assert_non_null(copy);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[at % v.mv_size] ^= 0x40;
    MDB_val nv = {v.mv_size, copy};
    assert_int_equal(mdb_put(txn, dbi, k, &nv, 0), 0);
    free(copy);
}

static void edit_cut(MDB_txn *txn, MDB_dbi dbi, MDB_val *k, void *arg)
{
    (void)arg;
    MDB_val nv = {3, "abc"};
    assert_int_equal(mdb_put(txn, dbi, k, &nv, 0), 0);
}

static void edit_del(MDB_txn *txn, MDB_dbi dbi, MDB_val *k, void *arg)
{
    (void)arg;
    assert_int_equal(mdb_del(txn, dbi, k, NULL), 0);
}

static void flip_record(const char *wd, uint64_t seq, size_t at)
{
    uint8_t key[8];
    journal_seq_key(seq, key);
    raw_edit(wd, "log", key, 8, edit_flip, &at);
}

/* ---- the journal ----------------------------------------------------------------------------- */

static void test_fresh_work_dir(void **unused)
{
    (void)unused;
    const char *wd = work("a/b/c"); /* parents are created too */
    struct journal *j = open_journal(wd, 0, 0);
    struct journal_info info;
    char err[SLUICE_ERRMSG_SIZE];
    uint64_t v, seq;
    uint8_t *data;
    size_t len;
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.records, 0);
    assert_int_equal(info.snapshot_seq, 0);
    assert_int_equal(info.datasets, 0);
    assert_true(info.map_size == JOURNAL_DEFAULT_MAP_SIZE);
    assert_int_equal(journal_snapshot_read(j, &seq, &data, &len, err, sizeof err),
                     SLUICE_ERR_NOT_FOUND);
    assert_int_equal(journal_meta_get_u64(j, "incarnation", &v, err, sizeof err),
                     SLUICE_ERR_NOT_FOUND);
    expect_log(j, 1, 0);
    assert_string_equal(journal_work_dir(j), wd);
    journal_close(j);

    /* Reopening finds the same empty journal; meta values persist. */
    j = open_journal(wd, 0, 0);
    assert_int_equal(journal_meta_put_u64(j, "incarnation", 0x1234abcdull, err, sizeof err), 0);
    journal_close(j);
    j = open_journal(wd, 0, 0);
    assert_int_equal(journal_meta_get_u64(j, "incarnation", &v, err, sizeof err), 0);
    assert_true(v == 0x1234abcdull);
    assert_int_equal(journal_meta_put_u64(j, "snapshot", 1, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "write: 'snapshot' is not a key to set");
    journal_close(j);

    /* A work dir that cannot be created. */
    struct journal_opts o = {.work_dir = "/proc/sluice-cannot-be-here", .create = true};
    assert_true(journal_open(&o, &j, err, sizeof err) < 0);
    assert_non_null(strstr(err, "create /proc/sluice-cannot-be-here: "));
    /* Reading a journal that is not there. */
    o = (struct journal_opts){.work_dir = work("nothing"), .read_only = true};
    assert_int_equal(journal_open(&o, &j, err, sizeof err), SLUICE_ERR_NOT_FOUND);
    assert_string_equal(err, "no journal here");
}

static void test_append_and_replay(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("w"), 0, 0);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(append_n(j, 1, 3, NULL, err, sizeof err), 0);
    assert_int_equal(append_n(j, 4, 1, NULL, err, sizeof err), 0);
    assert_int_equal(append_n(j, 5, 20, NULL, err, sizeof err), 0);
    assert_int_equal(append_n(j, 26, 0, NULL, err, sizeof err), 0); /* nothing */
    expect_log(j, 1, 24);

    /* A batch that does not follow the last record is refused whole. */
    assert_int_equal(append_n(j, 26, 2, NULL, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "append: record 26 does not follow the journal (next is 25)");
    assert_int_equal(append_n(j, 24, 2, NULL, err, sizeof err), SLUICE_ERR_INVALID);
    expect_log(j, 1, 24);

    /* Replaying from later than the first record skips the records before it (a snapshot
     * covers them; the journal deletes them in steps). */
    struct seen s = {.payload_ok = true};
    uint64_t last;
    assert_int_equal(journal_replay(j, 3, on_record, NULL, &s, &last, err, sizeof err), 0);
    assert_int_equal(s.n, 22);
    assert_int_equal(s.seqs[0], 3);
    assert_true(s.payload_ok);
    assert_int_equal(last, 24);

    /* A callback's nonzero return stops the replay and comes back. */
    journal_close(j);
    j = open_journal(work("w"), 0, 0);
    expect_log(j, 1, 24);
    journal_close(j);
}

static int stop_at_three(void *user, uint64_t seq, const uint8_t *p, size_t len)
{
    (void)p;
    (void)len;
    *(uint64_t *)user = seq;
    return seq == 3 ? -77 : 0;
}

static void test_replay_stops_on_callback(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("w"), 0, 0);
    char err[SLUICE_ERRMSG_SIZE];
    uint64_t at = 0;
    assert_int_equal(append_n(j, 1, 5, NULL, err, sizeof err), 0);
    assert_int_equal(journal_replay(j, 1, stop_at_three, NULL, &at, NULL, err, sizeof err), -77);
    assert_int_equal(at, 3);
    journal_close(j);
}

static void test_snapshot_truncates(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("w"), 0, 0);
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_info info;
    uint64_t seq;
    uint8_t *data;
    size_t len;
    assert_int_equal(append_n(j, 1, 10, NULL, err, sizeof err), 0);
    /* Records 11 and 12 with a snapshot covering up to 11, in one transaction. */
    struct journal_snapshot snap = {.seq = 11, .data = (const uint8_t *)"state@11", .len = 8};
    assert_int_equal(append_n(j, 11, 2, &snap, err, sizeof err), 0);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.records, 1);
    assert_int_equal(info.first_seq, 12);
    assert_int_equal(info.last_seq, 12);
    assert_int_equal(info.snapshot_seq, 11);
    assert_int_equal(journal_snapshot_read(j, &seq, &data, &len, err, sizeof err), 0);
    assert_int_equal(seq, 11);
    assert_int_equal(len, 8);
    assert_memory_equal(data, "state@11", 8);
    free(data);
    expect_log(j, 12, 12);

    /* A snapshot alone covering everything: the log empties, and the next record follows the
     * snapshot. */
    snap = (struct journal_snapshot){.seq = 12, .data = (const uint8_t *)"", .len = 0};
    assert_int_equal(journal_append(j, 13, NULL, 0, &snap, err, sizeof err), 0);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.records, 0);
    assert_int_equal(info.snapshot_seq, 12);
    assert_int_equal(append_n(j, 1, 1, NULL, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "append: record 1 does not follow the journal (next is 13)");
    assert_int_equal(append_n(j, 13, 2, NULL, err, sizeof err), 0);
    journal_close(j);

    /* Everything survives a reopen. */
    j = open_journal(work("w"), 0, 0);
    assert_int_equal(journal_snapshot_read(j, &seq, &data, &len, err, sizeof err), 0);
    assert_int_equal(seq, 12);
    assert_int_equal(len, 0);
    free(data);
    expect_log(j, 13, 14);
    /* A snapshot past the last record is refused. */
    snap = (struct journal_snapshot){.seq = 16, .data = (const uint8_t *)"x", .len = 1};
    assert_int_equal(append_n(j, 15, 1, &snap, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "append: a snapshot at 16 is past the last record 15");
    expect_log(j, 13, 14);
    journal_close(j);
}

/* A snapshot covering more records than one transaction deletes: they go in steps of
 * JOURNAL_TRIM_MIN plus twice each batch, oldest first, unread meanwhile, across a reopen. */
static void test_snapshot_trims_in_steps(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("w"), 0, 0);
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_info info;
    const uint64_t total = 3 * JOURNAL_TRIM_MIN; /* 3072 records, 64 per batch */
    for (uint64_t first = 1; first <= total; first += 64)
        assert_int_equal(append_n(j, first, 64, NULL, err, sizeof err), 0);
    /* A snapshot alone at the last record deletes the oldest JOURNAL_TRIM_MIN. */
    struct journal_snapshot snap = {.seq = total, .data = (const uint8_t *)"S", .len = 1};
    assert_int_equal(journal_append(j, total + 1, NULL, 0, &snap, err, sizeof err), 0);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.snapshot_seq, total);
    assert_int_equal(info.first_seq, JOURNAL_TRIM_MIN + 1);
    assert_int_equal(info.records, total - JOURNAL_TRIM_MIN);
    expect_log(j, total + 1, total); /* nothing after the snapshot; the covered ones unread */
    /* A batch of 10 deletes JOURNAL_TRIM_MIN + 20 more. */
    assert_int_equal(append_n(j, total + 1, 10, NULL, err, sizeof err), 0);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.first_seq, 2 * JOURNAL_TRIM_MIN + 21);
    assert_int_equal(info.last_seq, total + 10);
    expect_log(j, total + 1, total + 10);
    journal_close(j);
    /* Reopened, the first write finds what is left and finishes it. */
    j = open_journal(work("w"), 0, 0);
    expect_log(j, total + 1, total + 10);
    assert_int_equal(append_n(j, total + 11, 1, NULL, err, sizeof err), 0);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.first_seq, total + 1);
    assert_int_equal(info.records, 11);
    expect_log(j, total + 1, total + 11);
    journal_close(j);
}

static int collect_dataset(void *user, const char *id, const uint8_t *data, size_t len)
{
    char *out = user;
    size_t n = strlen(out);
    snprintf(out + n, 256 - n, "%s=%.*s;", id, (int)len, (const char *)data);
    return 0;
}

static void test_datasets_table(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("w"), 0, 0);
    char err[SLUICE_ERRMSG_SIZE], seen[256] = "";
    uint8_t *data;
    size_t len;
    struct journal_record recs[3] = {
        {.data = (const uint8_t *)"r1",
         .len = 2,
         .dataset_id = "zeta",
         .dataset = (const uint8_t *)"Z-def",
         .dataset_len = 5},
        {.data = (const uint8_t *)"r2", .len = 2},
        {.data = (const uint8_t *)"r3",
         .len = 2,
         .dataset_id = "alpha",
         .dataset = (const uint8_t *)"",
         .dataset_len = 0},
    };
    assert_int_equal(journal_append(j, 1, recs, 3, NULL, err, sizeof err), 0);
    assert_int_equal(journal_dataset_read(j, "zeta", &data, &len, err, sizeof err), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "Z-def", 5);
    free(data);
    assert_int_equal(journal_dataset_read(j, "alpha", &data, &len, err, sizeof err), 0);
    assert_int_equal(len, 0);
    free(data);
    assert_int_equal(journal_dataset_read(j, "beta", &data, &len, err, sizeof err),
                     SLUICE_ERR_NOT_FOUND);
    assert_string_equal(err, "dataset 'beta' is not in the datasets table");
    assert_int_equal(journal_datasets_each(j, collect_dataset, seen, err, sizeof err), 0);
    assert_string_equal(seen, "alpha=;zeta=Z-def;");

    /* A snapshot deletes records, never dataset definitions. */
    struct journal_snapshot snap = {.seq = 3, .data = (const uint8_t *)"s", .len = 1};
    assert_int_equal(journal_append(j, 4, NULL, 0, &snap, err, sizeof err), 0);
    assert_int_equal(journal_dataset_read(j, "zeta", &data, &len, err, sizeof err), 0);
    free(data);
    journal_close(j);

    /* A damaged definition is named. */
    size_t at = 7;
    raw_edit(work("w"), "datasets", "zeta", 4, edit_flip, &at);
    j = open_journal(work("w"), 0, 0);
    assert_int_equal(journal_dataset_read(j, "zeta", &data, &len, err, sizeof err),
                     SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "dataset 'zeta': checksum mismatch");
    seen[0] = '\0';
    assert_int_equal(journal_datasets_each(j, collect_dataset, seen, err, sizeof err),
                     SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "dataset 'zeta': checksum mismatch");
    journal_close(j);
}

/* Runs fn in a child process and returns its exit status (the child must not use cmocka). */
static int in_child(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fn(arg));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int read_while_written(void *arg)
{
    (void)arg;
    struct journal *j;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_opts o = {.work_dir = work("w"), .read_only = true};
    if (journal_open(&o, &j, err, sizeof err) < 0)
        return 10;
    struct seen *s = calloc(1, sizeof *s);
    s->payload_ok = true;
    int rc = journal_replay(j, 1, on_record, NULL, s, NULL, err, sizeof err);
    if (rc != 0 || s->n != 5 || !s->payload_ok)
        return 11;
    if (append_n(j, 6, 1, NULL, err, sizeof err) != SLUICE_ERR_INVALID ||
        strcmp(err, "append: the journal is open read-only") != 0)
        return 12;
    free(s);
    journal_close(j);
    return 0;
}

static void test_readers_and_writers(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("w"), 0, 0), *other;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(append_n(j, 1, 5, NULL, err, sizeof err), 0);
    /* A reader in another process reads while this one holds the journal open for writing. */
    assert_int_equal(in_child(read_while_written, NULL), 0);
    /* A second writer is refused before it touches the environment. */
    struct journal_opts o = {.work_dir = work("w"), .create = true};
    assert_int_equal(journal_open(&o, &other, err, sizeof err), SLUICE_ERR_EXISTS);
    assert_string_equal(err, "another dispatcher is writing this journal");
    assert_int_equal(append_n(j, 6, 1, NULL, err, sizeof err), 0);
    journal_close(j);
    /* Closing releases the lock. */
    j = open_journal(work("w"), 0, 0);
    expect_log(j, 1, 6);
    journal_close(j);
}

/* A reader opened before the writer grew the file copies the journal as it is now: the copy's
 * own read transaction adopts the larger map. */
struct grow_sync {
    int opened[2], grown[2];
};

static int copy_after_growth(void *arg)
{
    struct grow_sync *g = arg;
    struct journal *j, *copy;
    char err[SLUICE_ERRMSG_SIZE], path[600], byte = 0;
    struct journal_opts o = {.work_dir = work("w"), .read_only = true};
    if (journal_open(&o, &j, err, sizeof err) < 0)
        return 10;
    if (write(g->opened[1], "o", 1) != 1 || read(g->grown[0], &byte, 1) != 1)
        return 11;
    snprintf(path, sizeof path, "%s/copy.mdb", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || journal_copy(j, fd, err, sizeof err) < 0) {
        fprintf(stderr, "copy: %s\n", err);
        return 12;
    }
    close(fd);
    journal_close(j);
    o = (struct journal_opts){.file = path, .read_only = true};
    if (journal_open(&o, &copy, err, sizeof err) < 0) {
        fprintf(stderr, "open the copy: %s\n", err);
        return 13;
    }
    struct seen *s = calloc(1, sizeof *s);
    s->payload_ok = true;
    uint64_t last = 0;
    int rc = journal_replay(copy, 1, on_record, NULL, s, &last, err, sizeof err);
    journal_close(copy);
    bool ok = rc == 0 && last == 64 * 40 && s->n == 64 * 40 && s->payload_ok;
    free(s);
    return ok ? 0 : 14;
}

static void test_copy_while_growing(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("w"), 1 << 16, 0);
    char err[SLUICE_ERRMSG_SIZE], byte;
    struct grow_sync g;
    assert_int_equal(pipe(g.opened), 0);
    assert_int_equal(pipe(g.grown), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(copy_after_growth(&g));
    assert_int_equal(read(g.opened[0], &byte, 1), 1);
    for (uint64_t first = 1; first <= 64 * 40; first += 64)
        assert_int_equal(append_n(j, first, 64, NULL, err, sizeof err), 0);
    assert_int_equal(write(g.grown[1], "g", 1), 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    journal_close(j);
    for (int i = 0; i < 2; i++) {
        close(g.opened[i]);
        close(g.grown[i]);
    }
}

static void test_damage_named(void **unused)
{
    (void)unused;
    const char *wd = work("w");
    struct journal *j = open_journal(wd, 0, 0);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(append_n(j, 1, 8, NULL, err, sizeof err), 0);
    journal_close(j);

    flip_record(wd, 3, 9); /* a payload byte */
    j = open_journal(wd, 0, 0);
    struct seen *s = calloc(1, sizeof *s);
    s->payload_ok = true;
    assert_int_equal(journal_replay(j, 1, on_record, NULL, s, NULL, err, sizeof err),
                     SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "record 3: checksum mismatch");
    assert_int_equal(s->n, 2); /* the records before it were delivered, nothing after */
    journal_close(j);

    /* A value cut short and a missing record, reported one by one when asked to go on. */
    uint8_t key[8];
    journal_seq_key(5, key);
    raw_edit(wd, "log", key, 8, edit_cut, NULL);
    journal_seq_key(7, key);
    raw_edit(wd, "log", key, 8, edit_del, NULL);
    j = open_journal(wd, 0, 0);
    memset(s, 0, sizeof *s);
    s->payload_ok = true;
    assert_int_equal(journal_replay(j, 1, on_record, on_damage, s, NULL, err, sizeof err),
                     SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "record 3: checksum mismatch"); /* the first damage */
    assert_int_equal(s->ndamaged, 3);
    assert_int_equal(s->damaged[0], 3);
    assert_string_equal(s->why[1], "record 5: shorter than its header");
    assert_int_equal(s->damaged[2], 7);
    assert_string_equal(s->why[2], "record 7 is missing");
    assert_int_equal(s->n, 5); /* 1 2 4 6 8 */
    assert_int_equal(s->seqs[2], 4);
    assert_int_equal(s->seqs[4], 8);
    assert_true(s->payload_ok);
    free(s);

    /* A damaged snapshot. */
    struct journal_snapshot snap = {.seq = 8, .data = (const uint8_t *)"snap", .len = 4};
    assert_int_equal(append_n(j, 9, 0, &snap, err, sizeof err), 0);
    journal_close(j);
    size_t at = 12;
    raw_edit(wd, "meta", "snapshot", 8, edit_flip, &at);
    j = open_journal(wd, 0, 0);
    uint64_t seq;
    uint8_t *data;
    size_t len;
    assert_int_equal(journal_snapshot_read(j, &seq, &data, &len, err, sizeof err),
                     SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "snapshot: checksum mismatch");
    journal_close(j);
}

static void test_map_grows_then_fills(void **unused)
{
    (void)unused;
    const char *wd = work("w");
    /* Starts at 64 KiB and may grow to 1 MiB. */
    struct journal *j = open_journal(wd, 64 << 10, 1 << 20);
    static uint8_t big[16 << 10];
    memset(big, 0x5a, sizeof big);
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_info info;
    uint64_t seq = 1;
    int rc;
    for (;;) {
        struct journal_record r[2] = {{.data = big, .len = sizeof big},
                                      {.data = big, .len = sizeof big}};
        rc = journal_append(j, seq, r, 2, NULL, err, sizeof err);
        if (rc < 0)
            break;
        seq += 2;
        assert_true(seq < 200);
    }
    assert_int_equal(rc, SLUICE_ERR_FULL);
    assert_string_equal(err, "append: the journal is full: it reached its size limit of 1 MiB");
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_true(info.map_size == 1 << 20); /* it grew, to the ceiling */
    assert_true(seq > 20);                 /* far past what 64 KiB holds */
    /* Nothing committed is harmed, and the failed batch left nothing. */
    assert_int_equal(info.records, seq - 1);
    assert_int_equal(info.last_seq, seq - 1);
    journal_close(j);

    /* With a higher ceiling the same journal takes more. */
    j = open_journal(wd, 64 << 10, 4 << 20);
    struct journal_record r = {.data = big, .len = sizeof big};
    assert_int_equal(journal_append(j, seq, &r, 1, NULL, err, sizeof err), 0);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.records, seq);
    journal_close(j);
}

/* Appends until the file size limit stops a commit: what a full disk does to LMDB. */
static int fill_disk(void *arg)
{
    (void)arg;
    struct journal *j;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_opts o = {.work_dir = work("w"), .create = true};
    if (journal_open(&o, &j, err, sizeof err) < 0)
        return 110;
    signal(SIGXFSZ, SIG_IGN);
    struct stat st;
    char path[600];
    snprintf(path, sizeof path, "%s/journal/data.mdb", work("w"));
    if (stat(path, &st) < 0)
        return 111;
    struct rlimit lim = {.rlim_cur = (rlim_t)st.st_size + (256 << 10),
                         .rlim_max = (rlim_t)st.st_size + (256 << 10)};
    if (setrlimit(RLIMIT_FSIZE, &lim) < 0)
        return 112;
    static uint8_t big[8 << 10];
    memset(big, 0x33, sizeof big);
    uint64_t seq = 1;
    for (;;) {
        struct journal_record r = {.data = big, .len = sizeof big};
        int rc = journal_append(j, seq, &r, 1, NULL, err, sizeof err);
        if (rc < 0) {
            /* The code and a message that says what happened; report how far it got. */
            char want[128];
            snprintf(want, sizeof want,
                     "commit: the data file reached the file size limit of %" PRIu64 " bytes",
                     (uint64_t)lim.rlim_cur);
            if (rc != SLUICE_ERR_FULL || strcmp(err, want) != 0)
                return 113;
            break;
        }
        seq++;
        if (seq > 99)
            return 114;
    }
    journal_close(j);
    return (int)(seq - 1); /* the records acknowledged, below 100 */
}

static void test_disk_full(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("w"), 0, 0);
    journal_close(j);
    int acked = in_child(fill_disk, NULL);
    assert_true(acked >= 5 && acked < 100);
    /* Every acknowledged record is there, and nothing of the failed one. */
    j = open_journal(work("w"), 0, 0);
    struct journal_info info;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.records, acked);
    assert_int_equal(info.last_seq, acked);
    journal_close(j);
}

/* ---- crashes around a commit ----------------------------------------------------------------- */

enum crash_at { CRASH_BEFORE = 0, CRASH_DURING = 1, CRASH_AFTER = 2 };

struct crash {
    int batch; /* the batch to crash in (1-based) */
    enum crash_at at;
    int current;
    int fd; /* acknowledgements go here */
};

static void crash_hook(enum journal_fault point, void *user)
{
    struct crash *c = user;
    if (c->current != c->batch)
        return;
    if ((c->at == CRASH_DURING && point == JOURNAL_FAULT_BEFORE_COMMIT) ||
        (c->at == CRASH_AFTER && point == JOURNAL_FAULT_AFTER_COMMIT))
        _exit(0);
}

#define CRASH_BATCHES 6
#define CRASH_PER_BATCH 3
#define CRASH_SNAPSHOT_BATCH 4

/* Appends CRASH_BATCHES batches of CRASH_PER_BATCH records (the fourth with a snapshot) and
 * acknowledges each by writing its last sequence number, the way a reply follows a commit. */
static int crash_child(void *arg)
{
    struct crash *c = arg;
    struct journal *j;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_opts o = {
        .work_dir = work("w"), .create = true, .fault = crash_hook, .fault_user = c};
    if (journal_open(&o, &j, err, sizeof err) < 0)
        return 10;
    for (c->current = 1; c->current <= CRASH_BATCHES; c->current++) {
        uint64_t first = (uint64_t)(c->current - 1) * CRASH_PER_BATCH + 1;
        uint64_t last = first + CRASH_PER_BATCH - 1;
        struct journal_snapshot snap = {.seq = last, .data = (const uint8_t *)"snap", .len = 4};
        if (c->current == c->batch && c->at == CRASH_BEFORE)
            _exit(0);
        if (append_n(j, first, CRASH_PER_BATCH, c->current == CRASH_SNAPSHOT_BATCH ? &snap : NULL,
                     err, sizeof err) < 0)
            return 11;
        if (write(c->fd, &last, sizeof last) != sizeof last)
            return 12;
    }
    return 0;
}

static void test_crash_points(void **unused)
{
    (void)unused;
    static const char *const names[] = {"before", "during", "after"};
    for (int batch = 1; batch <= CRASH_BATCHES; batch++) {
        for (int at = CRASH_BEFORE; at <= CRASH_AFTER; at++) {
            int fds[2];
            assert_int_equal(pipe(fds), 0);
            struct crash c = {.batch = batch, .at = (enum crash_at)at, .fd = fds[1]};
            assert_int_equal(in_child(crash_child, &c), 0);
            close(fds[1]);
            uint64_t acked = 0, v;
            while (read(fds[0], &v, sizeof v) == sizeof v)
                acked = v;
            close(fds[0]);

            /* Every acknowledged batch is there; a batch whose commit completed may be there
             * though never acknowledged; nothing of a batch that crashed before its commit. */
            uint64_t committed =
                (uint64_t)(at == CRASH_AFTER ? batch : batch - 1) * CRASH_PER_BATCH;
            assert_int_equal(acked, (uint64_t)(batch - 1) * CRASH_PER_BATCH);
            struct journal *j = open_journal(work("w"), 0, 0);
            struct journal_info info;
            char err[SLUICE_ERRMSG_SIZE];
            assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
            uint64_t snap = committed >= CRASH_SNAPSHOT_BATCH * CRASH_PER_BATCH
                                ? CRASH_SNAPSHOT_BATCH * CRASH_PER_BATCH
                                : 0;
            if (info.snapshot_seq != snap)
                fail_msg("crash %s batch %d: snapshot at %" PRIu64 ", expected %" PRIu64, names[at],
                         batch, info.snapshot_seq, snap);
            expect_log(j, snap + 1, committed);
            /* The journal goes on from where it stopped. */
            assert_int_equal(append_n(j, committed + 1, 2, NULL, err, sizeof err), 0);
            journal_close(j);
            /* The next case starts from an empty directory. */
            teardown(NULL);
            setup(NULL);
        }
    }
}

/* ---- the group-commit thread ----------------------------------------------------------------- */

struct waits {
    int order[64];
    int status[64];
    int n;
};

struct waiter_arg {
    struct waits *w;
    int id;
};

static void on_wait(void *ctx, int status)
{
    struct waiter_arg *a = ctx;
    a->w->order[a->w->n] = a->id;
    a->w->status[a->w->n] = status;
    a->w->n++;
}

struct failure {
    int calls, code;
    char msg[SLUICE_ERRMSG_SIZE];
};

static void on_fail(void *user, int code, const char *msg)
{
    struct failure *f = user;
    f->calls++;
    f->code = code;
    snprintf(f->msg, sizeof f->msg, "%s", msg);
}

static uint8_t *dup_payload(uint64_t seq, size_t *len)
{
    char buf[32];
    payload_of(seq, buf, sizeof buf);
    *len = strlen(buf);
    return (uint8_t *)strdup(buf);
}

/* Queues n records; returns their payload bytes. */
static uint64_t add_n(struct journal_thread *jt, size_t n)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        uint8_t *p = dup_payload(journal_thread_next_seq(jt), &len);
        assert_int_equal(journal_thread_add(jt, p, len, NULL, NULL, 0), 0);
        bytes += len;
    }
    return bytes;
}

static void close_thread(uv_loop_t *loop, struct journal_thread *jt)
{
    bool closed = false;
    journal_thread_close(jt, set_flag, &closed);
    RUN_UNTIL(loop, closed, 20000);
}

/* a[i] notes waiter i in w. */
static void waiter_args(struct waits *w, struct waiter_arg *a, int n)
{
    for (int i = 0; i < n; i++)
        a[i] = (struct waiter_arg){w, i};
}

/* A journal thread on j from record 1 whose failures land in f. */
static struct journal_thread *start_thread(uv_loop_t *loop, struct journal *j, struct failure *f)
{
    struct journal_thread *jt;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_thread_opts o = {.journal = j, .next_seq = 1, .on_fail = on_fail, .user = f};
    assert_int_equal(journal_thread_start(loop, &o, &jt, err, sizeof err), 0);
    return jt;
}

static void test_group_commit(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct journal *j = open_journal(work("w"), 0, 0);
    struct failure f = {0};
    struct journal_thread *jt = start_thread(&loop, j, &f);
    struct journal_thread_stats st;
    struct waits w = {.n = 0};
    struct waiter_arg a[8];
    waiter_args(&w, a, 8);

    /* Everything queued in one loop iteration is one transaction. */
    uint64_t bytes = add_n(jt, 100);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[0]), 0);
    assert_int_equal(w.n, 0);
    RUN_UNTIL(&loop, w.n == 1, 20000);
    journal_thread_get_stats(jt, &st);
    assert_int_equal(st.transactions, 1);
    assert_int_equal(st.records, 100);
    assert_true(bytes > 100);
    assert_int_equal(st.bytes, bytes);

    /* While one batch is in flight the next gathers; waiters run in order. */
    add_n(jt, 1);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[1]), 0);
    uv_run(&loop, UV_RUN_NOWAIT); /* hands record 101 to the thread */
    add_n(jt, 50);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[2]), 0);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[3]), 0);
    RUN_UNTIL(&loop, w.n == 4, 20000);
    journal_thread_get_stats(jt, &st);
    assert_int_equal(st.records, 151);
    assert_true(st.transactions == 3);
    assert_int_equal(st.largest, 100);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(w.order[i], i);
        assert_int_equal(w.status[i], 0);
    }
    /* With nothing outstanding a waiter runs at once. */
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[4]), 0);
    assert_int_equal(w.n, 5);
    assert_int_equal(journal_thread_next_seq(jt), 152);
    close_thread(&loop, jt);
    assert_int_equal(f.calls, 0);
    expect_log(j, 1, 151);
    journal_close(j);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Polls jt (without running the loop) until w has n waiters run; fails after 20 s. */
static void poll_until(struct journal_thread *jt, const struct waits *w, int n)
{
    for (int i = 0; i < 20000 && w->n < n; i++) {
        journal_thread_poll(jt);
        if (w->n < n)
            usleep(1000);
    }
    assert_int_equal(w->n, n);
}

/* journal_thread_poll, between two requests: hands 64 queued records to the thread at once, and
 * fewer once the oldest waited 0.5 ms, then runs the waiters of the finished batch, all without
 * the loop running; the async wake-up left behind finds nothing to take. */
static void test_poll_between_requests(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct journal *j = open_journal(work("w"), 0, 0);
    struct failure f = {0};
    struct journal_thread *jt = start_thread(&loop, j, &f);
    struct journal_thread_stats st;
    struct waits w = {.n = 0};
    struct waiter_arg a[4];
    waiter_args(&w, a, 4);

    add_n(jt, 64);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[0]), 0);
    poll_until(jt, &w, 1);
    journal_thread_get_stats(jt, &st);
    assert_int_equal(st.transactions, 1);
    assert_int_equal(st.records, 64);
    assert_int_equal(journal_thread_durable_seq(jt), 64);

    /* Two records and a wait: they leave once 0.5 ms old. */
    add_n(jt, 2);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[1]), 0);
    usleep(2000);
    poll_until(jt, &w, 2);
    journal_thread_get_stats(jt, &st);
    assert_int_equal(st.transactions, 2);
    assert_int_equal(st.records, 66);

    /* The loop then runs as usual: the stale wake-up takes nothing, and what is queued next
     * leaves at the end of the iteration. */
    add_n(jt, 3);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[2]), 0);
    RUN_UNTIL(&loop, w.n == 3, 20000);
    journal_thread_get_stats(jt, &st);
    assert_int_equal(st.transactions, 3);
    assert_int_equal(st.records, 69);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(w.order[i], i);
        assert_int_equal(w.status[i], 0);
    }
    close_thread(&loop, jt);
    assert_int_equal(f.calls, 0);
    expect_log(j, 1, 69);
    journal_close(j);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_one_record_per_transaction(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct journal *j = open_journal(work("w"), 0, 0);
    struct journal_thread *jt;
    struct journal_thread_stats st;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_thread_opts o = {.journal = j, .next_seq = 1, .max_records = 1};
    assert_int_equal(journal_thread_start(&loop, &o, &jt, err, sizeof err), 0);
    struct waits w = {.n = 0};
    struct waiter_arg a = {&w, 0};
    add_n(jt, 10);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a), 0);
    RUN_UNTIL(&loop, w.n == 1, 20000);
    journal_thread_get_stats(jt, &st);
    assert_int_equal(st.transactions, 10);
    assert_int_equal(st.largest, 1);
    close_thread(&loop, jt);
    expect_log(j, 1, 10);
    journal_close(j);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_thread_snapshots(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct journal *j = open_journal(work("w"), 0, 0);
    struct journal_thread *jt;
    struct journal_thread_stats st;
    struct journal_info info;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_thread_opts o = {.journal = j, .next_seq = 1};
    assert_int_equal(journal_thread_start(&loop, &o, &jt, err, sizeof err), 0);
    struct waits w = {.n = 0};
    struct waiter_arg a = {&w, 0};
    add_n(jt, 5);
    assert_int_equal(journal_thread_snapshot(jt, (uint8_t *)strdup("S5"), 2), 0);
    add_n(jt, 3);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a), 0);
    RUN_UNTIL(&loop, w.n == 1, 20000);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.snapshot_seq, 5);
    assert_int_equal(info.records, 3);
    expect_log(j, 6, 8);
    /* A snapshot with nothing new still reaches the disk. */
    assert_int_equal(journal_thread_snapshot(jt, (uint8_t *)strdup("S8"), 2), 0);
    RUN_UNTIL(&loop, (journal_thread_get_stats(jt, &st), st.snapshots == 2), 20000);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.snapshot_seq, 8);
    assert_int_equal(info.records, 0);
    /* A snapshot of an earlier state (taken at record 10, finished after 12 were queued)
     * covers up to 10 only; one past what is queued is refused. */
    add_n(jt, 4);
    assert_int_equal(journal_thread_snapshot_at(jt, (uint8_t *)strdup("S13"), 3, 13),
                     SLUICE_ERR_INVALID);
    assert_int_equal(journal_thread_snapshot_at(jt, (uint8_t *)strdup("S10"), 3, 10), 0);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a), 0);
    RUN_UNTIL(&loop, w.n == 2, 20000);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.snapshot_seq, 10);
    assert_int_equal(info.records, 2);
    expect_log(j, 11, 12);
    /* A snapshot queued and not yet written when the thread closes is written by the close. */
    add_n(jt, 2);
    assert_int_equal(journal_thread_snapshot(jt, (uint8_t *)strdup("S14"), 3), 0);
    close_thread(&loop, jt);
    assert_int_equal(journal_get_info(j, &info, err, sizeof err), 0);
    assert_int_equal(info.snapshot_seq, 14);
    assert_int_equal(info.records, 0);
    journal_close(j);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_thread_failure_is_final(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct journal *j = open_journal(work("w"), 64 << 10, 256 << 10);
    struct failure f = {0};
    struct journal_thread *jt;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_thread_opts o = {.journal = j, .next_seq = 1, .on_fail = on_fail, .user = &f};
    assert_int_equal(journal_thread_start(&loop, &o, &jt, err, sizeof err), 0);
    struct waits w = {.n = 0};
    struct waiter_arg a[4];
    waiter_args(&w, a, 4);
    add_n(jt, 3);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[0]), 0);
    RUN_UNTIL(&loop, w.n == 1, 20000);
    /* A batch larger than the ceiling. */
    for (int i = 0; i < 20; i++) {
        uint8_t *p = calloc(1, 32 << 10);
        assert_int_equal(journal_thread_add(jt, p, 32 << 10, NULL, NULL, 0), 0);
    }
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[1]), 0);
    RUN_UNTIL(&loop, w.n == 2, 20000);
    assert_int_equal(w.status[0], 0);
    assert_int_equal(w.status[1], SLUICE_ERR_FULL);
    assert_int_equal(f.calls, 1);
    assert_int_equal(f.code, SLUICE_ERR_FULL);
    assert_string_equal(f.msg, "append: the journal is full: it reached its size limit of 256 KiB");
    /* From now on everything is refused; a waiter hears the failure at once. */
    size_t len;
    uint8_t *p = dup_payload(99, &len);
    assert_int_equal(journal_thread_add(jt, p, len, NULL, NULL, 0), SLUICE_ERR_FULL);
    assert_int_equal(journal_thread_snapshot(jt, (uint8_t *)strdup("s"), 1), SLUICE_ERR_FULL);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a[2]), 0);
    assert_int_equal(w.n, 3);
    assert_int_equal(w.status[2], SLUICE_ERR_FULL);
    close_thread(&loop, jt);
    assert_int_equal(f.calls, 1);
    /* What was acknowledged is intact. */
    expect_log(j, 1, 3);
    journal_close(j);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_close_writes_what_is_queued(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct journal *j = open_journal(work("w"), 0, 0);
    struct journal_thread *jt;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_thread_opts o = {.journal = j, .next_seq = 1};
    assert_int_equal(journal_thread_start(&loop, &o, &jt, err, sizeof err), 0);
    struct waits w = {.n = 0};
    struct waiter_arg a = {&w, 0};
    add_n(jt, 10);
    assert_int_equal(journal_thread_wait(jt, on_wait, &a), 0);
    close_thread(&loop, jt); /* the loop never ran before the close */
    assert_int_equal(w.n, 1);
    assert_int_equal(w.status[0], 0);
    expect_log(j, 1, 10);
    journal_close(j);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- recovery -------------------------------------------------------------------------------- */

static void commit_to(struct journal_thread *jt, struct state *s, struct st_update_list *ups)
{
    for (size_t i = 0; i < ups->n; i++) {
        const struct st_update *u = &ups->v[i];
        uint8_t *b;
        size_t len;
        assert_int_equal(state_apply(s, u), 0);
        assert_int_equal(update_codec_encode(u, &b, &len), 0);
        assert_int_equal(journal_thread_add(jt, b, len,
                                            u->type == ST_DATASET_REGISTERED ? u->name : NULL,
                                            u->def, u->def_len),
                         0);
    }
    st_update_list_clear(ups);
}

static void snapshot_to(struct journal_thread *jt, const struct state *s)
{
    uint8_t *b;
    size_t len;
    assert_int_equal(update_codec_snapshot_encode(s, &b, &len), 0);
    assert_int_equal(journal_thread_snapshot(jt, b, len), 0);
}

static void test_recover_fresh(void **unused)
{
    (void)unused;
    struct journal *j = open_journal(work("fresh"), 0, 0);
    struct state s, empty;
    struct journal_recovery info;
    char err[SLUICE_ERRMSG_SIZE];
    state_init(&empty);
    assert_int_equal(recovery_replay(j, &s, &info, err, sizeof err), 0);
    assert_true(state_digest(&s) == state_digest(&empty));
    assert_int_equal(info.next_seq, 1);
    assert_int_equal(info.snapshot_seq, 0);
    assert_int_equal(info.replayed, 0);
    state_release(&s);
    journal_close(j);
}

/* A short, realistic history: a dataset, two workers, a distributed job with leases, a snapshot
 * in the middle; then a restart that must give the same state and go on with new ids. */
static void test_recover_ids_continue(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct journal *j = open_journal(work("w"), 0, 0);
    struct journal_thread *jt;
    char err[SLUICE_ERRMSG_SIZE], id[ST_ID_MAX];
    struct journal_thread_opts o = {.journal = j, .next_seq = 1};
    assert_int_equal(journal_thread_start(&loop, &o, &jt, err, sizeof err), 0);
    struct state live;
    struct st_update_list ups = {0};
    state_init(&live);
    uint64_t w1, w2;
    struct plan_splits_result lease;
    assert_int_equal(plan_register_dataset(&live, "", (const uint8_t *)"DEF", 3, 0, 0, "range(9)",
                                           id, &ups, err, sizeof err),
                     0);
    commit_to(jt, &live, &ups);
    struct plan_heartbeat_request hb = {
        .address = "w1:1", .incarnation = 11, .unkeyed = true, .may_replace = true};
    assert_int_equal(plan_worker_heartbeat(&live, &hb, &w1, &ups, err, sizeof err), 0);
    commit_to(jt, &live, &ups);
    struct split_plan plan = {.source_len = 9, .split_size = 1, .per_pass = 9, .passes = 1};
    struct plan_job_request job = {.dataset_id = id,
                                   .job_name = "j",
                                   .mode = SLUICE_DISTRIBUTED_EPOCH,
                                   .endless = true,
                                   .plan = &plan};
    struct plan_job_result ids;
    assert_int_equal(plan_get_or_create_job(&live, &job, &ids, &ups, err, sizeof err), 0);
    commit_to(jt, &live, &ups);
    snapshot_to(jt, &live);
    hb.address = "w2:1";
    hb.incarnation = 22;
    assert_int_equal(plan_worker_heartbeat(&live, &hb, &w2, &ups, err, sizeof err), 0);
    commit_to(jt, &live, &ups);
    struct plan_splits_request sr = {.task_id = live.tasks[0].id, .max = 3};
    assert_int_equal(plan_get_splits(&live, &sr, &lease, &ups, err, sizeof err), 0);
    free(lease.seqs);
    commit_to(jt, &live, &ups);
    uint64_t fin[] = {1};
    sr = (struct plan_splits_request){
        .task_id = live.tasks[0].id, .finished = fin, .nfinished = 1, .max = 2};
    assert_int_equal(plan_get_splits(&live, &sr, &lease, &ups, err, sizeof err), 0);
    free(lease.seqs);
    commit_to(jt, &live, &ups);
    close_thread(&loop, jt);
    journal_close(j);

    j = open_journal(work("w"), 0, 0);
    struct state back;
    struct journal_recovery info;
    assert_int_equal(recovery_replay(j, &back, &info, err, sizeof err), 0);
    assert_true(state_digest(&back) == state_digest(&live));
    assert_true(info.snapshot_seq > 0);
    assert_true(info.replayed > 0);
    assert_int_equal(info.next_seq, live.applied + 1);
    assert_int_equal(back.iterations[0].split_cursor, 5);
    /* New ids continue past every id handed out before the restart. */
    uint64_t w3;
    struct plan_job_result ids2;
    job.job_name = "";
    assert_int_equal(plan_get_or_create_job(&back, &job, &ids2, &ups, err, sizeof err), 0);
    assert_true(ids2.job_id == ids.job_id + 1 && ids2.iteration_id == ids.iteration_id + 1 &&
                ids2.client_id == ids.client_id + 1);
    st_update_list_clear(&ups);
    hb.address = "w3:1";
    hb.incarnation = 33;
    assert_int_equal(plan_worker_heartbeat(&back, &hb, &w3, &ups, err, sizeof err), 0);
    assert_true(w3 == w2 + 1);
    st_update_list_release(&ups);
    state_release(&back);
    state_release(&live);
    journal_close(j);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Appends the given payloads as records 1..n to a fresh journal under wd. */
static void write_records(const char *wd, struct journal_record *recs, size_t n,
                          const struct journal_snapshot *snap)
{
    struct journal *j = open_journal(wd, 0, 0);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(journal_append(j, 1, recs, n, snap, err, sizeof err), 0);
    journal_close(j);
}

static void expect_recover_error(const char *wd, int code, const char *msg)
{
    struct journal *j = open_journal(wd, 0, 0);
    struct state s;
    struct journal_recovery info;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(recovery_replay(j, &s, &info, err, sizeof err), code);
    assert_string_equal(err, msg);
    assert_int_equal(s.ndatasets + s.nworkers + s.njobs, 0);
    state_release(&s);
    journal_close(j);
}

static struct journal_record encoded(const struct st_update *u)
{
    uint8_t *b;
    size_t len;
    assert_int_equal(update_codec_encode(u, &b, &len), 0);
    return (struct journal_record){.data = b, .len = len};
}

static void test_recover_damage(void **unused)
{
    (void)unused;
    struct st_update w1 = {.type = ST_WORKER_REGISTERED, .id = 1, .incarnation = 5};
    struct st_update w2 = {.type = ST_WORKER_REGISTERED, .id = 2, .incarnation = 6};
    struct st_update bad = {.type = ST_TASK_FINISHED, .id = 5};
    snprintf(w1.address, sizeof w1.address, "w1:1");
    snprintf(w2.address, sizeof w2.address, "w2:1");
    struct journal_record r[3] = {encoded(&w1), encoded(&w2), encoded(&bad)};

    /* A record that fails its checksum. */
    write_records(work("crc"), r, 2, NULL);
    flip_record(work("crc"), 2, 6);
    expect_recover_error(work("crc"), SLUICE_ERR_CORRUPT, "record 2: checksum mismatch");

    /* A record of a type this build does not know. */
    Sluice__Update m = SLUICE__UPDATE__INIT;
    m.type = (Sluice__Update__Type)99;
    m.id = 3;
    uint8_t unknown[64];
    size_t ulen = sluice__update__pack(&m, unknown);
    struct journal_record ur[2] = {r[0], {.data = unknown, .len = ulen}};
    write_records(work("type"), ur, 2, NULL);
    expect_recover_error(work("type"), SLUICE_ERR_CORRUPT,
                         "record 2: does not decode: unknown update type 99");

    /* Bytes that are no Update at all. */
    struct journal_record garbage[1] = {{.data = (const uint8_t *)"\xff\xff\xff", .len = 3}};
    write_records(work("garbage"), garbage, 1, NULL);
    expect_recover_error(work("garbage"), SLUICE_ERR_CORRUPT,
                         "record 1: does not decode: not an Update message");

    /* A record that decodes but does not fit the state. */
    struct journal_record nr[2] = {r[0], r[2]};
    write_records(work("apply"), nr, 2, NULL);
    expect_recover_error(work("apply"), SLUICE_ERR_CORRUPT,
                         "record 2: does not apply: task_finished 5: corrupt data");

    /* A missing record. */
    write_records(work("gap"), r, 2, NULL);
    uint8_t key[8];
    journal_seq_key(1, key);
    raw_edit(work("gap"), "log", key, 8, edit_del, NULL);
    expect_recover_error(work("gap"), SLUICE_ERR_CORRUPT, "record 1 is missing");

    /* A snapshot that does not decode, and one whose dataset definition is gone. */
    struct journal_snapshot snap = {.seq = 2, .data = (const uint8_t *)"\x0a\xff", .len = 2};
    write_records(work("snap"), r, 2, &snap);
    expect_recover_error(work("snap"), SLUICE_ERR_CORRUPT, "snapshot at 2: not a Snapshot message");
    struct state s;
    struct st_update ds = {.type = ST_DATASET_REGISTERED, .id = 1};
    snprintf(ds.name, sizeof ds.name, "1");
    ds.def = (uint8_t *)"D";
    ds.def_len = 1;
    state_init(&s);
    assert_int_equal(state_apply(&s, &ds), 0);
    uint8_t *sb;
    size_t slen;
    assert_int_equal(update_codec_snapshot_encode(&s, &sb, &slen), 0);
    snap = (struct journal_snapshot){.seq = 2, .data = sb, .len = slen};
    write_records(work("nodef"), r, 2, &snap); /* no record carried the definition */
    expect_recover_error(work("nodef"), SLUICE_ERR_CORRUPT,
                         "snapshot at 2: dataset '1' is not in the datasets table");
    free(sb);
    state_release(&s);
    for (int i = 0; i < 3; i++)
        free((void *)r[i].data);
}

/* ---- a dispatcher-like process killed at random moments ------------------------------------- */

/* What the child reports on the pipe: after applying a commit, the state it reached; after the
 * commit is durable, that it acknowledged it. */
struct report {
    char kind; /* 'A' applied, 'D' durable */
    uint64_t applied;
    uint64_t digest;
};

struct child {
    uv_loop_t loop;
    struct journal *j;
    struct journal_thread *jt;
    struct state s;
    struct st_update_list ups;
    uv_timer_t timer;
    uint64_t x;
    int fd;
    uint64_t since_snapshot;
};

struct ack {
    struct child *c;
    uint64_t applied;
};

static void child_report(struct child *c, char kind, uint64_t applied, uint64_t digest)
{
    struct report r = {.kind = kind, .applied = applied, .digest = digest};
    if (write(c->fd, &r, sizeof r) != sizeof r)
        _exit(20);
}

static void child_durable(void *ctx, int status)
{
    struct ack *a = ctx;
    if (status != 0)
        _exit(21);
    child_report(a->c, 'D', a->applied, 0);
    free(a);
}

static uint64_t child_pick(struct child *c, uint64_t n)
{
    c->x ^= c->x << 13;
    c->x ^= c->x >> 7;
    c->x ^= c->x << 17;
    return n ? c->x % n : 0;
}

/* One request: plan, apply and queue (the shell's commit), then wait for durability. */
static void child_request(struct child *c)
{
    static const char *const addrs[] = {"w0:1", "w1:1", "w2:1"};
    char err[SLUICE_ERRMSG_SIZE], id[ST_ID_MAX];
    uint64_t a;
    const struct state *s = &c->s;
    switch (child_pick(c, 6)) {
    case 0:
        plan_register_dataset(s, "", (const uint8_t *)"def", 3, 0, 0, "text", id, &c->ups, err,
                              sizeof err);
        if (s->ndatasets > 0) {
            struct split_plan p = {
                .source_len = 50, .split_size = 1, .per_pass = 50, .passes = 1 + child_pick(c, 3)};
            struct plan_job_request job = {.dataset_id = s->datasets[0].id,
                                           .job_name = child_pick(c, 2) ? "" : "n",
                                           .mode = SLUICE_DISTRIBUTED_EPOCH,
                                           .endless = true,
                                           .plan = &p};
            struct plan_job_result ids;
            plan_get_or_create_job(s, &job, &ids, &c->ups, err, sizeof err);
        }
        break;
    case 1: {
        const char *addr = addrs[child_pick(c, 3)];
        const struct st_worker *w = state_worker_by_address(s, addr);
        uint64_t inc = w && child_pick(c, 8) ? w->incarnation : 1 + child_pick(c, 99);
        struct plan_heartbeat_request hb = {
            .address = addr, .incarnation = inc, .unkeyed = true, .may_replace = true};
        plan_worker_heartbeat(s, &hb, &a, &c->ups, err, sizeof err);
        break;
    }
    case 2:
        if (s->nclients > 0 && child_pick(c, 4) == 0)
            plan_release_client(s, s->clients[child_pick(c, s->nclients)].id, &c->ups, err,
                                sizeof err);
        else if (s->niterations > 0)
            plan_gc_iteration(s, s->iterations[child_pick(c, s->niterations)].id, &c->ups, err,
                              sizeof err);
        break;
    default:
        if (s->ntasks > 0) {
            const struct st_task *t = &s->tasks[child_pick(c, s->ntasks)];
            struct plan_splits_request sr = {.task_id = t->id,
                                             .finished = t->leased.v,
                                             .nfinished = t->leased.n,
                                             .max = 1 + (uint32_t)child_pick(c, 3)};
            struct plan_splits_result lease;
            if (plan_get_splits(s, &sr, &lease, &c->ups, err, sizeof err) == 0)
                free(lease.seqs);
        }
        break;
    }
    size_t n = c->ups.n;
    commit_to(c->jt, &c->s, &c->ups);
    if (n > 0) {
        child_report(c, 'A', c->s.applied, state_digest(&c->s));
        c->since_snapshot += n;
        if (c->since_snapshot >= 7) {
            snapshot_to(c->jt, &c->s);
            c->since_snapshot = 0;
        }
    }
    struct ack *k = malloc(sizeof *k);
    *k = (struct ack){c, c->s.applied};
    journal_thread_wait(c->jt, child_durable, k);
}

static void child_tick(uv_timer_t *h)
{
    struct child *c = h->data;
    for (int i = 0; i < 8; i++)
        child_request(c);
}

static int dispatcher_child(void *arg)
{
    struct child *c = arg;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_opts jo = {.work_dir = work("kill"), .create = true};
    struct journal_recovery info;
    if (journal_open(&jo, &c->j, err, sizeof err) < 0)
        return 30;
    if (recovery_replay(c->j, &c->s, &info, err, sizeof err) < 0)
        return 31;
    uv_loop_init(&c->loop);
    struct journal_thread_opts o = {.journal = c->j, .next_seq = info.next_seq};
    if (journal_thread_start(&c->loop, &o, &c->jt, err, sizeof err) < 0)
        return 32;
    c->since_snapshot = info.replayed;
    child_report(c, 'A', c->s.applied, state_digest(&c->s));
    uv_timer_init(&c->loop, &c->timer);
    c->timer.data = c;
    uv_timer_start(&c->timer, child_tick, 1, 1);
    uv_run(&c->loop, UV_RUN_DEFAULT); /* until killed */
    return 33;
}

/* What the parent learns from one life of the child. */
struct lives {
    uint64_t *digest_at; /* the digest of the state reached at each applied count */
    size_t cap;
    uint64_t acked;
    bool first; /* the next 'A' report is the state this life recovered */
    int life;
};

static void take_report(struct lives *l, const struct report *r)
{
    assert_true(r->applied < l->cap);
    if (r->kind == 'D') {
        if (r->applied > l->acked)
            l->acked = r->applied;
        return;
    }
    if (l->first && l->life > 0) {
        /* The recovered state: one the previous lives really had, never older than what they
         * acknowledged. */
        if (r->applied < l->acked)
            fail_msg("life %d recovered %" PRIu64 " updates, %" PRIu64 " were acknowledged",
                     l->life, r->applied, l->acked);
        if (l->digest_at[r->applied] != r->digest)
            fail_msg("life %d recovered a state never reached live (%" PRIu64 " updates)", l->life,
                     r->applied);
    }
    l->first = false;
    l->digest_at[r->applied] = r->digest;
}

static void test_killed_at_random(void **unused)
{
    (void)unused;
    struct lives l = {.cap = 1 << 20};
    l.digest_at = calloc(l.cap, sizeof *l.digest_at);
    assert_non_null(l.digest_at);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec | 1;
    for (l.life = 0; l.life < 8; l.life++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        struct child c;
        memset(&c, 0, sizeof c);
        c.fd = fds[1];
        c.x = (seed * (uint64_t)(l.life + 1) * 0x9e3779b97f4a7c15ull) | 1;
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            _exit(dispatcher_child(&c));
        }
        close(fds[1]);
        /* Let it work for a while that differs from life to life, then kill it mid-stride. The
         * while starts with its first report (bounded), so a slow start on a loaded machine
         * cannot end a life before it served anything. */
        int ms = 40 + (int)((seed >> (l.life * 4)) % 120);
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        l.first = true;
        bool started = false;
        for (;;) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            long elapsed =
                (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
            if (!started && !l.first) {
                started = true;
                start = now;
                elapsed = 0;
            }
            if (started ? elapsed >= ms : elapsed >= 10000)
                break;
            struct pollfd p = {.fd = fds[0], .events = POLLIN};
            if (poll(&p, 1, started ? (int)(ms - elapsed) : 100) <= 0)
                continue;
            struct report r;
            if (read(fds[0], &r, sizeof r) != sizeof r)
                break;
            take_report(&l, &r);
        }
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status)); /* it was still serving */
        /* What it said before it died counts: an acknowledgement that left is a reply sent. */
        struct report r;
        while (read(fds[0], &r, sizeof r) == sizeof r)
            take_report(&l, &r);
        close(fds[0]);
        assert_false(l.first);
    }
    assert_true(l.acked > 50);
    /* The journal left behind recovers to the last state acknowledged or later. */
    struct journal *j = open_journal(work("kill"), 0, 0);
    struct state s;
    struct journal_recovery info;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(recovery_replay(j, &s, &info, err, sizeof err), 0);
    assert_true(s.applied >= l.acked);
    assert_true(l.digest_at[s.applied] == state_digest(&s));
    assert_true(info.replayed < 7 + 64); /* snapshots keep the tail short */
    state_release(&s);
    journal_close(j);
    free(l.digest_at);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fresh_work_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_while_growing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_and_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_stops_on_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_trims_in_steps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_truncates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_datasets_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readers_and_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_grows_then_fills, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_points, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_record_per_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poll_between_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_snapshots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_failure_is_final, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_writes_what_is_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recover_fresh, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recover_ids_continue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recover_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_at_random, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
