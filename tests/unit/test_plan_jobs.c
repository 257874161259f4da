/* Planning jobs and iterations (plan_jobs.c): finding or creating a read's job and iteration
 * (names, modes, limits, deterministic reads, cross-trainer caches, local workers, reads
 * restored from a checkpoint), a repeating reader's next repetition, garbage collection, and the
 * iteration's secret the shell draws; each case the exact updates or refusal
 * (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

#include <string.h>

static const struct harness_case job_cases[] = {
    /* limits */
    {"job limit per client reached", "limits jobs=2\nds - r4\njob 1 owner=7\njob 1 owner=7",
     "job 1 owner=7",
     "error LIMIT: job limit reached: this client holds 2 jobs (--max-jobs-per-client)"},
    {"job limit: another client is served", "limits jobs=2\nds - r4\njob 1 owner=7\njob 1 owner=7",
     "job 1 owner=8",
     "job_created id=3 name2='1' mode=parallel_epochs\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "client_acquired id=3 ref=3 inc=8\n"
     "=> job=3 iteration=3 client=3"},
    {"job limit: a released client frees its place",
     "limits jobs=2\nds - r4\njob 1 owner=7\njob 1 owner=7\nrel 1", "job 1 owner=7",
     "job_created id=3 name2='1' mode=parallel_epochs\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "client_acquired id=3 ref=3 inc=7\n"
     "=> job=3 iteration=3 client=3"},
    {"job limit: clients of no known owner are not limited", "limits jobs=1\nds - r4\njob 1\njob 1",
     "job 1",
     "job_created id=3 name2='1' mode=parallel_epochs\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "client_acquired id=3 ref=3\n"
     "=> job=3 iteration=3 client=3"},
    /* get_or_create_job */

    {"job anonymous parallel on two workers", "ds - r4\nhb a:1 1\nhb b:1 1", "job 1",
     "job_created id=1 name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job name not UTF-8", "ds - r4", "job 1 name=ab\xff",
     "error INVALID: job name: not valid UTF-8 at byte 2"},
    {"job name with a newline", "ds - r4", "job 1 name=a\nb",
     "error INVALID: job name: control character at byte 1"},
    {"job dataset id not UTF-8", "ds - r4", "job \xc3(",
     "error INVALID: dataset id: not valid UTF-8 at byte 0"},
    {"job with no workers has no tasks", "ds - r4", "job 1 name=n consumers=2",
     "job_created id=1 name='n' name2='1' mode=parallel_epochs consumers=2\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "rounds_scheduled ref=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job distributed copies the plan", "ds - r4\nhb a:1 1", "job 1 mode=dynamic total=4 paths=x,y",
     "job_created id=1 name2='1' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=4,size=1,per_pass=4,passes=1,paths=x|y)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job distributed without a plan", "ds - r4", "job 1 mode=distributed_epoch",
     "error INVALID: a distributed_epoch iteration needs a split plan"},
    {"job unknown dataset", "ds - r4", "job 9", "error NOT_FOUND: dataset '9' not found"},
    {"job anonymous twice makes two jobs", "ds - r4\nhb a:1 1\njob 1", "job 1",
     "job_created id=2 name2='1' mode=parallel_epochs\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "task_created id=2 ref=2 ref2=1\n"
     "client_acquired id=2 ref=2\n"
     "=> job=2 iteration=2 client=2"},
    {"job named is shared", "ds - r4\nhb a:1 1\njob 1 name=n mode=distributed_epoch total=2",
     "job 1 name=n mode=distributed_epoch",
     "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    {"job named other mode", "ds - r4\njob 1 name=n", "job 1 name=n mode=distributed_epoch total=2",
     "error EXISTS: job 'n' exists with mode parallel_epochs, not distributed_epoch"},
    {"job named on another dataset is another job", "ds - r4\nds - r5\njob 1 name=n",
     "job 2 name=n",
     "job_created id=2 name='n' name2='2' mode=parallel_epochs\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "client_acquired id=2 ref=2\n"
     "=> job=2 iteration=2 client=2"},
    {"job named is shared per dataset", "ds - r4\nds - r5\njob 1 name=n\njob 2 name=n",
     "job 2 name=n", "client_acquired id=3 ref=2\n=> job=2 iteration=2 client=3"},
    {"job named other mode on its own dataset only",
     "ds - r4\nds - r5\njob 1 name=n\njob 2 name=n mode=distributed_epoch total=2",
     "job 1 name=n mode=distributed_epoch total=2",
     "error EXISTS: job 'n' exists with mode parallel_epochs, not distributed_epoch"},
    {"job coordinated of a finite pipeline", "ds - r4", "job 1 name=n consumers=1 ends",
     "error UNSUPPORTED: num_consumers needs an infinite pipeline: 'r4' ends; add repeat()"},
    {"job finite pipeline without consumers", "ds - r4", "job 1 name=n ends",
     "job_created id=1 name='n' name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job named other consumer count", "ds - r4\njob 1 name=n consumers=2",
     "job 1 name=n consumers=3", "error EXISTS: job 'n' exists with num_consumers 2, not 3"},
    {"job named finished is joined", "ds - r4\nhb a:1 1\njob 1 name=n\nhb a:1 1 fin=1",
     "job 1 name=n", "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    {"job named after collection gets a new repetition",
     "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1", "job 1 name=n",
     "iteration_created id=2 ref=1 ref2=1 dist=0\n"
     "task_created id=2 ref=2 ref2=1\n"
     "client_acquired id=2 ref=2\n"
     "=> job=1 iteration=2 client=2"},
    {"job skips draining workers", "ds - r4\nhb a:1 1 drain\nhb b:1 1", "job 1",
     "job_created id=1 name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job static mode", "ds - r4\nhb a:1 1", "job 1 mode=file_or_data",
     "job_created id=1 name2='1' mode=file_or_data\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    /* deterministic jobs: the flag and a named job's identity */

    {"job deterministic", "ds - r4\nhb a:1 1", "job 1 mode=distributed_epoch total=4 det",
     "job_created id=1 name2='1' mode=distributed_epoch det\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=4,size=1,per_pass=4,passes=1)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job deterministic in another mode", "ds - r4", "job 1 det",
     "error UNSUPPORTED: deterministic reads need mode distributed_epoch without num_consumers, "
     "not parallel_epochs"},
    {"job deterministic coordinated", "ds - r4",
     "job 1 name=n mode=distributed_epoch "
     "consumers=2 det",
     "error UNSUPPORTED: deterministic reads need mode distributed_epoch without num_consumers, "
     "not distributed_epoch with num_consumers"},
    {"job named deterministic joined without",
     "ds - r4\njob 1 name=n mode=distributed_epoch "
     "total=2 det",
     "job 1 name=n mode=distributed_epoch",
     "error EXISTS: job 'n' exists with deterministic true, not false"},
    {"job named joined deterministic", "ds - r4\njob 1 name=n mode=distributed_epoch total=2",
     "job 1 name=n mode=distributed_epoch det",
     "error EXISTS: job 'n' exists with deterministic false, not true"},
    {"job named deterministic is shared",
     "ds - r4\njob 1 name=n mode=distributed_epoch total=2 "
     "det",
     "job 1 name=n mode=distributed_epoch det",
     "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    /* cross-trainer caches: the flag and bound, the refusals, the job's identity */
    {"job with a cross-trainer cache", "ds - r4\nhb a:1 1", "job 1 name=n xtc=1048576",
     "job_created id=1 name='n' name2='1' mode=parallel_epochs xtc=1048576\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job with a cross-trainer cache is shared", "ds - r4\njob 1 name=n xtc=4096",
     "job 1 name=n xtc=4096", "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    {"job with a cross-trainer cache in a static sharding mode", "ds - r4",
     "job 1 name=n mode=data xtc=4096",
     "job_created id=1 name='n' name2='1' mode=data xtc=4096\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"cross-trainer cache without a job name", "ds - r4", "job 1 xtc=4096",
     "error INVALID: cross_trainer_cache needs a job name: the trainers share one job"},
    {"cross-trainer cache in distributed_epoch", "ds - r4",
     "job 1 name=n mode=distributed_epoch total=inf xtc=4096",
     "error UNSUPPORTED: cross_trainer_cache cannot be used with mode distributed_epoch: its "
     "splits are handed out once, not shared between trainers"},
    {"cross-trainer cache coordinated", "ds - r4", "job 1 name=n consumers=2 xtc=4096",
     "error UNSUPPORTED: cross_trainer_cache cannot be combined with num_consumers"},
    {"cross-trainer cache over the limit", "ds - r4", "job 1 name=n xtc=68719476737",
     "error LIMIT: cross_trainer_cache_bytes 68719476737 is over the limit of 68719476736"},
    {"cross-trainer cache over a pipeline that ends", "ds - r4", "job 1 name=n xtc=4096 ends",
     "error UNSUPPORTED: cross_trainer_cache needs an infinite pipeline: 'r4' ends; add repeat()"},
    {"job with a cross-trainer cache joined without", "ds - r4\njob 1 name=n xtc=4096",
     "job 1 name=n", "error EXISTS: job 'n' exists with cross_trainer_cache on, not off"},
    {"job without a cross-trainer cache joined with", "ds - r4\njob 1 name=n",
     "job 1 name=n xtc=4096", "error EXISTS: job 'n' exists with cross_trainer_cache off, not on"},
    {"job with a cross-trainer cache joined with another bound", "ds - r4\njob 1 name=n xtc=4096",
     "job 1 name=n xtc=8192",
     "error EXISTS: job 'n' exists with cross_trainer_cache_bytes 4096, not 8192"},
    /* gc_iteration */

    {"gc with clients", PAR2, "gc 1", "error INVALID: iteration 1 has 1 clients"},
    {"gc unknown", PAR2, "gc 3", "error NOT_FOUND: iteration 3 not found"},
    {"gc removes tasks and leases", DIST2 "splits 1 2\nrel 1", "gc 1",
     "task_removed id=1 ref=1\ntask_removed id=2 ref=1\niteration_gc id=1\n=>"},
    {"gc twice", "ds - r4\njob 1 name=n\nrel 1\ngc 1", "gc 1",
     "error INVALID: iteration 1 is already garbage-collected"},
    {"gc of a failed iteration", PAR2 "failed 1 1 msg=x\nrel 1", "gc 1",
     "task_removed id=1 ref=1\ntask_removed id=2 ref=1\niteration_gc id=1\n=>"},
    {"a failed named job collected starts a clean repetition",
     "ds - r4\nhb a:1 1\njob 1 name=n\nfailed 1 1 msg=x\nrel 1\ngc 1", "job 1 name=n",
     "iteration_created id=2 ref=1 ref2=1 dist=0\n"
     "task_created id=2 ref=2 ref2=1\n"
     "client_acquired id=2 ref=2\n"
     "=> job=1 iteration=2 client=2"},
};

static void test_job_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(job_cases);
}

