/* What a read waits for (sluice_iterator_waiting): the facts are gathered on the client's loop
 * thread, which owns them, by an op; the reason is made from them by wait_reason (waiting.h). */
#include "iterator_internal.h"

#include "waiting.h"

struct iter_waiting_op {
    struct client_op op;
    struct sluice_iterator *it;
    char *buf;
    size_t len;
};

static void run_iter_waiting(struct sluice_client *c, struct client_op *op)
{
    struct iter_waiting_op *w = (struct iter_waiting_op *)op;
    struct sluice_iterator *it = w->it;
    struct wait_facts f = {0};
    char failed[SLUICE_ERRMSG_SIZE] = "";
    client_disp_facts(c, &f);
    /* The heartbeats are the read's calls: their failure is the one that counts. */
    if (rpc_client_connected(c->disp)) {
        f.disp_down = it->hb_why[0] != '\0';
        f.disp_why = it->hb_why;
    }
    f.read = true;
    f.job_id = it->job_id;
    uv_mutex_lock(&it->mu);
    if (it->state == ITER_FAILED)
        snprintf(failed, sizeof failed, "%s", it->fail_msg);
    uv_mutex_unlock(&it->mu);
    f.failed = failed;
    f.have_list = it->tasks.have_list;
    f.no_worker_why = it->sel_waiting;
    f.cut = atomic_load(&it->copies_cut);
    for (size_t i = 0; i < it->tasks.n; i++) {
        const struct tasks_task *t = &it->tasks.v[i];
        if (!t->listed)
            continue;
        if (t->ended) {
            f.ended++;
            continue;
        }
        f.active++;
        if (f.worker)
            continue;
        struct rpc_client *rpc = t->conn ? client_conn_rpc(t->conn) : NULL;
        if (rpc && !rpc_client_connected(rpc) && *rpc_client_why(rpc)) {
            f.worker = t->address;
            f.worker_why = rpc_client_why(rpc);
        } else if (t->fail_streak > 0) {
            f.worker = t->address;
            f.worker_why = t->fail_msg;
        }
    }
    if (it->coordinated) {
        f.consumers = it->num_consumers;
        f.round = it->tasks.round;
        f.round_asked = it->tasks.where == TASKS_ROUND_TASK;
        f.round_task = it->tasks.round_task;
    }
    client_op_done(c, op, wait_reason(&f, w->buf, w->len));
}

int sluice_iterator_waiting(struct sluice_iterator *it, char *buf, size_t len)
{
    if (!it || !buf || len == 0)
        return SLUICE_ERR_INVALID;
    buf[0] = '\0';
    if (it->repeating)
        return iter_repeat_waiting(it, buf, len);
    if (it->mixing)
        return iter_mix_waiting(it, buf, len);
    struct iter_waiting_op w = {.op = {.run = run_iter_waiting}, .it = it, .buf = buf, .len = len};
    return client_submit(it->c, &w.op);
}

void iter_append_reason(struct sluice_iterator *it, char *err, size_t errlen)
{
    char why[SLUICE_ERRMSG_SIZE];
    if (!err || errlen == 0 || sluice_iterator_waiting(it, why, sizeof why) <= 0)
        return;
    size_t n = strlen(err);
    if (n + 2 < errlen)
        snprintf(err + n, errlen - n, ": %s", why);
}
