/* A damaged journal, with the real binaries: a small real journal (a fault-tolerant dispatcher,
 * a worker, datasets registered and jobs read through the CLI) is damaged on disk in every way a
 * bad disk could: one bit flipped at every 64th byte (512th under the sanitizers) of what the
 * pages hold and at every 8th of those offsets (2nd) in their empty room, each field of both meta
 * pages flipped (its low and its high byte), and the file cut at every page boundary. For every
 * variant:
 *   - `sluice journal verify` and the dispatcher's start agree: both accept it, or both refuse it
 *     with the same message; neither dies of a signal;
 *   - a start that succeeds serves exactly the original datasets and jobs;
 *   - a refused journal is left exactly as it was (nothing created or rewritten).
 * The sweep prints how many variants started and how the others were refused. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/journal_raw.h"
#include "lib/proc.h"
#include "lib/tmp.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 20000

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
/* The sweep flips a bit every FLIP_STRIDE bytes, but in a page's empty room (room_byte) only at
 * every ROOM_EVERY-th of those offsets. */
#ifdef SANITIZED
#define FLIP_STRIDE 512
#define ROOM_EVERY 2
#else
#define FLIP_STRIDE 64
#define ROOM_EVERY 8
#endif
#define PSIZE 4096
/* LMDB's page header: page number (8 bytes), pad (2), flags (2), lower and upper bounds of the
 * free room (2 each); and the end of a meta page's meta data (the last field of meta_fields). */
#define PAGE_FLAGS 10
#define PAGE_LOWER 12
#define PAGE_UPPER 14
#define P_BRANCH 0x01
#define P_LEAF 0x02
#define P_OVERFLOW 0x04
#define P_META 0x08
#define META_END 152

/* ---- files ----------------------------------------------------------------------------------- */

/* ---- processes ------------------------------------------------------------------------------- */

/* `sluice status` from its datasets table on: what a dispatcher serves (workers come and go). */
static char *served(const char *addr)
{
    char *const argv[] = {(char *)bin_path("sluice"), "status", "--dispatcher", (char *)addr, NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd(argv, WAIT_MS, &out, &err);
    if (rc != 0)
        fail_msg("sluice status: %d: %s", rc, err ? err : "");
    free(err);
    const char *at = strstr(out, "datasets (");
    assert_non_null(at);
    char *tables = strdup(at);
    free(out);
    assert_non_null(tables);
    /* The jobs' served rates (ELEM/S and the columns after it) are what workers reported lately,
     * not journaled state: the jobs table is compared up to them. */
    char *jobs = strstr(tables, "\njobs (");
    char *head = jobs ? strstr(jobs, "ELEM/S") : NULL;
    if (head) {
        const char *line = head;
        while (line > tables && line[-1] != '\n')
            line--;
        size_t col = (size_t)(head - line);
        char *w = (char *)line, *r = (char *)line;
        while (*r) {
            size_t n = strcspn(r, "\n");
            /* Notes under the table ("  job 3 failed: ...") are kept whole. */
            size_t keep = n < col || strncmp(r, "  job ", 6) == 0 ? n : col;
            memmove(w, r, keep);
            while (keep > 0 && w[keep - 1] == ' ')
                keep--;
            w += keep;
            r += n;
            if (*r == '\n')
                *w++ = *r++;
        }
        *w = '\0';
    }
    return tables;
}

/* The message of a one-line error "PREFIX: journal: WD: MESSAGE" in text (NULL if none). */
static char *message_after(const char *text, const char *prefix, const char *wd)
{
    char head[700];
    snprintf(head, sizeof head, "%s: journal: %s: ", prefix, wd);
    const char *at = text ? strstr(text, head) : NULL;
    if (!at)
        return NULL;
    at += strlen(head);
    size_t n = strcspn(at, "\n");
    return strndup(at, n);
}

struct start {
    bool started;
    int exit_code; /* when not started */
    char *err;     /* its stderr */
    char addr[128];
    struct proc p;
};

/* Starts a dispatcher on wd and waits for it to listen or to exit. */
static void start_dispatcher(const char *wd, const char *extra, struct start *s)
{
    char *argv[] = {(char *)bin_path("sluice-dispatcher"),
                    "--fault-tolerant",
                    "--work-dir",
                    (char *)wd,
                    "--port",
                    "0",
                    "--log-level",
                    "warn",
                    (char *)extra,
                    NULL};
    memset(s, 0, sizeof *s);
    assert_int_equal(proc_spawn(&s->p, argv), 0);
    char line[512];
    size_t have = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = WAIT_MS - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0)
            fail_msg("the dispatcher on %s neither listened nor exited", wd);
        struct pollfd pfd = {.fd = s->p.out_fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)left) <= 0)
            continue;
        ssize_t n = read(s->p.out_fd, line + have, 1);
        if (n <= 0)
            break; /* it exited */
        if (line[have] != '\n' && have + 2 < sizeof line) {
            have++;
            continue;
        }
        line[have] = '\0';
        const char *at = strstr(line, " listening on ");
        if (at) {
            s->started = true;
            snprintf(s->addr, sizeof s->addr, "%s", at + strlen(" listening on "));
            return;
        }
        have = 0;
    }
    s->exit_code = proc_wait(&s->p, WAIT_MS);
    s->err = (char *)file_read(s->p.log, NULL);
}

