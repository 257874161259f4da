/* A libuv loop on a thread of its own; see loop_thread.h for the happy path and failure modes. */
#include "loop_thread.h"

#include "error.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum phase { PHASE_STARTING, PHASE_RUNNING, PHASE_ENDED };

struct loop_thread {
    uv_loop_t loop;
    uv_async_t wake; /* unreferenced: it never keeps the loop running by itself */
    uv_thread_t tid;
    uv_mutex_t mu;
    uv_cond_t cond;
    const struct loop_thread_ops *ops;
    void *user;
    const char *log_part;
    enum log_level log_level;
    pid_t pid; /* the process that started the thread */

    /* Guarded by mu. */
    enum phase phase;
    int asked;      /* the highest stop level asked for */
    bool wake_open; /* wake may be signalled */
    unsigned waiters;
    int status;
    char msg[SLUICE_ERRMSG_SIZE];

    /* Loop thread only. */
    int delivered; /* the highest stop level ops->stop has seen */
};

/* ---- forked children --------------------------------------------------------------------- */

/* The process that first spawned a thread here. libuv's exit destructor (uv_library_shutdown)
 * joins the threads of its work pool, which a forked child does not have: a child of a process
 * whose pool ran (a dispatcher plans jobs there, a client resolves names there) would crash on
 * exit. libuv resets the pool's start in the child, so one piece of work on a loop of the child's
 * own starts a pool of the child's, which the destructor then joins. An atexit handler does that
 * in a child; it runs before the destructors of shared libraries. */
static pid_t spawner_pid;
static pthread_once_t exit_guard_once = PTHREAD_ONCE_INIT;

static void pool_noop(uv_work_t *w)
{
    (void)w;
}

