/* A task's producers, run in slices on the worker's pool (pool.h): each runs the pipeline (the
 * whole of it, or one leased split at a time in distributed_epoch, or a save's chunks), encodes
 * elements into its private chunk with adaptive compression, and publishes whole chunks into the
 * task's buffer (task.c).
 *
 * A producer never blocks on the task: where a thread would wait, its slice returns instead.
 * With the buffer over its bound it keeps the chunk it was to publish and parks for space (the
 * take that makes room queues it again); with no split leased it parks for a lease (the grant,
 * a drain or a stop queues it again); after publishing a chunk, or after PRODUCER_SLICE_NS, it
 * yields so the tasks sharing the pool take turns. A slice still runs the pipeline's next()
 * inline, which may block (a sleep, a file read, a Python function): that holds one of the
 * pool's threads, not the task's lock. */
#include "task_internal.h"

#include "common/error.h"
#include "common/shm_region.h"
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
/* The bytes of a large element's sample that decide whether it is worth compressing. */
#define TASK_COMPRESS_SAMPLE (64u << 10)

/* What push_chunk and the steps of a slice return besides 0 and the codes of error.h. */
#define PRODUCER_PARKED 1 /* the producer parked (p->park): its slice ends with POOL_PARK */
#define PRODUCER_YIELD 2  /* its budget is spent: the slice ends with POOL_YIELD */
#define PRODUCER_END 3    /* distributed_epoch: no split will come any more */

/* A slice yields once it has published a chunk, or after this long. The clock is looked at
 * every PRODUCER_CLOCK_EVERY elements, not per element. */
#define PRODUCER_SLICE_NS 5000000u
#define PRODUCER_CLOCK_EVERY 16u

/* c gets its first record from p: its birth time, and the split it holds. */
static void chunk_begin(const struct producer *p, struct wbuf_chunk *c)
{
    c->born_ns = uv_hrtime();
    c->tagged = p->tagging;
    c->seq = p->tag.seq;
}

/* Pushes c into the buffer; with refill, p's chunk is then replaced by a spare one (or none).
 * Producer mutex held. Returns 0; PRODUCER_PARKED when the buffer is over its bounds (c is not
 * pushed and p is parked for space: whoever frees room queues it again); or SLUICE_ERR_CANCELLED
 * when the task stopped (c is not pushed). */
static int push_chunk(struct producer *p, struct wbuf_chunk *c, bool refill)
{
    struct task *t = p->t;
    uv_mutex_lock(&t->mu);
    if (atomic_load(&t->stop)) {
        uv_mutex_unlock(&t->mu);
        return SLUICE_ERR_CANCELLED;
    }
    if (task_over_limit(t)) {
        p->park = PARK_SPACE;
        p->parked_since = uv_hrtime();
        t->space_waiters++;
        t->nblocked++;
        t->blocked_since_sum += p->parked_since;
        uv_mutex_unlock(&t->mu);
        return PRODUCER_PARKED;
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

/* Publishes p's chunk into the buffer (see push_chunk). Producer mutex held. Returns 0,
 * PRODUCER_PARKED (p->publish stays set: the chunk is published first when p resumes) or
 * SLUICE_ERR_CANCELLED (the chunk then stays with p). */
static int publish(struct producer *p)
{
    struct wbuf_chunk *c = p->chunk;
    int rc = c && c->count > 0 ? push_chunk(p, c, true) : 0;
    p->publish = rc != 0;
    return rc;
}

/* Pushes what p was due to push when the buffer was full: its chunk (p->publish), then its
 * external chunk (p->ext). Returns 0 once both are out, PRODUCER_PARKED or
 * SLUICE_ERR_CANCELLED. */
static int push_pending(struct producer *p)
{
    int rc = 0;
    uv_mutex_lock(&p->mu);
    if (p->publish)
        rc = publish(p);
    if (rc == 0 && p->ext) {
        rc = push_chunk(p, p->ext, false);
        if (rc == 0)
            p->ext = NULL;
    }
    uv_mutex_unlock(&p->mu);
    return rc;
}

static void loan_hold(struct pipe_lender *l)
{
    struct arena_loan *a = (struct arena_loan *)l;
    atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
}

static void loan_release(struct pipe_lender *l)
{
    struct arena_loan *a = (struct arena_loan *)l;
    if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) != 1)
        return;
    shm_region_arena_put(a->region, a->block);
    free(a);
}

