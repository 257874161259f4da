/* A worker's producer pool: a fixed number of threads that run jobs (a task's producers, task.h)
 * in slices, taking them from one run queue (docs/design.md §4: a worker's threads).
 *
 * Happy path: pool_create() starts the threads. A job is made runnable with pool_wake(); a free
 * thread takes a runnable job and calls job->run, which does a bounded amount of work
 * (a slice) and says what comes next: POOL_YIELD (runnable again: queued at the tail, so jobs
 * share the threads in turn), POOL_PARK (it waits for something, and whoever provides it calls
 * pool_wake; a wake that comes while the slice still runs queues the job again as soon as the
 * slice returns, so no wake is lost) or POOL_DONE (finished: the pool never touches the job
 * again, so the slice may end by handing its memory over to be freed). pool_destroy() joins the
 * threads at the worker's shutdown.
 *
 * Failure modes: a slice that never returns (a pipeline function that neither returns nor
 * notices cancellation) would hold its thread for good: pool_retire() gives the thread up to
 * that job (it is detached and exits once the slice returns, or with the process) and starts
 * another in its place, so the pool keeps its size. pool_create() fails when no thread can be
 * started; pool_retire() keeps the pool one thread short when a replacement cannot be started.
 *
 * Threading: pool_wake() may be called from any thread, with any lock held that a slice takes
 * only before it returns (a task's mutex): the pool's own mutex is taken last and never held while
 * a slice runs. pool_create(), pool_retire() and pool_destroy() are called by the pool's owner
 * (the worker's loop thread). */
#ifndef SLUICE_WORKER_POOL_H
#define SLUICE_WORKER_POOL_H

#include "fair.h"

#include <stdbool.h>
#include <stdint.h>

/* The most threads a pool may have (--threads). */
#define POOL_MAX_THREADS 4096u

struct pool;

enum pool_slice {
    POOL_YIELD, /* still runnable: queued again at the tail */
    POOL_PARK,  /* waits for pool_wake (queued again at once if woken during the slice) */
    POOL_DONE,  /* finished: the pool never touches the job again */
};

/* A job, embedded in its owner (a task's producer); zero-initialized before its first
 * pool_wake, then owned by the pool until its run returns POOL_DONE. */
struct pool_job {
    /* One slice of the job, on one of the pool's threads. */
    enum pool_slice (*run)(struct pool_job *job);
    /* The share its slices' thread time is charged to (fair.h), set before its first pool_wake
     * and outliving every slice of the job but one that returns POOL_DONE; NULL: none (it goes
     * before every job of a share). */
    struct fair_share *share;
    /* The pool's, under its mutex. */
    struct pool_job *next;
    unsigned state;
};

/* Starts a pool of nthreads (1 to POOL_MAX_THREADS) threads. Returns 0 and *out, or a negative
 * code (a thread could not be started: nothing is left running). */
int pool_create(unsigned nthreads, struct pool **out);

/* The number of threads the pool keeps (those retired not counted). */
unsigned pool_size(const struct pool *pl);

/* Any thread. Makes job runnable: queued at the tail when it is neither queued nor running; when
 * its slice is running, queued again once that slice returns (even if it parks); nothing when it
 * is queued already. Never call it for a job whose run has returned POOL_DONE. */
void pool_wake(struct pool *pl, struct pool_job *job);

/* Any thread. The thread time the slices of share's jobs took so far (fair_share.busy_ns, read
 * under the pool's mutex). */
uint64_t pool_share_busy_ns(struct pool *pl, const struct fair_share *share);

/* Owner. When job's slice is running, its thread is given up to it: detached, it exits once the
 * slice returns, and a new thread takes its place in the pool. Returns 1 when a thread was
 * retired, 0 when the job was not running, or a negative code when no replacement could be
 * started (the thread is retired all the same). */
int pool_retire(struct pool *pl, struct pool_job *job);

/* Owner. Stops the threads and joins them (their slices must have returned: no job running but
 * those whose thread was retired), then frees the pool once the last retired thread is gone.
 * Jobs still queued are not run. NULL does nothing. */
void pool_destroy(struct pool *pl);

#endif
