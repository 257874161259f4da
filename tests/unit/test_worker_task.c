/* A worker task (src/worker/task.c) driven the way the worker's loop drives it, without
 * sockets: producers run on a pool of two threads (src/worker/pool.c) and fill the buffer, the
 * test takes and decodes every element, grants splits for distributed_epoch, and stops tasks
 * whose producers are parked. Every wait is bounded. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "lib/pipeline.h"

#include "common/error.h"
#include "pipeline/codec.h"
#include "pipeline/element.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/snapshot.h"
#include "pipeline/split.h"
#include "pipeline/open.h"
#include "worker/pool.h"
#include "worker/task.h"

#define WAIT_LIMIT_MS 20000

struct env {
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t poll; /* keeps uv_run(ONCE) from sleeping longer than a few ms */
    unsigned wakes;
    struct sluice_registry *reg;
    struct pipe_buf scratch;
    struct pool *pool; /* two threads: fewer than most tests' producers */
};

static void on_wake(uv_async_t *a)
{
    struct env *e = a->data;
    e->wakes++;
}

static void on_poll(uv_timer_t *t)
{
    (void)t;
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    assert_int_equal(uv_loop_init(&e->loop), 0);
    assert_int_equal(uv_async_init(&e->loop, &e->wake, on_wake), 0);
    e->wake.data = e;
    assert_int_equal(uv_timer_init(&e->loop, &e->poll), 0);
    assert_int_equal(uv_timer_start(&e->poll, on_poll, 2, 2), 0);
    assert_int_equal(pipe_registry_new(&e->reg), 0);
    assert_int_equal(pool_create(2, &e->pool), 0);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    pool_destroy(e->pool); /* before the wake handle its slices send goes */
    uv_close((uv_handle_t *)&e->wake, NULL);
    uv_close((uv_handle_t *)&e->poll, NULL);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    pipe_registry_free(e->reg);
    pipe_buf_release(&e->scratch);
    free(e);
    return 0;
}

static struct task *start(struct env *e, const char *text, enum sluice_mode mode, unsigned threads,
                          uint32_t nw, uint32_t wi, uint64_t buffer_records)
{
    struct task_config cfg = {
        .id = 1,
        .mode = mode,
        .compress = true,
        .num_workers = nw,
        .worker_index = wi,
        .producers = threads,
        .pool = e->pool,
        .reg = e->reg,
        .wake = &e->wake,
        .buffer_records = buffer_records,
    };
    struct task *t = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    int rc = task_start(&cfg, pipeline_parse(text), &t, err, sizeof err);
    if (rc != 0)
        fail_msg("task_start: %s", err);
    return t;
}

static uint64_t elapsed_ms(uint64_t since)
{
    return (uv_hrtime() - since) / 1000000u;
}

/* What a drain saw: the int64 values read, in order, and how it ended. */
struct drained {
    int64_t *values;
    size_t n, cap;
    int status; /* TASK_TAKE_END or TASK_TAKE_FAILED */
    int code;
    char msg[SLUICE_ERRMSG_SIZE];
    /* distributed_epoch: the next position expected of each split, and the end markers seen. */
    uint64_t next_pos[4096];
    size_t splits_ended;
};

/* Lease hook for distributed tasks: called while draining to answer GetSplits. */
struct leaser {
    struct pipe_split_provider prov;
    uint64_t cursor, count;
    unsigned *finished;    /* times each seq was reported finished */
    struct split_plan bad; /* when bad.per_pass is set, sent instead of the real plan */
};

static void lease_step(struct task *t, struct leaser *l)
{
    uint32_t max;
    const uint64_t *fin;
    size_t nfin;
    const uint64_t *ret;
    size_t nret;
    if (!task_lease_want(t, uv_hrtime() / 1000000u, false, &max, &fin, &nfin, &ret, &nret))
        return;
    for (size_t i = 0; i < nfin; i++) {
        assert_true(fin[i] < l->count);
        l->finished[fin[i]]++;
    }
    uint64_t seqs[64];
    size_t n = 0;
    while (n < max && n < 64 && l->cursor < l->count)
        seqs[n++] = l->cursor++;
    struct split_plan *plan = malloc(sizeof *plan);
    assert_non_null(plan);
    if (l->bad.per_pass) {
        *plan = l->bad;
    } else {
        memset(plan, 0, sizeof *plan);
        plan->source_len = l->prov.plan.source_len;
        plan->split_size = l->prov.plan.split_size;
        plan->per_pass = l->prov.plan.per_pass;
        plan->passes = l->prov.plan.passes;
    }
    task_lease_granted(t, plan, seqs, n, l->cursor >= l->count, uv_hrtime() / 1000000u);
    free(plan);
}

/* One take from t, after answering its GetSplits (l, for distributed_epoch): decodes what it
 * took into out. Returns 1 once the task ended or failed (out->status), 0 after taking
 * elements, -1 when the buffer is empty for now (the reader then waits: steal). */
