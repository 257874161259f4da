/* The embeddable servers of include/sluice/server.h, in this process: bad options refused with
 * their exact message and nothing left running; two clusters side by side, each read through
 * the client exactly once per element; stops and waits from other threads; stops that stay
 * bounded when a peer vanished; a fault-tolerant dispatcher whose work dir is taken; metrics. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/net.h"
#include "lib/proc.h"
#include "lib/scrape.h"
#include "lib/tmp.h"

#include "sluice/server.h"
#include "sluice/sluice.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#define WAIT_MS 20000
#define QUIET "error"

/* Threads of this process, from /proc. */
static int count_threads(void)
{
    struct proc_threads t;
    assert_int_equal(proc_threads(getpid(), &t), 0);
    return t.total;
}

/* Servers join every thread of theirs before their stop returns, so the count comes back
 * exactly; a joined thread may still be listed for a moment while the kernel reaps it, hence
 * the short bounded wait. (libuv's thread pool stays once made: main makes it first.) */
static void expect_threads(int want)
{
    long long deadline = now_ms() + 2000;
    while (count_threads() != want && now_ms() < deadline)
        usleep(10 * 1000);
    assert_int_equal(count_threads(), want);
}

static void nothing(uv_work_t *req)
{
    (void)req;
}

/* Starts libuv's thread pool, which lives as long as the process. */
static void make_thread_pool(void)
{
    uv_loop_t loop;
    uv_work_t req;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(uv_queue_work(&loop, &req, nothing, NULL), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static struct sluice_dispatcher *start_dispatcher(const struct sluice_dispatcher_options *o)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_dispatcher *d = NULL;
    int rc = sluice_dispatcher_start(o, &d, err, sizeof err);
    if (rc != 0)
        fail_msg("dispatcher: %s (%d)", err, rc);
    return d;
}

static struct sluice_worker *start_worker(const char *target)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_worker *w = NULL;
    struct sluice_worker_options o = {.dispatcher = target, .threads = 1, .log_level = QUIET};
    int rc = sluice_worker_start(&o, &w, err, sizeof err);
    if (rc != 0)
        fail_msg("worker: %s (%d)", err, rc);
    return w;
}

/* Reads pipeline range(n) in distributed_epoch from target and asserts every element 0..n-1
 * arrived exactly once. */
static void read_range_once(const char *target, int n)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_client *c = NULL;
    struct sluice_client_options co = {.dispatcher = target, .timeout_ms = WAIT_MS};
    assert_int_equal(sluice_client_open(&co, &c, err, sizeof err), 0);
    char pipeline[64];
    snprintf(pipeline, sizeof pipeline, "range(%d)", n);
    struct sluice_read_options ro = {.pipeline = pipeline, .mode = SLUICE_DISTRIBUTED_EPOCH};
    struct sluice_iterator *it = NULL;
    int rc = sluice_iterator_open(c, &ro, &it, err, sizeof err);
    if (rc != 0)
        fail_msg("open: %s", err);
    int *seen = calloc((size_t)n, sizeof *seen);
    assert_non_null(seen);
    int count = 0;
    const struct sluice_element *e;
    while ((rc = sluice_iterator_next(it, &e, WAIT_MS, err, sizeof err)) == 1) {
        size_t nb;
        const int64_t *v = sluice_element_data(e, 0, &nb);
        assert_int_equal(nb, sizeof *v);
        assert_true(*v >= 0 && *v < n);
        assert_int_equal(seen[*v]++, 0);
        count++;
    }
    if (rc != 0)
        fail_msg("next: %s", err);
    assert_int_equal(count, n);
    free(seen);
    sluice_iterator_close(it);
    sluice_client_close(c);
}

