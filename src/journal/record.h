/* The framing of every value the journal stores: a checksum and a format byte around an opaque
 * payload. Pure: no LMDB, no allocation; any thread. The fuzzer feeds journal_record_decode()
 * arbitrary bytes, exactly as the journal feeds it the values it reads back.
 *
 * A framed value is
 *     u32 crc32c (big-endian) | u8 format (JOURNAL_RECORD_FORMAT) | payload
 * where the checksum covers the key the value is stored under, then the format byte, then the
 * payload. Covering the key means a value that ends up under another key (a sequence number
 * written twice, a page of the map that points to the wrong place) fails its check like a
 * flipped bit does. */
#ifndef SLUICE_JOURNAL_RECORD_H
#define SLUICE_JOURNAL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define JOURNAL_RECORD_FORMAT 1
#define JOURNAL_RECORD_HEADER 5 /* checksum and format byte */

/* Bytes a framed value of a payload of len bytes takes. */
static inline size_t journal_record_size(size_t len)
{
    return JOURNAL_RECORD_HEADER + len;
}

/* Writes the framed value into out, which must hold journal_record_size(len) bytes. key (klen
 * bytes) is the key the value will be stored under; payload may be NULL when len is 0. */
void journal_record_frame(uint8_t *out, const void *key, size_t klen, const void *payload,
                          size_t len);

/* Frames in place: the payload (len bytes) is already at out + JOURNAL_RECORD_HEADER, as when it
 * was written straight into space the map reserved; this fills in the header. */
void journal_record_seal(uint8_t *out, const void *key, size_t klen, size_t len);

/* Checks a framed value read back from under key. On success returns 0 with *payload pointing
 * into value (not copied: valid as long as value is) and *len its length. Returns
 * SLUICE_ERR_TRUNCATED when vlen is shorter than the header, SLUICE_ERR_CORRUPT when the
 * checksum does not match or the format byte is unknown; *payload and *len are then untouched.
 * why (may be NULL) receives a static phrase for messages: "checksum mismatch", ... */
int journal_record_decode(const uint8_t *value, size_t vlen, const void *key, size_t klen,
                          const uint8_t **payload, size_t *len, const char **why);

/* The 8-byte big-endian key of a sequence number, and back. Big-endian keys sort in LMDB's
 * default byte order exactly as the numbers do. */
void journal_seq_key(uint64_t seq, uint8_t out[8]);
uint64_t journal_seq_from_key(const uint8_t key[8]);

#endif
