/* The text output format: exact text for every dtype, escapes, shortest float forms, nested
 * ranks, empty dimensions and tuples, the buffer contract, and a sweep showing that float text
 * reads back exactly with the fewest significant digits. Elements are built by filling the
 * struct fields directly, so these tests depend on the layout alone. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/element.h"
#include "pipeline/format.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor over caller-owned storage. */
static struct pipe_tensor fixed(enum sluice_dtype d, int rank, const int64_t *shape,
                                const void *data, size_t len)
{
    struct pipe_tensor t = {0};
    t.dtype = d;
    t.rank = rank;
    for (int i = 0; i < rank; i++)
        t.shape[i] = shape[i];
    t.data = (uint8_t *)data;
    t.len = t.cap = len;
    return t;
}

/* A bytes tensor of n strings (given with their lengths) packed into storage. */
struct strings {
    uint8_t data[256];
    uint64_t offs[17];
};

static struct pipe_tensor strings(struct strings *st, int rank, const int64_t *shape,
                                  const char *const *s, const size_t *lens, size_t n)
{
    struct pipe_tensor t = {0};
    t.dtype = SLUICE_BYTES;
    t.rank = rank;
    for (int i = 0; i < rank; i++)
        t.shape[i] = shape[i];
    size_t o = 0;
    st->offs[0] = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(st->data + o, s[i], lens[i]);
        o += lens[i];
        st->offs[i + 1] = o;
    }
    t.data = st->data;
    t.len = o;
    t.cap = sizeof(st->data);
    t.offs = st->offs;
    t.offs_cap = n + 1;
    return t;
}

