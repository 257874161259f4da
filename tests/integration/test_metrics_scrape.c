/* Metrics of real processes over loopback: the dispatcher's and the worker's GET /metrics parse
 * as the Prometheus text format (every line, HELP and TYPE, histograms), carry exact values where
 * the run decides them (workers registered, elements served equal to elements read, split
 * counters equal to the splits of the job, journal commits in fault-tolerant mode), and other
 * paths and methods are refused. The status document's recommendation and configuration, with
 * the defaults and with the test cluster's settings, in JSON and in the tables. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
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

static const char *const metrics_args[] = {"--metrics-port", "0", NULL};

/* Starts the dispatcher and nworkers workers, all with --metrics-port 0, and reads their metrics
 * addresses. */
static void start(struct cluster *c, int fault_tolerant, int nworkers, char *disp_metrics,
                  char worker_metrics[][64])
{
    memset(c, 0, sizeof(*c));
    c->dispatcher_args = metrics_args;
    c->worker_args = metrics_args;
    assert_int_equal(cluster_start_dispatcher(c, 0, fault_tolerant), 0);
    assert_int_equal(cluster_read_address(&c->dispatcher, " metrics on ", disp_metrics, 64, 10000),
                     0);
    for (int i = 0; i < nworkers; i++) {
        assert_int_equal(cluster_add_worker(c), i);
        assert_int_equal(
            cluster_read_address(&c->workers[i], " metrics on ", worker_metrics[i], 64, 10000), 0);
    }
}

