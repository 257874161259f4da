/* The hand codec of GetElementsReply Envelopes against protobuf-c: every prefix written by hand,
 * followed by its payload, must be the bytes protobuf-c packs (behind a frame header); every
 * Envelope the hand decoder accepts must decode to what protobuf-c unpacks; and the shapes it
 * must decline are declined. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/ewire.h"
#include "common/frame.h"
#include "wire.pb-c.h"

/* Packs the Envelope with protobuf-c behind a frame header, as conn_frame_pack does. */
static uint8_t *pack_reference(uint64_t id, uint32_t count, bool eos, const uint8_t *payload,
                               size_t len, size_t *out_len)
{
    Sluice__GetElementsReply r = SLUICE__GET_ELEMENTS_REPLY__INIT;
    r.count = count;
    r.end_of_sequence = eos;
    r.payload.data = (uint8_t *)payload;
    r.payload.len = len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.id = id;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY;
    env.get_elements_reply = &r;
    size_t n = sluice__envelope__get_packed_size(&env);
    uint8_t *buf = malloc(FRAME_HEADER_SIZE + n);
    assert_non_null(buf);
    frame_write_header(buf, (uint32_t)n);
    assert_int_equal(sluice__envelope__pack(&env, buf + FRAME_HEADER_SIZE), n);
    *out_len = FRAME_HEADER_SIZE + n;
    return buf;
}

/* Checks that the hand decoder accepts env and agrees with protobuf-c on every field. */
static void expect_decoded(const uint8_t *env, size_t len, uint64_t id, uint32_t count, bool eos,
                           const uint8_t *payload, size_t plen)
{
    struct ewire_reply r;
    assert_true(ewire_reply_decode(env, len, &r));
    assert_int_equal(r.id, id);
    assert_int_equal(r.count, count);
    assert_int_equal(r.end_of_sequence, eos);
    assert_int_equal(r.len, plen);
    if (plen == 0) {
        assert_null(r.payload);
    } else {
        /* A view into the decoded bytes, not a copy. */
        assert_true(r.payload >= env && r.payload + plen <= env + len);
        assert_memory_equal(r.payload, payload, plen);
    }

    Sluice__Envelope *u = sluice__envelope__unpack(NULL, len, env);
    assert_non_null(u);
    assert_int_equal(u->body_case, SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY);
    assert_non_null(u->get_elements_reply);
    assert_int_equal(u->id, r.id);
    assert_int_equal(u->get_elements_reply->count, r.count);
    assert_int_equal(u->get_elements_reply->end_of_sequence, r.end_of_sequence);
    assert_int_equal(u->get_elements_reply->payload.len, r.len);
    if (r.len)
        assert_memory_equal(u->get_elements_reply->payload.data, r.payload, r.len);
    sluice__envelope__free_unpacked(u, NULL);
}

static void test_prefix_matches_protobuf_c(void **state)
{
    const uint64_t ids[] = {0, 1, 127, 128, 300, 1ull << 32, UINT64_MAX};
    const uint32_t counts[] = {0, 1, 127, 128, 16384, UINT32_MAX};
    const size_t lens[] = {0, 1, 127, 128, 16383, 16384, (1u << 21) + 3};
    const size_t maxlen = (1u << 21) + 3;
    uint8_t *payload = malloc(maxlen);
    assert_non_null(payload);
    for (size_t i = 0; i < maxlen; i++)
        payload[i] = (uint8_t)(i * 131 + 7);

    size_t cases = 0;
    for (size_t a = 0; a < sizeof ids / sizeof ids[0]; a++) {
        for (size_t b = 0; b < sizeof counts / sizeof counts[0]; b++) {
            for (int eos = 0; eos <= 1; eos++) {
                for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
                    size_t want_len;
                    uint8_t *want =
                        pack_reference(ids[a], counts[b], eos, payload, lens[c], &want_len);
                    uint8_t prefix[EWIRE_PREFIX_MAX];
                    uint64_t env_len = 0;
                    size_t n =
                        ewire_reply_prefix(prefix, ids[a], counts[b], eos, lens[c], &env_len);
                    assert_true(n > FRAME_HEADER_SIZE && n <= EWIRE_PREFIX_MAX);
                    assert_int_equal(n + lens[c], want_len);
                    assert_int_equal(env_len, want_len - FRAME_HEADER_SIZE);
                    assert_memory_equal(prefix, want, n);
                    assert_memory_equal(want + n, payload, lens[c]);
                    expect_decoded(want + FRAME_HEADER_SIZE, want_len - FRAME_HEADER_SIZE, ids[a],
                                   counts[b], eos, payload, lens[c]);
                    free(want);
                    cases++;
                }
            }
        }
    }
    assert_int_equal(cases, 7 * 6 * 2 * 7);
    free(payload);
}

