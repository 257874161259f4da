/* What dispatcher replicas write into Raft (replica.h), as pure functions: the cluster list,
 * entries, snapshots of the state and copies of it. No Raft, no libuv: the FSM of replica.c, the
 * deterministic multi-replica test and the fuzzer use the same code.
 *
 * An entry is
 *
 *     "SLR1" | origin id u64 | term u64 | rpc address: u16 length, bytes | count u32 |
 *     count x (u32 length, an update_codec record)
 *
 * then zeros up to a multiple of 8 bytes (C-Raft's rule for entries), all little-endian: origin
 * and term say which leader wrote it and in which term (a term has at most one leader), the RPC
 * address is that leader's, and the records are one group-commit batch. An entry with no
 * records is a leader's announcement.
 *
 * A snapshot is "SLS1" | u64 length | the state's snapshot (update_codec) | u32 datasets | per
 * dataset: u16 id length, id, u64 definition length, definition. */
#ifndef SLUICE_DISPATCHER_REPLICA_CODEC_H
#define SLUICE_DISPATCHER_REPLICA_CODEC_H

#include "dispatcher/state.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REPLICA_MEMBERS_MAX 7
#define REPLICA_ADDR_MAX 256
/* The most records one entry may carry: bounds a hostile or damaged entry. */
#define REPLICA_ENTRY_RECORDS_MAX (1u << 24)

/* Parses a cluster list "1=HOST:PORT,2=HOST:PORT,3=HOST:PORT" (ids 1 to 2^63, each once, each
 * address once, 1 to REPLICA_MEMBERS_MAX members) and checks that self_id is a member and, when
 * self_address is not NULL, that its address is self_address. Fills ids/addrs by id and writes
 * the canonical form (members by id) to canon. Returns 0, or SLUICE_ERR_INVALID with a
 * message. */
int replica_parse_cluster(const char *text, uint64_t self_id, const char *self_address,
                          uint64_t ids[REPLICA_MEMBERS_MAX], char addrs[][REPLICA_ADDR_MAX],
                          size_t *n, char *canon, size_t canonlen, char *err, size_t errlen);

/* A replica whose Raft directory is new asks every other member for the last index of its log
 * (a probe) before it either bootstraps the group or joins it. answers[i] is peer i's last
 * index, or REPLICA_UNKNOWN (not answered: unreachable, refused, not asked yet).
 *   REPLICA_JOIN       some peer's log has more than the bootstrap entry (index 1): the group
 *                      runs, and this replica may have acknowledged entries before it lost its
 *                      directory, so it must not vote until the leader has added it back;
 *   REPLICA_BOOTSTRAP  every peer answered, none past index 1: nothing was ever committed
 *                      beyond the bootstrap, so this replica bootstraps with the others (also
 *                      with no peers: a group of one);
 *   REPLICA_WAIT       otherwise: asks again later. Pure. */
#define REPLICA_UNKNOWN UINT64_MAX
enum replica_join { REPLICA_WAIT, REPLICA_BOOTSTRAP, REPLICA_JOIN };
enum replica_join replica_join_decide(const uint64_t *answers, size_t npeers);

struct replica_record {
    const uint8_t *data;
    size_t len;
};

/* Encodes an entry into memory from alloc (NULL: malloc). Returns 0 with *out and *len (a
 * multiple of 8), or SLUICE_ERR_NOMEM, or SLUICE_ERR_INVALID for an address of
 * REPLICA_ADDR_MAX bytes or more. */
int replica_entry_encode(uint64_t origin, uint64_t term, const char *rpc,
                         const struct replica_record *recs, size_t n, void *(*alloc)(size_t),
                         uint8_t **out, size_t *len);

/* A seed entry (count REPLICA_ENTRY_SEED) carries, instead of records, a u64 length and a
 * snapshot of replica_snapshot_encode: the state of a single dispatcher's journal that a new
 * group starts from (`--raft-seed-journal`). */
#define REPLICA_ENTRY_SEED UINT32_MAX

