/* What the iterator's files share: struct sluice_iterator and its helpers. iterator.c is the
 * caller's side (open, next, close, and the reader that decodes payloads); iterator_fetch.c is
 * the loop thread fetching elements from workers; iterator_heartbeat.c is the loop thread
 * talking to the dispatcher (heartbeats, verifying the job after a dispatcher restart, the
 * loop side of start and close). The locking rules are in iterator.c's opening comment. */

#ifndef SLUICE_CLIENT_ITERATOR_INTERNAL_H
#define SLUICE_CLIENT_ITERATOR_INTERNAL_H

#include "iterator.h"

#include "client.h"
#include "ledger.h"
#include "prefetch.h"
#include "reorder.h"
#include "retry.h"
#include "status_json.h"
#include "tasks.h"

#include "common/error.h"
#include "common/hostid.h"
#include "common/labels.h"
#include "common/mode.h"
#include "pipeline/codec.h"
#include "pipeline/def.h"
#include "pipeline/dist.h"
#include "pipeline/element.h"
#include "pipeline/format.h"
#include "pipeline/iter.h"
#include "pipeline/open.h"
#include "pipeline/prefetch.h"
#include "pipeline/registry.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATASET_ID_MAX 256
/* The longest trainer id (sluice_read_options.trainer_id), in bytes: the worker's limit. */
#define ITER_TRAINER_ID_MAX 127

enum iter_state { ITER_RUNNING, ITER_ENDED, ITER_FAILED };

struct sluice_iterator {
    struct sluice_client *c;
    /* Fixed once open. */
    char dataset_id[DATASET_ID_MAX];
    char job_name[DATASET_ID_MAX];
    enum sluice_mode mode;
    uint8_t *def; /* the dataset's definition as the dispatcher sent it (packed) */
    size_t def_len;
    uint64_t job_id, iteration_id, client_id;
    /* The last step sluice_iterator_keep kept (its default is the next one). */
    uint64_t kept_step;
    /* The capability for client_id at the dispatcher (src/common/cap.h), sent with heartbeats
     * and the release; each task's own, for its worker, is in the task set (tasks.h). Empty
     * (client_key_len 0) from a dispatcher whose iteration has no secret. */
    uint8_t client_key[16];
    size_t client_key_len;
    uint32_t consumer_index;
    uint32_t num_consumers; /* coordinated reads; 0 otherwise */
    bool coordinated;
    /* Deterministic reads (reorder.h): payloads go into the reorder queue, not the prefetch
     * buffer, whose slots then only count requests in flight. */
    bool det;
    /* A cross-trainer cache: the trainer id every GetElements carries; "" without a cache. */
    char trainer_id[ITER_TRAINER_ID_MAX + 1];
    /* Target workers (docs/reading.md "Local workers") and this process's host id, which tells the
     * dispatcher where the reader runs and the reader which tasks are local. */
    enum sluice_target_workers target;
    char host_id[HOSTID_MAX + 1];
    /* sluice_read_options.no_shm and shm_bytes: how workers on this host are read. */
    bool no_shm;
    uint64_t shm_bytes;
    /* Loop thread: the largest payload received through a shared region (shm_full,
     * iterator_fetch.c). */
    uint64_t shm_largest;
    /* starving: the reader waits in wait_payload with nothing to read; shm_waiting: the loop
     * holds a request back for room in a shared region. Each side stores its own and reads the
     * other's (seq_cst), so a request held back while the reader starves is sent: either the
     * loop sees starving, or the reader sees shm_waiting and wakes the loop. */
    atomic_bool starving;
    atomic_bool shm_waiting;
    /* sluice_read_options.whole_copies: a copy cut short by its worker's loss fails the read. */
    bool whole_copies;
    /* sluice_read_options.hedge_factor (0 outside distributed_epoch), sent with every
     * heartbeat. */
    double hedge_factor;

