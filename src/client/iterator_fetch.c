/* The iterator's loop thread, fetching: GetElements calls to the workers of the read's tasks,
 * the payloads they bring into the prefetch buffer, and the pump that decides what to fetch
 * next. */

#include "iterator_internal.h"

/* ---- loop thread: fetching elements ------------------------------------------------------- */

void iter_unref(struct sluice_iterator *it)
{
    if (--it->refs == 0)
        iter_free(it);
}

static void pump(struct sluice_iterator *it);

/* Whether the read takes whole copies, whose every element is accounted for (tasks.h,
 * ct_check_end): not in splits (the ledger accounts for those) and not in rounds (a round no
 * consumer got is skipped by design). */
static bool whole_copies(const struct sluice_iterator *it)
{
    return it->mode != SLUICE_DISTRIBUTED_EPOCH && !it->coordinated;
}

void iter_settle(struct sluice_iterator *it)
{
    struct ct_task t;
    while (ct_reap(&it->tasks, &t)) {
        char msg[MSG_MAX];
        int rc = whole_copies(it) ? ct_check_gone(&t, msg, sizeof msg) : 0;
        if (rc < 0)
            iter_fail(it, rc, "%s", msg);
        if (t.conn)
            client_conn_release(it->c, t.conn);
    }
    /* A whole copy's task that left is judged (ct_check_gone) once its last request is back,
     * before the read may end: that request may still bring its end of sequence. */
    if (ct_done(&it->tasks) && !(whole_copies(it) && ct_unlisted(&it->tasks)))
        iter_end(it);
    else
        iter_hasten_heartbeat(it);
    pump(it);
}

struct fetch {
    struct sluice_iterator *it;
    uint64_t task_id;
    uint64_t round;         /* coordinated reads: the round asked for */
    struct rpc_client *rpc; /* the connection the request went out on */
};

/* Makes a prefetch item of a reply's payload. A payload received in a frame buffer of its own is
 * taken over with that buffer; a small one is copied. Returns 0 or SLUICE_ERR_NOMEM. */
static int item_from_reply(struct sluice_iterator *it, struct rpc_client *rpc,
                           const Sluice__GetElementsReply *r, struct prefetch_item *item)
{
    if (r->payload.len) {
        item->block = rpc_client_take_reply(rpc, &item->block_cap);
        if (item->block) {
            item->data = r->payload.data;
            item->pool = it->c->pool;
            return 0;
        }
    }
    item->data = malloc(r->payload.len ? r->payload.len : 1);
    if (!item->data)
        return SLUICE_ERR_NOMEM;
    if (r->payload.len)
        memcpy(item->data, r->payload.data, r->payload.len);
    return 0;
}

/* distributed_epoch: records in the ledger the elements and end markers of a payload that just
 * arrived, and lists in item->skip the records the reader is to step over: elements received
 * before (a re-issued split, a retried request) and end markers. Returns 0, SLUICE_ERR_NOMEM,
 * or SLUICE_ERR_CORRUPT with a message in err. */
static int note_payload(struct sluice_iterator *it, struct prefetch_item *item, char *err,
                        size_t errlen)
{
    size_t pos = 0, cap = 0;
    uint32_t index = 0;
    bool run = false; /* [run_begin, run_end) of split run_seq: new positions not yet recorded */
    uint64_t run_seq = 0, run_begin = 0, run_end = 0, run_limit = 0;
    int rc = 0;
    for (;; index++) {
        struct codec_mark m;
        int kind = codec_scan_record(item->data, item->len, &pos, &m);
        if (kind == CODEC_NO_MORE)
            break;
        if (kind < 0) {
            rc = err_set(err, errlen, SLUICE_ERR_CORRUPT,
                         "elements of task %" PRIu64 ": record %" PRIu32 " is damaged",
                         item->task_id, index);
            break;
        }
        if (kind == CODEC_ELEMENT && !m.tagged)
            continue;
        bool fresh = false;
        if (kind == CODEC_ELEMENT) {
            if (run && m.seq == run_seq && m.pos == run_end && m.pos < run_limit) {
                run_end++;
                continue;
            }
            if (run && (rc = ledger_add(&it->ledger, run_seq, run_begin, run_end)) < 0)
                break;
            run = false;
            uint64_t limit = 0;
            fresh = ledger_is_new(&it->ledger, m.seq, m.pos, &limit);
            if (fresh) {
                run = true;
                run_seq = m.seq;
                run_begin = m.pos;
                run_end = m.pos + 1;
                run_limit = limit;
                continue;
            }
            it->ledger.dropped++;
            /* A split this consumer had before a restore: the dispatcher hears it had it. */
            if (it->ledger.had.n && (rc = ledger_note_had(&it->ledger, m.seq)) < 0)
                break;
        } else {
            if (run && (rc = ledger_add(&it->ledger, run_seq, run_begin, run_end)) < 0)
                break;
            run = false;
            rc = ledger_end(&it->ledger, m.seq, m.pos);
            if (rc == SLUICE_ERR_CORRUPT) {
                err_set(err, errlen, rc,
                        "split %" PRIu64 " ended with %" PRIu64
                        " elements and with another count before: its pipeline is not "
                        "deterministic",
                        m.seq, m.pos);
                break;
            }
            if (rc < 0)
                break;
            if (ledger_complete(&it->ledger, m.seq))
                it->acks_due = true;
        }
        if (item->nskip == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            uint32_t *v = realloc(item->skip, ncap * sizeof *v);
            if (!v) {
                rc = SLUICE_ERR_NOMEM;
                break;
            }
            item->skip = v;
            cap = ncap;
        }
        item->skip[item->nskip++] = index;
    }
    if (rc == 0 && run)
        rc = ledger_add(&it->ledger, run_seq, run_begin, run_end);
    if (rc == SLUICE_ERR_NOMEM)
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    return rc;
}

