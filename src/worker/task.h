/* A task: the producers that run one task's pipeline on the worker's pool of threads (pool.h)
 * and the bounded element buffer they fill (docs/design.md §1: pipelines run on the worker's
 * producer threads, never on the loop thread).
 *
 * Happy path: task_start() prepares the producers, and the first take (a reader asked) queues
 * them on the pool; a save's task, which has no reader, starts at once, on threads of its own.
 * Until then a task takes no turn on the pool, buffers nothing and leases no split, and a stop or
 * a drain ends it. parallel_epochs and the static sharding modes run one producer over the whole
 * (rewritten, see shard.h) pipeline; distributed_epoch runs cfg->producers producers that take
 * splits from the task's lease queue (lease.h) and run the pipeline over one split at a time. A
 * producer is run in slices by the pool's threads (task_producers.c): it encodes each element
 * (codec_append_elem; with compress set it stops trying snappy for a while after elements in a
 * row that it could not shrink, so incompressible data costs no compression attempts) into a
 * private chunk and publishes the chunk into the buffer when it is full, when a reader has been
 * waiting longer than a short linger, or when its split or pipeline ends, and then yields its
 * thread to the next producer in the pool's queue. While the buffer holds more than its byte or
 * element bound it does not wait: it keeps the chunk and parks until a take makes room; without a
 * leased split it parks until splits are granted. An element with a tensor of TASK_EXT_MIN bytes
 * or more (when no compression is tried) is not copied at all: its chunk takes over the tensor's
 * block (an external chunk, buffer.h) and the producer's element gets a spare block back, or,
 * while the task's reader is on this host with an arena in its shared region (task_set_arena), a
 * block of that arena: the next such value is then built where the reader maps it, and its
 * record, laid out whole around it, is announced there instead of copied (conn.c send_shm). The
 * loop thread takes whole records out with task_take() or task_take_whole() and is woken through
 * cfg->wake whenever a waiting reader can be served, a producer needs splits, or a producer
 * exits.
 *
 * Memory: producers park before publishing while the buffer holds buffer_bytes or more (or
 * buffer_records, or TASK_BUFFER_CHUNKS), so the buffer exceeds its byte bound by at most one
 * chunk per producer; a chunk is at most TASK_CHUNK_BYTES plus one element, and an element at
 * most max_element_bytes (E). One element can thus be larger than the whole bound: the buffer
 * then holds that one element. Beyond the buffer a task holds, per producer, its private chunk
 * (up to TASK_CHUNK_BYTES + E), the element in hand and what its operators hold (a batch being
 * built: up to about E; a shuffle or prefetch buffer: their counts of elements), plus spare
 * blocks of at most max(buffer_bytes, TASK_SPARE_BYTES, the most its external chunks held at
 * once), so never more than the task held at its peak. What was taken for a reply is held until
 * written; the worker answers a read only while its connection has less than
 * WORKER_MAX_PENDING_BYTES queued (serve.c). Measured with elements of 100 MB and a reader that
 * stopped reading: about 400 MB (one element written, one buffered, one in hand, one in the
 * producer's next step).
 *
 * Failure modes: a pipeline that cannot be built or fails on an element, a bad split plan, an
 * element over max_element_bytes, or an out-of-memory fails the task: producers stop, elements
 * published before the failure are still served, and then every take reports the failure's code and
 * message. A pipeline function that neither returns nor notices the task's stop keeps the pool
 * thread it runs on: task_retire() gives that thread up and the pool starts another.
 *
 * Threading: task_start, task_free and everything marked "loop" are called on the loop thread
 * only; the task's mutex guards what producers and the loop share. The loop never waits on a
 * producer: stealing a producer's chunk uses a try-lock, and task_free is called only after
 * task_exited() is true. */
#ifndef SLUICE_WORKER_TASK_H
#define SLUICE_WORKER_TASK_H

#include "buffer.h"
#include "common/split_plan.h"
#include "lease.h"
#include "pipeline/prof.h"
#include "pipeline/spec.h"
#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Publish a private chunk once it holds this many bytes or records. */
#define TASK_CHUNK_BYTES (4u << 20)
#define TASK_CHUNK_RECORDS 8192u
/* While a reader waits, a producer (or the loop, by stealing) publishes a chunk whose first
 * record is older than this, trading a little latency for whole batches per reply. */
