/* The pipeline expression parser and the canonical text form: valid expressions with their
 * canonical text, invalid ones with their exact error message and column, columns recorded in
 * specs, clone/equality, and the round trip parse -> format -> parse. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pipeline.h"

#include "common/error.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Formats spec into a new string (checking the snprintf-like length contract on the way). */
static char *format_alloc(const struct pipe_spec *spec)
{
    int n = pipe_spec_format(spec, NULL, 0);
    assert_true(n >= 0);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(pipe_spec_format(spec, buf, (size_t)n + 1), n);
    assert_int_equal(strlen(buf), n);
    return buf;
}

/* ---- Valid expressions and their canonical text ------------------------------------------- */

static const struct {
    const char *text;
    const char *canonical;
} valid[] = {
    {"range(10)", "range(10)"},
    {"  range ( 10 )  ", "range(10)"},
    {"range(2, 10)", "range(2, 10)"},
    {"range(0, 10, 1)", "range(10)"},
    {"range(0,10)", "range(10)"},
    {"range(10, 0, -2)", "range(10, 0, -2)"},
    {"range(0, 10, 3)", "range(0, 10, 3)"},
    {"range(-5,+5)", "range(-5, 5)"},
    {"range(007)", "range(7)"},
    {"range(-0)", "range(0)"},
    {"range(-9223372036854775808, 9223372036854775807)",
     "range(-9223372036854775808, 9223372036854775807)"},
    {"range(3, 3, -3)", "range(3, 3, -3)"},
    {"range(10)\n|\tbatch(2)\r\n", "range(10) | batch(2)"},
    {"list(1, 2, 3)", "list(1, 2, 3)"},
    {"list(-1)", "list(-1)"},
    {"list(1.5, -0.0, 2., +.25)", "list(1.5, -0.0, 2.0, 0.25)"},
    {"list(0.1, 1e100, 1E-5, 0.0001)", "list(0.1, 1e+100, 1e-05, 0.0001)"},
    {"list(1e3, 100.0, 1e16, 1e17)", "list(1000.0, 100.0, 10000000000000000.0, 1e+17)"},
    {"list(0.30000000000000004, 5e-324)", "list(0.30000000000000004, 5e-324)"},
    {"list(1.7976931348623157e308)", "list(1.7976931348623157e+308)"},
    {"list(1e-400)", "list(0.0)"},
    {"list(\"a\", \"b\\n\", \"\\x00\\xFF\")", "list(\"a\", \"b\\n\", \"\\x00\\xff\")"},
    {"list(\"tab\\there\", \"q\\\"uote\", \"back\\\\slash\")",
     "list(\"tab\\there\", \"q\\\"uote\", \"back\\\\slash\")"},
    {"list(\"\xc3\xa9\", \"\x7f\", \"\\x41\")", "list(\"\\xc3\\xa9\", \"\\x7f\", \"A\")"},
    {"list(\"\")", "list(\"\")"},
    {"list(true, false)", "list(true, false)"},
    {"list([1, 2], [3, 4])", "list([1, 2], [3, 4])"},
    {"list([[1], [2]], [[3], [4]])", "list([[1], [2]], [[3], [4]])"},
    {"list([\"a\", \"bc\"])", "list([\"a\", \"bc\"])"},
    {"list([true])", "list([true])"},
    {"list([[[[[[[[1]]]]]]]])", "list([[[[[[[[1]]]]]]]])"},
    {"list((1, \"a\"), (2, \"b\"))", "list((1, \"a\"), (2, \"b\"))"},
    {"list( ( 1 , [1.5, 2.5] ) , (2, [3.5, 4.5]))", "list((1, [1.5, 2.5]), (2, [3.5, 4.5]))"},
    {"list((true, 1, 2.0, \"s\", [[1, 2]]))", "list((true, 1, 2.0, \"s\", [[1, 2]]))"},
    {"tfrecord(\"/data/*.tfrecord\")", "tfrecord(\"/data/*.tfrecord\")"},
    {"tfrecord(\"a\", \"b\")", "tfrecord(\"a\", \"b\")"},
    {"lines(\"a.txt\", \"b\\\\c.txt\")", "lines(\"a.txt\", \"b\\\\c.txt\")"},
    {"lines(\"\")", "lines(\"\")"},
    {"tar(\"/data/shard-*.tar\", \"jpg\", \"cls\")",
     "tar(\"/data/shard-*.tar\", \"jpg\", \"cls\")"},
    {"tar ( \"s.tar\" , \"seg.png\" )", "tar(\"s.tar\", \"seg.png\")"},
    {"tar([\"a.tar\"], \"x\")", "tar(\"a.tar\", \"x\")"},
    {"tar([\"a.tar\", \"b\\\\[1].tar\"], \"cls\", \"jpg\", \"json\")",
     "tar([\"a.tar\", \"b\\\\[1].tar\"], \"cls\", \"jpg\", \"json\")"},
    {"tar(\"\", \"\\x41\\n\")", "tar(\"\", \"A\\n\")"},
    {"parquet(\"/data/*.parquet\")", "parquet(\"/data/*.parquet\")"},
    {"parquet ( \"a.parquet\" , \"text\" , \"label=-1\" )",
     "parquet(\"a.parquet\", \"text\", \"label=-1\")"},
    {"parquet([\"a\", \"b\"], \"x=\")", "parquet([\"a\", \"b\"], \"x=\")"},
    {"parquet([\"a\"])", "parquet(\"a\")"},
    {"jsonl(\"d/*.jsonl.zst\", \"text\")", "jsonl(\"d/*.jsonl.zst\", \"text\")"},
    {"jsonl([\"a\", \"b\"], \"x=1\", \"y\")", "jsonl([\"a\", \"b\"], \"x=1\", \"y\")"},
    {"parquet(\"a\", \"s=a=b\") | batch(2)", "parquet(\"a\", \"s=a=b\") | batch(2)"},
    {"snapshot(\"/data/snap\")", "snapshot(\"/data/snap\")"},
    {"megatron(\"/data/c4_text_document\")", "megatron(\"/data/c4_text_document\")"},
    {" megatron ( \"d/x*[1]\" ) | global_shuffle(3) | map(square)",
     "megatron(\"d/x*[1]\") | global_shuffle(3) | map(square)"},
    {" snapshot ( \"s*[1]\\x41\" ) ", "snapshot(\"s*[1]A\")"},
    {"snapshot(\"/s\") | global_shuffle(7) | shard(2, 1) | take(5) | batch(2)",
     "snapshot(\"/s\") | global_shuffle(7) | shard(2, 1) | take(5) | batch(2)"},
    {"tar(\"s.tar\", \"a.b.c\", \"a.b\", \"a\") | shuffle(10) | batch(4)",
     "tar(\"s.tar\", \"a.b.c\", \"a.b\", \"a\") | shuffle(10) | batch(4)"},
    {"range(10) | map(square) | filter(even)", "range(10) | map(square) | filter(even)"},
    {"range(10)|map(add,1)|filter(lt,5)", "range(10) | map(add, 1) | filter(lt, 5)"},
    {"range(10) | map( identity )", "range(10) | map(identity)"},
    {"range(10) | map(f, -2.5, \"x\", true, [1, 2], [[\"a\"]])",
     "range(10) | map(f, -2.5, \"x\", true, [1, 2], [[\"a\"]])"},
    {"range(10) | map(f, 1, 2.5)", "range(10) | map(f, 1, 2.5)"},
    {"range(10) | map(true)", "range(10) | map(true)"},
    {"range(10) | map(_x9)", "range(10) | map(_x9)"},
    {"range(10) | shuffle(100)", "range(10) | shuffle(100)"},
    {"range(10) | shuffle(100, 42)", "range(10) | shuffle(100, 42)"},
    {"range(10) | shuffle(5, -1)", "range(10) | shuffle(5, -1)"},
    {"range(10) | shuffle(5, 0)", "range(10) | shuffle(5, 0)"},
    {"range(10) | batch(4)", "range(10) | batch(4)"},
    {"range(10) | batch(4, drop_remainder)", "range(10) | batch(4, drop_remainder)"},
    {"range(10) | batch(4, true)", "range(10) | batch(4, drop_remainder)"},
    {"range(10) | batch(4, false)", "range(10) | batch(4)"},
    {"range(10) | take(-1) | take(0) | take(3)", "range(10) | take(-1) | take(0) | take(3)"},
    {"range(10) | skip(-1) | skip(0) | skip(5)", "range(10) | skip(-1) | skip(0) | skip(5)"},
    {"range(10) | repeat() | repeat(0) | repeat(3)",
     "range(10) | repeat() | repeat(0) | repeat(3)"},
    {"range(10) | repeat( )", "range(10) | repeat()"},
    {"range(10) | shard(4, 0) | shard(4, 3)", "range(10) | shard(4, 0) | shard(4, 3)"},
    {"range(10) | shard(SHARD_HINT, SHARD_HINT)", "range(10) | shard(SHARD_HINT, SHARD_HINT)"},
    {"range(10) | shard(SHARD_HINT, 7)", "range(10) | shard(SHARD_HINT, 7)"},
    {"range(10) | shard(3, SHARD_HINT)", "range(10) | shard(3, SHARD_HINT)"},
    {"range(10) | prefetch(1)", "range(10) | prefetch(1)"},
    {"range(1000) | shuffle(64, 7) | map(mul, 3) | filter(odd) | batch(8, drop_remainder) | "
     "repeat(2) | skip(1) | take(10) | prefetch(2)",
     "range(1000) | shuffle(64, 7) | map(mul, 3) | filter(odd) | batch(8, drop_remainder) | "
     "repeat(2) | skip(1) | take(10) | prefetch(2)"},
};

