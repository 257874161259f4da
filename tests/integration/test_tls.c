/* TLS end to end with the real binaries on 127.0.0.1: a dispatcher, two workers and `sluice read`
 * with mutual TLS on every kind of connection (client to dispatcher, worker to dispatcher, client
 * to worker) read exactly the elements they should, small and 1 MiB ones; and every way TLS must
 * fail does, with exit status 1 and the TLS reason: a CA that did not sign the server's
 * certificate, an expired certificate, a certificate for another host or address, a plain client
 * on a TLS server (which keeps serving the others), a TLS client on a plain server, and files
 * that are missing, mismatched or not PEM. The certificates are made at run time by
 * make_certs.sh. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/text.h"
#include "lib/tls.h"
#include "lib/tmp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --tls-cert, --tls-key, --tls-ca for certificate NAME and CA ca (NULL for none); argv points
 * into the struct. */
struct flags {
    const char *argv[8];
    char cert[512], key[512], ca[512];
};

static void tls_flags(struct flags *f, const char *name, const char *ca)
{
    int n = 0;
    if (name) {
        snprintf(f->cert, sizeof f->cert, "%s/%s.pem", tls_certs_dir(), name);
        snprintf(f->key, sizeof f->key, "%s/%s.key", tls_certs_dir(), name);
        f->argv[n++] = "--tls-cert";
        f->argv[n++] = f->cert;
        f->argv[n++] = "--tls-key";
        f->argv[n++] = f->key;
    }
    if (ca) {
        snprintf(f->ca, sizeof f->ca, "%s/%s.pem", tls_certs_dir(), ca);
        f->argv[n++] = "--tls-ca";
        f->argv[n++] = f->ca;
    }
    f->argv[n] = NULL;
}

static struct flags mutual; /* node.pem, node.key, ca.pem: every server and client below */

/* Runs `sluice CMD --dispatcher ADDR ARGS... [extra flags]` (NULL-terminated ARGS), bounded. */
static int cli(char **out, char **err, const char *addr, const struct flags *extra, const char *cmd,
               ...)
{
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)bin_path("sluice");
    argv[n++] = (char *)cmd;
    argv[n++] = "--dispatcher";
    argv[n++] = (char *)addr;
    va_list ap;
    va_start(ap, cmd);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 30)
        argv[n++] = (char *)a;
    va_end(ap);
    for (int i = 0; extra && extra->argv[i]; i++)
        argv[n++] = (char *)extra->argv[i];
    argv[n] = NULL;
    return run_cmd(argv, 60000, out, err);
}

/* ---- a TLS cluster ----------------------------------------------------------------------------
 */

static int cluster_setup(void **state)
{
    struct cluster *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -1;
    c->dispatcher_args = mutual.argv;
    c->worker_args = mutual.argv;
    if (cluster_start_dispatcher(c, 0, 0) != 0 || cluster_add_worker(c) < 0 ||
        cluster_add_worker(c) < 0)
        return -1;
    *state = c;
    return 0;
}

/* Reads with TLS and asserts status 0 and the sorted output. */
static void read_expect(struct cluster *c, const char *want, const char *pipeline, const char *mode)
{
    char *out = NULL, *err = NULL;
    int rc = cli(&out, &err, c->dispatcher.addr, &mutual, "read", pipeline, "--mode", mode,
                 "--timeout-ms", "30000", NULL);
    if (rc != 0)
        fail_msg("read %s (%s) failed with %d: %s", pipeline, mode, rc, err);
    char *got = sorted_lines(out);
    assert_string_equal(got, want);
    free(got);
    free(out);
    free(err);
}

static void test_parallel_epochs(void **state)
{
    struct cluster *c = *state;
    char *want = expected_range(1000, 2);
    read_expect(c, want, "range(1000)", "parallel_epochs");
    free(want);
}

static void test_distributed_epoch(void **state)
{
    struct cluster *c = *state;
    char *want = expected_range(1000, 1);
    read_expect(c, want, "range(1000)", "distributed_epoch");
    free(want);
}

/* 1 MiB elements: frames far larger than a TLS record, decrypted straight into the client's
 * buffers; the bytes must be exactly those `sluice run` makes locally. */
