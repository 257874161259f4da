/* A framed TCP connection. Bytes read land in one reused buffer and go through the frame
 * decoder, except the rest of a large payload, which libuv reads straight into the decoder's
 * buffer; each frame is unpacked (or, for a plain GetElementsReply, viewed) and handed to the
 * owner. Writes are counted (requests and bytes) from uv_write to their callback; libuv runs
 * every write callback, cancelled or not, before the close callback, so on_closed is the last
 * thing that touches the conn. A frame the socket takes whole at once (write_now) is never
 * counted: it needs no request. Under TLS the bytes on the socket go through conn_tls.c. */
#include "conn_internal.h"

#include "auth.h"
#include "bufpool.h"
#include "error.h"
#include "ewire.h"
#include "inproc.h"
#include "rpc.h"
#include "shm_region.h"
#include "tls.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conn_deferred {
    struct conn_deferred *next;
    size_t len;
    uint8_t data[];
};

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

/* A frame is done: its bytes were written (status 0) or never will be. */
void conn_complete_frame(struct conn *c, struct conn_frame *f, int status)
{
    c->pending_write -= f->len + f->ext_len;
    if (f->sent)
        f->sent(f->sent_arg, status);
    free(f);
}

static void on_close(uv_handle_t *h)
{
    struct conn *c = (struct conn *)h; /* tcp is the first member */
    conn_tls_cancel_held(c);
    /* libuv has run every write callback by now (cancelling what was not written). */
    assert(c->writes == 0 && c->pending_write == 0);
    free(c->rbuf);
    c->rbuf = NULL;
    frame_decoder_release(&c->dec);
    free_deferred(c);
    conn_tls_release(c);
    inproc_link_unref(c->link);
    c->link = NULL;
    /* The owner's on_closed may still ask which region this was (shm_closed); the reference
     * goes after it. */
    struct shm_region *shm = c->shm;
    if (shm)
        shm_region_arena_stop(shm);
    c->shm = NULL;
    c->shm_closed = shm;
    c->ops->on_closed(c);
    shm_region_unref(shm);
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
void conn_fail(struct conn *c, int code, const char *why)
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
bool conn_direct_space(struct conn *c, uint8_t **dst, size_t *len)
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
    if (conn_direct_space(c, &dst, &len)) {
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
    if (!inproc_link_pop(c->link, &block, &cap, &len)) {
        conn_fail(c, SLUICE_ERR_PROTOCOL, "an in-process reply without its payload");
        return;
    }
    r->payload = block;
    r->len = len;
    c->link_block = block;
    c->link_cap = cap;
    deliver_view(c, r, false);
    if (c->link_block) {
        struct bufpool *p = inproc_pool();
        if (p)
            bufpool_put(p, c->link_block, c->link_cap);
        else
            free(c->link_block);
        c->link_block = NULL;
    }
}

/* A shared-memory connection's reply whose payload lies in the region: delivered with the ring's
 * next block, which the owner may take (conn_take_shm); one it leaves is released at once. */
static void deliver_shm(struct conn *c, struct ewire_reply *r)
{
    uint8_t *data;
    uint64_t len, pos;
    if (shm_region_take(c->shm, &data, &len, &pos) != 0) {
        conn_fail(c, SLUICE_ERR_PROTOCOL, "shared memory: no valid block for a reply's payload");
        return;
    }
    r->payload = data;
    r->len = len;
    c->shm_block = true;
    c->shm_pos = pos;
    struct shm_region *region = c->shm;
    deliver_view(c, r, false);
    if (c->shm_block) {
        c->shm_block = false;
        shm_region_release(region, pos);
    }
}

/* The same for a reply in the general shape (an end of sequence that says how many elements the
 * worker sent, with the last of them): its payload is the ring's next block. */
static void deliver_shm_env(struct conn *c, Sluice__Envelope *env, Sluice__GetElementsReply *g)
{
    uint8_t *data;
    uint64_t len, pos;
    if (shm_region_take(c->shm, &data, &len, &pos) != 0) {
        conn_fail(c, SLUICE_ERR_PROTOCOL, "shared memory: no valid block for a reply's payload");
        return;
    }
    g->payload.data = data;
    g->payload.len = len;
    c->shm_block = true;
    c->shm_pos = pos;
    struct shm_region *region = c->shm;
    c->ops->on_envelope(c, env);
    /* The payload is not the unpacker's to free. */
    g->payload.data = NULL;
    g->payload.len = 0;
    if (c->shm_block) {
        c->shm_block = false;
        shm_region_release(region, pos);
    }
}

/* ---- the unpacking arena ----------------------------------------------------------------------
 */

/* An envelope lives only during on_envelope (conn.h), so what protobuf-c allocates to unpack it
 * comes from one arena per thread, reset after delivery: no malloc and free per field of every
 * message received. Past its buffer the arena mallocs, and grows its buffer for next time up to
 * UNPACK_ARENA_MAX. A delivery that nests inside another (none is known) unpacks with malloc. */
#define UNPACK_ARENA_MIN ((size_t)16 << 10)
#define UNPACK_ARENA_MAX ((size_t)1 << 20)

/* Under AddressSanitizer the arena's free space is poisoned, so that a handler reading an
 * envelope after its delivery is caught as it would be with malloc. */
#if defined(__SANITIZE_ADDRESS__)
#define ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_ASAN 1
#endif
#endif
#ifdef ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct arena_extra {
    struct arena_extra *next;
    max_align_t data[];
};

