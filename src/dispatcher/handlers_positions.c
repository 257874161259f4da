/* ReportPosition and GetJobPosition: the positions consumers of named jobs keep with the
 * dispatcher at their checkpoint steps, and the job position taken from them (struct st_jobpos,
 * docs/snapshots.md "The job's position"). A report is answered once durable: a consumer that
 * was told its position is kept may die, and the dispatcher restart, without losing it. */
#include "plan.h"
#include "server_internal.h"

#include "common/names.h"

#include <stdlib.h>
#include <string.h>

struct report_ctx {
    struct req r;
};

static void report_done(struct dispatcher *d, int status, void *ctx)
{
    (void)d;
    struct report_ctx *c = ctx;
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
    } else {
        Sluice__ReportPositionReply body = SLUICE__REPORT_POSITION_REPLY__INIT;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_REPORT_POSITION_REPLY;
        env.report_position_reply = &body;
        dispatcher_send_reply(&c->r, &env);
    }
    dispatcher_req_done(&c->r);
    free(c);
}

void dispatcher_on_report_position(struct dispatcher *d, struct rpc_conn *conn,
                                   const Sluice__Envelope *env)
{
    const Sluice__ReportPositionRequest *q = env->report_position;
    char msg[SLUICE_ERRMSG_SIZE];
    int code = name_check("job name", q->job_name, NAME_ID_MAX, msg, sizeof msg);
    const struct st_client *cl = code == 0 ? state_client(&d->st, q->client_id) : NULL;
    if (code == 0 && !cl)
        code = err_set(msg, sizeof msg, SLUICE_ERR_NOT_FOUND, "client %" PRIu64 " not found",
                       q->client_id);
    if (code == 0 &&
        !dispatcher_client_key_ok(d, cl, q->client_key.data, q->client_key.len, msg, sizeof msg)) {
        ratelimit_warn(&d->refusals, uv_now(d->loop), "", rpc_conn_peer_name(conn),
                       "refused a position for client %" PRIu64 ": wrong client key", q->client_id);
        code = SLUICE_ERR_DENIED;
    }
    if (code == 0)
        code = plan_jobpos_report(&d->st, q->client_id, q->job_name, q->step, q->position.data,
                                  q->position.len, &d->ups, msg, sizeof msg);
    struct report_ctx *c = code == 0 ? malloc(sizeof *c) : NULL;
    if (code == 0 && !c) {
        st_update_list_clear(&d->ups);
        code = err_set(msg, sizeof msg, SLUICE_ERR_NOMEM, "out of memory");
    }
    if (code < 0) {
        dispatcher_refuse(conn, env->id, code, msg);
        return;
    }
    dispatcher_req_init(&c->r, d, conn, env->id);
    dispatcher_commit(d, &d->ups, report_done, c);
}

void dispatcher_on_get_job_position(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env)
{
    const Sluice__GetJobPositionRequest *q = env->get_job_position;
    char msg[SLUICE_ERRMSG_SIZE];
    int code = name_check("job name", q->job_name, NAME_ID_MAX, msg, sizeof msg);
    if (code == 0 && !q->job_name[0])
        code = err_set(msg, sizeof msg, SLUICE_ERR_INVALID, "a job name is required");
    struct plan_jobpos_pick *picks =
        code == 0 ? malloc(ST_JOBPOS_CONSUMERS_MAX * sizeof *picks) : NULL;
    if (code == 0 && !picks)
        code = err_set(msg, sizeof msg, SLUICE_ERR_NOMEM, "out of memory");
    size_t n = 0;
    uint64_t cut = 0, generation = 0;
    if (code == 0)
        code = plan_jobpos_cut(&d->st, q->job_name, q->step, picks, &n, &cut, &generation, msg,
                               sizeof msg);
    Sluice__ConsumerPosition *ps = code == 0 ? calloc(n, sizeof *ps) : NULL;
    Sluice__ConsumerPosition **pp = code == 0 ? calloc(n, sizeof *pp) : NULL;
    if (code == 0 && (!ps || !pp))
        code = err_set(msg, sizeof msg, SLUICE_ERR_NOMEM, "out of memory");
    if (code < 0) {
        dispatcher_refuse(conn, env->id, code, msg);
    } else {
        for (size_t i = 0; i < n; i++) {
            Sluice__ConsumerPosition init = SLUICE__CONSUMER_POSITION__INIT;
            ps[i] = init;
            ps[i].consumer = picks[i].client_id;
            ps[i].step = picks[i].step;
            ps[i].position.data = (uint8_t *)picks[i].bytes;
            ps[i].position.len = picks[i].len;
            pp[i] = &ps[i];
        }
        Sluice__GetJobPositionReply body = SLUICE__GET_JOB_POSITION_REPLY__INIT;
        body.step = cut;
        body.iteration = generation;
        body.n_positions = n;
        body.positions = pp;
        Sluice__Envelope renv = SLUICE__ENVELOPE__INIT;
        renv.body_case = SLUICE__ENVELOPE__BODY_GET_JOB_POSITION_REPLY;
        renv.get_job_position_reply = &body;
        int rc = rpc_conn_reply(conn, env->id, &renv);
        if (rc < 0 && rc != SLUICE_ERR_CLOSED)
            rpc_conn_reply_error(conn, env->id, rc, "reply: %s", sluice_strerror(rc));
    }
    free(ps);
    free(pp);
    free(picks);
}
