/* The dispatcher's state machine (docs/design.md §1, §4, §6). Pure: no libuv, no LMDB, no clock, no
 * randomness, no logging, no protobuf.
 *
 * Everything the dispatcher knows that must survive a restart lives in struct state and changes
 * only through state_apply(state, update). The shell (server.c) decides what should happen —
 * it calls the pure planners (plan.h), which read the state and append updates to a list —
 * then applies them with state_apply() at once (so the next request, possibly planned
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
 * state_apply(). Not thread-safe: the loop thread owns the state.
 *
 * Files: state.c holds the tables and applies updates, state_query.c answers the read-only
 * lookups and queries, digest.c computes the digest; state_internal.h is what they and the
 * planners share. */
#ifndef SLUICE_DISPATCHER_STATE_H
#define SLUICE_DISPATCHER_STATE_H

#include "common/u64map.h"
#include "common/labels.h"
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
/* A worker's labels (their canonical text, common/labels.h) and a job's worker selector (its
 * canonical text), including the NUL; "" is none (older journals too). */
#define ST_LABELS_MAX (LABELS_TEXT_MAX + 1)
#define ST_SELECTOR_MAX (SELECTOR_TEXT_MAX + 1)

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
    /* Which workers get its tasks (docs/operations.md "Pools and selectors"): the canonical text
     * of a label selector that a worker's labels must match; "" selects every worker. */
    char selector[ST_SELECTOR_MAX];
    /* Its share of the workers against other jobs (> 0 and finite; 1 in older journals), and the
     * bounds on the number of workers with a task of its current iteration (0: none). */
    double weight;
    uint32_t min_workers, max_workers;
};

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
    /* A restored iteration: the digest of the checkpoint it was restored from (the reader's
     * resume_id), which tells a reader restoring the same checkpoint (a late member of a group
     * restoring one merged position) from one restoring another; 0 otherwise. */
    uint64_t resume_id;
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
    char host_id[ST_HOST_MAX];  /* its host; "" in older journals (unknown) */
    char labels[ST_LABELS_MAX]; /* its labels' canonical text; "" none (older journals too) */
    /* How many unfinished tasks of active iterations planning places on it at once
     * (sluice-worker --task-slots); 0: no limit (older journals too). */
    uint32_t task_slots;
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

/* The weights schedule of a named job's sample_from_datasets (docs/pipelines.md "Mixing
 * datasets"), keyed by the mix's dataset and the job name (the reader reads each input as a job
 * "NAME.inputI" of its own; the mix itself has no job). horizon: no change may take effect below
 * it, because readers were told so and may have read up to it; a change takes effect at the
 * horizon or later, so every reader applies it at the same output position. Rows are never
 * deleted; their number and their changes are bounded by the planner (ST_MIX_MAX,
 * ST_MIX_CHANGES_MAX). */
#define ST_MIX_MAX 1024
#define ST_MIX_CHANGES_MAX 1024
#define ST_MIX_INPUTS_MAX 64

struct st_mix_change {
    uint64_t from;   /* the first output position drawn with these weights */
    double *weights; /* one per input (malloc'd) */
    size_t nweights;
};

struct st_mix {
    char dataset_id[ST_ID_MAX];
    char job_name[ST_ID_MAX];
    uint64_t horizon;
    struct st_mix_change *changes; /* by increasing from */
    size_t nchanges;
};

/* The positions the consumers of a named job kept with the dispatcher at their checkpoint steps
 * (docs/snapshots.md "The job's position"), keyed by the job name: the readers of a mix NAME
 * keep theirs under NAME, which has no job of its own. A row holds one iteration's consumers
 * (generation: the id of the iteration they read; a report of a later one replaces the row, so a
 * job restored and read again keeps only the new positions), each with its reports of the last
 * ST_JOBPOS_STEPS steps. A job position is the merge of one report per consumer (plan.h,
 * plan_jobpos_cut); the dispatcher keeps the bytes without reading them. Rows are in the order
 * they were last reported to: beyond ST_JOBPOS_MAX the first goes. Bounded by the planner:
 * consumers per row, bytes per report and in all. */
#define ST_JOBPOS_MAX 256
#define ST_JOBPOS_CONSUMERS_MAX 1024
#define ST_JOBPOS_STEPS 4
#define ST_JOBPOS_BYTES_MAX (256u << 10)
#define ST_JOBPOS_TOTAL_MAX (32u << 20)
/* Steps are 1 to this (0 means "not given" on the wire). */
#define ST_JOBPOS_STEP_MAX (UINT64_C(1) << 62)

