/* The function registry: registration rules, pipeline checks with their exact messages,
 * argument accessors, and plugins loaded by path. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/text.h"

#include "common/error.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PLUGIN_PATH SLUICE_PLUGIN_DIR "/plugin_test.so"

static int setup(void **state)
{
    struct sluice_registry *reg;
    if (pipe_registry_new(&reg) != 0)
        return -1;
    *state = reg;
    return 0;
}

static int teardown(void **state)
{
    pipe_registry_free(*state);
    return 0;
}

static int dummy_map(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                     char *err, size_t errlen)
{
    return 0;
}

static int dummy_filter(const struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                        int *keep, char *err, size_t errlen)
{
    *keep = 1;
    return 0;
}

/* Runs text to the end and writes its int64 scalars, space-separated, into out. */
static int run_ints(const struct sluice_registry *reg, const char *text, char *out, size_t len,
                    char *err, size_t errlen)
{
    struct pipe_spec *spec;
    int rc = pipe_parse(text, &spec, err, errlen);
    if (rc)
        return rc;
    struct pipe_run *run;
    rc = pipe_open(spec, reg, &run, err, errlen);
    pipe_spec_free(spec);
    if (rc)
        return rc;
    struct sluice_element e;
    pipe_elem_init(&e);
    size_t off = 0;
    out[0] = '\0';
    while ((rc = pipe_run_next(run, &e)) == 1) {
        assert_int_equal(e.n, 1);
        assert_int_equal(e.t[0].dtype, SLUICE_INT64);
        off += (size_t)snprintf(out + off, len - off, "%s%lld", off ? " " : "",
                                (long long)*(int64_t *)(void *)e.t[0].data);
        assert_true(off < len);
    }
    if (rc < 0)
        snprintf(err, errlen, "%s", run->ctx.err);
    pipe_elem_release(&e);
    pipe_run_free(run);
    return rc;
}

static void test_builtins_present(void **state)
{
    const struct sluice_registry *reg = *state;
    static const char *const maps[] = {"square",   "add",      "mul",     "mod",
                                       "identity", "sleep_us", "wait_us", "bytes"};
    static const char *const filters[] = {"even", "odd", "lt", "ge"};
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        const struct pipe_fn *fn = pipe_registry_find(reg, maps[i]);
        assert_non_null(fn);
        assert_int_equal(fn->kind, PIPE_FN_MAP);
        assert_non_null(fn->map);
    }
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
        const struct pipe_fn *fn = pipe_registry_find(reg, filters[i]);
        assert_non_null(fn);
        assert_int_equal(fn->kind, PIPE_FN_FILTER);
        assert_non_null(fn->filter);
    }
    assert_null(pipe_registry_find(reg, "nope"));
    const struct pipe_fn *add = pipe_registry_find(reg, "add");
    assert_int_equal(add->min_args, 1);
    assert_int_equal(add->max_args, 1);
}

static void test_register_rules(void **state)
{
    struct sluice_registry *reg = *state;
    assert_int_equal(sluice_register_map(reg, "add", 1, 1, dummy_map, NULL), SLUICE_ERR_EXISTS);
    assert_int_equal(sluice_register_filter(reg, "even", 0, 0, dummy_filter, NULL),
                     SLUICE_ERR_EXISTS);
    assert_int_equal(sluice_register_map(reg, "", 0, 0, dummy_map, NULL), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_register_map(reg, "two words", 0, 0, dummy_map, NULL),
                     SLUICE_ERR_INVALID);
    assert_int_equal(sluice_register_map(reg, "f", 2, 1, dummy_map, NULL), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_register_map(reg, "f", 0, 0, NULL, NULL), SLUICE_ERR_INVALID);
    char name[80];
    memset(name, 'a', 64);
    name[64] = '\0';
    assert_int_equal(sluice_register_map(reg, name, 0, 0, dummy_map, NULL), SLUICE_ERR_INVALID);
    name[63] = '\0';
    assert_int_equal(sluice_register_map(reg, name, 0, 0, dummy_map, NULL), 0);
    assert_non_null(pipe_registry_find(reg, name));
    /* A variadic function (max < 0) and its arity message. */
    assert_int_equal(sluice_register_filter(reg, "any_of", 1, -1, dummy_filter, NULL), 0);
    assert_int_equal(pipe_registry_set_check(reg, "missing", NULL), SLUICE_ERR_NOT_FOUND);
}

struct check_case {
    const char *text;
    const char *err; /* NULL when the check passes */
};

