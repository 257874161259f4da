/* Recovery and the group-commit thread.
 *
 * Happy path: the loop queues records into `pending`; the prepare/check handles, armed while
 * something is queued and nothing is in flight, hand everything queued to the thread as one
 * batch (`work`); the thread writes it with journal_append() and signals the async handle; the
 * loop frees the batch, advances `durable`, runs the satisfied waiters in order, and re-arms if
 * more was queued meanwhile; journal_thread_poll does the same between two requests, without
 * waiting for the end of the iteration. Failure: the first failed batch fails the whole journal
 * (see the header). Closing: what is queued is written first, then the thread is stopped and joined
 * (it is idle by then, so the join does not wait) and the handles closed. */
#include "journal_thread.h"

#include "update_codec.h"

#include "common/conn.h"
#include "common/error.h"
#include "common/log.h"
#include "journal/layout.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the group-commit thread ----------------------------------------------------------------- */

/* journal_thread_poll hands what is queued to the thread before the end of the loop iteration
 * once this many records wait, or the oldest has waited this long. */
#define JOURNAL_POLL_RECORDS 64
#define JOURNAL_POLL_AGE_NS 500000u

struct item {
    uint8_t *payload;
    size_t len;
    char *dataset_id; /* NULL, or with def: stored in the datasets table */
    uint8_t *def;
    size_t def_len;
};

struct waiter {
    journal_thread_wait_cb cb;
    void *ctx;
    uint64_t need; /* durable must reach this */
};

/* One transaction's worth, owned by the journal thread from submission until it is done. */
struct batch {
    struct item *items;
    struct journal_record *recs;
    size_t n;
    uint64_t first_seq;
    uint8_t *snap;
    size_t snap_len;
    uint64_t snap_seq;
    bool has_snap;
    int rc;
    uint64_t write_ns; /* how long journal_append took, measured on the journal thread */
    char err[SLUICE_ERRMSG_SIZE];
};

struct journal_thread {
    uv_loop_t *loop;
    struct journal *j;
    size_t max_records;
    journal_thread_fail_cb on_fail;
    void (*on_commit)(void *user, double seconds, size_t records, uint64_t bytes);
    void *user;
    int (*sink)(void *sink_user, struct journal_thread *jt, const struct journal_record *recs,
                size_t n);
    void *sink_user;
    uint64_t sink_start_ns; /* uv_hrtime() when the batch in flight went to sink */

    /* Loop thread only. pending[head..n) hold the records with seqs pending_first... */
    struct item *pending;
    size_t head, n, cap;
    uint64_t pending_first, next_seq, durable, inflight_last;
    uint64_t queued_ns; /* uv_hrtime() when pending last went from empty to not */
    uint8_t *snap;
    size_t snap_len;
    uint64_t snap_seq;
    bool has_snap;
    struct waiter *waiters; /* waiters[whead..wn) in order */
    size_t whead, wn, wcap;
    bool inflight, armed, failed, firing, closing, finishing;
    int fail_rc;
    struct journal_thread_stats stats;
    uv_prepare_t prepare;
    uv_check_t check;
    uv_async_t async;
    int open_handles;
    void (*close_cb)(void *user);
    void *close_user;

    /* Shared with the journal thread, under mu. */
    uv_thread_t thread;
    uv_mutex_t mu;
    uv_cond_t cond;
    struct batch work;
    bool submitted, done, stop;
};

static void item_free(struct item *it)
{
    free(it->payload);
    free(it->dataset_id);
    free(it->def);
}

static void batch_free(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        item_free(&b->items[i]);
    free(b->items);
    free(b->recs);
    free(b->snap);
    memset(b, 0, sizeof *b);
}

