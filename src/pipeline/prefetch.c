/* prefetch(): a bounded ring between one producer thread and the consumer.
 *
 * Happy path: the thread pulls into its own element, swaps it into the ring's tail slot and
 * signals; the consumer swaps the head slot out into its element and signals back. Failure
 * modes: the upstream ends or fails (the thread records rc, stops, and the consumer returns it
 * once the ring is drained, copying the message into its context); destroy while running (the
 * stop flag and the upstream context's cancel flag make the thread leave within one upstream
 * element, then it is joined). */
#include "prefetch.h"

#include "common/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct prefetch_iter {
    struct pipe_iter base;
    struct pipe_ctx uctx; /* the upstream chain's context */
    struct pipe_iter *up;
    pthread_t thread;
    bool started;

    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    struct sluice_element *ring;
    size_t cap, head, count;
    bool stop;     /* destroy asked the thread to leave */
    bool finished; /* the thread has produced its last element */
    int final_rc;  /* 0 or the upstream's error, valid once finished */
    int rc;        /* consumer side: sticky result after the end */
    bool done;
};

static void *producer(void *arg)
{
    struct prefetch_iter *p = arg;
    struct sluice_element tmp;
    pipe_elem_init(&tmp);
    for (;;) {
        int rc = pipe_next(p->up, &tmp);
        if (rc == 1 && pipe_cancelled(&p->uctx))
            rc = err_set(p->uctx.err, sizeof(p->uctx.err), SLUICE_ERR_CANCELLED, "cancelled");
        pthread_mutex_lock(&p->mu);
        if (rc != 1) {
            p->finished = true;
            p->final_rc = rc;
            pthread_cond_signal(&p->not_empty);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        while (p->count == p->cap && !p->stop)
            pthread_cond_wait(&p->not_full, &p->mu);
        if (p->stop) {
            p->finished = true;
            pthread_mutex_unlock(&p->mu);
            break;
        }
        pipe_elem_swap(&tmp, &p->ring[(p->head + p->count) % p->cap]);
        p->count++;
        pthread_cond_signal(&p->not_empty);
        pthread_mutex_unlock(&p->mu);
    }
    pipe_elem_release(&tmp);
    return NULL;
}

static bool is_prefetch(const struct pipe_iter *it);

/* Waits for an element; deadline NULL waits without limit. */
static int next_until(struct pipe_iter *it, struct sluice_element *out,
                      const struct timespec *deadline)
{
    struct prefetch_iter *p = (struct prefetch_iter *)it;
    if (p->done)
        return p->rc;
    pthread_mutex_lock(&p->mu);
    while (p->count == 0 && !p->finished) {
        if (!deadline) {
            pthread_cond_wait(&p->not_empty, &p->mu);
        } else if (pthread_cond_timedwait(&p->not_empty, &p->mu, deadline) == ETIMEDOUT &&
                   p->count == 0 && !p->finished) {
            pthread_mutex_unlock(&p->mu);
            return SLUICE_ERR_TIMEOUT;
        }
    }
    if (p->count > 0) {
        pipe_elem_swap(out, &p->ring[p->head]);
        p->head = (p->head + 1) % p->cap;
        p->count--;
        pthread_cond_signal(&p->not_full);
        pthread_mutex_unlock(&p->mu);
        return 1;
    }
    int rc = p->final_rc;
    pthread_mutex_unlock(&p->mu);
    /* The thread has finished and wrote its last message before setting finished (under the
     * mutex), so the upstream context is safe to read here. */
    if (rc < 0)
        memcpy(it->ctx->err, p->uctx.err, sizeof(it->ctx->err));
    p->rc = rc < 0 ? rc : 0;
    p->done = true;
    return p->rc;
}

static int prefetch_next(struct pipe_iter *it, struct sluice_element *out)
{
    return next_until(it, out, NULL);
}

int pipe_prefetch_next_timed(struct pipe_iter *it, struct sluice_element *out, uint32_t timeout_ms)
{
    if (!is_prefetch(it))
        return pipe_next(it, out);
    if (timeout_ms == 0)
        return next_until(it, out, NULL);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return next_until(it, out, &ts);
}

static void prefetch_destroy(struct pipe_iter *it)
{
    struct prefetch_iter *p = (struct prefetch_iter *)it;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_signal(&p->not_full);
        pthread_mutex_unlock(&p->mu);
        atomic_store(&p->uctx.cancel, 1);
        pthread_join(p->thread, NULL);
    }
    if (p->up)
        p->up->ops->destroy(p->up);
    for (size_t i = 0; i < p->cap; i++)
        pipe_elem_release(&p->ring[i]);
    free(p->ring);
    pthread_cond_destroy(&p->not_full);
    pthread_cond_destroy(&p->not_empty);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static const struct pipe_iter_ops prefetch_ops = {prefetch_next, prefetch_destroy};

static bool is_prefetch(const struct pipe_iter *it)
{
    return it->ops == &prefetch_ops;
}

int pipe_prefetch_new(int64_t n, struct pipe_ctx *ctx, struct pipe_iter **out,
                      struct pipe_ctx **upstream_ctx)
{
    struct prefetch_iter *p = calloc(1, sizeof(*p));
    if (!p)
        return SLUICE_ERR_NOMEM;
    p->cap = n < 1 ? 1 : (size_t)n;
    if (p->cap > 1 << 20)
        p->cap = 1 << 20; /* a ring larger than this buys nothing but memory */
    p->ring = calloc(p->cap, sizeof(*p->ring));
    if (!p->ring) {
        free(p);
        return SLUICE_ERR_NOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    /* Timed waits measure against the monotonic clock, immune to wall-clock steps. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->not_empty, &attr);
    pthread_condattr_destroy(&attr);
    pthread_cond_init(&p->not_full, NULL);
    p->base.ops = &prefetch_ops;
    p->base.ctx = ctx;
    p->uctx.reg = ctx->reg;
    p->uctx.max_element_bytes = ctx->max_element_bytes;
    p->uctx.prof = ctx->prof;
    p->uctx.parent = ctx;
    atomic_init(&p->uctx.cancel, 0);
    *out = &p->base;
    *upstream_ctx = &p->uctx;
    return 0;
}

int pipe_prefetch_start(struct pipe_iter *it, struct pipe_iter *upstream)
{
    struct prefetch_iter *p = (struct prefetch_iter *)it;
    p->up = upstream;
    int rc = pthread_create(&p->thread, NULL, producer, p);
    if (rc)
        return -rc;
    p->started = true;
    return 0;
}
