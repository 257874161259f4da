/* The pure path logic of data roots (src/pipeline/roots.h): lexical normalization, the
 * component-wise "within" check and the literal directory part of a glob. The checks that ask
 * the file system (symbolic links, globs) are in tests/integration/test_confine.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pipeline/roots.h"
#include "sluice/sluice.h"

#include <stdio.h>
#include <string.h>

static void test_normalize(void **state)
{
    (void)state;
    static const struct {
        const char *cwd, *path, *want;
    } cases[] = {
        {NULL, "/", "/"},
        {NULL, "/srv/data", "/srv/data"},
        {NULL, "/srv/data/", "/srv/data"},
        {NULL, "/srv/data///", "/srv/data"},
        {NULL, "//srv//data//a.txt", "/srv/data/a.txt"},
        {NULL, "/srv/./data/./a.txt", "/srv/data/a.txt"},
        {NULL, "/srv/data/.", "/srv/data"},
        {NULL, "/srv/data/..", "/srv"},
        {NULL, "/srv/data/../secret.txt", "/srv/secret.txt"},
        {NULL, "/srv/data/../../etc/shadow", "/etc/shadow"},
        {NULL, "/..", "/"},
        {NULL, "/../../etc", "/etc"},
        {NULL, "/srv/data/sub/../../data2/x", "/srv/data2/x"},
        {NULL, "/srv/..data/x", "/srv/..data/x"},
        {NULL, "/srv/.../x", "/srv/.../x"},
        {NULL, "/srv/.hidden", "/srv/.hidden"},
        {"/home/u", "a.txt", "/home/u/a.txt"},
        {"/home/u/", "./data//a.txt", "/home/u/data/a.txt"},
        {"/home/u", "../v/a.txt", "/home/v/a.txt"},
        {"/home/u", "../../../../x", "/x"},
        {"/home/u", ".", "/home/u"},
        {"/home/./u/..", "w", "/home/w"},
        {"/", "x", "/x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[256];
        int rc = pipe_path_normalize(cases[i].cwd, cases[i].path, out, sizeof out);
        if (rc != 0 || strcmp(out, cases[i].want) != 0)
            fprintf(stderr, "case %zu: %s + %s: rc %d, got %s, want %s\n", i,
                    cases[i].cwd ? cases[i].cwd : "(none)", cases[i].path, rc, rc == 0 ? out : "-",
                    cases[i].want);
        assert_int_equal(rc, 0);
        assert_string_equal(out, cases[i].want);
    }
}

static void test_normalize_failures(void **state)
{
    (void)state;
    char out[16];
    assert_int_equal(pipe_path_normalize(NULL, "", out, sizeof out), SLUICE_ERR_INVALID);
    assert_int_equal(pipe_path_normalize(NULL, "a.txt", out, sizeof out), SLUICE_ERR_INVALID);
    assert_int_equal(pipe_path_normalize("rel", "a.txt", out, sizeof out), SLUICE_ERR_INVALID);
    /* 15 characters and the NUL fit; 16 do not. */
    assert_int_equal(pipe_path_normalize(NULL, "/abcdefghijklmn", out, sizeof out), 0);
    assert_string_equal(out, "/abcdefghijklmn");
    assert_int_equal(pipe_path_normalize(NULL, "/abcdefghijklmno", out, sizeof out),
                     SLUICE_ERR_TOO_LARGE);
    /* What does not fit on the way may still end short. */
    assert_int_equal(pipe_path_normalize(NULL, "/abcdefghij/klmnopq/../..", out, sizeof out),
                     SLUICE_ERR_TOO_LARGE);
    assert_int_equal(pipe_path_normalize(NULL, "/x", out, 1), SLUICE_ERR_TOO_LARGE);
}

static void test_within(void **state)
{
    (void)state;
    static const struct {
        const char *path, *root;
        bool want;
    } cases[] = {
        {"/data", "/data", true},
        {"/data/a.txt", "/data", true},
        {"/data/sub/deeper/a.txt", "/data", true},
        {"/data2", "/data", false},
        {"/data2/a.txt", "/data", false},
        {"/dat", "/data", false},
        {"/data.txt", "/data", false},
        {"/srv/data", "/srv/data/sub", false},
        {"/etc/shadow", "/srv/data", false},
        {"/", "/data", false},
        {"/anything/at/all", "/", true},
        {"/", "/", true},
        {"relative/data", "/", false},
        {"/srv/data-old/a", "/srv/data", false},
        {"/srv/data/a", "/srv/data-old", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (pipe_path_within(cases[i].path, cases[i].root) != cases[i].want)
            fprintf(stderr, "case %zu: %s within %s: want %d\n", i, cases[i].path, cases[i].root,
                    cases[i].want);
        assert_int_equal(pipe_path_within(cases[i].path, cases[i].root), cases[i].want);
    }
}

static void test_roots_contain(void **state)
{
    (void)state;
    char a[] = "/srv/data", b[] = "/mnt/shards";
    char *dirs[] = {a, b};
    struct pipe_roots r = {dirs, 2};
    assert_true(pipe_roots_active(&r));
    assert_true(pipe_roots_contain(&r, "/srv/data/x"));
    assert_true(pipe_roots_contain(&r, "/mnt/shards"));
    assert_false(pipe_roots_contain(&r, "/srv/data2/x"));
    assert_false(pipe_roots_contain(&r, "/mnt"));
    struct pipe_roots none = {NULL, 0};
    assert_false(pipe_roots_active(&none));
    assert_false(pipe_roots_active(NULL));
    assert_false(pipe_roots_contain(&none, "/srv/data/x"));
}

static void test_glob_dir_len(void **state)
{
    (void)state;
    static const struct {
        const char *glob, *want;
    } cases[] = {
        {"/srv/data/*.txt", "/srv/data"},
        {"/srv/data/a.txt", "/srv/data"},
        {"/srv/data/", "/srv/data"},
        {"/srv/data//x?.txt", "/srv/data"},
        {"/srv/*/a.txt", "/srv"},
        {"/srv/d[ab]ta/a.txt", "/srv"},
        {"/srv/da\\*ta/a.txt", "/srv"},
        {"/x", "/"},
        {"/*", "/"},
        {"//x", "/"},
        {"*.txt", ""},
        {"a.txt", ""},
        {"data/*.txt", "data"},
        {"../data/*.txt", "../data"},
        {"/srv/data/../*", "/srv/data/.."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = pipe_glob_dir_len(cases[i].glob);
        if (n != strlen(cases[i].want) || strncmp(cases[i].glob, cases[i].want, n) != 0)
            fprintf(stderr, "case %zu: %s: got %.*s, want %s\n", i, cases[i].glob, (int)n,
                    cases[i].glob, cases[i].want);
        assert_int_equal(n, strlen(cases[i].want));
        if (n > 0 && strcmp(cases[i].want, "/") != 0)
            assert_memory_equal(cases[i].glob, cases[i].want, n);
    }
}

static void test_source_name(void **state)
{
    (void)state;
    assert_string_equal(pipe_source_name(PIPE_SRC_LINES), "lines");
    assert_string_equal(pipe_source_name(PIPE_SRC_TFRECORD), "tfrecord");
    assert_string_equal(pipe_source_name(PIPE_SRC_TAR), "tar");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize),    cmocka_unit_test(test_normalize_failures),
        cmocka_unit_test(test_within),       cmocka_unit_test(test_roots_contain),
        cmocka_unit_test(test_glob_dir_len), cmocka_unit_test(test_source_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
