#include "lib/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmp_path[256];
static int log_counter;

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
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_path);
        if (system(cmd) != 0)
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

const char *bin_path(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 512, "%s/%s", SLUICE_BIN_DIR, name);
    return b;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void print_log(const struct proc *p)
{
    FILE *f = fopen(p->log, "r");
    if (!f)
        return;
    char line[1024];
    int n = 0;
    fprintf(stderr, "---- %s ----\n", p->log);
    while (fgets(line, sizeof(line), f) && n++ < 200)
        fputs(line, stderr);
    fclose(f);
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

int proc_start(struct proc *p, char *const argv[], int timeout_ms)
{
    if (proc_spawn(p, argv) != 0)
        return -1;
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
    fprintf(stderr, "%s did not report listening in %d ms\n", argv[0], timeout_ms);
    proc_stop(p, SIGKILL, 2000);
    print_log(p);
    return -1;
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
        print_log(p);
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

int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *sorted_lines(const char *text)
{
    size_t n = count_lines(text);
    char *copy = strdup(text);
    char **lines = calloc(n + 1, sizeof(char *));
    if (!copy || !lines)
        abort();
    size_t k = 0;
    for (char *s = copy; *s && k < n;) {
        char *nl = strchr(s, '\n');
        if (nl)
            *nl = 0;
        lines[k++] = s;
        s = nl ? nl + 1 : s + strlen(s);
    }
    qsort(lines, k, sizeof(char *), cmp_str);
    size_t total = strlen(text) + 2;
    char *out = malloc(total);
    if (!out)
        abort();
    out[0] = 0;
    size_t len = 0;
    for (size_t i = 0; i < k; i++) {
        size_t l = strlen(lines[i]);
        memcpy(out + len, lines[i], l);
        len += l;
        out[len++] = '\n';
        out[len] = 0;
    }
    free(lines);
    free(copy);
    return out;
}

size_t count_lines(const char *text)
{
    size_t n = 0;
    for (const char *s = text; *s; s++)
        if (*s == '\n')
            n++;
    if (*text && text[strlen(text) - 1] != '\n')
        n++;
    return n;
}

char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    if (!text)
        abort();
    for (size_t n; f && (n = fread(text + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (cap - len < 2 && !(text = realloc(text, cap *= 2)))
            abort();
    }
    if (f)
        fclose(f);
    text[len] = '\0';
    return text;
}
