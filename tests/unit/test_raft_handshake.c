/* The Raft port's handshake (dispatcher/raft_handshake.h), run on both ends in memory through
 * packed Envelopes, for every pairing of tokens, matching and differing clusters, a peer of
 * another role, malformed RaftPeerHellos and frames out of order; and the address splitter. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "dispatcher/raft_handshake.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t TOKEN[] = "0123456789abcdef";
static const uint8_t OTHER[] = "fedcba9876543210";
#define TOKEN_LEN 16
#define CLUSTER "1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003"

/* Packed Envelopes in flight in one direction. */
struct wire {
    uint8_t *buf[8];
    size_t len[8];
    unsigned n, head;
};

static void wire_put(struct wire *w, const Sluice__Envelope *env)
{
    assert_true(w->n < 8);
    size_t len = sluice__envelope__get_packed_size(env);
    w->buf[w->n] = malloc(len ? len : 1);
    sluice__envelope__pack(env, w->buf[w->n]);
    w->len[w->n++] = len;
}

static Sluice__Envelope *wire_get(struct wire *w)
{
    if (w->head == w->n)
        return NULL;
    Sluice__Envelope *env = sluice__envelope__unpack(NULL, w->len[w->head], w->buf[w->head]);
    free(w->buf[w->head++]);
    assert_non_null(env);
    return env;
}

static void wire_clear(struct wire *w)
{
    while (w->head < w->n)
        free(w->buf[w->head++]);
}

/* What one end does, as the shell does it. */
struct end {
    struct raft_hs hs;
    uint32_t role; /* the role its Hello claims */
    uint64_t id;
    const char *address;
    const char *cluster;
    struct wire *out;
    int rc; /* the failing step's code, or 0 */
    char msg[SLUICE_ERRMSG_SIZE];
    bool open, closed, answered;
    int sent_error; /* the code of the Error sent, or 0 */
    char sent_msg[512];
};

static void end_init(struct end *e, enum auth_side side, const uint8_t *token, const char *cluster,
                     uint8_t nonce_byte, struct wire *out)
{
    memset(e, 0, sizeof *e);
    uint8_t nonce[AUTH_NONCE_LEN];
    memset(nonce, nonce_byte, sizeof nonce);
    raft_hs_init(&e->hs, side, token, token ? TOKEN_LEN : 0, cluster, nonce);
    e->role = SLUICE__ROLE__ROLE_RAFT_PEER;
    e->id = side == AUTH_CLIENT ? 2 : 1;
    e->address = side == AUTH_CLIENT ? "127.0.0.1:7002" : "127.0.0.1:7001";
    e->cluster = cluster;
    e->out = out;
    Sluice__Hello hello = SLUICE__HELLO__INIT;
    raft_hs_hello(&e->hs, &hello, 42);
    assert_int_equal(hello.version, RPC_PROTOCOL_VERSION);
    assert_int_equal(hello.role, SLUICE__ROLE__ROLE_RAFT_PEER);
    hello.role = e->role;
}

static void end_hello(struct end *e)
{
    Sluice__Hello hello = SLUICE__HELLO__INIT;
    raft_hs_hello(&e->hs, &hello, 42);
    hello.role = e->role;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    wire_put(e->out, &env);
}

static void end_feed(struct end *e, const Sluice__Envelope *in)
{
    struct raft_hs_out out;
    int rc = raft_hs_step(&e->hs, in, &out, e->msg, sizeof e->msg);
    if (out.send & RAFT_HS_SEND_PROOF) {
        Sluice__AuthProof proof = SLUICE__AUTH_PROOF__INIT;
        proof.mac.data = out.mac;
        proof.mac.len = AUTH_MAC_LEN;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_AUTH_PROOF;
        env.auth_proof = &proof;
        wire_put(e->out, &env);
    }
    if (out.send & RAFT_HS_SEND_PEER_HELLO) {
        Sluice__RaftPeerHello h = SLUICE__RAFT_PEER_HELLO__INIT;
        h.id = e->id;
        h.address = (char *)e->address;
        h.cluster = (char *)e->cluster;
        h.probe = e->hs.probe;
        h.rejoin = e->hs.rejoin;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_RAFT_PEER_HELLO;
        env.raft_peer_hello = &h;
        wire_put(e->out, &env);
    }
    if (out.send & RAFT_HS_SEND_WELCOME) {
        Sluice__RaftPeerWelcome w = SLUICE__RAFT_PEER_WELCOME__INIT;
        w.last_index = e->hs.last_index;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_RAFT_PEER_WELCOME;
        env.raft_peer_welcome = &w;
        wire_put(e->out, &env);
    }
    if (out.send & RAFT_HS_SEND_ERROR) {
        assert_true(rc < 0);
        Sluice__Error er = SLUICE__ERROR__INIT;
        er.code = out.error_code;
        er.message = out.error_msg;
        e->sent_error = out.error_code;
        snprintf(e->sent_msg, sizeof e->sent_msg, "%s", out.error_msg);
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_ERROR;
        env.error = &er;
        wire_put(e->out, &env);
    }
    if (rc < 0) {
        e->rc = rc;
        e->closed = true;
    }
    if (out.open)
        e->open = true;
    if (out.answered)
        e->answered = true;
}