static int drain_once(struct task *t, struct leaser *l, uint32_t max_el, struct pipe_buf *scratch,
                      struct sluice_element *el, struct pipe_buf *dscratch, struct drained *out)
{
    if (l)
        lease_step(t, l);
    struct task_take tk;
    int st = task_take(t, max_el, 1u << 20, scratch, &tk);
    assert_true(st >= 0);
    if (st == TASK_TAKE_DATA) {
        task_set_waiting(t, false);
        assert_true(tk.wb.count <= max_el);
        size_t pos = 0;
        char err[SLUICE_ERRMSG_SIZE];
        uint32_t n = 0;
        int rc;
        struct codec_mark mark;
        while ((rc = codec_next_record(tk.wb.payload, tk.wb.len, &pos, el, dscratch, NULL, &mark,
                                       err, sizeof err)) > 0) {
            n++;
            if (rc == CODEC_SPLIT_END) {
                /* A split's end marker counts the elements tagged with it before. */
                assert_true(l != NULL);
                assert_true(mark.seq < 4096);
                assert_int_equal(mark.pos, out->next_pos[mark.seq]);
                out->splits_ended++;
                continue;
            }
            /* distributed_epoch elements carry their split and position in it, in order. */
            assert_int_equal(mark.tagged, l != NULL);
            if (mark.tagged) {
                assert_true(mark.seq < 4096);
                assert_int_equal(mark.pos, out->next_pos[mark.seq]);
                out->next_pos[mark.seq]++;
            }
            assert_int_equal(el->n, 1);
            assert_int_equal(el->t[0].dtype, SLUICE_INT64);
            if (out->n == out->cap) {
                out->cap = out->cap ? out->cap * 2 : 1024;
                out->values = realloc(out->values, out->cap * sizeof *out->values);
                assert_non_null(out->values);
            }
            out->values[out->n++] = *(int64_t *)(void *)el->t[0].data;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(n, tk.wb.count);
        task_take_release(t, &tk);
        return 0;
    }
    if (st == TASK_TAKE_EMPTY) {
        task_set_waiting(t, true);
        task_steal(t, uv_hrtime());
        return -1;
    }
    out->status = st;
    if (st == TASK_TAKE_FAILED) {
        out->code = tk.code;
        snprintf(out->msg, sizeof out->msg, "%s", tk.msg);
    }
    return 1;
}

/* Takes everything the task produces, running the loop while the buffer is empty, until the
 * task ends or fails. */
static void drain(struct env *e, struct task *t, struct leaser *l, uint32_t max_el,
                  struct drained *out)
{
    memset(out, 0, sizeof *out);
    struct sluice_element el;
    pipe_elem_init(&el);
    struct pipe_buf dscratch = {0};
    uint64_t t0 = uv_hrtime();
    for (;;) {
        assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
        int rc = drain_once(t, l, max_el, &e->scratch, &el, &dscratch, out);
        if (rc > 0)
            break;
        if (rc < 0)
            uv_run(&e->loop, UV_RUN_ONCE);
    }
    pipe_elem_release(&el);
    pipe_buf_release(&dscratch);
}

/* Waits (running the loop) until every producer has exited, then frees the task. */
static void finish(struct env *e, struct task *t)
{
    uint64_t t0 = uv_hrtime();
    while (!task_exited(t)) {
        assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
        uv_run(&e->loop, UV_RUN_ONCE);
    }
    task_free(t);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_parallel_whole_pipeline(void **state)
{
    struct env *e = *state;
    /* A small record bound makes the producer block and resume many times. */
    struct task *t = start(e, "range(200000) | map(mul, 3)", SLUICE_PARALLEL_EPOCHS, 4, 0, 0, 5000);
    assert_false(task_is_distributed(t));
    struct drained d;
    drain(e, t, NULL, 777, &d);
    assert_int_equal(d.status, TASK_TAKE_END);
    assert_int_equal(d.n, 200000);
    for (size_t i = 0; i < d.n; i++)
        assert_int_equal(d.values[i], 3 * (int64_t)i); /* in order */
    struct task_progress tp;
    task_progress(t, &tp);
    assert_true(tp.done);
    assert_false(tp.failed);
    assert_true(tp.finished);
    assert_int_equal(tp.buffered, 0);
    assert_int_equal(tp.produced, 200000);
    const char *msg;
    assert_int_equal(task_error(t, &msg), 0);
    free(d.values);
    finish(e, t);
}

static void test_empty_pipeline(void **state)
{
    struct env *e = *state;
    struct task *t = start(e, "range(0)", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 0);
    struct drained d;
    drain(e, t, NULL, 10, &d);
    assert_int_equal(d.status, TASK_TAKE_END);
    assert_int_equal(d.n, 0);
    finish(e, t);
}

static void test_data_sharding(void **state)
{
    struct env *e = *state;
    struct task *t = start(e, "range(10)", SLUICE_SHARD_DATA, 1, 3, 1, 0);
    struct drained d;
    drain(e, t, NULL, 100, &d);
    assert_int_equal(d.status, TASK_TAKE_END);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.values[0], 1);
    assert_int_equal(d.values[1], 4);
    assert_int_equal(d.values[2], 7);
    free(d.values);
    finish(e, t);
}

/* A pipeline that cannot be built fails the task with the builder's code and message. */
static void test_build_failure(void **state)
{
    struct env *e = *state;
    struct task *t =
        start(e, "lines(\"/nonexistent-dir-for-test/*.txt\")", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 0);
    struct drained d;
    drain(e, t, NULL, 100, &d);
    assert_int_equal(d.status, TASK_TAKE_FAILED);
    assert_int_equal(d.code, SLUICE_ERR_NOT_FOUND);
    assert_string_equal(d.msg, "no file matches '/nonexistent-dir-for-test/*.txt'");
    struct task_progress tp;
    task_progress(t, &tp);
    assert_true(tp.failed);
    assert_false(tp.finished);
    finish(e, t);

    /* Static sharding that cannot apply fails the same way. */
    t = start(e, "range(10)", SLUICE_SHARD_FILE, 1, 2, 0, 0);
    drain(e, t, NULL, 100, &d);
    assert_int_equal(d.status, TASK_TAKE_FAILED);
    assert_int_equal(d.code, SLUICE_ERR_INVALID);
    assert_string_equal(d.msg, "file sharding needs a tfrecord(), lines() or tar() source; use "
                               "data or file_or_data sharding");
    finish(e, t);
}

static void test_new_failed(void **state)
{
    struct env *e = *state;
    struct task *t;
    assert_int_equal(task_new_failed(9, SLUICE_ERR_PARSE, "column 0: unknown function 'x'", &t), 0);
    assert_int_equal(task_id(t), 9);
    assert_false(task_is_distributed(t));
    assert_true(task_exited(t));
    struct drained d;
    drain(e, t, NULL, 100, &d);
    assert_int_equal(d.status, TASK_TAKE_FAILED);
    assert_int_equal(d.code, SLUICE_ERR_PARSE);
    assert_string_equal(d.msg, "column 0: unknown function 'x'");
    assert_int_equal(task_steal(t, uv_hrtime()), 0);
    task_free(t);
}

/* Elements produced before a failure are served ahead of it, and only the first failure
 * counts. */
static void test_failure_after_elements(void **state)
{
    struct env *e = *state;
    struct task *t = start(e, "range(10)", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 0);
    task_begin(t); /* as a first take would */
    uint64_t t0 = uv_hrtime();
    for (;;) {
        struct task_progress tp;
        task_progress(t, &tp);
        if (tp.done)
            break;
        assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
        uv_run(&e->loop, UV_RUN_ONCE);
    }
    task_fail(t, SLUICE_ERR_FN, "boom");
    task_fail(t, SLUICE_ERR_NOMEM, "second failure is ignored");
    struct drained d;
    drain(e, t, NULL, 4, &d);
    assert_int_equal(d.n, 10);
    assert_int_equal(d.status, TASK_TAKE_FAILED);
    assert_int_equal(d.code, SLUICE_ERR_FN);
    assert_string_equal(d.msg, "boom");
    free(d.values);
    finish(e, t);
}

static void run_distributed(struct env *e, const char *text, uint64_t split_size, unsigned threads,
                            uint64_t want_n)
{
    struct leaser l;
    memset(&l, 0, sizeof l);
    struct pipe_spec *spec = pipeline_parse(text);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_split_provider_init(&l.prov, spec, split_size, err, sizeof err), 0);
    pipe_spec_free(spec);
    l.count = split_plan_total(&l.prov.plan);
    l.finished = calloc(l.count + 1, sizeof *l.finished);
    assert_non_null(l.finished);

