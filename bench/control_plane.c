/* control_plane: the dispatcher's control plane under a large simulated cluster.
 *
 * One real fault-tolerant dispatcher process (build/bin/sluice-dispatcher, with an auth token,
 * so every connection does the real handshake) is driven by simulated workers and clients that
 * speak the real protocol over real TCP connections, on one libuv loop in each of --sim-procs
 * simulator processes (default 1; see struct part):
 *
 *   - each worker heartbeats at the interval the dispatcher tells it (WorkerHeartbeatReply
 *     .heartbeat_ms) with its worker_key and the progress of its tasks, takes the tasks the
 *     replies assign, and leases splits for all its tasks with one GetSplitsBatch of numbered
 *     requests, as sluice-worker does when its tasks consume at like rates (--one-by-one: each
 *     task with GetSplits requests of its own, on its own timer); it "produces" the leases
 *     --split-ms after receiving them, hands the splits to the jobs' clients and asks for more,
 *     reporting them in `finished`;
 *   - each client joins one of --jobs shared distributed_epoch jobs of one dataset
 *     (range(10^12), small splits, so leasing never runs dry), heartbeats at the interval the
 *     dispatcher tells it, and reports the splits handed to it as received in full (one
 *     SplitCoverage each, repeated until the reply lists them in finished_seqs), as a reader
 *     does.
 *
 * It measures per request, in the simulator, the latency of worker heartbeats, client
 * heartbeats and split leases (GetSplits request to reply); the dispatcher's CPU share
 * (utime + stime from /proc/PID/stat over the measured window) and its VmRSS / VmHWM; the time
 * one GET /metrics takes (the dispatcher renders on its loop, which stalls meanwhile); the bytes
 * it journals per second (sluice_journal_bytes_total from /metrics); and the time from a
 * SIGKILL to serving again on the same work dir (start until a client heartbeat is answered).
 *
 * The same measurement runs first at a tenth of the workers and clients (the baseline, with the
 * same number of jobs, so each worker carries the same number of tasks) and then at full size;
 * it prints both, their ratios, and the targets. Exits 1 on any protocol error or on a request
 * that got no reply; timings never make it fail.
 *
 * With --raft it measures instead what Raft costs: the same load at full size first against the
 * single dispatcher (LMDB journal; the baseline) and then against a group of 3 replicas on
 * 127.0.0.1 (--raft-id, free Raft ports, the same token and arguments), started together; the
 * load starts once one of them answers GET /readyz with 200, and the simulated peers call the
 * list of the replicas' addresses with that leader first, so a leader change mid-run is followed
 * (and reported) rather than failed. The CPU, memory and counters are the leader's; the other
 * replicas' CPU is printed beside them. It prints both, their ratios, and a summary: split
 * leases per second, lease p50/p99, worker heartbeat p99, the leader's CPU and RSS, and whether
 * the group leases at least half as many a second as the single dispatcher. In place of the
 * restart it times the leader's failover: SIGKILL of the leader until another replica's
 * GET /readyz answers 200. Every dispatcher it starts dies with it, however it ends.
 *
 *   control_plane [--seconds N] [--workers N] [--clients N] [--jobs N] [--split-ms N]
 *                 [--lease N] [--split-size N] [--baseline-workers N]
 *                 [--baseline-clients N] [--no-baseline] [--dispatcher PATH]
 *                 [--work-root DIR] [--dispatcher-arg ARG]... [--pin]
 *                 [--raft] [--replica-arg ARG]... [--sim-procs N]
 *                 [--probe N] [--no-probe] [--one-by-one]
 *
 * Defaults: 60 s, 1000 workers, 100 clients, 10 jobs, leases of 4 splits of 1000 elements
 * produced in 2000 ms (each lease in 75 % to 125 % of --split-ms, uniformly); the baseline at 100
 * workers and 10 clients. The dispatcher's work dir is made under --work-root (default $TMPDIR,
 * else /tmp): put it on the disk a production dispatcher journals to, since every journaled request
 * waits for that disk's fsync (the share of slow commits is printed). --dispatcher-arg passes one
 * more argument to the dispatcher. --pin runs the dispatcher and the simulator on CPUs of their
 * own (half each): on a machine with few cores the two otherwise queue for the same CPUs, and the
 * latencies measure that queue as much as the dispatcher (with --raft, the replicas share the
 * dispatcher's half). --replica-arg passes one more argument to the replicas only (e.g.
 * --raft-election-timeout-ms 500); --dispatcher-arg goes to every dispatcher, replicas included.
 * --sim-procs N splits the simulated peers over N processes (at most one per client of every job,
 * so that each has readers of every job): one loop simulating thousands of peers falls behind
 * (its lag is printed), and the latencies it measures then include its own delays. --probe N
 * (default 10) moves N of the workers and one client of every job into a process of their own
 * (not with fewer than 10 N workers or 2 clients a job), whose latencies are printed apart (the
 * probe's rows): what a peer alone on its loop sees of the dispatcher under the same load.
 * --no-probe keeps every peer in the simulator processes.
 *
 * Besides the simulator's own timings, it prints what the dispatcher measured of the same calls
 * (sluice_request_seconds, from a request's arrival to its reply, over the counters' window),
 * which leaves out the simulator's delays but also the time a request waits in the socket before
 * the dispatcher's loop reads it. */
#include "common/rpc_client.h"
#include "common/security.h"
#include "pipeline/def.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include "lib/net.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define PROG "control_plane"
#define CALL_TIMEOUT_MS 10000
#define KEY_LEN 16
#define MAX_COVERAGE_PER_HB 4096
#define DATASET_ID "control-plane-bench"
#define PIPELINE "range(1000000000000)"
/* Simulated peers connect at most this many a second on average (see ramp_ms). */
#define RAMP_PER_S 500

/* ---- options and results --------------------------------------------------------------------- */

#define MAX_DISPATCHER_ARGS 16
/* --sim-procs: at most this many simulator processes. */
#define MAX_SIM_PROCS 16
/* --raft: the replicas of the group, on 127.0.0.1. */
#define RAFT_REPLICAS 3
#define RAFT_REPLICAS_TEXT "3"

struct config {
    unsigned seconds, workers, clients, jobs, split_ms, lease, split_size;
    /* --one-by-one: each task leases with a GetSplits of its own, on its own timer, rather than
     * each worker for all its tasks in one GetSplitsBatch, as sluice-worker does. */
    bool one_by_one;
    unsigned sim_procs; /* --sim-procs: processes the simulated peers are split over */
    unsigned probe;     /* --probe: workers in the probe process (0: none; see struct part) */
    bool probe_asked;   /* --probe given: say so where there is too little for one */
    /* --pin: the dispatcher runs on dispatcher_cpus, this process on the others it may use. */
    bool pin;
    cpu_set_t dispatcher_cpus;
    const char *dispatcher;
    /* --dispatcher-arg: more arguments for the dispatcher (e.g. --snapshot-every 100000), for
     * each replica too. */
    const char *dargs[MAX_DISPATCHER_ARGS];
    unsigned ndargs;
    /* --raft: the same load against the single dispatcher and a group of RAFT_REPLICAS. */
    bool raft;
    /* --replica-arg: more arguments for the replicas only (e.g. --raft-election-timeout-ms). */
    const char *rargs[MAX_DISPATCHER_ARGS];
    unsigned nrargs;
};

struct lat {
    double *v; /* milliseconds */
    size_t n, cap;
};

struct figures {
    unsigned workers, clients, jobs, tasks;
    double seconds;
    struct lat worker_hb, client_hb, splits;
    /* The same calls of the probe process's peers (see struct part); none without one. */
    struct lat probe[3];
    double probe_lag_max_ms;
    /* The same calls timed inside the dispatcher (sluice_request_seconds, arrival to reply),
     * over the counters' window: p50 and p99 in ms, in the order of hist_calls. */
    double inside_p50[3], inside_p99[3];
    uint64_t errors, missing, skipped_hb, task_lists;
    double sim_lag_max_ms;     /* the simulator's loop: the latest a 20 ms timer fired */
    uint64_t sim_lag_over_5ms; /* times it fired more than 5 ms late */
    double cpu_share;          /* of one core */
    double rss_mb, hwm_mb;
    double scrape_ms; /* one GET /metrics, request to the body's end: the dispatcher's render */
    double journal_bytes_per_s, updates_per_s;
    double splits_per_s; /* finished (confirmed to clients) */
    double commits_per_s, commit_mean_ms;
    double commit_slow_share; /* commits over 3.2 ms (a histogram bucket bound) */
    double sim_cpu_share;     /* this process, the simulator */
    double restart_s;         /* a single dispatcher: its restart; a group: the leader's failover */
    bool have_journal_bytes;
    /* A group of replicas: the CPU share of the replicas other than the leader, together; the
     * Raft entries the leader committed per second; and the leader changes its replicas saw
     * during the measurement (the figures of one leader need none). */
    bool raft;
    double followers_cpu_share;
    double raft_entries_per_s;
    double leader_changes;
};

/* The dispatchers running now (one, or the replicas of a group), killed if the bench exits
 * early: die or a failed wait (atexit), SIGINT, SIGTERM or SIGHUP (on_signal). A bench killed
 * outright leaves none behind either: each dies with it (PR_SET_PDEATHSIG). */
static volatile pid_t running[RAFT_REPLICAS];
/* Set in a simulator process (see struct part): its exit leaves the dispatchers to the parent. */
static volatile bool in_part;

static void running_add(pid_t pid)
{
    for (int i = 0; i < RAFT_REPLICAS; i++) {
        if (running[i] <= 0) {
            running[i] = pid;
            return;
        }
    }
    assert(!"more dispatchers than RAFT_REPLICAS");
}

static void running_remove(pid_t pid)
{
    for (int i = 0; i < RAFT_REPLICAS; i++) {
        if (running[i] == pid)
            running[i] = 0;
    }
}

static void kill_running_dispatchers(void)
{
    if (in_part)
        return;
    for (int i = 0; i < RAFT_REPLICAS; i++) {
        pid_t pid = running[i];
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            running[i] = 0;
        }
    }
}

/* Only kill(2) and raise(2) here: both are async-signal-safe. */
static void on_signal(int sig)
{
    for (int i = 0; i < RAFT_REPLICAS && !in_part; i++) {
        if (running[i] > 0)
            kill(running[i], SIGKILL);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, PROG ": %s: %s\n", what, why);
    exit(1);
}

static void lat_add(struct lat *l, double ms)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1024;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v)
            die("latency", "out of memory");
    }
    l->v[l->n++] = ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double lat_q(struct lat *l, double q)
{
    if (l->n == 0)
        return NAN;
    qsort(l->v, l->n, sizeof *l->v, cmp_double);
    size_t i = (size_t)ceil(q * (double)l->n);
    if (i > 0)
        i--;
    if (i >= l->n)
        i = l->n - 1;
    return l->v[i];
}

/* ---- the simulation ------------------------------------------------------------------------- */

enum kind { K_WORKER_HB, K_CLIENT_HB, K_SPLITS, K_OTHER };

struct sim;
struct job;

struct seqs {
    uint64_t *v;
    size_t n, cap;
};

static void seqs_push(struct seqs *s, uint64_t x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v)
            die("seqs", "out of memory");
    }
    s->v[s->n++] = x;
}

struct sclient {
    struct sim *sim;
    unsigned index;
    struct rpc_client *c;
    uv_timer_t hb;
    bool inflight, joined, stopped;
    uint64_t client_id, iteration_id;
    uint8_t key[KEY_LEN];
    size_t key_len;
    uint32_t hb_ms;
    uint64_t tasks_digest; /* of the task list last received, sent back as a reader does */
    struct job *job;
    struct seqs pending; /* handed to this client, not yet confirmed finished */
};

