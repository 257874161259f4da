/* parse_example: tf.train.Example records written byte by byte in this file (a literal record and
 * a small protobuf writer of the test's own, never sluice's code or protobuf-c), decoded and
 * compared as exact text. Covers packed and unpacked lists, variable length, defaults, missing
 * features, wrong types and counts, malformed records, protobuf's merge rules, the element's
 * layout, spec errors, and the record's origin in the pipeline's error. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pb.h"
#include "lib/pipeline.h"

#include "common/error.h"
#include "pipeline/example.h"
#include "pipeline/files.h"
#include "pipeline/format.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct sluice_registry *reg;

/* ---- Feature messages, written with lib/pb.h --------------------------------------------- */

static struct pb int64s(const int64_t *v, size_t n, bool packed)
{
    struct pb list = {0}, f = {0};
    if (packed) {
        struct pb body = {0};
        for (size_t i = 0; i < n; i++)
            pb_varint(&body, (uint64_t)v[i]);
        pb_msg(&list, 1, &body);
    } else {
        for (size_t i = 0; i < n; i++) {
            pb_tag(&list, 1, 0);
            pb_varint(&list, (uint64_t)v[i]);
        }
    }
    pb_msg(&f, 3, &list);
    return f;
}

static struct pb floats(const float *v, size_t n, bool packed)
{
    struct pb list = {0}, f = {0};
    if (packed) {
        struct pb body = {0};
        for (size_t i = 0; i < n; i++)
            pb_f32(&body, v[i]);
        pb_msg(&list, 1, &body);
    } else {
        for (size_t i = 0; i < n; i++) {
            pb_tag(&list, 1, 5);
            pb_f32(&list, v[i]);
        }
    }
    pb_msg(&f, 2, &list);
    return f;
}

static struct pb bytes_list(const char *const *v, size_t n)
{
    struct pb list = {0}, f = {0};
    for (size_t i = 0; i < n; i++)
        pb_len(&list, 1, v[i], strlen(v[i]));
    pb_msg(&f, 1, &list);
    return f;
}

static struct pb example(const struct pb *features)
{
    struct pb ex = {0};
    pb_msg(&ex, 1, features);
    return ex;
}

/* ---- Decoding ---------------------------------------------------------------------------- */

/* Decodes rec with the given specs; on success returns the element's text, on failure the code
 * and the error message as "ERR <code>: <message>". */
static char *decode(const uint8_t *rec, size_t len, const char *const *specs, size_t n)
{
    struct pipe_feature_spec s[PIPE_MAX_COMPONENTS];
    char err[SLUICE_ERRMSG_SIZE] = "";
    for (size_t i = 0; i < n; i++)
        assert_int_equal(
            pipe_feature_spec_parse(specs[i], strlen(specs[i]), &s[i], err, sizeof(err)), 0);
    struct sluice_element e;
    pipe_elem_init(&e);
    assert_int_equal(pipe_elem_resize(&e, n), 0);
    int rc = pipe_example_decode(rec, len, s, n, e.t, err, sizeof(err));
    char *out;
    if (rc) {
        size_t cap = sizeof err + 32;
        out = malloc(cap);
        snprintf(out, cap, "ERR %d: %s", rc, err);
    } else {
        struct pipe_buf b = {0};
        assert_int_equal(pipe_format_elem(&b, &e), 0);
        out = strdup(b.p);
        pipe_buf_release(&b);
    }
    pipe_elem_release(&e);
    return out;
}

#define SPECS(...) ((const char *const[]){__VA_ARGS__})
#define NSPECS(...) (sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))
#define DECODE(pb, ...) decode((pb).p, (pb).n, SPECS(__VA_ARGS__), NSPECS(__VA_ARGS__))

static void expect(char *got, const char *want)
{
    assert_string_equal(got, want);
    free(got);
}

static char *errf(int code, const char *msg)
{
    static char buf[600];
    snprintf(buf, sizeof(buf), "ERR %d: %s", code, msg);
    return buf;
}

/* ---- A record written out byte by byte --------------------------------------------------- */

