/* The placement of a pipeline's operations in distributed_epoch (see dist.h). */
#include "dist.h"

#include "common/error.h"
#include "spec.h"

#include <stdio.h>
#include <string.h>

#define INF UINT64_MAX

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    if (a == 0 || b == 0)
        return 0;
    return a > INF / b ? INF : a * b;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static bool is_hint_shard(const struct pipe_op *op)
{
    return op->kind == PIPE_OP_SHARD && (op->n_is_hint || op->index_is_hint);
}

/* The walk over the ops: what is known about the stream at the current op. */
struct walk {
    bool files;          /* a file source: positions are files, record counts unknown */
    bool counts_known;   /* no filter so far: positions map 1:1 to units of quantum */
    bool order_known;    /* no shuffle so far */
    bool repeated;       /* a repeat was seen */
    bool batch_before;   /* a batch was seen before the first repeat */
    bool joined;         /* the passes form one sequence (outer window or batch after repeat) */
    size_t joined_at;    /* the op that joined them */
    uint64_t outer_take; /* take after repeat, in positions; INF: none */
    const char *why;     /* why the op at the cut cannot run on workers (for messages) */
};

/* Whether op can be applied to the split sequence or the workers; on false, w->why says why. */
static bool placeable(struct walk *w, const struct pipe_op *op, const struct pipe_dist *d)
{
    switch (op->kind) {
    case PIPE_OP_MAP:
    case PIPE_OP_FILTER:
    case PIPE_OP_PREFETCH:
    case PIPE_OP_SHUFFLE:
    case PIPE_OP_REPEAT:
    case PIPE_OP_GLOBAL_SHUFFLE:
    case PIPE_OP_PACK:
        return true;
    case PIPE_OP_BATCH:
        if (op->n <= 0) {
            w->why = "a batch of no elements";
            return false;
        }
        if (w->files) {
            w->why = "files are split whole, so a batch would end at every file's end";
            return false;
        }
        if (!w->counts_known) {
            w->why = "after a filter the splits' sizes are unknown, so a batch would end at "
                     "every split's end";
            return false;
        }
        if (w->repeated && w->batch_before) {
            w->why = "a batch after a repeat of batches spans passes of uneven size";
            return false;
        }
        return mul_sat(d->quantum, (uint64_t)op->n) != INF;
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
    case PIPE_OP_SHARD:
        if (is_hint_shard(op))
            return true;
        if (w->files) {
            w->why = "files are split whole and their record counts are unknown to the "
                     "dispatcher";
            return false;
        }
        if (!w->counts_known) {
            w->why = "after a filter the elements' positions are unknown";
            return false;
        }
        if (!w->order_known) {
            w->why = "after a shuffle the elements' positions are random";
            return false;
        }
        if (op->kind == PIPE_OP_SHARD && (w->repeated || d->quantum > 1)) {
            w->why = "a shard after a repeat or a batch does not select a view of the source";
            return false;
        }
        if (w->repeated && w->batch_before) {
            w->why = "after a repeat of batches the passes hold uneven numbers of batches";
            return false;
        }
        if (w->repeated && op->kind == PIPE_OP_SKIP && w->outer_take != INF) {
            w->why = "a skip after a take that follows a repeat";
            return false;
        }
        return true;
    }
    return false;
}

