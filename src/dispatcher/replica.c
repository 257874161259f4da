/* Dispatcher replicas on C-Raft (replica.h): Raft's FSM over the entries and snapshots of
 * replica_codec.h, leading and following, start and close. */
#include "replica.h"

#include "raft_transport.h"
#include "replica_codec.h"
#include "journal_thread.h"
#include "dispatcher/state.h"
#include "dispatcher/status.h"

#include "common/error.h"
#include "common/log.h"

#include "common/security.h"

#include <raft.h>
#include <raft/uv.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLUSTER_FILE "sluice-cluster"
/* Present while a replica that started from a new directory joins the group (replica.h). */
#define JOINING_FILE "sluice-joining"
#define POLL_MS 20
/* A new directory asks its peers this often until it can decide (replica_join_decide). */
#define PROBE_MS 250
#define PROBE_LOG_MS 5000
/* A membership change refused or failed is tried again after this long. */
#define CHANGE_RETRY_MS 500

struct member {
    uint64_t id;
    char raft[256];
    char rpc[256]; /* learnt from its announcements; "" until then */
    /* It said rejoin when it connected (its directory was new): the leader removes it and adds
     * it back while it is a voter; cleared once it is not. */
    bool rejoin;
    /* A new directory's probe of it: in flight, and its last answer (REPLICA_UNKNOWN: none). */
    bool probing;
    uint64_t answer;
};

struct apply_req {
    struct raft_apply req;
    struct replica *r;
    struct journal_thread *jt; /* whose batch this is; NULL for an announcement */
    bool announce;
    bool confirm; /* a leader that stalled confirms it still leads */
    bool seed;    /* the seed entry */
};

struct replica {
    struct replica_opts o; /* the strings are not kept */
    struct state *work;
    struct raft raft;
    struct raft_io io;
    struct raft_uv_transport transport;
    struct raft_fsm fsm;
    bool raft_inited, io_inited, transport_inited, started;
    uint64_t id;
    char dir[4096];
    char cluster[REPLICA_MEMBERS_MAX * 300];
    struct member members[REPLICA_MEMBERS_MAX];
    size_t nmembers;
    char rpc[256]; /* this replica's RPC address */
    struct state committed;
    /* Leading: lead_term is the term this replica leads in, from its election until it steps
     * down; serving once its announcement of that term is applied. */
    uint64_t lead_term;
    bool announcing, serving;
    uint64_t leader_changes, last_leader;
    uint64_t pending_applies; /* raft_apply requests not called back yet */
    uv_timer_t poll;
    bool poll_inited;
    /* A leader whose loop stalled longer than stall_ns (a SIGSTOP, a swap storm) may have been
     * deposed meanwhile without knowing: it serves nothing until an entry of its term commits
     * again (suspect, confirming). */
    uint64_t last_tick_ns, stall_ns;
    bool suspect, confirming;
    struct state *seed; /* opts.seed while it may still be committed */
    bool closing;
    void (*close_cb)(void *);
    void *close_user;
    struct raft_transfer transfer;
    bool transferring;
    void (*handover_cb)(void *);
    bool handover_due; /* the handover ended: handover_finish at the next poll */
    void *handover_user;
    /* A new directory: deciding (asking the peers, Raft not started), then joining (started
     * without bootstrapping, until its own configuration makes it a voter). */
    bool deciding, joining;
    uv_timer_t probe_timer;
    bool probe_inited;
    uint64_t deciding_since, last_probe_log; /* uv_now */
    /* The leader's membership change in flight (reconcile), and when the next may start. */
    struct raft_change change;
    bool changing;
    uint64_t change_after;                /* uv_now */
    char restore_err[SLUICE_ERRMSG_SIZE]; /* why the last snapshot did not restore */
};

static struct member *member_of(struct replica *r, uint64_t id)
{
    for (size_t i = 0; i < r->nmembers; i++)
        if (r->members[i].id == id)
            return &r->members[i];
    return NULL;
}

/* ---- leading and following ------------------------------------------------------------------- */

