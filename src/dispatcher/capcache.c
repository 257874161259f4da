/* The per-client cache of task capabilities (capcache.h). */

#include "capcache.h"

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

void capcache_release(struct capcache *c)
{
    for (size_t i = 0; i < c->n; i++)
        entry_free(&c->v[i]);
    free(c->v);
    capcache_init(c);
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

static void derive(struct capcache *c, uint64_t client_id, const uint8_t iteration_key[CAP_KEY_LEN],
                   uint64_t task_id, uint8_t out[CAP_KEY_LEN])
{
    uint8_t task_key[CAP_KEY_LEN];
    cap_task_key(iteration_key, task_id, task_key);
    cap_client_key(task_key, client_id, out);
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
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        while (e && j < e->n && e->task_ids[j] < task_ids[i])
            j++;
        if (e && j < e->n && e->task_ids[j] == task_ids[i])
            memcpy(out[i], e->keys[j], CAP_KEY_LEN);
        else
            derive(c, client_id, iteration_key, task_ids[i], out[i]);
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
