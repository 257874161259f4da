/* The frame codec: the header writer, and the decoder fed the same streams in every way they can
 * be cut into chunks, with its limits, its failed state and its buffer use. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/frame.h"

#define MAX_FRAMES 16
#define TEST_MAX 4096

/* Collects what the decoder delivers. Payloads are copied out, since they are valid only
 * during the call; each one also records whether it came straight from the fed chunk. */
struct recorder {
    const struct frame_decoder *dec;
    const uint8_t *chunk;
    size_t chunk_len;
    size_t count;
    size_t lens[MAX_FRAMES];
    uint8_t *payloads[MAX_FRAMES];
    int in_place[MAX_FRAMES];
    size_t fail_at; /* 1-based call number that returns fail_rc; 0 for never */
    int fail_rc;
};

static int record(void *user, const uint8_t *payload, size_t len)
{
    struct recorder *r = user;
    assert_true(r->count < MAX_FRAMES);
    assert_true(len >= 1);
    size_t i = r->count++;
    r->lens[i] = len;
    r->payloads[i] = malloc(len);
    assert_non_null(r->payloads[i]);
    memcpy(r->payloads[i], payload, len);
    if (payload >= r->chunk && payload + len <= r->chunk + r->chunk_len) {
        r->in_place[i] = 1;
    } else {
        /* Anything not in the chunk must come from the decoder's own buffer. */
        assert_ptr_equal(payload, r->dec->buf);
        assert_true(len <= r->dec->buf_cap);
        r->in_place[i] = 0;
    }
    if (r->fail_at != 0 && r->count == r->fail_at)
        return r->fail_rc;
    return 0;
}

static void recorder_init(struct recorder *r, const struct frame_decoder *d)
{
    memset(r, 0, sizeof *r);
    r->dec = d;
}

static void recorder_free(struct recorder *r)
{
    for (size_t i = 0; i < r->count; i++)
        free(r->payloads[i]);
    r->count = 0;
}

static int feed(struct frame_decoder *d, struct recorder *r, const uint8_t *p, size_t n)
{
    r->chunk = p;
    r->chunk_len = n;
    return frame_decoder_feed(d, p, n, record, r);
}

/* A stream of frames whose payload bytes depend on the frame and the offset, so a payload
 * delivered from the wrong place or in the wrong order cannot match. */
struct stream {
    size_t nframes;
    size_t lens[MAX_FRAMES];
    size_t starts[MAX_FRAMES]; /* offset of each payload in bytes */
    uint8_t *bytes;
    size_t len;
};

static uint8_t payload_byte(size_t frame, size_t off)
{
    return (uint8_t)(frame * 37 + off * 11 + 5);
}

static void stream_build(struct stream *s, const size_t *lens, size_t nframes)
{
    s->nframes = nframes;
    s->len = 0;
    for (size_t i = 0; i < nframes; i++)
        s->len += FRAME_HEADER_SIZE + lens[i];
    s->bytes = malloc(s->len ? s->len : 1);
    assert_non_null(s->bytes);
    size_t pos = 0;
    for (size_t i = 0; i < nframes; i++) {
        s->lens[i] = lens[i];
        frame_write_header(s->bytes + pos, (uint32_t)lens[i]);
        pos += FRAME_HEADER_SIZE;
        s->starts[i] = pos;
        for (size_t k = 0; k < lens[i]; k++)
            s->bytes[pos + k] = payload_byte(i, k);
        pos += lens[i];
    }
}

/* Checks the recorder holds exactly the stream's frames, and that each frame came in place
 * exactly when its payload lay inside one chunk, given the cut points cuts[0..ncuts). */
static void expect_frames(const struct recorder *r, const struct stream *s, const size_t *cuts,
                          size_t ncuts)
{
    assert_int_equal(r->count, s->nframes);
    for (size_t i = 0; i < s->nframes; i++) {
        assert_int_equal(r->lens[i], s->lens[i]);
        assert_memory_equal(r->payloads[i], s->bytes + s->starts[i], s->lens[i]);
        int whole = 1;
        for (size_t c = 0; c < ncuts; c++)
            if (cuts[c] > s->starts[i] && cuts[c] < s->starts[i] + s->lens[i])
                whole = 0;
        assert_int_equal(r->in_place[i], whole);
    }
}

static const struct {
    size_t nframes;
    size_t lens[5];
} stream_table[] = {
    {1, {1}},        {1, {5}},         {3, {1, 1, 1}},       {3, {3, 300, 2}},
    {1, {TEST_MAX}}, {3, {17, 1, 64}}, {5, {2, 9, 4, 1, 8}}, {2, {TEST_MAX, 1}},
};
#define NSTREAMS (sizeof stream_table / sizeof stream_table[0])