/* features {
 *   feature { key: "label"  value { int64_list { value: 7 } } }                 (unpacked)
 *   feature { key: "bbox"   value { float_list { value: [0.5, 1, -2, 0.25] } } } (packed)
 *   feature { key: "image"  value { bytes_list { value: "abc" } } }
 *   feature { key: "tokens" value { int64_list { value: [1, 300, -1] } } }      (packed)
 * } */
static const uint8_t literal[] = {
    0x0a, 0x5c, /* Example.features, 92 bytes */
    /* entry "label": 13 bytes */
    0x0a, 0x0d, 0x0a, 0x05, 'l', 'a', 'b', 'e', 'l', /* key */
    0x12, 0x04, 0x1a, 0x02, 0x08, 0x07,              /* value: int64_list { 1: 7 } */
    /* entry "bbox": 28 bytes */
    0x0a, 0x1c, 0x0a, 0x04, 'b', 'b', 'o', 'x', /* key */
    0x12, 0x14, 0x12, 0x12, 0x0a, 0x10,         /* value: float_list { 1: packed, 16 bytes } */
    0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x80, 0x3e,
    /* entry "image": 16 bytes */
    0x0a, 0x10, 0x0a, 0x05, 'i', 'm', 'a', 'g', 'e',   /* key */
    0x12, 0x07, 0x0a, 0x05, 0x0a, 0x03, 'a', 'b', 'c', /* value: bytes_list { 1: "abc" } */
    /* entry "tokens": 27 bytes */
    0x0a, 0x1b, 0x0a, 0x06, 't', 'o', 'k', 'e', 'n', 's', /* key */
    0x12, 0x11, 0x1a, 0x0f, 0x0a, 0x0d,                   /* value: int64_list { 1: packed } */
    0x01, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};

static void test_literal_record(void **state)
{
    assert_int_equal(sizeof(literal), 94);
    expect(decode(literal, sizeof(literal),
                  SPECS("image:bytes", "label:int64", "bbox:float32[4]", "tokens:int64[-1]"), 4),
           "(abc, 7, [0.5, 1, -2, 0.25], [1, 300, -1])");
    /* Any subset, in any order, the same feature twice. */
    expect(decode(literal, sizeof(literal), SPECS("tokens:int64[-1]", "label:int64", "label:int64"),
                  3),
           "([1, 300, -1], 7, 7)");
    expect(decode(literal, sizeof(literal), SPECS("bbox:float32[2, 2]", "tokens:int64[3, 1]"), 2),
           "([[0.5, 1], [-2, 0.25]], [[1], [300], [-1]])");

    /* The test's writer produces the same bytes. */
    struct pb fs = {0}, f;
    f = int64s((const int64_t[]){7}, 1, false);
    pb_entry(&fs, "label", &f);
    f = floats((const float[]){0.5f, 1.0f, -2.0f, 0.25f}, 4, true);
    pb_entry(&fs, "bbox", &f);
    f = bytes_list(SPECS("abc"), 1);
    pb_entry(&fs, "image", &f);
    f = int64s((const int64_t[]){1, 300, -1}, 3, true);
    pb_entry(&fs, "tokens", &f);
    struct pb ex = example(&fs);
    assert_int_equal(ex.n, sizeof(literal));
    assert_memory_equal(ex.p, literal, sizeof(literal));
}

/* ---- Packed, unpacked, variable length ---------------------------------------------------- */

