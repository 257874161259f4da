/* Split leasing on the worker (src/worker/lease.c): a plan as the worker holds it (the wire's
 * numbers and files, the rest from its dataset) passes the check and names, for each seq, the
 * split the provider's plan names; the lease queue asks, reports, backs off, sends a failed
 * request again as it was under its number, and ends as its contract says; a draining queue
 * hands back what it never started (also what an earlier request is granted), asks for nothing,
 * and polls until the end. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/pipeline.h"

#include "common/error.h"
#include "pipeline/parse.h"
#include "pipeline/split.h"
#include "worker/lease.h"

/* The plan a worker holds for a dataset: the numbers and files the dispatcher sends (wire
 * SplitPlan, paths borrowed from p), and what the worker takes from the dataset itself. */
static struct split_plan plan_from_wire(const struct pipe_split_provider *p,
                                        const struct pipe_spec *spec)
{
    struct split_plan plan = {
        .source_len = p->plan.source_len,
        .split_size = p->plan.split_size,
        .per_pass = p->plan.per_pass,
        .passes = p->plan.passes,
        .paths = p->plan.paths,
        .npaths = p->plan.npaths,
    };
    pipe_split_plan_reads(spec, &plan);
    return plan;
}

/* The worker's plan passes the check, and every seq of the sequence (or its first 3 passes,
 * when endless) and a few past its end give the same split from it as from the provider. */
static void compare_sequence(const struct pipe_split_provider *p, const struct pipe_spec *spec)
{
    struct split_plan plan = plan_from_wire(p, spec);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(split_plan_check(&plan, err, sizeof err), 0);
    assert_int_equal(plan.kind, p->plan.kind);
    assert_int_equal(plan.shuffled, p->plan.shuffled);
    assert_int_equal(plan.seed, p->plan.seed);
    uint64_t count = split_plan_total(&p->plan);
    assert_true(split_plan_total(&plan) == count);
    uint64_t last = count == UINT64_MAX ? 3 * p->plan.per_pass : count;
    for (uint64_t seq = 0; seq < last + 3; seq++) {
        struct split want, got;
        memset(&want, 0xa5, sizeof want);
        memset(&got, 0x5a, sizeof got);
        int in = split_plan_at(&p->plan, seq, &want);
        assert_int_equal(split_plan_at(&plan, seq, &got), in);
        assert_int_equal(in, seq < count);
        if (!in)
            continue;
        assert_int_equal(got.seq, want.seq);
        assert_int_equal(got.repetition, want.repetition);
        assert_int_equal(got.begin, want.begin);
        assert_int_equal(got.end, want.end);
        assert_int_equal(got.index, want.index);
        assert_string_equal(got.path, want.path);
    }
}

static void test_wire_plan_matches_provider(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t split_size;
    } cases[] = {
        {"range(10)", 0},
        {"range(10)", 1},
        {"range(10)", 3},
        {"range(10)", 10},
        {"range(10)", 25},
        {"range(0, 100, 7)", 4},
        {"range(50, 0, -3)", 5},
        {"range(1000)", 0},
        {"range(100000)", 0},
        {"list(1, 2, 3, 4, 5) | repeat(3)", 2},
        {"list(1, 2, 3, 4, 5) | repeat(2) | map(square) | repeat(2)", 0},
        {"range(7) | repeat()", 3},
        {"range(7) | repeat(0)", 3},
        {"range(0)", 0},
        {"range(100) | global_shuffle(3) | repeat(3)", 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pipe_spec *spec = pipeline_parse(cases[i].text);
        struct pipe_split_provider p;
        char err[SLUICE_ERRMSG_SIZE];
        assert_int_equal(pipe_split_provider_init(&p, spec, cases[i].split_size, err, sizeof err),
                         0);
        compare_sequence(&p, spec);
        pipe_split_provider_release(&p);
        pipe_spec_free(spec);
    }
}

/* File splits, with a provider built by hand (no disk): the worker takes the kind and the file
 * order from its dataset. */