/* Runs the exchange until both ends are quiet: dialler d, acceptor a. */
static void run(struct end *d, struct end *a, struct wire *to_a, struct wire *to_d)
{
    end_hello(d);
    end_hello(a);
    for (int round = 0; round < 20; round++) {
        bool moved = false;
        Sluice__Envelope *env;
        while (!a->closed && !a->open && !a->answered && (env = wire_get(to_a)) != NULL) {
            end_feed(a, env);
            sluice__envelope__free_unpacked(env, NULL);
            moved = true;
        }
        while (!d->closed && !d->open && !d->answered && (env = wire_get(to_d)) != NULL) {
            end_feed(d, env);
            sluice__envelope__free_unpacked(env, NULL);
            moved = true;
        }
        if (!moved)
            break;
    }
    wire_clear(to_a);
    wire_clear(to_d);
}

struct pairing {
    const char *name;
    const uint8_t *dtoken, *atoken;
    const char *dcluster, *acluster;
    uint32_t drole;
    int d_rc, a_rc;    /* 0: open */
    const char *d_msg; /* the dialler's reason (exact), or NULL */
    const char *a_msg; /* the acceptor's reason (exact), or NULL */
    int a_error;       /* the code of the Error the acceptor sent, or 0 */
};

static const struct pairing PAIRINGS[] = {
    {"same token", TOKEN, TOKEN, CLUSTER, CLUSTER, SLUICE__ROLE__ROLE_RAFT_PEER, 0, 0, NULL, NULL,
     0},
    {"no tokens", NULL, NULL, CLUSTER, CLUSTER, SLUICE__ROLE__ROLE_RAFT_PEER, 0, 0, NULL, NULL, 0},
    {"wrong token", OTHER, TOKEN, CLUSTER, CLUSTER, SLUICE__ROLE__ROLE_RAFT_PEER, SLUICE_ERR_AUTH,
     SLUICE_ERR_AUTH, NULL, AUTH_MSG_WRONG, SLUICE_ERR_AUTH},
    {"dialler without token", NULL, TOKEN, CLUSTER, CLUSTER, SLUICE__ROLE__ROLE_RAFT_PEER,
     SLUICE_ERR_AUTH, SLUICE_ERR_AUTH, AUTH_MSG_SERVER_REQUIRES, AUTH_MSG_PEER_NONE,
     SLUICE_ERR_AUTH},
    {"acceptor without token", TOKEN, NULL, CLUSTER, CLUSTER, SLUICE__ROLE__ROLE_RAFT_PEER,
     SLUICE_ERR_AUTH, SLUICE_ERR_AUTH, AUTH_MSG_SERVER_NONE, AUTH_MSG_PEER_UNEXPECTED,
     SLUICE_ERR_AUTH},
    {"cluster mismatch", TOKEN, TOKEN, "1=a:1,2=b:2", CLUSTER, SLUICE__ROLE__ROLE_RAFT_PEER,
     SLUICE_ERR_INVALID, SLUICE_ERR_INVALID,
     "refused by the peer: cluster mismatch: this server has \"" CLUSTER
     "\", the peer has \"1=a:1,2=b:2\"",
     "cluster mismatch: this server has \"" CLUSTER "\", the peer has \"1=a:1,2=b:2\"",
     SLUICE_ERR_INVALID},
    /* Without tokens: with them the proofs, which cover the roles, would fail first. */
    {"a client on the Raft port", NULL, NULL, CLUSTER, CLUSTER, SLUICE__ROLE__ROLE_CLIENT,
     SLUICE_ERR_PROTOCOL, SLUICE_ERR_PROTOCOL,
     "refused by the peer: this is a Raft port: only Raft peers",
     "peer of role 3 on the Raft port, expected 5", SLUICE_ERR_PROTOCOL},
};

