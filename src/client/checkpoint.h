/* The position of a distributed_epoch read as the caller can keep it (sluice_iterator_save):
 * what the reader was handed, by split and position, in a versioned, self-checking byte string.
 * Pure: no I/O, no clock.
 *
 * A position is a struct ledger of what the reader received: its done set (splits handed out in
 * full, a few ranges of sequence numbers since splits are leased mostly in order) and one entry
 * per split handed out in part (the splits in flight), so its size grows with the splits in
 * flight, not with the position. Restoring it (sluice_read_options.restore) starts a new
 * iteration whose done splits are never leased, re-issues the splits in flight from their start,
 * and drops the positions the reader already had: resuming costs re-processing at most those.
 *
 * Format (all integers varints unless said otherwise):
 *     "SLUICECK" (8 bytes), u8 version = 1, flags,
 *     dataset id (length, bytes), job name (length, bytes),
 *     def_hash (u64 LE), plan_hash (u64 LE), split_total, delivered,
 *     number of done ranges, then begin and length of each (begin as the gap after the previous
 *     range's end),
 *     number of partial splits, then for each: seq (as the gap after the previous one's seq + 1),
 *     ended, total (when ended), number of ranges, the ranges as above,
 *     u32 LE crc32c of everything before it.
 * A decoder refuses anything else: a bad magic, another version, a checksum mismatch, ranges that
 * are not sorted and disjoint, a partial split inside the done set, trailing bytes. */
#ifndef SLUICE_CLIENT_CHECKPOINT_H
#define SLUICE_CLIENT_CHECKPOINT_H

#include "ledger.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CHECKPOINT_VERSION 1
#define CHECKPOINT_NAME_MAX 256 /* dataset id and job name, including the NUL */
/* The read was deterministic (its order is a function of the dataset). */
#define CHECKPOINT_DETERMINISTIC 0x1u
/* Decoding refuses more partial splits or ranges than this: a position worth keeping never
 * has them, and a hostile or damaged file must not make the reader allocate without bound. */
#define CHECKPOINT_MAX_ENTRIES (1u << 20)

struct checkpoint {
    char dataset_id[CHECKPOINT_NAME_MAX];
    char job_name[CHECKPOINT_NAME_MAX];
    uint32_t flags;
    uint64_t def_hash;    /* checkpoint_def_hash of the dataset's definition */
    uint64_t plan_hash;   /* the dispatcher's fingerprint of the iteration's split plan */
    uint64_t split_total; /* splits in the iteration's sequence, UINT64_MAX when endless */
    uint64_t delivered;   /* elements handed to the reader */
    struct ledger pos;    /* done: splits handed out whole; v: splits handed out in part */
};

void checkpoint_init(struct checkpoint *c);
void checkpoint_release(struct checkpoint *c);

/* FNV-1a (64 bits) of a dataset definition as the client packs it. */
uint64_t checkpoint_def_hash(const uint8_t *def, size_t len);

/* Encodes c into a new malloc'd buffer (*out, *len). Entries of c->pos that hold nothing (no
 * position and no end marker) are left out. Returns 0 or SLUICE_ERR_NOMEM. */
int checkpoint_encode(const struct checkpoint *c, uint8_t **out, size_t *len);

/* Decodes len bytes at p into c (initialized by the caller; released and initialized again on
 * failure). Returns 0, or SLUICE_ERR_INVALID (not a checkpoint, another version, bad contents),
 * SLUICE_ERR_CORRUPT (checksum mismatch, truncated) or SLUICE_ERR_NOMEM, with a message. */
int checkpoint_decode(const uint8_t *p, size_t len, struct checkpoint *c, char *err, size_t errlen);

/* Adds what src holds (done splits, positions, end markers) to dst; src's done splits go to
 * dst's had set when as_had (a restored read's own ledger: the dispatcher may not know them
 * finished), else to its done set. Returns 0, SLUICE_ERR_NOMEM or SLUICE_ERR_CORRUPT (an end
 * marker whose count differs from dst's). */
int checkpoint_seed(struct ledger *dst, const struct ledger *src, bool as_had);

/* Adds src's position to dst's (the consumers of a shared job had disjoint elements): their done
 * splits and positions joined, splits now whole moved to done, delivered summed. Both must be of
 * the same dataset, definition and split plan, else SLUICE_ERR_INVALID with the difference.
 * Returns 0, SLUICE_ERR_INVALID, SLUICE_ERR_CORRUPT (one split ended with two counts) or
 * SLUICE_ERR_NOMEM. */
int checkpoint_merge(struct checkpoint *dst, const struct checkpoint *src, char *err,
                     size_t errlen);

/* ---- mixed reads ----------------------------------------------------------------------------
 *
 * A distributed_epoch read of sample_from_datasets or choose_from_datasets reads each input (and
 * the choice pipeline) as a read of its own (iterator_mix.c); its position is the mixer's state
 * plus each of those reads' checkpoints, nested whole.
 *
 * Format: "SLUICEMX" (8 bytes), u8 version = 1, flags, dataset id, job name, def_hash (u64 LE),
 * delivered, pos, nchoices, pending, ended (0 or 1), number of inputs, one byte per input (1: it
 * ended), number of nested checkpoints (the inputs', then the choice pipeline's), each as length
 * and bytes, u32 LE crc32c of everything before it. The nested checkpoints are checked when they
 * are decoded themselves. */

#define CHECKPOINT_MIX_VERSION 1
/* Nested checkpoints: inputs of a mix plus its choice pipeline. */
#define CHECKPOINT_MIX_MAX_READS 65

struct checkpoint_mix {
    char dataset_id[CHECKPOINT_NAME_MAX];
    char job_name[CHECKPOINT_NAME_MAX];
    uint32_t flags;
    uint64_t def_hash, delivered;
    uint64_t pos, nchoices, pending; /* struct pipe_mix_state */
    bool ended;
    size_t ninputs;
    bool done[CHECKPOINT_MIX_MAX_READS];
    size_t nreads;
    const uint8_t *read[CHECKPOINT_MIX_MAX_READS]; /* decoded: views into the bytes decoded */
    size_t read_len[CHECKPOINT_MIX_MAX_READS];
};

/* Whether len bytes at p start like a mixed read's checkpoint. */
bool checkpoint_is_mix(const uint8_t *p, size_t len);
/* Encodes c (its nested checkpoints are copied) into a new malloc'd buffer. Returns 0 or
 * SLUICE_ERR_NOMEM. */
int checkpoint_mix_encode(const struct checkpoint_mix *c, uint8_t **out, size_t *len);
/* Decodes len bytes at p into c; c->read[] point into p, which must outlive their use. Returns 0,
 * SLUICE_ERR_INVALID or SLUICE_ERR_CORRUPT with a message. */
int checkpoint_mix_decode(const uint8_t *p, size_t len, struct checkpoint_mix *c, char *err,
                          size_t errlen);

#endif
