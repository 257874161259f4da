/* The parquet() source: rows of Parquet files (docs/design.md §3; the decoder is parquet.h).
 *
 * Files are read in the given order, one at a time, row group by row group: one cursor per
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

#include <stddef.h>

/* Creates a source iterator over the files (paths copied) with the column arguments (copied;
 * 0 to PIPE_MAX_COMPONENTS, each passing pipe_parquet_column_problem()). Files are opened
 * lazily as reading reaches them. Returns 0 or SLUICE_ERR_NOMEM (SLUICE_ERR_INVALID for bad
 * arguments); *out is owned by the caller's chain. */
int pipe_parquet_open(char *const *paths, size_t npaths, char *const *columns, size_t ncolumns,
                      struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
