/* Building a running pipeline from a spec.
 *
 * pipe_open*() validate the spec and prepare a plan once: a private copy of the spec, the
 * resolved functions, the converted list() literals, the expanded file list or the split spans.
 * build() then turns (plan, first nops ops) into an iterator chain; repeat calls it again for
 * every pass, so re-opening an upstream is the same code as opening it. A prefetch splits the
 * chain: the ops below it are built under the prefetch's own context. */
#include "open.h"

#include "batch.h"
#include "common/error.h"
#include "dist.h"
#include "files.h"
#include "gshuffle.h"
#include "iter.h"
#include "map.h"
#include "megatron.h"
#include "mix.h"
#include "pack.h"
#include "prefetch.h"
#include "prof.h"
#include "registry.h"
#include "repeat.h"
#include "roots.h"
#include "shuffle.h"
#include "slice.h"
#include "snapsrc.h"
#include "split.h"
#include "source.h"
#include "jsonl.h"
#include "pqsrc.h"
#include "tar.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

enum plan_mode { PLAN_WHOLE, PLAN_SPLITS, PLAN_TAIL };

struct plan {
    enum plan_mode mode;
    struct pipe_spec *spec;       /* owned copy */
    const struct pipe_fn **fns;   /* per op: the resolved map/filter function, else NULL */
    struct sluice_element *elems; /* list(): converted values */
    size_t nelems;
    char **paths; /* tfrecord(), lines(), tar(): files to read, in order */
    size_t npaths;
    /* global_shuffle(seed) is the first op. PLAN_SPLITS over files: each split's file index and
     * pass (npaths of them). */
    bool shuffled;
    int64_t seed;
    struct pipe_gshuffle_file *split_files;
    struct pipe_span *spans; /* PLAN_SPLITS over range()/list(): positions of dist's view */
    size_t nspans;
    /* PLAN_SPLITS: where each op runs (dist.h); the chain holds the worker's ops [0, nops) but
     * those placed on the split sequence. Otherwise nops is every op. */
    struct pipe_dist dist;
    size_t nops;
    struct pipe_iter *tail_up; /* PLAN_TAIL: the caller's upstream until the chain takes it */
    pipe_reopen_fn reopen;     /* PLAN_TAIL: how a repeat reads the upstream again, or NULL */
    void *reopen_user;
    /* PLAN_SPLITS: the key every shuffle is seeded from (mixed with its seed when it has one),
     * derived from the first split's sequence number, so a split processed again (re-issued
     * after its worker died) yields the same elements in the same order. */
    bool split_keyed;
    uint64_t split_key;
    /* Otherwise: the key random functions draw from when they have no seed, drawn at random
     * when the run is opened. */
    uint64_t run_key;
};

struct run_impl {
    struct pipe_run run; /* first: the public handle points here */
    struct plan plan;
};

static void plan_release(struct plan *pl)
{
    pipe_spec_free(pl->spec);
    free(pl->fns);
    pipe_list_elems_free(pl->elems, pl->nelems);
    pipe_paths_free(pl->paths, pl->npaths);
    free(pl->split_files);
    free(pl->spans);
    if (pl->tail_up)
        pl->tail_up->ops->destroy(pl->tail_up);
    memset(pl, 0, sizeof(*pl));
}

/* ---- Building chains --------------------------------------------------------------------- */

static int build(struct plan *pl, size_t nops, uint64_t salt, uint64_t pass, struct pipe_ctx *ctx,
                 char *err, size_t errlen, struct pipe_iter **out);

static int rebuild(const struct pipe_rebuild *rb, uint64_t salt, uint64_t pass,
                   struct pipe_ctx *ctx, struct pipe_iter **out)
{
    return build(rb->plan, rb->nops, salt, pass, ctx, ctx->err, sizeof(ctx->err), out);
}

/* The pass number (repeat.h) of the chain below ops [from, to) of a chain of pass e: each
 * repeat(N) among them is in its first pass, so the number is e times their counts. */
