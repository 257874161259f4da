/* RPC handlers for datasets: RegisterDataset and GetDataset. */

#include "plan.h"
#include "server_internal.h"

#include "pipeline/roots.h"
#include "pipeline/snapshot.h"
#include "pipeline/split.h"

/* ---- RegisterDataset ------------------------------------------------------------------------- *
 *
 * The definition is decoded and validated on the loop. With data roots, a file source's globs are
 * then checked against them on the thread pool (the check lists directories), and the dataset is
 * planned and committed back on the loop once it passes. A snapshot source goes through the thread
 * pool too, with or without roots: its directory must hold a snapshot.json. So does a source
 * naming s3:// globs: they are listed there, once (pipe_source_pin), and the stored definition
 * names the objects pinned to their sizes and ETags, which is all that workers and plans read. */

struct register_ctx {
    struct req r;
    char dataset_id[ST_ID_MAX];

    /* What the plan needs, kept across the check on the thread pool. */
    char *requested_id; /* the request's dataset_id, "" for none */
    uint8_t *canon;
    size_t canon_len;
    int compression;
    uint64_t split_size;
    char *text;

    uv_work_t work;
    struct pipe_spec *spec;
    const struct pipe_roots *roots; /* d's; d outlives the work (d->checks) */
    int rc;
    char err[SLUICE_ERRMSG_SIZE];
};

static void register_ctx_free(struct register_ctx *c)
{
    if (!c)
        return;
    free(c->requested_id);
    free(c->canon);
    free(c->text);
    pipe_spec_free(c->spec);
    free(c);
}

static void register_done(struct dispatcher *d, int status, void *ctx)
{
    struct register_ctx *c = ctx;
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
    } else {
        Sluice__RegisterDatasetReply body = SLUICE__REGISTER_DATASET_REPLY__INIT;
        body.dataset_id = c->dataset_id;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_REGISTER_DATASET_REPLY;
        env.register_dataset_reply = &body;
        dispatcher_send_reply(&c->r, &env);
    }
    dispatcher_req_done(&c->r);
    register_ctx_free(c);
}

/* Plans the registration and commits it; takes c (its request initialised). */
static void register_plan_and_commit(struct dispatcher *d, struct register_ctx *c)
{
    char err[SLUICE_ERRMSG_SIZE];
    int rc = plan_register_dataset(&d->st, c->requested_id, c->canon, c->canon_len, c->compression,
                                   c->split_size, c->text, c->dataset_id, &d->ups, err, sizeof err);
    if (rc < 0) {
        dispatcher_refuse(c->r.conn, c->r.id, rc, err);
        dispatcher_req_done(&c->r);
        register_ctx_free(c);
        return;
    }
    dispatcher_commit(d, &d->ups, register_done, c);
}

/* On the thread pool: the data roots check. Touches only c. */
static void register_check_work(uv_work_t *w)
{
    struct register_ctx *c = w->data;
    const struct pipe_source *src = &c->spec->source;
    c->rc = pipe_roots_check_source(c->roots, src, c->err, sizeof c->err);
    if (c->rc == 0 && src->kind == PIPE_SRC_SNAPSHOT) {
        struct snap_meta m;
        char why[SLUICE_ERRMSG_SIZE - 16];
        c->rc = snap_meta_read(src->globs[0], &m, why, sizeof why);
        if (c->rc == 0)
            snap_meta_release(&m);
        else
            snprintf(c->err, sizeof c->err, "snapshot %s", why);
    }
    if (c->rc == 0 && pipe_source_needs_pin(src)) {
        c->rc = pipe_source_pin(&c->spec->source, c->err, sizeof c->err);
        if (c->rc == 0) {
            free(c->canon);
            c->canon = NULL;
            c->rc = pipe_spec_encode(c->spec, &c->canon, &c->canon_len);
            if (c->rc < 0)
                snprintf(c->err, sizeof c->err, "encoding the dataset definition: %s",
                         sluice_strerror(c->rc));
        }
    }
}

static void register_check_after(uv_work_t *w, int status)
{
    struct register_ctx *c = w->data;
    struct dispatcher *d = c->r.d;
    d->checks--;
    if (status < 0 || d->closing) {
        dispatcher_req_done(&c->r);
        register_ctx_free(c);
        dispatcher_maybe_finish_close(d);
        return;
    }
    if (c->rc < 0) {
        /* A file the pipeline names that cannot be resolved or read (an errno) is the
         * pipeline's fault, not the dispatcher's: refused as invalid, which a client does not
         * retry as it retries a system error on the way to the dispatcher. */
        int code = c->rc > SLUICE_ERR_BASE ? SLUICE_ERR_INVALID : c->rc;
        dispatcher_refuse(c->r.conn, c->r.id, code, c->err);
        dispatcher_req_done(&c->r);
        register_ctx_free(c);
        return;
    }
    register_plan_and_commit(d, c);
}