    struct task *t = start(e, text, SLUICE_DISTRIBUTED_EPOCH, threads, 0, 0, 0);
    assert_true(task_is_distributed(t));
    struct drained d;
    drain(e, t, &l, 1000, &d);
    assert_int_equal(d.status, TASK_TAKE_END);
    assert_int_equal(d.n, want_n);
    /* Every split ended with a marker counting exactly its elements (checked in drain). */
    assert_int_equal(d.splits_ended, l.count);
    /* The last finished splits are reported after the end; keep answering until settled. */
    uint64_t t0 = uv_hrtime();
    for (;;) {
        struct task_progress tp;
        task_progress(t, &tp);
        if (tp.finished)
            break;
        assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
        lease_step(t, &l);
        uv_run(&e->loop, UV_RUN_ONCE);
    }
    for (uint64_t s = 0; s < l.count; s++)
        assert_int_equal(l.finished[s], 1);
    qsort(d.values, d.n, sizeof *d.values, cmp_i64);
    /* Every source element exactly as often as the repeats say (checked by the caller's
     * choice of pipeline: values 0..len-1, each want_n / len times). */
    uint64_t reps = want_n / l.prov.plan.source_len;
    for (size_t i = 0; i < d.n; i++)
        assert_int_equal(d.values[i], (int64_t)(i / reps));
    free(d.values);
    free(l.finished);
    pipe_split_provider_release(&l.prov);
    finish(e, t);
}

/* A task nobody takes from runs nothing: no element is produced and no split asked for, and a
 * stop (or a drain) ends it at once; the first take starts it. */
static void test_runs_at_first_take(void **state)
{
    struct env *e = *state;
    struct task *t = start(e, "range(10) | repeat()", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 0);
    uint64_t t0 = uv_hrtime();
    while (elapsed_ms(t0) < 200)
        uv_run(&e->loop, UV_RUN_NOWAIT);
    struct task_progress tp;
    task_progress(t, &tp);
    assert_int_equal(tp.produced, 0);
    assert_false(task_exited(t));
    task_stop(t);
    assert_true(task_exited(t));
    task_free(t);

    t = start(e, "range(10)", SLUICE_DISTRIBUTED_EPOCH, 2, 0, 0, 0);
    uint32_t max;
    const uint64_t *fin, *ret;
    size_t nfin, nret;
    assert_false(task_lease_want(t, 0, false, &max, &fin, &nfin, &ret, &nret));
    assert_int_equal(task_drain(t), 0);
    assert_true(task_exited(t));
    task_free(t);

    /* The first take starts it, and every element comes. */
    t = start(e, "range(10)", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 0);
    struct drained d;
    drain(e, t, NULL, 100, &d);
    assert_int_equal(d.status, TASK_TAKE_END);
    assert_int_equal(d.n, 10);
    free(d.values);
    finish(e, t);
}

static void test_distributed(void **state)
{
    struct env *e = *state;
    run_distributed(e, "range(5000)", 7, 3, 5000);
    run_distributed(e, "range(300) | repeat(3)", 0, 2, 900);
    run_distributed(e, "range(1)", 0, 4, 1);
}