static void fatal_replica(struct replica *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fatal_replica(struct replica *r, const char *fmt, ...)
{
    char msg[SLUICE_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->o.fatal(r->o.user, msg);
}

static void step_down(struct replica *r, const char *why)
{
    if (r->lead_term == 0)
        return;
    log_warn("raft: replica %" PRIu64 " stops leading (term %" PRIu64 "): %s", r->id, r->lead_term,
             why);
    r->lead_term = 0;
    r->serving = false;
    r->announcing = false;
    r->suspect = false;
    char err[SLUICE_ERRMSG_SIZE];
    r->o.unserve(r->o.user);
    /* What this replica applied but never committed goes with its working state. */
    int rc = replica_state_copy(r->work, &r->committed, err, sizeof err);
    if (rc < 0)
        fatal_replica(r, "raft: rebuilding the state after leading: %s", err);
    /* A leader that loses its leadership while handing it over (no peer left to take it) has
     * nothing left to hand over: the stop goes on. C-Raft may still end the transfer request
     * later; on_transfer then finds no callback. */
    if (r->handover_cb)
        r->handover_due = true;
}

/* Runs the handover's callback (the stop going on) from the poll timer, never from inside one
 * of Raft's callbacks: the stop closes Raft, which must not happen under Raft's own feet. */
static void handover_finish(struct replica *r)
{
    r->handover_due = false;
    void (*cb)(void *) = r->handover_cb;
    r->handover_cb = NULL;
    if (cb)
        cb(r->handover_user);
}

static void on_apply(struct raft_apply *req, int status, void *result)
{
    (void)result;
    struct apply_req *a = req->data;
    struct replica *r = a->r;
    struct journal_thread *jt = a->jt;
    bool announce = a->announce;
    bool confirm = a->confirm;
    bool seed = a->seed;
    free(a);
    r->pending_applies--;
    if (seed) {
        if (status == 0) {
            state_release(r->seed);
            free(r->seed);
            r->seed = NULL;
        } else {
            step_down(r, raft_strerror(status));
        }
        return;
    }
    if (confirm) {
        r->confirming = false;
        if (status == 0 && r->lead_term != 0) {
            if (r->suspect)
                log_info("raft: replica %" PRIu64 " still leads after a stall", r->id);
            r->suspect = false;
        } else if (status != 0) {
            step_down(r, raft_strerror(status));
        }
        return;
    }
    if (announce) {
        r->announcing = false;
        if (status == 0 && r->lead_term != 0 && !r->closing) {
            r->serving = true;
            log_info("raft: replica %" PRIu64 " leads in term %" PRIu64 " and serves at %s", r->id,
                     r->lead_term, r->rpc);
            r->o.serve(r->o.user);
        } else if (status != 0) {
            step_down(r, raft_strerror(status));
        }
        return;
    }
    /* Stepping down first: the batch's failure then finds this replica not serving, which is
     * no fault of the dispatcher's (journal_thread's on_fail). The journal thread stays until
     * its batch in flight is done, so jt is still valid. */
    if (status != 0)
        step_down(r, raft_strerror(status));
    journal_thread_sink_done(jt, status == 0 ? 0 : SLUICE_ERR_UNAVAILABLE,
                             status == 0 ? NULL : "raft: not committed: leadership lost");
}

/* Hands an encoded entry (p, len: from raft_malloc) to Raft with a's callback; a's kind fields
 * are set by the caller. p is Raft's whatever happens, a too once this returns 0. */
static int append(struct replica *r, struct apply_req *a, uint8_t *p, size_t len)
{
    struct raft_buffer buf = {p, len};
    a->r = r;
    a->req.data = a;
    int rc = raft_apply(&r->raft, &a->req, &buf, 1, on_apply);
    if (rc != 0) {
        /* raft_apply() frees the entry's buffer when it refuses it. */
        log_debug("raft: appending an entry: %s", raft_strerror(rc));
        free(a);
        return SLUICE_ERR_UNAVAILABLE;
    }
    r->pending_applies++;
    return 0;
}

static int submit(struct replica *r, struct journal_thread *jt, const struct journal_record *recs,
                  size_t n, bool announce, bool confirm)
{
    struct apply_req *a = calloc(1, sizeof *a);
    struct replica_record *rr = malloc((n ? n : 1) * sizeof *rr);
    if (!a || !rr) {
        free(a);
        free(rr);
        return SLUICE_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        rr[i] = (struct replica_record){recs[i].data, recs[i].len};
    uint8_t *p;
    size_t len;
    int rc = replica_entry_encode(r->id, r->lead_term, r->rpc, rr, n, raft_malloc, &p, &len);
    free(rr);
    if (rc < 0) {
        free(a);
        return rc;
    }
    a->jt = jt;
    a->announce = announce;
    a->confirm = confirm;
    return append(r, a, p, len);
}

/* Commits the seed state (opts.seed) as the group's first state. */
static int submit_seed(struct replica *r)
{
    uint8_t *snap, *p;
    size_t snaplen, len;
    int rc = replica_snapshot_encode(r->seed, NULL, &snap, &snaplen);
    if (rc < 0)
        return rc;
    rc = replica_entry_encode_seed(r->id, r->lead_term, r->rpc, snap, snaplen, raft_malloc, &p,
                                   &len);
    free(snap);
    if (rc < 0)
        return rc;
    struct apply_req *a = calloc(1, sizeof *a);
    if (!a) {
        raft_free(p);
        return SLUICE_ERR_NOMEM;
    }
    a->seed = true;
    rc = append(r, a, p, len);
    if (rc == 0)
        log_info("raft: replica %" PRIu64 " commits the seed state (%zu bytes) before serving",
                 r->id, snaplen);
    return rc;
}

/* The journal_thread's sink while leading. */
int replica_sink(void *user, struct journal_thread *jt, const struct journal_record *recs, size_t n)
{
    struct replica *r = user;
    if (!r->serving)
        return SLUICE_ERR_UNAVAILABLE;
    int rc = submit(r, jt, recs, n, false, false);
    /* Refused at once: Raft no longer takes entries from this replica (it was deposed and
     * has not been told in a poll yet). It stops serving first, so the journal thread's failure
     * that follows is no fault of the dispatcher's. */
    if (rc < 0)
        step_down(r, "Raft refused an entry");
    return rc;
}

static void watch(struct replica *r)
{
    if (r->closing || !r->started)
        return;
    int state = raft_state(&r->raft);
    raft_id leader = 0;
    const char *addr = NULL;
    raft_leader(&r->raft, &leader, &addr);
    if (leader != r->last_leader) {
        if (leader != 0)
            r->leader_changes++;
        r->last_leader = leader;
    }
    if (state == RAFT_LEADER && r->lead_term == 0) {
        r->lead_term = raft_current_term(&r->raft);
        r->announcing = true;
        log_info("raft: replica %" PRIu64 " elected in term %" PRIu64, r->id, r->lead_term);
        int rc = 0;
        if (r->seed && r->committed.applied == 0 && r->committed.ndatasets == 0 &&
            r->committed.njobs == 0 && r->committed.nworkers == 0)
            rc = submit_seed(r);
        if (rc == 0)
            rc = submit(r, NULL, NULL, 0, true, false);
        if (rc < 0)
            step_down(r, "announcing failed");
    } else if (state != RAFT_LEADER && r->lead_term != 0) {
        step_down(r, "no longer the leader");
    } else if (state == RAFT_LEADER && raft_current_term(&r->raft) != r->lead_term) {
        step_down(r, "a new term");
    }
}

/* Whether the loop stalled since the last poll; marks a leader suspect when it did. */
static bool stalled(struct replica *r)
{
    if (r->lead_term != 0 && !r->suspect && uv_hrtime() - r->last_tick_ns > r->stall_ns) {
        r->suspect = true;
        log_warn("raft: replica %" PRIu64 " stalled for %" PRIu64
                 " ms while leading: serving nothing until it knows it still leads",
                 r->id, (uv_hrtime() - r->last_tick_ns) / 1000000);
    }
    return r->suspect;
}

/* ---- membership ------------------------------------------------------------------------------ */

/* The configuration is the cluster list, every member a voter (a group never changes its
 * members). A replica that started from a new directory (lost its disk, or came after the
 * group formed) says rejoin when it connects: it may have acknowledged entries before, so the
 * leader removes it and adds it back, which resets what the leader believes it holds; it then
 * catches up (by snapshot) as a spare and becomes a voter again. Until then it never votes. */

static const struct raft_server *config_server(const struct replica *r, uint64_t id)
{
    const struct raft_configuration *c = &r->raft.configuration;
    for (unsigned i = 0; i < c->n; i++)
        if (c->servers[i].id == id)
            return &c->servers[i];
    return NULL;
}

static bool is_voter(const struct replica *r, uint64_t id)
{
    const struct raft_server *s = config_server(r, id);
    return s && s->role == RAFT_VOTER;
}

static void joining_path(const struct replica *r, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", r->dir, JOINING_FILE);
}

static void on_change(struct raft_change *req, int status)
{
    struct replica *r = req->data;
    r->changing = false;
    if (status != 0) {
        log_warn("raft: a membership change failed: %s", raft_strerror(status));
        r->change_after = uv_now(r->o.loop) + CHANGE_RETRY_MS;
    }
}

/* The leader's side: one change at a time towards the cluster list, all voters. */
static void reconcile(struct replica *r)
{
    if (!r->serving || r->changing || r->closing || uv_now(r->o.loop) < r->change_after)
        return;
    for (size_t i = 0; i < r->nmembers; i++) {
        struct member *m = &r->members[i];
        if (m->id == r->id)
            continue;
        const struct raft_server *srv = config_server(r, m->id);
        const char *what;
        int rc;
        r->change.data = r;
        if (m->rejoin && srv && srv->role == RAFT_VOTER) {
            what = "removes it, to add it back";
            rc = raft_remove(&r->raft, &r->change, m->id, on_change);
        } else if (!srv) {
            what = "adds it back as a spare";
            rc = raft_add(&r->raft, &r->change, m->id, m->raft, on_change);
        } else if (srv->role != RAFT_VOTER) {
            what = "makes it a voter once it has caught up";
            rc = raft_assign(&r->raft, &r->change, m->id, RAFT_VOTER, on_change);
        } else {
            continue;
        }
        if (rc == 0) {
            r->changing = true;
            log_info("raft: replica %" PRIu64 " started from a new directory: the leader %s", m->id,
                     what);
        } else {
            log_warn("raft: replica %" PRIu64 ": the leader %s: %s", m->id, what,
                     raft_strerror(rc));
            r->change_after = uv_now(r->o.loop) + CHANGE_RETRY_MS;
        }
        return;
    }
}

static void membership_poll(struct replica *r)
{
    if (!r->started || r->closing)
        return;
    for (size_t i = 0; i < r->nmembers; i++)
        if (r->members[i].rejoin && !is_voter(r, r->members[i].id))
            r->members[i].rejoin = false; /* removed (or not yet a voter again): done */
    if (r->joining && is_voter(r, r->id)) {
        r->joining = false;
        char path[4200];
        joining_path(r, path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT)
            log_warn("raft: %s: %s", path, strerror(errno));
        log_info("raft: replica %" PRIu64 " is a voter of the group again (applied index %" PRIu64
                 ")",
                 r->id, (uint64_t)raft_last_applied(&r->raft));
    }
    reconcile(r);
}

static void on_poll(uv_timer_t *t)
{
    struct replica *r = t->data;
    stalled(r);
    r->last_tick_ns = uv_hrtime();
    watch(r);
    membership_poll(r);
    if (r->handover_due) {
        handover_finish(r);
        return;
    }
    if (r->suspect && r->serving && !r->confirming && r->lead_term != 0) {
        r->confirming = true;
        if (submit(r, NULL, NULL, 0, false, true) < 0) {
            r->confirming = false;
            step_down(r, "confirming leadership failed");
        }
    }
}

/* ---- the FSM --------------------------------------------------------------------------------- */

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    struct replica *r = fsm->data;
    *result = NULL;
    struct replica_entry e;
    char err[SLUICE_ERRMSG_SIZE];
    int rc = replica_entry_parse(buf->base, buf->len, &e, err, sizeof err);
    if (rc < 0) {
        fatal_replica(r, "raft: a committed entry does not decode: %s", err);
        return RAFT_MALFORMED;
    }
    struct member *m = member_of(r, e.origin);
    if (m && e.rpc[0])
        snprintf(m->rpc, sizeof m->rpc, "%s", e.rpc);
    /* The leader applied its own entries of its term to its working state already. */
    bool own = r->lead_term != 0 && e.origin == r->id && e.term == r->lead_term && !e.seed;
    struct state *states[2] = {&r->committed, own ? NULL : r->work};
    size_t seeded = 0;
    rc = replica_entry_apply(&e, states, 2, &seeded, err, sizeof err);
    if (rc == 0 && e.seed)
        log_info("raft: the group starts from a seed state (%zu datasets, %zu jobs, %zu workers)%s",
                 r->committed.ndatasets, r->committed.njobs, r->committed.nworkers,
                 seeded ? "" : "; this replica had a state already and keeps it");
    if (rc < 0) {
        fatal_replica(r, "raft: a committed entry does not apply: %s", err);
        return RAFT_MALFORMED;
    }
    return 0;
}

static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    struct replica *r = fsm->data;
    struct raft_buffer *b = raft_malloc(sizeof *b);
    if (!b)
        return RAFT_NOMEM;
    uint8_t *p;
    size_t len;
    if (replica_snapshot_encode(&r->committed, raft_malloc, &p, &len) < 0) {
        raft_free(b);
        return RAFT_NOMEM;
    }
    b->base = p;
    b->len = len;
    *bufs = b;
    *n_bufs = 1;
    return 0;
}

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

static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    struct replica *r = fsm->data;
    char err[SLUICE_ERRMSG_SIZE];
    int rc = replica_state_restore(&r->committed, buf->base, buf->len, err, sizeof err);
    if (rc < 0) {
        snprintf(r->restore_err, sizeof r->restore_err, "the snapshot does not restore: %.900s",
                 err);
        log_error("raft: %s: snapshot: %s", r->dir, err);
        return rc == SLUICE_ERR_NOMEM ? RAFT_NOMEM : RAFT_MALFORMED;
    }
    rc = replica_state_copy(r->work, &r->committed, err, sizeof err);
    if (rc < 0) {
        log_error("raft: %s: snapshot: %s", r->dir, err);
        return RAFT_NOMEM;
    }
    raft_free(buf->base);
    return 0;
}

