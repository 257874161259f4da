/* The client's task set: keeping in step with the dispatcher's lists, dropping tasks only once
 * drained, the round-robin and coordinated choices, backoff, the end condition, and which
 * failures are retried. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "client/retry.h"
#include "client/tasks.h"
#include "common/error.h"

/* A fake connection handle: the set only stores it. */
static int conn_a, conn_b;

static void attach_all(struct tasks_set *s, void *conn)
{
    for (size_t i = 0; i < s->n; i++)
        if (!s->v[i].conn)
            s->v[i].conn = conn;
}

static void apply_at(struct tasks_set *s, const uint64_t *ids, size_t n, bool finished,
                     uint64_t now)
{
    struct tasks_info infos[16];
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++)
        infos[i] = (struct tasks_info){ids[i], ids[i] % 2 ? "w1:1" : "w2:2", 7};
    assert_int_equal(tasks_reconcile(s, infos, n, finished, now), 0);
}

static void apply(struct tasks_set *s, const uint64_t *ids, size_t n, bool finished)
{
    apply_at(s, ids, n, finished, 0);
}

static long pick(const struct tasks_set *s, uint64_t now)
{
    uint64_t wake;
    return tasks_pick(s, now, &wake);
}

static uint64_t picked_id(const struct tasks_set *s, uint64_t now)
{
    long i = pick(s, now);
    assert_true(i >= 0);
    return s->v[i].id;
}

static void send_to(struct tasks_set *s, uint64_t id)
{
    long i = tasks_find(s, id);
    assert_true(i >= 0);
    tasks_sent(s, (size_t)i);
}

static void test_reconcile_adds_sorted(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 2);
    const uint64_t ids[] = {30, 10, 20};
    apply(&s, ids, 3, false);
    assert_int_equal(s.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(s.v[i].id, 10 * (i + 1));
        assert_true(s.v[i].listed);
        assert_false(s.v[i].ended);
        assert_null(s.v[i].conn);
        assert_int_equal(s.v[i].worker_incarnation, 7);
    }
    assert_string_equal(s.v[0].address, "w2:2");
    assert_true(s.have_list);
    assert_false(s.iteration_finished);
    assert_int_equal(tasks_find(&s, 20), 1);
    assert_int_equal(tasks_find(&s, 25), -1);
    /* Nothing is connected yet, so nothing can be asked. */
    assert_int_equal(pick(&s, 0), -1);

    /* The same list again changes nothing but the finished flag. */
    s.v[1].conn = &conn_a;
    apply(&s, ids, 3, true);
    assert_int_equal(s.n, 3);
    assert_ptr_equal(s.v[1].conn, &conn_a);
    assert_true(s.iteration_finished);
    tasks_release(&s);
}

static void test_reconcile_refuses_bad_lists(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 2);
    const uint64_t ids[] = {1, 2};
    apply(&s, ids, 2, false);

    struct tasks_info dup[] = {{5, "a:1", 1}, {3, "b:1", 1}, {5, "c:1", 1}};
    assert_int_equal(tasks_reconcile(&s, dup, 3, true, 0), SLUICE_ERR_INVALID);
    char long_addr[TASKS_ADDR_MAX + 1];
    memset(long_addr, 'x', TASKS_ADDR_MAX);
    long_addr[TASKS_ADDR_MAX] = '\0';
    struct tasks_info big[] = {{9, long_addr, 1}};
    assert_int_equal(tasks_reconcile(&s, big, 1, true, 0), SLUICE_ERR_INVALID);
    struct tasks_info none[] = {{9, NULL, 1}};
    assert_int_equal(tasks_reconcile(&s, none, 1, true, 0), SLUICE_ERR_INVALID);

    /* A refused list leaves the set exactly as it was. */
    assert_int_equal(s.n, 2);
    assert_true(s.v[0].listed && s.v[1].listed);
    assert_false(s.iteration_finished);
    tasks_release(&s);
}

