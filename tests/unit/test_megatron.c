/* megatron(): the index checks on byte arrays (every damage with its exact message), the tokens
 * of every dtype, the split entries and their runs, and reading through files: a local run,
 * splits, global_shuffle, missing files and the data roots. The fixtures are written here, byte
 * by byte after the published layout (tests/megatron/write_megatron.py is the independent writer
 * the integration tests use). Files live in a private temporary directory removed at the end. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/file.h"
#include "lib/pipeline.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include "common/error.h"
#include "pipeline/megatron.h"
#include "pipeline/open.h"
#include "pipeline/registry.h"
#include "pipeline/roots.h"
#include "pipeline/spec.h"
#include "pipeline/split.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static char err[SLUICE_ERRMSG_SIZE];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/sluice-test-megatron-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tmp_remove(dir);
    return 0;
}

/* ---- Fixtures ------------------------------------------------------------------------------- */

/* An index and its bin, as bytes. */
struct fx {
    uint8_t idx[4096];
    size_t idx_len;
    uint8_t bin[4096];
    size_t bin_len;
};

static void put_le(uint8_t *p, uint64_t v, unsigned width)
{
    for (unsigned i = 0; i < width; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static unsigned width_of(unsigned code)
{
    static const unsigned w[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
    return w[code];
}

/* Writes the index of S sequences of lens and D document indices docs (sequence pointers back to
 * back from 0, as Megatron-LM's writer makes them) and a bin of tokens[0, sum of lens). */
static void fx_build(struct fx *f, unsigned code, const int32_t *lens, size_t S,
                     const int64_t *docs, size_t D, const int64_t *tokens)
{
    memset(f, 0, sizeof *f);
    unsigned w = width_of(code);
    memcpy(f->idx, "MMIDIDX\0\0", 9);
    put_le(f->idx + 9, 1, 8);
    f->idx[17] = (uint8_t)code;
    put_le(f->idx + 18, S, 8);
    put_le(f->idx + 26, D, 8);
    uint64_t at = 0, ntok = 0;
    for (size_t s = 0; s < S; s++) {
        put_le(f->idx + 34 + 4 * s, (uint32_t)lens[s], 4);
        put_le(f->idx + 34 + 4 * S + 8 * s, at, 8);
        at += (uint64_t)lens[s] * w;
        ntok += (uint64_t)lens[s];
    }
    for (size_t d = 0; d < D; d++)
        put_le(f->idx + 34 + 12 * S + 8 * d, (uint64_t)docs[d], 8);
    f->idx_len = 34 + 12 * S + 8 * D;
    for (uint64_t k = 0; k < ntok; k++)
        put_le(f->bin + k * w, (uint64_t)tokens[k], w);
    f->bin_len = (size_t)at;
    assert_true(f->idx_len <= sizeof f->idx && f->bin_len <= sizeof f->bin);
}

/* The standard fixture: uint16 tokens 100..108 in 4 sequences of 2, 3, 0 and 4 tokens, and 4
 * documents: sequence 0; none (empty); sequences 1 and 2; sequence 3. Its offsets: lengths at
 * 34 + 4s, pointers at 50 + 8s, document indices at 82 + 8d; the index is 122 bytes, the bin 18. */
static void fx_standard(struct fx *f)
{
    static const int32_t lens[] = {2, 3, 0, 4};
    static const int64_t docs[] = {0, 1, 1, 3, 4};
    int64_t tokens[9];
    for (int k = 0; k < 9; k++)
        tokens[k] = 100 + k;
    fx_build(f, 8, lens, 4, docs, 5, tokens);
}

static int fx_init(const struct fx *f, struct pipe_megatron_index *ix)
{
    err[0] = '\0';
    return pipe_megatron_index_init(ix, f->idx, f->idx_len, f->bin_len ? f->bin : NULL, f->bin_len,
                                    "T.idx", "T.bin", err, sizeof err);
}

/* The documents of f as text, "[a, b]" per line, or the first failure as "ERR message". The
 * bytes are read from copies of their exact sizes, so that the sanitizers see any read past
 * them. */
static char *fx_text(const struct fx *f)
{
    struct pipe_megatron_index ix;
    size_t cap = 4096, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    uint8_t *idx = malloc(f->idx_len ? f->idx_len : 1), *bin = malloc(f->bin_len ? f->bin_len : 1);
    assert_true(idx && bin);
    memcpy(idx, f->idx, f->idx_len);
    memcpy(bin, f->bin, f->bin_len);
    err[0] = '\0';
    if (pipe_megatron_index_init(&ix, idx, f->idx_len, f->bin_len ? bin : NULL, f->bin_len, "T.idx",
                                 "T.bin", err, sizeof err) < 0) {
        snprintf(out, cap, "ERR %s", err);
        free(idx);
        free(bin);
        return out;
    }
    struct pipe_tensor t;
    memset(&t, 0, sizeof t);
    for (uint64_t d = 0; d < ix.ndocs; d++) {
        uint64_t offset, n;
        int rc = pipe_megatron_document(&ix, d, &offset, &n, err, sizeof err);
        if (rc == 0)
            rc = pipe_megatron_tokens(&ix, offset, n, &t, err, sizeof err);
        if (rc < 0) {
            snprintf(out + len, cap - len, "ERR %s", err);
            break;
        }
        assert_int_equal(t.dtype, SLUICE_INT32);
        assert_int_equal(t.rank, 1);
        assert_int_equal(t.shape[0], (int64_t)n);
        len += (size_t)snprintf(out + len, cap - len, "[");
        for (uint64_t k = 0; k < n; k++) {
            int32_t v;
            memcpy(&v, t.data + 4 * k, 4);
            len += (size_t)snprintf(out + len, cap - len, "%s%" PRId32, k ? ", " : "", v);
        }
        len += (size_t)snprintf(out + len, cap - len, "]\n");
        assert_true(len < cap);
    }
    free(t.data);
    free(t.offs);
    free(idx);
    free(bin);
    return out;
}

/* Writes f as DIR/NAME.idx and DIR/NAME.bin; returns the prefix (static storage). */
static const char *fx_write(const struct fx *f, const char *name)
{
    static char prefix[256];
    char path[300];
    snprintf(prefix, sizeof prefix, "%s/%s", dir, name);
    snprintf(path, sizeof path, "%s.idx", prefix);
    file_write(path, f->idx, f->idx_len);
    snprintf(path, sizeof path, "%s.bin", prefix);
    file_write(path, f->bin, f->bin_len);
    return prefix;
}

/* The text of a local run of pipeline (a confined registry when roots is not NULL), "ERR
 * message" at its end when it fails. */
static char *run_text(const char *pipeline, const struct pipe_roots *roots)
{
    struct pipe_spec *spec = pipeline_parse(pipeline);
    struct sluice_registry *reg = NULL;
    assert_int_equal(pipe_registry_new(&reg), 0);
    if (roots)
        assert_int_equal(pipe_registry_confine(reg, roots, NULL, 0, err, sizeof err), 0);
    struct pipe_run *run = NULL;
    char *out;
    if (pipe_open(spec, reg, &run, err, sizeof err) != 0) {
        out = NULL;
        assert_true(asprintf(&out, "ERR %s", err) > 0);
    } else {
        out = pipeline_text(run, NULL);
        pipe_run_free(run);
    }
    pipe_registry_free(reg);
    pipe_spec_free(spec);
    return out;
}

/* ---- Tokens --------------------------------------------------------------------------------- */

static void test_documents(void **state)
{
    (void)state;
    struct fx f;
    fx_standard(&f);
    struct pipe_megatron_index ix;
    assert_int_equal(fx_init(&f, &ix), 0);
    assert_int_equal(ix.ndocs, 4);
    assert_int_equal(ix.nseqs, 4);
    assert_int_equal(ix.width, 2);
    char *text = fx_text(&f);
    assert_string_equal(text, "[100, 101]\n[]\n[102, 103, 104]\n[105, 106, 107, 108]\n");
    free(text);
    /* Where each document's tokens lie: the empty one where the next would start. */
    static const uint64_t offsets[] = {0, 4, 4, 10}, counts[] = {2, 0, 3, 4};
    for (uint64_t d = 0; d < 4; d++) {
        uint64_t offset, n;
        assert_int_equal(pipe_megatron_document(&ix, d, &offset, &n, err, sizeof err), 0);
        assert_int_equal(offset, offsets[d]);
        assert_int_equal(n, counts[d]);
    }
    /* No documents at all: an index of the leading 0 alone, an empty bin. */
    static const int64_t none[] = {0};
    fx_build(&f, 4, NULL, 0, none, 1, NULL);
    assert_int_equal(fx_init(&f, &ix), 0);
    assert_int_equal(ix.ndocs, 0);
    /* Documents without sequences only. */
    static const int64_t empties[] = {0, 0, 0};
    fx_build(&f, 8, NULL, 0, empties, 3, NULL);
    text = fx_text(&f);
    assert_string_equal(text, "[]\n[]\n");
    free(text);
}

/* Every integer dtype widens to int32 exactly, its extremes included. */
static void test_dtypes(void **state)
{
    (void)state;
    static const struct {
        unsigned code;
        int64_t tokens[4];
        const char *want;
    } cases[] = {
        {1, {0, 1, 254, 255}, "[0, 1]\n[254, 255]\n"},
        {2, {-128, -1, 0, 127}, "[-128, -1]\n[0, 127]\n"},
        {3, {-32768, -1, 1, 32767}, "[-32768, -1]\n[1, 32767]\n"},
        {8, {0, 1, 32768, 65535}, "[0, 1]\n[32768, 65535]\n"},
        {4, {INT32_MIN, -1, 1, INT32_MAX}, "[-2147483648, -1]\n[1, 2147483647]\n"},
        {5, {INT32_MIN, -1, 1, INT32_MAX}, "[-2147483648, -1]\n[1, 2147483647]\n"},
    };
    static const int32_t lens[] = {2, 2};
    static const int64_t docs[] = {0, 1, 2};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fx f;
        fx_build(&f, cases[i].code, lens, 2, docs, 3, cases[i].tokens);
        char *text = fx_text(&f);
        if (strcmp(text, cases[i].want) != 0)
            fail_msg("dtype %s: got \"%s\", want \"%s\"", pipe_megatron_dtype_name(cases[i].code),
                     text, cases[i].want);
        free(text);
    }
    /* An int64 token outside int32 is an error at its offset in the bin. */
    static const int64_t big[] = {1, 2, INT64_C(2147483648), 4};
    struct fx f;
    fx_build(&f, 5, lens, 2, docs, 3, big);
    char *text = fx_text(&f);
    assert_string_equal(text, "[1, 2]\nERR T.bin: offset 16: token 2147483648 is outside "
                              "int32's range");
    free(text);
    static const int64_t small[] = {INT64_C(-2147483649), 2, 3, 4};
    fx_build(&f, 5, lens, 2, docs, 3, small);
    text = fx_text(&f);
    assert_string_equal(text, "ERR T.bin: offset 0: token -2147483649 is outside int32's range");
    free(text);
    assert_null(pipe_megatron_dtype_name(0));
    assert_null(pipe_megatron_dtype_name(9));
    assert_string_equal(pipe_megatron_dtype_name(8), "uint16");
}

/* ---- Damage --------------------------------------------------------------------------------- */

/* A change to the standard fixture: the value at offset of width bytes (0: none), then the
 * files' lengths (0: unchanged). */
struct damage {
    const char *what;
    unsigned offset, width;
    uint64_t value;
    size_t idx_len, bin_len;
    int code;         /* what pipe_megatron_index_init returns, or 0 */
    const char *want; /* the text: documents, then "ERR message" */
};

static void test_damage(void **state)
{
    (void)state;
    static const struct damage cases[] = {
        {"bad magic", 0, 1, 'X', 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 0: not a Megatron index (bad magic)"},
        {"bad magic's last byte", 8, 1, 1, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 0: not a Megatron index (bad magic)"},
        {"empty index", 0, 0, 0, SIZE_MAX, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 0: not a Megatron index (bad magic)"},
        {"header cut in the magic", 0, 0, 0, 5, 0, SLUICE_ERR_TRUNCATED,
         "ERR T.idx: offset 5: truncated header (the header has 34 bytes)"},
        {"header cut", 0, 0, 0, 33, 0, SLUICE_ERR_TRUNCATED,
         "ERR T.idx: offset 33: truncated header (the header has 34 bytes)"},
        {"arrays cut", 0, 0, 0, 121, 0, SLUICE_ERR_TRUNCATED,
         "ERR T.idx: offset 121: truncated: 4 sequences and 5 document indices need 122 bytes"},
        {"a huge sequence count", 18, 8, UINT64_C(1) << 62, 0, 0, SLUICE_ERR_TRUNCATED,
         "ERR T.idx: offset 122: truncated: 4611686018427387904 sequences and 5 document indices "
         "need more than its 122 bytes"},
        {"a huge document count", 26, 8, UINT64_MAX, 0, 0, SLUICE_ERR_TRUNCATED,
         "ERR T.idx: offset 122: truncated: 4 sequences and 18446744073709551615 document "
         "indices need more than its 122 bytes"},
        {"version 2", 9, 8, 2, 0, 0, SLUICE_ERR_UNSUPPORTED,
         "ERR T.idx: offset 9: version 2, expected 1"},
        {"unknown dtype", 17, 1, 9, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 17: unknown dtype code 9"},
        {"dtype 0", 17, 1, 0, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 17: unknown dtype code 0"},
        {"float32", 17, 1, 7, 0, 0, SLUICE_ERR_UNSUPPORTED,
         "ERR T.idx: offset 17: dtype float32 (code 7) holds no token ids"},
        {"float64", 17, 1, 6, 0, 0, SLUICE_ERR_UNSUPPORTED,
         "ERR T.idx: offset 17: dtype float64 (code 6) holds no token ids"},
        {"a trailing byte", 0, 0, 0, 123, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 122: 1 byte after the document indices"},
        {"trailing bytes", 0, 0, 0, 129, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 122: 7 bytes after the document indices"},
        {"multimodal modes", 0, 0, 0, 126, 0, SLUICE_ERR_UNSUPPORTED,
         "ERR T.idx: offset 122: 4 bytes after the document indices (a multimodal index's "
         "sequence modes: not supported)"},
        {"first document index", 82, 8, 1, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 82: the first document index is 1, expected 0"},
        {"last document index", 114, 8, 3, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 114: the last document index is 3, expected 4 (the number of "
         "sequences)"},
        {"last document index negative", 114, 8, UINT64_MAX, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 114: the last document index is -1, expected 4 (the number of "
         "sequences)"},
        {"first pointer", 50, 8, 2, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 50: sequence 0 starts at byte 2 of T.bin, expected 0"},
        {"bin longer than the sequences", 0, 0, 0, 0, 20, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 74: the last sequence (4 tokens of 2 bytes from byte 10) does not "
         "end where T.bin does (20 bytes)"},
        {"bin shorter than the sequences", 0, 0, 0, 0, 17, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 74: the last sequence (4 tokens of 2 bytes from byte 10) does not "
         "end where T.bin does (17 bytes)"},
        {"last pointer past the bin", 74, 8, 1000, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 74: the last sequence (4 tokens of 2 bytes from byte 1000) does not "
         "end where T.bin does (18 bytes)"},
        {"last pointer negative", 74, 8, UINT64_MAX, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 74: the last sequence (4 tokens of 2 bytes from byte -1) does not "
         "end where T.bin does (18 bytes)"},
        {"last length negative", 46, 4, UINT32_MAX, 0, 0, SLUICE_ERR_CORRUPT,
         "ERR T.idx: offset 46: sequence 3 has length -1"},
        /* Damage inside: the documents before it read. */
        {"a negative length", 38, 4, 0xfffffffe, 0, 0, 0,
         "[100, 101]\n[]\nERR T.idx: offset 38: sequence 1 has length -2"},
        {"a pointer past the bin", 58, 8, 1000, 0, 0, 0,
         "[100, 101]\n[]\nERR T.idx: offset 58: sequence 1 starts at byte 1000, outside T.bin "
         "(18 bytes)"},
        {"a negative pointer", 58, 8, UINT64_MAX - 7, 0, 0, 0,
         "[100, 101]\n[]\nERR T.idx: offset 58: sequence 1 starts at byte -8, outside T.bin "
         "(18 bytes)"},
        {"a length past the bin", 42, 4, 5, 0, 0, 0,
         "[100, 101]\n[]\nERR T.idx: offset 66: sequence 2 (5 tokens of 2 bytes from byte 10) "
         "ends past the end of T.bin (18 bytes)"},
        {"a huge length", 42, 4, INT32_MAX, 0, 0, 0,
         "[100, 101]\n[]\nERR T.idx: offset 66: sequence 2 (2147483647 tokens of 2 bytes from "
         "byte 10) ends past the end of T.bin (18 bytes)"},
        {"a gap between sequences", 58, 8, 6, 0, 0, 0,
         "[100, 101]\n[]\nERR T.idx: offset 58: sequence 1 starts at byte 6 of T.bin, but "
         "sequence 0 ends at byte 4"},
        {"overlapping sequences", 58, 8, 2, 0, 0, 0,
         "[100, 101]\n[]\nERR T.idx: offset 58: sequence 1 starts at byte 2 of T.bin, but "
         "sequence 0 ends at byte 4"},
        {"a longer sequence before", 34, 4, 3, 0, 0, 0,
         "[100, 101, 102]\n[]\nERR T.idx: offset 58: sequence 1 starts at byte 4 of T.bin, but "
         "sequence 0 ends at byte 6"},
        {"document indices out of order", 98, 8, 0, 0, 0, 0,
         "[100, 101]\nERR T.idx: offset 98: document 1 ends at sequence 0, before it starts (1)"},
        {"a document index past the sequences", 98, 8, 9, 0, 0, 0,
         "[100, 101]\nERR T.idx: offset 98: document 1 ends at sequence 9, outside the 4 "
         "sequences"},
        {"a negative document index", 90, 8, UINT64_MAX, 0, 0, 0,
         "ERR T.idx: offset 90: document 0 ends at sequence -1, before it starts (0)"},
        {"a document ending past the sequences", 106, 8, 7, 0, 0, 0,
         "[100, 101]\n[]\nERR T.idx: offset 106: document 2 ends at sequence 7, outside the 4 "
         "sequences"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fx f;
        fx_standard(&f);
        const struct damage *c = &cases[i];
        if (c->width)
            put_le(f.idx + c->offset, c->value, c->width);
        if (c->idx_len)
            f.idx_len = c->idx_len == SIZE_MAX ? 0 : c->idx_len;
        if (c->bin_len)
            f.bin_len = c->bin_len;
        struct pipe_megatron_index ix;
        int rc = fx_init(&f, &ix);
        if (rc != c->code)
            fail_msg("%s: pipe_megatron_index_init returned %d (%s), want %d", c->what, rc, err,
                     c->code);
        char *text = fx_text(&f);
        if (strcmp(text, c->want) != 0)
            fail_msg("%s: got \"%s\", want \"%s\"", c->what, text, c->want);
        free(text);
    }
    /* A document read alone (a split's first) that starts past the sequences: read in order,
     * the document before it fails first. */
    struct fx f;
    fx_standard(&f);
    put_le(f.idx + 106, 7, 8);
    struct pipe_megatron_index ix;
    assert_int_equal(fx_init(&f, &ix), 0);
    uint64_t offset, n;
    assert_int_equal(pipe_megatron_document(&ix, 3, &offset, &n, err, sizeof err),
                     SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "T.idx: offset 106: document 3 starts at sequence 7, outside the 4 "
                             "sequences");
    /* No sequences but a bin with bytes. */
    static const int64_t none[] = {0};
    fx_build(&f, 8, NULL, 0, none, 1, NULL);
    f.bin_len = 3;
    assert_int_equal(fx_init(&f, &ix), SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "T.idx: offset 18: no sequences, but T.bin has 3 bytes");
    /* No document index at all. */
    fx_build(&f, 8, NULL, 0, none, 0, NULL);
    assert_int_equal(fx_init(&f, &ix), SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "T.idx: offset 26: no document index (an index has at least the "
                             "leading 0)");
}

/* Every length of every prefix of the standard index, and every single byte changed to each
 * of a few values: an error or documents, never a read outside the arrays (the sanitizers
 * watch), and the whole text the same on a second read. */
static void test_damage_sweep(void **state)
{
    (void)state;
    struct fx good;
    fx_standard(&good);
    static const uint8_t values[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    for (size_t len = 0; len <= good.idx_len + 8; len++) {
        struct fx f = good;
        f.idx_len = len;
        char *a = fx_text(&f);
        if (len != good.idx_len)
            assert_non_null(strstr(a, "ERR T.idx: offset "));
        free(a);
    }
    for (size_t at = 0; at < good.idx_len; at++) {
        for (size_t v = 0; v < sizeof values; v++) {
            struct fx f = good;
            f.idx[at] = values[v];
            char *a = fx_text(&f), *b = fx_text(&f);
            assert_string_equal(a, b);
            free(a);
            free(b);
        }
    }
}

/* ---- Split entries -------------------------------------------------------------------------- */

static void test_range_names(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        bool ok;
        size_t prefix_len;
        uint64_t start, count;
    } cases[] = {
        {"p#docs=0+2", true, 1, 0, 2},
        {"/d/x_text#docs=40+10", true, 9, 40, 10},
        {"a#docs=1+2#docs=3+4", true, 10, 3, 4},
        {"p#docs=18446744073709551615+0", true, 1, UINT64_MAX, 0},
        {"p", false, 0, 0, 0},
        {"p#docs=", false, 0, 0, 0},
        {"p#docs=01+2", false, 0, 0, 0},
        {"p#docs=1+02", false, 0, 0, 0},
        {"p#docs=1+", false, 0, 0, 0},
        {"p#docs=+1", false, 0, 0, 0},
        {"p#docs=1-2", false, 0, 0, 0},
        {"p#docs=1+2x", false, 0, 0, 0},
        {"p#docs=1+2+3", false, 0, 0, 0},
        {"p#docs=18446744073709551616+1", false, 0, 0, 0},
        {"p#docs=1+2#docs=", false, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t plen = 99;
        uint64_t start = 99, count = 99;
        bool ok = pipe_megatron_range_of(cases[i].name, &plen, &start, &count);
        if (ok != cases[i].ok)
            fail_msg("%s: %d, want %d", cases[i].name, ok, cases[i].ok);
        if (ok) {
            assert_int_equal(plen, cases[i].prefix_len);
            assert_int_equal(start, cases[i].start);
            assert_int_equal(count, cases[i].count);
        }
    }
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(pipe_megatron_range_names("/d/p", 5, 2, &names, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(names[0], "/d/p#docs=0+2");
    assert_string_equal(names[1], "/d/p#docs=2+2");
    assert_string_equal(names[2], "/d/p#docs=4+1");
    pipe_paths_free(names, n);
    assert_int_equal(pipe_megatron_range_names("/d/p", 4, 4, &names, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(names[0], "/d/p#docs=0+4");
    pipe_paths_free(names, n);
    assert_int_equal(pipe_megatron_range_names("/d/p", 0, 4, &names, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    assert_null(names);
}

/* ---- Files ---------------------------------------------------------------------------------- */

/* A dataset of n one-sequence documents, document k holding k % 5 tokens of value 1000 * k + j. */
static const char *write_counted(const char *name, size_t n)
{
    static int32_t lens[200];
    static int64_t docs[201], tokens[1000];
    assert_true(n <= 200);
    size_t ntok = 0;
    docs[0] = 0;
    for (size_t k = 0; k < n; k++) {
        lens[k] = (int32_t)(k % 5);
        for (int32_t j = 0; j < lens[k]; j++)
            tokens[ntok++] = (int64_t)(1000 * k) + j;
        docs[k + 1] = (int64_t)k + 1;
    }
    struct fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    fx_build(f, 4, lens, n, docs, n + 1, tokens);
    const char *prefix = fx_write(f, name);
    free(f);
    return prefix;
}

static char *counted_text(size_t from, size_t to)
{
    size_t cap = 65536, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    for (size_t k = from; k < to; k++) {
        len += (size_t)snprintf(out + len, cap - len, "[");
        for (size_t j = 0; j < k % 5; j++)
            len += (size_t)snprintf(out + len, cap - len, "%s%zu", j ? ", " : "", 1000 * k + j);
        len += (size_t)snprintf(out + len, cap - len, "]\n");
    }
    assert_true(len < cap);
    return out;
}

static char *concat(char *a, char *b)
{
    char *out = NULL;
    assert_true(asprintf(&out, "%s%s", a, b) > 0);
    free(a);
    free(b);
    return out;
}

/* A local run reads every document in order; the split plan cuts runs of the split size (or the
 * default for the document count), and reading splits yields exactly their runs. */
static void test_run_and_splits(void **state)
{
    (void)state;
    char prefix[256], text[512];
    snprintf(prefix, sizeof prefix, "%s", write_counted("counted", 100));
    snprintf(text, sizeof text, "megatron(\"%s\")", prefix);
    char *out = run_text(text, NULL);
    char *want = counted_text(0, 100);
    assert_string_equal(out, want);
    free(out);
    free(want);

    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_split_provider p;
    /* 100 documents: the default size is 16 (100 / 256 raised to the minimum), 7 runs. */
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, err, sizeof err), 0);
    assert_int_equal(p.plan.kind, SPLIT_FILES);
    assert_int_equal(p.plan.npaths, 7);
    assert_int_equal(p.plan.per_pass, 7);
    char name[300];
    snprintf(name, sizeof name, "%s#docs=96+4", prefix);
    assert_string_equal(p.plan.paths[6], name);
    pipe_split_provider_release(&p);
    /* The job's split size: runs of 30. */
    assert_int_equal(pipe_split_provider_init(&p, spec, 30, err, sizeof err), 0);
    assert_int_equal(p.plan.npaths, 4);
    snprintf(name, sizeof name, "%s#docs=30+30", prefix);
    assert_string_equal(p.plan.paths[1], name);
    snprintf(name, sizeof name, "%s#docs=90+10", prefix);
    assert_string_equal(p.plan.paths[3], name);

    /* Splits 3 and 1, in that order: documents 90..99, then 30..59. */
    struct sluice_registry *reg = NULL;
    assert_int_equal(pipe_registry_new(&reg), 0);
    struct split sp[2];
    memset(sp, 0, sizeof sp);
    static const size_t pick[] = {3, 1};
    for (size_t i = 0; i < 2; i++) {
        sp[i].seq = pick[i];
        sp[i].index = pick[i];
        snprintf(sp[i].path, sizeof sp[i].path, "%s", p.plan.paths[pick[i]]);
    }
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open_splits(spec, reg, sp, 2, &run, err, sizeof err), 0);
    out = pipeline_text(run, NULL);
    pipe_run_free(run);
    want = concat(counted_text(90, 100), counted_text(30, 60));
    assert_string_equal(out, want);
    free(out);
    free(want);

    /* A run past the documents (the dataset changed after planning) is an error. */
    snprintf(sp[0].path, sizeof sp[0].path, "%s#docs=90+20", prefix);
    assert_int_equal(pipe_open_splits(spec, reg, sp, 1, &run, err, sizeof err), 0);
    int rc = 0;
    out = pipeline_text(run, &rc);
    pipe_run_free(run);
    assert_int_equal(rc, SLUICE_ERR_INVALID);
    char line[600];
    snprintf(line, sizeof line,
             "ERR %s: documents [90, 110) asked for, the index has 100 (did it change after the "
             "dataset was planned?)",
             prefix);
    assert_string_equal(out, line);
    free(out);
    pipe_registry_free(reg);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);
}

/* global_shuffle(SEED): the same documents, another order, the same order for the same seed. */
static void test_global_shuffle(void **state)
{
    (void)state;
    char prefix[256], text[512];
    snprintf(prefix, sizeof prefix, "%s", write_counted("shuffled", 200));
    snprintf(text, sizeof text, "megatron(\"%s\") | global_shuffle(7)", prefix);
    char *a = run_text(text, NULL), *b = run_text(text, NULL);
    char *want = counted_text(0, 200);
    assert_string_equal(a, b);
    assert_string_not_equal(a, want);
    char *sa = sorted_lines(a), *sw = sorted_lines(want);
    assert_string_equal(sa, sw);
    free(sa);
    free(sw);
    free(a);
    free(b);
    free(want);
}

/* Missing files name the file; a prefix given with its extension gets a hint; a registry with
 * data roots reads only prefixes whose two files lie within them. */
static void test_files(void **state)
{
    (void)state;
    char text[512], want[1024];
    snprintf(text, sizeof text, "megatron(\"%s/missing\")", dir);
    char *out = run_text(text, NULL);
    snprintf(want, sizeof want, "ERR %s/missing.idx: No such file or directory", dir);
    assert_string_equal(out, want);
    free(out);

    struct fx f;
    fx_standard(&f);
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s", fx_write(&f, "std"));
    snprintf(text, sizeof text, "megatron(\"%s.bin\")", prefix);
    out = run_text(text, NULL);
    snprintf(want, sizeof want,
             "ERR %s.bin.idx: No such file or directory (megatron() takes the prefix, without "
             ".idx or .bin)",
             prefix);
    assert_string_equal(out, want);
    free(out);

    /* The bin missing beside its index. */
    char path[300];
    snprintf(path, sizeof path, "%s/lonely.idx", dir);
    file_write(path, f.idx, f.idx_len);
    snprintf(text, sizeof text, "megatron(\"%s/lonely\")", dir);
    out = run_text(text, NULL);
    snprintf(want, sizeof want, "ERR %s/lonely.bin: No such file or directory", dir);
    assert_string_equal(out, want);
    free(out);

    /* Damage through the files names the file's path. */
    f.idx[0] = 'X';
    snprintf(prefix, sizeof prefix, "%s", fx_write(&f, "bad"));
    snprintf(text, sizeof text, "megatron(\"%s\")", prefix);
    out = run_text(text, NULL);
    snprintf(want, sizeof want, "ERR %s.idx: offset 0: not a Megatron index (bad magic)", prefix);
    assert_string_equal(out, want);
    free(out);

    /* Data roots: inside reads; outside is refused; a bin that is a link out of the roots too. */
    char inside[128], outside[128];
    snprintf(inside, sizeof inside, "%s/in", dir);
    snprintf(outside, sizeof outside, "%s/out", dir);
    assert_int_equal(mkdir(inside, 0700), 0);
    assert_int_equal(mkdir(outside, 0700), 0);
    fx_standard(&f);
    snprintf(prefix, sizeof prefix, "%s", fx_write(&f, "in/ok"));
    fx_write(&f, "out/far");
    const char *root_dirs[] = {inside};
    struct pipe_roots roots;
    assert_int_equal(pipe_roots_init(&roots, root_dirs, 1, err, sizeof err), 0);
    snprintf(text, sizeof text, "megatron(\"%s\")", prefix);
    out = run_text(text, &roots);
    assert_string_equal(out, "[100, 101]\n[]\n[102, 103, 104]\n[105, 106, 107, 108]\n");
    free(out);
    snprintf(text, sizeof text, "megatron(\"%s/far\")", outside);
    out = run_text(text, &roots);
    assert_non_null(strstr(out, "far.idx is outside the data roots"));
    free(out);
    char link_idx[300], link_bin[300], target[300];
    snprintf(link_idx, sizeof link_idx, "%s/linked.idx", inside);
    snprintf(link_bin, sizeof link_bin, "%s/linked.bin", inside);
    snprintf(target, sizeof target, "%s/far.bin", outside);
    file_write(link_idx, f.idx, f.idx_len);
    assert_int_equal(symlink(target, link_bin), 0);
    snprintf(text, sizeof text, "megatron(\"%s/linked\")", inside);
    out = run_text(text, &roots);
    snprintf(want, sizeof want, "/far.bin is outside the data roots (");
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "ERR megatron(\""));
    free(out);
    /* The split provider opens through the roots too. */
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_split_provider p;
    assert_int_equal(pipe_split_provider_init_confined(&p, spec, &roots, 0, err, sizeof err),
                     SLUICE_ERR_DENIED);
    assert_non_null(strstr(err, "/far.bin is outside the data roots ("));
    pipe_spec_free(spec);
    pipe_roots_release(&roots);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documents),      cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_damage),         cmocka_unit_test(test_damage_sweep),
        cmocka_unit_test(test_range_names),    cmocka_unit_test(test_run_and_splits),
        cmocka_unit_test(test_global_shuffle), cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
