#include "tasks.h"

#include "common/backoff.h"
#include "common/error.h"
#include "common/rows.h"

#include <assert.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tasks_init(struct tasks_set *s, bool coordinated, unsigned per_task_max)
{
    memset(s, 0, sizeof *s);
    s->coordinated = coordinated;
    s->per_task_max = per_task_max ? per_task_max : 1;
    s->where = TASKS_ROUND_SCHEDULE;
}

static void epochs_free(struct tasks_epoch *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].tasks);
    free(e);
}

void tasks_release(struct tasks_set *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
    epochs_free(s->epochs, s->nepochs);
    s->epochs = NULL;
    s->nepochs = 0;
}

/* The index where a task with this id is or would be inserted. */
static size_t lower_bound(const struct tasks_set *s, uint64_t id)
{
    return rows_lower(s->v, s->n, sizeof *s->v, offsetof(struct tasks_task, id), id);
}

long tasks_find(const struct tasks_set *s, uint64_t id)
{
    size_t lo = lower_bound(s, id);
    return lo < s->n && s->v[lo].id == id ? (long)lo : -1;
}

int tasks_reconcile(struct tasks_set *s, const struct tasks_info *infos, size_t n,
                    bool iteration_finished, uint64_t now)
{
    /* Validate everything and make room before changing anything, so a refused list leaves the
     * set as it was. Lists hold one task per worker, so the quadratic duplicate check is cheap. */
    for (size_t i = 0; i < n; i++) {
        if (!infos[i].address || strlen(infos[i].address) >= TASKS_ADDR_MAX ||
            infos[i].key_len > TASKS_KEY_MAX || (infos[i].key_len && !infos[i].key))
            return SLUICE_ERR_INVALID;
        for (size_t j = 0; j < i; j++)
            if (infos[j].task_id == infos[i].task_id)
                return SLUICE_ERR_INVALID;
    }
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 4;
        while (cap < s->n + n)
            cap *= 2;
        struct tasks_task *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return SLUICE_ERR_NOMEM;
        s->v = v;
        s->cap = cap;
    }

    for (size_t i = 0; i < s->n; i++)
        s->v[i].listed = false;
    for (size_t i = 0; i < n; i++) {
        if (s->local_only && !infos[i].local)
            continue;
        size_t at = lower_bound(s, infos[i].task_id);
        if (at < s->n && s->v[at].id == infos[i].task_id) {
            s->v[at].listed = true;
            if (infos[i].key_len)
                memcpy(s->v[at].key, infos[i].key, infos[i].key_len);
            s->v[at].key_len = infos[i].key_len;
            continue;
        }
        memmove(&s->v[at + 1], &s->v[at], (s->n - at) * sizeof *s->v);
        s->n++;
        struct tasks_task *t = &s->v[at];
        memset(t, 0, sizeof *t);
        t->id = infos[i].task_id;
        strcpy(t->address, infos[i].address);
        t->worker_incarnation = infos[i].worker_incarnation;
        if (infos[i].key_len)
            memcpy(t->key, infos[i].key, infos[i].key_len);
        t->key_len = infos[i].key_len;
        t->local = infos[i].local;
        t->listed = true;
        t->listed_at = now;
    }
    s->have_list = true;
    s->iteration_finished = iteration_finished;
    return 0;
}

bool tasks_reap(struct tasks_set *s, struct tasks_task *out)
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
static bool wanted(const struct tasks_task *t)
{
    return t->listed && !t->ended;
}