bool task_is_arena_loan(const struct pipe_lender *l)
{
    return l && l->release == loan_release;
}

/* A block of r's arena for a value of want bytes, with room around it (TASK_ARENA_HEAD,
 * TASK_ARENA_TAIL), on loan to t. Returns false (t unchanged) when the arena has no room. */
static bool loan_arena(struct shm_region *r, struct pipe_tensor *t, size_t want)
{
    struct arena_loan *a = malloc(sizeof *a);
    if (!a)
        return false;
    uint64_t cap;
    if (shm_region_arena_alloc(r, (uint64_t)want + TASK_ARENA_HEAD + TASK_ARENA_TAIL, &a->block,
                               &cap) != 0) {
        free(a);
        return false;
    }
    a->lender = (struct pipe_lender){.hold = loan_hold, .release = loan_release};
    atomic_init(&a->refs, 1);
    a->region = r;
    pipe_tensor_loan(t, a->block + TASK_ARENA_HEAD, (size_t)cap - TASK_ARENA_HEAD, &a->lender);
    return true;
}

/* Gives tensor t, whose block (of want bytes, holding a value of len bytes) an external chunk
 * just took, a block of the task's arena for a value of len bytes when it has one with room
 * (task_set_arena), else the newest spare block of at least want bytes (or none: the pipeline
 * then allocates), and leaves it a valid empty tensor. (An arena block sized by the block taken
 * would grow by its room around the value with every element.) */
static void refill_tensor(struct task *task, struct pipe_tensor *t, size_t want, size_t len)
{
    uint8_t *block = NULL;
    size_t cap = 0;
    /* The chunk owns what t held. */
    t->data = NULL;
    t->cap = 0;
    t->lender = NULL;
    t->dtype = SLUICE_UINT8;
    t->rank = 1;
    t->shape[0] = 0;
    t->len = 0;
    uv_mutex_lock(&task->mu);
    task->ext_bytes += want;
    if (task->ext_bytes > task->ext_peak)
        task->ext_peak = task->ext_bytes;
    struct shm_region *arena = task->arena;
    if (arena) {
        shm_region_ref(arena);
        uv_mutex_unlock(&task->mu);
        bool loaned = loan_arena(arena, t, len);
        shm_region_unref(arena);
        if (loaned)
            return;
        uv_mutex_lock(&task->mu);
    }
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
}

/* Appends p->elem as an external chunk when one of its tensors has at least TASK_EXT_MIN value
 * bytes: the record's small parts are encoded into a chunk of its own and the tensor's block is
 * taken over by the chunk as is (no copy). The chunk is left in p->ext, to be pushed right after
 * the records p holds privately (p->publish), which keeps the order (push_pending). Producer
 * mutex held. Returns 1 (done), 0 (not large enough; nothing changed), SLUICE_ERR_TOO_LARGE (size
 * gets the size) or SLUICE_ERR_NOMEM. */
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
    struct pipe_tensor *tensor = &p->elem.t[split.comp];
    c->ext = tensor->data;
    c->ext_cap = tensor->cap;
    c->ext_len = split.len;
    c->ext_at = split.at;
    c->count = 1;
    if (task_is_arena_loan(tensor->lender)) {
        /* Built in a reader's arena: the record is laid out whole around the values, so that a
         * reply of it alone is announced where it lies. */
        c->ext_lender = tensor->lender;
        size_t after = c->data.len - c->ext_at;
        if (c->ext_at <= TASK_ARENA_HEAD && after <= c->ext_cap - c->ext_len) {
            memcpy(c->ext - c->ext_at, c->data.p, c->ext_at);
            memcpy(c->ext + c->ext_len, (const uint8_t *)c->data.p + c->ext_at, after);
            c->inplace = true;
        }
        /* Its connection ended while the value was built: nobody will take it from there, and
         * the chunk must not keep the region mapped. */
        struct shm_region *r = ((struct arena_loan *)c->ext_lender)->region;
        if (shm_region_arena_stopped(r))
            task_chunk_evict(c, r);
    }
    chunk_begin(p, c);
    refill_tensor(t, tensor, c->ext_cap, c->ext_len);
    p->publish = p->chunk && p->chunk->count > 0;
    p->ext = c;
    return 1;
}

