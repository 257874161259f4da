/* One read: see iterator.h for the happy path, the failure modes and the lifetime rules. This
 * file is the caller's side once the read is open (iterator_open.c opens it); the loop thread's
 * is in iterator_fetch.c and iterator_heartbeat.c.
 *
 * The struct has three parts. The shared part (state, prefetch buffer, consumption counters) is
 * guarded by mu; the loop thread fills the buffer and moves the state to ENDED or FAILED, the
 * reader's thread takes payloads and waits on cond. The reader part (the payload being decoded,
 * the element handed out, the local tail) is touched only by the thread calling next (or the
 * tail's prefetch thread, which then is the only one pulling from the buffer). The loop part
 * (tasks, timers, requests) is touched only on the client's loop thread. */
#include "iterator_internal.h"

#include "checkpoint.h"
#include "payload_block.h"

#include "common/mode.h"

/* ---- shared state ------------------------------------------------------------------------- */

void iter_free(struct sluice_iterator *it)
{
    prefetch_release(&it->pf);
    reorder_queue_release(&it->rq);
    reorder_accept_release(&it->ra);
    free(it->det_ops);
    free(it->redo);
    tasks_release(&it->tasks);
    ledger_release(&it->ledger);
    ledger_release(&it->delivered);
    free(it->cov);
    free(it->cov_ptrs);
    free(it->cov_bounds);
    free(it->finished);
    free(it->def);
    uv_cond_destroy(&it->cond);
    uv_mutex_destroy(&it->mu);
    free(it);
}

void iter_fail(struct sluice_iterator *it, int rc, const char *fmt, ...)
{
    uv_mutex_lock(&it->mu);
    if (it->state == ITER_RUNNING) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(it->fail_msg, sizeof it->fail_msg, fmt, ap);
        va_end(ap);
        if (!it->fail_msg[0])
            snprintf(it->fail_msg, sizeof it->fail_msg, "%s", sluice_strerror(rc));
        it->fail_rc = rc;
        it->state = ITER_FAILED;
        uv_cond_broadcast(&it->cond);
    }
    uv_mutex_unlock(&it->mu);
}

void iter_end(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    if (it->state == ITER_RUNNING) {
        it->state = ITER_ENDED;
        /* Whatever is still queued is read; splits missing by now never come. */
        it->rq.ended = true;
        uv_cond_broadcast(&it->cond);
    }
    uv_mutex_unlock(&it->mu);
}

enum iter_state iter_state(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    enum iter_state s = it->state;
    uv_mutex_unlock(&it->mu);
    return s;
}

void iter_interrupt(struct sluice_iterator *it)
{
    atomic_store(&it->interrupted, 1);
    client_wake(it->c);
}

/* ---- reader ------------------------------------------------------------------------------- */

/* ---- deterministic reads: the reader takes runs from the reorder queue (reorder.h) ---------- */

static void handed_end(struct sluice_iterator *it, uint64_t seq, uint64_t total);

/* Takes the next run in the canonical order into it->cur (a view into its blob). Splits read in
 * full on the way count as handed out whole (their end markers are not in the runs). mu held. */
static bool det_take(struct sluice_iterator *it)
{
    struct reorder_run run;
    bool got = reorder_queue_take(&it->rq, &run);
    size_t npassed;
    const struct reorder_passed *passed = reorder_queue_passed(&it->rq, &npassed);
    for (size_t i = 0; i < npassed && it->track; i++)
        handed_end(it, passed[i].seq, passed[i].total);
    if (!got)
        return false;
    memset(&it->cur, 0, sizeof it->cur);
    it->cur.data = run.blob->item.data + run.begin;
    it->cur.len = run.end - run.begin;
    it->cur.count = run.count;
    it->cur.task_id = run.blob->item.task_id;
    it->cur_blob = run.blob;
    return true;
}

/* Lets go of the run in it->cur: its blob is freed once every run of it was read, and the loop,
 * which may be waiting for room, is woken then. */
static void det_drop(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    struct reorder_blob *b = reorder_queue_done(&it->rq, it->cur_blob);
    uv_mutex_unlock(&it->mu);
    it->cur_blob = NULL;
    memset(&it->cur, 0, sizeof it->cur);
    if (b) {
        reorder_blob_free(b);
        client_wake(it->c);
    }
}

