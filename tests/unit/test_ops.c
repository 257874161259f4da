/* The pipeline engine: sources and operators run end to end, compared as whole sequences. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pipeline.h"

#include "common/error.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/source.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct sluice_registry *reg;

/* ---- Helpers ----------------------------------------------------------------------------- */

/* A growable string. */
struct str {
    char *p;
    size_t len, cap;
};

static void str_add(struct str *s, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(s->p ? s->p + s->len : NULL, s->p ? s->cap - s->len : 0, fmt, ap);
        va_end(ap);
        assert_true(n >= 0);
        if (s->p && s->len + (size_t)n < s->cap) {
            s->len += (size_t)n;
            return;
        }
        s->cap = (s->cap + (size_t)n + 1) * 2;
        s->p = realloc(s->p, s->cap);
        assert_non_null(s->p);
    }
}

/* Shortest %.Ng that reads back exactly, with ".0" added to integral values so floats and
 * ints stay distinguishable. */
static void add_float(struct str *s, double v)
{
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (strtod(buf, NULL) == v && (!strchr(buf, 'e') || prec == 17))
            break;
    }
    str_add(s, "%s%s", buf, strpbrk(buf, ".eni") ? "" : ".0");
}

static void add_value(struct str *s, const struct pipe_tensor *t, uint64_t k)
{
    const void *d = t->data;
    switch (t->dtype) {
    case SLUICE_BOOL:
        str_add(s, "%s", ((const uint8_t *)d)[k] ? "true" : "false");
        break;
    case SLUICE_INT8:
        str_add(s, "%d", ((const int8_t *)d)[k]);
        break;
    case SLUICE_INT16:
        str_add(s, "%d", ((const int16_t *)d)[k]);
        break;
    case SLUICE_INT32:
        str_add(s, "%" PRId32, ((const int32_t *)d)[k]);
        break;
    case SLUICE_INT64:
        str_add(s, "%" PRId64, ((const int64_t *)d)[k]);
        break;
    case SLUICE_UINT8:
        str_add(s, "%u", ((const uint8_t *)d)[k]);
        break;
    case SLUICE_UINT16:
        str_add(s, "%u", ((const uint16_t *)d)[k]);
        break;
    case SLUICE_UINT32:
        str_add(s, "%" PRIu32, ((const uint32_t *)d)[k]);
        break;
    case SLUICE_UINT64:
        str_add(s, "%" PRIu64, ((const uint64_t *)d)[k]);
        break;
    case SLUICE_FLOAT32:
        add_float(s, ((const float *)d)[k]);
        break;
    case SLUICE_FLOAT64:
        add_float(s, ((const double *)d)[k]);
        break;
    case SLUICE_BYTES:
        str_add(s, "\"");
        for (uint64_t i = t->offs[k]; i < t->offs[k + 1]; i++) {
            uint8_t c = t->data[i];
            if (c == '\n')
                str_add(s, "\\n");
            else if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
                str_add(s, "\\x%02x", c);
            else
                str_add(s, "%c", c);
        }
        str_add(s, "\"");
        break;
    }
}

static void add_dims(struct str *s, const struct pipe_tensor *t, int dim, uint64_t *k)
{
    if (dim == t->rank) {
        add_value(s, t, (*k)++);
        return;
    }
    str_add(s, "[");
    for (int64_t i = 0; i < t->shape[dim]; i++) {
        if (i)
            str_add(s, ", ");
        add_dims(s, t, dim + 1, k);
    }
    str_add(s, "]");
}

static void add_elem(struct str *s, const struct sluice_element *e)
{
    if (e->n != 1)
        str_add(s, "(");
    for (size_t i = 0; i < e->n; i++) {
        uint64_t k = 0;
        if (i)
            str_add(s, ", ");
        add_dims(s, &e->t[i], 0, &k);
    }
    if (e->n != 1)
        str_add(s, ")");
}

/* Reads up to limit elements of run, formatted and joined with ';'. Returns the last next()
 * result (1 when stopped by the limit). */
static int drain(struct pipe_run *run, size_t limit, struct str *out)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    int rc = 1;
    for (size_t n = 0; n < limit && (rc = pipe_run_next(run, &e)) == 1; n++) {
        if (n)
            str_add(out, ";");
        add_elem(out, &e);
    }
    if (rc == 0) {
        /* The end is sticky. */
        assert_int_equal(pipe_run_next(run, &e), 0);
    } else if (rc < 0) {
        char first[sizeof(run->ctx.err)];
        memcpy(first, run->ctx.err, sizeof(first));
        /* Errors are sticky too, with their message. */
        assert_int_equal(pipe_run_next(run, &e), rc);
        assert_string_equal(run->ctx.err, first);
    }
    pipe_elem_release(&e);
    return rc;
}

static struct pipe_run *open_text(const char *text)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_run *run = NULL;
    if (pipe_open(spec, reg, &run, err, sizeof(err)) != 0)
        fail_msg("%s: open: %s", text, err);
    pipe_spec_free(spec);
    return run;
}

/* Runs text to its end (at most 10000 elements) and returns the sequence; the caller frees. */
static char *run_all(const char *text)
{
    struct pipe_run *run = open_text(text);
    struct str s = {0};
    str_add(&s, "");
    int rc = drain(run, 10000, &s);
    if (rc != 0)
        fail_msg("%s: next returned %d: %s", text, rc, run->ctx.err);
    pipe_run_free(run);
    return s.p;
}