static void test_longest_prefix(void **state)
{
    uint8_t prefix[EWIRE_PREFIX_MAX];
    uint64_t env_len;
    size_t n = ewire_reply_prefix(prefix, UINT64_MAX, UINT32_MAX, true, 256u << 20, &env_len);
    assert_int_equal(n, EWIRE_PREFIX_MAX);
    assert_int_equal(env_len, EWIRE_PREFIX_MAX - FRAME_HEADER_SIZE + (256u << 20));
}

static void test_too_long_for_a_frame(void **state)
{
    uint8_t prefix[EWIRE_PREFIX_MAX];
    uint64_t env_len = 7;
    /* The body alone passes the u32 frame length. */
    assert_int_equal(ewire_reply_prefix(prefix, 1, 1, false, UINT32_MAX - 3, &env_len), 0);
    assert_int_equal(env_len, 7);
    if (sizeof(size_t) > 4)
        assert_int_equal(ewire_reply_prefix(prefix, 1, 1, false, (size_t)1 << 33, &env_len), 0);
    /* The largest payload that still fits. */
    size_t fits = UINT32_MAX - 2 - 5 - 1 - 5 - 2 - 1 - 1;
    assert_true(ewire_reply_prefix(prefix, 1, 1, false, fits, &env_len) > 0);
    assert_int_equal(env_len, UINT32_MAX);
}

/* Fields in another order than protobuf-c writes them are still the same Envelope. */
static void test_other_field_order(void **state)
{
    const uint8_t payload[] = {'a', 'b', 'c'};
    /* body {payload, eos, count} and then id 300. */
    const uint8_t env[] = {0xfa, 0x01, 9,    0x1a, 3,    'a',  'b', 'c',
                           0x10, 0x01, 0x08, 0x05, 0x08, 0xac, 0x02};
    expect_decoded(env, sizeof env, 300, 5, true, payload, sizeof payload);
    /* An empty body, no id: an Envelope with an empty reply. */
    const uint8_t empty[] = {0xfa, 0x01, 0x00};
    expect_decoded(empty, sizeof empty, 0, 0, false, NULL, 0);
    /* An explicit empty payload and an explicit false. */
    const uint8_t zeros[] = {0x08, 0x01, 0xfa, 0x01, 0x06, 0x1a, 0x00, 0x10, 0x00, 0x08, 0x00};
    expect_decoded(zeros, sizeof zeros, 1, 0, false, NULL, 0);
    /* Non-minimal varints that protobuf-c reads the same way. */
    const uint8_t padded[] = {0x08, 0x81, 0x80, 0x00, 0xfa, 0x01, 0x83, 0x00, 0x08, 0x82, 0x00};
    expect_decoded(padded, sizeof padded, 1, 2, false, NULL, 0);
}

