/* The element model: public accessors and mutators, swap, copy, equality, and buffer reuse. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/element.h"

#include <stdlib.h>
#include <string.h>

static void test_dtypes(void **state)
{
    static const struct {
        enum sluice_dtype dtype;
        const char *name;
        size_t size;
    } table[] = {
        {SLUICE_BOOL, "bool", 1},       {SLUICE_INT8, "int8", 1},
        {SLUICE_INT16, "int16", 2},     {SLUICE_INT32, "int32", 4},
        {SLUICE_INT64, "int64", 8},     {SLUICE_UINT8, "uint8", 1},
        {SLUICE_UINT16, "uint16", 2},   {SLUICE_UINT32, "uint32", 4},
        {SLUICE_UINT64, "uint64", 8},   {SLUICE_FLOAT32, "float32", 4},
        {SLUICE_FLOAT64, "float64", 8}, {SLUICE_BYTES, "bytes", 0},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        assert_string_equal(sluice_dtype_name(table[i].dtype), table[i].name);
        assert_int_equal(sluice_dtype_size(table[i].dtype), table[i].size);
    }
    assert_string_equal(sluice_dtype_name((enum sluice_dtype)99), "unknown");
    assert_int_equal(sluice_dtype_size((enum sluice_dtype)99), 0);
}

static void test_new_and_components(void **state)
{
    struct sluice_element *e = sluice_element_new();
    assert_non_null(e);
    assert_int_equal(sluice_element_num_components(e), 0);
    assert_int_equal(sluice_element_set_num_components(e, 0), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_num_components(e, 65), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_num_components(e, 3), 0);
    assert_int_equal(sluice_element_num_components(e), 3);
    for (size_t i = 0; i < 3; i++) {
        /* New components are int64 zeros. */
        assert_int_equal(sluice_element_dtype(e, i), SLUICE_INT64);
        assert_int_equal(sluice_element_rank(e, i), 0);
        assert_int_equal(sluice_element_num_values(e, i), 1);
        size_t n = 0;
        const int64_t *v = sluice_element_data(e, i, &n);
        assert_int_equal(n, 8);
        assert_int_equal(*v, 0);
    }
    assert_int_equal(sluice_element_set_num_components(e, 64), 0);
    assert_int_equal(sluice_element_num_components(e), 64);
    sluice_element_free(e);
    sluice_element_free(NULL);
}

