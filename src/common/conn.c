/* A framed TCP connection. Bytes read land in one reused buffer and go through the frame
 * decoder, except the rest of a large payload, which libuv reads straight into the decoder's
 * buffer; each frame is unpacked (or, for a plain GetElementsReply, viewed) and handed to the
 * owner. Writes are counted (requests and bytes) from uv_write to their callback; libuv runs
 * every write callback, cancelled or not, before the close callback, so on_closed is the last
 * thing that touches the conn.
 *
 * Under TLS, the read buffer receives ciphertext, which the session reads where it lies; the
 * plaintext of small records goes to a small buffer of its own and is fed to the decoder, while
 * the rest of a large payload is decrypted straight into the decoder's buffer. A frame written is
 * encrypted at once, its records gathered into one struct conn_cipher (blocks reused from a small
 * per-connection stock) written with one uv_write; the frame rides along and completes
 * (pending_write, sent) in that write's callback. Frames held for the handshake count as pending
 * writes from the moment they are written, and the close callback completes any still held with
 * UV_ECANCELED before on_closed. */
#include "conn.h"

#include "auth.h"
#include "bufpool.h"
#include "error.h"
#include "ewire.h"
#include "local.h"
#include "log.h"
#include "rpc.h"
#include "tls.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CONN_MAX_SEGS == RPC_MAX_SEGS, "rpc.h promises what conn.h allows");

struct conn_deferred {
    struct conn_deferred *next;
    size_t len;
    uint8_t data[];
};

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

int conn_init(struct conn *c, uv_loop_t *loop, const struct conn_ops *ops, uint32_t max_frame,
              size_t max_pending_write)
{
    memset(c, 0, sizeof *c);
    c->ops = ops;
    c->max_frame = max_frame ? max_frame : RPC_DEFAULT_MAX_FRAME;
    c->max_pending_write = max_pending_write;
    frame_decoder_init(&c->dec, c->max_frame);
    return uv_tcp_init(loop, &c->tcp);
}

static void free_deferred(struct conn *c)
{
    while (c->deferred_head) {
        struct conn_deferred *d = c->deferred_head;
        c->deferred_head = d->next;
        free(d);
    }
    c->deferred_tail = NULL;
}

static void tls_release(struct conn *c);

/* A frame is done: its bytes were written (status 0) or never will be. */
static void complete_frame(struct conn *c, struct conn_frame *f, int status)
{
    c->pending_write -= f->len + f->ext_len;
    if (f->sent)
        f->sent(f->sent_arg, status);
    free(f);
}

static void on_close(uv_handle_t *h)
{
    struct conn *c = (struct conn *)h; /* tcp is the first member */
    /* Frames held for a TLS handshake that never completed were never handed to libuv. */
    while (c->held_head) {
        struct conn_frame *f = c->held_head;
        c->held_head = f->next;
        complete_frame(c, f, UV_ECANCELED);
    }
    c->held_tail = NULL;
    /* libuv has run every write callback by now (cancelling what was not written). */
    assert(c->writes == 0 && c->pending_write == 0);
    free(c->rbuf);
    c->rbuf = NULL;
    frame_decoder_release(&c->dec);
    free_deferred(c);
    tls_release(c);
    local_link_unref(c->link);
    c->link = NULL;
    c->ops->on_closed(c);
}

void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

/* Reports a failure once and closes. Nothing is reported for a conn already closing, since its
 * owner either asked for the close or has already heard why. */
static void fail(struct conn *c, int code, const char *why)
{
    if (c->closing)
        return;
    if (c->ops->on_error)
        c->ops->on_error(c, code, why);
    conn_close(c);
}

/* Where the rest of a large payload in progress can go directly: sets *dst and *len and returns
 * true, or false when the bytes must be fed. A large payload about to start goes into a pooled
 * buffer when the decoder's own is too small (it was taken over with the previous frame,
 * typically). A failure to allocate leaves the decoder failed, and the next feed reports it. */
