/* The placement of operations in distributed_epoch (pipeline/dist.h): the analysis table, and
 * the property that matters: reading every split of the sequence in order through the workers'
 * part, then the reader's part, gives exactly what the whole pipeline gives locally. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pipeline.h"

#include "common/error.h"
#include "pipeline/dist.h"
#include "pipeline/format.h"
#include "pipeline/iter.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sluice_registry *reg;

struct str {
    char *p;
    size_t len;
};

/* Appends every element of run as text, one per line. */
static void drain(struct pipe_run *run, struct str *out)
{
    struct sluice_element e;
    struct pipe_buf b = {0};
    pipe_elem_init(&e);
    int rc;
    while ((rc = pipe_run_next(run, &e)) == 1) {
        b.len = 0;
        assert_int_equal(pipe_format_elem(&b, &e), 0);
        out->p = realloc(out->p, out->len + b.len + 2);
        assert_non_null(out->p);
        memcpy(out->p + out->len, b.p, b.len);
        out->len += b.len;
        out->p[out->len++] = '\n';
        out->p[out->len] = '\0';
    }
    if (rc != 0)
        fail_msg("run: %s", run->ctx.err);
    pipe_buf_release(&b);
    pipe_elem_release(&e);
}

static char *run_local(const char *text)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_run *run = NULL;
    if (pipe_open(spec, reg, &run, err, sizeof err) != 0)
        fail_msg("%s: %s", text, err);
    struct str b = {calloc(1, 1), 0};
    drain(run, &b);
    pipe_run_free(run);
    pipe_spec_free(spec);
    return b.p;
}

/* The merged stream of the workers' parts, in split order: an upstream for the reader's part. */
struct merged {
    struct pipe_iter base;
    const struct pipe_spec *spec;
    struct pipe_split_provider *prov;
    uint64_t seq;
    struct pipe_run *cur;
};

static int merged_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct merged *m = (struct merged *)it;
    for (;;) {
        if (m->cur) {
            int rc = pipe_run_next(m->cur, out);
            if (rc != 0)
                return rc;
            pipe_run_free(m->cur);
            m->cur = NULL;
        }
        struct split split;
        if (!split_plan_at(&m->prov->plan, m->seq, &split))
            return 0;
        m->seq++;
        char err[SLUICE_ERRMSG_SIZE];
        if (pipe_open_splits(m->spec, reg, &split, 1, &m->cur, err, sizeof err) != 0)
            fail_msg("open split %llu: %s", (unsigned long long)split.seq, err);
    }
}

static void merged_destroy(struct pipe_iter *it)
{
    struct merged *m = (struct merged *)it;
    pipe_run_free(m->cur);
    free(m);
}

static const struct pipe_iter_ops merged_ops = {merged_next, merged_destroy};

/* Every split in order through the workers' part, then the reader's part. split_size 0: the
 * default. */
static char *run_distributed(const char *text, uint64_t split_size)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_split_provider prov;
    if (pipe_split_provider_init(&prov, spec, split_size, err, sizeof err) != 0)
        fail_msg("%s: %s", text, err);
    struct merged *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->base.ops = &merged_ops;
    m->spec = spec;
    m->prov = &prov;
    char tail_text[512];
    /* Nothing for the reader: an identity tail. */
    if (prov.dist.cut == spec->nops)
        snprintf(tail_text, sizeof tail_text, "take(-1)");
    else
        pipe_spec_format_ops(spec, prov.dist.cut, spec->nops, tail_text, sizeof tail_text);
    struct pipe_spec *tail = NULL;
    if (pipe_parse_tail(tail_text, &tail, err, sizeof err) != 0)
        fail_msg("tail '%s': %s", tail_text, err);
    struct pipe_run *run = NULL;
    if (pipe_open_tail(tail, reg, &m->base, &run, err, sizeof err) != 0)
        fail_msg("tail '%s': %s", tail_text, err);
    struct str b = {calloc(1, 1), 0};
    drain(run, &b);
    pipe_run_free(run);
    pipe_spec_free(tail);
    pipe_split_provider_release(&prov);
    pipe_spec_free(spec);
    return b.p;
}

/* Pipelines without a shuffle: the distributed reading in split order is the local one, element
 * for element. Each is tried with the default split size and with small odd ones, which put
 * split boundaries everywhere. */
