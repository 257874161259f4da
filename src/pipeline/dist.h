/* What each operation of a pipeline means in distributed_epoch, and where it runs. Pure.
 *
 * In distributed_epoch the dispatcher cuts the source into splits and workers run the operations
 * on each split. An operation whose meaning depends on the whole stream (take, skip, shard,
 * batch, repeat) would silently change meaning if it ran per split, so the analysis assigns each
 * operation one of three places:
 *
 *  - the split sequence (the dispatcher): repeat, and take/skip/shard that see the source's
 *    positions exactly, i.e. only 1:1 operations (map, prefetch) and other such operations
 *    before them, or a batch whose size is folded into the count (take(2) after batch(32) is the
 *    first 64 positions). They become a view of the source: position g of a pass is source
 *    element offset + ((skip + g) mod count) * stride;
 *  - the workers, per split: map, filter, prefetch, shuffle, and a batch whose input counts are
 *    known: the split size is then a multiple of the batch size, so every split but the last
 *    yields full batches, exactly as over the whole stream;
 *  - the client, over the merged stream it receives: everything from the first operation that
 *    can be neither (a batch, take, skip or shard after a filter or a shuffle, or after a file
 *    source whose record counts the dispatcher cannot know). A repeat there is refused, since the
 *    client cannot re-read the stream.
 *
 * A shuffle runs per split; the analysis asks for splits of at least its buffer so the buffer
 * fills within a split as it would over the stream.
 *
 * global_shuffle(SEED), always the first op, is placed on the split sequence. For range() and
 * list() it permutes the source: position x of pass e of the shuffled stream is source element
 * perm_e(x), perm_e the permutation of [0, source length) keyed by (SEED, e) (common/perm.h), so
 * the order depends on the seed and the pass only, never on the split size. The ops after it see
 * the shuffled positions exactly as they would see the source's: take, skip and shard still
 * select views, which the splits then cut; the pass of a position is pipe_dist_pass(). For
 * file sources pass e reads the files in the order perm_e over the file list and each file's
 * records in an order keyed by (SEED, e, file), see split.h and gshuffle.h. */
#ifndef SLUICE_PIPELINE_DIST_H
#define SLUICE_PIPELINE_DIST_H

#include "spec.h"

#include <stddef.h>
#include <stdint.h>

enum pipe_dist_place { PIPE_DIST_SPLITS, PIPE_DIST_WORKER, PIPE_DIST_CLIENT };

struct pipe_dist {
    /* range(), list(): the view. count is the source positions in one pass (after the take,
     * skip and shard applied before any repeat); the split sequence covers len positions per
     * pass, passes times (UINT64_MAX: forever). When take/skip after a repeat or a batch after
     * a repeat join the passes into one sequence, skip is the outer skip, len spans several
     * passes of count, and position g maps to (skip + g) mod count. tfrecord(), lines(), tar():
     * offset 0, stride 1, count = len = 0 (the split provider counts files), skip 0. */
    uint64_t offset, stride, count, skip;
    uint64_t len, passes;
    uint64_t quantum;   /* split sizes are multiples of this: the product of worker batches */
    uint64_t min_split; /* splits hold at least this many positions (worker shuffles) */
    size_t cut;         /* ops [cut, nops) run in the client */
    bool client_slices; /* a take, skip or shard runs in the client */
    const char *why;    /* why op cut cannot run on the workers */
    bool shuffled;      /* the pipeline starts with global_shuffle(seed) */
    int64_t seed;
};

/* The pass (epoch) that position g of a split of repetition r belongs to, for global_shuffle:
 * the passes of count positions laid end to end, the outer skip first. When passes were joined
 * into one sequence (passes == 1) r is 0; otherwise len is a whole number of passes of count.
 * Arithmetic wraps for sequences past 2^64 positions, identically on every machine. */
static inline uint64_t pipe_dist_pass(const struct pipe_dist *d, uint64_t r, uint64_t g)
{
    if (d->count == 0)
        return 0;
    return r * (d->len / d->count) + (d->skip + g) / d->count;
}

/* Analyses spec for distributed_epoch. Returns 0, or SLUICE_ERR_UNSUPPORTED with a message
 * naming the operations and why, for a pipeline that cannot mean the same as over the whole
 * dataset (a repeat that would run in the client). Also the "why" of the cut is kept in
 * out->why for messages (a static string, NULL when nothing runs in the client). */
int pipe_dist_analyze(const struct pipe_spec *spec, struct pipe_dist *out, char *err,
                      size_t errlen);

/* Where op k runs, given the analysis. */
enum pipe_dist_place pipe_dist_place_of(const struct pipe_spec *spec, const struct pipe_dist *d,
                                        size_t k);

/* The source element index of position g of a split (range/list). */
static inline uint64_t pipe_dist_index(const struct pipe_dist *d, uint64_t g)
{
    /* A division only past the first lap: it costs as much as producing a small element. */
    uint64_t q = d->skip + g;
    if (q >= d->count)
        q = d->count ? q % d->count : 0;
    return d->offset + q * d->stride;
}

/* Adjusts a split size (0: choose) to the analysis: at least min_split, a multiple of quantum.
 * pick is the default size chosen for d->len. Saturates instead of overflowing. */
uint64_t pipe_dist_split_size(const struct pipe_dist *d, uint64_t requested, uint64_t pick);

#endif
