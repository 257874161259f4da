/* The authentication handshake (common/auth.h): the proof input's layout, known HMAC-SHA256
 * answers, verification, and the handshake state machine run on both ends for every pairing of
 * tokens, plus replayed, reflected and malformed handshakes. The per-address log limiter
 * (common/ratelimit.h) is tested at the end. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/auth.h"
#include "common/error.h"
#include "common/ratelimit.h"
#include "common/rpc.h"

#include <stdio.h>
#include <string.h>

static const uint8_t TOKEN[] = "0123456789abcdef";
static const uint8_t OTHER[] = "fedcba9876543210";
#define TOKEN_LEN 16

static void fill(uint8_t *p, uint8_t v)
{
    memset(p, v, AUTH_NONCE_LEN);
}

static void hex(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

static void test_proof_input_layout(void **unused)
{
    (void)unused;
    uint8_t a[AUTH_NONCE_LEN], b[AUTH_NONCE_LEN], in[AUTH_INPUT_MAX];
    fill(a, 0x11);
    fill(b, 0x22);
    size_t n = auth_proof_input(in, AUTH_SERVER, 1, 3, a, b);
    size_t label = strlen(AUTH_LABEL_SERVER);
    assert_int_equal(n, AUTH_INPUT_MAX);
    assert_memory_equal(in, AUTH_LABEL_SERVER, label);
    static const uint8_t roles[8] = {0, 0, 0, 1, 0, 0, 0, 3};
    assert_memory_equal(in + label, roles, 8);
    assert_memory_equal(in + label + 8, a, AUTH_NONCE_LEN);
    assert_memory_equal(in + label + 8 + AUTH_NONCE_LEN, b, AUTH_NONCE_LEN);
    n = auth_proof_input(in, AUTH_CLIENT, 3, 1, b, a);
    assert_memory_equal(in, AUTH_LABEL_CLIENT, strlen(AUTH_LABEL_CLIENT));
}

/* Values computed independently (Python's hmac module) over the layout above. */
static void test_known_answers(void **unused)
{
    (void)unused;
    uint8_t a[AUTH_NONCE_LEN], b[AUTH_NONCE_LEN], mac[AUTH_MAC_LEN];
    char text[2 * AUTH_MAC_LEN + 1];
    fill(a, 0x11);
    fill(b, 0x22);
    assert_int_equal(auth_proof(TOKEN, TOKEN_LEN, AUTH_SERVER, 1, 3, a, b, mac), 0);
    hex(mac, sizeof mac, text);
    assert_string_equal(text, "8ce06b95854aa509fa488b7299f1cdf2496f94f95e2c91699d01831e6b1d8dd7");
    assert_int_equal(auth_proof(TOKEN, TOKEN_LEN, AUTH_CLIENT, 3, 1, b, a, mac), 0);
    hex(mac, sizeof mac, text);
    assert_string_equal(text, "19c83a505f18ce67caebb0685ed3373f54c2071f15e285e711f1970924c0a9cd");
    assert_int_equal(auth_proof(NULL, 0, AUTH_SERVER, 1, 3, a, b, mac), SLUICE_ERR_INVALID);
}

static void test_verify(void **unused)
{
    (void)unused;
    uint8_t a[AUTH_NONCE_LEN], b[AUTH_NONCE_LEN], mac[AUTH_MAC_LEN];
    fill(a, 0x11);
    fill(b, 0x22);
    assert_int_equal(auth_proof(TOKEN, TOKEN_LEN, AUTH_SERVER, 1, 3, a, b, mac), 0);
    assert_int_equal(auth_verify(TOKEN, TOKEN_LEN, AUTH_SERVER, 1, 3, a, b, mac, sizeof mac), 0);
    /* Another token, the other direction's label, swapped roles or nonces, a short or flipped
     * MAC: all refused. */
    assert_int_equal(auth_verify(OTHER, TOKEN_LEN, AUTH_SERVER, 1, 3, a, b, mac, sizeof mac),
                     SLUICE_ERR_AUTH);
    assert_int_equal(auth_verify(TOKEN, TOKEN_LEN, AUTH_CLIENT, 1, 3, a, b, mac, sizeof mac),
                     SLUICE_ERR_AUTH);
    assert_int_equal(auth_verify(TOKEN, TOKEN_LEN, AUTH_SERVER, 3, 1, a, b, mac, sizeof mac),
                     SLUICE_ERR_AUTH);
    assert_int_equal(auth_verify(TOKEN, TOKEN_LEN, AUTH_SERVER, 1, 3, b, a, mac, sizeof mac),
                     SLUICE_ERR_AUTH);
    assert_int_equal(auth_verify(TOKEN, TOKEN_LEN, AUTH_SERVER, 1, 3, a, b, mac, sizeof mac - 1),
                     SLUICE_ERR_AUTH);
    assert_int_equal(auth_verify(TOKEN, TOKEN_LEN, AUTH_SERVER, 1, 3, a, b, NULL, 0),
                     SLUICE_ERR_AUTH);
    mac[7] ^= 1;
    assert_int_equal(auth_verify(TOKEN, TOKEN_LEN, AUTH_SERVER, 1, 3, a, b, mac, sizeof mac),
                     SLUICE_ERR_AUTH);
}