static bool direct_space(struct conn *c, uint8_t **dst, size_t *len)
{
    if (c->dec.need < CONN_DIRECT_MIN)
        return false;
    if (c->pool && c->dec.have == 0 && c->dec.buf_cap < c->dec.need && !c->dec.failed) {
        size_t cap, old_cap;
        uint8_t *b = bufpool_get(c->pool, c->dec.need, &cap);
        if (b)
            bufpool_put(c->pool, frame_decoder_swap(&c->dec, b, cap, &old_cap), old_cap);
    }
    return frame_decoder_space(&c->dec, dst, len) == 0 && *len > 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = (struct conn *)h;
    uint8_t *dst;
    size_t len;
    c->direct = false;
    if (c->tls) {
        /* Ciphertext: always into the read buffer, as much as there is. */
        if (c->rbuf == NULL)
            c->rbuf = malloc(CONN_READ_BUFFER_SIZE);
        buf->base = (char *)c->rbuf;
        buf->len = c->rbuf ? CONN_READ_BUFFER_SIZE : 0;
        return;
    }
    /* The rest of a large payload goes straight where the decoder assembles it. */
    if (direct_space(c, &dst, &len)) {
        c->direct = true;
        buf->base = (char *)dst;
        buf->len = len;
        return;
    }
    if (c->rbuf == NULL)
        c->rbuf = malloc(CONN_READ_BUFFER_SIZE);
    /* A zero-length buffer makes libuv report UV_ENOBUFS to on_read, which closes. */
    buf->base = (char *)c->rbuf;
    buf->len = c->rbuf ? CONN_READ_BUFFER_SIZE : 0;
    /* After a large frame, another one probably follows: read just its header, so that its
     * payload is read directly rather than partly through rbuf. */
    if (c->rbuf && c->exact_header && c->dec.need == 0 && !c->dec.failed)
        buf->len = FRAME_HEADER_SIZE - c->dec.header_have;
}

/* Delivers a plain GetElementsReply as a view into its frame. */
static void deliver_view(struct conn *c, const struct ewire_reply *r, bool own_buffer)
{
    Sluice__GetElementsReply body = SLUICE__GET_ELEMENTS_REPLY__INIT;
    body.count = r->count;
    body.end_of_sequence = r->end_of_sequence;
    body.payload.data = (uint8_t *)r->payload;
    body.payload.len = r->len;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.id = r->id;
    env.body_case = SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY;
    env.get_elements_reply = &body;
    c->takeable = own_buffer;
    c->ops->on_envelope(c, &env);
    c->takeable = false;
}

/* An in-process connection's reply whose payload came over the link: delivered with the link's
 * next block, which the owner may take (conn_take_frame); one it leaves goes back to the pool. */
static void deliver_linked(struct conn *c, struct ewire_reply *r)
{
    void *block;
    size_t cap, len;
    if (!local_link_pop(c->link, &block, &cap, &len)) {
        fail(c, SLUICE_ERR_PROTOCOL, "an in-process reply without its payload");
        return;
    }
    r->payload = block;
    r->len = len;
    c->link_block = block;
    c->link_cap = cap;
    deliver_view(c, r, false);
    if (c->link_block) {
        struct bufpool *p = local_pool();
        if (p)
            bufpool_put(p, c->link_block, c->link_cap);
        else
            free(c->link_block);
        c->link_block = NULL;
    }
}

/* Unpacks and delivers one frame. Returns 0 to go on, or non-zero when the conn is closing. */
static int dispatch(struct conn *c, const uint8_t *payload, size_t len)
{
    struct ewire_reply r;
    if (ewire_reply_decode(payload, len, &r)) {
        if (c->link && r.count > 0 && r.len == 0)
            deliver_linked(c, &r);
        else
            deliver_view(c, &r, c->dec.buf != NULL && payload == c->dec.buf);
        return c->closing || c->draining ? SLUICE_ERR_CLOSED : 0;
    }
    Sluice__Envelope *env = sluice__envelope__unpack(NULL, len, payload);
    if (env == NULL) {
        char why[SLUICE_ERRMSG_SIZE];
        snprintf(why, sizeof why, "undecodable envelope (%zu bytes)", len);
        fail(c, SLUICE_ERR_PROTOCOL, why);
        return SLUICE_ERR_CLOSED;
    }
    c->ops->on_envelope(c, env);
    sluice__envelope__free_unpacked(env, NULL);
    return c->closing || c->draining ? SLUICE_ERR_CLOSED : 0;
}

