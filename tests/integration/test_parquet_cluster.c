/* parquet() on a cluster: 20 files of 4 row groups each, written by an independent writer
 * (hyparquet-writer, tests/npm/parquet_cluster_files.mjs), read by 3 workers.
 *
 * A split is one row group (the job has 80); distributed_epoch delivers every row exactly once;
 * parallel_epochs gives each worker's copy whole; a checkpointed read killed mid-way and resumed
 * delivers every row exactly once; a column with nulls reads with its default, and without one
 * fails naming the file, row group, column and row. */
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

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILES 20
#define GROUPS 4
#define ROWS 500
#define TOTAL (FILES * GROUPS * ROWS)
#define WAIT_MS 20000
#define READ_MS 120000

static const char *const dispatcher_flags[] = {"--worker-timeout-ms",
                                               "1000",
                                               "--client-timeout-ms",
                                               "6000",
                                               "--job-gc-timeout-ms",
                                               "2000",
                                               "--log-level",
                                               "warn",
                                               NULL};

static char data_dir[512];

/* Writes the files with the independent writer. Returns 0, or -1 (failing the group) when node
 * or the package is missing: scripts/deps.sh installs them. */
static int write_files(void)
{
    snprintf(data_dir, sizeof data_dir, "%s/pq", tmp_dir());
    char files[16], groups[16], rows[16];
    snprintf(files, sizeof files, "%d", FILES);
    snprintf(groups, sizeof groups, "%d", GROUPS);
    snprintf(rows, sizeof rows, "%d", ROWS);
    char *argv[] = {SLUICE_NODE, SLUICE_SOURCE_DIR "/tests/npm/parquet_cluster_files.mjs",
                    data_dir,    files,
                    groups,      rows,
                    NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd(argv, 60000, &out, &err);
    if (rc != 0)
        fprintf(stderr, "node failed (%d): %s%s\n", rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
    return rc == 0 ? 0 : -1;
}

static int setup(void **state)
{
    if (write_files() < 0)
        return -1;
    struct cluster *c = cluster_new(dispatcher_flags, NULL, 1, 0);
    if (!c)
        return -1;
    cluster_add_workers(c, 3);
    *state = c;
    return 0;
}

static char *pipeline_of(const char *columns)
{
    char *p = NULL;
    assert_true(asprintf(&p, "parquet(\"%s/part-*.parquet\"%s%s)", data_dir, columns ? ", " : "",
                         columns ? columns : "") > 0);
    return p;
}

static void assert_exactly_once(const char *what, const char *text, long n)
{
    struct tally t = tally_range(text, n);
    print_tally(what, t);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    assert_int_equal(t.lines, n);
}

/* Every row once in distributed_epoch, each worker's whole copy in parallel_epochs. */
static void test_modes(void **state)
{
    struct cluster *c = *state;
    char *p = pipeline_of("\"id\"");
    char *out = cluster_run(c, 0, NULL, "read", p, "--mode", "distributed_epoch", NULL);
    assert_exactly_once("distributed_epoch", out, TOTAL);
    free(out);
    out =
        cluster_run(c, 0, NULL, "read", p, "--mode", "parallel_epochs", "--format", "count", NULL);
    assert_int_equal(strtol(out, NULL, 10), 3L * TOTAL);
    free(out);
    free(p);
    /* Two columns in the order asked, the second a string. */
    p = pipeline_of("\"name\", \"id\"");
    out = cluster_run(c, 0, NULL, "read", p, "--mode", "distributed_epoch", NULL);
    long lines = 0;
    for (const char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        long a, b;
        assert_int_equal(sscanf(l, "(row-%ld, %ld)", &a, &b), 2);
        assert_int_equal(a, b);
        lines++;
    }
    assert_int_equal(lines, TOTAL);
    free(out);
    free(p);
}

/* Nulls: a default fills them; without one the read fails naming where. */
static void test_nulls(void **state)
{
    struct cluster *c = *state;
    char *p = pipeline_of("\"score=-1\"");
    char *out = cluster_run(c, 0, NULL, "read", p, "--mode", "distributed_epoch", "--format",
                            "count", NULL);
    assert_int_equal(strtol(out, NULL, 10), TOTAL);
    free(out);
    free(p);
    p = pipeline_of("\"score\"");
    char *err = NULL;
    out = cluster_run(c, 1, &err, "read", p, "--mode", "distributed_epoch", "--format", "count",
                      NULL);
    /* Whichever row group a worker reads first, the message names its file, row group and the
     * row in the file: the row of a null (global row k = file * GROUPS * ROWS + row, null
     * when k % 7 == 3) inside that row group. */
    const char *at = strstr(err, "/part-");
    assert_non_null(at);
    int file = -1, group = -1;
    long row = -1;
    assert_int_equal(sscanf(at, "/part-%d.parquet: row group %d: column score: row %ld: null",
                            &file, &group, &row),
                     3);
    assert_true(file >= 0 && file < FILES && group >= 0 && group < GROUPS);
    assert_true(row >= (long)group * ROWS && row < (long)(group + 1) * ROWS);
    assert_int_equal(((long)file * GROUPS * ROWS + row) % 7, 3);
    assert_non_null(strstr(err, ": null (give the column a default: \"score=VALUE\")"));
    free(err);
    free(out);
    free(p);
}

/* A checkpointed read killed mid-way and resumed twice delivers every row exactly once. */
static void test_resume(void **state)
{
    struct cluster *c = *state;
    char ck[600], out[600];
    snprintf(ck, sizeof ck, "%s/pq.ck", tmp_dir());
    snprintf(out, sizeof out, "%s/pq.out", tmp_dir());
    char *p = NULL;
    assert_true(
        asprintf(&p, "parquet(\"%s/part-*.parquet\", \"id\") | map(wait_us, 100)", data_dir) > 0);
    /* Each row prints as its id and a newline: 5 bytes on average. */
    char *text = cluster_resumed_read(c, p, NULL, "500", ck, out, (long long)TOTAL * 5, 2, READ_MS);
    assert_exactly_once("resumed twice", text, TOTAL);
    free(text);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modes),
        cmocka_unit_test(test_nulls),
        cmocka_unit_test(test_resume),
    };
    return cmocka_run_group_tests(tests, setup, cluster_teardown);
}
