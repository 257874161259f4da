/* A read whose local tail repeats (`--local 'repeat(3) | batch(4)'`): every pass of the repeat
 * reads the job's whole stream again, as a new read of the same dataset with the same options:
 * without a job name a new job per repetition; with one, the job's next repetition (a new
 * iteration of the job), which its readers share as they share any iteration. A named job moves
 * to its next repetition once no reader holds the current one (plan_job_repetition), so a reader
 * that finishes a pass first waits for the others, with their progress as its waiting reason.
 *
 * Happy path: iter_repeat_open() opens the first repetition (sluice_iterator_open with the
 * caller's options, without the pipeline, job name and local tail) and the tail over it. The
 * tail's thread pulls the repetition's elements with sluice_iterator_next_into(); at its end the
 * repeat destroys the upstream, which closes the repetition (its client is released, its job
 * collected as any finished read's), and asks iter_repeat_reopen() for the next one. At most one
 * repetition is open at a time, so leases, buffers and connections do not add up.
 *
 * Failure modes: a repetition that fails ends the read with its error; one that cannot be
 * opened (the dispatcher refuses the job) too. Closing the read stops the current repetition
 * (iter_reader_stop) and one opened meanwhile is closed at once: the state is checked under mu
 * when a repetition is published. A repetition is opened with a blocking call to the
 * dispatcher, so a close that comes while one is being opened waits for that call (bounded by
 * the client's timeout). */
#include "iterator_internal.h"

struct rep_upstream {
    struct pipe_iter base;
    struct sluice_iterator *it;
};

static int rep_next(struct pipe_iter *pi, struct sluice_element *out)
{
    struct rep_upstream *up = (struct rep_upstream *)pi;
    struct sluice_iterator *it = up->it;
    /* Only this thread changes it->stream; mu keeps its readers on other threads apart. */
    return iter_next_into(it->stream, out, 0, false, pi->ctx->err, sizeof pi->ctx->err);
}

/* Closes the current repetition: unpublished under mu first, so a caller of waiting or
 * progress never sees one being freed. */
static void close_stream(struct sluice_iterator *it)
{
    uv_mutex_lock(&it->mu);
    struct sluice_iterator *s = it->stream;
    it->stream = NULL;
    if (s) {
        it->rep_taken += atomic_load(&s->taken);
        it->rep_cut += atomic_load(&s->copies_cut);
    }
    uv_mutex_unlock(&it->mu);
    sluice_iterator_close(s);
}

static void rep_destroy(struct pipe_iter *pi)
{
    struct rep_upstream *up = (struct rep_upstream *)pi;
    close_stream(up->it);
    free(up);
}

static const struct pipe_iter_ops rep_ops = {rep_next, rep_destroy};

struct pipe_iter *iter_repeat_upstream(struct sluice_iterator *it)
{
    struct rep_upstream *up = calloc(1, sizeof *up);
    if (!up)
        return NULL;
    up->base.ops = &rep_ops;
    up->it = it;
    return &up->base;
}

/* Opens a repetition and publishes it, unless the read was closed meanwhile. */
static int open_stream(struct sluice_iterator *it, char *err, size_t errlen)
{
    if (iter_interrupted(it))
        return err_set(err, errlen, SLUICE_ERR_CANCELLED, "interrupted");
    struct sluice_iterator *s;
    int rc =
        iter_open_read(it->c, &it->rep_opts, &it->interrupted, it->rep_want, 0, &s, err, errlen);
    if (rc)
        return rc;
    /* A named job's next pass is the repetition after the one this pass reads (an anonymous
     * read gets a new job instead). */
    if (it->rep_opts.job_name && it->rep_opts.job_name[0])
        it->rep_want = s->repetition + 1;
    uv_mutex_lock(&it->mu);
    bool running = it->state == ITER_RUNNING;
    if (running)
        it->stream = s;
    else
        rc = err_set(err, errlen, it->fail_rc, "%s", it->fail_msg);
    uv_mutex_unlock(&it->mu);
    if (!running)
        sluice_iterator_close(s);
    return rc;
}

int iter_repeat_reopen(void *user, uint64_t pass, struct pipe_iter **out, char *err, size_t errlen)
{
    (void)pass; /* every repetition reads the same job stream: its pass 0 */
    struct sluice_iterator *it = user;
    *out = NULL;
    int rc = open_stream(it, err, errlen);
    if (rc)
        return rc;
    *out = iter_repeat_upstream(it);
    if (!*out) {
        close_stream(it);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    }
    return 0;
}

int iter_repeat_open(struct sluice_iterator *it, const struct sluice_read_options *o, char *err,
                     size_t errlen)
{
    it->repeating = true;
    it->rep_opts = *o;
    it->rep_opts.dataset_id = it->dataset_id;
    it->rep_opts.pipeline = NULL;
    it->rep_opts.split_size = 0;
    /* A named job is read again as its next repetition, shared by its readers as each
     * repetition is; an anonymous read gets a new job per repetition. */
    it->rep_opts.job_name = it->job_name[0] ? it->job_name : NULL;
    it->rep_want = 0;
    it->rep_opts.local = NULL;
    it->rep_opts.restore = NULL;
    it->rep_opts.restore_len = 0;
    /* The caller's selector need not outlive the open: the next repetitions read the copy. */
    snprintf(it->rep_selector, sizeof it->rep_selector, "%s",
             o->worker_selector ? o->worker_selector : "");
    it->rep_opts.worker_selector = it->rep_selector;
    int rc = open_stream(it, err, errlen);
    if (rc == 0)
        rc = iter_open_tail(it, o->local, "local tail", err, errlen);
    return rc;
}

void iter_repeat_release(struct sluice_iterator *it)
{
    close_stream(it);
}

int iter_repeat_waiting(struct sluice_iterator *it, char *buf, size_t len)
{
    int rc;
    uv_mutex_lock(&it->mu);
    if (it->state == ITER_FAILED) {
        snprintf(buf, len, "%s", it->fail_msg);
        rc = 1;
    } else if (it->stream) {
        rc = sluice_iterator_waiting(it->stream, buf, len);
    } else {
        /* Between repetitions the read waits for the dispatcher to create the next job: an
         * unreachable dispatcher is the obstacle, anything else the ordinary wait. */
        rc = sluice_client_waiting(it->c, buf, len);
        size_t n = rc == 1 ? strlen(buf) : 0, tail = strlen(" to answer");
        if (rc == 1 && n >= tail && strcmp(buf + n - tail, " to answer") != 0) {
            rc = 1;
        } else {
            snprintf(buf, len, "opening the next repetition's job");
            rc = 2;
        }
    }
    uv_mutex_unlock(&it->mu);
    return rc;
}

void iter_repeat_progress(const struct sluice_iterator *it, struct sluice_read_progress *out)
{
    struct sluice_iterator *m = (struct sluice_iterator *)it;
    uv_mutex_lock(&m->mu);
    out->elements = m->rep_taken + (m->stream ? atomic_load(&m->stream->taken) : 0);
    out->copies_cut = m->rep_cut + (m->stream ? atomic_load(&m->stream->copies_cut) : 0);
    uv_mutex_unlock(&m->mu);
}