#define TASK_LINGER_NS 500000u
/* Default buffer bounds: producers park while the buffer holds this much. The bound on chunks
 * caps the allocation overhead when chunks are small (tiny splits end a chunk each). The byte
 * bound is kept small enough that what a producer wrote is still in the caches when the loop
 * writes it to the socket: with elements of 1 MiB, 64 MiB cost a fifth of the transfer rate
 * against 8 to 16 MiB, which still hold several replies' worth of lookahead. */
#define TASK_BUFFER_BYTES (16u << 20)
#define TASK_BUFFER_RECORDS (1u << 20)
#define TASK_BUFFER_CHUNKS 16384u
/* An element with a tensor of at least this many value bytes (and no compression attempted) is
 * not copied into a chunk: it goes out as an external chunk (buffer.h) written from the block
 * the pipeline produced it in. Up to TASK_SPARE_BLOCKS such blocks (together no larger than the
 * buffer's byte bound, TASK_SPARE_BYTES or the most the task's external chunks held at once,
 * whichever is largest) are kept once written, to be
 * handed back to the pipeline: a block taken from the allocator for each element of tens of MiB
 * costs more in page faults than producing and sending it. */
/* A reader's arena block for a value of n bytes (task_set_arena) has TASK_ARENA_HEAD bytes in
 * front of the value, where the record's bytes before it go, and at least TASK_ARENA_TAIL after
 * it, for the bytes after it. */
#define TASK_ARENA_HEAD 4096u
#define TASK_ARENA_TAIL 4096u
#define TASK_EXT_MIN (256u << 10)
#define TASK_SPARE_BLOCKS 8u
#define TASK_SPARE_BYTES (160u << 20)
/* A take of whole chunks (written without copying) spans at most this many chunks. */
#define TASK_TAKE_MAX_CHUNKS 32u
/* The largest encoded element a reply can carry (under the rpc frame limit). */
#define TASK_MAX_RECORD ((255u << 20) - 4096u)

struct pool;
struct sluice_registry;
struct task;

struct task_config {
    uint64_t id;
    enum sluice_mode mode;
    bool compress;         /* snappy when it pays (dataset compression AUTO) */
    uint32_t num_workers;  /* static sharding */
    uint32_t worker_index; /* static sharding */
    unsigned producers;    /* distributed_epoch producers, >= 1 */
    /* The pool the producers run on (pool.h); it outlives the task. NULL: a pool of the task's
     * own, one thread per producer (as a save's task always has). */
    struct pool *pool;
    const struct sluice_registry *reg; /* read-only; outlives the task */
    uv_async_t *wake;                  /* sent by producers; outlives the task */
    uint64_t buffer_bytes;             /* 0: TASK_BUFFER_BYTES */
    uint64_t buffer_records;           /* 0: TASK_BUFFER_RECORDS */
    /* The largest element (pipe_elem_size) the pipeline may produce; 0: no limit. The pipeline
     * refuses one it can size before allocating it (iter.h); any other fails the task when it
     * comes out. Either way the task fails with SLUICE_ERR_LIMIT's message. */
    uint64_t max_element_bytes;
    /* A save's task (docs/snapshots.md; distributed_epoch only): the snapshot directory, or
     * NULL. Its producers write the elements of each split into the split's chunk file there
     * (pipeline/snapshot.h) instead of the buffer, commit the chunk, and only then mark the split
     * finished, so what the dispatcher hears finished is on disk. A split left half-way (the task
     * stopped or failed) has its temporary file removed. With data roots, a directory outside
     * them fails the task. Copied by task_start. */
    const char *snapshot_path;
    /* The weight of the task's job (its --weight): the task's share of the pool's threads
     * against the other tasks' when they all want more (fair.h). 0 (or not finite): 1. */
    double weight;
};

/* Loop. Prepares the producers of a task over spec, which the task takes ownership of (also on
 * failure); they start at the first take, or at once for a save's task. Returns 0 and *out, or a
 * negative code with a message in err (then nothing runs). */
int task_start(const struct task_config *cfg, struct pipe_spec *spec, struct task **out, char *err,
               size_t errlen);

/* Loop. Queues the producers of a task that has not run yet on its pool, as its first take does;
 * nothing once they run, or once the task ended (stopped or drained before anyone asked). */
void task_begin(struct task *t);

/* Loop. A task that failed before anything could run (undecodable dataset, unknown function):
 * it has no producers and every take reports code and msg. */
int task_new_failed(uint64_t id, int code, const char *msg, struct task **out);

uint64_t task_id(const struct task *t);
bool task_is_distributed(const struct task *t);

