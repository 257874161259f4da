/* The RPC layer over real sockets on 127.0.0.1: handshakes, pipelined calls answered out of
 * order, reconnection with backoff, timeouts, server restarts, version mismatches both ways,
 * malformed input from raw sockets, Error replies, a 32 MiB reply, backpressure, and closing.
 * The tests that use only rpc.h's client and server run a second time over mutual TLS, and TLS
 * has tests of its own: garbage and plain peers against a TLS server, a TLS client against a
 * plain server, a client certificate from another CA. Every wait is bounded by a deadline timer,
 * and every test ends with uv_loop_close() == 0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/conn.h"
#include "common/error.h"
#include "common/frame.h"
#include "common/log.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/security.h"

#include "lib/clock.h"
#include "lib/loop.h"
#include "lib/net.h"
#include "lib/tls.h"

#define WAIT_MS 10000

/* NULL: plain TCP. The TLS group sets them for every server and client the fixtures make. */
static struct security_ctx *sec_server, *sec_client;

/* ---- byte strings for raw sockets --------------------------------------------------------------
 */

struct bytes {
    uint8_t *p;
    size_t len, cap;
};

static void bytes_put(struct bytes *b, const void *data, size_t len)
{
    if (b->len + len > b->cap) {
        b->cap = (b->len + len) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
}

static void bytes_put_u32(struct bytes *b, uint32_t v)
{
    uint8_t h[4];
    frame_write_header(h, v);
    bytes_put(b, h, 4);
}

static void bytes_put_envelope(struct bytes *b, const Sluice__Envelope *env)
{
    size_t n = sluice__envelope__get_packed_size(env);
    uint8_t *tmp = malloc(n);
    assert_non_null(tmp);
    sluice__envelope__pack(env, tmp);
    bytes_put_u32(b, (uint32_t)n);
    bytes_put(b, tmp, n);
    free(tmp);
}

static void bytes_put_hello(struct bytes *b, uint32_t version)
{
    Sluice__Hello hello = SLUICE__HELLO__INIT;
    hello.version = version;
    hello.role = SLUICE__ROLE__ROLE_CLIENT;
    hello.incarnation = 77;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    bytes_put_envelope(b, &env);
}

static void bytes_put_get_elements(struct bytes *b, uint64_t id, uint64_t task, uint64_t mode,
                                   uint64_t max_bytes)
{
    Sluice__GetElementsRequest req = SLUICE__GET_ELEMENTS_REQUEST__INIT;
    req.task_id = task;
    req.client_id = mode;
    req.max_bytes = max_bytes;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.id = id;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS;
    env.get_elements = &req;
    bytes_put_envelope(b, &env);
}

static uint8_t pattern_byte(size_t i, uint64_t task)
{
    return (uint8_t)(i * 131 + task);
}

/* ---- the test server ---------------------------------------------------------------------------
 */

/* How the handler treats a GetElementsRequest, chosen by its client_id field. */
enum {
    MODE_ANSWER = 0,  /* reply now with count = task_id */
    MODE_HOLD = 1,    /* keep a reference and answer when the test says */
    MODE_PAYLOAD = 2, /* reply now with max_bytes bytes of pattern */
    MODE_ERROR = 3,   /* reply now with an Error */
};

struct held {
    struct rpc_conn *conn;
    uint64_t id, task;
};

struct server_fx {
    struct rpc_server *srv;
    uint64_t incarnation;
    int opens, closes, requests;
    Sluice__Role peer_role;
    uint64_t peer_incarnation;
    char peer_name[64];
    struct held held[1100];
    size_t nheld;
    size_t max_pending; /* the largest rpc_conn_pending_write seen right after a reply */
    bool closed;
    /* on_answered: requests answered, of them GetElements, and the longest time one took. */
    int answered, answered_elements;
    double answered_max_s;
    /* A replica that is not the leader: every request is answered NOT_LEADER naming leader
     * ("" for none). */
    bool follower;
    char leader[64];
};

static void fx_on_answered(void *user, int body_case, double seconds)
{
    struct server_fx *fx = user;
    fx->answered++;
    fx->answered_elements += body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS;
    assert_true(seconds >= 0 && seconds < 60);
    if (seconds > fx->answered_max_s)
        fx->answered_max_s = seconds;
}

static void fx_on_open(struct rpc_server *srv, struct rpc_conn *conn, void *user)
{
    struct server_fx *fx = user;
    fx->opens++;
    fx->peer_role = rpc_conn_peer_role(conn);
    fx->peer_incarnation = rpc_conn_peer_incarnation(conn);
    snprintf(fx->peer_name, sizeof fx->peer_name, "%s", rpc_conn_peer_name(conn));
    assert_true(rpc_conn_is_open(conn));
}

static void fx_on_close(struct rpc_server *srv, struct rpc_conn *conn, void *user)
{
    struct server_fx *fx = user;
    fx->closes++;
    assert_false(rpc_conn_is_open(conn));
}

static void reply_count(struct rpc_conn *conn, uint64_t id, uint64_t task)
{
    Sluice__GetElementsReply body = SLUICE__GET_ELEMENTS_REPLY__INIT;
    body.count = (uint32_t)task;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY;
    env.get_elements_reply = &body;
    assert_int_equal(rpc_conn_reply(conn, id, &env), 0);
    assert_int_equal(env.id, id);
}

static void fx_on_request(struct rpc_server *srv, struct rpc_conn *conn,
                          const Sluice__Envelope *req, void *user)
{
    struct server_fx *fx = user;
    fx->requests++;
    assert_ptr_equal(srv, fx->srv);
    if (fx->follower) {
        assert_int_equal(rpc_conn_reply_not_leader(conn, req->id, fx->leader, "not the leader"), 0);
        return;
    }
    if (req->body_case == SLUICE__ENVELOPE__BODY_STATUS) {
        Sluice__StatusReply body = SLUICE__STATUS_REPLY__INIT;
        body.json = "{\"ok\":true}";
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_STATUS_REPLY;
        env.status_reply = &body;
        assert_int_equal(rpc_conn_reply(conn, req->id, &env), 0);
        return;
    }
    if (req->body_case != SLUICE__ENVELOPE__BODY_GET_ELEMENTS) {
        assert_int_equal(rpc_conn_reply_error(conn, req->id, SLUICE_ERR_UNSUPPORTED,
                                              "unsupported body %d", (int)req->body_case),
                         0);
        return;
    }
    const Sluice__GetElementsRequest *g = req->get_elements;
    switch (g->client_id) {
    case MODE_ANSWER:
        reply_count(conn, req->id, g->task_id);
        break;
    case MODE_HOLD:
        assert_true(fx->nheld < sizeof fx->held / sizeof fx->held[0]);
        rpc_conn_ref(conn);
        fx->held[fx->nheld++] = (struct held){conn, req->id, g->task_id};
        break;
    case MODE_PAYLOAD: {
        Sluice__GetElementsReply body = SLUICE__GET_ELEMENTS_REPLY__INIT;
        body.count = (uint32_t)g->task_id;
        body.payload.len = g->max_bytes;
        body.payload.data = malloc(g->max_bytes);
        assert_non_null(body.payload.data);
        for (size_t i = 0; i < g->max_bytes; i++)
            body.payload.data[i] = pattern_byte(i, g->task_id);
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY;
        env.get_elements_reply = &body;
        int rc = rpc_conn_reply(conn, req->id, &env);
        free(body.payload.data);
        if (rc == SLUICE_ERR_TOO_LARGE) {
            assert_true(rpc_conn_is_open(conn));
            assert_int_equal(rpc_conn_reply_error(conn, req->id, rc,
                                                  "reply of %" PRIu64 " bytes is too large",
                                                  g->max_bytes),
                             0);
            break;
        }
        assert_int_equal(rc, 0);
        if (rpc_conn_pending_write(conn) > fx->max_pending)
            fx->max_pending = rpc_conn_pending_write(conn);
        break;
    }
    case MODE_ERROR:
        assert_int_equal(rpc_conn_reply_error(conn, req->id, SLUICE_ERR_NOT_FOUND,
                                              "task %" PRIu64 " not found\nsecond line",
                                              g->task_id),
                         0);
        break;
    default:
        fail_msg("unexpected mode %" PRIu64, g->client_id);
    }
}

static void fx_start_opts(uv_loop_t *loop, struct server_fx *fx, int port, uint32_t max_frame,
                          size_t max_pending_write)
{
    memset(fx, 0, sizeof *fx);
    fx->incarnation = rpc_new_incarnation();
    struct rpc_server_opts opts = {
        .host = "127.0.0.1",
        .port = port,
        .role = SLUICE__ROLE__ROLE_DISPATCHER,
        .incarnation = fx->incarnation,
        .max_frame = max_frame,
        .max_pending_write = max_pending_write,
        .on_request = fx_on_request,
        .on_open = fx_on_open,
        .on_close = fx_on_close,
        .on_answered = fx_on_answered,
        .user = fx,
        .sec = sec_server,
    };
    char err[SLUICE_ERRMSG_SIZE];
    int rc = rpc_server_start(loop, &opts, &fx->srv, err, sizeof err);
    if (rc != 0)
        fail_msg("rpc_server_start: %s", err);
    assert_string_equal(rpc_server_host(fx->srv), "127.0.0.1");
    assert_true(rpc_server_port(fx->srv) > 0);
    if (port != 0)
        assert_int_equal(rpc_server_port(fx->srv), port);
}

static void fx_start(uv_loop_t *loop, struct server_fx *fx, int port)
{
    fx_start_opts(loop, fx, port, 0, 0);
}

static void fx_close(uv_loop_t *loop, struct server_fx *fx)
{
    rpc_server_close(fx->srv, set_flag, &fx->closed);
    RUN_UNTIL(loop, fx->closed, WAIT_MS);
    fx->srv = NULL;
}

/* Answers the held requests in the order given (indexes into held) and drops their references. */
static void fx_answer_held(struct server_fx *fx, const size_t *order, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        struct held *h = &fx->held[order ? order[k] : k];
        reply_count(h->conn, h->id, h->task);
        rpc_conn_unref(h->conn);
        h->conn = NULL;
    }
}

/* ---- the test client ---------------------------------------------------------------------------
 */

struct client_fx {
    struct rpc_client *cl;
    uint64_t incarnation;
    int connects;
    uint64_t last_peer_incarnation;
    bool closed;
};

static void cfx_on_connect(struct rpc_client *cl, uint64_t peer_incarnation, void *user)
{
    struct client_fx *cfx = user;
    assert_ptr_equal(cl, cfx->cl);
    assert_true(rpc_client_connected(cl));
    assert_true(rpc_client_peer_incarnation(cl) == peer_incarnation);
    cfx->connects++;
    cfx->last_peer_incarnation = peer_incarnation;
}

static void cfx_new_timeout(uv_loop_t *loop, struct client_fx *cfx, const char *address,
                            uint32_t connect_timeout_ms)
{
    memset(cfx, 0, sizeof *cfx);
    cfx->incarnation = rpc_new_incarnation();
    struct rpc_client_opts opts = {
        .address = address,
        .role = SLUICE__ROLE__ROLE_WORKER,
        .incarnation = cfx->incarnation,
        .connect_timeout_ms = connect_timeout_ms,
        .backoff_min_ms = 10,
        .backoff_max_ms = 100,
        .on_connect = cfx_on_connect,
        .user = cfx,
        .sec = sec_client,
    };
    char err[SLUICE_ERRMSG_SIZE];
    int rc = rpc_client_new(loop, &opts, &cfx->cl, err, sizeof err);
    if (rc != 0)
        fail_msg("rpc_client_new: %s", err);
    assert_string_equal(rpc_client_address(cfx->cl), address);
    assert_false(rpc_client_connected(cfx->cl));
    assert_true(rpc_client_peer_incarnation(cfx->cl) == 0);
}

