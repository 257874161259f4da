/* A worker's address taken over by another process: a reader's worker is killed and a worker of
 * another cluster starts on the same port, serving a task with the same id (task and client ids
 * start at 1 in every cluster) to its own reader. That worker refuses this reader ("client 1 is
 * not a consumer of job 1"), which is the reader's worker gone, not its task failed: the read
 * retries until its dispatcher drops the dead worker, and ends with every element exactly once
 * from the worker that joins. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/tmp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 30000 };

static void test_port_taken_by_another_cluster(void **unused)
{
    (void)unused;
    /* Cluster A keeps its dead worker listed for 5 s, so the reader meets the other cluster's
     * worker at the old address for a while. */
    struct cluster a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    const char *a_args[] = {"--worker-timeout-ms", "5000", NULL};
    a.dispatcher_args = a_args;
    assert_int_equal(cluster_start_dispatcher(&a, 0, 0), 0);
    assert_true(cluster_add_worker(&a) >= 0);
    const char *colon = strrchr(a.workers[0].addr, ':');
    assert_non_null(colon);
    char port[16];
    snprintf(port, sizeof port, "%s", colon + 1);

    struct proc reader;
    char pipeline[64];
    snprintf(pipeline, sizeof pipeline, "range(%d) | map(wait_us, 200)", N);
    assert_int_equal(cluster_cli_spawn(&a, &reader, "read", pipeline, "--mode", "distributed_epoch",
                                       "--timeout-ms", "60000", NULL),
                     0);
    usleep(700 * 1000);
    proc_stop(&a.workers[0], SIGKILL, 5000);

    /* Cluster B: a worker on the dead worker's port, with task 1 of job 1 read by client 1. */
    assert_int_equal(cluster_start_dispatcher(&b, 0, 0), 0);
    const char *b_args[] = {"--port", port, NULL};
    b.worker_args = b_args;
    assert_true(cluster_add_worker(&b) >= 0);
    struct proc other;
    assert_int_equal(cluster_cli_spawn(&b, &other, "read", "range(100000000) | map(wait_us, 1000)",
                                       "--mode", "distributed_epoch", "--timeout-ms", "60000",
                                       NULL),
                     0);

    /* Cluster A gets a worker to finish the read on, once its dead one is dropped. */
    usleep(1500 * 1000);
    assert_true(cluster_add_worker(&a) >= 0);

    char *out = proc_read_all(&reader, 90000);
    int rc = proc_wait(&reader, 10000);
    char *err = read_text_file(reader.log);
    char *log = read_text_file(b.workers[0].log);
    /* Everything stops before any assertion, so a failure leaves no process behind. */
    proc_stop(&reader, SIGKILL, 5000);
    proc_stop(&other, SIGKILL, 5000);
    int b_stopped = cluster_stop(&b), a_stopped = cluster_stop(&a);

    assert_non_null(out);
    struct tally t = tally_range(out, N);
    print_tally("read while another cluster's worker held the address", t);
    if (rc != 0)
        fail_msg("the read exited %d: %s", rc, err);
    assert_int_equal(t.lines, N);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    /* Whether the scenario happened: the other worker refused this reader. */
    if (!strstr(log, "presented a wrong client key"))
        print_message("note: the other worker never refused the reader (timing); the read "
                      "still had to be exact\n");
    free(out);
    free(err);
    free(log);
    assert_int_equal(b_stopped, 0);
    assert_int_equal(a_stopped, 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_port_taken_by_another_cluster),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
