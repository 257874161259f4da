/* The embeddable worker of include/sluice/server.h: options checked and copied, plugins loaded,
 * then the worker shell (worker.h) and its metrics server started on a loop thread of their own
 * (common/loop_thread.h). `sluice-worker` (main.c) is a command line around these calls.
 *
 * Happy path: sluice_worker_start checks the options on the caller's thread, loads the plugins
 * into a registry of this worker's own, puts the python_path directories on the process's
 * sys.path (through the installed Python runtime, pipeline/pyfn.h), confines the registry (file
 * sources to the data roots, py functions to the python_path directories, see
 * pipe_registry_confine) and starts the loop thread,
 * which starts the worker and the metrics server. A stop at level 1 drains the worker
 * (worker_drain) and closes everything once the drain is over; level 2 closes at once, also in the
 * middle of a drain. The loop ends once every handle is closed.
 *
 * Failure modes: bad options and plugins that do not load are refused before any thread
 * exists. A dispatcher or readers that vanished bound the drain by the worker's own timeouts
 * (worker.h), so a stop always ends. */
#include "sluice/server.h"

#include "pool.h"
#include "worker.h"

#include "common/error.h"
#include "common/http.h"
#include "common/labels.h"
#include "common/log.h"
#include "common/names.h"
#include "common/loop_thread.h"
#include "common/rpc.h"
#include "common/security.h"
#include "pipeline/pyfn.h"
#include "pipeline/registry.h"
#include "task.h"
#include "pipeline/roots.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PART "sluice-worker"
/* "HOST:PORT" with a bracketed IPv6 host. */
#define ADDRESS_MAX 300

/* The same bounds as the command line's. */
#define MAX_HEARTBEAT_MS 3600000u
#define MAX_DRAIN_TIMEOUT_MS 86400000u

struct sluice_worker {
    struct loop_thread *lt;
    /* Copies of the options, alive as long as the object. */
    char *dispatcher;
    char *host;
    char *advertise;
    struct sluice_registry *reg;
    struct security_ctx *sec;
    struct worker_opts opts;
    uint32_t drain_timeout_ms;
    bool metrics;
    int metrics_port;
    bool unconfined_files;            /* no data roots */
    char labels[LABELS_TEXT_MAX + 1]; /* the options' labels, canonical (opts.labels) */
    char *metrics_host;

    /* Written on the loop thread while starting, read-only once the start returned. */
    char listen_address[ADDRESS_MAX];
    char address[ADDRESS_MAX];
    char metrics_address[ADDRESS_MAX];

    /* Loop thread only. */
    struct worker *w;         /* NULL once closing */
    struct http_server *http; /* NULL without metrics or once closing */
    bool draining;
};

/* ---- options ----------------------------------------------------------------------------- */

static int check_port(const char *name, int port, char *err, size_t errlen)
{
    if (port < 0 || port > 65535)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: expected a number from 0 to 65535, got %d", name, port);
    return 0;
}

/* A list option: n non-empty paths ("plugins: NULL with nplugins 2", "plugins[1] is empty"). */
static int check_paths(const char *name, const char *const *list, size_t n, char *err,
                       size_t errlen)
{
    if (n > 0 && !list)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: NULL with n%s %zu", name, name, n);
    for (size_t i = 0; i < n; i++) {
        if (!list[i] || !*list[i])
            return err_set(err, errlen, SLUICE_ERR_INVALID, "%s[%zu] is empty", name, i);
    }
    return 0;
}

