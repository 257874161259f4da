/* The task set of one read: the tasks of the iteration this reader fetches elements from, kept in
 * step with the dispatcher's list, and the choice of which task to ask next. Pure: no I/O, no
 * clock (times are passed in, in milliseconds of any monotonic clock), no locking; the iterator's
 * loop thread owns a set.
 *
 * Life of a task: it appears when a heartbeat reply lists it (tasks_reconcile), gets a connection
 * from the shell (the conn field), is asked for elements (tasks_pick, tasks_sent, then
 * tasks_on_reply or tasks_on_failure per request), ends when a reply carries end_of_sequence, and
 * leaves the set when the dispatcher no longer lists it and no request to it is outstanding
 * (tasks_reap). A task that is no longer listed gets no new requests, but the replies already asked
 * for are still taken.
 *
 * Two ways of choosing: by default, round robin over the tasks that may be asked (listed, not
 * ended, connected, fewer than per_task_max requests outstanding, not backing off), so several
 * tasks are fetched from at once. Coordinated reads (num_consumers > 0) follow the round
 * schedule the dispatcher decides (src/dispatcher/state.h, "coordinated reads"), one request at
 * a time: round r is asked of the task the schedule gives it, and the set moves to round r + 1
 * once that task delivered its element of round r.
 *
 * Coordinated reads, precisely. The dispatcher's heartbeat replies carry the schedule (epochs:
 * from its start round, the epoch's tasks serve rounds in turn) and the grant (rounds below it
 * may be read; their schedule never changes). The set reads round r only when r is below the
 * grant, and otherwise waits for a reply that raises it (the shell asks for one at once), so it
 * never guesses at a schedule still being decided. A round whose task is gone — the dispatcher
 * no longer lists it, and no request to it is outstanding — or has ended is skipped: a worker
 * serves a round only while every consumer has a read of it waiting (src/worker/rounds.h), so
 * no consumer got that round, and every consumer skips it alike. An epoch none of whose tasks
 * can serve is skipped to the next epoch; the last one is waited on. A round before the first
 * epoch the dispatcher still keeps means the consumer fell too far behind (TASKS_ROUND_BEHIND).
 *
 * Invariants: v is sorted by id, ids are unique; a task with outstanding requests is never
 * removed; epochs' starts strictly increase. */
#ifndef SLUICE_CLIENT_TASKS_H
#define SLUICE_CLIENT_TASKS_H

#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TASKS_ADDR_MAX 256
#define TASKS_KEY_MAX 16

/* Delays after an empty reply (the worker had nothing buffered yet) and after a failed request;
 * each doubles per consecutive occurrence up to its cap. */
#define TASKS_EMPTY_BASE_MS 1
#define TASKS_EMPTY_MAX_MS 50
#define TASKS_FAIL_BASE_MS 100
#define TASKS_FAIL_MAX_MS 2000

struct tasks_task {
    uint64_t id;
    char address[TASKS_ADDR_MAX]; /* the worker that runs it */
    uint64_t worker_incarnation;
    uint8_t key[TASKS_KEY_MAX]; /* the client's capability for the task, sent with each request */
    size_t key_len;
    void *conn;           /* the shell's connection to the worker; NULL until it attaches one */
    unsigned outstanding; /* requests in flight */
    bool listed;          /* in the dispatcher's latest list */
    bool ended;           /* a reply carried end_of_sequence */
    uint64_t not_before;  /* no request before this time */
    uint32_t empty_streak, fail_streak;
    bool local;         /* its worker is on this reader's host (docs/reading.md "Local workers") */
    uint64_t elements;  /* elements received from it */
    uint64_t listed_at; /* when it first appeared in a list */
    /* Why the last failed request failed (set by the shell, read while fail_streak > 0). */
    char fail_msg[SLUICE_ERRMSG_SIZE];
    /* A failure that ends the read unless a later heartbeat shows the task gone (see
     * tasks_set_error); 0 when none. */
    int error;
    uint64_t error_mark;
    char error_msg[SLUICE_ERRMSG_SIZE];
};

/* One entry of a heartbeat reply's task list. address is borrowed for the call. */
struct tasks_info {
    uint64_t task_id;
    const char *address;
    uint64_t worker_incarnation;
    const uint8_t *key; /* the client's capability for the task (borrowed); NULL when none */
    size_t key_len;
    bool local; /* its worker runs on this reader's host (the shell compares host ids) */
};

/* One epoch of a coordinated read's schedule (a heartbeat reply's RoundEpoch). */
struct tasks_epoch {
    uint64_t start;
    uint64_t *tasks; /* serve order; owned by the set once applied */
    size_t ntasks;
};