static void cfx_new(uv_loop_t *loop, struct client_fx *cfx, const char *address)
{
    cfx_new_timeout(loop, cfx, address, 2000);
}

static void cfx_new_port(uv_loop_t *loop, struct client_fx *cfx, int port)
{
    char address[64];
    snprintf(address, sizeof address, "127.0.0.1:%d", port);
    cfx_new(loop, cfx, address);
}

static void cfx_close(uv_loop_t *loop, struct client_fx *cfx)
{
    rpc_client_close(cfx->cl, set_flag, &cfx->closed);
    RUN_UNTIL(loop, cfx->closed, WAIT_MS);
    cfx->cl = NULL;
}

/* What one call's callback saw. */
struct result {
    int done;
    int status;
    char msg[SLUICE_ERRMSG_SIZE];
    int body_case;
    uint32_t count;
    size_t payload_len;
    bool payload_ok;
    int error_code; /* from the reply's Error body, when there is one */
    uint64_t reply_id;
    uint64_t done_at; /* loop time */
    uv_loop_t *loop;
    /* Shared record of the order replies arrived in, when set. */
    size_t *arrivals, *narrivals, index;
};

static void on_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct result *r = user;
    r->done++;
    r->status = status;
    assert_non_null(msg);
    snprintf(r->msg, sizeof r->msg, "%s", msg);
    if (r->loop)
        r->done_at = uv_now(r->loop);
    if (r->arrivals)
        r->arrivals[(*r->narrivals)++] = r->index;
    if (reply == NULL)
        return;
    r->reply_id = reply->id;
    r->body_case = reply->body_case;
    if (reply->body_case == SLUICE__ENVELOPE__BODY_ERROR)
        r->error_code = reply->error->code;
    if (reply->body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY) {
        const Sluice__GetElementsReply *g = reply->get_elements_reply;
        r->count = g->count;
        r->payload_len = g->payload.len;
        r->payload_ok = true;
        for (size_t i = 0; i < g->payload.len; i++) {
            if (g->payload.data[i] != pattern_byte(i, g->count)) {
                r->payload_ok = false;
                break;
            }
        }
    }
    if (reply->body_case == SLUICE__ENVELOPE__BODY_STATUS_REPLY)
        snprintf(r->msg, sizeof r->msg, "%s", reply->status_reply->json);
}

static int call_status(struct rpc_client *cl, uint32_t timeout_ms, struct result *r)
{
    Sluice__StatusRequest body = SLUICE__STATUS_REQUEST__INIT;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_STATUS;
    env.status = &body;
    return rpc_call(cl, &env, timeout_ms, on_reply, r);
}

static int call_elements(struct rpc_client *cl, uint64_t task, uint64_t mode, uint64_t max_bytes,
                         uint32_t timeout_ms, struct result *r)
{
    Sluice__GetElementsRequest body = SLUICE__GET_ELEMENTS_REQUEST__INIT;
    body.task_id = task;
    body.client_id = mode;
    body.max_bytes = max_bytes;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS;
    env.get_elements = &body;
    int rc = rpc_call(cl, &env, timeout_ms, on_reply, r);
    if (rc == 0)
        assert_true(env.id > 0);
    return rc;
}

/* Expects a successful Status round trip. */
static void expect_status_ok(uv_loop_t *loop, struct rpc_client *cl)
{
    struct result r = {0};
    assert_int_equal(call_status(cl, 5000, &r), 0);
    RUN_UNTIL(loop, r.done, WAIT_MS);
    assert_int_equal(r.done, 1);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.body_case, SLUICE__ENVELOPE__BODY_STATUS_REPLY);
    assert_string_equal(r.msg, "{\"ok\":true}");
}

/* ---- raw sockets -------------------------------------------------------------------------------
 */

/* A hand-driven client: connects, writes a script of bytes, reads and decodes what comes back. */
struct raw {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    struct bytes out;
    struct frame_decoder dec;
    bool connected, written, eof, closed, decode_failed;
    int hellos;
    int error_code;
    char error_msg[SLUICE_ERRMSG_SIZE];
    char error_leader[64];
    uint64_t next_reply_id; /* the id the next GetElementsReply must carry */
    int replies;
    bool replies_ok;
    uint64_t reply_bytes; /* payload length every GetElementsReply must have */
};

static int raw_on_frame(void *user, const uint8_t *payload, size_t len)
{
    struct raw *r = user;
    Sluice__Envelope *env = sluice__envelope__unpack(NULL, len, payload);
    if (env == NULL) {
        r->decode_failed = true;
        return SLUICE_ERR_PROTOCOL;
    }
    if (env->body_case == SLUICE__ENVELOPE__BODY_HELLO) {
        r->hellos++;
    } else if (env->body_case == SLUICE__ENVELOPE__BODY_ERROR) {
        r->error_code = env->error->code;
        snprintf(r->error_msg, sizeof r->error_msg, "%s", env->error->message);
        snprintf(r->error_leader, sizeof r->error_leader, "%s", env->error->leader);
        if (env->id != 0)
            r->replies_ok = false;
    } else if (env->body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY) {
        if (env->id != r->next_reply_id++ || env->get_elements_reply->payload.len != r->reply_bytes)
            r->replies_ok = false;
        r->replies++;
    }
    sluice__envelope__free_unpacked(env, NULL);
    return 0;
}

static void raw_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char slab[65536];
    buf->base = slab;
    buf->len = sizeof slab;
}

static void raw_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct raw *r = (struct raw *)s;
    if (nread < 0) {
        r->eof = true;
        uv_read_stop(s);
        return;
    }
    if (nread > 0 && frame_decoder_feed(&r->dec, (const uint8_t *)buf->base, (size_t)nread,
                                        raw_on_frame, r) != 0)
        r->decode_failed = true;
}

static void raw_on_written(uv_write_t *req, int status)
{
    struct raw *r = req->data;
    r->written = status == 0;
}

static void raw_on_connect(uv_connect_t *req, int status)
{
    struct raw *r = req->data;
    assert_int_equal(status, 0);
    r->connected = true;
    if (r->out.len > 0) {
        uv_buf_t buf = uv_buf_init((char *)r->out.p, (unsigned)r->out.len);
        r->wreq.data = r;
        assert_int_equal(uv_write(&r->wreq, (uv_stream_t *)&r->tcp, &buf, 1, raw_on_written), 0);
    }
}

/* Connects to port and writes the bytes already put in r->out. With read false, nothing is read
 * until raw_read_start. rcvbuf, when not 0, shrinks the socket's receive buffer first. */
static void raw_connect(uv_loop_t *loop, struct raw *r, int port, bool read, int rcvbuf)
{
    frame_decoder_init(&r->dec, 64u << 20);
    r->next_reply_id = 1;
    r->replies_ok = true;
    assert_int_equal(uv_tcp_init_ex(loop, &r->tcp, AF_INET), 0);
    if (rcvbuf)
        assert_int_equal(uv_recv_buffer_size((uv_handle_t *)&r->tcp, &rcvbuf), 0);
    struct sockaddr_in sa;
    assert_int_equal(uv_ip4_addr("127.0.0.1", port, &sa), 0);
    r->creq.data = r;
    assert_int_equal(uv_tcp_connect(&r->creq, &r->tcp, (struct sockaddr *)&sa, raw_on_connect), 0);
    if (read)
        assert_int_equal(uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, raw_on_read), 0);
}

static void raw_read_start(struct raw *r)
{
    assert_int_equal(uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, raw_on_read), 0);
}

static void raw_on_closed(uv_handle_t *h)
{
    ((struct raw *)h)->closed = true;
}

static void raw_close(uv_loop_t *loop, struct raw *r)
{
    uv_close((uv_handle_t *)&r->tcp, raw_on_closed);
    RUN_UNTIL(loop, r->closed, WAIT_MS);
    frame_decoder_release(&r->dec);
    free(r->out.p);
}

/* A hand-driven server: accepts one connection, writes a script of bytes to it, then reads and
 * discards until the peer closes. */
struct fake_server {
    uv_tcp_t listener;
    uv_tcp_t conn;
    uv_write_t wreq;
    struct bytes script;
    int port;
    bool accepted, peer_closed, conn_closed, listener_closed;
};

static void fake_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct fake_server *f = s->data;
    if (nread < 0) {
        f->peer_closed = true;
        uv_read_stop(s);
    }
}

static void fake_on_written(uv_write_t *req, int status)
{
}

static void fake_on_connection(uv_stream_t *listener, int status)
{
    struct fake_server *f = listener->data;
    assert_int_equal(status, 0);
    if (f->accepted)
        return; /* one connection per test; later ones stay in the backlog */
    assert_int_equal(uv_tcp_init(listener->loop, &f->conn), 0);
    assert_int_equal(uv_accept(listener, (uv_stream_t *)&f->conn), 0);
    f->accepted = true;
    f->conn.data = f;
    if (f->script.len > 0) {
        uv_buf_t buf = uv_buf_init((char *)f->script.p, (unsigned)f->script.len);
        assert_int_equal(uv_write(&f->wreq, (uv_stream_t *)&f->conn, &buf, 1, fake_on_written), 0);
    }
    assert_int_equal(uv_read_start((uv_stream_t *)&f->conn, raw_alloc, fake_on_read), 0);
}

static void fake_start(uv_loop_t *loop, struct fake_server *f)
{
    assert_int_equal(uv_tcp_init(loop, &f->listener), 0);
    f->listener.data = f;
    struct sockaddr_in sa;
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &sa), 0);
    assert_int_equal(uv_tcp_bind(&f->listener, (struct sockaddr *)&sa, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&f->listener, 16, fake_on_connection), 0);
    struct sockaddr_in bound;
    int len = sizeof bound;
    assert_int_equal(uv_tcp_getsockname(&f->listener, (struct sockaddr *)&bound, &len), 0);
    f->port = ntohs(bound.sin_port);
}

static void fake_on_conn_closed(uv_handle_t *h)
{
    ((struct fake_server *)h->data)->conn_closed = true;
}

static void fake_on_listener_closed(uv_handle_t *h)
{
    ((struct fake_server *)h->data)->listener_closed = true;
}

static void fake_close(uv_loop_t *loop, struct fake_server *f)
{
    uv_close((uv_handle_t *)&f->listener, fake_on_listener_closed);
    if (f->accepted)
        uv_close((uv_handle_t *)&f->conn, fake_on_conn_closed);
    RUN_UNTIL(loop, f->listener_closed && (!f->accepted || f->conn_closed), WAIT_MS);
    free(f->script.p);
}

/* ---- pure helpers ------------------------------------------------------------------------------
 */

