/* The dispatcher's side of the journal (docs/design.md §6): rebuilding the state from it at start,
 * and the group-commit thread that writes records while the loop goes on serving.
 *
 * Group commit: the loop thread queues records (already serialized) as the server shell applies
 * updates. At the end of the loop iteration that queued them (a prepare and a check handle, so
 * records queued by timers and by I/O callbacks alike leave in the same iteration) everything
 * queued is handed to a dedicated thread as ONE batch, which journal_append() writes in ONE
 * transaction. Exactly one batch is in flight: records queued while it is written wait, and all
 * of them form the next batch as soon as it is done, so the busier the dispatcher the larger the
 * batches. The loop thread never waits for the disk. Between two requests (journal_thread_poll)
 * a finished batch is taken and the next handed over without waiting for the end of the
 * iteration, which under load reads thousands of requests in one go.
 *
 * Waiting: journal_thread_wait() registers a callback that runs on the loop thread once every
 * record queued before it is durable. Callbacks run in the order they were registered, which is
 * commit order, so a reply can never overtake a change it may depend on.
 *
 * Failure: a batch that cannot be written (disk full, map at its ceiling, I/O error) fails the
 * journal for good: every waiter not yet satisfied is called with the error, later calls are
 * refused, and on_fail runs once so the owner stops acknowledging anything (the dispatcher exits
 * with status 1). Records already durable stay durable.
 *
 * Threads: every function here runs on the loop thread; only journal_append() runs on the
 * journal thread, with memory nothing else touches until it is done. */
#ifndef SLUICE_DISPATCHER_JOURNAL_THREAD_H
#define SLUICE_DISPATCHER_JOURNAL_THREAD_H

#include "dispatcher/recovery.h"
#include "dispatcher/state.h"

#include "journal/journal.h"
#include "journal/verify.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* ---- the group-commit thread ----------------------------------------------------------------- */

struct journal_thread;

/* Runs once when the journal fails (see above); msg is "what: why". */
typedef void (*journal_thread_fail_cb)(void *user, int code, const char *msg);
/* status is 0 when every record queued before the wait is durable, negative when the journal
 * failed first. */
typedef void (*journal_thread_wait_cb)(void *ctx, int status);

struct journal_thread_opts {
    struct journal *journal; /* borrowed: must outlive the thread */
    uint64_t next_seq;       /* the sequence number the first record queued gets */
    /* Most records per transaction; 0: no limit (group commit). 1 commits every record in its
     * own transaction: a baseline for benchmarks, not for use. */
    size_t max_records;
    journal_thread_fail_cb on_fail;
    /* Runs on the loop thread after each transaction that committed, with the time the journal
     * thread spent writing it (journal_append, fsync included), its record count and the bytes
     * it handed to the journal (struct journal_thread_stats.bytes), before its waiters. May be
     * NULL. */
    void (*on_commit)(void *user, double seconds, size_t records, uint64_t bytes);
    void *user;
    /* NULL: batches go to `journal` on the thread. Otherwise batches go to sink instead (a
     * dispatcher replica's Raft log, replica.h), on the loop thread, and no thread is started:
     * sink(sink_user, jt, recs, n) starts writing the batch (the records stay valid until the
     * batch is done) and returns 0, then the owner calls journal_thread_sink_done(jt, ...)
     * exactly once when it is durable or failed; or it returns a negative code at once, which
     * fails the journal as a failed write does. Snapshots cannot be queued
     * (SLUICE_ERR_UNSUPPORTED). */
    int (*sink)(void *sink_user, struct journal_thread *jt, const struct journal_record *recs,
                size_t n);
    void *sink_user;
};

struct journal_thread_stats {
    uint64_t transactions;
    uint64_t records;
    uint64_t snapshots;
    uint64_t largest; /* most records in one transaction */
    /* Bytes handed to the journal in committed transactions: record payloads, dataset
     * definitions and snapshots (LMDB's own keys, checksums and page overhead not counted). */
    uint64_t bytes;
};

/* The end of a batch handed to opts->sink: rc 0 when it is durable, else negative with msg
 * ("what: why"), which fails the journal (on_fail runs). Loop thread. */
void journal_thread_sink_done(struct journal_thread *jt, int rc, const char *msg);

/* A point between two requests, where the loop thread may run anything (the dispatcher calls it
 * after each request). A batch the thread has finished is taken here, and its waiters run, rather
 * than after the rest of this loop iteration's I/O; and when no batch is in flight, what is
 * queued goes to the thread now if it is 64 records or more, or its oldest record waited 0.5 ms
 * or more. A busy loop iteration (thousands of requests read in one go) then overlaps commits
 * with its work, and a request waits about one commit rather than one loop iteration or two.
 * Does nothing with a sink, once failed or closing, or while waiters run. */
void journal_thread_poll(struct journal_thread *jt);

/* Starts the thread. Returns 0 and *out, or a negative code with a message. */
int journal_thread_start(uv_loop_t *loop, const struct journal_thread_opts *opts,
                         struct journal_thread **out, char *err, size_t errlen);

/* Queues one record; payload (malloc'd) passes to the thread whatever the outcome. When
 * dataset_id is not NULL, def (def_len bytes, copied) is stored under it in the journal's
 * datasets table in the record's transaction. Returns 0; SLUICE_ERR_CLOSED after close;
 * SLUICE_ERR_NOMEM; or the journal's failure code once it has failed. */
int journal_thread_add(struct journal_thread *jt, uint8_t *payload, size_t len,
                       const char *dataset_id, const uint8_t *def, size_t def_len);

/* Queues a snapshot covering every record queued so far; data (malloc'd) passes to the thread.
 * It is written in the transaction of the last record it covers, which also deletes the records
 * it covers; a newer snapshot queued before that replaces it. Returns as journal_thread_add. */
int journal_thread_snapshot(struct journal_thread *jt, uint8_t *data, size_t len);

/* The same for a snapshot of the state as it was when record seq was the last one queued (seq
 * below journal_thread_next_seq(); it may be durable already): a snapshot taken earlier and
 * finished since. SLUICE_ERR_INVALID (data freed) for a seq not yet queued. */
int journal_thread_snapshot_at(struct journal_thread *jt, uint8_t *data, size_t len, uint64_t seq);

/* Calls cb(ctx, status) once every record queued before this call is durable, or the journal
 * failed; callbacks run in the order of their waits. When nothing is outstanding and no earlier
 * callback is pending, cb runs before this returns. Returns 0 (cb will run exactly once), or
 * SLUICE_ERR_NOMEM (cb never runs). */
int journal_thread_wait(struct journal_thread *jt, journal_thread_wait_cb cb, void *ctx);

/* The sequence number the next record queued will get. */
uint64_t journal_thread_next_seq(const struct journal_thread *jt);
/* The sequence number of the last durable record: every record up to it is durable. */
uint64_t journal_thread_durable_seq(const struct journal_thread *jt);
/* Whether the journal has failed (nothing is acknowledged any more). */
bool journal_thread_failed(const struct journal_thread *jt);

void journal_thread_get_stats(const struct journal_thread *jt, struct journal_thread_stats *out);

/* Writes what is still queued (unless the journal failed), lets every waiter run, stops the
 * thread, closes the handles, frees jt and then calls cb (may be NULL). Call once. */
void journal_thread_close(struct journal_thread *jt, void (*cb)(void *user), void *user);

#endif