/* A plan that contradicts the dataset fails the task with a message naming both. */
static void test_distributed_bad_plan(void **state)
{
    struct env *e = *state;
    struct leaser l;
    memset(&l, 0, sizeof l);
    l.count = 10;
    l.finished = calloc(l.count, sizeof *l.finished);
    l.bad = (struct split_plan){.source_len = 20, .split_size = 1, .per_pass = 20, .passes = 1};
    struct task *t = start(e, "range(10)", SLUICE_DISTRIBUTED_EPOCH, 2, 0, 0, 0);
    struct drained d;
    drain(e, t, &l, 100, &d);
    assert_int_equal(d.status, TASK_TAKE_FAILED);
    assert_int_equal(d.code, SLUICE_ERR_CORRUPT);
    assert_string_equal(d.msg, "split plan does not match the dataset: 20 elements in 20 splits "
                               "per pass, 1 passes; the dataset gives 10, 10, 1");
    free(l.finished);
    finish(e, t);
}

/* A leased seq past the end of the plan's sequence fails the task, naming the seq. */
static void test_distributed_seq_past_end(void **state)
{
    struct env *e = *state;
    struct leaser l;
    memset(&l, 0, sizeof l);
    struct pipe_spec *spec = pipeline_parse("range(10)");
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_split_provider_init(&l.prov, spec, 5, err, sizeof err), 0);
    pipe_spec_free(spec);
    assert_int_equal(split_plan_total(&l.prov.plan), 2);
    l.count = 3; /* the leaser hands out seqs 0, 1 and 2 */
    l.finished = calloc(l.count, sizeof *l.finished);
    assert_non_null(l.finished);
    struct task *t = start(e, "range(10)", SLUICE_DISTRIBUTED_EPOCH, 1, 0, 0, 0);
    struct drained d;
    drain(e, t, &l, 100, &d);
    assert_int_equal(d.status, TASK_TAKE_FAILED);
    assert_int_equal(d.code, SLUICE_ERR_CORRUPT);
    assert_string_equal(d.msg, "split 2 is past the end of the split sequence");
    free(d.values);
    free(l.finished);
    pipe_split_provider_release(&l.prov);
    finish(e, t);
}

/* Stopping a task whose producer is blocked on a full buffer, or idle waiting for splits,
 * ends its threads promptly. */
static void test_stop_blocked(void **state)
{
    struct env *e = *state;
    struct task *t = start(e, "range(10) | repeat()", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 100);
    task_begin(t); /* as a first take would */
    uint64_t t0 = uv_hrtime();
    for (;;) {
        struct task_progress tp;
        task_progress(t, &tp);
        if (tp.buffered >= 100)
            break;
        assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
        uv_run(&e->loop, UV_RUN_ONCE);
    }
    task_stop(t);
    finish(e, t);

    /* Distributed, never granted any split. */
    t = start(e, "range(10)", SLUICE_DISTRIBUTED_EPOCH, 3, 0, 0, 0);
    uv_run(&e->loop, UV_RUN_ONCE);
    task_stop(t);
    finish(e, t);
}

/* A producer whose snapshot source waits for a chunk the save has not written yet gives up as
 * soon as the task stops, rather than when the chunk appears. */
static void test_stop_waiting_for_snapshot_chunk(void **state)
{
    struct env *e = *state;
    char dir[64], err[SLUICE_ERRMSG_SIZE];
    snprintf(dir, sizeof dir, "/tmp/sluice-test-task-snap-XXXXXX");
    assert_non_null(mkdtemp(dir));
    struct snap_meta m = {
        .format = SNAP_FORMAT, .dataset_id = "d", .pipeline = "range(1)", .chunks = 1};
    assert_int_equal(snap_meta_write(dir, &m, err, sizeof err), 0);
    char text[128];
    snprintf(text, sizeof text, "snapshot(\"%s\")", dir);
    struct task *t = start(e, text, SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 0);
    uint64_t t0 = uv_hrtime();
    while (elapsed_ms(t0) < 300)
        uv_run(&e->loop, UV_RUN_ONCE);
    assert_false(task_exited(t));
    t0 = uv_hrtime();
    task_stop(t);
    finish(e, t);
    assert_true(elapsed_ms(t0) < 2000);
    char path[128];
    snprintf(path, sizeof path, "%s/" SNAP_META_FILE, dir);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof path, "%s/" SNAP_CHUNKS_DIR, dir);
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* A save's task (task_config.snapshot_path): each split leased goes into its chunk file, a split
 * is reported finished only once its chunk is committed, nothing goes to the buffer, and the
 * chunks hold exactly the splits' elements in order. */
static const char *save_dir; /* the directory the reports below are checked against */

static void save_lease_step(struct task *t, struct leaser *l)
{
    uint32_t max;
    const uint64_t *fin;
    size_t nfin;
    const uint64_t *ret;
    size_t nret;
    if (!task_lease_want(t, uv_hrtime() / 1000000u, false, &max, &fin, &nfin, &ret, &nret))
        return;
    for (size_t i = 0; i < nfin; i++) {
        assert_true(fin[i] < l->count);
        l->finished[fin[i]]++;
        /* Reported finished: its chunk is there under its final name. */
        char path[256];
        snap_chunk_path(save_dir, fin[i], path, sizeof path);
        assert_int_equal(access(path, R_OK), 0);
    }
    uint64_t seqs[64];
    size_t n = 0;
    while (n < max && n < 64 && l->cursor < l->count)
        seqs[n++] = l->cursor++;
    struct split_plan *plan = calloc(1, sizeof *plan);
    assert_non_null(plan);
    plan->source_len = l->prov.plan.source_len;
    plan->split_size = l->prov.plan.split_size;
    plan->per_pass = l->prov.plan.per_pass;
    plan->passes = l->prov.plan.passes;
    task_lease_granted(t, plan, seqs, n, l->cursor >= l->count, uv_hrtime() / 1000000u);
    free(plan);
}

