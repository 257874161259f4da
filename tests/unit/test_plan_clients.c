/* Planning clients (plan_clients.c): heartbeats, the rounds granted to coordinated reads and
 * their schedule as workers come and go, and releases; each case the exact updates or refusal
 * (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

static const struct harness_case client_cases[] = {
    /* coordinated rounds */

    {"rounds start at round 0 on the tasks of a new iteration", "ds - r4\nhb a:1 1\nhb b:1 1",
     "job 1 name=c consumers=2",
     "job_created id=1 name='c' name2='1' mode=parallel_epochs consumers=2\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "rounds_scheduled ref=1 seqs=[1,2]\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"rounds the first heartbeat is granted a window",
     "ds - r4\nhb a:1 1\njob 1 name=c consumers=1", "chb 1 window=64",
     "rounds_granted ref=1 ref2=64\n=> granted=64"},
    {"rounds no grant while half the window is left", COORD2, "chb 2 round=32 window=64",
     "=> granted=64"},
    {"rounds granted again once fewer than half are left", COORD2, "chb 2 round=33 window=64",
     "rounds_granted ref=1 ref2=97\n=> granted=97"},
    {"rounds a consumer that reports the grant reached gets more", COORD2,
     "chb 1 round=64 window=100", "rounds_granted ref=1 ref2=164\n=> granted=164"},
    {"rounds window 0 grants nothing", COORD2, "chb 1 round=60", "=> granted=64"},
    {"rounds none granted to a read that is not coordinated", PAR2, "chb 1 round=5 window=64",
     "=>"},
    {"rounds a new worker's task takes part from the first round not granted", COORD2, "hb c:1 1",
     "worker_registered id=3 address='c:1' inc=1\n"
     "task_created id=3 ref=1 ref2=3\n"
     "rounds_scheduled ref=1 ref2=64 seqs=[1,2,3]\n"
     "=> worker=3"},
    {"rounds a draining worker's task stops after the rounds granted", COORD2, "hb a:1 1 drain",
     "worker_draining id=1\nrounds_scheduled ref=1 ref2=64 seqs=[2]\n=> worker=1"},
    {"rounds a removed worker's task stops", COORD2, "rm 2",
     "task_removed id=2 ref=1\nworker_removed id=2\nrounds_scheduled ref=1 ref2=64 seqs=[1]\n=>"},
    {"rounds a restarted worker's new task replaces the old one at one round", COORD2, "hb b:1 2",
     "task_removed id=2 ref=1\n"
     "worker_removed id=2\n"
     "worker_registered id=3 address='b:1' inc=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "rounds_scheduled ref=1 ref2=64 seqs=[1,3]\n"
     "=> worker=3"},
    {"rounds a finished task stops", COORD2, "hb a:1 1 fin=1",
     "task_finished id=1\nrounds_scheduled ref=1 ref2=64 seqs=[2]\n=> worker=1"},
    {"rounds the last task gone leaves rounds served by none",
     "ds - r4\nhb a:1 1\njob 1 name=c consumers=1\nchb 1 window=64", "rm 1",
     "task_removed id=1 ref=1\nworker_removed id=1\nrounds_scheduled ref=1 ref2=64\n=>"},
    {"rounds a worker joining before any grant changes round 0",
     "ds - r4\nhb a:1 1\njob 1 name=c consumers=1", "hb b:1 1",
     "worker_registered id=2 address='b:1' inc=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "rounds_scheduled ref=1 seqs=[1,2]\n"
     "=> worker=2"},
    {"rounds a heartbeat changing nothing schedules nothing", COORD2, "hb a:1 1", "=> worker=1"},
    {"rounds a collected coordinated iteration schedules nothing", COORD2 "rel 1\nrel 2\ngc 1",
     "hb c:1 1", "worker_registered id=3 address='c:1' inc=1\n=> worker=3"},
    /* clients */

    {"client heartbeat", PAR2, "chb 1", "=>"},
    {"client heartbeat unknown", PAR2, "chb 7", "error NOT_FOUND: client 7 not found"},
    {"client release", PAR2, "rel 1", "client_released id=1\n=>"},
    {"client release unknown", PAR2, "rel 7", "error NOT_FOUND: client 7 not found"},
};

static void test_client_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(client_cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
