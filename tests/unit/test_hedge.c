/* Hedged splits (src/dispatcher/hedge.c) over the state machine: the decision (which splits a
 * task gets copies of, when: past factor times the median split time, oldest first, never its
 * own, once each, none before enough splits finished), the median's ring, which iterations may
 * hedge, and the transitions around a copy: the first report of the split finishes it whichever
 * production it came from, the copy's holder reporting or handing it back changes nothing,
 * either holder's loss, the iteration's end and collection. Copies are soft state: the journal
 * record holds no trace of them, and replay gives the same state. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "dispatcher/hedge.h"
#include "lib/state_harness.h"

#include <stdio.h>
#include <string.h>

/* The harness and the hedge bookkeeping fed every update it applies, at a clock the test sets. */
struct fixture {
    struct harness h;
    struct hedge hg;
    size_t fed; /* updates of h.record given to hedge_applied */
    uint64_t now;
};

static const char *run(struct fixture *f, const char *line)
{
    const char *out = harness_run(&f->h, line);
    for (; f->fed < f->h.record.n; f->fed++)
        hedge_applied(&f->hg, &f->h.record.v[f->fed], f->now);
    return out;
}

static void setup(struct fixture *f, const char *script)
{
    memset(f, 0, sizeof *f);
    harness_init(&f->h);
    f->now = 1000;
    char line[256];
    for (const char *p = script; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        assert_true(n < sizeof line);
        memcpy(line, p, n);
        line[n] = '\0';
        if (n > 0)
            (void)run(f, line);
        p += n + (e != NULL);
    }
}

static void teardown(struct fixture *f)
{
    hedge_release(&f->hg);
    harness_release(&f->h);
}

static size_t pick(struct fixture *f, uint64_t task, size_t room, uint64_t *out)
{
    const struct st_iteration *it = state_iteration(&f->h.s, 1);
    return hedge_pick(hedge_find(&f->hg, 1), it, task, f->now, room, out);
}

/* DIST8 with hedging on (factor 3) and four splits finished in 100 ms each: the median is 100,
 * the limit 300. Task 1 then holds 4 and 5, task 2 holds 6 and 7, all leased at 2000. */
#define DIST8_HEDGED                                                                               \
    "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=12\nsplits 1 2\nsplits 2 2\n"

static void setup_hedged(struct fixture *f)
{
    setup(f, DIST8_HEDGED);
    assert_int_equal(hedge_set(&f->hg, &f->h.s, 1, 3, f->now), 0);
    f->now = 1100;
    (void)run(f, "done 1 0,1,2,3");
    assert_int_equal(hedge_median_ms(hedge_find(&f->hg, 1)), 100);
    f->now = 2000;
    (void)run(f, "splits 1 2");
    (void)run(f, "splits 2 2");
}

static void test_pick(void **unused)
{
    (void)unused;
    struct fixture f;
    setup(&f, DIST8_HEDGED);
    uint64_t out[8];
    /* Not asked for: no row, nothing picked. */
    assert_null(hedge_find(&f.hg, 1));
    assert_int_equal(pick(&f, 2, 8, out), 0);
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 3, f.now), 0);
    /* No split time known yet: nothing, however old. */
    f.now = 100000;
    assert_int_equal(pick(&f, 2, 8, out), 0);
    teardown(&f);

    setup_hedged(&f);
    /* At the limit: not yet; past it: task 2 gets copies of task 1's splits, oldest first, and
     * task 1 of task 2's; room bounds them. */
    f.now = 2300;
    assert_int_equal(pick(&f, 2, 8, out), 0);
    f.now = 2301;
    assert_int_equal(pick(&f, 2, 8, out), 2);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 5);
    assert_int_equal(pick(&f, 1, 1, out), 1);
    assert_int_equal(out[0], 6);
    assert_int_equal(pick(&f, 1, 0, out), 0);
    /* A copy out is not copied again, by anyone. */
    assert_int_equal(hedge_leased(&f.hg, state_iteration(&f.h.s, 1), 2, (uint64_t[]){4}, 1), 0);
    assert_int_equal(pick(&f, 2, 8, out), 1);
    assert_int_equal(out[0], 5);
    assert_int_equal(hedge_count(&f.hg, 1), 1);
    assert_int_equal(f.hg.total, 1);
    /* Factor 0: still timed, nothing hedged; the count stays. */
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 0, f.now), 0);
    assert_non_null(hedge_find(&f.hg, 1));
    assert_int_equal(pick(&f, 2, 8, out), 0);
    assert_int_equal(hedge_count(&f.hg, 1), 1);
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, -1, f.now), 0);
    assert_true(hedge_find(&f.hg, 1)->factor == 0);
    teardown(&f);
}