static int verify_cmd(const char *wd, char **out, char **err)
{
    char *const argv[] = {
        (char *)bin_path("sluice"), "journal", "verify", "--work-dir", (char *)wd, NULL};
    return run_cmd(argv, WAIT_MS, out, err);
}

/* ---- the original journal -------------------------------------------------------------------- */

struct original {
    uint8_t *data;
    size_t len;
    char *served; /* its datasets and jobs, as `sluice status` shows them */
};

/* A fault-tolerant dispatcher (a snapshot every 16 changes, so the journal has a snapshot, a
 * log after it and a free list), a worker, four datasets, three jobs read to the end. */
static void build_journal(struct original *o, char *wd, size_t wdlen)
{
    static const char *const dargs[] = {"--snapshot-every", "16", NULL};
    struct cluster c = {.dispatcher_args = dargs};
    assert_int_equal(cluster_start_dispatcher(&c, 0, 1), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    static const char *const pipelines[] = {"range(10)", "range(20) | map(square)", "list(1, 2, 3)",
                                            "range(100) | batch(7)"};
    char *out = NULL, *err = NULL;
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "d%d", i);
        assert_int_equal(
            cluster_cli(&c, &out, &err, "register", pipelines[i], "--dataset-id", id, NULL), 0);
        free(out);
        free(err);
    }
    static const char *const reads[][4] = {{"d0", "a", "parallel_epochs", "10\n"},
                                           {"d1", "b", "distributed_epoch", "20\n"},
                                           {"d3", "c", "distributed_epoch", "15\n"}};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cluster_cli(&c, &out, &err, "read", "--dataset-id", reads[i][0],
                                     "--job-name", reads[i][1], "--mode", reads[i][2], "--format",
                                     "count", NULL),
                         0);
        assert_string_equal(out, reads[i][3]);
        free(out);
        free(err);
    }
    o->served = served(c.dispatcher.addr);
    snprintf(wd, wdlen, "%s", c.work_dir);
    assert_int_equal(cluster_stop(&c), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/journal/data.mdb", wd);
    o->data = file_read(path, &o->len);
    assert_non_null(o->data);
    assert_true(o->len >= 6 * PSIZE && o->len % PSIZE == 0);
}

/* ---- the sweep ------------------------------------------------------------------------------- */

struct sweep_tally {
    int variants, flips, fields, cuts;
    int started; /* with the original state */
    int refused;
    int truncated, meta, pages, values, records, other;
};

/* Writes one variant into wd, runs verify and a start on it, and checks they agree. */
static void try_variant(const struct original *o, const char *wd, const uint8_t *data, size_t len,
                        const char *label, struct sweep_tally *t)
{
    char path[700];
    snprintf(path, sizeof path, "%s/journal/lock.mdb", wd);
    unlink(path);
    snprintf(path, sizeof path, "%s/journal/data.mdb", wd);
    file_write(path, data, len);
    t->variants++;

    char *vout = NULL, *verr = NULL;
    int vrc = verify_cmd(wd, &vout, &verr);
    if (vrc != 0 && vrc != 1)
        fail_msg("%s: sluice journal verify exited with %d: %s", label, vrc, verr);
    struct start s;
    start_dispatcher(wd, NULL, &s);
    if (s.started) {
        if (vrc != 0)
            fail_msg("%s: the dispatcher started on a journal verify rejects: %s", label, verr);
        char *now = served(s.addr);
        if (strcmp(now, o->served) != 0)
            fail_msg("%s: a start that succeeded serves\n%s\ninstead of\n%s", label, now,
                     o->served);
        free(now);
        assert_int_equal(proc_stop(&s.p, SIGTERM, WAIT_MS), 0);
        t->started++;
    } else {
        if (s.exit_code != 1)
            fail_msg("%s: the dispatcher exited with %d: %s", label, s.exit_code, s.err);
        if (vrc != 1)
            fail_msg("%s: verify accepts what the dispatcher refuses: %s", label, s.err);
        char *dmsg = message_after(s.err, "sluice-dispatcher", wd);
        char *vmsg = message_after(verr, "sluice", wd);
        if (!dmsg || !vmsg || strncmp(vmsg, dmsg, strlen(dmsg)) != 0)
            fail_msg("%s: verify and the dispatcher disagree:\n  verify:     %s\n  dispatcher: %s",
                     label, verr, s.err);
        if (strstr(dmsg, "the check crashed") || strstr(dmsg, "the check stopped"))
            fail_msg("%s: LMDB met damage the page checks let through: %s", label, dmsg);
        /* Nothing was created or rewritten in it. */
        size_t after_len;
        uint8_t *after = file_read(path, &after_len);
        if (!after || after_len != len || memcmp(after, data, len) != 0)
            fail_msg("%s: the refused journal was changed", label);
        free(after);
        t->refused++;
        if (strstr(dmsg, "truncated") || strstr(dmsg, "is empty"))
            t->truncated++;
        else if (strstr(dmsg, "meta page"))
            t->meta++;
        else if (strstr(dmsg, "(at page "))
            t->pages++;
        else if (strstr(dmsg, "record seq"))
            t->records++;
        else if (strstr(dmsg, "journal damaged: "))
            t->values++;
        else {
            print_message("%s: refused: %s\n", label, dmsg);
            t->other++;
        }
        free(dmsg);
        free(vmsg);
        free(s.err);
    }
    free(vout);
    free(verr);
}

