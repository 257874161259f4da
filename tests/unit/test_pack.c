/* pack(): the packed sequences checked against a straightforward reference written here (a list
 * of open bins, searched and emitted by the rules of pack.h), for both policies, several windows
 * and sequence lengths and random document lengths; the padding of best_fit below first_fit on a
 * skewed length distribution; every input dtype; the errors; and the text and definition forms. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/def.h"
#include "pipeline/element.h"
#include "pipeline/pack.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- A source of documents: doc i holds tokens i * 100000 + j, j < len[i] ---------------- */

struct docs {
    struct pipe_iter base;
    const uint32_t *len;
    size_t n, next;
    enum sluice_dtype dtype;
    int extra; /* 1: elements of two components; 2: a rank-0 element; 3: float32 */
};

static int32_t token(size_t doc, uint32_t j)
{
    return (int32_t)(doc * 100000 + j);
}

static int docs_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct docs *d = (struct docs *)it;
    if (d->next == d->n)
        return 0;
    size_t i = d->next++;
    uint32_t n = d->len[i];
    assert_int_equal(pipe_elem_resize(out, d->extra == 1 ? 2 : 1), 0);
    struct pipe_tensor *t = &out->t[0];
    enum sluice_dtype dt = d->extra == 3 ? SLUICE_FLOAT32 : d->dtype;
    size_t w = sluice_dtype_size(dt);
    t->dtype = dt;
    assert_int_equal(pipe_tensor_reserve(t, (size_t)n * w + 8, 0), 0);
    t->rank = d->extra == 2 ? 0 : 1;
    t->shape[0] = n;
    t->len = (size_t)n * w;
    for (uint32_t j = 0; j < n; j++) {
        int64_t v =
            d->dtype == SLUICE_UINT8 || d->dtype == SLUICE_INT8 ? (int64_t)(j % 100) : token(i, j);
        switch (dt) {
        case SLUICE_INT8:
            ((int8_t *)t->data)[j] = (int8_t)v;
            break;
        case SLUICE_UINT8:
            t->data[j] = (uint8_t)v;
            break;
        case SLUICE_INT16:
            ((int16_t *)(void *)t->data)[j] = (int16_t)v;
            break;
        case SLUICE_UINT16:
            ((uint16_t *)(void *)t->data)[j] = (uint16_t)v;
            break;
        case SLUICE_INT32:
            ((int32_t *)(void *)t->data)[j] = (int32_t)v;
            break;
        case SLUICE_UINT32:
            ((uint32_t *)(void *)t->data)[j] = (uint32_t)v;
            break;
        case SLUICE_INT64:
            ((int64_t *)(void *)t->data)[j] = v;
            break;
        case SLUICE_UINT64:
            ((uint64_t *)(void *)t->data)[j] = (uint64_t)v;
            break;
        default:
            ((float *)(void *)t->data)[j] = (float)v;
            break;
        }
    }
    if (d->extra == 1)
        assert_int_equal(pipe_tensor_set_i64(&out->t[1], 7), 0);
    return 1;
}

static void docs_destroy(struct pipe_iter *it)
{
    free(it);
}

static const struct pipe_iter_ops docs_ops = {docs_next, docs_destroy};

static struct pipe_iter *docs_new(const uint32_t *len, size_t n, enum sluice_dtype dtype,
                                  struct pipe_ctx *ctx)
{
    struct docs *d = calloc(1, sizeof *d);
    assert_non_null(d);
    d->base.ops = &docs_ops;
    d->base.ctx = ctx;
    d->len = len;
    d->n = n;
    d->dtype = dtype;
    return &d->base;
}

/* ---- The reference ------------------------------------------------------------------------ */

/* A sequence: L tokens, segment ids and positions. */
struct seqs {
    int32_t *v; /* 3 * L per sequence */
    size_t n, cap;
    uint32_t L;
};

static int32_t *seq_add(struct seqs *s)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * 3 * s->L * sizeof(int32_t));
        assert_non_null(s->v);
    }
    int32_t *q = s->v + s->n++ * 3 * s->L;
    memset(q, 0, 3 * s->L * sizeof(int32_t));
    return q;
}

/* An open bin of the reference: the pieces placed, in order. */
struct rbin {
    size_t doc[64];
    uint32_t from[64], len[64];
    int k;
    uint32_t used;
};

