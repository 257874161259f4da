/* The dispatcher's state machine (docs/design.md §1, §4, §6). Pure: no libuv, no LMDB, no clock, no
 * randomness, no logging, no protobuf.
 *
 * Everything the dispatcher knows that must survive a restart lives in struct state and changes
 * only through state_apply(state, update). The shell (server.c) decides what should happen —
 * it calls the pure planning functions below, which read the state and append updates to a
 * list — then applies them with state_apply() at once (so the next request, possibly planned
 * before this one's journal write completes, plans against them), journals them (fault-tolerant
 * mode), and replies only once they are durable. A journal failure is fatal, so no reply ever
 * reveals a change that a restart could lose. Replay after a restart calls the same
 * state_apply() on the journaled updates, so live and replayed states are identical.
 *
 * Soft state that is rebuilt after a restart (heartbeat times, connections, rates) is NOT here;
 * the shell keeps it beside the state.
 *
 * Ids: every id is chosen by the planning functions from the state's counters, written into the
 * update, and state_apply() raises the counters past it, so ids never repeat, also across
 * restarts.
 *
 * Ownership: struct state owns all its memory; an update owns its strings and arrays until
 * st_update_release(). Lookups return pointers into the state that stay valid until the next
 * state_apply(). Not thread-safe: the loop thread owns the state. */
#ifndef SLUICE_DISPATCHER_STATE_H
#define SLUICE_DISPATCHER_STATE_H

#include "common/u64map.h"
#include "common/mode.h"
#include "common/sha256.h"
#include "common/split_plan.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_ID_MAX 128 /* dataset ids and job names, including the NUL */
#define ST_ADDR_MAX 256
/* Host ids (common/hostid.h), including the NUL; "" is an unknown host, local to nobody. */
#define ST_HOST_MAX 128

/* Capabilities. A secret is ST_KEY_LEN random bytes the shell draws and writes into an update
 * (the state machine never draws one); has_key false marks a row journaled before secrets
 * existed, which is not checked (see plan_worker_heartbeat and the shell's client
 * checks). Secrets never appear in status, metrics or logs. */
#define ST_KEY_LEN 16

struct st_key {
    bool set;
    uint8_t b[ST_KEY_LEN];
};

/* Whether a secret presented on the wire (len bytes at p) is key, compared in constant time.
 * A key that is not set matches nothing (callers decide what an unset key means). */
bool st_key_matches(const struct st_key *key, const uint8_t *p, size_t len);

enum st_iteration_state { ST_ITER_ACTIVE = 0, ST_ITER_FINISHED = 1, ST_ITER_GC = 2 };
/* "active", "finished" or "garbage_collected" (the names of status and the metrics). */
const char *st_iteration_state_name(enum st_iteration_state state);

struct st_dataset {
    char id[ST_ID_MAX];
    uint8_t *def; /* serialized DatasetDef */
    size_t def_len;
    int compression; /* Sluice__Compression value */
    uint64_t split_size;
    char *text;     /* canonical pipeline text */
    bool generated; /* the id was generated from next_dataset_id (a decimal counter) */
    /* SHA-256 of text (hex), derived when the dataset enters the state (apply or snapshot), so
     * that the status document can name a pipeline without copying it. Not journalled. */
    char digest[SHA256_HEX_LEN + 1];
};

struct st_job {
    uint64_t id;
    char name[ST_ID_MAX]; /* empty for anonymous jobs */
    char dataset_id[ST_ID_MAX];
    enum sluice_mode mode;
    uint32_t num_consumers;
    uint64_t iteration_id; /* the current (latest) iteration */
    /* distributed_epoch read in the canonical order: its consumers reorder, and may ask for
     * splits to be produced again (plan_splits_redo). */
    bool deterministic;
    /* Read with a cross-trainer cache of this many bytes per task (docs/reading.md "Cross-trainer
     * cache"); 0: without. Sent to the workers in every TaskDef. */
    uint64_t xtc_bytes;
    /* Which workers its readers read from (docs/reading.md "Local workers"). A local job's
     * iterations get tasks only on workers whose host is the host of one of the iteration's
     * clients. */
    enum sluice_target_workers target_workers;
};

/* A read restored from a checkpoint: the splits its reader had whole (nbounds values, half-open
 * ranges begin0, end0, ...; sorted, disjoint, non-empty) and the fingerprint of the split plan
 * it was taken under. */
struct st_resume {
    const uint64_t *bounds;
    size_t nbounds;
    uint64_t plan_fingerprint;
};
/* A restored iteration's pool may hold at most this many splits (the gaps below its furthest
 * finished split: the splits that were in flight). */
#define ST_RESUME_POOL_MAX (1u << 16)

/* A list of split sequence numbers. Every list in the state and in an update is strictly
 * increasing (state_apply() refuses an update whose list is not). */
struct st_seq_list {
    uint64_t *v;
    size_t n, cap;
};

/* Coordinated reads (a job with num_consumers > 0) go in rounds 0, 1, 2, ...: in round r every
 * consumer reads one element from the same task, consumer c the c-th element of the round. The
 * dispatcher decides which task serves which round, and every consumer follows that decision:
 *
 *   - The schedule is a list of epochs. From an epoch's start round until the next epoch's
 *     start, round r goes to tasks.v[(r - start) % tasks.n] (tasks in increasing id order); an
 *     epoch with no task serves no round. A coordinated iteration's first epoch starts at round
 *     0; rounds before the first epoch still kept (older ones are dropped beyond
 *     ST_ROUND_EPOCHS_MAX) are gone: a consumer still there fell too far behind.
 *   - Rounds are granted: consumers read only rounds below rounds_granted as they last heard it,
 *     so the schedule of every round below it is fixed for good. rounds_granted grows as
 *     consumers report their progress (plan_client_heartbeat).
 *   - When the set of tasks serving the iteration changes (a task is created on a new worker, or
 *     its worker starts draining, is removed, or its task finished), a new epoch begins at
 *     rounds_granted: a round no consumer has reached, so all of them switch at the same round.
 *     A task that leaves (draining) keeps serving its rounds below that; the rounds of a task
 *     that is removed and were not served yet are served by nobody (every consumer skips them,
 *     see src/client/tasks.h).
 *
 * Updates record every decision (ROUNDS_SCHEDULED, ROUNDS_GRANTED), so a restarted dispatcher
 * keeps the schedule and the grant it gave out. */