static void test_unlisted_tasks_leave_once_drained(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 2);
    const uint64_t ids[] = {1, 2, 3};
    apply(&s, ids, 3, false);
    s.v[0].conn = &conn_a;
    s.v[1].conn = &conn_b;
    s.v[2].conn = &conn_a;
    send_to(&s, 2);
    send_to(&s, 2);

    const uint64_t only3[] = {3};
    apply(&s, only3, 1, false);
    struct tasks_task t;
    /* Task 1 has nothing outstanding and goes at once, handing back its connection. */
    assert_true(tasks_reap(&s, &t));
    assert_int_equal(t.id, 1);
    assert_ptr_equal(t.conn, &conn_a);
    /* Task 2 waits for its two replies, and gets no new request meanwhile. */
    assert_false(tasks_reap(&s, &t));
    assert_int_equal(s.n, 2);
    assert_int_equal(picked_id(&s, 0), 3);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 2), 5, false, 0);
    assert_false(tasks_reap(&s, &t));
    tasks_on_failure(&s, (size_t)tasks_find(&s, 2), 0);
    assert_true(tasks_reap(&s, &t));
    assert_int_equal(t.id, 2);
    assert_int_equal(t.elements, 5);
    assert_ptr_equal(t.conn, &conn_b);
    assert_false(tasks_reap(&s, &t));
    assert_int_equal(s.n, 1);
    tasks_release(&s);
}

static void test_relisted_task_keeps_state(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 1);
    const uint64_t ids[] = {4, 8};
    apply(&s, ids, 2, false);
    attach_all(&s, &conn_a);
    send_to(&s, 8);
    tasks_on_reply(&s, 1, 3, true, 0);
    send_to(&s, 4);
    const uint64_t only8[] = {8};
    apply(&s, only8, 1, false);
    /* 4 still has a request out, so it is kept; when listed again it carries on. */
    apply(&s, ids, 2, false);
    struct tasks_task t;
    assert_false(tasks_reap(&s, &t));
    assert_true(s.v[0].listed);
    assert_int_equal(s.v[0].outstanding, 1);
    assert_true(s.v[1].ended);
    assert_ptr_equal(s.v[1].conn, &conn_a);
    tasks_release(&s);
}

static void test_round_robin(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 2);
    const uint64_t ids[] = {1, 2, 3};
    apply(&s, ids, 3, false);
    attach_all(&s, &conn_a);

    const uint64_t expect[] = {1, 2, 3, 1, 2, 3};
    for (size_t k = 0; k < 6; k++) {
        uint64_t id = picked_id(&s, 0);
        assert_int_equal(id, expect[k]);
        send_to(&s, id);
    }
    /* Every task has per_task_max requests out. */
    assert_int_equal(pick(&s, 0), -1);
    assert_int_equal(tasks_outstanding(&s), 6);
    /* A reply frees a place at that task only; the search goes on after the last one sent. */
    tasks_on_reply(&s, 1, 10, false, 0);
    assert_int_equal(picked_id(&s, 0), 2);
    send_to(&s, 2);
    tasks_on_reply(&s, 0, 10, false, 0);
    tasks_on_reply(&s, 2, 10, false, 0);
    assert_int_equal(picked_id(&s, 0), 3);
    send_to(&s, 3);
    assert_int_equal(picked_id(&s, 0), 1);
    tasks_release(&s);
}

static void test_pick_skips_what_cannot_be_asked(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 2);
    const uint64_t ids[] = {1, 2, 3, 4, 5};
    apply(&s, ids, 5, false);
    s.v[0].conn = &conn_a; /* 1: ended */
    s.v[1].conn = NULL;    /* 2: no connection yet */
    s.v[2].conn = &conn_a; /* 3: backing off until 120 */
    s.v[3].conn = &conn_a; /* 4: backing off until 150 */
    s.v[4].conn = &conn_b; /* 5: unlisted below */
    send_to(&s, 1);
    tasks_on_reply(&s, 0, 0, true, 0);
    send_to(&s, 3);
    tasks_on_failure(&s, 2, 20);
    send_to(&s, 4);
    tasks_on_failure(&s, 3, 20);
    send_to(&s, 4);
    tasks_on_failure(&s, 3, 50);
    send_to(&s, 5);
    const uint64_t without5[] = {1, 2, 3, 4};
    apply(&s, without5, 4, false);

    uint64_t wake = 99;
    assert_int_equal(tasks_pick(&s, 100, &wake), -1);
    assert_int_equal(wake, 120);
    assert_int_equal(tasks_pick(&s, 120, &wake), 2);
    assert_int_equal(wake, 0);
    s.v[2].ended = true;
    assert_int_equal(tasks_pick(&s, 120, &wake), -1);
    assert_int_equal(wake, 250);
    assert_int_equal(tasks_pick(&s, 250, &wake), 3);
    tasks_release(&s);
}

/* A deferred task is skipped until its time while the others are picked; the deferral never
 * shortens a backoff, and a reply with elements clears it. */