static void test_oldest_first(void **unused)
{
    (void)unused;
    struct fixture f;
    setup_hedged(&f);
    /* Task 2's splits 6 and 7 are older than a split leased to task 1 later. */
    f.now = 2100;
    (void)run(&f, "splits 1 1");
    f.now = 2500;
    uint64_t out[2];
    assert_int_equal(pick(&f, 1, 8, out), 2);
    assert_int_equal(out[0], 6);
    assert_int_equal(out[1], 7);
    f.now = 3000;
    uint64_t all[8];
    /* Task 3 (another worker's) would get the four of 2000 before the one of 2100. */
    (void)run(&f, "hb c:1 1");
    assert_int_equal(pick(&f, 3, 8, all), 5);
    assert_int_equal(all[0], 4);
    assert_int_equal(all[3], 7);
    assert_int_equal(all[4], 8);
    assert_int_equal(pick(&f, 3, 4, all), 4);
    assert_int_equal(all[3], 7);
    teardown(&f);
}

static void produced(struct fixture *f, uint64_t task, const uint64_t *seqs, size_t n)
{
    hedge_produced(&f->hg, 1, task, seqs, n, f->now);
}

/* A slow task, told by its own production times against its peers': its splits are copied from
 * HEDGE_MIN_MS on, long before the limit; a cluster slow as a whole has none; what a task did
 * not produce itself (a copy, a split held by another) and a report repeated add nothing. */
static void test_slow_task(void **unused)
{
    (void)unused;
    struct fixture f;
    /* Three tasks with two splits each, leased at 1000; hedging on, factor 3. */
    setup(&f, "ds - r4\nhb a:1 1\nhb b:1 1\nhb c:1 1\njob 1 mode=distributed_epoch total=40\n"
              "splits 1 2\nsplits 2 2\nsplits 3 2\n");
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 3, f.now), 0);
    const struct hedge_iter *r = hedge_find(&f.hg, 1);
    /* Tasks 1 and 2 produce theirs in 100 ms, task 3 in 400: 400 > 3 / 2 x 100. A repeated
     * report, and a report of another task's split, change nothing. */
    f.now = 1100;
    produced(&f, 1, (uint64_t[]){0, 1}, 2);
    produced(&f, 2, (uint64_t[]){2, 3, 4}, 3);
    (void)run(&f, "done 1 0,1,2,3");
    assert_false(hedge_task_slow(r, 3));
    f.now = 1400;
    produced(&f, 3, (uint64_t[]){4, 5}, 2);
    produced(&f, 1, (uint64_t[]){0, 1}, 2); /* again, later: not timed twice */
    (void)run(&f, "done 1 4,5");
    assert_int_equal(hedge_median_ms(r), 100);
    assert_true(hedge_task_slow(r, 3));
    assert_false(hedge_task_slow(r, 1));
    assert_false(hedge_task_slow(r, 2));
    /* New leases at 2000; at 2050 (past HEDGE_MIN_MS, far below the limit of 300) task 1 gets
     * task 3's splits and not task 2's; at 2049 nothing. */
    f.now = 2000;
    (void)run(&f, "splits 2 2");
    (void)run(&f, "splits 3 2");
    uint64_t out[8];
    f.now = 2049;
    assert_int_equal(pick(&f, 1, 8, out), 0);
    f.now = 2050;
    assert_int_equal(pick(&f, 1, 8, out), 2);
    assert_int_equal(out[0], 8);
    assert_int_equal(out[1], 9);
    /* Task 3 itself is offered nothing of task 2's yet. */
    assert_int_equal(pick(&f, 3, 8, out), 0);
    /* Task 1 produces a copy of 8: its times do not change, and task 3 stays slow. */
    assert_int_equal(hedge_leased(&f.hg, state_iteration(&f.h.s, 1), 1, (uint64_t[]){8}, 1), 0);
    f.now = 2060;
    produced(&f, 1, (uint64_t[]){8}, 1);
    assert_string_equal(run(&f, "done 1 8"), "splits_finished ref=1 seqs=[8]\n=>");
    assert_true(hedge_task_slow(r, 3));
    /* Task 3's late report of 8 (finished by the copy) adds nothing either. */
    produced(&f, 3, (uint64_t[]){8}, 1);
    assert_true(hedge_task_slow(r, 3));
    teardown(&f);

    /* All three equally slow (a loaded host): none is slow. */
    setup(&f, "ds - r4\nhb a:1 1\nhb b:1 1\nhb c:1 1\njob 1 mode=distributed_epoch total=40\n"
              "splits 1 2\nsplits 2 2\nsplits 3 2\n");
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 3, f.now), 0);
    r = hedge_find(&f.hg, 1);
    f.now = 1900;
    produced(&f, 1, (uint64_t[]){0, 1}, 2);
    produced(&f, 2, (uint64_t[]){2, 3}, 2);
    produced(&f, 3, (uint64_t[]){4, 5}, 2);
    for (uint64_t t = 1; t <= 3; t++)
        assert_false(hedge_task_slow(r, t));
    /* One task alone with times has no peers to be slow against. */
    assert_int_equal(r->ntasks, 3);
    teardown(&f);
}

