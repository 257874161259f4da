/* Mixing datasets: sample_from_datasets and choose_from_datasets from the text to the elements
 * (parser, spec, definition, the draw, the iterator). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pipeline.h"

#include "common/error.h"
#include "pipeline/def.h"
#include "pipeline/dist.h"
#include "pipeline/mix.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sluice_registry *reg;

/* ---- Text, spec and definition ----------------------------------------------------------- */

static char *format_spec(const struct pipe_spec *s)
{
    int n = pipe_spec_format(s, NULL, 0);
    assert_true(n >= 0);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(pipe_spec_format(s, buf, (size_t)n + 1), n);
    return buf;
}

/* Every form of text parses to a spec whose canonical text is canon, which parses, clones,
 * encodes and decodes to equal specs. */
static void test_round_trips(void **state)
{
    (void)state;
    static const struct {
        const char *text, *canon;
    } cases[] = {
        {"sample_from_datasets([(range(3)), (list(1, 2) | map(square))], [0.5, 0.5], 7)",
         "sample_from_datasets([(range(3)), (list(1, 2) | map(square))], [0.5, 0.5], 7)"},
        {"sample_from_datasets( [ (range(3)) , (range(4)) ] , [1, 3], -2, stop_on_empty) | "
         "batch(2)",
         "sample_from_datasets([(range(3)), (range(4))], [1.0, 3.0], -2, stop_on_empty) | "
         "batch(2)"},
        {"sample_from_datasets([(range(3))], [2], 0, false)",
         "sample_from_datasets([(range(3))], [2.0], 0)"},
        {"sample_from_datasets([(range(3)), (range(1))], [0, 1e-3], 1, true)",
         "sample_from_datasets([(range(3)), (range(1))], [0.0, 0.001], 1, stop_on_empty)"},
        {"choose_from_datasets([(range(3)), (range(4))], (list(0, 1) | repeat(2)))",
         "choose_from_datasets([(range(3)), (range(4))], (list(0, 1) | repeat(2)))"},
        {"choose_from_datasets([(range(3))], (range(1)), stop_on_empty)",
         "choose_from_datasets([(range(3))], (range(1)))"},
        {"choose_from_datasets([(range(3))], (range(1)), false) | take(2)",
         "choose_from_datasets([(range(3))], (range(1)), false) | take(2)"},
        {"sample_from_datasets([(jsonl(\"web/*.zst\", \"text\") | map(tokenize, \"t.json\")), "
         "(lines(\"code/*.txt\"))], [0.6, 0.4], 5)",
         "sample_from_datasets([(jsonl(\"web/*.zst\", \"text\") | map(tokenize, \"t.json\")), "
         "(lines(\"code/*.txt\"))], [0.6, 0.4], 5)"},
        /* Nesting, the choice pipeline a mix itself. */
        {"choose_from_datasets([(sample_from_datasets([(range(2)), (range(3))], [1, 1], 3)), "
         "(range(5))], (sample_from_datasets([(list(0)), (list(1))], [1, 2], 4)))",
         "choose_from_datasets([(sample_from_datasets([(range(2)), (range(3))], [1.0, 1.0], 3)), "
         "(range(5))], (sample_from_datasets([(list(0)), (list(1))], [1.0, 2.0], 4)))"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pipe_spec *a = pipeline_parse(cases[i].text);
        char *text = format_spec(a);
        assert_string_equal(text, cases[i].canon);
        struct pipe_spec *b = pipeline_parse(text);
        assert_true(pipe_spec_equal(a, b));
        struct pipe_spec *c = NULL;
        assert_int_equal(pipe_spec_clone(a, &c), 0);
        assert_true(pipe_spec_equal(a, c));
        uint8_t *bytes;
        size_t len;
        char err[SLUICE_ERRMSG_SIZE];
        assert_int_equal(pipe_spec_encode(a, &bytes, &len), 0);
        struct pipe_spec *d = NULL;
        if (pipe_spec_decode(bytes, len, &d, err, sizeof err) != 0)
            fail_msg("%s: decode: %s", cases[i].text, err);
        assert_true(pipe_spec_equal(a, d));
        uint8_t *again;
        size_t len2;
        assert_int_equal(pipe_spec_encode(d, &again, &len2), 0);
        assert_int_equal(len, len2);
        assert_memory_equal(bytes, again, len);
        free(bytes);
        free(again);
        free(text);
        pipe_spec_free(a);
        pipe_spec_free(b);
        pipe_spec_free(c);
        pipe_spec_free(d);
    }
    /* Different weights, seeds, flags or inputs are different specs. */
    struct pipe_spec *a = pipeline_parse("sample_from_datasets([(range(3))], [1], 1)");
    struct pipe_spec *b = pipeline_parse("sample_from_datasets([(range(3))], [1], 2)");
    struct pipe_spec *c = pipeline_parse("sample_from_datasets([(range(3))], [2], 1)");
    struct pipe_spec *d = pipeline_parse("sample_from_datasets([(range(4))], [1], 1)");
    struct pipe_spec *e = pipeline_parse("sample_from_datasets([(range(3))], [1], 1, true)");
    assert_false(pipe_spec_equal(a, b));
    assert_false(pipe_spec_equal(a, c));
    assert_false(pipe_spec_equal(a, d));
    assert_false(pipe_spec_equal(a, e));
    pipe_spec_free(a);
    pipe_spec_free(b);
    pipe_spec_free(c);
    pipe_spec_free(d);
    pipe_spec_free(e);
}

static void expect_parse_error(const char *text, const char *want)
{
    struct pipe_spec *s = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    int rc = pipe_parse(text, &s, err, sizeof err);
    if (rc != SLUICE_ERR_PARSE)
        fail_msg("%s: parsed (rc %d)", text, rc);
    assert_null(s);
    if (strcmp(err, want) != 0)
        fail_msg("%s:\n got  %s\n want %s", text, err, want);
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_parse_error("sample_from_datasets([(range(3)), (range(4))], [1], 7)",
                       "column 48: expected 2 weights (one per input), found 1");
    expect_parse_error("sample_from_datasets([(range(3))], [-1], 7)",
                       "column 37: expected a weight >= 0, found '-1'");
    expect_parse_error("sample_from_datasets([(range(3)), (range(1))], [0, 0.0], 7)",
                       "column 22: expected at least one weight above 0");
    expect_parse_error("sample_from_datasets([(range(3))], [x], 7)",
                       "column 37: expected a weight (a finite number >= 0), found 'x'");
    expect_parse_error("sample_from_datasets([range(3)], [1], 7)",
                       "column 23: expected '(' and a pipeline, found 'range'");
    expect_parse_error("sample_from_datasets([(range(3)], [1], 7)",
                       "column 32: expected '|' or ')', found ']'");
    /* Inputs whose structures the text tells must agree. */
    expect_parse_error("sample_from_datasets([(range(3)), (list(\"a\"))], [1, 1], 7)",
                       "column 22: input 1 yields bytes but input 0 yields int64; the inputs of a "
                       "mix must yield elements of one structure");
    expect_parse_error("choose_from_datasets([(list((1, \"x\"))), (lines(\"/f\") | take(2))], "
                       "(list(0)))",
                       "column 22: input 1 yields bytes but input 0 yields (int64, bytes); the "
                       "inputs of a mix must yield elements of one structure");
    expect_parse_error("sample_from_datasets([], [1], 7)",
                       "column 23: expected '(' and a pipeline, found ']'");
    expect_parse_error("sample_from_datasets([(range(3))], [1])",
                       "column 39: expected ',' and a seed, found ')'");
    expect_parse_error("sample_from_datasets([(range(3))], [1], 7, maybe)",
                       "column 44: expected stop_on_empty, true or false, found 'maybe'");
    expect_parse_error("choose_from_datasets([(range(3))], range(2))",
                       "column 36: expected '(' and a pipeline, found 'range'");
    expect_parse_error("choose_from_datasets([(range(3))])",
                       "column 34: expected ',' and the choice pipeline, found ')'");
    /* Nesting: four mixes deep parse, five do not. */
    const char *four =
        "sample_from_datasets([(sample_from_datasets([(sample_from_datasets([("
        "sample_from_datasets([(range(1))], [1], 0))], [1], 0))], [1], 0))], [1], 0)";
    struct pipe_spec *s = pipeline_parse(four);
    pipe_spec_free(s);
    expect_parse_error("sample_from_datasets([(sample_from_datasets([(sample_from_datasets([("
                       "sample_from_datasets([(sample_from_datasets([(range(1))], [1], 0))], [1], "
                       "0))], [1], 0))], [1], 0))], [1], 0)",
                       "column 93: mixes nest at most 4 deep");
    /* 65 inputs are too many. */
    char text[4096] = "sample_from_datasets([";
    for (int i = 0; i < 65; i++)
        strcat(text, i ? ", (range(1))" : "(range(1))");
    strcat(text, "], [1], 0)");
    struct pipe_spec *out = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_parse(text, &out, err, sizeof err), SLUICE_ERR_PARSE);
    assert_non_null(strstr(err, "expected ']' (a mix has at most 64 inputs)"));
}

