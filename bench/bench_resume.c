/* bench_resume: how long a read takes to resume from a checkpoint, early and late in the epoch.
 *
 * A fault-tolerant dispatcher and two workers run in this process (<sluice/server.h>). One read
 * of `range(N)` (10^8) in distributed_epoch saves its position after 10^3 elements and again after
 * 10^7, then closes. Each checkpoint is then restored ROUNDS times in turn: the time from
 * sluice_iterator_open (with the checkpoint) to the first element, and to 10^4 elements, is
 * measured, and the first 10^4 elements after the resume are checked to lie beyond what the
 * reader had (none is one it had already). Prints the median of each and the ratio late/early,
 * the baseline being the early resume in the same run (target: ratio <= 2, both under 1 s).
 *
 *   bench_resume [ROUNDS [N LATE]]   default 5 rounds, N 10^8, LATE 10^7 */
#include "sluice/server.h"
#include "sluice/sluice.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EARLY 1000LL
/* The dataset's size and the late point: 10^8 and 10^7 unless given (bench_resume ROUNDS N LATE).
 */
static long long N = 100000000LL;
static long long LATE = 10000000LL;
#define AFTER 10000LL

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_resume: %s: %s\n", what, err);
    exit(1);
}

static int64_t value_of(const struct sluice_element *e)
{
    size_t len = 0;
    const void *data = sluice_element_data(e, 0, &len);
    if (sluice_element_dtype(e, 0) != SLUICE_INT64 || len != 8)
        die("element", "not an int64 scalar");
    int64_t v;
    memcpy(&v, data, 8);
    return v;
}

/* Reads until the reader has taken `until` elements (counted over the whole read); marks each
 * value seen. */
static void read_to(struct sluice_iterator *it, long long *taken, long long until,
                    unsigned char *seen)
{
    char err[SLUICE_ERRMSG_SIZE];
    while (*taken < until) {
        const struct sluice_element *e;
        int rc = sluice_iterator_next(it, &e, 60000, err, sizeof err);
        if (rc != 1)
            die("read", rc == 0 ? "ended early" : err);
        int64_t v = value_of(e);
        if (v < 0 || v >= N || seen[v])
            die("read", "a value twice or out of range");
        seen[v] = 1;
        (*taken)++;
    }
}

