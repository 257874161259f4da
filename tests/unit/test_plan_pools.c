/* Worker pools (plan_workers.c, plan_jobs.c, plan.c): workers register with labels, a job's
 * worker selector places its tasks only on matching workers, max_workers bounds how many get one,
 * a job that matches no worker waits with its reason and starts when a matching worker
 * registers; weights and bounds are validated; labels, selectors, weights and bounds survive the
 * journal's encoding, replay and snapshots. Each case the exact updates or refusal
 * (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

#include "dispatcher/plan_internal.h"
#include "dispatcher/update_codec.h"

#include <stdlib.h>
#include <string.h>

/* Workers 1 (a:1, pool=a), 2 (b:1, pool=b, zone=x) and 3 (c:1, no labels). */
#define POOLS "ds - r4\nhb a:1 1 labels=pool=a\nhb b:1 1 labels=zone=x;pool=b\nhb c:1 1\n"

static const struct harness_case pool_cases[] = {
    {"a worker registers with its labels, canonical", "", "hb a:1 1 labels=zone=x;pool=b",
     "worker_registered id=1 address='a:1' inc=1 labels='pool=b,zone=x'\n=> worker=1"},
    {"a worker's bad label is refused", "", "hb a:1 1 labels=pool=a;zone",
     "error INVALID: worker at a:1: labels: label 2: expected KEY=VALUE"},
    {"a worker's duplicate key is refused", "", "hb a:1 1 labels=pool=a;pool=b",
     "error INVALID: worker at a:1: labels: label key pool given twice"},
    {"a worker's bad key character is refused", "", "hb a:1 1 labels=po(ol=a",
     "error INVALID: worker at a:1: labels: label 1: key: '(' is not allowed at byte 2"},
    {"too many labels are refused", "",
     "hb a:1 1 labels=a=1;b=1;c=1;d=1;e=1;f=1;g=1;h=1;i=1;j=1;k=1;l=1;m=1;n=1;o=1;p=1;q=1",
     "error INVALID: worker at a:1: labels: more than 16 labels"},
    {"a known worker's labels stay as registered", "hb a:1 1 labels=pool=a",
     "hb a:1 1 labels=pool=b", "=> worker=1"},
    {"a selector places tasks on matching workers only", POOLS, "job 1 sel=pool=b",
     "job_created id=1 name2='1' mode=parallel_epochs selector='pool=b'\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"a set selector, canonical", POOLS, "job 1 sel=pool_in_(_a,b_)",
     "job_created id=1 name2='1' mode=parallel_epochs selector='pool in (a,b)'\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"notin and !key take the unlabelled worker", POOLS, "job 1 sel=pool_notin_(a),!zone",
     "job_created id=1 name2='1' mode=parallel_epochs selector='pool notin (a),!zone'\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"a job without a selector runs everywhere", POOLS, "job 1",
     "job_created id=1 name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"a selector matching nothing: no task", POOLS, "job 1 sel=pool=bigmem",
     "job_created id=1 name2='1' mode=parallel_epochs selector='pool=bigmem'\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"the waiting reason", POOLS "job 1 sel=pool=bigmem", "waiting 1",
     "=> waiting='waiting for a worker matching pool=bigmem (none of 3 workers match)'"},
    {"the waiting reason with one worker", "ds - r4\nhb a:1 1\njob 1 sel=gpu", "waiting 1",
     "=> waiting='waiting for a worker matching gpu (none of 1 worker matches)'"},
    {"no waiting reason once a worker matches", POOLS "job 1 sel=pool=b", "waiting 1",
     "=> waiting=''"},
    {"no waiting reason without a selector", POOLS "job 1", "waiting 1", "=> waiting=''"},
    {"a matching worker that registers gets the task", POOLS "job 1 sel=pool=bigmem",
     "hb d:1 1 labels=pool=bigmem",
     "worker_registered id=4 address='d:1' inc=1 labels='pool=bigmem'\n"
     "task_created id=1 ref=1 ref2=4\n"
     "=> worker=4"},
    {"a worker that does not match gets no task", POOLS "job 1 sel=pool=bigmem",
     "hb d:1 1 labels=pool=small",
     "worker_registered id=4 address='d:1' inc=1 labels='pool=small'\n"
     "=> worker=4"},
    {"a draining matching worker does not end the wait", POOLS "hb b:1 1 drain\njob 1 sel=pool=b",
     "waiting 1", "=> waiting='waiting for a worker matching pool=b (none of 3 workers match)'"},
    {"a malformed selector is refused", POOLS, "job 1 sel=pool=a_b",
     "error INVALID: worker selector: expected ',' at byte 7"},
    {"a selector with a bad key is refused", POOLS, "job 1 sel=po\x01ol",
     "error INVALID: worker selector: key at byte 0: control character at byte 2"},
    {"a named job joined with another selector is refused", POOLS "job 1 name=n sel=pool=a",
     "job 1 name=n sel=pool=b",
     "error EXISTS: job 'n' exists with worker selector 'pool=a', not 'pool=b'"},
    {"a named job joined with the same selector, spelled otherwise",
     POOLS "job 1 name=n sel=pool=a", "job 1 name=n sel=_pool_==_a_",
     "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    /* max_workers */
    {"max_workers bounds the workers with a task", POOLS, "job 1 max=2",
     "job_created id=1 name2='1' mode=parallel_epochs max=2\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"a new worker gets no task beyond max_workers", POOLS "job 1 max=2", "hb d:1 1",
     "worker_registered id=4 address='d:1' inc=1\n=> worker=4"},
    {"a lost worker's place goes to another", POOLS "job 1 max=2\nrm 1", "hb c:1 1",
     "task_created id=3 ref=1 ref2=3\n=> worker=3"},
    {"a finished task keeps its place", POOLS "job 1 max=2\nhb a:1 1 fin=1", "hb c:1 1",
     "=> worker=3"},
    {"max_workers with a selector", POOLS "hb d:1 1 labels=pool=b", "job 1 sel=pool=b max=1",
     "job_created id=1 name2='1' mode=parallel_epochs selector='pool=b' max=1\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    /* weights and bounds */
    {"weight, min and max are recorded", POOLS, "job 1 weight=2.5 min=1 max=3",
     "job_created id=1 name2='1' mode=parallel_epochs weight=2.5 min=1 max=3\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"a negative weight is refused", POOLS, "job 1 weight=-1",
     "error INVALID: weight must be a number above 0 and at most 1000000, not -1"},
    {"an infinite weight is refused", POOLS, "job 1 weight=inf",
     "error INVALID: weight must be a number above 0 and at most 1000000, not inf"},
    {"a NaN weight is refused", POOLS, "job 1 weight=nan",
     "error INVALID: weight must be a number above 0 and at most 1000000, not nan"},
    {"min above max is refused", POOLS, "job 1 min=3 max=2",
     "error INVALID: min_workers 3 is above max_workers 2"},
    /* Workers are shared, not handed out: a heavier job that arrives takes no task from a job
     * with min_workers, and gets its own on every worker. */
    {"a heavier job leaves a min_workers job its workers", POOLS "job 1 name=light min=2",
     "job 1 name=heavy weight=5",
     "job_created id=2 name='heavy' name2='1' mode=parallel_epochs weight=5\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "task_created id=4 ref=2 ref2=1\n"
     "task_created id=5 ref=2 ref2=2\n"
     "task_created id=6 ref=2 ref2=3\n"
     "client_acquired id=2 ref=2\n"
     "=> job=2 iteration=2 client=2"},
    {"a named job joined with another weight is refused", POOLS "job 1 name=n weight=2",
     "job 1 name=n",
     "error EXISTS: job 'n' exists with weight 2, min_workers 0, max_workers 0, not 1, 0, 0"},
};

/* Workers 1, 2 and 3, one task slot each. */
#define SLOTS3 "ds - r4\nhb a:1 1 slots=1\nhb b:1 1 slots=1\nhb c:1 1 slots=1\n"
/* Worker 1 with one slot, taken by job 1 (task 1). */
#define SLOTS1 "ds - r4\nhb a:1 1 slots=1\njob 1 name=first\n"

/* Task slots: a worker holds at most its slots' worth of unfinished tasks; free slots go to the
 * jobs short of min_workers first, then the heaviest, then the oldest; a task is never taken
 * away, and a job that gets none waits with the reason. */
static const struct harness_case slot_cases[] = {
    {"a worker registers with its task slots", "", "hb a:1 1 slots=2",
     "worker_registered id=1 address='a:1' inc=1 slots=2\n=> worker=1"},
    {"too many task slots are refused", "", "hb a:1 1 slots=100001",
     "error INVALID: worker at a:1: 100001 task slots, more than 100000"},
    {"a known worker keeps the slots it registered with", "hb a:1 1 slots=1", "hb a:1 1 slots=5",
     "=> worker=1"},
    {"a min_workers job takes free slots", SLOTS3, "job 1 name=light min=2 max=2",
     "job_created id=1 name='light' name2='1' mode=parallel_epochs min=2 max=2\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"a heavier job gets the free slot only", SLOTS3 "job 1 name=light min=2 max=2",
     "job 1 name=heavy weight=5",
     "job_created id=2 name='heavy' name2='1' mode=parallel_epochs weight=5\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "task_created id=3 ref=2 ref2=3\n"
     "client_acquired id=2 ref=2\n"
     "=> job=2 iteration=2 client=2"},
    {"a heavier job takes no slot from a min_workers job", SLOTS3 "job 1 name=light min=2",
     "job 1 name=heavy weight=5",
     "job_created id=2 name='heavy' name2='1' mode=parallel_epochs weight=5\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "client_acquired id=2 ref=2\n"
     "=> job=2 iteration=2 client=2"},
    {"the waiting reason: slots taken by a job that started earlier",
     SLOTS3 "job 1 name=light min=2\njob 1 name=heavy weight=5", "waiting 2",
     "=> waiting='waiting for a worker: 3 of 3 task slots taken by jobs that started earlier'"},
    {"the waiting reason: slots taken by heavier jobs",
     SLOTS3 "job 1 name=heavy weight=5\njob 1 name=light", "waiting 2",
     "=> waiting='waiting for a worker: 3 of 3 task slots taken by heavier jobs'"},
    {"the waiting reason: both kinds of holders",
     SLOTS3 "job 1 name=heavy weight=5 max=1\njob 1 name=light max=2\njob 1 name=third",
     "waiting 3",
     "=> waiting='waiting for a worker: 3 of 3 task slots taken by heavier jobs (1) and jobs "
     "that started earlier'"},
    {"the waiting reason names the pool",
     "ds - r4\nhb a:1 1 slots=1 labels=pool=bigmem\nhb b:1 1 slots=1 labels=pool=bigmem\n"
     "hb c:1 1\njob 1 name=h sel=pool=bigmem weight=3\njob 1 name=l sel=pool=bigmem",
     "waiting 2",
     "=> waiting='waiting for a worker matching pool=bigmem: 2 of 2 task slots taken by heavier "
     "jobs'"},
    {"one slot", SLOTS1 "job 1 name=heavy weight=2", "waiting 2",
     "=> waiting='waiting for a worker: 1 of 1 task slot taken by jobs that started earlier'"},
    {"no waiting reason while a matching worker has no slot limit",
     SLOTS3 "hb d:1 1\njob 1 name=light min=2\njob 1 name=heavy weight=5", "waiting 2",
     "=> waiting=''"},
    {"a finished task's slot goes to the heaviest waiting job",
     SLOTS1 "job 1 name=light\njob 1 name=heavy weight=2", "hb a:1 1 fin=1",
     "task_finished id=1\n"
     "task_created id=2 ref=3 ref2=1\n"
     "iteration_finished id=1\n"
     "=> worker=1"},
    {"a job short of min_workers goes before a heavier one",
     SLOTS1 "job 1 name=heavy weight=5\njob 1 name=needy min=1", "hb a:1 1 fin=1",
     "task_finished id=1\n"
     "task_created id=2 ref=3 ref2=1\n"
     "iteration_finished id=1\n"
     "=> worker=1"},
    {"equal weights: the older job first", SLOTS1 "job 1 name=second\njob 1 name=third",
     "hb a:1 1 fin=1",
     "task_finished id=1\n"
     "task_created id=2 ref=2 ref2=1\n"
     "iteration_finished id=1\n"
     "=> worker=1"},
    {"a new worker's slots go to the waiting jobs heaviest first",
     SLOTS1 "job 1 name=light\njob 1 name=heavy weight=2", "hb b:1 1 slots=1",
     "worker_registered id=2 address='b:1' inc=1 slots=1\n"
     "task_created id=2 ref=3 ref2=2\n"
     "=> worker=2"},
    {"a new worker with two slots serves both waiting jobs",
     "ds - r4\nhb a:1 1 slots=1\njob 1 name=first max=1\njob 1 name=light\n"
     "job 1 name=heavy weight=2",
     "hb b:1 1 slots=2",
     "worker_registered id=2 address='b:1' inc=1 slots=2\n"
     "task_created id=2 ref=3 ref2=2\n"
     "task_created id=3 ref=2 ref2=2\n"
     "=> worker=2"},
    {"a new job does not take a free slot a heavier waiting job wants",
     SLOTS1 "job 1 name=heavy weight=2\nfailed 1 1 msg=x", "job 1 name=light",
     "job_created id=3 name='light' name2='1' mode=parallel_epochs\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "client_acquired id=3 ref=3\n"
     "=> job=3 iteration=3 client=3"},
    {"a new job short of min_workers takes a free slot a heavier waiting job wants",
     SLOTS1 "job 1 name=heavy weight=2\nfailed 1 1 msg=x", "job 1 name=needy min=1",
     "job_created id=3 name='needy' name2='1' mode=parallel_epochs min=1\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "task_created id=2 ref=3 ref2=1\n"
     "client_acquired id=3 ref=3\n"
     "=> job=3 iteration=3 client=3"},
    {"a new heavier job takes a free slot a lighter waiting job wants",
     SLOTS1 "job 1 name=light\nfailed 1 1 msg=x", "job 1 name=heavy weight=2",
     "job_created id=3 name='heavy' name2='1' mode=parallel_epochs weight=2\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "task_created id=2 ref=3 ref2=1\n"
     "client_acquired id=3 ref=3\n"
     "=> job=3 iteration=3 client=3"},
    {"a full worker's heartbeat places nothing",
     SLOTS1 "job 1 name=heavy weight=9\njob 1 name=needy min=1", "hb a:1 1", "=> worker=1"},
    {"a job short of its minimum says so",
     SLOTS3 "job 1 name=heavy weight=5 max=2\njob 1 name=needy min=2", "waiting 2",
     "=> waiting='waiting for a worker (1 of 2 minimum workers): 2 of 2 task slots taken by "
     "heavier jobs'"},
    {"a minimum beyond the pool", "ds - r4\nhb a:1 1 labels=pool=a\njob 1 sel=pool=a min=2",
     "waiting 1",
     "=> waiting='waiting for a worker matching pool=a (1 of 2 minimum workers): no other worker "
     "matches'"},
    {"a job at its minimum does not wait", SLOTS3 "job 1 min=2", "waiting 1", "=> waiting=''"},
    {"a failed iteration's slot is free", SLOTS1 "job 1 name=heavy weight=2\nfailed 1 1 msg=x",
     "hb a:1 1",
     "task_created id=2 ref=2 ref2=1\n"
     "=> worker=1"},
};

static void test_slot_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(slot_cases);
}

static void test_pool_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(pool_cases);
}

