/* The handshake on the Raft port (raft_transport.h), as a pure state machine: what to send next
 * given what arrived. The libuv shell feeds it every Envelope received before the handshake is
 * done and carries out what it asks; a fuzzer can drive it from bytes.
 *
 * Protocol, after the TCP connection is up. Both ends send a Hello (role ROLE_RAFT_PEER, version
 * RPC_PROTOCOL_VERSION, the auth flag and nonce of auth.h) at once and run the authentication of
 * auth.h, exactly as the RPC port does. Once the peer is authenticated and its role checked, the
 * end that dialled sends RaftPeerHello { id, address, cluster }; the end that accepted checks it
 * (an id above 0, an address of at most RAFT_HS_ADDRESS_MAX - 1 bytes, the same cluster string as
 * its own) and answers RaftPeerWelcome, or an Error with id 0 and then closes:
 *   SLUICE_ERR_AUTH     authentication failed (the texts of auth.h)
 *   SLUICE_ERR_VERSION  a first frame that is not a Hello of our version
 *   SLUICE_ERR_INVALID  a malformed RaftPeerHello, or a cluster that differs from ours
 *   SLUICE_ERR_PROTOCOL anything else out of order (a peer of another role included)
 * After the welcome the connection carries Raft's own bytes, from the dialler to the acceptor
 * only; nothing of the handshake follows.
 *
 * Two flags of RaftPeerHello change that. probe: the dialler only asks; the acceptor answers
 * RaftPeerWelcome { last_index } (hs.last_index, set by the caller before the step) and both
 * ends close (raft_hs_out.answered), nothing reaching Raft. rejoin: the dialler's Raft
 * directory is new and it joins a group that has a log; the acceptor records it (hs.rejoin)
 * and the connection opens as any other.
 *
 * Threading: any thread; nothing here is shared. */
#ifndef SLUICE_DISPATCHER_RAFT_HANDSHAKE_H
#define SLUICE_DISPATCHER_RAFT_HANDSHAKE_H

#include "common/auth.h"
#include "wire.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RAFT_HS_NOT_STARTED "this replica has not started Raft yet (its directory is new)"

/* The longest Raft address (HOST:PORT) and cluster string accepted, NUL included. */
#define RAFT_HS_ADDRESS_MAX 256
#define RAFT_HS_CLUSTER_MAX 4096

enum raft_hs_state {
    RAFT_HS_AUTH,    /* the Hellos and proofs of auth.h */
    RAFT_HS_PEER,    /* acceptor: authenticated, waiting for RaftPeerHello */
    RAFT_HS_WELCOME, /* dialler: RaftPeerHello sent, waiting for RaftPeerWelcome */
    RAFT_HS_DONE,    /* the connection belongs to Raft now */
    RAFT_HS_FAILED,
};

struct raft_hs {
    struct auth_hs auth;
    enum raft_hs_state state;
    const char *cluster; /* borrowed; this side's cluster string */
    /* Acceptor: the dialler's identity from its RaftPeerHello, once state is RAFT_HS_DONE. */
    uint64_t peer_id;
    char peer_address[RAFT_HS_ADDRESS_MAX];
    /* Dialler: what its RaftPeerHello asks (set after raft_hs_init). Acceptor: what the
     * dialler's said, once state is RAFT_HS_DONE. */
    bool probe, rejoin;
    /* Acceptor: the answer to a probe (set by the caller). Dialler of a probe: the answer, once
     * state is RAFT_HS_DONE. */
    uint64_t last_index;
    /* Acceptor: Raft has not started on this side (set by the caller): a RaftPeerHello that is
     * no probe is refused with SLUICE_ERR_UNAVAILABLE (RAFT_HS_NOT_STARTED); probes are
     * answered. */
    bool not_started;
};

/* What the caller must send, in this order, after a step (bits of raft_hs_out.send). */
enum raft_hs_send {
    RAFT_HS_SEND_PROOF = 1,      /* AuthProof { mac } with raft_hs_out.mac */
    RAFT_HS_SEND_PEER_HELLO = 2, /* RaftPeerHello { own id, own address, cluster, probe,
                                    rejoin } */
    RAFT_HS_SEND_WELCOME = 4,    /* RaftPeerWelcome { last_index: hs.last_index } */
    RAFT_HS_SEND_ERROR = 8,      /* Error { code, error_msg } with id 0, then close */
};

struct raft_hs_out {
    unsigned send; /* enum raft_hs_send bits */
    uint8_t mac[AUTH_MAC_LEN];
    /* With RAFT_HS_SEND_ERROR: the code and text for the peer. */
    int error_code;
    char error_msg[512];
    /* The handshake is done (after sending what send asks): hand the stream over. */
    bool open;
    /* A probe is done (after sending what send asks): close; nothing reaches Raft. */
    bool answered;
};

/* Starts the handshake of one connection. side: AUTH_SERVER for the end that accepted, else
 * AUTH_CLIENT. token may be NULL when token_len is 0; token and cluster are borrowed and outlive
 * hs. nonce is the connection's fresh nonce (auth_nonce), copied. */
void raft_hs_init(struct raft_hs *hs, enum auth_side side, const uint8_t *token, size_t token_len,
                  const char *cluster, const uint8_t nonce[AUTH_NONCE_LEN]);

/* Fills hello for this side's first frame (version, role, auth, nonce; the nonce points into hs).
 */
void raft_hs_hello(const struct raft_hs *hs, Sluice__Hello *hello, uint64_t incarnation);

/* Feeds one Envelope received before the handshake is done. Returns 0 with *out saying what to
 * send and whether the connection is now open; or a negative code when the handshake failed,
 * with this side's one-line reason in msg and, for the acceptor, an Error for the peer in *out
 * (send bit RAFT_HS_SEND_ERROR). The state then stays RAFT_HS_FAILED. A dialler refused by an
 * Error from the acceptor fails with the Error's code (SLUICE_ERR_PROTOCOL when it carries none)
 * and "refused by the peer: TEXT". Pure. */
int raft_hs_step(struct raft_hs *hs, const Sluice__Envelope *env, struct raft_hs_out *out,
                 char *msg, size_t msglen);

/* Checks a RaftPeerHello against this side's cluster string. Returns 0, or SLUICE_ERR_INVALID with
 * the reason in msg: a missing body, an id of 0, an empty or over-long address, or a cluster that
 * differs ("cluster mismatch: this server has \"A\", the peer has \"B\""). Pure. */
int raft_hs_check_peer_hello(const Sluice__RaftPeerHello *h, const char *cluster, char *msg,
                             size_t msglen);

/* Splits "HOST:PORT" or "[IPv6]:PORT" into host (without brackets) and port (1..65535, or 0 when
 * allow_zero). Returns 0, or SLUICE_ERR_INVALID for anything else. Pure. */
int raft_hs_split_address(const char *address, char *host, size_t hostlen, int *port,
                          bool allow_zero);

#endif
