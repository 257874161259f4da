/* GetElements replies over real sockets on 127.0.0.1 without copies: the server writes a
 * payload from several pieces of its own memory (rpc_conn_reply_elements) and learns when each
 * write is done; the client receives large replies straight into buffers from its pool and takes
 * them over (rpc_client_take_reply). Checked: every byte arrives, replies of every size mixed on
 * one connection, which replies can be taken over, pool reuse, the synchronous refusals, and the
 * sent callback running exactly once, also when the connection dies first. Every wait is
 * bounded, and every test ends with uv_loop_close() == 0. The suite runs twice: over plain TCP,
 * then over mutual TLS (certificates made by make_certs.sh), where the same guarantees hold. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bufpool.h"
#include "common/error.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/security.h"

#include "lib/loop.h"
#include "lib/tls.h"

#define WAIT_MS 20000
#define MAX_CALLS 64
/* The server's data: replies are cut from it, at an offset given in the request. */
#define SOURCE_BYTES (40u << 20)

/* NULL in the plain run; the TLS settings of either end in the TLS run. */
static struct security_ctx *sec_server, *sec_client;

static uint8_t *source;

static void make_source(void)
{
    if (source)
        return;
    source = malloc(SOURCE_BYTES);
    assert_non_null(source);
    for (size_t i = 0; i < SOURCE_BYTES; i++)
        source[i] = (uint8_t)(i * 2654435761u >> 13);
}

/* ---- server: requests say what to send --------------------------------------------------------
 * task_id: the offset into source; max_bytes: the payload length; max_elements: into how many
 * pieces to cut it (0: a copied reply through rpc_conn_reply instead); round: the count to put in
 * the reply. */

struct server_fx {
    struct rpc_server *srv;
    unsigned sent_ok, sent_failed, accepted;
    int last_rc;
    bool closed;
    struct rpc_conn *last_conn; /* referenced */
};

static void on_sent(void *arg, int status)
{
    struct server_fx *fx = arg;
    if (status == 0)
        fx->sent_ok++;
    else
        fx->sent_failed++;
}

static void fx_on_request(struct rpc_server *srv, struct rpc_conn *conn,
                          const Sluice__Envelope *req, void *user)
{
    struct server_fx *fx = user;
    (void)srv;
    assert_int_equal(req->body_case, SLUICE__ENVELOPE__BODY_GET_ELEMENTS);
    const Sluice__GetElementsRequest *g = req->get_elements;
    assert_true(g->task_id + g->max_bytes <= SOURCE_BYTES);
    if (fx->last_conn)
        rpc_conn_unref(fx->last_conn);
    rpc_conn_ref(conn);
    fx->last_conn = conn;
    if (g->max_elements == 0) {
        Sluice__GetElementsReply body = SLUICE__GET_ELEMENTS_REPLY__INIT;
        body.count = (uint32_t)g->round;
        body.payload.data = source + g->task_id;
        body.payload.len = g->max_bytes;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY;
        env.get_elements_reply = &body;
        fx->last_rc = rpc_conn_reply(conn, req->id, &env);
        return;
    }
    uv_buf_t segs[RPC_MAX_SEGS + 1];
    unsigned n = g->max_elements;
    assert_true(n <= RPC_MAX_SEGS + 1);
    size_t off = g->task_id, left = g->max_bytes;
    for (unsigned i = 0; i < n; i++) {
        size_t len = i + 1 == n ? left : left / (n - i) + (i % 3);
        if (len > left)
            len = left;
        segs[i] = uv_buf_init((char *)source + off, (unsigned)len);
        off += len;
        left -= len;
    }
    fx->last_rc = rpc_conn_reply_elements(conn, req->id, (uint32_t)g->round, g->round % 2, segs, n,
                                          on_sent, fx);
    if (fx->last_rc == 0)
        fx->accepted++;
}

