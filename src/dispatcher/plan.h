/* The dispatcher's planners (docs/design.md §1): pure decisions that read the state and append
 * the updates a request or a tick implies to a list, or refuse. No I/O, no clock, no randomness,
 * no logging, no protobuf; the state is only read. The shell (server.c and the handlers) plans,
 * applies the list with state_apply() at once, journals it and replies once it is durable
 * (state.h). One file per request family, named like the handlers that call it:
 * plan_datasets.c, plan_jobs.c, plan_workers.c, plan_splits.c, plan_clients.c, plan_saves.c;
 * plan.c holds what they share (plan_internal.h).
 *
 * Each returns 0 after appending the updates that carry out the request to out (possibly none),
 * or a negative code with a one-line message in err when the request must be refused (nothing
 * appended). The shell then journals and applies the list in order. A planner that takes a
 * request struct reads each field as documented beside it, zero being the default. Not
 * thread-safe: the loop thread owns the state. */
#ifndef SLUICE_DISPATCHER_PLAN_H
#define SLUICE_DISPATCHER_PLAN_H

#include "state.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- datasets (plan_datasets.c) -------------------------------------------------------------- */

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

/* ---- jobs and iterations (plan_jobs.c) ------------------------------------------------------- */

/* A read restored from a checkpoint: the splits its reader had whole (nbounds values, half-open
 * ranges begin0, end0, ...; sorted, disjoint, non-empty) and the fingerprint of the split plan
 * it was taken under. */
struct plan_resume {
    const uint64_t *bounds;
    size_t nbounds;
    uint64_t plan_fingerprint;
    uint64_t id; /* the checkpoint's digest (0: unknown), journaled with the iteration */
};
/* A restored iteration's pool may hold at most this many splits (the gaps below its furthest
 * finished split: the splits that were in flight). */
#define PLAN_RESUME_POOL_MAX (1u << 16)

/* The largest cross-trainer cache a job may ask each of its tasks to keep. */
#define PLAN_XTC_MAX_BYTES (64ull << 30)

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
     * be combined with num_consumers", "... with deterministic"), at most PLAN_XTC_MAX_BYTES
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
     * PLAN_RESUME_POOL_MAX gaps, or ranges past the plan's end, are SLUICE_ERR_INVALID); a joined
     * iteration is joined as it is. */
    const struct plan_resume *resume;
    /* Which workers get the job's tasks (docs/operations.md "Pools and selectors"): a label
     * selector (common/labels.h); NULL or "": every worker. A malformed one is
     * SLUICE_ERR_INVALID, "worker selector: expected ',' at byte 7". A job whose selector matches
     * no worker gets no task until a matching worker registers (plan_worker_heartbeat); its
     * readers are told why (plan_iteration_waiting). */
    const char *selector;
    /* The job's weight: 0 is 1; otherwise above 0, finite and at most ST_WEIGHT_MAX, else
     * SLUICE_ERR_INVALID ("weight must be a number above 0 and at most 1000000, not -1"). */
    double weight;
    /* The bounds on the number of workers with a task of the job's iteration (0: none): at most
     * max_workers workers get one; while it has fewer than min_workers, its iterations rank
     * first for workers' free task slots (plan_place.c; every matching worker without a slot
     * limit gets a task anyway). min above max is SLUICE_ERR_INVALID ("min_workers 3 is above
     * max_workers 2"). */
    uint32_t min_workers, max_workers;
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
/* Why the iteration has no task yet, into buf (len bytes), when its job's selector or the
 * workers' task slots are the reason (plan_place.c):
 *   - "waiting for a worker matching pool=bigmem (none of 3 workers match)" when no registered
 *     worker that is not draining matches its selector;
 *   - "waiting for a worker matching pool=bigmem: 3 of 3 task slots taken by heavier jobs" (or
 *     "waiting for a worker: ..." without a selector) when every matching worker has task slots
 *     and all are taken; the holders are "heavier jobs", "jobs that started earlier" (tasks are
 *     never taken away), or "heavier jobs (2) and jobs that started earlier";
 *   - for an iteration with tasks, but fewer than its job's min_workers, the same about the
 *     matching workers that have none of its tasks, with what it has: "waiting for a worker
 *     matching pool=a (1 of 2 minimum workers): 3 of 3 task slots taken by heavier jobs", or
 *     "... (1 of 2 minimum workers): no other worker matches";
 * otherwise "" (and the return is 0): no worker at all without a selector, a matching worker that
 * places the task with its next heartbeat, or a job with tasks and no shortfall. Returns the
 * length written. Readers are told only while the iteration has no task
 * (ClientHeartbeatReply.waiting); sluice status shows it in both cases. */
