/* TLS contexts and memory-only sessions over OpenSSL (tls.h).
 *
 * A session's SSL object reads and writes through one BIO of our own method, which reads
 * ciphertext from the window of bytes last fed (answering "retry" once it is empty, so OpenSSL
 * waits for more rather than seeing an end of stream) and passes what it writes to the sink. Like
 * a pair of memory BIOs, it never touches a socket; unlike them, it keeps no copy of its own, so
 * ciphertext is copied once on either side (into OpenSSL's record buffer as it is read, by the
 * sink as it is written) where a pair of memory BIOs copies it twice.
 *
 * Errors: OpenSSL's error queue is per thread and may hold stale entries from other code, so it
 * is cleared before each call whose failure is examined, and cleared again once a failure has
 * been turned into a message. */
#include "tls.h"

#include "error.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* AES-GCM first (hardware-accelerated almost everywhere), the 128-bit key first since it is
 * faster and ample; ChaCha20-Poly1305 for machines without AES instructions. */
#define TLS13_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
#define TLS12_CIPHERS                                                                              \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                                   \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                                   \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

struct tls_ctx {
    SSL_CTX *server; /* NULL: this owner does not accept TLS */
    SSL_CTX *client; /* NULL: this owner does not dial TLS */
};

struct tls_session {
    SSL *ssl;
    const uint8_t *in; /* ciphertext fed and not yet taken */
    size_t in_len;
    tls_sink_cb sink;
    void *sink_arg;
    bool sink_failed; /* the sink ran out of memory during the current call */
    bool done;        /* the handshake has completed */
};

/* Empties this thread's OpenSSL error queue, which must be empty before an SSL call whose
 * failure SSL_get_error examines. Checking first is much cheaper than clearing on every record. */
static void clear_errors(void)
{
    if (ERR_peek_error() != 0)
        ERR_clear_error();
}

/* The reason of the most recent OpenSSL error, or fallback; clears the queue. */
static const char *ssl_reason(const char *fallback)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    ERR_clear_error();
    return r ? r : fallback;
}

/* ---- contexts -------------------------------------------------------------------------------- */

/* Fails with "FLAG PATH: strerror" when path cannot be opened for reading, so a missing file is
 * reported as such rather than as whatever OpenSSL's PEM reader makes of it. */
static int check_readable(const char *flag, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return err_set(err, errlen, -errno, "%s %s: %s", flag, path, strerror(errno));
    fclose(f);
    return 0;
}

static SSL_CTX *new_ctx(bool server, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (ctx == NULL) {
        err_set(err, errlen, SLUICE_ERR_NOMEM, "tls: %s", ssl_reason("cannot create a context"));
        return NULL;
    }
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_set_ciphersuites(ctx, TLS13_SUITES) != 1 ||
        SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS) != 1) {
        err_set(err, errlen, SLUICE_ERR_INVALID, "tls: %s", ssl_reason("bad cipher settings"));
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_NO_TICKET |
                                 (server ? SSL_OP_CIPHER_SERVER_PREFERENCE : 0));
    /* The chain sent is the certificate file's, never completed from the CA file: a peer
     * verifies against its own CA, and a wrong one is then reported as such. */
    SSL_CTX_set_mode(ctx, SSL_MODE_NO_AUTO_CHAIN);
    /* Connections are long-lived and few: resumption would save nothing worth its state. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (server)
        SSL_CTX_set_num_tickets(ctx, 0);
    return ctx;
}

/* Why a PEM file did not load: the first error OpenSSL queued is the root cause (later ones only
 * say which call failed); a file with no PEM block at all is said so plainly. Clears the queue. */