static uint64_t inner_pass(const struct plan *pl, size_t from, size_t to, uint64_t e)
{
    for (size_t k = from; k < to; k++) {
        const struct pipe_op *op = &pl->spec->ops[k];
        if (op->kind == PIPE_OP_REPEAT && op->has_n && op->n >= 0)
            e *= (uint64_t)op->n;
    }
    return e;
}

static int open_file_reader(void *arg, char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                            struct pipe_iter **out)
{
    const struct pipe_source *src = &((struct plan *)arg)->spec->source;
    switch (src->kind) {
    case PIPE_SRC_TFRECORD:
        return pipe_tfrecord_open(paths, npaths, ctx, out);
    case PIPE_SRC_LINES:
        return pipe_lines_open(paths, npaths, ctx, out);
    case PIPE_SRC_TAR:
        return pipe_tar_open(paths, npaths, src->exts, src->nexts, ctx, out);
    case PIPE_SRC_SNAPSHOT:
        return pipe_snapshot_open(src->globs[0], paths, npaths, ctx, out);
    case PIPE_SRC_PARQUET:
        return pipe_parquet_open(paths, npaths, src->columns, src->ncolumns, ctx, out);
    case PIPE_SRC_JSONL:
        return pipe_jsonl_open(paths, npaths, src->columns, src->ncolumns, ctx, out);
    case PIPE_SRC_MEGATRON:
        return pipe_megatron_open(paths, npaths, ctx, out);
    case PIPE_SRC_RANGE:
    case PIPE_SRC_LIST:
    case PIPE_SRC_SAMPLE:
    case PIPE_SRC_CHOOSE:
        break;
    }
    return SLUICE_ERR_INVALID;
}

static void release_run(void *run)
{
    pipe_run_free(run);
}

/* A mixing source: each input pipeline (and the choice pipeline) opens as a run of its own under
 * ctx, with ctx's element limit, so a cancel of the chain reaches them. */
static int open_mix(const struct pipe_source *src, struct pipe_ctx *ctx, char *err, size_t errlen,
                    struct pipe_iter **out)
{
    const char *name =
        src->kind == PIPE_SRC_SAMPLE ? "sample_from_datasets" : "choose_from_datasets";
    struct pipe_limits lim = {ctx->max_element_bytes, ctx};
    struct pipe_mix_input ins[PIPE_MIX_MAX_INPUTS] = {{0}};
    struct pipe_mix_input choice = {0};
    char cerr[SLUICE_ERRMSG_SIZE];
    struct pipe_run *run = NULL;
    int rc = 0;
    size_t n = src->ninputs;
    if (n == 0 || n > PIPE_MIX_MAX_INPUTS)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "column %d: %s needs 1 to %d inputs",
                       src->column, name, PIPE_MIX_MAX_INPUTS);
    for (size_t i = 0; i < n && !rc; i++) {
        rc = pipe_open_limited(src->inputs[i], ctx->reg, &lim, &run, cerr, sizeof cerr);
        if (rc)
            err_set(err, errlen, rc, "column %d: %s input %zu: %s", src->column, name, i, cerr);
        else
            ins[i] = (struct pipe_mix_input){run->it, run};
    }
    if (!rc && src->kind == PIPE_SRC_CHOOSE) {
        rc = pipe_open_limited(src->choice, ctx->reg, &lim, &run, cerr, sizeof cerr);
        if (rc)
            err_set(err, errlen, rc, "column %d: %s choice: %s", src->column, name, cerr);
        else
            choice = (struct pipe_mix_input){run->it, run};
    }
    if (rc) {
        for (size_t i = 0; i < n; i++)
            pipe_run_free(ins[i].owner);
        return rc;
    }
    struct pipe_mix_request req = {src->kind, src->weights,       n,
                                   src->seed, src->stop_on_empty, release_run};
    rc = pipe_mix_open(&req, ins, choice, ctx, out);
    if (rc)
        return err_set(err, errlen, rc, "column %d: %s: %s", src->column, name,
                       sluice_strerror(rc));
    return 0;
}

