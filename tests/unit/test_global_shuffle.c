/* global_shuffle(SEED) in the pipeline language: where it may stand (exact parse, decode and
 * analysis errors), its canonical text and wire form, the orders it gives locally (a fixed
 * permutation per seed and pass), and over files: each pass a permutation of the files, each
 * file's records shuffled among themselves, the same read split by split as locally, and a file
 * over the memory bound refused by name. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pipeline.h"
#include "lib/tmp.h"

#include "common/error.h"
#include "pipeline/def.h"
#include "pipeline/dist.h"
#include "pipeline/files.h"
#include "pipeline/format.h"
#include "pipeline/gshuffle.h"
#include "pipeline/iter.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NFILES 6

struct fixture {
    char dir[64];
    char glob[96];
    struct sluice_registry *reg;
};

/* ---- Where the op may stand --------------------------------------------------------------- */

static void test_parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *err;
    } cases[] = {
        {"range(10) | map(square) | global_shuffle(7)",
         "column 27: global_shuffle must come right after the source, before any other "
         "operation"},
        {"range(10) | batch(2) | global_shuffle(7)",
         "column 24: global_shuffle must come right after the source, before any other "
         "operation"},
        {"range(10) | global_shuffle(7) | global_shuffle(1)",
         "column 33: a second global_shuffle (the first is at column 13)"},
        {"range(10) | global_shuffle(7) | repeat(2) | global_shuffle(7)",
         "column 45: a second global_shuffle (the first is at column 13)"},
        {"range(10) | global_shuffle()", "column 28: expected a seed, found ')'"},
        {"range(10) | global_shuffle(1.5)", "column 28: expected an integer, found '1.5'"},
        {"range(10) | global_shuffle(1, 2)", "column 29: expected ')', found ','"},
        {"range(10) | global_shuffle(99999999999999999999)",
         "column 28: expected a 64-bit integer, found '99999999999999999999'"},
        {"range(10) | global_shuffle", "column 27: expected '(', found end of input"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct pipe_spec *spec = NULL;
        char err[SLUICE_ERRMSG_SIZE] = "";
        assert_int_equal(pipe_parse(cases[i].text, &spec, err, sizeof err), SLUICE_ERR_PARSE);
        assert_null(spec);
        if (strcmp(err, cases[i].err) != 0)
            fail_msg("%s:\n got: %s\nwant: %s", cases[i].text, err, cases[i].err);
    }
    /* A tail (--local) has no source to shuffle. */
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_parse_tail("map(square) | global_shuffle(1)", &spec, err, sizeof err),
                     SLUICE_ERR_PARSE);
    assert_string_equal(err, "column 15: global_shuffle shuffles a source, and a pipeline tail "
                             "has none; put it right after the source of the dataset");
    assert_int_equal(pipe_parse_tail("global_shuffle(1)", &spec, err, sizeof err),
                     SLUICE_ERR_PARSE);
    assert_string_equal(err, "column 1: global_shuffle shuffles a source, and a pipeline tail "
                             "has none; put it right after the source of the dataset");
}

/* A spec built by hand (or decoded from a hostile peer) with the op out of place. */
static struct pipe_spec *misplaced(void)
{
    struct pipe_spec *spec = pipeline_parse("range(10) | map(square) | take(3)");
    spec->ops[1] = (struct pipe_op){.kind = PIPE_OP_GLOBAL_SHUFFLE, .seed = 4, .column = 0};
    return spec;
}

