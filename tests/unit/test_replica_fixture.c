/* Dispatcher replicas under C-Raft's deterministic fixture (raft/fixture.h: simulated time,
 * network and disk, no sockets, no files): 3 and 5 servers, each with an FSM built on
 * replica_codec as replica.c builds its own (apply = replica_entry_parse + replica_entry_apply
 * into the server's state, snapshot = replica_snapshot_encode, restore =
 * replica_snapshot_decode). Random streams of valid update batches, planned by the real planners
 * (tests/lib/state_harness) against the current leader's state, go through raft_apply while
 * servers crash and come back, are cut off from the others and rejoin, and leaders are deposed;
 * snapshots are taken every few entries so that lagging servers get them installed. Each run has
 * its seed. At the end, with every server healed and caught up:
 *   - no server failed to parse or apply a committed entry;
 *   - the entries servers applied agree, index by index;
 *   - every server's state has the digest of a fresh state applying every committed entry once,
 *     in index order;
 *   - every batch whose apply callback reported success is among the committed entries, in the
 *     order it was acknowledged. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/rng.h"
#include "lib/state_harness.h"

#include "common/error.h"
#include "dispatcher/replica_codec.h"
#include "dispatcher/state.h"
#include "dispatcher/update_codec.h"

#include <raft.h>
#include <raft/fixture.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVERS_MAX 5
/* Simulated milliseconds: the longest any wait may take. */
#define WAIT_MS 5000

struct bytes {
    uint64_t index; /* the log index it was applied at; 0 in the list of acknowledged batches */
    uint8_t *p;
    size_t len;
};

struct bytes_list {
    struct bytes *v;
    size_t n, cap;
};

static void bytes_push(struct bytes_list *l, uint64_t index, const void *p, size_t len)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        assert_non_null(l->v);
    }
    struct bytes *b = &l->v[l->n++];
    b->index = index;
    b->p = malloc(len ? len : 1);
    assert_non_null(b->p);
    memcpy(b->p, p, len);
    b->len = len;
}

static void bytes_release(struct bytes_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].p);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* One replica: its state and every entry its FSM applied. */
struct server {
    struct state st;
    struct raft *raft;
    struct bytes_list applied;
    unsigned snapshots, restores;
    char failure[SLUICE_ERRMSG_SIZE]; /* the first apply that failed, or "" */
    /* See io_truncate. */
    int (*truncate)(struct raft_io *io, raft_index index);
    bool installed;
};

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    struct server *s = fsm->data;
    *result = NULL;
    /* C-Raft applies in index order and raises last_applied after each entry. */
    uint64_t index = raft_last_applied(s->raft) + 1;
    struct replica_entry e;
    char err[SLUICE_ERRMSG_SIZE];
    int rc = replica_entry_parse(buf->base, buf->len, &e, err, sizeof err);
    if (rc == 0) {
        struct state *one[1] = {&s->st};
        rc = replica_entry_apply(&e, one, 1, NULL, err, sizeof err);
    }
    if (rc != 0) {
        /* Reported when the run ends: going on keeps the run out of raft's error paths. */
        if (!s->failure[0])
            snprintf(s->failure, sizeof s->failure, "entry %" PRIu64 ": %.900s", index, err);
        return 0;
    }
    if (s->applied.n > 0 && s->applied.v[s->applied.n - 1].index >= index) {
        snprintf(s->failure, sizeof s->failure, "entry %" PRIu64 " applied after %" PRIu64, index,
                 s->applied.v[s->applied.n - 1].index);
        return RAFT_MALFORMED;
    }
    bytes_push(&s->applied, index, buf->base, buf->len);
    return 0;
}

static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    struct server *s = fsm->data;
    struct raft_buffer *b = raft_malloc(sizeof *b);
    if (!b)
        return RAFT_NOMEM;
    uint8_t *p;
    size_t len;
    if (replica_snapshot_encode(&s->st, raft_malloc, &p, &len) < 0) {
        raft_free(b);
        return RAFT_NOMEM;
    }
    b->base = p;
    b->len = len;
    *bufs = b;
    *n_bufs = 1;
    s->snapshots++;
    return 0;
}

