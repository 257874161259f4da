/* The frame decoder is a two-state machine: reading a header (need == 0, header_have counts
 * the header bytes seen) or reading a payload (need is the validated frame length, have counts
 * the payload bytes copied into buf). A payload found whole in one fed chunk is handed over in
 * place, even when its header came in an earlier chunk, and never touches buf; buf is used, and
 * grown, only for payloads cut by a chunk boundary or filled directly (frame_decoder_space), and
 * may be taken over from on_frame (frame_decoder_detach) or replaced between payloads
 * (frame_decoder_swap). on_frame must not feed or release the decoder it is called from. */
#include "frame.h"

#include "error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void frame_decoder_init(struct frame_decoder *d, uint32_t max_frame)
{
    memset(d, 0, sizeof *d);
    d->max_frame = max_frame ? max_frame : FRAME_DEFAULT_MAX;
}

void frame_decoder_release(struct frame_decoder *d)
{
    free(d->buf);
    d->buf = NULL;
    d->buf_cap = 0;
}

static uint32_t read_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static int fail(struct frame_decoder *d, int rc)
{
    d->failed = rc;
    return rc;
}

/* Makes room for a payload of d->need bytes. Growth doubles, bounded by max_frame, so a stream
 * of slowly growing frames does not reallocate for each one. The old contents are never needed,
 * hence free and malloc rather than realloc. */
static int reserve(struct frame_decoder *d)
{
    if (d->need <= d->buf_cap)
        return 0;
    size_t cap = d->buf_cap * 2;
    if (cap < d->need)
        cap = d->need;
    if (cap > d->max_frame)
        cap = d->max_frame;
    uint8_t *buf = malloc(cap);
    if (buf == NULL)
        return SLUICE_ERR_NOMEM;
    free(d->buf);
    d->buf = buf;
    d->buf_cap = cap;
    return 0;
}

int frame_decoder_feed(struct frame_decoder *d, const uint8_t *data, size_t len, frame_cb on_frame,
                       void *user)
{
    if (d->failed)
        return d->failed;

    size_t pos = 0;
    while (pos < len) {
        size_t avail = len - pos;
        int rc;

        if (d->need == 0) {
            uint32_t n;
            if (d->header_have == 0 && avail >= FRAME_HEADER_SIZE) {
                n = read_be32(data + pos);
                pos += FRAME_HEADER_SIZE;
            } else {
                size_t take = FRAME_HEADER_SIZE - d->header_have;
                if (take > avail)
                    take = avail;
                memcpy(d->header + d->header_have, data + pos, take);
                d->header_have += take;
                pos += take;
                if (d->header_have < FRAME_HEADER_SIZE)
                    break;
                d->header_have = 0;
                n = read_be32(d->header);
            }
            if (n == 0)
                return fail(d, SLUICE_ERR_PROTOCOL);
            if (n > d->max_frame)
                return fail(d, SLUICE_ERR_TOO_LARGE);
            d->need = n;
            d->have = 0;
            continue;
        }

        if (d->have == 0 && avail >= d->need) {
            /* The whole payload is in this chunk: hand it over in place. */
            size_t n = d->need;
            d->need = 0;
            pos += n;
            rc = on_frame(user, data + pos - n, n);
            if (rc != 0)
                return fail(d, rc);
            continue;
        }

        /* The payload continues in a later chunk, so it must be assembled in buf. */
        if (d->have == 0) {
            rc = reserve(d);
            if (rc != 0)
                return fail(d, rc);
        }
        size_t take = d->need - d->have;
        if (take > avail)
            take = avail;
        memcpy(d->buf + d->have, data + pos, take);
        d->have += take;
        pos += take;
        if (d->have == d->need) {
            size_t n = d->need;
            d->need = 0;
            d->have = 0;
            rc = on_frame(user, d->buf, n);
            if (rc != 0)
                return fail(d, rc);
        }
    }
    return 0;
}

int frame_decoder_space(struct frame_decoder *d, uint8_t **dst, size_t *len)
{
    *dst = NULL;
    *len = 0;
    if (d->failed || d->need == 0)
        return 0;
    if (d->have == 0) {
        int rc = reserve(d);
        if (rc != 0)
            return fail(d, rc);
    }
    *dst = d->buf + d->have;
    *len = d->need - d->have;
    return 0;
}

int frame_decoder_filled(struct frame_decoder *d, size_t n, frame_cb on_frame, void *user)
{
    if (d->failed)
        return d->failed;
    assert(d->need > 0 && n >= 1 && n <= d->need - d->have);
    d->have += n;
    if (d->have < d->need)
        return 0;
    size_t len = d->need;
    d->need = 0;
    d->have = 0;
    int rc = on_frame(user, d->buf, len);
    return rc != 0 ? fail(d, rc) : 0;
}

uint8_t *frame_decoder_detach(struct frame_decoder *d, size_t *cap)
{
    uint8_t *buf = d->buf;
    *cap = d->buf_cap;
    d->buf = NULL;
    d->buf_cap = 0;
    return buf;
}

uint8_t *frame_decoder_swap(struct frame_decoder *d, uint8_t *buf, size_t cap, size_t *old_cap)
{
    assert(d->have == 0);
    uint8_t *old = d->buf;
    *old_cap = d->buf_cap;
    d->buf = buf;
    d->buf_cap = cap;
    return old;
}

void frame_write_header(uint8_t out[FRAME_HEADER_SIZE], uint32_t len)
{
    out[0] = (uint8_t)(len >> 24);
    out[1] = (uint8_t)(len >> 16);
    out[2] = (uint8_t)(len >> 8);
    out[3] = (uint8_t)len;
}