/* The reader is done with the payload it was decoding: frees it and its slot, and wakes the
 * loop to use the slot. */
static void finish_payload(struct sluice_iterator *it)
{
    if (it->det) {
        det_drop(it);
        it->cur_pos = 0;
        it->cur_decoded = 0;
        it->cur_skip = 0;
        return;
    }
    prefetch_item_free(&it->cur);
    it->cur_pos = 0;
    it->cur_decoded = 0;
    it->cur_skip = 0;
    uv_mutex_lock(&it->mu);
    prefetch_done(&it->pf);
    uv_mutex_unlock(&it->mu);
    client_wake(it->c);
}

/* Waits for a payload. Returns 1 with it->cur set, 0 at the end of the read, or a negative code
 * with err. Buffered payloads come before the end or a failure. */
static int wait_payload(struct sluice_iterator *it, bool timed, char *err, size_t errlen)
{
    int rc;
    bool woke = false;
    uv_mutex_lock(&it->mu);
    for (;;) {
        if (it->det ? det_take(it) : prefetch_take(&it->pf, &it->cur)) {
            it->cur_pos = 0;
            it->cur_decoded = 0;
            it->cur_skip = 0;
            rc = 1;
            break;
        }
        if (it->state == ITER_ENDED) {
            rc = 0;
            break;
        }
        if (it->state == ITER_FAILED) {
            rc = err_set(err, errlen, it->fail_rc, "%s", it->fail_msg);
            break;
        }
        if (iter_interrupted(it)) {
            rc = err_set(err, errlen, SLUICE_ERR_CANCELLED, "interrupted");
            break;
        }
        /* Deterministic: the loop fetches past its reorder bound only while the reader has
         * nothing to read, which it learns here; so does a request held back for room in a
         * shared region (iterator_fetch.c shm_full). */
        atomic_store(&it->starving, true);
        if ((it->det && !woke) || atomic_load(&it->shm_waiting)) {
            woke = true;
            client_wake(it->c);
        }
        uint64_t t0 = uv_hrtime();
        /* The call's deadline is set at its first wait, so that a call served from what is
         * buffered reads no clock (the per-element path). */
        if (timed && it->call_timeout_ms && !it->deadline_ns)
            it->deadline_ns = t0 + (uint64_t)it->call_timeout_ms * 1000000u;
        if (timed && it->deadline_ns) {
            if (t0 >= it->deadline_ns) {
                rc = err_set(err, errlen, SLUICE_ERR_TIMEOUT, "no element within %" PRIu32 " ms",
                             it->call_timeout_ms);
                break;
            }
            uv_cond_timedwait(&it->cond, &it->mu, it->deadline_ns - t0);
        } else {
            uv_cond_wait(&it->cond, &it->mu);
        }
        it->wait_ns += uv_hrtime() - t0;
    }
    atomic_store(&it->starving, false);
    uv_mutex_unlock(&it->mu);
    return rc;
}

/* ---- what the reader was handed (sluice_iterator_save) ----------------------------------- */

/* A split the reader now has whole joins the done set. */
static int settle_split(struct sluice_iterator *it, uint64_t seq)
{
    if (ranges_contains(&it->delivered.done, seq) || !ledger_complete(&it->delivered, seq))
        return 0;
    return ledger_confirmed(&it->delivered, &seq, 1);
}

static int flush_run(struct sluice_iterator *it)
{
    if (!it->run)
        return 0;
    it->run = false;
    int rc = ledger_add(&it->delivered, it->run_seq, it->run_begin, it->run_end);
    return rc ? rc : settle_split(it, it->run_seq);
}

static void note_failure(struct sluice_iterator *it, int rc)
{
    if (rc < 0 && !it->reader_rc) {
        it->reader_rc = rc;
        snprintf(it->reader_msg, sizeof it->reader_msg, "recording the read's position: %s",
                 sluice_strerror(rc));
    }
}

static void handed_element(struct sluice_iterator *it, uint64_t seq, uint64_t pos)
{
    if (it->run && seq == it->run_seq && pos == it->run_end) {
        it->run_end++;
        return;
    }
    note_failure(it, flush_run(it));
    it->run = true;
    it->run_seq = seq;
    it->run_begin = pos;
    it->run_end = pos + 1;
}