/* A repeating reader of a named job asks for its next repetition: joined when it is there,
 * the previous one collected once nobody holds it, a wait while readers still do, and a clear
 * refusal once the job has moved past it. */
static const struct harness_case repetition_cases[] = {
    {"the current repetition is joined", "ds - r4\nhb a:1 1\njob 1 name=n", "rep 1 n 0", "=>"},
    {"anonymous jobs have no repetitions", "ds - r4\nhb a:1 1\njob 1", "rep 1 '' 1", "=>"},
    {"still read", "ds - r4\nhb a:1 1\njob 1 name=n\njob 1 name=n", "rep 1 n 1",
     "error UNAVAILABLE: job 'n': repetition 0 is still being read by 2 readers; repetition 1 "
     "starts once they finish"},
    {"nobody holds it: collected", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1", "rep 1 n 1",
     "task_removed id=1 ref=1\niteration_gc id=1\n=>"},
    {"already collected", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1", "rep 1 n 1", "=>"},
    {"the next one is there", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1\njob 1 name=n",
     "rep 1 n 1", "=>"},
    {"moved past it",
     "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1\njob 1 name=n\nrel 2\ngc 2\njob 1 name=n",
     "rep 1 n 1",
     "error INVALID: job 'n': repetition 1 was read without this reader; the job is at "
     "repetition 2"},
    {"collected past it", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1\njob 1 name=n\nrel 2\ngc 2",
     "rep 1 n 1",
     "error INVALID: job 'n': repetition 1 was read without this reader; the job is at "
     "repetition 1 (collected)"},
    {"not there yet", "ds - r4\nhb a:1 1\njob 1 name=n", "rep 1 n 2",
     "error INVALID: job 'n': no repetition 2 to read next; the job is at repetition 0"},
    {"no such job", "ds - r4", "rep 1 n 1",
     "error NOT_FOUND: job 'n' of dataset '1' not found (asked for its repetition 1)"},
};

static void test_plan_repetition(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(repetition_cases);
    /* After the collection the read creates the next repetition of the same job. */
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\nrep 1 n 1");
    assert_string_equal(harness_run(&h, "job 1 name=n"),
                        "iteration_created id=2 ref=1 ref2=1 dist=0\n"
                        "task_created id=2 ref=2 ref2=1\n"
                        "client_acquired id=2 ref=2\n"
                        "=> job=1 iteration=2 client=2");
    harness_release(&h);
}

/* A read restored from a checkpoint: a new iteration starts past the splits its reader had
 * whole, with the gaps below them (the splits that were in flight) in its pool; a checkpoint of
 * another split plan, or bounds that do not describe splits of the plan, are refused. */
static const struct harness_case resume_cases[] = {
    {"starts past the finished splits", "ds d r10",
     "job d mode=distributed_epoch total=10 resume=0-3,5-7",
     "job_created id=1 name2='d' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 start=7 plan=(len=10,size=1,per_pass=10,passes=1) "
     "seqs=[3,4]\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"all finished", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-10",
     "job_created id=1 name2='d' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 start=10 plan=(len=10,size=1,per_pass=10,passes=1)\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"nothing finished", "ds d r10", "job d mode=distributed_epoch total=10 resume=",
     "job_created id=1 name2='d' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=10,size=1,per_pass=10,passes=1)\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"another plan", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-3 fpbad",
     "error INVALID: the checkpoint does not fit dataset 'd': its split plan changed since the "
     "checkpoint was taken (now 10 splits; its files, split size or pipeline differ)"},
    {"past the end", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-11",
     "error INVALID: checkpoint: its finished splits are not sorted ranges within the 10 splits of "
     "the plan"},
    {"overlapping", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-4,3-6",
     "error INVALID: checkpoint: its finished splits are not sorted ranges within the 10 splits of "
     "the plan"},
    {"an odd bound", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-4,6",
     "error INVALID: checkpoint: an odd number of split bounds"},
    {"not distributed", "ds d r10", "job d total=10 resume=0-4",
     "error UNSUPPORTED: a checkpoint restores distributed_epoch reads only, not parallel_epochs"},
};

static void test_resume_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(resume_cases);
}