/* Waits (bounded) until the dispatcher at target lists a worker at address. */
static void wait_registered(const char *target, const char *address)
{
    char err[SLUICE_ERRMSG_SIZE] = "", quoted[300];
    snprintf(quoted, sizeof quoted, "\"%s\"", address);
    struct sluice_client *c = NULL;
    struct sluice_client_options co = {.dispatcher = target, .timeout_ms = WAIT_MS};
    assert_int_equal(sluice_client_open(&co, &c, err, sizeof err), 0);
    long long deadline = now_ms() + WAIT_MS;
    bool found = false;
    while (!found && now_ms() < deadline) {
        char *json = NULL;
        assert_int_equal(sluice_status(c, &json, err, sizeof err), 0);
        found = strstr(json, quoted) != NULL;
        free(json);
        if (!found)
            usleep(20 * 1000);
    }
    sluice_client_close(c);
    if (!found)
        fail_msg("worker %s did not register with %s", address, target);
}

/* ---- bad options ------------------------------------------------------------------------- */

static const char *const two_same[] = {"127.0.0.1:7000", "sluice://127.0.0.1:7000"};
static const char *const one_empty[] = {"127.0.0.1:7000", ""};
static const char *const one_bad[] = {"nohost"};

static void test_bad_dispatcher_options(void **state)
{
    (void)state;
    static const struct {
        struct sluice_dispatcher_options o;
        const char *msg;
    } cases[] = {
        {{.port = 65536}, "port: expected a number from 0 to 65535, got 65536"},
        {{.port = -1}, "port: expected a number from 0 to 65535, got -1"},
        {{.metrics = true, .metrics_port = 70000},
         "metrics_port: expected a number from 0 to 65535, got 70000"},
        {{.host = ""}, "host is empty"},
        {{.fault_tolerant = true}, "fault_tolerant needs work_dir"},
        {{.work_dir = "/tmp"}, "work_dir is used only with fault_tolerant"},
        {{.snapshot_every = 5},
         "snapshot_every, journal_max_mb, journal_per_update and "
         "recover_to_last_good need fault_tolerant"},
        {{.journal_per_update = true},
         "snapshot_every, journal_max_mb, journal_per_update and "
         "recover_to_last_good need fault_tolerant"},
        {{.recover_to_last_good = true},
         "snapshot_every, journal_max_mb, journal_per_update and "
         "recover_to_last_good need fault_tolerant"},
        {{.fault_tolerant = true, .work_dir = "/tmp/x", .journal_max_mb = (1ULL << 24) + 1},
         "journal_max_mb: expected a size in MiB from 1 to 16777216, got 16777217"},
        {{.fault_tolerant = true, .work_dir = "/tmp/x", .snapshot_every = 1000000000001ULL},
         "snapshot_every: expected a number of changes from 1 to 1000000000000, got "
         "1000000000001"},
        {{.nworker_addresses = 2}, "worker_addresses: NULL with nworker_addresses 2"},
        {{.worker_addresses = one_empty, .nworker_addresses = 2}, "worker_addresses[1] is empty"},
        {{.worker_addresses = one_bad, .nworker_addresses = 1},
         "worker_addresses[0]: bad address 'nohost': expected HOST:PORT"},
        {{.worker_addresses = two_same, .nworker_addresses = 2},
         "worker_addresses: '127.0.0.1:7000' is listed twice"},
        {{.log_level = "loud"}, "log_level: expected debug, info, warn, error or off, got 'loud'"},
    };
    int threads = count_threads();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[SLUICE_ERRMSG_SIZE] = "";
        struct sluice_dispatcher *d = NULL;
        int rc = sluice_dispatcher_start(&cases[i].o, &d, err, sizeof err);
        if (rc != SLUICE_ERR_INVALID || strcmp(err, cases[i].msg) != 0)
            fail_msg("case %zu: got %d '%s', want '%s'", i, rc, err, cases[i].msg);
        assert_null(d);
    }
    expect_threads(threads);
}

static const char *const no_plugin[] = {NULL};

