/* SetMixWeights and GetMixSchedule: the weights schedules of named mix jobs (docs/pipelines.md
 * "Mixing datasets", struct st_mix). A reader of a named sample_from_datasets job asks for the
 * schedule up to a horizon before it draws past the last one it was given; a change is planned
 * at or after every horizon granted, so every reader applies it at the same output position.
 * Both answer once their updates are durable: a horizon a restarted dispatcher forgot could let
 * a change land below a position already drawn. */
#include "observe.h"
#include "plan.h"
#include "server_internal.h"

#include "common/names.h"

#include <stdlib.h>
#include <string.h>

struct mix_ctx {
    struct req r;
    char dataset_id[ST_ID_MAX];
    char job_name[ST_ID_MAX];
    bool set;      /* SetMixWeights (else GetMixSchedule) */
    uint64_t from; /* SetMixWeights: where the change takes effect */
};

/* The inputs of dataset_id when it is a sample_from_datasets, else 0 with the refusal in msg. */
static size_t sample_inputs(struct dispatcher *d, const char *dataset_id, int *code, char *msg,
                            size_t len)
{
    const struct st_dataset *ds = state_dataset(&d->st, dataset_id);
    if (!ds) {
        *code = SLUICE_ERR_NOT_FOUND;
        snprintf(msg, len, "dataset '%s' not found", dataset_id);
        return 0;
    }
    const Sluice__DatasetDef *def = dispatcher_dataset_def(d, ds);
    if (!def) {
        *code = SLUICE_ERR_NOMEM;
        snprintf(msg, len, "out of memory");
        return 0;
    }
    if (!def->source || def->source->kind != SLUICE__SOURCE_DEF__KIND__SAMPLE_FROM_DATASETS ||
        def->source->n_inputs == 0) {
        *code = SLUICE_ERR_INVALID;
        snprintf(msg, len,
                 "dataset '%s' is not a sample_from_datasets: only a sampled mix has weights",
                 dataset_id);
        return 0;
    }
    return def->source->n_inputs;
}

static void reply_schedule(struct dispatcher *d, struct mix_ctx *c)
{
    const struct st_mix *m = state_mix(&d->st, c->dataset_id, c->job_name);
    size_t n = m ? m->nchanges : 0;
    Sluice__MixChange *ch = calloc(n ? n : 1, sizeof *ch);
    Sluice__MixChange **chp = calloc(n ? n : 1, sizeof *chp);
    if (!ch || !chp) {
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            Sluice__MixChange init = SLUICE__MIX_CHANGE__INIT;
            ch[i] = init;
            ch[i].from = m->changes[i].from;
            ch[i].n_weights = m->changes[i].nweights;
            ch[i].weights = m->changes[i].weights;
            chp[i] = &ch[i];
        }
        Sluice__GetMixScheduleReply body = SLUICE__GET_MIX_SCHEDULE_REPLY__INIT;
        body.horizon = m ? m->horizon : 0;
        body.n_changes = n;
        body.changes = chp;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_MIX_SCHEDULE_REPLY;
        env.get_mix_schedule_reply = &body;
        dispatcher_send_reply(&c->r, &env);
    }
    free(ch);
    free(chp);
}

static void mix_done(struct dispatcher *d, int status, void *ctx)
{
    struct mix_ctx *c = ctx;
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
    } else if (c->set) {
        Sluice__SetMixWeightsReply body = SLUICE__SET_MIX_WEIGHTS_REPLY__INIT;
        body.from = c->from;
        body.dataset_id = c->dataset_id;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_SET_MIX_WEIGHTS_REPLY;
        env.set_mix_weights_reply = &body;
        dispatcher_send_reply(&c->r, &env);
    } else {
        reply_schedule(d, c);
    }
    dispatcher_req_done(&c->r);
    free(c);
}

/* Checks the names of a request; the dataset id may be empty when allow_no_dataset. */
static int check_names(const char *job_name, const char *dataset_id, bool allow_no_dataset,
                       char *msg, size_t len)
{
    int rc = name_check("job name", job_name, NAME_ID_MAX, msg, len);
    if (rc == 0)
        rc = name_check("dataset id", dataset_id, NAME_ID_MAX, msg, len);
    if (rc < 0)
        return rc;
    if (!job_name[0])
        return err_set(msg, len, SLUICE_ERR_INVALID, "a mix's weights belong to a named job");
    if (!dataset_id[0] && !allow_no_dataset)
        return err_set(msg, len, SLUICE_ERR_INVALID, "a dataset id is required");
    return 0;
}

static void plan_and_commit(struct dispatcher *d, struct rpc_conn *conn, uint64_t id,
                            struct mix_ctx *proto)
{
    struct mix_ctx *c = malloc(sizeof *c);
    if (!c) {
        st_update_list_clear(&d->ups);
        dispatcher_refuse(conn, id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    *c = *proto;
    dispatcher_req_init(&c->r, d, conn, id);
    dispatcher_commit(d, &d->ups, mix_done, c);
}

void dispatcher_on_set_mix_weights(struct dispatcher *d, struct rpc_conn *conn,
                                   const Sluice__Envelope *env)
{
    const Sluice__SetMixWeightsRequest *q = env->set_mix_weights;
    char msg[SLUICE_ERRMSG_SIZE];
    int code = check_names(q->job_name, q->dataset_id, true, msg, sizeof msg);
    const char *dataset_id = q->dataset_id;
    if (code == 0 && !dataset_id[0])
        code = plan_mix_find(&d->st, q->job_name, &dataset_id, msg, sizeof msg);
    size_t ninputs = 0;
    if (code == 0 && (ninputs = sample_inputs(d, dataset_id, &code, msg, sizeof msg)) == 0)
        code = code ? code : SLUICE_ERR_INVALID;
    struct mix_ctx proto = {.set = true};
    if (code == 0)
        code = plan_mix_set_weights(&d->st, dataset_id, q->job_name, ninputs, q->weights,
                                    q->n_weights, q->at, &d->ups, &proto.from, msg, sizeof msg);
    if (code < 0) {
        dispatcher_refuse(conn, env->id, code, msg);
        return;
    }
    memcpy(proto.dataset_id, dataset_id, strlen(dataset_id) + 1);
    memcpy(proto.job_name, q->job_name, strlen(q->job_name) + 1);
    plan_and_commit(d, conn, env->id, &proto);
}

void dispatcher_on_get_mix_schedule(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env)
{
    const Sluice__GetMixScheduleRequest *q = env->get_mix_schedule;
    char msg[SLUICE_ERRMSG_SIZE];
    int code = check_names(q->job_name, q->dataset_id, false, msg, sizeof msg);
    if (code == 0 && sample_inputs(d, q->dataset_id, &code, msg, sizeof msg) == 0)
        code = code ? code : SLUICE_ERR_INVALID;
    if (code == 0)
        code = plan_mix_horizon(&d->st, q->dataset_id, q->job_name, q->horizon, &d->ups, msg,
                                sizeof msg);
    if (code < 0) {
        dispatcher_refuse(conn, env->id, code, msg);
        return;
    }
    /* What the reader drew: the realized shares of the status. */
    if (q->n_drawn)
        observe_mix_drawn(d->obs, q->dataset_id, q->job_name, q->reader, q->drawn, q->n_drawn,
                          uv_now(d->loop));
    struct mix_ctx proto = {.set = false};
    memcpy(proto.dataset_id, q->dataset_id, strlen(q->dataset_id) + 1);
    memcpy(proto.job_name, q->job_name, strlen(q->job_name) + 1);
    plan_and_commit(d, conn, env->id, &proto);
}