/* Offsets in a meta page of its fields: the page header (number, pad, flags, bounds), magic,
 * version, address, map size, the free list's and the main table's records (pad, flags, depth,
 * branch, leaf and overflow pages, entries, root), the last page, the transaction id. */
struct field {
    unsigned off, size;
};
static const struct field meta_fields[] = {
    {0, 8},  {8, 2},  {10, 2}, {12, 2},  {14, 2},  {16, 4},  {20, 4},  {24, 8},  {32, 8},
    {40, 4}, {44, 2}, {46, 2}, {48, 8},  {56, 8},  {64, 8},  {72, 8},  {80, 8},  {88, 4},
    {92, 2}, {94, 2}, {96, 8}, {104, 8}, {112, 8}, {120, 8}, {128, 8}, {136, 8}, {144, 8},
};

/* Whether byte off of data (len bytes, the original journal) lies in the empty room of its page,
 * as the page's own header says: on a meta page, past the meta data (bytes the check requires to
 * be zero); on a branch or leaf page, between its node pointers and its nodes (lower to upper:
 * bytes LMDB never reads). Overflow pages, and anything whose header does not parse, have none. */
static bool room_byte(const uint8_t *data, size_t len, size_t off)
{
    size_t page = off / PSIZE * PSIZE, in = off % PSIZE;
    if (page + PSIZE > len)
        return false;
    uint16_t flags, lower, upper;
    memcpy(&flags, data + page + PAGE_FLAGS, 2);
    memcpy(&lower, data + page + PAGE_LOWER, 2);
    memcpy(&upper, data + page + PAGE_UPPER, 2);
    if (flags & P_META)
        return in >= META_END;
    if ((flags & (P_BRANCH | P_LEAF)) && !(flags & P_OVERFLOW) && lower <= upper && upper <= PSIZE)
        return in >= lower && in < upper;
    return false;
}

static void test_sweep(void **unused)
{
    (void)unused;
    struct original o;
    char wd0[512], wd[600];
    build_journal(&o, wd0, sizeof wd0);
    snprintf(wd, sizeof wd, "%s/sweep", tmp_dir());
    char dir[700];
    snprintf(dir, sizeof dir, "%s/journal", wd);
    assert_int_equal(mkdir(wd, 0755), 0);
    assert_int_equal(mkdir(dir, 0755), 0);

    struct sweep_tally t = {0};
    char label[160];
    uint8_t *v = malloc(o.len);
    assert_non_null(v);

    /* The original itself starts. */
    try_variant(&o, wd, o.data, o.len, "the original", &t);
    assert_int_equal(t.started, 1);

    /* One bit at every 64th byte, the bit rotating with the offset (every 512th under the
     * sanitizers, whose processes start much slower). In a page's empty room only at every 8th
     * of those offsets (every 2nd under the sanitizers): a variant costs two or three processes
     * (verify, a dispatcher, and `sluice status` when it starts), and there every flip meets
     * one and the same check. On a meta page each is refused as "byte N past the meta data is
     * not zero"; on the others (the room is most of every leaf page, about 80 % of the flips
     * at the full stride) each starts with the original state, since LMDB never reads the room.
     * So the flips still land in every page, of every type the journal has, both meta pages
     * included, at the full stride wherever a page header, a node pointer or a node lies, and
     * the sweep runs about a quarter of the variants it would otherwise. */
    int room_skipped = 0;
    for (size_t off = 0; off < o.len; off += FLIP_STRIDE) {
        if (room_byte(o.data, o.len, off) && (off / FLIP_STRIDE) % ROOM_EVERY != 0) {
            room_skipped++;
            continue;
        }
        memcpy(v, o.data, o.len);
        unsigned bit = (unsigned)(off / FLIP_STRIDE) % 8;
        v[off] ^= (uint8_t)(1u << bit);
        snprintf(label, sizeof label, "bit %u of byte %zu (page %zu)", bit, off, off / PSIZE);
        try_variant(&o, wd, v, o.len, label, &t);
        t.flips++;
    }
    /* Each field of both meta pages: its lowest bit, and the highest bit of its last byte. */
    for (unsigned m = 0; m < 2; m++) {
        for (size_t i = 0; i < sizeof meta_fields / sizeof meta_fields[0]; i++) {
            for (int high = 0; high < 2; high++) {
                size_t at = m * PSIZE + meta_fields[i].off + (high ? meta_fields[i].size - 1 : 0);
                memcpy(v, o.data, o.len);
                v[at] ^= high ? 0x80 : 0x01;
                snprintf(label, sizeof label, "meta page %u, field at %u, %s bit", m,
                         meta_fields[i].off, high ? "high" : "low");
                try_variant(&o, wd, v, o.len, label, &t);
                t.fields++;
            }
        }
    }
    /* Cut at every page boundary. */
    for (size_t len = 0; len < o.len; len += PSIZE) {
        snprintf(label, sizeof label, "cut to %zu bytes", len);
        try_variant(&o, wd, o.data, len, label, &t);
        t.cuts++;
    }
    print_message("sweep over a journal of %zu bytes: %d variants (%d bit flips, %d more in the "
                  "pages' empty room left out, %d meta page fields, %d cuts): %d started with "
                  "the original state, %d refused by both verify and the dispatcher (%d "
                  "truncated, %d meta pages, %d other pages, %d values, %d records, %d other), 0 "
                  "crashes\n",
                  o.len, t.variants - 1, t.flips, room_skipped, t.fields, t.cuts, t.started - 1,
                  t.refused, t.truncated, t.meta, t.pages, t.values, t.records, t.other);
    assert_int_equal(t.other, 0);
    free(v);
    free(o.data);
    free(o.served);
}

