/* Split providers: lengths, split contents and counts for every source kind and repeat pattern,
 * and the property distributed processing rests on: running the pipeline over the splits, one
 * at a time or all at once, yields exactly the multiset of elements of the whole pipeline. */
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
#include "pipeline/files.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- hand-built specs -------------------------------------------------------------------- */

static struct pipe_spec range_spec(int64_t start, int64_t stop, int64_t step, struct pipe_op *ops,
                                   size_t nops)
{
    struct pipe_spec s = {0};
    s.source.kind = PIPE_SRC_RANGE;
    s.source.start = start;
    s.source.stop = stop;
    s.source.step = step;
    s.ops = ops;
    s.nops = nops;
    return s;
}

static struct pipe_op repeat_op(int64_t n)
{
    return (struct pipe_op){.kind = PIPE_OP_REPEAT, .n = n, .has_n = true};
}

static struct pipe_op repeat_forever(void)
{
    return (struct pipe_op){.kind = PIPE_OP_REPEAT};
}

static struct pipe_op prefetch_op(void)
{
    return (struct pipe_op){.kind = PIPE_OP_PREFETCH, .n = 2};
}

static struct pipe_op take_op(int64_t n)
{
    return (struct pipe_op){.kind = PIPE_OP_TAKE, .n = n, .has_n = true};
}

static void init_ok(struct pipe_split_provider *p, const struct pipe_spec *s, uint64_t size)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = pipe_split_provider_init(p, s, size, err, sizeof err);
    if (rc != 0)
        fail_msg("provider init: %d %s", rc, err);
}

static void expect_split(const struct pipe_split_provider *p, uint64_t seq, uint64_t rep,
                         uint64_t begin, uint64_t end)
{
    struct split s;
    memset(&s, 0xa5, sizeof s);
    assert_int_equal(split_plan_at(&p->plan, seq, &s), 1);
    assert_int_equal(s.seq, seq);
    assert_int_equal(s.repetition, rep);
    assert_int_equal(s.begin, begin);
    assert_int_equal(s.end, end);
    assert_string_equal(s.path, "");
}

static void expect_no_split(const struct pipe_split_provider *p, uint64_t seq)
{
    struct split s;
    assert_int_equal(split_plan_at(&p->plan, seq, &s), 0);
}

static void test_default_size(void **state)
{
    (void)state;
    static const struct {
        uint64_t len, size;
    } table[] = {
        {0, 1},
        {1, 1},
        {2, 1},
        {3, 2},
        {10, 5},
        {31, 16},
        {32, 16},
        {100, 16},
        {255, 16},
        {4095, 16},
        {4096, 16},
        {8191, 31},
        {1000000, 3906},
        {4194303, 16383},
        {4194304, 16384},
        {1000000000000ull, 16384},
        {UINT64_MAX, 16384},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        uint64_t size = pipe_split_default_size(table[i].len);
        assert_int_equal(size, table[i].size);
        /* A source of at least 4096 elements gets at least 256 splits, one of more than two
         * is never cut into one-element splits, and never more than 16384 elements go into one
         * split. */
        uint64_t splits = table[i].len / size + (table[i].len % size != 0);
        if (table[i].len >= 4096)
            assert_true(splits >= 256);
        if (table[i].len > 2)
            assert_true(size > 1);
        assert_true(size <= 16384);
    }
}

