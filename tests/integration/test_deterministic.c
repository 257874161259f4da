/* Deterministic reads of distributed_epoch, end to end: real dispatcher, worker and `sluice`
 * processes on 127.0.0.1.
 *
 * The contract under test (sluice.h, sluice_read_options.deterministic): the sequence a
 * deterministic reader sees is the canonical one, splits by increasing sequence number and each
 * split's elements by position, whatever the number of workers, and also when a worker is
 * killed, a worker drains, a worker joins, or a fault-tolerant dispatcher is killed and
 * restarted in the middle of the read. Every comparison is of the whole output, byte for byte.
 * Also: a reorder bound far below the data (the reader drops what it has no room for and asks
 * for it again), the refusals (other modes, a named job joined with another value), and a
 * dataset registered deterministic reading so by default; sharded reads (--shard I/N), one
 * line of each in turn, are the canonical order too. Every wait is bounded. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 15000
#define READ_MS 60000

/* Elements, and elements per split: 200 splits of 100. */
#define N 20000
#define SPLIT "100"
#define SQUARES "range(20000) | map(square)"
#define SHUFFLED "range(20000) | shuffle(64, 5)"
/* A read slow enough for faults to land in its middle: 4000 elements that wait 4 ms each (no
 * CPU: the read takes its time on a machine of any size), 40 splits of 100, a second or more on
 * each of two workers' four threads. Its output (squares below 16e6) fits in a pipe until the
 * end. */
#define SLOW_N 4000
#define SLOW "range(4000) | map(wait_us, 4000) | map(square)"

static const char *const dispatcher_flags[] = {
    "--worker-timeout-ms", "1000", "--client-timeout-ms", "3000", "--log-level", "info", NULL};
static const char *const worker_flags[] = {"--drain-timeout-ms", "5000", "--heartbeat-ms", "200",
                                           NULL};

static int setup_with(void **state, int fault_tolerant)
{
    return (*state = cluster_new(dispatcher_flags, worker_flags, fault_tolerant, 0)) ? 0 : -1;
}

static int setup(void **state)
{
    return setup_with(state, 0);
}

static int setup_ft(void **state)
{
    return setup_with(state, 1);
}

static struct proc reader;

static int teardown(void **state)
{
    proc_stop(&reader, SIGKILL, WAIT_MS);
    memset(&reader, 0, sizeof reader);
    cluster_free(*state);
    return 0;
}

/* "0\n1\n4\n...": the squares of range(n), in order: the canonical order of SQUARES. */
static char *squares(long n)
{
    size_t cap = (size_t)n * 21 + 1, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    for (long i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%ld\n", i * i);
    return s;
}

/* Runs a deterministic read of pipeline (registered with split size SPLIT) and returns its
 * output; extra arguments (NULL-terminated, at most 4) go to `sluice read`. */
static char *read_det(struct cluster *c, const char *pipeline, ...)
{
    const char *extra[5] = {0};
    va_list ap;
    va_start(ap, pipeline);
    for (int i = 0; i < 4; i++) {
        extra[i] = va_arg(ap, const char *);
        if (!extra[i])
            break;
    }
    va_end(ap);
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", pipeline, "--deterministic", "--split-size", SPLIT,
                         extra[0], extra[1], extra[2], extra[3], NULL);
    if (rc != 0)
        fail_msg("sluice read %s exited with %d: %s", pipeline, rc, err ? err : "");
    free(err);
    return out;
}

/* Asserts got is want, naming the first line that differs. */
static void assert_same(const char *what, const char *got, const char *want)
{
    if (strcmp(got, want) == 0) {
        printf("    %s: %zu elements in the canonical order\n", what, count_lines(got));
        return;
    }
    size_t line = 1;
    const char *g = got, *w = want;
    while (*g && *g == *w) {
        line += *g == '\n';
        g++;
        w++;
    }
    fail_msg("%s: the sequence differs at line %zu (%zu lines read, %zu expected)", what, line,
             count_lines(got), count_lines(want));
}

/* The shuffled read's canonical shape: the k-th block of 100 lines is a permutation of split
 * k's values, [100k, 100k + 100). */
static void assert_split_blocks(const char *out)
{
    assert_int_equal(count_lines(out), N);
    const char *p = out;
    static unsigned char seen[N];
    memset(seen, 0, sizeof seen);
    for (long i = 0; i < N; i++) {
        long v = strtol(p, NULL, 10);
        if (v / 100 != i / 100 || seen[v])
            fail_msg("line %ld holds %ld: not a value of split %ld (or a repeat)", i + 1, v,
                     i / 100);
        seen[v] = 1;
        p = strchr(p, '\n') + 1;
    }
}

