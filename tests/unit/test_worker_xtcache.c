/* The cross-trainer cache's ring and cursors, as scripts of pushes, reads and expiries with the
 * exact outcome of each step: join points, skipping ahead past evicted elements, the byte bound,
 * one id read twice, trainers forgotten when idle, refusals. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "common/varint.h"
#include "worker/xtcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every test record is 8 bytes (its position, little-endian) after a 1-byte length: it costs
 * REC bytes in the cache. */
#define REC (9u + XTC_RECORD_OVERHEAD)

enum op { PUSH, READ, EXPIRE, END };

struct step {
    enum op op;
    /* PUSH: n records in one payload (the next positions); READ: trainer id at time t, at most
     * max_el elements and max_bytes bytes (0: unlimited). */
    uint32_t n;
    const char *id;
    uint64_t t;
    uint32_t max_el;
    uint64_t max_bytes;
    /* READ: the outcome (rc, then first, count, skipped, joined); EXPIRE: n ids forgotten. After
     * every step: the positions held, [first, next). */
    int rc;
    uint64_t first;
    uint32_t count;
    uint64_t skipped;
    bool joined;
    uint64_t held_first, held_next;
};

struct script {
    const char *name;
    uint64_t bound;
    size_t max_trainers;
    uint64_t idle_ms;
    struct step steps[16];
};

static void push_run(struct xtc *c, uint64_t from, uint32_t n)
{
    uint8_t *p = malloc((size_t)n * 9);
    assert_non_null(p);
    for (uint32_t i = 0; i < n; i++) {
        p[i * 9] = 8;
        uint64_t v = from + i;
        for (int b = 0; b < 8; b++)
            p[i * 9 + 1 + b] = (uint8_t)(v >> (8 * b));
    }
    assert_int_equal(xtc_push(c, p, (size_t)n * 9, n), 0);
    free(p);
}

/* The records of a read are positions first, first + 1, ... in order. */
static void check_payload(const struct xtc_read *r, const char *what)
{
    if (r->len != (size_t)r->count * 9)
        fail_msg("%s: %zu bytes for %u records", what, r->len, r->count);
    for (uint32_t i = 0; i < r->count; i++) {
        const uint8_t *q = r->payload + i * 9;
        uint64_t v = 0;
        for (int b = 0; b < 8; b++)
            v |= (uint64_t)q[1 + b] << (8 * b);
        if (q[0] != 8 || v != r->first + i)
            fail_msg("%s: record %u holds %llu, expected %llu", what, i, (unsigned long long)v,
                     (unsigned long long)(r->first + i));
    }
}

static void run_script(const struct script *s)
{
    struct xtc c;
    assert_int_equal(xtc_init(&c, s->bound, s->max_trainers, s->idle_ms), 0);
    struct pipe_buf scratch = {0};
    for (size_t i = 0; s->steps[i].op != END; i++) {
        const struct step *st = &s->steps[i];
        char what[128];
        snprintf(what, sizeof what, "%s, step %zu", s->name, i);
        if (st->op == PUSH) {
            push_run(&c, c.next, st->n);
        } else if (st->op == READ) {
            struct xtc_read r;
            int rc = xtc_read(&c, st->id, st->t, st->max_el ? st->max_el : UINT32_MAX,
                              st->max_bytes ? st->max_bytes : UINT64_MAX, &scratch, &r);
            if (rc != st->rc)
                fail_msg("%s: rc %d, expected %d", what, rc, st->rc);
            if (rc == 0) {
                if (r.first != st->first || r.count != st->count || r.skipped != st->skipped ||
                    r.joined != st->joined)
                    fail_msg("%s: first %llu count %u skipped %llu joined %d, expected %llu %u "
                             "%llu %d",
                             what, (unsigned long long)r.first, r.count,
                             (unsigned long long)r.skipped, r.joined, (unsigned long long)st->first,
                             st->count, (unsigned long long)st->skipped, st->joined);
                check_payload(&r, what);
            }
        } else {
            size_t gone = xtc_expire(&c, st->t);
            if (gone != st->n)
                fail_msg("%s: %zu forgotten, expected %u", what, gone, st->n);
        }
        if (c.first != st->held_first || c.next != st->held_next)
            fail_msg("%s: holds [%llu, %llu), expected [%llu, %llu)", what,
                     (unsigned long long)c.first, (unsigned long long)c.next,
                     (unsigned long long)st->held_first, (unsigned long long)st->held_next);
        /* The bound holds after every step unless one element alone is over it. */
        assert_true(c.bytes <= c.bound || c.records == 1);
        assert_int_equal(c.records, c.next - c.first);
        assert_int_equal(c.bytes, c.records * REC);
    }
    pipe_buf_release(&scratch);
    xtc_free(&c);
}

