/* Opening a read (sluice_iterator_open): the options checked, a checkpoint's restore checked and
 * seeded, the job and the dataset asked of the dispatcher, the local tail and the dataset's
 * reader-side operations opened, and the loop thread's part started. */
#include "iterator_internal.h"

#include "common/shm_ring.h"

#include "checkpoint.h"

#include "common/labels.h"
#include "common/mode.h"
#include "common/names.h"

/* Checks a local tail without opening it: it parses and names known functions. *repeat_column
 * receives the column of its first repeat that re-reads the stream (pipe_spec_first_repeat), 0
 * when it has none. */
static int check_local(struct sluice_iterator *it, const char *text, int *repeat_column, char *err,
                       size_t errlen)
{
    char msg[SLUICE_ERRMSG_SIZE];
    struct pipe_spec *spec = NULL;
    int rc = pipe_parse_tail(text, &spec, msg, sizeof msg);
    if (rc == 0)
        rc = pipe_registry_check(it->c->reg, spec, msg, sizeof msg);
    if (rc == 0) {
        const struct pipe_op *rep = pipe_spec_first_repeat(spec);
        *repeat_column = rep ? rep->column : 0;
    }
    pipe_spec_free(spec);
    if (rc)
        return err_set(err, errlen, rc == SLUICE_ERR_NOMEM ? rc : SLUICE_ERR_PARSE,
                       "local tail: %s", msg);
    return 0;
}

/* In distributed_epoch, the operations that pipe_dist_analyze() places in the reader (a batch
 * after a filter, a take after a shuffle, a batch of file records...) run here over the merged
 * stream, before the local tail: the tail is reopened as the dataset's part, then the local
 * text. */
static int open_dataset_tail(struct sluice_iterator *it, const struct sluice_read_options *o,
                             char *err, size_t errlen)
{
    struct pipe_spec *spec = NULL;
    struct pipe_dist d;
    char msg[SLUICE_ERRMSG_SIZE];
    char *text = NULL;
    int rc = pipe_spec_decode(it->def, it->def_len, &spec, msg, sizeof msg);
    if (rc) {
        rc = err_set(err, errlen, rc, "dataset '%s': %s", it->dataset_id, msg);
        goto out;
    }
    rc = pipe_dist_analyze(spec, &d, msg, sizeof msg);
    if (rc) {
        rc = err_set(err, errlen, rc, "dataset '%s': %s", it->dataset_id, msg);
        goto out;
    }
    if (d.cut == spec->nops) {
        if (o->local && *o->local)
            rc = iter_open_tail(it, o->local, "local tail", err, errlen);
        goto out;
    }
    if (d.client_slices && o->job_name && *o->job_name) {
        char first[128];
        pipe_spec_format_ops(spec, d.cut, d.cut + 1, first, sizeof first);
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                     "dataset '%s': in distributed_epoch its operations from %s on run in each "
                     "reader (%s), so a take, skip or shard among them cannot hold over a job "
                     "shared by several readers (--job-name); read it without a job name or "
                     "move them before the operation that needs the whole stream",
                     it->dataset_id, first, d.why);
        goto out;
    }
    int n = pipe_spec_format_ops(spec, d.cut, spec->nops, NULL, 0);
    size_t local = o->local && *o->local ? strlen(o->local) : 0;
    text = n < 0 ? NULL : malloc((size_t)n + local + 4);
    if (!text) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        goto out;
    }
    pipe_spec_format_ops(spec, d.cut, spec->nops, text, (size_t)n + 1);
    if (local)
        sprintf(text + n, " | %s", o->local);
    rc = iter_open_tail(it, text, "operations run in the reader", err, errlen);
out:
    free(text);
    pipe_spec_free(spec);
    return rc;
}

/* In distributed_epoch a dataset that is a mix is read as one read per input, mixed in the reader
 * (iterator_mix.c). Returns 1 when it was (and is open), 0 when the dataset is no mix, or a
 * negative code with err. A mix's checkpoint restores only a mix. */