static void handed_end(struct sluice_iterator *it, uint64_t seq, uint64_t total)
{
    int rc = flush_run(it);
    if (rc == 0)
        rc = ledger_end(&it->delivered, seq, total);
    if (rc == 0)
        rc = settle_split(it, seq);
    /* Two counts for one split fail the read on the loop side already. */
    if (rc != SLUICE_ERR_CORRUPT)
        note_failure(it, rc);
}

/* The next element as the service delivers it: 1, 0 at the end, or a negative code. lend: a
 * large tensor of a payload in a shared region may stay there (codec_next_record), for an
 * element that leaves the library (sluice_iterator_next_into). */
static int raw_next(struct sluice_iterator *it, struct sluice_element *out, bool timed, bool lend,
                    char *err, size_t errlen)
{
    for (;;) {
        if (iter_interrupted(it))
            return err_set(err, errlen, SLUICE_ERR_CANCELLED, "interrupted");
        if (it->reader_rc)
            return err_set(err, errlen, it->reader_rc, "%s", it->reader_msg);
        if (!it->cur.data) {
            int rc = wait_payload(it, timed, err, errlen);
            if (rc <= 0)
                return rc;
            continue;
        }
        char msg[SLUICE_ERRMSG_SIZE / 2]; /* quoted in a longer message */
        int rc;
        if (it->cur_skip < it->cur.nskip && it->cur.skip[it->cur_skip] == it->cur_decoded) {
            /* Received before, or an end marker: stepped over without decoding. */
            struct codec_mark mark;
            it->cur_skip++;
            rc = codec_scan_record(it->cur.data, it->cur.len, &it->cur_pos, &mark);
            if (rc > 0) {
                it->cur_decoded++;
                if (rc == CODEC_SPLIT_END && it->track)
                    handed_end(it, mark.seq, mark.pos);
                continue;
            }
            snprintf(msg, sizeof msg, "a damaged record");
        } else {
            struct codec_mark mark;
            struct pipe_lender *lender = lend && it->cur.lent ? &it->cur.lent->lender : NULL;
            rc = codec_next_record(it->cur.data, it->cur.len, &it->cur_pos, out, &it->scratch,
                                   lender, &mark, msg, sizeof msg);
            if (rc == CODEC_ELEMENT) {
                it->cur_decoded++;
                it->taken_local++;
                if (it->track && mark.tagged)
                    handed_element(it, mark.seq, mark.pos);
                it->have_round = true;
                it->last_round = it->cur.round;
                it->last_task = it->cur.task_id;
                atomic_store_explicit(&it->taken, it->taken_local, memory_order_relaxed);
                return 1;
            }
            if (rc == CODEC_SPLIT_END || rc == CODEC_SPLIT_FROM) {
                it->cur_decoded++;
                if (it->track && rc == CODEC_SPLIT_END)
                    handed_end(it, mark.seq, mark.pos);
                continue;
            }
        }
        uint32_t decoded = it->cur_decoded, count = it->cur.count;
        uint64_t task = it->cur.task_id;
        finish_payload(it);
        if (rc < 0) {
            it->reader_rc = rc;
            snprintf(it->reader_msg, sizeof it->reader_msg, "elements of task %" PRIu64 ": %s",
                     task, msg);
        } else if (decoded != count) {
            it->reader_rc = SLUICE_ERR_CORRUPT;
            snprintf(it->reader_msg, sizeof it->reader_msg,
                     "a reply of task %" PRIu64 " announced %" PRIu32 " elements but held %" PRIu32,
                     task, count, decoded);
        }
    }
}

/* The upstream of a local tail: the elements of the service. */
struct upstream {
    struct pipe_iter base;
    struct sluice_iterator *it;
};

static int upstream_next(struct pipe_iter *pi, struct sluice_element *out)
{
    struct upstream *up = (struct upstream *)pi;
    return raw_next(up->it, out, false, false, pi->ctx->err, sizeof pi->ctx->err);
}

static void upstream_destroy(struct pipe_iter *pi)
{
    free(pi);
}

static const struct pipe_iter_ops upstream_ops = {upstream_next, upstream_destroy};

