/* Feeds arbitrary bytes to the snapshot chunk reader, as a damaged disk would. Nothing may crash
 * or allocate more than the bytes given; reading must end with 0 (the footer checked out) or
 * with SLUICE_ERR_CORRUPT (or SLUICE_ERR_NOMEM) whose message names the chunk, and keep returning
 * the same. A chunk that reads to its end must agree with snap_chunk_check_file: the same element
 * count, its size as its bytes. The seeds hold an empty chunk and chunks of scalar, tensor,
 * string and tuple elements. */
#include "fuzz.h"

#include "common/error.h"
#include "pipeline/element.h"
#include "pipeline/snapshot.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "fuzz-chunk"
#define PREFIX "snapshot chunk " NAME ": "

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_snapshot_chunk: %s: %s\n", what, detail);
        abort();
    }
}

/* A stream over the bytes (size >= 1); opened for reading only, so they are not written. */
static FILE *open_bytes(const uint8_t *data, size_t size)
{
    return fmemopen((void *)data, size, "rb");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[SLUICE_ERRMSG_SIZE];
    if (size == 0)
        return 0;
    FILE *f = open_bytes(data, size);
    if (!f)
        return 0;
    struct snap_reader *r = NULL;
    int rc = snap_reader_open_file(f, NAME, &r, err, sizeof err);
    uint64_t count = 0;
    if (rc == 0) {
        struct sluice_element e;
        pipe_elem_init(&e);
        while ((rc = snap_reader_next(r, &e, err, sizeof err)) == 1) {
            check(e.n >= 1 && e.n <= PIPE_MAX_COMPONENTS, "bad component count", NAME);
            count++;
        }
        int again = snap_reader_next(r, &e, err, sizeof err);
        check(again == rc, rc == 0 ? "an end that is not sticky" : "an error that is not sticky",
              err);
        pipe_elem_release(&e);
        snap_reader_close(r);
    } else {
        check(r == NULL, "a failed open that returned a reader", err);
    }
    check(rc == 0 || rc == SLUICE_ERR_CORRUPT || rc == SLUICE_ERR_NOMEM, "an unexpected code", err);
    if (rc < 0)
        check(strncmp(err, PREFIX, strlen(PREFIX)) == 0, "an error that does not name the chunk",
              err);

    f = open_bytes(data, size);
    if (!f)
        return 0;
    struct snap_chunk_info info;
    char err2[SLUICE_ERRMSG_SIZE];
    int rc2 = snap_chunk_check_file(f, NAME, &info, err2, sizeof err2);
    if (rc != SLUICE_ERR_NOMEM && rc2 != SLUICE_ERR_NOMEM) {
        check(rc2 == rc, "check and read disagree", err2);
        if (rc == 0) {
            check(info.elements == count, "check counts other elements", NAME);
            check(info.bytes == size, "check gives another size", NAME);
        } else {
            check(strcmp(err, err2) == 0, "check and read give other messages", err2);
        }
    }
    return 0;
}
