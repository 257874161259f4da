/* One framed TCP connection on a libuv loop: the machinery the RPC server and client share
 * (reading, frame decoding, Envelope unpacking, the write queue, backpressure, closing).
 *
 * Happy path: the owner embeds a struct conn in its own object, calls conn_init() (which
 * initializes the TCP handle), accepts or connects on conn->tcp, then calls conn_start(). Every
 * complete frame is unpacked and handed to ops->on_envelope; conn_send() packs an Envelope into
 * one allocation (header and payload together, with the uv_write_t inside) and queues it.
 *
 * Failure modes: end of stream, a socket error, a zero or over-limit frame length, or an
 * undecodable Envelope is reported once through ops->on_error, after which the connection closes
 * itself; the owner closes it for its own reasons with conn_close(). Either way ops->on_closed
 * runs from the handle's close callback, after every write callback has run, and from that
 * moment the owner may free the memory that holds the conn. on_error is never called for a close
 * the owner asked for.
 *
 * Large frames: a payload of at least CONN_DIRECT_MIN bytes is read from the socket straight into
 * the frame decoder's buffer (no copy out of the read buffer), and after a frame of at least
 * CONN_READ_BUFFER_SIZE bytes the next header is read on its own, so that the payload after it
 * can be read directly too. A GetElementsReply Envelope in the plain shape of ewire.h is
 * delivered as a view (its payload points into the frame, not into a copy), and when that frame
 * lies in a buffer of its own, on_envelope may take the buffer over with conn_take_frame(); a
 * writer sends such a reply with conn_send_elements(), straight from the payload's memory.
 *
 * TLS: after conn_use_tls(), the bytes on the socket are TLS records and everything above the
 * byte layer stays the same. Ciphertext read from the socket goes into the session and the
 * plaintext it yields into the frame decoder (the payload of a large frame is decrypted straight
 * into the decoder's buffer, so conn_take_frame and the pool work as without TLS). Every frame
 * written is encrypted at once, in the order written, and its ciphertext written with uv_write in
 * blocks as it is produced; the frame completes (its sent callback, for conn_send_elements) when
 * its last block has been written, or has failed to be. Frames written before the handshake
 * completes are held, in order, and encrypted once it has; they count as pending writes from the
 * start. Since the ciphertext of a frame is held until written, the memory behind the backlog is
 * at most about twice max_pending_write. A failed handshake or a record that does not decrypt is
 * reported through on_error with SLUICE_ERR_AUTH and a line starting "tls: "; the alert that
 * tells the peer why is written before the handle closes. A plain connection whose peer turns out
 * to speak TLS (or the other way round) fails the same way, with a message that says so; the
 * accepting TLS end first answers a plain peer with a plain Error frame (code SLUICE_ERR_AUTH)
 * saying that TLS is required. The direct reads from the socket into the decoder are off under
 * TLS; plain connections take the same path as without TLS support, one branch aside.
 *
 * Backpressure: with max_pending_write > 0, the conn stops reading once more than that many
 * bytes it was asked to send wait to be written; frames already read in the same chunk are kept
 * (copied) and handed over later, not dropped. When the backlog falls to half the limit, kept
 * frames are handed over first, then reading resumes. So the queued bytes exceed the limit by at
 * most the size of the Envelopes sent in answer to one frame.
 *
 * Threading: all functions run on the loop's thread; callbacks run there too. */
#ifndef SLUICE_COMMON_CONN_H
#define SLUICE_COMMON_CONN_H

#include "common/frame.h"
#include "wire.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Size of the read buffer each connection allocates on its first read and reuses. */
#define CONN_READ_BUFFER_SIZE (256u << 10)

struct auth_hs;
struct bufpool;
struct inproc_link;
struct shm_region;
struct conn;
struct tls_ctx;
struct tls_session;

