/* The service end to end: a real dispatcher, real workers and the `sluice` CLI on 127.0.0.1.
 * Each test asserts the exact multiset of elements read (or the exact error). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/net.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The whole suite runs twice: against an in-memory dispatcher, then a fault-tolerant one. */
static int use_ft;

static int setup(void **state)
{
    return (*state = cluster_new(NULL, NULL, use_ft, 0)) ? 0 : -1;
}

static void test_one_worker_in_order(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(10)", NULL), 0);
    assert_string_equal(out, "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
    free(out);
    free(err);
}

static void test_parallel_epochs_two_workers(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    char *want = expected_range(100, 2);
    cluster_expect_read(c, want, "range(100)", "--mode", "parallel_epochs", NULL);
    free(want);
}

static void test_distributed_epoch_two_workers(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    char *want = expected_range(5000, 1);
    cluster_expect_read(c, want, "range(5000)", "--mode", "distributed_epoch", NULL);
    cluster_expect_read(c, want, "range(5000)", "--mode", "dynamic", NULL);
    free(want);
    /* repeat after a split source repeats the whole source across the cluster. */
    want = expected_range(300, 3);
    cluster_expect_read(c, want, "range(300) | repeat(3)", "--mode", "distributed_epoch", NULL);
    free(want);
}

static void test_local_tail(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    cluster_expect_read(c, "1\n1\n10\n10\n17\n17\n2\n2\n5\n5\n", "range(5) | map(square)",
                        "--local", "map(add, 1)", NULL);
}

static void test_shared_job(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    /* Two readers of one named distributed_epoch job split its elements: together they see
     * every element exactly once. The pipeline is slow enough (12 s of waits, 3 s on two
     * workers' four threads) that both take part even on a loaded machine. */
    struct proc r1, r2;
    const char *p = "range(1000) | map(wait_us, 12000)";
    assert_int_equal(cluster_cli_spawn(c, &r1, "read", p, "--mode", "distributed_epoch",
                                       "--job-name", "shared", NULL),
                     0);
    assert_int_equal(cluster_cli_spawn(c, &r2, "read", p, "--mode", "distributed_epoch",
                                       "--job-name", "shared", NULL),
                     0);
    char *o1 = proc_read_all(&r1, 60000);
    char *o2 = proc_read_all(&r2, 60000);
    assert_int_equal(proc_wait(&r1, 10000), 0);
    assert_int_equal(proc_wait(&r2, 10000), 0);
    if (count_lines(o1) == 0 || count_lines(o2) == 0)
        fprintf(stderr, "reader 1 read %zu, reader 2 read %zu (logs %s, %s)\n", count_lines(o1),
                count_lines(o2), r1.log, r2.log);
    assert_true(count_lines(o1) > 0);
    assert_true(count_lines(o2) > 0);
    size_t l1 = strlen(o1), l2 = strlen(o2);
    char *both = malloc(l1 + l2 + 1);
    memcpy(both, o1, l1);
    memcpy(both + l1, o2, l2 + 1);
    char *got = sorted_lines(both);
    char *want = expected_range(1000, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(both);
    free(o1);
    free(o2);
}

/* A job is identified by its dataset and its name, as in tf.data service: four readers, two per
 * dataset, all under one job name, read two independent shared jobs, each dataset's elements
 * exactly once across its two readers. The same name on the same dataset with another mode is
 * still refused, naming the mode. */
static void test_shared_job_name_two_datasets(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    const char *p1 = "range(20) | map(wait_us, 20000)";
    const char *p2 = "list(20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, "
                     "38, 39) | map(wait_us, 20000)";
    struct proc r[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(cluster_cli_spawn(c, &r[i], "read", i % 2 ? p2 : p1, "--mode",
                                           "distributed_epoch", "--job-name", "shared_job", NULL),
                         0);
    char *outs[4];
    size_t total = 0;
    for (int i = 0; i < 4; i++) {
        outs[i] = proc_read_all(&r[i], 60000);
        int rc = proc_wait(&r[i], 10000);
        if (rc != 0)
            fprintf(stderr, "reader %d exited with %d (log %s)\n", i, rc, r[i].log);
        assert_int_equal(rc, 0);
        total += strlen(outs[i]);
    }
    char *all = malloc(total + 1);
    assert_non_null(all);
    all[0] = '\0';
    for (int i = 0; i < 4; i++) {
        strcat(all, outs[i]);
        free(outs[i]);
    }
    char *got = sorted_lines(all);
    char *want = expected_range(40, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(all);

    /* Two jobs of that name, one per dataset. */
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "status", "--json", NULL), 0);
    size_t named = 0;
    for (const char *at = out; (at = strstr(at, "\"name\":\"shared_job\"")); at++)
        named++;
    assert_int_equal(named, 2);
    free(out);
    free(err);
    assert_int_equal(cluster_cli(c, &out, &err, "read", p1, "--job-name", "shared_job", NULL), 1);
    assert_string_equal(err, "sluice: read: job 'shared_job' exists with mode distributed_epoch, "
                             "not parallel_epochs\n");
    free(out);
    free(err);
}

static void test_different_job_names(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    char *want = expected_range(200, 1);
    cluster_expect_read(c, want, "range(200)", "--mode", "distributed_epoch", "--job-name", "a",
                        NULL);
    cluster_expect_read(c, want, "range(200)", "--mode", "distributed_epoch", "--job-name", "b",
                        NULL);
    free(want);
}

static void test_worker_joins_mid_read(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", "range(1500) | map(wait_us, 1000)", "--mode",
                                       "distributed_epoch", NULL),
                     0);
    usleep(300 * 1000);
    cluster_add_workers(c, 1);
    char *out = proc_read_all(&r, 60000);
    assert_int_equal(proc_wait(&r, 10000), 0);
    char *got = sorted_lines(out);
    char *want = expected_range(1500, 1);
    assert_string_equal(got, want);
    /* The late worker took part: the dispatcher lists a task on it. */
    char *status = NULL;
    assert_int_equal(cluster_cli(c, &status, NULL, "status", "--json", NULL), 0);
    assert_non_null(strstr(status, c->workers[1].addr));
    free(status);
    free(got);
    free(want);
    free(out);
}

