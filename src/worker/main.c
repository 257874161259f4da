/* sluice-worker: runs dataset pipelines for a dispatcher and serves their elements
 * (DESIGN.md §2). Exit status: 0 after a clean shutdown (SIGINT, or SIGTERM once drained, see
 * worker_drain), 1 on a runtime failure, 2 on bad usage. */
#include "common/error.h"
#include "common/http.h"
#include "common/log.h"
#include "common/rpc.h"
#include "pipeline/registry.h"
#include "worker.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define PART "sluice-worker"

static const char usage[] =
    "usage: sluice-worker --dispatcher HOST:PORT [options]\n"
    "\n"
    "Runs dataset pipelines assigned by a sluice dispatcher and serves their elements.\n"
    "\n"
    "  --dispatcher H:P      the dispatcher (HOST:PORT or sluice://HOST:PORT); required\n"
    "  --host H              address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
    "  --port P              port to listen on (default 0: any free port)\n"
    "  --advertise H:P       address readers use to reach this worker\n"
    "                        (default: the bound address, or the host name when bound to all)\n"
    "  --heartbeat-ms N      heartbeat interval (default: as the dispatcher says)\n"
    "  --threads N           producer threads per distributed_epoch task (default: cores)\n"
    "  --plugin LIB.so       load pipeline functions from a plugin (repeatable)\n"
    "  --metrics-port P      serve Prometheus metrics at GET /metrics on this port, on the\n"
    "                        same --host (0: any free port)\n"
    "  --drain-timeout-ms N  on SIGTERM, how long to wait for readers to fetch what this\n"
    "                        worker holds before leaving anyway (default 30000)\n"
    "  --log-level L         debug, info, warn, error or off (default info)\n"
    "  --help                show this help\n";

struct args {
    const char *dispatcher;
    const char *host;
    int port;
    const char *advertise;
    uint32_t heartbeat_ms;
    unsigned threads;
    const char **plugins;
    size_t nplugins;
    int metrics_port; /* -1: no metrics server */
    uint32_t drain_timeout_ms;
    enum log_level level;
};