/* Where a coordinated read stands (tasks_advance). */
enum tasks_round {
    TASKS_ROUND_TASK,     /* round_task serves the round: ask it */
    TASKS_ROUND_GRANT,    /* the round is not granted yet: wait for a heartbeat reply */
    TASKS_ROUND_SCHEDULE, /* no task serves the round yet: wait for the schedule to change */
    TASKS_ROUND_BEHIND    /* the round lies before every epoch the dispatcher keeps */
};

struct tasks_set {
    struct tasks_task *v;
    size_t n, cap;
    uint64_t turn;         /* the next search starts at the first task with id >= turn */
    bool coordinated;      /* rounds, one request at a time */
    unsigned per_task_max; /* outstanding requests per task (>= 1) */
    /* Target workers (tasks_set_target): only local tasks are taken into the set; local tasks are
     * asked first and may have twice per_task_max requests outstanding. */
    bool local_only, prefer_local;
    bool have_list; /* a task list was applied at least once */
    bool iteration_finished;
    /* Coordinated reads. */
    uint64_t round;      /* the next round to read */
    uint64_t granted;    /* rounds below this may be read */
    uint64_t span;       /* granted - round when the grant last grew */
    uint64_t round_task; /* the task of the round (TASKS_ROUND_TASK) */
    uint64_t skipped;    /* rounds skipped so far (served by no task) */
    enum tasks_round where;
    struct tasks_epoch *epochs;
    size_t nepochs;
    bool have_schedule;
};

/* Initializes an empty set. per_task_max 0 means 1. Coordinated sets ignore per_task_max. */
void tasks_init(struct tasks_set *s, bool coordinated, unsigned per_task_max);
void tasks_release(struct tasks_set *s);

/* Sets which tasks the read takes (docs/reading.md "Local workers"): with local_only,
 * tasks_reconcile leaves every task whose info is not local out of the set (the dispatcher creates
 * a local job's tasks only on its readers' hosts; this guards against a list that says otherwise);
 * with prefer_local, tasks_pick asks a local task whenever one may be asked, and only then another,
 * and a local task may have twice per_task_max requests outstanding. Call before the first
 * tasks_reconcile. Coordinated sets ignore it. */
void tasks_set_target(struct tasks_set *s, bool local_only, bool prefer_local);

/* Applies the dispatcher's current list, received at time now: listed tasks not in the set are
 * added (with conn NULL, for the shell to attach, and listed_at now), tasks in the set but not in
 * the list are marked unlisted (tasks_reap then hands them back once drained), and
 * iteration_finished is recorded. A listed task that is back after being unlisted is listed
 * again and keeps its state. Returns 0, SLUICE_ERR_NOMEM (the set is unchanged), or
 * SLUICE_ERR_INVALID for an address longer than TASKS_ADDR_MAX - 1, a key longer than TASKS_KEY_MAX
 * or a task id listed twice (the set is unchanged). A listed task's key is taken from the list. */
int tasks_reconcile(struct tasks_set *s, const struct tasks_info *infos, size_t n,
                    bool iteration_finished, uint64_t now);

/* Removes one task that is unlisted and has nothing outstanding, copying it to *out so the shell
 * can release its connection. Returns true when a task was removed, false when none qualifies. */
bool tasks_reap(struct tasks_set *s, struct tasks_task *out);

/* The index of task id, or -1. */
long tasks_find(const struct tasks_set *s, uint64_t id);

/* The index of the task to send the next request to at time now, or -1 when none may be asked
 * now. When the only obstacle is a task's backoff, *wake_at receives the earliest time one may be
 * asked (else 0), so the shell can arm a timer. Does not change the set. */
long tasks_pick(const struct tasks_set *s, uint64_t now, uint64_t *wake_at);

/* Coordinated reads: applies the schedule of a heartbeat reply, after its task list
 * (tasks_reconcile): the epochs replace those held (a reply carries every epoch from the one
 * holding the round the consumer reported, so nothing the set still needs is lost), and the grant
 * only grows. Copies epochs. Returns 0, SLUICE_ERR_NOMEM or SLUICE_ERR_INVALID (starts not
 * increasing); the set is unchanged on failure. Call tasks_advance() afterwards. */
int tasks_schedule(struct tasks_set *s, const struct tasks_epoch *epochs, size_t n,
                   uint64_t granted);

/* Coordinated reads: moves the round past rounds no task will serve (see above), and records
 * and returns where the read stands (s->where; s->round_task for TASKS_ROUND_TASK). Call it after
 * every change of the set (a reply, a list, a schedule, a reap). */
