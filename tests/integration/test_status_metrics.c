/* The status document and the dispatcher's metrics agree, and `sluice status --watch` refreshes.
 *
 * Agreement: on a quiescent cluster (a finished read, and a distributed_epoch reader of an endless
 * pipeline stopped with SIGSTOP so it holds its client, its leases and full worker buffers), every
 * gauge of GET /metrics with a counterpart in `sluice status --json` equals it: workers, draining
 * workers, datasets, jobs, iterations by state, tasks, clients, outstanding leases, buffers, served
 * rates, the recommendation, and the per-job and per-worker labelled gauges field by field. A
 * scrape, the status, and a second scrape are taken until both scrapes agree with each other (the
 * cluster was still for the status request), at most WAIT_MS.
 *
 * Watch: in plain mode (stdout a pipe) the tables repeat, separated by a blank line and without
 * terminal escapes, until SIGINT (exit 0); a dispatcher that goes away ends it with exit 1 once
 * --timeout-ms passes, with the reason. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/scrape.h"
#include "lib/tmp.h"

#define WAIT_MS 20000

static double num(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_number(v))
        fail_msg("'%s' is not a number", key);
    return json_number_value(v);
}

/* A JSON array's length, or a number's value. */
static double count(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_array(v) ? (double)json_array_size(v) : num(obj, key);
}

/* Differences between metrics and status, as text. */
struct diff {
    char text[4096];
    size_t len;
    int n;
};

static void check(struct diff *d, const struct expo *e, const char *name, const char *labels,
                  double want)
{
    double got;
    if (expo_value(e, name, labels, &got) != 0) {
        got = NAN;
    } else if (got == want) {
        return;
    }
    d->n++;
    if (d->len < sizeof d->text)
        d->len +=
            (size_t)snprintf(d->text + d->len, sizeof d->text - d->len,
                             "  %s{%s}: metrics %.17g, status %.17g\n", name, labels, got, want);
}

/* Compares every gauge with a counterpart in the status document. */
static void compare(const struct expo *e, json_t *doc, struct diff *d)
{
    json_t *workers = json_object_get(doc, "workers"), *jobs = json_object_get(doc, "jobs");
    double draining = 0, buffered = 0, buffered_bytes = 0, worker_tasks = 0;
    size_t i;
    json_t *w;
    json_array_foreach(workers, i, w)
    {
        char l[64];
        snprintf(l, sizeof l, "worker=\"%.0f\"", num(w, "id"));
        draining += json_is_true(json_object_get(w, "draining"));
        buffered += num(w, "buffered");
        buffered_bytes += num(w, "buffered_bytes");
        worker_tasks += count(w, "tasks");
        check(d, e, "sluice_workers_tasks", l, count(w, "tasks"));
        check(d, e, "sluice_workers_buffered_elements", l, num(w, "buffered"));
        check(d, e, "sluice_workers_buffered_bytes", l, num(w, "buffered_bytes"));
        check(d, e, "sluice_workers_served_elements_per_second", l, num(w, "elements_per_second"));
        check(d, e, "sluice_workers_served_bytes_per_second", l, num(w, "bytes_per_second"));
    }
    check(d, e, "sluice_workers", "", (double)json_array_size(workers));
    check(d, e, "sluice_workers_draining", "", draining);
    check(d, e, "sluice_datasets", "", (double)json_array_size(json_object_get(doc, "datasets")));
    check(d, e, "sluice_jobs", "", (double)json_array_size(jobs));
    check(d, e, "sluice_buffered_elements", "", buffered);
    check(d, e, "sluice_buffered_bytes", "", buffered_bytes);
    check(d, e, "sluice_recommended_workers", "", num(doc, "recommended_workers"));

    double tasks = 0, clients = 0, outstanding = 0, eps = 0, bps = 0;
    double active = 0, finished = 0, collected = 0;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        char l[64];
        snprintf(l, sizeof l, "job=\"%.0f\"", num(j, "id"));
        const char *state = json_string_value(json_object_get(j, "state"));
        assert_non_null(state);
        /* A failed iteration is active for the state machine. */
        active += strcmp(state, "active") == 0 || strcmp(state, "failed") == 0;
        finished += strcmp(state, "finished") == 0;
        collected += strcmp(state, "garbage_collected") == 0;
        json_t *splits = json_object_get(j, "splits");
        double leased = splits ? num(splits, "leased") : 0;
        tasks += count(j, "tasks");
        clients += num(j, "clients");
        outstanding += leased;
        eps += num(j, "elements_per_second");
        bps += num(j, "bytes_per_second");
        check(d, e, "sluice_job_clients", l, num(j, "clients"));
        check(d, e, "sluice_job_tasks", l, count(j, "tasks"));
        check(d, e, "sluice_job_workers", l, num(j, "workers"));
        check(d, e, "sluice_job_splits_finished", l, splits ? num(splits, "finished") : 0);
        check(d, e, "sluice_job_splits_outstanding", l, leased);
        check(d, e, "sluice_job_elements_per_second", l, num(j, "elements_per_second"));
        check(d, e, "sluice_job_bytes_per_second", l, num(j, "bytes_per_second"));
    }
    check(d, e, "sluice_iterations", "state=\"active\"", active);
    check(d, e, "sluice_iterations", "state=\"finished\"", finished);
    check(d, e, "sluice_iterations", "state=\"garbage_collected\"", collected);
    check(d, e, "sluice_tasks", "", tasks);
    check(d, e, "sluice_tasks", "", worker_tasks);
    check(d, e, "sluice_clients", "", clients);
    check(d, e, "sluice_splits_outstanding", "", outstanding);
    check(d, e, "sluice_served_elements_per_second", "", eps);
    check(d, e, "sluice_served_bytes_per_second", "", bps);
}

