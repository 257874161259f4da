/* The job's position kept by the dispatcher (sluice.h, docs/snapshots.md "The job's position"):
 * a consumer keeps its position at each checkpoint step (ReportPosition), and a tool takes the
 * job's position at a step (GetJobPosition) as the merge of one position per consumer. */
#include "client.h"
#include "iterator_internal.h"

#include "common/error.h"
#include "common/names.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int take_nothing(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    (void)reply;
    (void)user;
    (void)err;
    (void)errlen;
    return 0;
}

int sluice_iterator_keep(struct sluice_iterator *it, uint64_t step, const uint8_t *bytes,
                         size_t len, char *err, size_t errlen)
{
    if (!it || !bytes || len == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "iterator and position are required");
    if (it->mode != SLUICE_DISTRIBUTED_EPOCH || !it->job_name[0] || it->coordinated)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "positions are kept for named jobs read in distributed_epoch without "
                       "num_consumers; this read is not one");
    if (step > SLUICE_JOB_STEP_LATEST)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "step %" PRIu64 " is above 2^62", step);
    /* A mix keeps its position through its first input's read, under the mix's name. */
    const struct sluice_iterator *by = it->mixing ? iter_mix_first(it) : it;
    if (!by || !by->client_id)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "the read holds no job at the dispatcher (it ended or failed)");
    uint64_t use = step ? step : it->kept_step + 1;
    Sluice__ReportPositionRequest req = SLUICE__REPORT_POSITION_REQUEST__INIT;
    req.client_id = by->client_id;
    req.client_key.data = (uint8_t *)by->client_key;
    req.client_key.len = by->client_key_len;
    req.job_name = (char *)it->job_name;
    req.step = use;
    req.position.data = (uint8_t *)bytes;
    req.position.len = len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_REPORT_POSITION;
    env.report_position = &req;
    int rc = client_request(it->c, &env, SLUICE__ENVELOPE__BODY_REPORT_POSITION_REPLY, take_nothing,
                            NULL, NULL, err, errlen);
    if (rc == 0)
        it->kept_step = use;
    return rc;
}

struct cut {
    uint8_t **parts;
    size_t *lens;
    size_t n;
    uint64_t step;
};

static int take_cut(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    struct cut *c = user;
    const Sluice__GetJobPositionReply *r = reply->get_job_position_reply;
    if (!r || r->n_positions == 0)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "the dispatcher sent no position");
    c->parts = calloc(r->n_positions, sizeof *c->parts);
    c->lens = calloc(r->n_positions, sizeof *c->lens);
    if (!c->parts || !c->lens)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    for (size_t i = 0; i < r->n_positions; i++) {
        const Sluice__ConsumerPosition *p = r->positions[i];
        if (!p || p->position.len == 0)
            return err_set(err, errlen, SLUICE_ERR_PROTOCOL,
                           "the dispatcher sent an empty position");
        if (!(c->parts[i] = malloc(p->position.len)))
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        memcpy(c->parts[i], p->position.data, p->position.len);
        c->lens[i] = p->position.len;
        c->n = i + 1;
    }
    c->step = r->step;
    return 0;
}

int sluice_job_checkpoint(struct sluice_client *client, const char *job_name, uint64_t step,
                          uint8_t **out, size_t *out_len, uint64_t *cut, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (out_len)
        *out_len = 0;
    if (cut)
        *cut = 0;
    if (!client || !out || !out_len)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "client, out and out_len are required");
    if (!job_name || !job_name[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a job name is required");
    int rc = name_check("job name", job_name, NAME_ID_MAX, err, errlen);
    if (rc < 0)
        return rc;
    Sluice__GetJobPositionRequest req = SLUICE__GET_JOB_POSITION_REQUEST__INIT;
    req.job_name = (char *)job_name;
    req.step = step;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_JOB_POSITION;
    env.get_job_position = &req;
    struct cut c = {0};
    rc = client_request(client, &env, SLUICE__ENVELOPE__BODY_GET_JOB_POSITION_REPLY, take_cut, &c,
                        NULL, err, errlen);
    if (rc == 0) {
        char why[SLUICE_ERRMSG_SIZE];
        rc = sluice_checkpoint_merge((const uint8_t *const *)c.parts, c.lens, c.n, out, out_len,
                                     why, sizeof why);
        if (rc < 0)
            err_set(err, errlen, rc, "job '%s': the positions its consumers kept do not merge: %s",
                    job_name, why);
        else if (cut)
            *cut = c.step;
    }
    for (size_t i = 0; i < c.n; i++)
        free(c.parts[i]);
    free(c.parts);
    free(c.lens);
    return rc;
}