/* A file source under global_shuffle: the files of the splits, or of the pass in the order
 * the split sequence gives them (split_file_index). */
static int open_shuffled_files(struct plan *pl, uint64_t pass, struct pipe_ctx *ctx,
                               struct pipe_iter **out)
{
    if (pl->mode == PLAN_SPLITS)
        return pipe_gshuffle_files_open(pl->split_files, pl->npaths, pl->seed,
                                        PIPE_GSHUFFLE_FILE_BYTES, open_file_reader, pl, ctx, out);
    struct pipe_gshuffle_file *files = calloc(pl->npaths ? pl->npaths : 1, sizeof *files);
    if (!files)
        return SLUICE_ERR_NOMEM;
    for (size_t k = 0; k < pl->npaths; k++) {
        uint64_t j = split_file_index(true, pl->seed, pl->npaths, pass, k);
        files[k] = (struct pipe_gshuffle_file){pl->paths[j], j, pass};
    }
    int rc = pipe_gshuffle_files_open(files, pl->npaths, pl->seed, PIPE_GSHUFFLE_FILE_BYTES,
                                      open_file_reader, pl, ctx, out);
    free(files);
    return rc;
}

static int open_source(struct plan *pl, uint64_t pass, struct pipe_ctx *ctx, char *err,
                       size_t errlen, struct pipe_iter **out)
{
    const struct pipe_source *src = &pl->spec->source;
    const struct pipe_span *spans = pl->mode == PLAN_SPLITS ? pl->spans : NULL;
    const struct pipe_dist *view = pl->mode == PLAN_SPLITS ? &pl->dist : NULL;
    struct pipe_src_shuffle shuffle = {pl->seed, pass};
    const struct pipe_src_shuffle *shuf = pl->shuffled ? &shuffle : NULL;
    int rc = 0;
    if (pl->mode == PLAN_TAIL) {
        /* The first build takes the caller's upstream; only a repeat builds again, and a tail
         * has one only when it can reopen (validate). */
        if (pl->tail_up) {
            *out = pl->tail_up;
            pl->tail_up = NULL;
        } else {
            rc = pl->reopen(pl->reopen_user, pass, out, err, errlen);
            if (rc)
                return rc;
        }
        (*out)->ctx = ctx;
        return 0;
    }
    switch (src->kind) {
    case PIPE_SRC_RANGE:
        rc =
            pipe_range_open(src->start, src->step, pipe_range_len(src->start, src->stop, src->step),
                            spans, pl->nspans, view, shuf, ctx, out);
        break;
    case PIPE_SRC_LIST:
        rc = pipe_list_open(pl->elems, pl->nelems, spans, pl->nspans, view, shuf, ctx, out);
        break;
    case PIPE_SRC_TFRECORD:
    case PIPE_SRC_LINES:
    case PIPE_SRC_TAR:
    case PIPE_SRC_SNAPSHOT:
    case PIPE_SRC_PARQUET:
    case PIPE_SRC_JSONL:
    case PIPE_SRC_MEGATRON:
        rc = pl->shuffled ? open_shuffled_files(pl, pass, ctx, out)
                          : open_file_reader(pl, pl->paths, pl->npaths, ctx, out);
        break;
    case PIPE_SRC_SAMPLE:
    case PIPE_SRC_CHOOSE:
        return open_mix(src, ctx, err, errlen, out);
    }
    if (rc)
        return err_set(err, errlen, rc, "column %d: source: %s", src->column, sluice_strerror(rc));
    return 0;
}

/* Whether the source's last record is the element op k receives: no op before it holds
 * elements back or reorders them. */
