/* Pipelines mean the same in distributed_epoch as over the whole dataset: take, skip and shard
 * over the source, full batches across splits, stream operations in the reader, and the
 * pipelines that cannot mean the same refused with a message naming the operations. Real
 * dispatcher, two real workers, the `sluice` CLI; each case asserts exact outcomes. */
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

static const char *const short_timeouts[] = {"--worker-timeout-ms", "1000", NULL};

static int setup(void **state)
{
    return (*state = cluster_new(short_timeouts, NULL, 0, 2)) ? 0 : -1;
}

/* `sluice read PIPELINE --mode distributed_epoch [EXTRA...]`: asserts exit status want_rc and
 * returns stdout (stderr into *err when err is given). */
static char *read_de(struct cluster *c, const char *pipeline, int want_rc, char **err,
                     const char *extra1, const char *extra2)
{
    return cluster_run(c, want_rc, err, "read", pipeline, "--mode", "distributed_epoch", extra1,
                       extra2, NULL);
}

static void expect_sorted(struct cluster *c, const char *pipeline, const char *want)
{
    cluster_expect_read(c, want, pipeline, "--mode", "distributed_epoch", NULL);
}

/* "a\nb\n..." for the integers lo, lo + step, ... below hi, sorted as strings. */
static char *ints(long lo, long hi, long step)
{
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    s[0] = '\0';
    for (long v = lo; v < hi; v += step) {
        char line[32];
        int n = snprintf(line, sizeof line, "%ld\n", v);
        while (len + (size_t)n + 1 > cap)
            s = realloc(s, cap *= 2);
        memcpy(s + len, line, (size_t)n + 1);
        len += (size_t)n;
    }
    char *sorted = sorted_lines(s);
    free(s);
    return sorted;
}

static void test_take_skip_shard(void **state)
{
    struct cluster *c = *state;
    char *want = ints(0, 100, 1);
    expect_sorted(c, "range(1000) | take(100)", want);
    expect_sorted(c, "range(100000) | take(100)", want);
    free(want);
    expect_sorted(c, "range(1000) | skip(10) | take(5)", "10\n11\n12\n13\n14\n");
    want = ints(1, 1000, 3);
    expect_sorted(c, "range(1000) | shard(3, 1)", want);
    free(want);
    /* After a repeat: the window of the repeated stream. */
    expect_sorted(c, "range(10) | repeat() | skip(8) | take(5)", "0\n1\n2\n8\n9\n");
}

/* Counts the lines of text with exactly n comma-separated values, and all lines. */
static void count_batches(const char *text, int n, int *full, int *lines)
{
    *full = *lines = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        int commas = 0;
        for (const char *q = p; q < nl; q++)
            commas += *q == ',';
        *full += commas + 1 == n;
        (*lines)++;
        p = nl + 1;
    }
}

static void test_full_batches(void **state)
{
    struct cluster *c = *state;
    expect_sorted(c, "range(100) | batch(32)",
                  "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, "
                  "21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]\n"
                  "[32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, "
                  "51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63]\n"
                  "[64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, "
                  "83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95]\n"
                  "[96, 97, 98, 99]\n");
    char *out = read_de(c, "range(100000) | batch(32)", 0, NULL, NULL, NULL);
    int full, lines;
    count_batches(out, 32, &full, &lines);
    assert_int_equal(full, 3125);
    assert_int_equal(lines, 3125);
    free(out);
    /* drop_remainder drops only the stream's last partial batch. */
    out = read_de(c, "range(1000) | repeat(3) | batch(64, drop_remainder)", 0, NULL, NULL, NULL);
    count_batches(out, 64, &full, &lines);
    assert_int_equal(full, 46);
    assert_int_equal(lines, 46);
    free(out);
}

/* The status document's dataset with pipeline text, and the splits of the job reading it. */
static void split_sizes(struct cluster *c, const char *pipeline, json_int_t *dataset_size,
                        json_int_t *iteration_size, json_int_t *total)
{
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "status", "--json", NULL), 0);
    json_error_t e;
    json_t *doc = json_loads(out, 0, &e);
    assert_non_null(doc);
    const char *id = NULL;
    json_t *d;
    size_t i;
    *dataset_size = -1;
    json_array_foreach(json_object_get(doc, "datasets"), i, d)
    {
        if (strcmp(json_string_value(json_object_get(d, "pipeline")), pipeline) == 0) {
            id = json_string_value(json_object_get(d, "id"));
            json_t *s = json_object_get(d, "split_size");
            *dataset_size = json_is_null(s) ? 0 : json_integer_value(s);
        }
    }
    assert_non_null(id);
    *iteration_size = *total = -1;
    json_array_foreach(json_object_get(doc, "jobs"), i, d)
    {
        if (strcmp(json_string_value(json_object_get(d, "dataset_id")), id) == 0) {
            json_t *splits = json_object_get(d, "splits");
            *iteration_size = json_integer_value(json_object_get(splits, "size"));
            *total = json_integer_value(json_object_get(splits, "total"));
        }
    }
    json_decref(doc);
    free(out);
    free(err);
}

