/* Weighted fair sharing of a worker's threads (docs/design.md §4: a worker's threads): the pure
 * choice the producer pool (pool.h) makes when more jobs are runnable than it has threads.
 *
 * Every job of the pool belongs to a share (the producers of one task share their task's, whose
 * weight is its job's --weight). A share's virtual time is the thread time its slices took,
 * divided by its weight; a free thread takes a queued job of the share with the least virtual
 * time (the oldest such job: ties keep the queue's order). Shares that all want more thus get
 * thread time in proportion to their weights, and a share alone runs exactly as with a plain FIFO.
 *
 * A share that had nothing queued or running (idle: parked on a full buffer, or new) must not
 * bank the time it did not use: when it becomes active again its virtual time is raised to the
 * pool's virtual clock, the virtual time of the share picked last (start-time fair queuing).
 *
 * Thread time is measured per slice (two clock reads around it, never per element); it is the
 * time a thread spent in the share's slices, waits inside the pipeline's functions (a sleep, a
 * read) included, since such a wait holds the thread all the same.
 *
 * Pure: no clock, no lock; the pool calls these under its mutex. */
#ifndef SLUICE_WORKER_FAIR_H
#define SLUICE_WORKER_FAIR_H

#include <stdbool.h>
#include <stdint.h>

/* Embedded in its owner (a task); fair_share_init before its first job is made runnable. */
struct fair_share {
    double weight;    /* > 0 and finite */
    double vtime;     /* thread nanoseconds / weight, raised to the clock on becoming active */
    uint64_t busy_ns; /* thread time its slices took, in all */
    unsigned active;  /* its jobs queued or running */
};

/* The pool's virtual clock: the virtual time of the share picked last. Zero is its start. */
struct fair_clock {
    double vnow;
};

/* Sets s to a share of weight (not finite or <= 0: 1) that has used no time. */
void fair_share_init(struct fair_share *s, double weight);

/* A job of s is queued (it was neither queued nor running). When s had none active, its virtual
 * time is raised to the clock's. s NULL does nothing. */
void fair_enter(struct fair_share *s, const struct fair_clock *c);

/* A job of s is taken off the queue to run: the clock moves up to s's virtual time. */
void fair_picked(struct fair_share *s, struct fair_clock *c);

/* A slice of a job of s took ns of thread time: charged to s; the job is no longer active
 * (fair_enter again when it is queued again). s NULL does nothing. */
void fair_charge(struct fair_share *s, uint64_t ns);

/* Whether a job of a goes before a job of b queued ahead of it: a's virtual time is less. A job
 * of no share (NULL) is never shared by weight: it goes before any job of a share, and after
 * every other of no share ahead of it. */
bool fair_before(const struct fair_share *a, const struct fair_share *b);

#endif
