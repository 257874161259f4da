/* A local cluster for integration tests: one dispatcher and some workers on 127.0.0.1, port 0,
 * plus `sluice` CLI invocations against it. */
#ifndef SLUICE_TESTS_LIB_CLUSTER_H
#define SLUICE_TESTS_LIB_CLUSTER_H

#include "lib/proc.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_MAX_WORKERS 16

struct cluster {
    struct proc dispatcher;
    struct proc workers[CLUSTER_MAX_WORKERS];
    int nworkers;
    int port;           /* the dispatcher's port, reused on restart */
    char work_dir[512]; /* non-empty: fault-tolerant */
    /* NULL-terminated arguments appended to every dispatcher (worker) command line, after the
     * ones the helpers pass; NULL: none. Set before starting. */
    const char *const *dispatcher_args;
    const char *const *worker_args;
};

/* Starts a dispatcher (port 0 unless port > 0) with short timeouts; fault_tolerant uses a work
 * dir under tmp_dir(). Returns 0 or -1. */
int cluster_start_dispatcher(struct cluster *c, int port, int fault_tolerant);
/* Restarts the dispatcher on the same port (and work dir). */
int cluster_restart_dispatcher(struct cluster *c, int sig);
/* Starts one more worker; returns its index or -1. */
int cluster_add_worker(struct cluster *c);
/* Starts one more worker listening on port (0: any); returns its index or -1. */
int cluster_add_worker_on(struct cluster *c, int port);
/* Stops everything (SIGTERM, bounded). Returns 0 when every process exited 0. */
int cluster_stop(struct cluster *c);

/* A cluster on the heap: a dispatcher (fault_tolerant as in cluster_start_dispatcher) started
 * with dispatcher_args, then nworkers workers with worker_args (either NULL: none; both must
 * outlive the cluster). Returns NULL, with nothing left running, when a process does not start.
 * The usual setup of a cmocka group: `return (*state = cluster_new(...)) ? 0 : -1;`. */
struct cluster *cluster_new(const char *const *dispatcher_args, const char *const *worker_args,
                            int fault_tolerant, int nworkers);

/* Stops c (cluster_stop) and frees it; returns what cluster_stop returned. NULL returns 0. */
int cluster_free(struct cluster *c);

/* cluster_free(*state) as a cmocka teardown: fails it unless every process exited 0. */
int cluster_teardown(void **state);

/* cluster_free(*state) as a cmocka teardown that passes whatever the processes' exit statuses,
 * for tests that kill or cut off some of them. */
int cluster_teardown_lax(void **state);

struct expo;
/* Scrapes the /metrics of worker i (started with --metrics-port) into *out (expo_free it);
 * fails the test when its address does not appear within 10 s or the scrape fails. */
void cluster_scrape_worker(struct cluster *c, int i, struct expo *out);

/* Starts n more workers; fails the test when one does not start. */
void cluster_add_workers(struct cluster *c, int n);

/* The dispatcher's status document (`sluice status --json`), parsed: a new reference. Fails the
 * test when the command fails or does not print JSON. */
json_t *cluster_status(struct cluster *c);

/* Waits until the status lists every worker's address, checking every 50 ms for up to 10 s;
 * fails the test when they do not all appear. */
void cluster_wait_registered(struct cluster *c);

/* The job named name in the status, once it has at least ntasks tasks: a new reference. Checks
 * every 50 ms; fails the test after timeout_ms. */
json_t *cluster_wait_job(struct cluster *c, const char *name, size_t ntasks, int timeout_ms);

/* The id of the task of job (a job of the status, as cluster_wait_job returns) on the worker at
 * address; fails the test when it has none there. */
uint64_t cluster_task_on(json_t *job, const char *address);

/* Runs `sluice ARGS...` (NULL-terminated) with --dispatcher set, bounded by 60 s. */
int cluster_cli(struct cluster *c, char **out, char **err, const char *cmd, ...);
/* Starts `sluice ARGS...` in the background (read its output later with proc_read_all). */
int cluster_cli_spawn(struct cluster *c, struct proc *p, const char *cmd, ...);

/* Runs `sluice CMD ARGS...` (NULL-terminated) like cluster_cli and fails the test unless it exits
 * with want_rc (printing its output when not). Returns its stdout (malloc'd); its stderr goes to
 * *err (malloc'd) when err is not NULL. */
char *cluster_run(struct cluster *c, int want_rc, char **err, const char *cmd, ...);

/* Runs `sluice read ARGS...` (NULL-terminated) like cluster_cli and fails the test unless it exits
 * 0 having printed the lines of want in any order (the two compared as sorted multisets). */
void cluster_expect_read(struct cluster *c, const char *want, ...);

/* A checkpointed distributed_epoch read of pipeline into out (--checkpoint ck, --checkpoint-every
 * every, --split-size split_size unless NULL) killed with SIGKILL `kills` times, once out holds
 * total * (k + 1) / (kills + 1) bytes for the k-th run, and resumed from its checkpoint each time;
 * the last run must exit 0 within read_ms (as must every wait). Returns out's text (malloc'd). */
char *cluster_resumed_read(struct cluster *c, const char *pipeline, const char *split_size,
                           const char *every, const char *ck, const char *out, long long total,
                           int kills, int read_ms);

/* Reads p's stdout (after proc_start has consumed the "listening on" line) up to timeout_ms for a
 * line containing marker followed by an address, e.g. " metrics on " of a server started with
 * --metrics-port, and copies the address (the rest of the line) into out. Returns 0 or -1. */
int cluster_read_address(struct proc *p, const char *marker, char *out, size_t len, int timeout_ms);

/* What a read of range(n) printed, against the exact multiset {0, ..., n-1}. */
struct tally {
    long lines;
    long lost;       /* values of the range that never arrived */
    long duplicated; /* arrivals of a value beyond its first */
    long unexpected; /* lines that are no value of the range */
};

/* Tallies text (one value per line) against range(n). */
struct tally tally_range(const char *text, long n);

/* Prints "    WHAT: N lines, lost L, duplicated D, unexpected U". */
void print_tally(const char *what, struct tally t);

/* The text of "0\n1\n...\n" for range(n), each line repeated times times, sorted as strings. */
char *expected_range(long n, int times);

#endif
