/* Base-128 varints (common/varint.h): every length from 1 to 10 bytes round-trips, the one- and
 * two-byte short paths agree with the general loop, and truncated, over-long and overflowing
 * encodings are refused with *pos inside the input. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/varint.h"

#include <string.h>

static void test_round_trip(void **unused)
{
    (void)unused;
    static const uint64_t values[] = {0,
                                      1,
                                      127,
                                      128,
                                      129,
                                      300,
                                      16383,
                                      16384,
                                      (1ull << 21) - 1,
                                      1ull << 21,
                                      (1ull << 28) + 5,
                                      1ull << 35,
                                      (1ull << 49) - 1,
                                      1ull << 56,
                                      (1ull << 63) - 1,
                                      1ull << 63,
                                      UINT64_MAX};
    static const size_t lens[] = {1, 1, 1, 2, 2, 2, 2, 3, 3, 4, 5, 6, 7, 9, 9, 10, 10};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        uint8_t buf[16];
        memset(buf, 0xee, sizeof buf);
        size_t n = varint_put(buf, values[i]);
        assert_int_equal(n, lens[i]);
        assert_int_equal(varint_len(values[i]), n);
        /* Exactly n bytes, and with bytes after it. */
        for (size_t end = n; end <= n + 3; end++) {
            size_t pos = 0;
            uint64_t v = 0;
            assert_true(varint_get(buf, end, &pos, VARINT_MAX_LEN, &v));
            assert_int_equal(pos, n);
            assert_true(v == values[i]);
        }
        /* Truncated anywhere: refused. */
        for (size_t end = 0; end < n; end++) {
            size_t pos = 0;
            uint64_t v = 0;
            assert_false(varint_get(buf, end, &pos, VARINT_MAX_LEN, &v));
            assert_true(pos <= end);
        }
        /* A bound shorter than the encoding: refused. */
        if (n > 1) {
            size_t pos = 0;
            uint64_t v = 0;
            assert_false(varint_get(buf, sizeof buf, &pos, (unsigned)n - 1, &v));
        }
    }
}

static void test_at_an_offset(void **unused)
{
    (void)unused;
    /* Three values back to back, read from where the previous one ended. */
    uint8_t buf[32];
    size_t n = varint_put(buf, 5);
    n += varint_put(buf + n, 200);
    n += varint_put(buf + n, 70000);
    size_t pos = 0;
    uint64_t v;
    assert_true(varint_get(buf, n, &pos, VARINT_MAX_LEN, &v));
    assert_int_equal(v, 5);
    assert_true(varint_get(buf, n, &pos, VARINT_MAX_LEN, &v));
    assert_int_equal(v, 200);
    assert_true(varint_get(buf, n, &pos, VARINT_MAX_LEN, &v));
    assert_int_equal(v, 70000);
    assert_int_equal(pos, n);
    assert_false(varint_get(buf, n, &pos, VARINT_MAX_LEN, &v)); /* nothing left */
}

static void test_malformed(void **unused)
{
    (void)unused;
    size_t pos;
    uint64_t v;
    /* Non-minimal encodings decode as protobuf reads them. */
    static const uint8_t zero2[] = {0x80, 0x00};
    pos = 0;
    assert_true(varint_get(zero2, sizeof zero2, &pos, VARINT_MAX_LEN, &v));
    assert_int_equal(v, 0);
    assert_int_equal(pos, 2);
    static const uint8_t one3[] = {0x81, 0x80, 0x00};
    pos = 0;
    assert_true(varint_get(one3, sizeof one3, &pos, VARINT_MAX_LEN, &v));
    assert_int_equal(v, 1);
    assert_int_equal(pos, 3);
    /* A two-byte value with a bound of one byte. */
    static const uint8_t two[] = {0x96, 0x01};
    pos = 0;
    assert_false(varint_get(two, sizeof two, &pos, 1, &v));
    pos = 0;
    assert_true(varint_get(two, sizeof two, &pos, 2, &v));
    assert_int_equal(v, 150);
    /* Eleven bytes: never ends within ten. */
    uint8_t eleven[11];
    memset(eleven, 0xff, 10);
    eleven[10] = 0x01;
    pos = 0;
    assert_false(varint_get(eleven, sizeof eleven, &pos, VARINT_MAX_LEN, &v));
    /* A tenth byte above 1 overflows 64 bits. */
    uint8_t over[10];
    memset(over, 0xff, 9);
    over[9] = 0x02;
    pos = 0;
    assert_false(varint_get(over, sizeof over, &pos, VARINT_MAX_LEN, &v));
    /* A bound of zero reads nothing. */
    static const uint8_t small[] = {0x05};
    pos = 0;
    assert_false(varint_get(small, sizeof small, &pos, 0, &v));
    assert_int_equal(pos, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_at_an_offset),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
