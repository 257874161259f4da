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
    bool top;
    uint64_t calls, next_at; /* top: outer calls so far, the next one sampled */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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
    uint64_t own = d > ctx->prof_below ? d - ctx->prof_below : 0;
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
    *it = &p->base;
    return 0;
}

void pipe_prof_mark_top(struct pipe_iter *it)
{
    if (it && it->ops == &prof_ops)
        ((struct prof_iter *)it)->top = true;
}

static const char *op_kind_name(enum pipe_op_kind k)
{
    switch (k) {
    case PIPE_OP_MAP:
        return "map";
    case PIPE_OP_FILTER:
        return "filter";
    case PIPE_OP_SHUFFLE:
        return "shuffle";
    case PIPE_OP_BATCH:
        return "batch";
    case PIPE_OP_TAKE:
        return "take";
    case PIPE_OP_SKIP:
        return "skip";
    case PIPE_OP_REPEAT:
        return "repeat";
    case PIPE_OP_SHARD:
        return "shard";
    case PIPE_OP_PREFETCH:
        return "prefetch";
    case PIPE_OP_GLOBAL_SHUFFLE:
        return "global_shuffle";
    case PIPE_OP_PACK:
        return "pack";
    }
    return "op";
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
        snprintf(buf, len, "%s(%s)#%u", op_kind_name(op->kind), op->fn ? op->fn : "", stage);
    else
        snprintf(buf, len, "%s#%u", op_kind_name(op->kind), stage);
}