/* ---- a work dir without a whole journal ------------------------------------------------------ */

static void expect_refused(const char *wd, const char *want)
{
    struct start s;
    start_dispatcher(wd, NULL, &s);
    if (s.started)
        fail_msg("a dispatcher started on %s, expected: %s", wd, want);
    assert_int_equal(s.exit_code, 1);
    char *dmsg = message_after(s.err, "sluice-dispatcher", wd);
    if (!dmsg || strcmp(dmsg, want) != 0)
        fail_msg("the dispatcher said\n  %s\nexpected\n  %s", s.err, want);
    char *out = NULL, *err = NULL;
    assert_int_equal(verify_cmd(wd, &out, &err), 1);
    char *vmsg = message_after(err, "sluice", wd); /* and perhaps what would recover it */
    if (!vmsg || strncmp(vmsg, want, strlen(want)) != 0)
        fail_msg("verify said\n  %s\nexpected\n  %s", err, want);
    free(vmsg);
    free(dmsg);
    free(s.err);
    free(out);
    free(err);
}

static void expect_starts(const char *wd)
{
    struct start s;
    start_dispatcher(wd, NULL, &s);
    if (!s.started)
        fail_msg("no dispatcher started on %s: %s", wd, s.err);
    assert_int_equal(proc_stop(&s.p, SIGTERM, WAIT_MS), 0);
    char *out = NULL, *err = NULL;
    assert_int_equal(verify_cmd(wd, &out, &err), 0);
    free(out);
    free(err);
}

