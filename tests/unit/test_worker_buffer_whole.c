/* Takes of whole chunks from the worker's element buffer (wbuf_take_whole), external chunks
 * (records whose bulk lies in a block of their own) with both kinds of take, the pieces a
 * chunk is written in, and the accounting throughout. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/buffer.h"

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

/* A chunk of n records of len bytes each, every byte of record i equal to tag + i. */
static struct wbuf_chunk *make_chunk(size_t n, size_t len, uint8_t tag)
{
    struct wbuf_chunk *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->data.cap = n * (len + 10) + 1;
    c->data.p = malloc(c->data.cap);
    assert_non_null(c->data.p);
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = (uint8_t *)c->data.p + c->data.len;
        size_t h = put_varint(p, len);
        memset(p + h, tag + (int)i, len);
        c->data.len += h + len;
    }
    c->count = (uint32_t)n;
    return c;
}

/* An external chunk: one record of head + ext + tail bytes (all equal to tag), the ext bytes in a
 * block of their own. */
static struct wbuf_chunk *make_ext(size_t head, size_t ext, size_t tail, uint8_t tag)
{
    struct wbuf_chunk *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->data.cap = 10 + head + tail + 1;
    c->data.p = malloc(c->data.cap);
    assert_non_null(c->data.p);
    uint8_t *p = (uint8_t *)c->data.p;
    size_t h = put_varint(p, head + ext + tail);
    memset(p + h, tag, head + tail);
    c->data.len = h + head + tail;
    c->ext_at = h + head;
    c->ext = malloc(ext + 5);
    assert_non_null(c->ext);
    memset(c->ext, tag, ext);
    c->ext_len = ext;
    c->ext_cap = ext + 5;
    c->count = 1;
    return c;
}

/* The bytes of a take of whole chunks, joined from the chunks' pieces. */
static uint8_t *join_whole(const struct wbuf_take *t, size_t *len)
{
    uint8_t *out = malloc(t->len ? t->len : 1);
    assert_non_null(out);
    size_t off = 0;
    for (const struct wbuf_chunk *c = t->spent; c; c = c->next) {
        struct wbuf_piece pieces[3];
        unsigned n = wbuf_chunk_pieces(c, pieces);
        assert_true(n <= 3);
        for (unsigned i = 0; i < n; i++) {
            assert_true(pieces[i].len > 0);
            assert_true(off + pieces[i].len <= t->len);
            memcpy(out + off, pieces[i].p, pieces[i].len);
            off += pieces[i].len;
        }
    }
    assert_int_equal(off, t->len);
    *len = off;
    return out;
}

/* Checks that bytes hold records of the given lengths and tags, in order. */
static void expect_records(const uint8_t *bytes, size_t len, const size_t *lens,
                           const uint8_t *tags, size_t n)
{
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t l = 0;
        size_t h = wbuf_read_varint(bytes + pos, len - pos, &l);
        assert_true(h > 0);
        assert_int_equal(l, lens[i]);
        pos += h;
        for (size_t k = 0; k < l; k++)
            assert_int_equal(bytes[pos + k], tags[i]);
        pos += l;
    }
    assert_int_equal(pos, len);
}

static void free_spent(struct wbuf_take *t)
{
    while (t->spent) {
        struct wbuf_chunk *next = t->spent->next;
        wbuf_chunk_free(t->spent);
        t->spent = next;
    }
}

static size_t count_spent(const struct wbuf_take *t)
{
    size_t n = 0;
    for (const struct wbuf_chunk *c = t->spent; c; c = c->next)
        n++;
    return n;
}

