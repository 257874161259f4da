#include "prof.h"

#include "roots.h"

#include "common/error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The sampling state of one chain lives in its context (iter.h): whether the current outer call
 * is sampled, what it stands for, and the time the wrapper below the running one spent. */
struct prof_iter {
    struct pipe_iter base;
    struct pipe_iter *up;
    struct pipe_prof *prof;
    unsigned stage;
    uint64_t cost; /* timing_cost() */
    bool top;
    uint64_t calls, next_at; /* top: outer calls so far, the next one sampled */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* What one timing costs, in nanoseconds: the least of a few back-to-back clock reads, measured
 * once per process. Subtracted from each timed call, so that cheap stages of small elements
 * (a few nanoseconds each) do not take the clock's own cost, multiplied by the sample's weight,
 * for theirs. */
static atomic_uint_fast64_t clock_cost = UINT64_MAX;

static uint64_t timing_cost(void)
{
    uint64_t c = atomic_load_explicit(&clock_cost, memory_order_relaxed);
    if (c != UINT64_MAX)
        return c;
    c = UINT64_MAX;
    for (int i = 0; i < 32; i++) {
        uint64_t a = now_ns(), b = now_ns();
        if (b - a < c)
            c = b - a;
    }
    atomic_store_explicit(&clock_cost, c, memory_order_relaxed);
    return c;
}

/* Times one call of p's upstream and adds its exclusive time, weighted, to its stage. */
static int timed(struct prof_iter *p, struct sluice_element *out)
{
    struct pipe_ctx *ctx = p->base.ctx;
    uint64_t outer_below = ctx->prof_below;
    ctx->prof_below = 0;
    uint64_t t0 = now_ns();
    int rc = pipe_next(p->up, out);
    uint64_t d = now_ns() - t0;
    /* d holds the reads of this call's clock once and, when a timed wrapper ran below, that
     * wrapper's two reads, of which its own d holds one. */
    uint64_t spent = ctx->prof_below + (ctx->prof_below ? 2 : 1) * p->cost;
    uint64_t own = d > spent ? d - spent : 0;
    atomic_fetch_add_explicit(&p->prof->ns[p->stage], own * ctx->prof_weight, memory_order_relaxed);
    ctx->prof_below = outer_below + d;
    return rc;
}

static int prof_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct prof_iter *p = (struct prof_iter *)it;
    struct pipe_ctx *ctx = p->base.ctx;
    if (!p->top)
        return ctx->prof_on ? timed(p, out) : pipe_next(p->up, out);
    if (++p->calls < p->next_at)
        return pipe_next(p->up, out);
    uint64_t from = p->next_at > PIPE_PROF_EVERY ? p->next_at - PIPE_PROF_EVERY : 0;
    ctx->prof_weight = p->calls - from;
    ctx->prof_on = true;
    ctx->prof_below = 0;
    p->next_at = p->calls + PIPE_PROF_EVERY;
    int rc = timed(p, out);
    ctx->prof_on = false;
    return rc;
}

static void prof_destroy(struct pipe_iter *it)
{
    struct prof_iter *p = (struct prof_iter *)it;
    p->up->ops->destroy(p->up);
    free(p);
}

static const struct pipe_iter_ops prof_ops = {prof_next, prof_destroy};

int pipe_prof_wrap(struct pipe_prof *prof, unsigned stage, struct pipe_iter **it)
{
    struct prof_iter *p = calloc(1, sizeof *p);
    if (!p)
        return SLUICE_ERR_NOMEM;
    p->base.ops = &prof_ops;
    p->base.ctx = (*it)->ctx;
    p->up = *it;
    p->prof = prof;
    p->stage = stage < PIPE_PROF_STAGES ? stage : PIPE_PROF_STAGES - 1;
    p->next_at = 1;
    p->cost = timing_cost();
    *it = &p->base;
    return 0;
}

void pipe_prof_mark_top(struct pipe_iter *it)
{
    if (it && it->ops == &prof_ops)
        ((struct prof_iter *)it)->top = true;
}

struct pipe_iter *pipe_prof_top_below(struct pipe_iter *it)
{
    if (!it || it->ops != &prof_ops || !((struct prof_iter *)it)->top)
        return NULL;
    return ((struct prof_iter *)it)->up;
}

void pipe_prof_top_skipped(struct pipe_iter *it, uint64_t n)
{
    ((struct prof_iter *)it)->calls += n;
}

uint64_t pipe_prof_top_unsampled(const struct pipe_iter *it)
{
    const struct prof_iter *p = (const struct prof_iter *)it;
    return p->next_at > p->calls + 1 ? p->next_at - p->calls - 1 : 0;
}

void pipe_prof_stage_name(const struct pipe_spec *spec, unsigned stage, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (stage == 0) {
        snprintf(buf, len, "source(%s)", pipe_source_name(spec->source.kind));
        return;
    }
    if (stage > spec->nops)
        return;
    const struct pipe_op *op = &spec->ops[stage - 1];
    if (op->kind == PIPE_OP_MAP || op->kind == PIPE_OP_FILTER)
        snprintf(buf, len, "%s(%s)#%u", pipe_op_name(op->kind), op->fn ? op->fn : "", stage);
    else
        snprintf(buf, len, "%s#%u", pipe_op_name(op->kind), stage);
}
