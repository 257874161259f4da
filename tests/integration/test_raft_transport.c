/* The Raft transport (dispatcher/raft_transport.h) on loopback: two transports that share the
 * token and cluster connect and hand Raft a working stream, plain and under TLS (where the stream
 * is relayed, with backpressure, and what was written before a close still arrives); a wrong
 * token, a missing token on either side, a different cluster and TLS on one side only are refused
 * on both ends; raw TCP strangers (garbage, a frame too large, silence, bytes after the
 * handshake) are closed within the handshake timeout and never reach Raft; the bound on
 * handshakes in progress; close() with connects pending; probes and rejoins (a transport that
 * listens before Raft starts); bind_address, host names and IPv6; and a
 * real three-node C-Raft cluster over the transport, plain and under TLS, which elects a leader
 * and applies entries on all three nodes, and refuses a fourth transport holding a wrong token. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/auth.h"
#include "common/error.h"
#include "common/frame.h"
#include "common/security.h"
#include "dispatcher/raft_handshake.h"
#include "dispatcher/raft_transport.h"
#include "lib/loop.h"
#include "lib/net.h"
#include "lib/tls.h"
#include "lib/tmp.h"

#include <signal.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKEN_A "0123456789abcdef0123456789abcdef"
#define TOKEN_B "fedcba9876543210fedcba9876543210"
#define CLUSTER "1=127.0.0.1:7001,2=127.0.0.1:7002"
#define WAIT_MS 10000

static struct security_ctx *sec_new(const char *token)
{
    struct security_ctx *s = calloc(1, sizeof *s);
    assert_non_null(s);
    if (token) {
        s->token_len = strlen(token);
        memcpy(s->token, token, s->token_len);
    }
    return s;
}

/* TLS settings for both ends (node.pem, verified against ca.pem), with token (NULL: none). */
static struct security_ctx *tls_sec_new(const char *token)
{
    struct security_ctx *s = tls_test_sec("node", "ca", SECURITY_CLIENT | SECURITY_SERVER);
    if (token) {
        s->token_len = strlen(token);
        memcpy(s->token, token, s->token_len);
    }
    return s;
}

static void sec_free(struct security_ctx *s)
{
    if (s && s->tls)
        security_ctx_free(s);
    else
        free(s);
}

/* One transport and what its callbacks saw. */
struct side {
    struct raft_uv_transport t;
    int accepts;
    raft_id accept_id;
    char accept_address[RAFT_HS_ADDRESS_MAX];
    uv_stream_t *accept_stream;
    bool closed;
};

struct dial {
    struct raft_uv_connect req;
    bool done;
    int status;
    uv_stream_t *stream;
    int order; /* the value of dial_order when the cb ran */
};

static int dial_order;

static void on_accept(struct raft_uv_transport *t, raft_id id, const char *address,
                      uv_stream_t *stream)
{
    struct side *s = t->data;
    s->accepts++;
    s->accept_id = id;
    snprintf(s->accept_address, sizeof s->accept_address, "%s", address);
    assert_null(s->accept_stream);
    s->accept_stream = stream;
}

static void on_dialled(struct raft_uv_connect *req, uv_stream_t *stream, int status)
{
    struct dial *d = req->data;
    assert_false(d->done);
    d->done = true;
    d->status = status;
    d->stream = stream;
    d->order = ++dial_order;
    if (status != 0)
        assert_null(stream);
}

static void on_side_closed(struct raft_uv_transport *t)
{
    struct side *s = t->data;
    assert_false(s->closed);
    s->closed = true;
}

static void side_init(struct side *s, uv_loop_t *loop, const struct security_ctx *sec,
                      const char *cluster, uint32_t timeout_ms, raft_id id, const char *address)
{
    memset(s, 0, sizeof *s);
    struct raft_transport_opts o = {
        .sec = sec, .cluster = cluster, .handshake_timeout_ms = timeout_ms};
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(raft_transport_init(&s->t, loop, &o, err, sizeof err), 0);
    s->t.data = s;
    assert_int_equal(s->t.version, 1);
    assert_int_equal(s->t.init(&s->t, id, address), 0);
}

static int side_listen(struct side *s)
{
    assert_int_equal(s->t.listen(&s->t, on_accept), 0);
    int port = raft_transport_port(&s->t);
    assert_true(port > 0);
    return port;
}

static void side_close(uv_loop_t *loop, struct side *s)
{
    s->t.close(&s->t, on_side_closed);
    assert_false(s->closed); /* never from inside close() */
    RUN_UNTIL(loop, s->closed, WAIT_MS);
    raft_transport_release(&s->t);
}

static void dial(struct side *s, struct dial *d, raft_id id, const char *address)
{
    memset(d, 0, sizeof *d);
    d->req.data = d;
    assert_int_equal(s->t.connect(&s->t, &d->req, id, address, on_dialled), 0);
    assert_false(d->done); /* never from inside connect() */
}

static void on_stream_closed(uv_handle_t *h)
{
    raft_free(h);
}

static void close_stream(uv_stream_t *s)
{
    if (s)
        uv_close((uv_handle_t *)s, on_stream_closed);
}

/* ---- bytes over the handed-over streams ---------------------------------------------------- */

/* Byte i of a test stream. */
static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 7 % 251);
}