static void test_save_task_writes_chunks(void **state)
{
    struct env *e = *state;
    char dir[64], err[SLUICE_ERRMSG_SIZE];
    snprintf(dir, sizeof dir, "/tmp/sluice-test-task-save-XXXXXX");
    assert_non_null(mkdtemp(dir));
    save_dir = dir;
    const char *text = "range(500) | map(mul, 3)";
    struct leaser l;
    memset(&l, 0, sizeof l);
    struct pipe_spec *spec = pipeline_parse(text);
    assert_int_equal(pipe_split_provider_init(&l.prov, spec, 16, err, sizeof err), 0);
    pipe_spec_free(spec);
    l.count = split_plan_total(&l.prov.plan);
    assert_int_equal(l.count, 32);
    l.finished = calloc(l.count, sizeof *l.finished);
    assert_non_null(l.finished);
    struct snap_meta m = {
        .format = SNAP_FORMAT, .dataset_id = "d", .pipeline = (char *)text, .chunks = l.count};
    assert_int_equal(snap_meta_write(dir, &m, err, sizeof err), 0);

    struct task_config cfg = {
        .id = 1,
        .mode = SLUICE_DISTRIBUTED_EPOCH,
        .producers = 3,
        .pool = e->pool, /* not used: a save's task runs on threads of its own */
        .reg = e->reg,
        .wake = &e->wake,
        .snapshot_path = dir,
    };
    struct task *t = NULL;
    assert_int_equal(task_start(&cfg, pipeline_parse(text), &t, err, sizeof err), 0);
    uint64_t t0 = uv_hrtime();
    struct task_progress tp;
    for (;;) {
        task_progress(t, &tp);
        if (tp.finished || tp.failed)
            break;
        assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
        save_lease_step(t, &l);
        uv_run(&e->loop, UV_RUN_ONCE);
    }
    assert_false(tp.failed);
    assert_int_equal(tp.chunks_committed, l.count);
    assert_int_equal(tp.produced, 500);
    assert_int_equal(tp.buffered, 0);
    for (uint64_t s = 0; s < l.count; s++)
        assert_int_equal(l.finished[s], 1);
    /* Nothing for readers: the task ends without data. */
    struct task_take tk;
    assert_int_equal(task_take(t, 100, 1u << 20, &e->scratch, &tk), TASK_TAKE_END);
    finish(e, t);

    /* Chunk i holds split i: 16 elements (the last 4), 3 * position each. */
    struct sluice_element el;
    pipe_elem_init(&el);
    int64_t want = 0;
    for (uint64_t i = 0; i < l.count; i++) {
        char path[256];
        snap_chunk_path(dir, i, path, sizeof path);
        struct snap_reader *r = NULL;
        assert_int_equal(snap_reader_open(path, &r, err, sizeof err), 0);
        int rc;
        while ((rc = snap_reader_next(r, &el, err, sizeof err)) == 1) {
            assert_int_equal(*(int64_t *)(void *)el.t[0].data, want * 3);
            want++;
        }
        assert_int_equal(rc, 0);
        snap_reader_close(r);
        assert_int_equal(unlink(path), 0);
    }
    assert_int_equal(want, 500);
    pipe_elem_release(&el);
    free(l.finished);
    pipe_split_provider_release(&l.prov);
    /* No temporary file was left behind. */
    char path[128];
    snprintf(path, sizeof path, "%s/" SNAP_META_FILE, dir);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof path, "%s/" SNAP_CHUNKS_DIR, dir);
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* ---- large elements ---------------------------------------------------------------------
 * Elements large enough to go out as external chunks (their tensor's block is taken over instead
 * of copied), with and without compression probes in between (which put some large elements
 * through the copying path, so both kinds of record interleave), drained with whole-chunk takes
 * and with contiguous takes, against the same pipeline run locally: every element arrives, once,
 * in order, byte for byte. */

/* The pipeline's elements, run locally, encoded as one batch: what the task must deliver. */
static struct pipe_buf expected(struct env *e, const char *text, size_t *count)
{
    struct pipe_spec *spec = pipeline_parse(text);
    struct pipe_run *run = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_open(spec, e->reg, &run, err, sizeof err), 0);
    struct sluice_element el;
    pipe_elem_init(&el);
    struct pipe_buf out = {0}, scratch = {0};
    *count = 0;
    int rc;
    while ((rc = pipe_run_next(run, &el)) == 1) {
        assert_int_equal(codec_append_elem(&out, &el, false, &scratch), 0);
        (*count)++;
    }
    assert_int_equal(rc, 0);
    pipe_elem_release(&el);
    pipe_buf_release(&scratch);
    pipe_run_free(run);
    pipe_spec_free(spec);
    return out;
}

/* Appends the records of a take to got. */
static void append_take(struct pipe_buf *got, const struct task_take *tk)
{
    size_t need = got->len + tk->wb.len;
    if (got->cap < need) {
        got->p = realloc(got->p, need);
        assert_non_null(got->p);
        got->cap = need;
    }
    if (!tk->wb.whole) {
        memcpy(got->p + got->len, tk->wb.payload, tk->wb.len);
        got->len += tk->wb.len;
        return;
    }
    size_t before = got->len;
    for (const struct wbuf_chunk *c = tk->wb.spent; c; c = c->next) {
        struct wbuf_piece pieces[3];
        unsigned n = wbuf_chunk_pieces(c, pieces);
        for (unsigned i = 0; i < n; i++) {
            memcpy(got->p + got->len, pieces[i].p, pieces[i].len);
            got->len += pieces[i].len;
        }
    }
    assert_int_equal(got->len - before, tk->wb.len);
}