/* A spec made wrong by hand encodes, and the decoder refuses it with the message given. */
static void expect_decode_error(struct pipe_spec *s, const char *want)
{
    uint8_t *bytes;
    size_t len;
    assert_int_equal(pipe_spec_encode(s, &bytes, &len), 0);
    struct pipe_spec *d = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    int drc = pipe_spec_decode(bytes, len, &d, err, sizeof err);
    if (drc != SLUICE_ERR_CORRUPT)
        fail_msg("decoded (rc %d), want %s", drc, want);
    assert_null(d);
    if (strcmp(err, want) != 0)
        fail_msg("got  %s\nwant %s", err, want);
    free(bytes);
}

static void test_decode_errors(void **state)
{
    (void)state;
    struct pipe_spec *s =
        pipeline_parse("sample_from_datasets([(range(3)), (range(2))], [1, 2], 9)");
    s->source.nweights = 1;
    expect_decode_error(s, "dataset definition: source sample_from_datasets: expected 2 weights "
                           "(one per input), found 1");
    s->source.nweights = 2;
    s->source.weights[1] = -1;
    expect_decode_error(s, "dataset definition: source sample_from_datasets: expected weights "
                           "that are finite numbers >= 0");
    s->source.weights[1] = NAN;
    expect_decode_error(s, "dataset definition: source sample_from_datasets: expected weights "
                           "that are finite numbers >= 0");
    s->source.weights[0] = s->source.weights[1] = 0;
    expect_decode_error(s, "dataset definition: source sample_from_datasets: expected at least "
                           "one weight above 0");
    s->source.weights[0] = 1;
    s->source.weights[1] = 1;
    s->source.inputs[1]->source.step = 0;
    expect_decode_error(s, "dataset definition: input 1: source range: expected a nonzero step, "
                           "found 0");
    pipe_spec_free(s);

    s = pipeline_parse("choose_from_datasets([(range(3))], (range(1)))");
    pipe_spec_free(s->source.choice);
    s->source.choice = NULL;
    expect_decode_error(s, "dataset definition: source choose_from_datasets: expected a choice "
                           "pipeline");
    pipe_spec_free(s);

    /* Five mixes deep: the text cannot say it, a definition can. */
    struct pipe_spec *inner = pipeline_parse(
        "sample_from_datasets([(sample_from_datasets([(sample_from_datasets([(sample_from_datasets("
        "[(range(1))], [1], 0))], [1], 0))], [1], 0))], [1], 0)");
    s = pipeline_parse("sample_from_datasets([(range(1))], [1], 0)");
    pipe_spec_free(s->source.inputs[0]);
    s->source.inputs[0] = inner;
    expect_decode_error(s, "dataset definition: input 0: input 0: input 0: input 0: source "
                           "sample_from_datasets: mixes nest deeper than 4 levels");
    pipe_spec_free(s);
}