size_t plan_iteration_waiting(const struct state *s, uint64_t iteration_id, char *buf, size_t len);

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

/* A restored read (GetOrCreateJob with resume r) of named job job_name: when the job's current
 * iteration is live, no client holds it (its readers closed or were collected) and it was not
 * itself restored from the checkpoint r restores (r->id), appends its collection, so the read
 * starts a new iteration from the checkpoint rather than joining one whose progress is not the
 * checkpoint's (what its readers received but never handed out would be lost). An iteration other
 * readers hold is joined (a shared job), and so is one restored from the same checkpoint (a late
 * member of a group restoring one merged position joins what the others read, even once they are
 * done); anonymous jobs, collected iterations and iterations running a save append nothing. Returns
 * 0 or a negative code with err. */
int plan_job_resume_fresh(const struct state *s, const char *dataset_id, const char *job_name,
                          const struct plan_resume *r, struct st_update_list *out, char *err,
                          size_t errlen);
/* Whether plan_job_resume_fresh() would collect the job's current iteration now. */
bool plan_job_resume_collects(const struct state *s, const char *dataset_id, const char *job_name,
                              const struct plan_resume *r);

/* ---- weights schedules of named mix jobs (struct st_mix) ---- */

/* Positions past this are refused (a reader could otherwise push the horizon to where no change
 * fits). */
#define PLAN_MIX_POSITION_MAX ((uint64_t)1 << 62)

/* A reader of named mix job job_name (dataset_id: the mix's, registered, a
 * sample_from_datasets; the shell checks) asks to know the weights up to position want: appends
 * MIX_WEIGHTS raising the horizon to want when it is below (making the row), nothing otherwise.
 * SLUICE_ERR_LIMIT past ST_MIX_MAX rows. */
int plan_mix_horizon(const struct state *s, const char *dataset_id, const char *job_name,
                     uint64_t want, struct st_update_list *out, char *err, size_t errlen);
/* The dataset of the one mix read as job_name: SLUICE_ERR_NOT_FOUND when none is, and
 * SLUICE_ERR_INVALID when several are (the caller must say which). */
int plan_mix_find(const struct state *s, const char *job_name, const char **dataset_id, char *err,
                  size_t errlen);
/* Changes the weights of job_name's mix of dataset_id (of ninputs inputs) to weights (n): from
 * position at (> 0; refused below the earliest position no reader may have drawn: the horizon,
 * after the last change) or, for at 0, from that earliest position, into *from. Appends
 * MIX_WEIGHTS. SLUICE_ERR_INVALID for a wrong count, bad weights or a position passed;
 * SLUICE_ERR_LIMIT past ST_MIX_CHANGES_MAX changes or ST_MIX_MAX rows. */
int plan_mix_set_weights(const struct state *s, const char *dataset_id, const char *job_name,
                         size_t ninputs, const double *weights, size_t n, uint64_t at,
                         struct st_update_list *out, uint64_t *from, char *err, size_t errlen);

/* ---- job positions (struct st_jobpos; plan_positions.c) ---- */

