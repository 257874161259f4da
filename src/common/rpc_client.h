/* The calling side of the RPC layer of rpc.h (rpc_client.c): one client per server (or per group
 * of replicas of one server, given as a list of addresses), which connects on demand, matches
 * replies to calls, reconnects with backoff, and finds the replica that serves (the leader). */
#ifndef SLUICE_COMMON_RPC_CLIENT_H
#define SLUICE_COMMON_RPC_CLIENT_H

#include "rpc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct rpc_client;
struct shm_region;
struct bufpool;

/* How long a connection to a dispatcher replica may stay silent (the peer's TCP acknowledges
 * nothing: neither what was written nor the keepalive probes sent after a second without
 * traffic) before it counts as lost: longer than a busy network's retransmissions take, as short
 * as a Raft election of the default timeout (1 s) and a little more, so a caller stuck on a
 * cut-off leader moves on about when the others have a new one. */
#define RPC_REPLICA_SILENCE_MS 3000

/* Called exactly once per accepted call. status 0: reply is the answer. status < 0: reply is
 * NULL, or, when the server answered with an Error body, that Envelope; msg is always a one-line
 * reason (for an Error body, its message). reply and msg are valid only during the call. */
typedef void (*rpc_reply_cb)(int status, const char *msg, const Sluice__Envelope *reply,
                             void *user);
/* Called after every successful (re)connection handshake, with the server's incarnation. */
typedef void (*rpc_connect_cb)(struct rpc_client *client, uint64_t peer_incarnation, void *user);

struct rpc_client_opts {
    /* HOST:PORT, or a comma-separated list of them, the replicas of one server (at most
     * RPC_MAX_ADDRESSES, each once), with an optional sluice:// before it: rpc_parse_address_list.
     * The client talks to one current address at a time: after a failed attempt or a lost
     * connection it tries the next of the list (round robin, with backoff); when a reply is an
     * Error of code SLUICE_ERR_NOT_LEADER it re-sends that call, unchanged, to the leader the
     * replica named in Error.leader (which need not be in the list), or with none named to the
     * next address of the list after backoff_min_ms. The caller never sees NOT_LEADER: a call
     * redirected more than 20 times fails with SLUICE_ERR_UNAVAILABLE and "no dispatcher leader
     * among HOST:PORT,...: ADDRESS: REASON" (the last replica's answer), and its timeout runs
     * throughout. A connection to a replica (an address of a list of two or more, or a leader a
     * replica named) whose peer's TCP acknowledges nothing for RPC_REPLICA_SILENCE_MS is lost
     * (on Linux: TCP_USER_TIMEOUT, and keepalive probes after 1 s idle, so a call waiting for
     * its reply is covered as well as one being written): a replica cut off from the network
     * holds no call longer, and the next attempt goes to another replica. */
    const char *address;
    Sluice__Role role;
    uint64_t incarnation;
    uint32_t max_frame;          /* 0: RPC_DEFAULT_MAX_FRAME */
    uint32_t connect_timeout_ms; /* 0: 5000 */
    uint32_t backoff_min_ms;     /* 0: 50 */
    uint32_t backoff_max_ms;     /* 0: 2000 */
    /* NULL, or where buffers for large replies come from; it outlives the client. */
    struct bufpool *pool;
    rpc_connect_cb on_connect;
    void *user;
    /* Authentication and TLS (security.h); NULL for neither. It outlives the client. With TLS
     * (which needs the client side of tls.h), every connection speaks TLS and verifies the
     * server's certificate against the host part of the current address (each of a list, and
     * a leader a replica names, alike), or against tls_name. */
    const struct security_ctx *sec;
    /* NULL or "": verify the server's certificate against the host part of address; else against
     * this DNS name (a reader's --tls-worker-name). Copied. */
    const char *tls_name;
    /* Dial the server in this process first when one runs at the current address (for a single
     * address, as given) with incarnation
     * local_incarnation (0: any; inproc.h): an in-process socket pair, no TCP. Every attempt
     * looks again, so a server that stopped is dialled over TCP as usual. */
    bool local;
    uint64_t local_incarnation;
    /* With local and a local_incarnation, above 0: when no server of that incarnation runs in
     * this process, dial its shared-memory socket on this host (shm_sock.h) with a region whose
     * ring holds shm_bytes bytes, before TCP; not under TLS. Every attempt tries again, and one
     * that fails dials TCP; after a shared-memory connection that failed before its handshake
     * completed, the next attempt dials TCP. 0: never. */
    uint64_t shm_bytes;
};

