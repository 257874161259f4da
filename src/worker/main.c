/* sluice-worker: runs dataset pipelines for a dispatcher and serves their elements
 * (docs/design.md §2): parses the command line and runs the embeddable worker
 * (include/sluice/server.h) until SIGINT, or SIGTERM once drained (sluice_worker_drain). Exit
 * status: 0 after a clean shutdown, 1 on a runtime failure, 2 on bad usage. */
#include "sluice/server.h"
#include "sluice/sluice.h"

#include "common/error.h"
#include "common/labels.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/security.h"
#include "common/signals.h"
#include "pipeline/objstore.h"
#include "pool.h"
#include "worker.h"

#ifdef SLUICE_WITH_PYTHON
#include "pyfn/embed.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PART "sluice-worker"

static const char usage[] =
    "usage: sluice-worker --dispatcher HOST:PORT[,HOST:PORT...] [options]\n"
    "\n"
    "Runs dataset pipelines assigned by a sluice dispatcher and serves their elements.\n"
    "\n"
    "  --dispatcher H:P      the dispatcher (HOST:PORT or sluice://HOST:PORT), or its replicas\n"
    "                        as a comma-separated list (H1:P,H2:P,H3:P), of which the\n"
    "                        worker finds the leader; required\n"
    "  --host H              address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
    "  --port P              port to listen on (default 0: any free port)\n"
    "  --advertise H:P       address readers use to reach this worker\n"
    "                        (default: the bound address, or the host name when bound to all)\n"
    "  --heartbeat-ms N      heartbeat interval (default: as the dispatcher says)\n"
    "  --threads N           threads that run every task's pipeline, in turns (1 to 4096;\n"
    "                        default: twice the cores, at least 8); pipelines that block\n"
    "                        (sleeps, file reads, Python functions) want more than the cores\n"
    "  --plugin LIB.so       load pipeline functions from a plugin (repeatable)\n"
    "  --python-path DIR     a directory of modules for map(py, \"module:function\"),\n"
    "                        put on Python's sys.path (repeatable); py functions come only\n"
    "                        from these directories, never from the standard library,\n"
    "                        site-packages or PYTHONPATH\n"
    "  --data-root DIR       file sources (lines, tfrecord, tar, snapshot chunks) read only\n"
    "                        files within DIR, and snapshot saves write only below it,\n"
    "                        after resolving '..' and symbolic links (repeatable; without\n"
    "                        any, every file this process can read; set it in production);\n"
    "                        an s3://BUCKET/PREFIX or https://HOST/PREFIX root confines\n"
    "                        URLs to that prefix, taken as a directory\n"
    "  --label KEY=VALUE     a label of this worker (repeatable, at most 16, distinct keys):\n"
    "                        jobs read with --worker-selector run only on the workers\n"
    "                        whose labels match, e.g. --label pool=bigmem --label zone=a;\n"
    "                        keys 1 to 63 bytes, values 0 to 63, UTF-8 without control\n"
    "                        characters, spaces or any of = ! , ( )\n"
    "  --object-retry-ms N   retry an object-store request (s3://, https://) that fails\n"
    "                        transiently for up to N ms (default 60000)\n"
    "  --object-range-bytes N\n"
    "                        bytes per ranged GET of an object (4096 to 1073741824;\n"
    "                        default 8388608)\n"
    "  --metrics-port P      serve Prometheus metrics at GET /metrics on this port\n"
    "                        (0: any free port); with a token, scrapes must send\n"
    "                        'Authorization: Bearer TOKEN'\n"
    "  --metrics-host H      address of the metrics server (default 127.0.0.1)\n"
    "  --handshake-timeout-ms N\n"
    "                        close a connection that has not completed its handshake\n"
    "                        (authentication included) this long after it connected\n"
    "                        (default 10000)\n"
    "  --max-connections N   most connections open at once; beyond it new ones are closed\n"
    "                        at once (default 4096, at most the open-file limit less 64,\n"
    "                        raised towards its hard limit as needed)\n"
    "  --max-handshakes N    most connections in their handshake at once (default 256)\n"
    "  --drain-timeout-ms N  on SIGTERM, how long to wait for readers to fetch what this\n"
    "                        worker holds before leaving anyway (default 30000)\n"
    "  --max-element-bytes N the most bytes one element (or batch) of a task may hold, from\n"
    "                        1 to 267317248 (default 134217728); a larger one fails its task\n"
    "                        with an error its readers get, before it is allocated where\n"
    "                        its size is known in advance\n"
    "  --max-tasks N         the most tasks run at once, from 1 to 100000 (default 256); a\n"
    "                        task past it fails at once with an error its readers get\n"
    "  --task-slots N        how many tasks the dispatcher places on this worker at once,\n"
    "                        from 0 to --max-tasks (default 0: no limit, every job gets a\n"
    "                        task here); jobs take free slots heaviest first, a task is\n"
    "                        never taken away, and a job that gets none waits with the\n"
    "                        reason\n"
    "  --max-buffer-bytes N  the most bytes the tasks' buffers hold together, counting each\n"
    "                        at its bound of 16 MiB; at least 16777216 (default 4294967296);\n"
    "                        a task past it fails at once with an error its readers get\n"
    "  --no-shm              serve readers on this host over TCP only: no shared-memory\n"
    "                        socket (by default a reader on the same host gets element\n"
    "                        payloads through a memory region it shares with this worker)\n"
    "  --log-level L         debug, info, warn, error or off (default info)\n" SECURITY_USAGE_SERVER
    "  --help                show this help\n"
    "  --version             print the version\n"
    "\n"
    "Exit status: 0 after a clean shutdown (SIGINT, or SIGTERM once drained), 1 on a runtime\n"
    "failure, 2 on bad usage.\n";

