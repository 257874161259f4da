/* Feeds arbitrary bytes to the file sources as a damaged file would: the same bytes are read as
 * a TFRecord file, a text file and a WebDataset shard (each possibly gzip-compressed, as the
 * readers decide from the content). Nothing may crash; every reader must end with 0 or with a
 * negative code whose message names the file, and keep returning that code. The seeds hold a
 * gzip file of lines, a TFRecord file, a tar shard and a gzip-compressed one, so mutations reach
 * the inflater and libarchive's parsers. */
#include "fuzz.h"

#include "common/error.h"
#include "pipeline/files.h"
#include "pipeline/tar.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Enough elements to pass every seed; a file of many tiny lines stops here. */
#define MAX_ELEMENTS 4096

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_files: %s: %s\n", what, detail);
        abort();
    }
}

static void drain(struct pipe_iter *it, struct pipe_ctx *ctx, const char *path)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    int rc = 1;
    for (int n = 0; n < MAX_ELEMENTS && rc == 1; n++) {
        rc = pipe_next(it, &e);
        check(rc == 1 || rc == 0 || rc < 0, "next returned an unexpected value", ctx->err);
        if (rc == 1)
            for (size_t i = 0; i < e.n; i++)
                check(e.t[i].dtype == SLUICE_BYTES && e.t[i].rank == 0, "not scalar bytes", path);
    }
    if (rc < 0) {
        check(strncmp(ctx->err, path, strlen(path)) == 0, "an error that does not name the file",
              ctx->err);
        check(pipe_next(it, &e) == rc, "an error that is not sticky", ctx->err);
    }
    if (rc == 0)
        check(pipe_next(it, &e) == 0, "an end that is not sticky", path);
    pipe_elem_release(&e);
    it->ops->destroy(it);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz_files", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return 0;
        }
        off += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char *paths[] = {path};
    char *exts[] = {"jpg", "cls"};
    for (int kind = 0; kind < 3; kind++) {
        struct pipe_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        struct pipe_iter *it = NULL;
        int rc = kind == 0   ? pipe_tfrecord_open(paths, 1, &ctx, &it)
                 : kind == 1 ? pipe_lines_open(paths, 1, &ctx, &it)
                             : pipe_tar_open(paths, 1, exts, 2, &ctx, &it);
        if (rc == 0)
            drain(it, &ctx, path);
    }
    close(fd);
    return 0;
}