struct job {
    uint64_t iteration_id;
    struct sclient **clients;
    size_t nclients, rr;
    struct seqs orphans; /* produced before any client of the job was known */
};

struct sworker;

struct wtask {
    struct sworker *w;
    struct sim *sim;
    uint64_t id, iteration_id;
    uint64_t request_seq;
    struct seqs held, finished;
    uv_timer_t timer;
    bool inflight, removed, end;
};

struct sworker {
    struct sim *sim;
    unsigned index;
    struct rpc_client *c;
    uv_timer_t hb;
    bool inflight, registered, stopped;
    uint64_t worker_id;
    uint8_t key[KEY_LEN];
    char address[64];
    uint32_t hb_ms;
    struct wtask **tasks;
    size_t ntasks, cap;
    /* Batched leasing (not --one-by-one): the worker's tasks produce their leases together, on
     * this timer, and ask for the next ones in one GetSplitsBatch. */
    uv_timer_t lease;
    bool lease_inflight;
};

struct sim {
    uv_loop_t loop;
    const struct config *cfg;
    struct security_ctx *sec;
    char addr[RAFT_REPLICAS * 64]; /* one address, or the replicas' list */
    unsigned nworkers, nclients, njobs;
    struct sworker *workers;
    struct sclient *clients;
    struct job *jobs;
    size_t njobs_known;
    bool measuring, stopping;
    uint64_t outstanding;
    uint64_t errors, skipped_hb, splits_confirmed, tasks;
    uint64_t task_lists; /* client heartbeat replies that carried the task list */
    struct lat lat[3];
    int printed_errors;
    uint64_t retries; /* joins retried after their connection failed while the clients connected */
};

struct call {
    struct sim *sim;
    enum kind kind;
    uint64_t start_ns;
    bool measured;
    bool retried; /* a failure is retried by done: counted in sim->retries, not an error */
    void *owner;
    void (*done)(struct call *call, int status, const char *msg, const Sluice__Envelope *reply);
};

static void call_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    struct call *call = user;
    struct sim *sim = call->sim;
    sim->outstanding--;
    if (call->measured && sim->measuring && call->kind != K_OTHER)
        lat_add(&sim->lat[call->kind], (double)(uv_hrtime() - call->start_ns) / 1e6);
    if (status < 0 && call->retried) {
        sim->retries++;
    } else if (status < 0) {
        sim->errors++;
        if (sim->printed_errors++ < 5)
            fprintf(stderr, PROG ": request failed (%d): %s\n", status, msg ? msg : "");
    }
    call->done(call, status, msg, reply);
    free(call);
}

static int send_call(struct sim *sim, struct rpc_client *c, Sluice__Envelope *env, enum kind kind,
                     void *owner,
                     void (*done)(struct call *, int, const char *, const Sluice__Envelope *),
                     bool retried)
{
    struct call *call = calloc(1, sizeof *call);
    if (!call)
        die("call", "out of memory");
    *call =
        (struct call){.sim = sim, .kind = kind, .owner = owner, .done = done, .retried = retried};
    call->start_ns = uv_hrtime();
    call->measured = sim->measuring;
    int rc = rpc_call(c, env, CALL_TIMEOUT_MS, call_reply, call);
    if (rc < 0) {
        free(call);
        sim->errors++;
        fprintf(stderr, PROG ": rpc_call: %s\n", sluice_strerror(rc));
        return rc;
    }
    sim->outstanding++;
    return 0;
}

static struct job *job_for(struct sim *sim, uint64_t iteration_id)
{
    for (size_t i = 0; i < sim->njobs_known; i++) {
        if (sim->jobs[i].iteration_id == iteration_id)
            return &sim->jobs[i];
    }
    if (sim->njobs_known == sim->njobs + sim->nclients)
        die("jobs", "more iterations than jobs");
    struct job *j = &sim->jobs[sim->njobs_known++];
    memset(j, 0, sizeof *j);
    j->iteration_id = iteration_id;
    j->clients = calloc(sim->nclients, sizeof *j->clients);
    if (!j->clients)
        die("jobs", "out of memory");
    return j;
}

/* Hands a produced split to the next client of its job, round robin. */
static void deliver(struct job *j, uint64_t seq)
{
    if (j->nclients == 0) {
        seqs_push(&j->orphans, seq);
        return;
    }
    struct sclient *cl = j->clients[j->rr++ % j->nclients];
    seqs_push(&cl->pending, seq);
}

/* ---- simulated tasks: split leasing ---- */

static void task_request(struct wtask *t);
static void task_timer(uv_timer_t *timer);

static void task_splits_done(struct call *call, int status, const char *msg,
                             const Sluice__Envelope *reply)
{
    (void)msg;
    struct wtask *t = call->owner;
    t->inflight = false;
    if (status < 0 || t->sim->stopping || t->removed)
        return;
    const Sluice__GetSplitsReply *r = reply->get_splits_reply;
    if (!r) {
        t->sim->errors++;
        return;
    }
    t->finished.n = 0; /* reported and acknowledged */
    for (size_t i = 0; i < r->n_seqs; i++)
        seqs_push(&t->held, r->seqs[i]);
    t->end = r->end_of_splits;
    if (t->end && t->held.n == 0)
        return;
    /* Produced split_ms (give or take a quarter, uniformly: production times vary) after the
     * lease arrives; an empty grant is asked again after a pause. Without the spread every task
     * whose reply came in one burst would ask again in the same millisecond, and the bursts
     * would feed themselves: a convoy of the simulation, not of the dispatcher. */
    unsigned ms = t->sim->cfg->split_ms;
    if (ms >= 4)
        ms = ms - ms / 4 + (unsigned)rand() % (ms / 2 + 1);
    uv_timer_start(&t->timer, task_timer, t->held.n ? ms : 200, 0);
}

static void task_request(struct wtask *t)
{
    struct sim *sim = t->sim;
    if (t->inflight || t->removed || sim->stopping || t->w->stopped)
        return;
    Sluice__GetSplitsRequest req = SLUICE__GET_SPLITS_REQUEST__INIT;
    req.task_id = t->id;
    req.max_splits = sim->cfg->lease;
    req.request_seq = ++t->request_seq;
    req.n_finished = t->finished.n;
    req.finished = t->finished.v;
    req.worker_key.data = t->w->key;
    req.worker_key.len = KEY_LEN;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS;
    env.get_splits = &req;
    if (send_call(sim, t->w->c, &env, K_SPLITS, t, task_splits_done, false) == 0)
        t->inflight = true;
}

static void task_timer(uv_timer_t *timer)
{
    struct wtask *t = timer->data;
    if (t->removed || t->sim->stopping)
        return;
    /* The held splits are produced: their elements go to the job's readers. */
    struct job *j = job_for(t->sim, t->iteration_id);
    for (size_t i = 0; i < t->held.n; i++) {
        deliver(j, t->held.v[i]);
        seqs_push(&t->finished, t->held.v[i]);
    }
    t->held.n = 0;
    if (!t->end)
        task_request(t);
}

/* Batched leasing: the steady state of a worker whose tasks consume at like rates, where one
 * task's request at its low-water mark takes the others' (topped up) along. */
static void worker_lease_timer(uv_timer_t *timer);

static void worker_batch_done(struct call *call, int status, const char *msg,
                              const Sluice__Envelope *reply)
{
    (void)msg;
    struct sworker *w = call->owner;
    struct sim *sim = w->sim;
    w->lease_inflight = false;
    if (status < 0 || sim->stopping || w->stopped)
        return;
    const Sluice__GetSplitsBatchReply *r = reply->get_splits_batch_reply;
    if (!r) {
        sim->errors++;
        return;
    }
    /* The results answer the tasks asked, in order: those not removed and not ended then. */
    size_t k = 0, held = 0, asking = 0;
    for (size_t i = 0; i < w->ntasks; i++) {
        struct wtask *t = w->tasks[i];
        if (!t->inflight)
            continue;
        t->inflight = false;
        const Sluice__GetSplitsResult *res = k < r->n_results ? r->results[k] : NULL;
        k++;
        if (!res || res->code != 0 || !res->reply) {
            /* A task removed meanwhile is refused; any other refusal is an error. */
            if (!t->removed) {
                sim->errors++;
                if (sim->printed_errors++ < 5)
                    fprintf(stderr, PROG ": task %" PRIu64 " refused (%d): %s\n", t->id,
                            res ? res->code : 0, res && res->message ? res->message : "");
            }
            continue;
        }
        t->finished.n = 0;
        for (size_t j = 0; j < res->reply->n_seqs; j++)
            seqs_push(&t->held, res->reply->seqs[j]);
        t->end = res->reply->end_of_splits;
        held += t->held.n;
        asking += !t->end;
    }
    if (k != r->n_results)
        sim->errors++;
    if (asking == 0)
        return;
    unsigned ms = sim->cfg->split_ms;
    if (ms >= 4)
        ms = ms - ms / 4 + (unsigned)rand() % (ms / 2 + 1);
    uv_timer_start(&w->lease, worker_lease_timer, held ? ms : 200, 0);
}

static void worker_lease_timer(uv_timer_t *timer)
{
    struct sworker *w = timer->data;
    struct sim *sim = w->sim;
    if (sim->stopping || w->stopped || w->lease_inflight)
        return;
    Sluice__GetSplitsRequest *reqs = calloc(w->ntasks ? w->ntasks : 1, sizeof *reqs);
    Sluice__GetSplitsRequest **ptrs = calloc(w->ntasks ? w->ntasks : 1, sizeof *ptrs);
    if (!reqs || !ptrs)
        die("lease", "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < w->ntasks; i++) {
        struct wtask *t = w->tasks[i];
        if (t->removed || t->end)
            continue;
        /* The held splits are produced: their elements go to the job's readers. */
        struct job *j = job_for(sim, t->iteration_id);
        for (size_t k = 0; k < t->held.n; k++) {
            deliver(j, t->held.v[k]);
            seqs_push(&t->finished, t->held.v[k]);
        }
        t->held.n = 0;
        sluice__get_splits_request__init(&reqs[n]);
        reqs[n].task_id = t->id;
        reqs[n].max_splits = sim->cfg->lease;
        reqs[n].request_seq = ++t->request_seq;
        reqs[n].n_finished = t->finished.n;
        reqs[n].finished = t->finished.v;
        reqs[n].worker_key.data = w->key;
        reqs[n].worker_key.len = KEY_LEN;
        ptrs[n] = &reqs[n];
        t->inflight = true;
        n++;
    }
    if (n > 0) {
        Sluice__GetSplitsBatchRequest req = SLUICE__GET_SPLITS_BATCH_REQUEST__INIT;
        req.n_requests = n;
        req.requests = ptrs;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_SPLITS_BATCH;
        env.get_splits_batch = &req;
        if (send_call(sim, w->c, &env, K_SPLITS, w, worker_batch_done, false) == 0) {
            w->lease_inflight = true;
        } else {
            for (size_t i = 0; i < w->ntasks; i++)
                w->tasks[i]->inflight = false;
        }
    }
    free(reqs);
    free(ptrs);
}

/* New tasks lease at once (with the worker's others, if no batch is on its way). */
static void worker_lease_kick(struct sworker *w)
{
    if (!w->lease_inflight && !uv_is_active((uv_handle_t *)&w->lease))
        uv_timer_start(&w->lease, worker_lease_timer, 0, 0);
}

/* ---- simulated workers ---- */

