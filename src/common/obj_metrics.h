/* The counters of a process's object-store requests (pipeline/objstore.h) as metrics, under the
 * same names and help text in the dispatcher's registry (its listings and Parquet footers) and
 * the worker's (its reads):
 *
 *   sluice_object_requests_total{op,code}   counter: op "get", "list", "put" or
 *                                           "delete"; code the HTTP status,
 *                                           or "error" for an attempt that got no answer
 *   sluice_object_bytes_total               counter: object and listing bytes received
 *   sluice_object_bytes_sent_total          counter: object bytes sent (PUTs)
 *
 * Pure, like metrics.h: call on the thread that owns the registry. */
#ifndef SLUICE_COMMON_OBJ_METRICS_H
#define SLUICE_COMMON_OBJ_METRICS_H

#include <stdint.h>

struct metrics;        /* metrics.h */
struct metrics_family; /* metrics.h */
struct metrics_series; /* metrics.h */

/* What a request did: a ranged GET of an object's bytes, a ListObjectsV2 page, a PUT of an
 * object (a snapshot saved to s3://), or a DELETE. */
enum obj_op { OBJ_OP_GET, OBJ_OP_LIST, OBJ_OP_PUT, OBJ_OP_DELETE, OBJ_OP_COUNT };

/* Statuses 100..599 have a slot each; slot 0 counts attempts that got no answer (a reset, a
 * timeout, a refused connection). */
#define OBJ_STATUS_SLOTS 600u

/* A process's totals (objstore.h's obj_stats fills one). */
struct obj_stats {
    uint64_t requests[OBJ_OP_COUNT][OBJ_STATUS_SLOTS]; /* attempts, retries included */
    uint64_t bytes;                                    /* body bytes received */
    uint64_t bytes_sent;                               /* body bytes sent (PUTs, every attempt) */
};

/* Embedded in its owner; the family and series belong to the registry. */
struct obj_metrics {
    struct metrics_family *requests;
    struct metrics_series *bytes, *bytes_sent;
};

/* Makes the three families in reg, with the series {op="get",code="200"},
 * {op="list",code="200"}, {op="put",code="200"} and the byte counters' one series each, so that
 * all render before the first request.
 * Returns 0, or a negative code of metrics.h (reg may then hold some of them). */
int obj_metrics_create(struct metrics *reg, struct obj_metrics *m);

/* Sets the counters to s, making the series of each op and code counted for the first time.
 * Returns 0 or SLUICE_ERR_NOMEM (the counters set so far stay). */
int obj_metrics_set(struct obj_metrics *m, const struct obj_stats *s);

#endif
