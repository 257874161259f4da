/* Live, replayed and restored states are the same state. Random runs drive the real planning
 * functions (plan_*) the way the server shell does: every planned update is applied to the live
 * state and serialized as a journal record, and now and then the whole state is serialized as a
 * snapshot. Then, for every run:
 *   - decoding every record and applying it to an empty state gives the live state's digest
 *     after every request, and the same state at the end;
 *   - every snapshot, decoded (definitions from a datasets table built from the records, as the
 *     journal keeps them) and followed by the records after it, gives the same digests;
 *   - on every restored state the planners decide exactly what they decide live: the same split
 *     leases for every task (the cursors and pools came back exactly), the same answer to a
 *     repeated GetSplits request (each task's last request number and lease came back), the
 *     same next ids. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/rng.h"

#include "common/error.h"
#include "dispatcher/update_codec.h"
#include "dispatcher/plan.h"
#include "dispatcher/state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 2500
#define RUNS 10

static uint64_t pick(uint64_t *x, uint64_t n)
{
    return n ? rng_next(x) % n : 0;
}

struct bytes {
    uint8_t *p;
    size_t len;
};

struct snap {
    size_t at; /* records it covers */
    struct bytes b;
};

/* What the shell would have journaled. */
struct run {
    struct state live;
    struct st_update_list ups;
    struct bytes *recs;
    size_t nrecs, cap_recs;
    size_t *marks; /* records after each request */
    uint64_t *digests;
    size_t nmarks;
    struct snap *snaps;
    size_t nsnaps, cap_snaps;
    size_t leased, gcs, fails, saves, saves_over;
    size_t repeats;      /* GetSplits requests answered from a task's last lease */
    size_t repeats_held; /* those answered with splits of that lease still held */
};

/* The shell's commit: apply, then serialize, update by update. */
static void commit(struct run *r)
{
    for (size_t i = 0; i < r->ups.n; i++) {
        const struct st_update *u = &r->ups.v[i];
        assert_int_equal(state_apply(&r->live, u), 0);
        if (r->nrecs == r->cap_recs) {
            r->cap_recs = r->cap_recs ? r->cap_recs * 2 : 256;
            r->recs = realloc(r->recs, r->cap_recs * sizeof *r->recs);
            assert_non_null(r->recs);
        }
        struct bytes *b = &r->recs[r->nrecs++];
        assert_int_equal(update_codec_encode(u, &b->p, &b->len), 0);
        r->leased += u->type == ST_SPLITS_LEASED;
        r->gcs += u->type == ST_ITERATION_GC;
        r->fails += u->type == ST_ITERATION_FAILED;
        r->saves += u->type == ST_SAVE_STARTED;
        r->saves_over += u->type == ST_SAVE_FINISHED || u->type == ST_SAVE_FAILED;
    }
    st_update_list_clear(&r->ups);
}

static void random_plan(uint64_t *x, struct split_plan *p, char **paths)
{
    memset(p, 0, sizeof *p);
    p->source_len = pick(x, 12);
    p->split_size = 1 + pick(x, 3);
    p->per_pass = (p->source_len + p->split_size - 1) / p->split_size;
    uint64_t k = pick(x, 10);
    p->passes = k == 0 ? UINT64_MAX : k < 4 ? 2 : 1;
    if (pick(x, 3) == 0) {
        p->source_len = 0;
        p->per_pass = 2;
        p->paths = paths;
        p->npaths = 2;
    }
}

