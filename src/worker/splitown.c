#include "splitown.h"

#include "common/error.h"
#include "common/rows.h"

#include <string.h>
#include <stdlib.h>

void splittab_init(struct split_tables *t)
{
    memset(t, 0, sizeof *t);
}

void splittab_release(struct split_tables *t)
{
    for (size_t i = 0; i < t->nres; i++)
        ranges_release(&t->res[i].skip);
    free(t->res);
    free(t->own);
    memset(t, 0, sizeof *t);
}

int splittab_resume_put(struct split_tables *t, uint64_t seq, const uint64_t *covered,
                        size_t ncovered, uint64_t owner)
{
    if (ncovered % 2)
        return SLUICE_ERR_INVALID;
    struct ranges skip = {0};
    for (size_t i = 0; i < ncovered; i += 2) {
        int rc = covered[i] < covered[i + 1] ? ranges_add(&skip, covered[i], covered[i + 1])
                                             : SLUICE_ERR_INVALID;
        if (rc < 0) {
            ranges_release(&skip);
            return rc;
        }
    }
    size_t stride = sizeof *t->res, key = offsetof(struct split_resume, seq);
    size_t i = rows_lower(t->res, t->nres, stride, key, seq);
    struct split_resume *e;
    if (i < t->nres && t->res[i].seq == seq) {
        e = &t->res[i];
        ranges_release(&e->skip);
    } else {
        if (t->nres >= SPLIT_TABLE_MAX) {
            /* The lowest split's entry goes: it was leased longest ago. */
            ranges_release(&t->res[0].skip);
            memmove(t->res, t->res + 1, (t->nres - 1) * stride);
            t->nres--;
            if (i > 0)
                i--;
        }
        e = rows_insert_at((void **)&t->res, &t->nres, &t->capres, stride, i);
        if (!e) {
            ranges_release(&skip);
            return SLUICE_ERR_NOMEM;
        }
        e->seq = seq;
    }
    e->skip = skip;
    e->owner = owner;
    return 0;
}

bool splittab_resume_take(struct split_tables *t, uint64_t seq, struct split_resume *out)
{
    memset(out, 0, sizeof *out);
    out->seq = seq;
    size_t stride = sizeof *t->res;
    size_t i = rows_lower(t->res, t->nres, stride, offsetof(struct split_resume, seq), seq);
    if (i >= t->nres || t->res[i].seq != seq)
        return false;
    *out = t->res[i];
    memmove(&t->res[i], &t->res[i + 1], (t->nres - i - 1) * stride);
    t->nres--;
    return true;
}

int splittab_owner_set(struct split_tables *t, uint64_t seq, uint64_t client, uint64_t now_ms)
{
    if (client == 0)
        return 0;
    size_t stride = sizeof *t->own, key = offsetof(struct split_owner, seq);
    size_t i = rows_lower(t->own, t->nown, stride, key, seq);
    struct split_owner *e;
    if (i < t->nown && t->own[i].seq == seq) {
        e = &t->own[i];
    } else {
        if (t->nown >= SPLIT_TABLE_MAX)
            return 0;
        if (!(e = rows_insert_at((void **)&t->own, &t->nown, &t->capown, stride, i)))
            return SLUICE_ERR_NOMEM;
        e->seq = seq;
    }
    e->client = client;
    e->last_ms = now_ms;
    e->conn = 0;
    e->left = false;
    return 0;
}

bool splittab_may_take(struct split_tables *t, uint64_t seq, uint64_t client, uint64_t conn,
                       uint64_t now_ms)
{
    struct split_owner *e =
        rows_find(t->own, t->nown, sizeof *t->own, offsetof(struct split_owner, seq), seq);
    if (e && e->client != client && !e->left && now_ms < e->last_ms + SPLIT_OWNER_IDLE_MS)
        return false;
    /* Out of memory or past the bound the split is served without an owner. */
    if (splittab_owner_set(t, seq, client, now_ms) == 0 && client != 0 &&
        (e = rows_find(t->own, t->nown, sizeof *t->own, offsetof(struct split_owner, seq), seq)))
        e->conn = conn;
    return true;
}

size_t splittab_conn_closed(struct split_tables *t, uint64_t conn)
{
    size_t n = 0;
    for (size_t i = 0; conn != 0 && i < t->nown; i++)
        if (t->own[i].conn == conn && !t->own[i].left) {
            t->own[i].left = true;
            n++;
        }
    return n;
}

uint64_t splittab_owner(const struct split_tables *t, uint64_t seq)
{
    const struct split_owner *e =
        rows_find(t->own, t->nown, sizeof *t->own, offsetof(struct split_owner, seq), seq);
    return e ? e->client : 0;
}

void splittab_owner_drop(struct split_tables *t, uint64_t seq)
{
    size_t stride = sizeof *t->own;
    size_t i = rows_lower(t->own, t->nown, stride, offsetof(struct split_owner, seq), seq);
    if (i < t->nown && t->own[i].seq == seq) {
        memmove(&t->own[i], &t->own[i + 1], (t->nown - i - 1) * stride);
        t->nown--;
    }
}
