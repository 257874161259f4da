/* DatasetDef encoding: exact round trips of many specs, deterministic bytes, and a decoder that
 * refuses every malformed or invalid message with SLUICE_ERR_CORRUPT and an exact message:
 * garbage, truncations, bit flips, bad enum values, a missing source, fields that do not belong
 * to their kind, out-of-range arguments, and over-deep nesting. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pipeline.h"

#include "common/error.h"
#include "dataset.pb-c.h"
#include "pipeline/def.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct pipe_spec *decode_ok(const uint8_t *data, size_t len)
{
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = pipe_spec_decode(data, len, &spec, err, sizeof(err));
    if (rc != 0)
        fail_msg("decode: %d %s", rc, err);
    assert_non_null(spec);
    return spec;
}

/* ---- Round trips -------------------------------------------------------------------------- */

static const char *const texts[] = {
    "range(10)",
    "range(-9223372036854775808, 9223372036854775807, -7)",
    "range(0, 0)",
    "list(1, 2, 3)",
    "list(-0.0, 0.1, 1e+100, 5e-324, -1.7976931348623157e+308)",
    "list(\"\", \"a\\x00b\", \"\\xff\\n\\t\\\\\\\"\")",
    "list(true, false)",
    "list([[1, 2], [3, 4]], [[5, 6], [7, 8]])",
    "list([[[[[[[[1]]]]]]]])",
    "list((1, \"a\", [1.5, 2.5], true), (2, \"b\", [3.5, 4.5], false))",
    "tfrecord(\"/data/train-*.tfrecord\", \"/data/extra\\xc3\\xa9\")",
    "lines(\"\")",
    "tar(\"/data/shard-*.tar\", \"jpg\", \"cls\", \"seg.png\")",
    "tar([\"/a/*.tar\", \"/b/x\\\\[1\\\\].tar.gz\"], \"\\xc3\\xa9\") | shuffle(4) | batch(2)",
    "parquet(\"/data/*.parquet\")",
    "jsonl([\"a.jsonl\", \"b.jsonl.zst\"], \"text\", \"ids\") | batch(4)",
    "parquet([\"a.parquet\", \"b.parquet\"], \"text\", \"label=-1\") | batch(8)",
    "range(10) | map(square) | filter(even)",
    "range(10) | map(f, 1, -2.5, \"s\", true, [[1], [2]], [\"x\"])",
    "range(10) | shuffle(100) | shuffle(5, -9223372036854775808) | shuffle(1, 0)",
    "range(10) | batch(4) | batch(4, drop_remainder)",
    "range(10) | take(-1) | take(0) | skip(-1) | skip(3)",
    "range(10) | repeat() | repeat(0) | repeat(9223372036854775807)",
    ("range(10) | shard(4, 3) | shard(SHARD_HINT, SHARD_HINT) | shard(SHARD_HINT, 5) | "
     "shard(2, SHARD_HINT)"),
    "range(10) | prefetch(1)",
    "snapshot(\"/data/snap\")",
    "snapshot(\"/s\\xc3\\xa9\") | global_shuffle(3) | shard(2, 0) | batch(2)",
    "megatron(\"/data/c4_text_document\")",
    "megatron(\"d/x*[1]\\xc3\\xa9\") | global_shuffle(5) | map(square) | batch(2)",
};

static void test_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct pipe_spec *a = pipeline_parse(texts[i]);
        uint8_t *bytes = NULL;
        size_t len = 0;
        assert_int_equal(pipe_spec_encode(a, &bytes, &len), 0);
        assert_non_null(bytes);
        struct pipe_spec *b = decode_ok(bytes, len);
        if (!pipe_spec_equal(a, b))
            fail_msg("\"%s\" does not survive encode/decode", texts[i]);
        assert_int_equal(b->source.column, 0);

        /* Equal specs encode to the same bytes. */
        uint8_t *again = NULL;
        size_t len2 = 0;
        assert_int_equal(pipe_spec_encode(b, &again, &len2), 0);
        assert_int_equal(len2, len);
        assert_memory_equal(again, bytes, len);

        /* The canonical text survives as well. */
        char t1[512], t2[512];
        assert_true(pipe_spec_format(a, t1, sizeof(t1)) < (int)sizeof(t1));
        assert_true(pipe_spec_format(b, t2, sizeof(t2)) < (int)sizeof(t2));
        assert_string_equal(t1, t2);

        free(again);
        free(bytes);
        pipe_spec_free(a);
        pipe_spec_free(b);
    }
}

static void test_tail_round_trip(void **state)
{
    (void)state;
    struct pipe_spec *a = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_parse_tail("map(add, 1) | batch(2)", &a, err, sizeof(err)), 0);
    uint8_t *bytes = NULL;
    size_t len = 0;
    assert_int_equal(pipe_spec_encode(a, &bytes, &len), 0);
    struct pipe_spec *b = decode_ok(bytes, len);
    assert_true(pipe_spec_equal(a, b));
    free(bytes);
    pipe_spec_free(a);
    pipe_spec_free(b);
}