/* A consumer keeps its position at a checkpoint step (ReportPositionRequest): appends
 * JOB_POSITION after the checks. client_id: an existing client (the shell checked its key);
 * job_name: the name of the client's job, or that of a mix whose input the client reads (the
 * job "NAME.input0" keeps under NAME). SLUICE_ERR_INVALID for a name that is not the client's,
 * an anonymous job, a step out of range or older than every step the consumer has kept, bytes
 * that are not a position, or a report for an iteration older than the row's;
 * SLUICE_ERR_LIMIT past ST_JOBPOS_CONSUMERS_MAX consumers, ST_JOBPOS_BYTES_MAX bytes or
 * ST_JOBPOS_TOTAL_MAX in all. */
int plan_jobpos_report(const struct state *s, uint64_t client_id, const char *job_name,
                       uint64_t step, const uint8_t *pos, size_t len, struct st_update_list *out,
                       char *err, size_t errlen);

/* One consumer's part of a job position: its report of the largest step at or below the cut. */
struct plan_jobpos_pick {
    uint64_t client_id, step;
    const uint8_t *bytes; /* the state's */
    size_t len;
};

/* The reports that make job_name's position at step (0: the latest step every consumer still
 * reading has reached, the lowest last step of those whose client exists; when none does, the
 * highest last step): for each consumer, its report of the largest step at or below it, into
 * picks (room for ST_JOBPOS_CONSUMERS_MAX), *npicks, *cut (the step) and *generation (the
 * iteration they read). A consumer whose first step kept is above the cut and that has kept
 * fewer than ST_JOBPOS_STEPS had nothing at the cut and is left out. SLUICE_ERR_NOT_FOUND when
 * no position is kept for the job, none is at or below the step, or a consumer's steps at or
 * below it are no longer kept (the message names the steps kept). */
int plan_jobpos_cut(const struct state *s, const char *job_name, uint64_t step,
                    struct plan_jobpos_pick *picks, size_t *npicks, uint64_t *cut,
                    uint64_t *generation, char *err, size_t errlen);

/* Garbage-collects an iteration: removes its tasks (their leases are dropped) and marks it
 * collected (see struct state for what is deleted). An iteration with clients, one a running
 * save writes, or one already collected, is SLUICE_ERR_INVALID; an unknown one
 * SLUICE_ERR_NOT_FOUND. */
int plan_gc_iteration(const struct state *s, uint64_t iteration_id, struct st_update_list *out,
                      char *err, size_t errlen);

/* ---- workers (plan_workers.c) ---------------------------------------------------------------- */

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
    /* The worker's labels, nlabels of them, each "KEY=VALUE" (common/labels.h), which a new
     * registration records (WORKER_REGISTERED, as their canonical text; a known worker's labels
     * stay what it registered with). Labels that labels_canonical refuses are
     * SLUICE_ERR_INVALID ("worker at ADDR: labels: label 2: expected KEY=VALUE"). A worker gets
     * a task of an iteration only when the job's selector matches its labels and the job's
     * max_workers leaves room. */
    const char *const *labels;
    size_t nlabels;
    /* How many tasks may be placed on the worker at once (sluice-worker --task-slots), which a
     * new registration records (WORKER_REGISTERED; a known worker keeps what it registered
     * with); 0: no limit. Above ST_TASK_SLOTS_MAX is SLUICE_ERR_INVALID ("worker at ADDR:
     * 100001 task slots, more than 100000"). Its free slots go to the iterations that want one
     * heaviest first (docs/operations.md "Task slots"); a task is never taken away. */
    uint32_t task_slots;
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

/* Removes a worker (evicted or deregistered): its tasks are removed, their leased, unfinished
 * splits first going back to their iteration's pool; an iteration whose remaining tasks (at
 * least one) are then all finished, with every split finished, is marked finished. An unknown
 * worker is SLUICE_ERR_NOT_FOUND ("worker 3 not found"). */
int plan_remove_worker(const struct state *s, uint64_t worker_id, struct st_update_list *out,
                       char *err, size_t errlen);

/* A task the worker reports failed, with the pipeline's message. */
struct plan_task_failure {
    uint64_t task_id;
    const char *msg;
};