static void test_client_before_dispatcher(void **state)
{
    struct cluster *c = *state;
    /* Stop the fixture's dispatcher, start a reader against a port nobody serves yet, then
     * bring the cluster up on that port. */
    proc_stop(&c->dispatcher, SIGTERM, 10000);
    c->port = free_port();
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", "range(10)", NULL), 0);
    usleep(500 * 1000);
    assert_int_equal(cluster_start_dispatcher(c, c->port, use_ft), 0);
    cluster_add_workers(c, 1);
    char *out = proc_read_all(&r, 30000);
    assert_int_equal(proc_wait(&r, 10000), 0);
    assert_string_equal(out, "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
    free(out);
}

static void test_explicit_dataset_ids(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "register", "range(3)", "--dataset-id", "ds", NULL),
                     0);
    assert_string_equal(out, "ds\n");
    free(out);
    free(err);
    /* The same pipeline under the same id is deduplicated. */
    assert_int_equal(
        cluster_cli(c, &out, &err, "register", "range( 3 )", "--dataset-id", "ds", NULL), 0);
    assert_string_equal(out, "ds\n");
    free(out);
    free(err);
    /* Another pipeline under that id is refused. */
    assert_int_equal(cluster_cli(c, &out, &err, "register", "range(4)", "--dataset-id", "ds", NULL),
                     1);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "dataset 'ds' already exists with a different pipeline"));
    free(out);
    free(err);
    assert_int_equal(cluster_cli(c, &out, &err, "read", "--dataset-id", "ds", NULL), 0);
    assert_string_equal(out, "0\n1\n2\n");
    free(out);
    free(err);
    assert_int_equal(cluster_cli(c, &out, &err, "read", "--dataset-id", "nosuch", NULL), 1);
    assert_non_null(strstr(err, "dataset 'nosuch' not found"));
    free(out);
    free(err);
}

