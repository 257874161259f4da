/* The split encoding of the element codec: a record appended by codec_append_split, with the
 * left-out values put back at split.at, is byte for byte the record codec_append_elem writes
 * without compression; the component left out is the one with the most value bytes; elements
 * with no component that large are left alone. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/codec.h"
#include "pipeline/element.h"

#include <stdlib.h>
#include <string.h>

/* The bytes of component c's values, as the codec writes them. */
static const uint8_t *values_of(const struct sluice_element *e, size_t c, size_t *len)
{
    const struct pipe_tensor *t = &e->t[c];
    *len = t->dtype == SLUICE_BYTES ? t->offs[pipe_tensor_num_values(t)] : t->len;
    return t->data;
}

/* Splits e after a prefix record already in the buffer and checks the reassembled bytes
 * against codec_append_elem, the chosen component, and a decode. */
static void expect_split(const struct sluice_element *e, size_t min_ext, size_t want_comp)
{
    struct pipe_buf ref = {0}, out = {0}, scratch = {0};
    struct sluice_element *small = sluice_element_new();
    assert_non_null(small);
    assert_int_equal(sluice_element_set_int64(small, 0, 7), 0);
    /* A record before the split one, so offsets are checked as absolute. */
    assert_int_equal(codec_append_elem(&ref, small, false, &scratch), 0);
    assert_int_equal(codec_append_elem(&out, small, false, &scratch), 0);
    size_t start = out.len;
    assert_int_equal(codec_append_elem(&ref, e, false, &scratch), 0);
    assert_true(codec_can_split(e, min_ext));

    struct codec_split split;
    assert_int_equal(codec_append_split(&out, e, min_ext, &split), 1);
    assert_int_equal(split.comp, want_comp);
    size_t vlen;
    const uint8_t *values = values_of(e, split.comp, &vlen);
    assert_int_equal(split.len, vlen);
    assert_true(split.at >= start && split.at <= out.len);
    assert_int_equal(out.len + split.len, ref.len);

    uint8_t *joined = malloc(ref.len);
    assert_non_null(joined);
    memcpy(joined, out.p, split.at);
    memcpy(joined + split.at, values, split.len);
    memcpy(joined + split.at + split.len, out.p + split.at, out.len - split.at);
    assert_memory_equal(joined, ref.p, ref.len);

    struct sluice_element got;
    pipe_elem_init(&got);
    size_t pos = 0;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(codec_next_elem(joined, ref.len, &pos, &got, &scratch, err, sizeof err), 1);
    assert_int_equal(codec_next_elem(joined, ref.len, &pos, &got, &scratch, err, sizeof err), 1);
    assert_true(pipe_elem_equal(e, &got));
    assert_int_equal(pos, ref.len);

    pipe_elem_release(&got);
    free(joined);
    sluice_element_free(small);
    pipe_buf_release(&ref);
    pipe_buf_release(&out);
    pipe_buf_release(&scratch);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31 + seed);
}

static void test_bytes_scalar(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 127, 128, 4096, 1u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *data = malloc(sizes[i]);
        assert_non_null(data);
        fill(data, sizes[i], (unsigned)i);
        struct sluice_element *e = sluice_element_new();
        assert_non_null(e);
        assert_int_equal(sluice_element_set_bytes(e, 0, data, sizes[i]), 0);
        expect_split(e, 1, 0);
        expect_split(e, sizes[i], 0);
        sluice_element_free(e);
        free(data);
    }
}

static void test_largest_component_of_a_tuple(void **state)
{
    (void)state;
    /* (label int64, image bytes, weights float32[100]): the image is the largest. */
    struct sluice_element *e = sluice_element_new();
    assert_non_null(e);
    assert_int_equal(sluice_element_set_num_components(e, 3), 0);
    assert_int_equal(sluice_element_set_int64(e, 0, 3), 0);
    uint8_t img[5000];
    fill(img, sizeof img, 9);
    assert_int_equal(sluice_element_set_bytes(e, 1, img, sizeof img), 0);
    float w[100];
    for (int i = 0; i < 100; i++)
        w[i] = (float)i / 4;
    int64_t shape[1] = {100};
    assert_int_equal(sluice_element_set_tensor(e, 2, SLUICE_FLOAT32, 1, shape, w, sizeof w), 0);
    expect_split(e, 1000, 1);
    /* A fixed-width tensor that is the largest, last in the tuple. */
    float big[3000];
    for (int i = 0; i < 3000; i++)
        big[i] = (float)i;
    shape[0] = 3000;
    assert_int_equal(sluice_element_set_tensor(e, 2, SLUICE_FLOAT32, 1, shape, big, sizeof big), 0);
    expect_split(e, 1000, 2);
    /* And first. */
    int64_t shape2[2] = {10, 300};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_FLOAT32, 2, shape2, big, sizeof big),
                     0);
    shape[0] = 100;
    assert_int_equal(sluice_element_set_tensor(e, 2, SLUICE_FLOAT32, 1, shape, w, sizeof w), 0);
    expect_split(e, 1000, 0);
    sluice_element_free(e);
}

static void test_bytes_tensor_of_strings(void **state)
{
    (void)state;
    /* A rank-1 bytes tensor: the lengths stay in the record, the strings go out. */
    struct sluice_element *e = sluice_element_new();
    assert_non_null(e);
    assert_int_equal(pipe_elem_resize(e, 1), 0);
    struct pipe_tensor *t = &e->t[0];
    assert_int_equal(pipe_tensor_set_bytes(t, NULL, 0), 0);
    assert_int_equal(pipe_tensor_reserve(t, 3000, 3), 0);
    t->rank = 1;
    t->shape[0] = 3;
    t->offs[0] = 0;
    t->offs[1] = 1000;
    t->offs[2] = 1000;
    t->offs[3] = 3000;
    fill(t->data, 3000, 5);
    t->len = 3000;
    expect_split(e, 100, 0);
    sluice_element_free(e);
}

static void test_nothing_large_enough(void **state)
{
    (void)state;
    struct sluice_element *e = sluice_element_new();
    assert_non_null(e);
    uint8_t data[100];
    fill(data, sizeof data, 1);
    assert_int_equal(sluice_element_set_bytes(e, 0, data, sizeof data), 0);
    assert_false(codec_can_split(e, 101));
    struct pipe_buf out = {0};
    struct codec_split split = {7, 7, 7};
    assert_int_equal(codec_append_split(&out, e, 101, &split), 0);
    assert_int_equal(out.len, 0);
    assert_int_equal(split.comp, 7);
    /* An empty bytes value is never worth splitting off, whatever the threshold. */
    assert_int_equal(sluice_element_set_bytes(e, 0, data, 0), 0);
    assert_false(codec_can_split(e, 1));
    assert_false(codec_can_split(e, 0));
    assert_int_equal(codec_append_split(&out, e, 0, &split), 0);
    assert_int_equal(out.len, 0);
    sluice_element_free(e);
    pipe_buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_scalar),
        cmocka_unit_test(test_largest_component_of_a_tuple),
        cmocka_unit_test(test_bytes_tensor_of_strings),
        cmocka_unit_test(test_nothing_large_enough),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
