/* Producer threads and the shared element buffer of a task (see task.h).
 *
 * Locks: each producer has a mutex that guards only its private chunk, held while it appends an
 * element; the task mutex guards the buffer, the chunk free list, the lease queue, the plan and
 * the task's state. The order is producer mutex, then task mutex. The loop thread takes the
 * task mutex for short, bounded sections and a producer mutex only with a try-lock, so it never
 * waits on a pipeline. Invariant: a chunk is either private to one producer (p->chunk), in the
 * buffer, in the free list, or held by a take until task_take_release. */
#include "task.h"

#include "common/error.h"
#include "pipeline/codec.h"
#include "pipeline/element.h"
#include "pipeline/iter.h"
#include "pipeline/registry.h"
#include "pipeline/roots.h"
#include "pipeline/snapshot.h"
#include "pipeline/split.h"
#include "shard.h"

#include <limits.h>

#include <assert.h>
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

struct spare_block {
    uint8_t *p;
    size_t cap;
};

struct producer {
    struct task *t;
    uv_thread_t thread;
    uv_mutex_t mu; /* guards chunk */
    struct wbuf_chunk *chunk;
    struct sluice_element elem;
    struct pipe_buf scratch;
    uint64_t last_ns; /* when the producer last looked at the clock while a reader waited */
    /* Adaptive compression: after TASK_COMPRESS_PROBES elements in a row that snappy could not
     * shrink, the next skip_len elements are stored raw without trying (skip_left counts them
     * down); skip_len doubles while probes keep failing and resets when one pays. */
    unsigned misses;
    uint32_t skip_len, skip_left;
    /* distributed_epoch: every element is tagged with the split it comes from and its position
     * in it (codec.h), so a consumer can tell a split's elements apart when it is re-issued. */
    bool tagging;
    struct codec_tag tag;
};

struct task {
    uint64_t id;
    enum sluice_mode mode;
    bool compress;
    uint32_t num_workers, worker_index;
    const struct sluice_registry *reg;
    _Atomic(uv_async_t *) wake; /* NULL once the task is abandoned */
    uint64_t max_bytes, max_records;
    struct pipe_limits limits; /* read-only once the producers run */
    struct pipe_spec *spec;
    char *snap_dir;            /* a save's task: the snapshot directory (owned); NULL otherwise */
    uint64_t chunks_committed; /* task mutex */

    uv_mutex_t mu;
    uv_cond_t space_cv; /* producers waiting for room in the buffer */
    uv_cond_t work_cv;  /* producers waiting for splits */
    struct wbuf buf;
    struct wbuf_chunk *free_chunks;
    unsigned nfree;
    /* Blocks of external chunks that were written, kept (newest last) to be installed in a
     * producer's element in place of the block the next external chunk takes away. */
    struct spare_block spare[TASK_SPARE_BLOCKS];
    unsigned nspare;
    uint64_t spare_bytes; /* their total size, at most max_bytes */
    unsigned space_waiters;
    unsigned alive; /* producers not yet exited */
    bool done;
    uint64_t produced;
    uint64_t blocked_ns; /* summed over producers: time spent waiting for room in the buffer */
    /* Producers blocked right now, and the sum of the times they started to wait, so a long
     * block counts while it lasts rather than all at once when it ends. */
    unsigned nblocked;
    uint64_t blocked_since_sum;
    int err_code;
    char err_msg[SLUICE_ERRMSG_SIZE];
    struct lease_queue lease;
    struct split_plan plan;
    bool have_plan;

    atomic_int stop; /* set when stopped or failed: producers finish up and exit */
    /* Its cancel flag is set with stop; it is the parent of every run's context (limits), so a
     * pipeline blocked inside next() (a snapshot source waiting for a chunk) gives up too. */
    struct pipe_ctx cancel;
    atomic_int waiting; /* a reader waits on an empty buffer */

    uint64_t *report; /* loop only: finished seqs of the GetSplits in flight */
    size_t report_cap;
    uint64_t *returned; /* loop only: handed-back seqs of the GetSplits in flight */
    size_t returned_cap;

    struct producer *producers;
    bool started;        /* loop only: the producers were spawned, or the task ended unstarted */
    unsigned nproducers; /* producers whose mutex exists */
    unsigned nthreads;   /* producers whose thread was started (joined by task_free) */
};