static void test_defer(void **state)
{
    (void)state;
    struct tasks_set s;
    tasks_init(&s, false, 2);
    const uint64_t ids[] = {1, 2};
    apply(&s, ids, 2, false);
    attach_all(&s, &conn_a);
    uint64_t wake = 99;
    tasks_defer(&s, 0, 12);
    assert_int_equal(picked_id(&s, 10), 2);
    send_to(&s, 2);
    send_to(&s, 2);
    assert_int_equal(tasks_pick(&s, 10, &wake), -1);
    assert_int_equal(wake, 12);
    assert_int_equal(tasks_pick(&s, 12, &wake), 0);
    assert_int_equal(wake, 0);
    /* A failure's backoff is not cut short by a shorter deferral. */
    send_to(&s, 1);
    tasks_on_failure(&s, 0, 20);
    uint64_t backoff = s.v[0].not_before;
    assert_true(backoff > 22);
    tasks_defer(&s, 0, 22);
    assert_int_equal(s.v[0].not_before, backoff);
    /* Elements from the task clear it. */
    tasks_defer(&s, 0, 1000);
    send_to(&s, 1);
    tasks_on_reply(&s, 0, 3, false, 40);
    assert_int_equal(tasks_pick(&s, 40, &wake), 0);
    tasks_release(&s);
}

static void test_backoff_grows_and_resets(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 1);
    const uint64_t ids[] = {1};
    apply(&s, ids, 1, false);
    attach_all(&s, &conn_a);

    /* Empty replies: 1, 2, 4, ..., capped at TASKS_EMPTY_MAX_MS. */
    const uint64_t empty_delays[] = {1, 2, 4, 8, 16, 32, 50, 50};
    uint64_t now = 1000;
    for (size_t k = 0; k < sizeof empty_delays / sizeof *empty_delays; k++) {
        send_to(&s, 1);
        tasks_on_reply(&s, 0, 0, false, now);
        assert_int_equal(s.v[0].not_before, now + empty_delays[k]);
        assert_int_equal(pick(&s, now + empty_delays[k] - 1), -1);
        assert_int_equal(pick(&s, now + empty_delays[k]), 0);
        now += 100;
    }
    /* Failures: 100, 200, ..., capped at TASKS_FAIL_MAX_MS; the empty streak is kept apart. */
    const uint64_t fail_delays[] = {100, 200, 400, 800, 1600, 2000, 2000};
    for (size_t k = 0; k < sizeof fail_delays / sizeof *fail_delays; k++) {
        send_to(&s, 1);
        tasks_on_failure(&s, 0, now);
        assert_int_equal(s.v[0].not_before, now + fail_delays[k]);
        now += 5000;
    }
    /* A reply with elements clears both. */
    send_to(&s, 1);
    tasks_on_reply(&s, 0, 3, false, now);
    assert_int_equal(s.v[0].not_before, 0);
    assert_int_equal(s.v[0].empty_streak, 0);
    assert_int_equal(s.v[0].fail_streak, 0);
    send_to(&s, 1);
    tasks_on_reply(&s, 0, 0, false, now);
    assert_int_equal(s.v[0].not_before, now + 1);
    send_to(&s, 1);
    tasks_on_failure(&s, 0, now);
    assert_int_equal(s.v[0].not_before, now + 100);
    /* An empty reply that is the end needs no wait. */
    send_to(&s, 1);
    tasks_on_reply(&s, 0, 0, true, now);
    assert_true(s.v[0].ended);
    tasks_release(&s);
}

/* Applies a schedule of up to 4 epochs written as {start, ntasks, task...}. */
static void schedule(struct tasks_set *s, const uint64_t *spec, size_t nepochs, uint64_t granted)
{
    struct tasks_epoch e[4];
    assert_true(nepochs <= 4);
    for (size_t k = 0; k < nepochs; k++) {
        e[k].start = spec[0];
        e[k].ntasks = spec[1];
        e[k].tasks = (uint64_t *)&spec[2];
        spec += 2 + spec[1];
    }
    assert_int_equal(tasks_schedule(s, e, nepochs, granted), 0);
}

/* Reads the round the set stands at from its task, which delivers its element. */
static uint64_t read_round(struct tasks_set *s)
{
    assert_int_equal(tasks_advance(s), TASKS_ROUND_TASK);
    uint64_t id = picked_id(s, 1000);
    assert_int_equal(id, s->round_task);
    send_to(s, id);
    tasks_on_reply(s, (size_t)tasks_find(s, id), 1, false, 1000);
    return id;
}

