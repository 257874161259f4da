/* Saves of datasets into snapshot directories (docs/snapshots.md): the SaveSnapshot and
 * SnapshotStatus handlers, and the timer's part that finishes saves.
 *
 * Happy path of SaveSnapshot: the request is checked on the loop (names, an existing save of the
 * same dataset and path, an endless pipeline); the dataset's split plan is built on the thread
 * pool; the save is planned (plan_save_start: an anonymous distributed_epoch job, its iteration,
 * a task per worker, SAVE_STARTED) and committed; once durable, DIR/snapshot.json is written on
 * the thread pool (snap_meta_write) and only then the reply goes out, so the directory names its
 * dataset as soon as the caller hears of the save. The workers write the chunks; the save's
 * iteration finishes when every split is finished, that is every chunk committed.
 *
 * An s3:// destination (checked against the data roots on the loop) differs: SW_META deletes
 * the manifest and FAILED an earlier save left there and puts snapshot.json
 * (snap_objects_begin); the finalize is the same (snap_finalize: every chunk object checked,
 * then manifest.json put), so a reader never sees a manifest naming chunks not yet there.
 *
 * A save that failed is started again by the same request (a new save of the same dataset into
 * the same directory, which writes every chunk again; FAILED is removed when its meta is
 * written).
 *
 * The timer (dispatcher_saves_tick) then finalizes a running save whose iteration finished:
 * snap_finalize on the thread pool (every chunk checked, manifest.json written), then
 * SAVE_FINISHED. A finalize that fails (a chunk missing or damaged), or an iteration that failed
 * (a task's pipeline failed), writes DIR/FAILED and journals SAVE_FAILED with the reason. After
 * a restart the first tick writes the meta of every running save again (harmless when it is
 * there) and finalizes those whose iteration finished while nobody did, so nothing a crash
 * interrupted is lost. Disk work never runs on the loop; at most one piece of work per save runs
 * at a time (d->save_works). */

#include "plan.h"
#include "server_internal.h"

#include "common/cap.h"
#include "pipeline/objurl.h"
#include "pipeline/roots.h"
#include "pipeline/snapshot.h"

#include <errno.h>
#include <unistd.h>

enum save_work_kind {
    SW_PLAN,     /* a SaveSnapshot request: build the split plan */
    SW_META,     /* write snapshot.json (then answer the request, when there is one) */
    SW_FINALIZE, /* check every chunk and write manifest.json */
    SW_FAIL      /* write FAILED */
};

struct save_work {
    struct dispatcher *d;
    uv_work_t work;
    struct save_work *prev, *next; /* on d->save_works */
    enum save_work_kind kind;
    bool has_req;
    struct req r;
    uint64_t save_id; /* 0 while planning a new save */
    char dataset_id[ST_ID_MAX];
    char path[ST_PATH_MAX];
    /* SW_PLAN */
    uint8_t *def;
    size_t def_len;
    uint64_t split_size;
    bool endless;
    const struct pipe_roots *roots; /* d's; d outlives the work (d->save_works) */
    struct split_plan plan;
    /* SW_META */
    char *text;
    uint64_t chunks;
    /* SW_FAIL: the reason */
    char why[SLUICE_ERRMSG_SIZE];
    int rc;
    char err[SLUICE_ERRMSG_SIZE];
};

static void save_work_free(struct save_work *w)
{
    free(w->def);
    free(w->text);
    split_plan_release(&w->plan);
    free(w);
}

static bool save_busy(const struct dispatcher *d, uint64_t save_id)
{
    for (const struct save_work *w = d->save_works; w; w = w->next) {
        if (w->save_id == save_id)
            return true;
    }
    return false;
}