static bool over_limit(const struct conn *c)
{
    return c->max_pending_write != 0 && c->pending_write > c->max_pending_write;
}

static int on_frame(void *user, const uint8_t *payload, size_t len)
{
    struct conn *c = user;
    if (c->closing || c->draining)
        return SLUICE_ERR_CLOSED;
    c->exact_header = len >= CONN_READ_BUFFER_SIZE;
    if (c->paused) {
        /* Reading has stopped, but the rest of this chunk was already read: keep its frames,
         * in order, for when the write backlog drains. At most one chunk (plus one assembled
         * frame) is ever kept, because nothing more is read while paused. */
        struct conn_deferred *d = malloc(sizeof *d + len);
        if (d == NULL) {
            fail(c, SLUICE_ERR_NOMEM, "out of memory");
            return SLUICE_ERR_CLOSED;
        }
        d->next = NULL;
        d->len = len;
        memcpy(d->data, payload, len);
        if (c->deferred_tail)
            c->deferred_tail->next = d;
        else
            c->deferred_head = d;
        c->deferred_tail = d;
        return 0;
    }
    int rc = dispatch(c, payload, len);
    if (rc == 0 && over_limit(c)) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->paused = true;
    }
    return rc;
}

static void decoder_failed(struct conn *c, int rc)
{
    char why[SLUICE_ERRMSG_SIZE];
    if (rc == SLUICE_ERR_PROTOCOL)
        snprintf(why, sizeof why, "zero-length frame");
    else if (rc == SLUICE_ERR_TOO_LARGE)
        snprintf(why, sizeof why, "frame over the %u-byte limit", c->dec.max_frame);
    else
        snprintf(why, sizeof why, "reading frames: %s", sluice_strerror(rc));
    fail(c, rc, why);
}

static void tls_read(struct conn *c, const uint8_t *data, size_t n);

/* A plain connection's first bytes: a peer that speaks TLS would otherwise show up as a frame
 * length of hundreds of megabytes. Returns true when it failed the conn. */
static bool plain_peer_speaks_tls(struct conn *c, const uint8_t *data, size_t n)
{
    c->sniffed = true;
    if (!tls_looks_like_record(data, n))
        return false;
    fail(c, SLUICE_ERR_AUTH,
         "tls: the peer speaks TLS and this end does not (give it --tls-ca, or --tls-cert and "
         "--tls-key)");
    return true;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = (struct conn *)s;
    if (nread == 0 || c->closing)
        return;
    if (nread < 0) {
        if (c->tls && !tls_session_done(c->tls) && nread == UV_EOF)
            fail(c, UV_EOF, "closed by peer during the TLS handshake");
        else
            fail(c, (int)nread, nread == UV_EOF ? "closed by peer" : uv_strerror((int)nread));
        return;
    }
    c->heard = true;
    if (c->draining)
        return;
    if (c->tls) {
        tls_read(c, (const uint8_t *)buf->base, (size_t)nread);
        return;
    }
    int rc;
    if (c->direct) {
        c->direct = false;
        rc = frame_decoder_filled(&c->dec, (size_t)nread, on_frame, c);
    } else {
        if (!c->sniffed && plain_peer_speaks_tls(c, (const uint8_t *)buf->base, (size_t)nread))
            return;
        rc = frame_decoder_feed(&c->dec, (const uint8_t *)buf->base, (size_t)nread, on_frame, c);
    }
    if (rc == 0 || c->closing || c->draining)
        return;
    decoder_failed(c, rc);
}

/* Hands over the frames kept while paused, then resumes reading, as long as the backlog stays
 * within the limit. Runs from a write callback once the backlog is at half the limit. */
static void resume(struct conn *c)
{
    while (c->deferred_head && !over_limit(c)) {
        struct conn_deferred *d = c->deferred_head;
        c->deferred_head = d->next;
        if (c->deferred_head == NULL)
            c->deferred_tail = NULL;
        int rc = dispatch(c, d->data, d->len);
        free(d);
        if (rc != 0)
            return;
    }
    if (c->deferred_head || over_limit(c))
        return;
    c->paused = false;
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc != 0)
        fail(c, rc, uv_strerror(rc));
}