static int check_options(const struct sluice_worker_options *o, enum log_level *level, char *err,
                         size_t errlen)
{
    char host[256], why[SLUICE_ERRMSG_SIZE];
    int port, rc;
    if (!o || !o->dispatcher || !*o->dispatcher)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "dispatcher is required");
    struct rpc_address replicas[RPC_MAX_ADDRESSES];
    size_t nreplicas;
    if (rpc_parse_address_list(o->dispatcher, replicas, RPC_MAX_ADDRESSES, &nreplicas, why,
                               sizeof why) < 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "dispatcher: %s", why);
    if (o->host && !*o->host)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "host is empty");
    if ((rc = check_port("port", o->port, err, errlen)) < 0)
        return rc;
    if (o->metrics && (rc = check_port("metrics_port", o->metrics_port, err, errlen)) < 0)
        return rc;
    if (o->advertise && *o->advertise &&
        rpc_parse_address(o->advertise, host, sizeof host, &port, why, sizeof why) < 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "advertise: %s", why);
    if (o->heartbeat_ms > MAX_HEARTBEAT_MS)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "heartbeat_ms: expected a number from 1 to %u, got %u", MAX_HEARTBEAT_MS,
                       (unsigned)o->heartbeat_ms);
    if (o->threads > POOL_MAX_THREADS)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "threads: expected a number from 1 to %u, got %u", POOL_MAX_THREADS,
                       o->threads);
    if (o->drain_timeout_ms > MAX_DRAIN_TIMEOUT_MS)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "drain_timeout_ms: expected a number from 1 to %u, got %u",
                       MAX_DRAIN_TIMEOUT_MS, (unsigned)o->drain_timeout_ms);
    if (o->max_element_bytes > WORKER_MAX_ELEMENT_BYTES_LIMIT)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "max_element_bytes: expected a number from 1 to %u, got %" PRIu64,
                       (unsigned)WORKER_MAX_ELEMENT_BYTES_LIMIT, o->max_element_bytes);
    if (o->max_tasks > WORKER_MAX_TASKS_LIMIT)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "max_tasks: expected a number from 1 to %u, got %u", WORKER_MAX_TASKS_LIMIT,
                       o->max_tasks);
    unsigned max_tasks = o->max_tasks ? o->max_tasks : WORKER_DEFAULT_MAX_TASKS;
    if (o->task_slots > max_tasks)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "task_slots: expected a number from 0 to %u (max_tasks), got %u", max_tasks,
                       o->task_slots);
    if (o->max_buffer_bytes && o->max_buffer_bytes < WORKER_MIN_BUFFER_BYTES)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "max_buffer_bytes: expected a number of at least %llu, got %" PRIu64,
                       WORKER_MIN_BUFFER_BYTES, o->max_buffer_bytes);
    if (o->advertise && *o->advertise &&
        (rc = name_check("advertise", o->advertise, NAME_ADDR_MAX, err, errlen)) < 0)
        return rc;
    char lwhy[SLUICE_ERRMSG_SIZE / 2], canon[LABELS_TEXT_MAX + 1];
    if (labels_canonical(o->labels, o->nlabels, canon, sizeof canon, lwhy, sizeof lwhy) < 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "labels: %s", lwhy);
    if ((rc = check_paths("plugins", o->plugins, o->nplugins, err, errlen)) < 0 ||
        (rc = check_paths("python_path", o->python_path, o->npython_path, err, errlen)) < 0 ||
        (rc = check_paths("data_roots", o->data_roots, o->ndata_roots, err, errlen)) < 0)
        return rc;
    *level = LOG_INFO;
    if (o->log_level && log_level_parse(o->log_level, level) < 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "log_level: expected debug, info, warn, error or off, got '%s'",
                       o->log_level);
    return 0;
}

static void free_object(struct sluice_worker *s)
{
    /* An abandoned task's thread may still be inside one of the registry's functions (a
     * plugin's code included): the registry is then left to the process's end. */
    if (s->reg && task_abandoned_count() == 0)
        pipe_registry_free(s->reg);
    security_ctx_free(s->sec);
    free(s->metrics_host);
    free(s->advertise);
    free(s->host);
    free(s->dispatcher);
    free(s);
}