static void test_check_messages(void **state)
{
    struct sluice_registry *reg = *state;
    assert_int_equal(sluice_register_filter(reg, "any_of", 1, -1, dummy_filter, NULL), 0);
    assert_int_equal(sluice_register_map(reg, "pick", 1, 3, dummy_map, NULL), 0);
    static const struct check_case cases[] = {
        {"range(10) | map(add, 1) | filter(even)", NULL},
        {"range(10) | map(foo)", "column 13: unknown function 'foo'"},
        {"range(10) | map(even)", "column 13: 'even' is a filter function, not a map function"},
        {"range(3) | filter(add, 1)", "column 12: 'add' is a map function, not a filter function"},
        {"range(10) | map(add)", "column 13: map(add) takes 1 argument, got 0"},
        {"range(10) | map(add, 1, 2)", "column 13: map(add) takes 1 argument, got 2"},
        {"range(10) | map(square, 1)", "column 13: map(square) takes no arguments, got 1"},
        {"range(10) | filter(any_of)",
         "column 13: filter(any_of) takes at least 1 argument, got 0"},
        {"range(10) | filter(any_of, 1, 2, 3, 4)", NULL},
        {"range(10) | map(pick)", "column 13: map(pick) takes 1 to 3 arguments, got 0"},
        {"range(10) | map(mod, 0)", "column 13: map(mod): K must not be zero"},
        {"range(10) | map(mod, 0.0)", "column 13: map(mod): K must not be zero"},
        {"range(10) | map(mod, -2.5)", NULL},
        {"range(10) | map(add, \"x\")", "column 13: map(add): K must be a number"},
        {"range(10) | filter(lt, true)", "column 13: filter(lt): K must be a number"},
        {"range(10) | map(sleep_us, -1)",
         "column 13: map(sleep_us): N must be an integer from 0 to 60000000"},
        {"range(10) | map(sleep_us, 1099511627776)",
         "column 13: map(sleep_us): N must be an integer from 0 to 60000000"},
        {"range(10) | map(sleep_us, 60000000)", NULL},
        {"range(10) | map(wait_us, -1)",
         "column 13: map(wait_us): N must be an integer from 0 to 60000000"},
        {"range(10) | map(wait_us, 60000000)", NULL},
        {"range(10) | map(bytes, 1073741825)",
         "column 13: map(bytes): N must be an integer from 0 to 1073741824"},
        {"range(10) | map(bytes, 1.5)",
         "column 13: map(bytes): N must be an integer from 0 to 1073741824"},
        {"range(10) | map(add, 1) | batch(2) | map(foo)", "column 38: unknown function 'foo'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct check_case *c = &cases[i];
        char err[SLUICE_ERRMSG_SIZE] = "";
        struct pipe_spec *spec;
        assert_int_equal(pipe_parse(c->text, &spec, err, sizeof(err)), 0);
        int rc = pipe_registry_check(reg, spec, err, sizeof(err));
        if (!c->err) {
            if (rc != 0)
                fail_msg("%s: unexpected error: %s", c->text, err);
        } else {
            if (rc != SLUICE_ERR_PARSE || strcmp(err, c->err) != 0)
                fail_msg("%s: got %d '%s', want '%s'", c->text, rc, err, c->err);
            /* pipe_open checks the same way before building anything. */
            struct pipe_run *run = NULL;
            char err2[SLUICE_ERRMSG_SIZE] = "";
            assert_int_equal(pipe_open(spec, reg, &run, err2, sizeof(err2)), SLUICE_ERR_PARSE);
            assert_null(run);
            assert_string_equal(err2, c->err);
        }
        pipe_spec_free(spec);
    }
}

static void test_fn_args(void **state)
{
    char s[] = "hi";
    struct pipe_value v[3] = {
        {.kind = PIPE_VAL_INT, .i = -7},
        {.kind = PIPE_VAL_FLOAT, .f = 2.5},
        {.kind = PIPE_VAL_BYTES, .s = s, .slen = 2},
    };
    struct sluice_fn_args args = {v, 3};
    assert_int_equal(sluice_fn_args_count(&args), 3);
    int64_t i = 0;
    double f = 0;
    const char *str = NULL;
    size_t len = 0;
    assert_int_equal(sluice_fn_arg_int(&args, 0, &i), 0);
    assert_int_equal(i, -7);
    assert_int_equal(sluice_fn_arg_float(&args, 0, &f), 0);
    assert_true(f == -7.0);
    assert_int_equal(sluice_fn_arg_float(&args, 1, &f), 0);
    assert_true(f == 2.5);
    assert_int_equal(sluice_fn_arg_int(&args, 1, &i), SLUICE_ERR_TYPE);
    assert_int_equal(sluice_fn_arg_string(&args, 2, &str, &len), 0);
    assert_string_equal(str, "hi");
    assert_int_equal(len, 2);
    assert_int_equal(sluice_fn_arg_string(&args, 0, &str, &len), SLUICE_ERR_TYPE);
    assert_int_equal(sluice_fn_arg_float(&args, 2, &f), SLUICE_ERR_TYPE);
    assert_int_equal(sluice_fn_arg_int(&args, 3, &i), SLUICE_ERR_INVALID);
}

/* Cancels a run after a tenth of a second, from another thread. */
static void *cancel_later(void *arg)
{
    usleep(100000);
    pipe_run_cancel(arg);
    return NULL;
}

/* sleep_us(N) and wait_us(N) notice the chain's cancellation: one minute of work per element
 * gives up with "map(NAME): cancelled" soon after the cancel, well before its minute is up. */
static void check_cancelled(struct sluice_registry *reg, const char *name)
{
    char err[SLUICE_ERRMSG_SIZE] = "", text[128], want[64];
    snprintf(text, sizeof text, "range(5) | map(%s, 60000000)", name);
    snprintf(want, sizeof want, "map(%s): cancelled", name);
    struct pipe_spec *spec;
    assert_int_equal(pipe_parse(text, &spec, err, sizeof(err)), 0);
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof(err)), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_later, run), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct sluice_element e;
    pipe_elem_init(&e);
    assert_int_equal(pipe_run_next(run, &e), SLUICE_ERR_CANCELLED);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_string_equal(run->ctx.err, want);
    assert_int_equal(pthread_join(t, NULL), 0);
    /* Generous on a loaded machine: the element alone would take 60 s. */
    assert_true(t1.tv_sec - t0.tv_sec < 30);
    pipe_elem_release(&e);
    pipe_run_free(run);
    pipe_spec_free(spec);
}

