/* A worker task whose elements are large enough to go out as external chunks (their tensor's
 * block is taken over instead of copied), with and without compression probes in between (which
 * put some large elements through the copying path, so both kinds of record interleave), drained
 * with whole-chunk takes and with contiguous takes, against the same pipeline run locally: every
 * element arrives, once, in order, byte for byte. Every wait is bounded. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/error.h"
#include "pipeline/codec.h"
#include "pipeline/element.h"
#include "pipeline/iter.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "worker/task.h"

#define WAIT_LIMIT_MS 20000

struct env {
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t poll;
    struct sluice_registry *reg;
    struct pipe_buf scratch;
};

static void on_wake(uv_async_t *a)
{
    (void)a;
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
    assert_int_equal(uv_timer_init(&e->loop, &e->poll), 0);
    assert_int_equal(uv_timer_start(&e->poll, on_poll, 2, 2), 0);
    assert_int_equal(pipe_registry_new(&e->reg), 0);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    uv_close((uv_handle_t *)&e->wake, NULL);
    uv_close((uv_handle_t *)&e->poll, NULL);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    pipe_registry_free(e->reg);
    pipe_buf_release(&e->scratch);
    free(e);
    return 0;
}

static struct pipe_spec *parse(const char *text)
{
    struct pipe_spec *spec = NULL;
    char err[256];
    if (pipe_parse(text, &spec, err, sizeof err) != 0)
        fail_msg("parse '%s': %s", text, err);
    return spec;
}

/* The pipeline's elements, run locally, encoded as one batch: what the task must deliver. */
static struct pipe_buf expected(struct env *e, const char *text, size_t *count)
{
    struct pipe_spec *spec = parse(text);
    struct pipe_run *run = NULL;
    char err[256];
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
static void drain(struct env *e, struct task *t, bool whole, uint64_t max_bytes,
                  struct pipe_buf *got, struct drain_stats *st)
{
    memset(st, 0, sizeof *st);
    uint64_t t0 = uv_hrtime();
    for (;;) {
        assert_true((uv_hrtime() - t0) / 1000000u < WAIT_LIMIT_MS);
        struct task_take tk;
        int rc = whole ? task_take_whole(t, 1000, max_bytes, &e->scratch, &tk)
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
        .threads = 1,
        .reg = e->reg,
        .wake = &e->wake,
        .buffer_bytes = buffer_bytes,
    };
    struct task *t = NULL;
    char err[256];
    assert_int_equal(task_start(&cfg, parse(text), &t, err, sizeof err), 0);
    struct pipe_buf got = {0};
    struct drain_stats st;
    drain(e, t, whole, max_bytes, &got, &st);
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
        char msg[256];
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