static void test_large_elements(void **state)
{
    struct cluster *c = *state;
    static const char pipeline[] = "range(12) | map(bytes, 1048576)";
    char *argv[] = {(char *)bin_path("sluice"), "run", (char *)pipeline, NULL};
    char *local = NULL;
    assert_int_equal(run_cmd(argv, 60000, &local, NULL), 0);
    assert_int_equal(count_lines(local), 12);
    char *want = sorted_lines(local);
    read_expect(c, want, pipeline, "distributed_epoch");
    /* Each worker's full copy, through both at once. */
    size_t len = strlen(local);
    char *twice = malloc(2 * len + 1);
    assert_non_null(twice);
    memcpy(twice, local, len);
    memcpy(twice + len, local, len + 1);
    char *want2 = sorted_lines(twice);
    read_expect(c, want2, pipeline, "parallel_epochs");
    free(want2);
    free(twice);
    free(want);
    free(local);
}

/* A client that trusts another CA: the dispatcher's certificate does not verify. */
static void test_wrong_ca(void **state)
{
    struct cluster *c = *state;
    struct flags f;
    tls_flags(&f, "node", "ca2");
    char *out = NULL, *err = NULL;
    int rc =
        cli(&out, &err, c->dispatcher.addr, &f, "read", "range(10)", "--timeout-ms", "3000", NULL);
    assert_int_equal(rc, 1);
    assert_string_equal(out, "");
    assert_contains(err, "tls: certificate verify failed: unable to get local issuer certificate");
    free(out);
    free(err);
}

/* A plain client on the TLS dispatcher is told at once that TLS is required, the server logs it
 * with the client's address, and keeps serving TLS clients. */
static void test_plain_client(void **state)
{
    struct cluster *c = *state;
    char *out = NULL, *err = NULL;
    int rc = cli(&out, &err, c->dispatcher.addr, NULL, "read", "range(10)", "--timeout-ms", "10000",
                 NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, "tls: this server requires TLS (give the client --tls-ca)");
    free(out);
    free(err);
    char *want = expected_range(10, 2);
    read_expect(c, want, "range(10)", "parallel_epochs");
    free(want);
    char *log = read_text_file(c->dispatcher.log);
    assert_contains(log, "rpc: 127.0.0.1:");
    assert_contains(log, ": tls: the peer does not speak TLS (a client without --tls-ca?)");
    free(log);
}

/* A client with the CA but without a certificate, on servers that require one. */
static void test_no_client_certificate(void **state)
{
    struct cluster *c = *state;
    struct flags f;
    tls_flags(&f, NULL, "ca");
    char *out = NULL, *err = NULL;
    int rc =
        cli(&out, &err, c->dispatcher.addr, &f, "read", "range(10)", "--timeout-ms", "3000", NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, "tls: refused by the peer: tlsv13 alert certificate required");
    free(out);
    free(err);
    char *log = read_text_file(c->dispatcher.log);
    assert_contains(log, "tls: handshake failed: peer did not return a certificate");
    free(log);
}

/* ---- servers with other certificates ----------------------------------------------------------
 */

/* A dispatcher alone with certificate NAME (no client certificates asked for). */
static void start_dispatcher(struct cluster *c, const char *name, struct flags *f)
{
    memset(c, 0, sizeof *c);
    tls_flags(f, name, NULL);
    c->dispatcher_args = f->argv;
    assert_int_equal(cluster_start_dispatcher(c, 0, 0), 0);
}

/* Reads from addr with the CA only; asserts failure with why on stderr. */
static void expect_read_fails(const char *addr, const char *why)
{
    struct flags f;
    tls_flags(&f, NULL, "ca");
    char *out = NULL, *err = NULL;
    int rc = cli(&out, &err, addr, &f, "read", "range(10)", "--timeout-ms", "3000", NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, why);
    free(out);
    free(err);
}

static void test_expired_certificate(void **state)
{
    (void)state;
    struct cluster c;
    struct flags f;
    start_dispatcher(&c, "expired", &f);
    expect_read_fails(c.dispatcher.addr, "tls: certificate verify failed: certificate has expired");
    assert_int_equal(cluster_stop(&c), 0);
}