static void test_coordinated_schedule(void **state)
{
    struct tasks_set s;
    tasks_init(&s, true, 4);
    const uint64_t ids[] = {7, 3, 5};
    apply(&s, ids, 3, false);
    attach_all(&s, &conn_a);
    /* No schedule yet: nothing is asked. */
    assert_int_equal(tasks_advance(&s), TASKS_ROUND_SCHEDULE);
    assert_int_equal(pick(&s, 0), -1);

    /* Rounds 0..9 granted, served by 3, 5, 7 in turn. */
    const uint64_t one[] = {0, 3, 3, 5, 7};
    schedule(&s, one, 1, 10);
    assert_int_equal(s.span, 10);
    assert_int_equal(tasks_advance(&s), TASKS_ROUND_TASK);
    assert_int_equal(s.round_task, 3);
    send_to(&s, 3);
    /* One request at a time. */
    assert_int_equal(pick(&s, 0), -1);
    /* An empty reply keeps the round: it is asked again after a short backoff. */
    tasks_on_reply(&s, (size_t)tasks_find(&s, 3), 0, false, 10);
    assert_int_equal(tasks_advance(&s), TASKS_ROUND_TASK);
    assert_int_equal(pick(&s, 10), -1);
    assert_int_equal(picked_id(&s, 11), 3);
    send_to(&s, 3);
    tasks_on_failure(&s, (size_t)tasks_find(&s, 3), 11);
    assert_int_equal(pick(&s, 50), -1);
    assert_int_equal(picked_id(&s, 111), 3);
    assert_int_equal(s.round, 0);
    send_to(&s, 3);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 3), 1, false, 111);
    assert_int_equal(s.round, 1);
    const uint64_t order[] = {5, 7, 3, 5, 7, 3, 5, 7, 3};
    for (size_t k = 0; k < 9; k++)
        assert_int_equal(read_round(&s), order[k]);
    /* Round 10 is not granted: wait for the dispatcher rather than guess. */
    assert_int_equal(tasks_advance(&s), TASKS_ROUND_GRANT);
    assert_int_equal(pick(&s, 1000), -1);

    /* Task 4 joins at round 12 (the grant when the dispatcher decided); 5 leaves there too. */
    const uint64_t two[] = {0, 3, 3, 5, 7, 12, 3, 3, 4, 7};
    const uint64_t more[] = {7, 3, 5, 4};
    apply(&s, more, 4, false);
    attach_all(&s, &conn_b);
    schedule(&s, two, 2, 20);
    const uint64_t order2[] = {5, 7, 3, 4, 7, 3, 4, 7};
    for (size_t k = 0; k < 8; k++)
        assert_int_equal(read_round(&s), order2[k]);
    assert_int_equal(s.round, 18);
    assert_int_equal(s.skipped, 0);

    /* 7 is gone (removed by the dispatcher): its rounds are skipped, the others' are read. */
    const uint64_t less[] = {3, 4, 5};
    apply(&s, less, 3, false);
    struct tasks_task reaped;
    assert_true(tasks_reap(&s, &reaped));
    assert_int_equal(reaped.id, 7);
    assert_int_equal(read_round(&s), 3); /* round 18 */
    assert_int_equal(read_round(&s), 4); /* round 19; 20 would be 7's */
    assert_int_equal(tasks_advance(&s), TASKS_ROUND_GRANT);
    schedule(&s, two, 2, 30);
    assert_int_equal(read_round(&s), 3); /* round 21 */
    assert_int_equal(s.skipped, 1);

    /* A task that ended is skipped too; an epoch none of whose tasks serves is passed to the
     * next one, or waited on when it is the last. */
    send_to(&s, 4);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 4), 0, true, 1000);
    assert_int_equal(read_round(&s), 3); /* round 24: 22 was 4's, 23 7's */
    const uint64_t three[] = {12, 3, 3, 4, 7, 30, 0, 40, 1, 5};
    schedule(&s, three, 3, 50);
    assert_int_equal(read_round(&s), 3); /* round 27: 25 was 4's, 26 7's */
    send_to(&s, 3);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 3), 0, true, 1000);
    /* Rounds 28 and 29 were 4's and 7's, and the epoch at 30 has no task: on to 40. */
    assert_int_equal(read_round(&s), 5);
    assert_int_equal(s.round, 41);
    assert_int_equal(s.skipped, 1 + 2 + 2 + 2 + 10);
    send_to(&s, 5);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 5), 0, true, 1000);
    assert_int_equal(tasks_advance(&s), TASKS_ROUND_SCHEDULE);
    assert_int_equal(s.round, 41);

    /* A round before every epoch the dispatcher keeps: the consumer fell too far behind. */
    const uint64_t later[] = {100, 1, 5};
    schedule(&s, later, 1, 200);
    assert_int_equal(tasks_advance(&s), TASKS_ROUND_BEHIND);
    /* Epochs out of order are refused, the set unchanged. */
    struct tasks_epoch bad[2] = {{.start = 5}, {.start = 5}};
    assert_int_equal(tasks_schedule(&s, bad, 2, 300), SLUICE_ERR_INVALID);
    assert_int_equal(s.granted, 200);
    tasks_release(&s);
}