static void ref_emit(struct seqs *s, const struct rbin *b)
{
    int32_t *q = seq_add(s);
    uint32_t at = 0;
    for (int p = 0; p < b->k; p++)
        for (uint32_t j = 0; j < b->len[p]; j++, at++) {
            q[at] = token(b->doc[p], b->from[p] + j);
            q[s->L + at] = p + 1;
            q[2 * s->L + at] = (int32_t)j;
        }
}

/* Bins are kept in the order they were opened: list[0] is the oldest. */
static void reference(const uint32_t *len, size_t n, uint32_t L, bool first_fit, uint32_t window,
                      struct seqs *out)
{
    out->L = L;
    struct rbin *list = calloc(window, sizeof *list);
    assert_non_null(list);
    uint32_t open = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t from = 0, left = len[i];
        while (left >= L) {
            struct rbin whole = {.doc = {i}, .from = {from}, .len = {L}, .k = 1, .used = L};
            ref_emit(out, &whole);
            from += L;
            left -= L;
        }
        if (left == 0)
            continue;
        int pick = -1;
        for (uint32_t b = 0; b < open; b++) {
            if (L - list[b].used < left)
                continue;
            if (pick < 0 || (!first_fit && list[b].used > list[pick].used))
                pick = (int)b;
        }
        if (pick < 0) {
            if (open == window) {
                uint32_t v = 0;
                for (uint32_t b = 1; b < open && !first_fit; b++)
                    if (list[b].used > list[v].used)
                        v = b;
                ref_emit(out, &list[v]);
                memmove(&list[v], &list[v + 1], (open - v - 1) * sizeof *list);
                open--;
            }
            pick = (int)open++;
            memset(&list[pick], 0, sizeof *list);
        }
        struct rbin *b = &list[pick];
        assert_true(b->k < 64);
        b->doc[b->k] = i;
        b->from[b->k] = from;
        b->len[b->k++] = left;
        b->used += left;
        if (b->used == L) {
            ref_emit(out, b);
            memmove(&list[pick], &list[pick + 1], (open - (uint32_t)pick - 1) * sizeof *list);
            open--;
        }
    }
    for (uint32_t b = 0; b < open; b++)
        ref_emit(out, &list[b]);
    free(list);
}

/* ---- Running pack ------------------------------------------------------------------------- */

/* Runs pack over the documents into out; returns the last result (0 or an error) and leaves the
 * message in ctx. */
static int run_pack(const uint32_t *len, size_t n, enum sluice_dtype dtype, int extra, uint32_t L,
                    bool first_fit, uint32_t window, struct pipe_ctx *ctx, struct seqs *out)
{
    out->L = L;
    struct pipe_iter *src = docs_new(len, n, dtype, ctx);
    ((struct docs *)src)->extra = extra;
    struct pipe_iter *it = NULL;
    assert_null(pipe_pack_problem(L, window));
    assert_int_equal(pipe_pack_open(L, first_fit, window, src, ctx, &it), 0);
    struct sluice_element e;
    pipe_elem_init(&e);
    int rc;
    while ((rc = pipe_next(it, &e)) == 1) {
        assert_int_equal(e.n, 3);
        int32_t *q = seq_add(out);
        for (int c = 0; c < 3; c++) {
            assert_int_equal(e.t[c].dtype, SLUICE_INT32);
            assert_int_equal(e.t[c].rank, 1);
            assert_int_equal(e.t[c].shape[0], L);
            assert_int_equal(e.t[c].len, (size_t)L * 4);
            memcpy(q + c * L, e.t[c].data, (size_t)L * 4);
        }
    }
    assert_int_equal(pipe_next(it, &e), rc); /* it keeps returning the same */
    it->ops->destroy(it);
    pipe_elem_release(&e);
    return rc;
}