static void test_wire_plan_files(void **state)
{
    (void)state;
    char *paths[] = {"/data/a.rec", "/data/b.rec", "/data/c.rec"};
    static const char *const texts[] = {
        "tfrecord(\"/data/*.rec\") | repeat(2)",
        "lines(\"/data/*.rec\") | repeat()",
        "lines(\"/data/*.rec\") | global_shuffle(11) | repeat()",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        struct pipe_spec *spec = pipeline_parse(texts[i]);
        struct pipe_split_provider p = {
            .plan = {
                .per_pass = 3, .passes = i == 0 ? 2 : UINT64_MAX, .paths = paths, .npaths = 3}};
        pipe_split_plan_reads(spec, &p.plan);
        assert_int_equal(p.plan.kind, SPLIT_FILES);
        assert_int_equal(p.plan.shuffled, i == 2);
        compare_sequence(&p, spec);
        pipe_spec_free(spec);
    }
}

static void expect_want(const struct lease_queue *q, uint64_t now, uint32_t max_splits,
                        size_t nfinished)
{
    uint32_t m = 12345;
    size_t n = 12345;
    assert_true(lease_want(q, now, &m, &n));
    assert_int_equal(m, max_splits);
    assert_int_equal(n, nfinished);
}

static void expect_no_want(const struct lease_queue *q, uint64_t now)
{
    uint32_t m;
    size_t n;
    assert_false(lease_want(q, now, &m, &n));
}

/* The life of a queue: fill, drain to the low mark, top up, report, end. */
static void test_queue_cycle(void **state)
{
    (void)state;
    struct lease_queue q;
    assert_int_equal(lease_queue_init(&q, 4), 0);
    assert_int_equal(q.low, 2);
    expect_want(&q, 1000, 4, 0);
    lease_sent(&q, 4, 0);
    expect_no_want(&q, 1000); /* one request at a time */
    uint64_t s1[] = {10, 11, 12, 13};
    assert_int_equal(lease_granted(&q, s1, 4, false, 1001), 0);
    expect_no_want(&q, 1001); /* full */

    uint64_t seq;
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_int_equal(seq, 10);
    expect_no_want(&q, 1002); /* 3 left, above the low mark */
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_int_equal(seq, 11);
    assert_int_equal(lease_finish(&q, 10, 1003), 0);
    /* At the low mark: ask for the room left, and report what finished. */
    expect_want(&q, 1003, 2, 1);
    assert_int_equal(q.finished[0], 10);
    lease_sent(&q, 2, 1);
    assert_int_equal(lease_finish(&q, 11, 1004), 0); /* finishes while the request flies */
    uint64_t s2[] = {14, 15};
    assert_int_equal(lease_granted(&q, s2, 2, false, 1005), 0);
    assert_int_equal(q.nfinished, 1);
    assert_int_equal(q.finished[0], 11);
    assert_int_equal(q.len, 4);

    /* A lone finished seq is reported after LEASE_REPORT_MS, not before. */
    expect_no_want(&q, 1004 + LEASE_REPORT_MS - 1);
    expect_want(&q, 1004 + LEASE_REPORT_MS, 0, 1);
    lease_sent(&q, 0, 1);
    assert_int_equal(lease_granted(&q, NULL, 0, false, 1200), 0);
    assert_int_equal(q.nfinished, 0);
    assert_int_equal(q.retry_at_ms, 0); /* asked for none: an empty reply is no reason to wait */

    /* Order is kept across the ring's wrap. */
    uint64_t want_order[] = {12, 13, 14, 15};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(lease_pop(&q, &seq), 1);
        assert_int_equal(seq, want_order[i]);
        assert_int_equal(lease_finish(&q, seq, 1300), 0);
    }
    assert_int_equal(lease_pop(&q, &seq), 0);
    assert_true(lease_more(&q));
    assert_false(lease_settled(&q));

    /* The end: nothing more to lease, the four finished seqs go out at once. */
    expect_want(&q, 1300, 4, 4);
    lease_sent(&q, 4, 4);
    assert_int_equal(lease_granted(&q, NULL, 0, true, 1301), 0);
    assert_false(lease_more(&q));
    assert_true(lease_settled(&q));
    expect_no_want(&q, 5000);
    lease_queue_release(&q);
}