struct conn_ops {
    /* One decoded Envelope; env is freed when the call returns. The owner may close the conn
     * from here; no further Envelope is delivered after that. */
    void (*on_envelope)(struct conn *c, const Sluice__Envelope *env);
    /* The connection failed: code is UV_EOF, another negative errno, SLUICE_ERR_PROTOCOL,
     * SLUICE_ERR_TOO_LARGE, or SLUICE_ERR_AUTH for a TLS failure (why starts with "tls: "); why
     * is one line for a log or an error message. The conn closes right after this returns (after
     * a TLS failure, once the alert for the peer is written, unless the owner closes it first).
     * May be NULL. */
    void (*on_error)(struct conn *c, int code, const char *why);
    /* The handle has closed; the last callback for this conn. */
    void (*on_closed)(struct conn *c);
};

/* Frames whose payload reaches at least this size are read straight into the decoder's buffer. */
#define CONN_DIRECT_MIN (64u << 10)
/* Element payloads of at least this size go over an in-process connection's link (conn.link). */
#define CONN_LINK_MIN (64u << 10)

/* Called once for a frame sent with conn_send_elements: status 0 when it was written, or the
 * negative code of why it was not (UV_ECANCELED when the conn closed first). */
typedef void (*conn_sent_cb)(void *arg, int status);

/* A packed frame: 4-byte header and Envelope in one allocation, with its write request. A frame
 * from conn_send_elements holds only the bytes before the payload in data; the payload (ext) is
 * the sender's and is written from where it lies. */
struct conn_frame {
    uv_write_t req;
    struct conn *conn;
    size_t len;         /* header + payload bytes in data */
    const uint8_t *ext; /* the first of the pieces written after data, not owned; or NULL */
    size_t ext_len;     /* the bytes of those pieces */
    conn_sent_cb sent;  /* NULL, or called when the write completes */
    void *sent_arg;
    /* TLS only: the next frame held until the handshake completes, and the pieces after data
     * (a copy of conn_send_elements' array, inside this allocation). */
    struct conn_frame *next;
    const uv_buf_t *segs;
    unsigned nsegs;
    uint8_t data[];
};

struct conn_deferred; /* a frame read while reading was paused */
struct conn_cipher;   /* TLS: ciphertext for one write */

struct conn {
    uv_tcp_t tcp; /* data is free for the owner */
    const struct conn_ops *ops;
    struct frame_decoder dec;
    uint32_t max_frame;
    size_t max_pending_write; /* 0: never stop reading */
    uint8_t *rbuf;            /* CONN_READ_BUFFER_SIZE bytes, or NULL before the first read */
    /* NULL, or where buffers for large payloads come from (set by the owner after conn_init);
     * the owner hands buffers taken with conn_take_frame back to it. */
    struct bufpool *pool;
    size_t pending_write; /* bytes passed to uv_write whose callback has not run */
    unsigned writes;      /* write requests whose callback has not run */
    struct conn_deferred *deferred_head, *deferred_tail;
    bool direct;        /* the buffer last given to libuv lies in the decoder (direct filling) */
    bool exact_header;  /* the last frame was large: read the next header on its own */
    bool takeable;      /* during on_envelope: conn_take_frame may hand over the frame's buffer */
    bool paused;        /* reading stopped by backpressure */
    bool draining;      /* closes once the queued writes are done; reads nothing more */
    bool closing;       /* uv_close has been called */
    bool sniffed;       /* the first bytes read have been checked for a TLS record */
    bool heard;         /* at least one byte has been read from the peer */
    bool tls_accepting; /* TLS: this end accepted the connection */
    /* The stream is one end of an in-process socket pair (inproc.h), opened by the owner with
     * uv_tcp_open: conn_start sets no TCP option and asks for no peer address (the owner names
     * the peer). */
    bool local;
    /* With local: the pair's link (inproc.h), one reference owned by the conn and dropped when
     * it closes; the owner sets it after conn_init. A GetElementsReply of at least
     * CONN_LINK_MIN payload bytes sent with conn_send_elements puts its payload on the link and
     * only its envelope, with an empty payload and a count above 0, on the socket; such an
     * envelope received is delivered with the link's next block as its payload, which
     * conn_take_frame hands over (a block of inproc_pool()). */
    struct inproc_link *link;
    void *link_block; /* during on_envelope: the block delivered, until taken */
    size_t link_cap;
    /* With local: the connection's shared region (shm_region.h, docs/design.md "Shared-memory
     * reads"), one reference owned by the conn and dropped when it closes; the owner sets it
     * after conn_init. It works as link does, across processes: a GetElementsReply of at least
     * CONN_LINK_MIN payload bytes sent with conn_send_elements goes into the region's ring when
     * it fits (else over the socket, as usual) and only its envelope on the socket; such an
     * envelope received is delivered with the ring's next block as its payload, which
     * conn_take_shm hands over. A ring that holds no valid block there fails the conn with
     * SLUICE_ERR_PROTOCOL. */
    struct shm_region *shm;
    bool shm_block;    /* during on_envelope: a block of the ring delivered, until taken */
    uint64_t shm_pos;  /* its position */
    uint64_t shm_sent; /* the writer's side: elements and bytes that went through the region */
    uint64_t shm_sent_bytes;
    uint64_t shm_inplace_bytes; /* of those, announced in place in the arena */
    /* During ops->on_closed only: the region the connection had (shm is NULL by then). */
    struct shm_region *shm_closed;
    char peer[64]; /* "IP:PORT" of the peer, or the owner's name for it */
    /* TLS (conn_use_tls): the session; frames written before its handshake completed; the
     * ciphertext being gathered for the next write; spare blocks for it; a buffer gathering small
     * pieces of a frame into whole records and one receiving the plaintext of small records. All
     * NULL for plain TCP. */
    struct tls_session *tls;
    struct conn_frame *held_head, *held_tail;
    struct conn_cipher *tls_out;
    uint8_t *tls_spare;
    unsigned tls_nspare;
    uint8_t *tls_stage, *tls_plain;
    /* Frames held while the loop thread is corked (conn_cork), and the next conn holding some. */
    struct conn_frame *cork_head, *cork_tail;
    struct conn *cork_next;
    bool corked; /* on the thread's list of conns holding frames */
};

