/* The Parquet reader: its encodings on the examples of the format's own documentation, whole
 * files from two independent writers (arrow-rs through parquet-wasm, and hyparquet-writer; written
 * by tests/parquet/unit_fixtures.mjs) in every codec, page version and encoding they offer, read
 * row by row and with skips against the rows the writers were given, and files made by hand here
 * to be damaged in one precise way each, with the exact message each must give. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "lib/file.h"
#include "lib/proc.h"
#include "lib/pipeline.h"
#include "lib/tmp.h"
#include "pipeline/open.h"
#include "pipeline/pqsrc.h"
#include "pipeline/registry.h"
#include "pipeline/spec.h"
#include "pipeline/split.h"
#include "pipeline/parquet.h"
#include "pipeline/parquet_enc.h"
#include "pipeline/parquet_thrift.h"

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <snappy-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char err[SLUICE_ERRMSG_SIZE];

/* ---- Encodings ------------------------------------------------------------------------------ */

static void test_half_floats(void **state)
{
    (void)state;
    static const struct {
        uint16_t h;
        float f;
    } cases[] = {
        {0x0000, 0.0f},        {0x3c00, 1.0f},     {0xc000, -2.0f},      {0x7bff, 65504.0f},
        {0x0400, 0x1p-14f},    {0x0001, 0x1p-24f}, {0x03ff, 0x3ffp-24f}, {0x8001, -0x1p-24f},
        {0x3555, 0x1.554p-2f}, {0x7c00, INFINITY}, {0xfc00, -INFINITY},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        float f = pq_half_to_float(cases[i].h);
        assert_memory_equal(&f, &cases[i].f, sizeof(f));
    }
    float nz = pq_half_to_float(0x8000);
    assert_true(nz == 0.0f && signbit(nz));
    assert_true(isnan(pq_half_to_float(0x7e00)));
    assert_true(isnan(pq_half_to_float(0xfd01)));
}

static void rle_case(const uint8_t *in, size_t len, int bw, const uint32_t *want, size_t n)
{
    struct pq_rle r;
    uint32_t got[64];
    assert_true(n <= 64);
    assert_int_equal(pq_rle_init(&r, in, len, bw, err, sizeof(err)), 0);
    /* In two calls, so a run is resumed in the middle. */
    size_t half = n / 2;
    assert_int_equal(pq_rle_get(&r, got, half, err, sizeof(err)), 0);
    assert_int_equal(pq_rle_get(&r, got + half, n - half, err, sizeof(err)), 0);
    assert_memory_equal(got, want, n * sizeof(uint32_t));
}