static void test_done_and_active(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 2);
    assert_false(tasks_done(&s));
    assert_false(tasks_active(&s));
    /* No task listed yet (a job waiting for its first worker): nothing has ended. */
    assert_int_equal(tasks_reconcile(&s, NULL, 0, false, 0), 0);
    assert_false(tasks_active(&s));
    assert_false(tasks_all_ended(&s));
    /* A finished iteration with no tasks is done. */
    assert_int_equal(tasks_reconcile(&s, NULL, 0, true, 0), 0);
    assert_true(tasks_done(&s));

    const uint64_t ids[] = {1, 2};
    apply(&s, ids, 2, false);
    attach_all(&s, &conn_a);
    assert_true(tasks_active(&s));
    send_to(&s, 1);
    tasks_on_reply(&s, 0, 2, true, 0);
    send_to(&s, 2);
    send_to(&s, 2);
    tasks_on_reply(&s, 1, 2, true, 0);
    assert_false(tasks_active(&s));
    assert_true(tasks_all_ended(&s));
    /* Both ended, but the dispatcher has not said the iteration is finished. */
    assert_false(tasks_done(&s));
    apply(&s, ids, 2, true);
    /* And one request of task 2 is still out. */
    assert_false(tasks_done(&s));
    tasks_on_reply(&s, 1, 0, true, 0);
    assert_true(tasks_done(&s));

    /* An unlisted task that never ended does not hold the end back. */
    const uint64_t with3[] = {1, 2, 3};
    apply(&s, with3, 3, false);
    assert_true(tasks_active(&s));
    assert_false(tasks_all_ended(&s));
    apply(&s, ids, 2, true);
    assert_false(tasks_active(&s));
    assert_true(tasks_done(&s));

    /* An unlisted task with a request out holds the end back: the reply may bring elements the
     * dispatcher counts as delivered. */
    const uint64_t with4[] = {1, 2, 4};
    apply(&s, with4, 3, false);
    attach_all(&s, &conn_a);
    send_to(&s, 4);
    apply(&s, ids, 2, true);
    assert_false(tasks_done(&s));
    tasks_on_reply(&s, (size_t)tasks_find(&s, 4), 3, false, 0);
    assert_true(tasks_done(&s));
    tasks_release(&s);
}

static void test_finished_ids(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 1);
    const uint64_t ids[] = {2, 4, 6, 8};
    apply(&s, ids, 4, false);
    attach_all(&s, &conn_a);
    uint64_t out[4] = {0};
    assert_int_equal(tasks_finished_ids(&s, out, 4), 0);
    for (size_t i = 0; i < 4; i += 2) {
        tasks_sent(&s, i + 1);
        tasks_on_reply(&s, i + 1, 0, true, 0);
    }
    assert_int_equal(tasks_finished_ids(&s, out, 4), 2);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 8);
    memset(out, 0, sizeof out);
    assert_int_equal(tasks_finished_ids(&s, out, 1), 2);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 0);
    assert_int_equal(tasks_finished_ids(&s, NULL, 0), 2);
    tasks_release(&s);
}

static void test_listed_at_is_first_listing(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 1);
    const uint64_t first[] = {1};
    apply_at(&s, first, 1, false, 100);
    const uint64_t both[] = {1, 2};
    apply_at(&s, both, 2, false, 250);
    assert_int_equal(s.v[0].listed_at, 100);
    assert_int_equal(s.v[1].listed_at, 250);
    /* Unlisted and listed again before it left: still the first time. */
    apply_at(&s, first, 1, false, 300);
    s.v[1].outstanding = 1;
    apply_at(&s, both, 2, false, 400);
    assert_int_equal(s.v[1].listed_at, 250);
    tasks_release(&s);
}

