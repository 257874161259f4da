/* The checkpoint of a read (src/client/checkpoint.c): it round-trips exactly, its size follows
 * the splits in flight and not the position, and every kind of damage or foreign input is
 * refused with its own message. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "client/checkpoint.h"
#include "common/crc32c.h"
#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A position: splits [0, done_end) done, except 3 and 7 when done_end is above them, and a few
 * splits in flight above it. */
static void make(struct checkpoint *c, uint64_t done_end)
{
    checkpoint_init(c);
    strcpy(c->dataset_id, "ds");
    strcpy(c->job_name, "");
    c->flags = CHECKPOINT_DETERMINISTIC;
    c->def_hash = 0x0123456789abcdefull;
    c->plan_hash = 0xfedcba9876543210ull;
    c->split_total = 100000000;
    c->delivered = done_end * 1000 + 17;
    uint64_t seqs[] = {3, 7};
    assert_int_equal(ranges_add(&c->pos.done, 0, done_end), 0);
    if (done_end > 8) {
        c->pos.done.n = 0;
        assert_int_equal(ranges_add(&c->pos.done, 0, 3), 0);
        assert_int_equal(ranges_add(&c->pos.done, 4, 7), 0);
        assert_int_equal(ranges_add(&c->pos.done, 8, done_end), 0);
        assert_int_equal(ledger_add(&c->pos, seqs[0], 0, 10), 0);
        assert_int_equal(ledger_end(&c->pos, seqs[0], 1000), 0);
    }
    assert_int_equal(ledger_add(&c->pos, done_end, 0, 500), 0);
    assert_int_equal(ledger_add(&c->pos, done_end + 2, 0, 3), 0);
    assert_int_equal(ledger_add(&c->pos, done_end + 2, 5, 9), 0);
}

static void test_round_trip(void **state)
{
    (void)state;
    struct checkpoint c, d;
    make(&c, 1000);
    uint8_t *b = NULL, *b2 = NULL;
    size_t n = 0, n2 = 0;
    assert_int_equal(checkpoint_encode(&c, &b, &n), 0);
    checkpoint_init(&d);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(checkpoint_decode(b, n, &d, err, sizeof err), 0);
    assert_string_equal(d.dataset_id, "ds");
    assert_string_equal(d.job_name, "");
    assert_int_equal(d.flags, CHECKPOINT_DETERMINISTIC);
    assert_true(d.def_hash == c.def_hash && d.plan_hash == c.plan_hash);
    assert_true(d.split_total == 100000000 && d.delivered == 1000017);
    assert_int_equal(d.pos.done.n, 3);
    assert_true(d.pos.done.v[2].begin == 8 && d.pos.done.v[2].end == 1000);
    assert_int_equal(d.pos.n, 3);
    assert_true(d.pos.v[0].seq == 3 && d.pos.v[0].ended && d.pos.v[0].total == 1000);
    assert_true(d.pos.v[2].seq == 1002 && d.pos.v[2].got.n == 2 && d.pos.v[2].got.v[1].end == 9);
    assert_int_equal(checkpoint_encode(&d, &b2, &n2), 0);
    assert_int_equal(n, n2);
    assert_memory_equal(b, b2, n);
    free(b);
    free(b2);
    checkpoint_release(&c);
    checkpoint_release(&d);
}

/* At split 10 and at split 10,000,000 the same splits in flight take nearly the same bytes. */
static void test_size_follows_splits_in_flight(void **state)
{
    (void)state;
    struct checkpoint a, z;
    make(&a, 10);
    make(&z, 10000000);
    uint8_t *ba = NULL, *bz = NULL;
    size_t na = 0, nz = 0;
    assert_int_equal(checkpoint_encode(&a, &ba, &na), 0);
    assert_int_equal(checkpoint_encode(&z, &bz, &nz), 0);
    printf("    checkpoint at split 10: %zu bytes, at split 10000000: %zu bytes\n", na, nz);
    /* Only the varints of the numbers grow (with their logarithm). */
    assert_true(nz <= na + 16);
    assert_true(nz < 100);
    free(ba);
    free(bz);
    checkpoint_release(&a);
    checkpoint_release(&z);
}

