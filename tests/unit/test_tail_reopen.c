/* A local tail's repeat over an upstream it can open again (pipe_open_tail_reopen): the passes it
 * asks for, the elements it yields, the end of repeat() over an empty pass, failures of a
 * reopen, and the refusal without one. The upstream is a fake: each pass yields a fixed list of
 * int64 values and records its pass number. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/iter.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "sluice/sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sluice_registry *reg;

/* What the fake upstreams of one run share. */
struct fake_source {
    const int64_t *values; /* what every pass yields, unless pass_len says otherwise */
    size_t n;
    long empty_from; /* passes from this one on yield nothing (-1: never) */
    long fail_at;    /* the reopen for this pass fails (-1: never) */
    uint64_t passes[16];
    size_t npasses; /* reopens asked for, in order */
    int open;       /* upstreams alive */
};

struct fake_up {
    struct pipe_iter base;
    struct fake_source *src;
    size_t i, n;
};

static int fake_next(struct pipe_iter *pi, struct sluice_element *out)
{
    struct fake_up *f = (struct fake_up *)pi;
    if (f->i >= f->n)
        return 0;
    if (pipe_elem_resize(out, 1) != 0)
        return SLUICE_ERR_NOMEM;
    return pipe_tensor_set_scalar(&out->t[0], SLUICE_INT64, &f->src->values[f->i++]) == 0
               ? 1
               : SLUICE_ERR_NOMEM;
}

static void fake_destroy(struct pipe_iter *pi)
{
    struct fake_up *f = (struct fake_up *)pi;
    f->src->open--;
    free(f);
}

static const struct pipe_iter_ops fake_ops = {fake_next, fake_destroy};

static struct pipe_iter *fake_new(struct fake_source *src, uint64_t pass)
{
    struct fake_up *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->base.ops = &fake_ops;
    f->src = src;
    f->n = src->empty_from >= 0 && (long)pass >= src->empty_from ? 0 : src->n;
    src->open++;
    return &f->base;
}

static int fake_reopen(void *user, uint64_t pass, struct pipe_iter **out, char *err, size_t errlen)
{
    struct fake_source *src = user;
    assert_true(src->npasses < 16);
    src->passes[src->npasses++] = pass;
    /* One pass at a time: the previous upstream is gone before the next is opened. */
    assert_int_equal(src->open, 0);
    if (src->fail_at >= 0 && (long)pass == src->fail_at)
        return err_set(err, errlen, SLUICE_ERR_UNAVAILABLE, "pass %llu: no job",
                       (unsigned long long)pass);
    *out = fake_new(src, pass);
    return 0;
}

/* Runs tail over src and writes the values it yields ("0 1 2 | ..." with batches in brackets)
 * into got; returns the run's result (0 or the error) and its message in msg. */
static int run_tail(const char *tail, struct fake_source *src, char *got, size_t len, char *msg,
                    size_t msglen)
{
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_parse_tail(tail, &spec, err, sizeof err), 0);
    struct pipe_run *run = NULL;
    int rc =
        pipe_open_tail_reopen(spec, reg, fake_new(src, 0), fake_reopen, src, &run, msg, msglen);
    pipe_spec_free(spec);
    if (rc)
        return rc;
    struct sluice_element e;
    pipe_elem_init(&e);
    size_t off = 0;
    got[0] = '\0';
    while ((rc = pipe_run_next(run, &e)) == 1) {
        size_t nb;
        const int64_t *v = sluice_element_data(&e, 0, &nb);
        size_t nv = nb / sizeof *v;
        bool batch = e.t[0].rank > 0;
        off += (size_t)snprintf(got + off, len - off, "%s%s", off ? " " : "", batch ? "[" : "");
        for (size_t k = 0; k < nv; k++)
            off += (size_t)snprintf(got + off, len - off, "%s%lld", k ? " " : "", (long long)v[k]);
        if (batch)
            off += (size_t)snprintf(got + off, len - off, "]");
    }
    if (rc < 0)
        snprintf(msg, msglen, "%s", run->ctx.err);
    pipe_elem_release(&e);
    pipe_run_free(run);
    assert_int_equal(src->open, 0);
    return rc;
}

static const int64_t three[] = {0, 1, 2};

struct reopen_case {
    const char *tail;
    long empty_from;
    const char *want;
    size_t npasses;
    uint64_t passes[8];
};

