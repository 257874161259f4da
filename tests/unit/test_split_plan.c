/* Values a split plan must keep across versions: its fingerprint (checkpoints store it, so a
 * resumed read compares it with the new iteration's) and the file order global_shuffle gives
 * each pass (a resumed read would otherwise take other files for the splits it had). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "dispatcher/state.h"
#include "pipeline/split.h"

static void test_fingerprint_pinned(void **state)
{
    (void)state;
    char *files[] = {"/data/a.rec", "/data/b.rec", "/data/c.rec"};
    char *ab_c[] = {"ab", "c"};
    char *a_bc[] = {"a", "bc"};
    const struct {
        struct st_split_plan plan;
        uint64_t want;
    } cases[] = {
        {{0}, 0x40d69e0cf0f65c45ull},
        {{.source_len = 10, .split_size = 3, .per_pass = 4, .passes = 1}, 0x17444e1aa1bb13c9ull},
        {{.source_len = 1000, .split_size = 16, .per_pass = 63, .passes = UINT64_MAX},
         0xda5d65ac32109f0bull},
        {{.per_pass = 3, .passes = 2, .paths = files, .npaths = 3}, 0x42fe539511904d14ull},
        /* The paths' lengths are hashed, so moving a byte between two names changes it. */
        {{.per_pass = 2, .passes = 1, .paths = ab_c, .npaths = 2}, 0xf55888b2db00dec5ull},
        {{.per_pass = 2, .passes = 1, .paths = a_bc, .npaths = 2}, 0x971e559b4dab3fc5ull},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = st_split_plan_fingerprint(&cases[i].plan);
        if (got != cases[i].want)
            fail_msg("case %zu: fingerprint %#llx, want %#llx", i, (unsigned long long)got,
                     (unsigned long long)cases[i].want);
    }
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
                pipe_split_file_index(true, cases[i].seed, cases[i].nfiles, cases[i].pass, k),
                cases[i].want[k]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fingerprint_pinned),
        cmocka_unit_test(test_shuffled_file_order_pinned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
