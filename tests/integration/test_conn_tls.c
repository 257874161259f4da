/* conn.h's TLS byte layer on its own, over a real loopback socket: frames written before the
 * handshake completes (conn_send_elements among them) are held and arrive, in order and intact,
 * once it has; their sent callbacks run exactly once, after the bytes are written, or with
 * UV_ECANCELED when the conn closes before the handshake, and always before on_closed; the
 * backlog counts from the moment a frame is written. Every test ends with uv_loop_close() == 0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/conn.h"
#include "common/error.h"
#include "common/ewire.h"
#include "common/security.h"

#include "lib/tls.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 10000

static struct security_ctx *server_sec, *client_sec;

struct end {
    struct conn conn;
    int envelopes;
    uint64_t ids[8];
    size_t lens[8];
    bool payload_ok[8];
    int errors;
    int last_error;
    bool closed;
    int sent_calls_at_close; /* sent callbacks that had run when on_closed ran */
};

struct sent_log {
    int calls;
    int status;
};

static struct sent_log sent_log;
static const uint8_t *payload_src;

static void on_sent(void *arg, int status)
{
    struct sent_log *s = arg;
    s->calls++;
    s->status = status;
}

static void on_envelope(struct conn *c, const Sluice__Envelope *env)
{
    struct end *e = (struct end *)c;
    int i = e->envelopes++;
    if (i >= 8)
        return;
    e->ids[i] = env->id;
    if (env->body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY) {
        const ProtobufCBinaryData *p = &env->get_elements_reply->payload;
        e->lens[i] = p->len;
        e->payload_ok[i] = p->len == 0 || memcmp(p->data, payload_src, p->len) == 0;
    }
}

static void on_error(struct conn *c, int code, const char *why)
{
    (void)why;
    struct end *e = (struct end *)c;
    e->errors++;
    e->last_error = code;
}

static void on_closed(struct conn *c)
{
    struct end *e = (struct end *)c;
    e->closed = true;
    e->sent_calls_at_close = sent_log.calls;
}

static const struct conn_ops ops = {on_envelope, on_error, on_closed};

/* ---- a listener that hands its one connection to a TLS server end -----------------------------
 */

struct listener {
    uv_tcp_t tcp;
    struct end *server;
    bool accepted, closed;
    int port;
};

static void on_connection(uv_stream_t *s, int status)
{
    struct listener *l = (struct listener *)s;
    assert_int_equal(status, 0);
    struct end *e = l->server;
    if (l->accepted)
        return;
    l->accepted = true;
    assert_int_equal(conn_init(&e->conn, s->loop, &ops, 0, 0), 0);
    assert_int_equal(uv_accept(s, (uv_stream_t *)&e->conn.tcp), 0);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(conn_use_tls(&e->conn, server_sec->tls, NULL, err, sizeof err), 0);
    assert_int_equal(conn_start(&e->conn), 0);
}

static void listen_on(uv_loop_t *loop, struct listener *l, struct end *server)
{
    memset(l, 0, sizeof *l);
    l->server = server;
    assert_int_equal(uv_tcp_init(loop, &l->tcp), 0);
    struct sockaddr_in sa;
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &sa), 0);
    assert_int_equal(uv_tcp_bind(&l->tcp, (struct sockaddr *)&sa, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&l->tcp, 4, on_connection), 0);
    struct sockaddr_in bound;
    int len = sizeof bound;
    assert_int_equal(uv_tcp_getsockname(&l->tcp, (struct sockaddr *)&bound, &len), 0);
    l->port = ntohs(bound.sin_port);
}

static void on_listener_closed(uv_handle_t *h)
{
    ((struct listener *)h)->closed = true;
}

/* ---- the dialling end -------------------------------------------------------------------------
 */

struct dial {
    uv_connect_t req;
    struct end *client;
    bool connected;
};

static void on_connected(uv_connect_t *req, int status)
{
    struct dial *d = req->data;
    if (status == UV_ECANCELED)
        return; /* closed while connecting */
    assert_int_equal(status, 0);
    assert_int_equal(conn_start(&d->client->conn), 0);
    d->connected = true;
}

static void dial(uv_loop_t *loop, struct dial *d, struct end *client, int port)
{
    memset(d, 0, sizeof *d);
    d->client = client;
    assert_int_equal(conn_init(&client->conn, loop, &ops, 0, 0), 0);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(conn_use_tls(&client->conn, client_sec->tls, "127.0.0.1", err, sizeof err), 0);
    struct sockaddr_in sa;
    assert_int_equal(uv_ip4_addr("127.0.0.1", port, &sa), 0);
    d->req.data = d;
    assert_int_equal(
        uv_tcp_connect(&d->req, &client->conn.tcp, (struct sockaddr *)&sa, on_connected), 0);
}

static void run_until(uv_loop_t *loop, const bool *flag, const int *count, int want)
{
    uv_update_time(loop);
    uint64_t end = uv_now(loop) + WAIT_MS;
    while (!(flag ? *flag : *count >= want) && uv_now(loop) < end)
        uv_run(loop, UV_RUN_ONCE);
    assert_true(flag ? *flag : *count >= want);
}

static int keepalive_count;

static void tick(uv_timer_t *t)
{
    (void)t;
    keepalive_count++;
}

/* A timer keeps uv_run from returning at once while waiting for a condition. */
static void with_ticker(uv_loop_t *loop, uv_timer_t *t)
{
    assert_int_equal(uv_timer_init(loop, t), 0);
    assert_int_equal(uv_timer_start(t, tick, 10, 10), 0);
}

