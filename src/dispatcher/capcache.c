/* The per-client cache of task capabilities (capcache.h). */

#include "capcache.h"

#include "common/rows.h"

#include <stdlib.h>
#include <string.h>

void capcache_init(struct capcache *c)
{
    memset(c, 0, sizeof *c);
}

static void entry_free(struct capcache_entry *e)
{
    free(e->task_ids);
    free(e->keys);
    e->task_ids = NULL;
    e->keys = NULL;
    e->n = 0;
}

static void tasks_free(struct capcache_tasks *t)
{
    if (t->v)
        memset(t->v, 0, t->cap * sizeof *t->v);
    free(t->v);
}

void capcache_release(struct capcache *c)
{
    for (size_t i = 0; i < c->n; i++)
        entry_free(&c->v[i]);
    free(c->v);
    for (size_t i = 0; i < c->nits; i++)
        tasks_free(&c->its[i]);
    free(c->its);
    capcache_init(c);
}

/* The task secrets kept for iteration_id, made when missing; NULL when out of memory. */
static struct capcache_tasks *iteration_tasks(struct capcache *c, uint64_t iteration_id)
{
    size_t off = offsetof(struct capcache_tasks, iteration_id);
    size_t i = rows_lower(c->its, c->nits, sizeof *c->its, off, iteration_id);
    if (i < c->nits && c->its[i].iteration_id == iteration_id)
        return &c->its[i];
    struct capcache_tasks *t =
        rows_insert_at((void **)&c->its, &c->nits, &c->capits, sizeof *c->its, i);
    if (t)
        t->iteration_id = iteration_id;
    return t;
}

/* Task task_id's secret into out: kept in t (NULL: not kept) or derived, and then kept when
 * memory allows. */
static void task_key(struct capcache *c, struct capcache_tasks *t,
                     const uint8_t iteration_key[CAP_KEY_LEN], uint64_t task_id,
                     uint8_t out[CAP_KEY_LEN])
{
    size_t off = offsetof(struct capcache_task_key, task_id);
    size_t i = t ? rows_lower(t->v, t->n, sizeof *t->v, off, task_id) : 0;
    if (t && i < t->n && t->v[i].task_id == task_id) {
        memcpy(out, t->v[i].key, CAP_KEY_LEN);
        return;
    }
    cap_task_key(iteration_key, task_id, out);
    c->task_derived++;
    struct capcache_task_key *k =
        t ? rows_insert_at((void **)&t->v, &t->n, &t->cap, sizeof *t->v, i) : NULL;
    if (k) {
        k->task_id = task_id;
        memcpy(k->key, out, CAP_KEY_LEN);
    }
}

/* The position of client_id's entry, or where it would go. */
static size_t lower(const struct capcache *c, uint64_t client_id)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->v[mid].client_id < client_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void drop(struct capcache *c, size_t i)
{
    entry_free(&c->v[i]);
    memmove(&c->v[i], &c->v[i + 1], (c->n - i - 1) * sizeof *c->v);
    c->n--;
}

static void derive(struct capcache *c, struct capcache_tasks *t, uint64_t client_id,
                   const uint8_t iteration_key[CAP_KEY_LEN], uint64_t task_id,
                   uint8_t out[CAP_KEY_LEN])
{
    uint8_t secret[CAP_KEY_LEN];
    task_key(c, t, iteration_key, task_id, secret);
    cap_client_key(secret, client_id, out);
    memset(secret, 0, sizeof secret);
    c->derived++;
}

void capcache_client_keys(struct capcache *c, uint64_t client_id, uint64_t iteration_id,
                          const uint8_t iteration_key[CAP_KEY_LEN], const uint64_t *task_ids,
                          size_t n, uint8_t (*out)[CAP_KEY_LEN])
{
    size_t at = lower(c, client_id);
    struct capcache_entry *e = at < c->n && c->v[at].client_id == client_id ? &c->v[at] : NULL;
    if (e && e->iteration_id != iteration_id)
        entry_free(e); /* the client reads another iteration now: nothing carries over */
    /* Both lists increase: one merge walk finds the tasks listed before. */
    struct capcache_tasks *t = NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        while (e && j < e->n && e->task_ids[j] < task_ids[i])
            j++;
        if (e && j < e->n && e->task_ids[j] == task_ids[i])
            memcpy(out[i], e->keys[j], CAP_KEY_LEN);
        else {
            if (!t)
                t = iteration_tasks(c, iteration_id);
            derive(c, t, client_id, iteration_key, task_ids[i], out[i]);
        }
    }
    /* Remember exactly this list. */
    uint64_t *ids = n ? malloc(n * sizeof *ids) : NULL;
    uint8_t(*keys)[CAP_KEY_LEN] = n ? malloc(n * sizeof *keys) : NULL;
    if (n == 0 || !ids || !keys) {
        free(ids);
        free(keys);
        if (e)
            drop(c, at);
        return;
    }
    memcpy(ids, task_ids, n * sizeof *ids);
    memcpy(keys, out, n * sizeof *keys);
    if (!e) {
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 16;
            struct capcache_entry *v = realloc(c->v, cap * sizeof *v);
            if (!v) {
                free(ids);
                free(keys);
                return;
            }
            c->v = v;
            c->cap = cap;
        }
        memmove(&c->v[at + 1], &c->v[at], (c->n - at) * sizeof *c->v);
        c->n++;
        e = &c->v[at];
        memset(e, 0, sizeof *e);
        e->client_id = client_id;
    }
    entry_free(e);
    e->iteration_id = iteration_id;
    e->task_ids = ids;
    e->keys = keys;
    e->n = n;
}

void capcache_prune_iterations(struct capcache *c, bool (*alive)(void *user, uint64_t iteration_id),
                               void *user)
{
    size_t k = 0;
    for (size_t i = 0; i < c->nits; i++) {
        if (alive(user, c->its[i].iteration_id))
            c->its[k++] = c->its[i];
        else
            tasks_free(&c->its[i]);
    }
    c->nits = k;
}

void capcache_prune(struct capcache *c, bool (*alive)(void *user, uint64_t client_id), void *user)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (alive(user, c->v[i].client_id))
            c->v[k++] = c->v[i];
        else
            entry_free(&c->v[i]);
    }
    c->n = k;
}