static void scrape(const char *addr, struct expo *e)
{
    char err[512] = "";
    int rc = scrape_metrics(addr, e, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
}

static double value(const struct expo *e, const char *name, const char *labels)
{
    double v;
    if (expo_value(e, name, labels, &v) != 0)
        fail_msg("no sample %s{%s}", name, labels);
    return v;
}

/* Scrapes addr until name{labels} equals want, at most WAIT_MS; returns the last value. */
static double wait_value(const char *addr, const char *name, const char *labels, double want)
{
    long long deadline = now_ms() + WAIT_MS;
    double v;
    for (;;) {
        struct expo e;
        scrape(addr, &e);
        v = value(&e, name, labels);
        expo_free(&e);
        if (v == want || now_ms() > deadline)
            return v;
        usleep(50000);
    }
}

static json_int_t json_int_at(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        fail_msg("'%s' is not an integer", key);
    return json_integer_value(v);
}

static void expect_status(const char *addr, const char *request, int want)
{
    char *resp = NULL;
    assert_int_equal(scrape_request(addr, request, 10000, &resp), 0);
    if (scrape_status(resp) != want)
        fail_msg("%s to %s: expected %d, got: %.80s", request, addr, want, resp);
    free(resp);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_cluster_metrics(void **unused)
{
    (void)unused;
    struct cluster c;
    char dm[64], wm[2][64];
    start(&c, 0, 2, dm, wm);

    assert_true(wait_value(dm, "sluice_workers", "", 2) == 2);
    struct expo e;
    scrape(dm, &e);
    assert_true(value(&e, "sluice_workers", "") == 2);
    assert_true(value(&e, "sluice_workers_draining", "") == 0);
    assert_true(value(&e, "sluice_datasets", "") == 0);
    assert_true(value(&e, "sluice_jobs", "") == 0);
    assert_true(value(&e, "sluice_tasks", "") == 0);
    assert_true(value(&e, "sluice_clients", "") == 0);
    assert_true(value(&e, "sluice_iterations", "state=\"active\"") == 0);
    assert_true(value(&e, "sluice_iterations", "state=\"finished\"") == 0);
    assert_true(value(&e, "sluice_iterations", "state=\"garbage_collected\"") == 0);
    assert_true(value(&e, "sluice_splits_leased_total", "") == 0);
    assert_true(value(&e, "sluice_splits_finished_total", "") == 0);
    assert_true(value(&e, "sluice_splits_returned_total", "") == 0);
    /* Two workers registered and no decision that could differ: no client has reported. */
    assert_true(value(&e, "sluice_recommended_workers", "") == 2);
    /* Without a journal no transaction is ever timed. */
    assert_true(value(&e, "sluice_journal_commit_seconds_count", "") == 0);
    assert_true(value(&e, "sluice_client_wait_share", "") == 0);
    assert_true(value(&e, "sluice_consumption_elements_per_second", "") == 0);
    expo_free(&e);

    for (int i = 0; i < 2; i++) {
        scrape(wm[i], &e);
        assert_true(value(&e, "sluice_worker_tasks", "") == 0);
        assert_true(value(&e, "sluice_worker_requests_total", "") == 0);
        assert_true(value(&e, "sluice_worker_elements_served_total", "") == 0);
        assert_true(value(&e, "sluice_worker_bytes_served_total", "") == 0);
        assert_true(value(&e, "sluice_worker_elements_produced_total", "") == 0);
        assert_true(value(&e, "sluice_worker_buffered_elements", "") == 0);
        expo_free(&e);
    }

    /* Only GET /metrics is served, and on the dispatcher its dashboard (dashboard.h). */
    const char *addrs[] = {dm, wm[0]};
    expect_status(dm, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 200);
    expect_status(dm, "GET /api/status HTTP/1.1\r\nHost: t\r\n\r\n", 200);
    expect_status(dm, "GET /api/statusx HTTP/1.1\r\nHost: t\r\n\r\n", 404);
    expect_status(dm, "POST /api/status HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", 405);
    expect_status(wm[0], "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 404);
    expect_status(wm[0], "GET /api/status HTTP/1.1\r\nHost: t\r\n\r\n", 404);
    for (int i = 0; i < 2; i++) {
        expect_status(addrs[i], "GET /metrics?x=1 HTTP/1.1\r\nHost: t\r\n\r\n", 200);
        expect_status(addrs[i], "GET /metricsx HTTP/1.1\r\nHost: t\r\n\r\n", 404);
        expect_status(addrs[i], "POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
                      405);
        expect_status(addrs[i], "garbage\r\n\r\n", 400);
    }
    assert_int_equal(cluster_stop(&c), 0);
}

/* parallel_epochs over one worker: the worker served exactly what the reader read. */
static void test_served_equals_read(void **unused)
{
    (void)unused;
    struct cluster c;
    char dm[64], wm[1][64];
    start(&c, 0, 1, dm, wm);
    char *out = NULL;
    assert_int_equal(cluster_cli(&c, &out, NULL, "read", "range(1000)", "--format", "count", NULL),
                     0);
    assert_string_equal(out, "1000\n");
    free(out);

    struct expo e;
    scrape(wm[0], &e);
    assert_true(value(&e, "sluice_worker_elements_served_total", "") == 1000);
    assert_true(value(&e, "sluice_worker_elements_produced_total", "") == 1000);
    assert_true(value(&e, "sluice_worker_buffered_elements", "") == 0);
    double requests = value(&e, "sluice_worker_requests_total", "");
    double bytes = value(&e, "sluice_worker_bytes_served_total", "");
    /* At least one request brought elements, and every element takes at least its int64. */
    assert_true(requests >= 1);
    assert_true(bytes >= 8 * 1000);
    expo_free(&e);

    /* The reader released its client on the way out. */
    assert_true(wait_value(dm, "sluice_clients", "", 0) == 0);
    scrape(dm, &e);
    assert_true(value(&e, "sluice_datasets", "") == 1);
    assert_true(value(&e, "sluice_jobs", "") == 1);
    assert_true(value(&e, "sluice_tasks", "") == 1);
    expo_free(&e);
    /* The worker still holds the finished task (until its iteration is collected), but no task
     * runs there any more. */
    assert_true(wait_value(wm[0], "sluice_worker_tasks", "", 0) == 0);
    assert_int_equal(cluster_stop(&c), 0);
}

/* distributed_epoch: each split leased once and finished once, nothing returned. */
static void test_split_counters(void **unused)
{
    (void)unused;
    struct cluster c;
    char dm[64], wm[2][64];
    start(&c, 0, 2, dm, wm);
    char *out = NULL;
    assert_int_equal(cluster_cli(&c, &out, NULL, "read", "range(5000)", "--mode",
                                 "distributed_epoch", "--format", "count", NULL),
                     0);
    assert_string_equal(out, "5000\n");
    free(out);

    json_t *doc = cluster_status(&c);
    json_t *splits = json_object_get(json_array_get(json_object_get(doc, "jobs"), 0), "splits");
    assert_non_null(splits);
    json_int_t total = json_int_at(splits, "total");
    assert_true(total >= 1);
    json_decref(doc);

    assert_true(wait_value(dm, "sluice_splits_finished_total", "", (double)total) == (double)total);
    struct expo e;
    scrape(dm, &e);
    assert_true(value(&e, "sluice_splits_leased_total", "") == (double)total);
    assert_true(value(&e, "sluice_splits_returned_total", "") == 0);
    expo_free(&e);
    assert_int_equal(cluster_stop(&c), 0);
}

/* Fault-tolerant mode times its journal transactions. */
static void test_journal_commits(void **unused)
{
    (void)unused;
    struct cluster c;
    char dm[64], wm[1][64];
    start(&c, 1, 0, dm, wm);
    char *out = NULL;
    assert_int_equal(cluster_cli(&c, &out, NULL, "register", "range(10)", NULL), 0);
    free(out);
    struct expo e;
    scrape(dm, &e);
    double count = value(&e, "sluice_journal_commit_seconds_count", "");
    assert_true(count >= 1);
    assert_true(value(&e, "sluice_journal_commit_seconds_sum", "") > 0);
    assert_true(value(&e, "sluice_datasets", "") == 1);
    /* Every update the registration applied is counted. */
    assert_true(value(&e, "sluice_updates_applied_total", "") >= 1);
    expo_free(&e);
    assert_int_equal(cluster_stop(&c), 0);
}

/* The defaults, as a dispatcher started with no options reports them. */
static void test_status_defaults(void **unused)
{
    (void)unused;
    struct cluster c;
    memset(&c, 0, sizeof(c));
    char *argv[] = {(char *)bin_path("sluice-dispatcher"), "--port", "0", NULL};
    assert_int_equal(proc_start(&c.dispatcher, argv, 10000), 0);
    const char *colon = strrchr(c.dispatcher.addr, ':');
    c.port = atoi(colon + 1);

    json_t *doc = cluster_status(&c);
    assert_int_equal(json_int_at(doc, "recommended_workers"), 1);
    json_t *cfg = json_object_get(doc, "config");
    assert_true(json_is_object(cfg));
    assert_int_equal(json_int_at(cfg, "worker_timeout_ms"), 10000);
    assert_int_equal(json_int_at(cfg, "client_timeout_ms"), 30000);
    assert_int_equal(json_int_at(cfg, "job_gc_timeout_ms"), 60000);
    assert_int_equal(json_int_at(cfg, "worker_heartbeat_ms"), 1000);
    assert_int_equal(json_int_at(cfg, "client_heartbeat_ms"), 1000);
    assert_int_equal(json_int_at(cfg, "autoscale_window_ms"), 10000);
    assert_int_equal(json_int_at(cfg, "client_disconnect_grace_ms"), 5000);
    assert_int_equal(json_int_at(cfg, "worker_disconnect_grace_ms"), 5000);
    assert_int_equal(json_object_size(cfg), 8);
    json_decref(doc);

    char *out = NULL;
    assert_int_equal(cluster_cli(&c, &out, NULL, "status", NULL), 0);
    static const char head1[] = "recommended_workers: 1\n\nworkers (0)\n";
    if (strncmp(out, head1, strlen(head1)) != 0)
        fail_msg("unexpected status tables:\n%s", out);
    free(out);
    assert_int_equal(proc_stop(&c.dispatcher, SIGTERM, 10000), 0);
}

/* The test cluster's settings and two workers. */
static void test_status_cluster(void **unused)
{
    (void)unused;
    struct cluster c;
    char dm[64], wm[2][64];
    static const char *const args[] = {"--metrics-port", "0", "--autoscale-window-ms", "60000",
                                       NULL};
    memset(&c, 0, sizeof(c));
    c.dispatcher_args = args;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_int_equal(cluster_read_address(&c.dispatcher, " metrics on ", dm, sizeof(dm), 10000), 0);
    (void)wm;
    assert_int_equal(cluster_add_worker(&c), 0);
    assert_int_equal(cluster_add_worker(&c), 1);
    assert_true(wait_value(dm, "sluice_workers", "", 2) == 2);

    json_t *doc = cluster_status(&c);
    assert_int_equal(json_int_at(doc, "recommended_workers"), 2);
    json_t *cfg = json_object_get(doc, "config");
    assert_int_equal(json_int_at(cfg, "worker_timeout_ms"), 2000);
    assert_int_equal(json_int_at(cfg, "client_timeout_ms"), 5000);
    assert_int_equal(json_int_at(cfg, "worker_heartbeat_ms"), 400);
    assert_int_equal(json_int_at(cfg, "client_heartbeat_ms"), 1000);
    assert_int_equal(json_int_at(cfg, "autoscale_window_ms"), 60000);
    /* The 5 s disconnect grace, capped by the worker timeout. */
    assert_int_equal(json_int_at(cfg, "client_disconnect_grace_ms"), 5000);
    assert_int_equal(json_int_at(cfg, "worker_disconnect_grace_ms"), 2000);
    json_decref(doc);

    char *out = NULL;
    assert_int_equal(cluster_cli(&c, &out, NULL, "status", NULL), 0);
    static const char head2[] = "recommended_workers: 2\n\nworkers (2)\n";
    if (strncmp(out, head2, strlen(head2)) != 0)
        fail_msg("unexpected status tables:\n%s", out);
    free(out);
    assert_int_equal(cluster_stop(&c), 0);
}

/* Bad values and a port in use are reported, not ignored. */
/* Asks addr for path until the response has status want and its body contains text, at most
 * WAIT_MS; fails with the last response otherwise. */
static void wait_probe(const char *addr, const char *path, int want, const char *text)
{
    char req[128];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", path);
    long long deadline = now_ms() + WAIT_MS;
    for (;;) {
        char *resp = NULL;
        int ok = scrape_request(addr, req, 10000, &resp) == 0 && scrape_status(resp) == want &&
                 strstr(scrape_body(resp), text) != NULL;
        if (ok || now_ms() > deadline) {
            if (!ok)
                fail_msg("%s%s: expected %d '%s', got: %.200s", addr, path, want, text,
                         resp ? resp : "(nothing)");
            free(resp);
            return;
        }
        free(resp);
        usleep(50000);
    }
}

/* /healthz answers while the process runs; a worker's /readyz follows its registration with the
 * dispatcher, a dispatcher's is ready once it serves (after recovering its journal). */
static void test_probes(void **unused)
{
    struct cluster c;
    char disp[64], worker[1][64];
    start(&c, 1, 1, disp, worker);
    wait_probe(disp, "/healthz", 200, "ok\n");
    wait_probe(disp, "/readyz", 200, "ready\n");
    wait_probe(worker[0], "/readyz", 200, "ready\n");
    proc_stop(&c.dispatcher, SIGKILL, WAIT_MS);
    wait_probe(worker[0], "/healthz", 200, "ok\n");
    wait_probe(worker[0], "/readyz", 503, "not ready: not registered with dispatcher");
    assert_int_equal(cluster_restart_dispatcher(&c, SIGKILL), 0);
    wait_probe(worker[0], "/readyz", 200, "ready\n");
    cluster_stop(&c);
}

static void test_metrics_port_errors(void **unused)
{
    (void)unused;
    char *err = NULL;
    char *argv[] = {
        (char *)bin_path("sluice-dispatcher"), "--port", "0", "--metrics-port", "x", NULL};
    assert_int_equal(run_cmd(argv, 10000, NULL, &err), 2);
    assert_non_null(strstr(err, "--metrics-port"));
    free(err);
    char *wargv[] = {(char *)bin_path("sluice-worker"),
                     "--dispatcher",
                     "127.0.0.1:1",
                     "--metrics-port",
                     "70000",
                     NULL};
    assert_int_equal(run_cmd(wargv, 10000, NULL, &err), 2);
    assert_non_null(strstr(err, "--metrics-port"));
    free(err);
    char *aargv[] = {
        (char *)bin_path("sluice-dispatcher"), "--port", "0", "--autoscale-window-ms", "0", NULL};
    assert_int_equal(run_cmd(aargv, 10000, NULL, &err), 2);
    assert_non_null(strstr(err, "--autoscale-window-ms"));
    free(err);

    /* The metrics port taken by the dispatcher's own RPC port of another dispatcher. */
    struct cluster c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    char port[16];
    snprintf(port, sizeof(port), "%d", c.port);
    char *bargv[] = {
        (char *)bin_path("sluice-dispatcher"), "--port", "0", "--metrics-port", port, NULL};
    assert_int_equal(run_cmd(bargv, 10000, NULL, &err), 1);
    if (strncmp(err, "sluice-dispatcher: metrics: ", 28) != 0)
        fail_msg("unexpected error: %s", err);
    free(err);
    assert_int_equal(cluster_stop(&c), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_metrics), cmocka_unit_test(test_served_equals_read),
        cmocka_unit_test(test_split_counters),  cmocka_unit_test(test_journal_commits),
        cmocka_unit_test(test_status_defaults), cmocka_unit_test(test_status_cluster),
        cmocka_unit_test(test_probes),          cmocka_unit_test(test_metrics_port_errors),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
