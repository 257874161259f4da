/* Reading the dispatcher's status document (StatusReply.json, what `sluice status --json`
 * prints) with jansson. Pure: text in, text or a verdict out; any thread may call these.
 *
 * The document is a JSON object. These functions rely only on this much of its shape: top-level
 * arrays (or objects keyed by id) named "workers", "datasets" and "jobs", whose entries are
 * objects. Fields are looked up by name with a few accepted spellings (a job's dataset as
 * "dataset" or "dataset_id", counts as numbers or as arrays to count, ids as numbers or strings),
 * and anything missing shows as "-", so a document with more or fewer fields still renders.
 * Integers beyond int64 (random 64-bit incarnations may be), which jansson cannot hold, are read
 * as strings of their exact digits. */
#ifndef SLUICE_CLIENT_STATUS_JSON_H
#define SLUICE_CLIENT_STATUS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Renders the document as readable text: its top-level scalar fields as "name: value" lines,
 * then a table per section (workers: address, incarnation, tasks; datasets: id, pipeline; jobs:
 * id, name, dataset, mode, state, clients, tasks), columns aligned, every line ending in '\n'.
 * Columns of the figures a dispatcher may add are shown when some entry of the section has the
 * field: workers' DRAINING, BUFFERED, BUF_MB (buffered_bytes / 10^6), ELEM/S, MB/S and HEARTBEAT
 * (heartbeat_age_ms, as "85ms"); jobs' WORKERS, SPLITS ("finished/total" of the "splits" object,
 * "endless" for a null total), LEASED (splits.leased), ELEM/S and MB/S. Rates show one decimal,
 * megabytes two. A failed job's "error" follows the jobs table as "  job ID failed: TEXT".
 * On success *out is a malloc'd NUL-terminated string the caller frees. Returns 0,
 * SLUICE_ERR_CORRUPT with a message in err when json is not a JSON object, or
 * SLUICE_ERR_NOMEM. */
int status_json_table(const char *json, char **out, char *err, size_t errlen);

/* The attribution of one job (its "why" object, dispatcher/why.h) for `sluice status --why`:
 * job is a job id (decimal digits) or a job name (the newest job of that name). With as_json,
 * *out is the "why" object as compact JSON; otherwise its text with a newline. *out is malloc'd;
 * the caller frees it. Returns 0, SLUICE_ERR_CORRUPT (not a JSON object), SLUICE_ERR_NOT_FOUND
 * ("no job 'JOB'"), SLUICE_ERR_PROTOCOL (the job has no attribution: an older dispatcher) or
 * SLUICE_ERR_NOMEM, with a message in err. */
int status_json_why(const char *json, const char *job, bool as_json, char **out, char *err,
                    size_t errlen);

enum status_job_verdict {
    STATUS_JOB_UNKNOWN = -1, /* the document has no jobs section to tell from */
    STATUS_JOB_GONE = 0,     /* no job with the id, or one that differs from the reference */
    STATUS_JOB_PRESENT = 1   /* a job with the id, matching the reference */
};

/* What a reader knows of its job. */
struct status_job_ref {
    uint64_t id;
    const char *dataset_id; /* compared with "dataset" or "dataset_id" */
    const char *name;       /* "" for an anonymous job; compared with "name" (null means "") */
    const char *mode;       /* "parallel_epochs", ...; NULL: not compared */
    uint64_t iteration_id;  /* compared with "iteration_id"; 0: not compared */
};

/* Whether the document lists the job of ref: a job entry with ref->id whose fields, where the
 * entry has them, equal ref's. Unparsable text is STATUS_JOB_UNKNOWN. */
enum status_job_verdict status_json_job(const char *json, const struct status_job_ref *ref);

#endif