struct st_jobpos_report {
    uint64_t step;
    uint8_t *bytes; /* malloc'd */
    size_t len;
};

struct st_jobpos_consumer {
    uint64_t client_id;
    struct st_jobpos_report reports[ST_JOBPOS_STEPS]; /* by increasing step */
    size_t nreports;
};

struct st_jobpos {
    char job_name[ST_ID_MAX];
    uint64_t generation;
    struct st_jobpos_consumer *consumers; /* in the order they first reported */
    size_t nconsumers;
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
    struct st_mix *mixes; /* in the order they were made */
    size_t nmixes, cap_mixes;
    struct st_jobpos *jobpos; /* least recently reported first */
    size_t njobpos, cap_jobpos;
    uint64_t jobpos_bytes; /* the reports' bytes in all (derived) */
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
    ST_SAVE_FAILED = 22,
    ST_MIX_WEIGHTS = 23,
    ST_JOB_POSITION = 24
};
const char *st_update_name(enum st_update_type type);

/* The fields each type uses (all others are zero):
 *   DATASET_REGISTERED  name = dataset id, id = its number when generated (0 for an explicit
 *                       id), def/def_len, compression, split_size, text
 *   JOB_CREATED         id = job, name = job name ("" when anonymous), name2 = dataset id,
 *                       mode, num_consumers, deterministic, xtc_bytes, target_workers,
 *                       selector (a canonical selector text or NULL), job_weight (> 0 and
 *                       finite; 0 in older journals: 1), min_workers, max_workers (0: no bound;
 *                       min at most max when both are set)
 *   ITERATION_CREATED   id = iteration, ref = job, ref2 = repetition, distributed, plan,
 *                       key (the shell sets it after planning: planning draws no randomness);
 *                       restored from a checkpoint: start = the split cursor, seqs = the pool
 *                       (every split below start not in seqs is finished), resume_id = the
 *                       checkpoint's digest (0: unknown)
 *   TASK_CREATED        id = task, ref = iteration, ref2 = worker
 *   TASK_FINISHED       id = task
 *   TASK_REMOVED        id = task, ref = its iteration (informational)
 *   WORKER_REGISTERED   id = worker, address, incarnation, key (the worker's own secret),
 *                       host_id (its host; "" unknown), labels (a canonical label text or
 *                       NULL), task_slots (0: no limit)
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
 *   SPLITS_FINISHED     ref = iteration, ref2 = task, seqs: splits leased to the task (a
 *                       worker reported them); or ref2 = 0, seqs: splits a consumer received in
 *                       full, each leased to some task of the iteration or in its pool
 *                       (journals before this form held only pool seqs with ref2 = 0)
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
 *   SAVE_FAILED         id = a running save, text = why
 *   MIX_WEIGHTS         name = job name (not empty), name2 = the mix's dataset id (registered),
 *                       start = the horizon (not below the row's; the row is made by the first),
 *                       weights/nweights: a change from position ref (at or above the old horizon,
 *                       above the last change's from; 1 to ST_MIX_INPUTS_MAX finite weights >= 0,
 *                       not all 0), or none (nweights 0: the horizon alone); the row's horizon
 *                       becomes the larger of start and ref
 *   JOB_POSITION        name = job name (not empty), ref = the iteration the consumer reads (at
 *                       or above the row's generation; above: the row starts again), id = the
 *                       consumer (its client id), start = step (1 to ST_JOBPOS_STEP_MAX),
 *                       def/def_len = the position (1 to ST_JOBPOS_BYTES_MAX bytes): replaces
 *                       the consumer's report of that step, or joins its reports (the lowest
 *                       step goes beyond ST_JOBPOS_STEPS); the row becomes the most recent (a
 *                       new row beyond ST_JOBPOS_MAX drops the least recent) */
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
    uint64_t resume_id;        /* ITERATION_CREATED: a restored read's checkpoint digest */
    double *weights;           /* MIX_WEIGHTS (owned) */
    size_t nweights;
    char *labels;                      /* WORKER_REGISTERED (owned; NULL: none) */
    char *selector;                    /* JOB_CREATED (owned; NULL: none) */
    double job_weight;                 /* JOB_CREATED; 0: 1 */
    uint32_t min_workers, max_workers; /* JOB_CREATED; 0: no bound */
    uint32_t task_slots;               /* WORKER_REGISTERED; 0: no limit */
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