/* ---- The draw ------------------------------------------------------------------------------ */

/* Draws n positions and checks every window of 10,000 consecutive positions (sliding by one)
 * against the weights within +-1 percentage point, and the totals within 0.1 % of the expected
 * counts (or 2 elements, for tiny ones). */
static void check_shares(const double *w, const bool *exhausted, size_t k, int64_t seed, size_t n)
{
    enum { WINDOW = 10000 };
    double total = 0;
    for (size_t i = 0; i < k; i++)
        if (!(exhausted && exhausted[i]))
            total += w[i];
    uint64_t phase = pipe_mix_phase(seed);
    int *picks = malloc(n * sizeof(*picks));
    assert_non_null(picks);
    size_t counts[8] = {0}, win[8] = {0};
    double worst = 0;
    for (size_t x = 0; x < n; x++) {
        int p = pipe_mix_pick(w, exhausted, k, phase, x);
        assert_true(p >= 0 && (size_t)p < k);
        assert_false(exhausted && exhausted[p]);
        picks[x] = p;
        counts[p]++;
        win[p]++;
        if (x >= WINDOW)
            win[picks[x - WINDOW]]--;
        if (x + 1 >= WINDOW)
            for (size_t i = 0; i < k; i++) {
                double share = (exhausted && exhausted[i]) ? 0 : w[i] / total;
                double d = fabs((double)win[i] / WINDOW - share);
                if (d > worst)
                    worst = d;
            }
    }
    if (worst > 0.01)
        fail_msg("seed %lld: a window of 10000 is %.4f off its weight", (long long)seed, worst);
    for (size_t i = 0; i < k; i++) {
        double want = (exhausted && exhausted[i]) ? 0 : (double)n * w[i] / total;
        double slack = want * 0.001 > 2 ? want * 0.001 : 2;
        if (fabs((double)counts[i] - want) > slack)
            fail_msg("seed %lld: input %zu drawn %zu times, expected %.1f", (long long)seed, i,
                     counts[i], want);
    }
    free(picks);
}

