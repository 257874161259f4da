/* Dispatcher replicas on Raft (C-Raft, docs/design.md §6): three or five dispatchers keep one
 * state, and the leader serves while the others follow.
 *
 * The state machine is the dispatcher's own: Raft carries the update records the journal
 * carries (update_codec), one Raft entry per group-commit batch (journal_thread.h with a sink),
 * and every replica applies them with state_apply(). A reply that depends on an update leaves
 * once the update is committed on a majority, the journal's rule with "durable" meaning "on a
 * majority".
 *
 * Two states. `committed` holds exactly the committed entries on every replica (the FSM). The
 * dispatcher's working state (d->st) is what handlers plan against: on the leader it runs ahead
 * of `committed` by the updates not committed yet; on a follower it follows `committed` entry by
 * entry. A replica that loses leadership throws its working state away and copies `committed`
 * into it, so nothing a deposed leader applied but never committed survives there.
 *
 * Serving. A newly elected leader first commits an announcement entry (no updates; it carries
 * the leader's RPC address, which every replica learns from it, to redirect callers): once it is
 * applied every earlier entry is too, and the leader serves. Until then, and on followers, every
 * request but Status is answered SLUICE_ERR_NOT_LEADER with the leader's RPC address when known.
 *
 * Threads: the loop thread only. */
#ifndef SLUICE_DISPATCHER_REPLICA_H
#define SLUICE_DISPATCHER_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replica_codec.h"

struct dispatcher;
struct dispatcher_opts;
struct replica;

struct journal_thread;
struct journal_record;
struct security_ctx;
struct state;
struct uv_loop_s;

/* The default election timeout: C-Raft waits a random 1 to 2 times it without a leader before
 * it asks for votes, so a leader's crash costs at most about twice this (heartbeats go every
 * tenth of it). */
#define REPLICA_ELECTION_TIMEOUT_MS 600

/* Entries between snapshots by default. A snapshot encodes the whole state on the loop's
 * thread (tens of milliseconds for 10,000 tasks, during which nothing is answered), so it must
 * be rare under load: 1024 entries came every ~1.2 s at 5,000 leases/s and raised the lease p99
 * sevenfold; Raft keeps the entries since the last snapshot in memory (a few KiB each). */
#define REPLICA_SNAPSHOT_ENTRIES 8192

/* What a replica needs from its dispatcher. */
struct replica_opts {
    struct uv_loop_s *loop;
    uint64_t id;
    const char *address; /* this replica's Raft address, as in cluster */
    const char *cluster; /* "1=HOST:PORT,2=HOST:PORT,3=HOST:PORT" */
    const char *bind;    /* NULL: address */
    const char *rpc;     /* the RPC address it announces when it leads */
    const char *work_dir;
    uint32_t election_timeout_ms;   /* 0: REPLICA_ELECTION_TIMEOUT_MS */
    uint64_t snapshot_threshold;    /* entries between snapshots; 0: REPLICA_SNAPSHOT_ENTRIES */
    const struct security_ctx *sec; /* NULL: no token, no TLS */
    /* A state to start a new group from (a single dispatcher's journal, --raft-seed-journal),
     * or NULL; it passes to the replica (released by it). Used only when this replica's Raft
     * directory is bootstrapped now: the first leader of the group whose state is still empty
     * commits it as a seed entry (replica_codec.h) before it serves. */
    struct state *seed;
    /* The dispatcher's working state (replica.h's first paragraph), which the replica copies
     * committed state into and follows on; its limits are configuration. */
    struct state *work;
    /* serve: it leads and its log holds every earlier entry; unserve: it stopped leading;
     * fatal: the state can no longer be kept (msg: "what: why"). */
    void (*serve)(void *user);
    void (*unserve)(void *user);
    void (*fatal)(void *user, const char *msg);
    void *user;
};

/* Starts a replica: opens (or creates) the Raft directory WORK_DIR/raft, checks that it belongs
 * to this cluster, bootstraps a fresh one, and starts Raft on the loop. The working state stays
 * as it is (empty) until the log is applied. Returns 0, or a negative code with a message. */
int replica_start(const struct replica_opts *opts, struct replica **out, char *err, size_t errlen);

/* journal_thread_opts.sink while it serves (user: the replica): one batch, one entry. */
int replica_sink(void *user, struct journal_thread *jt, const struct journal_record *recs,
                 size_t n);

/* Whether this replica is the leader and serves (its announcement is applied). */
bool replica_serving(struct replica *r);
/* The leader's RPC address as this replica knows it, or "" when it knows none. */
const char *replica_leader_rpc(const struct replica *r);

/* This replica's view, for status and metrics. */
struct status_raft;
void replica_view(struct replica *r, struct status_raft *v);

/* Hands leadership to a caught-up follower (SIGTERM on the leader), then calls cb once the
 * transfer is done or given up (at most an election timeout). cb runs at once when this
 * replica is not the leader. */
void replica_handover(struct replica *r, void (*cb)(void *user), void *user);

/* Stops Raft and frees r once everything is closed, then calls cb. */
void replica_close(struct replica *r, void (*cb)(void *user), void *user);

#endif