static void test_text_and_wire(void **state)
{
    struct fixture *f = *state;
    struct pipe_spec *spec = pipeline_parse("range(10)|global_shuffle( -7 )|repeat(2)");
    char text[128];
    assert_int_equal(pipe_spec_format(spec, text, sizeof text),
                     (int)strlen("range(10) | global_shuffle(-7) | repeat(2)"));
    assert_string_equal(text, "range(10) | global_shuffle(-7) | repeat(2)");
    int64_t seed = 0;
    assert_true(pipe_spec_global_shuffle(spec, &seed));
    assert_int_equal(seed, -7);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(pipe_spec_encode(spec, &buf, &len), 0);
    struct pipe_spec *back = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_spec_decode(buf, len, &back, err, sizeof err), 0);
    assert_true(pipe_spec_equal(spec, back));
    back->ops[0].seed = 8;
    assert_false(pipe_spec_equal(spec, back));
    free(buf);
    pipe_spec_free(back);
    pipe_spec_free(spec);

    /* Out of place: refused by the decoder, the analysis and the engine alike. */
    spec = misplaced();
    assert_false(pipe_spec_global_shuffle(spec, NULL));
    assert_int_equal(pipe_spec_encode(spec, &buf, &len), 0);
    assert_int_equal(pipe_spec_decode(buf, len, &back, err, sizeof err), SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "dataset definition: op 2 (global_shuffle): global_shuffle must be "
                             "the first operation");
    free(buf);
    struct pipe_dist d;
    assert_int_equal(pipe_dist_analyze(spec, &d, err, sizeof err), SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "global_shuffle(4) must come right after the source");
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open(spec, f->reg, &run, err, sizeof err), SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "column 0: global_shuffle must come right after the source");
    pipe_spec_free(spec);
}

/* ---- Orders ------------------------------------------------------------------------------- */

/* The elements of text's local run as int64 values; *n receives their count. */
static int64_t *run_ints(struct fixture *f, const char *text, size_t *n)
{
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_run *run = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    if (pipe_open(spec, f->reg, &run, err, sizeof err) != 0)
        fail_msg("%s: %s", text, err);
    size_t cap = 64;
    int64_t *v = malloc(cap * sizeof *v);
    assert_non_null(v);
    *n = 0;
    struct sluice_element e;
    pipe_elem_init(&e);
    int rc;
    while ((rc = pipe_run_next(run, &e)) == 1) {
        if (*n == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        assert_non_null(v);
        assert_int_equal(e.t[0].dtype, SLUICE_INT64);
        memcpy(&v[(*n)++], e.t[0].data, 8);
    }
    assert_int_equal(rc, 0);
    pipe_elem_release(&e);
    pipe_run_free(run);
    pipe_spec_free(spec);
    return v;
}

/* v[0..n) holds each of lo, lo + 1, ..., lo + n - 1 once, and not in that order. */
static void assert_shuffled_range(const int64_t *v, size_t n, int64_t lo)
{
    uint8_t *seen = calloc(n, 1);
    assert_non_null(seen);
    size_t in_place = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(v[i] >= lo && v[i] < lo + (int64_t)n);
        assert_int_equal(seen[v[i] - lo], 0);
        seen[v[i] - lo] = 1;
        in_place += v[i] == lo + (int64_t)i;
    }
    assert_true(in_place < n / 10 + 2);
    free(seen);
}