/* The wire form is pinned: definitions written before tar() existed decode as they did, tar()
 * adds kind 4 and field 7 and snapshot() kind 5 without changing anything else. */
static void test_pinned_bytes(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t len;
        const uint8_t bytes[32];
    } pinned[] = {
        /* source { kind: LINES, globs: "a" } */
        {"lines(\"a\")", 7, {0x0a, 0x05, 0x08, 0x03, 0x32, 0x01, 'a'}},
        /* source { kind: TFRECORD, globs: "t" }, ops { kind: TAKE, n: 2 } */
        {"tfrecord(\"t\") | take(2)",
         13,
         {0x0a, 0x05, 0x08, 0x02, 0x32, 0x01, 't', 0x12, 0x04, 0x08, 0x04, 0x20, 0x02}},
        /* source { kind: TAR, globs: "s", exts: "jpg", exts: "cls" } */
        {"tar(\"s\", \"jpg\", \"cls\")",
         17,
         {0x0a, 0x0f, 0x08, 0x04, 0x32, 0x01, 's', 0x3a, 0x03, 'j', 'p', 'g', 0x3a, 0x03, 'c', 'l',
          's'}},
        /* source { kind: SNAPSHOT, globs: "d" } */
        {"snapshot(\"d\")", 7, {0x0a, 0x05, 0x08, 0x05, 0x32, 0x01, 'd'}},
        /* source { kind: PARQUET, globs: "p", columns: "x=1" } */
        {"parquet(\"p\", \"x=1\")",
         12,
         {0x0a, 0x0a, 0x08, 0x06, 0x32, 0x01, 'p', 0x42, 0x03, 'x', '=', '1'}},
    };
    for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++) {
        struct pipe_spec *a = pipeline_parse(pinned[i].text);
        uint8_t *bytes = NULL;
        size_t len = 0;
        assert_int_equal(pipe_spec_encode(a, &bytes, &len), 0);
        assert_int_equal(len, pinned[i].len);
        assert_memory_equal(bytes, pinned[i].bytes, len);
        struct pipe_spec *b = decode_ok(pinned[i].bytes, pinned[i].len);
        assert_true(pipe_spec_equal(a, b));
        free(bytes);
        pipe_spec_free(a);
        pipe_spec_free(b);
    }
}

/* Fields outside an op's kind are not written, so they cannot make equal specs differ. */
static void test_encode_ignores_foreign_fields(void **state)
{
    (void)state;
    struct pipe_spec *a = pipeline_parse("range(10) | repeat() | batch(2) | shard(SHARD_HINT, 1)");
    struct pipe_spec *b = pipeline_parse("range(10) | repeat() | batch(2) | shard(SHARD_HINT, 1)");
    b->ops[0].n = 99;
    b->ops[1].seed = 7;
    b->ops[1].has_seed = true;
    b->ops[2].n = 5;
    uint8_t *ba = NULL, *bb = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(pipe_spec_encode(a, &ba, &la), 0);
    assert_int_equal(pipe_spec_encode(b, &bb, &lb), 0);
    assert_int_equal(la, lb);
    assert_memory_equal(ba, bb, la);
    free(ba);
    free(bb);
    pipe_spec_free(a);
    pipe_spec_free(b);
}

/* ---- Damaged bytes ------------------------------------------------------------------------ */

static int decode_rc(const uint8_t *data, size_t len, char *err, size_t errlen)
{
    struct pipe_spec *spec = (struct pipe_spec *)1;
    int rc = pipe_spec_decode(data, len, &spec, err, errlen);
    if (rc != 0) {
        assert_null(spec);
        return rc;
    }
    /* Whatever decodes is valid: it survives another round trip unchanged. */
    uint8_t *again = NULL;
    size_t len2 = 0;
    assert_int_equal(pipe_spec_encode(spec, &again, &len2), 0);
    struct pipe_spec *b = decode_ok(again, len2);
    assert_true(pipe_spec_equal(spec, b));
    free(again);
    pipe_spec_free(b);
    pipe_spec_free(spec);
    return 0;
}

static void expect_corrupt(const uint8_t *data, size_t len, const char *want)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(decode_rc(data, len, err, sizeof(err)), SLUICE_ERR_CORRUPT);
    assert_string_equal(err, want);
}

