/* Whole splits for deterministic readers on a worker (src/worker/splitown.c, wbuf_front in
 * src/worker/buffer.c): resume entries are kept per split and taken once; the first reader to
 * take records of a split owns it until its end marker is taken, another reader gets it only
 * after the owner was idle for SPLIT_OWNER_IDLE_MS; a lease can name the owner; the tables stay
 * bounded; and wbuf_front brings a reader's chunks to the head in order, leaving the rest in
 * their order, with the buffer's list and tail intact. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/buffer.h"
#include "worker/splitown.h"

static void test_resume_put_take(void **state)
{
    (void)state;
    struct split_tables t;
    splittab_init(&t);
    const uint64_t cov[] = {0, 10, 20, 25};
    assert_int_equal(splittab_resume_put(&t, 7, cov, 4, 42), 0);
    assert_int_equal(splittab_resume_put(&t, 3, cov, 2, 0), 0);
    /* An odd count or an empty range is refused and changes nothing. */
    const uint64_t bad[] = {5, 5};
    assert_int_equal(splittab_resume_put(&t, 9, cov, 3, 0), SLUICE_ERR_INVALID);
    assert_int_equal(splittab_resume_put(&t, 9, bad, 2, 0), SLUICE_ERR_INVALID);
    assert_int_equal(t.nres, 2);
    /* A second entry of a split replaces the first. */
    const uint64_t cov2[] = {0, 12};
    assert_int_equal(splittab_resume_put(&t, 7, cov2, 2, 43), 0);
    assert_int_equal(t.nres, 2);

    struct split_resume r;
    assert_true(splittab_resume_take(&t, 7, &r));
    assert_int_equal(r.seq, 7);
    assert_int_equal(r.owner, 43);
    assert_int_equal(r.skip.n, 1);
    assert_int_equal(r.skip.v[0].begin, 0);
    assert_int_equal(r.skip.v[0].end, 12);
    ranges_release(&r.skip);
    /* Taken once. */
    assert_false(splittab_resume_take(&t, 7, &r));
    assert_int_equal(r.skip.n, 0);
    assert_int_equal(r.owner, 0);
    assert_true(splittab_resume_take(&t, 3, &r));
    assert_int_equal(r.owner, 0);
    assert_true(ranges_contains(&r.skip, 9));
    assert_false(ranges_contains(&r.skip, 10));
    ranges_release(&r.skip);
    assert_int_equal(t.nres, 0);
    splittab_release(&t);
}

static void test_resume_bounded(void **state)
{
    (void)state;
    struct split_tables t;
    splittab_init(&t);
    const uint64_t cov[] = {0, 1};
    for (uint64_t s = 0; s < SPLIT_TABLE_MAX + 10; s++)
        assert_int_equal(splittab_resume_put(&t, s, cov, 2, 0), 0);
    assert_int_equal(t.nres, SPLIT_TABLE_MAX);
    struct split_resume r;
    /* The lowest entries went first. */
    assert_false(splittab_resume_take(&t, 9, &r));
    assert_true(splittab_resume_take(&t, 10, &r));
    ranges_release(&r.skip);
    assert_true(splittab_resume_take(&t, SPLIT_TABLE_MAX + 9, &r));
    ranges_release(&r.skip);
    splittab_release(&t);
}

static void test_owners(void **state)
{
    (void)state;
    struct split_tables t;
    splittab_init(&t);
    uint64_t now = 100000;
    /* The first reader to take a split owns it. */
    assert_true(splittab_may_take(&t, 5, 1, 10 + 1, now));
    assert_false(splittab_may_take(&t, 5, 2, 10 + 2, now + 1));
    assert_true(splittab_may_take(&t, 5, 1, 10 + 1, now + 2));
    assert_true(splittab_may_take(&t, 6, 2, 10 + 2, now + 2));
    assert_false(splittab_may_take(&t, 6, 1, 10 + 1, now + 3));
    /* Taking refreshes the owner: idle is counted from its last take. */
    assert_true(splittab_may_take(&t, 5, 1, 10 + 1, now + 4000));
    assert_false(splittab_may_take(&t, 5, 2, 10 + 2, now + 4000 + SPLIT_OWNER_IDLE_MS - 1));
    /* An idle owner loses the split to the reader that asks. */
    assert_int_equal(splittab_owner(&t, 5), 1);
    assert_true(splittab_may_take(&t, 5, 2, 10 + 2, now + 4000 + SPLIT_OWNER_IDLE_MS));
    assert_int_equal(splittab_owner(&t, 5), 2);
    assert_false(splittab_may_take(&t, 5, 1, 10 + 1, now + 4000 + SPLIT_OWNER_IDLE_MS + 1));
    /* The end marker taken: the split has no owner (a new production of it starts afresh). */
    splittab_owner_drop(&t, 5);
    assert_int_equal(splittab_owner(&t, 5), 0);
    assert_true(splittab_may_take(&t, 5, 1, 10 + 1, now + 10000));
    /* A lease names the owner: others wait. */
    assert_int_equal(splittab_owner_set(&t, 8, 3, now), 0);
    assert_false(splittab_may_take(&t, 8, 1, 10 + 1, now + 1));
    assert_true(splittab_may_take(&t, 8, 3, 10 + 3, now + 1));
    /* Client 0 names nobody. */
    assert_int_equal(splittab_owner_set(&t, 9, 0, now), 0);
    assert_true(splittab_may_take(&t, 9, 1, 10 + 1, now));
    /* A clock that went back does not release a split. */
    assert_false(splittab_may_take(&t, 9, 2, 10 + 2, now - 50));
    splittab_owner_drop(&t, 12345); /* unknown: nothing */
    splittab_release(&t);
}