static void test_range_lengths(void **state)
{
    (void)state;
    static const struct {
        int64_t start, stop, step;
        uint64_t len;
    } table[] = {
        {0, 10, 1, 10},
        {0, 10, 3, 4},  /* 0 3 6 9 */
        {0, 9, 3, 3},   /* 0 3 6 */
        {10, 0, -3, 4}, /* 10 7 4 1 */
        {10, 1, -3, 3}, /* 10 7 4 */
        {-5, 5, 2, 5},
        {5, 5, 1, 0},
        {5, 0, 1, 0},
        {0, 5, -1, 0},
        {INT64_MIN, INT64_MAX, 1, UINT64_MAX},
        {INT64_MAX, INT64_MIN, -1, UINT64_MAX},
        {INT64_MIN, INT64_MAX, INT64_MAX, 3}, /* MIN, -1, MAX - 1 */
        {INT64_MAX, INT64_MIN, INT64_MIN, 2}, /* MAX, -1 */
        {-1, INT64_MIN, INT64_MIN, 1},
        {0, 1, INT64_MAX, 1},
        {INT64_MAX - 1, INT64_MAX, 5, 1},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        struct pipe_spec s = range_spec(table[i].start, table[i].stop, table[i].step, NULL, 0);
        struct pipe_split_provider p;
        init_ok(&p, &s, 0);
        assert_int_equal(p.plan.kind, SPLIT_RANGES);
        assert_int_equal(p.plan.source_len, table[i].len);
        assert_int_equal(p.plan.passes, 1);
        assert_int_equal(p.plan.split_size, pipe_split_default_size(table[i].len));
        uint64_t per_pass =
            table[i].len / p.plan.split_size + (table[i].len % p.plan.split_size != 0);
        assert_int_equal(p.plan.per_pass, per_pass);
        assert_int_equal(split_plan_total(&p.plan), per_pass);
        if (per_pass > 0) {
            /* The last split ends exactly at the source's end. */
            struct split last;
            assert_int_equal(split_plan_at(&p.plan, per_pass - 1, &last), 1);
            assert_int_equal(last.end, table[i].len);
            assert_true(last.begin < last.end);
        }
        expect_no_split(&p, per_pass);
        pipe_split_provider_release(&p);
    }
}

static void test_range_splits(void **state)
{
    (void)state;
    struct pipe_split_provider p;

    /* range(10) by default: two halves. */
    struct pipe_spec s = range_spec(0, 10, 1, NULL, 0);
    init_ok(&p, &s, 0);
    assert_int_equal(split_plan_total(&p.plan), 2);
    expect_split(&p, 0, 0, 0, 5);
    expect_split(&p, 1, 0, 5, 10);
    expect_no_split(&p, 2);
    expect_no_split(&p, UINT64_MAX);
    pipe_split_provider_release(&p);

    /* A size that does not divide the length: the last split is short. */
    init_ok(&p, &s, 3);
    assert_int_equal(p.plan.split_size, 3);
    assert_int_equal(split_plan_total(&p.plan), 4);
    expect_split(&p, 0, 0, 0, 3);
    expect_split(&p, 1, 0, 3, 6);
    expect_split(&p, 2, 0, 6, 9);
    expect_split(&p, 3, 0, 9, 10);
    expect_no_split(&p, 4);
    pipe_split_provider_release(&p);

    /* Splits are index ranges, also for a negative step: range(10, 0, -3) is 10 7 4 1. */
    s = range_spec(10, 0, -3, NULL, 0);
    init_ok(&p, &s, 3);
    assert_int_equal(split_plan_total(&p.plan), 2);
    expect_split(&p, 0, 0, 0, 3);
    expect_split(&p, 1, 0, 3, 4);
    expect_no_split(&p, 2);
    pipe_split_provider_release(&p);

    /* A split size beyond the length: one split. */
    s = range_spec(0, 10, 1, NULL, 0);
    init_ok(&p, &s, UINT64_MAX);
    assert_int_equal(split_plan_total(&p.plan), 1);
    expect_split(&p, 0, 0, 0, 10);
    expect_no_split(&p, 1);
    pipe_split_provider_release(&p);

    /* An empty range has no splits. */
    s = range_spec(3, 3, 1, NULL, 0);
    init_ok(&p, &s, 0);
    assert_int_equal(split_plan_total(&p.plan), 0);
    expect_no_split(&p, 0);
    pipe_split_provider_release(&p);

    /* A large range: splits of 16384, the last one short. */
    s = range_spec(0, 1000000000000, 1, NULL, 0);
    init_ok(&p, &s, 0);
    assert_int_equal(p.plan.split_size, 16384);
    assert_int_equal(split_plan_total(&p.plan), 61035157);
    expect_split(&p, 61035156, 0, 61035156ull * 16384, 1000000000000ull);
    expect_no_split(&p, 61035157);
    pipe_split_provider_release(&p);

    /* The whole int64 range with the largest split size still ends exactly. */
    s = range_spec(INT64_MIN, INT64_MAX, 1, NULL, 0);
    init_ok(&p, &s, UINT64_MAX / 2);
    assert_int_equal(split_plan_total(&p.plan), 3);
    expect_split(&p, 0, 0, 0, UINT64_MAX / 2);
    expect_split(&p, 1, 0, UINT64_MAX / 2, UINT64_MAX / 2 * 2);
    expect_split(&p, 2, 0, UINT64_MAX / 2 * 2, UINT64_MAX);
    pipe_split_provider_release(&p);
}

