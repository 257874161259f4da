/* Fuzzes the frame decoder. The first input byte seeds how the rest is cut into chunks and
 * whether the callback fails on some frame; the rest is the byte stream. The stream is decoded
 * once in one feed and once in chunks, and each time the delivered frames and the final result
 * must equal those of a direct walk over the stream:
 * - every frame has a length in 1..FUZZ_MAX and the bytes at its place in the stream;
 * - frames come in order and the total payload never exceeds the stream length;
 * - the result is the first zero or oversized header's error, or the callback's code, and every
 *   feed after a failure returns the same code. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/frame.h"

#define FUZZ_MAX 4096
#define FUZZ_CB_ERROR (-77)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

struct ref_frame {
    size_t off, len;
};

struct check {
    const uint8_t *stream;
    size_t stream_len;
    const struct ref_frame *want;
    size_t nwant;
    size_t got;
    size_t total;
    size_t fail_at; /* 1-based call that returns FUZZ_CB_ERROR; 0 for never */
};

static int on_frame(void *user, const uint8_t *payload, size_t len)
{
    struct check *c = user;
    CHECK(len >= 1 && len <= FUZZ_MAX);
    CHECK(c->got < c->nwant);
    CHECK(len == c->want[c->got].len);
    CHECK(memcmp(payload, c->stream + c->want[c->got].off, len) == 0);
    c->got++;
    c->total += len;
    CHECK(c->total <= c->stream_len);
    return c->got == c->fail_at ? FUZZ_CB_ERROR : 0;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* The reference: walks the whole stream directly. Returns the expected result. */
static int walk(const uint8_t *s, size_t n, size_t fail_at, struct ref_frame *out, size_t *nout)
{
    size_t pos = 0;
    *nout = 0;
    while (n - pos >= FRAME_HEADER_SIZE) {
        uint32_t len = be32(s + pos);
        if (len == 0)
            return SLUICE_ERR_PROTOCOL;
        if (len > FUZZ_MAX)
            return SLUICE_ERR_TOO_LARGE;
        if (n - pos - FRAME_HEADER_SIZE < len)
            return 0;
        out[*nout].off = pos + FRAME_HEADER_SIZE;
        out[*nout].len = len;
        (*nout)++;
        if (*nout == fail_at)
            return FUZZ_CB_ERROR;
        pos += FRAME_HEADER_SIZE + len;
    }
    return 0;
}

static uint32_t rng_next(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 16;
}

static void decode(const uint8_t *s, size_t n, uint32_t seed, int chunked, struct check *c,
                   int want_rc)
{
    struct frame_decoder d;
    frame_decoder_init(&d, FUZZ_MAX);
    c->got = 0;
    c->total = 0;

    int rc = 0;
    size_t pos = 0;
    while (pos < n) {
        size_t chunk = n - pos;
        if (chunked) {
            /* Mostly short chunks, sometimes empty ones, sometimes long ones. */
            uint32_t r = rng_next(&seed);
            size_t cap = (r & 7) == 0 ? n : 16;
            chunk = (size_t)(rng_next(&seed) % (cap + 1));
            if (chunk > n - pos)
                chunk = n - pos;
        }
        int r = frame_decoder_feed(&d, s + pos, chunk, on_frame, c);
        if (rc == 0)
            rc = r;
        else
            CHECK(r == rc); /* a failed decoder stays failed */
        if (rc != 0)
            CHECK(d.failed == rc);
        pos += chunk;
    }
    CHECK(rc == want_rc);
    CHECK(frame_decoder_feed(&d, NULL, 0, on_frame, c) == want_rc);
    CHECK(c->got == c->nwant);
    CHECK(d.buf_cap <= FUZZ_MAX);
    frame_decoder_release(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t seed = data[0];
    const uint8_t *s = data + 1;
    const size_t n = size - 1;

    struct ref_frame *want = malloc((n / (FRAME_HEADER_SIZE + 1) + 1) * sizeof *want);
    if (want == NULL)
        return 0;
    struct check c = {.stream = s, .stream_len = n, .want = want};
    c.fail_at = (seed & 0x80) ? (size_t)(seed & 7) + 1 : 0;
    int want_rc = walk(s, n, c.fail_at, want, &c.nwant);

    decode(s, n, seed, 0, &c, want_rc);
    decode(s, n, seed * 2654435761u + 1, 1, &c, want_rc);
    free(want);
    return 0;
}