static void finish(uv_loop_t *loop, uv_timer_t *t)
{
    uv_close((uv_handle_t *)t, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* Frames written by the dialling end before its handshake, the server's Hello written before
 * its own: all arrive after it, in order, and the pieces of the elements frame are intact. */
static void test_held_frames_arrive(void **state)
{
    (void)state;
    enum { PAYLOAD = 300000 };
    uint8_t *src = malloc(PAYLOAD);
    assert_non_null(src);
    for (size_t i = 0; i < PAYLOAD; i++)
        src[i] = (uint8_t)(i * 7 + (i >> 8));
    payload_src = src;
    memset(&sent_log, 0, sizeof sent_log);

    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_t ticker;
    with_ticker(&loop, &ticker);
    struct end server, client;
    memset(&server, 0, sizeof server);
    memset(&client, 0, sizeof client);
    struct listener l;
    listen_on(&loop, &l, &server);
    struct dial d;
    dial(&loop, &d, &client, l.port);

    /* Before the connection exists, let alone the handshake. */
    assert_int_equal(conn_send_hello(&client.conn, SLUICE__ROLE__ROLE_CLIENT, 7, NULL), 0);
    uv_buf_t segs[3] = {uv_buf_init((char *)src, 10), uv_buf_init((char *)src + 10, 100000),
                        uv_buf_init((char *)src + 100010, PAYLOAD - 100010)};
    assert_int_equal(conn_send_elements(&client.conn, 42, 3, true, segs, 3, on_sent, &sent_log), 0);
    /* The array may go at once; only the bytes must stay. */
    memset(segs, 0, sizeof segs);
    assert_true(client.conn.pending_write >= PAYLOAD);
    assert_int_equal(sent_log.calls, 0);

    run_until(&loop, NULL, &server.envelopes, 2);
    assert_int_equal(server.envelopes, 2);
    assert_int_equal(server.ids[0], 0); /* the Hello */
    assert_int_equal(server.ids[1], 42);
    assert_int_equal(server.lens[1], PAYLOAD);
    assert_true(server.payload_ok[1]);
    run_until(&loop, NULL, &sent_log.calls, 1);
    assert_int_equal(sent_log.calls, 1);
    assert_int_equal(sent_log.status, 0);
    assert_int_equal(client.conn.pending_write, 0);
    assert_int_equal(server.errors + client.errors, 0);

    /* The server's end answers over the session, both ways. */
    assert_int_equal(conn_send_hello(&server.conn, SLUICE__ROLE__ROLE_WORKER, 9, NULL), 0);
    run_until(&loop, NULL, &client.envelopes, 1);
    assert_int_equal(client.ids[0], 0);

    conn_close(&client.conn);
    conn_close(&server.conn);
    uv_close((uv_handle_t *)&l.tcp, on_listener_closed);
    run_until(&loop, &client.closed, NULL, 0);
    run_until(&loop, &server.closed, NULL, 0);
    run_until(&loop, &l.closed, NULL, 0);
    assert_int_equal(sent_log.calls, 1);
    finish(&loop, &ticker);
    free(src);
}

/* A conn closed before its handshake completes: the held elements frame's sent runs once, with
 * UV_ECANCELED, before on_closed; nothing is left counted. */
static void test_held_frames_cancelled(void **state)
{
    (void)state;
    static uint8_t src[5000];
    payload_src = src;
    memset(&sent_log, 0, sizeof sent_log);
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_t ticker;
    with_ticker(&loop, &ticker);
    struct end server, client;
    memset(&server, 0, sizeof server);
    memset(&client, 0, sizeof client);
    struct listener l;
    listen_on(&loop, &l, &server);
    struct dial d;
    dial(&loop, &d, &client, l.port);
    uv_buf_t seg = uv_buf_init((char *)src, sizeof src);
    assert_int_equal(conn_send_elements(&client.conn, 5, 1, false, &seg, 1, on_sent, &sent_log), 0);
    assert_true(client.conn.pending_write >= sizeof src);
    conn_close(&client.conn);
    /* Closed: nothing more is taken. */
    assert_int_equal(conn_send_elements(&client.conn, 6, 1, false, &seg, 1, on_sent, &sent_log),
                     SLUICE_ERR_CLOSED);
    run_until(&loop, &client.closed, NULL, 0);
    assert_int_equal(sent_log.calls, 1);
    assert_int_equal(sent_log.status, UV_ECANCELED);
    assert_int_equal(client.sent_calls_at_close, 1);
    assert_int_equal(client.errors, 0); /* a close the owner asked for is no error */

    /* The server end, if it got the connection at all, sees it go. */
    uv_close((uv_handle_t *)&l.tcp, on_listener_closed);
    run_until(&loop, &l.closed, NULL, 0);
    if (l.accepted) {
        run_until(&loop, &server.closed, NULL, 0);
        assert_int_equal(server.envelopes, 0);
    }
    finish(&loop, &ticker);
}

static int setup(void **state)
{
    (void)state;
    server_sec = tls_test_sec("node", "ca", SECURITY_SERVER);
    client_sec = tls_test_sec("node", "ca", SECURITY_CLIENT);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    security_ctx_free(server_sec);
    security_ctx_free(client_sec);
    tls_certs_cleanup();
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_frames_arrive),
        cmocka_unit_test(test_held_frames_cancelled),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
