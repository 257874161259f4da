/* The capabilities a client's heartbeat replies list, remembered per client.
 *
 * Every ClientHeartbeat reply lists each task of the client's iteration with the client's
 * capability for it (cap.h): cap_client_key(cap_task_key(iteration secret, task), client), two
 * HMACs per task. An iteration of a shared job has a task on every worker, so without this a
 * heartbeat would derive two HMACs per worker of the cluster. The capabilities never change for a
 * (client, iteration, task), so the cache keeps the last list per client and derives only those
 * of tasks it has not listed before. A task's secret, the first of the two, is the same for every
 * client: it is derived once per task and kept per iteration (capcache_prune_iterations forgets an
 * iteration), so a shared job's first heartbeats cost one derivation per client and task.
 *
 * Soft state of the dispatcher's shell: not journaled (a restarted dispatcher derives again on
 * the first heartbeats); an entry goes when its client is released (capcache_prune). Pure: no
 * clock, no I/O; one thread (the dispatcher's loop). */
#ifndef SLUICE_DISPATCHER_CAPCACHE_H
#define SLUICE_DISPATCHER_CAPCACHE_H

#include "common/cap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct capcache_entry {
    uint64_t client_id, iteration_id;
    uint64_t *task_ids; /* increasing */
    uint8_t (*keys)[CAP_KEY_LEN];
    size_t n;
};

/* The task secrets of one iteration. */
struct capcache_task_key {
    uint64_t task_id;
    uint8_t key[CAP_KEY_LEN];
};
struct capcache_tasks {
    uint64_t iteration_id;
    struct capcache_task_key *v; /* sorted by task_id */
    size_t n, cap;
};

struct capcache {
    struct capcache_entry *v; /* sorted by client_id */
    size_t n, cap;
    struct capcache_tasks *its; /* sorted by iteration_id */
    size_t nits, capits;
    uint64_t derived;      /* capabilities derived (misses), for tests and curiosity */
    uint64_t task_derived; /* task secrets derived */
};

void capcache_init(struct capcache *c);
void capcache_release(struct capcache *c);

/* Fills out[i] with client_id's capability for task task_ids[i] of iteration_id, whose secret is
 * iteration_key; task_ids must be increasing. Capabilities listed by the client's previous call
 * for the same iteration are taken from the cache, the others derived; the cache then holds
 * exactly this list for the client. Out of memory only costs the caching (everything is derived
 * and the client's entry dropped): out is always filled. */
void capcache_client_keys(struct capcache *c, uint64_t client_id, uint64_t iteration_id,
                          const uint8_t iteration_key[CAP_KEY_LEN], const uint64_t *task_ids,
                          size_t n, uint8_t (*out)[CAP_KEY_LEN]);

/* Drops the entries of clients for which alive(user, client_id) is false. */
void capcache_prune(struct capcache *c, bool (*alive)(void *user, uint64_t client_id), void *user);

/* Drops the task secrets of iterations for which alive(user, iteration_id) is false. */
void capcache_prune_iterations(struct capcache *c, bool (*alive)(void *user, uint64_t iteration_id),
                               void *user);

#endif
