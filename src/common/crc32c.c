/* CRC32C with two paths that give identical results: slicing-by-8 tables everywhere, and the
 * SSE4.2 crc32 instruction on x86-64 CPUs that have it, chosen once at run time.
 *
 * Both paths work on the bare CRC register; the public functions add the customary inversion on
 * entry and exit, which is what makes crc32c_extend(0, ...) the standard CRC32C and lets a
 * previous result be passed back in to continue over more bytes. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC32C_HAVE_X86 1
#include <nmmintrin.h>
#endif

/* The Castagnoli polynomial, bit-reflected. */
#define CRC32C_POLY 0x82F63B78u

/* The hardware path runs three independent instruction streams over three adjacent lanes, since
 * the crc32 instruction has a latency of three cycles but issues once per cycle, and then joins
 * the three register values. Long inputs use long lanes so that joins are rare; the short lanes
 * let medium inputs gain as well. Both must be multiples of 8. */
#define CRC32C_LONG_LANE 1024
#define CRC32C_SHORT_LANE 128

/* slice[k][b] is the register after byte b followed by k zero bytes, starting from 0. */
static uint32_t slice[8][256];

/* shift_*[k][b] is the register after (b << 8k) is advanced over a lane of zero bytes; the four
 * tables together advance any register over one lane, because the CRC is linear over GF(2). */
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int have_hw;

static inline uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t sw_update(uint32_t c, const uint8_t *p, size_t n)
{
    while (n > 0 && ((uintptr_t)p & 7) != 0) {
        c = (c >> 8) ^ slice[0][(c ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint32_t lo = load_le32(p) ^ c;
        uint32_t hi = load_le32(p + 4);
        c = slice[7][lo & 0xff] ^ slice[6][(lo >> 8) & 0xff] ^ slice[5][(lo >> 16) & 0xff] ^
            slice[4][lo >> 24] ^ slice[3][hi & 0xff] ^ slice[2][(hi >> 8) & 0xff] ^
            slice[1][(hi >> 16) & 0xff] ^ slice[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n > 0) {
        c = (c >> 8) ^ slice[0][(c ^ *p++) & 0xff];
        n--;
    }
    return c;
}

static void build_shift(uint32_t table[4][256], size_t lane)
{
    static const uint8_t zeros[CRC32C_LONG_LANE];
    uint32_t basis[32];

    /* Advancing the register with only bit i set gives column i of the lane's linear map; every
     * table entry is then the sum of the columns of its set bits. */
    for (int i = 0; i < 32; i++)
        basis[i] = sw_update(1u << i, zeros, lane);
    for (int k = 0; k < 4; k++) {
        table[k][0] = 0;
        for (unsigned b = 1; b < 256; b++)
            table[k][b] = table[k][b & (b - 1)] ^ basis[8 * k + __builtin_ctz(b)];
    }
}

static void init_tables(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++)
            c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1)));
        slice[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (uint32_t b = 0; b < 256; b++)
            slice[k][b] = (slice[k - 1][b] >> 8) ^ slice[0][slice[k - 1][b] & 0xff];
    build_shift(shift_long, CRC32C_LONG_LANE);
    build_shift(shift_short, CRC32C_SHORT_LANE);
#ifdef CRC32C_HAVE_X86
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#ifdef CRC32C_HAVE_X86
static inline uint32_t shift_apply(const uint32_t table[4][256], uint32_t c)
{
    return table[0][c & 0xff] ^ table[1][(c >> 8) & 0xff] ^ table[2][(c >> 16) & 0xff] ^
           table[3][c >> 24];
}

static inline uint64_t load_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Consumes whole blocks of three lanes from *pp, leaving fewer than 3 * lane bytes. */
__attribute__((target("sse4.2"))) static uint32_t
hw_lanes(uint32_t c, const uint8_t **pp, size_t *np, size_t lane, const uint32_t table[4][256])
{
    const uint8_t *p = *pp;
    size_t n = *np;

    while (n >= 3 * lane) {
        uint64_t a = c, b = 0, d = 0;
        for (size_t i = 0; i < lane; i += 8) {
            a = _mm_crc32_u64(a, load_u64(p + i));
            b = _mm_crc32_u64(b, load_u64(p + lane + i));
            d = _mm_crc32_u64(d, load_u64(p + 2 * lane + i));
        }
        /* The register over lanes 0 and 1 is lane 0's advanced over one lane, plus lane 1's
         * started from zero; the same step adds lane 2. */
        c = shift_apply(table, shift_apply(table, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
        p += 3 * lane;
        n -= 3 * lane;
    }
    *pp = p;
    *np = n;
    return c;
}

__attribute__((target("sse4.2"))) static uint32_t hw_update(uint32_t c, const uint8_t *p, size_t n)
{
    while (n > 0 && ((uintptr_t)p & 7) != 0) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    if (n >= 3 * CRC32C_SHORT_LANE) {
        c = hw_lanes(c, &p, &n, CRC32C_LONG_LANE, shift_long);
        c = hw_lanes(c, &p, &n, CRC32C_SHORT_LANE, shift_short);
    }
    uint64_t c64 = c;
    while (n >= 8) {
        c64 = _mm_crc32_u64(c64, load_u64(p));
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n > 0) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    return c;
}
#endif

uint32_t crc32c_extend_sw(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&init_once, init_tables);
    return ~sw_update(~crc, data, len);
}

uint32_t crc32c_extend(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&init_once, init_tables);
#ifdef CRC32C_HAVE_X86
    if (have_hw)
        return ~hw_update(~crc, data, len);
#endif
    return ~sw_update(~crc, data, len);
}
