/* What the dispatcher's server shell shares between its files: the dispatcher itself, commit,
 * requests and replies, and the handlers the dispatch table in server.c calls. server.c holds
 * start, close, commit and the dispatch table; handlers_datasets.c, handlers_jobs.c,
 * handlers_clients.c and handlers_workers.c the RPC handlers by family; tick.c the timer.
 * Everything here runs on the dispatcher's loop thread. */

#ifndef SLUICE_DISPATCHER_SERVER_INTERNAL_H
#define SLUICE_DISPATCHER_SERVER_INTERNAL_H

#include "server.h"

#include "capcache.h"
#include "journal_thread.h"
#include "observe.h"
#include "owners.h"
#include "dispatcher/coverage.h"
#include "dispatcher/history.h"
#include "dispatcher/hedge.h"
#include "dispatcher/relet.h"
#include "dispatcher/state.h"
#include "dispatcher/update_codec.h"
#include "dispatcher/status.h"
#include "dispatcher/update_codec.h"
#include "common/rows.h"

#include "common/error.h"
#include "common/log.h"
#include "common/names.h"
#include "common/ratelimit.h"
#include "common/rpc_server.h"
#include "journal/journal.h"
#include "pipeline/def.h"
#include "pipeline/roots.h"
#include "pipeline/spec.h"
#include "pipeline/split.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_WORKER_TIMEOUT_MS 10000
#define DEFAULT_CLIENT_TIMEOUT_MS 30000
#define DEFAULT_JOB_GC_TIMEOUT_MS 60000
#define DEFAULT_SNAPSHOT_EVERY 10000
#define REP_WAITERS_MAX 4096
/* Without --snapshot-every a snapshot also waits until the records since the last one take this
 * many times its bytes: a large state is not rewritten every 10000 small changes (the snapshots
 * would be most of the journal's writes and stall the loop while encoded), and a restart still
 * replays records bounded by the state's size, not its history. */
#define SNAPSHOT_GROWTH 2
#define META_INCARNATION "incarnation"
#define MAX_SPLITS_PER_REQUEST 4096 /* bounds one GetSplits reply */
#define MAX_SPLITS_BATCH 256        /* requests in one GetSplitsBatch */
/* The write backlog past which a connection stops being read (rpc_server_opts). */
#define DISPATCHER_MAX_PENDING_WRITE (4u << 20)

struct soft {
    uint64_t id;
    uint64_t t; /* uv_now() milliseconds */
};

/* A map from id to time, sorted by id. */
struct soft_table {
    struct soft *v;
    size_t n, cap;
};

struct def_cache_entry {
    char id[ST_ID_MAX];
    Sluice__DatasetDef *def; /* unpacked from the dataset's bytes, owned */
};

struct job_ctx;

struct dispatcher {
    uv_loop_t *loop;
    struct rpc_server *rpc;
    uv_timer_t timer;
    struct state st;
    struct st_update_list ups; /* planning scratch; empty between requests */
    /* Refused capabilities (a wrong client or worker key) are logged at most once a minute per
     * peer address: a peer can provoke them at will. */
    struct ratelimit refusals;