/* Collects the int64 scalars of a run. */
static size_t run_ints(struct pipe_run *run, int64_t *out, size_t max)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    size_t n = 0;
    int rc;
    while ((rc = pipe_run_next(run, &e)) == 1) {
        assert_true(n < max);
        assert_int_equal(e.n, 1);
        assert_int_equal(e.t[0].dtype, SLUICE_INT64);
        out[n++] = *(int64_t *)(void *)e.t[0].data;
    }
    assert_int_equal(rc, 0);
    pipe_elem_release(&e);
    return n;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- Table of whole sequences ------------------------------------------------------------ */

struct seq_case {
    const char *text;
    const char *want; /* elements joined by ';' (a prefix of them when rc is an error) */
    int rc;           /* 0, or the error next() returns after the listed elements */
    const char *err;  /* the error's message */
};

static const struct seq_case seq_cases[] = {
    /* Sources. */
    {"range(5)", "0;1;2;3;4"},
    {"range(2, 10, 3)", "2;5;8"},
    {"range(10, 0, -3)", "10;7;4;1"},
    {"range(0, -4, -1)", "0;-1;-2;-3"},
    {"range(0)", ""},
    {"range(5, 5)", ""},
    {"range(5, 0)", ""},
    {"range(0, 5, -1)", ""},
    {"range(-9223372036854775808, 9223372036854775807, 4611686018427387904)",
     "-9223372036854775808;-4611686018427387904;0;4611686018427387904"},
    {"range(9223372036854775806, 9223372036854775807)", "9223372036854775806"},
    {"list(1, 2, 3)", "1;2;3"},
    {"list(2.5, -0.5)", "2.5;-0.5"},
    {"list(\"a\", \"b\\n\", \"\")", "\"a\";\"b\\n\";\"\""},
    {"list(true, false)", "true;false"},
    {"list([1, 2], [3, 4])", "[1, 2];[3, 4]"},
    {"list([[1], [2]])", "[[1], [2]]"},
    {"list([\"x\", \"yz\"])", "[\"x\", \"yz\"]"},
    {"list([true, false])", "[true, false]"},
    {"list((1, \"a\"), (2, \"b\"))", "(1, \"a\");(2, \"b\")"},
    {"list(([1, 2], 0.5))", "([1, 2], 0.5)"},

    /* map: arithmetic keeps the dtype, wraps, and follows Python's modulo. */
    {"range(4) | map(square)", "0;1;4;9"},
    {"range(3) | map(add, 10)", "10;11;12"},
    {"range(3) | map(mul, -2)", "0;-2;-4"},
    {"range(3) | map(identity)", "0;1;2"},
    {"range(-5, 5) | map(mod, 3)", "1;2;0;1;2;0;1;2;0;1"},
    {"range(-5, 5) | map(mod, -3)", "-2;-1;0;-2;-1;0;-2;-1;0;-2"},
    {"list(-5.5, 5.5) | map(mod, 2)", "0.5;1.5"},
    {"list(-5.5, 5.5) | map(mod, -2)", "-1.5;-0.5"},
    {"list(-4.0, 4.0) | map(mod, 2)", "0.0;0.0"},
    {"list(-4.0, 4.0) | map(mod, -2)", "-0.0;-0.0"},
    {"list(7.5) | map(mod, 2.5)", "0.0"},
    {"range(3) | map(add, 0.5)", "0.5;1.5;2.5"},
    {"range(3) | map(mod, 1.5)", "0.0;1.0;0.5"},
    {"list(9223372036854775807) | map(add, 1)", "-9223372036854775808"},
    {"list(4611686018427387904) | map(mul, 4)", "0"},
    {"list(-9223372036854775808) | map(mod, -1)", "0"},
    {"list(3037000500) | map(square)", "-9223372036709301616"},
    {"list([1, 2], [3, 4]) | map(mul, 2)", "[2, 4];[6, 8]"},
    {"list([1, 2]) | map(mul, 0.5)", "[0.5, 1.0]"},
    {"list([-1.5, 2.5]) | map(square)", "[2.25, 6.25]"},
    {"list((1, 2.5)) | map(add, 1)", "(2, 3.5)"},
    {"range(2) | map(add, 1) | map(mul, 3) | map(add, -1)", "2;5"},
    {"list(true) | map(add, 1)", "", SLUICE_ERR_TYPE,
     "map(add): component 0 has dtype bool, which is not numeric"},
    {"list((1, \"a\")) | map(mul, 2)", "", SLUICE_ERR_TYPE,
     "map(mul): component 1 has dtype bytes, which is not numeric"},

    /* filter. */
    {"range(10) | filter(even)", "0;2;4;6;8"},
    {"range(-3, 4) | filter(odd)", "-3;-1;1;3"},
    {"range(10) | filter(lt, 3)", "0;1;2"},
    {"range(10) | filter(ge, 7)", "7;8;9"},
    {"range(5) | filter(lt, 2.5)", "0;1;2"},
    {"range(5) | filter(ge, -0.5)", "0;1;2;3;4"},
    {"list(1.5, 2.0, 3.0, -4.0) | filter(even)", "2.0;-4.0"},
    {"list(1.5, 2.0, 3.0, -3.0) | filter(odd)", "3.0;-3.0"},
    {"list(0.5, 1.5) | filter(lt, 1)", "0.5"},
    {"list((3, \"x\"), (4, \"y\")) | filter(even)", "(4, \"y\")"},
    {"range(10) | filter(lt, 0)", ""},
    {"list([1, 2]) | filter(even)", "", SLUICE_ERR_TYPE,
     "filter(even): component 0 has shape [2], expected a numeric scalar"},
    {"list(\"a\") | filter(odd)", "", SLUICE_ERR_TYPE,
     "filter(odd): component 0 has dtype bytes, expected a numeric scalar"},
    {"list(true) | filter(lt, 1)", "", SLUICE_ERR_TYPE,
     "filter(lt): component 0 has dtype bool, expected a numeric scalar"},

    /* batch. */
    {"range(7) | batch(3)", "[0, 1, 2];[3, 4, 5];[6]"},
    {"range(7) | batch(3, drop_remainder)", "[0, 1, 2];[3, 4, 5]"},
    {"range(6) | batch(3, drop_remainder)", "[0, 1, 2];[3, 4, 5]"},
    {"range(6) | batch(3)", "[0, 1, 2];[3, 4, 5]"},
    {"range(2) | batch(5, drop_remainder)", ""},
    {"range(2) | batch(5)", "[0, 1]"},
    {"range(0) | batch(3)", ""},
    {"range(3) | batch(1)", "[0];[1];[2]"},
    {"range(8) | batch(2) | batch(2)", "[[0, 1], [2, 3]];[[4, 5], [6, 7]]"},
    {"range(8) | batch(2) | batch(3)", "[[0, 1], [2, 3], [4, 5]];[[6, 7]]"},
    {"list([1, 2], [3, 4], [5, 6]) | batch(2)", "[[1, 2], [3, 4]];[[5, 6]]"},
    {"list(\"a\", \"bc\", \"\", \"def\") | batch(3)", "[\"a\", \"bc\", \"\"];[\"def\"]"},
    {"list([\"a\", \"b\"], [\"c\", \"\"]) | batch(2)", "[[\"a\", \"b\"], [\"c\", \"\"]]"},
    {"list((\"a\", 1), (\"bc\", 2), (\"d\", 3)) | batch(2)",
     "([\"a\", \"bc\"], [1, 2]);([\"d\"], [3])"},
    {"list(\"ab\", \"c\", \"d\", \"ef\") | batch(2) | batch(2)",
     "[[\"ab\", \"c\"], [\"d\", \"ef\"]]"},
    {"range(6) | map(add, 0.5) | batch(4)", "[0.5, 1.5, 2.5, 3.5];[4.5, 5.5]"},
    {"range(6) | batch(4) | batch(2)", "", SLUICE_ERR_TYPE,
     "batch: element 1 has component 0 of int64 [2], but element 0, the first of its batch, "
     "has int64 [4]"},
    {"range(10) | batch(4) | batch(1)", "[[0, 1, 2, 3]];[[4, 5, 6, 7]];[[8, 9]]"},
    {"range(3) | batch(2) | map(add, 1)", "[1, 2];[3]"},

    /* take, skip, shard. */
    {"range(10) | take(3)", "0;1;2"},
    {"range(3) | take(10)", "0;1;2"},
    {"range(3) | take(0)", ""},
    {"range(3) | take(-1)", "0;1;2"},
    {"range(5) | skip(2)", "2;3;4"},
    {"range(3) | skip(5)", ""},
    {"range(3) | skip(3)", ""},
    {"range(3) | skip(-1)", ""},
    {"range(3) | skip(0)", "0;1;2"},
    {"range(10) | skip(2) | take(3)", "2;3;4"},
    {"range(10) | take(3) | skip(1)", "1;2"},
    {"range(10) | shard(3, 1)", "1;4;7"},
    {"range(10) | shard(3, 0)", "0;3;6;9"},
    {"range(10) | shard(1, 0)", "0;1;2;3;4;5;6;7;8;9"},
    {"range(2) | shard(3, 2)", ""},
    {"range(4) | shard(SHARD_HINT, SHARD_HINT)", "0;1;2;3"},
    {"range(12) | batch(2) | shard(2, 1)", "[2, 3];[6, 7];[10, 11]"},

    /* repeat. */
    {"range(3) | repeat(2)", "0;1;2;0;1;2"},
    {"range(3) | repeat(0)", ""},
    {"range(3) | repeat(1)", "0;1;2"},
    {"range(3) | repeat() | take(7)", "0;1;2;0;1;2;0"},
    {"range(0) | repeat()", ""},
    {"range(5) | filter(lt, 0) | repeat()", ""},
    {"range(2) | repeat(2) | repeat(2)", "0;1;0;1;0;1;0;1"},
    {"range(2) | repeat() | repeat(3) | take(5)", "0;1;0;1;0"},
    {"range(4) | take(2) | repeat(2)", "0;1;0;1"},
    {"range(5) | batch(2) | repeat(2)", "[0, 1];[2, 3];[4];[0, 1];[2, 3];[4]"},
    {"range(5) | repeat(2) | batch(3)", "[0, 1, 2];[3, 4, 0];[1, 2, 3];[4]"},
    {"list(\"x\") | repeat(3)", "\"x\";\"x\";\"x\""},
    {"list(true) | repeat(2) | map(add, 1)", "", SLUICE_ERR_TYPE,
     "map(add): component 0 has dtype bool, which is not numeric"},

    /* prefetch. */
    {"range(5) | prefetch(2)", "0;1;2;3;4"},
    {"range(0) | prefetch(2)", ""},
    {"range(5) | prefetch(1) | map(add, 1) | prefetch(3)", "1;2;3;4;5"},
    {"range(3) | prefetch(2) | repeat(2)", "0;1;2;0;1;2"},
    {"range(3) | repeat(2) | prefetch(2)", "0;1;2;0;1;2"},
    {"range(3) | repeat() | prefetch(4) | take(5)", "0;1;2;0;1"},
    {"range(300) | map(mul, 2) | prefetch(7) | batch(100) | map(mod, 7) | take(1) | skip(0) | "
     "batch(1) | map(add, -0.0) | filter(ge, 0) | take(0)",
     ""},
    {"list(1, 2) | map(add, 1) | prefetch(2) | map(mul, 2)", "4;6"},
    {"list(true) | map(add, 1) | prefetch(2)", "", SLUICE_ERR_TYPE,
     "map(add): component 0 has dtype bool, which is not numeric"},
    {"range(3) | prefetch(2) | batch(2) | batch(2)", "", SLUICE_ERR_TYPE,
     "batch: element 1 has component 0 of int64 [1], but element 0, the first of its batch, "
     "has int64 [2]"},
};

