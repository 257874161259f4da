/* The security settings of one server or client, loaded once from sluice_security_options
 * (<sluice/sluice.h>) and shared, read-only, by every connection it makes or accepts.
 *
 * What it holds: the shared secret of --auth-token-file (or SLUICE_AUTH_TOKEN_FILE), used by the
 * handshake of auth.h; the TLS contexts of tls.h; whether a server may listen beyond loopback
 * without a token (--insecure).
 *
 * Threading: security_ctx_new and security_ctx_free run on any thread; a loaded context is
 * immutable and may be read from any thread, so one context serves a server's loop and its callers
 * at once. */
#ifndef SLUICE_COMMON_SECURITY_H
#define SLUICE_COMMON_SECURITY_H

#include "tls.h" /* struct tls_ctx, enum security_side */

#include <sluice/sluice.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SECURITY_TOKEN_MIN 16
#define SECURITY_TOKEN_MAX 4096
#define SECURITY_ENV_TOKEN_FILE "SLUICE_AUTH_TOKEN_FILE"

struct security_ctx {
    int sides; /* enum security_side bits */
    uint8_t token[SECURITY_TOKEN_MAX];
    size_t token_len;     /* 0: no authentication */
    char token_path[512]; /* where the token came from, for messages; "" without one */
    struct tls_ctx *tls;  /* NULL: plain TCP */
    bool insecure;
    /* The name workers' certificates are verified against ("" : the host each worker advertises);
     * set only on a reader's context with TLS. */
    char tls_worker_name[256];
};

/* Loads the settings of o (NULL: the defaults) for sides (enum security_side bits). Reads the token
 * file (o's, else the one SLUICE_AUTH_TOKEN_FILE names) and the TLS files. Returns 0 and *out (free
 * with security_ctx_free); or SLUICE_ERR_INVALID, SLUICE_ERR_NOT_FOUND or a negative errno with
 * "auth-token-file PATH: why" / "tls-cert PATH: why" in err. */
int security_ctx_new(const struct sluice_security_options *o, int sides, struct security_ctx **out,
                     char *err, size_t errlen);
void security_ctx_free(struct security_ctx *s);

/* True when s (NULL allowed) asks for authentication / TLS. */
bool security_has_token(const struct security_ctx *s);
bool security_has_tls(const struct security_ctx *s);

/* True for an address that only this machine can reach: 127.0.0.0/8, ::1, "localhost". */
bool security_is_loopback(const char *host);

/* The protected-by-default rule for a server about to listen on host: returns 0 when host is
 * loopback, when s has a token, or when s is insecure; otherwise SLUICE_ERR_DENIED with the
 * reason and what to do about it in err. part names the flag's owner in the message. */
int security_check_listen(const struct security_ctx *s, const char *host, char *err, size_t errlen);

/* Command lines: when name is one of the security flags, stores value (NULL for --insecure,
 * which takes none) into o and returns 1 (2 when the flag consumed value); returns 0 for any
 * other name, and -1 when a flag that needs a value has none. Values are kept as pointers. */
int security_parse_flag(struct sluice_security_options *o, const char *name, const char *value);

/* The usage lines of those flags; `server` adds --insecure. */
#define SECURITY_USAGE_CLIENT                                                                      \
    "  --auth-token-file F      the cluster's shared secret (default: $SLUICE_AUTH_TOKEN_FILE)\n"  \
    "  --tls-ca F               verify servers against this CA and speak TLS\n"                    \
    "  --tls-cert F --tls-key F this side's certificate and key (PEM)\n"
#define SECURITY_USAGE_SERVER                                                                      \
    "  --auth-token-file F      the cluster's shared secret (default: $SLUICE_AUTH_TOKEN_FILE)\n"  \
    "  --tls-cert F --tls-key F this server's certificate and key (PEM): serve TLS only\n"         \
    "  --tls-ca F               require client certificates signed by this CA; a worker also\n"    \
    "                           verifies the dispatcher against it\n"                              \
    "  --insecure               allow listening beyond loopback without --auth-token-file\n"

#endif
