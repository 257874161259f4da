/* The per-client cache of task capabilities: what it lists is always what cap.h derives, it
 * derives only for tasks a client's previous list did not hold, a task's secret once for all its
 * clients, and it forgets what it must. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "dispatcher/capcache.h"

#include <string.h>

static const uint8_t secret_a[CAP_KEY_LEN] = "iteration-one-a";
static const uint8_t secret_b[CAP_KEY_LEN] = "iteration-two-b";

/* The capability as the workers check it: derived from scratch. */
static void expected(const uint8_t secret[CAP_KEY_LEN], uint64_t client, uint64_t task,
                     uint8_t out[CAP_KEY_LEN])
{
    uint8_t task_key[CAP_KEY_LEN];
    cap_task_key(secret, task, task_key);
    cap_client_key(task_key, client, out);
}

/* One heartbeat's list: keys checked against cap.h; returns how many were derived for it. */
static uint64_t list(struct capcache *c, uint64_t client, uint64_t iteration,
                     const uint8_t secret[CAP_KEY_LEN], const uint64_t *tasks, size_t n)
{
    uint8_t keys[16][CAP_KEY_LEN];
    assert_true(n <= 16);
    uint64_t before = c->derived;
    capcache_client_keys(c, client, iteration, secret, tasks, n, keys);
    for (size_t i = 0; i < n; i++) {
        uint8_t want[CAP_KEY_LEN];
        expected(secret, client, tasks[i], want);
        assert_memory_equal(keys[i], want, CAP_KEY_LEN);
    }
    return c->derived - before;
}

static void test_derives_only_new_tasks(void **unused)
{
    (void)unused;
    static const struct {
        uint64_t client, iteration;
        const uint8_t *secret;
        uint64_t tasks[8];
        size_t n;
        uint64_t derived;
    } steps[] = {
        {7, 1, secret_a, {10, 11, 12}, 3, 3},     /* first heartbeat: all */
        {7, 1, secret_a, {10, 11, 12}, 3, 0},     /* the same list: none */
        {7, 1, secret_a, {10, 12, 15, 16}, 4, 2}, /* a task gone, two new */
        {9, 1, secret_a, {10, 12, 15, 16}, 4, 4}, /* another client: its own */
        {7, 1, secret_a, {10, 12, 15, 16}, 4, 0}, /* the first one's list stays */
        {7, 1, secret_a, {11, 12}, 2, 1},         /* 11 was dropped with the list before */
        {7, 2, secret_b, {11, 12}, 2, 2},         /* another iteration: nothing carries over */
        {7, 2, secret_b, {0}, 0, 0},              /* no tasks */
        {7, 2, secret_b, {11, 12}, 2, 2},         /* an empty list keeps nothing */
        {3, 1, secret_a, {1, 2, 3, 4, 5, 6, 7, 8}, 8, 8},
        {3, 1, secret_a, {2, 4, 6, 8}, 4, 0},
    };
    struct capcache c;
    capcache_init(&c);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        uint64_t d = list(&c, steps[i].client, steps[i].iteration, steps[i].secret, steps[i].tasks,
                          steps[i].n);
        if (d != steps[i].derived)
            fail_msg("step %zu: derived %llu, want %llu", i, (unsigned long long)d,
                     (unsigned long long)steps[i].derived);
    }
    assert_int_equal(c.n, 3); /* clients 3, 7, 9, sorted */
    assert_int_equal(c.v[0].client_id, 3);
    assert_int_equal(c.v[1].client_id, 7);
    assert_int_equal(c.v[2].client_id, 9);
    capcache_release(&c);
    assert_int_equal(c.n, 0);
}

static bool odd(void *user, uint64_t client)
{
    (void)user;
    return client % 2 == 1;
}

static void test_prune(void **unused)
{
    (void)unused;
    struct capcache c;
    capcache_init(&c);
    static const uint64_t tasks[] = {4, 5};
    for (uint64_t client = 1; client <= 6; client++)
        assert_int_equal(list(&c, client, 1, secret_a, tasks, 2), 2);
    capcache_prune(&c, odd, NULL);
    assert_int_equal(c.n, 3);
    for (uint64_t client = 1; client <= 6; client++)
        assert_int_equal(list(&c, client, 1, secret_a, tasks, 2), client % 2 ? 0 : 2);
    capcache_release(&c);
}

static bool not_iteration_1(void *user, uint64_t iteration)
{
    (void)user;
    return iteration != 1;
}

/* A task's secret is derived once, whichever clients list the task and in whatever order the
 * tasks come; forgetting an iteration derives its secrets again. */
static void test_task_secrets_once(void **unused)
{
    (void)unused;
    struct capcache c;
    capcache_init(&c);
    static const uint64_t up[] = {3, 5, 9, 12}, down[] = {1, 4, 5, 13, 14};
    assert_int_equal(list(&c, 1, 1, secret_a, up, 4), 4);
    assert_int_equal(c.task_derived, 4);
    assert_int_equal(list(&c, 2, 1, secret_a, up, 4), 4); /* the client's key: its own */
    assert_int_equal(c.task_derived, 4);                  /* the task secrets: kept */
    assert_int_equal(list(&c, 3, 1, secret_a, down, 5), 5);
    assert_int_equal(c.task_derived, 4 + 4); /* 1, 4, 13, 14: inserted in the middle and after */
    assert_int_equal(list(&c, 4, 2, secret_b, up, 4), 4);
    assert_int_equal(c.task_derived, 12);             /* another iteration, another secret */
    for (uint64_t client = 10; client < 80; client++) /* growing past the first allocation */
        assert_int_equal(list(&c, client, 1, secret_a, down, 5), 5);
    assert_int_equal(c.task_derived, 12);
    capcache_prune_iterations(&c, not_iteration_1, NULL);
    assert_int_equal(list(&c, 90, 1, secret_a, up, 4), 4);
    assert_int_equal(c.task_derived, 16);
    assert_int_equal(list(&c, 91, 2, secret_b, up, 4), 4);
    assert_int_equal(c.task_derived, 16);
    capcache_release(&c);
}

static void test_many_tasks(void **unused)
{
    (void)unused;
    struct capcache c;
    capcache_init(&c);
    uint64_t ids[300];
    uint8_t keys[300][CAP_KEY_LEN];
    for (size_t i = 0; i < 300; i++)
        ids[i] = 1000 + 3 * i;
    capcache_client_keys(&c, 5, 1, secret_a, ids, 300, keys);
    capcache_client_keys(&c, 6, 1, secret_a, ids, 300, keys);
    assert_int_equal(c.task_derived, 300);
    for (size_t i = 0; i < 300; i++) {
        uint8_t want[CAP_KEY_LEN];
        expected(secret_a, 6, ids[i], want);
        assert_memory_equal(keys[i], want, CAP_KEY_LEN);
    }
    capcache_release(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derives_only_new_tasks),
        cmocka_unit_test(test_prune),
        cmocka_unit_test(test_task_secrets_once),
        cmocka_unit_test(test_many_tasks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
