/* Split leasing for distributed_epoch tasks (docs/design.md §4). Pure: no locks, no rpc, no clock.
 *
 * The dispatcher leases splits to a task by their position (seq) in the iteration's split
 * sequence and sends a SplitPlan once; the worker checks it and computes each split's contents
 * from it and the dataset's pipeline (common/split_plan.h, pipe_split_plan_reads). A task's lease
 * queue holds the seqs leased and not yet started, and the seqs finished and not yet reported; the
 * worker's loop thread asks it what GetSplits request to send next (lease_want) and feeds it the
 * outcome, while producer threads pop splits and report them finished. task.c guards a queue with
 * the task's mutex; every function here is called with that mutex held.
 *
 * Request rule: at most one GetSplits in flight per task. One is sent when the queue has fallen
 * to its low-water mark (so producers never run dry while a reply is on its way) and more may
 * come, or when finished splits have waited long enough to be worth reporting on their own.
 * After a failure the next attempt waits an exponentially growing delay and then sends the
 * failed request again, exactly as it was (the same max_splits, the same finished seqs) and
 * under the same request number (struct lease_numbers): the dispatcher may have granted it
 * before the reply was lost, and answers a repeated number with that same lease. */
#ifndef SLUICE_WORKER_LEASE_H
#define SLUICE_WORKER_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lease_queue {
    uint64_t *seqs; /* ring of leased, unstarted seqs */
    size_t cap, head, len;
    uint64_t *finished; /* finished, unreported; the first `reporting` are in the request */
    size_t nfinished, finished_cap, reporting;
    uint32_t asked;             /* max_splits of the request in flight, or to be sent again */
    uint64_t first_finished_ms; /* when the oldest unreported seq finished */
    size_t target;              /* seqs to hold when topped up */
    size_t low;                 /* ask for more at or below this many */
    unsigned busy;              /* seqs popped and not finished */
    bool inflight;
    bool resend; /* the last request failed: the next one is the same request again */
    bool end_of_splits;
    unsigned failures; /* failed or empty replies in a row */
    uint64_t retry_at_ms;
    /* Draining (lease_drain): nothing is popped or asked for any more; leased, unstarted seqs
     * are handed back. returning holds them; the first returning_sent are in the request in
     * flight (or to be sent again). */
    bool draining;
    uint64_t *returning;
    size_t nreturning, returning_cap, returning_sent;
};

/* Report finished seqs on their own (with no need for more splits) once the oldest has waited
 * this long, or once this many have gathered. */
#define LEASE_REPORT_MS 100
#define LEASE_REPORT_COUNT 64

/* target >= 1 seqs kept queued; more are asked for at or below target / 2. Returns 0 or
 * SLUICE_ERR_NOMEM. */
int lease_queue_init(struct lease_queue *q, size_t target);
void lease_queue_release(struct lease_queue *q);

/* A producer takes the lowest leased seq: returns 1 with *seq, or 0 when the queue is empty. */
int lease_pop(struct lease_queue *q, uint64_t *seq);
/* A producer finished seq (popped earlier). Returns 0 or SLUICE_ERR_NOMEM. */
int lease_finish(struct lease_queue *q, uint64_t seq, uint64_t now_ms);
/* A producer gave up on a popped seq without finishing it (task stopped or failed). */
void lease_abandon(struct lease_queue *q);
/* The dispatcher says these seqs (n of them) finished elsewhere (hedged splits: another task's
 * production of them reached the reader first): those still queued, unstarted, are removed
 * (never produced, never reported); started ones go on. Returns how many were removed. */
size_t lease_drop(struct lease_queue *q, const uint64_t *seqs, size_t n);

/* Whether a GetSplits request should go out now. When true, *max_splits is how many seqs to
 * ask for (0 when only reporting) and the first *nfinished seqs of q->finished are to be sent
 * as finished; the caller copies them and then calls lease_sent. After a failure it is the
 * failed request again (once the backoff delay has passed), whatever else changed since. */
bool lease_want(const struct lease_queue *q, uint64_t now_ms, uint32_t *max_splits,
                size_t *nfinished);
void lease_sent(struct lease_queue *q, uint32_t max_splits, size_t nfinished);
/* Whether a request may go out now beside another task's that must (a batch of the worker's
 * tasks, worker_lease_pump): when lease_want says so, and also when the queue has fallen below
 * halfway from its low-water mark to its target, or finished seqs wait to be
 * reported, unless a request is in flight, a failed one waits out its delay, or the queue
 * drains. The same outputs as lease_want's. Tasks consuming at like rates thus ask together,
 * and the worker sends one request where it would send one per task. */
bool lease_want_topup(const struct lease_queue *q, uint64_t now_ms, uint32_t *max_splits,
                      size_t *nfinished);

/* The request succeeded: the reported seqs are forgotten and seqs (n of them) are queued. A
 * reply with no seqs to a request that asked for some (the dispatcher has none free now, but
 * may later) delays the next request like a failure does, so an idle task does not poll the
 * dispatcher in a tight loop. Returns 0, or SLUICE_ERR_NOMEM. */
int lease_granted(struct lease_queue *q, const uint64_t *seqs, size_t n, bool end_of_splits,
                  uint64_t now_ms);
/* The request failed: it is to be sent again as it was (its reported seqs stay first in
 * q->finished), after a backoff delay from now_ms. */
void lease_failed(struct lease_queue *q, uint64_t now_ms);

/* The numbers of one task's GetSplits requests (wire request_seq): 1, 2, 3, ... in the order
 * they are first sent, and the same number again for a request sent again after a failure, so
 * the dispatcher can tell a retry from a new request. The worker's loop thread keeps it beside
 * the task (the lease queue is behind the task's mutex) and moves it with the queue: a number
 * is taken for every request lease_want said to send, and lease_number_done reports the same
 * outcome as lease_granted or lease_failed. Zero-initialized means no request sent yet. */
struct lease_numbers {
    uint64_t last; /* the number of the latest request sent; 0 before the first */
    bool repeat;   /* that request failed: the next one is sent again under its number */
};

/* The number for the request being sent now. */
uint64_t lease_number_next(struct lease_numbers *n);
/* The request was answered (answered = true) or failed. */
void lease_number_done(struct lease_numbers *n, bool answered);

/* The task drains: every queued seq (leased, not started) moves to the returning list and is
 * handed back with the next request, and so are seqs granted from now on (the answer to a
 * request sent before); producers pop nothing more, and requests ask for no new splits but keep
 * coming (reporting, and polling at the backoff pace) until end_of_splits, which the dispatcher
 * sends once the task holds no split: its consumers received everything it produced. Returns 0
 * or SLUICE_ERR_NOMEM (then nothing changed). */
int lease_drain(struct lease_queue *q);
/* The seqs to hand back in the request just marked sent (lease_sent): *n of them. */
const uint64_t *lease_returning(const struct lease_queue *q, size_t *n);

/* Whether producers may still get work: false once end_of_splits came and the queue is empty,
 * and false when draining. */
bool lease_more(const struct lease_queue *q);
/* Whether everything leased was run and every finished seq reported. */
bool lease_settled(const struct lease_queue *q);

#endif
