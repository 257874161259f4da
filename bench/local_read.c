/* local_read: the throughput of a reader reading large elements from a worker on its own host
 * (docs/reading.md "Local workers"), each way against the others and against memcpy in one run.
 *
 * A dispatcher runs in this process (<sluice/server.h>). The reader reads `range(N) | map(bytes,
 * SIZE)` with target_workers local:
 *   - in-process: from a worker in this process, over an in-process connection;
 *   - shm:        from a sluice-worker process, over shared memory (the default on one host);
 *   - tcp:        from the same worker process with no_shm, over TCP on 127.0.0.1;
 * and memcpy copies the same bytes, SIZE at a time, from one buffer into another. Each read is
 * checked: N elements of SIZE bytes. The reader only looks at each element's length, as a
 * consumer that hands the bytes on would; it does not read them. Prints the best throughput of
 * each way over ROUNDS rounds, the CPU seconds per GiB of the reader's process and the worker's
 * process together (for in-process, the one process) and of the reader's alone, and the ratios
 * against tcp and memcpy measured in the same run, and the CPU of producing the elements alone
 * (the pipeline run in this process, no service) to tell the transport's CPU apart. The worker's
 * share includes producing the
 * elements (map(bytes) fills each), the same work every way; then the worker copies each into
 * the region (shm) or the kernel copies it through the socket (tcp), and the reader leaves a
 * large value in the region (shm: sluice_iterator_next lends it until the next call) or copies
 * it out of the received frame (tcp). Each read is 8 GiB by default, so that what a new read
 * pays once (a fresh region's and fresh element blocks' page faults) does not dominate.
 * Timings never fail it.
 *
 *   local_read [ROUNDS [N SIZE]]    default: 3 rounds of 256 x 32 MiB and 8192 x 1 MiB
 *
 * The worker process is WORKER (default: bin/sluice-worker beside this program's bench/). */
#include "sluice/server.h"
#include "sluice/sluice.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

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

/* CPU seconds (user and system) of this process so far. */
static double self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* CPU seconds of process pid so far (0 for none), from /proc/PID/stat. */
static double proc_cpu(pid_t pid)
{
    if (pid <= 0)
        return 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the command's closing parenthesis: state is the 3rd, utime the 14th. */
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
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
    die("workers", "the worker did not register or leave within 10 s");
}

/* One read of the dataset; returns its seconds. */
static double read_once(struct sluice_client *c, const char *pipeline, long n, long size,
                        bool no_shm)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_read_options o = {
        .pipeline = pipeline,
        .mode = SLUICE_PARALLEL_EPOCHS,
        .target_workers = SLUICE_TARGET_WORKERS_LOCAL,
        .no_shm = no_shm,
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

static struct sluice_worker *start_embedded(const char *target)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_worker_options wo = {
        .dispatcher = target,
        .threads = 2,
        .heartbeat_ms = 100,
        .log_level = "warn",
    };
    struct sluice_worker *w;
    if (sluice_worker_start(&wo, &w, err, sizeof err) < 0)
        die("worker", err);
    return w;
}

static pid_t start_process(const char *bin, const char *target)
{
    char *argv[] = {(char *)bin,      "--dispatcher", (char *)target, "--threads", "2",
                    "--heartbeat-ms", "100",          "--log-level",  "warn",      NULL};
    /* Its "listening on" line is not the benchmark's output. */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        die("worker process", bin);
    return pid;
}

static void stop_process(pid_t pid)
{
    kill(pid, SIGTERM); /* drains, then deregisters */
    int st;
    waitpid(pid, &st, 0);
}

/* The best seconds of memcpy'ing n blocks of size bytes (a source buffer of one block, copied
 * into a destination of the same size n times, as the reader gets n elements). */
static double memcpy_once(long n, long size)
{
    char *src = malloc((size_t)size), *dst = malloc((size_t)size);
    if (!src || !dst)
        die("memcpy", "out of memory");
    memset(src, 0x5a, (size_t)size);
    memset(dst, 0, (size_t)size);
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        src[0] = (char)i;
        memcpy(dst, src, (size_t)size);
    }
    double dt = now_s() - t0;
    if (dst[0] != (char)(n - 1))
        die("memcpy", "copied wrong");
    free(src);
    free(dst);
    return dt;
}

/* Producing the elements alone, in this process on one thread (sluice_local_*): the CPU seconds
 * every way spends before any transport. */
static double produce_cpu(const char *pipeline, long n, long size)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_local *run;
    if (sluice_local_open(pipeline, NULL, 0, &run, err, sizeof err) < 0)
        die("local run", err);
    struct sluice_element *e = sluice_element_new();
    if (!e)
        die("local run", "out of memory");
    double c0 = self_cpu();
    long got = 0;
    int rc;
    while ((rc = sluice_local_next(run, e, err, sizeof err)) == 1) {
        size_t len = 0;
        sluice_element_data(e, 0, &len);
        if ((long)len != size)
            die("local run", "an element not of the size asked for");
        got++;
    }
    double cpu = self_cpu() - c0;
    if (rc < 0)
        die("local run", err);
    if (got != n)
        die("local run", "not every element came");
    sluice_element_free(e);
    sluice_local_close(run);
    return cpu;
}

