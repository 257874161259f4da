/* A task's shared element buffer, its life (start, drain, stop, free), takes by the serving side
 * and split leases (see task.h); its producers' slices are in task_producers.c.
 *
 * Locks: each producer has a mutex that guards only its private chunk, held while it appends an
 * element; the task mutex guards the buffer, the chunk free list, the lease queue, the plan, the
 * producers' parking and the task's state. The order is producer mutex, then task mutex, then the
 * pool's mutex (pool_wake). The loop thread takes the task mutex for short, bounded sections and
 * a producer mutex only with a try-lock, so it never waits on a pipeline. Invariant: a chunk is
 * either private to one producer (p->chunk, or p->ext), in the buffer, in the free list, or held
 * by a take until task_take_release.
 *
 * Parking: a producer parks (p->park, under the task mutex) instead of waiting; whoever changes
 * what it waits for queues it again on the pool under the same mutex (task_unpark_locked): a
 * take that brings the buffer under its bound, a lease granted, a drain, a stop or a failure. A
 * task is freed only once every producer has exited (alive) and no slice of it runs (in_slice):
 * a queued producer has not exited, and a slice's last access to the task is its in_slice. */
#include "task_internal.h"

#include "common/error.h"
#include "common/log.h"
#include "common/shm_region.h"
#include "pipeline/codec.h"
#include "pipeline/element.h"
#include "pipeline/iter.h"
#include "pipeline/split.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keep at most this many spare chunks (beyond one per producer) for reuse, so a steady stream
 * neither allocates nor faults in fresh pages per chunk. Chunks grown far past the publish size
 * by huge elements are freed instead. */
#define TASK_FREE_SPARE 8u
#define TASK_FREE_MAX_CAP (2u * TASK_CHUNK_BYTES)

bool task_over_limit(const struct task *t)
{
    return t->buf.bytes >= t->max_bytes || t->buf.count >= t->max_records ||
           t->buf.chunks >= TASK_BUFFER_CHUNKS;
}

/* Records the first failure and stops the producers. Task mutex held. */
void task_fail_locked(struct task *t, int code, const char *msg)
{
    if (t->err_code == 0) {
        t->err_code = code;
        snprintf(t->err_msg, sizeof t->err_msg, "%s", msg && *msg ? msg : sluice_strerror(code));
    }
    atomic_store(&t->stop, 1);
    atomic_store(&t->cancel.cancel, 1);
    task_unpark_locked(t, PARK_NONE);
}

void task_unpark_locked(struct task *t, enum producer_park why)
{
    uint64_t now = 0;
    for (unsigned i = 0; i < t->nproducers; i++) {
        struct producer *p = &t->producers[i];
        if (p->park == PARK_NONE || (why != PARK_NONE && p->park != why))
            continue;
        if (p->park == PARK_SPACE) {
            if (now == 0)
                now = uv_hrtime();
            t->space_waiters--;
            t->nblocked--;
            t->blocked_since_sum -= p->parked_since;
            t->blocked_ns += now - p->parked_since;
        } else {
            t->lease_waiters--;
        }
        p->park = PARK_NONE;
        pool_wake(t->pool, &p->job);
    }
}

/* Returns a spare chunk or a new empty one; NULL when out of memory. Task mutex not held. */
struct wbuf_chunk *task_chunk_get(struct task *t)
{
    uv_mutex_lock(&t->mu);
    struct wbuf_chunk *c = t->free_chunks;
    if (c) {
        t->free_chunks = c->next;
        t->nfree--;
    }
    uv_mutex_unlock(&t->mu);
    if (!c)
        c = calloc(1, sizeof *c);
    return c;
}

