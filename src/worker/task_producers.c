/* A task's producer threads: each runs the pipeline (the whole of it, or one leased split at a
 * time in distributed_epoch, or a save's chunks), encodes elements into its private chunk with
 * adaptive compression, and publishes whole chunks into the task's buffer (task.c). */
#include "task_internal.h"

#include "common/error.h"
#include "pipeline/codec.h"
#include "pipeline/element.h"
#include "pipeline/iter.h"
#include "pipeline/open.h"
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

#define TASK_COMPRESS_PROBES 4u
#define TASK_COMPRESS_SKIP_MIN 16u
#define TASK_COMPRESS_SKIP_MAX 4096u

static int push_chunk(struct producer *p, struct wbuf_chunk *c, bool refill)
{
    struct task *t = p->t;
    uv_mutex_lock(&t->mu);
    if (!atomic_load(&t->stop) && task_over_limit(t)) {
        uint64_t since = uv_hrtime();
        t->nblocked++;
        t->blocked_since_sum += since;
        while (!atomic_load(&t->stop) && task_over_limit(t)) {
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
        task_wake_loop(t);
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
            p->chunk = task_chunk_get(t);
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
            size_t encoded = 0;
            rc = append_external(p, &encoded);
            if (rc == SLUICE_ERR_TOO_LARGE) {
                uv_mutex_unlock(&p->mu);
                return err_set(err, errlen, rc,
                               "an element of %zu bytes encoded is over the limit of %u bytes",
                               encoded, TASK_MAX_RECORD);
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
            size_t encoded = c->data.len - before;
            c->data.len = before;
            uv_mutex_unlock(&p->mu);
            if (rc == SLUICE_ERR_TOO_LARGE)
                return err_set(err, errlen, rc,
                               "an element of %zu bytes encoded is over the limit of %u bytes",
                               encoded, TASK_MAX_RECORD);
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
        p->chunk = task_chunk_get(t);
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
                task_wake_loop(t);
            uv_cond_wait(&t->work_cv, &t->mu);
        }
        if (!split_plan_at(&t->plan, seq, &split)) {
            rc = err_set(err, errlen, SLUICE_ERR_CORRUPT,
                         "split %" PRIu64 " is past the end of the split sequence", seq);
            lease_abandon(&t->lease);
        }
        uv_mutex_unlock(&t->mu);
        if (ask)
            task_wake_loop(t);
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
            task_wake_loop(t);
        if (rc < 0)
            return rc;
    }
}

void task_producer_main(void *arg)
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
        task_fail_locked(t, rc, err);
    if (--t->alive == 0)
        t->done = true;
    uv_mutex_unlock(&t->mu);
    task_wake_loop(t);
}
