/* Peer-supplied names (src/common/names.c): name_check accepts exactly the valid, control-free
 * UTF-8 strings within the length bound and names the field and the first offending byte
 * otherwise; name_escape turns any bytes into valid, control-free UTF-8 with \xNN escapes,
 * leaves valid names unchanged, and cuts only between whole pieces. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/names.h"
#include "sluice/sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct check_case {
    const char *in;
    size_t max;
    const char *want; /* NULL: accepted */
};

static const struct check_case check_cases[] = {
    {"", 10, NULL},
    {"train", 10, NULL},
    {"a-b_c.d:5050", 20, NULL},
    {"caf\xc3\xa9", 10, NULL},      /* é, 2 bytes */
    {"\xe2\x82\xac", 10, NULL},     /* €, 3 bytes */
    {"\xf0\x9f\x98\x80", 10, NULL}, /* emoji, 4 bytes */
    {"\xf4\x8f\xbf\xbf", 10, NULL}, /* U+10FFFF, the last code point */
    {"\xc2\xa0", 10, NULL},         /* U+00A0, right after the C1 controls */
    {"0123456789", 10, NULL},       /* exactly the bound */
    {"01234567890", 10, "f: 11 bytes, longer than the limit of 10"},
    {"abc\xff", 10, "f: not valid UTF-8 at byte 3"},
    {"\x80", 10, "f: not valid UTF-8 at byte 0"},             /* a lone continuation byte */
    {"ab\xc3", 10, "f: not valid UTF-8 at byte 2"},           /* truncated sequence */
    {"ab\xc3x", 10, "f: not valid UTF-8 at byte 2"},          /* bad continuation */
    {"\xc0\xaf", 10, "f: not valid UTF-8 at byte 0"},         /* overlong '/' */
    {"\xe0\x80\xaf", 10, "f: not valid UTF-8 at byte 0"},     /* overlong, 3 bytes */
    {"\xed\xa0\x80", 10, "f: not valid UTF-8 at byte 0"},     /* a surrogate */
    {"\xf4\x90\x80\x80", 10, "f: not valid UTF-8 at byte 0"}, /* above U+10FFFF */
    {"\xf5\x80\x80\x80", 10, "f: not valid UTF-8 at byte 0"},
    {"host:1\nx", 10, "f: control character at byte 6"},
    {"\t", 10, "f: control character at byte 0"},
    {"a\x1f", 10, "f: control character at byte 1"},
    {"a\x7f", 10, "f: control character at byte 1"},
    {"ab\xc2\x85", 10, "f: control character at byte 2"}, /* U+0085, NEL */
    {"\xc2\x9f", 10, "f: control character at byte 0"},   /* U+009F, the last C1 */
    /* Bad bytes are reported before the length. */
    {"0123456789\xff", 10, "f: not valid UTF-8 at byte 10"},
};

static void test_check_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof check_cases / sizeof check_cases[0]; i++) {
        const struct check_case *c = &check_cases[i];
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc = name_check("f", c->in, c->max, err, sizeof err);
        if (!c->want) {
            if (rc != 0)
                fail_msg("case %zu: refused: %s", i, err);
            assert_false(name_needs_escape(c->in));
        } else {
            if (rc != SLUICE_ERR_INVALID)
                fail_msg("case %zu: accepted (rc %d)", i, rc);
            assert_string_equal(err, c->want);
        }
    }
}

static void test_check_field_names(void **state)
{
    (void)state;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(name_check("job name", "abc\xff", NAME_ID_MAX, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "job name: not valid UTF-8 at byte 3");
    assert_int_equal(name_check("worker address", "127.0.0\n.1:5", NAME_ADDR_MAX, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "worker address: control character at byte 7");
}

struct escape_case {
    const char *in, *want;
};

static const struct escape_case escape_cases[] = {
    {"", ""},
    {"plain", "plain"},
    {"caf\xc3\xa9", "caf\xc3\xa9"},
    {"abc\xff", "abc\\xff"},
    {"a\nb", "a\\x0ab"},
    {"\xc2\x85", "\\xc2\\x85"},
    {"\xc0\xaf", "\\xc0\\xaf"},
    {"\xe2\x82", "\\xe2\\x82"},
    {"x\x7f\x01y", "x\\x7f\\x01y"},
};

static void test_escape_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof escape_cases / sizeof escape_cases[0]; i++) {
        const struct escape_case *c = &escape_cases[i];
        char out[64];
        size_t need = name_escape(c->in, out, sizeof out);
        assert_string_equal(out, c->want);
        assert_int_equal(need, strlen(c->want));
        assert_false(name_needs_escape(out));
        char *dup = name_escape_dup(c->in);
        assert_non_null(dup);
        assert_string_equal(dup, c->want);
        free(dup);
        assert_int_equal(name_needs_escape(c->in), strcmp(c->in, c->want) != 0);
    }
}

/* Every byte value in every position escapes into something name_check accepts. */
static void test_escape_all_bytes(void **state)
{
    (void)state;
    for (int b = 1; b < 256; b++) {
        char in[4] = {'a', (char)b, 'z', 0};
        char out[16], err[SLUICE_ERRMSG_SIZE];
        name_escape(in, out, sizeof out);
        assert_int_equal(name_check("f", out, 100, err, sizeof err), 0);
    }
}

static void test_escape_truncates_whole_pieces(void **state)
{
    (void)state;
    char out[6];
    /* "ab" fits, "\xff" (4 bytes) would not: the output stops before it. */
    assert_int_equal(name_escape("ab\xff", out, sizeof out), 6);
    assert_string_equal(out, "ab");
    char one[1];
    assert_int_equal(name_escape("xyz", one, sizeof one), 3);
    assert_string_equal(one, "");
    char exact[4];
    assert_int_equal(name_escape("xyz", exact, sizeof exact), 3);
    assert_string_equal(exact, "xyz");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_table),
        cmocka_unit_test(test_check_field_names),
        cmocka_unit_test(test_escape_table),
        cmocka_unit_test(test_escape_all_bytes),
        cmocka_unit_test(test_escape_truncates_whole_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
