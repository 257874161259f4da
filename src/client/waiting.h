/* What a waiting client waits for, as one line, and when a command says it. Pure: no I/O, no
 * clock, no locking; any thread may call these. The client's loop thread gathers the facts
 * (client.c, iterator_wait.c) and the commands print the line (src/cli/wait.c). */
#ifndef SLUICE_CLIENT_WAITING_H
#define SLUICE_CLIENT_WAITING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first note after this long without progress, then one every WAIT_NOTE_EVERY_MS. */
#define WAIT_NOTE_FIRST_MS 2000
#define WAIT_NOTE_EVERY_MS 10000

/* What the client knows. Strings are borrowed; NULL and "" mean none. */
struct wait_facts {
    const char *dispatcher; /* its address, as given */
    bool disp_down;         /* not connected, or its last answer failed (a transient failure) */
    const char *disp_why;   /* why: the connection's failure or the last call's */
    bool disp_busy;         /* a call to the dispatcher is under way */
    /* A read (sluice_iterator_waiting); the fields below count only when read is true. */
    bool read;
    uint64_t job_id;
    const char *failed; /* the read failed with this message */
    bool have_list;     /* the dispatcher's task list arrived at least once */
    size_t active;      /* listed tasks that have not ended */
    size_t ended;       /* listed tasks that have ended */
    const char *worker; /* a listed task's worker whose last request failed */
    const char *worker_why;
    uint64_t cut; /* copies cut short so far by the loss of their workers */
    /* The dispatcher's reason the job has no task (its worker selector matches no worker). */
    const char *no_worker_why;
    /* Coordinated reads (consumers > 0): the round the read needs next, and whether its task is
     * being asked for it (else the read waits for the dispatcher's grant or schedule). */
    uint32_t consumers;
    uint64_t round;
    bool round_asked;
    uint64_t round_task;
};

/* Writes the reason of the wait to buf (len bytes, NUL-terminated, truncated) and returns 1 when
 * something stands in the way (worth telling a user who waits), 2 when the wait is the ordinary
 * kind (marked "ordinary" below: workers producing, the read starting or ending), or writes ""
 * and returns 0 when there is nothing to wait for. The reasons, first that applies:
 *   the read failed:            the failure's message
 *   the dispatcher is away:     "waiting for dispatcher H:P: WHY" (WHY "connecting" when unknown)
 *   no task list yet:           "job N: waiting for the dispatcher's task list" (ordinary)
 *   no task, and the dispatcher says why: "job N: " and its reason ("waiting for a worker
 *                               matching pool=bigmem (none of 3 workers match)")
 *   no task at all:             "job N: no worker registered yet", or after workers were lost
 *                               "job N: no worker left (K copies cut short); waiting for a
 *                               worker to register"
 *   a worker does not answer:   "waiting for worker H:P: WHY"
 *   every task ended:           "job N: waiting for the dispatcher to end the read" (ordinary)
 *   coordinated, task asked:    "job N: waiting for round R from task T, which serves a round
 *                               once all C consumers ask for it" (ordinary)
 *   coordinated, no task asked: "job N: waiting for the dispatcher to schedule round R"
 *                               (ordinary)
 *   tasks run:                  "job N: waiting for elements from K worker(s)" (ordinary)
 *   (not a read) a call is out: "waiting for dispatcher H:P to answer" */
int wait_reason(const struct wait_facts *f, char *buf, size_t len);

/* Whether a command that made no progress for waited_ms, and printed `printed` notes since its
 * last progress, prints another now: at WAIT_NOTE_FIRST_MS, then every WAIT_NOTE_EVERY_MS. */
bool wait_note_due(uint64_t waited_ms, unsigned printed);

/* The note a command prints (without the "sluice: " prefix): the reason and what happens next,
 * "REASON (DOING; --timeout-ms to give up)" without a timeout, else "REASON (DOING; giving up
 * after N ms without progress)", DOING "retrying" when a dispatcher or worker cannot be reached
 * and "still waiting" otherwise. */
void wait_note_format(char *buf, size_t len, const char *reason, uint32_t timeout_ms);

#endif