#define ST_ROUND_EPOCHS_MAX 32

struct st_round_epoch {
    uint64_t start;
    struct st_seq_list tasks; /* the serving tasks, increasing ids; may be empty */
};

struct st_iteration {
    uint64_t id;
    uint64_t job_id;
    uint64_t repetition;
    enum st_iteration_state state;
    bool distributed;
    /* Fixed when the iteration is created (file lists are expanded once, on the thread pool, then
     * journaled with it). The state holds what the journal holds, the numbers and the files: kind,
     * shuffled and seed stay zero (the dispatcher counts and fingerprints splits but never reads
     * one), so a plan is the same after a restart as before it. */
    struct split_plan plan;
    uint64_t split_total;    /* UINT64_MAX when infinite */
    uint64_t split_cursor;   /* next never-leased split */
    struct st_seq_list pool; /* splits handed back, to be leased again first */
    uint64_t splits_finished;
    uint64_t splits_leased; /* leased and not finished: the sum of its tasks' leased.n */
    /* Every split leased and not finished -> the task holding it: the tasks' leases indexed by
     * split (derived state, kept by state_apply and rebuilt by state_reindex; never journaled),
     * so that a consumer's report of k splits costs k lookups whatever the number of tasks. */
    struct u64map held;
    uint64_t held_low; /* the lowest split in held, while it holds any */
    /* The sum of state_task_mix() over the iteration's tasks (derived like held): the digest of
     * its task list in O(1), whatever the number of tasks. */
    uint64_t tasks_sum;
    /* Coordinated reads only (see above): starts strictly increasing, every start at most
     * rounds_granted; freed when the iteration is garbage-collected. */
    uint64_t rounds_granted;
    struct st_round_epoch *epochs;
    size_t nepochs;
    /* The secret from which the shell derives its clients' capabilities and its tasks' secrets
     * (src/common/cap.h); it never leaves the dispatcher. Not set for iterations created before
     * secrets existed. */
    struct st_key key;
    /* Why the iteration failed (malloc'd), or NULL: a task's pipeline failed (ITERATION_FAILED).
     * A failed iteration gets no new tasks, its readers get this message instead of more
     * elements, and it is garbage-collected like any other once no client holds it. */
    char *error;
};

/* last_request and granted make GetSplits idempotent: a worker that lost the reply to its
 * request (the dispatcher died after journaling the lease, or the connection dropped) repeats the
 * request under the same number and is answered with the same lease instead of a new one, which
 * would leave the first lease held by the task forever. */
struct st_task {
    uint64_t id;
    uint64_t iteration_id;
    uint64_t worker_id;
    bool finished;
    struct st_seq_list leased;  /* distributed: splits leased to this task and not finished */
    uint64_t last_request;      /* the request number of the task's last numbered lease; 0: none */
    struct st_seq_list granted; /* the seqs that lease granted (some may be finished since) */
};

struct st_worker {
    uint64_t id;
    char address[ST_ADDR_MAX];
    uint64_t incarnation;
    bool draining;
    struct st_key key; /* the secret the worker registered with; not set in older journals */
    char host_id[ST_HOST_MAX]; /* its host; "" in older journals (unknown) */
};

struct st_client {
    uint64_t id;
    uint64_t iteration_id;
    /* The incarnation of the sluice_client that acquired it (its connection's Hello), which the
     * per-client job limit counts by; 0 when unknown (acquired before owners were recorded). */
    uint64_t owner;
    char host_id[ST_HOST_MAX]; /* the reader's host; "" when unknown (older journals) */
};

/* Bounds on what peers may make the dispatcher hold (--max-datasets, --max-pipeline-bytes,
 * --max-jobs-per-client). Configuration, not history: the shell sets them, planning refuses
 * what would go past them (SLUICE_ERR_LIMIT), apply, replay, snapshots and digests ignore them,
 * so lowering a limit never makes a journal unreadable. 0 means no limit. */
struct st_limits {
    uint64_t max_datasets;        /* datasets registered at once */
    uint64_t max_pipeline_bytes;  /* a dataset's definition bytes, and its pipeline text */
    uint64_t max_jobs_per_client; /* clients (open reads) one sluice_client holds at once */
};

/* Tables are arrays kept sorted by id (datasets by their id string with strcmp; names and
 * addresses are looked up by scan). The sizes are bounded by what the cluster holds, not by
 * history: removed rows are deleted. Garbage collection deletes an anonymous job together with
 * its iteration; a named job keeps its collected iteration (state ST_ITER_GC, split plan and
 * pool freed) until its next iteration replaces it, so the repetition count carries on.
 *
 * Invariants that state_apply() maintains: at most one worker per address; at most one task per
 * (iteration, worker); at most one iteration per job (the current one); a finished task holds no
 * leased splits; every task's iteration and worker exist; every client's iteration exists; a
 * task's granted seqs are empty when its last_request is 0, and all below its iteration's split
 * cursor; no update carries the id UINT64_MAX (it would wrap the counter raised past it). */
/* Saves of a dataset into a snapshot directory (docs/snapshots.md). "Save", because "snapshot"
 * in the dispatcher means the journal's state snapshot. A save is an anonymous distributed_epoch
 * job over the dataset whose tasks write each split they are leased into that split's chunk file
 * (chunk i = split i) instead of serving it, and report the split finished once the chunk is
 * committed: the iteration's finished splits are the committed chunks, so a restart or a
 * worker's death leases again only chunks not yet committed. Rows are never deleted, so ids are
 * the last row's id + 1; a path has one row, or several when a failed save was started again
 * (every row of a path but the newest failed). While a save runs, its iteration gets a
 * task on every worker although no client holds it, and is not garbage-collected. */
#define ST_PATH_MAX 1024 /* a snapshot path, including the NUL */

enum st_save_state { ST_SV_RUNNING = 0, ST_SV_FINISHED = 1, ST_SV_FAILED = 2 };
/* "running", "finished" or "failed". */
const char *st_save_state_name(enum st_save_state state);

struct st_save {
    uint64_t id;
    char dataset_id[ST_ID_MAX];
    char *path;                    /* absolute snapshot directory (malloc'd) */
    uint64_t job_id, iteration_id; /* may be collected once the save is over */
    uint64_t chunks;               /* the iteration's split total */
    enum st_save_state state;
    char *error; /* why it failed (malloc'd), or NULL */
};

