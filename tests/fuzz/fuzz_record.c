/* Feeds arbitrary bytes to the journal's record decoders, as a damaged disk would. The first byte
 * picks the decoder:
 *   0  the value framing: whatever decodes must frame back to the same bytes;
 *   1  an Update: whatever decodes must encode canonically (encode, decode, encode gives the same
 *      bytes), and applying it to a small live state must either refuse it or leave a state that
 *      still holds every invariant (its snapshot decodes, to the same digest);
 *   2  a Snapshot (definitions looked up as the id's own bytes): whatever decodes must encode and
 *      decode back to the same digest. */
#include "fuzz.h"

#include "common/error.h"
#include "dispatcher/update_codec.h"
#include "dispatcher/state.h"
#include "journal/record.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The datasets table of the fuzzer: the definitions of the state given as user, or, without
 * one, the id's own bytes. */
static int lookup(void *user, const char *id, uint8_t **def, size_t *len, char *err, size_t errlen)
{
    const struct state *s = user;
    const struct st_dataset *ds = s ? state_dataset(s, id) : NULL;
    const uint8_t *src = ds ? ds->def : (const uint8_t *)id;
    size_t n = ds ? ds->def_len : strlen(id);
    if (s && !ds)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "no dataset '%s'", id);
    *def = malloc(n ? n : 1);
    if (!*def)
        return SLUICE_ERR_NOMEM;
    if (n)
        memcpy(*def, src, n);
    *len = n;
    return 0;
}

static void must_apply(struct state *s, const struct st_update *u)
{
    int rc = state_apply(s, u);
    assert(rc == 0);
    (void)rc;
}

/* A small state with a bit of everything for fuzzed updates to land on. */
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

/* The state survives a snapshot with the same digest (so it holds every invariant). */
static void check_snapshot(const struct state *s)
{
    uint8_t *b;
    size_t n;
    char err[SLUICE_ERRMSG_SIZE];
    struct state back;
    if (update_codec_snapshot_encode(s, &b, &n) < 0)
        return;
    int rc = update_codec_snapshot_decode(b, n, lookup, (void *)s, &back, err, sizeof err);
    if (rc == SLUICE_ERR_NOMEM) {
        free(b);
        return;
    }
    if (rc != 0) {
        fprintf(stderr, "a state the machine reached does not restore: %s\n", err);
        abort();
    }
    assert(state_digest(&back) == state_digest(s));
    state_release(&back);
    free(b);
}

static void fuzz_frame(const uint8_t *data, size_t len)
{
    uint8_t key[8] = {0};
    size_t klen = len < 8 ? len : 8;
    memcpy(key, data, klen);
    const uint8_t *payload;
    size_t plen;
    if (journal_record_decode(data + klen, len - klen, key, klen, &payload, &plen, NULL) < 0)
        return;
    uint8_t *again = malloc(journal_record_size(plen));
    assert(again);
    journal_record_frame(again, key, klen, payload, plen);
    assert(memcmp(again, data + klen, len - klen) == 0);
    free(again);
}

static void fuzz_update(const uint8_t *data, size_t len)
{
    struct st_update u, back;
    char err[SLUICE_ERRMSG_SIZE];
    if (update_codec_decode(data, len, &u, err, sizeof err) < 0)
        return;
    uint8_t *b1, *b2;
    size_t n1, n2;
    if (update_codec_encode(&u, &b1, &n1) == 0) {
        int rc = update_codec_decode(b1, n1, &back, err, sizeof err);
        assert(rc == 0 || rc == SLUICE_ERR_NOMEM);
        if (rc == 0) {
            if (update_codec_encode(&back, &b2, &n2) == 0) {
                assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
                free(b2);
            }
            st_update_release(&back);
        }
        free(b1);
    }
    struct state s;
    small_state(&s);
    uint64_t before = state_digest(&s);
    int rc = state_apply(&s, &u);
    assert(rc == 0 || rc == SLUICE_ERR_CORRUPT || rc == SLUICE_ERR_NOMEM);
    if (rc != 0)
        assert(state_digest(&s) == before); /* a refused update changes nothing */
    check_snapshot(&s);
    state_release(&s);
    st_update_release(&u);
}

static void fuzz_snapshot(const uint8_t *data, size_t len)
{
    struct state s;
    char err[SLUICE_ERRMSG_SIZE];
    if (update_codec_snapshot_decode(data, len, lookup, NULL, &s, err, sizeof err) < 0)
        return;
    check_snapshot(&s);
    state_release(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len == 0)
        return 0;
    switch (data[0] % 3) {
    case 0:
        fuzz_frame(data + 1, len - 1);
        break;
    case 1:
        fuzz_update(data + 1, len - 1);
        break;
    default:
        fuzz_snapshot(data + 1, len - 1);
        break;
    }
    return 0;
}
