/* The RPC server of rpc_server.h.
 *
 * Happy path: the listening socket is bound and listening before any libuv handle exists, so a
 * failed start leaves nothing to close. Each accepted connection sends our Hello (with the auth
 * flag and nonce of auth.h) at once and runs the handshake of auth.h: the peer's Hello, then,
 * when both sides hold the token, the proofs. Once it is done the connection is open: on_open
 * runs and every Envelope goes to on_request.
 *
 * Failure modes: a handshake that fails (a first frame that is not a Hello of our version, a
 * missing or wrong token) is answered with an Error (id 0) and the connection closes once that
 * is written; before the handshake is done frames are limited to RPC_HANDSHAKE_MAX_FRAME bytes
 * and the whole handshake to the handshake timeout. A second Hello, a request without an id, or
 * a broken frame closes an open connection with one warning line. Lines about connections that
 * have not authenticated are rate-limited per peer address (ratelimit.h), so no peer can flood
 * the log; a failed TLS handshake (opts.sec with TLS: every accepted connection is a TLS server
 * connection, conn.h) is one of those failures. Nothing one connection does affects another.
 *
 * Limits: connections still in their handshake wait on a list in the order of their accept,
 * watched by one timer; one that has sent nothing is due at its accept plus the idle timeout, the
 * others at their accept plus the handshake timeout (the list is at most max_handshakes long, so
 * the timer scans it). A newcomer that finds max_handshakes in their handshake, or
 * max_handshakes_per_address from its own address, closes the oldest of those that has sent
 * nothing (else the oldest): strangers holding idle sockets cannot lock out a peer that
 * authenticates promptly, and an address only ever displaces its own. Beyond max_connections a
 * new connection is accepted into a spare handle and closed at once: libuv stops watching the
 * listener until a pending connection is accepted, so refusing must not depend on an
 * allocation, and the listener never stalls.
 *
 * Lifetimes: an rpc_conn holds one reference for its open handle, dropped in the close callback,
 * plus one per rpc_conn_ref. srv is cleared when the handle closes, so a handler replying late
 * through a reference it kept gets SLUICE_ERR_CLOSED, even after the server has been freed. The
 * server counts its listener, its timer, the spare while it closes and every connection in
 * handles, and is freed when that count reaches zero after rpc_server_close. */
#include "rpc_server.h"
#include "listen.h"
#include "inproc.h"
#include "shm_region.h"

#include "auth.h"
#include "conn.h"
#include "error.h"
#include "log.h"
#include "ratelimit.h"
#include "security.h"
#include "tls.h"
#include "waitlist.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

_Static_assert(CONN_MAX_SEGS == RPC_MAX_SEGS, "rpc_server.h promises what conn.h allows");

/* One line per peer address per minute about connections that failed their handshake. */
#define PEER_LOG_INTERVAL_MS 60000
/* One line per this interval about connections refused by the limits. */
#define REFUSED_LOG_INTERVAL_MS 10000

struct rpc_conn {
    struct conn conn;       /* first member: a struct conn * is a struct rpc_conn * */
    struct rpc_server *srv; /* NULL once the handle has closed */
    struct rpc_conn *prev, *next;
    /* In srv's handshake list while the handshake is under way; since: the accept. */
    struct waitlist_item wait;
    unsigned refs;
    bool greeted; /* the handshake is done: on_open ran */
    struct auth_hs hs;
    Sluice__Role peer_role;
    uint64_t peer_incarnation;
    bool local;      /* an in-process connection (rpc_server_adopt) */
    bool aligned;    /* the peer asked for aligned values (rpc_conn_set_aligned) */
    uint64_t serial; /* the server's count of connections when this one was enlisted */
    /* With on_answered: the requests waiting for their replies, when each arrived. */
    struct rpc_timed *timed;
    unsigned ntimed, cap_timed;
};

struct rpc_timed {
    uint64_t id;
    uint64_t arrived_ns; /* uv_hrtime() */
    int body_case;
};