/* One request, planned against the live state and committed (refusals append nothing). */
static void random_request(struct run *r, uint64_t *x)
{
    static const char *const ids[] = {"", "", "", "a", "b", "7"};
    static const char *const defs[] = {"def one", "def two", "def three"};
    static const char *const names[] = {"", "", "shared", "other"};
    static const char *const addrs[] = {"w0:1", "w1:1", "w2:1", "w3:1"};
    static char p0[] = "/data/part-0", p1[] = "/data/part-1";
    char *paths[] = {p0, p1};
    const struct state *s = &r->live;
    char err[SLUICE_ERRMSG_SIZE], id[ST_ID_MAX];
    uint64_t a;
    int rc = 0;
    switch (pick(x, 13)) {
    case 0: {
        const char *def = defs[pick(x, 3)];
        rc = plan_register_dataset(s, ids[pick(x, 6)], (const uint8_t *)def, strlen(def),
                                   (int)pick(x, 2), pick(x, 2) * 4, def, id, &r->ups, err,
                                   sizeof err);
        break;
    }
    case 1:
    case 2: {
        if (s->ndatasets == 0)
            return;
        struct split_plan plan;
        random_plan(x, &plan, paths);
        if (pick(x, 5) == 0) {
            /* A save (the shell draws its iteration's secret as for any iteration). */
            static const char *const dirs[] = {"/snap/a", "/snap/b", "/snap/c"};
            rc = plan_save_start(s, s->datasets[pick(x, s->ndatasets)].id, dirs[pick(x, 3)], &plan,
                                 plan.passes == UINT64_MAX, &a, &r->ups, err, sizeof err);
            for (size_t i = 0; rc == 0 && i < r->ups.n; i++) {
                if (r->ups.v[i].type == ST_ITERATION_CREATED) {
                    r->ups.v[i].key.set = true;
                    r->ups.v[i].key.b[0] = (uint8_t)pick(x, 256);
                }
            }
            break;
        }
        enum sluice_mode mode = pick(x, 4) ? SLUICE_DISTRIBUTED_EPOCH : SLUICE_PARALLEL_EPOCHS;
        /* Some named parallel_epochs jobs with a cross-trainer cache, which the journal and
         * snapshots must carry. */
        const char *name = names[pick(x, 4)];
        uint64_t xtc = mode == SLUICE_PARALLEL_EPOCHS && name[0] && pick(x, 3) == 0 ? 4096 : 0;
        /* Readers on three hosts (one unknown), some reading local or auto (docs/reading.md "Local
         * workers"), whose hosts and targets the journal and snapshots must carry. */
        static const char *const hosts[] = {"", "h1", "h2"};
        const char *host = hosts[pick(x, 3)];
        enum sluice_target_workers target = (enum sluice_target_workers)pick(x, 3);
        uint64_t owner = pick(x, 3);
        struct plan_job_request job = {.dataset_id = s->datasets[pick(x, s->ndatasets)].id,
                                       .job_name = name,
                                       .mode = mode,
                                       .xtc_bytes = xtc,
                                       .target = target,
                                       .host = host,
                                       .endless = true,
                                       .owner = owner,
                                       .plan = &plan};
        struct plan_job_result job_ids;
        rc = plan_get_or_create_job(s, &job, &job_ids, &r->ups, err, sizeof err);
        /* The shell's part: most new iterations get a secret (the others stand for iterations
         * of an older journal), which the journal and snapshots must carry. */
        for (size_t i = 0; rc == 0 && i < r->ups.n; i++) {
            struct st_update *u = &r->ups.v[i];
            if (u->type != ST_ITERATION_CREATED || pick(x, 5) == 0)
                continue;
            u->key.set = true;
            for (size_t k = 0; k < ST_KEY_LEN; k++)
                u->key.b[k] = (uint8_t)pick(x, 256);
        }
        break;
    }
    case 3:
    case 4:
    case 5: {
        const char *addr = addrs[pick(x, 4)];
        const struct st_worker *w = state_worker_by_address(s, addr);
        uint64_t inc = w && pick(x, 10) ? w->incarnation : 1 + pick(x, 1000);
        uint64_t fin[64];
        size_t nfin = 0;
        for (size_t i = 0; w && i < s->ntasks && nfin < 64; i++) {
            if (s->tasks[i].worker_id == w->id && pick(x, 3) == 0)
                fin[nfin++] = s->tasks[i].id;
        }
        struct plan_heartbeat_request hb = {
            .address = addr, .incarnation = inc, .finished = fin, .nfinished = nfin};
        if (pick(x, 4) == 0) {
            hb.unkeyed = true;
            hb.may_replace = true;
            hb.draining = pick(x, 30) == 0;
            rc = plan_worker_heartbeat(s, &hb, &a, &r->ups, err, sizeof err);
        } else {
            /* A worker's secret follows from its incarnation here, so most heartbeats prove
             * themselves; one in eight presents a wrong one and is refused. */
            uint8_t key[ST_KEY_LEN];
            for (size_t k = 0; k < ST_KEY_LEN; k++)
                key[k] = (uint8_t)(inc >> (k % 8 * 8)) ^ (uint8_t)k;
            if (pick(x, 8) == 0)
                key[pick(x, ST_KEY_LEN)] ^= 0x80;
            /* The host follows from the address (one of two hosts, or unknown). */
            const char *host = addr[1] == '0' ? "h1" : addr[1] == '1' ? "h2" : "";
            hb.key = key;
            hb.key_len = sizeof key;
            hb.host = host;
            hb.draining = pick(x, 30) == 0;
            hb.may_replace = pick(x, 3) != 0;
            rc = plan_worker_heartbeat(s, &hb, &a, &r->ups, err, sizeof err);
        }
        /* Now and then the worker reports a task failed, as the handler plans it. */
        if (rc == 0 && w && w->incarnation == inc && pick(x, 12) == 0) {
            struct plan_task_failure f[2];
            size_t nf = 0;
            for (size_t i = 0; i < s->ntasks && nf < 2; i++) {
                if (s->tasks[i].worker_id == w->id && pick(x, 2) == 0)
                    f[nf++] = (struct plan_task_failure){s->tasks[i].id, "map(f): failed \x01"};
            }
            rc = plan_tasks_failed(s, w->id, f, nf, &r->ups, err, sizeof err);
        }
        break;
    }
    case 6:
    case 7:
    case 8:
    case 9: {
        if (s->ntasks == 0)
            return;
        const struct st_task *t = &s->tasks[pick(x, s->ntasks)];
        uint64_t fin[64];
        size_t nfin = 0;
        for (size_t i = 0; i < t->leased.n && nfin < 64; i++) {
            if (pick(x, 2) == 0)
                fin[nfin++] = t->leased.v[i];
        }
        /* Unnumbered, a newer request, or a retry of the last one (whose report was recorded
         * when it was first planned, so it reports nothing new). */
        uint64_t k = pick(x, 3);
        uint64_t req = k == 0 ? 0 : k == 1 ? t->last_request + 1 + pick(x, 2) : t->last_request;
        if (k == 2 && req != 0)
            nfin = 0;
        struct plan_splits_request sr = {.task_id = t->id,
                                         .request_seq = req,
                                         .finished = fin,
                                         .nfinished = nfin,
                                         .max = (uint32_t)pick(x, 5)};
        struct plan_splits_result lease;
        rc = plan_get_splits(s, &sr, &lease, &r->ups, err, sizeof err);
        r->repeats += rc == 0 && req != 0 && req == t->last_request;
        r->repeats_held += lease.nseqs > 0 && req != 0 && req == t->last_request;
        free(lease.seqs);
        break;
    }
    case 10:
        if (s->nworkers == 0)
            return;
        rc = plan_remove_worker(s, s->workers[pick(x, s->nworkers)].id, &r->ups, err, sizeof err);
        break;
    case 11:
        if (s->nclients == 0)
            return;
        rc = plan_release_client(s, s->clients[pick(x, s->nclients)].id, &r->ups, err, sizeof err);
        break;
    default:
        /* A running save whose iteration finished is finalized (or fails), as the shell does. */
        for (size_t i = 0; i < s->nsaves; i++) {
            const struct st_save *sv = &s->saves[i];
            const struct st_iteration *it = state_iteration(s, sv->iteration_id);
            if (sv->state != ST_SV_RUNNING || !it || (it->state != ST_ITER_FINISHED && !it->error))
                continue;
            rc = pick(x, 4)
                     ? plan_save_finished(s, sv->id, &r->ups, err, sizeof err)
                     : plan_save_failed(s, sv->id, "chunk 1: damaged", &r->ups, err, sizeof err);
            break;
        }
        if (r->ups.n > 0)
            break;
        if (s->niterations == 0)
            return;
        rc = plan_gc_iteration(s, s->iterations[pick(x, s->niterations)].id, &r->ups, err,
                               sizeof err);
        break;
    }
    if (rc < 0)
        assert_int_equal(r->ups.n, 0);
    commit(r);
}