static void test_bad_worker_options(void **state)
{
    (void)state;
    static const struct {
        struct sluice_worker_options o;
        const char *msg;
    } cases[] = {
        {{.dispatcher = NULL}, "dispatcher is required"},
        {{.dispatcher = ""}, "dispatcher is required"},
        {{.dispatcher = "nohost"}, "dispatcher: bad address 'nohost': expected HOST:PORT"},
        {{.dispatcher = "127.0.0.1:1,,127.0.0.1:2"},
         "dispatcher: bad address list '127.0.0.1:1,,127.0.0.1:2': address 2 is empty"},
        {{.dispatcher = "127.0.0.1:1,127.0.0.1:1"},
         "dispatcher: bad address list '127.0.0.1:1,127.0.0.1:1': 127.0.0.1:1 is listed twice"},
        {{.dispatcher = "127.0.0.1:1", .port = 65536},
         "port: expected a number from 0 to 65535, got 65536"},
        {{.dispatcher = "127.0.0.1:1", .metrics = true, .metrics_port = -5},
         "metrics_port: expected a number from 0 to 65535, got -5"},
        {{.dispatcher = "127.0.0.1:1", .host = ""}, "host is empty"},
        {{.dispatcher = "127.0.0.1:1", .advertise = "x"},
         "advertise: bad address 'x': expected HOST:PORT"},
        {{.dispatcher = "127.0.0.1:1", .heartbeat_ms = 3600001},
         "heartbeat_ms: expected a number from 1 to 3600000, got 3600001"},
        {{.dispatcher = "127.0.0.1:1", .threads = 4097},
         "threads: expected a number from 1 to 4096, got 4097"},
        {{.dispatcher = "127.0.0.1:1", .drain_timeout_ms = 86400001},
         "drain_timeout_ms: expected a number from 1 to 86400000, got 86400001"},
        {{.dispatcher = "127.0.0.1:1", .nplugins = 1}, "plugins: NULL with nplugins 1"},
        {{.dispatcher = "127.0.0.1:1", .plugins = no_plugin, .nplugins = 1}, "plugins[0] is empty"},
        {{.dispatcher = "127.0.0.1:1", .log_level = "LOUD"},
         "log_level: expected debug, info, warn, error or off, got 'LOUD'"},
    };
    int threads = count_threads();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[SLUICE_ERRMSG_SIZE] = "";
        struct sluice_worker *w = NULL;
        int rc = sluice_worker_start(&cases[i].o, &w, err, sizeof err);
        if (rc != SLUICE_ERR_INVALID || strcmp(err, cases[i].msg) != 0)
            fail_msg("case %zu: got %d '%s', want '%s'", i, rc, err, cases[i].msg);
        assert_null(w);
    }
    /* No options at all is a worker without a dispatcher. */
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_worker *w = NULL;
    assert_int_equal(sluice_worker_start(NULL, &w, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "dispatcher is required");
    /* A plugin that does not load names itself; nothing is started. */
    const char *missing[] = {"/nonexistent/plugin.so"};
    struct sluice_worker_options o = {
        .dispatcher = "127.0.0.1:1", .plugins = missing, .nplugins = 1};
    assert_int_equal(sluice_worker_start(&o, &w, err, sizeof err), SLUICE_ERR_PLUGIN);
    if (strncmp(err, "plugin /nonexistent/plugin.so: ", 31) != 0)
        fail_msg("unexpected: %s", err);
    assert_null(w);
    expect_threads(threads);
}

/* A start that fails after it bound its RPC port (the metrics port is taken) leaves nothing
 * behind: the RPC port is free again and no thread is left. */
