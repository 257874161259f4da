/* Mutual authentication of the two ends of a connection with the cluster's shared token
 * (security.h), by challenge and response inside the Hello exchange (docs/design.md §5, §7).
 *
 * Protocol. Each side sends a Hello with auth = whether it holds a token and, when it does, a
 * fresh nonce of AUTH_NONCE_LEN random bytes. Once a side holding a token has the peer's Hello,
 * and the peer holds one too, it sends AuthProof { mac } with
 *
 *     mac = HMAC-SHA256(token, label || own role || peer role || own nonce || peer nonce)
 *
 * where label is AUTH_LABEL_SERVER for the side that accepted the connection and
 * AUTH_LABEL_CLIENT for the side that dialled it, and each role is a u32 big-endian (the Role
 * enum of wire.proto). Each side checks the peer's proof against the MAC it computes itself with
 * the peer's label, in constant time. The token never crosses the wire; a recorded handshake
 * cannot be replayed, because the verifier's nonce is fresh; a proof cannot be reflected back to
 * its sender, because the labels differ by direction. A peer nonce equal to one's own is
 * refused too.
 *
 * Outcomes when the tokens do not match (the texts are exact; the side that accepted the
 * connection answers with an Error of code SLUICE_ERR_AUTH carrying the peer's text, then
 * closes):
 *   both hold a token, different ones:   both sides AUTH_MSG_WRONG
 *   only the server holds one:           client AUTH_MSG_SERVER_REQUIRES,
 *                                        server AUTH_MSG_PEER_NONE
 *   only the client holds one:           client AUTH_MSG_SERVER_NONE,
 *                                        server AUTH_MSG_PEER_UNEXPECTED
 * Neither holding a token is no authentication at all: the Hellos alone open the connection.
 *
 * The handshake state machine (struct auth_hs) is pure: the caller makes the nonce
 * (auth_nonce), sends the Hello, feeds every Envelope received before the handshake is done to
 * auth_hs_step, and sends the proof or the rejection it asks for. rpc_server.c and rpc_client.c
 * drive it from the socket, the fuzzer from bytes.
 *
 * Threading: any thread; nothing here is shared. */
#ifndef SLUICE_COMMON_AUTH_H
#define SLUICE_COMMON_AUTH_H

#include "wire.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The version every Hello carries; a peer of another version is refused (auth_check_hello). */
#define RPC_PROTOCOL_VERSION 1

/* Checks that env, the first frame from the peer, is a Hello of RPC_PROTOCOL_VERSION. Returns 0,
 * or SLUICE_ERR_VERSION with "protocol version X, expected Y" in msg (X is 0 when the frame is
 * not a Hello at all). */
int auth_check_hello(const Sluice__Envelope *env, char *msg, size_t msglen);

#define AUTH_NONCE_LEN 32
#define AUTH_MAC_LEN 32
#define AUTH_LABEL_SERVER "sluice-auth-v1 server"
#define AUTH_LABEL_CLIENT "sluice-auth-v1 client"
/* label + two roles + two nonces */
#define AUTH_INPUT_MAX (sizeof AUTH_LABEL_SERVER - 1 + 8 + 2 * AUTH_NONCE_LEN)

#define AUTH_MSG_WRONG "authentication failed: wrong token"
#define AUTH_MSG_SERVER_REQUIRES "authentication failed: the server requires a token"
#define AUTH_MSG_PEER_NONE "authentication failed: the peer sent no token"
#define AUTH_MSG_SERVER_NONE "authentication failed: the server has no token"
#define AUTH_MSG_PEER_UNEXPECTED                                                                   \
    "authentication failed: the peer has a token and this server has none"

/* Which end of the connection: the one that accepted it, or the one that dialled. */
enum auth_side { AUTH_SERVER, AUTH_CLIENT };

/* Writes the proof input of the side `side` (the prover) into out (AUTH_INPUT_MAX bytes) and
 * returns its length. prover_role/verifier_role and prover_nonce/verifier_nonce are seen from the
 * prover. Pure. */
size_t auth_proof_input(uint8_t out[AUTH_INPUT_MAX], enum auth_side side, uint32_t prover_role,
                        uint32_t verifier_role, const uint8_t prover_nonce[AUTH_NONCE_LEN],
                        const uint8_t verifier_nonce[AUTH_NONCE_LEN]);