static void thread_main(void *arg)
{
    struct journal_thread *jt = arg;
    uv_mutex_lock(&jt->mu);
    for (;;) {
        while (!jt->stop && !(jt->submitted && !jt->done))
            uv_cond_wait(&jt->cond, &jt->mu);
        if (jt->stop)
            break;
        struct batch *b = &jt->work;
        uv_mutex_unlock(&jt->mu);
        struct journal_snapshot snap = {b->snap_seq, b->snap, b->snap_len};
        uint64_t start = uv_hrtime();
        b->rc = journal_append(jt->j, b->first_seq, b->recs, b->n, b->has_snap ? &snap : NULL,
                               b->err, sizeof b->err);
        b->write_ns = uv_hrtime() - start;
        uv_mutex_lock(&jt->mu);
        jt->done = true;
        uv_async_send(&jt->async);
    }
    uv_mutex_unlock(&jt->mu);
}

static void fail(struct journal_thread *jt, int rc, const char *msg);
static void maybe_finish(struct journal_thread *jt);
static void on_prepare(uv_prepare_t *h);
static void on_check(uv_check_t *h);

/* Makes the end of this loop iteration hand the queue to the thread, unless a batch is in
 * flight (its completion re-arms). */
static void arm(struct journal_thread *jt)
{
    if (jt->armed || jt->inflight || jt->closing)
        return;
    jt->armed = true;
    uv_prepare_start(&jt->prepare, on_prepare);
    uv_check_start(&jt->check, on_check);
}

/* Hands everything queued (up to max_records) to the thread as one batch. */
static void submit(struct journal_thread *jt)
{
    size_t avail = jt->n - jt->head;
    size_t n = jt->max_records && avail > jt->max_records ? jt->max_records : avail;
    if (n == 0 && !jt->has_snap)
        return;
    struct batch b = {.n = n, .first_seq = jt->pending_first};
    b.items = malloc((n ? n : 1) * sizeof *b.items);
    b.recs = calloc(n ? n : 1, sizeof *b.recs);
    if (!b.items || !b.recs) {
        /* Nothing was taken from the queue; the next arming retries. */
        free(b.items);
        free(b.recs);
        return;
    }
    memcpy(b.items, &jt->pending[jt->head], n * sizeof *b.items);
    for (size_t i = 0; i < n; i++) {
        b.recs[i].data = b.items[i].payload;
        b.recs[i].len = b.items[i].len;
        b.recs[i].dataset_id = b.items[i].dataset_id;
        b.recs[i].dataset = b.items[i].def;
        b.recs[i].dataset_len = b.items[i].def_len;
    }
    uint64_t last = jt->pending_first + n - 1;
    if (jt->has_snap && jt->snap_seq <= last) {
        b.has_snap = true;
        b.snap = jt->snap;
        b.snap_len = jt->snap_len;
        b.snap_seq = jt->snap_seq;
        jt->snap = NULL;
        jt->has_snap = false;
    }
    jt->head += n;
    jt->pending_first += n;
    if (jt->head == jt->n) {
        jt->head = jt->n = 0;
    } else if (jt->head > jt->n / 2) {
        memmove(jt->pending, &jt->pending[jt->head], (jt->n - jt->head) * sizeof *jt->pending);
        jt->n -= jt->head;
        jt->head = 0;
    }
    jt->inflight = true;
    jt->inflight_last = last;
    if (jt->sink) {
        jt->work = b;
        jt->submitted = true;
        jt->done = false;
        jt->sink_start_ns = uv_hrtime();
        int rc = jt->sink(jt->sink_user, jt, jt->work.recs, jt->work.n);
        if (rc < 0) {
            /* Refused at once: fail here rather than through batch_done, whose close handling
             * would re-enter a maybe_finish() that called this. */
            batch_free(&jt->work);
            jt->submitted = false;
            jt->inflight = false;
            char msg[SLUICE_ERRMSG_SIZE];
            snprintf(msg, sizeof msg, "writing a batch: %s", sluice_strerror(rc));
            fail(jt, rc, msg);
            /* The sink may have closed jt meanwhile (a replica that stepped down). */
            if (jt->closing)
                maybe_finish(jt);
        }
        return;
    }
    uv_mutex_lock(&jt->mu);
    jt->work = b;
    jt->submitted = true;
    jt->done = false;
    uv_cond_signal(&jt->cond);
    uv_mutex_unlock(&jt->mu);
}

/* Runs every waiter whose records are durable (all of them once the journal failed), in order.
 * Waiters may queue records and waits of their own; those are appended behind. */