static void test_garbage(void **state)
{
    (void)state;
    expect_corrupt((const uint8_t *)"", 0, "dataset definition: missing source");
    const uint8_t ff[] = {0xff, 0xff, 0xff};
    expect_corrupt(ff, sizeof(ff), "dataset definition: malformed protobuf");
    const uint8_t zero_field[] = {0x00, 0x01};
    expect_corrupt(zero_field, sizeof(zero_field), "dataset definition: malformed protobuf");
    const uint8_t group[] = {0x0b, 0x0c};
    expect_corrupt(group, sizeof(group), "dataset definition: malformed protobuf");
    const uint8_t overlong[] = {0x0a, 0x05, 0x08};
    expect_corrupt(overlong, sizeof(overlong), "dataset definition: malformed protobuf");
    /* Well-formed wire data whose field types do not match the schema. */
    const uint8_t wrong_type[] = {0x0d, 1, 2, 3, 4};
    expect_corrupt(wrong_type, sizeof(wrong_type),
                   "dataset definition: not a valid DatasetDef message");
    /* An unknown field alone is skipped, leaving no source. */
    const uint8_t unknown[] = {0x78, 0x01};
    expect_corrupt(unknown, sizeof(unknown), "dataset definition: missing source");
    /* A missing err buffer is fine. */
    struct pipe_spec *spec = NULL;
    assert_int_equal(pipe_spec_decode(ff, sizeof(ff), &spec, NULL, 0), SLUICE_ERR_CORRUPT);
}

/* Every strict prefix and every single-bit flip of a real encoding is either refused as corrupt
 * or decodes to a valid spec; a prefix never decodes to the whole spec. */
static void test_truncations_and_flips(void **state)
{
    (void)state;
    struct pipe_spec *a =
        pipeline_parse("list((1, [\"ab\", \"c\"], 2.5), (2, [\"d\", \"\"], -1.0)) | "
                       "map(f, [1, 2], \"x\") | shuffle(3, 4) | batch(2, "
                       "drop_remainder) | shard(3, 2) | repeat(2)");
    uint8_t *bytes = NULL;
    size_t len = 0;
    assert_int_equal(pipe_spec_encode(a, &bytes, &len), 0);
    char err[SLUICE_ERRMSG_SIZE];
    size_t refused = 0, accepted = 0;
    for (size_t n = 0; n < len; n++) {
        struct pipe_spec *p = NULL;
        int rc = pipe_spec_decode(bytes, n, &p, err, sizeof(err));
        assert_true(rc == 0 || rc == SLUICE_ERR_CORRUPT);
        if (rc == 0) {
            assert_false(pipe_spec_equal(a, p));
            pipe_spec_free(p);
            accepted++;
        } else {
            assert_int_equal(strncmp(err, "dataset definition: ", 20), 0);
            refused++;
        }
    }
    assert_true(refused > 0);
    assert_true(accepted > 0); /* cuts between ops leave a shorter, valid pipeline */

    uint8_t *copy = malloc(len);
    assert_non_null(copy);
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(copy, bytes, len);
            copy[i] ^= (uint8_t)(1u << bit);
            int rc = decode_rc(copy, len, err, sizeof(err));
            assert_true(rc == 0 || rc == SLUICE_ERR_CORRUPT);
        }
    }
    free(copy);
    free(bytes);
    pipe_spec_free(a);
}

/* ---- Hand-built messages ------------------------------------------------------------------ */

/* Allocations for one hand-built message, released by pool_free(). */
static void *pool[4096];
static size_t npool;

static void *talloc(size_t size)
{
    assert_true(npool < sizeof(pool) / sizeof(pool[0]));
    void *p = calloc(1, size);
    assert_non_null(p);
    pool[npool++] = p;
    return p;
}

static void pool_free(void)
{
    while (npool)
        free(pool[--npool]);
}

static Sluice__Value *v_int(int64_t i)
{
    Sluice__Value *v = talloc(sizeof(*v));
    sluice__value__init(v);
    v->kind_case = SLUICE__VALUE__KIND_INT_VALUE;
    v->int_value = i;
    return v;
}

static Sluice__Value *v_float(double f)
{
    Sluice__Value *v = talloc(sizeof(*v));
    sluice__value__init(v);
    v->kind_case = SLUICE__VALUE__KIND_FLOAT_VALUE;
    v->float_value = f;
    return v;
}

static Sluice__Value *v_none(void)
{
    Sluice__Value *v = talloc(sizeof(*v));
    sluice__value__init(v);
    return v;
}

/* A list (tuple = false) or tuple of n items. */
static Sluice__Value *v_seq(bool tuple, size_t n, Sluice__Value **items)
{
    Sluice__Value *v = talloc(sizeof(*v));
    sluice__value__init(v);
    Sluice__ValueList *l = talloc(sizeof(*l));
    sluice__value_list__init(l);
    l->n_items = n;
    if (n) {
        l->items = talloc(n * sizeof(*l->items));
        memcpy(l->items, items, n * sizeof(*items));
    }
    if (tuple) {
        v->kind_case = SLUICE__VALUE__KIND_TUPLE_VALUE;
        v->tuple_value = l;
    } else {
        v->kind_case = SLUICE__VALUE__KIND_LIST_VALUE;
        v->list_value = l;
    }
    return v;
}

static Sluice__Value *v_list1(Sluice__Value *a)
{
    return v_seq(false, 1, &a);
}

