/* Mutated journal data files, as a damaged disk would leave them (the seeds are real journals: one
 * a dispatcher wrote, one a backup compacted).
 *
 * First the structural checks run on the bytes in this process: they must return sound or
 * damaged, never crash or read outside the input (the sanitizers watch). Then, for a file they
 * accept, the protected verification a dispatcher runs before it starts (journal_verify with
 * recovery_check, in a child process) reads it through LMDB: it may find the file damaged
 * (a record's checksum, a value LMDB reads), but its child must never crash, since that would
 * mean LMDB met a page the structural checks let through.
 *
 * Most mutations damage the file in place, as a disk does (a few bytes of one page change, the
 * size stays): libFuzzer's own mutations of the whole input mostly shift every page and are
 * refused at once. */
#include "fuzz.h"

#include "common/error.h"
#include "dispatcher/journal_thread.h"
#include "journal/check.h"
#include "journal/verify.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PAGE 4096
#define WINDOW 64

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    if (size < 2 * PAGE || seed % 8 == 0)
        return LLVMFuzzerMutate(data, size, max_size);
    size_t page = (seed / 8) % (size / PAGE);
    size_t off = page * PAGE + (seed / 64) % (PAGE - WINDOW);
    LLVMFuzzerMutate(data + off, WINDOW, WINDOW); /* in place; the size stays */
    return size;
}

static char path[64];

static void remove_file(void)
{
    if (path[0])
        unlink(path);
}

/* Writes the input where the verification reads it. */
static int write_file(const uint8_t *data, size_t len)
{
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/fuzz-journal-file-XXXXXX");
        int fd = mkstemp(path);
        if (fd < 0)
            return -1;
        close(fd);
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = fwrite(data, 1, len, f);
    return fclose(f) == 0 && n == len ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    struct journal_damage d;
    struct journal_check_stats st;
    int rc = journal_check_pages(data, len, NULL, &st, &d);
    assert(rc == 0 || rc == SLUICE_ERR_CORRUPT || rc == SLUICE_ERR_NOMEM);
    if (rc != 0)
        return 0;
    assert(st.used + st.free + 2 == st.pages && st.pages * 512 <= len);
    if (write_file(data, len) < 0)
        return 0;
    struct journal_opts o = {.file = path, .read_only = true};
    struct journal_verdict v;
    rc = journal_verify(&o, recovery_check, NULL, &v);
    if (strstr(v.msg, "the check crashed") || strstr(v.msg, "the check stopped")) {
        fprintf(stderr, "the structural checks accepted a file LMDB cannot read: %s\n", v.msg);
        abort();
    }
    assert(rc <= 0);
    return 0;
}