static void test_sequences(void **state)
{
    for (size_t i = 0; i < sizeof(seq_cases) / sizeof(seq_cases[0]); i++) {
        const struct seq_case *c = &seq_cases[i];
        struct pipe_run *run = open_text(c->text);
        struct str s = {0};
        str_add(&s, "");
        int rc = drain(run, 10000, &s);
        if (strcmp(s.p, c->want) != 0)
            fail_msg("%s:\n  got  %s\n  want %s", c->text, s.p, c->want);
        if (rc != c->rc)
            fail_msg("%s: rc %d (%s), want %d", c->text, rc, run->ctx.err, c->rc);
        if (c->err && strcmp(run->ctx.err, c->err) != 0)
            fail_msg("%s: error '%s', want '%s'", c->text, run->ctx.err, c->err);
        free(s.p);
        pipe_run_free(run);
    }
}

/* ---- Shuffle ----------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Runs text and checks its output is a permutation of 0..n-1 (n times over for reps). */
static size_t shuffled(const char *text, int64_t *out, size_t max, size_t n, size_t reps)
{
    struct pipe_run *run = open_text(text);
    size_t got = run_ints(run, out, max);
    pipe_run_free(run);
    assert_int_equal(got, n * reps);
    for (size_t r = 0; r < reps; r++) {
        int64_t *sorted = malloc(n * sizeof(*sorted));
        memcpy(sorted, out + r * n, n * sizeof(*sorted));
        qsort(sorted, n, sizeof(*sorted), cmp_i64);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(sorted[i], (int64_t)i);
        free(sorted);
    }
    return got;
}

