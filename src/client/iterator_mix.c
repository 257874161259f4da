/* A distributed_epoch read of a mix (`sample_from_datasets([(P1), (P2)], [W1, W2], SEED)`,
 * `choose_from_datasets`): each input pipeline, and the choice pipeline, is read as a
 * distributed_epoch read of its own (its own dataset, job, splits and ledger, so every input is
 * read exactly once through worker losses as any read is), and the reader mixes them with the
 * same mixing iterator `sluice run` and the workers use (pipeline/mix.h). The mixed sequence is
 * therefore a function of the seed, the weights and the inputs' own sequences: read
 * deterministically, the inputs' sequences are those of `sluice run`, and so is the mix's, at
 * any worker count and split size.
 *
 * Happy path: iter_mix_open() registers each input's pipeline (with the maps and prefetches
 * that follow the mix appended: a map of the mixed stream is the same map of every input, and
 * runs on the workers that way), opens one read per input (a named job NAME reads its inputs as
 * jobs "NAME.input0", "NAME.input1", ... and "NAME.choice", which the readers of NAME share),
 * and builds the mix over them. Without further operations the mix runs on the caller's thread
 * in next(): each call pulls one element from the input the draw names, within the call's
 * timeout; an input that has nothing yet leaves the mix where it was (the next call asks the same
 * input again). The mix's position (the mixer's state plus each input read's checkpoint) is a
 * checkpoint of its own kind (checkpoint.h). Operations after the mix that are not maps (batch,
 * shuffle, take, ...) and a local tail run on the tail's thread over the mix, as any operations
 * run in the reader, and such a read cannot be checkpointed.
 *
 * Failure modes: an input whose read fails fails the mix with its index; closing or interrupting
 * the read stops every input read (they watch the read's interrupt flag). */
#include "iterator_internal.h"

#include "checkpoint.h"

#include "common/names.h"
#include "pipeline/mix.h"

/* One input (or the choice pipeline) of the mix: the read and the upstream the mix pulls. */
struct mix_kid {
    struct pipe_iter base;
    struct pipe_ctx ctx;
    struct iter_mix *m;
    struct sluice_iterator *read;
    size_t index;
};

struct iter_mix {
    struct sluice_iterator *it;
    enum pipe_source_kind kind;
    size_t ninputs, nkids; /* the inputs, then the choice pipeline's read */
    struct mix_kid *kids;
    struct pipe_iter *mix; /* the mix, until a tail takes it (NULL then) */
    bool in_tail;          /* the tail's thread runs the mix */
    struct pipe_ctx ctx;   /* the mix's context while it runs on the caller's thread */
    uint32_t timeout_ms;   /* of the current next() call; 0 on the tail's thread */
    size_t waiting_on;     /* the input the last wait that ran out was for, + 1 */
    /* A named job's sample_from_datasets: where and when the weights schedule was last asked
     * for (fetch_schedule), and how far ahead, to ask for about two seconds of reading at a
     * time. */
    uint64_t sched_pos, sched_ms, sched_ahead;
    /* What this read drew from each input, reported with those requests under a random id: the
     * realized shares `sluice status` shows. */
    uint64_t reader;
    uint64_t drawn[PIPE_MIX_MAX_INPUTS];
};

/* Asked for about this long of reading at a time, within these bounds (positions). */
#define MIX_SCHEDULE_AHEAD_MS 2000
#define MIX_SCHEDULE_MIN 1024
#define MIX_SCHEDULE_MAX (1u << 22)

static int kid_next(struct pipe_iter *pi, struct sluice_element *out)
{
    struct mix_kid *k = (struct mix_kid *)pi;
    k->ctx.err[0] = '\0';
    int rc = iter_next_into(k->read, out, k->m->timeout_ms, false, k->ctx.err, sizeof k->ctx.err);
    if (rc == SLUICE_ERR_TIMEOUT)
        k->m->waiting_on = k->index + 1;
    else if (rc == 1 && k->index < k->m->ninputs)
        k->m->drawn[k->index]++;
    return rc;
}

static void kid_destroy(struct pipe_iter *pi)
{
    (void)pi; /* the kids belong to the iter_mix */
}

static const struct pipe_iter_ops kid_ops = {kid_next, kid_destroy};

static void kid_release(void *owner)
{
    (void)owner;
}