static void test_declined(void **state)
{
    static const struct {
        const char *what;
        uint8_t bytes[24];
        size_t len;
    } cases[] = {
        {"nothing at all", {0}, 0},
        {"an id without a body", {0x08, 0x01}, 2},
        {"another body (Hello)", {0x08, 0x01, 0x12, 0x02, 0x08, 0x01}, 6},
        {"an unknown field", {0xfa, 0x01, 0x00, 0x20, 0x01}, 5},
        {"an unknown field in the body", {0xfa, 0x01, 0x02, 0x20, 0x01}, 5},
        {"the id twice", {0x08, 0x01, 0x08, 0x02, 0xfa, 0x01, 0x00}, 7},
        {"the body twice", {0xfa, 0x01, 0x00, 0xfa, 0x01, 0x00}, 6},
        {"count twice", {0xfa, 0x01, 0x04, 0x08, 0x01, 0x08, 0x02}, 7},
        {"eos twice", {0xfa, 0x01, 0x04, 0x10, 0x01, 0x10, 0x01}, 7},
        {"payload twice", {0xfa, 0x01, 0x04, 0x1a, 0x00, 0x1a, 0x00}, 7},
        {"eos not 0 or 1", {0xfa, 0x01, 0x02, 0x10, 0x02}, 5},
        {"eos as two bytes", {0xfa, 0x01, 0x03, 0x10, 0x81, 0x00}, 6},
        {"count over 32 bits", {0xfa, 0x01, 0x06, 0x08, 0x80, 0x80, 0x80, 0x80, 0x10}, 9},
        {"count in six bytes", {0xfa, 0x01, 0x07, 0x08, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00}, 10},
        {"an id of eleven bytes",
         {0x08, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0xfa, 0x01, 0x00},
         15},
        {"an id over 64 bits",
         {0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 0xfa, 0x01, 0x00},
         14},
        {"a non-canonical body tag", {0xfa, 0x81, 0x00, 0x00}, 4},
        {"a body longer than the Envelope", {0xfa, 0x01, 0x05, 0x10, 0x01}, 5},
        {"a payload longer than the body", {0xfa, 0x01, 0x03, 0x1a, 0x05, 'a', 'b', 'c'}, 8},
        {"a truncated id", {0xfa, 0x01, 0x00, 0x08, 0x80}, 5},
        {"a truncated count", {0xfa, 0x01, 0x02, 0x08, 0x80}, 5},
        {"a truncated eos", {0xfa, 0x01, 0x01, 0x10}, 4},
        {"a body length in six bytes", {0xfa, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 8},
        {"the body as a varint", {0xf8, 0x01, 0x00}, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ewire_reply r;
        if (ewire_reply_decode(cases[i].bytes, cases[i].len, &r))
            fail_msg("accepted %s", cases[i].what);
    }
}

/* Every prefix of a valid Envelope but the whole is declined or, where it is itself a complete
 * Envelope, agrees with protobuf-c. */
static void test_truncations(void **state)
{
    uint8_t payload[200];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (uint8_t)i;
    size_t n;
    uint8_t *frame = pack_reference(123456789, 77, true, payload, sizeof payload, &n);
    const uint8_t *env = frame + FRAME_HEADER_SIZE;
    size_t len = n - FRAME_HEADER_SIZE;
    for (size_t cut = 0; cut < len; cut++) {
        struct ewire_reply r;
        if (!ewire_reply_decode(env, cut, &r))
            continue;
        Sluice__Envelope *u = sluice__envelope__unpack(NULL, cut, env);
        assert_non_null(u);
        assert_int_equal(u->id, r.id);
        sluice__envelope__free_unpacked(u, NULL);
    }
    expect_decoded(env, len, 123456789, 77, true, payload, sizeof payload);
    free(frame);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_matches_protobuf_c),
        cmocka_unit_test(test_longest_prefix),
        cmocka_unit_test(test_too_long_for_a_frame),
        cmocka_unit_test(test_other_field_order),
        cmocka_unit_test(test_declined),
        cmocka_unit_test(test_truncations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
