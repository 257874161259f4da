/* The split plan (src/common/split_plan.h), the one arithmetic of a split sequence: its count,
 * the split at each seq (runs of positions, exact and ragged; files, sorted and under
 * global_shuffle; several and endless passes; past the end), the check of a plan from the
 * network with its exact messages, deep copies, and values that must never change: the
 * fingerprint (checkpoints store it) and the file order global_shuffle gives each pass (a resumed
 * read relies on it), both pinned to what the code gave before the plan moved here. Links the
 * dispatcher core and common only: the plan depends on no pipeline. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "common/split_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX UINT64_MAX

static char *files3[] = {"/data/a.rec", "/data/b.rec", "/data/c.rec"};
static char *files5[] = {"/d/0", "/d/1", "/d/2", "/d/3", "/d/4"};

static void test_per_pass(void **state)
{
    (void)state;
    static const struct {
        uint64_t len, size, want;
    } cases[] = {
        {10, 3, 4},    {9, 3, 3},     {10, 10, 1},       {10, 25, 1},           {0, 5, 0},
        {MAX, 1, MAX}, {MAX, MAX, 1}, {MAX, MAX / 2, 3}, {MAX - 1, MAX / 2, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(split_per_pass(cases[i].len, cases[i].size), cases[i].want);
}

static void test_total(void **state)
{
    (void)state;
    static const struct {
        uint64_t per_pass, passes, want;
    } cases[] = {
        {3, 2, 6},
        {3, MAX, MAX},         /* endless */
        {3, MAX / 2, MAX},     /* overflowing: as good as endless */
        {2, MAX / 2, MAX - 1}, /* the largest product that fits */
        {3, 0, 0},             /* repeat(0) */
        {0, MAX, 0},           /* an empty source, repeated forever */
        {0, 0, 0},
        {61035157, 1, 61035157},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct split_plan p = {.per_pass = cases[i].per_pass, .passes = cases[i].passes};
        assert_true(split_plan_total(&p) == cases[i].want);
    }
}

/* The plans of test_at, by index. */
static const struct split_plan plans[] = {
    /* 0: range, 10 positions in splits of 3: the last split short. */
    {.kind = SPLIT_RANGES, .source_len = 10, .split_size = 3, .per_pass = 4, .passes = 1},
    /* 1: range, 12 in splits of 4: exact, two passes. */
    {.kind = SPLIT_RANGES, .source_len = 12, .split_size = 4, .per_pass = 3, .passes = 2},
    /* 2: list(), 5 values in splits of 2 (list splits are position runs like range's). */
    {.kind = SPLIT_RANGES, .source_len = 5, .split_size = 2, .per_pass = 3, .passes = 1},
    /* 3: range, 7 in splits of 3, endless. */
    {.kind = SPLIT_RANGES, .source_len = 7, .split_size = 3, .per_pass = 3, .passes = MAX},
    /* 4: the whole uint64 range in the largest splits: the last one ends exactly. */
    {.kind = SPLIT_RANGES, .source_len = MAX, .split_size = MAX / 2, .per_pass = 3, .passes = 1},
    /* 5: three files, two passes. */
    {.kind = SPLIT_FILES, .per_pass = 3, .passes = 2, .paths = files3, .npaths = 3},
    /* 6: three files, endless. */
    {.kind = SPLIT_FILES, .per_pass = 3, .passes = MAX, .paths = files3, .npaths = 3},
    /* 7: five files under global_shuffle(11), three passes. */
    {.kind = SPLIT_FILES,
     .per_pass = 5,
     .passes = 3,
     .paths = files5,
     .npaths = 5,
     .shuffled = true,
     .seed = 11},
    /* 8: the same seed without the op: sorted order. */
    {.kind = SPLIT_FILES, .per_pass = 5, .passes = 1, .paths = files5, .npaths = 5, .seed = 11},
    /* 9: an empty source. */
    {.kind = SPLIT_RANGES, .source_len = 0, .split_size = 16, .per_pass = 0, .passes = MAX},
    /* 10: repeat(0). */
    {.kind = SPLIT_RANGES, .source_len = 10, .split_size = 3, .per_pass = 4, .passes = 0},
};