struct schedule_take {
    struct iter_mix *m;
    struct pipe_iter *mix;
};

/* The dispatcher's schedule: checked against the mix, then set on it. */
static int take_schedule(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    struct schedule_take *t = user;
    const Sluice__GetMixScheduleReply *r = reply->get_mix_schedule_reply;
    if (!r)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "dispatcher sent no weights schedule");
    size_t n = r->n_changes;
    struct pipe_mix_change *vv = malloc((n ? n : 1) * sizeof *vv);
    if (!vv)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        const Sluice__MixChange *c = r->changes[k];
        bool ok = c && c->n_weights == t->m->ninputs && (k == 0 || c->from > vv[k - 1].from);
        bool any = false;
        for (size_t i = 0; ok && i < c->n_weights; i++) {
            ok = c->weights[i] >= 0 && c->weights[i] <= 1e300;
            any = any || c->weights[i] > 0;
        }
        if (!ok || !any)
            rc = err_set(err, errlen, SLUICE_ERR_PROTOCOL,
                         "dispatcher sent a weights schedule that does not fit the mix (change "
                         "%zu)",
                         k);
        else
            vv[k] = (struct pipe_mix_change){c->from, c->weights};
    }
    if (rc == 0 && (rc = pipe_mix_set_schedule(t->mix, vv, n, r->horizon)) < 0)
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    free(vv);
    return rc;
}

/* The mix's horizon callback: asks the dispatcher for the weights schedule up to about two
 * seconds of reading past pos (journaled there before it answers). The rate is measured since
 * the last request, and the lookahead at most doubles from one request to the next: a burst of
 * prefetched elements read in a few milliseconds would otherwise promise hundreds of
 * thousands of positions, and a weight change would wait for all of them. */
static int fetch_schedule(void *user, struct pipe_iter *mix, uint64_t pos, char *err, size_t errlen)
{
    struct iter_mix *m = user;
    struct sluice_iterator *it = m->it;
    uint64_t now = iter_clock_ms();
    uint64_t ahead = MIX_SCHEDULE_MIN;
    if (m->sched_ms && pos > m->sched_pos) {
        uint64_t ms = now > m->sched_ms ? now - m->sched_ms : 1;
        uint64_t rate = (pos - m->sched_pos) * MIX_SCHEDULE_AHEAD_MS / ms;
        uint64_t most =
            2 * m->sched_ahead < MIX_SCHEDULE_MAX ? 2 * m->sched_ahead : MIX_SCHEDULE_MAX;
        ahead = rate < MIX_SCHEDULE_MIN ? MIX_SCHEDULE_MIN : rate > most ? most : rate;
    }
    m->sched_pos = pos;
    m->sched_ms = now;
    m->sched_ahead = ahead;
    Sluice__GetMixScheduleRequest q = SLUICE__GET_MIX_SCHEDULE_REQUEST__INIT;
    q.job_name = it->job_name;
    q.dataset_id = it->dataset_id;
    q.horizon = pos + ahead;
    q.reader = m->reader;
    q.n_drawn = m->ninputs;
    q.drawn = m->drawn;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_MIX_SCHEDULE;
    env.get_mix_schedule = &q;
    struct schedule_take t = {m, mix};
    const atomic_int *flag = it->also_interrupted ? it->also_interrupted : &it->interrupted;
    char msg[SLUICE_ERRMSG_SIZE];
    int rc = client_request_cancellable(it->c, &env, SLUICE__ENVELOPE__BODY_GET_MIX_SCHEDULE_REPLY,
                                        take_schedule, &t, NULL, flag, msg, sizeof msg);
    if (rc)
        return err_set(err, errlen, rc, "the weights schedule of job '%s': %s", it->job_name, msg);
    return 0;
}

/* "NAME.input3" or "NAME.choice" into buf; an anonymous read's inputs are anonymous too. */
static int kid_job_name(const struct sluice_iterator *it, size_t i, size_t ninputs, char *buf,
                        size_t len, char *err, size_t errlen)
{
    buf[0] = '\0';
    if (!it->job_name[0])
        return 0;
    int n = i < ninputs ? snprintf(buf, len, "%s.input%zu", it->job_name, i)
                        : snprintf(buf, len, "%s.choice", it->job_name);
    if (n < 0 || (size_t)n > NAME_ID_MAX || (size_t)n >= len)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "job name '%s' is too long for a mix: its inputs are read as jobs "
                       "'%s.input%zu' and the like, at most %d bytes",
                       it->job_name, it->job_name, i, NAME_ID_MAX);
    return 0;
}

