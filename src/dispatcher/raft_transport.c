/* The Raft transport of raft_transport.h.
 *
 * Happy path. Accepting: the connection gets a peer object with a raft_malloc'd TCP handle and a
 * deadline timer; both ends send their Hello at once; every frame read goes through the pure
 * handshake of raft_handshake.h and what it asks is written; on its RaftPeerHello the acceptor
 * stops reading, writes the welcome and, once that write is done, hands the handle to Raft's
 * accept_cb. Dialling: numeric addresses are parsed, others resolved with uv_getaddrinfo; once
 * connected the same handshake runs and the welcome hands the handle to the connect cb.
 *
 * Failure modes: any failure (a refused handshake, a timeout, a read or write error, a byte after
 * the handshake) closes the peer's handles; an acceptor that has an Error for the peer writes it
 * first. A peer object is freed once its handles are closed, its writes done and its resolution
 * over; a dialler's connect cb runs then, with RAFT_NOCONNECTION, or RAFT_CANCELED when close()
 * cancelled it. close() closes the listener and every peer, plus one handle of its own so that
 * its callback never runs from inside close(); the callback runs when all of them are gone.
 *
 * TLS: the session sits under the same handshake (its ciphertext is written as the session
 * produces it, its plaintext fed to the frame decoder); our Hello goes once the TLS handshake is
 * done. At the handover the peer object stays, as the relay between Raft's end of a socket pair
 * and the session, until either side closes. */
#include "dispatcher/raft_transport.h"

#include "dispatcher/raft_handshake.h"

#include "common/error.h"
#include "common/frame.h"
#include "common/listen.h"
#include "common/log.h"
#include "common/ratelimit.h"
#include "common/security.h"
#include "common/tls.h"
#include "wire.pb-c.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PEER_LOG_INTERVAL_MS 60000
#define READ_CHUNK 4096
/* TLS relay: the read buffer, the plaintext block of one write to Raft's end, and the backlog of
 * either direction beyond which the other side stops being read (resumed below half). */
#define RELAY_CHUNK (64u << 10)
#define RELAY_PLAIN (16u << 10)
#define RELAY_HIGH RAFT_TRANSPORT_RELAY_HIGH

struct rt;

struct rt_peer {
    struct rt *rt;
    struct rt_peer *prev, *next;
    bool dialler;
    uv_tcp_t *tcp; /* raft_malloc'd; NULL before connecting and once handed over */
    uv_timer_t timer;
    uv_getaddrinfo_t gai;
    struct addrinfo *ai, *ai_next; /* dialler: the addresses resolved, and the next to try */
    uv_connect_t connect;
    struct raft_uv_connect *req; /* dialler: Raft's request */
    /* Dialler of a probe (raft_transport_probe): its callback, run once from peer_maybe_free. */
    raft_transport_probe_cb probe_cb;
    void *probe_user;
    bool probe;
    raft_id id;                        /* dialler: the server dialled */
    char address[RAFT_HS_ADDRESS_MAX]; /* dialler: where to; for logs */
    char host[RAFT_HS_ADDRESS_MAX];    /* dialler: the host part, which TLS verifies */
    char peer[64];                     /* "IP:PORT" for logs */
    struct raft_hs hs;
    struct frame_decoder dec;
    uint8_t *rbuf; /* READ_CHUNK bytes; RELAY_CHUNK once relaying */
    size_t rbuf_len;
    size_t received;        /* plaintext bytes of the handshake */
    size_t cipher_received; /* TLS: ciphertext bytes before the relay */
    unsigned writes;        /* write requests whose callback has not run */
    unsigned closes;        /* handles whose close callback has not run */
    bool resolving;         /* a uv_getaddrinfo request is outstanding */
    bool connecting;        /* a uv_tcp_connect request is outstanding */
    bool connected;         /* dialler: TCP is up */
    bool counted;           /* acceptor: counts in rt->incoming */
    bool done;              /* closing or handed over: nothing more happens but the frees */
    bool open;              /* the handshake succeeded; handed over once the writes are done */
    bool rejecting;         /* an Error for the peer is being written; close after it */
    int status;             /* the dialler's connect cb status */
    /* TLS: the session (NULL for plain TCP). Once the handshake is done, Raft gets one end of a
     * socket pair and the peer relays between the other end (pipe) and the TLS connection. */
    struct tls_session *tls;
    bool relaying;
    bool pipe_open;               /* pipe initialized (closed by peer_close) */
    bool tcp_paused, pipe_paused; /* reading stopped by the other side's backlog */
    bool draining;                /* one side ended: close once the writes to both are done */
    size_t tcp_pending, pipe_pending;
    uv_pipe_t pipe;
};

struct rt {
    struct raft_uv_transport *t;
    uv_loop_t *loop;
    const struct security_ctx *sec;
    char *cluster;
    char *bind_address;
    uint32_t timeout_ms;
    unsigned max_handshakes;
    raft_id id;
    char address[RAFT_HS_ADDRESS_MAX];
    uint64_t incarnation;
    uv_tcp_t listener;
    bool listening; /* listener initialized (and counted in handles) */
    int port;
    struct listen_spare spare;
    raft_uv_accept_cb accept_cb; /* NULL while listening early, before Raft started */
    void *user;
    uint64_t (*last_index)(void *user);
    bool (*rejoining)(void *user);
    void (*rejoin)(void *user, uint64_t id);
    struct rt_peer *peers;
    unsigned incoming; /* acceptor handshakes in progress */
    unsigned handles;  /* listener, spare while busy, closer */
    uv_timer_t closer;
    bool closing;
    raft_uv_transport_close_cb close_cb;
    struct ratelimit log;
    uint64_t refused;
};

