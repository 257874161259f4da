/* C-Raft's network transport (struct raft_uv_transport of <raft/uv.h>) for the dispatcher's
 * replicas, authenticated with the cluster's token like the RPC port: a connection reaches Raft
 * only after the handshake of raft_handshake.h (Hello, AuthProof, RaftPeerHello,
 * RaftPeerWelcome) has succeeded; a stranger on the Raft port is refused exactly like one on the
 * RPC port, and never reaches Raft.
 *
 * Use: raft_transport_init() fills a struct raft_uv_transport (version 1) whose methods Raft's
 * libuv I/O backend (raft_uv_init) calls: init(id, address) names this server, listen() binds
 * opts.bind_address or else that address, connect() dials a peer, close() stops everything.
 * Once close's callback has run, raft_transport_release() frees what init allocated.
 *
 * Contract with Raft (the comments of <raft/uv.h>, and C-Raft's own TCP transport):
 *   - accept_cb(t, id, address, stream) runs for a connection whose handshake succeeded, with the
 *     dialler's id and address from its RaftPeerHello; stream (a uv_tcp_t from raft_malloc, not
 *     reading) is Raft's from then on, to uv_close and raft_free.
 *   - connect's cb runs exactly once per request that connect() accepted (returned 0): with
 *     status 0 and the stream (Raft's from then on) once the peer welcomed us; with
 *     RAFT_NOCONNECTION when resolving, connecting or the handshake failed or timed out; with
 *     RAFT_CANCELED when close() came first. It never runs from inside connect().
 *   - close(cb): stops listening (accept_cb never runs again), cancels every pending connect and
 *     handshake, and runs cb once every handle is closed and every connect cb has run; never from
 *     inside close().
 *
 * Failure modes, each closing the connection and logging one warning line, rate-limited per
 * peer host (ratelimit.h) so that a port scanner cannot fill the log: a peer of another role or
 * version, a wrong or missing token (the texts of auth.h), a different cluster string, a
 * malformed RaftPeerHello, a frame over RAFT_TRANSPORT_MAX_FRAME bytes or more than
 * RAFT_TRANSPORT_MAX_HANDSHAKE_BYTES in all, any byte after the handshake's last frame, or a
 * handshake not done within handshake_timeout_ms. Beyond max_handshakes incoming handshakes in
 * progress, a new connection is accepted and closed at once.
 *
 * TLS: with security_has_tls(opts.sec), every connection on the Raft port is TLS (the context of
 * tls.h: this side's certificate to accept, the CA to verify the acceptor's certificate against
 * the host dialled). The handshake above runs inside the TLS session; Raft then gets one end of
 * a socket pair (a uv_pipe_t from raft_malloc) and the transport relays between the other end and
 * the session, with backpressure both ways (a direction stops being read while more than
 * RAFT_TRANSPORT_RELAY_HIGH bytes wait to be written the other way). When either side ends (Raft
 * closes its end, or the peer its connection), what was already read from either side is
 * delivered to the other, then both close, so Raft reads the end of its stream; a write error
 * closes both at once. close() closes the relays too. A plain peer on a TLS port (or the other way
 * round) is refused with a line that says so.
 *
 * Signals: libuv writes with plain write(2) (the relay to Raft's end of the socket pair too), so
 * SIGPIPE must not reach its default action (rpc.h): the dispatcher ignores it.
 *
 * Threading: everything on the loop's thread. */
#ifndef SLUICE_DISPATCHER_RAFT_TRANSPORT_H
#define SLUICE_DISPATCHER_RAFT_TRANSPORT_H

#include <raft.h>
#include <raft/uv.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct security_ctx;

/* Bounds on what a peer may send before the handshake is done. */
#define RAFT_TRANSPORT_MAX_FRAME (64u << 10)
#define RAFT_TRANSPORT_MAX_HANDSHAKE_BYTES (128u << 10)
#define RAFT_TRANSPORT_DEFAULT_TIMEOUT_MS 5000
#define RAFT_TRANSPORT_DEFAULT_MAX_HANDSHAKES 64
#define RAFT_TRANSPORT_RELAY_HIGH (1u << 20)

