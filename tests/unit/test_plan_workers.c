/* Planning workers (plan_workers.c): heartbeats that register, finish tasks, drain and replace
 * a restarted worker, the worker's secret, task failures and removals; each case the exact
 * updates or refusal (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

static const struct harness_case worker_cases[] = {
    /* worker_heartbeat */

    {"heartbeat registers and joins active iterations",
     "ds - r4\njob 1\njob 1\nhb x:1 1\nhb x:1 1 fin=1\njob 1", "hb b:1 7",
     "worker_registered id=2 address='b:1' inc=7\n"
     "task_created id=4 ref=2 ref2=2\n"
     "task_created id=5 ref=3 ref2=2\n"
     "=> worker=2"},
    {"heartbeat known worker with nothing new", PAR2, "hb a:1 1", "=> worker=1"},
    {"heartbeat: no task for an iteration nobody reads", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1",
     "hb b:1 7", "worker_registered id=2 address='b:1' inc=7\n=> worker=2"},
    {"heartbeat: a reader that comes back brings the tasks",
     "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\nhb b:1 7\njob 1 name=n", "hb b:1 7",
     "task_created id=2 ref=1 ref2=2\n=> worker=2"},
    /* task failures */
    {"task failure recorded", PAR2, "failed 1 1 msg=map(bytes):_too_big",
     "iteration_failed id=1 text='task 1: map(bytes): too big'\n=>"},
    {"task failure: once per iteration", PAR2, "failed 2 2,2 msg=x",
     "iteration_failed id=1 text='task 2: x'\n=>"},
    {"task failure repeated is ignored", PAR2 "failed 1 1 msg=x", "failed 1 1 msg=y", "=>"},
    {"task failure of another worker's task is ignored", PAR2, "failed 2 1 msg=x", "=>"},
    {"task failure of an unknown task is ignored", PAR2, "failed 1 99 msg=x", "=>"},
    {"task failure with an empty message", PAR2, "failed 1 1",
     "iteration_failed id=1 text='task 1: task failed'\n=>"},
    {"task failure: bad bytes in the message are escaped", PAR2, "failed 1 1 msg=a\x01\xff",
     "iteration_failed id=1 text='task 1: a\\x01\\xff'\n=>"},
    {"failed iteration: no task on a new worker", PAR2 "failed 1 1 msg=x", "hb c:1 1",
     "worker_registered id=3 address='c:1' inc=1\n=> worker=3"},
    {"heartbeat address with a control character", "", "hb host:1\x7f 1",
     "error INVALID: worker address: control character at byte 6"},
    {"heartbeat address not UTF-8", "", "hb host\xe2\x82:1 1",
     "error INVALID: worker address: not valid UTF-8 at byte 4"},
    {"heartbeat finishes one of two tasks", PAR2, "hb a:1 1 fin=1",
     "task_finished id=1\n=> worker=1"},
    {"heartbeat finishes the last task", PAR2 "hb a:1 1 fin=1", "hb b:1 1 fin=2",
     "task_finished id=2\niteration_finished id=1\n=> worker=2"},
    {"heartbeat repeated and foreign finishes are ignored", PAR2 "hb a:1 1 fin=1",
     "hb a:1 1 fin=1,2,99,1", "=> worker=1"},
    {"heartbeat distributed with splits left is not finished",
     DIST2 "splits 1 4 fin=", "hb b:1 1 fin=2", "task_finished id=2\n=> worker=2"},
    {"heartbeat distributed all splits done finishes",
     DIST2 "splits 1 4\nsplits 1 0 fin=0,1,2,3\nhb a:1 1 fin=1", "hb b:1 1 fin=2",
     "task_finished id=2\niteration_finished id=1\n=> worker=2"},
    {"heartbeat finished task returns its leases", DIST2 "splits 1 2", "hb a:1 1 fin=1",
     "splits_returned ref=1 ref2=1 seqs=[0,1]\ntask_finished id=1\n=> worker=1"},
    {"heartbeat new incarnation replaces the worker", DIST2 "splits 1 2\nsplits 1 1 fin=0",
     "hb a:1 2",
     "splits_returned ref=1 ref2=1 seqs=[1,2]\n"
     "task_removed id=1 ref=1\n"
     "worker_removed id=1\n"
     "worker_registered id=3 address='a:1' inc=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "=> worker=3"},
    {"heartbeat new incarnation draining can finish", PAR2 "hb b:1 1 fin=2", "hb a:1 2 drain",
     "task_removed id=1 ref=1\n"
     "worker_removed id=1\n"
     "worker_registered id=3 address='a:1' inc=2\n"
     "worker_draining id=3\n"
     "iteration_finished id=1\n"
     "=> worker=3"},
    {"heartbeat drain gets no new tasks", "ds - r4\nhb a:1 1", "hb a:1 1 drain",
     "worker_draining id=1\n=> worker=1"},
    {"heartbeat draining stays draining", "ds - r4\nhb a:1 1 drain\njob 1", "hb a:1 1",
     "=> worker=1"},
    {"heartbeat skips finished iterations", "ds - r4\nhb a:1 1\njob 1\nhb a:1 1 fin=1", "hb b:1 1",
     "worker_registered id=2 address='b:1' inc=1\n=> worker=2"},
    {"heartbeat empty address", "", "hb '' 1", "error INVALID: worker address is empty"},
    /* remove_worker */

    {"remove unknown worker", PAR2, "rm 9", "error NOT_FOUND: worker 9 not found"},
    {"remove returns leases", DIST2 "splits 1 3\nsplits 1 0 fin=1", "rm 1",
     "splits_returned ref=1 ref2=1 seqs=[0,2]\n"
     "task_removed id=1 ref=1\n"
     "worker_removed id=1\n"
     "=>"},
    {"remove leaves finished peers finishing", PAR2 "hb b:1 1 fin=2", "rm 1",
     "task_removed id=1 ref=1\nworker_removed id=1\niteration_finished id=1\n=>"},
    {"remove the only worker does not finish", "ds - r4\nhb a:1 1\njob 1", "rm 1",
     "task_removed id=1 ref=1\nworker_removed id=1\n=>"},
    {"remove with returned splits does not finish", DIST2 "splits 2 4\nsplits 1 0\nhb a:1 1 fin=1",
     "rm 2",
     "splits_returned ref=1 ref2=2 seqs=[0,1,2,3]\n"
     "task_removed id=2 ref=1\n"
     "worker_removed id=2\n"
     "=>"},
};