static void test_local_orders(void **state)
{
    struct fixture *f = *state;
    size_t n, m;
    int64_t *a = run_ints(f, "range(1000) | global_shuffle(5)", &n);
    assert_int_equal(n, 1000);
    assert_shuffled_range(a, n, 0);
    /* The same again: the order is a function of the seed. */
    int64_t *b = run_ints(f, "range(1000) | global_shuffle(5)", &m);
    assert_memory_equal(a, b, n * sizeof *a);
    free(b);
    /* Another seed, another order. */
    b = run_ints(f, "range(1000) | global_shuffle(6)", &m);
    assert_int_equal(m, 1000);
    assert_shuffled_range(b, m, 0);
    assert_true(memcmp(a, b, n * sizeof *a) != 0);
    free(b);
    /* Every pass a permutation of its own, the first pass the unrepeated one's. */
    b = run_ints(f, "range(1000) | global_shuffle(5) | repeat(3)", &m);
    assert_int_equal(m, 3000);
    assert_memory_equal(a, b, n * sizeof *a);
    for (int p = 0; p < 3; p++)
        assert_shuffled_range(b + 1000 * p, 1000, 0);
    assert_true(memcmp(b, b + 1000, 1000 * sizeof *b) != 0);
    assert_true(memcmp(b + 1000, b + 2000, 1000 * sizeof *b) != 0);
    /* Nested repeats number the passes in order: repeat(2) | repeat(3) is repeat(6). */
    int64_t *c = run_ints(f, "range(1000) | global_shuffle(5) | repeat(2) | repeat(3)", &m);
    int64_t *d = run_ints(f, "range(1000) | global_shuffle(5) | repeat(6)", &n);
    assert_int_equal(m, 6000);
    assert_int_equal(n, 6000);
    assert_memory_equal(c, d, n * sizeof *c);
    assert_memory_equal(c, b, 3000 * sizeof *c);
    free(c);
    free(d);
    /* A prefetch in between changes nothing. */
    c = run_ints(f, "range(1000) | global_shuffle(5) | prefetch(4) | repeat(3)", &m);
    assert_memory_equal(c, b, 3000 * sizeof *c);
    free(c);
    free(b);
    /* Ops after it see the shuffled stream: take(10) is its first ten. */
    b = run_ints(f, "range(1000) | global_shuffle(5) | take(10)", &m);
    assert_int_equal(m, 10);
    assert_memory_equal(a, b, 10 * sizeof *a);
    free(b);
    /* A stepped range shuffles its values the same way its indices go. */
    b = run_ints(f, "range(10, 10010, 10) | global_shuffle(5)", &m);
    for (size_t i = 0; i < 1000; i++)
        assert_int_equal(b[i], 10 + 10 * a[i]);
    free(b);
    /* list() follows the same permutation as range() of its length. */
    b = run_ints(f, "list(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11) | global_shuffle(5) | repeat(2)",
                 &m);
    c = run_ints(f, "range(12) | global_shuffle(5) | repeat(2)", &n);
    assert_int_equal(m, 24);
    assert_memory_equal(b, c, 24 * sizeof *b);
    free(b);
    free(c);
    free(a);
}

/* ---- Files -------------------------------------------------------------------------------- */

/* File j holds 3 + 2 * j lines "j-0", "j-1", ... */
static int lines_in(int j)
{
    return 3 + 2 * j;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/sluice-test-gshuffle-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    for (int j = 0; j < NFILES; j++) {
        char path[128];
        snprintf(path, sizeof path, "%s/f%d.txt", f->dir, j);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        for (int i = 0; i < lines_in(j); i++)
            fprintf(fp, "%d-%d\n", j, i);
        assert_int_equal(fclose(fp), 0);
    }
    snprintf(f->glob, sizeof f->glob, "%s/*.txt", f->dir);
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

/* Appends every element of run as a line of text. */
static void drain(struct pipe_run *run, char **out, size_t *len)
{
    struct sluice_element e;
    struct pipe_buf b = {0};
    pipe_elem_init(&e);
    int rc;
    while ((rc = pipe_run_next(run, &e)) == 1) {
        b.len = 0;
        assert_int_equal(pipe_format_elem(&b, &e), 0);
        *out = realloc(*out, *len + b.len + 2);
        assert_non_null(*out);
        memcpy(*out + *len, b.p, b.len);
        *len += b.len;
        (*out)[(*len)++] = '\n';
        (*out)[*len] = '\0';
    }
    if (rc != 0)
        fail_msg("run: %s", run->ctx.err);
    pipe_buf_release(&b);
    pipe_elem_release(&e);
}

static void test_files(void **state)
{
    struct fixture *f = *state;
    char text[256], err[SLUICE_ERRMSG_SIZE];
    snprintf(text, sizeof text, "lines(\"%s\") | global_shuffle(3) | repeat(2)", f->glob);
    struct pipe_spec *spec = pipeline_parse(text);

    /* The split sequence: each pass a permutation of the files, the two passes different. */
    struct pipe_split_provider p;
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, err, sizeof err), 0);
    assert_int_equal(p.plan.per_pass, NFILES);
    assert_int_equal(split_plan_total(&p.plan), 2 * NFILES);
    uint64_t order[2][NFILES];
    for (uint64_t seq = 0; seq < 2 * NFILES; seq++) {
        struct split s;
        assert_int_equal(split_plan_at(&p.plan, seq, &s), 1);
        assert_int_equal(s.repetition, seq / NFILES);
        assert_true(s.index < NFILES);
        char want[128];
        snprintf(want, sizeof want, "%s/f%d.txt", f->dir, (int)s.index);
        assert_string_equal(s.path, want);
        assert_int_equal(s.index, split_file_index(true, 3, NFILES, seq / NFILES, seq % NFILES));
        order[seq / NFILES][seq % NFILES] = s.index;
    }
    for (int r = 0; r < 2; r++) {
        unsigned seen = 0;
        for (int k = 0; k < NFILES; k++)
            seen |= 1u << order[r][k];
        assert_int_equal(seen, (1u << NFILES) - 1);
    }
    assert_true(memcmp(order[0], order[1], sizeof order[0]) != 0);
    /* Without the op the files keep their sorted order. */
    assert_int_equal(split_file_index(false, 3, NFILES, 1, 4), 4);

    /* Locally: the files in the split sequence's order, each file's lines contiguous and
     * shuffled among themselves. */
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open(spec, f->reg, &run, err, sizeof err), 0);
    char *local = NULL;
    size_t local_len = 0;
    drain(run, &local, &local_len);
    pipe_run_free(run);
    const char *at = local;
    int shuffled_files = 0;
    for (int r = 0; r < 2; r++) {
        for (int k = 0; k < NFILES; k++) {
            int j = (int)order[r][k];
            unsigned seen = 0;
            int in_place = 0;
            for (int i = 0; i < lines_in(j); i++) {
                int fj, fi, used;
                assert_int_equal(sscanf(at, "%d-%d\n%n", &fj, &fi, &used), 2);
                at += used;
                assert_int_equal(fj, j);
                assert_true(fi >= 0 && fi < lines_in(j));
                assert_int_equal(seen & (1u << fi), 0);
                seen |= 1u << fi;
                in_place += fi == i;
            }
            shuffled_files += in_place < lines_in(j);
        }
    }
    assert_string_equal(at, "");
    assert_true(shuffled_files >= 2 * NFILES - 2);

    /* Split by split, as workers read them, in sequence order: the same text. */
    char *dist = NULL;
    size_t dist_len = 0;
    for (uint64_t seq = 0; seq < 2 * NFILES; seq++) {
        struct split s;
        assert_int_equal(split_plan_at(&p.plan, seq, &s), 1);
        assert_int_equal(pipe_open_splits(spec, f->reg, &s, 1, &run, err, sizeof err), 0);
        drain(run, &dist, &dist_len);
        pipe_run_free(run);
    }
    assert_string_equal(dist, local);
    free(dist);
    free(local);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);
}