static void test_parse_address(void **state)
{
    static const struct {
        const char *text;
        int rc;
        const char *host;
        int port;
        const char *err;
    } cases[] = {
        {"127.0.0.1:5000", 0, "127.0.0.1", 5000, NULL},
        {"sluice://127.0.0.1:5000", 0, "127.0.0.1", 5000, NULL},
        {"localhost:1", 0, "localhost", 1, NULL},
        {"host.example.com:65535", 0, "host.example.com", 65535, NULL},
        {"[::1]:7000", 0, "::1", 7000, NULL},
        {"sluice://[fe80::1]:80", 0, "fe80::1", 80, NULL},
        {"127.0.0.1", SLUICE_ERR_INVALID, NULL, 0, "bad address '127.0.0.1': expected HOST:PORT"},
        {"::1:7000", SLUICE_ERR_INVALID, NULL, 0,
         "bad address '::1:7000': an IPv6 host must be in brackets"},
        {"[::1]7000", SLUICE_ERR_INVALID, NULL, 0,
         "bad address '[::1]7000': expected ':PORT' after ']'"},
        {"[::1:7000", SLUICE_ERR_INVALID, NULL, 0, "bad address '[::1:7000': missing ']'"},
        {":5000", SLUICE_ERR_INVALID, NULL, 0, "bad address ':5000': empty host"},
        {"[]:5000", SLUICE_ERR_INVALID, NULL, 0, "bad address '[]:5000': empty host"},
        {"h:0", SLUICE_ERR_INVALID, NULL, 0,
         "bad address 'h:0': port must be a number from 1 to 65535"},
        {"h:65536", SLUICE_ERR_INVALID, NULL, 0,
         "bad address 'h:65536': port must be a number from 1 to 65535"},
        {"h:", SLUICE_ERR_INVALID, NULL, 0,
         "bad address 'h:': port must be a number from 1 to 65535"},
        {"h:12ab", SLUICE_ERR_INVALID, NULL, 0,
         "bad address 'h:12ab': port must be a number from 1 to 65535"},
        {"h:-1", SLUICE_ERR_INVALID, NULL, 0,
         "bad address 'h:-1': port must be a number from 1 to 65535"},
        {"h:0000080", SLUICE_ERR_INVALID, NULL, 0,
         "bad address 'h:0000080': port must be a number from 1 to 65535"},
        {"", SLUICE_ERR_INVALID, NULL, 0, "bad address '': expected HOST:PORT"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[64] = "", err[SLUICE_ERRMSG_SIZE] = "";
        int port = -1;
        int rc = rpc_parse_address(cases[i].text, host, sizeof host, &port, err, sizeof err);
        if (rc != cases[i].rc)
            fail_msg("'%s': rc %d, want %d (%s)", cases[i].text, rc, cases[i].rc, err);
        if (rc == 0) {
            assert_string_equal(host, cases[i].host);
            assert_int_equal(port, cases[i].port);
        } else {
            assert_string_equal(err, cases[i].err);
        }
    }
    /* A host that does not fit the caller's buffer. */
    char small[4], err[SLUICE_ERRMSG_SIZE];
    int port;
    assert_int_equal(rpc_parse_address("abcd:1", small, sizeof small, &port, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "bad address 'abcd:1': host too long");
    assert_int_equal(rpc_parse_address("abc:1", small, sizeof small, &port, err, sizeof err), 0);
    assert_string_equal(small, "abc");
}

static void test_parse_address_list(void **state)
{
    static const struct {
        const char *text;
        size_t n;
        const char *list; /* rpc_format_address_list of the result */
        const char *err;
    } cases[] = {
        {"127.0.0.1:5000", 1, "127.0.0.1:5000", NULL},
        {"sluice://h1:5050", 1, "h1:5050", NULL},
        {"h1:5050,h2:5050,h3:5050", 3, "h1:5050,h2:5050,h3:5050", NULL},
        {"sluice://h1:5050,h2:5050,h3:5050", 3, "h1:5050,h2:5050,h3:5050", NULL},
        {"h1:5050, h2:5050 ,\th3:5050", 3, "h1:5050,h2:5050,h3:5050", NULL},
        {"[::1]:7000,127.0.0.1:7000,[fe80::1]:7000", 3, "[::1]:7000,127.0.0.1:7000,[fe80::1]:7000",
         NULL},
        {"h1:5050,h1:5051", 2, "h1:5050,h1:5051", NULL},
        {"a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1,j:1,k:1,l:1,m:1,n:1,o:1,p:1", 16,
         "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1,j:1,k:1,l:1,m:1,n:1,o:1,p:1", NULL},
        {"", 0, NULL, "bad address: none given"},
        {"h1", 0, NULL, "bad address 'h1': expected HOST:PORT"},
        {"sluice://h1:0", 0, NULL,
         "bad address 'sluice://h1:0': port must be a number from 1 to 65535"},
        {"h1:5050,,h2:5050", 0, NULL, "bad address list 'h1:5050,,h2:5050': address 2 is empty"},
        {",h1:5050", 0, NULL, "bad address list ',h1:5050': address 1 is empty"},
        {"h1:5050,", 0, NULL, "bad address list 'h1:5050,': address 2 is empty"},
        {"h1:5050, ,h2:5050", 0, NULL, "bad address list 'h1:5050, ,h2:5050': address 2 is empty"},
        {"sluice://", 0, NULL, "bad address 'sluice://': expected HOST:PORT"},
        {"sluice://,h1:5050", 0, NULL, "bad address list 'sluice://,h1:5050': address 1 is empty"},
        {"h1:5050,h2:5050,h1:5050", 0, NULL,
         "bad address list 'h1:5050,h2:5050,h1:5050': h1:5050 is listed twice"},
        {"H1:5050,h1:5050", 0, NULL, "bad address list 'H1:5050,h1:5050': h1:5050 is listed twice"},
        {"[::1]:7000,[::1]:7000", 0, NULL,
         "bad address list '[::1]:7000,[::1]:7000': [::1]:7000 is listed twice"},
        {"h1:5050,h2", 0, NULL,
         "bad address list 'h1:5050,h2': bad address 'h2': expected HOST:PORT"},
        {"h1:5050,::1:7000", 0, NULL,
         "bad address list 'h1:5050,::1:7000': bad address '::1:7000': an IPv6 host must be in "
         "brackets"},
        {"h1:5050,sluice://h2:5050", 0, NULL,
         "bad address list 'h1:5050,sluice://h2:5050': address 2: sluice:// goes once, before the "
         "list"},
        {"a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1,j:1,k:1,l:1,m:1,n:1,o:1,p:1,q:1", 0, NULL,
         "bad address list 'a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1,j:1,k:1,l:1,m:1,n:1,o:1,p:1,q:1': "
         "more than 16 addresses"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rpc_address list[RPC_MAX_ADDRESSES];
        char err[SLUICE_ERRMSG_SIZE] = "", text[RPC_ADDRESS_LIST_MAX];
        size_t n = 99;
        int rc =
            rpc_parse_address_list(cases[i].text, list, RPC_MAX_ADDRESSES, &n, err, sizeof err);
        if (cases[i].err) {
            if (rc != SLUICE_ERR_INVALID)
                fail_msg("'%s': rc %d, want SLUICE_ERR_INVALID", cases[i].text, rc);
            assert_string_equal(err, cases[i].err);
            assert_int_equal(n, 0);
            continue;
        }
        if (rc != 0)
            fail_msg("'%s': rc %d (%s)", cases[i].text, rc, err);
        assert_int_equal(n, cases[i].n);
        rpc_format_address_list(text, sizeof text, list, n);
        assert_string_equal(text, cases[i].list);
    }
    /* NULL, and a text longer than the bound. */
    struct rpc_address list[RPC_MAX_ADDRESSES];
    char err[SLUICE_ERRMSG_SIZE], big[RPC_ADDRESS_LIST_MAX + 8];
    size_t n;
    assert_int_equal(rpc_parse_address_list(NULL, list, RPC_MAX_ADDRESSES, &n, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "bad address: none given");
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(rpc_parse_address_list(big, list, RPC_MAX_ADDRESSES, &n, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "bad address list: longer than 2047 characters");
    /* The parts of an address. */
    assert_int_equal(rpc_parse_address_list("sluice://h1:1,[::1]:2", list, 2, &n, err, sizeof err),
                     0);
    assert_string_equal(list[0].host, "h1");
    assert_int_equal(list[0].port, 1);
    assert_string_equal(list[1].host, "::1");
    assert_int_equal(list[1].port, 2);
    assert_string_equal(list[1].text, "[::1]:2");
    /* A list cut short when the output is small. */
    char small[6];
    rpc_format_address_list(small, sizeof small, list, n);
    assert_string_equal(small, "h1:1,");
}

static void test_incarnation(void **state)
{
    uint64_t seen[64];
    for (int i = 0; i < 64; i++) {
        seen[i] = rpc_new_incarnation();
        assert_true(seen[i] != 0);
        for (int j = 0; j < i; j++)
            assert_true(seen[i] != seen[j]);
    }
}

/* ---- round trips
 * --------------------------------------------------------------------------------- */

static void test_handshake_and_status(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));

    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(cfx.connects, 1);
    assert_true(cfx.last_peer_incarnation == fx.incarnation);
    assert_true(rpc_client_peer_incarnation(cfx.cl) == fx.incarnation);
    assert_true(rpc_client_connected(cfx.cl));
    assert_int_equal(fx.opens, 1);
    assert_int_equal(fx.peer_role, SLUICE__ROLE__ROLE_WORKER);
    assert_true(fx.peer_incarnation == cfx.incarnation);
    assert_memory_equal(fx.peer_name, "127.0.0.1:", 10);

    /* A body the handler does not know gets its Error, and the connection stays. */
    struct result r = {0};
    Sluice__GetDatasetRequest body = SLUICE__GET_DATASET_REQUEST__INIT;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET;
    env.get_dataset = &body;
    assert_int_equal(rpc_call(cfx.cl, &env, 5000, on_reply, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(r.msg, "unsupported body 12");
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(cfx.connects, 1);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    assert_int_equal(fx.closes, 1);
    loop_finish(&loop);
}

/* N calls held by the server, answered in a scrambled order: each reply reaches its call, in the
 * order they were sent. Corked, the replies are queued inside conn_cork() (two, nested: only the
 * outermost uncork writes) and go out a connection's worth per write, in the order queued. The
 * server timed the calls from their arrival to their reply (on_answered), held ones included, up
 * to RPC_TIMED_MAX at once on one connection. */
static void pipelined(bool corked)
{
    enum { N = 1000 };
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));

    static struct result results[N];
    static size_t arrivals[N], order[N];
    size_t narrivals = 0;
    memset(results, 0, sizeof results);
    for (size_t i = 0; i < N; i++) {
        results[i].arrivals = arrivals;
        results[i].narrivals = &narrivals;
        results[i].index = i;
        assert_int_equal(call_elements(cfx.cl, 5000 + i, MODE_HOLD, 0, 10000, &results[i]), 0);
    }
    RUN_UNTIL(&loop, fx.nheld == N, WAIT_MS);
    assert_int_equal(narrivals, 0);
    int answered = fx.answered;
    assert_int_equal(fx.answered_elements, 0);
    sleep_ms(20); /* held a while: their time counts from their arrival */

    /* The server saw every request, in order; it answers in a scrambled order (7919 is prime
     * to N, so this is a permutation). */
    for (size_t i = 0; i < N; i++)
        assert_true(fx.held[i].task == 5000 + i);
    for (size_t k = 0; k < N; k++)
        order[k] = (k * 7919 + 13) % N;
    if (corked) {
        conn_cork();
        fx_answer_held(&fx, order, N / 2);
        conn_cork();
        fx_answer_held(&fx, order + N / 2, N - N / 2);
        conn_uncork();
        conn_uncork();
    } else {
        fx_answer_held(&fx, order, N);
    }
    assert_int_equal(fx.answered, answered + RPC_TIMED_MAX);
    assert_int_equal(fx.answered_elements, RPC_TIMED_MAX);
    assert_true(fx.answered_max_s >= 0.02);
    RUN_UNTIL(&loop, narrivals == N, WAIT_MS);

    for (size_t k = 0; k < N; k++)
        assert_int_equal(arrivals[k], order[k]);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(results[i].done, 1);
        assert_int_equal(results[i].status, 0);
        assert_int_equal(results[i].count, 5000 + i);
        assert_true(results[i].reply_id == fx.held[i].id);
    }
    assert_int_equal(cfx.connects, 1);
    assert_int_equal(fx.opens, 1);
    /* Nothing is left held: the next reply, uncorked, follows at once. */
    expect_status_ok(&loop, cfx.cl);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

static void test_pipelined_out_of_order(void **state)
{
    pipelined(false);
}

static void test_corked_replies(void **state)
{
    pipelined(true);
}

static void test_call_before_server(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    int port = free_port();
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, port);

    struct result r = {0};
    assert_int_equal(call_status(cfx.cl, 8000, &r), 0);
    run_for(&loop, 300);
    assert_int_equal(r.done, 0);
    assert_false(rpc_client_connected(cfx.cl));
    assert_int_equal(cfx.connects, 0);

    struct server_fx fx;
    fx_start(&loop, &fx, port);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.msg, "{\"ok\":true}");
    assert_int_equal(cfx.connects, 1);
    assert_true(cfx.last_peer_incarnation == fx.incarnation);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

static void test_call_timeout(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));
    expect_status_ok(&loop, cfx.cl);

    /* Never answered in time. A call without a timeout made alongside still gets its reply. */
    struct result slow = {.loop = &loop}, patient = {0};
    uv_update_time(&loop);
    uint64_t start = uv_now(&loop);
    assert_int_equal(call_elements(cfx.cl, 1, MODE_HOLD, 0, 150, &slow), 0);
    assert_int_equal(call_elements(cfx.cl, 2, MODE_HOLD, 0, 0, &patient), 0);
    RUN_UNTIL(&loop, slow.done, WAIT_MS);
    assert_int_equal(slow.status, SLUICE_ERR_TIMEOUT);
    char want[128];
    snprintf(want, sizeof want, "no reply from 127.0.0.1:%d within 150 ms",
             rpc_server_port(fx.srv));
    assert_string_equal(slow.msg, want);
    assert_true(slow.done_at - start >= 150 && slow.done_at - start < 2000);

    /* The late reply is dropped quietly: the connection survives it. */
    assert_int_equal(fx.nheld, 2);
    fx_answer_held(&fx, NULL, 2);
    RUN_UNTIL(&loop, patient.done, WAIT_MS);
    assert_int_equal(patient.status, 0);
    assert_int_equal(patient.count, 2);
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(slow.done, 1);
    assert_int_equal(cfx.connects, 1);
    assert_int_equal(fx.opens, 1);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* The call timer is left where answered calls put it (rpc_client_rearm_call_timer): a call made
 * while it is still due for an earlier, answered call times out at its own deadline, neither at
 * the earlier one nor later; and a call with a shorter timeout than those before it, at its own. */
static void test_call_timeout_after_answers(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));
    expect_status_ok(&loop, cfx.cl);

    for (int i = 0; i < 3; i++) {
        struct result quick = {0};
        assert_int_equal(call_status(cfx.cl, 300, &quick), 0);
        RUN_UNTIL(&loop, quick.done, WAIT_MS);
        assert_int_equal(quick.status, 0);
    }
    /* The timer is still due at the first quick call's deadline, about 300 ms from now. */
    run_for(&loop, 100);
    struct result slow = {.loop = &loop}, short_one = {.loop = &loop};
    uv_update_time(&loop);
    uint64_t start = uv_now(&loop);
    assert_int_equal(call_elements(cfx.cl, 1, MODE_HOLD, 0, 400, &slow), 0);
    RUN_UNTIL(&loop, slow.done, WAIT_MS);
    assert_int_equal(slow.status, SLUICE_ERR_TIMEOUT);
    assert_true(slow.done_at - start >= 400 && slow.done_at - start < 3000);

    /* Armed for a long call, then a short one: the short one times out first, at its own time. */
    struct result long_one = {.loop = &loop};
    uv_update_time(&loop);
    start = uv_now(&loop);
    assert_int_equal(call_elements(cfx.cl, 2, MODE_HOLD, 0, 20000, &long_one), 0);
    assert_int_equal(call_elements(cfx.cl, 3, MODE_HOLD, 0, 150, &short_one), 0);
    RUN_UNTIL(&loop, short_one.done, WAIT_MS);
    assert_int_equal(short_one.status, SLUICE_ERR_TIMEOUT);
    assert_true(short_one.done_at - start >= 150 && short_one.done_at - start < 3000);
    assert_int_equal(long_one.done, 0);

    /* The held requests answered: the late replies dropped, the long call's delivered. */
    assert_int_equal(fx.nheld, 3);
    fx_answer_held(&fx, NULL, 3);
    RUN_UNTIL(&loop, long_one.done, WAIT_MS);
    assert_int_equal(long_one.status, 0);
    assert_int_equal(long_one.count, 2);
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(slow.done, 1);
    assert_int_equal(short_one.done, 1);
    assert_int_equal(cfx.connects, 1);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