/* Version 2: raft owns no snapshot buffer, finalize frees them once written. */
static int fsm_snapshot_finalize(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    (void)fsm;
    if (*bufs) {
        for (unsigned i = 0; i < *n_bufs; i++)
            raft_free((*bufs)[i].base);
        raft_free(*bufs);
    }
    *bufs = NULL;
    *n_bufs = 0;
    return 0;
}

/* On success the FSM owns the buffer. */
static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    struct server *s = fsm->data;
    char err[SLUICE_ERRMSG_SIZE];
    if (replica_state_restore(&s->st, buf->base, buf->len, err, sizeof err) != 0) {
        if (!s->failure[0])
            snprintf(s->failure, sizeof s->failure, "restore: %.900s", err);
        return RAFT_MALFORMED;
    }
    s->restores++;
    raft_free(buf->base);
    return 0;
}

/* The fixture's in-memory disk (libraft 0.22.1) assumes that its log starts at index 1:
 * installing a snapshot empties it (a truncation at 1), the entries that follow are kept from the
 * start of its array, and a later truncation at index i still keeps i - 1 of them, reading past
 * the array (a follower that got a snapshot, then drops an uncommitted entry of a deposed
 * leader). The fixture reads that array back only when a server loads, which never happens after
 * the start, so once a server installed a snapshot the test keeps its truncations off the array:
 * the raft instance's own log, which the test exercises, is truncated as always. */
static struct cluster *current;

static struct server *server_of_io(struct raft_io *io);

static int io_truncate(struct raft_io *io, raft_index index)
{
    struct server *s = server_of_io(io);
    if (index == 1) /* only the fixture truncates at 1, installing a snapshot */
        s->installed = true;
    else if (s->installed)
        return 0;
    return s->truncate(io, index);
}

struct request {
    struct raft_apply apply;
    struct raft_barrier barrier;
    struct cluster *c;
    uint64_t serial;
};

struct cluster {
    struct raft_fixture f;
    struct raft_fsm fsms[SERVERS_MAX];
    struct server servers[SERVERS_MAX];
    unsigned n;
    uint64_t x;            /* the run's random sequence */
    bool cut[SERVERS_MAX]; /* cut off from every other server */
    /* The request in flight (its serial) and how it ended. */
    uint64_t serial;
    bool done;
    int status;
    struct bytes_list acked; /* batches whose apply callback reported success, in order */
    uint8_t *proposed;       /* a copy of the entry in flight */
    size_t proposed_len;
    size_t proposals, commands, kills, cuts, deposes;
};

static struct server *server_of_io(struct raft_io *io)
{
    for (unsigned i = 0; i < current->n; i++)
        if (current->servers[i].raft->io == io)
            return &current->servers[i];
    fail_msg("an I/O of no server");
    return NULL;
}

static void on_apply(struct raft_apply *req, int status, void *result)
{
    (void)result;
    struct request *r = req->data;
    struct cluster *c = r->c;
    if (r->serial == c->serial) {
        c->done = true;
        c->status = status;
        if (status == 0)
            bytes_push(&c->acked, 0, c->proposed, c->proposed_len);
    }
    free(r);
}

static void on_barrier(struct raft_barrier *req, int status)
{
    struct request *r = req->data;
    struct cluster *c = r->c;
    if (r->serial == c->serial) {
        c->done = true;
        c->status = status;
    }
    free(r);
}

static bool request_done(struct raft_fixture *f, void *arg)
{
    (void)f;
    return ((struct cluster *)arg)->done;
}

static struct request *request_new(struct cluster *c)
{
    struct request *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->c = c;
    r->serial = ++c->serial;
    r->apply.data = r;
    r->barrier.data = r;
    c->done = false;
    c->status = -1;
    return r;
}

/* The fixture's servers trace every step to stderr; the test keeps quiet. */
static void trace_nothing(struct raft_tracer *t, int type, const void *info)
{
    (void)t;
    (void)type;
    (void)info;
}

static struct raft_tracer silent = {.version = 2, .emit = trace_nothing};