static int open_lines(void *arg, char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                      struct pipe_iter **out)
{
    (void)arg;
    return pipe_lines_open(paths, npaths, ctx, out);
}

/* A file whose records need more than the bound is refused by name, after the files before it
 * were read whole. */
static void test_file_bound(void **state)
{
    struct fixture *f = *state;
    char small[128], big[128];
    snprintf(small, sizeof small, "%s/f0.txt", f->dir);
    snprintf(big, sizeof big, "%s/f5.txt", f->dir);
    struct pipe_gshuffle_file files[] = {{small, 0, 0}, {big, 5, 0}};
    struct pipe_ctx ctx = {0};
    struct pipe_iter *it = NULL;
    /* Each line costs its element's bookkeeping; f0's 3 fit, f5's 13 do not. */
    assert_int_equal(pipe_gshuffle_files_open(files, 2, 1, 2000, open_lines, NULL, &ctx, &it), 0);
    struct sluice_element e;
    pipe_elem_init(&e);
    for (int i = 0; i < lines_in(0); i++)
        assert_int_equal(pipe_next(it, &e), 1);
    assert_int_equal(pipe_next(it, &e), SLUICE_ERR_TOO_LARGE);
    char want[512];
    snprintf(want, sizeof want,
             "global_shuffle: %s holds more than 2000 bytes of records, the most one file may "
             "hold to be shuffled in memory; cut it into smaller files",
             big);
    assert_string_equal(ctx.err, want);
    assert_int_equal(pipe_next(it, &e), SLUICE_ERR_TOO_LARGE);
    pipe_elem_release(&e);
    it->ops->destroy(it);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors), cmocka_unit_test(test_text_and_wire),
        cmocka_unit_test(test_local_orders), cmocka_unit_test(test_files),
        cmocka_unit_test(test_file_bound),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