static void test_valid_canonical(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
        struct pipe_spec *spec = pipeline_parse(valid[i].text);
        char *text = format_alloc(spec);
        if (strcmp(text, valid[i].canonical) != 0)
            fail_msg("\"%s\": canonical \"%s\", want \"%s\"", valid[i].text, text,
                     valid[i].canonical);
        free(text);
        pipe_spec_free(spec);
    }
}

/* parse -> format -> parse gives an equal spec with the same text, and so does a clone. */
static void test_valid_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
        struct pipe_spec *a = pipeline_parse(valid[i].text);
        char *ta = format_alloc(a);
        struct pipe_spec *b = pipeline_parse(ta);
        char *tb = format_alloc(b);
        assert_string_equal(ta, tb);
        assert_true(pipe_spec_equal(a, b));
        assert_true(pipe_spec_equal(b, a));

        struct pipe_spec *c = NULL;
        assert_int_equal(pipe_spec_clone(a, &c), 0);
        assert_true(pipe_spec_equal(a, c));
        char *tc = format_alloc(c);
        assert_string_equal(ta, tc);
        assert_int_equal(c->source.column, a->source.column);
        for (size_t k = 0; k < a->nops; k++)
            assert_int_equal(c->ops[k].column, a->ops[k].column);

        free(ta);
        free(tb);
        free(tc);
        pipe_spec_free(a);
        pipe_spec_free(b);
        pipe_spec_free(c);
    }
}

/* ---- Parsed values ------------------------------------------------------------------------ */

