/* Long-running functions stop when their task does. A real dispatcher and worker, a reader of a
 * pipeline whose every element takes a minute (map(sleep_us, 60000000)) or never ends (a Python
 * function in an endless loop): once the reader is killed and its job collected, the worker's
 * thread stops spinning well before the element's minute is up; a worker told to drain (SIGTERM)
 * while such a function runs exits within its drain timeout plus a few seconds; and a Python
 * function blocked in C code (time.sleep), which nothing can interrupt, is abandoned rather than
 * holding the worker's exit. Bounds are generous: the point is minutes against seconds. */
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
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_MS 30000
#define DRAIN_MS 2000 /* the workers' --drain-timeout-ms */

static const char module_text[] = "import time\n"
                                  "\n"
                                  "def spin(x):\n"
                                  "    while True:\n"
                                  "        pass\n"
                                  "\n"
                                  "def nap(x):\n"
                                  "    time.sleep(3600)\n"
                                  "    return x\n";

static char mod_dir[512];

/* Whether some thread of pid is running or runnable (state R): a thread spinning in a function
 * always is, whatever the machine's load. */
static bool some_thread_runs(pid_t pid)
{
    struct proc_threads t;
    return proc_threads(pid, &t) == 0 && t.running > 0;
}

/* Waits up to timeout_ms until a thread of pid has been seen running in 20 samples in a row
 * (a function spinning; an idle worker's threads wake only briefly). */
static bool wait_spinning(pid_t pid, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    int row = 0;
    while (now_ms() < deadline) {
        row = some_thread_runs(pid) ? row + 1 : 0;
        if (row >= 20)
            return true;
        usleep(20000);
    }
    return false;
}

/* Waits up to timeout_ms until a sample finds no thread of pid running: nothing spins any more.
 * Returns the milliseconds it took, or -1. */
static long long wait_quiet(pid_t pid, int timeout_ms)
{
    long long start = now_ms(), deadline = start + timeout_ms;
    while (now_ms() < deadline) {
        if (!some_thread_runs(pid))
            return now_ms() - start;
        usleep(20000);
    }
    return -1;
}

static int setup(void **state)
{
    snprintf(mod_dir, sizeof mod_dir, "%s/pymods", tmp_dir());
    if (mkdir(mod_dir, 0700) != 0 && errno != EEXIST)
        return -1;
    file_write_in(mod_dir, "stuck.py", module_text);
    static const char *worker_args[] = {
        "--python-path", mod_dir, "--drain-timeout-ms", "2000", "--log-level", "info", NULL};
    /* A job is collected 1 s after its last client is released (5 s after it went silent). */
    static const char *dispatcher_args[] = {"--job-gc-timeout-ms", "1000", NULL};
    return (*state = cluster_new(dispatcher_args, worker_args, 0, 1)) ? 0 : -1;
}

/* A reader of pipeline is started, the worker's function is seen spinning, the reader is
 * killed: once the dispatcher collects the job (5 s of client timeout, 1 s of job collection), the
 * worker's thread
 * stops within a bound far below the element's minute. */
static void collected_stops(struct cluster *c, const char *pipeline)
{
    struct proc reader;
    assert_int_equal(cluster_cli_spawn(c, &reader, "read", pipeline, NULL), 0);
    pid_t wpid = c->workers[0].pid;
    assert_true(wait_spinning(wpid, WAIT_MS));
    assert_int_equal(proc_stop(&reader, SIGKILL, WAIT_MS), 128 + SIGKILL);
    long long took = wait_quiet(wpid, WAIT_MS);
    print_message("%s: the worker stopped spinning %lld ms after its reader was killed\n", pipeline,
                  took);
    assert_true(took >= 0);
    /* The worker is still fine: it serves the next read exactly. */
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(5)", NULL), 0);
    char *got = sorted_lines(out), *want = expected_range(5, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    free(err);
}

/* A worker told to drain while pipeline's function runs exits 0 within its drain timeout plus
 * a few seconds. Returns the milliseconds it took. */
static long long drained_exits(struct cluster *c, const char *pipeline, bool spins)
{
    struct proc reader;
    assert_int_equal(cluster_cli_spawn(c, &reader, "read", pipeline, NULL), 0);
    struct proc *w = &c->workers[0];
    if (spins)
        assert_true(wait_spinning(w->pid, WAIT_MS));
    else
        assert_true(proc_wait_log(w, " started: dataset ", WAIT_MS) >= 0);
    usleep(500000); /* the function is running */
    long long t0 = now_ms();
    assert_int_equal(kill(w->pid, SIGTERM), 0);
    int status = proc_wait(w, WAIT_MS);
    long long took = now_ms() - t0;
    print_message("%s: the worker exited %d, %lld ms after SIGTERM (drain timeout %d ms)\n",
                  pipeline, status, took, DRAIN_MS);
    assert_int_equal(status, 0);
    /* Generous: a drain timeout, the abandonment's 3 s, and a loaded machine. */
    assert_true(took < DRAIN_MS + 15000);
    c->nworkers = 0;
    proc_stop(&reader, SIGKILL, WAIT_MS);
    return took;
}

static void test_sleep_us_collected(void **state)
{
    collected_stops(*state, "range(4) | map(sleep_us, 60000000)");
}

static void test_sleep_us_drained(void **state)
{
    drained_exits(*state, "range(4) | map(sleep_us, 60000000)", true);
}

#ifdef SLUICE_WORKER_HAS_PYTHON
static void test_python_loop_collected(void **state)
{
    collected_stops(*state, "range(4) | map(py, \"stuck:spin\")");
}

static void test_python_loop_drained(void **state)
{
    drained_exits(*state, "range(4) | map(py, \"stuck:spin\")", true);
}

/* A function that cannot be interrupted keeps its thread after its job is collected: the
 * worker says so, once, rather than let it go unnoticed, and its pool starts another thread in
 * its place. */
static void test_python_sleep_reported(void **state)
{
    struct cluster *c = *state;
    struct proc reader;
    assert_int_equal(
        cluster_cli_spawn(c, &reader, "read", "range(4) | map(py, \"stuck:nap\")", NULL), 0);
    assert_true(proc_wait_log(&c->workers[0], " started: dataset ", WAIT_MS) >= 0);
    assert_int_equal(proc_stop(&reader, SIGKILL, WAIT_MS), 128 + SIGKILL);
    assert_true(proc_wait_log(&c->workers[0],
                              ": its pipeline has not stopped 3000 ms after its cancellation (a "
                              "function that neither returns nor notices cancellation); it keeps "
                              "its thread until the function returns or the worker stops, and "
                              "the pool starts another in its place",
                              WAIT_MS) >= 0);
}

/* time.sleep cannot be interrupted: the worker abandons the thread, says so, and exits. */
static void test_python_sleep_abandoned(void **state)
{
    struct cluster *c = *state;
    drained_exits(c, "range(4) | map(py, \"stuck:nap\")", false);
    assert_true(proc_wait_log(&c->workers[0], "its threads are abandoned", 1000) >= 0);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sleep_us_collected, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_sleep_us_drained, setup, cluster_teardown_lax),
#ifdef SLUICE_WORKER_HAS_PYTHON
        cmocka_unit_test_setup_teardown(test_python_loop_collected, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_python_loop_drained, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_python_sleep_abandoned, setup, cluster_teardown_lax),
        cmocka_unit_test_setup_teardown(test_python_sleep_reported, setup, cluster_teardown_lax),
#endif
    };
    if (getenv("SLUICE_TEST_FILTER"))
        cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
