/* What a task's files share (task.c: the buffer, the task's life, takes and leases;
 * task_producers.c: the producers' slices): the task's struct and its producers', and the
 * buffer's helpers the producers use. The locks and the chunks' invariant are described in
 * task.c. */
#ifndef SLUICE_WORKER_TASK_INTERNAL_H
#define SLUICE_WORKER_TASK_INTERNAL_H

#include "task.h"

#include "pool.h"
#include "splitown.h"

#include "common/error.h"
#include "pipeline/codec.h"
#include "pipeline/element.h"
#include "pipeline/iter.h"
#include "pipeline/open.h"
#include "pipeline/split.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct spare_block {
    uint8_t *p;
    size_t cap;
};

struct shm_region;
/* A block of a reader's arena (task_set_arena) on loan to a producer's tensor, and then to the
 * external chunk that takes it (buffer.h ext_lender): the tensor's values start TASK_ARENA_HEAD
 * bytes into it. The last reference gives it back to the region. */
struct arena_loan {
    struct pipe_lender lender;
    _Atomic unsigned refs;
    struct shm_region *region;
    uint8_t *block;
};

/* Whether l is an arena_loan's. */
bool task_is_arena_loan(const struct pipe_lender *l);
/* Moves external chunk c's block out of r's arena into memory of its own, when it is there; out
 * of memory, it stays. */
void task_chunk_evict(struct wbuf_chunk *c, const struct shm_region *r);

/* Where a producer is between its slices (task_producers.c). */
enum producer_phase {
    PROD_OPEN,       /* not started: checks, sharding and the pipeline still to open */
    PROD_RUN,        /* producing from run (the whole pipeline, or the split seq) */
    PROD_NEXT_SPLIT, /* distributed_epoch: the next split still to take from the lease queue */
    PROD_END_SPLIT,  /* the split's elements are out: its end marker still to append */
    PROD_SPLIT_DONE, /* the end marker is out: the split still to mark finished */
    PROD_FLUSH,      /* ended with rc: what it holds still to publish (unless cancelled) */
};

/* Why a producer waits between slices (task mutex). */
enum producer_park {
    PARK_NONE,
    PARK_SPACE, /* the buffer was over its bound: whoever frees room wakes it */
    PARK_LEASE, /* no split was leased: task_lease_granted (or a stop or drain) wakes it */
};

/* A producer: a resumable state machine run in slices by the pool's threads (pool.h); what
 * lived on a producer thread's stack lives here. Only the slice that runs touches it, except
 * chunk (producer mutex) and park, parked_since (task mutex). */
struct producer {
    struct pool_job job; /* first: task_producers.c turns a job into its producer */
    struct task *t;
    enum producer_phase phase;
    int rc;                       /* PROD_FLUSH: how it ended */
    char err[SLUICE_ERRMSG_SIZE]; /* the failure's message */
    struct pipe_run *run;         /* the open pipeline, or NULL */
    struct pipe_spec *sharded;    /* parallel_epochs, static modes: the rewritten spec */
    uint64_t seq;                 /* distributed_epoch: the split in hand */
    bool in_split;                /* seq was popped and is neither finished nor abandoned */
    /* publish: chunk must be published before anything else happens (it was due when the
     * buffer was full); ext: an external chunk to push right after it. */
    bool publish;
    struct wbuf_chunk *ext;
    enum producer_park park;
    uint64_t parked_since; /* PARK_SPACE: when it parked (uv_hrtime) */
    uv_mutex_t mu;         /* guards chunk */
    struct wbuf_chunk *chunk;
    struct sluice_element elem;
    unsigned evictions_seen; /* task.evictions when it last looked */
    struct pipe_buf scratch;
    uint64_t last_ns; /* when the producer last looked at the clock while a reader waited */
    /* Elements to append before it looks again: elements that come fast (PRODUCER_CLOCK_EVERY
     * of them well within the linger) are not timed one by one (task_producers.c produce). */
    unsigned clock_skip;
    /* Adaptive compression: after TASK_COMPRESS_PROBES elements in a row that snappy could not
     * shrink, the next skip_len elements are stored raw without trying (skip_left counts them
     * down); skip_len doubles while probes keep failing and resets when one pays. */
    unsigned misses;
    uint32_t skip_len, skip_left;
    /* distributed_epoch: every element is tagged with the split it comes from and its position
     * in it (codec.h), so a consumer can tell a split's elements apart when it is re-issued. */
    bool tagging;
    struct codec_tag tag;
    struct ranges skip; /* positions of the split in hand its consumers had (splitown.h) */
};