static void test_fields(void **state)
{
    (void)state;
    struct pipe_spec *s =
        pipeline_parse("range(-3, 9, 2) | shuffle(8, -5) | batch(3, drop_remainder) | "
                       "take(-1) | repeat() | repeat(4) | shard(SHARD_HINT, 2) | "
                       "map(add, 7, \"a\\x00b\", 2.5, false, [[1, 2], [3, 4]])");
    assert_int_equal(s->source.kind, PIPE_SRC_RANGE);
    assert_int_equal(s->source.start, -3);
    assert_int_equal(s->source.stop, 9);
    assert_int_equal(s->source.step, 2);
    assert_int_equal(s->nops, 7);
    assert_int_equal(s->ops[0].kind, PIPE_OP_SHUFFLE);
    assert_int_equal(s->ops[0].n, 8);
    assert_true(s->ops[0].has_seed);
    assert_int_equal(s->ops[0].seed, -5);
    assert_int_equal(s->ops[1].kind, PIPE_OP_BATCH);
    assert_int_equal(s->ops[1].n, 3);
    assert_true(s->ops[1].drop_remainder);
    assert_int_equal(s->ops[2].kind, PIPE_OP_TAKE);
    assert_int_equal(s->ops[2].n, -1);
    assert_int_equal(s->ops[3].kind, PIPE_OP_REPEAT);
    assert_false(s->ops[3].has_n);
    assert_int_equal(s->ops[4].kind, PIPE_OP_REPEAT);
    assert_true(s->ops[4].has_n);
    assert_int_equal(s->ops[4].n, 4);
    assert_int_equal(s->ops[5].kind, PIPE_OP_SHARD);
    assert_true(s->ops[5].n_is_hint);
    assert_false(s->ops[5].index_is_hint);
    assert_int_equal(s->ops[5].index, 2);

    const struct pipe_op *m = &s->ops[6];
    assert_int_equal(m->kind, PIPE_OP_MAP);
    assert_string_equal(m->fn, "add");
    assert_int_equal(m->nargs, 5);
    assert_int_equal(m->args[0].kind, PIPE_VAL_INT);
    assert_int_equal(m->args[0].i, 7);
    assert_int_equal(m->args[1].kind, PIPE_VAL_BYTES);
    assert_int_equal(m->args[1].slen, 3);
    assert_memory_equal(m->args[1].s, "a\0b", 4); /* NUL-terminated after its 3 bytes */
    assert_int_equal(m->args[2].kind, PIPE_VAL_FLOAT);
    assert_true(m->args[2].f == 2.5);
    assert_int_equal(m->args[3].kind, PIPE_VAL_BOOL);
    assert_int_equal(m->args[3].i, 0);
    const struct pipe_value *l = &m->args[4];
    assert_int_equal(l->kind, PIPE_VAL_LIST);
    assert_int_equal(l->nitems, 2);
    assert_int_equal(l->items[1].kind, PIPE_VAL_LIST);
    assert_int_equal(l->items[1].nitems, 2);
    assert_int_equal(l->items[1].items[0].i, 3);
    pipe_spec_free(s);

    s = pipeline_parse("list((1, [\"x\", \"y\"]), (2, [\"z\", \"w\"]))");
    assert_int_equal(s->source.kind, PIPE_SRC_LIST);
    assert_int_equal(s->source.nvalues, 2);
    const struct pipe_value *t = &s->source.values[1];
    assert_int_equal(t->kind, PIPE_VAL_TUPLE);
    assert_int_equal(t->nitems, 2);
    assert_int_equal(t->items[0].i, 2);
    assert_string_equal(t->items[1].items[1].s, "w");
    pipe_spec_free(s);

    s = pipeline_parse("tar([\"a*\", \"b?\"], \"jpg\", \"seg.png\")");
    assert_int_equal(s->source.kind, PIPE_SRC_TAR);
    assert_int_equal(s->source.column, 1);
    assert_int_equal(s->source.nglobs, 2);
    assert_string_equal(s->source.globs[0], "a*");
    assert_string_equal(s->source.globs[1], "b?");
    assert_int_equal(s->source.nexts, 2);
    assert_string_equal(s->source.exts[0], "jpg");
    assert_string_equal(s->source.exts[1], "seg.png");
    pipe_spec_free(s);

    s = pipeline_parse("snapshot(\"/d/s*\")");
    assert_int_equal(s->source.kind, PIPE_SRC_SNAPSHOT);
    assert_int_equal(s->source.nglobs, 1);
    assert_string_equal(s->source.globs[0], "/d/s*");
    assert_true(pipe_source_reads_files(s->source.kind));
    assert_false(pipe_source_globs(s->source.kind));
    pipe_spec_free(s);

    s = pipeline_parse("megatron(\"/d/x_text_document\")");
    assert_int_equal(s->source.kind, PIPE_SRC_MEGATRON);
    assert_int_equal(s->source.nglobs, 1);
    assert_string_equal(s->source.globs[0], "/d/x_text_document");
    assert_true(pipe_source_reads_files(s->source.kind));
    assert_false(pipe_source_globs(s->source.kind));
    pipe_spec_free(s);

    s = pipeline_parse("lines(\"a*\", \"b?\")");
    assert_int_equal(s->source.kind, PIPE_SRC_LINES);
    assert_int_equal(s->source.nglobs, 2);
    assert_string_equal(s->source.globs[0], "a*");
    assert_string_equal(s->source.globs[1], "b?");
    pipe_spec_free(s);
}

static void test_columns(void **state)
{
    (void)state;
    struct pipe_spec *s = pipeline_parse("  range(10) | batch(2)|take(1)\n | map(f)");
    assert_int_equal(s->source.column, 3);
    assert_int_equal(s->nops, 3);
    assert_int_equal(s->ops[0].column, 15);
    assert_int_equal(s->ops[1].column, 24);
    assert_int_equal(s->ops[2].column, 35);
    pipe_spec_free(s);
}

