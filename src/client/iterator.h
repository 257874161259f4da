/* One read (struct sluice_iterator of sluice.h): the job it belongs to, the tasks it fetches
 * from, the prefetch buffer between the client's loop thread and the reader's thread, and the
 * decoding (and optional local tail) on the reader's thread.
 *
 * Happy path: sluice_iterator_open() registers the pipeline if one was given, fetches the
 * dataset's definition (GetDataset, kept to recognize the dataset later), asks the dispatcher
 * for the job (GetOrCreateJob) and starts the read on the loop thread. There a
 * heartbeat timer sends ClientHeartbeat (the tasks read to their end, the consumption rate) and
 * applies the reply's task list (tasks.h): new tasks get a connection to their worker (shared
 * per address), tasks no longer listed are dropped once their requests are answered. Up to
 * max_outstanding_requests GetElements requests are kept in flight across the tasks, and each
 * reply's payload goes into the prefetch buffer as received (prefetch.h bounds the memory).
 * sluice_iterator_next() takes payloads from the buffer and decodes their elements one at a time
 * on the caller's thread, through the local tail when there is one. The read ends when the
 * dispatcher says the iteration is finished, every task it lists has ended, and the buffer is
 * empty.
 *
 * Coordinated reads (num_consumers > 0) go one request at a time along the dispatcher's round
 * schedule (tasks.h): heartbeats report the next round and bring the schedule and the grant;
 * the read asks for a heartbeat at once when it waits for a grant or has used half of it, and
 * every ITER_ROUND_POLL_MS while no task serves its round or the round's task fails. A request
 * to a task the dispatcher dropped that still waits for a connection is withdrawn (the worker
 * never saw it), so the read skips that task's rounds at once. Each element remembers its round
 * and task (sluice_iterator_round). A round the others were served long ago (this consumer fell
 * behind) ends the read with the worker's or the schedule's error.
 *
 * Failure modes: a worker that cannot be reached, or does not know a task yet, is retried with
 * backoff until the dispatcher drops the task; an Error reply for a task (its pipeline failed)
 * ends the read with the worker's message, after the elements already buffered. (A worker says
 * SLUICE_ERR_UNAVAILABLE for a task it does not run, which is retried, and
 * SLUICE_ERR_TASK_FAILED for a task whose pipeline failed, which is not.) A
 * dispatcher that cannot be reached is retried on every heartbeat while the tasks keep being read;
 * with a client timeout, a read that needs the dispatcher to go on fails once it has been
 * unreachable that long. Heartbeats and the final ReleaseClient name our client id, so they go
 * only over a connection to the incarnation known to hold the job (a fault-tolerant dispatcher
 * keeps its incarnation across restarts). Any other dispatcher is first asked read-only
 * questions: its status must show the job as we know it (id, dataset, name, mode, iteration)
 * and GetDataset the same definition. If not (it restarted without --fault-tolerant and ids now
 * name other reads), or if it answers a heartbeat with SLUICE_ERR_NOT_FOUND after its
 * incarnation changed, the read fails with "dispatcher restarted without --fault-tolerant; job N
 * is gone" (SLUICE_ERR_RESTARTED) rather than hang or read another dataset's elements.
 *
 * Lifetime: the loop-thread half holds a reference for every request and timer under way; the
 * iterator is freed on the loop thread when the last one ends, after sluice_iterator_close()
 * has returned. */
#ifndef SLUICE_CLIENT_ITERATOR_H
#define SLUICE_CLIENT_ITERATOR_H

#include "sluice/sluice.h"

/* Defaults and bounds of the read options. */
#define ITER_DEFAULT_OUTSTANDING 8
#define ITER_MAX_OUTSTANDING 1024
/* Requests in flight to one task at once (not counting coordinated reads, which send one).
 * With replies of ITER_FETCH_MAX_BYTES, four keep a few MiB on the way, enough to ride out the
 * scheduling delays of a busy machine; two measured several percent slower, six no faster. */
#define ITER_PER_TASK_MAX 4
/* The reply size asked of workers. Replies of a couple of MiB keep the buffers a reply passes
 * through (the frame the socket is read into, the payload the reader decodes) warm in the
 * caches; larger ones measured markedly slower with elements of 1 MiB, and smaller elements
 * gain nothing from more (a reply carries at most a few thousand of them). */
#define ITER_FETCH_MAX_BYTES (2u << 20)
/* distributed_epoch reads ask each request for prefetch_pace() elements (prefetch.h): their
 * requests together about ITER_PACE_HORIZON_MS of the elements the reader consumed a second over
 * the last ITER_PACE_WINDOW_MS or more, at least ITER_PACE_MIN and at most ITER_PACE_MAX (the
 * worker's own bound on a reply) each. A reader's first requests, before it has consumed
 * anything, ask for ITER_PACE_MIN; one that consumes millions a second reaches ITER_PACE_MAX
 * after its first window. */
#define ITER_PACE_HORIZON_MS 250u
#define ITER_PACE_WINDOW_MS 50u
#define ITER_PACE_MIN 64u
#define ITER_PACE_MAX 8192u
/* Shared-memory reads: while a worker's region has no room for one more reply and the reader has
 * something to read, requests to that worker wait (iterator_fetch.c shm_full; tasks_defer), the
 * pump looking again every ITER_SHM_POLL_MS; other workers are asked meanwhile. */
#define ITER_SHM_POLL_MS 2
/* Bound on one GetElements request, covering a worker's long poll (WORKER_POLL_MS) with room to
 * spare: a worker answers every read before its reader gives up on it, which coordinated reads
 * rely on (tasks.h). */
#define ITER_FETCH_TIMEOUT_MS 10000
/* Deterministic reads: the bytes of received payloads held for reordering before only the
 * lowest incomplete split's elements are taken (sluice_read_options.reorder_bytes). */
#define ITER_REORDER_BYTES (256u << 20)
/* The least reorder window asked of the dispatcher, in splits past the one the reader needs
 * (see lease_below in iterator_heartbeat.c): enough for every worker thread to hold a split. */
#define ITER_WINDOW_MIN_SPLITS 8
#define ITER_WINDOW_SLACK_MS 300
/* Heartbeat interval until the dispatcher names one. */
#define ITER_DEFAULT_HEARTBEAT_MS 1000
/* Heartbeat interval once every task has ended but the dispatcher has not yet said the iteration
 * is finished (it learns that from the workers' heartbeats): the end of a read is noticed
 * soon after the dispatcher knows it. */
#define ITER_END_POLL_MS 50
/* Coordinated reads: the heartbeat interval while no task serves the round, or the round's task
 * is failing (see coord_delay in iterator.c). */
#define ITER_ROUND_POLL_MS 50
/* A split that completed is reported to the dispatcher within this long. */
#define ITER_ACK_MS 100
/* sluice_iterator_save in a named job waits at most this long for the dispatcher to hear what
 * the reader received (iter_report_check). */
#define ITER_REPORT_WAIT_MS 5000
/* Bound on the ReleaseClient request sent when an iterator closes. */
#define ITER_RELEASE_TIMEOUT_MS 2000

/* Makes the iterator's current and later sluice_iterator_next() calls return
 * SLUICE_ERR_CANCELLED ("interrupted") promptly, also when one is waiting. Async-signal-safe and
 * callable from any thread while the iterator is open, e.g. from a SIGINT handler; the iterator
 * must still be closed with sluice_iterator_close(). */
void iter_interrupt(struct sluice_iterator *it);

#endif