static void test_at(void **state)
{
    (void)state;
    static const struct {
        size_t plan;
        uint64_t seq;
        int in; /* 0: past the end */
        uint64_t repetition, begin, end, index;
        const char *path;
    } cases[] = {
        {0, 0, 1, 0, 0, 3, 0, ""},
        {0, 2, 1, 0, 6, 9, 2, ""},
        {0, 3, 1, 0, 9, 10, 3, ""}, /* ragged */
        {0, 4, 0, 0, 0, 0, 0, NULL},
        {0, MAX, 0, 0, 0, 0, 0, NULL},
        {1, 2, 1, 0, 8, 12, 2, ""}, /* exact */
        {1, 3, 1, 1, 0, 4, 0, ""},  /* the second pass */
        {1, 5, 1, 1, 8, 12, 2, ""},
        {1, 6, 0, 0, 0, 0, 0, NULL},
        {2, 0, 1, 0, 0, 2, 0, ""},
        {2, 2, 1, 0, 4, 5, 2, ""},
        {2, 3, 0, 0, 0, 0, 0, NULL},
        {3, 2, 1, 0, 6, 7, 2, ""},
        {3, 3000000000000000001ull, 1, 1000000000000000000ull, 3, 6, 1, ""},
        {3, MAX, 1, MAX / 3, 0, 3, 0, ""}, /* endless: every seq is a split */
        {4, 1, 1, 0, MAX / 2, MAX / 2 * 2, 1, ""},
        {4, 2, 1, 0, MAX / 2 * 2, MAX, 2, ""},
        {5, 0, 1, 0, 0, 0, 0, "/data/a.rec"},
        {5, 5, 1, 1, 0, 0, 2, "/data/c.rec"},
        {5, 6, 0, 0, 0, 0, 0, NULL},
        {6, 7, 1, 2, 0, 0, 1, "/data/b.rec"},
        {6, 4000000000001ull, 1, 1333333333333ull, 0, 0, 2, "/data/c.rec"},
        /* The permutations pinned in test_shuffled_file_order_pinned: 4 2 3 0 1, 4 1 3 2 0,
         * 0 2 4 1 3. */
        {7, 0, 1, 0, 0, 0, 4, "/d/4"},
        {7, 3, 1, 0, 0, 0, 0, "/d/0"},
        {7, 6, 1, 1, 0, 0, 1, "/d/1"},
        {7, 10, 1, 2, 0, 0, 0, "/d/0"},
        {7, 14, 1, 2, 0, 0, 3, "/d/3"},
        {7, 15, 0, 0, 0, 0, 0, NULL},
        {8, 0, 1, 0, 0, 0, 0, "/d/0"},
        {8, 4, 1, 0, 0, 0, 4, "/d/4"},
        {9, 0, 0, 0, 0, 0, 0, NULL},
        {10, 0, 0, 0, 0, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct split s;
        memset(&s, 0xa5, sizeof s);
        int in = split_plan_at(&plans[cases[i].plan], cases[i].seq, &s);
        if (in != cases[i].in)
            fail_msg("case %zu: split_plan_at gave %d", i, in);
        if (!in)
            continue;
        assert_int_equal(s.seq, cases[i].seq);
        assert_int_equal(s.repetition, cases[i].repetition);
        assert_int_equal(s.begin, cases[i].begin);
        assert_int_equal(s.end, cases[i].end);
        assert_int_equal(s.index, cases[i].index);
        assert_string_equal(s.path, cases[i].path);
    }
}

/* Under global_shuffle every pass reads every file once, and two passes differ. */
static void test_shuffled_passes(void **state)
{
    (void)state;
    const struct split_plan *p = &plans[7];
    uint64_t order[3][5];
    for (uint64_t seq = 0; seq < split_plan_total(p); seq++) {
        struct split s;
        assert_int_equal(split_plan_at(p, seq, &s), 1);
        assert_int_equal(s.index,
                         split_file_index(true, 11, 5, seq / p->per_pass, seq % p->per_pass));
        order[seq / 5][seq % 5] = s.index;
    }
    for (int r = 0; r < 3; r++) {
        unsigned seen = 0;
        for (int k = 0; k < 5; k++)
            seen |= 1u << order[r][k];
        assert_int_equal(seen, 0x1f);
    }
    assert_true(memcmp(order[0], order[1], sizeof order[0]) != 0);
    assert_int_equal(split_file_index(false, 11, 5, 1, 4), 4);
}

static void test_shuffled_file_order_pinned(void **state)
{
    (void)state;
    const struct {
        int64_t seed;
        uint64_t nfiles, pass;
        uint64_t want[7];
    } cases[] = {
        {11, 5, 0, {4, 2, 3, 0, 1}},
        {11, 5, 1, {4, 1, 3, 2, 0}},
        {11, 5, 2, {0, 2, 4, 1, 3}},
        {-3, 7, 2, {3, 0, 2, 6, 5, 4, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (uint64_t k = 0; k < cases[i].nfiles; k++)
            assert_int_equal(
                split_file_index(true, cases[i].seed, cases[i].nfiles, cases[i].pass, k),
                cases[i].want[k]);
    }
}

static void test_check(void **state)
{
    (void)state;
    char *one[] = {"/a"};
    char *empty[] = {""};
    static char longest[SPLIT_PATH_MAX], toolong[5000];
    memset(longest, 'x', sizeof longest - 1);
    memset(toolong, 'x', sizeof toolong - 1);
    char *longest_ok[] = {longest};
    char *too_long[] = {toolong};
    const struct {
        struct split_plan plan;
        const char *want; /* NULL: accepted */
    } cases[] = {
        {{.kind = SPLIT_RANGES, .source_len = 10, .split_size = 3, .per_pass = 4, .passes = 1},
         NULL},
        {{.kind = SPLIT_RANGES, .source_len = 10, .split_size = 10, .per_pass = 1, .passes = MAX},
         NULL},
        /* An empty source, and repeat(0): nothing will be leased. */
        {{.kind = SPLIT_RANGES, .source_len = 0, .split_size = 1, .per_pass = 0, .passes = 1},
         NULL},
        {{.kind = SPLIT_RANGES, .source_len = 10, .split_size = 3, .per_pass = 0, .passes = 0},
         NULL},
        {{.kind = SPLIT_RANGES, .source_len = 10, .split_size = 3, .per_pass = 0, .passes = 1},
         "split plan has no splits per pass"},
        {{.kind = SPLIT_RANGES, .source_len = 10, .split_size = 0, .per_pass = 4, .passes = 1},
         "split plan has split size 0"},
        {{.kind = SPLIT_RANGES, .source_len = 10, .split_size = 3, .per_pass = 3, .passes = 1},
         "split plan has 3 splits per pass, but 10 elements in splits of 3 make 4"},
        {{.kind = SPLIT_RANGES, .source_len = 10, .split_size = 3, .per_pass = 5, .passes = 1},
         "split plan has 5 splits per pass, but 10 elements in splits of 3 make 4"},
        {{.kind = SPLIT_FILES, .per_pass = 1, .passes = 1, .paths = one, .npaths = 1}, NULL},
        {{.kind = SPLIT_FILES, .per_pass = 2, .passes = 1, .paths = one, .npaths = 1},
         "split plan has 2 splits per pass but 1 files"},
        {{.kind = SPLIT_FILES, .per_pass = 1, .passes = 1, .paths = empty, .npaths = 1},
         "split plan has a file name of 0 bytes"},
        {{.kind = SPLIT_FILES, .per_pass = 1, .passes = 1, .paths = longest_ok, .npaths = 1}, NULL},
        {{.kind = SPLIT_FILES, .per_pass = 1, .passes = 1, .paths = too_long, .npaths = 1},
         "split plan has a file name of 4999 bytes"},
        /* A plan whose kind nobody set is a plan nobody can read. */
        {{.source_len = 10, .split_size = 3, .per_pass = 4, .passes = 1}, "unknown source kind 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc = split_plan_check(&cases[i].plan, err, sizeof err);
        if (!cases[i].want) {
            if (rc != 0)
                fail_msg("case %zu: %s", i, err);
        } else {
            assert_int_equal(rc, SLUICE_ERR_CORRUPT);
            assert_string_equal(err, cases[i].want);
        }
    }
}

static void test_copy_release(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        struct split_plan c;
        memset(&c, 0xa5, sizeof c);
        assert_int_equal(split_plan_copy(&c, &plans[i]), 0);
        assert_int_equal(c.kind, plans[i].kind);
        assert_int_equal(c.source_len, plans[i].source_len);
        assert_int_equal(c.split_size, plans[i].split_size);
        assert_int_equal(c.per_pass, plans[i].per_pass);
        assert_int_equal(c.passes, plans[i].passes);
        assert_int_equal(c.shuffled, plans[i].shuffled);
        assert_int_equal(c.seed, plans[i].seed);
        assert_int_equal(c.npaths, plans[i].npaths);
        for (size_t k = 0; k < c.npaths; k++) {
            assert_ptr_not_equal(c.paths[k], plans[i].paths[k]);
            assert_string_equal(c.paths[k], plans[i].paths[k]);
        }
        if (c.npaths == 0)
            assert_null(c.paths);
        assert_true(split_plan_fingerprint(&c) == split_plan_fingerprint(&plans[i]));
        split_plan_release(&c);
        static const struct split_plan zero;
        assert_memory_equal(&c, &zero, sizeof c);
    }
}

static void test_fingerprint_pinned(void **state)
{
    (void)state;
    char *ab_c[] = {"ab", "c"};
    char *a_bc[] = {"a", "bc"};
    const struct {
        struct split_plan plan;
        uint64_t want;
    } cases[] = {
        {{0}, 0x40d69e0cf0f65c45ull},
        {{.source_len = 10, .split_size = 3, .per_pass = 4, .passes = 1}, 0x17444e1aa1bb13c9ull},
        {{.source_len = 1000, .split_size = 16, .per_pass = 63, .passes = UINT64_MAX},
         0xda5d65ac32109f0bull},
        {{.per_pass = 3, .passes = 2, .paths = files3, .npaths = 3}, 0x42fe539511904d14ull},
        /* The paths' lengths are hashed, so moving a byte between two names changes it. */
        {{.per_pass = 2, .passes = 1, .paths = ab_c, .npaths = 2}, 0xf55888b2db00dec5ull},
        {{.per_pass = 2, .passes = 1, .paths = a_bc, .npaths = 2}, 0x971e559b4dab3fc5ull},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = split_plan_fingerprint(&cases[i].plan);
        if (got != cases[i].want)
            fail_msg("case %zu: fingerprint %#llx, want %#llx", i, (unsigned long long)got,
                     (unsigned long long)cases[i].want);
    }
    /* How the splits are read is no part of it: a worker's plan and the dispatcher's (which
     * holds only the numbers and files) have the same fingerprint. */
    assert_true(split_plan_fingerprint(&plans[0]) == 0x17444e1aa1bb13c9ull);
    assert_true(split_plan_fingerprint(&plans[5]) == 0x42fe539511904d14ull);
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        struct split_plan numbers = plans[i];
        numbers.kind = SPLIT_UNSET;
        numbers.shuffled = false;
        numbers.seed = 0;
        assert_true(split_plan_fingerprint(&numbers) == split_plan_fingerprint(&plans[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_pass),
        cmocka_unit_test(test_total),
        cmocka_unit_test(test_at),
        cmocka_unit_test(test_shuffled_passes),
        cmocka_unit_test(test_shuffled_file_order_pinned),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_copy_release),
        cmocka_unit_test(test_fingerprint_pinned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