/* ---- Invalid expressions and their messages ----------------------------------------------- */

static const struct {
    const char *text;
    const char *err;
} invalid[] = {
    {"", "column 1: expected a source, found end of input"},
    {"   ", "column 4: expected a source, found end of input"},
    {"| batch(2)", "column 1: expected a source, found '|'"},
    {"rnage(10)", "column 1: unknown source 'rnage'"},
    {"batch(10)", "column 1: unknown source 'batch'"},
    {"range(10) | batch(", "column 19: expected a number, found end of input"},
    {"range(10) | bach(2)", "column 13: unknown operation 'bach'"},
    {"range(10) | range(2)", "column 13: unknown operation 'range'"},
    {"range(10) |", "column 12: expected an operation, found end of input"},
    {"range(10) | 5", "column 13: expected an operation, found '5'"},
    {"range(10) | batch(2) |", "column 23: expected an operation, found end of input"},
    {"range(10) batch(2)", "column 11: expected '|' or end of input, found 'batch'"},
    {"range(10) @", "column 11: expected '|' or end of input, found '@'"},
    {"range(10))", "column 10: expected '|' or end of input, found ')'"},
    {"range 10", "column 7: expected '(', found '10'"},
    {"range", "column 6: expected '(', found end of input"},
    {"range(10) | batch 2", "column 19: expected '(', found '2'"},
    {"range()", "column 7: expected a number, found ')'"},
    {"range(10", "column 9: expected ',' or ')', found end of input"},
    {"range(1, 2, 0)", "column 13: expected a nonzero step, found '0'"},
    {"range(1, 2, -0)", "column 13: expected a nonzero step, found '-0'"},
    {"range(1, 2, 3, 4)", "column 14: expected ')', found ','"},
    {"range(1.5)", "column 7: expected an integer, found '1.5'"},
    {"range(1e3)", "column 7: expected an integer, found '1e3'"},
    {"range(9223372036854775808)",
     "column 7: expected a 64-bit integer, found '9223372036854775808'"},
    {"range(-9223372036854775809)",
     "column 7: expected a 64-bit integer, found '-9223372036854775809'"},
    {"range(99999999999999999999999)",
     "column 7: expected a 64-bit integer, found '99999999999999999999999'"},
    {"range(1x)", "column 7: expected a number, found '1x'"},
    {"range(0x10)", "column 7: expected a number, found '0x10'"},
    {"range(1.2.3)", "column 7: expected a number, found '1.2.3'"},
    {"range(1e)", "column 7: expected a number, found '1e'"},
    {"range(- 1)", "column 7: expected a number, found '-'"},
    {"range(\"1\")", "column 7: expected a number, found '\"1\"'"},
    {"range(10) | batch(0)", "column 19: expected a batch size >= 1, found '0'"},
    {"range(10) | batch(-3)", "column 19: expected a batch size >= 1, found '-3'"},
    {"range(10) | batch(2, maybe)",
     "column 22: expected drop_remainder, true or false, found 'maybe'"},
    {"range(10) | batch(2, 1)", "column 22: expected drop_remainder, true or false, found '1'"},
    {"range(10) | batch(2, true, 1)", "column 26: expected ')', found ','"},
    {"range(10) | batch(2 3)", "column 21: expected ',' or ')', found '3'"},
    {"range(10) | shuffle(0)", "column 21: expected a buffer size >= 1, found '0'"},
    {"range(10) | shuffle(10, 1.5)", "column 25: expected an integer, found '1.5'"},
    {"range(10) | shuffle(10, 1, 2)", "column 26: expected ')', found ','"},
    {"range(10) | shuffle()", "column 21: expected a number, found ')'"},
    {"range(10) | take(-2)", "column 18: expected a count >= 0 (or -1 for all), found '-2'"},
    {"range(10) | skip(-2)", "column 18: expected a count >= 0 (or -1 for all), found '-2'"},
    {"range(10) | take()", "column 18: expected a number, found ')'"},
    {"range(10) | take(1, 2)", "column 19: expected ')', found ','"},
    {"range(10) | repeat(-1)", "column 20: expected a count >= 0, found '-1'"},
    {"range(10) | repeat(1, 2)", "column 21: expected ')', found ','"},
    {"range(10) | repeat(x)", "column 20: expected a number, found 'x'"},
    {"range(10) | shard(0, 0)", "column 19: expected a shard count >= 1, found '0'"},
    {"range(10) | shard(4, 4)", "column 22: expected a shard index in [0, 4), found '4'"},
    {"range(10) | shard(4, -1)", "column 22: expected a shard index in [0, 4), found '-1'"},
    {"range(10) | shard(SHARD_HINT, -1)", "column 31: expected a shard index >= 0, found '-1'"},
    {"range(10) | shard(4)", "column 20: expected ',', found ')'"},
    {"range(10) | shard(x, 1)", "column 19: expected a number or SHARD_HINT, found 'x'"},
    {"range(10) | shard(2, shard_hint)",
     "column 22: expected a number or SHARD_HINT, found 'shard_hint'"},
    {"range(10) | shard(2, 1, 0)", "column 23: expected ')', found ','"},
    {"range(10) | prefetch(0)", "column 22: expected a buffer size >= 1, found '0'"},
    {"range(10) | map()", "column 17: expected a function name, found ')'"},
    {"range(10) | map(1)", "column 17: expected a function name, found '1'"},
    {"range(10) | map(\"f\")", "column 17: expected a function name, found '\"f\"'"},
    {"range(10) | map(add, )", "column 22: expected a value, found ')'"},
    {"range(10) | map(add, x)", "column 22: expected a value, found 'x'"},
    {"range(10) | map(add 1)", "column 21: expected ',' or ')', found '1'"},
    {"range(10) | map(add, 1", "column 23: expected ',' or ')', found end of input"},
    {"range(10) | map(add, (1, 2))", "column 22: a tuple is only allowed as a whole list() value"},
    {"range(10) | map(f, 1.2.3)", "column 20: expected a number, found '1.2.3'"},
    {"range(10) | map(f, [1, \"a\"])", "column 24: expected an integer, found '\"a\"'"},
    {"list()", "column 6: expected a value, found ')'"},
    {"list(1", "column 7: expected ',' or ')', found end of input"},
    {"list(1, 2.5)", "column 9: expected an integer, found '2.5'"},
    {"list(1.5, 2)", "column 11: expected a float, found '2'"},
    {"list(\"a\", 1)", "column 11: expected a string, found '1'"},
    {"list(true, 1)", "column 12: expected true or false, found '1'"},
    {"list(1, [1])", "column 9: expected an integer, found '['"},
    {"list([1], 1)", "column 11: expected '[', found '1'"},
    {"list([1, 2], [3])", "column 16: expected ',', found ']'"},
    {"list([1], [2, 3])", "column 13: expected ']', found ','"},
    {"list([1, 2.5])", "column 10: expected an integer, found '2.5'"},
    {"list([[1, 2], [3]])", "column 17: expected ',', found ']'"},
    {"list([[1, 2], [3.0, 4.0]])", "column 16: expected an integer, found '3.0'"},
    {"list([1, 2)", "column 11: expected ',' or ']', found ')'"},
    {"list([])", "column 7: expected a value, found ']'"},
    {"list([[[[[[[[[1]]]]]]]]])",
     "column 14: expected a scalar (lists nest at most 8 deep), found '['"},
    {"list(())", "column 7: expected a value, found ')'"},
    {"list((1))", "column 8: expected ',' (a tuple has at least 2 components), found ')'"},
    {"list((1, 2)", "column 12: expected ',' or ')', found end of input"},
    {"list(((1, 2), 3))", "column 7: a tuple is only allowed as a whole list() value"},
    {"list([(1, 2)])", "column 7: a tuple is only allowed as a whole list() value"},
    {"list((1, 2), 3)", "column 14: expected '(', found '3'"},
    {"list(1, (1, 2))", "column 9: expected an integer, found '('"},
    {"list((1, 2), (1, \"a\"))", "column 18: expected an integer, found '\"a\"'"},
    {"list((1, 2), (1, 2, 3))", "column 19: expected ')', found ','"},
    {"list((1, 2, 3), (1, 2))", "column 22: expected ',', found ')'"},
    {"list(\"abc)", "column 6: unterminated string"},
    {"list(\"abc\\\")", "column 6: unterminated string"},
    {"list(\"a\\qb\")", "column 8: expected \\\\, \\\", \\n, \\t or \\xNN, found '\\q'"},
    {"list(\"\\x4g\")", "column 7: expected \\\\, \\\", \\n, \\t or \\xNN, found '\\x4g'"},
    {"list(\"\\xg\")", "column 7: expected \\\\, \\\", \\n, \\t or \\xNN, found '\\xg'"},
    {"list(\"\\x\")", "column 7: expected \\\\, \\\", \\n, \\t or \\xNN, found '\\x'"},
    {"list(\"ab\\x4\")", "column 9: expected \\\\, \\\", \\n, \\t or \\xNN, found '\\x4'"},
    {"list(1e999)", "column 6: expected a finite number, found '1e999'"},
    {"list(-1e999)", "column 6: expected a finite number, found '-1e999'"},
    {"list(inf)", "column 6: expected a value, found 'inf'"},
    {"lines(\"a\\x00b\")", "column 7: a file pattern cannot contain a NUL byte"},
    {"lines()", "column 7: expected a string, found ')'"},
    {"lines(1)", "column 7: expected a string, found '1'"},
    {"tfrecord(\"a\" \"b\")", "column 14: expected ',' or ')', found '\"b\"'"},
    {"tfrecord(\"a\", )", "column 15: expected a string, found ')'"},
    {"tfrecord(\"a", "column 10: unterminated string"},
    {"tar()", "column 5: expected a string, found ')'"},
    {"snapshot()", "column 10: expected a string, found ')'"},
    {"snapshot(1)", "column 10: expected a string, found '1'"},
    {"snapshot(\"\")", "column 10: a snapshot directory cannot be empty"},
    {"snapshot(\"a\\x00b\")", "column 10: a snapshot directory cannot contain a NUL byte"},
    {"snapshot(\"a\", \"b\")", "column 13: expected ')', found ','"},
    {"snapshot([\"a\"])", "column 10: expected a string, found '['"},
    {"snapshot(\"a\"", "column 13: expected ')', found end of input"},
    {"megatron()", "column 10: expected a quoted prefix (megatron(\"PREFIX\") reads PREFIX.idx and "
                   "PREFIX.bin), found ')'"},
    {"megatron(1)",
     "column 10: expected a quoted prefix (megatron(\"PREFIX\") reads PREFIX.idx and "
     "PREFIX.bin), found '1'"},
    {"megatron([\"a\"])", "column 10: expected a quoted prefix (megatron(\"PREFIX\") reads "
                          "PREFIX.idx and PREFIX.bin), found '['"},
    {"megatron(\"\")", "column 10: a megatron prefix cannot be empty"},
    {"megatron(\"a\\x00b\")", "column 10: a megatron prefix cannot contain a NUL byte"},
    {"megatron(\"a\", \"b\")", "column 13: expected ')' (megatron takes one prefix), found ','"},
    {"megatron(\"a\"", "column 13: expected ')' (megatron takes one prefix), found end of input"},
    {"megatron(\"a", "column 10: unterminated string"},
    {"tar(\"a\")", "column 8: expected ',' and a member extension, found ')'"},
    {"tar(\"a\", )", "column 10: expected a string, found ')'"},
    {"tar(\"a\" \"jpg\")", "column 9: expected ',' and a member extension, found '\"jpg\"'"},
    {"tar(\"a\", \"jpg\" \"cls\")", "column 16: expected ',' or ')', found '\"cls\"'"},
    {"tar(\"a\", \"\")", "column 10: expected a non-empty extension, found '\"\"'"},
    {"tar(\"a\", \".jpg\")",
     "column 10: expected an extension without a leading dot, found '\".jpg\"'"},
    {"tar(\"a\", \"x/y\")", "column 10: expected an extension without '/', found '\"x/y\"'"},
    {"tar(\"a\", \"x\\x00y\")",
     "column 10: expected an extension without NUL bytes, found '\"x\\x00y\"'"},
    {"tar(\"a\", \"jpg\", \"cls\", \"jpg\")",
     "column 24: expected an extension not listed before, found '\"jpg\"'"},
    {"tar(\"a\", 1)", "column 10: expected a string, found '1'"},
    {"tar([], \"x\")", "column 6: expected a string, found ']'"},
    {"tar([\"a\"  \"b\"], \"x\")", "column 11: expected ',' or ']', found '\"b\"'"},
    {"tar([\"a\", \"b\", \"x\")", "column 19: expected ',' or ']', found ')'"},
    {"tar([\"a\\x00\"], \"x\")", "column 6: a file pattern cannot contain a NUL byte"},
    {"tar(\"a\", [\"x\"])", "column 10: expected a string, found '['"},
    {"parquet()", "column 9: expected a string, found ')'"},
    {"parquet(\"a\" \"b\")", "column 13: expected ',' or ')', found '\"b\"'"},
    {"parquet(\"a\", \"\")", "column 14: expected a column name before any '=', found '\"\"'"},
    {"parquet(\"a\", \"=1\")", "column 14: expected a column name before any '=', found '\"=1\"'"},
    {"parquet(\"a\", \"x\", \"x=1\")",
     "column 19: expected a column not listed before, found '\"x=1\"'"},
    {"parquet(\"a\", \"x\\ny\")",
     "column 14: expected a column without control characters, found '\"x\\ny\"'"},
    {"parquet(\"a\", 3)", "column 14: expected a string, found '3'"},
    {"jsonl(\"a\")", "column 10: expected ',' and a field, found ')'"},
    {"jsonl(\"a\", \"\")", "column 12: expected a non-empty field name, found '\"\"'"},
    {"jsonl(\"a\", \"x\", \"x\")", "column 17: expected a field not listed before, found '\"x\"'"},
    {"range(10) | \xc3\xa9", "column 13: expected an operation, found '\\xc3'"},
    {"range(10) | \t@", "column 14: expected an operation, found '@'"},
    {"range(10) | aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa(1)",
     "column 13: unknown operation 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'"},
    {"list(\"0123456789012345678901234567890123456789\" 1)",
     "column 49: expected ',' or ')', found '1'"},
    {"list(1 \"0123456789012345678901234567890123456789\")",
     "column 8: expected ',' or ')', found '\"0123456789012345678901234567890...'"},
};