#define TASK_COMPRESS_PROBES 4u
#define TASK_COMPRESS_SKIP_MIN 16u
#define TASK_COMPRESS_SKIP_MAX 4096u

static bool over_limit(const struct task *t)
{
    return t->buf.bytes >= t->max_bytes || t->buf.count >= t->max_records ||
           t->buf.chunks >= TASK_BUFFER_CHUNKS;
}

/* Records the first failure and stops the producers. Task mutex held. */
static void fail_locked(struct task *t, int code, const char *msg)
{
    if (t->err_code == 0) {
        t->err_code = code;
        snprintf(t->err_msg, sizeof t->err_msg, "%s", msg && *msg ? msg : sluice_strerror(code));
    }
    atomic_store(&t->stop, 1);
    atomic_store(&t->cancel.cancel, 1);
    uv_cond_broadcast(&t->space_cv);
    uv_cond_broadcast(&t->work_cv);
}

/* Returns a spare chunk or a new empty one; NULL when out of memory. Task mutex not held. */
static struct wbuf_chunk *chunk_get(struct task *t)
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
    /* Idle memory stays within the buffer's own byte bound. */
    if (cap > t->max_bytes) {
        free(block);
        return;
    }
    /* The oldest go first: the newest are likelier to be in the caches. */
    while (t->nspare > 0 &&
           (t->nspare == TASK_SPARE_BLOCKS || t->spare_bytes + cap > t->max_bytes)) {
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
    c->next = t->free_chunks;
    t->free_chunks = c;
    t->nfree++;
}

static void wake_loop(struct task *t)
{
    uv_async_t *wake = atomic_load(&t->wake);
    if (wake)
        uv_async_send(wake);
}

/* Pushes c into the buffer, first waiting while the buffer is over its bounds; with refill, p's
 * chunk is then replaced by a spare one (or none). Producer mutex held. Returns 0, or
 * SLUICE_ERR_CANCELLED when the task stopped meanwhile (c is then not pushed). */
static int push_chunk(struct producer *p, struct wbuf_chunk *c, bool refill)
{
    struct task *t = p->t;
    uv_mutex_lock(&t->mu);
    if (!atomic_load(&t->stop) && over_limit(t)) {
        uint64_t since = uv_hrtime();
        t->nblocked++;
        t->blocked_since_sum += since;
        while (!atomic_load(&t->stop) && over_limit(t)) {
            t->space_waiters++;
            uv_cond_wait(&t->space_cv, &t->mu);
            t->space_waiters--;
        }
        t->nblocked--;
        t->blocked_since_sum -= since;
        t->blocked_ns += uv_hrtime() - since;
    }
    if (atomic_load(&t->stop)) {
        uv_mutex_unlock(&t->mu);
        return SLUICE_ERR_CANCELLED;
    }
    wbuf_push(&t->buf, c);
    t->produced += c->count;
    if (refill) {
        p->chunk = t->free_chunks;
        if (p->chunk) {
            t->free_chunks = p->chunk->next;
            t->nfree--;
        }
    }
    bool notify = atomic_load_explicit(&t->waiting, memory_order_relaxed);
    uv_mutex_unlock(&t->mu);
    if (notify)
        wake_loop(t);
    return 0;
}

/* Publishes p's chunk into the buffer (see push_chunk). Producer mutex held. Returns 0, or
 * SLUICE_ERR_CANCELLED when the task stopped meanwhile (the chunk then stays with p). */
static int publish(struct producer *p)
{
    struct wbuf_chunk *c = p->chunk;
    if (!c || c->count == 0)
        return 0;
    return push_chunk(p, c, true);
}

/* Gives tensor t, whose block an external chunk just took, the newest spare block of at least
 * want bytes (or none: the pipeline then allocates), and leaves it a valid empty tensor. */
static void refill_tensor(struct task *task, struct pipe_tensor *t, size_t want)
{
    uint8_t *block = NULL;
    size_t cap = 0;
    uv_mutex_lock(&task->mu);
    for (unsigned i = task->nspare; i-- > 0;) {
        if (task->spare[i].cap >= want) {
            block = task->spare[i].p;
            cap = task->spare[i].cap;
            task->spare_bytes -= cap;
            memmove(&task->spare[i], &task->spare[i + 1],
                    (task->nspare - i - 1) * sizeof task->spare[0]);
            task->nspare--;
            break;
        }
    }
    uv_mutex_unlock(&task->mu);
    t->data = block;
    t->cap = cap;
    t->dtype = SLUICE_UINT8;
    t->rank = 1;
    t->shape[0] = 0;
    t->len = 0;
}

