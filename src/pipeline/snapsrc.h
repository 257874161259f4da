/* The snapshot("DIR") source: the elements of a distributed snapshot (snapshot.h), chunk after
 * chunk in chunk order, one split per chunk.
 *
 * The chunks are the ones DIR/snapshot.json counts, named by snap_chunk_path(), whether they
 * exist yet or not: a snapshot can be read while its save is still writing it. A reader that
 * reaches a chunk not there yet waits for it, polling with a backoff from
 * PIPE_SNAPSHOT_POLL_FIRST_MS to PIPE_SNAPSHOT_POLL_MAX_MS, as long as the snapshot is neither
 * complete (manifest.json) nor failed (FAILED); a cancelled chain (pipe_cancelled) stops waiting
 * at once with SLUICE_ERR_CANCELLED. Then:
 *   - FAILED present: SLUICE_ERR_TASK_FAILED, "snapshot DIR: the save failed: REASON";
 *   - manifest.json present and the chunk missing: SLUICE_ERR_NOT_FOUND,
 *     "snapshot chunk PATH: not found (the snapshot is complete without it)";
 *   - snapshot.json gone: SLUICE_ERR_NOT_FOUND, "snapshot DIR: not a snapshot (no
 *     snapshot.json)".
 * A damaged chunk is the reader's SLUICE_ERR_CORRUPT ("snapshot chunk PATH: checksum mismatch at
 * offset N"). Chunk files are opened through the registry's data roots like every file
 * source's.
 *
 * DIR may be a URL (s3://, http(s)://): the same layout as objects, read front to back with
 * ranged GETs (objstore.h); snapshot.json, manifest.json and FAILED are objects too, and the
 * messages name URLs. An s3:// snapshot's chunks are pinned to one listing (below), so a chunk
 * replaced after it is an error naming it ("URL: changed since it was listed (...)"). */
#ifndef SLUICE_PIPELINE_SNAPSRC_H
#define SLUICE_PIPELINE_SNAPSRC_H

#include "iter.h"
#include "spec.h"

#include <stdbool.h>
#include <stddef.h>

#define PIPE_SNAPSHOT_POLL_FIRST_MS 20u
#define PIPE_SNAPSHOT_POLL_MAX_MS 200u

/* Reads DIR/snapshot.json and writes the paths of its chunks 0 .. chunks-1 into *paths (malloc'd,
 * each string too; free with pipe_paths_free()). Blocks on disk. For an s3:// DIR and list true,
 * one listing of DIR/chunks/ pins each chunk present to its size and ETag
 * ("URL#object=SIZE:ETAG", objurl.h); a chunk not listed keeps its plain URL (and is pinned to
 * the ETag of its first answer when read). Returns 0, or
 * SLUICE_ERR_NOT_FOUND with "snapshot DIR: not a snapshot (no snapshot.json)" in err, or another
 * negative code with "snapshot DIR: ..." (a damaged snapshot.json, a path too long). */
int pipe_snapshot_paths(const char *dir, bool list, char ***paths, size_t *npaths, char *err,
                        size_t errlen);

/* Creates a source iterator over the chunk files paths (copied) of the snapshot in dir (copied),
 * read in the given order and opened lazily as reading reaches them. Elements are what the save
 * wrote. Returns 0 or SLUICE_ERR_NOMEM; everything else is reported by next(). */
int pipe_snapshot_open(const char *dir, char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                       struct pipe_iter **out);

#endif
