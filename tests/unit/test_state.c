/* The dispatcher's state machine: state_apply() refusing updates that do not fit the state
 * without changing it (and the last ids it accepts), the schedule of coordinated rounds it
 * keeps, which worker's heartbeat an update changes, and long random runs whose recorded updates,
 * replayed onto a fresh state (also through the journal's encoding), give the same digest at
 * every step, with ids that never repeat and every split of a finished iteration finished
 * exactly once; the names and the status document. The planners' own cases are in
 * test_plan_*.c (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

#include "common/error.h"
#include "common/sha256.h"
#include "dispatcher/intervals.h"
#include "dispatcher/state_internal.h"
#include "dispatcher/status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

/* A coordinated iteration's schedule as state_apply() keeps it: an epoch is replaced while its
 * start has not been granted, refused unless it starts at the grant, and the oldest ones are
 * dropped beyond ST_ROUND_EPOCHS_MAX. */
static void test_round_epochs(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nhb a:1 1\njob 1 name=c consumers=1\nhb b:1 1");
    const struct st_iteration *it = state_iteration(&h.s, 1);
    assert_int_equal(it->nepochs, 1);
    assert_int_equal(it->epochs[0].start, 0);
    assert_int_equal(it->epochs[0].tasks.n, 2);
    assert_int_equal(state_round_epoch(it, 0), 0);
    assert_int_equal(state_round_epoch(it, 1000), 0);

    /* Not at the grant, a task of another iteration, an unknown task, a grant not higher. */
    uint64_t task = 1, other = 99;
    struct st_update u = {.type = ST_ROUNDS_SCHEDULED, .ref = 1, .ref2 = 5};
    u.seqs.v = &task;
    u.seqs.n = 1;
    uint64_t before = state_digest(&h.s);
    assert_int_equal(state_apply(&h.s, &u), SLUICE_ERR_CORRUPT);
    u.ref2 = 0;
    u.seqs.v = &other;
    assert_int_equal(state_apply(&h.s, &u), SLUICE_ERR_CORRUPT);
    struct st_update g = {.type = ST_ROUNDS_GRANTED, .ref = 1, .ref2 = 0};
    assert_int_equal(state_apply(&h.s, &g), SLUICE_ERR_CORRUPT);
    assert_int_equal(state_digest(&h.s), before);

    /* Each grant and worker change adds an epoch at the grant; old ones go beyond the bound. */
    char line[128];
    for (int k = 1; k <= ST_ROUND_EPOCHS_MAX + 3; k++) {
        snprintf(line, sizeof line, "chb 1 round=%d window=10", 10 * k);
        harness_run_script(&h, line);
        snprintf(line, sizeof line, "hb w%d:1 1", k);
        harness_run_script(&h, line);
    }
    it = state_iteration(&h.s, 1);
    assert_int_equal(it->nepochs, ST_ROUND_EPOCHS_MAX);
    assert_int_equal(it->rounds_granted, 10 * (ST_ROUND_EPOCHS_MAX + 3) + 10);
    /* The epoch of the k-th worker starts at the k-th grant, 10 (k + 1); the first 4 are gone. */
    assert_int_equal(it->epochs[0].start, 10 * 5);
    assert_int_equal(it->epochs[ST_ROUND_EPOCHS_MAX - 1].start, it->rounds_granted);
    assert_int_equal(it->epochs[ST_ROUND_EPOCHS_MAX - 1].tasks.n, ST_ROUND_EPOCHS_MAX + 3 + 2);
    assert_int_equal(state_round_epoch(it, 49), -1);
    assert_int_equal(state_round_epoch(it, 50), 0);
    assert_int_equal(state_round_epoch(it, 59), 0);
    assert_int_equal(state_round_epoch(it, 60), 1);
    assert_int_equal(state_round_epoch(it, UINT64_MAX), ST_ROUND_EPOCHS_MAX - 1);
    harness_release(&h);
}

/* ---- apply refusals -------------------------------------------------------------------------- */

struct apply_case {
    const char *name;
    enum st_update_type type;
    uint64_t id, ref, ref2;
    const char *name1, *name2, *address;
    int mode;
    bool distributed;
    uint64_t seqs[4];
    size_t nseqs;
};

/* Each runs on APPLY_SETUP: task 1 holds seqs 0 and 1 from its request 3 (cursor 2 of 4), and
 * worker 3 (draining) has no task. */
#define APPLY_SETUP DIST2 "splits 1 2 req=3\nhb c:1 1 drain"

