/* The challenge-response handshake of auth.h: proof inputs, HMAC-SHA256 proofs (OpenSSL
 * libcrypto), and the handshake state machine both ends of a connection run. */
#include "auth.h"

#include "error.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdio.h>

#include <string.h>

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

size_t auth_proof_input(uint8_t out[AUTH_INPUT_MAX], enum auth_side side, uint32_t prover_role,
                        uint32_t verifier_role, const uint8_t prover_nonce[AUTH_NONCE_LEN],
                        const uint8_t verifier_nonce[AUTH_NONCE_LEN])
{
    const char *label = side == AUTH_SERVER ? AUTH_LABEL_SERVER : AUTH_LABEL_CLIENT;
    size_t n = strlen(label);
    memcpy(out, label, n);
    put_u32(out + n, prover_role);
    put_u32(out + n + 4, verifier_role);
    n += 8;
    memcpy(out + n, prover_nonce, AUTH_NONCE_LEN);
    n += AUTH_NONCE_LEN;
    memcpy(out + n, verifier_nonce, AUTH_NONCE_LEN);
    return n + AUTH_NONCE_LEN;
}

_Static_assert(sizeof AUTH_LABEL_SERVER == sizeof AUTH_LABEL_CLIENT,
               "the two labels have one length, so AUTH_INPUT_MAX fits both");

int auth_proof(const uint8_t *token, size_t token_len, enum auth_side side, uint32_t prover_role,
               uint32_t verifier_role, const uint8_t prover_nonce[AUTH_NONCE_LEN],
               const uint8_t verifier_nonce[AUTH_NONCE_LEN], uint8_t mac[AUTH_MAC_LEN])
{
    if (token == NULL || token_len == 0 || token_len > INT32_MAX)
        return SLUICE_ERR_INVALID;
    uint8_t input[AUTH_INPUT_MAX];
    size_t n =
        auth_proof_input(input, side, prover_role, verifier_role, prover_nonce, verifier_nonce);
    unsigned int len = 0;
    if (HMAC(EVP_sha256(), token, (int)token_len, input, n, mac, &len) == NULL ||
        len != AUTH_MAC_LEN)
        return SLUICE_ERR_NOMEM;
    return 0;
}

bool auth_equal(const void *a, size_t alen, const void *b, size_t blen)
{
    return alen == blen && CRYPTO_memcmp(a, b, alen) == 0;
}

int auth_verify(const uint8_t *token, size_t token_len, enum auth_side side, uint32_t prover_role,
                uint32_t verifier_role, const uint8_t prover_nonce[AUTH_NONCE_LEN],
                const uint8_t verifier_nonce[AUTH_NONCE_LEN], const uint8_t *mac, size_t mac_len)
{
    uint8_t want[AUTH_MAC_LEN];
    if (auth_proof(token, token_len, side, prover_role, verifier_role, prover_nonce, verifier_nonce,
                   want) != 0)
        return SLUICE_ERR_AUTH;
    bool ok = mac != NULL && auth_equal(want, sizeof want, mac, mac_len);
    OPENSSL_cleanse(want, sizeof want);
    return ok ? 0 : SLUICE_ERR_AUTH;
}

int auth_nonce(uint8_t nonce[AUTH_NONCE_LEN])
{
    return RAND_bytes(nonce, AUTH_NONCE_LEN) == 1 ? 0 : SLUICE_ERR_NOMEM;
}

/* ---- the handshake ----------------------------------------------------------------------- */

void auth_hs_init(struct auth_hs *hs, enum auth_side side, uint32_t own_role, const uint8_t *token,
                  size_t token_len, const uint8_t nonce[AUTH_NONCE_LEN])
{
    memset(hs, 0, sizeof *hs);
    hs->side = side;
    hs->own_role = own_role;
    hs->token = token_len ? token : NULL;
    hs->token_len = token ? token_len : 0;
    memcpy(hs->own_nonce, nonce, AUTH_NONCE_LEN);
    hs->state = AUTH_HS_HELLO;
}

void auth_hs_hello(const struct auth_hs *hs, Sluice__Hello *hello)
{
    hello->auth = hs->token_len > 0;
    hello->nonce.data = hello->auth ? (uint8_t *)hs->own_nonce : NULL;
    hello->nonce.len = hello->auth ? AUTH_NONCE_LEN : 0;
}

static int fail(struct auth_hs *hs, int code, const char *peer_text, const char **peer_msg,
                char *msg, size_t msglen, const char *text)
{
    hs->state = AUTH_HS_FAILED;
    if (peer_msg)
        *peer_msg = peer_text;
    return err_set(msg, msglen, code, "%s", text);
}

int auth_check_hello(const Sluice__Envelope *env, char *msg, size_t msglen)
{
    uint32_t version = 0;
    if (env->body_case == SLUICE__ENVELOPE__BODY_HELLO && env->hello != NULL)
        version = env->hello->version;
    if (version == RPC_PROTOCOL_VERSION)
        return 0;
    return err_set(msg, msglen, SLUICE_ERR_VERSION, "protocol version %u, expected %d", version,
                   RPC_PROTOCOL_VERSION);
}