/* Initializes c and its TCP handle on loop. max_frame 0 means RPC_DEFAULT_MAX_FRAME. From here on
 * the handle must be closed with conn_close() and ops->on_closed will run. Returns 0 or a negative
 * libuv code (then nothing was initialized). */
int conn_init(struct conn *c, uv_loop_t *loop, const struct conn_ops *ops, uint32_t max_frame,
              size_t max_pending_write);

/* Makes c speak TLS with a session of t: the accepting end when host is NULL, else the dialling
 * end, verifying the server against host (the name or address dialled). Only between conn_init
 * and conn_start. Returns 0, or SLUICE_ERR_NOMEM / SLUICE_ERR_INVALID with the reason in err (the
 * owner closes the conn). */
int conn_use_tls(struct conn *c, const struct tls_ctx *t, const char *host, char *err,
                 size_t errlen);

/* For a connected handle: sets TCP_NODELAY, fills c->peer from the socket (unless the owner
 * already set it) and starts reading; under TLS, the dialling end sends its ClientHello. Returns 0
 * or a negative libuv code; the owner closes the conn on failure. */
int conn_start(struct conn *c);

/* Packs env into a new frame. Returns 0, SLUICE_ERR_INVALID for an Envelope that packs to zero
 * bytes (a zero length is not a valid frame), SLUICE_ERR_TOO_LARGE when it packs to more than
 * max_frame bytes, or SLUICE_ERR_NOMEM. The caller owns *out. */
int conn_frame_pack(const Sluice__Envelope *env, uint32_t max_frame, struct conn_frame **out);
void conn_frame_free(struct conn_frame *f);
/* Copies f, a frame of conn_frame_pack not yet written, into *out (the caller's). Returns 0 or
 * SLUICE_ERR_NOMEM. */
int conn_frame_copy(const struct conn_frame *f, struct conn_frame **out);

/* Queues f for writing and always takes ownership of it. A frame without a sent callback, on a
 * plain connection with nothing queued before it and reading not paused, is written at once
 * (uv_try_write) and freed before this returns when the socket took all of it; any other goes
 * through a write request (uv_write), counted until its callback. Returns 0, SLUICE_ERR_CLOSED
 * when the conn is closing or draining, or a negative libuv code when uv_write refuses (the
 * owner should then close the conn). */