static const struct apply_case apply_cases[] = {
    {"unknown type", (enum st_update_type)99, 1},
    {"dataset again", ST_DATASET_REGISTERED, 0, 0, 0, "1"},
    {"dataset empty id", ST_DATASET_REGISTERED, 0, 0, 0, ""},
    {"dataset number does not match", ST_DATASET_REGISTERED, 5, 0, 0, "6"},
    {"job id taken", ST_JOB_CREATED, 1, 0, 0, "", "1"},
    {"job zero id", ST_JOB_CREATED, 0, 0, 0, "", "1"},
    {"job unknown dataset", ST_JOB_CREATED, 5, 0, 0, "", "7"},
    {"job bad mode", ST_JOB_CREATED, 5, 0, 0, "", "1", NULL, 9},
    {"iteration for unknown job", ST_ITERATION_CREATED, 5, 9},
    {"iteration while one is live", ST_ITERATION_CREATED, 5, 1, 0, NULL, NULL, NULL, 0, true},
    {"task id taken", ST_TASK_CREATED, 1, 1, 1},
    {"task unknown iteration", ST_TASK_CREATED, 5, 9, 1},
    {"task unknown worker", ST_TASK_CREATED, 5, 1, 9},
    {"task second on a worker", ST_TASK_CREATED, 5, 1, 1},
    {"finish unknown task", ST_TASK_FINISHED, 9},
    {"finish a task holding leases", ST_TASK_FINISHED, 1},
    {"remove unknown task", ST_TASK_REMOVED, 9},
    {"worker address taken", ST_WORKER_REGISTERED, 5, 0, 0, NULL, NULL, "a:1"},
    {"worker empty address", ST_WORKER_REGISTERED, 5, 0, 0, NULL, NULL, ""},
    {"worker removed with tasks", ST_WORKER_REMOVED, 1},
    {"worker removed unknown", ST_WORKER_REMOVED, 9},
    {"drain unknown worker", ST_WORKER_DRAINING, 9},
    {"client unknown iteration", ST_CLIENT_ACQUIRED, 5, 9},
    {"client id taken", ST_CLIENT_ACQUIRED, 1, 1},
    {"release unknown client", ST_CLIENT_RELEASED, 9},
    {"lease skipping the cursor", ST_SPLITS_LEASED, 0, 1, 2, .seqs = {3}, .nseqs = 1},
    {"lease a leased split", ST_SPLITS_LEASED, 0, 1, 2, .seqs = {1}, .nseqs = 1},
    {"lease past the end", ST_SPLITS_LEASED, 0, 1, 2, .seqs = {2, 3, 4}, .nseqs = 3},
    {"lease nothing", ST_SPLITS_LEASED, 0, 1, 2},
    {"lease to a task of another iteration", ST_SPLITS_LEASED, 0, 9, 2, .seqs = {2}, .nseqs = 1},
    {"lease out of order", ST_SPLITS_LEASED, 0, 1, 2, .seqs = {3, 2}, .nseqs = 2},
    {"lease repeating the last request number", ST_SPLITS_LEASED, 3, 1, 1, .seqs = {2}, .nseqs = 1},
    {"lease under an older request number", ST_SPLITS_LEASED, 2, 1, 1, .seqs = {2}, .nseqs = 1},
    {"lease under the last request number", ST_SPLITS_LEASED, UINT64_MAX, 1, 1, .seqs = {2},
     .nseqs = 1},
    {"finish a split not leased to the task", ST_SPLITS_FINISHED, 0, 1, 2, .seqs = {0}, .nseqs = 1},
    {"finish a split twice in one update", ST_SPLITS_FINISHED, 0, 1, 1, .seqs = {0, 0}, .nseqs = 2},
    {"return a split not leased", ST_SPLITS_RETURNED, 0, 1, 1, .seqs = {2}, .nseqs = 1},
    {"finish unknown iteration", ST_ITERATION_FINISHED, 9},
    {"gc an iteration with clients and tasks", ST_ITERATION_GC, 1},
    {"gc unknown iteration", ST_ITERATION_GC, 9},
    /* The last id would wrap its counter (the same updates with UINT64_MAX - 1 apply: see
     * test_apply_last_ids). */
    {"dataset number wraps the counter", ST_DATASET_REGISTERED, UINT64_MAX, 0, 0,
     "18446744073709551615"},
    {"job id wraps the counter", ST_JOB_CREATED, UINT64_MAX, 0, 0, "", "1"},
    {"worker id wraps the counter", ST_WORKER_REGISTERED, UINT64_MAX, 0, 0, NULL, NULL, "z:1"},
    {"client id wraps the counter", ST_CLIENT_ACQUIRED, UINT64_MAX, 1},
    {"task id wraps the counter", ST_TASK_CREATED, UINT64_MAX, 1, 3},
    {"rounds scheduled for a read that is not coordinated", ST_ROUNDS_SCHEDULED, 0, 1, 0,
     .seqs = {1}, .nseqs = 1},
    {"rounds granted to a read that is not coordinated", ST_ROUNDS_GRANTED, 0, 1, 10},
    {"rounds scheduled for an unknown iteration", ST_ROUNDS_SCHEDULED, 0, 9, 0},
    {"save without a path", ST_SAVE_STARTED, 1, 1, 1, "1"},
    {"save of an unknown iteration", ST_SAVE_STARTED, 1, 1, 9, "1"},
    {"save with the wrong id", ST_SAVE_STARTED, 2, 1, 1, "1"},
    {"save finished unknown", ST_SAVE_FINISHED, 9},
    {"save failed unknown", ST_SAVE_FAILED, 9},
};

static void test_apply_refuses(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof apply_cases / sizeof apply_cases[0]; i++) {
        const struct apply_case *c = &apply_cases[i];
        struct harness h;
        harness_init(&h);
        harness_run_script(&h, APPLY_SETUP);
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.type = c->type;
        u.id = c->id;
        u.ref = c->ref;
        u.ref2 = c->ref2;
        snprintf(u.name, sizeof u.name, "%s", c->name1 ? c->name1 : "");
        snprintf(u.name2, sizeof u.name2, "%s", c->name2 ? c->name2 : "");
        snprintf(u.address, sizeof u.address, "%s", c->address ? c->address : "");
        u.mode = c->mode;
        u.distributed = c->distributed;
        u.plan.per_pass = u.plan.passes = 1;
        u.seqs.v = (uint64_t *)c->seqs;
        u.seqs.n = c->nseqs;
        uint64_t before = state_digest(&h.s);
        int rc = state_apply(&h.s, &u);
        if (rc != SLUICE_ERR_CORRUPT)
            fail_msg("case '%s': apply returned %d", c->name, rc);
        assert_int_equal(state_digest(&h.s), before);
        harness_check_invariants(&h.s);
        harness_release(&h);
    }
}

/* The refusals of the id UINT64_MAX above are about the id alone: one less applies, and raises
 * the counter to the last value. */
static void test_apply_last_ids(void **unused)
{
    (void)unused;
    const uint64_t last = UINT64_MAX - 1;
    for (int k = 0; k < 6; k++) {
        struct harness h;
        harness_init(&h);
        harness_run_script(&h, APPLY_SETUP);
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.id = last;
        uint64_t *counter = NULL;
        uint64_t seq = 2;
        switch (k) {
        case 0:
            u.type = ST_DATASET_REGISTERED;
            snprintf(u.name, sizeof u.name, "%" PRIu64, last);
            counter = &h.s.next_dataset_id;
            break;
        case 1:
            u.type = ST_JOB_CREATED;
            snprintf(u.name2, sizeof u.name2, "1");
            counter = &h.s.next_job_id;
            break;
        case 2:
            u.type = ST_WORKER_REGISTERED;
            snprintf(u.address, sizeof u.address, "z:1");
            counter = &h.s.next_worker_id;
            break;
        case 3:
            u.type = ST_CLIENT_ACQUIRED;
            u.ref = 1;
            counter = &h.s.next_client_id;
            break;
        case 4:
            u.type = ST_TASK_CREATED;
            u.ref = 1;
            u.ref2 = 3;
            counter = &h.s.next_task_id;
            break;
        default:
            u.type = ST_SPLITS_LEASED;
            u.ref = 1;
            u.ref2 = 1;
            u.seqs.v = &seq;
            u.seqs.n = 1;
            break;
        }
        assert_int_equal(state_apply(&h.s, &u), 0);
        if (k != 1) /* a job alone has no iteration yet, which the check expects */
            harness_check_invariants(&h.s);
        if (counter)
            assert_true(*counter == UINT64_MAX);
        else
            assert_true(state_task(&h.s, 1)->last_request == last);
        harness_release(&h);
    }
}