    struct soft_table worker_seen, client_seen, idle_since;
    /* When the last tick ran (uv_now), to tell the dispatcher's own absence (tick.c). */
    uint64_t last_tick_ms;
    /* Each client's heartbeat before its last one (client_seen): a consumer whose process was
     * stopped sends its first heartbeat on waking before it reads what arrived meanwhile, so it
     * counts as heard from (dispatcher_consumers_heard_since) only with two heartbeats since. */
    struct soft_table client_seen_before;
    /* The connection each client's (worker's) last heartbeat came over (its t holds
     * rpc_conn_serial), and since when those whose connection closed have not come back: one
     * gone longer than client_grace_ms (worker_grace_ms) is released (removed) by the tick
     * without waiting out its timeout. A live peer reconnects with its next heartbeat; a killed
     * one's kernel closed its sockets. */
    struct soft_table client_conn, client_gone, worker_conn, worker_gone;
    /* Readers of a repeating named job that asked for its next repetition while others still
     * held the current one (handlers_jobs.c): the job does not move past the repetition they wait
     * for before they join it, or before client_timeout_ms pass without them asking again. At
     * most REP_WAITERS_MAX (a reader past it is not waited for, as before). */
    struct rep_waiter {
        uint64_t job_id, repetition, owner, seen;
    } * rep_waiters;
    size_t nrep_waiters;
    /* The peer address of each client owner, for --max-jobs-per-address (owners.h). */
    struct owners owners;
    uint64_t max_jobs_per_address; /* 0: no limit */
    /* distributed_epoch tasks: since when the worker reports a task settled (everything it
     * produced was fetched) while it still holds leases, and when it was last leased splits. */
    struct soft_table settled_since, leased_at;
    /* Deterministic iterations: the lease bound their reader last reported (its t holds the
     * seq, not a time); see plan_get_splits. */
    struct soft_table lease_below;
    /* Deterministic iterations: when each split taken from the pool was leased again (relet.h;
     * dispatcher_clock_ms), so that a reader's request about an older production of it is
     * ignored. */
    struct relet_table relet;
    /* distributed_epoch iterations whose reader asked for hedged splits: lease times, split
     * times and the copies out (hedge.h; dispatcher_clock_ms). */
    struct hedge hedge;
    /* Clients whose coverage (what they received) this dispatcher knows: acquired since it
     * started, or heard in a heartbeat since. After a restart the coverage, soft state, is empty
     * until each client reports again: until then the splits of an iteration with a client not
     * here yet are not leased again from the pool (pool_held), or a production of one would
     * leave out nothing and hand another consumer what that client had; for at most the
     * re-issue grace after the start (a client silent that long is taken for gone), the only time
     * it is recorded. */
    struct soft_table client_reported;
    uint64_t started_ms; /* uv_now when this dispatcher started */
    /* Workers whose heartbeat reply changed by an update not yet durable, with the journal
     * sequence number of the last such update in t (st_update_worker); entries found durable are
     * dropped. */
    struct soft_table worker_touched;
    /* A touch that could not be recorded (out of memory) counts for every worker: until this
     * sequence number is durable, every heartbeat waits as any commit does. */
    uint64_t touched_all;
    struct coverage cov;  /* consumers' partial reports of unfinished splits */
    struct capcache caps; /* clients' capabilities for their tasks, as last listed */
    struct def_cache_entry *defs;
    size_t ndefs, cap_defs;

    char **worker_addresses;
    size_t nworker_addresses;
    uint32_t worker_timeout_ms, client_timeout_ms, gc_timeout_ms;
    uint32_t worker_hb_ms, client_hb_ms;
    /* UINT32_MAX: a closed connection releases no client (removes no worker) */
    uint32_t client_grace_ms, worker_grace_ms;
    uint64_t incarnation;
    struct observe *obs;     /* metrics and the autoscaling window (observe.h) */
    struct history *history; /* the dashboard's charts (history.h) */

    struct job_ctx *works; /* split-plan work queued or running, for cancelling at close */
    struct save_work
        *save_works;    /* snapshot saves' disk work queued or running (handlers_saves.c) */
    bool saves_resumed; /* the running saves found at start were taken up again */
    /* Data roots (--data-root): registrations of file sources outside them are refused. None:
     * not confined. checks counts registrations being checked on the thread pool. */
    struct pipe_roots roots;
    unsigned checks;
    /* Status documents being written out on the thread pool (status_done). */
    unsigned status_works;

    /* A Raft replica (replica.h), or NULL. While it leads and serves, jt is a journal thread
     * whose batches go to its log; otherwise jt is NULL and nothing is served but status. */
    struct replica *replica;
    char advertise[300]; /* the RPC address a replica announces */
    struct status_raft raft_view;
    unsigned closing_jts; /* journal threads of a past leadership still closing */

    /* Fault-tolerant mode only (NULL otherwise). */
    char *work_dir;
    struct journal *journal;
    struct journal_thread *jt;
    uint64_t snapshot_every;       /* updates between snapshots */
    bool snapshot_by_size;         /* no --snapshot-every: also SNAPSHOT_GROWTH (see there) */
    uint64_t since_snapshot;       /* updates journaled since the last snapshot (or the start) */
    uint64_t since_snapshot_bytes; /* their encoded bytes */
    uint64_t snapshot_bytes;       /* the last snapshot's bytes (0: none since the start) */
    /* The snapshot being packed on the thread pool (server.c), or NULL: at most one at a time. */
    struct snapshot_work *snap_work;
    struct update_codec_spare snap_spare; /* the last copy's memory, for the next */

    bool fatal;
    bool closing;
    unsigned closing_parts; /* the timer and the rpc server, until their close callbacks */
    void (*close_cb)(void *user);
    void *close_user;
    void (*on_fatal)(void *user, const char *msg);
    void *user;
};

