/* In-process reads (docs/reading.md "Local workers"): a dispatcher, workers and a reader in this
 * process (<sluice/server.h>, <sluice/sluice.h>). A worker started normally serves the reader over
 * an in-process connection, large replies handed over in memory; one started with
 * no_in_process_reads over TCP. Each read is checked element for element against the same
 * pipeline run locally, and the workers' metrics say which way every request and element went. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/scrape.h"
#include "pipeline/element.h"
#include "sluice/server.h"
#include "sluice/sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct sluice_dispatcher *disp;
static struct sluice_client *client;

/* One element as the test compares them: its bytes' FNV-1a hash and length. */
struct fp {
    uint64_t hash, len;
};

static int cmp_fp(const void *a, const void *b)
{
    const struct fp *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

static struct fp fingerprint(const struct sluice_element *e)
{
    size_t len = 0;
    const uint8_t *p = sluice_element_data(e, 0, &len);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return (struct fp){h, len};
}

/* The sorted fingerprints of the pipeline run in this process (times copies of each). */
static struct fp *expected(const char *pipeline, size_t n, int times)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_local *run;
    assert_int_equal(sluice_local_open(pipeline, NULL, 0, &run, err, sizeof err), 0);
    struct sluice_element *e = sluice_element_new();
    struct fp *v = calloc(n * (size_t)times, sizeof *v);
    assert_non_null(v);
    size_t k = 0;
    int rc;
    while ((rc = sluice_local_next(run, e, err, sizeof err)) == 1) {
        assert_true(k < n);
        for (int t = 0; t < times; t++)
            v[k * (size_t)times + (size_t)t] = fingerprint(e);
        k++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(k, n);
    sluice_element_free(e);
    sluice_local_close(run);
    qsort(v, n * (size_t)times, sizeof *v, cmp_fp);
    return v;
}

/* Reads the pipeline with target_workers local and returns the sorted fingerprints; *got the
 * count, *lent (unless NULL) how many elements had their first component's values left in the
 * received block rather than copied (client/payload_block.h). */
static struct fp *read_local_lent(const char *pipeline, enum sluice_mode mode, size_t cap,
                                  size_t *got, size_t *lent)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_read_options o = {
        .pipeline = pipeline,
        .mode = mode,
        .target_workers = SLUICE_TARGET_WORKERS_LOCAL,
        .max_outstanding_requests = 4,
    };
    struct sluice_iterator *it;
    int rc = sluice_iterator_open(client, &o, &it, err, sizeof err);
    if (rc < 0)
        fail_msg("open: %s", err);
    struct fp *v = calloc(cap, sizeof *v);
    assert_non_null(v);
    size_t n = 0;
    for (;;) {
        const struct sluice_element *e;
        rc = sluice_iterator_next(it, &e, 60000, err, sizeof err);
        if (rc < 0)
            fail_msg("next: %s", err);
        if (rc == 0)
            break;
        assert_true(n < cap);
        v[n++] = fingerprint(e);
        if (lent && e->n > 0 && e->t[0].lender)
            (*lent)++;
    }
    sluice_iterator_close(it);
    qsort(v, n, sizeof *v, cmp_fp);
    *got = n;
    return v;
}

static struct fp *read_local(const char *pipeline, enum sluice_mode mode, size_t cap, size_t *got)
{
    return read_local_lent(pipeline, mode, cap, got, NULL);
}

static struct sluice_worker *start_worker(bool in_process)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_worker_options wo = {
        .dispatcher = sluice_dispatcher_target(disp),
        .threads = 2,
        .heartbeat_ms = 100,
        .log_level = "warn",
        .metrics = true,
        .no_in_process_reads = !in_process,
    };
    struct sluice_worker *w;
    if (sluice_worker_start(&wo, &w, err, sizeof err) < 0)
        fail_msg("worker: %s", err);
    return w;
}