static const char *const same_as_local[] = {
    "range(1000) | take(100)",
    "range(1000) | skip(10) | take(5)",
    "range(100000) | take(100)",
    "range(100) | skip(3) | shard(4, 1) | take(7) | map(square)",
    "range(10, 200, 7) | shard(3, 2) | skip(2)",
    "list(1, 2, 3, 4, 5, 6, 7) | skip(-1)",
    "list(1, 2, 3, 4, 5, 6, 7) | take(-1) | take(4) | skip(1)",
    "range(100) | batch(32)",
    "range(100) | batch(32, drop_remainder)",
    "range(1000) | map(add, 1) | batch(7) | take(3) | map(mul, 2)",
    "range(1000) | batch(7) | skip(140) | batch(2)",
    "range(10) | repeat(3) | batch(4)",
    "range(10) | repeat(3) | batch(4, drop_remainder)",
    "range(10) | batch(4) | repeat(3)",
    "range(10) | batch(4) | take(2) | repeat(2)",
    "range(100) | map(add, 1) | skip(90) | repeat(2) | take(15)",
    "range(10) | repeat() | take(25)",
    "range(10) | repeat() | skip(7) | take(12)",
    "range(7) | repeat() | batch(3) | take(10)",
    "range(5) | take(3) | repeat(2) | repeat(2)",
    "range(20) | filter(even) | take(3)",
    "range(20) | filter(even) | batch(4)",
    "range(20) | filter(odd) | batch(4, drop_remainder) | map(identity)",
    "range(30) | filter(even) | map(add, 1) | skip(4) | batch(3)",
    "range(0) | repeat() | take(5)",
    "range(10) | repeat(0) | batch(2)",
    "range(10) | take(0) | repeat()",
    "range(10) | shard(SHARD_HINT, SHARD_HINT) | take(4)",
    /* global_shuffle: the shuffled stream is a view like the source, at any split size. */
    "range(1000) | global_shuffle(7)",
    "range(37) | global_shuffle(-1) | repeat(3)",
    "range(10, 200, 7) | global_shuffle(3) | shard(3, 2) | skip(2) | repeat(2)",
    "list(1, 2, 3, 4, 5, 6, 7) | global_shuffle(5) | take(4) | repeat(2)",
    "range(100) | global_shuffle(9) | batch(8) | repeat(2)",
    "range(100) | global_shuffle(9) | repeat(3) | batch(8)",
    "range(10) | global_shuffle(2) | repeat() | skip(7) | take(31)",
    "range(7) | global_shuffle(2) | repeat() | batch(3) | take(10)",
    "range(5) | global_shuffle(4) | take(3) | repeat(2) | repeat(3)",
    "range(100) | global_shuffle(1) | map(add, 1) | skip(90) | repeat(2) | take(15)",
    "range(30) | global_shuffle(8) | filter(even) | batch(4)",
    "range(1) | global_shuffle(8) | repeat(4)",
    "range(0) | global_shuffle(8) | repeat(4)",
};

/* pipe_dist_index divides only past the first lap; it must give (skip + g) mod count wherever. */
static void test_index_of_position(void **state)
{
    (void)state;
    const uint64_t counts[] = {0, 1, 3, 10, 1000, UINT64_MAX};
    const uint64_t skips[] = {0, 2, 9, 999, UINT64_MAX - 1};
    const uint64_t gs[] = {0, 1, 7, 10, 11, 2999, UINT64_MAX};
    for (size_t a = 0; a < sizeof counts / sizeof counts[0]; a++)
        for (size_t b = 0; b < sizeof skips / sizeof skips[0]; b++)
            for (size_t c = 0; c < sizeof gs / sizeof gs[0]; c++) {
                struct pipe_dist d = {
                    .offset = 5, .stride = 3, .count = counts[a], .skip = skips[b]};
                uint64_t q = d.count ? (d.skip + gs[c]) % d.count : 0;
                assert_int_equal(pipe_dist_index(&d, gs[c]), d.offset + q * d.stride);
            }
}

static void test_same_as_local(void **state)
{
    (void)state;
    const uint64_t sizes[] = {0, 1, 3, 5, 13};
    for (size_t i = 0; i < sizeof same_as_local / sizeof *same_as_local; i++) {
        char *want = run_local(same_as_local[i]);
        for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
            char *got = run_distributed(same_as_local[i], sizes[j]);
            if (strcmp(want, got) != 0)
                fail_msg("%s (split size %llu):\nlocal:\n%s\ndistributed:\n%s", same_as_local[i],
                         (unsigned long long)sizes[j], want, got);
            free(got);
        }
        free(want);
    }
}

struct placement {
    const char *text;
    const char *where; /* per op: S split sequence, W worker, C client */
    uint64_t len, passes, quantum, min_split;
};

static const struct placement placements[] = {
    {"range(1000) | take(100)", "S", 100, 1, 1, 0},
    {"range(1000) | map(square) | skip(10) | take(5)", "WSS", 5, 1, 1, 0},
    {"range(100) | batch(32) | map(identity)", "WW", 100, 1, 32, 0},
    {"range(100) | repeat(3) | batch(32)", "SW", 300, 1, 32, 0},
    {"range(10) | repeat() | batch(4)", "SW", 20, UINT64_MAX, 4, 0},
    {"range(10) | batch(4) | repeat()", "WS", 10, UINT64_MAX, 4, 0},
    {"range(100) | shuffle(50) | batch(10) | shuffle(4)", "WWW", 100, 1, 10, 50},
    {"range(100) | shuffle(50) | take(10)", "WC", 100, 1, 1, 50},
    {"range(100) | filter(even) | batch(10) | map(identity)", "WCC", 100, 1, 1, 0},
    {"range(100) | batch(2) | repeat(2) | take(3)", "WSC", 100, 2, 2, 0},
    {"range(100) | repeat(2) | shard(2, 0)", "SC", 100, 2, 1, 0},
    {"range(100) | global_shuffle(3) | take(10) | map(identity)", "SSW", 10, 1, 1, 0},
    {"range(100) | global_shuffle(3) | repeat(2) | batch(4)", "SSW", 200, 1, 4, 0},
    {"lines(\"/nonexistent\") | global_shuffle(1) | repeat(3) | take(2)", "SSC", 0, 3, 1, 0},
    {"lines(\"/nonexistent\") | map(identity) | shuffle(9) | repeat(2) | batch(2)", "WWSC", 0, 2, 1,
     0},
};

