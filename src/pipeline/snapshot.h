/* Distributed snapshots on disk (docs/snapshots.md): the files a save writes and the
 * snapshot("DIR") source reads. No libuv, no LMDB; the file functions block on disk, so call them
 * from a producer thread, the libuv thread pool or a CLI, never from a loop thread.
 *
 * A snapshot directory DIR holds:
 *   DIR/snapshot.json        written when the save starts (snap_meta_write): the format, the
 *                            dataset id, its canonical pipeline text and the number of chunks.
 *   DIR/chunks/chunk-NNNNNNNNNNNN
 *                            chunk i (12 decimal digits, zero-padded) holds the elements of split
 *                            i of the save, in order. Written to a temporary name in DIR/chunks,
 *                            synced, renamed into place and the directory synced
 *                            (snap_writer_commit): a chunk under its final name is complete.
 *   DIR/manifest.json        written once every chunk is in place (snap_finalize): per chunk its
 *                            elements, bytes and checksum, and the totals. Its presence means the
 *                            snapshot is complete.
 *   DIR/FAILED               written when the save fails (snap_mark_failed): the reason, one line.
 * An s3:// DIR holds the same objects under the same names, written by snap_objects_begin and
 * snap_finalize (chunk objects are put whole, never renamed).
 *
 * A chunk file is self-checking: a magic, then records (u32 length LE, u32 masked crc32c of the
 * data, data: one element in the element codec's stored form), then a footer record with the
 * element count, the body length and a crc32c over everything before it. A reader checks every
 * record and the footer; a damaged or truncated chunk is SLUICE_ERR_CORRUPT whose message names
 * the chunk file (and the offset).
 *
 * The bytes of a chunk file, all integers little-endian:
 *   magic     8 bytes "SLSNAP01"
 *   record    u32 length (1 .. 2^30 + 2^20), u32 masked crc32c of the data, data: one element
 *             record exactly as codec_append_elem() writes it without compression (its varint
 *             length prefix, flags 0, the body)
 *   footer    u32 0xffffffff (no record is that long), u64 element count, u64 body length (the
 *             bytes before the footer: magic and records), u32 masked crc32c of every byte of
 *             the file before this field (magic, records and the footer's first 20 bytes).
 *             Nothing follows the footer.
 * The mask is TFRecord's (pipe_tfrecord_mask). Messages read "snapshot chunk PATH: checksum
 * mismatch at offset N", where N is the offset of the record or footer concerned.
 *
 * snapshot.json: {"chunks": N, "dataset_id": "...", "format": 1, "pipeline": "..."}.
 * manifest.json: {"bytes": B, "chunk_count": N, "chunks": [{"bytes", "crc32c", "elements",
 * "index"}, ...], "dataset_id": "...", "elements": E, "format": 1}, where a chunk's bytes is
 * its file size and crc32c the (unmasked) checksum of its footer. */
#ifndef SLUICE_PIPELINE_SNAPSHOT_H
#define SLUICE_PIPELINE_SNAPSHOT_H

#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct sluice_element;

#define SNAP_FORMAT 1
#define SNAP_META_FILE "snapshot.json"
#define SNAP_MANIFEST_FILE "manifest.json"
#define SNAP_FAILED_FILE "FAILED"
#define SNAP_CHUNKS_DIR "chunks"

struct snap_meta {
    uint32_t format; /* SNAP_FORMAT */
    char dataset_id[128];
    char *pipeline;  /* canonical pipeline text (malloc'd) */
    uint64_t chunks; /* chunks in a complete snapshot: the save's split count */
};
void snap_meta_release(struct snap_meta *m);

/* Creates DIR and DIR/chunks when missing and writes DIR/snapshot.json atomically (temporary
 * file, fsync, rename). Writing the same meta again is harmless; a DIR that already holds a
 * snapshot.json of another dataset or chunk count is SLUICE_ERR_EXISTS (the file is left as it
 * is). A meta without pipeline text is SLUICE_ERR_INVALID. */
int snap_meta_write(const char *dir, const struct snap_meta *m, char *err, size_t errlen);
/* Reads DIR/snapshot.json. SLUICE_ERR_NOT_FOUND when DIR holds none ("DIR: not a snapshot
 * (no snapshot.json)"), SLUICE_ERR_CORRUPT when it does not parse, SLUICE_ERR_UNSUPPORTED when it
 * is of a format other than SNAP_FORMAT. On success m->pipeline is the caller's
 * (snap_meta_release). DIR may be a URL (snapshot.json is then an object, read as
 * snap_read_small reads it). */
int snap_meta_read(const char *dir, struct snap_meta *m, char *err, size_t errlen);

/* Reads DIR/NAME whole (at most 256 MiB), NUL-terminated, into *out (malloc'd) and its length
 * into *len. DIR may be a URL (objstore.h): DIR/NAME is then an object. Returns 0, -ENOENT when
 * it is missing (a 404 for an object, the server's answer in err), or another negative code
 * with err set. */
int snap_read_small(const char *dir, const char *name, char **out, size_t *len, char *err,
                    size_t errlen);

