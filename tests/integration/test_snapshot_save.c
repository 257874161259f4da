/* Saving datasets into snapshot directories (docs/snapshots.md) with the real dispatcher,
 * workers and CLI, and reading them back with the snapshot("DIR") source:
 *   - a save reads back as exactly the dataset: the same sequence through `sluice run`, the
 *     same multiset through distributed_epoch and parallel_epochs reads;
 *   - a save of a slow pipeline survives a dispatcher kill -9 (restarted on its work dir) and a
 *     worker kill -9: it finishes, chunks committed before the kills are not written again
 *     (same inode and modification time), and it reads back as exactly the dataset;
 *   - a distributed_epoch read started while the save runs gets every element exactly once;
 *   - a damaged chunk fails the read with an error naming the chunk; one damaged before the save
 *     is finalized fails the save, and saving again starts it anew;
 *   - the refusals, with their exact messages; a save into a directory outside a worker's data
 *     roots fails with the reason. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include <jansson.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 30000

static void path_in_tmp(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", tmp_dir(), name);
}

static int setup_cluster(struct cluster *c, int workers, int fault_tolerant)
{
    memset(c, 0, sizeof *c);
    if (cluster_start_dispatcher(c, 0, fault_tolerant) != 0)
        return -1;
    for (int i = 0; i < workers; i++)
        if (cluster_add_worker(c) < 0)
            return -1;
    return 0;
}

/* `sluice run PIPELINE` (no service): its stdout. */
static char *run_local(const char *pipeline, int want_rc, char **err)
{
    char *argv[] = {(char *)bin_path("sluice"), "run", (char *)pipeline, NULL};
    char *out = NULL, *e = NULL;
    int rc = run_cmd(argv, 60000, &out, &e);
    if (rc != want_rc)
        fprintf(stderr, "sluice run %s: exit %d\nstderr: %s\n", pipeline, rc, e ? e : "");
    assert_int_equal(rc, want_rc);
    if (err)
        *err = e;
    else
        free(e);
    return out;
}

static void register_ds(struct cluster *c, const char *id, const char *pipeline)
{
    char *out = cluster_run(c, 0, NULL, "register", pipeline, "--dataset-id", id, NULL, NULL, NULL,
                            NULL, NULL);
    char want[256];
    snprintf(want, sizeof want, "%s\n", id);
    assert_string_equal(out, want);
    free(out);
}

static const char *snapshot_pipeline(char *buf, size_t len, const char *dir)
{
    snprintf(buf, len, "snapshot(\"%s\")", dir);
    return buf;
}

/* The save's status through `sluice snapshot status --json`. */
struct save_status {
    char state[16];
    long long chunks, committed;
    char error[512];
};

static struct save_status save_status(struct cluster *c, const char *dir)
{
    struct save_status s = {{0}};
    char *out = cluster_run(c, 0, NULL, "snapshot", "status", "--path", dir, "--json", NULL, NULL,
                            NULL, NULL);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    assert_non_null(o);
    snprintf(s.state, sizeof s.state, "%s", json_string_value(json_object_get(o, "state")));
    s.chunks = json_integer_value(json_object_get(o, "chunks"));
    s.committed = json_integer_value(json_object_get(o, "chunks_committed"));
    snprintf(s.error, sizeof s.error, "%s", json_string_value(json_object_get(o, "error")));
    json_decref(o);
    free(out);
    return s;
}

/* Waits (bounded) until the save into dir has at least n chunks committed and is still running;
 * returns the status seen. */
static struct save_status wait_committed(struct cluster *c, const char *dir, long long n)
{
    long long deadline = now_ms() + WAIT_MS;
    for (;;) {
        struct save_status s = save_status(c, dir);
        if (s.committed >= n) {
            if (strcmp(s.state, "running") != 0)
                fail_msg("the save of %s is %s already (%lld chunks): the test needs it running",
                         dir, s.state, s.committed);
            return s;
        }
        if (now_ms() > deadline)
            fail_msg("the save of %s has %lld of %lld chunks committed after %d ms", dir,
                     s.committed, s.chunks, WAIT_MS);
        sleep_ms(100);
    }
}

