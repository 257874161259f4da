/* bench_journal: the fault-tolerant dispatcher's journal under distributed_epoch split leasing.
 *
 * Starts the real sluice-dispatcher with --fault-tolerant twice in the same run: once with group
 * commit (the default), once forced to commit every update in its own transaction (the hidden
 * --journal-per-update, the baseline). Fake workers (each with its own connection and
 * incarnation, as real workers have) keep DEPTH GetSplits requests in flight, each leasing one
 * split and reporting the previous ones finished, so every reply stands for one or two journaled
 * updates (splits finished, splits leased). Prints journaled updates per second for both and
 * their ratio (target >= 50x).
 *
 * Then restart time: drives a group-commit dispatcher with snapshots on (--snapshot-every 10000)
 * through CHANGES state changes, kills it with SIGKILL, and times process start to the
 * "listening on" line of a new dispatcher on the same work dir, three times (target <= 1 s for
 * 1,000,000 changes). With --no-snapshot-baseline it also times the same history replayed
 * without snapshots, for comparison.
 *
 *   bench_journal [--seconds S] [--workers K] [--depth D] [--changes N]
 *                 [--dispatcher PATH] [--dir DIR] [--no-snapshot-baseline]
 *   defaults: S = 5, K = 8, D = 64, N = 1000000, PATH = <this binary's dir>/../bin/
 *             sluice-dispatcher, DIR = a new directory under /tmp (on the disk, not tmpfs)
 *
 * Timings are what they are on the machine at hand: the baseline's rate is the disk's sync
 * latency, so the ratio is larger on slower disks. */
#include "common/error.h"
#include "common/rpc_client.h"
#include "journal/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define MAX_WORKERS 64
#define SOURCE_LEN 4000000000000LL /* range(4e12) split by 1: never runs out */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_journal: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* ---- the dispatcher process ------------------------------------------------------------------ */

struct disp {
    pid_t pid;
    char addr[128];
    char log[PATH_MAX];
    double started_s, listening_s;
};

/* Starts the dispatcher and waits for its listening line; stderr goes to a log file. */
static void disp_start(struct disp *d, const char *bin, const char *wd, const char *port,
                       const char *snapshot_every, bool per_update, const char *level)
{
    int out[2];
    if (pipe(out) < 0)
        die("pipe: %s", strerror(errno));
    snprintf(d->log, sizeof d->log, "%s.log", wd);
    d->started_s = now_s();
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(out[1], 1);
        int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0)
            dup2(fd, 2);
        close(out[0]);
        close(out[1]);
        char *argv[16];
        int n = 0;
        argv[n++] = (char *)bin;
        argv[n++] = "--fault-tolerant";
        argv[n++] = "--work-dir";
        argv[n++] = (char *)wd;
        argv[n++] = "--port";
        argv[n++] = (char *)port;
        argv[n++] = "--snapshot-every";
        argv[n++] = (char *)snapshot_every;
        argv[n++] = "--worker-timeout-ms";
        argv[n++] = "3600000";
        argv[n++] = "--client-timeout-ms";
        argv[n++] = "3600000";
        argv[n++] = "--log-level";
        argv[n++] = (char *)level;
        if (per_update)
            argv[n++] = "--journal-per-update";
        argv[n] = NULL;
        execv(bin, argv);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    d->pid = pid;
    char line[256];
    size_t have = 0;
    for (;;) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        if (poll(&p, 1, 60000) <= 0)
            die("the dispatcher did not start within 60 s (log: %s)", d->log);
        ssize_t got = read(out[0], line + have, 1);
        if (got <= 0)
            die("the dispatcher exited before listening (log: %s)", d->log);
        if (line[have] == '\n' || have + 2 == sizeof line) {
            line[have] = '\0';
            break;
        }
        have++;
    }
    d->listening_s = now_s();
    close(out[0]);
    const char *at = strstr(line, "listening on ");
    if (!at)
        die("unexpected first line '%s'", line);
    snprintf(d->addr, sizeof d->addr, "%s", at + strlen("listening on "));
}