static void worker_hb_done(struct call *call, int status, const char *msg,
                           const Sluice__Envelope *reply)
{
    (void)msg;
    struct sworker *w = call->owner;
    struct sim *sim = w->sim;
    w->inflight = false;
    if (status < 0)
        return;
    const Sluice__WorkerHeartbeatReply *r = reply->worker_heartbeat_reply;
    if (!r) {
        sim->errors++;
        return;
    }
    w->registered = true;
    w->worker_id = r->worker_id;
    if (r->heartbeat_ms && r->heartbeat_ms != w->hb_ms) {
        w->hb_ms = r->heartbeat_ms;
        uv_timer_set_repeat(&w->hb, w->hb_ms);
    }
    for (size_t i = 0; i < r->n_removed_task_ids; i++) {
        for (size_t k = 0; k < w->ntasks; k++) {
            if (w->tasks[k]->id == r->removed_task_ids[i] && !w->tasks[k]->removed) {
                w->tasks[k]->removed = true;
                uv_timer_stop(&w->tasks[k]->timer);
            }
        }
    }
    if (sim->stopping)
        return;
    for (size_t i = 0; i < r->n_new_tasks; i++) {
        const Sluice__TaskDef *def = r->new_tasks[i];
        if (!def)
            continue;
        bool known = false;
        for (size_t k = 0; k < w->ntasks && !known; k++)
            known = w->tasks[k]->id == def->task_id;
        if (known)
            continue;
        if (def->mode != SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH)
            die("task", "not a distributed_epoch task");
        struct wtask *t = calloc(1, sizeof *t);
        if (!t)
            die("task", "out of memory");
        t->w = w;
        t->sim = sim;
        t->id = def->task_id;
        t->iteration_id = def->iteration_id;
        uv_timer_init(&sim->loop, &t->timer);
        t->timer.data = t;
        if (w->ntasks == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 8;
            w->tasks = realloc(w->tasks, w->cap * sizeof *w->tasks);
            if (!w->tasks)
                die("task", "out of memory");
        }
        w->tasks[w->ntasks++] = t;
        sim->tasks++;
        if (sim->cfg->one_by_one)
            task_request(t);
        else
            worker_lease_kick(w);
    }
}

static void worker_heartbeat(uv_timer_t *timer)
{
    struct sworker *w = timer->data;
    struct sim *sim = w->sim;
    if (sim->stopping || w->stopped)
        return;
    if (w->inflight) {
        if (sim->measuring)
            sim->skipped_hb++;
        return;
    }
    Sluice__TaskProgress *progress = calloc(w->ntasks ? w->ntasks : 1, sizeof *progress);
    Sluice__TaskProgress **ptrs = calloc(w->ntasks ? w->ntasks : 1, sizeof *ptrs);
    if (!progress || !ptrs)
        die("heartbeat", "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < w->ntasks; i++) {
        const struct wtask *t = w->tasks[i];
        if (t->removed)
            continue;
        Sluice__TaskProgress init = SLUICE__TASK_PROGRESS__INIT;
        progress[n] = init;
        progress[n].task_id = t->id;
        progress[n].elements_per_second = 1000.0;
        progress[n].buffered = 16;
        ptrs[n] = &progress[n];
        n++;
    }
    Sluice__WorkerHeartbeatRequest req = SLUICE__WORKER_HEARTBEAT_REQUEST__INIT;
    req.address = w->address;
    req.n_tasks = n;
    req.tasks = ptrs;
    req.worker_key.data = w->key;
    req.worker_key.len = KEY_LEN;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_WORKER_HEARTBEAT;
    env.worker_heartbeat = &req;
    if (send_call(sim, w->c, &env, K_WORKER_HB, w, worker_hb_done, !w->registered) == 0)
        w->inflight = true;
    free(progress);
    free(ptrs);
}

/* ---- simulated clients ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void client_hb_done(struct call *call, int status, const char *msg,
                           const Sluice__Envelope *reply)
{
    (void)msg;
    struct sclient *cl = call->owner;
    struct sim *sim = cl->sim;
    cl->inflight = false;
    if (status < 0)
        return;
    const Sluice__ClientHeartbeatReply *r = reply->client_heartbeat_reply;
    if (!r) {
        sim->errors++;
        return;
    }
    if (r->heartbeat_ms && r->heartbeat_ms != cl->hb_ms) {
        cl->hb_ms = r->heartbeat_ms;
        uv_timer_set_repeat(&cl->hb, cl->hb_ms);
    }
    if (!r->tasks_unchanged)
        cl->tasks_digest = r->tasks_digest;
    if (sim->measuring)
        sim->task_lists += !r->tasks_unchanged;
    if (r->n_finished_seqs == 0 || cl->pending.n == 0)
        return;
    uint64_t *fin = malloc(r->n_finished_seqs * sizeof *fin);
    if (!fin)
        die("heartbeat", "out of memory");
    memcpy(fin, r->finished_seqs, r->n_finished_seqs * sizeof *fin);
    qsort(fin, r->n_finished_seqs, sizeof *fin, cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < cl->pending.n; i++) {
        uint64_t seq = cl->pending.v[i];
        if (bsearch(&seq, fin, r->n_finished_seqs, sizeof *fin, cmp_u64)) {
            if (sim->measuring)
                sim->splits_confirmed++;
            continue;
        }
        cl->pending.v[k++] = seq;
    }
    cl->pending.n = k;
    free(fin);
}

static void client_heartbeat(uv_timer_t *timer)
{
    struct sclient *cl = timer->data;
    struct sim *sim = cl->sim;
    if (sim->stopping || cl->stopped || !cl->joined)
        return;
    if (cl->inflight) {
        if (sim->measuring)
            sim->skipped_hb++;
        return;
    }
    size_t n = cl->pending.n < MAX_COVERAGE_PER_HB ? cl->pending.n : MAX_COVERAGE_PER_HB;
    Sluice__SplitCoverage *cov = calloc(n ? n : 1, sizeof *cov);
    Sluice__SplitCoverage **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    uint64_t bounds[2] = {0, sim->cfg->split_size};
    if (!cov || !ptrs)
        die("heartbeat", "out of memory");
    for (size_t i = 0; i < n; i++) {
        Sluice__SplitCoverage init = SLUICE__SPLIT_COVERAGE__INIT;
        cov[i] = init;
        cov[i].seq = cl->pending.v[i];
        cov[i].ended = true;
        cov[i].total = sim->cfg->split_size;
        cov[i].n_bounds = 2;
        cov[i].bounds = bounds;
        ptrs[i] = &cov[i];
    }
    Sluice__ClientHeartbeatRequest req = SLUICE__CLIENT_HEARTBEAT_REQUEST__INIT;
    req.client_id = cl->client_id;
    req.iteration_id = cl->iteration_id;
    req.elements_per_second = 1000.0;
    req.n_splits = n;
    req.splits = ptrs;
    req.client_key.data = cl->key;
    req.client_key.len = cl->key_len;
    req.tasks_digest = cl->tasks_digest;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT;
    env.client_heartbeat = &req;
    if (send_call(sim, cl->c, &env, K_CLIENT_HB, cl, client_hb_done, false) == 0)
        cl->inflight = true;
    free(cov);
    free(ptrs);
}

static void client_join(struct sclient *cl);

static void client_join_timer(uv_timer_t *t)
{
    client_join(t->data);
}

static void client_job_done(struct call *call, int status, const char *msg,
                            const Sluice__Envelope *reply)
{
    (void)msg;
    struct sclient *cl = call->owner;
    struct sim *sim = cl->sim;
    if (status < 0) {
        /* The connection failed (from one address, a newcomer's handshake can displace this
         * one's): join again a little later, as a reader does. */
        uv_timer_start(&cl->hb, client_join_timer, 50 + (uint64_t)(rand() % 200), 0);
        return;
    }
    const Sluice__GetOrCreateJobReply *r = reply->get_or_create_job_reply;
    if (!r || r->client_key.len > KEY_LEN) {
        sim->errors++;
        return;
    }
    cl->client_id = r->client_id;
    cl->iteration_id = r->iteration_id;
    memcpy(cl->key, r->client_key.data, r->client_key.len);
    cl->key_len = r->client_key.len;
    cl->hb_ms = r->heartbeat_ms ? r->heartbeat_ms : 1000;
    cl->joined = true;
    struct job *j = job_for(sim, r->iteration_id);
    cl->job = j;
    j->clients[j->nclients++] = cl;
    for (size_t i = 0; i < j->orphans.n; i++)
        deliver(j, j->orphans.v[i]);
    j->orphans.n = 0;
    uv_timer_start(&cl->hb, client_heartbeat, (uint64_t)(rand() % cl->hb_ms) + 1, cl->hb_ms);
}

static void client_join(struct sclient *cl)
{
    char name[64];
    snprintf(name, sizeof name, "cp-job-%u", cl->index % cl->sim->njobs);
    Sluice__GetOrCreateJobRequest req = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    req.dataset_id = DATASET_ID;
    req.job_name = name;
    req.mode = SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &req;
    send_call(cl->sim, cl->c, &env, K_OTHER, cl, client_job_done, true);
}

static void register_done(struct call *call, int status, const char *msg,
                          const Sluice__Envelope *reply)
{
    (void)reply;
    if (status < 0)
        die("register dataset", msg);
    *(bool *)call->owner = true;
}

static void register_dataset(struct sim *sim, bool *done)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (pipe_parse(PIPELINE, &spec, err, sizeof err) < 0)
        die("pipeline", err);
    if (pipe_spec_encode(spec, &bytes, &len) < 0)
        die("pipeline", "cannot encode");
    Sluice__DatasetDef *def = sluice__dataset_def__unpack(NULL, len, bytes);
    if (!def)
        die("pipeline", "cannot decode");
    Sluice__RegisterDatasetRequest req = SLUICE__REGISTER_DATASET_REQUEST__INIT;
    req.dataset = def;
    req.dataset_id = DATASET_ID;
    req.split_size = sim->cfg->split_size;
    req.pipeline = PIPELINE;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_REGISTER_DATASET;
    env.register_dataset = &req;
    send_call(sim, sim->clients[0].c, &env, K_OTHER, done, register_done, false);
    sluice__dataset_def__free_unpacked(def, NULL);
    free(bytes);
    pipe_spec_free(spec);
}

/* ---- the dispatcher process ---------------------------------------------------------------- */

struct dproc {
    pid_t pid;
    int out; /* the read end of its stdout until its lines are read */
    char addr[128], metrics[128];
    char log[PATH_MAX + 16];
};