/* ---- start and close ------------------------------------------------------------------------- */

static void on_raft_closed(struct raft *raft);

/* Transport callbacks (raft_transport_opts). */
static uint64_t transport_last_index(void *user)
{
    struct replica *r = user;
    return r->started ? (uint64_t)raft_last_index(&r->raft) : 0;
}

static bool transport_rejoining(void *user)
{
    return ((struct replica *)user)->joining;
}

static void transport_rejoin(void *user, uint64_t id)
{
    struct replica *r = user;
    struct member *m = member_of(r, id);
    if (m && !m->rejoin) {
        m->rejoin = true;
        log_info("raft: replica %" PRIu64 " connected from a new directory (it rejoins)", id);
    }
}

static int replica_transport_init(struct replica *r, const struct replica_opts *opts, char *err,
                                  size_t errlen)
{
    struct raft_transport_opts to = {
        .sec = opts->sec,
        .cluster = r->cluster,
        .bind_address = opts->bind,
        .user = r,
        .last_index = transport_last_index,
        .rejoining = transport_rejoining,
        .rejoin = transport_rejoin,
    };
    return raft_transport_init(&r->transport, r->o.loop, &to, err, errlen);
}

static int mkdir_p(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* The cluster a Raft directory belongs to is written beside it at bootstrap; a later start with
 * another cluster is refused. Returns 1 when the directory is fresh (no file yet). */
static int check_cluster_file(struct replica *r, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->dir, CLUSTER_FILE);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno != ENOENT)
            return err_set(err, errlen, -errno, "raft: %s: %s", path, strerror(errno));
        /* No file: a fresh directory, unless Raft's own files are there. */
        char meta[4200];
        snprintf(meta, sizeof meta, "%s/metadata1", r->dir);
        if (access(meta, F_OK) == 0)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "raft: %s holds a Raft log but no %s: not a sluice replica's", r->dir,
                           CLUSTER_FILE);
        return 1;
    }
    char got[sizeof r->cluster + 2];
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = '\0';
    if (n > 0 && got[n - 1] == '\n')
        got[n - 1] = '\0';
    if (strcmp(got, r->cluster) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "raft: %s belongs to the cluster %s, not %s (a replica's directory never "
                       "joins another cluster; see docs/operations.md)",
                       r->dir, got, r->cluster);
    return 0;
}