/* Registers input i's pipeline (or the choice pipeline), with the first npush operations of
 * spec appended, and writes its dataset id into id. */
static int register_kid(struct sluice_iterator *it, const struct pipe_spec *spec, size_t i,
                        size_t npush, const struct sluice_read_options *o, char *id, size_t idlen,
                        char *err, size_t errlen)
{
    const struct pipe_spec *in =
        i < spec->source.ninputs ? spec->source.inputs[i] : spec->source.choice;
    bool push = i < spec->source.ninputs && npush > 0;
    int n = pipe_spec_format(in, NULL, 0);
    int m = push ? pipe_spec_format_ops(spec, 0, npush, NULL, 0) : 0;
    if (n < 0 || m < 0)
        return err_set(err, errlen, n < 0 ? n : m, "%s", sluice_strerror(n < 0 ? n : m));
    char *text = malloc((size_t)n + (size_t)m + 4);
    if (!text)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    pipe_spec_format(in, text, (size_t)n + 1);
    if (push) {
        memcpy(text + n, " | ", 3);
        pipe_spec_format_ops(spec, 0, npush, text + n + 3, (size_t)m + 1);
    }
    const struct sluice_register_options ro = {.split_size = o->split_size,
                                               .deterministic = spec->deterministic};
    char msg[SLUICE_ERRMSG_SIZE];
    int rc = client_register(it->c, text, &ro, id, idlen, msg, sizeof msg);
    free(text);
    if (rc) {
        if (i < spec->source.ninputs)
            return err_set(err, errlen, rc, "input %zu: %s", i, msg);
        return err_set(err, errlen, rc, "choice: %s", msg);
    }
    return 0;
}

static void free_mix(struct iter_mix *m)
{
    if (!m)
        return;
    if (m->mix)
        m->mix->ops->destroy(m->mix);
    for (size_t i = 0; i < m->nkids; i++)
        sluice_iterator_close(m->kids[i].read);
    free(m->kids);
    free(m);
}