/* ---- random runs: apply/replay equivalence, unique ids, exactly-once splits ------------------ */

/* One random planned operation; refusals are fine (they must append nothing). */
static void random_op(struct harness *h, uint64_t *x)
{
    static const char *const defs[] = {"r1", "r2", "r3"};
    static const char *const ids[] = {"-", "-", "-", "a", "b", "7"};
    static const char *const names[] = {"", "", "n", "m"};
    static const char *const addrs[] = {"w0:1", "w1:1", "w2:1", "w3:1"};
    char cmd[512];
    const struct state *s = &h->s;
    switch (harness_pick(x, 10)) {
    case 0:
        snprintf(cmd, sizeof cmd, "ds %s %s comp=%d", ids[harness_pick(x, 6)],
                 defs[harness_pick(x, 3)], (int)harness_pick(x, 2));
        break;
    case 1: {
        if (s->ndatasets == 0)
            return;
        const char *name = names[harness_pick(x, 4)];
        bool dist = harness_pick(x, 3) != 0;
        int n =
            snprintf(cmd, sizeof cmd, "job %s%s%s", s->datasets[harness_pick(x, s->ndatasets)].id,
                     *name ? " name=" : "", name);
        if (!dist && *name && harness_pick(x, 2) == 0)
            snprintf(cmd + n, sizeof cmd - (size_t)n, " consumers=2");
        else if (dist)
            snprintf(cmd + n, sizeof cmd - (size_t)n, " mode=distributed_epoch total=%d%s",
                     (int)harness_pick(x, 7), !*name && harness_pick(x, 2) == 0 ? " det" : "");
        break;
    }
    case 2:
    case 3:
    case 4: {
        /* A worker reports some of its unfinished tasks finished, or restarts. */
        const char *addr = addrs[harness_pick(x, 4)];
        const struct st_worker *w = state_worker_by_address(s, addr);
        uint64_t inc = w && harness_pick(x, 8) != 0 ? w->incarnation : 1 + harness_pick(x, 3);
        int n = snprintf(cmd, sizeof cmd, "hb %s %" PRIu64, addr, inc);
        if (w) {
            const char *sep = " fin=";
            for (size_t i = 0; i < s->ntasks && n < 400; i++) {
                if (s->tasks[i].worker_id == w->id && harness_pick(x, 3) == 0) {
                    n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, sep,
                                  s->tasks[i].id);
                    sep = ",";
                }
            }
        }
        if (harness_pick(x, 20) == 0)
            snprintf(cmd + n, sizeof cmd - (size_t)n, " drain");
        break;
    }
    case 5:
    case 6:
    case 7: {
        if (s->ntasks == 0)
            return;
        const struct st_task *t = &s->tasks[harness_pick(x, s->ntasks)];
        if (harness_pick(x, 6) == 0) {
            /* A deterministic reader asks for some of the task's splits again (refused for
             * other jobs). */
            int n = snprintf(cmd, sizeof cmd, "redo %" PRIu64 " ", t->iteration_id);
            const char *sep = "";
            for (size_t i = 0; i < t->leased.n && n < 400; i++) {
                if (harness_pick(x, 2) == 0) {
                    n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, sep,
                                  t->leased.v[i]);
                    sep = ",";
                }
            }
            if (!*sep)
                snprintf(cmd + n, sizeof cmd - (size_t)n, "0");
            break;
        }
        int n = snprintf(cmd, sizeof cmd, "splits %" PRIu64 " %d", t->id, (int)harness_pick(x, 4));
        const char *sep = " fin=";
        for (size_t i = 0; i < t->leased.n && n < 400; i++) {
            if (harness_pick(x, 2) == 0) {
                n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, sep, t->leased.v[i]);
                sep = ",";
            }
        }
        /* Unnumbered, a retry of the last request, a newer one, or a stale one (refused). */
        uint64_t k = harness_pick(x, 6), req = 0;
        if (k == 1 || k == 2)
            req = t->last_request;
        else if (k == 3 || k == 4)
            req = t->last_request + 1 + harness_pick(x, 2);
        else if (k == 5 && t->last_request > 1)
            req = t->last_request - 1;
        if (req)
            snprintf(cmd + n, sizeof cmd - (size_t)n, " req=%" PRIu64, req);
        break;
    }
    case 8:
        if (harness_pick(x, 3) == 0 && s->nclients > 0) {
            /* A consumer's progress: coordinated reads get rounds granted. */
            snprintf(cmd, sizeof cmd, "chb %" PRIu64 " round=%d window=%d",
                     s->clients[harness_pick(x, s->nclients)].id, (int)harness_pick(x, 300), 64);
        } else if (harness_pick(x, 3) == 0 && s->nworkers > 0) {
            snprintf(cmd, sizeof cmd, "rm %" PRIu64, s->workers[harness_pick(x, s->nworkers)].id);
        } else if (s->nclients > 0) {
            snprintf(cmd, sizeof cmd, "rel %" PRIu64, s->clients[harness_pick(x, s->nclients)].id);
        } else {
            return;
        }
        break;
    default:
        if (s->niterations == 0)
            return;
        snprintf(cmd, sizeof cmd, "gc %" PRIu64, s->iterations[harness_pick(x, s->niterations)].id);
        break;
    }
    harness_run(h, cmd);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void check_unique(uint64_t *v, size_t n, const char *what)
{
    qsort(v, n, sizeof *v, cmp_u64);
    for (size_t i = 1; i < n; i++) {
        if (v[i] == v[i - 1])
            fail_msg("%s id %" PRIu64 " used twice", what, v[i]);
    }
}

