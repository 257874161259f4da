/* The iterator's loop thread, fetching: GetElements calls to the workers of the read's tasks,
 * the payloads they bring into the prefetch buffer, and the pump that decides what to fetch
 * next. */

#include "iterator_internal.h"

#include "common/inproc.h"
#include "common/shm_region.h"
#include "common/shm_ring.h"
#include "payload_block.h"

/* ---- loop thread: fetching elements ------------------------------------------------------- */

void iter_unref(struct sluice_iterator *it)
{
    if (--it->refs == 0)
        iter_free(it);
}

static void pump(struct sluice_iterator *it);

/* Whether the read takes copies, whose every element is accounted for (tasks.h, tasks_check_end):
 * not in splits (the ledger accounts for those) and not in rounds (a round no consumer got is
 * skipped by design). */
static bool counted_copies(const struct sluice_iterator *it)
{
    return it->mode != SLUICE_DISTRIBUTED_EPOCH && !it->coordinated;
}

void iter_settle(struct sluice_iterator *it)
{
    struct tasks_task t;
    while (tasks_reap(&it->tasks, &t)) {
        char msg[SLUICE_ERRMSG_SIZE];
        int rc = counted_copies(it) ? tasks_judge_gone(&t, it->whole_copies, msg, sizeof msg) : 0;
        /* A copy cut short by its worker's loss: the read goes on with the part it got (a
         * restarted worker's new task is another copy, read from its start), unless every copy
         * must be whole. */
        if (rc < 0)
            iter_fail(it, rc, "%s", msg);
        else if (rc == TASKS_CUT)
            atomic_fetch_add(&it->copies_cut, 1);
        if (t.conn)
            client_conn_release(it->c, t.conn);
    }
    /* A copy's task that left is judged (tasks_check_gone) once its last request is back, before
     * the read may end: that request may still bring its end of sequence. */
    if (tasks_done(&it->tasks) && !(counted_copies(it) && tasks_unlisted(&it->tasks)))
        iter_end(it);
    else
        iter_hasten_heartbeat(it);
    pump(it);
}

