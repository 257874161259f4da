/* Recovery: rebuilding the dispatcher's state from its journal, the snapshot first and then every
 * later record through state_apply(), as live traffic applied them. Pure apart from the journal's
 * reads: no libuv, no threads. */
#include "recovery.h"

#include "update_codec.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int lookup_def(void *user, const char *id, uint8_t **def, size_t *len, char *err,
                      size_t errlen)
{
    char why[256];
    int rc = journal_dataset_read(user, id, def, len, why, sizeof why);
    if (rc < 0)
        return err_set(err, errlen, rc == SLUICE_ERR_NOT_FOUND ? SLUICE_ERR_CORRUPT : rc, "%s",
                       why);
    return 0;
}

struct replay_ctx {
    struct state *st;
    uint64_t replayed;
    char *err;
    size_t errlen;
};

static int replay_one(void *user, uint64_t seq, const uint8_t *payload, size_t len)
{
    struct replay_ctx *c = user;
    struct st_update u;
    char why[256];
    int rc = record_update_decode(payload, len, &u, why, sizeof why);
    if (rc < 0)
        return err_set(c->err, c->errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_CORRUPT,
                       "record %" PRIu64 ": does not decode: %s", seq, why);
    rc = state_apply(c->st, &u);
    if (rc < 0)
        err_set(c->err, c->errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_CORRUPT,
                "record %" PRIu64 ": does not apply: %s %" PRIu64 ": %s", seq,
                st_update_name(u.type), u.id, sluice_strerror(rc));
    else
        c->replayed++;
    st_update_release(&u);
    return rc;
}

int journal_thread_recover(struct journal *j, struct state *st, struct journal_recovery *info,
                           char *err, size_t errlen)
{
    uint8_t *snap = NULL;
    size_t len = 0;
    uint64_t seq = 0, last = 0;
    char why[512];
    memset(info, 0, sizeof *info);
    state_init(st);
    int rc = journal_snapshot_read(j, &seq, &snap, &len, err, errlen);
    if (rc == 0) {
        rc = record_snapshot_decode(snap, len, lookup_def, j, st, why, sizeof why);
        free(snap);
        if (rc < 0)
            return err_set(err, errlen, rc, "snapshot at %" PRIu64 ": %s", seq, why);
    } else if (rc == SLUICE_ERR_NOT_FOUND) {
        seq = 0;
    } else {
        return rc;
    }
    struct replay_ctx c = {.st = st, .err = err, .errlen = errlen};
    rc = journal_replay(j, seq + 1, replay_one, NULL, &c, &last, err, errlen);
    if (rc < 0) {
        state_release(st);
        state_init(st);
        return rc;
    }
    info->snapshot_seq = seq;
    info->replayed = c.replayed;
    info->next_seq = last + 1;
    return 0;
}
