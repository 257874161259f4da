/* A dispatcher replica's Raft directory (WORK_DIR/raft, replica.h), read without a replica: for
 * `sluice journal dump|verify`.
 *
 * The directory is read with C-Raft's own storage code (raft_uv's load, the code a starting
 * replica runs), never by parsing its files here. That code may change the directory it loads
 * (it finalizes open segments, truncates a partly written tail, rewrites the metadata), so it
 * never runs on the replica's directory: replica_log_load() copies the directory's regular files
 * into a private temporary directory, loads the copy and removes it. A copy taken while the
 * replica writes can catch a file mid-rename (an open segment closed, a snapshot taken, old
 * segments removed): when the directory's listing changed during the copy, or the load failed
 * and the directory changed since the copy began, it copies again (up to 20 times). A batch being
 * written at the end of an open segment is what C-Raft finds after a crash, and loads as the
 * log up to it.
 *
 * replica_log_replay() then rebuilds the state exactly as a replica's FSM does: the snapshot
 * restored with replica_state_restore(), each command entry after it parsed and applied with
 * replica_entry_parse() and replica_entry_apply() (replica_codec.h).
 *
 * Threads: any one thread; replica_log_load() runs a libuv loop of its own. */
#ifndef SLUICE_DISPATCHER_REPLICA_LOG_H
#define SLUICE_DISPATCHER_REPLICA_LOG_H

#include "dispatcher/replica_codec.h"
#include "dispatcher/state.h"

#include <raft.h>

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What C-Raft loaded from a copy of a Raft directory. */
struct replica_log {
    char dir[PATH_MAX];                      /* the directory read (not the copy) */
    char cluster[REPLICA_MEMBERS_MAX * 300]; /* its sluice-cluster file, "" when none */
    uint64_t term, voted_for;                /* from its metadata */
    struct raft_snapshot *snapshot;          /* the latest snapshot, or NULL */
    char snapshot_file[256];                 /* the snapshot's file name, "" without one */
    uint64_t start_index;                    /* the index of entries[0] */
    struct raft_entry *entries;              /* the log (C-Raft's memory) */
    size_t n;
    unsigned copies; /* how many copies it took (1: no retry) */
    char *segments;  /* the segment files' names, for messages */
};

/* Where a Raft directory is for work_dir: WORK_DIR/raft when that is a directory, or work_dir
 * itself when it holds C-Raft's metadata files or a sluice-cluster file. Returns 1 with the path
 * in out, 0 when work_dir holds no Raft directory (an LMDB journal or nothing), or a negative
 * code with a message (a path too long). */
int replica_log_find(const char *work_dir, char *out, size_t outlen, char *err, size_t errlen);

/* Loads the Raft directory dir (a copy of it, as above) into *log. Returns 0, or
 * SLUICE_ERR_CORRUPT with a message naming the damaged file (C-Raft's own words: "load closed
 * segment 0000000000000001-0000000000000004: ..."), or another negative code (a file that cannot
 * be read or copied, no space for the copy). *log is replica_log_release()d by the caller after
 * a success only. */
int replica_log_load(const char *dir, struct replica_log *log, char *err, size_t errlen);

void replica_log_release(struct replica_log *log);

/* The name of the closed segment file that holds entry index ("0000000000000005-0000000000000009")
 * as listed when the directory was copied, or NULL (the entry is in an open segment, whose name
 * does not say which entries it holds). */
const char *replica_log_segment_of(const struct replica_log *log, uint64_t index);

/* Called by replica_log_replay() for what it replays, in log order; any of them may be NULL.
 * snapshot: after the snapshot is restored into st. entry: before a command entry is applied
 * (e: parsed, or NULL for an entry of another kind: a configuration change or a barrier;
 * replayed false for an entry the snapshot covers, which is not applied). record: for each
 * update record of a batch entry, decoded, before it is applied (seq: st->applied + 1, the
 * number the update gets). A callback returning non-zero stops the replay with that code. */
struct replica_log_visit {
    int (*snapshot)(void *user, const struct replica_log *log, const struct state *st);
    int (*entry)(void *user, uint64_t index, const struct raft_entry *raw,
                 const struct replica_entry *e, bool replayed);
    int (*record)(void *user, uint64_t seq, const struct st_update *u);
    void *user;
};

/* Rebuilds the state of a replica whose log is log into *st (initialized by the caller, with its
 * limits; on failure it holds what was applied before the damage). Every entry after the
 * snapshot is applied, committed or not: C-Raft keeps no commit index on disk, so entries at the
 * tail of a log that were never committed (a deposed leader's) are replayed too. Returns 0, or
 * SLUICE_ERR_CORRUPT / SLUICE_ERR_NOMEM with a message naming the entry and its file ("entry 57
 * (term 2) in segment 0000000000000050-0000000000000064: record 3 does not decode: ..."), or
 * what a callback returned. */
int replica_log_replay(const struct replica_log *log, struct state *st,
                       const struct replica_log_visit *visit, char *err, size_t errlen);

#endif
