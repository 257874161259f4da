/* TLS record pumping for conn.c: ciphertext read from the socket goes through the session into
 * the frame decoder, and every frame written is encrypted and its ciphertext written in blocks.
 *
 * Under TLS, the read buffer receives ciphertext, which the session reads where it lies; the
 * plaintext of small records goes to a small buffer of its own and is fed to the decoder, while
 * the rest of a large payload is decrypted straight into the decoder's buffer. A frame written is
 * encrypted at once, its records gathered into one struct conn_cipher (blocks reused from a small
 * per-connection stock) written with one uv_write; the frame rides along and completes
 * (pending_write, sent) in that write's callback. Frames held for the handshake count as pending
 * writes from the moment they are written, and the close callback completes any still held with
 * UV_ECANCELED before on_closed. */
#include "conn_internal.h"

#include "error.h"
#include "ewire.h"
#include "log.h"
#include "tls.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* TLS: one write of ciphertext, in blocks of TLS_CHUNK bytes, completing frame (NULL for
 * handshake messages and alerts). */
struct conn_cipher {
    uv_write_t req;
    struct conn *conn;
    struct conn_frame *frame;
    unsigned n, cap; /* blocks in bufs, and room for */
    uv_buf_t *bufs;  /* small, or a malloc'd array */
    uv_buf_t small[4];
};

/* TLS: ciphertext is gathered in blocks of TLS_CHUNK bytes, and up to TLS_SPARE blocks (8 MiB)
 * per connection are kept for reuse rather than freed: freeing them and touching fresh memory for
 * every reply costs page faults (five times as many as without TLS, with 1 MiB elements, at 32
 * blocks). A connection keeps only as many as it once had in flight, so connections that carry
 * small messages keep a few. Pieces of a frame below TLS_SMALL bytes are gathered into records
 * of up to TLS_STAGE bytes rather than becoming records of their own; larger ones are encrypted
 * where they lie. */
#define TLS_CHUNK (64u << 10)
#define TLS_SPARE 128u
/* A large frame's ciphertext goes out in writes of this many blocks as it is produced, so the
 * peer decrypts the start of a frame while this end still encrypts the rest. */
#define TLS_WRITE_CHUNKS 4u
#define TLS_STAGE 16384u
#define TLS_SMALL 4096u

static uint8_t *chunk_get(struct conn *c)
{
    uint8_t *b = c->tls_spare;
    if (b == NULL)
        return malloc(TLS_CHUNK);
    memcpy(&c->tls_spare, b, sizeof c->tls_spare); /* the next spare is stored in the block */
    c->tls_nspare--;
    return b;
}

static void chunk_put(struct conn *c, uint8_t *b)
{
    if (c->tls_nspare == TLS_SPARE) {
        free(b);
        return;
    }
    memcpy(b, &c->tls_spare, sizeof c->tls_spare);
    c->tls_spare = b;
    c->tls_nspare++;
}

static void cipher_free(struct conn *c, struct conn_cipher *w)
{
    for (unsigned i = 0; i < w->n; i++)
        chunk_put(c, (uint8_t *)w->bufs[i].base);
    if (w->bufs != w->small)
        free(w->bufs);
    free(w);
}

static int tls_submit(struct conn *c, struct conn_frame *f);

/* The session's sink: appends ciphertext to c->tls_out, the write being gathered, and writes it
 * once it holds TLS_WRITE_CHUNKS full blocks. */
static int tls_sink(void *arg, const uint8_t *p, size_t n)
{
    struct conn *c = arg;
    struct conn_cipher *w = c->tls_out;
    if (w && w->n == TLS_WRITE_CHUNKS && w->bufs[w->n - 1].len == TLS_CHUNK) {
        if (tls_submit(c, NULL) != 0)
            return -1;
        w = NULL;
    }
    if (w == NULL) {
        if ((w = malloc(sizeof *w)) == NULL)
            return -1;
        w->conn = c;
        w->frame = NULL;
        w->n = 0;
        w->cap = sizeof w->small / sizeof w->small[0];
        w->bufs = w->small;
        c->tls_out = w;
    }
    while (n > 0) {
        uv_buf_t *last = w->n ? &w->bufs[w->n - 1] : NULL;
        if (last == NULL || last->len == TLS_CHUNK) {
            if (w->n == w->cap) {
                uv_buf_t *bufs = malloc(2 * w->cap * sizeof *bufs);
                if (bufs == NULL)
                    return -1;
                memcpy(bufs, w->bufs, w->n * sizeof *bufs);
                if (w->bufs != w->small)
                    free(w->bufs);
                w->bufs = bufs;
                w->cap *= 2;
            }
            uint8_t *b = chunk_get(c);
            if (b == NULL)
                return -1;
            w->bufs[w->n++] = uv_buf_init((char *)b, 0);
            last = &w->bufs[w->n - 1];
        }
        size_t k = TLS_CHUNK - last->len < n ? TLS_CHUNK - last->len : n;
        memcpy(last->base + last->len, p, k);
        last->len += k;
        p += k;
        n -= k;
    }
    return 0;
}