static int open_mix(struct sluice_iterator *it, const struct sluice_read_options *o,
                    const struct checkpoint_mix *mck, uint64_t repetition, char *err, size_t errlen)
{
    struct pipe_spec *spec = NULL;
    char msg[SLUICE_ERRMSG_SIZE];
    int rc = pipe_spec_decode(it->def, it->def_len, &spec, msg, sizeof msg);
    if (rc)
        return err_set(err, errlen, rc, "dataset '%s': %s", it->dataset_id, msg);
    if (!pipe_source_mixes(spec->source.kind)) {
        pipe_spec_free(spec);
        return 0;
    }
    if (o->restore && !mck)
        rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                     "the checkpoint does not fit dataset '%s': it is a mix, and the checkpoint "
                     "is not of a read of a mix",
                     it->dataset_id);
    else if (o->shard_count > 0)
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                     "dataset '%s' is a mix: a sharded read needs a deterministic read's canonical "
                     "order, and a mix has its schedule instead",
                     it->dataset_id);
    else
        rc = iter_mix_open(it, spec, o, mck, repetition, err, errlen);
    pipe_spec_free(spec);
    if (rc == 0 && o->restore && it->tail)
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                     "a checkpoint cannot restore a read with operations run in the reader (a "
                     "local tail, or a dataset whose operations run partly in the reader)");
    return rc ? rc : 1;
}

static int take_job(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    struct sluice_iterator *it = user;
    const Sluice__GetOrCreateJobReply *r = reply->get_or_create_job_reply;
    if (!r || !r->client_id)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "dispatcher sent no client id");
    it->job_id = r->job_id;
    it->iteration_id = r->iteration_id;
    it->client_id = r->client_id;
    if (r->client_key.len > sizeof it->client_key)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL,
                       "dispatcher sent a client key of %zu bytes", r->client_key.len);
    if (r->client_key.len)
        memcpy(it->client_key, r->client_key.data, r->client_key.len);
    it->client_key_len = r->client_key.len;
    it->heartbeat_ms = r->heartbeat_ms ? r->heartbeat_ms : ITER_DEFAULT_HEARTBEAT_MS;
    it->plan_hash = r->plan_fingerprint;
    it->split_total = r->split_total;
    it->repetition = r->repetition;
    return 0;
}

/* Checks a checkpoint against the read's options before anything is asked of the dispatcher;
 * fills in the dataset id and job name the options left out. */
static int restore_check(const struct checkpoint *ck, const struct sluice_read_options *o,
                         const char **dataset_id, const char **job_name, char *err, size_t errlen)
{
    if (o->dataset_id && *o->dataset_id && strcmp(o->dataset_id, ck->dataset_id) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the checkpoint is of dataset '%s', not '%s'", ck->dataset_id,
                       o->dataset_id);
    if (!(o->pipeline && *o->pipeline))
        *dataset_id = ck->dataset_id;
    /* A sharded read reads a job of its own, whichever job the position was taken in. */
    if (!(o->job_name && *o->job_name) && o->shard_count == 0)
        *job_name = ck->job_name;
    return 0;
}

/* The read starts where the checkpoint left off: both ledgers know what the reader had. */
static int restore_seed(struct sluice_iterator *it, const struct checkpoint *ck)
{
    int rc = checkpoint_seed(&it->ledger, &ck->pos, true);
    if (rc == 0)
        rc = checkpoint_seed(&it->delivered, &ck->pos, false);
    /* Deterministic: what the reader had of a split is a prefix of it (the canonical order); the
     * splits it had whole are passed over once the dispatcher says they are finished. */
    for (size_t i = 0; rc == 0 && it->det && i < ck->pos.n; i++) {
        const struct ledger_split *s = &ck->pos.v[i];
        if (s->got.n > 0 && s->got.v[0].begin == 0)
            rc = reorder_accept_seed(&it->ra, s->seq, s->got.v[0].end);
        /* A merge of shared consumers' positions: later parts too (det_skip_had). */
        if (s->got.n > 1 || (s->got.n == 1 && s->got.v[0].begin > 0))
            it->det_had = true;
    }
    it->taken_local = ck->delivered;
    atomic_store(&it->taken, ck->delivered);
    return rc;
}