/* The datasets table the journal would hold: every registered definition, by id. */
static int lookup(void *user, const char *id, uint8_t **def, size_t *len, char *err, size_t errlen)
{
    const struct run *r = user;
    const struct st_dataset *ds = state_dataset(&r->live, id);
    if (!ds)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "no dataset '%s'", id);
    *def = malloc(ds->def_len ? ds->def_len : 1);
    assert_non_null(*def);
    memcpy(*def, ds->def, ds->def_len);
    *len = ds->def_len;
    return 0;
}

static void apply_record(struct state *s, const struct bytes *b)
{
    struct st_update u;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(update_codec_decode(b->p, b->len, &u, err, sizeof err), 0);
    assert_int_equal(state_apply(s, &u), 0);
    st_update_release(&u);
}

/* Applies records from next up to each later mark, comparing digests at every stride-th mark
 * and at the last. */
static void replay_from(const struct run *r, struct state *s, size_t next, size_t stride,
                        uint64_t seed, const char *what)
{
    for (size_t m = 0; m < r->nmarks; m++) {
        if (r->marks[m] < next)
            continue;
        for (; next < r->marks[m]; next++)
            apply_record(s, &r->recs[next]);
        if ((m % stride == 0 || m + 1 == r->nmarks) && state_digest(s) != r->digests[m])
            fail_msg("seed %" PRIu64 ": %s differs after request %zu", seed, what, m);
    }
    assert_int_equal(next, r->nrecs);
}