/* One entry of an index of tasks: by worker (key = the task's worker, struct state.by_worker) or
 * by iteration (key = its iteration, struct state.by_iteration). */
struct st_task_ref {
    uint64_t key, task_id;
};

struct state {
    uint64_t next_dataset_id, next_job_id, next_iteration_id, next_task_id, next_worker_id,
        next_client_id;
    uint64_t applied; /* updates applied since the beginning of history */
    struct st_dataset *datasets;
    size_t ndatasets, cap_datasets;
    struct st_job *jobs;
    size_t njobs, cap_jobs;
    struct st_iteration *iterations;
    size_t niterations, cap_iterations;
    struct st_task *tasks;
    size_t ntasks, cap_tasks;
    struct st_worker *workers;
    size_t nworkers, cap_workers;
    /* The workers' ids by increasing address (derived, like by_worker): a worker is found by
     * its address in log time. */
    uint64_t *by_address;
    size_t nby_address, cap_by_address;
    struct st_client *clients;
    size_t nclients, cap_clients;
    struct st_save *saves;
    size_t nsaves, cap_saves;
    /* Derived, not history: every task as (worker id, task id), sorted, so a worker's tasks are
     * found without a pass over all of them (the state has a task per worker per iteration).
     * Apply keeps it; a decoded snapshot builds it (state_reindex); snapshots and digests ignore
     * it. */
    struct st_task_ref *by_worker;
    size_t nby_worker, cap_by_worker;
    /* The same by (iteration id, task id): an iteration's tasks (a shared job's iteration has one
     * per worker) without a pass over every task of the cluster. */
    struct st_task_ref *by_iteration;
    size_t nby_iteration, cap_by_iteration;
    /* Configuration, not history: the number of fixed workers of the static sharding modes
     * (--worker-addresses). The shell sets it after recovery; planning reads it (an iteration of
     * a static mode finishes only once every fixed worker finished its shard); apply, snapshots
     * and digests ignore it. */
    uint32_t static_workers;
    /* Configuration too: see struct st_limits. */
    struct st_limits limits;
};

/* ---- updates --------------------------------------------------------------------------------- */

enum st_update_type {
    ST_DATASET_REGISTERED = 1,
    ST_JOB_CREATED = 2,
    ST_ITERATION_CREATED = 3,
    ST_TASK_CREATED = 4,
    ST_TASK_FINISHED = 5,
    ST_TASK_REMOVED = 6,
    ST_WORKER_REGISTERED = 7,
    ST_WORKER_REMOVED = 8,
    ST_CLIENT_ACQUIRED = 9,
    ST_CLIENT_RELEASED = 10,
    ST_SPLITS_LEASED = 11,
    ST_SPLITS_FINISHED = 12,
    ST_SPLITS_RETURNED = 13,
    ST_ITERATION_FINISHED = 14,
    ST_ITERATION_GC = 15,
    ST_WORKER_DRAINING = 16,
    ST_ROUNDS_SCHEDULED = 17,
    ST_ROUNDS_GRANTED = 18,
    ST_ITERATION_FAILED = 19,
    ST_SAVE_STARTED = 20,
    ST_SAVE_FINISHED = 21,
    ST_SAVE_FAILED = 22
};
const char *st_update_name(enum st_update_type type);

/* The fields each type uses (all others are zero):
 *   DATASET_REGISTERED  name = dataset id, id = its number when generated (0 for an explicit
 *                       id), def/def_len, compression, split_size, text
 *   JOB_CREATED         id = job, name = job name ("" when anonymous), name2 = dataset id,
 *                       mode, num_consumers, deterministic, xtc_bytes, target_workers
 *   ITERATION_CREATED   id = iteration, ref = job, ref2 = repetition, distributed, plan,
 *                       key (the shell sets it after planning: planning draws no randomness);
 *                       restored from a checkpoint: start = the split cursor, seqs = the pool
 *                       (every split below start not in seqs is finished)
 *   TASK_CREATED        id = task, ref = iteration, ref2 = worker
 *   TASK_FINISHED       id = task
 *   TASK_REMOVED        id = task, ref = its iteration (informational)
 *   WORKER_REGISTERED   id = worker, address, incarnation, key (the worker's own secret),
 *                       host_id (its host; "" unknown)
 *   WORKER_REMOVED      id = worker
 *   WORKER_DRAINING     id = worker
 *   CLIENT_ACQUIRED     id = client, ref = iteration, incarnation = owner (see st_client),
 *                       host_id (the reader's host; "" unknown)
 *   CLIENT_RELEASED     id = client
 *   SPLITS_LEASED       ref = iteration, ref2 = task, seqs: pool entries first, then the next
 *                       seqs from the cursor in order; id = the worker's request number, above
 *                       the task's last_request (the update makes it last_request and seqs the
 *                       task's granted), or 0 for an unnumbered request (the task's record of
 *                       its last request stays as it is)
 *   SPLITS_FINISHED     ref = iteration, ref2 = task, seqs: splits leased to the task; or
 *                       ref2 = 0, seqs: splits in the iteration's pool (a consumer received
 *                       them in full before they were leased again)
 *   SPLITS_RETURNED     ref = iteration, ref2 = task, seqs: splits leased to the task, moved
 *                       to the pool
 *   ITERATION_FINISHED  id = iteration
 *   ITERATION_GC        id = iteration (its tasks are removed by earlier updates)
 *   ROUNDS_SCHEDULED    ref = a coordinated iteration, ref2 = the round the epoch starts at,
 *                       which is the iteration's rounds_granted (an epoch already starting
 *                       there is replaced: no consumer has read it), seqs = its tasks (may be
 *                       empty); the oldest epoch is dropped beyond ST_ROUND_EPOCHS_MAX
 *   ROUNDS_GRANTED      ref = a coordinated iteration, ref2 = its new rounds_granted (higher)
 *   ITERATION_FAILED    id = an active iteration that has not failed yet, text = why (a task's
 *                       failure, as its worker reported it)
 *   SAVE_STARTED        id = save (the last save's id + 1), ref = its job, ref2 = its iteration
 *                       (an active distributed one of an anonymous job of the dataset, created
 *                       by earlier updates), name = dataset id, text = path (absolute, shorter
 *                       than ST_PATH_MAX, and no save into it or the last one there failed);
 *                       chunks = the iteration's split total
 *   SAVE_FINISHED       id = a running save
 *   SAVE_FAILED         id = a running save, text = why */