static void test_waiting_call_timeout(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    int port = free_port();
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, port);

    struct result r = {0};
    assert_int_equal(call_status(cfx.cl, 200, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, SLUICE_ERR_TIMEOUT);
    char want[160];
    snprintf(want, sizeof want,
             "no connection to 127.0.0.1:%d within 200 ms: connect: connection refused", port);
    assert_string_equal(r.msg, want);
    /* With no call waiting the client stops retrying and stays idle. */
    run_for(&loop, 300);
    assert_false(rpc_client_connected(cfx.cl));

    cfx_close(&loop, &cfx);
    loop_finish(&loop);
}

/* A call waiting for a connection can be withdrawn: it fails with SLUICE_ERR_CANCELLED on the
 * next loop turn, not inside the withdrawal, and is never sent; a call already written cannot
 * be, and gets its reply. */
static void test_withdraw_waiting_call(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    int port = free_port();
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, port);

    struct result gone = {0}, kept = {0};
    assert_int_equal(call_status(cfx.cl, 0, &gone), 0);
    assert_int_equal(call_status(cfx.cl, 8000, &kept), 0);
    run_for(&loop, 100);
    assert_true(rpc_client_withdraw(cfx.cl, on_reply, &gone));
    assert_int_equal(gone.done, 0);
    assert_false(rpc_client_withdraw(cfx.cl, on_reply, &gone)); /* once */
    RUN_UNTIL(&loop, gone.done, WAIT_MS);
    assert_int_equal(gone.status, SLUICE_ERR_CANCELLED);
    char want[128];
    snprintf(want, sizeof want, "withdrawn before it was sent to 127.0.0.1:%d", port);
    assert_string_equal(gone.msg, want);

    /* The other call still waits, then goes out once a server is there. */
    struct server_fx fx;
    fx_start(&loop, &fx, port);
    RUN_UNTIL(&loop, kept.done, WAIT_MS);
    assert_int_equal(kept.status, 0);
    assert_int_equal(gone.done, 1);

    /* A written call stays: it is answered. */
    struct result sent = {0};
    assert_int_equal(call_elements(cfx.cl, 3, MODE_HOLD, 0, 0, &sent), 0);
    RUN_UNTIL(&loop, fx.nheld == 1, WAIT_MS);
    assert_false(rpc_client_withdraw(cfx.cl, on_reply, &sent));
    fx_answer_held(&fx, NULL, 1);
    RUN_UNTIL(&loop, sent.done, WAIT_MS);
    assert_int_equal(sent.status, 0);
    assert_int_equal(sent.count, 3);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

static void test_server_restart(void **state)
{
    enum { N = 5 };
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx a;
    fx_start(&loop, &a, 0);
    int port = rpc_server_port(a.srv);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, port);

    struct result r[N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++)
        assert_int_equal(call_elements(cfx.cl, (uint64_t)i, MODE_HOLD, 0, 10000, &r[i]), 0);
    RUN_UNTIL(&loop, a.nheld == N, WAIT_MS);
    assert_int_equal(cfx.connects, 1);

    /* The server goes away with the requests unanswered; the handler still holds references. */
    fx_close(&loop, &a);
    assert_int_equal(a.closes, 1);
    RUN_UNTIL(&loop, r[N - 1].done, WAIT_MS);
    char prefix[64];
    int plen = snprintf(prefix, sizeof prefix, "connection to 127.0.0.1:%d lost: ", port);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].done, 1);
        assert_int_equal(r[i].status, SLUICE_ERR_UNAVAILABLE);
        assert_memory_equal(r[i].msg, prefix, (size_t)plen);
    }
    assert_false(rpc_client_connected(cfx.cl));

    /* Replies through the kept references are refused, and dropping them frees the conns. */
    for (size_t i = 0; i < a.nheld; i++) {
        assert_false(rpc_conn_is_open(a.held[i].conn));
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_RELEASE_CLIENT_REPLY;
        Sluice__ReleaseClientReply body = SLUICE__RELEASE_CLIENT_REPLY__INIT;
        env.release_client_reply = &body;
        assert_int_equal(rpc_conn_reply(a.held[i].conn, a.held[i].id, &env), SLUICE_ERR_CLOSED);
        assert_int_equal(rpc_conn_reply_error(a.held[i].conn, a.held[i].id, SLUICE_ERR_FN, "x"),
                         SLUICE_ERR_CLOSED);
        rpc_conn_unref(a.held[i].conn);
    }

    /* A new server on the same port, a new incarnation; new calls go through. */
    struct server_fx b;
    fx_start(&loop, &b, port);
    assert_true(b.incarnation != a.incarnation);
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(cfx.connects, 2);
    assert_true(cfx.last_peer_incarnation == b.incarnation);
    assert_true(rpc_client_peer_incarnation(cfx.cl) == b.incarnation);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &b);
    loop_finish(&loop);
}

static void test_error_reply(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));

    struct result r = {0};
    assert_int_equal(call_elements(cfx.cl, 42, MODE_ERROR, 0, 5000, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, SLUICE_ERR_NOT_FOUND);
    assert_string_equal(r.msg, "task 42 not found second line");
    assert_int_equal(r.body_case, SLUICE__ENVELOPE__BODY_ERROR);
    assert_int_equal(r.error_code, SLUICE_ERR_NOT_FOUND);
    expect_status_ok(&loop, cfx.cl);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

static void test_large_reply(void **state)
{
    const size_t size = 32u << 20;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));

    struct result r[2];
    memset(r, 0, sizeof r);
    uint64_t t0 = uv_hrtime();
    assert_int_equal(call_elements(cfx.cl, 9, MODE_PAYLOAD, size, 20000, &r[0]), 0);
    assert_int_equal(call_elements(cfx.cl, 10, MODE_PAYLOAD, size, 20000, &r[1]), 0);
    RUN_UNTIL(&loop, r[0].done && r[1].done, 30000);
    double secs = (double)(uv_hrtime() - t0) / 1e9;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].status, 0);
        assert_int_equal(r[i].count, 9 + i);
        assert_int_equal(r[i].payload_len, size);
        assert_true(r[i].payload_ok);
    }
    print_message("two 32 MiB replies in %.3f s (%.0f MiB/s)\n", secs, 64.0 / secs);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* Frames over a limit: a reply over the server's limit is refused at the server (which can then
 * answer with an Error); a reply over the client's limit costs the connection; a request over
 * the client's limit is refused synchronously. */