static void test_median_ring(void **unused)
{
    (void)unused;
    struct hedge_iter r = {.factor = 3};
    assert_int_equal(hedge_median_ms(&r), 0);
    assert_int_equal(hedge_quantile_ms(&r, 0.99), 0);
    uint64_t v[] = {50, 10, 40, 30};
    for (size_t i = 0; i < 4; i++)
        r.ms[r.nms++] = v[i];
    /* Of 10 30 40 50: the upper middle, and the smallest with a share q at or below it. */
    assert_int_equal(hedge_quantile_ms(&r, 0.5), 40);
    assert_int_equal(hedge_quantile_ms(&r, 0.25), 10);
    assert_int_equal(hedge_quantile_ms(&r, 0.26), 30);
    assert_int_equal(hedge_quantile_ms(&r, 0.99), 50);
    assert_int_equal(hedge_quantile_ms(&r, 1), 50);
    for (uint64_t i = 0; i < 100; i++)
        r.ms[i] = 100 - i; /* 1..100 */
    r.nms = 100;
    assert_int_equal(hedge_quantile_ms(&r, 0.99), 99);
    assert_int_equal(hedge_quantile_ms(&r, 0.5), 51);
    /* The ring keeps the last HEDGE_SAMPLES. */
    struct fixture f;
    setup(&f, DIST8);
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 3, f.now), 0);
    (void)run(&f, "splits 1 8");
    f.now = 1000 + 7;
    (void)run(&f, "done 1 0,1,2,3,4,5,6,7");
    const struct hedge_iter *hr = hedge_find(&f.hg, 1);
    assert_non_null(hr);
    assert_int_equal(hr->nms, 8);
    assert_int_equal(hedge_median_ms(hr), 7);
    teardown(&f);
    /* Past HEDGE_SAMPLES the oldest times go. */
    setup(&f, "ds - r4\nhb a:1 1\njob 1 mode=distributed_epoch total=300\n");
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 3, f.now), 0);
    for (int i = 0; i < 300; i++) {
        char line[64];
        f.now = 1000 * (uint64_t)i;
        (void)run(&f, "splits 1 1");
        f.now += i < 100 ? 5000 : 10;
        snprintf(line, sizeof line, "done 1 %d", i);
        (void)run(&f, line);
    }
    hr = hedge_find(&f.hg, 1);
    assert_int_equal(hr->nms, HEDGE_SAMPLES);
    assert_int_equal(hedge_quantile_ms(hr, 1), 5000); /* 256 of 300: 56 of the first 100 */
    assert_int_equal(hedge_median_ms(hr), 10);
    teardown(&f);
}

static void test_allowed(void **unused)
{
    (void)unused;
    struct fixture f;
    /* Deterministic, named (shared) and parallel jobs do not hedge. */
    const char *scripts[] = {
        DET2,
        "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 name=n mode=distributed_epoch total=4\n",
        PAR2,
    };
    for (size_t i = 0; i < sizeof scripts / sizeof *scripts; i++) {
        setup(&f, scripts[i]);
        assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 3, f.now), 0);
        assert_null(hedge_find(&f.hg, 1));
        teardown(&f);
    }
    setup(&f, DIST2);
    assert_true(hedge_allowed(&f.h.s, state_iteration(&f.h.s, 1)));
    /* An unknown iteration: nothing. */
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 9, 3, f.now), 0);
    assert_null(hedge_find(&f.hg, 9));
    /* A factor past the bound is clamped; splits held when hedging starts are timed from then. */
    (void)run(&f, "splits 1 2");
    f.now = 5000;
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 1e9, f.now), 0);
    const struct hedge_iter *r = hedge_find(&f.hg, 1);
    assert_true(r->factor == HEDGE_FACTOR_MAX);
    uint64_t t0 = 0;
    assert_true(u64map_get(&r->since, 1, &t0));
    assert_int_equal(t0, 5000);
    teardown(&f);
}