enum task_take_status {
    TASK_TAKE_DATA,  /* out->wb holds records */
    TASK_TAKE_EMPTY, /* nothing now; more may come */
    TASK_TAKE_END,   /* nothing now and nothing more will come */
    TASK_TAKE_FAILED /* nothing now and the task failed: out->code, out->msg */
};

struct task_take {
    struct wbuf_take wb;
    int code;
    const char *msg; /* valid while the task lives */
};

/* Loop. Takes up to max_elements records and max_bytes bytes (at least one record when there
 * is one), see wbuf_take. Returns a task_take_status, or SLUICE_ERR_NOMEM. After TASK_TAKE_DATA
 * the caller sends the payload and then calls task_take_release. */
int task_take(struct task *t, uint32_t max_elements, uint64_t max_bytes, struct pipe_buf *scratch,
              struct task_take *out);
/* Loop. Like task_take, for a reply written from the chunks in place: whole chunks are taken
 * when they fit the limits (out->wb.whole: payload is NULL and the records are the chunks in
 * out->wb.spent, see wbuf_take_whole), else what task_take takes. The chunks stay valid until
 * task_take_release, which the caller calls once the reply is written. */
/* owner, when not 0, is a reader that takes splits whole (a deterministic read), asking over
 * connection conn (rpc_conn_serial): it is given only records of splits it owns or may take now
 * (splitown.h), TASK_TAKE_EMPTY when there are none. */
int task_take_whole(struct task *t, uint32_t max_elements, uint64_t max_bytes, uint64_t owner,
                    uint64_t conn, struct pipe_buf *scratch, struct task_take *out);

/* Loop. Connection conn (rpc_conn_serial) closed: the splits its readers owned may go to other
 * readers at once (splittab_conn_closed). Returns whether any did, so that the reads waiting
 * for them are served again. */
bool task_conn_closed(struct task *t, uint64_t conn);
void task_take_release(struct task *t, struct task_take *tk);

/* Loop. Tells producers whether a reader is waiting on an empty buffer. */
void task_set_waiting(struct task *t, bool waiting);
/* Loop. Publishes producers' private chunks whose first record is at least TASK_LINGER_NS old
 * at now_ns (uv_hrtime), skipping any producer busy appending. Returns the records published. */
uint64_t task_steal(struct task *t, uint64_t now_ns);

struct task_progress {
    bool done; /* every producer has exited */
    bool failed;
    bool finished;             /* done, not failed, buffer empty, every finished split reported */
    uint64_t buffered;         /* records in the buffer */
    uint64_t buffered_bytes;   /* their encoded bytes, length prefixes included */
    uint64_t produced;         /* records ever published (a save's task: elements written) */
    uint64_t chunks_committed; /* a save's task: snapshot chunks committed */
    /* distributed_epoch: no split queued or in production and the buffer empty: everything
     * produced was fetched (more splits may come). */
    bool settled;
    /* Summed over the producers: nanoseconds spent parked on a full buffer (consumers not
     * asking). Divided by producers and by an interval, it is the task's idle share. */
    uint64_t blocked_ns;
    unsigned producers;
    /* Summed over the producers: nanoseconds in each stage of the pipeline (pipeline/prof.h:
     * 0 the source, k + 1 operation k), estimated by sampling. */
    uint64_t stage_ns[PIPE_PROF_STAGES];
    /* Thread time the producers' slices took on the pool (fair.h: the task's share), in
     * nanoseconds, but for each producer's last slice. */
    uint64_t busy_ns;
};
void task_progress(struct task *t, struct task_progress *out);

/* The stages a task reports (TaskProgress.stages): the pipeline's (PIPE_PROF_STAGES of them),
 * then waiting for buffer space, then sending. */
#define TASK_STAGE_BUFFER_WAIT PIPE_PROF_STAGES
#define TASK_STAGE_SEND (PIPE_PROF_STAGES + 1)
#define TASK_STAGES_MAX (PIPE_PROF_STAGES + 2)
struct task_stage {
    char name[PIPE_PROF_NAME_MAX]; /* "" when the pipeline has no such stage */
    uint64_t ns;
};
/* Loop. Fills out[0..TASK_STAGES_MAX) from tp (task_progress of t) and send_ns (nanoseconds
 * the worker spent sending the task's replies): every stage has its fixed index, named or "". */
void task_stages(const struct task *t, const struct task_progress *tp, uint64_t send_ns,
                 struct task_stage *out);

/* Loop, distributed_epoch. Whether to send GetSplits now (see lease_want; with topup, whether it
 * may go with another task's, lease_want_topup); when true, *finished (valid until the next
 * call) holds *nfinished seqs to report and the request counts as sent. */
