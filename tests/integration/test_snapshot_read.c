/* The snapshot("DIR") source through the real binaries: `sluice run`, distributed_epoch and
 * parallel_epochs reads of a snapshot written by the chunk writer, a distributed_epoch read that
 * starts while chunks are still missing and finishes once they are committed, a failed save, and
 * a directory that holds no snapshot. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/text.h"
#include "lib/tmp.h"
#include "pipeline/element.h"
#include "pipeline/snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NCHUNKS 5

static const char *const short_timeouts[] = {"--worker-timeout-ms", "1000", NULL};

struct fixture {
    struct cluster c;
    char dir[512];
};

static int setup(void **state)
{
    static int n;
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "%s/snap-%d", tmp_dir(), n++);
    f->c.dispatcher_args = short_timeouts;
    if (cluster_start_dispatcher(&f->c, 0, 0) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int rc = cluster_stop(&f->c);
    free(f);
    return rc;
}

/* Chunk i holds 100 * i .. 100 * i + i * 7 (chunk 0 is empty). */
static int chunk_len(uint64_t i)
{
    return (int)i * 7;
}

static void write_meta(struct fixture *f)
{
    struct snap_meta m;
    memset(&m, 0, sizeof m);
    m.format = SNAP_FORMAT;
    snprintf(m.dataset_id, sizeof m.dataset_id, "42");
    m.pipeline = "range(10)";
    m.chunks = NCHUNKS;
    char err[SLUICE_ERRMSG_SIZE];
    if (snap_meta_write(f->dir, &m, err, sizeof err) != 0)
        fail_msg("%s", err);
}

static void write_chunk(struct fixture *f, uint64_t i)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct snap_writer *w;
    if (snap_writer_open(f->dir, i, &w, err, sizeof err) != 0)
        fail_msg("%s", err);
    struct sluice_element e;
    pipe_elem_init(&e);
    assert_int_equal(pipe_elem_resize(&e, 1), 0);
    for (int j = 0; j < chunk_len(i); j++) {
        assert_int_equal(pipe_tensor_set_i64(&e.t[0], 100 * (int64_t)i + j), 0);
        assert_int_equal(snap_writer_add(w, &e, err, sizeof err), 0);
    }
    pipe_elem_release(&e);
    if (snap_writer_commit(w, err, sizeof err) != 0)
        fail_msg("%s", err);
}

static void finalize(struct fixture *f)
{
    char err[SLUICE_ERRMSG_SIZE];
    if (snap_finalize(f->dir, NCHUNKS, err, sizeof err) != 0)
        fail_msg("%s", err);
}

/* The snapshot's elements, one per line, each repeated times times, sorted as strings. */
static char *expected(int times)
{
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (uint64_t i = 0; i < NCHUNKS; i++)
        for (int j = 0; j < chunk_len(i); j++)
            for (int k = 0; k < times; k++)
                len += (size_t)snprintf(text + len, cap - len, "%d\n", (int)(100 * i) + j);
    char *sorted = sorted_lines(text);
    free(text);
    return sorted;
}

static void pipeline_text(const struct fixture *f, char *out, size_t len)
{
    snprintf(out, len, "snapshot(\"%s\")", f->dir);
}

static void test_run_local(void **state)
{
    struct fixture *f = *state;
    write_meta(f);
    for (uint64_t i = 0; i < NCHUNKS; i++)
        write_chunk(f, i);
    finalize(f);
    char text[600];
    pipeline_text(f, text, sizeof text);
    char *argv[] = {(char *)bin_path("sluice"), "run", text, NULL};
    char *out = NULL, *err = NULL;
    assert_int_equal(run_cmd(argv, 60000, &out, &err), 0);
    /* In chunk order, each chunk's elements in order. */
    char want[4096];
    size_t len = 0;
    for (uint64_t i = 0; i < NCHUNKS; i++)
        for (int j = 0; j < chunk_len(i); j++)
            len += (size_t)snprintf(want + len, sizeof want - len, "%d\n", (int)(100 * i) + j);
    assert_string_equal(out, want);
    free(out);
    free(err);
}