struct replica_entry {
    uint64_t origin, term;
    char rpc[REPLICA_ADDR_MAX];
    uint32_t count;
    const uint8_t *records; /* count x (u32 length, bytes), checked */
    const uint8_t *seed;    /* a seed entry's snapshot, or NULL */
    size_t seed_len;
};

/* Encodes a seed entry holding snapshot (replica_snapshot_encode's bytes), as
 * replica_entry_encode. */
int replica_entry_encode_seed(uint64_t origin, uint64_t term, const char *rpc,
                              const uint8_t *snapshot, size_t len, void *(*alloc)(size_t),
                              uint8_t **out, size_t *outlen);

/* Parses and checks an entry (its length a multiple of 8, every record's framing, the padding
 * zeros). Returns 0, or
 * SLUICE_ERR_CORRUPT with the reason. */
int replica_entry_parse(const uint8_t *p, size_t len, struct replica_entry *e, char *err,
                        size_t errlen);

/* Steps through a parsed entry's records: *cursor starts at 0. Returns true with the next record
 * in *data and *len, false after the last. */
bool replica_entry_next(const struct replica_entry *e, uint64_t *cursor, const uint8_t **data,
                        size_t *len);

/* Decodes each update record of e in order and calls fn with its index and the update (released
 * after the call). Stops at the first record that does not decode (SLUICE_ERR_CORRUPT and the
 * like, "record I does not decode: ...") or the first non-zero return of fn, and returns that.
 * Pure. */
typedef int (*replica_update_fn)(void *user, uint32_t i, const struct st_update *u, char *err,
                                 size_t errlen);
int replica_entry_updates(const struct replica_entry *e, replica_update_fn fn, void *user,
                          char *err, size_t errlen);

/* Decodes every record of a parsed entry and applies it to each of the n states (a state NULL is
 * skipped), in order. A seed entry replaces each state that is still empty (nothing applied,
 * no dataset) with the seed's, keeping its limits; a state that is not empty keeps what it has
 * (*seeded counts the states replaced; may be NULL). Returns 0, or SLUICE_ERR_CORRUPT /
 * SLUICE_ERR_NOMEM with the reason
 * ("record 3 does not decode: ...", "task_created 7 does not apply: corrupt data"); the states
 * may then hold the records before it. */
int replica_entry_apply(const struct replica_entry *e, struct state *const *states, size_t n,
                        size_t *seeded, char *err, size_t errlen);

/* Encodes a snapshot of s (with its datasets' definitions) into memory from alloc (NULL:
 * malloc). Returns 0, or SLUICE_ERR_NOMEM. */
int replica_snapshot_encode(const struct state *s, void *(*alloc)(size_t), uint8_t **out,
                            size_t *len);

/* Decodes a snapshot into *out (overwritten, not released first; an empty state on failure).
 * Its CRC is checked first ("snapshot: checksum mismatch (stored X, computed Y)"). Returns 0,
 * or SLUICE_ERR_CORRUPT / SLUICE_ERR_NOMEM with the reason. */
int replica_snapshot_decode(const uint8_t *p, size_t len, struct state *out, char *err,
                            size_t errlen);

/* Restores a snapshot (replica_snapshot_decode's bytes) into *s, as Raft's FSM restore does on a
 * replica and `sluice journal` does on a copy of its Raft directory: *s is replaced by the
 * snapshot's state (its old contents released) but keeps its limits and static workers
 * (configuration, not state). On failure *s is unchanged. Returns 0, or SLUICE_ERR_CORRUPT /
 * SLUICE_ERR_NOMEM with the reason. */
int replica_state_restore(struct state *s, const uint8_t *p, size_t len, char *err, size_t errlen);

/* *dst = a copy of src's durable state (snapshot and back); dst's limits and static workers
 * (configuration, not state) are kept. On failure dst is unchanged. */
int replica_state_copy(struct state *dst, const struct state *src, char *err, size_t errlen);

#endif