static void test_invalid(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        struct pipe_spec *spec = (struct pipe_spec *)1;
        char err[SLUICE_ERRMSG_SIZE] = "unset";
        int rc = pipe_parse(invalid[i].text, &spec, err, sizeof(err));
        if (rc != SLUICE_ERR_PARSE)
            fail_msg("\"%s\": rc %d, want SLUICE_ERR_PARSE", invalid[i].text, rc);
        assert_null(spec);
        if (strcmp(err, invalid[i].err) != 0) {
            print_error("\"%s\":\n  got  \"%s\"\n  want \"%s\"\n", invalid[i].text, err,
                        invalid[i].err);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* A tuple holds 2..64 components (PIPE_MAX_COMPONENTS). */
static void test_tuple_limit(void **state)
{
    (void)state;
    char text[512];
    size_t o = (size_t)snprintf(text, sizeof(text), "list((0");
    for (int i = 1; i < 64; i++)
        o += (size_t)snprintf(text + o, sizeof(text) - o, ",%d", i % 10);
    snprintf(text + o, sizeof(text) - o, "))");
    struct pipe_spec *spec = pipeline_parse(text);
    assert_int_equal(spec->source.values[0].nitems, 64);
    pipe_spec_free(spec);

    snprintf(text + o, sizeof(text) - o, ",1))");
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_parse(text, &spec, err, sizeof(err)), SLUICE_ERR_PARSE);
    char want[128];
    snprintf(want, sizeof(want),
             "column %zu: expected ')' (a tuple has at most 64 components), found ','", o + 1);
    assert_string_equal(err, want);
}

/* tar() asks for 1..64 member extensions, as an element has 1..64 components. */
static void test_tar_ext_limit(void **state)
{
    (void)state;
    char text[1024];
    size_t o = (size_t)snprintf(text, sizeof(text), "tar(\"s.tar\"");
    for (int i = 0; i < 64; i++)
        o += (size_t)snprintf(text + o, sizeof(text) - o, ", \"e%d\"", i);
    snprintf(text + o, sizeof(text) - o, ")");
    struct pipe_spec *spec = pipeline_parse(text);
    assert_int_equal(spec->source.nexts, 64);
    assert_string_equal(spec->source.exts[63], "e63");
    char *canonical = format_alloc(spec);
    assert_string_equal(canonical, text);
    free(canonical);
    pipe_spec_free(spec);

    snprintf(text + o, sizeof(text) - o, ", \"e64\")");
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_parse(text, &spec, err, sizeof(err)), SLUICE_ERR_PARSE);
    char want[128];
    snprintf(want, sizeof(want),
             "column %zu: expected ')' (an element has at most 64 components), found ','", o + 1);
    assert_string_equal(err, want);
}