/* The name or address dialled must be in the certificate: 127.0.0.1 and localhost are not in
 * wronghost's; both are in node's. */
static void test_host_checked(void **state)
{
    (void)state;
    struct cluster c;
    struct flags f;
    char by_name[64];
    start_dispatcher(&c, "wronghost", &f);
    expect_read_fails(c.dispatcher.addr, "tls: certificate verify failed: IP address mismatch");
    snprintf(by_name, sizeof by_name, "localhost:%d", c.port);
    expect_read_fails(by_name, "tls: certificate verify failed: hostname mismatch");
    assert_int_equal(cluster_stop(&c), 0);

    start_dispatcher(&c, "node", &f);
    struct flags ca;
    tls_flags(&ca, NULL, "ca");
    snprintf(by_name, sizeof by_name, "localhost:%d", c.port);
    char *out = NULL, *err = NULL;
    int rc = cli(&out, &err, by_name, &ca, "register", "range(5)", NULL);
    if (rc != 0)
        fail_msg("register via localhost failed with %d: %s", rc, err);
    assert_string_equal(out, "1\n");
    free(out);
    free(err);
    assert_int_equal(cluster_stop(&c), 0);
}

/* One certificate for every worker, whatever address it advertises (--tls-worker-name): the
 * worker's certificate names only elsewhere.example. A reader that verifies the worker against
 * the address it advertises refuses it; one given that name reads exactly; another name is
 * refused. The dispatcher is still verified against the address it is dialled by, and only a
 * reader takes the flag. */
static void test_worker_name(void **state)
{
    (void)state;
    struct cluster c;
    memset(&c, 0, sizeof c);
    struct flags wf;
    tls_flags(&wf, "wronghost", "ca");
    c.dispatcher_args = mutual.argv;
    c.worker_args = wf.argv;
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);

    char *out = NULL, *err = NULL;
    int rc = cli(&out, &err, c.dispatcher.addr, &mutual, "read", "range(10)", "--mode",
                 "distributed_epoch", "--timeout-ms", "3000", NULL);
    assert_int_equal(rc, 1);
    assert_string_equal(out, "");
    assert_contains(err, "tls: certificate verify failed: IP address mismatch");
    free(out);
    free(err);

    rc = cli(&out, &err, c.dispatcher.addr, &mutual, "read", "range(10)", "--mode",
             "distributed_epoch", "--timeout-ms", "3000", "--tls-worker-name", "other.example",
             NULL);
    assert_int_equal(rc, 1);
    assert_contains(err, "tls: certificate verify failed: hostname mismatch");
    free(out);
    free(err);

    rc = cli(&out, &err, c.dispatcher.addr, &mutual, "read", "range(10)", "--mode",
             "distributed_epoch", "--timeout-ms", "30000", "--tls-worker-name", "elsewhere.example",
             NULL);
    if (rc != 0)
        fail_msg("read with --tls-worker-name failed with %d: %s", rc, err);
    char *got = sorted_lines(out);
    char *want = expected_range(10, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    free(err);
    assert_int_equal(cluster_stop(&c), 0);

    /* Without TLS, and on a server. */
    const char *plain[] = {bin_path("sluice"), "read",     "--dispatcher",
                           "127.0.0.1:1",      "range(3)", "--tls-worker-name",
                           "w.example",        NULL};
    rc = run_cmd((char **)plain, 10000, &out, &err);
    assert_int_equal(rc, 2);
    assert_string_equal(err, "sluice: tls-worker-name w.example: needs TLS (--tls-ca)\n");
    free(out);
    free(err);
    const char *server[] = {bin_path("sluice-dispatcher"),
                            "--port",
                            "0",
                            "--tls-cert",
                            mutual.cert,
                            "--tls-key",
                            mutual.key,
                            "--tls-worker-name",
                            "w.example",
                            NULL};
    rc = run_cmd((char **)server, 10000, &out, &err);
    assert_int_equal(rc, 2);
    assert_string_equal(err, "sluice-dispatcher: usage: unknown option '--tls-worker-name' (try "
                             "--help)\n");
    free(out);
    free(err);
}