enum tasks_round tasks_advance(struct tasks_set *s);

/* Records that a request to task i was sent. */
void tasks_sent(struct tasks_set *s, size_t i);

/* Records a reply from task i: count elements, end_of_sequence eos. An empty reply that is not
 * the end makes the task back off briefly; a reply with elements clears the backoff and, in
 * coordinated reads, moves to the next round. */
void tasks_on_reply(struct tasks_set *s, size_t i, uint32_t count, bool eos, uint64_t now);

/* Records a failed request to task i (a worker unreachable or not knowing the task yet): the task
 * backs off, longer with every consecutive failure, and is asked again later. */
void tasks_on_failure(struct tasks_set *s, size_t i, uint64_t now);

/* Holds task i back until time until for a reason of the shell's (its worker's shared region has
 * no room for a reply yet): tasks_pick skips it meanwhile, picks the others, and reports until in
 * wake_at when nothing else may be asked. Its failure and empty-reply streaks are untouched. */
void tasks_defer(struct tasks_set *s, size_t i, uint64_t until);

/* Records a failure of task i that should end the read only if the dispatcher still lists the
 * task afterwards: a worker answering that it does not know a task may have restarted, or the
 * dispatcher may have dropped the task, and the next task list tells. mark identifies the
 * latest heartbeat sent so far (a count); a reply to a later heartbeat confirms the failure. The
 * first error is kept; a reply with elements or the end clears it. msg is copied (truncated). */
void tasks_set_error(struct tasks_set *s, size_t i, int code, const char *msg, uint64_t mark);

/* The index of a listed task whose error is confirmed by the reply to heartbeat number seq
 * (seq > its mark), or -1. */
long tasks_confirmed_error(const struct tasks_set *s, uint64_t seq);

/* True when the read is over: the dispatcher said the iteration is finished, every listed task
 * has ended, and no request to any task, listed or not, is outstanding. */
bool tasks_done(const struct tasks_set *s);

/* True when some task the dispatcher no longer lists is still in the set (a request to it is
 * outstanding, so tasks_reap has not handed it back yet). */
bool tasks_unlisted(const struct tasks_set *s);

/* True when some listed task has not ended (the read can progress without the dispatcher). */
bool tasks_active(const struct tasks_set *s);

/* True when at least one task is listed and every listed task has ended: what a read of whole
 * copies can take for its end while the dispatcher is away. An empty list (a job still waiting
 * for a worker) is not an end. */
bool tasks_all_ended(const struct tasks_set *s);

/* Writes the ids of the ended tasks (at most max) to out and returns how many there are (which
 * may exceed max). */
size_t tasks_finished_ids(const struct tasks_set *s, uint64_t *out, size_t max);

/* Exact accounting of a copy read whole (parallel_epochs and the static sharding modes, not in
 * rounds): a task's end of sequence says how many elements its worker sent this reader in all
 * (delivered). Returns 0 when the task's received count is exactly that, else
 * SLUICE_ERR_TRUNCATED with "task 3 on worker HOST:PORT: received 155040 of 200000 elements"
 * in msg: elements sent to this reader that never reached it. */
int tasks_check_end(const struct tasks_task *t, uint64_t delivered, char *msg, size_t len);

/* The same reads: a task that leaves the set (tasks_reap) without having ended, after it sent
 * elements, left this reader a part of its copy: its worker was lost (killed, evicted, restarted)
 * in the middle. Returns 0 when that is not the case, else SLUICE_ERR_TRUNCATED with "task 3 on
 * worker HOST:PORT: the worker was lost after 5120 elements: its copy is incomplete" in msg. A
 * task that sent nothing left nothing half-read and is not reported. */
int tasks_check_gone(const struct tasks_task *t, char *msg, size_t len);

/* tasks_judge_gone(): the copy of a task that left was cut short, and the read goes on. */
#define TASKS_CUT 1

/* What a read does about a task that left the set (sluice_read_options.whole_copies): returns 0
 * when it left nothing half-read (tasks_check_gone), and otherwise TASKS_CUT (its copy is cut
 * short, counted, and the read goes on without the rest of it: parallel_epochs promises each
 * worker's sequence, not exactly once across failures) or, with whole_copies, tasks_check_gone's
 * SLUICE_ERR_TRUNCATED and message (the read fails). */
int tasks_judge_gone(const struct tasks_task *t, bool whole_copies, char *msg, size_t len);

/* Requests outstanding over all tasks. */
unsigned tasks_outstanding(const struct tasks_set *s);

#endif