static int disp_stop(struct disp *d, int sig)
{
    kill(d->pid, sig);
    int status;
    if (waitpid(d->pid, &status, 0) != d->pid)
        die("waitpid: %s", strerror(errno));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- the load: fake workers leasing one split at a time ---------------------------------------
 */

struct bench;

struct worker {
    struct bench *b;
    struct rpc_client *rpc;
    uint64_t task;
    uint8_t key[16]; /* the secret it registers with and proves itself with */
    uint64_t *done;  /* leased splits to report finished with the next request */
    size_t ndone, cap;
    int inflight;
};

struct bench {
    uv_loop_t loop;
    struct rpc_client *client;
    struct worker w[MAX_WORKERS];
    int nworkers, depth;
    bool running;
    uint64_t updates, replies;
    uint64_t stop_after; /* stop issuing once this many updates are acknowledged (0: never) */
    int waiting;         /* setup calls outstanding */
    int failed;
    char why[SLUICE_ERRMSG_SIZE];
};

struct call {
    struct bench *b;
    struct worker *w;
    uint64_t finished; /* splits the request reported finished */
    Sluice__Envelope *copy;
};

static void sync_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct call *c = user;
    c->b->waiting--;
    if (status < 0) {
        c->b->failed++;
        snprintf(c->b->why, sizeof c->b->why, "%s", msg);
        return;
    }
    size_t n = sluice__envelope__get_packed_size(reply);
    uint8_t *buf = malloc(n ? n : 1);
    sluice__envelope__pack(reply, buf);
    c->copy = sluice__envelope__unpack(NULL, n, buf);
    free(buf);
}

/* One setup call, waited for. Returns the reply (freed by the caller). */
static Sluice__Envelope *sync_call(struct bench *b, struct rpc_client *rpc, Sluice__Envelope *req)
{
    struct call c = {.b = b};
    b->waiting++;
    if (rpc_call(rpc, req, 30000, sync_reply, &c) < 0)
        die("rpc_call failed");
    while (b->waiting > 0)
        uv_run(&b->loop, UV_RUN_ONCE);
    if (!c.copy)
        die("setup call failed: %s", b->why);
    return c.copy;
}

static void issue(struct worker *w);

static void on_splits(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct call *c = user;
    struct worker *w = c->w;
    struct bench *b = c->b;
    w->inflight--;
    if (status < 0 || reply->body_case != SLUICE__ENVELOPE__BODY_GET_SPLITS_REPLY) {
        b->failed++;
        snprintf(b->why, sizeof b->why, "get_splits: %s", msg ? msg : "unexpected reply");
        free(c);
        return;
    }
    const Sluice__GetSplitsReply *r = reply->get_splits_reply;
    b->replies++;
    b->updates += (c->finished > 0) + (r->n_seqs > 0);
    for (size_t i = 0; i < r->n_seqs; i++) {
        if (w->ndone == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 64;
            w->done = realloc(w->done, w->cap * sizeof *w->done);
        }
        w->done[w->ndone++] = r->seqs[i];
    }
    free(c);
    if (b->stop_after && b->updates >= b->stop_after)
        b->running = false;
    issue(w);
}

/* Keeps DEPTH requests in flight on this worker while the run lasts. */
static void issue(struct worker *w)
{
    struct bench *b = w->b;
    while (b->running && b->failed == 0 && w->inflight < b->depth) {
        Sluice__GetSplitsRequest body = SLUICE__GET_SPLITS_REQUEST__INIT;
        body.task_id = w->task;
        body.max_splits = 1;
        body.n_finished = w->ndone;
        body.finished = w->done;
        body.worker_key.data = w->key;
        body.worker_key.len = sizeof w->key;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS;
        env.get_splits = &body;
        struct call *c = calloc(1, sizeof *c);
        c->b = b;
        c->w = w;
        c->finished = w->ndone;
        if (rpc_call(w->rpc, &env, 60000, on_splits, c) < 0)
            die("rpc_call failed");
        w->ndone = 0;
        w->inflight++;
    }
}