/* Labels, selectors, weights and bounds survive the journal's encoding, replay and snapshots,
 * are part of the digest, and a replayed state places as the live one did. */
static void test_pools_replay(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, POOLS "job 1 name=n sel=pool_in_(b,c) weight=3 min=1 max=4\n"
                                 "job 1 name=m sel=pool=bigmem");
    const struct st_job *j = state_job(&h.s, 1);
    assert_non_null(j);
    assert_string_equal(j->selector, "pool in (b,c)");
    assert_true(j->weight == 3);
    assert_int_equal(j->min_workers, 1);
    assert_int_equal(j->max_workers, 4);
    assert_string_equal(state_worker(&h.s, 2)->labels, "pool=b,zone=x");
    assert_true(state_job(&h.s, 2)->weight == 1);
    harness_replay_through_records(&h);
    uint64_t before = state_digest(&h.s);
    struct st_worker *w = (struct st_worker *)state_worker(&h.s, 2);
    w->labels[5] = 'c';
    assert_int_not_equal(state_digest(&h.s), before);
    w->labels[5] = 'b';
    struct st_job *jm = (struct st_job *)state_job(&h.s, 2);
    jm->selector[0] = 'q';
    assert_int_not_equal(state_digest(&h.s), before);
    jm->selector[0] = 'p';
    assert_int_equal(state_digest(&h.s), before);
    /* After the replay the waiting job still waits, and starts on a matching worker. */
    assert_string_equal(harness_run(&h, "waiting 2"),
                        "=> waiting='waiting for a worker matching pool=bigmem (none of 3 workers "
                        "match)'");
    assert_string_equal(harness_run(&h, "hb e:1 1 labels=pool=bigmem"),
                        "worker_registered id=4 address='e:1' inc=1 labels='pool=bigmem'\n"
                        "task_created id=2 ref=2 ref2=4\n"
                        "=> worker=4");
    harness_replay_through_records(&h);
    harness_release(&h);
}