/* Applies a placeable op to the view. */
static void apply(struct walk *w, const struct pipe_op *op, struct pipe_dist *d)
{
    switch (op->kind) {
    case PIPE_OP_MAP:
    case PIPE_OP_PREFETCH:
        return;
    case PIPE_OP_GLOBAL_SHUFFLE:
        /* The shuffled stream's positions are as exactly known as the source's: nothing about
         * the walk changes. */
        d->shuffled = true;
        d->seed = op->seed;
        return;
    case PIPE_OP_FILTER:
    case PIPE_OP_PACK:
        /* Per split, as a filter: how many sequences a split packs into is unknown. */
        w->counts_known = false;
        return;
    case PIPE_OP_SHUFFLE:
        w->order_known = false;
        if (!w->files && op->n > 0) {
            uint64_t need = mul_sat((uint64_t)op->n, d->quantum);
            if (need > d->min_split)
                d->min_split = need;
        }
        return;
    case PIPE_OP_BATCH:
        d->quantum = mul_sat(d->quantum, (uint64_t)op->n);
        if (w->repeated)
            w->joined = true;
        else
            w->batch_before = true;
        return;
    case PIPE_OP_REPEAT:
        if (op->has_n && op->n == 0)
            d->passes = 0;
        else if (!op->has_n || op->n < 0)
            d->passes = d->passes ? INF : 0;
        else
            d->passes = mul_sat(d->passes, (uint64_t)op->n);
        w->repeated = true;
        return;
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
    case PIPE_OP_SHARD:
        break;
    }
    if (is_hint_shard(op))
        return;
    /* In positions: n units of the current quantum. A negative take keeps everything; a
     * negative skip drops everything (as the operators do). */
    uint64_t n = op->n < 0 ? INF : mul_sat((uint64_t)op->n, d->quantum);
    if (!w->repeated) {
        if (op->kind == PIPE_OP_TAKE) {
            if (op->n >= 0 && n < d->count)
                d->count = n;
        } else if (op->kind == PIPE_OP_SKIP) {
            if (n >= d->count) {
                d->count = 0;
            } else {
                d->offset += n * d->stride;
                d->count -= n;
            }
        } else {
            uint64_t shards = (uint64_t)op->n, index = (uint64_t)op->index;
            if (d->count <= index) {
                d->count = 0;
            } else {
                d->offset += index * d->stride;
                d->count = (d->count - index - 1) / shards + 1;
                d->stride = mul_sat(d->stride, shards);
            }
        }
        if (d->count == 0)
            d->offset = 0;
        return;
    }
    w->joined = true;
    if (op->kind == PIPE_OP_TAKE) {
        if (op->n >= 0 && n < w->outer_take)
            w->outer_take = n;
    } else {
        /* A skip before any outer take (placeable() refuses one after). */
        d->skip = n == INF || d->skip > INF - n ? INF : d->skip + n;
    }
}

/* "take(3)" or "take(3) (column 20)" when the column is known. */
static void op_text(const struct pipe_spec *spec, size_t k, char *buf, size_t len)
{
    char t[96];
    pipe_spec_format_ops(spec, k, k + 1, t, sizeof t);
    if (spec->ops[k].column > 0)
        snprintf(buf, len, "%s (column %d)", t, spec->ops[k].column);
    else
        snprintf(buf, len, "%s", t);
}