static void test_scalars(void **state)
{
    struct sluice_element *e = sluice_element_new();
    assert_int_equal(sluice_element_set_num_components(e, 3), 0);
    assert_int_equal(sluice_element_set_int64(e, 0, -42), 0);
    assert_int_equal(sluice_element_set_float64(e, 1, 2.5), 0);
    assert_int_equal(sluice_element_set_bytes(e, 2, "a\0b", 3), 0);
    assert_int_equal(sluice_element_set_int64(e, 64, 1), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_bytes(e, 64, "x", 1), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_bytes(e, 0, NULL, 1), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_num_components(e), 3);

    size_t n;
    assert_int_equal(*(const int64_t *)sluice_element_data(e, 0, &n), -42);
    assert_int_equal(n, 8);
    assert_true(*(const double *)sluice_element_data(e, 1, &n) == 2.5);
    assert_int_equal(sluice_element_dtype(e, 1), SLUICE_FLOAT64);
    assert_int_equal(sluice_element_dtype(e, 2), SLUICE_BYTES);
    assert_int_equal(sluice_element_rank(e, 2), 0);
    assert_int_equal(sluice_element_num_values(e, 2), 1);
    const void *d = sluice_element_data(e, 2, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(d, "a\0b", 3);
    const void *s;
    size_t len;
    assert_int_equal(sluice_element_bytes_at(e, 2, 0, &s, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "a\0b", 3);
    assert_int_equal(sluice_element_bytes_at(e, 2, 1, &s, &len), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_bytes_at(e, 0, 0, &s, &len), SLUICE_ERR_TYPE);

    /* An empty string still gives a usable pointer. */
    assert_int_equal(sluice_element_set_bytes(e, 2, NULL, 0), 0);
    assert_int_equal(sluice_element_bytes_at(e, 2, 0, &s, &len), 0);
    assert_int_equal(len, 0);
    assert_non_null(s);
    assert_non_null(sluice_element_data(e, 2, &n));
    assert_int_equal(n, 0);
    sluice_element_free(e);
}

/* Setting a component past the end grows the element; the skipped ones are int64 zeros. */
static void test_set_grows(void **state)
{
    struct sluice_element *e = sluice_element_new();
    assert_int_equal(sluice_element_set_int64(e, 0, 5), 0);
    assert_int_equal(sluice_element_num_components(e), 1);
    assert_int_equal(sluice_element_set_bytes(e, 2, "ab", 2), 0);
    assert_int_equal(sluice_element_num_components(e), 3);
    size_t n;
    assert_int_equal(*(const int64_t *)sluice_element_data(e, 0, &n), 5);
    assert_int_equal(sluice_element_dtype(e, 1), SLUICE_INT64);
    assert_int_equal(*(const int64_t *)sluice_element_data(e, 1, &n), 0);
    assert_int_equal(sluice_element_dtype(e, 2), SLUICE_BYTES);
    assert_int_equal(sluice_element_set_float64(e, 63, 1.0), 0);
    assert_int_equal(sluice_element_num_components(e), 64);
    const float f = 1.0f;
    assert_int_equal(sluice_element_set_num_components(e, 1), 0);
    assert_int_equal(sluice_element_set_tensor(e, 1, SLUICE_FLOAT32, 0, NULL, &f, 4), 0);
    assert_int_equal(sluice_element_num_components(e), 2);
    assert_int_equal(sluice_element_dtype(e, 1), SLUICE_FLOAT32);
    sluice_element_free(e);
}

static void test_set_tensor(void **state)
{
    struct sluice_element *e = sluice_element_new();
    assert_int_equal(sluice_element_set_num_components(e, 1), 0);
    const int32_t v[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape[2] = {2, 3};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_INT32, 2, shape, v, sizeof(v)), 0);
    assert_int_equal(sluice_element_dtype(e, 0), SLUICE_INT32);
    assert_int_equal(sluice_element_rank(e, 0), 2);
    assert_int_equal(sluice_element_shape(e, 0)[0], 2);
    assert_int_equal(sluice_element_shape(e, 0)[1], 3);
    assert_int_equal(sluice_element_num_values(e, 0), 6);
    size_t n;
    assert_memory_equal(sluice_element_data(e, 0, &n), v, sizeof(v));
    assert_int_equal(n, sizeof(v));

    /* Rejected: wrong byte count, bytes dtype, bad rank, negative dimension, bad index. */
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_INT32, 2, shape, v, 20),
                     SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_BYTES, 2, shape, v, sizeof(v)),
                     SLUICE_ERR_TYPE);
    int64_t big[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_INT8, 9, big, v, 1),
                     SLUICE_ERR_INVALID);
    const int64_t neg[1] = {-1};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_INT8, 1, neg, v, 0),
                     SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_tensor(e, 64, SLUICE_INT32, 2, shape, v, sizeof(v)),
                     SLUICE_ERR_INVALID);
    /* A rejected call leaves the element as it was. */
    assert_int_equal(sluice_element_num_components(e), 1);
    assert_int_equal(sluice_element_dtype(e, 0), SLUICE_INT32);
    assert_int_equal(sluice_element_num_values(e, 0), 6);

    /* Empty tensors and rank 8. */
    const int64_t zero[1] = {0};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_FLOAT32, 1, zero, NULL, 0), 0);
    assert_int_equal(sluice_element_num_values(e, 0), 0);
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_UINT8, 8, big, v, 1), 0);
    assert_int_equal(sluice_element_rank(e, 0), 8);
    assert_int_equal(sluice_element_num_values(e, 0), 1);
    sluice_element_free(e);
}

