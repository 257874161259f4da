/* The reorder store of deterministic reads (src/client/reorder.c): the judge accepting each
 * split's records as a growing prefix, only the lowest incomplete split's once there is no room,
 * end markers completing splits or marking them for a redo, need moving past complete splits;
 * and the queue handing runs out in the canonical order, passing over splits finished elsewhere
 * and missing splits at the end, counting the bytes of the payloads it holds. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "client/reorder.h"
#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the judge ------------------------------------------------------------------------------- */

/* One step of a script: "r SEQ POS" (a record, room), "R SEQ POS" (a record, no room),
 * "e SEQ TOTAL" (an end marker), "f FLOOR", with the expected result: the verdict (D, A, L, X
 * for DUP, ACCEPT, LAST, DROP), or for "e" the return (1, 0, C for CORRUPT); and need after
 * reorder_advance. */
struct judge_step {
    const char *op;
    const char *want;
    uint64_t need;
};

struct judge_case {
    const char *name;
    struct judge_step steps[16];
    const char *redo; /* reorder_redo_due(room) at the end: "3 5" */
};

static const struct judge_case judge_cases[] = {
    {"in order, one split",
     {{"r 0 0", "A", 0}, {"r 0 1", "A", 0}, {"e 0 2", "1", 1}, {"r 0 1", "D", 1}},
     ""},
    {"an empty split completes at its marker", {{"e 0 0", "1", 1}, {"e 0 0", "0", 1}}, ""},
    {"two splits interleaved; the later one waits complete",
     {{"r 1 0", "A", 0},
      {"r 0 0", "A", 0},
      {"r 1 1", "A", 0},
      {"e 1 2", "1", 0},
      {"r 0 1", "A", 0},
      {"e 0 2", "1", 2}},
     ""},
    {"duplicates and a gap",
     {{"r 0 0", "A", 0},
      {"r 0 0", "D", 0},
      {"r 0 2", "X", 0},
      {"r 0 1", "A", 0},
      {"r 0 2", "A", 0},
      {"e 0 3", "1", 1}},
     ""},
    {"no room: only need takes records",
     {{"R 1 0", "X", 0},
      {"R 0 0", "A", 0},
      {"R 1 1", "X", 0},
      {"e 1 2", "0", 0},
      {"e 0 1", "1", 1}},
     "1"},
    {"a split lossy after its marker completes from a second stream",
     {{"r 0 0", "A", 0},
      {"r 0 2", "X", 0},
      {"e 0 3", "0", 0},
      {"r 0 0", "D", 0},
      {"r 0 1", "A", 0},
      {"r 0 2", "L", 1}},
     ""},
    {"a marker disagreeing with an earlier one", {{"e 0 3", "0", 0}, {"e 0 4", "C", 0}}, "0"},
    {"a marker below the accepted prefix",
     {{"r 0 0", "A", 0}, {"r 0 1", "A", 0}, {"e 0 1", "C", 0}},
     ""},
    {"records past the count are duplicates",
     {{"e 0 1", "0", 0}, {"r 0 1", "D", 0}, {"r 0 0", "L", 1}},
     ""},
    {"a floor passes over splits finished elsewhere",
     {{"r 0 0", "A", 0},
      {"r 3 0", "A", 0},
      {"f 2", "", 2},
      {"r 0 1", "D", 2},
      {"e 2 0", "1", 3},
      {"e 3 1", "1", 4}},
     ""},
    {"redo is due for several splits",
     {{"r 0 0", "A", 0},
      {"r 2 1", "X", 0},
      {"e 2 2", "0", 0},
      {"r 3 1", "X", 0},
      {"e 3 2", "0", 0}},
     "2 3"},
};

static void run_judge_case(const struct judge_case *c)
{
    struct reorder_accept a;
    reorder_accept_init(&a);
    for (size_t i = 0; i < sizeof c->steps / sizeof c->steps[0] && c->steps[i].op; i++) {
        const struct judge_step *s = &c->steps[i];
        char kind;
        unsigned long long x, y = 0;
        assert_true(sscanf(s->op, "%c %llu %llu", &kind, &x, &y) >= 2);
        char got[8] = "";
        if (kind == 'r' || kind == 'R') {
            int v = reorder_judge(&a, x, y, kind == 'r');
            snprintf(got, sizeof got, "%c", "DALX"[v]);
        } else if (kind == 'e') {
            int rc = reorder_end(&a, x, y, 7, 1000 + i);
            snprintf(got, sizeof got, "%s", rc == SLUICE_ERR_CORRUPT ? "C" : rc ? "1" : "0");
        } else {
            reorder_accept_floor(&a, x);
        }
        uint64_t need = reorder_advance(&a);
        if (strcmp(got, s->want) != 0 || need != s->need)
            fail_msg("%s, step %zu (%s): got %s need %" PRIu64 ", want %s need %" PRIu64, c->name,
                     i, s->op, got, need, s->want, s->need);
    }
    uint64_t due[16], task[16], end_ms[16];
    size_t n = reorder_redo_due(&a, true, due, task, end_ms, 16);
    char got[64] = "";
    for (size_t k = 0; k < n; k++) {
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRIu64, k ? " " : "", due[k]);
        assert_int_equal(task[k], 7); /* the production whose end left it short */
        assert_in_range(end_ms[k], 1000, 1000 + 16);
    }
    if (strcmp(got, c->redo) != 0)
        fail_msg("%s: redo due '%s', want '%s'", c->name, got, c->redo);
    /* Taken once: not due again until the request fails. */
    assert_int_equal(reorder_redo_due(&a, true, due, task, end_ms, 16), 0);
    reorder_redo_failed(&a, due, n);
    reorder_accept_release(&a);
}

