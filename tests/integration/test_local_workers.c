/* Local workers (docs/reading.md "Local workers"), the scenarios of tf.data service's local-workers
 * tests as exact outcomes. A real dispatcher and real workers on 127.0.0.1; hosts are simulated
 * with SLUICE_HOST_ID, set per process: workers on hosts a and b, readers on a, b and c.
 *
 *   - a local reader on a reads only a's worker: one copy of a parallel_epochs dataset, its
 *     job's only task on a's worker (an any reader gets both copies);
 *   - local readers on a and b sharing a distributed_epoch job read the dataset exactly once
 *     between them, the job having a task on each host;
 *   - a local read on c, which has no worker, fails with the exact "no local worker" message;
 *   - auto reads from every worker;
 *   - a named job joined with another target_workers is refused with the exact message;
 *   - a worker that registers on a local reader's host while it reads gets a task of its job. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include <jansson.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct cluster cl;
static int worker_a, worker_b; /* indexes into cl.workers */

/* Sets SLUICE_HOST_ID for the processes started next; NULL unsets it. */
static void host(const char *id)
{
    if (id)
        assert_int_equal(setenv("SLUICE_HOST_ID", id, 1), 0);
    else
        assert_int_equal(unsetenv("SLUICE_HOST_ID"), 0);
}

/* The number of registered workers whose host is host_id. */
static int workers_on(json_t *doc, const char *host_id)
{
    int n = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(doc, "workers"), i, w)
    {
        const char *h = json_string_value(json_object_get(w, "host_id"));
        n += h && strcmp(h, host_id) == 0;
    }
    return n;
}

/* Waits (up to 10 s) until n workers on host_id are registered. */
static void wait_workers_on(const char *host_id, int n)
{
    long long deadline = now_ms() + 10000;
    for (;;) {
        json_t *doc = cluster_status(&cl);
        int have = workers_on(doc, host_id);
        json_decref(doc);
        if (have >= n)
            return;
        if (now_ms() > deadline)
            fail_msg("%d workers on host %s registered within 10 s, not %d", have, host_id, n);
        usleep(50000);
    }
}

/* Starts a worker on host_id and waits for its registration; returns its index. */
static int add_worker_on(const char *host_id)
{
    json_t *doc = cluster_status(&cl);
    int before = workers_on(doc, host_id);
    json_decref(doc);
    host(host_id);
    int i = cluster_add_worker(&cl);
    host(NULL);
    assert_true(i >= 0);
    wait_workers_on(host_id, before + 1);
    return i;
}

/* The worker addresses of the tasks of the job named name, sorted and joined with ','
 * (malloc'd); NULL when there is no such job. */
static char *job_task_workers(const char *name)
{
    json_t *doc = cluster_status(&cl);
    size_t i;
    json_t *j;
    char *addrs[16];
    size_t n = 0;
    bool found = false;
    json_array_foreach(json_object_get(doc, "jobs"), i, j)
    {
        const char *jn = json_string_value(json_object_get(j, "name"));
        if (!jn || strcmp(jn, name) != 0)
            continue;
        found = true;
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(j, "tasks"), k, t)
        {
            assert_true(n < 16);
            addrs[n++] = strdup(json_string_value(json_object_get(t, "worker")));
        }
    }
    json_decref(doc);
    if (!found)
        return NULL;
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            if (strcmp(addrs[b], addrs[a]) < 0) {
                char *x = addrs[a];
                addrs[a] = addrs[b];
                addrs[b] = x;
            }
    char *out = calloc(1, 16 * 140);
    assert_non_null(out);
    for (size_t a = 0; a < n; a++) {
        if (a)
            strcat(out, ",");
        strcat(out, addrs[a]);
        free(addrs[a]);
    }
    return out;
}

