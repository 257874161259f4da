/* The Raft port's handshake of raft_handshake.h: auth.h's handshake, the role check, then
 * RaftPeerHello and RaftPeerWelcome. */
#include "dispatcher/raft_handshake.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void raft_hs_init(struct raft_hs *hs, enum auth_side side, const uint8_t *token, size_t token_len,
                  const char *cluster, const uint8_t nonce[AUTH_NONCE_LEN])
{
    memset(hs, 0, sizeof *hs);
    auth_hs_init(&hs->auth, side, SLUICE__ROLE__ROLE_RAFT_PEER, token, token_len, nonce);
    hs->state = RAFT_HS_AUTH;
    hs->cluster = cluster ? cluster : "";
}

void raft_hs_hello(const struct raft_hs *hs, Sluice__Hello *hello, uint64_t incarnation)
{
    hello->version = RPC_PROTOCOL_VERSION;
    hello->role = SLUICE__ROLE__ROLE_RAFT_PEER;
    hello->incarnation = incarnation;
    auth_hs_hello(&hs->auth, hello);
}

/* Fails the handshake: this side's reason in msg; the acceptor also answers the peer. */
static int fail(struct raft_hs *hs, struct raft_hs_out *out, int code, const char *peer_text,
                char *msg, size_t msglen, const char *text)
{
    hs->state = RAFT_HS_FAILED;
    if (hs->auth.side == AUTH_SERVER) {
        out->send |= RAFT_HS_SEND_ERROR;
        out->error_code = code;
        snprintf(out->error_msg, sizeof out->error_msg, "%.500s", peer_text ? peer_text : text);
    }
    return err_set(msg, msglen, code, "%s", text);
}

int raft_hs_check_peer_hello(const Sluice__RaftPeerHello *h, const char *cluster, char *msg,
                             size_t msglen)
{
    if (h == NULL)
        return err_set(msg, msglen, SLUICE_ERR_INVALID, "malformed RaftPeerHello: no body");
    if (h->id == 0)
        return err_set(msg, msglen, SLUICE_ERR_INVALID, "malformed RaftPeerHello: id 0");
    size_t alen = h->address ? strlen(h->address) : 0;
    if (alen == 0 || alen >= RAFT_HS_ADDRESS_MAX)
        return err_set(msg, msglen, SLUICE_ERR_INVALID,
                       "malformed RaftPeerHello: an address of %zu bytes (1 to %d)", alen,
                       RAFT_HS_ADDRESS_MAX - 1);
    const char *theirs = h->cluster ? h->cluster : "";
    if (strcmp(theirs, cluster) != 0) {
        /* Both strings are bounded so that the line stays one readable line. */
        int tlen = (int)strnlen(theirs, 200), olen = (int)strnlen(cluster, 200);
        return err_set(msg, msglen, SLUICE_ERR_INVALID,
                       "cluster mismatch: this server has \"%.*s\"%s, the peer has \"%.*s\"%s",
                       olen, cluster, cluster[olen] ? "..." : "", tlen, theirs,
                       theirs[tlen] ? "..." : "");
    }
    return 0;
}

/* The peer is authenticated: check its role, then go on to the Raft peer exchange. */
static int on_auth_open(struct raft_hs *hs, struct raft_hs_out *out, char *msg, size_t msglen)
{
    if (hs->auth.peer_role != SLUICE__ROLE__ROLE_RAFT_PEER) {
        char text[128];
        snprintf(text, sizeof text, "peer of role %u on the Raft port, expected %d",
                 hs->auth.peer_role, SLUICE__ROLE__ROLE_RAFT_PEER);
        return fail(hs, out, SLUICE_ERR_PROTOCOL, "this is a Raft port: only Raft peers", msg,
                    msglen, text);
    }
    if (hs->auth.side == AUTH_CLIENT) {
        out->send |= RAFT_HS_SEND_PEER_HELLO;
        hs->state = RAFT_HS_WELCOME;
    } else {
        hs->state = RAFT_HS_PEER;
    }
    return 0;
}

static int step_auth(struct raft_hs *hs, const Sluice__Envelope *env, struct raft_hs_out *out,
                     char *msg, size_t msglen)
{
    const char *peer_msg = NULL;
    int step = auth_hs_step(&hs->auth, env, out->mac, msg, msglen, &peer_msg);
    if (step < 0) {
        char text[SLUICE_ERRMSG_SIZE];
        snprintf(text, sizeof text, "%s", msg);
        return fail(hs, out, step, peer_msg, msg, msglen, text);
    }
    if (step == AUTH_HS_SEND)
        out->send |= RAFT_HS_SEND_PROOF;
    if (step == AUTH_HS_OPEN)
        return on_auth_open(hs, out, msg, msglen);
    return 0;
}