static int write_cluster_file(struct replica *r, char *err, size_t errlen)
{
    char path[4200], tmp[4210];
    snprintf(path, sizeof path, "%s/%s", r->dir, CLUSTER_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return err_set(err, errlen, -errno, "raft: %s: %s", tmp, strerror(errno));
    int ok = fprintf(f, "%s\n", r->cluster) > 0;
    ok = (fflush(f) == 0) && ok && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0)
        return err_set(err, errlen, SLUICE_ERR_JOURNAL, "raft: writing %s failed", path);
    return 0;
}

enum start_mode {
    START_LOG,       /* the directory holds the group's log */
    START_BOOTSTRAP, /* a new directory, and a new group: bootstrap it */
    START_JOIN,      /* a new directory in a group that runs: join it without bootstrapping */
};

/* Starts Raft: bootstraps a new group, or marks a joining replica, first. */
static int begin(struct replica *r, enum start_mode mode, char *err, size_t errlen)
{
    int rc = 0;
    if (r->seed && mode != START_BOOTSTRAP) {
        log_info("raft: %s %s: the seed journal is not used", r->dir,
                 mode == START_JOIN ? "joins a group that runs" : "was bootstrapped before");
        state_release(r->seed);
        free(r->seed);
        r->seed = NULL;
    }
    if (mode == START_BOOTSTRAP) {
        struct raft_configuration conf;
        raft_configuration_init(&conf);
        for (size_t i = 0; i < r->nmembers && rc == 0; i++)
            rc = raft_configuration_add(&conf, r->members[i].id, r->members[i].raft, RAFT_VOTER);
        if (rc == 0)
            rc = raft_bootstrap(&r->raft, &conf);
        raft_configuration_close(&conf);
        if (rc != 0 && rc != RAFT_CANTBOOTSTRAP)
            return err_set(err, errlen, SLUICE_ERR_JOURNAL, "raft: bootstrapping %s: %s", r->dir,
                           raft_errmsg(&r->raft));
    }
    if (mode == START_JOIN && !r->joining) {
        /* Marked before anything else is written: a replica that stops while it joins says
         * rejoin again when it starts. */
        char path[4200];
        joining_path(r, path, sizeof path);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || fsync(fd) != 0) {
            rc = err_set(err, errlen, SLUICE_ERR_JOURNAL, "raft: %s: %s", path, strerror(errno));
            if (fd >= 0)
                close(fd);
            return rc;
        }
        close(fd);
    }
    r->joining = mode == START_JOIN;
    if (mode != START_LOG && (rc = write_cluster_file(r, err, errlen)) < 0)
        return rc;
    rc = raft_start(&r->raft);
    if (rc != 0) {
        const char *why = raft_errmsg(&r->raft);
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "raft: starting from %s: %s", r->dir,
                       why && why[0]       ? why
                       : r->restore_err[0] ? r->restore_err
                                           : raft_strerror(rc));
    }
    r->started = true;
    r->last_tick_ns = uv_hrtime();
    uv_timer_init(r->o.loop, &r->poll);
    r->poll.data = r;
    r->poll_inited = true;
    uv_timer_start(&r->poll, on_poll, POLL_MS, POLL_MS);
    log_info("raft: replica %" PRIu64 " of %s started from %s (%s)", r->id, r->cluster, r->dir,
             mode == START_BOOTSTRAP ? "bootstrapped"
             : mode == START_JOIN    ? "joining: a voter once the leader has added it back"
                                     : "existing log");
    return 0;
}