static void test_errors_wait_for_a_later_heartbeat(void **state)
{
    struct tasks_set s;
    tasks_init(&s, false, 1);
    const uint64_t ids[] = {1, 2, 3};
    apply(&s, ids, 3, false);
    attach_all(&s, &conn_a);
    assert_int_equal(tasks_confirmed_error(&s, 100), -1);

    /* Recorded while heartbeat 4 was under way: its reply does not confirm, 5's does. */
    tasks_set_error(&s, 1, SLUICE_ERR_NOT_FOUND, "task 2 not found", 4);
    assert_int_equal(tasks_confirmed_error(&s, 4), -1);
    assert_int_equal(tasks_confirmed_error(&s, 5), 1);
    assert_int_equal(s.v[1].error, SLUICE_ERR_NOT_FOUND);
    assert_string_equal(s.v[1].error_msg, "task 2 not found");
    /* The first error stays. */
    tasks_set_error(&s, 1, SLUICE_ERR_FN, "other", 9);
    assert_int_equal(s.v[1].error_mark, 4);
    assert_string_equal(s.v[1].error_msg, "task 2 not found");

    /* A task the list dropped confirms nothing. */
    const uint64_t without2[] = {1, 3};
    apply(&s, without2, 2, false);
    assert_int_equal(tasks_confirmed_error(&s, 5), -1);
    apply(&s, ids, 3, false);
    assert_int_equal(tasks_confirmed_error(&s, 5), 1);

    /* Elements or the end clear it; an empty reply does not. */
    tasks_sent(&s, 1);
    tasks_on_reply(&s, 1, 0, false, 0);
    assert_int_equal(tasks_confirmed_error(&s, 5), 1);
    tasks_sent(&s, 1);
    tasks_on_reply(&s, 1, 2, false, 0);
    assert_int_equal(tasks_confirmed_error(&s, 5), -1);
    tasks_set_error(&s, 2, SLUICE_ERR_NOT_FOUND, NULL, 6);
    assert_string_equal(s.v[2].error_msg, "");
    tasks_sent(&s, 2);
    tasks_on_reply(&s, 2, 0, true, 0);
    assert_int_equal(tasks_confirmed_error(&s, 7), -1);

    /* Long messages are cut to fit. */
    char msg[SLUICE_ERRMSG_SIZE + 100];
    memset(msg, 'm', sizeof msg - 1);
    msg[sizeof msg - 1] = '\0';
    tasks_set_error(&s, 0, SLUICE_ERR_NOT_FOUND, msg, 1);
    assert_int_equal(strlen(s.v[0].error_msg), sizeof s.v[0].error_msg - 1);
    tasks_release(&s);
}

