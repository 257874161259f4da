/* global_shuffle(SEED) through the real binaries: `sluice run` gives a fixed permutation per
 * seed and pass, and distributed_epoch reads with 1, 2 and 5 workers give exactly the source's
 * elements, with every split holding exactly the elements, in the order, of the local run's
 * stretch of the same positions. (The order in which a reader receives the splits of several
 * workers is not fixed, so whole distributed reads are compared as multisets.) */
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const short_timeouts[] = {"--worker-timeout-ms", "1000", NULL};

static int setup(void **state)
{
    return (*state = cluster_new(short_timeouts, NULL, 0, 0)) ? 0 : -1;
}

/* Adds workers until there are n, then waits (at most 10 s) until the dispatcher lists n. */
static void grow_to(struct cluster *c, int n)
{
    while (c->nworkers < n)
        assert_true(cluster_add_worker(c) >= 0);
    long long deadline = now_ms() + 10000;
    for (;;) {
        char *out = NULL, *err = NULL;
        assert_int_equal(cluster_cli(c, &out, &err, "status", "--json", NULL), 0);
        json_error_t jerr;
        json_t *doc = json_loads(out, 0, &jerr);
        assert_non_null(doc);
        size_t have = json_array_size(json_object_get(doc, "workers"));
        json_decref(doc);
        free(out);
        free(err);
        if (have == (size_t)n)
            return;
        if (now_ms() > deadline)
            fail_msg("the dispatcher lists %zu workers, not %d", have, n);
        usleep(100000);
    }
}

/* `sluice run PIPELINE`: its stdout (exit 0 asserted). */
static char *run_local(struct cluster *c, const char *pipeline)
{
    (void)c;
    char *argv[] = {(char *)bin_path("sluice"), "run", (char *)pipeline, NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd(argv, 60000, &out, &err);
    if (rc != 0)
        fail_msg("sluice run '%s': exit %d: %s", pipeline, rc, err ? err : "");
    free(err);
    return out;
}

/* `sluice read PIPELINE --mode distributed_epoch [--split-size N]`: its stdout. */
static char *read_de(struct cluster *c, const char *pipeline, const char *split_size)
{
    char *out = NULL, *err = NULL;
    int rc = split_size ? cluster_cli(c, &out, &err, "read", pipeline, "--mode",
                                      "distributed_epoch", "--split-size", split_size, NULL)
                        : cluster_cli(c, &out, &err, "read", pipeline, "--mode",
                                      "distributed_epoch", NULL);
    if (rc != 0)
        fail_msg("sluice read '%s': exit %d: %s", pipeline, rc, err ? err : "");
    free(err);
    return out;
}

/* The text's lines as numbers, n of them expected. */
static long *numbers(const char *text, size_t n)
{
    long *v = calloc(n ? n : 1, sizeof *v);
    assert_non_null(v);
    assert_int_equal(count_lines(text), n);
    const char *p = text;
    for (size_t i = 0; i < n; i++) {
        char *end;
        v[i] = strtol(p, &end, 10);
        assert_true(end != p && *end == '\n');
        p = end + 1;
    }
    return v;
}

/* v holds each of 0..n-1 once, and not in increasing order. */
static void assert_permutation(const long *v, size_t n)
{
    char *seen = calloc(n, 1);
    assert_non_null(seen);
    size_t in_place = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(v[i] >= 0 && (size_t)v[i] < n);
        assert_int_equal(seen[v[i]], 0);
        seen[v[i]] = 1;
        in_place += (size_t)v[i] == i;
    }
    assert_true(in_place < n / 10 + 2);
    free(seen);
}

/* The local order: fixed (pinned here, as the unit tests pin the permutation), a permutation,
 * different for another seed, different in the second pass of a repeat. */