static void fire_waiters(struct journal_thread *jt)
{
    if (jt->firing)
        return;
    jt->firing = true;
    /* The replies these waiters send go out one write per connection (conn.h, corking). */
    conn_cork();
    while (jt->whead < jt->wn) {
        struct waiter w = jt->waiters[jt->whead];
        if (!jt->failed && w.need > jt->durable)
            break;
        jt->whead++;
        w.cb(w.ctx, w.need > jt->durable ? jt->fail_rc : 0);
    }
    conn_uncork();
    if (jt->whead == jt->wn)
        jt->whead = jt->wn = 0;
    jt->firing = false;
}

static void maybe_finish(struct journal_thread *jt);

static void fail(struct journal_thread *jt, int rc, const char *msg)
{
    if (jt->failed)
        return;
    jt->failed = true;
    jt->fail_rc = rc;
    for (size_t i = jt->head; i < jt->n; i++)
        item_free(&jt->pending[i]);
    jt->head = jt->n = 0;
    free(jt->snap);
    jt->snap = NULL;
    jt->has_snap = false;
    fire_waiters(jt);
    if (jt->on_fail)
        jt->on_fail(jt->user, rc, msg);
}

/* A batch came back from the thread or the sink: frees it, advances durable and runs the
 * waiters it satisfied, or fails the journal. */
static void batch_done(struct journal_thread *jt, struct batch b)
{
    jt->inflight = false;
    if (b.rc < 0) {
        char msg[SLUICE_ERRMSG_SIZE];
        int rc = b.rc;
        snprintf(msg, sizeof msg, "%s", b.err);
        batch_free(&b);
        fail(jt, rc, msg);
    } else {
        jt->durable = jt->inflight_last;
        uint64_t bytes = b.has_snap ? b.snap_len : 0;
        for (size_t i = 0; i < b.n; i++)
            bytes += b.recs[i].len + b.recs[i].dataset_len;
        jt->stats.bytes += bytes;
        jt->stats.transactions++;
        jt->stats.records += b.n;
        jt->stats.snapshots += b.has_snap;
        if (b.n > jt->stats.largest)
            jt->stats.largest = b.n;
        /* The batch came back under the mutex, so its measurement is the thread's final one. */
        if (jt->on_commit)
            jt->on_commit(jt->user, (double)b.write_ns / 1e9, b.n, bytes);
        batch_free(&b);
        fire_waiters(jt);
    }
    if (jt->closing)
        maybe_finish(jt);
    else if (!jt->failed && (jt->n > jt->head || jt->has_snap))
        arm(jt);
}

/* Takes the batch the thread finished into *b, if it has; false while it is still writing (or
 * nothing was handed to it). */
static bool take_finished(struct journal_thread *jt, struct batch *b)
{
    uv_mutex_lock(&jt->mu);
    bool ready = jt->submitted && jt->done;
    if (ready) {
        *b = jt->work;
        memset(&jt->work, 0, sizeof jt->work);
        jt->submitted = jt->done = false;
    }
    uv_mutex_unlock(&jt->mu);
    return ready;
}

static void on_async(uv_async_t *a)
{
    struct journal_thread *jt = a->data;
    struct batch b;
    if (take_finished(jt, &b))
        batch_done(jt, b);
}

void journal_thread_poll(struct journal_thread *jt)
{
    if (jt->sink || jt->firing || jt->closing || jt->failed)
        return;
    if (jt->inflight) {
        /* The thread's async send stays pending; on_async then finds nothing (or the next
         * batch, done by then) to take. */
        struct batch b;
        if (!take_finished(jt, &b))
            return;
        batch_done(jt, b);
        if (jt->inflight || jt->closing || jt->failed)
            return;
    }
    size_t queued = jt->n - jt->head;
    if (queued >= JOURNAL_POLL_RECORDS ||
        (queued > 0 && uv_hrtime() - jt->queued_ns >= JOURNAL_POLL_AGE_NS))
        submit(jt);
}