static void assert_same(const struct seqs *a, const struct seqs *b, const char *what)
{
    if (a->n != b->n)
        fail_msg("%s: %zu sequences, the reference has %zu", what, a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        if (memcmp(a->v + i * 3 * a->L, b->v + i * 3 * a->L, 3 * a->L * sizeof(int32_t)) != 0)
            fail_msg("%s: sequence %zu differs from the reference", what, i);
}

static uint64_t rng_state;
static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Mostly short documents, some long, a few longer than a sequence, some empty. */
static uint32_t skewed(uint32_t L)
{
    uint32_t r = rng() % 100;
    if (r < 5)
        return 0;
    if (r < 60)
        return 1 + rng() % (L / 8 + 1);
    if (r < 90)
        return 1 + rng() % (L / 2 + 1);
    if (r < 97)
        return L / 2 + rng() % L;
    return L + rng() % (3 * L);
}

static void test_matches_reference(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 7, 64, 512};
    const uint32_t windows[] = {1, 2, 16, 100};
    rng_state = 42;
    for (size_t a = 0; a < sizeof lens / sizeof *lens; a++)
        for (size_t w = 0; w < sizeof windows / sizeof *windows; w++)
            for (int ff = 0; ff < 2; ff++) {
                uint32_t L = lens[a];
                size_t n = 300 + rng() % 300;
                uint32_t *len = malloc(n * sizeof *len);
                assert_non_null(len);
                uint64_t total = 0;
                for (size_t i = 0; i < n; i++)
                    total += len[i] = skewed(L);
                struct pipe_ctx ctx = {0};
                struct seqs got = {0}, want = {0};
                assert_int_equal(run_pack(len, n, SLUICE_INT32, 0, L, ff, windows[w], &ctx, &got),
                                 0);
                reference(len, n, L, ff, windows[w], &want);
                char what[96];
                snprintf(what, sizeof what, "pack(%u, %s, %u) of %zu documents", L,
                         ff ? "first_fit" : "best_fit", windows[w], n);
                assert_same(&got, &want, what);
                /* Nothing dropped, nothing added: every token once, padding 0s at the end. */
                uint64_t tokens = 0;
                for (size_t i = 0; i < got.n; i++)
                    for (uint32_t j = 0; j < L; j++)
                        tokens += got.v[i * 3 * L + L + j] != 0;
                assert_int_equal(tokens, total);
                free(got.v);
                free(want.v);
                free(len);
            }
}

/* The padding fraction of a packing: the share of sequence slots that hold no token. */
static double padding(const struct seqs *s)
{
    uint64_t pad = 0;
    for (size_t i = 0; i < s->n; i++)
        for (uint32_t j = 0; j < s->L; j++)
            pad += s->v[i * 3 * s->L + s->L + j] == 0;
    return s->n ? (double)pad / ((double)s->n * s->L) : 0;
}

static void test_best_fit_pads_less(void **state)
{
    (void)state;
    const uint32_t L = 2048;
    const size_t n = 20000;
    uint32_t *len = malloc(n * sizeof *len);
    assert_non_null(len);
    rng_state = 7;
    for (size_t i = 0; i < n; i++) {
        /* Heavy-tailed: most documents a few hundred tokens, some near or past L. */
        uint32_t r = rng() % 1000;
        len[i] = r < 700 ? 50 + rng() % 400 : r < 950 ? 400 + rng() % 1200 : 1500 + rng() % 3000;
    }
    struct pipe_ctx ctx = {0};
    struct seqs best = {0}, first = {0};
    assert_int_equal(run_pack(len, n, SLUICE_INT32, 0, L, false, 16, &ctx, &best), 0);
    assert_int_equal(run_pack(len, n, SLUICE_INT32, 0, L, true, 16, &ctx, &first), 0);
    double pb = padding(&best), pf = padding(&first);
    printf("    padding: best_fit %.2f %% in %zu sequences, first_fit %.2f %% in %zu\n", pb * 100,
           best.n, pf * 100, first.n);
    assert_true(pb < pf);
    assert_true(best.n < first.n);
    free(best.v);
    free(first.v);
    free(len);
}