static void test_list_splits(void **state)
{
    (void)state;
    struct pipe_value values[5];
    for (int i = 0; i < 5; i++)
        values[i] = (struct pipe_value){.kind = PIPE_VAL_INT, .i = 10 * i};
    struct pipe_spec s = {0};
    s.source.kind = PIPE_SRC_LIST;
    s.source.values = values;
    s.source.nvalues = 5;
    struct pipe_split_provider p;

    init_ok(&p, &s, 2);
    assert_int_equal(p.plan.kind, SPLIT_RANGES);
    assert_int_equal(p.plan.source_len, 5);
    assert_int_equal(split_plan_total(&p.plan), 3);
    expect_split(&p, 0, 0, 0, 2);
    expect_split(&p, 1, 0, 2, 4);
    expect_split(&p, 2, 0, 4, 5);
    expect_no_split(&p, 3);
    pipe_split_provider_release(&p);

    init_ok(&p, &s, 0);
    assert_int_equal(split_plan_total(&p.plan), 2);
    expect_split(&p, 0, 0, 0, 3);
    expect_split(&p, 1, 0, 3, 5);
    pipe_split_provider_release(&p);
}

static void test_repeat(void **state)
{
    (void)state;
    struct pipe_split_provider p;

    /* range(10) in splits of 4 (three per pass), repeated 3 times. */
    struct pipe_op ops[3] = {take_op(100), repeat_op(3), prefetch_op()};
    struct pipe_spec s = range_spec(0, 10, 1, ops, 3);
    init_ok(&p, &s, 4);
    assert_int_equal(p.plan.per_pass, 3);
    assert_int_equal(p.plan.passes, 3);
    assert_int_equal(split_plan_total(&p.plan), 9);
    for (uint64_t seq = 0; seq < 9; seq++) {
        uint64_t k = seq % 3;
        expect_split(&p, seq, seq / 3, k * 4, k == 2 ? 10 : k * 4 + 4);
    }
    expect_no_split(&p, 9);
    pipe_split_provider_release(&p);

    /* Counts multiply. */
    ops[0] = repeat_op(2);
    ops[2] = repeat_op(5);
    init_ok(&p, &s, 4);
    assert_int_equal(p.plan.passes, 30);
    assert_int_equal(split_plan_total(&p.plan), 90);
    expect_split(&p, 89, 29, 8, 10);
    expect_no_split(&p, 90);
    pipe_split_provider_release(&p);

    /* repeat() anywhere: endless, and split_at stays a pure function of seq. */
    ops[1] = repeat_forever();
    init_ok(&p, &s, 4);
    assert_int_equal(p.plan.passes, UINT64_MAX);
    assert_int_equal(split_plan_total(&p.plan), UINT64_MAX);
    expect_split(&p, 3000000000000000001ull, 1000000000000000000ull, 4, 8);
    expect_split(&p, UINT64_MAX, UINT64_MAX / 3, 0, 4);
    pipe_split_provider_release(&p);

    /* repeat(0) anywhere, even beside repeat(): nothing at all. */
    ops[2] = repeat_op(0);
    init_ok(&p, &s, 4);
    assert_int_equal(p.plan.passes, 0);
    assert_int_equal(split_plan_total(&p.plan), 0);
    expect_no_split(&p, 0);
    pipe_split_provider_release(&p);

    /* A product too large to count is as good as endless. */
    ops[0] = repeat_op(INT64_C(1) << 40);
    ops[1] = repeat_op(INT64_C(1) << 40);
    ops[2] = prefetch_op();
    init_ok(&p, &s, 4);
    assert_int_equal(split_plan_total(&p.plan), UINT64_MAX);
    expect_split(&p, UINT64_C(1) << 62, (UINT64_C(1) << 62) / 3, 4, 8);
    pipe_split_provider_release(&p);

    /* Passes times splits overflowing is endless as well. */
    ops[0] = repeat_op(INT64_MAX);
    ops[1] = prefetch_op();
    init_ok(&p, &s, 4);
    assert_int_equal(p.plan.passes, INT64_MAX);
    assert_int_equal(split_plan_total(&p.plan), UINT64_MAX);
    pipe_split_provider_release(&p);

    /* An endlessly repeated empty source has no splits. */
    ops[0] = repeat_forever();
    s = range_spec(0, 0, 1, ops, 1);
    init_ok(&p, &s, 0);
    assert_int_equal(split_plan_total(&p.plan), 0);
    expect_no_split(&p, 0);
    pipe_split_provider_release(&p);
}

