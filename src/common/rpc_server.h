/* The serving side of the RPC layer of rpc.h (rpc_server.c): a listener, its connections, and
 * the replies to their requests.
 *
 * Limits: until its handshake is done a connection may send frames of at most
 * RPC_HANDSHAKE_MAX_FRAME bytes and must finish within the handshake timeout, and one that has
 * sent nothing at all is closed sooner (RPC_IDLE_HANDSHAKE_TIMEOUT_MS). Beyond max_connections
 * open connections a new connection is accepted and closed at once (so the listener never
 * stalls), with a log line at most every 10 s. Connections in their handshake never lock out a
 * newcomer: when max_handshakes are in their handshake, or max_handshakes_per_address from the
 * newcomer's address, the oldest of them that has sent nothing (else the oldest) is closed to
 * make room, so strangers holding idle sockets cannot keep a peer that authenticates promptly
 * out, and one address can only ever displace its own connections.
 *
 * Backpressure: a connection stops reading from its socket while more than max_pending_write
 * bytes of its replies wait to be written, and resumes when they drain. */
#ifndef SLUICE_COMMON_RPC_SERVER_H
#define SLUICE_COMMON_RPC_SERVER_H

#include "rpc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define RPC_DEFAULT_MAX_PENDING_WRITE (64u << 20)
/* The most pieces a reply sent with rpc_conn_reply_elements may come in. */
#define RPC_MAX_SEGS 128
/* The most requests timed at once on one connection (rpc_server_opts.on_answered). */
#define RPC_TIMED_MAX 64
/* Server limits on connections that have not completed their handshake (rpc_server_opts). */
#define RPC_DEFAULT_HANDSHAKE_TIMEOUT_MS 10000
#define RPC_DEFAULT_MAX_HANDSHAKES 256
/* A connection that has sent no byte this long after its accept is closed (never later than the
 * handshake timeout): every client and worker sends its Hello (or its TLS ClientHello) at once. */
#define RPC_IDLE_HANDSHAKE_TIMEOUT_MS 3000
/* The most connections in their handshake from one peer address; 0 in rpc_server_opts means this,
 * never more than max_handshakes. */
#define RPC_DEFAULT_MAX_HANDSHAKES_PER_ADDRESS 64
/* The default ceiling on a server's open connections (a thousand workers and their readers fit);
 * never above the open-file limit (soft RLIMIT_NOFILE, which a server raises towards its hard
 * limit as far as the ceiling needs) less RPC_FD_RESERVE descriptors kept for everything else. */
#define RPC_DEFAULT_MAX_CONNECTIONS 4096
#define RPC_FD_RESERVE 64

struct rpc_server;
struct rpc_conn; /* one accepted connection; reference counted */
struct security_ctx;

/* Called for every request Envelope. req and everything it points to is valid only during the
 * call. The handler answers now or later with rpc_conn_reply*; to answer later it takes a
 * reference (rpc_conn_ref) and drops it after replying. */
typedef void (*rpc_request_cb)(struct rpc_server *srv, struct rpc_conn *conn,
                               const Sluice__Envelope *req, void *user);
/* Called once when a connection has completed its handshake (authentication included), and
 * once when it closes (after which replies on it are dropped). Either may be NULL. on_close runs
 * only for connections that had on_open (a peer rejected in its handshake was never
 * announced). */
typedef void (*rpc_conn_cb)(struct rpc_server *srv, struct rpc_conn *conn, void *user);

