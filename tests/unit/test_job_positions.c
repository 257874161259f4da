/* Positions consumers of named jobs keep with the dispatcher (struct st_jobpos): the planner of a
 * report (plan_jobpos_report) and what it refuses, applying JOB_POSITION, the cut that makes a
 * job position (plan_jobpos_cut), the bounds, and replay and snapshots of what is kept. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "dispatcher/plan.h"
#include "dispatcher/state.h"
#include "lib/state_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Two consumers (clients 1 and 2) of the named job j, one (client 3) of a job of its own. */
#define SETUP                                                                                      \
    "ds - r4\nhb a:1 1\njob 1 name=j mode=distributed_epoch total=4\n"                             \
    "job 1 name=j mode=distributed_epoch total=4\njob 1 mode=distributed_epoch total=4\n"

/* A position: "SLUICECK" then tag, len bytes in all. */
static uint8_t *pos_of(int tag, size_t len)
{
    uint8_t *p = malloc(len);
    assert_non_null(p);
    memset(p, tag, len);
    memcpy(p, "SLUICECK", 8);
    return p;
}

static int report(struct harness *h, uint64_t client, const char *job, uint64_t step, int tag,
                  size_t len, char *err)
{
    uint8_t *p = pos_of(tag, len);
    int rc = plan_jobpos_report(&h->s, client, job, step, p, len, &h->ups, err, SLUICE_ERRMSG_SIZE);
    free(p);
    if (rc == 0)
        harness_commit(h);
    else
        assert_int_equal(h->ups.n, 0);
    return rc;
}

static void must_report(struct harness *h, uint64_t client, const char *job, uint64_t step, int tag)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    if (report(h, client, job, step, tag, 16, err) != 0)
        fail_msg("report of client %llu step %llu: %s", (unsigned long long)client,
                 (unsigned long long)step, err);
}

/* The cut at step as "STEP: client/step/tag ..." or "error: MSG". */
static const char *cut(struct harness *h, const char *job, uint64_t step)
{
    static char out[SLUICE_ERRMSG_SIZE + 64];
    static struct plan_jobpos_pick picks[ST_JOBPOS_CONSUMERS_MAX];
    size_t n = 0;
    uint64_t at = 0, gen = 0;
    char err[SLUICE_ERRMSG_SIZE] = "";
    if (plan_jobpos_cut(&h->s, job, step, picks, &n, &at, &gen, err, sizeof err) < 0) {
        snprintf(out, sizeof out, "error: %s", err);
        return out;
    }
    size_t k = (size_t)snprintf(out, sizeof out, "%llu:", (unsigned long long)at);
    for (size_t i = 0; i < n && k < sizeof out - 32; i++)
        k += (size_t)snprintf(out + k, sizeof out - k, " %llu/%llu/%d",
                              (unsigned long long)picks[i].client_id,
                              (unsigned long long)picks[i].step, picks[i].bytes[8]);
    return out;
}

static void test_report_and_cut(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, SETUP);
    for (uint64_t step = 1; step <= 6; step++)
        must_report(&h, 1, "j", step, (int)step);
    for (uint64_t step = 1; step <= 4; step++)
        must_report(&h, 2, "j", step, 10 + (int)step);
    /* The latest step both reached; one asked for; each one's latest. */
    assert_string_equal(cut(&h, "j", 0), "4: 1/4/4 2/4/14");
    assert_string_equal(cut(&h, "j", 3), "3: 1/3/3 2/3/13");
    assert_string_equal(cut(&h, "j", ST_JOBPOS_STEP_MAX), "4611686018427387904: 1/6/6 2/4/14");
    assert_string_equal(cut(&h, "j", 5), "5: 1/5/5 2/4/14");
    /* Client 1 keeps steps 3 to 6 only. */
    assert_string_equal(cut(&h, "j", 2), "error: job 'j': a consumer (client 1) kept no position "
                                         "at or before step 2 (it keeps its last 4: steps 3 to 6)");
    /* A step again replaces it; an explicit later step joins. */
    must_report(&h, 2, "j", 4, 40);
    must_report(&h, 2, "j", 9, 19);
    assert_string_equal(cut(&h, "j", 0), "6: 1/6/6 2/4/40");
    assert_int_equal(state_jobpos(&h.s, "j")->consumers[1].nreports, 4);
    harness_check_snapshot(&h.s);
    harness_replay_through_records(&h);
    /* Client 1 leaves: the cut is client 2's latest. */
    harness_run(&h, "rel 1");
    assert_string_equal(cut(&h, "j", 0), "9: 1/6/6 2/9/19");
    harness_run(&h, "rel 2");
    assert_string_equal(cut(&h, "j", 0), "9: 1/6/6 2/9/19");
    assert_string_equal(cut(&h, "nope", 0), "error: no position is kept for job 'nope' (its "
                                            "readers keep theirs as they checkpoint)");
    harness_release(&h);
}