struct st_update {
    enum st_update_type type;
    uint64_t id;           /* the main id: dataset number, job, iteration, task, worker or client */
    uint64_t ref;          /* a second id: job of an iteration, iteration of a task/client/lease */
    uint64_t ref2;         /* task of a lease; worker of a task; repetition of an iteration */
    char name[ST_ID_MAX];  /* dataset id; job name */
    char name2[ST_ID_MAX]; /* dataset id of a job */
    char address[ST_ADDR_MAX];
    uint64_t incarnation;
    int mode; /* job mode */
    uint32_t num_consumers;
    bool deterministic; /* JOB_CREATED */
    uint64_t xtc_bytes; /* JOB_CREATED: the job's cross-trainer cache bound; 0: none */
    int compression;
    uint64_t split_size;
    uint8_t *def; /* dataset definition bytes (owned) */
    size_t def_len;
    char *text; /* pipeline text (owned) */
    bool distributed;
    struct split_plan plan;    /* ITERATION_CREATED (owned) */
    struct st_seq_list seqs;   /* SPLITS_*, ROUNDS_SCHEDULED (owned) */
    struct st_key key;         /* WORKER_REGISTERED, ITERATION_CREATED */
    uint64_t start;            /* ITERATION_CREATED: the split cursor (a restored read) */
    int target_workers;        /* JOB_CREATED: enum sluice_target_workers */
    char host_id[ST_HOST_MAX]; /* WORKER_REGISTERED, CLIENT_ACQUIRED */
};

struct st_update_list {
    struct st_update *v;
    size_t n, cap;
};

void st_update_release(struct st_update *u);
/* Appends a zeroed update of the given type and returns it, or NULL when out of memory. */
struct st_update *st_update_list_push(struct st_update_list *l, enum st_update_type type);
void st_update_list_clear(struct st_update_list *l); /* releases every update; keeps capacity */
void st_update_list_release(struct st_update_list *l);

/* The worker whose heartbeat reply u changes, as u would be applied to s next (0: none). A
 * worker's heartbeat reply shows its registration, its unfinished tasks and the tasks it no
 * longer has: TASK_CREATED, TASK_FINISHED and TASK_REMOVED of its tasks, and WORKER_REGISTERED,
 * WORKER_REMOVED and WORKER_DRAINING of itself change it; nothing else does (an iteration or a
 * job reaches a worker only through a task created after it). The shell lets a heartbeat that
 * changes nothing answer as soon as every update returned here for its worker is durable,
 * rather than after everything queued. */
uint64_t st_update_worker(const struct state *s, const struct st_update *u);

/* ---- applying -------------------------------------------------------------------------------- */

/* An empty state; every counter starts at 1, so id 0 always means "none". */
void state_init(struct state *s);
void state_release(struct state *s);

/* Applies one update. Returns 0, SLUICE_ERR_NOMEM, or SLUICE_ERR_CORRUPT when the update does
 * not fit the state (an unknown id, a duplicate id, the id UINT64_MAX, a lease's request number
 * not above the task's last one): live, planning never produces such updates; on replay it means
 * the journal is damaged. On error the state is unchanged. */
int state_apply(struct state *s, const struct st_update *u);

/* A digest of the whole durable state (FNV-1a over a canonical walk), for tests comparing live,
 * replayed and restored states. */
uint64_t state_digest(const struct state *s);

/* ---- lookups --------------------------------------------------------------------------------- */

const struct st_dataset *state_dataset(const struct state *s, const char *id);
const struct st_job *state_job(const struct state *s, uint64_t id);
/* The named job of a dataset: jobs are identified by (dataset id, job name), as in tf.data
 * service, so one name on two datasets names two independent jobs. NULL for an empty name. */
const struct st_job *state_job_by_key(const struct state *s, const char *dataset_id,
                                      const char *name);
const struct st_iteration *state_iteration(const struct state *s, uint64_t id);
const struct st_task *state_task(const struct state *s, uint64_t id);
const struct st_worker *state_worker(const struct state *s, uint64_t id);
const struct st_worker *state_worker_by_address(const struct state *s, const char *address);
const struct st_client *state_client(const struct state *s, uint64_t id);
const struct st_save *state_save(const struct state *s, uint64_t id);
/* The newest save into path (a failed one may have been followed by another), or NULL. */
const struct st_save *state_save_by_path(const struct state *s, const char *path);
/* The running save whose iteration is iteration_id, or NULL. A binary search: saves are kept in
 * increasing order of id and of iteration id (every save starts with an iteration of its own,
 * newer than any before it), which state_apply() and the snapshot decoder enforce. It is asked
 * on every GetSplits and for every iteration a worker heartbeat or a tick looks at. */
const struct st_save *state_save_running(const struct state *s, uint64_t iteration_id);

/* ---- planning: pure decisions that append updates -------------------------------------------- */

/* Each returns 0 after appending the updates that carry out the request to out (possibly none),
 * or a negative code with a one-line message in err when the request must be refused (nothing
 * appended). The shell then journals and applies the list in order. */

/* Registers a dataset. An empty id asks for a generated one: the decimal string of the lowest
 * unused number from next_dataset_id on; but when a dataset with a generated id already has the
 * same definition bytes, compression and split size, its id is returned and nothing appended,
 * so readers that register the same pipeline share one dataset (and can share a named job).
 * The same explicit id with the same definition, compression and split size is accepted (no
 * update); otherwise it is SLUICE_ERR_EXISTS naming what differs ("dataset 'x' already exists
 * with a different pipeline", "... with compression none, not auto", "... with split_size 8,
 * not 16"). An id that is not a valid name (common/names.h: UTF-8 without control characters,
 * at most NAME_ID_MAX bytes) is SLUICE_ERR_INVALID ("dataset id: not valid UTF-8 at byte 3").
 * Limits (s->limits): a definition or text longer than max_pipeline_bytes is SLUICE_ERR_LIMIT
 * ("pipeline of 2000000 bytes is over the limit of 1048576 bytes (--max-pipeline-bytes)"), and
 * a new dataset when max_datasets are registered is SLUICE_ERR_LIMIT ("dataset limit reached:
 * 10000 datasets (--max-datasets)"); an existing dataset is still found. id_out (ST_ID_MAX
 * bytes) receives the dataset id. text may be NULL (stored as ""). */
