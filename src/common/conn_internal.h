/* What conn.c (the plain connection) and conn_tls.c (its TLS record pump) share: the plain
 * connection's steps the pump reuses, and the pump's entry points. Loop thread only, like conn.h.
 */
#ifndef SLUICE_COMMON_CONN_INTERNAL_H
#define SLUICE_COMMON_CONN_INTERNAL_H

#include "conn.h"

/* ---- conn.c ---------------------------------------------------------------------------------- */

/* A frame is done: its bytes were written (status 0) or never will be; runs its sent callback and
 * frees it. */
void conn_complete_frame(struct conn *c, struct conn_frame *f, int status);
/* Reports a failure once through on_error and closes; nothing for a conn already closing. */
void conn_fail(struct conn *c, int code, const char *why);
/* Where the rest of a large payload in progress can go directly: sets *dst and *len and returns
 * true, or false when the bytes must be fed to the decoder. */
bool conn_direct_space(struct conn *c, uint8_t **dst, size_t *len);
/* The frame decoder's callback (user is the conn): delivers, or keeps while paused, one frame. */
int conn_on_frame(void *user, const uint8_t *payload, size_t len);
/* Fails the conn for the decoder's error rc. */
void conn_decoder_failed(struct conn *c, int rc);
/* What follows a completed write request of either kind: closing a draining conn, failing on a
 * write error, resuming reading. */
void conn_after_write(struct conn *c, int status);
/* The write callback of a plain frame (a struct conn_frame's req). */
void conn_on_write(uv_write_t *req, int status);

/* ---- conn_tls.c ------------------------------------------------------------------------------ */

/* Ciphertext arrived: advances the handshake, then decrypts into the frame decoder. */
void conn_tls_read(struct conn *c, const uint8_t *data, size_t n);
/* From conn_start, once reading has started: the dialling end sends its ClientHello. Returns 0 or
 * a negative code. */
int conn_tls_start(struct conn *c);
/* Holds f until the handshake completes, or encrypts and writes it now; counts it as pending.
 * Returns 0, or SLUICE_ERR_CLOSED when it could not be encrypted or written (the conn closes, and
 * f is the caller's again). */
int conn_tls_write_frame(struct conn *c, struct conn_frame *f);
/* conn_send_elements under TLS, for f with its prefix in place: keeps the pieces (a copy of their
 * array inside f while the handshake is under way) and writes f as conn_tls_write_frame does,
 * freeing it on failure. */
int conn_tls_send_elements(struct conn *c, struct conn_frame *f, const uv_buf_t *segs,
                           unsigned nsegs);
/* From the close callback: completes the frames still held for the handshake with UV_ECANCELED,
 * then (conn_tls_release) frees what TLS holds. */
void conn_tls_cancel_held(struct conn *c);
void conn_tls_release(struct conn *c);

#endif
