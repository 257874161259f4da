/* The client's prefetch buffer: the slot accounting that bounds a read's memory, FIFO order of
 * payloads, and ownership of their bytes, those tensors borrow included (ASan checks that nothing
 * leaks or is freed twice). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "client/payload_block.h"
#include "client/prefetch.h"
#include "common/bufpool.h"
#include "common/error.h"
#include "pipeline/codec.h"
#include "sluice/sluice.h"

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

/* A payload in a block of the process's memory (an in-process worker's reply): a component of a
 * quarter of the block or more is lent from it, a smaller one copied (however large); the block
 * goes back to its pool only when the item and the last tensor that borrowed from it are done; it
 * cannot be placed for another process; without a pool it is freed (ASan). */
static void test_lent_heap_block(void **state)
{
    (void)state;
    for (int pooled = 0; pooled < 2; pooled++) {
        struct bufpool *pool = NULL;
        assert_int_equal(bufpool_new(1 << 20, 1 << 20, &pool), 0);
        /* Two elements: 64 KiB of uint8 values, then a string of 8 KiB. */
        enum { BIG = 64 << 10, SMALL = 8 << 10 };
        uint8_t *vals = malloc(BIG);
        assert_non_null(vals);
        for (size_t k = 0; k < BIG; k++)
            vals[k] = (uint8_t)(k * 37 % 251);
        struct sluice_element *a = sluice_element_new(), *b = sluice_element_new();
        int64_t shape[1] = {BIG};
        assert_int_equal(sluice_element_set_tensor(a, 0, SLUICE_UINT8, 1, shape, vals, BIG), 0);
        assert_int_equal(sluice_element_set_bytes(b, 0, vals, SMALL), 0);
        struct pipe_buf out = {0}, scratch = {0};
        assert_int_equal(codec_append_elem(&out, a, false, &scratch), 0);
        assert_int_equal(codec_append_elem(&out, b, false, &scratch), 0);
        /* The block a worker filled: more room than the payload, as a pooled block may have. */
        size_t cap = out.len + 16384;
        uint8_t *block = malloc(cap);
        assert_non_null(block);
        memcpy(block, out.p, out.len);
        struct prefetch_item it = {block, out.len, 2, 7};
        it.lent = payload_block_heap(block, cap, pooled ? pool : NULL);
        assert_non_null(it.lent);
        assert_true(it.lent->lender.lend_min == cap / 4 && cap / 4 > SMALL && cap / 4 <= BIG);

        struct sluice_element ga, gb;
        pipe_elem_init(&ga);
        pipe_elem_init(&gb);
        struct codec_mark m;
        char err[SLUICE_ERRMSG_SIZE];
        size_t pos = 0;
        assert_int_equal(codec_next_record(it.data, it.len, &pos, &ga, &scratch, &it.lent->lender,
                                           &m, err, sizeof err),
                         CODEC_ELEMENT);
        assert_int_equal(codec_next_record(it.data, it.len, &pos, &gb, &scratch, &it.lent->lender,
                                           &m, err, sizeof err),
                         CODEC_ELEMENT);
        assert_true(pipe_elem_equal(a, &ga));
        assert_true(pipe_elem_equal(b, &gb));
        assert_true(ga.t[0].lender == &it.lent->lender);
        assert_true(ga.t[0].data >= block && ga.t[0].data + BIG <= block + out.len);
        assert_null(gb.t[0].lender);
        assert_true(gb.t[0].data < block || gb.t[0].data >= block + cap);
        struct sluice_shm_place place;
        assert_int_equal(it.lent->lender.locate(&it.lent->lender, ga.t[0].data, BIG, &place),
                         SLUICE_ERR_NOT_FOUND);

        /* The item done, the lent tensor still reads its values; the block goes back with it. */
        prefetch_item_free(&it);
        assert_int_equal(bufpool_count(pool), 0);
        assert_true(pipe_elem_equal(a, &ga));
        pipe_elem_release(&ga);
        assert_int_equal(bufpool_count(pool), pooled ? 1 : 0);
        pipe_elem_release(&gb);

        free(vals);
        sluice_element_free(a);
        sluice_element_free(b);
        pipe_buf_release(&out);
        pipe_buf_release(&scratch);
        bufpool_free(pool);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_bound_everything),
        cmocka_unit_test(test_fifo_across_wraparound),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_pace),
        cmocka_unit_test(test_lent_heap_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
