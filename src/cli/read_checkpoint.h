/* The checkpoint file of `sluice read --checkpoint FILE`: the read's position (an iterator
 * checkpoint, sluice_iterator_save) and how much output it covers, replaced atomically.
 *
 * Format: "SLREADCK" (8 bytes), u32 LE version = 1, u64 LE output bytes, u64 LE elements printed
 * over every run, u32 LE length of the iterator checkpoint, its bytes, u32 LE crc32c of
 * everything before it. */
#ifndef SLUICE_CLI_READ_CHECKPOINT_H
#define SLUICE_CLI_READ_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

struct read_ckpt {
    uint64_t output_bytes; /* bytes of --output the position covers (0 for standard output) */
    uint64_t printed;      /* elements printed up to the position, over every run */
    uint8_t *pos;          /* the iterator checkpoint (owned) */
    size_t pos_len;
};

void read_ckpt_release(struct read_ckpt *c);

/* Encodes c into a new malloc'd buffer. Returns 0 or SLUICE_ERR_NOMEM. Pure. */
int read_ckpt_encode(const struct read_ckpt *c, uint8_t **out, size_t *len);
/* Decodes len bytes at p into c (zeroed by the caller). Returns 0, or SLUICE_ERR_INVALID (not
 * a checkpoint of `sluice read`, another version) or SLUICE_ERR_CORRUPT (damaged, cut short) with
 * a message, or SLUICE_ERR_NOMEM. Pure. */
int read_ckpt_decode(const uint8_t *p, size_t len, struct read_ckpt *c, char *err, size_t errlen);

/* Loads path into c. Returns 1 (loaded), 0 (no such file: a first run) or a negative code with a
 * message naming the file. */
int read_ckpt_load(const char *path, struct read_ckpt *c, char *err, size_t errlen);
/* Writes c to path atomically: to PATH.tmp, fsync, rename over path, fsync of the directory. A
 * crash leaves the old file or the new one, never a mix. Returns 0 or a negative code with a
 * message. */
int read_ckpt_store(const char *path, const struct read_ckpt *c, char *err, size_t errlen);

#endif
