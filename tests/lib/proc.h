/* Processes in tests: start the real binaries, read their "listening on" line, run CLI commands
 * and capture their output, and read what /proc says of a process. Every wait is bounded. */
#ifndef SLUICE_TESTS_LIB_PROC_H
#define SLUICE_TESTS_LIB_PROC_H

#include <stddef.h>
#include <sys/types.h>

struct proc {
    pid_t pid;
    int out_fd;     /* the child's stdout, read by proc_start and then drained into out */
    char addr[128]; /* HOST:PORT from its "listening on" line */
    char log[512];  /* file receiving the child's stderr */
};

/* Path of a built binary: SLUICE_BIN_DIR "/" name, in a static buffer per call site. */
const char *bin_path(const char *name);

/* Starts argv (argv[0] a path) with stderr to a log file in the test's temp dir and waits up to
 * timeout_ms for "<anything> listening on HOST:PORT" on its stdout. Returns 0, or -1 (the
 * process is killed and its log printed). */
int proc_start(struct proc *p, char *const argv[], int timeout_ms);

/* Starts argv without waiting for a listening line (stdout kept in p->out_fd). */
int proc_spawn(struct proc *p, char *const argv[]);

/* Waits up to timeout_ms for the "listening on" line of p, started with proc_spawn, as
 * proc_start does (proc_start is proc_spawn and this): servers slow to start can be spawned
 * together and then awaited. Returns 0, or -1 (the process is killed and its log printed). */
int proc_await_listening(struct proc *p, int timeout_ms);

/* Sends sig and waits up to timeout_ms; then SIGKILLs. Returns the exit status (0..255), 128+N
 * for a signal, or -1. Safe on a proc that was never started or already stopped. */
int proc_stop(struct proc *p, int sig, int timeout_ms);

/* Waits up to timeout_ms for the process to exit; returns as proc_stop, or -2 on timeout. */
int proc_wait(struct proc *p, int timeout_ms);

/* Reads everything the process wrote to stdout until it exits or timeout_ms passes. The result
 * is malloc'd and NUL-terminated. */
char *proc_read_all(struct proc *p, int timeout_ms);

/* Runs argv to completion (bounded by timeout_ms, then killed), capturing stdout and stderr
 * (malloc'd, NUL-terminated; either pointer may be NULL to discard). Returns the exit status as
 * proc_stop does. */
int run_cmd(char *const argv[], int timeout_ms, char **out, char **err);

/* Waits up to timeout_ms for text in p's stderr log (p->log), reading it every 50 ms; returns
 * how long it took in ms, or -1. */
long long proc_wait_log(const struct proc *p, const char *text, int timeout_ms);

/* ---- /proc/PID of a running process --------------------------------------------------------- */

/* The number in field ("VmHWM", "VmRSS", "Threads", ...) of /proc/PID/status, which gives sizes in
 * kB; -1 when the process or the field is not there. */
long proc_status_kb(pid_t pid, const char *field);

/* Counts of a process's threads by their state (/proc/PID/task/TID/stat). */
struct proc_threads {
    int total;
    int running;  /* R: running or runnable */
    int sleeping; /* S or D: waiting, interruptibly or not */
    int stopped;  /* T or t: stopped by a signal or traced */
};

/* Counts pid's threads into *out; a thread that exits while they are read is left out. Returns 0,
 * or -1 (with *out zero) when the process is not there. */
int proc_threads(pid_t pid, struct proc_threads *out);

/* Stops pid with SIGSTOP and waits (bounded) until every thread of it has stopped. kill()
 * returns before that: one thread takes the signal and stops the others as they next pass
 * through the kernel, so on a busy machine another thread may run on for milliseconds (a Raft
 * follower acknowledging an entry sent after the kill). Returns 0, or -1 when the process is
 * not there or not stopped in time. */
int proc_pause(pid_t pid, int timeout_ms);

#endif