struct task {
    uint64_t id;
    enum sluice_mode mode;
    bool compress;
    uint32_t num_workers, worker_index;
    const struct sluice_registry *reg;
    _Atomic(uv_async_t *) wake; /* NULL once the task is abandoned */
    uint64_t max_bytes, max_records;
    struct pipe_limits limits; /* read-only once the producers run */
    struct pipe_prof prof;     /* limits.prof: where the producers' pipelines spend their time */
    struct pipe_spec *spec;
    char *snap_dir;            /* a save's task: the snapshot directory (owned); NULL otherwise */
    uint64_t chunks_committed; /* task mutex */

    uv_mutex_t mu;
    struct wbuf buf;
    struct wbuf_chunk *free_chunks;
    unsigned nfree;
    /* Blocks of external chunks that were written, kept (newest last) to be installed in a
     * producer's element in place of the block the next external chunk takes away. */
    struct spare_block spare[TASK_SPARE_BLOCKS];
    unsigned nspare;
    uint64_t spare_bytes; /* their total size (task.c spare_put_locked) */
    /* The blocks external chunks hold now (taken from a producer's tensor, not yet back in the
     * spares), and the most they held at once: the spares may keep that much, so a steady
     * stream of large elements whose chunks in flight outnumber the fixed bound still reuses
     * its blocks. */
    uint64_t ext_bytes, ext_peak;
    struct shm_region *arena; /* task_set_arena */
    /* Bumped by task_evict_arena: producers then give back their element's blocks of arenas
     * whose connection ended (task_producers.c drop_stopped_loans). */
    _Atomic unsigned evictions;
    unsigned space_waiters; /* producers parked for space */
    unsigned lease_waiters; /* producers parked for a lease */
    unsigned alive;         /* producers not yet exited */
    bool done;
    uint64_t produced;
    uint64_t blocked_ns; /* summed over producers: time spent parked for room in the buffer */
    /* Producers parked for space right now, and the sum of the times they parked, so a long
     * wait counts while it lasts rather than all at once when it ends. */
    unsigned nblocked;
    uint64_t blocked_since_sum;
    int err_code;
    char err_msg[SLUICE_ERRMSG_SIZE];
    struct lease_queue lease;
    struct split_tables splits; /* resume entries and owners of splits (splitown.h) */
    struct split_plan plan;
    bool have_plan;

    atomic_int stop; /* set when stopped or failed: producers finish up and exit */
    /* Its cancel flag is set with stop; it is the parent of every run's context (limits), so a
     * pipeline blocked inside next() (a snapshot source waiting for a chunk) gives up too. */
    struct pipe_ctx cancel;
    atomic_int waiting; /* a reader waits on an empty buffer */

    uint64_t *report; /* loop only: finished seqs of the GetSplits in flight */
    size_t report_cap;
    uint64_t *returned; /* loop only: handed-back seqs of the GetSplits in flight */
    size_t returned_cap;

    struct producer *producers;
    bool started;            /* loop only: the producers were queued, or the task ended unstarted */
    unsigned nproducers;     /* producers whose mutex exists */
    struct pool *pool;       /* where the producers run */
    struct pool *own_pool;   /* a pool of the task's own (a save's task), or NULL */
    struct fair_share share; /* the producers' share of the pool's threads (the pool's) */
    /* Producers inside a slice right now. A slice's last access to the task is to decrement
     * it, so a task with alive and in_slice both 0 is touched by no thread (task_exited). */
    atomic_uint in_slice;
};

/* Whether the buffer is at one of its bounds. Task mutex held. */
bool task_over_limit(const struct task *t);
/* Records the first failure and stops the producers. Task mutex held. */
void task_fail_locked(struct task *t, int code, const char *msg);
/* Queues again the producers parked for why (PARK_NONE: for anything). Task mutex held. */
void task_unpark_locked(struct task *t, enum producer_park why);
/* Returns a spare chunk or a new empty one; NULL when out of memory. Task mutex not held. */
struct wbuf_chunk *task_chunk_get(struct task *t);
/* Wakes the loop thread (the task's async), unless the task is abandoned. */
void task_wake_loop(struct task *t);
/* One slice of a producer (its pool job; pool.h): runs the task's pipeline, or its splits, into
 * the buffer until the buffer is full or no split is leased (POOL_PARK), its budget is spent
 * (POOL_YIELD), or the end, a failure or a stop (POOL_DONE, once it has exited). */
enum pool_slice task_producer_slice(struct pool_job *job);

#endif
