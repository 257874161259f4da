/* Mixing datasets through the service: a real dispatcher and workers on 127.0.0.1.
 *
 *   - a parallel_epochs read of a mix gets from each worker exactly the sequence `sluice run`
 *     prints (the whole mix batched into one element, so each copy's order is visible);
 *   - a deterministic distributed_epoch read of a mix (each input a job of its own, mixed in the
 *     reader) is exactly `sluice run`'s sequence at 1, 2 and 4 workers and any split size, with
 *     operations after the mix in the reader too, and its shares hold in every window;
 *   - two readers of a shared mix job get every element of every input once between them;
 *   - a worker killed mid-read loses and repeats nothing, in the identical sequence;
 *   - a read saved, closed and restored at 50 random positions continues the identical sequence
 *     (sample_from_datasets, choose_from_datasets, and a plain named job: a restored read of a
 *     job nobody reads starts a new iteration from the checkpoint), and a killed
 *     `sluice read --checkpoint` resumes a mix with every element once;
 *   - the checkpoints of a shared mix job's two readers merge, and the merge restores the rest;
 *   - weights changed while two readers of a shared job read: both switch at the positions the
 *     dispatcher named, a restored reader keeps to the schedule, and a deterministic read restored
 *     from before a change replays it identically;
 *   - the weights schedule survives a fault-tolerant dispatcher's kill and restart mid-read;
 *   - a local repeat(2) over a mix, named and anonymous: sluice run's sequence twice;
 *   - stop_on_empty both ways and a finite choice pipeline behave as in `sluice run`;
 *   - the errors: a mix's checkpoint for another dataset, a checkpoint of a read with operations
 *     in the reader, coordinated reads. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/proc.h"
#include "lib/tmp.h"

#include "pipeline/mix.h"
#include "sluice/sluice.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_MS 20000
#define READ_MS 120000

/* 70 elements at most, so batch(100) makes one element of a whole copy. */
static const char *const mix = "sample_from_datasets([(range(40)), (range(100, 120) | map(add, "
                               "1000)), (range(200, 210))], [0.6, 0.3, 0.1], 5) | batch(100)";

static void test_parallel_epochs_copies(void **state)
{
    struct cluster *c = *state;
    char *const argv[] = {(char *)bin_path("sluice"), "run", (char *)mix, NULL};
    char *out = NULL, *err = NULL;
    assert_int_equal(run_cmd(argv, 60000, &out, &err), 0);
    /* One line: the whole mixed sequence, the inputs' elements interleaved. */
    assert_non_null(strstr(out, "[0, "));
    assert_non_null(strstr(out, "1100"));
    assert_non_null(strstr(out, "209"));
    assert_int_equal(strchr(out, '\n') - out + 1, (long)strlen(out));
    /* One copy from each worker. */
    size_t n = strlen(out), copies = (size_t)c->nworkers;
    char *want = malloc(copies * n + 1);
    assert_non_null(want);
    for (size_t k = 0; k < copies; k++)
        memcpy(want + k * n, out, n + 1);
    cluster_expect_read(c, want, mix, "--mode", "parallel_epochs", NULL);
    free(want);
    free(out);
    free(err);
}

/* `sluice run PIPELINE`'s output. */
static char *run_local(const char *pipeline)
{
    char *const argv[] = {(char *)bin_path("sluice"), "run", (char *)pipeline, NULL};
    char *out = NULL, *err = NULL;
    if (run_cmd(argv, 60000, &out, &err) != 0)
        fail_msg("sluice run %s: %s", pipeline, err);
    free(err);
    return out;
}

/* A deterministic distributed_epoch read of pipeline (extra arguments before the NULL) must
 * print exactly want. */
static void expect_det_read(struct cluster *c, const char *what, const char *want,
                            const char *pipeline, const char *a1, const char *a2)
{
    char *out = cluster_run(c, 0, NULL, "read", pipeline, "--mode", "distributed_epoch",
                            "--deterministic", a1, a2, NULL);
    if (strcmp(out, want) != 0)
        fail_msg("%s: the read (%zu bytes) differs from sluice run (%zu bytes)", what, strlen(out),
                 strlen(want));
    printf("    %s: %zu bytes identical to sluice run\n", what, strlen(want));
    free(out);
}

/* Inputs of 18000, 1800 and 200 elements at weights 0.9, 0.09 and 0.01: the three end
 * together. */
static const char *const skewed = "sample_from_datasets([(range(18000)), (range(100000, 101800)), "
                                  "(range(200000, 200200))], [0.9, 0.09, 0.01], 11)";