static void save_work_unlink(struct dispatcher *d, struct save_work *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        d->save_works = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

/* ---- on the thread pool: touches only w ---- */

static void save_work_run(uv_work_t *uw)
{
    struct save_work *w = uw->data;
    char why[SLUICE_ERRMSG_SIZE];
    switch (w->kind) {
    case SW_PLAN: {
        struct pipe_spec *spec;
        struct pipe_split_provider p;
        bool decoded;
        w->rc = dispatcher_split_dataset(w->def, w->def_len, w->roots, w->split_size, &spec, &p,
                                         &decoded, why, sizeof why);
        if (w->rc < 0) {
            err_set(w->err, sizeof w->err, w->rc,
                    decoded ? "cannot save dataset '%s': splitting it: %s" : "dataset '%s': %s",
                    w->dataset_id, why);
            return;
        }
        /* The workers write what they produce per split: operations that distributed_epoch
         * runs in the reader, over the merged stream, would be missing from the snapshot. */
        if (p.dist.cut < spec->nops) {
            char first[128];
            pipe_spec_format_ops(spec, p.dist.cut, p.dist.cut + 1, first, sizeof first);
            w->rc = err_set(w->err, sizeof w->err, SLUICE_ERR_UNSUPPORTED,
                            "cannot save dataset '%s': its operations from %s on run in the "
                            "reader, not per split (%s); save the pipeline before them and "
                            "apply them when reading the snapshot",
                            w->dataset_id, first, p.dist.why ? p.dist.why : "");
            pipe_split_provider_release(&p);
            pipe_spec_free(spec);
            return;
        }
        pipe_spec_free(spec);
        dispatcher_plan_take(&p, &w->plan);
        pipe_split_provider_release(&p);
        /* A directory that already holds another snapshot is refused before any worker is
         * told to write into it (its chunks would be overwritten). */
        struct snap_meta old;
        int mrc = snap_meta_read(w->path, &old, why, sizeof why);
        if (mrc == 0) {
            uint64_t chunks = split_plan_total(&w->plan);
            if (strcmp(old.dataset_id, w->dataset_id) != 0 || old.chunks != chunks)
                w->rc = err_set(w->err, sizeof w->err, SLUICE_ERR_EXISTS,
                                "snapshot path '%s' already holds a snapshot of dataset '%s' with "
                                "%" PRIu64 " chunks, not of dataset '%s' with %" PRIu64 " chunks",
                                w->path, old.dataset_id, old.chunks, w->dataset_id, chunks);
            snap_meta_release(&old);
        } else if (mrc != SLUICE_ERR_NOT_FOUND) {
            w->rc = err_set(w->err, sizeof w->err, mrc, "snapshot path '%s': %s", w->path, why);
        }
        return;
    }
    case SW_META: {
        struct snap_meta m = {.format = SNAP_FORMAT, .pipeline = w->text, .chunks = w->chunks};
        snprintf(m.dataset_id, sizeof m.dataset_id, "%s", w->dataset_id);
        /* An s3:// snapshot: an earlier save's manifest and FAILED go, then snapshot.json is
         * put (objects are not renamed into place: nothing else to prepare). */
        if (obj_is_url(w->path)) {
            w->rc = snap_objects_begin(w->path, &m, w->err, sizeof w->err);
            return;
        }
        /* A running save's directory says nothing of a failure: FAILED there is left from an
         * earlier attempt that failed (this save starts it again), or from a failure that was
         * not recorded before a crash (which, found again, writes it again). */
        char failed[ST_PATH_MAX + 16];
        snprintf(failed, sizeof failed, "%s/%s", w->path, SNAP_FAILED_FILE);
        if (unlink(failed) != 0 && errno != ENOENT) {
            w->rc =
                err_set(w->err, sizeof w->err, -errno, "removing %s: %s", failed, strerror(errno));
            return;
        }
        w->rc = snap_meta_write(w->path, &m, w->err, sizeof w->err);
        return;
    }
    case SW_FINALIZE:
        w->rc = snap_finalize(w->path, w->chunks, w->err, sizeof w->err);
        if (w->rc < 0) {
            snprintf(w->why, sizeof w->why, "%s", w->err);
            /* The reason is journaled whether or not FAILED could be written. */
            (void)snap_mark_failed(w->path, w->why, why, sizeof why);
        }
        return;
    case SW_FAIL:
        w->rc = snap_mark_failed(w->path, w->why, w->err, sizeof w->err);
        return;
    }
}

/* ---- replies ---- */

static void send_save_reply(struct dispatcher *d, struct req *r, uint64_t save_id)
{
    const struct st_save *sv = state_save(&d->st, save_id);
    if (!sv) {
        dispatcher_refuse(r->conn, r->id, SLUICE_ERR_NOT_FOUND, "the save is gone");
        return;
    }
    Sluice__SaveSnapshotReply body = SLUICE__SAVE_SNAPSHOT_REPLY__INIT;
    body.save_id = sv->id;
    body.chunks = sv->chunks;
    body.state = (char *)st_save_state_name(sv->state);
    body.error = sv->error ? sv->error : (char *)"";
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_SAVE_SNAPSHOT_REPLY;
    env.save_snapshot_reply = &body;
    dispatcher_send_reply(r, &env);
}

/* ---- queueing work ---- */

static void save_work_after(uv_work_t *uw, int status);

/* Queues w (its kind and fields set). On failure w is freed, its request refused. */
static void save_work_queue(struct dispatcher *d, struct save_work *w)
{
    w->d = d;
    w->work.data = w;
    int rc = uv_queue_work(d->loop, &w->work, save_work_run, save_work_after);
    if (rc < 0) {
        log_warn("snapshot %s: queueing work: %s", w->path, uv_strerror(rc));
        if (w->has_req) {
            char msg[SLUICE_ERRMSG_SIZE];
            snprintf(msg, sizeof msg, "queueing work: %s", uv_strerror(rc));
            dispatcher_refuse(w->r.conn, w->r.id, rc, msg);
            dispatcher_req_done(&w->r);
        }
        save_work_free(w);
        return;
    }
    w->next = d->save_works;
    if (d->save_works)
        d->save_works->prev = w;
    d->save_works = w;
}

/* The dataset's canonical pipeline text (malloc'd), for snapshot.json: as registered, or made
 * from its definition when it was registered without one. NULL when out of memory. */
static char *dataset_text(const struct st_dataset *ds)
{
    if (ds && ds->text && ds->text[0])
        return strdup(ds->text);
    struct pipe_spec *spec = NULL;
    char why[SLUICE_ERRMSG_SIZE];
    if (!ds || pipe_spec_decode(ds->def, ds->def_len, &spec, why, sizeof why) < 0)
        return strdup("?");
    int n = pipe_spec_format(spec, NULL, 0);
    char *text = n < 0 ? NULL : malloc((size_t)n + 1);
    if (text)
        pipe_spec_format(spec, text, (size_t)n + 1);
    pipe_spec_free(spec);
    return text;
}

/* Queues writing the meta of save sv; req (may be NULL) is answered once it is written, and
 * moved into the work. */
static void queue_meta(struct dispatcher *d, const struct st_save *sv, struct req *req)
{
    const struct st_dataset *ds = state_dataset(&d->st, sv->dataset_id);
    struct save_work *w = calloc(1, sizeof *w);
    char *text = dataset_text(ds);
    if (!w || !text) {
        free(w);
        free(text);
        if (req) {
            dispatcher_refuse(req->conn, req->id, SLUICE_ERR_NOMEM, "out of memory");
            dispatcher_req_done(req);
        }
        return;
    }
    w->kind = SW_META;
    w->save_id = sv->id;
    w->text = text;
    w->chunks = sv->chunks;
    snprintf(w->dataset_id, sizeof w->dataset_id, "%s", sv->dataset_id);
    snprintf(w->path, sizeof w->path, "%s", sv->path);
    if (req) {
        w->has_req = true;
        w->r = *req;
    }
    save_work_queue(d, w);
}

static void queue_over(struct dispatcher *d, const struct st_save *sv, enum save_work_kind kind,
                       const char *why)
{
    struct save_work *w = calloc(1, sizeof *w);
    if (!w)
        return; /* the next tick tries again */
    w->kind = kind;
    w->save_id = sv->id;
    w->chunks = sv->chunks;
    snprintf(w->dataset_id, sizeof w->dataset_id, "%s", sv->dataset_id);
    snprintf(w->path, sizeof w->path, "%s", sv->path);
    snprintf(w->why, sizeof w->why, "%s", why ? why : "");
    save_work_queue(d, w);
}

/* ---- SaveSnapshot ---- */

static void save_started(struct dispatcher *d, int status, void *ctx)
{
    struct save_work *w = ctx;
    if (status < 0) {
        dispatcher_refuse_commit(&w->r, status);
        dispatcher_req_done(&w->r);
        save_work_free(w);
        return;
    }
    const struct st_save *sv = state_save(&d->st, w->save_id);
    if (!sv) {
        dispatcher_refuse(w->r.conn, w->r.id, SLUICE_ERR_NOT_FOUND, "the save is gone");
        dispatcher_req_done(&w->r);
    } else {
        queue_meta(d, sv, &w->r);
    }
    save_work_free(w);
}

/* An existing save: answered once what the state shows is durable. */
static void save_existing(struct dispatcher *d, int status, void *ctx)
{
    struct save_work *w = ctx;
    if (status < 0)
        dispatcher_refuse_commit(&w->r, status);
    else
        send_save_reply(d, &w->r, w->save_id);
    dispatcher_req_done(&w->r);
    save_work_free(w);
}

/* Plans a new save with the plan built (or finds the save a request planned meanwhile), draws
 * the iteration's secret and commits; takes w. */
static void save_plan_and_commit(struct dispatcher *d, struct save_work *w)
{
    char err[SLUICE_ERRMSG_SIZE];
    size_t from = d->ups.n;
    int rc = plan_save_start(&d->st, w->dataset_id, w->path, &w->plan, w->endless, &w->save_id,
                             &d->ups, err, sizeof err);
    if (rc == 0)
        rc = dispatcher_draw_iteration_keys(d, from, err, sizeof err);
    if (rc < 0) {
        dispatcher_refuse(w->r.conn, w->r.id, rc, err);
        dispatcher_req_done(&w->r);
        save_work_free(w);
        return;
    }
    bool fresh = d->ups.n > from;
    dispatcher_commit(d, &d->ups, fresh ? save_started : save_existing, w);
}

void dispatcher_on_save_snapshot(struct dispatcher *d, struct rpc_conn *conn,
                                 const Sluice__Envelope *env)
{
    const Sluice__SaveSnapshotRequest *req = env->save_snapshot;
    char msg[SLUICE_ERRMSG_SIZE];
    int code = SLUICE_ERR_INVALID;
    /* Bounded before anything stores or echoes them. */
    if (name_check("dataset id", req->dataset_id, NAME_ID_MAX, msg, sizeof msg) < 0 ||
        name_check("snapshot path", req->path, ST_PATH_MAX - 1, msg, sizeof msg) < 0)
        goto refused;
    if (!req->dataset_id[0]) {
        snprintf(msg, sizeof msg, "a dataset id is required");
        goto refused;
    }
    const struct st_dataset *ds = state_dataset(&d->st, req->dataset_id);
    bool endless = false;
    if (ds) {
        struct pipe_spec *spec = NULL;
        char why[SLUICE_ERRMSG_SIZE / 2]; /* quoted in a longer message */
        int rc = pipe_spec_decode(ds->def, ds->def_len, &spec, why, sizeof why);
        if (rc < 0) {
            code = rc;
            snprintf(msg, sizeof msg, "dataset '%s': %s", ds->id, why);
            goto refused;
        }
        endless = pipe_spec_endless(spec);
        pipe_spec_free(spec);
    }
    uint64_t existing;
    int rc =
        plan_save_check(&d->st, req->dataset_id, req->path, endless, &existing, msg, sizeof msg);
    /* An s3:// destination lies within the data roots, as a URL a source names must. */
    if (rc == 0 && obj_is_url(req->path))
        rc = pipe_roots_check_url(&d->roots, "snapshot path", req->path, msg, sizeof msg);
    if (rc < 0) {
        code = rc;
        goto refused;
    }
    struct save_work *w = calloc(1, sizeof *w);
    if (!w) {
        code = SLUICE_ERR_NOMEM;
        snprintf(msg, sizeof msg, "out of memory");
        goto refused;
    }
    memcpy(w->dataset_id, req->dataset_id, strlen(req->dataset_id) + 1);
    memcpy(w->path, req->path, strlen(req->path) + 1);
    w->endless = endless;
    w->has_req = true;
    dispatcher_req_init(&w->r, d, conn, env->id);
    if (existing) {
        w->save_id = existing;
        dispatcher_commit(d, &d->ups, save_existing, w);
        return;
    }
    w->kind = SW_PLAN;
    w->def = malloc(ds->def_len ? ds->def_len : 1);
    if (!w->def) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        dispatcher_req_done(&w->r);
        save_work_free(w);
        return;
    }
    memcpy(w->def, ds->def, ds->def_len);
    w->def_len = ds->def_len;
    w->split_size = ds->split_size;
    w->roots = &d->roots;
    save_work_queue(d, w);
    return;

refused:
    dispatcher_refuse(conn, env->id, code, msg);
}