/* The sorted addresses of workers x and y joined with ','. */
static char *pair(int x, int y)
{
    const char *p = cl.workers[x].addr, *q = cl.workers[y].addr;
    if (strcmp(q, p) < 0) {
        const char *t = p;
        p = q;
        q = t;
    }
    char *out = malloc(300);
    assert_non_null(out);
    snprintf(out, 300, "%s,%s", p, q);
    return out;
}

/* `sluice read ARGS...` from host_id: asserts exit status want_rc and returns stdout sorted as
 * a multiset (stderr into *err when err is given). */
static char *read_on(const char *host_id, int want_rc, char **err, ...)
{
    const char *args[16];
    int n = 0;
    va_list ap;
    va_start(ap, err);
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 15)
        args[n++] = a;
    va_end(ap);
    while (n < 15)
        args[n++] = NULL;
    char *out = NULL, *e = NULL;
    host(host_id);
    int rc = cluster_cli(&cl, &out, &e, "read", args[0], args[1], args[2], args[3], args[4],
                         args[5], args[6], args[7], args[8], args[9], args[10], NULL);
    host(NULL);
    if (rc != want_rc)
        fprintf(stderr, "read on host %s: exit %d, stderr: %s\n", host_id, rc, e ? e : "");
    assert_int_equal(rc, want_rc);
    if (err)
        *err = e;
    else
        free(e);
    char *sorted = sorted_lines(out ? out : "");
    free(out);
    return sorted;
}

static int setup(void **unused)
{
    (void)unused;
    static const char *const disp_args[] = {"--worker-timeout-ms", "3000", NULL};
    static const char *const worker_args[] = {"--heartbeat-ms", "200", NULL};
    cl.dispatcher_args = disp_args;
    cl.worker_args = worker_args;
    if (cluster_start_dispatcher(&cl, 0, 0) != 0)
        return -1;
    host("a");
    worker_a = cluster_add_worker(&cl);
    host("b");
    worker_b = cluster_add_worker(&cl);
    host(NULL);
    return worker_a < 0 || worker_b < 0 ? -1 : 0;
}

static int teardown(void **unused)
{
    (void)unused;
    int rc = cluster_stop(&cl);
    tmp_cleanup();
    return rc;
}