/* One task's share of its iteration's tasks_sum: a hash of its id and its worker's, mixed so that
 * sums over different sets of tasks differ but by chance (about 2^-64 a pair). */
uint64_t state_task_mix(uint64_t task_id, uint64_t worker_id);

/* Builds s->by_worker, s->by_iteration and each iteration's held index from s->tasks, and
 * s->by_address from s->workers (after a snapshot filled the tables). Returns 0 or SLUICE_ERR_NOMEM
 * (the indexes are then empty). */
int state_reindex(struct state *s);

/* ---- lookups and queries (state_query.c): read-only ------------------------------------------ */

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
/* Whether w (n weights) is a valid weights vector: 1 to ST_MIX_INPUTS_MAX finite numbers >= 0,
 * not all 0. */
bool state_mix_weights_valid(const double *w, size_t n);
/* Whether labels is a canonical label text (common/labels.h) of at most ST_LABELS_MAX - 1 bytes
 * ("" is), and selector a canonical selector text ("" is): what WORKER_REGISTERED and
 * JOB_CREATED may carry. */
bool state_labels_valid(const char *labels);
bool state_selector_valid(const char *selector);
/* The largest job weight. */
#define ST_WEIGHT_MAX 1e6
/* The most task slots a worker may register with (sluice-worker --task-slots). */
#define ST_TASK_SLOTS_MAX 100000
/* The weights schedule of job_name's mix of dataset dataset_id, or NULL. */
const struct st_mix *state_mix(const struct state *s, const char *dataset_id, const char *job_name);
/* The positions kept for job_name, or NULL. */
const struct st_jobpos *state_jobpos(const struct state *s, const char *job_name);

/* Whether a request that claims to come from worker w may act for it: w registered without a
 * secret (an older journal), or key (key_len bytes) is its secret. */
bool state_worker_key_ok(const struct st_worker *w, const uint8_t *key, size_t key_len);

/* Whether split seq of the iteration is finished: below the cursor, in no task's lease and not
 * in the pool (every split of a finished iteration is; none of a collected or unknown one). */
bool state_split_finished(const struct state *s, uint64_t iteration_id, uint64_t seq);

/* Whether split seq of the iteration is in its pool: leased before and handed back, to be
 * leased again. */
bool state_split_pooled(const struct state *s, uint64_t iteration_id, uint64_t seq);

/* state_split_finished for each of seqs[0, n) (any order, repeats allowed) at once: finished[i]
 * receives the answer for seqs[i]. One lookup per seq, whatever the number of tasks. Returns 0
 * (SLUICE_ERR_NOMEM is kept for callers written against an allocating version). */
int state_splits_finished_each(const struct state *s, uint64_t iteration_id, const uint64_t *seqs,
                               size_t n, bool *finished);

/* The lowest split of a distributed iteration that is not finished (every one below it is):
 * split_total for a finished iteration, 0 for an unknown, collected or non-distributed one. */
uint64_t state_splits_finished_below(const struct state *s, uint64_t iteration_id);

/* The tasks of worker_id, by increasing task id: *n entries from the returned pointer, which is
 * valid until the state changes. */
const struct st_task_ref *state_worker_tasks(const struct state *s, uint64_t worker_id, size_t *n);
/* The tasks of iteration_id, by increasing task id, likewise. */
const struct st_task_ref *state_iteration_tasks(const struct state *s, uint64_t iteration_id,
                                                size_t *n);

/* Whether the iteration is read in coordinated rounds (its job has num_consumers > 0). */
bool state_iteration_coordinated(const struct state *s, const struct st_iteration *it);

/* The index of the epoch of the iteration that holds round, or -1 when the round lies before the
 * first epoch kept (or the iteration has none). */
long state_round_epoch(const struct st_iteration *it, uint64_t round);

/* The save's chunks committed so far: its iteration's finished splits (all of them once the
 * save finished). */
uint64_t state_save_committed(const struct state *s, const struct st_save *sv);

/* Number of clients that the sluice_client of incarnation owner holds (0 for owner 0). */
size_t state_owner_clients(const struct state *s, uint64_t owner);

/* Number of clients holding an iteration. */
size_t state_iteration_clients(const struct state *s, uint64_t iteration_id);

#endif