/* Writes "DIR/chunks/chunk-%012" PRIu64 into out (truncated to outlen); a URL DIR without the
 * slashes that end it. */
void snap_chunk_path(const char *dir, uint64_t index, char *out, size_t outlen);

/* A chunk being written. */
struct snap_writer;
/* Opens a temporary file for chunk index in DIR/chunks (unique per writer, so two writers of
 * the same chunk never collide). For a URL DIR (s3://) the chunk is spooled to an unnamed
 * temporary file in TMPDIR (default /tmp) and put whole as its object (objstore.h's obj_put)
 * at commit: the object holds the bytes a chunk file would, under the same relative name, and
 * appears only complete. */
int snap_writer_open(const char *dir, uint64_t index, struct snap_writer **out, char *err,
                     size_t errlen);
/* Appends one element (streamed to the file: a writer holds one element's record in memory, never
 * the chunk). An element whose record is over the limit is SLUICE_ERR_TOO_LARGE; a failed write
 * is -errno (-ENOSPC when the disk is full). After a failure, abort the writer. */
int snap_writer_add(struct snap_writer *w, const struct sluice_element *e, char *err,
                    size_t errlen);
/* Writes the footer, syncs, renames the file to the chunk's name (replacing one already there:
 * a chunk written twice holds either whole version) and syncs the directory. Frees w in every
 * case; on failure the temporary file is removed. */
int snap_writer_commit(struct snap_writer *w, char *err, size_t errlen);
/* Removes the temporary file and frees w (NULL is a no-op). */
void snap_writer_abort(struct snap_writer *w);

/* A committed chunk being read. */
struct snap_reader;
/* Opens the chunk file at path. A missing file is SLUICE_ERR_NOT_FOUND ("snapshot chunk PATH:
 * not found"); a file too short for the magic or with another magic is SLUICE_ERR_CORRUPT. */
int snap_reader_open(const char *path, struct snap_reader **out, char *err, size_t errlen);
/* snap_reader_open over an open stream (any seekable FILE, e.g. fmemopen), named name in
 * messages. The reader owns f from the call on, also when it fails. */
int snap_reader_open_file(FILE *f, const char *name, struct snap_reader **out, char *err,
                          size_t errlen);
/* Reads the next element into e (overwritten). Returns 1 with an element, 0 at the end (after
 * the footer checked out), or a negative code (SLUICE_ERR_CORRUPT naming the file and offset). */
int snap_reader_next(struct snap_reader *r, struct sluice_element *e, char *err, size_t errlen);
/* The offset in the file of the record snap_reader_next() returned last. */
uint64_t snap_reader_offset(const struct snap_reader *r);
void snap_reader_close(struct snap_reader *r);

/* What one committed chunk holds, read from its footer after checking the whole file. */
struct snap_chunk_info {
    uint64_t elements, bytes;
    uint32_t crc32c;
};
int snap_chunk_check(const char *path, struct snap_chunk_info *out, char *err, size_t errlen);
/* snap_chunk_check over an open stream, as snap_reader_open_file (which owns f). */
int snap_chunk_check_file(FILE *f, const char *name, struct snap_chunk_info *out, char *err,
                          size_t errlen);

/* Checks every chunk 0..chunks-1 (snap_chunk_check) and writes DIR/manifest.json atomically.
 * chunks must be snapshot.json's count (else SLUICE_ERR_INVALID); a DIR without snapshot.json is
 * SLUICE_ERR_NOT_FOUND.
 * A missing chunk is SLUICE_ERR_NOT_FOUND naming it; a damaged one its SLUICE_ERR_CORRUPT. */
int snap_finalize(const char *dir, uint64_t chunks, char *err, size_t errlen);
/* A save into an s3:// DIR (objects, objstore.h), as the save starts instead of snap_meta_write:
 * refuses a DIR whose snapshot.json is of another dataset or chunk count (SLUICE_ERR_EXISTS, as
 * snap_meta_write), deletes manifest.json and FAILED left by an earlier save (in that order),
 * then puts snapshot.json (m): from then on a reader waits for the chunks as on disk. A missing
 * bucket is the server's 404 naming the object's URL. snap_finalize then finishes it as it
 * finishes a directory (every chunk object read whole and checked, manifest.json put). */
int snap_objects_begin(const char *dir, const struct snap_meta *m, char *err, size_t errlen);
/* Writes DIR/FAILED with why (one line: line breaks become spaces), atomically, creating DIR
 * when missing. */
int snap_mark_failed(const char *dir, const char *why, char *err, size_t errlen);

/* Where a snapshot stands on disk. */
struct snap_disk_status {
    bool complete; /* manifest.json present */
    bool failed;   /* FAILED present; why holds its line */
    char why[SLUICE_ERRMSG_SIZE];
    uint64_t chunks;    /* from snapshot.json */
    uint64_t committed; /* chunk files present under their final names */
    uint64_t elements;  /* from the manifest when complete, else 0 */
};
int snap_disk_status(const char *dir, struct snap_disk_status *out, char *err, size_t errlen);

#endif