struct rpc_server_opts {
    const char *host; /* default "127.0.0.1" */
    int port;         /* 0 picks a free port */
    Sluice__Role role;
    uint64_t incarnation;
    uint32_t max_frame;       /* 0: RPC_DEFAULT_MAX_FRAME */
    size_t max_pending_write; /* 0: RPC_DEFAULT_MAX_PENDING_WRITE */
    /* A connection that has not completed its handshake this long after its accept is closed;
     * 0: RPC_DEFAULT_HANDSHAKE_TIMEOUT_MS. */
    uint32_t handshake_timeout_ms;
    /* The most connections open at once; 0: RPC_DEFAULT_MAX_CONNECTIONS. Lowered at start to
     * what the open-file limit allows (rpc_server_max_connections tells the result). */
    unsigned max_connections;
    /* The most connections still in their handshake at once; 0: RPC_DEFAULT_MAX_HANDSHAKES. */
    unsigned max_handshakes;
    /* The most of them from one peer address; 0: RPC_DEFAULT_MAX_HANDSHAKES_PER_ADDRESS. */
    unsigned max_handshakes_per_address;
    rpc_request_cb on_request;
    rpc_conn_cb on_open, on_close;
    /* Called when a request is answered (rpc_conn_reply, _reply_elements or _reply_error), with
     * its body case (Sluice__Envelope__BodyCase) and the seconds since it arrived (read and
     * decoded). A request answered while RPC_TIMED_MAX others wait on its connection is not
     * timed, nor one never answered. May be NULL: nothing is timed. */
    void (*on_answered)(void *user, int body_case, double seconds);
    void *user;
    /* Authentication and TLS (security.h); NULL for neither. It outlives the server. With TLS
     * (which needs the server side of tls.h), every accepted connection speaks TLS. */
    const struct security_ctx *sec;
};

/* Binds and listens. On failure returns a negative code with "listen on HOST:PORT: why" in err
 * and nothing to close. */
int rpc_server_start(uv_loop_t *loop, const struct rpc_server_opts *opts, struct rpc_server **out,
                     char *err, size_t errlen);
/* The bound port and host (useful with port 0). */
int rpc_server_port(const struct rpc_server *srv);
const char *rpc_server_host(const struct rpc_server *srv);
/* Handshakes that failed authentication since start (a wrong or missing token on either side,
 * or a TLS failure). */
uint64_t rpc_server_auth_failures(const struct rpc_server *srv);
/* Connections refused at accept because of max_connections or max_handshakes, and connections
 * closed because their handshake timed out. */
uint64_t rpc_server_refused(const struct rpc_server *srv);
uint64_t rpc_server_handshake_timeouts(const struct rpc_server *srv);
/* Connections in their handshake closed to make room for a newer one. */
uint64_t rpc_server_handshake_evictions(const struct rpc_server *srv);
/* How long a connection that sends nothing may wait before it is closed: the handshake timeout,
 * at most RPC_IDLE_HANDSHAKE_TIMEOUT_MS. */
uint32_t rpc_server_idle_timeout_ms(const struct rpc_server *srv);
/* The effective max_connections. */
unsigned rpc_server_max_connections(const struct rpc_server *srv);
/* Stops listening, closes every connection, then calls cb (may be NULL) and frees srv. */
void rpc_server_close(struct rpc_server *srv, void (*cb)(void *user), void *user);

/* Serves fd, the accepted end of an in-process socket pair with its link (inproc.h), or of a
 * shared-memory socket with its region (shm_sock.h; link NULL), as one more connection: the same
 * handshake (token, TLS) and requests as a TCP connection, counted against max_connections. Loop
 * thread only. Takes the reference to link and to shm in every case. Returns 0 once the
 * connection owns fd (a failure after that closes it, and fd with it), or a negative code with fd
 * still the caller's: SLUICE_ERR_CLOSED while the server closes, SLUICE_ERR_LIMIT at
 * max_connections, SLUICE_ERR_NOMEM, or an error of libuv. */
struct inproc_link;
struct shm_region;
int rpc_server_adopt(struct rpc_server *srv, uv_os_sock_t fd, struct inproc_link *link,
                     struct shm_region *shm);