/* How to start one dispatcher process. */
struct dstart {
    const char *work_dir; /* its --work-dir; its stderr goes to WORK_DIR.log */
    const char *token;    /* the token file */
    unsigned max_conns;
    /* A replica: its id, its Raft address and the group's --raft-cluster list; 0 and NULL: a
     * single fault-tolerant dispatcher. */
    unsigned raft_id;
    const char *raft_address, *raft_cluster;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Forks and execs the dispatcher; its lines are read by dispatcher_wait_lines. */
static void dispatcher_spawn(struct dproc *p, const struct config *cfg, const struct dstart *ds)
{
    char conns[32], id[32];
    snprintf(p->log, sizeof p->log, "%s.log", ds->work_dir);
    snprintf(conns, sizeof conns, "%u", ds->max_conns);
    snprintf(id, sizeof id, "%u", ds->raft_id);
    int out[2];
    if (pipe(out) < 0)
        die("pipe", strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        die("fork", strerror(errno));
    if (pid == 0) {
        /* Dies with the bench, however the bench ends. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        dup2(out[1], 1);
        int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0)
            dup2(fd, 2);
        close(out[0]);
        close(out[1]);
        const char *argv[32 + 2 * MAX_DISPATCHER_ARGS] = {cfg->dispatcher,
                                                          "--fault-tolerant",
                                                          "--work-dir",
                                                          ds->work_dir,
                                                          "--port",
                                                          "0",
                                                          "--metrics-port",
                                                          "0",
                                                          "--auth-token-file",
                                                          ds->token,
                                                          "--max-connections",
                                                          conns,
                                                          "--log-level",
                                                          "warn"};
        if (cfg->pin && sched_setaffinity(0, sizeof cfg->dispatcher_cpus, &cfg->dispatcher_cpus))
            fprintf(stderr, PROG ": pinning the dispatcher: %s\n", strerror(errno));
        unsigned n = 14;
        if (ds->raft_id) {
            argv[n++] = "--raft-id";
            argv[n++] = id;
            argv[n++] = "--raft-address";
            argv[n++] = ds->raft_address;
            argv[n++] = "--raft-cluster";
            argv[n++] = ds->raft_cluster;
            for (unsigned i = 0; i < cfg->nrargs; i++)
                argv[n++] = cfg->rargs[i];
        }
        for (unsigned i = 0; i < cfg->ndargs; i++)
            argv[n++] = cfg->dargs[i];
        argv[n] = NULL;
        execv(cfg->dispatcher, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    p->pid = pid;
    p->out = out[0];
    running_add(pid);
    p->addr[0] = p->metrics[0] = '\0';
}

/* Waits for the "listening on" and "metrics on" lines of a spawned dispatcher; exits (killing
 * every dispatcher) if they do not come within 30 s. */
static void dispatcher_wait_lines(struct dproc *p)
{
    char buf[1024];
    size_t used = 0;
    double deadline = now_s() + 30;
    while ((!p->addr[0] || !p->metrics[0]) && now_s() < deadline && used < sizeof buf - 1) {
        ssize_t r = read(p->out, buf + used, sizeof buf - 1 - used);
        if (r <= 0)
            break;
        used += (size_t)r;
        buf[used] = '\0';
        char *l = strstr(buf, "listening on ");
        if (l && strchr(l, '\n'))
            sscanf(l + 13, "%127s", p->addr);
        char *m = strstr(buf, "metrics on ");
        if (m && strchr(m, '\n'))
            sscanf(m + 11, "%127s", p->metrics);
    }
    close(p->out);
    p->out = -1;
    if (!p->addr[0] || !p->metrics[0]) {
        fprintf(stderr, PROG ": dispatcher did not start; its log is %s\n", p->log);
        exit(1);
    }
}

/* Starts the dispatcher and waits for its "listening on" and "metrics on" lines. */
static void dispatcher_start(struct dproc *p, const struct config *cfg, const struct dstart *ds)
{
    dispatcher_spawn(p, cfg, ds);
    dispatcher_wait_lines(p);
}

static void dispatcher_kill(struct dproc *p, int sig)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, sig);
    waitpid(p->pid, NULL, 0);
    running_remove(p->pid);
    p->pid = 0;
}

/* GET path from the HTTP server at addr ("HOST:PORT"), with the token when token_text is not
 * NULL: the body (malloc'd) and the status in *status, or NULL when no reply came (within 10 s,
 * or timeout_ms when not 0). */
static char *http_get(const char *addr, const char *path, const char *token_text, int timeout_ms,
                      int *status)
{
    char host[64];
    int port = 0;
    *status = 0;
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return NULL;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    port = atoi(colon + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    struct timeval tv = {.tv_sec = timeout_ms ? timeout_ms / 1000 : 10,
                         .tv_usec = timeout_ms ? (timeout_ms % 1000) * 1000 : 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return NULL;
    }
    char req[1024], auth[256] = "";
    if (token_text)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token_text);
    int rl = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n",
                      path, addr, auth);
    if (write(fd, req, (size_t)rl) != rl) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, used = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            die("http", "out of memory");
        if (used + 4096 > cap) {
            cap *= 2;
            char *more = realloc(buf, cap);
            if (!more)
                die("http", "out of memory");
            buf = more;
        }
        ssize_t r = read(fd, buf + used, cap - used - 1);
        if (r <= 0)
            break;
        used += (size_t)r;
    }
    close(fd);
    buf[used] = '\0';
    if (sscanf(buf, "HTTP/%*s %d", status) != 1) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Whether the replica's GET /readyz answers 200: it leads and serves. */
static bool replica_ready(const struct dproc *p)
{
    int status;
    char *body = http_get(p->metrics, "/readyz", NULL, 500, &status);
    free(body);
    return body && status == 200;
}

/* The dispatchers of one measurement: one single dispatcher, or RAFT_REPLICAS replicas of which
 * procs[leader] served when the load started. */
struct group {
    struct dproc procs[RAFT_REPLICAS];
    int n, leader;
    /* The address the simulated peers call: the dispatcher's, or the replicas' list with the
     * leader first (rpc_client follows a "not the leader" to the leader it names). */
    char addr[RAFT_REPLICAS * 64];
};

/* Starts the single dispatcher on WORK_ROOT/TAG, or with raft the replicas on WORK_ROOT/TAG-N,
 * and with raft waits (at most 60 s) until one of them serves. */
static void group_start(struct group *g, const struct config *cfg, bool raft, const char *root,
                        const char *tag, const char *token, unsigned max_conns)
{
    char dirs[RAFT_REPLICAS][PATH_MAX], addrs[RAFT_REPLICAS][64], cluster[RAFT_REPLICAS * 80];
    memset(g, 0, sizeof *g);
    g->n = raft ? RAFT_REPLICAS : 1;
    int ports[RAFT_REPLICAS];
    size_t cl = 0;
    if (raft) {
        /* Below the ephemeral range (tests/lib/net.h), so no connection takes one meanwhile. */
        if (free_ports(ports, g->n) != 0)
            die("free ports", "none found below the ephemeral range");
        for (int i = 0; i < g->n; i++) {
            snprintf(addrs[i], sizeof addrs[i], "127.0.0.1:%d", ports[i]);
            cl += (size_t)snprintf(cluster + cl, sizeof cluster - cl, "%s%d=%s", i ? "," : "",
                                   i + 1, addrs[i]);
        }
    }
    for (int i = 0; i < g->n; i++) {
        if (raft)
            snprintf(dirs[i], sizeof dirs[i], "%s/%s-%d", root, tag, i + 1);
        else
            snprintf(dirs[i], sizeof dirs[i], "%s/%s", root, tag);
        if (mkdir(dirs[i], 0700) < 0)
            die(dirs[i], strerror(errno));
        struct dstart ds = {.work_dir = dirs[i], .token = token, .max_conns = max_conns};
        if (raft) {
            ds.raft_id = (unsigned)i + 1;
            ds.raft_address = addrs[i];
            ds.raft_cluster = cluster;
        }
        /* All before any is waited for: a new replica waits for its peers before it starts. */
        dispatcher_spawn(&g->procs[i], cfg, &ds);
    }
    for (int i = 0; i < g->n; i++)
        dispatcher_wait_lines(&g->procs[i]);
    if (!raft) {
        snprintf(g->addr, sizeof g->addr, "%s", g->procs[0].addr);
        return;
    }
    g->leader = -1;
    double deadline = now_s() + 60;
    while (g->leader < 0 && now_s() < deadline) {
        for (int i = 0; i < g->n && g->leader < 0; i++) {
            if (replica_ready(&g->procs[i]))
                g->leader = i;
        }
        if (g->leader < 0)
            usleep(50000);
    }
    if (g->leader < 0) {
        fprintf(stderr, PROG ": %s: no replica serves after 60 s; their logs are %s.log\n", tag,
                dirs[0]);
        exit(1);
    }
    size_t al = (size_t)snprintf(g->addr, sizeof g->addr, "%s", g->procs[g->leader].addr);
    for (int i = 0; i < g->n; i++) {
        if (i != g->leader)
            al += (size_t)snprintf(g->addr + al, sizeof g->addr - al, ",%s", g->procs[i].addr);
    }
}

/* The time from a SIGKILL of the leader until another replica's GET /readyz answers 200;
 * NAN if none does within 30 s. */
static double measure_failover(struct group *g)
{
    struct dproc *old = &g->procs[g->leader];
    double t0 = now_s();
    dispatcher_kill(old, SIGKILL);
    while (now_s() - t0 < 30) {
        for (int i = 0; i < g->n; i++) {
            if (i != g->leader && replica_ready(&g->procs[i]))
                return now_s() - t0;
        }
        usleep(10000);
    }
    fprintf(stderr, PROG ": failover: no replica serves 30 s after the leader was killed\n");
    return NAN;
}

static void group_kill(struct group *g)
{
    for (int i = 0; i < g->n; i++)
        dispatcher_kill(&g->procs[i], SIGKILL);
}

/* utime + stime of pid in seconds. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NAN;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return NAN;
    unsigned long ut = 0, st = 0;
    /* After the command: state (field 3) ... utime is field 14, stime 15. */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return NAN;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return NAN;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static double proc_status_mb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NAN;
    double v = NAN;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
            v = strtod(line + fl + 1, NULL) / 1024.0;
            break;
        }
    }
    fclose(f);
    return v;
}

/* The histogram bucket of journal commits up to 3.2 ms. */
/* Seconds between the first scrape and the start of the latency measurement. */
#define SETTLE_S 2

#define SLOW_COMMIT_BUCKET "sluice_journal_commit_seconds_bucket{le=\"0.0032\"}"

/* GET /metrics (with the token): the body (malloc'd), or NULL. */
static char *fetch_metrics(const char *addr, const char *token_text)
{
    int status;
    char *body = http_get(addr, "/metrics", token_text, 0, &status);
    if (body && status != 200) {
        free(body);
        return NULL;
    }
    return body;
}

/* The value of the sample `name` (labels included, as exposed) in a /metrics body; NAN if
 * absent. */
static double metric_value(const char *body, const char *name)
{
    size_t nl = strlen(name);
    for (const char *line = body; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, name, nl) == 0 && line[nl] == ' ')
            return strtod(line + nl + 1, NULL);
    }
    return NAN;
}

/* A histogram of the dispatcher's sluice_request_seconds for one call: its cumulative bucket
 * counts, as exposed. */
#define HIST_MAX 32
struct hist {
    double le[HIST_MAX], cum[HIST_MAX];
    int n;
};

/* The calls the simulator times, in its order (K_WORKER_HB, K_CLIENT_HB, K_SPLITS), by their
 * label in sluice_request_seconds. */
static const char *const hist_calls[3] = {"worker_heartbeat", "client_heartbeat", "get_splits"};

static void read_hist(const char *body, const char *call, struct hist *h)
{
    char prefix[128];
    int pl =
        snprintf(prefix, sizeof prefix, "sluice_request_seconds_bucket{call=\"%s\",le=\"", call);
    h->n = 0;
    for (const char *line = body; line && *line && h->n < HIST_MAX;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, prefix, (size_t)pl) != 0)
            continue;
        const char *le = line + pl;
        const char *close = strstr(le, "\"} ");
        if (!close)
            continue;
        h->le[h->n] = strncmp(le, "+Inf", 4) == 0 ? INFINITY : strtod(le, NULL);
        h->cum[h->n] = strtod(close + 3, NULL);
        h->n++;
    }
}

/* The q-quantile in ms of what b saw beyond a (a scrape earlier), interpolated linearly inside
 * its bucket; NAN without observations. Past the last finite bound: that bound. */