static void test_too_large(void **state)
{
    const uint32_t limit = 1u << 20;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start_opts(&loop, &fx, 0, limit, 0);
    char address[64];
    snprintf(address, sizeof address, "127.0.0.1:%d", rpc_server_port(fx.srv));

    struct client_fx cfx;
    cfx_new(&loop, &cfx, address);
    struct result r = {0};
    assert_int_equal(call_elements(cfx.cl, 1, MODE_PAYLOAD, limit, 5000, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, SLUICE_ERR_TOO_LARGE);
    char want[128];
    snprintf(want, sizeof want, "reply of %u bytes is too large", limit);
    assert_string_equal(r.msg, want);
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(cfx.connects, 1);
    cfx_close(&loop, &cfx);

    struct rpc_client_opts opts = {.address = address, .max_frame = 4096};
    struct rpc_client *cl;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(rpc_client_new(&loop, &opts, &cl, err, sizeof err), 0);
    struct result big = {0}, small = {0};
    assert_int_equal(call_elements(cl, 2, MODE_PAYLOAD, 8192, 5000, &big), 0);
    RUN_UNTIL(&loop, big.done, WAIT_MS);
    assert_int_equal(big.status, SLUICE_ERR_UNAVAILABLE);
    snprintf(want, sizeof want, "connection to %s lost: frame over the 4096-byte limit", address);
    assert_string_equal(big.msg, want);
    assert_int_equal(call_elements(cl, 3, MODE_PAYLOAD, 1000, 5000, &small), 0);
    RUN_UNTIL(&loop, small.done, WAIT_MS);
    assert_int_equal(small.status, 0);
    assert_int_equal(small.payload_len, 1000);
    assert_true(small.payload_ok);

    /* A request that cannot be sent: refused now, its callback never runs. */
    struct result never = {0};
    Sluice__WorkerHeartbeatRequest hb = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    char addr_field[5000];
    memset(addr_field, 'a', sizeof addr_field - 1);
    addr_field[sizeof addr_field - 1] = '\0';
    hb.address = addr_field;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &hb;
    assert_int_equal(rpc_call(cl, &env, 5000, on_reply, &never), SLUICE_ERR_TOO_LARGE);
    bool closed = false;
    rpc_client_close(cl, set_flag, &closed);
    RUN_UNTIL(&loop, closed, WAIT_MS);
    assert_int_equal(never.done, 0);

    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* ---- malformed peers
 * ----------------------------------------------------------------------------- */

static void test_server_version_mismatch(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    int port = rpc_server_port(fx.srv);

    struct raw wrong = {0}, not_hello = {0};
    bytes_put_hello(&wrong.out, 7);
    bytes_put_get_elements(&not_hello.out, 1, 1, MODE_ANSWER, 0);
    raw_connect(&loop, &wrong, port, true, 0);
    raw_connect(&loop, &not_hello, port, true, 0);
    RUN_UNTIL(&loop, wrong.eof && not_hello.eof, WAIT_MS);

    assert_int_equal(wrong.hellos, 1);
    assert_int_equal(wrong.error_code, SLUICE_ERR_VERSION);
    assert_string_equal(wrong.error_msg, "protocol version 7, expected 1");
    assert_int_equal(not_hello.hellos, 1);
    assert_int_equal(not_hello.error_code, SLUICE_ERR_VERSION);
    assert_string_equal(not_hello.error_msg, "protocol version 0, expected 1");
    assert_false(wrong.decode_failed || not_hello.decode_failed);
    assert_int_equal(fx.opens, 0);
    assert_int_equal(fx.requests, 0);

    raw_close(&loop, &wrong);
    raw_close(&loop, &not_hello);
    fx_close(&loop, &fx);
    assert_int_equal(fx.closes, 0);
    loop_finish(&loop);
}

static void test_client_version_mismatch(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);

    /* A server speaking another version says so in its Hello. */
    struct fake_server f = {0};
    bytes_put_hello(&f.script, 99);
    fake_start(&loop, &f);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, f.port);
    struct result r[2];
    memset(r, 0, sizeof r);
    assert_int_equal(call_status(cfx.cl, 5000, &r[0]), 0);
    assert_int_equal(call_status(cfx.cl, 0, &r[1]), 0);
    RUN_UNTIL(&loop, r[0].done && r[1].done, WAIT_MS);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].status, SLUICE_ERR_VERSION);
        assert_string_equal(r[i].msg, "protocol version 99, expected 1");
    }
    assert_int_equal(cfx.connects, 0);
    RUN_UNTIL(&loop, f.peer_closed, WAIT_MS);
    cfx_close(&loop, &cfx);
    fake_close(&loop, &f);

    /* A newer server rejects our Hello with an Error. */
    struct fake_server g = {0};
    Sluice__Error error = SLUICE__ERROR__INIT;
    error.code = SLUICE_ERR_VERSION;
    error.message = "protocol version 1, expected 2";
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_ERROR;
    env.error = &error;
    bytes_put_envelope(&g.script, &env);
    fake_start(&loop, &g);
    cfx_new_port(&loop, &cfx, g.port);
    struct result s = {0};
    assert_int_equal(call_status(cfx.cl, 5000, &s), 0);
    RUN_UNTIL(&loop, s.done, WAIT_MS);
    assert_int_equal(s.status, SLUICE_ERR_VERSION);
    assert_string_equal(s.msg, "protocol version 1, expected 2");
    RUN_UNTIL(&loop, g.peer_closed, WAIT_MS);
    cfx_close(&loop, &cfx);
    fake_close(&loop, &g);
    loop_finish(&loop);
}

/* A server that answers an id nobody asked for is cut off; the call in flight fails. */
static void test_client_unknown_reply_id(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct fake_server f = {0};
    bytes_put_hello(&f.script, RPC_PROTOCOL_VERSION);
    Sluice__StatusReply body = SLUICE__STATUS_REPLY__INIT;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.id = 999;
    env.body_case = SLUICE__ENVELOPE__BODY_STATUS_REPLY;
    env.status_reply = &body;
    bytes_put_envelope(&f.script, &env);
    fake_start(&loop, &f);

    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, f.port);
    struct result r = {0};
    assert_int_equal(call_status(cfx.cl, 5000, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, SLUICE_ERR_UNAVAILABLE);
    char want[128];
    snprintf(want, sizeof want, "connection to 127.0.0.1:%d lost: reply id 999 matches no call",
             f.port);
    assert_string_equal(r.msg, want);
    assert_int_equal(cfx.connects, 1);
    RUN_UNTIL(&loop, f.peer_closed, WAIT_MS);

    cfx_close(&loop, &cfx);
    fake_close(&loop, &f);
    loop_finish(&loop);
}

static void test_garbage_disconnected(void **state)
{
    enum { NRAW = 7 };
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start_opts(&loop, &fx, 0, 1u << 20, 0);
    int port = rpc_server_port(fx.srv);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, port);
    expect_status_ok(&loop, cfx.cl);

    struct raw raw[NRAW];
    memset(raw, 0, sizeof raw);
    /* 0: a zero length. */
    bytes_put_u32(&raw[0].out, 0);
    /* 1: the largest length there is. */
    bytes_put_u32(&raw[1].out, 0xFFFFFFFFu);
    /* 2: one byte over this server's limit, after a good Hello. */
    bytes_put_hello(&raw[2].out, RPC_PROTOCOL_VERSION);
    bytes_put_u32(&raw[2].out, (1u << 20) + 1);
    /* 3: a well-framed payload that is no Envelope (a varint that never ends). */
    bytes_put_hello(&raw[3].out, RPC_PROTOCOL_VERSION);
    uint8_t junk[16];
    memset(junk, 0xFF, sizeof junk);
    bytes_put_u32(&raw[3].out, sizeof junk);
    bytes_put(&raw[3].out, junk, sizeof junk);
    /* 4: Hello twice. */
    bytes_put_hello(&raw[4].out, RPC_PROTOCOL_VERSION);
    bytes_put_hello(&raw[4].out, RPC_PROTOCOL_VERSION);
    /* 5: a request without an id. */
    bytes_put_hello(&raw[5].out, RPC_PROTOCOL_VERSION);
    bytes_put_get_elements(&raw[5].out, 0, 1, MODE_ANSWER, 0);
    /* 6: random bytes: a valid Hello, then frames of random length and content. */
    bytes_put_hello(&raw[6].out, RPC_PROTOCOL_VERSION);
    uint64_t rng = 0x5eed;
    for (int i = 0; i < 4096; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint8_t byte = (uint8_t)(rng >> 56);
        bytes_put(&raw[6].out, &byte, 1);
    }

    for (int i = 0; i < NRAW; i++)
        raw_connect(&loop, &raw[i], port, true, 0);
    /* The well-behaved client is served while the others are cut off. */
    expect_status_ok(&loop, cfx.cl);
    for (int i = 0; i < NRAW; i++) {
        RUN_UNTIL(&loop, raw[i].eof, WAIT_MS);
        assert_int_equal(raw[i].hellos, 1);
        assert_int_equal(raw[i].error_code, 0);
        assert_false(raw[i].decode_failed);
    }
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(cfx.connects, 1);
    /* The proper client and the five raw sockets that sent a good Hello were announced; the
     * handler never saw a request from the raw ones. */
    assert_int_equal(fx.opens, 1 + 5);
    RUN_UNTIL(&loop, fx.closes == 5, WAIT_MS);
    assert_int_equal(fx.requests, 3);

    for (int i = 0; i < NRAW; i++)
        raw_close(&loop, &raw[i]);
    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    assert_int_equal(fx.closes, 6);
    loop_finish(&loop);
}

/* ---- backpressure
 * -------------------------------------------------------------------------------- */

static void test_backpressure(void **state)
{
    enum { N = 128 };
    const size_t reply = 1u << 20, limit = 4u << 20;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start_opts(&loop, &fx, 0, 0, limit);
    int port = rpc_server_port(fx.srv);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, port);
    expect_status_ok(&loop, cfx.cl);

    /* A client that asks for 128 MiB in one go and reads nothing. */
    struct raw slow = {0};
    slow.reply_bytes = reply;
    bytes_put_hello(&slow.out, RPC_PROTOCOL_VERSION);
    for (int i = 1; i <= N; i++)
        bytes_put_get_elements(&slow.out, (uint64_t)i, (uint64_t)i, MODE_PAYLOAD, reply);
    raw_connect(&loop, &slow, port, false, 64 << 10);
    RUN_UNTIL(&loop, slow.written && fx.requests > 1 + 4, WAIT_MS);
    run_for(&loop, 300);

    /* The server stopped reading: most requests wait unread, and the queued bytes stay within
     * the limit plus the one reply that crossed it. */
    int stalled_at = fx.requests - 1;
    print_message("server answered %d of %d before stopping; max pending write %zu bytes\n",
                  stalled_at, N, fx.max_pending);
    assert_true(stalled_at < N / 2);
    assert_true(fx.max_pending <= limit + reply + 64);
    assert_true(fx.max_pending > limit);
    /* Everyone else is still served meanwhile. */
    expect_status_ok(&loop, cfx.cl);
    run_for(&loop, 100);
    assert_int_equal(fx.requests - 2, stalled_at);

    /* Once the client reads, the server resumes and answers everything, in order. */
    raw_read_start(&slow);
    RUN_UNTIL(&loop, slow.replies == N, 30000);
    assert_true(slow.replies_ok);
    assert_int_equal(slow.hellos, 1);
    assert_int_equal(fx.requests, 2 + N);
    assert_true(fx.max_pending <= limit + reply + 64);

    raw_close(&loop, &slow);
    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* Host names go through the resolver; IPv6 literals through the numeric fast path. */