/* Adapts p's compression skipping to whether the last element tried compressed. */
static void note_compressed(struct producer *p, bool compressed)
{
    if (compressed) {
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

/* Notes whether the record just appended at offset at of c came out compressed (bit 0 of the
 * flags byte after its length prefix, pipeline/codec.h). */
static void note_compression(struct producer *p, const struct wbuf_chunk *c, size_t at)
{
    const uint8_t *rec = (const uint8_t *)c->data.p + at;
    uint64_t len;
    size_t h = wbuf_read_varint(rec, c->data.len - at, &len);
    note_compressed(p, h && len > 0 && (rec[h] & 1));
}

/* Runs p's pipeline, appending every element to p's chunk and publishing chunks as they fill.
 * Returns 0 at the end of the pipeline; PRODUCER_YIELD once it published a chunk or ran past
 * deadline (uv_hrtime); PRODUCER_PARKED when a chunk was due and the buffer is full (p resumes
 * by publishing it); SLUICE_ERR_CANCELLED when the task stops; or a failure with its message in
 * p->err. */
static int produce(struct producer *p, uint64_t deadline)
{
    struct task *t = p->t;
    struct pipe_run *run = p->run;
    char *err = p->err;
    size_t errlen = sizeof p->err;
    for (unsigned n = 1;; n++) {
        if (atomic_load_explicit(&t->stop, memory_order_relaxed))
            return SLUICE_ERR_CANCELLED;
        if (n % PRODUCER_CLOCK_EVERY == 0 && uv_hrtime() >= deadline)
            return PRODUCER_YIELD;
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
        /* A split produced again: its consumers had this position already. */
        if (p->skip.n && ranges_contains(&p->skip, p->tag.pos)) {
            p->tag.pos++;
            continue;
        }

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
        /* A large element is judged by a sample first: trying snappy on all of an
         * incompressible one costs more than producing it, and two copies. */
        if (compress &&
            !codec_sample_compresses(&p->elem, TASK_EXT_MIN, TASK_COMPRESS_SAMPLE, &p->scratch)) {
            compress = false;
            note_compressed(p, false);
        }
        if (!compress) {
            size_t encoded = 0;
            rc = append_external(p, &encoded);
            if (rc == SLUICE_ERR_TOO_LARGE) {
                uv_mutex_unlock(&p->mu);
                return err_set(err, errlen, rc,
                               "an element of %zu bytes encoded is over the limit of %u bytes",
                               encoded, TASK_MAX_RECORD);
            }
            if (rc < 0) {
                uv_mutex_unlock(&p->mu);
                return err_set(err, errlen, rc, "encoding an element: %s", sluice_strerror(rc));
            }
            if (rc == 1) {
                p->tag.pos++;
                uv_mutex_unlock(&p->mu);
                rc = push_pending(p);
                return rc == 0 ? PRODUCER_YIELD : rc;
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
            chunk_begin(p, c);
        c->count++;
        bool flush = c->data.len >= TASK_CHUNK_BYTES || c->count >= TASK_CHUNK_RECORDS;
        if (!flush && atomic_load_explicit(&t->waiting, memory_order_relaxed)) {
            /* A reader waits: publish once the chunk has lingered, or at once when elements
             * come slowly (this one took longer than the linger to arrive). Elements that come
             * fast read the clock once every PRODUCER_CLOCK_EVERY: a clock read per element
             * costs as much as producing a small one. Should they slow down meanwhile, the
             * loop's tick (WORKER_TICK_FAST_MS while a reader waits) publishes what lingers. */
            if (p->clock_skip > 0) {
                p->clock_skip--;
            } else {
                uint64_t now = uv_hrtime();
                uint64_t gap = now - p->last_ns;
                flush = now - c->born_ns >= TASK_LINGER_NS || gap >= TASK_LINGER_NS;
                p->clock_skip = gap < TASK_LINGER_NS / 64 ? PRODUCER_CLOCK_EVERY - 1 : 0;
                p->last_ns = now;
            }
        }
        if (flush)
            rc = publish(p);
        uv_mutex_unlock(&p->mu);
        if (flush)
            return rc == 0 ? PRODUCER_YIELD : rc;
    }
}

/* Appends the end marker of p's split (the count of elements it had) to p's chunk, to be
 * published before the split counts as produced. Returns 0 or SLUICE_ERR_NOMEM. */
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
            chunk_begin(p, p->chunk);
        p->chunk->count++;
        p->chunk->ends = true;
        p->publish = true;
    }
    uv_mutex_unlock(&p->mu);
    if (rc < 0)
        err_set(p->err, sizeof p->err, rc, "ending a split: %s", sluice_strerror(rc));
    return rc;
}

/* parallel_epochs and the static sharding modes: opens the whole pipeline, sharded if needed. */
static int open_whole(struct producer *p)
{
    struct task *t = p->t;
    char *err = p->err;
    size_t errlen = sizeof p->err;
    char **files = NULL;
    size_t nfiles = 0;

    /* Nothing outside this worker's data roots is read, nor even listed for sharding. */
    int rc = pipe_roots_check_source(pipe_registry_roots(t->reg), &t->spec->source, err, errlen);
    if (rc < 0)
        return rc;
    if (shard_needs_files(t->spec, t->mode)) {
        rc = pipe_glob_expand(t->spec->source.globs, t->spec->source.nglobs, &files, &nfiles, err,
                              errlen);
        if (rc < 0)
            return rc;
    }
    struct shard_params sp = {t->mode, t->num_workers, t->worker_index};
    rc = shard_rewrite(t->spec, &sp, files, nfiles, &p->sharded, err, errlen);
    pipe_paths_free(files, nfiles);
    if (rc < 0)
        return rc;
    rc = pipe_open_limited(p->sharded, t->reg, &t->limits, &p->run, err, errlen);
    if (rc < 0)
        return rc;
    p->phase = PROD_RUN;
    return 0;
}

static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

/* A save's task: writes split seq's elements into its chunk file and commits it. Returns 0 once
 * the chunk is committed, SLUICE_ERR_CANCELLED when the task stopped (the temporary file is then
 * removed), or a failure with its message. */
static int write_chunk(struct producer *p, const struct split *split, uint64_t seq)
{
    struct task *t = p->t;
    char *err = p->err;
    size_t errlen = sizeof p->err;
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

/* A save's task, before its first split: the snapshot directory (or s3:// prefix) must lie
 * within the worker's data roots, when it has any. */
static int check_snapshot_dir(struct task *t, char *err, size_t errlen)
{
    const struct pipe_roots *roots = pipe_registry_roots(t->reg);
    if (obj_is_url(t->snap_dir))
        return pipe_roots_check_url(roots, "snapshot path", t->snap_dir, err, errlen);
    if (!pipe_roots_active(roots))
        return 0;
    char resolved[PATH_MAX];
    return pipe_roots_check_path(roots, "snapshot path", t->snap_dir, resolved, sizeof resolved,
                                 err, errlen);
}

/* Appends the split start marker of p's split to its chunk. Returns 0 or SLUICE_ERR_NOMEM with
 * the message in p->err. */
static int mark_from(struct producer *p, uint64_t from)
{
    uv_mutex_lock(&p->mu);
    if (!p->chunk)
        p->chunk = task_chunk_get(p->t);
    int rc =
        p->chunk ? codec_append_split_from(&p->chunk->data, p->tag.seq, from) : SLUICE_ERR_NOMEM;
    if (rc == 0) {
        if (p->chunk->count == 0)
            chunk_begin(p, p->chunk);
        p->chunk->count++;
    }
    uv_mutex_unlock(&p->mu);
    if (rc < 0)
        err_set(p->err, sizeof p->err, rc, "starting a split: %s", sluice_strerror(rc));
    return rc;
}

/* distributed_epoch: takes the next split from the lease queue and opens it (a save's task
 * writes it whole). Returns 0 (p->phase says what comes next), PRODUCER_PARKED (no split leased
 * yet: p is parked for a lease, and the loop is asked to lease more), PRODUCER_END (no split
 * will come), SLUICE_ERR_CANCELLED, or a failure with its message in p->err. */
static int next_split(struct producer *p)
{
    struct task *t = p->t;
    struct split split;
    uint64_t seq;
    int rc = 0;
    uv_mutex_lock(&t->mu);
    if (atomic_load(&t->stop)) {
        uv_mutex_unlock(&t->mu);
        return SLUICE_ERR_CANCELLED;
    }
    if (!lease_pop(&t->lease, &seq)) {
        if (!lease_more(&t->lease)) {
            uv_mutex_unlock(&t->mu);
            return PRODUCER_END;
        }
        bool ask = !t->lease.inflight;
        p->park = PARK_LEASE;
        t->lease_waiters++;
        uv_mutex_unlock(&t->mu);
        if (ask)
            task_wake_loop(t);
        return PRODUCER_PARKED;
    }
    bool ask = t->lease.len <= t->lease.low && !t->lease.inflight;
    struct split_resume resume;
    splittab_resume_take(&t->splits, seq, &resume);
    ranges_release(&p->skip);
    p->skip = resume.skip;
    if (resume.owner && splittab_owner_set(&t->splits, seq, resume.owner, now_ms()) < 0) {
        rc = err_set(p->err, sizeof p->err, SLUICE_ERR_NOMEM, "%s",
                     sluice_strerror(SLUICE_ERR_NOMEM));
        lease_abandon(&t->lease);
    } else if (!split_plan_at(&t->plan, seq, &split)) {
        rc = err_set(p->err, sizeof p->err, SLUICE_ERR_CORRUPT,
                     "split %" PRIu64 " is past the end of the split sequence", seq);
        lease_abandon(&t->lease);
    }
    uv_mutex_unlock(&t->mu);
    if (ask)
        task_wake_loop(t);
    if (rc < 0)
        return rc;
    p->seq = seq;
    p->in_split = true;
    if (t->snap_dir) {
        /* A save's split is finished once its chunk is committed: the dispatcher takes the
         * report of it as the split's end (it has no consumers). */
        rc = write_chunk(p, &split, seq);
        if (rc == 0)
            p->phase = PROD_SPLIT_DONE;
        return rc;
    }
    p->tagging = true;
    p->tag.seq = seq;
    p->tag.pos = 0;
    /* Positions [0, from) went to consumers before: the first record says so, so a
     * deterministic reader that did not have them takes the rest (codec.h). */
    if (p->skip.n && p->skip.v[0].begin == 0 && (rc = mark_from(p, p->skip.v[0].end)) < 0)
        return rc;
    rc = pipe_open_splits_limited(t->spec, t->reg, &t->limits, &split, 1, &p->run, p->err,
                                  sizeof p->err);
    if (rc == 0)
        p->phase = PROD_RUN;
    return rc;
}

/* The split p holds was produced: all its elements and its end marker are in the buffer (or a
 * save's chunk is committed). It is finished only when a consumer has received them all (the
 * dispatcher hears that from the consumer); here it leaves the lease queue's hands. Returns 0 or
 * SLUICE_ERR_NOMEM. */
static int split_done(struct producer *p)
{
    struct task *t = p->t;
    uv_mutex_lock(&t->mu);
    p->in_split = false;
    int rc = lease_finish(&t->lease, p->seq, now_ms());
    if (rc < 0) {
        lease_abandon(&t->lease);
        err_set(p->err, sizeof p->err, rc, "%s", sluice_strerror(rc));
    }
    bool report = rc == 0 && (!lease_more(&t->lease) || t->lease.nfinished >= LEASE_REPORT_COUNT);
    uv_mutex_unlock(&t->mu);
    if (report)
        task_wake_loop(t);
    p->phase = PROD_NEXT_SPLIT;
    return rc;
}

/* p ends with rc (0 at the end of its pipeline or splits): it lets go of its pipeline and split
 * and goes on to publish what it holds. */
static void end(struct producer *p, int rc)
{
    struct task *t = p->t;
    if (p->run) {
        pipe_run_free(p->run);
        p->run = NULL;
    }
    if (p->in_split) {
        uv_mutex_lock(&t->mu);
        lease_abandon(&t->lease);
        uv_mutex_unlock(&t->mu);
        p->in_split = false;
    }
    p->rc = rc;
    p->phase = PROD_FLUSH;
}

/* The slice ends: its last access to the task. */
static enum pool_slice leave(struct task *t, enum pool_slice r)
{
    atomic_fetch_sub(&t->in_slice, 1);
    return r;
}

/* The last step: elements made before a failure are still served, ahead of the failure
 * itself; then p has exited. Returns POOL_PARK while the buffer has no room for them. */
static enum pool_slice finish(struct producer *p)
{
    struct task *t = p->t;
    if (p->rc != SLUICE_ERR_CANCELLED) {
        uv_mutex_lock(&p->mu);
        int frc = publish(p);
        uv_mutex_unlock(&p->mu);
        if (frc == PRODUCER_PARKED)
            return leave(t, POOL_PARK);
        if (p->rc == 0)
            p->rc = frc;
    }
    pipe_spec_free(p->sharded);
    p->sharded = NULL;
    /* Its element's blocks (one may be on loan from a reader's arena, which it would keep
     * mapped while the task lingers) are of no more use. */
    pipe_elem_release(&p->elem);
    uv_mutex_lock(&t->mu);
    if (p->rc < 0 && p->rc != SLUICE_ERR_CANCELLED)
        task_fail_locked(t, p->rc, p->err);
    if (--t->alive == 0)
        t->done = true;
    uv_async_t *wake = atomic_load(&t->wake);
    uv_mutex_unlock(&t->mu);
    /* From here on the task may be freed: the wake handle is the worker's, and the pool's
     * threads are joined before the worker lets go of it. */
    atomic_fetch_sub(&t->in_slice, 1);
    if (wake)
        uv_async_send(wake);
    return POOL_DONE;
}

/* Gives back the blocks p's element holds of arenas whose connection ended (task_evict_arena). */
static void drop_stopped_loans(struct producer *p)
{
    unsigned n = atomic_load(&p->t->evictions);
    if (n == p->evictions_seen)
        return;
    p->evictions_seen = n;
    for (size_t i = 0; i < p->elem.cap; i++) {
        struct pipe_tensor *t = &p->elem.t[i];
        if (task_is_arena_loan(t->lender) &&
            shm_region_arena_stopped(((struct arena_loan *)t->lender)->region))
            (void)pipe_tensor_unloan(t); /* out of memory: it keeps the block a while longer */
    }
}

enum pool_slice task_producer_slice(struct pool_job *job)
{
    struct producer *p = (struct producer *)job;
    struct task *t = p->t;
    atomic_fetch_add(&t->in_slice, 1);
    drop_stopped_loans(p);
    uint64_t deadline = uv_hrtime() + PRODUCER_SLICE_NS;
    for (;;) {
        if (p->phase == PROD_FLUSH)
            return finish(p);
        if (atomic_load_explicit(&t->stop, memory_order_relaxed)) {
            end(p, SLUICE_ERR_CANCELLED);
            continue;
        }
        int rc = 0;
        if (p->publish || p->ext) {
            rc = push_pending(p);
            if (rc == PRODUCER_PARKED)
                return leave(t, POOL_PARK);
            if (rc < 0) {
                end(p, rc);
                continue;
            }
        }
        switch (p->phase) {
        case PROD_OPEN:
            if (t->mode == SLUICE_DISTRIBUTED_EPOCH) {
                rc = t->snap_dir ? check_snapshot_dir(t, p->err, sizeof p->err) : 0;
                p->phase = PROD_NEXT_SPLIT;
            } else {
                rc = open_whole(p);
            }
            break;
        case PROD_RUN:
            rc = produce(p, deadline);
            if (rc == 0) {
                pipe_run_free(p->run);
                p->run = NULL;
                if (t->mode != SLUICE_DISTRIBUTED_EPOCH) {
                    end(p, 0);
                    continue;
                }
                p->phase = PROD_END_SPLIT;
            }
            break;
        case PROD_NEXT_SPLIT:
            rc = next_split(p);
            if (rc == PRODUCER_END) {
                end(p, 0);
                continue;
            }
            break;
        case PROD_END_SPLIT:
            rc = end_split(p);
            if (rc == 0)
                p->phase = PROD_SPLIT_DONE;
            break;
        case PROD_SPLIT_DONE:
            rc = split_done(p);
            /* A slice takes splits one after another until its budget is spent. */
            if (rc == 0 && uv_hrtime() >= deadline)
                rc = PRODUCER_YIELD;
            break;
        case PROD_FLUSH:
            break;
        }
        if (rc == PRODUCER_PARKED)
            return leave(t, POOL_PARK);
        if (rc == PRODUCER_YIELD)
            return leave(t, POOL_YIELD);
        if (rc < 0)
            end(p, rc);
    }
}