/* Reads a stream and checks it against pattern(). */
struct sink {
    size_t len;
    bool mismatch, ended;
    char scratch[65536];
};

static void sink_alloc(uv_handle_t *h, size_t n, uv_buf_t *buf)
{
    (void)n;
    struct sink *k = h->data;
    *buf = uv_buf_init(k->scratch, sizeof k->scratch);
}

static void sink_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct sink *k = s->data;
    if (nread < 0) {
        k->ended = true;
        uv_read_stop(s);
        return;
    }
    for (ssize_t i = 0; i < nread; i++)
        if ((uint8_t)buf->base[i] != pattern(k->len + (size_t)i))
            k->mismatch = true;
    k->len += (size_t)nread;
}

static void on_write_done(uv_write_t *w, int status)
{
    *(int *)w->data = status == 0 ? 1 : -1;
}

/* (1) Same token and cluster: accept_cb gets the dialler's id and address and a stream that
 * carries what the dialler writes on its own (bulk bytes, in one write). */
static void check_connects(struct security_ctx *sec, size_t bulk)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct side a, d;
    side_init(&a, &loop, sec, CLUSTER, 2000, 1, "127.0.0.1:0");
    side_init(&d, &loop, sec, CLUSTER, 2000, 2, "127.0.0.1:7002");
    int port = side_listen(&a);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    struct dial dl;
    dial(&d, &dl, 1, addr);
    RUN_UNTIL(&loop, dl.done && a.accepts == 1, WAIT_MS);
    assert_int_equal(dl.status, 0);
    assert_non_null(dl.stream);
    assert_int_equal(a.accept_id, 2);
    assert_string_equal(a.accept_address, "127.0.0.1:7002");
    assert_non_null(a.accept_stream);
    assert_int_equal(raft_transport_refused(&a.t), 0);
    assert_int_equal(raft_transport_refused(&d.t), 0);

    struct sink *k = calloc(1, sizeof *k);
    a.accept_stream->data = k;
    uint8_t *data = malloc(bulk);
    for (size_t i = 0; i < bulk; i++)
        data[i] = pattern(i);
    uv_write_t w;
    int wdone = 0;
    w.data = &wdone;
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)bulk);
    assert_int_equal(uv_write(&w, dl.stream, &b, 1, on_write_done), 0);
    /* A slow reader first: the bytes back up through every buffer on the way. */
    run_for(&loop, 300);
    assert_int_equal(uv_read_start(a.accept_stream, sink_alloc, sink_read), 0);
    /* The dialler's end closes as soon as its write is done (under TLS the bytes may still be
     * on their way through the relay): all of them arrive, then the end of the stream. */
    RUN_UNTIL(&loop, wdone != 0, 30000);
    assert_int_equal(wdone, 1);
    close_stream(dl.stream);
    RUN_UNTIL(&loop, k->ended, 30000);
    assert_int_equal(k->len, bulk);
    assert_false(k->mismatch);
    close_stream(a.accept_stream);
    side_close(&loop, &a);
    side_close(&loop, &d);
    loop_finish(&loop);
    free(data);
    free(k);
}

static void test_connects_with_token(void **unused)
{
    (void)unused;
    struct security_ctx *sec = sec_new(TOKEN_A);
    check_connects(sec, 64);
    check_connects(sec, 3u << 20);
    sec_free(sec);
}

static void test_connects_without_token(void **unused)
{
    (void)unused;
    struct security_ctx *sec = sec_new(NULL);
    check_connects(sec, 64);
    sec_free(sec);
}

/* TLS: the stream Raft gets is one end of a socket pair relayed through the session; 3 MiB in
 * one write exercise the relay's backpressure. */
static void test_tls_connects(void **unused)
{
    (void)unused;
    struct security_ctx *sec = tls_sec_new(TOKEN_A);
    check_connects(sec, 64);
    check_connects(sec, 3u << 20);
    sec_free(sec);
    sec = tls_sec_new(NULL);
    check_connects(sec, 1000);
    sec_free(sec);
}

/* (2)-(4) A refused pairing: the dialler's cb fails, the acceptor's accept_cb never runs, and
 * both count a refusal. */
static void check_refused_sec(struct security_ctx *dsec, struct security_ctx *asec,
                              const char *dcluster, const char *acluster)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct side a, d;
    side_init(&a, &loop, asec, acluster, 2000, 1, "127.0.0.1:0");
    side_init(&d, &loop, dsec, dcluster, 2000, 2, "127.0.0.1:7002");
    int port = side_listen(&a);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    struct dial dl;
    dial(&d, &dl, 1, addr);
    RUN_UNTIL(&loop, dl.done && raft_transport_refused(&a.t) == 1, WAIT_MS);
    assert_int_equal(dl.status, RAFT_NOCONNECTION);
    assert_null(dl.stream);
    run_for(&loop, 50);
    assert_int_equal(a.accepts, 0);
    assert_int_equal(raft_transport_refused(&a.t), 1);
    assert_int_equal(raft_transport_refused(&d.t), 1);
    side_close(&loop, &a);
    side_close(&loop, &d);
    loop_finish(&loop);
}

static void check_refused(const char *dtoken, const char *atoken, const char *dcluster,
                          const char *acluster)
{
    struct security_ctx *dsec = sec_new(dtoken), *asec = sec_new(atoken);
    check_refused_sec(dsec, asec, dcluster, acluster);
    sec_free(dsec);
    sec_free(asec);
}