static bool origin_passes(const struct plan *pl, size_t k)
{
    for (size_t j = 0; j < k; j++) {
        enum pipe_op_kind kind = pl->spec->ops[j].kind;
        if (kind == PIPE_OP_SHUFFLE || kind == PIPE_OP_BATCH || kind == PIPE_OP_PREFETCH ||
            kind == PIPE_OP_GLOBAL_SHUFFLE || kind == PIPE_OP_PACK)
            return false;
    }
    return true;
}

/* Wraps *it in op k (which is not a prefetch). On failure *it has been destroyed. */
static int apply_op(struct plan *pl, size_t k, size_t nops, uint64_t salt, uint64_t pass,
                    struct pipe_ctx *ctx, char *err, size_t errlen, struct pipe_iter **it)
{
    const struct pipe_op *op = &pl->spec->ops[k];
    struct pipe_iter *up = *it;
    int rc = 0;
    /* The split provider applied these to the splits' positions already. */
    if (pl->mode == PLAN_SPLITS && pipe_dist_place_of(pl->spec, &pl->dist, k) == PIPE_DIST_SPLITS)
        return 0;
    switch (op->kind) {
    case PIPE_OP_MAP:
    case PIPE_OP_FILTER: {
        struct pipe_map_env env = {pl->split_keyed, pl->split_keyed ? pl->split_key : pl->run_key,
                                   salt, origin_passes(pl, k)};
        rc = pipe_map_open(pl->fns[k], op->kind == PIPE_OP_MAP ? PIPE_FN_MAP : PIPE_FN_FILTER,
                           op->args, op->nargs, &env, up, ctx, it);
        break;
    }
    case PIPE_OP_SHUFFLE:
        if (pl->split_keyed) {
            uint64_t key = pipe_salt_mix(pl->split_key, op->has_seed ? (uint64_t)op->seed : 0);
            rc = pipe_shuffle_open(op->n, true, (int64_t)key, salt, up, ctx, it);
        } else {
            rc = pipe_shuffle_open(op->n, op->has_seed, op->seed, salt, up, ctx, it);
        }
        break;
    case PIPE_OP_BATCH:
        rc = pipe_batch_open(op->n, op->drop_remainder, up, ctx, it);
        break;
    case PIPE_OP_PACK:
        rc = pipe_pack_open(op->n, op->first_fit, op->window, up, ctx, it);
        break;
    case PIPE_OP_TAKE:
        rc = pipe_take_open(op->n, up, ctx, it);
        break;
    case PIPE_OP_SKIP:
        rc = pipe_skip_open(op->n, up, ctx, it);
        break;
    case PIPE_OP_REPEAT:
        /* repeat(1) changes nothing. */
        if (op->has_n && op->n == 1)
            return 0;
        {
            struct pipe_rebuild rb = {rebuild, pl, k, salt, inner_pass(pl, k + 1, nops, pass)};
            rc = pipe_repeat_open(op->has_n ? op->n : -1, &rb, up, ctx, it);
        }
        break;
    case PIPE_OP_SHARD:
        /* SHARD_HINT marks where the service shards; a local run reads everything. */
        if (op->n_is_hint || op->index_is_hint)
            return 0;
        rc = pipe_shard_open(op->n, op->index, up, ctx, it);
        break;
    case PIPE_OP_PREFETCH:
        return 0; /* handled by build() */
    case PIPE_OP_GLOBAL_SHUFFLE:
        return 0; /* applied by the source */
    }
    if (rc) {
        *it = NULL;
        return err_set(err, errlen, rc, "column %d: %s", op->column, sluice_strerror(rc));
    }
    return 0;
}

/* Wraps *it, stage `stage` of a chain under ctx, in a timing iterator when ctx is profiled
 * (prof.h) and the stage is one that is timed. On failure *it is unchanged. */
static int prof_wrap(struct pipe_ctx *ctx, size_t stage, struct pipe_iter **it)
{
    if (!ctx->prof || stage >= PIPE_PROF_STAGES)
        return 0;
    return pipe_prof_wrap(ctx->prof, (unsigned)stage, it);
}

