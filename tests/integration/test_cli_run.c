/* `sluice run` end to end: the real binary, its exact output, its errors and exit codes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/proc.h"
#include "lib/tmp.h"
#include "pipeline/files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct run_case {
    const char *pipeline;
    const char *extra1, *extra2;
    int status;
    const char *out;
    const char *err;
};

static void check(const struct run_case *c)
{
    char *const argv[] = {(char *)bin_path("sluice"), "run", (char *)c->pipeline, (char *)c->extra1,
                          (char *)c->extra2,          NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd(argv, 30000, &out, &err);
    if (rc != c->status || strcmp(out, c->out) != 0 || (c->err && strcmp(err, c->err) != 0))
        fprintf(stderr, "pipeline: %s\nstatus %d\nstdout:\n%s\nstderr:\n%s\n", c->pipeline, rc, out,
                err);
    assert_int_equal(rc, c->status);
    assert_string_equal(out, c->out);
    if (c->err)
        assert_string_equal(err, c->err);
    free(out);
    free(err);
}

static void test_outputs(void **state)
{
    (void)state;
    const struct run_case cases[] = {
        {"range(10) | batch(4)", NULL, NULL, 0, "[0, 1, 2, 3]\n[4, 5, 6, 7]\n[8, 9]\n", ""},
        {"range(10) | batch(4, drop_remainder)", NULL, NULL, 0, "[0, 1, 2, 3]\n[4, 5, 6, 7]\n", ""},
        {"range(5) | map(square)", NULL, NULL, 0, "0\n1\n4\n9\n16\n", ""},
        {"range(10) | filter(odd) | map(mul, 10)", NULL, NULL, 0, "10\n30\n50\n70\n90\n", ""},
        {"range(1000000) | filter(even)", "--format", "count", 0, "500000\n", ""},
        {"range(100) | repeat()", "--limit", "3", 0, "0\n1\n2\n", ""},
        {"list(\"a\", \"b\\n\", \"\\x01\")", NULL, NULL, 0, "a\nb\\n\n\\x01\n", ""},
        {"list((1, 2.5), (2, 0.1))", NULL, NULL, 0, "(1, 2.5)\n(2, 0.1)\n", ""},
        {"range(4) | batch(2) | batch(2)", NULL, NULL, 0, "[[0, 1], [2, 3]]\n", ""},
        {"range(3) | repeat(0)", "--format", "count", 0, "0\n", ""},
        {"range(10) | shard(3, 1)", NULL, NULL, 0, "1\n4\n7\n", ""},
        {"range(10) | skip(8) | take(5)", NULL, NULL, 0, "8\n9\n", ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

static void test_errors(void **state)
{
    (void)state;
    const struct run_case cases[] = {
        {"range(10) | batch(", NULL, NULL, 2, "",
         "sluice: pipeline: column 19: expected a number, found end of input\n"},
        {"range(10) | map(nosuch)", NULL, NULL, 2, "",
         "sluice: pipeline: column 13: unknown function 'nosuch'\n"},
        {"range(10)", "--format", "xml", 2, "",
         "sluice: usage: --format takes text or count, not 'xml'\n"},
        {"lines(\"/nonexistent/dir/*.txt\")", NULL, NULL, 1, "",
         "sluice: open: no file matches '/nonexistent/dir/*.txt'\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

static void test_files(void **state)
{
    (void)state;
    char path[512], glob[600], pipeline[700];
    for (int f = 0; f < 3; f++) {
        snprintf(path, sizeof(path), "%s/rec-%d.tfrecord", tmp_dir(), f);
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        for (int i = 0; i < 2; i++) {
            char rec[32];
            int n = snprintf(rec, sizeof(rec), "file%d-rec%d", f, i);
            assert_int_equal(pipe_tfrecord_write(fp, rec, (size_t)n), 0);
        }
        fclose(fp);
    }
    snprintf(glob, sizeof(glob), "%s/rec-*.tfrecord", tmp_dir());
    snprintf(pipeline, sizeof(pipeline), "tfrecord(\"%s\")", glob);
    const struct run_case ok = {
        pipeline,
        NULL,
        NULL,
        0,
        "file0-rec0\nfile0-rec1\nfile1-rec0\nfile1-rec1\nfile2-rec0\nfile2-rec1\n",
        ""};
    check(&ok);

    /* Flip one data byte of the second file's first record: the read stops with an error
     * naming the file and offset, after the first file's records. */
    snprintf(path, sizeof(path), "%s/rec-1.tfrecord", tmp_dir());
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, 12, SEEK_SET);
    fputc('X', fp);
    fclose(fp);
    char want_err[700];
    snprintf(want_err, sizeof(want_err), "sluice: run: %s: offset 0: bad data checksum\n", path);
    const struct run_case bad = {pipeline, NULL, NULL, 1, "file0-rec0\nfile0-rec1\n", want_err};
    check(&bad);
}

static void test_plugin(void **state)
{
    (void)state;
    const struct run_case c = {"range(-3, 3) | filter(positive) | map(negate)",
                               "--plugin",
                               SLUICE_PLUGIN_DIR "/plugin_test.so",
                               0,
                               "-1\n-2\n",
                               ""};
    check(&c);
    const struct run_case missing = {"range(3)", "--plugin", "/nonexistent/plugin.so", 2, "", NULL};
    check(&missing);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_plugin),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmp_cleanup();
    return rc;
}
