/* Shared distributed_epoch jobs, end to end: several `sluice read` processes started at once with
 * the same --job-name and the same pipeline against real dispatcher and worker processes on
 * 127.0.0.1.
 *
 * The contract under test (sluice.h, sluice_read_options.job_name and .deterministic): the readers
 * of one distributed_epoch job split its elements, so that together they see every element of the
 * epoch exactly once; read deterministically, each reader gets its share in the canonical order
 * (splits by increasing sequence number, elements by position), which for range() means
 * increasing values. Checked with 2 and 3 readers, through the loss of a worker in the middle of
 * the read (with and without --deterministic), with a reorder bound far below the data (each
 * reader drops what it has no room for and has it produced again), and with a reader stopped for
 * longer than the re-issue grace.
 *
 * Each reader writes to a file of its own (--output), so no reader waits on a pipe that this
 * process is not draining. Every comparison is exact: the union of the outputs against the
 * multiset {0, ..., n-1}, with the counts of the values lost, duplicated and unexpected. Every
 * wait is bounded. SLUICE_TEST_FILTER selects tests by cmocka's wildcard syntax. */
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
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 15000
/* The bound on a whole read, all its readers together: a passing read takes a few seconds. */
#define READ_MS 50000
/* A reader that gets no element for this long fails, saying what it waits for. */
#define READER_TIMEOUT "20000"
/* Elements per split: 100, so range(20000) is 200 splits. */
#define SPLIT "100"

#define MAX_READERS 3

/* A cluster that notices a killed worker quickly: evicted after 1.5 s without a heartbeat. */
static const char *const dispatcher_flags[] = {
    "--worker-timeout-ms", "1500", "--client-timeout-ms", "3000", "--log-level", "info", NULL};
static const char *const worker_flags[] = {"--heartbeat-ms", "200", NULL};

/* The same with readers released only after 30 s of silence: a reader stopped for several
 * seconds stays a consumer of its job. */
static const char *const patient_flags[] = {
    "--worker-timeout-ms", "1500", "--client-timeout-ms", "30000", "--log-level", "info", NULL};

static struct proc readers[MAX_READERS];

static int setup(void **state)
{
    memset(readers, 0, sizeof readers);
    return (*state = cluster_new(dispatcher_flags, worker_flags, 0, 0)) ? 0 : -1;
}

static int setup_patient(void **state)
{
    memset(readers, 0, sizeof readers);
    return (*state = cluster_new(patient_flags, worker_flags, 0, 0)) ? 0 : -1;
}

/* Stops what a failed test left running; fails unless every process of the cluster that was not
 * killed on purpose exits 0. */
static int teardown(void **state)
{
    for (int i = 0; i < MAX_READERS; i++)
        proc_stop(&readers[i], SIGKILL, WAIT_MS);
    memset(readers, 0, sizeof readers);
    return cluster_free(*state);
}

/* ---- the readers ----------------------------------------------------------------------------- */

/* A shared read of pipeline by n readers, started together. */
struct shared_read {
    const char *job;      /* --job-name, also the stem of the output files */
    const char *pipeline; /* range(total) | ... */
    long total;
    int n;
    bool deterministic;
    const char *reorder_bytes; /* with deterministic: --reorder-bytes, or NULL */
    char out[MAX_READERS][512];
};

static void output_path(struct shared_read *r, int i)
{
    snprintf(r->out[i], sizeof r->out[i], "%s/%s-%d.out", tmp_dir(), r->job, i);
}

static void spawn_readers(struct cluster *c, struct shared_read *r)
{
    assert_true(r->n >= 1 && r->n <= MAX_READERS);
    /* The optional flags last: the first NULL ends the arguments. */
    const char *opt[4] = {NULL, NULL, NULL, NULL};
    if (r->deterministic) {
        opt[0] = "--deterministic";
        if (r->reorder_bytes) {
            opt[1] = "--reorder-bytes";
            opt[2] = r->reorder_bytes;
        }
    }
    for (int i = 0; i < r->n; i++) {
        output_path(r, i);
        assert_int_equal(cluster_cli_spawn(c, &readers[i], "read", r->pipeline, "--mode",
                                           "distributed_epoch", "--job-name", r->job,
                                           "--split-size", SPLIT, "--timeout-ms", READER_TIMEOUT,
                                           "--quiet", "--output", r->out[i], opt[0], opt[1], opt[2],
                                           opt[3], NULL),
                         0);
    }
}

/* How many of the readers are still running. */
static int readers_running(const struct shared_read *r)
{
    int running = 0;
    for (int i = 0; i < r->n; i++)
        running += proc_wait(&readers[i], 0) == -2;
    return running;
}