/* The input an element of skewed came from. */
static int input_of(long v)
{
    return v >= 200000 ? 2 : v >= 100000 ? 1 : 0;
}

/* Realized shares within 1 percentage point of the weights over every window of 10,000
 * elements (starting every 500), and each input's count exact over the run. */
static void check_shares(const char *text)
{
    static int from[20000];
    long n = 0;
    for (const char *p = text; *p && n < 20000;) {
        from[n++] = input_of(strtol(p, NULL, 10));
        p = strchr(p, '\n');
        if (!p)
            break;
        p++;
    }
    assert_int_equal(n, 20000);
    const double w[3] = {0.9, 0.09, 0.01};
    double worst = 0;
    for (long start = 0; start + 10000 <= n; start += 500) {
        long count[3] = {0};
        for (long k = start; k < start + 10000; k++)
            count[from[k]]++;
        for (int i = 0; i < 3; i++) {
            double off = count[i] / 10000.0 - w[i];
            if (off < 0)
                off = -off;
            if (off > worst)
                worst = off;
            if (off > 0.01)
                fail_msg("window at %ld: input %d has %ld of 10000", start, i, count[i]);
        }
    }
    printf("    shares: largest deviation from the weights in a 10000-element window %.4f\n",
           worst);
}

static void test_deterministic_any_scale(void **state)
{
    struct cluster *c = *state;
    char *want = run_local(skewed);
    check_shares(want);
    char batched[512];
    snprintf(batched, sizeof batched, "%s | map(add, 1) | batch(7)", skewed);
    char *want_batched = run_local(batched);
    expect_det_read(c, "1 worker", want, skewed, NULL, NULL);
    expect_det_read(c, "1 worker, split size 7", want, skewed, "--split-size", "7");
    cluster_add_workers(c, 1);
    cluster_wait_registered(c);
    expect_det_read(c, "2 workers", want, skewed, NULL, NULL);
    expect_det_read(c, "2 workers, split size 7", want, skewed, "--split-size", "7");
    expect_det_read(c, "2 workers, batch in the reader", want_batched, batched, NULL, NULL);
    cluster_add_workers(c, 2);
    cluster_wait_registered(c);
    expect_det_read(c, "4 workers", want, skewed, NULL, NULL);
    expect_det_read(c, "4 workers, split size 100", want, skewed, "--split-size", "100");
    expect_det_read(c, "4 workers, batch in the reader", want_batched, batched, NULL, NULL);
    /* Without --deterministic: the same multiset. */
    cluster_expect_read(c, want, skewed, "--mode", "distributed_epoch", NULL);
    free(want);
    free(want_batched);
}

static void test_shared_job_exactly_once(void **state)
{
    struct cluster *c = *state;
    const char *pipeline = "sample_from_datasets([(range(3000) | map(wait_us, 300)), "
                           "(range(100000, 101000) | map(wait_us, 300))], [0.7, 0.3], 4)";
    struct proc r[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(cluster_cli_spawn(c, &r[i], "read", pipeline, "--mode",
                                           "distributed_epoch", "--job-name", "shared-mix", NULL),
                         0);
    char *out[2];
    for (int i = 0; i < 2; i++) {
        out[i] = proc_read_all(&r[i], READ_MS);
        assert_non_null(out[i]);
        int rc = proc_wait(&r[i], READ_MS);
        if (rc != 0)
            print_file(r[i].log, 50);
        assert_int_equal(rc, 0);
    }
    static unsigned char seen[4000];
    memset(seen, 0, sizeof seen);
    long lines[2] = {0, 0};
    for (int i = 0; i < 2; i++)
        for (char *p = out[i]; *p;) {
            long v = strtol(p, NULL, 10);
            long k = v >= 100000 ? 3000 + v - 100000 : v;
            assert_true(k >= 0 && k < 4000);
            if (seen[k]++)
                fail_msg("%ld delivered twice", v);
            lines[i]++;
            p = strchr(p, '\n');
            assert_non_null(p);
            p++;
        }
    for (long k = 0; k < 4000; k++)
        if (!seen[k])
            fail_msg("element %ld of the mix lost", k);
    printf("    two readers of a shared mix job: %ld + %ld elements, each once\n", lines[0],
           lines[1]);
    free(out[0]);
    free(out[1]);
}

static long long size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

/* A worker killed while a deterministic mix is read: the sequence is still sluice run's. */
static void test_worker_kill(void **state)
{
    struct cluster *c = *state;
    int first = c->nworkers;
    cluster_add_workers(c, 3);
    cluster_wait_registered(c);
    /* About 9 s of sleeps over three workers: the kill lands well inside the read. The sleeps
     * change no element, so the local run that gives the expected sequence goes without them. */
    const char *pipeline = "sample_from_datasets([(range(6000) | map(wait_us, 3000)), "
                           "(range(100000, 103000) | map(wait_us, 3000))], [2, 1], 21)";
    char *want = run_local("sample_from_datasets([(range(6000)), (range(100000, 103000))], "
                           "[2, 1], 21)");
    char out[512];
    snprintf(out, sizeof out, "%s/kill.out", tmp_dir());
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", pipeline, "--mode", "distributed_epoch",
                                       "--deterministic", "--output", out, NULL),
                     0);
    long long deadline = now_ms() + READ_MS;
    /* The reader's exit status, once it ended (-2 while it runs): kept, not lost to a poll. */
    int rc = -2;
    while (size_of(out) < (long long)strlen(want) / 3 && (rc = proc_wait(&r, 0)) == -2 &&
           now_ms() < deadline)
        usleep(2000);
    bool killed = rc == -2;
    if (killed)
        proc_stop(&c->workers[first], SIGKILL, WAIT_MS);
    if (rc == -2)
        rc = proc_wait(&r, READ_MS);
    if (rc != 0)
        print_file(r.log, 50);
    assert_int_equal(rc, 0);
    char *got = read_text_file(out);
    if (strcmp(got, want) != 0)
        fail_msg("after a worker's loss the read (%zu bytes) differs from sluice run (%zu)",
                 strlen(got), strlen(want));
    printf("    worker killed mid-read (%s): %zu bytes identical to sluice run\n",
           killed ? "yes" : "the read ended first", strlen(want));
    assert_true(killed);
    free(got);
    free(want);
}