/* What every pending reply holds: the connection (referenced) and the request id. */
struct req {
    struct dispatcher *d;
    struct rpc_conn *conn;
    uint64_t id;
};

typedef void (*commit_cb)(struct dispatcher *d, int status, void *ctx);

/* ---- server.c: commit, requests and replies ---- */

/* Carries out the updates in ups (consumed: the list is left empty) and calls cb(d, status, ctx)
 * once they are durable; status is 0, or negative when they could not be carried out (the
 * dispatcher is then failed and refuses every later commit). The updates are applied to the
 * state before this returns; without a journal cb runs before it returns, with one after the
 * transaction holding the last update commits, in commit order (server.c says more). */
void dispatcher_commit(struct dispatcher *d, struct st_update_list *ups, commit_cb cb, void *ctx);
/* dispatcher_commit() that also calls applied(d, ctx) once the updates are applied, before it
 * waits for them to be durable (not when they could not be carried out). What a reply reads of
 * the state must be read there, not in cb: by the time cb runs, later requests may have applied
 * changes that are not durable yet, which a crash or a change of leader takes back. */
void dispatcher_commit_applied(struct dispatcher *d, struct st_update_list *ups,
                               void (*applied)(struct dispatcher *d, void *ctx), commit_cb cb,
                               void *ctx);
/* dispatcher_commit_applied() for a worker's heartbeat: when ups is empty and every update that
 * changed worker_id's heartbeat reply (st_update_worker) is durable, applied and cb run at once
 * instead of after everything queued before, since the reply shows nothing a restart could
 * lose. */
void dispatcher_commit_worker(struct dispatcher *d, struct st_update_list *ups, uint64_t worker_id,
                              void (*applied)(struct dispatcher *d, void *ctx), commit_cb cb,
                              void *ctx);

/* A pending reply: takes a reference on conn (released by dispatcher_req_done). */
void dispatcher_req_init(struct req *r, struct dispatcher *d, struct rpc_conn *conn, uint64_t id);
void dispatcher_req_done(struct req *r);
/* Answers request id with an Error (code, msg). */
void dispatcher_refuse(struct rpc_conn *conn, uint64_t id, int code, const char *msg);
/* The error a failed commit answers with. */
void dispatcher_refuse_commit(struct req *r, int status);
/* Sends env as the reply to r; a reply that cannot be encoded or queued becomes an Error, and a
 * connection that went away drops it. */
void dispatcher_send_reply(struct req *r, Sluice__Envelope *env);

/* The dataset's DatasetDef, decoded once and cached (owned by d), or NULL when it cannot be
 * decoded or cached. */
const Sluice__DatasetDef *dispatcher_dataset_def(struct dispatcher *d, const struct st_dataset *ds);

/* How long a task may sit settled with leases before they are leased again (server.c). */
uint32_t dispatcher_reissue_grace_ms(const struct dispatcher *d);
/* Whether every consumer of the iteration sent two heartbeats at or after since (uv_now
 * milliseconds): each then reported what it had received a little before (the first heartbeat
 * of a process that was stopped leaves out what reached it meanwhile). One silent since (a
 * stopped process, or a dead one not released yet) may hold elements it has not reported, so
 * none of the splits it may hold part of is produced again meanwhile. */
bool dispatcher_consumers_heard_since(struct dispatcher *d, uint64_t iteration_id, uint64_t since);
/* A monotonic clock in milliseconds read when called (uv_now is the loop's cached time, which
 * may lag by a whole loop iteration): what the ages of a reader's redo requests are taken
 * against. */
static inline uint64_t dispatcher_clock_ms(void)
{
    return uv_hrtime() / 1000000;
}
/* Whether the dispatcher started less than the re-issue grace ago: the only time
 * client_reported is recorded and consulted. */
bool dispatcher_coverage_settling(const struct dispatcher *d);

/* The soft-state tables: find (with the insertion point in *pos when not found), set (an
 * allocation failure only loses the entry) and delete. */
struct soft *dispatcher_soft_find(struct soft_table *t, uint64_t id, size_t *pos);
void dispatcher_soft_set(struct soft_table *t, uint64_t id, uint64_t when);
void dispatcher_soft_del(struct soft_table *t, uint64_t id);

/* Client (worker) id was heard over conn now: its connection is that one, and it is not gone
 * (or gone from now, when conn has closed already). */
