/* The Unix socket of shared-memory reads (docs/design.md "Shared-memory reads"): a worker listens
 * on the abstract name @sluice-worker-INCARNATION; a reader on its host dials it, checks that the
 * listener runs as its own user, creates a region (shm_region.h) and sends the region's
 * descriptor in its first message, a hello of SHM_SOCK_HELLO_LEN bytes (magic, ring size). The
 * listener checks the dialler's user, receives the hello and the descriptor, maps the region and
 * hands the connected socket and the region to its owner, which serves it as one more connection
 * (rpc_server_adopt): from there on the socket carries the usual frames.
 *
 * Failure modes: a dialler of another user, a hello that is not one, a descriptor that is not a
 * sealed region of the size announced: the listener closes that socket and logs why at debug
 * level. A socket that has not sent its hello within the listener's timeout (the rpc server's
 * timeout for a connection that sends nothing, rpc_server_idle_timeout_ms) is closed; at most
 * SHM_SOCK_PENDING sockets wait for their hello, and a newcomer beyond that closes the oldest one
 * that has sent nothing (none: the newcomer is closed), so silent sockets cannot lock readers
 * out, as with TCP (rpc_server.h). A dial
 * that fails for any reason leaves nothing behind; the reader then dials TCP.
 *
 * Threading: shm_sock_dial on any thread (it does not block: connect on a Unix socket completes
 * or fails at once). The listener lives on its loop's thread; its callback runs there. */
#ifndef SLUICE_COMMON_SHM_SOCK_H
#define SLUICE_COMMON_SHM_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct shm_region;

#define SHM_SOCK_HELLO_LEN 16
#define SHM_SOCK_PENDING 16

/* Dials the worker of that incarnation on this host with a region whose ring holds size bytes.
 * Returns 0 with *fd (a connected, non-blocking, close-on-exec socket, the caller's) and *region
 * (one reference, the caller's); or SLUICE_ERR_DENIED when the listener runs as another user,
 * SLUICE_ERR_INVALID for a bad size, or a negative errno (-ECONNREFUSED: no such worker here). */
int shm_sock_dial(uint64_t incarnation, uint64_t size, uv_os_sock_t *fd,
                  struct shm_region **region);

/* A connection ready to serve: the socket (the callee's from then on) and the region (one
 * reference, the callee's). */
typedef void (*shm_sock_accept_cb)(void *user, uv_os_sock_t fd, struct shm_region *region);

struct shm_listener;

/* Listens on the worker's abstract name; a socket whose hello has not come timeout_ms (>= 1) after
 * its accept is closed. Returns 0 and *out, or a negative errno with a message in err
 * (-EADDRINUSE: another process listens there). */
int shm_sock_listen(uv_loop_t *loop, uint64_t incarnation, uint32_t timeout_ms,
                    shm_sock_accept_cb cb, void *user, struct shm_listener **out, char *err,
                    size_t errlen);

/* Stops listening, drops the sockets still waiting for their hello, and calls done(user) once
 * every handle has closed, after which the listener is freed. The accept callback does not run
 * after this call. */
void shm_sock_close(struct shm_listener *l, void (*done)(void *user), void *user);

#endif