/* Copies the options into s->opts and loads the plugins. */
static int copy_options(struct sluice_worker *s, const struct sluice_worker_options *o, char *err,
                        size_t errlen)
{
    s->dispatcher = strdup(o->dispatcher);
    s->host = strdup(o->host ? o->host : "127.0.0.1");
    bool advertise = o->advertise && *o->advertise;
    s->advertise = advertise ? strdup(o->advertise) : NULL;
    if (!s->dispatcher || !s->host || (advertise && !s->advertise))
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "start: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    int rc =
        security_ctx_new(&o->security, SECURITY_SERVER | SECURITY_CLIENT, &s->sec, err, errlen);
    if (rc < 0)
        return rc;
    if ((rc = security_check_listen(s->sec, s->host, err, errlen)) < 0)
        return rc;
    rc = pipe_registry_new(&s->reg);
    if (rc < 0)
        return err_set(err, errlen, rc, "registry: %s", sluice_strerror(rc));
    for (size_t i = 0; i < o->nplugins; i++) {
        char why[SLUICE_ERRMSG_SIZE];
        rc = pipe_registry_load_plugin(s->reg, o->plugins[i], why, sizeof why);
        if (rc < 0)
            return err_set(err, errlen, rc, "plugin %s: %s", o->plugins[i], why);
    }
    /* The first directory given ends up first: each goes to the front, the last one first. */
    for (size_t i = o->npython_path; i-- > 0;) {
        char why[SLUICE_ERRMSG_SIZE];
        rc = pipe_py_add_path(o->python_path[i], why, sizeof why);
        if (rc < 0)
            return err_set(err, errlen, rc, "python_path: %s", why);
    }
    /* Files only from the data roots, py functions only from python_path. */
    struct pipe_roots roots;
    rc = pipe_roots_init(&roots, o->data_roots, o->ndata_roots, err, errlen);
    roots.no_listing = true; /* the dispatcher lists; a worker reads what it pinned */
    if (rc == 0) {
        char why[SLUICE_ERRMSG_SIZE];
        rc =
            pipe_registry_confine(s->reg, &roots, o->python_path, o->npython_path, why, sizeof why);
        if (rc < 0)
            err_set(err, errlen, rc, "%s", why);
    }
    pipe_roots_release(&roots);
    if (rc < 0)
        return rc;
    s->unconfined_files = o->ndata_roots == 0;
    unsigned threads = o->threads ? o->threads : worker_default_threads();
    s->opts = (struct worker_opts){
        .dispatcher = s->dispatcher,
        .host = s->host,
        .port = o->port,
        .advertise = s->advertise,
        .heartbeat_ms = o->heartbeat_ms,
        .threads = threads,
        .reg = s->reg,
        .max_element_bytes =
            o->max_element_bytes ? o->max_element_bytes : WORKER_DEFAULT_MAX_ELEMENT_BYTES,
        .max_tasks = o->max_tasks ? o->max_tasks : WORKER_DEFAULT_MAX_TASKS,
        .task_slots = o->task_slots,
        .max_buffer_bytes =
            o->max_buffer_bytes ? o->max_buffer_bytes : WORKER_DEFAULT_MAX_BUFFER_BYTES,
        .sec = s->sec,
        .handshake_timeout_ms = o->handshake_timeout_ms,
        .max_connections = o->max_connections,
        .max_handshakes = o->max_handshakes,
        .in_process = !o->no_in_process_reads,
        .shm = !o->no_shm,
        .labels = s->labels,
    };
    /* Checked by check_options. */
    labels_canonical(o->labels, o->nlabels, s->labels, sizeof s->labels, NULL, 0);
    s->drain_timeout_ms = o->drain_timeout_ms ? o->drain_timeout_ms : WORKER_DRAIN_TIMEOUT_MS;
    s->metrics = o->metrics;
    s->metrics_port = o->metrics_port;
    if (o->metrics)
        return http_metrics_host(s->sec, o->metrics_host, &s->metrics_host, err, errlen);
    return 0;
}

/* ---- on the loop thread ------------------------------------------------------------------ */

static void on_worker_closed(void *user)
{
    (void)user;
    log_info("stopped");
}

static void close_servers(struct sluice_worker *s)
{
    if (s->http) {
        http_server_close(s->http, NULL, NULL);
        s->http = NULL;
    }
    if (s->w) {
        worker_close(s->w, on_worker_closed, NULL);
        s->w = NULL;
    }
}

static void on_drained(void *user, bool complete)
{
    log_info("drained%s: shutting down", complete ? "" : " (incomplete)");
    close_servers(user);
}

static int render_metrics(void *user, char **body, size_t *len)
{
    struct sluice_worker *s = user;
    if (!s->w)
        return SLUICE_ERR_CLOSED;
    return worker_metrics_render(s->w, body, len);
}

