/* The block pool: which kept block a get returns, the byte and size bounds on what is kept,
 * eviction of the oldest, and blocks moving between threads (ASan checks that every block is
 * freed exactly once). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/bufpool.h"

static void *block(size_t n)
{
    void *b = malloc(n);
    assert_non_null(b);
    memset(b, 0xab, n);
    return b;
}

static void test_new_blocks_and_reuse(void **state)
{
    (void)state;
    struct bufpool *p;
    assert_int_equal(bufpool_new(1000, 500, &p), 0);
    size_t cap = 0;
    void *a = bufpool_get(p, 100, &cap);
    assert_non_null(a);
    assert_int_equal(cap, 100);
    bufpool_put(p, a, cap);
    assert_int_equal(bufpool_count(p), 1);
    assert_int_equal(bufpool_bytes(p), 100);
    /* Reused for anything it holds and at most twice as large as asked. */
    void *b = bufpool_get(p, 60, &cap);
    assert_ptr_equal(b, a);
    assert_int_equal(cap, 100);
    assert_int_equal(bufpool_count(p), 0);
    bufpool_put(p, b, cap);
    void *c = bufpool_get(p, 49, &cap);
    assert_ptr_not_equal(c, a);
    assert_int_equal(cap, 49);
    void *d = bufpool_get(p, 101, &cap);
    assert_ptr_not_equal(d, a);
    assert_int_equal(cap, 101);
    assert_int_equal(bufpool_count(p), 1);
    bufpool_put(p, c, 49);
    bufpool_put(p, d, 101);
    /* A zero-byte request still gets a block. */
    void *z = bufpool_get(p, 0, &cap);
    assert_non_null(z);
    assert_int_equal(cap, 1);
    free(z);
    bufpool_put(p, NULL, 5);
    assert_int_equal(bufpool_count(p), 3);
    bufpool_free(p);
}

static void test_best_fit_newest_first(void **state)
{
    (void)state;
    struct bufpool *p;
    assert_int_equal(bufpool_new(10000, 10000, &p), 0);
    void *b300 = block(300), *b200a = block(200), *b200b = block(200), *b150 = block(150);
    bufpool_put(p, b300, 300);
    bufpool_put(p, b200a, 200);
    bufpool_put(p, b200b, 200);
    bufpool_put(p, b150, 150);
    size_t cap;
    /* The smallest that fits; of equal ones, the one given back last. */
    assert_ptr_equal(bufpool_get(p, 160, &cap), b200b);
    assert_int_equal(cap, 200);
    assert_ptr_equal(bufpool_get(p, 160, &cap), b200a);
    assert_ptr_equal(bufpool_get(p, 160, &cap), b300);
    assert_ptr_equal(bufpool_get(p, 100, &cap), b150);
    assert_int_equal(bufpool_count(p), 0);
    free(b300);
    free(b200a);
    free(b200b);
    free(b150);
    bufpool_free(p);
}

static void test_bounds_and_eviction(void **state)
{
    (void)state;
    struct bufpool *p;
    assert_int_equal(bufpool_new(1000, 400, &p), 0);
    /* Over the block bound: freed, not kept. */
    bufpool_put(p, block(401), 401);
    assert_int_equal(bufpool_count(p), 0);
    void *a = block(400), *b = block(400), *c = block(300);
    bufpool_put(p, a, 400);
    bufpool_put(p, b, 400);
    assert_int_equal(bufpool_bytes(p), 800);
    /* 800 + 300 is over 1000: the oldest goes. */
    bufpool_put(p, c, 300);
    assert_int_equal(bufpool_count(p), 2);
    assert_int_equal(bufpool_bytes(p), 700);
    size_t cap;
    assert_ptr_equal(bufpool_get(p, 400, &cap), b);
    assert_ptr_equal(bufpool_get(p, 300, &cap), c);
    free(b);
    free(c);
    /* At most 32 blocks, whatever their size. */
    for (int i = 0; i < 40; i++)
        bufpool_put(p, block(1), 1);
    assert_int_equal(bufpool_count(p), 32);
    assert_int_equal(bufpool_bytes(p), 32);
    bufpool_free(p);
}

struct mover {
    struct bufpool *p;
    int rounds;
};

static void give_back(void *arg)
{
    struct mover *m = arg;
    for (int i = 0; i < m->rounds; i++) {
        size_t cap;
        void *b = bufpool_get(m->p, 128, &cap);
        assert_non_null(b);
        memset(b, i & 0xff, cap);
        bufpool_put(m->p, b, cap);
    }
}

static void test_threads(void **state)
{
    (void)state;
    struct bufpool *p;
    assert_int_equal(bufpool_new(1u << 20, 1u << 20, &p), 0);
    struct mover m = {p, 20000};
    uv_thread_t t1, t2;
    assert_int_equal(uv_thread_create(&t1, give_back, &m), 0);
    assert_int_equal(uv_thread_create(&t2, give_back, &m), 0);
    give_back(&m);
    uv_thread_join(&t1);
    uv_thread_join(&t2);
    /* Every kept block serves every request, and three threads never hold more than three
     * blocks at once, so at most three were ever made. */
    assert_true(bufpool_count(p) >= 1 && bufpool_count(p) <= 3);
    bufpool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_blocks_and_reuse),
        cmocka_unit_test(test_best_fit_newest_first),
        cmocka_unit_test(test_bounds_and_eviction),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
