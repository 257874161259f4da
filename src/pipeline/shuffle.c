/* shuffle(): the buffer is an array of elements that grows to its capacity while the first
 * elements arrive (a huge BUFFER over a short source costs only what it holds). Slots
 * [0, count) hold elements; emptied slots are closed up by swapping the last one in. */
#include "shuffle.h"

#include "common/error.h"
#include "common/mix64.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>

struct rng {
    uint64_t s[4];
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = mix64(*x);
    *x += MIX64_GOLDEN;
    return z;
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, n) without modulo bias (rejection on the low end of the 128-bit product). */
static uint64_t rng_below(struct rng *r, uint64_t n)
{
    __uint128_t m = (__uint128_t)rng_next(r) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = (0 - n) % n;
        while (low < threshold) {
            m = (__uint128_t)rng_next(r) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

uint64_t pipe_salt_mix(uint64_t salt, uint64_t pass)
{
    if (pass == 0)
        return salt;
    uint64_t x = salt ^ (pass * 0xd1b54a32d192ed03ULL);
    return splitmix64(&x);
}

struct shuffle_iter {
    struct pipe_iter base;
    struct pipe_iter *up;
    struct rng rng;
    struct sluice_element *buf;
    size_t count, cap; /* slots filled, slots allocated */
    size_t size;       /* BUFFER, clamped to what memory can index */
    bool filled;       /* the initial fill is done */
    bool up_done;      /* upstream has ended */
    int rc;
};

/* Pulls from upstream into slot i; returns 1, 0 at the upstream's end, or an error. */
static int pull(struct shuffle_iter *s, size_t i)
{
    int rc = pipe_next(s->up, &s->buf[i]);
    if (rc == 0)
        s->up_done = true;
    else if (rc < 0)
        s->rc = rc;
    return rc;
}

static int fill(struct shuffle_iter *s)
{
    while (s->count < s->size && !s->up_done) {
        if (s->count == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 64;
            if (cap > s->size)
                cap = s->size;
            struct sluice_element *b = realloc(s->buf, cap * sizeof(*b));
            if (!b) {
                struct pipe_ctx *ctx = s->base.ctx;
                return s->rc = err_set(ctx->err, sizeof(ctx->err), SLUICE_ERR_NOMEM,
                                       "shuffle: out of memory");
            }
            for (size_t i = s->cap; i < cap; i++)
                pipe_elem_init(&b[i]);
            s->buf = b;
            s->cap = cap;
        }
        int rc = pull(s, s->count);
        if (rc < 0)
            return rc;
        if (rc == 1)
            s->count++;
    }
    s->filled = true;
    return 0;
}

static int shuffle_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct shuffle_iter *s = (struct shuffle_iter *)it;
    if (s->rc)
        return s->rc;
    if (!s->filled) {
        int rc = fill(s);
        if (rc)
            return rc;
    }
    if (s->count == 0)
        return 0;
    size_t i = (size_t)rng_below(&s->rng, s->count);
    pipe_elem_swap(out, &s->buf[i]);
    if (!s->up_done) {
        int rc = pull(s, i);
        if (rc == 1)
            return 1;
        if (rc < 0) {
            /* The output is still good; the error is reported by the next call. */
            return 1;
        }
    }
    /* Slot i is empty: close the gap with the last filled slot. */
    s->count--;
    pipe_elem_swap(&s->buf[i], &s->buf[s->count]);
    return 1;
}

static void shuffle_destroy(struct pipe_iter *it)
{
    struct shuffle_iter *s = (struct shuffle_iter *)it;
    s->up->ops->destroy(s->up);
    for (size_t i = 0; i < s->cap; i++)
        pipe_elem_release(&s->buf[i]);
    free(s->buf);
    free(s);
}

static const struct pipe_iter_ops shuffle_ops = {shuffle_next, shuffle_destroy};

int pipe_shuffle_open(int64_t buffer, bool has_seed, int64_t seed, uint64_t salt,
                      struct pipe_iter *upstream, struct pipe_ctx *ctx, struct pipe_iter **out)
{
    assert(buffer >= 1);
    uint64_t key;
    if (has_seed) {
        key = pipe_salt_mix((uint64_t)seed, salt);
    } else if (getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        int rc = -errno;
        upstream->ops->destroy(upstream);
        return rc ? rc : SLUICE_ERR_UNAVAILABLE;
    }
    struct shuffle_iter *s = calloc(1, sizeof(*s));
    if (!s) {
        upstream->ops->destroy(upstream);
        return SLUICE_ERR_NOMEM;
    }
    s->base.ops = &shuffle_ops;
    s->base.ctx = ctx;
    s->up = upstream;
    s->size = (uint64_t)buffer > SIZE_MAX / sizeof(struct sluice_element)
                  ? SIZE_MAX / sizeof(struct sluice_element)
                  : (size_t)buffer;
    rng_seed(&s->rng, key);
    *out = &s->base;
    return 0;
}
