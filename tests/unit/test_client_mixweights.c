/* The local check of a change of a mix's weights (client/mixweights.h): every refusal with its
 * exact message, the first problem reported, and the requests it lets through. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "client/mixweights.h"
#include "sluice/sluice.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct check_case {
    const char *job_name, *dataset_id;
    double weights[4];
    size_t n;
    int rc;
    const char *err; /* "" when rc is 0 */
};

static void test_check(void **state)
{
    (void)state;
    char long_name[NAME_ID_MAX + 2];
    memset(long_name, 'j', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    const struct check_case cases[] = {
        {"train", NULL, {0.5, 0.5}, 2, 0, ""},
        {"train", "", {1}, 1, 0, ""},
        {"train", "mix", {0, 0, 3}, 3, 0, ""},
        {"train", NULL, {-0.0, 1}, 2, 0, ""},
        {NULL, NULL, {1}, 1, SLUICE_ERR_INVALID, "a job name is required"},
        {"", NULL, {1}, 1, SLUICE_ERR_INVALID, "a job name is required"},
        {"tr\x01in", NULL, {1}, 1, SLUICE_ERR_INVALID, "job name: control character at byte 2"},
        {long_name,
         NULL,
         {1},
         1,
         SLUICE_ERR_INVALID,
         "job name: 128 bytes, longer than the limit of 127"},
        {"train", "m\xffx", {1}, 1, SLUICE_ERR_INVALID, "dataset id: not valid UTF-8 at byte 1"},
        {"train",
         NULL,
         {1},
         0,
         SLUICE_ERR_INVALID,
         "weights: expected 1 to 64 (one per input of the mix), found 0"},
        {"train",
         NULL,
         {0.5, 0.25, -1},
         3,
         SLUICE_ERR_INVALID,
         "weight 2 is -1, expected a number >= 0"},
        {"train",
         NULL,
         {1, 0.1, -0.3},
         3,
         SLUICE_ERR_INVALID,
         "weight 2 is -0.3, expected a number >= 0"},
        {"train",
         NULL,
         {NAN, -1},
         2,
         SLUICE_ERR_INVALID,
         "weight 0 is nan, expected a finite number >= 0"},
        {"train",
         NULL,
         {1, INFINITY},
         2,
         SLUICE_ERR_INVALID,
         "weight 1 is inf, expected a finite number >= 0"},
        {"train",
         NULL,
         {0, 0, 0},
         3,
         SLUICE_ERR_INVALID,
         "weights: every weight is 0, expected at least one above 0"},
        {"train",
         NULL,
         {-0.0},
         1,
         SLUICE_ERR_INVALID,
         "weights: every weight is 0, expected at least one above 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct check_case *c = &cases[i];
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc = mixweights_check(c->job_name, c->dataset_id, c->weights, c->n, err, sizeof err);
        if (rc != c->rc || strcmp(err, c->err) != 0)
            fprintf(stderr, "case %zu: rc %d, err '%s'\n", i, rc, err);
        assert_int_equal(rc, c->rc);
        assert_string_equal(err, c->err);
    }
}

/* More weights than a mix can have inputs, and no weights at all. */
static void test_count(void **state)
{
    (void)state;
    double w[65];
    for (size_t i = 0; i < 65; i++)
        w[i] = 1;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(mixweights_check("train", NULL, w, 64, err, sizeof err), 0);
    assert_int_equal(mixweights_check("train", NULL, w, 65, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "weights: expected 1 to 64 (one per input of the mix), found 65");
    assert_int_equal(mixweights_check("train", NULL, NULL, 2, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "weights: expected 1 to 64 (one per input of the mix), found 0");
}

/* The public call makes the same check before it needs a dispatcher, and clears *from. */
static void test_public_call(void **state)
{
    (void)state;
    char err[SLUICE_ERRMSG_SIZE] = "";
    uint64_t from = 7;
    const double w[] = {1, -2};
    assert_int_equal(sluice_set_weights(NULL, "train", NULL, w, 2, 0, &from, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "a client is required");
    assert_int_equal(from, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_count),
        cmocka_unit_test(test_public_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