static void test_draw_shares(void **state)
{
    (void)state;
    const double skewed[] = {0.9, 0.09, 0.01};
    const int64_t seeds[] = {0, 1, 42, -7, 123456789};
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
        check_shares(skewed, NULL, 3, seeds[s], 300000);
    const double even[] = {1, 1, 1, 1, 1};
    check_shares(even, NULL, 5, 3, 100000);
    const double mixed[] = {60, 25, 15};
    check_shares(mixed, NULL, 3, 99, 100000);
    /* Exhaustion renormalizes over the rest: 0.09 / 0.1 and 0.01 / 0.1. */
    const bool first_out[] = {true, false, false};
    check_shares(skewed, first_out, 3, 5, 100000);
    const bool middle_out[] = {false, true, false};
    check_shares(skewed, middle_out, 3, 5, 100000);
}

static void test_draw_pure(void **state)
{
    (void)state;
    const double w[] = {0.9, 0.09, 0.01};
    const bool out[] = {true, true, true};
    uint64_t phase = pipe_mix_phase(17);
    assert_int_equal(pipe_mix_phase(17), phase);
    assert_int_not_equal(pipe_mix_phase(18), phase);
    /* The same position always gives the same input, in any order of asking. */
    int first[1000];
    for (size_t x = 0; x < 1000; x++)
        first[x] = pipe_mix_pick(w, NULL, 3, phase, x);
    for (size_t x = 1000; x-- > 0;)
        assert_int_equal(pipe_mix_pick(w, NULL, 3, phase, x), first[x]);
    /* Another seed gives another sequence. */
    size_t differ = 0;
    for (size_t x = 0; x < 1000; x++)
        differ += pipe_mix_pick(w, NULL, 3, pipe_mix_phase(18), x) != first[x];
    assert_true(differ > 0);
    /* Nothing left, or only zero weights left: no input. */
    assert_int_equal(pipe_mix_pick(w, out, 3, phase, 5), -1);
    const double zero[] = {0, 0};
    assert_int_equal(pipe_mix_pick(zero, NULL, 2, phase, 5), -1);
    /* A zero weight is never drawn. */
    const double some[] = {0, 1, 0};
    for (size_t x = 0; x < 1000; x++)
        assert_int_equal(pipe_mix_pick(some, NULL, 3, phase, x), 1);
}

/* ---- The iterator -------------------------------------------------------------------------- */

static char *run_text(const char *text, int *rc)
{
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_run *run = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    if (pipe_open(spec, reg, &run, err, sizeof err) != 0)
        fail_msg("%s: open: %s", text, err);
    char *out = pipeline_text(run, rc);
    pipe_run_free(run);
    pipe_spec_free(spec);
    return out;
}

static void expect_run(const char *text, const char *want)
{
    int rc;
    char *got = run_text(text, &rc);
    if (strcmp(got, want) != 0)
        fail_msg("%s:\n got  %s\n want %s", text, got, want);
    free(got);
}

/* The reference: tf.data's semantics written out plainly over the inputs' sequences, with the
 * draw restated from its definition (u = frac(phase + x / phi) through the cumulative weights of
 * the inputs left). */
static char *reference_sample(const int64_t *const *seqs, const size_t *lens, const double *w,
                              size_t k, int64_t seed, bool stop_on_empty)
{
    size_t cur[8] = {0};
    bool out[8] = {false};
    char *text = calloc(1, 65536);
    assert_non_null(text);
    uint64_t phase = pipe_mix_phase(seed);
    for (uint64_t x = 0;;) {
        double total = 0;
        for (size_t i = 0; i < k; i++)
            total += out[i] ? 0 : w[i];
        if (total <= 0)
            break;
        uint64_t u = phase + x * 0x9e3779b97f4a7c15ull;
        double target = ldexp((double)(u >> 11), -53) * total, acc = 0;
        size_t pick = k;
        for (size_t i = 0; i < k && pick == k; i++)
            if (!out[i] && w[i] > 0 && target < (acc += w[i]))
                pick = i;
        assert_true(pick < k);
        if (cur[pick] == lens[pick]) {
            out[pick] = true;
            if (stop_on_empty)
                break;
            continue;
        }
        snprintf(text + strlen(text), 64, "%lld\n", (long long)seqs[pick][cur[pick]++]);
        x++;
    }
    return text;
}