/* Makes a reader blocked in (or about to call) raw_next return, so a tail's prefetch thread can
 * be joined. A repeating read stops its current repetition too; one it opens after this is
 * closed at once (iterator_repeat.c checks the state under mu). */
void iter_reader_stop(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    if (it->state == ITER_RUNNING) {
        it->state = ITER_FAILED;
        it->fail_rc = SLUICE_ERR_CLOSED;
        snprintf(it->fail_msg, sizeof it->fail_msg, "iterator closed");
    }
    uv_cond_broadcast(&it->cond);
    if (it->stream)
        iter_reader_stop(it->stream);
    uv_mutex_unlock(&it->mu);
    if (it->tail)
        pipe_run_cancel(it->tail);
    if (it->mixing)
        iter_mix_stop(it);
    if (it->repeating) {
        /* A repetition being opened gives up its dispatcher calls (its flag is this one). */
        atomic_store(&it->interrupted, 1);
        client_wake(it->c);
    }
}

void iter_reader_release(struct sluice_iterator *it)
{
    pipe_run_free(it->tail);
    it->tail = NULL;
    if (it->repeating)
        iter_repeat_release(it);
    if (it->mixing)
        iter_mix_release(it);
    pipe_spec_free(it->tail_spec);
    it->tail_spec = NULL;
    if (it->cur_blob)
        det_drop(it);
    else
        prefetch_item_free(&it->cur);
    pipe_buf_release(&it->scratch);
    pipe_elem_release(&it->elem);
}

/* ---- public ------------------------------------------------------------------------------- */

/* what names the tail in messages: "local tail", or the operations a dataset leaves to the
 * reader. */
int iter_open_tail(struct sluice_iterator *it, const char *text, const char *what, char *err,
                   size_t errlen)
{
    char msg[SLUICE_ERRMSG_SIZE];
    int rc = pipe_parse_tail(text, &it->tail_spec, msg, sizeof msg);
    if (rc)
        return err_set(err, errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_PARSE, "%s: %s", what,
                       msg);
    /* A prefetch at the end runs the tail on a thread of its own, so a wait for its next
     * element can time out without breaking a half-built batch (see iter_next). */
    struct pipe_op *ops = realloc(it->tail_spec->ops, (it->tail_spec->nops + 1) * sizeof *ops);
    if (!ops)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    it->tail_spec->ops = ops;
    ops[it->tail_spec->nops++] = (struct pipe_op){.kind = PIPE_OP_PREFETCH, .n = 1};
    struct pipe_iter *first;
    if (it->repeating) {
        first = iter_repeat_upstream(it);
    } else if (it->mixing) {
        first = iter_mix_take(it);
    } else {
        struct upstream *up = calloc(1, sizeof *up);
        if (up) {
            up->base.ops = &upstream_ops;
            up->it = it;
        }
        first = up ? &up->base : NULL;
    }
    if (!first)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    /* The run owns the upstream from here, also on failure. */
    rc = pipe_open_tail_reopen(it->tail_spec, it->c->reg, first,
                               it->repeating ? iter_repeat_reopen : NULL, it, &it->tail, msg,
                               sizeof msg);
    if (rc)
        return err_set(err, errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_PARSE, "%s: %s", what,
                       msg);
    return 0;
}

/* Inlined into both callers: it runs once per element. */
static inline __attribute__((always_inline)) int
iter_next(struct sluice_iterator *it, uint32_t timeout_ms, bool lend, char *err, size_t errlen)
{
    int rc;
    if (it->tail) {
        /* The tail ends in a prefetch (open_tail), so its operators run on a thread of their
         * own and a wait that runs out here interrupts nothing. */
        rc = pipe_prefetch_next_timed(it->tail->it, &it->elem, timeout_ms);
        if (rc == SLUICE_ERR_TIMEOUT)
            return err_set(err, errlen, rc, "no element within %" PRIu32 " ms", timeout_ms);
        if (rc < 0)
            return err_set(err, errlen, rc, "%s",
                           it->tail->ctx.err[0] ? it->tail->ctx.err : sluice_strerror(rc));
        return rc;
    }
    if (it->mixing)
        return iter_mix_next(it, timeout_ms, err, errlen);
    it->call_timeout_ms = timeout_ms;
    it->deadline_ns = 0; /* set at the call's first wait (wait_payload) */
    for (;;) {
        rc = raw_next(it, &it->elem, true, lend, err, errlen);
        if (rc != 1 || it->shard_count == 0 ||
            it->shard_seen++ % it->shard_count == it->shard_index)
            return rc;
        /* Another shard's element: passed (the position covers it), not handed out. */
        it->taken_local--;
        atomic_store_explicit(&it->taken, it->taken_local, memory_order_relaxed);
        pipe_elem_unlend(&it->elem);
    }
}