/* Task slots survive the journal's encoding, replay and snapshots and are part of the digest;
 * after the replay a waiting job still waits with its reason. */
static void test_slots_replay(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, SLOTS1 "job 1 name=heavy weight=2\nhb b:1 1");
    assert_int_equal(state_worker(&h.s, 1)->task_slots, 1);
    assert_int_equal(state_worker(&h.s, 2)->task_slots, 0);
    harness_replay_through_records(&h);
    uint64_t before = state_digest(&h.s);
    struct st_worker *w = (struct st_worker *)state_worker(&h.s, 1);
    w->task_slots = 2;
    assert_int_not_equal(state_digest(&h.s), before);
    w->task_slots = 1;
    assert_int_equal(state_digest(&h.s), before);
    /* Worker 2 has no limit: both jobs run there; worker 1 keeps its one task. */
    assert_int_equal(plan_worker_slots_used(&h.s, 1, &h.ups, 0), 1);
    assert_int_equal(plan_worker_slots_used(&h.s, 2, &h.ups, 0), 2);
    harness_run(&h, "rm 2");
    assert_string_equal(harness_run(&h, "waiting 2"),
                        "=> waiting='waiting for a worker: 1 of 1 task slot taken by jobs that "
                        "started earlier'");
    harness_replay_through_records(&h);
    harness_release(&h);
}