static void test_shuffle(void **state)
{
    enum { N = 200 };
    int64_t a[N], b[N], c[N], d[2 * N];
    shuffled("range(200) | shuffle(50, 42)", a, N, N, 1);
    shuffled("range(200) | shuffle(50, 42)", b, N, N, 1);
    shuffled("range(200) | shuffle(50, 43)", c, N, N, 1);
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, c, sizeof(a));
    size_t in_place = 0;
    for (size_t i = 0; i < N; i++)
        in_place += a[i] == (int64_t)i;
    assert_true(in_place < N / 4);

    /* Element k enters the buffer only after k - 50 + 1 outputs, so it cannot come earlier. */
    for (size_t pos = 0; pos < N; pos++)
        assert_true(a[pos] <= (int64_t)pos + 49);

    /* A buffer of 1 changes nothing; a buffer larger than the source is a full shuffle. */
    shuffled("range(200) | shuffle(1, 7)", b, N, N, 1);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(b[i], (int64_t)i);
    shuffled("range(200) | shuffle(100000)", b, N, N, 1);
    shuffled("range(200) | shuffle(100000)", c, N, N, 1);
    assert_memory_not_equal(b, c, sizeof(b));

    /* Under repeat each pass reshuffles; the first pass matches the shuffle alone. */
    shuffled("range(200) | shuffle(50, 42) | repeat(2)", d, 2 * N, N, 2);
    assert_memory_equal(d, a, sizeof(a));
    assert_memory_not_equal(d, d + N, sizeof(a));
    int64_t e[2 * N];
    shuffled("range(200) | shuffle(50, 42) | repeat(2)", e, 2 * N, N, 2);
    assert_memory_equal(d, e, sizeof(d));

    /* Batches of shuffled elements keep all of them. */
    char *s = run_all("range(4) | shuffle(4, 5) | batch(4) | map(mul, 0) ");
    assert_string_equal(s, "[0, 0, 0, 0]");
    free(s);
    s = run_all("range(0) | shuffle(4, 5)");
    assert_string_equal(s, "");
    free(s);
}

/* ---- Builtins on other dtypes ------------------------------------------------------------ */

