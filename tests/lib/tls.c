#include "lib/tls.h"

#include "lib/tmp.h"

#include "common/security.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char certs_dir[256];

const char *tls_certs_dir(void)
{
    if (certs_dir[0])
        return certs_dir;
    snprintf(certs_dir, sizeof certs_dir, "/tmp/sluice-tls-XXXXXX");
    if (mkdtemp(certs_dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/tests/integration/make_certs.sh %s", SLUICE_SOURCE_DIR,
             certs_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "make_certs.sh %s failed\n", certs_dir);
        exit(1);
    }
    return certs_dir;
}

const char *tls_path(const char *file)
{
    static char bufs[8][512];
    static unsigned next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tls_certs_dir(), file);
    return b;
}

struct security_ctx *tls_test_sec(const char *name, const char *ca, int sides)
{
    char cert[512] = "", key[512] = "", cafile[512] = "";
    if (name) {
        snprintf(cert, sizeof cert, "%s/%s.pem", tls_certs_dir(), name);
        snprintf(key, sizeof key, "%s/%s.key", tls_certs_dir(), name);
    }
    if (ca)
        snprintf(cafile, sizeof cafile, "%s/%s.pem", tls_certs_dir(), ca);
    struct sluice_security_options o = {
        .tls_cert = name ? cert : NULL,
        .tls_key = name ? key : NULL,
        .tls_ca = ca ? cafile : NULL,
    };
    struct security_ctx *s;
    char err[SLUICE_ERRMSG_SIZE];
    if (security_ctx_new(&o, sides, &s, err, sizeof err) != 0) {
        fprintf(stderr, "tls_test_sec: %s\n", err);
        exit(1);
    }
    return s;
}

void tls_certs_cleanup(void)
{
    if (!certs_dir[0])
        return;
    if (tmp_remove(certs_dir) != 0)
        fprintf(stderr, "could not remove %s\n", certs_dir);
    certs_dir[0] = '\0';
}