int pipe_dist_analyze(const struct pipe_spec *spec, struct pipe_dist *out, char *err, size_t errlen)
{
    /* A mix has no split sequence of its own: readers read each input as a job of its own and
     * mix them (src/client/iterator_mix.c). A job of the whole mix is what an older reader asks. */
    if (pipe_source_mixes(spec->source.kind))
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "%s cannot be one distributed_epoch job: a reader reads each of its inputs "
                       "as a job of its own and mixes them (a sluice client library that does "
                       "is needed), or read it with parallel_epochs",
                       spec->source.kind == PIPE_SRC_SAMPLE ? "sample_from_datasets"
                                                            : "choose_from_datasets");
    uint64_t source_len = 0;
    if (spec->source.kind == PIPE_SRC_RANGE)
        source_len = pipe_range_len(spec->source.start, spec->source.stop, spec->source.step);
    else if (spec->source.kind == PIPE_SRC_LIST)
        source_len = spec->source.nvalues;
    struct pipe_dist d = {.stride = 1, .passes = 1, .quantum = 1};
    struct walk w = {.counts_known = true, .order_known = true, .outer_take = INF};
    w.files = pipe_source_reads_files(spec->source.kind);
    d.count = w.files ? 0 : source_len;
    d.cut = spec->nops;
    for (size_t k = 0; k < spec->nops; k++) {
        const struct pipe_op *op = &spec->ops[k];
        /* The parser and the decoder keep it first; a spec built by hand may not. */
        if (op->kind == PIPE_OP_GLOBAL_SHUFFLE && k != 0) {
            char a[128];
            op_text(spec, k, a, sizeof a);
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "%s must come right after the source", a);
        }
        /* The split sequence repeats passes of the source; a stream whose passes a window or a
         * batch joined is not such a pass (its last batch is short, its window ends inside a
         * pass), so repeating it there would not mean the same. */
        if (op->kind == PIPE_OP_REPEAT && w.joined && !(op->has_n && op->n == 1)) {
            char a[128], b[128];
            op_text(spec, k, a, sizeof a);
            op_text(spec, w.joined_at, b, sizeof b);
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "%s after %s cannot mean the same in distributed_epoch: %s joins the "
                           "passes of the repeat before it into one stream, which the split "
                           "sequence cannot repeat; repeat once, after it or before it",
                           a, b, pipe_op_name(spec->ops[w.joined_at].kind));
        }
        if (!placeable(&w, op, &d)) {
            d.cut = k;
            break;
        }
        bool was_joined = w.joined;
        apply(&w, op, &d);
        if (w.joined && !was_joined)
            w.joined_at = k;
    }
    for (size_t k = d.cut; k < spec->nops; k++) {
        const struct pipe_op *op = &spec->ops[k];
        if (op->kind == PIPE_OP_REPEAT && !(op->has_n && op->n == 1)) {
            char a[128], b[128];
            op_text(spec, k, a, sizeof a);
            op_text(spec, d.cut, b, sizeof b);
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "%s after %s cannot mean the same in distributed_epoch: %s runs in "
                           "the reader (%s), which cannot read the stream again; move the repeat "
                           "before it",
                           a, b, pipe_op_name(spec->ops[d.cut].kind),
                           w.why ? w.why : "it needs the whole stream");
        }
        if ((op->kind == PIPE_OP_TAKE || op->kind == PIPE_OP_SKIP || op->kind == PIPE_OP_SHARD) &&
            !is_hint_shard(op))
            d.client_slices = true;
    }
    if (w.files) {
        *out = (struct pipe_dist){.stride = 1,
                                  .passes = d.passes,
                                  .quantum = 1,
                                  .cut = d.cut,
                                  .client_slices = d.client_slices,
                                  .why = w.why,
                                  .shuffled = d.shuffled,
                                  .seed = d.seed};
        return 0;
    }
    if (w.joined && d.passes != 1) {
        /* One sequence over all passes: its length is the passes' total less the outer skip,
         * cut at the outer take; forever, a whole number of passes that is also a whole number
         * of batches, so every pass of the split sequence starts where a batch does. */
        uint64_t total = d.passes == INF ? INF : mul_sat(d.passes, d.count);
        uint64_t len = total == INF ? INF : (total > d.skip ? total - d.skip : 0);
        if (w.outer_take < len)
            len = w.outer_take;
        if (d.count == 0)
            len = 0;
        if (len != INF) {
            d.len = len;
            d.passes = 1;
        } else {
            uint64_t step = d.quantum / gcd(d.count, d.quantum);
            d.len = mul_sat(d.count, step);
            if (d.len == INF)
                return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                               "a pass of %llu elements in batches of %llu is too long to split",
                               (unsigned long long)d.count, (unsigned long long)d.quantum);
        }
    } else if (w.joined) {
        /* One pass: the outer window is a plain view. */
        uint64_t len = d.count > d.skip ? d.count - d.skip : 0;
        if (w.outer_take < len)
            len = w.outer_take;
        d.len = len;
    } else {
        d.len = d.count;
    }
    if (d.skip >= d.count && d.count)
        d.skip %= d.count;
    d.why = d.cut < spec->nops ? w.why : NULL;
    *out = d;
    return 0;
}

enum pipe_dist_place pipe_dist_place_of(const struct pipe_spec *spec, const struct pipe_dist *d,
                                        size_t k)
{
    if (k >= d->cut)
        return PIPE_DIST_CLIENT;
    switch (spec->ops[k].kind) {
    case PIPE_OP_REPEAT:
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
    case PIPE_OP_GLOBAL_SHUFFLE:
        return PIPE_DIST_SPLITS;
    case PIPE_OP_SHARD:
        return is_hint_shard(&spec->ops[k]) ? PIPE_DIST_WORKER : PIPE_DIST_SPLITS;
    default:
        return PIPE_DIST_WORKER;
    }
}

uint64_t pipe_dist_split_size(const struct pipe_dist *d, uint64_t requested, uint64_t pick)
{
    uint64_t size = requested ? requested : pick;
    if (size < d->min_split)
        size = d->min_split;
    if (size < 1)
        size = 1;
    if (d->quantum > 1 && size % d->quantum) {
        uint64_t up = size / d->quantum + 1;
        size = mul_sat(up, d->quantum);
    }
    return size;
}