/* ---- SnapshotStatus ---- */

struct status_ctx {
    struct req r;
    char path[ST_PATH_MAX];
};

static void snapshot_status_done(struct dispatcher *d, int status, void *ctx)
{
    struct status_ctx *c = ctx;
    const struct st_save *sv = state_save_by_path(&d->st, c->path);
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
    } else if (!sv) {
        char msg[SLUICE_ERRMSG_SIZE + ST_PATH_MAX];
        snprintf(msg, sizeof msg, "no save into snapshot path '%s'", c->path);
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOT_FOUND, msg);
    } else {
        Sluice__SnapshotStatusReply body = SLUICE__SNAPSHOT_STATUS_REPLY__INIT;
        body.state = (char *)st_save_state_name(sv->state);
        body.chunks = sv->chunks;
        body.chunks_committed = state_save_committed(&d->st, sv);
        body.error = sv->error ? sv->error : (char *)"";
        body.dataset_id = (char *)sv->dataset_id;
        body.save_id = sv->id;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_SNAPSHOT_STATUS_REPLY;
        env.snapshot_status_reply = &body;
        dispatcher_send_reply(&c->r, &env);
    }
    dispatcher_req_done(&c->r);
    free(c);
}

void dispatcher_on_snapshot_status(struct dispatcher *d, struct rpc_conn *conn,
                                   const Sluice__Envelope *env)
{
    const Sluice__SnapshotStatusRequest *req = env->snapshot_status;
    char msg[SLUICE_ERRMSG_SIZE];
    if (name_check("snapshot path", req->path, ST_PATH_MAX - 1, msg, sizeof msg) < 0) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, msg);
        return;
    }
    struct status_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    memcpy(c->path, req->path, strlen(req->path) + 1);
    dispatcher_req_init(&c->r, d, conn, env->id);
    /* Answered once everything the state shows is durable, as every reply is. */
    dispatcher_commit(d, &d->ups, snapshot_status_done, c);
}

