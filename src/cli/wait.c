#include "wait.h"

#include "cli.h"

#include "client/waiting.h"
#include "sluice/sluice.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

uint64_t cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void cli_wait_note(const char *reason, uint32_t timeout_ms)
{
    char line[1024];
    wait_note_format(line, sizeof line, reason, timeout_ms);
    fprintf(stderr, "sluice: %s\n", line);
    fflush(stderr);
}

static void *watch(void *arg)
{
    struct cli_wait *w = arg;
    uint64_t start = cli_now_ms();
    unsigned printed = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += CLI_WAIT_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cond, &w->mu, &ts);
        if (w->stop)
            break;
        pthread_mutex_unlock(&w->mu);
        char why[SLUICE_ERRMSG_SIZE];
        int rc = sluice_client_waiting(w->client, why, sizeof why);
        bool due = rc == 1 && wait_note_due(cli_now_ms() - start, printed);
        if (due) {
            cli_wait_note(why, w->timeout_ms);
            printed++;
        }
        pthread_mutex_lock(&w->mu);
        if (rc > 0)
            snprintf(w->last, sizeof w->last, "%s", why);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int cli_wait_start(struct cli_wait *w, struct sluice_client *client, uint32_t timeout_ms)
{
    memset(w, 0, sizeof *w);
    w->client = client;
    w->timeout_ms = timeout_ms;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond, NULL);
    if (pthread_create(&w->thread, NULL, watch, w) != 0) {
        w->client = NULL;
        return -1;
    }
    return 0;
}

void cli_wait_stop(struct cli_wait *w)
{
    if (!w->client)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
    w->client = NULL;
}

void cli_wait_error(struct cli_wait *w, const char *what, int rc, const char *err)
{
    const char *msg = err && *err ? err : sluice_strerror(rc);
    if (rc == SLUICE_ERR_TIMEOUT && w->last[0] && w->timeout_ms)
        cli_error(what, "no progress for %" PRIu32 " ms: %s", w->timeout_ms, w->last);
    else
        cli_error(what, "%s", msg);
}