static void test_dtypes(void **state)
{
    (void)state;
    const uint32_t len[] = {3, 0, 5, 2, 9};
    const enum sluice_dtype types[] = {SLUICE_INT16, SLUICE_UINT16, SLUICE_INT64, SLUICE_UINT32,
                                       SLUICE_UINT64};
    struct seqs want = {0};
    reference(len, 5, 4, false, 16, &want);
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        struct pipe_ctx ctx = {0};
        struct seqs got = {0};
        uint32_t small[] = {3, 0, 5, 2, 9};
        /* Doc i's tokens are i * 100000 + j: int16 and uint16 hold only doc 0's. */
        size_t n = types[k] == SLUICE_INT16 || types[k] == SLUICE_UINT16 ? 1 : 5;
        assert_int_equal(run_pack(small, n, types[k], 0, 4, false, 16, &ctx, &got), 0);
        struct seqs ref = {0};
        reference(len, n, 4, false, 16, &ref);
        assert_same(&got, &ref, sluice_dtype_name(types[k]));
        free(got.v);
        free(ref.v);
    }
    /* int8 and uint8 documents: tokens j % 100 as they are. */
    for (int u = 0; u < 2; u++) {
        struct pipe_ctx ctx = {0};
        struct seqs got = {0};
        uint32_t one[] = {6};
        assert_int_equal(
            run_pack(one, 1, u ? SLUICE_UINT8 : SLUICE_INT8, 0, 8, false, 16, &ctx, &got), 0);
        assert_int_equal(got.n, 1);
        const int32_t want8[8] = {0, 1, 2, 3, 4, 5, 0, 0};
        assert_memory_equal(got.v, want8, sizeof want8);
        free(got.v);
    }
    free(want.v);
}

/* A document of exactly L, of 2L + 1, and an empty one: chunks of L each a sequence of their
 * own, the rest placed; the empty one yields nothing. */
static void test_long_and_empty(void **state)
{
    (void)state;
    const uint32_t len[] = {0, 4, 9, 0};
    struct pipe_ctx ctx = {0};
    struct seqs got = {0};
    assert_int_equal(run_pack(len, 4, SLUICE_INT32, 0, 4, false, 16, &ctx, &got), 0);
    assert_int_equal(got.n, 4);
    /* doc 1 whole, doc 2's two chunks, then doc 2's last token padded. */
    const int32_t last[12] = {200008, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(got.v + 3 * 3 * 4, last, sizeof last);
    const int32_t first[12] = {100000, 100001, 100002, 100003, 1, 1, 1, 1, 0, 1, 2, 3};
    assert_memory_equal(got.v, first, sizeof first);
    free(got.v);
    got = (struct seqs){0};
    /* Nothing but empty documents: nothing at all. */
    const uint32_t none[] = {0, 0, 0};
    assert_int_equal(run_pack(none, 3, SLUICE_INT32, 0, 4, true, 2, &ctx, &got), 0);
    assert_int_equal(got.n, 0);
    free(got.v);
}

static void expect_error(int extra, enum sluice_dtype dtype, uint64_t limit, int want_rc,
                         const char *want)
{
    const uint32_t len[] = {3, 4};
    struct pipe_ctx ctx = {0};
    ctx.max_element_bytes = limit;
    struct seqs got = {0};
    int rc = run_pack(len, 2, dtype, extra, 8, false, 16, &ctx, &got);
    assert_int_equal(rc, want_rc);
    assert_string_equal(ctx.err, want);
    free(got.v);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error(1, SLUICE_INT32, 0, SLUICE_ERR_TYPE,
                 "pack: element 0 has 2 components; pack takes one 1-D integer tensor of tokens "
                 "per document");
    expect_error(2, SLUICE_INT32, 0, SLUICE_ERR_TYPE,
                 "pack: element 0 is a rank-0 int32 tensor; pack takes a 1-D integer tensor of "
                 "tokens (map(tokenize, ...) makes one)");
    expect_error(3, SLUICE_INT32, 0, SLUICE_ERR_TYPE,
                 "pack: element 0 is a rank-1 float32 tensor; pack takes a 1-D integer tensor of "
                 "tokens (map(tokenize, ...) makes one)");
    /* Doc 1's tokens are 100000 + j: fine in int32, but not a uint64 past INT32_MAX. */
    expect_error(0, SLUICE_INT32, 95, SLUICE_ERR_LIMIT,
                 "pack: element of 96 bytes is over the worker's limit of 95 "
                 "(--max-element-bytes)");
    assert_string_equal(pipe_pack_problem(0, 16), "the sequence length must be in [1, 16777216]");
    assert_string_equal(pipe_pack_problem(8, 0), "the window must be in [1, 4096] open sequences");
    assert_string_equal(pipe_pack_problem(8, 4097),
                        "the window must be in [1, 4096] open sequences");
    assert_non_null(pipe_pack_problem((int64_t)1 << 24, 8));
    assert_null(pipe_pack_problem((int64_t)1 << 24, 4));
}

/* An element with a token past int32's range, through a source that yields exactly it. */
struct one {
    struct pipe_iter base;
    bool done;
};

static int one_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct one *o = (struct one *)it;
    if (o->done)
        return 0;
    o->done = true;
    assert_int_equal(pipe_elem_resize(out, 1), 0);
    struct pipe_tensor *t = &out->t[0];
    t->dtype = SLUICE_INT64;
    assert_int_equal(pipe_tensor_reserve(t, 16, 0), 0);
    t->rank = 1;
    t->shape[0] = 2;
    t->len = 16;
    ((int64_t *)(void *)t->data)[0] = 5;
    ((int64_t *)(void *)t->data)[1] = (int64_t)1 << 40;
    return 1;
}