static int call_map(const char *name, struct sluice_element *e, const struct pipe_value *args,
                    size_t nargs, char *err)
{
    const struct pipe_fn *fn = pipe_registry_find(reg, name);
    assert_non_null(fn);
    struct sluice_fn_args a = {args, nargs};
    err[0] = '\0';
    return fn->map(e, &a, fn->user, err, SLUICE_ERRMSG_SIZE);
}

static void set_vec(struct sluice_element *e, enum sluice_dtype dtype, const void *v, size_t n)
{
    const int64_t shape[1] = {(int64_t)(n / sluice_dtype_size(dtype))};
    assert_int_equal(sluice_element_set_num_components(e, 1), 0);
    assert_int_equal(sluice_element_set_tensor(e, 0, dtype, 1, shape, v, n), 0);
}

static void expect_text(const struct sluice_element *e, const char *want)
{
    struct str s = {0};
    str_add(&s, "");
    add_elem(&s, e);
    assert_string_equal(s.p, want);
    free(s.p);
}

static void test_builtin_dtypes(void **state)
{
    struct sluice_element *e = sluice_element_new();
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_value k10 = {.kind = PIPE_VAL_INT, .i = 10};
    struct pipe_value km3 = {.kind = PIPE_VAL_INT, .i = -3};
    struct pipe_value kf = {.kind = PIPE_VAL_FLOAT, .f = 0.5};

    const uint8_t u8[3] = {0, 250, 255};
    set_vec(e, SLUICE_UINT8, u8, sizeof(u8));
    assert_int_equal(call_map("add", e, &k10, 1, err), 0);
    expect_text(e, "[10, 4, 9]");
    assert_int_equal(e->t[0].dtype, SLUICE_UINT8);

    const int8_t i8[3] = {-128, 100, 7};
    set_vec(e, SLUICE_INT8, i8, sizeof(i8));
    assert_int_equal(call_map("mul", e, &k10, 1, err), 0);
    expect_text(e, "[0, -24, 70]");
    set_vec(e, SLUICE_INT8, i8, sizeof(i8));
    assert_int_equal(call_map("mod", e, &km3, 1, err), 0);
    expect_text(e, "[-2, -2, -2]");

    /* Unsigned values modulo a negative K: Python's answer, wrapped into the dtype. */
    const uint16_t u16[3] = {7, 9, 65535};
    set_vec(e, SLUICE_UINT16, u16, sizeof(u16));
    assert_int_equal(call_map("mod", e, &km3, 1, err), 0);
    expect_text(e, "[65534, 0, 0]");
    const uint64_t u64[2] = {UINT64_MAX, 5};
    set_vec(e, SLUICE_UINT64, u64, sizeof(u64));
    assert_int_equal(call_map("mod", e, &k10, 1, err), 0);
    expect_text(e, "[5, 5]");
    set_vec(e, SLUICE_UINT64, u64, sizeof(u64));
    assert_int_equal(call_map("square", e, NULL, 0, err), 0);
    expect_text(e, "[1, 25]");

    /* An integer tensor meeting a float K becomes float64. */
    const int32_t i32[4] = {-2, 0, 3, 2147483647};
    set_vec(e, SLUICE_INT32, i32, sizeof(i32));
    assert_int_equal(call_map("add", e, &kf, 1, err), 0);
    assert_int_equal(e->t[0].dtype, SLUICE_FLOAT64);
    assert_int_equal(e->t[0].len, 32);
    expect_text(e, "[-1.5, 0.5, 3.5, 2147483647.5]");
    const uint8_t u8b[2] = {3, 200};
    set_vec(e, SLUICE_UINT8, u8b, sizeof(u8b));
    assert_int_equal(call_map("mul", e, &kf, 1, err), 0);
    expect_text(e, "[1.5, 100.0]");

    /* float32 stays float32. */
    const float f32[2] = {1.5f, -2.0f};
    set_vec(e, SLUICE_FLOAT32, f32, sizeof(f32));
    assert_int_equal(call_map("mul", e, &kf, 1, err), 0);
    assert_int_equal(e->t[0].dtype, SLUICE_FLOAT32);
    expect_text(e, "[0.75, -1.0]");
    set_vec(e, SLUICE_FLOAT32, f32, sizeof(f32));
    assert_int_equal(call_map("mod", e, &km3, 1, err), 0);
    expect_text(e, "[-1.5, -2.0]");

    /* A bad component leaves the element untouched. */
    assert_int_equal(sluice_element_set_num_components(e, 2), 0);
    assert_int_equal(sluice_element_set_int64(e, 0, 5), 0);
    uint8_t b = 1;
    assert_int_equal(pipe_tensor_set_scalar(&e->t[1], SLUICE_BOOL, &b), 0);
    assert_int_equal(call_map("add", e, &k10, 1, err), SLUICE_ERR_TYPE);
    assert_string_equal(err, "component 1 has dtype bool, which is not numeric");
    expect_text(e, "(5, true)");

    /* Filters read the first component of any numeric dtype. */
    const struct pipe_fn *lt = pipe_registry_find(reg, "lt");
    struct sluice_fn_args a = {&km3, 1};
    int keep = -1;
    uint32_t u = 4000000000u;
    assert_int_equal(sluice_element_set_num_components(e, 1), 0);
    assert_int_equal(pipe_tensor_set_scalar(&e->t[0], SLUICE_UINT32, &u), 0);
    assert_int_equal(lt->filter(e, &a, NULL, &keep, err, sizeof(err)), 0);
    assert_int_equal(keep, 0);
    int16_t i16 = -4;
    assert_int_equal(pipe_tensor_set_scalar(&e->t[0], SLUICE_INT16, &i16), 0);
    assert_int_equal(lt->filter(e, &a, NULL, &keep, err, sizeof(err)), 0);
    assert_int_equal(keep, 1);
    sluice_element_free(e);
}