#define RANDOM_STEPS 3000

typedef void (*random_op_fn)(struct harness *h, uint64_t *x);

/* Returns how many splits were finished from the pool (SPLITS_FINISHED with no task). */
static size_t random_run(uint64_t seed, random_op_fn op, bool through_records)
{
    size_t from_pool = 0;
    struct harness h;
    harness_init(&h);
    uint64_t x = seed;
    size_t *marks = calloc(RANDOM_STEPS, sizeof *marks);
    uint64_t *digests = calloc(RANDOM_STEPS, sizeof *digests);
    assert_non_null(marks);
    assert_non_null(digests);
    size_t finished_iterations = 0;
    for (size_t step = 0; step < RANDOM_STEPS; step++) {
        op(&h, &x);
        marks[step] = h.record.n;
        digests[step] = state_digest(&h.s);
    }

    /* Replay onto a fresh state: the same digest after every step's updates. */
    struct state r;
    state_init(&r);
    size_t applied = 0;
    for (size_t step = 0; step < RANDOM_STEPS; step++) {
        for (; applied < marks[step]; applied++) {
            if (!through_records) {
                assert_int_equal(state_apply(&r, &h.record.v[applied]), 0);
                continue;
            }
            struct st_update copy;
            harness_record_copy(&h.record.v[applied], &copy);
            assert_int_equal(state_apply(&r, &copy), 0);
            st_update_release(&copy);
        }
        if (state_digest(&r) != digests[step])
            fail_msg("seed %" PRIu64 ": replay differs after step %zu", seed, step);
    }
    assert_int_equal(r.applied, h.record.n);
    state_release(&r);
    if (through_records)
        harness_check_snapshot(&h.s);

    /* Ids never repeat, and no split is finished twice in one iteration. */
    size_t n = h.record.n;
    uint64_t *ids[6];
    size_t nids[6] = {0};
    for (int k = 0; k < 6; k++) {
        ids[k] = malloc((n ? n : 1) * sizeof(uint64_t));
        assert_non_null(ids[k]);
    }
    uint64_t *fin = malloc(((n ? n : 1) * 8) * sizeof *fin);
    size_t nfin = 0;
    assert_non_null(fin);
    for (size_t i = 0; i < n; i++) {
        const struct st_update *u = &h.record.v[i];
        int k = u->type == ST_DATASET_REGISTERED  ? 0
                : u->type == ST_JOB_CREATED       ? 1
                : u->type == ST_ITERATION_CREATED ? 2
                : u->type == ST_TASK_CREATED      ? 3
                : u->type == ST_WORKER_REGISTERED ? 4
                : u->type == ST_CLIENT_ACQUIRED   ? 5
                                                  : -1;
        if (k == 0 && u->id == 0)
            continue;
        if (k >= 0)
            ids[k][nids[k]++] = u->id;
        if (u->type == ST_ITERATION_FINISHED)
            finished_iterations++;
        if (u->type == ST_SPLITS_FINISHED) {
            if (u->ref2 == 0)
                from_pool += u->seqs.n;
            /* iteration id in the high bits: both stay small in these runs */
            for (size_t j = 0; j < u->seqs.n; j++)
                fin[nfin++] = (u->ref << 32) | u->seqs.v[j];
        }
    }
    static const char *const kinds[] = {"dataset", "job", "iteration", "task", "worker", "client"};
    for (int k = 0; k < 6; k++) {
        check_unique(ids[k], nids[k], kinds[k]);
        free(ids[k]);
    }
    check_unique(fin, nfin, "finished split");
    free(fin);
    /* The run must exercise what it claims to. */
    assert_true(finished_iterations > 0);
    assert_true(nfin > 0);
    free(marks);
    free(digests);
    harness_release(&h);
    return from_pool;
}

/* The random runs check the digest and the invariants after every step, which costs time in
 * the size of the state: under the sanitizers (the ASan pass) a quarter of the seeds run, the
 * plain pass runs them all. */
#ifdef __SANITIZE_ADDRESS__
#define RANDOM_SEEDS 5
#define SETTLE_SEEDS 2
#else
#define RANDOM_SEEDS 20
#define SETTLE_SEEDS 8
#endif

static void test_random_replay(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= RANDOM_SEEDS; seed++)
        random_run(seed * 0x9e3779b97f4a7c15ull, random_op, false);
}

/* ---- names ----------------------------------------------------------------------------------- */

