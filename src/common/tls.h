/* TLS for the connections of conn.h (OpenSSL): the contexts a server or client loads once from
 * its certificate, key and CA files.
 *
 * A server speaks TLS when it has tls_cert and tls_key; with tls_ca as well it requires a client
 * certificate signed by that CA. A client speaks TLS when it has tls_ca, verifies the server's
 * certificate against it and against the host name or address it dialled, and presents
 * tls_cert/tls_key when given.
 *
 * Threading: a loaded context is immutable and shared by every connection of its owner. */
#ifndef SLUICE_COMMON_TLS_H
#define SLUICE_COMMON_TLS_H

#include "security.h"

/* Loads the TLS files of o for sides (enum sec_side bits). Returns 0 with *out NULL when o asks for
 * no TLS, 0 with a context, or a negative code with "tls-cert PATH: why" (or tls-key, tls-ca) in
 * err. */
int tls_ctx_new(const struct sluice_security_options *o, int sides, struct tls_ctx **out, char *err,
                size_t errlen);
void tls_ctx_free(struct tls_ctx *t);

#endif