static Sluice__Value *v_list2(Sluice__Value *a, Sluice__Value *b)
{
    Sluice__Value *items[] = {a, b};
    return v_seq(false, 2, items);
}

static Sluice__Value *v_tuple2(Sluice__Value *a, Sluice__Value *b)
{
    Sluice__Value *items[] = {a, b};
    return v_seq(true, 2, items);
}

/* A definition with source src and ops; packs it and checks the decoder's verdict. */
static void expect_def(Sluice__SourceDef *src, Sluice__OpDef **ops, size_t nops, const char *want)
{
    Sluice__DatasetDef def = SLUICE__DATASET_DEF__INIT;
    def.source = src;
    def.ops = ops;
    def.n_ops = nops;
    size_t len = sluice__dataset_def__get_packed_size(&def);
    uint8_t *buf = malloc(len + 1);
    assert_non_null(buf);
    sluice__dataset_def__pack(&def, buf);
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = decode_rc(buf, len, err, sizeof(err));
    if (want) {
        assert_int_equal(rc, SLUICE_ERR_CORRUPT);
        assert_string_equal(err, want);
    } else {
        if (rc != 0)
            fail_msg("refused: %s", err);
    }
    free(buf);
    pool_free();
}

static Sluice__SourceDef *src_range(int64_t start, int64_t stop, int64_t step)
{
    Sluice__SourceDef *s = talloc(sizeof(*s));
    sluice__source_def__init(s);
    s->kind = SLUICE__SOURCE_DEF__KIND__RANGE;
    s->start = start;
    s->stop = stop;
    s->step = step;
    return s;
}

static Sluice__SourceDef *src_tar(size_t nglobs, char **globs, size_t nexts, char **exts)
{
    Sluice__SourceDef *s = src_range(0, 0, 0);
    s->kind = SLUICE__SOURCE_DEF__KIND__TAR;
    s->n_globs = nglobs;
    s->globs = globs;
    s->n_exts = nexts;
    s->exts = exts;
    return s;
}

static Sluice__SourceDef *src_list(size_t n, Sluice__Value **values)
{
    Sluice__SourceDef *s = talloc(sizeof(*s));
    sluice__source_def__init(s);
    s->kind = SLUICE__SOURCE_DEF__KIND__LIST;
    s->n_values = n;
    if (n) {
        s->values = talloc(n * sizeof(*values));
        memcpy(s->values, values, n * sizeof(*values));
    }
    return s;
}

static void expect_values(size_t n, Sluice__Value **values, const char *want)
{
    expect_def(src_list(n, values), NULL, 0, want);
}

