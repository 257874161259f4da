/* The RPC server of rpc.h.
 *
 * Happy path: the listening socket is bound and listening before any libuv handle exists, so a
 * failed start leaves nothing to close. Each accepted connection sends our Hello at once and
 * waits for the peer's; after it, every Envelope goes to on_request.
 *
 * Failure modes: a first frame that is not a Hello of our version is answered with an Error
 * (id 0) and the connection closes once that is written; a second Hello, a request without an
 * id, or a broken frame closes the connection with one warning line. Nothing one connection
 * does affects another. With TLS (opts.sec), every accepted connection is a TLS server
 * connection (conn.h); a failed handshake is logged with the peer's address, at most
 * TLS_LOG_BURST lines per TLS_LOG_WINDOW_MS, so a scanner cannot flood the log.
 *
 * Lifetimes: an rpc_conn holds one reference for its open handle, dropped in the close callback,
 * plus one per rpc_conn_ref. srv is cleared when the handle closes, so a handler replying late
 * through a reference it kept gets SLUICE_ERR_CLOSED, even after the server has been freed. */
#include "rpc.h"
#include "listen.h"

#include "conn.h"
#include "error.h"
#include "log.h"
#include "security.h"
#include "tls.h"

#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct rpc_conn {
    struct conn conn;       /* first member: a struct conn * is a struct rpc_conn * */
    struct rpc_server *srv; /* NULL once the handle has closed */
    struct rpc_conn *prev, *next;
    unsigned refs;
    bool greeted; /* the peer's Hello has arrived */
    Sluice__Role peer_role;
    uint64_t peer_incarnation;
};

/* TLS failures logged per window; the rest are counted and summed up in the next line. */
#define TLS_LOG_BURST 10
#define TLS_LOG_WINDOW_MS 10000

struct rpc_server {
    uv_tcp_t listener;
    uv_loop_t *loop;
    struct rpc_server_opts opts; /* opts.host points at host */
    char host[256];
    int port;
    struct rpc_conn *conns; /* open connections, newest first */
    unsigned handles;       /* the listener and every connection not yet closed */
    bool closing;
    void (*close_cb)(void *user);
    void *close_user;
    const struct tls_ctx *tls; /* NULL: plain TCP */
    uint64_t tls_window_start;
    unsigned tls_logged, tls_suppressed;
};

static const struct conn_ops server_conn_ops;

/* ---- references and replies ------------------------------------------------------------------ */

void rpc_conn_ref(struct rpc_conn *rc)
{
    rc->refs++;
}

void rpc_conn_unref(struct rpc_conn *rc)
{
    assert(rc->refs > 0);
    if (--rc->refs == 0)
        free(rc);
}

bool rpc_conn_is_open(const struct rpc_conn *rc)
{
    return rc->srv != NULL && !rc->conn.closing && !rc->conn.draining;
}

Sluice__Role rpc_conn_peer_role(const struct rpc_conn *rc)
{
    return rc->peer_role;
}

uint64_t rpc_conn_peer_incarnation(const struct rpc_conn *rc)
{
    return rc->peer_incarnation;
}

const char *rpc_conn_peer_name(const struct rpc_conn *rc)
{
    return rc->conn.peer;
}

size_t rpc_conn_pending_write(const struct rpc_conn *rc)
{
    return rc->conn.pending_write;
}

int rpc_conn_reply(struct rpc_conn *rc, uint64_t id, Sluice__Envelope *reply)
{
    if (!rpc_conn_is_open(rc))
        return SLUICE_ERR_CLOSED;
    reply->id = id;
    int rc_send = conn_send(&rc->conn, reply);
    if (rc_send < 0 && rc_send != SLUICE_ERR_TOO_LARGE && rc_send != SLUICE_ERR_INVALID &&
        rc_send != SLUICE_ERR_NOMEM) {
        /* uv_write refused: the socket is unusable, so the connection is as good as lost. */
        log_warn("rpc: %s: write: %s", rc->conn.peer, sluice_strerror(rc_send));
        conn_close(&rc->conn);
        return SLUICE_ERR_CLOSED;
    }
    return rc_send;
}

int rpc_conn_reply_elements(struct rpc_conn *rc, uint64_t id, uint32_t count, bool eos,
                            const uv_buf_t *segs, unsigned nsegs,
                            void (*sent)(void *arg, int status), void *arg)
{
    if (!rpc_conn_is_open(rc))
        return SLUICE_ERR_CLOSED;
    int rc_send = conn_send_elements(&rc->conn, id, count, eos, segs, nsegs, sent, arg);
    if (rc_send < 0 && rc_send != SLUICE_ERR_TOO_LARGE && rc_send != SLUICE_ERR_NOMEM &&
        rc_send != SLUICE_ERR_INVALID) {
        log_warn("rpc: %s: write: %s", rc->conn.peer, sluice_strerror(rc_send));
        conn_close(&rc->conn);
        return SLUICE_ERR_CLOSED;
    }
    return rc_send;
}

