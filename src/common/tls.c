#include "tls.h"

#include "error.h"

int tls_ctx_new(const struct sluice_security_options *o, int sides, struct tls_ctx **out, char *err,
                size_t errlen)
{
    (void)sides;
    *out = NULL;
    if (o && (o->tls_cert || o->tls_key || o->tls_ca))
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED, "TLS: not available in this build");
    return 0;
}

void tls_ctx_free(struct tls_ctx *t)
{
    (void)t;
}