static void test_whole_chunks_within_limits(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    wbuf_push(&b, make_chunk(3, 10, 0x10)); /* 33 bytes */
    wbuf_push(&b, make_chunk(2, 20, 0x20)); /* 42 bytes */
    wbuf_push(&b, make_chunk(4, 5, 0x30));  /* 24 bytes */
    assert_int_equal(b.bytes, 99);
    assert_int_equal(b.count, 9);

    /* Bytes: 33 + 42 fit 80, the third would not. */
    struct wbuf_take t;
    assert_int_equal(wbuf_take_whole(&b, 100, 80, 10, &t), 0);
    assert_true(t.whole);
    assert_null(t.payload);
    assert_int_equal(t.count, 5);
    assert_int_equal(t.len, 75);
    assert_int_equal(count_spent(&t), 2);
    size_t len;
    uint8_t *bytes = join_whole(&t, &len);
    expect_records(bytes, len, (const size_t[]){10, 10, 10, 20, 20},
                   (const uint8_t[]){0x10, 0x11, 0x12, 0x20, 0x21}, 5);
    free(bytes);
    free_spent(&t);
    assert_int_equal(b.bytes, 24);
    assert_int_equal(b.count, 4);
    assert_int_equal(b.chunks, 1);

    /* Records: the head chunk alone has more than 3, so nothing is taken. */
    assert_int_equal(wbuf_take_whole(&b, 3, 1000, 10, &t), 0);
    assert_int_equal(t.count, 0);
    assert_null(t.spent);
    assert_int_equal(b.count, 4);

    /* Chunks: at most one. */
    wbuf_push(&b, make_chunk(1, 5, 0x40));
    assert_int_equal(wbuf_take_whole(&b, 100, 1000, 1, &t), 0);
    assert_int_equal(t.count, 4);
    assert_int_equal(count_spent(&t), 1);
    free_spent(&t);
    assert_int_equal(wbuf_take_whole(&b, 100, 1000, 1, &t), 0);
    assert_int_equal(t.count, 1);
    free_spent(&t);
    assert_null(b.head);
    assert_null(b.tail);
    assert_int_equal(b.bytes, 0);
    assert_int_equal(b.count, 0);
    assert_int_equal(b.chunks, 0);
    /* An empty buffer gives nothing. */
    assert_int_equal(wbuf_take_whole(&b, 100, 1000, 10, &t), 0);
    assert_int_equal(t.count, 0);
}

static void test_rest_of_a_partly_taken_chunk(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    wbuf_push(&b, make_chunk(5, 8, 0x50));
    wbuf_push(&b, make_chunk(1, 8, 0x60));
    struct pipe_buf scratch = {0};
    struct wbuf_take t;
    /* Two records in place; the chunk stays with three. */
    assert_int_equal(wbuf_take(&b, 2, 1000, &scratch, &t), 0);
    assert_int_equal(t.count, 2);
    assert_false(t.whole);
    assert_null(t.spent);
    /* The rest of it, and the next chunk, whole: the pieces start at pos. */
    assert_int_equal(wbuf_take_whole(&b, 100, 1000, 10, &t), 0);
    assert_int_equal(t.count, 4);
    assert_int_equal(t.len, 4 * 9);
    assert_int_equal(t.spent->pos, 2 * 9);
    size_t len;
    uint8_t *bytes = join_whole(&t, &len);
    expect_records(bytes, len, (const size_t[]){8, 8, 8, 8},
                   (const uint8_t[]){0x52, 0x53, 0x54, 0x60}, 4);
    free(bytes);
    free_spent(&t);
    assert_int_equal(b.bytes, 0);
    assert_int_equal(b.count, 0);
    pipe_buf_release(&scratch);
}

static void test_external_chunks(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    wbuf_push(&b, make_chunk(1, 4, 0x70));     /* 5 bytes */
    wbuf_push(&b, make_ext(3, 1000, 2, 0x71)); /* 2 + 1005 bytes */
    wbuf_push(&b, make_ext(0, 300, 0, 0x72));  /* 2 + 300 bytes */
    wbuf_push(&b, make_ext(5, 200, 0, 0x73));  /* 2 + 205 bytes */
    assert_int_equal(b.bytes, 5 + 1007 + 302 + 207);
    assert_int_equal(b.count, 4);

    /* The pieces of an external chunk: data before the block, the block, data after it. */
    struct wbuf_piece pieces[3];
    const struct wbuf_chunk *x = b.head->next;
    assert_int_equal(wbuf_chunk_pieces(x, pieces), 3);
    assert_int_equal(pieces[0].len, 2 + 3);
    assert_ptr_equal(pieces[1].p, x->ext);
    assert_int_equal(pieces[1].len, 1000);
    assert_int_equal(pieces[2].len, 2);
    assert_int_equal(wbuf_chunk_pieces(x->next, pieces), 2);
    assert_int_equal(wbuf_chunk_pieces(x->next->next, pieces), 2);

    /* A limit of 500 bytes stops before the large record... */
    struct wbuf_take t;
    assert_int_equal(wbuf_take_whole(&b, 100, 500, 10, &t), 0);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.len, 5);
    free_spent(&t);
    /* ...which then goes alone although it is over the limit: it cannot be cut. */
    assert_int_equal(wbuf_take_whole(&b, 100, 500, 10, &t), 0);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.len, 1007);
    size_t len;
    uint8_t *bytes = join_whole(&t, &len);
    expect_records(bytes, len, (const size_t[]){1005}, (const uint8_t[]){0x71}, 1);
    free(bytes);
    free_spent(&t);
    /* Both remaining records within 600 bytes. */
    assert_int_equal(wbuf_take_whole(&b, 100, 600, 10, &t), 0);
    assert_int_equal(t.count, 2);
    bytes = join_whole(&t, &len);
    expect_records(bytes, len, (const size_t[]){300, 205}, (const uint8_t[]){0x72, 0x73}, 2);
    free(bytes);
    free_spent(&t);
    assert_int_equal(b.bytes, 0);
    assert_int_equal(b.count, 0);
    assert_int_equal(b.chunks, 0);
}

