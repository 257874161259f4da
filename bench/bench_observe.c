/* bench_observe: what one GET /metrics costs the dispatcher's loop at a large cluster's size.
 *
 * Builds, in process, the state of a cluster of W workers with J jobs (a task of every job on
 * every worker: W x J tasks) and C clients, feeds the observation module the reports their
 * heartbeats carry for a few windows, then times, R times each: observe_render() (the whole
 * scrape as the loop runs it), observe_figures() alone (the per-task figures it starts from)
 * and the status document's additions (status_extra, as GET /api/status and the dashboard's
 * history build them), a sample of the dashboard's history, and the copy of the state a
 * snapshot starts from. Prints milliseconds per call (the median of R) for the small cluster
 * (W/10 workers, the baseline) and the full one, and their ratio.
 *
 *   bench_observe [W] [J] [C] [R] [render|figures|status|freeze|tree|history|snapshot]
 *                                                         defaults: 5000 10 500 9
 *
 * With a last argument, only that call is timed, at full size (for a profiler). */
#include "common/error.h"
#include "dispatcher/history.h"
#include "dispatcher/observe.h"
#include "dispatcher/state.h"
#include "dispatcher/status.h"
#include "dispatcher/update_codec.h"
#include "common/metrics.h"

#include <jansson.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void apply(struct state *st, struct st_update *u)
{
    int rc = state_apply(st, u);
    if (rc < 0) {
        fprintf(stderr, "bench_observe: update %d refused: %s\n", (int)u->type,
                sluice_strerror(rc));
        exit(1);
    }
    st_update_release(u);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct cluster {
    struct state st;
    struct observe *o;
    uint64_t now;
    struct history *history;
    uint64_t samples;
    struct update_codec_spare spare;
};

static void build(struct cluster *c, uint64_t workers, uint64_t jobs, uint64_t clients)
{
    state_init(&c->st);
    struct observe_config cfg = {
        .window_ms = 10000,
        .worker_timeout_ms = 2000,
        .client_timeout_ms = 5000,
        .job_gc_timeout_ms = 60000,
        .worker_heartbeat_ms = 1000,
        .client_heartbeat_ms = 1000,
    };
    c->history = calloc(1, sizeof *c->history);
    if (!c->history || observe_create(&cfg, NULL, 0, &c->o) < 0)
        exit(1);
    struct st_update d = {.type = ST_DATASET_REGISTERED, .id = 1};
    snprintf(d.name, sizeof d.name, "1");
    d.def = calloc(1, 1);
    d.def_len = 1;
    apply(&c->st, &d);
    for (uint64_t j = 1; j <= jobs; j++) {
        struct st_update u = {.type = ST_JOB_CREATED, .id = j};
        snprintf(u.name, sizeof u.name, "job%" PRIu64, j);
        snprintf(u.name2, sizeof u.name2, "1");
        apply(&c->st, &u);
        struct st_update it = {.type = ST_ITERATION_CREATED, .id = j, .ref = j, .ref2 = 1};
        apply(&c->st, &it);
    }
    for (uint64_t w = 1; w <= workers; w++) {
        struct st_update u = {.type = ST_WORKER_REGISTERED, .id = w, .incarnation = w};
        snprintf(u.address, sizeof u.address, "10.0.%" PRIu64 ".%" PRIu64 ":5000", w / 250,
                 w % 250);
        apply(&c->st, &u);
    }
    uint64_t task = 1;
    for (uint64_t w = 1; w <= workers; w++)
        for (uint64_t j = 1; j <= jobs; j++) {
            struct st_update u = {.type = ST_TASK_CREATED, .id = task++, .ref = j, .ref2 = w};
            apply(&c->st, &u);
        }
    /* Each task holds nine leased splits and was granted them, as a distributed job's does
     * between leases (what the snapshot copy spends most of its time on). */
    for (size_t i = 0; i < c->st.ntasks; i++) {
        struct st_task *t = &c->st.tasks[i];
        for (int k = 0; k < 2; k++) {
            struct st_seq_list *l = k ? &t->granted : &t->leased;
            l->v = malloc(9 * sizeof *l->v);
            if (!l->v)
                exit(1);
            for (size_t q = 0; q < 9; q++)
                l->v[q] = t->id * 16 + q;
            l->n = l->cap = 9;
        }
    }
    for (uint64_t k = 1; k <= clients; k++) {
        struct st_update u = {.type = ST_CLIENT_ACQUIRED, .id = 100000 + k, .ref = 1 + k % jobs};
        apply(&c->st, &u);
    }
    /* Three windows of heartbeats: each worker reports each of its tasks, each client its rate. */
    for (int round = 0; round < 30; round++) {
        c->now += 1000;
        task = 1;
        for (uint64_t w = 1; w <= workers; w++) {
            struct observe_task t = {100.0 + (double)w, 0.1, false};
            observe_worker_report(c->o, w, &t, 1);
            for (uint64_t j = 1; j <= jobs; j++, task++) {
                struct observe_task_counts n = {c->now * task / 100, c->now * task, 7, 7000};
                observe_task_report(c->o, w, task, j, c->now, &n);
            }
        }
        for (uint64_t k = 1; k <= clients; k++)
            observe_client_report(c->o, 100000 + k, 1000.0, 0.2);
        struct observe_window win;
        memset(&win, 0, sizeof win);
        (void)observe_window_close(c->o, &c->st, c->now, &win);
    }
}

static void destroy(struct cluster *c)
{
    observe_destroy(c->o);
    free(c->history);
    update_codec_spare_release(&c->spare);
    state_release(&c->st);
}

enum what { RENDER, FIGURES, STATUS, FREEZE, TREE, HISTORY, SNAPSHOT, NWHAT };

/* Milliseconds of one call; for FREEZE and TREE, only the part the loop thread runs (the
 * formatting and the writing out happen elsewhere). */
static double time_one(struct cluster *c, enum what w, size_t *bytes)
{
    double t0 = now_s(), t1 = 0;
    if (w == RENDER) {
        char *body;
        size_t len;
        if (observe_render(c->o, &c->st, c->now, &body, &len) < 0)
            exit(1);
        *bytes = len;
        free(body);
    } else if (w == FIGURES) {
        struct status_extra x;
        memset(&x, 0, sizeof x);
        if (observe_figures(c->o, &c->st, c->now, &x) < 0)
            exit(1);
        *bytes = x.ntasks;
    } else if (w == HISTORY) {
        /* A sample of the dashboard's history, as the loop takes it every HISTORY_INTERVAL_MS
         * (the ring is kept from one call to the next, like the dispatcher's). */
        struct history_served served;
        observe_served(c->o, &c->st, &served);
        history_take(c->history, &c->st, &served, c->now + HISTORY_INTERVAL_MS * ++c->samples);
        *bytes = history_count(c->history);
    } else if (w == SNAPSHOT) {
        /* The loop's part of a snapshot: the copy of the state the pool then packs. */
        struct update_codec_snapshot *copy;
        if (update_codec_snapshot_take(&c->st, &c->spare, &copy) < 0)
            exit(1);
        t1 = now_s();
        update_codec_snapshot_free(copy, &c->spare); /* kept for the next, as the loop does */
        *bytes = 0;
    } else if (w == FREEZE) {
        struct metrics_frozen *f;
        if (observe_freeze(c->o, &c->st, c->now, &f) < 0)
            exit(1);
        t1 = now_s();
        metrics_frozen_free(f);
        *bytes = 0;
    } else {
        struct status_extra x;
        memset(&x, 0, sizeof x);
        observe_status(c->o, &c->st, &x);
        if (observe_figures(c->o, &c->st, c->now, &x) < 0)
            exit(1);
        json_t *tree;
        if (status_json_tree(&c->st, &x, &tree) < 0)
            exit(1);
        t1 = now_s();
        char *json;
        if (status_json_dump(tree, &json) < 0)
            exit(1);
        if (w == STATUS)
            t1 = now_s();
        *bytes = strlen(json);
        free(json);
    }
    return ((t1 ? t1 : now_s()) - t0) * 1e3;
}

static double median_ms(struct cluster *c, enum what w, int rounds, size_t *bytes)
{
    double *v = calloc((size_t)rounds, sizeof *v);
    for (int i = 0; i < rounds; i++)
        v[i] = time_one(c, w, bytes);
    qsort(v, (size_t)rounds, sizeof *v, cmp_double);
    double m = v[rounds / 2];
    free(v);
    return m;
}

int main(int argc, char **argv)
{
    uint64_t workers = argc > 1 ? strtoull(argv[1], NULL, 10) : 5000;
    uint64_t jobs = argc > 2 ? strtoull(argv[2], NULL, 10) : 10;
    uint64_t clients = argc > 3 ? strtoull(argv[3], NULL, 10) : 500;
    int rounds = argc > 4 ? atoi(argv[4]) : 9;
    if (workers < 10 || jobs < 1 || rounds < 1) {
        fprintf(stderr, "usage: bench_observe [WORKERS>=10] [JOBS>=1] [CLIENTS] [ROUNDS>=1]\n");
        return 2;
    }
    if (argc > 5) {
        static const char *only[] = {"render", "figures", "status",  "freeze",
                                     "tree",   "history", "snapshot"};
        for (int i = 0; i < NWHAT; i++) {
            if (strcmp(argv[5], only[i]) != 0)
                continue;
            struct cluster c;
            memset(&c, 0, sizeof c);
            build(&c, workers, jobs, clients);
            size_t bytes;
            printf("%s: %.3f ms\n", only[i], median_ms(&c, (enum what)i, rounds, &bytes));
            destroy(&c);
            return 0;
        }
        fprintf(stderr,
                "bench_observe: unknown call '%s' (render, figures, status, freeze, tree, "
                "history, snapshot)\n",
                argv[5]);
        return 2;
    }
    static const char *names[] = {"GET /metrics, all of it",      "  task figures alone",
                                  "status document, all of it",   "GET /metrics, on the loop",
                                  "status document, on the loop", "history sample (every 5 s)",
                                  "snapshot copy, on the loop"};
    double ms[2][NWHAT];
    size_t out[2][NWHAT];
    for (int k = 0; k < 2; k++) {
        struct cluster c;
        memset(&c, 0, sizeof c);
        uint64_t w = k == 0 ? workers / 10 : workers;
        build(&c, w, jobs, k == 0 ? clients / 10 : clients);
        for (int i = 0; i < NWHAT; i++)
            ms[k][i] = median_ms(&c, (enum what)i, rounds, &out[k][i]);
        destroy(&c);
    }
    printf("%" PRIu64 " workers, %" PRIu64 " jobs (%" PRIu64 " tasks), %" PRIu64
           " clients; baseline a tenth; median of %d\n",
           workers, jobs, workers * jobs, clients, rounds);
    printf("%-34s %12s %12s %8s\n", "", "baseline ms", "run ms", "ratio");
    for (int i = 0; i < NWHAT; i++) {
        printf("%-34s %12.3f %12.3f %8.2f", names[i], ms[0][i], ms[1][i],
               ms[0][i] > 0 ? ms[1][i] / ms[0][i] : 0.0);
        if (i <= STATUS)
            printf("   (%zu %s)", out[1][i], i == FIGURES ? "task figures" : "bytes");
        printf("\n");
    }
    printf("the loop's share: GET /metrics %.2f, status document %.2f (the rest runs on libuv's "
           "pool)\n",
           ms[1][RENDER] > 0 ? ms[1][FREEZE] / ms[1][RENDER] : 0.0,
           ms[1][STATUS] > 0 ? ms[1][TREE] / ms[1][STATUS] : 0.0);
    return 0;
}