/* Appends p->elem as an external chunk when one of its tensors has at least TASK_EXT_MIN value
 * bytes: the record's small parts are encoded into a chunk of its own and the tensor's block is
 * taken over by the chunk as is (no copy); the records p holds privately are published first, to
 * keep the order. Producer mutex held. Returns 1 (done), 0 (not large enough; nothing changed),
 * SLUICE_ERR_CANCELLED, SLUICE_ERR_TOO_LARGE (err gets the size) or SLUICE_ERR_NOMEM. */
static int append_external(struct producer *p, size_t *size)
{
    struct task *t = p->t;
    if (!codec_can_split(&p->elem, TASK_EXT_MIN))
        return 0;
    struct wbuf_chunk *c = calloc(1, sizeof *c);
    if (!c)
        return SLUICE_ERR_NOMEM;
    struct codec_split split;
    int rc = codec_append_split_tagged(&c->data, &p->elem, TASK_EXT_MIN,
                                       p->tagging ? &p->tag : NULL, &split);
    if (rc <= 0) {
        wbuf_chunk_free(c);
        return rc;
    }
    *size = c->data.len + split.len;
    if (*size > TASK_MAX_RECORD) {
        wbuf_chunk_free(c);
        return SLUICE_ERR_TOO_LARGE;
    }
    rc = publish(p);
    if (rc < 0) {
        wbuf_chunk_free(c);
        return rc;
    }
    struct pipe_tensor *tensor = &p->elem.t[split.comp];
    c->ext = tensor->data;
    c->ext_cap = tensor->cap;
    c->ext_len = split.len;
    c->ext_at = split.at;
    c->count = 1;
    c->born_ns = uv_hrtime();
    refill_tensor(t, tensor, c->ext_cap);
    rc = push_chunk(p, c, false);
    if (rc < 0) {
        wbuf_chunk_free(c);
        return rc;
    }
    return 1;
}

/* Notes whether the record just appended at offset at of c came out compressed (bit 0 of the
 * flags byte after its length prefix, pipeline/codec.h) and adapts p's compression skipping. */
static void note_compression(struct producer *p, const struct wbuf_chunk *c, size_t at)
{
    const uint8_t *rec = (const uint8_t *)c->data.p + at;
    uint64_t len;
    size_t h = wbuf_read_varint(rec, c->data.len - at, &len);
    if (h && len > 0 && (rec[h] & 1)) {
        p->misses = 0;
        p->skip_len = 0;
        return;
    }
    if (++p->misses < TASK_COMPRESS_PROBES)
        return;
    p->misses = 0;
    p->skip_len = p->skip_len ? p->skip_len * 2 : TASK_COMPRESS_SKIP_MIN;
    if (p->skip_len > TASK_COMPRESS_SKIP_MAX)
        p->skip_len = TASK_COMPRESS_SKIP_MAX;
    p->skip_left = p->skip_len;
}

/* Runs a pipeline to its end, appending every element to p's chunk and publishing chunks as
 * they fill. Returns 0 at the end of the pipeline, SLUICE_ERR_CANCELLED when the task stops, or
 * a failure with its message in err. */