static void test_failed_start_leaves_nothing(void **state)
{
    (void)state;
    int taken = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(taken >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(taken, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(taken, 1), 0);
    socklen_t alen = sizeof a;
    assert_int_equal(getsockname(taken, (struct sockaddr *)&a, &alen), 0);
    int taken_port = ntohs(a.sin_port);

    int threads = count_threads();
    int port = free_port();
    char err[SLUICE_ERRMSG_SIZE] = "", want[512];
    struct sluice_dispatcher *d = NULL;
    struct sluice_dispatcher_options o = {
        .port = port, .metrics = true, .metrics_port = taken_port, .log_level = QUIET};
    assert_int_equal(sluice_dispatcher_start(&o, &d, err, sizeof err), -EADDRINUSE);
    snprintf(want, sizeof want, "metrics: listen on 127.0.0.1:%d: Address already in use",
             taken_port);
    assert_string_equal(err, want);
    assert_null(d);
    expect_threads(threads);

    struct sluice_worker *w = NULL;
    struct sluice_worker_options wo = {.dispatcher = "127.0.0.1:1",
                                       .port = port,
                                       .metrics = true,
                                       .metrics_port = taken_port,
                                       .log_level = QUIET};
    assert_int_equal(sluice_worker_start(&wo, &w, err, sizeof err), -EADDRINUSE);
    assert_string_equal(err, want);
    expect_threads(threads);

    /* The port the failed starts had bound serves a dispatcher now. */
    o.metrics = false;
    d = start_dispatcher(&o);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    assert_string_equal(sluice_dispatcher_target(d), target);
    assert_null(sluice_dispatcher_metrics_address(d));
    sluice_dispatcher_stop(d);
    close(taken);
    expect_threads(threads);
}

/* ---- several servers in one process ------------------------------------------------------ */

static void test_two_clusters_in_one_process(void **state)
{
    (void)state;
    int threads = count_threads();
    struct sluice_dispatcher_options o = {.log_level = QUIET};
    struct sluice_dispatcher *d[2];
    struct sluice_worker *w[2][2];
    for (int i = 0; i < 2; i++) {
        d[i] = start_dispatcher(&o);
        for (int j = 0; j < 2; j++)
            w[i][j] = start_worker(sluice_dispatcher_target(d[i]));
    }
    assert_string_not_equal(sluice_dispatcher_target(d[0]), sluice_dispatcher_target(d[1]));
    assert_string_not_equal(sluice_worker_address(w[0][0]), sluice_worker_address(w[0][1]));
    assert_string_equal(sluice_worker_address(w[1][0]), sluice_worker_listen_address(w[1][0]));
    /* Each cluster serves its own reads, twice over. */
    for (int round = 0; round < 2; round++) {
        read_range_once(sluice_dispatcher_target(d[0]), 10);
        read_range_once(sluice_dispatcher_target(d[1]), 1000);
    }
    /* Stopping one cluster leaves the other serving. */
    for (int j = 0; j < 2; j++)
        sluice_worker_stop(w[0][j]);
    sluice_dispatcher_stop(d[0]);
    read_range_once(sluice_dispatcher_target(d[1]), 100);
    for (int j = 0; j < 2; j++)
        sluice_worker_stop(w[1][j]);
    sluice_dispatcher_stop(d[1]);
    expect_threads(threads);
}

/* ---- a list of dispatcher addresses ------------------------------------------------------- */

/* Workers and a reader given a list whose first address is a closed port find the dispatcher at
 * the second; a malformed list is refused before anything starts. */
static void test_dispatcher_list(void **state)
{
    (void)state;
    int threads = count_threads();
    struct sluice_dispatcher_options o = {.log_level = QUIET};
    struct sluice_dispatcher *d = start_dispatcher(&o);
    char list[128];
    snprintf(list, sizeof list, "sluice://127.0.0.1:%d,%s", free_port(),
             sluice_dispatcher_target(d));
    struct sluice_worker *w[2];
    for (int j = 0; j < 2; j++)
        w[j] = start_worker(list);
    for (int j = 0; j < 2; j++)
        wait_registered(list, sluice_worker_address(w[j]));
    read_range_once(list, 100);

    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_client *c = NULL;
    struct sluice_client_options co = {.dispatcher = "127.0.0.1:1,sluice://127.0.0.1:2"};
    assert_int_equal(sluice_client_open(&co, &c, err, sizeof err), SLUICE_ERR_INVALID);
    assert_null(c);
    assert_string_equal(err, "bad address list '127.0.0.1:1,sluice://127.0.0.1:2': address 2: "
                             "sluice:// goes once, before the list");

    for (int j = 0; j < 2; j++)
        sluice_worker_stop(w[j]);
    sluice_dispatcher_stop(d);
    expect_threads(threads);
}

/* ---- stop and wait from other threads ---------------------------------------------------- */

struct waiter {
    struct sluice_dispatcher *d;
    struct sluice_worker *w;
    int rc;
    char err[SLUICE_ERRMSG_SIZE];
    long long returned_ms;
};

static void *wait_main(void *arg)
{
    struct waiter *wt = arg;
    if (wt->d)
        wt->rc = sluice_dispatcher_wait(wt->d, 0, wt->err, sizeof wt->err);
    else
        wt->rc = sluice_worker_wait(wt->w, 0, wt->err, sizeof wt->err);
    wt->returned_ms = now_ms();
    return NULL;
}

static void *stop_main(void *arg)
{
    struct waiter *wt = arg;
    usleep(100 * 1000);
    if (wt->d)
        sluice_dispatcher_stop(wt->d);
    else
        sluice_worker_stop(wt->w);
    wt->returned_ms = now_ms();
    return NULL;
}

static void test_stop_and_wait_from_other_threads(void **state)
{
    (void)state;
    int threads = count_threads();
    struct sluice_dispatcher_options o = {.log_level = QUIET};
    struct sluice_dispatcher *d = start_dispatcher(&o);
    struct sluice_worker *w = start_worker(sluice_dispatcher_target(d));
    read_range_once(sluice_dispatcher_target(d), 10);

    /* A bounded wait on a running server times out and changes nothing. */
    char err[SLUICE_ERRMSG_SIZE] = "";
    long long t0 = now_ms();
    assert_int_equal(sluice_dispatcher_wait(d, 50, err, sizeof err), SLUICE_ERR_TIMEOUT);
    assert_true(now_ms() - t0 >= 50);
    assert_int_equal(sluice_worker_wait(w, 1, err, sizeof err), SLUICE_ERR_TIMEOUT);

    /* Two threads wait on the worker while a third drains it; all of them return. */
    struct waiter ww[2] = {{.w = w}, {.w = w}};
    pthread_t wt[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&wt[i], NULL, wait_main, &ww[i]), 0);
    usleep(50 * 1000);
    sluice_worker_drain(w);
    sluice_worker_drain(w); /* a second ask changes nothing */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(wt[i], NULL), 0);
        assert_int_equal(ww[i].rc, 0);
    }
    /* Stopped by itself, it is still stopped (and freed) once. */
    sluice_worker_stop(w);

    /* A thread waits on the dispatcher (as a join would) while another stops it. */
    struct waiter wd = {.d = d};
    struct waiter sd = {.d = d};
    pthread_t tw, ts;
    assert_int_equal(pthread_create(&tw, NULL, wait_main, &wd), 0);
    assert_int_equal(pthread_create(&ts, NULL, stop_main, &sd), 0);
    assert_int_equal(pthread_join(ts, NULL), 0);
    assert_int_equal(pthread_join(tw, NULL), 0);
    assert_int_equal(wd.rc, 0);
    assert_string_equal(wd.err, "");
    expect_threads(threads);
}

