#include "waiting.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static bool has(const char *s)
{
    return s && *s;
}

int wait_reason(const struct wait_facts *f, char *buf, size_t len)
{
    const char *disp = has(f->dispatcher) ? f->dispatcher : "?";
    if (f->read && has(f->failed)) {
        snprintf(buf, len, "%s", f->failed);
    } else if (f->disp_down) {
        snprintf(buf, len, "waiting for dispatcher %s: %s", disp,
                 has(f->disp_why) ? f->disp_why : "connecting");
    } else if (!f->read) {
        if (!f->disp_busy) {
            if (len)
                buf[0] = '\0';
            return 0;
        }
        snprintf(buf, len, "waiting for dispatcher %s to answer", disp);
    } else if (!f->have_list) {
        snprintf(buf, len, "job %" PRIu64 ": waiting for the dispatcher's task list", f->job_id);
        return 2;
    } else if (f->active == 0 && f->ended == 0 && has(f->no_worker_why)) {
        snprintf(buf, len, "job %" PRIu64 ": %s", f->job_id, f->no_worker_why);
    } else if (f->active == 0 && f->ended == 0 && f->cut > 0) {
        snprintf(buf, len,
                 "job %" PRIu64 ": no worker left (%" PRIu64
                 " cop%s cut short); waiting for a worker to register",
                 f->job_id, f->cut, f->cut == 1 ? "y" : "ies");
    } else if (f->active == 0 && f->ended == 0) {
        snprintf(buf, len, "job %" PRIu64 ": no worker registered yet", f->job_id);
    } else if (has(f->worker)) {
        snprintf(buf, len, "waiting for worker %s: %s", f->worker,
                 has(f->worker_why) ? f->worker_why : "no answer");
    } else if (f->active == 0) {
        snprintf(buf, len, "job %" PRIu64 ": waiting for the dispatcher to end the read",
                 f->job_id);
        return 2;
    } else if (f->consumers > 0 && f->round_asked) {
        /* A round the others never ask for (they stopped, or read one element more than this
         * consumer) is waited for until the timeout: the line says what is needed. */
        snprintf(buf, len,
                 "job %" PRIu64 ": waiting for round %" PRIu64 " from task %" PRIu64
                 ", which serves a round once all %" PRIu32 " consumers ask for it",
                 f->job_id, f->round, f->round_task, f->consumers);
        return 2;
    } else if (f->consumers > 0) {
        snprintf(buf, len, "job %" PRIu64 ": waiting for the dispatcher to schedule round %" PRIu64,
                 f->job_id, f->round);
        return 2;
    } else {
        snprintf(buf, len, "job %" PRIu64 ": waiting for elements from %zu worker%s", f->job_id,
                 f->active, f->active == 1 ? "" : "s");
        return 2;
    }
    return 1;
}

bool wait_note_due(uint64_t waited_ms, unsigned printed)
{
    return waited_ms >= WAIT_NOTE_FIRST_MS + (uint64_t)WAIT_NOTE_EVERY_MS * printed;
}

void wait_note_format(char *buf, size_t len, const char *reason, uint32_t timeout_ms)
{
    /* A peer that cannot be reached is tried again; anything else is waited for. */
    bool peer = strncmp(reason, "waiting for dispatcher ", 23) == 0 ||
                strncmp(reason, "waiting for worker ", 19) == 0;
    const char *doing = peer ? "retrying" : "still waiting";
    if (timeout_ms)
        snprintf(buf, len, "%s (%s; giving up after %" PRIu32 " ms without progress)", reason,
                 doing, timeout_ms);
    else
        snprintf(buf, len, "%s (%s; --timeout-ms to give up)", reason, doing);
}