static int produce(struct producer *p, struct pipe_run *run, char *err, size_t errlen)
{
    struct task *t = p->t;
    for (;;) {
        if (atomic_load_explicit(&t->stop, memory_order_relaxed))
            return SLUICE_ERR_CANCELLED;
        int rc = pipe_run_next(run, &p->elem);
        if (rc == 0)
            return 0;
        if (rc < 0)
            return err_set(err, errlen, rc, "%s",
                           run->ctx.err[0] ? run->ctx.err : sluice_strerror(rc));
        /* What the pipeline could not size before making it (a source's element, a plugin's)
         * is refused here, before it is buffered or sent. */
        uint64_t size = t->limits.max_element_bytes ? pipe_elem_size(&p->elem) : 0;
        if (size > t->limits.max_element_bytes)
            return pipe_limit_msg(err, errlen, "", size, t->limits.max_element_bytes, false);

        uv_mutex_lock(&p->mu);
        if (!p->chunk) {
            p->chunk = chunk_get(t);
            if (!p->chunk) {
                uv_mutex_unlock(&p->mu);
                return err_set(err, errlen, SLUICE_ERR_NOMEM, "encoding an element: %s",
                               sluice_strerror(SLUICE_ERR_NOMEM));
            }
        }
        bool compress = t->compress && p->skip_left == 0;
        if (p->skip_left)
            p->skip_left--;
        if (!compress) {
            size_t size = 0;
            rc = append_external(p, &size);
            if (rc == SLUICE_ERR_TOO_LARGE) {
                uv_mutex_unlock(&p->mu);
                return err_set(err, errlen, rc,
                               "an element of %zu bytes encoded is over the limit of %u bytes",
                               size, TASK_MAX_RECORD);
            }
            if (rc == SLUICE_ERR_CANCELLED) {
                uv_mutex_unlock(&p->mu);
                return rc;
            }
            if (rc < 0) {
                uv_mutex_unlock(&p->mu);
                return err_set(err, errlen, rc, "encoding an element: %s", sluice_strerror(rc));
            }
            if (rc == 1) {
                p->tag.pos++;
                uv_mutex_unlock(&p->mu);
                continue;
            }
        }
        struct wbuf_chunk *c = p->chunk;
        size_t before = c->data.len;
        rc = codec_append_tagged(&c->data, &p->elem, compress, &p->scratch,
                                 p->tagging ? &p->tag : NULL);
        if (rc == 0 && c->data.len - before > TASK_MAX_RECORD)
            rc = SLUICE_ERR_TOO_LARGE;
        if (rc < 0) {
            size_t size = c->data.len - before;
            c->data.len = before;
            uv_mutex_unlock(&p->mu);
            if (rc == SLUICE_ERR_TOO_LARGE)
                return err_set(err, errlen, rc,
                               "an element of %zu bytes encoded is over the limit of %u bytes",
                               size, TASK_MAX_RECORD);
            return err_set(err, errlen, rc, "encoding an element: %s", sluice_strerror(rc));
        }
        p->tag.pos++;
        if (compress)
            note_compression(p, c, before);
        if (c->count == 0)
            c->born_ns = uv_hrtime();
        c->count++;
        bool flush = c->data.len >= TASK_CHUNK_BYTES || c->count >= TASK_CHUNK_RECORDS;
        if (!flush && atomic_load_explicit(&t->waiting, memory_order_relaxed)) {
            /* A reader waits: publish once the chunk has lingered, or at once when elements
             * come slowly (this one took longer than the linger to arrive). */
            uint64_t now = uv_hrtime();
            flush = now - c->born_ns >= TASK_LINGER_NS || now - p->last_ns >= TASK_LINGER_NS;
            p->last_ns = now;
        }
        if (flush)
            rc = publish(p);
        uv_mutex_unlock(&p->mu);
        if (rc < 0)
            return rc;
    }
}

/* Publishes whatever p still holds. Returns 0 or SLUICE_ERR_CANCELLED. */
static int flush_chunk(struct producer *p)
{
    uv_mutex_lock(&p->mu);
    int rc = publish(p);
    uv_mutex_unlock(&p->mu);
    return rc;
}

/* Ends p's split: appends its end marker (the count of elements it had) and publishes
 * whatever p holds. Returns 0, SLUICE_ERR_CANCELLED or SLUICE_ERR_NOMEM. */
static int end_split(struct producer *p)
{
    struct task *t = p->t;
    uv_mutex_lock(&p->mu);
    if (!p->chunk)
        p->chunk = chunk_get(t);
    int rc = p->chunk ? codec_append_split_end(&p->chunk->data, p->tag.seq, p->tag.pos)
                      : SLUICE_ERR_NOMEM;
    if (rc == 0) {
        if (p->chunk->count == 0)
            p->chunk->born_ns = uv_hrtime();
        p->chunk->count++;
        rc = publish(p);
    }
    uv_mutex_unlock(&p->mu);
    return rc;
}