static void test_rle_hybrid(void **state)
{
    (void)state;
    /* Encodings.md: the values 0..7 bit-packed with bit width 3. */
    static const uint8_t packed[] = {0x03, 0x88, 0xc6, 0xfa};
    static const uint32_t seq[] = {0, 1, 2, 3, 4, 5, 6, 7};
    rle_case(packed, sizeof(packed), 3, seq, 8);
    /* An RLE run of five 7s, then a bit-packed group, then a run of a two-byte value. */
    static const uint8_t mixed[] = {0x0a, 0x07, 0x03, 0x88, 0xc6, 0xfa, 0x06, 0x34, 0x12};
    static const uint32_t mixed_v[] = {7, 7, 7, 7, 7, 0, 1, 2, 3, 4, 5, 6, 7};
    rle_case(mixed, 6, 3, mixed_v, 13);
    static const uint32_t wide_v[] = {0x1234, 0x1234, 0x1234};
    rle_case(mixed + 6, 3, 13, wide_v, 3);
    /* Bit width 1, the booleans' and the levels': 8 values in one byte. */
    static const uint8_t bits[] = {0x03, 0xa5};
    static const uint32_t bits_v[] = {1, 0, 1, 0, 0, 1, 0, 1};
    rle_case(bits, sizeof(bits), 1, bits_v, 8);
    /* A last bit-packed run cut short after the values it holds. */
    static const uint8_t cut[] = {0x05, 0x88, 0xc6, 0xfa, 0x88};
    static const uint32_t cut_v[] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1};
    rle_case(cut, sizeof(cut), 3, cut_v, 10);
    /* Width 0: every value is 0, with or without runs. */
    static const uint32_t zeros[5] = {0};
    rle_case(NULL, 0, 0, zeros, 5);

    /* Errors: the data ends; a width over 32. */
    struct pq_rle r;
    uint32_t out[16];
    assert_int_equal(pq_rle_init(&r, packed, sizeof(packed), 3, err, sizeof(err)), 0);
    assert_int_equal(pq_rle_get(&r, out, 9, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "RLE data ends early");
    assert_int_equal(pq_rle_init(&r, mixed, 1, 3, err, sizeof(err)), 0);
    assert_int_equal(pq_rle_get(&r, out, 1, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "RLE data ends early");
    assert_int_equal(pq_rle_init(&r, packed, sizeof(packed), 33, err, sizeof(err)),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "RLE bit width 33 over 32");
}

static void delta_case(const uint8_t *in, size_t len, const int64_t *want, size_t n)
{
    struct pq_delta d;
    int64_t got[64];
    assert_int_equal(pq_delta_init(&d, in, len, 64, err, sizeof(err)), 0);
    assert_int_equal(d.total, n);
    for (size_t i = 0; i < n; i += 3) {
        size_t k = n - i < 3 ? n - i : 3;
        assert_int_equal(pq_delta_get(&d, got + i, k, err, sizeof(err)), 0);
    }
    assert_memory_equal(got, want, n * sizeof(int64_t));
    size_t size;
    assert_int_equal(pq_delta_size(in, len, &size, err, sizeof(err)), 0);
    assert_int_equal(size, len);
}

static void test_delta_binary_packed(void **state)
{
    (void)state;
    /* Encodings.md example 1: 1 2 3 4 5 (all deltas 1: width 0, no miniblock bytes). */
    static const uint8_t ex1[] = {0x80, 0x01, 0x04, 0x05, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00};
    static const int64_t ex1_v[] = {1, 2, 3, 4, 5};
    delta_case(ex1, sizeof(ex1), ex1_v, 5);
    /* Example 2: 7 5 3 1 2 3 4 5: min delta -2, relative deltas 0 0 0 3 3 3 3 in 2 bits. */
    static const uint8_t ex2[] = {0x80, 0x01, 0x04, 0x08, 0x0e, 0x03, 0x02, 0x00, 0x00,
                                  0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    static const int64_t ex2_v[] = {7, 5, 3, 1, 2, 3, 4, 5};
    delta_case(ex2, sizeof(ex2), ex2_v, 8);
    /* One value only: the header alone. */
    static const uint8_t one[] = {0x80, 0x01, 0x04, 0x01, 0x01};
    static const int64_t one_v[] = {-1};
    delta_case(one, sizeof(one), one_v, 1);

    struct pq_delta d;
    int64_t out[16];
    /* A bad block size; a miniblock cut short; more values asked than the stream holds. */
    static const uint8_t bad_block[] = {0x64, 0x04, 0x05, 0x02};
    assert_int_equal(pq_delta_init(&d, bad_block, sizeof(bad_block), 64, err, sizeof(err)),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "DELTA_BINARY_PACKED: block of 100 values in 4 miniblocks");
    assert_int_equal(pq_delta_init(&d, ex2, 11, 64, err, sizeof(err)), 0);
    assert_int_equal(pq_delta_get(&d, out, 8, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "DELTA_BINARY_PACKED: miniblock ends early");
    assert_int_equal(pq_delta_init(&d, ex1, sizeof(ex1), 64, err, sizeof(err)), 0);
    assert_int_equal(pq_delta_get(&d, out, 6, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "DELTA_BINARY_PACKED: fewer values than the page holds");
    /* A bit width over the column's. */
    static const uint8_t wide[] = {0x80, 0x01, 0x04, 0x02, 0x00, 0x00, 0x21, 0x00, 0x00, 0x00};
    assert_int_equal(pq_delta_init(&d, wide, sizeof(wide), 32, err, sizeof(err)), 0);
    assert_int_equal(pq_delta_get(&d, out, 2, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "DELTA_BINARY_PACKED: bit width 33 over 32");
}

static const struct pq_conv conv_bytes = {PQT_BYTE_ARRAY, 0, SLUICE_BYTES, false};

/* Decodes n strings of the given encoding and compares them with want. */
static void strings_case(int encoding, const uint8_t *in, size_t len, const char *const *want,
                         size_t n)
{
    struct pq_values *v = calloc(1, sizeof(*v));
    assert_non_null(v);
    struct pq_ref refs[16];
    assert_int_equal(pq_values_init(v, encoding, &conv_bytes, in, len, NULL, 0, err, sizeof(err)),
                     0);
    size_t got;
    for (size_t i = 0; i < n; i += got) {
        assert_int_equal(
            pq_values_get(v, n - i < 2 ? n - i : 2, NULL, refs, &got, err, sizeof(err)), 0);
        for (size_t k = 0; k < got; k++) {
            assert_int_equal(refs[k].len, strlen(want[i + k]));
            assert_memory_equal(refs[k].p, want[i + k], refs[k].len);
        }
    }
    pq_values_free(v);
    free(v);
}

static void test_delta_strings(void **state)
{
    (void)state;
    /* Encodings.md: DELTA_LENGTH_BYTE_ARRAY of Hello World Foobar ABCDEF: the lengths 5 5 6 6
     * (first 5, min delta 0, relative deltas 0 1 0 in 1 bit), then the bytes. */
    static const uint8_t dlba[] = {0x80, 0x01, 0x04, 0x04, 0x0a, 0x00, 0x01, 0x00, 0x00,
                                   0x00, 0x02, 0x00, 0x00, 0x00, 'H',  'e',  'l',  'l',
                                   'o',  'W',  'o',  'r',  'l',  'd',  'F',  'o',  'o',
                                   'b',  'a',  'r',  'A',  'B',  'C',  'D',  'E',  'F'};
    static const char *const dlba_v[] = {"Hello", "World", "Foobar", "ABCDEF"};
    strings_case(PQT_DELTA_LENGTH_BYTE_ARRAY, dlba, sizeof(dlba), dlba_v, 4);
    /* DELTA_BYTE_ARRAY of axis axle babble babyhood: prefix lengths 0 2 0 3 (min delta -2,
     * relative 4 0 5 in 3 bits), suffix lengths 4 2 6 5 (min -2, relative 0 6 1), suffixes. */
    static const uint8_t dba[] = {0x80, 0x01, 0x04, 0x04, 0x00, 0x03, 0x03, 0x00, 0x00, 0x00, 0x44,
                                  0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                  0x80, 0x01, 0x04, 0x04, 0x08, 0x03, 0x03, 0x00, 0x00, 0x00, 0x70,
                                  0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                  'a',  'x',  'i',  's',  'l',  'e',  'b',  'a',  'b',  'b',  'l',
                                  'e',  'y',  'h',  'o',  'o',  'd'};
    static const char *const dba_v[] = {"axis", "axle", "babble", "babyhood"};
    strings_case(PQT_DELTA_BYTE_ARRAY, dba, sizeof(dba), dba_v, 4);

    /* A length past the data. */
    struct pq_values *v = calloc(1, sizeof(*v));
    assert_non_null(v);
    struct pq_ref refs[4];
    size_t got;
    assert_int_equal(pq_values_init(v, PQT_DELTA_LENGTH_BYTE_ARRAY, &conv_bytes, dlba,
                                    sizeof(dlba) - 1, NULL, 0, err, sizeof(err)),
                     0);
    assert_int_equal(pq_values_get(v, 4, NULL, refs, &got, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "DELTA_LENGTH_BYTE_ARRAY: string of 6 bytes in 5");
    pq_values_free(v);
    free(v);
}

static void test_byte_stream_split(void **state)
{
    (void)state;
    float f[3] = {1.5f, -2.25f, 1e10f};
    uint8_t raw[12], split[12];
    memcpy(raw, f, sizeof(raw));
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++)
            split[b * 3 + i] = raw[i * 4 + b];
    struct pq_values *v = calloc(1, sizeof(*v));
    assert_non_null(v);
    struct pq_conv conv = {PQT_FLOAT, 0, SLUICE_FLOAT32, false};
    float out[3];
    size_t got;
    assert_int_equal(pq_values_init(v, PQT_BYTE_STREAM_SPLIT, &conv, split, sizeof(split), NULL, 0,
                                    err, sizeof(err)),
                     0);
    assert_int_equal(pq_values_get(v, 1, out, NULL, &got, err, sizeof(err)), 0);
    assert_int_equal(pq_values_get(v, 2, out + 1, NULL, &got, err, sizeof(err)), 0);
    assert_memory_equal(out, f, sizeof(f));
    assert_int_equal(pq_values_get(v, 1, out, NULL, &got, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "BYTE_STREAM_SPLIT values end before the page's count");
    assert_int_equal(
        pq_values_init(v, PQT_BYTE_STREAM_SPLIT, &conv, split, 11, NULL, 0, err, sizeof(err)),
        SLUICE_ERR_INVALID);
    assert_string_equal(err, "BYTE_STREAM_SPLIT: 11 bytes are not whole values of 4");
    /* Encodings a type cannot have. */
    assert_int_equal(
        pq_values_init(v, PQT_DELTA_BINARY_PACKED, &conv, split, 12, NULL, 0, err, sizeof(err)),
        SLUICE_ERR_INVALID);
    assert_string_equal(err, "encoding DELTA_BINARY_PACKED on a column of type 4");
    pq_values_free(v);
    free(v);
}

/* ---- Expected rows of the fixture files ----------------------------------------------------- */

static void want_scalar(struct pipe_tensor *t, enum sluice_dtype dt, const void *v)
{
    assert_int_equal(pipe_tensor_set_scalar(t, dt, v), 0);
}

static void want_string(struct pipe_tensor *t, const char *s)
{
    assert_int_equal(pipe_tensor_set_bytes(t, s, strlen(s)), 0);
}

/* The value of column col in row i, as tests/parquet/unit_fixtures.mjs writes it: PQ_NULL or
 * PQ_VALUE with t set. */
static int want_value(const char *col, long i, struct pipe_tensor *t)
{
    char s[64];
    if (!strcmp(col, "b")) {
        uint8_t v = i % 3 == 0;
        if (i % 7 == 0)
            return PQ_NULL;
        want_scalar(t, SLUICE_BOOL, &v);
    } else if (!strcmp(col, "i8")) {
        int8_t v = (int8_t)(i % 256 - 128);
        want_scalar(t, SLUICE_INT8, &v);
    } else if (!strcmp(col, "i16")) {
        int16_t v = (int16_t)((i * 31) % 65536 - 32768);
        want_scalar(t, SLUICE_INT16, &v);
    } else if (!strcmp(col, "i32")) {
        int32_t v = (int32_t)(i * 7 - 1000);
        if (i % 5 == 3)
            return PQ_NULL;
        want_scalar(t, SLUICE_INT32, &v);
    } else if (!strcmp(col, "i64")) {
        int64_t v = (int64_t)i * 1000000007 - 5;
        want_scalar(t, SLUICE_INT64, &v);
    } else if (!strcmp(col, "u8")) {
        uint8_t v = (uint8_t)(i % 256);
        want_scalar(t, SLUICE_UINT8, &v);
    } else if (!strcmp(col, "u16")) {
        uint16_t v = (uint16_t)((i * 37) % 65536);
        want_scalar(t, SLUICE_UINT16, &v);
    } else if (!strcmp(col, "u32")) {
        uint32_t v = (uint32_t)((uint64_t)i * 2654435761u);
        want_scalar(t, SLUICE_UINT32, &v);
    } else if (!strcmp(col, "u64")) {
        uint64_t v = (uint64_t)i * 11400714819323198485ull;
        want_scalar(t, SLUICE_UINT64, &v);
    } else if (!strcmp(col, "f32")) {
        float v = (float)(i * 0.5 - 3);
        want_scalar(t, SLUICE_FLOAT32, &v);
    } else if (!strcmp(col, "f64")) {
        double v = (double)i / 3;
        want_scalar(t, SLUICE_FLOAT64, &v);
    } else if (!strcmp(col, "s")) {
        if (i % 11 == 0)
            return PQ_NULL;
        snprintf(s, sizeof(s), "str%ld", i % 50);
        want_string(t, s);
    } else if (!strcmp(col, "uniq")) {
        snprintf(s, sizeof(s), "u%ld", i * i);
        want_string(t, s);
    } else if (!strcmp(col, "bin")) {
        for (long k = 0; k < i % 5; k++)
            s[k] = (char)((i + k) & 255);
        assert_int_equal(pipe_tensor_set_bytes(t, s, (size_t)(i % 5)), 0);
    } else if (!strcmp(col, "date")) {
        int32_t v = (int32_t)(i - 100);
        want_scalar(t, SLUICE_INT32, &v);
    } else if (!strcmp(col, "ts")) {
        int64_t v = (int64_t)i * 1000;
        want_scalar(t, SLUICE_INT64, &v);
    } else if (!strcmp(col, "lst")) {
        if (i % 13 == 0)
            return PQ_NULL;
        t->dtype = SLUICE_INT32;
        assert_int_equal(pipe_tensor_reserve(t, 16, 0), 0);
        t->rank = 1;
        t->shape[0] = i % 4;
        t->len = (size_t)(i % 4) * 4;
        for (long k = 0; k < i % 4; k++) {
            int32_t v = (int32_t)(i * 10 + k);
            memcpy(t->data + 4 * k, &v, 4);
        }
    } else if (!strcmp(col, "lsts")) {
        t->dtype = SLUICE_BYTES;
        assert_int_equal(pipe_tensor_reserve(t, 64, 3), 0);
        t->rank = 1;
        t->shape[0] = i % 3;
        t->len = 0;
        t->offs[0] = 0;
        for (long k = 0; k < i % 3; k++) {
            int n = snprintf(s, sizeof(s), "e%ld_%ld", i, k);
            memcpy(t->data + t->len, s, (size_t)n);
            t->len += (size_t)n;
            t->offs[k + 1] = t->len;
        }
    } else if (!strcmp(col, "f16")) {
        float v;
        if (i % 9 == 0)
            return PQ_NULL;
        v = i % 9 == 1 ? INFINITY : i % 9 == 2 ? -0.0f : (float)((i - 1500) / 64.0);
        want_scalar(t, SLUICE_FLOAT32, &v);
    } else {
        fail_msg("unexpected column %s", col);
    }
    return PQ_VALUE;
}

static void assert_tensor_equal(const struct pipe_tensor *got, const struct pipe_tensor *want,
                                const char *where)
{
    if (got->dtype != want->dtype || got->rank != want->rank || got->len != want->len ||
        memcmp(got->shape, want->shape, (size_t)got->rank * sizeof(int64_t)) != 0 ||
        (got->len && memcmp(got->data, want->data, got->len) != 0))
        fail_msg("%s: value differs (dtype %d/%d rank %d/%d len %zu/%zu)", where, got->dtype,
                 want->dtype, got->rank, want->rank, got->len, want->len);
    if (got->dtype == SLUICE_BYTES) {
        uint64_t n = pipe_tensor_num_values(got);
        if (memcmp(got->offs, want->offs, (size_t)(n + 1) * sizeof(uint64_t)) != 0)
            fail_msg("%s: offsets differ", where);
    }
}

static const char *fixture_dir(void)
{
    static char dir[512];
    if (dir[0])
        return dir;
    snprintf(dir, sizeof(dir), "%s/pq", tmp_dir());
    char *argv[] = {(char *)SLUICE_NODE,
                    (char *)SLUICE_SOURCE_DIR "/tests/parquet/unit_fixtures.mjs", dir, NULL};
    char *out = NULL, *errout = NULL;
    int rc = run_cmd(argv, 120000, &out, &errout);
    if (rc != 0)
        fail_msg("%s tests/parquet/unit_fixtures.mjs failed (%d): %s", SLUICE_NODE, rc,
                 errout ? errout : "");
    free(out);
    free(errout);
    return dir;
}

struct opened {
    int fd;
    struct pq_io io;
    struct pq_file *f;
    char path[600];
};

static void open_fixture(struct opened *o, const char *name)
{
    snprintf(o->path, sizeof(o->path), "%s/%s", fixture_dir(), name);
    o->fd = open(o->path, O_RDONLY);
    assert_true(o->fd >= 0);
    assert_int_equal(pq_io_fd(&o->io, o->fd, name, err, sizeof(err)), 0);
    if (pq_open(&o->io, &o->f, err, sizeof(err)) != 0)
        fail_msg("%s", err);
}

static void close_fixture(struct opened *o)
{
    pq_close(o->f);
    close(o->fd);
}

/* Reads every row of every column of the file, each row checked against want_value; with
 * skip_every > 0, reads one row then skips skip rows, alternately. */
static void read_all(const char *name, uint64_t skip)
{
    struct opened o;
    open_fixture(&o, name);
    assert_int_equal(pq_num_rows(o.f), 3000);
    struct pipe_tensor got = {0}, want = {0};
    char where[256];
    for (size_t c = 0; c < pq_num_columns(o.f); c++) {
        const struct pq_column_info *info = pq_column(o.f, c);
        if (!info->supported)
            fail_msg("%s: %s", name, info->why_unsupported);
        assert_int_equal(pq_column_find(o.f, info->name), (long)c);
        long row0 = 0;
        for (size_t g = 0; g < pq_num_row_groups(o.f); g++) {
            struct pq_cursor *cur;
            assert_int_equal(pq_cursor_open(o.f, g, c, &cur, err, sizeof(err)), 0);
            long rows = (long)pq_row_group_rows(o.f, g);
            for (long r = 0; r < rows; r++) {
                snprintf(where, sizeof(where), "%s: column %s: row %ld", name, info->name,
                         row0 + r);
                int rc = pq_cursor_next(cur, &got, err, sizeof(err));
                if (rc < 0)
                    fail_msg("%s: %s", where, err);
                int w = want_value(info->name, row0 + r, &want);
                if (rc != w)
                    fail_msg("%s: got %d, want %d", where, rc, w);
                if (rc == PQ_VALUE) {
                    assert_int_equal(info->dtype, want.dtype);
                    assert_tensor_equal(&got, &want, where);
                }
                if (skip && r + 1 < rows) {
                    uint64_t k = skip < (uint64_t)(rows - r - 1) ? skip : (uint64_t)(rows - r - 1);
                    if (pq_cursor_skip(cur, k, err, sizeof(err)) != 0)
                        fail_msg("%s: skip: %s", where, err);
                    r += (long)k;
                }
            }
            assert_int_equal(pq_cursor_next(cur, &got, err, sizeof(err)), PQ_END);
            pq_cursor_free(cur);
            row0 += rows;
        }
        assert_int_equal(row0, 3000);
    }
    free(got.data);
    free(got.offs);
    free(want.data);
    free(want.offs);
    close_fixture(&o);
}

static const char *const fixtures[] = {
    "pw_none_v1.parquet", "pw_none_v2.parquet",  "pw_snappy_v1.parquet", "pw_snappy_v2.parquet",
    "pw_gzip_v1.parquet", "pw_gzip_v2.parquet",  "pw_brotli_v1.parquet", "pw_brotli_v2.parquet",
    "pw_zstd_v1.parquet", "pw_zstd_v2.parquet",  "pw_lz4raw_v1.parquet", "pw_lz4raw_v2.parquet",
    "pw_plain.parquet",   "pw_fallback.parquet", "pw_delta_v1.parquet",  "pw_delta_v2.parquet",
    "hy_none.parquet",    "hy_snappy.parquet",   "hy_gzip.parquet",      "hy_brotli.parquet",
    "hy_delta.parquet",
};

static void test_fixtures_read(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++)
        read_all(fixtures[i], 0);
}

static void test_fixtures_skip(void **state)
{
    (void)state;
    static const uint64_t skips[] = {1, 6, 99, 450, 2999};
    for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++)
        for (size_t k = 0; k < sizeof(skips) / sizeof(skips[0]); k++)
            read_all(fixtures[i], skips[k]);
}

static void test_fixture_schema(void **state)
{
    (void)state;
    struct opened o;
    open_fixture(&o, "pw_snappy_v1.parquet");
    assert_int_equal(pq_num_row_groups(o.f), 3);
    assert_int_equal(pq_row_group_rows(o.f, 2), 1000);
    static const struct {
        const char *name;
        enum sluice_dtype dtype;
        bool list;
    } cols[] = {
        {"b", SLUICE_BOOL, false},      {"i8", SLUICE_INT8, false},
        {"i16", SLUICE_INT16, false},   {"i32", SLUICE_INT32, false},
        {"i64", SLUICE_INT64, false},   {"u8", SLUICE_UINT8, false},
        {"u16", SLUICE_UINT16, false},  {"u32", SLUICE_UINT32, false},
        {"u64", SLUICE_UINT64, false},  {"f32", SLUICE_FLOAT32, false},
        {"f64", SLUICE_FLOAT64, false}, {"s", SLUICE_BYTES, false},
        {"uniq", SLUICE_BYTES, false},  {"bin", SLUICE_BYTES, false},
        {"date", SLUICE_INT32, false},  {"ts", SLUICE_INT64, false},
        {"lst", SLUICE_INT32, true},    {"lsts", SLUICE_BYTES, true},
    };
    assert_int_equal(pq_num_columns(o.f), sizeof(cols) / sizeof(cols[0]));
    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
        const struct pq_column_info *c = pq_column(o.f, i);
        assert_string_equal(c->name, cols[i].name);
        assert_int_equal(c->dtype, cols[i].dtype);
        assert_int_equal(c->list, cols[i].list);
        assert_true(c->supported);
        assert_true(pq_chunk_bytes(o.f, 0, i) > 0);
    }
    assert_true(pq_column(o.f, 3)->optional);
    assert_int_equal(pq_column_find(o.f, "nope"), -1);
    close_fixture(&o);
}

/* A pq_io that counts the bytes asked of the one beneath it. */
struct counting {
    struct pq_io inner;
    uint64_t bytes, reads;
};

static int counting_read(void *user, void *buf, size_t len, uint64_t off, char *e, size_t elen)
{
    struct counting *c = user;
    c->bytes += len;
    c->reads++;
    return c->inner.read(c->inner.user, buf, len, off, e, elen);
}

/* A projection reads the footer and the chunks of the columns it reads, nothing else: reading
 * every row of one column asks for no more bytes than the footer region plus that column's
 * chunks. */
static void test_projection_reads_its_chunks(void **state)
{
    (void)state;
    static const char *const files[] = {"pw_snappy_v1.parquet", "pw_zstd_v2.parquet",
                                        "hy_snappy.parquet"};
    for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
        struct opened o;
        open_fixture(&o, files[k]);
        struct counting cnt = {.inner = o.io};
        struct pq_io io = o.io;
        io.read = counting_read;
        io.user = &cnt;
        struct pq_file *f = NULL;
        if (pq_open(&io, &f, err, sizeof(err)) != 0)
            fail_msg("%s", err);
        uint64_t footer = cnt.bytes;
        /* The footer is read from the end: never more than the file minus its first chunk. */
        assert_true(footer > 8 && footer < io.size);
        size_t ncol = pq_num_columns(f);
        for (size_t col = 0; col < ncol; col++) {
            if (!pq_column(f, col)->supported)
                continue;
            uint64_t before = cnt.bytes, chunks = 0;
            struct pipe_tensor t = {0};
            for (size_t rg = 0; rg < pq_num_row_groups(f); rg++) {
                chunks += pq_chunk_bytes(f, rg, col);
                struct pq_cursor *cur = NULL;
                if (pq_cursor_open(f, rg, col, &cur, err, sizeof(err)) != 0)
                    fail_msg("%s", err);
                int rc;
                while ((rc = pq_cursor_next(cur, &t, err, sizeof(err))) > 0)
                    ;
                if (rc < 0)
                    fail_msg("%s: %s", files[k], err);
                pq_cursor_free(cur);
            }
            free(t.data);
            free(t.offs);
            uint64_t read = cnt.bytes - before;
            if (read > chunks)
                fail_msg("%s: column %s: read %" PRIu64 " bytes, its chunks hold %" PRIu64,
                         files[k], pq_column(f, col)->name, read, chunks);
            assert_true(read > 0);
        }
        pq_close(f);
        close_fixture(&o);
    }
}

/* A split of a parquet() source is one row group: the plan names each row group of each file,
 * and reading one split yields exactly that row group's rows of the whole file's sequence,
 * numbered as in the file (errors), with the file opened once for consecutive row groups. */
static void test_row_group_splits(void **state)
{
    (void)state;
    char text[2048];
    snprintf(text, sizeof text,
             "parquet([\"%s/pw_snappy_v1.parquet\", \"%s/hy_snappy.parquet\"], "
             "\"i64\")",
             fixture_dir(), fixture_dir());
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_split_provider p;
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, err, sizeof(err)), 0);
    /* Each file has 3 row groups of 1000 rows. */
    assert_int_equal(p.plan.npaths, 6);
    assert_int_equal(p.plan.per_pass, 6);
    size_t plen;
    uint64_t rg;
    assert_true(pipe_parquet_row_group_of(p.plan.paths[2], &plen, &rg));
    assert_int_equal(rg, 2);
    assert_int_equal(strncmp(p.plan.paths[2] + plen, "#row-group=2", 13), 0);
    assert_true(pipe_parquet_row_group_of(p.plan.paths[3], &plen, &rg));
    assert_int_equal(rg, 0);
    struct sluice_registry *reg = NULL;
    assert_int_equal(pipe_registry_new(&reg), 0);
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof(err)), 0);
    char *whole = pipeline_text(run, NULL);
    pipe_run_free(run);
    /* Row groups 1 and 2 of the first file, then 1 of the second: their lines of the whole,
     * 1000..2999 and 4000..4999. */
    static const size_t pick[] = {1, 2, 4};
    struct split sp[3];
    memset(sp, 0, sizeof sp);
    for (size_t i = 0; i < 3; i++) {
        sp[i].seq = pick[i];
        sp[i].index = pick[i];
        snprintf(sp[i].path, sizeof sp[i].path, "%s", p.plan.paths[pick[i]]);
    }
    assert_int_equal(pipe_open_splits(spec, reg, sp, 3, &run, err, sizeof(err)), 0);
    char *parts = pipeline_text(run, NULL);
    pipe_run_free(run);
    const char *a = whole;
    for (int line = 0; line < 1000; line++)
        a = strchr(a, '\n') + 1;
    const char *b = a;
    for (int line = 0; line < 2000; line++)
        b = strchr(b, '\n') + 1;
    const char *c = b;
    for (int line = 0; line < 1000; line++)
        c = strchr(c, '\n') + 1;
    const char *d = c;
    for (int line = 0; line < 1000; line++)
        d = strchr(d, '\n') + 1;
    size_t n1 = (size_t)(b - a), n2 = (size_t)(d - c);
    assert_int_equal(strlen(parts), n1 + n2);
    assert_memory_equal(parts, a, n1);
    assert_memory_equal(parts + n1, c, n2);
    free(parts);
    free(whole);
    /* A row group the file does not have (the file changed after planning) is an error. */
    snprintf(sp[0].path, sizeof sp[0].path, "%s/pw_snappy_v1.parquet#row-group=3", fixture_dir());
    assert_int_equal(pipe_open_splits(spec, reg, sp, 1, &run, err, sizeof(err)), 0);
    int rc = 0;
    char *bad = pipeline_text(run, &rc);
    pipe_run_free(run);
    assert_true(rc < 0);
    assert_non_null(strstr(bad, "pw_snappy_v1.parquet: row group 3 asked for, the file has 3"));
    free(bad);
    pipe_registry_free(reg);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);
}