/* Serializes an update list, to compare two plans byte for byte. */
static void plan_bytes(const struct st_update_list *l, struct bytes *out)
{
    size_t cap = 0;
    out->p = NULL;
    out->len = 0;
    for (size_t i = 0; i < l->n; i++) {
        uint8_t *b;
        size_t n;
        assert_int_equal(update_codec_encode(&l->v[i], &b, &n), 0);
        if (out->len + n + 8 > cap) {
            cap = (out->len + n + 8) * 2;
            out->p = realloc(out->p, cap);
            assert_non_null(out->p);
        }
        memcpy(out->p + out->len, &n, 8);
        memcpy(out->p + out->len + 8, b, n);
        out->len += n + 8;
        free(b);
    }
}

/* The planners decide the same on both states: leases for every task, and new ids. */
static void same_decisions(const struct state *a, const struct state *b)
{
    struct st_update_list la = {0}, lb = {0};
    struct bytes ba, bb;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(a->ntasks, b->ntasks);
    for (size_t i = 0; i < a->ntasks; i++) {
        const struct st_task *ta = &a->tasks[i], *tb = &b->tasks[i];
        assert_true(ta->id == tb->id && ta->last_request == tb->last_request);
        /* A retry of the last request, then a new one: the same replies. */
        for (uint64_t k = 0; k < 2; k++) {
            struct plan_splits_request qa = {.task_id = ta->id,
                                             .request_seq = ta->last_request + k,
                                             .finished = ta->leased.v,
                                             .nfinished = ta->leased.n,
                                             .max = 7},
                                       qb = qa;
            qb.task_id = tb->id;
            qb.request_seq = tb->last_request + k;
            qb.finished = tb->leased.v;
            qb.nfinished = tb->leased.n;
            struct plan_splits_result sa, sb;
            int ra = plan_get_splits(a, &qa, &sa, &la, err, sizeof err);
            int rb = plan_get_splits(b, &qb, &sb, &lb, err, sizeof err);
            assert_int_equal(ra, rb);
            assert_int_equal(sa.end, sb.end);
            assert_int_equal(sa.nseqs, sb.nseqs);
            if (sa.nseqs)
                assert_memory_equal(sa.seqs, sb.seqs, sa.nseqs * sizeof *sa.seqs);
            free(sa.seqs);
            free(sb.seqs);
        }
    }
    if (a->ndatasets > 0) {
        struct split_plan p = {.source_len = 4, .split_size = 1, .per_pass = 4, .passes = 1};
        struct plan_job_request job = {.dataset_id = a->datasets[0].id,
                                       .mode = SLUICE_DISTRIBUTED_EPOCH,
                                       .endless = true,
                                       .plan = &p};
        struct plan_job_result ia, ib;
        assert_int_equal(plan_get_or_create_job(a, &job, &ia, &la, err, sizeof err), 0);
        job.dataset_id = b->datasets[0].id;
        assert_int_equal(plan_get_or_create_job(b, &job, &ib, &lb, err, sizeof err), 0);
        assert_true(ia.job_id == ib.job_id && ia.iteration_id == ib.iteration_id &&
                    ia.client_id == ib.client_id);
    }
    plan_bytes(&la, &ba);
    plan_bytes(&lb, &bb);
    assert_int_equal(ba.len, bb.len);
    if (ba.len)
        assert_memory_equal(ba.p, bb.p, ba.len);
    free(ba.p);
    free(bb.p);
    st_update_list_release(&la);
    st_update_list_release(&lb);
}

/* Returns how many GetSplits requests repeated a task's last lease, and adds those answered with
 * splits still held to *held. */