/* ---- a new directory: bootstrap or join ------------------------------------------------------ */

static void probe_all(struct replica *r);

static void decide(struct replica *r)
{
    uint64_t answers[REPLICA_MEMBERS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < r->nmembers; i++)
        if (r->members[i].id != r->id)
            answers[n++] = r->members[i].answer;
    enum replica_join d = replica_join_decide(answers, n);
    uint64_t now = uv_now(r->o.loop);
    if (d == REPLICA_WAIT) {
        if (now - r->last_probe_log >= PROBE_LOG_MS) {
            r->last_probe_log = now;
            char who[512] = "";
            size_t len = 0;
            for (size_t i = 0; i < r->nmembers && len < sizeof who - 64; i++)
                if (r->members[i].id != r->id && r->members[i].answer == REPLICA_UNKNOWN)
                    len += (size_t)snprintf(who + len, sizeof who - len, "%s%" PRIu64 " (%s)",
                                            len ? ", " : "", r->members[i].id, r->members[i].raft);
            log_warn("raft: replica %" PRIu64 " has a new directory and waits %" PRIu64
                     " s for its peers before it bootstraps or joins; not heard from: %s",
                     r->id, (now - r->deciding_since) / 1000, who);
        }
        return;
    }
    r->deciding = false;
    uv_timer_stop(&r->probe_timer);
    if (d == REPLICA_JOIN)
        log_info("raft: replica %" PRIu64 " has a new directory and the group has a log: it "
                 "joins without bootstrapping",
                 r->id);
    char err[SLUICE_ERRMSG_SIZE];
    if (begin(r, d == REPLICA_JOIN ? START_JOIN : START_BOOTSTRAP, err, sizeof err) < 0)
        fatal_replica(r, "%s", err);
}