static struct sluice_client *client_for(struct cluster *c)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_client *client = NULL;
    struct sluice_client_options co = {.dispatcher = c->dispatcher.addr, .timeout_ms = WAIT_MS};
    if (sluice_client_open(&co, &client, err, sizeof err) != 0)
        fail_msg("client: %s", err);
    return client;
}

/* The int64 values of sluice run's lines. */
static size_t parse_values(const char *text, int64_t *v, size_t cap)
{
    size_t n = 0;
    for (const char *p = text; *p && n < cap;) {
        v[n++] = strtoll(p, NULL, 10);
        p = strchr(p, '\n');
        if (!p)
            break;
        p++;
    }
    return n;
}

/* Reads pipeline deterministically in pieces: each piece opens the read (restored from the last
 * piece's checkpoint), reads a random number of elements, saves and closes; 50 pieces, then the
 * rest. The values must be sluice run's sequence. */
static void resume_pieces(struct cluster *c, const char *pipeline, const char *job)
{
    static int64_t want[8000], got[8000];
    char *text = run_local(pipeline);
    size_t nwant = parse_values(text, want, 8000);
    free(text);
    struct sluice_client *client = client_for(c);
    uint8_t *ck = NULL;
    size_t ck_len = 0, n = 0;
    unsigned seed = (unsigned)now_ms();
    printf("    %s: seed %u\n", job, seed);
    srand(seed);
    for (int piece = 0; piece <= 50; piece++) {
        char err[SLUICE_ERRMSG_SIZE] = "";
        struct sluice_read_options ro = {.pipeline = ck ? NULL : pipeline,
                                         .mode = SLUICE_DISTRIBUTED_EPOCH,
                                         .deterministic = true,
                                         .job_name = job,
                                         .restore = ck,
                                         .restore_len = ck_len};
        struct sluice_iterator *it = NULL;
        if (sluice_iterator_open(client, &ro, &it, err, sizeof err) != 0)
            fail_msg("piece %d: open: %s", piece, err);
        size_t take = piece < 50 ? 1 + (size_t)rand() % (2 * nwant / 50) : SIZE_MAX;
        const struct sluice_element *e;
        int rc = 1;
        for (size_t k = 0;
             k < take && (rc = sluice_iterator_next(it, &e, READ_MS, err, sizeof err)) == 1; k++) {
            assert_true(n < 8000);
            int64_t v;
            memcpy(&v, sluice_element_data(e, 0, NULL), sizeof v);
            got[n++] = v;
        }
        if (rc < 0)
            fail_msg("piece %d: next: %s", piece, err);
        free(ck);
        ck = NULL;
        if (sluice_iterator_save(it, &ck, &ck_len, err, sizeof err) != 0)
            fail_msg("piece %d: save: %s", piece, err);
        sluice_iterator_close(it);
        if (rc == 0)
            break;
    }
    free(ck);
    sluice_client_close(client);
    assert_int_equal(n, nwant);
    for (size_t k = 0; k < n; k++)
        if (got[k] != want[k])
            fail_msg("position %zu: got %" PRId64 ", sluice run has %" PRId64, k, got[k], want[k]);
    printf("    %s: %zu elements over up to 51 resumed pieces, identical to sluice run\n", job, n);
}

