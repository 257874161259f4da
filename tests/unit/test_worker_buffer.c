/* The worker's element buffer (src/worker/buffer.c): record framing, FIFO order, the limits of
 * a take, in-place versus gathered payloads, accounting, and refusal of inconsistent chunks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/buffer.h"

/* Appends a varint to p and returns its length. */
static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        p[n++] = b | (v ? 0x80 : 0);
    } while (v);
    return n;
}

/* Record i has length len[i] and every byte equal to tag[i]. */
static struct wbuf_chunk *make_chunk(const size_t *lens, const uint8_t *tags, size_t n)
{
    struct wbuf_chunk *c = calloc(1, sizeof *c);
    assert_non_null(c);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += lens[i] + 10;
    c->data.p = malloc(total ? total : 1);
    assert_non_null(c->data.p);
    c->data.cap = total;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = (uint8_t *)c->data.p + c->data.len;
        size_t h = put_varint(p, lens[i]);
        memset(p + h, tags[i], lens[i]);
        c->data.len += h + lens[i];
    }
    c->count = (uint32_t)n;
    return c;
}

/* Checks that payload holds exactly records with the given lengths and tags, in order. */
static void expect_records(const uint8_t *payload, size_t len, const size_t *lens,
                           const uint8_t *tags, size_t n)
{
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t l = 0;
        size_t h = wbuf_read_varint(payload + pos, len - pos, &l);
        assert_true(h > 0);
        assert_int_equal(l, lens[i]);
        pos += h;
        assert_true(pos + l <= len);
        for (size_t k = 0; k < l; k++)
            assert_int_equal(payload[pos + k], tags[i]);
        pos += l;
    }
    assert_int_equal(pos, len);
}

static size_t count_spent(struct wbuf_chunk *c)
{
    size_t n = 0;
    for (; c; c = c->next)
        n++;
    return n;
}

static void free_spent(struct wbuf_take *t)
{
    while (t->spent) {
        struct wbuf_chunk *next = t->spent->next;
        wbuf_chunk_free(t->spent);
        t->spent = next;
    }
}

static void test_varint(void **state)
{
    (void)state;
    static const struct {
        uint8_t bytes[11];
        size_t len;
        size_t want_n;
        uint64_t want;
    } cases[] = {
        {{0x00}, 1, 1, 0},
        {{0x7f}, 1, 1, 127},
        {{0x80, 0x01}, 2, 2, 128},
        {{0xac, 0x02}, 2, 2, 300},
        {{0xff, 0xff, 0xff, 0xff, 0x0f}, 5, 5, 0xffffffffu},
        {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 10, 10, UINT64_MAX},
        {{0x80}, 1, 0, 0},                                                        /* cut short */
        {{0x80, 0x80}, 2, 0, 0},                                                  /* cut short */
        {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 10, 0, 0}, /* > 64 bits */
        {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 11, 0, 0},
        {{0x05, 0x99}, 2, 1, 5}, /* stops at the first byte without the top bit */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = 12345;
        size_t n = wbuf_read_varint(cases[i].bytes, cases[i].len, &v);
        assert_int_equal(n, cases[i].want_n);
        if (n)
            assert_int_equal(v, cases[i].want);
    }
    uint8_t buf[10];
    for (uint64_t v = 1; v != 0 && v < UINT64_MAX / 3; v = v * 3 + 1) {
        size_t n = put_varint(buf, v);
        uint64_t got;
        assert_int_equal(wbuf_read_varint(buf, n, &got), n);
        assert_int_equal(got, v);
    }
}

static void test_empty(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    struct pipe_buf scratch = {0};
    struct wbuf_take t;
    assert_int_equal(wbuf_take(&b, 10, 100, &scratch, &t), 0);
    assert_int_equal(t.count, 0);
    assert_int_equal(t.len, 0);
    assert_null(t.payload);
    assert_null(t.spent);
    assert_null(scratch.p);
}