int iter_mix_open(struct sluice_iterator *it, const struct pipe_spec *spec,
                  const struct sluice_read_options *o, const struct checkpoint_mix *restore,
                  uint64_t repetition, char *err, size_t errlen)
{
    const struct pipe_source *src = &spec->source;
    if (o->num_consumers > 0)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "a mix cannot be read by coordinated consumers (num_consumers) in "
                       "distributed_epoch: each input is a job of its own, with rounds of its own");
    size_t nkids = src->ninputs + (src->kind == PIPE_SRC_CHOOSE);
    if (restore && (restore->ninputs != src->ninputs || restore->nreads != nkids))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the checkpoint does not fit dataset '%s': it holds %zu inputs, the mix "
                       "has %zu",
                       it->dataset_id, restore->ninputs, src->ninputs);
    struct iter_mix *m = calloc(1, sizeof *m);
    if (!m || !(m->kids = calloc(nkids, sizeof *m->kids))) {
        free(m);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    }
    m->it = it;
    m->kind = src->kind;
    m->ninputs = src->ninputs;
    it->mixing = true;
    it->mix = m;

    /* Maps (and prefetches) right after the mix run on each input's workers. */
    size_t npush = 0;
    while (npush < spec->nops &&
           (spec->ops[npush].kind == PIPE_OP_MAP || spec->ops[npush].kind == PIPE_OP_PREFETCH))
        npush++;

    /* A repetition's inputs watch the whole read's flag, which its interrupt sets. */
    const atomic_int *flag = it->also_interrupted ? it->also_interrupted : &it->interrupted;
    int rc = 0;
    for (size_t i = 0; i < nkids && rc == 0; i++) {
        struct mix_kid *k = &m->kids[i];
        k->base.ops = &kid_ops;
        k->base.ctx = &k->ctx;
        k->m = m;
        k->index = i;
        char id[DATASET_ID_MAX], job[DATASET_ID_MAX];
        rc = register_kid(it, spec, i, npush, o, id, sizeof id, err, errlen);
        if (rc == 0)
            rc = kid_job_name(it, i, src->ninputs, job, sizeof job, err, errlen);
        if (rc)
            break;
        struct sluice_read_options ko = *o;
        ko.pipeline = NULL;
        ko.dataset_id = id;
        ko.job_name = job[0] ? job : NULL;
        ko.local = NULL;
        ko.split_size = 0;
        ko.deterministic = it->det;
        ko.restore = restore ? restore->read[i] : NULL;
        ko.restore_len = restore ? restore->read_len[i] : 0;
        char msg[SLUICE_ERRMSG_SIZE];
        /* Restores of the same mix position share the inputs' iterations; an input's own
         * position alone would also match a later position of the mix that drew nothing from
         * it, whose reader held and dropped some of that input's elements. */
        uint64_t rid = restore ? (checkpoint_def_hash(o->restore, o->restore_len) +
                                  0x9e3779b97f4a7c15u * (i + 1)) |
                                     1
                               : 0;
        rc = iter_open_read(it->c, &ko, flag, repetition, rid, &k->read, msg, sizeof msg);
        if (rc) {
            if (i < src->ninputs)
                err_set(err, errlen, rc, "input %zu: %s", i, msg);
            else
                err_set(err, errlen, rc, "choice: %s", msg);
        }
    }
    m->nkids = nkids; /* the kids not opened have read NULL, which closing skips */
    if (rc)
        return rc;
    /* A pass of a repeating read of a named job: the next pass asks for the repetition after the
     * one the inputs' jobs gave (they move together: every reader reads every input). */
    it->repetition = m->kids[0].read->repetition;

    struct pipe_mix_input ins[PIPE_MIX_MAX_INPUTS];
    for (size_t i = 0; i < src->ninputs; i++)
        ins[i] = (struct pipe_mix_input){&m->kids[i].base, &m->kids[i]};
    struct pipe_mix_input choice = {0};
    if (src->kind == PIPE_SRC_CHOOSE)
        choice = (struct pipe_mix_input){&m->kids[src->ninputs].base, &m->kids[src->ninputs]};
    struct pipe_mix_request req = {.kind = src->kind,
                                   .weights = src->weights,
                                   .n = src->ninputs,
                                   .seed = src->seed,
                                   .stop_on_empty = src->stop_on_empty,
                                   .release = kid_release,
                                   .timeouts_retry = true};
    /* A named job's weights can change while it runs (sluice_set_weights). */
    if (src->kind == PIPE_SRC_SAMPLE && it->job_name[0]) {
        req.horizon = fetch_schedule;
        req.horizon_user = m;
        /* Any 64 bits not 0 that another read is unlikely to have. */
        if (uv_random(NULL, NULL, &m->reader, sizeof m->reader, 0, NULL) != 0 || !m->reader)
            m->reader = uv_hrtime() ^ (uint64_t)(uintptr_t)m;
    }
    m->ctx.reg = it->c->reg;
    rc = pipe_mix_open(&req, ins, choice, &m->ctx, &m->mix);
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    if (restore) {
        struct pipe_mix_state st = {.pos = restore->pos,
                                    .nchoices = restore->nchoices,
                                    .pending = restore->pending,
                                    .ended = restore->ended,
                                    .done = (bool *)restore->done};
        pipe_mix_set_state(m->mix, &st);
        it->taken_local = restore->delivered;
        atomic_store(&it->taken, restore->delivered);
    }

    /* What follows the pushed maps runs in the reader, over the mix. */
    bool local = o->local && *o->local;
    if (npush == spec->nops && !local)
        return 0;
    int n = npush < spec->nops ? pipe_spec_format_ops(spec, npush, spec->nops, NULL, 0) : 0;
    size_t extra = local ? strlen(o->local) : 0;
    char *text = n < 0 ? NULL : malloc((size_t)n + extra + 4);
    if (!text)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    text[0] = '\0';
    if (n > 0)
        pipe_spec_format_ops(spec, npush, spec->nops, text, (size_t)n + 1);
    if (local)
        sprintf(text + n, "%s%s", n > 0 ? " | " : "", o->local);
    m->in_tail = true;
    rc = iter_open_tail(it, text, n > 0 ? "operations run in the reader" : "local tail", err,
                        errlen);
    free(text);
    return rc;
}