static void on_probe(void *user, uint64_t id, int status, uint64_t last_index)
{
    struct replica *r = user;
    struct member *m = member_of(r, id);
    if (!m)
        return;
    m->probing = false;
    if (r->closing || !r->deciding)
        return;
    m->answer = status == 0 ? last_index : REPLICA_UNKNOWN;
    if (status == 0)
        log_debug("raft: replica %" PRIu64 " answered: last index %" PRIu64, id, last_index);
    decide(r);
}

static void probe_all(struct replica *r)
{
    for (size_t i = 0; i < r->nmembers; i++) {
        struct member *m = &r->members[i];
        if (m->id == r->id || m->probing)
            continue;
        if (raft_transport_probe(&r->transport, m->id, m->raft, on_probe, r) == 0)
            m->probing = true;
    }
}

static void on_probe_timer(uv_timer_t *t)
{
    struct replica *r = t->data;
    if (r->deciding && !r->closing)
        probe_all(r);
}

static int begin_deciding(struct replica *r, char *err, size_t errlen)
{
    int rc = raft_transport_listen(&r->transport, member_of(r, r->id)->raft, err, errlen);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < r->nmembers; i++)
        r->members[i].answer = REPLICA_UNKNOWN;
    r->deciding = true;
    r->deciding_since = r->last_probe_log = uv_now(r->o.loop);
    uv_timer_init(r->o.loop, &r->probe_timer);
    r->probe_timer.data = r;
    r->probe_inited = true;
    uv_timer_start(&r->probe_timer, on_probe_timer, 0, PROBE_MS);
    log_info("raft: replica %" PRIu64 " has a new directory %s: asking its peers whether the "
             "group runs",
             r->id, r->dir);
    return 0;
}