/* Beside another task's request (a worker's batch): a queue asks once it is halfway from its
 * low-water mark down from its target, or has finished seqs to report; never while a request is
 * in flight, a failed one waits out its delay, or it drains; and whatever lease_want asks. */
static void test_queue_topup(void **state)
{
    (void)state;
    struct lease_queue q;
    uint32_t max;
    size_t nfin;
    assert_int_equal(lease_queue_init(&q, 8), 0);
    assert_int_equal(q.low, 4);
    assert_true(lease_want_topup(&q, 1000, &max, &nfin)); /* empty: lease_want's own ask */
    assert_int_equal(max, 8);
    assert_int_equal(nfin, 0);
    lease_sent(&q, 8, 0);
    assert_false(lease_want_topup(&q, 1000, &max, &nfin)); /* in flight */
    uint64_t s1[] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(lease_granted(&q, s1, 8, false, 1001), 0);
    assert_false(lease_want_topup(&q, 1001, &max, &nfin)); /* full */
    uint64_t seq;
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_false(lease_want_topup(&q, 1002, &max, &nfin)); /* 7 of 8: above 6 */
    assert_int_equal(lease_pop(&q, &seq), 1);
    expect_no_want(&q, 1002); /* 6: not at the low mark, alone it waits */
    assert_true(lease_want_topup(&q, 1002, &max, &nfin)); /* 6: halfway, beside another */
    assert_int_equal(max, 2);
    assert_int_equal(nfin, 0);
    /* A finished seq goes along at once (alone it waits LEASE_REPORT_MS). */
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_int_equal(lease_finish(&q, seq, 1003), 0);
    expect_no_want(&q, 1003);
    assert_true(lease_want_topup(&q, 1003, &max, &nfin));
    assert_int_equal(max, 3);
    assert_int_equal(nfin, 1);
    lease_sent(&q, max, nfin);
    lease_failed(&q, 1004);
    /* A failed request waits out its delay, then goes again as it was. */
    assert_false(lease_want_topup(&q, 1004 + 99, &max, &nfin));
    assert_true(lease_want_topup(&q, 1004 + 100, &max, &nfin));
    assert_int_equal(max, 3);
    assert_int_equal(nfin, 1);
    lease_sent(&q, max, nfin);
    uint64_t s2[] = {9, 10, 11};
    assert_int_equal(lease_granted(&q, s2, 3, false, 1105), 0);
    assert_int_equal(q.len, 8);
    /* Draining: only what lease_want asks (the queued seqs handed back). */
    assert_int_equal(lease_drain(&q), 0);
    assert_true(lease_want_topup(&q, 1106, &max, &nfin));
    assert_int_equal(max, 0);
    lease_sent(&q, max, nfin);
    assert_int_equal(lease_granted(&q, NULL, 0, false, 1107), 0);
    expect_no_want(&q, 1107);
    assert_false(lease_want_topup(&q, 1107, &max, &nfin));
    lease_queue_release(&q);
}

/* Hedged splits finished elsewhere (GetSplitsReply.dropped): the queued, unstarted ones go, in
 * order, across the ring's wrap; started ones and unknown seqs are left alone; the queue asks for
 * more once below its low mark. */
static void test_queue_drop(void **state)
{
    (void)state;
    struct lease_queue q;
    assert_int_equal(lease_queue_init(&q, 4), 0);
    expect_want(&q, 1000, 4, 0);
    lease_sent(&q, 4, 0);
    uint64_t s1[] = {10, 11, 12, 13};
    assert_int_equal(lease_granted(&q, s1, 4, false, 1001), 0);
    uint64_t seq;
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_int_equal(seq, 10);
    assert_int_equal(lease_finish(&q, 10, 1002), 0);
    assert_int_equal(lease_pop(&q, &seq), 1); /* 11 started */
    expect_want(&q, 1003, 2, 1);
    lease_sent(&q, 2, 1);
    uint64_t s2[] = {14, 15};
    assert_int_equal(lease_granted(&q, s2, 2, false, 1004), 0); /* 12 13 14 15, wrapped */
    uint64_t drop[] = {11, 14, 99, 12};
    assert_int_equal(lease_drop(&q, drop, 4), 2);
    assert_int_equal(q.len, 2);
    assert_int_equal(lease_drop(&q, drop, 4), 0);
    expect_want(&q, 1005, 2, 0); /* at the low mark again */
    uint64_t want_order[] = {13, 15};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(lease_pop(&q, &seq), 1);
        assert_int_equal(seq, want_order[i]);
    }
    assert_int_equal(lease_pop(&q, &seq), 0);
    assert_int_equal(q.busy, 3); /* 11, 13, 15: dropping a started seq changes nothing */
    assert_int_equal(lease_drop(&q, drop, 0), 0);
    lease_queue_release(&q);
}