    /* Shared, guarded by mu. */
    uv_mutex_t mu;
    uv_cond_t cond;
    struct prefetch pf;
    struct reorder_queue rq; /* deterministic reads */
    enum iter_state state;
    int fail_rc;
    char fail_msg[SLUICE_ERRMSG_SIZE];
    /* Elements handed to the reader so far: stored by the reader alone (relaxed, once per
     * element, no lock), read by the loop for the consumption rate. */
    atomic_uint_fast64_t taken;
    /* Copies cut short by the loss of their worker (sluice_read_progress.copies_cut): stored by
     * the loop, read by the reader and the heartbeats. */
    atomic_uint_fast64_t copies_cut;
    uint64_t wait_ns; /* time the reader spent waiting on an empty buffer */
    atomic_int interrupted;
    /* A repetition of a repeating read: the flag of the read it belongs to, which interrupts it
     * too (set before the loop hears of the read, never changed); NULL otherwise. */
    const atomic_int *also_interrupted;

    /* A distributed_epoch read of a mix (iterator_mix.c) reads nothing itself either: each
     * input is a read of its own, mixed by mix. */
    bool mixing;
    struct iter_mix *mix;

    /* A read whose local tail repeats (iterator_repeat.c) reads nothing itself: each repetition
     * is a read of its own, opened with rep_opts, and the tail pulls from the current one. */
    bool repeating;
    struct sluice_read_options rep_opts;
    char rep_selector[SELECTOR_TEXT_MAX + 1]; /* rep_opts.worker_selector */
    struct sluice_iterator *stream; /* the current repetition (guarded by mu), NULL between */
    uint64_t rep_taken;             /* elements of the repetitions closed so far (guarded by mu) */
    uint64_t rep_cut;               /* copies they cut short (guarded by mu) */
    /* A repeating read of a named job: the job repetition its next pass asks for (0 before the
     * first: the job's current one). A repetition's own read: the one asked for, and the one
     * the dispatcher gave (GetOrCreateJobReply.repetition). */
    uint64_t rep_want, repetition;

    /* Reader. */
    struct prefetch_item cur;      /* the payload being decoded; data NULL when none */
    struct reorder_blob *cur_blob; /* deterministic: cur is a run of this blob, not owned */
    size_t cur_pos;
    uint32_t cur_decoded; /* records of cur read so far (elements, skipped ones, end markers) */
    uint32_t cur_skip;    /* entries of cur.skip passed */
    uint64_t taken_local; /* elements handed out (published in taken) */
    struct pipe_buf scratch;
    struct sluice_element elem;
    struct pipe_spec *tail_spec;
    struct pipe_run *tail;
    uint64_t deadline_ns; /* of the current next() call; 0 before its first wait or without
                           * a limit */
    uint32_t call_timeout_ms;
    int reader_rc; /* a decoding failure, reported once the payloads before it are read */
    char reader_msg[SLUICE_ERRMSG_SIZE];
    bool have_round; /* coordinated: the round and task of the last element handed out */
    uint64_t last_round, last_task;
    /* distributed_epoch without coordination: what the reader was handed, by (split,
     * position), for sluice_iterator_save. The run [run_begin, run_end) of split run_seq is
     * handed out and not yet recorded (recording every element would cost a lookup each). */
    bool track;
    struct ledger delivered;
    bool run;
    uint64_t run_seq, run_begin, run_end;
    /* A sharded deterministic read (sluice_read_options.shard_*): shard_seen counts the
     * elements of the canonical order passed so far, handed out or not. Reader only. */
    uint32_t shard_index, shard_count;
    uint64_t shard_seen;
    /* What a checkpoint records besides the position. */
    uint64_t def_hash, plan_hash, split_total;