static void fx_start(uv_loop_t *loop, struct server_fx *fx, uint32_t max_frame)
{
    memset(fx, 0, sizeof *fx);
    struct rpc_server_opts opts = {
        .host = "127.0.0.1",
        .role = SLUICE__ROLE__ROLE_WORKER,
        .incarnation = rpc_new_incarnation(),
        .max_frame = max_frame,
        .on_request = fx_on_request,
        .user = fx,
        .sec = sec_server,
    };
    char err[SLUICE_ERRMSG_SIZE];
    if (rpc_server_start(loop, &opts, &fx->srv, err, sizeof err) != 0)
        fail_msg("rpc_server_start: %s", err);
}

static void fx_close(uv_loop_t *loop, struct server_fx *fx)
{
    if (fx->last_conn)
        rpc_conn_unref(fx->last_conn);
    fx->last_conn = NULL;
    rpc_server_close(fx->srv, set_flag, &fx->closed);
    RUN_UNTIL(loop, fx->closed, WAIT_MS);
}

/* ---- client ------------------------------------------------------------------------------------
 */

struct result {
    bool done;
    int status;
    char msg[SLUICE_ERRMSG_SIZE];
    uint64_t offset;
    size_t len;
    uint32_t count;
    bool eos;
    bool payload_ok;
    bool taken;
    void *block;
    size_t block_cap;
    const uint8_t *payload; /* into block, when taken */
    struct rpc_client *cl;
};

static void on_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct result *r = user;
    r->done = true;
    r->status = status;
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
    if (status != 0)
        return;
    assert_int_equal(reply->body_case, SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY);
    const Sluice__GetElementsReply *g = reply->get_elements_reply;
    r->count = g->count;
    r->eos = g->end_of_sequence;
    r->payload_ok = g->payload.len == r->len &&
                    (r->len == 0 || memcmp(g->payload.data, source + r->offset, r->len) == 0);
    r->block = rpc_client_take_reply(r->cl, &r->block_cap);
    r->taken = r->block != NULL;
    if (r->taken) {
        r->payload = g->payload.data;
        assert_true(r->payload >= (uint8_t *)r->block &&
                    r->payload + r->len <= (uint8_t *)r->block + r->block_cap);
        /* Only once. */
        size_t cap;
        assert_null(rpc_client_take_reply(r->cl, &cap));
        assert_int_equal(cap, 0);
    }
}

static size_t count_done(const struct result *r, size_t n)
{
    size_t done = 0;
    for (size_t i = 0; i < n; i++)
        done += r[i].done;
    return done;
}

static int call(struct rpc_client *cl, uint64_t offset, size_t len, unsigned pieces, uint32_t count,
                struct result *r)
{
    memset(r, 0, sizeof *r);
    r->offset = offset;
    r->len = len;
    r->cl = cl;
    Sluice__GetElementsRequest g = SLUICE__GET_ELEMENTS_REQUEST__INIT;
    g.task_id = offset;
    g.max_bytes = len;
    g.max_elements = pieces;
    g.round = count;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS;
    env.get_elements = &g;
    return rpc_call(cl, &env, WAIT_MS, on_reply, r);
}

static struct rpc_client *client_new(uv_loop_t *loop, int port, struct bufpool *pool)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    struct rpc_client_opts opts = {
        .address = addr,
        .role = SLUICE__ROLE__ROLE_CLIENT,
        .incarnation = rpc_new_incarnation(),
        .pool = pool,
        .sec = sec_client,
    };
    struct rpc_client *cl;
    char err[SLUICE_ERRMSG_SIZE];
    if (rpc_client_new(loop, &opts, &cl, err, sizeof err) != 0)
        fail_msg("rpc_client_new: %s", err);
    return cl;
}

static void client_close(uv_loop_t *loop, struct rpc_client *cl)
{
    bool closed = false;
    rpc_client_close(cl, set_flag, &closed);
    RUN_UNTIL(loop, closed, WAIT_MS);
}

