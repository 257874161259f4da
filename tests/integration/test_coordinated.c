/* Coordinated reads end to end: two consumers of one named job read in lockstep rounds.
 *
 * With two workers each running range(1000000) | repeat() (parallel_epochs), a task's round r is
 * its elements 2r and 2r + 1: consumer 0 gets 2r and consumer 1 gets 2r + 1. Both consumers know
 * both tasks before their first read (the test waits until both workers are registered), so each
 * takes its rounds in turn over the two tasks: global round i is round i / 2 of task i mod 2,
 * and consumer 0 reads 0, 0, 2, 2, 4, 4, ... while consumer 1 reads 1, 1, 3, 3, 5, 5, ... */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "helper_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 20

static int setup(void **state)
{
    struct cluster *c = calloc(1, sizeof(*c));
    if (!c || cluster_start_dispatcher(c, 0, 0) != 0)
        return -1;
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct cluster *c = *state;
    int rc = cluster_stop(c);
    free(c);
    return rc;
}

/* Waits (bounded) until the dispatcher's status lists every worker's address. */
static void wait_registered(struct cluster *c)
{
    for (int attempt = 0; attempt < 200; attempt++) {
        char *out = NULL, *err = NULL;
        int rc = cluster_cli(c, &out, &err, "status", "--json", NULL);
        int seen = 0;
        for (int i = 0; rc == 0 && out && i < c->nworkers; i++)
            seen += strstr(out, c->workers[i].addr) != NULL;
        free(out);
        free(err);
        if (seen == c->nworkers)
            return;
        usleep(50 * 1000);
    }
    fail_msg("the workers did not register");
}

/* Parses ROUNDS lines of decimal numbers into v. */
static void parse_lines(const char *text, long v[ROUNDS])
{
    assert_int_equal(count_lines(text), ROUNDS);
    const char *p = text;
    for (int i = 0; i < ROUNDS; i++) {
        char *end;
        v[i] = strtol(p, &end, 10);
        assert_true(end != p && *end == '\n');
        p = end + 1;
    }
}

/* Runs both consumers of job "co" over two workers, the second starting delay_ms after the
 * first, and asserts the exact elements each one read. */
static void run_two_consumers(struct cluster *c, int delay_ms)
{
    assert_true(cluster_add_worker(c) >= 0);
    assert_true(cluster_add_worker(c) >= 0);
    wait_registered(c);

    struct proc r0, r1;
    const char *pipeline = "range(1000000) | repeat()";
    assert_int_equal(cluster_cli_spawn(c, &r0, "read", pipeline, "--mode", "parallel_epochs",
                                       "--job-name", "co", "--num-consumers", "2",
                                       "--consumer-index", "0", "--limit", "20", NULL),
                     0);
    if (delay_ms > 0)
        usleep((useconds_t)delay_ms * 1000);
    assert_int_equal(cluster_cli_spawn(c, &r1, "read", pipeline, "--mode", "parallel_epochs",
                                       "--job-name", "co", "--num-consumers", "2",
                                       "--consumer-index", "1", "--limit", "20", NULL),
                     0);
    char *o0 = proc_read_all(&r0, 60000);
    char *o1 = proc_read_all(&r1, 60000);
    assert_int_equal(proc_wait(&r0, 10000), 0);
    assert_int_equal(proc_wait(&r1, 10000), 0);

    long v0[ROUNDS], v1[ROUNDS];
    parse_lines(o0, v0);
    parse_lines(o1, v1);
    for (int i = 0; i < ROUNDS; i++) {
        /* Round i is round i / 2 of one task: its two consecutive elements, one per consumer. */
        assert_int_equal(v0[i], 2 * (i / 2));
        assert_int_equal(v1[i], 2 * (i / 2) + 1);
    }
    free(o0);
    free(o1);
}

static void test_two_consumers_lockstep(void **state)
{
    run_two_consumers(*state, 0);
}

/* The first consumer runs ahead alone: it takes its elements of the rounds each worker holds,
 * then waits (long polls that end empty and are repeated) until the second one catches up; the
 * elements each consumer reads are the same as when they run side by side. */
static void test_consumer_ahead_waits(void **state)
{
    run_two_consumers(*state, 2500);
}

/* A consumer index outside the job's consumers is refused before anything is read. */
static void test_bad_consumer_index(void **state)
{
    struct cluster *c = *state;
    assert_true(cluster_add_worker(c) >= 0);
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", "range(10) | repeat()", "--job-name", "bad",
                         "--num-consumers", "2", "--consumer-index", "2", "--limit", "1", NULL);
    assert_int_not_equal(rc, 0);
    assert_string_equal(out, "");
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_consumers_lockstep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consumer_ahead_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_consumer_index, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmp_cleanup();
    return rc;
}