static void test_judge_cases(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof judge_cases / sizeof judge_cases[0]; i++)
        run_judge_case(&judge_cases[i]);
}

static void test_redo_waits_for_room(void **unused)
{
    (void)unused;
    struct reorder_accept a;
    reorder_accept_init(&a);
    assert_int_equal(reorder_judge(&a, 1, 1, true), REORDER_DROP);
    assert_int_equal(reorder_end(&a, 1, 2, 3, 50), 0);
    uint64_t due[4], task[4], end_ms[4];
    /* No room: only need's redo is asked for, and split 1 is not need. */
    assert_int_equal(reorder_redo_due(&a, false, due, task, end_ms, 4), 0);
    assert_false(reorder_need_redo(&a));
    assert_int_equal(reorder_end(&a, 0, 0, 4, 60), 1);
    assert_int_equal(reorder_advance(&a), 1);
    assert_true(reorder_need_redo(&a));
    assert_int_equal(reorder_redo_due(&a, false, due, task, end_ms, 4), 1);
    assert_int_equal(due[0], 1);
    assert_int_equal(task[0], 3);
    assert_int_equal(end_ms[0], 50);
    /* The heartbeat failed: due again, about the same production. */
    reorder_redo_failed(&a, due, 1);
    assert_int_equal(reorder_redo_due(&a, false, due, task, end_ms, 4), 1);
    assert_int_equal(task[0], 3);
    assert_int_equal(end_ms[0], 50);
    /* The next production (of task 5) ends short too: the request is about that one. */
    assert_int_equal(reorder_end(&a, 1, 2, 5, 90), 0);
    assert_int_equal(reorder_redo_due(&a, false, due, task, end_ms, 4), 1);
    assert_int_equal(task[0], 5);
    assert_int_equal(end_ms[0], 90);
    reorder_accept_release(&a);
}

/* ---- the queue ------------------------------------------------------------------------------- */

static struct reorder_blob *blob_of(size_t len)
{
    struct prefetch_item item = {0};
    item.data = malloc(len);
    assert_non_null(item.data);
    memset(item.data, 0, len);
    item.len = len;
    struct reorder_blob *b = reorder_blob_new(&item);
    assert_non_null(b);
    assert_null(item.data);
    return b;
}

/* Takes every run the reader can take now, writing "seq:begin" of each (by the blob's index in
 * blobs) to out, and finishing them. Returns how many blobs were freed. */
static int take_all(struct reorder_queue *q, struct reorder_blob **blobs, size_t nblobs, char *out,
                    size_t len)
{
    struct reorder_run run;
    int freed = 0;
    out[0] = '\0';
    while (reorder_queue_take(q, &run)) {
        size_t b = 0;
        while (b < nblobs && blobs[b] != run.blob)
            b++;
        assert_true(b < nblobs);
        snprintf(out + strlen(out), len - strlen(out), "%s%zu@%zu", out[0] ? " " : "", b,
                 run.begin);
        struct reorder_blob *done = reorder_queue_done(q, run.blob);
        if (done) {
            blobs[b] = NULL;
            reorder_blob_free(done);
            freed++;
        }
    }
    return freed;
}

