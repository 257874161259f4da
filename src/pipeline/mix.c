/* The mixing iterator and its draw (mix.h).
 *
 * Happy path: each next() picks an input (the draw, or the next value of the choice pipeline),
 * pulls one element from it into the caller's element and returns it. An input that ends is
 * marked exhausted: with stop_on_empty the mix ends there; otherwise sample_from_datasets draws
 * the same position again among the inputs left, and choose_from_datasets reads the next choice.
 * Failures: an input's error, prefixed with its index; a choice that is not an int64 scalar or
 * not an input index; inputs whose elements differ in structure (checked at each input's first
 * element against the first element of the mix). After the end or an error, next() returns the
 * same again. */
#include "mix.h"

#include "common/error.h"
#include "common/mix64.h"
#include "element.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t pipe_mix_phase(int64_t seed)
{
    /* Nearby seeds give unrelated phases. */
    return mix64((uint64_t)seed);
}

int pipe_mix_pick(const double *weights, const bool *exhausted, size_t n, uint64_t phase,
                  uint64_t x)
{
    double total = 0;
    int last = -1;
    for (size_t i = 0; i < n; i++)
        if (weights[i] > 0 && !(exhausted && exhausted[i])) {
            total += weights[i];
            last = (int)i;
        }
    if (last < 0)
        return -1;
    uint64_t u = phase + x * MIX64_GOLDEN; /* mod 2^64: frac(phase + x / phi) */
    double target = (double)(u >> 11) * 0x1p-53 * total;
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(weights[i] > 0) || (exhausted && exhausted[i]))
            continue;
        acc += weights[i];
        if (target < acc)
            return (int)i;
    }
    return last; /* rounding put target at the total */
}

struct mix_iter {
    struct pipe_iter base;
    struct pipe_mix_request req; /* weights points at the copy below */
    struct pipe_mix_input *inputs;
    struct pipe_mix_input choice;
    double *weights;
    bool *done;  /* per input: exhausted */
    bool *seen;  /* per input: its first element was checked */
    size_t left; /* inputs not exhausted */
    uint64_t phase;
    uint64_t pos; /* output position: elements returned so far */
    uint64_t nchoices;
    size_t pending; /* CHOOSE with timeouts_retry: the input a choice named, + 1; 0: none */
    /* SAMPLE with a horizon callback: the schedule (sched_from[k], sched_w[k * n ...]) and how
     * far it reaches. */
    uint64_t *sched_from;
    double *sched_w;
    size_t nsched;
    uint64_t sched_horizon;
    /* The structure every element must have: that of the mix's first element, from input
     * ref_input; nref is 0 until then. */
    enum sluice_dtype ref[PIPE_MAX_COMPONENTS];
    size_t nref;
    size_t ref_input;
    struct sluice_element pick; /* the choice pipeline's element */
    int state;                  /* 1 running, 0 ended, < 0 the error */
};

static const char *mix_name(const struct mix_iter *m)
{
    return m->req.kind == PIPE_SRC_SAMPLE ? "sample_from_datasets" : "choose_from_datasets";
}

static int mix_fail(struct mix_iter *m, int rc)
{
    m->state = rc;
    return rc;
}

/* An input's (or the choice pipeline's) error, with its index, into the mix's context. */
static int child_fail(struct mix_iter *m, const struct pipe_mix_input *in, const char *what,
                      size_t i, int rc)
{
    struct pipe_ctx *ctx = m->base.ctx;
    const char *msg = in->it->ctx->err[0] ? in->it->ctx->err : sluice_strerror(rc);
    char copy[SLUICE_ERRMSG_SIZE];
    snprintf(copy, sizeof copy, "%s", msg);
    if (i == SIZE_MAX)
        err_set(ctx->err, sizeof(ctx->err), rc, "%s %s: %s", mix_name(m), what, copy);
    else
        err_set(ctx->err, sizeof(ctx->err), rc, "%s %s %zu: %s", mix_name(m), what, i, copy);
    return mix_fail(m, rc);
}

/* The first element of input i: its structure must be the mix's. */
static int check_structure(struct mix_iter *m, size_t i, const struct sluice_element *e)
{
    m->seen[i] = true;
    if (m->nref == 0) {
        m->nref = e->n;
        m->ref_input = i;
        for (size_t k = 0; k < e->n && k < PIPE_MAX_COMPONENTS; k++)
            m->ref[k] = e->t[k].dtype;
        return 0;
    }
    bool same = e->n == m->nref;
    for (size_t k = 0; same && k < e->n; k++)
        same = e->t[k].dtype == m->ref[k];
    if (same)
        return 0;
    enum sluice_dtype got[PIPE_MAX_COMPONENTS];
    size_t ngot = e->n < PIPE_MAX_COMPONENTS ? e->n : PIPE_MAX_COMPONENTS;
    for (size_t k = 0; k < ngot; k++)
        got[k] = e->t[k].dtype;
    char a[256], b[256];
    pipe_dtypes_text(got, ngot, a, sizeof a);
    pipe_dtypes_text(m->ref, m->nref, b, sizeof b);
    err_set(m->base.ctx->err, sizeof(m->base.ctx->err), SLUICE_ERR_TYPE,
            "%s: input %zu yields %s but input %zu yields %s; the inputs of a mix must yield "
            "elements of one structure",
            mix_name(m), i, a, m->ref_input, b);
    return mix_fail(m, SLUICE_ERR_TYPE);
}

