/* Direct filling of the frame decoder (frame_decoder_space / frame_decoder_filled), mixed with
 * ordinary feeding in every proportion, taking buffers over from inside the callback
 * (frame_decoder_detach) and handing new ones in (frame_decoder_swap): the frames delivered are
 * always the stream's frames, in order, and a failed decoder stays failed. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/frame.h"

#define MAX_FRAMES 64
#define TEST_MAX (1u << 20)

struct stream {
    uint8_t *bytes;
    size_t len;
    size_t off[MAX_FRAMES], lens[MAX_FRAMES];
    size_t n;
};

static void stream_build(struct stream *s, const size_t *lens, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += FRAME_HEADER_SIZE + lens[i];
    s->bytes = malloc(total ? total : 1);
    assert_non_null(s->bytes);
    s->len = 0;
    s->n = n;
    for (size_t i = 0; i < n; i++) {
        frame_write_header(s->bytes + s->len, (uint32_t)lens[i]);
        s->len += FRAME_HEADER_SIZE;
        s->off[i] = s->len;
        s->lens[i] = lens[i];
        for (size_t k = 0; k < lens[i]; k++)
            s->bytes[s->len + k] = (uint8_t)(i * 7 + k * 13);
        s->len += lens[i];
    }
}

struct check {
    struct frame_decoder *dec;
    const struct stream *s;
    size_t got;
    unsigned detach_every; /* take the buffer over on every n-th assembled frame; 0 never */
    size_t assembled, detached;
};

static int on_frame(void *user, const uint8_t *payload, size_t len)
{
    struct check *c = user;
    assert_true(c->got < c->s->n);
    assert_int_equal(len, c->s->lens[c->got]);
    assert_memory_equal(payload, c->s->bytes + c->s->off[c->got], len);
    c->got++;
    if (payload == c->dec->buf) {
        c->assembled++;
        if (c->detach_every && c->assembled % c->detach_every == 0) {
            size_t cap;
            uint8_t *b = frame_decoder_detach(c->dec, &cap);
            assert_ptr_equal(b, payload);
            assert_true(cap >= len);
            assert_null(c->dec->buf);
            assert_int_equal(c->dec->buf_cap, 0);
            /* The payload stays readable in the block taken over. */
            assert_memory_equal(b, c->s->bytes + c->s->off[c->got - 1], len);
            free(b);
            c->detached++;
        }
    }
    return 0;
}

