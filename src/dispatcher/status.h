/* The dispatcher's status document: the JSON that StatusReply carries and `sluice status --json`
 * prints. Pure: built from the state alone, with jansson.
 *
 *   {
 *     "workers":  [{"id": 1, "address": "host:5051", "incarnation": "5f0c...e1" (16 hex digits),
 *                   "draining": false, "tasks": [3, 4]}],
 *     "datasets": [{"id": "1", "pipeline": "range(10) | map(square)", "compression": "auto"}],
 *     "jobs":     [{"id": 1, "name": "shared" (or null when anonymous), "dataset_id": "1",
 *                   "mode": "distributed_epoch", "iteration_id": 2, "repetition": 1,
 *                   "state": "active" | "finished" | "garbage_collected",
 *                   "clients": 2,
 *                   "tasks": [{"id": 3, "worker": "host:5051", "finished": false}],
 *                   "splits": {"total": 8 (null when endless), "cursor": 5, "leased": 2,
 *                              "returned": 1, "finished": 2}}]
 *   }
 *
 * Workers are listed by id, datasets by id, jobs by id. "splits" is present only for
 * distributed_epoch jobs whose iteration is not collected; "returned" counts splits handed back
 * by a lost worker and waiting to be leased again. The incarnation is a hex string because a
 * 64-bit value does not survive JSON numbers. */
#ifndef SLUICE_DISPATCHER_STATUS_H
#define SLUICE_DISPATCHER_STATUS_H

#include "state.h"

/* Builds the document. On success returns 0 and *out is a NUL-terminated, malloc'd string the
 * caller frees with free(). Returns SLUICE_ERR_NOMEM on allocation failure. */
int status_json(const struct state *s, char **out);

#endif