static void test_pairings(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof PAIRINGS / sizeof PAIRINGS[0]; i++) {
        const struct pairing *c = &PAIRINGS[i];
        struct wire to_a = {0}, to_d = {0};
        struct end d, a;
        end_init(&d, AUTH_CLIENT, c->dtoken, c->dcluster, 0x11, &to_a);
        end_init(&a, AUTH_SERVER, c->atoken, c->acluster, 0x22, &to_d);
        d.role = c->drole;
        run(&d, &a, &to_a, &to_d);
        print_message("%s: dialler %d \"%s\", acceptor %d \"%s\"\n", c->name, d.rc, d.msg, a.rc,
                      a.msg);
        assert_int_equal(d.rc, c->d_rc);
        assert_int_equal(a.rc, c->a_rc);
        assert_int_equal(d.open, c->d_rc == 0);
        assert_int_equal(a.open, c->a_rc == 0);
        if (c->d_msg)
            assert_string_equal(d.msg, c->d_msg);
        if (c->a_msg)
            assert_string_equal(a.msg, c->a_msg);
        assert_int_equal(a.sent_error, c->a_error);
        assert_int_equal(d.sent_error, 0); /* the dialler never answers with an Error */
        if (c->a_rc == 0) {
            assert_int_equal(a.hs.state, RAFT_HS_DONE);
            assert_int_equal(d.hs.state, RAFT_HS_DONE);
            assert_int_equal(a.hs.peer_id, 2);
            assert_string_equal(a.hs.peer_address, "127.0.0.1:7002");
        }
    }
}

/* A probe: the acceptor answers its last index and neither end opens; a rejoin: the acceptor
 * learns it and the connection opens; a probe that also says rejoin is only a probe. */
static void test_probe_and_rejoin(void **unused)
{
    (void)unused;
    for (int k = 0; k < 3; k++) {
        struct wire to_a = {0}, to_d = {0};
        struct end d, a;
        end_init(&d, AUTH_CLIENT, TOKEN, CLUSTER, 0x11, &to_a);
        end_init(&a, AUTH_SERVER, TOKEN, CLUSTER, 0x22, &to_d);
        d.hs.probe = k != 1;
        d.hs.rejoin = k >= 1;
        a.hs.last_index = 4711;
        run(&d, &a, &to_a, &to_d);
        assert_int_equal(d.rc, 0);
        assert_int_equal(a.rc, 0);
        assert_int_equal(a.hs.state, RAFT_HS_DONE);
        assert_int_equal(d.hs.state, RAFT_HS_DONE);
        assert_int_equal(a.hs.peer_id, 2);
        if (k != 1) {
            assert_true(d.answered && a.answered);
            assert_false(d.open || a.open);
            assert_true(a.hs.probe);
            assert_false(a.hs.rejoin);
            assert_int_equal(d.hs.last_index, 4711);
        } else {
            assert_true(d.open && a.open);
            assert_false(d.answered || a.answered);
            assert_false(a.hs.probe);
            assert_true(a.hs.rejoin);
            assert_int_equal(d.hs.last_index, 0);
        }
    }
    /* An acceptor that has not started Raft answers probes and refuses the rest. */
    for (int k = 0; k < 2; k++) {
        struct wire to_a = {0}, to_d = {0};
        struct end d, a;
        end_init(&d, AUTH_CLIENT, TOKEN, CLUSTER, 0x11, &to_a);
        end_init(&a, AUTH_SERVER, TOKEN, CLUSTER, 0x22, &to_d);
        d.hs.probe = k == 0;
        a.hs.not_started = true;
        run(&d, &a, &to_a, &to_d);
        if (k == 0) {
            assert_true(d.answered && a.answered);
            assert_int_equal(d.rc, 0);
        } else {
            assert_int_equal(a.rc, SLUICE_ERR_UNAVAILABLE);
            assert_int_equal(d.rc, SLUICE_ERR_UNAVAILABLE);
            assert_string_equal(a.msg, RAFT_HS_NOT_STARTED);
            assert_string_equal(d.msg, "refused by the peer: " RAFT_HS_NOT_STARTED);
            assert_false(d.open || a.open);
        }
    }
    /* A probe refused (another cluster) fails like any handshake. */
    struct wire to_a = {0}, to_d = {0};
    struct end d, a;
    end_init(&d, AUTH_CLIENT, TOKEN, "1=a:1,2=b:2", 0x11, &to_a);
    end_init(&a, AUTH_SERVER, TOKEN, CLUSTER, 0x22, &to_d);
    d.hs.probe = true;
    run(&d, &a, &to_a, &to_d);
    assert_int_equal(d.rc, SLUICE_ERR_INVALID);
    assert_false(d.answered);
}