static void test_push_accounting(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    size_t l1[] = {3, 200}, l2[] = {1};
    uint8_t t1[] = {1, 2}, t2[] = {3};
    wbuf_push(&b, make_chunk(l1, t1, 2));
    /* 1 + 3 and 2 + 200 bytes: a 200-byte record has a two-byte length. */
    assert_int_equal(b.bytes, 206);
    assert_int_equal(b.count, 2);
    assert_int_equal(b.chunks, 1);
    wbuf_push(&b, make_chunk(l2, t2, 1));
    assert_int_equal(b.bytes, 208);
    assert_int_equal(b.count, 3);
    assert_int_equal(b.chunks, 2);
    wbuf_clear(&b);
    assert_int_equal(b.bytes, 0);
    assert_int_equal(b.count, 0);
    assert_int_equal(b.chunks, 0);
    assert_null(b.head);
    assert_null(b.tail);
}

/* A take inside one chunk points into it; the chunk is handed back once used up. */
static void test_in_place_and_count_limit(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    size_t lens[] = {4, 5, 6, 7, 8};
    uint8_t tags[] = {10, 11, 12, 13, 14};
    struct wbuf_chunk *c = make_chunk(lens, tags, 5);
    wbuf_push(&b, c);
    struct pipe_buf scratch = {0};
    struct wbuf_take t;

    assert_int_equal(wbuf_take(&b, 3, 1000, &scratch, &t), 0);
    assert_int_equal(t.count, 3);
    assert_false(t.copied);
    assert_ptr_equal(t.payload, (uint8_t *)c->data.p);
    expect_records(t.payload, t.len, lens, tags, 3);
    assert_null(t.spent);
    assert_int_equal(b.count, 2);
    assert_int_equal(b.bytes, (1 + 7) + (1 + 8));
    assert_int_equal(c->taken, 3);
    assert_int_equal(c->pos, t.len);

    assert_int_equal(wbuf_take(&b, 3, 1000, &scratch, &t), 0);
    assert_int_equal(t.count, 2);
    assert_false(t.copied);
    assert_ptr_equal(t.payload, (uint8_t *)c->data.p + c->pos - t.len);
    expect_records(t.payload, t.len, lens + 3, tags + 3, 2);
    assert_ptr_equal(t.spent, c);
    assert_null(t.spent->next);
    assert_int_equal(b.count, 0);
    assert_int_equal(b.bytes, 0);
    assert_null(b.head);
    assert_null(b.tail);
    free_spent(&t);
    assert_null(scratch.p);
}

/* The byte limit counts whole records with their length prefixes; the first record always goes,
 * however large. */
static void test_byte_limit(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    size_t lens[] = {300, 9, 9, 9};
    uint8_t tags[] = {1, 2, 3, 4};
    wbuf_push(&b, make_chunk(lens, tags, 4));
    struct pipe_buf scratch = {0};
    struct wbuf_take t;

    assert_int_equal(wbuf_take(&b, 100, 10, &scratch, &t), 0);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.len, 302);
    expect_records(t.payload, t.len, lens, tags, 1);

    /* Exactly two records of 10 bytes fit in 20; a third would need 30. */
    assert_int_equal(wbuf_take(&b, 100, 20, &scratch, &t), 0);
    assert_int_equal(t.count, 2);
    assert_int_equal(t.len, 20);
    expect_records(t.payload, t.len, lens + 1, tags + 1, 2);
    assert_null(t.spent);

    assert_int_equal(wbuf_take(&b, 100, 19, &scratch, &t), 0);
    assert_int_equal(t.count, 1);
    expect_records(t.payload, t.len, lens + 3, tags + 3, 1);
    assert_non_null(t.spent);
    free_spent(&t);
    assert_int_equal(b.count, 0);
}

/* Small chunks are gathered into one payload, in order, and all handed back. */
static void test_gather(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    size_t lens[] = {2, 3, 4, 5, 6};
    uint8_t tags[] = {1, 2, 3, 4, 5};
    wbuf_push(&b, make_chunk(lens, tags, 2));
    wbuf_push(&b, make_chunk(lens + 2, tags + 2, 1));
    wbuf_push(&b, make_chunk(lens + 3, tags + 3, 2));
    struct pipe_buf scratch = {0};
    struct wbuf_take t;

    assert_int_equal(wbuf_take(&b, 100, 1000, &scratch, &t), 0);
    assert_int_equal(t.count, 5);
    assert_true(t.copied);
    assert_ptr_equal(t.payload, (uint8_t *)scratch.p);
    assert_int_equal(t.len, 5 + 2 + 3 + 4 + 5 + 6);
    expect_records(t.payload, t.len, lens, tags, 5);
    assert_int_equal(count_spent(t.spent), 3);
    assert_int_equal(b.count, 0);
    assert_int_equal(b.bytes, 0);
    assert_int_equal(b.chunks, 0);
    assert_null(b.head);
    free_spent(&t);
    pipe_buf_release(&scratch);
}