/* Deep nesting is refused at the ninth list without recursing further, however deep the text
 * goes; long inputs with many ops parse. */
static void test_large_inputs(void **state)
{
    (void)state;
    size_t depth = 200000;
    char *text = malloc(depth * 2 + 16);
    assert_non_null(text);
    size_t o = (size_t)sprintf(text, "list(");
    memset(text + o, '[', depth);
    o += depth;
    text[o++] = '1';
    memset(text + o, ']', depth);
    o += depth;
    strcpy(text + o, ")");
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_parse(text, &spec, err, sizeof(err)), SLUICE_ERR_PARSE);
    assert_string_equal(err, "column 14: expected a scalar (lists nest at most 8 deep), found '['");
    free(text);

    size_t nops = 5000;
    text = malloc(nops * 16 + 16);
    assert_non_null(text);
    o = (size_t)sprintf(text, "range(10)");
    for (size_t i = 0; i < nops; i++)
        o += (size_t)sprintf(text + o, " | take(%zu)", i);
    spec = pipeline_parse(text);
    assert_int_equal(spec->nops, nops);
    assert_int_equal(spec->ops[nops - 1].n, (int64_t)nops - 1);
    char *canonical = format_alloc(spec);
    assert_string_equal(canonical, text);
    free(canonical);
    pipe_spec_free(spec);
    free(text);

    size_t nvalues = 20000;
    text = malloc(nvalues * 12 + 16);
    assert_non_null(text);
    o = (size_t)sprintf(text, "list(");
    for (size_t i = 0; i < nvalues; i++)
        o += (size_t)sprintf(text + o, "%s[%zu]", i ? ", " : "", i);
    strcpy(text + o, ")");
    spec = pipeline_parse(text);
    assert_int_equal(spec->source.nvalues, nvalues);
    pipe_spec_free(spec);
    free(text);
}

