#include "history.h"

#include "common/error.h"
#include "common/rows.h"

#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

bool history_due(const struct history *h, uint64_t now_ms)
{
    if (h->n == 0)
        return true;
    uint64_t last = h->v[h->head].t_ms;
    return now_ms < last || now_ms - last >= HISTORY_INTERVAL_MS;
}

size_t history_count(const struct history *h)
{
    return h->n;
}

const struct history_sample *history_at(const struct history *h, size_t i)
{
    /* The oldest is n - 1 places behind the newest. */
    size_t idx = (h->head + HISTORY_SAMPLES - (h->n - 1) + i) % HISTORY_SAMPLES;
    return &h->v[idx];
}

static const struct history_count *count_find(const struct history_count *v, size_t n, uint64_t id)
{
    return rows_find(v, n, sizeof *v, offsetof(struct history_count, id), id);
}

static const struct history_mark *mark_find(const struct history_mark *v, size_t n, uint64_t id)
{
    return rows_find(v, n, sizeof *v, offsetof(struct history_mark, id), id);
}

/* The rates of what a point served since base, over secs. */
static void point_rates(struct history_point *p, uint64_t bytes, const struct history_mark *base,
                        double secs)
{
    uint64_t e0 = base ? base->elements : 0, b0 = base ? base->bytes : 0;
    if (p->elements < e0 || bytes < b0)
        return; /* counts that went back: no rate this once */
    p->elements_per_second = (double)(p->elements - e0) / secs;
    p->bytes_per_second = (double)(bytes - b0) / secs;
}

/* The base a kept job or worker's rates start from: its mark (for a job, of the same
 * iteration), zeros when it is new since the previous sample (no mark, an id above the highest
 * then, or a job's new iteration), or none (*known false). */
static const struct history_mark *rate_base(const struct history_mark *marks, size_t nmarks,
                                            uint64_t highest, uint64_t id, uint64_t iteration_id,
                                            bool *known)
{
    static const struct history_mark zero;
    const struct history_mark *m = mark_find(marks, nmarks, id);
    *known = m != NULL || id > highest;
    if (!m)
        return &zero;
    return m->iteration_id == iteration_id ? m : &zero;
}

void history_take(struct history *h, const struct state *s, const struct history_served *in,
                  uint64_t now_ms)
{
    if (h->n > 0 && now_ms < h->v[h->head].t_ms)
        h->n = 0;
    /* The rates are over the time since the previous sample, when it has counts to start from. */
    bool rates = in && h->n > 0 && h->marked && now_ms > h->v[h->head].t_ms;
    double secs = rates ? (double)(now_ms - h->v[h->head].t_ms) / 1000.0 : 0;
    h->head = h->n == 0 ? 0 : (h->head + 1) % HISTORY_SAMPLES;
    if (h->n < HISTORY_SAMPLES)
        h->n++;
    struct history_sample *out = &h->v[h->head];
    memset(out, 0, sizeof *out);
    out->t_ms = now_ms;
    out->workers = (uint32_t)s->nworkers;
    if (rates && in->elements >= h->mark_elements && in->bytes >= h->mark_bytes) {
        out->elements_per_second = (double)(in->elements - h->mark_elements) / secs;
        out->bytes_per_second = (double)(in->bytes - h->mark_bytes) / secs;
    }
    struct history_mark jobs[HISTORY_SERIES_MAX], workers[HISTORY_SERIES_MAX];
    /* Jobs and workers are kept sorted by id: the last ones are the newest. */
    size_t first = s->njobs > HISTORY_SERIES_MAX ? s->njobs - HISTORY_SERIES_MAX : 0;
    for (size_t i = first; i < s->njobs; i++) {
        const struct st_job *j = &s->jobs[i];
        const struct history_count *c =
            in && j->iteration_id ? count_find(in->iterations, in->niterations, j->iteration_id)
                                  : NULL;
        const struct st_iteration *it = state_iteration(s, j->iteration_id);
        struct history_point *p = &out->jobs[out->njobs];
        *p = (struct history_point){
            j->id, 0, 0, c ? c->elements : 0,
            it && it->distributed && it->state != ST_ITER_GC ? it->splits_finished : 0};
        uint64_t bytes = c ? c->bytes : 0;
        bool known;
        const struct history_mark *base =
            rate_base(h->mark_jobs, h->nmark_jobs, h->mark_job, j->id, j->iteration_id, &known);
        if (rates && known)
            point_rates(p, bytes, base, secs);
        jobs[out->njobs++] = (struct history_mark){j->id, j->iteration_id, p->elements, bytes};
    }
    first = s->nworkers > HISTORY_SERIES_MAX ? s->nworkers - HISTORY_SERIES_MAX : 0;
    for (size_t i = first; i < s->nworkers; i++) {
        const struct st_worker *w = &s->workers[i];
        const struct history_count *c = in ? count_find(in->workers, in->nworkers, w->id) : NULL;
        struct history_point *p = &out->workers_v[out->nworkers];
        *p = (struct history_point){w->id, 0, 0, c ? c->elements : 0, 0};
        uint64_t bytes = c ? c->bytes : 0;
        bool known;
        const struct history_mark *base =
            rate_base(h->mark_workers, h->nmark_workers, h->mark_worker, w->id, 0, &known);
        if (rates && known)
            point_rates(p, bytes, base, secs);
        workers[out->nworkers++] = (struct history_mark){w->id, 0, p->elements, bytes};
    }
    h->marked = in != NULL;
    if (!in)
        return;
    h->mark_elements = in->elements;
    h->mark_bytes = in->bytes;
    h->mark_job = s->njobs ? s->jobs[s->njobs - 1].id : 0;
    h->mark_worker = s->nworkers ? s->workers[s->nworkers - 1].id : 0;
    memcpy(h->mark_jobs, jobs, out->njobs * sizeof *jobs);
    h->nmark_jobs = out->njobs;
    memcpy(h->mark_workers, workers, out->nworkers * sizeof *workers);
    h->nmark_workers = out->nworkers;
}