static void test_retry_classes(void **state)
{
    static const struct {
        int code;
        bool transient, task;
    } cases[] = {
        {SLUICE_ERR_UNAVAILABLE, true, true},
        {SLUICE_ERR_TIMEOUT, true, true},
        {-111 /* ECONNREFUSED */, true, true},
        {-104 /* ECONNRESET */, true, true},
        {-4095, true, true},
        {SLUICE_ERR_NOT_FOUND, false, false},
        {SLUICE_ERR_TASK_FAILED, false, false},
        {SLUICE_ERR_CLOSED, false, true},
        {SLUICE_ERR_CANCELLED, false, true},
        {SLUICE_ERR_RESTARTED, false, true},
        {SLUICE_ERR_FN, false, false},
        {SLUICE_ERR_PROTOCOL, false, false},
        {SLUICE_ERR_VERSION, false, false},
        {SLUICE_ERR_EXISTS, false, false},
        {SLUICE_ERR_CORRUPT, false, false},
        {SLUICE_ERR_INVALID, false, false},
        {-5000, false, false},
        {0, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_int_equal(retry_transient(cases[i].code), cases[i].transient);
        assert_int_equal(retry_task(cases[i].code), cases[i].task);
    }
}

/* Each task's capability comes with the list and is kept with the task; a key too long for the
 * set refuses the whole list. */
static void test_task_keys_follow_the_list(void **state)
{
    (void)state;
    struct tasks_set s;
    tasks_init(&s, false, 1);
    const uint8_t k1[16] = "capability one..", k2[16] = "capability two..";
    struct tasks_info infos[2] = {{1, "w1:1", 7, k1, 16}, {2, "w2:2", 7, NULL, 0}};
    assert_int_equal(tasks_reconcile(&s, infos, 2, false, 0), 0);
    assert_int_equal(s.v[0].key_len, 16);
    assert_memory_equal(s.v[0].key, k1, 16);
    assert_int_equal(s.v[1].key_len, 0);
    infos[1].key = k2;
    infos[1].key_len = 16;
    assert_int_equal(tasks_reconcile(&s, infos, 2, false, 0), 0);
    assert_memory_equal(s.v[1].key, k2, 16);
    uint8_t big[TASKS_KEY_MAX + 1] = {0};
    infos[0].key = big;
    infos[0].key_len = sizeof big;
    assert_int_equal(tasks_reconcile(&s, infos, 2, false, 0), SLUICE_ERR_INVALID);
    assert_memory_equal(s.v[0].key, k1, 16);
    tasks_release(&s);
}

/* Whole copies are accounted for exactly: a task's end of sequence carries what its worker sent
 * this reader, and anything else than exactly that many received fails the read, naming the task,
 * its worker and both counts. A task that leaves mid-copy after sending something fails it too;
 * one that sent nothing, or ended, does not. */
static void test_copy_accounting(void **state)
{
    (void)state;
    struct tasks_set s;
    tasks_init(&s, false, 2);
    const uint64_t ids[] = {3, 4, 5};
    apply(&s, ids, 3, false);
    attach_all(&s, &conn_a);
    char msg[256];
    /* Task 3: 155040 elements arrive in two replies, its worker says it sent 200000. */
    send_to(&s, 3);
    send_to(&s, 3);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 3), 100000, false, 0);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 3), 55040, false, 0);
    send_to(&s, 3);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 3), 0, true, 0);
    const struct tasks_task *t3 = &s.v[tasks_find(&s, 3)];
    assert_int_equal(tasks_check_end(t3, 200000, msg, sizeof msg), SLUICE_ERR_TRUNCATED);
    assert_string_equal(msg, "task 3 on worker w1:1: received 155040 of 200000 elements");
    assert_int_equal(tasks_check_end(t3, 155040, msg, sizeof msg), 0);
    /* More than was sent is no less wrong. */
    assert_int_equal(tasks_check_end(t3, 155039, msg, sizeof msg), SLUICE_ERR_TRUNCATED);
    assert_string_equal(msg, "task 3 on worker w1:1: received 155040 of 155039 elements");
    /* An empty copy that says so is complete. */
    send_to(&s, 4);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 4), 0, true, 0);
    assert_int_equal(tasks_check_end(&s.v[tasks_find(&s, 4)], 0, msg, sizeof msg), 0);
    /* Task 5 sent 7 elements and then its worker was lost: the set drops it unended. */
    send_to(&s, 5);
    tasks_on_reply(&s, (size_t)tasks_find(&s, 5), 7, false, 0);
    const uint64_t only34[] = {3, 4};
    send_to(&s, 5);
    apply(&s, only34, 2, true);
    /* Its last request is still out: it stays, and the read is not over while it does. */
    assert_true(tasks_unlisted(&s));
    struct tasks_task gone;
    assert_false(tasks_reap(&s, &gone));
    tasks_on_failure(&s, (size_t)tasks_find(&s, 5), 0);
    assert_true(tasks_reap(&s, &gone));
    assert_int_equal(gone.id, 5);
    assert_false(tasks_unlisted(&s));
    assert_int_equal(tasks_check_gone(&gone, msg, sizeof msg), SLUICE_ERR_TRUNCATED);
    assert_string_equal(msg, "task 5 on worker w1:1: the worker was lost after 7 elements: its "
                             "copy is incomplete");
    /* Ended tasks and tasks that sent nothing leave nothing half-read. */
    assert_int_equal(tasks_check_gone(&s.v[tasks_find(&s, 3)], msg, sizeof msg), 0);
    struct tasks_task quiet = {.id = 9, .elements = 0, .ended = false};
    assert_int_equal(tasks_check_gone(&quiet, msg, sizeof msg), 0);
    tasks_release(&s);
}

/* What a read does about a task that left: by default a copy cut short is counted and the read
 * goes on; with whole copies it fails, naming the task; a task that ended or sent nothing left
 * nothing half-read either way. */