/* Re-seals body (without magic and checksum) as a checkpoint. */
static size_t seal(uint8_t *out, const uint8_t *body, size_t n)
{
    memcpy(out, "SLUICECK", 8);
    memcpy(out + 8, body, n);
    uint32_t crc = crc32c(out, n + 8);
    for (int i = 0; i < 4; i++)
        out[n + 8 + i] = (uint8_t)(crc >> (8 * i));
    return n + 12;
}

static void expect_refused(const uint8_t *p, size_t n, int code, const char *msg)
{
    struct checkpoint c;
    checkpoint_init(&c);
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = checkpoint_decode(p, n, &c, err, sizeof err);
    if (rc != code || !strstr(err, msg))
        fail_msg("got %d '%s', wanted %d '%s'", rc, err, code, msg);
    assert_int_equal(c.pos.n, 0);
    checkpoint_release(&c);
}

static void test_refusals(void **state)
{
    (void)state;
    struct checkpoint c;
    make(&c, 1000);
    uint8_t *b = NULL;
    size_t n = 0;
    assert_int_equal(checkpoint_encode(&c, &b, &n), 0);
    checkpoint_release(&c);

    expect_refused((const uint8_t *)"hello", 5, SLUICE_ERR_INVALID, "not a sluice checkpoint");
    expect_refused(b, 10, SLUICE_ERR_CORRUPT, "cut short");
    expect_refused(b, n - 1, SLUICE_ERR_CORRUPT, "checksum mismatch");
    uint8_t *d = malloc(n + 64);
    assert_non_null(d);
    memcpy(d, b, n);
    d[n / 2] ^= 1;
    expect_refused(d, n, SLUICE_ERR_CORRUPT, "checksum mismatch");

    /* Bodies with a correct checksum but wrong contents. */
    uint8_t body[64], buf[128];
    size_t k = 0;
    body[k++] = 2; /* version */
    expect_refused(buf, seal(buf, body, k), SLUICE_ERR_INVALID,
                   "version 2, this library reads version 1");
    /* Trailing bytes. */
    memcpy(buf, b, n - 4);
    buf[n - 4] = 0;
    size_t m = seal(d, buf + 8, n - 4 - 8 + 1);
    expect_refused(d, m, SLUICE_ERR_INVALID, "1 bytes after its end");
    /* Version 1, flags 0, dataset "x", job "", hashes, 10 splits, 0 delivered, then done ranges
     * that overlap. */
    k = 0;
    body[k++] = 1;
    body[k++] = 0;
    body[k++] = 1;
    body[k++] = 'x';
    body[k++] = 0;
    memset(body + k, 0, 16);
    k += 16;
    body[k++] = 10; /* split_total */
    body[k++] = 0;  /* delivered */
    size_t head = k;
    body[k++] = 2; /* two done ranges: [1, 3) and [3, 4): touching, not separate */
    body[k++] = 1;
    body[k++] = 2;
    body[k++] = 0;
    body[k++] = 1;
    body[k++] = 0;
    expect_refused(buf, seal(buf, body, k), SLUICE_ERR_INVALID, "are not sorted ranges");
    /* A done range past the plan's 10 splits. */
    k = head;
    body[k++] = 1;
    body[k++] = 5;
    body[k++] = 6;
    body[k++] = 0;
    expect_refused(buf, seal(buf, body, k), SLUICE_ERR_INVALID, "are not sorted ranges within 10");
    /* A split both done and in flight. */
    k = head;
    body[k++] = 1;
    body[k++] = 0;
    body[k++] = 4; /* done [0, 4) */
    body[k++] = 1; /* one in flight */
    body[k++] = 2; /* seq 2 */
    body[k++] = 0;
    body[k++] = 0;
    expect_refused(buf, seal(buf, body, k), SLUICE_ERR_INVALID,
                   "split 2 is both finished and in flight");
    /* A split in flight that is complete. */
    k = head;
    body[k++] = 0;
    body[k++] = 1;
    body[k++] = 5; /* seq 5 */
    body[k++] = 1; /* ended */
    body[k++] = 3; /* of 3 elements */
    body[k++] = 1;
    body[k++] = 0;
    body[k++] = 3; /* [0, 3): all of them */
    expect_refused(buf, seal(buf, body, k), SLUICE_ERR_INVALID,
                   "split 5 is complete but not finished");
    /* More ranges than any position needs. */
    k = head;
    body[k++] = 0xff;
    body[k++] = 0xff;
    body[k++] = 0xff;
    body[k++] = 0x01;
    expect_refused(buf, seal(buf, body, k), SLUICE_ERR_INVALID, "over the limit");
    free(d);
    free(b);
}

