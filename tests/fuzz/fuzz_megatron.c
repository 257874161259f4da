/* Feeds arbitrary bytes to the Megatron index checks as an index and a bin held in memory: the
 * input's first 4 bytes (little-endian) are the index's length (cut to what follows), the index's
 * bytes come next and the bin's after them, each copied into a buffer of its exact size so that
 * a read past either is caught. pipe_megatron_index_init, then every document read in order
 * (at most MAX_TOKENS tokens an input), then the last one alone, as a split's first would be.
 * Nothing may crash; every failure must carry a message naming the index or the bin; every
 * document must lie inside the bin and come back as a 1-D int32 tensor of exactly its tokens.
 * The seeds (tests/fuzz/corpus/fuzz_megatron) are small datasets of tests/megatron's writer. */
#include "fuzz.h"

#include "common/error.h"
#include "pipeline/element.h"
#include "pipeline/megatron.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 1000000

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_megatron: %s: %s\n", what, detail);
        abort();
    }
}

static void check_message(const char *err)
{
    check(strncmp(err, "fuzz.idx: offset ", 17) == 0 || strncmp(err, "fuzz.bin: offset ", 17) == 0,
          "a message that does not name the file and offset", err);
}

/* Reads document d; returns its token count, or -1 after a failure. */
static int64_t read_document(const struct pipe_megatron_index *ix, uint64_t d,
                             struct pipe_tensor *t)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    uint64_t offset = UINT64_MAX, n = UINT64_MAX;
    int rc = pipe_megatron_document(ix, d, &offset, &n, err, sizeof err);
    if (rc < 0) {
        check_message(err);
        return -1;
    }
    check(offset <= ix->bin_len && n <= (ix->bin_len - offset) / ix->width,
          "a document outside the bin", "");
    if (n > MAX_TOKENS)
        return (int64_t)n;
    rc = pipe_megatron_tokens(ix, offset, n, t, err, sizeof err);
    if (rc == SLUICE_ERR_NOMEM)
        return -1;
    if (rc < 0) {
        check_message(err);
        return -1;
    }
    check(t->dtype == SLUICE_INT32 && t->rank == 1 && t->shape[0] == (int64_t)n &&
              t->len == 4 * n && (n == 0 || t->cap >= t->len),
          "a document that is not a 1-D int32 tensor of its tokens", "");
    return (int64_t)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    size_t idx_len =
        (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    if (idx_len > size - 4)
        idx_len = size - 4;
    size_t bin_len = size - 4 - idx_len;
    uint8_t *idx = malloc(idx_len ? idx_len : 1), *bin = malloc(bin_len ? bin_len : 1);
    check(idx && bin, "out of memory", "");
    memcpy(idx, data + 4, idx_len);
    memcpy(bin, data + 4 + idx_len, bin_len);
    struct pipe_megatron_index ix;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = pipe_megatron_index_init(&ix, idx, idx_len, bin_len ? bin : NULL, bin_len, "fuzz.idx",
                                      "fuzz.bin", err, sizeof err);
    if (rc < 0) {
        check_message(err);
    } else {
        check(ix.width >= 1 && ix.width <= 8, "a token width out of range", "");
        struct pipe_tensor t;
        memset(&t, 0, sizeof t);
        uint64_t tokens = 0;
        for (uint64_t d = 0; d < ix.ndocs && tokens <= MAX_TOKENS; d++) {
            int64_t n = read_document(&ix, d, &t);
            if (n < 0)
                break;
            tokens += (uint64_t)n;
        }
        if (ix.ndocs > 0)
            read_document(&ix, ix.ndocs - 1, &t);
        free(t.data);
        free(t.offs);
    }
    free(idx);
    free(bin);
    return 0;
}