int plan_register_dataset(const struct state *s, const char *id, const uint8_t *def, size_t def_len,
                          int compression, uint64_t split_size, const char *text, char *id_out,
                          struct st_update_list *out, char *err, size_t errlen);

/* The largest cross-trainer cache a job may ask each of its tasks to keep. */
#define ST_XTC_MAX_BYTES (64ull << 30)

/* What a read asks of plan_get_or_create_job(). Zero is the default of every field: an anonymous
 * parallel_epochs job over a pipeline that ends, read from any worker by a reader of unknown host
 * and owner, without a split plan and not restored from a checkpoint. */
struct plan_job_request {
    /* The dataset read (required). An unknown dataset is SLUICE_ERR_NOT_FOUND ("dataset 'x' not
     * found"); an id that is not a valid name (common/names.h) SLUICE_ERR_INVALID. */
    const char *dataset_id;
    /* NULL or "": an anonymous job, never shared. A named job is identified by (dataset, name):
     * the same name on another dataset is another job. A name that is not a valid name is
     * SLUICE_ERR_INVALID ("job name: control character at byte 2"). */
    const char *job_name;
    /* The processing mode; 0: parallel_epochs. A value that is not a mode is SLUICE_ERR_INVALID. */
    enum sluice_mode mode;
    /* > 0: a coordinated read of that many consumers (rounds: see struct st_round_epoch); it needs
     * an endless pipeline, else SLUICE_ERR_UNSUPPORTED, "num_consumers needs an infinite
     * pipeline: 'range(100)' ends; add repeat()". */
    uint32_t num_consumers;
    /* A distributed_epoch read in the canonical order; it needs mode distributed_epoch and no
     * num_consumers, else SLUICE_ERR_UNSUPPORTED ("deterministic reads need mode
     * distributed_epoch without num_consumers, not parallel_epochs"). */
    bool deterministic;
    /* The bound of each task's cross-trainer cache (docs/reading.md "Cross-trainer cache"); 0:
     * the job has none (the shell resolves the default). A cache needs a job name
     * (SLUICE_ERR_INVALID, "cross_trainer_cache needs a job name: the trainers share one job"), a
     * mode other than distributed_epoch and no num_consumers or deterministic
     * (SLUICE_ERR_UNSUPPORTED: "cross_trainer_cache cannot be used with mode distributed_epoch:
     * its splits are handed out once, not shared between trainers", "cross_trainer_cache cannot
     * be combined with num_consumers", "... with deterministic"), at most ST_XTC_MAX_BYTES
     * (SLUICE_ERR_LIMIT), and an endless pipeline (SLUICE_ERR_UNSUPPORTED, "cross_trainer_cache
     * needs an infinite pipeline: 'range(10)' ends; add repeat()"). */
    uint64_t xtc_bytes;
    /* Which workers the reader reads from (docs/reading.md "Local workers"); 0: any. An unknown
     * target is SLUICE_ERR_INVALID. local and auto with num_consumers, and local with a static
     * sharding mode, are SLUICE_ERR_UNSUPPORTED ("target_workers local cannot be combined with
     * num_consumers: coordinated reads need every worker", "target_workers local cannot be used
     * with mode file: ..."); local needs a host (SLUICE_ERR_INVALID, "target_workers local needs
     * the reader's host id") and a registered, non-draining worker on it (SLUICE_ERR_NOT_FOUND,
     * "no local worker: target_workers local needs a worker on this host (host id H), and none
     * is registered"). A local job's iterations get tasks only on workers of the hosts of their
     * clients: a new iteration on the asking host's workers, and a reader joining an active
     * iteration from a host whose workers have no task of it brings one to each of them
     * (plan_worker_heartbeat likewise gives a worker a task only when a client of the iteration
     * is on its host). auto creates tasks as any does; its readers prefer local tasks. */
    enum sluice_target_workers target;
    /* The reader's host id (common/hostid.h), recorded in the client (CLIENT_ACQUIRED); NULL or
     * "": unknown. One that is not a valid host id is SLUICE_ERR_INVALID ("host id: byte 3 is
     * not printable ASCII without spaces"). */
    const char *host;
    /* Whether the dataset's pipeline never ends (the shell decides it from the definition:
     * pipe_spec_endless); false: it ends. */
    bool endless;
    /* The incarnation of the sluice_client asking, recorded in the client; 0: unknown, never
     * limited. When that client already holds s->limits.max_jobs_per_client clients it is
     * SLUICE_ERR_LIMIT ("job limit reached: this client holds 1000 jobs
     * (--max-jobs-per-client)"). */
    uint64_t owner;
    /* For distributed_epoch: the split plan the shell computed for the dataset, copied into a new
     * iteration's update. NULL when no new iteration is needed (a named job with a live current
     * iteration) or the mode is not distributed_epoch; a missing plan that is needed is
     * SLUICE_ERR_INVALID. */
    const struct split_plan *plan;
    /* NULL, or a read restored from a checkpoint, for distributed_epoch only (else
     * SLUICE_ERR_UNSUPPORTED): its fingerprint must be the plan's (of the new iteration, or of
     * the joined one), else SLUICE_ERR_INVALID ("the checkpoint does not fit dataset 'x': its
     * split plan changed since it was taken ..."); a new iteration then starts with the split
     * cursor at the end of the last range and the gaps below it as its pool (more than
     * ST_RESUME_POOL_MAX gaps, or ranges past the plan's end, are SLUICE_ERR_INVALID); a joined
     * iteration is joined as it is. */
    const struct st_resume *resume;
};

/* The ids plan_get_or_create_job() gives a read. */
struct plan_job_result {
    uint64_t job_id, iteration_id, client_id;
};