static void test_mode_names(void **unused)
{
    (void)unused;
    static const struct {
        const char *text;
        int rc;
        enum sluice_mode mode;
    } cases[] = {
        {"parallel_epochs", 0, SLUICE_PARALLEL_EPOCHS},
        {"off", 0, SLUICE_PARALLEL_EPOCHS},
        {"distributed_epoch", 0, SLUICE_DISTRIBUTED_EPOCH},
        {"dynamic", 0, SLUICE_DISTRIBUTED_EPOCH},
        {"file", 0, SLUICE_SHARD_FILE},
        {"data", 0, SLUICE_SHARD_DATA},
        {"file_or_data", 0, SLUICE_SHARD_FILE_OR_DATA},
        {"hint", 0, SLUICE_SHARD_HINT},
        {"", SLUICE_ERR_INVALID, 0},
        {"Dynamic", SLUICE_ERR_INVALID, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum sluice_mode m = (enum sluice_mode)77;
        assert_int_equal(mode_parse(cases[i].text, &m), cases[i].rc);
        if (cases[i].rc == 0)
            assert_int_equal(m, cases[i].mode);
    }
    assert_string_equal(mode_name(SLUICE_SHARD_FILE_OR_DATA), "file_or_data");
    assert_string_equal(mode_name((enum sluice_mode)42), "unknown");
    assert_string_equal(st_update_name(ST_WORKER_DRAINING), "worker_draining");
    assert_string_equal(st_update_name((enum st_update_type)0), "unknown");
}

/* ---- the status document and the shell's arithmetic ------------------------------------------ */

static void test_status_json(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nds mine r5 comp=1\nhb a:1 255\nhb b:2 1 drain\n"
                           "job 1 name=n mode=distributed_epoch total=4\njob mine\n"
                           "splits 1 3\nrm 1\nhb a:1 255\nsplits 3 1\nsplits 3 0 fin=0\n"
                           "job 1\nrel 3\ngc 3\njob 1 name=z\nrel 4\ngc 4");
    char *json = NULL;
    assert_int_equal(status_json(&h.s, &json), 0);
    assert_string_equal(
        json, "{\"workers\":["
              "{\"id\":2,\"address\":\"b:2\",\"incarnation\":\"0000000000000001\","
              "\"draining\":true,\"tasks\":[]},"
              "{\"id\":3,\"address\":\"a:1\",\"incarnation\":\"00000000000000ff\","
              "\"draining\":false,\"tasks\":[3,4]}],"
              "\"datasets\":[{\"id\":\"1\",\"pipeline\":\"r4\",\"pipeline_bytes\":2,"
              "\"pipeline_digest\":"
              "\"a2ec8adac7fd24b4b7a8edd89d06990579f6123f5724a14b47ee4bddfb2ba572\","
              "\"pipeline_truncated\":false,\"compression\":\"auto\",\"split_size\":null},"
              "{\"id\":\"mine\",\"pipeline\":\"r5\",\"pipeline_bytes\":2,"
              "\"pipeline_digest\":"
              "\"5eb242aeb68552862913d602cff36deb4cafc18a46cfdea393b4bc1c6917a669\","
              "\"pipeline_truncated\":false,\"compression\":\"none\",\"split_size\":null}],"
              "\"jobs\":["
              "{\"id\":1,\"name\":\"n\",\"dataset_id\":\"1\",\"mode\":\"distributed_epoch\","
              "\"weight\":1.0,\"min_workers\":0,\"max_workers\":0,"
              "\"iteration_id\":1,\"repetition\":0,\"state\":\"active\",\"clients\":1,"
              "\"tasks\":[{\"id\":3,\"worker\":\"a:1\",\"finished\":false}],"
              "\"splits\":{\"total\":4,\"size\":1,\"cursor\":3,\"leased\":0,\"returned\":2,"
              "\"finished\":1}},"
              "{\"id\":2,\"name\":null,\"dataset_id\":\"mine\",\"mode\":\"parallel_epochs\","
              "\"weight\":1.0,\"min_workers\":0,\"max_workers\":0,"
              "\"iteration_id\":2,\"repetition\":0,\"state\":\"active\",\"clients\":1,"
              "\"tasks\":[{\"id\":4,\"worker\":\"a:1\",\"finished\":false}]},"
              "{\"id\":4,\"name\":\"z\",\"dataset_id\":\"1\",\"mode\":\"parallel_epochs\","
              "\"weight\":1.0,\"min_workers\":0,\"max_workers\":0,"
              "\"iteration_id\":4,\"repetition\":0,\"state\":\"garbage_collected\","
              "\"clients\":0,\"tasks\":[]}]}");
    free(json);
    harness_release(&h);
}

/* A coordinated job shows its consumers, its grant and its round schedule. */
static void test_status_json_rounds(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h,
                       "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 name=c consumers=2\nchb 1 window=64\n"
                       "rm 1");
    char *json = NULL;
    assert_int_equal(status_json(&h.s, &json), 0);
    assert_non_null(strstr(json, "\"rounds\":{\"consumers\":2,\"granted\":64,\"schedule\":["
                                 "{\"from\":0,\"tasks\":[1,2]},{\"from\":64,\"tasks\":[2]}]}"));
    free(json);
    harness_release(&h);
}

/* A long pipeline text: the document carries its first STATUS_PIPELINE_PREVIEW bytes (cut before
 * a character that would be split), its length and its SHA-256, so the document's size does not
 * grow with the texts; status_dataset_json has the whole text, and refuses an unknown id. */
static void test_status_json_pipeline_preview(void **unused)
{
    (void)unused;
    struct state s;
    state_init(&s);
    /* 255 ASCII bytes, then "é" (2 bytes) across the 256-byte mark, then more. */
    enum { LEN = 100000 };
    char *text = malloc(LEN + 1);
    assert_non_null(text);
    memset(text, 'a', LEN);
    text[255] = (char)0xc3;
    text[256] = (char)0xa9;
    text[LEN] = '\0';
    char def[] = "r4";
    struct st_update u;
    memset(&u, 0, sizeof u);
    u.type = ST_DATASET_REGISTERED;
    snprintf(u.name, sizeof u.name, "big");
    u.def = (uint8_t *)def;
    u.def_len = 2;
    u.text = text;
    assert_int_equal(state_apply(&s, &u), 0);
    char digest[SHA256_HEX_LEN + 1], want[1024];
    sha256_hex(text, LEN, digest);

    char *json = NULL;
    assert_int_equal(status_json(&s, &json), 0);
    char preview[256];
    memset(preview, 'a', 255);
    preview[255] = '\0';
    snprintf(want, sizeof want,
             "\"datasets\":[{\"id\":\"big\",\"pipeline\":\"%s\",\"pipeline_bytes\":%d,"
             "\"pipeline_digest\":\"%s\",\"pipeline_truncated\":true,",
             preview, LEN, digest);
    if (strstr(json, want) == NULL)
        fail_msg("%.600s", json);
    assert_true(strlen(json) < 1024);
    free(json);

    assert_int_equal(status_dataset_json(&s, "big", &json), 0);
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    assert_non_null(root);
    json_t *ds = json_array_get(json_object_get(root, "datasets"), 0);
    assert_string_equal(json_string_value(json_object_get(ds, "pipeline")), text);
    assert_int_equal(json_integer_value(json_object_get(ds, "pipeline_bytes")), LEN);
    assert_string_equal(json_string_value(json_object_get(ds, "pipeline_digest")), digest);
    assert_true(json_is_false(json_object_get(ds, "pipeline_truncated")));
    json_decref(root);
    free(json);
    json = NULL;
    assert_int_equal(status_dataset_json(&s, "other", &json), SLUICE_ERR_NOT_FOUND);
    assert_null(json);
    free(text);
    state_release(&s);
}

/* Names that an old journal may hold (stored before names were checked) still render: status
 * escapes bytes that are not UTF-8 and control characters instead of failing. */
