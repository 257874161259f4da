/* Backup and restore (backup.h). The copy itself runs in a child process too: LMDB walks the
 * journal's pages to compact them, and a page the checks let through must not take the caller
 * down. */
#include "backup.h"

#include "layout.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct copy_job {
    const char *work_dir;
    const char *tmp;
};

static int copy_in_child(void *user, struct journal_progress *progress, struct journal_verdict *v)
{
    struct copy_job *job = user;
    struct journal_opts o = {.work_dir = job->work_dir, .read_only = true, .progress = progress};
    struct journal *j;
    int rc = journal_open_damage(&o, &j, &v->damage, v->msg, sizeof v->msg);
    if (rc < 0)
        return rc;
    int fd = open(job->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        rc = err_set(v->msg, sizeof v->msg, -errno, "create %s: %s", job->tmp, strerror(errno));
    else
        rc = journal_copy(j, fd, v->msg, sizeof v->msg);
    if (fd >= 0 && close(fd) < 0 && rc == 0)
        rc = err_set(v->msg, sizeof v->msg, -errno, "close %s: %s", job->tmp, strerror(errno));
    journal_close(j);
    return rc;
}

int journal_backup(const char *work_dir, const char *to, journal_deep_cb deep, void *user,
                   struct journal_verdict *v, char *err, size_t errlen)
{
    char tmp[PATH_MAX], dir[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", to) >= sizeof tmp)
        return err_set(err, errlen, -ENAMETOOLONG, "%s: %s", to, strerror(ENAMETOOLONG));
    if (unlink(tmp) < 0 && errno != ENOENT) /* left by a backup that did not finish */
        return err_set(err, errlen, -errno, "remove %s: %s", tmp, strerror(errno));
    struct copy_job job = {.work_dir = work_dir, .tmp = tmp};
    int rc = journal_contained(copy_in_child, &job, v);
    if (rc < 0) {
        unlink(tmp);
        return err_set(err, errlen, rc, "%s", v->msg);
    }
    struct journal_opts o = {.file = tmp, .read_only = true};
    rc = journal_verify(&o, deep, user, v);
    if (rc < 0) {
        unlink(tmp);
        return err_set(err, errlen, rc, "the copy does not verify: %s", v->msg);
    }
    if (rename(tmp, to) < 0) {
        rc = err_set(err, errlen, -errno, "rename %s to %s: %s", tmp, to, strerror(errno));
        unlink(tmp);
        return rc;
    }
    journal_dir_of(to, dir, sizeof dir);
    rc = journal_sync_path(dir);
    if (rc < 0)
        return err_set(err, errlen, rc, "sync %s: %s", dir, strerror(-rc));
    return 0;
}

int journal_restore(const char *from, const char *work_dir, bool force, journal_deep_cb deep,
                    void *user, struct journal_verdict *v, char *replaced, size_t replaced_len,
                    char *err, size_t errlen)
{
    struct journal_paths p;
    enum journal_presence presence;
    int lock = -1;
    char path[PATH_MAX];
    if (replaced && replaced_len)
        replaced[0] = '\0';
    struct journal_opts o = {.file = from, .read_only = true};
    int rc = journal_verify(&o, deep, user, v);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s: %s", from, v->msg);
    rc = journal_paths_init(&p, work_dir, err, errlen);
    if (rc == 0)
        rc = journal_layout_lock(work_dir, &p, &lock, err, errlen);
    if (rc == 0)
        rc = journal_layout_probe(work_dir, &p, &presence, err, errlen);
    if (rc < 0)
        goto out;
    if (presence == JOURNAL_PRESENT && !force) {
        rc = err_set(err, errlen, SLUICE_ERR_EXISTS,
                     "there is a journal here already (%s); --force replaces it and keeps it "
                     "beside the new one",
                     p.dir);
        goto out;
    }
    rc = journal_layout_fresh(&p, err, errlen);
    if (rc < 0)
        goto out;
    if ((size_t)snprintf(path, sizeof path, "%s/" JOURNAL_DATA_FILE, p.fresh) >= sizeof path)
        rc = err_set(err, errlen, -ENAMETOOLONG, "%s: %s", p.fresh, strerror(ENAMETOOLONG));
    else
        rc = journal_copy_file(from, path, err, errlen);
    if (rc == 0)
        rc = journal_layout_publish(work_dir, &p, replaced, replaced_len, err, errlen);
    if (rc < 0)
        goto out;
    o = (struct journal_opts){.work_dir = work_dir, .read_only = true};
    rc = journal_verify(&o, deep, user, v);
    if (rc < 0)
        rc = err_set(err, errlen, rc, "the restored journal does not verify: %s", v->msg);
out:
    if (lock >= 0)
        close(lock);
    return rc;
}
