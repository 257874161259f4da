/* The TLS session of tls.h on memory alone (no socket): two sessions, a dialling one and an
 * accepting one, pass ciphertext to each other through their sinks. Checked: the handshake and
 * data in both directions whatever the chunks the ciphertext arrives in (one byte at a time
 * included), records never larger than TLS allows, the reasons of failed verifications, a sink
 * out of memory, and which first bytes look like TLS. The certificates are made at run time by
 * make_certs.sh (hence an integration test: it reads files). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "common/security.h"
#include "common/tls.h"

#include "lib/tls.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* Ciphertext one end has produced and the other has not yet been fed. */
struct pipe {
    uint8_t *data;
    size_t len, cap;
    size_t records_max; /* the largest record seen, header included */
    bool fail;          /* the sink refuses (out of memory) */
};

static int sink(void *arg, const uint8_t *data, size_t len)
{
    struct pipe *p = arg;
    if (p->fail)
        return -1;
    if (p->len + len > p->cap) {
        p->cap = (p->len + len) * 2;
        p->data = realloc(p->data, p->cap);
        assert_non_null(p->data);
    }
    memcpy(p->data + p->len, data, len);
    p->len += len;
    return 0;
}

/* The largest record in p's bytes (whole records from the start). */
static size_t largest_record(const struct pipe *p)
{
    size_t max = 0;
    for (size_t off = 0; off + 5 <= p->len;) {
        size_t n = 5 + ((size_t)p->data[off + 3] << 8 | p->data[off + 4]);
        if (n > max)
            max = n;
        off += n;
    }
    return max;
}

struct ends {
    struct security_ctx *server_sec, *client_sec;
    struct tls_session *server, *client;
    struct pipe to_server, to_client;
};

static void ends_new(struct ends *e, const char *server_cert, const char *client_cert,
                     const char *client_ca, const char *host)
{
    memset(e, 0, sizeof *e);
    e->server_sec = tls_test_sec(server_cert, "ca", SECURITY_SERVER);
    e->client_sec = tls_test_sec(client_cert, client_ca, SECURITY_CLIENT);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(
        tls_session_new(e->server_sec->tls, NULL, sink, &e->to_client, &e->server, err, sizeof err),
        0);
    assert_int_equal(
        tls_session_new(e->client_sec->tls, host, sink, &e->to_server, &e->client, err, sizeof err),
        0);
}

static void ends_free(struct ends *e)
{
    tls_session_free(e->server);
    tls_session_free(e->client);
    security_ctx_free(e->server_sec);
    security_ctx_free(e->client_sec);
    free(e->to_server.data);
    free(e->to_client.data);
}

/* Feeds what p holds to s in chunks of at most chunk bytes, advancing the handshake (or reading
 * into out, once it is done). Returns the first failure, or 0; *got counts plaintext read. */
static int deliver(struct tls_session *s, struct pipe *p, size_t chunk, uint8_t *out, size_t outcap,
                   size_t *got, char *why, size_t whylen)
{
    /* The bytes must stay put while the session reads them: work on a copy. */
    size_t len = p->len;
    uint8_t *bytes = malloc(len ? len : 1);
    assert_non_null(bytes);
    memcpy(bytes, p->data, len);
    p->len = 0;
    int rc = 0;
    for (size_t off = 0; off < len && rc >= 0;) {
        size_t n = len - off < chunk ? len - off : chunk;
        tls_session_feed(s, bytes + off, n);
        off += n;
        if (!tls_session_done(s)) {
            rc = tls_session_handshake(s, why, whylen);
            if (rc <= 0)
                continue;
        }
        for (;;) {
            long r = tls_session_read(s, out + *got, outcap - *got, why, whylen);
            if (r <= 0) {
                rc = (int)r;
                break;
            }
            *got += (size_t)r;
        }
        assert_true(rc < 0 || tls_session_unread(s) == 0);
    }
    free(bytes);
    return rc < 0 ? rc : 0;
}