/* Waits for every reader to exit 0, all within READ_MS; fails naming the reader and showing its
 * log otherwise. */
static void wait_readers(const struct shared_read *r)
{
    long long deadline = now_ms() + READ_MS;
    for (int i = 0; i < r->n; i++) {
        long long left = deadline - now_ms();
        int rc = proc_wait(&readers[i], left > 0 ? (int)left : 0);
        if (rc != 0) {
            print_file(readers[i].log, 50);
            if (rc == -2)
                fail_msg("reader %d of job '%s' did not finish within %d ms", i, r->job, READ_MS);
            fail_msg("reader %d of job '%s' exited with %d (log above)", i, r->job, rc);
        }
    }
}

/* ---- the checks ------------------------------------------------------------------------------ */

/* Counts the places where a value is not greater than the one before it in text (one value per
 * line); *first is the 1-based line of the first, 0 when there is none. */
static long decreases(const char *text, long *first)
{
    long count = 0, line = 0, prev = -1;
    *first = 0;
    for (const char *p = text; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        line++;
        if (line > 1 && v <= prev) {
            if (!*first)
                *first = line;
            count++;
        }
        prev = v;
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
    return count;
}

/* Reads the outputs and asserts that together they hold range(total) exactly once each and, when
 * increasing, that each is strictly increasing. Prints each reader's tally and the union's. */
static void check_outputs(const struct shared_read *r, bool increasing)
{
    char *text[MAX_READERS];
    size_t len = 0;
    for (int i = 0; i < r->n; i++) {
        text[i] = read_text_file(r->out[i]);
        len += strlen(text[i]);
    }
    char *all = malloc(len + 1);
    assert_non_null(all);
    all[0] = 0;
    size_t at = 0;
    long unordered = 0, unordered_reader = -1, unordered_line = 0, within = 0;
    for (int i = 0; i < r->n; i++) {
        /* A reader's own tally: its lines, and the values it received more than once itself
         * (the values it lacks are the other readers' share). */
        struct tally own = tally_range(text[i], r->total);
        printf("    reader %d: %ld lines, %ld duplicated within them, %ld unexpected\n", i,
               own.lines, own.duplicated, own.unexpected);
        within += own.duplicated;
        size_t l = strlen(text[i]);
        memcpy(all + at, text[i], l + 1);
        at += l;
        long first = 0;
        long d = increasing ? decreases(text[i], &first) : 0;
        if (d > 0) {
            printf("    reader %d: %ld values not above the one before, the first at line %ld\n", i,
                   d, first);
            if (unordered_reader < 0) {
                unordered_reader = i;
                unordered_line = first;
            }
            unordered += d;
        }
        free(text[i]);
    }
    struct tally t = tally_range(all, r->total);
    print_tally("all readers", t);
    free(all);
    if (t.lost || t.duplicated || t.unexpected || t.lines != r->total)
        fail_msg("job '%s', %d readers of range(%ld): %ld lines, %ld values duplicated (%ld of "
                 "them within one reader's output), %ld lost, %ld unexpected (want each value "
                 "exactly once)",
                 r->job, r->n, r->total, t.lines, t.duplicated, within, t.lost, t.unexpected);
    if (unordered)
        fail_msg("job '%s': %ld values out of order (not above the one before in their reader's "
                 "output), the first in reader %ld at line %ld (want each reader's share in the "
                 "canonical order)",
                 r->job, unordered, unordered_reader, unordered_line);
}

/* ---- deterministic, no fault ----------------------------------------------------------------- */

static void run_det(struct cluster *c, const char *job, const char *pipeline, long total,
                    int nworkers, int nreaders, const char *reorder_bytes)
{
    cluster_add_workers(c, nworkers);
    cluster_wait_registered(c);
    struct shared_read r = {.job = job,
                            .pipeline = pipeline,
                            .total = total,
                            .n = nreaders,
                            .deterministic = true,
                            .reorder_bytes = reorder_bytes};
    long long t0 = now_ms();
    spawn_readers(c, &r);
    wait_readers(&r);
    printf("    %d readers, %d workers: %lld ms\n", nreaders, nworkers, now_ms() - t0);
    check_outputs(&r, true);
}

static void test_det_two_readers(void **state)
{
    run_det(*state, "det2", "range(20000) | map(wait_us, 20)", 20000, 2, 2, NULL);
}

static void test_det_three_readers(void **state)
{
    run_det(*state, "det3", "range(30000) | map(wait_us, 20)", 30000, 3, 3, NULL);
}

/* As test_small_reorder_bound in test_deterministic.c: 64 KiB hold a fraction of the 200 splits
 * of 100 int64 elements that three workers produce at once (no per-element work, so they produce
 * far ahead of the readers); each reader drops what it has no room for and has it produced
 * again. */
static void test_det_small_reorder_bound(void **state)
{
    run_det(*state, "det_reorder", "range(20000)", 20000, 3, 2, "65536");
}

/* ---- a fault in the middle: a worker killed, a reader stopped -------------------------------- */

/* The job's "splits" object in the status: its "finished" count, or -1 while the job is not
 * there. */
static long long splits_finished(struct cluster *c, const char *job)
{
    json_t *doc = cluster_status(c);
    json_t *jobs = json_object_get(doc, "jobs");
    long long n = -1;
    for (size_t i = 0; i < json_array_size(jobs); i++) {
        json_t *j = json_array_get(jobs, i);
        const char *name = json_string_value(json_object_get(j, "name"));
        if (name && strcmp(name, job) == 0) {
            json_t *f = json_object_get(json_object_get(j, "splits"), "finished");
            n = json_is_integer(f) ? json_integer_value(f) : 0;
        }
    }
    json_decref(doc);
    return n;
}

/* The faults a shared read goes through in the middle. */
enum fault {
    /* Worker 0 is SIGKILLed: the dispatcher evicts it and its splits are produced again by the
     * others. */
    KILL_WORKER,
    /* Reader 0 is stopped (SIGSTOP) for 7 s (longer than the re-issue grace of about 4 s,
     * shorter than the client timeout) and continued. It held elements it had received and not
     * yet reported; while it is silent the splits they belong to must not be leased or produced
     * again (the other reader would get them too). */
    STOP_READER,
};

/* 40000 elements of 50 us of CPU, 400 splits: a couple of seconds on two cores, read by two
 * readers over three workers. The fault comes once the job has a task on every worker and a tenth
 * of its splits are finished (so the readers hold part of the epoch and every worker has splits
 * in progress); the read must end with every element once. */
static void run_with_fault(struct cluster *c, const char *job, bool deterministic, enum fault f)
{
    const long total = 40000;
    cluster_add_workers(c, 3);
    cluster_wait_registered(c);
    struct shared_read r = {.job = job,
                            .pipeline = "range(40000) | map(wait_us, 50)",
                            .total = total,
                            .n = 2,
                            .deterministic = deterministic};
    long long t0 = now_ms();
    spawn_readers(c, &r);
    json_decref(cluster_wait_job(c, job, 3, WAIT_MS));
    long long finished;
    while ((finished = splits_finished(c, job)) < 40) {
        if (readers_running(&r) < r.n)
            fail_msg("a reader ended before the fault (%lld splits finished): make the read "
                     "longer",
                     finished);
        if (now_ms() - t0 > WAIT_MS)
            fail_msg("job '%s': %lld splits finished after %d ms", job, finished, WAIT_MS);
        sleep_ms(20);
    }
    if (f == KILL_WORKER) {
        assert_int_equal(proc_stop(&c->workers[0], SIGKILL, WAIT_MS), 128 + SIGKILL);
        printf("    worker 0 killed after %lld ms, %lld of 400 splits finished\n", now_ms() - t0,
               finished);
    } else {
        assert_int_equal(kill(readers[0].pid, SIGSTOP), 0);
        printf("    reader 0 stopped after %lld ms, %lld of 400 splits finished\n", now_ms() - t0,
               finished);
        sleep_ms(7000);
        long long during = splits_finished(c, job);
        assert_int_equal(kill(readers[0].pid, SIGCONT), 0);
        printf("    reader 0 continued: %lld splits finished meanwhile\n", during - finished);
    }
    wait_readers(&r);
    printf("    read in %lld ms\n", now_ms() - t0);
    check_outputs(&r, deterministic);
}

static void test_nondet_kill_worker(void **state)
{
    run_with_fault(*state, "nondet_kill", false, KILL_WORKER);
}

static void test_det_kill_worker(void **state)
{
    run_with_fault(*state, "det_kill", true, KILL_WORKER);
}

static void test_nondet_stopped_reader(void **state)
{
    run_with_fault(*state, "nondet_stopped", false, STOP_READER);
}

static void test_det_stopped_reader(void **state)
{
    run_with_fault(*state, "det_stopped", true, STOP_READER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_det_two_readers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_det_three_readers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nondet_kill_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_det_kill_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_det_small_reorder_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nondet_stopped_reader, setup_patient, teardown),
        cmocka_unit_test_setup_teardown(test_det_stopped_reader, setup_patient, teardown),
    };
    if (getenv("SLUICE_TEST_FILTER"))
        cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
