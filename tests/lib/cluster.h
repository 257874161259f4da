/* A local cluster for integration tests: one dispatcher and some workers on 127.0.0.1, port 0,
 * plus `sluice` CLI invocations against it. */
#ifndef SLUICE_TESTS_LIB_CLUSTER_H
#define SLUICE_TESTS_LIB_CLUSTER_H

#include "lib/proc.h"

#define CLUSTER_MAX_WORKERS 8

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

/* Runs `sluice ARGS...` (NULL-terminated) with --dispatcher set, bounded by 60 s. */
int cluster_cli(struct cluster *c, char **out, char **err, const char *cmd, ...);
/* Starts `sluice ARGS...` in the background (read its output later with proc_read_all). */
int cluster_cli_spawn(struct cluster *c, struct proc *p, const char *cmd, ...);

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
