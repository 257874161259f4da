/* jsonl(): every JSON value kind a field can hold, blank lines, line numbers across files and
 * through gzip and zstd, and every error with its exact message. Files live in a private
 * temporary directory removed after each test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/file.h"
#include "lib/pipeline.h"
#include "lib/tmp.h"

#include "common/error.h"
#include "pipeline/open.h"
#include "pipeline/registry.h"
#include "pipeline/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/sluice-test-jsonl-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tmp_remove(dir);
    return 0;
}

/* The text of a local run of `jsonl(FILES, FIELDS)`, "ERR message" at its end when it fails. */
static char *run_text(const char *args)
{
    char text[1024];
    snprintf(text, sizeof text, "jsonl(%s)", args);
    struct pipe_spec *spec = pipeline_parse(text);
    struct sluice_registry *reg = NULL;
    assert_int_equal(pipe_registry_new(&reg), 0);
    struct pipe_run *run = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    if (pipe_open(spec, reg, &run, err, sizeof err) != 0)
        fail_msg("%s: %s", text, err);
    char *out = pipeline_text(run, NULL);
    pipe_run_free(run);
    pipe_registry_free(reg);
    pipe_spec_free(spec);
    return out;
}

static void write_in(const char *name, const char *text)
{
    file_write_in(dir, name, text);
}

static void test_values(void **state)
{
    (void)state;
    write_in("a.jsonl",
             "{\"s\": \"h\\u00e9\", \"i\": -7, \"f\": 0.5, \"b\": true, \"n\": [1, 2],"
             " \"m\": [1, 2.5], \"t\": [\"x\", \"\"], \"e\": [], \"big\": 9007199254740993}\n"
             "   \n"
             "{\"s\": \"\", \"i\": 0, \"f\": 1e300, \"b\": false, \"n\": [], \"m\": [-0.0],"
             " \"t\": [], \"e\": [], \"big\": -1, \"extra\": {\"ignored\": null}}");
    char args[256];
    snprintf(args, sizeof args,
             "\"%s/a.jsonl\", \"s\", \"i\", \"f\", \"b\", \"n\", \"m\", \"t\", \"e\", \"big\"",
             dir);
    char *out = run_text(args);
    assert_string_equal(out, "(h\\xc3\\xa9, -7, 0.5, true, [1, 2], [1, 2.5], [x, ], [], "
                             "9007199254740993)\n"
                             "(, 0, 1e+300, false, [], [-0], [], [], -1)\n");
    free(out);
    /* One field: its value alone. */
    snprintf(args, sizeof args, "\"%s/a.jsonl\", \"i\"", dir);
    out = run_text(args);
    assert_string_equal(out, "-7\n0\n");
    free(out);
}

static void write_gzip(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, text, (unsigned)strlen(text)), (int)strlen(text));
    assert_int_equal(gzclose(g), Z_OK);
}

static void write_zstd(const char *name, const char *text)
{
    size_t cap = ZSTD_compressBound(strlen(text));
    uint8_t *z = malloc(cap);
    assert_non_null(z);
    size_t n = ZSTD_compress(z, cap, text, strlen(text), 3);
    assert_false(ZSTD_isError(n));
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    file_write(path, z, n);
    free(z);
}

/* Line numbers count from 1 in each file, blank lines included, through compression. */
static void test_errors_name_file_line_field(void **state)
{
    (void)state;
    write_in("1.jsonl", "{\"x\": 1}\n");
    write_gzip("2.jsonl", "{\"x\": 2}\n\n{\"x\": null}\n");
    write_zstd("3.jsonl", "{\"x\": 3}\n{\"y\": 3}\n");
    static const struct {
        const char *file, *field, *want;
    } cases[] = {
        {"2.jsonl", "x", "line 3: field \"x\": null"},
        {"3.jsonl", "x", "line 2: field \"x\": missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[256], want[512];
        snprintf(args, sizeof args, "[\"%s/1.jsonl\", \"%s/%s\"], \"%s\"", dir, dir, cases[i].file,
                 cases[i].field);
        snprintf(want, sizeof want, "%s/%s: %s", dir, cases[i].file, cases[i].want);
        char *out = run_text(args);
        const char *e = strstr(out, "ERR ");
        assert_non_null(e);
        assert_string_equal(e + 4, want);
        free(out);
    }
    write_in("bad.jsonl", "{\"x\": 1}\n{\"x\": \n");
    write_in("arr.jsonl", "[1, 2]\n");
    write_in("obj.jsonl", "{\"x\": {\"a\": 1}}\n");
    write_in("mix.jsonl", "{\"x\": [1, \"a\"]}\n");
    write_in("nest.jsonl", "{\"x\": [[1]]}\n");
    static const struct {
        const char *file, *want;
    } bad[] = {
        {"bad.jsonl", "line 2: not JSON: "},
        {"arr.jsonl", "line 1: not a JSON object"},
        {"obj.jsonl",
         "line 1: field \"x\": an object, expected a string, number, boolean or array"},
        {"mix.jsonl", "line 1: field \"x\": an array of mixed or nested values"},
        {"nest.jsonl", "line 1: field \"x\": an array of mixed or nested values"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[256], want[512];
        snprintf(args, sizeof args, "\"%s/%s\", \"x\"", dir, bad[i].file);
        snprintf(want, sizeof want, "ERR %s/%s: %s", dir, bad[i].file, bad[i].want);
        char *out = run_text(args);
        if (!strstr(out, want))
            fail_msg("%s: got %s, want %s", bad[i].file, out, want);
        free(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_name_file_line_field, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