static void test_judge_gone(void **state)
{
    (void)state;
    const struct {
        uint64_t elements;
        bool ended, whole;
        int rc;
        const char *msg;
    } cases[] = {
        {7, false, false, TASKS_CUT, NULL},
        {7, false, true, SLUICE_ERR_TRUNCATED,
         "task 5 on worker w1:1: the worker was lost after 7 elements: its copy is incomplete"},
        {7, true, false, 0, NULL},
        {7, true, true, 0, NULL},
        {0, false, false, 0, NULL},
        {0, false, true, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tasks_task t = {.id = 5, .elements = cases[i].elements, .ended = cases[i].ended};
        strcpy(t.address, "w1:1");
        char msg[256] = "";
        assert_int_equal(tasks_judge_gone(&t, cases[i].whole, msg, sizeof msg), cases[i].rc);
        if (cases[i].msg)
            assert_string_equal(msg, cases[i].msg);
    }
}

/* Target workers: a local read keeps only local tasks; an auto read asks local tasks first, up to
 * twice per_task_max each, and the others once the local ones are full. */
static void apply_local(struct tasks_set *s, const uint64_t *ids, const bool *local, size_t n,
                        bool finished)
{
    struct tasks_info infos[8];
    for (size_t i = 0; i < n; i++)
        infos[i] = (struct tasks_info){ids[i], "w:1", 7, NULL, 0, local[i]};
    assert_int_equal(tasks_reconcile(s, infos, n, finished, 0), 0);
}

static void test_target_local_keeps_local_tasks(void **state)
{
    (void)state;
    struct tasks_set s;
    tasks_init(&s, false, 2);
    tasks_set_target(&s, true, false);
    const uint64_t ids[] = {1, 2, 3};
    const bool local[] = {false, true, false};
    apply_local(&s, ids, local, 3, false);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.v[0].id, 2);
    assert_true(s.v[0].local);
    /* The others never enter, also when listed again; the end waits only for local tasks. */
    apply_local(&s, ids, local, 3, true);
    assert_int_equal(s.n, 1);
    attach_all(&s, &conn_a);
    send_to(&s, 2);
    tasks_on_reply(&s, 0, 3, true, 0);
    assert_true(tasks_done(&s));
    tasks_release(&s);
}

static void test_target_auto_prefers_local_tasks(void **state)
{
    (void)state;
    struct tasks_set s;
    tasks_init(&s, false, 2);
    tasks_set_target(&s, false, true);
    const uint64_t ids[] = {1, 2, 3};
    const bool local[] = {false, true, false};
    apply_local(&s, ids, local, 3, false);
    assert_int_equal(s.n, 3);
    attach_all(&s, &conn_a);
    /* Task 2 takes four requests (twice per_task_max) before another task gets one. */
    for (int k = 0; k < 4; k++) {
        assert_int_equal(picked_id(&s, 0), 2);
        send_to(&s, 2);
    }
    uint64_t next = picked_id(&s, 0);
    assert_true(next == 1 || next == 3);
    send_to(&s, next);
    /* A reply from task 2 frees a slot there, which it gets first again. */
    tasks_on_reply(&s, (size_t)tasks_find(&s, 2), 1, false, 0);
    assert_int_equal(picked_id(&s, 0), 2);
    /* Without a preference, round robin with per_task_max each. */
    struct tasks_set any;
    tasks_init(&any, false, 2);
    apply_local(&any, ids, local, 3, false);
    attach_all(&any, &conn_b);
    uint64_t first = picked_id(&any, 0);
    send_to(&any, first);
    assert_int_not_equal(picked_id(&any, 0), first);
    tasks_release(&any);
    tasks_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reconcile_adds_sorted),
        cmocka_unit_test(test_reconcile_refuses_bad_lists),
        cmocka_unit_test(test_unlisted_tasks_leave_once_drained),
        cmocka_unit_test(test_relisted_task_keeps_state),
        cmocka_unit_test(test_round_robin),
        cmocka_unit_test(test_pick_skips_what_cannot_be_asked),
        cmocka_unit_test(test_backoff_grows_and_resets),
        cmocka_unit_test(test_coordinated_schedule),
        cmocka_unit_test(test_done_and_active),
        cmocka_unit_test(test_finished_ids),
        cmocka_unit_test(test_listed_at_is_first_listing),
        cmocka_unit_test(test_errors_wait_for_a_later_heartbeat),
        cmocka_unit_test(test_retry_classes),
        cmocka_unit_test(test_copy_accounting),
        cmocka_unit_test(test_judge_gone),
        cmocka_unit_test(test_defer),
        cmocka_unit_test(test_task_keys_follow_the_list),
        cmocka_unit_test(test_target_local_keeps_local_tasks),
        cmocka_unit_test(test_target_auto_prefers_local_tasks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