/* ---- the same sequence with 1, 2 and 5 workers ---------------------------------------------- */

static void test_worker_counts(void **state)
{
    struct cluster *c = *state;
    char *want = squares(N);
    char *shuffled = NULL;
    static const int counts[] = {1, 2, 5};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        cluster_add_workers(c, counts[k] - c->nworkers);
        char what[64];
        snprintf(what, sizeof what, "%s, %d workers", SQUARES, counts[k]);
        char *out = read_det(c, SQUARES, NULL);
        assert_same(what, out, want);
        free(out);
        out = read_det(c, SHUFFLED, NULL);
        snprintf(what, sizeof what, "%s, %d workers", SHUFFLED, counts[k]);
        assert_split_blocks(out);
        if (shuffled) {
            assert_same(what, out, shuffled);
            free(out);
        } else {
            printf("    %s: %d elements, each split's in one block\n", what, N);
            shuffled = out;
        }
    }
    /* Operations that run in the reader, and a local tail, run over the canonical order. */
    char *out = read_det(c, "range(20000) | map(square) | filter(even) | batch(3)", "--local",
                         "take(5)", NULL);
    assert_same("reader-side batch after a filter, local take", out,
                "[0, 4, 16]\n[36, 64, 100]\n[144, 196, 256]\n[324, 400, 484]\n[576, 676, 784]\n");
    free(out);
    free(shuffled);
    free(want);
}

/* ---- a reorder bound far below the data ------------------------------------------------------ */

static void test_small_reorder_bound(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 3);
    char *want = squares(N);
    /* 64 KiB hold a fraction of the 200 splits that three workers produce at once: the reader
     * drops the rest and has it produced again, yet reads the canonical order. */
    long long t0 = now_ms();
    char *out = read_det(c, SQUARES, "--reorder-bytes", "65536", NULL);
    assert_same("reorder bound 64 KiB, 3 workers", out, want);
    printf("    in %lld ms\n", now_ms() - t0);
    free(out);
    free(want);
}

/* ---- faults in the middle of the read -------------------------------------------------------- */

static void spawn_slow(struct cluster *c)
{
    assert_int_equal(
        cluster_cli_spawn(c, &reader, "read", SLOW, "--deterministic", "--split-size", SPLIT, NULL),
        0);
}

static void assert_still_reading(void)
{
    int rc = proc_wait(&reader, 0);
    if (rc != -2)
        fprintf(stderr, "the read ended (status %d) before the fault; make it longer\n", rc);
    assert_int_equal(rc, -2);
}

static char *finish_read(void)
{
    char *out = proc_read_all(&reader, READ_MS);
    int rc = proc_wait(&reader, WAIT_MS);
    if (rc != 0)
        fprintf(stderr, "sluice read exited with %d\n", rc);
    assert_int_equal(rc, 0);
    return out;
}

/* Waits until the read has run a while (its splits take 0.4 s each) */
static void settle(int ms)
{
    usleep((useconds_t)ms * 1000);
    assert_still_reading();
}

static void test_kill_drain_join(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 3);
    char *want = squares(SLOW_N);
    spawn_slow(c);
    settle(700);
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
    settle(300);
    /* SIGTERM drains: the worker hands back what it has not started and serves what it holds. */
    assert_int_equal(proc_stop(&c->workers[1], SIGTERM, WAIT_MS), 0);
    assert_still_reading();
    cluster_add_workers(c, 2);
    char *out = finish_read();
    assert_same("a worker killed, one drained, two joined", out, want);
    free(out);
    free(want);
}

static void test_dispatcher_restart(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    char *want = squares(SLOW_N);
    spawn_slow(c);
    settle(700);
    assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);
    settle(500);
    assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);
    char *out = finish_read();
    assert_same("fault-tolerant dispatcher killed and restarted twice", out, want);
    free(out);
    free(want);
}

/* ---- the flag: refusals, and a dataset registered deterministic ------------------------------ */

static void expect_cli_error(struct cluster *c, const char *needle, ...)
{
    const char *args[8] = {0};
    va_list ap;
    va_start(ap, needle);
    for (int i = 0; i < 7; i++) {
        args[i] = va_arg(ap, const char *);
        if (!args[i])
            break;
    }
    va_end(ap);
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, args[0], args[1], args[2], args[3], args[4], args[5],
                         args[6], NULL);
    if (rc == 0 || !err || !strstr(err, needle))
        fail_msg("expected a failure with '%s', got %d: %s", needle, rc, err ? err : "");
    free(out);
    free(err);
}

