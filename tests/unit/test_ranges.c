/* Sets of u64 half-open ranges (src/common/ranges.c): adds in any order merge touching and
 * overlapping ranges into the exact canonical list; contains, next_in, covers and count answer as
 * ranges.h says, also at the top of the u64 range; and long random runs against a plain bitmap
 * model agree exactly after every operation. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/rng.h"

#include "common/ranges.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The set as text, "[0,5) [7,9)", or "" when empty. */
static const char *format(const struct ranges *r, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n; i++) {
        int k = snprintf(buf + n, len - n, "%s[%" PRIu64 ",%" PRIu64 ")", i ? " " : "",
                         r->v[i].begin, r->v[i].end);
        assert_true(k >= 0 && (size_t)k < len - n);
        n += (size_t)k;
    }
    return buf;
}

/* What ranges.h promises of every set: sorted, disjoint, non-adjacent, non-empty ranges. */
static void check_canonical(const struct ranges *r)
{
    assert_true(r->n <= r->cap);
    for (size_t i = 0; i < r->n; i++) {
        assert_true(r->v[i].begin < r->v[i].end);
        if (i > 0)
            assert_true(r->v[i - 1].end < r->v[i].begin);
    }
}

/* ---- adds ------------------------------------------------------------------------------------ */

struct add_case {
    const char *name;
    uint64_t adds[8][2]; /* begin, end; a row of two zeros ends the list */
    const char *expect;
};

static const struct add_case add_cases[] = {
    {"empty range adds nothing", {{5, 5}}, ""},
    {"inverted range adds nothing", {{7, 3}, {9, 9}}, ""},
    {"one range", {{3, 7}}, "[3,7)"},
    {"disjoint in order", {{0, 2}, {4, 6}, {8, 10}}, "[0,2) [4,6) [8,10)"},
    {"disjoint in reverse", {{8, 10}, {4, 6}, {1, 2}}, "[1,2) [4,6) [8,10)"},
    {"disjoint in the middle", {{0, 2}, {8, 10}, {4, 6}}, "[0,2) [4,6) [8,10)"},
    {"touching from the right", {{0, 5}, {5, 7}}, "[0,7)"},
    {"touching from the left", {{5, 7}, {0, 5}}, "[0,7)"},
    {"single values in a run", {{2, 3}, {0, 1}, {1, 2}, {3, 4}}, "[0,4)"},
    {"overlapping the start", {{5, 10}, {3, 6}}, "[3,10)"},
    {"overlapping the end", {{5, 10}, {9, 12}}, "[5,12)"},
    {"inside an existing range", {{0, 10}, {3, 4}}, "[0,10)"},
    {"equal to an existing range", {{3, 8}, {3, 8}}, "[3,8)"},
    {"swallowing several", {{2, 3}, {5, 6}, {8, 9}, {0, 20}}, "[0,20)"},
    {"bridging two by touching both", {{0, 3}, {6, 9}, {3, 6}}, "[0,9)"},
    {"bridging two of three", {{0, 3}, {6, 9}, {12, 15}, {2, 7}}, "[0,9) [12,15)"},
    {"gap of one stays", {{0, 3}, {4, 6}}, "[0,3) [4,6)"},
    {"filling a gap of one", {{0, 3}, {4, 6}, {3, 4}}, "[0,6)"},
    {"extending the last of several", {{0, 1}, {3, 4}, {6, 7}, {7, 30}}, "[0,1) [3,4) [6,30)"},
    {"before all, touching the first", {{10, 12}, {20, 22}, {4, 10}}, "[4,12) [20,22)"},
    {"up to the top",
     {{UINT64_MAX - 3, UINT64_MAX}, {UINT64_MAX - 5, UINT64_MAX - 3}},
     "[18446744073709551610,18446744073709551615)"},
    {"the whole line", {{0, UINT64_MAX}, {7, 9}}, "[0,18446744073709551615)"},
};

static void test_add_cases(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof add_cases / sizeof add_cases[0]; i++) {
        const struct add_case *c = &add_cases[i];
        struct ranges r = {0};
        for (size_t k = 0; k < 8 && (c->adds[k][0] || c->adds[k][1]); k++) {
            assert_int_equal(ranges_add(&r, c->adds[k][0], c->adds[k][1]), 0);
            check_canonical(&r);
        }
        char buf[512];
        if (strcmp(format(&r, buf, sizeof buf), c->expect) != 0)
            fail_msg("case '%s': expected '%s', got '%s'", c->name, c->expect, buf);
        ranges_release(&r);
        assert_null(r.v);
        assert_int_equal(r.n, 0);
    }
}

