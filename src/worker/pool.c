/* The producer pool (see pool.h): threads taking jobs from one queue under one mutex, the job of
 * the share with the least virtual time first (fair.h), the oldest among equals.
 *
 * A job's state, under the pool's mutex: idle (not queued, not running: new, or parked), queued,
 * running, or running and woken meanwhile (queued again once its slice returns). A thread that
 * was retired finishes its slice, hands the job back like any other thread would, and exits; it
 * holds a reference to the pool, so a pool destroyed meanwhile is freed only by the last of
 * them.
 *
 * Idle threads wait each on a condition of its own, stacked: a job that becomes runnable wakes the
 * thread that went idle last. A producer that parks and resumes thus keeps running on the same
 * thread (its caches and its malloc arena), and the threads the load does not need stay asleep. */
#include "pool.h"

#include "common/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <uv.h>

enum {
    JOB_IDLE = 0,
    JOB_QUEUED,
    JOB_RUNNING,
    JOB_RUNNING_WOKEN,
};

struct pool_thread {
    struct pool_thread *next;
    struct pool *pl;
    uv_thread_t tid;
    uv_cond_t cv;                  /* it waits here while idle */
    struct pool_thread *idle_next; /* below it on the idle stack */
    bool idle;                     /* on the idle stack */
    struct pool_job *job;          /* the job whose slice it runs, or NULL */
    bool retired;
};

struct pool {
    uv_mutex_t mu;
    struct pool_job *head, *tail;
    struct fair_clock clock;
    struct pool_thread *threads; /* every thread not exited, retired ones included */
    struct pool_thread *idle;    /* the idle stack: the thread that went idle last first */
    unsigned size;               /* threads not retired */
    unsigned refs;               /* the owner's, and one per retired thread still running */
    bool stopping;
};

static void pool_free(struct pool *pl)
{
    uv_mutex_destroy(&pl->mu);
    free(pl);
}

/* Wakes the thread that went idle last, if any. Pool mutex held. */
static void wake_one_locked(struct pool *pl)
{
    struct pool_thread *th = pl->idle;
    if (!th)
        return;
    pl->idle = th->idle_next;
    th->idle = false;
    uv_cond_signal(&th->cv);
}

static void thread_free(struct pool_thread *th)
{
    uv_cond_destroy(&th->cv);
    free(th);
}

static void push_locked(struct pool *pl, struct pool_job *job)
{
    job->state = JOB_QUEUED;
    job->next = NULL;
    if (pl->tail)
        pl->tail->next = job;
    else
        pl->head = job;
    pl->tail = job;
    fair_enter(job->share, &pl->clock);
}

/* Takes the queued job to run next off the queue: the first of those whose share goes first
 * (fair_before). A queue holds a few jobs per task, so the scan is short. Pool mutex held. */
static struct pool_job *take_locked(struct pool *pl)
{
    struct pool_job *best = pl->head, *best_prev = NULL;
    for (struct pool_job *prev = pl->head, *j = prev->next; j; prev = j, j = j->next) {
        if (j->share != best->share && fair_before(j->share, best->share)) {
            best = j;
            best_prev = prev;
        }
    }
    if (best_prev)
        best_prev->next = best->next;
    else
        pl->head = best->next;
    if (pl->tail == best)
        pl->tail = best_prev;
    best->next = NULL;
    if (best->share)
        fair_picked(best->share, &pl->clock);
    return best;
}

static void thread_main(void *arg)
{
    struct pool_thread *th = arg;
    struct pool *pl = th->pl;
    uv_mutex_lock(&pl->mu);
    while (!th->retired && !pl->stopping) {
        struct pool_job *job = pl->head;
        if (!job) {
            th->idle = true;
            th->idle_next = pl->idle;
            pl->idle = th;
            while (th->idle && !pl->stopping)
                uv_cond_wait(&th->cv, &pl->mu);
            continue;
        }
        job = take_locked(pl);
        job->state = JOB_RUNNING;
        th->job = job;
        uv_mutex_unlock(&pl->mu);
        uint64_t start = uv_hrtime();
        enum pool_slice r = job->run(job);
        uint64_t took = r == POOL_DONE ? 0 : uv_hrtime() - start;
        uv_mutex_lock(&pl->mu);
        th->job = NULL;
        if (r == POOL_DONE)
            continue; /* the job, and its share, may be gone already */
        if (r == POOL_YIELD || job->state == JOB_RUNNING_WOKEN) {
            /* Queued again before it is charged, so its share stays active throughout. */
            push_locked(pl, job);
            /* This thread takes a job next; another one only if another is queued. */
            if (pl->head != job)
                wake_one_locked(pl);
        } else {
            job->state = JOB_IDLE;
        }
        fair_charge(job->share, took);
    }
    if (!th->retired) {
        uv_mutex_unlock(&pl->mu);
        return; /* pool_destroy joins it and frees th */
    }
    /* Retired (and detached): nobody joins it; it unlinks and frees itself. */
    struct pool_thread **pp = &pl->threads;
    while (*pp != th)
        pp = &(*pp)->next;
    *pp = th->next;
    thread_free(th);
    bool last = --pl->refs == 0;
    uv_mutex_unlock(&pl->mu);
    if (last)
        pool_free(pl);
}

