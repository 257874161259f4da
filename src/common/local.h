/* In-process connections (README "Local workers"): servers running in this process (an embedded
 * worker, sluice_worker_start) register under the address they advertise and their incarnation,
 * and a client in the same process that would dial that address gets a connected socket pair
 * instead of a TCP connection: one end is handed to the server, which serves it as one more
 * accepted connection (the same handshake, token check, TLS and request handling), the other is
 * the client's. Nothing is bound or listening, so no other process can reach it; the ends are
 * close-on-exec. The bytes move through the kernel's memory, never through the network stack.
 *
 * Thread-safe: a mutex guards the registry; the accept callback runs under it, so once
 * local_unregister returns the callback never runs again. */
#ifndef SLUICE_COMMON_LOCAL_H
#define SLUICE_COMMON_LOCAL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* Takes one accepted end (fd) on the server's behalf. Called on the dialling thread with the
 * registry's lock held: it must only hand the fd over (a queue and uv_async_send) and return 0,
 * or return a negative code without taking the fd. */
typedef int (*local_accept_cb)(void *user, uv_os_sock_t fd);

struct local_entry;

/* Registers a server at address (copied) with its incarnation. Returns 0 and *out, or
 * SLUICE_ERR_NOMEM. */
int local_register(const char *address, uint64_t incarnation, local_accept_cb cb, void *user,
                   struct local_entry **out);

/* Takes the entry out of the registry and frees it; NULL is allowed. */
void local_unregister(struct local_entry *e);

/* Whether a server at address with that incarnation (0: any) runs in this process. */
bool local_has(const char *address, uint64_t incarnation);

/* Dials the in-process server at address with that incarnation (0: any): makes a socket pair,
 * hands one end to the server and puts the other in *fd (the caller's). Returns 0,
 * SLUICE_ERR_NOT_FOUND when no such server is registered, or a negative errno. */
int local_dial(const char *address, uint64_t incarnation, uv_os_sock_t *fd);

#endif
