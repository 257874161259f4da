/* Split plans (docs/design.md §4): how a distributed_epoch dataset is cut into a numbered
 * sequence of splits, and the one arithmetic on that sequence. Pure: no clock, I/O, logging or
 * threads; any thread may call these functions on a plan it does not share with a writer.
 *
 * A plan cuts one pass over the source into per_pass splits: runs of split_size positions of a
 * range() or list() source (the last run short when split_size does not divide source_len), or
 * one file each of a tfrecord(), lines(), tar() or snapshot() source. The pass is repeated
 * `passes` times, forever when passes is UINT64_MAX. Split seq of the sequence is split
 * k = seq % per_pass of pass r = seq / per_pass; a file split reads paths[k], or under
 * global_shuffle(SEED) paths[split_file_index(true, SEED, npaths, r, k)].
 *
 * Every side computes splits from the same plan: the pipeline's split provider builds it from a
 * dataset (pipeline/split.h), the dispatcher fixes it when an iteration is created, journals it
 * (JournalSplitPlan) and sends it to the iteration's workers (wire SplitPlan), and a worker
 * checks what it received (split_plan_check) and reads each split it leases from it. So the
 * numbers are the same everywhere, and a split number names the same split on every machine. */
#ifndef SLUICE_COMMON_SPLIT_PLAN_H
#define SLUICE_COMMON_SPLIT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every file name of a plan is shorter than this (struct split holds one). */
#define SPLIT_PATH_MAX 4096

/* What a split of the plan is. */
enum split_kind {
    SPLIT_UNSET,  /* not known: the dispatcher's plans, which it counts but never reads */
    SPLIT_RANGES, /* range(), list(): a run of positions */
    SPLIT_FILES,  /* tfrecord(), lines(), tar(), snapshot(): one file (a snapshot's chunk) */
};

struct split_plan {
    /* The numbers. The dispatcher journals them with the iteration, sends them to its workers
     * and fingerprints them. */
    uint64_t source_len; /* RANGES: positions in one pass (of the view, pipeline/dist.h) */
    uint64_t split_size; /* RANGES: positions per split */
    uint64_t per_pass;   /* splits in one pass */
    uint64_t passes;     /* passes over the source; UINT64_MAX: endless */
    char **paths;        /* FILES: the files of one pass, in sorted order (owned) */
    size_t npaths;
    /* How the splits are read: the side that reads them takes this from the dataset's
     * pipeline (pipe_split_plan_reads); it is neither journaled, sent nor fingerprinted, and
     * the dispatcher leaves it zero. */
    enum split_kind kind;
    bool shuffled; /* FILES: the pipeline starts with global_shuffle(seed), which orders the
                      files of each pass */
    int64_t seed;
};

/* One split of a plan. */
struct split {
    uint64_t seq;        /* position in the split sequence */
    uint64_t repetition; /* which pass over the source (0-based) */
    uint64_t begin, end; /* RANGES: positions [begin, end) of the view (pipeline/dist.h) */
    uint64_t index;      /* which split of its pass: seq % per_pass, or for a file source under
                            global_shuffle the file's index in the sorted list */
    char path[SPLIT_PATH_MAX]; /* FILES: the file; empty otherwise */
};

/* The splits of split_size positions that cover source_len positions: ceil(source_len /
 * split_size), without overflow. split_size must not be 0. */
uint64_t split_per_pass(uint64_t source_len, uint64_t split_size);

/* Splits in the whole sequence: per_pass * passes, UINT64_MAX when endless or overflowing, 0
 * when either is 0. */
uint64_t split_plan_total(const struct split_plan *p);

/* Fills *out with split seq. Returns 1, or 0 when seq is past the end of the sequence. The plan
 * is one split_plan_check() accepts or one the split provider built; its kind must be set. */
int split_plan_at(const struct split_plan *p, uint64_t seq, struct split *out);

/* The file that split k of pass r reads, of nfiles: k itself, or under global_shuffle(seed)
 * (shuffled) the image of k under the permutation of [0, nfiles) keyed by (seed, r, part 0)
 * (common/perm.h). A local run reads the files of a pass in this order too. */
uint64_t split_file_index(bool shuffled, int64_t seed, uint64_t nfiles, uint64_t r, uint64_t k);

/* Checks a plan received from the network, its kind set from the dataset: per_pass > 0 (unless
 * passes or source_len is 0: an empty sequence); for RANGES split_size > 0 and per_pass =
 * split_per_pass(source_len, split_size); for FILES npaths == per_pass and every path non-empty
 * and shorter than SPLIT_PATH_MAX. Returns 0, or SLUICE_ERR_CORRUPT with a message in err. */
int split_plan_check(const struct split_plan *p, char *err, size_t errlen);

/* Deep copy: dst is overwritten, not released. Returns 0, or SLUICE_ERR_NOMEM with dst empty. */
int split_plan_copy(struct split_plan *dst, const struct split_plan *src);

/* Frees the paths and leaves p zeroed. */
void split_plan_release(struct split_plan *p);

/* A fingerprint of the numbers (FNV-1a, common/fnv.h, over source_len, split_size, per_pass,
 * passes, npaths and the paths): the same plan always gives the same value, on every machine and
 * after a restart, so a checkpoint can tell whether a new iteration cuts the dataset into the
 * same splits as the one it was taken in. Checkpoints store it: the value never changes. */
uint64_t split_plan_fingerprint(const struct split_plan *p);

#endif