/* Chunks laid out in a reader's arena (inplace) go alone: a take stops before one, and one at the
 * head is the whole take even when more would fit. */
static void test_inplace_chunks_alone(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    wbuf_push(&b, make_chunk(1, 4, 0x70));
    wbuf_push(&b, make_ext(0, 300, 0, 0x71));
    wbuf_push(&b, make_ext(0, 300, 0, 0x72));
    wbuf_push(&b, make_ext(0, 300, 0, 0x73));
    wbuf_push(&b, make_chunk(1, 4, 0x74));
    b.head->next->inplace = true;
    b.head->next->next->inplace = true;
    struct wbuf_take t;
    assert_int_equal(wbuf_take_whole(&b, 100, 100000, 10, &t), 0);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.len, 5);
    free_spent(&t);
    for (uint8_t tag = 0x71; tag <= 0x72; tag++) {
        assert_int_equal(wbuf_take_whole(&b, 100, 100000, 10, &t), 0);
        assert_int_equal(t.count, 1);
        assert_int_equal(t.len, 302);
        assert_true(t.spent->inplace && t.spent->next == NULL);
        size_t len;
        uint8_t *bytes = join_whole(&t, &len);
        expect_records(bytes, len, (const size_t[]){300}, (const uint8_t[]){tag}, 1);
        free(bytes);
        free_spent(&t);
    }
    /* The rest (not in place) together. */
    assert_int_equal(wbuf_take_whole(&b, 100, 100000, 10, &t), 0);
    assert_int_equal(t.count, 2);
    assert_int_equal(t.len, 302 + 5);
    free_spent(&t);
    assert_int_equal(b.count, 0);
}

static void test_external_chunks_gathered(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    wbuf_push(&b, make_ext(2, 50, 3, 0x80));
    wbuf_push(&b, make_chunk(2, 4, 0x90));
    wbuf_push(&b, make_ext(0, 60, 0, 0xa0));
    struct pipe_buf scratch = {0};
    struct wbuf_take t;
    /* An external record is never handed out in place: it is gathered, even alone. */
    assert_int_equal(wbuf_take(&b, 1, 1000, &scratch, &t), 0);
    assert_int_equal(t.count, 1);
    assert_true(t.copied);
    assert_false(t.whole);
    expect_records(t.payload, t.len, (const size_t[]){55}, (const uint8_t[]){0x80}, 1);
    assert_int_equal(count_spent(&t), 1);
    free_spent(&t);
    /* Gathering across a plain chunk and an external one. */
    assert_int_equal(wbuf_take(&b, 100, 1000, &scratch, &t), 0);
    assert_int_equal(t.count, 3);
    assert_true(t.copied);
    expect_records(t.payload, t.len, (const size_t[]){4, 4, 60},
                   (const uint8_t[]){0x90, 0x91, 0xa0}, 3);
    free_spent(&t);
    assert_int_equal(b.bytes, 0);
    assert_int_equal(b.count, 0);
    pipe_buf_release(&scratch);
}

static void test_inconsistent_external_chunk(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    struct wbuf_chunk *c = make_ext(2, 50, 3, 0x80);
    c->ext_len = 49; /* the length prefix says 55 bytes, the pieces hold 54 */
    wbuf_push(&b, c);
    struct pipe_buf scratch = {0};
    struct wbuf_take t;
    assert_int_equal(wbuf_take(&b, 10, 1000, &scratch, &t), SLUICE_ERR_CORRUPT);
    assert_int_equal(b.count, 1);
    wbuf_clear(&b);
    assert_int_equal(b.count, 0);
    pipe_buf_release(&scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_chunks_within_limits),
        cmocka_unit_test(test_rest_of_a_partly_taken_chunk),
        cmocka_unit_test(test_external_chunks),
        cmocka_unit_test(test_inplace_chunks_alone),
        cmocka_unit_test(test_external_chunks_gathered),
        cmocka_unit_test(test_inconsistent_external_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
