/* CRC32C: published vectors, the extend contract, and agreement between the hardware path, the
 * table path and a bit-at-a-time reference over many lengths and alignments. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"

/* Long enough to cover several blocks of the widest hardware lanes (3 x 1024 bytes). */
#define BIG 20000

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    /* xorshift64*: deterministic, so any failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    rng_state = seed;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng_next() >> 56);
}

/* The definition itself, one bit at a time, sharing nothing with the code under test. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

struct thread_arg {
    uint32_t result;
};

static void *first_use_thread(void *arg)
{
    struct thread_arg *t = arg;
    t->result = crc32c("123456789", 9);
    return NULL;
}

/* Runs first: the tables are built on first use, and several threads racing to use them must
 * all see complete tables. */
static void test_first_use_from_threads(void **state)
{
    enum { NTHREADS = 8 };
    pthread_t th[NTHREADS];
    struct thread_arg args[NTHREADS];

    for (int i = 0; i < NTHREADS; i++) {
        args[i].result = 0;
        assert_int_equal(pthread_create(&th[i], NULL, first_use_thread, &args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].result, 0xE3069283u);
    }
}

static void test_vectors(void **state)
{
    uint8_t zeros[32], ones[32], up[32], down[32];
    memset(zeros, 0, sizeof zeros);
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) {
        up[i] = (uint8_t)i;
        down[i] = (uint8_t)(31 - i);
    }
    /* The last two are the iSCSI vectors of RFC 3720, B.4. */
    const struct {
        const void *data;
        size_t len;
        uint32_t want;
    } cases[] = {
        {"", 0, 0x00000000u},     {"a", 1, 0xC1D04330u},   {"123456789", 9, 0xE3069283u},
        {zeros, 32, 0x8A9136AAu}, {ones, 32, 0x62A8AB43u}, {up, 32, 0x46DD794Eu},
        {down, 32, 0x113FDB5Cu},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(crc32c(cases[i].data, cases[i].len), cases[i].want);
        assert_int_equal(crc32c_extend(0, cases[i].data, cases[i].len), cases[i].want);
        assert_int_equal(crc32c_extend_sw(0, cases[i].data, cases[i].len), cases[i].want);
        assert_int_equal(crc_bitwise(0, cases[i].data, cases[i].len), cases[i].want);
    }
    /* A NULL pointer with no bytes leaves the value unchanged. */
    assert_int_equal(crc32c_extend(0x12345678u, NULL, 0), 0x12345678u);
    assert_int_equal(crc32c_extend_sw(0x12345678u, NULL, 0), 0x12345678u);
}

static void test_extend_splits(void **state)
{
    uint8_t *buf = malloc(BIG);
    assert_non_null(buf);
    fill_random(buf, BIG, 1);
    const uint32_t whole = crc_bitwise(0, buf, BIG);
    assert_int_equal(crc32c(buf, BIG), whole);
    assert_int_equal(crc32c_extend_sw(0, buf, BIG), whole);

    rng_state = 2;
    for (int round = 0; round < 500; round++) {
        size_t a = rng_next() % (BIG + 1);
        size_t b = rng_next() % (BIG + 1);
        if (a > b) {
            size_t t = a;
            a = b;
            b = t;
        }
        uint32_t two = crc32c_extend(crc32c(buf, a), buf + a, BIG - a);
        assert_int_equal(two, whole);
        uint32_t three =
            crc32c_extend(crc32c_extend(crc32c(buf, a), buf + a, b - a), buf + b, BIG - b);
        assert_int_equal(three, whole);
        uint32_t sw = crc32c_extend_sw(crc32c_extend_sw(0, buf, a), buf + a, BIG - a);
        assert_int_equal(sw, whole);
        /* The paths may be mixed: both continue from the same finished value. */
        uint32_t mixed = crc32c_extend_sw(crc32c(buf, a), buf + a, BIG - a);
        assert_int_equal(mixed, whole);
    }
    /* Every split point of a short prefix, where the alignment loops start and stop. */
    const uint32_t prefix = crc_bitwise(0, buf, 100);
    for (size_t a = 0; a <= 100; a++)
        assert_int_equal(crc32c_extend(crc32c(buf, a), buf + a, 100 - a), prefix);
    free(buf);
}

static void check_range(const uint8_t *buf, size_t off, size_t len, uint32_t seed)
{
    uint32_t hw = crc32c_extend(seed, buf + off, len);
    uint32_t sw = crc32c_extend_sw(seed, buf + off, len);
    if (hw != sw)
        fail_msg("paths differ at offset %zu length %zu seed %08x: %08x vs %08x", off, len, seed,
                 hw, sw);
}

static void test_paths_agree(void **state)
{
#if defined(__x86_64__)
    print_message("sse4.2 %s\n", __builtin_cpu_supports("sse4.2") ? "available" : "missing");
#endif
    uint8_t *buf = malloc(BIG + 8);
    assert_non_null(buf);
    fill_random(buf, BIG + 8, 3);

    /* Every length up to past the first two short-lane blocks, at every alignment. */
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len <= 3 * 128 * 2 + 17; len++)
            check_range(buf, off, len, (uint32_t)(off * 0x9E3779B9u));

    /* Lengths around each block boundary of both lane sizes, and random long ones. */
    const size_t edges[] = {3 * 128, 3 * 1024, 2 * 3 * 1024, 3 * 1024 + 3 * 128, BIG - 8};
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (size_t off = 0; off < 8; off++)
            for (size_t len = edges[e] - 9; len <= edges[e] + 9 && len <= BIG; len++)
                check_range(buf, off, len, 0xFFFFFFFFu);
    rng_state = 4;
    for (int round = 0; round < 2000; round++) {
        size_t off = rng_next() % 8;
        size_t len = rng_next() % (BIG + 1);
        check_range(buf, off, len, (uint32_t)rng_next());
    }

    /* The table path against the definition, so agreement above is agreement with CRC32C. */
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len <= 300; len++)
            assert_int_equal(crc32c_extend_sw(7, buf + off, len), crc_bitwise(7, buf + off, len));
    assert_int_equal(crc32c_extend(0, buf + 3, BIG), crc_bitwise(0, buf + 3, BIG));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_use_from_threads),
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_extend_splits),
        cmocka_unit_test(test_paths_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
