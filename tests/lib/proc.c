#include "lib/proc.h"

#include "lib/clock.h"
#include "lib/file.h"
#include "lib/tmp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int log_counter;

const char *bin_path(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 512, "%s/%s", SLUICE_BIN_DIR, name);
    return b;
}

int proc_spawn(struct proc *p, char *const argv[])
{
    memset(p, 0, sizeof(*p));
    p->pid = -1;
    p->out_fd = -1;
    snprintf(p->log, sizeof(p->log), "%s/proc-%d-%d.log", tmp_dir(), (int)getpid(), ++log_counter);
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(pipefd[1], 1);
        int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0)
            dup2(fd, 2);
        close(pipefd[0]);
        close(pipefd[1]);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);
    p->pid = pid;
    p->out_fd = pipefd[0];
    return 0;
}

/* proc_await_listening, calling the process name when it complains. */
static int await_listening(struct proc *p, const char *name, int timeout_ms)
{
    char line[512];
    size_t have = 0;
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            break;
        struct pollfd pfd = {.fd = p->out_fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r <= 0)
            continue;
        ssize_t n = read(p->out_fd, line + have, 1);
        if (n <= 0)
            break;
        if (line[have] == '\n' || have + 2 >= sizeof(line)) {
            line[have] = 0;
            const char *at = strstr(line, " listening on ");
            if (at) {
                snprintf(p->addr, sizeof(p->addr), "%s", at + strlen(" listening on "));
                return 0;
            }
            have = 0;
        } else {
            have++;
        }
    }
    fprintf(stderr, "%s did not report listening in %d ms\n", name, timeout_ms);
    proc_stop(p, SIGKILL, 2000);
    print_file(p->log, 200);
    return -1;
}

int proc_await_listening(struct proc *p, int timeout_ms)
{
    char name[32];
    snprintf(name, sizeof name, "pid %d", (int)p->pid);
    return await_listening(p, name, timeout_ms);
}

int proc_start(struct proc *p, char *const argv[], int timeout_ms)
{
    if (proc_spawn(p, argv) != 0)
        return -1;
    return await_listening(p, argv[0], timeout_ms);
}

static int decode_status(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

int proc_wait(struct proc *p, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    long long deadline = now_ms() + timeout_ms;
    useconds_t nap = 100; /* most processes are gone within a millisecond or two */
    for (;;) {
        int status;
        pid_t r = waitpid(p->pid, &status, WNOHANG);
        if (r == p->pid) {
            p->pid = -1;
            if (p->out_fd >= 0)
                close(p->out_fd);
            p->out_fd = -1;
            return decode_status(status);
        }
        if (r < 0)
            return -1;
        if (now_ms() >= deadline)
            return -2;
        usleep(nap);
        if (nap < 5000)
            nap *= 2;
    }
}

int proc_stop(struct proc *p, int sig, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    int rc = proc_wait(p, timeout_ms);
    if (rc == -2) {
        fprintf(stderr, "pid %d ignored signal %d for %d ms; killing\n", (int)p->pid, sig,
                timeout_ms);
        print_file(p->log, 200);
        kill(p->pid, SIGKILL);
        rc = proc_wait(p, 5000);
        return rc == -2 ? -1 : 200 + rc; /* never mistaken for a clean exit */
    }
    return rc;
}

static void append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (*len + n + 1 > c)
            c *= 2;
        *buf = realloc(*buf, c);
        if (!*buf)
            abort();
        *cap = c;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
}

/* Reads fds until both close or the deadline passes. */
static void drain(int fd1, char **o1, int fd2, char **o2, long long deadline)
{
    size_t l1 = 0, c1 = 0, l2 = 0, c2 = 0;
    char *b1 = NULL, *b2 = NULL;
    append(&b1, &l1, &c1, "", 0);
    append(&b2, &l2, &c2, "", 0);
    char chunk[65536];
    while (fd1 >= 0 || fd2 >= 0) {
        long long left = deadline - now_ms();
        if (left <= 0)
            break;
        struct pollfd pfd[2] = {{.fd = fd1, .events = POLLIN}, {.fd = fd2, .events = POLLIN}};
        int r = poll(pfd, 2, (int)left);
        if (r < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (pfd[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(pfd[i].fd, chunk, sizeof(chunk));
            if (n <= 0) {
                if (i == 0)
                    fd1 = -1;
                else
                    fd2 = -1;
                continue;
            }
            if (i == 0)
                append(&b1, &l1, &c1, chunk, (size_t)n);
            else
                append(&b2, &l2, &c2, chunk, (size_t)n);
        }
    }
    if (o1)
        *o1 = b1;
    else
        free(b1);
    if (o2)
        *o2 = b2;
    else
        free(b2);
}

char *proc_read_all(struct proc *p, int timeout_ms)
{
    char *out = NULL;
    drain(p->out_fd, &out, -1, NULL, now_ms() + timeout_ms);
    return out;
}

int run_cmd(char *const argv[], int timeout_ms, char **out, char **err)
{
    int po[2], pe[2];
    if (pipe(po) != 0)
        return -1;
    if (pipe(pe) != 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    long long deadline = now_ms() + timeout_ms;
    drain(po[0], out, pe[0], err, deadline);
    close(po[0]);
    close(pe[0]);
    struct proc p = {.pid = pid, .out_fd = -1};
    int rc = proc_wait(&p, (int)(deadline - now_ms() > 0 ? deadline - now_ms() : 0));
    if (rc == -2) {
        fprintf(stderr, "%s did not finish in %d ms; killing\n", argv[0], timeout_ms);
        kill(pid, SIGKILL);
        proc_wait(&p, 5000);
        return -1;
    }
    return rc;
}

long long proc_wait_log(const struct proc *p, const char *text, int timeout_ms)
{
    long long start = now_ms();
    for (;;) {
        char *log = read_text_file(p->log);
        bool found = strstr(log, text) != NULL;
        free(log);
        if (found)
            return now_ms() - start;
        if (now_ms() - start >= timeout_ms)
            return -1;
        sleep_ms(50);
    }
}

long proc_status_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            kb = strtol(line + n + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

int proc_threads(pid_t pid, struct proc_threads *out)
{
    memset(out, 0, sizeof *out);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char stat[512], buf[512];
        snprintf(stat, sizeof stat, "%s/%s/stat", path, e->d_name);
        FILE *f = fopen(stat, "r");
        if (!f)
            continue; /* it has exited since readdir */
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* "TID (COMM) STATE ...": COMM may hold anything, ')' included. */
        const char *p = strrchr(buf, ')');
        char state = p && p[1] == ' ' ? p[2] : '?';
        out->total++;
        out->running += state == 'R';
        out->sleeping += state == 'S' || state == 'D';
        out->stopped += state == 'T' || state == 't';
    }
    closedir(d);
    return 0;
}

int proc_pause(pid_t pid, int timeout_ms)
{
    if (kill(pid, SIGSTOP) != 0)
        return -1;
    long long t0 = now_ms();
    for (;;) {
        struct proc_threads th;
        if (proc_threads(pid, &th) != 0)
            return -1;
        if (th.total > 0 && th.stopped == th.total)
            return 0;
        if (now_ms() - t0 > timeout_ms)
            return -1;
        sleep_ms(1);
    }
}