/* Local workers (docs/reading.md "Local workers"): a local job's tasks go only to workers on its
 * readers' hosts. Workers 1 (a:1) and 2 (b:1) on host ha, 3 (c:1) on hb. */
#define HOSTS3 "ds - r4\nhb a:1 1 host=ha\nhb b:1 1 host=ha\nhb c:1 1 host=hb\n"
static const struct harness_case local_cases[] = {
    {"a worker records its host", "", "hb a:1 7 host=h1",
     "worker_registered id=1 address='a:1' inc=7 host='h1' key=ssssssssssssssss\n=> worker=1"},
    {"a known worker's host stays", "hb a:1 7 host=h1", "hb a:1 7 host=h2", "=> worker=1"},
    {"a worker host id with a space", "", "hb a:1 7 host=h\x01",
     "error INVALID: worker host id: byte 1 is not printable ASCII without spaces"},
    {"local: tasks only on the reader's host", HOSTS3, "job 1 target=local host=ha",
     "job_created id=1 name2='1' mode=parallel_epochs target=local\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1 host='ha'\n"
     "=> job=1 iteration=1 client=1"},
    {"local distributed: tasks only on the reader's host", HOSTS3,
     "job 1 mode=distributed_epoch total=4 target=local host=hb",
     "job_created id=1 name2='1' mode=distributed_epoch target=local\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=4,size=1,per_pass=4,passes=1)\n"
     "task_created id=1 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1 host='hb'\n"
     "=> job=1 iteration=1 client=1"},
    {"auto: tasks everywhere", HOSTS3, "job 1 target=auto host=hb",
     "job_created id=1 name2='1' mode=parallel_epochs target=auto\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1 host='hb'\n"
     "=> job=1 iteration=1 client=1"},
    {"any records the reader's host", HOSTS3, "job 1 host=hb",
     "job_created id=1 name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1 host='hb'\n"
     "=> job=1 iteration=1 client=1"},
    {"local with no worker on the host", HOSTS3, "job 1 target=local host=hc",
     "error NOT_FOUND: no local worker: target_workers local needs a worker on this host (host id "
     "hc), and none is registered"},
    {"local with only a draining worker on the host", HOSTS3 "hb c:1 1 host=hb drain",
     "job 1 target=local host=hb",
     "error NOT_FOUND: no local worker: target_workers local needs a worker on this host (host id "
     "hb), and none is registered"},
    {"local with workers of unknown hosts", "ds - r4\nhb a:1 1", "job 1 target=local host=ha",
     "error NOT_FOUND: no local worker: target_workers local needs a worker on this host (host id "
     "ha), and none is registered"},
    {"local without a host", HOSTS3, "job 1 target=local",
     "error INVALID: target_workers local needs the reader's host id"},
    {"a reader's host id with a control character", HOSTS3, "job 1 host=h\x7f",
     "error INVALID: host id: byte 1 is not printable ASCII without spaces"},
    {"unknown target", HOSTS3, "job 1 target=7 host=ha", "error INVALID: unknown target_workers 7"},
    {"local with num_consumers", HOSTS3 "ds e r(inf)",
     "job e name=c consumers=2 target=local host=ha",
     "error UNSUPPORTED: target_workers local cannot be combined with num_consumers: coordinated "
     "reads need every worker"},
    {"auto with num_consumers", HOSTS3 "ds e r(inf)",
     "job e name=c consumers=2 target=auto host=ha",
     "error UNSUPPORTED: target_workers auto cannot be combined with num_consumers: coordinated "
     "reads need every worker"},
    {"local with static sharding", HOSTS3, "job 1 mode=file target=local host=ha",
     "error UNSUPPORTED: target_workers local cannot be used with mode file: its shards are on the "
     "--worker-addresses workers, wherever they run"},
    {"a named job joined with another target", HOSTS3 "job 1 name=j target=local host=ha",
     "job 1 name=j host=ha", "error EXISTS: job 'j' exists with target_workers local, not any"},
    {"a named job joined with auto", HOSTS3 "job 1 name=j host=ha",
     "job 1 name=j target=auto host=ha",
     "error EXISTS: job 'j' exists with target_workers any, not auto"},
    {"a reader from another host brings tasks to its workers",
     HOSTS3 "job 1 name=j mode=distributed_epoch total=4 target=local host=ha",
     "job 1 name=j mode=distributed_epoch total=4 target=local host=hb",
     "task_created id=3 ref=1 ref2=3\n"
     "client_acquired id=2 ref=1 host='hb'\n"
     "=> job=1 iteration=1 client=2"},
    {"a reader from the same host brings nothing new", HOSTS3 "job 1 name=j target=local host=ha",
     "job 1 name=j target=local host=ha",
     "client_acquired id=2 ref=1 host='ha'\n=> job=1 iteration=1 client=2"},
    {"a worker registering on the reader's host gets the task", HOSTS3 "job 1 target=local host=hb",
     "hb d:1 1 host=hb",
     "worker_registered id=4 address='d:1' inc=1 host='hb' key=ssssssssssssssss\n"
     "task_created id=2 ref=1 ref2=4\n"
     "=> worker=4"},
    {"a worker registering on another host gets none", HOSTS3 "job 1 target=local host=hb",
     "hb d:1 1 host=ha",
     "worker_registered id=4 address='d:1' inc=1 host='ha' key=ssssssssssssssss\n"
     "=> worker=4"},
    {"a worker of an unknown host gets no local task", HOSTS3 "job 1 target=local host=hb",
     "hb d:1 1", "worker_registered id=4 address='d:1' inc=1\n=> worker=4"},
    {"a worker gets an auto job's task wherever it runs", HOSTS3 "job 1 target=auto host=hb",
     "hb d:1 1 host=hz",
     "worker_registered id=4 address='d:1' inc=1 host='hz' key=ssssssssssssssss\n"
     "task_created id=4 ref=1 ref2=4\n"
     "=> worker=4"},
    {"the last reader of a host leaving takes the host's tasks",
     HOSTS3 "job 1 name=j mode=distributed_epoch total=4 target=local host=ha\n"
            "job 1 name=j mode=distributed_epoch total=4 target=local host=hb\nsplits 3 2",
     "rel 2",
     "client_released id=2\n"
     "splits_returned ref=1 ref2=3 seqs=[0,1]\n"
     "task_removed id=3 ref=1\n"
     "=>"},
    {"a host keeps its tasks while one of its readers remains",
     HOSTS3 "job 1 name=j target=local host=ha\njob 1 name=j target=local host=ha", "rel 1",
     "client_released id=1\n=>"},
    {"a reader of an any job leaving takes nothing", HOSTS3 "job 1 name=j host=ha", "rel 1",
     "client_released id=1\n=>"},
    {"the rest finishes once the leaving host's unfinished task goes",
     HOSTS3 "job 1 name=j target=local host=ha\njob 1 name=j target=local host=hb\n"
            "hb a:1 1 host=ha fin=1\nhb b:1 1 host=ha fin=2",
     "rel 2", "client_released id=2\ntask_removed id=3 ref=1\niteration_finished id=1\n=>"},
    {"a collected local job's name is free for another target",
     HOSTS3 "job 1 name=j target=local host=ha\nrel 1\ngc 1", "job 1 name=j host=ha",
     "job_created id=2 name='j' name2='1' mode=parallel_epochs\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "task_created id=3 ref=2 ref2=1\n"
     "task_created id=4 ref=2 ref2=2\n"
     "task_created id=5 ref=2 ref2=3\n"
     "client_acquired id=2 ref=2 host='ha'\n"
     "=> job=2 iteration=2 client=2"},
};

