/* Recovery: rebuilding the dispatcher's state from its journal, the snapshot first and then every
 * later record through state_apply(), as live traffic applied them. Pure apart from the journal's
 * reads: no libuv, no threads. */
#include "recovery.h"

#include "update_codec.h"

#include "common/error.h"
#include "common/log.h"
#include "journal/layout.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int lookup_def(void *user, const char *id, uint8_t **def, size_t *len, char *err,
                      size_t errlen)
{
    char why[SLUICE_ERRMSG_SIZE];
    int rc = journal_dataset_read(user, id, def, len, why, sizeof why);
    if (rc < 0)
        return err_set(err, errlen, rc == SLUICE_ERR_NOT_FOUND ? SLUICE_ERR_CORRUPT : rc, "%s",
                       why);
    return 0;
}

/* A replay that stops at the first damaged record and remembers which one it was. */
struct replay_ctx {
    struct state *st;
    uint64_t replayed;
    char *err;
    size_t errlen;
    bool bad;         /* damage was met at bad_seq ... */
    uint64_t bad_seq; /* ... and `what` says what it is, without the record's number */
    char what[SLUICE_ERRMSG_SIZE];
};

#define REPLAY_STOP 1 /* returned by replay_one after damage: no record after it is applied */

static void replay_damage(void *user, uint64_t seq, const char *why)
{
    struct replay_ctx *c = user;
    if (c->bad)
        return;
    c->bad = true;
    c->bad_seq = seq;
    /* journal_replay() says "record 42: checksum mismatch" or "records 7 to 9 are missing". */
    char prefix[40];
    snprintf(prefix, sizeof prefix, "record %" PRIu64 ": ", seq);
    if (strncmp(why, prefix, strlen(prefix)) == 0)
        snprintf(c->what, sizeof c->what, "log record: %s", why + strlen(prefix));
    else
        snprintf(c->what, sizeof c->what, "%s", why);
    err_set(c->err, c->errlen, SLUICE_ERR_CORRUPT, "%s", why);
}

static int replay_one(void *user, uint64_t seq, const uint8_t *payload, size_t len)
{
    struct replay_ctx *c = user;
    struct st_update u;
    char why[SLUICE_ERRMSG_SIZE / 2]; /* quoted in a longer message */
    if (c->bad)
        return REPLAY_STOP;
    int rc = update_codec_decode(payload, len, &u, why, sizeof why);
    if (rc < 0) {
        if (rc == SLUICE_ERR_NOMEM)
            return err_set(c->err, c->errlen, rc, "record %" PRIu64 ": out of memory", seq);
        c->bad = true;
        c->bad_seq = seq;
        snprintf(c->what, sizeof c->what, "log record does not decode: %s", why);
        return err_set(c->err, c->errlen, SLUICE_ERR_CORRUPT,
                       "record %" PRIu64 ": does not decode: %s", seq, why);
    }
    rc = state_apply(c->st, &u);
    if (rc == SLUICE_ERR_NOMEM) {
        err_set(c->err, c->errlen, rc, "record %" PRIu64 ": out of memory", seq);
    } else if (rc < 0) {
        c->bad = true;
        c->bad_seq = seq;
        snprintf(c->what, sizeof c->what, "log record does not apply: %s %" PRIu64 ": %s",
                 st_update_name(u.type), u.id, sluice_strerror(rc));
        err_set(c->err, c->errlen, SLUICE_ERR_CORRUPT,
                "record %" PRIu64 ": does not apply: %s %" PRIu64 ": %s", seq,
                st_update_name(u.type), u.id, sluice_strerror(rc));
    } else {
        c->replayed++;
    }
    st_update_release(&u);
    return rc;
}

/* Rebuilds the state from the snapshot and the records after it up to `to`. On damage returns
 * SLUICE_ERR_CORRUPT with *c telling where (c->bad) or, for the snapshot, only the message. */
static int recover_to(struct journal *j, uint64_t to, struct state *st,
                      struct journal_recovery *info, struct replay_ctx *c, char *err, size_t errlen)
{
    uint8_t *snap = NULL;
    size_t len = 0;
    uint64_t seq = 0, last = 0;
    char why[SLUICE_ERRMSG_SIZE];
    memset(info, 0, sizeof *info);
    *c = (struct replay_ctx){.st = st, .err = err, .errlen = errlen};
    state_init(st);
    int rc = journal_snapshot_read(j, &seq, &snap, &len, err, errlen);
    if (rc == 0) {
        rc = update_codec_snapshot_decode(snap, len, lookup_def, j, st, why, sizeof why);
        free(snap);
        if (rc < 0)
            return err_set(err, errlen, rc, "snapshot at %" PRIu64 ": %s", seq, why);
    } else if (rc == SLUICE_ERR_NOT_FOUND) {
        seq = 0;
    } else {
        return rc;
    }
    info->snapshot_seq = seq;
    rc = journal_replay_to(j, seq + 1, to, replay_one, replay_damage, c, &last, err, errlen);
    if (c->bad)
        rc = SLUICE_ERR_CORRUPT;
    if (rc < 0) {
        state_release(st);
        state_init(st);
        return rc;
    }
    info->replayed = c->replayed;
    info->next_seq = last + 1;
    return 0;
}

int recovery_replay(struct journal *j, struct state *st, struct journal_recovery *info, char *err,
                    size_t errlen)
{
    struct replay_ctx c;
    return recover_to(j, UINT64_MAX, st, info, &c, err, errlen);
}