static void test_local_parallel_epochs(void **unused)
{
    (void)unused;
    wait_workers_on("a", 1);
    wait_workers_on("b", 1);
    /* An any reader gets a copy from each worker. */
    char *got = read_on("a", 0, NULL, "range(100)", "--job-name", "pe-any", NULL);
    char *want = expected_range(100, 2);
    assert_string_equal(got, want);
    free(got);
    free(want);
    /* A local one exactly one, a's. */
    got = read_on("a", 0, NULL, "range(100)", "--job-name", "pe-local", "--target-workers", "local",
                  NULL);
    want = expected_range(100, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    char *tasks = job_task_workers("pe-local");
    assert_non_null(tasks);
    assert_string_equal(tasks, cl.workers[worker_a].addr);
    free(tasks);
    /* And from b, b's. */
    got = read_on("b", 0, NULL, "range(50)", "--job-name", "pe-local-b", "--target-workers",
                  "local", NULL);
    want = expected_range(50, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    tasks = job_task_workers("pe-local-b");
    assert_string_equal(tasks, cl.workers[worker_b].addr);
    free(tasks);
}

static void test_local_distributed_two_hosts(void **unused)
{
    (void)unused;
    wait_workers_on("a", 1);
    wait_workers_on("b", 1);
    /* Slow enough (about a second of production) that both readers are in before it ends. */
    const char *pipeline = "range(600) | map(wait_us, 3000)";
    struct proc ra, rb;
    host("a");
    assert_int_equal(cluster_cli_spawn(&cl, &ra, "read", pipeline, "--mode", "distributed_epoch",
                                       "--job-name", "de-shared", "--target-workers", "local",
                                       NULL),
                     0);
    host("b");
    assert_int_equal(cluster_cli_spawn(&cl, &rb, "read", pipeline, "--mode", "distributed_epoch",
                                       "--job-name", "de-shared", "--target-workers", "local",
                                       NULL),
                     0);
    host(NULL);
    char *oa = proc_read_all(&ra, 60000), *ob = proc_read_all(&rb, 60000);
    assert_int_equal(proc_wait(&ra, 10000), 0);
    assert_int_equal(proc_wait(&rb, 10000), 0);
    size_t la = strlen(oa), lb = strlen(ob);
    char *both = malloc(la + lb + 1);
    assert_non_null(both);
    memcpy(both, oa, la);
    memcpy(both + la, ob, lb + 1);
    struct tally t = tally_range(both, 600);
    print_tally("readers on a and b", t);
    fprintf(stderr, "    reader on a: %zu elements, reader on b: %zu\n", count_lines(oa),
            count_lines(ob));
    assert_int_equal(t.lines, 600);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    free(oa);
    free(ob);
    free(both);
    /* The job ran on both hosts: a task on a's worker and one on b's, none elsewhere. */
    char *tasks = job_task_workers("de-shared"), *want = pair(worker_a, worker_b);
    assert_string_equal(tasks, want);
    free(tasks);
    free(want);
}

static void test_no_local_worker(void **unused)
{
    (void)unused;
    char *err = NULL;
    char *got = read_on("c", 1, &err, "range(10)", "--target-workers", "local", NULL);
    assert_string_equal(got, "");
    assert_string_equal(err, "sluice: read: no local worker: target_workers local needs a worker "
                             "on this host (host id c), and none is registered\n");
    free(got);
    free(err);
    /* The same in distributed_epoch. */
    got = read_on("c", 1, &err, "range(10)", "--mode", "distributed_epoch", "--target-workers",
                  "local", NULL);
    assert_string_equal(err, "sluice: read: no local worker: target_workers local needs a worker "
                             "on this host (host id c), and none is registered\n");
    free(got);
    free(err);
}

static void test_auto_reads_everything(void **unused)
{
    (void)unused;
    wait_workers_on("a", 1);
    wait_workers_on("b", 1);
    char *got = read_on("a", 0, NULL, "range(100)", "--job-name", "pe-auto", "--target-workers",
                        "auto", NULL);
    char *want = expected_range(100, 2);
    assert_string_equal(got, want);
    free(got);
    free(want);
    char *tasks = job_task_workers("pe-auto");
    want = pair(worker_a, worker_b);
    assert_string_equal(tasks, want);
    free(tasks);
    free(want);
    /* From a host without workers too. */
    got = read_on("c", 0, NULL, "range(100)", "--mode", "distributed_epoch", "--target-workers",
                  "auto", NULL);
    want = expected_range(100, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
}

static void test_named_job_other_target(void **unused)
{
    (void)unused;
    char *got = read_on("a", 0, NULL, "range(10)", "--job-name", "named", "--target-workers",
                        "local", NULL);
    free(got);
    char *err = NULL;
    got = read_on("a", 1, &err, "range(10)", "--job-name", "named", NULL);
    assert_string_equal(got, "");
    assert_string_equal(err,
                        "sluice: read: job 'named' exists with target_workers local, not any\n");
    free(got);
    free(err);
    got =
        read_on("a", 1, &err, "range(10)", "--job-name", "named", "--target-workers", "auto", NULL);
    assert_string_equal(err,
                        "sluice: read: job 'named' exists with target_workers local, not auto\n");
    free(got);
    free(err);
    /* Coordinated reads need every worker. */
    got = read_on("a", 1, &err, "range(10) | repeat()", "--job-name", "coord", "--num-consumers",
                  "2", "--consumer-index", "0", "--target-workers", "local", NULL);
    assert_string_equal(err, "sluice: read: target_workers local cannot be combined with "
                             "num_consumers: coordinated reads need every worker\n");
    free(got);
    free(err);
}

static void test_late_worker_on_the_readers_host(void **unused)
{
    (void)unused;
    /* A host with one worker, d0; a local read there, slow enough to outlast a registration. */
    int d0 = add_worker_on("d");
    struct proc r;
    host("d");
    assert_int_equal(cluster_cli_spawn(&cl, &r, "read", "range(400) | map(wait_us, 5000)", "--mode",
                                       "distributed_epoch", "--job-name", "late",
                                       "--target-workers", "local", NULL),
                     0);
    host(NULL);
    /* Once the job exists (its task on d0), a second worker registers on d. */
    long long deadline = now_ms() + 10000;
    char *tasks = NULL;
    while (!(tasks = job_task_workers("late")) && now_ms() < deadline)
        usleep(20000);
    assert_non_null(tasks);
    assert_string_equal(tasks, cl.workers[d0].addr);
    free(tasks);
    int d1 = add_worker_on("d");
    /* It gets the job's task with its first heartbeats. */
    char *want = pair(d0, d1);
    deadline = now_ms() + 10000;
    for (;;) {
        tasks = job_task_workers("late");
        if (tasks && strcmp(tasks, want) == 0)
            break;
        if (now_ms() > deadline)
            fail_msg("the late worker got no task: tasks on %s", tasks ? tasks : "(no job)");
        free(tasks);
        usleep(20000);
    }
    free(tasks);
    char *out = proc_read_all(&r, 60000);
    assert_int_equal(proc_wait(&r, 10000), 0);
    struct tally t = tally_range(out, 400);
    print_tally("reader on d", t);
    assert_int_equal(t.lines, 400);
    assert_int_equal(t.lost + t.duplicated + t.unexpected, 0);
    free(out);
    /* Workers of other hosts never got one. */
    tasks = job_task_workers("late");
    assert_string_equal(tasks, want);
    free(tasks);
    free(want);
}

/* A host's readers leave a shared local distributed_epoch job early: its tasks go with them and
 * what they held is read on the other host, so the other reader still gets to the end, with
 * nothing lost between the two. */
static void test_a_host_leaves(void **unused)
{
    (void)unused;
    wait_workers_on("a", 1);
    wait_workers_on("b", 1);
    const char *pipeline = "range(600) | map(wait_us, 3000)";
    struct proc ra;
    host("a");
    assert_int_equal(cluster_cli_spawn(&cl, &ra, "read", pipeline, "--mode", "distributed_epoch",
                                       "--job-name", "de-leave", "--target-workers", "local", NULL),
                     0);
    host(NULL);
    char *err = NULL;
    char *ob = read_on("b", 0, &err, pipeline, "--mode", "distributed_epoch", "--job-name",
                       "de-leave", "--target-workers", "local", "--limit", "5", NULL);
    free(err);
    char *oa = proc_read_all(&ra, 60000);
    assert_int_equal(proc_wait(&ra, 10000), 0);
    size_t la = strlen(oa), lb = strlen(ob);
    char *both = malloc(la + lb + 2);
    assert_non_null(both);
    memcpy(both, oa, la);
    memcpy(both + la, ob, lb + 1);
    if (lb && ob[lb - 1] != '\n')
        strcat(both, "\n");
    struct tally t = tally_range(both, 600);
    print_tally("reader on a and the one on b that left", t);
    assert_int_equal(count_lines(ob), 5);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.unexpected, 0);
    free(oa);
    free(ob);
    free(both);
    /* b's task went with its reader. */
    char *tasks = job_task_workers("de-leave");
    assert_string_equal(tasks, cl.workers[worker_a].addr);
    free(tasks);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_parallel_epochs),
        cmocka_unit_test(test_local_distributed_two_hosts),
        cmocka_unit_test(test_no_local_worker),
        cmocka_unit_test(test_auto_reads_everything),
        cmocka_unit_test(test_named_job_other_target),
        cmocka_unit_test(test_late_worker_on_the_readers_host),
        cmocka_unit_test(test_a_host_leaves),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
