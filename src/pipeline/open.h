/* Opening a pipeline: a spec becomes a running pipeline, a chain of iterators (iter.h) with the
 * context it reports errors into, pulled with pipe_run_next(). This is what callers that run
 * pipelines use; operators implement the interface of iter.h and need nothing from here.
 * Defined in open.c, which builds the chain. */
#ifndef SLUICE_PIPELINE_OPEN_H
#define SLUICE_PIPELINE_OPEN_H

#include "element.h"
#include "iter.h" /* struct pipe_ctx and struct pipe_iter, which a run holds */
#include "spec.h"
#include "common/split_plan.h" /* struct split */

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct sluice_registry;

/* What a pipeline may use, for the open calls that take limits. */
struct pipe_limits {
    uint64_t max_element_bytes; /* 0: no limit */
    /* NULL, or a context whose cancel flag cancels the chain as well (it becomes the parent of
     * the run's context): an owner that stops many runs at once, such as a worker's task, sets
     * one flag, and a source waiting inside next() (a snapshot chunk not written yet) sees it.
     * It must outlive the run. */
    const struct pipe_ctx *cancel_parent;
    /* NULL, or where the run adds the time of its source and operations (prof.h); it must
     * outlive the run. */
    struct pipe_prof *prof;
};

/* A running pipeline: the chain plus the context it reports errors into. */
struct pipe_run {
    struct pipe_ctx ctx;
    struct pipe_iter *it;
    /* A profiled run (prof.h): what lies below its outermost timing wrapper, which
     * pipe_run_next calls directly between the wrapper's samples (skip_left more calls), and the
     * calls that went past the wrapper so since it was last called. below is NULL otherwise. */
    struct pipe_iter *below;
    uint32_t skip_left, skipped;
};

/* Builds the whole pipeline of spec. Functions are resolved in reg (which must outlive the
 * run). Files of tfrecord(), lines() and tar() sources are expanded and opened here, so a missing
 * file is reported now: SLUICE_ERR_NOT_FOUND with the glob in err. A registry confined to data
 * roots (pipe_registry_confine) refuses a source with a file or glob directory outside them
 * first (SLUICE_ERR_DENIED, pipe_roots_check_source); with any registry the file readers check
 * each file against reg's roots again as they open it, also the split files of
 * pipe_open_splits(). On success *out is owned by the caller and freed with pipe_run_free(). */
int pipe_open(const struct pipe_spec *spec, const struct sluice_registry *reg,
              struct pipe_run **out, char *err, size_t errlen);

/* pipe_open and pipe_open_splits with limits (NULL: none), which the whole chain, prefetch
 * threads included, observes from its first element on. */
int pipe_open_limited(const struct pipe_spec *spec, const struct sluice_registry *reg,
                      const struct pipe_limits *limits, struct pipe_run **out, char *err,
                      size_t errlen);
int pipe_open_splits_limited(const struct pipe_spec *spec, const struct sluice_registry *reg,
                             const struct pipe_limits *limits, const struct split *splits,
                             size_t nsplits, struct pipe_run **out, char *err, size_t errlen);

/* Builds the worker's part of the pipeline over the given splits of its source instead of the
 * whole source: the source yields the elements of splits[0], then splits[1], ..., and the ops run
 * over that. Only the ops pipe_dist_analyze() places on the workers run: those on the split
 * sequence (repeat, and take/skip/shard over the source's positions) were applied by the split
 * provider, and those from the cut on run in the client. Splits are copied. Every shuffle is seeded
 * from splits[0].seq (and its own seed when it has one) rather than from chance, so opening the
 * same split again yields the same elements in the same order: a split re-issued after its worker
 * died is processed again identically, which lets a consumer drop the elements it already received
 * by position. */
int pipe_open_splits(const struct pipe_spec *spec, const struct sluice_registry *reg,
                     const struct split *splits, size_t nsplits, struct pipe_run **out, char *err,
                     size_t errlen);

/* Builds only the ops of tail (from pipe_parse_tail) over an upstream iterator the caller
 * provides; the run takes ownership of upstream, whose ctx pointer is redirected to the run's.
 * Used for --local tails applied to elements arriving from the service. Ownership of upstream
 * passes in every case: on failure it has been destroyed. repeat() other than repeat(1) cannot
 * re-open such an upstream and is SLUICE_ERR_UNSUPPORTED ("column C: repeat cannot re-read
 * elements from the service; it is not supported in a local tail"). */
int pipe_open_tail(const struct pipe_spec *tail, const struct sluice_registry *reg,
                   struct pipe_iter *upstream, struct pipe_run **out, char *err, size_t errlen);

/* How a repeat in a tail reads its upstream again: returns 0 with *out a new upstream (owned by
 * the chain from then on) for the pass over the upstream numbered pass (1, 2, ...; the first
 * pass, 0, is the upstream given to pipe_open_tail_reopen; nested repeats number the passes in
 * order, as repeat.h numbers a source's), or a negative code with a message in err. Runs on the
 * thread that runs the chain (the tail's prefetch thread when it has one), after the previous
 * pass's upstream was destroyed. */
typedef int (*pipe_reopen_fn)(void *user, uint64_t pass, struct pipe_iter **out, char *err,
                              size_t errlen);

/* pipe_open_tail() whose repeats read the upstream again through reopen (user is passed to it
 * and must outlive the run). repeat() ends, as over a source, once a whole pass yields nothing. */
int pipe_open_tail_reopen(const struct pipe_spec *tail, const struct sluice_registry *reg,
                          struct pipe_iter *upstream, pipe_reopen_fn reopen, void *user,
                          struct pipe_run **out, char *err, size_t errlen);

/* pipe_run_next's call of the outermost iterator, which a profiled run makes once every
 * PIPE_PROF_EVERY calls (the sampled one). */
int pipe_run_next_outer(struct pipe_run *run, struct sluice_element *out);

/* Next element of a run: 1, 0 at end, or a negative code with the message in run->ctx.err.
 * Between the samples of a profiled run it steps over the timing wrapper on top, whose calls
 * would cost as much as producing a small element's. */
static inline int pipe_run_next(struct pipe_run *run, struct sluice_element *out)
{
    if (run->skip_left) {
        run->skip_left--;
        run->skipped++;
        return pipe_next(run->below, out);
    }
    return run->below ? pipe_run_next_outer(run, out) : pipe_next(run->it, out);
}

/* Makes a running pipeline give up: the loops inside next() that could run for ever (a filter
 * dropping everything, skip, shard, repeat, a prefetch thread) stop and return
 * SLUICE_ERR_CANCELLED. Any thread may call it while the run exists, e.g. to unblock a next() in
 * progress on a pipeline thread before freeing the run. */
static inline void pipe_run_cancel(struct pipe_run *run)
{
    atomic_store(&run->ctx.cancel, 1);
}

void pipe_run_free(struct pipe_run *run);

#endif