/* The chunk files present now: their index, inode and modification time. */
struct chunk_file {
    long long index;
    ino_t ino;
    struct timespec mtime;
};

static size_t list_chunks(const char *dir, struct chunk_file *v, size_t cap, long long total)
{
    size_t n = 0;
    for (long long i = 0; i < total && n < cap; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/chunks/chunk-%012lld", dir, i);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        v[n++] = (struct chunk_file){i, st.st_ino, st.st_mtim};
    }
    return n;
}

static void assert_chunks_unchanged(const char *dir, const struct chunk_file *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/chunks/chunk-%012lld", dir, v[i].index);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        if (st.st_ino != v[i].ino || st.st_mtim.tv_sec != v[i].mtime.tv_sec ||
            st.st_mtim.tv_nsec != v[i].mtime.tv_nsec)
            fail_msg("chunk %lld was written again after the kills", v[i].index);
    }
}

static void assert_range_once(const char *what, const char *text, long n)
{
    struct tally t = tally_range(text, n);
    print_tally(what, t);
    assert_int_equal(t.lines, n);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
}

/* ---- (a) a save reads back as exactly the dataset ---- */

static void test_save_reads_back_exactly(void **unused)
{
    (void)unused;
    struct cluster c;
    assert_int_equal(setup_cluster(&c, 2, 0), 0);
    const char *pipeline = "range(700) | map(square)";
    register_ds(&c, "squares", pipeline);
    char dir[512], src[600];
    path_in_tmp(dir, sizeof dir, "snap-squares");
    char *out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "squares", "--path",
                            dir, "--timeout-ms", "60000", NULL);
    char want[700];
    struct save_status s = save_status(&c, dir);
    assert_string_equal(s.state, "finished");
    assert_true(s.chunks > 1);
    assert_int_equal(s.committed, s.chunks);
    snprintf(want, sizeof want, "snapshot %s: finished, %lld chunks\n", dir, s.chunks);
    assert_string_equal(out, want);
    free(out);
    /* The layout: meta, manifest, one file per chunk, no temporary file left. */
    char path[700];
    struct stat st;
    snprintf(path, sizeof path, "%s/snapshot.json", dir);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    assert_int_equal(stat(path, &st), 0);
    struct chunk_file files[4096];
    assert_int_equal(list_chunks(dir, files, 4096, s.chunks), (size_t)s.chunks);

    /* The same sequence, chunk after chunk. */
    char *expect = run_local(pipeline, 0, NULL);
    char *got = run_local(snapshot_pipeline(src, sizeof src, dir), 0, NULL);
    assert_int_equal(count_lines(expect), 700);
    assert_string_equal(got, expect);
    free(got);
    char *sorted_expect = sorted_lines(expect);

    /* distributed_epoch over the service: every element once. */
    got = cluster_run(&c, 0, NULL, "read", src, "--mode", "distributed_epoch", "--timeout-ms",
                      "60000", NULL, NULL, NULL);
    char *sorted = sorted_lines(got);
    assert_string_equal(sorted, sorted_expect);
    free(sorted);
    free(got);

    /* parallel_epochs: each of the two workers reads all of it. */
    got = cluster_run(&c, 0, NULL, "read", src, "--mode", "parallel_epochs", "--timeout-ms",
                      "60000", NULL, NULL, NULL);
    sorted = sorted_lines(got);
    char *twice = malloc(2 * strlen(expect) + 1);
    assert_non_null(twice);
    strcpy(twice, expect);
    strcat(twice, expect);
    char *sorted_twice = sorted_lines(twice);
    assert_string_equal(sorted, sorted_twice);
    free(sorted_twice);
    free(twice);
    free(sorted);
    free(got);

    /* Saving again is the same save: nothing is written again. */
    out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "squares", "--path", dir,
                      NULL, NULL, NULL);
    assert_string_equal(out, want);
    free(out);
    assert_chunks_unchanged(dir, files, (size_t)s.chunks);

    /* sluice status lists the save. */
    out = cluster_run(&c, 0, NULL, "status", "--json", NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    assert_non_null(doc);
    json_t *saves = json_object_get(doc, "saves");
    assert_int_equal(json_array_size(saves), 1);
    json_t *sv = json_array_get(saves, 0);
    assert_string_equal(json_string_value(json_object_get(sv, "path")), dir);
    assert_string_equal(json_string_value(json_object_get(sv, "dataset_id")), "squares");
    assert_string_equal(json_string_value(json_object_get(sv, "state")), "finished");
    assert_int_equal(json_integer_value(json_object_get(sv, "chunks_committed")), s.chunks);
    json_decref(doc);
    free(out);

    free(sorted_expect);
    free(expect);
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- (b) kills during a save ---- */

static void test_save_survives_kills(void **unused)
{
    (void)unused;
    struct cluster c;
    assert_int_equal(setup_cluster(&c, 3, 1), 0);
    /* About 27 s of waits in all, 4.5 s on three workers' six threads: long enough to kill things
     * in the middle, on a machine of any size. */
    const long n = 3000;
    register_ds(&c, "slow", "range(3000) | map(wait_us, 9000)");
    char dir[512], src[600];
    path_in_tmp(dir, sizeof dir, "snap-slow");
    char *out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "slow", "--path", dir,
                            "--no-wait", NULL, NULL, NULL);
    assert_non_null(strstr(out, ": running, "));
    free(out);
    long long t0 = now_ms();
    /* A bounded wait that runs out says how far the save got. The bound covers the dispatcher's
     * answers too: one that a loaded machine keeps from answering within it makes the wait say
     * so ("waiting for dispatcher ... to answer"), and the bound is then doubled, up to 4.8 s. */
    char *err = NULL;
    for (int ms = 300;; ms *= 2) {
        char bound[16];
        snprintf(bound, sizeof bound, "%d", ms);
        out = cluster_run(&c, 1, &err, "snapshot", "save", "--dataset-id", "slow", "--path", dir,
                          "--timeout-ms", bound, NULL);
        if (ms >= 4800 || !strstr(err, " to answer\n"))
            break;
        printf("    no answer within %d ms: %s", ms, err);
        free(out);
        free(err);
    }
    char prefix[700];
    snprintf(prefix, sizeof prefix, "sluice: snapshot save: snapshot %s: still running after ",
             dir);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("unexpected: %s", err);
    assert_non_null(strstr(err, " chunks committed)\n"));
    free(err);
    free(out);

    /* Some chunks in, and reported: then the dispatcher dies. */
    struct save_status s = wait_committed(&c, dir, 5);
    static struct chunk_file before[4096], later[4096];
    size_t nbefore = list_chunks(dir, before, 4096, s.chunks);
    /* A worker reports a committed chunk within LEASE_REPORT_MS (100 ms), and the dispatcher
     * journals it at once; the wait leaves room for a loaded machine. */
    sleep_ms(3000);
    assert_int_equal(cluster_restart_dispatcher(&c, SIGKILL), 0);
    printf("    dispatcher killed and restarted with %zu chunks on disk\n", nbefore);

    /* It goes on from there; then a worker dies. */
    s = wait_committed(&c, dir, (long long)nbefore + 5);
    size_t nlater = list_chunks(dir, later, 4096, s.chunks);
    sleep_ms(3000);
    assert_int_equal(proc_stop(&c.workers[0], SIGKILL, 10000), 128 + SIGKILL);
    printf("    worker killed with %zu chunks on disk\n", nlater);

    /* The CLI run again waits for the same save to finish. */
    out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "slow", "--path", dir,
                      "--timeout-ms", "60000", NULL);
    s = save_status(&c, dir);
    char want[700];
    snprintf(want, sizeof want, "snapshot %s: finished, %lld chunks\n", dir, s.chunks);
    assert_string_equal(out, want);
    free(out);
    printf("    saved %lld chunks in %lld ms\n", s.chunks, now_ms() - t0);

    /* Nothing committed before the kills was written again. */
    assert_chunks_unchanged(dir, before, nbefore);
    assert_chunks_unchanged(dir, later, nlater);

    /* Exactly the dataset: the sequence, and a distributed_epoch read. */
    out = run_local(snapshot_pipeline(src, sizeof src, dir), 0, NULL);
    char *expect = run_local("range(3000)", 0, NULL);
    assert_string_equal(out, expect);
    free(expect);
    free(out);
    out = cluster_run(&c, 0, NULL, "read", src, "--mode", "distributed_epoch", "--timeout-ms",
                      "60000", NULL, NULL, NULL);
    assert_range_once("distributed_epoch read of the snapshot", out, n);
    free(out);
    /* The first worker was killed: its exit status is not the cluster's to report. */
    c.workers[0].pid = 0;
    assert_int_equal(cluster_stop(&c), 0);

    /* The journal holds the save's start and end, as `sluice journal dump` shows them. */
    char *argv[] = {(char *)bin_path("sluice"), "journal", "dump", "--work-dir", c.work_dir, NULL};
    char *dump = NULL;
    assert_int_equal(run_cmd(argv, 30000, &dump, NULL), 0);
    char want_start[700];
    snprintf(want_start, sizeof want_start, "dataset='slow' path='%s'\n", dir);
    const char *line = strstr(dump, " save_started save=1 job=");
    assert_non_null(line);
    assert_non_null(strstr(line, want_start));
    assert_non_null(strstr(dump, " save_finished save=1\n"));
    free(dump);
}

