/* The dispatcher core's test harness: a small command script that drives the planners (plan.h)
 * against a state, applies what they plan, and prints the updates, so that a test states each
 * planner's exact updates and refusals as text; the invariants state.h promises, checked after
 * every apply; replay of what was applied through the journal's encoding, and snapshots. Pure
 * like the core: the core tests (CORE_TESTS) link it (sluice_test_state). Test failures are
 * cmocka failures; nothing here returns an error. */
#ifndef SLUICE_TESTS_LIB_STATE_HARNESS_H
#define SLUICE_TESTS_LIB_STATE_HARNESS_H

#include "dispatcher/plan.h"
#include "dispatcher/state.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- setups shared by the tests -------------------------------------------------------------- */

/* A distributed job (dataset 1, job 1, iteration 1, client 1) with tasks 1 and 2 on workers 1
 * (a:1) and 2 (b:1), and four splits. */
#define DIST2 "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=4\n"
/* The same job deterministic. */
#define DET2 "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=4 det\n"
/* The same with a parallel_epochs job. */
#define PAR2 "ds - r4\nhb a:1 1\nhb b:1 1\njob 1\n"
/* A coordinated job of two consumers (clients 1 and 2) over tasks 1 and 2, whose first rounds
 * (64) are granted. */
#define COORD2                                                                                     \
    "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 name=c consumers=2\njob 1 name=c consumers=2\n"            \
    "chb 1 window=64\n"
/* A distributed job with tasks 1 (worker 1, a:1) and 2 (worker 2, b:1) and eight splits. */
#define DIST8 "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=8\n"

/* ---- formatting updates ---------------------------------------------------------------------- */

struct harness_buf {
    char s[16384];
    size_t n;
};

/* Appends to b; fails the test when b is full. */
void harness_printf(struct harness_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* One line per update: its type, then every field that is set, in a fixed order
 * ("splits_leased id=1 ref=1 ref2=1 seqs=[0,1]\n"). */
void harness_format_update(struct harness_buf *b, const struct st_update *u);

/* ---- the script harness ---------------------------------------------------------------------- */

/* Commands, one per line, words separated by spaces:
 *   ds ID DEF [comp=N] [split=N]          register (ID "-" asks for a generated id; DEF is both
 *                                         the definition bytes and the text)
 *   job DATASET [name=N] [mode=M] [consumers=N] [total=N|inf] [paths=a,b] [ends]
 *                                         get or create a job; total gives a split plan of
 *                                         total one-element splits (inf: 2 per pass, forever);
 *                                         ends: the dataset's pipeline is finite
 *   hb ADDRESS INC [fin=1,2] [drain]      a worker heartbeat
 *   rm WORKER                             remove a worker
 *   splits TASK MAX [fin=1,2] [req=N] [ret=3,4] [below=N]
 *                                         get splits (request number N; default 0, unnumbered),
 *                                         handing back ret, leasing nothing from N on
 *                                         (plan_get_splits); outputs end and the seqs of the
 *                                         reply
 *   done ITERATION [1,2]                  consumers received these splits in full
 *   redo ITERATION [1,2] [tasks=1,2]      a deterministic consumer needs these splits again
 *                                         (tasks: whose productions of them it saw end)
 *   below ITERATION                       outputs state_splits_finished_below
 *   back TASK                             hand every split leased to the task back
 *   chb CLIENT [round=N] [window=N]       a client heartbeat at round N asking grants of window
 *                                         rounds; outputs the grant of a coordinated read
 *   rel CLIENT | gc ITERATION
 *   rep DATASET NAME WANT                 a repeating reader asks for repetition WANT
 *   failed WORKER TASK,... [msg=A_B]      the worker reports the tasks failed ('_' in msg is a
 *                                         space)
 *   save DATASET PATH [total=N|inf] [endless]
 *                                         start a save; saved SAVE, savefail SAVE [msg=A_B]
 *                                         finish or fail it; committed SAVE outputs its chunks
 *   waiting ITERATION                     outputs plan_iteration_waiting
 *   limits [datasets=N] [pipeline=N] [jobs=N]
 *                                         sets the state's limits (configuration; no update)
 * job also takes [owner=N], the incarnation of the sluice_client asking (default 0),
 * [target=local|auto|N] [host=H], its target workers and host, [det], [xtc=N] and
 * [resume=B-E,... [fpbad]], [sel=S] (a worker selector, '_' a space), [weight=W], [min=N] and
 * [max=N]; hb takes [labels=K=V;K=V] (the worker's labels), [slots=N] (its task slots), [host=H],
 * the worker's host (it then registers with the secret 's' * 16), or [key=K [stays]], its secret
 * (see harness_run). An argument '' is empty. A command prints its updates, one per line, then "=>
 * " and its outputs; or "error CODE: msg". */
struct harness {
    struct state s;
    struct st_update_list ups;
    struct st_update_list record; /* every update applied, in order */
    struct harness_buf out;
};

void harness_init(struct harness *h);
void harness_release(struct harness *h);

/* Applies the planned updates in h->ups (each must apply), moves them to the record and checks
 * the invariants. */
void harness_commit(struct harness *h);

/* Runs one command line and commits what it planned (a refusal must plan nothing). Returns its
 * output, valid until the next command. */
const char *harness_run(struct harness *h, const char *line);

/* Runs every line of script; each must succeed. */
void harness_run_script(struct harness *h, const char *script);

/* A table row: on a fresh harness, the setup script, then the command, whose output must be
 * exactly expect. */
struct harness_case {
    const char *name;
    const char *setup;
    const char *cmd;
    const char *expect;
};

/* Runs each case; a refusal must also leave the state as it was. */
void harness_run_cases(const struct harness_case *cases, size_t n);
/* harness_run_cases() over a whole array. */
#define HARNESS_RUN_CASES(cases) harness_run_cases((cases), sizeof(cases) / sizeof(cases)[0])

/* A step of a story: a command and its exact output. */
struct harness_step {
    const char *cmd;
    const char *expect;
};

/* Runs the setup script on h (each line must succeed), then the steps, in order. */
void harness_run_story(struct harness *h, const char *setup, const struct harness_step *steps,
                       size_t n);

/* ---- checks ---------------------------------------------------------------------------------- */

/* What state.h promises always holds after a successful apply. */
void harness_check_invariants(const struct state *s);

/* *out receives u encoded and decoded as the journal stores it (release it with
 * st_update_release); it must print as u does. */
void harness_record_copy(const struct st_update *u, struct st_update *out);

/* s survives a snapshot's encoding with the same digest and its invariants. */
void harness_check_snapshot(const struct state *s);

/* Replays h's record, encoded and decoded as the journal stores it, onto a fresh state: the same
 * digest as live; then checks a snapshot of h's state. Returns how many SPLITS_FINISHED with no
 * task (a consumer's report) the record held. */
size_t harness_replay_through_records(const struct harness *h);

/* The places of an iteration's splits, in one line into out ("cursor=6 finished=1 leased=3
 * pool=[4,5] task1=[0] task2=[2,3]"); returns out. */
const char *harness_places(const struct state *s, uint64_t iteration_id, char *out, size_t len);

/* A number below n (0 when n is 0) from the xorshift sequence in *x: randomized runs repeat
 * from their seed. */
uint64_t harness_pick(uint64_t *x, uint64_t n);

#endif