/* Runs the handshake to its end, chunk bytes at a time. Returns 0 or the first failure, with its
 * reason in why. */
static int handshake(struct ends *e, size_t chunk, char *why, size_t whylen)
{
    uint8_t scratch[64];
    size_t got = 0;
    int rc = tls_session_handshake(e->client, why, whylen);
    assert_int_equal(rc, 0);
    for (int round = 0; round < 10; round++) {
        rc = deliver(e->server, &e->to_server, chunk, scratch, sizeof scratch, &got, why, whylen);
        if (rc < 0)
            return rc;
        rc = deliver(e->client, &e->to_client, chunk, scratch, sizeof scratch, &got, why, whylen);
        if (rc < 0)
            return rc;
        /* No application data during the handshake. */
        assert_int_equal(got, 0);
        if (tls_session_done(e->client) && tls_session_done(e->server))
            return 0;
    }
    fail_msg("handshake did not finish");
    return -1;
}

static void test_handshake_and_data(void **state)
{
    (void)state;
    static const size_t chunks[] = {1, 5, 7, 1000, 16389, 1u << 20};
    enum { N = 300000 };
    uint8_t *msg = malloc(N), *out = malloc(N);
    assert_non_null(msg);
    assert_non_null(out);
    for (size_t i = 0; i < N; i++)
        msg[i] = (uint8_t)(i * 131 + (i >> 9));
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        struct ends e;
        ends_new(&e, "node", "node", "ca", "127.0.0.1");
        char why[SLUICE_ERRMSG_SIZE] = "";
        if (handshake(&e, chunks[k], why, sizeof why) != 0)
            fail_msg("chunk %zu: %s", chunks[k], why);
        char desc[96];
        tls_session_describe(e.client, desc, sizeof desc);
        assert_string_equal(desc, "TLSv1.3 TLS_AES_128_GCM_SHA256");

        /* Client to server in pieces of every size, then back. */
        size_t off = 0;
        for (size_t piece = 1; off < N; piece = piece * 3 + 1) {
            size_t n = N - off < piece ? N - off : piece;
            assert_int_equal(tls_session_write(e.client, msg + off, n, why, sizeof why), 0);
            off += n;
        }
        assert_true(largest_record(&e.to_server) <= 5 + 16384 + 256);
        size_t got = 0;
        assert_int_equal(deliver(e.server, &e.to_server, chunks[k], out, N, &got, why, sizeof why),
                         0);
        assert_int_equal(got, N);
        assert_memory_equal(out, msg, N);
        assert_int_equal(tls_session_write(e.server, msg, N, why, sizeof why), 0);
        got = 0;
        memset(out, 0, N);
        assert_int_equal(deliver(e.client, &e.to_client, chunks[k], out, N, &got, why, sizeof why),
                         0);
        assert_int_equal(got, N);
        assert_memory_equal(out, msg, N);
        ends_free(&e);
    }
    free(msg);
    free(out);
}

/* A flipped bit in a record is an authentication failure, not data. */
static void test_tampered_record(void **state)
{
    (void)state;
    struct ends e;
    ends_new(&e, "node", "node", "ca", "localhost");
    char why[SLUICE_ERRMSG_SIZE];
    assert_int_equal(handshake(&e, 4096, why, sizeof why), 0);
    static const uint8_t hello[] = "hello";
    assert_int_equal(tls_session_write(e.client, hello, sizeof hello, why, sizeof why), 0);
    e.to_server.data[e.to_server.len - 3] ^= 0x10;
    uint8_t out[64];
    size_t got = 0;
    assert_int_equal(deliver(e.server, &e.to_server, 4096, out, sizeof out, &got, why, sizeof why),
                     SLUICE_ERR_AUTH);
    assert_int_equal(got, 0);
    assert_string_equal(why, "tls: read failed: decryption failed or bad record mac");
    ends_free(&e);
}

