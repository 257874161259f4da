/* Worker labels and label selectors (src/common/labels.c): label_check and labels_canonical accept
 * exactly the valid labels and say what is wrong with the others; selector_parse accepts the
 * Kubernetes forms, refuses malformed text with the exact message, and its canonical text parses
 * back to itself; selector_matches gives each operator its meaning. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/labels.h"
#include "sluice/sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct label_case {
    const char *in;
    const char *want; /* NULL: accepted */
};

static const struct label_case label_cases[] = {
    {"pool=bigmem", NULL},
    {"pool=", NULL}, /* an empty value */
    {"zone=caf\xc3\xa9", NULL},
    {"a.b/c-d_e=f.g", NULL},
    {"pool", "expected KEY=VALUE"},
    {"=a", "empty key"},
    {"po ol=a", "key: ' ' is not allowed at byte 2"},
    {"pool=a=b", "value: '=' is not allowed at byte 1"},
    {"pool=a,b", "value: ',' is not allowed at byte 1"},
    {"p(=a", "key: '(' is not allowed at byte 1"},
    {"pool=x)", "value: ')' is not allowed at byte 1"},
    {"!pool=a", "key: '!' is not allowed at byte 0"},
    {"pool=a\tb", "value: ' ' is not allowed at byte 1"},
    {"po\x01ol=a", "key: control character at byte 2"},
    {"pool=\xff", "value: not valid UTF-8 at byte 0"},
    {"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk=a",
     "key: 64 bytes, longer than the limit of 63"},
    {"k=vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv", NULL}, /* 63 */
    {"k=vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv",
     "value: 64 bytes, longer than the limit of 63"},
};

static void test_label_check(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof label_cases / sizeof label_cases[0]; i++) {
        const struct label_case *c = &label_cases[i];
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc = label_check(c->in, err, sizeof err);
        if (!c->want) {
            if (rc != 0)
                fail_msg("label %zu refused: %s", i, err);
        } else {
            assert_int_equal(rc, SLUICE_ERR_INVALID);
            assert_string_equal(err, c->want);
        }
    }
}