/* parallel_epochs and the static sharding modes: the whole pipeline, sharded if needed. */
static int run_whole(struct producer *p, char *err, size_t errlen)
{
    struct task *t = p->t;
    struct pipe_spec *sharded = NULL;
    struct pipe_run *run = NULL;
    char **files = NULL;
    size_t nfiles = 0;
    int rc;

    /* Nothing outside this worker's data roots is read, nor even listed for sharding. */
    rc = pipe_roots_check_source(pipe_registry_roots(t->reg), &t->spec->source, err, errlen);
    if (rc < 0)
        goto out;
    if (shard_needs_files(t->spec, t->mode)) {
        rc = pipe_glob_expand(t->spec->source.globs, t->spec->source.nglobs, &files, &nfiles, err,
                              errlen);
        if (rc < 0)
            goto out;
    }
    struct shard_params sp = {t->mode, t->num_workers, t->worker_index};
    rc = shard_rewrite(t->spec, &sp, files, nfiles, &sharded, err, errlen);
    if (rc < 0)
        goto out;
    rc = pipe_open_limited(sharded, t->reg, &t->limits, &run, err, errlen);
    if (rc < 0)
        goto out;
    rc = produce(p, run, err, errlen);
out:
    if (run)
        pipe_run_free(run);
    pipe_spec_free(sharded);
    pipe_paths_free(files, nfiles);
    return rc;
}

static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

/* A save's task: writes split seq's elements into its chunk file and commits it. Returns 0 once
 * the chunk is committed, SLUICE_ERR_CANCELLED when the task stopped (the temporary file is then
 * removed), or a failure with its message. */
static int write_chunk(struct producer *p, const struct split *split, uint64_t seq, char *err,
                       size_t errlen)
{
    struct task *t = p->t;
    struct snap_writer *w = NULL;
    struct pipe_run *run = NULL;
    uint64_t n = 0;
    int rc = snap_writer_open(t->snap_dir, seq, &w, err, errlen);
    if (rc < 0)
        return rc;
    rc = pipe_open_splits_limited(t->spec, t->reg, &t->limits, split, 1, &run, err, errlen);
    while (rc == 0) {
        if (atomic_load_explicit(&t->stop, memory_order_relaxed)) {
            rc = SLUICE_ERR_CANCELLED;
            break;
        }
        rc = pipe_run_next(run, &p->elem);
        if (rc == 0)
            break;
        if (rc < 0) {
            err_set(err, errlen, rc, "%s", run->ctx.err[0] ? run->ctx.err : sluice_strerror(rc));
            break;
        }
        uint64_t size = t->limits.max_element_bytes ? pipe_elem_size(&p->elem) : 0;
        if (size > t->limits.max_element_bytes) {
            rc = pipe_limit_msg(err, errlen, "", size, t->limits.max_element_bytes, false);
            break;
        }
        rc = snap_writer_add(w, &p->elem, err, errlen);
        n++;
    }
    if (run)
        pipe_run_free(run);
    if (rc < 0) {
        snap_writer_abort(w);
        return rc;
    }
    rc = snap_writer_commit(w, err, errlen); /* frees w in every case */
    if (rc < 0)
        return rc;
    uv_mutex_lock(&t->mu);
    t->chunks_committed++;
    t->produced += n;
    uv_mutex_unlock(&t->mu);
    return 0;
}

/* A save's task, before its first split: the snapshot directory must lie within the worker's
 * data roots, when it has any. */
static int check_snapshot_dir(struct task *t, char *err, size_t errlen)
{
    const struct pipe_roots *roots = pipe_registry_roots(t->reg);
    if (!pipe_roots_active(roots))
        return 0;
    char resolved[PATH_MAX];
    return pipe_roots_check_path(roots, "snapshot path", t->snap_dir, resolved, sizeof resolved,
                                 err, errlen);
}

