/* Few large splits spread over the workers: four files read in distributed_epoch by two workers
 * whose lease queues could each hold all four. Each worker gets its share (guided
 * self-scheduling), so both serve elements, and every line arrives exactly once. Without the
 * share the first worker to ask took all four files and the other sat idle. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cluster.h"
#include "lib/scrape.h"
#include "lib/tmp.h"

#define FILES 4
#define LINES 300

static const char *const worker_args[] = {"--metrics-port", "0", NULL};

static int setup(void **state)
{
    for (int f = 0; f < FILES; f++) {
        char path[600];
        snprintf(path, sizeof path, "%s/share-%d.txt", tmp_dir(), f);
        FILE *fp = fopen(path, "w");
        if (!fp)
            return -1;
        for (int i = 0; i < LINES; i++)
            fprintf(fp, "%d\n", f * LINES + i);
        fclose(fp);
    }
    return (*state = cluster_new(NULL, worker_args, 0, 2)) ? 0 : -1;
}

static int teardown(void **state)
{
    int rc = cluster_teardown(state);
    tmp_cleanup();
    return rc;
}

static void test_both_workers_serve(void **state)
{
    struct cluster *c = *state;
    cluster_wait_registered(c);
    char pipeline[800];
    /* Paced, so that a worker holding all four files would still be reading when the other
     * asks. */
    snprintf(pipeline, sizeof pipeline, "lines(\"%s/share-*.txt\") | map(wait_us, 1000)",
             tmp_dir());
    char *out = cluster_run(c, 0, NULL, "read", pipeline, "--mode", "distributed_epoch", NULL);
    /* Every line once. */
    static char seen[FILES * LINES];
    memset(seen, 0, sizeof seen);
    size_t n = 0;
    for (char *s = strtok(out, "\n"); s; s = strtok(NULL, "\n")) {
        long v = strtol(s, NULL, 10);
        assert_true(v >= 0 && v < FILES * LINES);
        assert_int_equal(seen[v], 0);
        seen[v] = 1;
        n++;
    }
    assert_int_equal(n, FILES * LINES);
    free(out);
    /* Each worker served at least one whole file. */
    double total = 0;
    for (int i = 0; i < c->nworkers; i++) {
        struct expo e;
        cluster_scrape_worker(c, i, &e);
        double v = -1;
        assert_int_equal(expo_value(&e, "sluice_worker_elements_served_total", "", &v), 0);
        expo_free(&e);
        printf("    worker %d served %.0f elements\n", i, v);
        assert_true(v >= LINES);
        total += v;
    }
    /* A few more than the lines: the counter also counts each split's end. */
    assert_true(total >= FILES * LINES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_workers_serve),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
