/* Feeds arbitrary bytes to what dispatcher replicas read out of Raft (replica_codec.h), as a
 * damaged log or a hostile peer would. The first byte picks the reader:
 *   even  an entry: whatever parses steps through exactly count records inside the input, encodes
 *         back to the same bytes (when its address has no NUL), and applies to two copies of a
 *         small state alike: the same result, the same digest, and a state that still restores
 *         from its snapshot;
 *   odd   a snapshot: whatever decodes encodes and decodes back to the same digest. */
#include "fuzz.h"

#include "common/error.h"
#include "dispatcher/replica_codec.h"
#include "dispatcher/state.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void must_apply(struct state *s, const struct st_update *u)
{
    int rc = state_apply(s, u);
    assert(rc == 0);
    (void)rc;
}

/* A small state with a dataset, a worker, a distributed job with an iteration, a task holding
 * three splits, and a client: fuzzed records have something to land on. */
static void small_state(struct state *s)
{
    static const uint64_t leased[] = {0, 1, 2};
    struct st_update u;
    state_init(s);
    memset(&u, 0, sizeof u);
    u.type = ST_DATASET_REGISTERED;
    u.id = 1;
    snprintf(u.name, sizeof u.name, "1");
    u.def = (uint8_t *)"1";
    u.def_len = 1;
    must_apply(s, &u);
    memset(&u, 0, sizeof u);
    u.type = ST_WORKER_REGISTERED;
    u.id = 1;
    snprintf(u.address, sizeof u.address, "w:1");
    must_apply(s, &u);
    memset(&u, 0, sizeof u);
    u.type = ST_JOB_CREATED;
    u.id = 1;
    snprintf(u.name2, sizeof u.name2, "1");
    u.mode = SLUICE_DISTRIBUTED_EPOCH;
    must_apply(s, &u);
    memset(&u, 0, sizeof u);
    u.type = ST_ITERATION_CREATED;
    u.id = 1;
    u.ref = 1;
    u.distributed = true;
    u.plan = (struct split_plan){.source_len = 8, .split_size = 1, .per_pass = 8, .passes = 1};
    must_apply(s, &u);
    memset(&u, 0, sizeof u);
    u.type = ST_TASK_CREATED;
    u.id = 1;
    u.ref = 1;
    u.ref2 = 1;
    must_apply(s, &u);
    memset(&u, 0, sizeof u);
    u.type = ST_CLIENT_ACQUIRED;
    u.id = 1;
    u.ref = 1;
    must_apply(s, &u);
    memset(&u, 0, sizeof u);
    u.type = ST_SPLITS_LEASED;
    u.ref = 1;
    u.ref2 = 1;
    u.seqs = (struct st_seq_list){.v = (uint64_t *)leased, .n = 3, .cap = 3};
    must_apply(s, &u);
}

/* s restores from its replica snapshot with the same digest. */
static void check_snapshot(const struct state *s)
{
    uint8_t *p;
    size_t len;
    char err[SLUICE_ERRMSG_SIZE];
    if (replica_snapshot_encode(s, NULL, &p, &len) < 0)
        return;
    struct state back;
    int rc = replica_snapshot_decode(p, len, &back, err, sizeof err);
    free(p);
    if (rc == SLUICE_ERR_NOMEM)
        return;
    if (rc != 0) {
        fprintf(stderr, "a state the replicas reached does not restore: %s\n", err);
        abort();
    }
    assert(state_digest(&back) == state_digest(s));
    state_release(&back);
}

static void fuzz_entry(const uint8_t *data, size_t len)
{
    /* A copy of exactly len bytes, so that a read past the end is caught. */
    uint8_t *buf = malloc(len ? len : 1);
    assert(buf);
    memcpy(buf, data, len);
    struct replica_entry e;
    char err[SLUICE_ERRMSG_SIZE];
    if (replica_entry_parse(buf, len, &e, err, sizeof err) != 0) {
        free(buf);
        return;
    }
    assert(len % 8 == 0);
    struct replica_record *recs = malloc((e.count ? e.count : 1) * sizeof *recs);
    if (!recs) {
        free(buf);
        return;
    }
    uint64_t cursor = 0;
    const uint8_t *d;
    size_t dl;
    uint32_t n = 0;
    while (replica_entry_next(&e, &cursor, &d, &dl)) {
        assert(n < e.count);
        assert(d >= buf && d + dl <= buf + len);
        recs[n++] = (struct replica_record){d, dl};
    }
    assert(n == e.count);
    /* Canonical: the same entry encodes to the same bytes. An address with a NUL inside reads
     * back shorter, and then encodes shorter. */
    if (strlen(e.rpc) == (size_t)(buf[20] | buf[21] << 8)) {
        uint8_t *again;
        size_t alen;
        int re = e.seed
                     ? replica_entry_encode_seed(e.origin, e.term, e.rpc, e.seed, e.seed_len, NULL,
                                                 &again, &alen)
                     : replica_entry_encode(e.origin, e.term, e.rpc, recs, n, NULL, &again, &alen);
        if (re == 0) {
            assert(alen == len && memcmp(again, buf, len) == 0);
            free(again);
        }
    }
    free(recs);

    struct state a, b;
    small_state(&a);
    small_state(&b);
    struct state *both[2] = {&a, NULL};
    int ra = replica_entry_apply(&e, both, 2, NULL, err, sizeof err);
    struct state *other[1] = {&b};
    int rb = replica_entry_apply(&e, other, 1, NULL, err, sizeof err);
    assert(ra == rb);
    assert(ra == 0 || ra == SLUICE_ERR_CORRUPT || ra == SLUICE_ERR_NOMEM);
    assert(state_digest(&a) == state_digest(&b));
    if (ra == 0)
        check_snapshot(&a);
    state_release(&a);
    state_release(&b);
    free(buf);
}

static void fuzz_snapshot(const uint8_t *data, size_t len)
{
    uint8_t *buf = malloc(len ? len : 1);
    assert(buf);
    memcpy(buf, data, len);
    struct state s;
    char err[SLUICE_ERRMSG_SIZE];
    int rc = replica_snapshot_decode(buf, len, &s, err, sizeof err);
    free(buf);
    assert(rc == 0 || rc == SLUICE_ERR_CORRUPT || rc == SLUICE_ERR_NOMEM);
    if (rc == 0)
        check_snapshot(&s);
    state_release(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len == 0)
        return 0;
    if (data[0] % 2 == 0)
        fuzz_entry(data + 1, len - 1);
    else
        fuzz_snapshot(data + 1, len - 1);
    return 0;
}