/* A gather may end inside a chunk; the rest of that chunk stays for the next take. */
static void test_gather_ends_mid_chunk(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    size_t lens[] = {1, 1, 1, 1, 1};
    uint8_t tags[] = {1, 2, 3, 4, 5};
    struct wbuf_chunk *c1 = make_chunk(lens, tags, 1);
    struct wbuf_chunk *c2 = make_chunk(lens + 1, tags + 1, 4);
    wbuf_push(&b, c1);
    wbuf_push(&b, c2);
    struct pipe_buf scratch = {0};
    struct wbuf_take t;

    assert_int_equal(wbuf_take(&b, 3, 1000, &scratch, &t), 0);
    assert_int_equal(t.count, 3);
    assert_true(t.copied);
    expect_records(t.payload, t.len, lens, tags, 3);
    assert_ptr_equal(t.spent, c1);
    assert_null(c1->next);
    assert_ptr_equal(b.head, c2);
    assert_int_equal(b.chunks, 1);
    assert_int_equal(c2->taken, 2);
    assert_int_equal(b.count, 2);
    assert_int_equal(b.bytes, 4);
    free_spent(&t);

    assert_int_equal(wbuf_take(&b, 3, 1000, &scratch, &t), 0);
    assert_int_equal(t.count, 2);
    assert_false(t.copied);
    expect_records(t.payload, t.len, lens + 3, tags + 3, 2);
    assert_ptr_equal(t.spent, c2);
    free_spent(&t);
    pipe_buf_release(&scratch);
}

/* Once the head chunk alone makes half a reply, the take stops there rather than copy. */
static void test_no_gather_past_half(void **state)
{
    (void)state;
    size_t lens[] = {50, 50, 50};
    uint8_t tags[] = {1, 2, 3};
    struct pipe_buf scratch = {0};
    struct wbuf_take t;

    /* By bytes: 51 of 100 is at least half. */
    struct wbuf b;
    wbuf_init(&b);
    struct wbuf_chunk *c = make_chunk(lens, tags, 1);
    wbuf_push(&b, c);
    wbuf_push(&b, make_chunk(lens + 1, tags + 1, 2));
    assert_int_equal(wbuf_take(&b, 100, 102, &scratch, &t), 0);
    assert_int_equal(t.count, 1);
    assert_false(t.copied);
    assert_ptr_equal(t.payload, (uint8_t *)c->data.p);
    free_spent(&t);
    wbuf_clear(&b);
    /* Just under half: 51 * 2 < 103, so the take goes on into the next chunk. */
    wbuf_push(&b, make_chunk(lens, tags, 1));
    wbuf_push(&b, make_chunk(lens + 1, tags + 1, 2));
    assert_int_equal(wbuf_take(&b, 100, 103, &scratch, &t), 0);
    assert_int_equal(t.count, 2);
    assert_true(t.copied);
    expect_records(t.payload, t.len, lens, tags, 2);
    assert_int_equal(count_spent(t.spent), 1);
    free_spent(&t);
    assert_int_equal(b.count, 1);
    wbuf_clear(&b);
    pipe_buf_release(&scratch);

    /* By count: one record of a limit of two is half. */
    wbuf_push(&b, make_chunk(lens, tags, 1));
    wbuf_push(&b, make_chunk(lens + 1, tags + 1, 1));
    assert_int_equal(wbuf_take(&b, 2, 1u << 20, &scratch, &t), 0);
    assert_int_equal(t.count, 1);
    assert_false(t.copied);
    free_spent(&t);
    assert_int_equal(b.count, 1);
    wbuf_clear(&b);
    assert_null(scratch.p);
}

