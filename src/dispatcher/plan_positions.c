/* Planning the positions consumers of named jobs keep with the dispatcher (struct st_jobpos,
 * plan.h), and the cut that makes a job position of them. */
#include "plan_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Whether a client reading job `have` may keep positions under `name`: its own job's name, or
 * the name of the mix whose input it reads ("NAME.input0" ... "NAME.input63", "NAME.choice"). A
 * job merely named "NAME.something" keeps under its own name only. */
static bool name_is_clients(const char *name, const char *have)
{
    if (strcmp(name, have) == 0)
        return true;
    size_t n = strlen(name);
    if (strncmp(name, have, n) != 0 || have[n] != '.')
        return false;
    const char *rest = have + n + 1;
    if (strcmp(rest, "choice") == 0)
        return true;
    if (strncmp(rest, "input", 5) != 0 || !rest[5])
        return false;
    for (const char *p = rest + 5; *p; p++)
        if (*p < '0' || *p > '9' || p - (rest + 5) >= 2)
            return false;
    return true;
}

int plan_jobpos_report(const struct state *s, uint64_t client_id, const char *job_name,
                       uint64_t step, const uint8_t *pos, size_t len, struct st_update_list *out,
                       char *err, size_t errlen)
{
    const struct st_client *cl = state_client(s, client_id);
    if (!cl)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "client %" PRIu64 " not found",
                       client_id);
    const struct st_iteration *it = state_iteration(s, cl->iteration_id);
    const struct st_job *job = it ? state_job(s, it->job_id) : NULL;
    if (!job)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "client %" PRIu64 " reads no job",
                       client_id);
    if (!job->name[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "positions are kept for named jobs; this reader's job has no name");
    if (!job_name[0] || !name_is_clients(job_name, job->name))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "this reader reads job '%s', not '%s'",
                       job->name, job_name);
    if (step == 0 || step > ST_JOBPOS_STEP_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "step %" PRIu64 " is out of range (1 to %" PRIu64 ")", step,
                       (uint64_t)ST_JOBPOS_STEP_MAX);
    if (!pos || len < 8 || memcmp(pos, "SLUICE", 6) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the bytes given are not a read's position (sluice_iterator_save)");
    if (len > ST_JOBPOS_BYTES_MAX)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "a position of %zu bytes is more than the %u the dispatcher keeps", len,
                       ST_JOBPOS_BYTES_MAX);
    const struct st_jobpos *r = state_jobpos(s, job_name);
    if (r && r->generation > cl->iteration_id)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "job '%s' is read in a later iteration (%" PRIu64 ") than this reader's "
                       "(%" PRIu64 ")",
                       job_name, r->generation, cl->iteration_id);
    const struct st_jobpos_consumer *c = NULL;
    bool fresh = !r || r->generation < cl->iteration_id;
    for (size_t i = 0; !fresh && i < r->nconsumers; i++)
        if (r->consumers[i].client_id == client_id)
            c = &r->consumers[i];
    if (!fresh && !c && r->nconsumers >= ST_JOBPOS_CONSUMERS_MAX)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "job '%s': %d consumers keep positions, the most a job may have", job_name,
                       ST_JOBPOS_CONSUMERS_MAX);
    uint64_t freed = 0;
    if (c && c->nreports == ST_JOBPOS_STEPS && step < c->reports[0].step)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "step %" PRIu64 " is older than every step this reader kept (%" PRIu64
                       " to %" PRIu64 ")",
                       step, c->reports[0].step, c->reports[c->nreports - 1].step);
    for (size_t k = 0; c && k < c->nreports; k++)
        if (c->reports[k].step == step)
            freed = c->reports[k].len;
    if (c && !freed && c->nreports == ST_JOBPOS_STEPS)
        freed = c->reports[0].len;
    if (s->jobpos_bytes - freed + len > ST_JOBPOS_TOTAL_MAX)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "the positions kept hold %" PRIu64 " bytes; %zu more would pass the %u "
                       "the dispatcher keeps",
                       s->jobpos_bytes, len, ST_JOBPOS_TOTAL_MAX);
    struct st_update *u = plan_push(out, ST_JOB_POSITION, client_id);
    if (!u || !(u->def = malloc(len))) {
        if (u)
            state_list_truncate(out, out->n - 1);
        return NOMEM_MSG(err, errlen);
    }
    memcpy(u->def, pos, len);
    u->def_len = len;
    memcpy(u->name, job_name, strlen(job_name) + 1);
    u->ref = cl->iteration_id;
    u->start = step;
    return 0;
}

int plan_jobpos_cut(const struct state *s, const char *job_name, uint64_t step,
                    struct plan_jobpos_pick *picks, size_t *npicks, uint64_t *cut,
                    uint64_t *generation, char *err, size_t errlen)
{
    *npicks = 0;
    *cut = 0;
    *generation = 0;
    const struct st_jobpos *r = state_jobpos(s, job_name);
    if (!r || r->nconsumers == 0)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                       "no position is kept for job '%s' (its readers keep theirs as they "
                       "checkpoint)",
                       job_name);
    /* The latest step every consumer still reading has reached; a consumer that left (its
     * client released, or timed out) reaches no further, and stops counting. When none reads
     * any more: the latest step any reached. */
    uint64_t at = step;
    if (at == 0) {
        uint64_t live = UINT64_MAX, any = 0;
        for (size_t i = 0; i < r->nconsumers; i++) {
            const struct st_jobpos_consumer *c = &r->consumers[i];
            uint64_t last = c->nreports ? c->reports[c->nreports - 1].step : 0;
            any = last > any ? last : any;
            if (state_client(s, c->client_id) && last < live)
                live = last;
        }
        at = live != UINT64_MAX ? live : any;
    }
    for (size_t i = 0; i < r->nconsumers; i++) {
        const struct st_jobpos_consumer *c = &r->consumers[i];
        const struct st_jobpos_report *pick = NULL;
        for (size_t k = 0; k < c->nreports; k++)
            if (c->reports[k].step <= at)
                pick = &c->reports[k];
        /* A consumer whose first step came after the cut had nothing then. */
        if (!pick && c->nreports < ST_JOBPOS_STEPS)
            continue;
        if (!pick)
            return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                           "job '%s': a consumer (client %" PRIu64 ") kept no position at or "
                           "before step %" PRIu64 " (it keeps its last %d: steps %" PRIu64
                           " to %" PRIu64 ")",
                           job_name, c->client_id, at, ST_JOBPOS_STEPS, c->reports[0].step,
                           c->reports[c->nreports - 1].step);
        picks[*npicks] =
            (struct plan_jobpos_pick){c->client_id, pick->step, pick->bytes, pick->len};
        (*npicks)++;
    }
    if (*npicks == 0)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                       "job '%s': no consumer kept a position at or before step %" PRIu64, job_name,
                       at);
    *cut = at;
    *generation = r->generation;
    return 0;
}