static bool exists(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* The page of the current transaction's main table: the meta page with the larger id names it. */
static size_t main_root(const uint8_t *data)
{
    uint64_t t0, t1, root;
    memcpy(&t0, data + 144, 8);
    memcpy(&t1, data + PSIZE + 144, 8);
    memcpy(&root, data + (t0 < t1 ? PSIZE : 0) + 88 + 40, 8);
    return (size_t)root;
}

static void lmdb_delete(const char *wd, const char *table, const char *key);

static void test_no_whole_journal(void **unused)
{
    (void)unused;
    char wd[600], path[700];
    struct original o;
    char good[512];
    build_journal(&o, good, sizeof good);

    /* A missing work dir, an empty one, and one with what an interrupted creation leaves: a
     * journal is created, in one step. */
    snprintf(wd, sizeof wd, "%s/fresh/a/b", tmp_dir());
    expect_starts(wd);
    assert_true(exists(wd, "journal/data.mdb"));
    assert_false(exists(wd, "journal.new"));
    snprintf(wd, sizeof wd, "%s/empty", tmp_dir());
    assert_int_equal(mkdir(wd, 0755), 0);
    expect_starts(wd);
    snprintf(wd, sizeof wd, "%s/interrupted", tmp_dir());
    snprintf(path, sizeof path, "%s/journal.new", wd);
    assert_int_equal(mkdir(wd, 0755), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/journal.new/data.mdb", wd);
    file_write(path, o.data, 2 * PSIZE);
    expect_starts(wd);
    assert_false(exists(wd, "journal.new"));

    /* A work dir with other things in it and no journal: nothing is created there. */
    snprintf(wd, sizeof wd, "%s/foreign", tmp_dir());
    assert_int_equal(mkdir(wd, 0755), 0);
    snprintf(path, sizeof path, "%s/notes.txt", wd);
    file_write(path, (const uint8_t *)"x", 1);
    expect_refused(wd, "no journal here (no journal/), and the work dir is not empty: a journal is "
                       "only created in an empty or new directory");
    assert_false(exists(wd, "journal"));
    assert_false(exists(wd, "journal.new"));

    /* A journal directory without its data file, an empty data file, a cut one. */
    snprintf(wd, sizeof wd, "%s/missing", tmp_dir());
    snprintf(path, sizeof path, "%s/journal", wd);
    assert_int_equal(mkdir(wd, 0755), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    expect_refused(wd, "the journal's data file journal/data.mdb is missing");
    assert_false(exists(wd, "journal/data.mdb"));
    snprintf(path, sizeof path, "%s/journal/data.mdb", wd);
    file_write(path, o.data, 0);
    expect_refused(wd, "journal damaged: the data file is empty (0 bytes)");
    size_t len = 1;
    free(file_read(path, &len));
    assert_int_equal(len, 0);
    /* Cut after the meta pages: the first tree the check walks, the free list (or, when it is
     * empty, the main table), has its root past the end. */
    file_write(path, o.data, 2 * PSIZE);
    uint64_t t0, t1, free_root;
    memcpy(&t0, o.data + 144, 8);
    memcpy(&t1, o.data + PSIZE + 144, 8);
    size_t cur = t1 > t0;
    memcpy(&free_root, o.data + cur * PSIZE + 80, 8);
    char want[256];
    snprintf(want, sizeof want,
             "journal damaged: the data file is truncated: %d bytes, but page %zu of the %s is "
             "past its end (at page %zu)",
             2 * PSIZE, free_root != UINT64_MAX ? (size_t)free_root : main_root(o.data),
             free_root != UINT64_MAX ? "free list" : "main table", cur);
    expect_refused(wd, want);

    /* The name of the log table in the main table, damaged: the journal is refused, not taken
     * for an empty one (the "silent total loss"). */
    uint8_t *v = malloc(o.len);
    assert_non_null(v);
    memcpy(v, o.data, o.len);
    size_t root = main_root(v);
    uint8_t *page = v + root * PSIZE;
    uint8_t *at = memmem(page + 16, PSIZE - 16, "log", 3);
    assert_non_null(at);
    at[1] ^= 0x08; /* "log" -> "lgg" */
    file_write(path, v, o.len);
    snprintf(want, sizeof want,
             "journal damaged: main table: node 1: 'lgg' is not one of the journal's tables (at "
             "page %zu)",
             root);
    expect_refused(wd, want);
    size_t after_len;
    uint8_t *after = file_read(path, &after_len);
    assert_int_equal(after_len, o.len);
    assert_memory_equal(after, v, o.len);
    free(after);
    free(v);

    /* A journal without its format record, and one without its log table: refused, and never
     * given a new one. */
    file_write(path, o.data, o.len);
    snprintf(path, sizeof path, "%s/journal/lock.mdb", wd);
    unlink(path);
    lmdb_delete(wd, "meta", "format");
    expect_refused(wd, "journal damaged: no format record in the meta table");
    expect_refused(wd, "journal damaged: no format record in the meta table");
    snprintf(path, sizeof path, "%s/journal/data.mdb", wd);
    file_write(path, o.data, o.len);
    lmdb_delete(wd, "log", NULL);
    after = file_read(path, &after_len);
    memcpy(&t0, after + 144, 8);
    memcpy(&t1, after + PSIZE + 144, 8);
    free(after);
    snprintf(want, sizeof want, "journal damaged: main table: no 'log' table (at page %d)",
             t0 < t1 ? 1 : 0);
    expect_refused(wd, want);
    free(o.data);
    free(o.served);
}

/* ---- --recover-to-last-good ------------------------------------------------------------------ */

/* Flips a byte of the value stored under key in one of the journal's tables, through LMDB (so
 * the pages stay sound and only the journal's checksum notices). */
static void flip_value(const char *wd, const char *table, const void *key, size_t klen)
{
    struct journal_raw r;
    journal_raw_open(&r, wd, table);
    MDB_val k = {klen, (void *)key}, v;
    assert_int_equal(mdb_get(r.txn, r.dbi, &k, &v), 0);
    uint8_t *copy = malloc(v.mv_size);
    assert_non_null(copy);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size - 1] ^= 0x10;
    MDB_val nv = {v.mv_size, copy};
    assert_int_equal(mdb_put(r.txn, r.dbi, &k, &nv, 0), 0);
    journal_raw_close(&r);
    free(copy);
}

/* Deletes a key of a table (key NULL: the table itself) through LMDB. */
static void lmdb_delete(const char *wd, const char *table, const char *key)
{
    struct journal_raw r;
    journal_raw_open(&r, wd, table);
    if (key) {
        MDB_val k = {strlen(key), (void *)key};
        assert_int_equal(mdb_del(r.txn, r.dbi, &k, NULL), 0);
    } else {
        assert_int_equal(mdb_drop(r.txn, r.dbi, 1), 0);
    }
    journal_raw_close(&r);
}

/* One transaction that fills the meta table with entries and deletes them again: the pages it
 * took and gave back are "loose", on the free list and never written, so the data file ends
 * before the last page the transaction counts. */
static void lmdb_loose_tail(const char *wd, uint64_t *file_size, uint64_t *counted)
{
    struct journal_raw r;
    journal_raw_open(&r, wd, "meta");
    /* A value on overflow pages past the end of the file, deleted in the same transaction. */
    static uint8_t value[64 * 1024];
    MDB_val k = {13, "zz-loose-tail"}, v = {sizeof value, value};
    assert_int_equal(mdb_put(r.txn, r.dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_del(r.txn, r.dbi, &k, NULL), 0);
    assert_int_equal(mdb_txn_commit(r.txn), 0);
    r.txn = NULL;
    MDB_envinfo info;
    MDB_stat st;
    assert_int_equal(mdb_env_info(r.env, &info), 0);
    assert_int_equal(mdb_env_stat(r.env, &st), 0);
    *counted = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    journal_raw_close(&r);
    char path[700];
    snprintf(path, sizeof path, "%s/journal/data.mdb", wd);
    struct stat fst;
    assert_int_equal(stat(path, &fst), 0);
    *file_size = (uint64_t)fst.st_size;
}

/* A sound journal may end before the last page its transaction counts (the pages past the end
 * are free): it is accepted by the dispatcher and by verify. */
static void test_unwritten_free_pages(void **unused)
{
    (void)unused;
    struct original o;
    char good[512], wd[600], path[700];
    build_journal(&o, good, sizeof good);
    snprintf(wd, sizeof wd, "%s/loose", tmp_dir());
    snprintf(path, sizeof path, "%s/journal", wd);
    assert_int_equal(mkdir(wd, 0755), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/journal/data.mdb", wd);
    file_write(path, o.data, o.len);
    uint64_t size, counted;
    lmdb_loose_tail(wd, &size, &counted);
    print_message("after a transaction with loose pages: %" PRIu64 " bytes, %" PRIu64 " counted\n",
                  size, counted);
    assert_true(size < counted);
    expect_starts(wd);
    free(o.data);
    free(o.served);
}

static void seq_key(uint64_t seq, uint8_t key[8])
{
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(seq >> (56 - 8 * i));
}

static void test_recover_to_last_good(void **unused)
{
    (void)unused;
    /* Seven registrations, a snapshot every four: the snapshot covers records 1 to 4 and the log
     * holds 5, 6 and 7 (d4, d5, d6). */
    static const char *const dargs[] = {"--snapshot-every", "4", NULL};
    struct cluster c = {.dispatcher_args = dargs};
    assert_int_equal(cluster_start_dispatcher(&c, 0, 1), 0);
    char *out = NULL, *err = NULL;
    for (int i = 0; i < 7; i++) {
        char id[16], pipeline[32];
        snprintf(id, sizeof id, "d%d", i);
        snprintf(pipeline, sizeof pipeline, "range(%d)", i + 1);
        assert_int_equal(
            cluster_cli(&c, &out, &err, "register", pipeline, "--dataset-id", id, NULL), 0);
        free(out);
        free(err);
    }
    char wd[512], want[2048];
    snprintf(wd, sizeof wd, "%s", c.work_dir);
    assert_int_equal(cluster_stop(&c), 0);
    assert_int_equal(verify_cmd(wd, &out, &err), 0);
    snprintf(want, sizeof want,
             "journal %s: ok: snapshot at 4, 3 records after it (next 8), 7 updates in all; 7 "
             "datasets, 0 jobs, 0 tasks, 0 workers, 0 clients\n",
             wd);
    assert_string_equal(out, want);
    free(out);
    free(err);

    /* Record 6 damaged: refused by default, and verify names what the flag would drop. */
    uint8_t key[8];
    seq_key(6, key);
    flip_value(wd, "log", key, 8);
    expect_refused(wd, "journal damaged: log record: checksum mismatch (at record seq 6)");
    assert_int_equal(verify_cmd(wd, &out, &err), 1);
    snprintf(want, sizeof want,
             "sluice: journal: %s: journal damaged: log record: checksum mismatch (at record seq "
             "6); only the tail of the log is damaged: sluice-dispatcher --recover-to-last-good "
             "would drop records 6 to 7\n",
             wd);
    assert_string_equal(err, want);
    free(out);
    free(err);
    char path[700];
    snprintf(path, sizeof path, "%s/journal/data.mdb", wd);
    size_t damaged_len;
    uint8_t *damaged = file_read(path, &damaged_len);

    /* With the flag: records 6 and 7 and the datasets they registered are dropped, said so,
     * and the damaged journal is kept beside. */
    struct start s;
    start_dispatcher(wd, "--recover-to-last-good", &s);
    if (!s.started)
        fail_msg("--recover-to-last-good did not start: %s", s.err);
    char *now = served(s.addr);
    assert_non_null(strstr(now, "datasets (5)\n"));
    assert_non_null(strstr(now, "d4 "));
    assert_null(strstr(now, "d5 "));
    free(now);
    assert_int_equal(proc_stop(&s.p, SIGTERM, WAIT_MS), 0);
    char *log = (char *)file_read(s.p.log, NULL);
    snprintf(want, sizeof want,
             "warn sluice-dispatcher: journal %s: --recover-to-last-good: dropped records 6 to 7 "
             "(2 in the log; the first damaged: journal damaged: log record: checksum mismatch "
             "(at record seq 6)) and 2 dataset definitions only they registered; the state is "
             "the snapshot at 4 and the 1 records after it; the damaged journal is kept as %s/"
             "journal.damaged-",
             wd, wd);
    if (!strstr(log, want))
        fail_msg("the log does not say what was dropped:\n%s", log);
    const char *kept = strstr(log, "journal.damaged-");
    char copy[700];
    snprintf(copy, sizeof copy, "%s/%.*s", wd, (int)strcspn(kept, "\n"), kept);
    size_t copy_len;
    uint8_t *copy_data = file_read(copy, &copy_len);
    assert_non_null(copy_data);
    assert_int_equal(copy_len, damaged_len);
    assert_memory_equal(copy_data, damaged, damaged_len);
    free(copy_data);
    free(damaged);
    free(log);

    /* The journal is sound again: it verifies, and starts without the flag. */
    assert_int_equal(verify_cmd(wd, &out, &err), 0);
    snprintf(want, sizeof want,
             "journal %s: ok: snapshot at 4, 1 records after it (next 6), 5 updates in all; 5 "
             "datasets, 0 jobs, 0 tasks, 0 workers, 0 clients\n",
             wd);
    assert_string_equal(out, want);
    free(out);
    free(err);
    expect_starts(wd);

    /* Damage that is not in the log's tail is refused even with the flag. */
    flip_value(wd, "meta", "snapshot", 8);
    start_dispatcher(wd, "--recover-to-last-good", &s);
    assert_false(s.started);
    assert_int_equal(s.exit_code, 1);
    snprintf(want, sizeof want,
             "sluice-dispatcher: journal: %s: journal damaged: meta 'snapshot': checksum "
             "mismatch\n",
             wd);
    if (!strstr(s.err, want))
        fail_msg("expected %s, got %s", want, s.err);
    free(s.err);
}

/* ---- backup and restore ---------------------------------------------------------------------- */

static int journal_cmd(char **out, char **err, const char *action, const char *a1, const char *v1,
                       const char *a2, const char *v2, const char *a3)
{
    char *const argv[] = {(char *)bin_path("sluice"),
                          "journal",
                          (char *)action,
                          (char *)a1,
                          (char *)v1,
                          (char *)a2,
                          (char *)v2,
                          (char *)a3,
                          NULL};
    return run_cmd(argv, WAIT_MS, out, err);
}

/* The datasets table of `sluice status`. */
static char *datasets_of(const char *addr)
{
    char *all = served(addr);
    char *jobs = strstr(all, "\njobs (");
    if (jobs)
        jobs[1] = '\0';
    return all;
}

static void test_backup_restore_under_load(void **unused)
{
    (void)unused;
    static const char *const dargs[] = {"--snapshot-every", "50", NULL};
    struct cluster c = {.dispatcher_args = dargs};
    assert_int_equal(cluster_start_dispatcher(&c, 0, 1), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    assert_true(cluster_add_worker(&c) >= 0);
    char *out = NULL, *err = NULL;
    for (int i = 0; i < 3; i++) {
        char id[16], pipeline[32];
        snprintf(id, sizeof id, "d%d", i);
        snprintf(pipeline, sizeof pipeline, "range(%d)", 10 * (i + 1));
        assert_int_equal(
            cluster_cli(&c, &out, &err, "register", pipeline, "--dataset-id", id, NULL), 0);
        free(out);
        free(err);
    }
    /* A read in distributed_epoch runs all along: splits leased and finished, tasks, clients. */
    struct proc reader;
    /* Paced by sleeps rather than work, so that it outlasts the backups under the sanitizers
     * too (at 40 us an element it ended before the fourth there). */
    assert_int_equal(cluster_cli_spawn(&c, &reader, "read", "range(20000) | map(wait_us, 1000)",
                                       "--mode", "distributed_epoch", "--job-name", "load",
                                       "--format", "count", NULL),
                     0);
    char backup[700], restored[700];
    int during = 0; /* backups taken while the read was still going */
    for (int i = 0; i < 6; i++) {
        siginfo_t info = {0};
        during += waitid(P_PID, (id_t)reader.pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                  info.si_pid == 0;
        snprintf(backup, sizeof backup, "%s/backup-%d.mdb", tmp_dir(), i);
        int rc = journal_cmd(&out, &err, "backup", "--work-dir", c.work_dir, "--to", backup, NULL);
        if (rc != 0)
            fail_msg("backup %d: %s", i, err);
        assert_non_null(strstr(out, "backed up to"));
        free(out);
        free(err);
        /* Each backup is a journal of its own: it restores and verifies. */
        snprintf(restored, sizeof restored, "%s/restored-%d", tmp_dir(), i);
        rc = journal_cmd(&out, &err, "restore", "--from", backup, "--work-dir", restored, NULL);
        if (rc != 0)
            fail_msg("restore %d: %s", i, err);
        free(out);
        free(err);
        if (i == 2) /* a dispatcher crash in the middle, as in the drill */
            assert_int_equal(cluster_restart_dispatcher(&c, SIGKILL), 0);
        usleep(100 * 1000);
    }
    assert_true(during >= 4);
    char *read_out = proc_read_all(&reader, 120000);
    assert_int_equal(proc_wait(&reader, WAIT_MS), 0);
    assert_string_equal(read_out, "20000\n");
    free(read_out);

    /* The last backup, taken once the read is done and another dataset registered. */
    assert_int_equal(
        cluster_cli(&c, &out, &err, "register", "list(7, 8)", "--dataset-id", "late", NULL), 0);
    free(out);
    free(err);
    char *expected = datasets_of(c.dispatcher.addr);
    snprintf(backup, sizeof backup, "%s/backup-final.mdb", tmp_dir());
    assert_int_equal(
        journal_cmd(&out, &err, "backup", "--work-dir", c.work_dir, "--to", backup, NULL), 0);
    free(out);
    free(err);

    /* No restore over a journal a dispatcher is writing, even when forced. */
    char want[2048];
    assert_int_equal(
        journal_cmd(&out, &err, "restore", "--from", backup, "--work-dir", c.work_dir, "--force"),
        1);
    snprintf(want, sizeof want,
             "sluice: journal: %s: restore: another dispatcher is writing this journal\n",
             c.work_dir);
    assert_string_equal(err, want);
    free(out);
    free(err);
    assert_int_equal(cluster_stop(&c), 0);

    /* Restored into a new work dir, a dispatcher serves the same datasets. */
    snprintf(restored, sizeof restored, "%s/restored-final", tmp_dir());
    assert_int_equal(
        journal_cmd(&out, &err, "restore", "--from", backup, "--work-dir", restored, NULL), 0);
    free(out);
    free(err);
    struct start s;
    start_dispatcher(restored, NULL, &s);
    if (!s.started)
        fail_msg("the restored journal did not start: %s", s.err);
    char *now = datasets_of(s.addr);
    assert_string_equal(now, expected);
    assert_non_null(strstr(now, "datasets (5)\n")); /* and the read's */
    free(now);

    /* A journal is there now: restore refuses to replace it unless forced, and then keeps it. */
    assert_int_equal(
        journal_cmd(&out, &err, "restore", "--from", backup, "--work-dir", restored, NULL), 1);
    snprintf(want, sizeof want,
             "sluice: journal: %s: restore: another dispatcher is writing this journal\n",
             restored);
    assert_string_equal(err, want);
    free(out);
    free(err);
    assert_int_equal(proc_stop(&s.p, SIGTERM, WAIT_MS), 0);
    assert_int_equal(
        journal_cmd(&out, &err, "restore", "--from", backup, "--work-dir", restored, NULL), 1);
    snprintf(want, sizeof want,
             "sluice: journal: %s: restore: there is a journal here already (%s/journal); "
             "--force replaces it and keeps it beside the new one\n",
             restored, restored);
    assert_string_equal(err, want);
    free(out);
    free(err);
    assert_int_equal(
        journal_cmd(&out, &err, "restore", "--from", backup, "--work-dir", restored, "--force"), 0);
    assert_non_null(strstr(out, "the journal that was there is kept as "));
    free(out);
    free(err);
    start_dispatcher(restored, NULL, &s);
    assert_true(s.started);
    now = datasets_of(s.addr);
    assert_string_equal(now, expected);
    free(now);
    assert_int_equal(proc_stop(&s.p, SIGTERM, WAIT_MS), 0);

    /* A damaged backup is never put in place. */
    size_t len;
    uint8_t *data = file_read(backup, &len);
    assert_non_null(data);
    file_write(backup, data, len - PSIZE);
    free(data);
    snprintf(restored, sizeof restored, "%s/restored-damaged", tmp_dir());
    assert_int_equal(
        journal_cmd(&out, &err, "restore", "--from", backup, "--work-dir", restored, NULL), 1);
    assert_non_null(strstr(err, "journal damaged: the data file is truncated"));
    assert_false(exists(restored, "journal"));
    free(out);
    free(err);
    free(expected);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_no_whole_journal),
        cmocka_unit_test(test_unwritten_free_pages),
        cmocka_unit_test(test_recover_to_last_good),
        cmocka_unit_test(test_backup_restore_under_load),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