static void scrape(const char *addr, struct expo *e)
{
    char err[512] = "";
    if (scrape_metrics(addr, e, err, sizeof err) != 0)
        fail_msg("%s", err);
}

/* Whether two scrapes hold the same samples (the cluster did not change between them). */
static int same(const struct expo *a, const struct expo *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        if (strstr(a->v[i].name, "_total") || strstr(a->v[i].name, "journal_commit") ||
            strstr(a->v[i].name, "autoscale") || strstr(a->v[i].name, "request_seconds"))
            continue; /* counters of the scrapes and status requests themselves */
        double v;
        if (expo_value(b, a->v[i].name, a->v[i].labels, &v) != 0 || v != a->v[i].value)
            return 0;
    }
    return 1;
}

/* The held job of the status document: the distributed_epoch one. */
static json_t *held_job(json_t *doc)
{
    size_t i;
    json_t *j;
    json_array_foreach(json_object_get(doc, "jobs"), i, j)
    {
        if (strcmp(json_string_value(json_object_get(j, "mode")), "distributed_epoch") == 0)
            return j;
    }
    return NULL;
}

static void test_metrics_agree_with_status(void **unused)
{
    (void)unused;
    /* A short window, so rates settle to 0 soon after the reader stops; a long client timeout,
     * so the stopped reader keeps its client. */
    static const char *const dargs[] = {
        "--metrics-port", "0", "--autoscale-window-ms", "1000", "--client-timeout-ms",
        "120000",         NULL};
    struct cluster c;
    memset(&c, 0, sizeof c);
    c.dispatcher_args = dargs;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    char dm[64];
    assert_int_equal(cluster_read_address(&c.dispatcher, " metrics on ", dm, sizeof dm, 10000), 0);
    assert_int_equal(cluster_add_worker(&c), 0);
    assert_int_equal(cluster_add_worker(&c), 1);

    /* A read to its end: a finished parallel_epochs job. */
    char *out = NULL;
    assert_int_equal(cluster_cli(&c, &out, NULL, "read", "range(1000)", "--format", "count", NULL),
                     0);
    assert_string_equal(out, "2000\n"); /* each of the two workers runs the whole pipeline */
    free(out);

    /* A reader of an endless distributed_epoch pipeline, measured while it reads. */
    struct proc reader;
    assert_int_equal(cluster_cli_spawn(&c, &reader, "read",
                                       "range(100000) | repeat() | map(bytes, 100)", "--mode",
                                       "distributed_epoch", "--job-name", "held", "--format",
                                       "count", NULL),
                     0);
    long long deadline = now_ms() + WAIT_MS;
    double eps = 0, bps = 0;
    while (now_ms() < deadline) {
        json_t *doc = cluster_status(&c);
        json_t *j = held_job(doc);
        if (j) {
            eps = num(j, "elements_per_second");
            bps = num(j, "bytes_per_second");
            assert_int_equal(num(json_object_get(doc, "config"), "client_timeout_ms"), 120000);
        }
        json_decref(doc);
        if (eps > 0)
            break;
        sleep_ms(100);
    }
    if (!(eps > 0))
        fail_msg("the reading job never showed a served rate");
    /* Every element is at least its 100 bytes. */
    assert_true(bps >= 100 * eps);

    /* Stopped, the reader holds its client and its leases; the buffers fill and stay full. */
    assert_int_equal(kill(reader.pid, SIGSTOP), 0);
    struct diff d;
    int agreed = 0;
    json_t *doc = NULL;
    deadline = now_ms() + WAIT_MS;
    while (!agreed && now_ms() < deadline) {
        struct expo a, b;
        scrape(dm, &a);
        json_decref(doc);
        doc = cluster_status(&c);
        scrape(dm, &b);
        memset(&d, 0, sizeof d);
        compare(&a, doc, &d);
        json_t *j = held_job(doc);
        /* Quiescent: nothing changed around the status request and the rates have settled. */
        agreed = same(&a, &b) && d.n == 0 && j && num(j, "elements_per_second") == 0;
        expo_free(&a);
        expo_free(&b);
        if (!agreed)
            sleep_ms(200);
    }
    if (!agreed)
        fail_msg("metrics and status disagree (%d):\n%s", d.n, d.text);
    /* What was compared is not trivially empty. */
    json_t *j = held_job(doc);
    assert_non_null(j);
    assert_int_equal(num(j, "clients"), 1);
    assert_true(num(j, "workers") >= 1);
    assert_true(num(json_object_get(j, "splits"), "leased") >= 1);
    assert_true(json_is_null(json_object_get(json_object_get(j, "splits"), "total")));
    double buffered = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(doc, "workers"), i, w)
    {
        buffered += num(w, "buffered");
        assert_true(json_is_integer(json_object_get(w, "heartbeat_age_ms")));
    }
    assert_true(buffered > 0);
    assert_int_equal(json_array_size(json_object_get(doc, "jobs")), 2);
    json_decref(doc);

    /* The table shows the held job's splits as endless. */
    assert_int_equal(cluster_cli(&c, &out, NULL, "status", NULL), 0);
    if (!strstr(out, "/endless") || !strstr(out, "ELEM/S") || !strstr(out, "HEARTBEAT"))
        fail_msg("unexpected tables:\n%s", out);
    free(out);

    kill(reader.pid, SIGCONT);
    proc_stop(&reader, SIGKILL, 10000);
    assert_int_equal(cluster_stop(&c), 0);
}