/* Finds or creates the job and its current iteration, and acquires a new client on it (the
 * request's fields say what each refuses). A named job whose mode, consumer count, deterministic
 * flag, cross-trainer cache or its bound, or target workers differ is SLUICE_ERR_EXISTS naming
 * the field: "job 'n' exists with mode parallel_epochs, not distributed_epoch", "... with
 * num_consumers 2, not 3", "... with deterministic false, not true", "... with
 * cross_trainer_cache on, not off", "... with cross_trainer_cache_bytes 1048576, not 2097152",
 * "... with target_workers any, not local" — unless the job's iteration was garbage-collected:
 * its key is then free, and a new job takes it (JOB_CREATED replaces the collected job). A named
 * job whose current iteration was garbage-collected gets a new iteration (repetition + 1); a
 * finished one is joined as it is. Tasks for a new iteration on every live, non-draining worker
 * are appended too, and for a coordinated iteration its first round schedule (see struct
 * st_round_epoch). *res receives the ids. */
int plan_get_or_create_job(const struct state *s, const struct plan_job_request *req,
                           struct plan_job_result *res, struct st_update_list *out, char *err,
                           size_t errlen);

/* A reader whose local tail repeats asks for repetition want (>= 1) of the named job
 * (dataset_id, job_name): the next pass after the repetition its previous pass read. A job moves
 * to its next repetition once no client holds the current one, so every reader of a shared job
 * reads every repetition, and the readers of one repetition share it as they share any job:
 *   - the current iteration is repetition want (and not collected): nothing to do, the read joins
 *     it (plan_get_or_create_job);
 *   - it is repetition want - 1 and collected: nothing to do, the read creates the next one;
 *   - it is repetition want - 1, active, and clients hold it: SLUICE_ERR_UNAVAILABLE, "job 'j':
 *     repetition 0 is still being read by 2 readers; repetition 1 starts once they finish" (the
 *     reader retries);
 *   - it is repetition want - 1, active, and no client holds it: appends its collection (its
 *     tasks removed, ITERATION_GC), which the shell applies before planning the read, which then
 *     creates repetition want;
 *   - otherwise the job has moved past want (SLUICE_ERR_UNAVAILABLE would never end):
 *     SLUICE_ERR_INVALID, "job 'j': repetition 1 was read without this reader; the job is at
 *     repetition 3", or, for a job that is not there or not at want - 1 yet, SLUICE_ERR_NOT_FOUND
 *     / SLUICE_ERR_INVALID naming the job and repetition.
 * want 0 (a read that does not repeat, or a first pass) and anonymous jobs append nothing. */
int plan_job_repetition(const struct state *s, const char *dataset_id, const char *job_name,
                        uint64_t want, struct st_update_list *out, char *err, size_t errlen);

/* A task the worker reports failed, with the pipeline's message. */
struct st_task_failure {
    uint64_t task_id;
    const char *msg;
};

/* The worker worker_id reports tasks failed: the first failure of each active iteration is
 * recorded (ITERATION_FAILED with "task 4: " and the message escaped (common/names.h) and cut
 * to ST_ERROR_MAX bytes). Tasks that are unknown, not this worker's, finished, or of an
 * iteration that is not active or failed already are ignored (the report repeats on every
 * heartbeat), also when updates already in out (a heartbeat's, planned just before) finish or
 * remove the task or finish, fail or collect the iteration. Returns 0 or SLUICE_ERR_NOMEM. */
#define ST_ERROR_MAX 400
int plan_tasks_failed(const struct state *s, uint64_t worker_id,
                      const struct st_task_failure *failed, size_t nfailed,
                      struct st_update_list *out, char *err, size_t errlen);

/* What a worker's heartbeat asks of plan_worker_heartbeat(). Zero is the default of every field
 * (the incarnation and the address aside): a worker of unknown host that proves who it is with
 * its secret, reports nothing finished, is not draining, and may not take over an address whose
 * holder still heartbeats. */
struct plan_heartbeat_request {
    /* The worker's address (required): an empty one, or one that is not a valid name of at most
     * NAME_ADDR_MAX bytes (common/names.h), is SLUICE_ERR_INVALID ("worker address: control
     * character at byte 9"). */
    const char *address;
    /* The worker process's incarnation: with the address, the worker's identity. */
    uint64_t incarnation;
    /* The worker's secret, key_len bytes (key_len 0 when it sent none):
     *   - a known (address, incarnation) whose worker registered with a secret must present that
     *     secret, else SLUICE_ERR_DENIED, "worker at ADDR: the worker key does not match its
     *     registration"; one registered without (an older journal) is not checked;
     *   - a new pair registers with key, which must be ST_KEY_LEN bytes (else SLUICE_ERR_DENIED,
     *     "worker at ADDR: a worker key of 16 bytes is required to register"). */
    const uint8_t *key;
    size_t key_len;
    /* true: no identity is checked, and a new worker registers without a secret (for tests of
     * the other rules; the shell never sets it). */
    bool unkeyed;
    /* Whether a new pair at an address another incarnation holds replaces that worker (the
     * shell's judgement that the holder stopped heartbeating: a process restarted at the same
     * address); false: SLUICE_ERR_DENIED, "address ADDR is held by worker N, which is still
     * heartbeating". */
    bool may_replace;
    /* The worker's host id (common/hostid.h), which a new registration records
     * (WORKER_REGISTERED; a known worker's host stays what it registered with); NULL or "":
     * unknown. A host that is not a valid host id is SLUICE_ERR_INVALID ("worker host id: ...").
     * Tasks of a job read from local workers only are created for the worker only when a client
     * of the iteration is on its host. */
    const char *host;
    /* Task ids the worker reports finished, nfinished of them; ids that are unknown, already
     * finished or not this worker's are ignored (a report can repeat), and a finished task's
     * leftover leases go back to the pool first. */
    const uint64_t *finished;
    size_t nfinished;
    /* Marks the worker draining, for good: a draining worker stays draining. */
    bool draining;
};

/* A worker's heartbeat. The worker is identified by address and incarnation: an unknown pair
 * registers a new worker (and removes any worker at the same address with another incarnation,
 * with its tasks, as plan_remove_worker does); a known one is looked up. Creates tasks for every
 * active iteration the worker has none for (unless draining), except iterations that failed or
 * that no client holds and no running save writes (their readers are gone; a client that joins
 * again gets the tasks on the next heartbeats). Marks iterations finished when they have at least
 * one task, all their tasks are finished (and, for distributed iterations, the cursor is at the
 * end, the pool empty and no split leased). The request's fields say what each refuses; the
 * identity is checked before anything is planned. *worker_out receives the id. */