struct unpack_arena {
    uint8_t *buf;
    size_t cap, used, wanted;
    struct arena_extra *extra;
    bool busy;
};

static _Thread_local struct unpack_arena unpack_arena;

/* The arena's buffer goes when its thread exits. */
static pthread_key_t arena_key;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static bool arena_key_ok;

static void arena_thread_exit(void *p)
{
    struct unpack_arena *a = p;
    if (a->buf)
        ARENA_UNPOISON(a->buf, a->cap);
    free(a->buf);
    a->buf = NULL;
    a->cap = 0;
}

static void arena_key_make(void)
{
    arena_key_ok = pthread_key_create(&arena_key, arena_thread_exit) == 0;
}

static void *arena_alloc(void *user, size_t size)
{
    struct unpack_arena *a = user;
    const size_t align = sizeof(max_align_t);
    size = (size + align - 1) / align * align;
    a->wanted += size;
    if (a->buf && a->cap - a->used >= size) {
        void *p = a->buf + a->used;
        a->used += size;
        ARENA_UNPOISON(p, size);
        return p;
    }
    struct arena_extra *e = malloc(sizeof *e + size);
    if (!e)
        return NULL;
    e->next = a->extra;
    a->extra = e;
    return e->data;
}

static void arena_free(void *user, void *p)
{
    /* Everything goes at the reset. */
    (void)user;
    (void)p;
}

static void arena_reset(struct unpack_arena *a)
{
    while (a->extra) {
        struct arena_extra *e = a->extra;
        a->extra = e->next;
        free(e);
    }
    if (a->buf)
        ARENA_POISON(a->buf, a->used);
    if (a->wanted > a->cap && a->cap < UNPACK_ARENA_MAX) {
        size_t cap = a->cap ? a->cap : UNPACK_ARENA_MIN;
        while (cap < a->wanted && cap < UNPACK_ARENA_MAX)
            cap *= 2;
        pthread_once(&arena_once, arena_key_make);
        uint8_t *b = arena_key_ok && pthread_setspecific(arena_key, a) == 0 ? malloc(cap) : NULL;
        if (b) {
            if (a->buf)
                ARENA_UNPOISON(a->buf, a->cap);
            free(a->buf);
            ARENA_POISON(b, cap);
            a->buf = b;
            a->cap = cap;
        }
    }
    a->used = a->wanted = 0;
}

/* Unpacks and delivers one frame. Returns 0 to go on, or non-zero when the conn is closing. */
static int dispatch(struct conn *c, const uint8_t *payload, size_t len)
{
    struct ewire_reply r;
    if (ewire_reply_decode(payload, len, &r)) {
        if (c->link && r.count > 0 && r.len == 0)
            deliver_linked(c, &r);
        else if (c->shm && r.count > 0 && r.len == 0)
            deliver_shm(c, &r);
        else
            deliver_view(c, &r, c->dec.buf != NULL && payload == c->dec.buf);
        return c->closing || c->draining ? SLUICE_ERR_CLOSED : 0;
    }
    struct unpack_arena *a = &unpack_arena;
    ProtobufCAllocator alloc = {arena_alloc, arena_free, a};
    bool arena = !a->busy;
    a->busy = true;
    Sluice__Envelope *env = sluice__envelope__unpack(arena ? &alloc : NULL, len, payload);
    if (env != NULL) {
        Sluice__GetElementsReply *g = env->body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY
                                          ? env->get_elements_reply
                                          : NULL;
        if (c->shm && g && g->count > 0 && g->payload.len == 0)
            deliver_shm_env(c, env, g);
        else
            c->ops->on_envelope(c, env);
        if (!arena)
            sluice__envelope__free_unpacked(env, NULL);
    }
    if (arena) {
        arena_reset(a);
        a->busy = false;
    }
    if (env == NULL) {
        char why[SLUICE_ERRMSG_SIZE];
        snprintf(why, sizeof why, "undecodable envelope (%zu bytes)", len);
        conn_fail(c, SLUICE_ERR_PROTOCOL, why);
        return SLUICE_ERR_CLOSED;
    }
    return c->closing || c->draining ? SLUICE_ERR_CLOSED : 0;
}