#define P(k, f, nx)                                                                                \
    {                                                                                              \
        .op = PUSH, .n = (k), .held_first = (f), .held_next = (nx)                                 \
    }
#define R(who, tm, f, cnt, sk, j, hf, hn)                                                          \
    {                                                                                              \
        .op = READ, .id = (who), .t = (tm), .first = (f), .count = (cnt), .skipped = (sk),         \
        .joined = (j), .held_first = (hf), .held_next = (hn)                                       \
    }
#define RL(who, tm, me, mb, f, cnt, sk, j, hf, hn)                                                 \
    {                                                                                              \
        .op = READ, .id = (who), .t = (tm), .max_el = (me), .max_bytes = (mb), .first = (f),       \
        .count = (cnt), .skipped = (sk), .joined = (j), .held_first = (hf), .held_next = (hn)      \
    }
#define RERR(who, tm, code, hf, hn)                                                                \
    {                                                                                              \
        .op = READ, .id = (who), .t = (tm), .rc = (code), .held_first = (hf), .held_next = (hn)    \
    }
#define X(tm, k, hf, hn)                                                                           \
    {                                                                                              \
        .op = EXPIRE, .t = (tm), .n = (k), .held_first = (hf), .held_next = (hn)                   \
    }
#define E                                                                                          \
    {                                                                                              \
        .op = END                                                                                  \
    }
/* 130 bytes: over XTC_TRAINER_ID_MAX. */
#define TEN "0123456789"
#define LONG_ID TEN TEN TEN TEN TEN TEN TEN TEN TEN TEN TEN TEN TEN

static const struct script scripts[] = {
    {"join at the oldest element while nothing was evicted",
     100 * REC,
     0,
     0,
     {R("a", 0, 0, 0, 0, true, 0, 0), P(10, 0, 10), R("a", 1, 0, 10, 0, false, 0, 10),
      R("a", 2, 10, 0, 0, false, 0, 10), R("b", 3, 0, 10, 0, true, 0, 10), P(5, 0, 15),
      R("b", 4, 10, 5, 0, false, 0, 15), R("a", 5, 10, 5, 0, false, 0, 15), E}},
    {"join at the oldest element held after evictions",
     5 * REC,
     0,
     0,
     {P(3, 0, 3), P(4, 2, 7), P(3, 5, 10), R("late", 0, 5, 5, 0, true, 5, 10),
      R("late", 1, 10, 0, 0, false, 5, 10), E}},
    {"a slow trainer skips ahead to the oldest element, the fast one is unaffected",
     5 * REC,
     0,
     0,
     {P(5, 0, 5), RL("slow", 0, 3, 0, 0, 3, 0, true, 0, 5), R("fast", 0, 0, 5, 0, true, 0, 5),
      P(5, 5, 10), R("fast", 1, 5, 5, 0, false, 5, 10), P(5, 10, 15),
      R("fast", 2, 10, 5, 0, false, 10, 15), RL("slow", 3, 2, 0, 10, 2, 7, false, 10, 15),
      R("slow", 4, 12, 3, 0, false, 10, 15), R("slow", 5, 15, 0, 0, false, 10, 15), E}},
    {"a trainer at the tail after skipping: the skip is counted once",
     2 * REC,
     0,
     0,
     {P(1, 0, 1), R("a", 0, 0, 1, 0, true, 0, 1), R("b", 0, 0, 1, 0, true, 0, 1), P(6, 5, 7),
      R("a", 1, 5, 2, 4, false, 5, 7), P(1, 6, 8), R("b", 1, 6, 2, 5, false, 6, 8), E}},
    {"the same trainer id continues one cursor",
     100 * REC,
     0,
     0,
     {P(10, 0, 10), RL("t", 0, 4, 0, 0, 4, 0, true, 0, 10), RL("t", 0, 4, 0, 4, 4, 0, false, 0, 10),
      RL("t", 0, 4, 0, 8, 2, 0, false, 0, 10), R("t", 0, 10, 0, 0, false, 0, 10),
      R("u", 0, 0, 10, 0, true, 0, 10), E}},
    {"reads stop at max_elements and max_bytes, gather across chunks, take one over max_bytes",
     100 * REC,
     0,
     0,
     {P(3, 0, 3), P(3, 0, 6), P(3, 0, 9), RL("a", 0, 5, 0, 0, 5, 0, true, 0, 9),
      RL("a", 0, 0, 2 * 9, 5, 2, 0, false, 0, 9), RL("a", 0, 0, 1, 7, 1, 0, false, 0, 9),
      R("a", 0, 8, 1, 0, false, 0, 9), RL("b", 0, 0, 7 * 9, 0, 7, 0, true, 0, 9),
      R("b", 0, 7, 2, 0, false, 0, 9), E}},
    {"the newest element stays even when it alone is over the bound",
     REC - 1,
     0,
     0,
     {P(1, 0, 1), P(1, 1, 2), R("a", 0, 1, 1, 0, true, 1, 2), P(3, 4, 5),
      R("a", 1, 4, 1, 2, false, 4, 5), E}},
    {"trainers: a full table refuses a new id until one is idle",
     100 * REC,
     2,
     100,
     {P(4, 0, 4), RL("a", 0, 1, 0, 0, 1, 0, true, 0, 4), RL("b", 50, 1, 0, 0, 1, 0, true, 0, 4),
      RERR("c", 60, SLUICE_ERR_LIMIT, 0, 4), RL("b", 99, 1, 0, 1, 1, 0, false, 0, 4),
      RL("c", 100, 1, 0, 0, 1, 0, true, 0, 4), RERR("a", 120, SLUICE_ERR_LIMIT, 0, 4),
      RERR("d", 150, SLUICE_ERR_LIMIT, 0, 4), X(199, 1, 0, 4),
      RL("d", 199, 1, 0, 0, 1, 0, true, 0, 4), X(1000, 2, 0, 4),
      RL("a", 1001, 1, 0, 0, 1, 0, true, 0, 4), E}},
    {"bad trainer ids",
     100 * REC,
     0,
     0,
     {P(1, 0, 1), RERR("", 0, SLUICE_ERR_INVALID, 0, 1), RERR(LONG_ID, 0, SLUICE_ERR_INVALID, 0, 1),
      E}},
};