int replica_start(const struct replica_opts *opts, struct replica **out, char *err, size_t errlen)
{
    struct replica *r = calloc(1, sizeof *r);
    if (!r) {
        if (opts->seed) {
            state_release(opts->seed);
            free(opts->seed);
        }
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "raft: out of memory");
    }
    r->o = *opts;
    r->o.address = r->o.cluster = r->o.bind = r->o.rpc = r->o.work_dir = NULL;
    r->work = opts->work;
    r->id = opts->id;
    r->seed = opts->seed; /* the replica's from now on, whatever happens */
    r->o.seed = NULL;
    state_init(&r->committed);
    r->committed.limits = opts->work->limits;
    r->committed.static_workers = opts->work->static_workers;
    uint64_t ids[REPLICA_MEMBERS_MAX];
    char addrs[REPLICA_MEMBERS_MAX][REPLICA_ADDR_MAX];
    size_t n;
    int rc = replica_parse_cluster(opts->cluster, opts->id, opts->address, ids, addrs, &n,
                                   r->cluster, sizeof r->cluster, err, errlen);
    if (rc < 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        r->members[i].id = ids[i];
        snprintf(r->members[i].raft, sizeof r->members[i].raft, "%s", addrs[i]);
    }
    r->nmembers = n;
    const char *self_raft = member_of(r, r->id)->raft;
    snprintf(r->rpc, sizeof r->rpc, "%s", opts->rpc ? opts->rpc : "");
    if (snprintf(r->dir, sizeof r->dir, "%s/raft", opts->work_dir) >= (int)sizeof r->dir) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID, "raft: work dir too long");
        goto fail;
    }
    rc = mkdir_p(r->dir);
    if (rc < 0) {
        err_set(err, errlen, rc, "raft: %s: %s", r->dir, strerror(-rc));
        goto fail;
    }
    int fresh = check_cluster_file(r, err, errlen);
    if (fresh < 0) {
        rc = fresh;
        goto fail;
    }
    rc = replica_transport_init(r, opts, err, errlen);
    if (rc < 0)
        goto fail;
    r->transport_inited = true;
    rc = raft_uv_init(&r->io, opts->loop, r->dir, &r->transport);
    if (rc != 0) {
        rc = err_set(err, errlen, SLUICE_ERR_JOURNAL, "raft: %s: %s", r->dir,
                     r->io.errmsg[0] ? r->io.errmsg : raft_strerror(rc));
        goto fail;
    }
    r->io_inited = true;
    /* A damaged log or snapshot stops the start with its reason; C-Raft would otherwise drop
     * the damaged part and start from what is left (a torn write at the very end, as a crash
     * leaves, is cut off either way). */
    raft_uv_set_auto_recovery(&r->io, false);
    r->fsm = (struct raft_fsm){
        .version = 3,
        .data = r,
        .apply = fsm_apply,
        .snapshot = fsm_snapshot,
        .restore = fsm_restore,
        .snapshot_finalize = fsm_snapshot_finalize,
    };
    rc = raft_init(&r->raft, &r->io, &r->fsm, r->id, self_raft);
    if (rc != 0) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID, "raft: %s", raft_errmsg(&r->raft));
        goto fail;
    }
    r->raft_inited = true;
    r->raft.data = r;
    unsigned election =
        opts->election_timeout_ms ? opts->election_timeout_ms : REPLICA_ELECTION_TIMEOUT_MS;
    raft_set_election_timeout(&r->raft, election);
    raft_set_heartbeat_timeout(&r->raft, election / 10 ? election / 10 : 1);
    raft_set_pre_vote(&r->raft, true);
    raft_set_snapshot_threshold(&r->raft,
                                opts->snapshot_threshold && opts->snapshot_threshold < 1u << 20
                                    ? (unsigned)opts->snapshot_threshold
                                    : REPLICA_SNAPSHOT_ENTRIES);
    raft_set_snapshot_trailing(&r->raft, 128);
    r->stall_ns = (uint64_t)election * 1000000 / 2;
    if (fresh == 1 && r->nmembers > 1) {
        /* A new directory: the peers tell whether the group runs (join it) or forms now
         * (bootstrap it); Raft starts once that is known. */
        rc = begin_deciding(r, err, errlen);
        if (rc < 0)
            goto fail;
        *out = r;
        return 0;
    }
    char path[4200];
    joining_path(r, path, sizeof path);
    rc = begin(r,
               fresh == 1                ? START_BOOTSTRAP
               : access(path, F_OK) == 0 ? START_JOIN
                                         : START_LOG,
               err, errlen);
    if (rc < 0)
        goto fail;
    *out = r;
    return 0;
fail:
    log_debug("raft: start failed: %s", err);
    /* Raft's handles close on the loop's next run, which the failed start's caller still
     * turns; r is freed then. */
    if (r->raft_inited) {
        r->closing = true;
        r->raft.data = r;
        raft_close(&r->raft, on_raft_closed);
    } else {
        if (r->io_inited)
            raft_uv_close(&r->io);
        if (r->transport_inited)
            raft_transport_release(&r->transport);
        state_release(&r->committed);
        if (r->seed) {
            state_release(r->seed);
            free(r->seed);
        }
        free(r);
    }
    return rc < 0 ? rc : SLUICE_ERR_INVALID;
}

