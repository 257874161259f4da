/* The element codec: round trips for every dtype and shape, compression chosen only when it
 * pays, rejection of damaged batches, and values lent rather than copied (a lender given). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/codec.h"

#include <stdlib.h>
#include <string.h>

static void roundtrip(const struct sluice_element *in, bool compress)
{
    struct pipe_buf out = {0}, scratch = {0};
    assert_int_equal(codec_append_elem(&out, in, compress, &scratch), 0);
    assert_int_equal(codec_append_elem(&out, in, compress, &scratch), 0);
    struct sluice_element got;
    pipe_elem_init(&got);
    size_t pos = 0;
    char err[SLUICE_ERRMSG_SIZE];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(
            codec_next_elem((uint8_t *)out.p, out.len, &pos, &got, &scratch, err, sizeof(err)), 1);
        assert_true(pipe_elem_equal(in, &got));
    }
    assert_int_equal(
        codec_next_elem((uint8_t *)out.p, out.len, &pos, &got, &scratch, err, sizeof(err)), 0);
    assert_int_equal(pos, out.len);
    pipe_elem_release(&got);
    pipe_buf_release(&out);
    pipe_buf_release(&scratch);
}

static void test_scalars_and_tensors(void **state)
{
    (void)state;
    struct sluice_element *e = sluice_element_new();
    assert_non_null(e);
    assert_int_equal(sluice_element_set_int64(e, 0, -42), 0);
    roundtrip(e, false);
    roundtrip(e, true);

    assert_int_equal(sluice_element_set_num_components(e, 3), 0);
    double f = 0.25;
    assert_int_equal(sluice_element_set_tensor(e, 1, SLUICE_FLOAT64, 0, NULL, &f, 8), 0);
    int32_t m[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    assert_int_equal(sluice_element_set_tensor(e, 2, SLUICE_INT32, 2, shape, m, sizeof(m)), 0);
    roundtrip(e, false);
    roundtrip(e, true);

    /* Every fixed-width dtype, as a rank-1 tensor of 3 values. */
    for (int dt = SLUICE_BOOL; dt <= SLUICE_FLOAT64; dt++) {
        uint8_t vals[24] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
        int64_t s3[1] = {3};
        size_t sz = sluice_dtype_size((enum sluice_dtype)dt);
        assert_int_equal(
            sluice_element_set_tensor(e, 0, (enum sluice_dtype)dt, 1, s3, vals, 3 * sz), 0);
        roundtrip(e, false);
    }
    /* An empty tensor. */
    int64_t s0[2] = {0, 5};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_INT64, 2, s0, NULL, 0), 0);
    roundtrip(e, true);
    sluice_element_free(e);
}

static void test_bytes_and_compression(void **state)
{
    (void)state;
    struct sluice_element *e = sluice_element_new();
    assert_int_equal(sluice_element_set_bytes(e, 0, "", 0), 0);
    roundtrip(e, true);
    assert_int_equal(sluice_element_set_bytes(e, 0, "a\0b\n", 4), 0);
    roundtrip(e, false);

    /* A compressible 1 MiB string is stored compressed, and a random one raw. */
    size_t n = 1 << 20;
    char *big = malloc(n);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + (i / 64) % 3);
    assert_int_equal(sluice_element_set_bytes(e, 0, big, n), 0);
    struct pipe_buf out = {0}, scratch = {0};
    assert_int_equal(codec_append_elem(&out, e, true, &scratch), 0);
    assert_true(out.len < n / 4);
    roundtrip(e, true);
    out.len = 0;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        big[i] = (char)x;
    }
    assert_int_equal(sluice_element_set_bytes(e, 0, big, n), 0);
    assert_int_equal(codec_append_elem(&out, e, true, &scratch), 0);
    assert_true(out.len > n);
    assert_int_equal(((uint8_t *)out.p)[3], 0); /* flags byte after a 3-byte length: raw */
    roundtrip(e, true);
    free(big);
    pipe_buf_release(&out);
    pipe_buf_release(&scratch);
    sluice_element_free(e);
}

/* Tagged elements (raw and compressed) and split end markers: the tags come back exactly,
 * codec_scan_record steps over the same records without decoding, and codec_next_elem skips the
 * markers. */