/* Prints one usage error line and the hint, and returns the usage exit status. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, PART ": %s\nTry '" PART " --help'.\n", line);
    return 2;
}

/* Parses a decimal number in [min, max]. Returns 0 or -1. */
static int parse_number(const char *text, unsigned long min, unsigned long max, unsigned long *out)
{
    if (!*text || strspn(text, "0123456789") != strlen(text))
        return -1;
    errno = 0;
    unsigned long v = strtoul(text, NULL, 10);
    if (errno || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Returns 0, or the exit status for a usage error (after printing it) or --help (0 with
 * *help set). */
static int parse_args(int argc, char **argv, struct args *a, int *help)
{
    enum {
        O_DISPATCHER = 1,
        O_HOST,
        O_PORT,
        O_ADVERTISE,
        O_HB,
        O_THREADS,
        O_PLUGIN,
        O_METRICS,
        O_DRAIN,
        O_LOG,
        O_HELP
    };
    static const struct option longopts[] = {
        {"dispatcher", required_argument, NULL, O_DISPATCHER},
        {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT},
        {"advertise", required_argument, NULL, O_ADVERTISE},
        {"heartbeat-ms", required_argument, NULL, O_HB},
        {"threads", required_argument, NULL, O_THREADS},
        {"plugin", required_argument, NULL, O_PLUGIN},
        {"metrics-port", required_argument, NULL, O_METRICS},
        {"drain-timeout-ms", required_argument, NULL, O_DRAIN},
        {"log-level", required_argument, NULL, O_LOG},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    unsigned long v;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case O_DISPATCHER:
            a->dispatcher = optarg;
            break;
        case O_HOST:
            a->host = optarg;
            break;
        case O_PORT:
            if (parse_number(optarg, 0, 65535, &v) < 0)
                return usage_error("--port: expected a number from 0 to 65535, got '%s'", optarg);
            a->port = (int)v;
            break;
        case O_ADVERTISE:
            a->advertise = optarg;
            break;
        case O_HB:
            if (parse_number(optarg, 1, 3600000, &v) < 0)
                return usage_error("--heartbeat-ms: expected a number from 1 to 3600000, got "
                                   "'%s'",
                                   optarg);
            a->heartbeat_ms = (uint32_t)v;
            break;
        case O_THREADS:
            if (parse_number(optarg, 1, 1024, &v) < 0)
                return usage_error("--threads: expected a number from 1 to 1024, got '%s'", optarg);
            a->threads = (unsigned)v;
            break;
        case O_PLUGIN: {
            const char **p = realloc(a->plugins, (a->nplugins + 1) * sizeof *p);
            if (!p) {
                fprintf(stderr, PART ": arguments: %s\n", sluice_strerror(SLUICE_ERR_NOMEM));
                return 1;
            }
            a->plugins = p;
            a->plugins[a->nplugins++] = optarg;
            break;
        }
        case O_METRICS:
            if (parse_number(optarg, 0, 65535, &v) < 0)
                return usage_error("--metrics-port: expected a number from 0 to 65535, got "
                                   "'%s'",
                                   optarg);
            a->metrics_port = (int)v;
            break;
        case O_DRAIN:
            if (parse_number(optarg, 1, 86400000, &v) < 0)
                return usage_error("--drain-timeout-ms: expected a number from 1 to 86400000, "
                                   "got '%s'",
                                   optarg);
            a->drain_timeout_ms = (uint32_t)v;
            break;
        case O_LOG:
            if (log_level_parse(optarg, &a->level) < 0)
                return usage_error("--log-level: expected debug, info, warn, error or off, got "
                                   "'%s'",
                                   optarg);
            break;
        case O_HELP:
            *help = 1;
            return 0;
        case ':':
            return usage_error("%s: missing value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!a->dispatcher)
        return usage_error("--dispatcher is required");
    char host[256], err[256];
    int port;
    if (rpc_parse_address(a->dispatcher, host, sizeof host, &port, err, sizeof err) < 0)
        return usage_error("--dispatcher: %s", err);
    if (a->advertise &&
        rpc_parse_address(a->advertise, host, sizeof host, &port, err, sizeof err) < 0)
        return usage_error("--advertise: %s", err);
    return 0;
}

struct shell {
    uv_loop_t loop;
    uv_signal_t sigterm, sigint;
    uint32_t drain_timeout_ms;
    struct worker *worker;
    struct http_server *http; /* NULL without --metrics-port */
};

static int render_metrics(void *user, char **body, size_t *len)
{
    struct shell *sh = user;
    if (!sh->worker)
        return SLUICE_ERR_CLOSED;
    return worker_metrics_render(sh->worker, body, len);
}

/* Prints "sluice-worker WHAT on HOST:PORT", flushed, with an IPv6 host in brackets. */
static void print_address(const char *what, const char *host, int port)
{
    if (strchr(host, ':'))
        printf(PART " %s on [%s]:%d\n", what, host, port);
    else
        printf(PART " %s on %s:%d\n", what, host, port);
    fflush(stdout);
}

static void on_worker_closed(void *user)
{
    (void)user;
    log_info("stopped");
}

static void shut_down(struct shell *sh)
{
    if (sh->http) {
        http_server_close(sh->http, NULL, NULL);
        sh->http = NULL;
    }
    if (sh->worker) {
        worker_close(sh->worker, on_worker_closed, NULL);
        sh->worker = NULL;
    }
}

static void on_drained(void *user, bool complete)
{
    struct shell *sh = user;
    log_info("drained%s: shutting down", complete ? "" : " (incomplete)");
    if (!uv_is_closing((uv_handle_t *)&sh->sigint))
        uv_close((uv_handle_t *)&sh->sigint, NULL);
    shut_down(sh);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct shell *sh = s->data;
    if (signum == SIGTERM && sh->worker) {
        /* Lossless scale-down: serve what is in hand, then leave. A second SIGTERM has its
         * default effect; SIGINT still stops at once. */
        log_info("SIGTERM: draining");
        uv_close((uv_handle_t *)&sh->sigterm, NULL);
        worker_drain(sh->worker, sh->drain_timeout_ms, on_drained, sh);
        return;
    }
    log_info("%s: shutting down", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    /* With the handles closed, a second signal has its default effect and ends the process. */
    if (!uv_is_closing((uv_handle_t *)&sh->sigterm))
        uv_close((uv_handle_t *)&sh->sigterm, NULL);
    if (!uv_is_closing((uv_handle_t *)&sh->sigint))
        uv_close((uv_handle_t *)&sh->sigint, NULL);
    shut_down(sh);
}

static int run(const struct args *a)
{
    struct sluice_registry *reg;
    char err[512];
    int status = 1;
    int rc = pipe_registry_new(&reg);
    if (rc < 0) {
        fprintf(stderr, PART ": registry: %s\n", sluice_strerror(rc));
        return 1;
    }
    for (size_t i = 0; i < a->nplugins; i++) {
        rc = pipe_registry_load_plugin(reg, a->plugins[i], err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, PART ": plugin %s: %s\n", a->plugins[i], err);
            goto out_reg;
        }
    }

    struct shell sh;
    memset(&sh, 0, sizeof sh);
    sh.drain_timeout_ms = a->drain_timeout_ms;
    rc = uv_loop_init(&sh.loop);
    if (rc < 0) {
        fprintf(stderr, PART ": event loop: %s\n", uv_strerror(rc));
        goto out_reg;
    }
    struct worker_opts wo = {
        .dispatcher = a->dispatcher,
        .host = a->host,
        .port = a->port,
        .advertise = a->advertise,
        .heartbeat_ms = a->heartbeat_ms,
        .threads = a->threads,
        .reg = reg,
    };
    rc = worker_start(&sh.loop, &wo, &sh.worker, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PART ": %s\n", err);
        uv_run(&sh.loop, UV_RUN_DEFAULT);
        uv_loop_close(&sh.loop);
        goto out_reg;
    }
    if (a->metrics_port >= 0) {
        rc = http_server_start(&sh.loop, a->host, a->metrics_port, render_metrics, &sh, &sh.http,
                               err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, PART ": metrics: %s\n", err);
            worker_close(sh.worker, NULL, NULL);
            uv_run(&sh.loop, UV_RUN_DEFAULT);
            uv_loop_close(&sh.loop);
            goto out_reg;
        }
    }
    uv_signal_init(&sh.loop, &sh.sigterm);
    uv_signal_init(&sh.loop, &sh.sigint);
    sh.sigterm.data = sh.sigint.data = &sh;
    uv_signal_start(&sh.sigterm, on_signal, SIGTERM);
    uv_signal_start(&sh.sigint, on_signal, SIGINT);

    const char *host = worker_host(sh.worker);
    print_address("listening", host, worker_port(sh.worker));
    if (sh.http)
        print_address("metrics", host, http_server_port(sh.http));
    log_info("advertising %s to dispatcher %s, %u thread(s) per distributed task",
             worker_address(sh.worker), a->dispatcher, a->threads);

    uv_run(&sh.loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&sh.loop);
    if (rc != 0) {
        fprintf(stderr, PART ": shutdown: %s\n", uv_strerror(rc));
        goto out_reg;
    }
    status = 0;
out_reg:
    pipe_registry_free(reg);
    return status;
}

int main(int argc, char **argv)
{
    struct args a = {.host = "127.0.0.1",
                     .metrics_port = -1,
                     .drain_timeout_ms = WORKER_DRAIN_TIMEOUT_MS,
                     .level = LOG_INFO};
    int help = 0;
    int rc = parse_args(argc, argv, &a, &help);
    if (rc != 0 || help) {
        if (help)
            fputs(usage, stdout);
        free(a.plugins);
        return rc;
    }
    if (a.threads == 0) {
        unsigned n = uv_available_parallelism();
        a.threads = n ? n : 1;
    }
    log_init(PART, a.level);
    /* A reader that disconnects mid-reply must cost an error on that connection, not the
     * process. */
    signal(SIGPIPE, SIG_IGN);
    rc = run(&a);
    free(a.plugins);
    return rc;
}