/* What follows a completed write request of either kind. */
static void after_write(struct conn *c, int status)
{
    if (c->closing)
        return;
    /* A draining conn has said all it had to say (an Error, a TLS alert) and closes once that
     * is written, or could not be: the failure that made it drain was reported already. */
    if (c->draining) {
        if (status < 0 || c->writes == 0)
            conn_close(c);
        return;
    }
    if (status < 0) {
        char why[SLUICE_ERRMSG_SIZE];
        snprintf(why, sizeof why, "write: %s", uv_strerror(status));
        fail(c, status, why);
        return;
    }
    if (c->paused && c->pending_write <= c->max_pending_write / 2)
        resume(c);
}

static void on_write(uv_write_t *req, int status)
{
    struct conn_frame *f = (struct conn_frame *)req; /* req is the first member */
    struct conn *c = f->conn;
    c->writes--;
    complete_frame(c, f, status);
    after_write(c, status);
}

/* ---- TLS ------------------------------------------------------------------------------------- */

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
        complete_frame(c, f, status);
    after_write(c, status);
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
            complete_frame(c, f, rc);
            fail(c, rc, why);
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
            if (uv_write(&f->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write) == 0) {
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
static void tls_read(struct conn *c, const uint8_t *data, size_t n)
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
            fail(c, rc, uv_strerror(rc));
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
        bool direct = direct_space(c, &dst, &len);
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
                fail(c, UV_EOF, why);
            else
                tls_fail(c, (int)got, why);
            return;
        }
        int rc = direct ? frame_decoder_filled(&c->dec, (size_t)got, on_frame, c)
                        : frame_decoder_feed(&c->dec, dst, (size_t)got, on_frame, c);
        if (rc != 0) {
            if (!c->closing && !c->draining)
                decoder_failed(c, rc);
            return;
        }
    }
    /* Reading may make the session answer (a key update). */
    if (!c->closing && !c->draining) {
        int rc = tls_submit(c, NULL);
        if (rc != 0)
            fail(c, rc, uv_strerror(rc));
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
static void tls_release(struct conn *c)
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

int conn_start(struct conn *c)
{
    int rc = c->local ? 0 : uv_tcp_nodelay(&c->tcp, 1);
    if (rc != 0)
        return rc;
    if (c->peer[0] == '\0') {
        struct sockaddr_storage ss;
        int namelen = (int)sizeof ss;
        char ip[INET6_ADDRSTRLEN];
        rc = uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &namelen);
        if (rc == 0)
            rc = uv_ip_name((const struct sockaddr *)&ss, ip, sizeof ip);
        if (rc != 0)
            return rc;
        int port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                            : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        conn_format_address(c->peer, sizeof c->peer, ip, port);
    }
    rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc != 0 || c->tls == NULL)
        return rc;
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

int conn_frame_pack(const Sluice__Envelope *env, uint32_t max_frame, struct conn_frame **out)
{
    size_t n = sluice__envelope__get_packed_size(env);
    if (n == 0)
        return SLUICE_ERR_INVALID;
    if (n > (max_frame ? max_frame : RPC_DEFAULT_MAX_FRAME))
        return SLUICE_ERR_TOO_LARGE;
    struct conn_frame *f = malloc(sizeof *f + FRAME_HEADER_SIZE + n);
    if (f == NULL)
        return SLUICE_ERR_NOMEM;
    f->conn = NULL;
    f->len = FRAME_HEADER_SIZE + n;
    f->ext = NULL;
    f->ext_len = 0;
    f->sent = NULL;
    f->sent_arg = NULL;
    f->next = NULL;
    f->segs = NULL;
    f->nsegs = 0;
    frame_write_header(f->data, (uint32_t)n);
    size_t packed = sluice__envelope__pack(env, f->data + FRAME_HEADER_SIZE);
    assert(packed == n);
    (void)packed;
    *out = f;
    return 0;
}

void conn_frame_free(struct conn_frame *f)
{
    free(f);
}