static void test_resume_random_positions(void **state)
{
    struct cluster *c = *state;
    /* Not a mix: a named job whose readers closed starts again from the checkpoint. */
    resume_pieces(c, "range(2600)", "resume-plain");
    resume_pieces(c,
                  "sample_from_datasets([(range(2000)), (range(100000, 100500) | map(add, 7)), "
                  "(range(200000, 200100))], [0.5, 0.3, 0.2], 9) | map(mul, 2)",
                  "resume-sample");
    resume_pieces(c,
                  "choose_from_datasets([(range(600)), (range(100000, 100400)), "
                  "(range(200000, 200300))], (range(2000) | map(mod, 3)), false)",
                  "resume-choose");
}

/* `sluice read --checkpoint` of a mix killed twice and resumed: every element once. */
static void test_cli_resume(void **state)
{
    struct cluster *c = *state;
    const char *pipeline = "sample_from_datasets([(range(3000) | map(wait_us, 1000)), "
                           "(range(100000, 101500) | map(wait_us, 1000))], [2, 1], 5)";
    char *want = run_local(pipeline);
    char ck[512], out[512];
    snprintf(ck, sizeof ck, "%s/mix.ck", tmp_dir());
    snprintf(out, sizeof out, "%s/mix.out", tmp_dir());
    /* cluster_resumed_read reads without --deterministic: every element once. */
    char *got = cluster_resumed_read(c, pipeline, NULL, "200", ck, out, (long long)strlen(want), 2,
                                     READ_MS);
    long lines = 0;
    static unsigned char seen[4500];
    memset(seen, 0, sizeof seen);
    for (char *p = got; *p;) {
        long v = strtol(p, NULL, 10);
        long k = v >= 100000 ? 3000 + v - 100000 : v;
        assert_true(k >= 0 && k < 4500);
        if (seen[k]++)
            fail_msg("%ld twice after a resume", v);
        lines++;
        p = strchr(p, '\n');
        assert_non_null(p);
        p++;
    }
    assert_int_equal(lines, 4500);
    printf("    sluice read --checkpoint killed twice and resumed: 4500 elements, each once\n");
    free(got);
    free(want);
}

/* Two readers of a shared mix job read alternately, save, close; the merge of their checkpoints
 * restored into one reader reads the rest: every element once in all. */
