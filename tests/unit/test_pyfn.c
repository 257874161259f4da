/* py in the engine, without Python: the "module:function" syntax, the argument checks with
 * their exact messages, the failure of a process that installed no runtime, and, with a fake
 * runtime installed, one bind per op before its first element, calls with the bound state, an
 * unbind for every bind, and failures labelled with the target. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/iter.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/pyfn.h"
#include "pipeline/registry.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int uninstall(void **state)
{
    (void)state;
    sluice_python_runtime_install(NULL);
    return 0;
}

/* Runs text as a local run (sluice_local_*, the engine behind `sluice run`) to the end; its
 * int64 scalars go space-separated into out, a failure's message into err. Returns the last
 * result of sluice_local_next (0 or the failure), or the open's failure. */
static int run_ints(const char *text, char *out, size_t len, char *err, size_t errlen)
{
    struct sluice_local *run;
    int rc = sluice_local_open(text, NULL, 0, &run, err, errlen);
    if (rc)
        return rc;
    struct sluice_element *e = sluice_element_new();
    assert_non_null(e);
    size_t off = 0;
    out[0] = '\0';
    while ((rc = sluice_local_next(run, e, err, errlen)) == 1) {
        assert_int_equal(sluice_element_num_components(e), 1);
        const int64_t *v = sluice_element_data(e, 0, NULL);
        off += (size_t)snprintf(out + off, len - off, "%s%lld", off ? " " : "", (long long)*v);
        assert_true(off < len);
    }
    sluice_element_free(e);
    sluice_local_close(run);
    return rc;
}

static void test_split_target(void **state)
{
    (void)state;
    static const char *const good[][3] = {
        {"aug:flip", "aug", "flip"},
        {"pkg.sub_2:Flip.apply", "pkg.sub_2", "Flip.apply"},
        {"_m:_f", "_m", "_f"},
    };
    char module[PIPE_PY_TARGET_MAX + 1], function[PIPE_PY_TARGET_MAX + 1], err[SLUICE_ERRMSG_SIZE];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_int_equal(
            pipe_py_split_target(good[i][0], strlen(good[i][0]), module, function, err, sizeof err),
            0);
        assert_string_equal(module, good[i][1]);
        assert_string_equal(function, good[i][2]);
    }
    static const char *const bad[] = {"aug",  ":flip", "aug:",  "a::b", "a.:b",  "a:.b",
                                      "1a:b", "a b:c", "a:b-c", "",     "a:b:c", "a..b:c"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = pipe_py_split_target(bad[i], strlen(bad[i]), module, function, err, sizeof err);
        if (rc != SLUICE_ERR_INVALID)
            fail_msg("'%s' accepted", bad[i]);
        char want[128];
        snprintf(want, sizeof want, "expected \"module:function\", got \"%s\"", bad[i]);
        assert_string_equal(err, want);
    }
    char longest[PIPE_PY_TARGET_MAX + 1];
    memset(longest, 'a', sizeof longest);
    longest[1] = ':';
    assert_int_equal(
        pipe_py_split_target(longest, sizeof longest, module, function, err, sizeof err),
        SLUICE_ERR_INVALID);
    assert_int_equal(
        pipe_py_split_target(longest, PIPE_PY_TARGET_MAX, module, function, err, sizeof err), 0);
    assert_int_equal(strlen(function), PIPE_PY_TARGET_MAX - 2);
}

struct check_case {
    const char *text;
    const char *err; /* NULL when the check passes */
};

