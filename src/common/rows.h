/* Sorted tables of rows keyed by a uint64 at a fixed offset: the lookup and the insertion that
 * the dispatcher's soft state, its observation tables, the client's task set and the client's
 * split ledger share. Pure: no locks, no I/O.
 *
 * A table is a malloc'd array of n rows of stride bytes, sorted by key and without duplicate
 * keys; the caller owns it (and frees it with free()). */
#ifndef SLUICE_COMMON_ROWS_H
#define SLUICE_COMMON_ROWS_H

#include <stddef.h>
#include <stdint.h>

/* The index of the first of the n rows whose key (the uint64_t key_off bytes into the row) is at
 * least key: the row of key when there is one, else where it belongs. */
size_t rows_lower(const void *rows, size_t n, size_t stride, size_t key_off, uint64_t key);

/* The row of key, or NULL. */
void *rows_find(const void *rows, size_t n, size_t stride, size_t key_off, uint64_t key);

/* Opens a zeroed row at index pos (0 <= pos <= *n) of *rows, growing the array (doubling, from
 * 16 rows) when *n reaches *cap, and returns it; the caller sets its key. Returns NULL when out
 * of memory (the table is then unchanged). */
void *rows_insert_at(void **rows, size_t *n, size_t *cap, size_t stride, size_t pos);

#endif
