/* Where a pipeline's time goes (pipeline/prof.h): the stage names, a profiled run yielding what
 * an unprofiled one yields (a prefetch and a repeat included), and the sampled time of a stage
 * that sleeps bounded from below by what its sampled calls slept. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pipeline.h"
#include "pipeline/open.h"
#include "pipeline/prof.h"
#include "pipeline/registry.h"
#include "pipeline/spec.h"

#include <stdlib.h>
#include <string.h>

static struct sluice_registry *reg;

static void test_stage_names(void **state)
{
    (void)state;
    struct pipe_spec *spec =
        pipeline_parse("range(10) | map(sleep_us, 5) | batch(2) | filter(even) | shuffle(4)");
    static const char *const want[] = {"source(range)",  "map(sleep_us)#1", "batch#2",
                                       "filter(even)#3", "shuffle#4",       ""};
    for (unsigned i = 0; i < 6; i++) {
        char name[PIPE_PROF_NAME_MAX];
        pipe_prof_stage_name(spec, i, name, sizeof name);
        assert_string_equal(name, want[i]);
    }
    pipe_spec_free(spec);
}

static char *run_text(const char *text, struct pipe_prof *prof)
{
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_limits limits = {.prof = prof};
    struct pipe_run *run;
    char err[256];
    if (pipe_open_limited(spec, reg, &limits, &run, err, sizeof err) != 0)
        fail_msg("%s: %s", text, err);
    char *out = pipeline_text(run, NULL);
    pipe_run_free(run);
    pipe_spec_free(spec);
    return out;
}

static void test_same_elements(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "range(300) | map(add, 1) | filter(even) | batch(3)",
        "range(200) | map(mul, 2) | prefetch(4) | map(add, 1) | take(150)",
        "range(5) | map(add, 1) | repeat(3) | batch(2, drop_remainder)",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        struct pipe_prof prof = {0};
        char *plain = run_text(texts[i], NULL), *timed = run_text(texts[i], &prof);
        assert_string_equal(timed, plain);
        free(plain);
        free(timed);
    }
}

/* 130 outer calls: calls 1, 65 and 129 are timed, standing for 1, 64 and 64 calls, and each
 * sleeps 1 ms at least in map(sleep_us): the stage holds at least 129 ms. */
static void test_sleeping_stage(void **state)
{
    (void)state;
    struct pipe_prof prof = {0};
    char *out = run_text("range(129) | map(sleep_us, 1000) | map(add, 1)", &prof);
    assert_non_null(strstr(out, "\n129\n"));
    free(out);
    uint64_t sleeping = atomic_load(&prof.ns[1]);
    if (sleeping < 129u * 1000000u)
        fail_msg("map(sleep_us) took %llu ns, less than its sampled sleeps",
                 (unsigned long long)sleeping);
    assert_true(sleeping > atomic_load(&prof.ns[0]));
    assert_true(sleeping > atomic_load(&prof.ns[2]));
    for (unsigned i = 3; i < PIPE_PROF_STAGES; i++)
        assert_int_equal(atomic_load(&prof.ns[i]), 0);
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
        cmocka_unit_test(test_stage_names),
        cmocka_unit_test(test_same_elements),
        cmocka_unit_test(test_sleeping_stage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
