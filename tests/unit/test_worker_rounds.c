/* A worker's table of coordinated rounds: staging, committing rounds by their global index,
 * answering repeated reads from the rounds kept, telling rounds gone from rounds not served
 * yet, and the end. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "worker/rounds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stages n records "R.c" (R the round they are meant for, c the consumer). */
static void stage_round(struct rounds *r, uint64_t round)
{
    for (uint32_t c = 0; c < r->n; c++) {
        assert_false(rounds_stage_full(r));
        char text[32];
        int len = snprintf(text, sizeof text, "%llu.%u", (unsigned long long)round, c);
        uint8_t *rec = malloc((size_t)len);
        assert_non_null(rec);
        memcpy(rec, text, (size_t)len);
        rounds_stage(r, rec, (size_t)len);
    }
    assert_true(rounds_stage_full(r));
}

static void expect(const struct rounds *r, uint32_t c, uint64_t round, enum rounds_lookup want)
{
    const uint8_t *rec;
    size_t len;
    enum rounds_lookup got = rounds_lookup(r, c, round, &rec, &len);
    if (got != want)
        fail_msg("consumer %u, round %llu: %d, expected %d", c, (unsigned long long)round, got,
                 want);
    if (want != ROUNDS_READY) {
        assert_null(rec);
        return;
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%llu.%u", (unsigned long long)round, c);
    assert_int_equal(len, (size_t)n);
    assert_memory_equal(rec, text, len);
}

static void test_rounds(void **state)
{
    (void)state;
    struct rounds r;
    assert_int_equal(rounds_init(&r, 3), 0);
    /* Nothing served: every round waits. */
    expect(&r, 0, 0, ROUNDS_WAITING);
    expect(&r, 2, 7, ROUNDS_WAITING);

    /* The task serves rounds 1, 4, 7, ... (every third of the schedule). */
    for (uint64_t round = 1; round <= 16; round += 3) {
        stage_round(&r, round);
        rounds_commit(&r, round);
        assert_false(rounds_stage_full(&r));
    }
    /* The last four (7, 10, 13, 16) are kept for repeated reads; older ones are gone, and so
     * are rounds below the last that the task never served; later ones wait. */
    for (uint32_t c = 0; c < 3; c++) {
        expect(&r, c, 16, ROUNDS_READY);
        expect(&r, c, 13, ROUNDS_READY);
        expect(&r, c, 7, ROUNDS_READY);
        expect(&r, c, 4, ROUNDS_GONE);
        expect(&r, c, 1, ROUNDS_GONE);
        expect(&r, c, 8, ROUNDS_GONE);
        expect(&r, c, 17, ROUNDS_WAITING);
        expect(&r, c, 100, ROUNDS_WAITING);
    }

    /* Staged elements of a round never committed are dropped at the end. */
    stage_round(&r, 19);
    rounds_end(&r);
    assert_true(r.ended);
    assert_false(rounds_stage_full(&r));
    expect(&r, 1, 16, ROUNDS_READY);
    expect(&r, 1, 19, ROUNDS_WAITING);
    rounds_free(&r);
    rounds_free(&r); /* a freed table is empty */
}

static void test_init(void **state)
{
    (void)state;
    struct rounds r;
    assert_int_equal(rounds_init(&r, 0), 0);
    assert_int_equal(r.n, 0);
    assert_false(rounds_stage_full(&r));
    rounds_free(&r);
    assert_int_equal(rounds_init(&r, ROUNDS_MAX_CONSUMERS + 1), SLUICE_ERR_INVALID);
    assert_int_equal(r.n, 0);
    /* One consumer: every round is one element. */
    assert_int_equal(rounds_init(&r, 1), 0);
    stage_round(&r, 0);
    rounds_commit(&r, 0);
    expect(&r, 0, 0, ROUNDS_READY);
    rounds_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_init),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