void dispatcher_on_register_dataset(struct dispatcher *d, struct rpc_conn *conn,
                                    const Sluice__Envelope *env)
{
    const Sluice__RegisterDatasetRequest *req = env->register_dataset;
    char err[SLUICE_ERRMSG_SIZE], why[SLUICE_ERRMSG_SIZE];
    uint8_t *packed = NULL;
    struct register_ctx *c = NULL;
    int rc;

    if (!req->dataset) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, "register_dataset needs a dataset");
        return;
    }
    /* The cheap checks first: a bad id, or a definition over the limit, is refused before the
     * definition is decoded (the planning checks both again, on the canonical bytes). */
    if (name_check("dataset id", req->dataset_id, NAME_ID_MAX, err, sizeof err) < 0) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    if (req->compression != SLUICE__COMPRESSION__COMPRESSION_AUTO &&
        req->compression != SLUICE__COMPRESSION__COMPRESSION_NONE) {
        snprintf(err, sizeof err, "unknown compression %d", (int)req->compression);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, err);
        return;
    }
    c = calloc(1, sizeof *c);
    if (!c || !(c->requested_id = strdup(req->dataset_id ? req->dataset_id : ""))) {
        rc = err_set(err, sizeof err, SLUICE_ERR_NOMEM, "out of memory");
        goto refused;
    }
    c->compression = (int)req->compression;
    c->split_size = req->split_size;
    /* Decoding the definition is the validation: what the workers will build from it must parse
     * now. The stored bytes are the canonical encoding of what was decoded. */
    size_t len = sluice__dataset_def__get_packed_size(req->dataset);
    uint64_t max_bytes = d->st.limits.max_pipeline_bytes;
    if (max_bytes && len > max_bytes) {
        rc = err_set(err, sizeof err, SLUICE_ERR_LIMIT,
                     "pipeline of %zu bytes is over the limit of %" PRIu64
                     " bytes (--max-pipeline-bytes)",
                     len, max_bytes);
        goto refused;
    }
    packed = malloc(len ? len : 1);
    if (!packed) {
        rc = err_set(err, sizeof err, SLUICE_ERR_NOMEM, "out of memory");
        goto refused;
    }
    sluice__dataset_def__pack(req->dataset, packed);
    rc = pipe_spec_decode(packed, len, &c->spec, why, sizeof why);
    if (rc < 0) {
        err_set(err, sizeof err, rc, "%s", why);
        goto refused;
    }
    rc = pipe_spec_encode(c->spec, &c->canon, &c->canon_len);
    if (rc < 0) {
        err_set(err, sizeof err, rc, "encoding the dataset definition: %s", sluice_strerror(rc));
        goto refused;
    }
    rc = pipe_spec_format(c->spec, NULL, 0);
    if (rc >= 0) {
        c->text = malloc((size_t)rc + 1);
        if (!c->text)
            rc = SLUICE_ERR_NOMEM;
        else
            pipe_spec_format(c->spec, c->text, (size_t)rc + 1);
    }
    if (rc < 0) {
        err_set(err, sizeof err, rc, "formatting the pipeline: %s", sluice_strerror(rc));
        goto refused;
    }
    free(packed);
    dispatcher_req_init(&c->r, d, conn, env->id);
    if ((!pipe_roots_active(&d->roots) || !pipe_source_reads_files(c->spec->source.kind)) &&
        c->spec->source.kind != PIPE_SRC_SNAPSHOT && !pipe_source_needs_pin(&c->spec->source)) {
        register_plan_and_commit(d, c);
        return;
    }
    c->roots = &d->roots;
    c->work.data = c;
    rc = uv_queue_work(d->loop, &c->work, register_check_work, register_check_after);
    if (rc < 0) {
        snprintf(err, sizeof err, "queueing work: %s", uv_strerror(rc));
        dispatcher_refuse(conn, env->id, rc, err);
        dispatcher_req_done(&c->r);
        register_ctx_free(c);
        return;
    }
    d->checks++;
    return;

refused:
    dispatcher_refuse(conn, env->id, rc, err);
    free(packed);
    register_ctx_free(c);
}

/* ---- GetDataset ------------------------------------------------------------------------------ */

struct get_dataset_ctx {
    struct req r;
    char dataset_id[ST_ID_MAX];
};

static void get_dataset_done(struct dispatcher *d, int status, void *ctx)
{
    struct get_dataset_ctx *c = ctx;
    const struct st_dataset *ds = state_dataset(&d->st, c->dataset_id);
    const Sluice__DatasetDef *def = ds ? dispatcher_dataset_def(d, ds) : NULL;
    if (status < 0) {
        dispatcher_refuse_commit(&c->r, status);
    } else if (!ds) {
        char msg[SLUICE_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "dataset '%s' not found", c->dataset_id);
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOT_FOUND, msg);
    } else if (!def) {
        dispatcher_refuse(c->r.conn, c->r.id, SLUICE_ERR_NOMEM, "out of memory");
    } else {
        Sluice__GetDatasetReply body = SLUICE__GET_DATASET_REPLY__INIT;
        /* protobuf-c packs through const pointers; the generated struct just lacks const. */
        body.dataset = (Sluice__DatasetDef *)def;
        body.compression = (Sluice__Compression)ds->compression;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET_REPLY;
        env.get_dataset_reply = &body;
        dispatcher_send_reply(&c->r, &env);
    }
    dispatcher_req_done(&c->r);
    free(c);
}

void dispatcher_on_get_dataset(struct dispatcher *d, struct rpc_conn *conn,
                               const Sluice__Envelope *env)
{
    const char *id = env->get_dataset->dataset_id;
    char msg[SLUICE_ERRMSG_SIZE];
    if (name_check("dataset id", id, NAME_ID_MAX, msg, sizeof msg) < 0) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_INVALID, msg);
        return;
    }
    if (!state_dataset(&d->st, id)) {
        snprintf(msg, sizeof msg, "dataset '%s' not found", id);
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOT_FOUND, msg);
        return;
    }
    struct get_dataset_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        dispatcher_refuse(conn, env->id, SLUICE_ERR_NOMEM, "out of memory");
        return;
    }
    memcpy(c->dataset_id, id, strlen(id) + 1);
    dispatcher_req_init(&c->r, d, conn, env->id);
    dispatcher_commit(d, &d->ups, get_dataset_done, c);
}