/* distributed_epoch: split after split from the lease queue until it is drained for good. */
static int run_splits(struct producer *p, char *err, size_t errlen)
{
    struct task *t = p->t;
    struct split split;
    if (t->snap_dir) {
        int rc = check_snapshot_dir(t, err, errlen);
        if (rc < 0)
            return rc;
    }
    for (;;) {
        uint64_t seq;
        bool ask = false;
        int rc = 0;
        uv_mutex_lock(&t->mu);
        for (;;) {
            if (atomic_load(&t->stop)) {
                uv_mutex_unlock(&t->mu);
                return SLUICE_ERR_CANCELLED;
            }
            if (lease_pop(&t->lease, &seq)) {
                ask = t->lease.len <= t->lease.low && !t->lease.inflight;
                break;
            }
            if (!lease_more(&t->lease)) {
                uv_mutex_unlock(&t->mu);
                return 0;
            }
            if (!t->lease.inflight)
                wake_loop(t);
            uv_cond_wait(&t->work_cv, &t->mu);
        }
        if (!split_plan_at(&t->plan, seq, &split)) {
            rc = err_set(err, errlen, SLUICE_ERR_CORRUPT,
                         "split %" PRIu64 " is past the end of the split sequence", seq);
            lease_abandon(&t->lease);
        }
        uv_mutex_unlock(&t->mu);
        if (ask)
            wake_loop(t);
        if (rc < 0)
            return rc;

        if (t->snap_dir) {
            /* A save's split is finished once its chunk is committed: the dispatcher takes the
             * report of it as the split's end (it has no consumers). */
            rc = write_chunk(p, &split, seq, err, errlen);
        } else {
            struct pipe_run *run = NULL;
            p->tagging = true;
            p->tag.seq = seq;
            p->tag.pos = 0;
            rc =
                pipe_open_splits_limited(t->spec, t->reg, &t->limits, &split, 1, &run, err, errlen);
            if (rc == 0) {
                rc = produce(p, run, err, errlen);
                pipe_run_free(run);
            }
            /* The split is produced once all its elements and its end marker are in the
             * buffer; it is finished only when a consumer has received them all (the dispatcher
             * hears that from the consumer). */
            if (rc == 0)
                rc = end_split(p);
        }
        if (rc == SLUICE_ERR_NOMEM)
            err_set(err, errlen, rc, "ending a split: %s", sluice_strerror(rc));
        uv_mutex_lock(&t->mu);
        bool report = false;
        if (rc == 0) {
            rc = lease_finish(&t->lease, seq, now_ms());
            if (rc < 0) {
                lease_abandon(&t->lease);
                err_set(err, errlen, rc, "%s", sluice_strerror(rc));
            }
            report = !lease_more(&t->lease) || t->lease.nfinished >= LEASE_REPORT_COUNT;
        } else {
            lease_abandon(&t->lease);
        }
        uv_mutex_unlock(&t->mu);
        if (report)
            wake_loop(t);
        if (rc < 0)
            return rc;
    }
}

static void producer_main(void *arg)
{
    struct producer *p = arg;
    struct task *t = p->t;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = t->mode == SLUICE_DISTRIBUTED_EPOCH ? run_splits(p, err, sizeof err)
                                                 : run_whole(p, err, sizeof err);
    /* Elements made before a failure are still served, ahead of the failure itself. */
    if (rc != SLUICE_ERR_CANCELLED) {
        int frc = flush_chunk(p);
        if (rc == 0)
            rc = frc;
    }
    uv_mutex_lock(&t->mu);
    if (rc < 0 && rc != SLUICE_ERR_CANCELLED)
        fail_locked(t, rc, err);
    if (--t->alive == 0)
        t->done = true;
    uv_mutex_unlock(&t->mu);
    wake_loop(t);
}

static int task_alloc(uint64_t id, struct task **out)
{
    struct task *t = calloc(1, sizeof *t);
    if (!t)
        return SLUICE_ERR_NOMEM;
    t->id = id;
    wbuf_init(&t->buf);
    if (uv_mutex_init(&t->mu) != 0)
        goto fail;
    if (uv_cond_init(&t->space_cv) != 0)
        goto fail_mu;
    if (uv_cond_init(&t->work_cv) != 0)
        goto fail_space;
    *out = t;
    return 0;
fail_space:
    uv_cond_destroy(&t->space_cv);
fail_mu:
    uv_mutex_destroy(&t->mu);
fail:
    free(t);
    return SLUICE_ERR_NOMEM;
}

int task_new_failed(uint64_t id, int code, const char *msg, struct task **out)
{
    struct task *t;
    int rc = task_alloc(id, &t);
    if (rc < 0)
        return rc;
    t->started = true;
    t->done = true;
    fail_locked(t, code, msg);
    *out = t;
    return 0;
}

/* A task nobody reads thus holds no thread, no buffered element and no lease, whatever the
 * number of jobs a client opens. */
