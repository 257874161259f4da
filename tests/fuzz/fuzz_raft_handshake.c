/* Fuzzes the Raft port's handshake (dispatcher/raft_handshake.h) the way raft_transport.c runs
 * it: the bytes after the first are a stream of frames (at most RAFT_TRANSPORT_MAX_FRAME bytes
 * each), each unpacked as an Envelope and fed to raft_hs_step until the handshake opens or fails.
 * The first byte picks the side, whether this side holds the token, and whether the harness
 * answers this side's proof with the peer's correct one (so the later states are reached).
 * Checked:
 * - a step returns 0 or a negative code, and a failure leaves the state failed for good, with a
 *   reason; the acceptor, and only it, then answers with an Error of the same code and a text;
 * - RaftPeerHello is asked of the dialler only, once its peer is authenticated and is a Raft peer;
 *   RaftPeerWelcome of the acceptor only, together with the opening, after a RaftPeerHello whose
 *   id is above 0, whose address fits and whose cluster string is exactly ours;
 * - a RaftPeerWelcome to a probe (RaftPeerHello.probe) answers it and opens nothing; the
 *   connection then ends as after an opening;
 * - the dialler opens only on a RaftPeerWelcome; nothing opens twice. */
#include "fuzz.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"
#include "common/error.h"
#include "common/frame.h"
#include "dispatcher/raft_handshake.h"
#include "dispatcher/raft_transport.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static const uint8_t TOKEN[] = "fuzz-token-0123456789";
#define TOKEN_LEN (sizeof TOKEN - 1)
#define CLUSTER "1=a:1,2=b:2"

struct run {
    struct raft_hs hs;
    bool token, inject;
    bool ended, opened;
};

static void check_step(struct run *r, const Sluice__Envelope *env, enum raft_hs_state before,
                       int rc, const struct raft_hs_out *out, const char *msg)
{
    bool acceptor = r->hs.auth.side == AUTH_SERVER;
    CHECK(rc <= 0);
    if (rc < 0) {
        r->ended = true;
        CHECK(r->hs.state == RAFT_HS_FAILED);
        CHECK(msg[0] != '\0');
        CHECK(!out->open);
        if (acceptor) {
            CHECK(out->send & RAFT_HS_SEND_ERROR);
            CHECK(out->error_code == rc);
            CHECK(out->error_msg[0] != '\0');
        }
        CHECK(!(out->send & (RAFT_HS_SEND_PROOF | RAFT_HS_SEND_PEER_HELLO | RAFT_HS_SEND_WELCOME)));
        return;
    }
    CHECK(!(out->send & RAFT_HS_SEND_ERROR));
    if (out->send & RAFT_HS_SEND_PEER_HELLO) {
        CHECK(!acceptor && r->hs.state == RAFT_HS_WELCOME);
        CHECK(r->hs.auth.peer_role == SLUICE__ROLE__ROLE_RAFT_PEER);
    }
    /* A WELCOME either opens the connection or answers a probe (which then closes). */
    if (out->send & RAFT_HS_SEND_WELCOME)
        CHECK(acceptor && out->open != out->answered);
    CHECK(!(out->open && out->answered));
    if (out->open || out->answered) {
        CHECK(!r->opened);
        r->opened = r->ended = true;
        CHECK(r->hs.state == RAFT_HS_DONE);
        if (acceptor) {
            CHECK(before == RAFT_HS_PEER);
            CHECK(env->body_case == SLUICE__ENVELOPE__BODY_RAFT_PEER_HELLO);
            const Sluice__RaftPeerHello *h = env->raft_peer_hello;
            CHECK(h != NULL && h->id > 0 && h->id == r->hs.peer_id);
            CHECK(out->answered == h->probe && r->hs.probe == h->probe);
            CHECK(!r->hs.rejoin || !h->probe);
            CHECK(h->cluster != NULL && strcmp(h->cluster, CLUSTER) == 0);
            size_t n = strlen(r->hs.peer_address);
            CHECK(n > 0 && n < RAFT_HS_ADDRESS_MAX && strcmp(h->address, r->hs.peer_address) == 0);
        } else {
            CHECK(before == RAFT_HS_WELCOME);
            CHECK(env->body_case == SLUICE__ENVELOPE__BODY_RAFT_PEER_WELCOME);
        }
    }
}

static void step(struct run *r, const Sluice__Envelope *env)
{
    enum raft_hs_state before = r->hs.state;
    struct raft_hs_out out;
    char msg[SLUICE_ERRMSG_SIZE];
    msg[0] = '\0';
    int rc = raft_hs_step(&r->hs, env, &out, msg, sizeof msg);
    check_step(r, env, before, rc, &out, msg);
    if (rc == 0 && (out.send & RAFT_HS_SEND_PROOF) && r->inject && !r->ended) {
        /* The peer's correct proof, as an authenticated peer would send it. */
        enum auth_side peer = r->hs.auth.side == AUTH_SERVER ? AUTH_CLIENT : AUTH_SERVER;
        uint8_t mac[AUTH_MAC_LEN];
        CHECK(auth_proof(TOKEN, TOKEN_LEN, peer, r->hs.auth.peer_role, r->hs.auth.own_role,
                         r->hs.auth.peer_nonce, r->hs.auth.own_nonce, mac) == 0);
        Sluice__AuthProof proof = SLUICE__AUTH_PROOF__INIT;
        proof.mac.data = mac;
        proof.mac.len = sizeof mac;
        Sluice__Envelope penv = SLUICE__ENVELOPE__INIT;
        penv.body_case = SLUICE__ENVELOPE__BODY_AUTH_PROOF;
        penv.auth_proof = &proof;
        step(r, &penv);
    }
}

static int on_frame(void *user, const uint8_t *payload, size_t len)
{
    struct run *r = user;
    if (r->ended)
        return SLUICE_ERR_CLOSED;
    Sluice__Envelope *env = sluice__envelope__unpack(NULL, len, payload);
    if (env == NULL)
        return SLUICE_ERR_PROTOCOL; /* the connection closes: nothing to check */
    step(r, env);
    if (r->ended) {
        /* Whatever comes after the end is refused, and the state does not move. */
        enum raft_hs_state end = r->hs.state;
        struct raft_hs_out out;
        char msg[SLUICE_ERRMSG_SIZE];
        CHECK(raft_hs_step(&r->hs, env, &out, msg, sizeof msg) < 0);
        CHECK(!out.open && !(out.send & (RAFT_HS_SEND_WELCOME | RAFT_HS_SEND_PEER_HELLO)));
        CHECK(end == RAFT_HS_DONE || r->hs.state == RAFT_HS_FAILED);
    }
    sluice__envelope__free_unpacked(env, NULL);
    return r->ended ? SLUICE_ERR_CLOSED : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len < 1)
        return 0;
    struct run r;
    memset(&r, 0, sizeof r);
    enum auth_side side = data[0] & 1 ? AUTH_CLIENT : AUTH_SERVER;
    r.token = data[0] & 2;
    r.inject = data[0] & 4;
    uint8_t nonce[AUTH_NONCE_LEN];
    memset(nonce, 0x5a, sizeof nonce);
    raft_hs_init(&r.hs, side, r.token ? TOKEN : NULL, r.token ? TOKEN_LEN : 0, CLUSTER, nonce);
    struct frame_decoder dec;
    frame_decoder_init(&dec, RAFT_TRANSPORT_MAX_FRAME);
    (void)frame_decoder_feed(&dec, data + 1, len - 1, on_frame, &r);
    frame_decoder_release(&dec);
    return 0;
}