struct raft_transport_opts {
    /* The token and TLS settings of the cluster, borrowed for the transport's life; NULL: no
     * token and no TLS. With TLS it must hold both sides (SECURITY_CLIENT | SECURITY_SERVER). */
    const struct security_ctx *sec;
    /* The cluster's configuration as a string, e.g. "1=127.0.0.1:7001,2=127.0.0.1:7002"; copied.
     * Both ends of a connection must hold the same one. Required (may be ""). */
    const char *cluster;
    /* HOST:PORT to listen on instead of the address given to init (e.g. "0.0.0.0:7001"); copied.
     * NULL: that address. */
    const char *bind_address;
    /* The most a connection may take from its accept, or from connect(), to its handover to
     * Raft (resolving and connecting included). 0: RAFT_TRANSPORT_DEFAULT_TIMEOUT_MS. */
    uint32_t handshake_timeout_ms;
    /* Incoming handshakes in progress at most. 0: RAFT_TRANSPORT_DEFAULT_MAX_HANDSHAKES. */
    unsigned max_handshakes;
    /* Membership (replica.c), each optional, called on the loop's thread with user:
     * last_index: the answer to a peer's probe (this server's last Raft log index, 0 while its
     * directory is new); rejoining: whether a connection dialled now says rejoin (this server's
     * directory was new and it is not a voter yet); rejoin: a peer that says so connected (its
     * id, authenticated by the handshake). */
    void *user;
    uint64_t (*last_index)(void *user);
    bool (*rejoining)(void *user);
    void (*rejoin)(void *user, uint64_t id);
};

/* A probe's answer: status 0 with the peer's last index, else a RAFT_* code (RAFT_NOCONNECTION:
 * unreachable, refused or timed out; RAFT_CANCELED: the transport closed first). */
typedef void (*raft_transport_probe_cb)(void *user, uint64_t id, int status, uint64_t last_index);

/* Fills t (version 1, data untouched) with a transport on loop. Returns 0; or SLUICE_ERR_INVALID
 * (no cluster string, one over RAFT_HS_CLUSTER_MAX - 1 bytes, a malformed bind_address, TLS
 * settings that cannot both accept and dial) or SLUICE_ERR_NOMEM, with the reason in err; then
 * nothing needs releasing. */
int raft_transport_init(struct raft_uv_transport *t, uv_loop_t *loop,
                        const struct raft_transport_opts *o, char *err, size_t errlen);

/* Frees what raft_transport_init allocated: after close's callback has run, or when neither
 * listen nor connect was ever called. */
void raft_transport_release(struct raft_uv_transport *t);

/* Listens on opts.bind_address, else address, before Raft starts (Raft's listen() then only
 * takes the accept callback): peers' probes are answered at once, and a peer that connects for
 * Raft before Raft started is closed (it tries again). Returns 0 or a negative code with the
 * reason in err. */
int raft_transport_listen(struct raft_uv_transport *t, const char *address, char *err,
                          size_t errlen);

/* Asks server id at address for its last log index (RaftPeerHello.probe) through the same
 * authenticated handshake; cb runs exactly once, never from inside this call. Returns 0, or a
 * negative code (a malformed address, the transport closing, out of memory) and cb never
 * runs. */
int raft_transport_probe(struct raft_uv_transport *t, uint64_t id, const char *address,
                         raft_transport_probe_cb cb, void *user);

/* The port listen() bound (useful with port 0), or 0 when not listening. */
int raft_transport_port(const struct raft_uv_transport *t);

/* Connections that never reached Raft so far, in both directions: failed or timed-out
 * handshakes (TLS included), failed connects and resolutions, and connections turned away beyond
 * max_handshakes. Connects cancelled by close() do not count. */
uint64_t raft_transport_refused(const struct raft_uv_transport *t);

#endif
