/* The attribution of a job's wait (dispatcher/why.h): the paragraph for an input-bound job with a
 * slow worker and a dominant stage, a job whose trainers do not wait, the threshold's edge, one
 * worker, no reports yet, and the stages of the job when the slowest worker reported none. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "dispatcher/why.h"

#include <string.h>

static const struct status_stage slow_stages[] = {
    {"source(tfrecord)", 1.0}, {"map(decode_jpeg)#1", 7.8}, {"batch#2", 0.2}, {"send", 1.0}};
static const struct status_stage fast_stages[] = {{"source(tfrecord)", 6.0},
                                                  {"map(decode_jpeg)#1", 2.0}};

static void expect_text(const struct why_input *in, const char *want, struct why_result *r)
{
    why_attribute(in, r);
    assert_string_equal(r->text, want);
}

static void test_input_bound_slow_worker(void **state)
{
    (void)state;
    struct status_consumer cs[] = {
        {.client_id = 12,
         .job_id = 3,
         .has_share = true,
         .wait_share = 0.50,
         .elements_per_second = 96},
        {.client_id = 14,
         .job_id = 3,
         .has_share = true,
         .wait_share = 0.32,
         .elements_per_second = 180},
    };
    struct why_worker ws[] = {
        {"10.0.0.5:7001", 500, fast_stages, 2},
        {"10.0.0.7:7001", 110, slow_stages, 4},
        {"10.0.0.6:7001", 520, fast_stages, 2},
    };
    struct why_input in = {3, "", cs, 2, ws, 3};
    struct why_result r;
    expect_text(&in,
                "job 3 is input-bound: trainers wait 41 % of the time; the slowest consumer is "
                "client 12 (96.0 elements/s); worker 10.0.0.7:7001 runs at 0.22 of the median of "
                "3 workers; its time goes to map(decode_jpeg)#1 (78 %).",
                &r);
    assert_true(r.input_bound);
    assert_true(r.has_worker);
    assert_string_equal(r.slowest_worker, "10.0.0.7:7001");
    assert_string_equal(r.stage, "map(decode_jpeg)#1");
    assert_int_equal(r.slowest_consumer, 12);
}

static void test_not_input_bound(void **state)
{
    (void)state;
    struct status_consumer cs[] = {{.client_id = 5,
                                    .job_id = 9,
                                    .has_share = true,
                                    .wait_share = 0.02,
                                    .elements_per_second = 40}};
    struct why_worker ws[] = {{"a:1", 300, fast_stages, 2}, {"b:1", 300, fast_stages, 2}};
    struct why_input in = {9, "train", cs, 1, ws, 2};
    struct why_result r;
    expect_text(&in,
                "job 9 (train) is not input-bound: trainers wait 2 % of the time; worker a:1 "
                "runs at 1.00 of the median of 2 workers; its time goes to source(tfrecord) "
                "(75 %).",
                &r);
    assert_false(r.input_bound);
    assert_true(r.has_wait);
}

/* The threshold is inclusive: a wait of exactly WHY_INPUT_BOUND_SHARE is input-bound, just below
 * is not. */
static void test_threshold(void **state)
{
    (void)state;
    struct status_consumer c = {
        .client_id = 1, .job_id = 1, .has_share = true, .wait_share = WHY_INPUT_BOUND_SHARE};
    struct why_input in = {1, NULL, &c, 1, NULL, 0};
    struct why_result r;
    expect_text(&in, "job 1 is input-bound: trainers wait 10 % of the time.", &r);
    c.wait_share = 0.099;
    expect_text(&in, "job 1 is not input-bound: trainers wait 10 % of the time.", &r);
    assert_false(r.input_bound);
}

static void test_one_worker(void **state)
{
    (void)state;
    struct status_consumer c = {.client_id = 2,
                                .job_id = 4,
                                .has_share = true,
                                .wait_share = 0.97,
                                .elements_per_second = 800};
    struct status_stage st[] = {{"source(range)", 0.1}, {"map(sleep_us)#1", 9.7}, {"send", 0.2}};
    struct why_worker w = {"127.0.0.1:4000", 850.25, st, 3};
    struct why_input in = {4, "", &c, 1, &w, 1};
    struct why_result r;
    expect_text(&in,
                "job 4 is input-bound: trainers wait 97 % of the time; its one worker, "
                "127.0.0.1:4000, serves 850.2 elements/s; its time goes to map(sleep_us)#1 "
                "(97 %).",
                &r);
    assert_false(r.has_worker);
}

/* Consumers that have not reported two samples yet have no share: nothing is said of the wait. */
static void test_no_reports(void **state)
{
    (void)state;
    struct status_consumer c = {.client_id = 2, .job_id = 4};
    struct why_input in = {4, "", &c, 1, NULL, 0};
    struct why_result r;
    expect_text(&in, "job 4: no trainer has reported its wait yet.", &r);
    assert_false(r.has_wait);
    assert_false(r.input_bound);
    struct why_input none = {5, "", NULL, 0, NULL, 0};
    expect_text(&none, "job 5: no trainer has reported its wait yet.", &r);
}

/* Workers that all served nothing over the window: no straggler is named. */
static void test_idle_workers(void **state)
{
    (void)state;
    struct why_worker ws[] = {{"x:1", 0, NULL, 0}, {"y:1", 0, NULL, 0}, {"z:1", 5, NULL, 0}};
    struct why_input in = {7, "", NULL, 0, ws, 3};
    struct why_result r;
    expect_text(&in, "job 7: no trainer has reported its wait yet.", &r);
    assert_false(r.has_worker);
}

/* The slowest worker reported no stages: the workers' stages, summed by name, decide. */
static void test_stages_of_job(void **state)
{
    (void)state;
    struct status_consumer c = {.client_id = 2,
                                .job_id = 6,
                                .has_share = true,
                                .wait_share = 0.5,
                                .elements_per_second = 10};
    struct status_stage a[] = {{"source(lines)", 1.0}, {"send", 3.0}};
    struct status_stage b[] = {{"source(lines)", 1.0}, {"send", 1.0}};
    struct why_worker ws[] = {{"x:1", 0, NULL, 0}, {"y:1", 200, a, 2}, {"z:1", 100, b, 2}};
    struct why_input in = {6, "", &c, 1, ws, 3};
    struct why_result r;
    expect_text(&in,
                "job 6 is input-bound: trainers wait 50 % of the time; worker x:1 runs at 0.00 "
                "of the median of 3 workers; the workers' time goes to send (67 %).",
                &r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_bound_slow_worker),
        cmocka_unit_test(test_not_input_bound),
        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_one_worker),
        cmocka_unit_test(test_no_reports),
        cmocka_unit_test(test_stages_of_job),
        cmocka_unit_test(test_idle_workers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