/* ---- files ------------------------------------------------------------------------------- */

struct fixture {
    char dir[64];
    struct sluice_registry *reg;
};

static void write_records(const char *dir, const char *name, int first, int count)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (int i = first; i < first + count; i++) {
        char rec[32];
        int len = snprintf(rec, sizeof rec, "record-%d", i);
        assert_int_equal(pipe_tfrecord_write(fp, rec, (size_t)len), 0);
    }
    assert_int_equal(fclose(fp), 0);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/sluice-test-split-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    file_write_in(f->dir, "c.txt", "c1\nc2\nc3");
    file_write_in(f->dir, "a.txt", "a1\n\na3\n");
    file_write_in(f->dir, "b.txt", "");
    file_write_in(f->dir, "d.txt", "a1\n");
    write_records(f->dir, "r2.tfrecord", 100, 7);
    write_records(f->dir, "r0.tfrecord", 0, 3);
    write_records(f->dir, "r1.tfrecord", 50, 0);
    write_records(f->dir, "r3.tfrecord", 0, 2); /* duplicates of r0's, on purpose */
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub.txt", f->dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(pipe_registry_new(&f->reg), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    tmp_remove(f->dir);
    pipe_registry_free(f->reg);
    free(f);
    return 0;
}

static void test_file_splits(void **state)
{
    struct fixture *f = *state;
    char text[512];
    snprintf(text, sizeof text, "lines(\"%s/*.txt\", \"%s/a*\") | repeat(2)", f->dir, f->dir);
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_split_provider p;
    init_ok(&p, spec, 0);
    assert_int_equal(p.plan.kind, SPLIT_FILES);
    /* Sorted, each file once, the directory sub.txt left out. */
    static const char *names[] = {"a.txt", "b.txt", "c.txt", "d.txt"};
    assert_int_equal(p.plan.npaths, 4);
    assert_int_equal(p.plan.per_pass, 4);
    assert_int_equal(p.plan.passes, 2);
    assert_int_equal(split_plan_total(&p.plan), 8);
    for (uint64_t seq = 0; seq < 8; seq++) {
        struct split s;
        char want[256];
        snprintf(want, sizeof want, "%s/%s", f->dir, names[seq % 4]);
        assert_string_equal(p.plan.paths[seq % 4], want);
        assert_int_equal(split_plan_at(&p.plan, seq, &s), 1);
        assert_int_equal(s.seq, seq);
        assert_int_equal(s.repetition, seq / 4);
        assert_string_equal(s.path, want);
    }
    expect_no_split(&p, 8);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);

    snprintf(text, sizeof text, "tfrecord(\"%s/r*.tfrecord\") | repeat()", f->dir);
    spec = pipeline_parse(text);
    init_ok(&p, spec, 0);
    assert_int_equal(p.plan.kind, SPLIT_FILES);
    assert_int_equal(p.plan.per_pass, 4);
    assert_int_equal(split_plan_total(&p.plan), UINT64_MAX);
    struct split s;
    assert_int_equal(split_plan_at(&p.plan, 4000000000001ull, &s), 1);
    assert_int_equal(s.repetition, 1000000000000ull);
    char want[256];
    snprintf(want, sizeof want, "%s/r1.tfrecord", f->dir);
    assert_string_equal(s.path, want);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);

    /* A glob matching nothing fails the provider, naming the glob. */
    snprintf(text, sizeof text, "tfrecord(\"%s/r*.tfrecord\", \"%s/*.nope\")", f->dir, f->dir);
    spec = pipeline_parse(text);
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, err, sizeof err), SLUICE_ERR_NOT_FOUND);
    snprintf(want, sizeof want, "no file matches '%s/*.nope'", f->dir);
    assert_string_equal(err, want);
    assert_null(p.plan.paths);
    pipe_split_provider_release(&p); /* harmless after a failed init */
    pipe_spec_free(spec);
}

