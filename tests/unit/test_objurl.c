/* objurl.c: pinned URLs, URL roots as directories, glob literal prefixes and URL checks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pipeline/objurl.h"

#include "common/error.h"

#include <stdio.h>

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

/* A page of a listing: its entries' keys, sizes and ETags, and its continuation token. */
static void test_list_parse(void **state)
{
    (void)state;
    static const char page[] =
        "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
        "<Contents><Key>a/x&amp;y.txt</Key><Size>12</Size><ETag>&quot;e1&quot;</ETag></Contents>"
        "<Contents><Key>a/z</Key><Size>0</Size></Contents>"
        "<NextContinuationToken>tok+1/=</NextContinuationToken></ListBucketResult>";
    struct obj_entry *e = NULL;
    size_t n = 0, cap = 0;
    char *next = NULL, err[256];
    assert_int_equal(obj_list_parse(page, strlen(page), &e, &n, &cap, &next, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(e[0].key, "a/x&y.txt");
    assert_int_equal(e[0].size, 12);
    assert_string_equal(e[0].etag, "\"e1\"");
    assert_string_equal(e[1].key, "a/z");
    assert_int_equal(e[1].size, 0);
    assert_string_equal(e[1].etag, "");
    assert_string_equal(next, "tok+1/=");
    free(next);
    obj_entries_free(e, n);
}

/* Hostile or cut listings: each refused with its reason, never a partial page taken whole. */
static void test_list_hostile(void **state)
{
    (void)state;
    static const struct {
        const char *xml;
        const char *err;
    } cases[] = {
        {"", "the answer is not a bucket listing"},
        {"<Error><Code>AccessDenied</Code></Error>", "the answer is not a bucket listing"},
        {"<ListBucketResult><Contents><Key>a</Key><Size>1</Size>", "a listing entry is cut short"},
        {"<ListBucketResult><Contents><Key>a</Key><Size>1</Si", "a listing entry is cut short"},
        {"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
         "a listing entry without Key or Size"},
        {"<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",
         "a listing entry without Key or Size"},
        {"<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
         "a listing entry's Size: '-1'"},
        {"<ListBucketResult><Contents><Key>a</Key><Size>1e3</Size></Contents></ListBucketResult>",
         "a listing entry's Size: '1e3'"},
        {"<ListBucketResult><Contents><Key>a</Key><Size></Size></Contents></ListBucketResult>",
         "a listing entry's Size: ''"},
        {"<ListBucketResult><Contents><Key>a</Key><Size>99999999999999999999999</Size>"
         "</Contents></ListBucketResult>",
         "a listing entry's Size: '99999999999999999999999'"},
        {"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
         "a truncated listing without NextContinuationToken"},
        {"<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>"
         "</NextContinuationToken></ListBucketResult>",
         "a truncated listing without NextContinuationToken"},
        {"<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>abc",
         "a truncated listing without NextContinuationToken"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct obj_entry *e = NULL;
        size_t n = 0, cap = 0;
        char *next = NULL, err[256] = "";
        int rc = obj_list_parse(cases[i].xml, strlen(cases[i].xml), &e, &n, &cap, &next, err,
                                sizeof err);
        if (rc == 0 || strcmp(err, cases[i].err) != 0)
            fprintf(stderr, "case %zu: rc %d, err '%s'\n", i, rc, err);
        assert_int_equal(rc, SLUICE_ERR_PROTOCOL);
        assert_string_equal(err, cases[i].err);
        assert_null(next);
        obj_entries_free(e, n);
    }
}

/* The text of an error answer: code and message, else the first line, cut and cleaned. */
static void test_error_text(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        const char *text;
    } cases[] = {
        {"<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>"
         "</Error>",
         "NoSuchKey: The specified key does not exist."},
        {"<Error><Code>SlowDown</Code></Error>", "SlowDown"},
        {"<Error><Message>only a message</Message></Error>", "only a message"},
        {"", ""},
        {"Service Unavailable\nmore", "Service Unavailable"},
        {"<Error><Code>Slow", "<Error><Code>Slow"},
        {"bad\x01\x7f bytes\tand  tabs", "bad bytes and tabs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[128];
        obj_error_text(cases[i].body, strlen(cases[i].body), out, sizeof out);
        if (strcmp(out, cases[i].text) != 0)
            fprintf(stderr, "case %zu: '%s'\n", i, out);
        assert_string_equal(out, cases[i].text);
    }
    /* Cut to fit, never past the buffer. */
    char small[8];
    obj_error_text("<Error><Code>AVeryLongCode</Code></Error>", 40, small, sizeof small);
    assert_string_equal(small, "AVeryLo");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pin_round_trip), cmocka_unit_test(test_pin_refusals),
        cmocka_unit_test(test_within),         cmocka_unit_test(test_glob_prefix),
        cmocka_unit_test(test_url_check),      cmocka_unit_test(test_list_parse),
        cmocka_unit_test(test_list_hostile),   cmocka_unit_test(test_error_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