struct drain_stats {
    size_t elements, takes, whole_takes, external_chunks;
};

/* Takes everything the task produces (whole chunks when whole is set) into got. */
static void drain_takes(struct env *e, struct task *t, bool whole, uint64_t max_bytes,
                        struct pipe_buf *got, struct drain_stats *st)
{
    memset(st, 0, sizeof *st);
    uint64_t t0 = uv_hrtime();
    for (;;) {
        assert_true((uv_hrtime() - t0) / 1000000u < WAIT_LIMIT_MS);
        struct task_take tk;
        int rc = whole ? task_take_whole(t, 1000, max_bytes, 0, 0, &e->scratch, &tk)
                       : task_take(t, 1000, max_bytes, &e->scratch, &tk);
        assert_true(rc >= 0);
        if (rc == TASK_TAKE_DATA) {
            task_set_waiting(t, false);
            append_take(got, &tk);
            st->elements += tk.wb.count;
            st->takes++;
            if (tk.wb.whole)
                st->whole_takes++;
            for (const struct wbuf_chunk *c = tk.wb.spent; c; c = c->next)
                st->external_chunks += c->ext != NULL;
            task_take_release(t, &tk);
            continue;
        }
        if (rc == TASK_TAKE_EMPTY) {
            task_set_waiting(t, true);
            task_steal(t, uv_hrtime());
            uv_run(&e->loop, UV_RUN_ONCE);
            continue;
        }
        assert_int_equal(rc, TASK_TAKE_END);
        break;
    }
}

static void run_case(struct env *e, const char *text, bool compress, bool whole,
                     uint64_t buffer_bytes, uint64_t max_bytes, bool expect_external)
{
    size_t count;
    struct pipe_buf want = expected(e, text, &count);
    struct task_config cfg = {
        .id = 1,
        .mode = SLUICE_PARALLEL_EPOCHS,
        .compress = compress,
        .producers = 1,
        .pool = e->pool,
        .reg = e->reg,
        .wake = &e->wake,
        .buffer_bytes = buffer_bytes,
    };
    struct task *t = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(task_start(&cfg, pipeline_parse(text), &t, err, sizeof err), 0);
    struct pipe_buf got = {0};
    struct drain_stats st;
    drain_takes(e, t, whole, max_bytes, &got, &st);
    uint64_t t0 = uv_hrtime();
    while (!task_exited(t)) {
        assert_true((uv_hrtime() - t0) / 1000000u < WAIT_LIMIT_MS);
        uv_run(&e->loop, UV_RUN_ONCE);
    }
    task_free(t);

    assert_int_equal(st.elements, count);
    if (!compress) {
        /* Records stored raw are the very bytes of the local encoding. */
        assert_int_equal(got.len, want.len);
        assert_memory_equal(got.p, want.p, want.len);
    } else {
        /* With compression probes the records differ in form; the elements must not. */
        struct sluice_element a, b;
        pipe_elem_init(&a);
        pipe_elem_init(&b);
        struct pipe_buf s1 = {0}, s2 = {0};
        size_t pa = 0, pb = 0;
        char msg[SLUICE_ERRMSG_SIZE];
        for (size_t i = 0; i < count; i++) {
            assert_int_equal(
                codec_next_elem((uint8_t *)got.p, got.len, &pa, &a, &s1, msg, sizeof msg), 1);
            assert_int_equal(
                codec_next_elem((uint8_t *)want.p, want.len, &pb, &b, &s2, msg, sizeof msg), 1);
            assert_true(pipe_elem_equal(&a, &b));
        }
        assert_int_equal(pa, got.len);
        pipe_elem_release(&a);
        pipe_elem_release(&b);
        pipe_buf_release(&s1);
        pipe_buf_release(&s2);
    }
    if (expect_external)
        assert_true(st.external_chunks > 0);
    else
        assert_int_equal(st.external_chunks, 0);
    if (whole && expect_external)
        assert_true(st.whole_takes > 0);
    pipe_buf_release(&got);
    pipe_buf_release(&want);
}

/* ---- the pool ------------------------------------------------------------------------------ */

/* Many tasks on the pool of two threads each produce exactly their elements: parallel_epochs and
 * distributed_epoch tasks with a bound of 50 records, so their producers park on a full buffer
 * and resume many times (elements come slowly enough, 20 us apart, and splits are short enough
 * for the chunks to be small), distributed ones parked for leases until the test grants splits.
 * While all of them are parked, another task on the same pool still runs to its end. */