static void cluster_init(struct cluster *c, unsigned n, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->x = seed;
    assert_int_equal(raft_fixture_init(&c->f), 0);
    for (unsigned i = 0; i < n; i++) {
        struct server *s = &c->servers[i];
        state_init(&s->st);
        c->fsms[i] = (struct raft_fsm){.version = 2,
                                       .data = s,
                                       .apply = fsm_apply,
                                       .snapshot = fsm_snapshot,
                                       .restore = fsm_restore,
                                       .snapshot_finalize = fsm_snapshot_finalize};
        assert_int_equal(raft_fixture_grow(&c->f, &c->fsms[i]), 0);
        s->raft = raft_fixture_get(&c->f, i);
        s->raft->tracer = &silent;
        /* Snapshots every few entries, few entries kept: a server that falls behind gets one. */
        raft_set_snapshot_threshold(s->raft, 8);
        raft_set_snapshot_trailing(s->raft, 4);
        s->truncate = s->raft->io->truncate;
        s->raft->io->truncate = io_truncate;
        raft_fixture_set_randomized_election_timeout(&c->f, i,
                                                     1000 + (unsigned)(seed * 7 + i * 131) % 1000);
    }
    current = c;
    struct raft_configuration conf;
    assert_int_equal(raft_fixture_configuration(&c->f, n, &conf), 0);
    assert_int_equal(raft_fixture_bootstrap(&c->f, &conf), 0);
    raft_configuration_close(&conf);
    assert_int_equal(raft_fixture_start(&c->f), 0);
}

static void cluster_close(struct cluster *c)
{
    raft_fixture_close(&c->f);
    for (unsigned i = 0; i < c->n; i++) {
        state_release(&c->servers[i].st);
        bytes_release(&c->servers[i].applied);
    }
    bytes_release(&c->acked);
    free(c->proposed);
}

/* ---- faults ---------------------------------------------------------------------------------- */

static unsigned down_count(struct cluster *c)
{
    unsigned down = 0;
    for (unsigned i = 0; i < c->n; i++)
        down += !raft_fixture_alive(&c->f, i) || c->cut[i];
    return down;
}

static void set_cut(struct cluster *c, unsigned i, bool cut)
{
    for (unsigned j = 0; j < c->n; j++) {
        if (j == i)
            continue;
        if (cut) {
            raft_fixture_saturate(&c->f, i, j);
            raft_fixture_saturate(&c->f, j, i);
        } else if (!c->cut[j]) {
            raft_fixture_desaturate(&c->f, i, j);
            raft_fixture_desaturate(&c->f, j, i);
        }
    }
    c->cut[i] = cut;
}

/* One random fault or repair; at most a minority is down (crashed or cut off) at once, so a
 * majority can always go on. */
static void random_fault(struct cluster *c)
{
    unsigned i = (unsigned)harness_pick(&c->x, c->n);
    switch (harness_pick(&c->x, 8)) {
    case 0:
        if (raft_fixture_alive(&c->f, i) && !c->cut[i] && down_count(c) < (c->n - 1) / 2) {
            raft_fixture_kill(&c->f, i);
            c->kills++;
        }
        break;
    case 1:
    case 2:
        for (unsigned k = 0; k < c->n; k++) {
            unsigned j = (i + k) % c->n;
            if (!raft_fixture_alive(&c->f, j)) {
                raft_fixture_revive(&c->f, j);
                break;
            }
        }
        break;
    case 3:
        if (raft_fixture_alive(&c->f, i) && !c->cut[i] && down_count(c) < (c->n - 1) / 2) {
            set_cut(c, i, true);
            c->cuts++;
        }
        break;
    case 4:
    case 5:
        for (unsigned k = 0; k < c->n; k++) {
            unsigned j = (i + k) % c->n;
            if (c->cut[j]) {
                set_cut(c, j, false);
                break;
            }
        }
        break;
    case 6:
        if (c->f.leader_id != 0) {
            raft_fixture_depose(&c->f);
            c->deposes++;
        }
        break;
    default:
        break;
    }
}

static void heal(struct cluster *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        if (!raft_fixture_alive(&c->f, i))
            raft_fixture_revive(&c->f, i);
        if (c->cut[i])
            set_cut(c, i, false);
    }
}

/* ---- proposals ------------------------------------------------------------------------------- */

/* A few valid requests planned against st (a copy of the leader's state): their updates, in
 * order, appended to out. */
