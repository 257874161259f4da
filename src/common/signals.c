/* SIGINT and SIGTERM taken on a thread of their own; see signals.h. */
#include "signals.h"

#include <errno.h>
#include <unistd.h>

void signals_block(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Lets the released signals through to this thread, the only one that does not block them, so
 * their default effect ends the process. */
static void release(struct signals *s, int mask)
{
    sigset_t set;
    sigemptyset(&set);
    if (mask & SIGNALS_INT) {
        sigaddset(&set, SIGINT);
        sigdelset(&s->waiting, SIGINT);
    }
    if (mask & SIGNALS_TERM) {
        sigaddset(&set, SIGTERM);
        sigdelset(&s->waiting, SIGTERM);
    }
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static void *thread_main(void *arg)
{
    struct signals *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool empty = !sigismember(&s->waiting, SIGINT) && !sigismember(&s->waiting, SIGTERM);
        sigset_t waiting = s->waiting;
        pthread_mutex_unlock(&s->mu);
        if (empty)
            break;
        int signum;
        if (sigwait(&waiting, &signum) != 0)
            continue;
        pthread_mutex_lock(&s->mu);
        int mask = SIGNALS_INT | SIGNALS_TERM;
        if (s->cb)
            mask = s->cb(s->user, signum);
        release(s, mask);
        pthread_mutex_unlock(&s->mu);
    }
    for (;;)
        pause();
    return NULL;
}

int signals_start(struct signals *s, signals_cb cb, void *user)
{
    s->cb = cb;
    s->user = user;
    sigemptyset(&s->waiting);
    sigaddset(&s->waiting, SIGINT);
    sigaddset(&s->waiting, SIGTERM);
    int rc = pthread_mutex_init(&s->mu, NULL);
    if (rc != 0)
        return -rc;
    rc = pthread_create(&s->thread, NULL, thread_main, s);
    if (rc != 0) {
        pthread_mutex_destroy(&s->mu);
        return -rc;
    }
    return 0;
}

void signals_stop(struct signals *s)
{
    pthread_mutex_lock(&s->mu);
    s->cb = NULL;
    pthread_mutex_unlock(&s->mu);
}
