/* A consumer's ledger of received (split, position) pairs (src/client/ledger.c): which elements
 * are new and up to where, split end markers and their counts, completion, the dispatcher's
 * confirmations moving splits to the done set, a split re-issued after its worker died keeping
 * only the positions not received yet, and empty splits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "client/ledger.h"
#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Asserts is_new's answer and, when new, its limit. */
static void expect_new(const struct ledger *l, uint64_t seq, uint64_t pos, uint64_t limit)
{
    uint64_t got = 12345;
    if (!ledger_is_new(l, seq, pos, &got))
        fail_msg("(%" PRIu64 ", %" PRIu64 ") is not new", seq, pos);
    if (got != limit)
        fail_msg("(%" PRIu64 ", %" PRIu64 "): limit %" PRIu64 ", not %" PRIu64, seq, pos, got,
                 limit);
}

static void expect_old(const struct ledger *l, uint64_t seq, uint64_t pos)
{
    uint64_t got = 12345;
    if (ledger_is_new(l, seq, pos, &got))
        fail_msg("(%" PRIu64 ", %" PRIu64 ") is new", seq, pos);
}

/* The entries' seqs, "3 5 9", to check the ledger keeps one sorted entry per split. */
static const char *entries(const struct ledger *l, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        int k = snprintf(buf + n, len - n, "%s%" PRIu64, i ? " " : "", l->v[i].seq);
        assert_true(k >= 0 && (size_t)k < len - n);
        n += (size_t)k;
    }
    return buf;
}

static void test_is_new_and_limit(void **unused)
{
    (void)unused;
    struct ledger l;
    ledger_init(&l);
    /* Nothing received: everything is new, with no limit. */
    expect_new(&l, 0, 0, UINT64_MAX);
    expect_new(&l, 3, 100, UINT64_MAX);

    assert_int_equal(ledger_add(&l, 3, 0, 5), 0);
    assert_int_equal(ledger_add(&l, 3, 8, 10), 0);
    assert_int_equal(l.received, 7);
    for (uint64_t pos = 0; pos < 5; pos++)
        expect_old(&l, 3, pos);
    expect_new(&l, 3, 5, 8);
    expect_new(&l, 3, 7, 8);
    expect_old(&l, 3, 8);
    expect_old(&l, 3, 9);
    expect_new(&l, 3, 10, UINT64_MAX);
    expect_new(&l, 3, 1000, UINT64_MAX);
    /* Other splits are unaffected. */
    expect_new(&l, 2, 0, UINT64_MAX);
    expect_new(&l, 4, 3, UINT64_MAX);
    assert_false(ledger_complete(&l, 3));

    /* An empty or inverted range records nothing and makes no entry. */
    assert_int_equal(ledger_add(&l, 6, 4, 4), 0);
    assert_int_equal(ledger_add(&l, 6, 5, 2), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.received, 7);
    ledger_release(&l);
    assert_int_equal(l.n, 0);
    assert_null(l.v);
}

/* Entries stay one per split, sorted by seq, whatever the order splits arrive in. */
static void test_entries_sorted(void **unused)
{
    (void)unused;
    struct ledger l;
    ledger_init(&l);
    static const uint64_t order[] = {9, 3, 40, 0, 5, 3, 17, 9, 1, 33, 2, 20, 21, 22, 23, 24, 25};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        assert_int_equal(ledger_add(&l, order[i], i, i + 1), 0);
    char buf[256];
    assert_string_equal(entries(&l, buf, sizeof buf), "0 1 2 3 5 9 17 20 21 22 23 24 25 33 40");
    /* Each kept its own positions: seq 3 got 1 and 5, seq 9 got 0 and 7. */
    expect_old(&l, 3, 1);
    expect_old(&l, 3, 5);
    expect_new(&l, 3, 2, 5);
    expect_old(&l, 9, 7);
    expect_new(&l, 9, 1, 7);
    expect_old(&l, 25, 16);
    expect_new(&l, 25, 0, 16);
    ledger_release(&l);
}