static double hist_q_ms(const struct hist *a, const struct hist *b, double q)
{
    if (b->n == 0 || a->n != b->n)
        return NAN;
    double total = b->cum[b->n - 1] - a->cum[a->n - 1];
    if (total <= 0)
        return NAN;
    double want = q * total, below = 0, lo = 0;
    for (int i = 0; i < b->n; i++) {
        double c = b->cum[i] - a->cum[i];
        if (c >= want) {
            if (isinf(b->le[i]))
                return lo * 1000;
            double in = c - below;
            double frac = in > 0 ? (want - below) / in : 1;
            return (lo + frac * (b->le[i] - lo)) * 1000;
        }
        below = c;
        lo = b->le[i];
    }
    return lo * 1000;
}

/* The dispatcher's counters the figures are computed from, read in one scrape. */
struct counters {
    double journal_bytes, updates, commit_seconds, commits, fast_commits;
    double raft_commit_index, leader_changes; /* NAN for a single dispatcher */
    struct hist requests[3];
};

static void read_counters(const char *addr, const char *token, struct counters *c)
{
    char *body = fetch_metrics(addr, token);
    c->journal_bytes = body ? metric_value(body, "sluice_journal_bytes_total") : NAN;
    c->updates = body ? metric_value(body, "sluice_updates_applied_total") : NAN;
    c->commit_seconds = body ? metric_value(body, "sluice_journal_commit_seconds_sum") : NAN;
    c->commits = body ? metric_value(body, "sluice_journal_commit_seconds_count") : NAN;
    c->fast_commits = body ? metric_value(body, SLOW_COMMIT_BUCKET) : NAN;
    c->raft_commit_index = body ? metric_value(body, "sluice_raft_commit_index") : NAN;
    c->leader_changes = body ? metric_value(body, "sluice_raft_leader_changes_total") : NAN;
    for (int i = 0; i < 3; i++) {
        c->requests[i].n = 0;
        if (body)
            read_hist(body, hist_calls[i], &c->requests[i]);
    }
    free(body);
}

/* ---- one measurement ------------------------------------------------------------------------ */

/* The simulator's own loop lag: a 20 ms timer that fires late says the simulator, not the
 * dispatcher, delayed the replies it measured meanwhile. */
static uint64_t lag_last_ns;
static double lag_max_ms;
static uint64_t lag_over_5ms;
static bool lag_measuring;

static void keepalive(uv_timer_t *t)
{
    (void)t;
    uint64_t now = uv_hrtime();
    if (lag_last_ns && lag_measuring) {
        double late = (double)(now - lag_last_ns) / 1e6 - 20.0;
        if (late > lag_max_ms)
            lag_max_ms = late;
        lag_over_5ms += late > 5.0;
    }
    lag_last_ns = now;
}

/* The window over which n peers make their first connection: one second, or n / RAMP_PER_S. */
static unsigned ramp_ms(unsigned n)
{
    unsigned ms = (unsigned)((uint64_t)n * 1000 / RAMP_PER_S);
    return ms < 1000 ? 1000 : ms;
}

static bool all_registered(struct sim *sim)
{
    for (unsigned i = 0; i < sim->nworkers; i++) {
        if (!sim->workers[i].registered)
            return false;
    }
    return true;
}

static bool all_joined(struct sim *sim)
{
    for (unsigned i = 0; i < sim->nclients; i++) {
        if (!sim->clients[i].joined)
            return false;
    }
    return true;
}

static void run_until(struct sim *sim, bool (*pred)(struct sim *), double seconds, const char *what)
{
    double deadline = now_s() + seconds;
    while (!(pred && pred(sim)) && now_s() < deadline)
        uv_run(&sim->loop, UV_RUN_ONCE);
    if (pred && !pred(sim)) {
        fprintf(stderr, PROG ": %s: not done after %.0f s\n", what, seconds);
        exit(1);
    }
}

static bool nothing_outstanding(struct sim *sim)
{
    return sim->outstanding == 0;
}

static void closed_cb(void *user)
{
    (*(unsigned *)user)--;
}

static void close_handle_cb(uv_handle_t *h)
{
    (void)h;
}

struct probe_result {
    bool done;
    int status;
    char msg[SLUICE_ERRMSG_SIZE];
};

static void probe_reply(int status, const char *msg, const Sluice__Envelope *reply, void *user)
{
    (void)reply;
    struct probe_result *r = user;
    r->done = true;
    r->status = status;
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
}

/* Time from starting the dispatcher on work_dir until it answers a client heartbeat of a client
 * from the state it recovered. */
static double measure_restart(const struct config *cfg, struct security_ctx *sec,
                              const char *work_dir, const char *token, unsigned max_conns,
                              const struct sclient *cl)
{
    double t0 = now_s();
    struct dproc p;
    struct dstart ds = {.work_dir = work_dir, .token = token, .max_conns = max_conns};
    dispatcher_start(&p, cfg, &ds);
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[SLUICE_ERRMSG_SIZE];
    struct rpc_client *c;
    struct rpc_client_opts o = {.address = p.addr,
                                .role = SLUICE__ROLE__ROLE_CLIENT,
                                .incarnation = rpc_new_incarnation(),
                                .sec = sec,
                                .backoff_min_ms = 5,
                                .backoff_max_ms = 50};
    if (rpc_client_new(&loop, &o, &c, err, sizeof err) < 0)
        die("restart", err);
    struct probe_result r = {0};
    Sluice__ClientHeartbeatRequest req = SLUICE__CLIENT_HEARTBEAT_REQUEST__INIT;
    req.client_id = cl->client_id;
    req.iteration_id = cl->iteration_id;
    req.client_key.data = (uint8_t *)cl->key;
    req.client_key.len = cl->key_len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_CLIENT_HEARTBEAT;
    env.client_heartbeat = &req;
    if (rpc_call(c, &env, 30000, probe_reply, &r) < 0)
        die("restart", "cannot call");
    while (!r.done)
        uv_run(&loop, UV_RUN_ONCE);
    double t = now_s() - t0;
    if (r.status < 0) {
        fprintf(stderr, PROG ": restart: heartbeat refused: %s\n", r.msg);
        t = NAN;
    }
    rpc_client_close(c, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    dispatcher_kill(&p, SIGKILL);
    return t;
}

/* ---- the simulator's processes -------------------------------------------------------------- */

/* The simulated peers run in --sim-procs processes (parts), each on a loop of its own with a share
 * of the workers and of the clients; the parent starts the dispatchers, steps the parts through
 * the phases of a measurement (one byte each way per step, over pipes), reads the dispatcher's
 * counters between them, and merges what the parts measured. A part keeps its loop running while
 * it waits for the next step. Every part has clients of every job, so the splits its workers
 * produce go to readers of the same part, as in one process.
 *
 * One more part, the probe, runs a few of the peers (--probe workers, default 10, and one client
 * of every job) out of the same totals, in a process of its own that is idle but for them: its
 * latencies are reported apart, as what a peer sees of the dispatcher under the full load. A
 * part that simulates thousands of peers on one loop takes each reply in its turn behind the
 * others that came at the same time (its lag is printed), and the latencies it measures include
 * that wait, which no real worker or reader, alone on its loop, has. The probe still shares the
 * machine's CPUs with the dispatcher and the simulator, and waits for one as a peer on a busy
 * host would. */
struct part {
    unsigned index;
    bool probe;
    unsigned w0, w1, c0, c1; /* its workers [w0, w1) and clients [c0, c1) of the whole */
    pid_t pid;
    int to, from; /* the parent's ends: steps to the part, steps done from it */
};

/* What a part sends back after the measurement, followed by its latencies (nlat[i] doubles each,
 * in the order of enum kind). */
struct part_result {
    uint64_t errors, skipped_hb, splits_confirmed, tasks, task_lists, outstanding, retries;
    uint64_t lag_over_5ms, nlat[3];
    double lag_max_ms, cpu_s, seconds;
    /* Part 0's first client, which probes the restarted dispatcher. */
    uint64_t client_id, iteration_id;
    uint8_t key[KEY_LEN];
    uint32_t key_len;
};

static void write_full(int fd, const void *buf, size_t len, const char *what)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die(what, n < 0 ? strerror(errno) : "short write");
        p += n;
        len -= (size_t)n;
    }
}

static void read_full(int fd, void *buf, size_t len, const char *what)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die(what, n < 0 ? strerror(errno) : "a simulator process ended early");
        p += n;
        len -= (size_t)n;
    }
}

/* In a part: the parent's next step has come (the pipe is non-blocking; run_until asks twice). */
static int part_in_fd = -1;
static bool step_ready;
static bool step_came(struct sim *sim)
{
    (void)sim;
    uint8_t b;
    ssize_t n = step_ready ? 0 : read(part_in_fd, &b, 1);
    if (n == 1)
        step_ready = true;
    else if (n == 0 && !step_ready)
        die("simulator process", "the parent went away");
    return step_ready;
}

/* In a part: runs the loop until the next step comes. */
static void part_wait_step(struct sim *sim, const char *what)
{
    step_ready = false;
    run_until(sim, step_came, 3600, what);
}

/* In a part: says the step is done and runs the loop until the next one comes. */
static void part_step(struct sim *sim, int out)
{
    uint8_t b = 1;
    write_full(out, &b, 1, "simulator process");
    part_wait_step(sim, "waiting for the next step");
}

