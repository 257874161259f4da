#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct peer_result *r = user;
    r->done = true;
    r->status = status;
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
    if (status == 0 && reply) {
        size_t n = sluice__envelope__get_packed_size(reply);
        uint8_t *b = malloc(n ? n : 1);
        assert_non_null(b);
        sluice__envelope__pack(reply, b);
        r->reply = sluice__envelope__unpack(NULL, n, b);
        free(b);
    }
}

void peer_open(struct peer *p, const char *addr, Sluice__Role role, uint64_t incarnation)
{
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(uv_loop_init(&p->loop), 0);
    struct rpc_client_opts o = {
        .address = addr, .role = role, .incarnation = incarnation, .backoff_max_ms = 200};
    assert_int_equal(rpc_client_new(&p->loop, &o, &p->c, err, sizeof err), 0);
}

static void peer_closed(void *user)
{
    *(bool *)user = true;
}

void peer_close(struct peer *p)
{
    bool closed = false;
    rpc_client_close(p->c, peer_closed, &closed);
    while (!closed)
        uv_run(&p->loop, UV_RUN_ONCE);
    uv_run(&p->loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&p->loop), 0);
}

void peer_send(struct peer *p, Sluice__Envelope *env, uint32_t timeout_ms, struct peer_result *r)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(rpc_call(p->c, env, timeout_ms, on_reply, r), 0);
}

Sluice__Envelope *peer_wait(struct peer *p, struct peer_result *r)
{
    while (!r->done)
        uv_run(&p->loop, UV_RUN_ONCE);
    return r->reply;
}

Sluice__Envelope *peer_call(struct peer *p, Sluice__Envelope *env, uint32_t timeout_ms,
                            struct peer_result *r)
{
    peer_send(p, env, timeout_ms, r);
    return peer_wait(p, r);
}