int rpc_conn_reply_error(struct rpc_conn *rc, uint64_t id, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* The message is documented as one line; a newline from some nested reason must not break
     * the logs that print it. */
    for (char *p = msg; *p; p++) {
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    }
    Sluice__Error error = SLUICE__ERROR__INIT;
    error.code = code;
    error.message = msg;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_ERROR;
    env.error = &error;
    return rpc_conn_reply(rc, id, &env);
}

/* ---- connections ----------------------------------------------------------------------------- */

static void finish_close(struct rpc_server *srv)
{
    void (*cb)(void *) = srv->close_cb;
    void *user = srv->close_user;
    free(srv);
    if (cb)
        cb(user);
}

static void protocol_error(struct rpc_conn *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void protocol_error(struct rpc_conn *rc, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    log_warn("rpc: %s: %s; closing the connection", rc->conn.peer, why);
    conn_close(&rc->conn);
}

static void on_conn_envelope(struct conn *c, const Sluice__Envelope *env)
{
    struct rpc_conn *rc = (struct rpc_conn *)c;
    struct rpc_server *srv = rc->srv;

    if (!rc->greeted) {
        char msg[128];
        if (conn_check_hello(env, msg, sizeof msg) != 0) {
            log_warn("rpc: %s: %s; closing the connection", c->peer, msg);
            conn_reject(c, SLUICE_ERR_VERSION, msg);
            return;
        }
        rc->greeted = true;
        rc->peer_role = env->hello->role;
        rc->peer_incarnation = env->hello->incarnation;
        if (srv->opts.on_open)
            srv->opts.on_open(srv, rc, srv->opts.user);
        return;
    }
    if (env->body_case == SLUICE__ENVELOPE__BODY_HELLO) {
        protocol_error(rc, "second Hello");
        return;
    }
    if (env->id == 0) {
        protocol_error(rc, "request without an id");
        return;
    }
    srv->opts.on_request(srv, rc, env, srv->opts.user);
}

/* One line per TLS failure, with the peer's address, within a budget per window. */
static void log_tls_failure(struct rpc_server *srv, const char *peer, const char *why)
{
    uint64_t now = uv_now(srv->loop);
    if (now - srv->tls_window_start >= TLS_LOG_WINDOW_MS) {
        if (srv->tls_suppressed > 0)
            log_warn("rpc: %u more TLS failures not logged in the last %d s", srv->tls_suppressed,
                     TLS_LOG_WINDOW_MS / 1000);
        srv->tls_window_start = now;
        srv->tls_logged = srv->tls_suppressed = 0;
    }
    if (srv->tls_logged < TLS_LOG_BURST) {
        srv->tls_logged++;
        log_warn("rpc: %s: %s; closing the connection", peer, why);
    } else {
        srv->tls_suppressed++;
    }
}

static void on_conn_error(struct conn *c, int code, const char *why)
{
    struct rpc_conn *rc = (struct rpc_conn *)c;
    if (code == SLUICE_ERR_AUTH && rc->srv) {
        log_tls_failure(rc->srv, c->peer, why);
        return;
    }
    /* A peer going away is routine; anything else is worth a line at the default level. */
    if (code == UV_EOF || code == UV_ECONNRESET || code == UV_EPIPE)
        log_debug("rpc: %s: %s", c->peer, why);
    else
        log_warn("rpc: %s: %s; closing the connection", c->peer, why);
}

static void on_conn_closed(struct conn *c)
{
    struct rpc_conn *rc = (struct rpc_conn *)c;
    struct rpc_server *srv = rc->srv;

    if (rc->prev)
        rc->prev->next = rc->next;
    else
        srv->conns = rc->next;
    if (rc->next)
        rc->next->prev = rc->prev;
    rc->prev = rc->next = NULL;

    /* on_close pairs with on_open: a connection that never finished its handshake was never
     * announced. Replies from on_close are already refused (the handle is closed). */
    if (rc->greeted && srv->opts.on_close)
        srv->opts.on_close(srv, rc, srv->opts.user);
    rc->srv = NULL;
    rpc_conn_unref(rc);

    if (--srv->handles == 0 && srv->closing)
        finish_close(srv);
}

static const struct conn_ops server_conn_ops = {
    .on_envelope = on_conn_envelope,
    .on_error = on_conn_error,
    .on_closed = on_conn_closed,
};

static void on_connection(uv_stream_t *listener, int status)
{
    struct rpc_server *srv = (struct rpc_server *)listener; /* listener is the first member */
    if (status < 0) {
        log_warn("rpc: accept on %s:%d: %s", srv->host, srv->port, uv_strerror(status));
        return;
    }
    struct rpc_conn *rc = calloc(1, sizeof *rc);
    if (rc == NULL) {
        log_warn("rpc: accept on %s:%d: out of memory", srv->host, srv->port);
        return;
    }
    int err = conn_init(&rc->conn, srv->loop, &server_conn_ops, srv->opts.max_frame,
                        srv->opts.max_pending_write);
    if (err != 0) {
        log_warn("rpc: accept on %s:%d: %s", srv->host, srv->port, uv_strerror(err));
        free(rc);
        return;
    }
    /* From here the handle is open: the conn is on the list and closes through on_conn_closed. */
    rc->srv = srv;
    rc->refs = 1;
    rc->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = rc;
    srv->conns = rc;
    srv->handles++;

    err = uv_accept(listener, (uv_stream_t *)&rc->conn.tcp);
    if (err == 0 && srv->tls) {
        char why[256];
        err = conn_use_tls(&rc->conn, srv->tls, NULL, why, sizeof why);
        if (err != 0) {
            log_warn("rpc: accept on %s:%d: %s", srv->host, srv->port, why);
            conn_close(&rc->conn);
            return;
        }
    }
    if (err == 0)
        err = conn_start(&rc->conn);
    if (err == 0)
        err = conn_send_hello(&rc->conn, srv->opts.role, srv->opts.incarnation);
    if (err != 0) {
        log_warn("rpc: accept on %s:%d: %s", srv->host, srv->port, sluice_strerror(err));
        conn_close(&rc->conn);
    }
}

/* ---- the server ------------------------------------------------------------------------------ */

static void on_listener_closed(uv_handle_t *h)
{
    struct rpc_server *srv = (struct rpc_server *)h;
    if (--srv->handles == 0)
        finish_close(srv);
}

int rpc_server_start(uv_loop_t *loop, const struct rpc_server_opts *opts, struct rpc_server **out,
                     char *err, size_t errlen)
{
    assert(opts->on_request != NULL);
    const char *host = opts->host ? opts->host : "127.0.0.1";
    char addr[300];
    conn_format_address(addr, sizeof addr, host, opts->port);
    if (strlen(host) >= sizeof((struct rpc_server *)0)->host)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "listen on %s: host name too long", addr);
    if (opts->port < 0 || opts->port > 65535)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "listen on %s: port out of range", addr);
    if (sec_has_tls(opts->sec) && !tls_ctx_serves(opts->sec->tls))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "listen on %s: TLS needs this server's --tls-cert and --tls-key", addr);

    char why[256];
    int fd = -1, port = 0;
    int rc = listen_open(host, opts->port, &fd, &port, why, sizeof why);
    if (rc != 0)
        goto fail;
    struct rpc_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL) {
        rc = err_set(why, sizeof why, SLUICE_ERR_NOMEM, "out of memory");
        goto fail_fd;
    }
    srv->loop = loop;
    srv->opts = *opts;
    strcpy(srv->host, host);
    srv->opts.host = srv->host;
    srv->port = port;
    srv->handles = 1;
    srv->tls = sec_has_tls(opts->sec) ? opts->sec->tls : NULL;
    srv->tls_window_start = uv_now(loop);
    int inited;
    rc = listen_adopt(loop, &srv->listener, fd, on_connection, &inited);
    if (rc != 0 && !inited) {
        free(srv);
        return err_set(err, errlen, rc, "listen on %s: %s", addr, uv_strerror(rc));
    }
    if (rc != 0) {
        /* The handle exists now and can only go away through the loop: the caller's next run
         * of the loop frees srv. */
        srv->closing = true;
        uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
        return err_set(err, errlen, rc, "listen on %s: %s", addr, uv_strerror(rc));
    }
    *out = srv;
    return 0;

fail_fd:
    close(fd);
fail:
    return err_set(err, errlen, rc, "listen on %s: %s", addr, why);
}

int rpc_server_port(const struct rpc_server *srv)
{
    return srv->port;
}

const char *rpc_server_host(const struct rpc_server *srv)
{
    return srv->host;
}

void rpc_server_close(struct rpc_server *srv, void (*cb)(void *user), void *user)
{
    assert(!srv->closing);
    srv->closing = true;
    srv->close_cb = cb;
    srv->close_user = user;
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
    for (struct rpc_conn *rc = srv->conns; rc; rc = rc->next)
        conn_close(&rc->conn);
}