int plan_worker_heartbeat(const struct state *s, const struct plan_heartbeat_request *req,
                          uint64_t *worker_out, struct st_update_list *out, char *err,
                          size_t errlen);

/* Whether a request that claims to come from worker w may act for it: w registered without a
 * secret (an older journal), or key (key_len bytes) is its secret. */
bool state_worker_key_ok(const struct st_worker *w, const uint8_t *key, size_t key_len);

/* Removes a worker (evicted or deregistered): its tasks are removed, their leased, unfinished
 * splits first going back to their iteration's pool; an iteration whose remaining tasks (at
 * least one) are then all finished, with every split finished, is marked finished. An unknown
 * worker is SLUICE_ERR_NOT_FOUND ("worker 3 not found"). */
int plan_remove_worker(const struct state *s, uint64_t worker_id, struct st_update_list *out,
                       char *err, size_t errlen);

/* What a task's GetSplits asks of plan_get_splits(). Zero is the default of every field but the
 * task: an unnumbered request reporting nothing, handing nothing back, asking for no split,
 * with no lease bound. */
struct plan_splits_request {
    uint64_t task_id;
    /* The request's number (0: unnumbered); see plan_get_splits() for how it is answered. The
     * number UINT64_MAX (no update may carry it) is SLUICE_ERR_INVALID. */
    uint64_t request_seq;
    /* Splits the task finished, nfinished of them; they are recorded first (SPLITS_FINISHED),
     * and seqs not leased to this task are ignored: they were finished by an earlier attempt of
     * the same report, or were never this task's, so a retried report is a no-op rather than an
     * error. */
    const uint64_t *finished;
    size_t nfinished;
    /* Seqs leased to the task that it never started (a draining worker), nreturned of them,
     * which go back to the pool (SPLITS_RETURNED; seqs not leased to the task are ignored, and a
     * seq also in finished counts as finished). */
    const uint64_t *returned;
    size_t nreturned;
    /* The most splits a new lease may hold. */
    uint32_t max;
    /* A deterministic reader's reorder window: no split at or above it is leased from the cursor
     * (pool splits are leased as usual); a task refused splits by the bound gets none and end
     * false, and asks again later. 0: no bound. */
    uint64_t lease_below;
};

/* What plan_get_splits() answers. */
struct plan_splits_result {
    /* The seqs to reply with (malloc'd, the caller frees it; NULL when nseqs is 0). */
    uint64_t *seqs;
    size_t nseqs;
    /* Whether the task will never get another split: the cursor is at the end, the pool is
     * empty, and no split of the iteration is leased to any task (also when the task or its
     * iteration is already finished, whatever the request number). While another task still
     * holds leases, a request can get no splits and end false: those splits come back to the
     * pool if their worker dies, so the caller asks again later rather than ending (this is what
     * makes a worker's death lose nothing). */
    bool end;
};

/* A task's GetSplits. The splits reported finished and handed back are recorded first (see the
 * request's fields); then, by request_seq against the task's last_request:
 *   - newer (or 0): a new lease of up to max splits, first from the pool of returned splits
 *     (lowest first), then from the cursor; one SPLITS_LEASED carrying request_seq, none when
 *     there is nothing to lease (the number is then not recorded, and a repeat of it is planned
 *     as new again, which is harmless since it was granted nothing);
 *   - equal: the retry of a request whose reply was lost: no lease is planned, and the reply is
 *     the task's granted seqs that it still holds (those finished or returned since are left
 *     out), whatever max is now;
 *   - older: SLUICE_ERR_INVALID, "task 4: stale request 2 (request 3 was answered)".
 * A task of a draining worker is leased nothing new, and its end is true once it holds no
 * split: the splits it produced stay leased to it until their consumers have received them, so
 * it keeps serving them until then. *res receives the reply. An unknown task is
 * SLUICE_ERR_NOT_FOUND; a task of a non-distributed iteration SLUICE_ERR_INVALID. */
int plan_get_splits(const struct state *s, const struct plan_splits_request *req,
                    struct plan_splits_result *res, struct st_update_list *out, char *err,
                    size_t errlen);

/* Consumers received every element of splits seqs[0, n) of a distributed_epoch iteration (the
 * split is finished: docs/design.md §4). A seq leased to a task is recorded finished for that task,
 * each seq in the pool is finished there (SPLITS_FINISHED with no task); others (already
 * finished, never leased, repeated) are ignored, so a repeated report is a no-op. An iteration
 * that is not active appends nothing. An unknown iteration is SLUICE_ERR_NOT_FOUND; one that is
 * not distributed SLUICE_ERR_INVALID. */
int plan_splits_finished(const struct state *s, uint64_t iteration_id, const uint64_t *seqs,
                         size_t n, struct st_update_list *out, char *err, size_t errlen);

/* Whether split seq of the iteration is finished: below the cursor, in no task's lease and not
 * in the pool (every split of a finished iteration is; none of a collected or unknown one). */
bool state_split_finished(const struct state *s, uint64_t iteration_id, uint64_t seq);

/* The tasks of worker_id, by increasing task id: *n entries from the returned pointer, which is
 * valid until the state changes. */
const struct st_task_ref *state_worker_tasks(const struct state *s, uint64_t worker_id, size_t *n);
/* The tasks of iteration_id, by increasing task id, likewise. */
const struct st_task_ref *state_iteration_tasks(const struct state *s, uint64_t iteration_id,
                                                size_t *n);

/* One task's share of its iteration's tasks_sum: a hash of its id and its worker's. */
uint64_t state_task_mix(uint64_t task_id, uint64_t worker_id);

/* Builds s->by_worker, s->by_iteration and each iteration's held index from s->tasks, and
 * s->by_address from s->workers (after a snapshot filled the tables). Returns 0 or SLUICE_ERR_NOMEM
 * (the indexes are then empty). */
int state_reindex(struct state *s);

/* state_split_finished for each of seqs[0, n) (any order, repeats allowed) at once: finished[i]
 * receives the answer for seqs[i]. One lookup per seq, whatever the number of tasks. Returns 0
 * (SLUICE_ERR_NOMEM is kept for callers written against an allocating version). */
int state_splits_finished_each(const struct state *s, uint64_t iteration_id, const uint64_t *seqs,
                               size_t n, bool *finished);