/* ---- tests -------------------------------------------------------------------------------------
 */

/* Replies of every size, from one piece or many, copied or not, pipelined on one connection in
 * an order that puts small frames right after large ones (the reader's header-only reads). */
static void test_mixed_sizes_pipelined(void **state)
{
    (void)state;
    make_source();
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct bufpool *pool;
    assert_int_equal(bufpool_new(64u << 20, 64u << 20, &pool), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct rpc_client *cl = client_new(&loop, rpc_server_port(fx.srv), pool);

    static const struct {
        size_t len;
        unsigned pieces;
    } plan[] = {
        {0, 1},
        {10, 1},
        {3u << 20, 1},
        {5, 2},
        {70000, 3},
        {1u << 20, 0},
        {9u << 20, 128},
        {1, 1},
        {300000, 7},
        {64u << 10, 1},
        {2u << 20, 40},
        {100, 0},
        {(1u << 20) + 1, 2},
        {7, 1},
        {5u << 20, 0},
    };
    enum { N = sizeof plan / sizeof plan[0] };
    struct result r[N];
    uint64_t offset = 0;
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(call(cl, offset, plan[i].len, plan[i].pieces, (uint32_t)i, &r[i]), 0);
        offset = (offset + 12345 * (i + 1)) % (SOURCE_BYTES - (10u << 20));
    }
    RUN_UNTIL(&loop, count_done(r, N) == N, WAIT_MS);
    unsigned zero_copy = 0;
    for (size_t i = 0; i < N; i++) {
        if (r[i].status != 0)
            fail_msg("reply %zu: %s", i, r[i].msg);
        assert_int_equal(r[i].count, i);
        if (plan[i].pieces)
            assert_int_equal(r[i].eos, i % 2);
        assert_true(r[i].payload_ok);
        /* Small replies arrive inside the read buffer and are copied by whoever keeps them. */
        if (plan[i].len <= 100)
            assert_false(r[i].taken);
        /* Replies of megabytes are read into a buffer of their own. */
        if (plan[i].len >= (1u << 20))
            assert_true(r[i].taken);
        if (r[i].taken) {
            /* The block stays valid after the callback. */
            assert_memory_equal(r[i].payload, source + r[i].offset, r[i].len);
            bufpool_put(pool, r[i].block, r[i].block_cap);
        }
        zero_copy += plan[i].pieces != 0;
    }
    RUN_UNTIL(&loop, fx.sent_ok == zero_copy, WAIT_MS);
    assert_int_equal(fx.accepted, zero_copy);
    assert_int_equal(fx.sent_failed, 0);

    /* Blocks given back serve the next large replies: the pool shrinks as they are used. */
    size_t kept = bufpool_count(pool);
    assert_true(kept > 0);
    struct result again;
    assert_int_equal(call(cl, 777, 3u << 20, 4, 1, &again), 0);
    RUN_UNTIL(&loop, again.done, WAIT_MS);
    assert_true(again.payload_ok && again.taken);
    assert_int_equal(bufpool_count(pool), kept - 1);
    bufpool_put(pool, again.block, again.block_cap);

    client_close(&loop, cl);
    fx_close(&loop, &fx);
    loop_finish(&loop);
    bufpool_free(pool);
}

/* Without a pool the client still takes large replies over; they are plain heap blocks. */
static void test_no_pool(void **state)
{
    (void)state;
    make_source();
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct rpc_client *cl = client_new(&loop, rpc_server_port(fx.srv), NULL);
    struct result r[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(call(cl, (uint64_t)i * 1000, 2u << 20, 3, 5, &r[i]), 0);
    RUN_UNTIL(&loop, r[0].done && r[1].done && r[2].done, WAIT_MS);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].status, 0);
        assert_true(r[i].payload_ok && r[i].taken);
        free(r[i].block);
    }
    client_close(&loop, cl);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* Refusals are synchronous, never call sent, and leave the connection usable. */