/* ---- (c) reading while the save runs ---- */

static void test_read_during_save(void **unused)
{
    (void)unused;
    struct cluster c;
    assert_int_equal(setup_cluster(&c, 2, 0), 0);
    const long n = 3000;
    register_ds(&c, "during", "range(3000) | map(wait_us, 1500)");
    char dir[512], src[600];
    path_in_tmp(dir, sizeof dir, "snap-during");
    char *out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "during", "--path",
                            dir, "--no-wait", NULL, NULL, NULL);
    free(out);
    struct proc r = {0};
    assert_int_equal(cluster_cli_spawn(&c, &r, "read", snapshot_pipeline(src, sizeof src, dir),
                                       "--mode", "distributed_epoch", "--timeout-ms", "60000",
                                       NULL),
                     0);
    /* The read started while the save was still running. */
    struct save_status s = save_status(&c, dir);
    printf("    read started with %lld of %lld chunks committed (%s)\n", s.committed, s.chunks,
           s.state);
    assert_string_equal(s.state, "running");
    assert_true(s.committed < s.chunks);
    out = proc_read_all(&r, 90000);
    int rc = proc_wait(&r, 10000);
    if (rc != 0) {
        char *log = read_text_file(r.log);
        fprintf(stderr, "read exited %d: %s\n", rc, log);
        free(log);
    }
    assert_int_equal(rc, 0);
    assert_range_once("read during the save", out, n);
    free(out);
    out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "during", "--path", dir,
                      "--timeout-ms", "60000", NULL);
    assert_non_null(strstr(out, ": finished, "));
    free(out);
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- (d) a damaged chunk ---- */

