/* The binaries given the dispatcher as a list of replica addresses: a worker, `sluice read` and
 * `sluice status` whose list starts with a closed port find the dispatcher at the next address,
 * and a malformed list is a usage error (exit 2) with the parser's message. The cluster helpers
 * pass their own --dispatcher first; a later one replaces it, as for any repeated option. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/net.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_list_with_a_dead_address(void **state)
{
    (void)state;
    struct cluster c;
    memset(&c, 0, sizeof c);
    int ports[2]; /* the dispatcher's, and one nobody listens on */
    assert_int_equal(free_ports(ports, 2), 0);
    int port = ports[0], dead = ports[1];
    char list[96];
    snprintf(list, sizeof list, "sluice://127.0.0.1:%d,127.0.0.1:%d", dead, port);
    const char *const worker_args[] = {"--dispatcher", list, NULL};
    c.worker_args = worker_args;
    assert_int_equal(cluster_start_dispatcher(&c, port, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    cluster_wait_registered(&c);

    char *out = cluster_run(&c, 0, NULL, "read", "--dispatcher", list, "range(100)", "--mode",
                            "distributed_epoch", "--format", "count", NULL);
    assert_string_equal(out, "100\n");
    free(out);
    out = cluster_run(&c, 0, NULL, "status", "--dispatcher", list, "--json", NULL);
    json_error_t jerr;
    json_t *st = json_loads(out, 0, &jerr);
    assert_non_null(st);
    assert_int_equal(json_array_size(json_object_get(st, "workers")), 1);
    json_decref(st);
    free(out);

    char *err = NULL;
    out = cluster_run(&c, 2, &err, "status", "--dispatcher", "127.0.0.1:1,,127.0.0.1:2", NULL);
    assert_string_equal(err, "sluice: dispatcher: bad address list '127.0.0.1:1,,127.0.0.1:2': "
                             "address 2 is empty\n");
    free(out);
    free(err);
    assert_int_equal(cluster_stop(&c), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_with_a_dead_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