static void test_check_messages(void **state)
{
    (void)state;
    struct sluice_registry *reg;
    assert_int_equal(pipe_registry_new(&reg), 0);
    static const struct check_case cases[] = {
        {"range(3) | map(py, \"aug:flip\")", NULL},
        {"range(3) | filter(py, \"aug:keep\", 1, 2.5, \"x\", true)", NULL},
        {"range(3) | map(py)", "column 12: map(py) takes 1 to 17 arguments, got 0"},
        {"range(3) | map(py, 1)",
         "column 12: map(py): the first argument must be a string \"module:function\""},
        {"range(3) | filter(py, \"aug.flip\")",
         "column 12: filter(py): expected \"module:function\", got \"aug.flip\""},
        {"range(3) | map(py, \"aug:flip\", [1, 2])",
         "column 12: map(py): argument 2 must be a number, a string or a bool"},
        {"range(3) | map(py, \"a:b\", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)",
         "column 12: map(py) takes 1 to 17 arguments, got 18"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct check_case *c = &cases[i];
        char err[SLUICE_ERRMSG_SIZE] = "";
        struct pipe_spec *spec;
        assert_int_equal(pipe_parse(c->text, &spec, err, sizeof(err)), 0);
        int rc = pipe_registry_check(reg, spec, err, sizeof(err));
        if (!c->err && rc != 0)
            fail_msg("%s: unexpected error: %s", c->text, err);
        if (c->err && (rc != SLUICE_ERR_PARSE || strcmp(err, c->err) != 0))
            fail_msg("%s: got %d '%s', want '%s'", c->text, rc, err, c->err);
        pipe_spec_free(spec);
    }
    const struct pipe_fn *py = pipe_registry_find(reg, "py");
    assert_non_null(py);
    assert_int_equal(py->kind, PIPE_FN_BOTH);
    pipe_registry_free(reg);
}

static void test_without_runtime(void **state)
{
    (void)state;
    sluice_python_runtime_install(NULL);
    assert_false(pipe_py_available());
    char out[256], err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(run_ints("range(3) | map(py, \"aug:flip\")", out, sizeof out, err, sizeof err),
                     SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "map(py, \"aug:flip\"): this worker has no Python support");
    assert_int_equal(
        run_ints("range(3) | filter(py, \"aug:keep\", 1)", out, sizeof out, err, sizeof err),
        SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "filter(py, \"aug:keep\"): this worker has no Python support");
    /* Nothing binds before an element arrives. */
    assert_int_equal(run_ints("range(0) | map(py, \"aug:flip\")", out, sizeof out, err, sizeof err),
                     0);
    assert_string_equal(out, "");
    assert_int_equal(pipe_py_add_path("/x", err, sizeof err), SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "this worker has no Python support");
}

/* ---- A fake runtime ------------------------------------------------------------------------ */

/* "m:add" adds its first extra argument; "m:even" keeps even values; "m:fail" fails on 3;
 * anything else does not bind. */
struct fake_state {
    char function[32];
    int64_t k;
};

static int binds, unbinds, calls;
static char added_path[64];
/* What the last bind was confined to: whether it was, and its first directory. */
static bool bound_confined;
static char bound_dir[64];

static int fake_bind(const char *module, const char *function, const struct pipe_value *args,
                     size_t nargs, const struct pipe_roots *dirs, void **state, char *err,
                     size_t errlen)
{
    bound_confined = dirs != NULL;
    snprintf(bound_dir, sizeof bound_dir, "%s", dirs && dirs->n ? dirs->dirs[0] : "");
    if (strcmp(module, "m") != 0 ||
        (strcmp(function, "add") && strcmp(function, "even") && strcmp(function, "fail")))
        return err_set(err, errlen, SLUICE_ERR_FN, "no %s:%s", module, function);
    struct fake_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    snprintf(s->function, sizeof s->function, "%s", function);
    if (nargs > 0) {
        assert_int_equal(args[0].kind, PIPE_VAL_INT);
        s->k = args[0].i;
    }
    binds++;
    *state = s;
    return 0;
}

static void fake_unbind(void *state)
{
    unbinds++;
    free(state);
}

static int fake_map(void *state, struct sluice_element *e, const struct pipe_ctx *ctx, char *err,
                    size_t errlen)
{
    struct fake_state *s = state;
    int64_t *v = (int64_t *)(void *)e->t[0].data;
    calls++;
    if (strcmp(s->function, "fail") == 0 && *v == 3)
        return err_set(err, errlen, SLUICE_ERR_FN, "ValueError: three (m.py:2)");
    *v += s->k;
    return 0;
}

static int fake_filter(void *state, const struct sluice_element *e, const struct pipe_ctx *ctx,
                       int *keep, char *err, size_t errlen)
{
    calls++;
    *keep = *(const int64_t *)(const void *)e->t[0].data % 2 == 0;
    return 0;
}

static int fake_add_path(const char *dir, char *err, size_t errlen)
{
    snprintf(added_path, sizeof added_path, "%s", dir);
    return 0;
}

static const struct pipe_py_runtime fake = {fake_bind, fake_map, fake_filter, fake_unbind,
                                            fake_add_path};

static void test_fake_runtime(void **state)
{
    (void)state;
    sluice_python_runtime_install(&fake);
    assert_true(pipe_py_available());
    binds = unbinds = calls = 0;
    char out[256], err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(run_ints("range(6) | map(py, \"m:add\", 10) | filter(py, \"m:even\")", out,
                              sizeof out, err, sizeof err),
                     0);
    assert_string_equal(out, "10 12 14");
    /* One bind per op, not per element, and each undone when the run ends. */
    assert_int_equal(binds, 2);
    assert_int_equal(unbinds, 2);
    assert_int_equal(calls, 12);

    binds = unbinds = 0;
    assert_int_equal(run_ints("range(6) | map(py, \"m:fail\")", out, sizeof out, err, sizeof err),
                     SLUICE_ERR_FN);
    assert_string_equal(out, "0 1 2");
    assert_string_equal(err, "map(py, \"m:fail\"): ValueError: three (m.py:2)");
    assert_int_equal(binds, 1);
    assert_int_equal(unbinds, 1);

    binds = unbinds = 0;
    assert_int_equal(
        run_ints("range(6) | filter(py, \"m:none\")", out, sizeof out, err, sizeof err),
        SLUICE_ERR_FN);
    assert_string_equal(err, "filter(py, \"m:none\"): no m:none");
    assert_int_equal(binds, 0);
    assert_int_equal(unbinds, 0);

    assert_int_equal(pipe_py_add_path("/some/dir", err, sizeof err), 0);
    assert_string_equal(added_path, "/some/dir");
    sluice_python_runtime_install(NULL);
}

/* Runs text with reg and returns what its first next() returns (the message in err). */
static int first_of(const struct sluice_registry *reg, const char *text, char *err, size_t errlen)
{
    struct pipe_spec *spec = NULL;
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_parse(text, &spec, err, errlen), 0);
    assert_int_equal(pipe_open(spec, reg, &run, err, errlen), 0);
    struct sluice_element e;
    pipe_elem_init(&e);
    int rc = pipe_run_next(run, &e);
    if (rc < 0)
        snprintf(err, errlen, "%s", run->ctx.err);
    pipe_elem_release(&e);
    pipe_run_free(run);
    pipe_spec_free(spec);
    return rc;
}