/* sluice_worker_shutdown stops a worker in the middle of a drain that would wait for a reader. */
static void test_shutdown_cuts_a_drain_short(void **state)
{
    (void)state;
    struct sluice_dispatcher_options o = {.log_level = QUIET};
    struct sluice_dispatcher *d = start_dispatcher(&o);
    struct sluice_worker *w = start_worker(sluice_dispatcher_target(d));
    /* A worker that never reached its dispatcher (none listens at port 1) drains at once. */
    struct sluice_worker_options lone = {.dispatcher = "127.0.0.1:1", .log_level = QUIET};
    struct sluice_worker *l = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(sluice_worker_start(&lone, &l, err, sizeof err), 0);
    sluice_worker_shutdown(l);
    assert_int_equal(sluice_worker_wait(l, WAIT_MS, err, sizeof err), 0);
    sluice_worker_stop(l);

    sluice_worker_drain(w);
    sluice_worker_shutdown(w);
    long long t0 = now_ms();
    assert_int_equal(sluice_worker_wait(w, WAIT_MS, err, sizeof err), 0);
    assert_true(now_ms() - t0 < 5000);
    sluice_worker_stop(w);
    sluice_dispatcher_shutdown(d);
    assert_int_equal(sluice_dispatcher_wait(d, WAIT_MS, err, sizeof err), 0);
    sluice_dispatcher_stop(d);
}