static void test_packed_and_unpacked(void **state)
{
    struct pb fs = {0}, f;
    f = floats((const float[]){1.5f, -0.125f, 3e-7f}, 3, false);
    pb_entry(&fs, "unpacked_f", &f);
    f = floats((const float[]){1.5f, -0.125f, 3e-7f}, 3, true);
    pb_entry(&fs, "packed_f", &f);
    const int64_t big[] = {0, -1, INT64_MIN, INT64_MAX, 127, 128, 16383, 16384};
    f = int64s(big, 8, false);
    pb_entry(&fs, "unpacked_i", &f);
    f = int64s(big, 8, true);
    pb_entry(&fs, "packed_i", &f);
    /* One list mixing both encodings: 5, packed (6, 7), 8. */
    struct pb list = {0}, body = {0}, mixed = {0};
    pb_tag(&list, 1, 0);
    pb_varint(&list, 5);
    pb_varint(&body, 6);
    pb_varint(&body, 7);
    pb_msg(&list, 1, &body);
    pb_tag(&list, 1, 0);
    pb_varint(&list, 8);
    pb_msg(&mixed, 3, &list);
    pb_entry(&fs, "mixed_i", &mixed);
    struct pb flist = {0}, fbody = {0}, fmixed = {0};
    pb_tag(&flist, 1, 5);
    pb_f32(&flist, 1.0f);
    pb_f32(&fbody, 2.0f);
    pb_f32(&fbody, 4.0f);
    pb_msg(&flist, 1, &fbody);
    pb_msg(&fmixed, 2, &flist);
    pb_entry(&fs, "mixed_f", &fmixed);
    struct pb ex = example(&fs);

    expect(DECODE(ex, "unpacked_f:float32[3]", "packed_f:float32[-1]"),
           "([1.5, -0.125, 3e-07], [1.5, -0.125, 3e-07])");
    expect(DECODE(ex, "unpacked_i:int64[8]", "packed_i:int64[-1]"),
           "([0, -1, -9223372036854775808, 9223372036854775807, 127, 128, 16383, 16384], "
           "[0, -1, -9223372036854775808, 9223372036854775807, 127, 128, 16383, 16384])");
    expect(DECODE(ex, "mixed_i:int64[-1]", "mixed_f:float32[-1]"), "([5, 6, 7, 8], [1, 2, 4])");
    expect(DECODE(ex, "packed_i:int64[-1, 2]"),
           "[[0, -1], [-9223372036854775808, 9223372036854775807], [127, 128], [16383, 16384]]");
}

static void test_variable_length(void **state)
{
    struct pb fs = {0}, f;
    f = int64s(NULL, 0, true);
    pb_entry(&fs, "empty_packed", &f);
    f = int64s(NULL, 0, false);
    pb_entry(&fs, "empty_list", &f);
    f = bytes_list(SPECS("a", "", "ccc"), 3);
    pb_entry(&fs, "tags", &f);
    struct pb none = {0}; /* a Feature with no list set */
    pb_entry(&fs, "nothing", &none);
    struct pb ex = example(&fs);

    expect(DECODE(ex, "empty_packed:int64[-1]", "empty_list:int64[-1]", "tags:bytes[-1]"),
           "([], [], [a, , ccc])");
    /* An empty list still has its type. */
    expect(DECODE(ex, "empty_list:float32[-1]"),
           errf(SLUICE_ERR_TYPE, "feature 'empty_list': holds int64 values, expected float32"));
    /* No list set: no values, of any dtype; a scalar then lacks its value. */
    expect(DECODE(ex, "nothing:bytes[-1]", "nothing:float32[0]"), "([], [])");
    expect(DECODE(ex, "nothing:int64"),
           errf(SLUICE_ERR_TYPE, "feature 'nothing': has 0 values, expected 1"));
    expect(DECODE(ex, "tags:bytes[3]"), "[a, , ccc]");
    expect(DECODE(ex, "tags:bytes[-1, 3]"), "[[a, , ccc]]");
}

/* ---- Defaults, missing features, wrong types and counts ---------------------------------- */

static void test_defaults(void **state)
{
    struct pb fs = {0}, f;
    f = int64s((const int64_t[]){4}, 1, false);
    pb_entry(&fs, "present", &f);
    struct pb ex = example(&fs);

    expect(DECODE(ex, "present:int64=9", "label:int64=-3", "w:float32=0.25", "name:bytes=none",
                  "empty:bytes=", "box:float32[2, 2]=1.5", "ids:int64[3]=0", "t:bytes[2]=x:y"),
           "(4, -3, 0.25, none, , [[1.5, 1.5], [1.5, 1.5]], [0, 0, 0], [x:y, x:y])");
    /* The empty record: every feature is missing. */
    expect(decode((const uint8_t *)"", 0, SPECS("label:int64=1", "score:float32=-0.5"), 2),
           "(1, -0.5)");
}