static void test_damaged_chunk(void **unused)
{
    (void)unused;
    struct cluster c;
    assert_int_equal(setup_cluster(&c, 1, 0), 0);
    register_ds(&c, "small", "range(200)");
    char dir[512], src[600], chunk[700];
    path_in_tmp(dir, sizeof dir, "snap-damaged");
    char *out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "small", "--path", dir,
                            "--timeout-ms", "60000", NULL);
    free(out);
    /* Flip a byte in the middle of chunk 3. */
    snprintf(chunk, sizeof chunk, "%s/chunks/chunk-000000000003", dir);
    int fd = open(chunk, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    off_t at = st.st_size / 2;
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
    char *err = NULL;
    out = run_local(snapshot_pipeline(src, sizeof src, dir), 1, &err);
    printf("    run: %s", err);
    char want[800];
    snprintf(want, sizeof want, "snapshot chunk %s: checksum mismatch at offset", chunk);
    assert_non_null(strstr(err, want));
    free(err);
    free(out);
    out = cluster_run(&c, 1, &err, "read", src, "--mode", "distributed_epoch", "--timeout-ms",
                      "60000", NULL, NULL, NULL);
    printf("    read: %s", err);
    assert_non_null(strstr(err, want));
    free(err);
    free(out);
    assert_int_equal(cluster_stop(&c), 0);
}

/* A chunk damaged after it was committed, before the save is finalized: the save fails naming
 * the chunk, and FAILED says so; saving again starts it again, and it completes. */
