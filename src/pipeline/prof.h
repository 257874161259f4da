/* Where a pipeline's time goes: the seconds spent in its source and in each of its operations,
 * measured by sampling so that the per-element path reads no clock.
 *
 * A run opened with limits whose prof is set (open.h) wraps its source and each operation it
 * runs (ops [0, PIPE_PROF_STAGES - 1)) in a timing iterator. The outermost wrapper of a chain
 * counts its calls and times one in PIPE_PROF_EVERY of them (the first call always): during
 * that call every wrapper below it times its own calls too, and each adds its exclusive time
 * (its call's duration less the time spent in the wrapper below it) multiplied by the number of
 * outer calls the sample stands for. Calls that are not sampled cost one branch and one indirect
 * call per wrapper, except the outermost of a run pulled with pipe_run_next, which steps over it
 * between samples (open.h). A prefetch's upstream is a chain of its own (its own thread and
 * context) with its own outermost wrapper; the time a chain spends waiting for a prefetch shows in
 * the stage above the prefetch. Time spent inside a mix's inputs counts as the source's.
 *
 * Stage numbers: 0 the source, k + 1 operation k of the spec (prefetch, global_shuffle and the
 * operations the split provider applies have no time of their own).
 *
 * Threading: the sums are atomic, so every producer of a task may share one struct pipe_prof and
 * any thread may read it; a wrapper's sampling state belongs to the thread running its chain. */
#ifndef SLUICE_PIPELINE_PROF_H
#define SLUICE_PIPELINE_PROF_H

#include "iter.h"
#include "spec.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Stages timed per run: the source and the first PIPE_PROF_STAGES - 1 operations (the time of
 * operations beyond them is not counted). */
#define PIPE_PROF_STAGES 14
/* One outer call in this many is timed. */
#define PIPE_PROF_EVERY 64
/* The iterator below it when it is the outermost timing wrapper of a chain (pipe_prof_mark_top),
 * else NULL: a caller may call that one directly for calls that are not sampled, provided it
 * tells the wrapper how many it made (pipe_prof_top_skipped) before calling it again.
 * pipe_prof_top_unsampled says how many calls from now on the wrapper would not sample. */
struct pipe_iter *pipe_prof_top_below(struct pipe_iter *it);
void pipe_prof_top_skipped(struct pipe_iter *it, uint64_t n);
uint64_t pipe_prof_top_unsampled(const struct pipe_iter *it);
/* Longest stage name, NUL included ("map(decode_jpeg)#1"; longer names are cut). */
#define PIPE_PROF_NAME_MAX 64

/* The sums of one or more runs; zero-initialised is empty. */
struct pipe_prof {
    atomic_uint_fast64_t ns[PIPE_PROF_STAGES];
};

/* Wraps *it, the iterator of stage `stage` (< PIPE_PROF_STAGES), in a timing iterator adding to
 * prof under (*it)->ctx. On success *it is the wrapper, which owns the old *it. Returns 0 or
 * SLUICE_ERR_NOMEM (*it unchanged and still the caller's). */
int pipe_prof_wrap(struct pipe_prof *prof, unsigned stage, struct pipe_iter **it);

/* Marks it, when it is a timing iterator, as the outermost of its chain: the one that decides
 * which calls are sampled. */
void pipe_prof_mark_top(struct pipe_iter *it);

/* The name of stage `stage` of spec into buf: "source(range)" for the source, "map(fn)#K" or
 * "filter(fn)#K" for a map or filter at position K (1-based, in the pipeline text), "batch#K",
 * "shuffle#K", ... for the others. "" when spec has no such stage. */
void pipe_prof_stage_name(const struct pipe_spec *spec, unsigned stage, char *buf, size_t len);

#endif
