/* megatron() end to end: datasets written by an independent writer that follows Megatron-LM's
 * published layout (tests/megatron/write_megatron.py: uint16 and int32 tokens, documents of one
 * and of several sequences, empty documents), read by `sluice run` and by a dispatcher and two
 * workers confined to the data's directory (--data-root).
 *
 * `sluice run` prints every document in order; distributed_epoch delivers the exact multiset of
 * documents, with the default split size, a given one and under global_shuffle; a checkpointed
 * read killed twice and resumed delivers every document exactly once; a prefix outside the data
 * roots is refused at registration; a damaged index fails the read naming the file and offset. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/proc.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_MS 20000
#define READ_MS 120000
#define SLOW_DOCS 4000

static char data_dir[512], outside_dir[512], root_arg[512];
static const char *dispatcher_flags[] = {"--worker-timeout-ms",
                                         "1000",
                                         "--client-timeout-ms",
                                         "6000",
                                         "--job-gc-timeout-ms",
                                         "2000",
                                         "--log-level",
                                         "warn",
                                         "--data-root",
                                         root_arg,
                                         NULL};
static const char *worker_flags[] = {"--data-root", root_arg, NULL};

/* Writes DIR/NAME.{idx,bin,txt} with the independent writer. */
static int write_dataset(const char *dir, const char *name, const char *dtype, int docs, int seed)
{
    char prefix[600], ndocs[16], nseed[16];
    snprintf(prefix, sizeof prefix, "%s/%s", dir, name);
    snprintf(ndocs, sizeof ndocs, "%d", docs);
    snprintf(nseed, sizeof nseed, "%d", seed);
    char *argv[] = {"/usr/bin/python3",
                    SLUICE_SOURCE_DIR "/tests/megatron/write_megatron.py",
                    prefix,
                    (char *)dtype,
                    ndocs,
                    nseed,
                    NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd(argv, 60000, &out, &err);
    if (rc != 0)
        fprintf(stderr, "write_megatron.py failed (%d): %s%s\n", rc, out ? out : "",
                err ? err : "");
    free(out);
    free(err);
    return rc == 0 ? 0 : -1;
}

static int setup(void **state)
{
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp_dir());
    snprintf(outside_dir, sizeof outside_dir, "%s/outside", tmp_dir());
    snprintf(root_arg, sizeof root_arg, "%s", data_dir);
    if (mkdir(data_dir, 0700) != 0 || mkdir(outside_dir, 0700) != 0)
        return -1;
    if (write_dataset(data_dir, "u16", "uint16", 600, 1) < 0 ||
        write_dataset(data_dir, "i32", "int32", 500, 2) < 0 ||
        write_dataset(data_dir, "slow", "uint16", SLOW_DOCS, 3) < 0 ||
        write_dataset(outside_dir, "far", "uint16", 10, 4) < 0)
        return -1;
    struct cluster *c = cluster_new(dispatcher_flags, worker_flags, 0, 2);
    if (!c)
        return -1;
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    int rc = cluster_free(*state);
    tmp_cleanup();
    return rc;
}

static char *expected(const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s.txt", data_dir, name);
    char *text = read_text_file(path);
    assert_true(strlen(text) > 0);
    return text;
}

static char *pipeline_of(const char *name, const char *tail)
{
    char *p = NULL;
    assert_true(asprintf(&p, "megatron(\"%s/%s\")%s", data_dir, name, tail ? tail : "") > 0);
    return p;
}

/* `sluice run` prints every document, in order, exactly as the writer wrote it. */
static void test_run(void **state)
{
    (void)state;
    static const char *const names[] = {"u16", "i32"};
    for (size_t i = 0; i < 2; i++) {
        char *p = pipeline_of(names[i], NULL);
        char *const argv[] = {(char *)bin_path("sluice"), "run", p, NULL};
        char *out = NULL, *err = NULL;
        int rc = run_cmd(argv, 30000, &out, &err);
        if (rc != 0)
            fprintf(stderr, "sluice run %s: %d: %s\n", p, rc, err);
        assert_int_equal(rc, 0);
        char *want = expected(names[i]);
        assert_string_equal(out, want);
        free(want);
        free(out);
        free(err);
        free(p);
    }
}

/* distributed_epoch: the exact multiset of documents, whatever the split size, shuffled too. */
static void test_distributed(void **state)
{
    struct cluster *c = *state;
    char *want = expected("u16");
    char *p = pipeline_of("u16", NULL);
    cluster_expect_read(c, want, p, "--mode", "distributed_epoch", NULL);
    cluster_expect_read(c, want, p, "--mode", "distributed_epoch", "--split-size", "7", NULL);
    free(p);
    p = pipeline_of("u16", " | global_shuffle(11)");
    cluster_expect_read(c, want, p, "--mode", "distributed_epoch", NULL);
    free(p);
    free(want);
    want = expected("i32");
    p = pipeline_of("i32", NULL);
    cluster_expect_read(c, want, p, "--mode", "distributed_epoch", "--split-size", "64", NULL);
    /* parallel_epochs: each worker's whole copy. */
    char *out =
        cluster_run(c, 0, NULL, "read", p, "--mode", "parallel_epochs", "--format", "count", NULL);
    assert_int_equal(strtol(out, NULL, 10), 2 * 500);
    free(out);
    free(p);
    free(want);
}