static void test_wrong_token(void **unused)
{
    (void)unused;
    check_refused(TOKEN_B, TOKEN_A, CLUSTER, CLUSTER);
}

static void test_no_token_on_one_side(void **unused)
{
    (void)unused;
    check_refused(NULL, TOKEN_A, CLUSTER, CLUSTER);
    check_refused(TOKEN_A, NULL, CLUSTER, CLUSTER);
}

/* Under TLS the same refusals, and TLS on one side only. */
static void test_tls_refused(void **unused)
{
    (void)unused;
    struct security_ctx *a = tls_sec_new(TOKEN_A), *b = tls_sec_new(TOKEN_B);
    struct security_ctx *plain = sec_new(TOKEN_A);
    check_refused_sec(b, a, CLUSTER, CLUSTER);
    check_refused_sec(a, a, "1=x:1", CLUSTER);
    check_refused_sec(plain, a, CLUSTER, CLUSTER);
    check_refused_sec(a, plain, CLUSTER, CLUSTER);
    sec_free(a);
    sec_free(b);
    sec_free(plain);
}

static void test_cluster_mismatch(void **unused)
{
    (void)unused;
    check_refused(TOKEN_A, TOKEN_A, "1=127.0.0.1:7001,2=127.0.0.1:7009", CLUSTER);
    check_refused(NULL, NULL, "", CLUSTER);
}

/* ---- (5) raw TCP strangers ----------------------------------------------------------------- */

struct stranger {
    uv_tcp_t tcp;
    uv_connect_t conn;
    uv_write_t wr;
    uint8_t *send;
    size_t send_len;
    bool connected, ended, closed;
    size_t got;
    uint8_t first[64]; /* the first bytes received */
    uint64_t t_connected, t_ended;
    char scratch[4096];
};

static void stranger_closed(uv_handle_t *h)
{
    struct stranger *s = h->data;
    s->closed = true;
}

static void stranger_alloc(uv_handle_t *h, size_t n, uv_buf_t *buf)
{
    (void)n;
    struct stranger *s = h->data;
    *buf = uv_buf_init(s->scratch, sizeof s->scratch);
}

static void stranger_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct stranger *s = st->data;
    if (nread > 0) {
        for (ssize_t i = 0; i < nread && s->got + (size_t)i < sizeof s->first; i++)
            s->first[s->got + (size_t)i] = (uint8_t)buf->base[i];
        s->got += (size_t)nread;
    } else if (nread < 0 && !s->ended) {
        s->ended = true;
        s->t_ended = uv_now(st->loop);
        uv_close((uv_handle_t *)st, stranger_closed);
    }
}

static void stranger_wrote(uv_write_t *w, int status)
{
    (void)w;
    (void)status;
}

static void stranger_connected(uv_connect_t *c, int status)
{
    struct stranger *s = c->data;
    assert_int_equal(status, 0);
    s->connected = true;
    s->t_connected = uv_now(c->handle->loop);
    if (s->send_len) {
        uv_buf_t b = uv_buf_init((char *)s->send, (unsigned)s->send_len);
        assert_int_equal(uv_write(&s->wr, (uv_stream_t *)&s->tcp, &b, 1, stranger_wrote), 0);
    }
    assert_int_equal(uv_read_start((uv_stream_t *)&s->tcp, stranger_alloc, stranger_read), 0);
}

static void stranger_start(uv_loop_t *loop, struct stranger *s, int port, const void *bytes,
                           size_t len)
{
    memset(s, 0, sizeof *s);
    s->send = (uint8_t *)bytes;
    s->send_len = len;
    assert_int_equal(uv_tcp_init(loop, &s->tcp), 0);
    s->tcp.data = s;
    s->conn.data = s;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", port, &sa);
    assert_int_equal(uv_tcp_connect(&s->conn, &s->tcp, (struct sockaddr *)&sa, stranger_connected),
                     0);
}

/* Appends one framed Envelope to buf at *len. */
static void put_frame(uint8_t *buf, size_t cap, size_t *len, const Sluice__Envelope *env)
{
    size_t n = sluice__envelope__get_packed_size(env);
    assert_true(*len + FRAME_HEADER_SIZE + n <= cap);
    frame_write_header(buf + *len, (uint32_t)n);
    sluice__envelope__pack(env, buf + *len + FRAME_HEADER_SIZE);
    *len += FRAME_HEADER_SIZE + n;
}

/* A correct handshake without tokens (Hello, then RaftPeerHello at once), then extra bytes. */
static size_t handshake_then_garbage(uint8_t *buf, size_t cap, const char *cluster)
{
    size_t len = 0;
    Sluice__Hello hello = SLUICE__HELLO__INIT;
    hello.version = RPC_PROTOCOL_VERSION;
    hello.role = SLUICE__ROLE__ROLE_RAFT_PEER;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    put_frame(buf, cap, &len, &env);
    Sluice__RaftPeerHello ph = SLUICE__RAFT_PEER_HELLO__INIT;
    ph.id = 9;
    ph.address = "127.0.0.1:7009";
    ph.cluster = (char *)cluster;
    Sluice__Envelope penv = SLUICE__ENVELOPE__INIT;
    penv.body_case = SLUICE__ENVELOPE__BODY_RAFT_PEER_HELLO;
    penv.raft_peer_hello = &ph;
    put_frame(buf, cap, &len, &penv);
    memcpy(buf + len, "RAFT", 4);
    return len + 4;
}

