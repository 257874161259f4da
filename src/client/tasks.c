#include "tasks.h"

#include "common/backoff.h"
#include "common/error.h"
#include "common/rows.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ct_init(struct ct_set *s, bool coordinated, unsigned per_task_max)
{
    memset(s, 0, sizeof *s);
    s->coordinated = coordinated;
    s->per_task_max = per_task_max ? per_task_max : 1;
}

void ct_release(struct ct_set *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* The index where a task with this id is or would be inserted. */
static size_t lower_bound(const struct ct_set *s, uint64_t id)
{
    return rows_lower(s->v, s->n, sizeof *s->v, offsetof(struct ct_task, id), id);
}

long ct_find(const struct ct_set *s, uint64_t id)
{
    size_t lo = lower_bound(s, id);
    return lo < s->n && s->v[lo].id == id ? (long)lo : -1;
}

int ct_reconcile(struct ct_set *s, const struct ct_info *infos, size_t n, bool iteration_finished,
                 uint64_t now)
{
    /* Validate everything and make room before changing anything, so a refused list leaves the
     * set as it was. Lists hold one task per worker, so the quadratic duplicate check is cheap. */
    for (size_t i = 0; i < n; i++) {
        if (!infos[i].address || strlen(infos[i].address) >= CT_ADDR_MAX)
            return SLUICE_ERR_INVALID;
        for (size_t j = 0; j < i; j++)
            if (infos[j].task_id == infos[i].task_id)
                return SLUICE_ERR_INVALID;
    }
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 4;
        while (cap < s->n + n)
            cap *= 2;
        struct ct_task *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        s->v = v;
        s->cap = cap;
    }

    for (size_t i = 0; i < s->n; i++)
        s->v[i].listed = false;
    for (size_t i = 0; i < n; i++) {
        size_t at = lower_bound(s, infos[i].task_id);
        if (at < s->n && s->v[at].id == infos[i].task_id) {
            s->v[at].listed = true;
            continue;
        }
        memmove(&s->v[at + 1], &s->v[at], (s->n - at) * sizeof *s->v);
        s->n++;
        struct ct_task *t = &s->v[at];
        memset(t, 0, sizeof *t);
        t->id = infos[i].task_id;
        strcpy(t->address, infos[i].address);
        t->worker_incarnation = infos[i].worker_incarnation;
        t->listed = true;
        t->listed_at = now;
    }
    s->have_list = true;
    s->iteration_finished = iteration_finished;
    return 0;
}

bool ct_reap(struct ct_set *s, struct ct_task *out)
{
    for (size_t i = 0; i < s->n; i++) {
        if (!s->v[i].listed && s->v[i].outstanding == 0) {
            *out = s->v[i];
            memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof *s->v);
            s->n--;
            return true;
        }
    }
    return false;
}

/* Whether task t is one a request may go to, leaving aside its backoff and its count of
 * outstanding requests. */
static bool wanted(const struct ct_task *t)
{
    return t->listed && !t->ended;
}

long ct_pick(const struct ct_set *s, uint64_t now, uint64_t *wake_at)
{
    *wake_at = 0;
    if (s->n == 0)
        return -1;
    size_t start = lower_bound(s, s->turn);
    if (s->coordinated) {
        /* Strict turns: the first wanted task from the turn on (wrapping) is the only one that
         * may be asked, and only when nothing else is outstanding. */
        if (ct_outstanding(s) > 0)
            return -1;
        for (size_t k = 0; k < s->n; k++) {
            size_t i = (start + k) % s->n;
            const struct ct_task *t = &s->v[i];
            if (!wanted(t))
                continue;
            if (!t->conn)
                return -1;
            if (t->not_before > now) {
                *wake_at = t->not_before;
                return -1;
            }
            return (long)i;
        }
        return -1;
    }
    for (size_t k = 0; k < s->n; k++) {
        size_t i = (start + k) % s->n;
        const struct ct_task *t = &s->v[i];
        if (!wanted(t) || !t->conn || t->outstanding >= s->per_task_max)
            continue;
        if (t->not_before > now) {
            if (*wake_at == 0 || t->not_before < *wake_at)
                *wake_at = t->not_before;
            continue;
        }
        *wake_at = 0;
        return (long)i;
    }
    return -1;
}

void ct_sent(struct ct_set *s, size_t i)
{
    assert(i < s->n);
    s->v[i].outstanding++;
    if (!s->coordinated)
        s->turn = s->v[i].id + 1;
}

void ct_on_reply(struct ct_set *s, size_t i, uint32_t count, bool eos, uint64_t now)
{
    assert(i < s->n && s->v[i].outstanding > 0);
    struct ct_task *t = &s->v[i];
    t->outstanding--;
    t->fail_streak = 0;
    t->elements += count;
    if (count > 0 || eos)
        t->error = 0;
    if (eos)
        t->ended = true;
    if (count > 0) {
        t->empty_streak = 0;
        t->not_before = 0;
        if (s->coordinated) {
            t->round++;
            s->turn = t->id + 1;
        }
    } else if (!eos) {
        t->not_before = now + backoff_ceiling(t->empty_streak, CT_EMPTY_BASE_MS, CT_EMPTY_MAX_MS);
        if (t->empty_streak < 32)
            t->empty_streak++;
    }
}

void ct_on_failure(struct ct_set *s, size_t i, uint64_t now)
{
    assert(i < s->n && s->v[i].outstanding > 0);
    struct ct_task *t = &s->v[i];
    t->outstanding--;
    t->not_before = now + backoff_ceiling(t->fail_streak, CT_FAIL_BASE_MS, CT_FAIL_MAX_MS);
    if (t->fail_streak < 32)
        t->fail_streak++;
}

void ct_set_error(struct ct_set *s, size_t i, int code, const char *msg, uint64_t mark)
{
    assert(i < s->n && code < 0);
    struct ct_task *t = &s->v[i];
    if (t->error)
        return;
    t->error = code;
    t->error_mark = mark;
    snprintf(t->error_msg, sizeof t->error_msg, "%s", msg ? msg : "");
}

long ct_confirmed_error(const struct ct_set *s, uint64_t seq)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].listed && s->v[i].error && seq > s->v[i].error_mark)
            return (long)i;
    return -1;
}

bool ct_done(const struct ct_set *s)
{
    if (!s->iteration_finished)
        return false;
    for (size_t i = 0; i < s->n; i++) {
        const struct ct_task *t = &s->v[i];
        if (t->listed && (!t->ended || t->outstanding > 0))
            return false;
    }
    return true;
}

bool ct_active(const struct ct_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (wanted(&s->v[i]))
            return true;
    return false;
}

size_t ct_finished_ids(const struct ct_set *s, uint64_t *out, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->v[i].ended)
            continue;
        if (k < max)
            out[k] = s->v[i].id;
        k++;
    }
    return k;
}

unsigned ct_outstanding(const struct ct_set *s)
{
    unsigned total = 0;
    for (size_t i = 0; i < s->n; i++)
        total += s->v[i].outstanding;
    return total;
}