/* A Hello of another version, and frames out of order, at each state. */
static void test_out_of_order(void **unused)
{
    (void)unused;
    uint8_t nonce[AUTH_NONCE_LEN] = {1};
    struct raft_hs hs;
    struct raft_hs_out out;
    char msg[SLUICE_ERRMSG_SIZE];

    raft_hs_init(&hs, AUTH_SERVER, NULL, 0, CLUSTER, nonce);
    Sluice__Hello hello = SLUICE__HELLO__INIT;
    hello.version = 7;
    hello.role = SLUICE__ROLE__ROLE_RAFT_PEER;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    assert_int_equal(raft_hs_step(&hs, &env, &out, msg, sizeof msg), SLUICE_ERR_VERSION);
    assert_string_equal(msg, "protocol version 7, expected 1");
    assert_true(out.send & RAFT_HS_SEND_ERROR);
    assert_int_equal(out.error_code, SLUICE_ERR_VERSION);
    assert_string_equal(out.error_msg, "protocol version 7, expected 1");
    /* Failed stays failed. */
    hello.version = RPC_PROTOCOL_VERSION;
    assert_int_equal(raft_hs_step(&hs, &env, &out, msg, sizeof msg), SLUICE_ERR_PROTOCOL);

    /* A RaftPeerHello before any Hello. */
    raft_hs_init(&hs, AUTH_SERVER, NULL, 0, CLUSTER, nonce);
    Sluice__RaftPeerHello ph = SLUICE__RAFT_PEER_HELLO__INIT;
    ph.id = 2;
    ph.address = "127.0.0.1:7002";
    ph.cluster = CLUSTER;
    Sluice__Envelope penv = SLUICE__ENVELOPE__INIT;
    penv.body_case = SLUICE__ENVELOPE__BODY_RAFT_PEER_HELLO;
    penv.raft_peer_hello = &ph;
    assert_int_equal(raft_hs_step(&hs, &penv, &out, msg, sizeof msg), SLUICE_ERR_VERSION);

    /* After the Hellos (no tokens), the acceptor wants a RaftPeerHello and nothing else. */
    raft_hs_init(&hs, AUTH_SERVER, NULL, 0, CLUSTER, nonce);
    assert_int_equal(raft_hs_step(&hs, &env, &out, msg, sizeof msg), 0);
    assert_int_equal(out.send, 0);
    assert_false(out.open);
    assert_int_equal(hs.state, RAFT_HS_PEER);
    assert_int_equal(raft_hs_step(&hs, &env, &out, msg, sizeof msg), SLUICE_ERR_PROTOCOL);
    assert_string_equal(msg, "expected a RaftPeerHello after the handshake");
    assert_int_equal(out.error_code, SLUICE_ERR_PROTOCOL);

    /* The dialler, after the Hellos, sends its RaftPeerHello and wants a welcome. */
    raft_hs_init(&hs, AUTH_CLIENT, NULL, 0, CLUSTER, nonce);
    hello.role = SLUICE__ROLE__ROLE_RAFT_PEER;
    assert_int_equal(raft_hs_step(&hs, &env, &out, msg, sizeof msg), 0);
    assert_int_equal(out.send, RAFT_HS_SEND_PEER_HELLO);
    assert_int_equal(hs.state, RAFT_HS_WELCOME);
    assert_int_equal(raft_hs_step(&hs, &penv, &out, msg, sizeof msg), SLUICE_ERR_PROTOCOL);
    assert_string_equal(msg, "expected a RaftPeerWelcome after the RaftPeerHello");
    assert_int_equal(out.send, 0); /* the dialler does not answer with an Error */

    /* An Error without a code still fails the dialler. */
    raft_hs_init(&hs, AUTH_CLIENT, NULL, 0, CLUSTER, nonce);
    Sluice__Error er = SLUICE__ERROR__INIT;
    er.message = "go away";
    Sluice__Envelope eenv = SLUICE__ENVELOPE__INIT;
    eenv.body_case = SLUICE__ENVELOPE__BODY_ERROR;
    eenv.error = &er;
    assert_int_equal(raft_hs_step(&hs, &eenv, &out, msg, sizeof msg), SLUICE_ERR_PROTOCOL);
    assert_string_equal(msg, "refused by the peer: go away");
}