/* Keeps the block of a written external chunk for reuse, or frees it. Task mutex held. */
static void spare_put_locked(struct task *t, uint8_t *block, size_t cap)
{
    t->ext_bytes = t->ext_bytes > cap ? t->ext_bytes - cap : 0;
    /* Idle memory stays within the buffer's own byte bound, or TASK_SPARE_BYTES when that is
     * larger, so that elements larger than the buffer (32 MiB against 16) still reuse blocks;
     * or within the most the task's external chunks held at once (what it held then, so the
     * task never holds more than at its peak): with 32 MiB elements a stream has 6 or 7 blocks
     * out at times (the buffer, the producers' pending chunks, a reply being written), and a
     * bound of 5 freed some and mapped fresh ones (zeroed page by page) for 1 element in 12. */
    uint64_t limit = t->max_bytes > TASK_SPARE_BYTES ? t->max_bytes : TASK_SPARE_BYTES;
    if (t->ext_peak > limit)
        limit = t->ext_peak;
    if (cap > limit) {
        free(block);
        return;
    }
    /* The oldest go first: the newest are likelier to be in the caches. */
    while (t->nspare > 0 && (t->nspare == TASK_SPARE_BLOCKS || t->spare_bytes + cap > limit)) {
        free(t->spare[0].p);
        t->spare_bytes -= t->spare[0].cap;
        memmove(&t->spare[0], &t->spare[1], (t->nspare - 1) * sizeof t->spare[0]);
        t->nspare--;
    }
    t->spare[t->nspare++] = (struct spare_block){block, cap};
    t->spare_bytes += cap;
}

/* Makes a used chunk empty and keeps it for reuse, or frees it. Task mutex held. An external
 * chunk's block goes to the spare blocks and the chunk itself is freed: its small data buffer
 * is no use to a producer filling a chunk of many records. */
static void chunk_put_locked(struct task *t, struct wbuf_chunk *c)
{
    if (c->ext && c->ext_lender) {
        t->ext_bytes = t->ext_bytes > c->ext_cap ? t->ext_bytes - c->ext_cap : 0;
        wbuf_chunk_free(c);
        return;
    }
    if (c->ext) {
        spare_put_locked(t, c->ext, c->ext_cap);
        c->ext = NULL;
        wbuf_chunk_free(c);
        return;
    }
    if (c->data.cap > TASK_FREE_MAX_CAP || t->nfree >= t->nproducers + TASK_FREE_SPARE) {
        wbuf_chunk_free(c);
        return;
    }
    c->data.len = 0;
    c->pos = 0;
    c->count = c->taken = 0;
    c->born_ns = 0;
    c->tagged = c->ends = false;
    c->seq = 0;
    c->next = t->free_chunks;
    t->free_chunks = c;
    t->nfree++;
}

void task_wake_loop(struct task *t)
{
    uv_async_t *wake = atomic_load(&t->wake);
    if (wake)
        uv_async_send(wake);
}

static int task_alloc(uint64_t id, struct task **out)
{
    struct task *t = calloc(1, sizeof *t);
    if (!t)
        return SLUICE_ERR_NOMEM;
    t->id = id;
    wbuf_init(&t->buf);
    splittab_init(&t->splits);
    atomic_init(&t->in_slice, 0);
    if (uv_mutex_init(&t->mu) != 0) {
        free(t);
        return SLUICE_ERR_NOMEM;
    }
    *out = t;
    return 0;
}

int task_new_failed(uint64_t id, int code, const char *msg, struct task **out)
{
    struct task *t;
    int rc = task_alloc(id, &t);
    if (rc < 0)
        return rc;
    t->started = true;
    t->done = true;
    task_fail_locked(t, code, msg);
    *out = t;
    return 0;
}

/* A task nobody reads thus takes no turn on the pool, buffers nothing and holds no lease,
 * whatever the number of jobs a client opens. */
void task_begin(struct task *t)
{
    if (t->started)
        return;
    t->started = true;
    for (unsigned i = 0; i < t->nproducers; i++)
        pool_wake(t->pool, &t->producers[i].job);
}

/* Loop. A task stopped or drained before any reader asked ends without running. */
static void end_unstarted(struct task *t)
{
    if (t->started)
        return;
    t->started = true;
    uv_mutex_lock(&t->mu);
    t->alive = 0;
    t->done = true;
    uv_mutex_unlock(&t->mu);
}

