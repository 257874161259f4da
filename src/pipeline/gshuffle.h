/* global_shuffle over file sources (tfrecord, lines, tar): the records of each file in a
 * shuffled order.
 *
 * The files come in the order the split sequence (or, in a local run, the pass) gives them,
 * each with its index in the sorted file list and its pass. The iterator reads one file's
 * records into memory, then yields them in the order of the permutation keyed by (seed, pass,
 * index + 1) over the file's record count (common/perm.h), then reads the next file. So a file's
 * records are shuffled among themselves, never with another file's; the files themselves are
 * shuffled by the split sequence (split.h).
 *
 * Memory: at most max_bytes of one file's records are held at once (per running pipeline: a
 * worker holds up to that much per producer thread), counted as what the elements really hold,
 * buffers and bookkeeping (about 200 bytes per record). A file whose records need more is an
 * error, SLUICE_ERR_TOO_LARGE naming the file and the limit: cut such files into smaller ones
 * (a sensible shard is 100 to 200 MB) or shuffle with shuffle(BUFFER) instead. */
#ifndef SLUICE_PIPELINE_GSHUFFLE_H
#define SLUICE_PIPELINE_GSHUFFLE_H

#include "iter.h"
#include "spec.h"

#include <stddef.h>
#include <stdint.h>

/* The most bytes of one file's records held at once. */
#define PIPE_GSHUFFLE_FILE_BYTES (256ull << 20)

struct pipe_gshuffle_file {
    const char *path;
    uint64_t index; /* in the sorted file list */
    uint64_t pass;
};

/* Opens the plain reader of paths[0..npaths) into *out (as pipe_tfrecord_open() does). */
typedef int (*pipe_file_open_cb)(void *arg, char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                                 struct pipe_iter **out);

/* Creates the iterator over files (copied, paths too) read through open(arg, ...), which must
 * stay callable while the iterator exists. Returns 0 or SLUICE_ERR_NOMEM; read errors and the
 * memory limit are reported by next() with a message in ctx. */
int pipe_gshuffle_files_open(const struct pipe_gshuffle_file *files, size_t nfiles, int64_t seed,
                             uint64_t max_bytes, pipe_file_open_cb open, void *arg,
                             struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