static void test_set_bytes_tensor(void **state)
{
    struct sluice_element *e = sluice_element_new();
    const char *vals[4] = {"ab", "", "cde", "f"};
    const void *ptrs[4] = {vals[0], vals[1], vals[2], vals[3]};
    const size_t lens[4] = {2, 0, 3, 1};
    const int64_t shape[2] = {2, 2};
    assert_int_equal(sluice_element_set_bytes_tensor(e, 1, 2, shape, ptrs, lens), 0);
    assert_int_equal(sluice_element_num_components(e), 2);
    assert_int_equal(sluice_element_dtype(e, 1), SLUICE_BYTES);
    assert_int_equal(sluice_element_rank(e, 1), 2);
    assert_int_equal(sluice_element_num_values(e, 1), 4);
    size_t n;
    assert_memory_equal(sluice_element_data(e, 1, &n), "abcdef", 6);
    assert_int_equal(n, 6);
    for (uint64_t k = 0; k < 4; k++) {
        const void *p;
        size_t len;
        assert_int_equal(sluice_element_bytes_at(e, 1, k, &p, &len), 0);
        assert_int_equal(len, lens[k]);
        assert_memory_equal(p, vals[k], len);
    }
    /* Rank 0 is a scalar, as sluice_element_set_bytes makes it. */
    struct sluice_element *s = sluice_element_new();
    assert_int_equal(sluice_element_set_bytes(s, 0, "cde", 3), 0);
    assert_int_equal(sluice_element_set_bytes_tensor(e, 0, 0, NULL, &ptrs[2], &lens[2]), 0);
    assert_int_equal(sluice_element_set_num_components(e, 1), 0);
    assert_true(pipe_elem_equal(e, s));
    sluice_element_free(s);
    /* An empty tensor, then the refusals: bad rank, negative dimension, missing values. */
    const int64_t zero[1] = {0};
    assert_int_equal(sluice_element_set_bytes_tensor(e, 0, 1, zero, NULL, NULL), 0);
    assert_int_equal(sluice_element_num_values(e, 0), 0);
    const int64_t neg[1] = {-1}, one[1] = {1};
    int64_t big[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(sluice_element_set_bytes_tensor(e, 0, 9, big, ptrs, lens), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_bytes_tensor(e, 0, 1, neg, ptrs, lens), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_bytes_tensor(e, 0, 1, one, NULL, lens), SLUICE_ERR_INVALID);
    const void *null_value[1] = {NULL};
    assert_int_equal(sluice_element_set_bytes_tensor(e, 0, 1, one, null_value, &lens[0]),
                     SLUICE_ERR_INVALID);
    assert_int_equal(sluice_element_set_bytes_tensor(e, 64, 1, one, ptrs, lens),
                     SLUICE_ERR_INVALID);
    sluice_element_free(e);
}

static void test_no_realloc_on_reuse(void **state)
{
    struct sluice_element *e = sluice_element_new();
    assert_int_equal(sluice_element_set_num_components(e, 2), 0);
    const int64_t shape[1] = {100};
    double v[100] = {0};
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_FLOAT64, 1, shape, v, sizeof(v)), 0);
    assert_int_equal(sluice_element_set_bytes(e, 1, "hello world", 11), 0);
    const uint8_t *d0 = e->t[0].data, *d1 = e->t[1].data;
    const uint64_t *o1 = e->t[1].offs;
    for (int round = 0; round < 100; round++) {
        v[0] = round;
        assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_FLOAT64, 1, shape, v, sizeof(v)),
                         0);
        assert_int_equal(sluice_element_set_bytes(e, 1, "hello world", 2 + (size_t)(round % 9)), 0);
        assert_ptr_equal(e->t[0].data, d0);
        assert_ptr_equal(e->t[1].data, d1);
        assert_ptr_equal(e->t[1].offs, o1);
    }
    /* A smaller value of another dtype reuses the buffer too. */
    assert_int_equal(sluice_element_set_int64(e, 0, 5), 0);
    assert_ptr_equal(e->t[0].data, d0);

    /* Shrinking and growing the component count keeps the spare component's buffers, and the
     * component comes back as an int64 zero. */
    assert_int_equal(sluice_element_set_num_components(e, 1), 0);
    assert_int_equal(sluice_element_set_num_components(e, 2), 0);
    assert_ptr_equal(e->t[1].data, d1);
    assert_int_equal(sluice_element_dtype(e, 1), SLUICE_INT64);
    size_t n;
    assert_int_equal(*(const int64_t *)sluice_element_data(e, 1, &n), 0);

    /* The engine's scalar setter allocates once only. */
    struct sluice_element f;
    pipe_elem_init(&f);
    assert_int_equal(pipe_elem_resize(&f, 1), 0);
    const uint8_t *p = f.t[0].data;
    for (int64_t i = 0; i < 1000; i++) {
        assert_int_equal(pipe_tensor_set_i64(&f.t[0], i), 0);
        assert_ptr_equal(f.t[0].data, p);
    }
    pipe_elem_release(&f);
    sluice_element_free(e);
}

/* Builds (int64 x, bytes [s0, s1], float32 [2] {a, b}). */
static void build(struct sluice_element *e, int64_t x, const char *s0, const char *s1, float a,
                  float b)
{
    assert_int_equal(pipe_elem_resize(e, 3), 0);
    assert_int_equal(pipe_tensor_set_i64(&e->t[0], x), 0);
    struct pipe_tensor *t = &e->t[1];
    size_t l0 = strlen(s0), l1 = strlen(s1);
    assert_int_equal(pipe_tensor_set_bytes(t, NULL, 0), 0);
    assert_int_equal(pipe_tensor_reserve(t, l0 + l1, 2), 0);
    t->rank = 1;
    t->shape[0] = 2;
    memcpy(t->data, s0, l0);
    memcpy(t->data + l0, s1, l1);
    t->len = l0 + l1;
    t->offs[0] = 0;
    t->offs[1] = l0;
    t->offs[2] = l0 + l1;
    const float v[2] = {a, b};
    const int64_t shape[1] = {2};
    assert_int_equal(sluice_element_set_tensor(e, 2, SLUICE_FLOAT32, 1, shape, v, sizeof(v)), 0);
}