static void test_merge_shared(void **state)
{
    struct cluster *c = *state;
    const char *pipeline = "sample_from_datasets([(range(2000)), (range(100000, 101000))], "
                           "[0.6, 0.4], 13)";
    struct sluice_client *client = client_for(c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_read_options ro = {
        .pipeline = pipeline, .mode = SLUICE_DISTRIBUTED_EPOCH, .job_name = "merged-mix"};
    struct sluice_iterator *it[2];
    for (int i = 0; i < 2; i++)
        if (sluice_iterator_open(client, &ro, &it[i], err, sizeof err) != 0)
            fail_msg("open %d: %s", i, err);
    static unsigned char seen[3000];
    memset(seen, 0, sizeof seen);
    long total = 0;
    const struct sluice_element *e;
    for (int k = 0; k < 600; k++) {
        int rc = sluice_iterator_next(it[k % 2], &e, READ_MS, err, sizeof err);
        if (rc != 1)
            fail_msg("reader %d: %d %s", k % 2, rc, err);
        int64_t v;
        memcpy(&v, sluice_element_data(e, 0, NULL), sizeof v);
        long idx = v >= 100000 ? 2000 + v - 100000 : v;
        assert_true(idx >= 0 && idx < 3000);
        assert_int_equal(seen[idx]++, 0);
        total++;
    }
    uint8_t *ck[2];
    size_t len[2];
    for (int i = 0; i < 2; i++) {
        if (sluice_iterator_save(it[i], &ck[i], &len[i], err, sizeof err) != 0)
            fail_msg("save %d: %s", i, err);
        sluice_iterator_close(it[i]);
    }
    uint8_t *m = NULL;
    size_t mlen = 0;
    const uint8_t *const parts[2] = {ck[0], ck[1]};
    if (sluice_checkpoint_merge(parts, len, 2, &m, &mlen, err, sizeof err) != 0)
        fail_msg("merge: %s", err);
    struct sluice_read_options rr = {.mode = SLUICE_DISTRIBUTED_EPOCH,
                                     .job_name = "merged-mix",
                                     .restore = m,
                                     .restore_len = mlen};
    struct sluice_iterator *r;
    if (sluice_iterator_open(client, &rr, &r, err, sizeof err) != 0)
        fail_msg("restore: %s", err);
    int rc;
    while ((rc = sluice_iterator_next(r, &e, READ_MS, err, sizeof err)) == 1) {
        int64_t v;
        memcpy(&v, sluice_element_data(e, 0, NULL), sizeof v);
        long idx = v >= 100000 ? 2000 + v - 100000 : v;
        assert_true(idx >= 0 && idx < 3000);
        if (seen[idx]++)
            fail_msg("%" PRId64 " twice after the merged restore", v);
        total++;
    }
    if (rc != 0)
        fail_msg("restored read: %s", err);
    sluice_iterator_close(r);
    assert_int_equal(total, 3000);
    printf("    two readers' checkpoints merged and restored: 3000 elements, each once\n");
    /* A mix's checkpoint does not merge with a plain one. */
    struct sluice_read_options po = {.pipeline = "range(10)", .mode = SLUICE_DISTRIBUTED_EPOCH};
    assert_int_equal(sluice_iterator_open(client, &po, &r, err, sizeof err), 0);
    uint8_t *plain;
    size_t plain_len;
    assert_int_equal(sluice_iterator_save(r, &plain, &plain_len, err, sizeof err), 0);
    sluice_iterator_close(r);
    const uint8_t *const mixed[2] = {ck[0], plain};
    const size_t mixed_len[2] = {len[0], plain_len};
    uint8_t *bad = NULL;
    assert_int_equal(sluice_checkpoint_merge(mixed, mixed_len, 2, &bad, &mlen, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "checkpoint 2: not a sluice checkpoint of a mix");
    free(plain);
    free(m);
    free(ck[0]);
    free(ck[1]);
    sluice_client_close(client);
}

/* A local repeat over a mix: each pass is a mix read of its own, a named job's next repetition of
 * every input's job (a named job) or new jobs (anonymous); deterministic, each pass is sluice
 * run's sequence. */
static void test_local_repeat(void **state)
{
    struct cluster *c = *state;
    const char *pipeline = "sample_from_datasets([(range(300)), (range(1000, 1100))], [3, 1], 2)";
    char *once = run_local(pipeline);
    size_t n = strlen(once);
    char *want = malloc(2 * n + 1);
    assert_non_null(want);
    memcpy(want, once, n);
    memcpy(want + n, once, n + 1);
    for (int named = 0; named < 2; named++) {
        char *out = named ? cluster_run(c, 0, NULL, "read", pipeline, "--mode", "distributed_epoch",
                                        "--deterministic", "--job-name", "repeated-mix", "--local",
                                        "repeat(2)", NULL)
                          : cluster_run(c, 0, NULL, "read", pipeline, "--mode", "distributed_epoch",
                                        "--deterministic", "--local", "repeat(2)", NULL);
        if (strcmp(out, want) != 0)
            fail_msg("%s: repeat(2) of the mix (%zu bytes) is not sluice run's twice (%zu)",
                     named ? "named" : "anonymous", strlen(out), strlen(want));
        free(out);
    }
    printf("    local repeat(2) over a mix, named and anonymous: sluice run's sequence twice\n");
    free(once);
    free(want);
}

static void test_stop_on_empty_and_choose(void **state)
{
    struct cluster *c = *state;
    static const char *const pipelines[] = {
        "sample_from_datasets([(range(50)), (range(100, 300))], [0.5, 0.5], 3)",
        "sample_from_datasets([(range(50)), (range(100, 300))], [0.5, 0.5], 3, stop_on_empty)",
        "choose_from_datasets([(range(10)), (range(100, 103))], (list(0, 1, 1, 0, 1, 1, 0, 0)))",
        "choose_from_datasets([(range(10)), (range(100, 103))], (list(0, 1, 1, 1, 1, 0)), false)",
    };
    for (size_t i = 0; i < sizeof pipelines / sizeof *pipelines; i++) {
        char *want = run_local(pipelines[i]);
        expect_det_read(c, pipelines[i], want, pipelines[i], NULL, NULL);
        free(want);
    }
}

static void test_errors(void **state)
{
    struct cluster *c = *state;
    struct sluice_client *client = client_for(c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    const char *pipeline = "sample_from_datasets([(range(100)), (range(200, 300))], [1, 1], 2)";
    struct sluice_read_options ro = {.pipeline = pipeline, .mode = SLUICE_DISTRIBUTED_EPOCH};
    struct sluice_iterator *it = NULL;
    assert_int_equal(sluice_iterator_open(client, &ro, &it, err, sizeof err), 0);
    const struct sluice_element *e;
    assert_int_equal(sluice_iterator_next(it, &e, READ_MS, err, sizeof err), 1);
    uint8_t *ck = NULL;
    size_t ck_len = 0;
    assert_int_equal(sluice_iterator_save(it, &ck, &ck_len, err, sizeof err), 0);
    sluice_iterator_close(it);
    /* A mix's checkpoint for a dataset that is no mix. */
    struct sluice_read_options other = {.pipeline = "range(100)",
                                        .mode = SLUICE_DISTRIBUTED_EPOCH,
                                        .restore = ck,
                                        .restore_len = ck_len};
    assert_int_equal(sluice_iterator_open(client, &other, &it, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_non_null(strstr(err, "the checkpoint does not fit dataset"));
    free(ck);
    /* Operations after the mix that run in the reader: no checkpoint. */
    ro.pipeline = "sample_from_datasets([(range(100)), (range(200, 300))], [1, 1], 2) | batch(3)";
    assert_int_equal(sluice_iterator_open(client, &ro, &it, err, sizeof err), 0);
    assert_int_equal(sluice_iterator_next(it, &e, READ_MS, err, sizeof err), 1);
    assert_int_equal(sluice_iterator_save(it, &ck, &ck_len, err, sizeof err),
                     SLUICE_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "cannot be checkpointed"));
    sluice_iterator_close(it);
    /* Coordinated consumers. */
    struct sluice_read_options co = {.pipeline = pipeline,
                                     .mode = SLUICE_DISTRIBUTED_EPOCH,
                                     .job_name = "coordinated-mix",
                                     .num_consumers = 2};
    assert_int_equal(sluice_iterator_open(client, &co, &it, err, sizeof err),
                     SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "a mix cannot be read by coordinated consumers (num_consumers) in "
                             "distributed_epoch: each input is a job of its own, with rounds of "
                             "its own");
    sluice_client_close(client);
}

/* ---- weights changed while a job runs -------------------------------------------------------- */

static const double w_start[2] = {0.8, 0.2}, w_mid[2] = {0.1, 0.9}, w_late[2] = {0.5, 0.5};

/* The input position x of a two-input mix with seed 5 draws, the weights changing to w_mid at
 * from1 and to w_late at from2 (no input runs out in these reads). */
static int expected_input(uint64_t x, uint64_t from1, uint64_t from2)
{
    const double *w = x >= from2 ? w_late : x >= from1 ? w_mid : w_start;
    return pipe_mix_pick(w, NULL, 2, pipe_mix_phase(5), x);
}

static const char *const weighted = "sample_from_datasets([(range(1000000) | map(wait_us, 20)), "
                                    "(range(1000000, 2000000) | map(wait_us, 20))], [0.8, 0.2], 5)";

struct wreader {
    struct sluice_iterator *it;
    int64_t *v;
    size_t n, cap;
};

static void wread(struct wreader *r, size_t until)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    const struct sluice_element *e;
    while (r->n < until) {
        if (sluice_iterator_next(r->it, &e, READ_MS, err, sizeof err) != 1)
            fail_msg("read at %zu: %s", r->n, err);
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 4096;
            r->v = realloc(r->v, r->cap * sizeof *r->v);
            assert_non_null(r->v);
        }
        memcpy(&r->v[r->n++], sluice_element_data(e, 0, NULL), sizeof(int64_t));
    }
}

static void check_inputs(const char *what, const struct wreader *r, size_t from_pos, uint64_t from1,
                         uint64_t from2)
{
    for (size_t x = 0; x < r->n; x++) {
        int got = r->v[x] >= 1000000;
        if (got != expected_input(from_pos + x, from1, from2))
            fail_msg("%s: position %zu came from input %d, the schedule says %d", what,
                     from_pos + x, got, expected_input(from_pos + x, from1, from2));
    }
}

static uint64_t set_weights(struct sluice_client *client, const char *job, const double *w)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    uint64_t from = 0;
    if (sluice_set_weights(client, job, NULL, w, 2, 0, &from, err, sizeof err) != 0)
        fail_msg("set weights: %s", err);
    return from;
}

/* Two readers of a shared job: the weights change twice while they read, and each reader's
 * position x draws with the weights in force at x (the switch at exactly the position the
 * dispatcher named, for both); a reader closed and restored from its checkpoint keeps to the
 * schedule; a change below what readers may have drawn is refused. */
static void test_weights_change_shared(void **state)
{
    struct cluster *c = *state;
    struct sluice_client *client = client_for(c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_read_options ro = {
        .pipeline = weighted, .mode = SLUICE_DISTRIBUTED_EPOCH, .job_name = "weights-shared"};
    struct wreader r[2] = {{0}};
    for (int i = 0; i < 2; i++)
        if (sluice_iterator_open(client, &ro, &r[i].it, err, sizeof err) != 0)
            fail_msg("open %d: %s", i, err);
    wread(&r[0], 300);
    wread(&r[1], 300);
    uint64_t from1 = set_weights(client, "weights-shared", w_mid);
    assert_true(from1 >= 300);
    wread(&r[0], from1 + 300);
    wread(&r[1], from1 + 300);
    uint64_t from2 = set_weights(client, "weights-shared", w_late);
    assert_true(from2 > from1 + 300);
    /* Below what the readers were told: refused, naming the earliest position. */
    uint64_t at = 0;
    assert_int_equal(
        sluice_set_weights(client, "weights-shared", NULL, w_mid, 2, from1, &at, err, sizeof err),
        SLUICE_ERR_INVALID);
    assert_non_null(strstr(err, "may already be read"));
    /* The readers' lookahead at most doubles from one schedule request to the next (1,024,
     * then 2,048 ...): the changes stay close, and neither input (1,000,000 elements each) can
     * run out in these reads, which would make the mix draw from the other one. */
    assert_true(from2 <= from1 + 300 + 4096);
    wread(&r[0], from2 + 300);
    wread(&r[1], from2 + 300);
    check_inputs("reader 0", &r[0], 0, from1, from2);
    check_inputs("reader 1", &r[1], 0, from1, from2);
    /* The status shows the weights in force and from where. */
    json_t *st = cluster_status(c), *mixes = json_object_get(st, "mixes"), *found = NULL;
    for (size_t i = 0; i < json_array_size(mixes); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(mixes, i), "job_name")),
                   "weights-shared") == 0)
            found = json_array_get(mixes, i);
    assert_non_null(found);
    assert_int_equal(json_integer_value(json_object_get(found, "weights_from")), from2);
    assert_int_equal(json_integer_value(json_object_get(found, "changes")), 2);
    json_t *w = json_object_get(found, "weights");
    assert_int_equal(json_array_size(w), 2);
    assert_true(json_real_value(json_array_get(w, 0)) == 0.5);
    assert_true(json_integer_value(json_object_get(found, "horizon")) >= (json_int_t)from2);
    /* And what the readers drew, as they last reported it: shares that add up to 1. */
    json_t *drawn = json_object_get(found, "drawn"),
           *shares = json_object_get(found, "realized_shares");
    assert_int_equal(json_array_size(drawn), 2);
    assert_int_equal(json_array_size(shares), 2);
    json_int_t total =
        json_integer_value(json_array_get(drawn, 0)) + json_integer_value(json_array_get(drawn, 1));
    assert_true(total > 0 && total <= (json_int_t)(r[0].n + r[1].n));
    double sum =
        json_real_value(json_array_get(shares, 0)) + json_real_value(json_array_get(shares, 1));
    assert_true(sum > 0.999999 && sum < 1.000001);
    json_decref(st);
    printf("    weights changed at positions %" PRIu64 " and %" PRIu64
           ": both readers switched there\n",
           from1, from2);
    /* Reader 0 saved and restored: its next positions keep to the schedule. */
    uint8_t *ck;
    size_t ck_len;
    assert_int_equal(sluice_iterator_save(r[0].it, &ck, &ck_len, err, sizeof err), 0);
    sluice_iterator_close(r[0].it);
    struct sluice_read_options rr = {.mode = SLUICE_DISTRIBUTED_EPOCH,
                                     .job_name = "weights-shared",
                                     .restore = ck,
                                     .restore_len = ck_len};
    struct wreader again = {0};
    if (sluice_iterator_open(client, &rr, &again.it, err, sizeof err) != 0)
        fail_msg("restore: %s", err);
    wread(&again, 500);
    check_inputs("restored reader", &again, r[0].n, from1, from2);
    sluice_iterator_close(again.it);
    sluice_iterator_close(r[1].it);
    free(ck);
    free(r[0].v);
    free(r[1].v);
    free(again.v);
    sluice_client_close(client);
}