/* The first report finishes the split, from whichever production: the copy's holder's later
 * report or hand-back changes nothing, and the state never knew the copy. */
static void test_first_finish_wins(void **unused)
{
    (void)unused;
    struct fixture f;
    setup_hedged(&f);
    f.now = 2400;
    uint64_t out[8];
    assert_int_equal(pick(&f, 2, 1, out), 1);
    assert_int_equal(out[0], 4);
    assert_int_equal(hedge_leased(&f.hg, state_iteration(&f.h.s, 1), 2, out, 1), 0);
    char places[256];
    /* The copy is no lease: 4 stays task 1's alone. */
    assert_string_equal(harness_places(&f.h.s, 1, places, sizeof places),
                        "cursor=8 finished=4 leased=4 pool=[] task1=[4,5] task2=[6,7]");
    /* The reader received 4 whole (from the copy): the one report finishes it from task 1. */
    f.now = 2450;
    assert_string_equal(run(&f, "done 1 4"), "splits_finished ref=1 seqs=[4]\n=>");
    assert_string_equal(harness_places(&f.h.s, 1, places, sizeof places),
                        "cursor=8 finished=5 leased=3 pool=[] task1=[5] task2=[6,7]");
    const struct hedge_iter *r = hedge_find(&f.hg, 1);
    assert_false(u64map_get(&r->copies, 4, NULL));
    assert_false(u64map_get(&r->since, 4, NULL));
    /* Both holders are told with their next reply (the one that won has started it: a no-op
     * there), once. */
    uint64_t drops[4];
    assert_int_equal(hedge_take_drops(&f.hg, 1, 2, drops, 4), 1);
    assert_int_equal(drops[0], 4);
    assert_int_equal(hedge_take_drops(&f.hg, 1, 2, drops, 4), 0);
    assert_int_equal(hedge_take_drops(&f.hg, 1, 1, drops, 0), 0);
    assert_int_equal(hedge_take_drops(&f.hg, 1, 1, drops, 4), 1);
    assert_int_equal(drops[0], 4);
    assert_int_equal(hedge_take_drops(&f.hg, 9, 1, drops, 4), 0);
    /* The other production ending later: a report again, or the copy's holder handing it back
     * (draining) or reporting it: nothing moves. */
    assert_string_equal(run(&f, "done 1 4"), "=>");
    assert_string_equal(run(&f, "splits 2 0 req=1 ret=4"), "=> end=0");
    assert_string_equal(harness_places(&f.h.s, 1, places, sizeof places),
                        "cursor=8 finished=5 leased=3 pool=[] task1=[5] task2=[6,7]");
    /* Had the straggler finished first, the same: one report, one finish. */
    assert_int_equal(pick(&f, 2, 1, out), 1);
    assert_int_equal(out[0], 5);
    assert_int_equal(hedge_leased(&f.hg, state_iteration(&f.h.s, 1), 2, out, 1), 0);
    assert_string_equal(run(&f, "done 1 5,5"), "splits_finished ref=1 seqs=[5]\n=>");
    assert_false(u64map_get(&r->copies, 5, NULL));
    /* A split finished without a copy out drops nothing. */
    assert_string_equal(run(&f, "done 1 6"), "splits_finished ref=1 seqs=[6]\n=>");
    assert_int_equal(hedge_take_drops(&f.hg, 1, 2, drops, 4), 1);
    assert_int_equal(drops[0], 5);
    /* Replay of the record: the same state (the copies left no trace in it). */
    assert_int_equal(harness_replay_through_records(&f.h), 4);
    teardown(&f);
}

/* Either holder's loss: the primary's splits go to the pool (and their copies are forgotten, to
 * be hedged again if they are slow again); the copy holder's copies are forgotten and the split
 * stays with its primary, to be hedged again to another task. */
