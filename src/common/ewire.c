/* The GetElementsReply Envelope by hand (see ewire.h). protobuf-c writes the fields of a message
 * in field-number order and leaves out proto3 scalars that are zero, false or empty; the body of
 * a oneof is written whenever it is the set case, even when empty. So the Envelope is
 *     [0x08 varint id]                        when id != 0
 *     0xfa 0x01 varint body_len               field 31, length-delimited
 *     [0x08 varint count]                     when count != 0
 *     [0x10 0x01]                             when end_of_sequence
 *     [0x1a varint len, then the payload]     when len != 0
 * The decoder accepts these fields in any order, each at most once, and declines everything it
 * would have to reason about to agree with protobuf-c: other fields, repeated fields (protobuf-c
 * keeps the last scalar and merges messages), non-canonical tags, over-long varints, booleans
 * other than 0 and 1, and counts or lengths that protobuf-c would truncate. */
#include "ewire.h"

#include "frame.h"
#include "varint.h"

#include <limits.h>

#define TAG_ID 0x08u      /* Envelope.id: field 1, varint */
#define TAG_BODY_0 0xfau  /* Envelope.get_elements_reply: field 31, length-delimited, */
#define TAG_BODY_1 0x01u  /* as the two-byte varint 31 << 3 | 2 */
#define TAG_COUNT 0x08u   /* GetElementsReply.count: field 1, varint */
#define TAG_EOS 0x10u     /* GetElementsReply.end_of_sequence: field 2, varint */
#define TAG_PAYLOAD 0x1au /* GetElementsReply.payload: field 3, length-delimited */
#define LENGTH_MAX_LEN 5  /* and for a length prefix's end here */

_Static_assert(EWIRE_PREFIX_MAX == FRAME_HEADER_SIZE + (1 + 10) + (2 + 5) + (1 + 5) + 2 + (1 + 5),
               "EWIRE_PREFIX_MAX is the longest prefix");

size_t ewire_reply_prefix(uint8_t out[EWIRE_PREFIX_MAX], uint64_t id, uint32_t count, bool eos,
                          size_t len, uint64_t *env_len)
{
    uint64_t body = 0;
    if (count)
        body += 1 + varint_len(count);
    if (eos)
        body += 2;
    if (len) {
        if ((uint64_t)len > UINT32_MAX)
            return 0;
        body += 1 + varint_len(len) + len;
    }
    if (body > UINT32_MAX)
        return 0;
    uint64_t env = 2 + varint_len(body) + body;
    if (id)
        env += 1 + varint_len(id);
    if (env > UINT32_MAX)
        return 0;

    uint8_t *p = out;
    frame_write_header(p, (uint32_t)env);
    p += FRAME_HEADER_SIZE;
    if (id) {
        *p++ = TAG_ID;
        p += varint_put(p, id);
    }
    *p++ = TAG_BODY_0;
    *p++ = TAG_BODY_1;
    p += varint_put(p, body);
    if (count) {
        *p++ = TAG_COUNT;
        p += varint_put(p, count);
    }
    if (eos) {
        *p++ = TAG_EOS;
        *p++ = 1;
    }
    if (len) {
        *p++ = TAG_PAYLOAD;
        p += varint_put(p, len);
    }
    *env_len = env;
    return (size_t)(p - out);
}

/* Reads a length prefix at d[*pos, end) and checks that the bytes it announces are there. */
static bool get_length(const uint8_t *d, size_t end, size_t *pos, size_t *len)
{
    uint64_t v;
    if (!varint_get(d, end, pos, LENGTH_MAX_LEN, &v) || v > INT_MAX || v > end - *pos)
        return false;
    *len = (size_t)v;
    return true;
}

/* Decodes the GetElementsReply in d[pos, end). */
static bool decode_body(const uint8_t *d, size_t pos, size_t end, struct ewire_reply *out)
{
    bool have_count = false, have_eos = false, have_payload = false;
    while (pos < end) {
        uint8_t tag = d[pos++];
        uint64_t v;
        if (tag == TAG_COUNT && !have_count) {
            if (!varint_get(d, end, &pos, LENGTH_MAX_LEN, &v) || v > UINT32_MAX)
                return false;
            out->count = (uint32_t)v;
            have_count = true;
        } else if (tag == TAG_EOS && !have_eos) {
            if (pos >= end || d[pos] > 1)
                return false;
            out->end_of_sequence = d[pos++] == 1;
            have_eos = true;
        } else if (tag == TAG_PAYLOAD && !have_payload) {
            size_t n;
            if (!get_length(d, end, &pos, &n))
                return false;
            out->payload = n ? d + pos : NULL;
            out->len = n;
            pos += n;
            have_payload = true;
        } else {
            return false;
        }
    }
    return true;
}

bool ewire_reply_decode(const uint8_t *env, size_t len, struct ewire_reply *out)
{
    out->id = 0;
    out->count = 0;
    out->end_of_sequence = false;
    out->payload = NULL;
    out->len = 0;
    bool have_id = false, have_body = false;
    size_t pos = 0;
    while (pos < len) {
        uint8_t tag = env[pos++];
        if (tag == TAG_ID && !have_id) {
            if (!varint_get(env, len, &pos, VARINT_MAX_LEN, &out->id))
                return false;
            have_id = true;
        } else if (tag == TAG_BODY_0 && !have_body) {
            size_t n;
            if (pos >= len || env[pos++] != TAG_BODY_1 || !get_length(env, len, &pos, &n))
                return false;
            if (!decode_body(env, pos, pos + n, out))
                return false;
            pos += n;
            have_body = true;
        } else {
            return false;
        }
    }
    return have_body;
}