static bool over_limit(const struct conn *c)
{
    return c->max_pending_write != 0 && c->pending_write > c->max_pending_write;
}

int conn_on_frame(void *user, const uint8_t *payload, size_t len)
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
            conn_fail(c, SLUICE_ERR_NOMEM, "out of memory");
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

void conn_decoder_failed(struct conn *c, int rc)
{
    char why[SLUICE_ERRMSG_SIZE];
    if (rc == SLUICE_ERR_PROTOCOL)
        snprintf(why, sizeof why, "zero-length frame");
    else if (rc == SLUICE_ERR_TOO_LARGE)
        snprintf(why, sizeof why, "frame over the %u-byte limit", c->dec.max_frame);
    else
        snprintf(why, sizeof why, "reading frames: %s", sluice_strerror(rc));
    conn_fail(c, rc, why);
}

/* A plain connection's first bytes: a peer that speaks TLS would otherwise show up as a frame
 * length of hundreds of megabytes. Returns true when it failed the conn. */
static bool plain_peer_speaks_tls(struct conn *c, const uint8_t *data, size_t n)
{
    c->sniffed = true;
    if (!tls_looks_like_record(data, n))
        return false;
    conn_fail(c, SLUICE_ERR_AUTH,
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
            conn_fail(c, UV_EOF, "closed by peer during the TLS handshake");
        else
            conn_fail(c, (int)nread, nread == UV_EOF ? "closed by peer" : uv_strerror((int)nread));
        return;
    }
    c->heard = true;
    if (c->draining)
        return;
    if (c->tls) {
        conn_tls_read(c, (const uint8_t *)buf->base, (size_t)nread);
        return;
    }
    int rc;
    if (c->direct) {
        c->direct = false;
        rc = frame_decoder_filled(&c->dec, (size_t)nread, conn_on_frame, c);
    } else {
        if (!c->sniffed && plain_peer_speaks_tls(c, (const uint8_t *)buf->base, (size_t)nread))
            return;
        rc = frame_decoder_feed(&c->dec, (const uint8_t *)buf->base, (size_t)nread, conn_on_frame,
                                c);
    }
    if (rc == 0 || c->closing || c->draining)
        return;
    conn_decoder_failed(c, rc);
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
        conn_fail(c, rc, uv_strerror(rc));
}

/* What follows a completed write request of either kind. */
void conn_after_write(struct conn *c, int status)
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
        conn_fail(c, status, why);
        return;
    }
    if (c->paused && c->pending_write <= c->max_pending_write / 2)
        resume(c);
}