static void test_sample_sequences(void **state)
{
    (void)state;
    int64_t a[30], b[5], c[60];
    for (int i = 0; i < 30; i++)
        a[i] = i;
    for (int i = 0; i < 5; i++)
        b[i] = 100 + i;
    for (int i = 0; i < 60; i++)
        c[i] = 200 + i;
    const int64_t *seqs[] = {a, b, c};
    const size_t lens[] = {30, 5, 60};
    const double w[] = {0.5, 0.2, 0.3};
    const int64_t seeds[] = {11, 0, -3};
    for (size_t s = 0; s < 3; s++)
        for (int stop = 0; stop < 2; stop++) {
            char text[256];
            snprintf(text, sizeof text,
                     "sample_from_datasets([(range(30)), (range(100, 105)), (range(200, 260))], "
                     "[0.5, 0.2, 0.3], %lld%s)",
                     (long long)seeds[s], stop ? ", stop_on_empty" : "");
            char *want = reference_sample(seqs, lens, w, 3, seeds[s], stop);
            expect_run(text, want);
            free(want);
        }
    /* Without stop_on_empty every element of every weighted input comes once. */
    int rc;
    char *all = run_text("sample_from_datasets([(range(30)), (range(100, 105)), (range(200, 260))]"
                         ", [0.5, 0.2, 0.3], 4) | filter(ge, 0)",
                         &rc);
    assert_int_equal(rc, 0);
    size_t lines = 0;
    for (char *p = all; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 95);
    free(all);
    /* A zero weight is never read; the mix ends when the weighted inputs are exhausted. */
    expect_run("sample_from_datasets([(range(3)), (range(100, 200))], [1, 0], 8)", "0\n1\n2\n");
    /* Operations after the mix apply to the mixed stream; a repeat reads the inputs again and
     * gives the same sequence. */
    expect_run("sample_from_datasets([(range(2)), (range(10, 12))], [1, 1], 3) | map(mul, 10) | "
               "batch(4)",
               "[0, 100, 10, 110]\n");
    int rc1, rc2;
    char *once = run_text("sample_from_datasets([(range(5)), (range(10, 15))], [1, 2], 3)", &rc1);
    char *twice = run_text(
        "sample_from_datasets([(range(5)), (range(10, 15))], [1, 2], 3) | repeat(2)", &rc2);
    size_t n = strlen(once);
    assert_int_equal(strlen(twice), 2 * n);
    assert_memory_equal(twice, once, n);
    assert_memory_equal(twice + n, once, n);
    free(once);
    free(twice);
}

static void test_choose_sequences(void **state)
{
    (void)state;
    /* tf.data's example: foo, bar, baz three times. */
    expect_run("choose_from_datasets([(list(\"foo\") | repeat()), (list(\"bar\") | repeat()), "
               "(list(\"baz\") | repeat())], (range(3) | repeat(3)))",
               "foo\nbar\nbaz\nfoo\nbar\nbaz\nfoo\nbar\nbaz\n");
    /* stop_on_empty (the default): the end at the first exhausted input chosen. */
    expect_run("choose_from_datasets([(range(3)), (range(10, 12))], (list(0, 1, 1, 0, 1, 0, 0)))",
               "0\n10\n11\n1\n");
    /* false: an exhausted input is skipped, and the choices go on. */
    expect_run("choose_from_datasets([(range(3)), (range(10, 12))], (list(0, 1, 1, 0, 1, 0, 0)), "
               "false)",
               "0\n10\n11\n1\n2\n");
    /* ... until every input is exhausted, or the choices end. */
    expect_run("choose_from_datasets([(range(1)), (range(10, 11))], (list(1, 0) | repeat()), "
               "false)",
               "10\n0\n");
    expect_run("choose_from_datasets([(range(100))], (range(0)))", "");
}

static void expect_run_error(const char *text, int want_rc, const char *want)
{
    int rc;
    char *got = run_text(text, &rc);
    assert_int_equal(rc, want_rc);
    if (strcmp(got, want) != 0)
        fail_msg("%s:\n got  %s\n want %s", text, got, want);
    free(got);
}