/* Many separate ranges grow the array; release leaves the set empty and usable again. */
static void test_grow_and_release(void **unused)
{
    (void)unused;
    struct ranges r = {0};
    for (uint64_t k = 0; k < 100; k++)
        assert_int_equal(ranges_add(&r, 1000 - 10 * k, 1000 - 10 * k + 5), 0);
    assert_int_equal(r.n, 100);
    check_canonical(&r);
    assert_int_equal(r.v[0].begin, 10);
    assert_int_equal(r.v[99].end, 1005);
    assert_int_equal(ranges_count(&r), 500);
    /* One add closes every gap. */
    assert_int_equal(ranges_add(&r, 15, 1000), 0);
    char buf[64];
    assert_string_equal(format(&r, buf, sizeof buf), "[10,1005)");
    ranges_release(&r);
    assert_false(ranges_contains(&r, 10));
    assert_int_equal(ranges_count(&r), 0);
    assert_int_equal(ranges_add(&r, 1, 2), 0);
    assert_string_equal(format(&r, buf, sizeof buf), "[1,2)");
    ranges_release(&r);
}

/* ---- queries --------------------------------------------------------------------------------- */

static void test_queries(void **unused)
{
    (void)unused;
    struct ranges r = {0};
    /* The empty set. */
    assert_false(ranges_contains(&r, 0));
    assert_true(ranges_next_in(&r, 0) == UINT64_MAX);
    assert_true(ranges_covers(&r, 0));
    assert_false(ranges_covers(&r, 1));
    assert_int_equal(ranges_count(&r), 0);

    assert_int_equal(ranges_add(&r, 2, 5), 0);
    assert_int_equal(ranges_add(&r, 8, 9), 0);
    static const struct {
        uint64_t v;
        bool in;
        uint64_t next;
    } cases[] = {
        {0, false, 2},
        {1, false, 2},
        {2, true, 2},
        {4, true, 4},
        {5, false, 8},
        {7, false, 8},
        {8, true, 8},
        {9, false, UINT64_MAX},
        {1000, false, UINT64_MAX},
        {UINT64_MAX - 1, false, UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (ranges_contains(&r, cases[i].v) != cases[i].in)
            fail_msg("contains(%" PRIu64 ") is not %d", cases[i].v, cases[i].in);
        if (ranges_next_in(&r, cases[i].v) != cases[i].next)
            fail_msg("next_in(%" PRIu64 ") is %" PRIu64 ", not %" PRIu64, cases[i].v,
                     ranges_next_in(&r, cases[i].v), cases[i].next);
    }
    assert_int_equal(ranges_count(&r), 4);
    assert_true(ranges_covers(&r, 0));
    assert_false(ranges_covers(&r, 1)); /* 0 and 1 are missing */
    assert_int_equal(ranges_add(&r, 0, 2), 0);
    assert_true(ranges_covers(&r, 5));
    assert_false(ranges_covers(&r, 6)); /* 5..7 missing */
    assert_int_equal(ranges_add(&r, 5, 8), 0);
    assert_true(ranges_covers(&r, 9));
    assert_false(ranges_covers(&r, 10));
    assert_int_equal(ranges_count(&r), 9);
    ranges_release(&r);
}

/* The top of the u64 line: a half-open range cannot hold UINT64_MAX, so no set holds it, and
 * next_in answering UINT64_MAX always means "none". */
static void test_top_of_range(void **unused)
{
    (void)unused;
    struct ranges r = {0};
    assert_false(ranges_contains(&r, UINT64_MAX));
    assert_int_equal(ranges_add(&r, 10, UINT64_MAX), 0);
    assert_true(ranges_contains(&r, UINT64_MAX - 1));
    assert_false(ranges_contains(&r, UINT64_MAX));
    assert_true(ranges_next_in(&r, 3) == 10);
    assert_true(ranges_next_in(&r, UINT64_MAX - 1) == UINT64_MAX - 1);
    assert_true(ranges_next_in(&r, UINT64_MAX) == UINT64_MAX);
    assert_true(ranges_count(&r) == UINT64_MAX - 10);
    assert_int_equal(ranges_add(&r, 0, 10), 0);
    assert_true(ranges_count(&r) == UINT64_MAX); /* every representable value */
    assert_true(ranges_covers(&r, UINT64_MAX));
    assert_false(ranges_contains(&r, UINT64_MAX));
    ranges_release(&r);
}

/* ---- random runs against a bitmap ------------------------------------------------------------ */

#define UNIVERSE 96

/* Checks every query on values base + [0, UNIVERSE] (and a little around) against the model. */
static void check_model(const struct ranges *r, const bool *model, uint64_t base, size_t step)
{
    check_canonical(r);
    /* The set holds nothing outside the universe. */
    if (r->n > 0) {
        assert_true(r->v[0].begin >= base);
        assert_true(r->v[r->n - 1].end <= base + UNIVERSE);
    }
    uint64_t count = 0;
    for (size_t i = 0; i < UNIVERSE; i++)
        count += model[i];
    if (ranges_count(r) != count)
        fail_msg("step %zu: count %" PRIu64 ", model %" PRIu64, step, ranges_count(r), count);
    uint64_t next = UINT64_MAX; /* the model's next_in, walked from the top down */
    for (size_t i = UNIVERSE + 1; i-- > 0;) {
        if (i < UNIVERSE && model[i])
            next = base + i;
        uint64_t v = base + i;
        bool in = i < UNIVERSE && model[i];
        if (ranges_contains(r, v) != in)
            fail_msg("step %zu: contains(base + %zu) is %d, model %d", step, i, !in, in);
        if (ranges_next_in(r, v) != next)
            fail_msg("step %zu: next_in(base + %zu) wrong", step, i);
    }
    if (base == 0) {
        bool covered = true;
        for (size_t total = 0; total <= UNIVERSE + 1; total++) {
            if (ranges_covers(r, total) != covered)
                fail_msg("step %zu: covers(%zu) is %d, model %d", step, total, !covered, covered);
            covered = covered && total < UNIVERSE && model[total];
        }
    } else {
        assert_true(ranges_covers(r, 0));
        assert_false(ranges_covers(r, 1));
    }
}

static void random_run(uint64_t seed, uint64_t base, size_t steps)
{
    struct ranges r = {0};
    bool model[UNIVERSE] = {0};
    uint64_t x = seed;
    size_t maxn = 0;
    for (size_t step = 0; step < steps; step++) {
        /* Mostly short ranges, so the set keeps many gaps; sometimes empty or inverted ones;
         * rarely a long one, which merges much of the set. */
        uint64_t b = rng_next(&x) % (UNIVERSE + 1), len;
        uint64_t kind = rng_next(&x) % 16;
        if (kind == 0)
            len = rng_next(&x) % (UNIVERSE + 1);
        else
            len = rng_next(&x) % 4;
        uint64_t e = b + len > UNIVERSE ? UNIVERSE : b + len;
        if (kind == 1)
            e = b > 0 ? b - 1 : 0; /* inverted or empty: adds nothing */
        /* Once in a while start over, so the runs see sparse sets again. */
        if (rng_next(&x) % 400 == 0) {
            ranges_release(&r);
            memset(model, 0, sizeof model);
        }
        assert_int_equal(ranges_add(&r, base + b, base + e), 0);
        for (uint64_t v = b; v < e; v++)
            model[v] = true;
        if (r.n > maxn)
            maxn = r.n;
        check_model(&r, model, base, step);
    }
    /* The run must have seen fragmented sets, not only one big range. */
    assert_true(maxn >= 10);
    ranges_release(&r);
}

static void test_random_against_bitmap(void **unused)
{
    (void)unused;
    random_run(0x243f6a8885a308d3ull, 0, 4000);
    random_run(0x13198a2e03707344ull, 1ull << 40, 2000);
    /* Right below the top: the universe's last range ends at UINT64_MAX. */
    random_run(0xa4093822299f31d0ull, UINT64_MAX - UNIVERSE, 2000);
}

/* The first value at or past v that the set lacks. */
static void test_first_missing(void **state)
{
    (void)state;
    struct ranges r = {0};
    assert_int_equal(ranges_first_missing(&r, 5), 5);
    assert_int_equal(ranges_add(&r, 0, 10), 0);
    assert_int_equal(ranges_add(&r, 20, 30), 0);
    assert_int_equal(ranges_first_missing(&r, 0), 10);
    assert_int_equal(ranges_first_missing(&r, 9), 10);
    assert_int_equal(ranges_first_missing(&r, 10), 10);
    assert_int_equal(ranges_first_missing(&r, 15), 15);
    assert_int_equal(ranges_first_missing(&r, 20), 30);
    assert_int_equal(ranges_first_missing(&r, 29), 30);
    assert_int_equal(ranges_first_missing(&r, 30), 30);
    assert_int_equal(ranges_first_missing(&r, UINT64_MAX), UINT64_MAX);
    ranges_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_cases),
        cmocka_unit_test(test_grow_and_release),
        cmocka_unit_test(test_queries),
        cmocka_unit_test(test_top_of_range),
        cmocka_unit_test(test_random_against_bitmap),
        cmocka_unit_test(test_first_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
