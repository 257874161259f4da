/* Feeds arbitrary bytes to the Parquet reader as a file held in memory: pq_open, then one cursor
 * over every supported column of every row group, read to its end (every other row group skips
 * its first half first), at most MAX_VALUES rows a file. Nothing may crash; every failure must
 * carry a message that starts with the file's name. Every row must be what the column promises:
 * a value of its dtype, a scalar (a 1-D tensor for a list) whose buffers hold exactly what its
 * shape says, and that prints; a null only in an optional column; an end only after the row
 * group's rows. The seeds are the fixtures of tests/parquet/gen.mjs (scripts/test.sh writes them
 * into the smoke's corpus), so mutations start from every codec, encoding and page version. */
#include "fuzz.h"

#include "common/error.h"
#include "pipeline/element.h"
#include "pipeline/format.h"
#include "pipeline/parquet.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows read from one input, all columns together: bounds a file that promises billions. */
#define MAX_VALUES 100000

#define NAME "fuzz.parquet"

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_parquet: %s: %s\n", what, detail);
        abort();
    }
}

static void check_message(const char *err)
{
    check(err[0] != '\0', "a failure without a message", "");
    check(strncmp(err, NAME, strlen(NAME)) == 0, "a message that does not name the file", err);
}

/* The invariants of src/pipeline/element.c for the value of one row of column ci. */
static void check_value(const struct pq_column_info *ci, const struct pipe_tensor *t,
                        struct pipe_buf *text)
{
    check(t->dtype == ci->dtype, "a value of another dtype than its column's", ci->name);
    if (ci->list) {
        check(t->rank == 1 && t->shape[0] >= 0, "a list value that is not a 1-D tensor", ci->name);
    } else {
        check(t->rank == 0, "a scalar column's value that is not a scalar", ci->name);
    }
    uint64_t n = ci->list ? (uint64_t)t->shape[0] : 1;
    if (t->dtype != SLUICE_BYTES) {
        size_t size = sluice_dtype_size(t->dtype);
        check(n <= SIZE_MAX / size && t->len == n * size, "len does not match dtype and shape",
              ci->name);
        check(t->len == 0 || (t->data && t->cap >= t->len), "len beyond the buffer", ci->name);
        if (t->dtype == SLUICE_BOOL)
            for (size_t i = 0; i < t->len; i++)
                check(t->data[i] <= 1, "a bool that is neither 0 nor 1", ci->name);
    } else {
        check(t->offs && t->offs_cap > n, "offsets missing for a bytes value", ci->name);
        check(t->offs[0] == 0 && t->offs[n] == t->len, "offsets that do not span len", ci->name);
        for (uint64_t i = 0; i < n; i++)
            check(t->offs[i] <= t->offs[i + 1], "decreasing offsets", ci->name);
        check(t->len == 0 || (t->data && t->cap >= t->len), "len beyond the buffer", ci->name);
    }
    struct sluice_element e = {.n = 1, .cap = 1, .t = (struct pipe_tensor *)t};
    text->len = 0;
    int rc = pipe_format_elem(text, &e);
    check(rc == 0 || rc == SLUICE_ERR_NOMEM, "a value the text format refuses", ci->name);
}

/* Reads column col of row group rg to its end or until budget rows are read; returns the rows
 * read, a failed cursor's too (its message checked), so a file cannot outrun the budget by
 * failing late. */
static uint64_t read_column(struct pq_file *f, size_t rg, size_t col, uint64_t budget,
                            struct pipe_tensor *t, struct pipe_buf *text)
{
    const struct pq_column_info *ci = pq_column(f, col);
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct pq_cursor *c = NULL;
    if (pq_cursor_open(f, rg, col, &c, err, sizeof(err)) != 0) {
        check_message(err);
        return 0;
    }
    uint64_t rows = pq_row_group_rows(f, rg), done = 0, got = 0;
    if (rg % 2 == 1 && rows / 2 > 0) {
        if (pq_cursor_skip(c, rows / 2, err, sizeof(err)) != 0) {
            check_message(err);
            pq_cursor_free(c);
            return 0;
        }
        done = rows / 2;
    }
    for (;;) {
        if (got == budget) {
            pq_cursor_free(c);
            return got;
        }
        int rc = pq_cursor_next(c, t, err, sizeof(err));
        if (rc < 0) {
            check_message(err);
            pq_cursor_free(c);
            return got;
        }
        check(rc == PQ_VALUE || rc == PQ_NULL || rc == PQ_END, "an unknown return", ci->name);
        if (rc == PQ_END)
            break;
        check(done < rows, "a row past the row group's row count", ci->name);
        if (rc == PQ_VALUE)
            check_value(ci, t, text);
        else
            check(ci->optional, "a null in a required column", ci->name);
        done++;
        got++;
    }
    check(done == rows, "an end before the row group's last row", ci->name);
    pq_cursor_free(c);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pq_io io;
    pq_io_mem(&io, data, size, NAME);
    struct pq_file *f = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    if (pq_open(&io, &f, err, sizeof(err)) != 0) {
        check_message(err);
        return 0;
    }
    size_t ncols = pq_num_columns(f), ngroups = pq_num_row_groups(f);
    for (size_t col = 0; col < ncols; col++) {
        const struct pq_column_info *ci = pq_column(f, col);
        check(ci && ci->name, "a column without a name", "");
        long found = pq_column_find(f, ci->name);
        check(found >= 0 && (size_t)found <= col, "a column its own name does not find", ci->name);
        check(ci->supported || ci->why_unsupported, "an unsupported column without a reason",
              ci->name);
    }

    struct sluice_element e;
    pipe_elem_init(&e);
    if (pipe_elem_resize(&e, 1) != 0)
        abort();
    struct pipe_buf text = {0};
    uint64_t budget = MAX_VALUES;
    for (size_t rg = 0; rg < ngroups && budget > 0; rg++) {
        for (size_t col = 0; col < ncols && budget > 0; col++) {
            if (!pq_column(f, col)->supported)
                continue;
            budget -= read_column(f, rg, col, budget, &e.t[0], &text);
        }
    }
    pipe_buf_release(&text);
    pipe_elem_release(&e);
    pq_close(f);
    return 0;
}