int raft_hs_step(struct raft_hs *hs, const Sluice__Envelope *env, struct raft_hs_out *out,
                 char *msg, size_t msglen)
{
    memset(out, 0, sizeof *out);
    if (hs->state == RAFT_HS_FAILED || hs->state == RAFT_HS_DONE)
        return fail(hs, out, SLUICE_ERR_PROTOCOL, NULL, msg, msglen,
                    "a frame after the handshake ended");
    /* The acceptor's refusal, to the dialler, at any point of the handshake. */
    if (hs->auth.side == AUTH_CLIENT && env->body_case == SLUICE__ENVELOPE__BODY_ERROR) {
        int code = env->error && env->error->code < 0 ? env->error->code : SLUICE_ERR_PROTOCOL;
        const char *text = env->error && env->error->message ? env->error->message : "";
        hs->state = RAFT_HS_FAILED;
        return err_set(msg, msglen, code, "refused by the peer: %.400s", text);
    }
    switch (hs->state) {
    case RAFT_HS_AUTH:
        return step_auth(hs, env, out, msg, msglen);
    case RAFT_HS_PEER: {
        if (env->body_case != SLUICE__ENVELOPE__BODY_RAFT_PEER_HELLO)
            return fail(hs, out, SLUICE_ERR_PROTOCOL, NULL, msg, msglen,
                        "expected a RaftPeerHello after the handshake");
        int rc = raft_hs_check_peer_hello(env->raft_peer_hello, hs->cluster, msg, msglen);
        if (rc != 0) {
            char text[SLUICE_ERRMSG_SIZE];
            snprintf(text, sizeof text, "%s", msg);
            return fail(hs, out, rc, NULL, msg, msglen, text);
        }
        if (hs->not_started && !env->raft_peer_hello->probe)
            return fail(hs, out, SLUICE_ERR_UNAVAILABLE, NULL, msg, msglen, RAFT_HS_NOT_STARTED);
        hs->peer_id = env->raft_peer_hello->id;
        snprintf(hs->peer_address, sizeof hs->peer_address, "%s", env->raft_peer_hello->address);
        hs->probe = env->raft_peer_hello->probe;
        hs->rejoin = env->raft_peer_hello->rejoin && !hs->probe;
        hs->state = RAFT_HS_DONE;
        out->send |= RAFT_HS_SEND_WELCOME;
        out->open = !hs->probe;
        out->answered = hs->probe;
        return 0;
    }
    case RAFT_HS_WELCOME:
        if (env->body_case != SLUICE__ENVELOPE__BODY_RAFT_PEER_WELCOME)
            return fail(hs, out, SLUICE_ERR_PROTOCOL, NULL, msg, msglen,
                        "expected a RaftPeerWelcome after the RaftPeerHello");
        hs->state = RAFT_HS_DONE;
        if (hs->probe) {
            hs->last_index = env->raft_peer_welcome ? env->raft_peer_welcome->last_index : 0;
            out->answered = true;
        } else {
            out->open = true;
        }
        return 0;
    case RAFT_HS_DONE:
    case RAFT_HS_FAILED:
        break;
    }
    return fail(hs, out, SLUICE_ERR_PROTOCOL, NULL, msg, msglen, "handshake failed");
}

int raft_hs_split_address(const char *address, char *host, size_t hostlen, int *port,
                          bool allow_zero)
{
    if (address == NULL || hostlen == 0)
        return SLUICE_ERR_INVALID;
    const char *colon, *hbeg, *hend;
    if (address[0] == '[') {
        hbeg = address + 1;
        hend = strchr(hbeg, ']');
        if (hend == NULL || hend[1] != ':')
            return SLUICE_ERR_INVALID;
        colon = hend + 1;
    } else {
        colon = strrchr(address, ':');
        if (colon == NULL || memchr(address, ':', (size_t)(colon - address)) != NULL)
            return SLUICE_ERR_INVALID; /* an IPv6 address must be bracketed */
        hbeg = address;
        hend = colon;
    }
    size_t hlen = (size_t)(hend - hbeg);
    if (hlen == 0 || hlen >= hostlen)
        return SLUICE_ERR_INVALID;
    const char *p = colon + 1;
    if (*p == '\0' || strlen(p) > 5)
        return SLUICE_ERR_INVALID;
    long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return SLUICE_ERR_INVALID;
        v = v * 10 + (*p - '0');
    }
    if (v > 65535 || (v == 0 && !allow_zero))
        return SLUICE_ERR_INVALID;
    memcpy(host, hbeg, hlen);
    host[hlen] = '\0';
    *port = (int)v;
    return 0;
}