static void test_reopen_passes(void **state)
{
    (void)state;
    static const struct reopen_case cases[] = {
        {"repeat(3)", -1, "0 1 2 0 1 2 0 1 2", 2, {1, 2}},
        {"repeat(1)", -1, "0 1 2", 0, {0}},
        {"repeat(0)", -1, "", 0, {0}},
        {"repeat(2) | batch(4)", -1, "[0 1 2 0] [1 2]", 1, {1}},
        {"map(add, 10) | repeat(2) | take(4)", -1, "10 11 12 10", 1, {1}},
        {"take(2) | repeat(2)", -1, "0 1 0 1", 1, {1}},
        /* Nested repeats number the passes over the upstream in order. */
        {"repeat(2) | repeat(3)", -1, "0 1 2 0 1 2 0 1 2 0 1 2 0 1 2 0 1 2", 5, {1, 2, 3, 4, 5}},
        /* repeat() ends once a whole pass yields nothing. */
        {"repeat()", 2, "0 1 2 0 1 2", 2, {1, 2}},
        {"repeat()", 0, "", 0, {0}},
        {"filter(lt, 0) | repeat()", -1, "", 0, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct reopen_case *c = &cases[i];
        struct fake_source src = {
            .values = three, .n = 3, .empty_from = c->empty_from, .fail_at = -1};
        char got[256], msg[SLUICE_ERRMSG_SIZE] = "";
        int rc = run_tail(c->tail, &src, got, sizeof got, msg, sizeof msg);
        if (rc != 0)
            fail_msg("%s: %d %s", c->tail, rc, msg);
        if (strcmp(got, c->want) != 0)
            fail_msg("%s: got '%s', want '%s'", c->tail, got, c->want);
        assert_int_equal(src.npasses, c->npasses);
        for (size_t k = 0; k < c->npasses; k++)
            assert_int_equal(src.passes[k], c->passes[k]);
    }
}

static void test_reopen_fails(void **state)
{
    (void)state;
    struct fake_source src = {.values = three, .n = 3, .empty_from = -1, .fail_at = 2};
    char got[256], msg[SLUICE_ERRMSG_SIZE] = "";
    int rc = run_tail("repeat(5)", &src, got, sizeof got, msg, sizeof msg);
    assert_int_equal(rc, SLUICE_ERR_UNAVAILABLE);
    assert_string_equal(msg, "pass 2: no job");
    assert_string_equal(got, "0 1 2 0 1 2");
    assert_int_equal(src.npasses, 2);
}

/* Without a way to reopen, a tail's repeat is refused when it is opened. */
static void test_no_reopen_refused(void **state)
{
    (void)state;
    struct fake_source src = {.values = three, .n = 3, .empty_from = -1, .fail_at = -1};
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_parse_tail("map(add, 1) | repeat(2)", &spec, err, sizeof err), 0);
    struct pipe_run *run = NULL;
    int rc = pipe_open_tail(spec, reg, fake_new(&src, 0), &run, err, sizeof err);
    pipe_spec_free(spec);
    assert_int_equal(rc, SLUICE_ERR_UNSUPPORTED);
    assert_null(run);
    assert_string_equal(err, "column 15: repeat cannot re-read elements from the service; it is "
                             "not supported in a local tail");
    assert_int_equal(src.open, 0);
}

struct first_case {
    const char *tail;
    int column; /* of the first repeat that re-reads, 0: none */
};

static void test_first_repeat(void **state)
{
    (void)state;
    static const struct first_case cases[] = {
        {"map(add, 1)", 0},
        {"repeat(1)", 0},
        {"repeat(1) | batch(2)", 0},
        {"repeat()", 1},
        {"repeat(0)", 1},
        {"batch(2) | repeat(3)", 12},
        {"repeat(1) | take(2) | repeat(2) | repeat()", 23},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pipe_spec *spec = NULL;
        char err[SLUICE_ERRMSG_SIZE];
        assert_int_equal(pipe_parse_tail(cases[i].tail, &spec, err, sizeof err), 0);
        const struct pipe_op *op = pipe_spec_first_repeat(spec);
        int column = op ? op->column : 0;
        if (column != cases[i].column)
            fail_msg("%s: column %d, want %d", cases[i].tail, column, cases[i].column);
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
        cmocka_unit_test(test_reopen_passes),
        cmocka_unit_test(test_reopen_fails),
        cmocka_unit_test(test_no_reopen_refused),
        cmocka_unit_test(test_first_repeat),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