/* mac = HMAC-SHA256(token, auth_proof_input(...)). Returns 0, or SLUICE_ERR_INVALID for an empty
 * token, or SLUICE_ERR_NOMEM when the library fails. */
int auth_proof(const uint8_t *token, size_t token_len, enum auth_side side, uint32_t prover_role,
               uint32_t verifier_role, const uint8_t prover_nonce[AUTH_NONCE_LEN],
               const uint8_t verifier_nonce[AUTH_NONCE_LEN], uint8_t mac[AUTH_MAC_LEN]);

/* Checks mac[0..mac_len), claimed by the prover, against the proof computed with token. Returns
 * 0 when they are equal (compared in constant time), else SLUICE_ERR_AUTH (a wrong length
 * included). */
int auth_verify(const uint8_t *token, size_t token_len, enum auth_side side, uint32_t prover_role,
                uint32_t verifier_role, const uint8_t prover_nonce[AUTH_NONCE_LEN],
                const uint8_t verifier_nonce[AUTH_NONCE_LEN], const uint8_t *mac, size_t mac_len);

/* Fills nonce with AUTH_NONCE_LEN bytes from the system's CSPRNG. Returns 0 or SLUICE_ERR_NOMEM
 * (the generator failed; the connection must not go on). Not pure. */
int auth_nonce(uint8_t nonce[AUTH_NONCE_LEN]);

/* Constant-time equality of two secrets of the given lengths (a length difference is not
 * hidden). */
bool auth_equal(const void *a, size_t alen, const void *b, size_t blen);

/* ---- the handshake ----------------------------------------------------------------------- */

enum auth_hs_state {
    AUTH_HS_HELLO, /* waiting for the peer's Hello */
    AUTH_HS_PROOF, /* Hellos exchanged, our proof sent; waiting for the peer's */
    AUTH_HS_DONE,  /* the peer is authenticated (or neither side has a token) */
    AUTH_HS_FAILED,
};

struct auth_hs {
    enum auth_side side;
    uint32_t own_role;
    const uint8_t *token; /* borrowed; it outlives the handshake */
    size_t token_len;     /* 0: this side has no token */
    uint8_t own_nonce[AUTH_NONCE_LEN];
    uint8_t peer_nonce[AUTH_NONCE_LEN];
    enum auth_hs_state state;
    uint32_t peer_role;
    uint64_t peer_incarnation;
};

/* What auth_hs_step asks of the caller. */
enum auth_hs_action {
    AUTH_HS_SEND = 1, /* send AuthProof { mac } (mac is filled in), then wait for the peer's */
    AUTH_HS_OPEN = 2, /* the handshake is done: the connection is open */
};

/* Starts a handshake for this side. token may be NULL when token_len is 0. nonce is this
 * connection's fresh nonce (auth_nonce), copied. */
void auth_hs_init(struct auth_hs *hs, enum auth_side side, uint32_t own_role, const uint8_t *token,
                  size_t token_len, const uint8_t nonce[AUTH_NONCE_LEN]);

/* Fills hello's auth and nonce fields for this side's Hello (nonce points into hs). */
void auth_hs_hello(const struct auth_hs *hs, Sluice__Hello *hello);

/* Feeds one Envelope received while the handshake is not done. Returns an action (>= 0), or a
 * negative code when the handshake failed (the state is then AUTH_HS_FAILED and stays so):
 *   SLUICE_ERR_VERSION   the first Envelope is not a Hello of RPC_PROTOCOL_VERSION
 *   SLUICE_ERR_PROTOCOL  a malformed Hello (a nonce of the wrong size) or, while waiting for a
 *                        proof, something else than an AuthProof
 *   SLUICE_ERR_AUTH      the tokens do not match (see above), or a reflected nonce
 * On failure, msg gets this side's one-line reason and *peer_msg (may be NULL) the text to send
 * the peer in the rejection. Pure. */
int auth_hs_step(struct auth_hs *hs, const Sluice__Envelope *env, uint8_t mac[AUTH_MAC_LEN],
                 char *msg, size_t msglen, const char **peer_msg);

#endif
