/* The waits of a command: a blocking client call (register, status, opening a read) watched by
 * a thread that says what the call waits for once the wait grows long, and the texts every
 * waiting command prints. The reason and the due times come from src/client/waiting.h. */
#ifndef SLUICE_CLI_WAIT_H
#define SLUICE_CLI_WAIT_H

#include "sluice/sluice.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sluice_client;

/* How often the watcher asks the client why it waits. */
#define CLI_WAIT_POLL_MS 100

struct cli_wait {
    struct sluice_client *client;
    uint32_t timeout_ms; /* the command's --timeout-ms, for the notes */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool stop;                     /* guarded by mu */
    char last[SLUICE_ERRMSG_SIZE]; /* the last reason the client gave; guarded by mu */
};

/* Starts watching client: from now until cli_wait_stop, the reason of a wait is printed on
 * stderr after 2 s and every 10 s (see cli_wait_note) while something stands in the way. Returns 0
 * or -1 (no thread; the call then goes unwatched). */
int cli_wait_start(struct cli_wait *w, struct sluice_client *client, uint32_t timeout_ms);
/* Stops and joins the watcher. Safe after a failed start. */
void cli_wait_stop(struct cli_wait *w);
/* Prints the failure rc/err of the watched call as "sluice: WHAT: ..." on stderr: a timeout with
 * the reason the wait had, "no progress for N ms: REASON"; anything else as err says. */
void cli_wait_error(struct cli_wait *w, const char *what, int rc, const char *err);

/* Prints "sluice: REASON (retrying; ...)" on stderr (wait_note_format). */
void cli_wait_note(const char *reason, uint32_t timeout_ms);

/* Milliseconds of the monotonic clock. */
uint64_t cli_now_ms(void);

#endif