static void test_queue_backoff(void **state)
{
    (void)state;
    struct lease_queue q;
    assert_int_equal(lease_queue_init(&q, 8), 0);
    uint64_t t = 10000;
    uint64_t delays[] = {100, 200, 400, 800, 1000, 1000};
    for (size_t i = 0; i < sizeof delays / sizeof delays[0]; i++) {
        expect_want(&q, t, 8, 0);
        lease_sent(&q, 8, 0);
        lease_failed(&q, t);
        expect_no_want(&q, t + delays[i] - 1);
        t += delays[i];
    }
    /* A success resets the delay. */
    expect_want(&q, t, 8, 0);
    lease_sent(&q, 8, 0);
    uint64_t s[] = {1};
    assert_int_equal(lease_granted(&q, s, 1, false, t), 0);
    assert_int_equal(q.failures, 0);
    expect_want(&q, t, 7, 0);
    lease_sent(&q, 7, 0);
    /* An empty answer to a request for splits waits like a failure. */
    assert_int_equal(lease_granted(&q, NULL, 0, false, t), 0);
    expect_no_want(&q, t + 99);
    expect_want(&q, t + 100, 7, 0);
    lease_queue_release(&q);
}

/* Finished seqs survive a failed request and go out with the next one. */
static void test_queue_failed_report(void **state)
{
    (void)state;
    struct lease_queue q;
    assert_int_equal(lease_queue_init(&q, 4), 0);
    lease_sent(&q, 4, 0);
    uint64_t s[] = {1, 2, 3, 4};
    assert_int_equal(lease_granted(&q, s, 4, true, 0), 0);
    uint64_t seq;
    while (lease_pop(&q, &seq))
        assert_int_equal(lease_finish(&q, seq, 10), 0);
    expect_want(&q, 10, 0, 4);
    lease_sent(&q, 0, 4);
    lease_failed(&q, 10);
    assert_false(lease_settled(&q));
    expect_no_want(&q, 109);
    expect_want(&q, 110, 0, 4);
    assert_int_equal(q.finished[0], 1);
    assert_int_equal(q.finished[3], 4);
    lease_sent(&q, 0, 4);
    assert_int_equal(lease_granted(&q, NULL, 0, true, 111), 0);
    assert_true(lease_settled(&q));
    lease_queue_release(&q);
}

/* A failed request goes out again exactly as it was, under its number, however the queue changed
 * meanwhile; only an answer moves on to a new request with a new number. The queue and the
 * numbers move together, as the worker's loop drives them. */