void dispatcher_client_heard(struct dispatcher *d, uint64_t id, const struct rpc_conn *conn);
void dispatcher_worker_heard(struct dispatcher *d, uint64_t id, const struct rpc_conn *conn);

/* Once d is closing, its handles have closed and no split plan is running: frees d and calls
 * the close callback. */
void dispatcher_maybe_finish_close(struct dispatcher *d);

/* ---- the RPC handlers, called by the dispatch table in server.c ---- */

/* handlers_datasets.c */
void dispatcher_on_register_dataset(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env);
void dispatcher_on_get_dataset(struct dispatcher *d, struct rpc_conn *conn,
                               const Sluice__Envelope *env);

/* handlers_jobs.c */
/* On the thread pool: decodes a dataset's definition, checks its source against the data roots
 * (the files may have changed since it was registered) and builds its split provider. Returns
 * 0 with *spec and *p the caller's to release, or a negative code with the reason in why; then
 * *decoded says whether the definition decoded (the failure was the splitting's). */
int dispatcher_split_dataset(const uint8_t *def, size_t def_len, const struct pipe_roots *roots,
                             uint64_t split_size, struct pipe_spec **spec,
                             struct pipe_split_provider *p, bool *decoded, char *why,
                             size_t whylen);
/* Moves a split provider's plan into *plan (overwritten, not released), keeping what the journal
 * keeps: the numbers and the files, not how a worker reads the splits (kind, shuffled and seed
 * are zeroed), so an iteration's plan is the same after a restart as before it. p's plan is left
 * empty. */
void dispatcher_plan_take(struct pipe_split_provider *p, struct split_plan *plan);
/* Draws the secret of every ITERATION_CREATED in d->ups from index from on. On failure the
 * updates from there on are released and the code returned, with the reason in err. */
int dispatcher_draw_iteration_keys(struct dispatcher *d, size_t from, char *err, size_t errlen);
void dispatcher_on_get_or_create_job(struct dispatcher *d, struct rpc_conn *conn,
                                     const Sluice__Envelope *env);
/* Cancels the split plans queued on the thread pool (at close); those already running finish
 * and their callbacks free them. */
void dispatcher_jobs_cancel(struct dispatcher *d);

/* handlers_mixes.c */
void dispatcher_on_set_mix_weights(struct dispatcher *d, struct rpc_conn *conn,
                                   const Sluice__Envelope *env);
void dispatcher_on_report_position(struct dispatcher *d, struct rpc_conn *conn,
                                   const Sluice__Envelope *env);
void dispatcher_on_get_job_position(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env);
/* Whether a request presenting key (len bytes) may act for client cl: its iteration has no
 * secret (created before secrets existed: not checked), or key is the client's capability.
 * Otherwise writes the refusal into err and returns false. */
bool dispatcher_client_key_ok(const struct dispatcher *d, const struct st_client *cl,
                              const uint8_t *key, size_t len, char *err, size_t errlen);
void dispatcher_on_get_mix_schedule(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env);

/* handlers_saves.c */
void dispatcher_on_save_snapshot(struct dispatcher *d, struct rpc_conn *conn,
                                 const Sluice__Envelope *env);
void dispatcher_on_snapshot_status(struct dispatcher *d, struct rpc_conn *conn,
                                   const Sluice__Envelope *env);
/* Takes up running saves after a start (their meta written again) and finishes saves whose
 * iteration finished or failed, on the thread pool. Called at start, by the timer, and by
 * dispatcher_commit when a save's iteration finishes or fails. Only queues work: it never
 * commits before it returns. */
void dispatcher_saves_tick(struct dispatcher *d);
/* Cancels the saves' work queued on the thread pool (at close). */
void dispatcher_saves_cancel(struct dispatcher *d);

/* handlers_clients.c */
void dispatcher_on_client_heartbeat(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env);
void dispatcher_on_release_client(struct dispatcher *d, struct rpc_conn *conn,
                                  const Sluice__Envelope *env);

/* handlers_workers.c */
void dispatcher_on_worker_heartbeat(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env);
void dispatcher_on_get_splits(struct dispatcher *d, struct rpc_conn *conn,
                              const Sluice__Envelope *env);
void dispatcher_on_get_splits_batch(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env);

/* ---- tick.c ---- */

/* The timer: evicts silent workers and clients, leases stalled splits again, collects idle
 * iterations. */
void dispatcher_on_tick(uv_timer_t *timer);

#endif