/* TLS failures logged per window; the rest are counted and summed up in the next line. */

struct rpc_server {
    uv_tcp_t listener;
    uv_loop_t *loop;
    struct rpc_server_opts opts; /* opts.host points at host */
    char host[256];
    int port;
    struct rpc_conn *conns; /* every connection whose handle is open, newest first */
    unsigned nconns;
    /* Connections in their handshake, oldest first; its timer is due when the first runs out. */
    struct waitlist hs;
    unsigned max_conns, max_handshakes, max_handshakes_per_address;
    uint32_t hs_timeout_ms, idle_timeout_ms;
    /* Refused connections are accepted into spare and closed at once (see the top). */
    struct listen_spare spare;
    uint64_t auth_failures, refused, timeouts, evictions;
    uint64_t serials;          /* connections enlisted so far */
    uint64_t refused_unlogged; /* refused since the last line about it */
    uint64_t refused_logged_ms;
    bool refused_ever_logged;
    struct ratelimit peer_log;
    unsigned handles; /* listener, timer, spare while closing, every connection not yet closed */
    bool closing;
    void (*close_cb)(void *user);
    void *close_user;
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
    if (--rc->refs == 0) {
        free(rc->timed);
        free(rc);
    }
}

/* Notes when request id arrived (on_answered). Past RPC_TIMED_MAX waiting on one connection, or
 * out of memory, a request goes untimed. */
static void timed_arrived(struct rpc_conn *rc, uint64_t id, int body_case)
{
    if (rc->ntimed == rc->cap_timed) {
        if (rc->cap_timed >= RPC_TIMED_MAX)
            return;
        unsigned cap = rc->cap_timed ? rc->cap_timed * 2 : 4;
        struct rpc_timed *t = realloc(rc->timed, cap * sizeof *t);
        if (!t)
            return;
        rc->timed = t;
        rc->cap_timed = cap;
    }
    rc->timed[rc->ntimed++] = (struct rpc_timed){id, uv_hrtime(), body_case};
}

/* Request id is answered: reports how long it took, if it was timed. */
static void timed_answered(struct rpc_conn *rc, uint64_t id)
{
    for (unsigned i = 0; i < rc->ntimed; i++) {
        if (rc->timed[i].id != id)
            continue;
        struct rpc_timed t = rc->timed[i];
        rc->timed[i] = rc->timed[--rc->ntimed];
        const struct rpc_server_opts *o = &rc->srv->opts;
        o->on_answered(o->user, t.body_case, (double)(uv_hrtime() - t.arrived_ns) / 1e9);
        return;
    }
}

bool rpc_conn_is_open(const struct rpc_conn *rc)
{
    return rc->srv != NULL && !rc->conn.closing && !rc->conn.draining;
}

Sluice__Role rpc_conn_peer_role(const struct rpc_conn *rc)
{
    return rc->peer_role;
}

uint64_t rpc_conn_serial(const struct rpc_conn *rc)
{
    return rc->serial;
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
    if (rc->ntimed)
        timed_answered(rc, id);
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
    if (rc->ntimed)
        timed_answered(rc, id);
    int rc_send = conn_send_elements(&rc->conn, id, count, eos, segs, nsegs, sent, arg);
    if (rc_send < 0 && rc_send != SLUICE_ERR_TOO_LARGE && rc_send != SLUICE_ERR_NOMEM &&
        rc_send != SLUICE_ERR_INVALID) {
        log_warn("rpc: %s: write: %s", rc->conn.peer, sluice_strerror(rc_send));
        conn_close(&rc->conn);
        return SLUICE_ERR_CLOSED;
    }
    return rc_send;
}

/* The Error reply of rpc_conn_reply_error and rpc_conn_reply_not_leader; leader NULL leaves
 * Error.leader unset. */
static int reply_error_v(struct rpc_conn *rc, uint64_t id, int code, const char *leader,
                         const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));