static void test_nonces_differ(void **unused)
{
    (void)unused;
    uint8_t a[AUTH_NONCE_LEN], b[AUTH_NONCE_LEN];
    assert_int_equal(auth_nonce(a), 0);
    assert_int_equal(auth_nonce(b), 0);
    assert_memory_not_equal(a, b, AUTH_NONCE_LEN);
}

/* ---- the handshake, both ends in memory -------------------------------------------------- */

/* One end: its state machine and the Envelopes it has queued for the other end. */
struct end {
    struct auth_hs hs;
    uint32_t role;
    Sluice__Hello hello;
    Sluice__AuthProof proof;
    uint8_t mac[AUTH_MAC_LEN];
    bool has_proof;
    int result; /* AUTH_HS_OPEN, or the failure code */
    char msg[SLUICE_ERRMSG_SIZE];
    const char *peer_msg;
};

static void end_init(struct end *e, enum auth_side side, uint32_t role, const uint8_t *token,
                     uint8_t nonce_byte)
{
    memset(e, 0, sizeof *e);
    uint8_t nonce[AUTH_NONCE_LEN];
    fill(nonce, nonce_byte);
    e->role = role;
    auth_hs_init(&e->hs, side, role, token, token ? TOKEN_LEN : 0, nonce);
    sluice__hello__init(&e->hello);
    e->hello.version = RPC_PROTOCOL_VERSION;
    e->hello.role = (Sluice__Role)role;
    e->hello.incarnation = 1000 + role;
    auth_hs_hello(&e->hs, &e->hello);
}

static Sluice__Envelope hello_env(struct end *e)
{
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_HELLO;
    env.hello = &e->hello;
    return env;
}

static Sluice__Envelope proof_env(struct end *e)
{
    sluice__auth_proof__init(&e->proof);
    e->proof.mac.data = e->mac;
    e->proof.mac.len = sizeof e->mac;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_AUTH_PROOF;
    env.auth_proof = &e->proof;
    return env;
}

/* Feeds env to e and records what happened. */
static void feed(struct end *e, const Sluice__Envelope *env)
{
    int rc = auth_hs_step(&e->hs, env, e->mac, e->msg, sizeof e->msg, &e->peer_msg);
    if (rc == AUTH_HS_SEND)
        e->has_proof = true;
    else
        e->result = rc;
}

/* Runs a whole handshake between a server and a client (each may lack a token). */
static void run(struct end *s, struct end *c, const uint8_t *stoken, const uint8_t *ctoken)
{
    end_init(s, AUTH_SERVER, SLUICE__ROLE__ROLE_DISPATCHER, stoken, 0xaa);
    end_init(c, AUTH_CLIENT, SLUICE__ROLE__ROLE_CLIENT, ctoken, 0xbb);
    Sluice__Envelope sh = hello_env(s), ch = hello_env(c);
    feed(c, &sh);
    feed(s, &ch);
    if (c->has_proof && s->has_proof) {
        Sluice__Envelope sp = proof_env(s), cp = proof_env(c);
        feed(c, &sp);
        feed(s, &cp);
    }
}

struct pairing {
    const uint8_t *stoken, *ctoken;
    int sresult, cresult;
    const char *smsg, *cmsg;   /* each side's own reason */
    const char *speer, *cpeer; /* the text each would send the other */
};

