/* Why a job's trainers wait: the attribution `sluice status --why` prints and the status
 * document carries per job ("why"). Pure: figures in, a verdict and one paragraph out.
 *
 * From the figures the dispatcher holds (observe.h) it decides:
 *   - input-bound: the trainers' mean share of wall time spent blocked in get-next over the
 *     last minute (each consumer's exposed wait) is WHY_INPUT_BOUND_SHARE or more;
 *   - the slowest consumer: the one that consumed the fewest elements per second (named when
 *     the job has two or more consumers with figures);
 *   - the slowest worker: of the workers serving the job, the one with the lowest rate, and its
 *     rate against the median of the job's workers (named when there are two or more and the
 *     median is above 0);
 *   - the dominant stage: where the slowest worker's tasks of the job spent most of their time
 *     (the stages of TaskProgress), or the job's stages summed over its workers when there is one
 *     worker or the slowest reported none.
 *
 * The paragraph, e.g.
 *   job 3 is input-bound: trainers wait 41 % of the time; the slowest consumer is client 12
 *   (96.0 elements/s); worker 10.0.0.7:7001 runs at 0.22 of the median of 3 workers; its time
 *   goes to map(decode_jpeg)#1 (78 %).
 * Each clause is left out when its figures are missing; a job no consumer reported a wait for
 * reads "job 3: no trainer has reported its wait yet" followed by the clauses there are. */
#ifndef SLUICE_DISPATCHER_WHY_H
#define SLUICE_DISPATCHER_WHY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The figures it works from, which the status document (status.h) carries too. */
/* One stage of a task as its worker reported it (TaskProgress.stages): the stage's name and
 * the seconds the task spent in it since it started. A report keeps at most STATUS_STAGES_MAX
 * stages whose names are non-empty, shorter than STATUS_STAGE_NAME_MAX and UTF-8, and whose
 * seconds are finite and not negative; the rest are dropped. */
#define STATUS_STAGE_NAME_MAX 64
#define STATUS_STAGES_MAX 16
struct status_stage {
    char name[STATUS_STAGE_NAME_MAX];
    double seconds;
};

/* What a reader (a consumer of a job) reports of its wait: the time its caller spent blocked in
 * get-next, cumulative, and the share of wall time that was over the last minute
 * (ClientHeartbeatRequest.exposed_wait_us). */
struct status_consumer {
    uint64_t client_id, job_id;
    double exposed_wait_seconds;
    bool has_share; /* two reports far enough apart to measure a share */
    double wait_share;
    double elements_per_second; /* its consumption rate, as last reported */
};

/* Trainers waiting this share of the time or more make a job input-bound. */
#define WHY_INPUT_BOUND_SHARE 0.10
/* The paragraph's buffer: enough for every clause with the longest names. */
#define WHY_TEXT_MAX 640

struct why_worker {
    const char *address;
    double rate; /* elements/s its tasks of the job served over the window */
    /* Its tasks' stages of the job (status_task_figures), summed by name; borrowed. */
    const struct status_stage *stages;
    size_t nstages;
};

struct why_input {
    uint64_t job_id;
    const char *job_name;                    /* "" or NULL: anonymous */
    const struct status_consumer *consumers; /* of this job; borrowed */
    size_t nconsumers;
    const struct why_worker *workers;
    size_t nworkers;
};

struct why_result {
    bool has_wait;    /* some consumer reported a wait share */
    bool input_bound; /* has_wait and wait_share >= WHY_INPUT_BOUND_SHARE */
    double wait_share;
    bool has_consumer; /* slowest_consumer is set */
    uint64_t slowest_consumer;
    double consumer_rate;
    bool has_worker;            /* slowest_worker is set (two or more workers with rates) */
    const char *slowest_worker; /* points into the input */
    double worker_ratio;        /* its rate / the median rate */
    bool has_stage;
    char stage[STATUS_STAGE_NAME_MAX];
    double stage_share; /* of the stages' total time */
    char text[WHY_TEXT_MAX];
};

/* Fills *out from in. Never fails; strings in out point into in or into out. */
void why_attribute(const struct why_input *in, struct why_result *out);

#endif