static void test_check_peer_hello(void **unused)
{
    (void)unused;
    char msg[SLUICE_ERRMSG_SIZE];
    char longaddr[RAFT_HS_ADDRESS_MAX + 1];
    memset(longaddr, 'a', RAFT_HS_ADDRESS_MAX);
    longaddr[RAFT_HS_ADDRESS_MAX] = '\0';
    static const struct {
        uint64_t id;
        const char *address, *cluster;
        int rc;
        const char *msg;
    } cases[] = {
        {2, "h:1", CLUSTER, 0, NULL},
        {0, "h:1", CLUSTER, SLUICE_ERR_INVALID, "malformed RaftPeerHello: id 0"},
        {2, "", CLUSTER, SLUICE_ERR_INVALID,
         "malformed RaftPeerHello: an address of 0 bytes (1 to 255)"},
        {2, NULL, CLUSTER, SLUICE_ERR_INVALID,
         "malformed RaftPeerHello: an address of 0 bytes (1 to 255)"},
        {2, "h:1", "", SLUICE_ERR_INVALID,
         "cluster mismatch: this server has \"" CLUSTER "\", the peer has \"\""},
        {2, "h:1", NULL, SLUICE_ERR_INVALID,
         "cluster mismatch: this server has \"" CLUSTER "\", the peer has \"\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Sluice__RaftPeerHello h = SLUICE__RAFT_PEER_HELLO__INIT;
        h.id = cases[i].id;
        h.address = (char *)cases[i].address;
        h.cluster = (char *)cases[i].cluster;
        msg[0] = '\0';
        assert_int_equal(raft_hs_check_peer_hello(&h, CLUSTER, msg, sizeof msg), cases[i].rc);
        if (cases[i].msg)
            assert_string_equal(msg, cases[i].msg);
    }
    Sluice__RaftPeerHello h = SLUICE__RAFT_PEER_HELLO__INIT;
    h.id = 2;
    h.address = longaddr;
    h.cluster = CLUSTER;
    assert_int_equal(raft_hs_check_peer_hello(&h, CLUSTER, msg, sizeof msg), SLUICE_ERR_INVALID);
    assert_string_equal(msg, "malformed RaftPeerHello: an address of 256 bytes (1 to 255)");
    assert_int_equal(raft_hs_check_peer_hello(NULL, CLUSTER, msg, sizeof msg), SLUICE_ERR_INVALID);
    assert_string_equal(msg, "malformed RaftPeerHello: no body");
    /* A long cluster string is cut in the message, which stays one bounded line. */
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    h.address = "h:1";
    h.cluster = big;
    assert_int_equal(raft_hs_check_peer_hello(&h, CLUSTER, msg, sizeof msg), SLUICE_ERR_INVALID);
    assert_true(strlen(msg) < 600);
    assert_string_equal(msg + strlen(msg) - 4, "\"...");
}

static void test_split_address(void **unused)
{
    (void)unused;
    static const struct {
        const char *in;
        bool zero;
        int rc;
        const char *host;
        int port;
    } cases[] = {
        {"127.0.0.1:7001", false, 0, "127.0.0.1", 7001},
        {"localhost:1", false, 0, "localhost", 1},
        {"[::1]:65535", false, 0, "::1", 65535},
        {"0.0.0.0:0", true, 0, "0.0.0.0", 0},
        {"0.0.0.0:0", false, SLUICE_ERR_INVALID, NULL, 0},
        {"h:65536", false, SLUICE_ERR_INVALID, NULL, 0},
        {"h:", false, SLUICE_ERR_INVALID, NULL, 0},
        {":80", false, SLUICE_ERR_INVALID, NULL, 0},
        {"h", false, SLUICE_ERR_INVALID, NULL, 0},
        {"::1:80", false, SLUICE_ERR_INVALID, NULL, 0},
        {"[::1]80", false, SLUICE_ERR_INVALID, NULL, 0},
        {"h:8x", false, SLUICE_ERR_INVALID, NULL, 0},
        {"h:-1", false, SLUICE_ERR_INVALID, NULL, 0},
        {"h:000080", false, SLUICE_ERR_INVALID, NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[64] = "";
        int port = -1;
        int rc = raft_hs_split_address(cases[i].in, host, sizeof host, &port, cases[i].zero);
        if (rc != cases[i].rc)
            fail_msg("%s: %d, expected %d", cases[i].in, rc, cases[i].rc);
        if (rc == 0) {
            assert_string_equal(host, cases[i].host);
            assert_int_equal(port, cases[i].port);
        }
    }
    char small[4];
    int port;
    assert_int_equal(raft_hs_split_address("abcd:1", small, sizeof small, &port, false),
                     SLUICE_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairings),      cmocka_unit_test(test_probe_and_rejoin),
        cmocka_unit_test(test_out_of_order),  cmocka_unit_test(test_check_peer_hello),
        cmocka_unit_test(test_split_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