static void test_tags_and_split_ends(void **state)
{
    (void)state;
    struct sluice_element *e = sluice_element_new();
    char text[200];
    memset(text, 'x', sizeof text);
    assert_int_equal(sluice_element_set_bytes(e, 0, text, sizeof text), 0);
    struct pipe_buf out = {0}, scratch = {0};
    struct codec_tag t1 = {7, 0}, t2 = {300, 1u << 20};
    assert_int_equal(codec_append_tagged(&out, e, false, &scratch, &t1), 0);
    assert_int_equal(codec_append_tagged(&out, e, true, &scratch, &t2), 0);
    assert_int_equal(codec_append_split_end(&out, 7, 1), 0);
    assert_int_equal(codec_append_tagged(&out, e, false, &scratch, NULL), 0);

    struct sluice_element got;
    pipe_elem_init(&got);
    struct codec_mark m;
    char err[SLUICE_ERRMSG_SIZE];
    size_t pos = 0;
    const uint8_t *p = (const uint8_t *)out.p;
    assert_int_equal(codec_next_record(p, out.len, &pos, &got, &scratch, NULL, &m, err, sizeof err),
                     CODEC_ELEMENT);
    assert_true(m.tagged);
    assert_int_equal(m.seq, 7);
    assert_int_equal(m.pos, 0);
    assert_true(pipe_elem_equal(e, &got));
    assert_int_equal(codec_next_record(p, out.len, &pos, &got, &scratch, NULL, &m, err, sizeof err),
                     CODEC_ELEMENT);
    assert_int_equal(m.seq, 300);
    assert_int_equal(m.pos, 1u << 20);
    assert_true(pipe_elem_equal(e, &got));
    assert_int_equal(codec_next_record(p, out.len, &pos, &got, &scratch, NULL, &m, err, sizeof err),
                     CODEC_SPLIT_END);
    assert_int_equal(m.seq, 7);
    assert_int_equal(m.pos, 1);
    assert_int_equal(codec_next_record(p, out.len, &pos, &got, &scratch, NULL, &m, err, sizeof err),
                     CODEC_ELEMENT);
    assert_false(m.tagged);
    assert_int_equal(codec_next_record(p, out.len, &pos, &got, &scratch, NULL, &m, err, sizeof err),
                     CODEC_NO_MORE);

    int kinds[] = {CODEC_ELEMENT, CODEC_ELEMENT, CODEC_SPLIT_END, CODEC_ELEMENT, CODEC_NO_MORE};
    pos = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        assert_int_equal(codec_scan_record(p, out.len, &pos, &m), kinds[i]);
    assert_int_equal(pos, out.len);

    pos = 0;
    int n = 0;
    while (codec_next_elem(p, out.len, &pos, &got, &scratch, err, sizeof err) == 1)
        n++;
    assert_int_equal(n, 3);
    pipe_elem_release(&got);
    pipe_buf_release(&out);
    pipe_buf_release(&scratch);
    sluice_element_free(e);
}

/* Split start markers: they come back with their split and first position, scanning steps over
 * them, codec_next_elem skips them, and a marker with other flags is refused. */