static void plan_batch(struct cluster *c, const struct state *st, struct st_update_list *out,
                       struct harness *h)
{
    char err[SLUICE_ERRMSG_SIZE];
    harness_init(h);
    assert_int_equal(replica_state_copy(&h->s, st, err, sizeof err), 0);
    const struct state *s = &h->s;
    size_t want = 1 + harness_pick(&c->x, 4);
    for (size_t k = 0; k < want; k++) {
        char line[256];
        uint64_t x = harness_pick(&c->x, 12);
        if (s->ndatasets == 0 || (x == 0 && s->ndatasets < 4)) {
            snprintf(line, sizeof line, "ds - def%" PRIu64, harness_pick(&c->x, 6));
        } else if (x <= 2 || s->nworkers == 0) {
            /* A worker heartbeat; now and then a new incarnation, or reporting a task finished. */
            uint64_t w = harness_pick(&c->x, 4);
            char addr[32];
            snprintf(addr, sizeof addr, "w%" PRIu64 ":1", w);
            const struct st_worker *wk = state_worker_by_address(s, addr);
            uint64_t inc =
                wk && harness_pick(&c->x, 6) ? wk->incarnation : 1 + harness_pick(&c->x, 3);
            int n = snprintf(line, sizeof line, "hb %s %" PRIu64, addr, inc);
            for (size_t i = 0; wk && i < s->ntasks; i++) {
                if (s->tasks[i].worker_id == wk->id && !s->tasks[i].finished &&
                    harness_pick(&c->x, 4) == 0) {
                    snprintf(line + n, sizeof line - (size_t)n, " fin=%" PRIu64, s->tasks[i].id);
                    break;
                }
            }
        } else if (x <= 4) {
            const char *ds = s->datasets[harness_pick(&c->x, s->ndatasets)].id;
            if (harness_pick(&c->x, 3))
                snprintf(line, sizeof line, "job %s mode=distributed_epoch total=%" PRIu64, ds,
                         1 + harness_pick(&c->x, 6));
            else
                snprintf(line, sizeof line, "job %s name=j%" PRIu64, ds, harness_pick(&c->x, 3));
        } else if (x <= 8) {
            if (s->ntasks == 0)
                continue;
            const struct st_task *t = &s->tasks[harness_pick(&c->x, s->ntasks)];
            int n = snprintf(line, sizeof line, "splits %" PRIu64 " %" PRIu64, t->id,
                             1 + harness_pick(&c->x, 3));
            if (t->leased.n > 0 && harness_pick(&c->x, 2))
                snprintf(line + n, sizeof line - (size_t)n, " fin=%" PRIu64,
                         t->leased.v[harness_pick(&c->x, t->leased.n)]);
        } else if (x == 9) {
            if (s->nworkers == 0)
                continue;
            snprintf(line, sizeof line, "rm %" PRIu64,
                     s->workers[harness_pick(&c->x, s->nworkers)].id);
        } else if (x == 10) {
            if (s->nclients == 0)
                continue;
            snprintf(line, sizeof line, "rel %" PRIu64,
                     s->clients[harness_pick(&c->x, s->nclients)].id);
        } else {
            if (s->niterations == 0)
                continue;
            snprintf(line, sizeof line, "gc %" PRIu64,
                     s->iterations[harness_pick(&c->x, s->niterations)].id);
        }
        harness_run(h, line); /* refusals plan nothing */
    }
    *out = h->record;
}

/* Steps until there is a leader whose state holds every entry of its log (a barrier of its own
 * applied). Returns its index, or c->n when none came within the bound. */
static unsigned settled_leader(struct cluster *c)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        if (!raft_fixture_step_until_has_leader(&c->f, WAIT_MS))
            return c->n;
        unsigned l = raft_fixture_leader_index(&c->f);
        struct request *r = request_new(c);
        if (raft_barrier(raft_fixture_get(&c->f, l), &r->barrier, on_barrier) != 0) {
            free(r);
            raft_fixture_step_n(&c->f, 10);
            continue;
        }
        raft_fixture_step_until(&c->f, request_done, c, WAIT_MS);
        if (c->done && c->status == 0 && raft_fixture_leader_index(&c->f) == l &&
            raft_last_applied(c->servers[l].raft) == raft_last_index(c->servers[l].raft))
            return l;
    }
    return c->n;
}