/* ---- the multiset property --------------------------------------------------------------- */

/* Elements reduced to comparable byte strings: dtype, shape and contents of each component. */
struct bag {
    char **keys;
    size_t *lens;
    size_t n, cap;
};

static void put(char **p, size_t *len, size_t *cap, const void *data, size_t n)
{
    while (*len + n > *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *p = realloc(*p, *cap);
        assert_non_null(*p);
    }
    if (n > 0)
        memcpy(*p + *len, data, n);
    *len += n;
}

static void bag_add(struct bag *b, const struct sluice_element *e)
{
    char *key = NULL;
    size_t len = 0, cap = 0;
    put(&key, &len, &cap, &e->n, sizeof e->n);
    for (size_t i = 0; i < e->n; i++) {
        const struct pipe_tensor *t = &e->t[i];
        put(&key, &len, &cap, &t->dtype, sizeof t->dtype);
        put(&key, &len, &cap, &t->rank, sizeof t->rank);
        put(&key, &len, &cap, t->shape, (size_t)t->rank * sizeof t->shape[0]);
        put(&key, &len, &cap, &t->len, sizeof t->len);
        put(&key, &len, &cap, t->data, t->len);
        if (t->dtype == SLUICE_BYTES)
            put(&key, &len, &cap, t->offs, (pipe_tensor_num_values(t) + 1) * sizeof t->offs[0]);
    }
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->keys = realloc(b->keys, b->cap * sizeof *b->keys);
        b->lens = realloc(b->lens, b->cap * sizeof *b->lens);
        assert_non_null(b->keys);
        assert_non_null(b->lens);
    }
    b->keys[b->n] = key;
    b->lens[b->n] = len;
    b->n++;
}

static void bag_free(struct bag *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->keys[i]);
    free(b->keys);
    free(b->lens);
    memset(b, 0, sizeof *b);
}

struct keyref {
    const char *p;
    size_t len;
};

static int cmp_key(const void *a, const void *b)
{
    const struct keyref *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->p, y->p, x->len);
}

static void assert_same_multiset(const struct bag *a, const struct bag *b, const char *what)
{
    if (a->n != b->n)
        fail_msg("%s: %zu elements, expected %zu", what, b->n, a->n);
    struct keyref *x = calloc(a->n + 1, sizeof *x), *y = calloc(b->n + 1, sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    for (size_t i = 0; i < a->n; i++) {
        x[i] = (struct keyref){a->keys[i], a->lens[i]};
        y[i] = (struct keyref){b->keys[i], b->lens[i]};
    }
    qsort(x, a->n, sizeof *x, cmp_key);
    qsort(y, b->n, sizeof *y, cmp_key);
    for (size_t i = 0; i < a->n; i++)
        if (cmp_key(&x[i], &y[i]) != 0)
            fail_msg("%s: element multisets differ", what);
    free(x);
    free(y);
}

static void drain(struct pipe_run *run, struct bag *b, const char *what)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    int rc;
    while ((rc = pipe_run_next(run, &e)) == 1)
        bag_add(b, &e);
    if (rc != 0)
        fail_msg("%s: %d %s", what, rc, run->ctx.err);
    pipe_elem_release(&e);
    pipe_run_free(run);
}