bool task_lease_want(struct task *t, uint64_t now_ms, bool topup, uint32_t *max_splits,
                     const uint64_t **finished, size_t *nfinished, const uint64_t **returned,
                     size_t *nreturned);
/* Loop. The GetSplits request failed; it is retried after a backoff. */
void task_lease_failed(struct task *t, uint64_t now_ms);
/* Loop. The GetSplits reply. plan (may be NULL: the wire SplitPlan's numbers and files) is
 * taken over (released here in every case); the first plan received gets what the task's dataset
 * says about reading it (pipe_split_plan_reads), is checked against the dataset and kept. A bad
 * plan, or seqs before any plan, fails the task (and returns its code). */
int task_lease_granted(struct task *t, struct split_plan *plan, const uint64_t *seqs, size_t n,
                       bool end_of_splits, uint64_t now_ms);

/* Loop, distributed_epoch. Seqs of the GetSplits reply's dropped list (lease_drop): those
 * queued and unstarted are never produced. Returns how many were removed. */
size_t task_lease_drop(struct task *t, const uint64_t *seqs, size_t n);

/* Loop, distributed_epoch. A resume entry of the GetSplits reply (splitown.h), recorded before
 * the seqs are granted: split seq leaves out the covered positions (ncovered values, begin/end
 * pairs) and goes to reader owner (0: whoever asks). Returns 0, SLUICE_ERR_INVALID or
 * SLUICE_ERR_NOMEM. */
int task_lease_resume(struct task *t, uint64_t seq, const uint64_t *covered, size_t ncovered,
                      uint64_t owner);

/* Loop. The task's failure code (0 when it has not failed) and, when failed, its message in
 * *msg (valid while the task lives). */
int task_error(struct task *t, const char **msg);

/* Loop. Fails the task with code and msg unless it failed already. */
void task_fail(struct task *t, int code, const char *msg);

/* Loop. The worker drains (SIGTERM). distributed_epoch: producers finish the splits they are on
 * and take no more; the splits leased and not started are handed back with the next GetSplits
 * (lease_drain), and the task finishes once the dispatcher says its consumers received all it
 * produced. Other modes: the producers stop (task_stop), what is buffered is still served, and
 * then the task ends: its copy of the data ends early. Returns 0 or SLUICE_ERR_NOMEM. */
int task_drain(struct task *t);

/* Loop. Asks the producers to stop; they exit after their current element (parked ones are
 * queued again to see it). */
void task_stop(struct task *t);
/* Loop. For a stopped task whose producers do not exit (a function that never returns and never
 * asks whether it was cancelled): the pool threads its producers' slices run on are given up to
 * them and the pool starts others in their place (pool_retire), so the worker's other tasks keep
 * the whole pool. The task exits, and may be freed, once the slices return. Returns the threads
 * given up (0 for a task on a pool of its own). */
unsigned task_retire(struct task *t);
/* Loop. Gives up on a stopped task whose producers do not exit (a function that never returns
 * and never asks whether it was cancelled): it is stopped, its producers never send cfg->wake
 * again, the threads they run on are retired (task_retire), and the caller forgets the task
 * without freeing it (nor what its producers may still use: the registry, its functions' code). A
 * producer that was about to send cfg->wake when it was abandoned may still do so, so the caller
 * keeps the loop running a few iterations. */
void task_abandon(struct task *t);
/* Any thread. Tasks abandoned in this process so far. */
unsigned task_abandoned_count(void);
/* Loop. Whether every producer has exited and no slice of the task runs (after which cfg->wake
 * is no longer sent and the pool holds no reference to the task). */
bool task_exited(struct task *t);
/* Loop. Frees everything (its producers must have exited: task_exited). */
void task_free(struct task *t);

struct shm_region;
/* Loop. The shared region whose arena the producers build large values in from now on (one
 * reference taken), or NULL for none: set to the region of the connection the task's replies go
 * to, so a task read by one reader on this host builds them there. */
void task_set_arena(struct task *t, struct shm_region *r);
/* Loop. Moves the blocks of r's arena that the task's buffer and its producers' pending chunks
 * hold into memory of the worker's own, and wakes its producers parked for room, which give back
 * their element's blocks of arenas whose connection ended before they park again: r's memory goes
 * soon after its connection ends (the pending chunk of a producer appending right now may keep one
 * until it is sent elsewhere or the task ends). */
void task_evict_arena(struct task *t, const struct shm_region *r);

#endif
