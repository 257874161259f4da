/* Planning the weights schedules of named mix jobs (struct st_mix, plan.h). */
#include "plan_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int plan_mix_horizon(const struct state *s, const char *dataset_id, const char *job_name,
                     uint64_t want, struct st_update_list *out, char *err, size_t errlen)
{
    if (!job_name[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a weights schedule needs a job name");
    if (want > PLAN_MIX_POSITION_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "position %" PRIu64 " is out of range (at most %" PRIu64 ")", want,
                       (uint64_t)PLAN_MIX_POSITION_MAX);
    const struct st_mix *m = state_mix(s, dataset_id, job_name);
    if (m && want <= m->horizon)
        return 0;
    if (!m && s->nmixes >= ST_MIX_MAX)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "weights schedules: %d named mix jobs are known, the most the dispatcher "
                       "keeps",
                       ST_MIX_MAX);
    struct st_update *u = plan_push(out, ST_MIX_WEIGHTS, 0);
    if (!u)
        return NOMEM_MSG(err, errlen);
    memcpy(u->name, job_name, strlen(job_name) + 1);
    memcpy(u->name2, dataset_id, strlen(dataset_id) + 1);
    u->start = m && want < m->horizon ? m->horizon : want;
    return 0;
}

int plan_mix_find(const struct state *s, const char *job_name, const char **dataset_id, char *err,
                  size_t errlen)
{
    const struct st_mix *found = NULL;
    size_t n = 0;
    for (size_t i = 0; i < s->nmixes; i++)
        if (strcmp(s->mixes[i].job_name, job_name) == 0) {
            n++;
            if (!found)
                found = &s->mixes[i];
        }
    if (n == 0)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                       "no mix is read as job '%s' (its readers make it known as they start; "
                       "give the mix's dataset id to set weights before that)",
                       job_name);
    if (n > 1)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "job '%s' names %zu mixes (datasets '%s' and others): give the dataset id",
                       job_name, n, found->dataset_id);
    *dataset_id = found->dataset_id;
    return 0;
}

int plan_mix_set_weights(const struct state *s, const char *dataset_id, const char *job_name,
                         size_t ninputs, const double *weights, size_t n, uint64_t at,
                         struct st_update_list *out, uint64_t *from, char *err, size_t errlen)
{
    if (!job_name[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID, "weights are set for a named job");
    if (n != ninputs)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "job '%s': the mix has %zu inputs, %zu weights given", job_name, ninputs, n);
    if (!state_mix_weights_valid(weights, n))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "job '%s': weights must be finite numbers >= 0, not all 0", job_name);
    const struct st_mix *m = state_mix(s, dataset_id, job_name);
    if (!m && s->nmixes >= ST_MIX_MAX)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "weights schedules: %d named mix jobs are known, the most the dispatcher "
                       "keeps",
                       ST_MIX_MAX);
    if (m && m->nchanges >= ST_MIX_CHANGES_MAX)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "job '%s': %d weight changes, the most a job keeps", job_name,
                       ST_MIX_CHANGES_MAX);
    /* The earliest position no reader may have drawn: the horizon, past the last change. */
    uint64_t first = m ? m->horizon : 0;
    if (m && m->nchanges && first <= m->changes[m->nchanges - 1].from)
        first = m->changes[m->nchanges - 1].from + 1;
    if (at > PLAN_MIX_POSITION_MAX || first > PLAN_MIX_POSITION_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "job '%s': position %" PRIu64 " is out of range (at most %" PRIu64 ")",
                       job_name, at > first ? at : first, (uint64_t)PLAN_MIX_POSITION_MAX);
    if (at && at < first)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "job '%s': position %" PRIu64 " may already be read (its readers know the "
                       "weights up to %" PRIu64 "); the earliest is %" PRIu64,
                       job_name, at, first, first);
    struct st_update *u = plan_push(out, ST_MIX_WEIGHTS, 0);
    if (!u || !(u->weights = malloc(n * sizeof *weights))) {
        state_list_truncate(out, out->n - (u != NULL));
        return NOMEM_MSG(err, errlen);
    }
    memcpy(u->weights, weights, n * sizeof *weights);
    u->nweights = n;
    memcpy(u->name, job_name, strlen(job_name) + 1);
    memcpy(u->name2, dataset_id, strlen(dataset_id) + 1);
    u->ref = at ? at : first;
    u->start = m ? m->horizon : 0;
    *from = u->ref;
    return 0;
}
