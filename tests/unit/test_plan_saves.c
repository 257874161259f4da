/* Planning snapshot saves (plan_saves.c, docs/snapshots.md): starting, joining, finishing and
 * failing a save, and its refusals; each case the exact updates or refusal
 * (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

/* Saves (docs/snapshots.md): an anonymous distributed_epoch job whose iteration has a task on
 * every worker although nobody reads it, whose tasks report their splits finished once the
 * chunks are committed, that is not collected while it runs; the same dataset and path is the
 * same save; the refusals. */
#define SAVE2 "ds - r4\nhb a:1 1\nhb b:1 1\nsave 1 /snap/x total=3\n"
static const struct harness_case save_cases[] = {
    {"starts a job, an iteration and a task per worker", "ds - r4\nhb a:1 1\nhb b:1 1",
     "save 1 /snap/x total=3",
     "job_created id=1 name2='1' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=3,size=1,per_pass=3,passes=1)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "save_started id=1 ref=1 ref2=1 name='1' text='/snap/x'\n"
     "=> save=1"},
    {"no task on a draining worker", "ds - r4\nhb a:1 1\nhb b:1 1 drain", "save 1 /s total=1",
     "job_created id=1 name2='1' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=1,size=1,per_pass=1,passes=1)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "save_started id=1 ref=1 ref2=1 name='1' text='/s'\n"
     "=> save=1"},
    {"the same dataset and path is the same save", SAVE2, "save 1 /snap/x", "=> save=1"},
    {"the same save once it finished", SAVE2 "saved 1", "save 1 /snap/x", "=> save=1"},
    {"a second path is a second save", SAVE2, "save 1 /snap/y total=1",
     "job_created id=2 name2='1' mode=distributed_epoch\n"
     "iteration_created id=2 ref=2 dist=1 plan=(len=1,size=1,per_pass=1,passes=1)\n"
     "task_created id=3 ref=2 ref2=1\n"
     "task_created id=4 ref=2 ref2=2\n"
     "save_started id=2 ref=2 ref2=2 name='1' text='/snap/y'\n"
     "=> save=2"},
    {"another dataset at the path", SAVE2 "ds other r5", "save other /snap/x total=5",
     "error EXISTS: snapshot path '/snap/x' holds a save of dataset '1', not 'other'"},
    {"unknown dataset", "", "save nope /snap/x total=1",
     "error NOT_FOUND: dataset 'nope' not found"},
    {"relative path", "ds - r4", "save 1 snap/x total=4",
     "error INVALID: snapshot path 'snap/x' is not absolute (dispatcher, workers and readers must "
     "see it at the same absolute path)"},
    {"an s3:// prefix", "ds - r4\nhb a:1 1", "save 1 s3://bkt/snap total=2",
     "job_created id=1 name2='1' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=2,size=1,per_pass=2,passes=1)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "save_started id=1 ref=1 ref2=1 name='1' text='s3://bkt/snap'\n"
     "=> save=1"},
    {"another URL", "ds - r4", "save 1 https://h/snap total=4",
     "error INVALID: snapshot path 'https://h/snap': only s3:// URLs are written (or an absolute "
     "path)"},
    {"empty path", "ds - r4", "save 1 '' total=4", "error INVALID: snapshot path is empty"},
    {"path with a control character", "ds - r4", "save 1 /a\x01 total=4",
     "error INVALID: snapshot path: control character at byte 2"},
    {"endless pipeline", "ds - r4", "save 1 /s total=inf endless",
     "error UNSUPPORTED: cannot save dataset '1': its pipeline 'r4' never ends"},
    {"endless splits", "ds - r4", "save 1 /s total=inf",
     "error UNSUPPORTED: cannot save dataset '1': its splits never end"},
    {"no plan", "ds - r4", "save 1 /s", "error INVALID: a save needs a split plan"},
    {"a new worker gets a task though nobody reads", SAVE2, "hb c:1 1",
     "worker_registered id=3 address='c:1' inc=1\n"
     "task_created id=3 ref=1 ref2=3\n"
     "=> worker=3"},
    {"no task once the save is over", SAVE2 "savefail 1 msg=x", "hb c:1 1",
     "worker_registered id=3 address='c:1' inc=1\n=> worker=3"},
    {"not collected while it runs", SAVE2, "gc 1", "error INVALID: iteration 1 runs save 1"},
    {"the task's report finishes its splits", SAVE2 "splits 1 2", "splits 1 2 fin=0,1",
     "splits_finished ref=1 ref2=1 seqs=[0,1]\n"
     "splits_leased ref=1 ref2=1 seqs=[2]\n"
     "=> end=0 seqs=[2]"},
    {"committed chunks are the finished splits", SAVE2 "splits 1 2\nsplits 1 0 fin=1",
     "committed 1", "=> committed=1 of 3 running"},
    {"the iteration finishes with the last chunk",
     SAVE2 "splits 1 3\nsplits 1 0 fin=0,1,2\nhb a:1 1 fin=1", "hb b:1 1 fin=2",
     "task_finished id=2\niteration_finished id=1\n=> worker=2"},
    {"finished", SAVE2, "saved 1", "save_finished id=1\n=>"},
    {"finished counts every chunk", SAVE2 "saved 1", "committed 1", "=> committed=3 of 3 finished"},
    {"failed", SAVE2, "savefail 1 msg=chunk_2:_damaged",
     "save_failed id=1 text='chunk 2: damaged'\n=>"},
    {"failed with bad bytes escaped", SAVE2, "savefail 1 msg=a\x02",
     "save_failed id=1 text='a\\x02'\n=>"},
    {"over only once", SAVE2 "saved 1", "savefail 1 msg=x", "=>"},
    {"a failed save is started again", SAVE2 "savefail 1 msg=x", "save 1 /snap/x total=3",
     "job_created id=2 name2='1' mode=distributed_epoch\n"
     "iteration_created id=2 ref=2 dist=1 plan=(len=3,size=1,per_pass=3,passes=1)\n"
     "task_created id=3 ref=2 ref2=1\n"
     "task_created id=4 ref=2 ref2=2\n"
     "save_started id=2 ref=2 ref2=2 name='1' text='/snap/x'\n"
     "=> save=2"},
    {"started again, it is the path's save", SAVE2 "savefail 1 msg=x\nsave 1 /snap/x total=3",
     "save 1 /snap/x", "=> save=2"},
    {"another dataset at a failed save's path", SAVE2 "savefail 1 msg=x\nds other r5",
     "save other /snap/x total=5",
     "error EXISTS: snapshot path '/snap/x' holds a save of dataset '1', not 'other'"},
    {"collected once over", SAVE2 "saved 1", "gc 1",
     "task_removed id=1 ref=1\ntask_removed id=2 ref=1\niteration_gc id=1\n=>"},
    {"unknown save", "", "saved 9", "error NOT_FOUND: save 9 not found"},
};

static void test_save_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(save_cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