static struct rpc_client *client_new(struct bench *b, const char *addr, Sluice__Role role,
                                     uint64_t inc)
{
    struct rpc_client *c;
    char err[SLUICE_ERRMSG_SIZE];
    struct rpc_client_opts o = {.address = addr, .role = role, .incarnation = inc};
    if (rpc_client_new(&b->loop, &o, &c, err, sizeof err) < 0)
        die("client: %s", err);
    return c;
}

/* Registers range(SOURCE_LEN) split by 1, creates a distributed_epoch job, and registers the
 * fake workers, each getting one task. */
static void setup(struct bench *b, const char *addr)
{
    Sluice__SourceDef src = SLUICE__SOURCE_DEF__INIT;
    src.kind = SLUICE__SOURCE_DEF__KIND__RANGE;
    src.stop = SOURCE_LEN;
    src.step = 1;
    Sluice__DatasetDef def = SLUICE__DATASET_DEF__INIT;
    def.source = &src;
    Sluice__RegisterDatasetRequest reg = SLUICE__REGISTER_DATASET_REQUEST__INIT;
    reg.dataset = &def;
    reg.dataset_id = "bench";
    reg.split_size = 1;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_REGISTER_DATASET;
    env.register_dataset = &reg;
    b->client = client_new(b, addr, SLUICE__ROLE__ROLE_CLIENT, 1);
    sluice__envelope__free_unpacked(sync_call(b, b->client, &env), NULL);

    Sluice__GetOrCreateJobRequest job = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    job.dataset_id = "bench";
    job.job_name = "bench";
    job.mode = SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &job;
    sluice__envelope__free_unpacked(sync_call(b, b->client, &env), NULL);

    for (int i = 0; i < b->nworkers; i++) {
        struct worker *w = &b->w[i];
        char address[64];
        snprintf(address, sizeof address, "bench-worker-%d:1", i);
        w->b = b;
        w->rpc = client_new(b, addr, SLUICE__ROLE__ROLE_WORKER, 1000 + (uint64_t)i);
        Sluice__WorkerHeartbeatRequest hb = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
        hb.address = address;
        memset(w->key, 'a' + i % 26, sizeof w->key);
        hb.worker_key.data = w->key;
        hb.worker_key.len = sizeof w->key;
        env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
        env.worker_heartbeat = &hb;
        Sluice__Envelope *rep = sync_call(b, w->rpc, &env);
        if (rep->body_case != SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT_REPLY ||
            rep->worker_heartbeat_reply->n_new_tasks < 1)
            die("worker %d got no task", i);
        w->task = rep->worker_heartbeat_reply->new_tasks[0]->task_id;
        sluice__envelope__free_unpacked(rep, NULL);
    }
}

static void on_timer(uv_timer_t *t)
{
    ((struct bench *)t->data)->running = false;
}

static void on_closed(void *user)
{
    (*(int *)user)--;
}

static void on_timer_closed(uv_handle_t *h)
{
    (void)h;
}

/* Runs the load for seconds (or until stop_after updates); returns updates per second. */
static double run_load(struct bench *b, double seconds, double *elapsed_out)
{
    uv_timer_t timer;
    uv_timer_init(&b->loop, &timer);
    timer.data = b;
    if (seconds > 0)
        uv_timer_start(&timer, on_timer, (uint64_t)(seconds * 1000), 0);
    b->running = true;
    b->updates = b->replies = 0;
    double start = now_s();
    for (int i = 0; i < b->nworkers; i++)
        issue(&b->w[i]);
    int inflight;
    do {
        uv_run(&b->loop, UV_RUN_ONCE);
        inflight = 0;
        for (int i = 0; i < b->nworkers; i++)
            inflight += b->w[i].inflight;
        if (b->failed)
            die("%s", b->why);
    } while (b->running || inflight > 0);
    double elapsed = now_s() - start;
    uv_close((uv_handle_t *)&timer, on_timer_closed);
    uv_run(&b->loop, UV_RUN_NOWAIT);
    if (elapsed_out)
        *elapsed_out = elapsed;
    return (double)b->updates / elapsed;
}