static void test_holder_loss(void **unused)
{
    (void)unused;
    struct fixture f;
    setup_hedged(&f);
    (void)run(&f, "hb c:1 1"); /* task 3 on worker 3 */
    f.now = 2400;
    uint64_t out[8];
    assert_int_equal(pick(&f, 2, 2, out), 2); /* 4 and 5, task 1's */
    assert_int_equal(hedge_leased(&f.hg, state_iteration(&f.h.s, 1), 2, out, 2), 0);
    assert_int_equal(pick(&f, 3, 8, out), 2); /* 6 and 7: 4 and 5 have copies out */
    assert_int_equal(out[0], 6);
    /* The copy holder goes: its copies are forgotten, task 3 may take them; so are the drops
     * queued for it. */
    assert_string_equal(run(&f, "done 1 4"), "splits_finished ref=1 seqs=[4]\n=>");
    (void)run(&f, "rm 2");
    uint64_t drops[4];
    assert_int_equal(hedge_take_drops(&f.hg, 1, 2, drops, 4), 0);
    assert_int_equal(hedge_take_drops(&f.hg, 1, 1, drops, 4), 1);
    const struct hedge_iter *r = hedge_find(&f.hg, 1);
    assert_int_equal(r->copies.n, 0);
    assert_int_equal(pick(&f, 3, 8, out), 1);
    assert_int_equal(out[0], 5);
    assert_int_equal(hedge_leased(&f.hg, state_iteration(&f.h.s, 1), 3, out, 1), 0);
    /* The primary goes: its splits go to the pool, their copies and times are forgotten. */
    char places[256];
    (void)run(&f, "rm 1");
    assert_string_equal(harness_places(&f.h.s, 1, places, sizeof places),
                        "cursor=8 finished=5 leased=0 pool=[5,6,7] task3=[]");
    assert_int_equal(r->copies.n, 0);
    assert_int_equal(r->since.n, 0);
    /* Leased again from the pool (to task 3, which may already produce a copy of 4: its reader's
     * ledger drops what arrives twice): timed afresh, not copied before the limit. */
    f.now = 3000;
    assert_string_equal(run(&f, "splits 3 4"),
                        "splits_leased ref=1 ref2=3 seqs=[5,6,7,8]\n=> end=0 seqs=[5,6,7,8]");
    assert_true(u64map_get(&r->since, 5, NULL));
    assert_int_equal(pick(&f, 4, 8, out), 0);
    /* The primary's return drops nothing (the split was not finished). */
    assert_int_equal(hedge_take_drops(&f.hg, 1, 3, drops, 4), 0);
    assert_int_equal(harness_replay_through_records(&f.h), 2);
    teardown(&f);
}

/* The iteration's end keeps the count for status, its collection forgets the row. */
static void test_end(void **unused)
{
    (void)unused;
    struct fixture f;
    setup_hedged(&f);
    f.now = 2400;
    uint64_t out[8];
    assert_int_equal(pick(&f, 2, 1, out), 1);
    assert_int_equal(hedge_leased(&f.hg, state_iteration(&f.h.s, 1), 2, out, 1), 0);
    (void)run(&f, "splits 1 8");
    (void)run(&f, "splits 2 8");
    (void)run(&f, "done 1 4,5,6,7,8,9,10,11");
    (void)run(&f, "hb a:1 1 fin=1");
    (void)run(&f, "hb b:1 1 fin=2");
    assert_int_equal(state_iteration(&f.h.s, 1)->state, ST_ITER_FINISHED);
    const struct hedge_iter *r = hedge_find(&f.hg, 1);
    assert_non_null(r);
    assert_int_equal(hedge_count(&f.hg, 1), 1);
    /* Its reader's heartbeats go on: the row stays, hedging nothing. */
    assert_int_equal(hedge_set(&f.hg, &f.h.s, 1, 3, f.now), 0);
    assert_int_equal(hedge_count(&f.hg, 1), 1);
    assert_int_equal(pick(&f, 2, 8, out), 0);
    teardown(&f);

    setup_hedged(&f);
    (void)run(&f, "rel 1");
    (void)run(&f, "gc 1");
    assert_null(hedge_find(&f.hg, 1));
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick),        cmocka_unit_test(test_oldest_first),
        cmocka_unit_test(test_slow_task),   cmocka_unit_test(test_median_ring),
        cmocka_unit_test(test_allowed),     cmocka_unit_test(test_first_finish_wins),
        cmocka_unit_test(test_holder_loss), cmocka_unit_test(test_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