/* Builds the source and ops [0, nops) of the plan into a chain reporting into ctx. Failure
 * messages go to err. A prefetch at index p makes ops [0, p) a chain of their own, built under
 * the prefetch's context and run by its thread. */
static int build(struct plan *pl, size_t nops, uint64_t salt, uint64_t pass, struct pipe_ctx *ctx,
                 char *err, size_t errlen, struct pipe_iter **out)
{
    *out = NULL;
    size_t lo = nops;
    while (lo > 0 && pl->spec->ops[lo - 1].kind != PIPE_OP_PREFETCH)
        lo--;
    struct pipe_iter *it = NULL;
    int rc;
    if (lo == 0) {
        rc = open_source(pl, inner_pass(pl, 0, nops, pass), ctx, err, errlen, &it);
        if (!rc && (rc = prof_wrap(ctx, 0, &it)) != 0) {
            it->ops->destroy(it);
            return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        }
    } else {
        const struct pipe_op *op = &pl->spec->ops[lo - 1];
        struct pipe_ctx *uctx;
        struct pipe_iter *up;
        rc = pipe_prefetch_new(op->n, ctx, &it, &uctx);
        if (rc)
            return err_set(err, errlen, rc, "column %d: %s", op->column, sluice_strerror(rc));
        rc = build(pl, lo - 1, salt, inner_pass(pl, lo, nops, pass), uctx, err, errlen, &up);
        if (!rc) {
            pipe_prof_mark_top(up);
            rc = pipe_prefetch_start(it, up);
            if (rc)
                err_set(err, errlen, rc, "column %d: prefetch: cannot start a thread: %s",
                        op->column, sluice_strerror(rc));
        }
        if (rc) {
            it->ops->destroy(it);
            return rc;
        }
    }
    if (rc)
        return rc;
    for (size_t k = lo; k < nops; k++) {
        struct pipe_iter *before = it;
        rc = apply_op(pl, k, nops, salt, pass, ctx, err, errlen, &it);
        if (rc)
            return rc;
        if (it != before && (rc = prof_wrap(ctx, k + 1, &it)) != 0) {
            it->ops->destroy(it);
            return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        }
    }
    *out = it;
    return 0;
}

/* ---- Validation -------------------------------------------------------------------------- */

/* Checks what the engine relies on, so a spec from any origin (parser, wire, hand-built) either
 * opens or fails with a message: functions exist and fit, sizes are in range. */