void journal_thread_sink_done(struct journal_thread *jt, int rc, const char *msg)
{
    if (!jt->sink || !jt->submitted)
        return;
    struct batch b = jt->work;
    memset(&jt->work, 0, sizeof jt->work);
    jt->submitted = jt->done = false;
    b.rc = rc;
    if (rc < 0)
        snprintf(b.err, sizeof b.err, "%s", msg ? msg : sluice_strerror(rc));
    b.write_ns = uv_hrtime() - jt->sink_start_ns;
    batch_done(jt, b);
}

/* The prepare and check callbacks: the end of a loop iteration's work. */
static void flush(struct journal_thread *jt)
{
    jt->armed = false;
    uv_prepare_stop(&jt->prepare);
    uv_check_stop(&jt->check);
    if (!jt->inflight && !jt->failed)
        submit(jt);
}

static void on_prepare(uv_prepare_t *h)
{
    flush(h->data);
}

static void on_check(uv_check_t *h)
{
    flush(h->data);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct journal_thread *jt = h->data;
    if (--jt->open_handles > 0)
        return;
    void (*cb)(void *) = jt->close_cb;
    void *user = jt->close_user;
    free(jt->pending);
    free(jt->waiters);
    free(jt->snap);
    uv_mutex_destroy(&jt->mu);
    uv_cond_destroy(&jt->cond);
    free(jt);
    if (cb)
        cb(user);
}

static void maybe_finish(struct journal_thread *jt)
{
    if (!jt->closing || jt->finishing || jt->inflight)
        return;
    if (!jt->failed && (jt->n > jt->head || jt->has_snap)) {
        submit(jt);
        if (jt->inflight || jt->finishing)
            return;
    }
    jt->finishing = true;
    fire_waiters(jt);
    if (!jt->sink) {
        uv_mutex_lock(&jt->mu);
        jt->stop = true;
        uv_cond_signal(&jt->cond);
        uv_mutex_unlock(&jt->mu);
        uv_thread_join(&jt->thread);
    }
    for (size_t i = jt->head; i < jt->n; i++)
        item_free(&jt->pending[i]);
    jt->head = jt->n = 0;
    jt->open_handles = 3;
    uv_close((uv_handle_t *)&jt->prepare, on_handle_closed);
    uv_close((uv_handle_t *)&jt->check, on_handle_closed);
    uv_close((uv_handle_t *)&jt->async, on_handle_closed);
}

int journal_thread_start(uv_loop_t *loop, const struct journal_thread_opts *opts,
                         struct journal_thread **out, char *err, size_t errlen)
{
    struct journal_thread *jt = calloc(1, sizeof *jt);
    if (!jt)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "journal thread: out of memory");
    jt->loop = loop;
    jt->j = opts->journal;
    jt->max_records = opts->max_records;
    jt->on_fail = opts->on_fail;
    jt->on_commit = opts->on_commit;
    jt->sink = opts->sink;
    jt->sink_user = opts->sink_user;
    jt->user = opts->user;
    jt->next_seq = jt->pending_first = opts->next_seq;
    jt->durable = opts->next_seq - 1;
    int rc = uv_mutex_init(&jt->mu);
    if (rc < 0) {
        free(jt);
        return err_set(err, errlen, rc, "journal thread: %s", uv_strerror(rc));
    }
    rc = uv_cond_init(&jt->cond);
    if (rc < 0) {
        uv_mutex_destroy(&jt->mu);
        free(jt);
        return err_set(err, errlen, rc, "journal thread: %s", uv_strerror(rc));
    }
    uv_prepare_init(loop, &jt->prepare);
    uv_check_init(loop, &jt->check);
    uv_async_init(loop, &jt->async, on_async);
    jt->prepare.data = jt->check.data = jt->async.data = jt;
    rc = jt->sink ? 0 : uv_thread_create(&jt->thread, thread_main, jt);
    if (rc < 0) {
        err_set(err, errlen, rc, "journal thread: %s", uv_strerror(rc));
        /* Closing frees jt from the last close callback; nothing else refers to it. */
        jt->finishing = jt->closing = true;
        jt->open_handles = 3;
        uv_close((uv_handle_t *)&jt->prepare, on_handle_closed);
        uv_close((uv_handle_t *)&jt->check, on_handle_closed);
        uv_close((uv_handle_t *)&jt->async, on_handle_closed);
        return rc;
    }
    *out = jt;
    return 0;
}

