/* The embeddable dispatcher of include/sluice/server.h: options checked and copied, then the
 * server shell (server.h) and its metrics server started on a loop thread of their own
 * (common/loop_thread.h). `sluice-dispatcher` (main.c) is a command line around these calls.
 *
 * Happy path: sluice_dispatcher_start checks the options on the caller's thread, copies them
 * and starts the loop thread, which starts the dispatcher (recovering the journal first in
 * fault-tolerant mode) and the metrics server, then serves. sluice_dispatcher_shutdown (or
 * stop) closes both on the loop thread; the loop ends once every handle is closed.
 *
 * Failure modes: bad options are refused before any thread exists. A dispatcher that cannot
 * keep its state consistent (a journal that fails) calls on_fatal: the failure is recorded for
 * sluice_dispatcher_wait and everything is closed, as a shutdown would. */
#include "sluice/server.h"

#include "dashboard.h"
#include "server.h"

#include "common/error.h"
#include "common/http.h"
#include "common/labels.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/loop_thread.h"
#include "common/rpc.h"
#include "common/security.h"
#include "pipeline/roots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PART "sluice-dispatcher"
/* "HOST:PORT" with a bracketed IPv6 host. */
#define ADDRESS_MAX 300

/* The same bounds as the command line's. */
#define MAX_SNAPSHOT_EVERY 1000000000000ULL
#define MAX_JOURNAL_MB (1ULL << 24)

struct sluice_dispatcher {
    struct loop_thread *lt;
    /* Copies of the options, alive as long as the object. */
    char *host;
    char *work_dir;
    char *raft_address, *raft_cluster, *raft_bind, *advertise, *raft_seed_journal;
    char **worker_addresses;
    size_t nworker_addresses;
    struct security_ctx *sec;
    struct pipe_roots roots;
    struct dispatcher_opts opts;
    bool metrics;
    int metrics_port;
    char *metrics_host;
    char pool_label[LABEL_KEY_MAX + 1]; /* opts.autoscale_pool_label; "" the default */

    /* Written on the loop thread while starting, read-only once the start returned. */
    char target[ADDRESS_MAX];
    char metrics_address[ADDRESS_MAX];

    /* Loop thread only. */
    struct dispatcher *d;     /* NULL once closing */
    struct http_server *http; /* NULL without metrics or once closing */
    bool fatal;               /* on_fatal ran */
    char fatal_msg[SLUICE_ERRMSG_SIZE];
};

/* ---- options ----------------------------------------------------------------------------- */

static int check_port(const char *name, int port, char *err, size_t errlen)
{
    if (port < 0 || port > 65535)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: expected a number from 0 to 65535, got %d", name, port);
    return 0;
}

