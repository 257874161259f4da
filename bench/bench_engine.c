/* bench_engine: the pipeline engine's per-element overhead.
 *
 * Times `range(N) | map(add, 1) | batch(1024)` through pipe_open() against a plain C loop that
 * does the same arithmetic into a 1024-slot buffer, in the same run, and prints elements per
 * second for both and their ratio (engine / baseline). Both consume each batch the same way
 * (a checksum of its first and last values), and the checksums must agree.
 *
 *   bench_engine [N] [ROUNDS]      defaults: N = 50000000, ROUNDS = 3 (the best round counts) */
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 1024

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Keeps the compiler from discarding the baseline's work. */
static void consume(const int64_t *v, size_t n, uint64_t *sum)
{
    *sum = *sum * 31 + (uint64_t)v[0] + (uint64_t)v[n - 1] + n;
}

static uint64_t baseline(int64_t n)
{
    static int64_t buf[BATCH];
    uint64_t sum = 0;
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        buf[k++] = (int64_t)((uint64_t)i + 1);
        if (k == BATCH) {
            consume(buf, k, &sum);
            k = 0;
        }
    }
    if (k)
        consume(buf, k, &sum);
    return sum;
}

static int engine(const struct sluice_registry *reg, int64_t n, uint64_t *sum)
{
    char text[128], err[SLUICE_ERRMSG_SIZE];
    snprintf(text, sizeof(text), "range(%" PRId64 ") | map(add, 1) | batch(%d)", n, BATCH);
    struct pipe_spec *spec;
    if (pipe_parse(text, &spec, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench_engine: parse: %s\n", err);
        return 1;
    }
    struct pipe_run *run;
    int rc = pipe_open(spec, reg, &run, err, sizeof(err));
    pipe_spec_free(spec);
    if (rc) {
        fprintf(stderr, "bench_engine: open: %s\n", err);
        return 1;
    }
    struct sluice_element e;
    pipe_elem_init(&e);
    *sum = 0;
    while ((rc = pipe_run_next(run, &e)) == 1)
        consume((const int64_t *)(const void *)e.t[0].data, (size_t)e.t[0].shape[0], sum);
    if (rc < 0)
        fprintf(stderr, "bench_engine: next: %s\n", run->ctx.err);
    pipe_elem_release(&e);
    pipe_run_free(run);
    return rc < 0;
}

int main(int argc, char **argv)
{
    int64_t n = argc > 1 ? strtoll(argv[1], NULL, 10) : 50000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (n < 1 || rounds < 1) {
        fprintf(stderr, "usage: bench_engine [N] [ROUNDS]\n");
        return 2;
    }
    struct sluice_registry *reg;
    if (pipe_registry_new(&reg) != 0)
        return 1;

    double best_base = 1e300, best_engine = 1e300;
    uint64_t sum_base = 0, sum_engine = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        sum_base = baseline(n);
        double t1 = now_s();
        if (engine(reg, n, &sum_engine) != 0)
            return 1;
        double t2 = now_s();
        if (t1 - t0 < best_base)
            best_base = t1 - t0;
        if (t2 - t1 < best_engine)
            best_engine = t2 - t1;
    }
    pipe_registry_free(reg);
    if (sum_base != sum_engine) {
        fprintf(stderr, "bench_engine: checksums differ: %" PRIu64 " vs %" PRIu64 "\n", sum_base,
                sum_engine);
        return 1;
    }
    double base_rate = (double)n / best_base, engine_rate = (double)n / best_engine;
    printf("range(%" PRId64 ") | map(add, 1) | batch(%d), best of %d\n", n, BATCH, rounds);
    printf("baseline  %10.1f M elements/s  (%.3f s)\n", base_rate / 1e6, best_base);
    printf("engine    %10.1f M elements/s  (%.3f s)\n", engine_rate / 1e6, best_engine);
    printf("ratio     %10.3f  (engine / baseline)\n", engine_rate / base_rate);
    return 0;
}