/* ---- Tails -------------------------------------------------------------------------------- */

static void test_tail(void **state)
{
    (void)state;
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_parse_tail(" map(add, 1) | batch(2)", &spec, err, sizeof(err)), 0);
    assert_int_equal(spec->source.kind, PIPE_SRC_RANGE);
    assert_int_equal(spec->source.start, 0);
    assert_int_equal(spec->source.stop, 0);
    assert_int_equal(spec->nops, 2);
    assert_int_equal(spec->ops[0].kind, PIPE_OP_MAP);
    assert_int_equal(spec->ops[0].column, 2);
    assert_int_equal(spec->ops[1].kind, PIPE_OP_BATCH);
    assert_int_equal(spec->ops[1].column, 16);
    pipe_spec_free(spec);

    static const struct {
        const char *text;
        const char *err;
    } bad[] = {
        {"", "column 1: expected an operation, found end of input"},
        {"range(10)", "column 1: unknown operation 'range'"},
        {"| batch(2)", "column 1: expected an operation, found '|'"},
        {"batch(2) |", "column 11: expected an operation, found end of input"},
        {"batch(2) take(1)", "column 10: expected '|' or end of input, found 'take'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        spec = (struct pipe_spec *)1;
        assert_int_equal(pipe_parse_tail(bad[i].text, &spec, err, sizeof(err)), SLUICE_ERR_PARSE);
        assert_null(spec);
        assert_string_equal(err, bad[i].err);
    }
}

/* ---- Equality, clone, format contract ----------------------------------------------------- */

static bool equal_texts(const char *a, const char *b)
{
    struct pipe_spec *sa = pipeline_parse(a), *sb = pipeline_parse(b);
    bool eq = pipe_spec_equal(sa, sb);
    assert_true(pipe_spec_equal(sb, sa) == eq);
    pipe_spec_free(sa);
    pipe_spec_free(sb);
    return eq;
}