static void test_placements(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof placements / sizeof *placements; i++) {
        const struct placement *p = &placements[i];
        struct pipe_spec *spec = pipeline_parse(p->text);
        struct pipe_dist d;
        char err[SLUICE_ERRMSG_SIZE];
        if (pipe_dist_analyze(spec, &d, err, sizeof err) != 0)
            fail_msg("%s: %s", p->text, err);
        assert_int_equal(spec->nops, strlen(p->where));
        for (size_t k = 0; k < spec->nops; k++) {
            enum pipe_dist_place want = p->where[k] == 'S'   ? PIPE_DIST_SPLITS
                                        : p->where[k] == 'W' ? PIPE_DIST_WORKER
                                                             : PIPE_DIST_CLIENT;
            if (pipe_dist_place_of(spec, &d, k) != want)
                fail_msg("%s: op %zu is not placed '%c'", p->text, k, p->where[k]);
        }
        if (d.len != p->len || d.passes != p->passes || d.quantum != p->quantum ||
            d.min_split != p->min_split)
            fail_msg("%s: len %llu passes %llu quantum %llu min_split %llu", p->text,
                     (unsigned long long)d.len, (unsigned long long)d.passes,
                     (unsigned long long)d.quantum, (unsigned long long)d.min_split);
        pipe_spec_free(spec);
    }
}

static void test_split_sizes(void **state)
{
    (void)state;
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_split_provider p;
    /* range(100) | batch(32): never one-element splits for a batch; multiples of 32. */
    struct pipe_spec *spec = pipeline_parse("range(100) | batch(32)");
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, err, sizeof err), 0);
    assert_int_equal(p.plan.split_size, 32);
    assert_int_equal(p.plan.per_pass, 4);
    pipe_split_provider_release(&p);
    assert_int_equal(pipe_split_provider_init(&p, spec, 40, err, sizeof err), 0);
    assert_int_equal(p.plan.split_size, 64);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);
    /* A shuffle's buffer fills within a split. */
    spec = pipeline_parse("range(100000) | shuffle(1000)");
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, err, sizeof err), 0);
    assert_int_equal(p.plan.split_size, 1000);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *text, *err;
    } cases[] = {
        {"range(10) | filter(even) | take(3) | repeat(2)",
         "repeat(2) (column 38) after take(3) (column 28) cannot mean the same in "
         "distributed_epoch: take runs in the reader (after a filter the elements' positions are "
         "unknown), which cannot read the stream again; move the repeat before it"},
        {"lines(\"/x\") | batch(2) | repeat()",
         "repeat() (column 26) after batch(2) (column 15) cannot mean the same in "
         "distributed_epoch: batch runs in the reader (files are split whole, so a batch would "
         "end at every file's end), which cannot read the stream again; move the repeat before "
         "it"},
        {"range(10) | repeat(2) | take(15) | repeat(2)",
         "repeat(2) (column 36) after take(15) (column 25) cannot mean the same in "
         "distributed_epoch: take joins the passes of the repeat before it into one stream, "
         "which the split sequence cannot repeat; repeat once, after it or before it"},
        {"range(10) | global_shuffle(1) | repeat() | batch(3) | repeat(2)",
         "repeat(2) (column 55) after batch(3) (column 44) cannot mean the same in "
         "distributed_epoch: batch joins the passes of the repeat before it into one stream, "
         "which the split sequence cannot repeat; repeat once, after it or before it"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct pipe_spec *spec = pipeline_parse(cases[i].text);
        struct pipe_dist d;
        char err[SLUICE_ERRMSG_SIZE] = "";
        assert_int_equal(pipe_dist_analyze(spec, &d, err, sizeof err), SLUICE_ERR_UNSUPPORTED);
        assert_string_equal(err, cases[i].err);
        struct pipe_split_provider p;
        assert_int_equal(pipe_split_provider_init(&p, spec, 0, err, sizeof err),
                         SLUICE_ERR_UNSUPPORTED);
        pipe_spec_free(spec);
    }
}

static int setup(void **state)
{
    (void)state;
    return pipe_registry_new(&reg);
}

static int teardown(void **state)
{
    (void)state;
    pipe_registry_free(reg);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_of_position), cmocka_unit_test(test_same_as_local),
        cmocka_unit_test(test_placements),        cmocka_unit_test(test_split_sizes),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