static void test_errors(void **state)
{
    (void)state;
    /* The text does not tell these structures (a map): found at the first element. */
    expect_run_error("sample_from_datasets([(range(5)), (list(\"a\") | map(identity))], [1, 1], 7)",
                     SLUICE_ERR_TYPE,
                     "0\n1\nERR sample_from_datasets: input 1 yields bytes but input 0 yields "
                     "int64; the inputs of a mix must yield elements of one structure");
    expect_run_error("choose_from_datasets([(range(5)), (list((1, \"a\")) | map(identity))], "
                     "(list(0, 1)))",
                     SLUICE_ERR_TYPE,
                     "0\nERR choose_from_datasets: input 1 yields (int64, bytes) but input 0 "
                     "yields int64; the inputs of a mix must yield elements of one structure");
    expect_run_error("choose_from_datasets([(range(5)), (range(3))], (list(0, 1, 2)))",
                     SLUICE_ERR_INVALID,
                     "0\n0\nERR choose_from_datasets: the choice at position 2 is 2, not an input "
                     "index in [0, 2)");
    expect_run_error("choose_from_datasets([(range(5))], (list(-1)))", SLUICE_ERR_INVALID,
                     "ERR choose_from_datasets: the choice at position 0 is -1, not an input "
                     "index in [0, 1)");
    expect_run_error("choose_from_datasets([(range(5))], (list(\"0\")))", SLUICE_ERR_TYPE,
                     "ERR choose_from_datasets: choice 0 is bytes, not an int64 scalar (an input "
                     "index)");
    /* An input's failure names the input. */
    expect_run_error("sample_from_datasets([(range(3)), (list(\"a\") | map(add, 1))], [1, 1], 2)",
                     SLUICE_ERR_TYPE,
                     "ERR sample_from_datasets input 1: map(add): component 0 has dtype bytes, "
                     "which is not numeric");
    /* An input that cannot open fails the open, naming it. */
    struct pipe_spec *spec =
        pipeline_parse("sample_from_datasets([(range(3)), (range(2) | map(nosuch))], [1, 1], 2)");
    struct pipe_run *run = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_true(pipe_open(spec, reg, &run, err, sizeof err) < 0);
    assert_null(run);
    assert_non_null(strstr(err, "column 1: sample_from_datasets input 1: "));
    pipe_spec_free(spec);
    /* A mix has no positions of its own to shuffle globally: refused by the parser, and by
     * the opener for a definition that did not come through it. */
    spec = NULL;
    assert_int_equal(pipe_parse("sample_from_datasets([(range(3))], [1], 2) | global_shuffle(1)",
                                &spec, err, sizeof err),
                     SLUICE_ERR_PARSE);
    assert_string_equal(err, "column 46: global_shuffle permutes a source's positions, and a mix "
                             "has none of its own; shuffle its inputs, or shuffle(N) after it");
    spec = pipeline_parse("sample_from_datasets([(range(3))], [1], 2)");
    spec->ops = calloc(1, sizeof *spec->ops);
    assert_non_null(spec->ops);
    spec->ops[0] = (struct pipe_op){.kind = PIPE_OP_GLOBAL_SHUFFLE, .seed = 1, .column = 47};
    spec->nops = 1;
    assert_int_equal(pipe_open(spec, reg, &run, err, sizeof err), SLUICE_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "column 47: global_shuffle permutes a source's positions"));
    pipe_spec_free(spec);
}

/* ---- Inputs that can wait, and the mix's state ----------------------------------------------- */

/* An input of int64 scalars that answers SLUICE_ERR_TIMEOUT before the elements whose index is
 * in stall (each once), as a reader's input read does when its elements have not arrived. */
struct fake_in {
    struct pipe_iter base;
    struct pipe_ctx ctx;
    const int64_t *v;
    size_t n, at;
    const size_t *stall;
    size_t nstall, stalled;
    size_t calls;
};

static int fake_next(struct pipe_iter *pi, struct sluice_element *out)
{
    struct fake_in *f = (struct fake_in *)pi;
    f->calls++;
    if (f->stalled < f->nstall && f->stall[f->stalled] == f->at) {
        f->stalled++;
        return SLUICE_ERR_TIMEOUT;
    }
    if (f->at == f->n)
        return 0;
    assert_int_equal(sluice_element_set_num_components(out, 1), 0);
    assert_int_equal(sluice_element_set_int64(out, 0, f->v[f->at++]), 0);
    return 1;
}

static void fake_destroy(struct pipe_iter *pi)
{
    (void)pi;
}

static void fake_release(void *owner)
{
    (void)owner;
}

static const struct pipe_iter_ops fake_ops = {fake_next, fake_destroy};