enum { WAY_INPROC, WAY_SHM, WAY_TCP, WAY_MEMCPY, NWAYS };
static const char *const way_names[NWAYS] = {"in-process", "shm", "tcp", "memcpy"};

static void run_size(struct sluice_client *c, const char *target, const char *bin, int rounds,
                     long n, long size)
{
    char pipeline[128];
    snprintf(pipeline, sizeof pipeline, "range(%ld) | map(bytes, %ld)", n, size);
    /* cpu: both processes; rcpu: the reader's process alone (for in-process and memcpy, the
     * same). */
    double best[NWAYS], cpu[NWAYS], rcpu[NWAYS];
    for (int k = 0; k < NWAYS; k++)
        best[k] = 1e30, cpu[k] = rcpu[k] = 0;
    double produce = 1e30;
    for (int r = 0; r < rounds; r++) {
        double p = produce_cpu(pipeline, n, size);
        if (p < produce)
            produce = p;
        double c0 = self_cpu();
        double dt = memcpy_once(n, size);
        if (dt < best[WAY_MEMCPY]) {
            best[WAY_MEMCPY] = dt;
            cpu[WAY_MEMCPY] = rcpu[WAY_MEMCPY] = self_cpu() - c0;
        }

        struct sluice_worker *w = start_embedded(target);
        wait_workers(c, 1);
        c0 = self_cpu();
        dt = read_once(c, pipeline, n, size, false);
        if (dt < best[WAY_INPROC]) {
            best[WAY_INPROC] = dt;
            cpu[WAY_INPROC] = rcpu[WAY_INPROC] = self_cpu() - c0;
        }
        sluice_worker_stop(w);
        wait_workers(c, 0);

        pid_t pid = start_process(bin, target);
        wait_workers(c, 1);
        for (int k = WAY_SHM; k <= WAY_TCP; k++) {
            double r0 = self_cpu(), w0 = proc_cpu(pid);
            dt = read_once(c, pipeline, n, size, k == WAY_TCP);
            if (dt < best[k]) {
                best[k] = dt;
                rcpu[k] = self_cpu() - r0;
                cpu[k] = rcpu[k] + proc_cpu(pid) - w0;
            }
        }
        stop_process(pid);
        wait_workers(c, 0);
    }
    double bytes = (double)n * (double)size, gib = bytes / (double)(1u << 30);
    printf("local_read: %ld elements of %ld bytes, best of %d\n", n, size, rounds);
    printf("  %-11s %8s %9s  %s\n", "", "MB/s", "s", "CPU s/GiB: both (reader)");
    for (int k = 0; k < NWAYS; k++)
        printf("  %-11s %8.1f %9.3f  %.3f (%.3f)\n", way_names[k], bytes / 1e6 / best[k], best[k],
               cpu[k] / gib, rcpu[k] / gib);
    printf("  throughput shm/tcp: %.2f   shm/memcpy: %.2f   in-process/tcp: %.2f\n",
           best[WAY_TCP] / best[WAY_SHM], best[WAY_MEMCPY] / best[WAY_SHM],
           best[WAY_TCP] / best[WAY_INPROC]);
    printf("  CPU per GiB shm/tcp: both %.2f, reader %.2f\n", cpu[WAY_SHM] / cpu[WAY_TCP],
           rcpu[WAY_SHM] / rcpu[WAY_TCP]);
    /* What the transport costs: both processes' CPU less producing the elements. */
    double tshm = cpu[WAY_SHM] - produce, ttcp = cpu[WAY_TCP] - produce;
    printf("  producing alone: %.3f CPU s/GiB; the transport (both less producing): shm %.3f, "
           "tcp %.3f, shm/tcp %.2f\n",
           produce / gib, tshm / gib, ttcp / gib, ttcp > 0 ? tshm / ttcp : 0.0);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    long n = argc > 3 ? atol(argv[2]) : 0;
    long size = argc > 3 ? atol(argv[3]) : 0;
    if (rounds < 1 || argc == 3 || (argc > 3 && (n < 1 || size < 1)))
        die("usage", "local_read [ROUNDS [N SIZE]]");

    /* bin/sluice-worker beside this program's bench/ directory, unless WORKER says. */
    char bin[4096];
    const char *env = getenv("WORKER");
    if (env && *env) {
        snprintf(bin, sizeof bin, "%s", env);
    } else {
        snprintf(bin, sizeof bin, "%s", argv[0]);
        char *slash = strrchr(bin, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(bin, sizeof bin, ".");
        size_t len = strlen(bin);
        snprintf(bin + len, sizeof bin - len, "/../bin/sluice-worker");
    }
    if (access(bin, X_OK) != 0)
        die("worker process", "no sluice-worker there; set WORKER");

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

    if (n > 0) {
        run_size(c, target, bin, rounds, n, size);
    } else {
        run_size(c, target, bin, rounds, 256, 32l << 20);
        run_size(c, target, bin, rounds, 8192, 1l << 20);
    }
    sluice_client_close(c);
    sluice_dispatcher_stop(d);
    return 0;
}