int conn_write(struct conn *c, struct conn_frame *f);

/* Corking: between conn_cork() and the matching conn_uncork() on a thread, the frames
 * conn_write() queues on plain (not TLS) connections are held, and conn_uncork() writes each
 * connection's in one writev, in order: replies produced together (a group commit's waiters)
 * cost one system call per connection instead of one each. Calls nest; the outermost uncork
 * writes (at once, as conn_write does, when none has a sent callback). Held frames count as
 * pending writes (backpressure, draining) from the moment they are queued; any other write on
 * the connection writes the held ones first. A connection closed meanwhile has its held frames
 * dropped. Loop thread only. */
void conn_cork(void);
void conn_uncork(void);

/* conn_frame_pack (with c's max_frame) followed by conn_write. */
int conn_send(struct conn *c, const Sluice__Envelope *env);

/* The most pieces a payload sent with conn_send_elements may come in. */
#define CONN_MAX_SEGS 128

/* Sends Envelope {id, get_elements_reply {count, eos, payload}} (ewire.h) without copying the
 * payload, which is the concatenation of the nsegs pieces in segs (the array itself may go
 * when this returns): their bytes must stay valid and unchanged until sent(arg, status) runs,
 * which it does exactly once, on the loop thread, after the bytes are written or have failed
 * to be (before on_closed). Returns 0; or, without calling sent, SLUICE_ERR_CLOSED when the
 * conn is closing or draining, SLUICE_ERR_TOO_LARGE when the Envelope is over max_frame bytes,
 * SLUICE_ERR_INVALID for more than CONN_MAX_SEGS pieces, SLUICE_ERR_NOMEM, or a negative libuv
 * code when uv_write refuses (the owner should then close the conn). */
int conn_send_elements(struct conn *c, uint64_t id, uint32_t count, bool eos, const uv_buf_t *segs,
                       unsigned nsegs, conn_sent_cb sent, void *arg);

/* Only from ops->on_envelope, for a GetElementsReply: when the Envelope is a view into a frame
 * that was assembled in a buffer of its own, hands that buffer (a malloc'd block of *cap bytes)
 * over and returns it; env's pointers, the payload's included, keep pointing into it. The caller
 * frees it, or gives it back to c->pool. Returns NULL otherwise (the payload is then valid only
 * during the call, as usual). */
void *conn_take_frame(struct conn *c, size_t *cap);

/* Only from ops->on_envelope, for a GetElementsReply whose payload came through c->shm: hands
 * the block over and returns the region with one reference for it, and its position in *pos;
 * the caller gives it back with shm_region_release(region, pos) from any thread, and env's
 * payload stays valid until then. Returns NULL otherwise. */
struct shm_region *conn_take_shm(struct conn *c, uint64_t *pos);

/* Sends a Hello with RPC_PROTOCOL_VERSION, role and incarnation, and hs's auth flag and nonce
 * (auth.h) when hs is not NULL. */
int conn_send_hello(struct conn *c, Sluice__Role role, uint64_t incarnation,
                    const struct auth_hs *hs);

/* Sends AuthProof { mac } (auth.h). */
int conn_send_proof(struct conn *c, const uint8_t mac[32]);

/* Limits the frames read from now on to max_frame bytes (0: back to the conn's own max_frame),
 * e.g. a small limit until the peer has authenticated. A frame whose header was already read is
 * not affected. */
void conn_set_max_frame(struct conn *c, uint32_t max_frame);

/* Sends an Error Envelope with id 0 (a complaint about the connection itself) and closes the conn
 * once it is written; nothing more is read. */
void conn_reject(struct conn *c, int code, const char *msg);

/* Closes the handle; idempotent. Pending writes are cancelled. */
void conn_close(struct conn *c);

/* Formats HOST:PORT, bracketing a host that contains ':'. */
void conn_format_address(char *buf, size_t len, const char *host, int port);

#endif
