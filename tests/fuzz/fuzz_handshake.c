/* Fuzzes the handshake (common/auth.h) the way a server or client runs it: the bytes after the
 * first are a stream of frames (at most RPC_HANDSHAKE_MAX_FRAME bytes each, as before the
 * handshake is done), each unpacked as an Envelope and fed to auth_hs_step until the handshake
 * opens or fails. The first byte picks the side, whether this side holds the token, and whether
 * the harness answers our proof request with the correct proof (so the opening path is reached).
 * Checked:
 * - a step returns AUTH_HS_SEND, AUTH_HS_OPEN or one of the documented failure codes, with a
 *   one-line message and a text for the peer; a failed handshake stays failed;
 * - AUTH_HS_SEND comes only to a side holding the token, once, with the proof this side must
 *   send (recomputed here over the nonces of the two Hellos);
 * - with a token, the handshake opens only on a proof equal to the peer's correct one; without
 *   one, only on a Hello of our version whose auth flag is false. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/auth.h"
#include "common/error.h"
#include "common/frame.h"
#include "common/rpc.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static const uint8_t TOKEN[] = "fuzz-token-0123456789";
#define TOKEN_LEN (sizeof TOKEN - 1)

struct run {
    struct auth_hs hs;
    bool token, inject;
    int last;          /* the last step's result */
    bool sent;         /* AUTH_HS_SEND seen */
    bool ended;        /* opened or failed: nothing more is fed */
    uint32_t own_role; /* as given to auth_hs_init */
    bool hello_auth;   /* the first Hello's auth flag, once it was taken */
};

/* HMAC-SHA256 over the documented layout, computed here rather than through auth_proof. */
static void expected(enum auth_side side, uint32_t prover_role, uint32_t verifier_role,
                     const uint8_t *prover_nonce, const uint8_t *verifier_nonce,
                     uint8_t out[AUTH_MAC_LEN])
{
    uint8_t in[AUTH_INPUT_MAX];
    const char *label = side == AUTH_SERVER ? AUTH_LABEL_SERVER : AUTH_LABEL_CLIENT;
    size_t n = strlen(label);
    memcpy(in, label, n);
    uint32_t r[2] = {prover_role, verifier_role};
    for (int k = 0; k < 2; k++) {
        in[n++] = (uint8_t)(r[k] >> 24);
        in[n++] = (uint8_t)(r[k] >> 16);
        in[n++] = (uint8_t)(r[k] >> 8);
        in[n++] = (uint8_t)r[k];
    }
    memcpy(in + n, prover_nonce, AUTH_NONCE_LEN);
    memcpy(in + n + AUTH_NONCE_LEN, verifier_nonce, AUTH_NONCE_LEN);
    n += 2 * AUTH_NONCE_LEN;
    unsigned len = 0;
    CHECK(HMAC(EVP_sha256(), TOKEN, (int)TOKEN_LEN, in, n, out, &len) != NULL);
    CHECK(len == AUTH_MAC_LEN);
}

static void check_failure(const struct run *r, int rc, const char *msg, const char *peer_msg)
{
    CHECK(rc == SLUICE_ERR_VERSION || rc == SLUICE_ERR_PROTOCOL || rc == SLUICE_ERR_AUTH);
    CHECK(r->hs.state == AUTH_HS_FAILED);
    CHECK(msg[0] != '\0' && strchr(msg, '\n') == NULL);
    CHECK(peer_msg != NULL && peer_msg[0] != '\0');
}

static void step(struct run *r, const Sluice__Envelope *env)
{
    enum auth_hs_state before = r->hs.state;
    if (before == AUTH_HS_HELLO && env->body_case == SLUICE__ENVELOPE__BODY_HELLO && env->hello)
        r->hello_auth = env->hello->auth;
    uint8_t mac[AUTH_MAC_LEN];
    char msg[SLUICE_ERRMSG_SIZE];
    const char *peer_msg = NULL;
    int rc = auth_hs_step(&r->hs, env, mac, msg, sizeof msg, &peer_msg);
    r->last = rc;
    if (rc == AUTH_HS_SEND) {
        CHECK(r->token && before == AUTH_HS_HELLO && !r->sent);
        CHECK(r->hs.state == AUTH_HS_PROOF);
        uint8_t want[AUTH_MAC_LEN];
        expected(r->hs.side, r->own_role, r->hs.peer_role, r->hs.own_nonce, r->hs.peer_nonce, want);
        CHECK(memcmp(mac, want, sizeof want) == 0);
        r->sent = true;
        return;
    }
    r->ended = true;
    if (rc != AUTH_HS_OPEN) {
        check_failure(r, rc, msg, peer_msg);
        return;
    }
    CHECK(r->hs.state == AUTH_HS_DONE);
    if (!r->token) {
        CHECK(before == AUTH_HS_HELLO && !r->hello_auth);
        CHECK(env->hello->version == RPC_PROTOCOL_VERSION);
        return;
    }
    CHECK(before == AUTH_HS_PROOF && env->body_case == SLUICE__ENVELOPE__BODY_AUTH_PROOF);
    uint8_t want[AUTH_MAC_LEN];
    enum auth_side peer = r->hs.side == AUTH_SERVER ? AUTH_CLIENT : AUTH_SERVER;
    expected(peer, r->hs.peer_role, r->own_role, r->hs.peer_nonce, r->hs.own_nonce, want);
    CHECK(env->auth_proof->mac.len == AUTH_MAC_LEN);
    CHECK(memcmp(env->auth_proof->mac.data, want, AUTH_MAC_LEN) == 0);
}

/* The correct proof of the peer, fed as the harness's answer. */
static void inject_proof(struct run *r)
{
    uint8_t mac[AUTH_MAC_LEN];
    enum auth_side peer = r->hs.side == AUTH_SERVER ? AUTH_CLIENT : AUTH_SERVER;
    expected(peer, r->hs.peer_role, r->own_role, r->hs.peer_nonce, r->hs.own_nonce, mac);
    Sluice__AuthProof proof = SLUICE__AUTH_PROOF__INIT;
    proof.mac.data = mac;
    proof.mac.len = sizeof mac;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_AUTH_PROOF;
    env.auth_proof = &proof;
    step(r, &env);
    CHECK(r->last == AUTH_HS_OPEN);
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
    sluice__envelope__free_unpacked(env, NULL);
    if (!r->ended && r->sent && r->inject && r->hs.state == AUTH_HS_PROOF)
        inject_proof(r);
    /* A failed handshake stays failed whatever comes next. */
    if (r->ended && r->last < 0) {
        uint8_t mac[AUTH_MAC_LEN];
        char msg[SLUICE_ERRMSG_SIZE];
        Sluice__Envelope empty = SLUICE__ENVELOPE__INIT;
        CHECK(auth_hs_step(&r->hs, &empty, mac, msg, sizeof msg, NULL) < 0);
        CHECK(r->hs.state == AUTH_HS_FAILED);
    }
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
    r.own_role = (data[0] >> 3) & 3;
    uint8_t nonce[AUTH_NONCE_LEN];
    memset(nonce, 0x5a, sizeof nonce);
    auth_hs_init(&r.hs, side, r.own_role, r.token ? TOKEN : NULL, r.token ? TOKEN_LEN : 0, nonce);
    struct frame_decoder dec;
    frame_decoder_init(&dec, RPC_HANDSHAKE_MAX_FRAME);
    (void)frame_decoder_feed(&dec, data + 1, len - 1, on_frame, &r);
    frame_decoder_release(&dec);
    return 0;
}
