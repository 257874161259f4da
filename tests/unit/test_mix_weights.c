/* Weights schedules of named mix jobs in the dispatcher's state (struct st_mix): applying
 * MIX_WEIGHTS updates and what it refuses, and the planners that make them (plan_mix_horizon,
 * plan_mix_find, plan_mix_set_weights). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "dispatcher/plan.h"
#include "dispatcher/state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_dataset(struct state *s, const char *id)
{
    struct st_update u;
    memset(&u, 0, sizeof u);
    u.type = ST_DATASET_REGISTERED;
    snprintf(u.name, sizeof u.name, "%s", id);
    u.text = "sample_from_datasets(...)";
    assert_int_equal(state_apply(s, &u), 0);
}

static struct st_update mixw(const char *ds, const char *job, uint64_t horizon, uint64_t from,
                             const double *w, size_t n)
{
    struct st_update u;
    memset(&u, 0, sizeof u);
    u.type = ST_MIX_WEIGHTS;
    snprintf(u.name, sizeof u.name, "%s", job);
    snprintf(u.name2, sizeof u.name2, "%s", ds);
    u.start = horizon;
    u.ref = from;
    u.weights = (double *)w;
    u.nweights = n;
    return u;
}

static const double w2[2] = {0.3, 0.7}, w2b[2] = {1, 0}, w3[3] = {1, 1, 1};

static void test_apply(void **unused)
{
    (void)unused;
    struct state s;
    state_init(&s);
    add_dataset(&s, "mix");
    struct st_update u = mixw("mix", "job", 100, 0, NULL, 0);
    assert_int_equal(state_apply(&s, &u), 0);
    const struct st_mix *m = state_mix(&s, "mix", "job");
    assert_non_null(m);
    assert_int_equal(m->horizon, 100);
    /* A change at the horizon; then one further on, the horizon following it. */
    u = mixw("mix", "job", 100, 100, w2, 2);
    assert_int_equal(state_apply(&s, &u), 0);
    u = mixw("mix", "job", 150, 400, w2b, 2);
    assert_int_equal(state_apply(&s, &u), 0);
    m = state_mix(&s, "mix", "job");
    assert_int_equal(m->nchanges, 2);
    assert_int_equal(m->horizon, 400);
    assert_int_equal(m->changes[1].from, 400);
    assert_true(m->changes[1].weights[0] == 1);
    /* Refused, the state unchanged: */
    struct {
        const char *what;
        struct st_update u;
    } bad[] = {
        {"horizon going back", mixw("mix", "job", 399, 0, NULL, 0)},
        {"a change below the horizon", mixw("mix", "job", 400, 399, w2, 2)},
        {"a change not after the last", mixw("mix", "job", 400, 400, w2, 2)},
        {"another input count", mixw("mix", "job", 400, 500, w3, 3)},
        {"all weights 0", mixw("mix", "job", 400, 500, (const double[]){0, 0}, 2)},
        {"a negative weight", mixw("mix", "job", 400, 500, (const double[]){-1, 2}, 2)},
        {"a weight not a number", mixw("mix", "job", 400, 500, (const double[]){NAN, 2}, 2)},
        {"an unknown dataset", mixw("nope", "job", 400, 0, NULL, 0)},
        {"an anonymous job", mixw("mix", "", 400, 0, NULL, 0)},
    };
    uint64_t applied = s.applied;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (state_apply(&s, &bad[i].u) != SLUICE_ERR_CORRUPT)
            fail_msg("applied %s", bad[i].what);
    assert_int_equal(s.applied, applied);
    assert_int_equal(state_mix(&s, "mix", "job")->nchanges, 2);
    state_release(&s);
}

static void apply_all(struct state *s, struct st_update_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        assert_int_equal(state_apply(s, &l->v[i]), 0);
    st_update_list_clear(l);
}