struct point {
    uint8_t *ck;
    size_t len;
    unsigned char *seen; /* the values the reader had at the checkpoint */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Restores p once: the seconds to the first element and to AFTER elements. */
static void resume_once(struct sluice_client *c, const struct point *p, double *first,
                        double *after)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_read_options o = {
        .mode = SLUICE_DISTRIBUTED_EPOCH, .restore = p->ck, .restore_len = p->len};
    struct sluice_iterator *it;
    double t0 = now_s();
    if (sluice_iterator_open(c, &o, &it, err, sizeof err) != 0)
        die("resume", err);
    for (long long k = 0; k < AFTER; k++) {
        const struct sluice_element *e;
        int rc = sluice_iterator_next(it, &e, 60000, err, sizeof err);
        if (rc != 1)
            die("resume read", rc == 0 ? "ended early" : err);
        int64_t v = value_of(e);
        if (v < 0 || v >= N || p->seen[v])
            die("resume read", "an element the reader had before its checkpoint");
        if (k == 0)
            *first = now_s() - t0;
    }
    *after = now_s() - t0;
    sluice_iterator_close(it);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (argc > 3) {
        N = atoll(argv[2]);
        LATE = atoll(argv[3]);
        if (N <= LATE || LATE <= EARLY) {
            fprintf(stderr, "usage: bench_resume [ROUNDS [N LATE]] with N > LATE > %lld\n", EARLY);
            return 2;
        }
    }
    if (rounds < 1)
        rounds = 1;
    char dir[] = "/tmp/bench_resume.XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", "failed");
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_dispatcher *d;
    struct sluice_dispatcher_options dopts = {
        .fault_tolerant = true, .work_dir = dir, .log_level = "error"};
    if (sluice_dispatcher_start(&dopts, &d, err, sizeof err) != 0)
        die("dispatcher", err);
    struct sluice_worker *w[2];
    for (int i = 0; i < 2; i++) {
        struct sluice_worker_options wo = {.dispatcher = sluice_dispatcher_target(d),
                                           .log_level = "error"};
        if (sluice_worker_start(&wo, &w[i], err, sizeof err) != 0)
            die("worker", err);
    }
    struct sluice_client *c;
    struct sluice_client_options co = {.dispatcher = sluice_dispatcher_target(d)};
    if (sluice_client_open(&co, &c, err, sizeof err) != 0)
        die("client", err);

    unsigned char *seen = calloc((size_t)N, 1);
    struct point early = {0}, late = {0};
    early.seen = calloc((size_t)N, 1);
    late.seen = calloc((size_t)N, 1);
    if (!seen || !early.seen || !late.seen)
        die("memory", "out of memory");
    char pipeline[64];
    snprintf(pipeline, sizeof pipeline, "range(%lld)", N);
    struct sluice_read_options o = {.mode = SLUICE_DISTRIBUTED_EPOCH, .pipeline = pipeline};
    struct sluice_iterator *it;
    if (sluice_iterator_open(c, &o, &it, err, sizeof err) != 0)
        die("open", err);
    long long taken = 0;
    read_to(it, &taken, EARLY, seen);
    if (sluice_iterator_save(it, &early.ck, &early.len, err, sizeof err) != 0)
        die("save", err);
    memcpy(early.seen, seen, (size_t)N);
    double t0 = now_s();
    read_to(it, &taken, LATE, seen);
    double read_s = now_s() - t0;
    if (sluice_iterator_save(it, &late.ck, &late.len, err, sizeof err) != 0)
        die("save", err);
    memcpy(late.seen, seen, (size_t)N);
    sluice_iterator_close(it);
    free(seen);
    printf("read %lld elements to reach the late point in %.2f s\n", LATE - EARLY, read_s);
    printf("checkpoint at %lld: %zu bytes; at %lld: %zu bytes\n", EARLY, early.len, LATE, late.len);

    double *ef = calloc((size_t)rounds, sizeof(double)),
           *ea = calloc((size_t)rounds, sizeof(double));
    double *lf = calloc((size_t)rounds, sizeof(double)),
           *la = calloc((size_t)rounds, sizeof(double));
    if (!ef || !ea || !lf || !la)
        die("memory", "out of memory");
    for (int r = 0; r < rounds; r++) {
        resume_once(c, &early, &ef[r], &ea[r]);
        resume_once(c, &late, &lf[r], &la[r]);
    }
    qsort(ef, (size_t)rounds, sizeof(double), cmp_double);
    qsort(ea, (size_t)rounds, sizeof(double), cmp_double);
    qsort(lf, (size_t)rounds, sizeof(double), cmp_double);
    qsort(la, (size_t)rounds, sizeof(double), cmp_double);
    int m = rounds / 2;
    printf("resume at %lld: first element %.1f ms, %lld elements %.1f ms (median of %d)\n", EARLY,
           ef[m] * 1e3, AFTER, ea[m] * 1e3, rounds);
    printf("resume at %lld: first element %.1f ms, %lld elements %.1f ms (median of %d)\n", LATE,
           lf[m] * 1e3, AFTER, la[m] * 1e3, rounds);
    printf("ratio late/early: first element %.2f, %lld elements %.2f (target <= 2)\n",
           lf[m] / ef[m], AFTER, la[m] / ea[m]);
    free(ef);
    free(ea);
    free(lf);
    free(la);
    free(early.ck);
    free(late.ck);
    free(early.seen);
    free(late.seen);
    sluice_client_close(c);
    for (int i = 0; i < 2; i++)
        sluice_worker_stop(w[i]);
    sluice_dispatcher_stop(d);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_resume: could not remove %s\n", dir);
    return 0;
}