static void test_sleep_us_cancelled(void **state)
{
    check_cancelled(*state, "sleep_us");
    check_cancelled(*state, "wait_us");
}

/* Writes a ustar archive at path with one member per name, each holding its name as data. */
static void write_tar(const char *path, const char *const *names, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) {
        unsigned char h[512] = {0};
        size_t len = strlen(names[i]);
        memcpy(h, names[i], len);
        memcpy(h + 100, "0000644", 7);
        memcpy(h + 108, "0000000", 7);
        memcpy(h + 116, "0000000", 7);
        snprintf((char *)h + 124, 12, "%011o", (unsigned)len);
        memcpy(h + 136, "00000000000", 11);
        h[156] = '0';
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int k = 0; k < 512; k++)
            sum += h[k];
        snprintf((char *)h + 148, 8, "%06o", sum);
        h[155] = ' ';
        unsigned char data[512] = {0};
        memcpy(data, names[i], len);
        assert_int_equal(fwrite(h, 1, 512, f), 512);
        assert_int_equal(fwrite(data, 1, 512, f), 512);
    }
    unsigned char end[1024] = {0};
    assert_int_equal(fwrite(end, 1, sizeof end, f), sizeof end);
    assert_int_equal(fclose(f), 0);
}

/* File sources notice a cancelled chain between files (lines, tfrecord) and between members
 * (tar), where long runs can pass without an element: a run cancelled before its first element
 * ends with "cancelled", while the same run not cancelled yields its elements. */