static void test_many_tasks_share_pool(void **state)
{
    struct env *e = *state;
    enum { PE = 8, DE = 8, N = PE + DE, PE_LEN = 3000, DE_LEN = 2000 };
    struct task *t[N];
    struct leaser *l = calloc(N, sizeof *l);
    struct drained *d = calloc(N, sizeof *d);
    assert_non_null(l);
    assert_non_null(d);
    char err[SLUICE_ERRMSG_SIZE];
    for (int i = 0; i < N; i++) {
        if (i < PE) {
            t[i] = start(e, "range(3000) | map(sleep_us, 20)", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 50);
        } else {
            struct pipe_spec *spec = pipeline_parse("range(2000)");
            assert_int_equal(pipe_split_provider_init(&l[i].prov, spec, 7, err, sizeof err), 0);
            pipe_spec_free(spec);
            l[i].count = split_plan_total(&l[i].prov.plan);
            l[i].finished = calloc(l[i].count + 1, sizeof *l[i].finished);
            assert_non_null(l[i].finished);
            t[i] = start(e, "range(2000)", SLUICE_DISTRIBUTED_EPOCH, 3, 0, 0, 50);
        }
        /* As if a reader waited all along: producers publish small chunks (each lingering chunk,
         * and every split's end), so they fill the buffer and park over and over. */
        task_set_waiting(t[i], true);
        task_begin(t[i]); /* as a first take would */
    }
    /* Every parallel_epochs task fills its buffer and parks; distributed ones wait for splits. */
    uint64_t t0 = uv_hrtime();
    for (int i = 0; i < PE; i++) {
        for (;;) {
            struct task_progress tp;
            task_progress(t[i], &tp);
            if (tp.buffered >= 50 && tp.blocked_ns > 0)
                break;
            assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
            uv_run(&e->loop, UV_RUN_ONCE);
        }
    }
    struct task *other = start(e, "range(500)", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 0);
    struct drained od;
    drain(e, other, NULL, 1000, &od);
    assert_int_equal(od.status, TASK_TAKE_END);
    assert_int_equal(od.n, 500);
    for (size_t k = 0; k < od.n; k++)
        assert_int_equal(od.values[k], (int64_t)k);
    free(od.values);
    finish(e, other);

    /* Read them all in turns, a few records per take. */
    struct sluice_element el;
    pipe_elem_init(&el);
    struct pipe_buf dscratch = {0};
    bool ended[N] = {false};
    int left = N;
    t0 = uv_hrtime();
    while (left > 0) {
        assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
        bool took = false;
        for (int i = 0; i < N; i++) {
            if (ended[i])
                continue;
            int rc = drain_once(t[i], i < PE ? NULL : &l[i], 7, &e->scratch, &el, &dscratch, &d[i]);
            task_set_waiting(t[i], true);
            if (rc > 0) {
                ended[i] = true;
                left--;
            }
            took |= rc == 0;
        }
        if (!took)
            uv_run(&e->loop, UV_RUN_ONCE);
    }
    pipe_elem_release(&el);
    pipe_buf_release(&dscratch);

    for (int i = 0; i < N; i++) {
        assert_int_equal(d[i].status, TASK_TAKE_END);
        struct task_progress tp;
        task_progress(t[i], &tp);
        if (i < PE) {
            /* One producer: every element, in order; its time parked on the full buffer
             * counts as blocked. */
            assert_int_equal(d[i].n, PE_LEN);
            for (size_t k = 0; k < d[i].n; k++)
                assert_int_equal(d[i].values[k], (int64_t)k);
            assert_true(tp.blocked_ns > 0);
        } else {
            assert_int_equal(d[i].n, DE_LEN);
            assert_int_equal(d[i].splits_ended, l[i].count);
            qsort(d[i].values, d[i].n, sizeof *d[i].values, cmp_i64);
            for (size_t k = 0; k < d[i].n; k++)
                assert_int_equal(d[i].values[k], (int64_t)k);
            for (;;) {
                task_progress(t[i], &tp);
                if (tp.finished)
                    break;
                assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
                lease_step(t[i], &l[i]);
                uv_run(&e->loop, UV_RUN_ONCE);
            }
            for (uint64_t s = 0; s < l[i].count; s++)
                assert_int_equal(l[i].finished[s], 1);
            free(l[i].finished);
            pipe_split_provider_release(&l[i].prov);
        }
        free(d[i].values);
        finish(e, t[i]);
    }
    free(d);
    free(l);
}

/* Tasks whose producers are parked (on a full buffer, or for splits never granted) hold no
 * thread: their parked time keeps counting as blocked, a stop ends them promptly, and the pool
 * then runs another task to its end. */
static void test_stop_while_parked(void **state)
{
    struct env *e = *state;
    enum { FULL = 4, IDLE = 2, N = FULL + IDLE };
    struct task *t[N];
    for (int i = 0; i < N; i++) {
        t[i] = i < FULL ? start(e, "range(10) | repeat()", SLUICE_PARALLEL_EPOCHS, 1, 0, 0, 20)
                        : start(e, "range(10)", SLUICE_DISTRIBUTED_EPOCH, 3, 0, 0, 0);
        task_begin(t[i]);
    }
    uint64_t t0 = uv_hrtime();
    for (int i = 0; i < FULL; i++) {
        for (;;) {
            struct task_progress tp;
            task_progress(t[i], &tp);
            if (tp.buffered >= 20 && tp.blocked_ns > 0)
                break;
            assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
            uv_run(&e->loop, UV_RUN_ONCE);
        }
    }
    struct task_progress before, after;
    task_progress(t[0], &before);
    usleep(20000);
    task_progress(t[0], &after);
    assert_true(after.blocked_ns >= before.blocked_ns + 10000000u);
    assert_int_equal(after.produced, before.produced);
    for (int i = 0; i < N; i++) {
        assert_false(task_exited(t[i]));
        task_stop(t[i]);
    }
    for (int i = 0; i < N; i++)
        finish(e, t[i]);
    struct task *other = start(e, "range(100)", SLUICE_DISTRIBUTED_EPOCH, 2, 0, 0, 0);
    struct leaser l;
    memset(&l, 0, sizeof l);
    struct pipe_spec *spec = pipeline_parse("range(100)");
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_split_provider_init(&l.prov, spec, 10, err, sizeof err), 0);
    pipe_spec_free(spec);
    l.count = split_plan_total(&l.prov.plan);
    l.finished = calloc(l.count + 1, sizeof *l.finished);
    assert_non_null(l.finished);
    struct drained d;
    drain(e, other, &l, 1000, &d);
    assert_int_equal(d.status, TASK_TAKE_END);
    assert_int_equal(d.n, 100);
    qsort(d.values, d.n, sizeof *d.values, cmp_i64);
    for (size_t k = 0; k < d.n; k++)
        assert_int_equal(d.values[k], (int64_t)k);
    free(d.values);
    free(l.finished);
    pipe_split_provider_release(&l.prov);
    task_stop(other); /* its last splits' reports are not waited for here */
    finish(e, other);
}

