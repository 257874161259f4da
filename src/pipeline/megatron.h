/* The megatron() source: a Megatron-LM / NeMo indexed dataset, PREFIX.idx and PREFIX.bin
 * (docs/design.md §3, docs/pipelines.md), one element per document.
 *
 * The layout is the one Megatron-LM's megatron/core/datasets/indexed_dataset.py writes (its
 * IndexedDatasetBuilder and _IndexWriter), all little-endian. PREFIX.idx holds
 *
 *     offset  0   9 bytes   magic "MMIDIDX\0\0"
 *     offset  9   u64       version: 1
 *     offset 17   u8        the tokens' dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
 *                           6 float64, 7 float32, 8 uint16
 *     offset 18   u64       S, the number of sequences
 *     offset 26   u64       D, the number of document indices
 *     offset 34   i32[S]    each sequence's length in tokens
 *                 i64[S]    each sequence's byte offset in PREFIX.bin
 *                 i64[D]    document indices: 0, then after each document the number of
 *                           sequences written so far, so the last is S
 *
 * and nothing after them (a multimodal index, which appends one int8 mode per sequence, is
 * refused). PREFIX.bin holds the sequences' tokens back to back. Document k is the sequences
 * [doc[k], doc[k + 1]); there are D - 1 documents, and one without sequences, or whose
 * sequences are empty, is an empty document. Its element is one 1-D int32 tensor of its tokens,
 * its sequences concatenated: uint8, int8, int16, uint16 and int32 tokens are widened, an int64
 * token outside int32's range is an error, and float dtypes are refused when the index is read.
 *
 * Every number from the files is checked before use, against the file sizes and each other:
 * the header when the files are opened (magic, version, dtype, the index's size for S and D
 * exactly, the first document index 0 and the last S, the first sequence at byte 0 and the last
 * ending at the end of PREFIX.bin), and each document's indices and sequences when it is read
 * (indices in order and at most S, lengths not negative, each sequence inside PREFIX.bin and
 * starting where the one before it ends). So reading every document checks the whole index, and
 * a damaged or hostile file is an error naming the file and the offset of the bad number,
 * never a read outside the files:
 *
 *     "data.idx: offset 0: not a Megatron index (bad magic)"
 *     "data.idx: offset 17: dtype float32 (code 7) holds no token ids"
 *     "data.idx: offset 121: truncated: 4 sequences and 5 document indices need 122 bytes"
 *     "data.idx: offset 122: 4 bytes after the document indices (a multimodal index's sequence
 *      modes: not supported)"
 *     "data.idx: offset 74: the last sequence (4 tokens of 2 bytes from byte 10) does not end
 *      where data.bin does (20 bytes)"
 *     "data.idx: offset 58: sequence 1 starts at byte 6 of data.bin, but sequence 0 ends at
 *      byte 4"
 *     "data.idx: offset 66: sequence 2 (5 tokens of 2 bytes from byte 10) ends past the end of
 *      data.bin (18 bytes)"
 *
 * Both files are memory-mapped read-only; the files must not shrink while they are read (a
 * mapping of a truncated file faults). With data roots (roots.h) both are opened through them.
 * A URL prefix (s3://, http(s)://) names two objects instead, read at random with ranged GETs
 * (objstore.h: obj_pread's windows, so a reader holds a few MiB whatever the dataset's size),
 * the messages naming the URLs; a prefix pinned to their versions (PIPE_MEGATRON_PIN_MARK)
 * reads exactly those.
 *
 * Splits (distributed_epoch): a split is a run of documents, named "PREFIX#docs=START+COUNT"
 * in the split plan (PIPE_MEGATRON_DOCS_MARK); pipe_megatron_range_names() cuts the documents
 * into such runs. The reader reads exactly the run an entry names, or every document for an
 * entry without the mark. */
#ifndef SLUICE_PIPELINE_MEGATRON_H
#define SLUICE_PIPELINE_MEGATRON_H

#include "iter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pipe_roots; /* roots.h */

/* The mark of a run of documents in a split plan's entry: "PREFIX#docs=START+COUNT", START and
 * COUNT in decimal without leading zeros. The mark is found from the right, so any prefix
 * takes it. */
#define PIPE_MEGATRON_DOCS_MARK "#docs="

/* The fixed header of an index: magic, version, dtype, S and D. */
#define PIPE_MEGATRON_HEADER_BYTES 34

/* ---- The index, pure ---------------------------------------------------------------------- */

/* The reads of pipe_megatron_index_init_read: len bytes at off (inside the file) into dst;
 * 0 or a negative code with "NAME: offset N: reason" in err. */
typedef int (*pipe_megatron_read_fn)(void *arg, void *dst, size_t len, uint64_t off, char *err,
                                     size_t errlen);

/* An index checked by pipe_megatron_index_init(): views of the two files' bytes (borrowed: they
 * must outlive it) and the header's numbers; or, by pipe_megatron_index_init_read(), no views
 * (idx and bin NULL) but reads of the two files. */
struct pipe_megatron_index {
    const uint8_t *idx, *bin;
    pipe_megatron_read_fn read_idx, read_bin;
    void *read_arg;
    uint64_t idx_len, bin_len;
    const char *idx_name, *bin_name; /* for messages (borrowed) */
    uint8_t code;                    /* the dtype code */
    unsigned width;                  /* bytes per token */
    uint64_t nseqs;                  /* S */
    uint64_t ndocs;                  /* documents: D - 1 */
};