void conn_on_write(uv_write_t *req, int status)
{
    struct conn_frame *f = (struct conn_frame *)req; /* req is the first member */
    struct conn *c = f->conn;
    c->writes--;
    conn_complete_frame(c, f, status);
    conn_after_write(c, status);
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
    return conn_tls_start(c);
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

int conn_frame_copy(const struct conn_frame *f, struct conn_frame **out)
{
    assert(f->ext == NULL && f->segs == NULL);
    struct conn_frame *c = malloc(sizeof *c + f->len);
    if (c == NULL)
        return SLUICE_ERR_NOMEM;
    memset(c, 0, sizeof *c);
    c->len = f->len;
    memcpy(c->data, f->data, f->len);
    *out = c;
    return 0;
}

/* ---- writing now ----------------------------------------------------------------------------- */

/* Writes bufs[0..n) on c's socket at once when nothing is queued before them (uv_try_write),
 * and returns how many of their bytes went; it then advances bufs past them (*first: the first
 * buffer with bytes left). A write request left to libuv costs an epoll_ctl to re-arm the
 * socket and a pass through the loop for its callback, for every reply; most replies fit in the
 * socket's buffer at once. Not while reading is paused: the callback of a queued write resumes
 * it. */
static size_t write_now(struct conn *c, uv_buf_t *bufs, unsigned n, unsigned *first)
{
    *first = 0;
    if (c->paused || c->tls)
        return 0;
    int rc = uv_try_write((uv_stream_t *)&c->tcp, bufs, n);
    if (rc <= 0)
        return 0; /* UV_EAGAIN, or an error the write request then reports */
    size_t left = (size_t)rc;
    while (*first < n && left >= bufs[*first].len) {
        left -= bufs[*first].len;
        (*first)++;
    }
    if (*first < n) {
        bufs[*first].base += left;
        bufs[*first].len -= (unsigned)left;
    }
    return (size_t)rc;
}

/* ---- corking --------------------------------------------------------------------------------- */

/* Frames per writev when writing what a conn held. */
#define CORK_MAX_BUFS 64

static _Thread_local unsigned cork_depth;
static _Thread_local struct conn *cork_list; /* conns holding frames, via cork_next */

void conn_cork(void)
{
    cork_depth++;
}

/* The write callback of held frames written together: f (whose req it is) and the ones chained
 * after it. */
static void on_write_held(uv_write_t *req, int status)
{
    struct conn_frame *f = (struct conn_frame *)req; /* req is the first member */
    struct conn *c = f->conn;
    while (f) {
        struct conn_frame *next = f->next;
        c->writes--;
        conn_complete_frame(c, f, status);
        f = next;
    }
    conn_after_write(c, status);
}

/* Writes the frames c holds, CORK_MAX_BUFS per writev, or drops them if c is closing. */
static void write_held(struct conn *c)
{
    struct conn_frame *head = c->cork_head;
    c->cork_head = c->cork_tail = NULL;
    int rc = c->closing ? UV_ECANCELED : 0;
    while (head && rc == 0) {
        uv_buf_t bufs[CORK_MAX_BUFS];
        unsigned n = 0;
        bool callbacks = false;
        struct conn_frame *f = head, *last = head;
        for (; f && n < CORK_MAX_BUFS; f = f->next) {
            bufs[n++] = uv_buf_init((char *)f->data, (unsigned)f->len);
            callbacks = callbacks || f->sent;
            last = f;
        }
        last->next = NULL;
        /* Frames without a sent callback, written whole at once, are done here. */
        unsigned first = 0;
        if (!callbacks && write_now(c, bufs, n, &first) > 0 && first == n) {
            for (struct conn_frame *g = head, *next; g; g = next) {
                next = g->next;
                c->writes--;
                conn_complete_frame(c, g, 0);
            }
            /* What a write callback does after them (a draining conn's close). */
            conn_after_write(c, 0);
            if (c->closing)
                rc = UV_ECANCELED; /* nothing more to write */
            head = f;
            continue;
        }
        rc = uv_write(&head->req, (uv_stream_t *)&c->tcp, bufs + first, n - first, on_write_held);
        if (rc != 0)
            last->next = f; /* dropped below with the rest */
        else
            head = f;
    }
    for (struct conn_frame *f = head, *next; f; f = next) {
        next = f->next;
        c->writes--;
        conn_complete_frame(c, f, rc);
    }
    if (rc != 0 && rc != UV_ECANCELED) {
        char why[SLUICE_ERRMSG_SIZE];
        snprintf(why, sizeof why, "write: %s", uv_strerror(rc));
        conn_fail(c, rc, why);
    }
}

void conn_uncork(void)
{
    assert(cork_depth > 0);
    if (--cork_depth > 0)
        return;
    while (cork_list) {
        struct conn *c = cork_list;
        cork_list = c->cork_next;
        c->cork_next = NULL;
        c->corked = false;
        if (c->cork_head)
            write_held(c);
    }
}

int conn_write(struct conn *c, struct conn_frame *f)
{
    if (c->closing || c->draining) {
        free(f);
        return SLUICE_ERR_CLOSED;
    }
    if (cork_depth > 0 && !c->tls) {
        f->conn = c;
        f->next = NULL;
        if (c->cork_tail)
            c->cork_tail->next = f;
        else
            c->cork_head = f;
        c->cork_tail = f;
        if (!c->corked) {
            c->corked = true;
            c->cork_next = cork_list;
            cork_list = c;
        }
        c->pending_write += f->len;
        c->writes++;
        return 0;
    }
    if (c->cork_head)
        write_held(c);
    if (c->tls) {
        int rc = conn_tls_write_frame(c, f);
        if (rc != 0)
            free(f);
        return rc;
    }
    f->conn = c;
    uv_buf_t buf = uv_buf_init((char *)f->data, (unsigned)f->len);
    /* Written whole at once, a frame without a sent callback is done. */
    unsigned first = 0;
    if (!f->sent && write_now(c, &buf, 1, &first) > 0 && first == 1) {
        free(f);
        return 0;
    }
    int rc = uv_write(&f->req, (uv_stream_t *)&c->tcp, &buf, 1, conn_on_write);
    if (rc != 0) {
        free(f);
        return rc;
    }
    c->pending_write += f->len;
    c->writes++;
    return 0;
}

static int send_shm(struct conn *c, uint64_t id, uint32_t count, bool eos, const uv_buf_t *segs,
                    unsigned nsegs, size_t len, conn_sent_cb sent, void *arg);

/* A reply of the general shape (counted, delivered) on a shared-memory connection: its payload
 * goes into the ring and the Envelope, packed with an empty payload, on the socket. Returns
 * SLUICE_ERR_LIMIT when the ring has no room now (nothing was sent). */
static int send_shm_env(struct conn *c, const Sluice__Envelope *env,
                        const Sluice__GetElementsReply *r)
{
    Sluice__GetElementsReply body = *r;
    body.payload.data = NULL;
    body.payload.len = 0;
    Sluice__Envelope e = *env;
    e.get_elements_reply = &body;
    struct conn_frame *f;
    int rc = conn_frame_pack(&e, c->max_frame, &f);
    if (rc != 0)
        return rc;
    struct iovec iov = {r->payload.data, r->payload.len};
    rc = shm_region_write(c->shm, &iov, 1, r->payload.len);
    if (rc != 0) {
        conn_frame_free(f);
        return rc == SLUICE_ERR_TOO_LARGE ? SLUICE_ERR_LIMIT : rc;
    }
    c->shm_sent += r->count;
    c->shm_sent_bytes += r->payload.len;
    /* Queued at once, behind every frame written before it, as send_shm's are. */
    return conn_write(c, f);
}

int conn_send(struct conn *c, const Sluice__Envelope *env)
{
    if (c->closing || c->draining)
        return SLUICE_ERR_CLOSED;
    int rc;
    /* A large GetElementsReply in the plain shape of ewire.h on a shared-memory connection: its
     * payload is copied into the region now, as conn_send_elements would. */
    const Sluice__GetElementsReply *r = env->body_case == SLUICE__ENVELOPE__BODY_GET_ELEMENTS_REPLY
                                            ? env->get_elements_reply
                                            : NULL;
    if (c->shm && !c->tls && r && r->count > 0 && r->payload.len >= CONN_LINK_MIN) {
        if (c->cork_head)
            write_held(c);
        uv_buf_t seg = uv_buf_init((char *)r->payload.data, (unsigned)r->payload.len);
        if (!r->counted && r->delivered == 0)
            rc = send_shm(c, env->id, r->count, r->end_of_sequence, &seg, 1, r->payload.len, NULL,
                          NULL);
        else
            rc = send_shm_env(c, env, r);
        if (rc != SLUICE_ERR_LIMIT && rc != SLUICE_ERR_NOMEM)
            return rc;
    }
    struct conn_frame *f;
    rc = conn_frame_pack(env, c->max_frame, &f);
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
    struct bufpool *p = inproc_pool();
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
    if (inproc_link_push(c->link, block, cap, len) != 0) {
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
    int rc = uv_write(&f->req, (uv_stream_t *)&c->tcp, &buf, 1, conn_on_write);
    if (rc != 0) {
        free(f);
        return rc;
    }
    c->pending_write += n;
    c->writes++;
    return 0;
}

/* conn_send_elements over a shared-memory connection: the payload is copied into the region's
 * ring and the envelope alone, with an empty payload, goes on the socket. Returns
 * SLUICE_ERR_LIMIT when the ring has no room now (nothing was sent; the caller sends over the
 * socket). */
static int send_shm(struct conn *c, uint64_t id, uint32_t count, bool eos, const uv_buf_t *segs,
                    unsigned nsegs, size_t len, conn_sent_cb sent, void *arg)
{
    struct conn_frame *f = malloc(sizeof *f + EWIRE_PREFIX_MAX);
    if (f == NULL)
        return SLUICE_ERR_NOMEM;
    *f = (struct conn_frame){.conn = c, .sent = sent, .sent_arg = arg};
    uint64_t env_len;
    size_t n = ewire_reply_prefix(f->data, id, count, eos, 0, &env_len);
    if (n == 0 || env_len > c->max_frame) {
        free(f);
        return SLUICE_ERR_TOO_LARGE;
    }
    /* A payload the pipeline built in the arena is announced where it lies; any other (or one
     * whose block is lent already) is copied into the ring. */
    int rc = SLUICE_ERR_NOT_FOUND;
    if (nsegs == 1)
        rc = shm_region_write_extern(c->shm, (const uint8_t *)segs[0].base, len);
    if (rc == 0) {
        c->shm_inplace_bytes += len;
    } else if (rc == SLUICE_ERR_NOT_FOUND) {
        struct iovec iov[CONN_MAX_SEGS];
        for (unsigned i = 0; i < nsegs; i++)
            iov[i] = (struct iovec){segs[i].base, segs[i].len};
        rc = shm_region_write(c->shm, iov, nsegs, len);
    }
    if (rc != 0) {
        free(f);
        /* No room now, or never: the socket carries it. */
        return rc == SLUICE_ERR_TOO_LARGE ? SLUICE_ERR_LIMIT : rc;
    }
    f->len = n;
    uv_buf_t buf = uv_buf_init((char *)f->data, (unsigned)n);
    /* A failed write leaves a block in the ring no envelope announces; the owner closes the
     * connection on a failed write, and the reader never reads past what was announced. */
    rc = uv_write(&f->req, (uv_stream_t *)&c->tcp, &buf, 1, conn_on_write);
    if (rc != 0) {
        free(f);
        return rc;
    }
    c->pending_write += n;
    c->writes++;
    c->shm_sent += count;
    c->shm_sent_bytes += len;
    return 0;
}

int conn_send_elements(struct conn *c, uint64_t id, uint32_t count, bool eos, const uv_buf_t *segs,
                       unsigned nsegs, conn_sent_cb sent, void *arg)
{
    if (c->closing || c->draining)
        return SLUICE_ERR_CLOSED;
    if (nsegs > CONN_MAX_SEGS)
        return SLUICE_ERR_INVALID;
    if (c->cork_head)
        write_held(c);
    size_t len = 0;
    for (unsigned i = 0; i < nsegs; i++)
        len += segs[i].len;
    if (c->link && !c->tls && count > 0 && len >= CONN_LINK_MIN) {
        int rc = send_linked(c, id, count, eos, segs, nsegs, len, sent, arg);
        if (rc != SLUICE_ERR_NOMEM)
            return rc;
        /* Out of memory for the block: the bytes go over the socket as usual. */
    }
    if (c->shm && !c->tls && count > 0 && len >= CONN_LINK_MIN) {
        int rc = send_shm(c, id, count, eos, segs, nsegs, len, sent, arg);
        if (rc != SLUICE_ERR_LIMIT && rc != SLUICE_ERR_NOMEM)
            return rc;
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
    if (c->tls)
        return conn_tls_send_elements(c, f, segs, nsegs);
    /* The prefix and the pieces go out in one writev (libuv copies the array); the payload is
     * never copied here. */
    uv_buf_t bufs[CONN_MAX_SEGS + 1];
    bufs[0] = uv_buf_init((char *)f->data, (unsigned)n);
    unsigned nbufs = 1;
    for (unsigned i = 0; i < nsegs; i++) {
        if (segs[i].len)
            bufs[nbufs++] = segs[i];
    }
    int rc = uv_write(&f->req, (uv_stream_t *)&c->tcp, bufs, nbufs, conn_on_write);
    if (rc != 0) {
        free(f);
        return rc;
    }
    c->pending_write += n + len;
    c->writes++;
    return 0;
}

struct shm_region *conn_take_shm(struct conn *c, uint64_t *pos)
{
    if (!c->shm_block)
        return NULL;
    c->shm_block = false;
    *pos = c->shm_pos;
    /* The block's own reference (shm_region_take) goes with it. */
    return c->shm;
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
    /* Written at once (conn_write): nothing is left to wait for. */
    if (c->writes == 0)
        conn_after_write(c, 0);
}

void conn_format_address(char *buf, size_t len, const char *host, int port)
{
    if (strchr(host, ':'))
        snprintf(buf, len, "[%s]:%d", host, port);
    else
        snprintf(buf, len, "%s:%d", host, port);
}