static int validate(const struct pipe_spec *spec, const struct sluice_registry *reg,
                    enum plan_mode mode, bool reopens, char *err, size_t errlen)
{
    int rc = pipe_registry_check(reg, spec, err, errlen);
    if (rc)
        return rc;
    if (mode != PLAN_TAIL && spec->source.kind == PIPE_SRC_RANGE && spec->source.step == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "column %d: range step must not be 0",
                       spec->source.column);
    if (mode != PLAN_TAIL && spec->source.kind == PIPE_SRC_TAR &&
        (spec->source.nexts == 0 || spec->source.nexts > PIPE_MAX_COMPONENTS))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "column %d: tar needs 1 to %d member extensions", spec->source.column,
                       PIPE_MAX_COMPONENTS);
    if (mode != PLAN_TAIL && spec->source.kind == PIPE_SRC_JSONL &&
        (spec->source.ncolumns == 0 || spec->source.ncolumns > PIPE_MAX_COMPONENTS))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "column %d: jsonl needs 1 to %d fields",
                       spec->source.column, PIPE_MAX_COMPONENTS);
    if (mode != PLAN_TAIL && spec->source.kind == PIPE_SRC_SNAPSHOT &&
        (spec->source.nglobs != 1 || !spec->source.globs[0][0]))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "column %d: snapshot needs exactly one directory", spec->source.column);
    if (mode != PLAN_TAIL && pipe_source_mixes(spec->source.kind)) {
        const char *want = pipe_mix_problem(&spec->source);
        if (want)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "column %d: expected %s",
                           spec->source.column, want);
        if (pipe_spec_global_shuffle(spec, NULL))
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "column %d: global_shuffle permutes a source's positions, and a mix "
                           "has none of its own; shuffle its inputs, or shuffle(N) after it",
                           spec->ops[0].column);
    }
    if (mode != PLAN_TAIL && spec->source.kind == PIPE_SRC_MEGATRON &&
        (spec->source.nglobs != 1 || !spec->source.globs[0][0]))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "column %d: megatron needs exactly one prefix", spec->source.column);
    for (size_t k = 0; k < spec->nops; k++) {
        const struct pipe_op *op = &spec->ops[k];
        switch (op->kind) {
        case PIPE_OP_SHUFFLE:
            if (op->n < 1)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "column %d: shuffle buffer must be >= 1", op->column);
            break;
        case PIPE_OP_BATCH:
            if (op->n < 1)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "column %d: batch size must be >= 1", op->column);
            break;
        case PIPE_OP_PACK: {
            const char *why = pipe_pack_problem(op->n, op->window);
            if (why)
                return err_set(err, errlen, SLUICE_ERR_INVALID, "column %d: pack: %s", op->column,
                               why);
            break;
        }
        case PIPE_OP_SHARD:
            if (op->n_is_hint || op->index_is_hint)
                break;
            if (op->n < 1 || op->index < 0 || op->index >= op->n)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "column %d: shard index must be in [0, %lld)", op->column,
                               (long long)op->n);
            break;
        case PIPE_OP_GLOBAL_SHUFFLE:
            if (mode == PLAN_TAIL || k != 0)
                return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                               "column %d: global_shuffle must come right after the source",
                               op->column);
            break;
        case PIPE_OP_REPEAT:
            if (mode == PLAN_TAIL && !reopens && !(op->has_n && op->n == 1))
                return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                               "column %d: repeat cannot re-read elements from the service; "
                               "it is not supported in a local tail",
                               op->column);
            break;
        default:
            break;
        }
    }
    return 0;
}

/* ---- Opening ----------------------------------------------------------------------------- */

/* Prepares everything but the source data; the caller adds that and builds. */
static int run_new(const struct pipe_spec *spec, const struct sluice_registry *reg,
                   const struct pipe_limits *limits, enum plan_mode mode, bool reopens,
                   struct run_impl **out, char *err, size_t errlen)
{
    *out = NULL;
    int rc = validate(spec, reg, mode, reopens, err, errlen);
    if (rc)
        return rc;
    struct run_impl *r = calloc(1, sizeof(*r));
    if (!r)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    r->run.ctx.reg = reg;
    r->run.ctx.max_element_bytes = limits ? limits->max_element_bytes : 0;
    r->run.ctx.parent = limits ? limits->cancel_parent : NULL;
    r->run.ctx.prof = limits ? limits->prof : NULL;
    atomic_init(&r->run.ctx.cancel, 0);
    /* Random functions without a seed draw from this key outside distributed_epoch, like an
     * unseeded shuffle: different in every run. */
    if (mode != PLAN_SPLITS &&
        getrandom(&r->plan.run_key, sizeof(r->plan.run_key), 0) != (ssize_t)sizeof(r->plan.run_key))
        r->plan.run_key = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    r->plan.mode = mode;
    r->plan.nops = spec->nops;
    r->plan.shuffled = mode != PLAN_TAIL && pipe_spec_global_shuffle(spec, &r->plan.seed);
    rc = pipe_spec_clone(spec, &r->plan.spec);
    if (!rc && spec->nops > 0) {
        r->plan.fns = calloc(spec->nops, sizeof(*r->plan.fns));
        if (!r->plan.fns)
            rc = SLUICE_ERR_NOMEM;
    }
    if (rc) {
        plan_release(&r->plan);
        free(r);
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    }
    for (size_t k = 0; k < spec->nops; k++)
        if (spec->ops[k].kind == PIPE_OP_MAP || spec->ops[k].kind == PIPE_OP_FILTER)
            r->plan.fns[k] = pipe_registry_find(reg, spec->ops[k].fn);
    *out = r;
    return 0;
}