struct args {
    uint32_t object_retry_ms, object_range_bytes; /* 0: the environment's, else the defaults */
    const char *dispatcher;
    const char *host;
    int port;
    const char *advertise;
    uint32_t heartbeat_ms;
    unsigned threads;
    const char **plugins;
    size_t nplugins;
    const char **python_path;
    size_t npython_path;
    const char **data_roots;
    size_t ndata_roots;
    const char **labels; /* --label KEY=VALUE */
    size_t nlabels;
    int metrics_port; /* -1: no metrics server */
    const char *metrics_host;
    uint32_t handshake_timeout_ms;
    unsigned max_connections, max_handshakes;
    uint32_t drain_timeout_ms;
    uint64_t max_element_bytes; /* 0: the default */
    unsigned max_tasks;         /* 0: the default */
    unsigned task_slots;        /* --task-slots; 0: no limit */
    uint64_t max_buffer_bytes;  /* 0: the default */
    enum log_level level;
    bool no_shm;
    struct sluice_security_options security;
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

/* Appends s to a growing list of arguments. Returns 0, or -1 after printing the failure. */
static int append(const char ***list, size_t *n, const char *s)
{
    const char **p = realloc(*list, (*n + 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, PART ": arguments: %s\n", sluice_strerror(SLUICE_ERR_NOMEM));
        return -1;
    }
    *list = p;
    (*list)[(*n)++] = s;
    return 0;
}

/* Returns 0, or the exit status for a usage error (after printing it); for --help 0 with *help
 * set to 1, for --version 0 with *help set to 2. */
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
        O_PYTHON_PATH,
        O_DATA_ROOT,
        O_LABEL,
        O_OBJ_RETRY,
        O_OBJ_RANGE,
        O_METRICS,
        O_DRAIN,
        O_MAX_ELEMENT,
        O_MAX_TASKS,
        O_TASK_SLOTS,
        O_MAX_BUFFER,
        O_LOG,
        O_HELP,
        O_VERSION,
        O_SEC_TOKEN,
        O_SEC_CERT,
        O_SEC_KEY,
        O_SEC_CA,
        O_SEC_INSECURE,
        O_METRICS_HOST,
        O_HS_TIMEOUT,
        O_MAX_CONNS,
        O_MAX_HS,
        O_NO_SHM,
    };
    static const struct option longopts[] = {
        {"dispatcher", required_argument, NULL, O_DISPATCHER},
        {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT},
        {"advertise", required_argument, NULL, O_ADVERTISE},
        {"heartbeat-ms", required_argument, NULL, O_HB},
        {"threads", required_argument, NULL, O_THREADS},
        {"plugin", required_argument, NULL, O_PLUGIN},
        {"python-path", required_argument, NULL, O_PYTHON_PATH},
        {"data-root", required_argument, NULL, O_DATA_ROOT},
        {"label", required_argument, NULL, O_LABEL},
        {"object-retry-ms", required_argument, NULL, O_OBJ_RETRY},
        {"object-range-bytes", required_argument, NULL, O_OBJ_RANGE},
        {"metrics-port", required_argument, NULL, O_METRICS},
        {"drain-timeout-ms", required_argument, NULL, O_DRAIN},
        {"max-element-bytes", required_argument, NULL, O_MAX_ELEMENT},
        {"max-tasks", required_argument, NULL, O_MAX_TASKS},
        {"task-slots", required_argument, NULL, O_TASK_SLOTS},
        {"max-buffer-bytes", required_argument, NULL, O_MAX_BUFFER},
        {"log-level", required_argument, NULL, O_LOG},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {"auth-token-file", required_argument, NULL, O_SEC_TOKEN},
        {"tls-cert", required_argument, NULL, O_SEC_CERT},
        {"tls-key", required_argument, NULL, O_SEC_KEY},
        {"tls-ca", required_argument, NULL, O_SEC_CA},
        {"insecure", no_argument, NULL, O_SEC_INSECURE},
        {"metrics-host", required_argument, NULL, O_METRICS_HOST},
        {"handshake-timeout-ms", required_argument, NULL, O_HS_TIMEOUT},
        {"max-connections", required_argument, NULL, O_MAX_CONNS},
        {"max-handshakes", required_argument, NULL, O_MAX_HS},
        {"no-shm", no_argument, NULL, O_NO_SHM},
        {NULL, 0, NULL, 0},
    };
    unsigned long v;
    opterr = 0;
    int c, li = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
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
            if (parse_number(optarg, 1, POOL_MAX_THREADS, &v) < 0)
                return usage_error("--threads: expected a number from 1 to %u, got '%s'",
                                   POOL_MAX_THREADS, optarg);
            a->threads = (unsigned)v;
            break;
        case O_PLUGIN:
            if (append(&a->plugins, &a->nplugins, optarg) < 0)
                return 1;
            break;
        case O_PYTHON_PATH:
            if (!*optarg)
                return usage_error("--python-path: expected a directory, got ''");
            if (append(&a->python_path, &a->npython_path, optarg) < 0)
                return 1;
            break;
        case O_LABEL: {
            char why[SLUICE_ERRMSG_SIZE];
            if (label_check(optarg, why, sizeof why) < 0)
                return usage_error("--label %s: %s", optarg, why);
            if (a->nlabels == LABELS_MAX)
                return usage_error("--label: at most %d labels", LABELS_MAX);
            if (append(&a->labels, &a->nlabels, optarg) < 0)
                return 1;
            break;
        }
        case O_DATA_ROOT:
            if (!*optarg)
                return usage_error("--data-root: expected a directory, got ''");
            if (append(&a->data_roots, &a->ndata_roots, optarg) < 0)
                return 1;
            break;
        case O_OBJ_RETRY:
            if (parse_number(optarg, 1, OBJ_MAX_RETRY_MS, &v) < 0)
                return usage_error("--object-retry-ms: expected a number from 1 to %u, got '%s'",
                                   OBJ_MAX_RETRY_MS, optarg);
            a->object_retry_ms = (uint32_t)v;
            break;
        case O_OBJ_RANGE:
            if (parse_number(optarg, OBJ_MIN_RANGE_BYTES, OBJ_MAX_RANGE_BYTES, &v) < 0)
                return usage_error("--object-range-bytes: expected a number from %u to %u, got "
                                   "'%s'",
                                   OBJ_MIN_RANGE_BYTES, OBJ_MAX_RANGE_BYTES, optarg);
            a->object_range_bytes = (uint32_t)v;
            break;
        case O_METRICS:
            if (parse_number(optarg, 0, 65535, &v) < 0)
                return usage_error("--metrics-port: expected a number from 0 to 65535, got "
                                   "'%s'",
                                   optarg);
            a->metrics_port = (int)v;
            break;
        case O_METRICS_HOST:
            if (!*optarg)
                return usage_error("--metrics-host: expected an address, got ''");
            a->metrics_host = optarg;
            break;
        case O_HS_TIMEOUT:
            if (parse_number(optarg, 1, 3600000, &v) < 0)
                return usage_error("--handshake-timeout-ms: expected a number from 1 to "
                                   "3600000, got '%s'",
                                   optarg);
            a->handshake_timeout_ms = (uint32_t)v;
            break;
        case O_MAX_CONNS:
        case O_MAX_HS:
            if (parse_number(optarg, 1, 1000000, &v) < 0)
                return usage_error("--%s: expected a number from 1 to 1000000, got '%s'",
                                   longopts[li].name, optarg);
            if (c == O_MAX_CONNS)
                a->max_connections = (unsigned)v;
            else
                a->max_handshakes = (unsigned)v;
            break;
        case O_DRAIN:
            if (parse_number(optarg, 1, 86400000, &v) < 0)
                return usage_error("--drain-timeout-ms: expected a number from 1 to 86400000, "
                                   "got '%s'",
                                   optarg);
            a->drain_timeout_ms = (uint32_t)v;
            break;
        case O_MAX_ELEMENT:
            if (parse_number(optarg, 1, WORKER_MAX_ELEMENT_BYTES_LIMIT, &v) < 0)
                return usage_error("--max-element-bytes: expected a number from 1 to %u, got '%s'",
                                   (unsigned)WORKER_MAX_ELEMENT_BYTES_LIMIT, optarg);
            a->max_element_bytes = v;
            break;
        case O_MAX_TASKS:
            if (parse_number(optarg, 1, WORKER_MAX_TASKS_LIMIT, &v) < 0)
                return usage_error("--max-tasks: expected a number from 1 to %u, got '%s'",
                                   WORKER_MAX_TASKS_LIMIT, optarg);
            a->max_tasks = (unsigned)v;
            break;
        case O_TASK_SLOTS:
            if (parse_number(optarg, 0, WORKER_MAX_TASKS_LIMIT, &v) < 0)
                return usage_error("--task-slots: expected a number from 0 to %u, got '%s'",
                                   WORKER_MAX_TASKS_LIMIT, optarg);
            a->task_slots = (unsigned)v;
            break;
        case O_MAX_BUFFER:
            if (parse_number(optarg, WORKER_MIN_BUFFER_BYTES, ULONG_MAX, &v) < 0)
                return usage_error("--max-buffer-bytes: expected a number of at least %llu, got "
                                   "'%s'",
                                   WORKER_MIN_BUFFER_BYTES, optarg);
            a->max_buffer_bytes = v;
            break;
        case O_LOG:
            if (log_level_parse(optarg, &a->level) < 0)
                return usage_error("--log-level: expected debug, info, warn, error or off, got "
                                   "'%s'",
                                   optarg);
            break;
        case O_NO_SHM:
            a->no_shm = true;
            break;
        case O_HELP:
            *help = 1;
            return 0;
        case O_VERSION:
            *help = 2;
            return 0;
        case O_SEC_TOKEN:
        case O_SEC_CERT:
        case O_SEC_KEY:
        case O_SEC_CA:
        case O_SEC_INSECURE: {
            char flag[32];
            snprintf(flag, sizeof flag, "--%s", longopts[li].name);
            if (security_parse_flag(&a->security, flag, optarg) < 0)
                return usage_error("%s: missing value", flag);
            break;
        }
        case ':':
            return usage_error("%s: missing value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    unsigned max_tasks = a->max_tasks ? a->max_tasks : WORKER_DEFAULT_MAX_TASKS;
    if (a->task_slots > max_tasks)
        return usage_error("--task-slots %u is above --max-tasks %u: the worker would refuse the "
                           "tasks past it",
                           a->task_slots, max_tasks);
    if (!a->dispatcher)
        return usage_error("--dispatcher is required");
    char host[256], err[SLUICE_ERRMSG_SIZE];
    int port;
    struct rpc_address replicas[RPC_MAX_ADDRESSES];
    size_t nreplicas;
    if (rpc_parse_address_list(a->dispatcher, replicas, RPC_MAX_ADDRESSES, &nreplicas, err,
                               sizeof err) < 0)
        return usage_error("--dispatcher: %s", err);
    if (a->advertise &&
        rpc_parse_address(a->advertise, host, sizeof host, &port, err, sizeof err) < 0)
        return usage_error("--advertise: %s", err);
    return 0;
}