static uint32_t rng(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

/* Drives the decoder over the stream like a socket reader: whenever a payload is in progress
 * it reads a random part of what is missing straight into the decoder (when direct is set),
 * otherwise it feeds a random chunk. With swap set, a fresh buffer is handed in before some
 * payloads start. */
static void run(const struct stream *s, uint32_t seed, int direct, int swap, unsigned detach_every,
                struct check *c)
{
    struct frame_decoder d;
    frame_decoder_init(&d, TEST_MAX);
    memset(c, 0, sizeof *c);
    c->dec = &d;
    c->s = s;
    c->detach_every = detach_every;
    size_t pos = 0;
    while (pos < s->len) {
        if (swap && d.need > 0 && d.have == 0 && rng(&seed) % 2) {
            size_t cap = d.need + rng(&seed) % 100, old_cap;
            uint8_t *fresh = malloc(cap);
            assert_non_null(fresh);
            free(frame_decoder_swap(&d, fresh, cap, &old_cap));
            assert_ptr_equal(d.buf, fresh);
            assert_int_equal(d.buf_cap, cap);
        }
        uint8_t *dst;
        size_t missing;
        assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
        if (direct && missing > 0) {
            assert_true(missing <= s->len - pos);
            assert_ptr_equal(dst, d.buf + d.have);
            size_t n = 1 + rng(&seed) % missing;
            memcpy(dst, s->bytes + pos, n);
            assert_int_equal(frame_decoder_filled(&d, n, on_frame, c), 0);
            pos += n;
            continue;
        }
        size_t n = 1 + rng(&seed) % (rng(&seed) % 8 == 0 ? s->len : 64);
        if (n > s->len - pos)
            n = s->len - pos;
        assert_int_equal(frame_decoder_feed(&d, s->bytes + pos, n, on_frame, c), 0);
        pos += n;
    }
    assert_int_equal(c->got, s->n);
    assert_int_equal(d.need, 0);
    frame_decoder_release(&d);
}

static void test_mixed_feeding_and_direct_filling(void **state)
{
    (void)state;
    const size_t lens[] = {1, 5000, 3, 70000, 70000, 2, 100, 300000, 1, 65536, 17, 4096, 9};
    struct stream s;
    stream_build(&s, lens, sizeof lens / sizeof lens[0]);
    for (uint32_t seed = 1; seed <= 200; seed++) {
        struct check c;
        run(&s, seed, 0, 0, 0, &c);
        run(&s, seed, 1, 0, 0, &c);
        run(&s, seed, 1, 1, 0, &c);
        run(&s, seed, 1, 0, 1, &c);
        assert_int_equal(c.detached, c.assembled);
        run(&s, seed, 1, 1, 3, &c);
        assert_int_equal(c.detached, c.assembled / 3);
    }
    free(s.bytes);
}

static void test_space_only_while_a_payload_is_in_progress(void **state)
{
    (void)state;
    struct frame_decoder d;
    frame_decoder_init(&d, TEST_MAX);
    uint8_t *dst = (uint8_t *)&d;
    size_t missing = 99;
    /* No header yet. */
    assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
    assert_null(dst);
    assert_int_equal(missing, 0);
    assert_null(d.buf);
    /* Half a header. */
    const size_t lens[] = {10};
    struct stream s;
    stream_build(&s, lens, 1);
    struct check c = {.dec = &d, .s = &s};
    assert_int_equal(frame_decoder_feed(&d, s.bytes, 2, on_frame, &c), 0);
    assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
    assert_int_equal(missing, 0);
    /* The whole header: the buffer is made then, for exactly the payload. */
    assert_int_equal(frame_decoder_feed(&d, s.bytes + 2, 2, on_frame, &c), 0);
    assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
    assert_int_equal(missing, 10);
    assert_non_null(d.buf);
    assert_ptr_equal(dst, d.buf);
    assert_int_equal(d.buf_cap, 10);
    memcpy(dst, s.bytes + 4, 4);
    assert_int_equal(frame_decoder_filled(&d, 4, on_frame, &c), 0);
    assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
    assert_int_equal(missing, 6);
    assert_ptr_equal(dst, d.buf + 4);
    /* The rest by feeding. */
    assert_int_equal(frame_decoder_feed(&d, s.bytes + 8, 6, on_frame, &c), 0);
    assert_int_equal(c.got, 1);
    assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
    assert_int_equal(missing, 0);
    frame_decoder_release(&d);
    free(s.bytes);
}

static int fail_cb(void *user, const uint8_t *payload, size_t len)
{
    (void)user;
    (void)payload;
    (void)len;
    return -77;
}

static void test_failures_stick(void **state)
{
    (void)state;
    struct frame_decoder d;
    frame_decoder_init(&d, TEST_MAX);
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_write_header(hdr, 8);
    assert_int_equal(frame_decoder_feed(&d, hdr, sizeof hdr, fail_cb, NULL), 0);
    uint8_t *dst;
    size_t missing;
    assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
    assert_int_equal(missing, 8);
    memset(dst, 1, 8);
    /* The callback's code fails the decoder, as with feeding. */
    assert_int_equal(frame_decoder_filled(&d, 8, fail_cb, NULL), -77);
    assert_int_equal(d.failed, -77);
    assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
    assert_int_equal(missing, 0);
    assert_int_equal(frame_decoder_feed(&d, hdr, sizeof hdr, fail_cb, NULL), -77);
    frame_decoder_release(&d);

    /* An over-limit length fails before anything is allocated; no space is offered after. */
    frame_decoder_init(&d, 100);
    frame_write_header(hdr, 101);
    assert_int_equal(frame_decoder_feed(&d, hdr, sizeof hdr, fail_cb, NULL), SLUICE_ERR_TOO_LARGE);
    assert_int_equal(frame_decoder_space(&d, &dst, &missing), 0);
    assert_int_equal(missing, 0);
    assert_null(d.buf);
    frame_decoder_release(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_feeding_and_direct_filling),
        cmocka_unit_test(test_space_only_while_a_payload_is_in_progress),
        cmocka_unit_test(test_failures_stick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