static void expect_tensors(struct pipe_tensor *t, size_t n, const char *want)
{
    struct sluice_element e = {n, n, t};
    struct pipe_buf b = {0};
    assert_int_equal(pipe_format_elem(&b, &e), 0);
    assert_string_equal(b.p, want);
    assert_int_equal(b.len, strlen(want));
    /* Appending after earlier text keeps that text. */
    b.len = 0;
    memcpy(b.p, "> ", 3);
    b.len = 2;
    assert_int_equal(pipe_format_elem(&b, &e), 0);
    assert_int_equal(b.len, strlen(want) + 2);
    assert_memory_equal(b.p, "> ", 2);
    assert_string_equal(b.p + 2, want);
    pipe_buf_release(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
}

static void expect_one(struct pipe_tensor t, const char *want)
{
    expect_tensors(&t, 1, want);
}

static void expect_scalar(enum sluice_dtype d, const void *v, size_t size, const char *want)
{
    expect_one(fixed(d, 0, NULL, v, size), want);
}

static void test_integers(void **state)
{
    (void)state;
    int8_t i8[] = {INT8_MIN, INT8_MAX, 0, -1};
    int16_t i16[] = {INT16_MIN, INT16_MAX};
    int32_t i32[] = {INT32_MIN, INT32_MAX};
    int64_t i64[] = {INT64_MIN, INT64_MAX, 42};
    uint8_t u8[] = {0, UINT8_MAX};
    uint16_t u16[] = {UINT16_MAX};
    uint32_t u32[] = {UINT32_MAX};
    uint64_t u64[] = {UINT64_MAX, 7};
    expect_scalar(SLUICE_INT8, &i8[0], 1, "-128");
    expect_scalar(SLUICE_INT8, &i8[1], 1, "127");
    expect_scalar(SLUICE_INT8, &i8[3], 1, "-1");
    expect_scalar(SLUICE_INT16, &i16[0], 2, "-32768");
    expect_scalar(SLUICE_INT16, &i16[1], 2, "32767");
    expect_scalar(SLUICE_INT32, &i32[0], 4, "-2147483648");
    expect_scalar(SLUICE_INT32, &i32[1], 4, "2147483647");
    expect_scalar(SLUICE_INT64, &i64[0], 8, "-9223372036854775808");
    expect_scalar(SLUICE_INT64, &i64[1], 8, "9223372036854775807");
    expect_scalar(SLUICE_INT64, &i64[2], 8, "42");
    expect_scalar(SLUICE_UINT8, &u8[1], 1, "255");
    expect_scalar(SLUICE_UINT8, &u8[0], 1, "0");
    expect_scalar(SLUICE_UINT16, &u16[0], 2, "65535");
    expect_scalar(SLUICE_UINT32, &u32[0], 4, "4294967295");
    expect_scalar(SLUICE_UINT64, &u64[0], 8, "18446744073709551615");

    int64_t shape[] = {4};
    expect_one(fixed(SLUICE_INT8, 1, shape, i8, sizeof(i8)), "[-128, 127, 0, -1]");
    shape[0] = 2;
    expect_one(fixed(SLUICE_UINT64, 1, shape, u64, sizeof(u64)), "[18446744073709551615, 7]");
}

static void test_bools(void **state)
{
    (void)state;
    uint8_t v[] = {1, 0, 1, 2};
    expect_scalar(SLUICE_BOOL, &v[0], 1, "true");
    expect_scalar(SLUICE_BOOL, &v[1], 1, "false");
    int64_t shape[] = {2, 2};
    expect_one(fixed(SLUICE_BOOL, 2, shape, v, 4), "[[true, false], [true, true]]");
}

static void expect_f64(double v, const char *want)
{
    expect_scalar(SLUICE_FLOAT64, &v, 8, want);
}

static void expect_f32(float v, const char *want)
{
    expect_scalar(SLUICE_FLOAT32, &v, 4, want);
}

static void test_floats(void **state)
{
    (void)state;
    expect_f64(0.1, "0.1");
    expect_f64(1e100, "1e+100");
    expect_f64(-0.0, "-0");
    expect_f64(0.0, "0");
    expect_f64(1.0, "1");
    expect_f64(-2.5, "-2.5");
    expect_f64(100.0, "100");
    expect_f64(123456.0, "123456");
    expect_f64(1e16, "10000000000000000");
    expect_f64(1e17, "1e+17");
    expect_f64(123456789012345680.0, "1.2345678901234568e+17");
    expect_f64(0.0001, "0.0001");
    expect_f64(0.00001, "1e-05");
    expect_f64(0.1 + 0.2, "0.30000000000000004");
    expect_f64(1.0 / 3.0, "0.3333333333333333");
    expect_f64(DBL_MAX, "1.7976931348623157e+308");
    expect_f64(DBL_MIN, "2.2250738585072014e-308");
    expect_f64(5e-324, "5e-324");
    expect_f64(INFINITY, "inf");
    expect_f64(-INFINITY, "-inf");
    expect_f64(NAN, "nan");

    expect_f32(0.1f, "0.1");
    expect_f32(-0.0f, "-0");
    expect_f32(1.0f, "1");
    expect_f32(1.0f / 3.0f, "0.33333334");
    expect_f32(16777216.0f, "16777216");
    expect_f32(1e8f, "100000000");
    expect_f32(1e10f, "1e+10");
    expect_f32(FLT_MAX, "3.4028235e+38");
    expect_f32(FLT_MIN, "1.1754944e-38");
    expect_f32(1e-45f, "1e-45");
    expect_f32(3.14159274f, "3.1415927");
    expect_f32(INFINITY, "inf");
    expect_f32(NAN, "nan");

    double d[] = {0.5, 1.25, -3.0, 1e-7};
    int64_t shape[] = {2, 2};
    expect_one(fixed(SLUICE_FLOAT64, 2, shape, d, sizeof(d)), "[[0.5, 1.25], [-3, 1e-07]]");
}

/* Significant digits of a "%g"-style text: mantissa digits without leading zeros, and without
 * trailing zeros when the text is a plain integer. */
static int significant_digits(const char *s)
{
    char m[64];
    size_t n = 0;
    bool point = false;
    for (; *s && *s != 'e'; s++) {
        if (*s == '.')
            point = true;
        else if (*s >= '0' && *s <= '9')
            m[n++] = *s;
    }
    bool exp = *s == 'e';
    size_t lead = 0;
    while (lead < n && m[lead] == '0')
        lead++;
    if (!point && !exp)
        while (n > lead && m[n - 1] == '0')
            n--;
    return n > lead ? (int)(n - lead) : 1;
}

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* For many bit patterns: the text reads back bit for bit, uses the fewest significant digits
 * any "%.*g" text that reads back would use, and fits PIPE_FLOAT_BUF. */
static void test_float_sweep(void **state)
{
    (void)state;
    uint64_t seed = 0x9e3779b97f4a7c15u;
    char buf[PIPE_FLOAT_BUF], tmp[64];
    for (int i = 0; i < 20000; i++) {
        uint64_t bits = next_random(&seed);
        double v;
        memcpy(&v, &bits, 8);
        if (i % 4 == 0) /* also short decimals, whose shortest form is short */
            v = (double)(int64_t)(bits % 2000001 - 1000000) / 1000.0;
        if (!isfinite(v))
            continue;
        size_t n = pipe_format_f64(v, buf);
        assert_int_equal(n, strlen(buf));
        double back = strtod(buf, NULL);
        assert_memory_equal(&back, &v, 8);
        int p = 1;
        for (; p < 17; p++) {
            snprintf(tmp, sizeof(tmp), "%.*g", p, v);
            if (strtod(tmp, NULL) == v)
                break;
        }
        if (significant_digits(buf) != p)
            fail_msg("%.17g printed as %s, shortest has %d digits", v, buf, p);

        uint32_t fbits = (uint32_t)next_random(&seed);
        float f;
        memcpy(&f, &fbits, 4);
        if (!isfinite(f))
            continue;
        n = pipe_format_f32(f, buf);
        float fback = strtof(buf, NULL);
        assert_memory_equal(&fback, &f, 4);
        for (p = 1; p < 9; p++) {
            snprintf(tmp, sizeof(tmp), "%.*g", p, (double)f);
            if (strtof(tmp, NULL) == f)
                break;
        }
        if (significant_digits(buf) != p)
            fail_msg("%.9g printed as %s, shortest has %d digits", (double)f, buf, p);
    }
}

static void test_bytes(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t len;
        const char *want;
    } cases[] = {
        {"hello", 5, "hello"},
        {"", 0, ""},
        {"a\\b", 3, "a\\\\b"},
        {"\n\t", 2, "\\n\\t"},
        {"\r", 1, "\\x0d"},
        {"\x00\x1f\x7f\x80\xff", 5, "\\x00\\x1f\\x7f\\x80\\xff"},
        {" ~", 2, " ~"},
        {"\"quoted\", [x]", 13, "\"quoted\", [x]"},
        {"caf\xc3\xa9", 5, "caf\\xc3\\xa9"},
    };
    struct strings st;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_one(strings(&st, 0, NULL, &cases[i].s, &cases[i].len, 1), cases[i].want);

    const char *s[] = {"a", "", "b\n", "cd"};
    size_t lens[] = {1, 0, 2, 2};
    int64_t shape[] = {4};
    expect_one(strings(&st, 1, shape, s, lens, 4), "[a, , b\\n, cd]");
    int64_t shape2[] = {2, 2};
    expect_one(strings(&st, 2, shape2, s, lens, 4), "[[a, ], [b\\n, cd]]");
}