/* A TLS client on a plain dispatcher: both ends say what is wrong. */
static void test_tls_client_plain_server(void **state)
{
    (void)state;
    struct cluster c;
    memset(&c, 0, sizeof c);
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    expect_read_fails(c.dispatcher.addr, "tls: the server does not speak TLS (is it started with "
                                         "--tls-cert and --tls-key?)");
    char *log = read_text_file(c.dispatcher.log);
    assert_contains(log, "tls: the peer speaks TLS and this end does not");
    free(log);
    assert_int_equal(cluster_stop(&c), 0);
}

/* Files that cannot serve: the process does not start, and says which file and why. */
static void test_bad_files(void **state)
{
    (void)state;
    char cert[512], key[512], other_key[512], ca[512], missing[512];
    snprintf(cert, sizeof cert, "%s", tls_path("node.pem"));
    snprintf(key, sizeof key, "%s", tls_path("node.key"));
    snprintf(other_key, sizeof other_key, "%s", tls_path("other.key"));
    snprintf(ca, sizeof ca, "%s", tls_path("ca.pem"));
    snprintf(missing, sizeof missing, "%s", tls_path("missing.pem"));
    struct {
        const char *bin;
        const char *args[8];
        char want[1400];
    } cases[] = {
        {"sluice-dispatcher", {"--tls-cert", cert}, ""},
        {"sluice-dispatcher", {"--tls-cert", cert, "--tls-key", missing}, ""},
        {"sluice-dispatcher", {"--tls-cert", cert, "--tls-key", other_key}, ""},
        {"sluice-dispatcher", {"--tls-cert", key, "--tls-key", key}, ""},
        {"sluice-dispatcher", {"--tls-cert", cert, "--tls-key", key, "--tls-ca", key}, ""},
        {"sluice-dispatcher", {"--tls-ca", ca}, ""},
        {"sluice-worker",
         {"--dispatcher", "127.0.0.1:1", "--tls-cert", cert, "--tls-key", key},
         ""},
    };
    snprintf(cases[0].want, sizeof cases[0].want,
             "sluice-dispatcher: tls-cert %s: given without --tls-key\n", cert);
    snprintf(cases[1].want, sizeof cases[1].want,
             "sluice-dispatcher: tls-key %s: No such file or directory\n", missing);
    snprintf(cases[2].want, sizeof cases[2].want,
             "sluice-dispatcher: tls-key %s: not the key of the certificate in %s\n", other_key,
             cert);
    snprintf(cases[3].want, sizeof cases[3].want,
             "sluice-dispatcher: tls-cert %s: no PEM certificate in the file\n", key);
    snprintf(cases[4].want, sizeof cases[4].want,
             "sluice-dispatcher: tls-ca %s: no PEM certificate in the file\n", key);
    snprintf(cases[5].want, sizeof cases[5].want,
             "sluice-dispatcher: tls-ca %s: a server needs --tls-cert and --tls-key to speak TLS\n",
             ca);
    snprintf(cases[6].want, sizeof cases[6].want,
             "sluice-worker: tls-cert %s: TLS towards servers needs --tls-ca to verify them\n",
             cert);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[16];
        int n = 0;
        argv[n++] = (char *)bin_path(cases[i].bin);
        argv[n++] = "--port";
        argv[n++] = "0";
        for (int k = 0; cases[i].args[k]; k++)
            argv[n++] = (char *)cases[i].args[k];
        argv[n] = NULL;
        char *out = NULL, *err = NULL;
        int rc = run_cmd(argv, 10000, &out, &err);
        assert_int_equal(rc, 1);
        assert_string_equal(out, "");
        assert_string_equal(err, cases[i].want);
        free(out);
        free(err);
    }
}

static int group_teardown(void **state)
{
    tls_certs_cleanup();
    return tmp_teardown(state);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    tls_flags(&mutual, "node", "ca");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parallel_epochs, cluster_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_distributed_epoch, cluster_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_large_elements, cluster_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_wrong_ca, cluster_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_plain_client, cluster_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_no_client_certificate, cluster_setup,
                                        cluster_teardown),
        cmocka_unit_test(test_expired_certificate),
        cmocka_unit_test(test_host_checked),
        cmocka_unit_test(test_worker_name),
        cmocka_unit_test(test_tls_client_plain_server),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, group_teardown);
}
