/* Fuzzes the hand codec of GetElementsReply Envelopes against protobuf-c.
 * - Decoding: the input is one Envelope. Whenever ewire_reply_decode accepts it, protobuf-c must
 *   unpack it too, as a GetElementsReply with the same id, count, end_of_sequence and payload
 *   bytes, and the payload view must lie inside the input. (Declining is always allowed.)
 * - Encoding: the input's first bytes choose an id, a count, a flag and a payload length (the
 *   payload is the rest of the input); the hand prefix followed by the payload must equal what
 *   protobuf-c packs behind a frame header, and the hand decoder must accept that Envelope and
 *   give the fields back. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/ewire.h"
#include "common/frame.h"
#include "wire.pb-c.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static void check_decode(const uint8_t *data, size_t size)
{
    struct ewire_reply r;
    bool accepted = ewire_reply_decode(data, size, &r);
    Sluice__Envelope *env = sluice__envelope__unpack(NULL, size, data);
    if (accepted) {
        CHECK(env != NULL);
        CHECK(env->body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY);
        CHECK(env->get_elements_reply != NULL);
        CHECK(env->id == r.id);
        const Sluice__GetElementsReply *g = env->get_elements_reply;
        CHECK(g->count == r.count);
        CHECK(g->end_of_sequence == r.end_of_sequence);
        CHECK(g->payload.len == r.len);
        CHECK((r.len == 0) == (r.payload == NULL));
        if (r.len) {
            CHECK(r.payload >= data && r.payload + r.len <= data + size);
            CHECK(memcmp(g->payload.data, r.payload, r.len) == 0);
        }
    }
    if (env)
        sluice__envelope__free_unpacked(env, NULL);
}

static uint64_t take_u64(const uint8_t **p, size_t *n, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i<bytes && * n> 0; i++) {
        v = v << 8 | **p;
        (*p)++;
        (*n)--;
    }
    return v;
}

static void check_encode(const uint8_t *data, size_t size)
{
    const uint8_t *p = data;
    size_t n = size;
    uint8_t shape = (uint8_t)take_u64(&p, &n, 1);
    /* Small and huge values alike: the shape byte picks how many bytes each field gets. */
    uint64_t id = take_u64(&p, &n, (shape & 7) + 1);
    uint32_t count = (uint32_t)take_u64(&p, &n, ((shape >> 3) & 3) + 1);
    bool eos = (shape >> 5) & 1;
    size_t len = n;

    uint8_t prefix[EWIRE_PREFIX_MAX];
    uint64_t env_len = 0;
    size_t plen = ewire_reply_prefix(prefix, id, count, eos, len, &env_len);
    CHECK(plen > FRAME_HEADER_SIZE && plen <= EWIRE_PREFIX_MAX);

    Sluice__GetElementsReply body = SLUICE__GET_ELEMENTS_REPLY__INIT;
    body.count = count;
    body.end_of_sequence = eos;
    body.payload.data = (uint8_t *)p;
    body.payload.len = len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.id = id;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY;
    env.get_elements_reply = &body;
    size_t want = sluice__envelope__get_packed_size(&env);
    CHECK(env_len == want);
    CHECK(plen - FRAME_HEADER_SIZE + len == want);
    uint8_t *packed = malloc(FRAME_HEADER_SIZE + want);
    if (!packed)
        return;
    frame_write_header(packed, (uint32_t)want);
    CHECK(sluice__envelope__pack(&env, packed + FRAME_HEADER_SIZE) == want);
    CHECK(memcmp(packed, prefix, plen) == 0);
    CHECK(len == 0 || memcmp(packed + plen, p, len) == 0);

    struct ewire_reply r;
    CHECK(ewire_reply_decode(packed + FRAME_HEADER_SIZE, want, &r));
    CHECK(r.id == id && r.count == count && r.end_of_sequence == eos && r.len == len);
    CHECK(len == 0 || r.payload == packed + plen);
    free(packed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_decode(data, size);
    check_encode(data, size);
    return 0;
}