static void test_flag(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    expect_cli_error(c, "deterministic reads need mode distributed_epoch, not parallel_epochs",
                     "read", "range(10)", "--deterministic", "--mode", "parallel_epochs", NULL);
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(10)", "--mode", "distributed_epoch",
                                 "--job-name", "j", NULL),
                     0);
    free(out);
    free(err);
    expect_cli_error(c, "job 'j' exists with deterministic false, not true", "read", "range(10)",
                     "--deterministic", "--job-name", "j", NULL);

    /* Registered deterministic: a distributed_epoch read of it is deterministic by default. */
    assert_int_equal(cluster_cli(c, &out, &err, "register", SQUARES, "--deterministic",
                                 "--split-size", SPLIT, "--dataset-id", "det", NULL),
                     0);
    free(out);
    free(err);
    assert_int_equal(cluster_cli(c, &out, &err, "read", "--dataset-id", "det", "--mode",
                                 "distributed_epoch", "--job-name", "d", NULL),
                     0);
    char *want = squares(N);
    assert_same("dataset registered deterministic", out, want);
    free(out);
    free(err);
    free(want);
    assert_int_equal(cluster_cli(c, &out, &err, "status", "--json", NULL), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *jobs = json_object_get(doc, "jobs"), *j;
    size_t i;
    int det = -1;
    json_array_foreach(jobs, i, j)
    {
        const char *name = json_string_value(json_object_get(j, "name"));
        if (name && strcmp(name, "d") == 0)
            det = json_is_true(json_object_get(j, "deterministic"));
    }
    assert_int_equal(det, 1);
    json_decref(doc);
    free(out);
    free(err);
    /* The flag is part of the dataset's identity: the same pipeline without it is another. */
    expect_cli_error(c,
                     "already exists with the same pipeline but another definition: its "
                     "deterministic setting differs",
                     "register", SQUARES, "--split-size", SPLIT, "--dataset-id", "det", NULL);
}

/* ---- sharded reads --------------------------------------------------------------------------- */

/* Three reads with --shard 0/3, 1/3 and 2/3 (each a job of its own): taken one line from each in
 * turn they are the canonical order, byte for byte. Then what a sharded read refuses. */
static void test_shards(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    char *part[3];
    const char *lines[3];
    for (int k = 0; k < 3; k++) {
        char arg[8];
        snprintf(arg, sizeof arg, "%d/3", k);
        part[k] = read_det(c, SQUARES, "--shard", arg, NULL);
        lines[k] = part[k];
    }
    size_t cap = 0;
    for (int k = 0; k < 3; k++)
        cap += strlen(part[k]);
    char *joined = malloc(cap + 1), *at = joined;
    assert_non_null(joined);
    for (long i = 0; i < N; i++) {
        const char **p = &lines[i % 3];
        const char *nl = strchr(*p, '\n');
        if (!nl)
            fail_msg("shard %ld/3 ended before place %ld", i % 3, i);
        memcpy(at, *p, (size_t)(nl - *p + 1));
        at += nl - *p + 1;
        *p = nl + 1;
    }
    *at = '\0';
    for (int k = 0; k < 3; k++)
        assert_string_equal(lines[k], "");
    char *want = squares(N);
    assert_same("3 shards, one line of each in turn", joined, want);
    free(want);
    free(joined);
    for (int k = 0; k < 3; k++)
        free(part[k]);

    expect_cli_error(c, "a sharded read reads a job of its own, not job 'j'", "read", "range(10)",
                     "--deterministic", "--shard", "0/2", "--job-name", "j", NULL);
    expect_cli_error(c, "--shard goes with --deterministic", "read", "range(10)", "--shard", "0/2",
                     NULL);
    expect_cli_error(c, "--checkpoint cannot keep a sharded read's position", "read", "range(10)",
                     "--deterministic", "--shard", "0/2", "--checkpoint", "ck", NULL);
    expect_cli_error(c, "--shard takes I/N with 0 <= I < N, not '2/2'", "read", "range(10)",
                     "--deterministic", "--shard", "2/2", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_worker_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_reorder_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_drain_join, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dispatcher_restart, setup_ft, teardown),
        cmocka_unit_test_setup_teardown(test_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shards, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