int task_start(const struct task_config *cfg, struct pipe_spec *spec, struct task **out, char *err,
               size_t errlen)
{
    struct task *t;
    int rc = task_alloc(cfg->id, &t);
    if (rc < 0) {
        pipe_spec_free(spec);
        return err_set(err, errlen, rc, "starting task: %s", sluice_strerror(rc));
    }
    t->mode = cfg->mode;
    t->compress = cfg->compress;
    t->num_workers = cfg->num_workers;
    t->worker_index = cfg->worker_index;
    t->reg = cfg->reg;
    atomic_init(&t->wake, cfg->wake);
    t->max_bytes = cfg->buffer_bytes ? cfg->buffer_bytes : TASK_BUFFER_BYTES;
    t->max_records = cfg->buffer_records ? cfg->buffer_records : TASK_BUFFER_RECORDS;
    t->limits.max_element_bytes = cfg->max_element_bytes;
    t->limits.cancel_parent = &t->cancel;
    t->limits.prof = &t->prof;
    t->spec = spec;
    if (cfg->snapshot_path && cfg->snapshot_path[0]) {
        if (cfg->mode != SLUICE_DISTRIBUTED_EPOCH) {
            rc = SLUICE_ERR_INVALID;
            goto fail;
        }
        t->snap_dir = strdup(cfg->snapshot_path);
        if (!t->snap_dir) {
            rc = SLUICE_ERR_NOMEM;
            goto fail;
        }
    }
    unsigned n = 1;
    if (cfg->mode == SLUICE_DISTRIBUTED_EPOCH) {
        n = cfg->producers ? cfg->producers : 1;
        /* Hold two splits per producer, at least four, and ask again at half of that. */
        rc = lease_queue_init(&t->lease, 2 * (size_t)n < 4 ? 4 : 2 * (size_t)n);
        if (rc < 0)
            goto fail;
    }
    t->producers = calloc(n, sizeof *t->producers);
    if (!t->producers) {
        rc = SLUICE_ERR_NOMEM;
        goto fail;
    }
    /* A save's task runs on threads of its own: a read of the snapshot it writes waits inside
     * the pipeline for the chunks (snapsrc.h), and reads waiting on the worker's pool must not
     * be able to keep the save that would end their wait from running. */
    t->pool = cfg->pool;
    if (!t->pool || t->snap_dir) {
        rc = pool_create(n, &t->own_pool);
        if (rc < 0)
            goto fail;
        t->pool = t->own_pool;
    }
    fair_share_init(&t->share, cfg->weight);
    for (unsigned i = 0; i < n; i++) {
        struct producer *p = &t->producers[i];
        p->t = t;
        p->job.run = task_producer_slice;
        p->job.share = &t->share;
        pipe_elem_init(&p->elem);
        if (uv_mutex_init(&p->mu) != 0) {
            rc = SLUICE_ERR_NOMEM;
            goto fail;
        }
        t->nproducers++;
    }
    t->alive = n;
    /* A save's task has no reader to wait for; any other runs once a reader first asks. */
    if (t->snap_dir)
        task_begin(t);
    *out = t;
    return 0;
fail:
    task_free(t);
    return err_set(err, errlen, rc, "starting task: %s", sluice_strerror(rc));
}

uint64_t task_id(const struct task *t)
{
    return t->id;
}

bool task_is_distributed(const struct task *t)
{
    return t->mode == SLUICE_DISTRIBUTED_EPOCH && t->nproducers > 0;
}

struct owned_take {
    struct split_tables *splits;
    uint64_t client, conn, now_ms;
};

/* wbuf_front's filter for a reader that takes splits whole: chunks of splits it owns or may
 * take now (splitown.h). */
static bool owned_ok(const struct wbuf_chunk *c, void *ctx)
{
    struct owned_take *o = ctx;
    if (!c->tagged)
        return true;
    uint64_t was = splittab_owner(o->splits, c->seq);
    bool ok = splittab_may_take(o->splits, c->seq, o->client, o->conn, o->now_ms);
    if (ok && was && was != o->client)
        log_debug("split %" PRIu64 " goes from reader %016" PRIx64
                  " (idle, or its connection closed) to reader %016" PRIx64,
                  c->seq, was, o->client);
    return ok;
}