static void on_elements(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct fetch *f = user;
    struct sluice_iterator *it = f->it;
    uint64_t task_id = f->task_id, round = f->round;
    struct rpc_client *rpc = f->rpc;
    if (it->coord_fetch == f)
        it->coord_fetch = NULL;
    free(f);

    if (it->closing) {
        uv_mutex_lock(&it->mu);
        prefetch_cancel(&it->pf);
        uv_mutex_unlock(&it->mu);
        iter_unref(it);
        return;
    }
    long i = ct_find(&it->tasks, task_id);
    /* A task with a request outstanding is never dropped. */
    assert(i >= 0);
    if (i < 0) {
        uv_mutex_lock(&it->mu);
        prefetch_cancel(&it->pf);
        uv_mutex_unlock(&it->mu);
        iter_unref(it);
        return;
    }
    uint64_t now = uv_now(&it->c->loop);
    const Sluice__GetElementsReply *r = NULL;
    if (status == 0) {
        r = reply->body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY
                ? reply->get_elements_reply
                : NULL;
        if (!r) {
            status = SLUICE_ERR_PROTOCOL;
            msg = "worker sent an unexpected reply to GetElements";
        }
    }
    if (status < 0) {
        uv_mutex_lock(&it->mu);
        prefetch_cancel(&it->pf);
        uv_mutex_unlock(&it->mu);
        ct_on_failure(&it->tasks, (size_t)i, now);
        /* A worker answers UNAVAILABLE for a task it does not run (yet), which is retried;
         * any other failure is the task's own (its pipeline failed) and ends the read. */
        if (!retry_task(status))
            iter_fail(it, status, "%s", msg ? msg : "");
    } else {
        bool has_data = r->count > 0 || r->payload.len > 0;
        int rc;
        struct prefetch_item item = {
            .len = r->payload.len, .count = r->count, .task_id = task_id, .round = round};
        if (has_data && item_from_reply(it, rpc, r, &item) != 0) {
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            ct_on_failure(&it->tasks, (size_t)i, now);
            iter_fail(it, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
            goto out;
        }
        char nmsg[MSG_MAX];
        if (has_data && it->mode == SLUICE_DISTRIBUTED_EPOCH &&
            (rc = note_payload(it, &item, nmsg, sizeof nmsg)) < 0) {
            prefetch_item_free(&item);
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            ct_on_failure(&it->tasks, (size_t)i, now);
            iter_fail(it, rc, "%s", nmsg);
            goto out;
        }
        if (it->acks_due)
            iter_schedule_acks(it);
        uv_mutex_lock(&it->mu);
        /* Once the read has ended or failed, late elements (from a task the dispatcher had
         * dropped) are not handed out: the reader may have seen the end already. */
        if (has_data && it->state == ITER_RUNNING) {
            prefetch_fill(&it->pf, item);
            memset(&item, 0, sizeof item);
            uv_cond_broadcast(&it->cond);
        } else {
            prefetch_cancel(&it->pf);
        }
        uv_mutex_unlock(&it->mu);
        prefetch_item_free(&item);
        ct_on_reply(&it->tasks, (size_t)i, r->count, r->end_of_sequence, now);
        if (r->end_of_sequence && r->counted && whole_copies(it) &&
            (rc = ct_check_end(&it->tasks.v[i], r->delivered, nmsg, sizeof nmsg)) < 0)
            iter_fail(it, rc, "%s", nmsg);
    }
out:
    iter_settle(it);
    iter_unref(it);
}

/* Sends a GetElements to task i. Returns 0 or the code of rpc_call. */
static int fetch(struct sluice_iterator *it, size_t i)
{
    struct ct_task *t = &it->tasks.v[i];
    struct fetch *f = malloc(sizeof *f);
    if (!f)
        return SLUICE_ERR_NOMEM;
    f->it = it;
    f->task_id = t->id;
    f->round = it->tasks.round;
    f->rpc = client_conn_rpc(t->conn);
    Sluice__GetElementsRequest req = SLUICE__GET_ELEMENTS_REQUEST__INIT;
    req.task_id = t->id;
    req.client_id = it->client_id;
    req.client_key.data = t->key;
    req.client_key.len = t->key_len;
    /* The worker chooses the element count (0); a coordinated round is one element per
     * consumer. */
    req.max_bytes = ITER_FETCH_MAX_BYTES;
    if (it->coordinated) {
        req.max_elements = 1;
        req.consumer_index = it->consumer_index;
        req.round = it->tasks.round;
    }
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS;
    env.get_elements = &req;
    int rc = rpc_call(f->rpc, &env, ITER_FETCH_TIMEOUT_MS, on_elements, f);
    if (rc) {
        free(f);
        return rc;
    }
    ct_sent(&it->tasks, i);
    it->refs++;
    if (it->coordinated)
        it->coord_fetch = f;
    return 0;
}

/* Coordinated reads: a request to a task the dispatcher no longer lists, still waiting for a
 * connection to its worker (which died), is withdrawn: the worker never saw it, so this consumer
 * may skip the task's rounds at once (tasks.h) instead of waiting out the request's timeout. A
 * request already written stays: its worker may still serve the round to every consumer. */
static void coord_withdraw(struct sluice_iterator *it)
{
    struct fetch *f = it->coord_fetch;
    long i = f ? ct_find(&it->tasks, f->task_id) : -1;
    if (i >= 0 && !it->tasks.v[i].listed)
        rpc_client_withdraw(f->rpc, on_elements, f);
}

static void on_pump_timer(uv_timer_t *t)
{
    pump(t->data);
}

static void arm_pump(struct sluice_iterator *it, uint64_t at, uint64_t now)
{
    uint64_t delay = at > now ? at - now : 0;
    if (uv_is_active((uv_handle_t *)&it->pump_timer) &&
        uv_timer_get_due_in(&it->pump_timer) <= delay)
        return;
    uv_timer_start(&it->pump_timer, on_pump_timer, delay, 0);
}

/* Sends requests while slots are free and some task may be asked. */
static void pump(struct sluice_iterator *it)
{
    if (it->closing || iter_state(it) != ITER_RUNNING)
        return;
    uint64_t now = uv_now(&it->c->loop);
    if (it->coordinated) {
        coord_withdraw(it);
        if (ct_advance(&it->tasks) == CT_ROUND_BEHIND) {
            iter_fail(it, SLUICE_ERR_INVALID,
                      "consumer %" PRIu32 " fell too far behind: it is at round %" PRIu64
                      ", but the job's rounds before %" PRIu64 " are gone",
                      it->consumer_index, it->tasks.round, it->tasks.epochs[0].start);
            return;
        }
        iter_coord_news(it);
    }
    for (;;) {
        uint64_t wake_at;
        long i = ct_pick(&it->tasks, now, &wake_at);
        if (i < 0) {
            if (wake_at)
                arm_pump(it, wake_at, now);
            return;
        }
        uv_mutex_lock(&it->mu);
        bool reserved = it->state == ITER_RUNNING && prefetch_reserve(&it->pf);
        uv_mutex_unlock(&it->mu);
        if (!reserved)
            return;
        if (fetch(it, (size_t)i) != 0) {
            /* Could not even queue the request: give the slot back and let the task wait. */
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            ct_sent(&it->tasks, (size_t)i);
            ct_on_failure(&it->tasks, (size_t)i, now);
        }
    }
}

void iter_on_wake(struct client_waker *w)
{
    struct sluice_iterator *it =
        (struct sluice_iterator *)(void *)((char *)w - offsetof(struct sluice_iterator, waker));
    if (atomic_load(&it->interrupted))
        iter_fail(it, SLUICE_ERR_CANCELLED, "interrupted");
    pump(it);
}