static void test_token_out_of_range(void **state)
{
    (void)state;
    static const struct pipe_iter_ops ops = {one_next, docs_destroy};
    struct pipe_ctx ctx = {0};
    struct one *o = calloc(1, sizeof *o);
    assert_non_null(o);
    o->base.ops = &ops;
    o->base.ctx = &ctx;
    struct pipe_iter *it = NULL;
    assert_int_equal(pipe_pack_open(4, false, 2, &o->base, &ctx, &it), 0);
    struct sluice_element e;
    pipe_elem_init(&e);
    assert_int_equal(pipe_next(it, &e), SLUICE_ERR_TYPE);
    assert_string_equal(ctx.err, "pack: element 0: token 1 does not fit in int32");
    it->ops->destroy(it);
    pipe_elem_release(&e);
}

static void test_text_and_definition(void **state)
{
    (void)state;
    const char *texts[][2] = {
        {"range(3) | pack(2048)", "range(3) | pack(2048)"},
        {"range(3) | pack(8, \"best_fit\")", "range(3) | pack(8)"},
        {"range(3) | pack(8, first_fit)", "range(3) | pack(8, \"first_fit\")"},
        {"range(3) | pack(8, \"first_fit\", 4)", "range(3) | pack(8, \"first_fit\", 4)"},
        {"range(3) | pack(8, \"best_fit\", 32)", "range(3) | pack(8, \"best_fit\", 32)"},
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        struct pipe_spec *spec = NULL, *back = NULL;
        char err[256], buf[256];
        if (pipe_parse(texts[i][0], &spec, err, sizeof err) != 0)
            fail_msg("%s: %s", texts[i][0], err);
        assert_true(pipe_spec_format(spec, buf, sizeof buf) > 0);
        assert_string_equal(buf, texts[i][1]);
        uint8_t *bytes = NULL;
        size_t len = 0;
        assert_int_equal(pipe_spec_encode(spec, &bytes, &len), 0);
        assert_int_equal(pipe_spec_decode(bytes, len, &back, err, sizeof err), 0);
        assert_true(pipe_spec_equal(spec, back));
        free(bytes);
        pipe_spec_free(spec);
        pipe_spec_free(back);
    }
    const char *bad[][2] = {
        {"range(3) | pack()", "column 17: expected a number, found ')'"},
        {"range(3) | pack(0)", "column 17: expected a sequence length >= 1, found '0'"},
        {"range(3) | pack(8, \"worst\")",
         "column 20: expected \"best_fit\" or \"first_fit\", found '\"worst\"'"},
        {"range(3) | pack(8, best_fit, 0)", "column 30: expected a window >= 1, found '0'"},
        {"range(3) | pack(8, best_fit, 5000)",
         "column 17: the window must be in [1, 4096] open sequences"},
        {"range(3) | pack(8, best_fit, 4, 5)", "column 31: expected ')', found ','"},
        {"range(3) | pack(16777217)", "column 17: the sequence length must be in [1, 16777216]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct pipe_spec *spec = NULL;
        char err[256];
        assert_int_equal(pipe_parse(bad[i][0], &spec, err, sizeof err), SLUICE_ERR_PARSE);
        assert_string_equal(err, bad[i][1]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_best_fit_pads_less),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_long_and_empty),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_token_out_of_range),
        cmocka_unit_test(test_text_and_definition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