/* Owners end with their split's end marker. Task mutex held. */
static void drop_owners(struct task *t, const struct wbuf_chunk *spent)
{
    for (const struct wbuf_chunk *c = spent; c; c = c->next)
        if (c->tagged && c->ends)
            splittab_owner_drop(&t->splits, c->seq);
}

static int take(struct task *t, uint32_t max_elements, uint64_t max_bytes, struct pipe_buf *scratch,
                bool whole, uint64_t owner, uint64_t conn, struct task_take *out)
{
    memset(out, 0, sizeof *out);
    task_begin(t);
    uv_mutex_lock(&t->mu);
    int rc = 0;
    if (owner && t->buf.head) {
        /* Only the splits this reader may have, brought to the head. */
        struct owned_take o = {
            .splits = &t->splits, .client = owner, .conn = conn, .now_ms = uv_hrtime() / 1000000u};
        uint64_t records = wbuf_front(&t->buf, owned_ok, &o, TASK_TAKE_MAX_CHUNKS, max_bytes);
        if (records == 0) {
            uv_mutex_unlock(&t->mu);
            return TASK_TAKE_EMPTY;
        }
        if (records < max_elements)
            max_elements = (uint32_t)records;
    }
    if (whole)
        rc = wbuf_take_whole(&t->buf, max_elements, max_bytes, TASK_TAKE_MAX_CHUNKS, &out->wb);
    if (rc == 0 && out->wb.count == 0)
        rc = wbuf_take(&t->buf, max_elements, max_bytes, scratch, &out->wb);
    if (rc < 0) {
        uv_mutex_unlock(&t->mu);
        return rc;
    }
    if (out->wb.count > 0) {
        rc = TASK_TAKE_DATA;
        drop_owners(t, out->wb.spent);
        if (t->space_waiters && !task_over_limit(t))
            task_unpark_locked(t, PARK_SPACE);
    } else if (!t->done) {
        rc = TASK_TAKE_EMPTY;
    } else if (t->err_code) {
        rc = TASK_TAKE_FAILED;
        out->code = t->err_code;
        out->msg = t->err_msg; /* never changes once set */
    } else {
        rc = TASK_TAKE_END;
    }
    uv_mutex_unlock(&t->mu);
    return rc;
}

int task_take(struct task *t, uint32_t max_elements, uint64_t max_bytes, struct pipe_buf *scratch,
              struct task_take *out)
{
    return take(t, max_elements, max_bytes, scratch, false, 0, 0, out);
}

int task_take_whole(struct task *t, uint32_t max_elements, uint64_t max_bytes, uint64_t owner,
                    uint64_t conn, struct pipe_buf *scratch, struct task_take *out)
{
    return take(t, max_elements, max_bytes, scratch, true, owner, conn, out);
}

bool task_conn_closed(struct task *t, uint64_t conn)
{
    uv_mutex_lock(&t->mu);
    size_t n = splittab_conn_closed(&t->splits, conn);
    uv_mutex_unlock(&t->mu);
    return n > 0;
}

size_t task_lease_drop(struct task *t, const uint64_t *seqs, size_t n)
{
    uv_mutex_lock(&t->mu);
    size_t dropped = lease_drop(&t->lease, seqs, n);
    uv_mutex_unlock(&t->mu);
    return dropped;
}

int task_lease_resume(struct task *t, uint64_t seq, const uint64_t *covered, size_t ncovered,
                      uint64_t owner)
{
    uv_mutex_lock(&t->mu);
    int rc = splittab_resume_put(&t->splits, seq, covered, ncovered, owner);
    uv_mutex_unlock(&t->mu);
    return rc;
}

void task_take_release(struct task *t, struct task_take *tk)
{
    if (!tk->wb.spent)
        return;
    uv_mutex_lock(&t->mu);
    struct wbuf_chunk *c = tk->wb.spent;
    while (c) {
        struct wbuf_chunk *next = c->next;
        chunk_put_locked(t, c);
        c = next;
    }
    uv_mutex_unlock(&t->mu);
    tk->wb.spent = NULL;
}

void task_set_waiting(struct task *t, bool waiting)
{
    atomic_store_explicit(&t->waiting, waiting ? 1 : 0, memory_order_relaxed);
}