/* The worker worker_id reports tasks failed: the first failure of each active iteration is
 * recorded (ITERATION_FAILED with "task 4: " and the message escaped (common/names.h) and cut
 * to PLAN_ERROR_MAX bytes). Tasks that are unknown, not this worker's, finished, or of an
 * iteration that is not active or failed already are ignored (the report repeats on every
 * heartbeat), also when updates already in out (a heartbeat's, planned just before) finish or
 * remove the task or finish, fail or collect the iteration. Returns 0 or SLUICE_ERR_NOMEM. */
#define PLAN_ERROR_MAX 400
int plan_tasks_failed(const struct state *s, uint64_t worker_id,
                      const struct plan_task_failure *failed, size_t nfailed,
                      struct st_update_list *out, char *err, size_t errlen);

/* ---- splits (plan_splits.c) ------------------------------------------------------------------ */

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
    /* Splits in the pool (leased before and returned) are not leased now: a consumer of the
     * iteration may have received part of them without the dispatcher knowing yet (after a
     * restart, before its first heartbeat). A task gets cursor splits only, or none and end
     * false, and asks again later. */
    bool pool_held;
    /* Guided self-scheduling: a task of an iteration of finite splits read by several tasks
     * holds at most its share of the splits not finished (those leased to any task, the pool
     * unless held, and the cursor's rest, divided by the number of tasks, rounded up): it gets
     * that share less what it holds, possibly none (end false: it asks again later), so that a
     * few large splits are spread over the tasks rather than all going to the first to ask. */
    bool share;
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

/* A consumer of a deterministic iteration lost part of splits seqs[0, n) (it had no room to keep
 * them in order, or a reply went missing) and needs them produced again: each seq leased to a
 * task goes back to the pool (SPLITS_RETURNED), to be leased first and produced from its start;
 * other seqs (in the pool already, finished, never leased, repeated) are ignored. The worker
 * that held the lease is not told: what it still serves of the split is deduplicated by the
 * consumer. With tasks (not NULL), tasks[k] is the task whose production of seqs[k] the
 * consumer saw end short: a seq leased to another task now (its lease moved since, and a new
 * production is under way that the request must not cut short) is ignored too. An iteration
 * that is not active appends nothing. An unknown iteration is SLUICE_ERR_NOT_FOUND; one whose
 * job is not deterministic SLUICE_ERR_INVALID. */
int plan_splits_redo(const struct state *s, uint64_t iteration_id, const uint64_t *seqs,
                     const uint64_t *tasks, size_t n, struct st_update_list *out, char *err,
                     size_t errlen);

/* Hands every split leased to the task back to the pool, to be leased again (SPLITS_RETURNED):
 * the task produced them and its consumers fetched everything, yet they were not reported
 * received, so a reply was lost on the way. Nothing when it holds none. An unknown task is
 * SLUICE_ERR_NOT_FOUND. */
int plan_return_task_splits(const struct state *s, uint64_t task_id, struct st_update_list *out,
                            char *err, size_t errlen);

/* ---- clients (plan_clients.c) ---------------------------------------------------------------- */

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

/* Releases a client. An unknown one is SLUICE_ERR_NOT_FOUND ("client 7 not found"). The last
 * client on its host of an active iteration of a job read from local workers only takes that
 * host's tasks of the iteration with it (their leased splits go back to the pool first, as in
 * plan_remove_worker): only that host's readers read them. The iteration is marked finished
 * when its remaining tasks (at least one) are all finished with every split finished. */
int plan_release_client(const struct state *s, uint64_t client_id, struct st_update_list *out,
                        char *err, size_t errlen);

/* ---- saves (plan_saves.c; docs/snapshots.md) ------------------------------------------------- */

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
 * escaped and cut to PLAN_ERROR_MAX bytes). A save that is not running appends nothing; an
 * unknown one is SLUICE_ERR_NOT_FOUND. */
int plan_save_finished(const struct state *s, uint64_t save_id, struct st_update_list *out,
                       char *err, size_t errlen);
int plan_save_failed(const struct state *s, uint64_t save_id, const char *why,
                     struct st_update_list *out, char *err, size_t errlen);

#endif