static void test_end_and_complete(void **unused)
{
    (void)unused;
    struct ledger l;
    ledger_init(&l);
    assert_int_equal(ledger_add(&l, 4, 0, 3), 0);
    assert_int_equal(ledger_add(&l, 4, 6, 8), 0);
    assert_int_equal(ledger_end(&l, 4, 10), 0);
    assert_false(ledger_complete(&l, 4));
    /* The end bounds the limit and refuses positions past it. */
    expect_new(&l, 4, 3, 6);
    expect_new(&l, 4, 8, 10);
    expect_old(&l, 4, 10);
    expect_old(&l, 4, 11);
    /* The same count again is fine; another count is corruption and changes nothing. */
    assert_int_equal(ledger_end(&l, 4, 10), 0);
    assert_int_equal(ledger_end(&l, 4, 11), SLUICE_ERR_CORRUPT);
    assert_int_equal(ledger_end(&l, 4, 0), SLUICE_ERR_CORRUPT);
    assert_true(l.v[0].ended);
    assert_int_equal(l.v[0].total, 10);
    expect_new(&l, 4, 9, 10);

    assert_int_equal(ledger_add(&l, 4, 3, 6), 0);
    assert_false(ledger_complete(&l, 4));
    assert_int_equal(ledger_add(&l, 4, 8, 10), 0);
    assert_true(ledger_complete(&l, 4));
    assert_int_equal(l.received, 10);

    /* All positions without the end marker is not complete: the count is unknown. */
    assert_int_equal(ledger_add(&l, 5, 0, 10), 0);
    assert_false(ledger_complete(&l, 5));
    /* An end marker first, elements after (the marker of a re-issued split can overtake). */
    assert_int_equal(ledger_end(&l, 6, 2), 0);
    assert_false(ledger_complete(&l, 6));
    expect_new(&l, 6, 0, 2);
    assert_int_equal(ledger_add(&l, 6, 0, 2), 0);
    assert_true(ledger_complete(&l, 6));
    /* A split never seen is not complete. */
    assert_false(ledger_complete(&l, 7));
    ledger_release(&l);
}

/* An empty split: its end marker with count 0 completes it, and no element of it is new. */
static void test_empty_split(void **unused)
{
    (void)unused;
    struct ledger l;
    ledger_init(&l);
    assert_int_equal(ledger_end(&l, 8, 0), 0);
    assert_true(ledger_complete(&l, 8));
    expect_old(&l, 8, 0);
    assert_int_equal(ledger_end(&l, 8, 1), SLUICE_ERR_CORRUPT);
    assert_int_equal(l.received, 0);
    assert_int_equal(l.n, 1);
    ledger_release(&l);
}

static void test_confirmed(void **unused)
{
    (void)unused;
    struct ledger l;
    ledger_init(&l);
    assert_int_equal(ledger_add(&l, 1, 0, 4), 0);
    assert_int_equal(ledger_end(&l, 1, 4), 0);
    assert_int_equal(ledger_add(&l, 2, 0, 2), 0);
    assert_int_equal(ledger_add(&l, 3, 0, 1), 0);
    assert_int_equal(l.received, 7);

    /* Split 1 (complete here) and 7 (never seen) are confirmed; the list may be unsorted and
     * repeat itself. */
    const uint64_t seqs[] = {7, 1, 7};
    assert_int_equal(ledger_confirmed(&l, seqs, 3), 0);
    char buf[64];
    assert_string_equal(entries(&l, buf, sizeof buf), "2 3");
    assert_true(ranges_contains(&l.done, 1));
    assert_true(ranges_contains(&l.done, 7));
    assert_int_equal(ranges_count(&l.done), 2);
    assert_true(ledger_complete(&l, 1));
    assert_true(ledger_complete(&l, 7));

    /* Elements of done splits are dropped: never new, and adding them is a no-op. */
    expect_old(&l, 1, 0);
    expect_old(&l, 1, 4);
    expect_old(&l, 7, 0);
    assert_int_equal(ledger_add(&l, 7, 0, 5), 0);
    assert_int_equal(ledger_end(&l, 7, 5), 0);
    assert_int_equal(ledger_end(&l, 1, 99), 0); /* a done split's marker is not checked */
    assert_string_equal(entries(&l, buf, sizeof buf), "2 3");
    assert_int_equal(l.received, 7);

    /* A partial split confirmed (another consumer of a shared job got the rest) is done too. */
    const uint64_t two = 2;
    assert_int_equal(ledger_confirmed(&l, &two, 1), 0);
    assert_string_equal(entries(&l, buf, sizeof buf), "3");
    expect_old(&l, 2, 5);
    assert_true(ledger_complete(&l, 2));
    /* Confirming again, or nothing, changes nothing. */
    assert_int_equal(ledger_confirmed(&l, &two, 1), 0);
    assert_int_equal(ledger_confirmed(&l, NULL, 0), 0);
    assert_string_equal(entries(&l, buf, sizeof buf), "3");
    /* Consecutive done seqs stay a single range. */
    assert_int_equal(l.done.n, 2);
    assert_int_equal(l.done.v[0].begin, 1);
    assert_int_equal(l.done.v[0].end, 3);
    expect_new(&l, 3, 1, UINT64_MAX);
    ledger_release(&l);
    assert_int_equal(l.done.n, 0);
}

/* A split is re-issued after its worker died: positions 0..4 arrived from the first worker, then
 * the new worker serves 0..9 again. Exactly 5..9 are new, whether the consumer asks per element
 * or takes runs below the limit the way the iterator does. */