uint64_t task_steal(struct task *t, uint64_t now_ns)
{
    uint64_t n = 0;
    if (!t->started)
        return 0;
    for (unsigned i = 0; i < t->nproducers; i++) {
        struct producer *p = &t->producers[i];
        if (uv_mutex_trylock(&p->mu) != 0)
            continue; /* appending or publishing: it looks at the linger itself */
        struct wbuf_chunk *c = p->chunk;
        if (c && c->count > 0 && now_ns - c->born_ns >= TASK_LINGER_NS) {
            uv_mutex_lock(&t->mu);
            if (!atomic_load(&t->stop)) {
                wbuf_push(&t->buf, c);
                t->produced += c->count;
                n += c->count;
                p->chunk = NULL;
            }
            uv_mutex_unlock(&t->mu);
        }
        uv_mutex_unlock(&p->mu);
    }
    return n;
}

void task_progress(struct task *t, struct task_progress *out)
{
    out->busy_ns = t->pool ? pool_share_busy_ns(t->pool, &t->share) : 0;
    uv_mutex_lock(&t->mu);
    out->done = t->done;
    out->failed = t->err_code != 0;
    out->buffered = t->buf.count;
    out->buffered_bytes = t->buf.bytes;
    out->produced = t->produced;
    out->chunks_committed = t->chunks_committed;
    out->blocked_ns = t->blocked_ns + (uint64_t)t->nblocked * uv_hrtime() - t->blocked_since_sum;
    out->producers = t->nproducers;
    for (size_t i = 0; i < PIPE_PROF_STAGES; i++)
        out->stage_ns[i] = atomic_load_explicit(&t->prof.ns[i], memory_order_relaxed);
    out->finished = t->done && !out->failed && t->buf.count == 0 &&
                    (t->mode != SLUICE_DISTRIBUTED_EPOCH || lease_settled(&t->lease));
    out->settled = t->mode == SLUICE_DISTRIBUTED_EPOCH && !out->failed && t->buf.count == 0 &&
                   t->lease.len == 0 && t->lease.busy == 0;
    uv_mutex_unlock(&t->mu);
}

bool task_lease_want(struct task *t, uint64_t now_ms, bool topup, uint32_t *max_splits,
                     const uint64_t **finished, size_t *nfinished, const uint64_t **returned,
                     size_t *nreturned)
{
    if (!task_is_distributed(t) || !t->started)
        return false;
    bool want = false;
    uv_mutex_lock(&t->mu);
    if (atomic_load(&t->stop) ||
        !(topup ? lease_want_topup : lease_want)(&t->lease, now_ms, max_splits, nfinished))
        goto out;
    if (*nfinished > t->report_cap) {
        uint64_t *r = realloc(t->report, *nfinished * sizeof *r);
        if (!r)
            goto out; /* try again on a later pass */
        t->report = r;
        t->report_cap = *nfinished;
    }
    if (*nfinished)
        memcpy(t->report, t->lease.finished, *nfinished * sizeof *t->report);
    *finished = t->report;
    lease_sent(&t->lease, *max_splits, *nfinished);
    size_t nret;
    const uint64_t *ret = lease_returning(&t->lease, &nret);
    if (nret > t->returned_cap) {
        uint64_t *r = realloc(t->returned, nret * sizeof *r);
        if (!r) {
            /* Sent without them; the request goes again, whole, after this one fails. */
            lease_failed(&t->lease, now_ms);
            goto out;
        }
        t->returned = r;
        t->returned_cap = nret;
    }
    if (nret)
        memcpy(t->returned, ret, nret * sizeof *ret);
    *returned = t->returned;
    *nreturned = nret;
    want = true;
out:
    uv_mutex_unlock(&t->mu);
    return want;
}

void task_lease_failed(struct task *t, uint64_t now_ms)
{
    uv_mutex_lock(&t->mu);
    lease_failed(&t->lease, now_ms);
    uv_mutex_unlock(&t->mu);
}

/* Checks a plan against what the task's own dataset says. For range and list sources the
 * numbers are arithmetic on the dataset; file lists are the dispatcher's to decide. */
