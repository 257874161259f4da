/* Checkpoint and resume of distributed_epoch reads, end to end: `sluice read --checkpoint FILE
 * --output OUT` killed with SIGKILL at random points and started again, with workers killed and
 * drained and a fault-tolerant dispatcher killed in between, must leave OUT holding the epoch
 * exactly once. Also: a resume after the job was collected, the errors for a checkpoint that is
 * damaged, foreign or of another dataset, and the modes a checkpoint does not cover.
 *
 * Every wait is bounded; each read prints its tally. SLUICE_TEST_FILTER selects tests by
 * cmocka's wildcard syntax. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/tmp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 20000
#define READ_MS 120000

/* A killed reader's client is released after --client-timeout-ms; long enough that a live
 * reader on a loaded machine is never taken for a dead one. */
static const char *const short_timeouts[] = {"--worker-timeout-ms",
                                             "1000",
                                             "--client-timeout-ms",
                                             "6000",
                                             "--job-gc-timeout-ms",
                                             "2000",
                                             "--log-level",
                                             "warn",
                                             NULL};
static const char *const worker_flags[] = {"--drain-timeout-ms", "3000", NULL};

static int setup(void **state)
{
    return (*state = cluster_new(short_timeouts, worker_flags, 1, 0)) ? 0 : -1;
}

static void path_in_tmp(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", tmp_dir(), name);
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static void assert_file_exactly_once(const char *what, const char *path, long n)
{
    char *text = (char *)file_read(path, NULL);
    struct tally t = tally_range(text, n);
    free(text);
    print_tally(what, t);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    assert_int_equal(t.lines, n);
}

/* Starts `sluice read` with the checkpoint and output files (and the pipeline on the first
 * run). */
static void spawn_resumable(struct cluster *c, struct proc *r, const char *pipeline, const char *ck,
                            const char *out, const char *every)
{
    if (pipeline)
        assert_int_equal(cluster_cli_spawn(c, r, "read", pipeline, "--checkpoint", ck,
                                           "--checkpoint-every", every, "--output", out, NULL),
                         0);
    else
        assert_int_equal(cluster_cli_spawn(c, r, "read", "--checkpoint", ck, "--checkpoint-every",
                                           every, "--output", out, NULL),
                         0);
}

/* Waits until out holds at least bytes (or the reader exited, which must be with status 0):
 * returns whether it is still running. */
static int wait_output(struct proc *r, const char *out, long long bytes)
{
    long long deadline = now_ms() + READ_MS;
    while (now_ms() < deadline) {
        int rc = proc_wait(r, 0);
        if (rc != -2) {
            if (rc != 0)
                print_file(r->log, 100);
            assert_int_equal(rc, 0);
            return 0;
        }
        if (file_size(out) >= bytes)
            return 1;
        usleep(2000);
    }
    fail_msg("no progress: %s holds %lld bytes, waiting for %lld", out, file_size(out), bytes);
    return 0;
}

/* The drill: a read of range(1000000) killed with SIGKILL at 20 random points and resumed each
 * time from its checkpoint, with a worker killed (kill 5), a fault-tolerant dispatcher killed and
 * restarted (kill 10), a worker drained (kill 15) and workers joining: the output file holds every
 * element exactly once. */
static void test_drill_twenty_kills(void **state)
{
    struct cluster *c = *state;
    for (int i = 0; i < 3; i++)
        assert_true(cluster_add_worker(c) >= 0);
    const long n = 1000000;
    /* range(1000000) prints 6888890 bytes of decimal lines. */
    const long long total_bytes = 6888890;
    char ck[512], out[512];
    path_in_tmp(ck, sizeof ck, "drill.ck");
    path_in_tmp(out, sizeof out, "drill.out");
    unsigned seed = (unsigned)time(NULL);
    printf("    seed %u\n", seed);
    srand(seed);
    int kills = 0, runs = 0;
    long long t0 = now_ms();
    for (int k = 0; k < 20; k++) {
        struct proc r = {0};
        spawn_resumable(c, &r, k == 0 ? "range(1000000) | map(wait_us, 3)" : NULL, ck, out, "5000");
        runs++;
        /* A random point in the k-th twenty-second of the output (the output may run ahead of
         * the checkpoint, and a resume cuts it back). */
        long long at = total_bytes * k / 21 + rand() % (total_bytes / 21);
        if (wait_output(&r, out, at)) {
            proc_stop(&r, SIGKILL, WAIT_MS);
            kills++;
        }
        if (k == 5) {
            proc_stop(&c->workers[0], SIGKILL, WAIT_MS);
            assert_true(cluster_add_worker(c) >= 0);
        }
        if (k == 10)
            assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);
        if (k == 15) {
            proc_stop(&c->workers[1], SIGTERM, WAIT_MS);
            assert_true(cluster_add_worker(c) >= 0);
        }
    }
    struct proc r = {0};
    spawn_resumable(c, &r, NULL, ck, out, "5000");
    runs++;
    int rc = proc_wait(&r, READ_MS);
    if (rc != 0)
        print_file(r.log, 100);
    assert_int_equal(rc, 0);
    printf("    %d runs, %d killed mid-read, %lld ms\n", runs, kills, now_ms() - t0);
    assert_true(kills >= 15);
    assert_file_exactly_once("drill", out, n);
}

