/* TLS for the connections of conn.h (OpenSSL): the contexts a server or client loads once from
 * its certificate, key and CA files, and the TLS session of one connection, which works on memory
 * only (no socket): ciphertext from the peer goes in with tls_session_feed, plaintext comes out of
 * tls_session_read; plaintext goes in with tls_session_write, and the ciphertext for the peer is
 * handed to the session's sink as it is produced. conn.c moves the ciphertext to and from the
 * socket. The session keeps no buffer of its own: OpenSSL copies the bytes fed into its record
 * buffer as it reads them, and hands the records it writes straight to the sink. (OpenSSL itself
 * also copies plaintext: into its record buffer before encrypting, out of it after decrypting.)
 *
 * What is verified, and by whom:
 * - A server speaks TLS when it has tls_cert and tls_key (both, or neither). With tls_ca as well,
 *   it requires a client certificate that chains to that CA (mutual TLS); the client's name is
 *   not checked.
 * - A client speaks TLS when it has tls_ca. It verifies the server's chain against that CA (only
 *   that CA: the system's store is not used) and the server's certificate against the host name
 *   or IP address it dialled (subjectAltName DNS or IP entries), and presents tls_cert/tls_key
 *   when given.
 * - Half a configuration is an error, never a silent plain connection: a certificate without its
 *   key or a key without its certificate; for a client (a worker is one too), a certificate
 *   without tls_ca; for a server, tls_ca without a certificate and key.
 * - TLS 1.2 at least; TLS 1.3 preferred; AES-GCM first, then ChaCha20-Poly1305; no
 *   renegotiation, no compression, no session resumption.
 *
 * Threading: a loaded context is immutable and shared by every connection of its owner, on any
 * thread. A session belongs to one connection and is used on its loop's thread only. */
#ifndef SLUICE_COMMON_TLS_H
#define SLUICE_COMMON_TLS_H

#include <sluice/sluice.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tls_ctx;
struct tls_session;

/* Which ends of connections a context serves: a worker is both (it serves readers and dials
 * the dispatcher). */
enum security_side { SECURITY_CLIENT = 1, SECURITY_SERVER = 2 };

/* Loads the TLS files of o for sides (enum security_side bits). Returns 0 with *out NULL when o
 * asks for no TLS, 0 with a context, or SLUICE_ERR_INVALID (or a negative errno for a file that
 * cannot be opened) with "tls-cert PATH: why" (or tls-key, tls-ca) in err. */
int tls_ctx_new(const struct sluice_security_options *o, int sides, struct tls_ctx **out, char *err,
                size_t errlen);
void tls_ctx_free(struct tls_ctx *t);

/* Whether t (NULL allowed) has the accepting side (a certificate and key) / the dialling side. */
bool tls_ctx_serves(const struct tls_ctx *t);
bool tls_ctx_dials(const struct tls_ctx *t);

/* Receives ciphertext for the peer, in order, as the session produces it (during
 * tls_session_handshake, _read and _write). Copies it and returns 0, or returns -1 when out of
 * memory (the call producing it then fails). */
typedef int (*tls_sink_cb)(void *arg, const uint8_t *data, size_t len);

/* A session for one connection: the accepting end when host is NULL (t must serve), else the
 * dialling end, which verifies the server against host, a DNS name or an IP address (t must
 * dial). Ciphertext goes to sink(arg, ...). Returns 0 and *out (free with tls_session_free), or
 * SLUICE_ERR_NOMEM / SLUICE_ERR_INVALID with the reason in err. */
int tls_session_new(const struct tls_ctx *t, const char *host, tls_sink_cb sink, void *arg,
                    struct tls_session **out, char *err, size_t errlen);
void tls_session_free(struct tls_session *s);

/* Gives the session len bytes of ciphertext received from the peer, without copying them: they
 * must stay valid and unchanged until the session has taken them all, i.e. until
 * tls_session_handshake or tls_session_read returns 0 (wants more), or the session is given up.
 * Only when the previous bytes have all been taken (tls_session_unread is 0). */
void tls_session_feed(struct tls_session *s, const uint8_t *data, size_t len);
/* Bytes fed and not yet taken. */
size_t tls_session_unread(const struct tls_session *s);

/* Advances the handshake with what has been fed. Returns 1 once it is complete (and at every
 * later call), 0 while it waits for more ciphertext, or SLUICE_ERR_AUTH with a line starting
 * "tls: " in why (e.g. "tls: certificate verify failed: hostname mismatch"). Either way, what
 * the handshake wants sent (its messages, or an alert that tells the peer why) has gone to the
 * sink. */
int tls_session_handshake(struct tls_session *s, char *why, size_t whylen);
bool tls_session_done(const struct tls_session *s);

/* Decrypts into buf (up to len bytes, at most one TLS record's worth per call), after the
 * handshake. Returns the number of bytes (> 0); 0 when more ciphertext is needed; UV_EOF when the
 * peer closed the session (close_notify); or SLUICE_ERR_AUTH with "tls: ..." in why (a record
 * that fails to decrypt or authenticate, an alert from the peer). */
long tls_session_read(struct tls_session *s, uint8_t *buf, size_t len, char *why, size_t whylen);

/* Encrypts len bytes into records of at most 16 KiB each, after the handshake, and hands them to
 * the sink. Returns 0, or SLUICE_ERR_AUTH (SLUICE_ERR_NOMEM when the sink failed) with
 * "tls: ..." in why. */
int tls_session_write(struct tls_session *s, const uint8_t *data, size_t len, char *why,
                      size_t whylen);

/* The negotiated protocol and cipher suite, e.g. "TLSv1.3 TLS_AES_128_GCM_SHA256", for logs. */
void tls_session_describe(const struct tls_session *s, char *buf, size_t len);

/* Whether the first bytes a plain connection received (n >= 3) are the start of a TLS record (a
 * handshake or an alert), i.e. the peer speaks TLS and this end does not. Pure. */
bool tls_looks_like_record(const uint8_t *p, size_t n);

#endif