static void tls_discard(struct conn *c)
{
    if (c->tls_out) {
        cipher_free(c, c->tls_out);
        c->tls_out = NULL;
    }
}

static void on_cipher_write(uv_write_t *req, int status)
{
    struct conn_cipher *w = (struct conn_cipher *)req; /* req is the first member */
    struct conn *c = w->conn;
    struct conn_frame *f = w->frame;
    c->writes--;
    cipher_free(c, w);
    if (f)
        conn_complete_frame(c, f, status);
    conn_after_write(c, status);
}

/* Writes the ciphertext gathered so far; f (NULL for none) completes with that write. Returns 0,
 * or a negative libuv code (the ciphertext is dropped; f is the caller's again). */
static int tls_submit(struct conn *c, struct conn_frame *f)
{
    struct conn_cipher *w = c->tls_out;
    /* A frame always ends in a record, so its last bytes are still being gathered. */
    assert(w != NULL || f == NULL);
    if (w == NULL)
        return 0;
    c->tls_out = NULL;
    w->frame = f;
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, w->bufs, w->n, on_cipher_write);
    if (rc != 0) {
        cipher_free(c, w);
        return rc;
    }
    c->writes++;
    return 0;
}

/* Encrypts one piece of a frame, gathering small pieces in the stage (*staged bytes so far) so
 * they make whole records. Returns 0, or a negative code with why set. */
static int tls_put(struct conn *c, const uint8_t *p, size_t len, size_t *staged, char *why,
                   size_t whylen)
{
    if (len < TLS_SMALL && *staged + len <= TLS_STAGE) {
        memcpy(c->tls_stage + *staged, p, len);
        *staged += len;
        return 0;
    }
    if (*staged > 0) {
        int rc = tls_session_write(c->tls, c->tls_stage, *staged, why, whylen);
        *staged = 0;
        if (rc != 0)
            return rc;
    }
    if (len < TLS_SMALL) {
        memcpy(c->tls_stage, p, len);
        *staged = len;
        return 0;
    }
    return tls_session_write(c->tls, p, len, why, whylen);
}

/* Encrypts frame f (data, then its pieces) and writes the ciphertext; f completes when that
 * write does. Returns 0; or a negative code with why set, and f is the caller's again. After a
 * failure the session may be out of step with the peer: the caller closes the conn. */
static int tls_send(struct conn *c, struct conn_frame *f, const uv_buf_t *segs, unsigned nsegs,
                    char *why, size_t whylen)
{
    size_t staged = 0;
    int rc = tls_put(c, f->data, f->len, &staged, why, whylen);
    for (unsigned i = 0; rc == 0 && i < nsegs; i++)
        rc = tls_put(c, (const uint8_t *)segs[i].base, segs[i].len, &staged, why, whylen);
    if (rc == 0 && staged > 0)
        rc = tls_session_write(c->tls, c->tls_stage, staged, why, whylen);
    if (rc != 0) {
        tls_discard(c);
        return rc;
    }
    rc = tls_submit(c, f);
    if (rc != 0)
        return err_set(why, whylen, rc, "write: %s", uv_strerror(rc));
    return 0;
}

/* Reports a TLS failure and closes once the alert telling the peer why has been written. */
static void tls_fail(struct conn *c, int code, const char *why)
{
    if (c->closing || c->draining)
        return;
    if (c->ops->on_error)
        c->ops->on_error(c, code, why);
    if (c->closing)
        return;
    if (tls_submit(c, NULL) != 0 || c->writes == 0) {
        conn_close(c);
        return;
    }
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->draining = true;
}

