/* File sources: tfrecord() and lines() (docs/design.md §3), and a TFRecord writer.
 *
 * Readers stream files in the given order through a fixed buffer, so memory does not grow with
 * file size (a single record or line must fit in memory). Errors name the file and byte offset:
 * "data.tfrecord: offset 1234: bad data checksum". A bad checksum or truncated record is an
 * error, never skipped.
 *
 * A file that begins with the gzip magic bytes 1f 8b 08 is read through zlib, and one that
 * begins with the zstd magic bytes 28 b5 2f fd through libzstd, whatever its name (for tfrecord()
 * unless its first 12 bytes are a valid TFRecord header, which such a file's are only by a 1 in
 * 2^32 chance). Concatenated zstd frames read as one stream; damage is an error at the offset
 * where it shows ("data.txt.zst: offset 5120: corrupt zstd stream: ...", "...: truncated zstd
 * stream"). Concatenated gzip members read as one stream; offsets in messages
 * then count uncompressed bytes, and damage is an error at the offset where it was found:
 * "data.tfrecord.gz: offset 5120: corrupt gzip stream: invalid block type", "...: truncated gzip
 * stream". The gzip checksum is checked at the end of each member, so elements before a member's
 * end may have been delivered when its checksum turns out wrong. */
#ifndef SLUICE_PIPELINE_FILES_H
#define SLUICE_PIPELINE_FILES_H

#include "iter.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Creates a source iterator over the files (copied). Files are opened lazily as reading reaches
 * them; a file that cannot be opened is a runtime error naming it. Elements are scalar bytes. */
int pipe_tfrecord_open(char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                       struct pipe_iter **out);
int pipe_lines_open(char *const *paths, size_t npaths, struct pipe_ctx *ctx,
                    struct pipe_iter **out);

/* Appends one TFRecord-framed record to f. Returns 0 or -errno. */
int pipe_tfrecord_write(FILE *f, const void *data, size_t len);

/* The TFRecord checksum mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t pipe_tfrecord_mask(uint32_t crc);

#endif