static void test_split_from(void **state)
{
    (void)state;
    struct sluice_element *e = sluice_element_new();
    assert_int_equal(sluice_element_set_bytes(e, 0, "abc", 3), 0);
    struct pipe_buf out = {0}, scratch = {0};
    struct codec_tag t = {9, 40};
    assert_int_equal(codec_append_split_from(&out, 9, 40), 0);
    assert_int_equal(codec_append_tagged(&out, e, false, &scratch, &t), 0);
    assert_int_equal(codec_append_split_end(&out, 9, 41), 0);

    struct sluice_element got;
    pipe_elem_init(&got);
    struct codec_mark m;
    char err[SLUICE_ERRMSG_SIZE];
    const uint8_t *p = (const uint8_t *)out.p;
    size_t pos = 0;
    assert_int_equal(codec_next_record(p, out.len, &pos, &got, &scratch, NULL, &m, err, sizeof err),
                     CODEC_SPLIT_FROM);
    assert_int_equal(m.seq, 9);
    assert_int_equal(m.pos, 40);
    int kinds[] = {CODEC_SPLIT_FROM, CODEC_ELEMENT, CODEC_SPLIT_END, CODEC_NO_MORE};
    pos = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        assert_int_equal(codec_scan_record(p, out.len, &pos, &m), kinds[i]);
    pos = 0;
    assert_int_equal(codec_next_elem(p, out.len, &pos, &got, &scratch, err, sizeof err), 1);
    assert_true(pipe_elem_equal(e, &got));
    assert_int_equal(codec_next_elem(p, out.len, &pos, &got, &scratch, err, sizeof err), 0);

    /* The marker's flag byte (after the one-byte length) with another flag: refused. */
    out.p[1] |= 0x04;
    pos = 0;
    assert_int_equal(codec_scan_record(p, out.len, &pos, &m), SLUICE_ERR_CORRUPT);
    pos = 0;
    assert_int_equal(codec_next_record(p, out.len, &pos, &got, &scratch, NULL, &m, err, sizeof err),
                     SLUICE_ERR_CORRUPT);
    assert_non_null(strstr(err, "split marker with other flags"));
    pipe_elem_release(&got);
    pipe_buf_release(&out);
    pipe_buf_release(&scratch);
    sluice_element_free(e);
}

static void test_corrupt_inputs(void **state)
{
    (void)state;
    struct sluice_element *e = sluice_element_new();
    int64_t v[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_INT64, 1, shape, v, sizeof(v)), 0);
    struct pipe_buf out = {0}, scratch = {0};
    assert_int_equal(codec_append_elem(&out, e, false, &scratch), 0);
    struct sluice_element got;
    pipe_elem_init(&got);
    char err[SLUICE_ERRMSG_SIZE];

    /* Every truncation of a valid record is rejected. */
    for (size_t cut = 1; cut < out.len; cut++) {
        size_t pos = 0;
        int rc = codec_next_elem((uint8_t *)out.p, cut, &pos, &got, &scratch, err, sizeof(err));
        assert_int_equal(rc, SLUICE_ERR_CORRUPT);
    }
    struct {
        const uint8_t bytes[16];
        size_t len;
        const char *msg;
    } cases[] = {
        {{0x01, 0x00}, 2, "element codec: offset 2: empty element"},
        {{0x03, 0x00, 0x01, 0x0c}, 4, "element codec: offset 3: truncated component header"},
        {{0x04, 0x00, 0x01, 0x0c, 0x00}, 5, "element codec: offset 3: unknown dtype"},
        {{0x04, 0x00, 0x01, 0x04, 0x09}, 5, "element codec: offset 4: rank over limit"},
        {{0x02, 0x20, 0x00}, 3, "element codec: offset 0: unknown record flags"},
        {{0x02, 0x30, 0x00}, 3, "element codec: offset 0: unknown record flags"},
        {{0x02, 0x02, 0x80}, 3, "element codec: offset 0: bad element tag"},
        {{0x02, 0x04, 0x01}, 3, "element codec: offset 0: bad split marker"},
        {{0x04, 0x05, 0x01, 0x02, 0x00},
         5,
         "element codec: offset 0: split marker with other flags"},
        {{0x00}, 1, "element codec: offset 0: bad record length"},
        {{0x05, 0x00, 0x01, 0x0b, 0x00, 0x09}, 6, "element codec: offset 6: bad string length"},
        {{0x05, 0x00, 0x00, 0x04, 0x00, 0x00}, 6, "element codec: offset 2: bad component count"},
        {{0x04, 0x01, 0x05, 0x01, 0x01}, 5, "element codec: offset 0: bad compressed record"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t pos = 0;
        int rc =
            codec_next_elem(cases[i].bytes, cases[i].len, &pos, &got, &scratch, err, sizeof(err));
        assert_int_equal(rc, SLUICE_ERR_CORRUPT);
        assert_string_equal(err, cases[i].msg);
    }
    pipe_elem_release(&got);
    pipe_buf_release(&out);
    pipe_buf_release(&scratch);
    sluice_element_free(e);
}