static void test_shapes(void **state)
{
    (void)state;
    int64_t v[12];
    for (int i = 0; i < 12; i++)
        v[i] = i + 1;
    int64_t s1[] = {3};
    expect_one(fixed(SLUICE_INT64, 1, s1, v, 24), "[1, 2, 3]");
    int64_t s11[] = {1};
    expect_one(fixed(SLUICE_INT64, 1, s11, v, 8), "[1]");
    int64_t s2[] = {2, 3};
    expect_one(fixed(SLUICE_INT64, 2, s2, v, 48), "[[1, 2, 3], [4, 5, 6]]");
    int64_t s3[] = {2, 1, 2};
    expect_one(fixed(SLUICE_INT64, 3, s3, v, 32), "[[[1, 2]], [[3, 4]]]");
    int64_t s3b[] = {2, 3, 2};
    expect_one(fixed(SLUICE_INT64, 3, s3b, v, 96),
               "[[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 10], [11, 12]]]");
    int64_t s8[] = {1, 1, 1, 1, 1, 1, 1, 1};
    expect_one(fixed(SLUICE_INT64, 8, s8, v, 8), "[[[[[[[[1]]]]]]]]");

    /* Empty dimensions print as []; no data is needed or read. */
    int64_t e0[] = {0};
    expect_one(fixed(SLUICE_INT64, 1, e0, NULL, 0), "[]");
    int64_t e20[] = {2, 0};
    expect_one(fixed(SLUICE_INT64, 2, e20, NULL, 0), "[[], []]");
    int64_t e03[] = {0, 3};
    expect_one(fixed(SLUICE_FLOAT32, 2, e03, NULL, 0), "[]");
    struct strings st;
    expect_one(strings(&st, 1, e0, NULL, NULL, 0), "[]");
}

