#include "security.h"

#include "error.h"
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads the token file into s. Trailing newlines (and carriage returns) are not part of the
 * secret, so `echo secret > file` and `printf secret > file` give the same token. */
static int load_token(struct security_ctx *s, const char *path, char *err, size_t errlen)
{
    snprintf(s->token_path, sizeof s->token_path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errlen, -errno, "auth-token-file %s: %s", path, strerror(errno));
    size_t n = 0;
    for (;;) {
        if (n == sizeof s->token) {
            uint8_t extra;
            ssize_t more = read(fd, &extra, 1);
            close(fd);
            if (more != 0)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "auth-token-file %s: longer than %d bytes", path,
                               SECURITY_TOKEN_MAX);
            break;
        }
        ssize_t r = read(fd, s->token + n, sizeof s->token - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return err_set(err, errlen, -e, "auth-token-file %s: %s", path, strerror(e));
        }
        if (r == 0) {
            close(fd);
            break;
        }
        n += (size_t)r;
    }
    while (n > 0 && (s->token[n - 1] == '\n' || s->token[n - 1] == '\r'))
        n--;
    if (n < SECURITY_TOKEN_MIN)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "auth-token-file %s: the token has %zu bytes; at least %d are needed "
                       "(e.g. openssl rand -hex 32 > %s)",
                       path, n, SECURITY_TOKEN_MIN, path);
    s->token_len = n;
    return 0;
}

/* tls_worker_name: a reader's, with TLS, and a name a certificate can hold (letters, digits, '-',
 * '.', a leading "*." is not one: the name is what is checked, not a pattern). */
static int set_worker_name(struct security_ctx *s, const char *name, char *err, size_t errlen)
{
    if (name == NULL || *name == '\0')
        return 0;
    if (s->sides & SECURITY_SERVER)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "tls-worker-name: only a reader verifies workers; a server takes no "
                       "--tls-worker-name");
    if (s->tls == NULL)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls-worker-name %s: needs TLS (--tls-ca)",
                       name);
    size_t n = strlen(name);
    if (n >= sizeof s->tls_worker_name)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls-worker-name: longer than %zu bytes",
                       sizeof s->tls_worker_name - 1);
    for (size_t k = 0; k < n; k++) {
        char ch = name[k];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
        if (!ok)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "tls-worker-name: '%c' at byte %zu is not part of a DNS name",
                           ch == '\0' ? '?' : ch, k + 1);
    }
    memcpy(s->tls_worker_name, name, n + 1);
    return 0;
}

int security_ctx_new(const struct sluice_security_options *o, int sides, struct security_ctx **out,
                     char *err, size_t errlen)
{
    static const struct sluice_security_options none;
    if (o == NULL)
        o = &none;
    struct security_ctx *s = calloc(1, sizeof *s);
    if (s == NULL)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "security: out of memory");
    s->sides = sides;
    s->insecure = o->insecure;
    const char *path = o->auth_token_file;
    if (path == NULL || *path == '\0') {
        const char *env = getenv(SECURITY_ENV_TOKEN_FILE);
        path = env && *env ? env : NULL;
    }
    int rc = 0;
    if (path != NULL && (rc = load_token(s, path, err, errlen)) < 0)
        goto fail;
    if ((rc = tls_ctx_new(o, sides, &s->tls, err, errlen)) < 0)
        goto fail;
    if ((rc = set_worker_name(s, o->tls_worker_name, err, errlen)) < 0)
        goto fail;
    *out = s;
    return 0;

fail:
    security_ctx_free(s);
    return rc;
}

void security_ctx_free(struct security_ctx *s)
{
    if (s == NULL)
        return;
    tls_ctx_free(s->tls);
    /* The secret does not outlive its use in freed memory. */
    memset(s->token, 0, sizeof s->token);
    __asm__ __volatile__("" : : "r"(s->token) : "memory");
    free(s);
}

bool security_has_token(const struct security_ctx *s)
{
    return s != NULL && s->token_len > 0;
}

bool security_has_tls(const struct security_ctx *s)
{
    return s != NULL && s->tls != NULL;
}

bool security_is_loopback(const char *host)
{
    if (host == NULL || strcmp(host, "localhost") == 0)
        return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return memcmp(&a6, &in6addr_loopback, sizeof a6) == 0;
    return false;
}

int security_check_listen(const struct security_ctx *s, const char *host, char *err, size_t errlen)
{
    if (security_is_loopback(host) || security_has_token(s) || (s != NULL && s->insecure))
        return 0;
    return err_set(err, errlen, SLUICE_ERR_DENIED,
                   "listen on %s: refusing to serve beyond loopback without authentication: "
                   "give --auth-token-file (or set %s), or --insecure on a trusted network",
                   host, SECURITY_ENV_TOKEN_FILE);
}

int security_parse_flag(struct sluice_security_options *o, const char *name, const char *value)
{
    if (strcmp(name, "--insecure") == 0) {
        o->insecure = true;
        return 1;
    }
    const char **slot = NULL;
    if (strcmp(name, "--auth-token-file") == 0)
        slot = &o->auth_token_file;
    else if (strcmp(name, "--tls-cert") == 0)
        slot = &o->tls_cert;
    else if (strcmp(name, "--tls-key") == 0)
        slot = &o->tls_key;
    else if (strcmp(name, "--tls-ca") == 0)
        slot = &o->tls_ca;
    else if (strcmp(name, "--tls-worker-name") == 0)
        slot = &o->tls_worker_name;
    else
        return 0;
    if (value == NULL || *value == '\0')
        return -1;
    *slot = value;
    return 2;
}