static void test_sources(void **state)
{
    (void)state;
    expect_def(NULL, NULL, 0, "dataset definition: missing source");
    expect_def(src_range(0, 10, 1), NULL, 0, NULL);
    expect_def(src_range(0, 10, 0), NULL, 0,
               "dataset definition: source range: expected a nonzero step, found 0");

    Sluice__SourceDef *s = src_range(0, 10, 1);
    s->kind = (Sluice__SourceDef__Kind)11;
    expect_def(s, NULL, 0, "dataset definition: source: unknown kind 11");
    s = src_range(0, 10, 1);
    s->kind = (Sluice__SourceDef__Kind)-1;
    expect_def(s, NULL, 0, "dataset definition: source: unknown kind -1");

    char *globs[] = {"a", "b"};
    s = src_range(0, 10, 1);
    s->n_globs = 2;
    s->globs = globs;
    expect_def(s, NULL, 0, "dataset definition: source range: globs belong to file sources only");
    s = src_range(0, 10, 1);
    s->kind = SLUICE__SOURCE_DEF__KIND__TFRECORD;
    expect_def(s, NULL, 0,
               "dataset definition: source tfrecord: start, stop and step belong to range only");
    s = src_range(0, 0, 0);
    s->kind = SLUICE__SOURCE_DEF__KIND__LINES;
    expect_def(s, NULL, 0, "dataset definition: source lines: expected at least one file pattern");
    s = src_range(0, 0, 0);
    s->kind = SLUICE__SOURCE_DEF__KIND__LINES;
    s->n_globs = 2;
    s->globs = globs;
    expect_def(s, NULL, 0, NULL);
    s = src_range(0, 0, 0);
    s->kind = SLUICE__SOURCE_DEF__KIND__TFRECORD;
    s->n_globs = 1;
    s->globs = globs;
    s->n_values = 1;
    Sluice__Value *one = v_int(1);
    s->values = &one;
    expect_def(s, NULL, 0, "dataset definition: source tfrecord: values belong to list only");
    s = src_list(0, NULL);
    expect_def(s, NULL, 0, "dataset definition: source list: expected at least one value");
    Sluice__Value *v = v_int(1);
    s = src_list(1, &v);
    s->stop = 3;
    expect_def(s, NULL, 0,
               "dataset definition: source list: start, stop and step belong to range only");

    /* tar: patterns and 1..64 distinct extensions that name a member's extension. */
    char *exts[65];
    char names[65][8];
    for (int i = 0; i < 65; i++) {
        snprintf(names[i], sizeof names[i], "e%d", i);
        exts[i] = names[i];
    }
    expect_def(src_tar(2, globs, 64, exts), NULL, 0, NULL);
    expect_def(src_tar(2, globs, 65, exts), NULL, 0,
               "dataset definition: source tar: expected 1 to 64 extensions, found 65");
    expect_def(src_tar(2, globs, 0, exts), NULL, 0,
               "dataset definition: source tar: expected 1 to 64 extensions, found 0");
    expect_def(src_tar(0, globs, 1, exts), NULL, 0,
               "dataset definition: source tar: expected at least one file pattern");
    static const struct {
        char *ext;
        const char *want;
    } bad[] = {
        {"", "dataset definition: source tar: extension 2: expected a non-empty extension, "
             "found \"\""},
        {".jpg", "dataset definition: source tar: extension 2: expected an extension without a "
                 "leading dot, found \".jpg\""},
        {"a/b", "dataset definition: source tar: extension 2: expected an extension without "
                "'/', found \"a/b\""},
        {"e0", "dataset definition: source tar: extension 2: expected an extension not listed "
               "before, found \"e0\""},
        {"e0.x", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *two[] = {"e0", bad[i].ext};
        expect_def(src_tar(1, globs, 2, two), NULL, 0, bad[i].want);
    }
    s = src_tar(1, globs, 1, exts);
    s->kind = SLUICE__SOURCE_DEF__KIND__LINES;
    expect_def(s, NULL, 0, "dataset definition: source lines: exts belong to tar only");
    s = src_range(0, 10, 1);
    s->n_exts = 1;
    s->exts = exts;
    expect_def(s, NULL, 0, "dataset definition: source range: exts belong to tar only");
    s = src_range(0, 0, 0);
    s->kind = (Sluice__SourceDef__Kind)11;
    expect_def(s, NULL, 0, "dataset definition: source: unknown kind 11");

    /* parquet: patterns, and 0 to 64 distinct columns "NAME" or "NAME=DEFAULT". */
    char *cols[] = {"text", "label=-1", "label", "=1", "x\ny"};
    s = src_tar(1, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__PARQUET;
    expect_def(s, NULL, 0, NULL);
    s = src_tar(1, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__PARQUET;
    s->n_columns = 2;
    s->columns = cols;
    expect_def(s, NULL, 0, NULL);
    s = src_tar(0, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__PARQUET;
    expect_def(s, NULL, 0,
               "dataset definition: source parquet: expected at least one file pattern");
    s = src_tar(1, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__PARQUET;
    s->n_columns = 3;
    s->columns = cols;
    expect_def(s, NULL, 0,
               "dataset definition: source parquet: column 3: expected a column not listed "
               "before, found \"label\"");
    s = src_tar(1, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__PARQUET;
    s->n_columns = 1;
    s->columns = &cols[3];
    expect_def(s, NULL, 0,
               "dataset definition: source parquet: column 1: expected a column name before any "
               "'=', found \"=1\"");
    s = src_tar(1, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__PARQUET;
    s->n_columns = 1;
    s->columns = &cols[4];
    expect_def(s, NULL, 0,
               "dataset definition: source parquet: column 1: expected a column without control "
               "characters, found \"x\ny\"");
    s = src_tar(1, globs, 1, exts);
    s->kind = SLUICE__SOURCE_DEF__KIND__PARQUET;
    expect_def(s, NULL, 0, "dataset definition: source parquet: exts belong to tar only");
    s = src_tar(1, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__TAR;
    s->n_columns = 1;
    s->columns = cols;
    expect_def(s, NULL, 0,
               "dataset definition: source tar: columns belong to parquet and jsonl only");
    /* jsonl: 1 to 64 distinct fields. */
    s = src_tar(1, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__JSONL;
    expect_def(s, NULL, 0, "dataset definition: source jsonl: expected 1 to 64 fields, found 0");
    char *fields[] = {"text", "text"};
    s = src_tar(1, globs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__JSONL;
    s->n_columns = 2;
    s->columns = fields;
    expect_def(s, NULL, 0,
               "dataset definition: source jsonl: field 2: expected a field not listed before, "
               "found \"text\"");

    /* snapshot: exactly one non-empty directory, nothing else. */
    char *dirs[] = {"/snap", "/other", ""};
    s = src_tar(1, dirs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__SNAPSHOT;
    expect_def(s, NULL, 0, NULL);
    s = src_tar(0, dirs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__SNAPSHOT;
    expect_def(s, NULL, 0, "dataset definition: source snapshot: expected one directory, found 0");
    s = src_tar(2, dirs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__SNAPSHOT;
    expect_def(s, NULL, 0, "dataset definition: source snapshot: expected one directory, found 2");
    s = src_tar(1, dirs + 2, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__SNAPSHOT;
    expect_def(s, NULL, 0, "dataset definition: source snapshot: expected a directory, found \"\"");
    s = src_tar(1, dirs, 1, exts);
    s->kind = SLUICE__SOURCE_DEF__KIND__SNAPSHOT;
    expect_def(s, NULL, 0, "dataset definition: source snapshot: exts belong to tar only");
    s = src_range(0, 10, 1);
    s->kind = SLUICE__SOURCE_DEF__KIND__SNAPSHOT;
    s->n_globs = 1;
    s->globs = dirs;
    expect_def(s, NULL, 0,
               "dataset definition: source snapshot: start, stop and step belong to range only");

    /* megatron: exactly one non-empty prefix, nothing else. */
    s = src_tar(1, dirs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__MEGATRON;
    expect_def(s, NULL, 0, NULL);
    s = src_tar(0, dirs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__MEGATRON;
    expect_def(s, NULL, 0, "dataset definition: source megatron: expected one prefix, found 0");
    s = src_tar(2, dirs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__MEGATRON;
    expect_def(s, NULL, 0, "dataset definition: source megatron: expected one prefix, found 2");
    s = src_tar(1, dirs + 2, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__MEGATRON;
    expect_def(s, NULL, 0, "dataset definition: source megatron: expected a prefix, found \"\"");
    s = src_tar(1, dirs, 1, exts);
    s->kind = SLUICE__SOURCE_DEF__KIND__MEGATRON;
    expect_def(s, NULL, 0, "dataset definition: source megatron: exts belong to tar only");
    s = src_tar(1, dirs, 0, NULL);
    s->kind = SLUICE__SOURCE_DEF__KIND__MEGATRON;
    s->n_columns = 1;
    s->columns = dirs;
    expect_def(s, NULL, 0,
               "dataset definition: source megatron: columns belong to parquet and jsonl only");
}

static void test_values(void **state)
{
    (void)state;
    Sluice__Value *v[3];

    v[0] = v_int(1);
    v[1] = v_float(2.0);
    expect_values(2, v,
                  "dataset definition: source list value 2: expected an integer, found a "
                  "float");
    v[0] = v_none();
    expect_values(1, v, "dataset definition: source list value 1: a value without a kind");
    v[0] = v_float(NAN);
    expect_values(1, v,
                  "dataset definition: source list value 1: expected a finite number, "
                  "found nan");
    v[0] = v_float(-INFINITY);
    expect_values(1, v,
                  "dataset definition: source list value 1: expected a finite number, "
                  "found -inf");
    v[0] = v_seq(false, 0, NULL);
    expect_values(1, v, "dataset definition: source list value 1: empty list");
    v[0] = v_seq(true, 0, NULL);
    expect_values(1, v, "dataset definition: source list value 1: empty tuple");
    v[0] = v_seq(true, 1, (Sluice__Value *[]){v_int(1)});
    expect_values(1, v,
                  "dataset definition: source list value 1: expected a tuple of 2 to 64 "
                  "components, found 1");
    v[0] = v_tuple2(v_tuple2(v_int(1), v_int(2)), v_int(3));
    expect_values(1, v,
                  "dataset definition: source list value 1: a tuple is only allowed as a "
                  "whole list() value");
    v[0] = v_list1(v_tuple2(v_int(1), v_int(2)));
    expect_values(1, v,
                  "dataset definition: source list value 1: a tuple is only allowed as a "
                  "whole list() value");
    v[0] = v_list2(v_int(1), v_float(2.0));
    expect_values(1, v,
                  "dataset definition: source list value 1: expected an integer, found a "
                  "float");
    v[0] = v_list2(v_int(1), v_int(2));
    v[1] = v_list1(v_int(3));
    expect_values(2, v,
                  "dataset definition: source list value 2: expected a list of 2 items, "
                  "found 1");
    v[0] = v_tuple2(v_int(1), v_list2(v_int(1), v_int(2)));
    v[1] = v_tuple2(v_int(2), v_list2(v_int(3), v_int(4)));
    v[2] = v_tuple2(v_int(3), v_int(5));
    expect_values(3, v,
                  "dataset definition: source list value 3: expected a list, found an "
                  "integer");
    v[0] = v_tuple2(v_int(1), v_int(2));
    v[1] = v_seq(true, 3, (Sluice__Value *[]){v_int(1), v_int(2), v_int(3)});
    expect_values(2, v,
                  "dataset definition: source list value 2: expected a tuple of 2 items, "
                  "found 3");
    v[0] = v_tuple2(v_int(1), v_int(2));
    v[1] = v_int(3);
    expect_values(2, v,
                  "dataset definition: source list value 2: expected a tuple, found an "
                  "integer");

    /* Lists nest at most 8 deep (the maximum rank). */
    Sluice__Value *deep = v_int(1);
    for (int i = 0; i < 8; i++)
        deep = v_list1(deep);
    v[0] = deep;
    expect_values(1, v, NULL);
    deep = v_int(1);
    for (int i = 0; i < 9; i++)
        deep = v_list1(deep);
    v[0] = deep;
    expect_values(1, v,
                  "dataset definition: source list value 1: lists nest deeper than 8 "
                  "levels");

    /* Tuples hold at most 64 components. */
    Sluice__Value *comps[65];
    for (int i = 0; i < 65; i++)
        comps[i] = v_int(i);
    v[0] = v_seq(true, 64, comps);
    expect_values(1, v, NULL);
    for (int i = 0; i < 65; i++) /* the pool was emptied by the check above */
        comps[i] = v_int(i);
    v[0] = v_seq(true, 65, comps);
    expect_values(1, v,
                  "dataset definition: source list value 1: expected a tuple of 2 to 64 "
                  "components, found 65");
}

static Sluice__OpDef *op_new(Sluice__OpDef__Kind kind)
{
    Sluice__OpDef *op = talloc(sizeof(*op));
    sluice__op_def__init(op);
    op->kind = kind;
    return op;
}

static void expect_op(Sluice__OpDef *op, const char *want)
{
    Sluice__OpDef *ops[2] = {op_new(SLUICE__OP_DEF__KIND__TAKE), op};
    expect_def(src_range(0, 10, 1), ops, 2, want);
}

static void test_ops(void **state)
{
    (void)state;
    Sluice__OpDef *op = op_new((Sluice__OpDef__Kind)42);
    expect_op(op, "dataset definition: op 2: unknown kind 42");

    op = op_new(SLUICE__OP_DEF__KIND__MAP);
    expect_op(op, "dataset definition: op 2 (map): expected a function name, found \"\"");
    op = op_new(SLUICE__OP_DEF__KIND__FILTER);
    op->fn = "1even";
    expect_op(op, "dataset definition: op 2 (filter): expected a function name, found \"1even\"");
    op = op_new(SLUICE__OP_DEF__KIND__MAP);
    op->fn = "add one";
    expect_op(op, "dataset definition: op 2 (map): expected a function name, found \"add one\"");
    op = op_new(SLUICE__OP_DEF__KIND__MAP);
    op->fn = "add";
    op->n = 1;
    expect_op(op, "dataset definition: op 2 (map): field n does not belong to map");
    op = op_new(SLUICE__OP_DEF__KIND__MAP);
    op->fn = "add";
    op->n_args = 2;
    op->args = talloc(2 * sizeof(*op->args));
    op->args[0] = v_int(1);
    op->args[1] = v_list2(v_float(1.0), v_float(2.0));
    expect_op(op, NULL);
    op = op_new(SLUICE__OP_DEF__KIND__MAP);
    op->fn = "add";
    op->n_args = 2;
    op->args = talloc(2 * sizeof(*op->args));
    op->args[0] = v_int(1);
    op->args[1] = v_tuple2(v_int(1), v_int(2));
    expect_op(op, "dataset definition: op 2 (map) argument 2: a tuple is only allowed as a whole "
                  "list() value");

    op = op_new(SLUICE__OP_DEF__KIND__SHUFFLE);
    expect_op(op, "dataset definition: op 2 (shuffle): expected a buffer size >= 1, found 0");
    op = op_new(SLUICE__OP_DEF__KIND__SHUFFLE);
    op->n = 4;
    op->seed = 3;
    expect_op(op, "dataset definition: op 2 (shuffle): seed is set but has_seed is not");
    op = op_new(SLUICE__OP_DEF__KIND__SHUFFLE);
    op->n = 4;
    op->drop_remainder = 1;
    expect_op(op, "dataset definition: op 2 (shuffle): field drop_remainder does not belong to "
                  "shuffle");
    op = op_new(SLUICE__OP_DEF__KIND__SHUFFLE);
    op->n = 4;
    op->fn = "f";
    expect_op(op, "dataset definition: op 2 (shuffle): field fn does not belong to shuffle");

    op = op_new(SLUICE__OP_DEF__KIND__BATCH);
    op->n = 0;
    expect_op(op, "dataset definition: op 2 (batch): expected a batch size >= 1, found 0");
    op = op_new(SLUICE__OP_DEF__KIND__BATCH);
    op->n = 2;
    op->has_n = 1;
    expect_op(op, "dataset definition: op 2 (batch): field has_n does not belong to batch");

    op = op_new(SLUICE__OP_DEF__KIND__TAKE);
    op->n = -2;
    expect_op(op, "dataset definition: op 2 (take): expected a count >= 0 (or -1 for all), "
                  "found -2");
    op = op_new(SLUICE__OP_DEF__KIND__SKIP);
    op->n = -1;
    expect_op(op, NULL);
    op = op_new(SLUICE__OP_DEF__KIND__SKIP);
    op->index = 1;
    expect_op(op, "dataset definition: op 2 (skip): field index does not belong to skip");

    op = op_new(SLUICE__OP_DEF__KIND__REPEAT);
    op->n = 3;
    expect_op(op, "dataset definition: op 2 (repeat): n is set but has_n is not");
    op = op_new(SLUICE__OP_DEF__KIND__REPEAT);
    op->n = -1;
    op->has_n = 1;
    expect_op(op, "dataset definition: op 2 (repeat): expected a count >= 0, found -1");
    op = op_new(SLUICE__OP_DEF__KIND__REPEAT);
    expect_op(op, NULL);

    op = op_new(SLUICE__OP_DEF__KIND__SHARD);
    expect_op(op, "dataset definition: op 2 (shard): expected a shard count >= 1, found 0");
    op = op_new(SLUICE__OP_DEF__KIND__SHARD);
    op->n = 4;
    op->index = 4;
    expect_op(op, "dataset definition: op 2 (shard): expected a shard index in [0, 4), found 4");
    op = op_new(SLUICE__OP_DEF__KIND__SHARD);
    op->n = 4;
    op->index = -1;
    expect_op(op, "dataset definition: op 2 (shard): expected a shard index >= 0, found -1");
    op = op_new(SLUICE__OP_DEF__KIND__SHARD);
    op->n_is_hint = 1;
    op->n = 2;
    expect_op(op, "dataset definition: op 2 (shard): n is set but n_is_hint says SHARD_HINT");
    op = op_new(SLUICE__OP_DEF__KIND__SHARD);
    op->n = 2;
    op->index_is_hint = 1;
    op->index = 1;
    expect_op(op,
              "dataset definition: op 2 (shard): index is set but index_is_hint says SHARD_HINT");
    op = op_new(SLUICE__OP_DEF__KIND__SHARD);
    op->n_is_hint = 1;
    op->index = 9;
    expect_op(op, NULL);
    op = op_new(SLUICE__OP_DEF__KIND__SHARD);
    op->n = 3;
    op->drop_remainder = 1;
    expect_op(op, "dataset definition: op 2 (shard): field drop_remainder does not belong to "
                  "shard");

    op = op_new(SLUICE__OP_DEF__KIND__PREFETCH);
    expect_op(op, "dataset definition: op 2 (prefetch): expected a buffer size >= 1, found 0");
}

/* Wraps the len bytes ending at *end (written backwards) as field tag of a message. */
static void wrap(uint8_t **p, size_t *len, uint8_t tag)
{
    uint8_t var[10];
    size_t vl = 0;
    for (size_t x = *len;; x >>= 7) {
        var[vl++] = (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
        if (x <= 0x7f)
            break;
    }
    *p -= vl;
    memcpy(*p, var, vl);
    *--*p = tag;
    *len += vl + 1;
}

/* Nesting is bounded before protobuf-c recurses into it: a message nested far deeper than any
 * valid definition is refused quickly and without exhausting the stack. */
static void test_deep_nesting(void **state)
{
    (void)state;
    const size_t levels[] = {8, 12, 20, 200000};
    const char *want[] = {
        NULL,
        "dataset definition: source list value 1: lists nest deeper than 8 levels",
        "dataset definition: messages nest deeper than 32 levels",
        "dataset definition: messages nest deeper than 32 levels",
    };
    for (size_t k = 0; k < sizeof(levels) / sizeof(levels[0]); k++) {
        /* Built backwards from the innermost Value{int_value: 1}. */
        size_t cap = levels[k] * 16 + 64;
        uint8_t *buf = malloc(cap);
        assert_non_null(buf);
        uint8_t *p = buf + cap;
        *--p = 0x01;
        *--p = 0x08;
        size_t len = 2;
        for (size_t i = 0; i < levels[k]; i++) {
            wrap(&p, &len, 0x0a); /* ValueList.items */
            wrap(&p, &len, 0x2a); /* Value.list_value */
        }
        wrap(&p, &len, 0x2a); /* SourceDef.values */
        *--p = 0x01;          /* SourceDef.kind = LIST */
        *--p = 0x08;
        len += 2;
        wrap(&p, &len, 0x0a); /* DatasetDef.source */
        if (want[k]) {
            expect_corrupt(p, len, want[k]);
        } else {
            struct pipe_spec *spec = decode_ok(p, len);
            char text[64];
            pipe_spec_format(spec, text, sizeof(text));
            assert_string_equal(text, "list([[[[[[[[1]]]]]]]])");
            pipe_spec_free(spec);
        }
        free(buf);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_tail_round_trip),
        cmocka_unit_test(test_pinned_bytes), cmocka_unit_test(test_encode_ignores_foreign_fields),
        cmocka_unit_test(test_garbage),      cmocka_unit_test(test_truncations_and_flips),
        cmocka_unit_test(test_sources),      cmocka_unit_test(test_values),
        cmocka_unit_test(test_ops),          cmocka_unit_test(test_deep_nesting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