static void test_queue_retry_same_request(void **state)
{
    (void)state;
    struct lease_queue q;
    struct lease_numbers nums = {0};
    assert_int_equal(lease_queue_init(&q, 4), 0);
    expect_want(&q, 0, 4, 0);
    lease_sent(&q, 4, 0);
    assert_int_equal(lease_number_next(&nums), 1);
    uint64_t s1[] = {0, 1, 2, 3};
    assert_int_equal(lease_granted(&q, s1, 4, false, 0), 0);
    lease_number_done(&nums, true);

    /* Request 2 reports 0 and 1 and asks for 2 more. */
    uint64_t seq;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(lease_pop(&q, &seq), 1);
        assert_int_equal(lease_finish(&q, seq, 10), 0);
    }
    expect_want(&q, 10, 2, 2);
    lease_sent(&q, 2, 2);
    assert_int_equal(lease_number_next(&nums), 2);
    lease_failed(&q, 20);
    lease_number_done(&nums, false);

    /* Meanwhile 2 and 3 finish too and the queue runs dry: the retry is still request 2, asking
     * for 2 and reporting 0 and 1, once the backoff has passed. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(lease_pop(&q, &seq), 1);
        assert_int_equal(lease_finish(&q, seq, 30), 0);
    }
    assert_int_equal(q.nfinished, 4);
    expect_no_want(&q, 119);
    expect_want(&q, 120, 2, 2);
    assert_int_equal(q.finished[0], 0);
    assert_int_equal(q.finished[1], 1);
    lease_sent(&q, 2, 2);
    assert_int_equal(lease_number_next(&nums), 2);
    /* Failing again, and again: the same request, under the same number. */
    lease_failed(&q, 120);
    lease_number_done(&nums, false);
    expect_no_want(&q, 319);
    expect_want(&q, 320, 2, 2);
    lease_sent(&q, 2, 2);
    assert_int_equal(lease_number_next(&nums), 2);
    assert_false(lease_settled(&q));

    /* Answered (with the lease the first attempt got): 0 and 1 are reported, 2 and 3 wait for
     * request 3, which asks for the room left. */
    uint64_t s2[] = {4, 5};
    assert_int_equal(lease_granted(&q, s2, 2, false, 330), 0);
    lease_number_done(&nums, true);
    assert_int_equal(q.failures, 0);
    assert_int_equal(q.nfinished, 2);
    assert_int_equal(q.finished[0], 2);
    assert_int_equal(q.finished[1], 3);
    expect_want(&q, 330, 2, 2);
    lease_sent(&q, 2, 2);
    assert_int_equal(lease_number_next(&nums), 3);
    lease_number_done(&nums, true);
    assert_int_equal(lease_granted(&q, NULL, 0, true, 331), 0);
    assert_int_equal(q.nfinished, 0);
    assert_int_equal(q.len, 2);
    lease_queue_release(&q);
}

/* Request numbers: 1, 2, 3 in order; a failure keeps the number for the next request, however
 * often it fails. */
static void test_numbers(void **state)
{
    (void)state;
    struct lease_numbers n = {0};
    static const struct {
        bool answered;
        uint64_t want; /* the number of the request sent before the outcome */
    } steps[] = {
        {true, 1}, {true, 2}, {false, 3}, {false, 3}, {true, 3}, {true, 4}, {false, 5}, {true, 5},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        assert_int_equal(lease_number_next(&n), steps[i].want);
        lease_number_done(&n, steps[i].answered);
    }
    assert_int_equal(lease_number_next(&n), 6);
}

/* A dispatcher may grant more than asked; the ring grows and keeps the order. Many finished
 * seqs are reported without waiting for the timer. */
static void test_queue_grows(void **state)
{
    (void)state;
    struct lease_queue q;
    assert_int_equal(lease_queue_init(&q, 4), 0);
    uint64_t seq;
    lease_sent(&q, 4, 0);
    uint64_t a[] = {0, 1, 2};
    assert_int_equal(lease_granted(&q, a, 3, false, 0), 0);
    assert_int_equal(lease_pop(&q, &seq), 1);
    lease_sent(&q, 3, 0);
    uint64_t b[100];
    for (int i = 0; i < 100; i++)
        b[i] = 3 + (uint64_t)i;
    assert_int_equal(lease_granted(&q, b, 100, false, 0), 0);
    assert_int_equal(q.len, 102);
    for (uint64_t want = 1; want < LEASE_REPORT_COUNT; want++) {
        assert_int_equal(lease_pop(&q, &seq), 1);
        assert_int_equal(seq, want);
        assert_int_equal(lease_finish(&q, seq, 0), 0);
    }
    /* Plenty queued, one short of the count, before the timer: nothing to send. */
    assert_int_equal(q.nfinished, LEASE_REPORT_COUNT - 1);
    expect_no_want(&q, 1);
    assert_int_equal(lease_finish(&q, 0, 0), 0);
    expect_want(&q, 1, 0, LEASE_REPORT_COUNT);
    for (uint64_t want = LEASE_REPORT_COUNT; want < 103; want++) {
        assert_int_equal(lease_pop(&q, &seq), 1);
        assert_int_equal(seq, want);
    }
    assert_int_equal(lease_pop(&q, &seq), 0);
    lease_queue_release(&q);
}

