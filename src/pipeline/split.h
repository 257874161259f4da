/* Split providers for distributed processing (docs/design.md §3, §4). Pure and deterministic.
 *
 * A provider builds a dataset's split plan (common/split_plan.h, which holds the arithmetic) and
 * analyzes where its operations run. A splittable source is cut into a fixed sequence of splits:
 * chunks of positions for range() and list(), one file per split for tfrecord(), lines() and tar()
 * (files in sorted name order; a tar() split is one whole shard), one chunk per split for
 * snapshot() (in chunk order; the chunk count comes from snapshot.json, the chunks themselves may
 * not exist yet), one row group per split for parquet(), and one run of split_size documents per
 * split for megatron() (the pipe_split_default_size of its document count when the job gives no
 * split size). The operations that dist.h places on the split sequence are applied here:
 * repeat(R) makes the sequence the source's splits R times over (forever for repeat()), so the
 * cluster as a whole sees each element exactly R times, and take, skip and shard make the positions
 * a view of the source (position g is source element pipe_dist_index(&dist, g)). Split i of the
 * sequence is a pure function of (spec, split_size, i), which lets the dispatcher journal a split
 * cursor as one integer.
 *
 * With global_shuffle(SEED), split i of a file source is file split_file_index() of the sorted
 * list: pass r = i / per_pass reads the files in the order of a permutation keyed by
 * (SEED, r). Splits of range() and list() keep their positions; the source maps positions
 * through the permutation (dist.h). */
#ifndef SLUICE_PIPELINE_SPLIT_H
#define SLUICE_PIPELINE_SPLIT_H

#include "common/split_plan.h"
#include "dist.h"
#include "paths.h"
#include "spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A split provider: the split plan of a dataset (common/split_plan.h) and where each of its
 * operations runs in distributed_epoch. The plan's splits are read with split_plan_at() and
 * counted with split_plan_total(). */
struct pipe_split_provider {
    struct split_plan plan; /* kind, shuffled and seed set by pipe_split_plan_reads(); FILES:
                               the sorted expanded file list, or the snapshot's chunk files */
    struct pipe_dist dist;  /* where each op runs in distributed_epoch */
};

/* The default number of elements per split for a range/list source of len elements: small
 * sources are cut so several workers share them, large ones coarsely so leasing costs nothing
 * against processing, and no source of more than two elements is cut into one-element splits
 * (each split costs a lease and an end marker, and a batch on the workers cannot span splits).
 * The size is len / 256 (rounded down) clamped to [16, 16384]; a source of fewer than 32
 * elements is cut in two halves (range(10) -> 2 splits of 5). A source of 4096 to 4 Mi elements
 * gets between 256 and 511 splits, a larger one splits of 16384 elements, so a split of a cheap
 * pipeline is milliseconds of work and the number of leases grows only linearly with the
 * source. */
uint64_t pipe_split_default_size(uint64_t len);

/* Builds the provider for spec. split_size 0 picks pipe_split_default_size(); either is then
 * raised to the analysis' minimum and rounded up to a multiple of its batch quantum
 * (pipe_dist_split_size). File globs are expanded (on the calling machine) here; a glob matching
 * nothing is SLUICE_ERR_NOT_FOUND; a pipeline pipe_dist_analyze() refuses is its error.
 * Returns 0, or a negative code with a message in err. */
int pipe_split_provider_init(struct pipe_split_provider *p, const struct pipe_spec *spec,
                             uint64_t split_size, char *err, size_t errlen);
/* pipe_split_provider_init() for a confined registry's roots (NULL: not confined): the files a
 * parquet() or megatron() source plans from are opened through them (pipe_roots_open_file) to
 * read their footers or index. */
struct pipe_roots;
int pipe_split_provider_init_confined(struct pipe_split_provider *p, const struct pipe_spec *spec,
                                      const struct pipe_roots *roots, uint64_t split_size,
                                      char *err, size_t errlen);
void pipe_split_provider_release(struct pipe_split_provider *p);

/* Sets what a split plan takes from the dataset's pipeline rather than from the dispatcher:
 * its kind (SPLIT_FILES for a source that reads files, SPLIT_RANGES for range() and list()) and,
 * when spec starts with global_shuffle(SEED), shuffled and seed. The provider sets them so, and
 * a worker on every plan it receives, so both read the same split for a split number. */
void pipe_split_plan_reads(const struct pipe_spec *spec, struct split_plan *plan);

/* The files a file source (pipe_source_reads_files) reads, in split order: its globs expanded
 * (pipe_glob_expand), or for snapshot("DIR") the chunk files DIR/snapshot.json counts, which
 * need not exist yet (pipe_snapshot_paths: a DIR without snapshot.json is SLUICE_ERR_NOT_FOUND,
 * "snapshot DIR: not a snapshot (no snapshot.json)"), or for parquet() the row groups of the
 * files its globs match, each named "FILE#row-group=N" (pipe_parquet_row_groups: the files'
 * footers are read, through roots when not NULL), or for megatron("PREFIX") runs of
 * pipe_split_default_size(documents) documents, each named "PREFIX#docs=START+COUNT"
 * (megatron.h: PREFIX.idx's header is read, through roots when not NULL; the provider cuts runs of
 * the job's split size instead when it has one). Same ownership as pipe_glob_expand. */
int pipe_source_paths(const struct pipe_source *src, const struct pipe_roots *roots, char ***paths,
                      size_t *npaths, char *err, size_t errlen);

/* Whether src names objects by an s3:// URL not yet pinned to a listing (objurl.h). */
bool pipe_source_needs_pin(const struct pipe_source *src);

/* Lists src's s3:// globs once (pipe_glob_expand: one paginated ListObjectsV2 walk each) and
 * puts the pinned URLs of the objects they match in their place, in sorted order; its other
 * globs stay as they are. The dispatcher does this when a dataset is registered, so its stored
 * definition names the objects with their sizes and ETags: workers and plans read those, and
 * never list. Blocks on the network. Returns 0, or a negative code with the reason in err (src
 * unchanged). */
int pipe_source_pin(struct pipe_source *src, char *err, size_t errlen);

#endif
