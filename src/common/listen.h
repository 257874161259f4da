/* Listening sockets for the project's servers (RPC and HTTP), made the same way for both.
 *
 * The socket is bound and listening before any libuv handle exists, so a failed start leaves
 * nothing to close. Startup only: resolving a host name may block. */
#ifndef SLUICE_COMMON_LISTEN_H
#define SLUICE_COMMON_LISTEN_H

#include <stddef.h>
#include <uv.h>

/* Resolves host (numeric first, then the resolver), creates a non-blocking, close-on-exec
 * socket with SO_REUSEADDR (a restarted server must bind its port while old connections sit in
 * TIME_WAIT), binds and listens. port 0 picks a free port; *port_out receives the bound port.
 * Returns 0 and *fd_out (owned by the caller), or a negative code with the reason in why. */
int listen_open(const char *host, int port, int *fd_out, int *port_out, char *why, size_t whylen);

/* Initializes handle on loop, adopts the listening fd and starts accepting with cb. Returns 0,
 * or a negative code: then fd is closed, and if the handle was initialized (*inited set) the
 * caller must uv_close it. */
int listen_adopt(uv_loop_t *loop, uv_tcp_t *handle, int fd, uv_connection_cb cb, int *inited);

#endif