/* ---- after the work ---- */

static void gc_done(struct dispatcher *d, int status, void *ctx)
{
    (void)d;
    (void)status;
    (void)ctx;
}

/* A failed save's iteration is collected at once: its tasks are removed, so workers still
 * writing chunks for it stop (their temporary files are removed), rather than writing on until
 * the iteration is idle for the collection timeout. */
static void save_over_done(struct dispatcher *d, int status, void *ctx)
{
    uint64_t save_id = (uint64_t)(uintptr_t)ctx;
    const struct st_save *sv = state_save(&d->st, save_id);
    if (status < 0 || d->closing || d->fatal || !sv || sv->state != ST_SV_FAILED)
        return;
    const struct st_iteration *it = state_iteration(&d->st, sv->iteration_id);
    if (!it || it->state == ST_ITER_GC || state_iteration_clients(&d->st, it->id) > 0)
        return;
    char err[SLUICE_ERRMSG_SIZE];
    if (plan_gc_iteration(&d->st, it->id, &d->ups, err, sizeof err) < 0) {
        log_warn("save %" PRIu64 ": collecting iteration %" PRIu64 ": %s", save_id, it->id, err);
        return;
    }
    dispatcher_commit(d, &d->ups, gc_done, NULL);
}

/* Journals the end of save_id: finished when why is NULL, else failed with why. */
static void save_over_commit(struct dispatcher *d, uint64_t save_id, const char *why)
{
    char err[SLUICE_ERRMSG_SIZE];
    int rc = why ? plan_save_failed(&d->st, save_id, why, &d->ups, err, sizeof err)
                 : plan_save_finished(&d->st, save_id, &d->ups, err, sizeof err);
    if (rc < 0) {
        log_warn("save %" PRIu64 ": %s", save_id, err);
        return;
    }
    dispatcher_commit(d, &d->ups, save_over_done, (void *)(uintptr_t)save_id);
}