/* A lender that counts its references. */
struct counting_lender {
    struct pipe_lender base;
    int refs;
};

static void count_hold(struct pipe_lender *l)
{
    ((struct counting_lender *)l)->refs++;
}

static void count_release(struct pipe_lender *l)
{
    ((struct counting_lender *)l)->refs--;
}

/* codec_next_record at *pos of data (len bytes) into got, lending from l (NULL: none). */
static int next_record(const uint8_t *data, size_t len, size_t *pos, struct sluice_element *got,
                       struct pipe_buf *scratch, struct pipe_lender *l)
{
    struct codec_mark m;
    char err[SLUICE_ERRMSG_SIZE];
    return codec_next_record(data, len, pos, got, scratch, l, &m, err, sizeof err);
}

/* One component of n values of dtype dt (value k: k * 37 % 251), encoded (compressed when asked)
 * and decoded with a lender from a buffer at each of 8 offsets: the values are lent exactly
 * when the record is stored, they are at least CODEC_LEND_MIN bytes and they lie aligned to
 * their dtype; they equal the input either way; a lent tensor holds one reference until it is
 * changed (a reserve copies what it keeps) or released. */
/* The element's lent flag follows its tensors: set by a lending decode, cleared by unlending
 * (which gives every reference back) and by a decode that lends nothing, whose unlend comes
 * first; an element never lent does not read its tensors to unlend. */
static void test_lent_flag(void **state)
{
    (void)state;
    size_t nbytes = 8192;
    uint8_t *vals = malloc(nbytes);
    assert_non_null(vals);
    for (size_t k = 0; k < nbytes; k++)
        vals[k] = (uint8_t)(k * 37 % 251);
    struct sluice_element *big = sluice_element_new(), *small = sluice_element_new();
    int64_t shape[1] = {(int64_t)nbytes};
    assert_int_equal(sluice_element_set_tensor(big, 0, SLUICE_UINT8, 1, shape, vals, nbytes), 0);
    assert_int_equal(sluice_element_set_int64(small, 0, 7), 0);
    struct pipe_buf out = {0}, scratch = {0};
    assert_int_equal(codec_append_elem(&out, big, false, &scratch), 0);
    assert_int_equal(codec_append_elem(&out, big, false, &scratch), 0);
    assert_int_equal(codec_append_elem(&out, small, false, &scratch), 0);
    uint8_t *buf = aligned_alloc(64, (out.len + 63) / 64 * 64);
    assert_non_null(buf);
    memcpy(buf, out.p, out.len);
    struct counting_lender l = {{count_hold, count_release}, 0};
    struct sluice_element got;
    pipe_elem_init(&got);
    assert_false(got.lent);
    size_t pos = 0;
    assert_int_equal(next_record(buf, out.len, &pos, &got, &scratch, &l.base), CODEC_ELEMENT);
    assert_true(got.lent);
    assert_int_equal(l.refs, 1);
    pipe_elem_unlend(&got);
    assert_false(got.lent);
    assert_int_equal(l.refs, 0);
    assert_null(got.t[0].lender);
    /* Lent again, then a small element over it: the decode gives the values back first. */
    assert_int_equal(next_record(buf, out.len, &pos, &got, &scratch, &l.base), CODEC_ELEMENT);
    assert_true(got.lent);
    assert_int_equal(l.refs, 1);
    assert_int_equal(next_record(buf, out.len, &pos, &got, &scratch, &l.base), CODEC_ELEMENT);
    assert_false(got.lent);
    assert_int_equal(l.refs, 0);
    assert_true(pipe_elem_equal(small, &got));
    /* Swapped with an element that holds lent values, the flag goes with them. */
    struct sluice_element other;
    pipe_elem_init(&other);
    pos = 0;
    assert_int_equal(next_record(buf, out.len, &pos, &other, &scratch, &l.base), CODEC_ELEMENT);
    pipe_elem_swap(&got, &other);
    assert_true(got.lent);
    assert_false(other.lent);
    pipe_elem_unlend(&got);
    assert_int_equal(l.refs, 0);
    pipe_elem_release(&got);
    pipe_elem_release(&other);
    free(buf);
    free(vals);
    pipe_buf_release(&out);
    pipe_buf_release(&scratch);
    sluice_element_free(big);
    sluice_element_free(small);
}