struct pipe_iter *iter_mix_take(struct sluice_iterator *it)
{
    struct pipe_iter *mix = it->mix->mix;
    it->mix->mix = NULL;
    return mix;
}

int iter_mix_next(struct sluice_iterator *it, uint32_t timeout_ms, char *err, size_t errlen)
{
    struct iter_mix *m = it->mix;
    if (iter_interrupted(it))
        return err_set(err, errlen, SLUICE_ERR_CANCELLED, "interrupted");
    /* A stopped read's inputs say so themselves (iter_mix_stop): no lock per element here. */
    if (!m->mix)
        return err_set(err, errlen, SLUICE_ERR_CLOSED, "iterator closed");
    m->timeout_ms = timeout_ms;
    m->waiting_on = 0;
    int rc = pipe_next(m->mix, &it->elem);
    if (rc == 1) {
        it->taken_local++;
        atomic_store_explicit(&it->taken, it->taken_local, memory_order_relaxed);
        return 1;
    }
    if (rc == SLUICE_ERR_TIMEOUT)
        return err_set(err, errlen, rc, "no element within %" PRIu32 " ms", timeout_ms);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s", m->ctx.err[0] ? m->ctx.err : sluice_strerror(rc));
    return 0;
}

void iter_mix_stop(struct sluice_iterator *it)
{
    struct iter_mix *m = it->mix;
    for (size_t i = 0; m && i < m->nkids; i++)
        if (m->kids[i].read)
            iter_reader_stop(m->kids[i].read);
}

void iter_mix_release(struct sluice_iterator *it)
{
    free_mix(it->mix);
    it->mix = NULL;
}

int iter_mix_save(struct sluice_iterator *it, uint8_t **bytes, size_t *len, char *err,
                  size_t errlen)
{
    struct iter_mix *m = it->mix;
    struct checkpoint_mix ck;
    memset(&ck, 0, sizeof ck);
    snprintf(ck.dataset_id, sizeof ck.dataset_id, "%s", it->dataset_id);
    snprintf(ck.job_name, sizeof ck.job_name, "%s", it->job_name);
    ck.flags = it->det ? CHECKPOINT_DETERMINISTIC : 0;
    ck.def_hash = it->def_hash;
    ck.delivered = it->taken_local;
    ck.ninputs = m->ninputs;
    struct pipe_mix_state st = {.done = ck.done};
    int rc = m->mix ? pipe_mix_get_state(m->mix, &st) : SLUICE_ERR_CLOSED;
    if (rc)
        return err_set(err, errlen, rc, "the mix has no position: %s",
                       m->ctx.err[0] ? m->ctx.err : sluice_strerror(rc));
    ck.pos = st.pos;
    ck.nchoices = st.nchoices;
    ck.pending = st.pending;
    ck.ended = st.ended;
    ck.nreads = m->nkids;
    uint8_t *parts[CHECKPOINT_MIX_MAX_READS] = {0};
    char msg[SLUICE_ERRMSG_SIZE];
    for (size_t i = 0; i < m->nkids && rc == 0; i++) {
        rc = sluice_iterator_save(m->kids[i].read, &parts[i], &ck.read_len[i], msg, sizeof msg);
        if (rc)
            err_set(err, errlen, rc, "input %zu: %s", i, msg);
        ck.read[i] = parts[i];
    }
    if (rc == 0 && (rc = checkpoint_mix_encode(&ck, bytes, len)) < 0)
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    for (size_t i = 0; i < m->nkids; i++)
        free(parts[i]);
    return rc;
}

int iter_mix_waiting(struct sluice_iterator *it, char *buf, size_t len)
{
    struct iter_mix *m = it->mix;
    uv_mutex_lock(&it->mu);
    bool failed = it->state == ITER_FAILED;
    if (failed)
        snprintf(buf, len, "%s", it->fail_msg);
    uv_mutex_unlock(&it->mu);
    if (failed)
        return 1;
    /* The input the last wait was for, else the first that waits. */
    size_t first = m->waiting_on ? m->waiting_on - 1 : 0;
    for (size_t k = 0; k < m->nkids; k++) {
        size_t i = (first + k) % m->nkids;
        char why[SLUICE_ERRMSG_SIZE];
        int rc = m->kids[i].read ? sluice_iterator_waiting(m->kids[i].read, why, sizeof why) : 0;
        if (rc > 0) {
            if (i < m->ninputs)
                snprintf(buf, len, "input %zu: %s", i, why);
            else
                snprintf(buf, len, "choice: %s", why);
            return rc;
        }
    }
    return 0;
}

