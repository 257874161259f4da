/* Planning splits (plan_splits.c): leases from the pool and the cursor, numbered requests and
 * their retries after lost replies (no split lost), splits handed back by draining workers,
 * consumers' reports of splits received in full, deterministic reads (redo, the lease bound)
 * and the finished-split queries; each case the exact updates or refusal
 * (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const struct harness_case split_cases[] = {
    /* deterministic reads: redo, the lease bound, the finished floor */
    {"redo returns leased splits to the pool", DET2 "splits 1 2\nsplits 2 2", "redo 1 3,0,9,3",
     "splits_returned ref=1 ref2=1 seqs=[0]\nsplits_returned ref=1 ref2=2 seqs=[3]\n=>"},
    {"redo of the productions the consumer saw", DET2 "splits 1 2\nsplits 2 2",
     "redo 1 0,1,2,3 tasks=1,2,2,2",
     "splits_returned ref=1 ref2=1 seqs=[0]\nsplits_returned ref=1 ref2=2 seqs=[2,3]\n=>"},
    /* Split 1 went back and was leased to task 2: a request about task 1's production of it
     * (sent before the consumer saw the new one) leaves the new production alone. */
    {"redo of a split leased again since is ignored",
     DET2 "splits 1 2\nsplits 2 2\nredo 1 1 tasks=1\nsplits 2 1", "redo 1 1 tasks=1", "=>"},
    {"redo of a split leased again since, about the new production",
     DET2 "splits 1 2\nsplits 2 2\nredo 1 1 tasks=1\nsplits 2 1", "redo 1 1 tasks=2",
     "splits_returned ref=1 ref2=2 seqs=[1]\n=>"},
    {"redo of splits in the pool or finished", DET2 "splits 1 2\ndone 1 1\nredo 1 0",
     "redo 1 0,1,2", "=>"},
    {"redo refused for a job that is not deterministic", DIST2, "redo 1 0",
     "error INVALID: iteration 1 is not read deterministically: no split is produced again on "
     "request"},
    {"redo leases the split again first", DET2 "splits 1 2\nsplits 2 1\nredo 1 1", "splits 2 2",
     "splits_leased ref=1 ref2=2 seqs=[1,3]\n=> end=0 seqs=[1,3]"},
    {"splits bounded by the reader's window", DET2, "splits 1 3 below=2",
     "splits_leased ref=1 ref2=1 seqs=[0,1]\n=> end=0 seqs=[0,1]"},
    {"splits bounded: the pool is leased past the bound", DET2 "splits 1 2\nrm 1",
     "splits 2 3 below=1", "splits_leased ref=1 ref2=2 seqs=[0,1]\n=> end=0 seqs=[0,1]"},
    {"splits bounded below the cursor lease nothing", DET2 "splits 1 3", "splits 2 3 below=2",
     "=> end=0"},
    {"finished below: the lowest split not finished", DET2 "splits 1 2\nsplits 2 2\ndone 1 0,2",
     "below 1", "=> below=1"},
    {"finished below: the pool counts", DET2 "splits 1 2\ndone 1 0,1\nsplits 2 1\nredo 1 2",
     "below 1", "=> below=2"},
    /* guided self-scheduling (share): each task at most its share of what is left */
    {"share: half of four to the first task", DIST2, "splits 1 4 share",
     "splits_leased ref=1 ref2=1 seqs=[0,1]\n=> end=0 seqs=[0,1]"},
    {"share: the other half to the second", DIST2 "splits 1 4 share", "splits 2 4 share",
     "splits_leased ref=1 ref2=2 seqs=[2,3]\n=> end=0 seqs=[2,3]"},
    {"share: none more while the task holds its share", DIST2 "splits 1 4 share",
     "splits 1 4 share", "=> end=0"},
    {"share: what it finished makes room", DIST2 "splits 1 4 share", "splits 1 4 share fin=0",
     "splits_finished ref=1 ref2=1 seqs=[0]\nsplits_leased ref=1 ref2=1 seqs=[2]\n=> end=0 "
     "seqs=[2]"},
    {"share: the pool counts", DIST2 "splits 1 2\nsplits 1 0 ret=0,1", "splits 2 4 share",
     "splits_leased ref=1 ref2=2 seqs=[0,1]\n=> end=0 seqs=[0,1]"},
    {"share: a held pool does not", DIST2 "splits 1 2\nsplits 1 0 ret=0,1", "splits 2 4 share held",
     "splits_leased ref=1 ref2=2 seqs=[2]\n=> end=0 seqs=[2]"},
    {"share: under the share, what was asked", DIST2, "splits 1 1 share",
     "splits_leased ref=1 ref2=1 seqs=[0]\n=> end=0 seqs=[0]"},
    /* get_splits */
    {"splits from the cursor", DIST2, "splits 1 3",
     "splits_leased ref=1 ref2=1 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
    {"splits capped by the total", DIST2 "splits 1 3", "splits 2 3",
     "splits_leased ref=1 ref2=2 seqs=[3]\n=> end=0 seqs=[3]"},
    {"splits pool first then cursor", DIST2 "splits 1 2\nrm 1", "splits 2 3",
     "splits_leased ref=1 ref2=2 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
    {"splits pool held: the cursor only", DIST2 "splits 1 2\nrm 1", "splits 2 3 held=1",
     "splits_leased ref=1 ref2=2 seqs=[2,3]\n=> end=0 seqs=[2,3]"},
    {"splits pool held and the cursor at the end: nothing, not the end",
     DIST2 "splits 1 2\nsplits 2 2\nrm 1", "splits 2 3 held=1", "=> end=0"},
    {"splits finished are filtered sorted and unique", DIST2 "splits 1 2\nsplits 2 1",
     "splits 1 0 fin=1,2,1,7,0", "splits_finished ref=1 ref2=1 seqs=[0,1]\n=> end=0"},
    {"splits none left while another task holds leases", DIST2 "splits 1 4", "splits 2 2",
     "=> end=0"},
    {"splits end once everything is finished", DIST2 "splits 1 4", "splits 1 2 fin=3,2,1,0",
     "splits_finished ref=1 ref2=1 seqs=[0,1,2,3]\n=> end=1"},
    {"splits end for an empty source", "ds - r4\nhb a:1 1\njob 1 mode=distributed_epoch total=0",
     "splits 1 5", "=> end=1"},
    {"splits of a finished task", DIST2 "splits 1 4\nsplits 1 0 fin=0,1,2,3\nhb a:1 1 fin=1",
     "splits 1 1", "=> end=1"},
    {"splits of an endless source", "ds - r4\nhb a:1 1\njob 1 mode=distributed_epoch total=inf",
     "splits 1 3", "splits_leased ref=1 ref2=1 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
    {"splits unknown task", DIST2, "splits 9 1", "error NOT_FOUND: task 9 not found"},
    {"splits of a parallel task", PAR2, "splits 1 1",
     "error INVALID: task 1 is not in a distributed_epoch iteration"},
    {"splits retried report already finished by the task is a no-op",
     DIST2 "splits 1 2\nsplits 1 0 fin=0,1", "splits 1 1 fin=0,1",
     "splits_leased ref=1 ref2=1 seqs=[2]\n=> end=0 seqs=[2]"},
    /* get_splits: numbered requests */

    {"splits numbered request is recorded with its lease", DIST2, "splits 1 2 req=1",
     "splits_leased id=1 ref=1 ref2=1 seqs=[0,1]\n=> end=0 seqs=[0,1]"},
    {"splits repeated request gets the same lease", DIST2 "splits 1 2 req=1", "splits 1 3 req=1",
     "=> end=0 seqs=[0,1]"},
    {"splits repeated request with its finished list",
     DIST2 "splits 1 2 req=1\nsplits 1 2 fin=0 req=2", "splits 1 2 fin=0 req=2",
     "=> end=0 seqs=[2,3]"},
    {"splits repeated request finishing more leaves those out", DIST2 "splits 1 3 req=1",
     "splits 1 3 fin=1 req=1", "splits_finished ref=1 ref2=1 seqs=[1]\n=> end=0 seqs=[0,2]"},
    {"splits repeated request leaves out what finished since",
     DIST2 "splits 1 3 req=1\nsplits 1 0 fin=1 req=2", "splits 1 3 req=1", "=> end=0 seqs=[0,2]"},
    {"splits repeated request with all of its lease finished",
     DIST2 "splits 1 4 req=1\nsplits 1 0 fin=0,1,2,3 req=2", "splits 1 4 req=1", "=> end=1"},
    {"splits repeated request of a finished task", DIST2 "splits 1 2 req=1\nhb a:1 1 fin=1",
     "splits 1 2 req=1", "=> end=1"},
    {"splits repeated request is answered after a lease to another task",
     DIST2 "splits 1 1 req=1\nsplits 2 1 req=1", "splits 1 1 req=1", "=> end=0 seqs=[0]"},
    {"splits newer request is a new lease", DIST2 "splits 1 1 req=1", "splits 1 1 req=5",
     "splits_leased id=5 ref=1 ref2=1 seqs=[1]\n=> end=0 seqs=[1]"},
    {"splits newer request with nothing to lease records nothing", DIST2 "splits 1 4 req=1",
     "splits 1 4 req=2", "=> end=0"},
    {"splits stale request", DIST2 "splits 1 1 req=1\nsplits 1 1 req=2", "splits 1 1 fin=0 req=1",
     "error INVALID: task 1: stale request 1 (request 2 was answered)"},
    {"splits unnumbered request keeps the record", DIST2 "splits 1 1 req=3\nsplits 1 1",
     "splits 1 1 req=3", "=> end=0 seqs=[0]"},
    {"splits request number out of range", DIST2, "splits 1 1 req=18446744073709551615",
     "error INVALID: task 1: request number 18446744073709551615 is out of range"},
};

static void test_split_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(split_cases);
}

/* ---- lost replies ---------------------------------------------------------------------------- */

/* A worker's side of GetSplits, as lease.c keeps it: the request in flight (its number, what it
 * reports finished) is sent again as it was until a reply arrives. */
struct sim_task {
    uint64_t id;
    uint64_t number;
    uint64_t fin[64];
    size_t nfin;
    bool pending; /* the request failed: send it again */
    bool ended;
};

/* Two tasks lease and finish the splits of a 40-split iteration while many replies are lost
 * after the dispatcher applied the request (as when it dies after its journal write). Every
 * split is finished exactly once, by the task it was leased to, and the iteration ends: a lost
 * lease comes back to the task that retries, instead of staying leased to it forever. */
static void test_lost_replies(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=40");
    struct sim_task tasks[2] = {{.id = 1}, {.id = 2}};
    uint8_t finished_by[40] = {0};
    uint64_t x = 0x5eed;
    size_t lost = 0, repeats = 0;
    for (int round = 0; round < 1000 && !(tasks[0].ended && tasks[1].ended); round++) {
        struct sim_task *t = &tasks[harness_pick(&x, 2)];
        if (t->ended)
            continue;
        if (!t->pending)
            t->number++;
        struct plan_splits_request sr = {.task_id = t->id,
                                         .request_seq = t->number,
                                         .finished = t->fin,
                                         .nfinished = t->nfin,
                                         .max = 2};
        struct plan_splits_result lease;
        char err[SLUICE_ERRMSG_SIZE];
        size_t before = h.record.n;
        assert_int_equal(plan_get_splits(&h.s, &sr, &lease, &h.ups, err, sizeof err), 0);
        uint64_t *seqs = lease.seqs;
        size_t nseqs = lease.nseqs;
        bool end = lease.end;
        repeats += t->pending && nseqs > 0;
        harness_commit(&h);
        /* A repeat plans nothing new: the lease it answers with was journaled before. */
        if (t->pending) {
            for (size_t i = before; i < h.record.n; i++)
                assert_int_not_equal(h.record.v[i].type, ST_SPLITS_LEASED);
        }
        if (harness_pick(&x, 3) == 0) {
            lost++;
            t->pending = true;
            free(seqs);
            continue;
        }
        for (size_t i = 0; i < t->nfin; i++)
            finished_by[t->fin[i]] = (uint8_t)t->id;
        t->pending = false;
        t->ended = end;
        /* Everything leased is run before the next request, which reports it. */
        assert_true(nseqs <= 64);
        for (size_t i = 0; i < nseqs; i++) {
            assert_int_equal(finished_by[seqs[i]], 0);
            t->fin[i] = seqs[i];
        }
        t->nfin = nseqs;
        free(seqs);
    }
    assert_true(tasks[0].ended && tasks[1].ended);
    assert_true(lost >= 8);
    assert_true(repeats >= 5);
    const struct st_iteration *it = state_iteration(&h.s, 1);
    assert_int_equal(it->splits_finished, 40);
    assert_int_equal(it->splits_leased, 0);
    for (size_t i = 0; i < 40; i++)
        assert_true(finished_by[i] == 1 || finished_by[i] == 2);
    /* The record holds every split finished exactly once, by the task it was leased to. */
    uint8_t leased_to[40] = {0}, finishes[40] = {0};
    for (size_t i = 0; i < h.record.n; i++) {
        const struct st_update *u = &h.record.v[i];
        for (size_t k = 0; k < u->seqs.n && u->type == ST_SPLITS_LEASED; k++)
            leased_to[u->seqs.v[k]] = (uint8_t)u->ref2;
        for (size_t k = 0; k < u->seqs.n && u->type == ST_SPLITS_FINISHED; k++) {
            assert_int_equal(leased_to[u->seqs.v[k]], u->ref2);
            finishes[u->seqs.v[k]]++;
        }
    }
    for (size_t i = 0; i < 40; i++)
        assert_int_equal(finishes[i], 1);
    harness_release(&h);
}

/* ---- consumer-acknowledged splits ------------------------------------------------------------ */

/* DIST8 with splits in every place: 0 leased to task 1, 2 and 3 leased to task 2, 4 and 5 in the
 * pool (their task 3 went with its worker), 1 finished, 6 and 7 beyond the cursor. */
#define MIX DIST8 "splits 1 2\nsplits 2 2\nhb c:1 1\nsplits 3 2\nrm 3\nsplits 1 0 fin=1\n"
/* DIST8 with task 1 holding 0..3 from its request 1, and its worker draining. */
#define DRAIN DIST8 "splits 1 4 req=1\nhb a:1 1 drain\n"

static const struct harness_case settle_cases[] = {
    /* splits_finished */
    {"finished: a mix of places", MIX, "done 1 5,7,0,3,1,4,6,0",
     "splits_finished ref=1 seqs=[0,3,4,5]\n=>"},
    {"finished: a repeated report is a no-op", MIX "done 1 5,7,0,3,1,4,6,0", "done 1 0,3,4,5,1",
     "=>"},
    {"finished: nothing", MIX, "done 1", "=>"},
    {"finished: one seq of a task holding more", DIST8 "splits 1 4\nsplits 2 2", "done 1 2,9,2,5",
     "splits_finished ref=1 seqs=[2,5]\n=>"},
    {"finished: more seqs than a task holds", DIST8 "splits 1 1\nsplits 2 3",
     "done 1 7,6,5,4,3,2,1,0,3", "splits_finished ref=1 seqs=[0,1,2,3]\n=>"},
    {"finished: only from the pool", MIX, "done 1 4", "splits_finished ref=1 seqs=[4]\n=>"},
    {"finished: only beyond the cursor", MIX, "done 1 6,7,100", "=>"},
    {"finished: unknown iteration", MIX, "done 9 1", "error NOT_FOUND: iteration 9 not found"},
    {"finished: a parallel iteration", PAR2, "done 1 0",
     "error INVALID: iteration 1 is not a distributed_epoch iteration"},
    {"finished: a finished iteration",
     DIST2 "splits 1 4\ndone 1 0,1,2,3\nhb a:1 1 fin=1\n"
           "hb b:1 1 fin=2",
     "done 1 0", "=>"},
    {"finished: from the pool is not leased again", MIX "done 1 4", "splits 2 3",
     "splits_leased ref=1 ref2=2 seqs=[5,6,7]\n=> end=0 seqs=[5,6,7]"},
    {"finished: everything ends the task's requests", DIST2 "splits 1 2\nsplits 2 2",
     "done 1 3,2,1,0", "splits_finished ref=1 seqs=[0,1,2,3]\n=>"},
    {"finished: then a request ends", DIST2 "splits 1 2\nsplits 2 2\ndone 1 3,2,1,0", "splits 1 1",
     "=> end=1"},
    {"finished: the worker's own report is then a no-op", DIST2 "splits 1 2\ndone 1 0",
     "splits 1 0 fin=0,1", "splits_finished ref=1 ref2=1 seqs=[1]\n=> end=0"},

    /* get_splits_returning */
    {"returning: unstarted splits go to the pool", DRAIN, "splits 1 5 req=2 ret=3,2",
     "splits_returned ref=1 ref2=1 seqs=[2,3]\n=> end=0"},
    {"returning: seqs not held and repeats are ignored", DRAIN "splits 2 1 req=1",
     "splits 1 5 req=2 ret=3,9,4,2,3", "splits_returned ref=1 ref2=1 seqs=[2,3]\n=> end=0"},
    {"returning: nothing held to return", DRAIN, "splits 1 5 req=2 ret=7,6", "=> end=0"},
    {"returning: a seq also finished counts as finished", DRAIN, "splits 1 0 req=2 fin=2 ret=2,3",
     "splits_finished ref=1 ref2=1 seqs=[2]\nsplits_returned ref=1 ref2=1 seqs=[3]\n=> end=0"},
    {"returning: the other task leases them next", DRAIN "splits 1 5 req=2 ret=2,3",
     "splits 2 3 req=1", "splits_leased id=1 ref=1 ref2=2 seqs=[2,3,4]\n=> end=0 seqs=[2,3,4]"},
    {"returning: the retry of a lost reply plans nothing", DRAIN "splits 1 5 req=2 ret=2,3",
     "splits 1 5 req=2 ret=2,3", "=> end=0"},
    {"returning: everything held ends at once", DRAIN, "splits 1 5 req=2 ret=0,1,2,3",
     "splits_returned ref=1 ref2=1 seqs=[0,1,2,3]\n=> end=1"},
    {"returning: a non-draining task also leases", DIST8 "splits 1 4 req=1",
     "splits 1 2 req=2 ret=1",
     "splits_returned ref=1 ref2=1 seqs=[1]\nsplits_leased id=2 ref=1 ref2=1 seqs=[4,5]\n"
     "=> end=0 seqs=[4,5]"},
    {"returning: nothing is not the end while others hold splits",
     DIST8 "splits 1 4\nsplits 2 4\ndone 1 0,1,2,3", "splits 1 5 req=1 ret=", "=> end=0"},

    /* draining without returning */
    {"draining: no new splits while holding produced ones", DRAIN "splits 1 5 req=2 ret=2,3",
     "splits 1 5 req=3", "=> end=0"},
    {"draining: unnumbered request", DRAIN, "splits 1 5", "=> end=0"},
    {"draining: one produced split left", DRAIN "splits 1 5 req=2 ret=2,3\ndone 1 0",
     "splits 1 5 req=3", "=> end=0"},
    {"draining: ends once its splits are finished", DRAIN "splits 1 5 req=2 ret=2,3\ndone 1 1,0",
     "splits 1 5 req=3", "=> end=1"},
    {"draining: a repeated request gets its lease", DRAIN, "splits 1 5 req=1",
     "=> end=0 seqs=[0,1,2,3]"},
    {"draining: the pool is not leased to it", DRAIN "splits 2 2\nback 2", "splits 1 5 req=2",
     "=> end=0"},

    /* return_task_splits */
    {"return: every split the task holds", DIST8 "splits 1 2\nsplits 2 1\nsplits 1 0 fin=0",
     "back 1", "splits_returned ref=1 ref2=1 seqs=[1]\n=>"},
    {"return: none held", DIST8, "back 1", "=>"},
    {"return: unknown task", DIST8, "back 9", "error NOT_FOUND: task 9 not found"},
    {"return: leased again first", DIST8 "splits 1 2\nback 1", "splits 2 3",
     "splits_leased ref=1 ref2=2 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
    {"return: then finished from the pool", DIST8 "splits 1 2\nback 1", "done 1 1,0",
     "splits_finished ref=1 seqs=[0,1]\n=>"},
    {"return: a finished task holds none", DIST2 "splits 1 4\ndone 1 0,1,2,3\nhb a:1 1 fin=1",
     "back 1", "=>"},
};

static void test_settle_plan_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(settle_cases);
}

/* Which of seqs 0..7 of the iteration state_split_finished() calls finished, as "10110000".
 * state_splits_finished_each must say the same of them, asked in any order and with repeats. */
static const char *finished_map(const struct state *s, uint64_t iteration_id, char out[9])
{
    for (uint64_t seq = 0; seq < 8; seq++)
        out[seq] = state_split_finished(s, iteration_id, seq) ? '1' : '0';
    out[8] = '\0';
    static const uint64_t ask[] = {7, 3, 0, 5, 3, 1, 6, 2, 4, 0, 100};
    bool each[sizeof ask / sizeof ask[0]];
    assert_int_equal(state_splits_finished_each(s, iteration_id, ask, 11, each), 0);
    for (size_t i = 0; i < 11; i++) {
        bool one = state_split_finished(s, iteration_id, ask[i]);
        if (each[i] != one)
            fail_msg("seq %" PRIu64 ": each says %d, one by one %d", ask[i], each[i], one);
    }
    return out;
}

/* state_splits_finished_each against state_split_finished in every place a split can be, for
 * an active, a finished, an unknown and a parallel iteration, with the tasks holding fewer and
 * more seqs than are asked about. */
static void test_splits_finished_each(void **unused)
{
    (void)unused;
    static const struct {
        const char *script;
        uint64_t iteration;
        const char *want;
    } cases[] = {
        {MIX, 1, "01000000"},
        {MIX "done 1 0,3,4", 1, "11011000"},
        {DIST8 "splits 1 4\nsplits 2 4", 1, "00000000"},
        {DIST8 "splits 1 4\nsplits 2 4\ndone 1 6,1", 1, "01000010"},
        {DIST8 "splits 1 7\ndone 1 0,1,2,3,4,5", 1, "11111100"},
        {DIST2 "splits 1 4\ndone 1 0,1,2,3\nhb a:1 1 fin=1\nhb b:1 1 fin=2", 1, "11111111"},
        {MIX, 9, "00000000"},
        {PAR2, 1, "00000000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct harness h;
        harness_init(&h);
        harness_run_script(&h, cases[i].script);
        char map[9];
        if (strcmp(finished_map(&h.s, cases[i].iteration, map), cases[i].want) != 0)
            fail_msg("case %zu: finished %s, want %s", i, map, cases[i].want);
        bool none;
        assert_int_equal(state_splits_finished_each(&h.s, cases[i].iteration, NULL, 0, &none), 0);
        harness_release(&h);
    }
}

/* Consumers' reports finish splits wherever they are: leased to either task, or in the pool. */
static void test_splits_finished_mix(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, MIX);
    char buf[512], map[9];
    assert_string_equal(harness_places(&h.s, 1, buf, sizeof buf),
                        "cursor=6 finished=1 leased=3 pool=[4,5] task1=[0] task2=[2,3]");
    assert_string_equal(finished_map(&h.s, 1, map), "01000000");
    /* An unknown iteration has no finished split. */
    assert_false(state_split_finished(&h.s, 9, 1));

    assert_string_equal(harness_run(&h, "done 1 5,7,0,3,1,4,6,0"),
                        "splits_finished ref=1 seqs=[0,3,4,5]\n=>");
    assert_string_equal(harness_places(&h.s, 1, buf, sizeof buf),
                        "cursor=6 finished=5 leased=1 pool=[] task1=[] task2=[2]");
    assert_string_equal(finished_map(&h.s, 1, map), "11011100");
    assert_int_equal(harness_replay_through_records(&h), 1);

    /* The rest: 2 from task 2, then 6 and 7 leased and finished; the tasks end and so does the
     * iteration, whose every split is then finished. */
    harness_run_script(&h, "done 1 2\nsplits 1 5\ndone 1 7,6");
    assert_string_equal(harness_places(&h.s, 1, buf, sizeof buf),
                        "cursor=8 finished=8 leased=0 pool=[] task1=[] task2=[]");
    assert_string_equal(finished_map(&h.s, 1, map), "11111111");
    assert_string_equal(harness_run(&h, "splits 2 1"), "=> end=1");
    assert_string_equal(harness_run(&h, "hb a:1 1 fin=1"), "task_finished id=1\n=> worker=1");
    assert_string_equal(harness_run(&h, "hb b:1 1 fin=2"),
                        "task_finished id=2\niteration_finished id=1\n=> worker=2");
    assert_int_equal(state_iteration(&h.s, 1)->state, ST_ITER_FINISHED);
    assert_string_equal(finished_map(&h.s, 1, map), "11111111");
    assert_string_equal(harness_run(&h, "done 1 0"), "=>");
    assert_int_equal(harness_replay_through_records(&h), 3);

    /* A parallel iteration has no splits; a collected one keeps none finished. */
    harness_run_script(&h, "job 1 name=p");
    assert_string_equal(finished_map(&h.s, 2, map), "00000000");
    harness_run_script(&h, "job 1 name=n mode=distributed_epoch total=2\nrel 3\ngc 3");
    assert_int_equal(state_iteration(&h.s, 3)->state, ST_ITER_GC);
    assert_false(state_split_finished(&h.s, 3, 0));
    harness_release(&h);
}

/* A worker drains while it holds splits: it hands back those it never started, which another
 * task leases next, and keeps the ones it produced until consumers have received them; only then
 * does its GetSplits say end. Every split is finished exactly once and the iteration ends. */
static void test_drain_story(void **unused)
{
    (void)unused;
    static const struct harness_step steps[] = {
        {"splits 1 4 req=1", "splits_leased id=1 ref=1 ref2=1 seqs=[0,1,2,3]\n"
                             "=> end=0 seqs=[0,1,2,3]"},
        {"hb a:1 1 drain", "worker_draining id=1\n=> worker=1"},
        /* 0 and 1 were produced; 2 and 3 never started. */
        {"splits 1 4 req=2 ret=2,3", "splits_returned ref=1 ref2=1 seqs=[2,3]\n=> end=0"},
        /* Its reply was lost: the retry plans nothing more. */
        {"splits 1 4 req=2 ret=2,3", "=> end=0"},
        {"splits 2 3 req=1", "splits_leased id=1 ref=1 ref2=2 seqs=[2,3,4]\n"
                             "=> end=0 seqs=[2,3,4]"},
        {"splits 1 4 req=3", "=> end=0"},
        {"done 1 0,2", "splits_finished ref=1 seqs=[0,2]\n=>"},
        {"splits 1 4 req=4", "=> end=0"},
        {"done 1 1", "splits_finished ref=1 seqs=[1]\n=>"},
        {"splits 1 4 req=5", "=> end=1"},
        {"hb a:1 1 fin=1", "task_finished id=1\n=> worker=1"},
        {"splits 2 8 req=2", "splits_leased id=2 ref=1 ref2=2 seqs=[5,6,7]\n"
                             "=> end=0 seqs=[5,6,7]"},
        {"done 1 3,4,5,6,7", "splits_finished ref=1 seqs=[3,4,5,6,7]\n=>"},
        {"splits 2 8 req=3", "=> end=1"},
        {"hb b:1 1 fin=2", "task_finished id=2\niteration_finished id=1\n=> worker=2"},
    };
    struct harness h;
    harness_init(&h);
    harness_run_story(&h, DIST8, steps, sizeof steps / sizeof steps[0]);
    const struct st_iteration *it = state_iteration(&h.s, 1);
    assert_int_equal(it->splits_finished, 8);
    assert_int_equal(it->state, ST_ITER_FINISHED);
    harness_replay_through_records(&h);
    harness_release(&h);
}

/* A task's splits handed back after a lost reply (plan_return_task_splits) go to the pool; a
 * consumer may still report them received from there (SPLITS_FINISHED with no task), and the rest
 * are leased to the other task. The journal's encoding carries the pool finish. */
static void test_return_story(void **unused)
{
    (void)unused;
    static const struct harness_step steps[] = {
        {"splits 1 3", "splits_leased ref=1 ref2=1 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
        {"back 1", "splits_returned ref=1 ref2=1 seqs=[0,1,2]\n=>"},
        {"back 1", "=>"},
        {"done 1 1", "splits_finished ref=1 seqs=[1]\n=>"},
        {"splits 2 8", "splits_leased ref=1 ref2=2 seqs=[0,2,3,4,5,6,7]\n"
                       "=> end=0 seqs=[0,2,3,4,5,6,7]"},
        {"splits 1 8", "=> end=0"},
        {"done 1 0,1,2,3,4,5,6,7", "splits_finished ref=1 seqs=[0,2,3,4,5,6,7]\n=>"},
        {"splits 1 8", "=> end=1"},
    };
    struct harness h;
    harness_init(&h);
    harness_run_story(&h, DIST8, steps, sizeof steps / sizeof steps[0]);
    char buf[512];
    assert_string_equal(harness_places(&h.s, 1, buf, sizeof buf),
                        "cursor=8 finished=8 leased=0 pool=[] task1=[] task2=[]");
    assert_int_equal(harness_replay_through_records(&h), 2);
    harness_release(&h);
}

/* The shell plans several requests into one list before applying it, so a plan may append to a
 * list that already holds updates and must grow it. A request both reporting finished splits and
 * handing others back then gives the same updates as on an empty list. */
static void test_returning_onto_a_full_list(void **unused)
{
    (void)unused;
    for (size_t pending = 0; pending < 20; pending++) {
        struct harness h;
        harness_init(&h);
        harness_run_script(&h, DRAIN);
        for (size_t i = 0; i < pending; i++)
            assert_non_null(st_update_list_push(&h.ups, ST_CLIENT_RELEASED));
        const uint64_t fin[] = {0, 1}, ret[] = {1, 2};
        struct plan_splits_request sr = {.task_id = 1,
                                         .request_seq = 2,
                                         .finished = fin,
                                         .nfinished = 2,
                                         .returned = ret,
                                         .nreturned = 2,
                                         .max = 4};
        struct plan_splits_result lease = {.end = true};
        char err[SLUICE_ERRMSG_SIZE];
        assert_int_equal(plan_get_splits(&h.s, &sr, &lease, &h.ups, err, sizeof err), 0);
        assert_int_equal(h.ups.n, pending + 2);
        struct harness_buf b = {0};
        harness_format_update(&b, &h.ups.v[pending]);
        harness_format_update(&b, &h.ups.v[pending + 1]);
        if (strcmp(b.s, "splits_finished ref=1 ref2=1 seqs=[0,1]\n"
                        "splits_returned ref=1 ref2=1 seqs=[2]\n") != 0)
            fail_msg("with %zu updates pending:\n%s", pending, b.s);
        assert_false(lease.end); /* it still holds 3 */
        assert_int_equal(lease.nseqs, 0);
        free(lease.seqs);
        harness_release(&h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_cases),
        cmocka_unit_test(test_lost_replies),
        cmocka_unit_test(test_settle_plan_cases),
        cmocka_unit_test(test_splits_finished_mix),
        cmocka_unit_test(test_drain_story),
        cmocka_unit_test(test_return_story),
        cmocka_unit_test(test_splits_finished_each),
        cmocka_unit_test(test_returning_onto_a_full_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