static void bench_close(struct bench *b)
{
    int open = 1 + b->nworkers;
    rpc_client_close(b->client, on_closed, &open);
    for (int i = 0; i < b->nworkers; i++) {
        rpc_client_close(b->w[i].rpc, on_closed, &open);
        free(b->w[i].done);
    }
    while (open > 0)
        uv_run(&b->loop, UV_RUN_ONCE);
    uv_run(&b->loop, UV_RUN_NOWAIT);
    if (uv_loop_close(&b->loop) != 0)
        die("the loop did not close");
}

static void bench_init(struct bench *b, int nworkers, int depth)
{
    memset(b, 0, sizeof *b);
    if (uv_loop_init(&b->loop) < 0)
        die("uv_loop_init");
    b->nworkers = nworkers;
    b->depth = depth;
}

/* ---- reporting ------------------------------------------------------------------------------- */

static void journal_summary(const char *wd, char *out, size_t len)
{
    struct journal *j;
    struct journal_info info;
    char err[200];
    struct journal_opts o = {.work_dir = wd, .read_only = true};
    if (journal_open(&o, &j, err, sizeof err) < 0 ||
        journal_get_info(j, &info, err, sizeof err) < 0) {
        snprintf(out, len, "(journal: %s)", err);
        return;
    }
    snprintf(out, len,
             "journal: snapshot at %" PRIu64 ", %" PRIu64 " records after it, %.1f MiB used",
             info.snapshot_seq, info.records, (double)info.map_used / (1 << 20));
    journal_close(j);
}

/* The "journal: N records in M transactions" line the dispatcher logs when it closes. */
static void closing_line(const char *log, char *out, size_t len)
{
    FILE *f = fopen(log, "r");
    char line[512];
    snprintf(out, len, "?");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "journal: ");
        if (at && strstr(line, "transactions")) {
            snprintf(out, len, "%s", at + strlen("journal: "));
            out[strcspn(out, "\n")] = '\0';
        }
    }
    fclose(f);
}

/* The "recovered ..." line of the last start in the log. */
static void recovered_line(const char *log, char *out, size_t len)
{
    FILE *f = fopen(log, "r");
    char line[512];
    snprintf(out, len, "?");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "recovered ");
        if (at) {
            snprintf(out, len, "%s", at);
            out[strcspn(out, ";\n")] = '\0';
        }
    }
    fclose(f);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static double throughput(const char *bin, const char *root, const char *name, bool per_update,
                         double seconds, int workers, int depth)
{
    char wd[PATH_MAX], summary[256], closing[256];
    snprintf(wd, sizeof wd, "%s/%s", root, name);
    struct disp d;
    struct bench b;
    disp_start(&d, bin, wd, "0", "10000", per_update, "info");
    bench_init(&b, workers, depth);
    setup(&b, d.addr);
    double rate = run_load(&b, seconds, NULL);
    uint64_t replies = b.replies;
    bench_close(&b);
    if (disp_stop(&d, SIGTERM) != 0)
        die("the %s dispatcher did not stop cleanly (log: %s)", name, d.log);
    journal_summary(wd, summary, sizeof summary);
    closing_line(d.log, closing, sizeof closing);
    printf("  %-12s %10.0f updates/s  (%" PRIu64 " replies; %s)\n", name, rate, replies, closing);
    printf("  %-12s %s\n", "", summary);
    fflush(stdout);
    return rate;
}