void task_begin(struct task *t)
{
    if (t->started)
        return;
    t->started = true;
    unsigned n = t->nproducers;
    for (unsigned i = 0; i < n; i++) {
        int rc = uv_thread_create(&t->producers[i].thread, producer_main, &t->producers[i]);
        if (rc != 0) {
            /* The producers already running see the failure and exit; the task stays, failed,
             * so its readers learn why, and is reaped like any other. */
            uv_mutex_lock(&t->mu);
            t->alive -= n - i;
            if (t->alive == 0)
                t->done = true;
            fail_locked(t, rc, "cannot start a producer thread");
            uv_mutex_unlock(&t->mu);
            break;
        }
        t->nthreads++;
    }
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
        n = cfg->threads ? cfg->threads : 1;
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
    for (unsigned i = 0; i < n; i++) {
        struct producer *p = &t->producers[i];
        p->t = t;
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

static int take(struct task *t, uint32_t max_elements, uint64_t max_bytes, struct pipe_buf *scratch,
                bool whole, struct task_take *out)
{
    memset(out, 0, sizeof *out);
    task_begin(t);
    uv_mutex_lock(&t->mu);
    int rc = 0;
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
        if (t->space_waiters && !over_limit(t))
            uv_cond_broadcast(&t->space_cv);
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
    return take(t, max_elements, max_bytes, scratch, false, out);
}

int task_take_whole(struct task *t, uint32_t max_elements, uint64_t max_bytes,
                    struct pipe_buf *scratch, struct task_take *out)
{
    return take(t, max_elements, max_bytes, scratch, true, out);
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
    for (unsigned i = 0; i < t->nthreads; i++) {
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
    uv_mutex_lock(&t->mu);
    out->done = t->done;
    out->failed = t->err_code != 0;
    out->buffered = t->buf.count;
    out->buffered_bytes = t->buf.bytes;
    out->produced = t->produced;
    out->chunks_committed = t->chunks_committed;
    out->blocked_ns = t->blocked_ns + (uint64_t)t->nblocked * uv_hrtime() - t->blocked_since_sum;
    out->producers = t->nproducers;
    out->finished = t->done && !out->failed && t->buf.count == 0 &&
                    (t->mode != SLUICE_DISTRIBUTED_EPOCH || lease_settled(&t->lease));
    out->settled = t->mode == SLUICE_DISTRIBUTED_EPOCH && !out->failed && t->buf.count == 0 &&
                   t->lease.len == 0 && t->lease.busy == 0;
    uv_mutex_unlock(&t->mu);
}

bool task_lease_want(struct task *t, uint64_t now_ms, uint32_t *max_splits,
                     const uint64_t **finished, size_t *nfinished, const uint64_t **returned,
                     size_t *nreturned)
{
    if (!task_is_distributed(t) || !t->started)
        return false;
    bool want = false;
    uv_mutex_lock(&t->mu);
    if (atomic_load(&t->stop) || !lease_want(&t->lease, now_ms, max_splits, nfinished))
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
        fail_locked(t, rc, err);
    else
        uv_cond_broadcast(&t->work_cv);
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
    fail_locked(t, code, msg);
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
    uv_cond_broadcast(&t->work_cv);
    uv_mutex_unlock(&t->mu);
    return rc;
}

void task_stop(struct task *t)
{
    end_unstarted(t);
    uv_mutex_lock(&t->mu);
    atomic_store(&t->stop, 1);
    atomic_store(&t->cancel.cancel, 1);
    uv_cond_broadcast(&t->space_cv);
    uv_cond_broadcast(&t->work_cv);
    uv_mutex_unlock(&t->mu);
}

static atomic_uint abandoned;

void task_abandon(struct task *t)
{
    task_stop(t);
    atomic_store(&t->wake, NULL);
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
    return exited;
}

void task_free(struct task *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->nthreads; i++)
        uv_thread_join(&t->producers[i].thread);
    for (unsigned i = 0; i < t->nproducers; i++) {
        struct producer *p = &t->producers[i];
        wbuf_chunk_free(p->chunk);
        pipe_elem_release(&p->elem);
        pipe_buf_release(&p->scratch);
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
    lease_queue_release(&t->lease);
    split_plan_release(&t->plan);
    free(t->report);
    free(t->returned);
    pipe_spec_free(t->spec);
    free(t->snap_dir);
    uv_cond_destroy(&t->work_cv);
    uv_cond_destroy(&t->space_cv);
    uv_mutex_destroy(&t->mu);
    free(t);
}