/* Plans a batch against the leader's state and proposes it, stepping with faults meanwhile. */
static void propose(struct cluster *c)
{
    unsigned l = settled_leader(c);
    if (l == c->n)
        return;
    struct harness h;
    struct st_update_list ups;
    plan_batch(c, &c->servers[l].st, &ups, &h);
    if (ups.n == 0) {
        harness_release(&h);
        return;
    }
    struct replica_record *recs = calloc(ups.n, sizeof *recs);
    uint8_t **enc = calloc(ups.n, sizeof *enc);
    assert_true(recs && enc);
    for (size_t i = 0; i < ups.n; i++) {
        size_t len;
        assert_int_equal(update_codec_encode(&ups.v[i], &enc[i], &len), 0);
        recs[i] = (struct replica_record){enc[i], len};
    }
    struct raft *raft = c->servers[l].raft;
    char rpc[32];
    snprintf(rpc, sizeof rpc, "r%u:7001", l + 1);
    uint8_t *p;
    size_t len;
    assert_int_equal(replica_entry_encode(raft->id, raft_current_term(raft), rpc, recs, ups.n,
                                          raft_malloc, &p, &len),
                     0);
    free(c->proposed);
    c->proposed = malloc(len);
    assert_non_null(c->proposed);
    memcpy(c->proposed, p, len);
    c->proposed_len = len;
    for (size_t i = 0; i < ups.n; i++)
        free(enc[i]);
    free(enc);
    free(recs);
    c->commands += ups.n;
    harness_release(&h);

    struct request *r = request_new(c);
    struct raft_buffer buf = {p, len};
    if (raft_apply(raft, &r->apply, &buf, 1, on_apply) != 0) {
        /* raft_apply() frees a refused entry's buffer. */
        free(r);
        return;
    }
    c->proposals++;
    /* Some steps, maybe a fault while the entry replicates, then wait for it (bounded). */
    raft_fixture_step_n(&c->f, 1 + (unsigned)harness_pick(&c->x, 30)); /* n 0 would wrap */
    if (harness_pick(&c->x, 3) == 0)
        random_fault(c);
    raft_fixture_step_until(&c->f, request_done, c, WAIT_MS);
}

/* ---- checks ---------------------------------------------------------------------------------- */

static bool all_applied(struct raft_fixture *f, void *arg)
{
    struct cluster *c = arg;
    if (f->leader_id == 0)
        return false;
    raft_index want = raft_last_applied(raft_fixture_get(f, raft_fixture_leader_index(f)));
    for (unsigned i = 0; i < c->n; i++)
        if (raft_last_applied(raft_fixture_get(f, i)) < want)
            return false;
    return true;
}

static int by_index(const void *a, const void *b)
{
    const struct bytes *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

static void check(struct cluster *c)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->servers[i].failure[0])
            fail_msg("server %u: %s", i + 1, c->servers[i].failure);
    /* Every entry any server applied, once per index; servers agree on each. */
    struct bytes_list all = {0};
    for (unsigned i = 0; i < c->n; i++)
        for (size_t k = 0; k < c->servers[i].applied.n; k++) {
            const struct bytes *b = &c->servers[i].applied.v[k];
            bytes_push(&all, b->index, b->p, b->len);
        }
    qsort(all.v, all.n, sizeof *all.v, by_index);
    size_t w = 0;
    for (size_t k = 0; k < all.n; k++) {
        if (w > 0 && all.v[w - 1].index == all.v[k].index) {
            if (all.v[w - 1].len != all.v[k].len ||
                memcmp(all.v[w - 1].p, all.v[k].p, all.v[k].len) != 0)
                fail_msg("servers applied different entries at index %" PRIu64, all.v[k].index);
            free(all.v[k].p);
            continue;
        }
        all.v[w++] = all.v[k];
    }
    all.n = w;
    /* The model: a fresh state applying every committed entry once, in order. */
    struct state model;
    state_init(&model);
    char err[SLUICE_ERRMSG_SIZE];
    for (size_t k = 0; k < all.n; k++) {
        struct replica_entry e;
        assert_int_equal(replica_entry_parse(all.v[k].p, all.v[k].len, &e, err, sizeof err), 0);
        struct state *one[1] = {&model};
        if (replica_entry_apply(&e, one, 1, NULL, err, sizeof err) != 0)
            fail_msg("entry %" PRIu64 ": %s", all.v[k].index, err);
    }
    harness_check_invariants(&model);
    uint64_t digest = state_digest(&model);
    for (unsigned i = 0; i < c->n; i++) {
        if (state_digest(&c->servers[i].st) != digest)
            fail_msg("server %u (applied %" PRIu64 ", %u restores): digest differs from the model",
                     i + 1, (uint64_t)raft_last_applied(c->servers[i].raft),
                     c->servers[i].restores);
        harness_check_invariants(&c->servers[i].st);
    }
    /* Every acknowledged batch was committed, in the order acknowledged. */
    size_t k = 0;
    for (size_t a = 0; a < c->acked.n; a++) {
        const struct bytes *b = &c->acked.v[a];
        while (k < all.n && (all.v[k].len != b->len || memcmp(all.v[k].p, b->p, b->len) != 0))
            k++;
        if (k == all.n)
            fail_msg("acknowledged batch %zu of %zu is not committed", a + 1, c->acked.n);
        k++;
    }
    state_release(&model);
    bytes_release(&all);
}

