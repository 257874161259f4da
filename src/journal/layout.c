/* The work dir's layout (layout.h). Every step that makes a journal visible is a rename of a
 * complete, synced directory, followed by a sync of the directory that holds it. */
#include "layout.h"

#include "common/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCK_NAME "journal.lock"
#define FRESH_NAME "journal.new"

static int path_join(char *out, const char *a, const char *b)
{
    return (size_t)snprintf(out, PATH_MAX, "%s/%s", a, b) >= PATH_MAX ? -ENAMETOOLONG : 0;
}

int journal_paths_init(struct journal_paths *p, const char *work_dir, char *err, size_t errlen)
{
    if (path_join(p->dir, work_dir, JOURNAL_ENV_DIR) < 0 ||
        path_join(p->data, p->dir, JOURNAL_DATA_FILE) < 0 ||
        path_join(p->lock, work_dir, LOCK_NAME) < 0 ||
        path_join(p->fresh, work_dir, FRESH_NAME) < 0)
        return err_set(err, errlen, -ENAMETOOLONG, "open: %s", strerror(ENAMETOOLONG));
    return 0;
}

void journal_dir_of(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, len, ".");
    else if (slash == path)
        snprintf(out, len, "/");
    else
        snprintf(out, len, "%.*s", (int)(slash - path), path);
}

int journal_sync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* mkdir -p: creates path and its missing parents. */
static int make_dirs(const char *path)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(buf, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int journal_layout_lock(const char *work_dir, const struct journal_paths *p, int *fd, char *err,
                        size_t errlen)
{
    int rc = make_dirs(work_dir);
    if (rc < 0)
        return err_set(err, errlen, rc, "create %s: %s", work_dir, strerror(-rc));
    int lfd = open(p->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0)
        return err_set(err, errlen, -errno, "open %s: %s", p->lock, strerror(errno));
    if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(lfd);
        if (e == EWOULDBLOCK)
            return err_set(err, errlen, SLUICE_ERR_EXISTS,
                           "another dispatcher is writing this journal");
        return err_set(err, errlen, -e, "lock %s: %s", p->lock, strerror(e));
    }
    *fd = lfd;
    return 0;
}

int journal_layout_probe(const char *work_dir, const struct journal_paths *p,
                         enum journal_presence *out, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(p->dir, &st) == 0) {
        *out = JOURNAL_PRESENT;
        return 0;
    }
    if (errno != ENOENT)
        return err_set(err, errlen, -errno, "look at %s: %s", p->dir, strerror(errno));
    DIR *d = opendir(work_dir);
    if (!d) {
        if (errno == ENOENT) {
            *out = JOURNAL_FRESH;
            return 0;
        }
        return err_set(err, errlen, -errno, "read %s: %s", work_dir, strerror(errno));
    }
    *out = JOURNAL_FRESH;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || strcmp(n, LOCK_NAME) == 0 ||
            strcmp(n, FRESH_NAME) == 0)
            continue;
        *out = JOURNAL_FOREIGN;
        break;
    }
    closedir(d);
    return 0;
}

int journal_layout_fresh(const struct journal_paths *p, char *err, size_t errlen)
{
    DIR *d = opendir(p->fresh);
    if (d) {
        struct dirent *e;
        int rc = 0;
        while (rc == 0 && (e = readdir(d)) != NULL) {
            const char *n = e->d_name;
            if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
                continue;
            char path[PATH_MAX];
            if (strcmp(n, JOURNAL_DATA_FILE) != 0 && strcmp(n, "lock.mdb") != 0 &&
                strcmp(n, JOURNAL_DATA_FILE ".tmp") != 0)
                rc = err_set(err, errlen, SLUICE_ERR_EXISTS,
                             "%s holds '%s', which no unfinished journal leaves behind", p->fresh,
                             n);
            else if (path_join(path, p->fresh, n) < 0)
                rc =
                    err_set(err, errlen, -ENAMETOOLONG, "%s: %s", p->fresh, strerror(ENAMETOOLONG));
            else if (unlink(path) < 0)
                rc = err_set(err, errlen, -errno, "remove %s: %s", path, strerror(errno));
        }
        closedir(d);
        if (rc < 0)
            return rc;
        if (rmdir(p->fresh) < 0)
            return err_set(err, errlen, -errno, "remove %s: %s", p->fresh, strerror(errno));
    } else if (errno != ENOENT) {
        return err_set(err, errlen, -errno, "read %s: %s", p->fresh, strerror(errno));
    }
    if (mkdir(p->fresh, 0755) < 0)
        return err_set(err, errlen, -errno, "create %s: %s", p->fresh, strerror(errno));
    return 0;
}

int journal_layout_publish(const char *work_dir, const struct journal_paths *p, char *replaced,
                           size_t replaced_len, char *err, size_t errlen)
{
    int rc = journal_sync_path(p->fresh);
    if (rc < 0)
        return err_set(err, errlen, rc, "sync %s: %s", p->fresh, strerror(-rc));
    if (replaced && replaced_len)
        replaced[0] = '\0';
    struct stat st;
    if (lstat(p->dir, &st) == 0) {
        char aside[PATH_MAX], stamp[32];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
        if ((size_t)snprintf(aside, sizeof aside, "%s/journal.replaced-%s", work_dir, stamp) >=
            sizeof aside)
            return err_set(err, errlen, -ENAMETOOLONG, "%s: %s", work_dir, strerror(ENAMETOOLONG));
        for (int i = 1; lstat(aside, &st) == 0 && i < 100; i++)
            snprintf(aside, sizeof aside, "%s/journal.replaced-%s-%d", work_dir, stamp, i);
        if (rename(p->dir, aside) < 0)
            return err_set(err, errlen, -errno, "move %s aside: %s", p->dir, strerror(errno));
        if (replaced && replaced_len)
            snprintf(replaced, replaced_len, "%s", aside);
    }
    if (rename(p->fresh, p->dir) < 0)
        return err_set(err, errlen, -errno, "rename %s to %s: %s", p->fresh, p->dir,
                       strerror(errno));
    rc = journal_sync_path(work_dir);
    if (rc < 0)
        return err_set(err, errlen, rc, "sync %s: %s", work_dir, strerror(-rc));
    return 0;
}

int journal_copy_file(const char *from, const char *to, char *err, size_t errlen)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return err_set(err, errlen, -errno, "open %s: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        return err_set(err, errlen, -e, "create %s: %s", to, strerror(e));
    }
    int rc = 0;
    char *buf = malloc(1 << 20);
    if (!buf)
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "copy %s: out of memory", from);
    while (rc == 0) {
        ssize_t n = read(in, buf, 1 << 20);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = err_set(err, errlen, -errno, "read %s: %s", from, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(out, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                rc = err_set(err, errlen, -errno, "write %s: %s", to, strerror(errno));
                break;
            }
            done += w;
        }
    }
    free(buf);
    if (rc == 0 && fsync(out) < 0)
        rc = err_set(err, errlen, -errno, "sync %s: %s", to, strerror(errno));
    if (close(out) < 0 && rc == 0)
        rc = err_set(err, errlen, -errno, "close %s: %s", to, strerror(errno));
    close(in);
    if (rc < 0)
        unlink(to);
    return rc;
}