static void test_worker_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(worker_cases);
}

/* A worker's secret: registered with its first heartbeat, required on every later one (draining
 * too) of the same incarnation; a new incarnation may take over the address only when the shell
 * says the holder stopped heartbeating; a worker journaled without a secret is not checked. */
static const struct harness_case key_cases[] = {
    {"registers with its secret", "", "hb a:1 7 key=s",
     "worker_registered id=1 address='a:1' inc=7 key=ssssssssssssssss\n=> worker=1"},
    {"the same secret again", "hb a:1 7 key=s", "hb a:1 7 key=s", "=> worker=1"},
    {"a wrong secret, same incarnation", "hb a:1 7 key=s", "hb a:1 7 key=x",
     "error DENIED: worker at a:1: the worker key does not match its registration"},
    {"a forged drain", "hb a:1 7 key=s", "hb a:1 7 key=x drain",
     "error DENIED: worker at a:1: the worker key does not match its registration"},
    {"no secret, same incarnation", "hb a:1 7 key=s", "hb a:1 7 key=",
     "error DENIED: worker at a:1: the worker key does not match its registration"},
    {"a short secret, same incarnation", "hb a:1 7 key=s", "hb a:1 7 key=sss",
     "error DENIED: worker at a:1: the worker key does not match its registration"},
    {"registering without a secret", "", "hb a:1 7 key=",
     "error DENIED: worker at a:1: a worker key of 16 bytes is required to register"},
    {"registering with a short secret", "", "hb a:1 7 key=abc",
     "error DENIED: worker at a:1: a worker key of 16 bytes is required to register"},
    {"a new incarnation while the holder heartbeats", "hb a:1 7 key=s", "hb a:1 8 key=t stays",
     "error DENIED: address a:1 is held by worker 1, which is still heartbeating"},
    {"a new incarnation once the holder went silent", "hb a:1 7 key=s", "hb a:1 8 key=t",
     "worker_removed id=1\nworker_registered id=2 address='a:1' inc=8 key=tttttttttttttttt\n"
     "=> worker=2"},
    {"a journal without secrets: not checked", "hb a:1 7", "hb a:1 7 key=x drain",
     "worker_draining id=1\n=> worker=1"},
};

static void test_worker_keys(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(key_cases);
    /* Secrets survive the journal's encoding, replay and snapshots, and are part of the digest. */
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nhb a:1 7 key=s\nhb b:1 9 key=u\njob 1");
    assert_true(h.s.workers[0].key.set);
    assert_memory_equal(h.s.workers[0].key.b, "ssssssssssssssss", ST_KEY_LEN);
    assert_string_equal(harness_run(&h, "hb a:1 7 key=t"),
                        "error DENIED: worker at a:1: the worker key does not match its "
                        "registration");
    harness_replay_through_records(&h);
    uint64_t before = state_digest(&h.s);
    h.s.workers[1].key.b[3] ^= 1;
    assert_int_not_equal(state_digest(&h.s), before);
    h.s.workers[1].key.b[3] ^= 1;
    harness_release(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_cases),
        cmocka_unit_test(test_worker_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