static void check_property(struct fixture *f, const char *text, size_t expect_n,
                           uint64_t split_size)
{
    struct pipe_spec *spec = pipeline_parse(text);
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct pipe_run *run = NULL;
    int rc = pipe_open(spec, f->reg, &run, err, sizeof err);
    if (rc != 0)
        fail_msg("open '%s': %d %s", text, rc, err);
    struct bag whole = {0}, one_by_one = {0}, at_once = {0};
    drain(run, &whole, text);
    if (whole.n != expect_n)
        fail_msg("'%s': %zu elements, expected %zu", text, whole.n, expect_n);

    struct pipe_split_provider p;
    init_ok(&p, spec, split_size);
    uint64_t count = split_plan_total(&p.plan);
    assert_true(count < 100000);
    struct split *splits = calloc(count + 1, sizeof *splits);
    assert_non_null(splits);
    for (uint64_t seq = 0; seq < count; seq++) {
        assert_int_equal(split_plan_at(&p.plan, seq, &splits[seq]), 1);
        rc = pipe_open_splits(spec, f->reg, &splits[seq], 1, &run, err, sizeof err);
        if (rc != 0)
            fail_msg("open split %llu of '%s': %d %s", (unsigned long long)seq, text, rc, err);
        drain(run, &one_by_one, text);
    }
    expect_no_split(&p, count);
    assert_same_multiset(&whole, &one_by_one, text);

    rc = pipe_open_splits(spec, f->reg, splits, (size_t)count, &run, err, sizeof err);
    if (rc != 0)
        fail_msg("open all splits of '%s': %d %s", text, rc, err);
    drain(run, &at_once, text);
    assert_same_multiset(&whole, &at_once, text);

    free(splits);
    bag_free(&whole);
    bag_free(&one_by_one);
    bag_free(&at_once);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);
}

static void test_splits_cover_pipeline(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *text; /* %1$s is the directory of the test files */
        size_t n;
    } table[] = {
        {"range(100) | map(square)", 100},
        {"range(3, 250, 7) | filter(even)", 18},
        {"range(100, -5, -3) | map(add, 1)", 35},
        {"range(-10, 10) | filter(lt, 3) | map(mul, -2)", 13},
        {"range(1000) | filter(odd) | map(mod, 7)", 500},
        {"range(100) | shuffle(16, 7) | map(add, 5)", 100},
        {"range(20) | map(square) | repeat(3)", 60},
        {"range(10) | repeat(0)", 0},
        {"range(0)", 0},
        {"list(5, 3, 9, 1, 7, 7, 2) | map(mul, 3)", 7},
        {"list(1, 2, 3) | repeat(2) | filter(odd) | repeat(2)", 8},
        {"list(\"a\", \"bb\", \"\", \"ccc\", \"bb\")", 5},
        {"list((1, \"x\"), (2, \"y\"), (3, \"z\"))", 3},
        {"lines(\"%1$s/*.txt\")", 7},
        {"lines(\"%1$s/[ab].txt\", \"%1$s/c*\") | repeat(3)", 18},
        {"tfrecord(\"%1$s/*.tfrecord\")", 12},
        {"tfrecord(\"%1$s/r[0-2].tfrecord\") | repeat(2)", 20},
    };
    static const uint64_t sizes[] = {0, 1, 3, 7, 1000};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        char text[512];
        text_format(text, sizeof text, table[i].text, f->dir);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            check_property(f, text, table[i].n, sizes[k]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_size),
        cmocka_unit_test(test_range_lengths),
        cmocka_unit_test(test_range_splits),
        cmocka_unit_test(test_list_splits),
        cmocka_unit_test(test_repeat),
        cmocka_unit_test_setup_teardown(test_file_splits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_splits_cover_pipeline, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