/* TLS: holds f until the handshake completes (f->segs must then outlive it), or encrypts and
 * writes it now. Counts f as pending either way. Returns 0, or SLUICE_ERR_CLOSED when the frame
 * could not be encrypted or written: the session may be out of step with the peer, so the conn
 * closes (f is then the caller's, and not counted). */
static int tls_write_frame(struct conn *c, struct conn_frame *f)
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

int conn_write(struct conn *c, struct conn_frame *f)
{
    if (c->closing || c->draining) {
        free(f);
        return SLUICE_ERR_CLOSED;
    }
    if (c->tls) {
        int rc = tls_write_frame(c, f);
        if (rc != 0)
            free(f);
        return rc;
    }
    f->conn = c;
    uv_buf_t buf = uv_buf_init((char *)f->data, (unsigned)f->len);
    int rc = uv_write(&f->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
    if (rc != 0) {
        free(f);
        return rc;
    }
    c->pending_write += f->len;
    c->writes++;
    return 0;
}

int conn_send(struct conn *c, const Sluice__Envelope *env)
{
    if (c->closing || c->draining)
        return SLUICE_ERR_CLOSED;
    struct conn_frame *f;
    int rc = conn_frame_pack(env, c->max_frame, &f);
    if (rc != 0)
        return rc;
    return conn_write(c, f);
}

/* conn_send_elements over an in-process connection's link: the payload is gathered into a block
 * that goes on the link, and the envelope alone, with an empty payload, on the socket. The pieces
 * are copied before this returns; sent runs when the envelope is written, as for any frame. */
static int send_linked(struct conn *c, uint64_t id, uint32_t count, bool eos, const uv_buf_t *segs,
                       unsigned nsegs, size_t len, conn_sent_cb sent, void *arg)
{
    struct conn_frame *f = malloc(sizeof *f + EWIRE_PREFIX_MAX);
    if (f == NULL)
        return SLUICE_ERR_NOMEM;
    /* Before the prefix: the struct's tail padding may overlap data. */
    *f = (struct conn_frame){.conn = c, .sent = sent, .sent_arg = arg};
    uint64_t env_len;
    size_t n = ewire_reply_prefix(f->data, id, count, eos, 0, &env_len);
    if (n == 0 || env_len > c->max_frame) {
        free(f);
        return SLUICE_ERR_TOO_LARGE;
    }
    struct bufpool *p = local_pool();
    size_t cap = len;
    uint8_t *block = p ? bufpool_get(p, len, &cap) : malloc(len);
    if (block == NULL) {
        free(f);
        return SLUICE_ERR_NOMEM;
    }
    size_t at = 0;
    for (unsigned i = 0; i < nsegs; i++) {
        memcpy(block + at, segs[i].base, segs[i].len);
        at += segs[i].len;
    }
    if (local_link_push(c->link, block, cap, len) != 0) {
        if (p)
            bufpool_put(p, block, cap);
        else
            free(block);
        free(f);
        return SLUICE_ERR_NOMEM;
    }
    f->len = n;
    uv_buf_t buf = uv_buf_init((char *)f->data, (unsigned)n);
    /* A failed write leaves the block queued with no envelope to claim it; the owner closes the
     * connection on a failed write (rpc.h), so no later envelope claims it either. */
    int rc = uv_write(&f->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
    if (rc != 0) {
        free(f);
        return rc;
    }
    c->pending_write += n;
    c->writes++;
    return 0;
}

int conn_send_elements(struct conn *c, uint64_t id, uint32_t count, bool eos, const uv_buf_t *segs,
                       unsigned nsegs, conn_sent_cb sent, void *arg)
{
    if (c->closing || c->draining)
        return SLUICE_ERR_CLOSED;
    if (nsegs > CONN_MAX_SEGS)
        return SLUICE_ERR_INVALID;
    size_t len = 0;
    for (unsigned i = 0; i < nsegs; i++)
        len += segs[i].len;
    if (c->link && !c->tls && count > 0 && len >= CONN_LINK_MIN) {
        int rc = send_linked(c, id, count, eos, segs, nsegs, len, sent, arg);
        if (rc != SLUICE_ERR_NOMEM)
            return rc;
        /* Out of memory for the block: the bytes go over the socket as usual. */
    }
    /* Under TLS, a frame held for the handshake keeps a copy of the pieces' array after its
     * prefix, aligned. */
    size_t room = c->tls ? EWIRE_PREFIX_MAX + _Alignof(uv_buf_t) + nsegs * sizeof(uv_buf_t)
                         : EWIRE_PREFIX_MAX;
    struct conn_frame *f = malloc(sizeof *f + room);
    if (f == NULL)
        return SLUICE_ERR_NOMEM;
    uint64_t env_len;
    size_t n = ewire_reply_prefix(f->data, id, count, eos, len, &env_len);
    if (n == 0 || env_len > c->max_frame) {
        free(f);
        return SLUICE_ERR_TOO_LARGE;
    }
    f->conn = c;
    f->len = n;
    f->ext = nsegs ? (const uint8_t *)segs[0].base : NULL;
    f->ext_len = len;
    f->sent = sent;
    f->sent_arg = arg;
    f->next = NULL;
    f->segs = NULL;
    f->nsegs = 0;
    if (c->tls) {
        f->segs = segs;
        f->nsegs = nsegs;
        if (!tls_session_done(c->tls)) {
            uintptr_t at = (uintptr_t)(f->data + EWIRE_PREFIX_MAX);
            at = (at + _Alignof(uv_buf_t) - 1) & ~(uintptr_t)(_Alignof(uv_buf_t) - 1);
            uv_buf_t *copy = (uv_buf_t *)at;
            memcpy(copy, segs, nsegs * sizeof *segs);
            f->segs = copy;
        }
        int rc = tls_write_frame(c, f);
        if (rc != 0)
            free(f);
        return rc;
    }
    /* The prefix and the pieces go out in one writev (libuv copies the array); the payload is
     * never copied here. */
    uv_buf_t bufs[CONN_MAX_SEGS + 1];
    bufs[0] = uv_buf_init((char *)f->data, (unsigned)n);
    unsigned nbufs = 1;
    for (unsigned i = 0; i < nsegs; i++) {
        if (segs[i].len)
            bufs[nbufs++] = segs[i];
    }
    int rc = uv_write(&f->req, (uv_stream_t *)&c->tcp, bufs, nbufs, on_write);
    if (rc != 0) {
        free(f);
        return rc;
    }
    c->pending_write += n + len;
    c->writes++;
    return 0;
}

void *conn_take_frame(struct conn *c, size_t *cap)
{
    *cap = 0;
    if (c->link_block) {
        void *b = c->link_block;
        *cap = c->link_cap;
        c->link_block = NULL;
        return b;
    }
    if (!c->takeable)
        return NULL;
    c->takeable = false;
    return frame_decoder_detach(&c->dec, cap);
}

int conn_send_hello(struct conn *c, Sluice__Role role, uint64_t incarnation,
                    const struct auth_hs *hs)
{
    Sluice__Hello hello = SLUICE__HELLO__INIT;
    hello.version = RPC_PROTOCOL_VERSION;
    hello.role = role;
    hello.incarnation = incarnation;
    if (hs)
        auth_hs_hello(hs, &hello);
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    return conn_send(c, &env);
}

int conn_send_proof(struct conn *c, const uint8_t mac[AUTH_MAC_LEN])
{
    Sluice__AuthProof proof = SLUICE__AUTH_PROOF__INIT;
    proof.mac.data = (uint8_t *)mac;
    proof.mac.len = AUTH_MAC_LEN;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_AUTH_PROOF;
    env.auth_proof = &proof;
    return conn_send(c, &env);
}

void conn_set_max_frame(struct conn *c, uint32_t max_frame)
{
    c->dec.max_frame = max_frame ? max_frame : c->max_frame;
}

void conn_reject(struct conn *c, int code, const char *msg)
{
    Sluice__Error error = SLUICE__ERROR__INIT;
    error.code = code;
    error.message = (char *)msg;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_ERROR;
    env.error = &error;
    if (conn_send(c, &env) != 0) {
        conn_close(c);
        return;
    }
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->draining = true;
}

void conn_format_address(char *buf, size_t len, const char *host, int port)
{
    if (strchr(host, ':'))
        snprintf(buf, len, "[%s]:%d", host, port);
    else
        snprintf(buf, len, "%s:%d", host, port);
}
