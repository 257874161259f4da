/* SIGINT and SIGTERM for the server binaries, whose servers run on threads of their own
 * (include/sluice/server.h): main blocks both before it starts anything, so every thread
 * inherits the mask, and one thread takes them with sigwait and turns them into calls on the
 * server.
 *
 * A signal the handler has dealt with may be released: from then on it has its default effect
 * and ends the process, so a second SIGTERM or SIGINT still ends a server that is slow to stop.
 * Threading: signals_start and signals_stop on the main thread; the handler runs on the signal
 * thread, never at the same time as signals_stop. */
#ifndef SLUICE_COMMON_SIGNALS_H
#define SLUICE_COMMON_SIGNALS_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

/* Handles signum (SIGINT or SIGTERM) and returns the signals to release: a mask of
 * SIGNALS_INT and SIGNALS_TERM. */
typedef int (*signals_cb)(void *user, int signum);

#define SIGNALS_INT 1
#define SIGNALS_TERM 2

struct signals {
    pthread_mutex_t mu;
    pthread_t thread;
    signals_cb cb; /* NULL once signals_stop ran */
    void *user;
    sigset_t waiting; /* the signals still taken by the thread */
};

/* Blocks SIGINT and SIGTERM in the calling thread. Call at the top of main, before any thread
 * exists. */
void signals_block(void);

/* Starts the signal thread. s must live until the process ends (the thread is never joined; it
 * ends with the process). Returns 0 or a negative errno. */
int signals_start(struct signals *s, signals_cb cb, void *user);

/* After it returns, cb is never called again (a signal that comes later is only released). Call
 * it before freeing what cb uses. */
void signals_stop(struct signals *s);

#endif