/* The handshake has completed: the held frames go out, in order. */
static int tls_release_held(struct conn *c)
{
    char why[SLUICE_ERRMSG_SIZE];
    while (c->held_head && !c->closing && !c->draining) {
        struct conn_frame *f = c->held_head;
        c->held_head = f->next;
        if (c->held_head == NULL)
            c->held_tail = NULL;
        f->next = NULL;
        int rc = tls_send(c, f, f->segs, f->nsegs, why, sizeof why);
        if (rc != 0) {
            conn_complete_frame(c, f, rc);
            conn_fail(c, rc, why);
            return rc;
        }
    }
    return 0;
}

/* The first bytes from the peer of a TLS conn are not a TLS record: the peer speaks plain frames.
 * The accepting end tells it so in a plain Error frame (a client that does not speak TLS can read
 * nothing else), then both ends fail as for any TLS failure. */
static void tls_plain_peer(struct conn *c, bool accepting)
{
    static const char msg[] = "tls: this server requires TLS (give the client --tls-ca)";
    if (accepting) {
        Sluice__Error error = SLUICE__ERROR__INIT;
        error.code = SLUICE_ERR_AUTH;
        error.message = (char *)msg;
        Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
        env.body_case = SLUICE__ENVELOPE__BODY_ERROR;
        env.error = &error;
        struct conn_frame *f;
        if (conn_frame_pack(&env, c->max_frame, &f) == 0) {
            f->conn = c;
            uv_buf_t buf = uv_buf_init((char *)f->data, (unsigned)f->len);
            if (uv_write(&f->req, (uv_stream_t *)&c->tcp, &buf, 1, conn_on_write) == 0) {
                c->pending_write += f->len;
                c->writes++;
            } else {
                free(f);
            }
        }
        tls_fail(c, SLUICE_ERR_AUTH,
                 "tls: the peer does not speak TLS (a client without --tls-ca?)");
    } else {
        tls_fail(
            c, SLUICE_ERR_AUTH,
            "tls: the server does not speak TLS (is it started with --tls-cert and --tls-key?)");
    }
}

/* Ciphertext arrived: advance the handshake, then decrypt into the frame decoder. */
void conn_tls_read(struct conn *c, const uint8_t *data, size_t n)
{
    char why[SLUICE_ERRMSG_SIZE];
    if (!c->sniffed) {
        c->sniffed = true;
        if (n >= 3 && !tls_looks_like_record(data, n)) {
            tls_plain_peer(c, c->tls_accepting);
            return;
        }
    }
    /* The session reads the ciphertext where it lies, in the read buffer, which therefore stays
     * untouched until the session has taken all of it: the loop below decrypts until it has. */
    tls_session_feed(c->tls, data, n);
    if (!tls_session_done(c->tls)) {
        int hs = tls_session_handshake(c->tls, why, sizeof why);
        if (hs < 0) {
            tls_fail(c, hs, why);
            return;
        }
        int rc = tls_submit(c, NULL);
        if (rc != 0) {
            conn_fail(c, rc, uv_strerror(rc));
            return;
        }
        if (hs == 0)
            return;
        if (log_enabled(LOG_DEBUG)) {
            char desc[96];
            tls_session_describe(c->tls, desc, sizeof desc);
            log_debug("conn: %s: TLS handshake done (%s)", c->peer, desc);
        }
        if (tls_release_held(c) != 0)
            return;
    }
    while (!c->closing && !c->draining) {
        uint8_t *dst;
        size_t len;
        bool direct = conn_direct_space(c, &dst, &len);
        if (!direct) {
            dst = c->tls_plain;
            len = TLS_STAGE;
            /* After a large frame, as on_alloc does: the next header alone, so that the payload
             * after it is decrypted straight into its own buffer (a pooled one, if need be). */
            if (c->exact_header && c->dec.need == 0 && !c->dec.failed)
                len = FRAME_HEADER_SIZE - c->dec.header_have;
        }
        long got = tls_session_read(c->tls, dst, len, why, sizeof why);
        if (got == 0)
            break;
        if (got < 0) {
            if (got == UV_EOF)
                conn_fail(c, UV_EOF, why);
            else
                tls_fail(c, (int)got, why);
            return;
        }
        int rc = direct ? frame_decoder_filled(&c->dec, (size_t)got, conn_on_frame, c)
                        : frame_decoder_feed(&c->dec, dst, (size_t)got, conn_on_frame, c);
        if (rc != 0) {
            if (!c->closing && !c->draining)
                conn_decoder_failed(c, rc);
            return;
        }
    }
    /* Reading may make the session answer (a key update). */
    if (!c->closing && !c->draining) {
        int rc = tls_submit(c, NULL);
        if (rc != 0)
            conn_fail(c, rc, uv_strerror(rc));
    }
}