static void test_bytes_fn(void **state)
{
    char *a = run_all("range(3) | map(bytes, 1000) | map(bytes, 37)");
    char *b = run_all("range(3) | map(bytes, 1000) | map(bytes, 37)");
    assert_string_equal(a, b);
    free(a);
    free(b);

    struct pipe_run *run = open_text("list(1, 2, 1) | map(bytes, 1001)");
    struct pipe_run *run2 = open_text("range(1, 5) | map(bytes, 1001)");
    struct sluice_element e[4];
    for (int i = 0; i < 4; i++) {
        pipe_elem_init(&e[i]);
        assert_int_equal(pipe_run_next(i < 3 ? run : run2, &e[i]), 1);
        assert_int_equal(e[i].n, 1);
        assert_int_equal(e[i].t[0].dtype, SLUICE_BYTES);
        assert_int_equal(e[i].t[0].rank, 0);
        assert_int_equal(e[i].t[0].len, 1001);
        assert_int_equal(e[i].t[0].offs[1], 1001);
    }
    /* Equal elements give equal payloads, wherever they come from; others differ. */
    assert_true(pipe_elem_equal(&e[0], &e[2]));
    assert_true(pipe_elem_equal(&e[0], &e[3]));
    assert_false(pipe_elem_equal(&e[0], &e[1]));
    assert_int_equal(pipe_run_next(run2, &e[3]), 1);
    assert_true(pipe_elem_equal(&e[1], &e[3]));
    pipe_run_free(run2);
    /* The pattern is not constant: count distinct byte values. */
    int seen[256] = {0}, distinct = 0;
    for (size_t i = 0; i < 1001; i++)
        distinct += !seen[e[1].t[0].data[i]]++;
    assert_true(distinct > 200);
    assert_int_equal(pipe_run_next(run, &e[0]), 0);
    pipe_run_free(run);
    for (int i = 0; i < 4; i++)
        pipe_elem_release(&e[i]);

    char *z = run_all("range(2) | map(bytes, 0)");
    assert_string_equal(z, "\"\";\"\"");
    free(z);
}

static void test_sleep_us(void **state)
{
    int64_t t0 = now_ns();
    char *s = run_all("range(5) | map(sleep_us, 2000)");
    int64_t elapsed = now_ns() - t0;
    assert_string_equal(s, "0;1;2;3;4");
    free(s);
    assert_true(elapsed >= 10 * 1000 * 1000);
}

static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* wait_us takes its time without a core: long waits one by one, short ones added up. */
static void test_wait_us(void **state)
{
    int64_t t0 = now_ns(), c0 = cpu_ns();
    char *s = run_all("range(5) | map(wait_us, 4000)");
    int64_t elapsed = now_ns() - t0, cpu = cpu_ns() - c0;
    assert_string_equal(s, "0;1;2;3;4");
    free(s);
    assert_true(elapsed >= 20 * 1000 * 1000);
    assert_true(cpu < elapsed / 2);

    /* 2,000 waits of 10 us: 20 ms in all, less up to a slice (1 ms) paid ahead by an earlier
     * overshoot and up to a slice still owed at the end. */
    t0 = now_ns();
    s = run_all("range(2000) | map(wait_us, 10) | filter(ge, 1997)");
    elapsed = now_ns() - t0;
    assert_string_equal(s, "1997;1998;1999");
    free(s);
    assert_true(elapsed >= 18 * 1000 * 1000);

    s = run_all("range(3) | map(wait_us, 0)");
    assert_string_equal(s, "0;1;2");
    free(s);
}

/* ---- Prefetch and cancellation ----------------------------------------------------------- */

static void test_prefetch_destroy_early(void **state)
{
    /* An infinite upstream: read a little, then free while the thread is producing. */
    struct pipe_run *run = open_text("range(10) | repeat() | map(add, 1) | prefetch(4)");
    struct str s = {0};
    str_add(&s, "");
    assert_int_equal(drain(run, 12, &s), 1);
    assert_string_equal(s.p, "1;2;3;4;5;6;7;8;9;10;1;2");
    free(s.p);
    pipe_run_free(run);

    /* An upstream that never yields: the thread is stuck inside the filter until cancelled. */
    run = open_text("range(10) | repeat() | filter(lt, 0) | prefetch(2)");
    pipe_run_free(run);
    run = open_text("range(10) | repeat() | skip(-1) | prefetch(2)");
    pipe_run_free(run);

    /* Never read at all. */
    run = open_text("range(1000000) | prefetch(3) | prefetch(3)");
    pipe_run_free(run);
}

struct canceller {
    struct pipe_run *run;
};

static void *cancel_soon(void *arg)
{
    struct canceller *c = arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pipe_run_cancel(c->run);
    return NULL;
}