struct rt_write {
    uv_write_t req;
    struct rt_peer *p;
    size_t len;
    bool to_pipe; /* a relayed write to Raft's end, not to the TCP connection */
    uint8_t data[];
};

/* ---- logging and teardown ---------------------------------------------------------------- */

static void peer_log(struct rt_peer *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void peer_log(struct rt_peer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ratelimit_vwarn(&p->rt->log, uv_now(p->rt->loop), "raft: ", p->peer, fmt, ap);
    va_end(ap);
}

static void rt_maybe_closed(struct rt *rt)
{
    if (!rt->closing || rt->handles > 0 || rt->peers != NULL || rt->close_cb == NULL)
        return;
    raft_uv_transport_close_cb cb = rt->close_cb;
    rt->close_cb = NULL;
    cb(rt->t);
}

static void peer_maybe_free(struct rt_peer *p)
{
    if (p->closes > 0 || p->writes > 0 || p->resolving || p->connecting || p->relaying)
        return;
    struct rt *rt = p->rt;
    if (p->prev)
        p->prev->next = p->next;
    else
        rt->peers = p->next;
    if (p->next)
        p->next->prev = p->prev;
    if (p->dialler && p->req) {
        struct raft_uv_connect *req = p->req;
        p->req = NULL;
        req->cb(req, NULL, p->status);
    }
    if (p->probe_cb) {
        raft_transport_probe_cb cb = p->probe_cb;
        p->probe_cb = NULL;
        cb(p->probe_user, (uint64_t)p->id, p->status, p->hs.last_index);
    }
    frame_decoder_release(&p->dec);
    if (p->ai)
        uv_freeaddrinfo(p->ai);
    if (p->tls)
        tls_session_free(p->tls);
    free(p->rbuf);
    free(p);
    rt_maybe_closed(rt);
}

static void on_tcp_closed(uv_handle_t *h)
{
    struct rt_peer *p = h->data;
    raft_free(h);
    p->closes--;
    peer_maybe_free(p);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct rt_peer *p = h->data;
    p->closes--;
    peer_maybe_free(p);
}

static void peer_uncount(struct rt_peer *p)
{
    if (p->counted) {
        p->counted = false;
        p->rt->incoming--;
    }
}

/* Closes everything p holds; the connect cb (a dialler's) runs with status once it is all gone.
 * A relay closes both its ends: Raft then reads EOF on its own. */
static void peer_close(struct rt_peer *p, int status)
{
    if (p->done && !p->relaying)
        return;
    bool relay = p->relaying;
    p->relaying = false;
    p->done = true;
    p->status = status;
    peer_uncount(p);
    if (p->tcp) {
        uv_read_stop((uv_stream_t *)p->tcp);
        p->tcp->data = p;
        uv_close((uv_handle_t *)p->tcp, on_tcp_closed);
        p->tcp = NULL;
        p->closes++;
    }
    if (p->pipe_open) {
        p->pipe_open = false;
        uv_close((uv_handle_t *)&p->pipe, on_handle_closed);
        p->closes++;
    }
    if (!relay) { /* a relay's timer closed at its handover */
        uv_close((uv_handle_t *)&p->timer, on_handle_closed);
        p->closes++;
    }
    if (p->resolving)
        (void)uv_cancel((uv_req_t *)&p->gai);
    peer_maybe_free(p);
}

/* A handshake failed: one rate-limited line, then the peer closes. */
static void peer_fail(struct rt_peer *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void peer_fail(struct rt_peer *p, const char *fmt, ...)
{
    if (p->done)
        return;
    char why[SLUICE_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (p->probe) {
        /* A peer that does not answer a probe yet is expected while a group starts. */
        log_debug("raft: probe of %s: %s", p->address, why);
    } else {
        p->rt->refused++;
        peer_log(p, "%s; closing the connection", why);
    }
    peer_close(p, RAFT_NOCONNECTION);
}

/* ---- writing ------------------------------------------------------------------------------ */

static void peer_maybe_hand_over(struct rt_peer *p);
static void relay_resume(struct rt_peer *p);

static void on_write(uv_write_t *req, int status)
{
    struct rt_write *w = (struct rt_write *)req;
    struct rt_peer *p = w->p;
    bool to_pipe = w->to_pipe;
    if (to_pipe)
        p->pipe_pending -= w->len;
    else
        p->tcp_pending -= w->len;
    free(w);
    p->writes--;
    if (p->relaying) {
        if (status < 0) {
            log_debug("raft: %s: relay: write: %s", p->peer, uv_strerror(status));
            peer_close(p, RAFT_NOCONNECTION);
        } else if (p->draining) {
            if (p->tcp_pending == 0 && p->pipe_pending == 0)
                peer_close(p, RAFT_NOCONNECTION);
        } else {
            relay_resume(p);
        }
        return;
    }
    if (p->done) {
        peer_maybe_free(p);
        return;
    }
    if (status < 0) {
        peer_fail(p, "write: %s", uv_strerror(status));
        return;
    }
    if (p->rejecting) {
        if (p->writes == 0)
            peer_close(p, RAFT_NOCONNECTION);
        return;
    }
    peer_maybe_hand_over(p);
}

/* Writes len bytes of data (copied) to the TCP connection, or to the pipe. */
static int peer_write(struct rt_peer *p, const uint8_t *data, size_t len, bool to_pipe)
{
    uv_stream_t *s = to_pipe ? (uv_stream_t *)&p->pipe : (uv_stream_t *)p->tcp;
    if (s == NULL || (to_pipe && !p->pipe_open))
        return SLUICE_ERR_CLOSED;
    struct rt_write *w = malloc(sizeof *w + len);
    if (w == NULL)
        return SLUICE_ERR_NOMEM;
    w->p = p;
    w->len = len;
    w->to_pipe = to_pipe;
    memcpy(w->data, data, len);
    uv_buf_t buf = uv_buf_init((char *)w->data, (unsigned)len);
    int rc = uv_write(&w->req, s, &buf, 1, on_write);
    if (rc != 0) {
        free(w);
        return rc;
    }
    p->writes++;
    if (to_pipe)
        p->pipe_pending += len;
    else
        p->tcp_pending += len;
    return 0;
}

/* TLS: the session's ciphertext goes to the TCP connection as it is produced. */
static int tls_sink(void *arg, const uint8_t *data, size_t len)
{
    struct rt_peer *p = arg;
    if (p->tcp == NULL)
        return 0; /* closing: nobody will read it */
    /* A write refused here has no callback: the session's output would have a hole, so the call
     * that produced it fails and the peer closes. */
    return peer_write(p, data, len, false) == 0 ? 0 : -1;
}

/* Writes bytes of this side's protocol (plaintext), through TLS when there is a session. */
static int peer_write_plain(struct rt_peer *p, const uint8_t *data, size_t len)
{
    if (p->tls == NULL)
        return peer_write(p, data, len, false);
    char why[256];
    return tls_session_write(p->tls, data, len, why, sizeof why);
}

static int peer_send(struct rt_peer *p, const Sluice__Envelope *env)
{
    size_t len = sluice__envelope__get_packed_size(env);
    if (len == 0 || len > RAFT_TRANSPORT_MAX_FRAME)
        return SLUICE_ERR_TOO_LARGE;
    uint8_t *frame = malloc(FRAME_HEADER_SIZE + len);
    if (frame == NULL)
        return SLUICE_ERR_NOMEM;
    frame_write_header(frame, (uint32_t)len);
    sluice__envelope__pack(env, frame + FRAME_HEADER_SIZE);
    int rc = peer_write_plain(p, frame, FRAME_HEADER_SIZE + len);
    free(frame);
    return rc;
}

/* Writes what a handshake step asks, in order. */
static int peer_send_out(struct rt_peer *p, const struct raft_hs_out *out)
{
    struct rt *rt = p->rt;
    int rc = 0;
    if (out->send & RAFT_HS_SEND_PROOF) {
        Sluice__AuthProof proof = SLUICE__AUTH_PROOF__INIT;
        proof.mac.data = (uint8_t *)out->mac;
        proof.mac.len = AUTH_MAC_LEN;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_AUTH_PROOF;
        env.auth_proof = &proof;
        rc = peer_send(p, &env);
    }
    if (rc == 0 && (out->send & RAFT_HS_SEND_PEER_HELLO)) {
        Sluice__RaftPeerHello hello = SLUICE__RAFT_PEER_HELLO__INIT;
        hello.id = rt->id;
        hello.address = rt->address;
        hello.cluster = rt->cluster;
        hello.probe = p->hs.probe;
        hello.rejoin = p->hs.rejoin;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_RAFT_PEER_HELLO;
        env.raft_peer_hello = &hello;
        rc = peer_send(p, &env);
    }
    if (rc == 0 && (out->send & RAFT_HS_SEND_WELCOME)) {
        Sluice__RaftPeerWelcome welcome = SLUICE__RAFT_PEER_WELCOME__INIT;
        welcome.last_index = p->hs.last_index;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_RAFT_PEER_WELCOME;
        env.raft_peer_welcome = &welcome;
        rc = peer_send(p, &env);
    }
    if (rc == 0 && (out->send & RAFT_HS_SEND_ERROR)) {
        Sluice__Error error = SLUICE__ERROR__INIT;
        error.code = out->error_code;
        error.message = (char *)out->error_msg;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_ERROR;
        env.error = &error;
        rc = peer_send(p, &env);
    }
    return rc;
}

/* ---- the TLS relay ------------------------------------------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* One side ended (EOF): what was read from either side before still goes out to the other, then
 * both close. */
static void relay_end(struct rt_peer *p)
{
    if (p->tcp_pending == 0 && p->pipe_pending == 0) {
        peer_close(p, RAFT_NOCONNECTION);
        return;
    }
    p->draining = true;
    uv_read_stop((uv_stream_t *)&p->pipe);
    uv_read_stop((uv_stream_t *)p->tcp);
}

/* Plaintext from Raft's end: encrypt it for the peer. */
static void on_pipe_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rt_peer *p = s->data;
    if (nread == 0 || !p->relaying)
        return;
    if (nread < 0) {
        log_debug("raft: %s: relay: Raft's end: %s", p->peer, uv_strerror((int)nread));
        if (nread == UV_EOF)
            relay_end(p);
        else
            peer_close(p, RAFT_NOCONNECTION);
        return;
    }
    char why[256];
    if (tls_session_write(p->tls, (const uint8_t *)buf->base, (size_t)nread, why, sizeof why) !=
        0) {
        log_warn("raft: %s: relay: %s", p->peer, why);
        peer_close(p, RAFT_NOCONNECTION);
        return;
    }
    if (p->relaying && p->tcp_pending > RELAY_HIGH && !p->pipe_paused) {
        p->pipe_paused = true;
        uv_read_stop((uv_stream_t *)&p->pipe);
    }
}

static void relay_resume(struct rt_peer *p)
{
    if (p->pipe_paused && p->tcp_pending <= RELAY_HIGH / 2) {
        p->pipe_paused = false;
        if (uv_read_start((uv_stream_t *)&p->pipe, on_alloc, on_pipe_read) != 0)
            peer_close(p, RAFT_NOCONNECTION);
    }
    if (p->relaying && p->tcp_paused && p->pipe_pending <= RELAY_HIGH / 2) {
        p->tcp_paused = false;
        if (uv_read_start((uv_stream_t *)p->tcp, on_alloc, on_read) != 0)
            peer_close(p, RAFT_NOCONNECTION);
    }
}

/* Decrypted bytes from the peer, once relaying: to Raft's end. Returns 0 or a code (close). */
static int relay_from_peer(struct rt_peer *p)
{
    for (;;) {
        uint8_t plain[RELAY_PLAIN];
        char why[256];
        long n = tls_session_read(p->tls, plain, sizeof plain, why, sizeof why);
        if (n == 0)
            break;
        if (n < 0) {
            if (n != UV_EOF)
                log_warn("raft: %s: relay: %s", p->peer, why);
            return (int)n;
        }
        int rc = peer_write(p, plain, (size_t)n, true);
        if (rc != 0)
            return rc;
    }
    if (p->pipe_pending > RELAY_HIGH && !p->tcp_paused) {
        p->tcp_paused = true;
        uv_read_stop((uv_stream_t *)p->tcp);
    }
    return 0;
}

static void on_raft_end_closed(uv_handle_t *h)
{
    raft_free(h);
}

/* TLS: gives Raft one end of a socket pair and relays between the other end and the session.
 * Returns the stream for Raft, or NULL (the peer is then failed). */
static uv_stream_t *relay_start(struct rt_peer *p)
{
    int fds[2];
    uv_pipe_t *raft_end = raft_malloc(sizeof *raft_end);
    uint8_t *big = malloc(RELAY_CHUNK);
    if (raft_end == NULL || big == NULL) {
        raft_free(raft_end);
        free(big);
        peer_fail(p, "relay: out of memory");
        return NULL;
    }
    free(p->rbuf);
    p->rbuf = big;
    p->rbuf_len = RELAY_CHUNK;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
        raft_free(raft_end);
        peer_fail(p, "relay: socketpair: %s", strerror(errno));
        return NULL;
    }
    (void)uv_pipe_init(p->rt->loop, &p->pipe, 0);
    p->pipe.data = p;
    p->pipe_open = true;
    (void)uv_pipe_init(p->rt->loop, raft_end, 0);
    int rc = uv_pipe_open(&p->pipe, fds[1]);
    if (rc != 0) {
        close(fds[1]);
        close(fds[0]);
        uv_close((uv_handle_t *)raft_end, on_raft_end_closed);
        peer_fail(p, "relay: %s", uv_strerror(rc));
        return NULL;
    }
    rc = uv_pipe_open(raft_end, fds[0]);
    if (rc != 0) {
        close(fds[0]);
        uv_close((uv_handle_t *)raft_end, on_raft_end_closed);
        peer_fail(p, "relay: %s", uv_strerror(rc));
        return NULL;
    }
    rc = uv_read_start((uv_stream_t *)&p->pipe, on_alloc, on_pipe_read);
    if (rc == 0)
        rc = uv_read_start((uv_stream_t *)p->tcp, on_alloc, on_read);
    if (rc != 0) {
        uv_close((uv_handle_t *)raft_end, on_raft_end_closed);
        peer_fail(p, "relay: %s", uv_strerror(rc));
        return NULL;
    }
    p->relaying = true;
    return (uv_stream_t *)raft_end;
}

/* ---- the handshake ------------------------------------------------------------------------ */

static void peer_maybe_hand_over(struct rt_peer *p)
{
    if (!p->open || p->done || p->relaying || p->writes > 0)
        return;
    struct rt *rt = p->rt;
    if (!p->dialler && rt->accept_cb == NULL) {
        /* Listening early (raft_transport_listen): Raft has not started and takes no stream
         * yet (the handshake refuses such a peer first; this only guards it). */
        log_debug("raft: %s: server %" PRIu64 " connected before Raft started; closing", p->peer,
                  p->hs.peer_id);
        peer_close(p, RAFT_NOCONNECTION);
        return;
    }
    if (!p->dialler && p->hs.rejoin && rt->rejoin)
        rt->rejoin(rt->user, p->hs.peer_id);
    uv_stream_t *stream;
    if (p->tls) {
        stream = relay_start(p);
        if (stream == NULL)
            return;
    } else {
        stream = (uv_stream_t *)p->tcp;
        uv_read_stop(stream);
        stream->data = NULL;
        p->tcp = NULL;
        p->done = true;
    }
    p->status = 0;
    peer_uncount(p);
    uv_close((uv_handle_t *)&p->timer, on_handle_closed);
    p->closes++;
    if (p->dialler) {
        struct raft_uv_connect *req = p->req;
        p->req = NULL;
        log_debug("raft: connected to server %" PRIu64 " at %s", (uint64_t)p->id, p->address);
        req->cb(req, stream, 0);
    } else {
        log_debug("raft: %s: server %" PRIu64 " (%s) connected", p->peer, p->hs.peer_id,
                  p->hs.peer_address);
        rt->accept_cb(rt->t, p->hs.peer_id, p->hs.peer_address, stream);
    }
    peer_maybe_free(p);
}

static int on_frame(void *user, const uint8_t *payload, size_t len)
{
    struct rt_peer *p = user;
    if (p->done)
        return SLUICE_ERR_CLOSED;
    if (p->open)
        return SLUICE_ERR_PROTOCOL; /* a frame after the handshake's last */
    Sluice__Envelope *env = sluice__envelope__unpack(NULL, len, payload);
    if (env == NULL) {
        peer_fail(p, "an undecodable frame during the handshake");
        return SLUICE_ERR_PROTOCOL;
    }
    struct raft_hs_out out;
    char msg[SLUICE_ERRMSG_SIZE];
    p->hs.not_started = p->rt->accept_cb == NULL;
    int rc = raft_hs_step(&p->hs, env, &out, msg, sizeof msg);
    sluice__envelope__free_unpacked(env, NULL);
    int wrc = peer_send_out(p, &out);
    if (rc < 0) {
        p->rt->refused++;
        peer_log(p, "%s; closing the connection", msg);
        if ((out.send & RAFT_HS_SEND_ERROR) && wrc == 0 && p->writes > 0) {
            p->rejecting = true;
            uv_read_stop((uv_stream_t *)p->tcp);
        } else {
            peer_close(p, RAFT_NOCONNECTION);
        }
        return rc;
    }
    if (wrc != 0) {
        peer_fail(p, "write: %s", sluice_strerror(wrc));
        return wrc;
    }
    if (out.open) {
        /* Whatever follows belongs to Raft; the kernel keeps it until Raft (or the relay)
         * reads. */
        p->open = true;
        uv_read_stop((uv_stream_t *)p->tcp);
    }
    if (out.answered) {
        /* A probe: the dialler has its answer; the acceptor closes once it is written. */
        uv_read_stop((uv_stream_t *)p->tcp);
        if (p->dialler || p->writes == 0)
            peer_close(p, 0);
        else
            p->rejecting = true;
        return SLUICE_ERR_CLOSED;
    }
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct rt_peer *p = h->data;
    *buf = uv_buf_init((char *)p->rbuf, (unsigned)p->rbuf_len);
}

/* Handshake bytes (plaintext) from the peer. */
static void on_plain(struct rt_peer *p, const uint8_t *data, size_t len)
{
    if (p->open) {
        peer_fail(p, "bytes after the handshake");
        return;
    }
    p->received += len;
    if (p->received > RAFT_TRANSPORT_MAX_HANDSHAKE_BYTES) {
        peer_fail(p, "more than %u bytes before the handshake ended",
                  RAFT_TRANSPORT_MAX_HANDSHAKE_BYTES);
        return;
    }
    if (p->received == len && p->tls == NULL && len >= 3 && tls_looks_like_record(data, len)) {
        peer_fail(p, "the peer speaks TLS and this Raft port does not");
        return;
    }
    int rc = frame_decoder_feed(&p->dec, data, len, on_frame, p);
    if (p->done || p->rejecting)
        return;
    if (p->open && (rc != 0 || p->dec.header_have > 0 || p->dec.have > 0)) {
        peer_fail(p, "bytes after the handshake");
        return;
    }
    if (rc == SLUICE_ERR_TOO_LARGE) {
        peer_fail(p, "a frame of more than %u bytes during the handshake",
                  RAFT_TRANSPORT_MAX_FRAME);
        return;
    }
    if (rc != 0)
        peer_fail(p, "a malformed frame during the handshake");
}

/* The TCP handshake is up (either end), and the TLS one when there is TLS: send our Hello. */
static void peer_hello(struct rt_peer *p)
{
    Sluice__Hello hello = SLUICE__HELLO__INIT;
    raft_hs_hello(&p->hs, &hello, p->rt->incarnation);
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    int rc = peer_send(p, &env);
    if (rc != 0)
        peer_fail(p, "sending the Hello: %s", sluice_strerror(rc));
}

/* Ciphertext from the peer: the TLS handshake, then plaintext for the handshake or the relay. */
static void on_cipher(struct rt_peer *p, const uint8_t *data, size_t len)
{
    char why[256];
    bool first = p->cipher_received == 0;
    p->cipher_received += len;
    if (first && !p->dialler && len >= 3 && !tls_looks_like_record(data, len)) {
        peer_fail(p, "the peer does not speak TLS and this Raft port requires it");
        return;
    }
    if (!p->relaying && p->cipher_received > 2 * RAFT_TRANSPORT_MAX_HANDSHAKE_BYTES) {
        peer_fail(p, "more than %u bytes before the handshake ended",
                  2 * RAFT_TRANSPORT_MAX_HANDSHAKE_BYTES);
        return;
    }
    tls_session_feed(p->tls, data, len);
    if (!tls_session_done(p->tls)) {
        int rc = tls_session_handshake(p->tls, why, sizeof why);
        if (rc < 0) {
            peer_fail(p, "%s", why);
            return;
        }
        if (rc == 0)
            return;
        peer_hello(p);
        if (p->done)
            return;
    }
    if (p->relaying) {
        int rc = relay_from_peer(p);
        if (rc == UV_EOF)
            relay_end(p);
        else if (rc != 0)
            peer_close(p, RAFT_NOCONNECTION);
        return;
    }
    for (;;) {
        uint8_t plain[READ_CHUNK];
        long n = tls_session_read(p->tls, plain, sizeof plain, why, sizeof why);
        if (n == 0)
            break;
        if (n < 0) {
            peer_fail(p, "%s",
                      n == UV_EOF ? "the peer closed the connection during the handshake" : why);
            return;
        }
        on_plain(p, plain, (size_t)n);
        if (p->done || p->rejecting)
            return;
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rt_peer *p = s->data;
    if (nread == 0 || (p->done && !p->relaying) || p->rejecting)
        return;
    if (nread < 0) {
        if (p->relaying) {
            log_debug("raft: %s: relay: %s", p->peer, uv_strerror((int)nread));
            if (nread == UV_EOF)
                relay_end(p);
            else
                peer_close(p, RAFT_NOCONNECTION);
        } else if (nread == UV_EOF) {
            peer_fail(p, "the peer closed the connection during the handshake");
        } else {
            peer_fail(p, "read: %s", uv_strerror((int)nread));
        }
        return;
    }
    if (p->tls)
        on_cipher(p, (const uint8_t *)buf->base, (size_t)nread);
    else
        on_plain(p, (const uint8_t *)buf->base, (size_t)nread);
    if (!p->done && !p->rejecting)
        peer_maybe_hand_over(p);
}

static void on_timeout(uv_timer_t *timer)
{
    struct rt_peer *p = timer->data;
    if (p->dialler && !p->connected)
        peer_fail(p, "connecting to %s timed out after %" PRIu32 " ms", p->address,
                  p->rt->timeout_ms);
    else
        peer_fail(p, "no handshake within %" PRIu32 " ms", p->rt->timeout_ms);
}

/* The TCP connection is up (either end): start TLS, or send our Hello, and read. */
static void peer_start(struct rt_peer *p)
{
    struct rt *rt = p->rt;
    uint8_t nonce[AUTH_NONCE_LEN] = {0};
    bool token = security_has_token(rt->sec);
    if (token && auth_nonce(nonce) != 0) {
        peer_fail(p, "no random nonce");
        return;
    }
    raft_hs_init(&p->hs, p->dialler ? AUTH_CLIENT : AUTH_SERVER, token ? rt->sec->token : NULL,
                 token ? rt->sec->token_len : 0, rt->cluster, nonce);
    if (p->dialler) {
        p->hs.probe = p->probe;
        p->hs.rejoin = !p->probe && rt->rejoining && rt->rejoining(rt->user);
    } else {
        p->hs.last_index = rt->last_index ? rt->last_index(rt->user) : 0;
    }
    p->tcp->data = p;
    (void)uv_tcp_nodelay(p->tcp, 1);
    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    if (uv_tcp_getpeername(p->tcp, (struct sockaddr *)&ss, &sslen) == 0) {
        char ip[INET6_ADDRSTRLEN] = "";
        int port = 0;
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
            snprintf(p->peer, sizeof p->peer, "[%s]:%d", ip, port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            snprintf(p->peer, sizeof p->peer, "%s:%d", ip, port);
        }
    }
    int rc = uv_read_start((uv_stream_t *)p->tcp, on_alloc, on_read);
    if (rc != 0) {
        peer_fail(p, "read: %s", uv_strerror(rc));
        return;
    }
    if (security_has_tls(rt->sec)) {
        char err[256];
        rc = tls_session_new(rt->sec->tls, p->dialler ? p->host : NULL, tls_sink, p, &p->tls, err,
                             sizeof err);
        if (rc != 0) {
            peer_fail(p, "%s", err);
            return;
        }
        if (p->dialler) { /* the ClientHello */
            rc = tls_session_handshake(p->tls, err, sizeof err);
            if (rc < 0)
                peer_fail(p, "%s", err);
        }
        return;
    }
    peer_hello(p);
}

/* A new peer object with its deadline timer running, on rt's list. */
static struct rt_peer *peer_new(struct rt *rt, bool dialler)
{
    struct rt_peer *p = calloc(1, sizeof *p);
    uint8_t *rbuf = malloc(READ_CHUNK);
    if (p == NULL || rbuf == NULL) {
        free(p);
        free(rbuf);
        return NULL;
    }
    p->rt = rt;
    p->dialler = dialler;
    p->rbuf = rbuf;
    p->rbuf_len = READ_CHUNK;
    frame_decoder_init(&p->dec, RAFT_TRANSPORT_MAX_FRAME);
    (void)uv_timer_init(rt->loop, &p->timer);
    p->timer.data = p;
    (void)uv_timer_start(&p->timer, on_timeout, rt->timeout_ms, 0);
    p->next = rt->peers;
    if (rt->peers)
        rt->peers->prev = p;
    rt->peers = p;
    return p;
}

static void on_connection(uv_stream_t *listener, int status);

static void on_rt_handle_closed(uv_handle_t *h)
{
    struct rt *rt = h->data;
    rt->handles--;
    rt_maybe_closed(rt);
}

static void on_spare_closed(uv_handle_t *h)
{
    struct rt *rt = h->data;
    if (listen_spare_closed(&rt->spare, !rt->closing))
        on_connection((uv_stream_t *)&rt->listener, 0);
    rt->handles--;
    rt_maybe_closed(rt);
}

static void refuse(struct rt *rt, const char *why)
{
    if (!listen_spare_refuse(&rt->spare, rt->loop, (uv_stream_t *)&rt->listener, rt,
                             on_spare_closed))
        return;
    rt->handles++;
    rt->refused++;
    ratelimit_warn(&rt->log, uv_now(rt->loop), "raft: ", "refused",
                   "%s; closing a new connection at once", why);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct rt *rt = listener->data;
    if (rt->closing)
        return;
    if (status < 0) {
        log_warn("raft: accept: %s", uv_strerror(status));
        return;
    }
    if (rt->incoming >= rt->max_handshakes) {
        char why[96];
        snprintf(why, sizeof why, "%u handshakes in progress", rt->incoming);
        refuse(rt, why);
        return;
    }
    uv_tcp_t *tcp = raft_malloc(sizeof *tcp);
    struct rt_peer *p = tcp ? peer_new(rt, false) : NULL;
    if (p == NULL) {
        raft_free(tcp);
        refuse(rt, "out of memory");
        return;
    }
    snprintf(p->peer, sizeof p->peer, "unknown peer");
    p->counted = true;
    rt->incoming++;
    (void)uv_tcp_init(rt->loop, tcp);
    p->tcp = tcp;
    tcp->data = p;
    int rc = uv_accept(listener, (uv_stream_t *)tcp);
    if (rc != 0) {
        peer_fail(p, "accept: %s", uv_strerror(rc));
        return;
    }
    peer_start(p);
}

/* ---- dialling ----------------------------------------------------------------------------- */

static void start_connect(struct rt_peer *p, const struct sockaddr *sa);

static void on_connected(uv_connect_t *req, int status)
{
    struct rt_peer *p = req->data;
    p->connecting = false;
    if (p->done) { /* cancelled by peer_close (its handle closed) */
        peer_maybe_free(p);
        return;
    }
    if (status < 0 && p->ai_next != NULL) {
        /* The name has more addresses (an IPv6 one first, say, where the peer listens on IPv4):
         * try the next with a fresh handle. */
        const struct sockaddr *sa = p->ai_next->ai_addr;
        p->ai_next = p->ai_next->ai_next;
        uv_close((uv_handle_t *)p->tcp, on_tcp_closed);
        p->tcp = NULL;
        p->closes++;
        start_connect(p, sa);
        return;
    }
    if (status < 0) {
        peer_fail(p, "connect to %s: %s", p->address, uv_strerror(status));
        return;
    }
    p->connected = true;
    peer_start(p);
}

static void start_connect(struct rt_peer *p, const struct sockaddr *sa)
{
    uv_tcp_t *tcp = raft_malloc(sizeof *tcp);
    if (tcp == NULL) {
        peer_fail(p, "connect to %s: out of memory", p->address);
        return;
    }
    (void)uv_tcp_init(p->rt->loop, tcp);
    tcp->data = p;
    p->tcp = tcp;
    p->connect.data = p;
    int rc = uv_tcp_connect(&p->connect, tcp, sa, on_connected);
    if (rc != 0)
        peer_fail(p, "connect to %s: %s", p->address, uv_strerror(rc));
    else
        p->connecting = true; /* the peer lives until on_connected, whatever closes meanwhile */
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct rt_peer *p = req->data;
    p->resolving = false;
    if (p->done) {
        uv_freeaddrinfo(res);
        peer_maybe_free(p);
        return;
    }
    if (status < 0 || res == NULL) {
        uv_freeaddrinfo(res);
        peer_fail(p, "resolve %s: %s", p->address, uv_strerror(status));
        return;
    }
    p->ai = res; /* freed with the peer */
    p->ai_next = res->ai_next;
    start_connect(p, res->ai_addr);
}

static void dial(struct rt_peer *p, raft_id id, const char *host, int port, const char *address);

static int rt_connect(struct raft_uv_transport *t, struct raft_uv_connect *req, raft_id id,
                      const char *address, raft_uv_connect_cb cb)
{
    struct rt *rt = t->impl;
    char host[RAFT_HS_ADDRESS_MAX];
    int port = 0;
    if (rt->closing)
        return RAFT_CANCELED;
    if (raft_hs_split_address(address, host, sizeof host, &port, false) != 0) {
        snprintf(t->errmsg, sizeof t->errmsg, "malformed address %.200s (HOST:PORT)", address);
        return RAFT_NOCONNECTION;
    }
    struct rt_peer *p = peer_new(rt, true);
    if (p == NULL)
        return RAFT_NOMEM;
    req->cb = cb;
    p->req = req;
    dial(p, id, host, port, address);
    return 0;
}

/* Resolves and connects a dialler to server id at address (host, port split from it). */
static void dial(struct rt_peer *p, raft_id id, const char *host, int port, const char *address)
{
    struct rt *rt = p->rt;
    p->id = id;
    snprintf(p->host, sizeof p->host, "%s", host);
    snprintf(p->address, sizeof p->address, "%s", address);
    snprintf(p->peer, sizeof p->peer, "%s", address);
    struct sockaddr_in6 sa6;
    struct sockaddr_in sa4;
    if (uv_ip4_addr(host, port, &sa4) == 0) {
        start_connect(p, (const struct sockaddr *)&sa4);
    } else if (uv_ip6_addr(host, port, &sa6) == 0) {
        start_connect(p, (const struct sockaddr *)&sa6);
    } else {
        char service[8];
        snprintf(service, sizeof service, "%d", port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        p->gai.data = p;
        int rc = uv_getaddrinfo(rt->loop, &p->gai, on_resolved, host, service, &hints);
        if (rc == 0)
            p->resolving = true;
        else
            peer_fail(p, "resolve %s: %s", address, uv_strerror(rc));
    }
}

/* ---- the transport's other methods -------------------------------------------------------- */

static int rt_init(struct raft_uv_transport *t, raft_id id, const char *address)
{
    struct rt *rt = t->impl;
    if (address == NULL || strlen(address) >= sizeof rt->address) {
        snprintf(t->errmsg, sizeof t->errmsg, "address too long");
        return RAFT_NAMETOOLONG;
    }
    rt->id = id;
    snprintf(rt->address, sizeof rt->address, "%s", address);
    return 0;
}

/* Binds the listener (bind_address, else the transport's address). */
static int listen_now(struct raft_uv_transport *t)
{
    struct rt *rt = t->impl;
    const char *addr = rt->bind_address ? rt->bind_address : rt->address;
    char host[RAFT_HS_ADDRESS_MAX], why[256];
    int port = 0, fd = -1, bound = 0, inited = 0;
    if (raft_hs_split_address(addr, host, sizeof host, &port, true) != 0) {
        snprintf(t->errmsg, sizeof t->errmsg, "malformed address %.200s (HOST:PORT)", addr);
        return RAFT_INVALID;
    }
    int rc = listen_open(host, port, &fd, &bound, why, sizeof why);
    if (rc != 0) {
        snprintf(t->errmsg, sizeof t->errmsg, "listen %.100s: %.100s", addr, why);
        return RAFT_IOERR;
    }
    rt->listener.data = rt;
    rc = listen_adopt(rt->loop, &rt->listener, fd, on_connection, &inited);
    if (rc != 0) {
        snprintf(t->errmsg, sizeof t->errmsg, "listen %.100s: %.100s", addr, uv_strerror(rc));
        if (inited) {
            rt->handles++;
            uv_close((uv_handle_t *)&rt->listener, on_rt_handle_closed);
        }
        return RAFT_IOERR;
    }
    rt->listener.data = rt;
    rt->listening = true;
    rt->handles++;
    rt->port = bound;
    log_info("raft: listening on %s (port %d)", addr, bound);
    return 0;
}

static int rt_listen(struct raft_uv_transport *t, raft_uv_accept_cb cb)
{
    struct rt *rt = t->impl;
    if (rt->closing || rt->accept_cb)
        return RAFT_INVALID;
    if (!rt->listening) {
        int rc = listen_now(t);
        if (rc != 0)
            return rc;
    }
    rt->accept_cb = cb;
    return 0;
}

int raft_transport_listen(struct raft_uv_transport *t, const char *address, char *err,
                          size_t errlen)
{
    struct rt *rt = t->impl;
    if (rt->listening)
        return 0;
    if (address == NULL || strlen(address) >= sizeof rt->address)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "raft: address too long");
    snprintf(rt->address, sizeof rt->address, "%s", address);
    if (listen_now(t) != 0)
        return err_set(err, errlen, SLUICE_ERR_UNAVAILABLE, "raft: %s", t->errmsg);
    return 0;
}

int raft_transport_probe(struct raft_uv_transport *t, uint64_t id, const char *address,
                         raft_transport_probe_cb cb, void *user)
{
    struct rt *rt = t->impl;
    char host[RAFT_HS_ADDRESS_MAX];
    int port = 0;
    if (rt->closing)
        return SLUICE_ERR_CLOSED;
    if (raft_hs_split_address(address, host, sizeof host, &port, false) != 0)
        return SLUICE_ERR_INVALID;
    struct rt_peer *p = peer_new(rt, true);
    if (p == NULL)
        return SLUICE_ERR_NOMEM;
    p->probe = true;
    p->probe_cb = cb;
    p->probe_user = user;
    p->status = RAFT_NOCONNECTION;
    dial(p, id, host, port, address);
    return 0;
}

static void rt_close(struct raft_uv_transport *t, raft_uv_transport_close_cb cb)
{
    struct rt *rt = t->impl;
    assert(!rt->closing);
    rt->closing = true;
    rt->close_cb = cb;
    if (rt->listening) {
        rt->listening = false;
        uv_close((uv_handle_t *)&rt->listener, on_rt_handle_closed);
    }
    /* peer_close never frees synchronously (the timer's close is pending), so the walk is safe;
     * the next pointer is read first anyway. */
    for (struct rt_peer *p = rt->peers, *next; p; p = next) {
        next = p->next;
        peer_close(p, RAFT_CANCELED);
    }
    /* One handle of our own, so that cb never runs from inside close(). */
    (void)uv_timer_init(rt->loop, &rt->closer);
    rt->closer.data = rt;
    rt->handles++;
    uv_close((uv_handle_t *)&rt->closer, on_rt_handle_closed);
}

int raft_transport_init(struct raft_uv_transport *t, uv_loop_t *loop,
                        const struct raft_transport_opts *o, char *err, size_t errlen)
{
    if (o == NULL || o->cluster == NULL)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "raft transport: no cluster string");
    if (strlen(o->cluster) >= RAFT_HS_CLUSTER_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "raft transport: a cluster string of %zu bytes (at most %d)",
                       strlen(o->cluster), RAFT_HS_CLUSTER_MAX - 1);
    if (security_has_tls(o->sec) && !(tls_ctx_serves(o->sec->tls) && tls_ctx_dials(o->sec->tls)))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "TLS on the Raft port needs both a certificate and key (to accept) and a "
                       "CA (to dial)");
    char host[RAFT_HS_ADDRESS_MAX];
    int port;
    if (o->bind_address &&
        raft_hs_split_address(o->bind_address, host, sizeof host, &port, true) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "raft transport: bind address %.200s: expected HOST:PORT", o->bind_address);
    struct rt *rt = calloc(1, sizeof *rt);
    if (rt == NULL)
        goto err_nomem;
    rt->cluster = strdup(o->cluster);
    if (rt->cluster == NULL)
        goto err_after_rt;
    if (o->bind_address) {
        rt->bind_address = strdup(o->bind_address);
        if (rt->bind_address == NULL)
            goto err_after_cluster;
    }
    uint8_t random[AUTH_NONCE_LEN];
    if (auth_nonce(random) == 0)
        memcpy(&rt->incarnation, random, sizeof rt->incarnation);
    rt->t = t;
    rt->loop = loop;
    rt->sec = o->sec;
    rt->user = o->user;
    rt->last_index = o->last_index;
    rt->rejoining = o->rejoining;
    rt->rejoin = o->rejoin;
    rt->timeout_ms =
        o->handshake_timeout_ms ? o->handshake_timeout_ms : RAFT_TRANSPORT_DEFAULT_TIMEOUT_MS;
    rt->max_handshakes =
        o->max_handshakes ? o->max_handshakes : RAFT_TRANSPORT_DEFAULT_MAX_HANDSHAKES;
    ratelimit_init(&rt->log, PEER_LOG_INTERVAL_MS);
    t->version = 1;
    t->impl = rt;
    t->errmsg[0] = '\0';
    t->init = rt_init;
    t->listen = rt_listen;
    t->connect = rt_connect;
    t->close = rt_close;
    return 0;

err_after_cluster:
    free(rt->cluster);
err_after_rt:
    free(rt);
err_nomem:
    return err_set(err, errlen, SLUICE_ERR_NOMEM, "raft transport: out of memory");
}

void raft_transport_release(struct raft_uv_transport *t)
{
    struct rt *rt = t->impl;
    if (rt == NULL)
        return;
    assert(rt->handles == 0 && rt->peers == NULL);
    free(rt->cluster);
    free(rt->bind_address);
    free(rt);
    t->impl = NULL;
}

int raft_transport_port(const struct raft_uv_transport *t)
{
    const struct rt *rt = t->impl;
    return rt && rt->listening ? rt->port : 0;
}

uint64_t raft_transport_refused(const struct raft_uv_transport *t)
{
    const struct rt *rt = t->impl;
    return rt ? rt->refused : 0;
}