static void test_addresses(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    char address[64];
    struct client_fx cfx;

    snprintf(address, sizeof address, "localhost:%d", rpc_server_port(fx.srv));
    cfx_new(&loop, &cfx, address);
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(cfx.connects, 1);
    cfx_close(&loop, &cfx);

    snprintf(address, sizeof address, "sluice://127.0.0.1:%d", rpc_server_port(fx.srv));
    cfx_new(&loop, &cfx, address);
    expect_status_ok(&loop, cfx.cl);
    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);

    /* IPv6 loopback, when the machine has it. */
    struct rpc_server_opts opts = {.host = "::1",
                                   .on_request = fx_on_request,
                                   .on_open = fx_on_open,
                                   .on_close = fx_on_close,
                                   .user = &fx};
    memset(&fx, 0, sizeof fx);
    char err[SLUICE_ERRMSG_SIZE];
    if (rpc_server_start(&loop, &opts, &fx.srv, err, sizeof err) == 0) {
        assert_string_equal(rpc_server_host(fx.srv), "::1");
        snprintf(address, sizeof address, "[::1]:%d", rpc_server_port(fx.srv));
        cfx_new(&loop, &cfx, address);
        expect_status_ok(&loop, cfx.cl);
        assert_memory_equal(fx.peer_name, "[::1]:", 6);
        cfx_close(&loop, &cfx);
        fx_close(&loop, &fx);
    } else {
        print_message("no IPv6 loopback: %s\n", err);
    }
    loop_finish(&loop);
}

/* ---- replicas: a list of addresses, and the leader ---------------------------------------------
 */

static void fx_follow(struct server_fx *fx, const struct server_fx *leader)
{
    fx->follower = true;
    if (leader)
        snprintf(fx->leader, sizeof fx->leader, "127.0.0.1:%d", rpc_server_port(leader->srv));
    else
        fx->leader[0] = '\0';
}

static void expect_current(const struct rpc_client *cl, const struct server_fx *fx)
{
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", rpc_server_port(fx->srv));
    assert_string_equal(rpc_client_current_address(cl), want);
}

/* The wire: a follower's answer is an Error NOT_LEADER that names the leader, or none. */
static void test_reply_not_leader(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx a;
    fx_start(&loop, &a, 0);
    a.follower = true;
    snprintf(a.leader, sizeof a.leader, "10.0.0.7:5050");
    for (int named = 1; named >= 0; named--) {
        if (!named)
            a.leader[0] = '\0';
        struct raw r = {0};
        bytes_put_hello(&r.out, RPC_PROTOCOL_VERSION);
        bytes_put_get_elements(&r.out, 1, 1, MODE_ANSWER, 0);
        raw_connect(&loop, &r, rpc_server_port(a.srv), true, 0);
        RUN_UNTIL(&loop, r.error_code != 0, WAIT_MS);
        assert_int_equal(r.hellos, 1);
        assert_int_equal(r.error_code, SLUICE_ERR_NOT_LEADER);
        assert_string_equal(r.error_msg, "not the leader");
        assert_string_equal(r.error_leader, named ? "10.0.0.7:5050" : "");
        raw_close(&loop, &r);
    }
    fx_close(&loop, &a);
    loop_finish(&loop);
}

/* (a) A names B: a client given only A ends at B, with B's answers, in the order made. */
static void test_follow_named_leader(void **state)
{
    enum { N = 5 };
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx a, b;
    fx_start(&loop, &a, 0);
    fx_start(&loop, &b, 0);
    fx_follow(&a, &b);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(a.srv));

    /* Pipelined calls, all written to A, all answered NOT_LEADER, all re-sent to B. */
    struct result r[N];
    size_t arrivals[N], narrivals = 0;
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++) {
        r[i].arrivals = arrivals;
        r[i].narrivals = &narrivals;
        r[i].index = (size_t)i;
        assert_int_equal(call_elements(cfx.cl, (uint64_t)(100 + i), MODE_ANSWER, 0, 5000, &r[i]),
                         0);
    }
    RUN_UNTIL(&loop, narrivals == N, WAIT_MS);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].done, 1);
        assert_int_equal(r[i].status, 0);
        assert_int_equal(r[i].count, 100 + i);
        assert_int_equal(arrivals[i], i);
    }
    assert_int_equal(a.requests, N);
    assert_int_equal(b.requests, N);
    expect_current(cfx.cl, &b);
    assert_true(rpc_client_connected(cfx.cl));
    /* A handshake with each: the switch to B reads like a restart of the server. */
    assert_int_equal(cfx.connects, 2);
    assert_true(cfx.last_peer_incarnation == b.incarnation);
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(a.requests, N);
    assert_int_equal(b.requests, N + 1);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &a);
    fx_close(&loop, &b);
    loop_finish(&loop);
}

/* A replica that steps down with a call in hand: the client writes nothing more to it and waits
 * for that call's answer before it goes to the leader; a call still unanswered after the connect
 * timeout fails as on a lost connection. */
static void test_follow_waits_for_written_calls(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx a, b;
    fx_start(&loop, &a, 0);
    fx_start(&loop, &b, 0);
    int pa = rpc_server_port(a.srv), pb = rpc_server_port(b.srv);
    char address[128];
    snprintf(address, sizeof address, "127.0.0.1:%d,127.0.0.1:%d", pa, pb);
    for (int answered = 1; answered >= 0; answered--) {
        a.follower = false;
        a.nheld = 0;
        a.requests = b.requests = 0;
        struct client_fx cfx;
        cfx_new(&loop, &cfx, address);
        struct result held = {.loop = &loop}, later = {.loop = &loop};
        assert_int_equal(call_elements(cfx.cl, 1, MODE_HOLD, 0, 10000, &held), 0);
        RUN_UNTIL(&loop, a.nheld == 1, WAIT_MS);
        fx_follow(&a, &b);
        uint64_t start = uv_now(&loop);
        assert_int_equal(call_elements(cfx.cl, 2, MODE_ANSWER, 0, 10000, &later), 0);
        RUN_UNTIL(&loop, a.requests == 2, WAIT_MS);
        run_for(&loop, 100);
        /* Declined, and waiting for the held call: nothing reached B yet. */
        assert_int_equal(later.done, 0);
        assert_int_equal(b.requests, 0);
        assert_false(rpc_client_connected(cfx.cl));
        if (answered)
            fx_answer_held(&a, NULL, 1);
        RUN_UNTIL(&loop, held.done && later.done, WAIT_MS);
        if (answered) {
            assert_int_equal(held.status, 0);
            assert_int_equal(held.count, 1);
            assert_true(later.done_at - start < 1000);
        } else {
            char want[160];
            snprintf(want, sizeof want,
                     "connection to 127.0.0.1:%d lost: 127.0.0.1:%d: not the leader; following "
                     "127.0.0.1:%d",
                     pa, pa, pb);
            assert_int_equal(held.status, SLUICE_ERR_UNAVAILABLE);
            assert_string_equal(held.msg, want);
            /* The connect timeout of the fixture's clients, 2000 ms. */
            assert_true(later.done_at - start >= 1900);
            rpc_conn_unref(a.held[0].conn);
        }
        assert_int_equal(later.status, 0);
        assert_int_equal(later.count, 2);
        assert_int_equal(b.requests, 1);
        expect_current(cfx.cl, &b);
        cfx_close(&loop, &cfx);
    }
    fx_close(&loop, &a);
    fx_close(&loop, &b);
    loop_finish(&loop);
}

/* A replica may refuse a connection outright, with an Error NOT_LEADER (id 0) in place of its
 * Hello: the client follows it without a handshake there, so on_connect runs only for B. */
static void test_follow_at_handshake(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx b;
    fx_start(&loop, &b, 0);
    char leader[64];
    snprintf(leader, sizeof leader, "127.0.0.1:%d", rpc_server_port(b.srv));
    struct fake_server f = {0};
    Sluice__Error error = SLUICE__ERROR__INIT;
    error.code = SLUICE_ERR_NOT_LEADER;
    error.message = "not the leader";
    error.leader = leader;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_ERROR;
    env.error = &error;
    bytes_put_envelope(&f.script, &env);
    fake_start(&loop, &f);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, f.port);
    struct result r = {0};
    assert_int_equal(call_elements(cfx.cl, 9, MODE_ANSWER, 0, 5000, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.count, 9);
    assert_int_equal(cfx.connects, 1);
    assert_true(cfx.last_peer_incarnation == b.incarnation);
    assert_string_equal(rpc_client_current_address(cfx.cl), leader);
    RUN_UNTIL(&loop, f.peer_closed, WAIT_MS);
    cfx_close(&loop, &cfx);
    fake_close(&loop, &f);
    fx_close(&loop, &b);
    loop_finish(&loop);
}

/* (b) The first address of the list is a closed port: the call succeeds on the second. */
static void test_list_dead_first(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx b;
    fx_start(&loop, &b, 0);
    char address[128];
    snprintf(address, sizeof address, "127.0.0.1:%d,127.0.0.1:%d", free_port(),
             rpc_server_port(b.srv));
    struct client_fx cfx;
    cfx_new(&loop, &cfx, address);
    expect_status_ok(&loop, cfx.cl);
    expect_current(cfx.cl, &b);
    assert_int_equal(cfx.connects, 1);
    assert_int_equal(b.requests, 1);
    cfx_close(&loop, &cfx);
    fx_close(&loop, &b);
    loop_finish(&loop);
}

/* (c) A knows no leader: the client moves on to the next address of the list. */
static void test_list_no_leader_named(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx a, b;
    fx_start(&loop, &a, 0);
    fx_start(&loop, &b, 0);
    fx_follow(&a, NULL);
    char address[128];
    snprintf(address, sizeof address, "sluice://127.0.0.1:%d,127.0.0.1:%d", rpc_server_port(a.srv),
             rpc_server_port(b.srv));
    struct client_fx cfx;
    cfx_new(&loop, &cfx, address);
    struct result r = {0};
    assert_int_equal(call_elements(cfx.cl, 7, MODE_ANSWER, 0, 5000, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.count, 7);
    assert_int_equal(a.requests, 1);
    assert_int_equal(b.requests, 1);
    expect_current(cfx.cl, &b);
    assert_true(cfx.last_peer_incarnation == b.incarnation);
    cfx_close(&loop, &cfx);
    fx_close(&loop, &a);
    fx_close(&loop, &b);
    loop_finish(&loop);
}

/* (d) Nobody leads: the call fails with SLUICE_ERR_UNAVAILABLE naming the list, after 20
 * redirects and well within its timeout; and so does a call between two replicas that name each
 * other. */
static void test_list_no_leader_anywhere(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx a, b;
    fx_start(&loop, &a, 0);
    fx_start(&loop, &b, 0);
    int pa = rpc_server_port(a.srv), pb = rpc_server_port(b.srv);
    for (int named = 0; named <= 1; named++) {
        fx_follow(&a, named ? &b : NULL);
        fx_follow(&b, named ? &a : NULL);
        a.requests = b.requests = 0;
        char address[128];
        snprintf(address, sizeof address, "127.0.0.1:%d,127.0.0.1:%d", pa, pb);
        struct client_fx cfx;
        cfx_new(&loop, &cfx, address);
        struct result r = {.loop = &loop};
        uint64_t start = uv_now(&loop);
        assert_int_equal(call_status(cfx.cl, 8000, &r), 0);
        RUN_UNTIL(&loop, r.done, WAIT_MS);
        assert_int_equal(r.status, SLUICE_ERR_UNAVAILABLE);
        assert_true(r.done_at - start < 8000);
        /* 21 answers, alternating from A: the 21st, from A, is the last reason. */
        assert_int_equal(a.requests, 11);
        assert_int_equal(b.requests, 10);
        char want[256];
        snprintf(want, sizeof want,
                 "no dispatcher leader among 127.0.0.1:%d,127.0.0.1:%d: 127.0.0.1:%d: not the "
                 "leader",
                 pa, pb, pa);
        assert_string_equal(r.msg, want);
        assert_false(rpc_client_connected(cfx.cl));
        cfx_close(&loop, &cfx);
    }
    fx_close(&loop, &a);
    fx_close(&loop, &b);
    loop_finish(&loop);
}

/* (e) Lists rpc_client_new refuses, with the parser's messages. */
static void test_list_refused(void **state)
{
    static const struct {
        const char *address, *err;
    } cases[] = {
        {"127.0.0.1:1,,127.0.0.1:2",
         "bad address list '127.0.0.1:1,,127.0.0.1:2': address 2 is empty"},
        {"127.0.0.1:1,127.0.0.1:1",
         "bad address list '127.0.0.1:1,127.0.0.1:1': 127.0.0.1:1 is listed twice"},
        {"127.0.0.1:1,127.0.0.1", "bad address list '127.0.0.1:1,127.0.0.1': bad address "
                                  "'127.0.0.1': expected HOST:PORT"},
        {"127.0.0.1:1,sluice://127.0.0.1:2", "bad address list '127.0.0.1:1,sluice://127.0.0.1:2': "
                                             "address 2: sluice:// goes once, before the list"},
        {"", "bad address: none given"},
    };
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rpc_client_opts opts = {.address = cases[i].address,
                                       .role = SLUICE__ROLE__ROLE_CLIENT};
        struct rpc_client *cl = NULL;
        char err[SLUICE_ERRMSG_SIZE] = "";
        assert_int_equal(rpc_client_new(&loop, &opts, &cl, err, sizeof err), SLUICE_ERR_INVALID);
        assert_null(cl);
        assert_string_equal(err, cases[i].err);
    }
    loop_finish(&loop);
}

