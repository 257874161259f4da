#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"

#include "lib/clock.h"
#include "lib/file.h"
#include "lib/net.h"
#include "lib/scrape.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    c->port = addr_port(c->dispatcher.addr);
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

struct cluster *cluster_new(const char *const *dispatcher_args, const char *const *worker_args,
                            int fault_tolerant, int nworkers)
{
    struct cluster *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->dispatcher_args = dispatcher_args;
    c->worker_args = worker_args;
    if (cluster_start_dispatcher(c, 0, fault_tolerant) != 0)
        goto fail;
    for (int i = 0; i < nworkers; i++)
        if (cluster_add_worker(c) < 0)
            goto fail;
    return c;
fail:
    cluster_free(c);
    return NULL;
}

int cluster_free(struct cluster *c)
{
    if (!c)
        return 0;
    int rc = cluster_stop(c);
    free(c);
    return rc;
}

int cluster_teardown(void **state)
{
    return cluster_free(*state);
}

int cluster_teardown_lax(void **state)
{
    cluster_free(*state);
    return 0;
}

void cluster_add_workers(struct cluster *c, int n)
{
    for (int i = 0; i < n; i++)
        assert_true(cluster_add_worker(c) >= 0);
}

json_t *cluster_status(struct cluster *c)
{
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "status", "--json", NULL);
    if (rc != 0)
        fail_msg("sluice status --json exited %d: %s", rc, err ? err : "");
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (!doc)
        fail_msg("status is not JSON (%s): %s", jerr.text, out);
    free(out);
    free(err);
    return doc;
}

void cluster_wait_registered(struct cluster *c)
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
        sleep_ms(50);
    }
    fail_msg("the workers did not register");
}

json_t *cluster_wait_job(struct cluster *c, const char *name, size_t ntasks, int timeout_ms)
{
    long long t0 = now_ms();
    for (;;) {
        json_t *doc = cluster_status(c);
        json_t *jobs = json_object_get(doc, "jobs");
        for (size_t i = 0; i < json_array_size(jobs); i++) {
            json_t *j = json_array_get(jobs, i);
            const char *n = json_string_value(json_object_get(j, "name"));
            if (n && strcmp(n, name) == 0 &&
                json_array_size(json_object_get(j, "tasks")) >= ntasks) {
                json_incref(j);
                json_decref(doc);
                return j;
            }
        }
        json_decref(doc);
        if (now_ms() - t0 > timeout_ms)
            fail_msg("job '%s' with %zu task(s) did not appear", name, ntasks);
        sleep_ms(50);
    }
}

uint64_t cluster_task_on(json_t *job, const char *address)
{
    json_t *tasks = json_object_get(job, "tasks");
    for (size_t i = 0; i < json_array_size(tasks); i++) {
        json_t *t = json_array_get(tasks, i);
        const char *worker = json_string_value(json_object_get(t, "worker"));
        if (worker && strcmp(worker, address) == 0) {
            json_t *id = json_object_get(t, "id");
            assert_true(json_is_integer(id));
            return (uint64_t)json_integer_value(id);
        }
    }
    fail_msg("no task on %s", address);
    return 0;
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

/* cluster_run with the arguments after cmd in ap. */
static char *vrun(struct cluster *c, int want_rc, char **err, const char *cmd, va_list ap)
{
    char *argv[32];
    char disp[64];
    build_argv(c, argv, disp, sizeof(disp), cmd, ap);
    char *out = NULL, *e = NULL;
    int rc = run_cmd(argv, 60000, &out, &e);
    if (rc != want_rc)
        print_error("sluice %s %s: exit %d (want %d)\nstdout: %s\nstderr: %s\n", cmd,
                    argv[4] ? argv[4] : "", rc, want_rc, out ? out : "", e ? e : "");
    assert_int_equal(rc, want_rc);
    if (err)
        *err = e;
    else
        free(e);
    return out;
}

char *cluster_run(struct cluster *c, int want_rc, char **err, const char *cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    char *out = vrun(c, want_rc, err, cmd, ap);
    va_end(ap);
    return out;
}

void cluster_expect_read(struct cluster *c, const char *want, ...)
{
    va_list ap, args;
    va_start(ap, want);
    va_copy(args, ap);
    const char *pipeline = va_arg(args, const char *);
    va_end(args);
    char *out = vrun(c, 0, NULL, "read", ap);
    va_end(ap);
    char *got = sorted_lines(out), *expected = sorted_lines(want);
    if (strcmp(got, expected) != 0)
        print_error("sluice read %s:\ngot:\n%swant:\n%s", pipeline ? pipeline : "", got, expected);
    assert_string_equal(got, expected);
    free(got);
    free(expected);
    free(out);
}

static long long size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

char *cluster_resumed_read(struct cluster *c, const char *pipeline, const char *split_size,
                           const char *every, const char *ck, const char *out, long long total,
                           int kills, int read_ms)
{
    for (int k = 0; k <= kills; k++) {
        struct proc r = {0};
        if (k > 0)
            assert_int_equal(cluster_cli_spawn(c, &r, "read", "--checkpoint", ck,
                                               "--checkpoint-every", every, "--output", out, NULL),
                             0);
        else if (split_size)
            assert_int_equal(cluster_cli_spawn(c, &r, "read", pipeline, "--mode",
                                               "distributed_epoch", "--split-size", split_size,
                                               "--checkpoint", ck, "--checkpoint-every", every,
                                               "--output", out, NULL),
                             0);
        else
            assert_int_equal(cluster_cli_spawn(c, &r, "read", pipeline, "--mode",
                                               "distributed_epoch", "--checkpoint", ck,
                                               "--checkpoint-every", every, "--output", out, NULL),
                             0);
        if (k == kills) {
            int rc = proc_wait(&r, read_ms);
            if (rc != 0)
                print_file(r.log, 100);
            assert_int_equal(rc, 0);
            break;
        }
        long long at = total * (k + 1) / (kills + 1);
        long long deadline = now_ms() + read_ms;
        while (size_of(out) < at && proc_wait(&r, 0) == -2 && now_ms() < deadline)
            usleep(2000);
        if (proc_wait(&r, 0) != -2) {
            print_file(r.log, 100);
            fail_msg("the read ended before it was killed at %lld of %lld bytes", at, total);
        }
        proc_stop(&r, SIGKILL, read_ms);
    }
    return read_text_file(out);
}

int cluster_read_address(struct proc *p, const char *marker, char *out, size_t len, int timeout_ms)
{
    char line[512];
    size_t have = 0;
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        long long left = deadline - now_ms();
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

void cluster_scrape_worker(struct cluster *c, int i, struct expo *out)
{
    char addr[64], err[512] = "";
    assert_int_equal(cluster_read_address(&c->workers[i], " metrics on ", addr, sizeof addr, 10000),
                     0);
    if (scrape_metrics(addr, out, err, sizeof err) != 0)
        fail_msg("worker %d: %s", i, err);
}