int sluice_iterator_next(struct sluice_iterator *it, const struct sluice_element **elem,
                         uint32_t timeout_ms, char *err, size_t errlen)
{
    if (!it || !elem)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "iterator and elem are required");
    *elem = NULL;
    /* Large values read over shared memory stay in the region until the next call, as long as
     * the element is valid anyway: no copy. The last element's go back now, before this call
     * waits, so that the region has room for what it waits for. */
    pipe_elem_unlend(&it->elem);
    int rc = iter_next(it, timeout_ms, true, err, errlen);
    if (rc == 1)
        *elem = &it->elem;
    else if (rc == SLUICE_ERR_TIMEOUT)
        iter_append_reason(it, err, errlen);
    return rc;
}

int iter_next_into(struct sluice_iterator *it, struct sluice_element *elem, uint32_t timeout_ms,
                   bool lend, char *err, size_t errlen)
{
    if (!it || !elem)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "iterator and elem are required");
    /* elem's values are about to be replaced: what it borrowed from a shared region goes back
     * before this call waits, so that the region has room for what it waits for. */
    pipe_elem_unlend(elem);
    int rc = iter_next(it, timeout_ms, lend, err, errlen);
    if (rc == 1) {
        pipe_elem_swap(elem, &it->elem);
        /* The caller's old buffers stay for reuse; what they borrowed from a shared region goes
         * back now rather than at the next element. */
        pipe_elem_unlend(&it->elem);
    } else if (rc == SLUICE_ERR_TIMEOUT)
        iter_append_reason(it, err, errlen);
    return rc;
}

int sluice_iterator_next_into(struct sluice_iterator *it, struct sluice_element *elem,
                              uint32_t timeout_ms, char *err, size_t errlen)
{
    return iter_next_into(it, elem, timeout_ms, true, err, errlen);
}

int sluice_iterator_task(const struct sluice_iterator *it, uint64_t *task_id)
{
    if (!it || it->tail || !it->have_round)
        return SLUICE_ERR_INVALID;
    if (task_id)
        *task_id = it->last_task;
    return 0;
}

int sluice_iterator_round(const struct sluice_iterator *it, uint64_t *round, uint64_t *task_id)
{
    if (!it || !it->coordinated || it->tail || !it->have_round)
        return SLUICE_ERR_INVALID;
    if (round)
        *round = it->last_round;
    if (task_id)
        *task_id = it->last_task;
    return 0;
}

int sluice_iterator_report(struct sluice_iterator *it)
{
    if (!it)
        return SLUICE_ERR_INVALID;
    if (it->mode != SLUICE_DISTRIBUTED_EPOCH || it->repeating || !client_owned(it->c))
        return 0;
    if (it->mixing)
        return iter_mix_report(it);
    uv_mutex_lock(&it->mu);
    if (it->state != ITER_RUNNING) {
        uv_mutex_unlock(&it->mu);
        return 0;
    }
    uint64_t mine = ++it->report_wanted;
    uv_mutex_unlock(&it->mu);
    client_wake(it->c);
    uint64_t deadline = uv_hrtime() + (uint64_t)ITER_REPORT_WAIT_MS * 1000000u;
    int rc = 0;
    uv_mutex_lock(&it->mu);
    while (it->report_done < mine && it->state == ITER_RUNNING) {
        uint64_t now = uv_hrtime();
        if (now >= deadline) {
            rc = SLUICE_ERR_TIMEOUT;
            break;
        }
        uv_cond_timedwait(&it->cond, &it->mu, deadline - now);
    }
    uv_mutex_unlock(&it->mu);
    return rc;
}