/* ---- draining -------------------------------------------------------------------------------- */

/* The seqs lease_returning gives, as "11,12,13". */
static const char *returning_text(const struct lease_queue *q, char *buf, size_t len)
{
    size_t n = 0, k = 0;
    const uint64_t *v = lease_returning(q, &n);
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(buf + k, len - k, "%s%llu", i ? "," : "", (unsigned long long)v[i]);
        assert_true(w >= 0 && (size_t)w < len - k);
        k += (size_t)w;
    }
    return buf;
}

/* Queued seqs move to the returning list in queue order (across the ring's wrap); the next
 * request asks for nothing and hands them back; producers get nothing more. */
static void test_drain_hands_back_queued(void **state)
{
    (void)state;
    struct lease_queue q;
    char buf[256];
    assert_int_equal(lease_queue_init(&q, 4), 0);
    lease_sent(&q, 4, 0);
    uint64_t s1[] = {10, 11, 12, 13};
    assert_int_equal(lease_granted(&q, s1, 4, false, 0), 0);
    uint64_t seq;
    for (uint64_t want = 10; want < 13; want++) {
        assert_int_equal(lease_pop(&q, &seq), 1);
        assert_int_equal(seq, want);
    }
    assert_int_equal(lease_finish(&q, 10, 1), 0);
    assert_int_equal(lease_finish(&q, 11, 1), 0);
    /* 12 is still being produced. Top up so the ring wraps: 13, 14, 15. */
    expect_want(&q, 1, 3, 2);
    lease_sent(&q, 3, 2);
    uint64_t s2[] = {14, 15};
    assert_int_equal(lease_granted(&q, s2, 2, false, 2), 0);
    assert_int_equal(q.len, 3);
    assert_true(q.head != 0);

    assert_int_equal(lease_drain(&q), 0);
    assert_true(q.draining);
    assert_int_equal(q.len, 0);
    assert_int_equal(q.nreturning, 3);
    assert_int_equal(q.returning[0], 13);
    assert_int_equal(q.returning[1], 14);
    assert_int_equal(q.returning[2], 15);
    /* Nothing is in a request yet. */
    assert_string_equal(returning_text(&q, buf, sizeof buf), "");
    assert_int_equal(lease_pop(&q, &seq), 0);
    assert_false(lease_more(&q));
    assert_false(lease_settled(&q));

    /* At once, without waiting for the low mark or the report timer. */
    expect_want(&q, 2, 0, 0);
    lease_sent(&q, 0, 0);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "13,14,15");
    expect_no_want(&q, 2);
    /* 12 finishes while the request flies; the answer clears what was handed back. */
    assert_int_equal(lease_finish(&q, 12, 3), 0);
    assert_int_equal(lease_granted(&q, NULL, 0, false, 4), 0);
    assert_int_equal(q.nreturning, 0);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "");
    /* The next request reports 12 (after the polling delay) and hands back nothing. */
    expect_no_want(&q, 4 + 99);
    expect_want(&q, 4 + 100, 0, 1);
    lease_sent(&q, 0, 1);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "");
    assert_int_equal(lease_granted(&q, NULL, 0, true, 200), 0);
    assert_true(lease_settled(&q));
    assert_false(lease_more(&q));
    expect_no_want(&q, 100000);
    lease_queue_release(&q);
}

/* A failed request that handed seqs back is sent again with the same seqs, max_splits 0 and its
 * reported seqs, whatever finished meanwhile. */