/* jansson reports failed allocations as NULL values and -1 returns; both end in one flag. */
static void put(bool *failed, json_t *obj, const char *key, json_t *value)
{
    if (json_object_set_new(obj, key, value) != 0)
        *failed = true;
}

static void append(bool *failed, json_t *arr, json_t *value)
{
    if (json_array_append_new(arr, value) != 0)
        *failed = true;
}

static json_t *points_json(bool *failed, const struct history_point *v, size_t n, bool job)
{
    json_t *arr = json_array();
    if (!arr) {
        *failed = true;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_object();
        if (!o) {
            *failed = true;
            break;
        }
        put(failed, o, "id", json_integer((json_int_t)v[i].id));
        put(failed, o, "elements_per_second", json_real(v[i].elements_per_second));
        put(failed, o, "bytes_per_second", json_real(v[i].bytes_per_second));
        if (job) {
            put(failed, o, "elements", json_integer((json_int_t)v[i].elements));
            put(failed, o, "splits_finished", json_integer((json_int_t)v[i].splits_finished));
        }
        append(failed, arr, o);
    }
    return arr;
}

int history_json(const struct history *h, uint64_t now_ms, char **out)
{
    bool failed = false;
    json_t *root = json_object(), *samples = json_array();
    if (!root || !samples) {
        json_decref(root);
        json_decref(samples);
        return SLUICE_ERR_NOMEM;
    }
    put(&failed, root, "interval_ms", json_integer(HISTORY_INTERVAL_MS));
    put(&failed, root, "span_ms", json_integer(HISTORY_SPAN_MS));
    put(&failed, root, "now_ms", json_integer((json_int_t)now_ms));
    for (size_t i = 0; i < h->n; i++) {
        const struct history_sample *s = history_at(h, i);
        json_t *o = json_object();
        if (!o) {
            failed = true;
            break;
        }
        put(&failed, o, "age_ms",
            json_integer((json_int_t)(now_ms > s->t_ms ? now_ms - s->t_ms : 0)));
        put(&failed, o, "elements_per_second", json_real(s->elements_per_second));
        put(&failed, o, "bytes_per_second", json_real(s->bytes_per_second));
        put(&failed, o, "workers", json_integer(s->workers));
        put(&failed, o, "jobs", points_json(&failed, s->jobs, s->njobs, true));
        put(&failed, o, "worker_rates", points_json(&failed, s->workers_v, s->nworkers, false));
        append(&failed, samples, o);
    }
    put(&failed, root, "samples", samples);
    char *text = failed ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        return SLUICE_ERR_NOMEM;
    *out = text;
    return 0;
}
