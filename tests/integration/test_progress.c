/* The progress display of `sluice read`: a live line redrawn on a terminal (standard error on a
 * pseudo-terminal), plain lines with --progress for logs, nothing with --quiet or when standard
 * error is not a terminal; and the standard output stays the elements alone in every case. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/tmp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 60000

static const char *const PIPELINE = "range(300000) | map(wait_us, 10)";

static int setup(void **state)
{
    return (*state = cluster_new(NULL, NULL, 0, 2)) ? 0 : -1;
}

/* Runs `sluice read PIPELINE --mode distributed_epoch --format count [extra]` with standard error
 * on a pseudo-terminal and standard output to a pipe; returns what each received. */
static void read_on_pty(struct cluster *c, const char *extra, char **out, char **err)
{
    char disp[64];
    snprintf(disp, sizeof disp, "127.0.0.1:%d", c->port);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    int master;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The pty is standard input, output and error now: only error stays on it. */
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execl(bin_path("sluice"), "sluice", "read", "--dispatcher", disp, PIPELINE, "--mode",
              "distributed_epoch", "--format", "count", extra, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    size_t cap[2] = {4096, 4096}, len[2] = {0, 0};
    char *buf[2] = {malloc(cap[0]), malloc(cap[1])};
    assert_true(buf[0] && buf[1]);
    int fds[2] = {pipefd[0], master};
    bool open_[2] = {true, true};
    long long deadline = now_ms() + WAIT_MS;
    while ((open_[0] || open_[1]) && now_ms() < deadline) {
        struct pollfd p[2] = {{.fd = open_[0] ? fds[0] : -1, .events = POLLIN},
                              {.fd = open_[1] ? fds[1] : -1, .events = POLLIN}};
        if (poll(p, 2, 500) <= 0)
            continue;
        for (int k = 0; k < 2; k++) {
            if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (cap[k] - len[k] < 1024) {
                cap[k] *= 2;
                buf[k] = realloc(buf[k], cap[k]);
                assert_non_null(buf[k]);
            }
            ssize_t r = read(fds[k], buf[k] + len[k], cap[k] - len[k] - 1);
            if (r <= 0) /* a pty reads EIO once its other side is closed */
                open_[k] = false;
            else
                len[k] += (size_t)r;
        }
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fds[0]);
    close(master);
    buf[0][len[0]] = 0;
    buf[1][len[1]] = 0;
    *out = buf[0];
    *err = buf[1];
}

/* On a terminal: the line is redrawn in place (carriage returns, no newline until the end), each
 * draw carries the count, the rates and the share of the epoch, and the last is the whole
 * epoch. */
static void test_live_line_on_a_terminal(void **state)
{
    char *out, *err;
    read_on_pty(*state, NULL, &out, &err);
    assert_string_equal(out, "300000\n");
    printf("    terminal: %zu bytes, %.120s...\n", strlen(err), err);
    assert_true(err[0] == '\r');
    size_t draws = 0;
    for (const char *p = err; (p = strchr(p, '\r')); p++)
        draws++;
    assert_true(draws >= 2);
    /* One line in all: the only newline ends the final draw (a pty shows \n as \r\n). */
    const char *nl = strchr(err, '\n');
    assert_non_null(nl);
    assert_true(nl[1] == '\0');
    const char *last = strrchr(err, '\r');
    if (last > err && last[1] == '\n') {
        /* the \r of the pty's \r\n */
        last--;
        while (last > err && *last != '\r')
            last--;
    }
    assert_true(strncmp(last, "\r300k elements  ", 16) == 0);
    assert_non_null(strstr(last, "/s  "));
    assert_non_null(strstr(last, " MB/s  "));
    assert_non_null(strstr(last, "  100%"));
    /* An earlier draw shows the share of the epoch with an ETA. */
    assert_non_null(strstr(err, "% ETA "));
    free(out);
    free(err);
}

/* --quiet on a terminal: nothing on standard error. */
static void test_quiet(void **state)
{
    char *out, *err;
    read_on_pty(*state, "--quiet", &out, &err);
    assert_string_equal(out, "300000\n");
    assert_string_equal(err, "");
    free(out);
    free(err);
}

/* --progress with standard error not a terminal: plain lines, the last one the whole epoch;
 * without it, nothing. */
static void test_plain_lines(void **state)
{
    struct cluster *c = *state;
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", PIPELINE, "--mode", "distributed_epoch",
                                 "--format", "count", "--progress", NULL),
                     0);
    assert_string_equal(out, "300000\n");
    printf("    --progress: %s", err);
    const char *last = err;
    for (const char *p = err; *p; p++)
        if (*p == '\n' && p[1])
            last = p + 1;
    assert_true(strncmp(last, "sluice: read 300k elements  ", 28) == 0);
    assert_non_null(strstr(last, " MB/s  "));
    assert_true(strlen(last) > 7 && strcmp(last + strlen(last) - 7, "  100%\n") == 0);
    assert_null(strchr(err, '\r'));
    free(out);
    free(err);
    out = err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", PIPELINE, "--mode", "distributed_epoch",
                                 "--format", "count", NULL),
                     0);
    assert_string_equal(out, "300000\n");
    assert_string_equal(err, "");
    free(out);
    free(err);
    out = err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(3)", "--progress", "--quiet", NULL),
                     2);
    assert_non_null(strstr(err, "--progress and --quiet exclude each other"));
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_live_line_on_a_terminal, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_quiet, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_plain_lines, setup, cluster_teardown),
    };
    cmocka_set_test_filter(getenv("SLUICE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