static const char *load_reason(const char *fallback)
{
    unsigned long e = ERR_peek_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    if (e != 0 &&
        ((ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) ||
         (ERR_GET_LIB(e) == ERR_LIB_OSSL_DECODER && ERR_GET_REASON(e) == ERR_R_UNSUPPORTED) ||
         (ERR_GET_LIB(e) == ERR_LIB_X509 &&
          ERR_GET_REASON(e) == X509_R_NO_CERTIFICATE_OR_CRL_FOUND)))
        r = fallback;
    ERR_clear_error();
    return r ? r : fallback;
}

static int load_identity(SSL_CTX *ctx, const char *cert, const char *key, char *err, size_t errlen)
{
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls-cert %s: %s", cert,
                       load_reason("no PEM certificate in the file"));
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        unsigned long e = ERR_peek_last_error();
        if (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH ||
            ERR_GET_REASON(e) == X509_R_KEY_TYPE_MISMATCH) {
            ERR_clear_error();
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "tls-key %s: not the key of the certificate in %s", key, cert);
        }
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls-key %s: %s", key,
                       load_reason("no PEM private key in the file"));
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "tls-key %s: not the key of the certificate in %s", key, cert);
    }
    return 0;
}

static int load_ca(SSL_CTX *ctx, const char *ca, bool server, char *err, size_t errlen)
{
    ERR_clear_error();
    if (SSL_CTX_load_verify_file(ctx, ca) != 1)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls-ca %s: %s", ca,
                       load_reason("no PEM certificate in the file"));
    if (server) {
        /* Tells clients which CA their certificate must come from. */
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
        if (names == NULL)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "tls-ca %s: %s", ca,
                           load_reason("no PEM certificate in the file"));
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    return 0;
}

static bool given(const char *s)
{
    return s != NULL && *s != '\0';
}

int tls_ctx_new(const struct sluice_security_options *o, int sides, struct tls_ctx **out, char *err,
                size_t errlen)
{
    *out = NULL;
    if (o == NULL || (!given(o->tls_cert) && !given(o->tls_key) && !given(o->tls_ca)))
        return 0;
    const char *cert = given(o->tls_cert) ? o->tls_cert : NULL;
    const char *key = given(o->tls_key) ? o->tls_key : NULL;
    const char *ca = given(o->tls_ca) ? o->tls_ca : NULL;

    /* Half a configuration would silently mean plain TCP on some connection: refuse it. */
    if (cert && !key)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls-cert %s: given without --tls-key",
                       cert);
    if (key && !cert)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls-key %s: given without --tls-cert",
                       key);
    if ((sides & SECURITY_SERVER) && !cert)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "tls-ca %s: a server needs --tls-cert and --tls-key to speak TLS", ca);
    if ((sides & SECURITY_CLIENT) && !ca)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "tls-cert %s: TLS towards servers needs --tls-ca to verify them", cert);
    int rc;
    if (cert && ((rc = check_readable("tls-cert", cert, err, errlen)) < 0 ||
                 (rc = check_readable("tls-key", key, err, errlen)) < 0))
        return rc;
    if (ca && (rc = check_readable("tls-ca", ca, err, errlen)) < 0)
        return rc;

    struct tls_ctx *t = calloc(1, sizeof *t);
    if (t == NULL)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "tls: out of memory");
    rc = SLUICE_ERR_NOMEM;
    if (sides & SECURITY_SERVER) {
        if ((t->server = new_ctx(true, err, errlen)) == NULL)
            goto fail;
        if ((rc = load_identity(t->server, cert, key, err, errlen)) < 0)
            goto fail;
        if (ca && (rc = load_ca(t->server, ca, true, err, errlen)) < 0)
            goto fail;
    }
    if (sides & SECURITY_CLIENT) {
        rc = SLUICE_ERR_NOMEM;
        if ((t->client = new_ctx(false, err, errlen)) == NULL)
            goto fail;
        if (cert && (rc = load_identity(t->client, cert, key, err, errlen)) < 0)
            goto fail;
        if ((rc = load_ca(t->client, ca, false, err, errlen)) < 0)
            goto fail;
    }
    *out = t;
    return 0;