/* What apply refuses: a journal holding labels or a selector that planning never writes. */
static void test_pools_apply_checks(void **unused)
{
    (void)unused;
    struct state s;
    state_init(&s);
    struct st_update u = {.type = ST_WORKER_REGISTERED, .id = 1, .incarnation = 1};
    strcpy(u.address, "a:1");
    u.labels = "zone=a,pool=b"; /* not sorted */
    assert_int_equal(state_apply(&s, &u), SLUICE_ERR_CORRUPT);
    u.labels = "pool=b,zone=a";
    u.task_slots = 100001; /* more than sluice-worker allows */
    assert_int_equal(state_apply(&s, &u), SLUICE_ERR_CORRUPT);
    u.task_slots = 0;
    assert_int_equal(state_apply(&s, &u), 0);
    /* A worker as older journals hold it (no task_slots, encoded and decoded as the journal
     * stores it): no slot limit. */
    struct st_update oldw = {.type = ST_WORKER_REGISTERED, .id = 2, .incarnation = 1};
    strcpy(oldw.address, "b:1");
    uint8_t *wbytes = NULL;
    size_t wlen = 0;
    assert_int_equal(update_codec_encode(&oldw, &wbytes, &wlen), 0);
    struct st_update wback;
    char werr[SLUICE_ERRMSG_SIZE];
    assert_int_equal(update_codec_decode(wbytes, wlen, &wback, werr, sizeof werr), 0);
    free(wbytes);
    assert_int_equal(wback.task_slots, 0);
    assert_int_equal(state_apply(&s, &wback), 0);
    st_update_release(&wback);
    assert_int_equal(state_worker(&s, 2)->task_slots, 0);
    /* A job and a worker as older journals hold them (no selector, weight, bounds or labels,
     * encoded and decoded as the journal stores them): every worker, weight 1, no bounds. */
    struct st_update ds = {.type = ST_DATASET_REGISTERED, .id = 1};
    strcpy(ds.name, "1");
    ds.def = (uint8_t *)"r4";
    ds.def_len = 2;
    ds.text = "r4";
    assert_int_equal(state_apply(&s, &ds), 0);
    struct st_update old = {.type = ST_JOB_CREATED, .id = 1};
    strcpy(old.name2, "1");
    uint8_t *bytes = NULL;
    size_t len = 0;
    assert_int_equal(update_codec_encode(&old, &bytes, &len), 0);
    struct st_update back;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(update_codec_decode(bytes, len, &back, err, sizeof err), 0);
    free(bytes);
    assert_null(back.selector);
    assert_true(back.job_weight == 0);
    assert_int_equal(state_apply(&s, &back), 0);
    st_update_release(&back);
    const struct st_job *j = state_job(&s, 1);
    assert_string_equal(j->selector, "");
    assert_true(j->weight == 1);
    assert_int_equal(j->min_workers + j->max_workers, 0);
    /* Bounds that planning never writes are refused. */
    struct st_update bad = {.type = ST_JOB_CREATED, .id = 2, .min_workers = 3, .max_workers = 2};
    strcpy(bad.name2, "1");
    assert_int_equal(state_apply(&s, &bad), SLUICE_ERR_CORRUPT);
    bad.min_workers = 0;
    bad.job_weight = -1;
    assert_int_equal(state_apply(&s, &bad), SLUICE_ERR_CORRUPT);
    bad.job_weight = 1;
    bad.selector = "pool in (b,a),x";
    assert_int_equal(state_apply(&s, &bad), 0);
    assert_false(state_selector_valid("pool = b"));
    assert_false(state_selector_valid("pool==b"));
    assert_true(state_selector_valid("pool="));
    state_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_cases),         cmocka_unit_test(test_slot_cases),
        cmocka_unit_test(test_pools_replay),       cmocka_unit_test(test_slots_replay),
        cmocka_unit_test(test_pools_apply_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