static void test_lent_values(void **state)
{
    (void)state;
    static const struct {
        enum sluice_dtype dt;
        size_t n;
        bool compress;
        int lent; /* of the 8 offsets */
    } cases[] = {
        {SLUICE_UINT8, 8192, false, 8},
        {SLUICE_UINT8, CODEC_LEND_MIN, false, 8},
        {SLUICE_UINT8, CODEC_LEND_MIN - 1, false, 0},
        {SLUICE_INT64, 1024, false, 1},
        {SLUICE_FLOAT32, 2048, false, 2},
        {SLUICE_UINT8, 8192, true, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t w = sluice_dtype_size(cases[c].dt), nbytes = cases[c].n * w;
        uint8_t *vals = malloc(nbytes);
        assert_non_null(vals);
        for (size_t k = 0; k < nbytes; k++)
            vals[k] = (uint8_t)(cases[c].compress ? 0 : k * 37 % 251);
        struct sluice_element *in = sluice_element_new();
        int64_t shape[1] = {(int64_t)cases[c].n};
        assert_int_equal(sluice_element_set_tensor(in, 0, cases[c].dt, 1, shape, vals, nbytes), 0);
        struct pipe_buf out = {0}, scratch = {0};
        assert_int_equal(codec_append_elem(&out, in, cases[c].compress, &scratch), 0);
        /* C11: the size a multiple of the alignment. */
        uint8_t *buf = aligned_alloc(64, (out.len + 127) / 64 * 64);
        assert_non_null(buf);
        int lent = 0;
        for (size_t off = 0; off < 8; off++) {
            memcpy(buf + off, out.p, out.len);
            struct counting_lender l = {{count_hold, count_release}, 0};
            struct sluice_element got;
            pipe_elem_init(&got);
            size_t pos = 0;
            assert_int_equal(next_record(buf + off, out.len, &pos, &got, &scratch, &l.base),
                             CODEC_ELEMENT);
            assert_true(pipe_elem_equal(in, &got));
            const uint8_t *d = got.t[0].data;
            bool inside = d >= buf + off && d + nbytes <= buf + off + out.len;
            assert_int_equal(l.refs, inside ? 1 : 0);
            assert_true(got.t[0].lender == (inside ? &l.base : NULL));
            lent += inside;
            if (inside && off % 2 == 0) {
                /* Made the tensor's own: the values kept, the reference given back. */
                assert_int_equal(pipe_tensor_reserve(&got.t[0], nbytes + 1, cases[c].n + 1), 0);
                assert_int_equal(l.refs, 0);
                assert_true(got.t[0].data < buf ||
                            got.t[0].data >= buf + (out.len + 127) / 64 * 64);
                assert_true(pipe_elem_equal(in, &got));
            }
            pipe_elem_release(&got);
            assert_int_equal(l.refs, 0);
        }
        assert_int_equal(lent, cases[c].lent);
        /* A lender that asks for more bytes than the values have lends nothing; one that asks
         * for exactly as many lends as before (at offset 0, where every case lends if any). */
        for (size_t more = 0; more < 2; more++) {
            memcpy(buf, out.p, out.len);
            struct counting_lender l = {{count_hold, count_release}, 0};
            l.base.lend_min = nbytes + more;
            struct sluice_element got;
            pipe_elem_init(&got);
            size_t pos = 0;
            assert_int_equal(next_record(buf, out.len, &pos, &got, &scratch, &l.base),
                             CODEC_ELEMENT);
            assert_true(pipe_elem_equal(in, &got));
            assert_int_equal(l.refs, more == 0 && cases[c].lent > 0 ? 1 : 0);
            pipe_elem_release(&got);
        }
        free(buf);
        free(vals);
        sluice_element_free(in);
        pipe_buf_release(&out);
        pipe_buf_release(&scratch);
    }
}

/* A bytes tensor's strings are lent whole (any offset: strings have no alignment) once they
 * total CODEC_LEND_MIN bytes, its offsets staying the element's own; decoding the next record
 * into the same element gives back what the previous one had lent; setting the strings anew
 * copies and gives back the reference. */
static void test_lent_strings(void **state)
{
    (void)state;
    static const size_t totals[] = {CODEC_LEND_MIN, CODEC_LEND_MIN - 1, 100000};
    for (size_t c = 0; c < sizeof totals / sizeof totals[0]; c++) {
        size_t total = totals[c];
        uint8_t *text = malloc(total);
        assert_non_null(text);
        for (size_t k = 0; k < total; k++)
            text[k] = (uint8_t)(k * 37 % 251);
        /* Three strings of a 1-d tensor, then a scalar of the whole text. */
        const void *values[3] = {text, text + total / 3, text + 2 * (total / 3)};
        size_t lens[3] = {total / 3, total / 3, total - 2 * (total / 3)};
        int64_t shape[1] = {3};
        struct sluice_element *a = sluice_element_new(), *b = sluice_element_new();
        assert_int_equal(sluice_element_set_bytes_tensor(a, 0, 1, shape, values, lens), 0);
        assert_int_equal(sluice_element_set_bytes(b, 0, text, total), 0);
        struct pipe_buf out = {0}, scratch = {0};
        assert_int_equal(codec_append_elem(&out, a, false, &scratch), 0);
        assert_int_equal(codec_append_elem(&out, b, false, &scratch), 0);
        bool lends = total >= CODEC_LEND_MIN;
        for (size_t off = 0; off < 3; off++) {
            uint8_t *buf = malloc(out.len + off);
            assert_non_null(buf);
            memcpy(buf + off, out.p, out.len);
            struct counting_lender l = {{count_hold, count_release}, 0};
            struct sluice_element got;
            pipe_elem_init(&got);
            size_t pos = 0;
            assert_int_equal(next_record(buf + off, out.len, &pos, &got, &scratch, &l.base),
                             CODEC_ELEMENT);
            assert_true(pipe_elem_equal(a, &got));
            assert_int_equal(l.refs, lends ? 1 : 0);
            assert_true(lends == (got.t[0].data > buf && got.t[0].data < buf + off + out.len));
            assert_int_equal(next_record(buf + off, out.len, &pos, &got, &scratch, &l.base),
                             CODEC_ELEMENT);
            assert_true(pipe_elem_equal(b, &got));
            assert_int_equal(l.refs, lends ? 1 : 0);
            /* Set anew: the element's own strings, the reference given back. */
            assert_int_equal(pipe_tensor_set_bytes(&got.t[0], "xyz", 3), 0);
            assert_int_equal(l.refs, 0);
            const void *s;
            size_t len;
            assert_int_equal(sluice_element_bytes_at(&got, 0, 0, &s, &len), 0);
            assert_int_equal(len, 3);
            assert_memory_equal(s, "xyz", 3);
            pipe_elem_release(&got);
            assert_int_equal(l.refs, 0);
            free(buf);
        }
        pipe_buf_release(&out);
        pipe_buf_release(&scratch);
        sluice_element_free(a);
        sluice_element_free(b);
        free(text);
    }
}

/* A large element is judged by a sample of its largest component: random bytes are not worth
 * compressing, repeated ones are; an element too small to sample always says yes. */
static void test_sample_compresses(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    uint8_t *v = malloc(n);
    assert_non_null(v);
    uint64_t x = 88172645463325252ull;
    for (size_t k = 0; k < n; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v[k] = (uint8_t)x;
    }
    struct sluice_element *e = sluice_element_new();
    int64_t shape[1] = {(int64_t)n};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_UINT8, 1, shape, v, n), 0);
    struct pipe_buf scratch = {0};
    assert_false(codec_sample_compresses(e, 256 << 10, 64 << 10, &scratch));
    /* Below min_ext, or shorter than two samples: not judged. */
    assert_true(codec_sample_compresses(e, 2 << 20, 64 << 10, &scratch));
    assert_true(codec_sample_compresses(e, 256 << 10, 1 << 20, &scratch));
    memset(v, 'a', n);
    assert_int_equal(sluice_element_set_bytes(e, 0, v, n), 0);
    assert_true(codec_sample_compresses(e, 256 << 10, 64 << 10, &scratch));
    pipe_buf_release(&scratch);
    sluice_element_free(e);
    free(v);
}