static void test_drain_failed_request_resent(void **state)
{
    (void)state;
    struct lease_queue q;
    char buf[256];
    assert_int_equal(lease_queue_init(&q, 4), 0);
    lease_sent(&q, 4, 0);
    uint64_t s1[] = {0, 1, 2, 3};
    assert_int_equal(lease_granted(&q, s1, 4, false, 0), 0);
    uint64_t seq;
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_int_equal(lease_finish(&q, 0, 5), 0);
    assert_int_equal(lease_drain(&q), 0);
    expect_want(&q, 10, 0, 1);
    lease_sent(&q, 0, 1);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "2,3");
    lease_failed(&q, 10);
    /* 1 finishes before the retry; the retry is still the failed request. */
    assert_int_equal(lease_finish(&q, 1, 20), 0);
    expect_no_want(&q, 109);
    expect_want(&q, 110, 0, 1);
    lease_sent(&q, 0, 1);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "2,3");
    lease_failed(&q, 110);
    expect_no_want(&q, 309);
    expect_want(&q, 310, 0, 1);
    lease_sent(&q, 0, 1);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "2,3");
    assert_int_equal(lease_granted(&q, NULL, 0, false, 320), 0);
    assert_int_equal(q.nreturning, 0);
    assert_int_equal(q.nfinished, 1);
    assert_int_equal(q.finished[0], 1);
    /* The empty answer is a poll that found nothing, which waits like a third failure. */
    expect_no_want(&q, 320 + 399);
    expect_want(&q, 320 + 400, 0, 1);
    lease_queue_release(&q);
}

/* Draining while a request for more splits flies: its answer's seqs are handed back too, in the
 * next request, after the ones queued before. If that earlier request fails instead, it is sent
 * again as it was (asking for splits, handing nothing back), and the seqs follow after. */
static void test_drain_with_request_in_flight(void **state)
{
    (void)state;
    char buf[256];
    for (int fail = 0; fail < 2; fail++) {
        struct lease_queue q;
        assert_int_equal(lease_queue_init(&q, 4), 0);
        lease_sent(&q, 4, 0);
        uint64_t s1[] = {0, 1, 2, 3};
        assert_int_equal(lease_granted(&q, s1, 4, false, 0), 0);
        uint64_t seq;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(lease_pop(&q, &seq), 1);
            assert_int_equal(lease_finish(&q, seq, 0), 0);
        }
        expect_want(&q, 0, 2, 2);
        lease_sent(&q, 2, 2);
        assert_int_equal(lease_drain(&q), 0);
        assert_int_equal(q.nreturning, 2);
        assert_string_equal(returning_text(&q, buf, sizeof buf), "");
        uint64_t now = 0;
        if (fail) {
            lease_failed(&q, 0);
            expect_no_want(&q, 99);
            expect_want(&q, 100, 2, 2);
            lease_sent(&q, 2, 2);
            assert_string_equal(returning_text(&q, buf, sizeof buf), "");
            now = 100;
        }
        uint64_t s2[] = {4, 5};
        assert_int_equal(lease_granted(&q, s2, 2, false, now), 0);
        assert_int_equal(q.len, 0);
        assert_int_equal(q.nfinished, 0);
        assert_int_equal(lease_pop(&q, &seq), 0);
        assert_false(lease_more(&q));
        /* A reply with seqs is no reason to wait. */
        expect_want(&q, now, 0, 0);
        lease_sent(&q, 0, 0);
        assert_string_equal(returning_text(&q, buf, sizeof buf), "2,3,4,5");
        assert_int_equal(lease_granted(&q, NULL, 0, false, now + 1), 0);
        assert_int_equal(q.nreturning, 0);
        lease_queue_release(&q);
    }
}

/* A draining task with nothing queued polls for the end at the backoff pace, reporting what
 * finishes, and stops once end_of_splits came and everything is reported. */
