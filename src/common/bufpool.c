/* The block pool of bufpool.h: an array of kept blocks in the order they were given back, so
 * eviction drops the oldest. The array is small (BUFPOOL_SLOTS) and searched linearly; a pool
 * serves one process's large frames, a handful at a time. */
#include "bufpool.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define BUFPOOL_SLOTS 32

struct kept {
    void *block;
    size_t cap;
};

struct bufpool {
    uv_mutex_t mu;
    size_t max_bytes, max_block;
    struct kept kept[BUFPOOL_SLOTS]; /* kept[0, n), oldest first */
    size_t n;
    size_t bytes;
};

int bufpool_new(size_t max_bytes, size_t max_block, struct bufpool **out)
{
    struct bufpool *p = calloc(1, sizeof *p);
    if (!p)
        return SLUICE_ERR_NOMEM;
    if (uv_mutex_init(&p->mu) != 0) {
        free(p);
        return SLUICE_ERR_NOMEM;
    }
    p->max_bytes = max_bytes;
    p->max_block = max_block;
    *out = p;
    return 0;
}

void bufpool_free(struct bufpool *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->kept[i].block);
    uv_mutex_destroy(&p->mu);
    free(p);
}

/* Removes kept[i], keeping the order of the rest. Mutex held. */
static struct kept take_at(struct bufpool *p, size_t i)
{
    struct kept k = p->kept[i];
    memmove(&p->kept[i], &p->kept[i + 1], (p->n - i - 1) * sizeof p->kept[0]);
    p->n--;
    p->bytes -= k.cap;
    return k;
}

void *bufpool_get(struct bufpool *p, size_t len, size_t *cap)
{
    if (len == 0)
        len = 1;
    uv_mutex_lock(&p->mu);
    size_t best = p->n;
    for (size_t i = 0; i < p->n; i++) {
        size_t c = p->kept[i].cap;
        /* A block far larger than asked for would sit idle under a small payload. Among equal
         * fits the newest wins: it is the likeliest to be still in the caches. */
        if (c >= len && c / 2 <= len && (best == p->n || c <= p->kept[best].cap))
            best = i;
    }
    if (best < p->n) {
        struct kept k = take_at(p, best);
        uv_mutex_unlock(&p->mu);
        *cap = k.cap;
        return k.block;
    }
    uv_mutex_unlock(&p->mu);
    void *block = malloc(len);
    if (block)
        *cap = len;
    return block;
}

void bufpool_put(struct bufpool *p, void *block, size_t cap)
{
    if (!block)
        return;
    if (cap > p->max_block || cap > p->max_bytes) {
        free(block);
        return;
    }
    /* Blocks evicted to make room are freed after the mutex is released. */
    struct kept evicted[BUFPOOL_SLOTS];
    size_t nevicted = 0;
    uv_mutex_lock(&p->mu);
    while (p->n > 0 && (p->n == BUFPOOL_SLOTS || p->bytes + cap > p->max_bytes))
        evicted[nevicted++] = take_at(p, 0);
    p->kept[p->n].block = block;
    p->kept[p->n].cap = cap;
    p->n++;
    p->bytes += cap;
    uv_mutex_unlock(&p->mu);
    for (size_t i = 0; i < nevicted; i++)
        free(evicted[i].block);
}

size_t bufpool_count(struct bufpool *p)
{
    uv_mutex_lock(&p->mu);
    size_t n = p->n;
    uv_mutex_unlock(&p->mu);
    return n;
}

size_t bufpool_bytes(struct bufpool *p)
{
    uv_mutex_lock(&p->mu);
    size_t n = p->bytes;
    uv_mutex_unlock(&p->mu);
    return n;
}