/* A mix's checkpoint: the mixer's state and its inputs' checkpoints, nested whole, read back
 * exactly; damage, a cut and counts that do not fit are refused. */
static void test_mix_round_trip(void **state)
{
    (void)state;
    struct checkpoint_mix m;
    memset(&m, 0, sizeof m);
    strcpy(m.dataset_id, "7");
    strcpy(m.job_name, "mixed");
    m.flags = CHECKPOINT_DETERMINISTIC;
    m.def_hash = 0x0123456789abcdefull;
    m.delivered = 1234;
    m.pos = 1234;
    m.nchoices = 1300;
    m.pending = 2;
    m.ended = false;
    m.ninputs = 3;
    m.done[1] = true;
    m.nreads = 4;
    struct checkpoint c;
    make(&c, 50);
    uint8_t *inner = NULL;
    size_t inner_len = 0;
    assert_int_equal(checkpoint_encode(&c, &inner, &inner_len), 0);
    checkpoint_release(&c);
    static const uint8_t other[] = {1, 2, 3};
    for (size_t i = 0; i < 4; i++) {
        m.read[i] = i == 2 ? other : inner;
        m.read_len[i] = i == 2 ? sizeof other : inner_len;
    }
    uint8_t *b = NULL;
    size_t n = 0;
    assert_int_equal(checkpoint_mix_encode(&m, &b, &n), 0);
    assert_true(checkpoint_is_mix(b, n));
    assert_false(checkpoint_is_mix(inner, inner_len));
    struct checkpoint_mix d;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(checkpoint_mix_decode(b, n, &d, err, sizeof err), 0);
    assert_string_equal(d.dataset_id, "7");
    assert_string_equal(d.job_name, "mixed");
    assert_int_equal(d.flags, CHECKPOINT_DETERMINISTIC);
    assert_true(d.def_hash == m.def_hash);
    assert_int_equal(d.delivered, 1234);
    assert_int_equal(d.pos, 1234);
    assert_int_equal(d.nchoices, 1300);
    assert_int_equal(d.pending, 2);
    assert_false(d.ended);
    assert_int_equal(d.ninputs, 3);
    assert_false(d.done[0]);
    assert_true(d.done[1]);
    assert_false(d.done[2]);
    assert_int_equal(d.nreads, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(d.read_len[i], m.read_len[i]);
        assert_memory_equal(d.read[i], m.read[i], m.read_len[i]);
    }
    /* A plain decoder refuses it, and the mix decoder a plain checkpoint. */
    checkpoint_init(&c);
    assert_int_equal(checkpoint_decode(b, n, &c, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "not a sluice checkpoint");
    assert_int_equal(checkpoint_mix_decode(inner, inner_len, &d, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "not a sluice checkpoint of a mix");
    /* Every flipped byte and every cut is refused. */
    for (size_t i = 8; i < n; i++) {
        b[i] ^= 0x40;
        int rc = checkpoint_mix_decode(b, n, &d, err, sizeof err);
        assert_true(rc == SLUICE_ERR_CORRUPT || rc == SLUICE_ERR_INVALID);
        b[i] ^= 0x40;
    }
    for (size_t cut = 0; cut < n; cut++)
        assert_true(checkpoint_mix_decode(b, cut, &d, err, sizeof err) < 0);
    free(b);
    /* Counts that do not fit: fewer positions than inputs, a pending input past them. */
    m.nreads = 2;
    assert_int_equal(checkpoint_mix_encode(&m, &b, &n), 0);
    assert_int_equal(checkpoint_mix_decode(b, n, &d, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "checkpoint of a mix: expected 3 or 4 positions of its inputs");
    free(b);
    m.nreads = 3;
    m.pending = 4;
    assert_int_equal(checkpoint_mix_encode(&m, &b, &n), 0);
    assert_int_equal(checkpoint_mix_decode(b, n, &d, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "checkpoint of a mix: bad header");
    free(b);
    free(inner);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_size_follows_splits_in_flight),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_mix_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