static void test_file_sources_cancelled(void **state)
{
    struct sluice_registry *reg = *state;
    char dir[] = "/tmp/sluice-cancel-XXXXXX", path[128], text[512], err[SLUICE_ERRMSG_SIZE] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/a.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("one\ntwo\n", f);
    assert_int_equal(fclose(f), 0);
    static const char *const members[] = {"k1.jpg", "k1.cls", "k2.jpg", "k2.cls"};
    snprintf(path, sizeof path, "%s/s.tar", dir);
    write_tar(path, members, 4);

    const char *fmt[] = {"lines(\"%s/*.txt\")", "tar(\"%s/*.tar\", \"jpg\", \"cls\")"};
    for (int k = 0; k < 2; k++) {
        text_format(text, sizeof text, fmt[k], dir);
        for (int cancel = 0; cancel < 2; cancel++) {
            struct pipe_spec *spec;
            assert_int_equal(pipe_parse(text, &spec, err, sizeof(err)), 0);
            struct pipe_run *run = NULL;
            if (pipe_open(spec, reg, &run, err, sizeof(err)) != 0)
                fail_msg("%s: %s", text, err);
            if (cancel)
                pipe_run_cancel(run);
            struct sluice_element e;
            pipe_elem_init(&e);
            int rc = pipe_run_next(run, &e);
            if (cancel) {
                assert_int_equal(rc, SLUICE_ERR_CANCELLED);
                assert_string_equal(run->ctx.err, "cancelled");
            } else if (rc != 1) {
                fail_msg("%s: %d %s", text, rc, run->ctx.err);
            }
            pipe_elem_release(&e);
            pipe_run_free(run);
            pipe_spec_free(spec);
        }
    }
    snprintf(path, sizeof path, "%s/a.txt", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/s.tar", dir);
    unlink(path);
    rmdir(dir);
}

static void test_plugin_runs(void **state)
{
    struct sluice_registry *reg = *state;
    char err[SLUICE_ERRMSG_SIZE] = "", out[256];
    assert_int_equal(run_ints(reg, "range(-3, 3) | filter(positive) | map(negate)", out,
                              sizeof(out), err, sizeof(err)),
                     SLUICE_ERR_PARSE);
    assert_string_equal(err, "column 16: unknown function 'positive'");

    int rc = pipe_registry_load_plugin(reg, PLUGIN_PATH, err, sizeof(err));
    if (rc)
        fail_msg("load: %s", err);
    assert_non_null(pipe_registry_find(reg, "negate"));
    assert_int_equal(pipe_registry_find(reg, "positive")->kind, PIPE_FN_FILTER);
    assert_int_equal(run_ints(reg, "range(-3, 3) | filter(positive) | map(negate)", out,
                              sizeof(out), err, sizeof(err)),
                     0);
    assert_string_equal(out, "-1 -2");
    /* Plugin functions are checked like built-ins. */
    assert_int_equal(run_ints(reg, "range(3) | map(negate, 1)", out, sizeof(out), err, sizeof(err)),
                     SLUICE_ERR_PARSE);
    assert_string_equal(err, "column 12: map(negate) takes no arguments, got 1");
    /* A plugin's failure reaches the pipeline's error with the function's name. */
    assert_int_equal(
        run_ints(reg, "list([1, 2]) | map(negate)", out, sizeof(out), err, sizeof(err)), -22);
    assert_string_equal(err, "map(negate): expected an int64 scalar");
}

static void test_plugin_clash_rolls_back(void **state)
{
    struct sluice_registry *reg = *state;
    char err[SLUICE_ERRMSG_SIZE] = "", out[256];
    assert_int_equal(pipe_registry_load_plugin(reg, PLUGIN_PATH, err, sizeof(err)), 0);
    /* Loading it again clashes on its first name; nothing of the second load remains. */
    assert_int_equal(pipe_registry_load_plugin(reg, PLUGIN_PATH, err, sizeof(err)),
                     SLUICE_ERR_PLUGIN);
    assert_string_equal(err, "plugin " PLUGIN_PATH ": function 'negate' is already registered");
    assert_int_equal(
        run_ints(reg, "range(-1, 2) | map(negate)", out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "1 0 -1");
}

static void test_plugin_errors(void **state)
{
    struct sluice_registry *reg = *state;
    char err[SLUICE_ERRMSG_SIZE] = "";
    const char *missing = SLUICE_PLUGIN_DIR "/no_such_plugin.so";
    assert_int_equal(pipe_registry_load_plugin(reg, missing, err, sizeof(err)), SLUICE_ERR_PLUGIN);
    char want[1024];
    snprintf(want, sizeof(want),
             "cannot load plugin: %s: cannot open shared object file: No such file or directory",
             missing);
    assert_string_equal(err, want);

    /* A real shared object without the init function: the C math library. */
    assert_int_equal(pipe_registry_load_plugin(reg, "libm.so.6", err, sizeof(err)),
                     SLUICE_ERR_PLUGIN);
    assert_string_equal(err, "plugin libm.so.6: no sluice_plugin_init function");
    assert_null(pipe_registry_find(reg, "negate"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_builtins_present, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sleep_us_cancelled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_sources_cancelled, setup, teardown),
        cmocka_unit_test(test_fn_args),
        cmocka_unit_test_setup_teardown(test_plugin_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plugin_clash_rolls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plugin_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