static int check_plan(const struct task *t, const struct split_plan *plan, char *err, size_t errlen)
{
    int rc = split_plan_check(plan, err, errlen);
    if (rc < 0 || plan->kind == SPLIT_FILES)
        return rc;
    struct pipe_split_provider prov;
    rc = pipe_split_provider_init(&prov, t->spec, plan->split_size, err, errlen);
    if (rc < 0)
        return rc;
    const struct split_plan *want = &prov.plan;
    if (want->source_len != plan->source_len || want->per_pass != plan->per_pass ||
        want->passes != plan->passes)
        rc = err_set(err, errlen, SLUICE_ERR_CORRUPT,
                     "split plan does not match the dataset: %llu elements in %llu splits per "
                     "pass, %llu passes; the dataset gives %llu, %llu, %llu",
                     (unsigned long long)plan->source_len, (unsigned long long)plan->per_pass,
                     (unsigned long long)plan->passes, (unsigned long long)want->source_len,
                     (unsigned long long)want->per_pass, (unsigned long long)want->passes);
    pipe_split_provider_release(&prov);
    return rc;
}

int task_lease_granted(struct task *t, struct split_plan *plan, const uint64_t *seqs, size_t n,
                       bool end_of_splits, uint64_t now_ms)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = 0;
    bool adopt = false;
    if (plan) {
        pipe_split_plan_reads(t->spec, plan);
        /* have_plan is written only on this thread, so reading it unlocked is safe. */
        if (!t->have_plan) {
            rc = check_plan(t, plan, err, sizeof err);
            adopt = rc == 0;
        }
    }
    if (rc == 0 && n > 0 && !t->have_plan && !adopt)
        rc = err_set(err, sizeof err, SLUICE_ERR_PROTOCOL, "splits were leased without a plan");

    uv_mutex_lock(&t->mu);
    if (adopt) {
        t->plan = *plan;
        memset(plan, 0, sizeof *plan);
        t->have_plan = true;
    }
    int grc =
        lease_granted(&t->lease, rc == 0 ? seqs : NULL, rc == 0 ? n : 0, end_of_splits, now_ms);
    if (rc == 0 && grc < 0)
        rc = err_set(err, sizeof err, grc, "%s", sluice_strerror(grc));
    if (rc < 0)
        task_fail_locked(t, rc, err);
    else
        task_unpark_locked(t, PARK_LEASE);
    uv_mutex_unlock(&t->mu);
    if (plan)
        split_plan_release(plan);
    return rc;
}

int task_error(struct task *t, const char **msg)
{
    uv_mutex_lock(&t->mu);
    int code = t->err_code;
    *msg = t->err_msg;
    uv_mutex_unlock(&t->mu);
    return code;
}

void task_fail(struct task *t, int code, const char *msg)
{
    uv_mutex_lock(&t->mu);
    task_fail_locked(t, code, msg);
    uv_mutex_unlock(&t->mu);
}

int task_drain(struct task *t)
{
    end_unstarted(t);
    if (!task_is_distributed(t)) {
        task_stop(t);
        return 0;
    }
    uv_mutex_lock(&t->mu);
    int rc = lease_drain(&t->lease);
    task_unpark_locked(t, PARK_LEASE);
    uv_mutex_unlock(&t->mu);
    return rc;
}

void task_stop(struct task *t)
{
    end_unstarted(t);
    uv_mutex_lock(&t->mu);
    atomic_store(&t->stop, 1);
    atomic_store(&t->cancel.cancel, 1);
    task_unpark_locked(t, PARK_NONE);
    uv_mutex_unlock(&t->mu);
}

static atomic_uint abandoned;

unsigned task_retire(struct task *t)
{
    /* A pool of the task's own is no use to any other task. */
    if (!t->started || t->own_pool)
        return 0;
    unsigned n = 0;
    for (unsigned i = 0; i < t->nproducers; i++)
        if (pool_retire(t->pool, &t->producers[i].job) != 0)
            n++;
    return n;
}

void task_abandon(struct task *t)
{
    task_stop(t);
    atomic_store(&t->wake, NULL);
    task_retire(t);
    atomic_fetch_add(&abandoned, 1);
}

unsigned task_abandoned_count(void)
{
    return atomic_load(&abandoned);
}