int conn_use_tls(struct conn *c, const struct tls_ctx *t, const char *host, char *err,
                 size_t errlen)
{
    assert(c->tls == NULL);
    /* One block: the stage gathering small pieces for writing, then the plaintext of small
     * records read. */
    c->tls_stage = malloc(2 * TLS_STAGE);
    if (c->tls_stage == NULL)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "tls: out of memory");
    c->tls_plain = c->tls_stage + TLS_STAGE;
    c->tls_accepting = host == NULL;
    int rc = tls_session_new(t, host, tls_sink, c, &c->tls, err, errlen);
    if (rc != 0) {
        free(c->tls_stage);
        c->tls_stage = c->tls_plain = NULL;
    }
    return rc;
}

/* Frees what TLS holds; from the close callback. */
void conn_tls_release(struct conn *c)
{
    tls_discard(c);
    while (c->tls_spare) {
        uint8_t *b = c->tls_spare;
        memcpy(&c->tls_spare, b, sizeof c->tls_spare);
        free(b);
    }
    c->tls_nspare = 0;
    tls_session_free(c->tls);
    c->tls = NULL;
    free(c->tls_stage);
    c->tls_stage = c->tls_plain = NULL;
}

void conn_tls_cancel_held(struct conn *c)
{
    /* Frames held for a TLS handshake that never completed were never handed to libuv. */
    while (c->held_head) {
        struct conn_frame *f = c->held_head;
        c->held_head = f->next;
        conn_complete_frame(c, f, UV_ECANCELED);
    }
    c->held_tail = NULL;
}

int conn_tls_start(struct conn *c)
{
    /* The dialling end speaks first (its ClientHello); the accepting end waits for it. */
    char why[SLUICE_ERRMSG_SIZE];
    int hs = tls_session_handshake(c->tls, why, sizeof why);
    if (hs < 0) {
        tls_discard(c);
        log_warn("conn: %s: %s", c->peer, why);
        return hs;
    }
    return tls_submit(c, NULL);
}

/* TLS: holds f until the handshake completes (f->segs must then outlive it), or encrypts and
 * writes it now. Counts f as pending either way. Returns 0, or SLUICE_ERR_CLOSED when the frame
 * could not be encrypted or written: the session may be out of step with the peer, so the conn
 * closes (f is then the caller's, and not counted). */
int conn_tls_write_frame(struct conn *c, struct conn_frame *f)
{
    f->conn = c;
    f->next = NULL;
    c->pending_write += f->len + f->ext_len;
    if (!tls_session_done(c->tls)) {
        if (c->held_tail)
            c->held_tail->next = f;
        else
            c->held_head = f;
        c->held_tail = f;
        return 0;
    }
    char why[SLUICE_ERRMSG_SIZE];
    int rc = tls_send(c, f, f->segs, f->nsegs, why, sizeof why);
    f->segs = NULL;
    if (rc == 0)
        return 0;
    c->pending_write -= f->len + f->ext_len;
    log_warn("conn: %s: %s; closing the connection", c->peer, why);
    conn_close(c);
    return SLUICE_ERR_CLOSED;
}

int conn_tls_send_elements(struct conn *c, struct conn_frame *f, const uv_buf_t *segs,
                           unsigned nsegs)
{
    f->segs = segs;
    f->nsegs = nsegs;
    if (!tls_session_done(c->tls)) {
        uintptr_t at = (uintptr_t)(f->data + EWIRE_PREFIX_MAX);
        at = (at + _Alignof(uv_buf_t) - 1) & ~(uintptr_t)(_Alignof(uv_buf_t) - 1);
        uv_buf_t *copy = (uv_buf_t *)at;
        memcpy(copy, segs, nsegs * sizeof *segs);
        f->segs = copy;
    }
    int rc = conn_tls_write_frame(c, f);
    if (rc != 0)
        free(f);
    return rc;
}