/* Converts list() values; used by both pipe_open() and pipe_open_splits(). */
static int prepare_list(struct plan *pl, char *err, size_t errlen)
{
    const struct pipe_source *src = &pl->spec->source;
    if (src->kind != PIPE_SRC_LIST)
        return 0;
    int rc = pipe_list_convert(src->values, src->nvalues, src->column, &pl->elems, err, errlen);
    if (rc)
        return rc;
    pl->nelems = src->nvalues;
    return 0;
}

static int finish_open(struct run_impl *r, struct pipe_run **out, char *err, size_t errlen)
{
    int rc = build(&r->plan, r->plan.nops, 0, 0, &r->run.ctx, err, errlen, &r->run.it);
    if (rc) {
        pipe_run_free(&r->run);
        return rc;
    }
    pipe_prof_mark_top(r->run.it);
    r->run.below = pipe_prof_top_below(r->run.it);
    *out = &r->run;
    return 0;
}

int pipe_run_next_outer(struct pipe_run *run, struct sluice_element *out)
{
    /* The wrapper counts the calls that went past it, so that this one is its next sample. */
    pipe_prof_top_skipped(run->it, run->skipped);
    run->skipped = 0;
    int rc = pipe_next(run->it, out);
    uint64_t left = pipe_prof_top_unsampled(run->it);
    run->skip_left = left < UINT32_MAX ? (uint32_t)left : UINT32_MAX;
    return rc;
}

int pipe_open(const struct pipe_spec *spec, const struct sluice_registry *reg,
              struct pipe_run **out, char *err, size_t errlen)
{
    return pipe_open_limited(spec, reg, NULL, out, err, errlen);
}

int pipe_open_limited(const struct pipe_spec *spec, const struct sluice_registry *reg,
                      const struct pipe_limits *limits, struct pipe_run **out, char *err,
                      size_t errlen)
{
    struct run_impl *r;
    *out = NULL;
    int rc = run_new(spec, reg, limits, PLAN_WHOLE, false, &r, err, errlen);
    if (rc)
        return rc;
    const struct pipe_source *src = &r->plan.spec->source;
    if (pipe_source_reads_files(src->kind)) {
        /* A confined registry's files must lie in its data roots; the readers check each file
         * again when they open it. */
        rc = pipe_roots_check_source(pipe_registry_roots(reg), src, err, errlen);
        if (rc == 0)
            rc = pipe_source_paths(src, pipe_registry_roots(reg), &r->plan.paths, &r->plan.npaths,
                                   err, errlen);
    } else
        rc = prepare_list(&r->plan, err, errlen);
    if (rc) {
        pipe_run_free(&r->run);
        return rc;
    }
    return finish_open(r, out, err, errlen);
}

int pipe_open_splits(const struct pipe_spec *spec, const struct sluice_registry *reg,
                     const struct split *splits, size_t nsplits, struct pipe_run **out, char *err,
                     size_t errlen)
{
    return pipe_open_splits_limited(spec, reg, NULL, splits, nsplits, out, err, errlen);
}

