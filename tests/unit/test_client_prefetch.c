/* The client's prefetch buffer: the slot accounting that bounds a read's memory, FIFO order of
 * payloads, and ownership of their bytes (ASan checks that nothing leaks or is freed twice). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "client/prefetch.h"

static struct prefetch_item item(uint64_t tag, size_t len)
{
    struct prefetch_item it = {malloc(len ? len : 1), len, (uint32_t)tag, tag};
    assert_non_null(it.data);
    memset(it.data, (int)(tag & 0xff), len ? len : 1);
    return it;
}

static void check_invariant(const struct prefetch *p)
{
    assert_int_equal(p->reserved + p->queued + p->held + prefetch_free_slots(p), p->cap);
}

static void test_slots_bound_everything(void **state)
{
    struct prefetch p;
    assert_int_equal(prefetch_init(&p, 3), 0);
    assert_int_equal(prefetch_free_slots(&p), 3);
    /* Requests in flight use slots... */
    assert_true(prefetch_reserve(&p));
    assert_true(prefetch_reserve(&p));
    assert_true(prefetch_reserve(&p));
    assert_false(prefetch_reserve(&p));
    check_invariant(&p);
    /* ...so do payloads waiting and payloads being decoded. */
    prefetch_fill(&p, item(1, 10));
    prefetch_cancel(&p);
    assert_int_equal(p.queued, 1);
    assert_int_equal(p.reserved, 1);
    assert_int_equal(p.bytes, 10);
    assert_int_equal(prefetch_free_slots(&p), 1);
    struct prefetch_item got;
    assert_true(prefetch_take(&p, &got));
    assert_int_equal(got.task_id, 1);
    assert_int_equal(got.len, 10);
    assert_int_equal(p.bytes, 0);
    assert_int_equal(p.held, 1);
    assert_int_equal(prefetch_free_slots(&p), 1);
    struct prefetch_item none = {NULL, 0, 0, 99};
    assert_false(prefetch_take(&p, &none));
    assert_int_equal(none.task_id, 99);
    free(got.data);
    prefetch_done(&p);
    assert_int_equal(prefetch_free_slots(&p), 2);
    check_invariant(&p);
    prefetch_cancel(&p);
    assert_int_equal(prefetch_free_slots(&p), 3);
    prefetch_release(&p);
}

static void test_fifo_across_wraparound(void **state)
{
    struct prefetch p;
    assert_int_equal(prefetch_init(&p, 4), 0);
    uint64_t next_in = 0, next_out = 0;
    /* Fill and drain in uneven steps so the ring's head goes round many times. */
    for (int round = 0; round < 50; round++) {
        unsigned add = (unsigned)(round % 4) + 1;
        for (unsigned k = 0; k < add && prefetch_reserve(&p); k++)
            prefetch_fill(&p, item(next_in++, (size_t)(round % 7)));
        check_invariant(&p);
        unsigned take = (unsigned)((round * 3) % 4) + 1;
        struct prefetch_item got;
        for (unsigned k = 0; k < take && prefetch_take(&p, &got); k++) {
            assert_int_equal(got.task_id, next_out);
            assert_int_equal(got.count, (uint32_t)next_out);
            next_out++;
            free(got.data);
            prefetch_done(&p);
        }
        check_invariant(&p);
    }
    assert_true(next_in > 50);
    assert_int_equal(p.queued, next_in - next_out);
    /* What is still queued is freed with the buffer. */
    prefetch_release(&p);
}

/* A model check: random operations against counters kept alongside, with the FIFO order and
 * the byte total verified at every step. */
static void test_random_against_model(void **state)
{
    struct prefetch p;
    assert_int_equal(prefetch_init(&p, 5), 0);
    uint64_t rng = 12345, next_in = 0, next_out = 0, bytes = 0;
    unsigned reserved = 0, queued = 0, held = 0;
    struct prefetch_item holding[5];
    unsigned nholding = 0;
    for (int step = 0; step < 20000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        switch ((rng >> 33) % 5) {
        case 0:
            if (prefetch_reserve(&p)) {
                reserved++;
            } else {
                assert_int_equal(reserved + queued + held, 5);
            }
            break;
        case 1:
            if (reserved) {
                size_t len = (size_t)((rng >> 40) % 100);
                prefetch_fill(&p, item(next_in++, len));
                bytes += len;
                reserved--;
                queued++;
            }
            break;
        case 2:
            if (reserved) {
                prefetch_cancel(&p);
                reserved--;
            }
            break;
        case 3: {
            struct prefetch_item got;
            bool took = prefetch_take(&p, &got);
            assert_int_equal(took, queued > 0);
            if (took) {
                assert_int_equal(got.task_id, next_out++);
                bytes -= got.len;
                queued--;
                held++;
                holding[nholding++] = got;
            }
            break;
        }
        default:
            if (nholding) {
                free(holding[--nholding].data);
                prefetch_done(&p);
                held--;
            }
            break;
        }
        assert_int_equal(p.reserved, reserved);
        assert_int_equal(p.queued, queued);
        assert_int_equal(p.held, held);
        assert_int_equal(p.bytes, bytes);
        check_invariant(&p);
    }
    while (nholding)
        free(holding[--nholding].data);
    prefetch_release(&p);
}

/* distributed_epoch's request size: cap requests ask for horizon_ms of the consumption rate
 * together, clamped to [min, max]. */
static void test_pace(void **state)
{
    (void)state;
    /* Nothing consumed yet, or a slow consumer: the least. */
    assert_int_equal(prefetch_pace(0, 8, 250, 64, 8192), 64);
    assert_int_equal(prefetch_pace(2000, 8, 250, 64, 8192), 64);
    /* 40,000 a second: 10,000 in 250 ms over 8 requests, 1,250 each. */
    assert_int_equal(prefetch_pace(40000, 8, 250, 64, 8192), 1250);
    assert_int_equal(prefetch_pace(40000, 1, 250, 64, 8192), 8192);
    assert_int_equal(prefetch_pace(40000, 1, 100, 64, 8192), 4000);
    /* Millions a second: the worker's bound. */
    assert_int_equal(prefetch_pace(10000000, 8, 250, 64, 8192), 8192);
    /* No overflow at absurd rates. */
    assert_int_equal(prefetch_pace(UINT64_MAX, 1, 250, 64, 8192), 8192);
    assert_int_equal(prefetch_pace(UINT64_MAX, 1024, 1, 1, 1 << 30), (1ull << 44) / 1000 / 1024);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_bound_everything),
        cmocka_unit_test(test_fifo_across_wraparound),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_pace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