static void test_strangers(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct side a;
    side_init(&a, &loop, NULL, CLUSTER, 1000, 1, "127.0.0.1:0");
    int port = side_listen(&a);

    static const char http[] = "GET / HTTP/1.0\r\n\r\n"; /* "GET " is a 1.2 GB frame length */
    static const uint8_t junk[] = {0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff}; /* undecodable */
    uint8_t late[512];
    size_t late_len = handshake_then_garbage(late, sizeof late, CLUSTER);
    /* The log, to count its lines: a port scanner must not fill it. */
    char log_path[512];
    snprintf(log_path, sizeof log_path, "%s/strangers.log", tmp_dir());
    fflush(stderr);
    int saved_stderr = dup(2);
    int log_fd = open(log_path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(saved_stderr >= 0 && log_fd >= 0);
    dup2(log_fd, 2);
    close(log_fd);
    struct stranger big, bad, silent, extra;
    stranger_start(&loop, &big, port, http, sizeof http - 1);
    stranger_start(&loop, &bad, port, junk, sizeof junk);
    stranger_start(&loop, &silent, port, NULL, 0);
    stranger_start(&loop, &extra, port, late, late_len);
    RUN_UNTIL(&loop, big.closed && bad.closed && silent.closed && extra.closed, WAIT_MS);
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    assert_int_equal(a.accepts, 0);
    assert_int_equal(raft_transport_refused(&a.t), 4);
    /* Four refusals from one host: one warning line (the first), the rest held back. */
    FILE *f = fopen(log_path, "r");
    assert_non_null(f);
    char line[1024];
    int warnings = 0;
    while (fgets(line, sizeof line, f)) {
        print_message("log: %s", line);
        if (strstr(line, "warn") && strstr(line, "raft: 127.0.0.1:"))
            warnings++;
    }
    fclose(f);
    assert_int_equal(warnings, 1);
    /* Each got the acceptor's Hello (a frame) first; the ones with garbage went at once, the
     * silent one after the 1000 ms timeout. */
    assert_true(big.got > FRAME_HEADER_SIZE && bad.got > FRAME_HEADER_SIZE);
    assert_true(big.t_ended - big.t_connected < 800);
    assert_true(bad.t_ended - bad.t_connected < 800);
    assert_true(extra.t_ended - extra.t_connected < 800);
    uint64_t waited = silent.t_ended - silent.t_connected;
    print_message("the silent stranger was closed after %llu ms\n", (unsigned long long)waited);
    assert_true(waited >= 950 && waited < 5000);

    /* The same handshake without the extra bytes is accepted: the refusal above was theirs. */
    uint8_t ok[512];
    size_t ok_len = handshake_then_garbage(ok, sizeof ok, CLUSTER) - 4;
    struct stranger good;
    stranger_start(&loop, &good, port, ok, ok_len);
    RUN_UNTIL(&loop, a.accepts == 1, WAIT_MS);
    assert_int_equal(a.accept_id, 9);
    assert_string_equal(a.accept_address, "127.0.0.1:7009");
    close_stream(a.accept_stream);
    RUN_UNTIL(&loop, good.closed, WAIT_MS);
    assert_int_equal(raft_transport_refused(&a.t), 4);

    side_close(&loop, &a);
    loop_finish(&loop);
}

/* Beyond max_handshakes in progress, a new connection is closed at once (it gets no Hello). */
static void test_handshake_bound(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct side a;
    memset(&a, 0, sizeof a);
    struct raft_transport_opts o = {
        .cluster = CLUSTER, .handshake_timeout_ms = 2000, .max_handshakes = 2};
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(raft_transport_init(&a.t, &loop, &o, err, sizeof err), 0);
    a.t.data = &a;
    assert_int_equal(a.t.init(&a.t, 1, "127.0.0.1:0"), 0);
    int port = side_listen(&a);
    struct stranger s[3];
    stranger_start(&loop, &s[0], port, NULL, 0);
    stranger_start(&loop, &s[1], port, NULL, 0);
    RUN_UNTIL(&loop, s[0].got > 0 && s[1].got > 0, WAIT_MS);
    stranger_start(&loop, &s[2], port, NULL, 0);
    RUN_UNTIL(&loop, s[2].closed, WAIT_MS);
    assert_int_equal(s[2].got, 0);
    assert_false(s[0].ended || s[1].ended);
    assert_int_equal(raft_transport_refused(&a.t), 1);
    /* close() ends the two handshakes in progress. */
    side_close(&loop, &a);
    RUN_UNTIL(&loop, s[0].closed && s[1].closed, WAIT_MS);
    loop_finish(&loop);
}

/* (6) close() with connects pending: one waiting for a handshake from a listener that never
 * answers, one resolving a host name, one to a port nobody listens on. Their cbs run with
 * RAFT_CANCELED (or RAFT_NOCONNECTION if they failed first), all before close's. */
static int mute_accepted;
static uv_tcp_t mute_conn;

static void mute_on_connection(uv_stream_t *l, int status)
{
    assert_int_equal(status, 0);
    assert_int_equal(uv_tcp_init(l->loop, &mute_conn), 0);
    assert_int_equal(uv_accept(l, (uv_stream_t *)&mute_conn), 0);
    mute_accepted++;
}

static int close_order;

static void on_side_closed_order(struct raft_uv_transport *t)
{
    on_side_closed(t);
    close_order = ++dial_order;
}

static void test_close_with_pending_connects(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    uv_loop_init(&loop);
    uv_tcp_t mute;
    assert_int_equal(uv_tcp_init(&loop, &mute), 0);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    assert_int_equal(uv_tcp_bind(&mute, (struct sockaddr *)&sa, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&mute, 8, mute_on_connection), 0);
    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    uv_tcp_getsockname(&mute, (struct sockaddr *)&ss, &sslen);
    int mute_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);

    struct side d;
    side_init(&d, &loop, NULL, CLUSTER, 5000, 2, "127.0.0.1:7002");
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", mute_port);
    struct dial d1, d2;
    dial(&d, &d1, 1, addr);
    RUN_UNTIL(&loop, mute_accepted == 1, WAIT_MS);
    snprintf(addr, sizeof addr, "localhost:%d", mute_port);
    dial(&d, &d2, 3, addr);
    /* A malformed address fails synchronously, and its cb never runs. */
    struct dial d3;
    memset(&d3, 0, sizeof d3);
    d3.req.data = &d3;
    assert_int_equal(d.t.connect(&d.t, &d3.req, 4, "no-port", on_dialled), RAFT_NOCONNECTION);

    dial_order = 0;
    d.t.close(&d.t, on_side_closed_order);
    assert_false(d1.done || d2.done || d.closed);
    RUN_UNTIL(&loop, d.closed, WAIT_MS);
    assert_true(d1.done && d2.done);
    assert_false(d3.done);
    assert_int_equal(d1.status, RAFT_CANCELED);
    assert_true(d2.status == RAFT_CANCELED || d2.status == RAFT_NOCONNECTION);
    assert_true(d1.order < close_order && d2.order < close_order);
    raft_transport_release(&d.t);

    uv_close((uv_handle_t *)&mute_conn, NULL);
    uv_close((uv_handle_t *)&mute, NULL);
    loop_finish(&loop);
}