/* One part of the simulation: its workers and clients against the dispatcher at addr. */
static void part_run(const struct config *cfg, const char *addr, const char *token_path,
                     unsigned nworkers_all, unsigned nclients_all, unsigned njobs,
                     const struct part *pt, int in, int out)
{
    char err[SLUICE_ERRMSG_SIZE];
    part_in_fd = in;
    struct sim *sim = calloc(1, sizeof *sim);
    if (!sim)
        die("sim", "out of memory");
    unsigned nworkers = pt->w1 - pt->w0, nclients = pt->c1 - pt->c0;
    sim->cfg = cfg;
    sim->nworkers = nworkers;
    sim->nclients = nclients;
    sim->njobs = njobs;
    snprintf(sim->addr, sizeof sim->addr, "%s", addr);
    uv_loop_init(&sim->loop);
    struct sluice_security_options so = {.auth_token_file = token_path};
    if (security_ctx_new(&so, SECURITY_CLIENT, &sim->sec, err, sizeof err) < 0)
        die("token", err);
    sim->workers = calloc(nworkers ? nworkers : 1, sizeof *sim->workers);
    sim->clients = calloc(nclients ? nclients : 1, sizeof *sim->clients);
    sim->jobs = calloc(sim->njobs + nclients, sizeof *sim->jobs);
    if (!sim->workers || !sim->clients || !sim->jobs)
        die("sim", "out of memory");
    uv_timer_t tick;
    uv_timer_init(&sim->loop, &tick);
    uv_timer_start(&tick, keepalive, 20, 20);

    for (unsigned i = 0; i < nworkers; i++) {
        struct sworker *w = &sim->workers[i];
        w->sim = sim;
        w->index = pt->w0 + i;
        w->hb_ms = 1000;
        for (int k = 0; k < KEY_LEN; k++)
            w->key[k] = (uint8_t)rand();
        snprintf(w->address, sizeof w->address, "127.0.0.1:%u", 20000 + w->index);
        struct rpc_client_opts o = {.address = sim->addr,
                                    .role = SLUICE__ROLE__ROLE_WORKER,
                                    .incarnation = rpc_new_incarnation(),
                                    .sec = sim->sec};
        if (rpc_client_new(&sim->loop, &o, &w->c, err, sizeof err) < 0)
            die("worker", err);
        uv_timer_init(&sim->loop, &w->hb);
        w->hb.data = w;
        uv_timer_init(&sim->loop, &w->lease);
        w->lease.data = w;
        /* Spread the first heartbeats (and so the connections and handshakes) over one interval,
         * or at RAMP_PER_S a second for a large cluster (over all parts): a fleet comes up over
         * time, and every simulated peer connects from the one loopback address, where the
         * dispatcher admits at most RPC_DEFAULT_MAX_HANDSHAKES_PER_ADDRESS handshakes at once. */
        uv_timer_start(&w->hb, worker_heartbeat, (uint64_t)(rand() % ramp_ms(nworkers_all)) + 1,
                       w->hb_ms);
    }
    for (unsigned i = 0; i < nclients; i++) {
        struct sclient *cl = &sim->clients[i];
        cl->sim = sim;
        cl->index = pt->c0 + i;
        struct rpc_client_opts o = {.address = sim->addr,
                                    .role = SLUICE__ROLE__ROLE_CLIENT,
                                    .incarnation = rpc_new_incarnation(),
                                    .sec = sim->sec};
        if (rpc_client_new(&sim->loop, &o, &cl->c, err, sizeof err) < 0)
            die("client", err);
        uv_timer_init(&sim->loop, &cl->hb);
        cl->hb.data = cl;
    }
    run_until(sim, all_registered, 60, "workers registering");
    part_step(sim, out);
    if (pt->index == 0) {
        bool registered = false;
        register_dataset(sim, &registered);
        while (!registered)
            uv_run(&sim->loop, UV_RUN_ONCE);
    }
    part_step(sim, out);
    for (unsigned i = 0; i < nclients; i++)
        uv_timer_start(
            &sim->clients[i].hb, client_join_timer,
            nclients_all > RAMP_PER_S / 10 ? (uint64_t)(rand() % ramp_ms(nclients_all)) : 0, 0);
    run_until(sim, all_joined, 60, "clients joining");
    if (sim->retries)
        fprintf(stderr, PROG ": %" PRIu64 " first requests retried while the cluster connected\n",
                sim->retries);
    part_step(sim, out);
    /* Warm up: every worker learns its tasks and leases its first splits. */
    run_until(sim, NULL, 3, "warm-up");
    if (sim->errors)
        fprintf(stderr, PROG ": %" PRIu64 " errors before the measurement\n", sim->errors);
    part_step(sim, out);

    /* The parent has read the counters at the start of their window, which starts SETTLE_S
     * before latencies are measured. */
    double self0 = self_cpu_s();
    run_until(sim, NULL, SETTLE_S, "settling after the scrape");
    sim->measuring = true;
    lag_measuring = true;
    lag_last_ns = 0;
    lag_max_ms = 0;
    lag_over_5ms = 0;
    double m0 = now_s();
    double deadline = m0 + cfg->seconds;
    while (now_s() < deadline)
        uv_run(&sim->loop, UV_RUN_ONCE);
    sim->measuring = false;
    lag_measuring = false;
    struct part_result res = {.seconds = now_s() - m0,
                              .cpu_s = self_cpu_s() - self0,
                              .lag_max_ms = lag_max_ms,
                              .lag_over_5ms = lag_over_5ms};
    part_step(sim, out);

    /* Stop sending; every request sent must get its reply. */
    sim->stopping = true;
    for (unsigned i = 0; i < nworkers; i++) {
        uv_timer_stop(&sim->workers[i].hb);
        uv_timer_stop(&sim->workers[i].lease);
    }
    for (unsigned i = 0; i < nclients; i++)
        uv_timer_stop(&sim->clients[i].hb);
    double drain = now_s() + CALL_TIMEOUT_MS / 1000.0 + 5;
    while (!nothing_outstanding(sim) && now_s() < drain)
        uv_run(&sim->loop, UV_RUN_ONCE);
    res.errors = sim->errors;
    res.skipped_hb = sim->skipped_hb;
    res.splits_confirmed = sim->splits_confirmed;
    res.tasks = sim->tasks;
    res.task_lists = sim->task_lists;
    res.outstanding = sim->outstanding;
    res.retries = sim->retries;
    for (int i = 0; i < 3; i++)
        res.nlat[i] = sim->lat[i].n;
    if (nclients > 0) {
        res.client_id = sim->clients[0].client_id;
        res.iteration_id = sim->clients[0].iteration_id;
        memcpy(res.key, sim->clients[0].key, KEY_LEN);
        res.key_len = (uint32_t)sim->clients[0].key_len;
    }
    write_full(out, &res, sizeof res, "simulator process");
    for (int i = 0; i < 3; i++) {
        if (sim->lat[i].n)
            write_full(out, sim->lat[i].v, sim->lat[i].n * sizeof(double), "simulator process");
        free(sim->lat[i].v);
    }
    /* The parent restarts the dispatcher (or fails the group over) before the last step. */
    part_wait_step(sim, "waiting for the end");

    unsigned open = nworkers + nclients;
    for (unsigned i = 0; i < nworkers; i++) {
        struct sworker *w = &sim->workers[i];
        uv_close((uv_handle_t *)&w->hb, close_handle_cb);
        uv_close((uv_handle_t *)&w->lease, close_handle_cb);
        for (size_t k = 0; k < w->ntasks; k++)
            uv_close((uv_handle_t *)&w->tasks[k]->timer, close_handle_cb);
        rpc_client_close(w->c, closed_cb, &open);
    }
    for (unsigned i = 0; i < nclients; i++) {
        uv_close((uv_handle_t *)&sim->clients[i].hb, close_handle_cb);
        rpc_client_close(sim->clients[i].c, closed_cb, &open);
    }
    uv_close((uv_handle_t *)&tick, close_handle_cb);
    while (open > 0)
        uv_run(&sim->loop, UV_RUN_ONCE);
    uv_run(&sim->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&sim->loop) != 0)
        fprintf(stderr, PROG ": the loop did not close\n");
    for (unsigned i = 0; i < nworkers; i++) {
        struct sworker *w = &sim->workers[i];
        for (size_t k = 0; k < w->ntasks; k++) {
            free(w->tasks[k]->held.v);
            free(w->tasks[k]->finished.v);
            free(w->tasks[k]);
        }
        free(w->tasks);
    }
    for (unsigned i = 0; i < nclients; i++)
        free(sim->clients[i].pending.v);
    for (size_t i = 0; i < sim->njobs_known; i++) {
        free(sim->jobs[i].clients);
        free(sim->jobs[i].orphans.v);
    }
    free(sim->jobs);
    free(sim->workers);
    free(sim->clients);
    security_ctx_free(sim->sec);
    free(sim);
}

/* Starts the parts; each is a child that runs part_run and exits. The first n - (probe_workers
 * != 0) share all but the probe's peers, the last of them ([nworkers - probe_workers, nworkers)
 * and the last njobs clients) when probe_workers is not 0. */
static void parts_start(struct part *parts, unsigned n, const struct config *cfg, const char *addr,
                        const char *token_path, unsigned nworkers, unsigned nclients,
                        unsigned njobs, unsigned probe_workers)
{
    fflush(NULL);
    unsigned nmain = probe_workers ? n - 1 : n;
    unsigned mw = nworkers - probe_workers, mc = probe_workers ? nclients - njobs : nclients;
    for (unsigned k = 0; k < n; k++) {
        struct part *pt = &parts[k];
        pt->index = k;
        pt->probe = k == nmain;
        if (pt->probe) {
            pt->w0 = mw;
            pt->w1 = nworkers;
            pt->c0 = mc;
            pt->c1 = nclients;
        } else {
            pt->w0 = (unsigned)((uint64_t)mw * k / nmain);
            pt->w1 = (unsigned)((uint64_t)mw * (k + 1) / nmain);
            pt->c0 = (unsigned)((uint64_t)mc * k / nmain);
            pt->c1 = (unsigned)((uint64_t)mc * (k + 1) / nmain);
        }
        int down[2], up[2];
        if (pipe(down) < 0 || pipe(up) < 0)
            die("pipe", strerror(errno));
        unsigned seed = (unsigned)rand();
        pid_t pid = fork();
        if (pid < 0)
            die("fork", strerror(errno));
        if (pid == 0) {
            in_part = true;
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (unsigned j = 0; j < k; j++) {
                close(parts[j].to);
                close(parts[j].from);
            }
            close(down[1]);
            close(up[0]);
            fcntl(down[0], F_SETFL, fcntl(down[0], F_GETFL) | O_NONBLOCK);
            srand(seed);
            part_run(cfg, addr, token_path, nworkers, nclients, njobs, pt, down[0], up[1]);
            close(down[0]);
            close(up[1]);
            exit(0);
        }
        close(down[0]);
        close(up[1]);
        pt->pid = pid;
        pt->to = down[1];
        pt->from = up[0];
    }
}

/* Waits until every part has done its step. */
static void parts_wait(struct part *parts, unsigned n)
{
    for (unsigned k = 0; k < n; k++) {
        uint8_t b;
        read_full(parts[k].from, &b, 1, "simulator process");
    }
}

/* Starts every part's next step. */
static void parts_go(struct part *parts, unsigned n)
{
    uint8_t b = 1;
    for (unsigned k = 0; k < n; k++)
        write_full(parts[k].to, &b, 1, "simulator process");
}

/* One measurement of nworkers and nclients against a single dispatcher, or with raft against a
 * group of RAFT_REPLICAS, started for it on ROOT/TAG and killed at its end. */
