/* Feeds arbitrary bytes to the element codec's record readers as a reply payload, walking it with
 * codec_next_record and codec_scan_record side by side:
 *   - they agree on where every record ends, on its kind, and on its tag or split marker; the
 *     scanner refuses only what the decoder refuses, and the decoder refuses more only for a
 *     bad element body (which the scanner does not look at);
 *   - whatever decodes encodes again (codec_append_tagged, codec_append_split_end,
 *     codec_append_split_from) and reads back as the same kind, mark and element;
 *   - codec_next_elem yields exactly the elements before the first bad record, and fails there
 *     too;
 *   - decoding with a lender (values left in the input, as a shared region's are; for half the
 *     inputs one with a larger lend_min) gives the same kinds and elements, and every reference
 *     taken is given back;
 *   - pad records (flags 0x10) are stepped over by all of them alike. */
#include "fuzz.h"

#include "pipeline/codec.h"

#include <stdint.h>
#include <stdlib.h>

/* A broken property stops the fuzzer in every build type (assert is compiled out by NDEBUG). */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

/* A lender that counts the references held. */
struct counting_lender {
    struct pipe_lender base;
    long refs;
};

static void count_hold(struct pipe_lender *l)
{
    ((struct counting_lender *)l)->refs++;
}

static void count_release(struct pipe_lender *l)
{
    ((struct counting_lender *)l)->refs--;
}

static void same_mark(const struct codec_mark *a, const struct codec_mark *b)
{
    CHECK(a->tagged == b->tagged);
    CHECK(a->seq == b->seq);
    CHECK(a->pos == b->pos);
}

/* Encodes what a record said and reads it back both ways. */
static void reencode(int kind, const struct sluice_element *e, const struct codec_mark *mark,
                     bool compress, struct pipe_buf *out, struct pipe_buf *scratch,
                     struct sluice_element *back)
{
    out->len = 0;
    int rc;
    if (kind == CODEC_SPLIT_END) {
        rc = codec_append_split_end(out, mark->seq, mark->pos);
    } else if (kind == CODEC_SPLIT_FROM) {
        rc = codec_append_split_from(out, mark->seq, mark->pos);
    } else {
        struct codec_tag tag = {mark->seq, mark->pos};
        rc = codec_append_tagged(out, e, compress, scratch, mark->tagged ? &tag : NULL);
    }
    if (rc != 0)
        return; /* out of memory: nothing to compare */
    const uint8_t *p = (const uint8_t *)out->p;
    char err[SLUICE_ERRMSG_SIZE];
    struct codec_mark m1, m2;
    size_t p1 = 0, p2 = 0;
    int k1 = codec_next_record(p, out->len, &p1, back, scratch, NULL, &m1, err, sizeof err);
    int k2 = codec_scan_record(p, out->len, &p2, &m2);
    CHECK(k1 == kind && k2 == kind);
    CHECK(p1 == out->len && p2 == out->len);
    same_mark(&m1, mark);
    same_mark(&m2, mark);
    if (kind == CODEC_ELEMENT)
        CHECK(pipe_elem_equal(e, back));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    struct sluice_element e, back, lent;
    pipe_elem_init(&e);
    pipe_elem_init(&back);
    pipe_elem_init(&lent);
    struct counting_lender lender = {{count_hold, count_release}, 0};
    /* Half the inputs with a lender that asks for more than CODEC_LEND_MIN (an in-process
     * block's quarter), by the input's length. */
    lender.base.lend_min = (len & 2) ? CODEC_LEND_MIN + len * 16 : 0;
    struct pipe_buf scratch = {0}, scratch2 = {0}, scratch3 = {0}, out = {0};
    char err[SLUICE_ERRMSG_SIZE];
    bool compress = (len & 1) != 0;

    size_t pos = 0, elements = 0;
    bool failed = false; /* the decoder refused a record: codec_next_elem stops there */
    for (;;) {
        size_t p1 = pos, p2 = pos;
        struct codec_mark m1, m2;
        int k1 = codec_next_record(data, len, &p1, &e, &scratch, NULL, &m1, err, sizeof err);
        int k2 = codec_scan_record(data, len, &p2, &m2);
        size_t p3 = pos;
        struct codec_mark m3;
        int k3 =
            codec_next_record(data, len, &p3, &lent, &scratch3, &lender.base, &m3, err, sizeof err);
        CHECK(k3 == k1 && p3 == p1);
        if (k1 == CODEC_ELEMENT)
            CHECK(pipe_elem_equal(&e, &lent));
        if (k1 == CODEC_NO_MORE) {
            CHECK(k2 == CODEC_NO_MORE);
            break;
        }
        if (k2 < 0) {
            /* Bad framing, flags or tag: the decoder refuses it too, and nothing after it can
             * be found. */
            CHECK(k1 < 0);
            failed = true;
            break;
        }
        CHECK(p1 == p2);
        if (k1 < 0) {
            /* A bad body: the scanner steps over it as an element, with the decoder's tag. */
            CHECK(k2 == CODEC_ELEMENT);
            same_mark(&m1, &m2);
            failed = true;
            pos = p2;
            continue;
        }
        CHECK(k1 == k2);
        same_mark(&m1, &m2);
        if (k1 == CODEC_SPLIT_END || k1 == CODEC_SPLIT_FROM)
            CHECK(m1.tagged);
        if (k1 == CODEC_ELEMENT && !failed)
            elements++;
        reencode(k1, &e, &m1, compress, &out, &scratch2, &back);
        pos = p1;
    }

    /* The plain element reader sees the same elements up to the first refusal. */
    size_t got = 0, at = 0;
    int rc;
    while ((rc = codec_next_elem(data, len, &at, &e, &scratch, err, sizeof err)) == 1)
        got++;
    CHECK(got == elements);
    CHECK(failed ? rc < 0 : rc == 0);

    pipe_elem_release(&lent);
    CHECK(lender.refs == 0);
    pipe_elem_release(&e);
    pipe_elem_release(&back);
    pipe_buf_release(&scratch3);
    pipe_buf_release(&scratch);
    pipe_buf_release(&scratch2);
    pipe_buf_release(&out);
    return 0;
}
