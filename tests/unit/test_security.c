/* security_ctx_new's checks of tls_worker_name: only a reader with TLS takes it, and only a DNS
 * name. (A name that verifies is exercised end to end in integration/test_tls.) */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sluice/sluice.h"
#include "common/security.h"

#include <string.h>

static void expect_refused(const struct sluice_security_options *o, int sides, const char *want)
{
    struct security_ctx *s = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(security_ctx_new(o, sides, &s, err, sizeof err), SLUICE_ERR_INVALID);
    assert_null(s);
    assert_string_equal(err, want);
}

static void test_worker_name_refusals(void **unused)
{
    (void)unused;
    struct sluice_security_options o = {.tls_worker_name = "w.example"};
    expect_refused(&o, SECURITY_CLIENT, "tls-worker-name w.example: needs TLS (--tls-ca)");
    expect_refused(&o, SECURITY_CLIENT | SECURITY_SERVER,
                   "tls-worker-name: only a reader verifies workers; a server takes no "
                   "--tls-worker-name");
    expect_refused(&o, SECURITY_SERVER,
                   "tls-worker-name: only a reader verifies workers; a server takes no "
                   "--tls-worker-name");
}

static void test_worker_name_absent(void **unused)
{
    (void)unused;
    /* NULL and "" both mean: verify workers against the address they advertise. */
    const char *names[] = {NULL, ""};
    for (size_t i = 0; i < 2; i++) {
        struct sluice_security_options o = {.tls_worker_name = names[i]};
        struct security_ctx *s = NULL;
        char err[SLUICE_ERRMSG_SIZE] = "";
        assert_int_equal(security_ctx_new(&o, SECURITY_CLIENT, &s, err, sizeof err), 0);
        assert_non_null(s);
        assert_string_equal(s->tls_worker_name, "");
        security_ctx_free(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_name_refusals),
        cmocka_unit_test(test_worker_name_absent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