/* ---- bounded stops when peers vanished --------------------------------------------------- */

/* A TCP listener that never accepts: connections complete in its backlog and hear nothing. */
static int black_hole(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 16), 0);
    socklen_t alen = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void test_stop_bounded_when_peers_vanished(void **state)
{
    (void)state;
    int threads = count_threads();

    /* A worker whose dispatcher stopped after serving a read. */
    struct sluice_dispatcher_options o = {.log_level = QUIET};
    struct sluice_dispatcher *d = start_dispatcher(&o);
    struct sluice_worker *w = start_worker(sluice_dispatcher_target(d));
    read_range_once(sluice_dispatcher_target(d), 100);
    sluice_dispatcher_stop(d);
    long long t0 = now_ms();
    sluice_worker_stop(w);
    long long took = now_ms() - t0;
    printf("    worker stop with its dispatcher gone: %lld ms\n", took);
    assert_true(took < 5000);

    /* A worker whose dispatcher accepts connections and never answers. */
    int port;
    int hole = black_hole(&port);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    w = start_worker(target);
    usleep(200 * 1000); /* it connects and sends its Hello into the void */
    t0 = now_ms();
    sluice_worker_stop(w);
    took = now_ms() - t0;
    printf("    worker stop with a silent dispatcher: %lld ms\n", took);
    assert_true(took < 5000);

    /* A dispatcher with a peer that connected and went silent. */
    d = start_dispatcher(&o);
    int peer = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const char *colon = strrchr(sluice_dispatcher_target(d), ':');
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    assert_int_equal(connect(peer, (struct sockaddr *)&a, sizeof a), 0);
    usleep(100 * 1000);
    t0 = now_ms();
    sluice_dispatcher_stop(d);
    took = now_ms() - t0;
    printf("    dispatcher stop with a silent peer: %lld ms\n", took);
    assert_true(took < 2000);
    close(peer);
    close(hole);
    expect_threads(threads);
}

/* A reader killed in the middle of a read: the worker's drain waits for it only until no reader
 * has asked for elements for 2 s, far less than its drain timeout. */
static void test_stop_bounded_when_reader_vanished(void **state)
{
    (void)state;
    struct sluice_dispatcher_options o = {.log_level = QUIET};
    struct sluice_dispatcher *d = start_dispatcher(&o);
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_worker_options wo = {.dispatcher = sluice_dispatcher_target(d),
                                       .threads = 1,
                                       .drain_timeout_ms = 60000,
                                       .log_level = QUIET};
    struct sluice_worker *w = NULL;
    assert_int_equal(sluice_worker_start(&wo, &w, err, sizeof err), 0);

    char disp[128];
    snprintf(disp, sizeof disp, "%s", sluice_dispatcher_target(d));
    char *const argv[] = {(char *)bin_path("sluice"),
                          "read",
                          "--dispatcher",
                          disp,
                          "--mode",
                          "distributed_epoch",
                          "range(100000000) | map(wait_us, 100)",
                          NULL};
    struct proc reader;
    assert_int_equal(proc_spawn(&reader, argv), 0);
    /* Wait for the first elements, then kill the reader without a goodbye. */
    char buf[256];
    ssize_t n = 0;
    long long deadline = now_ms() + WAIT_MS;
    while (n <= 0 && now_ms() < deadline)
        n = read(reader.out_fd, buf, sizeof buf);
    assert_true(n > 0);
    assert_int_equal(proc_stop(&reader, SIGKILL, WAIT_MS), 128 + SIGKILL);

    long long t0 = now_ms();
    sluice_worker_stop(w);
    long long took = now_ms() - t0;
    printf("    worker stop with its reader killed: %lld ms\n", took);
    assert_true(took < 10000);
    sluice_dispatcher_stop(d);
}