int tasks_schedule(struct tasks_set *s, const struct tasks_epoch *epochs, size_t n,
                   uint64_t granted)
{
    for (size_t i = 1; i < n; i++)
        if (epochs[i].start <= epochs[i - 1].start)
            return SLUICE_ERR_INVALID;
    struct tasks_epoch *copy = calloc(n ? n : 1, sizeof *copy);
    if (!copy)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        copy[i].start = epochs[i].start;
        copy[i].ntasks = epochs[i].ntasks;
        if (epochs[i].ntasks == 0)
            continue;
        copy[i].tasks = malloc(epochs[i].ntasks * sizeof *copy[i].tasks);
        if (!copy[i].tasks) {
            epochs_free(copy, i);
            return SLUICE_ERR_NOMEM;
        }
        memcpy(copy[i].tasks, epochs[i].tasks, epochs[i].ntasks * sizeof *copy[i].tasks);
    }
    epochs_free(s->epochs, s->nepochs);
    s->epochs = copy;
    s->nepochs = n;
    s->have_schedule = true;
    if (granted > s->granted)
        s->granted = granted;
    /* News is asked for again once half of what is left now is used up (iterator.c). */
    s->span = s->granted > s->round ? s->granted - s->round : 0;
    return 0;
}

/* Whether no round of task id can ever reach this consumer: the dispatcher no longer lists it
 * (or never did) and nothing is outstanding to it, or it ended. */
static bool gone(const struct tasks_set *s, uint64_t id)
{
    long i = tasks_find(s, id);
    if (i < 0)
        return true;
    const struct tasks_task *t = &s->v[i];
    return t->ended || (!t->listed && t->outstanding == 0);
}

enum tasks_round tasks_advance(struct tasks_set *s)
{
    for (;;) {
        if (!s->have_schedule || s->nepochs == 0)
            return s->where = TASKS_ROUND_SCHEDULE;
        if (s->round < s->epochs[0].start)
            return s->where = TASKS_ROUND_BEHIND;
        if (s->round >= s->granted)
            return s->where = TASKS_ROUND_GRANT;
        size_t k = s->nepochs - 1;
        while (s->epochs[k].start > s->round)
            k--;
        const struct tasks_epoch *e = &s->epochs[k];
        bool any = false;
        for (size_t j = 0; j < e->ntasks && !any; j++)
            any = !gone(s, e->tasks[j]);
        if (!any) {
            /* Nothing in this epoch will be served: on to the next one, if decided. */
            if (k + 1 == s->nepochs)
                return s->where = TASKS_ROUND_SCHEDULE;
            s->skipped += s->epochs[k + 1].start - s->round;
            s->round = s->epochs[k + 1].start;
            continue;
        }
        uint64_t id = e->tasks[(s->round - e->start) % e->ntasks];
        if (gone(s, id)) {
            s->round++;
            s->skipped++;
            continue;
        }
        s->round_task = id;
        return s->where = TASKS_ROUND_TASK;
    }
}

long tasks_pick(const struct tasks_set *s, uint64_t now, uint64_t *wake_at)
{
    *wake_at = 0;
    if (s->n == 0)
        return -1;
    size_t start = lower_bound(s, s->turn);
    if (s->coordinated) {
        /* The round's task is the only one that may be asked, and only when nothing else is
         * outstanding. */
        if (tasks_outstanding(s) > 0 || s->where != TASKS_ROUND_TASK)
            return -1;
        long i = tasks_find(s, s->round_task);
        if (i < 0 || !wanted(&s->v[i]) || !s->v[i].conn)
            return -1;
        if (s->v[i].not_before > now) {
            *wake_at = s->v[i].not_before;
            return -1;
        }
        return i;
    }
    /* With prefer_local, a first pass over the local tasks, then one over all. */
    for (int pass = s->prefer_local ? 0 : 1; pass < 2; pass++) {
        for (size_t k = 0; k < s->n; k++) {
            size_t i = (start + k) % s->n;
            const struct tasks_task *t = &s->v[i];
            unsigned max = s->prefer_local && t->local ? 2 * s->per_task_max : s->per_task_max;
            if ((pass == 0 && !t->local) || !wanted(t) || !t->conn || t->outstanding >= max)
                continue;
            if (t->not_before > now) {
                if (*wake_at == 0 || t->not_before < *wake_at)
                    *wake_at = t->not_before;
                continue;
            }
            *wake_at = 0;
            return (long)i;
        }
    }
    return -1;
}

void tasks_set_target(struct tasks_set *s, bool local_only, bool prefer_local)
{
    s->local_only = local_only;
    s->prefer_local = prefer_local;
}

