/* Capabilities: the secrets that make a client's or a worker's handle unguessable.
 *
 * Ids (clients, tasks, workers' incarnations) are small counters or are shown by status, so they
 * name things but prove nothing. What proves a right is a secret:
 *   - an iteration's secret (CAP_KEY_LEN random bytes, drawn by the dispatcher when it creates
 *     the iteration and journaled with it); it never leaves the dispatcher;
 *   - a client's capability at the dispatcher, cap_client_key(iteration secret, client id);
 *   - a task's secret, cap_task_key(iteration secret, task id), sent to the task's worker only;
 *   - a client's capability for a task, cap_client_key(task secret, client id), which the
 *     dispatcher lists with the task in the client's heartbeat replies.
 * Every derivation is HMAC-SHA256 under the parent secret of a label and the id, cut to
 * CAP_KEY_LEN bytes. The dispatcher and the workers recompute a capability to check a request, so
 * nothing per client is stored; knowing one capability tells nothing of another, nor of the
 * secret it came from; and a worker, knowing only its own tasks' secrets, can mint capabilities
 * for nothing but its own tasks.
 *   - a worker's secret (random, drawn by the worker process at its start, registered with its
 *     first heartbeat).
 * Comparisons take constant time. Secrets are never logged. Loop-thread agnostic: every function
 * here is thread-safe. */
#ifndef SLUICE_COMMON_CAP_H
#define SLUICE_COMMON_CAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CAP_KEY_LEN 16

/* Fills out with CAP_KEY_LEN bytes from the kernel's random source. Returns 0 or a negative
 * errno (the random source failed: no secret may be made up instead). */
int cap_random(uint8_t out[CAP_KEY_LEN]);

/* The capability of client client_id under secret (an iteration's or a task's). */
void cap_client_key(const uint8_t secret[CAP_KEY_LEN], uint64_t client_id,
                    uint8_t out[CAP_KEY_LEN]);

/* The secret of task task_id of the iteration whose secret is iteration_key. */
void cap_task_key(const uint8_t iteration_key[CAP_KEY_LEN], uint64_t task_id,
                  uint8_t out[CAP_KEY_LEN]);

/* Whether presented (len bytes; may be NULL when len is 0) is the capability of client_id under
 * secret, compared in constant time. */
bool cap_client_ok(const uint8_t secret[CAP_KEY_LEN], uint64_t client_id, const uint8_t *presented,
                   size_t len);

#endif