static void test_equal(void **state)
{
    (void)state;
    assert_true(equal_texts("range(10)", "range(0, 10, 1)"));
    assert_true(equal_texts("range(10) | batch(2, false)", "range(10)|batch(2)"));
    assert_true(equal_texts("list(\"\\x41\")", "list(\"A\")"));
    assert_false(equal_texts("range(10)", "range(11)"));
    assert_false(equal_texts("range(10)", "range(10) | take(1)"));
    assert_false(equal_texts("range(10) | take(1)", "range(10) | skip(1)"));
    assert_false(equal_texts("range(10) | batch(2)", "range(10) | batch(2, drop_remainder)"));
    assert_false(equal_texts("range(10) | repeat()", "range(10) | repeat(0)"));
    assert_false(equal_texts("range(10) | shuffle(2)", "range(10) | shuffle(2, 0)"));
    assert_false(equal_texts("range(10) | shard(2, 0)", "range(10) | shard(2, SHARD_HINT)"));
    assert_false(equal_texts("range(10) | map(f)", "range(10) | filter(f)"));
    assert_false(equal_texts("range(10) | map(f)", "range(10) | map(g)"));
    assert_false(equal_texts("range(10) | map(f, 1)", "range(10) | map(f, 1.0)"));
    assert_false(equal_texts("range(10) | map(f, 1)", "range(10) | map(f, true)"));
    assert_false(equal_texts("range(10) | map(f, 1)", "range(10) | map(f, [1])"));
    assert_false(equal_texts("list(0.0)", "list(-0.0)"));
    assert_false(equal_texts("list(\"a\")", "list(\"a\\x00\")"));
    assert_false(equal_texts("list([1, 2])", "list([1, 3])"));
    assert_false(equal_texts("list((1, 2))", "list([1, 2])"));
    assert_false(equal_texts("lines(\"a\")", "tfrecord(\"a\")"));
    assert_false(equal_texts("lines(\"a\")", "lines(\"a\", \"a\")"));
    assert_true(equal_texts("tar(\"a\", \"x\")", "tar([\"a\"], \"x\")"));
    assert_false(equal_texts("tar(\"a\", \"x\")", "lines(\"a\")"));
    assert_false(equal_texts("tar(\"a\", \"x\", \"y\")", "tar(\"a\", \"y\", \"x\")"));
    assert_false(equal_texts("tar(\"a\", \"x\")", "tar(\"a\", \"x\", \"y\")"));
    assert_false(equal_texts("tar(\"a\", \"x\")", "tar([\"a\", \"b\"], \"x\")"));
    assert_false(equal_texts("tar(\"a\", \"x\")", "tar(\"b\", \"x\")"));

    /* Fields that do not belong to an op's kind take no part in equality. */
    struct pipe_spec *a = pipeline_parse("range(10) | repeat() | batch(2)");
    struct pipe_spec *b = pipeline_parse("range(10) | repeat() | batch(2)");
    b->ops[0].n = 99;
    b->ops[1].seed = 7;
    assert_true(pipe_spec_equal(a, b));
    pipe_spec_free(a);
    pipe_spec_free(b);
}

/* Which pipelines never end (coordinated reads need one). */
static void test_endless(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        bool endless;
    } cases[] = {
        {"range(100)", false},
        {"range(10) | repeat()", true},
        {"range(10) | repeat(3)", false},
        {"range(10) | repeat(0)", false},
        {"range(10) | repeat() | repeat(0)", false},
        {"range(10) | repeat(0) | repeat()", true},
        {"range(10) | repeat() | filter(even)", true},
        {"range(10) | repeat() | map(square) | batch(4) | shuffle(8) | shard(2, 0)", true},
        {"range(10) | repeat() | skip(5) | prefetch(2)", true},
        {"range(10) | repeat() | take(5)", false},
        {"range(10) | take(5) | repeat()", true},
        {"range(10) | repeat() | take(5) | repeat(2)", false},
        {"range(10) | repeat() | take(5) | repeat()", true},
        {"lines(\"x\") | repeat()", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pipe_spec *spec = pipeline_parse(cases[i].text);
        if (pipe_spec_endless(spec) != cases[i].endless)
            fail_msg("'%s': expected %s", cases[i].text, cases[i].endless ? "endless" : "finite");
        pipe_spec_free(spec);
    }
}

static void test_format_truncates(void **state)
{
    (void)state;
    struct pipe_spec *spec = pipeline_parse("range(10) | batch(2)");
    char buf[8];
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(pipe_spec_format(spec, buf, sizeof(buf)), 20);
    assert_string_equal(buf, "range(1");
    assert_int_equal(pipe_spec_format(spec, buf, 1), 20);
    assert_string_equal(buf, "");
    assert_int_equal(pipe_spec_format(spec, NULL, 0), 20);
    pipe_spec_free(spec);

    /* The canonical text of strings is printable ASCII whatever the bytes. */
    char text[600] = "list(\"";
    size_t o = strlen(text);
    for (int c = 1; c < 256; c++) {
        if (c == '"' || c == '\\')
            text[o++] = '\\';
        text[o++] = (char)c;
    }
    strcpy(text + o, "\")");
    spec = pipeline_parse(text);
    assert_int_equal(spec->source.values[0].slen, 255);
    char *canonical = format_alloc(spec);
    for (const char *c = canonical; *c; c++)
        assert_true(*c >= 0x20 && *c <= 0x7e);
    struct pipe_spec *again = pipeline_parse(canonical);
    assert_true(pipe_spec_equal(spec, again));
    free(canonical);
    pipe_spec_free(again);
    pipe_spec_free(spec);
}

/* Errors never write past errlen and tolerate a missing buffer. */
static void test_error_buffer(void **state)
{
    (void)state;
    struct pipe_spec *spec = NULL;
    assert_int_equal(pipe_parse("range(", &spec, NULL, 0), SLUICE_ERR_PARSE);
    assert_null(spec);
    char err[12];
    memset(err, 'x', sizeof(err));
    assert_int_equal(pipe_parse("range(", &spec, err, 10), SLUICE_ERR_PARSE);
    assert_string_equal(err, "column 7:");
    assert_int_equal(err[10], 'x');
    assert_int_equal(pipe_parse("range(1) | bach(1)", &spec, err, 5), SLUICE_ERR_PARSE);
    assert_string_equal(err, "colu");
    /* A successful parse leaves an empty message. */
    char ok[16] = "stale";
    assert_int_equal(pipe_parse("range(1)", &spec, ok, sizeof(ok)), 0);
    assert_string_equal(ok, "");
    pipe_spec_free(spec);
    pipe_spec_free(NULL);
    pipe_value_release(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_canonical), cmocka_unit_test(test_valid_round_trip),
        cmocka_unit_test(test_fields),          cmocka_unit_test(test_columns),
        cmocka_unit_test(test_invalid),         cmocka_unit_test(test_tuple_limit),
        cmocka_unit_test(test_large_inputs),    cmocka_unit_test(test_tail),
        cmocka_unit_test(test_equal),           cmocka_unit_test(test_format_truncates),
        cmocka_unit_test(test_error_buffer),    cmocka_unit_test(test_endless),
        cmocka_unit_test(test_tar_ext_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