static void test_local_workers(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(local_cases);
    /* Hosts and targets survive the journal's encoding, replay and snapshots, and are part of
     * the digest. */
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, HOSTS3
                       "job 1 name=j mode=distributed_epoch total=4 target=local host=ha\n"
                       "job 1 name=j mode=distributed_epoch total=4 target=local host=hb\n"
                       "job 1 target=auto host=hb\nhb d:1 1 host=hb\nsplits 1 2\nsplits 3 2");
    harness_replay_through_records(&h);
    const struct st_job *j = state_job(&h.s, 1);
    assert_int_equal(j->target_workers, SLUICE_TARGET_WORKERS_LOCAL);
    assert_string_equal(state_worker(&h.s, 3)->host_id, "hb");
    assert_string_equal(state_client(&h.s, 2)->host_id, "hb");
    uint64_t before = state_digest(&h.s);
    h.s.workers[2].host_id[1] = 'x';
    assert_int_not_equal(state_digest(&h.s), before);
    h.s.workers[2].host_id[1] = 'b';
    h.s.clients[0].host_id[0] = 'x';
    assert_int_not_equal(state_digest(&h.s), before);
    h.s.clients[0].host_id[0] = 'h';
    h.s.jobs[0].target_workers = SLUICE_TARGET_WORKERS_AUTO;
    assert_int_not_equal(state_digest(&h.s), before);
    h.s.jobs[0].target_workers = SLUICE_TARGET_WORKERS_LOCAL;
    assert_int_equal(state_digest(&h.s), before);
    /* Every split of the shared local job goes to a task on a reader's host. */
    size_t n;
    const struct st_task_ref *refs = state_iteration_tasks(&h.s, 1, &n);
    assert_int_equal(n, 4); /* workers 1, 2 (ha), 3 and 4 (hb) */
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(&h.s, refs[i].task_id);
        const char *host = state_worker(&h.s, t->worker_id)->host_id;
        assert_true(strcmp(host, "ha") == 0 || strcmp(host, "hb") == 0);
    }
    harness_release(&h);
}

