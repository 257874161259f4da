/* The dispatcher's merge of consumers' split coverage (src/dispatcher/coverage.c): reports are
 * checked with exact messages; a single complete report finishes its split without keeping an
 * entry; partial reports of several consumers finish a split only once some report carried the
 * end marker and their union covers every position; differing counts are corruption; entries go
 * with their split or their iteration. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "dispatcher/coverage.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- checking reports ------------------------------------------------------------------------ */

struct check_case {
    const char *name;
    uint64_t seq;
    bool ended;
    uint64_t total;
    uint64_t bounds[8];
    size_t nbounds;
    const char *expect; /* NULL: accepted */
};

static const struct check_case check_cases[] = {
    {"no ranges", 4, false, 0, {0}, 0, NULL},
    {"no ranges with an end marker", 4, true, 0, {0}, 0, NULL},
    {"one range", 4, false, 0, {0, 5}, 2, NULL},
    {"one range within the total", 4, true, 5, {0, 5}, 2, NULL},
    {"several sorted ranges", 4, true, 20, {1, 3, 5, 8, 10, 20}, 6, NULL},
    {"ranges touching", 4, false, 0, {0, 5, 5, 9}, 4, NULL},
    {"past the total is fine without an end marker", 4, false, 3, {0, 9}, 2, NULL},
    {"odd number of bounds",
     4,
     false,
     0,
     {0, 5, 7},
     3,
     "coverage of split 4: an odd number of bounds"},
    {"a single bound", 11, true, 5, {2}, 1, "coverage of split 11: an odd number of bounds"},
    {"empty range", 4, false, 0, {3, 3}, 2, "coverage of split 4: bad range [3, 3)"},
    {"inverted range", 4, false, 0, {0, 2, 7, 5}, 4, "coverage of split 4: bad range [7, 5)"},
    {"unsorted ranges", 4, false, 0, {5, 7, 1, 2}, 4, "coverage of split 4: bad range [1, 2)"},
    {"overlapping ranges", 4, false, 0, {0, 5, 4, 6}, 4, "coverage of split 4: bad range [4, 6)"},
    {"a range inside the one before",
     4,
     false,
     0,
     {0, 10, 2, 3},
     4,
     "coverage of split 4: bad range [2, 3)"},
    {"past the total", 9, true, 5, {0, 2, 3, 6}, 4, "coverage of split 9: bad range [3, 6)"},
    {"anything with total 0", 9, true, 0, {0, 1}, 2, "coverage of split 9: bad range [0, 1)"},
    {"huge values", UINT64_MAX - 1, true, UINT64_MAX, {0, UINT64_MAX}, 2, NULL},
};

static void test_check(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof check_cases / sizeof check_cases[0]; i++) {
        const struct check_case *c = &check_cases[i];
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc = coverage_check(c->seq, c->ended, c->total, c->bounds, c->nbounds, err, sizeof err);
        if (!c->expect) {
            if (rc != 0)
                fail_msg("case '%s': refused: %s", c->name, err);
            continue;
        }
        if (rc != SLUICE_ERR_INVALID)
            fail_msg("case '%s': rc %d", c->name, rc);
        if (strcmp(err, c->expect) != 0)
            fail_msg("case '%s': expected '%s', got '%s'", c->name, c->expect, err);
        /* No message buffer is fine too. */
        assert_int_equal(coverage_check(c->seq, c->ended, c->total, c->bounds, c->nbounds, NULL, 0),
                         SLUICE_ERR_INVALID);
    }
}

/* ---- merging --------------------------------------------------------------------------------- */

/* Merges a report and returns whether it completed the split; rc must be 0. */
static bool merge(struct coverage *c, uint64_t it, uint64_t seq, bool ended, uint64_t total,
                  const uint64_t *bounds, size_t nbounds)
{
    bool complete = true; /* coverage_merge sets it on every path */
    int rc = coverage_merge(c, it, seq, 1, ended, total, bounds, nbounds, &complete);
    if (rc != 0)
        fail_msg("merge of %" PRIu64 "/%" PRIu64 ": rc %d", it, seq, rc);
    return complete;
}