/* A checkpointed read killed twice mid-way and resumed delivers every document exactly once. */
static void test_resume(void **state)
{
    struct cluster *c = *state;
    char ck[600], out[600];
    snprintf(ck, sizeof ck, "%s/mg.ck", tmp_dir());
    snprintf(out, sizeof out, "%s/mg.out", tmp_dir());
    char *p = pipeline_of("slow", " | map(wait_us, 500)");
    char *want = expected("slow");
    char *text =
        cluster_resumed_read(c, p, "40", "100", ck, out, (long long)strlen(want), 2, READ_MS);
    assert_int_equal(count_lines(text), SLOW_DOCS);
    char *got = sorted_lines(text), *sorted = sorted_lines(want);
    assert_string_equal(got, sorted);
    free(got);
    free(sorted);
    free(text);
    free(want);
    free(p);
}

/* A prefix outside the data roots is refused when the dataset is registered; a damaged index
 * fails the read with the file and offset. */
static void test_refusals(void **state)
{
    struct cluster *c = *state;
    char p[700], want[1600], resolved[600];
    snprintf(p, sizeof p, "megatron(\"%s/far\")", outside_dir);
    char *err = NULL;
    char *out = cluster_run(c, 1, &err, "read", p, "--mode", "distributed_epoch", NULL);
    assert_true(realpath(outside_dir, resolved) != NULL);
    snprintf(want, sizeof want, "megatron(\"%s/far\"): %s/far.idx is outside the data roots (",
             outside_dir, resolved);
    assert_contains(err, want);
    free(out);
    free(err);

    /* A copy of u16 whose bin lost its last byte: the index's sizes disagree with it. */
    char src[600], dst[600];
    snprintf(src, sizeof src, "%s/u16.bin", data_dir);
    size_t bin_len = 0, idx_len = 0;
    uint8_t *bin = file_read(src, &bin_len);
    snprintf(dst, sizeof dst, "%s/cut.bin", data_dir);
    file_write(dst, bin, bin_len - 1);
    free(bin);
    snprintf(src, sizeof src, "%s/u16.idx", data_dir);
    uint8_t *idx = file_read(src, &idx_len);
    snprintf(dst, sizeof dst, "%s/cut.idx", data_dir);
    file_write(dst, idx, idx_len);
    free(idx);
    snprintf(p, sizeof p, "megatron(\"%s/cut\")", data_dir);
    err = NULL;
    out = cluster_run(c, 1, &err, "read", p, "--mode", "distributed_epoch", NULL);
    snprintf(want, sizeof want, "%s/cut.idx: offset ", data_dir);
    assert_contains(err, want);
    snprintf(want, sizeof want, ") does not end where %s/cut.bin does (%zu bytes)", data_dir,
             bin_len - 1);
    assert_contains(err, want);
    free(out);
    free(err);

    /* A copy of u16 with one sequence moved by a token: the header checks pass, so the
     * dispatcher plans it, and the worker that reads the document fails the read. */
    snprintf(src, sizeof src, "%s/u16.bin", data_dir);
    bin = file_read(src, &bin_len);
    snprintf(dst, sizeof dst, "%s/gap.bin", data_dir);
    file_write(dst, bin, bin_len);
    free(bin);
    snprintf(src, sizeof src, "%s/u16.idx", data_dir);
    idx = file_read(src, &idx_len);
    uint64_t nseqs = 0;
    for (int i = 7; i >= 0; i--)
        nseqs = nseqs << 8 | idx[18 + i];
    size_t at = 34 + 4 * (size_t)nseqs + 8 * (size_t)(nseqs / 2);
    assert_true(at + 8 <= idx_len);
    idx[at] = (uint8_t)(idx[at] + 2);
    snprintf(dst, sizeof dst, "%s/gap.idx", data_dir);
    file_write(dst, idx, idx_len);
    free(idx);
    snprintf(p, sizeof p, "megatron(\"%s/gap\")", data_dir);
    err = NULL;
    out = cluster_run(c, 1, &err, "read", p, "--mode", "distributed_epoch", NULL);
    snprintf(want, sizeof want, "%s/gap.idx: offset ", data_dir);
    assert_contains(err, want);
    snprintf(want, sizeof want, "of %s/gap.bin, but sequence ", data_dir);
    assert_contains(err, want);
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run),
        cmocka_unit_test(test_distributed),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