static void fake_init(struct fake_in *f, const int64_t *v, size_t n, const size_t *stall,
                      size_t nstall)
{
    memset(f, 0, sizeof *f);
    f->base.ops = &fake_ops;
    f->base.ctx = &f->ctx;
    f->v = v;
    f->n = n;
    f->stall = stall;
    f->nstall = nstall;
}

/* Runs mix to its end into out (values; at most cap), retrying every timeout; returns the count
 * and the timeouts seen in *timeouts. */
static size_t drain(struct pipe_iter *mix, int64_t *out, size_t cap, size_t *timeouts)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    size_t n = 0, t = 0;
    for (;;) {
        int rc = pipe_next(mix, &e);
        if (rc == SLUICE_ERR_TIMEOUT) {
            t++;
            continue;
        }
        assert_true(rc >= 0);
        if (rc == 0)
            break;
        assert_true(n < cap);
        memcpy(&out[n++], e.t[0].data, sizeof(int64_t));
    }
    pipe_elem_release(&e);
    if (timeouts)
        *timeouts = t;
    return n;
}

static const int64_t in_a[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
static const int64_t in_b[] = {100, 101, 102, 103, 104};
static const int64_t in_c[] = {200, 201, 202};

/* Opens a mix of in_a, in_b and in_c (CHOOSE: the choices in choice) over fresh fakes. */
static struct pipe_iter *open_fakes(enum pipe_source_kind kind, bool stop, struct fake_in *f,
                                    struct fake_in *choice, struct pipe_ctx *ctx)
{
    static const double w[] = {0.5, 0.3, 0.2};
    struct pipe_mix_input ins[3];
    for (size_t i = 0; i < 3; i++)
        ins[i] = (struct pipe_mix_input){&f[i].base, &f[i]};
    struct pipe_mix_request req = {.kind = kind,
                                   .weights = kind == PIPE_SRC_SAMPLE ? w : NULL,
                                   .n = 3,
                                   .seed = 9,
                                   .stop_on_empty = stop,
                                   .release = fake_release,
                                   .timeouts_retry = true};
    struct pipe_mix_input ch = {0};
    if (kind == PIPE_SRC_CHOOSE)
        ch = (struct pipe_mix_input){&choice->base, choice};
    memset(ctx, 0, sizeof *ctx);
    struct pipe_iter *mix = NULL;
    assert_int_equal(pipe_mix_open(&req, ins, ch, ctx, &mix), 0);
    return mix;
}

static const int64_t choices[] = {0, 2, 1, 1, 2, 0, 2, 2, 1, 0, 1, 1, 0};

/* Inputs that wait now and then leave the sequence as it is: the mix returns the timeout with
 * its position unchanged, asks the same input again, and a choice already read is not read
 * again. */
static void test_timeouts_retry(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        enum pipe_source_kind k = kind ? PIPE_SRC_CHOOSE : PIPE_SRC_SAMPLE;
        struct fake_in f[3], ch;
        struct pipe_ctx ctx;
        fake_init(&f[0], in_a, 12, NULL, 0);
        fake_init(&f[1], in_b, 5, NULL, 0);
        fake_init(&f[2], in_c, 3, NULL, 0);
        fake_init(&ch, choices, 13, NULL, 0);
        struct pipe_iter *mix = open_fakes(k, false, f, &ch, &ctx);
        int64_t want[32], got[32];
        size_t t;
        size_t nwant = drain(mix, want, 32, &t);
        assert_int_equal(t, 0);
        mix->ops->destroy(mix);
        size_t choice_calls = ch.calls;

        static const size_t sa[] = {0, 3, 12}, sb[] = {1, 5}, sc[] = {2}, sch[] = {4};
        fake_init(&f[0], in_a, 12, sa, 3);
        fake_init(&f[1], in_b, 5, sb, 2);
        fake_init(&f[2], in_c, 3, sc, 1);
        fake_init(&ch, choices, 13, sch, 1);
        mix = open_fakes(k, false, f, &ch, &ctx);
        size_t ngot = drain(mix, got, 32, &t);
        mix->ops->destroy(mix);
        assert_int_equal(ngot, nwant);
        assert_memory_equal(got, want, nwant * sizeof *want);
        /* Every stall that was reached was retried: sample reads every input to its end. */
        if (k == PIPE_SRC_SAMPLE)
            assert_int_equal(t, 6);
        else
            assert_int_equal(ch.calls, choice_calls + 1); /* its own stall only */
    }
}

/* A mix put at the state another mix had after k outputs (its inputs at their own positions)
 * continues with the other's sequence, at every k, also across inputs that ended and with
 * stop_on_empty (a mix that ended stays ended). */