struct fetch {
    struct fetch *prev, *next; /* in it->fetches */
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
        /* A payload in a worker's shared region stays where it lies until the reader is done. */
        uint64_t pos;
        struct shm_region *region = rpc_client_take_shm(rpc, &pos);
        if (region) {
            if (r->payload.len > it->shm_largest)
                it->shm_largest = r->payload.len;
            item->lent = payload_block_shm(region, pos);
            if (!item->lent) {
                shm_region_release(region, pos);
                return SLUICE_ERR_NOMEM;
            }
            item->data = r->payload.data;
            return 0;
        }
        size_t cap;
        void *block = rpc_client_take_reply(rpc, &cap);
        if (block && rpc_client_local(rpc)) {
            /* A block from an in-process worker: its large values stay where they lie, and it
             * goes back to the stock that worker takes its next ones from (common/inproc.h)
             * once the item and every tensor that borrowed from it are done. The process's
             * stock outlives them; without one, it is freed. */
            item->lent = payload_block_heap(block, cap, inproc_pool());
            if (!item->lent) {
                free(block);
                return SLUICE_ERR_NOMEM;
            }
            item->data = r->payload.data;
            return 0;
        }
        if (block) {
            item->block = block;
            item->block_cap = cap;
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
        } else if (kind == CODEC_SPLIT_FROM) {
            /* Positions others received before: nothing for this reader to record. */
            if (run && (rc = ledger_add(&it->ledger, run_seq, run_begin, run_end)) < 0)
                break;
            run = false;
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

/* ---- deterministic reads (reorder.h) ---- */

/* Appends an op to it->det_ops[*n]. Returns 0 or SLUICE_ERR_NOMEM. */
static int det_op_push(struct sluice_iterator *it, size_t *n, struct det_op op)
{
    if (*n == it->det_ops_cap) {
        size_t ncap = it->det_ops_cap ? 2 * it->det_ops_cap : 64;
        struct det_op *v = realloc(it->det_ops, ncap * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        it->det_ops = v;
        it->det_ops_cap = ncap;
    }
    it->det_ops[(*n)++] = op;
    return 0;
}

/* The position det_skip_had would step split seq over to, or 0 when there is nothing to step
 * over. */
static uint64_t det_had_past(const struct sluice_iterator *it, uint64_t seq)
{
    if (!it->det_had)
        return 0;
    uint64_t next = reorder_next(&it->ra, seq);
    if (next == UINT64_MAX)
        return 0;
    uint64_t past = ledger_first_missing(&it->ledger, seq, next);
    return past > next ? past : 0;
}

/* A read restored from merged positions had parts of a split after its first gap: once the
 * judge reaches such a part it steps over it (they are never handed out again, and the worker
 * may not send them at all). It must step over as soon as it reaches the part, in the same pass
 * that accepted what lies before it: that acceptance can complete the split in the ledger, whose
 * entry goes once the dispatcher confirms it (ledger_confirmed), and from then on the ledger no
 * longer tells what was had; a later payload bringing the had positions would have them handed
 * out again. A split whose end came before (a production that left it incomplete) is complete
 * once stepped over to its end: that is queued as an op. Returns 0 or SLUICE_ERR_NOMEM. */
static int det_skip_had(struct sluice_iterator *it, size_t *nops, uint64_t seq)
{
    uint64_t past = det_had_past(it, seq);
    if (past == 0)
        return 0;
    bool was = reorder_complete(&it->ra, seq);
    int rc = reorder_accept_seed(&it->ra, seq, past);
    if (rc == 0 && !was && reorder_complete(&it->ra, seq))
        rc = det_op_push(it, nops, (struct det_op){.seq = seq, .complete = true, .total = past});
    return rc;
}

/* Ends the run being cut (if any): records its positions in the ledger, queues it as an op and
 * steps the judge over what the reader had right after it (det_skip_had). Returns 0 or
 * SLUICE_ERR_NOMEM. */
static int det_flush(struct sluice_iterator *it, size_t *nops, struct det_op *run,
                     uint64_t first_pos)
{
    if (run->count == 0)
        return 0;
    it->det_bytes += run->end - run->begin;
    int rc = ledger_add(&it->ledger, run->seq, first_pos, first_pos + run->count);
    if (rc == 0)
        rc = det_op_push(it, nops, *run);
    if (rc == 0)
        rc = det_skip_had(it, nops, run->seq);
    if (rc == 0 && ledger_complete(&it->ledger, run->seq))
        it->acks_due = true;
    run->count = 0;
    return rc;
}

/* Judges the records of a payload that just arrived (reorder_judge), records the accepted ones
 * in the ledger, and queues them as runs of the payload for the reader, which takes them in the
 * canonical order. Takes item (freed when none of it is kept). Returns 0, SLUICE_ERR_NOMEM or
 * SLUICE_ERR_CORRUPT with a message in err. */
static int det_payload(struct sluice_iterator *it, struct prefetch_item *item, char *err,
                       size_t errlen)
{
    struct reorder_blob *blob = reorder_blob_new(item);
    if (!blob) {
        prefetch_item_free(item);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    }
    const uint8_t *data = blob->item.data;
    size_t len = blob->item.len;
    uv_mutex_lock(&it->mu);
    bool room = reorder_queue_room(&it->rq);
    uv_mutex_unlock(&it->mu);
    size_t pos = 0, nops = 0, pushed = 0;
    struct det_op run = {0};
    uint64_t run_pos = 0; /* the position of the run's first record */
    int rc = 0;
    for (uint32_t index = 0;; index++) {
        struct codec_mark m;
        size_t start = pos;
        int kind = codec_scan_record(data, len, &pos, &m);
        if (kind == CODEC_NO_MORE)
            break;
        if (kind < 0 || (kind == CODEC_ELEMENT && !m.tagged)) {
            rc = err_set(err, errlen, SLUICE_ERR_CORRUPT,
                         "elements of task %" PRIu64 ": record %" PRIu32 " is %s",
                         blob->item.task_id, index,
                         kind < 0 ? "damaged" : "not tagged with its split");
            goto out;
        }
        if (kind == CODEC_ELEMENT) {
            /* The judge reached a part this reader had: the run being cut is queued first (a
             * completion the step queues must follow its records; a run of another split ends
             * at this record anyway), then the split is stepped over. */
            if (det_had_past(it, m.seq) && ((rc = det_flush(it, &nops, &run, run_pos)) < 0 ||
                                            (rc = det_skip_had(it, &nops, m.seq)) < 0)) {
                err_set(err, errlen, rc, "%s", sluice_strerror(rc));
                goto out;
            }
            int v = reorder_judge(&it->ra, m.seq, m.pos, room);
            if (v < 0) {
                rc = err_set(err, errlen, v, "%s", sluice_strerror(v));
                goto out;
            }
            if (v == REORDER_ACCEPT || v == REORDER_LAST) {
                /* A run is records next to each other in the payload and in their split: a
                 * production that leaves out positions others had (SplitResume) puts the records
                 * on either side of them next to each other. */
                if (run.count &&
                    (run.seq != m.seq || run.end != start || m.pos != run_pos + run.count) &&
                    (rc = det_flush(it, &nops, &run, run_pos)) < 0)
                    goto out;
                if (run.count == 0) {
                    run = (struct det_op){.seq = m.seq, .begin = start};
                    run_pos = m.pos;
                }
                run.end = pos;
                run.count++;
                if (v == REORDER_ACCEPT)
                    continue;
                if ((rc = det_flush(it, &nops, &run, run_pos)) < 0 ||
                    (rc = det_op_push(
                         it, &nops,
                         (struct det_op){.seq = m.seq, .complete = true, .total = m.pos + 1})) < 0)
                    goto out;
                continue;
            }
            if ((rc = det_flush(it, &nops, &run, run_pos)) < 0)
                goto out;
            continue;
        }
        if ((rc = det_flush(it, &nops, &run, run_pos)) < 0)
            goto out;
        if (kind == CODEC_SPLIT_FROM) {
            /* This production of the split leaves out [0, m.pos): other readers had them, so
             * this reader's share of it starts there. */
            if ((rc = reorder_accept_seed(&it->ra, m.seq, m.pos)) < 0 ||
                (rc = ledger_add(&it->ledger, m.seq, 0, m.pos)) < 0 ||
                (rc = det_skip_had(it, &nops, m.seq)) < 0) {
                err_set(err, errlen, rc, "%s", sluice_strerror(rc));
                goto out;
            }
            continue;
        }
        /* An end marker. */
        rc = det_skip_had(it, &nops, m.seq);
        if (rc == 0)
            rc = ledger_end(&it->ledger, m.seq, m.pos);
        if (rc == 0) {
            rc = reorder_end(&it->ra, m.seq, m.pos, blob->item.task_id, iter_clock_ms());
            if (rc == 0 && !reorder_complete(&it->ra, m.seq))
                iter_schedule_acks(it); /* a redo to ask for */
        }
        if (rc == SLUICE_ERR_CORRUPT) {
            err_set(err, errlen, rc,
                    "split %" PRIu64 " ended with %" PRIu64
                    " elements and with another count before: its pipeline is not deterministic",
                    m.seq, m.pos);
            goto out;
        }
        if (rc < 0) {
            err_set(err, errlen, rc, "%s", sluice_strerror(rc));
            goto out;
        }
        if (ledger_complete(&it->ledger, m.seq))
            it->acks_due = true;
        if (rc == 1 &&
            (rc = det_op_push(it, &nops,
                              (struct det_op){.seq = m.seq, .complete = true, .total = m.pos})) < 0)
            goto out;
        rc = 0;
    }
    rc = det_flush(it, &nops, &run, run_pos);
out:
    /* Ops made before a failure are queued all the same: the ledger already counts them. */
    if (nops > 0) {
        int qrc = 0;
        uv_mutex_lock(&it->mu);
        for (size_t i = 0; i < nops && qrc == 0; i++) {
            const struct det_op *op = &it->det_ops[i];
            if (op->complete) {
                it->det_splits++;
                qrc = reorder_queue_complete(&it->rq, op->seq, op->total);
            } else {
                qrc = reorder_queue_push(&it->rq, op->seq, blob, op->begin, op->end, op->count);
                pushed += qrc == 0;
            }
        }
        /* It may have something to read now; if not, it says so again (shm_full). */
        atomic_store(&it->starving, false);
        uv_cond_broadcast(&it->cond);
        uv_mutex_unlock(&it->mu);
        if (qrc < 0 && rc == 0)
            rc = err_set(err, errlen, qrc, "%s", sluice_strerror(qrc));
    }
    /* Once a run is queued the reader may already be done with the blob; with none, it is
     * ours alone. */
    if (pushed == 0)
        reorder_blob_free(blob);
    /* The read waits for a split to be produced again: ask for it at once. */
    reorder_advance(&it->ra);
    if (reorder_need_redo(&it->ra))
        iter_hasten_redo(it);
    return rc;
}

static void on_elements(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct fetch *f = user;
    struct sluice_iterator *it = f->it;
    uint64_t task_id = f->task_id, round = f->round;
    struct rpc_client *rpc = f->rpc;
    if (f->prev)
        f->prev->next = f->next;
    else
        it->fetches = f->next;
    if (f->next)
        f->next->prev = f->prev;
    free(f);

    if (it->closing) {
        uv_mutex_lock(&it->mu);
        prefetch_cancel(&it->pf);
        uv_mutex_unlock(&it->mu);
        iter_unref(it);
        return;
    }
    long i = tasks_find(&it->tasks, task_id);
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
        tasks_on_failure(&it->tasks, (size_t)i, now);
        struct tasks_task *t = &it->tasks.v[i];
        snprintf(t->fail_msg, sizeof t->fail_msg, "%s",
                 msg && *msg ? msg : sluice_strerror(status));
        /* Another process answers at the task's address: its worker is gone and the port was
         * taken again (by a worker of another cluster, say, whose own tasks and readers refuse
         * this reader). That is the task's worker gone, which the dispatcher's list settles, not
         * the task's failure: retried like a refused connection. */
        uint64_t got = rpc ? rpc_client_peer_incarnation(rpc) : 0;
        bool other = t->worker_incarnation != 0 && got != 0 && got != t->worker_incarnation;
        if (other)
            snprintf(t->fail_msg, sizeof t->fail_msg,
                     "another process answers there now (incarnation %016" PRIx64
                     ", not the task's worker %016" PRIx64 ")",
                     got, t->worker_incarnation);
        /* A worker answers UNAVAILABLE for a task it does not run (yet), which is retried;
         * any other failure is the task's own (its pipeline failed) and ends the read. */
        if (!other && !retry_task(status))
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
            tasks_on_failure(&it->tasks, (size_t)i, now);
            iter_fail(it, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
            goto out;
        }
        char nmsg[SLUICE_ERRMSG_SIZE];
        if (it->det) {
            rc = has_data ? det_payload(it, &item, nmsg, sizeof nmsg) : 0;
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            if (rc < 0) {
                tasks_on_failure(&it->tasks, (size_t)i, now);
                iter_fail(it, rc, "%s", nmsg);
                goto out;
            }
            if (it->acks_due)
                iter_schedule_acks(it);
            tasks_on_reply(&it->tasks, (size_t)i, r->count, r->end_of_sequence, now);
            goto out;
        }
        if (has_data && it->mode == SLUICE_DISTRIBUTED_EPOCH &&
            (rc = note_payload(it, &item, nmsg, sizeof nmsg)) < 0) {
            prefetch_item_free(&item);
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            tasks_on_failure(&it->tasks, (size_t)i, now);
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
            /* The reader has something to read now, though it has not woken yet (shm_full). */
            atomic_store(&it->starving, false);
            uv_cond_broadcast(&it->cond);
        } else {
            prefetch_cancel(&it->pf);
        }
        uv_mutex_unlock(&it->mu);
        prefetch_item_free(&item);
        tasks_on_reply(&it->tasks, (size_t)i, r->count, r->end_of_sequence, now);
        if (r->end_of_sequence && r->counted && counted_copies(it) &&
            (rc = tasks_check_end(&it->tasks.v[i], r->delivered, nmsg, sizeof nmsg)) < 0)
            iter_fail(it, rc, "%s", nmsg);
    }
out:
    iter_settle(it);
    iter_unref(it);
}

/* Sends a GetElements to task i. Returns 0 or the code of rpc_call. */
static int fetch(struct sluice_iterator *it, size_t i)
{
    struct tasks_task *t = &it->tasks.v[i];
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
    if (it->trainer_id[0])
        req.trainer_id = it->trainer_id;
    /* A deterministic reader takes every split whole (it keeps only a prefix of a split). */
    req.whole_splits = it->det;
    /* This reader steps over pad records: a worker that serves it over shared memory may align
     * the large values it leaves there as views (TCP connections ignore it). */
    req.align_values = true;
    /* distributed_epoch: about what the reader consumes (pace_update), so that a reader does
     * not take more of the job's elements than it uses while others wait for them. */
    if (it->track)
        req.max_elements = it->pace_max;
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
    tasks_sent(&it->tasks, i);
    it->refs++;
    f->prev = NULL;
    f->next = it->fetches;
    if (f->next)
        f->next->prev = f;
    it->fetches = f;
    return 0;
}

/* A request to a task the dispatcher no longer lists, still waiting for a connection to its
 * worker (which died), is withdrawn: the worker never saw it, so the task may leave the set at
 * once instead of holding a request slot until the request's timeout (a coordinated consumer
 * then skips the task's rounds, tasks.h; another read goes on with its other tasks, the lost
 * copy cut short). A request already written stays: its worker may still answer it (and, in
 * coordinated reads, serve the round to every consumer). The withdrawn requests' callbacks run
 * later, from the loop, never inside this function. */
static void withdraw_unlisted(struct sluice_iterator *it)
{
    if (!tasks_unlisted(&it->tasks))
        return;
    for (struct fetch *f = it->fetches; f; f = f->next) {
        long i = tasks_find(&it->tasks, f->task_id);
        if (i >= 0 && !it->tasks.v[i].listed)
            rpc_client_withdraw(f->rpc, on_elements, f);
    }
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

/* Deterministic reads: whether another request may go out (mu held). Not while the reader has
 * a prefetch buffer's worth (the slots' replies) to read in order: it is behind, and the
 * workers wait for it as in other reads. Past the reorder bound, only while the reader has
 * nothing to read: it then needs the lowest incomplete split, which fetching finds. */
static bool det_may_fetch(struct sluice_iterator *it)
{
    if (!reorder_queue_room(&it->rq))
        return reorder_queue_starved(&it->rq);
    /* In elements, the prefetch slots' worth of requests at the reader's pace (pace_update). */
    uint64_t elements = it->pace_max ? (uint64_t)it->pf.cap * it->pace_max : UINT64_MAX;
    return !reorder_queue_ahead(&it->rq, (uint64_t)it->pf.cap * ITER_FETCH_MAX_BYTES, elements);
}

/* Shared-memory reads: whether a request to task i waits for room in its worker's region. A
 * request may bring a reply of ITER_FETCH_MAX_BYTES (or one element larger than that: the largest
 * seen); it goes out when the region has room for it, the requests in flight on that connection
 * and the padding a block may leave at the ring's end, besides what the consumer holds. Without
 * room it waits, and the worker with it, as long as the reader has something to read or a reply
 * on its way from that worker; once the reader waits for an element with the region full of what
 * it holds (it keeps every element, as a list does, or a deterministic read's reordering holds
 * them) and nothing coming, only a reply can help it: the request goes, and the worker sends what
 * does not fit over the socket. A reply that could never fit does not wait. */
_Static_assert(ITER_FETCH_MAX_BYTES <= SHM_RING_REPLY_BYTES,
               "a worker starting its ring over allows for replies of SHM_RING_REPLY_BYTES");
/* A worker starting its ring over leaves room for SHM_RING_RESET replies in front (and more when
 * the ring is not empty); the reader keeps no more on their way over one region, whatever number
 * of its tasks that worker runs. */
#define SHM_MAX_COMING SHM_RING_RESET
_Static_assert(ITER_PER_TASK_MAX <= SHM_MAX_COMING && SHM_MAX_COMING <= SHM_RING_EARLY_BLOCKS,
               "the replies on their way over a region fit in front of a ring started over");

static bool shm_full(struct sluice_iterator *it, size_t i)
{
    const struct tasks_task *t = &it->tasks.v[i];
    struct rpc_client *rpc = t->conn ? client_conn_rpc(t->conn) : NULL;
    uint64_t size, held;
    if (!rpc || !rpc_client_shm_usage(rpc, &size, &held))
        return false;
    uint64_t each = it->shm_largest > ITER_FETCH_MAX_BYTES ? it->shm_largest : ITER_FETCH_MAX_BYTES;
    unsigned ncoming = 0;
    for (const struct fetch *f = it->fetches; f; f = f->next)
        ncoming += f->rpc == rpc;
    uint64_t coming = ncoming * each;
    /* An empty ring takes any reply that fits at all; else room for this reply, those coming
     * and the padding one may leave at the ring's end, and no more than SHM_MAX_COMING on their
     * way. */
    bool room = held == 0 && coming == 0
                    ? true
                    : held + coming + 2 * each <= size && ncoming < SHM_MAX_COMING;
    bool wait = !room && each <= size;
    atomic_store(&it->shm_waiting, wait);
    /* A starving reader with a reply on its way from this worker gets that one first. */
    return wait && (coming > 0 || !atomic_load(&it->starving));
}

/* distributed_epoch: measures the reader's consumption over windows of at least
 * ITER_PACE_WINDOW_MS and sets the element count its requests ask for (iterator.h). */
static void pace_update(struct sluice_iterator *it, uint64_t now)
{
    if (!it->track)
        return;
    uint64_t taken = atomic_load_explicit(&it->taken, memory_order_relaxed);
    if (!it->pace_max) {
        it->pace_max = ITER_PACE_MIN;
        it->pace_ms = now;
        it->pace_taken = taken;
        return;
    }
    uint64_t dt = now - it->pace_ms;
    if (dt < ITER_PACE_WINDOW_MS)
        return;
    uint64_t rate = taken > it->pace_taken ? (taken - it->pace_taken) * 1000 / dt : 0;
    it->pace_max =
        prefetch_pace(rate, it->pf.cap, ITER_PACE_HORIZON_MS, ITER_PACE_MIN, ITER_PACE_MAX);
    it->pace_ms = now;
    it->pace_taken = taken;
}

/* Sends requests while slots are free and some task may be asked. */
static void pump(struct sluice_iterator *it)
{
    if (it->closing || iter_state(it) != ITER_RUNNING)
        return;
    uint64_t now = uv_now(&it->c->loop);
    pace_update(it, now);
    withdraw_unlisted(it);
    if (it->coordinated) {
        if (tasks_advance(&it->tasks) == TASKS_ROUND_BEHIND) {
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
        long i = tasks_pick(&it->tasks, now, &wake_at);
        if (i < 0) {
            if (wake_at)
                arm_pump(it, wake_at, now);
            return;
        }
        if (shm_full(it, (size_t)i)) {
            /* The other tasks may still be asked; tasks_pick arms the look again. */
            tasks_defer(&it->tasks, (size_t)i, now + ITER_SHM_POLL_MS);
            continue;
        }
        uv_mutex_lock(&it->mu);
        bool reserved = it->state == ITER_RUNNING && (!it->det || det_may_fetch(it)) &&
                        prefetch_reserve(&it->pf);
        uv_mutex_unlock(&it->mu);
        if (!reserved)
            return;
        if (fetch(it, (size_t)i) != 0) {
            /* Could not even queue the request: give the slot back and let the task wait. */
            uv_mutex_lock(&it->mu);
            prefetch_cancel(&it->pf);
            uv_mutex_unlock(&it->mu);
            tasks_sent(&it->tasks, (size_t)i);
            tasks_on_failure(&it->tasks, (size_t)i, now);
        }
    }
}

void iter_on_wake(struct client_waker *w)
{
    struct sluice_iterator *it =
        (struct sluice_iterator *)(void *)((char *)w - offsetof(struct sluice_iterator, waker));
    if (iter_interrupted(it))
        iter_fail(it, SLUICE_ERR_CANCELLED, "interrupted");
    iter_report_check(it);
    pump(it);
}
