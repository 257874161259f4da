/* Journal records: the value framing (src/journal/record.c) detects every flipped bit, a value
 * under the wrong key, a truncated value and an unknown format; every update type survives
 * encode -> decode field for field and re-encodes to the same bytes; malformed Updates are
 * refused with exact messages; a snapshot restores a state with the same digest, and a snapshot
 * that breaks an invariant of state.h is refused naming the row. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/crc32c.h"
#include "common/error.h"
#include "dispatcher/update_codec.h"
#include "dispatcher/state.h"
#include "journal.pb-c.h"
#include "journal/record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- framing --------------------------------------------------------------------------------- */

static void test_frame_round_trip(void **unused)
{
    (void)unused;
    uint8_t key[8], out[64];
    const uint8_t *p = NULL;
    size_t n = 0;
    const char *why = "x";
    journal_seq_key(42, key);
    journal_record_frame(out, key, 8, "hello", 5);
    assert_int_equal(journal_record_size(5), 10);
    assert_int_equal(out[4], JOURNAL_RECORD_FORMAT);
    assert_memory_equal(out + JOURNAL_RECORD_HEADER, "hello", 5);
    assert_int_equal(journal_record_decode(out, 10, key, 8, &p, &n, &why), 0);
    assert_ptr_equal(p, out + JOURNAL_RECORD_HEADER);
    assert_int_equal(n, 5);
    assert_null(why);

    /* An empty payload frames to the header alone. */
    journal_record_frame(out, key, 8, NULL, 0);
    assert_int_equal(journal_record_decode(out, 5, key, 8, &p, &n, NULL), 0);
    assert_int_equal(n, 0);

    /* The checksum is crc32c over key, format byte and payload, stored big-endian. */
    uint8_t covered[14];
    memcpy(covered, key, 8);
    covered[8] = JOURNAL_RECORD_FORMAT;
    memcpy(covered + 9, "hello", 5);
    journal_record_frame(out, key, 8, "hello", 5);
    uint32_t crc = crc32c(covered, sizeof covered);
    assert_int_equal(out[0], crc >> 24);
    assert_int_equal(out[3], crc & 0xff);
}

