/* Static sharding rewrites (src/worker/shard.c): each mode's result compared with the spec of
 * the expected pipeline text, and each refusal with its exact message. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/pipeline.h"

#include "common/error.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"
#include "worker/shard.h"

static void expect_equal(const struct pipe_spec *got, const char *want_text)
{
    struct pipe_spec *want = pipeline_parse(want_text);
    if (!pipe_spec_equal(got, want)) {
        char buf[1024];
        pipe_spec_format(got, buf, sizeof buf);
        fail_msg("got '%s', want '%s'", buf, want_text);
    }
    pipe_spec_free(want);
}

struct rewrite_case {
    const char *in;
    enum sluice_mode mode;
    uint32_t num_workers, worker_index;
    const char *files[6]; /* NULL-terminated; the sorted expansion of the source */
    const char *want;     /* the expected pipeline, or NULL when an error is expected */
    const char *want_err;
};

static void run_cases(const struct rewrite_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct rewrite_case *c = &cases[i];
        struct pipe_spec *in = pipeline_parse(c->in);
        size_t nfiles = 0;
        while (c->files[nfiles])
            nfiles++;
        struct shard_params p = {c->mode, c->num_workers, c->worker_index};
        struct pipe_spec *out = (struct pipe_spec *)1;
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc = shard_rewrite(in, &p, (char *const *)c->files, nfiles, &out, err, sizeof err);
        if (c->want) {
            if (rc != 0)
                fail_msg("case %zu '%s': %s", i, c->in, err);
            expect_equal(out, c->want);
            pipe_spec_free(out);
        } else {
            assert_int_equal(rc, SLUICE_ERR_INVALID);
            assert_null(out);
            assert_string_equal(err, c->want_err);
        }
        pipe_spec_free(in);
    }
}