void tasks_sent(struct tasks_set *s, size_t i)
{
    assert(i < s->n);
    s->v[i].outstanding++;
    if (!s->coordinated)
        s->turn = s->v[i].id + 1;
}

void tasks_on_reply(struct tasks_set *s, size_t i, uint32_t count, bool eos, uint64_t now)
{
    assert(i < s->n && s->v[i].outstanding > 0);
    struct tasks_task *t = &s->v[i];
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
        if (s->coordinated)
            s->round++;
    } else if (!eos) {
        t->not_before =
            now + backoff_ceiling(t->empty_streak, TASKS_EMPTY_BASE_MS, TASKS_EMPTY_MAX_MS);
        if (t->empty_streak < 32)
            t->empty_streak++;
    }
}

void tasks_defer(struct tasks_set *s, size_t i, uint64_t until)
{
    assert(i < s->n);
    if (s->v[i].not_before < until)
        s->v[i].not_before = until;
}

void tasks_on_failure(struct tasks_set *s, size_t i, uint64_t now)
{
    assert(i < s->n && s->v[i].outstanding > 0);
    struct tasks_task *t = &s->v[i];
    t->outstanding--;
    t->not_before = now + backoff_ceiling(t->fail_streak, TASKS_FAIL_BASE_MS, TASKS_FAIL_MAX_MS);
    if (t->fail_streak < 32)
        t->fail_streak++;
}

void tasks_set_error(struct tasks_set *s, size_t i, int code, const char *msg, uint64_t mark)
{
    assert(i < s->n && code < 0);
    struct tasks_task *t = &s->v[i];
    if (t->error)
        return;
    t->error = code;
    t->error_mark = mark;
    snprintf(t->error_msg, sizeof t->error_msg, "%s", msg ? msg : "");
}

long tasks_confirmed_error(const struct tasks_set *s, uint64_t seq)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].listed && s->v[i].error && seq > s->v[i].error_mark)
            return (long)i;
    return -1;
}

bool tasks_done(const struct tasks_set *s)
{
    if (!s->iteration_finished)
        return false;
    for (size_t i = 0; i < s->n; i++) {
        const struct tasks_task *t = &s->v[i];
        if (t->listed && !t->ended)
            return false;
        /* Also a task no longer listed: its reply may still bring elements (the dispatcher
         * counts what a worker sent as delivered). */
        if (t->outstanding > 0)
            return false;
    }
    return true;
}

bool tasks_unlisted(const struct tasks_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (!s->v[i].listed)
            return true;
    return false;
}

bool tasks_active(const struct tasks_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (wanted(&s->v[i]))
            return true;
    return false;
}

bool tasks_all_ended(const struct tasks_set *s)
{
    size_t listed = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->v[i].listed)
            continue;
        if (!s->v[i].ended)
            return false;
        listed++;
    }
    return listed > 0;
}

size_t tasks_finished_ids(const struct tasks_set *s, uint64_t *out, size_t max)
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

unsigned tasks_outstanding(const struct tasks_set *s)
{
    unsigned total = 0;
    for (size_t i = 0; i < s->n; i++)
        total += s->v[i].outstanding;
    return total;
}

int tasks_check_end(const struct tasks_task *t, uint64_t delivered, char *msg, size_t len)
{
    if (t->elements == delivered)
        return 0;
    snprintf(msg, len,
             "task %" PRIu64 " on worker %s: received %" PRIu64 " of %" PRIu64 " elements", t->id,
             t->address, t->elements, delivered);
    return SLUICE_ERR_TRUNCATED;
}

int tasks_judge_gone(const struct tasks_task *t, bool whole_copies, char *msg, size_t len)
{
    int rc = tasks_check_gone(t, msg, len);
    if (rc == 0 || whole_copies)
        return rc;
    return TASKS_CUT;
}

int tasks_check_gone(const struct tasks_task *t, char *msg, size_t len)
{
    if (t->ended || t->elements == 0)
        return 0;
    snprintf(msg, len,
             "task %" PRIu64 " on worker %s: the worker was lost after %" PRIu64
             " elements: its copy is incomplete",
             t->id, t->address, t->elements);
    return SLUICE_ERR_TRUNCATED;
}