static int take_dataset(const Sluice__Envelope *reply, void *user, char *err, size_t errlen)
{
    struct sluice_iterator *it = user;
    const Sluice__GetDatasetReply *r = reply->get_dataset_reply;
    if (!r || !r->dataset)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "dispatcher sent no dataset definition");
    if (iter_pack_def(r->dataset, &it->def, &it->def_len) != 0)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    /* A dataset registered deterministic reads so by default (in distributed_epoch). */
    it->det = it->mode == SLUICE_DISTRIBUTED_EPOCH && !it->coordinated && r->dataset->deterministic;
    return 0;
}

static int check_options(const struct sluice_read_options *o, char *err, size_t errlen)
{
    if (o->shm_bytes && shm_ring_check_size(o->shm_bytes) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "shm_bytes: expected a multiple of 64 from %llu to %llu, got %llu",
                       (unsigned long long)SHM_RING_MIN, (unsigned long long)SHM_RING_MAX,
                       (unsigned long long)o->shm_bytes);
    bool has_dataset = o->dataset_id && *o->dataset_id;
    bool has_pipeline = o->pipeline && *o->pipeline;
    if (has_dataset && has_pipeline)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "exactly one of a dataset id and a pipeline is required");
    if (!has_dataset && !has_pipeline && !o->restore)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "exactly one of a dataset id and a pipeline is required");
    if (o->restore && o->mode != SLUICE_DISTRIBUTED_EPOCH)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "a checkpoint restores distributed_epoch reads only, not %s",
                       mode_name(o->mode));
    if (o->restore && o->num_consumers > 0)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "a checkpoint cannot restore a coordinated read (num_consumers)");
    /* The dispatcher checks names the same way; checking here tells the user before any
     * round trip. */
    int rc = name_check("dataset id", has_dataset ? o->dataset_id : "", NAME_ID_MAX, err, errlen);
    if (rc == 0)
        rc = name_check("job name", o->job_name ? o->job_name : "", NAME_ID_MAX, err, errlen);
    if (rc < 0)
        return rc;
    if (!mode_valid((int)o->mode))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "unknown mode %d", (int)o->mode);
    if (o->num_consumers > 0) {
        if (!o->job_name || !*o->job_name)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "coordinated reads (num_consumers) need a job name");
        if (o->consumer_index >= o->num_consumers)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "consumer index %" PRIu32 " is not below num_consumers %" PRIu32,
                           o->consumer_index, o->num_consumers);
    } else if (o->consumer_index != 0) {
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a consumer index needs num_consumers");
    }
    if (o->deterministic && o->mode != SLUICE_DISTRIBUTED_EPOCH)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "deterministic reads need mode distributed_epoch, not %s",
                       mode_name(o->mode));
    if (o->deterministic && o->num_consumers > 0)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "deterministic reads cannot be coordinated (num_consumers): rounds already "
                       "fix which elements each consumer gets");
    if (o->shard_count == 0 && o->shard_index != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a shard index needs a shard count");
    if (o->shard_count > 0) {
        if (o->shard_index >= o->shard_count)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "shard index %" PRIu32 " is not below the shard count %" PRIu32,
                           o->shard_index, o->shard_count);
        if (o->mode != SLUICE_DISTRIBUTED_EPOCH)
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "sharded reads need mode distributed_epoch, not %s", mode_name(o->mode));
        if (o->num_consumers > 0)
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "a sharded read cannot be coordinated (num_consumers)");
        if (o->job_name && *o->job_name)
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "a sharded read reads a job of its own, not job '%s': readers sharing "
                           "a job divide its splits, so none would pass the whole canonical order",
                           o->job_name);
        if (o->cross_trainer_cache)
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "a sharded read cannot use a cross-trainer cache");
    }
    if (o->whole_copies && o->mode == SLUICE_DISTRIBUTED_EPOCH)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "whole_copies cannot be used with mode distributed_epoch: its elements "
                       "arrive exactly once through any worker loss, not in copies");
    if (o->whole_copies && o->num_consumers > 0)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "whole_copies cannot be used with coordinated reads (num_consumers): "
                       "they skip the rounds of a lost worker by design");
    if (!target_workers_valid((int)o->target_workers))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "unknown target_workers %d",
                       (int)o->target_workers);
    if (o->target_workers != SLUICE_TARGET_WORKERS_ANY && o->num_consumers > 0)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "target_workers %s cannot be combined with num_consumers: coordinated "
                       "reads need every worker",
                       target_workers_name(o->target_workers));
    if (o->worker_selector && o->worker_selector[0]) {
        struct selector sel;
        char why[SLUICE_ERRMSG_SIZE / 2];
        if (selector_parse(o->worker_selector, &sel, why, sizeof why) < 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "worker selector: %s", why);
    }
    if (!(o->hedge_factor == 0 || (o->hedge_factor > 0 && o->hedge_factor <= 1000)))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "hedge_factor must be 0 (off) or above 0 and at most 1000, not %g",
                       o->hedge_factor);
    double weight = o->weight == 0 ? 1 : o->weight;
    if (!(weight > 0 && weight <= 1e6))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "weight must be a number above 0 and at most 1000000, not %g", o->weight);
    if (o->min_workers && o->max_workers && o->min_workers > o->max_workers)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "min_workers %" PRIu32 " is above max_workers %" PRIu32, o->min_workers,
                       o->max_workers);
    if (o->cross_trainer_cache) {
        /* The dispatcher refuses the rest (mode, num_consumers, a pipeline that ends); the
         * trainer id goes to the workers only. */
        if (!o->job_name || !*o->job_name)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "cross_trainer_cache needs a job name: the trainers share one job");
        if (!o->trainer_id || !*o->trainer_id)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "cross_trainer_cache needs a trainer id");
        rc = name_check("trainer id", o->trainer_id, ITER_TRAINER_ID_MAX, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int sluice_iterator_open(struct sluice_client *c, const struct sluice_read_options *o,
                         struct sluice_iterator **out, char *err, size_t errlen)
{
    return iter_open_read(c, o, NULL, 0, 0, out, err, errlen);
}

int iter_open_read(struct sluice_client *c, const struct sluice_read_options *o,
                   const atomic_int *also, uint64_t repetition, uint64_t resume_id,
                   struct sluice_iterator **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!c || !o || !out)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "client, options and out are required");
    int rc = check_options(o, err, errlen);
    if (rc)
        return rc;
    struct checkpoint ck;
    checkpoint_init(&ck);
    const char *dataset_opt = o->dataset_id, *job_opt = o->job_name;
    /* A mix's checkpoint (iterator_mix.c) nests its inputs' checkpoints, checked as they open. */
    struct checkpoint_mix *mck = NULL;
    if (o->restore && checkpoint_is_mix(o->restore, o->restore_len)) {
        mck = malloc(sizeof *mck);
        if (!mck)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        rc = checkpoint_mix_decode(o->restore, o->restore_len, mck, err, errlen);
        if (rc == 0) {
            snprintf(ck.dataset_id, sizeof ck.dataset_id, "%s", mck->dataset_id);
            snprintf(ck.job_name, sizeof ck.job_name, "%s", mck->job_name);
            ck.def_hash = mck->def_hash;
            rc = restore_check(&ck, o, &dataset_opt, &job_opt, err, errlen);
        }
        if (rc) {
            free(mck);
            return rc;
        }
    } else if (o->restore) {
        rc = checkpoint_decode(o->restore, o->restore_len, &ck, err, errlen);
        if (rc == 0)
            rc = restore_check(&ck, o, &dataset_opt, &job_opt, err, errlen);
        if (rc) {
            checkpoint_release(&ck);
            return rc;
        }
    }
    unsigned cap =
        o->max_outstanding_requests ? o->max_outstanding_requests : ITER_DEFAULT_OUTSTANDING;
    if (cap > ITER_MAX_OUTSTANDING)
        cap = ITER_MAX_OUTSTANDING;

    struct sluice_iterator *it = calloc(1, sizeof *it);
    if (!it) {
        free(mck);
        checkpoint_release(&ck);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    }
    it->c = c;
    it->also_interrupted = also;
    it->coordinated = o->num_consumers > 0;
    it->track = o->mode == SLUICE_DISTRIBUTED_EPOCH && !it->coordinated;
    ledger_init(&it->delivered);
    it->consumer_index = o->consumer_index;
    it->num_consumers = o->num_consumers;
    atomic_init(&it->interrupted, 0);
    atomic_init(&it->taken, 0);
    pipe_elem_init(&it->elem);
    ledger_init(&it->ledger);
    tasks_init(&it->tasks, it->coordinated, ITER_PER_TASK_MAX);
    it->target = o->target_workers;
    it->no_shm = o->no_shm;
    it->shm_bytes = o->shm_bytes;
    tasks_set_target(&it->tasks, it->target == SLUICE_TARGET_WORKERS_LOCAL,
                     it->target == SLUICE_TARGET_WORKERS_AUTO);
    if (uv_mutex_init(&it->mu) != 0) {
        free(it);
        free(mck);
        checkpoint_release(&ck);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "mutex: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    }
    if (uv_cond_init(&it->cond) != 0) {
        uv_mutex_destroy(&it->mu);
        free(it);
        free(mck);
        checkpoint_release(&ck);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "condition variable: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    }
    rc = prefetch_init(&it->pf, cap);
    if (rc) {
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        goto fail;
    }
    rc = hostid_get(it->host_id, sizeof it->host_id, err, errlen);
    if (rc)
        goto fail;

    /* Everything that can be checked locally is, before the dispatcher hears of the read. The
     * tail is opened (and its thread started) only once the dataset's own part is known. */
    int repeat_column = 0;
    if (o->local && *o->local) {
        rc = check_local(it, o->local, &repeat_column, err, errlen);
        if (rc)
            goto fail;
    }
    if (repeat_column && o->restore) {
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                     "a checkpoint cannot restore a read with operations run in the reader (a "
                     "local tail, or a dataset whose operations run partly in the reader)");
        goto fail;
    }
    reorder_accept_init(&it->ra);
    reorder_queue_init(&it->rq, o->reorder_bytes ? o->reorder_bytes : ITER_REORDER_BYTES);
    if (o->pipeline && *o->pipeline) {
        const struct sluice_register_options ro = {.split_size = o->split_size};
        rc = client_register(c, o->pipeline, &ro, it->dataset_id, sizeof it->dataset_id, err,
                             errlen);
        if (rc)
            goto fail;
    } else {
        strcpy(it->dataset_id, dataset_opt);
    }

    if (job_opt && strlen(job_opt) >= sizeof it->job_name) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID, "job name longer than %zu bytes",
                     sizeof it->job_name - 1);
        goto fail;
    }
    strcpy(it->job_name, job_opt ? job_opt : "");
    it->mode = o->mode;
    it->whole_copies = o->whole_copies;
    it->hedge_factor = o->mode == SLUICE_DISTRIBUTED_EPOCH ? o->hedge_factor : 0;
    if (repeat_column) {
        /* Each repetition is a read of its own; this one only runs the tail over them. */
        rc = iter_repeat_open(it, o, err, errlen);
        if (rc)
            goto fail;
        free(mck);
        checkpoint_release(&ck);
        *out = it;
        return 0;
    }

    /* The definition, to recognize the dataset after a dispatcher restart (see verify_job). */
    Sluice__GetDatasetRequest dreq = SLUICE__GET_DATASET_REQUEST__INIT;
    dreq.dataset_id = it->dataset_id;
    Sluice__Envelope denv = SLUICE__ENVELOPE__INIT;
    denv.body_case = SLUICE__ENVELOPE__BODY_GET_DATASET;
    denv.get_dataset = &dreq;
    rc = client_request_cancellable(c, &denv, SLUICE__ENVELOPE__BODY_GET_DATASET_REPLY,
                                    take_dataset, it, NULL, also, err, errlen);
    if (rc)
        goto fail;
    it->det = it->det || o->deterministic;
    it->def_hash = checkpoint_def_hash(it->def, it->def_len);
    if (o->restore && it->def_hash != ck.def_hash) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                     "the checkpoint does not fit dataset '%s': its pipeline is not the one the "
                     "checkpoint was taken with",
                     it->dataset_id);
        goto fail;
    }
    if (o->mode == SLUICE_DISTRIBUTED_EPOCH) {
        int mixed = open_mix(it, o, mck, repetition, err, errlen);
        if (mixed < 0) {
            rc = mixed;
            goto fail;
        }
        if (mixed) {
            free(mck);
            checkpoint_release(&ck);
            *out = it;
            return 0;
        }
    }
    if (mck) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                     "the checkpoint is of a read of a mix, and dataset '%s' is not one read in "
                     "distributed_epoch",
                     it->dataset_id);
        goto fail;
    }
    if (o->mode == SLUICE_DISTRIBUTED_EPOCH)
        rc = open_dataset_tail(it, o, err, errlen);
    else if (o->local && *o->local)
        rc = iter_open_tail(it, o->local, "local tail", err, errlen);
    if (rc)
        goto fail;
    if (o->shard_count > 0 && (!it->det || it->tail)) {
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED, "a sharded read needs %s",
                     !it->det ? "a deterministic read (deterministic, or a dataset registered "
                                "deterministic): only the canonical order can be sharded"
                              : "the dataset's operations to run on the workers, not partly in the "
                                "reader");
        goto fail;
    }
    it->shard_index = o->shard_index;
    it->shard_count = o->shard_count;
    if (o->restore && it->tail) {
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                     "a checkpoint cannot restore a read with operations run in the reader (a "
                     "local tail, or a dataset whose operations run partly in the reader)");
        goto fail;
    }

    Sluice__GetOrCreateJobRequest req = SLUICE__GET_OR_CREATE_JOB_REQUEST__INIT;
    req.dataset_id = it->dataset_id;
    req.job_name = it->job_name;
    req.mode = (Sluice__ProcessingMode)o->mode;
    req.num_consumers = o->num_consumers;
    req.consumer_index = o->consumer_index;
    req.deterministic = it->det;
    req.repetition = repetition;
    it->rep_want = repetition;
    req.target_workers = (Sluice__TargetWorkers)it->target;
    req.host_id = it->host_id;
    req.worker_selector = (char *)(o->worker_selector ? o->worker_selector : "");
    req.weight = o->weight;
    req.min_workers = o->min_workers;
    req.max_workers = o->max_workers;
    if (o->cross_trainer_cache) {
        req.cross_trainer_cache = true;
        req.cross_trainer_cache_bytes = o->cross_trainer_cache_bytes
                                            ? o->cross_trainer_cache_bytes
                                            : SLUICE_CROSS_TRAINER_CACHE_BYTES;
        strcpy(it->trainer_id, o->trainer_id);
    }
    uint64_t *bounds = NULL;
    if (o->restore) {
        const struct ranges *done = &ck.pos.done;
        bounds = malloc((done->n ? done->n : 1) * 2 * sizeof *bounds);
        if (!bounds) {
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
            goto fail;
        }
        for (size_t i = 0; i < done->n; i++) {
            bounds[2 * i] = done->v[i].begin;
            bounds[2 * i + 1] = done->v[i].end;
        }
        req.resume = true;
        req.n_resume_done = done->n * 2;
        req.resume_done = bounds;
        req.resume_plan = ck.plan_hash;
        /* Readers restoring the same checkpoint share an iteration (plan_job_resume_fresh). */
        req.resume_id = resume_id ? resume_id : checkpoint_def_hash(o->restore, o->restore_len) | 1;
        if ((rc = restore_seed(it, &ck)) < 0) {
            free(bounds);
            err_set(err, errlen, rc, "%s", sluice_strerror(rc));
            goto fail;
        }
    }
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB;
    env.get_or_create_job = &req;
    rc = client_request_cancellable(c, &env, SLUICE__ENVELOPE__BODY_GET_OR_CREATE_JOB_REPLY,
                                    take_job, it, &it->job_incarnation, also, err, errlen);
    free(bounds);
    if (rc)
        goto fail;

    it->created_incarnation = it->job_incarnation;
    struct client_op start = {.run = iter_run_start, .user = it};
    client_submit(c, &start);
    checkpoint_release(&ck);
    *out = it;
    return 0;

fail:
    free(mck);
    checkpoint_release(&ck);
    iter_reader_stop(it);
    iter_reader_release(it);
    iter_free(it);
    return rc;
}

/* The next element into it->elem: 1, 0 at the end, or a negative code with err. */