static void test_refusals(void **state)
{
    (void)state;
    make_source();
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 1u << 20);
    struct rpc_client *cl = client_new(&loop, rpc_server_port(fx.srv), NULL);

    /* Over the server's frame limit. */
    struct result big;
    assert_int_equal(call(cl, 0, 1u << 20, 2, 1, &big), 0);
    RUN_UNTIL(&loop, fx.last_conn != NULL, WAIT_MS);
    assert_int_equal(fx.last_rc, SLUICE_ERR_TOO_LARGE);
    /* Too many pieces. */
    struct result many;
    assert_int_equal(call(cl, 0, 1000, RPC_MAX_SEGS + 1, 1, &many), 0);
    RUN_UNTIL(&loop, fx.last_rc == SLUICE_ERR_INVALID, WAIT_MS);
    assert_int_equal(fx.accepted, 0);
    assert_int_equal(fx.sent_ok + fx.sent_failed, 0);
    assert_false(big.done || many.done);
    /* The connection still works; exactly the limit's worth of pieces is fine. */
    struct result ok;
    assert_int_equal(call(cl, 5, 1000, RPC_MAX_SEGS, 2, &ok), 0);
    RUN_UNTIL(&loop, ok.done, WAIT_MS);
    assert_int_equal(ok.status, 0);
    assert_true(ok.payload_ok);
    RUN_UNTIL(&loop, fx.sent_ok == 1, WAIT_MS);
    free(ok.block);

    /* A connection that is gone refuses with SLUICE_ERR_CLOSED. */
    struct rpc_conn *conn = fx.last_conn;
    client_close(&loop, cl);
    RUN_UNTIL(&loop, !rpc_conn_is_open(conn), WAIT_MS);
    uv_buf_t seg = uv_buf_init((char *)source, 10);
    assert_int_equal(rpc_conn_reply_elements(conn, 99, 1, false, &seg, 1, on_sent, &fx),
                     SLUICE_ERR_CLOSED);
    assert_int_equal(fx.sent_ok + fx.sent_failed, 1);
    fx_close(&loop, &fx);
    loop_finish(&loop);
}

/* A client that goes away with replies queued: every accepted reply's sent runs exactly once
 * (written, or failed) before the server has closed. */
static void test_sent_runs_once_when_the_peer_dies(void **state)
{
    (void)state;
    make_source();
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_fx fx;
    fx_start(&loop, &fx, 0);
    struct rpc_client *cl = client_new(&loop, rpc_server_port(fx.srv), NULL);
    struct result r[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(call(cl, (uint64_t)i, 30u << 20, 16, 1, &r[i]), 0);
    RUN_UNTIL(&loop, fx.accepted == 8, WAIT_MS);
    client_close(&loop, cl);
    for (int i = 0; i < 8; i++) {
        assert_true(r[i].done);
        if (r[i].status == 0) {
            assert_true(r[i].payload_ok);
            free(r[i].block);
        }
    }
    fx_close(&loop, &fx);
    assert_int_equal(fx.sent_ok + fx.sent_failed, 8);
    assert_true(fx.sent_failed > 0);
    loop_finish(&loop);
}

static int cleanup(void **state)
{
    (void)state;
    free(source);
    source = NULL;
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_sizes_pipelined),
        cmocka_unit_test(test_no_pool),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_sent_runs_once_when_the_peer_dies),
    };
    int failed = cmocka_run_group_tests_name("plain", tests, NULL, cleanup);
    sec_server = tls_test_sec("node", "ca", SECURITY_SERVER);
    sec_client = tls_test_sec("node", "ca", SECURITY_CLIENT);
    failed += cmocka_run_group_tests_name("tls", tests, NULL, cleanup);
    security_ctx_free(sec_server);
    security_ctx_free(sec_client);
    tls_certs_cleanup();
    return failed;
}
