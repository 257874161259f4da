/* Keyed permutations of [0, n): a Feistel network with cycle walking (see perm.h). */
#include "perm.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

uint64_t perm_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t perm_key(int64_t seed, uint64_t pass, uint64_t part)
{
    /* Each input goes through the mixer before the next is added, so no two (seed, pass, part)
     * triples that differ in one field collide by a simple linear relation. */
    uint64_t k = perm_mix64((uint64_t)seed + GOLDEN);
    k = perm_mix64(k ^ (pass + 0x6a09e667f3bcc909ull));
    return perm_mix64(k ^ (part + 0xbb67ae8584caa73bull));
}

void perm_init(struct perm *p, uint64_t key, uint64_t n)
{
    p->n = n;
    unsigned b = 0;
    while (b < 64 && (1ull << b) < n)
        b++;
    p->bits = b;
    p->lo_bits = b / 2;
    /* The domain size goes into every round key, so permutations of different sizes under one
     * key are unrelated. */
    uint64_t s = key ^ perm_mix64(n);
    for (int r = 0; r < PERM_ROUNDS; r++) {
        s += GOLDEN;
        p->keys[r] = perm_mix64(s);
    }
}

static inline uint64_t mask(unsigned bits)
{
    return bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

/* One pass of the network over b bits. x = (hi, lo) with lo the low w bits; a round maps it to
 * (lo, hi ^ F(lo)) with hi's b - w bits now low, so the next round's low half is b - w wide.
 * Both halves are at most 32 bits wide, so no shift reaches 64. */
static uint64_t encipher(const struct perm *p, uint64_t x)
{
    unsigned b = p->bits, w = p->lo_bits;
    for (int r = 0; r < PERM_ROUNDS; r++) {
        unsigned h = b - w; /* hi's width */
        uint64_t lo = x & mask(w), hi = x >> w;
        hi ^= perm_mix64(p->keys[r] ^ lo) & mask(h);
        x = (lo << h) | hi;
        w = h;
    }
    return x;
}

static uint64_t decipher(const struct perm *p, uint64_t y)
{
    unsigned b = p->bits;
    /* The width of the low half after the last round, found by replaying the alternation. */
    unsigned w = p->lo_bits;
    unsigned widths[PERM_ROUNDS];
    for (int r = 0; r < PERM_ROUNDS; r++) {
        widths[r] = w;
        w = b - w;
    }
    for (int r = PERM_ROUNDS - 1; r >= 0; r--) {
        unsigned wr = widths[r], h = b - wr;
        /* y = (lo << h) | hi', with lo wr bits wide. */
        uint64_t hi = y & mask(h), lo = y >> h;
        hi ^= perm_mix64(p->keys[r] ^ lo) & mask(h);
        y = (hi << wr) | lo;
    }
    return y;
}

uint64_t perm_apply(const struct perm *p, uint64_t x)
{
    if (x >= p->n || p->n < 2)
        return x;
    /* Cycle walking: x's cycle under the network passes through values below n again, the
     * first of which is x's image. */
    do
        x = encipher(p, x);
    while (x >= p->n);
    return x;
}

uint64_t perm_invert(const struct perm *p, uint64_t y)
{
    if (y >= p->n || p->n < 2)
        return y;
    do
        y = decipher(p, y);
    while (y >= p->n);
    return y;
}