static void test_local_order(void **state)
{
    struct cluster *c = *state;
    char *out = run_local(c, "range(20) | global_shuffle(7)");
    assert_string_equal(out, "12\n14\n7\n15\n0\n2\n13\n8\n17\n4\n"
                             "19\n1\n6\n18\n5\n16\n3\n9\n10\n11\n");
    free(out);

    char *a = run_local(c, "range(1000) | global_shuffle(7)");
    char *again = run_local(c, "range(1000) | global_shuffle(7)");
    assert_string_equal(a, again);
    free(again);
    long *va = numbers(a, 1000);
    assert_permutation(va, 1000);

    char *b = run_local(c, "range(1000) | global_shuffle(8)");
    long *vb = numbers(b, 1000);
    assert_permutation(vb, 1000);
    assert_true(memcmp(va, vb, 1000 * sizeof *va) != 0);

    char *r = run_local(c, "range(1000) | global_shuffle(7) | repeat(2)");
    long *vr = numbers(r, 2000);
    assert_memory_equal(vr, va, 1000 * sizeof *va); /* pass 0 is the unrepeated order */
    assert_permutation(vr + 1000, 1000);
    assert_true(memcmp(vr, vr + 1000, 1000 * sizeof *vr) != 0);
    free(va);
    free(vb);
    free(vr);
    free(a);
    free(b);
    free(r);
}

/* Every read with 1, 2 and 5 workers: exactly 0..N-1 (each pass), and with a batch the size of
 * a split, so that each split arrives as one line, exactly the local run's splits. */
static void test_distributed_reads(void **state)
{
    struct cluster *c = *state;
    static const int sizes[] = {1, 2, 5};
    char *want = expected_range(1000, 1);
    char *want2 = expected_range(1000, 2);
    /* batch(64) with 64-element splits: split k is positions [64k, 64k + 64) of the shuffled
     * stream, which the local run batches the same way. */
    const char *per_split = "range(1000) | global_shuffle(11) | batch(64)";
    const char *per_split_rep = "range(1000) | global_shuffle(11) | batch(50) | repeat(3)";
    char *text = run_local(c, per_split);
    char *local_splits = sorted_lines(text);
    free(text);
    text = run_local(c, per_split_rep);
    char *local_splits_rep = sorted_lines(text);
    free(text);
    assert_int_equal(count_lines(local_splits), 16);
    assert_int_equal(count_lines(local_splits_rep), 60);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        grow_to(c, sizes[i]);
        char *out = read_de(c, "range(1000) | global_shuffle(11)", NULL);
        char *got = sorted_lines(out);
        assert_string_equal(got, want);
        free(got);
        free(out);

        out = read_de(c, "range(1000) | global_shuffle(11) | repeat(2)", NULL);
        got = sorted_lines(out);
        assert_string_equal(got, want2);
        free(got);
        free(out);

        out = read_de(c, per_split, "64");
        got = sorted_lines(out);
        assert_string_equal(got, local_splits);
        free(got);
        free(out);

        out = read_de(c, per_split_rep, "50");
        got = sorted_lines(out);
        assert_string_equal(got, local_splits_rep);
        free(got);
        free(out);
    }
    free(local_splits);
    free(local_splits_rep);
    free(want);
    free(want2);
}

/* File sources: workers read the files of the shuffled split sequence and shuffle each file's
 * lines; the read is exactly the local run's lines. */
static void test_distributed_files(void **state)
{
    struct cluster *c = *state;
    grow_to(c, c->nworkers > 2 ? c->nworkers : 2);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/gshuffle-files", tmp_dir());
    assert_true(mkdir(dir, 0700) == 0 || access(dir, F_OK) == 0);
    for (int j = 0; j < 7; j++) {
        char path[600];
        snprintf(path, sizeof path, "%s/part-%d.txt", dir, j);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        for (int i = 0; i < 20 + j; i++)
            fprintf(fp, "%d-%d\n", j, i);
        assert_int_equal(fclose(fp), 0);
    }
    char pipeline[700];
    snprintf(pipeline, sizeof pipeline, "lines(\"%s/*.txt\") | global_shuffle(5) | repeat(2)", dir);
    char *local = run_local(c, pipeline);
    assert_int_equal(count_lines(local), 2 * (20 * 7 + 21));
    char *want = sorted_lines(local);
    char *out = read_de(c, pipeline, NULL);
    char *got = sorted_lines(out);
    assert_string_equal(got, want);
    free(got);
    free(out);
    free(want);
    free(local);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_order),
        cmocka_unit_test(test_distributed_reads),
        cmocka_unit_test(test_distributed_files),
    };
    return cmocka_run_group_tests(tests, setup, cluster_teardown);
}
