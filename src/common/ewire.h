/* A hand codec for the one message the data plane carries in bulk: an Envelope whose body is a
 * GetElementsReply (proto/wire.proto). Pure: no allocation, no I/O; any thread.
 *
 * Why it exists: packing that Envelope with protobuf-c copies the payload into the frame, and
 * unpacking it copies the payload out again. A frame is the prefix written here followed by the
 * payload bytes, so a writer can send the payload from where it already lies, and a reader can
 * take the payload as a view into the frame it received.
 *
 * Contract with protobuf-c: the prefix plus the payload are byte for byte what
 * sluice__envelope__pack() (behind frame_write_header()) gives for the same Envelope. The decoder
 * accepts only the plain shape of that Envelope (each field at most once, canonical tags, no
 * other field, lengths that fit); for those bytes it yields exactly what
 * sluice__envelope__unpack() yields. Anything else it declines, and the caller unpacks the bytes
 * with protobuf-c, which has the last word on them (including rejecting them). */
#ifndef SLUICE_COMMON_EWIRE_H
#define SLUICE_COMMON_EWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest prefix: the 4-byte frame header; the id (tag and a 10-byte varint); the body's tag
 * (2 bytes) and length (5); count (tag and 5), end_of_sequence (2) and the payload's tag and
 * length (1 + 5). */
#define EWIRE_PREFIX_MAX 36

struct ewire_reply {
    uint64_t id;
    uint32_t count;
    bool end_of_sequence;
    const uint8_t *payload; /* into the decoded bytes; NULL when len is 0 */
    size_t len;
};

/* Writes into out the frame header and every Envelope byte that precedes the payload, for the
 * Envelope {id, get_elements_reply {count, end_of_sequence, payload of len bytes}}. Returns the
 * number of bytes written (at most EWIRE_PREFIX_MAX); *env_len receives the Envelope's packed
 * size (the frame header's value), which the caller checks against its frame limit. Returns 0
 * when the Envelope would not fit a frame length (over UINT32_MAX bytes); nothing useful is in
 * out then. */
size_t ewire_reply_prefix(uint8_t out[EWIRE_PREFIX_MAX], uint64_t id, uint32_t count, bool eos,
                          size_t len, uint64_t *env_len);

/* Decodes env[0, len), one Envelope without its frame header. Returns true and fills *out when
 * it is a GetElementsReply Envelope in the plain shape described above; out->payload then points
 * into env. Returns false for anything else (out is unspecified): the caller unpacks with
 * protobuf-c. */
bool ewire_reply_decode(const uint8_t *env, size_t len, struct ewire_reply *out);

#endif