static void test_missing_wrong_type_wrong_count(void **state)
{
    struct pb fs = {0}, f;
    f = int64s((const int64_t[]){1, 2, 3}, 3, true);
    pb_entry(&fs, "three", &f);
    f = floats((const float[]){1.0f}, 1, true);
    pb_entry(&fs, "score", &f);
    f = bytes_list(SPECS("x", "y"), 2);
    pb_entry(&fs, "pair", &f);
    struct pb ex = example(&fs);

    expect(DECODE(ex, "score:float32", "label:int64"),
           errf(SLUICE_ERR_NOT_FOUND, "feature 'label': missing"));
    expect(DECODE(ex, "score:int64"),
           errf(SLUICE_ERR_TYPE, "feature 'score': holds float32 values, expected int64"));
    expect(DECODE(ex, "three:bytes[-1]"),
           errf(SLUICE_ERR_TYPE, "feature 'three': holds int64 values, expected bytes"));
    expect(DECODE(ex, "pair:float32[2]"),
           errf(SLUICE_ERR_TYPE, "feature 'pair': holds bytes values, expected float32"));
    expect(DECODE(ex, "three:int64"),
           errf(SLUICE_ERR_TYPE, "feature 'three': has 3 values, expected 1"));
    expect(DECODE(ex, "three:int64[4]"),
           errf(SLUICE_ERR_TYPE, "feature 'three': has 3 values, expected 4 (shape [4])"));
    expect(DECODE(ex, "score:float32[2, 1]"),
           errf(SLUICE_ERR_TYPE, "feature 'score': has 1 value, expected 2 (shape [2, 1])"));
    expect(DECODE(ex, "three:int64[-1, 2]"),
           errf(SLUICE_ERR_TYPE,
                "feature 'three': has 3 values, not a multiple of 2 (shape [-1, 2])"));
    /* A default applies only when the feature is missing, not when it is wrong. */
    expect(DECODE(ex, "three:int64=0"),
           errf(SLUICE_ERR_TYPE, "feature 'three': has 3 values, expected 1"));
}

/* ---- Protobuf's merge rules -------------------------------------------------------------- */

static void test_merge_rules(void **state)
{
    struct pb fs = {0}, f;
    /* The last entry with a key wins. */
    f = int64s((const int64_t[]){1}, 1, false);
    pb_entry(&fs, "dup", &f);
    f = int64s((const int64_t[]){2}, 1, false);
    pb_entry(&fs, "dup", &f);
    /* The last oneof member wins: int64_list, then float_list. */
    struct pb kinds = {0}, l1 = {0}, l2 = {0};
    pb_tag(&l1, 1, 0);
    pb_varint(&l1, 5);
    pb_msg(&kinds, 3, &l1);
    pb_tag(&l2, 1, 5);
    pb_f32(&l2, 2.5f);
    pb_msg(&kinds, 2, &l2);
    pb_entry(&fs, "kinds", &kinds);
    /* The same member twice merges: int64_list [1], int64_list [2, 3]. */
    struct pb twice = {0}, a = {0}, b = {0};
    pb_tag(&a, 1, 0);
    pb_varint(&a, 1);
    pb_msg(&twice, 3, &a);
    pb_tag(&b, 1, 0);
    pb_varint(&b, 2);
    pb_tag(&b, 1, 0);
    pb_varint(&b, 3);
    pb_msg(&twice, 3, &b);
    pb_entry(&fs, "twice", &twice);
    /* A member replaced by another and set again: only the last run counts. */
    struct pb back = {0};
    pb_msg(&back, 3, &a);
    pb_msg(&back, 2, &l2);
    pb_msg(&back, 3, &b);
    pb_entry(&fs, "back", &back);
    /* An entry's value given twice merges too: two Feature messages, one list each. */
    struct pb e = {0}, v1 = int64s((const int64_t[]){10}, 1, false),
              v2 = int64s((const int64_t[]){11}, 1, true);
    pb_len(&e, 1, "split", 5);
    pb_msg(&e, 2, &v1);
    pb_msg(&e, 2, &v2);
    pb_msg(&fs, 1, &e);
    /* An entry's key given twice: the last one counts. */
    struct pb k = {0}, kv = int64s((const int64_t[]){42}, 1, false);
    pb_len(&k, 1, "first", 5);
    pb_len(&k, 1, "second", 6);
    pb_msg(&k, 2, &kv);
    pb_msg(&fs, 1, &k);
    /* Example.features twice: the maps merge. */
    struct pb fs2 = {0}, g = int64s((const int64_t[]){99}, 1, false);
    pb_entry(&fs2, "later", &g);
    struct pb ex = example(&fs);
    pb_msg(&ex, 1, &fs2);
    /* Unknown fields anywhere are skipped: Example field 7 (varint), 8 (fixed64), 9 (fixed32). */
    pb_tag(&ex, 7, 0);
    pb_varint(&ex, 300);
    pb_tag(&ex, 8, 1);
    pb_raw(&ex, "12345678", 8);
    pb_tag(&ex, 9, 5);
    pb_raw(&ex, "1234", 4);

    expect(DECODE(ex, "dup:int64", "kinds:float32", "twice:int64[-1]", "back:int64[-1]",
                  "split:int64[-1]", "second:int64", "later:int64"),
           "(2, 2.5, [1, 2, 3], [2, 3], [10, 11], 42, 99)");
    expect(DECODE(ex, "kinds:int64"),
           errf(SLUICE_ERR_TYPE, "feature 'kinds': holds float32 values, expected int64"));
    expect(DECODE(ex, "first:int64"), errf(SLUICE_ERR_NOT_FOUND, "feature 'first': missing"));
}