/* Waits (up to 10 s) until the dispatcher lists n workers. */
static void wait_workers(int n)
{
    char err[SLUICE_ERRMSG_SIZE];
    for (int i = 0; i < 1000; i++) {
        char *json = NULL;
        assert_int_equal(sluice_status(client, &json, err, sizeof err), 0);
        int have = 0;
        for (const char *p = json; (p = strstr(p, "\"incarnation\"")); p++)
            have++;
        free(json);
        if (have == n)
            return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("%d workers did not register within 10 s", n);
}

static double metric(struct sluice_worker *w, const char *name)
{
    struct expo e;
    char err[SLUICE_ERRMSG_SIZE];
    if (scrape_metrics(sluice_worker_metrics_address(w), &e, err, sizeof err) != 0)
        fail_msg("scrape: %s", err);
    double v = -1;
    assert_int_equal(expo_value(&e, name, "", &v), 0);
    expo_free(&e);
    return v;
}

static int setup(void **unused)
{
    (void)unused;
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_dispatcher_options dopts = {.log_level = "warn"};
    if (sluice_dispatcher_start(&dopts, &disp, err, sizeof err) < 0)
        return -1;
    struct sluice_client_options copts = {.dispatcher = sluice_dispatcher_target(disp),
                                          .timeout_ms = 30000};
    return sluice_client_open(&copts, &client, err, sizeof err);
}

static int teardown(void **unused)
{
    (void)unused;
    sluice_client_close(client);
    sluice_dispatcher_stop(disp);
    return 0;
}

static void test_in_process_large_and_small(void **unused)
{
    (void)unused;
    struct sluice_worker *w = start_worker(true);
    wait_workers(1);
    /* Large replies (several 300 KB elements each) go over the link, small ones through the
     * socket pair: both arrive whole and exact. */
    const char *big = "range(40) | map(bytes, 300000)";
    struct fp *want = expected(big, 40, 1);
    size_t n;
    struct fp *got = read_local(big, SLUICE_PARALLEL_EPOCHS, 80, &n);
    assert_int_equal(n, 40);
    assert_memory_equal(got, want, 40 * sizeof *got);
    free(got);
    free(want);
    const char *small = "range(500) | map(bytes, 16)";
    want = expected(small, 500, 1);
    got = read_local(small, SLUICE_PARALLEL_EPOCHS, 1000, &n);
    assert_int_equal(n, 500);
    assert_memory_equal(got, want, 500 * sizeof *got);
    free(got);
    free(want);
    /* Elements over the largest reply come one to a block: each is read where the worker put
     * it, not copied (the reader's copy of in-process reads), and arrives exact. */
    const char *huge = "range(6) | map(bytes, 3000000)";
    want = expected(huge, 6, 1);
    size_t lent = 0;
    got = read_local_lent(huge, SLUICE_PARALLEL_EPOCHS, 12, &n, &lent);
    assert_int_equal(n, 6);
    assert_int_equal(lent, 6);
    assert_memory_equal(got, want, 6 * sizeof *got);
    free(got);
    free(want);
    /* Every request and element came over in-process connections. */
    double req = metric(w, "sluice_worker_requests_total");
    assert_true(req > 0);
    assert_true(metric(w, "sluice_worker_local_requests_total") == req);
    assert_true(metric(w, "sluice_worker_elements_served_total") == 546);
    assert_true(metric(w, "sluice_worker_local_elements_served_total") == 546);
    sluice_worker_stop(w);
    wait_workers(0);
}

static void test_two_in_process_workers_distributed(void **unused)
{
    (void)unused;
    struct sluice_worker *a = start_worker(true), *b = start_worker(true);
    wait_workers(2);
    const char *p = "range(300) | map(bytes, 100000)";
    struct fp *want = expected(p, 300, 1);
    size_t n;
    struct fp *got = read_local(p, SLUICE_DISTRIBUTED_EPOCH, 600, &n);
    assert_int_equal(n, 300);
    assert_memory_equal(got, want, 300 * sizeof *got);
    free(got);
    free(want);
    assert_true(metric(a, "sluice_worker_requests_total") ==
                metric(a, "sluice_worker_local_requests_total"));
    assert_true(metric(b, "sluice_worker_requests_total") ==
                metric(b, "sluice_worker_local_requests_total"));
    sluice_worker_stop(a);
    sluice_worker_stop(b);
    wait_workers(0);
}

static void test_no_in_process_reads(void **unused)
{
    (void)unused;
    struct sluice_worker *w = start_worker(false);
    wait_workers(1);
    const char *p = "range(20) | map(bytes, 300000)";
    struct fp *want = expected(p, 20, 1);
    size_t n;
    struct fp *got = read_local(p, SLUICE_PARALLEL_EPOCHS, 40, &n);
    assert_int_equal(n, 20);
    assert_memory_equal(got, want, 20 * sizeof *got);
    free(got);
    free(want);
    /* Over TCP: nothing counted as in-process. */
    assert_true(metric(w, "sluice_worker_requests_total") > 0);
    assert_true(metric(w, "sluice_worker_elements_served_total") == 20);
    assert_true(metric(w, "sluice_worker_local_requests_total") == 0);
    assert_true(metric(w, "sluice_worker_local_elements_served_total") == 0);
    sluice_worker_stop(w);
    wait_workers(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_process_large_and_small),
        cmocka_unit_test(test_two_in_process_workers_distributed),
        cmocka_unit_test(test_no_in_process_reads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