/* ---- probes and rejoins (a replica on a new directory) -------------------------------------- */

struct member_view {
    uint64_t last_index; /* what this side answers a probe with */
    bool rejoining;      /* what this side's dialled connections say */
    int rejoins;         /* peers that said rejoin */
    uint64_t rejoin_id;
};

static uint64_t mv_last_index(void *user)
{
    return ((struct member_view *)user)->last_index;
}

static bool mv_rejoining(void *user)
{
    return ((struct member_view *)user)->rejoining;
}

static void mv_rejoin(void *user, uint64_t id)
{
    struct member_view *m = user;
    m->rejoins++;
    m->rejoin_id = id;
}

struct probe {
    bool done;
    int status;
    uint64_t id, last_index;
};

static void on_probed(void *user, uint64_t id, int status, uint64_t last_index)
{
    struct probe *p = user;
    assert_false(p->done);
    p->done = true;
    p->id = id;
    p->status = status;
    p->last_index = last_index;
}

static void member_init(struct side *s, uv_loop_t *loop, const struct security_ctx *sec,
                        struct member_view *m, raft_id id, const char *address)
{
    memset(s, 0, sizeof *s);
    struct raft_transport_opts o = {.sec = sec,
                                    .cluster = CLUSTER,
                                    .handshake_timeout_ms = 2000,
                                    .user = m,
                                    .last_index = mv_last_index,
                                    .rejoining = mv_rejoining,
                                    .rejoin = mv_rejoin};
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(raft_transport_init(&s->t, loop, &o, err, sizeof err), 0);
    s->t.data = s;
    assert_int_equal(s->t.init(&s->t, id, address), 0);
}

/* A listener that leaves its connections in the backlog: a dialler's handshake never starts. */
static void never_accept(uv_stream_t *listener, int status)
{
    (void)listener;
    (void)status;
}

static void probe(struct side *s, struct probe *p, uint64_t id, const char *address)
{
    memset(p, 0, sizeof *p);
    assert_int_equal(raft_transport_probe(&s->t, id, address, on_probed, p), 0);
    assert_false(p->done); /* never from inside the call */
}

/* A transport listening before Raft starts answers probes with its last index and closes a
 * connection for Raft (the dialler's connect fails; it tries again later); once Raft listens, a
 * connection that says rejoin reaches Raft and the acceptor hears of it; probes of a port
 * nobody listens on, and of a transport with another token, fail; close() ends a probe in
 * flight. */