/* Packs reply (the caller keeps ownership of it), sets its id, and queues it. Returns 0, or
 * SLUICE_ERR_CLOSED when the connection is gone (the reply is dropped). Also, with the
 * connection left open: SLUICE_ERR_TOO_LARGE when the reply packs to more than max_frame bytes,
 * SLUICE_ERR_NOMEM, or SLUICE_ERR_INVALID for an Envelope that packs to nothing. */
int rpc_conn_reply(struct rpc_conn *conn, uint64_t id, Sluice__Envelope *reply);
/* Replies with Envelope {id, get_elements_reply {count, eos, payload}} without copying the
 * payload, which is the concatenation of the nsegs pieces in segs (at most RPC_MAX_SEGS; the array
 * itself may go when this returns): their bytes must stay valid and unchanged until
 * sent(arg, status) runs, exactly once, on the loop thread, when they are written (status 0) or
 * cannot be (status < 0, e.g. the connection closed first). Returns 0; or, without ever calling
 * sent (the caller keeps its payload): SLUICE_ERR_CLOSED when the connection is gone, and with
 * the connection left open SLUICE_ERR_TOO_LARGE (over max_frame), SLUICE_ERR_INVALID (too many
 * pieces) or SLUICE_ERR_NOMEM. */
int rpc_conn_reply_elements(struct rpc_conn *conn, uint64_t id, uint32_t count, bool eos,
                            const uv_buf_t *segs, unsigned nsegs,
                            void (*sent)(void *arg, int status), void *arg);
/* Replies with an Error body: code and a one-line message. */
int rpc_conn_reply_error(struct rpc_conn *conn, uint64_t id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Replies with an Error of code SLUICE_ERR_NOT_LEADER (this replica of the dispatcher does not
 * serve), the one-line message, and Error.leader: leader, the RPC address HOST:PORT of the
 * leader as this replica knows it, or NULL or "" when it knows none (an election is under way).
 * A client (rpc_client.h) then re-sends the request to the leader, or to its next address.
 * Returns as rpc_conn_reply. */
int rpc_conn_reply_not_leader(struct rpc_conn *conn, uint64_t id, const char *leader,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void rpc_conn_ref(struct rpc_conn *conn);
void rpc_conn_unref(struct rpc_conn *conn);
bool rpc_conn_is_open(const struct rpc_conn *conn);
/* Whether conn is an in-process connection (rpc_server_adopt with a link). */
bool rpc_conn_is_local(const struct rpc_conn *conn);
/* Whether conn is a shared-memory connection, and whether its peer asked for aligned values
 * (GetElementsRequest.align_values; set once, kept for the connection's life). */
bool rpc_conn_is_shm(const struct rpc_conn *conn);
void rpc_conn_set_aligned(struct rpc_conn *conn);
bool rpc_conn_aligned(const struct rpc_conn *conn);
/* The elements and payload bytes conn has sent through its shared region so far, and of those
 * bytes the ones announced in place in its arena (0 for any other connection). */
void rpc_conn_shm_sent(const struct rpc_conn *conn, uint64_t *elements, uint64_t *bytes,
                       uint64_t *inplace);
/* conn's shared region (NULL for any other connection), to build values in (shm_region.h). */
struct shm_region *rpc_conn_shm_region(const struct rpc_conn *conn);
/* In the server's on_close callback only: the shared region conn had (NULL for none). */
struct shm_region *rpc_conn_closed_region(const struct rpc_conn *conn);
Sluice__Role rpc_conn_peer_role(const struct rpc_conn *conn);
/* A number no other connection of the same server had or will have (from 1): it names the
 * connection after it is gone, where its pointer may be reused. */
uint64_t rpc_conn_serial(const struct rpc_conn *conn);
uint64_t rpc_conn_peer_incarnation(const struct rpc_conn *conn);
/* "IP:PORT" of the peer, for logs. */
const char *rpc_conn_peer_name(const struct rpc_conn *conn);
/* Bytes of replies queued and not yet written. */
size_t rpc_conn_pending_write(const struct rpc_conn *conn);

#endif