/* An iteration's secret is drawn by the shell and written into ITERATION_CREATED: the state
 * keeps it, replay and snapshots give it back, and an iteration without one (an older journal)
 * stays without. */
static void test_iteration_keys(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nhb a:1 1");
    struct plan_job_request job = {.dataset_id = "1"};
    struct plan_job_result ids;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(plan_get_or_create_job(&h.s, &job, &ids, &h.ups, err, sizeof err), 0);
    size_t created = 0;
    for (size_t i = 0; i < h.ups.n; i++) {
        if (h.ups.v[i].type != ST_ITERATION_CREATED)
            continue;
        /* Planning draws nothing. */
        assert_false(h.ups.v[i].key.set);
        h.ups.v[i].key.set = true;
        memcpy(h.ups.v[i].key.b, "iteration secret", ST_KEY_LEN);
        created++;
    }
    assert_int_equal(created, 1);
    harness_commit(&h);
    const struct st_iteration *row = state_iteration(&h.s, ids.iteration_id);
    assert_non_null(row);
    assert_true(row->key.set);
    assert_memory_equal(row->key.b, "iteration secret", ST_KEY_LEN);
    assert_true(st_key_matches(&row->key, (const uint8_t *)"iteration secret", ST_KEY_LEN));
    assert_false(st_key_matches(&row->key, (const uint8_t *)"iteration secreT", ST_KEY_LEN));
    assert_false(st_key_matches(&row->key, (const uint8_t *)"iteration secret", ST_KEY_LEN - 1));
    assert_false(st_key_matches(&row->key, NULL, 0));
    /* A second, older-style job: no secret. */
    harness_run_script(&h, "job 1");
    assert_false(h.s.iterations[h.s.niterations - 1].key.set);
    harness_replay_through_records(&h);
    harness_release(&h);
}