static void test_data(void **state)
{
    (void)state;
    static const struct rewrite_case cases[] = {
        {"range(10)", SLUICE_SHARD_DATA, 3, 1, {NULL}, "range(10) | shard(3, 1)", NULL},
        {"range(10) | map(square) | batch(2)",
         SLUICE_SHARD_DATA,
         2,
         0,
         {NULL},
         "range(10) | map(square) | batch(2) | shard(2, 0)",
         NULL},
        {"range(10)", SLUICE_SHARD_DATA, 1, 0, {NULL}, "range(10) | shard(1, 0)", NULL},
        /* A file source is sharded by element too; its files are not needed. */
        {"lines(\"/d/*.txt\")",
         SLUICE_SHARD_DATA,
         4,
         3,
         {NULL},
         "lines(\"/d/*.txt\") | shard(4, 3)",
         NULL},
        /* Hints are left alone outside hint mode (the engine passes everything through). */
        {"range(10) | shard(SHARD_HINT, SHARD_HINT)",
         SLUICE_SHARD_DATA,
         2,
         1,
         {NULL},
         "range(10) | shard(SHARD_HINT, SHARD_HINT) | shard(2, 1)",
         NULL},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_hint(void **state)
{
    (void)state;
    static const struct rewrite_case cases[] = {
        {"range(10) | shard(SHARD_HINT, SHARD_HINT)",
         SLUICE_SHARD_HINT,
         4,
         2,
         {NULL},
         "range(10) | shard(4, 2)",
         NULL},
        {"range(10) | shard(SHARD_HINT, SHARD_HINT) | map(square) | shard(SHARD_HINT, "
         "SHARD_HINT)",
         SLUICE_SHARD_HINT,
         3,
         0,
         {NULL},
         "range(10) | shard(3, 0) | map(square) | shard(3, 0)",
         NULL},
        {"range(10) | shard(5, SHARD_HINT)",
         SLUICE_SHARD_HINT,
         3,
         2,
         {NULL},
         "range(10) | shard(5, 2)",
         NULL},
        {"range(10) | shard(SHARD_HINT, 0)",
         SLUICE_SHARD_HINT,
         3,
         2,
         {NULL},
         "range(10) | shard(3, 0)",
         NULL},
        /* Fixed shards stay; a pipeline without hints is left whole. */
        {"range(10) | shard(2, 1)",
         SLUICE_SHARD_HINT,
         3,
         2,
         {NULL},
         "range(10) | shard(2, 1)",
         NULL},
        {"range(10) | map(square)",
         SLUICE_SHARD_HINT,
         3,
         2,
         {NULL},
         "range(10) | map(square)",
         NULL},
        {"range(10) | shard(2, SHARD_HINT)",
         SLUICE_SHARD_HINT,
         3,
         2,
         {NULL},
         NULL,
         "column 13: hint sharding gives shard(2, 2): the index must be below the count"},
        {"range(10) | shard(SHARD_HINT, 3)",
         SLUICE_SHARD_HINT,
         2,
         0,
         {NULL},
         NULL,
         "column 13: hint sharding gives shard(2, 3): the index must be below the count"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_file(void **state)
{
    (void)state;
    static const struct rewrite_case cases[] = {
        {"lines(\"/d/*.txt\")",
         SLUICE_SHARD_FILE,
         2,
         1,
         {"/d/a.txt", "/d/b.txt", "/d/c.txt", "/d/d.txt", "/d/e.txt", NULL},
         "lines(\"/d/b.txt\", \"/d/d.txt\")",
         NULL},
        {"lines(\"/d/*.txt\")",
         SLUICE_SHARD_FILE,
         2,
         0,
         {"/d/a.txt", "/d/b.txt", "/d/c.txt", "/d/d.txt", "/d/e.txt", NULL},
         "lines(\"/d/a.txt\", \"/d/c.txt\", \"/d/e.txt\")",
         NULL},
        {"tfrecord(\"/x/*\", \"/y/*\") | map(identity)",
         SLUICE_SHARD_FILE,
         3,
         2,
         {"/x/1", "/x/2", "/y/3", NULL},
         "tfrecord(\"/y/3\") | map(identity)",
         NULL},
        /* A tar() source keeps its extensions; several patterns are written as a list, one
         * bare. */
        {"tar(\"/s/*.tar\", \"jpg\", \"cls\") | batch(2)",
         SLUICE_SHARD_FILE,
         2,
         1,
         {"/s/0.tar", "/s/1.tar", "/s/2.tar", "/s/3.tar", NULL},
         "tar([\"/s/1.tar\", \"/s/3.tar\"], \"jpg\", \"cls\") | batch(2)",
         NULL},
        {"tar([\"/s/*.tar\", \"/t/*.tar\"], \"cls\")",
         SLUICE_SHARD_FILE,
         3,
         0,
         {"/s/0.tar", "/s/1.tar", "/t/2.tar", NULL},
         "tar(\"/s/0.tar\", \"cls\")",
         NULL},
        /* File names with glob characters are escaped so they match only themselves. */
        {"lines(\"/d/*\")",
         SLUICE_SHARD_FILE,
         1,
         0,
         {"/d/a*b", "/d/c?[1]", "/d/back\\slash", NULL},
         "lines(\"/d/a\\\\*b\", \"/d/c\\\\?\\\\[1]\", \"/d/back\\\\\\\\slash\")",
         NULL},
        {"range(10)",
         SLUICE_SHARD_FILE,
         2,
         0,
         {NULL},
         NULL,
         "file sharding needs a tfrecord(), lines() or tar() source; use data or "
         "file_or_data sharding"},
        {"lines(\"/d/*\")",
         SLUICE_SHARD_FILE,
         3,
         0,
         {"/d/a", "/d/b", NULL},
         NULL,
         "file sharding needs at least one file per worker, but there are 2 files for 3 "
         "workers; use data or file_or_data sharding"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_file_or_data(void **state)
{
    (void)state;
    static const struct rewrite_case cases[] = {
        {"lines(\"/d/*\")",
         SLUICE_SHARD_FILE_OR_DATA,
         2,
         1,
         {"/d/a", "/d/b", "/d/c", NULL},
         "lines(\"/d/b\")",
         NULL},
        /* Too few files: data sharding, as tf.data's AUTO policy falls back. */
        {"lines(\"/d/*\")",
         SLUICE_SHARD_FILE_OR_DATA,
         4,
         1,
         {"/d/a", "/d/b", "/d/c", NULL},
         "lines(\"/d/*\") | shard(4, 1)",
         NULL},
        {"range(7) | batch(2)",
         SLUICE_SHARD_FILE_OR_DATA,
         2,
         1,
         {NULL},
         "range(7) | batch(2) | shard(2, 1)",
         NULL},
        {"list(1, 2, 3)",
         SLUICE_SHARD_FILE_OR_DATA,
         3,
         0,
         {NULL},
         "list(1, 2, 3) | shard(3, 0)",
         NULL},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

/* The dynamic modes leave the pipeline exactly as it was, hints included. */
static void test_unsharded_modes(void **state)
{
    (void)state;
    static const struct rewrite_case cases[] = {
        {"range(10) | shard(SHARD_HINT, SHARD_HINT)",
         SLUICE_PARALLEL_EPOCHS,
         0,
         0,
         {NULL},
         "range(10) | shard(SHARD_HINT, SHARD_HINT)",
         NULL},
        {"lines(\"/d/*\") | repeat(2)",
         SLUICE_DISTRIBUTED_EPOCH,
         0,
         0,
         {NULL},
         "lines(\"/d/*\") | repeat(2)",
         NULL},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_bad_params(void **state)
{
    (void)state;
    static const struct rewrite_case cases[] = {
        {"range(10)",
         SLUICE_SHARD_DATA,
         0,
         0,
         {NULL},
         NULL,
         "static sharding needs a worker index below the number of workers, got index 0 of 0 "
         "workers"},
        {"range(10)",
         SLUICE_SHARD_HINT,
         2,
         2,
         {NULL},
         NULL,
         "static sharding needs a worker index below the number of workers, got index 2 of 2 "
         "workers"},
        {"lines(\"/d/*\")",
         SLUICE_SHARD_FILE,
         3,
         7,
         {"/d/a", NULL},
         NULL,
         "static sharding needs a worker index below the number of workers, got index 7 of 3 "
         "workers"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_needs_files(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        enum sluice_mode mode;
        bool want;
    } cases[] = {
        {"lines(\"/d/*\")", SLUICE_SHARD_FILE, true},
        {"tfrecord(\"/d/*\")", SLUICE_SHARD_FILE_OR_DATA, true},
        {"lines(\"/d/*\")", SLUICE_SHARD_DATA, false},
        {"lines(\"/d/*\")", SLUICE_SHARD_HINT, false},
        {"lines(\"/d/*\")", SLUICE_PARALLEL_EPOCHS, false},
        {"lines(\"/d/*\")", SLUICE_DISTRIBUTED_EPOCH, false},
        {"range(3)", SLUICE_SHARD_FILE, false},
        {"range(3)", SLUICE_SHARD_FILE_OR_DATA, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pipe_spec *in = pipeline_parse(cases[i].in);
        assert_int_equal(shard_needs_files(in, cases[i].mode), cases[i].want);
        pipe_spec_free(in);
    }
}

static void test_glob_escape(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"", ""},
        {"/plain/file.txt", "/plain/file.txt"},
        {"a*b", "a\\*b"},
        {"?[]\\", "\\?\\[]\\\\"},
        {"{x,y}~", "{x,y}~"}, /* braces and tilde mean nothing to glob() without flags */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = shard_glob_escape(cases[i].in);
        assert_non_null(got);
        assert_string_equal(got, cases[i].want);
        free(got);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data),
        cmocka_unit_test(test_hint),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_file_or_data),
        cmocka_unit_test(test_unsharded_modes),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_needs_files),
        cmocka_unit_test(test_glob_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