static void measure(const struct config *cfg, bool raft, unsigned nworkers, unsigned nclients,
                    const char *root, const char *tag, struct figures *fig)
{
    char work_dir[PATH_MAX], token_path[PATH_MAX], token[65], err[SLUICE_ERRMSG_SIZE];
    snprintf(work_dir, sizeof work_dir, "%s/%s", root, tag);
    snprintf(token_path, sizeof token_path, "%s/%s.token", root, tag);
    for (int i = 0; i < 64; i++)
        token[i] = "0123456789abcdef"[rand() % 16];
    token[64] = '\0';
    FILE *tf = fopen(token_path, "w");
    if (!tf || fputs(token, tf) < 0 || fclose(tf) != 0)
        die(token_path, strerror(errno));
    chmod(token_path, 0600);

    unsigned max_conns = nworkers + nclients + 64;
    struct group g;
    group_start(&g, cfg, raft, root, tag, token_path, max_conns);
    /* The figures of one process are the leader's (the single dispatcher is its own). */
    struct dproc *leader = &g.procs[g.leader];
    for (int i = 0; i < g.n; i++)
        fprintf(stderr, PROG ": %s: %s pid %d at %s, metrics at %s\n", tag,
                !raft           ? "dispatcher"
                : i == g.leader ? "leader"
                                : "replica",
                (int)g.procs[i].pid, g.procs[i].addr, g.procs[i].metrics);

    unsigned njobs = cfg->jobs < nclients ? cfg->jobs : nclients;
    /* The probe: cfg->probe workers and a client of every job, where at most a tenth of the
     * workers and half the clients. */
    unsigned probe_workers = cfg->probe <= nworkers / 10 && 2 * njobs <= nclients ? cfg->probe : 0;
    unsigned mworkers = nworkers - probe_workers,
             mclients = probe_workers ? nclients - njobs : nclients;
    /* Every part has a client of every job, and a worker. */
    unsigned nparts = cfg->sim_procs;
    if (nparts > mclients / njobs)
        nparts = mclients / njobs;
    if (nparts > mworkers)
        nparts = mworkers;
    if (nparts == 0)
        nparts = 1;
    if (nparts != cfg->sim_procs)
        fprintf(stderr, PROG ": %s: %u simulator process%s (each needs a client of every job)\n",
                tag, nparts, nparts == 1 ? "" : "es");
    if (cfg->probe_asked && !probe_workers)
        fprintf(stderr,
                PROG ": %s: no probe process (%u workers in it need ten times as many, and a "
                     "client of every job twice as many clients)\n",
                tag, cfg->probe);
    if (probe_workers)
        nparts++;
    struct part parts[MAX_SIM_PROCS + 1];
    parts_start(parts, nparts, cfg, g.addr, token_path, nworkers, nclients, njobs, probe_workers);
    parts_wait(parts, nparts); /* workers registered */
    parts_go(parts, nparts);
    parts_wait(parts, nparts); /* the dataset registered */
    parts_go(parts, nparts);
    parts_wait(parts, nparts); /* clients joined */
    parts_go(parts, nparts);
    parts_wait(parts, nparts); /* warmed up */

    /* The counters are read at the edges of a window that starts SETTLE_S before latencies are
     * measured: the requests held up behind a scrape (the dispatcher renders its metrics on its
     * loop) must not count. */
    struct counters c0, c1;
    double cpu0 = proc_cpu_s(leader->pid), others0 = 0;
    for (int i = 0; i < g.n; i++)
        others0 += i == g.leader ? 0 : proc_cpu_s(g.procs[i].pid);
    read_counters(leader->metrics, token, &c0);
    double t0 = now_s();
    parts_go(parts, nparts);
    parts_wait(parts, nparts); /* measured */
    double t1 = now_s();
    double cpu1 = proc_cpu_s(leader->pid), others1 = 0;
    for (int i = 0; i < g.n; i++)
        others1 += i == g.leader ? 0 : proc_cpu_s(g.procs[i].pid);
    double scrape0 = now_s();
    read_counters(leader->metrics, token, &c1);
    fig->scrape_ms = (now_s() - scrape0) * 1000;
    fig->rss_mb = proc_status_mb(leader->pid, "VmRSS");
    fig->hwm_mb = proc_status_mb(leader->pid, "VmHWM");
    double window = t1 - t0; /* of the counters; latencies and request counts: the parts' */
    parts_go(parts, nparts);

    /* What the parts measured, merged. */
    memset(&fig->worker_hb, 0, sizeof fig->worker_hb);
    memset(&fig->client_hb, 0, sizeof fig->client_hb);
    memset(&fig->splits, 0, sizeof fig->splits);
    memset(fig->probe, 0, sizeof fig->probe);
    struct lat *lats[3] = {&fig->worker_hb, &fig->client_hb, &fig->splits};
    struct part_result sum = {0}, probe_res = {0};
    double sim_cpu = 0;
    fig->seconds = 0;
    fig->sim_lag_max_ms = 0;
    fig->probe_lag_max_ms = NAN;
    for (unsigned k = 0; k < nparts; k++) {
        struct part_result r;
        read_full(parts[k].from, &r, sizeof r, "simulator process");
        for (int i = 0; i < 3; i++) {
            for (uint64_t x = 0; x < r.nlat[i]; x++) {
                double v;
                read_full(parts[k].from, &v, sizeof v, "simulator process");
                lat_add(parts[k].probe ? &fig->probe[i] : lats[i], v);
            }
        }
        if (parts[k].probe)
            fig->probe_lag_max_ms = r.lag_max_ms;
        if (k == 0)
            probe_res = r;
        sum.errors += r.errors;
        sum.skipped_hb += r.skipped_hb;
        sum.splits_confirmed += r.splits_confirmed;
        sum.tasks += r.tasks;
        sum.task_lists += r.task_lists;
        sum.outstanding += r.outstanding;
        if (!parts[k].probe)
            sum.lag_over_5ms += r.lag_over_5ms;
        sim_cpu += r.cpu_s;
        if (r.seconds > fig->seconds)
            fig->seconds = r.seconds;
        if (r.lag_max_ms > fig->sim_lag_max_ms && !parts[k].probe)
            fig->sim_lag_max_ms = r.lag_max_ms;
    }
    fig->sim_lag_over_5ms = sum.lag_over_5ms;

    fig->workers = nworkers;
    fig->clients = nclients;
    fig->jobs = njobs;
    fig->tasks = (unsigned)sum.tasks;
    for (int i = 0; i < 3; i++) {
        fig->inside_p50[i] = hist_q_ms(&c0.requests[i], &c1.requests[i], 0.5);
        fig->inside_p99[i] = hist_q_ms(&c0.requests[i], &c1.requests[i], 0.99);
    }
    fig->errors = sum.errors;
    fig->missing = sum.outstanding;
    fig->skipped_hb = sum.skipped_hb;
    fig->task_lists = sum.task_lists;
    fig->cpu_share = (cpu1 - cpu0) / window;
    fig->have_journal_bytes = !isnan(c0.journal_bytes) && !isnan(c1.journal_bytes);
    fig->journal_bytes_per_s = (c1.journal_bytes - c0.journal_bytes) / window;
    fig->updates_per_s = (c1.updates - c0.updates) / window;
    fig->splits_per_s = (double)sum.splits_confirmed / fig->seconds;
    double commits = c1.commits - c0.commits;
    fig->commits_per_s = commits / window;
    fig->commit_mean_ms =
        commits > 0 ? 1000 * (c1.commit_seconds - c0.commit_seconds) / commits : NAN;
    fig->commit_slow_share =
        commits > 0 ? 100.0 * (commits - (c1.fast_commits - c0.fast_commits)) / commits : NAN;
    fig->sim_cpu_share = sim_cpu / window;
    fig->raft = raft;
    fig->followers_cpu_share = (others1 - others0) / window;
    fig->raft_entries_per_s = (c1.raft_commit_index - c0.raft_commit_index) / window;
    fig->leader_changes = c1.leader_changes - c0.leader_changes;
    if (raft && fig->leader_changes != 0)
        fprintf(stderr,
                PROG ": %s: the leader changed during the measurement: its CPU and memory figures "
                     "are of the first leader only\n",
                tag);

    /* Restart with this state; a group: fail over to another replica. */
    if (raft) {
        fig->restart_s = measure_failover(&g);
        group_kill(&g);
    } else {
        group_kill(&g);
        struct sluice_security_options so = {.auth_token_file = token_path};
        struct security_ctx *sec;
        if (security_ctx_new(&so, SECURITY_CLIENT, &sec, err, sizeof err) < 0)
            die("token", err);
        struct sclient probe = {.client_id = probe_res.client_id,
                                .iteration_id = probe_res.iteration_id,
                                .key_len = probe_res.key_len};
        memcpy(probe.key, probe_res.key, KEY_LEN);
        fig->restart_s = measure_restart(cfg, sec, work_dir, token_path, max_conns, &probe);
        security_ctx_free(sec);
    }

    parts_go(parts, nparts); /* the parts close their connections and exit */
    for (unsigned k = 0; k < nparts; k++) {
        int status;
        close(parts[k].to);
        close(parts[k].from);
        if (waitpid(parts[k].pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            die("simulator process", "did not exit 0");
    }
}

/* ---- report --------------------------------------------------------------------------------- */

/* The requests measured (at least 1, a divisor): the simulator's and the probe's. */
static size_t requests(const struct figures *f)
{
    size_t n = f->worker_hb.n + f->client_hb.n + f->splits.n;
    for (int i = 0; i < 3; i++)
        n += f->probe[i].n;
    return n ? n : 1;
}

static void row(const char *name, double base, double run, const char *target, bool have_base)
{
    if (have_base && isnan(base)) /* the baseline has none (a probe's figures) */
        printf("  %-34s %11s %11.3f %9s  %s\n", name, "-", run, "-", target);
    else if (have_base && base > 0)
        printf("  %-34s %11.3f %11.3f %8.2fx  %s\n", name, base, run, run / base, target);
    else if (have_base)
        printf("  %-34s %11.3f %11.3f %9s  %s\n", name, base, run, "-", target);
    else
        printf("  %-34s %11s %11.3f %9s  %s\n", name, "-", run, "", target);
}

/* Prints every figure of the baseline b and the run r side by side, with r / b; with --raft
 * the baseline is the single dispatcher and the run the group of replicas. */
static void report(struct figures *b, struct figures *r, bool have_base)
{
    const char *bname = r->raft ? "single" : "baseline", *rname = r->raft ? "raft" : "run";
    if (have_base)
        printf("%-9s %u workers, %u clients, %u jobs, %u tasks, %.1f s%s\n",
               r->raft ? "single:" : "baseline:", b->workers, b->clients, b->jobs, b->tasks,
               b->seconds, r->raft ? " (one dispatcher, LMDB journal)" : "");
    printf("%-9s %u workers, %u clients, %u jobs, %u tasks, %.1f s%s\n",
           r->raft ? "raft:" : "run:", r->workers, r->clients, r->jobs, r->tasks, r->seconds,
           r->raft ? " (" RAFT_REPLICAS_TEXT " replicas on Raft; the leader's figures)" : "");
    printf("  %-34s %11s %11s %9s  %s\n", "", bname, rname, "ratio", "target");
    struct {
        const char *name;
        struct lat *b, *r;
    } lats[] = {{"worker heartbeat", &b->worker_hb, &r->worker_hb},
                {"client heartbeat", &b->client_hb, &r->client_hb},
                {"split lease (GetSplits)", &b->splits, &r->splits}};
    bool probe = r->probe[0].n + r->probe[1].n + r->probe[2].n > 0;
    for (size_t i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s requests", lats[i].name);
        row(name, (double)lats[i].b->n, (double)lats[i].r->n, "", have_base);
        snprintf(name, sizeof name, "%s p50 ms", lats[i].name);
        row(name, lat_q(lats[i].b, 0.5), lat_q(lats[i].r, 0.5), "", have_base);
        snprintf(name, sizeof name, "%s p99 ms", lats[i].name);
        row(name, lat_q(lats[i].b, 0.99), lat_q(lats[i].r, 0.99), "< 5 ms", have_base);
        snprintf(name, sizeof name, "%s max ms", lats[i].name);
        row(name, lat_q(lats[i].b, 1.0), lat_q(lats[i].r, 1.0), "", have_base);
        if (probe) {
            snprintf(name, sizeof name, "  the probe's (%zu) p50 ms", r->probe[i].n);
            row(name, lat_q(&b->probe[i], 0.5), lat_q(&r->probe[i], 0.5), "", have_base);
            snprintf(name, sizeof name, "  the probe's p99 ms");
            row(name, lat_q(&b->probe[i], 0.99), lat_q(&r->probe[i], 0.99), "< 5 ms", have_base);
        }
        snprintf(name, sizeof name, "  inside the dispatcher p50 ms");
        row(name, b->inside_p50[i], r->inside_p50[i], "", have_base);
        snprintf(name, sizeof name, "  inside the dispatcher p99 ms");
        row(name, b->inside_p99[i], r->inside_p99[i], "< 5 ms", have_base);
    }
    row("client replies with the task list", (double)b->task_lists, (double)r->task_lists, "",
        have_base);
    row("heartbeats skipped (in flight)", (double)b->skipped_hb, (double)r->skipped_hb, "",
        have_base);
    row("splits confirmed / s", b->splits_per_s, r->splits_per_s, "", have_base);
    row("dispatcher CPU (cores)", b->cpu_share, r->cpu_share, "", have_base);
    if (r->raft)
        row("  the other replicas' CPU (cores)", b->followers_cpu_share, r->followers_cpu_share, "",
            have_base);
    row("dispatcher CPU per request us", 1e6 * b->cpu_share * b->seconds / (double)requests(b),
        1e6 * r->cpu_share * r->seconds / (double)requests(r), "", have_base);
    row("dispatcher CPU per worker (ms/s)", 1000 * b->cpu_share / b->workers,
        1000 * r->cpu_share / r->workers, "", have_base);
    row("simulator CPU (cores)", b->sim_cpu_share, r->sim_cpu_share, "", have_base);
    row("simulator loop lag max ms", b->sim_lag_max_ms, r->sim_lag_max_ms, "", have_base);
    row("simulator loop lags > 5 ms", (double)b->sim_lag_over_5ms, (double)r->sim_lag_over_5ms, "",
        have_base);
    if (probe)
        row("the probe's loop lag max ms", b->probe_lag_max_ms, r->probe_lag_max_ms, "", have_base);
    row("dispatcher VmRSS MB", b->rss_mb, r->rss_mb, "< 100 MB", have_base);
    row("metrics scrape ms", b->scrape_ms, r->scrape_ms, "", have_base);
    row("dispatcher VmHWM MB", b->hwm_mb, r->hwm_mb, "< 100 MB", have_base);
    row("state updates / s", b->updates_per_s, r->updates_per_s, "", have_base);
    row("journal commits / s", b->commits_per_s, r->commits_per_s, "", have_base);
    row("journal commit mean ms", b->commit_mean_ms, r->commit_mean_ms, "", have_base);
    row("journal commits > 3.2 ms (%)", b->commit_slow_share, r->commit_slow_share, "", have_base);
    if (r->have_journal_bytes)
        row("journal bytes / s", b->journal_bytes_per_s, r->journal_bytes_per_s, "", have_base);
    else
        printf("  journal bytes / s: the dispatcher exports no sluice_journal_bytes_total\n");
    if (r->raft) {
        /* Of the group only: no column for the single dispatcher. */
        row("raft entries committed / s", NAN, r->raft_entries_per_s, "", false);
        row("leader changes while measured", NAN, r->leader_changes, "0", false);
        row("killed to serving again s", b->restart_s, r->restart_s, "", have_base);
        printf("  (single: SIGKILL, then a restart on the same work dir until a client heartbeat\n"
               "   is answered; raft: SIGKILL of the leader until another replica's GET /readyz\n"
               "   answers 200, which waits for the election timeout first)\n");
    } else {
        row("restart to serving s", b->restart_s, r->restart_s, "< 1 s", have_base);
    }
    row("errors", (double)b->errors, (double)r->errors, "0", have_base);
    row("requests without reply", (double)b->missing, (double)r->missing, "0", have_base);
}

/* --raft: what Raft costs against the single dispatcher's LMDB journal under the same load. */
static void report_raft(struct figures *s, struct figures *r)
{
    double s_leases = (double)s->splits.n / s->seconds, r_leases = (double)r->splits.n / r->seconds;
    printf("\nRaft (" RAFT_REPLICAS_TEXT " replicas) against the single dispatcher (LMDB "
           "journal), %u workers, %u clients:\n",
           r->workers, r->clients);
    printf("  %-34s %11s %11s %9s\n", "", "single", "raft", "raft/single");
    row("split leases / s", s_leases, r_leases, "", true);
    row("split lease p50 ms", lat_q(&s->splits, 0.5), lat_q(&r->splits, 0.5), "", true);
    row("split lease p99 ms", lat_q(&s->splits, 0.99), lat_q(&r->splits, 0.99), "", true);
    row("worker heartbeat p99 ms", lat_q(&s->worker_hb, 0.99), lat_q(&r->worker_hb, 0.99), "",
        true);
    row("leader CPU (cores)", s->cpu_share, r->cpu_share, "", true);
    row("leader VmRSS MB", s->rss_mb, r->rss_mb, "", true);
    printf("  leases per second >= 0.5x of the single dispatcher's: %s (%.2fx)\n",
           s_leases > 0 && r_leases >= 0.5 * s_leases ? "met" : "not met",
           s_leases > 0 ? r_leases / s_leases : NAN);
    printf("  (each task asks for its next lease --split-ms after the last: the offered rate is\n"
           "   fixed, and leases / s falls below it only where replies are late)\n");
}

static unsigned parse_uint(const char *flag, const char *v)
{
    char *end;
    errno = 0;
    unsigned long x = v ? strtoul(v, &end, 10) : 0;
    if (!v || errno || *end || x == 0 || x > 1000000) {
        fprintf(stderr, PROG ": %s: expected a positive number\n", flag);
        exit(2);
    }
    return (unsigned)x;
}

static void default_dispatcher(char *out, size_t len)
{
    char self[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(out, len, "build/bin/sluice-dispatcher");
        return;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(out, len, "%s/../bin/sluice-dispatcher", self);
}

/* --pin: of the CPUs this process may run on, the first half (at least one) for the
 * dispatcher, the rest for the simulator, so that neither measures the other's queueing for a
 * CPU. Needs two CPUs at least; with fewer it says so and pins nothing. */
static void pin_cpus(struct config *cfg)
{
    cpu_set_t all, sim;
    if (sched_getaffinity(0, sizeof all, &all) < 0 || CPU_COUNT(&all) < 2) {
        fprintf(stderr, PROG ": --pin needs two CPUs at least; not pinning\n");
        cfg->pin = false;
        return;
    }
    int half = CPU_COUNT(&all) / 2, seen = 0;
    CPU_ZERO(&cfg->dispatcher_cpus);
    CPU_ZERO(&sim);
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &all))
            continue;
        if (seen++ < half)
            CPU_SET(c, &cfg->dispatcher_cpus);
        else
            CPU_SET(c, &sim);
    }
    if (sched_setaffinity(0, sizeof sim, &sim) < 0) {
        fprintf(stderr, PROG ": pinning the simulator: %s; not pinning\n", strerror(errno));
        cfg->pin = false;
        return;
    }
    fprintf(stderr, PROG ": dispatcher on %d CPU(s), simulator on %d\n",
            CPU_COUNT(&cfg->dispatcher_cpus), CPU_COUNT(&sim));
}