static void test_job_name_conflict(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(3)", "--job-name", "j", NULL), 0);
    free(out);
    free(err);
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(3)", "--job-name", "j", "--mode",
                                 "distributed_epoch", NULL),
                     1);
    assert_non_null(strstr(err, "job 'j' exists with mode parallel_epochs, not distributed_epoch"));
    free(out);
    free(err);
}

static void test_bad_pipeline_and_usage(void **state)
{
    struct cluster *c = *state;
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(10) | bach(2)", NULL), 2);
    assert_string_equal(err, "sluice: pipeline: column 13: unknown operation 'bach'\n");
    free(out);
    free(err);
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(10)", "--consumer-index", "0", NULL),
                     2);
    free(out);
    free(err);
}

static void test_restart_without_fault_tolerance(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", "range(100000) | map(wait_us, 1000)", NULL),
                     0);
    usleep(800 * 1000);
    assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);
    char *out = proc_read_all(&r, 30000);
    int rc = proc_wait(&r, 10000);
    assert_int_equal(rc, 1);
    FILE *f = fopen(r.log, "r");
    assert_non_null(f);
    char line[1024] = "";
    int found = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "dispatcher restarted without --fault-tolerant"))
            found = 1;
    fclose(f);
    assert_true(found);
    /* The elements it did read were a prefix of one worker's copy, never another dataset's. */
    long expect = 0;
    for (char *s = out; *s;) {
        assert_int_equal(strtol(s, &s, 10), expect++);
        assert_int_equal(*s, '\n');
        s++;
    }
    free(out);
}

static void send_garbage(int port, const void *data, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    /* The server closes the connection: read sees EOF (after its Hello, if any) in time. */
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    ssize_t n;
    int closed = 0;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        ;
    closed = n == 0 || n < 0;
    assert_true(closed);
    close(fd);
}

static void test_garbage_frames(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    const char *colon = strrchr(c->workers[0].addr, ':');
    int wport = atoi(colon + 1);
    const uint8_t zero[4] = {0, 0, 0, 0};
    const uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    const uint8_t junk[12] = {0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4};
    send_garbage(c->port, zero, sizeof(zero));
    send_garbage(c->port, huge, sizeof(huge));
    send_garbage(c->port, junk, sizeof(junk));
    send_garbage(wport, huge, sizeof(huge));
    send_garbage(wport, junk, sizeof(junk));
    /* Everyone else is still served. */
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(5)", NULL), 0);
    assert_string_equal(out, "0\n1\n2\n3\n4\n");
    free(out);
    free(err);
}

/* ---- fault-tolerant dispatcher only ---------------------------------------------------------- */

static void test_ft_dataset_survives_kill(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    char *out = NULL, *err = NULL;
    assert_int_equal(
        cluster_cli(c, &out, &err, "register", "range(7)", "--dataset-id", "kept", NULL), 0);
    free(out);
    free(err);
    assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);
    assert_int_equal(cluster_cli(c, &out, &err, "read", "--dataset-id", "kept", NULL), 0);
    assert_string_equal(out, "0\n1\n2\n3\n4\n5\n6\n");
    free(out);
    free(err);
}

/* Reads while the dispatcher is killed and restarted twice: the multiset stays exact. */
static void read_across_restarts(struct cluster *c, const char *mode, long n, int times)
{
    struct proc r;
    assert_int_equal(
        cluster_cli_spawn(c, &r, "read", "range(3000) | map(wait_us, 1000)", "--mode", mode, NULL),
        0);
    for (int k = 0; k < 2; k++) {
        usleep(500 * 1000);
        assert_int_equal(cluster_restart_dispatcher(c, SIGKILL), 0);
    }
    char *out = proc_read_all(&r, 90000);
    int rc = proc_wait(&r, 10000);
    if (rc != 0) {
        char *log = read_text_file(r.log);
        fail_msg("read (%s) exited %d after %zu lines; its stderr:\n%s", mode, rc,
                 count_lines(out ? out : ""), log ? log : "(none)");
    }
    char *got = sorted_lines(out);
    char *want = expected_range(n, times);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
}

