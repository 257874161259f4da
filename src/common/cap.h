/* Capabilities: the secrets that make a client's or a worker's handle unguessable.
 *
 * Ids (clients, tasks, workers' incarnations) are small counters or are shown by status, so they
 * name things but prove nothing. What proves a right is a secret:
 *   - an iteration's secret (CAP_KEY_LEN random bytes, drawn by the dispatcher when it creates
 *     the iteration, journaled with it, and sent to the workers with each of its tasks);
 *   - a client's capability, cap_client_key(iteration secret, client id): HMAC-SHA256 of the
 *     client id under the iteration's secret, cut to CAP_KEY_LEN bytes. The dispatcher hands it
 *     to the client with its id; the dispatcher and the workers recompute it to check a request,
 *     so nothing per client is stored, and knowing one client's capability tells nothing of
 *     another's or of the iteration's secret;
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

/* The capability of client client_id of the iteration whose secret is iteration_key. */
void cap_client_key(const uint8_t iteration_key[CAP_KEY_LEN], uint64_t client_id,
                    uint8_t out[CAP_KEY_LEN]);

/* Whether presented (len bytes; may be NULL when len is 0) is the capability of client_id under
 * iteration_key, compared in constant time. */
bool cap_client_ok(const uint8_t iteration_key[CAP_KEY_LEN], uint64_t client_id,
                   const uint8_t *presented, size_t len);

#endif