/* A registry confined by pipe_registry_confine hands its python_path directories (resolved) to
 * the runtime; any other leaves py unconfined. */
static void test_confinement_reaches_the_runtime(void **state)
{
    (void)state;
    sluice_python_runtime_install(&fake);
    struct sluice_registry *reg;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_registry_new(&reg), 0);
    assert_null(pipe_registry_py_dirs(reg));
    assert_int_equal(first_of(reg, "range(3) | map(py, \"m:add\", 1)", err, sizeof err), 1);
    assert_false(bound_confined);

    const char *dirs[] = {"//./"};
    assert_int_equal(pipe_registry_confine(reg, NULL, dirs, 1, err, sizeof err), 0);
    assert_non_null(pipe_registry_py_dirs(reg));
    assert_false(pipe_roots_active(pipe_registry_roots(reg)));
    assert_int_equal(first_of(reg, "range(3) | map(py, \"m:add\", 1)", err, sizeof err), 1);
    assert_true(bound_confined);
    assert_string_equal(bound_dir, "/");

    /* No python_path at all: still confined, to nothing. */
    assert_int_equal(pipe_registry_confine(reg, NULL, NULL, 0, err, sizeof err), 0);
    assert_int_equal(first_of(reg, "range(3) | map(py, \"m:add\", 1)", err, sizeof err), 1);
    assert_true(bound_confined);
    assert_string_equal(bound_dir, "");
    pipe_registry_free(reg);
    sluice_python_runtime_install(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_target),
        cmocka_unit_test(test_check_messages),
        cmocka_unit_test_setup_teardown(test_without_runtime, NULL, uninstall),
        cmocka_unit_test_setup_teardown(test_fake_runtime, NULL, uninstall),
        cmocka_unit_test_setup_teardown(test_confinement_reaches_the_runtime, NULL, uninstall),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
