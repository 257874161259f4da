/* A libuv loop on a thread of its own: the shell around each embeddable server
 * (include/sluice/server.h), so that several dispatchers and workers can live in one process.
 *
 * Happy path: loop_thread_start() spawns the thread, which sets its log part and level
 * (log_thread_init), initializes a loop and calls ops->start on it while the caller waits. Once
 * start returned 0 the loop runs until every handle the server holds is closed. From any thread,
 * loop_thread_stop() asks for a stop: ops->stop runs on the loop thread with the level asked for;
 * a higher level may follow a lower one (a drain, then "now"), the same or a lower one is
 * ignored. loop_thread_wait() waits, with a timeout, until the loop has ended, from any number of
 * threads at once; loop_thread_free() then joins the thread and frees everything.
 *
 * Failure modes: a start that fails leaves nothing behind: the loop is run until the handles the
 * failed start left closing are closed, the loop is closed, the thread joined, and the code and
 * message of the failure returned. A server that fails while running reports it with
 * loop_thread_fail() on the loop thread and closes its handles; loop_thread_wait() returns that
 * code and message. A loop that still has handles when it ends (a bug) makes loop_thread_wait()
 * return "shutdown: <why>".
 *
 * Signals: the thread runs with every asynchronous signal blocked (loop_thread_spawn), and so
 * does every thread it starts (pipeline producers, the journal thread). The host process's
 * signals thus reach its own threads, and a write to a peer that vanished costs the writer
 * EPIPE instead of ending the process with SIGPIPE, whatever the host does with SIGPIPE. */
#ifndef SLUICE_COMMON_LOOP_THREAD_H
#define SLUICE_COMMON_LOOP_THREAD_H

#include "common/log.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct loop_thread;

struct loop_thread_ops {
    /* Runs on the new thread: starts the server on loop. Returns 0, or a negative code with a
     * message in err; after a failure the handles it started must be closing (the loop is run
     * until they are). lt is the thread's handle, for loop_thread_fail later. */
    int (*start)(struct loop_thread *lt, uv_loop_t *loop, void *user, char *err, size_t errlen);
    /* Runs on the loop thread when a stop at a higher level than before was asked for: begins
     * closing the server (gracefully at level 1, at once at level 2). The loop ends once every
     * handle is closed. */
    void (*stop)(void *user, int level);
};

/* Starts the thread and waits for ops->start. Returns 0 and *out, or ops->start's code and
 * message (or a thread or loop failure) with nothing left running. log_part must outlive the
 * thread. Any thread. */
int loop_thread_start(const struct loop_thread_ops *ops, void *user, const char *log_part,
                      enum log_level log_level, struct loop_thread **out, char *err, size_t errlen);

/* Whether the calling process is the one that started lt. A child forked from it has a copy of
 * lt but not its thread (fork copies only the forking thread): there loop_thread_stop() and
 * loop_thread_free() do nothing (lt and what the server holds are left as they are: the child's
 * copy of a lock another thread held at the fork stays held), and loop_thread_wait() returns
 * SLUICE_ERR_INVALID at once. Any thread. */
bool loop_thread_owned(const struct loop_thread *lt);

/* Asks for a stop at level (1 or 2) and returns at once; ops->stop follows on the loop thread,
 * unless the loop already ended. Any thread; not after loop_thread_free. */
void loop_thread_stop(struct loop_thread *lt, int level);

/* Records the failure that is ending the server (the first one counts). Loop thread only. */
void loop_thread_fail(struct loop_thread *lt, int code, const char *msg);

/* Waits until the loop has ended, at most timeout_ms (0: without limit). Returns 0 after a clean
 * end, SLUICE_ERR_TIMEOUT when the time ran out (the server still runs), or the code of the
 * failure that ended it, with its message in err. Any thread, several at once; not after
 * loop_thread_free. */
int loop_thread_wait(struct loop_thread *lt, uint32_t timeout_ms, char *err, size_t errlen);

/* Waits until the loop has ended and every loop_thread_wait has returned, joins the thread and
 * frees lt. Does not ask for a stop. Any thread but the loop thread; call once. */
void loop_thread_free(struct loop_thread *lt);

/* Creates a thread (uv_thread_create) that runs with every asynchronous signal blocked; it
 * inherits the mask, and so do the threads it creates. Synchronous fault signals (SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT) and SIGPROF stay deliverable. Returns 0 or
 * a negative errno. The client library's thread is made the same way. */
int loop_thread_spawn(uv_thread_t *tid, void (*entry)(void *arg), void *arg);

#endif