/* The entries, "1/3:end=6:[0,2) 2/3:[1,4)", to check what is kept. */
static const char *entries(const struct coverage *c, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < c->n; i++) {
        const struct coverage_entry *e = &c->v[i];
        int k = snprintf(buf + n, len - n, "%s%" PRIu64 "/%" PRIu64, i ? " " : "", e->iteration,
                         e->seq);
        assert_true(k >= 0 && (size_t)k < len - n);
        n += (size_t)k;
        if (e->ended) {
            k = snprintf(buf + n, len - n, ":end=%" PRIu64, e->total);
            assert_true(k >= 0 && (size_t)k < len - n);
            n += (size_t)k;
        }
        k = snprintf(buf + n, len - n, ":");
        n += (size_t)k;
        for (size_t r = 0; r < e->got.n; r++) {
            k = snprintf(buf + n, len - n, "[%" PRIu64 ",%" PRIu64 ")", e->got.v[r].begin,
                         e->got.v[r].end);
            assert_true(k >= 0 && (size_t)k < len - n);
            n += (size_t)k;
        }
    }
    return buf;
}

/* The common case: one consumer holds the whole split. */
static void test_single_complete_report(void **unused)
{
    (void)unused;
    struct coverage c;
    coverage_init(&c);
    char buf[256];
    assert_true(merge(&c, 1, 0, true, 5, (const uint64_t[]){0, 5}, 2));
    assert_int_equal(c.n, 0);
    /* An empty split: its end marker with count 0 is all of it. */
    assert_true(merge(&c, 1, 1, true, 0, NULL, 0));
    assert_int_equal(c.n, 0);
    /* All positions without the end marker: not finished, and kept. */
    assert_false(merge(&c, 1, 2, false, 0, (const uint64_t[]){0, 5}, 2));
    assert_string_equal(entries(&c, buf, sizeof buf), "1/2:[0,5)");
    /* Whole but in two touching ranges: finished (the entry stays until forgotten). */
    assert_true(merge(&c, 1, 3, true, 6, (const uint64_t[]){0, 4, 4, 6}, 4));
    assert_string_equal(entries(&c, buf, sizeof buf), "1/2:[0,5) 1/3:end=6:[0,6)");
    /* The end marker with a hole: not finished. */
    assert_false(merge(&c, 1, 4, true, 6, (const uint64_t[]){0, 2, 3, 6}, 4));
    assert_string_equal(entries(&c, buf, sizeof buf),
                        "1/2:[0,5) 1/3:end=6:[0,6) 1/4:end=6:[0,2)[3,6)");
    coverage_release(&c);
    assert_int_equal(c.n, 0);
    assert_null(c.v);
}

/* Two consumers of a shared job each received part of a split. */
static void test_two_consumers(void **unused)
{
    (void)unused;
    struct coverage c;
    coverage_init(&c);
    char buf[256];
    /* A got 0, 1, 4, 5; B got 2, 3: the union covers 0..5, but nobody saw the end yet. */
    const uint64_t a[] = {0, 2, 4, 6}, b[] = {2, 4};
    assert_false(merge(&c, 7, 3, false, 0, a, 4));
    assert_false(merge(&c, 7, 3, false, 0, b, 2));
    assert_string_equal(entries(&c, buf, sizeof buf), "7/3:[0,6)");
    /* Reports repeat with every heartbeat: merging one again changes nothing. */
    assert_false(merge(&c, 7, 3, false, 0, a, 4));
    assert_string_equal(entries(&c, buf, sizeof buf), "7/3:[0,6)");
    /* A then got the end marker: 6 elements. */
    assert_true(merge(&c, 7, 3, true, 6, a, 4));
    assert_string_equal(entries(&c, buf, sizeof buf), "7/3:end=6:[0,6)");

    /* The other order: the end marker first, with positions missing, then the rest. */
    const uint64_t a2[] = {4, 7}, b2[] = {0, 3}, b3[] = {0, 4};
    assert_false(merge(&c, 7, 5, true, 7, a2, 2));
    assert_false(merge(&c, 7, 5, false, 0, b2, 2));
    assert_string_equal(entries(&c, buf, sizeof buf), "7/3:end=6:[0,6) 7/5:end=7:[0,3)[4,7)");
    /* B's next heartbeat, without the end marker it never saw, closes the hole. */
    assert_true(merge(&c, 7, 5, false, 0, b3, 2));
    assert_string_equal(entries(&c, buf, sizeof buf), "7/3:end=6:[0,6) 7/5:end=7:[0,7)");

    /* Coverage past what any report said is never invented: 6 of 7 is not complete. */
    const uint64_t c1[] = {0, 6};
    assert_false(merge(&c, 7, 6, true, 7, c1, 2));
    coverage_release(&c);
}