static void test_split_size(void **state)
{
    struct cluster *c = *state;
    json_int_t ds, size, total;
    /* The default never cuts a small source into one-element splits. */
    char *want = expected_range(100, 1);
    expect_sorted(c, "range(100)", want);
    split_sizes(c, "range(100)", &ds, &size, &total);
    assert_int_equal(ds, 0);
    assert_int_equal(size, 16);
    assert_int_equal(total, 7);
    /* Set from the CLI: register, then read the dataset; and read with a pipeline. */
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "register", "range(100) | map(identity)",
                                 "--split-size", "25", NULL),
                     0);
    char id[64];
    snprintf(id, sizeof id, "%.*s", (int)strcspn(out, "\n"), out);
    free(out);
    free(err);
    assert_int_equal(
        cluster_cli(c, &out, &err, "read", "--dataset-id", id, "--mode", "distributed_epoch", NULL),
        0);
    char *got = sorted_lines(out);
    assert_string_equal(got, want);
    free(got);
    free(out);
    free(err);
    split_sizes(c, "range(100) | map(identity)", &ds, &size, &total);
    assert_int_equal(ds, 25);
    assert_int_equal(size, 25);
    assert_int_equal(total, 4);
    free(want);
    /* Rounded up to a multiple of the workers' batch. */
    out = read_de(c, "range(100) | batch(32)", 0, NULL, "--split-size", "10");
    int full, lines;
    count_batches(out, 32, &full, &lines);
    assert_int_equal(full, 3);
    assert_int_equal(lines, 4);
    free(out);
    split_sizes(c, "range(100) | batch(32)", &ds, &size, &total);
    assert_int_equal(ds, 10);
    assert_int_equal(size, 32);
    /* Bad values are refused with the reason. */
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(3)", "--split-size", "0", NULL), 2);
    assert_non_null(strstr(err, "--split-size takes a number of elements >= 1, not '0'"));
    free(out);
    free(err);
    assert_int_equal(
        cluster_cli(c, &out, &err, "read", "--dataset-id", id, "--split-size", "5", NULL), 2);
    assert_non_null(strstr(err, "--split-size goes with a PIPELINE to register, not --dataset-id"));
    free(out);
    free(err);
}

static void test_stream_ops_in_reader(void **state)
{
    struct cluster *c = *state;
    /* take after a filter: exactly 3 of the even numbers, each once. */
    char *out = read_de(c, "range(20) | filter(even) | take(3)", 0, NULL, NULL, NULL);
    int n = 0;
    long seen = 0;
    for (char *p = out; *p; p = strchr(p, '\n') + 1) {
        long v = strtol(p, NULL, 10);
        assert_true(v >= 0 && v < 20 && v % 2 == 0);
        assert_false(seen & (1L << v));
        seen |= 1L << v;
        n++;
    }
    assert_int_equal(n, 3);
    free(out);
    /* batch after a filter: full batches of the merged stream, every even number once. */
    out = read_de(c, "range(2000) | filter(even) | batch(16)", 0, NULL, NULL, NULL);
    int full, lines;
    count_batches(out, 16, &full, &lines);
    assert_int_equal(full, 62);
    assert_int_equal(lines, 63);
    free(out);
    /* With a local tail after the reader's part. */
    out = read_de(c, "range(2000) | filter(even) | batch(16)", 0, NULL, "--local", "take(5)");
    count_batches(out, 16, &full, &lines);
    assert_int_equal(full, 5);
    assert_int_equal(lines, 5);
    free(out);
}

static void test_refused(void **state)
{
    struct cluster *c = *state;
    char *err = NULL;
    char *out = read_de(c, "range(10) | filter(even) | take(3) | repeat(2)", 1, &err, NULL, NULL);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "repeat(2) after take(3) cannot mean the same in "
                                "distributed_epoch: take runs in the reader (after a filter the "
                                "elements' positions are unknown), which cannot read the stream "
                                "again; move the repeat before it"));
    free(out);
    free(err);
    out = read_de(c, "range(100) | shuffle(10) | skip(5)", 1, &err, "--job-name", "shared");
    assert_non_null(strstr(err, "its operations from skip(5) on run in each reader (after a "
                                "shuffle the elements' positions are random), so a take, skip or "
                                "shard among them cannot hold over a job shared by several "
                                "readers (--job-name)"));
    free(out);
    free(err);
}

/* A worker killed mid-read: re-issued splits are batched again whole, so the batches stay full
 * and every element arrives exactly once. */
static void test_batches_survive_a_kill(void **state)
{
    struct cluster *c = *state;
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read",
                                       "range(8192) | map(wait_us, 1000) | batch(32)", "--mode",
                                       "distributed_epoch", NULL),
                     0);
    sleep_ms(1200);
    assert_int_equal(proc_wait(&r, 0), -2); /* still reading */
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, 10000), 128 + SIGKILL);
    assert_true(cluster_add_worker(c) >= 0);
    char *out = proc_read_all(&r, 60000);
    assert_int_equal(proc_wait(&r, 15000), 0);
    int full, lines;
    count_batches(out, 32, &full, &lines);
    assert_int_equal(full, 256);
    assert_int_equal(lines, 256);
    /* Every value once: flatten the batches. */
    char *flat = malloc(strlen(out) + 1);
    assert_non_null(flat);
    size_t k = 0;
    for (const char *p = out; *p; p++)
        if (*p == ',' || *p == '\n')
            flat[k++] = '\n';
        else if (*p != '[' && *p != ']' && *p != ' ')
            flat[k++] = *p;
    flat[k] = '\0';
    /* Each line ended with "]\n": the last value of a batch is followed by two newlines. */
    char *clean = malloc(k + 1);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (!(flat[i] == '\n' && (m == 0 || clean[m - 1] == '\n')))
            clean[m++] = flat[i];
    clean[m] = '\0';
    char *got = sorted_lines(clean);
    char *want = ints(0, 8192, 1);
    assert_string_equal(got, want);
    free(want);
    free(got);
    free(clean);
    free(flat);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_take_skip_shard, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_full_batches, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_split_size, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_stream_ops_in_reader, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_refused, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_batches_survive_a_kill, setup, cluster_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