static int reply_error_v(struct rpc_conn *rc, uint64_t id, int code, const char *leader,
                         const char *fmt, va_list ap)
{
    char msg[SLUICE_ERRMSG_SIZE];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* The message is documented as one line; a newline from some nested reason must not break
     * the logs that print it. */
    for (char *p = msg; *p; p++) {
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    }
    Sluice__Error error = SLUICE__ERROR__INIT;
    error.code = code;
    error.message = msg;
    if (leader)
        error.leader = (char *)leader;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_ERROR;
    env.error = &error;
    return rpc_conn_reply(rc, id, &env);
}

int rpc_conn_reply_error(struct rpc_conn *rc, uint64_t id, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc_send = reply_error_v(rc, id, code, NULL, fmt, ap);
    va_end(ap);
    return rc_send;
}

int rpc_conn_reply_not_leader(struct rpc_conn *rc, uint64_t id, const char *leader, const char *fmt,
                              ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc_send = reply_error_v(rc, id, SLUICE_ERR_NOT_LEADER, leader ? leader : "", fmt, ap);
    va_end(ap);
    return rc_send;
}

/* ---- connections ----------------------------------------------------------------------------- */

static void server_release(struct rpc_server *srv)
{
    assert(srv->handles > 0);
    if (--srv->handles > 0 || !srv->closing)
        return;
    void (*cb)(void *) = srv->close_cb;
    void *user = srv->close_user;
    free(srv);
    if (cb)
        cb(user);
}