/* A deterministic read of a seeded global shuffle, killed three times (a worker killed too) and
 * resumed from its checkpoint: the output is exactly the local run's sequence, element for
 * element. */
static void test_deterministic_resume_same_sequence(void **state)
{
    struct cluster *c = *state;
    for (int i = 0; i < 3; i++)
        assert_true(cluster_add_worker(c) >= 0);
    const char *pipeline = "range(300000) | global_shuffle(7)";
    char ck[512], out[512], slow[128];
    path_in_tmp(ck, sizeof ck, "det.ck");
    path_in_tmp(out, sizeof out, "det.out");
    snprintf(slow, sizeof slow, "%s | map(wait_us, 3)", pipeline);
    char *want = NULL, *e = NULL;
    char *argv[] = {(char *)bin_path("sluice"), "run", (char *)pipeline, NULL};
    assert_int_equal(run_cmd(argv, WAIT_MS, &want, &e), 0);
    free(e);
    const long long total = (long long)strlen(want);
    int kills = 0;
    for (int k = 0; k < 4; k++) {
        struct proc r = {0};
        if (k == 0)
            assert_int_equal(cluster_cli_spawn(c, &r, "read", slow, "--deterministic",
                                               "--checkpoint", ck, "--checkpoint-every", "3000",
                                               "--output", out, NULL),
                             0);
        else
            assert_int_equal(cluster_cli_spawn(c, &r, "read", "--deterministic", "--checkpoint", ck,
                                               "--checkpoint-every", "3000", "--output", out, NULL),
                             0);
        if (k < 3 && wait_output(&r, out, total * (k + 1) / 5)) {
            proc_stop(&r, SIGKILL, WAIT_MS);
            kills++;
            if (k == 1) {
                proc_stop(&c->workers[0], SIGKILL, WAIT_MS);
                assert_true(cluster_add_worker(c) >= 0);
            }
            continue;
        }
        if (k < 3)
            break; /* it ended on its own: wait_output saw it exit 0 */
        int rc = proc_wait(&r, READ_MS);
        if (rc != 0)
            print_file(r.log, 100);
        assert_int_equal(rc, 0);
    }
    char *got = (char *)file_read(out, NULL);
    if (strcmp(got, want) != 0)
        fail_msg("the resumed deterministic read differs from the local run (%zu and %zu bytes)",
                 strlen(got), strlen(want));
    printf("    deterministic, killed %d times and resumed: %lld bytes identical to the local "
           "run\n",
           kills, total);
    assert_int_equal(kills, 3);
    free(got);
    free(want);
}

/* A read stopped cleanly (--limit) whose job is then collected resumes in a new job. */
static void test_resume_after_collection(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    assert_true(cluster_add_worker(c) >= 0);
    char ck[512], out[512];
    path_in_tmp(ck, sizeof ck, "gc.ck");
    path_in_tmp(out, sizeof out, "gc.out");
    char *o = NULL, *e = NULL;
    int rc = cluster_cli(c, &o, &e, "read", "range(50000)", "--checkpoint", ck, "--output", out,
                         "--limit", "12345", NULL);
    assert_int_equal(rc, 0);
    free(o);
    free(e);
    /* The job's only client is gone: it is collected after --job-gc-timeout-ms. */
    long long deadline = now_ms() + WAIT_MS;
    for (;;) {
        o = e = NULL;
        assert_int_equal(cluster_cli(c, &o, &e, "status", "--json", NULL), 0);
        int gone = strstr(o, "\"garbage_collected\"") != NULL || strstr(o, "\"jobs\": []") ||
                   strstr(o, "\"jobs\":[]");
        free(o);
        free(e);
        if (gone)
            break;
        assert_true(now_ms() < deadline);
        usleep(200 * 1000);
    }
    o = e = NULL;
    rc = cluster_cli(c, &o, &e, "read", "--checkpoint", ck, "--output", out, NULL);
    if (rc != 0)
        fprintf(stderr, "%s\n", e);
    assert_int_equal(rc, 0);
    free(o);
    free(e);
    assert_file_exactly_once("after collection", out, 50000);
    /* At its end the checkpoint says so: reading on gives nothing more. */
    o = e = NULL;
    rc = cluster_cli(c, &o, &e, "read", "--checkpoint", ck, "--format", "count", NULL);
    assert_int_equal(rc, 0);
    assert_string_equal(o, "0\n");
    free(o);
    free(e);
}

