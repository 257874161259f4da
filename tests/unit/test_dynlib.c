/* dynlib_open: a library that loads fills the table with its functions; one that cannot be
 * loaded, or that lacks a function, is a one-line error naming what needs it and why.
 * dynlib_load does it once, and says the same thereafter. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "common/dynlib.h"
#include "sluice/sluice.h"

struct libc_api {
    __typeof__(strlen) *len;
    __typeof__(snprintf) *print;
};

static void test_resolves_every_function(void **state)
{
    (void)state;
    static const struct dynlib_fn fns[] = {
        DYNLIB_FN(struct libc_api, len, strlen),
        DYNLIB_FN(struct libc_api, print, snprintf),
    };
    struct libc_api api = {0};
    char err[256] = "";
    assert_int_equal(dynlib_open("libc.so.6", "strings", fns, 2, &api, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(api.len("seven"), 5);
    char buf[16];
    assert_int_equal(api.print(buf, sizeof buf, "%d-%s", 42, "x"), 4);
    assert_string_equal(buf, "42-x");
}

static void test_missing_library(void **state)
{
    (void)state;
    static const struct dynlib_fn fns[] = {DYNLIB_FN(struct libc_api, len, strlen)};
    struct libc_api api = {0};
    char err[512];
    assert_int_equal(dynlib_open("libsluice-none.so.9", "widgets", fns, 1, &api, err, sizeof err),
                     SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "widgets need libsluice-none.so.9, which cannot be loaded: "
                             "libsluice-none.so.9: cannot open shared object file: No such file "
                             "or directory");
    assert_null(api.len);
}

static void test_missing_function(void **state)
{
    (void)state;
    static const struct dynlib_fn fns[] = {
        DYNLIB_FN(struct libc_api, len, strlen),
        {"sluice_no_such_function", offsetof(struct libc_api, print)},
    };
    struct libc_api api = {0};
    char err[512];
    assert_int_equal(dynlib_open("libc.so.6", "widgets", fns, 2, &api, err, sizeof err),
                     SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "widgets need libc.so.6, which has no sluice_no_such_function");
    assert_null(api.print);
}

/* dynlib_load opens a library once: later calls give the first outcome, failure included. */
static void test_load_once(void **state)
{
    (void)state;
    static const struct dynlib_fn fns[] = {DYNLIB_FN(struct libc_api, len, strlen)};
    struct libc_api api = {0};
    struct dynlib lib = DYNLIB_INIT("libc.so.6", "strings", fns, &api);
    char err[256] = "";
    assert_int_equal(dynlib_load(&lib, err, sizeof err), 0);
    assert_int_equal(api.len("four"), 4);
    api.len = NULL;
    assert_int_equal(dynlib_load(&lib, err, sizeof err), 0);
    assert_null(api.len); /* not resolved again */
    assert_string_equal(err, "");

    struct libc_api none = {0};
    struct dynlib missing = DYNLIB_INIT("libsluice-none.so.9", "widgets", fns, &none);
    for (int i = 0; i < 2; i++) {
        char why[512] = "";
        assert_int_equal(dynlib_load(&missing, why, sizeof why), SLUICE_ERR_UNSUPPORTED);
        assert_string_equal(why, "widgets need libsluice-none.so.9, which cannot be loaded: "
                                 "libsluice-none.so.9: cannot open shared object file: No such "
                                 "file or directory");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolves_every_function),
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_missing_function),
        cmocka_unit_test(test_load_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