static void test_tuples(void **state)
{
    (void)state;
    int64_t one = 1;
    double f[] = {1.5, 2.0};
    uint8_t yes = 1;
    struct strings st;
    const char *x = "x\ty";
    size_t xlen = 3;
    int64_t s2[] = {2};
    struct pipe_tensor t[3];
    t[0] = fixed(SLUICE_INT64, 0, NULL, &one, 8);
    t[1] = strings(&st, 0, NULL, &x, &xlen, 1);
    expect_tensors(t, 2, "(1, x\\ty)");
    t[0] = fixed(SLUICE_FLOAT64, 1, s2, f, 16);
    t[1] = fixed(SLUICE_BOOL, 0, NULL, &yes, 1);
    t[2] = fixed(SLUICE_INT64, 0, NULL, &one, 8);
    expect_tensors(t, 3, "([1.5, 2], true, 1)");
}

/* A tensor whose buffers do not hold what its shape promises is refused, leaving the buffer's
 * text as it was. */
static void test_inconsistent(void **state)
{
    (void)state;
    int64_t v[2] = {1, 2};
    int64_t s3[] = {3};
    int64_t neg[] = {-1};
    struct strings st, st2;
    const char *s[] = {"ab", "c"};
    size_t lens[] = {2, 1};
    int64_t s2[] = {2};
    struct pipe_tensor bad[6];
    bad[0] = fixed(SLUICE_INT64, 1, s3, v, 16);  /* 3 values, room for 2 */
    bad[1] = fixed(SLUICE_INT64, 1, neg, v, 16); /* negative dimension */
    bad[2] = fixed(SLUICE_INT64, 0, NULL, v, 16);
    bad[2].rank = SLUICE_MAX_RANK + 1;
    bad[3] = strings(&st, 1, s2, s, lens, 2);
    bad[3].offs[2] = 99; /* string past the data */
    bad[4] = strings(&st2, 1, s2, s, lens, 2);
    bad[4].offs_cap = 2;                                  /* too few offsets */
    bad[5] = fixed((enum sluice_dtype)42, 0, NULL, v, 8); /* unknown dtype */
    for (size_t i = 0; i < 6; i++) {
        struct pipe_buf b = {0};
        int64_t ok = 5;
        struct pipe_tensor t[2] = {fixed(SLUICE_INT64, 0, NULL, &ok, 8), bad[i]};
        struct sluice_element good = {1, 1, t};
        assert_int_equal(pipe_format_elem(&b, &good), 0);
        struct sluice_element e = {2, 2, t};
        assert_int_equal(pipe_format_elem(&b, &e), SLUICE_ERR_INVALID);
        assert_int_equal(b.len, 1);
        assert_string_equal(b.p, "5");
        pipe_buf_release(&b);
    }
}

/* Many elements into one buffer grow it geometrically and keep every byte. */
static void test_buffer_growth(void **state)
{
    (void)state;
    struct pipe_buf b = {0};
    int64_t v = 1234567;
    struct pipe_tensor t = fixed(SLUICE_INT64, 0, NULL, &v, 8);
    struct sluice_element e = {1, 1, &t};
    for (int i = 0; i < 10000; i++)
        assert_int_equal(pipe_format_elem(&b, &e), 0);
    assert_int_equal(b.len, 70000);
    assert_true(b.cap > b.len);
    assert_int_equal(b.p[b.len], '\0');
    assert_memory_equal(b.p + 69993, "1234567", 7);
    pipe_buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers),      cmocka_unit_test(test_bools),
        cmocka_unit_test(test_floats),        cmocka_unit_test(test_float_sweep),
        cmocka_unit_test(test_bytes),         cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_tuples),        cmocka_unit_test(test_inconsistent),
        cmocka_unit_test(test_buffer_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