static void check_probe_and_rejoin(struct security_ctx *sec, struct security_ctx *wrong)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct member_view ma = {0}, md = {0}, mw = {0};
    struct side a, d, w;
    member_init(&a, &loop, sec, &ma, 1, "127.0.0.1:0");
    member_init(&d, &loop, sec, &md, 2, "127.0.0.1:7002");
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(raft_transport_listen(&a.t, "127.0.0.1:0", err, sizeof err), 0);
    int port = raft_transport_port(&a.t);
    assert_true(port > 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    struct probe p;
    probe(&d, &p, 1, addr);
    RUN_UNTIL(&loop, p.done, WAIT_MS);
    assert_int_equal(p.status, 0);
    assert_int_equal(p.id, 1);
    assert_int_equal(p.last_index, 0);
    /* Before Raft listens: a connection for Raft is closed, nothing accepted. */
    struct dial dl;
    dial(&d, &dl, 1, addr);
    RUN_UNTIL(&loop, dl.done, WAIT_MS);
    assert_int_equal(dl.status, RAFT_NOCONNECTION);
    assert_int_equal(a.accepts, 0);
    /* Raft listens on the same port; the answer follows the log. */
    assert_int_equal(a.t.listen(&a.t, on_accept), 0);
    assert_int_equal(raft_transport_port(&a.t), port);
    ma.last_index = 57;
    probe(&d, &p, 1, addr);
    RUN_UNTIL(&loop, p.done, WAIT_MS);
    assert_int_equal(p.status, 0);
    assert_int_equal(p.last_index, 57);
    assert_int_equal(a.accepts, 0); /* a probe never reaches Raft */
    /* A plain connection, then one that says rejoin. */
    dial(&d, &dl, 1, addr);
    RUN_UNTIL(&loop, dl.done && a.accepts == 1, WAIT_MS);
    assert_int_equal(dl.status, 0);
    assert_int_equal(ma.rejoins, 0);
    close_stream(dl.stream);
    close_stream(a.accept_stream);
    a.accept_stream = NULL;
    md.rejoining = true;
    dial(&d, &dl, 1, addr);
    RUN_UNTIL(&loop, dl.done && a.accepts == 2, WAIT_MS);
    assert_int_equal(dl.status, 0);
    assert_int_equal(ma.rejoins, 1);
    assert_int_equal(ma.rejoin_id, 2);
    close_stream(dl.stream);
    close_stream(a.accept_stream);
    a.accept_stream = NULL;
    /* Refusals: another token, a port nobody listens on, a malformed address. */
    member_init(&w, &loop, wrong, &mw, 3, "127.0.0.1:7003");
    probe(&w, &p, 1, addr);
    RUN_UNTIL(&loop, p.done, WAIT_MS);
    assert_int_equal(p.status, RAFT_NOCONNECTION);
    assert_int_equal(ma.rejoins, 1);
    side_close(&loop, &a);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    probe(&d, &p, 1, addr);
    RUN_UNTIL(&loop, p.done, WAIT_MS);
    assert_int_equal(p.status, RAFT_NOCONNECTION);
    assert_int_equal(raft_transport_probe(&d.t, 1, "no-port", on_probed, &p), SLUICE_ERR_INVALID);
    /* close() with a probe in flight (to a listener that never answers): cancelled. */
    uv_tcp_t mute;
    assert_int_equal(uv_tcp_init(&loop, &mute), 0);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    assert_int_equal(uv_tcp_bind(&mute, (struct sockaddr *)&sa, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&mute, 8, never_accept), 0);
    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    uv_tcp_getsockname(&mute, (struct sockaddr *)&ss, &sslen);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(((struct sockaddr_in *)&ss)->sin_port));
    probe(&d, &p, 1, addr);
    run_for(&loop, 100);
    assert_false(p.done);
    side_close(&loop, &d);
    assert_true(p.done);
    assert_int_equal(p.status, RAFT_CANCELED);
    side_close(&loop, &w);
    uv_close((uv_handle_t *)&mute, NULL);
    loop_finish(&loop);
}

static void test_probe_and_rejoin(void **unused)
{
    (void)unused;
    struct security_ctx *sec = sec_new(TOKEN_A), *wrong = sec_new(TOKEN_B);
    check_probe_and_rejoin(sec, wrong);
    sec_free(sec);
    sec_free(wrong);
}

static void test_probe_and_rejoin_tls(void **unused)
{
    (void)unused;
    struct security_ctx *sec = tls_sec_new(TOKEN_A), *wrong = tls_sec_new(TOKEN_B);
    check_probe_and_rejoin(sec, wrong);
    sec_free(sec);
    sec_free(wrong);
}

/* A port nobody listens on, and a connect that times out in its handshake. */
static void test_connect_failures(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct side d;
    side_init(&d, &loop, NULL, CLUSTER, 300, 2, "127.0.0.1:7002");
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    struct dial d1;
    dial(&d, &d1, 1, addr);
    RUN_UNTIL(&loop, d1.done, WAIT_MS);
    assert_int_equal(d1.status, RAFT_NOCONNECTION);

    uv_tcp_t mute;
    mute_accepted = 0;
    assert_int_equal(uv_tcp_init(&loop, &mute), 0);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    assert_int_equal(uv_tcp_bind(&mute, (struct sockaddr *)&sa, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&mute, 8, mute_on_connection), 0);
    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    uv_tcp_getsockname(&mute, (struct sockaddr *)&ss, &sslen);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(((struct sockaddr_in *)&ss)->sin_port));
    struct dial d2;
    uint64_t start = uv_now(&loop);
    dial(&d, &d2, 1, addr);
    RUN_UNTIL(&loop, d2.done, WAIT_MS);
    assert_int_equal(d2.status, RAFT_NOCONNECTION);
    assert_true(uv_now(&loop) - start >= 250);
    assert_int_equal(raft_transport_refused(&d.t), 2);

    side_close(&loop, &d);
    uv_close((uv_handle_t *)&mute_conn, NULL);
    uv_close((uv_handle_t *)&mute, NULL);
    loop_finish(&loop);
}

