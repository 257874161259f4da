/* Fuzzes the checkpoint decoders (src/client/checkpoint.c): a read's and a mix's. Each input is
 * decoded as it is (almost always refused by the magic or the checksum) and as the body of each
 * kind, between its magic and a correct checksum, so the fields themselves are reached. A
 * checkpoint that decodes must encode again to bytes that decode to the same encoding (the format
 * round-trips), and a refused one must come with a message. */
#include "fuzz.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/checkpoint.h"
#include "common/crc32c.h"
#include "sluice/sluice.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static void one(const uint8_t *p, size_t n)
{
    struct checkpoint c;
    checkpoint_init(&c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = checkpoint_decode(p, n, &c, err, sizeof err);
    if (rc < 0) {
        CHECK(err[0] != 0);
        checkpoint_release(&c);
        return;
    }
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (checkpoint_encode(&c, &a, &na) == 0) {
        struct checkpoint d;
        checkpoint_init(&d);
        CHECK(checkpoint_decode(a, na, &d, err, sizeof err) == 0);
        CHECK(checkpoint_encode(&d, &b, &nb) == 0);
        CHECK(na == nb && memcmp(a, b, na) == 0);
        checkpoint_release(&d);
    }
    free(a);
    free(b);
    checkpoint_release(&c);
}

static void one_mix(const uint8_t *p, size_t n)
{
    struct checkpoint_mix c;
    char err[SLUICE_ERRMSG_SIZE] = "";
    if (checkpoint_mix_decode(p, n, &c, err, sizeof err) < 0) {
        CHECK(err[0] != 0);
        return;
    }
    CHECK(c.ninputs > 0 && c.ninputs < CHECKPOINT_MIX_MAX_READS && c.pending <= c.ninputs);
    CHECK(c.nreads >= c.ninputs && c.nreads <= c.ninputs + 1);
    for (size_t i = 0; i < c.nreads; i++)
        CHECK(c.read[i] >= p && c.read[i] + c.read_len[i] <= p + n);
    /* Varints may be spelled longer than needed: the encoding of a decoding is the fixed point. */
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (checkpoint_mix_encode(&c, &a, &na) == 0) {
        struct checkpoint_mix d;
        CHECK(checkpoint_mix_decode(a, na, &d, err, sizeof err) == 0);
        CHECK(checkpoint_mix_encode(&d, &b, &nb) == 0);
        CHECK(na == nb && memcmp(a, b, na) == 0);
    }
    free(a);
    free(b);
}

/* data between magic and a correct checksum. */
static void sealed(const uint8_t *data, size_t size, const char *magic, bool mix)
{
    uint8_t *w = malloc(size + 12);
    if (!w)
        return;
    memcpy(w, magic, 8);
    memcpy(w + 8, data, size);
    uint32_t crc = crc32c(w, size + 8);
    for (int i = 0; i < 4; i++)
        w[size + 8 + i] = (uint8_t)(crc >> (8 * i));
    if (mix)
        one_mix(w, size + 12);
    else
        one(w, size + 12);
    free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);
    one_mix(data, size);
    sealed(data, size, "SLUICECK", false);
    sealed(data, size, "SLUICEMX", true);
    return 0;
}