static void test_labels_canonical(void **state)
{
    (void)state;
    char out[LABELS_TEXT_MAX + 1], err[SLUICE_ERRMSG_SIZE];
    const char *l1[] = {"zone=a", "pool=bigmem", "gpu=", "p=x"};
    assert_int_equal(labels_canonical(l1, 4, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "gpu=,p=x,pool=bigmem,zone=a");
    assert_int_equal(labels_count(out), 4);
    assert_int_equal(labels_canonical(NULL, 0, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "");
    assert_int_equal(labels_count(out), 0);

    const char *v;
    size_t vlen;
    assert_true(labels_get("gpu=,p=x,pool=bigmem,zone=a", "pool", &v, &vlen));
    assert_int_equal(vlen, 6);
    assert_memory_equal(v, "bigmem", 6);
    assert_true(labels_get("gpu=,p=x,pool=bigmem,zone=a", "gpu", &v, &vlen));
    assert_int_equal(vlen, 0);
    assert_false(labels_get("gpu=,p=x,pool=bigmem,zone=a", "poo", &v, &vlen));
    assert_false(labels_get("gpu=,p=x,pool=bigmem,zone=a", "zone=a", &v, &vlen));
    assert_false(labels_get("", "pool", &v, &vlen));

    const char *dup[] = {"pool=a", "zone=b", "pool=c"};
    assert_int_equal(labels_canonical(dup, 3, out, sizeof out, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "label key pool given twice");
    const char *bad[] = {"pool=a", "zone"};
    assert_int_equal(labels_canonical(bad, 2, out, sizeof out, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "label 2: expected KEY=VALUE");
    const char *many[LABELS_MAX + 1];
    char bufs[LABELS_MAX + 1][16];
    for (size_t i = 0; i <= LABELS_MAX; i++) {
        snprintf(bufs[i], sizeof bufs[i], "k%zu=v", i);
        many[i] = bufs[i];
    }
    assert_int_equal(labels_canonical(many, LABELS_MAX, out, sizeof out, err, sizeof err), 0);
    assert_int_equal(labels_count(out), LABELS_MAX);
    assert_int_equal(labels_canonical(many, LABELS_MAX + 1, out, sizeof out, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "more than 16 labels");
    assert_int_equal(labels_canonical(l1, 4, out, 10, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "labels: longer than the buffer");
}

struct parse_case {
    const char *in;
    const char *want; /* the canonical text, or the error when err is true */
    bool err;
};

static const struct parse_case parse_cases[] = {
    {"", "", false},
    {"   ", "", false},
    {"pool=bigmem", "pool=bigmem", false},
    {"pool==bigmem", "pool=bigmem", false},
    {" pool = bigmem , zone != a ", "pool=bigmem,zone!=a", false},
    {"zone in (a, b ,c)", "zone in (a,b,c)", false},
    {"zone in(a)", "zone in (a)", false},
    {"zone notin (a,b)", "zone notin (a,b)", false},
    {"gpu", "gpu", false},
    {"!gpu", "!gpu", false},
    {"! gpu,ssd,pool=", "!gpu,ssd,pool=", false},
    {"in", "in", false}, /* a key named in */
    {"pool=a,", "empty requirement at byte 7", true},
    {"pool=a,,zone=b", "empty requirement at byte 7", true},
    {",", "empty requirement at byte 0", true},
    {"=a", "expected a label key at byte 0", true},
    {"!", "expected a label key at byte 1", true},
    {"!=a", "expected a label key at byte 1", true},
    {"pool a", "expected '=', '!=', 'in' or 'notin' at byte 5", true},
    {"pool!a", "expected '=', '!=', 'in' or 'notin' at byte 4", true},
    {"pool(a)", "expected '=', '!=', 'in' or 'notin' at byte 4", true},
    {"pool inn (a)", "expected '=', '!=', 'in' or 'notin' at byte 5", true},
    {"pool in a", "expected '(' at byte 8", true},
    {"pool in (a b)", "expected ',' or ')' at byte 11", true},
    {"pool in (a", "expected ',' or ')' at byte 10", true},
    {"pool in ()", "expected a value at byte 9", true},
    {"pool in (a,)", "expected a value at byte 11", true},
    {"pool=a b", "expected ',' at byte 7", true},
    {"!gpu=a", "expected ',' at byte 4", true},
    {"pool in (a) x", "expected ',' at byte 12", true},
    {"pool=a)", "expected ',' at byte 6", true},
    {"po\x01ol=a", "key at byte 0: control character at byte 2", true},
    {"pool=\xc3", "value at byte 5: not valid UTF-8 at byte 0", true},
    {"pool in (a,\xff)", "value at byte 11: not valid UTF-8 at byte 0", true},
    {"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk",
     "key at byte 0: 64 bytes, longer than the limit of 63", true},
};

static void test_selector_parse(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
        const struct parse_case *c = &parse_cases[i];
        struct selector sel, again;
        char err[SLUICE_ERRMSG_SIZE] = "", canon[SELECTOR_TEXT_MAX + 1], canon2[sizeof canon];
        int rc = selector_parse(c->in, &sel, err, sizeof err);
        if (c->err) {
            if (rc != SLUICE_ERR_INVALID)
                fail_msg("case %zu (%s) accepted", i, c->in);
            assert_string_equal(err, c->want);
            continue;
        }
        if (rc != 0)
            fail_msg("case %zu (%s) refused: %s", i, c->in, err);
        size_t n = selector_format(&sel, canon, sizeof canon);
        assert_int_equal(n, strlen(c->want));
        assert_string_equal(canon, c->want);
        assert_int_equal(selector_parse(canon, &again, err, sizeof err), 0);
        selector_format(&again, canon2, sizeof canon2);
        assert_string_equal(canon2, canon);
    }
}

static void test_selector_limits(void **state)
{
    (void)state;
    struct selector sel;
    char err[SLUICE_ERRMSG_SIZE], text[2048];
    /* 16 requirements pass, 17 do not. */
    size_t len = 0;
    for (int i = 0; i < SELECTOR_REQS_MAX; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%sk%d", i ? "," : "", i);
    assert_int_equal(selector_parse(text, &sel, err, sizeof err), 0);
    assert_int_equal(sel.n, SELECTOR_REQS_MAX);
    snprintf(text + len, sizeof text - len, ",k99");
    assert_int_equal(selector_parse(text, &sel, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "more than 16 requirements");
    /* 16 values pass, 17 do not. */
    len = (size_t)snprintf(text, sizeof text, "k in (");
    for (int i = 0; i < LABEL_SET_MAX; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%sv%d", i ? "," : "", i);
    snprintf(text + len, sizeof text - len, ")");
    assert_int_equal(selector_parse(text, &sel, err, sizeof err), 0);
    assert_int_equal(sel.req[0].nvalues, LABEL_SET_MAX);
    snprintf(text + len, sizeof text - len, ",v99)");
    assert_int_equal(selector_parse(text, &sel, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "more than 16 values at byte 60");
    /* The text's bound. */
    memset(text, 'a', 1024);
    text[1024] = '\0';
    assert_int_equal(selector_parse(text, &sel, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "longer than the limit of 1023 bytes");
    /* The canonical text's bound: "k in(v)" grows by a space when formatted. 16 requirements of
     * "kNN in(" + V values bytes + ")" and 15 commas: 16 * (8 + V) + 15 bytes, 16 more canonical.
     * V = 54: 1007 bytes, 1023 canonical; V = 55: 1023 bytes, 1039 canonical. */
    for (int v = 54; v <= 55; v++) {
        char vals[64];
        memset(vals, 'v', (size_t)v);
        vals[v] = '\0';
        len = 0;
        for (int i = 0; i < SELECTOR_REQS_MAX; i++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%sk%02d in(%s)", i ? "," : "",
                                    i, vals);
        assert_int_equal(len, (size_t)(16 * (8 + v) + 15));
        int rc = selector_parse(text, &sel, err, sizeof err);
        if (v == 54) {
            assert_int_equal(rc, 0);
            assert_int_equal(selector_format(&sel, NULL, 0), SELECTOR_TEXT_MAX);
        } else {
            assert_int_equal(rc, SLUICE_ERR_INVALID);
            assert_string_equal(err, "longer than the limit of 1023 bytes");
        }
    }
}

struct match_case {
    const char *sel;
    const char *labels; /* canonical */
    bool want;
};

static const struct match_case match_cases[] = {
    {"", "", true},
    {"", "pool=a", true},
    {"pool=a", "pool=a", true},
    {"pool=a", "pool=ab", false},
    {"pool=a", "pool=", false},
    {"pool=", "pool=", true},
    {"pool=a", "", false},
    {"pool=a", "p=a,zone=a", false},
    {"pool!=a", "pool=a", false},
    {"pool!=a", "pool=b", true},
    {"pool!=a", "", true},
    {"pool in (a,b)", "pool=b", true},
    {"pool in (a,b)", "pool=c", false},
    {"pool in (a,b)", "zone=a", false},
    {"pool notin (a,b)", "pool=b", false},
    {"pool notin (a,b)", "pool=c", true},
    {"pool notin (a,b)", "", true},
    {"gpu", "gpu=,pool=a", true},
    {"gpu", "pool=a", false},
    {"!gpu", "gpu=,pool=a", false},
    {"!gpu", "pool=a", true},
    {"pool=a,zone in (x,y),!gpu", "pool=a,zone=y", true},
    {"pool=a,zone in (x,y),!gpu", "gpu=1,pool=a,zone=y", false},
    {"pool=a,zone in (x,y),!gpu", "pool=a,zone=z", false},
};

static void test_selector_matches(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof match_cases / sizeof match_cases[0]; i++) {
        const struct match_case *c = &match_cases[i];
        struct selector sel;
        char err[SLUICE_ERRMSG_SIZE];
        assert_int_equal(selector_parse(c->sel, &sel, err, sizeof err), 0);
        if (selector_matches(&sel, c->labels) != c->want)
            fail_msg("case %zu: %s on %s: expected %s", i, c->sel, c->labels,
                     c->want ? "a match" : "no match");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_check),      cmocka_unit_test(test_labels_canonical),
        cmocka_unit_test(test_selector_parse),   cmocka_unit_test(test_selector_limits),
        cmocka_unit_test(test_selector_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