static void test_drain_polls_until_end(void **state)
{
    (void)state;
    struct lease_queue q;
    char buf[64];
    assert_int_equal(lease_queue_init(&q, 2), 0);
    lease_sent(&q, 2, 0);
    uint64_t s1[] = {7, 8};
    assert_int_equal(lease_granted(&q, s1, 2, false, 0), 0);
    uint64_t seq;
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_int_equal(lease_pop(&q, &seq), 1);
    assert_int_equal(lease_finish(&q, 7, 0), 0);
    assert_int_equal(lease_finish(&q, 8, 0), 0);
    assert_int_equal(lease_drain(&q), 0);
    assert_int_equal(q.nreturning, 0);
    uint64_t t = 1000;
    expect_want(&q, t, 0, 2);
    lease_sent(&q, 0, 2);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "");
    /* The dispatcher waits for consumers to receive 7 and 8: empty answers, further apart. */
    uint64_t delays[] = {100, 200, 400, 800, 1000, 1000, 1000};
    for (size_t i = 0; i < sizeof delays / sizeof delays[0]; i++) {
        assert_int_equal(lease_granted(&q, NULL, 0, false, t), 0);
        assert_false(lease_settled(&q));
        expect_no_want(&q, t + delays[i] - 1);
        t += delays[i];
        expect_want(&q, t, 0, 0);
        lease_sent(&q, 0, 0);
    }
    /* A failed poll backs off further and is sent again the same. */
    lease_failed(&q, t);
    expect_no_want(&q, t + 999);
    t += 1000;
    expect_want(&q, t, 0, 0);
    lease_sent(&q, 0, 0);
    assert_int_equal(lease_granted(&q, NULL, 0, true, t), 0);
    assert_true(q.end_of_splits);
    assert_true(lease_settled(&q));
    assert_false(lease_more(&q));
    expect_no_want(&q, t + 100000);
    lease_queue_release(&q);
}

/* Draining an idle queue asks at once; the end may come with seqs still to hand back (an answer
 * to a request sent before draining), which are then still sent. */
static void test_drain_end_with_seqs_to_return(void **state)
{
    (void)state;
    struct lease_queue q;
    char buf[64];
    assert_int_equal(lease_queue_init(&q, 4), 0);
    assert_int_equal(lease_drain(&q), 0);
    assert_int_equal(lease_drain(&q), 0); /* twice is harmless */
    expect_want(&q, 0, 0, 0);
    lease_sent(&q, 0, 0);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "");
    /* Granted with the end (a lease answered from the record of an earlier request). */
    uint64_t s[] = {3, 9};
    assert_int_equal(lease_granted(&q, s, 2, true, 0), 0);
    assert_int_equal(q.nreturning, 2);
    assert_false(lease_more(&q));
    expect_want(&q, 0, 0, 0);
    lease_sent(&q, 0, 0);
    assert_string_equal(returning_text(&q, buf, sizeof buf), "3,9");
    assert_int_equal(lease_granted(&q, NULL, 0, true, 1), 0);
    assert_int_equal(q.nreturning, 0);
    expect_no_want(&q, 5000);
    assert_true(lease_settled(&q));
    lease_queue_release(&q);
}

/* Producers take the lowest seq first: a split leased again from the pool (its worker died, or a
 * deterministic reader needs it produced again) goes before those leased earlier but further
 * along. */
static void test_pop_lowest_first(void **state)
{
    (void)state;
    struct lease_queue q;
    assert_int_equal(lease_queue_init(&q, 4), 0);
    expect_want(&q, 1000, 4, 0);
    lease_sent(&q, 4, 0);
    uint64_t s1[] = {20, 21};
    assert_int_equal(lease_granted(&q, s1, 2, false, 1001), 0);
    expect_want(&q, 1001, 2, 0);
    lease_sent(&q, 2, 0);
    uint64_t s2[] = {3, 22};
    assert_int_equal(lease_granted(&q, s2, 2, false, 1002), 0);
    uint64_t want[] = {3, 20, 21, 22}, seq;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(lease_pop(&q, &seq), 1);
        assert_int_equal(seq, want[i]);
    }
    assert_int_equal(lease_pop(&q, &seq), 0);
    lease_queue_release(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pop_lowest_first),
        cmocka_unit_test(test_wire_plan_matches_provider),
        cmocka_unit_test(test_wire_plan_files),
        cmocka_unit_test(test_queue_cycle),
        cmocka_unit_test(test_queue_topup),
        cmocka_unit_test(test_queue_backoff),
        cmocka_unit_test(test_queue_failed_report),
        cmocka_unit_test(test_queue_retry_same_request),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_queue_grows),
        cmocka_unit_test(test_drain_hands_back_queued),
        cmocka_unit_test(test_drain_failed_request_resent),
        cmocka_unit_test(test_queue_drop),
        cmocka_unit_test(test_drain_with_request_in_flight),
        cmocka_unit_test(test_drain_polls_until_end),
        cmocka_unit_test(test_drain_end_with_seqs_to_return),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
