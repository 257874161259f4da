/* The frame codec of docs/design.md §5: each frame is a u32 big-endian length, then that many bytes
 * (one serialized Envelope). Pure: the decoder is fed byte chunks by the socket in production
 * and by arrays in tests and the fuzzer, through the same function.
 *
 * Decoder contract: frame_decoder_feed() consumes bytes and calls on_frame for each complete
 * frame, in order. A zero length or a length over max_frame is rejected as soon as its 4 header
 * bytes are seen, before anything is allocated for it; the decoder then stays failed and every
 * later feed returns the same error. */
#ifndef SLUICE_COMMON_FRAME_H
#define SLUICE_COMMON_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_HEADER_SIZE 4
#define FRAME_DEFAULT_MAX (64u << 20) /* 64 MiB */

/* Called once per complete frame. payload is valid only during the call. Return 0 to go on, or
 * a negative code to stop: feed() then returns that code and the decoder stays failed. */
typedef int (*frame_cb)(void *user, const uint8_t *payload, size_t len);

struct frame_decoder {
    uint32_t max_frame;
    uint8_t header[FRAME_HEADER_SIZE];
    size_t header_have;
    uint8_t *buf; /* payload being assembled; allocated once the length is validated */
    size_t buf_cap;
    size_t need, have;
    int failed; /* 0, or the error every later feed returns */
};

/* max_frame 0 means FRAME_DEFAULT_MAX. */
void frame_decoder_init(struct frame_decoder *d, uint32_t max_frame);
void frame_decoder_release(struct frame_decoder *d);

/* Feeds len bytes. Returns 0, SLUICE_ERR_PROTOCOL for a zero length, SLUICE_ERR_TOO_LARGE for
 * an over-limit length, SLUICE_ERR_NOMEM, or the first non-zero return of on_frame. Frames
 * that lie whole inside data are passed to on_frame without copying. */
int frame_decoder_feed(struct frame_decoder *d, const uint8_t *data, size_t len, frame_cb on_frame,
                       void *user);

/* Direct filling, for a reader that can write bytes anywhere (a socket read): while a payload is
 * being assembled, its missing bytes may be written straight into the decoder's buffer instead
 * of being fed from a buffer of the reader's own. frame_decoder_space() sets *dst to where the
 * next payload byte goes and *len to the number of payload bytes still missing, allocating the
 * buffer first if needed; *len is 0 when no payload is in progress (a header is being read, or
 * the decoder failed), and the bytes must then be fed. Returns 0 or SLUICE_ERR_NOMEM (the
 * decoder then stays failed). frame_decoder_filled() records that n (1 <= n <= *len) bytes were
 * written there and, once the payload is whole, calls on_frame with it; it returns what
 * frame_decoder_feed() returns. Feeding and direct filling may alternate freely. */
int frame_decoder_space(struct frame_decoder *d, uint8_t **dst, size_t *len);
int frame_decoder_filled(struct frame_decoder *d, size_t n, frame_cb on_frame, void *user);

/* Only from on_frame, and only for a payload in the decoder's own buffer (payload == d->buf):
 * hands that buffer over to the caller, who frees it with free(). The payload stays where it is;
 * the decoder allocates a new buffer for the next payload that needs one. *cap receives the
 * buffer's size. */
uint8_t *frame_decoder_detach(struct frame_decoder *d, size_t *cap);

/* Gives the decoder buf (cap bytes, from malloc) to assemble payloads in from now on, in place of
 * its own buffer, which it returns (NULL when it had none) with its size in *old_cap. Only while
 * no payload is partly assembled (d->have == 0). */
uint8_t *frame_decoder_swap(struct frame_decoder *d, uint8_t *buf, size_t cap, size_t *old_cap);

/* Writes the 4-byte header for a payload of len bytes. */
void frame_write_header(uint8_t out[FRAME_HEADER_SIZE], uint32_t len);

#endif