/* ---- fault tolerance and metrics --------------------------------------------------------- */

static void test_fault_tolerant_work_dir(void **state)
{
    (void)state;
    char wd[512];
    snprintf(wd, sizeof wd, "%s/embed-journal", tmp_dir());
    struct sluice_dispatcher_options o = {
        .fault_tolerant = true, .work_dir = wd, .log_level = QUIET};
    struct sluice_dispatcher *d = start_dispatcher(&o);

    /* One work dir serves one dispatcher, in this process too. */
    char err[SLUICE_ERRMSG_SIZE] = "", want[1024];
    struct sluice_dispatcher *d2 = NULL;
    assert_int_equal(sluice_dispatcher_start(&o, &d2, err, sizeof err), SLUICE_ERR_EXISTS);
    assert_null(d2);
    snprintf(want, sizeof want, "journal: %s: another dispatcher is writing this journal", wd);
    assert_string_equal(err, want);

    /* Registered with the first, the dataset is there after a stop and a new start. */
    struct sluice_client *c = NULL;
    struct sluice_client_options co = {.dispatcher = sluice_dispatcher_target(d),
                                       .timeout_ms = WAIT_MS};
    assert_int_equal(sluice_client_open(&co, &c, err, sizeof err), 0);
    char id[64];
    struct sluice_register_options ro = {.dataset_id = "kept"};
    assert_int_equal(sluice_register(c, "range(7)", &ro, id, sizeof id, err, sizeof err), 0);
    sluice_client_close(c);
    sluice_dispatcher_stop(d);

    d = start_dispatcher(&o);
    co.dispatcher = sluice_dispatcher_target(d);
    assert_int_equal(sluice_client_open(&co, &c, err, sizeof err), 0);
    char *json = NULL;
    assert_int_equal(sluice_status(c, &json, err, sizeof err), 0);
    assert_non_null(strstr(json, "\"kept\""));
    free(json);
    sluice_client_close(c);
    sluice_dispatcher_stop(d);
}

static void test_metrics(void **state)
{
    (void)state;
    struct sluice_dispatcher_options o = {.metrics = true, .log_level = QUIET};
    struct sluice_dispatcher *d = start_dispatcher(&o);
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_worker_options wo = {
        .dispatcher = sluice_dispatcher_target(d), .metrics = true, .log_level = QUIET};
    struct sluice_worker *w = NULL;
    assert_int_equal(sluice_worker_start(&wo, &w, err, sizeof err), 0);
    read_range_once(sluice_dispatcher_target(d), 10);

    const char *addrs[] = {sluice_dispatcher_metrics_address(d), sluice_worker_metrics_address(w)};
    const char *names[] = {"\nsluice_workers ", "\nsluice_worker_elements_served_total "};
    for (int i = 0; i < 2; i++) {
        assert_non_null(addrs[i]);
        char *resp = NULL;
        assert_int_equal(
            scrape_request(addrs[i], "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", WAIT_MS, &resp),
            0);
        assert_int_equal(scrape_status(resp), 200);
        const char *at = strstr(resp, names[i]);
        if (!at)
            fail_msg("%s not in:\n%s", names[i], resp);
        /* One worker; the ten elements (and the end markers of their splits). */
        long v = strtol(at + strlen(names[i]), NULL, 10);
        assert_true(i == 0 ? v == 1 : v >= 10);
        free(resp);
    }
    sluice_worker_stop(w);
    sluice_dispatcher_stop(d);
}