fail:
    tls_ctx_free(t);
    return rc;
}

void tls_ctx_free(struct tls_ctx *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->server);
    SSL_CTX_free(t->client);
    free(t);
}

bool tls_ctx_serves(const struct tls_ctx *t)
{
    return t != NULL && t->server != NULL;
}

bool tls_ctx_dials(const struct tls_ctx *t)
{
    return t != NULL && t->client != NULL;
}

static bool is_ip(const char *host)
{
    uint8_t a[16];
    return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

/* ---- the BIO: reads the fed window, writes to the sink ------------------------------------- */

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_read(BIO *b, char *out, int len)
{
    struct tls_session *s = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (s->in_len == 0) {
        BIO_set_retry_read(b);
        return -1;
    }
    size_t n = (size_t)len < s->in_len ? (size_t)len : s->in_len;
    memcpy(out, s->in, n);
    s->in += n;
    s->in_len -= n;
    return (int)n;
}

static int bio_write(BIO *b, const char *data, int len)
{
    struct tls_session *s = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (s->sink(s->sink_arg, (const uint8_t *)data, (size_t)len) != 0) {
        s->sink_failed = true;
        return -1;
    }
    return len;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    struct tls_session *s = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1; /* the sink has everything already */
    case BIO_CTRL_PENDING:
        return s ? (long)s->in_len : 0;
    case BIO_CTRL_WPENDING:
    case BIO_CTRL_EOF:
        return 0;
    default:
        return 0;
    }
}

static void bio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice conn");
    if (m && BIO_meth_set_read(m, bio_read) == 1 && BIO_meth_set_write(m, bio_write) == 1 &&
        BIO_meth_set_ctrl(m, bio_ctrl) == 1) {
        bio_method = m;
        return;
    }
    BIO_meth_free(m);
}

/* ---- sessions -------------------------------------------------------------------------------- */

int tls_session_new(const struct tls_ctx *t, const char *host, tls_sink_cb sink, void *arg,
                    struct tls_session **out, char *err, size_t errlen)
{
    SSL_CTX *ctx = host ? t->client : t->server;
    if (ctx == NULL)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls: not configured to %s",
                       host ? "dial" : "accept");
    pthread_once(&bio_once, bio_method_init);
    if (bio_method == NULL)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "tls: out of memory");
    struct tls_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "tls: out of memory");
    s->sink = sink;
    s->sink_arg = arg;
    ERR_clear_error();
    s->ssl = SSL_new(ctx);
    if (s->ssl == NULL)
        goto fail_nomem;
    BIO *bio = BIO_new(bio_method);
    if (bio == NULL)
        goto fail_ssl;
    BIO_set_data(bio, s);
    BIO_set_init(bio, 1);
    SSL_set_bio(s->ssl, bio, bio); /* one reference, owned by ssl from here */
    if (host == NULL) {
        SSL_set_accept_state(s->ssl);
        *out = s;
        return 0;
    }
    SSL_set_connect_state(s->ssl);
    int ok;
    if (is_ip(host)) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), host);
    } else {
        SSL_set_hostflags(s->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok = SSL_set1_host(s->ssl, host) == 1 && SSL_set_tlsext_host_name(s->ssl, host) == 1;
    }
    if (!ok) {
        err_set(err, errlen, SLUICE_ERR_INVALID, "tls: cannot verify against host %s: %s", host,
                ssl_reason("invalid name"));
        tls_session_free(s);
        return SLUICE_ERR_INVALID;
    }
    *out = s;
    return 0;

fail_ssl:
    SSL_free(s->ssl);
fail_nomem:
    free(s);
    ERR_clear_error();
    return err_set(err, errlen, SLUICE_ERR_NOMEM, "tls: out of memory");
}

void tls_session_free(struct tls_session *s)
{
    if (s == NULL)
        return;
    SSL_free(s->ssl); /* frees the BIO */
    free(s);
}