static int check_options(const struct sluice_dispatcher_options *o, enum log_level *level,
                         char *err, size_t errlen)
{
    int rc;
    if (o->host && !*o->host)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "host is empty");
    if ((rc = check_port("port", o->port, err, errlen)) < 0)
        return rc;
    if (o->metrics && (rc = check_port("metrics_port", o->metrics_port, err, errlen)) < 0)
        return rc;
    bool work_dir = o->work_dir && *o->work_dir;
    if (o->raft_id) {
        if (!work_dir)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "raft_id needs work_dir");
        if (!o->raft_address || !*o->raft_address || !o->raft_cluster || !*o->raft_cluster)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "raft_id needs raft_address and raft_cluster");
        if (o->journal_max_mb || o->journal_per_update || o->recover_to_last_good)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "journal_max_mb, journal_per_update and recover_to_last_good are for "
                           "a single dispatcher's journal, not a replica's Raft log");
        if (o->raft_election_timeout_ms &&
            (o->raft_election_timeout_ms < 100 || o->raft_election_timeout_ms > 60000))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "raft_election_timeout_ms: expected 100 to 60000, got %u",
                           o->raft_election_timeout_ms);
    } else if (o->raft_address || o->raft_cluster || o->raft_bind || o->raft_election_timeout_ms) {
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "raft_address, raft_cluster, raft_bind and raft_election_timeout_ms need "
                       "raft_id");
    }
    bool fault_tolerant = o->fault_tolerant || o->raft_id;
    if (fault_tolerant && !work_dir)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "fault_tolerant needs work_dir");
    if (o->work_dir && !fault_tolerant)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "work_dir is used only with fault_tolerant");
    if (!fault_tolerant && (o->snapshot_every || o->journal_max_mb || o->journal_per_update ||
                            o->recover_to_last_good))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "snapshot_every, journal_max_mb, journal_per_update and "
                       "recover_to_last_good need fault_tolerant");
    if (o->snapshot_every > MAX_SNAPSHOT_EVERY)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "snapshot_every: expected a number of changes from 1 to %llu, got %llu",
                       MAX_SNAPSHOT_EVERY, (unsigned long long)o->snapshot_every);
    if (o->journal_max_mb > MAX_JOURNAL_MB)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "journal_max_mb: expected a size in MiB from 1 to %llu, got %llu",
                       MAX_JOURNAL_MB, (unsigned long long)o->journal_max_mb);
    if (o->nworker_addresses > 0 && !o->worker_addresses)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "worker_addresses: NULL with nworker_addresses %zu", o->nworker_addresses);
    for (size_t i = 0; i < o->nworker_addresses; i++) {
        const char *a = o->worker_addresses[i];
        char host[256], why[SLUICE_ERRMSG_SIZE];
        int port;
        if (!a || !*a)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "worker_addresses[%zu] is empty", i);
        if (rpc_parse_address(a, host, sizeof host, &port, why, sizeof why) < 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "worker_addresses[%zu]: %s", i, why);
    }
    const char *key = o->autoscale_pool_label;
    if (key && key[0]) {
        char kv[LABEL_KEY_MAX + 3], why[SLUICE_ERRMSG_SIZE / 2];
        const char *eq = strchr(key, '=');
        if (eq)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "autoscale_pool_label: key: '=' is not allowed at byte %zu",
                           (size_t)(eq - key));
        if (strlen(key) > LABEL_KEY_MAX)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "autoscale_pool_label: key: %zu bytes, longer than the limit of %d",
                           strlen(key), LABEL_KEY_MAX);
        snprintf(kv, sizeof kv, "%s=", key);
        if (label_check(kv, why, sizeof why) < 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "autoscale_pool_label: %s", why);
    }
    if (o->ndata_roots > 0 && !o->data_roots)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "data_roots: NULL with ndata_roots %zu",
                       o->ndata_roots);
    *level = LOG_INFO;
    if (o->log_level && log_level_parse(o->log_level, level) < 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "log_level: expected debug, info, warn, error or off, got '%s'",
                       o->log_level);
    return 0;
}

static void free_object(struct sluice_dispatcher *s)
{
    for (size_t i = 0; i < s->nworker_addresses; i++)
        free(s->worker_addresses[i]);
    free(s->worker_addresses);
    pipe_roots_release(&s->roots);
    security_ctx_free(s->sec);
    free(s->metrics_host);
    free(s->work_dir);
    free(s->raft_address);
    free(s->raft_cluster);
    free(s->raft_bind);
    free(s->advertise);
    free(s->raft_seed_journal);
    free(s->host);
    free(s);
}

/* Copies the options into s->opts. Entries of worker_addresses lose a sluice:// prefix, so they
 * compare equal to the addresses workers advertise. */