int pipe_open_splits_limited(const struct pipe_spec *spec, const struct sluice_registry *reg,
                             const struct pipe_limits *limits, const struct split *splits,
                             size_t nsplits, struct pipe_run **out, char *err, size_t errlen)
{
    struct run_impl *r;
    *out = NULL;
    int rc = run_new(spec, reg, limits, PLAN_SPLITS, false, &r, err, errlen);
    if (rc)
        return rc;
    struct plan *pl = &r->plan;
    const struct pipe_source *src = &pl->spec->source;
    rc = pipe_dist_analyze(pl->spec, &pl->dist, err, errlen);
    if (rc) {
        pipe_run_free(&r->run);
        return rc;
    }
    pl->nops = pl->dist.cut;
    pl->split_keyed = true;
    /* A fixed odd constant keeps split 0's key away from the seed value 0. */
    pl->split_key = pipe_salt_mix(0x9e3779b97f4a7c15ull, nsplits ? splits[0].seq + 1 : 0);
    if (pipe_source_reads_files(src->kind)) {
        pl->paths = calloc(nsplits ? nsplits : 1, sizeof(*pl->paths));
        if (!pl->paths)
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        for (size_t i = 0; !rc && i < nsplits; i++) {
            size_t len = strnlen(splits[i].path, sizeof(splits[i].path));
            if (len == 0 || len == sizeof(splits[i].path)) {
                rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                             "split %llu of a file source has no valid path",
                             (unsigned long long)splits[i].seq);
                break;
            }
            pl->paths[i] = strndup(splits[i].path, len);
            if (!pl->paths[i])
                rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
            else
                pl->npaths = i + 1;
        }
        if (!rc && pl->shuffled) {
            pl->split_files = calloc(nsplits ? nsplits : 1, sizeof *pl->split_files);
            if (!pl->split_files)
                rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
            for (size_t i = 0; !rc && i < nsplits; i++)
                pl->split_files[i] = (struct pipe_gshuffle_file){pl->paths[i], splits[i].index,
                                                                 splits[i].repetition};
        }
    } else {
        pl->spans = calloc(nsplits ? nsplits : 1, sizeof(*pl->spans));
        if (!pl->spans)
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        for (size_t i = 0; !rc && i < nsplits; i++)
            pl->spans[i] = (struct pipe_span){splits[i].begin, splits[i].end, splits[i].repetition};
        pl->nspans = nsplits;
        if (!rc)
            rc = prepare_list(pl, err, errlen);
    }
    if (rc) {
        pipe_run_free(&r->run);
        return rc;
    }
    return finish_open(r, out, err, errlen);
}

int pipe_open_tail_reopen(const struct pipe_spec *tail, const struct sluice_registry *reg,
                          struct pipe_iter *upstream, pipe_reopen_fn reopen, void *user,
                          struct pipe_run **out, char *err, size_t errlen)
{
    struct run_impl *r;
    *out = NULL;
    int rc = run_new(tail, reg, NULL, PLAN_TAIL, reopen != NULL, &r, err, errlen);
    if (rc) {
        upstream->ops->destroy(upstream);
        return rc;
    }
    r->plan.tail_up = upstream;
    r->plan.reopen = reopen;
    r->plan.reopen_user = user;
    return finish_open(r, out, err, errlen);
}

int pipe_open_tail(const struct pipe_spec *tail, const struct sluice_registry *reg,
                   struct pipe_iter *upstream, struct pipe_run **out, char *err, size_t errlen)
{
    return pipe_open_tail_reopen(tail, reg, upstream, NULL, NULL, out, err, errlen);
}

int pipe_limit_msg(char *buf, size_t len, const char *what, uint64_t bytes, uint64_t limit,
                   bool at_least)
{
    return err_set(buf, len, SLUICE_ERR_LIMIT,
                   "%selement of %s%" PRIu64 " bytes is over the worker's limit of %" PRIu64
                   " (--max-element-bytes)",
                   what, at_least ? "at least " : "", bytes, limit);
}

int pipe_limit_fail(struct pipe_ctx *ctx, const char *what, uint64_t bytes, bool at_least)
{
    return pipe_limit_msg(ctx->err, sizeof(ctx->err), what, bytes, ctx->max_element_bytes,
                          at_least);
}

void pipe_run_free(struct pipe_run *run)
{
    if (!run)
        return;
    struct run_impl *r = (struct run_impl *)run;
    /* The chain goes first: it joins prefetch threads that still read the plan. */
    if (run->it)
        run->it->ops->destroy(run->it);
    plan_release(&r->plan);
    free(r);
}