void iter_mix_progress(const struct sluice_iterator *it, struct sluice_read_progress *out)
{
    const struct iter_mix *m = it->mix;
    /* On the tail's thread the mix's outputs are the elements its inputs gave. */
    out->elements = m && m->in_tail ? 0 : it->taken_local;
    for (size_t i = 0; m && i < m->ninputs; i++) {
        struct sluice_read_progress p;
        if (m->kids[i].read && sluice_iterator_progress(m->kids[i].read, &p) == 0) {
            if (m->in_tail)
                out->elements += p.elements;
            out->copies_cut += p.copies_cut;
            out->splits_done += p.splits_done;
            out->splits_total += p.splits_total;
        }
    }
}

int iter_mix_report(struct sluice_iterator *it)
{
    struct iter_mix *m = it->mix;
    int rc = 0;
    for (size_t i = 0; m && i < m->nkids; i++) {
        int r = m->kids[i].read ? sluice_iterator_report(m->kids[i].read) : 0;
        if (r && !rc)
            rc = r;
    }
    return rc;
}

int iter_mix_merge(const uint8_t *const *ckpts, const size_t *lens, size_t n, uint8_t **out,
                   size_t *out_len, char *err, size_t errlen)
{
    struct checkpoint_mix *v = calloc(n, sizeof *v);
    const uint8_t **parts = calloc(n, sizeof *parts);
    size_t *part_lens = calloc(n, sizeof *part_lens);
    uint8_t *merged[CHECKPOINT_MIX_MAX_READS] = {0};
    int rc = 0;
    if (!v || !parts || !part_lens) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        goto out;
    }
    char why[SLUICE_ERRMSG_SIZE];
    for (size_t i = 0; i < n && rc == 0; i++) {
        if ((rc = checkpoint_mix_decode(ckpts[i], lens[i], &v[i], why, sizeof why)) < 0)
            err_set(err, errlen, rc, "checkpoint %zu: %s", i + 1, why);
        else if (strcmp(v[i].dataset_id, v[0].dataset_id) != 0 || v[i].def_hash != v[0].def_hash ||
                 v[i].ninputs != v[0].ninputs || v[i].nreads != v[0].nreads)
            rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                         "checkpoint %zu: not of the mix of checkpoint 1 (dataset '%s', not '%s')",
                         i + 1, v[i].dataset_id, v[0].dataset_id);
        else if (v[i].pending)
            rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                         "checkpoint %zu: taken with a choice read and its element not (its "
                         "reader waited for that input); save again after the next element",
                         i + 1);
    }
    /* The consumers had disjoint elements: each input's positions merge as any read's do, the
     * mixer's counts add up, and an input ended only where it ended for all of them. */
    struct checkpoint_mix m = v[0];
    for (size_t i = 1; i < n && rc == 0; i++) {
        m.delivered += v[i].delivered;
        m.pos += v[i].pos;
        m.nchoices += v[i].nchoices;
        m.ended = m.ended && v[i].ended;
        m.flags &= v[i].flags;
        for (size_t k = 0; k < m.ninputs; k++)
            m.done[k] = m.done[k] && v[i].done[k];
    }
    for (size_t k = 0; k < m.nreads && rc == 0; k++) {
        for (size_t i = 0; i < n; i++) {
            parts[i] = v[i].read[k];
            part_lens[i] = v[i].read_len[k];
        }
        rc = sluice_checkpoint_merge(parts, part_lens, n, &merged[k], &m.read_len[k], why,
                                     sizeof why);
        if (rc)
            err_set(err, errlen, rc, "input %zu: %s", k, why);
        m.read[k] = merged[k];
    }
    if (rc == 0 && (rc = checkpoint_mix_encode(&m, out, out_len)) < 0)
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
out:
    for (size_t k = 0; k < CHECKPOINT_MIX_MAX_READS; k++)
        free(merged[k]);
    free(v);
    free(parts);
    free(part_lens);
    return rc;
}

struct sluice_iterator *iter_mix_first(struct sluice_iterator *it)
{
    struct iter_mix *m = it->mix;
    return m && m->nkids ? m->kids[0].read : NULL;
}
