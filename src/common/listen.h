/* Listening sockets for the project's servers (RPC and HTTP), made the same way for both, and
 * the spare handle both use to refuse a connection.
 *
 * The socket is bound and listening before any libuv handle exists, so a failed start leaves
 * nothing to close. Startup only: resolving a host name may block.
 *
 * Refusing: libuv stops watching a listener until its pending connection is accepted, so a
 * server past its limits accepts the connection into a spare handle and closes it at once;
 * refusing must not depend on an allocation, and the listener never stalls. While the spare is
 * closing a further connection stays pending, and the server accepts again (runs its
 * connection callback) when the spare is free. Loop thread only. */
#ifndef SLUICE_COMMON_LISTEN_H
#define SLUICE_COMMON_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* Embedded in its server; zero-initialized. */
struct listen_spare {
    uv_tcp_t tcp;
    bool busy;    /* tcp is closing */
    bool pending; /* a connection waits for tcp to be free */
};

/* Resolves host (numeric first, then the resolver), creates a non-blocking, close-on-exec
 * socket with SO_REUSEADDR (a restarted server must bind its port while old connections sit in
 * TIME_WAIT), binds and listens. port 0 picks a free port; *port_out receives the bound port.
 * Returns 0 and *fd_out (owned by the caller), or a negative code with the reason in why. */
int listen_open(const char *host, int port, int *fd_out, int *port_out, char *why, size_t whylen);

/* Initializes handle on loop, adopts the listening fd and starts accepting with cb. Returns 0,
 * or a negative code: then fd is closed, and if the handle was initialized (*inited set) the
 * caller must uv_close it. */
int listen_adopt(uv_loop_t *loop, uv_tcp_t *handle, int fd, uv_connection_cb cb, int *inited);

/* Accepts listener's pending connection into spare and closes it straight away; closed_cb then
 * runs with the handle's data set to data, and must call listen_spare_closed. Returns true; or
 * false, with nothing to close, when the spare is still closing (or cannot be initialized): the
 * connection stays pending until the spare is free. */
bool listen_spare_refuse(struct listen_spare *spare, uv_loop_t *loop, uv_stream_t *listener,
                         void *data, uv_close_cb closed_cb);

/* From the spare's close callback: the spare is free again. Returns true when a connection was
 * left pending meanwhile and accepting is true (false once the server is closing): the caller
 * then runs its connection callback itself, as libuv will not. Close callbacks run late in the
 * loop iteration, so a connection refused meanwhile waits one iteration at most. */
bool listen_spare_closed(struct listen_spare *spare, bool accepting);

#endif
