#include "history.h"

#include "common/error.h"

#include <jansson.h>
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

void history_take(struct history *h, const struct state *s, const struct status_extra *x,
                  uint64_t now_ms)
{
    if (h->n > 0 && now_ms < h->v[h->head].t_ms)
        h->n = 0;
    h->head = h->n == 0 ? 0 : (h->head + 1) % HISTORY_SAMPLES;
    if (h->n < HISTORY_SAMPLES)
        h->n++;
    struct history_sample *out = &h->v[h->head];
    memset(out, 0, sizeof *out);
    out->t_ms = now_ms;
    out->workers = (uint32_t)s->nworkers;
    /* Jobs and workers are kept sorted by id: the last ones are the newest. */
    for (size_t i = 0; i < s->njobs; i++) {
        const struct st_job *j = &s->jobs[i];
        struct status_figures f;
        status_job_figures(s, x, j, &f);
        out->elements_per_second += f.elements_per_second;
        out->bytes_per_second += f.bytes_per_second;
        if (s->njobs - i > HISTORY_SERIES_MAX)
            continue;
        const struct st_iteration *it = state_iteration(s, j->iteration_id);
        out->jobs[out->njobs++] = (struct history_point){
            j->id, f.elements_per_second, f.bytes_per_second, f.elements,
            it && it->distributed && it->state != ST_ITER_GC ? it->splits_finished : 0};
    }
    size_t first = s->nworkers > HISTORY_SERIES_MAX ? s->nworkers - HISTORY_SERIES_MAX : 0;
    for (size_t i = first; i < s->nworkers; i++) {
        const struct st_worker *w = &s->workers[i];
        struct status_figures f;
        status_worker_figures(s, x, w, &f);
        out->workers_v[out->nworkers++] =
            (struct history_point){w->id, f.elements_per_second, f.bytes_per_second, f.elements, 0};
    }
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