/* bind_address overrides the address given to init; dialling works by host name (resolved) and
 * by bracketed IPv6 address. */
static void check_dial(const char *bind, const char *dial_host)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct side a, d;
    memset(&a, 0, sizeof a);
    struct raft_transport_opts o = {.cluster = CLUSTER, .bind_address = bind};
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(raft_transport_init(&a.t, &loop, &o, err, sizeof err), 0);
    a.t.data = &a;
    /* An address this machine does not have: only bind_address can be listened on. */
    assert_int_equal(a.t.init(&a.t, 1, "192.0.2.1:7001"), 0);
    int port = side_listen(&a);
    side_init(&d, &loop, NULL, CLUSTER, 2000, 2, "127.0.0.1:7002");
    char addr[96];
    snprintf(addr, sizeof addr, "%s:%d", dial_host, port);
    struct dial dl;
    dial(&d, &dl, 1, addr);
    RUN_UNTIL(&loop, dl.done && a.accepts == 1, WAIT_MS);
    assert_int_equal(dl.status, 0);
    assert_int_equal(a.accept_id, 2);
    close_stream(dl.stream);
    close_stream(a.accept_stream);
    side_close(&loop, &a);
    side_close(&loop, &d);
    loop_finish(&loop);
}

/* Whether "localhost" resolves to an address of family af. */
static bool localhost_has(int af)
{
    struct addrinfo hints = {.ai_family = af, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo("localhost", NULL, &hints, &res);
    if (res)
        freeaddrinfo(res);
    return rc == 0;
}

static void test_addresses(void **unused)
{
    (void)unused;
    check_dial("127.0.0.1:0", "127.0.0.1");
    check_dial("[::1]:0", "[::1]");
    /* By name, listening on each loopback "localhost" names: where it names both (Debian's
     * /etc/hosts), one of the two dials first tries the address nobody listens on and must go
     * on to the next. */
    bool v4 = localhost_has(AF_INET), v6 = localhost_has(AF_INET6);
    printf("    localhost resolves to%s%s\n", v4 ? " 127.0.0.1" : "", v6 ? " ::1" : "");
    assert_true(v4 || v6);
    if (v4)
        check_dial("127.0.0.1:0", "localhost");
    if (v6)
        check_dial("[::1]:0", "localhost");
}

static void test_init_refusals(void **unused)
{
    (void)unused;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct raft_uv_transport t;
    char err[SLUICE_ERRMSG_SIZE];
    struct raft_transport_opts o = {0};
    assert_int_equal(raft_transport_init(&t, &loop, &o, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "raft transport: no cluster string");
    o.cluster = CLUSTER;
    o.bind_address = "nowhere";
    assert_int_equal(raft_transport_init(&t, &loop, &o, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "raft transport: bind address nowhere: expected HOST:PORT");
    /* TLS that can accept but not dial (no CA). */
    struct security_ctx *sec = tls_test_sec("node", NULL, SECURITY_SERVER);
    o.bind_address = NULL;
    o.sec = sec;
    assert_int_equal(raft_transport_init(&t, &loop, &o, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "TLS on the Raft port needs both a certificate and key (to accept) "
                             "and a CA (to dial)");
    security_ctx_free(sec);
    loop_finish(&loop);
}

/* ---- (7) a three-node C-Raft cluster over the transport ----------------------------------- */

struct node {
    struct raft raft;
    struct raft_io io;
    struct raft_fsm fsm;
    struct side side;
    char dir[256];
    char address[64];
    unsigned applied;
    bool closed;
};

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    struct node *n = fsm->data;
    if (buf->len == 8 && memcmp(buf->base, "sluice!!", 8) == 0)
        n->applied++;
    *result = NULL;
    return 0;
}

static void on_raft_closed(struct raft *r)
{
    struct node *n = r->data;
    n->closed = true;
}

struct apply_req {
    struct raft_apply req;
    bool done;
    int status;
};

static void on_applied(struct raft_apply *req, int status, void *result)
{
    (void)result;
    struct apply_req *a = req->data;
    a->done = true;
    a->status = status;
}

static struct node *leader_of(struct node *nodes, int count)
{
    for (int i = 0; i < count; i++)
        if (raft_state(&nodes[i].raft) == RAFT_LEADER)
            return &nodes[i];
    return NULL;
}

static void check_three_node_cluster(bool tls)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct security_ctx *sec = tls ? tls_sec_new(TOKEN_A) : sec_new(TOKEN_A);
    struct node nodes[3];
    memset(nodes, 0, sizeof nodes);
    char cluster[256] = "";
    for (int i = 0; i < 3; i++) {
        int port = free_port();
        assert_true(port > 0);
        snprintf(nodes[i].address, sizeof nodes[i].address, "127.0.0.1:%d", port);
        size_t len = strlen(cluster);
        snprintf(cluster + len, sizeof cluster - len, "%s%d=%s", i ? "," : "", i + 1,
                 nodes[i].address);
    }
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            raft_configuration_add(&conf, (raft_id)(i + 1), nodes[i].address, RAFT_VOTER), 0);
    for (int i = 0; i < 3; i++) {
        struct node *n = &nodes[i];
        snprintf(n->dir, sizeof n->dir, "%s/%snode%d", tmp_dir(), tls ? "tls-" : "", i + 1);
        assert_int_equal(mkdir(n->dir, 0700), 0);
        struct raft_transport_opts o = {
            .sec = sec, .cluster = cluster, .handshake_timeout_ms = 2000};
        char err[SLUICE_ERRMSG_SIZE];
        assert_int_equal(raft_transport_init(&n->side.t, &loop, &o, err, sizeof err), 0);
        n->side.t.data = &n->side;
        assert_int_equal(raft_uv_init(&n->io, &loop, n->dir, &n->side.t), 0);
        raft_uv_set_connect_retry_delay(&n->io, 100);
        n->fsm.version = 1;
        n->fsm.data = n;
        n->fsm.apply = fsm_apply;
        assert_int_equal(raft_init(&n->raft, &n->io, &n->fsm, (raft_id)(i + 1), n->address), 0);
        n->raft.data = n;
        raft_set_election_timeout(&n->raft, 300);
        raft_set_heartbeat_timeout(&n->raft, 50);
        assert_int_equal(raft_bootstrap(&n->raft, &conf), 0);
    }
    raft_configuration_close(&conf);
    for (int i = 0; i < 3; i++)
        assert_int_equal(raft_start(&nodes[i].raft), 0);

    RUN_UNTIL(&loop, leader_of(nodes, 3) != NULL, 20000);
    struct node *leader = leader_of(nodes, 3);
    print_message("leader: %s\n", leader->address);

    struct apply_req ar = {0};
    ar.req.data = &ar;
    struct raft_buffer buf = {.base = raft_malloc(8), .len = 8};
    memcpy(buf.base, "sluice!!", 8);
    assert_int_equal(raft_apply(&leader->raft, &ar.req, &buf, 1, on_applied), 0);
    RUN_UNTIL(&loop,
              ar.done && nodes[0].applied == 1 && nodes[1].applied == 1 && nodes[2].applied == 1,
              20000);
    assert_int_equal(ar.status, 0);

    /* A stranger transport with a wrong token (and the right cluster) dials node 1 and is
     * refused; the cluster goes on. */
    uint64_t before = raft_transport_refused(&nodes[0].side.t);
    struct security_ctx *wrong = tls ? tls_sec_new(TOKEN_B) : sec_new(TOKEN_B);
    struct side s;
    side_init(&s, &loop, wrong, cluster, 2000, 4, "127.0.0.1:7999");
    struct dial dl;
    dial(&s, &dl, 1, nodes[0].address);
    RUN_UNTIL(&loop, dl.done && raft_transport_refused(&nodes[0].side.t) > before, WAIT_MS);
    assert_int_equal(dl.status, RAFT_NOCONNECTION);
    assert_int_equal(raft_transport_refused(&nodes[0].side.t), before + 1);
    side_close(&loop, &s);
    sec_free(wrong);

    struct apply_req ar2 = {0};
    ar2.req.data = &ar2;
    leader = leader_of(nodes, 3);
    assert_non_null(leader);
    buf.base = raft_malloc(8);
    buf.len = 8;
    memcpy(buf.base, "sluice!!", 8);
    assert_int_equal(raft_apply(&leader->raft, &ar2.req, &buf, 1, on_applied), 0);
    RUN_UNTIL(&loop,
              ar2.done && nodes[0].applied == 2 && nodes[1].applied == 2 && nodes[2].applied == 2,
              20000);

    for (int i = 0; i < 3; i++)
        raft_close(&nodes[i].raft, on_raft_closed);
    RUN_UNTIL(&loop, nodes[0].closed && nodes[1].closed && nodes[2].closed, WAIT_MS);
    for (int i = 0; i < 3; i++) {
        raft_uv_close(&nodes[i].io);
        raft_transport_release(&nodes[i].side.t);
    }
    loop_finish(&loop);
    sec_free(sec);
}

static void test_three_node_cluster(void **unused)
{
    (void)unused;
    check_three_node_cluster(false);
}

static void test_three_node_cluster_tls(void **unused)
{
    (void)unused;
    check_three_node_cluster(true);
}

static int teardown(void **unused)
{
    tls_certs_cleanup();
    return tmp_teardown(unused);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the dispatcher does (raft_transport.h) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connects_with_token),
        cmocka_unit_test(test_connects_without_token),
        cmocka_unit_test(test_wrong_token),
        cmocka_unit_test(test_no_token_on_one_side),
        cmocka_unit_test(test_cluster_mismatch),
        cmocka_unit_test(test_tls_connects),
        cmocka_unit_test(test_tls_refused),
        cmocka_unit_test(test_strangers),
        cmocka_unit_test(test_handshake_bound),
        cmocka_unit_test(test_close_with_pending_connects),
        cmocka_unit_test(test_probe_and_rejoin),
        cmocka_unit_test(test_probe_and_rejoin_tls),
        cmocka_unit_test(test_connect_failures),
        cmocka_unit_test(test_addresses),
        cmocka_unit_test(test_init_refusals),
        cmocka_unit_test(test_three_node_cluster),
        cmocka_unit_test(test_three_node_cluster_tls),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