static void test_cancel(void **state)
{
    static const char *const texts[] = {
        "range(10) | repeat() | filter(lt, 0)",
        "range(10) | repeat() | filter(lt, 0) | prefetch(2)",
        "range(10) | repeat() | shard(1000000000000, 999999999999)",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct pipe_run *run = open_text(texts[i]);
        struct canceller c = {run};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, cancel_soon, &c), 0);
        struct sluice_element e;
        pipe_elem_init(&e);
        assert_int_equal(pipe_run_next(run, &e), SLUICE_ERR_CANCELLED);
        assert_string_equal(run->ctx.err, "cancelled");
        assert_int_equal(pipe_run_next(run, &e), SLUICE_ERR_CANCELLED);
        pthread_join(th, NULL);
        pipe_elem_release(&e);
        pipe_run_free(run);
    }
}

/* ---- Buffer reuse ------------------------------------------------------------------------ */

static void test_batch_reuses_buffers(void **state)
{
    struct pipe_run *run = open_text("range(100000) | map(add, 1) | batch(1000)");
    struct sluice_element e;
    pipe_elem_init(&e);
    assert_int_equal(pipe_run_next(run, &e), 1);
    const uint8_t *data = e.t[0].data;
    const struct pipe_tensor *t = e.t;
    int64_t expect = 1;
    for (int b = 0; b < 100; b++) {
        if (b > 0)
            assert_int_equal(pipe_run_next(run, &e), 1);
        assert_ptr_equal(e.t, t);
        assert_ptr_equal(e.t[0].data, data);
        assert_int_equal(e.t[0].shape[0], 1000);
        const int64_t *v = (const int64_t *)(const void *)e.t[0].data;
        for (int i = 0; i < 1000; i++)
            assert_int_equal(v[i], expect++);
    }
    assert_int_equal(pipe_run_next(run, &e), 0);
    pipe_elem_release(&e);
    pipe_run_free(run);
}

/* ---- Opening over splits and tails ------------------------------------------------------- */

static char *run_splits(const char *text, const struct split *splits, size_t n)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_run *run = NULL;
    if (pipe_open_splits(spec, reg, splits, n, &run, err, sizeof(err)) != 0)
        fail_msg("%s: open: %s", text, err);
    pipe_spec_free(spec);
    struct str s = {0};
    str_add(&s, "");
    assert_int_equal(drain(run, 10000, &s), 0);
    pipe_run_free(run);
    return s.p;
}

static void test_open_splits(void **state)
{
    struct split sp[3];
    memset(sp, 0, sizeof(sp));
    sp[0].begin = 10;
    sp[0].end = 13;
    sp[1].begin = 50;
    sp[1].end = 52;
    sp[2].begin = 98;
    sp[2].end = 200; /* clamped to the source */
    char *s = run_splits("range(100)", sp, 3);
    assert_string_equal(s, "10;11;12;50;51;98;99");
    free(s);
    s = run_splits("range(0, 1000, 10) | map(add, 1)", sp, 2);
    assert_string_equal(s, "101;111;121;501;511");
    free(s);
    /* repeat is the split provider's business: skipped here. */
    s = run_splits("range(100) | repeat(3) | batch(2)", sp, 2);
    assert_string_equal(s, "[10, 11];[12, 50];[51]");
    free(s);
    s = run_splits("range(100) | repeat()", sp, 1);
    assert_string_equal(s, "10;11;12");
    free(s);
    s = run_splits("range(100)", sp, 0);
    assert_string_equal(s, "");
    free(s);

    struct split ls[2];
    memset(ls, 0, sizeof(ls));
    ls[0].begin = 2;
    ls[0].end = 3;
    ls[1].begin = 0;
    ls[1].end = 1;
    s = run_splits("list(\"a\", \"b\", \"c\", \"d\")", ls, 2);
    assert_string_equal(s, "\"c\";\"a\"");
    free(s);

    /* A file source split must carry its path. */
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = pipeline_parse("lines(\"/nonexistent/*.txt\")");
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open_splits(spec, reg, ls, 1, &run, err, sizeof(err)),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "split 0 of a file source has no valid path");
    assert_null(run);
    pipe_spec_free(spec);
}

static void test_open_tail(void **state)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *tail;
    assert_int_equal(pipe_parse_tail("map(add, 1) | batch(2)", &tail, err, sizeof(err)), 0);
    struct pipe_ctx tmp = {0};
    struct pipe_iter *up;
    assert_int_equal(pipe_range_open(0, 1, 5, NULL, 0, NULL, NULL, &tmp, &up), 0);
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open_tail(tail, reg, up, &run, err, sizeof(err)), 0);
    pipe_spec_free(tail);
    assert_ptr_equal(up->ctx, &run->ctx);
    struct str s = {0};
    str_add(&s, "");
    assert_int_equal(drain(run, 100, &s), 0);
    assert_string_equal(s.p, "[1, 2];[3, 4];[5]");
    free(s.p);
    pipe_run_free(run);

    /* A tail cannot repeat elements it reads from elsewhere. */
    assert_int_equal(pipe_parse_tail("map(add, 1) | repeat(2)", &tail, err, sizeof(err)), 0);
    assert_int_equal(pipe_range_open(0, 1, 5, NULL, 0, NULL, NULL, &tmp, &up), 0);
    assert_int_equal(pipe_open_tail(tail, reg, up, &run, err, sizeof(err)), SLUICE_ERR_UNSUPPORTED);
    assert_null(run);
    pipe_spec_free(tail);

    /* Tails are checked against the registry like whole pipelines. */
    assert_int_equal(pipe_parse_tail("map(nope)", &tail, err, sizeof(err)), 0);
    assert_int_equal(pipe_range_open(0, 1, 5, NULL, 0, NULL, NULL, &tmp, &up), 0);
    assert_int_equal(pipe_open_tail(tail, reg, up, &run, err, sizeof(err)), SLUICE_ERR_PARSE);
    assert_string_equal(err, "column 1: unknown function 'nope'");
    pipe_spec_free(tail);
}