static void test_fixture_nested(void **state)
{
    (void)state;
    struct opened o;
    open_fixture(&o, "pw_nested.parquet");
    assert_int_equal(pq_num_columns(o.f), 4);
    const struct pq_column_info *st = pq_column(o.f, 0), *ll = pq_column(o.f, 1);
    assert_false(st->supported);
    assert_string_equal(st->why_unsupported, "column st: a nested group");
    assert_false(ll->supported);
    assert_string_equal(ll->why_unsupported, "column ll: a list of non-primitive values");
    struct pq_cursor *c;
    assert_int_equal(pq_cursor_open(o.f, 0, 0, &c, err, sizeof(err)), SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "pw_nested.parquet: column st: a nested group");

    /* The list with a null element: its first row reads, the second fails naming it. */
    struct pipe_tensor t = {0};
    assert_true(pq_column(o.f, 2)->list);
    assert_int_equal(pq_cursor_open(o.f, 0, 2, &c, err, sizeof(err)), 0);
    assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), PQ_VALUE);
    assert_int_equal(t.rank, 1);
    assert_int_equal(t.shape[0], 2);
    int rc = pq_cursor_next(c, &t, err, sizeof(err));
    assert_int_equal(rc, SLUICE_ERR_INVALID);
    assert_true(strstr(err, ": row 1: a null element in a list") != NULL);
    assert_true(strncmp(err, "pw_nested.parquet: row group 0: column ln: offset ", 50) == 0);
    pq_cursor_free(c);

    /* The plain column beside them reads. */
    long x = pq_column_find(o.f, "x");
    assert_int_equal(x, 3);
    assert_int_equal(pq_cursor_open(o.f, 0, (size_t)x, &c, err, sizeof(err)), 0);
    for (int32_t want = 5; want <= 7; want++) {
        assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), PQ_VALUE);
        assert_memory_equal(t.data, &want, 4);
    }
    assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), PQ_END);
    pq_cursor_free(c);
    free(t.data);
    free(t.offs);
    close_fixture(&o);
}

