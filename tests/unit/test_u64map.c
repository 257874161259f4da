/* The u64 hash map (src/common/u64map.c): puts, gets and deletes answer as u64map.h says,
 * including keys that collide into one run and runs that wrap around the table's end; a map
 * reserved for n keys takes them without allocating; the minimum is the smallest key stored;
 * u64map_retain keeps what its predicate accepts; and long random runs against a plain array
 * model agree exactly after every operation (deletion by backward shift loses no key). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/u64map.h"

#include <stdlib.h>
#include <string.h>

static void test_basics(void **state)
{
    (void)state;
    struct u64map m = {0};
    uint64_t v = 7;
    assert_false(u64map_get(&m, 0, &v));
    assert_false(u64map_del(&m, 0));
    assert_false(u64map_min(&m, &v));
    assert_int_equal(v, 7);
    assert_int_equal(u64map_put(&m, 0, 100), 1);
    assert_int_equal(u64map_put(&m, UINT64_MAX - 1, 200), 1);
    assert_int_equal(u64map_put(&m, 0, 101), 0); /* replaced */
    assert_int_equal(m.n, 2);
    assert_true(u64map_get(&m, 0, &v));
    assert_int_equal(v, 101);
    assert_true(u64map_get(&m, UINT64_MAX - 1, &v));
    assert_int_equal(v, 200);
    assert_true(u64map_get(&m, 0, NULL));
    assert_false(u64map_get(&m, 1, NULL));
    assert_false(u64map_get(&m, UINT64_MAX, NULL)); /* never stored */
    assert_true(u64map_del(&m, 0));
    assert_false(u64map_del(&m, 0));
    assert_false(u64map_get(&m, 0, NULL));
    assert_int_equal(m.n, 1);
    u64map_clear(&m);
    assert_int_equal(m.n, 0);
    assert_false(u64map_get(&m, UINT64_MAX - 1, NULL));
    u64map_release(&m);
    assert_null(m.slots);
    assert_int_equal(m.cap, 0);
}

static bool keep_even_values(uint64_t key, uint64_t value, void *ctx)
{
    (void)key;
    (*(unsigned *)ctx)++;
    return value % 2 == 0;
}

/* u64map_retain keeps exactly the pairs its predicate accepts, asking once per key, and the map
 * still finds, adds and deletes afterwards. */
static void test_retain(void **state)
{
    (void)state;
    struct u64map m = {0};
    unsigned asked = 0;
    assert_int_equal(u64map_retain(&m, keep_even_values, &asked), 0);
    assert_int_equal(asked, 0);
    for (uint64_t k = 0; k < 1000; k++)
        assert_int_equal(u64map_put(&m, k * 7, k), 1);
    assert_int_equal(u64map_retain(&m, keep_even_values, &asked), 0);
    assert_int_equal(asked, 1000);
    assert_int_equal(m.n, 500);
    for (uint64_t k = 0; k < 1000; k++) {
        uint64_t v = 1;
        assert_int_equal(u64map_get(&m, k * 7, &v), k % 2 == 0);
        if (k % 2 == 0)
            assert_int_equal(v, k);
    }
    assert_true(u64map_del(&m, 14));
    assert_int_equal(u64map_put(&m, 7, 1), 1);
    assert_int_equal(m.n, 500);
    u64map_release(&m);
}

static void test_reserve_no_growth(void **state)
{
    (void)state;
    struct u64map m = {0};
    assert_int_equal(u64map_reserve(&m, 1000), 0);
    uint64_t *slots = m.slots;
    size_t cap = m.cap;
    assert_true(cap >= 2000);
    for (uint64_t k = 0; k < 1000; k++)
        assert_int_equal(u64map_put(&m, k * 1000003, k), 1);
    assert_ptr_equal(m.slots, slots); /* no reallocation */
    assert_int_equal(m.cap, cap);
    /* Reserving less than the capacity keeps the table. */
    assert_int_equal(u64map_reserve(&m, 10), 0);
    assert_ptr_equal(m.slots, slots);
    for (uint64_t k = 0; k < 1000; k++) {
        uint64_t v;
        assert_true(u64map_get(&m, k * 1000003, &v));
        assert_int_equal(v, k);
    }
    u64map_release(&m);
}

/* Keys whose home is the table's last slot: their run wraps to slot 0, and deleting from the
 * middle of it must keep the rest findable. */
static void test_wrapping_run(void **state)
{
    (void)state;
    struct u64map m = {0};
    assert_int_equal(u64map_reserve(&m, 4), 0); /* 16 slots */
    assert_int_equal(m.cap, 16);
    uint64_t keys[6];
    size_t nk = 0;
    for (uint64_t k = 0; nk < 6; k++) {
        if ((size_t)((k * UINT64_C(0x9E3779B97F4A7C15)) >> 32 & 15) >= 14)
            keys[nk++] = k;
    }
    for (size_t i = 0; i < nk; i++)
        assert_int_equal(u64map_put(&m, keys[i], i), 1);
    /* Delete them in every position once, putting them back each time. */
    for (size_t d = 0; d < nk; d++) {
        assert_true(u64map_del(&m, keys[d]));
        for (size_t i = 0; i < nk; i++) {
            uint64_t v;
            assert_int_equal(u64map_get(&m, keys[i], &v), i != d);
            if (i != d)
                assert_int_equal(v, i);
        }
        assert_int_equal(u64map_put(&m, keys[d], d), 1);
    }
    u64map_release(&m);
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random puts and deletes over a small universe against an array model. */
static void test_random_against_model(void **state)
{
    (void)state;
    enum { UNIVERSE = 3000, OPS = 200000 };
    static uint64_t model[UNIVERSE];
    static bool present[UNIVERSE];
    memset(present, 0, sizeof present);
    struct u64map m = {0};
    uint64_t s = 0x6a09e667f3bcc909ull;
    size_t n = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rnd(&s);
        size_t k = (size_t)(r % UNIVERSE);
        /* Keys spread and clustered alike: sequential seqs and large ones. */
        uint64_t key = k % 2 ? k : UINT64_MAX - 1 - k;
        if ((r >> 32) % 3 != 0) {
            uint64_t v = r >> 8;
            assert_int_equal(u64map_put(&m, key, v), present[k] ? 0 : 1);
            n += !present[k];
            present[k] = true;
            model[k] = v;
        } else {
            assert_int_equal(u64map_del(&m, key), present[k]);
            n -= present[k];
            present[k] = false;
        }
        assert_int_equal(m.n, n);
        if (op % 1000 == 0 || op == OPS - 1) {
            uint64_t min = UINT64_MAX, got = 0;
            for (size_t i = 0; i < UNIVERSE; i++) {
                uint64_t ki = i % 2 ? i : UINT64_MAX - 1 - i;
                if (present[i] && ki < min)
                    min = ki;
            }
            assert_int_equal(u64map_min(&m, &got), n > 0);
            if (n > 0)
                assert_int_equal(got, min);
            for (size_t i = 0; i < UNIVERSE; i++) {
                uint64_t v = 0;
                uint64_t ki = i % 2 ? i : UINT64_MAX - 1 - i;
                assert_int_equal(u64map_get(&m, ki, &v), present[i]);
                if (present[i])
                    assert_int_equal(v, model[i]);
            }
        }
    }
    assert_true(m.n * 2 <= m.cap);
    u64map_release(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_retain),
        cmocka_unit_test(test_reserve_no_growth),
        cmocka_unit_test(test_wrapping_run),
        cmocka_unit_test(test_random_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