int main(int argc, char **argv)
{
    static char dpath[PATH_MAX];
    struct config cfg = {.seconds = 60,
                         .workers = 1000,
                         .clients = 100,
                         .jobs = 10,
                         .split_ms = 2000,
                         .lease = 4,
                         .split_size = 1000,
                         .sim_procs = 1,
                         .probe = 10};
    unsigned base_workers = 0, base_clients = 0;
    bool baseline = true;
    const char *work_root = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    default_dispatcher(dpath, sizeof dpath);
    cfg.dispatcher = dpath;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-baseline") == 0) {
            baseline = false;
            continue;
        }
        if (strcmp(a, "--pin") == 0) {
            cfg.pin = true;
            continue;
        }
        if (strcmp(a, "--raft") == 0) {
            cfg.raft = true;
            continue;
        }
        if (strcmp(a, "--no-probe") == 0) {
            cfg.probe = 0;
            continue;
        }
        if (strcmp(a, "--one-by-one") == 0) {
            cfg.one_by_one = true;
            continue;
        }
        if (strcmp(a, "--help") == 0) {
            printf("usage: " PROG " [--seconds N] [--workers N] [--clients N] [--jobs N]\n"
                   "       [--split-ms N] [--lease N] [--split-size N] [--baseline-workers N]\n"
                   "       [--baseline-clients N] [--no-baseline] [--dispatcher PATH]\n"
                   "       [--work-root DIR] [--dispatcher-arg ARG]... [--pin]\n"
                   "       [--raft] [--replica-arg ARG]... [--sim-procs N]\n"
                   "       [--probe N] [--no-probe] [--one-by-one]\n");
            return 0;
        }
        if (strcmp(a, "--dispatcher") == 0 && v)
            cfg.dispatcher = v;
        else if (strcmp(a, "--work-root") == 0 && v)
            work_root = v;
        else if (strcmp(a, "--dispatcher-arg") == 0 && v && cfg.ndargs < MAX_DISPATCHER_ARGS)
            cfg.dargs[cfg.ndargs++] = v;
        else if (strcmp(a, "--replica-arg") == 0 && v && cfg.nrargs < MAX_DISPATCHER_ARGS)
            cfg.rargs[cfg.nrargs++] = v;
        else if (strcmp(a, "--seconds") == 0)
            cfg.seconds = parse_uint(a, v);
        else if (strcmp(a, "--workers") == 0)
            cfg.workers = parse_uint(a, v);
        else if (strcmp(a, "--clients") == 0)
            cfg.clients = parse_uint(a, v);
        else if (strcmp(a, "--jobs") == 0)
            cfg.jobs = parse_uint(a, v);
        else if (strcmp(a, "--split-ms") == 0)
            cfg.split_ms = parse_uint(a, v);
        else if (strcmp(a, "--lease") == 0)
            cfg.lease = parse_uint(a, v);
        else if (strcmp(a, "--split-size") == 0)
            cfg.split_size = parse_uint(a, v);
        else if (strcmp(a, "--probe") == 0) {
            cfg.probe = parse_uint(a, v);
            cfg.probe_asked = true;
        } else if (strcmp(a, "--sim-procs") == 0) {
            cfg.sim_procs = parse_uint(a, v);
            if (cfg.sim_procs > MAX_SIM_PROCS) {
                fprintf(stderr, PROG ": --sim-procs: at most %d\n", MAX_SIM_PROCS);
                return 2;
            }
        } else if (strcmp(a, "--baseline-workers") == 0)
            base_workers = parse_uint(a, v);
        else if (strcmp(a, "--baseline-clients") == 0)
            base_clients = parse_uint(a, v);
        else {
            fprintf(stderr, PROG ": unknown or incomplete argument '%s' (see --help)\n", a);
            return 2;
        }
        i++;
    }
    if (cfg.raft && (!baseline || base_workers || base_clients))
        fprintf(stderr,
                PROG ": --raft: the baseline is the single dispatcher at the same size; "
                     "--no-baseline, --baseline-workers and --baseline-clients do not apply\n");
    if (cfg.pin)
        pin_cpus(&cfg);
    if (!base_workers)
        base_workers = cfg.workers / 10 ? cfg.workers / 10 : 1;
    if (!base_clients)
        base_clients = cfg.clients / 10 ? cfg.clients / 10 : 1;
    if (access(cfg.dispatcher, X_OK) != 0)
        die(cfg.dispatcher, strerror(errno));
    signal(SIGPIPE, SIG_IGN);
    atexit(kill_running_dispatchers);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());

    /* One socket per simulated peer, and the dispatcher (which inherits the limit) needs as
     * many. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = (rlim_t)cfg.workers + cfg.clients + 256;
        if (rl.rlim_cur < want) {
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < (rlim_t)cfg.workers + cfg.clients + 128)
            fprintf(stderr, PROG ": warning: the open-file limit %lu is too low for %u peers\n",
                    (unsigned long)rl.rlim_cur, cfg.workers + cfg.clients);
    }

    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/sluice-cp-XXXXXX", work_root);
    if (!mkdtemp(root))
        die("mkdtemp", strerror(errno));
    struct figures base = {0}, run = {0};
    if (cfg.raft) {
        measure(&cfg, false, cfg.workers, cfg.clients, root, "single", &base);
        measure(&cfg, true, cfg.workers, cfg.clients, root, "raft", &run);
        report(&base, &run, true);
        report_raft(&base, &run);
    } else {
        if (baseline)
            measure(&cfg, false, base_workers, base_clients, root, "baseline", &base);
        measure(&cfg, false, cfg.workers, cfg.clients, root, "run", &run);
        report(&base, &run, baseline);
    }
    bool ok = base.errors == 0 && base.missing == 0 && run.errors == 0 && run.missing == 0;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (ok && system(cmd) != 0)
        fprintf(stderr, PROG ": could not remove %s\n", root);
    else if (!ok)
        fprintf(stderr, PROG ": kept %s (dispatcher logs)\n", root);
    free(base.worker_hb.v);
    free(base.client_hb.v);
    free(base.splits.v);
    free(run.worker_hb.v);
    free(run.client_hb.v);
    free(run.splits.v);
    for (int i = 0; i < 3; i++) {
        free(base.probe[i].v);
        free(run.probe[i].v);
    }
    return ok ? 0 : 1;
}