static void test_reissued_split(void **unused)
{
    (void)unused;
    for (int runs = 0; runs < 2; runs++) {
        struct ledger l;
        ledger_init(&l);
        for (uint64_t pos = 0; pos < 5; pos++) {
            expect_new(&l, 12, pos, UINT64_MAX);
            assert_int_equal(ledger_add(&l, 12, pos, pos + 1), 0);
        }
        /* The first worker died before the end marker. */
        assert_false(ledger_complete(&l, 12));

        bool kept[10] = {false};
        uint64_t run_begin = 0, run_end = 0, limit = 0;
        bool in_run = false;
        for (uint64_t pos = 0; pos < 10; pos++) {
            if (runs && in_run && pos == run_end && pos < limit) {
                /* Still below the limit: new without asking. */
                kept[pos] = true;
                run_end++;
                continue;
            }
            if (in_run) {
                assert_int_equal(ledger_add(&l, 12, run_begin, run_end), 0);
                in_run = false;
            }
            if (!ledger_is_new(&l, 12, pos, &limit))
                continue;
            kept[pos] = true;
            if (runs) {
                in_run = true;
                run_begin = pos;
                run_end = pos + 1;
            } else {
                assert_int_equal(ledger_add(&l, 12, pos, pos + 1), 0);
            }
        }
        if (in_run)
            assert_int_equal(ledger_add(&l, 12, run_begin, run_end), 0);
        for (uint64_t pos = 0; pos < 10; pos++)
            if (kept[pos] != (pos >= 5))
                fail_msg("runs=%d: position %" PRIu64 " kept=%d", runs, pos, kept[pos]);
        assert_int_equal(l.received, 10);
        assert_int_equal(ledger_end(&l, 12, 10), 0);
        assert_true(ledger_complete(&l, 12));
        /* A third serving of the split brings nothing new. */
        for (uint64_t pos = 0; pos < 10; pos++)
            expect_old(&l, 12, pos);
        ledger_release(&l);
    }
}

/* A re-issued split whose first serving got positions in the middle only: the limit stops a run
 * right before them, and the run resumes after. */
static void test_reissued_split_with_holes(void **unused)
{
    (void)unused;
    struct ledger l;
    ledger_init(&l);
    assert_int_equal(ledger_add(&l, 2, 3, 5), 0);
    assert_int_equal(ledger_add(&l, 2, 7, 8), 0);
    assert_int_equal(ledger_end(&l, 2, 9), 0); /* the marker arrived, some elements did not */
    expect_new(&l, 2, 0, 3);
    expect_old(&l, 2, 3);
    expect_old(&l, 2, 4);
    expect_new(&l, 2, 5, 7);
    expect_old(&l, 2, 7);
    expect_new(&l, 2, 8, 9);
    assert_int_equal(ledger_add(&l, 2, 0, 3), 0);
    assert_int_equal(ledger_add(&l, 2, 5, 7), 0);
    assert_false(ledger_complete(&l, 2));
    assert_int_equal(ledger_add(&l, 2, 8, 9), 0);
    assert_true(ledger_complete(&l, 2));
    assert_int_equal(l.v[0].got.n, 1);
    ledger_release(&l);
}

/* What a merge of two consumers' positions had of a split: a prefix and a tail. */
static void test_first_missing(void **state)
{
    (void)state;
    struct ledger l;
    ledger_init(&l);
    assert_int_equal(ledger_first_missing(&l, 3, 0), 0);
    assert_int_equal(ledger_add(&l, 3, 0, 2), 0);
    assert_int_equal(ledger_add(&l, 3, 50, 100), 0);
    assert_int_equal(ledger_end(&l, 3, 100), 0);
    assert_int_equal(ledger_first_missing(&l, 3, 0), 2);
    assert_int_equal(ledger_first_missing(&l, 3, 2), 2);
    assert_int_equal(ledger_first_missing(&l, 3, 49), 49);
    assert_int_equal(ledger_first_missing(&l, 3, 50), 100);
    assert_int_equal(ledger_first_missing(&l, 4, 7), 7);
    /* A done split: nothing to step over here. */
    uint64_t seq = 3;
    assert_int_equal(ledger_add(&l, 3, 2, 50), 0);
    assert_int_equal(ledger_confirmed(&l, &seq, 1), 0);
    assert_int_equal(ledger_first_missing(&l, 3, 0), 0);
    ledger_release(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_is_new_and_limit),
        cmocka_unit_test(test_entries_sorted),
        cmocka_unit_test(test_end_and_complete),
        cmocka_unit_test(test_empty_split),
        cmocka_unit_test(test_confirmed),
        cmocka_unit_test(test_reissued_split),
        cmocka_unit_test(test_reissued_split_with_holes),
        cmocka_unit_test(test_first_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