/* Who fails, and how it says so. */
static void test_verification(void **state)
{
    (void)state;
    static const struct {
        const char *server, *client_cert, *client_ca, *host;
        bool client_fails; /* else the server does */
        const char *why;
    } cases[] = {
        {"node", "node", "ca2", "127.0.0.1", true,
         "tls: certificate verify failed: unable to get local issuer certificate"},
        {"expired", NULL, "ca", "127.0.0.1", true,
         "tls: certificate verify failed: certificate has expired"},
        {"wronghost", NULL, "ca", "127.0.0.1", true,
         "tls: certificate verify failed: IP address mismatch"},
        {"wronghost", NULL, "ca", "localhost", true,
         "tls: certificate verify failed: hostname mismatch"},
        {"node", NULL, "ca", "elsewhere.example", true,
         "tls: certificate verify failed: hostname mismatch"},
        {"node", NULL, "ca", "10.9.9.9", true,
         "tls: certificate verify failed: IP address mismatch"},
        {"node", "other", "ca", "127.0.0.1", false,
         "tls: certificate verify failed: unable to get local issuer certificate"},
        {"node", NULL, "ca", "127.0.0.1", false,
         "tls: handshake failed: peer did not return a certificate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ends e;
        /* A server without tls_ca asks for no client certificate: the server-side cases need
         * one that does. */
        ends_new(&e, cases[i].server, cases[i].client_cert, cases[i].client_ca, cases[i].host);
        char why[SLUICE_ERRMSG_SIZE] = "";
        int rc = handshake(&e, 100000, why, sizeof why);
        assert_int_equal(rc, SLUICE_ERR_AUTH);
        if (strcmp(why, cases[i].why) != 0)
            fail_msg("case %zu: got '%s', want '%s'", i, why, cases[i].why);
        /* The failing end tells the other why, in an alert. */
        struct pipe *alert = cases[i].client_fails ? &e.to_server : &e.to_client;
        struct tls_session *other = cases[i].client_fails ? e.server : e.client;
        assert_true(alert->len > 0);
        uint8_t out[64];
        size_t got = 0;
        assert_int_equal(deliver(other, alert, 100000, out, sizeof out, &got, why, sizeof why),
                         SLUICE_ERR_AUTH);
        if (strncmp(why, "tls: refused by the peer: ", 26) != 0)
            fail_msg("case %zu: the peer got '%s'", i, why);
        ends_free(&e);
    }
}

/* A sink that cannot keep the ciphertext fails the call that produced it. */
static void test_sink_out_of_memory(void **state)
{
    (void)state;
    struct ends e;
    ends_new(&e, "node", "node", "ca", "127.0.0.1");
    char why[SLUICE_ERRMSG_SIZE];
    assert_int_equal(handshake(&e, 4096, why, sizeof why), 0);
    e.to_server.fail = true;
    static const uint8_t data[100] = {1};
    assert_int_equal(tls_session_write(e.client, data, sizeof data, why, sizeof why),
                     SLUICE_ERR_NOMEM);
    assert_string_equal(why, "tls: write: out of memory");
    ends_free(&e);
}

static void test_looks_like_record(void **state)
{
    (void)state;
    static const struct {
        uint8_t bytes[3];
        size_t n;
        bool tls;
    } cases[] = {
        {{22, 3, 1}, 3, true},  {{22, 3, 3}, 3, true},  {{21, 3, 3}, 3, true},
        {{23, 3, 3}, 3, false}, {{0, 0, 0}, 3, false},  {{22, 2, 0}, 3, false},
        {{22, 3, 9}, 3, false}, {{22, 3, 1}, 2, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(tls_looks_like_record(cases[i].bytes, cases[i].n), cases[i].tls);
}

static int teardown(void **state)
{
    (void)state;
    tls_certs_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_and_data), cmocka_unit_test(test_tampered_record),
        cmocka_unit_test(test_verification),       cmocka_unit_test(test_sink_out_of_memory),
        cmocka_unit_test(test_looks_like_record),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