    /* Loop thread. */
    struct client_waker waker;
    struct tasks_set tasks;
    struct fetch *fetches; /* the requests under way (iterator_fetch.c), or NULL */
    bool grant_stalled;    /* the last heartbeat reply left the read waiting for a grant */
    uv_timer_t hb_timer, pump_timer;
    unsigned refs; /* the open iterator, its two timers, and each request under way */
    bool started, closing;
    bool hb_busy;     /* a heartbeat or status request is under way */
    bool hb_soon;     /* send the next heartbeat at once */
    uint64_t hb_sent; /* heartbeats sent so far; the one under way has this number */
    /* sluice_iterator_save in a named job reports what the reader received to the dispatcher
     * before it returns (iter_report_received): report_wanted counts its requests, and
     * report_done the ones a heartbeat answered since (both under mu); report_target (loop only)
     * is the first heartbeat that carries the wanted ones, and report_taken how many of them the
     * loop has seen. */
    uint64_t report_wanted, report_done, report_taken, report_target;
    /* Deterministic, restored from a position where some split's positions had are not a prefix
     * of it (a merge of shared consumers' positions): the judge steps over what it had. */
    bool det_had;
    uint32_t heartbeat_ms;
    uint64_t created_incarnation; /* the dispatcher incarnation that created the job */
    uint64_t job_incarnation;     /* the dispatcher incarnation known to hold the job */
    uint64_t verify_incarnation;  /* the incarnation being asked whether it holds the job */
    uint64_t last_hb_ok, last_stats_ms, last_taken, last_wait_ns;
    /* distributed_epoch (track): the element count each request asks for (prefetch_pace), and
     * when and at which count of taken elements the window it was measured over began. */
    uint32_t pace_max;
    uint64_t pace_ms, pace_taken;
    char
        hb_why[SLUICE_ERRMSG_SIZE]; /* the last heartbeat's transient failure; "" after a success */
    /* The dispatcher's word on why the job has no task (ClientHeartbeatReply.waiting): its
     * worker selector matches no worker. Loop thread. */
    char sel_waiting[SELECTOR_TEXT_MAX + 128];
    uint64_t *finished;
    size_t finished_cap;
    /* distributed_epoch: the splits received, by (split, position), recorded as replies arrive
     * (note_payload) and reported with heartbeats. */
    struct ledger ledger;
    /* Deterministic reads: the judge of arriving records, the runs cut from a payload before
     * they are queued (det_ops), and the redo requests of the heartbeat under way (redo: their
     * seqs, tasks and ages as the request carries them, redo_cap of each). */
    struct reorder_accept ra;
    struct det_op *det_ops;
    size_t det_ops_cap;
    uint64_t *redo;
    size_t nredo, redo_cap;
    /* The dispatcher deferred the last redo request (ClientHeartbeatReply.redo_deferred): it is
     * asked again with the regular heartbeats, not hastened, until this loop time. */
    uint64_t redo_calm_until;
    uint64_t det_bytes, det_splits; /* bytes accepted, splits completed: the mean split size */
    uint64_t last_det_splits, last_det_ms; /* det_splits at the last heartbeat, and when */
    bool acks_due;              /* a split completed since the last heartbeat was built */
    Sluice__SplitCoverage *cov; /* the coverage reported by the heartbeat under way */
    Sluice__SplitCoverage **cov_ptrs;
    uint64_t *cov_bounds;
    size_t cov_n;
    Sluice__ClientHeartbeatRequest hb_req;
    /* The digest of the task list applied last (ClientHeartbeatReply.tasks_digest), sent with
     * each heartbeat so an unchanged list is not sent again; 0: none. */
    uint64_t tasks_digest;
    Sluice__Envelope hb_env;
    Sluice__StatusRequest st_req;
    Sluice__Envelope st_env;
    Sluice__GetDatasetRequest ds_req;
    Sluice__Envelope ds_env;
    Sluice__ReleaseClientRequest rel_req;
    Sluice__Envelope rel_env;
    struct client_op *close_op;
};

/* One step of queueing a payload's accepted records (iterator_fetch.c): a run of split seq
 * (count > 0), or the split's completion (count 0, complete). */
struct det_op {
    uint64_t seq;
    size_t begin, end;
    uint32_t count;
    bool complete;
    uint64_t total; /* complete: the split's count */
};

/* iterator.c */

/* Ends the read normally unless it already ended; wakes the reader. Any thread. */
void iter_end(struct sluice_iterator *it);
/* Ends the read with an error unless it already ended; the reader sees it after the payloads
 * already buffered. */