static int copy_options(struct sluice_dispatcher *s, const struct sluice_dispatcher_options *o,
                        char *err, size_t errlen)
{
    s->host = strdup(o->host ? o->host : "127.0.0.1");
    s->work_dir = o->work_dir ? strdup(o->work_dir) : NULL;
    if (!s->host || (o->work_dir && !s->work_dir))
        goto nomem;
#define COPY_OPT(f)                                                                                \
    do {                                                                                           \
        if (o->f && !(s->f = strdup(o->f)))                                                        \
            goto nomem;                                                                            \
    } while (0)
    COPY_OPT(raft_address);
    COPY_OPT(raft_cluster);
    COPY_OPT(raft_bind);
    COPY_OPT(advertise);
    COPY_OPT(raft_seed_journal);
#undef COPY_OPT
    if (o->nworker_addresses > 0) {
        s->worker_addresses = calloc(o->nworker_addresses, sizeof *s->worker_addresses);
        if (!s->worker_addresses)
            goto nomem;
    }
    for (size_t i = 0; i < o->nworker_addresses; i++) {
        const char *a = o->worker_addresses[i];
        if (strncmp(a, "sluice://", 9) == 0)
            a += 9;
        for (size_t j = 0; j < s->nworker_addresses; j++) {
            if (strcmp(s->worker_addresses[j], a) == 0)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "worker_addresses: '%s' is listed twice", a);
        }
        s->worker_addresses[i] = strdup(a);
        if (!s->worker_addresses[i])
            goto nomem;
        s->nworker_addresses++;
    }
    /* A replica also dials its peers' Raft ports, with the same certificate and CA. */
    int sides = o->raft_id ? SECURITY_SERVER | SECURITY_CLIENT : SECURITY_SERVER;
    int rc = security_ctx_new(&o->security, sides, &s->sec, err, errlen);
    if (rc < 0)
        return rc;
    if ((rc = security_check_listen(s->sec, s->host, err, errlen)) < 0)
        return rc;
    /* Resolved once, here: a missing root is a start error naming it. */
    if ((rc = pipe_roots_init(&s->roots, o->data_roots, o->ndata_roots, err, errlen)) < 0)
        return rc;
    /* Checked by check_options. */
    snprintf(s->pool_label, sizeof s->pool_label, "%s",
             o->autoscale_pool_label ? o->autoscale_pool_label : "");
    s->opts = (struct dispatcher_opts){
        .host = s->host,
        .port = o->port,
        .worker_timeout_ms = o->worker_timeout_ms,
        .client_timeout_ms = o->client_timeout_ms,
        .disconnect_grace_ms = o->disconnect_grace_ms,
        .job_gc_timeout_ms = o->job_gc_timeout_ms,
        .autoscale_window_ms = o->autoscale_window_ms,
        .autoscale_pool_label = s->pool_label,
        .worker_addresses = (const char *const *)s->worker_addresses,
        .nworker_addresses = s->nworker_addresses,
        .roots = &s->roots,
        .work_dir = o->fault_tolerant || o->raft_id ? s->work_dir : NULL,
        .raft_id = o->raft_id,
        .raft_address = s->raft_address,
        .raft_cluster = s->raft_cluster,
        .raft_bind = s->raft_bind,
        .advertise = s->advertise,
        .raft_election_timeout_ms = o->raft_election_timeout_ms,
        .raft_seed_journal = s->raft_seed_journal,
        .snapshot_every = o->snapshot_every,
        .journal_max_bytes = (size_t)o->journal_max_mb << 20,
        .journal_per_update = o->journal_per_update,
        .recover_to_last_good = o->recover_to_last_good,
        .sec = s->sec,
        .max_datasets = o->max_datasets,
        .max_pipeline_bytes = o->max_pipeline_bytes,
        .max_jobs_per_client = o->max_jobs_per_client,
        .max_jobs_per_address = o->max_jobs_per_address,
        .handshake_timeout_ms = o->handshake_timeout_ms,
        .max_connections = o->max_connections,
        .max_handshakes = o->max_handshakes,
    };
    s->metrics = o->metrics;
    s->metrics_port = o->metrics_port;
    if (o->metrics)
        return http_metrics_host(s->sec, o->metrics_host, &s->metrics_host, err, errlen);
    return 0;

nomem:
    return err_set(err, errlen, SLUICE_ERR_NOMEM, "start: %s", sluice_strerror(SLUICE_ERR_NOMEM));
}

/* ---- on the loop thread ------------------------------------------------------------------ */

static void close_servers(struct sluice_dispatcher *s)
{
    if (s->http) {
        http_server_close(s->http, NULL, NULL);
        s->http = NULL;
    }
    if (s->d) {
        dispatcher_close(s->d, NULL, NULL);
        s->d = NULL;
    }
}

/* msg already reads "what: why" ("journal: DIR: commit: No space left on device"). */
static void on_fatal(void *user, const char *msg)
{
    struct sluice_dispatcher *s = user;
    if (s->fatal)
        return;
    s->fatal = true;
    snprintf(s->fatal_msg, sizeof s->fatal_msg, "%s", msg);
    loop_thread_fail(s->lt, SLUICE_ERR_SERVER, msg);
    close_servers(s);
}

/* Formats a frozen registry on libuv's pool (http_answer_from_pool). */
static int metrics_produce(void *arg, struct http_response *res)
{
    char *body;
    size_t len;
    int rc = metrics_frozen_render(arg, &body, &len);
    if (rc == 0)
        *res = (struct http_response){NULL, body, len, true};
    return rc;
}

static void metrics_release(void *arg)
{
    metrics_frozen_free(arg);
}

/* GET /metrics: the gauges are refreshed and the registry frozen on the loop; formatting its
 * numbers, most of a scrape at thousands of workers, happens off the loop. */
static int render_metrics(void *user, char **body, size_t *len)
{
    (void)body;
    (void)len;
    struct sluice_dispatcher *s = user;
    if (!s->d)
        return SLUICE_ERR_CLOSED;
    struct metrics_frozen *f;
    int rc = dispatcher_metrics_freeze(s->d, &f);
    return rc < 0 ? rc : http_answer_from_pool(s->http, metrics_produce, metrics_release, f);
}