/* Builds a history of `changes` updates, kills the dispatcher, and times restarts. */
static void restart_time(const char *bin, const char *root, const char *name,
                         const char *snapshot_every, uint64_t changes, int workers, int depth)
{
    char wd[PATH_MAX], summary[256], recovered[256];
    snprintf(wd, sizeof wd, "%s/%s", root, name);
    struct disp d;
    struct bench b;
    disp_start(&d, bin, wd, "0", snapshot_every, false, "warn");
    bench_init(&b, workers, depth);
    setup(&b, d.addr);
    b.stop_after = changes;
    double elapsed;
    run_load(&b, 0, &elapsed);
    uint64_t made = b.updates;
    bench_close(&b);
    disp_stop(&d, SIGKILL);
    journal_summary(wd, summary, sizeof summary);
    printf("  %-12s %" PRIu64 " leasing updates acknowledged in %.1f s, then SIGKILL; %s\n", name,
           made, elapsed, summary);
    double best = 1e9, worst = 0;
    for (int i = 0; i < 3; i++) {
        disp_start(&d, bin, wd, "0", snapshot_every, false, "info");
        double t = d.listening_s - d.started_s;
        best = t < best ? t : best;
        worst = t > worst ? t : worst;
        disp_stop(&d, SIGKILL);
    }
    recovered_line(d.log, recovered, sizeof recovered);
    printf("  %-12s restart to serving: best %.3f s, worst %.3f s of 3 (%s)\n", "", best, worst,
           recovered);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    double seconds = 5;
    int workers = 8, depth = 64;
    uint64_t changes = 1000000;
    bool no_snapshot_baseline = false;
    char bin[PATH_MAX] = "", root[PATH_MAX] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-snapshot-baseline") == 0) {
            no_snapshot_baseline = true;
            continue;
        }
        if (!v)
            die("usage: see the comment at the top of bench/bench_journal.c");
        i++;
        if (strcmp(a, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(a, "--workers") == 0)
            workers = atoi(v);
        else if (strcmp(a, "--depth") == 0)
            depth = atoi(v);
        else if (strcmp(a, "--changes") == 0)
            changes = strtoull(v, NULL, 10);
        else if (strcmp(a, "--dispatcher") == 0)
            snprintf(bin, sizeof bin, "%s", v);
        else if (strcmp(a, "--dir") == 0)
            snprintf(root, sizeof root, "%s", v);
        else
            die("unknown option %s", a);
    }
    if (workers < 1 || workers > MAX_WORKERS || depth < 1 || seconds <= 0)
        die("bad --workers, --depth or --seconds");
    if (!bin[0]) {
        char self[PATH_MAX - 32];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            die("cannot find this binary's directory; give --dispatcher");
        self[n] = '\0';
        *strrchr(self, '/') = '\0';
        snprintf(bin, sizeof bin, "%s/../bin/sluice-dispatcher", self);
    }
    bool own_root = !root[0];
    if (own_root) {
        snprintf(root, sizeof root, "/tmp/bench-journal-XXXXXX");
        if (!mkdtemp(root))
            die("mkdtemp: %s", strerror(errno));
    }
    signal(SIGPIPE, SIG_IGN);

    printf("bench_journal: distributed_epoch split leasing, %d workers x %d requests in flight, "
           "%.0f s each, work dirs under %s\n",
           workers, depth, seconds, root);
    double group = throughput(bin, root, "group", false, seconds, workers, depth);
    double single = throughput(bin, root, "per-update", true, seconds, workers, depth);
    printf("group commit / one transaction per update: %.1fx (target >= 50x)\n\n", group / single);
    fflush(stdout);

    printf("restart after %" PRIu64 " state changes:\n", changes);
    restart_time(bin, root, "snapshots", "10000", changes, workers, depth);
    if (no_snapshot_baseline)
        restart_time(bin, root, "no-snapshot", "1000000000000", changes, workers, depth);
    if (own_root)
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