static void test_finalize_finds_damage(void **unused)
{
    (void)unused;
    struct cluster c;
    assert_int_equal(setup_cluster(&c, 1, 0), 0);
    register_ds(&c, "later", "range(600) | map(wait_us, 4000)");
    char dir[512], chunk[700];
    path_in_tmp(dir, sizeof dir, "snap-finalize");
    char *out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "later", "--path", dir,
                            "--no-wait", NULL);
    free(out);
    wait_committed(&c, dir, 1);
    /* Chunk 0 or 1 is committed first (two producers): damage one that is there. */
    snprintf(chunk, sizeof chunk, "%s/chunks/chunk-000000000000", dir);
    int fd = open(chunk, O_RDWR);
    if (fd < 0) {
        snprintf(chunk, sizeof chunk, "%s/chunks/chunk-000000000001", dir);
        fd = open(chunk, O_RDWR);
    }
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, 20), 1);
    b ^= 0x01;
    assert_int_equal(pwrite(fd, &b, 1, 20), 1);
    close(fd);
    char *err = NULL;
    out = cluster_run(&c, 1, &err, "snapshot", "save", "--dataset-id", "later", "--path", dir,
                      "--timeout-ms", "60000", NULL);
    printf("    %s", err);
    char want[900];
    snprintf(want, sizeof want, "sluice: snapshot save: snapshot chunk %s: checksum mismatch at ",
             chunk);
    assert_true(strncmp(err, want, strlen(want)) == 0);
    free(err);
    free(out);
    struct save_status s = save_status(&c, dir);
    assert_string_equal(s.state, "failed");
    snprintf(want, sizeof want, "snapshot chunk %s: checksum mismatch at ", chunk);
    assert_true(strncmp(s.error, want, strlen(want)) == 0);
    char failed[700];
    snprintf(failed, sizeof failed, "%s/FAILED", dir);
    char *text = read_text_file(failed);
    assert_true(strncmp(text, want, strlen(want)) == 0);
    free(text);
    /* No manifest: the snapshot is not complete. */
    struct stat st;
    char manifest[700];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
    assert_int_equal(stat(manifest, &st), -1);

    /* Saving again starts the failed save again, writing every chunk anew: it finishes, FAILED
     * is gone, and it reads back as exactly the dataset. */
    out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "later", "--path", dir,
                      "--timeout-ms", "60000", NULL);
    assert_non_null(strstr(out, ": finished, "));
    free(out);
    s = save_status(&c, dir);
    assert_string_equal(s.state, "finished");
    assert_string_equal(s.error, "");
    assert_int_equal(stat(failed, &st), -1);
    assert_int_equal(stat(manifest, &st), 0);
    char src[600];
    out = run_local(snapshot_pipeline(src, sizeof src, dir), 0, NULL);
    char *expect = run_local("range(600)", 0, NULL);
    assert_string_equal(out, expect);
    free(expect);
    free(out);
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- (e) refusals ---- */

static void expect_refusal(struct cluster *c, const char *id, const char *path, const char *msg)
{
    char *err = NULL;
    char *out = cluster_run(c, 1, &err, "snapshot", "save", "--dataset-id", id, "--path", path,
                            NULL, NULL, NULL);
    assert_string_equal(out, "");
    assert_string_equal(err, msg);
    free(out);
    free(err);
}