static void expect_cli_error(struct cluster *c, int status, const char *want, const char *a1,
                             const char *a2, const char *a3, const char *a4, const char *a5,
                             const char *a6)
{
    char *o = NULL, *e = NULL;
    int rc = cluster_cli(c, &o, &e, "read", a1, a2, a3, a4, a5, a6, NULL);
    if (rc != status || !strstr(e, want))
        fprintf(stderr, "status %d, stderr: %s\nwanted %d and '%s'\n", rc, e, status, want);
    assert_int_equal(rc, status);
    assert_non_null(strstr(e, want));
    free(o);
    free(e);
}

/* A checkpoint that is damaged, foreign, or of another dataset is an error, never a fresh
 * start; so are the modes a checkpoint cannot describe. */
static void test_bad_checkpoints(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    char ck[512], bad[512];
    path_in_tmp(ck, sizeof ck, "good.ck");
    path_in_tmp(bad, sizeof bad, "bad.ck");
    char *o = NULL, *e = NULL;
    assert_int_equal(cluster_cli(c, &o, &e, "register", "range(1000)", "--dataset-id", "a", NULL),
                     0);
    free(o);
    free(e);
    o = e = NULL;
    assert_int_equal(cluster_cli(c, &o, &e, "register", "range(2000)", "--dataset-id", "b", NULL),
                     0);
    free(o);
    free(e);
    o = e = NULL;
    assert_int_equal(cluster_cli(c, &o, &e, "read", "--dataset-id", "a", "--checkpoint", ck,
                                 "--limit", "10", "--format", "count", NULL),
                     0);
    assert_string_equal(o, "10\n");
    free(o);
    free(e);

    /* Another dataset. */
    expect_cli_error(c, 1, "the checkpoint is of dataset 'a', not 'b'", "--dataset-id", "b",
                     "--checkpoint", ck, "--format", "count");
    /* Another pipeline. */
    expect_cli_error(c, 1, "its pipeline is not the one the checkpoint was taken with",
                     "range(1000) | "
                     "map(square)",
                     "--checkpoint", ck, "--format", "count", NULL);
    /* Damaged: one byte flipped. */
    char *text = (char *)file_read(ck, NULL);
    size_t len = (size_t)file_size(ck);
    text[len / 2] ^= 0x20;
    file_write(bad, text, len);
    expect_cli_error(c, 1, "checksum mismatch", "--checkpoint", bad, "--format", "count", NULL,
                     NULL);
    /* Cut short. */
    file_write(bad, text, len - 3);
    expect_cli_error(c, 1, "bad.ck", "--checkpoint", bad, "--format", "count", NULL, NULL);
    free(text);
    /* Foreign. */
    file_write(bad, "hello, world\n", 13);
    expect_cli_error(c, 1, "not a checkpoint of 'sluice read'", "--checkpoint", bad, "--format",
                     "count", NULL, NULL);
    /* Modes without a position. */
    expect_cli_error(c, 2, "--checkpoint needs --mode distributed_epoch, not parallel_epochs",
                     "range(10)", "--mode", "parallel_epochs", "--checkpoint", ck, NULL);
    char fresh[512];
    path_in_tmp(fresh, sizeof fresh, "fresh.ck");
    expect_cli_error(c, 1, "cannot be checkpointed", "range(10) | filter(even) | batch(2)",
                     "--checkpoint", fresh, NULL, NULL, NULL);
    expect_cli_error(c, 2, "does not exist yet", "--checkpoint", fresh, NULL, NULL, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_drill_twenty_kills, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_deterministic_resume_same_sequence, setup,
                                        cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_resume_after_collection, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_bad_checkpoints, setup, cluster_teardown_lax),
    };
    cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