static void save_work_after(uv_work_t *uw, int status)
{
    struct save_work *w = uw->data;
    struct dispatcher *d = w->d;
    save_work_unlink(d, w);
    if (status < 0 || d->closing || d->fatal) {
        if (w->has_req) {
            dispatcher_refuse(w->r.conn, w->r.id, SLUICE_ERR_UNAVAILABLE,
                              "the dispatcher is shutting down");
            dispatcher_req_done(&w->r);
        }
        save_work_free(w);
        dispatcher_maybe_finish_close(d);
        return;
    }
    switch (w->kind) {
    case SW_PLAN:
        if (w->rc < 0) {
            dispatcher_refuse(w->r.conn, w->r.id, w->rc, w->err);
            dispatcher_req_done(&w->r);
            save_work_free(w);
            return;
        }
        save_plan_and_commit(d, w); /* takes w */
        return;
    case SW_META:
        if (w->rc < 0) {
            /* The directory cannot hold this snapshot (another one is there, or it cannot be
             * written): the save fails, and the request hears why. */
            char why[SLUICE_ERRMSG_SIZE + 64];
            if (obj_is_url(w->path)) /* the message names the object */
                snprintf(why, sizeof why, "%s", w->err);
            else
                snprintf(why, sizeof why, "writing %s: %s", SNAP_META_FILE, w->err);
            log_warn("save %" PRIu64 " into %s: %s", w->save_id, w->path, why);
            save_over_commit(d, w->save_id, why);
            if (w->has_req) {
                dispatcher_refuse(w->r.conn, w->r.id, w->rc, why);
                dispatcher_req_done(&w->r);
            }
        } else if (w->has_req) {
            send_save_reply(d, &w->r, w->save_id);
            dispatcher_req_done(&w->r);
        }
        break;
    case SW_FINALIZE:
        if (w->rc < 0)
            log_warn("save %" PRIu64 " into %s failed: %s", w->save_id, w->path, w->why);
        save_over_commit(d, w->save_id, w->rc < 0 ? w->why : NULL);
        break;
    case SW_FAIL:
        if (w->rc < 0)
            log_warn("save %" PRIu64 ": writing %s into %s: %s", w->save_id, SNAP_FAILED_FILE,
                     w->path, w->err);
        save_over_commit(d, w->save_id, w->why);
        break;
    }
    save_work_free(w);
}