/* What collection deletes and keeps. */
static void test_gc_rows(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nhb a:1 1\njob 1 mode=distributed_epoch total=3\n"
                           "job 1 name=n mode=distributed_epoch total=3\nrel 1\nrel 2\nsplits 2 1");
    harness_run_script(&h, "gc 1\ngc 2");
    /* The anonymous job went with its iteration; the named one keeps its collected iteration. */
    assert_null(state_job(&h.s, 1));
    assert_null(state_iteration(&h.s, 1));
    const struct st_job *j = state_job_by_key(&h.s, "1", "n");
    assert_non_null(j);
    const struct st_iteration *it = state_iteration(&h.s, j->iteration_id);
    assert_non_null(it);
    assert_int_equal(it->state, ST_ITER_GC);
    assert_int_equal(it->pool.n, 0);
    assert_int_equal(it->plan.npaths, 0);
    assert_int_equal(h.s.ntasks, 0);
    /* The next iteration replaces the collected row. */
    harness_run_script(&h, "job 1 name=n mode=distributed_epoch total=3");
    assert_int_equal(h.s.niterations, 1);
    assert_int_equal(h.s.iterations[0].id, 3);
    assert_int_equal(h.s.iterations[0].repetition, 1);
    harness_release(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_cases),       cmocka_unit_test(test_resume_cases),
        cmocka_unit_test(test_local_workers),   cmocka_unit_test(test_iteration_keys),
        cmocka_unit_test(test_plan_repetition), cmocka_unit_test(test_gc_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
