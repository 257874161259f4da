/* Changing a mix's weights (sluice.h, docs/pipelines.md "Mixing datasets"): SetMixWeights as a
 * blocking dispatcher call, after a local check that refuses what no dispatcher would accept. */
#include "mixweights.h"
#include "client.h"

#include "common/error.h"
#include "common/names.h"
#include "pipeline/format.h"
#include "pipeline/spec.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int take_reply(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mixweights_reply *out = user;
    const Sluice__SetMixWeightsReply *r = reply->set_mix_weights_reply;
    if (!r)
        return 0;
    out->from = r->from;
    snprintf(out->dataset_id, sizeof out->dataset_id, "%s", r->dataset_id ? r->dataset_id : "");
    return 0;
}

int mixweights_check(const char *job_name, const char *dataset_id, const double *weights, size_t n,
                     char *err, size_t errlen)
{
    if (!job_name || !job_name[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a job name is required");
    int rc = name_check("job name", job_name, NAME_ID_MAX, err, errlen);
    if (rc < 0)
        return rc;
    if (dataset_id && dataset_id[0]) {
        rc = name_check("dataset id", dataset_id, NAME_ID_MAX, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (!weights || n == 0 || n > PIPE_MIX_MAX_INPUTS)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "weights: expected 1 to %d (one per input of the mix), found %zu",
                       PIPE_MIX_MAX_INPUTS, weights ? n : (size_t)0);
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(weights[i]) && weights[i] >= 0) {
            any = any || weights[i] > 0;
            continue;
        }
        char num[PIPE_FLOAT_BUF];
        pipe_format_f64(weights[i], num);
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "weight %zu is %s, expected a %snumber >= 0", i, num,
                       isfinite(weights[i]) ? "" : "finite ");
    }
    if (!any)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "weights: every weight is 0, expected at least one above 0");
    return 0;
}

int mixweights_set(struct sluice_client *client, const char *job_name, const char *dataset_id,
                   const double *weights, size_t n, uint64_t at, struct mixweights_reply *out,
                   char *err, size_t errlen)
{
    struct mixweights_reply tmp;
    if (!out)
        out = &tmp;
    memset(out, 0, sizeof *out);
    if (!client)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a client is required");
    int rc = mixweights_check(job_name, dataset_id, weights, n, err, errlen);
    if (rc < 0)
        return rc;
    /* A copy without -0.0, as the pipeline parser keeps weights, so the journal holds one
     * spelling of each weight. */
    double w[PIPE_MIX_MAX_INPUTS];
    for (size_t i = 0; i < n; i++)
        w[i] = weights[i] == 0 ? 0 : weights[i];
    Sluice__SetMixWeightsRequest req = SLUICE__SET_MIX_WEIGHTS_REQUEST__INIT;
    req.job_name = (char *)job_name;
    req.dataset_id = (char *)(dataset_id ? dataset_id : "");
    req.n_weights = n;
    req.weights = w;
    req.at = at;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_SET_MIX_WEIGHTS;
    env.set_mix_weights = &req;
    return client_request(client, &env, SLUICE__ENVELOPE__BODY_SET_MIX_WEIGHTS_REPLY, take_reply,
                          out, NULL, err, errlen);
}

int sluice_set_weights(struct sluice_client *client, const char *job_name, const char *dataset_id,
                       const double *weights, size_t n, uint64_t at, uint64_t *from, char *err,
                       size_t errlen)
{
    struct mixweights_reply r;
    if (from)
        *from = 0;
    int rc = mixweights_set(client, job_name, dataset_id, weights, n, at, &r, err, errlen);
    if (rc == 0 && from)
        *from = r.from;
    return rc;
}