static void test_queue_order(void **unused)
{
    (void)unused;
    struct reorder_queue q;
    reorder_queue_init(&q, 1000);
    struct reorder_blob *b[3] = {blob_of(100), blob_of(200), blob_of(300)};
    char got[256];
    assert_true(reorder_queue_starved(&q));
    /* Split 1 arrives first (blob 0), then split 0 in two blobs. */
    assert_int_equal(reorder_queue_push(&q, 1, b[0], 0, 50, 5), 0);
    assert_int_equal(reorder_queue_push(&q, 1, b[0], 50, 100, 5), 0);
    assert_int_equal(reorder_queue_complete(&q, 1, 10), 0);
    assert_int_equal(q.bytes, 100);
    assert_true(reorder_queue_starved(&q));
    assert_int_equal(take_all(&q, b, 3, got, sizeof got), 0);
    assert_string_equal(got, "");
    assert_int_equal(reorder_queue_push(&q, 0, b[1], 10, 20, 1), 0);
    assert_int_equal(q.bytes, 300);
    assert_true(reorder_queue_ahead(&q, 10, UINT64_MAX));
    assert_false(reorder_queue_ahead(&q, 11, UINT64_MAX)); /* split 0 is not complete: 1 waits */
    /* The element bound: one record of split 0 can be read now, not two. */
    assert_true(reorder_queue_ahead(&q, 1000, 1));
    assert_false(reorder_queue_ahead(&q, 1000, 2));
    assert_int_equal(take_all(&q, b, 3, got, sizeof got), 1);
    assert_string_equal(got, "1@10");
    assert_int_equal(q.bytes, 100);
    assert_int_equal(reorder_queue_push(&q, 0, b[2], 0, 300, 3), 0);
    assert_int_equal(reorder_queue_complete(&q, 0, 4), 0);
    assert_true(reorder_queue_ahead(&q, 400, UINT64_MAX));
    /* Splits 0 (3 records here) and 1 (10) in order: 13 records, 400 bytes. */
    assert_true(reorder_queue_ahead(&q, 1000, 13));
    assert_false(reorder_queue_ahead(&q, 1000, 14));
    assert_false(reorder_queue_ahead(&q, 401, UINT64_MAX));
    assert_int_equal(take_all(&q, b, 3, got, sizeof got), 2);
    assert_string_equal(got, "2@0 0@0 0@50");
    assert_int_equal(q.head, 2);
    assert_int_equal(q.bytes, 0);
    size_t npassed;
    const struct reorder_passed *passed = reorder_queue_passed(&q, &npassed);
    assert_int_equal(npassed, 2);
    assert_true(passed[0].seq == 0 && passed[0].total == 4);
    assert_true(passed[1].seq == 1 && passed[1].total == 10);
    reorder_queue_passed(&q, &npassed);
    assert_int_equal(npassed, 0);
    /* Runs of splits already read are not kept. */
    struct reorder_blob *late = blob_of(10);
    assert_int_equal(reorder_queue_push(&q, 1, late, 0, 10, 1), 0);
    assert_int_equal(late->refs, 0);
    reorder_blob_free(late);
    reorder_queue_release(&q);
}

static void test_queue_room(void **unused)
{
    (void)unused;
    struct reorder_queue q;
    reorder_queue_init(&q, 250);
    struct reorder_blob *b[2] = {blob_of(200), blob_of(100)};
    assert_true(reorder_queue_room(&q));
    assert_int_equal(reorder_queue_push(&q, 3, b[0], 0, 200, 2), 0);
    assert_true(reorder_queue_room(&q));
    assert_int_equal(reorder_queue_push(&q, 4, b[1], 0, 100, 1), 0);
    assert_false(reorder_queue_room(&q));
    /* Released with its runs unread: every blob is freed (ASan checks). */
    reorder_queue_release(&q);
}

static void test_queue_skips(void **unused)
{
    (void)unused;
    struct reorder_queue q;
    reorder_queue_init(&q, 1000);
    struct reorder_blob *b[3] = {blob_of(10), blob_of(10), blob_of(10)};
    char got[256];
    /* Split 0 partly here, 1 missing, 2 and 5 here: finished elsewhere below 3. */
    assert_int_equal(reorder_queue_push(&q, 0, b[0], 0, 10, 1), 0);
    assert_int_equal(reorder_queue_push(&q, 2, b[1], 0, 10, 1), 0);
    assert_int_equal(reorder_queue_push(&q, 5, b[2], 0, 10, 1), 0);
    assert_int_equal(take_all(&q, b, 3, got, sizeof got), 1);
    assert_string_equal(got, "0@0");
    assert_int_equal(q.head, 0);
    q.skip_below = 3;
    assert_int_equal(take_all(&q, b, 3, got, sizeof got), 1);
    assert_string_equal(got, "1@0");
    assert_int_equal(q.head, 3);
    assert_true(reorder_queue_starved(&q));
    /* The read ended: what is left is read, the gaps passed over. */
    q.ended = true;
    assert_int_equal(take_all(&q, b, 3, got, sizeof got), 1);
    assert_string_equal(got, "2@0");
    assert_int_equal(q.n, 0);
    assert_int_equal(q.head, 6);
    assert_true(reorder_queue_starved(&q));
    reorder_queue_release(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge_cases), cmocka_unit_test(test_redo_waits_for_room),
        cmocka_unit_test(test_queue_order), cmocka_unit_test(test_queue_room),
        cmocka_unit_test(test_queue_skips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
