#include "lib/tmp.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char tmp_path[256];

const char *tmp_dir(void)
{
    if (!tmp_path[0]) {
        snprintf(tmp_path, sizeof(tmp_path), "/tmp/sluice-test-XXXXXX");
        if (!mkdtemp(tmp_path)) {
            perror("mkdtemp");
            abort();
        }
    }
    return tmp_path;
}

void tmp_cleanup(void)
{
    if (tmp_path[0]) {
        if (tmp_remove(tmp_path) != 0)
            fprintf(stderr, "cleanup of %s failed\n", tmp_path);
        tmp_path[0] = 0;
    }
}

int tmp_teardown(void **unused)
{
    (void)unused;
    tmp_cleanup();
    return 0;
}

/* Set by remove_entry when something could not be removed: nftw's walk goes on past it, as
 * rm -rf does. */
static int remove_failed;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0 && errno != ENOENT)
        remove_failed = 1;
    return 0;
}

int tmp_remove(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    remove_failed = 0;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return -1;
    return remove_failed ? -1 : 0;
}
