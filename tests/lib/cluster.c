#include "lib/cluster.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cluster_start_dispatcher(struct cluster *c, int port, int fault_tolerant)
{
    char portbuf[16];
    snprintf(portbuf, sizeof(portbuf), "%d", port > 0 ? port : 0);
    static int clusters;
    if (fault_tolerant && !c->work_dir[0])
        snprintf(c->work_dir, sizeof(c->work_dir), "%s/dispatcher-%d", tmp_dir(), ++clusters);
    char *argv[48];
    int n = 0;
    argv[n++] = (char *)bin_path("sluice-dispatcher");
    argv[n++] = "--port";
    argv[n++] = portbuf;
    argv[n++] = "--worker-timeout-ms";
    argv[n++] = "2000";
    argv[n++] = "--client-timeout-ms";
    argv[n++] = "5000";
    if (c->work_dir[0]) {
        argv[n++] = "--fault-tolerant";
        argv[n++] = "--work-dir";
        argv[n++] = c->work_dir;
    }
    for (int i = 0; c->dispatcher_args && c->dispatcher_args[i] && n < 47; i++)
        argv[n++] = (char *)c->dispatcher_args[i];
    argv[n] = NULL;
    if (proc_start(&c->dispatcher, argv, 10000) != 0)
        return -1;
    const char *colon = strrchr(c->dispatcher.addr, ':');
    c->port = colon ? atoi(colon + 1) : -1;
    return 0;
}

int cluster_restart_dispatcher(struct cluster *c, int sig)
{
    proc_stop(&c->dispatcher, sig, 10000);
    return cluster_start_dispatcher(c, c->port, c->work_dir[0] != 0);
}

int cluster_add_worker(struct cluster *c)
{
    return cluster_add_worker_on(c, 0);
}

int cluster_add_worker_on(struct cluster *c, int port)
{
    if (c->nworkers == CLUSTER_MAX_WORKERS)
        return -1;
    char disp[160], portbuf[16];
    snprintf(disp, sizeof(disp), "127.0.0.1:%d", c->port);
    snprintf(portbuf, sizeof(portbuf), "%d", port > 0 ? port : 0);
    char *argv[48] = {(char *)bin_path("sluice-worker"),
                      "--dispatcher",
                      disp,
                      "--port",
                      portbuf,
                      "--threads",
                      "2",
                      NULL};
    int n = 7;
    for (int k = 0; c->worker_args && c->worker_args[k] && n < 47; k++)
        argv[n++] = (char *)c->worker_args[k];
    argv[n] = NULL;
    int i = c->nworkers;
    if (proc_start(&c->workers[i], argv, 10000) != 0)
        return -1;
    c->nworkers++;
    return i;
}

int cluster_stop(struct cluster *c)
{
    int bad = 0;
    /* SIGINT stops a worker at once; SIGTERM would drain it first (test_elastic.c covers that),
     * which waits for readers still running at teardown. */
    for (int i = 0; i < c->nworkers; i++) {
        int rc = proc_stop(&c->workers[i], SIGINT, 10000);
        if (rc != 0 && rc != -1) {
            fprintf(stderr, "worker %d exited with %d\n", i, rc);
            bad = 1;
        }
    }
    int rc = proc_stop(&c->dispatcher, SIGTERM, 10000);
    if (rc != 0 && rc != -1) {
        fprintf(stderr, "dispatcher exited with %d\n", rc);
        bad = 1;
    }
    c->nworkers = 0;
    return bad ? -1 : 0;
}

static int build_argv(struct cluster *c, char **argv, char *disp, size_t displen, const char *cmd,
                      va_list ap)
{
    int n = 0;
    snprintf(disp, displen, "127.0.0.1:%d", c->port);
    argv[n++] = (char *)bin_path("sluice");
    argv[n++] = (char *)cmd;
    argv[n++] = "--dispatcher";
    argv[n++] = disp;
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 30)
        argv[n++] = (char *)a;
    argv[n] = NULL;
    return n;
}

int cluster_cli(struct cluster *c, char **out, char **err, const char *cmd, ...)
{
    char *argv[32];
    char disp[64];
    va_list ap;
    va_start(ap, cmd);
    build_argv(c, argv, disp, sizeof(disp), cmd, ap);
    va_end(ap);
    return run_cmd(argv, 60000, out, err);
}

int cluster_cli_spawn(struct cluster *c, struct proc *p, const char *cmd, ...)
{
    char *argv[32];
    char disp[64];
    va_list ap;
    va_start(ap, cmd);
    build_argv(c, argv, disp, sizeof(disp), cmd, ap);
    va_end(ap);
    return proc_spawn(p, argv);
}

int cluster_read_address(struct proc *p, const char *marker, char *out, size_t len, int timeout_ms)
{
    char line[512];
    size_t have = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long deadline = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long left = deadline - ((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
        if (left <= 0 || p->out_fd < 0)
            return -1;
        struct pollfd pfd = {.fd = p->out_fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)left) <= 0)
            continue;
        /* One byte at a time, so nothing after the line is taken from the pipe. */
        if (read(p->out_fd, line + have, 1) != 1)
            return -1;
        if (line[have] != '\n' && have + 2 < sizeof(line)) {
            have++;
            continue;
        }
        line[have] = 0;
        have = 0;
        const char *at = strstr(line, marker);
        if (at) {
            snprintf(out, len, "%s", at + strlen(marker));
            return 0;
        }
    }
}

char *expected_range(long n, int times)
{
    size_t cap = (size_t)n * (size_t)times * 21 + 1;
    char *text = malloc(cap);
    if (!text)
        abort();
    size_t len = 0;
    text[0] = 0;
    for (long i = 0; i < n; i++)
        for (int t = 0; t < times; t++)
            len += (size_t)snprintf(text + len, cap - len, "%ld\n", i);
    char *sorted = sorted_lines(text);
    free(text);
    return sorted;
}

struct tally tally_range(const char *text, long n)
{
    struct tally t = {0};
    unsigned *seen = calloc((size_t)n, sizeof(*seen));
    if (!seen)
        abort();
    for (const char *s = text; *s;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        char *end;
        long v = strtol(s, &end, 10);
        if (len > 0 && end == s + len && v >= 0 && v < n)
            seen[v]++;
        else
            t.unexpected++;
        t.lines++;
        s += len + (nl ? 1 : 0);
    }
    for (long v = 0; v < n; v++) {
        if (seen[v] == 0)
            t.lost++;
        else
            t.duplicated += seen[v] - 1;
    }
    free(seen);
    return t;
}

void print_tally(const char *what, struct tally t)
{
    printf("    %s: %ld lines, lost %ld, duplicated %ld, unexpected %ld\n", what, t.lines, t.lost,
           t.duplicated, t.unexpected);
    fflush(stdout);
}