static void restart_pool_in_child(void)
{
    if (getpid() == spawner_pid)
        return;
    uv_loop_t loop;
    uv_work_t w;
    if (uv_loop_init(&loop) != 0)
        return;
    if (uv_queue_work(&loop, &w, pool_noop, NULL) == 0)
        uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

static void exit_guard_install(void)
{
    spawner_pid = getpid();
    (void)atexit(restart_pool_in_child);
}

int loop_thread_spawn(uv_thread_t *tid, void (*entry)(void *arg), void *arg)
{
    pthread_once(&exit_guard_once, exit_guard_install);
    sigset_t all, old;
    sigfillset(&all);
    /* A fault raised by the thread itself must reach its handler (a sanitizer's, a debugger's);
     * blocked, the kernel would kill the process without either seeing it. */
    static const int synchronous[] = {SIGSEGV, SIGBUS, SIGFPE,  SIGILL,
                                      SIGTRAP, SIGSYS, SIGABRT, SIGPROF};
    for (size_t i = 0; i < sizeof synchronous / sizeof synchronous[0]; i++)
        sigdelset(&all, synchronous[i]);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = uv_thread_create(tid, entry, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Records how the loop ended and wakes the waiters. */
static void end(struct loop_thread *lt, int code, const char *msg)
{
    uv_mutex_lock(&lt->mu);
    if (code < 0 && lt->status == 0) {
        lt->status = code;
        snprintf(lt->msg, sizeof lt->msg, "%s", msg);
    }
    lt->phase = PHASE_ENDED;
    uv_cond_broadcast(&lt->cond);
    uv_mutex_unlock(&lt->mu);
}

static void on_wake(uv_async_t *a)
{
    struct loop_thread *lt = a->data;
    uv_mutex_lock(&lt->mu);
    int level = lt->asked;
    uv_mutex_unlock(&lt->mu);
    if (level > lt->delivered) {
        lt->delivered = level;
        lt->ops->stop(lt->user, level);
    }
}

static void thread_main(void *arg)
{
    struct loop_thread *lt = arg;
    char msg[SLUICE_ERRMSG_SIZE] = "";
    log_thread_init(lt->log_part, lt->log_level);
    int rc = uv_loop_init(&lt->loop);
    if (rc < 0) {
        err_set(msg, sizeof msg, rc, "event loop: %s", uv_strerror(rc));
        end(lt, rc, msg);
        return;
    }
    /* An async handle on a live loop cannot fail to initialize. */
    uv_async_init(&lt->loop, &lt->wake, on_wake);
    lt->wake.data = lt;
    uv_unref((uv_handle_t *)&lt->wake);

    rc = lt->ops->start(lt, &lt->loop, lt->user, msg, sizeof msg);
    if (rc < 0) {
        uv_close((uv_handle_t *)&lt->wake, NULL);
        uv_run(&lt->loop, UV_RUN_DEFAULT);
        uv_loop_close(&lt->loop);
        end(lt, rc, msg[0] ? msg : sluice_strerror(rc));
        return;
    }
    uv_mutex_lock(&lt->mu);
    lt->phase = PHASE_RUNNING;
    lt->wake_open = true;
    uv_cond_broadcast(&lt->cond);
    uv_mutex_unlock(&lt->mu);

    uv_run(&lt->loop, UV_RUN_DEFAULT);

    /* The server has closed every handle; nobody may signal wake once it is closing. */
    uv_mutex_lock(&lt->mu);
    lt->wake_open = false;
    uv_mutex_unlock(&lt->mu);
    uv_close((uv_handle_t *)&lt->wake, NULL);
    uv_run(&lt->loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&lt->loop);
    if (rc < 0)
        err_set(msg, sizeof msg, rc, "shutdown: %s", uv_strerror(rc));
    end(lt, rc, msg);
}

int loop_thread_start(const struct loop_thread_ops *ops, void *user, const char *log_part,
                      enum log_level log_level, struct loop_thread **out, char *err, size_t errlen)
{
    struct loop_thread *lt = calloc(1, sizeof *lt);
    if (!lt)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "start: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    lt->ops = ops;
    lt->user = user;
    lt->log_part = log_part;
    lt->log_level = log_level;
    lt->phase = PHASE_STARTING;
    lt->pid = getpid();
    int rc = uv_mutex_init(&lt->mu);
    if (rc < 0) {
        err_set(err, errlen, rc, "start: mutex: %s", uv_strerror(rc));
        goto fail_free;
    }
    rc = uv_cond_init(&lt->cond);
    if (rc < 0) {
        err_set(err, errlen, rc, "start: condition variable: %s", uv_strerror(rc));
        goto fail_mutex;
    }
    rc = loop_thread_spawn(&lt->tid, thread_main, lt);
    if (rc < 0) {
        err_set(err, errlen, rc, "start: thread: %s", uv_strerror(rc));
        goto fail_cond;
    }
    uv_mutex_lock(&lt->mu);
    while (lt->phase == PHASE_STARTING)
        uv_cond_wait(&lt->cond, &lt->mu);
    bool failed = lt->phase == PHASE_ENDED;
    uv_mutex_unlock(&lt->mu);
    if (failed) {
        uv_thread_join(&lt->tid);
        rc = err_set(err, errlen, lt->status, "%s", lt->msg);
        goto fail_cond;
    }
    *out = lt;
    return 0;

fail_cond:
    uv_cond_destroy(&lt->cond);
fail_mutex:
    uv_mutex_destroy(&lt->mu);
fail_free:
    free(lt);
    return rc;
}

bool loop_thread_owned(const struct loop_thread *lt)
{
    return getpid() == lt->pid;
}

void loop_thread_stop(struct loop_thread *lt, int level)
{
    if (!loop_thread_owned(lt))
        return;
    uv_mutex_lock(&lt->mu);
    if (lt->wake_open && level > lt->asked) {
        lt->asked = level;
        uv_async_send(&lt->wake);
    }
    uv_mutex_unlock(&lt->mu);
}

void loop_thread_fail(struct loop_thread *lt, int code, const char *msg)
{
    assert(code < 0);
    uv_mutex_lock(&lt->mu);
    if (lt->status == 0) {
        lt->status = code;
        snprintf(lt->msg, sizeof lt->msg, "%s", msg);
    }
    uv_mutex_unlock(&lt->mu);
}

int loop_thread_wait(struct loop_thread *lt, uint32_t timeout_ms, char *err, size_t errlen)
{
    if (!loop_thread_owned(lt))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the server runs in process %ld, not in this one (a forked child)",
                       (long)lt->pid);
    uint64_t deadline = uv_hrtime() + (uint64_t)timeout_ms * 1000000u;
    uv_mutex_lock(&lt->mu);
    lt->waiters++;
    while (lt->phase != PHASE_ENDED) {
        if (timeout_ms == 0) {
            uv_cond_wait(&lt->cond, &lt->mu);
            continue;
        }
        uint64_t now = uv_hrtime();
        if (now >= deadline)
            break;
        uv_cond_timedwait(&lt->cond, &lt->mu, deadline - now);
    }
    int rc;
    if (lt->phase != PHASE_ENDED)
        rc = err_set(err, errlen, SLUICE_ERR_TIMEOUT, "still running after %" PRIu32 " ms",
                     timeout_ms);
    else if (lt->status < 0)
        rc = err_set(err, errlen, lt->status, "%s", lt->msg);
    else
        rc = err_set(err, errlen, 0, "%s", "");
    if (--lt->waiters == 0)
        uv_cond_broadcast(&lt->cond);
    uv_mutex_unlock(&lt->mu);
    return rc;
}

void loop_thread_free(struct loop_thread *lt)
{
    /* A forked child has a copy of lt but no loop thread, and a lock another thread held at
     * the fork stays held: nothing here is the child's to touch. */
    if (!loop_thread_owned(lt))
        return;
    uv_mutex_lock(&lt->mu);
    while (lt->phase != PHASE_ENDED || lt->waiters > 0)
        uv_cond_wait(&lt->cond, &lt->mu);
    uv_mutex_unlock(&lt->mu);
    uv_thread_join(&lt->tid);
    uv_cond_destroy(&lt->cond);
    uv_mutex_destroy(&lt->mu);
    free(lt);
}