/* Creates a client; it connects on the first call, to the first address of the list. Returns 0,
 * or SLUICE_ERR_INVALID for a bad address or list with a message in err (rpc_parse_address_list's
 * messages), or SLUICE_ERR_NOMEM. */
int rpc_client_new(uv_loop_t *loop, const struct rpc_client_opts *opts, struct rpc_client **out,
                   char *err, size_t errlen);

/* Sends req (its id is set here; the caller keeps ownership and may free it on return). If the
 * client is not connected, the call waits for a connection (retried with backoff) until its
 * timeout. Returns 0 and later calls cb exactly once; or returns a negative code synchronously
 * (SLUICE_ERR_CLOSED after close) and never calls cb. timeout_ms 0 means no timeout. */
int rpc_call(struct rpc_client *client, Sluice__Envelope *req, uint32_t timeout_ms, rpc_reply_cb cb,
             void *user);

/* Only from an rpc_reply_cb with status 0 whose reply is a GetElementsReply: when the reply was
 * received in a buffer of its own (large replies are), hands that buffer (a malloc'd block of
 * *cap bytes) over and returns it; the caller frees it, or gives it back to the client's pool,
 * and reply's pointers (the payload's included) stay valid until then. Returns NULL otherwise;
 * the reply is then valid only during the callback, as usual. */
void *rpc_client_take_reply(struct rpc_client *client, size_t *cap);

/* Like rpc_client_take_reply, for a reply whose payload came through the connection's shared
 * region: returns the region (the block's reference) and the block's position in *pos, which the
 * caller hands back with shm_region_release; NULL otherwise. */
struct shm_region *rpc_client_take_shm(struct rpc_client *client, uint64_t *pos);

/* Whether the client is connected over a shared-memory connection (rpc_client_opts.shm_bytes). */
bool rpc_client_shm(const struct rpc_client *client);

/* Over a shared-memory connection: the ring's size in *size and the bytes of it the reader holds
 * (taken and not yet released) in *held, and true; not connected yet, but about to dial shared
 * memory first: shm_bytes and 0, and true; false otherwise. */
bool rpc_client_shm_usage(struct rpc_client *client, uint64_t *size, uint64_t *held);

/* Withdraws the call made with cb and user if it has not been written yet (it waits for a
 * connection), so the server never sees it: cb then runs with SLUICE_ERR_CANCELLED from the
 * loop's next timer run, never inside this function. Returns true when such a call was
 * withdrawn; false when none waits unwritten (it was written, or has completed), and then
 * nothing changes. */
bool rpc_client_withdraw(struct rpc_client *client, rpc_reply_cb cb, void *user);

/* Whether the client is connected to a server that serves its calls: false from a NOT_LEADER
 * answer until the next handshake. on_connect runs after every handshake, a follower's too, so a
 * switch to another replica (another process) reads like a restart of the server, with the
 * incarnation its Hello carries. A replica that sends an Error NOT_LEADER (id 0) in place of its
 * Hello is followed without a handshake, and without on_connect. */
bool rpc_client_connected(const struct rpc_client *client);
/* Whether the client is connected, over an in-process connection (rpc_client_opts.local). */
bool rpc_client_local(const struct rpc_client *client);
/* Why the last connection or attempt to connect failed ("connection refused", ...), or "" when
 * none failed since the last handshake; while a replica's NOT_LEADER is being followed, that
 * answer ("HOST:PORT: message[; following LEADER]"). Valid until the client's loop runs again. */
const char *rpc_client_why(const struct rpc_client *client);
/* The incarnation the server sent in its last Hello, or 0 before the first handshake. */
uint64_t rpc_client_peer_incarnation(const struct rpc_client *client);
/* The address or list as given to rpc_client_new. */
const char *rpc_client_address(const struct rpc_client *client);
/* The address the client talks to, or tries next: for a single address, as given; otherwise
 * "HOST:PORT" of the current element of the list, or of the leader a replica named. Valid until
 * the client's loop runs again. */
const char *rpc_client_current_address(const struct rpc_client *client);
/* Connections of this client that failed authentication (either side's proof, or TLS). */
uint64_t rpc_client_auth_failures(const struct rpc_client *client);

/* Fails pending calls with SLUICE_ERR_CANCELLED, closes, calls cb (may be NULL), frees. */
void rpc_client_close(struct rpc_client *client, void (*cb)(void *user), void *user);

#endif