static void test_state_resume(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++)
        for (int stop = 0; stop < 2; stop++) {
            enum pipe_source_kind k = kind ? PIPE_SRC_CHOOSE : PIPE_SRC_SAMPLE;
            struct fake_in f[3], ch;
            struct pipe_ctx ctx;
            fake_init(&f[0], in_a, 12, NULL, 0);
            fake_init(&f[1], in_b, 5, NULL, 0);
            fake_init(&f[2], in_c, 3, NULL, 0);
            fake_init(&ch, choices, 13, NULL, 0);
            struct pipe_iter *mix = open_fakes(k, stop, f, &ch, &ctx);
            int64_t want[32];
            size_t nwant = drain(mix, want, 32, NULL);
            mix->ops->destroy(mix);
            for (size_t at = 0; at <= nwant; at++) {
                struct sluice_element e;
                pipe_elem_init(&e);
                fake_init(&f[0], in_a, 12, NULL, 0);
                fake_init(&f[1], in_b, 5, NULL, 0);
                fake_init(&f[2], in_c, 3, NULL, 0);
                fake_init(&ch, choices, 13, NULL, 0);
                mix = open_fakes(k, stop, f, &ch, &ctx);
                for (size_t i = 0; i < at; i++)
                    assert_int_equal(pipe_next(mix, &e), 1);
                if (at == nwant)
                    assert_int_equal(pipe_next(mix, &e), 0);
                bool done[3];
                struct pipe_mix_state st = {.done = done};
                assert_int_equal(pipe_mix_get_state(mix, &st), 0);
                assert_int_equal(st.pos, at);
                mix->ops->destroy(mix);
                /* Fresh inputs at the positions the first mix left them. */
                size_t pos[4] = {f[0].at, f[1].at, f[2].at, ch.at};
                fake_init(&f[0], in_a, 12, NULL, 0);
                fake_init(&f[1], in_b, 5, NULL, 0);
                fake_init(&f[2], in_c, 3, NULL, 0);
                fake_init(&ch, choices, 13, NULL, 0);
                f[0].at = pos[0], f[1].at = pos[1], f[2].at = pos[2], ch.at = pos[3];
                mix = open_fakes(k, stop, f, &ch, &ctx);
                pipe_mix_set_state(mix, &st);
                int64_t rest[32];
                size_t nrest = drain(mix, rest, 32, NULL);
                mix->ops->destroy(mix);
                assert_int_equal(at + nrest, nwant);
                assert_memory_equal(rest, want + at, nrest * sizeof *rest);
                pipe_elem_release(&e);
            }
        }
}

/* A job of a whole mix is refused: readers read each input as a job of its own. */
static void test_distributed_epoch(void **state)
{
    (void)state;
    struct pipe_spec *spec =
        pipeline_parse("sample_from_datasets([(range(3))], [1], 2) | batch(2)");
    struct pipe_dist d;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_dist_analyze(spec, &d, err, sizeof err), SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "sample_from_datasets cannot be one distributed_epoch job: a reader "
                             "reads each of its inputs as a job of its own and mixes them (a "
                             "sluice client library that does is needed), or read it with "
                             "parallel_epochs");
    pipe_spec_free(spec);
    /* Endless: while a weighted input is (every one, with stop_on_empty); choose while its
     * choices are. */
    static const struct {
        const char *text;
        bool endless;
    } cases[] = {
        {"sample_from_datasets([(range(3)), (range(1) | repeat())], [1, 1], 2)", true},
        {"sample_from_datasets([(range(3)), (range(1) | repeat())], [1, 1], 2, true)", false},
        {"sample_from_datasets([(range(3)), (range(1) | repeat())], [1, 0], 2)", false},
        {"choose_from_datasets([(range(3) | repeat())], (range(1) | repeat()))", true},
        {"choose_from_datasets([(range(3) | repeat())], (range(1)))", false},
        {"choose_from_datasets([(range(3) | repeat())], (range(1) | repeat())) | take(3)", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec = pipeline_parse(cases[i].text);
        if (pipe_spec_endless(spec) != cases[i].endless)
            fail_msg("%s: endless %d", cases[i].text, !cases[i].endless);
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
        cmocka_unit_test(test_round_trips),       cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_decode_errors),     cmocka_unit_test(test_draw_shares),
        cmocka_unit_test(test_draw_pure),         cmocka_unit_test(test_sample_sequences),
        cmocka_unit_test(test_choose_sequences),  cmocka_unit_test(test_errors),
        cmocka_unit_test(test_distributed_epoch), cmocka_unit_test(test_timeouts_retry),
        cmocka_unit_test(test_state_resume),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
