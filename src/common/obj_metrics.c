#include "obj_metrics.h"

#include "metrics.h"

#include <stddef.h>
#include <stdio.h>

static const char *const op_names[OBJ_OP_COUNT] = {"get", "list", "put", "delete"};

static int series(struct obj_metrics *m, size_t op, size_t slot, struct metrics_series **out)
{
    char code[24]; /* "error" or a status: 20 digits at most */
    if (slot == 0)
        snprintf(code, sizeof code, "error");
    else
        snprintf(code, sizeof code, "%zu", slot);
    struct metrics_label labels[] = {{"op", op_names[op]}, {"code", code}};
    return metrics_series_get(m->requests, labels, 2, out);
}

int obj_metrics_create(struct metrics *reg, struct obj_metrics *m)
{
    struct metrics_series *s;
    int rc = metrics_counter(
        reg, "sluice_object_requests_total",
        "Object-store requests (s3://, https://) this process made, retries "
        "included, by operation (get, list, put, delete) and HTTP status (error: none "
        "came).",
        METRICS_U64, &m->requests);
    for (size_t op = 0; rc == 0 && op <= OBJ_OP_PUT; op++)
        rc = series(m, op, 200, &s);
    if (rc == 0)
        rc = metrics_scalar(reg, true, "sluice_object_bytes_total",
                            "Bytes of objects and listings this process received from object "
                            "stores.",
                            METRICS_U64, &m->bytes);
    if (rc == 0)
        rc = metrics_scalar(reg, true, "sluice_object_bytes_sent_total",
                            "Bytes of objects this process sent to object stores (the chunks "
                            "and files of a snapshot saved there), every attempt counted.",
                            METRICS_U64, &m->bytes_sent);
    return rc;
}

int obj_metrics_set(struct obj_metrics *m, const struct obj_stats *s)
{
    for (size_t op = 0; op < OBJ_OP_COUNT; op++)
        for (size_t slot = 0; slot < OBJ_STATUS_SLOTS; slot++) {
            if (s->requests[op][slot] == 0)
                continue;
            struct metrics_series *x;
            int rc = series(m, op, slot, &x);
            if (rc < 0)
                return rc;
            metrics_set_u64(x, s->requests[op][slot]);
        }
    metrics_set_u64(m->bytes, s->bytes);
    metrics_set_u64(m->bytes_sent, s->bytes_sent);
    return 0;
}
