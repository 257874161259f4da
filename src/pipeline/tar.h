/* The tar() source: WebDataset shards read with libarchive (docs/design.md §3; grouping in wds.h).
 *
 * Shards are read in the given order, one at a time, streaming: libarchive's own buffers plus
 * one buffer per asked-for extension that holds the current sample's member (each grows to the
 * largest member seen). A shard may be a plain tar archive or one compressed with gzip
 * (.tar.gz); both are recognised by their content, not their name. Only regular-file members
 * count; directories, links and other entries are skipped.
 *
 * Each element is one sample: a tuple of scalar bytes, the sample's members in the order of the
 * extensions asked for (a single extension gives a one-component element). Errors name the
 * shard and end the stream: a file that cannot be opened, a damaged or truncated archive
 * ("s.tar: offset 4096: member 000003.jpg: Truncated tar archive"), an archive that ends without
 * its end-of-archive blocks (cut at a member boundary: "s.tar: offset 2048: truncated tar
 * archive (no end-of-archive blocks)"), a member over 1 GiB, and a sample with a missing or
 * duplicated member ("s.tar: sample 000002: missing member .cls"). An empty (0-byte) shard holds
 * no samples. */
#ifndef SLUICE_PIPELINE_TAR_H
#define SLUICE_PIPELINE_TAR_H

#include "iter.h"

#include <stddef.h>

/* Creates a source iterator over the shards (paths copied) asking for the extensions exts
 * (copied; 1 to PIPE_MAX_COMPONENTS distinct ones). Shards are opened lazily as reading reaches
 * them. Returns 0 or SLUICE_ERR_NOMEM; *out is owned by the caller's chain. */
int pipe_tar_open(char *const *paths, size_t npaths, char *const *exts, size_t nexts,
                  struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