/* (f) B serves, then goes away: C, next in the list, takes over, and later calls reach it. */
static void test_list_failover(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx b, c;
    fx_start(&loop, &b, 0);
    fx_start(&loop, &c, 0);
    char address[128];
    snprintf(address, sizeof address, "127.0.0.1:%d,127.0.0.1:%d", rpc_server_port(b.srv),
             rpc_server_port(c.srv));
    struct client_fx cfx;
    cfx_new(&loop, &cfx, address);
    for (int i = 0; i < 3; i++)
        expect_status_ok(&loop, cfx.cl);
    expect_current(cfx.cl, &b);
    assert_int_equal(b.requests, 3);

    /* A call in flight when B goes fails (B may have acted on it); later calls reach C. */
    struct result held = {0};
    assert_int_equal(call_elements(cfx.cl, 1, MODE_HOLD, 0, 5000, &held), 0);
    RUN_UNTIL(&loop, b.nheld == 1, WAIT_MS);
    int pc = rpc_server_port(c.srv);
    fx_close(&loop, &b);
    rpc_conn_unref(b.held[0].conn);
    RUN_UNTIL(&loop, held.done, WAIT_MS);
    assert_int_equal(held.status, SLUICE_ERR_UNAVAILABLE);
    for (int i = 0; i < 3; i++)
        expect_status_ok(&loop, cfx.cl);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", pc);
    assert_string_equal(rpc_client_current_address(cfx.cl), want);
    assert_int_equal(c.requests, 3);
    assert_int_equal(cfx.connects, 2);
    assert_true(cfx.last_peer_incarnation == c.incarnation);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &c);
    loop_finish(&loop);
}

/* The options that bound the silence of this process's one socket connected to
 * 127.0.0.1:port (a client's: the server's own sockets have port on their side): TCP_USER_TIMEOUT
 * in *user_ms, SO_KEEPALIVE in *keepalive and TCP_KEEPIDLE in *idle_s. Fails when there is no such
 * socket or more than one. */
static void silence_towards(int port, int *user_ms, int *keepalive, int *idle_s)
{
    int found = 0;
    for (int fd = 0; fd < 1024; fd++) {
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        if (getpeername(fd, (struct sockaddr *)&peer, &len) != 0 || peer.sin_family != AF_INET ||
            ntohs(peer.sin_port) != port)
            continue;
        found++;
        len = sizeof *user_ms;
        assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, user_ms, &len), 0);
        len = sizeof *keepalive;
        assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, keepalive, &len), 0);
        len = sizeof *idle_s;
        assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, idle_s, &len), 0);
    }
    assert_int_equal(found, 1);
}

/* (g) A connection to a replica of a list counts as lost once the peer's TCP acknowledges
 * nothing for RPC_REPLICA_SILENCE_MS, written data or keepalive probes (sent after 1 s idle), so
 * a leader cut off from the network holds no call longer; a single address keeps TCP's own
 * bounds (no user timeout, no keepalive). Making a peer's TCP fall silent takes a network
 * namespace (tests/netns/test_netns_replicas.sh cuts a leader off that way); here the options
 * on the socket are checked. */
static void test_list_silence_bound(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx b;
    fx_start(&loop, &b, 0);
    int pb = rpc_server_port(b.srv);
    char address[128];
    snprintf(address, sizeof address, "127.0.0.1:%d,127.0.0.1:%d", free_port(), pb);
    struct client_fx cfx;
    cfx_new(&loop, &cfx, address);
    expect_status_ok(&loop, cfx.cl);
    expect_current(cfx.cl, &b);
    int user_ms = -1, keepalive = -1, idle_s = -1;
    silence_towards(pb, &user_ms, &keepalive, &idle_s);
    assert_int_equal(user_ms, RPC_REPLICA_SILENCE_MS);
    assert_int_equal(keepalive, 1);
    assert_int_equal(idle_s, 1);
    cfx_close(&loop, &cfx);

    cfx_new_port(&loop, &cfx, pb);
    expect_status_ok(&loop, cfx.cl);
    silence_towards(pb, &user_ms, &keepalive, &idle_s);
    assert_int_equal(user_ms, 0);
    assert_int_equal(keepalive, 0);
    cfx_close(&loop, &cfx);
    fx_close(&loop, &b);
    loop_finish(&loop);
}

/* A peer that accepts the connection but never says Hello: each attempt ends at the connect
 * timeout and is retried until the call's own timeout. */
static void test_handshake_timeout(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct fake_server f = {0};
    fake_start(&loop, &f);
    char address[64];
    snprintf(address, sizeof address, "127.0.0.1:%d", f.port);
    struct client_fx cfx;
    cfx_new_timeout(&loop, &cfx, address, 100);

    struct result r = {0};
    assert_int_equal(call_status(cfx.cl, 450, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, SLUICE_ERR_TIMEOUT);
    char want[128];
    snprintf(want, sizeof want, "no connection to %s within 450 ms: connect timed out after 100 ms",
             address);
    assert_string_equal(r.msg, want);
    assert_int_equal(cfx.connects, 0);
    /* The first connection was given up, so the fake server saw it close. */
    RUN_UNTIL(&loop, f.peer_closed, WAIT_MS);

    cfx_close(&loop, &cfx);
    fake_close(&loop, &f);
    loop_finish(&loop);
}

/* A client that asks for large replies and disappears before reading them: the server's writes
 * fail, it drops that connection and goes on serving. */
static void test_peer_gone_mid_reply(void **state)
{
    enum { N = 16 };
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    int port = rpc_server_port(fx.srv);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, port);
    expect_status_ok(&loop, cfx.cl);

    struct raw gone = {0};
    bytes_put_hello(&gone.out, RPC_PROTOCOL_VERSION);
    for (int i = 1; i <= N; i++)
        bytes_put_get_elements(&gone.out, (uint64_t)i, (uint64_t)i, MODE_PAYLOAD, 1u << 20);
    raw_connect(&loop, &gone, port, false, 64 << 10);
    RUN_UNTIL(&loop, gone.written && fx.requests >= 1 + N, WAIT_MS);
    assert_true(fx.max_pending > 0);
    raw_close(&loop, &gone);

    RUN_UNTIL(&loop, fx.closes == 1, WAIT_MS);
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(fx.opens, 2);

    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* ---- closing
 * ------------------------------------------------------------------------------------- */

struct close_probe {
    struct result *results;
    int n;
    int done_before_close; /* how many callbacks had run when the close callback fired */
    bool closed;
};

static void probe_closed(void *user)
{
    struct close_probe *p = user;
    for (int i = 0; i < p->n; i++)
        p->done_before_close += p->results[i].done;
    p->closed = true;
}

static void test_client_close_cancels(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));

    /* Two calls written and held by the server, and one waiting for a connection on a second
     * client whose server does not exist. */
    struct result r[3];
    memset(r, 0, sizeof r);
    assert_int_equal(call_elements(cfx.cl, 1, MODE_HOLD, 0, 0, &r[0]), 0);
    assert_int_equal(call_elements(cfx.cl, 2, MODE_HOLD, 0, 5000, &r[1]), 0);
    RUN_UNTIL(&loop, fx.nheld == 2, WAIT_MS);

    struct client_fx dead;
    cfx_new_port(&loop, &dead, free_port());
    assert_int_equal(call_status(dead.cl, 0, &r[2]), 0);
    run_for(&loop, 50);

    struct close_probe p1 = {r, 2, 0, false}, p2 = {r + 2, 1, 0, false};
    rpc_client_close(cfx.cl, probe_closed, &p1);
    rpc_client_close(dead.cl, probe_closed, &p2);
    /* Callbacks ran synchronously, before either close completes. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].done, 1);
        assert_int_equal(r[i].status, SLUICE_ERR_CANCELLED);
        assert_string_equal(r[i].msg, "client closed");
    }
    struct result late = {0};
    assert_int_equal(call_status(cfx.cl, 0, &late), SLUICE_ERR_CLOSED);
    RUN_UNTIL(&loop, p1.closed && p2.closed, WAIT_MS);
    assert_int_equal(p1.done_before_close, 2);
    assert_int_equal(p2.done_before_close, 1);
    assert_int_equal(late.done, 0);

    /* The server notices the client left; the held requests can no longer be answered. */
    RUN_UNTIL(&loop, fx.closes == 1, WAIT_MS);
    for (size_t i = 0; i < fx.nheld; i++) {
        assert_int_equal(rpc_conn_reply_error(fx.held[i].conn, fx.held[i].id, SLUICE_ERR_FN, "x"),
                         SLUICE_ERR_CLOSED);
        rpc_conn_unref(fx.held[i].conn);
    }
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* A server closed from inside its own request handler, with a client still attached. */

static void close_from_handler(struct rpc_server *srv, struct rpc_conn *conn,
                               const Sluice__Envelope *req, void *user)
{
    bool *closed = user;
    assert_int_equal(rpc_conn_reply_error(conn, req->id, SLUICE_ERR_UNAVAILABLE, "bye"), 0);
    rpc_server_close(srv, set_flag, closed);
    /* The close has begun: replies are refused from now on. */
    assert_false(rpc_conn_is_open(conn));
}

static void test_server_close_from_handler(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    bool closed = false;
    struct rpc_server_opts opts = {
        .on_request = close_from_handler, .user = &closed, .sec = sec_server};
    struct rpc_server *srv;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(rpc_server_start(&loop, &opts, &srv, err, sizeof err), 0);
    assert_string_equal(rpc_server_host(srv), "127.0.0.1");
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, rpc_server_port(srv));
    struct result r = {0};
    assert_int_equal(call_status(cfx.cl, 5000, &r), 0);
    RUN_UNTIL(&loop, closed && r.done, WAIT_MS);
    /* The Error was queued before the close, which cancels unwritten writes: either it arrived
     * or the connection was lost first. Both are a failure, never a hang. */
    assert_true(r.status == SLUICE_ERR_UNAVAILABLE);
    cfx_close(&loop, &cfx);
    loop_finish(&loop);
}