static int on_hello(struct auth_hs *hs, const Sluice__Envelope *env, uint8_t mac[AUTH_MAC_LEN],
                    char *msg, size_t msglen, const char **peer_msg)
{
    int rc = auth_check_hello(env, msg, msglen);
    if (rc != 0) {
        hs->state = AUTH_HS_FAILED;
        if (peer_msg)
            *peer_msg = msg;
        return rc;
    }
    const Sluice__Hello *h = env->hello;
    hs->peer_role = (uint32_t)h->role;
    hs->peer_incarnation = h->incarnation;
    bool mine = hs->token_len > 0, theirs = h->auth;
    bool server = hs->side == AUTH_SERVER;
    if (!mine && !theirs) {
        hs->state = AUTH_HS_DONE;
        return AUTH_HS_OPEN;
    }
    if (mine && !theirs)
        return server ? fail(hs, SLUICE_ERR_AUTH, AUTH_MSG_SERVER_REQUIRES, peer_msg, msg, msglen,
                             AUTH_MSG_PEER_NONE)
                      : fail(hs, SLUICE_ERR_AUTH, AUTH_MSG_PEER_UNEXPECTED, peer_msg, msg, msglen,
                             AUTH_MSG_SERVER_NONE);
    if (!mine)
        return server ? fail(hs, SLUICE_ERR_AUTH, AUTH_MSG_SERVER_NONE, peer_msg, msg, msglen,
                             AUTH_MSG_PEER_UNEXPECTED)
                      : fail(hs, SLUICE_ERR_AUTH, AUTH_MSG_PEER_NONE, peer_msg, msg, msglen,
                             AUTH_MSG_SERVER_REQUIRES);
    if (h->nonce.len != AUTH_NONCE_LEN || h->nonce.data == NULL) {
        char text[96];
        snprintf(text, sizeof text, "malformed Hello: a nonce of %zu bytes, expected %d",
                 h->nonce.len, AUTH_NONCE_LEN);
        return fail(hs, SLUICE_ERR_PROTOCOL, "malformed Hello", peer_msg, msg, msglen, text);
    }
    /* Our own nonce coming back means the peer is echoing us; with the direction in the label
     * a reflected proof would fail anyway, but there is no reason to compute one. */
    if (auth_equal(h->nonce.data, AUTH_NONCE_LEN, hs->own_nonce, AUTH_NONCE_LEN))
        return fail(hs, SLUICE_ERR_AUTH, AUTH_MSG_WRONG, peer_msg, msg, msglen,
                    "authentication failed: the peer reflected our nonce");
    memcpy(hs->peer_nonce, h->nonce.data, AUTH_NONCE_LEN);
    if (auth_proof(hs->token, hs->token_len, hs->side, hs->own_role, hs->peer_role, hs->own_nonce,
                   hs->peer_nonce, mac) != 0)
        return fail(hs, SLUICE_ERR_NOMEM, "internal error", peer_msg, msg, msglen,
                    "authentication: computing the proof failed");
    hs->state = AUTH_HS_PROOF;
    return AUTH_HS_SEND;
}

static int on_proof(struct auth_hs *hs, const Sluice__Envelope *env, char *msg, size_t msglen,
                    const char **peer_msg)
{
    if (env->body_case != SLUICE__ENVELOPE__BODY_AUTH_PROOF || env->auth_proof == NULL)
        return fail(hs, SLUICE_ERR_PROTOCOL, "expected an AuthProof", peer_msg, msg, msglen,
                    "expected an AuthProof after the Hello");
    enum auth_side peer_side = hs->side == AUTH_SERVER ? AUTH_CLIENT : AUTH_SERVER;
    const ProtobufCBinaryData *m = &env->auth_proof->mac;
    if (auth_verify(hs->token, hs->token_len, peer_side, hs->peer_role, hs->own_role,
                    hs->peer_nonce, hs->own_nonce, m->data, m->len) != 0)
        return fail(hs, SLUICE_ERR_AUTH, AUTH_MSG_WRONG, peer_msg, msg, msglen, AUTH_MSG_WRONG);
    hs->state = AUTH_HS_DONE;
    return AUTH_HS_OPEN;
}

int auth_hs_step(struct auth_hs *hs, const Sluice__Envelope *env, uint8_t mac[AUTH_MAC_LEN],
                 char *msg, size_t msglen, const char **peer_msg)
{
    switch (hs->state) {
    case AUTH_HS_HELLO:
        return on_hello(hs, env, mac, msg, msglen, peer_msg);
    case AUTH_HS_PROOF:
        return on_proof(hs, env, msg, msglen, peer_msg);
    case AUTH_HS_DONE:
        return fail(hs, SLUICE_ERR_PROTOCOL, "handshake already done", peer_msg, msg, msglen,
                    "handshake already done");
    case AUTH_HS_FAILED:
        break;
    }
    return fail(hs, SLUICE_ERR_PROTOCOL, "handshake failed", peer_msg, msg, msglen,
                "handshake failed");
}