/* The owner of a split's coverage: the one consumer that reported positions of it, or
 * COVERAGE_SHARED once another did too; reports without positions name nobody. */
static void test_owner(void **unused)
{
    (void)unused;
    struct coverage c;
    coverage_init(&c);
    bool complete;
    const uint64_t a[] = {0, 3}, b[] = {3, 5};
    assert_null(coverage_find(&c, 1, 4));
    assert_int_equal(coverage_merge(&c, 1, 4, 11, false, 0, NULL, 0, &complete), 0);
    assert_int_equal(coverage_find(&c, 1, 4)->owner, 0);
    assert_int_equal(coverage_merge(&c, 1, 4, 11, false, 0, a, 2, &complete), 0);
    assert_int_equal(coverage_find(&c, 1, 4)->owner, 11);
    assert_int_equal(coverage_merge(&c, 1, 4, 11, false, 0, a, 2, &complete), 0);
    assert_int_equal(coverage_find(&c, 1, 4)->owner, 11);
    /* An end marker alone from another consumer changes nothing. */
    assert_int_equal(coverage_merge(&c, 1, 4, 12, true, 9, NULL, 0, &complete), 0);
    assert_int_equal(coverage_find(&c, 1, 4)->owner, 11);
    assert_int_equal(coverage_merge(&c, 1, 4, 12, false, 0, b, 2, &complete), 0);
    const struct coverage_entry *e = coverage_find(&c, 1, 4);
    assert_int_equal(e->owner, COVERAGE_SHARED);
    assert_int_equal(e->got.n, 1);
    assert_int_equal(e->got.v[0].end, 5);
    assert_int_equal(coverage_merge(&c, 1, 4, 11, false, 0, a, 2, &complete), 0);
    assert_int_equal(coverage_find(&c, 1, 4)->owner, COVERAGE_SHARED);
    assert_null(coverage_find(&c, 2, 4));
    coverage_release(&c);
}

static void test_different_total(void **unused)
{
    (void)unused;
    struct coverage c;
    coverage_init(&c);
    char buf[256];
    bool complete = true;
    const uint64_t a[] = {0, 2}, b[] = {2, 7};
    assert_int_equal(coverage_merge(&c, 1, 9, 1, true, 6, a, 2, &complete), 0);
    assert_false(complete);
    complete = true;
    assert_int_equal(coverage_merge(&c, 1, 9, 1, true, 7, b, 2, &complete), SLUICE_ERR_CORRUPT);
    assert_false(complete);
    /* The entry keeps what it had. */
    assert_string_equal(entries(&c, buf, sizeof buf), "1/9:end=6:[0,2)");
    /* A report without the end marker says nothing about the count. */
    const uint64_t mid[] = {2, 3}, rest[] = {3, 6};
    assert_int_equal(coverage_merge(&c, 1, 9, 1, false, 7, mid, 2, &complete), 0);
    assert_false(complete);
    assert_string_equal(entries(&c, buf, sizeof buf), "1/9:end=6:[0,3)");
    /* The same count again is fine. */
    assert_int_equal(coverage_merge(&c, 1, 9, 1, true, 6, rest, 2, &complete), 0);
    assert_true(complete);
    coverage_release(&c);
}