/* Servers in one process log under their own names and at their own levels. */
static void test_logs_per_server(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/embed-stderr.log", tmp_dir());
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    assert_true(dup2(fileno(f), 2) >= 0);

    struct sluice_dispatcher_options o = {.log_level = "info"};
    struct sluice_dispatcher *d = start_dispatcher(&o);
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_worker_options quiet = {.dispatcher = sluice_dispatcher_target(d),
                                          .log_level = "off"};
    struct sluice_worker_options chatty = {.dispatcher = sluice_dispatcher_target(d),
                                           .log_level = "debug"};
    struct sluice_worker *w1 = NULL, *w2 = NULL;
    assert_int_equal(sluice_worker_start(&quiet, &w1, err, sizeof err), 0);
    assert_int_equal(sluice_worker_start(&chatty, &w2, err, sizeof err), 0);
    char w2_line[300];
    snprintf(w2_line, sizeof w2_line, "info sluice-worker: advertising %s to dispatcher %s,",
             sluice_worker_address(w2), sluice_dispatcher_target(d));
    char w1_line[300];
    snprintf(w1_line, sizeof w1_line, "advertising %s ", sluice_worker_address(w1));
    wait_registered(sluice_dispatcher_target(d), sluice_worker_address(w1));
    wait_registered(sluice_dispatcher_target(d), sluice_worker_address(w2));
    sluice_worker_stop(w1);
    sluice_worker_stop(w2);
    sluice_dispatcher_stop(d);

    fflush(stderr);
    assert_true(dup2(saved, 2) >= 0);
    close(saved);
    rewind(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    if (!strstr(text, "info sluice-dispatcher: worker ") || !strstr(text, w2_line) ||
        !strstr(text, "info sluice-worker: stopped\n") || strstr(text, w1_line))
        fail_msg("unexpected log:\n%s", text);
}

static void test_version(void **state)
{
    (void)state;
    assert_string_equal(sluice_version(), SLUICE_VERSION_STRING);
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", SLUICE_VERSION_MAJOR, SLUICE_VERSION_MINOR,
             SLUICE_VERSION_PATCH);
    assert_string_equal(sluice_version(), want);
    /* Every binary prints the same version. */
    const char *bins[] = {"sluice", "sluice-dispatcher", "sluice-worker"};
    snprintf(want, sizeof want, "sluice %s\n", SLUICE_VERSION_STRING);
    for (int i = 0; i < 3; i++) {
        char *const argv[] = {(char *)bin_path(bins[i]), "--version", NULL};
        char *out = NULL, *errs = NULL;
        assert_int_equal(run_cmd(argv, WAIT_MS, &out, &errs), 0);
        assert_string_equal(out, want);
        assert_string_equal(errs, "");
        free(out);
        free(errs);
    }
    assert_string_equal(sluice_strerror(SLUICE_ERR_SERVER), "server failed");
    for (int code = SLUICE_ERR_BASE - 1; code > SLUICE_ERR_LAST; code--)
        assert_string_not_equal(sluice_strerror(code), "unknown error");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    make_thread_pool();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_bad_dispatcher_options),
        cmocka_unit_test(test_bad_worker_options),
        cmocka_unit_test(test_failed_start_leaves_nothing),
        cmocka_unit_test(test_two_clusters_in_one_process),
        cmocka_unit_test(test_dispatcher_list),
        cmocka_unit_test(test_stop_and_wait_from_other_threads),
        cmocka_unit_test(test_shutdown_cuts_a_drain_short),
        cmocka_unit_test(test_stop_bounded_when_peers_vanished),
        cmocka_unit_test(test_stop_bounded_when_reader_vanished),
        cmocka_unit_test(test_fault_tolerant_work_dir),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_logs_per_server),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