static void test_scripts(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++)
        run_script(&scripts[i]);
}

/* Pushing the stream in many small payloads never lets the cost pass the bound, and a trainer
 * that reads everything as it comes gets every position once, in order. */
static void test_bound_long_run(void **state)
{
    (void)state;
    struct xtc c;
    xtc_init(&c, 1000 * REC, 0, 0);
    struct pipe_buf scratch = {0};
    uint64_t want = 0, slow_last = 0;
    bool slow_any = false;
    for (uint32_t round = 0; round < 2000; round++) {
        push_run(&c, c.next, 1 + round % 7);
        assert_true(c.bytes <= c.bound);
        struct xtc_read r;
        for (;;) {
            assert_int_equal(xtc_read(&c, "fast", round, 64, UINT64_MAX, &scratch, &r), 0);
            if (r.count == 0)
                break;
            assert_int_equal(r.first, want);
            assert_int_equal(r.skipped, 0);
            check_payload(&r, "fast");
            want += r.count;
        }
        if (round % 50 == 0) {
            assert_int_equal(xtc_read(&c, "slow", round, 16, UINT64_MAX, &scratch, &r), 0);
            /* Strictly increasing positions, with gaps where it skipped. */
            if (slow_any)
                assert_true(r.first >= slow_last);
            assert_int_equal(r.first, slow_any ? slow_last + r.skipped : c.first);
            check_payload(&r, "slow");
            slow_last = r.first + r.count;
            slow_any = true;
        }
    }
    assert_int_equal(want, c.next);
    assert_true(xtc_trainer(&c, "slow")->skipped > 0);
    assert_int_equal(xtc_trainer(&c, "fast")->skipped, 0);
    assert_null(xtc_trainer(&c, "nobody"));
    pipe_buf_release(&scratch);
    xtc_free(&c);
}

static void test_push_refuses_bad_framing(void **state)
{
    (void)state;
    struct xtc c;
    xtc_init(&c, 0, 0, 0);
    assert_int_equal(c.bound, XTC_DEFAULT_BYTES);
    assert_int_equal(c.max_trainers, XTC_MAX_TRAINERS);
    const uint8_t two[] = {1, 'a', 2, 'b', 'c'};
    assert_int_equal(xtc_push(&c, two, sizeof two, 1), SLUICE_ERR_CORRUPT);
    assert_int_equal(xtc_push(&c, two, sizeof two, 3), SLUICE_ERR_CORRUPT);
    assert_int_equal(xtc_push(&c, two, sizeof two - 1, 2), SLUICE_ERR_CORRUPT);
    assert_int_equal(xtc_push(&c, two, sizeof two, 0), SLUICE_ERR_CORRUPT);
    assert_int_equal(c.next, 0);
    assert_int_equal(c.bytes, 0);
    assert_int_equal(xtc_push(&c, two, sizeof two, 2), 0);
    assert_int_equal(c.next, 2);
    assert_int_equal(c.bytes, sizeof two + 2 * XTC_RECORD_OVERHEAD);
    xtc_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scripts),
        cmocka_unit_test(test_bound_long_run),
        cmocka_unit_test(test_push_refuses_bad_framing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