/* A chunk whose count promises more records than its bytes hold, or whose bytes run past its
 * last record, is refused and the buffer is left as it was. */
static void test_corrupt(void **state)
{
    (void)state;
    size_t lens[] = {4, 4};
    uint8_t tags[] = {1, 2};
    struct pipe_buf scratch = {0};
    struct wbuf_take t;
    struct wbuf b;

    wbuf_init(&b);
    struct wbuf_chunk *c = make_chunk(lens, tags, 2);
    c->count = 3;
    wbuf_push(&b, c);
    assert_int_equal(wbuf_take(&b, 10, 1000, &scratch, &t), SLUICE_ERR_CORRUPT);
    assert_int_equal(b.count, 3);
    assert_int_equal(c->pos, 0);
    assert_int_equal(c->taken, 0);
    wbuf_clear(&b);

    wbuf_init(&b);
    c = make_chunk(lens, tags, 2);
    c->count = 1;
    wbuf_push(&b, c);
    assert_int_equal(wbuf_take(&b, 10, 1000, &scratch, &t), SLUICE_ERR_CORRUPT);
    assert_int_equal(c->taken, 0);
    wbuf_clear(&b);

    /* A record length past the end of the chunk. */
    wbuf_init(&b);
    c = make_chunk(lens, tags, 1);
    ((uint8_t *)c->data.p)[0] = 9;
    wbuf_push(&b, c);
    assert_int_equal(wbuf_take(&b, 10, 1000, &scratch, &t), SLUICE_ERR_CORRUPT);
    wbuf_clear(&b);
}

/* Many chunks and takes with varying limits: every record comes out once, in order, and the
 * accounting always equals what is left. */
static void test_fifo_random(void **state)
{
    (void)state;
    enum { RECORDS = 3000 };
    static size_t lens[RECORDS];
    static uint8_t tags[RECORDS];
    uint64_t seed = 0x9e3779b97f4a7c15u;
#define NEXT() (seed = seed * 6364136223846793005u + 1442695040888963407u, seed >> 33)
    for (size_t i = 0; i < RECORDS; i++) {
        lens[i] = NEXT() % 4 == 0 ? NEXT() % 400 : NEXT() % 20;
        tags[i] = (uint8_t)i;
    }
    struct wbuf b;
    wbuf_init(&b);
    struct pipe_buf scratch = {0};
    size_t pushed = 0, taken = 0;
    uint64_t bytes_left = 0, chunks_left = 0;
    while (taken < RECORDS) {
        /* Push a few chunks, then take a few times. */
        for (int k = 0; k < 3 && pushed < RECORDS; k++) {
            size_t n = 1 + NEXT() % 40;
            if (n > RECORDS - pushed)
                n = RECORDS - pushed;
            struct wbuf_chunk *c = make_chunk(lens + pushed, tags + pushed, n);
            bytes_left += c->data.len;
            wbuf_push(&b, c);
            chunks_left++;
            pushed += n;
        }
        for (int k = 0; k < 4; k++) {
            uint32_t max_el = 1 + (uint32_t)(NEXT() % 64);
            uint64_t max_bytes = 1 + NEXT() % 2000;
            struct wbuf_take t;
            assert_int_equal(wbuf_take(&b, max_el, max_bytes, &scratch, &t), 0);
            if (taken == pushed) {
                assert_int_equal(t.count, 0);
                continue;
            }
            assert_true(t.count >= 1);
            assert_true(t.count <= max_el);
            assert_true(t.count == 1 || t.len <= max_bytes);
            expect_records(t.payload, t.len, lens + taken, tags + taken, t.count);
            taken += t.count;
            bytes_left -= t.len;
            assert_int_equal(b.count, pushed - taken);
            assert_int_equal(b.bytes, bytes_left);
            chunks_left -= count_spent(t.spent);
            assert_int_equal(b.chunks, chunks_left);
            free_spent(&t);
        }
    }
#undef NEXT
    assert_null(b.head);
    pipe_buf_release(&scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varint),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_push_accounting),
        cmocka_unit_test(test_in_place_and_count_limit),
        cmocka_unit_test(test_byte_limit),
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_gather_ends_mid_chunk),
        cmocka_unit_test(test_no_gather_past_half),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_fifo_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