/* ---- Files made by hand ---------------------------------------------------------------------- */

/* A Thrift compact protocol writer, enough for a footer and page headers. */
struct tw {
    uint8_t *b;
    size_t len, cap;
    int16_t last[16];
    int depth;
};

static void tw_byte(struct tw *w, uint8_t v)
{
    if (w->len == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 1024;
        w->b = realloc(w->b, w->cap);
        assert_non_null(w->b);
    }
    w->b[w->len++] = v;
}

static void tw_bytes(struct tw *w, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tw_byte(w, ((const uint8_t *)p)[i]);
}

static void tw_varint(struct tw *w, uint64_t v)
{
    while (v >= 0x80) {
        tw_byte(w, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    tw_byte(w, (uint8_t)v);
}

static void tw_field(struct tw *w, int16_t id, int type)
{
    int16_t d = (int16_t)(id - w->last[w->depth]);
    if (d > 0 && d <= 15) {
        tw_byte(w, (uint8_t)(d << 4 | type));
    } else {
        tw_byte(w, (uint8_t)type);
        tw_varint(w, (uint64_t)(((int64_t)id << 1) ^ ((int64_t)id >> 63)));
    }
    w->last[w->depth] = id;
}

static void tw_i64(struct tw *w, int16_t id, int64_t v)
{
    tw_field(w, id, 6);
    tw_varint(w, (uint64_t)(v << 1) ^ (uint64_t)(v >> 63));
}

static void tw_i32(struct tw *w, int16_t id, int32_t v)
{
    tw_field(w, id, 5);
    tw_varint(w, (uint64_t)(((int64_t)v << 1) ^ ((int64_t)v >> 63)));
}

static void tw_str(struct tw *w, int16_t id, const char *s)
{
    tw_field(w, id, 8);
    tw_varint(w, strlen(s));
    tw_bytes(w, s, strlen(s));
}

static void tw_begin(struct tw *w, int16_t id)
{
    if (id)
        tw_field(w, id, 12);
    w->last[++w->depth] = 0;
}

static void tw_end(struct tw *w)
{
    tw_byte(w, 0);
    w->depth--;
}

static void tw_list(struct tw *w, int16_t id, int etype, int n)
{
    tw_field(w, id, 9);
    tw_byte(w, (uint8_t)(n << 4 | etype));
}

/* A page of a hand-made file. */
struct hpage {
    int type;            /* enum pqt_page_type */
    const uint8_t *data; /* as stored (compressed) */
    size_t len;
    int32_t usize; /* uncompressed_page_size */
    int32_t num_values;
    int encoding;
    bool crc;
    uint32_t crc_value;
};

/* Where the last hand_file's first data page starts. */
static int64_t hand_data_off;
/* The physical and converted type hand_file gives its column (INT32 and none unless set). */
static int32_t hand_phys = PQT_INT32, hand_converted = -1;

/* A one-column file: an INT32 column x (of the given enum pqt_repetition) of num_rows rows in one
 * row group with the given codec and pages. */
static uint8_t *hand_file(const struct hpage *pages, size_t npages, int repetition, int codec,
                          int64_t num_rows, size_t *size)
{
    struct tw w = {0};
    tw_bytes(&w, "PAR1", 4);
    int64_t dict_off = -1, data_off = -1;
    for (size_t i = 0; i < npages; i++) {
        const struct hpage *p = &pages[i];
        if (p->type == PQT_DICTIONARY_PAGE && dict_off < 0)
            dict_off = (int64_t)w.len;
        if (p->type != PQT_DICTIONARY_PAGE && data_off < 0)
            data_off = (int64_t)w.len;
        tw_begin(&w, 0);
        tw_i32(&w, 1, p->type);
        tw_i32(&w, 2, p->usize);
        tw_i32(&w, 3, (int32_t)p->len);
        if (p->crc)
            tw_i32(&w, 4, (int32_t)p->crc_value);
        if (p->type == PQT_DICTIONARY_PAGE) {
            tw_begin(&w, 7);
            tw_i32(&w, 1, p->num_values);
            tw_i32(&w, 2, PQT_PLAIN);
            tw_end(&w);
        } else {
            tw_begin(&w, 5);
            tw_i32(&w, 1, p->num_values);
            tw_i32(&w, 2, p->encoding);
            tw_i32(&w, 3, PQT_RLE);
            tw_i32(&w, 4, PQT_RLE);
            tw_end(&w);
        }
        tw_end(&w);
        tw_bytes(&w, p->data, p->len);
    }
    int64_t chunk_end = (int64_t)w.len;
    hand_data_off = data_off;
    int64_t start = dict_off >= 0 ? dict_off : data_off;
    size_t foot = w.len;
    tw_begin(&w, 0);
    tw_i32(&w, 1, 2);
    tw_list(&w, 2, 12, 2);
    tw_begin(&w, 0);
    tw_str(&w, 4, "schema");
    tw_i32(&w, 5, 1);
    tw_end(&w);
    tw_begin(&w, 0);
    tw_i32(&w, 1, hand_phys);
    tw_i32(&w, 3, repetition);
    tw_str(&w, 4, "x");
    if (hand_converted >= 0)
        tw_i32(&w, 6, hand_converted);
    tw_end(&w);
    tw_i64(&w, 3, num_rows);
    tw_list(&w, 4, 12, 1);
    tw_begin(&w, 0);
    tw_list(&w, 1, 12, 1);
    tw_begin(&w, 0);
    tw_i64(&w, 2, start);
    tw_begin(&w, 3);
    tw_i32(&w, 1, hand_phys);
    tw_list(&w, 2, 5, 1);
    tw_varint(&w, 0);
    tw_list(&w, 3, 8, 1);
    tw_varint(&w, 1);
    tw_byte(&w, 'x');
    tw_i32(&w, 4, codec);
    tw_i64(&w, 5, num_rows);
    tw_i64(&w, 6, chunk_end - start);
    tw_i64(&w, 7, chunk_end - start);
    tw_i64(&w, 9, data_off);
    if (dict_off >= 0)
        tw_i64(&w, 11, dict_off);
    tw_end(&w);
    tw_end(&w);
    tw_i64(&w, 2, chunk_end - start);
    tw_i64(&w, 3, num_rows);
    tw_end(&w);
    tw_end(&w);
    uint32_t flen = (uint32_t)(w.len - foot);
    tw_bytes(&w, &flen, 4);
    tw_bytes(&w, "PAR1", 4);
    *size = w.len;
    return w.b;
}

/* Reads column 0 of a file in memory: every row's int32 value (or INT32_MIN for a null) into
 * vals; returns the first error code (err set) or 0. */
static int read_ints(const uint8_t *file, size_t size, int32_t *vals, size_t max, size_t *n)
{
    struct pq_io io;
    struct pq_file *f;
    pq_io_mem(&io, file, size, "h.parquet");
    int rc = pq_open(&io, &f, err, sizeof(err));
    if (rc)
        return rc;
    *n = 0;
    struct pipe_tensor t = {0};
    for (size_t g = 0; g < pq_num_row_groups(f) && !rc; g++) {
        struct pq_cursor *c;
        if ((rc = pq_cursor_open(f, g, 0, &c, err, sizeof(err))))
            break;
        while ((rc = pq_cursor_next(c, &t, err, sizeof(err))) > 0) {
            if (*n < max)
                memcpy(&vals[*n], t.data, 4);
            if (rc == PQ_NULL && *n < max)
                vals[*n] = INT32_MIN;
            (*n)++;
        }
        pq_cursor_free(c);
    }
    free(t.data);
    free(t.offs);
    pq_close(f);
    return rc;
}

/* Levels of width 1 for an optional column: RLE runs given as (count, level) pairs, with the
 * 4-byte length prefix of a v1 page. */
static size_t def_levels(uint8_t *out, const int *runs, size_t nruns)
{
    size_t n = 4;
    for (size_t i = 0; i < nruns; i++) {
        out[n++] = (uint8_t)(runs[2 * i] << 1);
        out[n++] = (uint8_t)runs[2 * i + 1];
    }
    uint32_t len = (uint32_t)(n - 4);
    memcpy(out, &len, 4);
    return n;
}

static void test_hand_crc(void **state)
{
    (void)state;
    int32_t v[3] = {5, -6, 70000};
    struct hpage p = {
        PQT_DATA_PAGE, (const uint8_t *)v, sizeof(v), sizeof(v), 3, PQT_PLAIN, true, 0};
    p.crc_value = (uint32_t)crc32(0, (const Bytef *)v, sizeof(v));
    size_t size, n;
    uint8_t *file = hand_file(&p, 1, PQT_REQUIRED, PQT_UNCOMPRESSED, 3, &size);
    int32_t got[8];
    assert_int_equal(read_ints(file, size, got, 8, &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(got, v, sizeof(v));
    free(file);

    uint32_t good = p.crc_value;
    p.crc_value ^= 1;
    file = hand_file(&p, 1, PQT_REQUIRED, PQT_UNCOMPRESSED, 3, &size);
    assert_int_equal(read_ints(file, size, got, 8, &n), SLUICE_ERR_INVALID);
    char want[256];
    snprintf(want, sizeof(want),
             "h.parquet: row group 0: column x: offset 4: page CRC %08x, header says %08x", good,
             good ^ 1);
    assert_string_equal(err, want);
    free(file);
}

static void test_hand_dictionary(void **state)
{
    (void)state;
    int32_t dict[4] = {10, 20, 30, 40};
    /* Indices of width 3: an RLE run of two 3s, then a bit-packed group 0 1 2 3 0 1 2 3. */
    uint8_t idx[7] = {3, 0x04, 0x03, 0x03};
    /* Packed by the rule (value k at bits 3k..3k+2, least significant first). */
    uint32_t packed = 0;
    for (int k = 0; k < 8; k++)
        packed |= (uint32_t)(k & 3) << (3 * k);
    memcpy(idx + 4, &packed, 3);
    struct hpage pages[2] = {
        {PQT_DICTIONARY_PAGE, (const uint8_t *)dict, sizeof(dict), sizeof(dict), 4, PQT_PLAIN,
         false, 0},
        {PQT_DATA_PAGE, idx, sizeof(idx), sizeof(idx), 10, PQT_RLE_DICTIONARY, false, 0},
    };
    size_t size, n;
    uint8_t *file = hand_file(pages, 2, PQT_REQUIRED, PQT_UNCOMPRESSED, 10, &size);
    int32_t got[16];
    assert_int_equal(read_ints(file, size, got, 16, &n), 0);
    static const int32_t want[] = {40, 40, 10, 20, 30, 40, 10, 20, 30, 40};
    assert_int_equal(n, 10);
    assert_memory_equal(got, want, sizeof(want));
    free(file);

    /* An index of 17 with a width of 5. */
    uint8_t bad[] = {5, 0x02, 17};
    pages[1].data = bad;
    pages[1].len = pages[1].usize = sizeof(bad);
    pages[1].num_values = 1;
    file = hand_file(pages, 2, PQT_REQUIRED, PQT_UNCOMPRESSED, 1, &size);
    assert_int_equal(read_ints(file, size, got, 16, &n), SLUICE_ERR_INVALID);
    char w[256];
    snprintf(w, sizeof(w),
             "h.parquet: row group 0: column x: offset %lld: dictionary index 17 out of range "
             "(dictionary of 4)",
             (long long)hand_data_off);
    assert_string_equal(err, w);
    free(file);

    /* Dictionary indices with no dictionary page. */
    file = hand_file(pages + 1, 1, PQT_REQUIRED, PQT_UNCOMPRESSED, 1, &size);
    assert_int_equal(read_ints(file, size, got, 16, &n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: dictionary-encoded page "
                             "without a dictionary page");
    free(file);
}

static void test_hand_sizes(void **state)
{
    (void)state;
    int32_t v[250];
    for (int i = 0; i < 250; i++)
        v[i] = i * i;
    char comp[2048];
    size_t clen = sizeof(comp);
    assert_int_equal(snappy_compress((const char *)v, sizeof(v), comp, &clen), SNAPPY_OK);
    struct hpage p = {
        PQT_DATA_PAGE, (const uint8_t *)comp, clen, sizeof(v), 250, PQT_PLAIN, false, 0};
    size_t size, n;
    int32_t got[256];
    uint8_t *file = hand_file(&p, 1, PQT_REQUIRED, PQT_SNAPPY, 250, &size);
    assert_int_equal(read_ints(file, size, got, 256, &n), 0);
    assert_int_equal(n, 250);
    assert_memory_equal(got, v, sizeof(v));
    free(file);

    p.usize = 4096;
    file = hand_file(&p, 1, PQT_REQUIRED, PQT_SNAPPY, 250, &size);
    assert_int_equal(read_ints(file, size, got, 256, &n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: page decompresses to "
                             "1000 bytes, header says 4096");
    free(file);

    /* The same with GZIP (zlib framing here), both ways. */
    uLongf zlen = sizeof(comp);
    assert_int_equal(compress2((Bytef *)comp, &zlen, (const Bytef *)v, sizeof(v), 9), Z_OK);
    p.len = zlen;
    p.usize = 4096;
    file = hand_file(&p, 1, PQT_REQUIRED, PQT_GZIP, 250, &size);
    assert_int_equal(read_ints(file, size, got, 256, &n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: page decompresses to "
                             "1000 bytes, header says 4096");
    free(file);
    p.usize = 999;
    file = hand_file(&p, 1, PQT_REQUIRED, PQT_GZIP, 250, &size);
    assert_int_equal(read_ints(file, size, got, 256, &n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: page decompresses to "
                             "more than 999 bytes, header says 999");
    free(file);

    /* Fewer values in the page than the header claims. */
    struct hpage q = {PQT_DATA_PAGE, (const uint8_t *)v, 12, 12, 4, PQT_PLAIN, false, 0};
    file = hand_file(&q, 1, PQT_REQUIRED, PQT_UNCOMPRESSED, 4, &size);
    assert_int_equal(read_ints(file, size, got, 256, &n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: PLAIN values end "
                             "before the page's count");
    free(file);

    /* Fewer rows in the chunk than the row group claims. */
    q.num_values = 3;
    file = hand_file(&q, 1, PQT_REQUIRED, PQT_UNCOMPRESSED, 5, &size);
    assert_int_equal(read_ints(file, size, got, 256, &n), SLUICE_ERR_INVALID);
    assert_int_equal(n, 3);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: column chunk ends after "
                             "3 of 5 rows");
    free(file);
}

static void test_hand_levels(void **state)
{
    (void)state;
    /* An optional column: levels 1 1 0 1, then the three values. */
    uint8_t page[64];
    static const int runs[] = {2, 1, 1, 0, 1, 1};
    size_t n = def_levels(page, runs, 3);
    int32_t v[3] = {7, 8, 9};
    memcpy(page + n, v, sizeof(v));
    n += sizeof(v);
    struct hpage p = {PQT_DATA_PAGE, page, n, (int32_t)n, 4, PQT_PLAIN, false, 0};
    size_t size, got_n;
    int32_t got[8];
    uint8_t *file = hand_file(&p, 1, PQT_OPTIONAL, PQT_UNCOMPRESSED, 4, &size);
    assert_int_equal(read_ints(file, size, got, 8, &got_n), 0);
    static const int32_t want[] = {7, 8, INT32_MIN, 9};
    assert_int_equal(got_n, 4);
    assert_memory_equal(got, want, sizeof(want));
    free(file);

    /* A definition level of 2 in a column whose most is 1. */
    static const int bad_runs[] = {1, 1, 1, 2};
    n = def_levels(page, bad_runs, 2);
    memcpy(page + n, v, sizeof(v));
    n += sizeof(v);
    p.len = n;
    p.usize = (int32_t)n;
    p.num_values = 2;
    file = hand_file(&p, 1, PQT_OPTIONAL, PQT_UNCOMPRESSED, 2, &size);
    assert_int_equal(read_ints(file, size, got, 8, &got_n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: definition level 2 does "
                             "not fit the schema (max 1)");
    free(file);

    /* Levels whose length runs past the page. */
    uint32_t big = 1000;
    memcpy(page, &big, 4);
    file = hand_file(&p, 1, PQT_OPTIONAL, PQT_UNCOMPRESSED, 2, &size);
    assert_int_equal(read_ints(file, size, got, 8, &got_n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: definition levels of "
                             "1000 bytes run past the page");
    free(file);
}

/* A bare repeated field (the oldest form of a list): rows [1 2], [], [3], read and skipped. */
static void test_hand_repeated(void **state)
{
    (void)state;
    uint8_t page[64];
    size_t n = 0;
    /* Repetition levels 0 1 0 0 and definition levels 1 1 0 1, each one bit-packed group of
     * width 1 behind its 4-byte length; then the three values. */
    static const uint8_t levels[] = {2, 0, 0, 0, 0x03, 0x02, 2, 0, 0, 0, 0x03, 0x0b};
    memcpy(page, levels, sizeof(levels));
    n = sizeof(levels);
    int32_t v[3] = {1, 2, 3};
    memcpy(page + n, v, sizeof(v));
    n += sizeof(v);
    struct hpage p = {PQT_DATA_PAGE, page, n, (int32_t)n, 4, PQT_PLAIN, false, 0};
    size_t size;
    uint8_t *file = hand_file(&p, 1, PQT_REPEATED, PQT_UNCOMPRESSED, 3, &size);
    struct pq_io io;
    struct pq_file *f;
    struct pq_cursor *c;
    struct pipe_tensor t = {0};
    pq_io_mem(&io, file, size, "h.parquet");
    assert_int_equal(pq_open(&io, &f, err, sizeof(err)), 0);
    assert_true(pq_column(f, 0)->list);
    assert_false(pq_column(f, 0)->optional);
    assert_int_equal(pq_cursor_open(f, 0, 0, &c, err, sizeof(err)), 0);
    assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), PQ_VALUE);
    assert_int_equal(t.dtype, SLUICE_INT32);
    assert_int_equal(t.rank, 1);
    assert_int_equal(t.shape[0], 2);
    assert_memory_equal(t.data, v, 8);
    assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), PQ_VALUE);
    assert_int_equal(t.shape[0], 0);
    assert_int_equal(t.len, 0);
    assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), PQ_VALUE);
    assert_int_equal(t.shape[0], 1);
    assert_memory_equal(t.data, v + 2, 4);
    assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), PQ_END);
    pq_cursor_free(c);
    assert_int_equal(pq_cursor_open(f, 0, 0, &c, err, sizeof(err)), 0);
    assert_int_equal(pq_cursor_skip(c, 2, err, sizeof(err)), 0);
    assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), PQ_VALUE);
    assert_memory_equal(t.data, v + 2, 4);
    assert_int_equal(pq_cursor_skip(c, 1, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: skip of 1 rows past the end (0 "
                             "left)");
    pq_cursor_free(c);
    pq_close(f);
    free(file);

    /* A row that starts with repetition level 1. */
    page[5] = 0x03;
    file = hand_file(&p, 1, PQT_REPEATED, PQT_UNCOMPRESSED, 3, &size);
    pq_io_mem(&io, file, size, "h.parquet");
    assert_int_equal(pq_open(&io, &f, err, sizeof(err)), 0);
    assert_int_equal(pq_cursor_open(f, 0, 0, &c, err, sizeof(err)), 0);
    assert_int_equal(pq_cursor_next(c, &t, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: row group 0: column x: offset 4: repetition level 1 at "
                             "the start of row 0 does not fit the schema");
    pq_cursor_free(c);
    pq_close(f);
    free(file);
    free(t.data);
}

static void test_hand_footer(void **state)
{
    (void)state;
    int32_t v[2] = {1, 2};
    struct hpage p = {
        PQT_DATA_PAGE, (const uint8_t *)v, sizeof(v), sizeof(v), 2, PQT_PLAIN, false, 0};
    size_t size, n;
    uint8_t *file = hand_file(&p, 1, PQT_REQUIRED, PQT_UNCOMPRESSED, 2, &size);
    int32_t got[4];
    char w[256];

    /* Bad magic at the start, at the end; too short. */
    file[0] = 'X';
    assert_int_equal(read_ints(file, size, got, 4, &n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: not a Parquet file (no PAR1 magic)");
    file[0] = 'P';
    assert_int_equal(read_ints(file, size - 1, got, 4, &n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: not a Parquet file (no PAR1 magic at its end)");
    assert_int_equal(read_ints(file, 8, got, 4, &n), SLUICE_ERR_INVALID);
    assert_string_equal(err, "h.parquet: not a Parquet file (8 bytes)");

    /* A footer length past the file. */
    uint32_t flen;
    memcpy(&flen, file + size - 8, 4);
    uint32_t huge = 1234567;
    memcpy(file + size - 8, &huge, 4);
    assert_int_equal(read_ints(file, size, got, 4, &n), SLUICE_ERR_INVALID);
    snprintf(w, sizeof(w), "h.parquet: footer length 1234567 exceeds the file (%zu bytes)", size);
    assert_string_equal(err, w);

    /* A footer cut short: its length says less than it is. */
    uint32_t shorter = flen - 5;
    memcpy(file + size - 8, &shorter, 4);
    assert_int_equal(read_ints(file, size, got, 4, &n), SLUICE_ERR_INVALID);
    assert_true(strncmp(err, "h.parquet: footer: ", 19) == 0);
    memcpy(file + size - 8, &flen, 4);

    /* Every truncation of the file fails cleanly, with the file's name first. */
    for (size_t cut = 0; cut < size; cut++) {
        int rc = read_ints(file, cut, got, 4, &n);
        assert_int_not_equal(rc, 0);
        assert_true(strncmp(err, "h.parquet: ", 11) == 0);
    }
    free(file);
}

static void test_hand_refused_types(void **state)
{
    (void)state;
    static const struct {
        int32_t phys, converted;
        const char *why;
    } cases[] = {
        {PQT_INT96, -1, "column x: INT96 is not supported"},
        {PQT_INT32, PQT_CT_DECIMAL, "column x: DECIMAL is not supported"},
        {PQT_BYTE_ARRAY, PQT_CT_DECIMAL, "column x: DECIMAL is not supported"},
    };
    uint8_t data[12] = {0};
    struct hpage p = {PQT_DATA_PAGE, data, sizeof(data), sizeof(data), 1, PQT_PLAIN, false, 0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hand_phys = cases[i].phys;
        hand_converted = cases[i].converted;
        size_t size;
        uint8_t *file = hand_file(&p, 1, PQT_REQUIRED, PQT_UNCOMPRESSED, 1, &size);
        struct pq_io io;
        struct pq_file *f;
        struct pq_cursor *c;
        pq_io_mem(&io, file, size, "h.parquet");
        assert_int_equal(pq_open(&io, &f, err, sizeof(err)), 0);
        assert_false(pq_column(f, 0)->supported);
        assert_string_equal(pq_column(f, 0)->why_unsupported, cases[i].why);
        assert_int_equal(pq_cursor_open(f, 0, 0, &c, err, sizeof(err)), SLUICE_ERR_UNSUPPORTED);
        char want[128];
        snprintf(want, sizeof(want), "h.parquet: %s", cases[i].why);
        assert_string_equal(err, want);
        pq_close(f);
        free(file);
    }
    hand_phys = PQT_INT32;
    hand_converted = -1;
}

/* Damages a real file byte by byte (a byte every footer_step of the footer and every step of the
 * pages, set to a few values) and reads every column: each read either succeeds or fails with a
 * message naming the file; none reads out of bounds (the sanitizers' run checks that). */
static void damage(const char *name, size_t step, size_t footer_step)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", fixture_dir(), name);
    size_t size;
    uint8_t *orig = file_read(path, &size);
    uint8_t *file = malloc(size);
    assert_non_null(file);
    uint32_t flen;
    memcpy(&flen, orig + size - 8, 4);
    struct pipe_tensor t = {0};
    static const uint8_t vals[] = {0x00, 0xff, 0x7f, 0x15};
    size_t failures = 0, tries = 0;
    for (size_t pos = 0; pos < size; pos += pos >= size - flen - 8 ? footer_step : step) {
        for (size_t k = 0; k < sizeof(vals); k++) {
            memcpy(file, orig, size);
            if (file[pos] == vals[k])
                continue;
            file[pos] = vals[k];
            tries++;
            struct pq_io io;
            struct pq_file *f;
            pq_io_mem(&io, file, size, "d.parquet");
            int rc = pq_open(&io, &f, err, sizeof(err));
            bool opened = rc == 0;
            for (size_t c = 0; !rc && c < pq_num_columns(f); c++) {
                if (!pq_column(f, c)->supported)
                    continue;
                for (size_t g = 0; !rc && g < pq_num_row_groups(f); g++) {
                    struct pq_cursor *cur;
                    if ((rc = pq_cursor_open(f, g, c, &cur, err, sizeof(err))))
                        break;
                    int r;
                    while ((r = pq_cursor_next(cur, &t, err, sizeof(err))) > 0)
                        ;
                    rc = r;
                    pq_cursor_free(cur);
                }
            }
            if (opened)
                pq_close(f);
            if (rc) {
                failures++;
                if (strncmp(err, "d.parquet: ", 11) != 0)
                    fail_msg("damage at %zu: message without the file's name: %s", pos, err);
            }
        }
    }
    /* Damage to the footer mostly shows. */
    assert_true(failures > 0 && failures < tries);
    free(t.data);
    free(t.offs);
    free(file);
    free(orig);
}

static void test_damaged_fixtures(void **state)
{
    (void)state;
    /* Steps coprime to the structures' sizes, so the damage lands on every kind of byte; the
     * fuzz target covers the rest. */
    damage("hy_snappy.parquet", 389, 3);    /* v2 pages, FLOAT16 */
    damage("pw_zstd_v1.parquet", 1999, 41); /* v1 pages, dictionaries, lists */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_floats),
        cmocka_unit_test(test_rle_hybrid),
        cmocka_unit_test(test_delta_binary_packed),
        cmocka_unit_test(test_delta_strings),
        cmocka_unit_test(test_byte_stream_split),
        cmocka_unit_test(test_hand_crc),
        cmocka_unit_test(test_hand_dictionary),
        cmocka_unit_test(test_hand_sizes),
        cmocka_unit_test(test_hand_levels),
        cmocka_unit_test(test_hand_repeated),
        cmocka_unit_test(test_hand_footer),
        cmocka_unit_test(test_hand_refused_types),
        cmocka_unit_test(test_fixture_schema),
        cmocka_unit_test(test_projection_reads_its_chunks),
        cmocka_unit_test(test_row_group_splits),
        cmocka_unit_test(test_fixture_nested),
        cmocka_unit_test(test_fixtures_read),
        cmocka_unit_test(test_fixtures_skip),
        cmocka_unit_test(test_damaged_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