void iter_fail(struct sluice_iterator *it, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Frees everything the iterator owns and the iterator. */
void iter_free(struct sluice_iterator *it);
/* The shared state, read under mu. Any thread. */
enum iter_state iter_state(struct sluice_iterator *it);

/* Whether the read was interrupted, itself or through the read it is a repetition of. */
static inline bool iter_interrupted(const struct sluice_iterator *it)
{
    return atomic_load(&it->interrupted) ||
           (it->also_interrupted && atomic_load(it->also_interrupted));
}
/* sluice_iterator_open(), for a repetition of a repeating read: also stops when *also is set
 * (NULL: no such flag); repetition is the named job's repetition to read
 * (GetOrCreateJobRequest.repetition; 0: its current one). resume_id: the digest a restored read
 * names its checkpoint by (GetOrCreateJobRequest.resume_id; 0: that of o->restore); an input of
 * a mix passes one of the whole mix's checkpoint, since an input's own position is the same
 * across restores of a mix that drew nothing from it. */
int iter_open_read(struct sluice_client *c, const struct sluice_read_options *o,
                   const atomic_int *also, uint64_t repetition, uint64_t resume_id,
                   struct sluice_iterator **out, char *err, size_t errlen);
/* Makes a reader blocked in (or about to call) next() return with "iterator closed", also the
 * current repetition's of a repeating read. Any thread but the loop's. */
void iter_reader_stop(struct sluice_iterator *it);
/* sluice_iterator_next_into; lend: large tensors may stay in a shared region (as the public call
 * allows), which is for elements that leave the library, never for those a pipeline operator of
 * this library gets next (a repetition's or a mix's input). */
int iter_next_into(struct sluice_iterator *it, struct sluice_element *elem, uint32_t timeout_ms,
                   bool lend, char *err, size_t errlen);
/* Frees what the reader part holds (the tail, the payload being decoded, the element handed out);
 * the reader's thread, once it has stopped. */
void iter_reader_release(struct sluice_iterator *it);

/* Opens the operations of text (a tail: "map(f) | batch(2)") over the read's elements, on a
 * thread of their own; what names the tail in messages ("local tail", or "operations run in the
 * reader"). A repeating read's upstream is its repetitions (iterator_repeat.c). Returns 0 or a
 * negative code with err. */
int iter_open_tail(struct sluice_iterator *it, const char *text, const char *what, char *err,
                   size_t errlen);

/* iterator_repeat.c */

/* The upstream of a repeating read's tail over its first repetition, or NULL without memory. */
struct pipe_iter *iter_repeat_upstream(struct sluice_iterator *it);
/* The tail's pipe_reopen_fn (user is the repeating read): opens the next repetition. */
int iter_repeat_reopen(void *user, uint64_t pass, struct pipe_iter **out, char *err, size_t errlen);

/* Opens the read of a local tail that repeats (pipe_spec_first_repeat): its first repetition,
 * then the tail over it. it has its dataset id, mode and client; o are the caller's options.
 * Returns 0 or a negative code with err; on failure what was opened is released by
 * iter_repeat_release(). Not on the loop thread. */
int iter_repeat_open(struct sluice_iterator *it, const struct sluice_read_options *o, char *err,
                     size_t errlen);
/* Closes the current repetition, if any (after the tail was freed). */
void iter_repeat_release(struct sluice_iterator *it);
/* sluice_iterator_waiting() and sluice_iterator_progress() of a repeating read. */
int iter_repeat_waiting(struct sluice_iterator *it, char *buf, size_t len);
void iter_repeat_progress(const struct sluice_iterator *it, struct sluice_read_progress *out);

/* iterator_mix.c */

struct pipe_spec;
struct checkpoint_mix;
/* Opens the read of a mix whose dataset it has (spec, decoded from its definition): a read per
 * input, the mix over them, and the operations after it that run in the reader (with the local
 * tail of o). restore: the mix's checkpoint, or NULL. repetition: the named job's repetition to
 * read (a pass of a repeating read; 0: the current one), asked of every input's job. Returns 0
 * or a negative code with err; on failure what was opened is released by
 * iter_reader_release(). Not on the loop thread. */
int iter_mix_open(struct sluice_iterator *it, const struct pipe_spec *spec,
                  const struct sluice_read_options *o, const struct checkpoint_mix *restore,
                  uint64_t repetition, char *err, size_t errlen);
/* The mix iterator, handed to the tail that runs it (which then owns it). */
struct pipe_iter *iter_mix_take(struct sluice_iterator *it);
/* next() of a mix without a tail: the next element into it->elem, 1, 0 at the end, or a
 * negative code with err (SLUICE_ERR_TIMEOUT: nothing within timeout_ms, the mix unchanged). */
int iter_mix_next(struct sluice_iterator *it, uint32_t timeout_ms, char *err, size_t errlen);
/* Stops the input reads (iter_reader_stop of each). */
void iter_mix_stop(struct sluice_iterator *it);
/* Closes the input reads and frees the mix (after the tail was freed). */
void iter_mix_release(struct sluice_iterator *it);
/* sluice_iterator_save, _waiting, _progress and _report of a mixing read. */
int iter_mix_save(struct sluice_iterator *it, uint8_t **bytes, size_t *len, char *err,
                  size_t errlen);
int iter_mix_waiting(struct sluice_iterator *it, char *buf, size_t len);
void iter_mix_progress(const struct sluice_iterator *it, struct sluice_read_progress *out);
int iter_mix_report(struct sluice_iterator *it);
/* The read of the mix's first input (it keeps the mix's positions with the dispatcher), or NULL
 * before it opened. */
struct sluice_iterator *iter_mix_first(struct sluice_iterator *it);
/* sluice_checkpoint_merge of the checkpoints of a mix's readers (the first is one). */
int iter_mix_merge(const uint8_t *const *ckpts, const size_t *lens, size_t n, uint8_t **out,
                   size_t *out_len, char *err, size_t errlen);

/* iterator_fetch.c */

/* Drops one of the loop thread's references; the last frees the iterator. Loop thread. */
void iter_unref(struct sluice_iterator *it);
/* The client's wakeup for this read: fails it if interrupted, then pumps. Loop thread. */
void iter_on_wake(struct client_waker *w);
/* Drops tasks the dispatcher no longer lists and that have nothing outstanding, notices the end
 * of the read, and sends what can be sent. */
void iter_settle(struct sluice_iterator *it);

/* iterator_wait.c */

/* Appends ": REASON" (sluice_iterator_waiting) to the message in err. Not on the loop thread. */
void iter_append_reason(struct sluice_iterator *it, char *err, size_t errlen);

/* iterator_heartbeat.c */

/* Coordinated reads: brings the next heartbeat forward when the read needs news (coord_delay). A
 * heartbeat under way is followed by the next at the same pace (next_heartbeat). */
void iter_coord_news(struct sluice_iterator *it);
/* Deterministic reads: the split the reader needs next must be produced again; the next
 * heartbeat, which asks for it, goes at once (or right after the one under way). */
void iter_hasten_redo(struct sluice_iterator *it);
/* A monotonic clock in milliseconds, read when it is needed (not the loop's cached time): the
 * ages of redo requests are measured on it. */
static inline uint64_t iter_clock_ms(void)
{
    return uv_hrtime() / 1000000;
}
/* In the end phase, brings the next heartbeat forward (the last task just ended). */
void iter_hasten_heartbeat(struct sluice_iterator *it);
/* Loop. A save asked for a report (report_wanted): the next heartbeat goes at once, and its
 * answer marks the report done. */
void iter_report_check(struct sluice_iterator *it);
/* Packs a dataset definition into a new buffer. Returns 0 or SLUICE_ERR_NOMEM. */
int iter_pack_def(const Sluice__DatasetDef *def, uint8_t **out, size_t *len);
/* The loop side of closing a read: stops its timers and connections and releases the client
 * from the job. Loop thread. */
void iter_run_close(struct sluice_client *c, struct client_op *op);
/* The loop side of starting a read: its timers, its wakeup, the first heartbeat. Loop thread. */
void iter_run_start(struct sluice_client *c, struct client_op *op);
/* A complete split is reported soon rather than at the next regular heartbeat: its worker holds
 * its lease until then, and the end of the read waits for the last ones. */
void iter_schedule_acks(struct sluice_iterator *it);
/* Sends the next heartbeat after delay ms (not once closing). Loop thread. */
void iter_schedule_heartbeat(struct sluice_iterator *it, uint64_t delay);

#endif