static void test_refusals(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, SETUP "job 1 name=m.input0 mode=distributed_epoch total=4\n"
                                 "job 1 name=m.evil mode=distributed_epoch total=4\n");
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(report(&h, 9, "j", 1, 1, 16, err), SLUICE_ERR_NOT_FOUND);
    assert_int_equal(report(&h, 1, "k", 1, 1, 16, err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "this reader reads job 'j', not 'k'");
    assert_int_equal(report(&h, 1, "", 1, 1, 16, err), SLUICE_ERR_INVALID);
    assert_int_equal(report(&h, 3, "j", 1, 1, 16, err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "positions are kept for named jobs; this reader's job has no name");
    assert_int_equal(report(&h, 1, "j", 0, 1, 16, err), SLUICE_ERR_INVALID);
    assert_int_equal(report(&h, 1, "j", ST_JOBPOS_STEP_MAX + 1, 1, 16, err), SLUICE_ERR_INVALID);
    assert_int_equal(report(&h, 1, "j", 1, 1, ST_JOBPOS_BYTES_MAX + 1, err), SLUICE_ERR_LIMIT);
    uint8_t junk[16] = "not a position!";
    assert_int_equal(
        plan_jobpos_report(&h.s, 1, "j", 1, junk, sizeof junk, &h.ups, err, sizeof err),
        SLUICE_ERR_INVALID);
    assert_int_equal(h.ups.n, 0);
    /* A mix's input keeps under the mix's name, not under a name it merely starts with. */
    must_report(&h, 4, "m", 1, 1);
    assert_int_equal(report(&h, 4, "m.in", 1, 1, 16, err), SLUICE_ERR_INVALID);
    /* A job named like an input of another is not one. */
    assert_int_equal(report(&h, 5, "m", 1, 1, 16, err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "this reader reads job 'm.evil', not 'm'");
    /* Steps older than the four kept. */
    for (uint64_t step = 5; step <= 8; step++)
        must_report(&h, 1, "j", step, 1);
    assert_int_equal(report(&h, 1, "j", 4, 1, 16, err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "step 4 is older than every step this reader kept (5 to 8)");
    harness_release(&h);
}

/* A later iteration of the job starts its row again; reports of the older one are refused. */
static void test_generations(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, SETUP);
    must_report(&h, 1, "j", 1, 1);
    must_report(&h, 2, "j", 1, 2);
    /* Client 1 leaves, the iteration is collected, and a new reader gets a new iteration. */
    harness_run_script(&h, "rel 1\nrel 2\ngc 1\njob 1 name=j mode=distributed_epoch total=4\n");
    uint64_t client = h.s.next_client_id - 1;
    must_report(&h, client, "j", 1, 7);
    const struct st_jobpos *r = state_jobpos(&h.s, "j");
    assert_int_equal(r->nconsumers, 1);
    assert_int_equal(r->generation, h.s.clients[h.s.nclients - 1].iteration_id);
    assert_int_equal(h.s.jobpos_bytes, 16);
    harness_check_snapshot(&h.s);
    harness_replay_through_records(&h);
    harness_release(&h);
}

/* Beyond ST_JOBPOS_MAX jobs the least recently reported goes; the bytes kept in all are
 * bounded. */
static void test_bounds(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nhb a:1 1\n");
    char line[128], name[32];
    for (int i = 0; i <= ST_JOBPOS_MAX; i++) {
        snprintf(line, sizeof line, "job 1 name=j%d mode=distributed_epoch total=4", i);
        harness_run(&h, line);
        snprintf(name, sizeof name, "j%d", i);
        must_report(&h, h.s.next_client_id - 1, name, 1, 1);
        if (i == 0)
            must_report(&h, h.s.next_client_id - 1, name, 2, 1); /* j0 is the most recent */
        if (i == 1)
            must_report(&h, 1, "j0", 3, 1);
    }
    assert_int_equal(h.s.njobpos, ST_JOBPOS_MAX);
    assert_non_null(state_jobpos(&h.s, "j0"));
    assert_null(state_jobpos(&h.s, "j1"));
    assert_non_null(state_jobpos(&h.s, "j2"));
    harness_check_snapshot(&h.s);
    /* Bytes: 32 MiB in all, reports of 256 KiB. */
    char err[SLUICE_ERRMSG_SIZE];
    int rc = 0;
    for (uint64_t step = 1; rc == 0 && step < 1000; step++) {
        snprintf(name, sizeof name, "j%d", (int)(2 + step / 4));
        uint64_t client = 0;
        for (size_t c = 0; c < h.s.nclients; c++)
            if (h.s.clients[c].id == (uint64_t)(3 + step / 4))
                client = h.s.clients[c].id;
        rc = report(&h, client, name, 10 + step, 1, ST_JOBPOS_BYTES_MAX, err);
    }
    assert_int_equal(rc, SLUICE_ERR_LIMIT);
    assert_true(h.s.jobpos_bytes <= ST_JOBPOS_TOTAL_MAX);
    assert_non_null(strstr(err, "the dispatcher keeps"));
    harness_release(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_and_cut),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_generations),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