static void test_distributed_and_parallel(void **state)
{
    struct fixture *f = *state;
    write_meta(f);
    for (uint64_t i = 0; i < NCHUNKS; i++)
        write_chunk(f, i);
    finalize(f);
    assert_true(cluster_add_worker(&f->c) >= 0);
    assert_true(cluster_add_worker(&f->c) >= 0);
    char text[600];
    pipeline_text(f, text, sizeof text);

    char *out = NULL, *err = NULL;
    int rc = cluster_cli(&f->c, &out, &err, "read", text, "--mode", "distributed_epoch", NULL);
    if (rc != 0)
        fail_msg("read: exit %d: %s", rc, err);
    char *got = sorted_lines(out), *want = expected(1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    free(err);

    rc = cluster_cli(&f->c, &out, &err, "read", text, NULL);
    if (rc != 0)
        fail_msg("read: exit %d: %s", rc, err);
    got = sorted_lines(out);
    want = expected(2);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    free(err);
}

/* A distributed_epoch read that starts with chunks 2 and 4 missing: the workers wait for them,
 * and the read ends with every element once they are committed. */
static void test_read_during_save(void **state)
{
    struct fixture *f = *state;
    write_meta(f);
    write_chunk(f, 0);
    write_chunk(f, 1);
    write_chunk(f, 3);
    assert_true(cluster_add_worker(&f->c) >= 0);
    assert_true(cluster_add_worker(&f->c) >= 0);
    char text[600];
    pipeline_text(f, text, sizeof text);
    struct proc r;
    assert_int_equal(cluster_cli_spawn(&f->c, &r, "read", text, "--mode", "distributed_epoch",
                                       "--timeout-ms", "30000", NULL),
                     0);
    usleep(1500 * 1000);
    /* Still reading: the missing chunks hold it up. */
    assert_int_equal(proc_wait(&r, 0), -2);
    write_chunk(f, 2);
    write_chunk(f, 4);
    finalize(f);
    char *out = proc_read_all(&r, 30000);
    int rc = proc_wait(&r, 5000);
    if (rc != 0) {
        char *log = read_text_file(r.log);
        fail_msg("read: exit %d: %s", rc, log);
    }
    char *got = sorted_lines(out), *want = expected(1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
}

static void test_failed_save(void **state)
{
    struct fixture *f = *state;
    write_meta(f);
    write_chunk(f, 0);
    write_chunk(f, 1);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(snap_mark_failed(f->dir, "worker 2: No space left on device", err, sizeof err),
                     0);
    char text[600], want[1024];
    pipeline_text(f, text, sizeof text);
    snprintf(want, sizeof want, "snapshot %s: the save failed: worker 2: No space left on device",
             f->dir);

    char *argv[] = {(char *)bin_path("sluice"), "run", text, NULL};
    char *out = NULL, *errout = NULL;
    assert_int_equal(run_cmd(argv, 60000, &out, &errout), 1);
    assert_string_equal(out, "100\n101\n102\n103\n104\n105\n106\n");
    if (!strstr(errout, want))
        fail_msg("stderr: %s", errout);
    free(out);
    free(errout);

    assert_true(cluster_add_worker(&f->c) >= 0);
    int rc = cluster_cli(&f->c, &out, &errout, "read", text, "--mode", "distributed_epoch",
                         "--timeout-ms", "30000", NULL);
    assert_int_equal(rc, 1);
    if (!strstr(errout, want))
        fail_msg("stderr: %s", errout);
    free(out);
    free(errout);
}

static void test_not_a_snapshot(void **state)
{
    struct fixture *f = *state;
    char text[600], want[1024];
    pipeline_text(f, text, sizeof text);
    snprintf(want, sizeof want, "snapshot %s: not a snapshot (no snapshot.json)", f->dir);
    char *argv[] = {(char *)bin_path("sluice"), "run", text, NULL};
    char *out = NULL, *err = NULL;
    assert_int_equal(run_cmd(argv, 60000, &out, &err), 1);
    if (!strstr(err, want))
        fail_msg("run: stderr: %s", err);
    free(out);
    free(err);

    assert_int_equal(cluster_cli(&f->c, &out, &err, "register", text, NULL), 1);
    if (!strstr(err, want))
        fail_msg("register: stderr: %s", err);
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_run_local, setup, teardown),
        cmocka_unit_test_setup_teardown(test_distributed_and_parallel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_during_save, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_save, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_snapshot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
