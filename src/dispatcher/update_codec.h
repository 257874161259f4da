/* The dispatcher's update codec, the bytes of its journal records (the journal's own framing
 * is journal/record.h): st_update <-> the Update message and struct
 * state <-> the Snapshot message (proto/journal.proto). Pure: no LMDB, no libuv; any thread.
 * Protobuf stays inside this file: callers see C structs and byte strings.
 *
 * Decoding is a trust boundary (the bytes come from disk, or from the fuzzer): every length is
 * bounded, every string checked against its C buffer, and a snapshot is checked against the
 * invariants state.h lists before it becomes a state, so that what decodes is a state the
 * dispatcher can serve from. An Update is only checked for its shape here; whether it fits the
 * state is state_apply()'s question, asked on replay exactly as it was live. */
#ifndef SLUICE_DISPATCHER_UPDATE_CODEC_H
#define SLUICE_DISPATCHER_UPDATE_CODEC_H

#include "state.h"

#include <stddef.h>
#include <stdint.h>

/* Serializes u. Returns 0 with *out (malloc'd; the caller frees it, non-NULL even for 0 bytes)
 * and *len, or SLUICE_ERR_NOMEM. */
int update_codec_encode(const struct st_update *u, uint8_t **out, size_t *len);

/* Parses an Update into *u, which is overwritten (not released first) and owns its strings and
 * arrays afterwards (st_update_release). Returns 0; SLUICE_ERR_CORRUPT with the reason in err
 * ("not an Update message", "unknown update type 99", "name of 300 bytes"); or
 * SLUICE_ERR_NOMEM. On failure *u is left zeroed, owning nothing. */
int update_codec_decode(const uint8_t *data, size_t len, struct st_update *u, char *err,
                        size_t errlen);

/* Serializes the whole durable state. Dataset definitions are not included, only their length
 * and crc32c: the journal keeps them in its datasets table. Returns 0 with *out (malloc'd) and
 * *len, or SLUICE_ERR_NOMEM. */
int update_codec_snapshot_encode(const struct state *s, uint8_t **out, size_t *len);

/* The same in two steps, so the packing (the costly part) can run on another thread while the
 * state goes on changing: update_codec_snapshot_take() copies what the snapshot holds of s
 * (every array and string; a pass over the state without encoding anything) and
 * update_codec_snapshot_pack() serializes that copy, from any thread, into the bytes
 * update_codec_snapshot_encode() would have produced from s at the take. Take returns 0 with *out
 * (free it with update_codec_snapshot_free) or SLUICE_ERR_NOMEM; pack returns as encode. */
struct update_codec_snapshot;
/* The memory one copy used, kept for the next (update_codec_snapshot_free with a spare): its
 * pages are in memory already, where a fresh copy's (about 15 MB at 50,000 tasks) are faulted
 * in as it is written, which was half of a copy's time. Zero-initialised is empty. A take uses
 * what fits and frees the rest; update_codec_spare_release frees it all. Not thread-safe: one
 * thread takes and frees with a given spare. */
struct arena_block;
struct update_codec_spare {
    struct arena_block *blocks;
};
/* spare may be NULL (fresh memory only). */
int update_codec_snapshot_take(const struct state *s, struct update_codec_spare *spare,
                               struct update_codec_snapshot **out);
int update_codec_snapshot_pack(const struct update_codec_snapshot *c, uint8_t **out, size_t *len);
/* Frees c; with spare non-NULL its memory goes there instead of back to the allocator. */
void update_codec_snapshot_free(struct update_codec_snapshot *c, struct update_codec_spare *spare);
void update_codec_spare_release(struct update_codec_spare *spare);

/* Supplies the definition bytes of a dataset named in a snapshot: returns 0 with *def
 * (malloc'd; ownership passes to the caller of the decoder) and *len, or a negative code with a
 * message in err. */
typedef int (*update_codec_def_lookup_cb)(void *user, const char *dataset_id, uint8_t **def,
                                          size_t *len, char *err, size_t errlen);

/* Parses a snapshot into *out (overwritten, not released first), fetching each dataset's
 * definition through lookup and checking its length and crc32c against the snapshot. Returns 0
 * with a state that holds every invariant of state.h (release with state_release); or
 * SLUICE_ERR_CORRUPT with the reason in err ("not a Snapshot message", "task 4 names unknown
 * worker 9", "dataset 'x': its definition does not match the snapshot"); or the lookup's code
 * and message; or SLUICE_ERR_NOMEM. On failure *out is an empty state (state_init). */
int update_codec_snapshot_decode(const uint8_t *data, size_t len, update_codec_def_lookup_cb lookup,
                                 void *user, struct state *out, char *err, size_t errlen);

#endif