/* Pure. Checks the header of the index idx (idx_len bytes) against the data bin (bin_len bytes;
 * bin may be NULL when bin_len is 0) as the file comment says, and fills *ix. The names are
 * used in messages. Returns 0, or SLUICE_ERR_CORRUPT (SLUICE_ERR_TRUNCATED for an index too
 * short for its counts, SLUICE_ERR_UNSUPPORTED for a float dtype, another version or a
 * multimodal index) with "IDX_NAME: offset N: ..." in err. */
int pipe_megatron_index_init(struct pipe_megatron_index *ix, const uint8_t *idx, uint64_t idx_len,
                             const uint8_t *bin, uint64_t bin_len, const char *idx_name,
                             const char *bin_name, char *err, size_t errlen);

/* As pipe_megatron_index_init, for files read a piece at a time (objects, objstore.h): the
 * index's numbers are read with read_idx as they are needed, a document's tokens with read_bin,
 * both given arg; the files' sizes are idx_len and bin_len. pipe_megatron_document and
 * pipe_megatron_tokens then read through them, and also return their errors. Not pure: it
 * does what the reads do. */
int pipe_megatron_index_init_read(struct pipe_megatron_index *ix, pipe_megatron_read_fn read_idx,
                                  pipe_megatron_read_fn read_bin, void *arg, uint64_t idx_len,
                                  uint64_t bin_len, const char *idx_name, const char *bin_name,
                                  char *err, size_t errlen);

/* Pure. Checks document d (< ix->ndocs) as the file comment says and gives where its tokens lie
 * in the bin: *offset, the byte of its first token, and *ntokens. Returns 0, or
 * SLUICE_ERR_CORRUPT with "IDX_NAME: offset N: ..." in err. */
int pipe_megatron_document(const struct pipe_megatron_index *ix, uint64_t d, uint64_t *offset,
                           uint64_t *ntokens, char *err, size_t errlen);

/* Pure. Writes ntokens tokens from byte offset of the bin (a span pipe_megatron_document gave)
 * into t as a 1-D int32 tensor. Returns 0, SLUICE_ERR_NOMEM, or SLUICE_ERR_CORRUPT with
 * "BIN_NAME: offset N: token V is outside int32's range" in err (int64 tokens only). */
int pipe_megatron_tokens(const struct pipe_megatron_index *ix, uint64_t offset, uint64_t ntokens,
                         struct pipe_tensor *t, char *err, size_t errlen);

/* The name of a dtype code ("uint16"), or NULL for a code the layout does not define. */
const char *pipe_megatron_dtype_name(unsigned code);

/* ---- Split entries, pure ------------------------------------------------------------------ */

/* Whether name ends in PIPE_MEGATRON_DOCS_MARK and a run of documents: then *prefix_len is the
 * length of the prefix before the mark and *start, *count the run. */
bool pipe_megatron_range_of(const char *name, size_t *prefix_len, uint64_t *start, uint64_t *count);

/* Cuts ndocs documents into runs of per_split (>= 1; the last run may be shorter) and names each
 * "PREFIX#docs=START+COUNT", in order; no document, no name. *names and each string are
 * malloc'd (pipe_paths_free()). Returns 0, or SLUICE_ERR_NOMEM with err set. */
int pipe_megatron_range_names(const char *prefix, uint64_t ndocs, uint64_t per_split, char ***names,
                              size_t *nnames, char *err, size_t errlen);

/* ---- Files ---------------------------------------------------------------------------------- */

/* Opens PREFIX.idx and PREFIX.bin (through roots when not NULL), checks the header
 * (pipe_megatron_index_init) and gives the number of documents. Returns 0 or a negative code
 * with err set: a file that cannot be opened names it ("data.idx: No such file or directory"),
 * one outside the roots is SLUICE_ERR_DENIED as pipe_roots_open_file says. */
int pipe_megatron_count(const struct pipe_roots *roots, const char *prefix, uint64_t *ndocs,
                        char *err, size_t errlen);

/* The mark of a URL prefix pinned to the versions of its two objects: "PREFIX#objects=ISIZE:
 * IETAG:BSIZE:BETAG", the sizes and ETags (percent-encoded, objurl.h) of PREFIX.idx and
 * PREFIX.bin. A reader of a pinned prefix sends the ETags as If-Match and checks the sizes, so an
 * object replaced after the dataset was planned is an error naming it ("URL: changed since it
 * was listed (...)"). */
#define PIPE_MEGATRON_PIN_MARK "#objects="

/* As pipe_megatron_count, and *planned (malloc'd) the prefix to plan splits with: the prefix
 * itself for files; for a URL prefix (s3://, http(s)://; both objects read at random with ranged
 * GETs, objstore.h), the prefix pinned to the objects' sizes and ETags as they were opened
 * (PIPE_MEGATRON_PIN_MARK). */
int pipe_megatron_plan(const struct pipe_roots *roots, const char *prefix, uint64_t *ndocs,
                       char **planned, char *err, size_t errlen);

/* Creates a source iterator over the entries (copied): each a prefix, every document of its
 * dataset, or a run of documents of PIPE_MEGATRON_DOCS_MARK. Files are opened, through the
 * registry's data roots, as reading reaches them; consecutive entries of one prefix share one
 * opening. A run past the dataset's documents is an error ("data: documents [40, 60) asked for,
 * the index has 50 (did it change after the dataset was planned?)"). Returns 0 or
 * SLUICE_ERR_NOMEM; *out is owned by the caller's chain. */
int pipe_megatron_open(char *const *entries, size_t nentries, struct pipe_ctx *ctx,
                       struct pipe_iter **out);

#endif