static void test_status_json_bad_names(void **unused)
{
    (void)unused;
    struct state s;
    state_init(&s);
    struct st_update u[5];
    memset(u, 0, sizeof u);
    char def[] = "r4", text[] = "range(4) | map(\"\xff\")", why[] = "task 1: bad \x01";
    u[0].type = ST_DATASET_REGISTERED;
    snprintf(u[0].name, sizeof u[0].name, "ds\xff\n");
    u[0].def = (uint8_t *)def;
    u[0].def_len = 2;
    u[0].text = text;
    u[1].type = ST_JOB_CREATED;
    u[1].id = 1;
    snprintf(u[1].name, sizeof u[1].name, "job\x85\xc2\x85");
    snprintf(u[1].name2, sizeof u[1].name2, "ds\xff\n");
    u[2].type = ST_ITERATION_CREATED;
    u[2].id = 1;
    u[2].ref = 1;
    u[3].type = ST_WORKER_REGISTERED;
    u[3].id = 1;
    u[3].incarnation = 1;
    snprintf(u[3].address, sizeof u[3].address, "h:1\ninfo forged");
    u[4].type = ST_ITERATION_FAILED;
    u[4].id = 1;
    u[4].text = why;
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(state_apply(&s, &u[i]), 0);
    char *json = NULL;
    assert_int_equal(status_json(&s, &json), 0);
    assert_non_null(strstr(json, "\"address\":\"h:1\\\\x0ainfo forged\""));
    assert_non_null(strstr(json, "\"id\":\"ds\\\\xff\\\\x0a\""));
    assert_non_null(strstr(json, "\"pipeline\":\"range(4) | map(\\\"\\\\xff\\\")\""));
    assert_non_null(strstr(json, "\"name\":\"job\\\\x85\\\\xc2\\\\x85\""));
    assert_non_null(strstr(json, "\"dataset_id\":\"ds\\\\xff\\\\x0a\""));
    assert_non_null(strstr(json, "\"error\":\"task 1: bad \\\\x01\""));
    assert_non_null(strstr(json, "\"state\":\"failed\""));
    free(json);
    state_release(&s);
}