/* The connection an owner last took records over closed (it died, or closed its read): its
 * splits go to the next reader that asks, without waiting for the idle time. */
static void test_owner_connection_closed(void **state)
{
    (void)state;
    struct split_tables t;
    splittab_init(&t);
    uint64_t now = 100000;
    assert_true(splittab_may_take(&t, 5, 1, 11, now));
    assert_true(splittab_may_take(&t, 6, 1, 11, now));
    assert_true(splittab_may_take(&t, 7, 2, 12, now));
    assert_false(splittab_may_take(&t, 5, 2, 12, now + 1));
    /* Another connection's close, and connection 0 (none), change nothing. */
    assert_int_equal(splittab_conn_closed(&t, 99), 0);
    assert_int_equal(splittab_conn_closed(&t, 0), 0);
    assert_false(splittab_may_take(&t, 5, 2, 12, now + 2));
    /* Reader 1's connection closes: both its splits are free, reader 2's is not. */
    assert_int_equal(splittab_conn_closed(&t, 11), 2);
    assert_int_equal(splittab_conn_closed(&t, 11), 0);
    assert_false(splittab_may_take(&t, 7, 3, 13, now + 3));
    assert_true(splittab_may_take(&t, 5, 2, 12, now + 3));
    assert_int_equal(splittab_owner(&t, 5), 2);
    /* The new owner holds it as any owner does: the old one, back on a new connection, waits. */
    assert_false(splittab_may_take(&t, 5, 1, 14, now + 4));
    /* Reader 1 back on connection 14 before anyone took split 6: it is its own again, owned over
     * the new connection, which the old one's close no longer affects. */
    assert_true(splittab_may_take(&t, 6, 1, 14, now + 5));
    assert_int_equal(splittab_conn_closed(&t, 11), 0);
    assert_false(splittab_may_take(&t, 6, 2, 12, now + 6));
    assert_int_equal(splittab_conn_closed(&t, 14), 1);
    assert_true(splittab_may_take(&t, 6, 2, 12, now + 7));
    /* A lease names an owner with no connection yet: a close releases none of it. */
    assert_int_equal(splittab_owner_set(&t, 8, 3, now), 0);
    assert_int_equal(splittab_conn_closed(&t, 13), 0);
    assert_false(splittab_may_take(&t, 8, 1, 11, now + 8));
    splittab_release(&t);
}

static void test_owners_bounded(void **state)
{
    (void)state;
    struct split_tables t;
    splittab_init(&t);
    for (uint64_t s = 0; s < SPLIT_TABLE_MAX; s++)
        assert_true(splittab_may_take(&t, s, 1, 11, 10));
    assert_int_equal(t.nown, SPLIT_TABLE_MAX);
    /* Past the bound a split is served to whoever asks, and nothing grows. */
    assert_true(splittab_may_take(&t, SPLIT_TABLE_MAX, 1, 11, 10));
    assert_true(splittab_may_take(&t, SPLIT_TABLE_MAX, 2, 12, 10));
    assert_int_equal(t.nown, SPLIT_TABLE_MAX);
    assert_false(splittab_may_take(&t, 0, 2, 10 + 2, 10));
    splittab_release(&t);
}

/* ---- wbuf_front ------------------------------------------------------------------------------ */

/* A chunk of one record of len bytes, of split seq. */
static struct wbuf_chunk *chunk(uint64_t seq, size_t len)
{
    struct wbuf_chunk *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->data.p = malloc(len + 1);
    c->data.cap = len + 1;
    assert_non_null(c->data.p);
    c->data.p[0] = (char)len; /* len < 128: a one-byte varint */
    memset(c->data.p + 1, (int)seq, len);
    c->data.len = len + 1;
    c->count = 1;
    c->tagged = true;
    c->seq = seq;
    return c;
}

struct pick {
    uint64_t want[8];
    size_t n;
    unsigned calls;
};