/* ---- the timer's part ---- */

void dispatcher_saves_tick(struct dispatcher *d)
{
    if (d->fatal || d->closing)
        return;
    /* After a start (a restart: the journal may hold running saves), each running save's meta is
     * written again: the last dispatcher may have died before it did. */
    bool resume = !d->saves_resumed;
    d->saves_resumed = true;
    for (size_t i = 0; i < d->st.nsaves; i++) {
        const struct st_save *sv = &d->st.saves[i];
        if (sv->state != ST_SV_RUNNING || save_busy(d, sv->id))
            continue;
        if (resume) {
            log_info("save %" PRIu64 " of dataset '%s' into %s resumes: %" PRIu64 " of %" PRIu64
                     " chunks committed",
                     sv->id, sv->dataset_id, sv->path, state_save_committed(&d->st, sv),
                     sv->chunks);
            queue_meta(d, sv, NULL);
            continue;
        }
        const struct st_iteration *it = state_iteration(&d->st, sv->iteration_id);
        if (!it || it->state == ST_ITER_GC)
            queue_over(d, sv, SW_FAIL, "the save's iteration is gone");
        else if (it->error)
            queue_over(d, sv, SW_FAIL, it->error);
        else if (it->state == ST_ITER_FINISHED)
            queue_over(d, sv, SW_FINALIZE, NULL);
    }
}

void dispatcher_saves_cancel(struct dispatcher *d)
{
    /* Queued work is dropped; work already running finishes and its callback frees it. */
    for (struct save_work *w = d->save_works; w; w = w->next)
        uv_cancel((uv_req_t *)&w->work);
}
