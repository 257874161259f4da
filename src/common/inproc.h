/* In-process connections (docs/reading.md "Local workers"): servers running in this process (an
 * embedded worker, sluice_worker_start) register under the address they advertise and their
 * incarnation, and a client in the same process that would dial that address gets a connected
 * socket pair instead of a TCP connection: one end is handed to the server, which serves it as one
 * more accepted connection (the same handshake, token check, TLS and request handling), the other
 * is the client's. Nothing is bound or listening, so no other process can reach it; the ends are
 * close-on-exec.
 *
 * Large payloads skip even the socket: each pair shares a link, a queue of payload blocks. The
 * server's end puts a GetElementsReply's payload (gathered once into a block) on the link and
 * writes only the reply's envelope, with an empty payload, on the socket; the client's end takes
 * the block off the link when that envelope arrives, and the reader keeps the block as its
 * elements. Both ends write and read in order, so the n-th such envelope finds the n-th block
 * (conn.h). Nothing but this process's own two ends ever sees the socket, so no peer can forge
 * an envelope that takes a block.
 *
 * Only the process that registered a server finds it: a child forked from it (a DataLoader's
 * worker process) inherits the table but not the server's threads, and dials over TCP.
 *
 * Thread-safe: a mutex guards the registry; the accept callback runs under it, so once
 * inproc_unregister returns the callback never runs again. */
#ifndef SLUICE_COMMON_INPROC_H
#define SLUICE_COMMON_INPROC_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct inproc_link;

/* Takes one accepted end (fd) and a reference to its link on the server's behalf. Called on the
 * dialling thread with the registry's lock held: it must only hand them over (a queue and
 * uv_async_send) and return 0, or return a negative code without taking either. */
typedef int (*inproc_accept_cb)(void *user, uv_os_sock_t fd, struct inproc_link *link);

struct inproc_entry;

/* Registers a server at address (copied) with its incarnation. Returns 0 and *out, or
 * SLUICE_ERR_NOMEM. */
int inproc_register(const char *address, uint64_t incarnation, inproc_accept_cb cb, void *user,
                    struct inproc_entry **out);

/* Takes the entry out of the registry and frees it; NULL is allowed. */
void inproc_unregister(struct inproc_entry *e);

/* Whether a server at address with that incarnation (0: any) runs in this process. */
bool inproc_has(const char *address, uint64_t incarnation);

/* Dials the in-process server at address with that incarnation (0: any): makes a socket pair and
 * its link, hands one end (and a reference to the link) to the server and puts the other in *fd
 * and a reference in *link (the caller's). Returns 0, SLUICE_ERR_NOT_FOUND when no such server
 * is registered, SLUICE_ERR_NOMEM, or a negative errno. */
int inproc_dial(const char *address, uint64_t incarnation, uv_os_sock_t *fd,
                struct inproc_link **link);

/* Drops a reference to a link; the last one frees it with the blocks still queued. NULL is
 * fine. Any thread. */
void inproc_link_unref(struct inproc_link *link);

/* Queues a block (cap bytes allocated, the first len of them the payload); the link owns it
 * from then on. Returns 0 or SLUICE_ERR_NOMEM (the block is still the caller's). Any thread. */
int inproc_link_push(struct inproc_link *link, void *block, size_t cap, size_t len);

/* Takes the oldest queued block: returns true with the block (the caller's from then on), its
 * cap and its len, or false when none is queued. Any thread. */
bool inproc_link_pop(struct inproc_link *link, void **block, size_t *cap, size_t *len);

/* The process's stock of payload blocks (bufpool.h): the server's end takes blocks from it and
 * the reader gives them back once read, so a stream of large replies reuses the same memory.
 * Created on first use and kept for the life of the process; NULL when that failed (out of
 * memory): the ends then use malloc and free. */
struct bufpool *inproc_pool(void);

#endif