static void test_frame_detects_damage(void **unused)
{
    (void)unused;
    uint8_t key[8], other[8], out[64];
    const uint8_t *p = NULL;
    size_t n = 99;
    const char *why = NULL;
    journal_seq_key(7, key);
    journal_seq_key(8, other);
    const char payload[] = "a record payload";
    size_t len = journal_record_size(sizeof payload);
    journal_record_frame(out, key, 8, payload, sizeof payload);

    /* Every single flipped bit is caught. */
    for (size_t bit = 0; bit < len * 8; bit++) {
        out[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        int rc = journal_record_decode(out, len, key, 8, &p, &n, &why);
        assert_int_equal(rc, SLUICE_ERR_CORRUPT);
        assert_string_equal(why, bit / 8 == 4 ? "unknown record format" : "checksum mismatch");
        out[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    assert_null(p);
    assert_int_equal(n, 99);

    /* The same bytes under another key are damage too. */
    assert_int_equal(journal_record_decode(out, len, other, 8, &p, &n, &why), SLUICE_ERR_CORRUPT);
    assert_string_equal(why, "checksum mismatch");
    /* A value cut short. */
    assert_int_equal(journal_record_decode(out, len - 1, key, 8, &p, &n, &why), SLUICE_ERR_CORRUPT);
    for (size_t cut = 0; cut < JOURNAL_RECORD_HEADER; cut++) {
        assert_int_equal(journal_record_decode(out, cut, key, 8, &p, &n, &why),
                         SLUICE_ERR_TRUNCATED);
        assert_string_equal(why, "shorter than its header");
    }
    assert_int_equal(journal_record_decode(out, len, key, 8, &p, &n, NULL), 0);
}

static void test_seq_keys(void **unused)
{
    (void)unused;
    static const uint64_t seqs[] = {0, 1, 255, 256, 65535, 1ull << 32, UINT64_MAX - 1, UINT64_MAX};
    uint8_t a[8], b[8];
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        journal_seq_key(seqs[i], a);
        assert_true(journal_seq_from_key(a) == seqs[i]);
        if (i > 0) {
            journal_seq_key(seqs[i - 1], b);
            assert_true(memcmp(b, a, 8) < 0); /* byte order is numeric order */
        }
    }
    journal_seq_key(0x0102030405060708ull, a);
    assert_memory_equal(a, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
}

/* ---- updates --------------------------------------------------------------------------------- */

static void seqs_set(struct st_seq_list *l, const uint64_t *v, size_t n)
{
    l->v = malloc(n * sizeof *v);
    assert_non_null(l->v);
    memcpy(l->v, v, n * sizeof *v);
    l->n = l->cap = n;
}

/* One update of every type, each with every field its type uses set to something distinctive. */
static size_t sample_updates(struct st_update *u)
{
    static const uint64_t seqs[] = {0, 1, 2, 7, 1000000000000ull};
    static const uint8_t def[] = {0x0a, 0x00, 0x12, 0xff, 0x00};
    size_t n = 0;
    for (int t = ST_DATASET_REGISTERED; t <= ST_MIX_WEIGHTS; t++) {
        struct st_update *x = &u[n++];
        memset(x, 0, sizeof *x);
        x->type = (enum st_update_type)t;
        x->id = 100 + (uint64_t)t;
        x->ref = 200 + (uint64_t)t;
        x->ref2 = 300 + (uint64_t)t;
        switch (x->type) {
        case ST_DATASET_REGISTERED:
            x->id = 17;
            snprintf(x->name, sizeof x->name, "17");
            x->def = malloc(sizeof def);
            assert_non_null(x->def);
            memcpy(x->def, def, sizeof def);
            x->def_len = sizeof def;
            x->compression = 1;
            x->split_size = 64;
            x->text = strdup("range(10) | map(square)");
            break;
        case ST_JOB_CREATED:
            snprintf(x->name, sizeof x->name, "shared job");
            snprintf(x->name2, sizeof x->name2, "dataset-x");
            x->mode = SLUICE_DISTRIBUTED_EPOCH;
            x->num_consumers = 3;
            x->deterministic = true;
            x->xtc_bytes = 1u << 20;
            x->target_workers = SLUICE_TARGET_WORKERS_LOCAL;
            break;
        case ST_ITERATION_CREATED:
            x->distributed = true;
            x->plan.source_len = 10;
            x->plan.split_size = 3;
            x->plan.per_pass = 4;
            x->plan.passes = UINT64_MAX;
            x->plan.paths = calloc(2, sizeof *x->plan.paths);
            assert_non_null(x->plan.paths);
            x->plan.paths[0] = strdup("/data/a.tfrecord");
            x->plan.paths[1] = strdup("/data/b c.tfrecord");
            x->plan.npaths = 2;
            /* A restored read: its cursor and the splits it re-issues first. */
            x->start = 7;
            seqs_set(&x->seqs, (const uint64_t[]){2, 5}, 2);
            x->resume_id = 0x8badf00ddeadbeefull;
            break;
        case ST_WORKER_REGISTERED:
            snprintf(x->address, sizeof x->address, "worker-7.example:5051");
            x->incarnation = 0xfedcba9876543210ull;
            snprintf(x->host_id, sizeof x->host_id, "node-7.example");
            break;
        case ST_SPLITS_LEASED:
            x->id = 77; /* the worker's request number */
            seqs_set(&x->seqs, seqs, sizeof seqs / sizeof seqs[0]);
            break;
        case ST_SPLITS_FINISHED:
        case ST_SPLITS_RETURNED:
        case ST_ROUNDS_SCHEDULED:
            x->id = 0;
            seqs_set(&x->seqs, seqs, sizeof seqs / sizeof seqs[0]);
            break;
        case ST_ROUNDS_GRANTED:
            x->id = 0;
            x->ref2 = 1ull << 40;
            break;
        case ST_ITERATION_FAILED:
            x->ref = x->ref2 = 0;
            x->text = strdup("task 3: map(bytes): element of 1073741824 bytes is over the worker's "
                             "limit of 134217728 (--max-element-bytes)");
            break;
        case ST_CLIENT_ACQUIRED:
            x->incarnation = 0x0123456789abcdefull; /* the owner */
            snprintf(x->host_id, sizeof x->host_id, "f4cbaf1a-6f93-4864-bdf3-e08c506b701e-net1");
            break;
        case ST_SAVE_STARTED:
            snprintf(x->name, sizeof x->name, "dataset-x");
            x->text = strdup("/shared/snapshots/x 1");
            break;
        case ST_SAVE_FINISHED:
            x->ref = x->ref2 = 0;
            break;
        case ST_SAVE_FAILED:
            x->ref = x->ref2 = 0;
            x->text = strdup("chunk /s/chunks/chunk-000000000003: damaged at offset 12");
            break;
        case ST_MIX_WEIGHTS:
            x->id = x->ref2 = 0;
            snprintf(x->name, sizeof x->name, "mixed job");
            snprintf(x->name2, sizeof x->name2, "dataset-x");
            x->start = 1u << 20;
            x->weights = malloc(3 * sizeof *x->weights);
            assert_non_null(x->weights);
            x->weights[0] = 0.6;
            x->weights[1] = 0;
            x->weights[2] = 1e-9;
            x->nweights = 3;
            break;
        default:
            break;
        }
    }
    return n;
}

static void assert_updates_equal(const struct st_update *a, const struct st_update *b)
{
    assert_int_equal(a->type, b->type);
    assert_true(a->id == b->id && a->ref == b->ref && a->ref2 == b->ref2);
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->name2, b->name2);
    assert_string_equal(a->address, b->address);
    assert_true(a->incarnation == b->incarnation);
    assert_int_equal(a->mode, b->mode);
    assert_int_equal(a->num_consumers, b->num_consumers);
    assert_int_equal(a->deterministic, b->deterministic);
    assert_true(a->xtc_bytes == b->xtc_bytes);
    assert_int_equal(a->target_workers, b->target_workers);
    assert_string_equal(a->host_id, b->host_id);
    assert_int_equal(a->compression, b->compression);
    assert_true(a->split_size == b->split_size);
    assert_int_equal(a->def_len, b->def_len);
    if (a->def_len)
        assert_memory_equal(a->def, b->def, a->def_len);
    assert_string_equal(a->text ? a->text : "", b->text ? b->text : "");
    assert_int_equal(a->distributed, b->distributed);
    assert_true(a->start == b->start);
    assert_true(a->plan.source_len == b->plan.source_len);
    assert_true(a->plan.split_size == b->plan.split_size);
    assert_true(a->plan.per_pass == b->plan.per_pass);
    assert_true(a->plan.passes == b->plan.passes);
    assert_int_equal(a->plan.npaths, b->plan.npaths);
    for (size_t i = 0; i < a->plan.npaths; i++)
        assert_string_equal(a->plan.paths[i], b->plan.paths[i]);
    assert_int_equal(a->seqs.n, b->seqs.n);
    if (a->seqs.n)
        assert_memory_equal(a->seqs.v, b->seqs.v, a->seqs.n * sizeof *a->seqs.v);
    assert_true(a->resume_id == b->resume_id);
    assert_int_equal(a->nweights, b->nweights);
    if (a->nweights)
        assert_memory_equal(a->weights, b->weights, a->nweights * sizeof *a->weights);
}

static void test_update_round_trip(void **unused)
{
    (void)unused;
    struct st_update u[32];
    size_t n = sample_updates(u);
    assert_int_equal(n, 23);
    for (size_t i = 0; i < n; i++) {
        uint8_t *bytes, *again;
        size_t len, len2;
        struct st_update back;
        char err[SLUICE_ERRMSG_SIZE] = "";
        assert_int_equal(update_codec_encode(&u[i], &bytes, &len), 0);
        assert_int_equal(update_codec_decode(bytes, len, &back, err, sizeof err), 0);
        assert_string_equal(err, "");
        assert_updates_equal(&u[i], &back);
        /* Encoding is canonical: the decoded update gives the same bytes. */
        assert_int_equal(update_codec_encode(&back, &again, &len2), 0);
        assert_int_equal(len, len2);
        assert_memory_equal(bytes, again, len);
        free(bytes);
        free(again);
        st_update_release(&back);
        st_update_release(&u[i]);
    }
}

/* Packs a hand-made Update message, for inputs update_codec_encode() would never produce. */
static uint8_t *pack_update(const Sluice__Update *m, size_t *len)
{
    *len = sluice__update__get_packed_size(m);
    uint8_t *b = malloc(*len ? *len : 1);
    assert_non_null(b);
    sluice__update__pack(m, b);
    return b;
}

static void expect_decode_error(const uint8_t *bytes, size_t len, const char *msg)
{
    struct st_update u;
    char err[SLUICE_ERRMSG_SIZE] = "";
    memset(&u, 0xab, sizeof u);
    assert_int_equal(update_codec_decode(bytes, len, &u, err, sizeof err), SLUICE_ERR_CORRUPT);
    assert_string_equal(err, msg);
    /* Nothing owned is left behind, and the update is empty. */
    assert_int_equal(u.type, 0);
    assert_null(u.def);
    assert_null(u.text);
    assert_null(u.seqs.v);
    assert_null(u.plan.paths);
}

static void test_update_decode_errors(void **unused)
{
    (void)unused;
    char long_name[ST_ID_MAX + 1], long_addr[ST_ADDR_MAX + 1];
    memset(long_name, 'n', ST_ID_MAX);
    long_name[ST_ID_MAX] = '\0';
    memset(long_addr, 'a', ST_ADDR_MAX);
    long_addr[ST_ADDR_MAX] = '\0';
    size_t len;
    uint8_t *b;

    expect_decode_error((const uint8_t *)"\xff\xff\xff", 3, "not an Update message");
    expect_decode_error((const uint8_t *)"", 0, "unknown update type 0");

    Sluice__Update m = SLUICE__UPDATE__INIT;
    m.type = (Sluice__Update__Type)99;
    b = pack_update(&m, &len);
    expect_decode_error(b, len, "unknown update type 99");
    free(b);

    m.type = SLUICE__UPDATE__TYPE__JOB_CREATED;
    m.name = long_name;
    b = pack_update(&m, &len);
    expect_decode_error(b, len, "job_created: a name of 128 bytes or more");
    free(b);
    long_name[ST_ID_MAX - 1] = '\0'; /* 127 bytes fit */
    b = pack_update(&m, &len);
    struct st_update u;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(update_codec_decode(b, len, &u, err, sizeof err), 0);
    assert_int_equal(strlen(u.name), ST_ID_MAX - 1);
    st_update_release(&u);
    free(b);

    m.type = SLUICE__UPDATE__TYPE__WORKER_REGISTERED;
    m.name = (char *)"";
    m.address = long_addr;
    b = pack_update(&m, &len);
    expect_decode_error(b, len, "worker_registered: an address of 256 bytes or more");
    free(b);

    /* The last id would wrap the state's counter past it. */
    m.address = (char *)"w:1";
    m.id = UINT64_MAX;
    b = pack_update(&m, &len);
    expect_decode_error(b, len, "worker_registered: id 18446744073709551615 is out of range");
    free(b);
}

/* ---- snapshots ------------------------------------------------------------------------------- */

static struct st_update *push(struct st_update_list *l, enum st_update_type type, uint64_t id,
                              uint64_t ref, uint64_t ref2)
{
    struct st_update *u = st_update_list_push(l, type);
    assert_non_null(u);
    u->id = id;
    u->ref = ref;
    u->ref2 = ref2;
    return u;
}

static void dataset(struct st_update_list *l, const char *name, uint64_t id, const char *text)
{
    struct st_update *u = push(l, ST_DATASET_REGISTERED, id, 0, 0);
    snprintf(u->name, sizeof u->name, "%s", name);
    char def[64];
    snprintf(def, sizeof def, "definition of %s", name);
    u->def = (uint8_t *)strdup(def);
    u->def_len = strlen(def);
    u->text = strdup(text);
}

static void leases(struct st_update_list *l, enum st_update_type type, uint64_t it, uint64_t task,
                   const uint64_t *seqs, size_t n)
{
    struct st_update *u = push(l, type, 0, it, task);
    seqs_set(&u->seqs, seqs, n);
}

/* A state with a bit of everything: two datasets (one generated), a distributed iteration with
 * leases (task 1's from its GetSplits request 4, one of whose splits is finished since), a
 * returned split and a finished one, a named parallel job, a draining worker. */
static void build_state(struct state *s)
{
    struct st_update_list l = {0};
    struct st_update *u;
    dataset(&l, "1", 1, "range(10)");
    dataset(&l, "named", 0, "lines(\"/x/*\")");
    u = push(&l, ST_WORKER_REGISTERED, 1, 0, 0);
    snprintf(u->address, sizeof u->address, "w1:1");
    u->incarnation = 11;
    u = push(&l, ST_WORKER_REGISTERED, 2, 0, 0);
    snprintf(u->address, sizeof u->address, "w2:1");
    u->incarnation = 22;
    u = push(&l, ST_JOB_CREATED, 1, 0, 0);
    snprintf(u->name2, sizeof u->name2, "1");
    u->mode = SLUICE_DISTRIBUTED_EPOCH;
    u = push(&l, ST_ITERATION_CREATED, 1, 1, 0);
    u->distributed = true;
    u->plan = (struct split_plan){.source_len = 10, .split_size = 1, .per_pass = 10, .passes = 1};
    push(&l, ST_TASK_CREATED, 1, 1, 1);
    push(&l, ST_TASK_CREATED, 2, 1, 2);
    u = push(&l, ST_CLIENT_ACQUIRED, 1, 1, 0);
    u->incarnation = 0xabcdef0123456789ull; /* the owner */
    leases(&l, ST_SPLITS_LEASED, 1, 1, (const uint64_t[]){0, 1, 2}, 3);
    l.v[l.n - 1].id = 4;
    leases(&l, ST_SPLITS_LEASED, 1, 2, (const uint64_t[]){3, 4}, 2);
    leases(&l, ST_SPLITS_RETURNED, 1, 2, (const uint64_t[]){4}, 1);
    leases(&l, ST_SPLITS_FINISHED, 1, 1, (const uint64_t[]){0}, 1);
    u = push(&l, ST_JOB_CREATED, 2, 0, 0);
    snprintf(u->name, sizeof u->name, "n");
    snprintf(u->name2, sizeof u->name2, "named");
    u = push(&l, ST_ITERATION_CREATED, 2, 2, 0);
    push(&l, ST_TASK_CREATED, 3, 2, 1);
    u = push(&l, ST_ITERATION_FAILED, 2, 0, 0);
    u->text = strdup("task 3: batch: element of at least 300 bytes is over the limit");
    push(&l, ST_WORKER_DRAINING, 2, 0, 0);
    /* Two saves of dataset 1: one running (its iteration 3 a split in), one that failed. */
    u = push(&l, ST_JOB_CREATED, 3, 0, 0);
    snprintf(u->name2, sizeof u->name2, "1");
    u->mode = SLUICE_DISTRIBUTED_EPOCH;
    u = push(&l, ST_ITERATION_CREATED, 3, 3, 0);
    u->distributed = true;
    u->plan = (struct split_plan){.source_len = 10, .split_size = 5, .per_pass = 2, .passes = 1};
    push(&l, ST_TASK_CREATED, 4, 3, 1);
    u = push(&l, ST_SAVE_STARTED, 1, 3, 3);
    snprintf(u->name, sizeof u->name, "1");
    u->text = strdup("/snap/a");
    leases(&l, ST_SPLITS_LEASED, 3, 4, (const uint64_t[]){0, 1}, 2);
    leases(&l, ST_SPLITS_FINISHED, 3, 4, (const uint64_t[]){0}, 1);
    u = push(&l, ST_JOB_CREATED, 4, 0, 0);
    snprintf(u->name2, sizeof u->name2, "1");
    u->mode = SLUICE_DISTRIBUTED_EPOCH;
    u = push(&l, ST_ITERATION_CREATED, 4, 4, 0);
    u->distributed = true;
    u->plan = (struct split_plan){.source_len = 10, .split_size = 5, .per_pass = 2, .passes = 1};
    u = push(&l, ST_SAVE_STARTED, 2, 4, 4);
    snprintf(u->name, sizeof u->name, "1");
    u->text = strdup("/snap/b");
    u = push(&l, ST_SAVE_FAILED, 2, 0, 0);
    u->text = strdup("chunk 1 is damaged");
    /* A named mix job's weights schedule: a horizon, then a change past it. */
    u = push(&l, ST_MIX_WEIGHTS, 0, 0, 0);
    snprintf(u->name, sizeof u->name, "mixed");
    snprintf(u->name2, sizeof u->name2, "1");
    u->start = 4096;
    u = push(&l, ST_MIX_WEIGHTS, 0, 5000, 0);
    snprintf(u->name, sizeof u->name, "mixed");
    snprintf(u->name2, sizeof u->name2, "1");
    u->start = 4096;
    u->weights = malloc(2 * sizeof *u->weights);
    assert_non_null(u->weights);
    u->weights[0] = 0.25;
    u->weights[1] = 0.75;
    u->nweights = 2;
    state_init(s);
    for (size_t i = 0; i < l.n; i++)
        assert_int_equal(state_apply(s, &l.v[i]), 0);
    st_update_list_release(&l);
    assert_int_equal(s->iterations[0].split_cursor, 5);
    assert_int_equal(s->iterations[0].pool.n, 1);
    assert_int_equal(s->iterations[0].splits_leased, 3);
    assert_int_equal(s->tasks[0].last_request, 4);
    assert_int_equal(s->tasks[0].granted.n, 3);
    assert_int_equal(s->tasks[1].last_request, 0);
}

/* The datasets table of the tests: the definitions of a state. */
struct defs {
    const struct state *s;
    const char *missing; /* answer "not found" for this id */
    int calls;
};

static int lookup(void *user, const char *id, uint8_t **def, size_t *len, char *err, size_t errlen)
{
    struct defs *d = user;
    d->calls++;
    const struct st_dataset *ds = state_dataset(d->s, id);
    if (!ds || (d->missing && strcmp(d->missing, id) == 0))
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND,
                       "dataset '%s' is not in the datasets table", id);
    *def = malloc(ds->def_len ? ds->def_len : 1);
    assert_non_null(*def);
    memcpy(*def, ds->def, ds->def_len);
    *len = ds->def_len;
    return 0;
}

static void test_snapshot_round_trip(void **unused)
{
    (void)unused;
    struct state s, back, empty;
    build_state(&s);
    state_init(&empty);
    struct defs defs = {.s = &s};
    uint8_t *bytes, *again;
    size_t len, len2;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(update_codec_snapshot_encode(&s, &bytes, &len), 0);
    assert_int_equal(
        update_codec_snapshot_decode(bytes, len, lookup, &defs, &back, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(defs.calls, 2);
    assert_true(state_digest(&back) == state_digest(&s));
    /* The record that answers a repeated GetSplits request came back. */
    assert_int_equal(back.tasks[0].last_request, 4);
    assert_int_equal(back.tasks[0].granted.n, 3);
    assert_memory_equal(back.tasks[0].granted.v, ((const uint64_t[]){0, 1, 2}),
                        3 * sizeof(uint64_t));
    assert_int_equal(back.tasks[0].leased.n, 2);
    /* The owner of a client and the failure of an iteration came back. */
    assert_true(back.clients[0].owner == 0xabcdef0123456789ull);
    assert_null(back.iterations[0].error);
    assert_string_equal(back.iterations[1].error,
                        "task 3: batch: element of at least 300 bytes is over the limit");
    /* The saves came back, with their progress. */
    assert_int_equal(back.nsaves, 2);
    assert_string_equal(back.saves[0].path, "/snap/a");
    assert_string_equal(back.saves[0].dataset_id, "1");
    assert_int_equal(back.saves[0].state, ST_SV_RUNNING);
    assert_int_equal(back.saves[0].chunks, 2);
    assert_int_equal(back.saves[0].iteration_id, 3);
    assert_int_equal(state_save_committed(&back, &back.saves[0]), 1);
    assert_ptr_equal(state_save_running(&back, 3), &back.saves[0]);
    assert_int_equal(back.saves[1].state, ST_SV_FAILED);
    assert_string_equal(back.saves[1].error, "chunk 1 is damaged");
    assert_null(state_save_running(&back, 4));
    /* The weights schedule came back, its horizon raised to the change. */
    assert_int_equal(back.nmixes, 1);
    const struct st_mix *mx = state_mix(&back, "1", "mixed");
    assert_non_null(mx);
    assert_int_equal(mx->horizon, 5000);
    assert_int_equal(mx->nchanges, 1);
    assert_int_equal(mx->changes[0].from, 5000);
    assert_int_equal(mx->changes[0].nweights, 2);
    assert_true(mx->changes[0].weights[1] == 0.75);
    assert_int_equal(back.applied, s.applied);
    assert_int_equal(update_codec_snapshot_encode(&back, &again, &len2), 0);
    assert_int_equal(len, len2);
    assert_memory_equal(bytes, again, len);
    /* The definitions are not in the snapshot, only their length and checksum. */
    assert_null(memmem(bytes, len, "definition of", 13));
    assert_non_null(memmem(bytes, len, "range(10)", 9));
    free(again);
    free(bytes);
    state_release(&back);

    /* Taken, then packed after the state is gone (the copy holds all it points at, so a
     * snapshot packs on another thread while the state changes): the same bytes. */
    assert_int_equal(update_codec_snapshot_encode(&s, &bytes, &len), 0);
    struct update_codec_snapshot *copy;
    assert_int_equal(update_codec_snapshot_take(&s, NULL, &copy), 0);
    state_release(&s);
    assert_int_equal(update_codec_snapshot_pack(copy, &again, &len2), 0);
    update_codec_snapshot_free(copy, NULL);
    assert_int_equal(len, len2);
    assert_memory_equal(bytes, again, len);
    free(again);
    free(bytes);
    build_state(&s);

    /* Copies taken with the memory of earlier ones (struct update_codec_spare), which still holds
     * their bytes: each packs to what its own state encodes to (the full state, the empty one,
     * the full one twice: the last in the memory of the one before). */
    struct update_codec_spare spare = {0};
    const struct state *order[] = {&s, &empty, &s, &s};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        assert_int_equal(update_codec_snapshot_encode(order[k], &bytes, &len), 0);
        assert_int_equal(update_codec_snapshot_take(order[k], &spare, &copy), 0);
        assert_int_equal(update_codec_snapshot_pack(copy, &again, &len2), 0);
        update_codec_snapshot_free(copy, &spare);
        assert_int_equal(len, len2);
        assert_memory_equal(bytes, again, len);
        free(again);
        free(bytes);
    }
    assert_non_null(spare.blocks);
    update_codec_spare_release(&spare);
    assert_null(spare.blocks);

    /* The empty state too. */
    assert_int_equal(update_codec_snapshot_encode(&empty, &bytes, &len), 0);
    assert_int_equal(
        update_codec_snapshot_decode(bytes, len, lookup, &defs, &back, err, sizeof err), 0);
    assert_true(state_digest(&back) == state_digest(&empty));
    free(bytes);
    state_release(&back);
    state_release(&s);
}

/* A snapshot broken one field at a time; each must be refused naming what is wrong. */
struct mutation {
    void (*apply)(Sluice__Snapshot *m);
    const char *msg;
};

#define MUTATION(name, body)                                                                       \
    static void name(Sluice__Snapshot *m)                                                          \
    {                                                                                              \
        body;                                                                                      \
    }
MUTATION(m_task_worker, m->tasks[0]->worker_id = 9)
MUTATION(m_task_iteration, m->tasks[2]->iteration_id = 8)
MUTATION(m_held_twice, m->tasks[1]->leased[0] = 4)
MUTATION(m_leased_count, m->iterations[0]->splits_leased = 2)
MUTATION(m_cursor, m->iterations[0]->split_cursor = 11)
MUTATION(m_pool_past_cursor, m->iterations[0]->split_cursor = 4)
MUTATION(m_job_order, m->jobs[1]->id = 1)
MUTATION(m_task_next, m->next_task_id = 3)
MUTATION(m_counter_zero, m->next_client_id = 0)
MUTATION(m_generated, m->datasets[1]->generated = 1)
MUTATION(m_job_mode, m->jobs[0]->mode = 7)
MUTATION(m_iteration_state, m->iterations[1]->state = 3)
MUTATION(m_finished_leases, m->tasks[0]->finished = 1)
MUTATION(m_client_iteration, m->clients[0]->iteration_id = 7)
MUTATION(m_def_crc, m->datasets[0]->def_crc32c ^= 1)
MUTATION(m_def_len, m->datasets[0]->def_len = 3)
MUTATION(m_not_current, m->jobs[0]->iteration_id = 2)
MUTATION(m_dataset_order, m->datasets[1]->id[0] = '0')
MUTATION(m_task_pair, m->tasks[1]->worker_id = 1)
MUTATION(m_job_dataset, m->jobs[1]->dataset_id[0] = 'N')
MUTATION(m_iteration_mode, m->iterations[1]->distributed = 1)
MUTATION(m_granted_order, m->tasks[0]->granted[1] = 0)
MUTATION(m_granted_unnumbered, m->tasks[0]->last_request = 0)
MUTATION(m_granted_past_cursor, m->tasks[0]->granted[2] = 5)
MUTATION(m_last_request_max, m->tasks[1]->last_request = UINT64_MAX)
MUTATION(m_save_order, m->saves[1]->id = 1)
MUTATION(m_save_iteration_order, m->saves[1]->iteration_id = 3)
MUTATION(m_save_path, m->saves[1]->path[0] = 's')
MUTATION(m_save_same_path, m->saves[1]->path[6] = 'a')
MUTATION(m_save_state, m->saves[0]->state = 3)
MUTATION(m_save_iteration, m->saves[0]->iteration_id = 2)
MUTATION(m_save_chunks, m->saves[0]->chunks = 3)
MUTATION(m_save_dataset, m->saves[1]->dataset_id[0] = '9')

static const struct mutation mutations[] = {
    {m_task_worker, "task 1 names unknown worker 9"},
    {m_task_iteration, "task 3 names unknown iteration 8"},
    {m_held_twice, "split 4 of iteration 1 is held twice"},
    {m_leased_count, "iteration 1 counts 2 leased splits, its tasks hold 3"},
    {m_cursor, "iteration 1 has a split cursor that does not fit its plan"},
    {m_pool_past_cursor, "iteration 1 has a malformed pool of returned splits"},
    {m_job_order, "job 1 is out of order or past the next id"},
    {m_task_next, "task 3 is out of order or past the next id"},
    {m_counter_zero, "an id counter is 0"},
    {m_generated, "dataset 'named' is marked generated but is not a number below 2"},
    {m_job_mode, "job 1 has unknown mode 7"},
    {m_iteration_state, "iteration 2 has unknown state 3"},
    {m_finished_leases, "task 1 holds leases it cannot hold"},
    {m_client_iteration, "client 1 names unknown iteration 7"},
    {m_def_crc, "dataset '1': its definition does not match the snapshot"},
    {m_def_len, "dataset '1': its definition does not match the snapshot"},
    {m_not_current, "iteration 1 is not the current one of a job"},
    {m_dataset_order, "dataset '0amed' is out of order"},
    {m_task_pair, "worker 1 has two tasks in iteration 1"},
    {m_job_dataset, "job 2 names unknown dataset 'Named'"},
    {m_iteration_mode, "iteration 2 does not match its job's mode"},
    {m_granted_order, "task 1 has a malformed record of its last lease"},
    {m_granted_unnumbered, "task 1 has a malformed record of its last lease"},
    {m_granted_past_cursor, "task 1 has a malformed record of its last lease"},
    {m_last_request_max, "task 2 has a malformed record of its last lease"},
    {m_save_order, "save 1 is out of order"},
    {m_save_iteration_order, "save 2 is out of order"},
    {m_save_path, "save 2 has a malformed or repeated path"},
    {m_save_same_path, "save 2 has a malformed or repeated path"},
    {m_save_state, "save 1 has unknown state 3"},
    {m_save_iteration, "running save 1 does not fit its iteration"},
    {m_save_chunks, "running save 1 does not fit its iteration"},
    {m_save_dataset, "save 2 names an unknown dataset"},
};

static void expect_snapshot_error(const uint8_t *bytes, size_t len, struct defs *defs, int code,
                                  const char *msg)
{
    struct state back;
    char err[SLUICE_ERRMSG_SIZE] = "";
    memset(&back, 0xab, sizeof back);
    assert_int_equal(update_codec_snapshot_decode(bytes, len, lookup, defs, &back, err, sizeof err),
                     code);
    assert_string_equal(err, msg);
    /* A refused snapshot leaves an empty state behind. */
    assert_int_equal(back.ndatasets + back.njobs + back.niterations + back.ntasks + back.nworkers +
                         back.nclients,
                     0);
    assert_null(back.datasets);
    state_release(&back);
}

static void test_snapshot_refused(void **unused)
{
    (void)unused;
    struct state s;
    build_state(&s);
    struct defs defs = {.s = &s};
    uint8_t *bytes;
    size_t len;
    assert_int_equal(update_codec_snapshot_encode(&s, &bytes, &len), 0);

    for (size_t i = 0; i < sizeof mutations / sizeof mutations[0]; i++) {
        Sluice__Snapshot *m = sluice__snapshot__unpack(NULL, len, bytes);
        assert_non_null(m);
        mutations[i].apply(m);
        size_t n = sluice__snapshot__get_packed_size(m);
        uint8_t *b = malloc(n);
        assert_non_null(b);
        sluice__snapshot__pack(m, b);
        sluice__snapshot__free_unpacked(m, NULL);
        expect_snapshot_error(b, n, &defs, SLUICE_ERR_CORRUPT, mutations[i].msg);
        free(b);
    }

    expect_snapshot_error((const uint8_t *)"\x0a\xff", 2, &defs, SLUICE_ERR_CORRUPT,
                          "not a Snapshot message");
    /* The lookup's own failure comes through with its message. */
    defs.missing = "named";
    expect_snapshot_error(bytes, len, &defs, SLUICE_ERR_NOT_FOUND,
                          "dataset 'named' is not in the datasets table");
    free(bytes);
    state_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_round_trip),
        cmocka_unit_test(test_frame_detects_damage),
        cmocka_unit_test(test_seq_keys),
        cmocka_unit_test(test_update_round_trip),
        cmocka_unit_test(test_update_decode_errors),
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_snapshot_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