bool task_exited(struct task *t)
{
    uv_mutex_lock(&t->mu);
    bool exited = t->alive == 0;
    uv_mutex_unlock(&t->mu);
    return exited && atomic_load(&t->in_slice) == 0;
}

void task_free(struct task *t)
{
    if (!t)
        return;
    /* Its producers have exited: its own pool's threads are idle. */
    pool_destroy(t->own_pool);
    for (unsigned i = 0; i < t->nproducers; i++) {
        struct producer *p = &t->producers[i];
        if (p->run)
            pipe_run_free(p->run);
        pipe_spec_free(p->sharded);
        wbuf_chunk_free(p->ext);
        wbuf_chunk_free(p->chunk);
        pipe_elem_release(&p->elem);
        pipe_buf_release(&p->scratch);
        ranges_release(&p->skip);
        uv_mutex_destroy(&p->mu);
    }
    free(t->producers);
    wbuf_clear(&t->buf);
    while (t->free_chunks) {
        struct wbuf_chunk *c = t->free_chunks;
        t->free_chunks = c->next;
        wbuf_chunk_free(c);
    }
    for (unsigned i = 0; i < t->nspare; i++)
        free(t->spare[i].p);
    shm_region_unref(t->arena);
    lease_queue_release(&t->lease);
    splittab_release(&t->splits);
    split_plan_release(&t->plan);
    free(t->report);
    free(t->returned);
    pipe_spec_free(t->spec);
    free(t->snap_dir);
    uv_mutex_destroy(&t->mu);
    free(t);
}

void task_set_arena(struct task *t, struct shm_region *r)
{
    if (r && shm_region_arena_size(r) == 0)
        r = NULL;
    uv_mutex_lock(&t->mu);
    struct shm_region *old = t->arena;
    if (r)
        shm_region_ref(r);
    t->arena = r;
    uv_mutex_unlock(&t->mu);
    shm_region_unref(old);
}

void task_chunk_evict(struct wbuf_chunk *c, const struct shm_region *r)
{
    if (!c || !c->ext || !task_is_arena_loan(c->ext_lender) ||
        ((struct arena_loan *)c->ext_lender)->region != r)
        return;
    uint8_t *p = malloc(c->ext_cap);
    if (!p)
        return;
    memcpy(p, c->ext, c->ext_len);
    wbuf_chunk_drop_ext(c);
    c->ext = p;
}

void task_evict_arena(struct task *t, const struct shm_region *r)
{
    for (unsigned i = 0; i < t->nproducers; i++) {
        struct producer *p = &t->producers[i];
        /* A producer appending right now pushes its pending chunk soon; the loop never waits
         * for one (as task_steal). */
        if (uv_mutex_trylock(&p->mu) != 0)
            continue;
        task_chunk_evict(p->ext, r);
        uv_mutex_unlock(&p->mu);
    }
    uv_mutex_lock(&t->mu);
    for (struct wbuf_chunk *c = t->buf.head; c; c = c->next)
        task_chunk_evict(c, r);
    /* Producers parked for room look at their element's blocks when they wake, and park
     * again. */
    atomic_fetch_add(&t->evictions, 1);
    if (t->space_waiters)
        task_unpark_locked(t, PARK_SPACE);
    uv_mutex_unlock(&t->mu);
}

void task_stages(const struct task *t, const struct task_progress *tp, uint64_t send_ns,
                 struct task_stage *out)
{
    for (unsigned i = 0; i < PIPE_PROF_STAGES; i++) {
        out[i].name[0] = '\0';
        if (t->spec)
            pipe_prof_stage_name(t->spec, i, out[i].name, sizeof out[i].name);
        out[i].ns = out[i].name[0] ? tp->stage_ns[i] : 0;
    }
    snprintf(out[TASK_STAGE_BUFFER_WAIT].name, sizeof out[0].name, "buffer_wait");
    out[TASK_STAGE_BUFFER_WAIT].ns = tp->blocked_ns;
    snprintf(out[TASK_STAGE_SEND].name, sizeof out[0].name, "send");
    out[TASK_STAGE_SEND].ns = send_ns;
}