static void test_plan(void **unused)
{
    (void)unused;
    struct state s;
    state_init(&s);
    add_dataset(&s, "a");
    add_dataset(&s, "b");
    struct st_update_list l = {0};
    char err[SLUICE_ERRMSG_SIZE] = "";
    const char *ds = NULL;
    assert_int_equal(plan_mix_find(&s, "job", &ds, err, sizeof err), SLUICE_ERR_NOT_FOUND);
    /* A reader asks for 1000: the row is made; asking for less changes nothing. */
    assert_int_equal(plan_mix_horizon(&s, "a", "job", 1000, &l, err, sizeof err), 0);
    assert_int_equal(l.n, 1);
    apply_all(&s, &l);
    assert_int_equal(plan_mix_horizon(&s, "a", "job", 900, &l, err, sizeof err), 0);
    assert_int_equal(l.n, 0);
    assert_int_equal(plan_mix_find(&s, "job", &ds, err, sizeof err), 0);
    assert_string_equal(ds, "a");
    /* Set at 0: the horizon. Again: one past the last change. */
    uint64_t from = 0;
    assert_int_equal(plan_mix_set_weights(&s, "a", "job", 2, w2, 2, 0, &l, &from, err, sizeof err),
                     0);
    assert_int_equal(from, 1000);
    apply_all(&s, &l);
    assert_int_equal(plan_mix_set_weights(&s, "a", "job", 2, w2b, 2, 0, &l, &from, err, sizeof err),
                     0);
    assert_int_equal(from, 1001);
    apply_all(&s, &l);
    /* An explicit position later on; below the earliest is refused with it named. */
    assert_int_equal(
        plan_mix_set_weights(&s, "a", "job", 2, w2, 2, 5000, &l, &from, err, sizeof err), 0);
    assert_int_equal(from, 5000);
    apply_all(&s, &l);
    assert_int_equal(
        plan_mix_set_weights(&s, "a", "job", 2, w2, 2, 4000, &l, &from, err, sizeof err),
        SLUICE_ERR_INVALID);
    assert_string_equal(err, "job 'job': position 4000 may already be read (its readers know the "
                             "weights up to 5001); the earliest is 5001");
    assert_int_equal(l.n, 0);
    /* The count and the values of the weights. */
    assert_int_equal(plan_mix_set_weights(&s, "a", "job", 3, w2, 2, 0, &l, &from, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "job 'job': the mix has 3 inputs, 2 weights given");
    assert_int_equal(plan_mix_set_weights(&s, "a", "job", 2, (const double[]){0, 0}, 2, 0, &l,
                                          &from, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "job 'job': weights must be finite numbers >= 0, not all 0");
    /* The same name on another mix: the name alone is ambiguous. */
    assert_int_equal(plan_mix_horizon(&s, "b", "job", 10, &l, err, sizeof err), 0);
    apply_all(&s, &l);
    assert_int_equal(plan_mix_find(&s, "job", &ds, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "job 'job' names 2 mixes (datasets 'a' and others): give the dataset "
                             "id");
    /* Positions out of range, from a reader or a caller. */
    assert_int_equal(plan_mix_horizon(&s, "b", "job", UINT64_MAX, &l, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_int_equal(l.n, 0);
    assert_int_equal(
        plan_mix_set_weights(&s, "a", "job", 2, w2, 2, UINT64_MAX - 1, &l, &from, err, sizeof err),
        SLUICE_ERR_INVALID);
    assert_int_equal(l.n, 0);
    /* A change before any reader: at position 0 of a new row. */
    assert_int_equal(plan_mix_set_weights(&s, "b", "new", 2, w2, 2, 0, &l, &from, err, sizeof err),
                     0);
    assert_int_equal(from, 0);
    apply_all(&s, &l);
    st_update_list_release(&l);
    state_release(&s);
}

/* The bounds: rows and changes per row. */
static void test_limits(void **unused)
{
    (void)unused;
    struct state s;
    state_init(&s);
    add_dataset(&s, "a");
    struct st_update_list l = {0};
    char err[SLUICE_ERRMSG_SIZE] = "";
    uint64_t from;
    for (int i = 0; i < ST_MIX_CHANGES_MAX; i++) {
        assert_int_equal(
            plan_mix_set_weights(&s, "a", "job", 2, w2, 2, 0, &l, &from, err, sizeof err), 0);
        apply_all(&s, &l);
    }
    assert_int_equal(plan_mix_set_weights(&s, "a", "job", 2, w2, 2, 0, &l, &from, err, sizeof err),
                     SLUICE_ERR_LIMIT);
    for (int i = 1; i < ST_MIX_MAX; i++) {
        char name[32];
        snprintf(name, sizeof name, "job%d", i);
        assert_int_equal(plan_mix_horizon(&s, "a", name, 1, &l, err, sizeof err), 0);
        apply_all(&s, &l);
    }
    assert_int_equal(plan_mix_horizon(&s, "a", "one more", 1, &l, err, sizeof err),
                     SLUICE_ERR_LIMIT);
    assert_int_equal(plan_mix_horizon(&s, "a", "job5", 100, &l, err, sizeof err), 0);
    st_update_list_release(&l);
    state_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