/* A consumer of a deterministic iteration lost part of splits seqs[0, n) (it had no room to keep
 * them in order, or a reply went missing) and needs them produced again: each seq leased to a
 * task goes back to the pool (SPLITS_RETURNED), to be leased first and produced from its start;
 * other seqs (in the pool already, finished, never leased, repeated) are ignored. The worker
 * that held the lease is not told: what it still serves of the split is deduplicated by the
 * consumer. An iteration that is not active appends nothing. An unknown iteration is
 * SLUICE_ERR_NOT_FOUND; one whose job is not deterministic SLUICE_ERR_INVALID. */
int plan_splits_redo(const struct state *s, uint64_t iteration_id, const uint64_t *seqs, size_t n,
                     struct st_update_list *out, char *err, size_t errlen);

/* The lowest split of a distributed iteration that is not finished (every one below it is):
 * split_total for a finished iteration, 0 for an unknown, collected or non-distributed one. */
uint64_t state_splits_finished_below(const struct state *s, uint64_t iteration_id);

/* Hands every split leased to the task back to the pool, to be leased again (SPLITS_RETURNED):
 * the task produced them and its consumers fetched everything, yet they were not reported
 * received, so a reply was lost on the way. Nothing when it holds none. An unknown task is
 * SLUICE_ERR_NOT_FOUND. */
int plan_return_task_splits(const struct state *s, uint64_t task_id, struct st_update_list *out,
                            char *err, size_t errlen);

/* A client's heartbeat: refuses unknown clients (SLUICE_ERR_NOT_FOUND, "client 7 not found").
 * round is the next round the client reads (coordinated reads; 0 otherwise). When the client's
 * iteration is an active coordinated one and fewer than window / 2 granted rounds lie ahead of
 * round, it grants rounds up to round + window (ROUNDS_GRANTED); window 0 grants nothing. The
 * shell sizes window from the consumption rate, so consumers rarely wait for a grant.
 * *granted_out receives the iteration's rounds_granted once the plan is applied (0 when it is
 * not coordinated). */
int plan_client_heartbeat(const struct state *s, uint64_t client_id, uint64_t round,
                          uint64_t window, struct st_update_list *out, uint64_t *granted_out,
                          char *err, size_t errlen);

/* Whether the iteration is read in coordinated rounds (its job has num_consumers > 0). */
bool state_iteration_coordinated(const struct state *s, const struct st_iteration *it);

/* The index of the epoch of the iteration that holds round, or -1 when the round lies before the
 * first epoch kept (or the iteration has none). */
long state_round_epoch(const struct st_iteration *it, uint64_t round);

/* Releases a client. An unknown one is SLUICE_ERR_NOT_FOUND ("client 7 not found"). The last
 * client on its host of an active iteration of a job read from local workers only takes that
 * host's tasks of the iteration with it (their leased splits go back to the pool first, as in
 * plan_remove_worker): only that host's readers read them. The iteration is marked finished
 * when its remaining tasks (at least one) are all finished with every split finished. */
int plan_release_client(const struct state *s, uint64_t client_id, struct st_update_list *out,
                        char *err, size_t errlen);

/* Garbage-collects an iteration: removes its tasks (their leases are dropped) and marks it
 * collected (see struct state for what is deleted). An iteration with clients, one a running
 * save writes, or one already collected, is SLUICE_ERR_INVALID; an unknown one
 * SLUICE_ERR_NOT_FOUND. */
int plan_gc_iteration(const struct state *s, uint64_t iteration_id, struct st_update_list *out,
                      char *err, size_t errlen);

/* ---- saves (docs/snapshots.md) ---- */

/* Starts saving dataset_id into the snapshot directory path. plan is the dataset's split plan
 * (the shell builds it; a source that cannot be split fails there), endless whether its pipeline
 * never ends (pipe_spec_endless). Appends JOB_CREATED (anonymous, distributed_epoch),
 * ITERATION_CREATED with plan, TASK_CREATED on every non-draining worker and SAVE_STARTED; the
 * shell draws the iteration's secret as for any new iteration. *save_out receives the save's id.
 * The same dataset and path as a save that runs or finished is that save: its id, nothing
 * appended; one that failed is started again as a new save (the failed row stays). Refusals: an
 * unknown dataset SLUICE_ERR_NOT_FOUND ("dataset 'x' not found"); a path that is empty, relative,
 * not a valid name (control characters, not UTF-8) or of ST_PATH_MAX bytes or more
 * SLUICE_ERR_INVALID ("snapshot path 'x' is not absolute"); a path saved from another dataset
 * SLUICE_ERR_EXISTS ("snapshot path '/p' holds a save of dataset 'a', not 'b'"); an endless
 * pipeline SLUICE_ERR_UNSUPPORTED ("cannot save dataset 'x': its pipeline 'range(3) | repeat()'
 * never ends"); a missing plan SLUICE_ERR_INVALID. */
int plan_save_start(const struct state *s, const char *dataset_id, const char *path,
                    const struct split_plan *plan, bool endless, uint64_t *save_out,
                    struct st_update_list *out, char *err, size_t errlen);
/* The checks of plan_save_start() that need no split plan, appending nothing: 0 with *existing
 * the id of the save of dataset_id into path when there is one (else 0: a new save needs a
 * plan), or plan_save_start()'s refusal. */
int plan_save_check(const struct state *s, const char *dataset_id, const char *path, bool endless,
                    uint64_t *existing, char *err, size_t errlen);
/* A running save's snapshot was finalized (SAVE_FINISHED) or failed (SAVE_FAILED with why,
 * escaped and cut to ST_ERROR_MAX bytes). A save that is not running appends nothing; an
 * unknown one is SLUICE_ERR_NOT_FOUND. */
int plan_save_finished(const struct state *s, uint64_t save_id, struct st_update_list *out,
                       char *err, size_t errlen);
int plan_save_failed(const struct state *s, uint64_t save_id, const char *why,
                     struct st_update_list *out, char *err, size_t errlen);
/* The save's chunks committed so far: its iteration's finished splits (all of them once the
 * save finished). */
uint64_t state_save_committed(const struct state *s, const struct st_save *sv);

/* Number of clients that the sluice_client of incarnation owner holds (0 for owner 0). */
size_t state_owner_clients(const struct state *s, uint64_t owner);

/* Number of clients holding an iteration. */
size_t state_iteration_clients(const struct state *s, uint64_t iteration_id);

#endif