/* The next choice of choose_from_datasets: 1 with *i an input index, 0 at the choices' end, or
 * an error. */
static int next_choice(struct mix_iter *m, size_t *i)
{
    int rc = pipe_next(m->choice.it, &m->pick);
    if (rc == SLUICE_ERR_TIMEOUT && m->req.timeouts_retry)
        return rc;
    if (rc < 0)
        return child_fail(m, &m->choice, "choice", SIZE_MAX, rc);
    if (rc == 0)
        return 0;
    uint64_t at = m->nchoices++;
    const struct sluice_element *e = &m->pick;
    if (e->n != 1 || e->t[0].dtype != SLUICE_INT64 || e->t[0].rank != 0) {
        char a[256];
        enum sluice_dtype got[PIPE_MAX_COMPONENTS];
        size_t ngot = e->n < PIPE_MAX_COMPONENTS ? e->n : PIPE_MAX_COMPONENTS;
        for (size_t k = 0; k < ngot; k++)
            got[k] = e->t[k].dtype;
        pipe_dtypes_text(got, ngot, a, sizeof a);
        err_set(m->base.ctx->err, sizeof(m->base.ctx->err), SLUICE_ERR_TYPE,
                "choose_from_datasets: choice %" PRIu64
                " is %s%s, not an int64 scalar (an input index)",
                at, a, e->n == 1 && e->t[0].rank != 0 ? " of rank >= 1" : "");
        return mix_fail(m, SLUICE_ERR_TYPE);
    }
    int64_t v;
    memcpy(&v, e->t[0].data, sizeof v);
    if (v < 0 || (uint64_t)v >= m->req.n) {
        err_set(m->base.ctx->err, sizeof(m->base.ctx->err), SLUICE_ERR_INVALID,
                "choose_from_datasets: the choice at position %" PRIu64 " is %" PRId64
                ", not an input index in [0, %zu)",
                at, v, m->req.n);
        return mix_fail(m, SLUICE_ERR_INVALID);
    }
    *i = (size_t)v;
    return 1;
}

static int mix_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct mix_iter *m = (struct mix_iter *)it;
    if (m->state != 1)
        return m->state;
    for (;;) {
        if (pipe_cancelled(it->ctx)) {
            err_set(it->ctx->err, sizeof(it->ctx->err), SLUICE_ERR_CANCELLED, "%s: cancelled",
                    mix_name(m));
            return mix_fail(m, SLUICE_ERR_CANCELLED);
        }
        size_t i = 0;
        if (m->req.kind == PIPE_SRC_SAMPLE) {
            if (m->req.horizon && m->pos >= m->sched_horizon) {
                char why[SLUICE_ERRMSG_SIZE];
                int rc = m->req.horizon(m->req.horizon_user, it, m->pos, why, sizeof why);
                if (rc == SLUICE_ERR_TIMEOUT && m->req.timeouts_retry)
                    return rc;
                if (rc == 0 && m->pos >= m->sched_horizon)
                    rc = err_set(why, sizeof why, SLUICE_ERR_PROTOCOL,
                                 "the weights schedule does not reach position %" PRIu64, m->pos);
                if (rc < 0) {
                    err_set(it->ctx->err, sizeof(it->ctx->err), rc, "%s: %s", mix_name(m), why);
                    return mix_fail(m, rc);
                }
            }
            const double *w = m->weights;
            for (size_t k = m->nsched; k-- > 0;)
                if (m->sched_from[k] <= m->pos) {
                    w = m->sched_w + k * m->req.n;
                    break;
                }
            int k = pipe_mix_pick(w, m->done, m->req.n, m->phase, m->pos);
            if (k < 0)
                return m->state = 0;
            i = (size_t)k;
        } else if (m->pending) {
            i = m->pending - 1;
            m->pending = 0;
        } else {
            if (m->left == 0)
                return m->state = 0;
            int rc = next_choice(m, &i);
            if (rc == SLUICE_ERR_TIMEOUT && m->req.timeouts_retry)
                return rc;
            if (rc <= 0)
                return rc == 0 ? (m->state = 0) : rc;
            if (m->done[i]) {
                if (m->req.stop_on_empty)
                    return m->state = 0;
                continue;
            }
        }
        int rc = pipe_next(m->inputs[i].it, out);
        if (rc == SLUICE_ERR_TIMEOUT && m->req.timeouts_retry) {
            if (m->req.kind == PIPE_SRC_CHOOSE)
                m->pending = i + 1; /* the choice is read: the next call asks input i again */
            return rc;
        }
        if (rc < 0)
            return child_fail(m, &m->inputs[i], "input", i, rc);
        if (rc == 0) {
            m->done[i] = true;
            m->left--;
            if (m->req.stop_on_empty)
                return m->state = 0;
            continue; /* sample: the same position among the inputs left; choose: next choice */
        }
        if (!m->seen[i] && (rc = check_structure(m, i, out)) < 0)
            return rc;
        m->pos++;
        return 1;
    }
}