static void test_heartbeat_interval(void **unused)
{
    (void)unused;
    static const uint32_t cases[][2] = {
        {1, 50}, {250, 50}, {300, 60}, {2500, 500}, {5000, 1000}, {10000, 1000}, {UINT32_MAX, 1000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(dispatcher_heartbeat_ms(cases[i][0]), cases[i][1]);
    /* The grace after a client's connection closed: {option, client timeout, grace}. The
     * default is 5 s, never past the timeout, never under two heartbeat intervals. */
    static const uint32_t grace[][3] = {
        {0, 30000, 5000},      {0, 2000, 2000},      {0, 900, 900},
        {1000, 30000, 2000},   {2000, 120000, 2000}, {7000, 30000, 7000},
        {60000, 30000, 30000}, {1, 250, 100},        {UINT32_MAX, 30000, UINT32_MAX},
    };
    for (size_t i = 0; i < sizeof grace / sizeof grace[0]; i++)
        assert_int_equal(dispatcher_disconnect_grace_ms(grace[i][0], grace[i][1]), grace[i][2]);
}

/* ---- which worker an update concerns, pool finishes ----------------------------------------- */

/* Which worker's heartbeat reply each update changes: the shell lets a heartbeat that changes
 * nothing answer once those are durable (st_update_worker). */
static void test_update_worker(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, DIST8);
    const struct st_task *t2 = state_task(&h.s, 2);
    assert_non_null(t2);
    uint64_t w2 = t2->worker_id;
    assert_true(w2 != 0);
    static const struct {
        enum st_update_type type;
        uint64_t id, ref, ref2;
        bool of_task2; /* the answer is task 2's worker */
        uint64_t want;
    } cases[] = {
        {ST_TASK_CREATED, 9, 1, 2, false, 2},      {ST_TASK_FINISHED, 2, 0, 0, true, 0},
        {ST_TASK_REMOVED, 2, 1, 0, true, 0},       {ST_TASK_REMOVED, 77, 1, 0, false, 0},
        {ST_WORKER_REGISTERED, 5, 0, 0, false, 5}, {ST_WORKER_REMOVED, 1, 0, 0, false, 1},
        {ST_WORKER_DRAINING, 2, 0, 0, false, 2},   {ST_SPLITS_LEASED, 1, 1, 1, false, 0},
        {ST_SPLITS_FINISHED, 0, 1, 1, false, 0},   {ST_SPLITS_RETURNED, 0, 1, 1, false, 0},
        {ST_ITERATION_CREATED, 3, 1, 0, false, 0}, {ST_ITERATION_FINISHED, 1, 0, 0, false, 0},
        {ST_ITERATION_GC, 1, 0, 0, false, 0},      {ST_ITERATION_FAILED, 1, 0, 0, false, 0},
        {ST_CLIENT_ACQUIRED, 4, 1, 0, false, 0},   {ST_CLIENT_RELEASED, 4, 0, 0, false, 0},
        {ST_JOB_CREATED, 2, 0, 0, false, 0},       {ST_DATASET_REGISTERED, 0, 0, 0, false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.type = cases[i].type;
        u.id = cases[i].id;
        u.ref = cases[i].ref;
        u.ref2 = cases[i].ref2;
        uint64_t want = cases[i].of_task2 ? w2 : cases[i].want;
        if (st_update_worker(&h.s, &u) != want)
            fail_msg("case %zu (%s): worker %" PRIu64 ", want %" PRIu64, i, st_update_name(u.type),
                     st_update_worker(&h.s, &u), want);
    }
    harness_release(&h);
}

/* SPLITS_FINISHED with no task names splits of a distributed iteration that are in its pool or
 * leased to one of its tasks, sorted, at least one; anything else is refused and changes nothing.
 */
static void test_finished_anywhere_apply(void **unused)
{
    (void)unused;
    static const struct {
        const char *name;
        enum st_update_type type;
        uint64_t ref;
        uint64_t seqs[3];
        size_t nseqs;
        int rc;
        const char *places; /* after a successful apply */
    } cases[] = {
        {"a seq beyond the cursor", ST_SPLITS_FINISHED, 1, {7}, 1, SLUICE_ERR_CORRUPT, NULL},
        {"one of two beyond the cursor",
         ST_SPLITS_FINISHED,
         1,
         {0, 3},
         2,
         SLUICE_ERR_CORRUPT,
         NULL},
        {"unsorted", ST_SPLITS_FINISHED, 1, {1, 0}, 2, SLUICE_ERR_CORRUPT, NULL},
        {"repeated", ST_SPLITS_FINISHED, 1, {0, 0}, 2, SLUICE_ERR_CORRUPT, NULL},
        {"repeated held", ST_SPLITS_FINISHED, 1, {2, 2}, 2, SLUICE_ERR_CORRUPT, NULL},
        {"empty", ST_SPLITS_FINISHED, 1, {0}, 0, SLUICE_ERR_CORRUPT, NULL},
        {"unknown iteration", ST_SPLITS_FINISHED, 9, {0}, 1, SLUICE_ERR_CORRUPT, NULL},
        {"a parallel iteration", ST_SPLITS_FINISHED, 2, {0}, 1, SLUICE_ERR_CORRUPT, NULL},
        {"returning to no task", ST_SPLITS_RETURNED, 1, {0}, 1, SLUICE_ERR_CORRUPT, NULL},
        {"leasing to no task", ST_SPLITS_LEASED, 1, {0}, 1, SLUICE_ERR_CORRUPT, NULL},
        {"both pool entries",
         ST_SPLITS_FINISHED,
         1,
         {0, 1},
         2,
         0,
         "cursor=3 finished=2 leased=1 pool=[] task1=[] task2=[2]"},
        {"one pool entry",
         ST_SPLITS_FINISHED,
         1,
         {1},
         1,
         0,
         "cursor=3 finished=1 leased=1 pool=[0] task1=[] task2=[2]"},
        {"a leased seq",
         ST_SPLITS_FINISHED,
         1,
         {2},
         1,
         0,
         "cursor=3 finished=1 leased=0 pool=[0,1] task1=[] task2=[]"},
        {"pool and leased",
         ST_SPLITS_FINISHED,
         1,
         {0, 1, 2},
         3,
         0,
         "cursor=3 finished=3 leased=0 pool=[] task1=[] task2=[]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct harness h;
        harness_init(&h);
        /* Iteration 1 (distributed) has 0 and 1 in its pool and 2 leased to task 2; iteration 2
         * is parallel. */
        harness_run_script(&h, DIST8 "splits 1 2\nsplits 2 1\nback 1\njob 1");
        char buf[256];
        assert_string_equal(harness_places(&h.s, 1, buf, sizeof buf),
                            "cursor=3 finished=0 leased=1 pool=[0,1] task1=[] task2=[2]");
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.type = cases[i].type;
        u.ref = cases[i].ref;
        u.seqs.v = (uint64_t *)cases[i].seqs;
        u.seqs.n = cases[i].nseqs;
        uint64_t before = state_digest(&h.s);
        int rc = state_apply(&h.s, &u);
        if (rc != cases[i].rc)
            fail_msg("case '%s': apply returned %d", cases[i].name, rc);
        if (rc != 0) {
            assert_int_equal(state_digest(&h.s), before);
        } else {
            assert_string_equal(harness_places(&h.s, 1, buf, sizeof buf), cases[i].places);
            for (size_t k = 0; k < cases[i].nseqs; k++)
                assert_true(state_split_finished(&h.s, 1, cases[i].seqs[k]));
        }
        harness_check_invariants(&h.s);
        harness_release(&h);
    }
}

/* random_op, plus consumers' reports, returned task splits, and draining workers handing back
 * what they never started. */
static void random_settle_op(struct harness *h, uint64_t *x)
{
    const struct state *s = &h->s;
    char cmd[512];
    int n;
    switch (harness_pick(x, 12)) {
    case 0:
    case 1:
    case 2: {
        /* A consumer heartbeat finishing a few splits, some of them anywhere. */
        if (s->niterations == 0)
            return;
        const struct st_iteration *it = &s->iterations[harness_pick(x, s->niterations)];
        n = snprintf(cmd, sizeof cmd, "done %" PRIu64, it->id);
        const char *sep = " ";
        for (uint64_t k = harness_pick(x, 5); k > 0 && n < 400; k--) {
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, sep,
                          harness_pick(x, it->split_cursor + 2));
            sep = ",";
        }
        break;
    }
    case 3: {
        if (s->ntasks == 0)
            return;
        snprintf(cmd, sizeof cmd, "back %" PRIu64, s->tasks[harness_pick(x, s->ntasks)].id);
        break;
    }
    case 4: {
        if (s->nworkers == 0)
            return;
        const struct st_worker *w = &s->workers[harness_pick(x, s->nworkers)];
        snprintf(cmd, sizeof cmd, "hb %s %" PRIu64 " drain", w->address, w->incarnation);
        break;
    }
    case 5:
    case 6: {
        /* A request handing back some of the task's splits (and a stray seq), reporting others
         * finished, as the next of its numbers. */
        if (s->ntasks == 0)
            return;
        const struct st_task *t = &s->tasks[harness_pick(x, s->ntasks)];
        n = snprintf(cmd, sizeof cmd, "splits %" PRIu64 " %d req=%" PRIu64, t->id,
                     (int)harness_pick(x, 4), t->last_request + 1);
        const char *fsep = " fin=", *rsep = " ret=";
        char rets[256] = "";
        size_t rn = 0;
        for (size_t i = 0; i < t->leased.n && n < 300 && rn < 200; i++) {
            uint64_t k = harness_pick(x, 4);
            if (k == 0) {
                n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, fsep, t->leased.v[i]);
                fsep = ",";
            } else if (k == 1) {
                rn += (size_t)snprintf(rets + rn, sizeof rets - rn, "%s%" PRIu64, rsep,
                                       t->leased.v[i]);
                rsep = ",";
            }
        }
        if (harness_pick(x, 4) == 0)
            rn += (size_t)snprintf(rets + rn, sizeof rets - rn, "%s%" PRIu64, rsep,
                                   harness_pick(x, 9));
        snprintf(cmd + n, sizeof cmd - (size_t)n, "%s", rets);
        break;
    }
    default:
        random_op(h, x);
        return;
    }
    harness_run(h, cmd);
}

/* Long random runs with the new operations: replayed through the journal's encoding, the same
 * digest at every step, every split finished once, and snapshots that decode to the same state. */
static void test_random_settle_replay(void **unused)
{
    (void)unused;
    size_t from_pool = 0;
    for (uint64_t seed = 1; seed <= SETTLE_SEEDS; seed++)
        from_pool += random_run(seed * 0xc2b2ae3d27d4eb4full, random_settle_op, true);
    /* The runs must finish splits from the pool, not only from tasks. */
    assert_true(from_pool >= SETTLE_SEEDS);
}

/* state_row_find and state_row_insert against a linear search, on tables whose ids are dense,
 * dense with holes, sparse, and huge: every id present is found at its row, every id absent
 * is not, and inserting keeps the rows sorted. */
struct row {
    uint64_t id;
    uint64_t pad[3];
};

static void test_row_search(void **unused)
{
    (void)unused;
    srand(7);
    enum { N = 600 };
    struct row *rows = calloc(N + 1, sizeof *rows);
    assert_non_null(rows);
    for (int shape = 0; shape < 5; shape++) {
        for (int round = 0; round < 20; round++) {
            size_t n = 0;
            uint64_t id = shape == 4 ? UINT64_MAX - 5 * N : (uint64_t)(rand() % 50) + 1;
            for (size_t i = 0; i < N; i++) {
                uint64_t step = shape == 0   ? 1                             /* dense */
                                : shape == 1 ? (rand() % 10 == 0 ? 30 : 1)   /* holes */
                                : shape == 2 ? (uint64_t)(rand() % 1000) + 1 /* sparse */
                                : shape == 3 ? (i < N / 2 ? 1 : 1000000)     /* two parts */
                                             : (uint64_t)(rand() % 3) + 1;   /* near max */
                id += step;
                rows[n++].id = id;
            }
            size_t len = (size_t)(rand() % N);
            uint64_t top = rows[N - 1].id;
            for (int probe = 0; probe < 400; probe++) {
                uint64_t want = probe < 200 && len
                                    ? rows[rand() % len].id
                                    : (uint64_t)rand() % (top + 3 > top ? top + 3 : top);
                if (shape == 4 && probe >= 200)
                    want = top - (uint64_t)(rand() % (6 * N));
                struct row *exp = NULL;
                for (size_t i = 0; i < len; i++) {
                    if (rows[i].id == want)
                        exp = &rows[i];
                }
                assert_ptr_equal(state_row_find(rows, len, sizeof *rows, want), exp);
            }
            /* An insert of an absent id lands in order. */
            uint64_t add = len ? rows[len - 1].id / 2 + 1 : 5;
            if (!state_row_find(rows, len, sizeof *rows, add)) {
                size_t n2 = len;
                state_row_insert(rows, &n2, sizeof *rows, add);
                assert_int_equal(n2, len + 1);
                for (size_t i = 1; i < n2; i++)
                    assert_true(rows[i - 1].id < rows[i].id);
                assert_non_null(state_row_find(rows, n2, sizeof *rows, add));
            }
        }
    }
    free(rows);
}

/* An iteration's tasks_sum, the digest by which a reader holding the task list is told it is
 * unchanged, differs for different lists. The drill's case: tasks 1, 4 and 5 listed, workers 1
 * and 4 die, workers 6 and 7 join; with FNV-1a's hashes of small ids the two lists summed the
 * same, and the reader kept waiting for task 1's dead worker. */
static void test_task_list_digest(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, "ds - r4\nhb w1:1 1\nhb w2:1 1\nhb w3:1 1\n"
                           "job 1 mode=distributed_epoch total=4\n"
                           "rm 3\nrm 2\nhb w4:1 1\nhb w5:1 1");
    size_t n;
    const struct st_task_ref *refs = state_iteration_tasks(&h.s, 1, &n);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(&h.s, refs[i].task_id);
        assert_int_equal(t->id, t->worker_id);
        assert_true(t->id == 1 || t->id == 4 || t->id == 5);
    }
    uint64_t before = state_iteration(&h.s, 1)->tasks_sum;
    harness_run_script(&h, "rm 1\nrm 4\nhb w6:1 1\nhb w7:1 1");
    refs = state_iteration_tasks(&h.s, 1, &n);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_true(refs[i].task_id == 5 || refs[i].task_id == 6 || refs[i].task_id == 7);
    assert_int_not_equal(state_iteration(&h.s, 1)->tasks_sum, before);
    harness_release(&h);

    /* Every set of one or two (task, worker) pairs with ids below 24 sums to its own value. */
    enum { IDS = 24, PAIRS = (IDS - 1) * (IDS - 1) };
    uint64_t *mix = malloc(PAIRS * sizeof *mix);
    size_t nsums = PAIRS + (size_t)PAIRS * (PAIRS - 1) / 2;
    uint64_t *sums = malloc(nsums * sizeof *sums);
    assert_non_null(mix);
    assert_non_null(sums);
    size_t k = 0;
    for (uint64_t t = 1; t < IDS; t++)
        for (uint64_t w = 1; w < IDS; w++)
            mix[k++] = state_task_mix(t, w);
    k = 0;
    for (size_t i = 0; i < PAIRS; i++) {
        sums[k++] = mix[i];
        for (size_t j = i + 1; j < PAIRS; j++)
            sums[k++] = mix[i] + mix[j];
    }
    qsort(sums, nsums, sizeof *sums, cmp_u64);
    for (size_t i = 1; i < nsums; i++)
        assert_int_not_equal(sums[i - 1], sums[i]);
    free(mix);
    free(sums);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_search),
        cmocka_unit_test(test_task_list_digest),
        cmocka_unit_test(test_round_epochs),
        cmocka_unit_test(test_status_json_rounds),
        cmocka_unit_test(test_status_json_bad_names),
        cmocka_unit_test(test_status_json_pipeline_preview),
        cmocka_unit_test(test_apply_refuses),
        cmocka_unit_test(test_apply_last_ids),
        cmocka_unit_test(test_random_replay),
        cmocka_unit_test(test_mode_names),
        cmocka_unit_test(test_status_json),
        cmocka_unit_test(test_heartbeat_interval),
        cmocka_unit_test(test_update_worker),
        cmocka_unit_test(test_finished_anywhere_apply),
        cmocka_unit_test(test_random_settle_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