static void test_ft_distributed_across_restarts(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    read_across_restarts(c, "distributed_epoch", 3000, 1);
}

static void test_ft_parallel_across_restarts(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    read_across_restarts(c, "parallel_epochs", 3000, 2);
}

/* Once every task of a read has been handed out, the read finishes with the dispatcher down. */
static void test_ft_read_finishes_while_dispatcher_down(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", "range(4000) | map(wait_us, 500)", NULL), 0);
    usleep(1500 * 1000);
    proc_stop(&c->dispatcher, SIGKILL, 10000);
    char *out = proc_read_all(&r, 60000);
    int rc = proc_wait(&r, 10000);
    if (rc != 0) {
        fprintf(stderr, "read: status %d, %zu lines, log %s\n", rc, count_lines(out), r.log);
        char cmd[700];
        snprintf(cmd, sizeof(cmd), "cat %s >&2", r.log);
        assert_int_equal(system(cmd), 0);
    }
    assert_int_equal(rc, 0);
    char *want = expected_range(4000, 1);
    char *got = sorted_lines(out);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    /* Bring it back so the cluster_teardown sees a clean shutdown. */
    assert_int_equal(cluster_start_dispatcher(c, c->port, 1), 0);
}

#define COMMON_TESTS                                                                               \
    cmocka_unit_test_setup_teardown(test_one_worker_in_order, setup, cluster_teardown),            \
        cmocka_unit_test_setup_teardown(test_parallel_epochs_two_workers, setup,                   \
                                        cluster_teardown),                                         \
        cmocka_unit_test_setup_teardown(test_distributed_epoch_two_workers, setup,                 \
                                        cluster_teardown),                                         \
        cmocka_unit_test_setup_teardown(test_local_tail, setup, cluster_teardown),                 \
        cmocka_unit_test_setup_teardown(test_shared_job, setup, cluster_teardown),                 \
        cmocka_unit_test_setup_teardown(test_shared_job_name_two_datasets, setup,                  \
                                        cluster_teardown),                                         \
        cmocka_unit_test_setup_teardown(test_different_job_names, setup, cluster_teardown),        \
        cmocka_unit_test_setup_teardown(test_worker_joins_mid_read, setup, cluster_teardown),      \
        cmocka_unit_test_setup_teardown(test_client_before_dispatcher, setup, cluster_teardown),   \
        cmocka_unit_test_setup_teardown(test_explicit_dataset_ids, setup, cluster_teardown),       \
        cmocka_unit_test_setup_teardown(test_job_name_conflict, setup, cluster_teardown),          \
        cmocka_unit_test_setup_teardown(test_bad_pipeline_and_usage, setup, cluster_teardown),     \
        cmocka_unit_test_setup_teardown(test_garbage_frames, setup, cluster_teardown)

int main(void)
{
    const struct CMUnitTest in_memory[] = {
        COMMON_TESTS,
        cmocka_unit_test_setup_teardown(test_restart_without_fault_tolerance, setup,
                                        cluster_teardown),
    };
    const struct CMUnitTest fault_tolerant[] = {
        COMMON_TESTS,
        cmocka_unit_test_setup_teardown(test_ft_dataset_survives_kill, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_ft_distributed_across_restarts, setup,
                                        cluster_teardown),
        cmocka_unit_test_setup_teardown(test_ft_parallel_across_restarts, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_ft_read_finishes_while_dispatcher_down, setup,
                                        cluster_teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    /* SLUICE_TEST_FILTER=pattern runs only the matching tests (cmocka's wildcard syntax). */
    if (getenv("SLUICE_TEST_FILTER"))
        cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    int rc = cmocka_run_group_tests_name("in-memory dispatcher", in_memory, NULL, NULL);
    use_ft = 1;
    rc += cmocka_run_group_tests_name("fault-tolerant dispatcher", fault_tolerant, NULL, NULL);
    tmp_cleanup();
    return rc;
}