/* The dashboard (dashboard.h), beside /metrics. */
static enum http_access page_find(void *user, const char *path, size_t len)
{
    (void)user;
    return dashboard_access(path, len);
}

static int page_serve(void *user, const char *path, size_t len, struct http_response *res)
{
    struct sluice_dispatcher *s = user;
    if (!s->d)
        return SLUICE_ERR_CLOSED;
    return dashboard_serve(s->d, s->http, path, len, res);
}

/* GET /readyz: the journal was recovered before the metrics server started, so a dispatcher
 * that answers is serving, unless a failure is stopping it. */
static bool ready(void *user, char *why, size_t whylen)
{
    struct sluice_dispatcher *s = user;
    if (!s->d || s->fatal) {
        snprintf(why, whylen, "%s", s->fatal ? s->fatal_msg : "stopping");
        return false;
    }
    /* A replica is ready only while it leads and serves, so a Service routes to the leader. */
    if (!dispatcher_serving(s->d)) {
        snprintf(why, whylen, "not the leader");
        return false;
    }
    return true;
}

static int on_start(struct loop_thread *lt, uv_loop_t *loop, void *user, char *err, size_t errlen)
{
    struct sluice_dispatcher *s = user;
    s->lt = lt;
    s->opts.on_fatal = on_fatal;
    s->opts.user = s;
    /* err already reads "what: why", e.g. "listen on HOST:PORT: Address in use". */
    int rc = dispatcher_start(loop, &s->opts, &s->d, err, errlen);
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
        http_server_set_pages(s->http, &(struct http_pages){page_find, page_serve, s});
    }
    if (s->fatal) {
        close_servers(s);
        return err_set(err, errlen, SLUICE_ERR_SERVER, "%s", s->fatal_msg);
    }
    const char *host = dispatcher_host(s->d);
    if (!pipe_roots_active(&s->roots) && !security_is_loopback(s->host))
        log_warn("serving beyond loopback without --data-root: datasets may name any file");
    rpc_format_address(s->target, sizeof s->target, host, dispatcher_port(s->d));
    if (s->http)
        rpc_format_address(s->metrics_address, sizeof s->metrics_address, s->metrics_host,
                           http_server_port(s->http));
    return 0;
}

static void handed_over(void *user)
{
    close_servers(user);
}

static void on_stop(void *user, int level)
{
    (void)level; /* a dispatcher has one way to stop */
    struct sluice_dispatcher *s = user;
    /* A leading replica hands leadership to a caught-up follower first: a planned stop costs
     * the group a handover, not an election. */
    if (s->d && !s->fatal) {
        dispatcher_handover(s->d, handed_over, s);
        return;
    }
    close_servers(user);
}

static const struct loop_thread_ops ops = {.start = on_start, .stop = on_stop};

/* ---- public ------------------------------------------------------------------------------ */

int sluice_dispatcher_start(const struct sluice_dispatcher_options *options,
                            struct sluice_dispatcher **out, char *err, size_t errlen)
{
    static const struct sluice_dispatcher_options defaults;
    if (!options)
        options = &defaults;
    if (!out)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "out is NULL");
    enum log_level level;
    int rc = check_options(options, &level, err, errlen);
    if (rc < 0)
        return rc;
    struct sluice_dispatcher *s = calloc(1, sizeof *s);
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

const char *sluice_dispatcher_target(const struct sluice_dispatcher *d)
{
    return d->target;
}

const char *sluice_dispatcher_metrics_address(const struct sluice_dispatcher *d)
{
    return d->metrics_address[0] ? d->metrics_address : NULL;
}

void sluice_dispatcher_shutdown(struct sluice_dispatcher *d)
{
    loop_thread_stop(d->lt, 1);
}

int sluice_dispatcher_wait(struct sluice_dispatcher *d, uint32_t timeout_ms, char *err,
                           size_t errlen)
{
    return loop_thread_wait(d->lt, timeout_ms, err, errlen);
}

void sluice_dispatcher_stop(struct sluice_dispatcher *d)
{
    if (!d)
        return;
    /* A child forked from the process that started it: the server is the parent's (its threads
     * are not here); its memory is left to the child's exit. */
    if (!loop_thread_owned(d->lt))
        return;
    loop_thread_stop(d->lt, 1);
    loop_thread_free(d->lt);
    free_object(d);
}