static int refused(const struct journal_thread *jt)
{
    if (jt->failed)
        return jt->fail_rc;
    return jt->closing ? SLUICE_ERR_CLOSED : 0;
}

int journal_thread_add(struct journal_thread *jt, uint8_t *payload, size_t len,
                       const char *dataset_id, const uint8_t *def, size_t def_len)
{
    struct item it = {.payload = payload, .len = len};
    int rc = refused(jt);
    if (rc < 0)
        goto fail;
    rc = SLUICE_ERR_NOMEM;
    if (dataset_id) {
        it.dataset_id = strdup(dataset_id);
        it.def = malloc(def_len ? def_len : 1);
        if (!it.dataset_id || !it.def)
            goto fail;
        if (def_len)
            memcpy(it.def, def, def_len);
        it.def_len = def_len;
    }
    if (jt->n == jt->cap) {
        size_t cap = jt->cap ? jt->cap * 2 : 64;
        struct item *v = realloc(jt->pending, cap * sizeof *v);
        if (!v)
            goto fail;
        jt->pending = v;
        jt->cap = cap;
    }
    if (jt->n == jt->head)
        jt->queued_ns = uv_hrtime();
    jt->pending[jt->n++] = it;
    jt->next_seq++;
    arm(jt);
    return 0;
fail:
    item_free(&it);
    return rc;
}

int journal_thread_snapshot(struct journal_thread *jt, uint8_t *data, size_t len)
{
    return journal_thread_snapshot_at(jt, data, len, jt->next_seq - 1);
}

int journal_thread_snapshot_at(struct journal_thread *jt, uint8_t *data, size_t len, uint64_t seq)
{
    int rc = refused(jt);
    if (rc == 0 && jt->sink)
        rc = SLUICE_ERR_UNSUPPORTED;
    if (rc == 0 && seq >= jt->next_seq)
        rc = SLUICE_ERR_INVALID;
    if (rc < 0) {
        free(data);
        return rc;
    }
    free(jt->snap);
    jt->snap = data;
    jt->snap_len = len;
    jt->snap_seq = seq;
    jt->has_snap = true;
    arm(jt);
    return 0;
}

int journal_thread_wait(struct journal_thread *jt, journal_thread_wait_cb cb, void *ctx)
{
    uint64_t need = jt->next_seq - 1;
    if (jt->whead == jt->wn && (need <= jt->durable || jt->failed)) {
        cb(ctx, need <= jt->durable ? 0 : jt->fail_rc);
        return 0;
    }
    if (jt->wn == jt->wcap) {
        if (jt->whead > 0) {
            memmove(jt->waiters, &jt->waiters[jt->whead],
                    (jt->wn - jt->whead) * sizeof *jt->waiters);
            jt->wn -= jt->whead;
            jt->whead = 0;
        } else {
            size_t cap = jt->wcap ? jt->wcap * 2 : 64;
            struct waiter *v = realloc(jt->waiters, cap * sizeof *v);
            if (!v)
                return SLUICE_ERR_NOMEM;
            jt->waiters = v;
            jt->wcap = cap;
        }
    }
    jt->waiters[jt->wn++] = (struct waiter){cb, ctx, need};
    return 0;
}

uint64_t journal_thread_next_seq(const struct journal_thread *jt)
{
    return jt->next_seq;
}

uint64_t journal_thread_durable_seq(const struct journal_thread *jt)
{
    return jt->durable;
}

bool journal_thread_failed(const struct journal_thread *jt)
{
    return jt->failed;
}

void journal_thread_get_stats(const struct journal_thread *jt, struct journal_thread_stats *out)
{
    *out = jt->stats;
}

void journal_thread_close(struct journal_thread *jt, void (*cb)(void *user), void *user)
{
    jt->closing = true;
    jt->close_cb = cb;
    jt->close_user = user;
    if (jt->armed) {
        jt->armed = false;
        uv_prepare_stop(&jt->prepare);
        uv_check_stop(&jt->check);
    }
    maybe_finish(jt);
}