bool replica_serving(struct replica *r)
{
    /* A request read after a stall (a SIGCONT) is seen before the poll timer runs: the clock
     * is checked here too, so not one reply leaves a leader that may have been deposed. */
    return r && r->serving && !r->closing && !stalled(r);
}

const char *replica_leader_rpc(const struct replica *r)
{
    if (!r->started)
        return "";
    raft_id leader = 0;
    const char *addr = NULL;
    raft_leader((struct raft *)&r->raft, &leader, &addr);
    if (leader == 0)
        return "";
    for (size_t i = 0; i < r->nmembers; i++)
        if (r->members[i].id == leader)
            return r->members[i].rpc;
    return "";
}

void replica_view(struct replica *r, struct status_raft *v)
{
    memset(v, 0, sizeof *v);
    v->id = r->id;
    v->membership = r->deciding ? "new" : r->joining ? "joining" : "voter";
    raft_id leader = 0;
    const char *addr = NULL;
    raft_leader(&r->raft, &leader, &addr);
    v->leader_id = leader;
    v->term = raft_current_term(&r->raft);
    v->commit_index = raft_commit_index(&r->raft);
    v->applied_index = raft_last_applied(&r->raft);
    v->last_index = raft_last_index(&r->raft);
    int st = raft_state(&r->raft);
    v->role = !r->started            ? "unavailable"
              : st == RAFT_LEADER    ? "leader"
              : st == RAFT_FOLLOWER  ? "follower"
              : st == RAFT_CANDIDATE ? "candidate"
                                     : "unavailable";
    v->serving = replica_serving(r);
    v->leader_changes = r->leader_changes;
    snprintf(v->state_digest, sizeof v->state_digest, "%016" PRIx64, state_digest(&r->committed));
    v->nmembers = r->nmembers;
    for (size_t i = 0; i < r->nmembers; i++) {
        v->members[i].id = r->members[i].id;
        v->members[i].raft_address = r->members[i].raft;
        v->members[i].rpc_address = r->members[i].rpc;
    }
}

static void on_transfer(struct raft_transfer *req)
{
    struct replica *r = req->data;
    r->transferring = false;
    raft_id leader = 0;
    const char *addr = NULL;
    raft_leader(&r->raft, &leader, &addr);
    log_info("raft: leadership handed over: the leader is now %" PRIu64, (uint64_t)leader);
    if (r->handover_cb)
        r->handover_due = true;
}

void replica_handover(struct replica *r, void (*cb)(void *user), void *user)
{
    if (r->closing || r->transferring || raft_state(&r->raft) != RAFT_LEADER || r->nmembers < 2) {
        cb(user);
        return;
    }
    r->handover_cb = cb;
    r->handover_user = user;
    r->transfer.data = r;
    int rc = raft_transfer(&r->raft, &r->transfer, 0, on_transfer);
    if (rc != 0) {
        log_warn("raft: handing leadership over: %s", raft_strerror(rc));
        r->handover_cb = NULL;
        cb(user);
        return;
    }
    r->transferring = true;
    log_info("raft: handing leadership over before stopping");
}

static void on_transport_closed(struct raft_uv_transport *t)
{
    (void)t;
}

static void finish_close(struct replica *r)
{
    void (*cb)(void *) = r->close_cb;
    void *user = r->close_user;
    raft_uv_close(&r->io);
    raft_transport_release(&r->transport);
    state_release(&r->committed);
    if (r->seed) {
        state_release(r->seed);
        free(r->seed);
    }
    free(r);
    if (cb)
        cb(user);
}

static void maybe_finish_close(struct replica *r)
{
    if (!r->raft_inited && !r->poll_inited && !r->probe_inited)
        finish_close(r);
}

static void on_poll_closed(uv_handle_t *h)
{
    struct replica *r = h->data;
    r->poll_inited = false;
    maybe_finish_close(r);
}

static void on_probe_timer_closed(uv_handle_t *h)
{
    struct replica *r = h->data;
    r->probe_inited = false;
    maybe_finish_close(r);
}

static void on_raft_closed(struct raft *raft)
{
    struct replica *r = raft->data;
    r->raft_inited = false;
    maybe_finish_close(r);
}

void replica_close(struct replica *r, void (*cb)(void *user), void *user)
{
    r->closing = true;
    r->serving = false;
    r->close_cb = cb;
    r->close_user = user;
    (void)on_transport_closed;
    r->raft.data = r;
    if (r->poll_inited) {
        uv_timer_stop(&r->poll);
        uv_close((uv_handle_t *)&r->poll, on_poll_closed);
    }
    if (r->probe_inited) {
        uv_timer_stop(&r->probe_timer);
        uv_close((uv_handle_t *)&r->probe_timer, on_probe_timer_closed);
    }
    raft_close(&r->raft, on_raft_closed);
}
