/* A distributed_epoch read whose consumer pauses while its only worker drains and the dispatcher
 * goes away: the read must not take the end of its last task for the end of the epoch.
 *
 * The reader is the `sluice` CLI with its stdout a pipe this test stops reading after the first
 * lines: the CLI blocks writing, the client stops asking, and the worker, drained with SIGTERM,
 * leaves once no reader asked for a while, handing the splits it holds back to the dispatcher's
 * pool. The dispatcher is then killed. With a fault-tolerant dispatcher restarted beside a new
 * worker, the read completes the epoch exactly; with no dispatcher coming back, it fails after
 * its --timeout-ms with the dispatcher named, and never exits 0 with part of the epoch. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Large enough that the pipe, the client's buffer and the worker's hold a small part of it. */
#define N 300000
#define N_TEXT "range(300000)"
/* Lines read before the consumer pauses: the read is flowing from the worker by then. */
#define FIRST_LINES 1000

/* Reads from fd until text holds at least lines newlines, at most timeout_ms. Returns the text
 * read (malloc'd; it may end in the middle of a line). */
static char *read_lines(int fd, long lines, int timeout_ms)
{
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    assert_non_null(buf);
    long seen = 0;
    long long deadline = now_ms() + timeout_ms;
    while (seen < lines) {
        long long left = deadline - now_ms();
        if (left <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            break;
        if (len + 4096 + 1 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t n = read(fd, buf + len, 4096);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            seen += buf[len + i] == '\n';
        len += (size_t)n;
    }
    buf[len] = '\0';
    return buf;
}

/* Starts the paused read: the first FIRST_LINES lines are read into *first, then nothing. */
static void start_paused_read(struct cluster *c, struct proc *r, char **first, const char *a1,
                              const char *a2)
{
    assert_int_equal(
        cluster_cli_spawn(c, r, "read", N_TEXT, "--mode", "distributed_epoch", a1, a2, NULL), 0);
    *first = read_lines(r->out_fd, FIRST_LINES, 60000);
    assert_true(count_lines(*first) >= FIRST_LINES);
}

/* Drains the only worker (SIGTERM) and waits for it to leave: with its reader paused, it hands
 * its splits back once no reader asked for a while. Then a few heartbeats pass, so the reader
 * learns from the dispatcher that its only task is gone: every task it knows has ended. */
static void drain_worker(struct cluster *c)
{
    assert_int_equal(proc_stop(&c->workers[0], SIGTERM, 60000), 0);
    sleep(4);
}

/* The whole output of the read: what was read before the pause, then the rest. */
static char *rest_of_read(struct proc *r, char *first, int timeout_ms)
{
    char *rest = proc_read_all(r, timeout_ms);
    size_t a = strlen(first), b = strlen(rest);
    char *all = malloc(a + b + 1);
    assert_non_null(all);
    memcpy(all, first, a);
    memcpy(all + a, rest, b + 1);
    free(first);
    free(rest);
    return all;
}

/* The dispatcher is killed while the paused reader's only task has ended and most splits are in
 * the pool, and comes back (fault tolerant) with a new worker: the epoch completes, exactly. */
static void test_restart_with_new_worker(void **state)
{
    struct cluster *c = calloc(1, sizeof *c);
    assert_non_null(c);
    *state = c;
    assert_int_equal(cluster_start_dispatcher(c, 0, 1), 0);
    assert_true(cluster_add_worker(c) >= 0);
    struct proc r;
    char *first;
    start_paused_read(c, &r, &first, NULL, NULL);
    drain_worker(c);
    proc_stop(&c->dispatcher, SIGKILL, 10000);
    /* Away longer than one heartbeat may take (5 s): the reader sees every task it knows ended
     * and its heartbeats to the dispatcher failing. */
    sleep(8);
    assert_int_equal(cluster_start_dispatcher(c, c->port, 1), 0);
    assert_true(cluster_add_worker(c) >= 0);
    char *out = rest_of_read(&r, first, 180000);
    int rc = proc_wait(&r, 10000);
    struct tally t = tally_range(out, N);
    if (rc != 0 || t.lines != N || t.lost || t.duplicated || t.unexpected) {
        print_tally("read", t);
        char *log = read_text_file(r.log);
        fprintf(stderr, "read exited %d; its stderr:\n%s\n", rc, log);
        free(log);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(t.lines, N);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    free(out);
}

/* The same outage without a restart: the read fails once the dispatcher has been unreachable for
 * its --timeout-ms, saying so, after the elements it did receive (each once). */
static void test_no_restart_fails(void **state)
{
    struct cluster *c = calloc(1, sizeof *c);
    assert_non_null(c);
    *state = c;
    assert_int_equal(cluster_start_dispatcher(c, 0, 0), 0);
    assert_true(cluster_add_worker(c) >= 0);
    struct proc r;
    char *first;
    /* Longer than a client heartbeat may take (5 s), so that the reader has tried the dispatcher
     * by the time it gives up: with less, the last thing it knew could be its task list emptied
     * by the drain ("no worker registered yet"), the dispatcher's death not yet seen. */
    start_paused_read(c, &r, &first, "--timeout-ms", "8000");
    drain_worker(c);
    proc_stop(&c->dispatcher, SIGKILL, 10000);
    char *out = rest_of_read(&r, first, 120000);
    int rc = proc_wait(&r, 10000);
    struct tally t = tally_range(out, N);
    char *log = read_text_file(r.log);
    if (rc != 1)
        fprintf(stderr, "read exited %d with %ld lines; its stderr:\n%s\n", rc, t.lines, log);
    assert_int_equal(rc, 1);
    assert_true(t.lines < N);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    /* The failure names the dispatcher and how long the read waited for it: the client's
     * (unreachable since its last answer) or the command's (no element since) comes first. */
    char unreachable[128], no_progress[128];
    snprintf(unreachable, sizeof unreachable,
             "sluice: read: dispatcher 127.0.0.1:%d unreachable for 8000 ms: ", c->port);
    snprintf(
        no_progress, sizeof no_progress,
        "sluice: read: no progress for 8000 ms: waiting for dispatcher 127.0.0.1:%d: ", c->port);
    const char *last = strstr(log, "sluice: read: ");
    if (!last || (strncmp(last, unreachable, strlen(unreachable)) != 0 &&
                  strncmp(last, no_progress, strlen(no_progress)) != 0))
        fail_msg("the read's stderr names neither the dispatcher's absence nor the lack of "
                 "progress:\n%s",
                 log);
    free(log);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_restart_with_new_worker, cluster_teardown),
        cmocka_unit_test_teardown(test_no_restart_fails, cluster_teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