/* SIGTERM drains the worker and then lets a second SIGTERM end the process; SIGINT stops it at
 * once (also in the middle of a drain), after which either signal ends the process. */
static int on_signal(void *user, int signum)
{
    struct sluice_worker *w = user;
    if (signum == SIGTERM) {
        /* Lossless scale-down: serve what is in hand, then leave. */
        log_info("SIGTERM: draining");
        sluice_worker_drain(w);
        return SIGNALS_TERM;
    }
    log_info("SIGINT: shutting down");
    sluice_worker_shutdown(w);
    return SIGNALS_INT | SIGNALS_TERM;
}

static int run(const struct args *a)
{
    struct sluice_worker_options opts = {
        .dispatcher = a->dispatcher,
        .host = a->host,
        .port = a->port,
        .advertise = a->advertise,
        .heartbeat_ms = a->heartbeat_ms,
        .threads = a->threads,
        .plugins = a->plugins,
        .nplugins = a->nplugins,
        .python_path = a->python_path,
        .npython_path = a->npython_path,
        .data_roots = a->data_roots,
        .ndata_roots = a->ndata_roots,
        .labels = a->labels,
        .nlabels = a->nlabels,
        .metrics = a->metrics_port >= 0,
        .metrics_port = a->metrics_port >= 0 ? a->metrics_port : 0,
        .metrics_host = a->metrics_host,
        .handshake_timeout_ms = a->handshake_timeout_ms,
        .max_connections = a->max_connections,
        .max_handshakes = a->max_handshakes,
        .drain_timeout_ms = a->drain_timeout_ms,
        .max_element_bytes = a->max_element_bytes,
        .max_tasks = a->max_tasks,
        .task_slots = a->task_slots,
        .max_buffer_bytes = a->max_buffer_bytes,
        .log_level = log_level_name(a->level),
        .security = a->security,
        .no_shm = a->no_shm,
    };
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_worker *w;
    int rc = sluice_worker_start(&opts, &w, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PART ": %s\n", err);
        return 1;
    }
    printf(PART " listening on %s\n", sluice_worker_listen_address(w));
    if (sluice_worker_metrics_address(w))
        printf(PART " metrics on %s\n", sluice_worker_metrics_address(w));
    fflush(stdout);

    static struct signals sig;
    rc = signals_start(&sig, on_signal, w);
    if (rc < 0) {
        fprintf(stderr, PART ": start: signal thread: %s\n", sluice_strerror(rc));
        sluice_worker_shutdown(w);
        sluice_worker_stop(w);
        return 1;
    }
    rc = sluice_worker_wait(w, 0, err, sizeof err);
    signals_stop(&sig);
    if (rc < 0)
        fprintf(stderr, PART ": %s\n", err);
    sluice_worker_stop(w);
    return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    /* Before any thread: the worker's threads inherit the mask, and the signal thread takes
     * SIGINT and SIGTERM. */
    signals_block();
    struct args a = {.host = "127.0.0.1",
                     .metrics_port = -1,
                     .drain_timeout_ms = WORKER_DRAIN_TIMEOUT_MS,
                     .level = LOG_INFO};
    int help = 0;
    int rc = parse_args(argc, argv, &a, &help);
    if (rc != 0 || help) {
        if (help == 1)
            fputs(usage, stdout);
        else if (help == 2)
            printf("sluice %s\n", sluice_version());
        free(a.plugins);
        free(a.python_path);
        free(a.data_roots);
        free(a.labels);
        return rc;
    }
    log_init(PART, a.level);
    obj_configure(a.object_retry_ms, a.object_range_bytes);
    /* A reader that disconnects mid-reply must cost an error on that connection, not the
     * process. */
    signal(SIGPIPE, SIG_IGN);
#ifdef SLUICE_WITH_PYTHON
    /* py functions run in CPython, started by the first one. */
    pyembed_install();
#endif
    rc = run(&a);
    free(a.plugins);
    free(a.python_path);
    free(a.data_roots);
    free(a.labels);
    return rc;
}