int sluice_iterator_save(struct sluice_iterator *it, uint8_t **bytes, size_t *len, char *err,
                         size_t errlen)
{
    if (!it || !bytes || !len)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "iterator, bytes and len are required");
    *bytes = NULL;
    *len = 0;
    if (it->mode != SLUICE_DISTRIBUTED_EPOCH)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "checkpoints need processing mode distributed_epoch: in %s each worker "
                       "produces its own copy of the data, so a position in it does not outlive "
                       "the workers",
                       mode_name(it->mode));
    if (it->coordinated)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "a coordinated read (num_consumers) cannot be checkpointed: its rounds "
                       "belong to the job");
    if (it->tail)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "a read with operations run in the reader (a local tail, or a dataset "
                       "whose operations run partly in the reader) cannot be checkpointed: they "
                       "hold elements its position cannot describe");
    if (it->mixing)
        return iter_mix_save(it, bytes, len, err, errlen);
    int rc = flush_run(it);
    if (rc < 0) {
        note_failure(it, rc);
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    }
    struct checkpoint ck;
    memset(&ck, 0, sizeof ck);
    snprintf(ck.dataset_id, sizeof ck.dataset_id, "%s", it->dataset_id);
    snprintf(ck.job_name, sizeof ck.job_name, "%s", it->job_name);
    ck.def_hash = it->def_hash;
    ck.plan_hash = it->plan_hash;
    ck.split_total = it->split_total;
    ck.delivered = it->taken_local;
    ck.pos = it->delivered; /* borrowed: not released here */
    rc = checkpoint_encode(&ck, bytes, len);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    return 0;
}

int sluice_iterator_progress(const struct sluice_iterator *it, struct sluice_read_progress *out)
{
    if (!it || !out)
        return SLUICE_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (it->repeating) {
        iter_repeat_progress(it, out);
        return 0;
    }
    if (it->mixing) {
        iter_mix_progress(it, out);
        return 0;
    }
    out->elements = it->taken_local;
    out->copies_cut = atomic_load(&((struct sluice_iterator *)it)->copies_cut);
    if (it->track) {
        /* A run not recorded yet may complete a split: counted once it is recorded. */
        out->splits_done = ranges_count(&it->delivered.done);
        out->splits_total = it->split_total == UINT64_MAX ? 0 : it->split_total;
    }
    return 0;
}

int sluice_checkpoint_merge(const uint8_t *const *ckpts, const size_t *lens, size_t n,
                            uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    if (!out || !out_len || n == 0 || !ckpts || !lens)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "at least one checkpoint and out and out_len are required");
    *out = NULL;
    *out_len = 0;
    if (checkpoint_is_mix(ckpts[0], lens[0]))
        return iter_mix_merge(ckpts, lens, n, out, out_len, err, errlen);
    struct checkpoint acc, one;
    checkpoint_init(&acc);
    checkpoint_init(&one);
    char why[SLUICE_ERRMSG_SIZE];
    int rc = checkpoint_decode(ckpts[0], lens[0], &acc, why, sizeof why);
    if (rc) {
        err_set(err, errlen, rc, "checkpoint 1: %s", why);
        goto out;
    }
    for (size_t i = 1; i < n; i++) {
        rc = checkpoint_decode(ckpts[i], lens[i], &one, why, sizeof why);
        if (rc == 0)
            rc = checkpoint_merge(&acc, &one, why, sizeof why);
        checkpoint_release(&one);
        checkpoint_init(&one);
        if (rc) {
            err_set(err, errlen, rc, "checkpoint %zu: %s", i + 1, why);
            goto out;
        }
    }
    rc = checkpoint_encode(&acc, out, out_len);
    if (rc)
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
out:
    checkpoint_release(&acc);
    return rc;
}

void sluice_iterator_close(struct sluice_iterator *it)
{
    /* In a forked child the read is the parent's (see sluice_client_close). */
    if (!it || !client_owned(it->c))
        return;
    iter_reader_stop(it);
    iter_reader_release(it);
    if (it->repeating || it->mixing) {
        /* Its repetitions (inputs) were closed with the tail; the loop never knew this one. */
        iter_free(it);
        return;
    }
    struct client_op op = {.run = iter_run_close, .user = it};
    client_submit(it->c, &op);
}