/* Logs a line about a peer that has not authenticated, at most once per address per minute. */
static void peer_log(struct rpc_server *srv, const struct rpc_conn *rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void peer_log(struct rpc_server *srv, const struct rpc_conn *rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ratelimit_vwarn(&srv->peer_log, uv_now(srv->loop), "rpc: ", rc->conn.peer, fmt, ap);
    va_end(ap);
}

static void protocol_error(struct rpc_conn *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void protocol_error(struct rpc_conn *rc, const char *fmt, ...)
{
    char why[SLUICE_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    log_warn("rpc: %s: %s; closing the connection", rc->conn.peer, why);
    conn_close(&rc->conn);
}

static struct rpc_conn *waiting_conn(const struct waitlist_item *w)
{
    return (struct rpc_conn *)((char *)w - offsetof(struct rpc_conn, wait));
}

/* Takes rc off the handshake list. */
static void hs_remove(struct rpc_server *srv, struct rpc_conn *rc)
{
    waitlist_remove(&srv->hs, &rc->wait);
}

/* When a connection's handshake runs out: sooner while it has sent nothing at all. */
static uint64_t hs_deadline(struct waitlist *wl, const struct waitlist_item *w)
{
    const struct rpc_server *srv =
        (const struct rpc_server *)((char *)wl - offsetof(struct rpc_server, hs));
    const struct rpc_conn *rc = waiting_conn(w);
    return w->since + (rc->conn.heard ? srv->hs_timeout_ms : srv->idle_timeout_ms);
}

/* The length of the address part of a peer name "IP:PORT" ("[V6]:PORT"; a name without a port,
 * such as "in-process", is all address). */
static size_t peer_addr_len(const char *peer)
{
    const char *colon = strrchr(peer, ':');
    return colon ? (size_t)(colon - peer) : strlen(peer);
}

static bool same_addr(const char *a, size_t alen, const char *b)
{
    return peer_addr_len(b) == alen && memcmp(a, b, alen) == 0;
}

/* Whether rc has sent nothing: not a byte read, and none waiting in its socket (one the loop has
 * not read yet, in this iteration of a busy loop, counts as sent). */
static bool hs_silent(struct rpc_conn *rc)
{
    if (rc->conn.heard)
        return false;
    uv_os_fd_t fd;
    int unread = 0;
    if (uv_fileno((const uv_handle_t *)&rc->conn.tcp, &fd) == 0 &&
        ioctl(fd, FIONREAD, &unread) == 0 && unread > 0)
        rc->conn.heard = true;
    return !rc->conn.heard;
}

/* The oldest connection in the handshake list from address addr (alen bytes; NULL: any) that has
 * sent nothing, else the oldest from it; NULL when there is none. */
static struct rpc_conn *hs_oldest(struct rpc_server *srv, const char *addr, size_t alen)
{
    struct rpc_conn *oldest = NULL;
    for (struct waitlist_item *w = srv->hs.head; w; w = w->next) {
        struct rpc_conn *rc = waiting_conn(w);
        if (addr && !same_addr(addr, alen, rc->conn.peer))
            continue;
        if (oldest == NULL)
            oldest = rc;
        if (hs_silent(rc))
            return rc;
    }
    return oldest;
}

/* Makes room for newcomer in the handshake list: when the list is full, or holds
 * max_handshakes_per_address connections from newcomer's address, closes the oldest of those
 * (the whole list's, or that address's) that has sent nothing, else the oldest of them. */
static void hs_make_room(struct rpc_server *srv, const struct rpc_conn *newcomer)
{
    const char *addr = newcomer->conn.peer;
    size_t alen = peer_addr_len(addr);
    unsigned same = 0;
    for (struct waitlist_item *w = srv->hs.head; w; w = w->next)
        same += same_addr(addr, alen, waiting_conn(w)->conn.peer);
    struct rpc_conn *victim = NULL;
    if (same >= srv->max_handshakes_per_address)
        victim = hs_oldest(srv, addr, alen);
    else if (srv->hs.n >= srv->max_handshakes)
        victim = hs_oldest(srv, NULL, 0);
    if (victim == NULL)
        return;
    hs_remove(srv, victim);
    srv->evictions++;
    peer_log(srv, victim, "closed in its handshake (%s) to make room for a newer connection",
             victim->conn.heard ? "incomplete" : "silent");
    conn_close(&victim->conn);
}

/* Puts rc, whose peer name is set, at the end of the handshake list, making room first. */
static void hs_admit(struct rpc_server *srv, struct rpc_conn *rc)
{
    hs_make_room(srv, rc);
    waitlist_add(&srv->hs, &rc->wait);
}

/* A connection's handshake ran out (it is off the list already). */
static void hs_expired(struct waitlist *wl, struct waitlist_item *w)
{
    struct rpc_server *srv = (struct rpc_server *)((char *)wl - offsetof(struct rpc_server, hs));
    struct rpc_conn *rc = waiting_conn(w);
    srv->timeouts++;
    if (rc->conn.heard)
        peer_log(srv, rc, "no handshake within %" PRIu32 " ms; closing the connection",
                 srv->hs_timeout_ms);
    else
        peer_log(srv, rc, "nothing received within %" PRIu32 " ms; closing the connection",
                 srv->idle_timeout_ms);
    conn_close(&rc->conn);
}

/* The handshake is done: the connection is open to requests. */
static void open_conn(struct rpc_server *srv, struct rpc_conn *rc)
{
    hs_remove(srv, rc);
    rc->greeted = true;
    rc->peer_role = (Sluice__Role)rc->hs.peer_role;
    rc->peer_incarnation = rc->hs.peer_incarnation;
    conn_set_max_frame(&rc->conn, 0);
    if (srv->opts.on_open)
        srv->opts.on_open(srv, rc, srv->opts.user);
}

static void handshake_failed(struct rpc_server *srv, struct rpc_conn *rc, int code, const char *msg,
                             const char *peer_msg)
{
    hs_remove(srv, rc);
    if (code == SLUICE_ERR_AUTH)
        srv->auth_failures++;
    peer_log(srv, rc, "%s; closing the connection", msg);
    conn_reject(&rc->conn, code, peer_msg ? peer_msg : msg);
}

static void on_conn_envelope(struct conn *c, const Sluice__Envelope *env)
{
    struct rpc_conn *rc = (struct rpc_conn *)c;
    struct rpc_server *srv = rc->srv;

    if (!rc->greeted) {
        char msg[SLUICE_ERRMSG_SIZE];
        const char *peer_msg = NULL;
        uint8_t mac[AUTH_MAC_LEN];
        int step = auth_hs_step(&rc->hs, env, mac, msg, sizeof msg, &peer_msg);
        if (step == AUTH_HS_OPEN) {
            open_conn(srv, rc);
        } else if (step == AUTH_HS_SEND) {
            int err = conn_send_proof(c, mac);
            if (err != 0) {
                log_warn("rpc: %s: write: %s", c->peer, sluice_strerror(err));
                conn_close(c);
            }
        } else {
            handshake_failed(srv, rc, step, msg, peer_msg);
        }
        return;
    }
    if (env->body_case == SLUICE__ENVELOPE__BODY_HELLO) {
        protocol_error(rc, "second Hello");
        return;
    }
    if (env->body_case == SLUICE__ENVELOPE__BODY_AUTH_PROOF) {
        protocol_error(rc, "AuthProof after the handshake");
        return;
    }
    if (env->id == 0) {
        protocol_error(rc, "request without an id");
        return;
    }
    if (srv->opts.on_answered)
        timed_arrived(rc, env->id, (int)env->body_case);
    srv->opts.on_request(srv, rc, env, srv->opts.user);
}

static void on_conn_error(struct conn *c, int code, const char *why)
{
    struct rpc_conn *rc = (struct rpc_conn *)c;
    struct rpc_server *srv = rc->srv;
    /* A peer going away is routine; anything else is worth a line at the default level, rate
     * limited for a peer that has not authenticated. A TLS failure counts as an authentication
     * failure. */
    if (code == SLUICE_ERR_AUTH && !rc->greeted)
        srv->auth_failures++;
    if (code == UV_EOF || code == UV_ECONNRESET || code == UV_EPIPE)
        log_debug("rpc: %s: %s", c->peer, why);
    else if (!rc->greeted)
        peer_log(srv, rc, "%s; closing the connection", why);
    else
        log_warn("rpc: %s: %s; closing the connection", c->peer, why);
}

static void on_conn_closed(struct conn *c)
{
    struct rpc_conn *rc = (struct rpc_conn *)c;
    struct rpc_server *srv = rc->srv;

    hs_remove(srv, rc);
    if (rc->prev)
        rc->prev->next = rc->next;
    else
        srv->conns = rc->next;
    if (rc->next)
        rc->next->prev = rc->prev;
    rc->prev = rc->next = NULL;
    srv->nconns--;

    /* on_close pairs with on_open: a connection that never finished its handshake was never
     * announced. Replies from on_close are already refused (the handle is closed). */
    if (rc->greeted && srv->opts.on_close)
        srv->opts.on_close(srv, rc, srv->opts.user);
    rc->srv = NULL;
    rpc_conn_unref(rc);
    server_release(srv);
}

static const struct conn_ops server_conn_ops = {
    .on_envelope = on_conn_envelope,
    .on_error = on_conn_error,
    .on_closed = on_conn_closed,
};

static void on_connection(uv_stream_t *listener, int status);

static void on_spare_closed(uv_handle_t *h)
{
    struct rpc_server *srv = h->data;
    /* The listener is still open unless the server is closing. */
    if (listen_spare_closed(&srv->spare, !srv->closing))
        on_connection((uv_stream_t *)&srv->listener, 0);
    server_release(srv);
}

/* Accepts the pending connection into the spare handle and closes it straight away. why names
 * the limit, for the log line (at most one per REFUSED_LOG_INTERVAL_MS). */
static void refuse(struct rpc_server *srv, const char *why)
{
    if (!listen_spare_refuse(&srv->spare, srv->loop, (uv_stream_t *)&srv->listener, srv,
                             on_spare_closed))
        return;
    srv->handles++;
    srv->refused++;
    srv->refused_unlogged++;
    uint64_t now = uv_now(srv->loop);
    if (srv->refused_ever_logged && now - srv->refused_logged_ms < REFUSED_LOG_INTERVAL_MS)
        return;
    log_warn("rpc: %s:%d: refused %" PRIu64 " connection(s): %s (open: %u, in handshake: %u)",
             srv->host, srv->port, srv->refused_unlogged, why, srv->nconns, srv->hs.n);
    srv->refused_unlogged = 0;
    srv->refused_logged_ms = now;
    srv->refused_ever_logged = true;
}

/* Puts a new connection on the server's list (from here it closes through on_conn_closed) and
 * starts its handshake with nonce. */
static void conn_enlist(struct rpc_server *srv, struct rpc_conn *rc, const uint8_t *nonce)
{
    rc->srv = srv;
    rc->refs = 1;
    rc->serial = ++srv->serials;
    rc->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = rc;
    srv->conns = rc;
    srv->nconns++;
    srv->handles++;
    const struct security_ctx *sec = srv->opts.sec;
    auth_hs_init(&rc->hs, AUTH_SERVER, (uint32_t)srv->opts.role, sec ? sec->token : NULL,
                 sec ? sec->token_len : 0, nonce);
    conn_set_max_frame(&rc->conn, RPC_HANDSHAKE_MAX_FRAME);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct rpc_server *srv = (struct rpc_server *)listener; /* listener is the first member */
    if (status < 0) {
        log_warn("rpc: accept on %s:%d: %s", srv->host, srv->port, uv_strerror(status));
        return;
    }
    if (srv->nconns >= srv->max_conns) {
        refuse(srv, "--max-connections reached");
        return;
    }
    /* Without a token the nonce is never sent, and OpenSSL's generator need not be woken. */
    uint8_t nonce[AUTH_NONCE_LEN] = {0};
    struct rpc_conn *rc = calloc(1, sizeof *rc);
    if (rc == NULL || (security_has_token(srv->opts.sec) && auth_nonce(nonce) != 0)) {
        log_warn("rpc: accept on %s:%d: %s", srv->host, srv->port,
                 rc ? "no random nonce" : "out of memory");
        free(rc);
        refuse(srv, "out of resources");
        return;
    }
    int err = conn_init(&rc->conn, srv->loop, &server_conn_ops, srv->opts.max_frame,
                        srv->opts.max_pending_write);
    if (err != 0) {
        log_warn("rpc: accept on %s:%d: %s", srv->host, srv->port, uv_strerror(err));
        free(rc);
        refuse(srv, "out of resources");
        return;
    }
    /* From here the handle is open: the conn is on the list and closes through on_conn_closed. */
    conn_enlist(srv, rc, nonce);

    err = uv_accept(listener, (uv_stream_t *)&rc->conn.tcp);
    if (err == 0 && security_has_tls(srv->opts.sec)) {
        char why[SLUICE_ERRMSG_SIZE];
        err = conn_use_tls(&rc->conn, srv->opts.sec->tls, NULL, why, sizeof why);
        if (err != 0) {
            log_warn("rpc: accept on %s:%d: %s", srv->host, srv->port, why);
            conn_close(&rc->conn);
            return;
        }
    }
    if (err == 0)
        err = conn_start(&rc->conn);
    if (err == 0) {
        hs_admit(srv, rc); /* the peer's address is known now */
        err = conn_send_hello(&rc->conn, srv->opts.role, srv->opts.incarnation, &rc->hs);
    }
    if (err != 0) {
        log_debug("rpc: accept on %s:%d: %s", srv->host, srv->port, sluice_strerror(err));
        conn_close(&rc->conn);
    }
}

/* rpc_server_adopt before the connection exists: fails with code, releasing link and shm. */
static int adopt_refused(struct inproc_link *link, struct shm_region *shm, int code)
{
    inproc_link_unref(link);
    shm_region_unref(shm);
    return code;
}

int rpc_server_adopt(struct rpc_server *srv, uv_os_sock_t fd, struct inproc_link *link,
                     struct shm_region *shm)
{
    if (srv->closing)
        return adopt_refused(link, shm, SLUICE_ERR_CLOSED);
    if (srv->nconns >= srv->max_conns)
        return adopt_refused(link, shm, SLUICE_ERR_LIMIT);
    uint8_t nonce[AUTH_NONCE_LEN] = {0};
    struct rpc_conn *rc = calloc(1, sizeof *rc);
    if (rc == NULL)
        return adopt_refused(link, shm, SLUICE_ERR_NOMEM);
    if (security_has_token(srv->opts.sec) && auth_nonce(nonce) != 0) {
        free(rc);
        return adopt_refused(link, shm, SLUICE_ERR_NOMEM);
    }
    int err = conn_init(&rc->conn, srv->loop, &server_conn_ops, srv->opts.max_frame,
                        srv->opts.max_pending_write);
    if (err != 0) {
        free(rc);
        return adopt_refused(link, shm, err);
    }
    /* From here the handle is open: the conn is on the list and closes through on_conn_closed,
     * which also closes fd once it is the handle's. */
    rc->conn.local = true;
    rc->conn.link = link;
    rc->conn.shm = shm;
    rc->local = shm == NULL;
    snprintf(rc->conn.peer, sizeof rc->conn.peer, "%s", shm ? "shared memory" : "in-process");
    conn_enlist(srv, rc, nonce);
    hs_admit(srv, rc);
    err = uv_tcp_open(&rc->conn.tcp, fd);
    if (err != 0) {
        /* The handle never took fd: it is still the caller's, and the conn closes empty (with
         * the link, which it owns from conn_init on). */
        conn_close(&rc->conn);
        return err;
    }
    if (security_has_tls(srv->opts.sec)) {
        char why[SLUICE_ERRMSG_SIZE];
        err = conn_use_tls(&rc->conn, srv->opts.sec->tls, NULL, why, sizeof why);
        if (err != 0)
            log_warn("rpc: in-process connection: %s", why);
    }
    if (err == 0)
        err = conn_start(&rc->conn);
    if (err == 0)
        err = conn_send_hello(&rc->conn, srv->opts.role, srv->opts.incarnation, &rc->hs);
    if (err != 0) {
        log_debug("rpc: in-process connection: %s", sluice_strerror(err));
        conn_close(&rc->conn);
    }
    return 0;
}

bool rpc_conn_is_local(const struct rpc_conn *rc)
{
    return rc->local;
}

bool rpc_conn_is_shm(const struct rpc_conn *rc)
{
    return rc->conn.shm != NULL;
}

void rpc_conn_set_aligned(struct rpc_conn *rc)
{
    rc->aligned = true;
}

bool rpc_conn_aligned(const struct rpc_conn *rc)
{
    return rc->aligned;
}

struct shm_region *rpc_conn_shm_region(const struct rpc_conn *rc)
{
    return rc->conn.shm;
}

struct shm_region *rpc_conn_closed_region(const struct rpc_conn *rc)
{
    return rc->conn.shm_closed;
}

void rpc_conn_shm_sent(const struct rpc_conn *rc, uint64_t *elements, uint64_t *bytes,
                       uint64_t *inplace)
{
    *inplace = rc->conn.shm_inplace_bytes;
    *elements = rc->conn.shm_sent;
    *bytes = rc->conn.shm_sent_bytes;
}

/* ---- the server ------------------------------------------------------------------------------ */

static void on_handle_closed(uv_handle_t *h)
{
    server_release(h->data);
}

/* max, lowered to what the open-file limit leaves after RPC_FD_RESERVE descriptors. The soft
 * limit is raised first, as far as max needs and the hard limit allows (a common soft limit is
 * 1024, far below what a server with a thousand peers needs, while the hard limit is high). */
static unsigned cap_to_fd_limit(unsigned max)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return max;
    rlim_t want = (rlim_t)max + RPC_FD_RESERVE;
    if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = rl;
        raised.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            rl = raised;
    }
    rlim_t room = rl.rlim_cur > 2 * RPC_FD_RESERVE ? rl.rlim_cur - RPC_FD_RESERVE : rl.rlim_cur / 2;
    if (room < 1)
        room = 1;
    if ((rlim_t)max <= room)
        return max;
    log_warn("rpc: max connections lowered from %u to %llu: the open-file limit is %llu "
             "(raise it with ulimit -n)",
             max, (unsigned long long)room, (unsigned long long)rl.rlim_cur);
    return (unsigned)room;
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
    if (security_has_tls(opts->sec) && !tls_ctx_serves(opts->sec->tls))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "listen on %s: TLS needs this server's --tls-cert and --tls-key", addr);

    char why[SLUICE_ERRMSG_SIZE];
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
    /* 0 is the default, never "unbounded": a peer that does not read its replies must not
     * make the server buffer without end. */
    if (srv->opts.max_pending_write == 0)
        srv->opts.max_pending_write = RPC_DEFAULT_MAX_PENDING_WRITE;
    srv->hs_timeout_ms =
        opts->handshake_timeout_ms ? opts->handshake_timeout_ms : RPC_DEFAULT_HANDSHAKE_TIMEOUT_MS;
    srv->max_conns = cap_to_fd_limit(opts->max_connections ? opts->max_connections
                                                           : RPC_DEFAULT_MAX_CONNECTIONS);
    srv->max_handshakes = opts->max_handshakes ? opts->max_handshakes : RPC_DEFAULT_MAX_HANDSHAKES;
    srv->max_handshakes_per_address = opts->max_handshakes_per_address
                                          ? opts->max_handshakes_per_address
                                          : RPC_DEFAULT_MAX_HANDSHAKES_PER_ADDRESS;
    if (srv->max_handshakes_per_address > srv->max_handshakes)
        srv->max_handshakes_per_address = srv->max_handshakes;
    srv->idle_timeout_ms = srv->hs_timeout_ms < RPC_IDLE_HANDSHAKE_TIMEOUT_MS
                               ? srv->hs_timeout_ms
                               : RPC_IDLE_HANDSHAKE_TIMEOUT_MS;
    ratelimit_init(&srv->peer_log, PEER_LOG_INTERVAL_MS);
    srv->port = port;
    srv->handles = 1;
    int inited;
    rc = listen_adopt(loop, &srv->listener, fd, on_connection, &inited);
    if (rc != 0 && !inited) {
        free(srv);
        return err_set(err, errlen, rc, "listen on %s: %s", addr, uv_strerror(rc));
    }
    srv->listener.data = srv;
    if (rc != 0) {
        /* The handle exists now and can only go away through the loop: the caller's next run
         * of the loop frees srv. */
        srv->closing = true;
        uv_close((uv_handle_t *)&srv->listener, on_handle_closed);
        return err_set(err, errlen, rc, "listen on %s: %s", addr, uv_strerror(rc));
    }
    waitlist_init(loop, &srv->hs, srv->idle_timeout_ms, hs_deadline, hs_expired);
    srv->hs.timer.data = srv;
    srv->handles++;
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

uint64_t rpc_server_auth_failures(const struct rpc_server *srv)
{
    return srv->auth_failures;
}

uint64_t rpc_server_refused(const struct rpc_server *srv)
{
    return srv->refused;
}

uint64_t rpc_server_handshake_timeouts(const struct rpc_server *srv)
{
    return srv->timeouts;
}

uint64_t rpc_server_handshake_evictions(const struct rpc_server *srv)
{
    return srv->evictions;
}

uint32_t rpc_server_idle_timeout_ms(const struct rpc_server *srv)
{
    return srv->idle_timeout_ms;
}

unsigned rpc_server_max_connections(const struct rpc_server *srv)
{
    return srv->max_conns;
}

void rpc_server_close(struct rpc_server *srv, void (*cb)(void *user), void *user)
{
    assert(!srv->closing);
    srv->closing = true;
    srv->close_cb = cb;
    srv->close_user = user;
    uv_close((uv_handle_t *)&srv->listener, on_handle_closed);
    uv_close((uv_handle_t *)&srv->hs.timer, on_handle_closed);
    for (struct rpc_conn *rc = srv->conns; rc; rc = rc->next)
        conn_close(&rc->conn);
}