static size_t run_one(uint64_t seed, size_t *held)
{
    struct run r;
    memset(&r, 0, sizeof r);
    state_init(&r.live);
    r.marks = calloc(STEPS, sizeof *r.marks);
    r.digests = calloc(STEPS, sizeof *r.digests);
    assert_non_null(r.marks);
    assert_non_null(r.digests);
    uint64_t x = seed;
    for (size_t step = 0; step < STEPS; step++) {
        random_request(&r, &x);
        r.marks[r.nmarks] = r.nrecs;
        r.digests[r.nmarks++] = state_digest(&r.live);
        if (pick(&x, 60) == 0) {
            if (r.nsnaps == r.cap_snaps) {
                r.cap_snaps = r.cap_snaps ? r.cap_snaps * 2 : 16;
                r.snaps = realloc(r.snaps, r.cap_snaps * sizeof *r.snaps);
                assert_non_null(r.snaps);
            }
            struct snap *sn = &r.snaps[r.nsnaps++];
            sn->at = r.nrecs;
            assert_int_equal(update_codec_snapshot_encode(&r.live, &sn->b.p, &sn->b.len), 0);
        }
    }

    /* Replayed from nothing. */
    struct state s;
    state_init(&s);
    replay_from(&r, &s, 0, 1, seed, "replay from zero");
    assert_true(state_digest(&s) == state_digest(&r.live));
    assert_true(s.applied == r.nrecs);
    same_decisions(&r.live, &s);
    state_release(&s);

    /* Restored from each snapshot, then the tail. */
    for (size_t i = 0; i < r.nsnaps; i++) {
        char err[SLUICE_ERRMSG_SIZE] = "";
        assert_int_equal(update_codec_snapshot_decode(r.snaps[i].b.p, r.snaps[i].b.len, lookup, &r,
                                                      &s, err, sizeof err),
                         0);
        assert_true(s.applied == r.snaps[i].at);
        replay_from(&r, &s, r.snaps[i].at, 25, seed, "snapshot + tail");
        assert_true(state_digest(&s) == state_digest(&r.live));
        same_decisions(&r.live, &s);
        state_release(&s);
    }

    /* The run exercised what it claims to. */
    assert_true(r.nsnaps >= 5);
    assert_true(r.leased > 50);
    assert_true(r.gcs > 0);
    assert_true(r.fails > 0);
    assert_true(r.saves > 0);
    assert_true(r.saves_over > 0);

    for (size_t i = 0; i < r.nrecs; i++)
        free(r.recs[i].p);
    for (size_t i = 0; i < r.nsnaps; i++)
        free(r.snaps[i].b.p);
    free(r.recs);
    free(r.snaps);
    free(r.marks);
    free(r.digests);
    st_update_list_release(&r.ups);
    state_release(&r.live);
    *held += r.repeats_held;
    return r.repeats;
}

static void test_live_replayed_restored(void **unused)
{
    (void)unused;
    size_t repeats = 0, held = 0;
    for (uint64_t seed = 1; seed <= RUNS; seed++)
        repeats += run_one(seed * 0x9e3779b97f4a7c15ull, &held);
    /* Retries were restored and replayed too, some with their splits still out. */
    assert_true(repeats > 20);
    assert_true(held > 10);
}

/* A snapshot of the live state restores to the same digest at every single step of a run, not
 * only at the points the random runs pick. */
static void test_snapshot_every_step(void **unused)
{
    (void)unused;
    struct run r;
    memset(&r, 0, sizeof r);
    state_init(&r.live);
    uint64_t x = 0x1234567u;
    for (size_t step = 0; step < 600; step++) {
        random_request(&r, &x);
        struct bytes b;
        struct state s;
        char err[SLUICE_ERRMSG_SIZE];
        assert_int_equal(update_codec_snapshot_encode(&r.live, &b.p, &b.len), 0);
        assert_int_equal(update_codec_snapshot_decode(b.p, b.len, lookup, &r, &s, err, sizeof err),
                         0);
        if (state_digest(&s) != state_digest(&r.live))
            fail_msg("snapshot differs after step %zu", step);
        state_release(&s);
        free(b.p);
    }
    for (size_t i = 0; i < r.nrecs; i++)
        free(r.recs[i].p);
    free(r.recs);
    st_update_list_release(&r.ups);
    state_release(&r.live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_live_replayed_restored),
        cmocka_unit_test(test_snapshot_every_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
