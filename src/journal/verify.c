/* Contained verification (verify.h).
 *
 * Happy path: the parent maps a page of shared memory for the progress, makes a pipe and forks;
 * the child runs the check, writes its verdict (one write, smaller than PIPE_BUF, so it arrives
 * whole or not at all) and leaves with _exit(); the parent reads the verdict until the pipe
 * closes and reaps the child. Failure modes: a child killed by a signal, or one that exits
 * without writing a whole verdict, is reported as damage where its progress says it was; fork,
 * pipe or mmap failing is reported as such (not as damage). */
#include "verify.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

_Static_assert(sizeof(struct journal_verdict) <= PIPE_BUF, "a verdict must fit one pipe write");

int journal_verdict_damage(struct journal_verdict *v, const struct journal_damage *d)
{
    v->rc = SLUICE_ERR_CORRUPT;
    if (d != &v->damage)
        v->damage = *d;
    journal_damage_format(&v->damage, v->msg, sizeof v->msg);
    return SLUICE_ERR_CORRUPT;
}

static void crashed(struct journal_verdict *v, const struct journal_progress *pr, const char *how)
{
    static const char *const phases[] = {"opening it", "checking its pages",
                                         "reading it through LMDB"};
    int phase = pr->phase >= 0 && pr->phase <= 2 ? pr->phase : 0;
    struct journal_damage d;
    journal_damage_set(&d, phase == JOURNAL_PHASE_PAGES, pr->page, "the check %s while %s", how,
                       phases[phase]);
    if (phase == JOURNAL_PHASE_READ && pr->seq) {
        d.has_seq = true;
        d.seq = pr->seq;
    }
    journal_verdict_damage(v, &d);
}

int journal_contained(int (*fn)(void *user, struct journal_progress *progress,
                                struct journal_verdict *v),
                      void *user, struct journal_verdict *v)
{
    int fds[2];
    memset(v, 0, sizeof *v);
    struct journal_progress *pr =
        mmap(NULL, sizeof *pr, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pr == MAP_FAILED)
        return v->rc = err_set(v->msg, sizeof v->msg, -errno, "check: shared memory: %s",
                               strerror(errno));
    memset((void *)pr, 0, sizeof *pr);
    if (pipe2(fds, O_CLOEXEC) < 0) {
        v->rc = err_set(v->msg, sizeof v->msg, -errno, "check: pipe: %s", strerror(errno));
        munmap(pr, sizeof *pr);
        return v->rc;
    }
    fflush(NULL); /* nothing buffered may be written twice */
    pid_t pid = fork();
    if (pid < 0) {
        v->rc = err_set(v->msg, sizeof v->msg, -errno, "check: fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        munmap(pr, sizeof *pr);
        return v->rc;
    }
    if (pid == 0) {
        close(fds[0]);
        struct journal_verdict cv;
        memset(&cv, 0, sizeof cv);
        cv.rc = fn(user, pr, &cv);
        ssize_t w;
        do {
            w = write(fds[1], &cv, sizeof cv);
        } while (w < 0 && errno == EINTR);
        _exit(w == (ssize_t)sizeof cv ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof *v) {
        ssize_t r = read(fds[0], (char *)v + got, sizeof *v - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(status)) {
        char how[96];
        int sig = WTERMSIG(status);
        snprintf(how, sizeof how, "crashed (signal %d, %s)", sig, strsignal(sig));
        crashed(v, pr, how);
    } else if (got != sizeof *v) {
        char how[64];
        snprintf(how, sizeof how, "stopped with status %d before its verdict",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        crashed(v, pr, how);
    }
    v->msg[sizeof v->msg - 1] = '\0';
    v->summary[sizeof v->summary - 1] = '\0';
    v->damage.what[sizeof v->damage.what - 1] = '\0';
    munmap(pr, sizeof *pr);
    return v->rc;
}

struct verify_job {
    const struct journal_opts *opts;
    journal_deep_cb deep;
    void *user;
};

static int verify_in_child(void *user, struct journal_progress *progress, struct journal_verdict *v)
{
    struct verify_job *job = user;
    struct journal_opts o = *job->opts;
    struct journal *j;
    o.read_only = true;
    o.create = false;
    o.gate = NULL;
    o.progress = progress;
    int rc = journal_open_damage(&o, &j, &v->damage, v->msg, sizeof v->msg);
    if (rc < 0)
        return v->rc = rc;
    struct journal_info info;
    char err[SLUICE_ERRMSG_SIZE];
    if (journal_get_info(j, &info, err, sizeof err) == 0)
        v->last_seq = info.last_seq;
    rc = job->deep ? job->deep(j, job->user, v) : 0;
    journal_close(j);
    return v->rc = rc;
}

int journal_verify(const struct journal_opts *opts, journal_deep_cb deep, void *user,
                   struct journal_verdict *v)
{
    struct verify_job job = {.opts = opts, .deep = deep, .user = user};
    return journal_contained(verify_in_child, &job, v);
}

struct gate {
    const struct journal_opts *opts;
    journal_deep_cb deep;
    void *user;
    bool tail_ok;
    struct journal_verdict *v;
};

static int verify_gate(void *user, char *err, size_t errlen)
{
    struct gate *g = user;
    int rc = journal_verify(g->opts, g->deep, g->user, g->v);
    /* Either way the journal opened in the child: its pages passed their checks. */
    if (rc == 0 || (rc == SLUICE_ERR_CORRUPT && g->tail_ok && g->v->damage.tail))
        return 1;
    return err_set(err, errlen, rc, "%s", g->v->msg);
}

int journal_open_checked(const struct journal_opts *opts, journal_deep_cb deep, void *user,
                         bool tail_ok, struct journal **out, struct journal_verdict *v, char *err,
                         size_t errlen)
{
    struct gate g = {.opts = opts, .deep = deep, .user = user, .tail_ok = tail_ok, .v = v};
    struct journal_opts o = *opts;
    o.read_only = false;
    o.gate = verify_gate;
    o.gate_user = &g;
    memset(v, 0, sizeof *v);
    return journal_open(&o, out, err, errlen);
}
