/* What dispatcher replicas write into Raft (src/dispatcher/replica_codec.c): the cluster list
 * parses to its canonical form and each malformed list is refused with its exact message; entries
 * round-trip with 0, 1 and many records, padded with zeros to a multiple of 8, and a damaged
 * entry (any byte flipped, any truncation, nonzero padding, a count over the bound) is refused or
 * still frames records; applying an entry to two states equals applying its updates one by one;
 * snapshots of a state with every table restore the same digest and damaged ones are refused; a
 * copy keeps the destination's configuration. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

#include "common/crc32c.h"
#include "common/error.h"
#include "dispatcher/replica_codec.h"
#include "dispatcher/state.h"
#include "dispatcher/update_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the cluster list ------------------------------------------------------------------------ */

struct cluster_case {
    const char *text;
    uint64_t self_id;
    const char *self_address;
    int rc;
    const char *expect; /* the canonical form, or the message */
};

static void test_cluster_cases(void **unused)
{
    (void)unused;
    static const struct cluster_case cases[] = {
        {"1=a:1", 1, NULL, 0, "1=a:1"},
        {"1=a:1", 1, "a:1", 0, "1=a:1"},
        {"3=c:3,1=a:1,2=b:2", 2, "b:2", 0, "1=a:1,2=b:2,3=c:3"},
        {"5=e:5,4=d:4,3=c:3,2=b:2,1=a:1", 5, NULL, 0, "1=a:1,2=b:2,3=c:3,4=d:4,5=e:5"},
        {"7=g:1,6=f:1,5=e:1,4=d:1,3=c:1,2=b:1,1=a:1", 4, "d:1", 0,
         "1=a:1,2=b:1,3=c:1,4=d:1,5=e:1,6=f:1,7=g:1"},
        {"2=[::1]:7002,1=[::1]:7001", 1, "[::1]:7001", 0, "1=[::1]:7001,2=[::1]:7002"},
        {"9223372036854775808=a:1", 9223372036854775808u, NULL, 0, "9223372036854775808=a:1"},
        {"", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: empty"},
        {"a:1", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: 'a:1': expected ID=HOST:PORT"},
        {"=a:1", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: '=a:1': expected ID=HOST:PORT"},
        {"x=a:1", 1, NULL, SLUICE_ERR_INVALID,
         "raft cluster: 'x': the id must be a number from 1 to 2^63"},
        {"-1=a:1", 1, NULL, SLUICE_ERR_INVALID,
         "raft cluster: '-1': the id must be a number from 1 to 2^63"},
        {"0=a:1", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: id 0: must be from 1 to 2^63"},
        {"9223372036854775809=a:1", 1, NULL, SLUICE_ERR_INVALID,
         "raft cluster: id 9223372036854775809: must be from 1 to 2^63"},
        {"9999999999999999999=a:1", 1, NULL, SLUICE_ERR_INVALID,
         "raft cluster: '9999999999999999999': the id must be a number from 1 to 2^63"},
        {"18446744073709551617=a:1", 1, NULL, SLUICE_ERR_INVALID,
         "raft cluster: '18446744073709551617=a:1': expected ID=HOST:PORT"},
        {"1=a:1,1=b:1", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: id 1 is listed twice"},
        {"1=a:1,2=a:1", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: address a:1 is listed twice"},
        {"1=a", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: member 1: expected HOST:PORT, got 'a'"},
        {"1=a:", 1, NULL, SLUICE_ERR_INVALID,
         "raft cluster: member 1: expected HOST:PORT, got 'a:'"},
        {"1=:7", 1, NULL, SLUICE_ERR_INVALID,
         "raft cluster: member 1: expected HOST:PORT, got ':7'"},
        {"1=", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: member 1: expected HOST:PORT, got ''"},
        {"1=a:1,", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: ends with a comma"},
        {"1=a:1,,2=b:1", 1, NULL, SLUICE_ERR_INVALID, "raft cluster: '': expected ID=HOST:PORT"},
        {"1=a:1,2=b:1,3=c:1,4=d:1,5=e:1,6=f:1,7=g:1,8=h:1", 1, NULL, SLUICE_ERR_INVALID,
         "raft cluster: more than 7 members"},
        {"1=a:1,2=b:1,3=c:1", 4, NULL, SLUICE_ERR_INVALID,
         "raft id 4 is not in the cluster 1=a:1,2=b:1,3=c:1"},
        {"2=b:1,1=a:1", 1, "b:1", SLUICE_ERR_INVALID,
         "raft address b:1 is not member 1's address in the cluster (a:1)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct cluster_case *c = &cases[i];
        uint64_t ids[REPLICA_MEMBERS_MAX];
        char addrs[REPLICA_MEMBERS_MAX][REPLICA_ADDR_MAX];
        char canon[2048] = "", err[SLUICE_ERRMSG_SIZE] = "";
        size_t n = 99;
        int rc = replica_parse_cluster(c->text, c->self_id, c->self_address, ids, addrs, &n, canon,
                                       sizeof canon, err, sizeof err);
        if (rc != c->rc || strcmp(c->rc ? err : canon, c->expect) != 0)
            fail_msg("'%s': rc %d '%s' (canon '%s'), expected %d '%s'", c->text, rc, err, canon,
                     c->rc, c->expect);
        if (rc == 0) {
            /* ids and addresses by id, matching the canonical form. */
            char again[2048];
            size_t off = 0;
            for (size_t k = 0; k < n; k++) {
                if (k)
                    assert_true(ids[k - 1] < ids[k]);
                off += (size_t)snprintf(again + off, sizeof again - off, "%s%llu=%s", k ? "," : "",
                                        (unsigned long long)ids[k], addrs[k]);
            }
            assert_string_equal(again, canon);
        }
    }
}

/* The canonical form must fit the caller's buffer. */
static void test_cluster_canon_too_long(void **unused)
{
    (void)unused;
    uint64_t ids[REPLICA_MEMBERS_MAX];
    char addrs[REPLICA_MEMBERS_MAX][REPLICA_ADDR_MAX];
    char canon[8], err[SLUICE_ERRMSG_SIZE];
    size_t n;
    assert_int_equal(replica_parse_cluster("1=abc:1,2=def:2", 1, NULL, ids, addrs, &n, canon,
                                           sizeof canon, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "raft cluster: too long");
}

/* ---- states to work with --------------------------------------------------------------------- */

/* A state with rows in every table: datasets (generated and named ids, definitions), jobs of
 * every kind, iterations with leases, pools and finished splits, coordinated rounds, tasks,
 * workers (one draining, one with a host), clients, a save. */
static const char *const rich_script = "ds - r4\n"
                                       "ds named defnamed comp=1 split=4\n"
                                       "hb a:1 1\n"
                                       "hb b:1 1 host=h1\n"
                                       "hb c:1 1\n"
                                       "job 1 mode=distributed_epoch total=8\n"
                                       "splits 1 2\n"
                                       "splits 2 3 req=1\n"
                                       "splits 1 1 fin=1\n"
                                       "back 2\n"
                                       "job named name=c consumers=2\n"
                                       "job named name=c consumers=2\n"
                                       "chb 2 window=64\n"
                                       "job 1 mode=distributed_epoch total=inf det\n"
                                       "save named /snap/a total=4\n"
                                       "hb c:1 1 drain\n";

static void rich_state(struct harness *h)
{
    harness_init(h);
    harness_run_script(h, rich_script);
    assert_true(h->s.ndatasets == 2 && h->s.njobs >= 3 && h->s.niterations >= 3);
    assert_true(h->s.ntasks >= 4 && h->s.nworkers == 3 && h->s.nclients >= 3);
    assert_true(h->s.nsaves == 1);
}

struct encoded {
    uint8_t **p;
    size_t *len;
    struct replica_record *recs;
    size_t n;
};

/* Every update of the record, encoded as the journal encodes it. */
static void encode_record(const struct st_update_list *l, struct encoded *e)
{
    e->n = l->n;
    e->p = calloc(l->n + 1, sizeof *e->p);
    e->len = calloc(l->n + 1, sizeof *e->len);
    e->recs = calloc(l->n + 1, sizeof *e->recs);
    assert_true(e->p && e->len && e->recs);
    for (size_t i = 0; i < l->n; i++) {
        assert_int_equal(update_codec_encode(&l->v[i], &e->p[i], &e->len[i]), 0);
        e->recs[i] = (struct replica_record){e->p[i], e->len[i]};
    }
}

static void encoded_free(struct encoded *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->p[i]);
    free(e->p);
    free(e->len);
    free(e->recs);
}

/* ---- entries --------------------------------------------------------------------------------- */

static void check_round_trip(const struct replica_record *recs, size_t n, const char *rpc)
{
    uint8_t *p = NULL;
    size_t len = 0;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(replica_entry_encode(7, UINT64_MAX - 1, rpc, recs, n, NULL, &p, &len), 0);
    size_t payload = 4 + 8 + 8 + 2 + strlen(rpc) + 4;
    for (size_t i = 0; i < n; i++)
        payload += 4 + recs[i].len;
    assert_int_equal(len % 8, 0);
    assert_true(len >= payload && len - payload < 8);
    for (size_t i = payload; i < len; i++)
        assert_int_equal(p[i], 0);
    struct replica_entry e;
    if (replica_entry_parse(p, len, &e, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(e.origin, 7);
    assert_int_equal(e.term, UINT64_MAX - 1);
    assert_string_equal(e.rpc, rpc);
    assert_int_equal(e.count, n);
    uint64_t cursor = 0;
    const uint8_t *d;
    size_t dl;
    for (size_t i = 0; i < n; i++) {
        assert_true(replica_entry_next(&e, &cursor, &d, &dl));
        assert_int_equal(dl, recs[i].len);
        if (dl)
            assert_memory_equal(d, recs[i].data, dl);
    }
    assert_false(replica_entry_next(&e, &cursor, &d, &dl));
    assert_false(replica_entry_next(&e, &cursor, &d, &dl));
    free(p);
}

static void test_entry_round_trip(void **unused)
{
    (void)unused;
    /* No record (a leader's announcement), with every address length modulo 8. */
    static const char *const rpcs[] = {
        "", "a", "ab:1", "host:12", "10.0.0.1:7001", "[::1]:7001", "dispatcher-2.example:7001"};
    for (size_t i = 0; i < sizeof rpcs / sizeof rpcs[0]; i++)
        check_round_trip(NULL, 0, rpcs[i]);
    /* One record, then records of every length 0 to 20. */
    static const uint8_t bytes[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
    struct replica_record one = {bytes, 5};
    check_round_trip(&one, 1, "a:1");
    struct replica_record many[21];
    for (size_t i = 0; i <= 20; i++)
        many[i] = (struct replica_record){bytes, i};
    for (size_t n = 1; n <= 21; n++)
        check_round_trip(many, n, "b:2");
    /* A realistic batch: every update of a rich state. */
    struct harness h;
    rich_state(&h);
    struct encoded enc;
    encode_record(&h.record, &enc);
    check_round_trip(enc.recs, enc.n, "10.0.0.1:7001");
    encoded_free(&enc);
    harness_release(&h);
}

static void test_entry_encode_refusals(void **unused)
{
    (void)unused;
    char rpc[REPLICA_ADDR_MAX + 1];
    memset(rpc, 'a', sizeof rpc);
    rpc[REPLICA_ADDR_MAX] = '\0';
    uint8_t *p = NULL;
    size_t len = 0;
    assert_int_equal(replica_entry_encode(1, 1, rpc, NULL, 0, NULL, &p, &len), SLUICE_ERR_INVALID);
    rpc[REPLICA_ADDR_MAX - 1] = '\0';
    assert_int_equal(replica_entry_encode(1, 1, rpc, NULL, 0, NULL, &p, &len), 0);
    free(p);
    assert_int_equal(
        replica_entry_encode(1, 1, "a", NULL, REPLICA_ENTRY_RECORDS_MAX + 1, NULL, &p, &len),
        SLUICE_ERR_INVALID);
}

static void expect_refused(const uint8_t *p, size_t len, const char *why)
{
    struct replica_entry e;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = replica_entry_parse(p, len, &e, err, sizeof err);
    if (rc != SLUICE_ERR_CORRUPT || strcmp(err, why) != 0)
        fail_msg("length %zu: rc %d '%s', expected '%s'", len, rc, err, why);
}

/* Two small records under address "a:1": 4+8+8+2+3+4 + (4+3) + (4+1) = 41 bytes, 48 padded. */
static void small_entry(uint8_t **p, size_t *len)
{
    static const uint8_t r0[3] = {0xaa, 0xbb, 0xcc}, r1[1] = {0xdd};
    struct replica_record recs[2] = {{r0, 3}, {r1, 1}};
    assert_int_equal(replica_entry_encode(2, 3, "a:1", recs, 2, NULL, p, len), 0);
    assert_int_equal(*len, 48);
}

static void test_entry_damage(void **unused)
{
    (void)unused;
    uint8_t *p;
    size_t len;
    small_entry(&p, &len);
    /* Every truncation, into a fresh buffer so that ASan sees reads past the end. */
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *t = malloc(cut ? cut : 1);
        memcpy(t, p, cut);
        struct replica_entry e;
        char err[SLUICE_ERRMSG_SIZE] = "";
        if (replica_entry_parse(t, cut, &e, err, sizeof err) != SLUICE_ERR_CORRUPT)
            fail_msg("truncated to %zu bytes: not refused", cut);
        assert_true(err[0] != '\0');
        free(t);
    }
    expect_refused(p, 25, "not a sluice entry");
    expect_refused(p, 40, "entry: record 1 cut short");
    expect_refused(p, 41, "entry: length 41 is not a multiple of 8");
    expect_refused(p, 47, "entry: length 47 is not a multiple of 8");
    /* Nonzero padding, at each padding byte. */
    for (size_t i = 41; i < len; i++) {
        p[i] = 1;
        expect_refused(p, len, "entry: bytes after the last record");
        p[i] = 0;
    }
    /* A count one too high, then over the bound; a bad magic; an address length past the end. */
    p[25] = 4;
    expect_refused(p, len, "entry: record 3 cut short");
    /* One too high frames an empty record in the padding's zeros: it parses, and applying it is
     * refused since no Update is empty. */
    p[25] = 3;
    struct replica_entry e3;
    char err3[SLUICE_ERRMSG_SIZE];
    assert_int_equal(replica_entry_parse(p, len, &e3, err3, sizeof err3), 0);
    assert_int_equal(e3.count, 3);
    struct state s3;
    state_init(&s3);
    struct state *one[1] = {&s3};
    assert_int_equal(replica_entry_apply(&e3, one, 1, NULL, err3, sizeof err3), SLUICE_ERR_CORRUPT);
    assert_true(strncmp(err3, "record 0 does not decode: ", 26) == 0);
    state_release(&s3);
    p[25] = 2;
    p[28] = 1;
    expect_refused(p, len, "entry: 16777218 records");
    p[28] = 0;
    p[25] = 2;
    p[0] = 'X';
    expect_refused(p, len, "not a sluice entry");
    p[0] = 'S';
    p[20] = 0xff;
    expect_refused(p, len, "entry: bad address length");
    p[20] = 3;
    /* The count below the records leaves them as bytes after the last one. */
    p[25] = 1;
    expect_refused(p, len, "entry: bytes after the last record");
    p[25] = 2;
    /* Intact again. */
    struct replica_entry e;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(replica_entry_parse(p, len, &e, err, sizeof err), 0);
    free(p);
}

/* Every single byte of a small entry flipped to every value: either refused, or parsed to records
 * that step to the end of the entry within it; and the records of a realistic entry, damaged,
 * either apply or are refused with a message, never crash. */
static void test_entry_flips(void **unused)
{
    (void)unused;
    uint8_t *p;
    size_t len;
    small_entry(&p, &len);
    size_t parsed = 0, refused = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t keep = p[i];
        for (unsigned v = 0; v < 256; v++) {
            if (v == keep)
                continue;
            uint8_t *t = malloc(len);
            memcpy(t, p, len);
            t[i] = (uint8_t)v;
            struct replica_entry e;
            char err[SLUICE_ERRMSG_SIZE] = "";
            int rc = replica_entry_parse(t, len, &e, err, sizeof err);
            if (rc != 0) {
                assert_int_equal(rc, SLUICE_ERR_CORRUPT);
                assert_true(err[0] != '\0');
                refused++;
            } else {
                uint64_t cursor = 0;
                const uint8_t *d;
                size_t dl, n = 0;
                while (replica_entry_next(&e, &cursor, &d, &dl)) {
                    assert_true(d >= t && d + dl <= t + len);
                    n++;
                }
                assert_int_equal(n, e.count);
                parsed++;
            }
            free(t);
        }
    }
    /* Flips of the origin, the term, the address and the records' bytes parse; the rest not. */
    assert_true(parsed > 0 && refused > 0);
    free(p);

    /* A realistic entry with each byte flipped: parse and apply to a copy of the state it was
     * planned on, or be refused. */
    struct harness h;
    harness_init(&h);
    harness_run_script(&h, DIST2);
    struct state base;
    state_init(&base);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(replica_state_copy(&base, &h.s, err, sizeof err), 0);
    size_t before = h.record.n;
    harness_run_script(&h, "splits 1 2\nsplits 2 1 req=1\nhb c:1 1\nsplits 1 1 fin=0\n");
    struct st_update_list tail = {h.record.v + before, h.record.n - before, 0};
    struct encoded enc;
    encode_record(&tail, &enc);
    uint8_t *q;
    size_t qlen;
    assert_int_equal(replica_entry_encode(1, 1, "a:1", enc.recs, enc.n, NULL, &q, &qlen), 0);
    size_t applied = 0, apply_refused = 0;
    for (size_t i = 0; i < qlen; i++) {
        uint8_t *t = malloc(qlen);
        memcpy(t, q, qlen);
        t[i] ^= 0x41;
        struct replica_entry e;
        if (replica_entry_parse(t, qlen, &e, err, sizeof err) == 0) {
            struct state s;
            state_init(&s);
            assert_int_equal(replica_state_copy(&s, &base, err, sizeof err), 0);
            struct state *one[1] = {&s};
            err[0] = '\0';
            int rc = replica_entry_apply(&e, one, 1, NULL, err, sizeof err);
            if (rc == 0) {
                harness_check_invariants(&s);
                applied++;
            } else {
                assert_true(rc == SLUICE_ERR_CORRUPT);
                assert_true(err[0] != '\0');
                apply_refused++;
            }
            state_release(&s);
        }
        free(t);
    }
    assert_true(applied > 0 && apply_refused > 0);
    free(q);
    encoded_free(&enc);
    state_release(&base);
    harness_release(&h);
}

/* A batch applied through an entry to two states gives both the digest of applying its updates
 * one by one; a NULL state is skipped. */
static void test_entry_apply(void **unused)
{
    (void)unused;
    struct harness h;
    rich_state(&h);
    struct encoded enc;
    encode_record(&h.record, &enc);
    uint8_t *p;
    size_t len;
    assert_int_equal(replica_entry_encode(1, 2, "a:1", enc.recs, enc.n, NULL, &p, &len), 0);
    struct replica_entry e;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(replica_entry_parse(p, len, &e, err, sizeof err), 0);
    struct state a, b, one;
    state_init(&a);
    state_init(&b);
    state_init(&one);
    for (size_t i = 0; i < h.record.n; i++)
        assert_int_equal(state_apply(&one, &h.record.v[i]), 0);
    struct state *states[3] = {&a, NULL, &b};
    if (replica_entry_apply(&e, states, 3, NULL, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(state_digest(&a), state_digest(&one));
    assert_int_equal(state_digest(&b), state_digest(&one));
    assert_int_equal(state_digest(&a), state_digest(&h.s));
    harness_check_invariants(&a);

    /* Applied again, the first update no longer fits: refused naming it. */
    assert_int_equal(replica_entry_apply(&e, states, 1, NULL, err, sizeof err), SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "dataset_registered 1 does not apply: corrupt data");
    assert_int_equal(state_digest(&a), state_digest(&one));

    /* A record that does not decode is refused by its index. */
    static const uint8_t junk[3] = {0xff, 0xff, 0xff};
    struct replica_record bad[2] = {enc.recs[0], {junk, 3}};
    uint8_t *q;
    size_t qlen;
    assert_int_equal(replica_entry_encode(1, 2, "a:1", bad, 2, NULL, &q, &qlen), 0);
    assert_int_equal(replica_entry_parse(q, qlen, &e, err, sizeof err), 0);
    struct state c;
    state_init(&c);
    struct state *cs[1] = {&c};
    assert_int_equal(replica_entry_apply(&e, cs, 1, NULL, err, sizeof err), SLUICE_ERR_CORRUPT);
    assert_true(strncmp(err, "record 1 does not decode: ", 26) == 0);
    /* The records before it stay applied. */
    assert_int_equal(c.ndatasets, 1);
    state_release(&c);
    free(q);
    state_release(&a);
    state_release(&b);
    state_release(&one);
    free(p);
    encoded_free(&enc);
    harness_release(&h);
}

/* ---- snapshots and copies -------------------------------------------------------------------- */

static void test_snapshot_round_trip(void **unused)
{
    (void)unused;
    struct harness h;
    rich_state(&h);
    char err[SLUICE_ERRMSG_SIZE];
    uint8_t *p;
    size_t len;
    assert_int_equal(replica_snapshot_encode(&h.s, NULL, &p, &len), 0);
    struct state back;
    if (replica_snapshot_decode(p, len, &back, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(state_digest(&back), state_digest(&h.s));
    harness_check_invariants(&back);
    assert_int_equal(back.ndatasets, 2);
    for (size_t i = 0; i < back.ndatasets; i++) {
        const struct st_dataset *d = state_dataset(&h.s, back.datasets[i].id);
        assert_non_null(d);
        assert_int_equal(back.datasets[i].def_len, d->def_len);
        assert_memory_equal(back.datasets[i].def, d->def, d->def_len);
    }
    /* The restored state goes on as the live one: the same next planning. */
    struct harness g;
    harness_init(&g);
    state_release(&g.s);
    g.s = back;
    const char *more = "ds x defx\nhb d:1 1\njob x mode=distributed_epoch total=2\nsplits 1 1\n";
    harness_run_script(&h, more);
    harness_run_script(&g, more);
    assert_int_equal(state_digest(&g.s), state_digest(&h.s));
    harness_release(&g);

    /* An empty state. */
    struct state empty, eback;
    state_init(&empty);
    uint8_t *ep;
    size_t elen;
    assert_int_equal(replica_snapshot_encode(&empty, NULL, &ep, &elen), 0);
    assert_int_equal(replica_snapshot_decode(ep, elen, &eback, err, sizeof err), 0);
    assert_int_equal(state_digest(&eback), state_digest(&empty));
    state_release(&eback);
    state_release(&empty);
    free(ep);
    free(p);
    harness_release(&h);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void expect_snapshot_refused(const uint8_t *p, size_t len, const char *why)
{
    uint8_t *t = malloc(len ? len : 1);
    memcpy(t, p, len);
    struct state s;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = replica_snapshot_decode(t, len, &s, err, sizeof err);
    if (rc != SLUICE_ERR_CORRUPT || (why && strcmp(err, why) != 0))
        fail_msg("length %zu: rc %d '%s', expected '%s'", len, rc, err, why ? why : "(any)");
    /* An empty state on failure. */
    struct state empty;
    state_init(&empty);
    assert_int_equal(state_digest(&s), state_digest(&empty));
    assert_int_equal(s.ndatasets, 0);
    state_release(&s);
    state_release(&empty);
    free(t);
}

/* A snapshot's CRC (bytes 4 to 8, over every byte after the first 8) made right again after a
 * change, so that the checks behind it are reached. */
static void reseal(uint8_t *t, size_t len)
{
    put_le(t + 4, crc32c(t + 8, len - 8), 4);
}

static void test_snapshot_refused(void **unused)
{
    (void)unused;
    struct harness h;
    rich_state(&h);
    uint8_t *p;
    size_t len;
    assert_int_equal(replica_snapshot_encode(&h.s, NULL, &p, &len), 0);
    assert_memory_equal(p, "SLS2", 4);
    /* Every truncation. */
    for (size_t cut = 0; cut < len; cut++)
        expect_snapshot_refused(p, cut, NULL);
    expect_snapshot_refused(p, 19, "not a sluice snapshot");
    uint8_t *t = malloc(len + 1);
    /* Every byte flipped, the CRC's own included: a checksum mismatch, whatever the byte. */
    for (size_t at = 4; at < len; at++) {
        memcpy(t, p, len);
        t[at] ^= (uint8_t)(1u << (at % 8));
        struct state s;
        char err[SLUICE_ERRMSG_SIZE] = "";
        assert_int_equal(replica_snapshot_decode(t, len, &s, err, sizeof err), SLUICE_ERR_CORRUPT);
        if (strncmp(err, "snapshot: checksum mismatch (stored ", 36) != 0)
            fail_msg("byte %zu flipped: '%s'", at, err);
        state_release(&s);
    }
    memcpy(t, p, len);
    reseal(t, len - 1);
    expect_snapshot_refused(t, len - 1, "snapshot: damaged framing");
    /* Damaged framing behind a right CRC: the magic, the state's length, the count of datasets,
     * an id's length, a definition's length, bytes after the last definition. */
    uint64_t snaplen = 0;
    for (int i = 0; i < 8; i++)
        snaplen |= (uint64_t)p[8 + i] << (8 * i);
    size_t defs = 16 + (size_t)snaplen;
    struct {
        size_t at;
        uint64_t v;
        int n;
        const char *why;
    } damage[] = {
        {0, 'X', 1, "not a sluice snapshot"},
        {8, snaplen + 1, 8, "snapshot: damaged framing"},
        {8, UINT64_MAX, 8, "snapshot: damaged framing"},
        {8, len - 16, 8, "snapshot: damaged framing"},
        {defs, 3, 4, "snapshot: damaged framing"},
        {defs, 1, 4, "snapshot: damaged framing"},
        {defs, UINT32_MAX, 4, "snapshot: damaged framing"},
        {defs + 4, 0xffff, 2, "snapshot: damaged framing"},
        {defs + 4 + 2 + 1, UINT64_MAX, 8, "snapshot: damaged framing"},
        {defs + 4 + 2 + 1, 1000, 8, "snapshot: damaged framing"},
    };
    for (size_t i = 0; i < sizeof damage / sizeof damage[0]; i++) {
        memcpy(t, p, len);
        put_le(t + damage[i].at, damage[i].v, damage[i].n);
        reseal(t, len);
        expect_snapshot_refused(t, len, damage[i].why);
    }
    memcpy(t, p, len);
    t[len] = 0;
    reseal(t, len + 1);
    expect_snapshot_refused(t, len + 1, "snapshot: damaged framing");
    /* A definition that is not the one the state names (first dataset "1", definition "r4"). */
    memcpy(t, p, len);
    assert_int_equal(t[defs + 4], 1);
    assert_int_equal(t[defs + 6], '1');
    assert_int_equal(t[defs + 7], 2);
    t[defs + 15] ^= 1;
    reseal(t, len);
    expect_snapshot_refused(t, len, NULL);
    /* A definition missing: the id renamed. */
    memcpy(t, p, len);
    t[defs + 6] = '9';
    reseal(t, len);
    expect_snapshot_refused(t, len, "dataset '1': no definition in the snapshot");
    /* The state's bytes damaged. */
    memcpy(t, p, len);
    t[16] ^= 0xff;
    reseal(t, len);
    expect_snapshot_refused(t, len, NULL);

    /* A snapshot of the format before the CRC ("SLS1": the same body after a 4-byte magic), as
     * older versions left in their Raft directories, still restores. */
    memcpy(t, "SLS1", 4);
    memcpy(t + 4, p + 8, len - 8);
    struct state back;
    char err[SLUICE_ERRMSG_SIZE];
    if (replica_snapshot_decode(t, len - 4, &back, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(state_digest(&back), state_digest(&h.s));
    state_release(&back);
    expect_snapshot_refused(t, 15, "not a sluice snapshot");
    put_le(t + 4, len, 8);
    expect_snapshot_refused(t, len - 4, "snapshot: damaged framing");
    free(t);
    free(p);
    harness_release(&h);
}

static void test_state_copy(void **unused)
{
    (void)unused;
    struct harness h;
    rich_state(&h);
    struct state dst;
    state_init(&dst);
    dst.limits =
        (struct st_limits){.max_datasets = 3, .max_pipeline_bytes = 99, .max_jobs_per_client = 5};
    dst.static_workers = 4;
    h.s.limits = (struct st_limits){.max_datasets = 100};
    h.s.static_workers = 1;
    /* dst held something before: it is replaced. */
    struct st_update u = {.type = ST_DATASET_REGISTERED, .id = 0};
    snprintf(u.name, sizeof u.name, "old");
    u.def = (uint8_t *)"x";
    u.def_len = 1;
    assert_int_equal(state_apply(&dst, &u), 0);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(replica_state_copy(&dst, &h.s, err, sizeof err), 0);
    assert_int_equal(state_digest(&dst), state_digest(&h.s));
    assert_null(state_dataset(&dst, "old"));
    assert_int_equal(dst.limits.max_datasets, 3);
    assert_int_equal(dst.limits.max_pipeline_bytes, 99);
    assert_int_equal(dst.limits.max_jobs_per_client, 5);
    assert_int_equal(dst.static_workers, 4);
    harness_check_invariants(&dst);
    /* The copy owns its memory: the source changes, the copy does not. */
    uint64_t d = state_digest(&dst);
    harness_run_script(&h, "hb z:1 1\n");
    assert_int_equal(state_digest(&dst), d);
    state_release(&dst);
    harness_release(&h);
}

/* A new directory's decision from its peers' answers. */
static void test_join_decide(void **unused)
{
    (void)unused;
    const uint64_t U = REPLICA_UNKNOWN;
    struct {
        uint64_t a[4];
        size_t n;
        enum replica_join want;
    } cases[] = {
        {{0}, 0, REPLICA_BOOTSTRAP},    /* a group of one */
        {{0, 0}, 2, REPLICA_BOOTSTRAP}, /* every peer new too */
        {{1, 0}, 2, REPLICA_BOOTSTRAP}, /* a peer bootstrapped, nothing past it */
        {{1, 1, 0, 1}, 4, REPLICA_BOOTSTRAP},
        {{0, U}, 2, REPLICA_WAIT}, /* one peer not heard from */
        {{U, U}, 2, REPLICA_WAIT},
        {{2, U}, 2, REPLICA_JOIN}, /* a log past the bootstrap: the group runs */
        {{U, 57}, 2, REPLICA_JOIN},
        {{0, 1, U, 3}, 4, REPLICA_JOIN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(replica_join_decide(cases[i].a, cases[i].n), cases[i].want);
}

/* replica_state_restore: what Raft's FSM restore and `sluice journal` run on a snapshot. */
static void test_state_restore(void **unused)
{
    (void)unused;
    struct harness h;
    rich_state(&h);
    uint8_t *p;
    size_t len;
    assert_int_equal(replica_snapshot_encode(&h.s, NULL, &p, &len), 0);
    struct state s;
    state_init(&s);
    s.limits = (struct st_limits){.max_datasets = 7, .max_jobs_per_client = 2};
    s.static_workers = 3;
    struct st_update u = {.type = ST_DATASET_REGISTERED, .id = 0};
    snprintf(u.name, sizeof u.name, "old");
    u.def = (uint8_t *)"x";
    u.def_len = 1;
    assert_int_equal(state_apply(&s, &u), 0);
    uint64_t before = state_digest(&s);
    char err[SLUICE_ERRMSG_SIZE] = "";
    /* Refused: the state is left as it was, with the decoder's reason. */
    uint8_t *t = malloc(len);
    memcpy(t, p, len);
    t[0] = 'X';
    assert_int_equal(replica_state_restore(&s, t, len, err, sizeof err), SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "not a sluice snapshot");
    assert_int_equal(replica_state_restore(&s, p, len - 1, err, sizeof err), SLUICE_ERR_CORRUPT);
    assert_true(strncmp(err, "snapshot: checksum mismatch (stored ", 36) == 0);
    assert_int_equal(state_digest(&s), before);
    assert_non_null(state_dataset(&s, "old"));
    /* Restored: the snapshot's state, with the limits and static workers kept. */
    assert_int_equal(replica_state_restore(&s, p, len, err, sizeof err), 0);
    assert_int_equal(state_digest(&s), state_digest(&h.s));
    assert_null(state_dataset(&s, "old"));
    assert_int_equal(s.limits.max_datasets, 7);
    assert_int_equal(s.limits.max_jobs_per_client, 2);
    assert_int_equal(s.static_workers, 3);
    harness_check_invariants(&s);
    free(t);
    free(p);
    state_release(&s);
    harness_release(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_decide),
        cmocka_unit_test(test_cluster_cases),
        cmocka_unit_test(test_cluster_canon_too_long),
        cmocka_unit_test(test_entry_round_trip),
        cmocka_unit_test(test_entry_encode_refusals),
        cmocka_unit_test(test_entry_damage),
        cmocka_unit_test(test_entry_flips),
        cmocka_unit_test(test_entry_apply),
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_snapshot_refused),
        cmocka_unit_test(test_state_copy),
        cmocka_unit_test(test_state_restore),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