void tls_session_feed(struct tls_session *s, const uint8_t *data, size_t len)
{
    assert(s->in_len == 0);
    s->in = data;
    s->in_len = len;
}

size_t tls_session_unread(const struct tls_session *s)
{
    return s->in_len;
}

/* Turns a failed SSL call into "tls: why". A failed certificate check says which check failed
 * (the chain, the dates, the name) rather than OpenSSL's generic "certificate verify failed". */
static int session_error(struct tls_session *s, const char *what, char *why, size_t whylen)
{
    if (s->sink_failed) {
        s->sink_failed = false;
        ERR_clear_error();
        return err_set(why, whylen, SLUICE_ERR_NOMEM, "tls: %s: out of memory", what);
    }
    unsigned long e = ERR_peek_last_error();
    long v = SSL_get_verify_result(s->ssl);
    if (e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL &&
        ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED && v != X509_V_OK) {
        ERR_clear_error();
        return err_set(why, whylen, SLUICE_ERR_AUTH, "tls: certificate verify failed: %s",
                       X509_verify_cert_error_string(v));
    }
    const char *reason = ssl_reason(NULL);
    if (reason == NULL)
        return err_set(why, whylen, SLUICE_ERR_AUTH, "tls: %s failed", what);
    /* An alert from the peer: it refused something about this end (its certificate, say). */
    if (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) >= SSL_AD_REASON_OFFSET)
        return err_set(why, whylen, SLUICE_ERR_AUTH, "tls: refused by the peer: %s", reason);
    /* A peer that does not speak TLS shows up as a record of no known version or type. */
    const char *hint = "";
    if (!s->done && e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL &&
        (ERR_GET_REASON(e) == SSL_R_WRONG_VERSION_NUMBER ||
         ERR_GET_REASON(e) == SSL_R_PACKET_LENGTH_TOO_LONG ||
         ERR_GET_REASON(e) == SSL_R_HTTP_REQUEST))
        hint = " (does the peer speak TLS?)";
    return err_set(why, whylen, SLUICE_ERR_AUTH, "tls: %s failed: %s%s", what, reason, hint);
}

int tls_session_handshake(struct tls_session *s, char *why, size_t whylen)
{
    if (s->done)
        return 1;
    clear_errors();
    int r = SSL_do_handshake(s->ssl);
    if (r == 1) {
        s->done = true;
        return 1;
    }
    int e = SSL_get_error(s->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    return session_error(s, "handshake", why, whylen);
}

bool tls_session_done(const struct tls_session *s)
{
    return s->done;
}

long tls_session_read(struct tls_session *s, uint8_t *buf, size_t len, char *why, size_t whylen)
{
    clear_errors();
    int n = SSL_read(s->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
    if (n > 0)
        return n;
    int e = SSL_get_error(s->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    if (e == SSL_ERROR_ZERO_RETURN)
        return err_set(why, whylen, UV_EOF, "closed by peer");
    return session_error(s, "read", why, whylen);
}

int tls_session_write(struct tls_session *s, const uint8_t *data, size_t len, char *why,
                      size_t whylen)
{
    while (len > 0) {
        clear_errors();
        int n = SSL_write(s->ssl, data, len > INT_MAX ? INT_MAX : (int)len);
        if (n <= 0)
            return session_error(s, "write", why, whylen);
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

void tls_session_describe(const struct tls_session *s, char *buf, size_t len)
{
    const SSL_CIPHER *c = SSL_get_current_cipher(s->ssl);
    snprintf(buf, len, "%s %s", SSL_get_version(s->ssl), c ? SSL_CIPHER_get_name(c) : "(none)");
}

bool tls_looks_like_record(const uint8_t *p, size_t n)
{
    /* Content type handshake (22) or alert (21), then a 3.x record version. */
    return n >= 3 && (p[0] == 22 || p[0] == 21) && p[1] == 3 && p[2] <= 4;
}
