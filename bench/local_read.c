/* local_read: the throughput of a reader reading large elements from a worker in its own process
 * over the in-process connection (docs/reading.md "Local workers"), against the same read over TCP.
 *
 * A dispatcher and one worker run in this process (<sluice/server.h>). The reader reads
 * `range(N) | map(bytes, SIZE)` (N elements of SIZE bytes, default 2048 of 1 MiB) with
 * target_workers local, once from a worker serving in-process readers over a socket pair and
 * once from a worker started with no_in_process_reads (TCP on 127.0.0.1), ROUNDS times each,
 * alternating. Each read is checked: N elements of SIZE bytes. Prints the best throughput of
 * each and their ratio, the baseline being TCP in the same run. Timings never fail it.
 *
 *   local_read [ROUNDS [N [SIZE]]]      default 3 2048 1048576 */
#include "sluice/server.h"
#include "sluice/sluice.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "local_read: %s: %s\n", what, err);
    exit(1);
}

/* Waits until the dispatcher lists exactly n workers. */
static void wait_workers(struct sluice_client *c, int n)
{
    char err[SLUICE_ERRMSG_SIZE];
    for (int i = 0; i < 1000; i++) {
        char *json = NULL;
        if (sluice_status(c, &json, err, sizeof err) < 0)
            die("status", err);
        int have = 0;
        for (const char *p = json; (p = strstr(p, "\"incarnation\"")); p++)
            have++;
        free(json);
        if (have == n)
            return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    die("workers", "the worker did not register within 10 s");
}

/* One read of the dataset; returns its seconds. */
static double read_once(struct sluice_client *c, const char *pipeline, long n, long size)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_read_options o = {
        .pipeline = pipeline,
        .mode = SLUICE_PARALLEL_EPOCHS,
        .target_workers = SLUICE_TARGET_WORKERS_LOCAL,
    };
    struct sluice_iterator *it;
    double t0 = now_s();
    if (sluice_iterator_open(c, &o, &it, err, sizeof err) < 0)
        die("open", err);
    long got = 0;
    for (;;) {
        const struct sluice_element *e;
        int rc = sluice_iterator_next(it, &e, 60000, err, sizeof err);
        if (rc < 0)
            die("next", err);
        if (rc == 0)
            break;
        size_t len = 0;
        sluice_element_data(e, 0, &len);
        if ((long)len != size)
            die("element", "not of the size asked for");
        got++;
    }
    double dt = now_s() - t0;
    sluice_iterator_close(it);
    if (got != n)
        die("read", "not every element arrived");
    return dt;
}

static struct sluice_worker *start_worker(const char *target, bool in_process)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_worker_options wo = {
        .dispatcher = target,
        .threads = 2,
        .heartbeat_ms = 100,
        .log_level = "warn",
        .no_in_process_reads = !in_process,
    };
    struct sluice_worker *w;
    if (sluice_worker_start(&wo, &w, err, sizeof err) < 0)
        die("worker", err);
    return w;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    long n = argc > 2 ? atol(argv[2]) : 2048;
    long size = argc > 3 ? atol(argv[3]) : 1048576;
    if (rounds < 1 || n < 1 || size < 1)
        die("usage", "local_read [ROUNDS [N [SIZE]]]");
    char pipeline[128];
    snprintf(pipeline, sizeof pipeline, "range(%ld) | map(bytes, %ld)", n, size);

    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_dispatcher_options dopts = {.log_level = "warn"};
    struct sluice_dispatcher *d;
    if (sluice_dispatcher_start(&dopts, &d, err, sizeof err) < 0)
        die("dispatcher", err);
    const char *target = sluice_dispatcher_target(d);
    struct sluice_client_options copts = {.dispatcher = target, .timeout_ms = 30000};
    struct sluice_client *c;
    if (sluice_client_open(&copts, &c, err, sizeof err) < 0)
        die("client", err);

    double best[2] = {1e30, 1e30}; /* [0] in-process, [1] TCP */
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            struct sluice_worker *w = start_worker(target, k == 0);
            wait_workers(c, 1);
            double dt = read_once(c, pipeline, n, size);
            if (dt < best[k])
                best[k] = dt;
            sluice_worker_stop(w);
            wait_workers(c, 0);
        }
    }
    double mb = (double)n * (double)size / 1e6;
    printf("local_read: %ld elements of %ld bytes, best of %d\n", n, size, rounds);
    printf("  in-process: %8.1f MB/s (%.3f s)\n", mb / best[0], best[0]);
    printf("  tcp:        %8.1f MB/s (%.3f s)\n", mb / best[1], best[1]);
    printf("  ratio in-process/tcp: %.2f\n", best[1] / best[0]);
    sluice_client_close(c);
    sluice_dispatcher_stop(d);
    return 0;
}
