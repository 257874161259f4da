/* The libuv connection and RPC layer (docs/design.md §5): what both sides share. The serving
 * side is declared in rpc_server.h, the calling side in rpc_client.h.
 *
 * Happy path: a server listens; a client connects; each side sends a Hello (protocol version,
 * role, incarnation, and the auth flag and nonce of auth.h) as its first frame; when both hold
 * the token, each then proves it with an AuthProof and checks the other's (auth.h); then the
 * client sends request Envelopes, pipelined, each with a fresh id, and the server answers each
 * with an Envelope carrying the same id, in any order. Failure modes: a peer that sends a bad
 * Hello, a zero or over-limit frame, or an undecodable Envelope is disconnected (the server logs
 * one line and keeps serving everyone else); a lost connection fails the client's pending calls
 * with SLUICE_ERR_UNAVAILABLE and the client reconnects on demand with exponential backoff and
 * jitter; a call that gets no reply in its timeout fails with SLUICE_ERR_TIMEOUT.
 *
 * Authentication: with a token (security_ctx), the server hands no request to on_request and calls
 * no on_open before the peer has proved it holds the same token, and the client writes no call
 * before the server has. A failed authentication (or a TLS failure, which conn.h reports as
 * SLUICE_ERR_AUTH) is final for the calls waiting on that connection: they fail with
 * SLUICE_ERR_AUTH and the reason ("authentication failed: wrong token"); the client tries again
 * only for later calls, after a backoff. The server answers an Error (id 0, SLUICE_ERR_AUTH),
 * closes, counts the failure (rpc_server_auth_failures) and logs it at most once a minute per
 * peer address.
 *
 * Threading: every object belongs to the loop it was created on, and every function here must be
 * called on that loop's thread. Callbacks run on that thread.
 *
 * Closing: rpc_server_close / rpc_client_close close every handle they own and call their
 * callback from the last close callback, so uv_loop_close() returns 0 afterwards.
 *
 * Signals: libuv writes with plain write(2), so a SIGPIPE must never reach the process's default
 * action, or a peer that vanishes mid-write ends the process: the loop threads of the servers and
 * of the client block it (loop_thread_spawn), and the binaries also ignore it. */
#ifndef SLUICE_COMMON_RPC_H
#define SLUICE_COMMON_RPC_H

#include "auth.h" /* RPC_PROTOCOL_VERSION */
#include "wire.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define RPC_DEFAULT_MAX_FRAME (256u << 20)
/* The most bytes a frame may have until its connection's handshake is done (both sides). */
#define RPC_HANDSHAKE_MAX_FRAME 4096

/* Parses "HOST:PORT" or "sluice://HOST:PORT" (HOST may be "[v6]"). host gets the host without
 * brackets. Returns 0 or SLUICE_ERR_INVALID with a message in err. */
int rpc_parse_address(const char *text, char *host, size_t hostlen, int *port, char *err,
                      size_t errlen);

/* The inverse: writes "HOST:PORT" into out (len bytes, NUL-terminated when len > 0), with an
 * IPv6 host in brackets. */
void rpc_format_address(char *out, size_t len, const char *host, int port);

/* The most addresses a list may hold (a group of dispatcher replicas is 3 or 5), and the most
 * characters its text may have. */
#define RPC_MAX_ADDRESSES 16
#define RPC_ADDRESS_LIST_MAX 2048

/* One address of a list: host without brackets, port, and "HOST:PORT" as rpc_format_address
 * writes it. */
struct rpc_address {
    char host[256];
    int port;
    char text[264];
};

/* Parses a comma-separated list of addresses, "HOST:PORT,HOST:PORT,..." with an optional
 * "sluice://" once before the list (HOST may be "[v6]"; blanks around an element are ignored).
 * A single address is what rpc_parse_address accepts, with its messages. Writes the addresses,
 * in order, to out (room for max, at most RPC_MAX_ADDRESSES) and their number to *n. Returns 0,
 * or SLUICE_ERR_INVALID with one of these messages in err (LIST is text as given):
 *   "bad address: none given" (text NULL or "")
 *   "bad address list: longer than 2047 characters"
 *   "bad address list 'LIST': more than 16 addresses"
 *   "bad address list 'LIST': address N is empty" (N counts from 1)
 *   "bad address list 'LIST': address N: sluice:// goes once, before the list"
 *   "bad address list 'LIST': HOST:PORT is listed twice"
 *   "bad address list 'LIST': " followed by rpc_parse_address's message for the element. */
int rpc_parse_address_list(const char *text, struct rpc_address *out, size_t max, size_t *n,
                           char *err, size_t errlen);

/* Writes the addresses of list, "HOST:PORT,HOST:PORT,...", into out (len bytes, NUL-terminated
 * when len > 0; cut short when it does not fit). */
void rpc_format_address_list(char *out, size_t len, const struct rpc_address *list, size_t n);

/* A random 64-bit incarnation id for this process (never 0). */
uint64_t rpc_new_incarnation(void);

#endif
