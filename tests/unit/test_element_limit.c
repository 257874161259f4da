/* The pipeline's element limit (struct pipe_limits, a worker's --max-element-bytes): bytes(N)
 * refused from N before it allocates, a batch refused as it grows (the general and the
 * fixed-width path), a text line refused as it is read, a map without a known size checked on
 * its output, the limit reaching a prefetch thread, and elements at the limit or without a
 * limit passing. Each failure is checked for its exact message. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/element.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct sluice_registry *reg;

/* Runs text with the limit (0: pipe_open, no limit) to its end or first failure. Returns the
 * number of elements before it, and the failure's code and message in *rc and msg (rc 0 at a
 * clean end). The largest element seen goes to *largest. */
static long run(const char *text, uint64_t limit, int *rc, char *msg, size_t msglen,
                uint64_t *largest)
{
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    if (pipe_parse(text, &spec, err, sizeof err) != 0)
        fail_msg("%s: %s", text, err);
    struct pipe_run *r = NULL;
    struct pipe_limits lim = {.max_element_bytes = limit};
    int orc = limit ? pipe_open_limited(spec, reg, &lim, &r, err, sizeof err)
                    : pipe_open(spec, reg, &r, err, sizeof err);
    if (orc != 0)
        fail_msg("%s: %s", text, err);
    pipe_spec_free(spec);
    struct sluice_element e;
    pipe_elem_init(&e);
    long n = 0;
    int k;
    if (largest)
        *largest = 0;
    while ((k = pipe_run_next(r, &e)) == 1) {
        n++;
        if (largest && pipe_elem_size(&e) > *largest)
            *largest = pipe_elem_size(&e);
    }
    *rc = k;
    snprintf(msg, msglen, "%s", k < 0 ? r->ctx.err : "");
    pipe_elem_release(&e);
    pipe_run_free(r);
    return n;
}

static void expect_fail(const char *text, uint64_t limit, long before, const char *want)
{
    int rc;
    char msg[SLUICE_ERRMSG_SIZE];
    long n = run(text, limit, &rc, msg, sizeof msg, NULL);
    if (rc != SLUICE_ERR_LIMIT)
        fail_msg("%s: rc %d (%s), expected the limit", text, rc, msg);
    assert_string_equal(msg, want);
    assert_int_equal(n, before);
}

static void expect_ok(const char *text, uint64_t limit, long count, uint64_t largest)
{
    int rc;
    char msg[SLUICE_ERRMSG_SIZE];
    uint64_t big;
    long n = run(text, limit, &rc, msg, sizeof msg, &big);
    if (rc != 0)
        fail_msg("%s: rc %d: %s", text, rc, msg);
    assert_int_equal(n, count);
    assert_int_equal(big, largest);
}

static void test_bytes(void **unused)
{
    (void)unused;
    expect_fail("range(3) | map(bytes, 1073741824)", 268435456, 0,
                "map(bytes): element of 1073741824 bytes is over the worker's limit of 268435456 "
                "(--max-element-bytes)");
    expect_ok("range(3) | map(bytes, 1000)", 1000, 3, 1000); /* at the limit */
    expect_fail("range(3) | map(bytes, 1001)", 1000, 0,
                "map(bytes): element of 1001 bytes is over the worker's limit of 1000 "
                "(--max-element-bytes)");
    expect_ok("range(3) | map(bytes, 5000)", 0, 3, 5000); /* no limit */
}

static void test_batch(void **unused)
{
    (void)unused;
    /* Each bytes element adds its 100 bytes and 8 of offset: the third goes past 250. */
    expect_fail("range(10) | map(bytes, 100) | batch(4)", 250, 0,
                "batch: element of at least 324 bytes is over the worker's limit of 250 "
                "(--max-element-bytes)");
    expect_ok("range(10) | map(bytes, 100) | batch(4)", 432, 3, 432);
    /* Fixed-width scalars take the fast path: the 13th int64 goes past 100 bytes. */
    expect_fail("range(100) | batch(50)", 100, 0,
                "batch: element of at least 104 bytes is over the worker's limit of 100 "
                "(--max-element-bytes)");
    expect_ok("range(100) | batch(12)", 100, 9, 96);
    /* A full batch under the limit, then a second over it: the first is delivered. */
    expect_fail("range(4) | map(bytes, 100) | batch(2) | batch(2)", 300, 0,
                "batch: element of at least 432 bytes is over the worker's limit of 300 "
                "(--max-element-bytes)");
}

static void test_map_output_checked(void **unused)
{
    (void)unused;
    /* identity has no size known in advance: its output is checked. */
    expect_fail("list(\"abcdefghij\", \"k\") | map(identity)", 5, 0,
                "map(identity): element of 10 bytes is over the worker's limit of 5 "
                "(--max-element-bytes)");
    expect_ok("list(\"abcde\", \"k\") | map(identity)", 5, 2, 5);
}

static void test_prefetch_thread(void **unused)
{
    (void)unused;
    expect_fail("range(3) | map(bytes, 2000) | prefetch(2)", 1000, 0,
                "map(bytes): element of 2000 bytes is over the worker's limit of 1000 "
                "(--max-element-bytes)");
}

static void test_lines(void **unused)
{
    (void)unused;
    char dir[] = "/tmp/sluice-element-limit-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], text[300];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("short\n", f);
    for (int i = 0; i < 100000; i++)
        fputc('x', f);
    fputs("\nend\n", f);
    fclose(f);
    snprintf(text, sizeof text, "lines(\"%s\")", path);
    int rc;
    char msg[SLUICE_ERRMSG_SIZE];
    long n = run(text, 4096, &rc, msg, sizeof msg, NULL);
    assert_int_equal(rc, SLUICE_ERR_LIMIT);
    assert_int_equal(n, 1);
    char want[512];
    snprintf(want, sizeof want,
             "%s: offset 6: element of 100000 bytes is over the worker's limit of 4096 "
             "(--max-element-bytes)",
             path);
    assert_string_equal(msg, want);
    expect_ok(text, 100000, 3, 100000);

    /* A line longer than the read buffer is refused as it grows, before it is complete. */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("short\n", f);
    for (int i = 0; i < 600000; i++)
        fputc('y', f);
    fputs("\n", f);
    fclose(f);
    n = run(text, 300000, &rc, msg, sizeof msg, NULL);
    assert_int_equal(rc, SLUICE_ERR_LIMIT);
    assert_int_equal(n, 1);
    snprintf(want, sizeof want, "%s: offset 6: element of at least ", path);
    assert_memory_equal(msg, want, strlen(want));
    assert_non_null(
        strstr(msg, " bytes is over the worker's limit of 300000 (--max-element-bytes)"));
    expect_ok(text, 600000, 2, 600000);
    unlink(path);
    rmdir(dir);
}

static int setup(void **unused)
{
    (void)unused;
    return pipe_registry_new(&reg);
}

static int teardown(void **unused)
{
    (void)unused;
    pipe_registry_free(reg);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_map_output_checked),
        cmocka_unit_test(test_prefetch_thread),
        cmocka_unit_test(test_lines),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
