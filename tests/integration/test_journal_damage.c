/* A damaged journal, with the real binaries: a small real journal (a fault-tolerant dispatcher,
 * a worker, datasets registered and jobs read through the CLI) is damaged on disk in every way a
 * bad disk could: one bit flipped at every 64th byte, each field of both meta pages flipped (its
 * low and its high byte), and the file cut at every page boundary. For every variant:
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

#include "helper_cluster.h"
#include "helper_proc.h"

#include <errno.h>
#include <fcntl.h>
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
#define PSIZE 4096

/* ---- files ----------------------------------------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

__attribute__((unused)) static void rm_rf(const char *path)
{
    char *const argv[] = {"/bin/rm", "-rf", (char *)path, NULL};
    assert_int_equal(run_cmd(argv, WAIT_MS, NULL, NULL), 0);
}

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
    size_t len;
    s->err = (char *)slurp(s->p.log, &len);
    assert_non_null(s->err);
    s->err = realloc(s->err, len + 1);
    s->err[len] = '\0';
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
    o->data = slurp(path, &o->len);
    assert_non_null(o->data);
    assert_true(o->len >= 6 * PSIZE && o->len % PSIZE == 0);
}

/* ---- the sweep ------------------------------------------------------------------------------- */

struct tally {
    int variants, flips, fields, cuts;
    int started; /* with the original state */
    int refused;
    int truncated, meta, pages, values, records, other;
};

/* Writes one variant into wd, runs verify and a start on it, and checks they agree. */
static void try_variant(const struct original *o, const char *wd, const uint8_t *data, size_t len,
                        const char *label, struct tally *t)
{
    char path[700];
    snprintf(path, sizeof path, "%s/journal/lock.mdb", wd);
    unlink(path);
    snprintf(path, sizeof path, "%s/journal/data.mdb", wd);
    spit(path, data, len);
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
        uint8_t *after = slurp(path, &after_len);
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

    struct tally t = {0};
    char label[160];
    uint8_t *v = malloc(o.len);
    assert_non_null(v);

    /* The original itself starts. */
    try_variant(&o, wd, o.data, o.len, "the original", &t);
    assert_int_equal(t.started, 1);

    /* One bit at every 64th byte, the bit rotating with the offset. */
    for (size_t off = 0; off < o.len; off += 64) {
        memcpy(v, o.data, o.len);
        unsigned bit = (unsigned)(off / 64) % 8;
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
    print_message("sweep over a journal of %zu bytes: %d variants (%d bit flips, %d meta page "
                  "fields, %d cuts): %d started with the original state, %d refused by both "
                  "verify and the dispatcher (%d truncated, %d meta pages, %d other pages, %d "
                  "values, %d records, %d other), 0 crashes\n",
                  o.len, t.variants - 1, t.flips, t.fields, t.cuts, t.started - 1, t.refused,
                  t.truncated, t.meta, t.pages, t.values, t.records, t.other);
    assert_int_equal(t.other, 0);
    free(v);
    free(o.data);
    free(o.served);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
