/* Mixing datasets through the service: a real dispatcher and two workers on 127.0.0.1.
 *
 *   - a parallel_epochs read of a mix gets from each worker exactly the sequence `sluice run`
 *     prints (the whole mix batched into one element, so each copy's order is visible);
 *   - a distributed_epoch read of a mix is refused with the one-line message that says what to
 *     use instead. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 70 elements at most, so batch(100) makes one element of a whole copy. */
static const char *const mix = "sample_from_datasets([(range(40)), (range(100, 120) | map(add, "
                               "1000)), (range(200, 210))], [0.6, 0.3, 0.1], 5) | batch(100)";

static void test_parallel_epochs_copies(void **state)
{
    struct cluster *c = *state;
    char *const argv[] = {(char *)bin_path("sluice"), "run", (char *)mix, NULL};
    char *out = NULL, *err = NULL;
    assert_int_equal(run_cmd(argv, 60000, &out, &err), 0);
    /* One line: the whole mixed sequence, the inputs' elements interleaved. */
    assert_non_null(strstr(out, "[0, "));
    assert_non_null(strstr(out, "1100"));
    assert_non_null(strstr(out, "209"));
    assert_int_equal(strchr(out, '\n') - out + 1, (long)strlen(out));
    size_t n = strlen(out);
    char *want = malloc(2 * n + 1);
    assert_non_null(want);
    memcpy(want, out, n);
    memcpy(want + n, out, n + 1);
    cluster_expect_read(c, want, mix, "--mode", "parallel_epochs", NULL);
    free(want);
    free(out);
    free(err);
}

static void test_distributed_epoch_refused(void **state)
{
    struct cluster *c = *state;
    char *err = NULL;
    char *out = cluster_run(c, 1, &err, "read", mix, "--mode", "distributed_epoch", NULL);
    if (!strstr(err, "sample_from_datasets is not supported in distributed_epoch yet: read it "
                     "with parallel_epochs (each worker runs the whole mix), or read its inputs "
                     "as separate distributed_epoch jobs"))
        fail_msg("stderr: %s", err);
    free(out);
    free(err);
}

static int setup(void **state)
{
    return (*state = cluster_new(NULL, NULL, 0, 2)) ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parallel_epochs_copies),
        cmocka_unit_test(test_distributed_epoch_refused),
    };
    return cmocka_run_group_tests(tests, setup, cluster_teardown);
}