static void test_copy_equal_swap(void **state)
{
    struct sluice_element a, b, c;
    pipe_elem_init(&a);
    pipe_elem_init(&b);
    pipe_elem_init(&c);
    build(&a, 7, "ab", "c", 1.0f, 2.0f);
    assert_int_equal(pipe_elem_copy(&b, &a), 0);
    assert_true(pipe_elem_equal(&a, &b));
    assert_ptr_not_equal(a.t[1].data, b.t[1].data);
    const void *s;
    size_t len;
    assert_int_equal(sluice_element_bytes_at(&b, 1, 1, &s, &len), 0);
    assert_int_equal(len, 1);
    assert_memory_equal(s, "c", 1);

    /* Same bytes, split differently: not equal. */
    build(&c, 7, "a", "bc", 1.0f, 2.0f);
    assert_false(pipe_elem_equal(&a, &c));
    build(&c, 8, "ab", "c", 1.0f, 2.0f);
    assert_false(pipe_elem_equal(&a, &c));
    build(&c, 7, "ab", "c", 1.0f, 3.0f);
    assert_false(pipe_elem_equal(&a, &c));
    build(&c, 7, "ab", "c", 1.0f, 2.0f);
    assert_true(pipe_elem_equal(&a, &c));
    assert_int_equal(sluice_element_set_float64(&c, 0, 7.0), 0);
    assert_false(pipe_elem_equal(&a, &c));
    assert_int_equal(pipe_elem_resize(&c, 2), 0);
    assert_false(pipe_elem_equal(&a, &c));

    /* Copy reuses the destination's buffers and is deep. */
    const uint8_t *bd = b.t[1].data;
    build(&a, 9, "xy", "z", 5.0f, 6.0f);
    assert_int_equal(pipe_elem_copy(&b, &a), 0);
    assert_ptr_equal(b.t[1].data, bd);
    assert_true(pipe_elem_equal(&a, &b));
    a.t[1].data[0] = 'Q';
    assert_false(pipe_elem_equal(&a, &b));
    assert_int_equal(pipe_elem_copy(&a, &a), 0);

    /* Swap exchanges contents and buffers. */
    const uint8_t *ad = a.t[1].data;
    build(&c, 1, "", "", 0.0f, 0.0f);
    struct sluice_element a_copy, c_copy;
    pipe_elem_init(&a_copy);
    pipe_elem_init(&c_copy);
    assert_int_equal(pipe_elem_copy(&a_copy, &a), 0);
    assert_int_equal(pipe_elem_copy(&c_copy, &c), 0);
    pipe_elem_swap(&a, &c);
    assert_true(pipe_elem_equal(&c, &a_copy));
    assert_true(pipe_elem_equal(&a, &c_copy));
    assert_ptr_equal(c.t[1].data, ad);

    /* An empty element equals another and copies to one. */
    struct sluice_element e0, e1;
    pipe_elem_init(&e0);
    pipe_elem_init(&e1);
    assert_true(pipe_elem_equal(&e0, &e1));
    assert_int_equal(pipe_elem_copy(&a_copy, &e0), 0);
    assert_int_equal(a_copy.n, 0);
    assert_true(pipe_elem_equal(&a_copy, &e0));

    pipe_elem_release(&a);
    pipe_elem_release(&b);
    pipe_elem_release(&c);
    pipe_elem_release(&a_copy);
    pipe_elem_release(&c_copy);
}

static void test_tensor_helpers(void **state)
{
    struct pipe_tensor t;
    memset(&t, 0, sizeof(t));
    int16_t v = -3;
    assert_int_equal(pipe_tensor_set_scalar(&t, SLUICE_INT16, &v), 0);
    assert_int_equal(t.dtype, SLUICE_INT16);
    assert_int_equal(t.len, 2);
    assert_int_equal(pipe_tensor_num_values(&t), 1);
    assert_int_equal(pipe_tensor_set_scalar(&t, SLUICE_BYTES, &v), SLUICE_ERR_TYPE);
    /* reserve keeps content up to the old length. */
    assert_int_equal(pipe_tensor_reserve(&t, 1 << 20, 1), 0);
    assert_true(t.cap >= (1 << 20));
    assert_int_equal(*(int16_t *)(void *)t.data, -3);
    t.rank = 3;
    t.shape[0] = 2;
    t.shape[1] = 0;
    t.shape[2] = 5;
    assert_int_equal(pipe_tensor_num_values(&t), 0);
    assert_int_equal(pipe_tensor_set_bytes(&t, "xyz", 3), 0);
    assert_int_equal(t.rank, 0);
    assert_int_equal(t.offs[1], 3);
    free(t.data);
    free(t.offs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),           cmocka_unit_test(test_new_and_components),
        cmocka_unit_test(test_scalars),          cmocka_unit_test(test_set_tensor),
        cmocka_unit_test(test_set_grows),        cmocka_unit_test(test_no_realloc_on_reuse),
        cmocka_unit_test(test_copy_equal_swap),  cmocka_unit_test(test_tensor_helpers),
        cmocka_unit_test(test_set_bytes_tensor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
