/* objurl.c: pinned URLs, URL roots as directories, glob literal prefixes and URL checks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pipeline/objurl.h"

#include <stdlib.h>
#include <string.h>

static void test_pin_round_trip(void **state)
{
    (void)state;
    char *s = NULL;
    assert_int_equal(obj_pin_format("s3://bkt/a#b/k.txt", 1234, "\"9b2c-3\"", &s), 0);
    assert_string_equal(s, "s3://bkt/a#b/k.txt#object=1234:%229b2c-3%22");
    struct obj_pin pin;
    obj_pin_parse(s, &pin);
    assert_true(pin.pinned);
    assert_int_equal(pin.url_len, strlen("s3://bkt/a#b/k.txt"));
    assert_int_equal(pin.size, 1234);
    assert_string_equal(pin.etag, "\"9b2c-3\"");
    free(s);
}

static void test_pin_refusals(void **state)
{
    (void)state;
    static const char *const unpinned[] = {
        "s3://bkt/k.txt",          "s3://bkt/k#object=",
        "s3://bkt/k#object=12",    "s3://bkt/k#object=x:abc",
        "s3://bkt/k#object=1:%2",  "s3://bkt/k#object=1:a/b",
        "s3://bkt/k#object=1:%00", "s3://bkt/k#object=99999999999999999999:a",
    };
    for (size_t i = 0; i < sizeof unpinned / sizeof unpinned[0]; i++) {
        struct obj_pin pin;
        obj_pin_parse(unpinned[i], &pin);
        assert_false(pin.pinned);
        assert_int_equal(pin.url_len, strlen(unpinned[i]));
    }
    struct obj_pin pin;
    obj_pin_parse("s3://bkt/k#object=0:", &pin);
    assert_true(pin.pinned);
    assert_int_equal(pin.size, 0);
    assert_string_equal(pin.etag, "");
}

static void test_within(void **state)
{
    (void)state;
    assert_true(obj_url_within("s3://b/allowed/x", "s3://b/allowed"));
    assert_true(obj_url_within("s3://b/allowed", "s3://b/allowed"));
    assert_false(obj_url_within("s3://b/allowedX/y", "s3://b/allowed"));
    assert_false(obj_url_within("s3://bb/x", "s3://b"));
    assert_true(obj_url_within("s3://b/allowed/x#object=1:a", "s3://b/allowed"));
}

static void test_glob_prefix(void **state)
{
    (void)state;
    assert_int_equal(obj_glob_prefix_len("data/part-*.txt"), 10);
    assert_int_equal(obj_glob_prefix_len("data/x?"), 6);
    assert_int_equal(obj_glob_prefix_len("[a]"), 0);
    assert_int_equal(obj_glob_prefix_len("plain/key"), 9);
}

static void test_url_check(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(obj_url_check("s3://bkt/k", err, sizeof err), 0);
    assert_true(obj_url_check("ftp://x/y", err, sizeof err) < 0);
    assert_string_equal(
        err, "ftp://x/y: unsupported URL scheme 'ftp' (expected s3://, https:// or http://)");
    assert_true(obj_url_check("s3://bkt/a/../b", err, sizeof err) < 0);
    assert_true(obj_url_check("s3://BK/k", err, sizeof err) < 0);
    assert_true(obj_url_check("https:///x", err, sizeof err) < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pin_round_trip), cmocka_unit_test(test_pin_refusals),
        cmocka_unit_test(test_within),         cmocka_unit_test(test_glob_prefix),
        cmocka_unit_test(test_url_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
