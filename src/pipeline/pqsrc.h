/* The parquet() source: rows of Parquet files (docs/design.md §3; the decoder is parquet.h).
 *
 * Files are read in the given order, one at a time, row group by row group (a split of
 * distributed_epoch is one row group: pipe_parquet_row_groups names them): one cursor per
 * asked-for column, so memory follows one page (and its dictionary) per column, and only the
 * asked-for column chunks are read, plus each file's footer.
 *
 * Each element is one row: the asked-for columns in the order given (one column: a
 * one-component element), or with no column given every top-level column in the file's order.
 * A column argument "NAME=DEFAULT" replaces the column's nulls by DEFAULT, read as a value of
 * the column's dtype (an integer in range, a float, true/false for a bool, the text itself for
 * bytes, [] for a list: an empty one); without a default a null is an error naming the file, the
 * row group, the column and the row (counted from 0 in the file). Errors name the file and end
 * the stream: a file that cannot be opened or is not valid Parquet, a column the file does not
 * have (the message lists the ones it has), a column of a type sluice cannot represent, files
 * whose columns differ in type, a default that does not fit the column's type. A file with no
 * rows holds no elements. */
#ifndef SLUICE_PIPELINE_PQSRC_H
#define SLUICE_PIPELINE_PQSRC_H

#include "iter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pipe_roots; /* roots.h */

/* A row group of a file, as split plans name it: the file's path, this mark, the row group's
 * number (from 0) in decimal. The mark is found from the right, so any path takes it. */
#define PIPE_PARQUET_ROW_GROUP_MARK "#row-group="

/* Lists the row groups of the files (in that order, each file's in its order) as names of
 * PIPE_PARQUET_ROW_GROUP_MARK, reading each file's footer (through roots when not NULL). A file
 * that cannot be opened or is not valid Parquet is an error naming it; a file with no row group
 * adds nothing. *names and each string are malloc'd (pipe_paths_free()). Returns 0 or a negative
 * code with err set. */
int pipe_parquet_row_groups(const struct pipe_roots *roots, char *const *files, size_t nfiles,
                            char ***names, size_t *nnames, char *err, size_t errlen);

/* Whether name ends in PIPE_PARQUET_ROW_GROUP_MARK and a row group number: then *path_len is the
 * length of the path before the mark and *rg the number. */
bool pipe_parquet_row_group_of(const char *name, size_t *path_len, uint64_t *rg);

/* Creates a source iterator over the files (paths copied) with the column arguments (copied;
 * 0 to PIPE_MAX_COMPONENTS, each passing pipe_parquet_column_problem()). Files are opened
 * lazily as reading reaches them. Returns 0 or SLUICE_ERR_NOMEM (SLUICE_ERR_INVALID for bad
 * arguments); *out is owned by the caller's chain. */
int pipe_parquet_open(char *const *paths, size_t npaths, char *const *columns, size_t ncolumns,
                      struct pipe_ctx *ctx, struct pipe_iter **out);
/* Each path may name one row group (pipe_parquet_row_group_of): only that row group is read,
 * its rows numbered as in the whole file; consecutive row groups of one file share one open
 * file and footer. */

#endif