static void test_header_writer(void **state)
{
    const struct {
        uint32_t len;
        uint8_t want[4];
    } cases[] = {
        {0, {0, 0, 0, 0}},
        {1, {0, 0, 0, 1}},
        {258, {0, 0, 1, 2}},
        {0x01020304u, {1, 2, 3, 4}},
        {FRAME_DEFAULT_MAX, {0x04, 0, 0, 0}},
        {0xFFFFFFFFu, {0xff, 0xff, 0xff, 0xff}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t out[FRAME_HEADER_SIZE];
        frame_write_header(out, cases[i].len);
        assert_memory_equal(out, cases[i].want, 4);
    }
}

static void test_whole_stream_in_one_chunk(void **state)
{
    for (size_t t = 0; t < NSTREAMS; t++) {
        struct stream s;
        stream_build(&s, stream_table[t].lens, stream_table[t].nframes);
        struct frame_decoder d;
        struct recorder r;
        frame_decoder_init(&d, TEST_MAX);
        recorder_init(&r, &d);
        assert_int_equal(feed(&d, &r, s.bytes, s.len), 0);
        expect_frames(&r, &s, NULL, 0);
        /* Nothing was split, so nothing was copied or allocated. */
        assert_null(d.buf);
        assert_int_equal(d.buf_cap, 0);
        recorder_free(&r);
        frame_decoder_release(&d);
        free(s.bytes);
    }
}

static void test_split_at_every_byte(void **state)
{
    for (size_t t = 0; t < NSTREAMS; t++) {
        struct stream s;
        stream_build(&s, stream_table[t].lens, stream_table[t].nframes);
        for (size_t cut = 0; cut <= s.len; cut++) {
            struct frame_decoder d;
            struct recorder r;
            frame_decoder_init(&d, TEST_MAX);
            recorder_init(&r, &d);
            assert_int_equal(feed(&d, &r, s.bytes, cut), 0);
            assert_int_equal(feed(&d, &r, s.bytes + cut, s.len - cut), 0);
            expect_frames(&r, &s, &cut, 1);
            /* The decoder is back at a frame boundary. */
            assert_int_equal(d.need, 0);
            assert_int_equal(d.header_have, 0);
            recorder_free(&r);
            frame_decoder_release(&d);
        }
        free(s.bytes);
    }
}

static void test_split_at_every_pair(void **state)
{
    for (size_t t = 0; t < NSTREAMS; t++) {
        struct stream s;
        stream_build(&s, stream_table[t].lens, stream_table[t].nframes);
        if (s.len > 400) {
            free(s.bytes);
            continue;
        }
        for (size_t a = 0; a <= s.len; a++) {
            for (size_t b = a; b <= s.len; b++) {
                struct frame_decoder d;
                struct recorder r;
                const size_t cuts[2] = {a, b};
                frame_decoder_init(&d, TEST_MAX);
                recorder_init(&r, &d);
                assert_int_equal(feed(&d, &r, s.bytes, a), 0);
                assert_int_equal(feed(&d, &r, s.bytes + a, b - a), 0);
                assert_int_equal(feed(&d, &r, s.bytes + b, s.len - b), 0);
                expect_frames(&r, &s, cuts, 2);
                recorder_free(&r);
                frame_decoder_release(&d);
            }
        }
        free(s.bytes);
    }
}

static void test_one_byte_at_a_time(void **state)
{
    for (size_t t = 0; t < NSTREAMS; t++) {
        struct stream s;
        stream_build(&s, stream_table[t].lens, stream_table[t].nframes);
        struct frame_decoder d;
        struct recorder r;
        frame_decoder_init(&d, TEST_MAX);
        recorder_init(&r, &d);
        for (size_t i = 0; i < s.len; i++) {
            assert_int_equal(feed(&d, &r, s.bytes + i, 1), 0);
            /* Empty feeds in between change nothing. */
            assert_int_equal(feed(&d, &r, s.bytes + i, 0), 0);
        }
        assert_int_equal(r.count, s.nframes);
        for (size_t i = 0; i < s.nframes; i++) {
            assert_int_equal(r.lens[i], s.lens[i]);
            assert_memory_equal(r.payloads[i], s.bytes + s.starts[i], s.lens[i]);
            /* A one-byte frame fits in a one-byte chunk; every longer one is assembled. */
            assert_int_equal(r.in_place[i], s.lens[i] == 1);
        }
        recorder_free(&r);
        frame_decoder_release(&d);
        free(s.bytes);
    }
}

static void test_zero_length_rejected(void **state)
{
    /* A good frame, a zero header, then another good frame that must never be delivered. */
    const uint8_t bytes[] = {0, 0, 0, 2, 'a', 'b', 0, 0, 0, 0, 0, 0, 0, 1, 'c'};
    for (size_t cut = 0; cut <= sizeof bytes; cut++) {
        struct frame_decoder d;
        struct recorder r;
        frame_decoder_init(&d, TEST_MAX);
        recorder_init(&r, &d);
        /* The error comes from whichever feed completes the zero header (bytes 6..9). */
        int first = feed(&d, &r, bytes, cut);
        int second = feed(&d, &r, bytes + cut, sizeof bytes - cut);
        assert_int_equal(first, cut >= 10 ? SLUICE_ERR_PROTOCOL : 0);
        assert_int_equal(second, SLUICE_ERR_PROTOCOL);
        assert_int_equal(d.failed, SLUICE_ERR_PROTOCOL);
        assert_int_equal(r.count, 1);
        assert_int_equal(r.lens[0], 2);
        assert_memory_equal(r.payloads[0], "ab", 2);
        recorder_free(&r);
        frame_decoder_release(&d);
    }
}

static void test_oversized_rejected_before_allocation(void **state)
{
    const struct {
        uint32_t max; /* given to init */
        uint32_t len; /* in the header */
        int want;     /* from the feed that completes the header */
    } cases[] = {
        {100, 101, SLUICE_ERR_TOO_LARGE},
        {100, 0xFFFFFFFFu, SLUICE_ERR_TOO_LARGE},
        {0, FRAME_DEFAULT_MAX + 1, SLUICE_ERR_TOO_LARGE},
        {0, 0xFFFFFFFFu, SLUICE_ERR_TOO_LARGE},
        {1, 2, SLUICE_ERR_TOO_LARGE},
        {100, 0, SLUICE_ERR_PROTOCOL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t hdr[FRAME_HEADER_SIZE];
        frame_write_header(hdr, cases[i].len);

        /* Whole header in one feed, with nothing after it. */
        struct frame_decoder d;
        struct recorder r;
        frame_decoder_init(&d, cases[i].max);
        recorder_init(&r, &d);
        assert_int_equal(feed(&d, &r, hdr, sizeof hdr), cases[i].want);
        assert_null(d.buf);
        assert_int_equal(d.buf_cap, 0);
        assert_int_equal(r.count, 0);
        frame_decoder_release(&d);

        /* Header one byte at a time: only the fourth byte fails. */
        frame_decoder_init(&d, cases[i].max);
        for (size_t k = 0; k < 3; k++)
            assert_int_equal(feed(&d, &r, hdr + k, 1), 0);
        assert_int_equal(feed(&d, &r, hdr + 3, 1), cases[i].want);
        assert_null(d.buf);
        assert_int_equal(d.buf_cap, 0);
        assert_int_equal(r.count, 0);
        frame_decoder_release(&d);
    }
}

static void test_default_max(void **state)
{
    struct frame_decoder d;
    frame_decoder_init(&d, 0);
    assert_int_equal(d.max_frame, FRAME_DEFAULT_MAX);
    assert_int_equal(d.failed, 0);
    assert_null(d.buf);
    frame_decoder_release(&d);
}

static void test_exactly_max_accepted(void **state)
{
    const uint32_t max = 100;
    const size_t lens[] = {max};
    struct stream s;
    stream_build(&s, lens, 1);
    for (size_t cut = 0; cut <= s.len; cut++) {
        struct frame_decoder d;
        struct recorder r;
        frame_decoder_init(&d, max);
        recorder_init(&r, &d);
        assert_int_equal(feed(&d, &r, s.bytes, cut), 0);
        assert_int_equal(feed(&d, &r, s.bytes + cut, s.len - cut), 0);
        expect_frames(&r, &s, &cut, 1);
        if (r.in_place[0]) {
            assert_null(d.buf);
        } else {
            assert_int_equal(d.buf_cap, max);
        }
        recorder_free(&r);
        frame_decoder_release(&d);
    }
    free(s.bytes);
}

static void test_callback_error_stops(void **state)
{
    const size_t lens[] = {3, 7, 2, 5};
    struct stream s;
    stream_build(&s, lens, 4);
    /* Cut nowhere, inside the second payload (so it is assembled), and byte by byte. */
    const size_t cuts[] = {s.len, FRAME_HEADER_SIZE * 2 + 3 + 4, 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        struct frame_decoder d;
        struct recorder r;
        frame_decoder_init(&d, TEST_MAX);
        recorder_init(&r, &d);
        r.fail_at = 2;
        r.fail_rc = -1234;
        int rc = 0;
        size_t pos = 0;
        while (rc == 0 && pos < s.len) {
            size_t n = cuts[c] == 1 ? 1 : (pos == 0 ? cuts[c] : s.len - pos);
            rc = feed(&d, &r, s.bytes + pos, n);
            pos += n;
        }
        assert_int_equal(rc, -1234);
        /* The failing call was the second; the third and fourth frames were never delivered. */
        assert_int_equal(r.count, 2);
        assert_int_equal(r.lens[1], 7);
        assert_memory_equal(r.payloads[1], s.bytes + s.starts[1], 7);
        assert_int_equal(r.in_place[1], c == 0);
        /* And it stays failed with the callback's code, delivering nothing more. */
        assert_int_equal(feed(&d, &r, s.bytes, s.len), -1234);
        assert_int_equal(feed(&d, &r, NULL, 0), -1234);
        assert_int_equal(r.count, 2);
        recorder_free(&r);
        frame_decoder_release(&d);
    }
    free(s.bytes);
}

static void test_failed_stays_failed(void **state)
{
    const size_t lens[] = {4};
    struct stream good;
    stream_build(&good, lens, 1);
    uint8_t bad[FRAME_HEADER_SIZE];
    frame_write_header(bad, TEST_MAX + 1);

    struct frame_decoder d;
    struct recorder r;
    frame_decoder_init(&d, TEST_MAX);
    recorder_init(&r, &d);
    assert_int_equal(feed(&d, &r, bad, sizeof bad), SLUICE_ERR_TOO_LARGE);
    /* Valid frames, partial headers and empty feeds all get the same error, and no frame. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(feed(&d, &r, good.bytes, good.len), SLUICE_ERR_TOO_LARGE);
        assert_int_equal(feed(&d, &r, good.bytes, 2), SLUICE_ERR_TOO_LARGE);
        assert_int_equal(feed(&d, &r, NULL, 0), SLUICE_ERR_TOO_LARGE);
    }
    assert_int_equal(r.count, 0);
    assert_int_equal(d.failed, SLUICE_ERR_TOO_LARGE);
    frame_decoder_release(&d);

    /* A fresh init clears the failure. */
    frame_decoder_init(&d, TEST_MAX);
    assert_int_equal(feed(&d, &r, good.bytes, good.len), 0);
    assert_int_equal(r.count, 1);
    recorder_free(&r);
    frame_decoder_release(&d);
    free(good.bytes);
}

/* Feeds one frame of len bytes split after its header, so its payload must be assembled. */
static void feed_split_frame(struct frame_decoder *d, size_t len)
{
    const size_t lens[] = {len};
    struct stream s;
    struct recorder r;
    stream_build(&s, lens, 1);
    recorder_init(&r, d);
    assert_int_equal(feed(d, &r, s.bytes, FRAME_HEADER_SIZE + 1), 0);
    assert_int_equal(feed(d, &r, s.bytes + FRAME_HEADER_SIZE + 1, s.len - FRAME_HEADER_SIZE - 1),
                     0);
    expect_frames(&r, &s, (const size_t[]){FRAME_HEADER_SIZE + 1}, 1);
    recorder_free(&r);
    free(s.bytes);
}

static void test_buffer_reused_and_grown(void **state)
{
    struct frame_decoder d;
    frame_decoder_init(&d, TEST_MAX);

    /* Each row: the split frame's length, then the capacity expected afterwards. Growth at
     * least doubles but never passes max_frame; smaller frames reuse the buffer. */
    const struct {
        size_t len;
        size_t cap;
        int same_buf; /* the buffer must be the one from the row before */
    } steps[] = {
        {100, 100, 0},    {60, 100, 1},    {100, 100, 1},
        {150, 200, 0},    {2, 200, 1},     {1000, 1000, 0},
        {1001, 2000, 0},  {3000, 4000, 0}, {TEST_MAX, TEST_MAX, 0},
        {1, TEST_MAX, 1},
    };
    const uint8_t *prev = NULL;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        feed_split_frame(&d, steps[i].len);
        assert_non_null(d.buf);
        assert_int_equal(d.buf_cap, steps[i].cap);
        if (steps[i].same_buf)
            assert_ptr_equal(d.buf, prev);
        prev = d.buf;
    }
    frame_decoder_release(&d);
    assert_null(d.buf);
    assert_int_equal(d.buf_cap, 0);
    /* Releasing twice is harmless. */
    frame_decoder_release(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_writer),
        cmocka_unit_test(test_whole_stream_in_one_chunk),
        cmocka_unit_test(test_split_at_every_byte),
        cmocka_unit_test(test_split_at_every_pair),
        cmocka_unit_test(test_one_byte_at_a_time),
        cmocka_unit_test(test_zero_length_rejected),
        cmocka_unit_test(test_oversized_rejected_before_allocation),
        cmocka_unit_test(test_default_max),
        cmocka_unit_test(test_exactly_max_accepted),
        cmocka_unit_test(test_callback_error_stops),
        cmocka_unit_test(test_failed_stays_failed),
        cmocka_unit_test(test_buffer_reused_and_grown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