static void test_server_start_errors(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    int port = rpc_server_port(fx.srv);

    /* The port is taken: a clear message, and nothing left on the loop. */
    struct rpc_server_opts opts = {.port = port, .on_request = fx_on_request};
    struct rpc_server *srv = NULL;
    char err[SLUICE_ERRMSG_SIZE], want[128];
    assert_int_equal(rpc_server_start(&loop, &opts, &srv, err, sizeof err), -EADDRINUSE);
    snprintf(want, sizeof want, "listen on 127.0.0.1:%d: Address already in use", port);
    assert_string_equal(err, want);
    assert_null(srv);

    opts.port = 70000;
    assert_int_equal(rpc_server_start(&loop, &opts, &srv, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "listen on 127.0.0.1:70000: port out of range");

    /* A client with a bad address is refused up front. */
    struct rpc_client_opts copts = {.address = "nowhere"};
    struct rpc_client *cl = NULL;
    assert_int_equal(rpc_client_new(&loop, &copts, &cl, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "bad address 'nowhere': expected HOST:PORT");
    assert_null(cl);

    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* ---- TLS ---------------------------------------------------------------------------------------
 */

/* Peers that do not speak TLS, or speak it badly, against a TLS server: each is cut off without
 * ever reaching the handler or being announced, the plain one is told why in a plain Error frame,
 * and a proper TLS client is served all along. */
static void test_tls_garbage(void **state)
{
    enum { NRAW = 5 };
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    int port = rpc_server_port(fx.srv);
    struct client_fx cfx;
    cfx_new_port(&loop, &cfx, port);
    expect_status_ok(&loop, cfx.cl);

    struct raw raw[NRAW];
    memset(raw, 0, sizeof raw);
    /* 0: a plain client's Hello. */
    bytes_put_hello(&raw[0].out, RPC_PROTOCOL_VERSION);
    /* 1: a handshake record header, then random bytes. */
    static const uint8_t handshake[] = {22, 3, 1, 0, 200};
    bytes_put(&raw[1].out, handshake, sizeof handshake);
    uint64_t rng = 0x5eed;
    for (int i = 0; i < 4096; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint8_t byte = (uint8_t)(rng >> 56);
        bytes_put(&raw[1].out, &byte, 1);
    }
    /* 2: a record of the largest length there is. */
    static const uint8_t huge[] = {22, 3, 3, 0xFF, 0xFF, 1, 0, 0xFF, 0xFF};
    bytes_put(&raw[2].out, huge, sizeof huge);
    /* 3: an alert before any handshake. */
    static const uint8_t alert[] = {21, 3, 3, 0, 2, 2, 40};
    bytes_put(&raw[3].out, alert, sizeof alert);
    /* 4: application data before any handshake. */
    static const uint8_t data[] = {23, 3, 3, 0, 4, 1, 2, 3, 4};
    bytes_put(&raw[4].out, data, sizeof data);

    for (int i = 0; i < NRAW; i++)
        raw_connect(&loop, &raw[i], port, true, 0);
    expect_status_ok(&loop, cfx.cl);
    for (int i = 0; i < NRAW; i++) {
        RUN_UNTIL(&loop, raw[i].eof, WAIT_MS);
        /* The server's Hello waits for a handshake that never completes. */
        assert_int_equal(raw[i].hellos, 0);
    }
    assert_int_equal(raw[0].error_code, SLUICE_ERR_AUTH);
    assert_string_equal(raw[0].error_msg,
                        "tls: this server requires TLS (give the client --tls-ca)");
    assert_false(raw[0].decode_failed);
    expect_status_ok(&loop, cfx.cl);
    assert_int_equal(cfx.connects, 1);
    assert_int_equal(fx.opens, 1);
    assert_int_equal(fx.requests, 3);

    for (int i = 0; i < NRAW; i++)
        raw_close(&loop, &raw[i]);
    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    assert_int_equal(fx.closes, 1);
    loop_finish(&loop);
}

/* The calls of a client whose connections fail at the TLS layer wait, and time out quoting the
 * TLS failure. */
static void expect_tls_failure(uv_loop_t *loop, struct rpc_client *cl, const char *why)
{
    struct result r = {0};
    assert_int_equal(call_status(cl, 1500, &r), 0);
    RUN_UNTIL(loop, r.done, WAIT_MS);
    assert_int_not_equal(r.status, 0);
    if (strstr(r.msg, why) == NULL)
        fail_msg("expected '%s' in '%s'", why, r.msg);
}

/* A TLS client against a plain server, a plain client against a TLS server: both fail with a
 * message that says what is wrong; the plain client hears it from the server, at once. */
static void test_tls_mismatch(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    struct client_fx cfx;

    struct security_ctx *saved_server = sec_server, *saved_client = sec_client;
    sec_server = NULL;
    fx_start(&loop, &fx, 0);
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));
    expect_tls_failure(&loop, cfx.cl,
                       "tls: the server does not speak TLS (is it started with --tls-cert and "
                       "--tls-key?)");
    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    assert_int_equal(fx.opens, 0);

    sec_server = saved_server;
    sec_client = NULL;
    fx_start(&loop, &fx, 0);
    cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));
    struct result r = {0};
    assert_int_equal(call_status(cfx.cl, 5000, &r), 0);
    RUN_UNTIL(&loop, r.done, WAIT_MS);
    assert_int_equal(r.status, SLUICE_ERR_AUTH);
    assert_string_equal(r.msg, "tls: this server requires TLS (give the client --tls-ca)");
    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    assert_int_equal(fx.opens, 0);
    sec_client = saved_client;
    loop_finish(&loop);
}

/* Certificates that must not pass: a server's from a CA the client does not trust, expired, or
 * for another host; a client's from another CA, or none, on a server that asks for one. */
static void test_tls_verification(void **state)
{
    static const struct {
        const char *server, *client_cert, *client_ca;
        const char *why;
    } cases[] = {
        {"other", "node", "ca", "tls: certificate verify failed: unable to get local issuer"},
        {"expired", "node", "ca", "tls: certificate verify failed: certificate has expired"},
        {"wronghost", "node", "ca", "tls: certificate verify failed: IP address mismatch"},
        {"node", "node", "ca2", "tls: certificate verify failed: unable to get local issuer"},
        {"node", "other", "ca", "tls: refused by the peer: "},
        {"node", NULL, "ca", "tls: refused by the peer: tlsv13 alert certificate required"},
    };
    struct security_ctx *saved_server = sec_server, *saved_client = sec_client;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uv_loop_t loop;
        assert_int_equal(uv_loop_init(&loop), 0);
        sec_server = tls_test_sec(cases[i].server, "ca", SECURITY_SERVER);
        sec_client = tls_test_sec(cases[i].client_cert, cases[i].client_ca, SECURITY_CLIENT);
        struct server_fx fx;
        fx_start(&loop, &fx, 0);
        struct client_fx cfx;
        cfx_new_port(&loop, &cfx, rpc_server_port(fx.srv));
        expect_tls_failure(&loop, cfx.cl, cases[i].why);
        cfx_close(&loop, &cfx);
        fx_close(&loop, &fx);
        assert_int_equal(fx.opens, 0);
        loop_finish(&loop);
        security_ctx_free(sec_server);
        security_ctx_free(sec_client);
    }
    sec_server = saved_server;
    sec_client = saved_client;
}

/* The server's name is checked as dialled: localhost is in its certificate. */
static void test_tls_dial_by_name(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    char address[64];
    snprintf(address, sizeof address, "localhost:%d", rpc_server_port(fx.srv));
    struct client_fx cfx;
    cfx_new(&loop, &cfx, address);
    expect_status_ok(&loop, cfx.cl);
    cfx_close(&loop, &cfx);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

static int tls_group_setup(void **state)
{
    sec_server = tls_test_sec("node", "ca", SECURITY_SERVER);
    sec_client = tls_test_sec("node", "ca", SECURITY_CLIENT);
    return 0;
}

static int tls_group_teardown(void **state)
{
    security_ctx_free(sec_server);
    security_ctx_free(sec_client);
    sec_server = sec_client = NULL;
    tls_certs_cleanup();
    return 0;
}

int main(void)
{
    /* As in every sluice process: a write to a connection the peer closed is an error, not the
     * end of the process. */
    signal(SIGPIPE, SIG_IGN);
    log_init("test_rpc", LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_address),
        cmocka_unit_test(test_parse_address_list),
        cmocka_unit_test(test_incarnation),
        cmocka_unit_test(test_handshake_and_status),
        cmocka_unit_test(test_pipelined_out_of_order),
        cmocka_unit_test(test_corked_replies),
        cmocka_unit_test(test_call_before_server),
        cmocka_unit_test(test_call_timeout),
        cmocka_unit_test(test_call_timeout_after_answers),
        cmocka_unit_test(test_waiting_call_timeout),
        cmocka_unit_test(test_withdraw_waiting_call),
        cmocka_unit_test(test_server_restart),
        cmocka_unit_test(test_error_reply),
        cmocka_unit_test(test_large_reply),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_server_version_mismatch),
        cmocka_unit_test(test_client_version_mismatch),
        cmocka_unit_test(test_client_unknown_reply_id),
        cmocka_unit_test(test_garbage_disconnected),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_addresses),
        cmocka_unit_test(test_handshake_timeout),
        cmocka_unit_test(test_peer_gone_mid_reply),
        cmocka_unit_test(test_client_close_cancels),
        cmocka_unit_test(test_server_close_from_handler),
        cmocka_unit_test(test_server_start_errors),
        cmocka_unit_test(test_reply_not_leader),
        cmocka_unit_test(test_follow_named_leader),
        cmocka_unit_test(test_follow_waits_for_written_calls),
        cmocka_unit_test(test_follow_at_handshake),
        cmocka_unit_test(test_list_dead_first),
        cmocka_unit_test(test_list_no_leader_named),
        cmocka_unit_test(test_list_no_leader_anywhere),
        cmocka_unit_test(test_list_refused),
        cmocka_unit_test(test_list_failover),
        cmocka_unit_test(test_list_silence_bound),
    };
    /* The same over mutual TLS, where they apply (raw sockets speak plain frames). */
    const struct CMUnitTest tls_tests[] = {
        cmocka_unit_test(test_handshake_and_status),
        cmocka_unit_test(test_pipelined_out_of_order),
        cmocka_unit_test(test_corked_replies),
        cmocka_unit_test(test_call_before_server),
        cmocka_unit_test(test_call_timeout),
        cmocka_unit_test(test_server_restart),
        cmocka_unit_test(test_error_reply),
        cmocka_unit_test(test_large_reply),
        cmocka_unit_test(test_client_close_cancels),
        cmocka_unit_test(test_server_close_from_handler),
        cmocka_unit_test(test_tls_garbage),
        cmocka_unit_test(test_tls_mismatch),
        cmocka_unit_test(test_tls_verification),
        cmocka_unit_test(test_tls_dial_by_name),
        cmocka_unit_test(test_follow_named_leader),
        cmocka_unit_test(test_list_failover),
    };
    int failed = cmocka_run_group_tests_name("plain", tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("tls", tls_tests, tls_group_setup, tls_group_teardown);
    return failed;
}