/* Starts one more thread. Pool mutex held. */
static int spawn_locked(struct pool *pl)
{
    struct pool_thread *th = calloc(1, sizeof *th);
    if (!th)
        return SLUICE_ERR_NOMEM;
    th->pl = pl;
    if (uv_cond_init(&th->cv) != 0) {
        free(th);
        return SLUICE_ERR_NOMEM;
    }
    int rc = uv_thread_create(&th->tid, thread_main, th);
    if (rc != 0) {
        thread_free(th);
        return rc;
    }
    th->next = pl->threads;
    pl->threads = th;
    pl->size++;
    return 0;
}

int pool_create(unsigned nthreads, struct pool **out)
{
    if (nthreads == 0 || nthreads > POOL_MAX_THREADS)
        return SLUICE_ERR_INVALID;
    struct pool *pl = calloc(1, sizeof *pl);
    if (!pl)
        return SLUICE_ERR_NOMEM;
    if (uv_mutex_init(&pl->mu) != 0) {
        free(pl);
        return SLUICE_ERR_NOMEM;
    }
    pl->refs = 1;
    int rc = 0;
    uv_mutex_lock(&pl->mu);
    for (unsigned i = 0; i < nthreads && rc == 0; i++)
        rc = spawn_locked(pl);
    uv_mutex_unlock(&pl->mu);
    if (rc < 0) {
        pool_destroy(pl);
        return rc;
    }
    *out = pl;
    return 0;
}

unsigned pool_size(const struct pool *pl)
{
    return pl->size; /* written only by the owner's calls */
}

void pool_wake(struct pool *pl, struct pool_job *job)
{
    uv_mutex_lock(&pl->mu);
    switch (job->state) {
    case JOB_IDLE:
        push_locked(pl, job);
        wake_one_locked(pl);
        break;
    case JOB_RUNNING:
        job->state = JOB_RUNNING_WOKEN;
        break;
    default: /* queued, or queued again once its slice returns */
        break;
    }
    uv_mutex_unlock(&pl->mu);
}

uint64_t pool_share_busy_ns(struct pool *pl, const struct fair_share *share)
{
    uv_mutex_lock(&pl->mu);
    uint64_t ns = share->busy_ns;
    uv_mutex_unlock(&pl->mu);
    return ns;
}

int pool_retire(struct pool *pl, struct pool_job *job)
{
    int rc = 0;
    uv_mutex_lock(&pl->mu);
    struct pool_thread *th = pl->threads;
    while (th && (th->retired || th->job != job))
        th = th->next;
    if (th) {
        th->retired = true;
        pl->size--;
        pl->refs++;
        pthread_detach(th->tid);
        rc = spawn_locked(pl);
        if (rc == 0)
            rc = 1;
    }
    uv_mutex_unlock(&pl->mu);
    return rc;
}

void pool_destroy(struct pool *pl)
{
    if (!pl)
        return;
    uv_mutex_lock(&pl->mu);
    pl->stopping = true;
    pl->idle = NULL; /* nobody is woken from here on: the threads below are about to go */
    for (struct pool_thread *th = pl->threads; th; th = th->next)
        uv_cond_signal(&th->cv);
    /* The threads not retired are joined here; a retired one unlinks itself when it exits. */
    struct pool_thread *mine = NULL, **pp = &pl->threads;
    while (*pp) {
        struct pool_thread *th = *pp;
        if (th->retired) {
            pp = &th->next;
            continue;
        }
        *pp = th->next;
        th->next = mine;
        mine = th;
    }
    pl->size = 0;
    uv_mutex_unlock(&pl->mu);
    while (mine) {
        struct pool_thread *th = mine;
        mine = th->next;
        uv_thread_join(&th->tid);
        thread_free(th);
    }
    uv_mutex_lock(&pl->mu);
    bool last = --pl->refs == 0;
    uv_mutex_unlock(&pl->mu);
    if (last)
        pool_free(pl);
}