static bool pick_ok(const struct wbuf_chunk *c, void *ctx)
{
    struct pick *p = ctx;
    p->calls++;
    for (size_t i = 0; i < p->n; i++)
        if (p->want[i] == c->seq)
            return true;
    return false;
}

/* The seqs of the buffer's chunks, head to tail, and a check of its tail pointer. */
static size_t order(const struct wbuf *b, uint64_t *out)
{
    size_t n = 0;
    const struct wbuf_chunk *last = NULL;
    for (const struct wbuf_chunk *c = b->head; c; c = c->next) {
        out[n++] = c->seq;
        last = c;
    }
    assert_ptr_equal(b->tail, last);
    return n;
}

static void test_front(void **state)
{
    (void)state;
    struct wbuf b;
    wbuf_init(&b);
    const uint64_t seqs[] = {1, 2, 1, 3, 2, 3};
    for (size_t i = 0; i < 6; i++)
        wbuf_push(&b, chunk(seqs[i], 10));
    uint64_t got[8];

    /* Nothing accepted: nothing moves. */
    struct pick none = {.n = 0};
    assert_int_equal(wbuf_front(&b, pick_ok, &none, 16, 1000), 0);
    assert_int_equal(none.calls, 6);
    assert_int_equal(order(&b, got), 6);
    assert_memory_equal(got, ((uint64_t[]){1, 2, 1, 3, 2, 3}), 6 * sizeof(uint64_t));

    /* Split 3's chunks come first, in their order, the others keep theirs; the tail is the last
     * chunk left in place. */
    struct pick three = {.want = {3}, .n = 1};
    assert_int_equal(wbuf_front(&b, pick_ok, &three, 16, 1000), 2);
    assert_int_equal(order(&b, got), 6);
    assert_memory_equal(got, ((uint64_t[]){3, 3, 1, 2, 1, 2}), 6 * sizeof(uint64_t));

    /* At most max_chunks. */
    struct pick two = {.want = {2}, .n = 1};
    assert_int_equal(wbuf_front(&b, pick_ok, &two, 1, 1000), 1);
    assert_int_equal(order(&b, got), 6);
    assert_memory_equal(got, ((uint64_t[]){2, 3, 3, 1, 1, 2}), 6 * sizeof(uint64_t));

    /* The scan stops once max_bytes are gathered (each chunk holds 11 bytes). */
    struct pick one = {.want = {1, 2}, .n = 2};
    assert_int_equal(wbuf_front(&b, pick_ok, &one, 16, 12), 2);
    assert_int_equal(order(&b, got), 6);
    assert_memory_equal(got, ((uint64_t[]){2, 1, 3, 3, 1, 2}), 6 * sizeof(uint64_t));

    /* Every chunk accepted: the order stays, the tail too. */
    struct pick all = {.want = {1, 2, 3}, .n = 3};
    assert_int_equal(wbuf_front(&b, pick_ok, &all, 16, 1000), 6);
    assert_int_equal(order(&b, got), 6);
    assert_memory_equal(got, ((uint64_t[]){2, 1, 3, 3, 1, 2}), 6 * sizeof(uint64_t));

    /* The accounting is untouched, and the moved chunks are taken from the head. */
    assert_int_equal(b.count, 6);
    assert_int_equal(b.chunks, 6);
    struct pick last = {.want = {2}, .n = 1};
    assert_int_equal(wbuf_front(&b, pick_ok, &last, 16, 1000), 2);
    struct wbuf_take tk;
    assert_int_equal(wbuf_take_whole(&b, 2, 1000, 16, &tk), 0);
    assert_int_equal(tk.count, 2);
    for (struct wbuf_chunk *c = tk.spent; c; c = c->next)
        assert_int_equal(c->seq, 2);
    while (tk.spent) {
        struct wbuf_chunk *next = tk.spent->next;
        wbuf_chunk_free(tk.spent);
        tk.spent = next;
    }
    assert_int_equal(order(&b, got), 4);
    assert_memory_equal(got, ((uint64_t[]){1, 3, 3, 1}), 4 * sizeof(uint64_t));
    /* Moving the last chunk to the front leaves the tail on the one before it. */
    struct pick tailpick = {.want = {1}, .n = 1};
    assert_int_equal(wbuf_front(&b, pick_ok, &tailpick, 16, 1000), 2);
    assert_int_equal(order(&b, got), 4);
    assert_memory_equal(got, ((uint64_t[]){1, 1, 3, 3}), 4 * sizeof(uint64_t));
    wbuf_clear(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_put_take),
        cmocka_unit_test(test_resume_bounded),
        cmocka_unit_test(test_owners),
        cmocka_unit_test(test_owners_bounded),
        cmocka_unit_test(test_owner_connection_closed),
        cmocka_unit_test(test_front),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