/* Entries are per (iteration, seq), kept sorted, and go with their split or their iteration. */
static void test_forget(void **unused)
{
    (void)unused;
    struct coverage c;
    coverage_init(&c);
    char buf[1024];
    const uint64_t part[] = {0, 1};
    /* More entries than the initial capacity, in scrambled order. */
    static const uint64_t keys[][2] = {{2, 5}, {1, 9}, {3, 0}, {1, 2}, {2, 1}, {1, 5},
                                       {3, 7}, {2, 3}, {1, 0}, {2, 9}, {3, 3}, {1, 7},
                                       {2, 0}, {3, 9}, {1, 1}, {2, 2}, {3, 1}, {1, 3}};
    size_t nkeys = sizeof keys / sizeof keys[0];
    for (size_t i = 0; i < nkeys; i++)
        assert_false(merge(&c, keys[i][0], keys[i][1], false, 0, part, 2));
    assert_int_equal(c.n, nkeys);
    assert_string_equal(entries(&c, buf, sizeof buf),
                        "1/0:[0,1) 1/1:[0,1) 1/2:[0,1) 1/3:[0,1) 1/5:[0,1) 1/7:[0,1) 1/9:[0,1) "
                        "2/0:[0,1) 2/1:[0,1) 2/2:[0,1) 2/3:[0,1) 2/5:[0,1) 2/9:[0,1) "
                        "3/0:[0,1) 3/1:[0,1) 3/3:[0,1) 3/7:[0,1) 3/9:[0,1)");
    /* The same seq in another iteration is another split. */
    const uint64_t more[] = {1, 3};
    assert_false(merge(&c, 2, 5, false, 0, more, 2));
    assert_string_equal(entries(&c, buf, sizeof buf) + strlen("1/0:[0,1) 1/1:[0,1) 1/2:[0,1) "
                                                              "1/3:[0,1) "),
                        "1/5:[0,1) 1/7:[0,1) 1/9:[0,1) "
                        "2/0:[0,1) 2/1:[0,1) 2/2:[0,1) 2/3:[0,1) 2/5:[0,3) 2/9:[0,1) "
                        "3/0:[0,1) 3/1:[0,1) 3/3:[0,1) 3/7:[0,1) 3/9:[0,1)");

    coverage_forget(&c, 2, 5);
    coverage_forget(&c, 2, 5); /* twice: nothing */
    coverage_forget(&c, 2, 4); /* unknown: nothing */
    coverage_forget(&c, 4, 0);
    coverage_forget(&c, 1, 0); /* the first */
    coverage_forget(&c, 3, 9); /* the last */
    assert_string_equal(entries(&c, buf, sizeof buf),
                        "1/1:[0,1) 1/2:[0,1) 1/3:[0,1) 1/5:[0,1) 1/7:[0,1) 1/9:[0,1) "
                        "2/0:[0,1) 2/1:[0,1) 2/2:[0,1) 2/3:[0,1) 2/9:[0,1) "
                        "3/0:[0,1) 3/1:[0,1) 3/3:[0,1) 3/7:[0,1)");

    coverage_forget_iteration(&c, 2);
    assert_string_equal(entries(&c, buf, sizeof buf),
                        "1/1:[0,1) 1/2:[0,1) 1/3:[0,1) 1/5:[0,1) 1/7:[0,1) 1/9:[0,1) "
                        "3/0:[0,1) 3/1:[0,1) 3/3:[0,1) 3/7:[0,1)");
    coverage_forget_iteration(&c, 9); /* unknown: nothing */
    assert_int_equal(c.n, 10);
    coverage_forget_iteration(&c, 1);
    assert_string_equal(entries(&c, buf, sizeof buf), "3/0:[0,1) 3/1:[0,1) 3/3:[0,1) 3/7:[0,1)");

    /* A forgotten split's coverage starts anew: what was merged before is gone. */
    coverage_forget(&c, 3, 1);
    const uint64_t tail[] = {1, 2};
    assert_false(merge(&c, 3, 1, true, 2, tail, 2));
    assert_string_equal(entries(&c, buf, sizeof buf),
                        "3/0:[0,1) 3/1:end=2:[1,2) 3/3:[0,1) 3/7:[0,1)");
    coverage_forget_iteration(&c, 3);
    assert_int_equal(c.n, 0);
    /* Empty and still usable. */
    assert_false(merge(&c, 5, 5, false, 0, part, 2));
    assert_int_equal(c.n, 1);
    coverage_release(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),         cmocka_unit_test(test_single_complete_report),
        cmocka_unit_test(test_two_consumers), cmocka_unit_test(test_different_total),
        cmocka_unit_test(test_owner),         cmocka_unit_test(test_forget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