struct totals {
    size_t runs, proposals, acked, commands, kills, cuts, deposes, snapshots, restores;
};

static void run(unsigned n, uint64_t seed, unsigned rounds, struct totals *t)
{
    struct cluster *c = malloc(sizeof *c);
    assert_non_null(c);
    cluster_init(c, n, seed);
    assert_true(raft_fixture_step_until_has_leader(&c->f, WAIT_MS));
    for (unsigned round = 0; round < rounds; round++) {
        if (harness_pick(&c->x, 4) == 0)
            random_fault(c);
        propose(c);
    }
    heal(c);
    unsigned l = settled_leader(c);
    if (l == c->n)
        fail_msg("seed %" PRIu64 ": no leader after healing", seed);
    if (!raft_fixture_step_until(&c->f, all_applied, c, 4 * WAIT_MS))
        fail_msg("seed %" PRIu64 ": servers did not catch up", seed);
    check(c);
    if (getenv("REPLICA_FIXTURE_VERBOSE"))
        fprintf(stderr,
                "seed %" PRIu64 ": time %llu, %zu proposals, %zu acked, %zu kills, %zu cuts, %zu "
                "deposes, index %llu, %u+%u snapshots, %u+%u restores\n",
                seed, (unsigned long long)raft_fixture_time(&c->f), c->proposals, c->acked.n,
                c->kills, c->cuts, c->deposes,
                (unsigned long long)raft_last_applied(c->servers[0].raft), c->servers[0].snapshots,
                c->servers[1].snapshots, c->servers[0].restores, c->servers[1].restores);
    t->runs++;
    t->proposals += c->proposals;
    t->acked += c->acked.n;
    t->commands += c->commands;
    t->kills += c->kills;
    t->cuts += c->cuts;
    t->deposes += c->deposes;
    for (unsigned i = 0; i < n; i++) {
        t->snapshots += c->servers[i].snapshots;
        t->restores += c->servers[i].restores;
    }
    cluster_close(c);
    free(c);
}

static void check_exercised(const struct totals *t)
{
    /* Each kind of trouble happened, and most batches still went through. */
    assert_true(t->kills > 0 && t->cuts > 0 && t->deposes > 0);
    assert_true(t->snapshots > 0 && t->restores > 0);
    assert_true(t->acked > t->proposals / 2);
    assert_true(t->commands > 100 * t->runs);
}

static void test_three(void **unused)
{
    (void)unused;
    struct totals t = {0};
    for (uint64_t seed = 1; seed <= 4; seed++)
        run(3, seed * 0x9e3779b97f4a7c15u, 120, &t);
    check_exercised(&t);
}

static void test_five(void **unused)
{
    (void)unused;
    struct totals t = {0};
    for (uint64_t seed = 11; seed <= 13; seed++)
        run(5, seed * 0x9e3779b97f4a7c15u, 120, &t);
    check_exercised(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three),
        cmocka_unit_test(test_five),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