/* Appends n bytes to b. */
static void buf_add(struct pipe_buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

/* Pad records of every length from 2 to CODEC_PAD_MAX, put before, between and after two
 * records, are stepped over by both readers and count as nothing; codec_pad_len always lands
 * the byte it aims at on a multiple of CODEC_ALIGN; a pad with other flags is damage. */
static void test_pad_records(void **state)
{
    (void)state;
    for (uint64_t at = 0; at < 200; at++) {
        for (uint64_t skip = 0; skip < 140; skip++) {
            size_t n = codec_pad_len(at, skip);
            assert_true(n == 0 || (n >= 2 && n <= CODEC_PAD_MAX));
            assert_int_equal((at + n + skip) % CODEC_ALIGN, 0);
        }
    }
    assert_null(codec_pad_record(0));
    assert_null(codec_pad_record(1));
    assert_null(codec_pad_record(CODEC_PAD_MAX + 1));
    struct sluice_element *a = sluice_element_new(), *b = sluice_element_new();
    assert_int_equal(sluice_element_set_int64(a, 0, 7), 0);
    assert_int_equal(sluice_element_set_bytes(b, 0, "pad", 3), 0);
    struct pipe_buf scratch = {0};
    for (size_t n = 2; n <= CODEC_PAD_MAX; n++) {
        const uint8_t *pad = codec_pad_record(n);
        assert_non_null(pad);
        struct pipe_buf out = {0};
        buf_add(&out, pad, n);
        assert_int_equal(codec_append_elem(&out, a, false, &scratch), 0);
        buf_add(&out, pad, n);
        buf_add(&out, pad, n);
        assert_int_equal(codec_append_split_end(&out, 3, 1), 0);
        assert_int_equal(codec_append_elem(&out, b, false, &scratch), 0);
        buf_add(&out, pad, n);
        struct sluice_element got;
        pipe_elem_init(&got);
        struct codec_mark m;
        size_t pos = 0;
        const uint8_t *d = (const uint8_t *)out.p;
        assert_int_equal(next_record(d, out.len, &pos, &got, &scratch, NULL), CODEC_ELEMENT);
        assert_true(pipe_elem_equal(a, &got));
        assert_int_equal(next_record(d, out.len, &pos, &got, &scratch, NULL), CODEC_SPLIT_END);
        assert_int_equal(next_record(d, out.len, &pos, &got, &scratch, NULL), CODEC_ELEMENT);
        assert_true(pipe_elem_equal(b, &got));
        assert_int_equal(next_record(d, out.len, &pos, &got, &scratch, NULL), CODEC_NO_MORE);
        assert_int_equal(pos, out.len);
        pos = 0;
        assert_int_equal(codec_scan_record(d, out.len, &pos, &m), CODEC_ELEMENT);
        assert_int_equal(codec_scan_record(d, out.len, &pos, &m), CODEC_SPLIT_END);
        assert_int_equal(m.seq, 3);
        assert_int_equal(codec_scan_record(d, out.len, &pos, &m), CODEC_ELEMENT);
        assert_int_equal(codec_scan_record(d, out.len, &pos, &m), CODEC_NO_MORE);
        /* A pad's flags byte with another flag is no pad. */
        ((uint8_t *)out.p)[1] |= 0x02;
        pos = 0;
        assert_int_equal(codec_scan_record(d, out.len, &pos, &m), SLUICE_ERR_CORRUPT);
        pipe_elem_release(&got);
        pipe_buf_release(&out);
    }
    pipe_buf_release(&scratch);
    sluice_element_free(a);
    sluice_element_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars_and_tensors), cmocka_unit_test(test_bytes_and_compression),
        cmocka_unit_test(test_tags_and_split_ends), cmocka_unit_test(test_split_from),
        cmocka_unit_test(test_corrupt_inputs),      cmocka_unit_test(test_lent_values),
        cmocka_unit_test(test_lent_strings),        cmocka_unit_test(test_sample_compresses),
        cmocka_unit_test(test_pad_records),         cmocka_unit_test(test_lent_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