static size_t occurrences(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

static void test_watch(void **unused)
{
    (void)unused;
    struct cluster c;
    memset(&c, 0, sizeof c);
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_int_equal(cluster_add_worker(&c), 0);

    /* Plain mode until SIGINT. */
    struct proc watch;
    assert_int_equal(
        cluster_cli_spawn(&c, &watch, "status", "--watch", "--interval-ms", "200", NULL), 0);
    /* Read until two tables are out (bounded), then stop it; the rest of its output is read to
     * the end (it exits on the signal) before its exit status. */
    char *out = NULL;
    size_t len = 0;
    long long deadline = now_ms() + WAIT_MS;
    while (now_ms() < deadline && (!out || occurrences(out, "workers (") < 2)) {
        struct pollfd pfd = {.fd = watch.out_fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        char buf[4096];
        ssize_t n = read(watch.out_fd, buf, sizeof buf);
        if (n <= 0)
            break;
        char *grown = realloc(out, len + (size_t)n + 1);
        assert_non_null(grown);
        out = grown;
        memcpy(out + len, buf, (size_t)n);
        len += (size_t)n;
        out[len] = '\0';
    }
    assert_int_equal(kill(watch.pid, SIGINT), 0);
    char *rest = proc_read_all(&watch, 10000);
    assert_int_equal(proc_wait(&watch, 10000), 0);
    assert_non_null(rest);
    char *all = malloc(len + strlen(rest) + 1);
    assert_non_null(all);
    memcpy(all, out ? out : "", len);
    strcpy(all + len, rest);
    free(out);
    free(rest);
    out = all;
    assert_non_null(out);
    size_t tables = occurrences(out, "workers (");
    if (tables < 2 || strchr(out, '\x1b') != NULL)
        fail_msg("want at least two plain tables:\n%s", out);
    /* Each refresh after the first starts after a blank line. */
    assert_int_equal(occurrences(out, "\n\nrecommended_workers: "), tables - 1);
    assert_int_equal(strncmp(out, "recommended_workers: ", 21), 0);
    free(out);

    /* A usage error. */
    char *err = NULL;
    assert_int_equal(cluster_cli(&c, NULL, &err, "status", "--watch", "--interval-ms", "0", NULL),
                     2);
    assert_non_null(strstr(err, "--interval-ms"));
    free(err);

    /* The dispatcher goes away: exit 1 once --timeout-ms passes, with the reason. */
    assert_int_equal(cluster_cli_spawn(&c, &watch, "status", "--watch", "--interval-ms", "100",
                                       "--timeout-ms", "1000", NULL),
                     0);
    sleep_ms(300);
    assert_int_equal(proc_stop(&c.dispatcher, SIGTERM, 10000), 0);
    out = proc_read_all(&watch, 15000);
    assert_int_equal(proc_wait(&watch, 5000), 1);
    assert_true(occurrences(out, "workers (") >= 1);
    free(out);
    FILE *f = fopen(watch.log, "r");
    assert_non_null(f);
    char line[1024] = "";
    if (!fgets(line, sizeof line, f))
        line[0] = '\0';
    fclose(f);
    char want[300];
    snprintf(want, sizeof want,
             "sluice: status: no progress for 1000 ms: waiting for dispatcher %s",
             c.dispatcher.addr);
    if (strncmp(line, want, strlen(want)) != 0)
        fail_msg("unexpected error: %s (wanted %s...)", line, want);
    assert_int_equal(cluster_stop(&c), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_agree_with_status),
        cmocka_unit_test(test_watch),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