static bool ready(void *user, char *why, size_t whylen)
{
    struct sluice_worker *s = user;
    if (!s->w) {
        snprintf(why, whylen, "stopping");
        return false;
    }
    return worker_ready(s->w, why, whylen);
}

static int on_start(struct loop_thread *lt, uv_loop_t *loop, void *user, char *err, size_t errlen)
{
    struct sluice_worker *s = user;
    s->lt = lt;
    /* err already reads "what: why" ("listen on HOST:PORT: why", "dispatcher: why"). */
    int rc = worker_start(loop, &s->opts, &s->w, err, errlen);
    if (rc < 0)
        return rc;
    if (s->metrics) {
        rc = http_metrics_start(loop, s->metrics_host, s->metrics_port, render_metrics, s, s->sec,
                                &s->http, err, errlen);
        if (rc < 0) {
            close_servers(s);
            return rc;
        }
        http_server_set_ready(s->http, ready, s);
    }
    const char *host = worker_host(s->w);
    rpc_format_address(s->listen_address, sizeof s->listen_address, host, worker_port(s->w));
    snprintf(s->address, sizeof s->address, "%s", worker_address(s->w));
    if (s->http)
        rpc_format_address(s->metrics_address, sizeof s->metrics_address, s->metrics_host,
                           http_server_port(s->http));
    log_info("advertising %s to dispatcher %s, %u producer thread(s)", s->address, s->dispatcher,
             s->opts.threads);
    if (s->unconfined_files && !security_is_loopback(s->host))
        log_warn("serving beyond loopback without --data-root: pipelines may read any file this "
                 "worker can read");
    return 0;
}

static void on_stop(void *user, int level)
{
    struct sluice_worker *s = user;
    if (!s->w)
        return;
    if (level >= 2) {
        close_servers(s);
        return;
    }
    if (!s->draining) {
        /* Lossless scale-down: serve what is in hand, then leave. */
        s->draining = true;
        worker_drain(s->w, s->drain_timeout_ms, on_drained, s);
    }
}

static const struct loop_thread_ops ops = {.start = on_start, .stop = on_stop};

/* ---- public ------------------------------------------------------------------------------ */

int sluice_worker_start(const struct sluice_worker_options *options, struct sluice_worker **out,
                        char *err, size_t errlen)
{
    if (!out)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "out is NULL");
    enum log_level level;
    int rc = check_options(options, &level, err, errlen);
    if (rc < 0)
        return rc;
    struct sluice_worker *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "start: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    rc = copy_options(s, options, err, errlen);
    /* on_start keeps the thread's handle in s->lt, on the loop thread, before this returns. */
    struct loop_thread *lt;
    if (rc == 0)
        rc = loop_thread_start(&ops, s, PART, level, &lt, err, errlen);
    if (rc < 0) {
        free_object(s);
        return rc;
    }
    *out = s;
    return 0;
}

const char *sluice_worker_address(const struct sluice_worker *w)
{
    return w->address;
}

const char *sluice_worker_listen_address(const struct sluice_worker *w)
{
    return w->listen_address;
}

const char *sluice_worker_metrics_address(const struct sluice_worker *w)
{
    return w->metrics_address[0] ? w->metrics_address : NULL;
}

void sluice_worker_drain(struct sluice_worker *w)
{
    loop_thread_stop(w->lt, 1);
}

void sluice_worker_shutdown(struct sluice_worker *w)
{
    loop_thread_stop(w->lt, 2);
}

int sluice_worker_wait(struct sluice_worker *w, uint32_t timeout_ms, char *err, size_t errlen)
{
    return loop_thread_wait(w->lt, timeout_ms, err, errlen);
}

void sluice_worker_stop(struct sluice_worker *w)
{
    if (!w)
        return;
    /* A child forked from the process that started it: the server is the parent's (its threads
     * are not here); its memory is left to the child's exit. */
    if (!loop_thread_owned(w->lt))
        return;
    loop_thread_stop(w->lt, 1);
    loop_thread_free(w->lt);
    free_object(w);
}