static void test_open_errors(void **state)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = pipeline_parse("lines(\"/nonexistent-sluice-dir/*.txt\") | take(3)");
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof(err)), SLUICE_ERR_NOT_FOUND);
    assert_null(run);
    assert_non_null(strstr(err, "/nonexistent-sluice-dir/*.txt"));
    pipe_spec_free(spec);

    spec = pipeline_parse("tfrecord(\"/nonexistent-sluice-dir/a.tfrecord\")");
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof(err)), SLUICE_ERR_NOT_FOUND);
    assert_null(run);
    pipe_spec_free(spec);

    /* Specs from elsewhere than the parser are validated too. */
    spec = pipeline_parse("range(10) | batch(2)");
    spec->ops[0].n = 0;
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "column 13: batch size must be >= 1");
    spec->ops[0].kind = PIPE_OP_SHARD;
    spec->ops[0].n = 2;
    spec->ops[0].index = 2;
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "column 13: shard index must be in [0, 2)");
    spec->source.step = 0;
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof(err)), SLUICE_ERR_INVALID);
    assert_string_equal(err, "column 1: range step must not be 0");
    pipe_spec_free(spec);
}

/* File sources: globs expand at open, in name order; splits name their files. */
static void test_file_sources(void **state)
{
    char dir[] = "/tmp/sluice-test-ops-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[2][128], text[256];
    for (int i = 0; i < 2; i++) {
        snprintf(path[i], sizeof(path[i]), "%s/%c.txt", dir, 'a' + i);
        FILE *f = fopen(path[i], "w");
        assert_non_null(f);
        fputs(i == 0 ? "one\ntwo\n" : "three\n", f);
        fclose(f);
    }
    snprintf(text, sizeof(text), "lines(\"%s/*.txt\") | batch(2) | repeat(2)", dir);
    char *s = run_all(text);
    assert_string_equal(s, "[\"one\", \"two\"];[\"three\"];[\"one\", \"two\"];[\"three\"]");
    free(s);

    struct split sp[2];
    memset(sp, 0, sizeof(sp));
    snprintf(sp[0].path, sizeof(sp[0].path), "%s", path[1]);
    snprintf(sp[1].path, sizeof(sp[1].path), "%s", path[0]);
    /* In distributed_epoch a batch of file records runs in the reader, and a repeat after it
     * cannot: refused with both named. */
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open_splits(spec, reg, sp, 2, &run, err, sizeof(err)),
                     SLUICE_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "repeat(2) (column "));
    assert_non_null(strstr(err, "after batch(2) (column "));
    assert_null(run);
    pipe_spec_free(spec);
    snprintf(text, sizeof(text), "lines(\"%s/*.txt\") | repeat(2) | batch(2)", dir);
    s = run_splits(text, sp, 2);
    assert_string_equal(s, "\"three\";\"one\";\"two\"");
    free(s);

    /* A split's file that vanished is a runtime error naming it. */
    assert_int_equal(remove(path[1]), 0);
    spec = pipeline_parse(text);
    assert_int_equal(pipe_open_splits(spec, reg, sp, 1, &run, err, sizeof(err)), 0);
    pipe_spec_free(spec);
    struct sluice_element e;
    pipe_elem_init(&e);
    assert_true(pipe_run_next(run, &e) < 0);
    assert_non_null(strstr(run->ctx.err, path[1]));
    pipe_elem_release(&e);
    pipe_run_free(run);
    assert_int_equal(remove(path[0]), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* The run owns a private copy of its spec: the caller may free it at once. */
static void test_spec_copied(void **state)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = pipeline_parse("list([1, 2]) | map(add, 5) | repeat(2)");
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof(err)), 0);
    pipe_spec_free(spec);
    struct str s = {0};
    str_add(&s, "");
    assert_int_equal(drain(run, 100, &s), 0);
    assert_string_equal(s.p, "[6, 7];[6, 7]");
    free(s.p);
    pipe_run_free(run);
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
        cmocka_unit_test(test_sequences),
        cmocka_unit_test(test_shuffle),
        cmocka_unit_test(test_builtin_dtypes),
        cmocka_unit_test(test_bytes_fn),
        cmocka_unit_test(test_sleep_us),
        cmocka_unit_test(test_wait_us),
        cmocka_unit_test(test_prefetch_destroy_early),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_batch_reuses_buffers),
        cmocka_unit_test(test_open_splits),
        cmocka_unit_test(test_open_tail),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_file_sources),
        cmocka_unit_test(test_spec_copied),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