static void test_refusals(void **unused)
{
    (void)unused;
    struct cluster c;
    assert_int_equal(setup_cluster(&c, 1, 0), 0);
    register_ds(&c, "a", "range(30)");
    register_ds(&c, "b", "range(40)");
    register_ds(&c, "forever", "range(10) | repeat()");
    register_ds(&c, "tail", "range(100) | filter(even) | batch(4)");
    char dir[512], msg[1024];
    struct stat st;
    path_in_tmp(dir, sizeof dir, "snap-refusals");
    char *out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "a", "--path", dir,
                            "--timeout-ms", "60000", NULL);
    free(out);

    expect_refusal(&c, "nope", dir, "sluice: snapshot save: dataset 'nope' not found\n");
    expect_refusal(&c, "forever", "/tmp/sluice-never-written",
                   "sluice: snapshot save: cannot save dataset 'forever': its pipeline 'range(10) "
                   "| repeat()' never ends\n");
    snprintf(msg, sizeof msg,
             "sluice: snapshot save: snapshot path '%s' holds a save of dataset 'a', not 'b'\n",
             dir);
    expect_refusal(&c, "b", dir, msg);
    expect_refusal(&c, "tail", "/tmp/sluice-never-written",
                   "sluice: snapshot save: cannot save dataset 'tail': its operations from "
                   "batch(4) on run in the reader, not per split (after a filter the splits' "
                   "sizes are unknown, so a batch would end at every split's end); save the "
                   "pipeline before them and apply them when reading the snapshot\n");
    expect_refusal(&c, "a", "relative/snap",
                   "sluice: snapshot save: snapshot path 'relative/snap' is not absolute "
                   "(dispatcher, workers and readers must see it at the same absolute path)\n");
    /* A directory holding another snapshot (saved elsewhere) is refused before anything is
     * written into it. */
    char other[600], meta[700];
    path_in_tmp(other, sizeof other, "snap-other");
    assert_int_equal(mkdir(other, 0755), 0);
    snprintf(meta, sizeof meta, "%s/snapshot.json", other);
    FILE *f = fopen(meta, "w");
    assert_non_null(f);
    fputs("{\"chunks\": 5, \"dataset_id\": \"elsewhere\", \"format\": 1, \"pipeline\": "
          "\"range(5)\"}\n",
          f);
    fclose(f);
    snprintf(msg, sizeof msg,
             "sluice: snapshot save: snapshot path '%s' already holds a snapshot of dataset "
             "'elsewhere' with 5 chunks, not of dataset 'b' with 3 chunks\n",
             other);
    expect_refusal(&c, "b", other, msg);
    snprintf(meta, sizeof meta, "%s/chunks", other);
    assert_int_equal(stat(meta, &st), -1);

    char *err = NULL;
    out = cluster_run(&c, 1, &err, "snapshot", "status", "--path", "/tmp/sluice-no-save-here", NULL,
                      NULL, NULL, NULL);
    assert_string_equal(err, "sluice: snapshot status: no save into snapshot path "
                             "'/tmp/sluice-no-save-here'\n");
    free(err);
    free(out);
    /* None of the refusals touched the disk. */
    assert_int_equal(stat("/tmp/sluice-never-written", &st), -1);
    assert_int_equal(cluster_stop(&c), 0);
}

/* A worker confined to data roots does not write a snapshot outside them: the save fails with
 * the reason, and the directory says so (FAILED). */
static void test_outside_data_roots(void **unused)
{
    (void)unused;
    struct cluster c;
    memset(&c, 0, sizeof c);
    char root[512], dir[512];
    path_in_tmp(root, sizeof root, "root");
    path_in_tmp(dir, sizeof dir, "snap-outside");
    assert_int_equal(mkdir(root, 0755), 0);
    const char *wargs[] = {"--data-root", root, NULL};
    c.worker_args = wargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    register_ds(&c, "r", "range(50)");
    char *err = NULL;
    char *out = cluster_run(&c, 1, &err, "snapshot", "save", "--dataset-id", "r", "--path", dir,
                            "--timeout-ms", "60000", NULL);
    printf("    %s", err);
    char want[1200];
    snprintf(want, sizeof want, "snapshot path: %s is outside the data roots (%s)", dir, root);
    assert_non_null(strstr(err, "sluice: snapshot save: task "));
    assert_non_null(strstr(err, want));
    free(out);
    free(err);
    struct save_status s = save_status(&c, dir);
    assert_string_equal(s.state, "failed");
    assert_non_null(strstr(s.error, want));
    char failed[700];
    snprintf(failed, sizeof failed, "%s/FAILED", dir);
    char *text = read_text_file(failed);
    assert_non_null(strstr(text, want));
    free(text);
    assert_int_equal(cluster_stop(&c), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_reads_back_exactly),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_damaged_chunk),
        cmocka_unit_test(test_finalize_finds_damage),
        cmocka_unit_test(test_outside_data_roots),
        cmocka_unit_test(test_read_during_save),
        cmocka_unit_test(test_save_survives_kills),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
