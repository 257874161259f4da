/* When splits were leased again (src/dispatcher/relet.c): a request about a production whose end
 * the reader received before the split was leased again is stale, one about a later production
 * is not, and a split never leased again has no stale request; entries of splits no longer
 * leased are forgotten once they outnumber what is leased, and an iteration is forgotten whole. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "dispatcher/relet.h"

static void test_stale(void **unused)
{
    (void)unused;
    struct relet_table t = {0};
    /* Never leased again: whatever the age. */
    assert_false(relet_stale(&t, 1, 5, 10000, 9000));
    assert_int_equal(relet_note(&t, 1, 5, 4000), 0);
    /* The reader saw the end at 1000, before the new lease at 4000: stale. */
    assert_true(relet_stale(&t, 1, 5, 10000, 9000));
    /* At 4000 exactly (the new production cannot have ended yet) and after: about it. */
    assert_false(relet_stale(&t, 1, 5, 10000, 6000));
    assert_false(relet_stale(&t, 1, 5, 10000, 100));
    /* Another split, another iteration. */
    assert_false(relet_stale(&t, 1, 6, 10000, 9000));
    assert_false(relet_stale(&t, 2, 5, 10000, 9000));
    /* An age past the clock's start. */
    assert_true(relet_stale(&t, 1, 5, 10000, 20000));
    /* Leased again once more, later: the last lease counts. */
    assert_int_equal(relet_note(&t, 1, 5, 9500), 0);
    assert_true(relet_stale(&t, 1, 5, 10000, 1000));
    assert_int_equal(relet_note(&t, 0, 5, 100), 0); /* sorted insertion in front */
    assert_true(relet_stale(&t, 0, 5, 200, 150));
    assert_true(relet_stale(&t, 1, 5, 10000, 1000));
    relet_forget(&t, 1);
    assert_false(relet_stale(&t, 1, 5, 10000, 1000));
    assert_true(relet_stale(&t, 0, 5, 200, 150));
    relet_forget(&t, 7); /* unknown: nothing */
    assert_int_equal(t.n, 1);
    assert_int_equal(relet_iteration_at(&t, 0), 0);
    relet_release(&t);
    assert_int_equal(t.n, 0);
}

static void test_prune(void **unused)
{
    (void)unused;
    struct relet_table t = {0};
    struct u64map held = {0};
    for (uint64_t s = 0; s < 200; s++)
        assert_int_equal(relet_note(&t, 3, s, 1000 + s), 0);
    for (uint64_t s = 0; s < 200; s += 4)
        assert_int_equal(u64map_put(&held, s, 9), 1);
    assert_int_equal(relet_prune(&t, 3, &held), 0);
    for (uint64_t s = 0; s < 200; s++)
        assert_int_equal(relet_stale(&t, 3, s, 5000, 4500), s % 4 == 0);
    /* 50 entries, at most 64: kept as they are even where no longer held. */
    u64map_clear(&held);
    assert_int_equal(relet_prune(&t, 3, &held), 0);
    assert_true(relet_stale(&t, 3, 0, 5000, 4500));
    assert_int_equal(relet_prune(&t, 9, &held), 0); /* unknown iteration */
    u64map_release(&held);
    relet_release(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stale),
        cmocka_unit_test(test_prune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