static void mix_destroy(struct pipe_iter *it)
{
    struct mix_iter *m = (struct mix_iter *)it;
    for (size_t i = 0; i < m->req.n; i++)
        m->req.release(m->inputs[i].owner);
    if (m->choice.owner)
        m->req.release(m->choice.owner);
    pipe_elem_release(&m->pick);
    free(m->sched_from);
    free(m->sched_w);
    free(m->inputs);
    free(m->weights);
    free(m->done);
    free(m->seen);
    free(m);
}

static const struct pipe_iter_ops mix_ops = {mix_next, mix_destroy};

int pipe_mix_set_schedule(struct pipe_iter *mix, const struct pipe_mix_change *v, size_t n,
                          uint64_t horizon)
{
    struct mix_iter *m = (struct mix_iter *)mix;
    uint64_t *from = malloc((n ? n : 1) * sizeof *from);
    double *w = malloc((n ? n : 1) * m->req.n * sizeof *w);
    if (!from || !w) {
        free(from);
        free(w);
        return SLUICE_ERR_NOMEM;
    }
    for (size_t k = 0; k < n; k++) {
        from[k] = v[k].from;
        memcpy(w + k * m->req.n, v[k].weights, m->req.n * sizeof *w);
    }
    free(m->sched_from);
    free(m->sched_w);
    m->sched_from = from;
    m->sched_w = w;
    m->nsched = n;
    m->sched_horizon = horizon;
    return 0;
}

int pipe_mix_get_state(const struct pipe_iter *mix, struct pipe_mix_state *st)
{
    const struct mix_iter *m = (const struct mix_iter *)mix;
    if (m->state < 0)
        return m->state;
    st->pos = m->pos;
    st->nchoices = m->nchoices;
    st->pending = m->pending;
    st->ended = m->state == 0;
    memcpy(st->done, m->done, m->req.n * sizeof(*m->done));
    return 0;
}

void pipe_mix_set_state(struct pipe_iter *mix, const struct pipe_mix_state *st)
{
    struct mix_iter *m = (struct mix_iter *)mix;
    m->pos = st->pos;
    m->nchoices = st->nchoices;
    m->pending = m->req.kind == PIPE_SRC_CHOOSE && st->pending <= m->req.n ? st->pending : 0;
    m->left = 0;
    for (size_t i = 0; i < m->req.n; i++) {
        m->done[i] = st->done[i];
        m->left += !st->done[i];
    }
    if (st->ended)
        m->state = 0;
}

int pipe_mix_open(const struct pipe_mix_request *req, const struct pipe_mix_input *inputs,
                  struct pipe_mix_input choice, struct pipe_ctx *ctx, struct pipe_iter **out)
{
    *out = NULL;
    size_t n = req->n ? req->n : 1;
    struct mix_iter *m = calloc(1, sizeof(*m));
    if (m) {
        m->inputs = calloc(n, sizeof(*m->inputs));
        m->weights = calloc(n, sizeof(*m->weights));
        m->done = calloc(n, sizeof(*m->done));
        m->seen = calloc(n, sizeof(*m->seen));
    }
    if (!m || !m->inputs || !m->weights || !m->done || !m->seen) {
        for (size_t i = 0; i < req->n; i++)
            req->release(inputs[i].owner);
        if (choice.owner)
            req->release(choice.owner);
        if (m) {
            free(m->inputs);
            free(m->weights);
            free(m->done);
            free(m->seen);
            free(m);
        }
        return SLUICE_ERR_NOMEM;
    }
    m->base.ops = &mix_ops;
    m->base.ctx = ctx;
    m->req = *req;
    if (req->weights)
        memcpy(m->weights, req->weights, req->n * sizeof(*m->weights));
    m->req.weights = m->weights;
    memcpy(m->inputs, inputs, req->n * sizeof(*m->inputs));
    m->choice = choice;
    m->left = req->n;
    m->phase = pipe_mix_phase(req->seed);
    m->state = 1;
    pipe_elem_init(&m->pick);
    *out = &m->base;
    return 0;
}
