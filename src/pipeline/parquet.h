/* Parquet files (docs/design.md §3): a reader of our own, since Debian ships no Parquet or Arrow
 * C library. Pure apart from the reads it asks of its pq_io: no clock, logging, threads or
 * global state.
 *
 * pq_open() reads and checks the footer (the magic at both ends, the Thrift compact FileMetaData,
 * its schema); a cursor then streams one top-level column of one row group page by page, so
 * memory follows one page (plus its dictionary) per open cursor, never the file. Every length,
 * offset, count and index read from the file is checked against the bytes actually there before
 * it is used: a damaged or hostile file is an error, never a crash and never a value built from
 * garbage.
 *
 * Errors are one line, naming the file (pq_io.name), and where known the row group, the column
 * and the byte offset in the file: "data.parquet: row group 2: column label: offset 81234: page
 * decompresses to 1000 bytes, header says 4096". */
#ifndef SLUICE_PIPELINE_PARQUET_H
#define SLUICE_PIPELINE_PARQUET_H

#include "element.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a file's bytes come from: a local file (pq_io_fd), memory (tests, fuzzing), or an object
 * store. read fills buf with exactly len bytes at off, returning 0, or a negative code with a
 * message in err (which pq_* then prefixes with the file name). */
struct pq_io {
    int (*read)(void *user, void *buf, size_t len, uint64_t off, char *err, size_t errlen);
    void *user;
    uint64_t size;    /* bytes in the file */
    const char *name; /* for messages; borrowed for the life of the pq_file */
};

/* A pq_io over a whole buffer (borrowed). */
void pq_io_mem(struct pq_io *io, const void *data, size_t len, const char *name);
/* A pq_io over an open file descriptor (borrowed: the caller closes it after pq_close()); size
 * from fstat. Returns 0 or a negative code with err set. */
int pq_io_fd(struct pq_io *io, int fd, const char *name, char *err, size_t errlen);

/* What a top-level column decodes to. */
struct pq_column_info {
    const char *name;        /* the column's name (owned by the pq_file) */
    enum sluice_dtype dtype; /* the sluice dtype of its values (see pq_open for the mapping) */
    bool optional;           /* may hold nulls (the column, or for a list the list itself) */
    bool list;               /* a LIST of a primitive: each row is a 1-D tensor */
    bool supported;          /* false: a nested struct, a map, a list of non-primitives, or a
                                type with no sluice dtype; why_unsupported says why */
    const char *why_unsupported;
};

struct pq_file;

/* Opens a file: reads its footer through io (copied; io.user and io.name must outlive the
 * pq_file) and checks it. The type mapping: BOOLEAN -> bool; INT32 -> int32 (INT(8|16, signed)
 * -> int8|int16, INT(8|16|32, unsigned) -> uint8|uint16|uint32, DATE -> int32 days); INT64 ->
 * int64 (INT(64, unsigned) -> uint64; TIMESTAMP and TIME -> int64 as stored); INT96 -> refused;
 * FLOAT -> float32; DOUBLE -> float64; FLOAT16 (FIXED_LEN_BYTE_ARRAY(2)) -> float32;
 * BYTE_ARRAY and other FIXED_LEN_BYTE_ARRAY -> bytes. DECIMAL -> refused.
 * Returns 0, or a negative code (SLUICE_ERR_INVALID for a file that is not valid Parquet,
 * SLUICE_ERR_NOMEM, or what io.read returned) with err set. */
int pq_open(const struct pq_io *io, struct pq_file **out, char *err, size_t errlen);
void pq_close(struct pq_file *f);

uint64_t pq_num_rows(const struct pq_file *f);
size_t pq_num_row_groups(const struct pq_file *f);
uint64_t pq_row_group_rows(const struct pq_file *f, size_t rg);
/* Top-level columns, in schema order. */
size_t pq_num_columns(const struct pq_file *f);
const struct pq_column_info *pq_column(const struct pq_file *f, size_t col);
/* The index of the top-level column named name, or -1. */
long pq_column_find(const struct pq_file *f, const char *name);
/* Bytes of the column chunk of column col in row group rg (as the footer gives them): what a
 * cursor over it reads, plus the footer, is all a projection reads. */
uint64_t pq_chunk_bytes(const struct pq_file *f, size_t rg, size_t col);

/* One column of one row group, read row by row. */
struct pq_cursor;

/* Opens a cursor over column col (supported) of row group rg. Reads nothing yet. Returns 0 or a
 * negative code with err set. */
int pq_cursor_open(struct pq_file *f, size_t rg, size_t col, struct pq_cursor **out, char *err,
                   size_t errlen);
/* Decodes the next row's value into t: a scalar (rank 0) of the column's dtype, or for a list
 * column a 1-D tensor (shape [n], n >= 0). Reuses t's buffers (pipe_tensor_reserve); t's dtype
 * is set. Returns PQ_VALUE, PQ_NULL (a null: t is left unchanged), PQ_END (no row left in the
 * row group), or a negative code with err set (file, row group, column, offset). A cursor that
 * returned an error must only be freed. */
#define PQ_VALUE 1
#define PQ_NULL 2
#define PQ_END 0
int pq_cursor_next(struct pq_cursor *c, struct pipe_tensor *t, char *err, size_t errlen);
/* Skips n rows (n not past the row group's end), decoding only what skipping needs. Returns 0 or
 * a negative code with err set. */
int pq_cursor_skip(struct pq_cursor *c, uint64_t n, char *err, size_t errlen);
void pq_cursor_free(struct pq_cursor *c);

#endif
