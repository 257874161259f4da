/* What the planner files share (plan.c defines it; plan_datasets.c, plan_jobs.c, plan_workers.c,
 * plan_splits.c, plan_clients.c and plan_saves.c use it). Pure: no I/O, no clocks, no threads.
 *
 * A helper that takes start (the index in out of the first update the plan being made appended)
 * judges the state as it will be once those updates are applied: a task they finish is
 * finished, a worker they mark draining is draining. */

#ifndef SLUICE_DISPATCHER_PLAN_INTERNAL_H
#define SLUICE_DISPATCHER_PLAN_INTERNAL_H

#include "plan.h"
#include "state_internal.h"

/* Sets the refusal of a plan that ran out of memory; returns SLUICE_ERR_NOMEM. */
#define NOMEM_MSG(err, errlen) err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory")

/* Appends a zeroed update of type with its main id, or returns NULL when out of memory. */
static inline struct st_update *plan_push(struct st_update_list *out, enum st_update_type type,
                                          uint64_t id)
{
    struct st_update *u = st_update_list_push(out, type);
    if (u)
        u->id = id;
    return u;
}

/* Whether the updates appended since start include one of type for id. */
bool plan_pending(const struct st_update_list *out, size_t start, enum st_update_type type,
                  uint64_t id);

/* Appends ITERATION_FINISHED for every iteration touched by a task finished or removed since
 * start that is now finished, in order of first mention. Returns 0 or SLUICE_ERR_NOMEM. */
int plan_finish_touched(const struct state *s, struct st_update_list *out, size_t start);

/* Appends ROUNDS_SCHEDULED for every active coordinated iteration whose serving tasks differ,
 * once the updates appended since start are applied, from those of its latest epoch. Returns 0
 * or SLUICE_ERR_NOMEM. */
int plan_round_schedules(const struct state *s, struct st_update_list *out, size_t start);

/* ---- placement (plan_place.c) ---- */

/* Where a job's tasks may go: the workers its selector matches, at most max_workers of them
 * (0: no bound); and how its iterations rank for workers' task slots (plan_rank_before). A
 * zeroed struct places anywhere. */
struct plan_place {
    struct selector sel;
    uint32_t max_workers;
    uint32_t min_workers;
    double weight;   /* > 0 */
    uint64_t job_id; /* 0 for no job (it then ranks first among equals) */
};

/* The placement of job j (NULL: anywhere, weight 1). A selector that does not parse (the state
 * holds only parsed ones) matches nothing. */
void plan_place_of(const struct st_job *j, struct plan_place *pl);

/* The iteration's tasks (finished ones too: a parallel_epochs worker that finished its copy
 * still counts), without those the updates in out since start remove, with those they create. */
size_t plan_iteration_ntasks(const struct state *s, uint64_t iteration_id,
                             const struct st_update_list *out, size_t start);

/* Whether worker w may get a task of iteration_id under pl (NULL: yes): its labels match, and
 * plan_iteration_ntasks is below max_workers. */
bool plan_place_allows(const struct state *s, const struct plan_place *pl,
                       const struct st_worker *w, uint64_t iteration_id,
                       const struct st_update_list *out, size_t start);

/* Whether a worker on host (its host id; "" unknown) may get a task of iteration_id of job j:
 * always, unless the job is read from local workers only; then when one of the iteration's
 * clients, or a client acquired by the updates appended to out since start, is on that host. */
bool plan_worker_serves(const struct state *s, const struct st_job *j, uint64_t iteration_id,
                        const char *host, const struct st_update_list *out, size_t start);

/* The task slots worker_id has taken once the updates in out since start apply: its tasks that
 * are not finished, of iterations still active and not failed, with those out creates. */
uint32_t plan_worker_slots_used(const struct state *s, uint64_t worker_id,
                                const struct st_update_list *out, size_t start);

/* The order in which iterations take a worker's free task slots: those whose job has fewer
 * tasks than its min_workers first, then the heavier job, then the older job, then the older
 * iteration. */
struct plan_rank {
    bool short_of_min;
    double weight;
    uint64_t job_id, iteration_id;
};

/* Whether a ranks strictly before b. */
bool plan_rank_before(const struct plan_rank *a, const struct plan_rank *b);

/* Whether iteration it wants a task on worker w (on host): it is active, has clients (or a
 * running save), its job is not local to other hosts, and its placement allows w (the caller
 * checks that w has no task of it yet). Sets *rank (if not NULL) when it does. */
bool plan_iteration_wants(const struct state *s, const struct st_iteration *it,
                          const struct st_worker *w, const char *host,
                          const struct st_update_list *out, size_t start, struct plan_rank *rank);

/* Appends TASK_CREATED for the iteration on every non-draining worker that pl allows (NULL:
 * every one, slots ignored: a save's task), ids from *next_task; for a job read from local
 * workers only (local_host non-NULL), on those of local_host that have no task of it yet. A
 * worker with task slots gets one only while a slot is free that no iteration ranked before
 * this one wants. Returns 0 or SLUICE_ERR_NOMEM. */
int plan_tasks_for_iteration(const struct state *s, uint64_t iteration_id, const char *local_host,
                             const struct plan_place *pl, uint64_t *next_task,
                             struct st_update_list *out);

/* Appends TASK_CREATED on worker w (its row as placed, id worker_id, on host) for the
 * iterations that want one (plan_iteration_wants), except those in have (nhave sorted ids): all
 * of them when w has no slot limit, in the state's order; else as many as its free slots allow,
 * in rank order. Ids from *next_task. Returns 0 or SLUICE_ERR_NOMEM. */
int plan_fill_worker(const struct state *s, const struct st_worker *w, uint64_t worker_id,
                     const char *host, const uint64_t *have, size_t nhave, uint64_t *next_task,
                     struct st_update_list *out, size_t start);

/* Appends SPLITS_RETURNED moving every split leased to task t back to its iteration's pool;
 * nothing when it holds none. Returns 0 or SLUICE_ERR_NOMEM, after which the caller truncates
 * the list (an update may have been appended). */
int plan_push_leases_back(const struct st_task *t, struct st_update_list *out);

/* Appends the removal of task t: its leased splits back to the pool, the task removed. Returns 0
 * or SLUICE_ERR_NOMEM. */
int plan_push_task_removal(const struct st_task *t, struct st_update_list *out);

/* qsort() and bsearch() order of uint64_t values. */
int plan_cmp_u64(const void *a, const void *b);

#endif
