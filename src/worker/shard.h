/* Static sharding (docs/design.md §4): the rewrite of a task's pipeline that makes a worker produce
 * only its share, given the number of workers and its index in the fixed worker list. Pure: the
 * caller expands the source's globs (pipe_glob_expand) when shard_needs_files() says so and
 * passes the sorted file list in.
 *
 *   file          keep the files whose index in the sorted list is worker_index modulo
 *                 num_workers; the source then lists exactly those files. An error for a
 *                 range, list or snapshot source, or when there are fewer files than workers.
 *   data          append shard(num_workers, worker_index) as the last op.
 *   file_or_data  file for a tfrecord, lines or tar source with at least num_workers files,
 *                 data otherwise (as tf.data's AUTO policy falls back to data sharding).
 *   hint          replace each SHARD_HINT argument: the count by num_workers, the index by
 *                 worker_index. A pipeline without hints is left whole.
 *
 * Outside hint mode SHARD_HINT arguments are left as they are: the pipeline engine passes every
 * element through a hinted shard, so a pipeline written for hint sharding runs unchanged in the
 * other modes. parallel_epochs and distributed_epoch leave the pipeline unchanged. */
#ifndef SLUICE_WORKER_SHARD_H
#define SLUICE_WORKER_SHARD_H

#include "pipeline/spec.h"
#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct shard_params {
    enum sluice_mode mode;
    uint32_t num_workers;  /* static modes: >= 1 */
    uint32_t worker_index; /* static modes: < num_workers */
};

/* Whether shard_rewrite needs the expanded file list of spec's source for this mode. */
bool shard_needs_files(const struct pipe_spec *spec, enum sluice_mode mode);

/* Writes into *out a new spec (owned by the caller) with the sharding of p applied. files and
 * nfiles are the sorted expanded file list of the source when shard_needs_files() is true, and
 * are ignored otherwise. Returns 0, SLUICE_ERR_INVALID with a message in err (bad parameters,
 * file sharding of a non-file source or of too few files, a hinted shard whose index is not
 * below its count), or SLUICE_ERR_NOMEM. */
int shard_rewrite(const struct pipe_spec *spec, const struct shard_params *p, char *const *files,
                  size_t nfiles, struct pipe_spec **out, char *err, size_t errlen);

/* Writes path with the glob(3) metacharacters * ? [ and \ escaped by a backslash into a new
 * malloc'd string, so that the glob matches exactly that file. NULL when out of memory. */
char *shard_glob_escape(const char *path);

#endif