/* A job that holds its thread until released, and one that counts its slices. */
struct stuck_job {
    struct pool_job job;
    atomic_int state; /* 1 running, 2 released, 3 returned */
};

static enum pool_slice stuck_run(struct pool_job *job)
{
    struct stuck_job *s = (struct stuck_job *)job;
    atomic_store(&s->state, 1);
    while (atomic_load(&s->state) != 2)
        usleep(1000);
    atomic_store(&s->state, 3);
    return POOL_DONE;
}

struct count_job {
    struct pool_job job;
    atomic_int slices;
    atomic_int parks; /* park this many times before finishing */
};

static enum pool_slice count_run(struct pool_job *job)
{
    struct count_job *c = (struct count_job *)job;
    int n = atomic_fetch_add(&c->slices, 1) + 1;
    if (atomic_load(&c->parks) > 0) {
        atomic_fetch_sub(&c->parks, 1);
        return POOL_PARK;
    }
    return n < 5 ? POOL_YIELD : POOL_DONE;
}

static void wait_int(atomic_int *v, int want)
{
    uint64_t t0 = uv_hrtime();
    while (atomic_load(v) != want) {
        assert_true(elapsed_ms(t0) < WAIT_LIMIT_MS);
        usleep(1000);
    }
}

/* A parked job runs again only when woken; a thread stuck in a slice is retired and replaced,
 * so the pool keeps its size, and exits on its own once the slice returns. */
static void test_pool_park_and_retire(void **state)
{
    (void)state;
    struct pool *pl;
    assert_int_equal(pool_create(1, &pl), 0);
    assert_int_equal(pool_size(pl), 1);
    struct count_job c = {.job = {.run = count_run}};
    atomic_init(&c.slices, 0);
    atomic_init(&c.parks, 1);
    pool_wake(pl, &c.job);
    wait_int(&c.slices, 1);
    usleep(20000);
    assert_int_equal(atomic_load(&c.slices), 1); /* parked: not run again */
    pool_wake(pl, &c.job);
    wait_int(&c.slices, 5); /* then it yields and runs in turns to its end */

    struct stuck_job s = {.job = {.run = stuck_run}};
    atomic_init(&s.state, 0);
    struct count_job c2 = {.job = {.run = count_run}};
    atomic_init(&c2.slices, 0);
    atomic_init(&c2.parks, 0);
    pool_wake(pl, &s.job);
    wait_int(&s.state, 1);
    pool_wake(pl, &c2.job);
    usleep(20000);
    assert_int_equal(atomic_load(&c2.slices), 0);  /* the only thread is stuck */
    assert_int_equal(pool_retire(pl, &c2.job), 0); /* not running */
    assert_int_equal(pool_retire(pl, &s.job), 1);
    assert_int_equal(pool_size(pl), 1);
    wait_int(&c2.slices, 5); /* on the new thread */
    atomic_store(&s.state, 2);
    wait_int(&s.state, 3);
    pool_destroy(pl);
    struct pool *bad;
    assert_int_equal(pool_create(0, &bad), SLUICE_ERR_INVALID);
    assert_int_equal(pool_create(POOL_MAX_THREADS + 1, &bad), SLUICE_ERR_INVALID);
}

static void test_large_elements_whole_takes(void **state)
{
    struct env *e = *state;
    /* Every element is external; replies of up to 1 MiB take three of them. */
    run_case(e, "range(40) | map(bytes, 300000)", false, true, 0, 1u << 20, true);
    /* A buffer bound below one element: the producer goes one element at a time. */
    run_case(e, "range(12) | map(bytes, 300000)", false, true, 100000, 1u << 20, true);
}

static void test_large_elements_contiguous_takes(void **state)
{
    struct env *e = *state;
    run_case(e, "range(25) | map(bytes, 300000)", false, false, 0, 1u << 20, true);
}

static void test_interleaved_with_compression_probes(void **state)
{
    struct env *e = *state;
    /* The pattern does not compress: after a few probes (copied, in the producer's chunk) a run
     * of elements is stored raw as external chunks, then probes again; order must hold. */
    run_case(e, "range(80) | map(bytes, 270000)", true, true, 0, 4u << 20, true);
    run_case(e, "range(50) | map(bytes, 270000)", true, false, 0, 4u << 20, true);
}

static void test_small_elements_stay_in_chunks(void **state)
{
    struct env *e = *state;
    run_case(e, "range(20000) | map(bytes, 100)", false, true, 0, 1u << 20, false);
    run_case(e, "range(300)", false, true, 0, 1u << 20, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_large_elements_whole_takes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_elements_contiguous_takes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_interleaved_with_compression_probes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_elements_stay_in_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_whole_pipeline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_pipeline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_data_sharding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_failed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_after_elements, setup, teardown),
        cmocka_unit_test_setup_teardown(test_distributed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_distributed_bad_plan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_distributed_seq_past_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_blocked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runs_at_first_take, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_waiting_for_snapshot_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_task_writes_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_tasks_share_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_while_parked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_park_and_retire, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