static int check_dataset(void *user, const char *id, const uint8_t *data, size_t len)
{
    (void)user;
    (void)id;
    (void)data;
    (void)len;
    return 0;
}

int recovery_check(struct journal *j, void *user, struct journal_verdict *v)
{
    (void)user;
    char err[SLUICE_ERRMSG_SIZE];
    struct journal_damage d;
    struct state st;
    struct journal_recovery info;
    struct replay_ctx c;
    int rc = journal_check_meta(j, err, sizeof err);
    if (rc == 0)
        rc = journal_datasets_each(j, check_dataset, NULL, err, sizeof err);
    if (rc == SLUICE_ERR_CORRUPT) {
        journal_damage_set(&d, false, 0, "%s", err);
        return journal_verdict_damage(v, &d);
    }
    if (rc == 0)
        rc = recover_to(j, UINT64_MAX, &st, &info, &c, err, sizeof err);
    if (rc == SLUICE_ERR_CORRUPT && c.bad) {
        journal_damage_set(&d, false, 0, "%s", c.what);
        d.has_seq = true;
        d.seq = c.bad_seq;
        d.tail = c.bad_seq > info.snapshot_seq;
        return journal_verdict_damage(v, &d);
    }
    if (rc == SLUICE_ERR_CORRUPT) {
        journal_damage_set(&d, false, 0, "%s", err);
        return journal_verdict_damage(v, &d);
    }
    if (rc < 0) {
        v->rc = rc;
        snprintf(v->msg, sizeof v->msg, "%s", err);
        return rc;
    }
    snprintf(v->summary, sizeof v->summary,
             "snapshot at %" PRIu64 ", %" PRIu64 " records after it (next %" PRIu64 "), %" PRIu64
             " updates in all; %zu datasets, %zu jobs, %zu tasks, %zu workers, %zu clients",
             info.snapshot_seq, info.replayed, info.next_seq, st.applied, st.ndatasets, st.njobs,
             st.ntasks, st.nworkers, st.nclients);
    state_release(&st);
    return 0;
}

static int keep_dataset(void *user, const char *id)
{
    return state_dataset(user, id) != NULL;
}

/* --recover-to-last-good: cuts the log back to the record before the damage v names. */
static int cut_tail(struct journal *j, const struct journal_opts *opts,
                    const struct journal_verdict *v, struct state *st,
                    struct journal_recovery *info, char *err, size_t errlen)
{
    uint64_t from = v->damage.seq, to = v->last_seq > from ? v->last_seq : from;
    uint64_t nrec = 0, nds = 0;
    char copy[PATH_MAX + 64], stamp[32];
    struct replay_ctx c;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    if ((size_t)snprintf(copy, sizeof copy, "%s/journal.damaged-%s.mdb", opts->work_dir, stamp) >=
        sizeof copy)
        return err_set(err, errlen, -ENAMETOOLONG, "recover: %s", strerror(ENAMETOOLONG));
    int rc = journal_copy_file(journal_data_path(j), copy, err, errlen);
    for (int i = 1; rc == -EEXIST && i < 100; i++) { /* another recovery within the second */
        snprintf(copy, sizeof copy, "%s/journal.damaged-%s-%d.mdb", opts->work_dir, stamp, i);
        rc = journal_copy_file(journal_data_path(j), copy, err, errlen);
    }
    if (rc == 0)
        rc = recover_to(j, from - 1, st, info, &c, err, errlen);
    if (rc == 0)
        rc = journal_drop_tail(j, from, keep_dataset, st, &nrec, &nds, err, errlen);
    if (rc < 0) {
        state_release(st);
        state_init(st);
        return rc;
    }
    struct journal_verdict again;
    struct journal_opts ro = *opts;
    ro.read_only = true;
    if (journal_verify(&ro, recovery_check, NULL, &again) < 0) {
        state_release(st);
        state_init(st);
        return err_set(err, errlen, again.rc, "after cutting the log back: %s", again.msg);
    }
    info->dropped_from = from;
    info->dropped_to = to;
    info->dropped_datasets = nds;
    log_warn("journal %s: --recover-to-last-good: dropped records %" PRIu64 " to %" PRIu64
             " (%" PRIu64 " in the log; the first damaged: %s) and %" PRIu64
             " dataset definitions only they registered; the state is the snapshot at %" PRIu64
             " and the %" PRIu64 " records after it; the damaged journal is kept as %s",
             opts->work_dir, from, to, nrec, v->msg, nds, info->snapshot_seq, info->replayed, copy);
    return 0;
}

int recovery_open(const struct journal_opts *opts, bool recover_to_last_good, struct journal **out,
                  struct state *st, struct journal_recovery *info, char *err, size_t errlen)
{
    struct journal_verdict *v = malloc(sizeof *v);
    struct journal *j = NULL;
    state_init(st);
    memset(info, 0, sizeof *info);
    if (!v)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "open: out of memory");
    int rc =
        journal_open_checked(opts, recovery_check, NULL, recover_to_last_good, &j, v, err, errlen);
    if (rc == 0 && v->rc == 0)
        rc = recovery_replay(j, st, info, err, errlen);
    else if (rc == 0)
        rc = cut_tail(j, opts, v, st, info, err, errlen);
    free(v);
    if (rc < 0) {
        journal_close(j);
        return rc;
    }
    *out = j;
    return 0;
}
