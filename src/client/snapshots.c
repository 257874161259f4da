/* Snapshots through the client (sluice.h, docs/snapshots.md): SaveSnapshot and SnapshotStatus
 * as blocking dispatcher calls, and a wait that polls the status until the save is over. */
#include "client.h"

#include "common/error.h"
#include "common/names.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The longest snapshot path the dispatcher accepts (its ST_PATH_MAX less the NUL). */
#define SNAPSHOT_PATH_MAX 1023

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

static int take_save(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct sluice_snapshot_status *out = user;
    const Sluice__SaveSnapshotReply *r = reply->save_snapshot_reply;
    if (!r)
        return 0;
    copy_str(out->state, sizeof out->state, r->state);
    out->save_id = r->save_id;
    out->chunks = r->chunks;
    copy_str(out->error, sizeof out->error, r->error);
    return 0;
}

static int take_status(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct sluice_snapshot_status *out = user;
    const Sluice__SnapshotStatusReply *r = reply->snapshot_status_reply;
    if (!r)
        return 0;
    copy_str(out->state, sizeof out->state, r->state);
    out->save_id = r->save_id;
    copy_str(out->dataset_id, sizeof out->dataset_id, r->dataset_id);
    out->chunks = r->chunks;
    out->chunks_committed = r->chunks_committed;
    copy_str(out->error, sizeof out->error, r->error);
    return 0;
}

static int check_path(const char *path, char *err, size_t errlen)
{
    if (!path || !path[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a snapshot path is required");
    return name_check("snapshot path", path, SNAPSHOT_PATH_MAX, err, errlen);
}

int sluice_client_save_snapshot(struct sluice_client *client, const char *dataset_id,
                                const char *path, struct sluice_snapshot_status *out, char *err,
                                size_t errlen)
{
    struct sluice_snapshot_status tmp;
    if (!out)
        out = &tmp;
    memset(out, 0, sizeof *out);
    if (!client || !dataset_id || !dataset_id[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a client and a dataset id are required");
    int rc = check_path(path, err, errlen);
    if (rc < 0)
        return rc;
    Sluice__SaveSnapshotRequest req = SLUICE__SAVE_SNAPSHOT_REQUEST__INIT;
    req.dataset_id = (char *)dataset_id;
    req.path = (char *)path;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_SAVE_SNAPSHOT;
    env.save_snapshot = &req;
    rc = client_request(client, &env, SLUICE__ENVELOPE__BODY_SAVE_SNAPSHOT_REPLY, take_save, out,
                        NULL, err, errlen);
    if (rc == 0)
        copy_str(out->dataset_id, sizeof out->dataset_id, dataset_id);
    return rc;
}

int sluice_client_snapshot_status(struct sluice_client *client, const char *path,
                                  struct sluice_snapshot_status *out, char *err, size_t errlen)
{
    if (!client || !out)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a client and out are required");
    memset(out, 0, sizeof *out);
    int rc = check_path(path, err, errlen);
    if (rc < 0)
        return rc;
    Sluice__SnapshotStatusRequest req = SLUICE__SNAPSHOT_STATUS_REQUEST__INIT;
    req.path = (char *)path;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_SNAPSHOT_STATUS;
    env.snapshot_status = &req;
    return client_request(client, &env, SLUICE__ENVELOPE__BODY_SNAPSHOT_STATUS_REPLY, take_status,
                          out, NULL, err, errlen);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int sluice_client_snapshot_wait(struct sluice_client *client, const char *path, uint64_t poll_ms,
                                uint64_t timeout_ms, struct sluice_snapshot_status *out, char *err,
                                size_t errlen)
{
    struct sluice_snapshot_status tmp;
    if (!out)
        out = &tmp;
    if (poll_ms == 0)
        poll_ms = 200;
    uint64_t start = mono_ms();
    for (;;) {
        int rc = sluice_client_snapshot_status(client, path, out, err, errlen);
        if (rc < 0)
            return rc;
        if (strcmp(out->state, "finished") == 0)
            return 0;
        if (strcmp(out->state, "failed") == 0)
            return err_set(err, errlen, SLUICE_ERR_TASK_FAILED, "%s",
                           out->error[0] ? out->error : "the save failed");
        uint64_t waited = mono_ms() - start;
        if (timeout_ms && waited >= timeout_ms)
            return err_set(err, errlen, SLUICE_ERR_TIMEOUT,
                           "snapshot %s: still running after %" PRIu64 " ms (%" PRIu64
                           " of %" PRIu64 " chunks committed)",
                           path, waited, out->chunks_committed, out->chunks);
        uint64_t nap = poll_ms;
        if (timeout_ms && timeout_ms - waited < nap)
            nap = timeout_ms - waited;
        struct timespec ts = {(time_t)(nap / 1000u), (long)(nap % 1000u) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
}