/* A deterministic read: a checkpoint taken before the change, restored after the first reader
 * closed, replays the identical sequence through the change. */
static void test_weights_change_resume(void **state)
{
    struct cluster *c = *state;
    struct sluice_client *client = client_for(c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_read_options ro = {.pipeline = weighted,
                                     .mode = SLUICE_DISTRIBUTED_EPOCH,
                                     .deterministic = true,
                                     .job_name = "weights-det"};
    struct wreader r = {0};
    if (sluice_iterator_open(client, &ro, &r.it, err, sizeof err) != 0)
        fail_msg("open: %s", err);
    wread(&r, 200);
    uint8_t *ck;
    size_t ck_len;
    assert_int_equal(sluice_iterator_save(r.it, &ck, &ck_len, err, sizeof err), 0);
    uint64_t from1 = set_weights(client, "weights-det", w_mid);
    wread(&r, from1 + 1000);
    check_inputs("deterministic reader", &r, 0, from1, UINT64_MAX);
    sluice_iterator_close(r.it);
    struct sluice_read_options rr = {.mode = SLUICE_DISTRIBUTED_EPOCH,
                                     .deterministic = true,
                                     .job_name = "weights-det",
                                     .restore = ck,
                                     .restore_len = ck_len};
    struct wreader again = {0};
    if (sluice_iterator_open(client, &rr, &again.it, err, sizeof err) != 0)
        fail_msg("restore: %s", err);
    wread(&again, from1 + 1000 - 200);
    assert_memory_equal(again.v, r.v + 200, again.n * sizeof *again.v);
    printf("    deterministic: weights changed at %" PRIu64
           "; restored from position 200, the same %zu elements\n",
           from1, again.n);
    sluice_iterator_close(again.it);
    free(ck);
    free(r.v);
    free(again.v);
    sluice_client_close(client);
}

/* A fault-tolerant dispatcher killed and restarted while a named mix job is read: the weights
 * schedule and its horizon come back from the journal, the reader keeps to the schedule through
 * the restart, and a change below the horizon is still refused. */
static void test_weights_survive_restart(void **state)
{
    (void)state;
    static const char *const ft_args[] = {"--snapshot-every", "50", NULL};
    struct cluster *c = cluster_new(ft_args, NULL, 1, 2);
    assert_non_null(c);
    struct sluice_client *client = client_for(c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_read_options ro = {.pipeline = weighted,
                                     .mode = SLUICE_DISTRIBUTED_EPOCH,
                                     .job_name = "weights-ft",
                                     .deterministic = true};
    struct wreader r = {0};
    if (sluice_iterator_open(client, &ro, &r.it, err, sizeof err) != 0)
        fail_msg("open: %s", err);
    wread(&r, 300);
    uint64_t from1 = set_weights(client, "weights-ft", w_mid);
    wread(&r, from1 + 200);
    assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);
    uint64_t at = 0;
    assert_int_equal(
        sluice_set_weights(client, "weights-ft", NULL, w_late, 2, from1, &at, err, sizeof err),
        SLUICE_ERR_INVALID);
    assert_non_null(strstr(err, "may already be read"));
    uint64_t from2 = set_weights(client, "weights-ft", w_late);
    assert_true(from2 > from1);
    wread(&r, from2 + 300);
    check_inputs("reader through a dispatcher restart", &r, 0, from1, from2);
    printf("    dispatcher killed and restarted: changes at %" PRIu64 " and %" PRIu64
           " kept to by the reader\n",
           from1, from2);
    sluice_iterator_close(r.it);
    free(r.v);
    sluice_client_close(client);
    cluster_free(c);
}

static int setup(void **state)
{
    return (*state = cluster_new(NULL, NULL, 0, 1)) ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parallel_epochs_copies),
        cmocka_unit_test(test_deterministic_any_scale),
        cmocka_unit_test(test_stop_on_empty_and_choose),
        cmocka_unit_test(test_local_repeat),
        cmocka_unit_test(test_shared_job_exactly_once),
        cmocka_unit_test(test_resume_random_positions),
        cmocka_unit_test(test_cli_resume),
        cmocka_unit_test(test_merge_shared),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_weights_change_shared),
        cmocka_unit_test(test_weights_change_resume),
        cmocka_unit_test(test_worker_kill),
    };
    int failed = cmocka_run_group_tests(tests, setup, cluster_teardown_lax);
    /* With a cluster of its own (a fault-tolerant dispatcher). */
    const struct CMUnitTest ft[] = {cmocka_unit_test(test_weights_survive_restart)};
    return failed + cmocka_run_group_tests(ft, NULL, tmp_teardown);
}