/* ---- Malformed records ------------------------------------------------------------------- */

static void test_malformed(void **state)
{
    const int corrupt = SLUICE_ERR_CORRUPT;
    /* The literal record cut short, at every length: never a crash, always malformed (every
     * prefix but the empty one ends inside a message). */
    for (size_t n = 1; n < sizeof(literal); n++) {
        char *got = decode(literal, n, SPECS("label:int64=0"), 1);
        char want[32];
        snprintf(want, sizeof(want), "ERR %d: malformed", corrupt);
        assert_true(strncmp(got, want, strlen(want)) == 0);
        free(got);
    }
    expect(decode(literal, 50, SPECS("label:int64"), 1),
           errf(corrupt, "malformed Example: Example: length past the end"));

    struct pb ex = {0};
    pb_tag(&ex, 1, 0); /* Example.features as a varint */
    pb_varint(&ex, 1);
    expect(DECODE(ex, "x:int64"), errf(corrupt, "malformed Example: Example.features: not a "
                                                "message"));
    ex.n = 0;
    pb_tag(&ex, 3, 3); /* a group */
    expect(DECODE(ex, "x:int64"),
           errf(corrupt, "malformed Example: Example: groups are not supported"));
    ex.n = 0;
    pb_tag(&ex, 2, 6); /* wire type 6 */
    expect(DECODE(ex, "x:int64"), errf(corrupt, "malformed Example: Example: unknown wire type"));
    ex.n = 0;
    pb_raw(&ex, "\x0a\x02\x08\x01", 4); /* Features with a varint map entry */
    expect(DECODE(ex, "x:int64"),
           errf(corrupt, "malformed Example: Features.feature: not a map entry"));

    /* Inside a wanted feature: the error names it. */
    struct pb fs = {0}, f = {0}, list = {0};
    pb_len(&list, 1, "\x00\x00\x80\x3f\x00", 5); /* a packed float list of 5 bytes */
    pb_msg(&f, 2, &list);
    pb_entry(&fs, "bad", &f);
    struct pb g = {0}, glist = {0};
    pb_len(&glist, 1, "\x80\x80", 2); /* a packed varint that never ends */
    pb_msg(&g, 3, &glist);
    pb_entry(&fs, "endless", &g);
    struct pb h = {0}, hlist = {0};
    pb_tag(&hlist, 1, 1); /* an int64 value as fixed64 */
    pb_raw(&hlist, "\x01\x00\x00\x00\x00\x00\x00\x00", 8);
    pb_msg(&h, 3, &hlist);
    pb_entry(&fs, "fixed", &h);
    struct pb k = {0}, klist = {0};
    pb_tag(&klist, 1, 0); /* a bytes value as a varint */
    pb_varint(&klist, 1);
    pb_msg(&k, 1, &klist);
    pb_entry(&fs, "str", &k);
    struct pb m = {0};
    pb_tag(&m, 3, 0); /* int64_list as a varint */
    pb_varint(&m, 1);
    pb_entry(&fs, "notmsg", &m);
    struct pb fine = int64s((const int64_t[]){1}, 1, false);
    pb_entry(&fs, "fine", &fine);
    ex = example(&fs);
    expect(DECODE(ex, "bad:float32[-1]"),
           errf(corrupt, "feature 'bad': malformed: a packed float list whose length is not a "
                         "multiple of 4"));
    expect(DECODE(ex, "endless:int64[-1]"),
           errf(corrupt, "feature 'endless': malformed: a bad varint in a packed int64 list"));
    expect(DECODE(ex, "fixed:int64"),
           errf(corrupt, "feature 'fixed': malformed: an int64 value of the wrong wire type"));
    expect(DECODE(ex, "str:bytes"),
           errf(corrupt, "feature 'str': malformed: a bytes value that is not length-delimited"));
    expect(DECODE(ex, "notmsg:int64"),
           errf(corrupt, "feature 'notmsg': malformed: a list that is not a message"));
    /* Features that are not asked for are skipped unchecked. */
    expect(DECODE(ex, "fine:int64"), "1");

    /* An overlong varint: eleven bytes. */
    struct pb o = {0}, ol = {0}, ob = {0};
    pb_raw(&ob, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
    pb_msg(&ol, 1, &ob);
    pb_msg(&o, 3, &ol);
    struct pb ofs = {0};
    pb_entry(&ofs, "long", &o);
    ex = example(&ofs);
    expect(DECODE(ex, "long:int64[-1]"),
           errf(corrupt, "feature 'long': malformed: a bad varint in a packed int64 list"));

    /* Ten bytes whose last carries bits past 64: they are dropped, as protobuf-c does. */
    struct pb t = {0}, tl = {0}, tb = {0};
    pb_raw(&tb, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x05", 11);
    pb_msg(&tl, 1, &tb);
    pb_tag(&tl, 1, 0);
    pb_raw(&tl, "\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", 10);
    pb_msg(&t, 3, &tl);
    struct pb tfs = {0};
    pb_entry(&tfs, "ten", &t);
    ex = example(&tfs);
    expect(DECODE(ex, "ten:int64[-1]"), "[-1, 5, 0]");
}

/* ---- Specs ------------------------------------------------------------------------------- */

static void test_spec_errors(void **state)
{
    static const struct {
        const char *spec, *err;
    } cases[] = {
        {"label", "'label': expected NAME:DTYPE[SHAPE]=DEFAULT"},
        {":int64", "':int64': the feature name is empty"},
        {"x:int32", "'x:int32': unknown dtype 'int32' (bytes, int64 or float32)"},
        {"x:", "'x:': unknown dtype '' (bytes, int64 or float32)"},
        {"x:float", "'x:float': unknown dtype 'float' (bytes, int64 or float32)"},
        {"x:int64[", "'x:int64[': expected a dimension in the shape"},
        {"x:int64[2", "'x:int64[2': expected ',' or ']' in the shape"},
        {"x:int64[2;3]", "'x:int64[2;3]': expected ',' or ']' in the shape"},
        {"x:int64[2, -1]", "'x:int64[2, -1]': dimensions are >= 0; only the first may be -1 "
                           "(variable)"},
        {"x:int64[-2]", "'x:int64[-2]': dimensions are >= 0; only the first may be -1 (variable)"},
        {"x:int64[1,1,1,1,1,1,1,1,1]", "'x:int64[1,1,1,1,1,1,1,1,1]': a shape has at most 8 "
                                       "dimensions"},
        {"x:int64[100000, 100000]", "'x:int64[100000, 100000]': the shape is too large"},
        {"x:int64[2]x", "'x:int64[2]x': unexpected text after the shape"},
        {"x:int64[-1]=0", "'x:int64[-1]=0': a default needs a fixed shape (not a variable first "
                          "dimension)"},
        {"x:int64=abc", "'x:int64=abc': the default is not a 64-bit integer"},
        {"x:int64=1.5", "'x:int64=1.5': the default is not a 64-bit integer"},
        {"x:int64=", "'x:int64=': the default is not a number"},
        {"x:int64=99999999999999999999", "'x:int64=99999999999999999999': the default is not a "
                                         "64-bit integer"},
        {"x:float32=", "'x:float32=': the default is not a number"},
        {"x:float32=1e99", "'x:float32=1e99': the default is not a float32 number"},
        {"x:float32=0.5 ", "'x:float32=0.5 ': the default is not a float32 number"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pipe_feature_spec s;
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc =
            pipe_feature_spec_parse(cases[i].spec, strlen(cases[i].spec), &s, err, sizeof(err));
        assert_int_equal(rc, SLUICE_ERR_INVALID);
        assert_string_equal(err, cases[i].err);
    }
    /* Names may hold anything but ':'. */
    struct pipe_feature_spec s;
    char err[SLUICE_ERRMSG_SIZE];
    const char *ok = "image/object/bbox xmin-1.2:float32[ -1 , 4 ]";
    assert_int_equal(pipe_feature_spec_parse(ok, strlen(ok), &s, err, sizeof(err)), 0);
    assert_int_equal(s.name_len, 26);
    assert_memory_equal(s.name, "image/object/bbox xmin-1.2", 26);
    assert_int_equal(s.rank, 2);
    assert_true(s.variable);
    assert_int_equal(s.inner, 4);
}

/* ---- Through the pipeline ---------------------------------------------------------------- */

/* rec as a quoted string literal of the pipeline language: "\x0a\x5c...". */
static char *quoted(const uint8_t *rec, size_t len)
{
    char *q = malloc(4 * len + 3);
    size_t off = 0;
    q[off++] = '"';
    for (size_t i = 0; i < len; i++)
        off += (size_t)sprintf(q + off, "\\x%02x", rec[i]);
    q[off++] = '"';
    q[off] = '\0';
    return q;
}

/* The pipeline text of list(<rec>) followed by tail. */
static char *list_of(const uint8_t *rec, size_t len, const char *tail)
{
    char *q = quoted(rec, len);
    size_t cap = strlen(q) + strlen(tail) + 32;
    char *text = malloc(cap);
    snprintf(text, cap, "list(%s) | %s", q, tail);
    free(q);
    return text;
}

/* Runs text; returns every element's text, one per line, or "ERR <message>" for a failure
 * (after the lines of the elements before it). */
static char *run(const char *text)
{
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    int rc = pipe_parse(text, &spec, err, sizeof(err));
    if (rc == 0)
        rc = pipe_registry_check(reg, spec, err, sizeof(err));
    if (rc) {
        pipe_spec_free(spec);
        size_t n = strlen(err) + sizeof "ERR ";
        char *out = malloc(n);
        snprintf(out, n, "ERR %s", err);
        return out;
    }
    struct pipe_run *r = NULL;
    assert_int_equal(pipe_open(spec, reg, &r, err, sizeof(err)), 0);
    char *out = pipeline_text(r, NULL);
    pipe_run_free(r);
    pipe_spec_free(spec);
    return out;
}

static void test_map_function(void **state)
{
    char *text = list_of(literal, sizeof(literal),
                         "map(parse_example, \"label:int64\", \"image:bytes\", \"w:int64=5\")");
    expect(run(text), "(7, abc, 5)\n");
    free(text);

    /* The record's companions stay after the features: (record, cls) -> (features..., cls). */
    char *q = quoted(literal, sizeof(literal));
    size_t cap = strlen(q) + 256;
    char *tuple = malloc(cap);
    snprintf(tuple, cap,
             "list((%s, \"cls\", 3)) | map(parse_example, \"label:int64\", \"bbox:float32[4]\")",
             q);
    expect(run(tuple), "(7, [0.5, 1, -2, 0.25], cls, 3)\n");
    snprintf(tuple, cap, "list((%s, \"cls\")) | map(parse_example, \"image:bytes\")", q);
    expect(run(tuple), "(abc, cls)\n");
    free(tuple);
    free(q);

    /* Empty lists into fresh components (no buffers yet). */
    struct pb fs = {0}, f1 = floats(NULL, 0, true), f2 = int64s(NULL, 0, true);
    pb_entry(&fs, "f", &f1);
    pb_entry(&fs, "i", &f2);
    struct pb empties = example(&fs);
    text = list_of(empties.p, empties.n,
                   "map(parse_example, \"f:float32[-1]\", \"i:int64[-1]\", \"b:bytes[0]=x\")");
    expect(run(text), "([], [], [])\n");
    free(text);

    /* Errors through the iterator, without an origin (list() is not a file). */
    text = list_of(literal, sizeof(literal), "map(parse_example, \"nope:int64\")");
    expect(run(text), "ERR map(parse_example): feature 'nope': missing");
    free(text);
    expect(run("range(3) | map(parse_example, \"x:int64\")"),
           "ERR map(parse_example): component 0 must be a scalar bytes record (a serialized "
           "Example)");
    /* Argument checks before anything runs. */
    expect(run("range(3) | map(parse_example, \"x:int32\")"),
           "ERR column 12: map(parse_example): 'x:int32': unknown dtype 'int32' (bytes, int64 or "
           "float32)");
    expect(run("range(3) | map(parse_example, 3)"),
           "ERR column 12: map(parse_example): argument 1 must be a string "
           "\"NAME:DTYPE[SHAPE]=DEFAULT\"");
    expect(run("range(3) | map(parse_example)"),
           "ERR column 12: map(parse_example) takes 1 to 64 arguments, got 0");
}

/* ---- The record's origin in errors ------------------------------------------------------- */

static void test_origin_in_errors(void **state)
{
    char dir[] = "/tmp/sluice-test-example-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/a.tfrecord", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    /* Record 0 (offset 0) has a label; record 1 (offset 12 + 94 + 4 = 110) has none. */
    assert_int_equal(pipe_tfrecord_write(f, literal, sizeof(literal)), 0);
    struct pb fs = {0}, g = int64s((const int64_t[]){1}, 1, false);
    pb_entry(&fs, "other", &g);
    struct pb ex = example(&fs);
    assert_int_equal(pipe_tfrecord_write(f, ex.p, ex.n), 0);
    fclose(f);

    char text[512], want[512];
    snprintf(text, sizeof(text), "tfrecord(\"%s\") | map(parse_example, \"label:int64\")", path);
    snprintf(want, sizeof(want),
             "7\nERR map(parse_example): feature 'label': missing (record at %s offset 110)", path);
    expect(run(text), want);
    /* Maps and filters in between keep the origin; so does take. */
    snprintf(text, sizeof(text),
             "tfrecord(\"%s\") | map(identity) | take(5) | map(parse_example, \"label:int64\") | "
             "map(add, 1)",
             path);
    snprintf(want, sizeof(want),
             "8\nERR map(parse_example): feature 'label': missing (record at %s offset 110)", path);
    expect(run(text), want);
    /* A later function failing names the record too. */
    snprintf(text, sizeof(text),
             "tfrecord(\"%s\") | map(parse_example, \"label:int64=0\") | "
             "map(parse_example, \"x:int64\")",
             path);
    snprintf(want, sizeof(want),
             "ERR map(parse_example): component 0 must be a scalar bytes record (a serialized "
             "Example) (record at %s offset 0)",
             path);
    expect(run(text), want);
    /* After a shuffle (or batch, or prefetch) the origin is unknown and not named. */
    snprintf(text, sizeof(text),
             "tfrecord(\"%s\") | skip(1) | shuffle(4, 1) | map(parse_example, \"label:int64\")",
             path);
    expect(run(text), "ERR map(parse_example): feature 'label': missing");
    snprintf(text, sizeof(text),
             "tfrecord(\"%s\") | skip(1) | prefetch(2) | map(parse_example, \"label:int64\")",
             path);
    expect(run(text), "ERR map(parse_example): feature 'label': missing");
    /* A map inside the prefetched part still knows it. */
    snprintf(text, sizeof(text),
             "tfrecord(\"%s\") | skip(1) | map(parse_example, \"label:int64\") | prefetch(2)",
             path);
    snprintf(want, sizeof(want),
             "ERR map(parse_example): feature 'label': missing (record at %s offset 110)", path);
    expect(run(text), want);

    unlink(path);
    rmdir(dir);
}

static int setup(void **state)
{
    return pipe_registry_new(&reg);
}

static int teardown(void **state)
{
    pipe_registry_free(reg);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_record),
        cmocka_unit_test(test_packed_and_unpacked),
        cmocka_unit_test(test_variable_length),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_missing_wrong_type_wrong_count),
        cmocka_unit_test(test_merge_rules),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_map_function),
        cmocka_unit_test(test_origin_in_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