static void test_pairings(void **unused)
{
    (void)unused;
    static const struct pairing cases[] = {
        {TOKEN, TOKEN, AUTH_HS_OPEN, AUTH_HS_OPEN, NULL, NULL, NULL, NULL},
        {NULL, NULL, AUTH_HS_OPEN, AUTH_HS_OPEN, NULL, NULL, NULL, NULL},
        {TOKEN, OTHER, SLUICE_ERR_AUTH, SLUICE_ERR_AUTH, AUTH_MSG_WRONG, AUTH_MSG_WRONG,
         AUTH_MSG_WRONG, AUTH_MSG_WRONG},
        {TOKEN, NULL, SLUICE_ERR_AUTH, SLUICE_ERR_AUTH, AUTH_MSG_PEER_NONE,
         AUTH_MSG_SERVER_REQUIRES, AUTH_MSG_SERVER_REQUIRES, AUTH_MSG_PEER_NONE},
        {NULL, TOKEN, SLUICE_ERR_AUTH, SLUICE_ERR_AUTH, AUTH_MSG_PEER_UNEXPECTED,
         AUTH_MSG_SERVER_NONE, AUTH_MSG_SERVER_NONE, AUTH_MSG_PEER_UNEXPECTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct pairing *p = &cases[i];
        struct end s, c;
        run(&s, &c, p->stoken, p->ctoken);
        assert_int_equal(s.result, p->sresult);
        assert_int_equal(c.result, p->cresult);
        if (p->sresult == AUTH_HS_OPEN) {
            assert_int_equal(s.hs.state, AUTH_HS_DONE);
            assert_int_equal(c.hs.state, AUTH_HS_DONE);
            assert_int_equal(s.hs.peer_role, SLUICE__ROLE__ROLE_CLIENT);
            assert_int_equal(c.hs.peer_role, SLUICE__ROLE__ROLE_DISPATCHER);
            assert_int_equal(s.hs.peer_incarnation, 1000 + SLUICE__ROLE__ROLE_CLIENT);
            continue;
        }
        assert_int_equal(s.hs.state, AUTH_HS_FAILED);
        assert_int_equal(c.hs.state, AUTH_HS_FAILED);
        assert_string_equal(s.msg, p->smsg);
        assert_string_equal(c.msg, p->cmsg);
        assert_string_equal(s.peer_msg, p->speer);
        assert_string_equal(c.peer_msg, p->cpeer);
    }
}

/* A client's Hello and proof recorded from one handshake and replayed on a new connection: the
 * server's nonce is new, so the old proof does not verify. */
static void test_replay_is_refused(void **unused)
{
    (void)unused;
    struct end s, c;
    run(&s, &c, TOKEN, TOKEN);
    assert_int_equal(s.result, AUTH_HS_OPEN);
    uint8_t recorded_mac[AUTH_MAC_LEN];
    memcpy(recorded_mac, c.mac, sizeof recorded_mac);
    Sluice__Hello recorded_hello = c.hello;
    uint8_t recorded_nonce[AUTH_NONCE_LEN];
    memcpy(recorded_nonce, c.hs.own_nonce, sizeof recorded_nonce);
    recorded_hello.nonce.data = recorded_nonce;

    struct end s2;
    end_init(&s2, AUTH_SERVER, SLUICE__ROLE__ROLE_DISPATCHER, TOKEN, 0xcc);
    Sluice__Envelope h = SLUICE__ENVELOPE__INIT;
    h.body_case = SLUICE__ENVELOPE__BODY_HELLO;
    h.hello = &recorded_hello;
    feed(&s2, &h);
    assert_true(s2.has_proof);
    Sluice__AuthProof proof = SLUICE__AUTH_PROOF__INIT;
    proof.mac.data = recorded_mac;
    proof.mac.len = sizeof recorded_mac;
    Sluice__Envelope p = SLUICE__ENVELOPE__INIT;
    p.body_case = SLUICE__ENVELOPE__BODY_AUTH_PROOF;
    p.auth_proof = &proof;
    feed(&s2, &p);
    assert_int_equal(s2.result, SLUICE_ERR_AUTH);
    assert_string_equal(s2.msg, AUTH_MSG_WRONG);
}

/* A peer that sends our own Hello and then our own proof back. */
static void test_reflection_is_refused(void **unused)
{
    (void)unused;
    struct end s;
    end_init(&s, AUTH_SERVER, SLUICE__ROLE__ROLE_WORKER, TOKEN, 0xaa);
    Sluice__Envelope own = hello_env(&s);
    feed(&s, &own);
    assert_int_equal(s.result, SLUICE_ERR_AUTH);
    assert_string_equal(s.peer_msg, AUTH_MSG_WRONG);

    /* With another nonce but the server's own proof sent back (same label, roles swapped by
     * the reflector): the client label is expected, so it fails. */
    struct end s2, evil;
    end_init(&s2, AUTH_SERVER, SLUICE__ROLE__ROLE_WORKER, TOKEN, 0xaa);
    end_init(&evil, AUTH_CLIENT, SLUICE__ROLE__ROLE_WORKER, NULL, 0xbb);
    evil.hello.auth = true;
    uint8_t nonce[AUTH_NONCE_LEN];
    fill(nonce, 0xbb);
    evil.hello.nonce.data = nonce;
    evil.hello.nonce.len = AUTH_NONCE_LEN;
    Sluice__Envelope eh = hello_env(&evil);
    feed(&s2, &eh);
    assert_true(s2.has_proof);
    memcpy(evil.mac, s2.mac, sizeof evil.mac);
    Sluice__Envelope ep = proof_env(&evil);
    feed(&s2, &ep);
    assert_int_equal(s2.result, SLUICE_ERR_AUTH);
    assert_string_equal(s2.msg, AUTH_MSG_WRONG);
}

static void test_malformed(void **unused)
{
    (void)unused;
    /* Not a Hello first. */
    struct end s;
    end_init(&s, AUTH_SERVER, SLUICE__ROLE__ROLE_DISPATCHER, TOKEN, 0xaa);
    Sluice__StatusRequest st = SLUICE__STATUS_REQUEST__INIT;
    Sluice__Envelope req = SLUICE__ENVELOPE__INIT;
    req.id = 1;
    req.body_case = SLUICE__ENVELOPE__BODY_STATUS;
    req.status = &st;
    feed(&s, &req);
    assert_int_equal(s.result, SLUICE_ERR_VERSION);
    assert_string_equal(s.msg, "protocol version 0, expected 1");

    /* A nonce of the wrong size. */
    struct end c;
    end_init(&s, AUTH_SERVER, SLUICE__ROLE__ROLE_DISPATCHER, TOKEN, 0xaa);
    end_init(&c, AUTH_CLIENT, SLUICE__ROLE__ROLE_CLIENT, TOKEN, 0xbb);
    c.hello.nonce.len = 31;
    Sluice__Envelope ch = hello_env(&c);
    feed(&s, &ch);
    assert_int_equal(s.result, SLUICE_ERR_PROTOCOL);
    assert_string_equal(s.msg, "malformed Hello: a nonce of 31 bytes, expected 32");

    /* A request where the proof belongs: nothing but the proof opens the connection. */
    end_init(&s, AUTH_SERVER, SLUICE__ROLE__ROLE_DISPATCHER, TOKEN, 0xaa);
    end_init(&c, AUTH_CLIENT, SLUICE__ROLE__ROLE_CLIENT, TOKEN, 0xbb);
    ch = hello_env(&c);
    feed(&s, &ch);
    assert_true(s.has_proof);
    feed(&s, &req);
    assert_int_equal(s.result, SLUICE_ERR_PROTOCOL);
    assert_int_equal(s.hs.state, AUTH_HS_FAILED);
    /* Once failed, it stays failed. */
    Sluice__Envelope cp = proof_env(&c);
    feed(&s, &cp);
    assert_int_equal(s.result, SLUICE_ERR_PROTOCOL);
    assert_int_equal(s.hs.state, AUTH_HS_FAILED);

    /* A second Hello instead of the proof. */
    end_init(&s, AUTH_SERVER, SLUICE__ROLE__ROLE_DISPATCHER, TOKEN, 0xaa);
    feed(&s, &ch);
    feed(&s, &ch);
    assert_int_equal(s.result, SLUICE_ERR_PROTOCOL);
}

/* ---- ratelimit --------------------------------------------------------------------------- */

static void test_ratelimit(void **unused)
{
    (void)unused;
    struct ratelimit r;
    ratelimit_init(&r, 60000);
    uint64_t sup = 99;
    assert_true(ratelimit_allow(&r, "10.0.0.1", 1000, &sup));
    assert_int_equal(sup, 0);
    assert_false(ratelimit_allow(&r, "10.0.0.1", 2000, &sup));
    assert_false(ratelimit_allow(&r, "10.0.0.1", 60999, &sup));
    assert_true(ratelimit_allow(&r, "10.0.0.2", 2000, &sup));
    assert_true(ratelimit_allow(&r, "10.0.0.1", 61000, &sup));
    assert_int_equal(sup, 2);
    assert_false(ratelimit_allow(&r, "10.0.0.1", 61001, NULL));
    /* More keys than slots: the table stays bounded and the least recently allowed key goes
     * first, so it is allowed again early; a recent one is not. */
    for (unsigned i = 0; i < RATELIMIT_SLOTS; i++) {
        char key[32];
        snprintf(key, sizeof key, "192.168.0.%u", i);
        assert_true(ratelimit_allow(&r, key, 70000 + i, NULL));
    }
    assert_true(ratelimit_allow(&r, "10.0.0.2", 70100, NULL));
    assert_false(ratelimit_allow(&r, "192.168.0.63", 70101, NULL));
}

static void test_host_of(void **unused)
{
    (void)unused;
    char out[64];
    ratelimit_host_of("127.0.0.1:5050", out, sizeof out);
    assert_string_equal(out, "127.0.0.1");
    ratelimit_host_of("[::1]:80", out, sizeof out);
    assert_string_equal(out, "::1");
    ratelimit_host_of("name", out, sizeof out);
    assert_string_equal(out, "name");
    ratelimit_host_of("123456789:1", out, 5);
    assert_string_equal(out, "1234");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proof_input_layout),
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_nonces_differ),
        cmocka_unit_test(test_pairings),
        cmocka_unit_test(test_replay_is_refused),
        cmocka_unit_test(test_reflection_is_refused),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_ratelimit),
        cmocka_unit_test(test_host_of),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
