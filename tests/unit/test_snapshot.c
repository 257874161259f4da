/* Distributed snapshots on disk: chunk round trips, every corruption and truncation with its exact
 * message, unique temporary names and replace-on-commit, snapshot.json, finalize and the manifest,
 * FAILED and the disk status. Files live in a private temporary directory removed after each
 * test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/clock.h"
#include "lib/file.h"
#include "lib/pipeline.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include "common/crc32c.h"
#include "pipeline/element.h"
#include "pipeline/files.h"
#include "pipeline/format.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/roots.h"
#include "pipeline/snapshot.h"
#include "pipeline/snapsrc.h"
#include "pipeline/split.h"
#include "worker/shard.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fixture {
    char dir[64];
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_registry *reg;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/sluice-test-snapshot-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_int_equal(pipe_registry_new(&f->reg), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    tmp_remove(f->dir);
    pipe_registry_free(f->reg);
    free(f);
    return 0;
}

static char *path_in(const struct fixture *f, const char *name)
{
    static char buf[8][256];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", f->dir, name);
    return p;
}

static char *chunk_path(const struct fixture *f, uint64_t i)
{
    static char buf[4][256];
    static int slot;
    char *p = buf[slot++ % 4];
    snap_chunk_path(f->dir, i, p, sizeof buf[0]);
    return p;
}

static void set_i64(struct sluice_element *e, int64_t v)
{
    assert_int_equal(pipe_elem_resize(e, 1), 0);
    assert_int_equal(pipe_tensor_set_i64(&e->t[0], v), 0);
}

/* Writes chunk index of f->dir holding scalar int64 elements first, first + 1, ... (n of them). */
static void write_i64_chunk(struct fixture *f, uint64_t index, int64_t first, size_t n)
{
    struct snap_writer *w;
    assert_int_equal(snap_writer_open(f->dir, index, &w, f->err, sizeof f->err), 0);
    struct sluice_element e;
    pipe_elem_init(&e);
    for (size_t i = 0; i < n; i++) {
        set_i64(&e, first + (int64_t)i);
        assert_int_equal(snap_writer_add(w, &e, f->err, sizeof f->err), 0);
    }
    pipe_elem_release(&e);
    assert_int_equal(snap_writer_commit(w, f->err, sizeof f->err), 0);
}

/* Reads the chunk at path and asserts it holds the scalar int64 elements first, first + 1, ... */
static void expect_i64_chunk(struct fixture *f, const char *path, int64_t first, size_t n)
{
    struct snap_reader *r;
    assert_int_equal(snap_reader_open(path, &r, f->err, sizeof f->err), 0);
    struct sluice_element e;
    pipe_elem_init(&e);
    for (size_t i = 0; i < n; i++) {
        int rc = snap_reader_next(r, &e, f->err, sizeof f->err);
        if (rc != 1)
            fail_msg("element %zu: %d (%s)", i, rc, f->err);
        assert_int_equal(e.n, 1);
        assert_int_equal(e.t[0].dtype, SLUICE_INT64);
        assert_int_equal(*(int64_t *)(void *)e.t[0].data, first + (int64_t)i);
    }
    assert_int_equal(snap_reader_next(r, &e, f->err, sizeof f->err), 0);
    pipe_elem_release(&e);
    snap_reader_close(r);
}

/* ---- round trips ---- */

static void set_tensor(struct pipe_tensor *t, enum sluice_dtype dtype, int rank,
                       const int64_t *shape, const void *data, size_t len)
{
    t->dtype = dtype;
    assert_int_equal(pipe_tensor_reserve(t, len, 1), 0);
    t->rank = rank;
    for (int d = 0; d < rank; d++)
        t->shape[d] = shape[d];
    if (len)
        memcpy(t->data, data, len);
    t->len = len;
}

static void set_strings(struct pipe_tensor *t, int rank, const int64_t *shape, const char *const *s,
                        size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += strlen(s[i]);
    t->dtype = SLUICE_BYTES;
    assert_int_equal(pipe_tensor_reserve(t, total, n), 0);
    t->rank = rank;
    for (int d = 0; d < rank; d++)
        t->shape[d] = shape[d];
    t->offs[0] = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(t->data + at, s[i], strlen(s[i]));
        at += strlen(s[i]);
        t->offs[i + 1] = at;
    }
    t->len = total;
}

#define NSAMPLES 8

/* Element k of a set covering dtypes, ranks, empty dimensions, strings and tuples. */
static void sample(struct sluice_element *e, int k)
{
    static const int64_t s3[] = {3}, s22[] = {2, 2}, s0[] = {0}, s2[] = {2}, s213[] = {2, 1, 3};
    switch (k) {
    case 0:
        set_i64(e, -42);
        break;
    case 1: {
        float v[3] = {1.5f, -0.0f, 3e38f};
        assert_int_equal(pipe_elem_resize(e, 1), 0);
        set_tensor(&e->t[0], SLUICE_FLOAT32, 1, s3, v, sizeof v);
        break;
    }
    case 2: {
        const char *s[] = {"hello\n\x00world"};
        assert_int_equal(pipe_elem_resize(e, 1), 0);
        set_strings(&e->t[0], 0, NULL, s, 1);
        break;
    }
    case 3: {
        const char *s[] = {"a", "", "ccc", "dd"};
        assert_int_equal(pipe_elem_resize(e, 1), 0);
        set_strings(&e->t[0], 2, s22, s, 4);
        break;
    }
    case 4: {
        int32_t m[4] = {1, -2, 3, INT32_MIN};
        uint8_t b = 1;
        const char *s[] = {"x"};
        assert_int_equal(pipe_elem_resize(e, 3), 0);
        set_tensor(&e->t[0], SLUICE_INT32, 2, s22, m, sizeof m);
        set_strings(&e->t[1], 0, NULL, s, 1);
        set_tensor(&e->t[2], SLUICE_BOOL, 0, NULL, &b, 1);
        break;
    }
    case 5:
        assert_int_equal(pipe_elem_resize(e, 1), 0);
        set_tensor(&e->t[0], SLUICE_UINT8, 1, s0, NULL, 0);
        break;
    case 6: {
        double d[2] = {3.141592653589793, -1e-300};
        uint16_t u[6] = {0, 1, 2, 65535, 4, 5};
        assert_int_equal(pipe_elem_resize(e, 2), 0);
        set_tensor(&e->t[0], SLUICE_FLOAT64, 1, s2, d, sizeof d);
        set_tensor(&e->t[1], SLUICE_UINT16, 3, s213, u, sizeof u);
        break;
    }
    default: {
        /* A larger element: 100000 bytes, so records span the stdio buffers' refills. */
        static uint8_t big[100000];
        for (size_t i = 0; i < sizeof big; i++)
            big[i] = (uint8_t)(i * 7 + 3);
        int64_t shape[] = {(int64_t)sizeof big};
        assert_int_equal(pipe_elem_resize(e, 1), 0);
        set_tensor(&e->t[0], SLUICE_UINT8, 1, shape, big, sizeof big);
        break;
    }
    }
}

static void test_round_trip(void **state)
{
    struct fixture *f = *state;
    struct snap_writer *w;
    assert_int_equal(snap_writer_open(f->dir, 7, &w, f->err, sizeof f->err), 0);
    struct sluice_element e, got;
    pipe_elem_init(&e);
    pipe_elem_init(&got);
    /* Every sample three times, in an order that changes dtypes and ranks between neighbours. */
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < NSAMPLES; k++) {
            sample(&e, (k + round) % NSAMPLES);
            assert_int_equal(snap_writer_add(w, &e, f->err, sizeof f->err), 0);
        }
    assert_int_equal(snap_writer_commit(w, f->err, sizeof f->err), 0);
    assert_string_equal(chunk_path(f, 7), path_in(f, "chunks/chunk-000000000007"));

    struct snap_reader *r;
    assert_int_equal(snap_reader_open(chunk_path(f, 7), &r, f->err, sizeof f->err), 0);
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < NSAMPLES; k++) {
            int rc = snap_reader_next(r, &got, f->err, sizeof f->err);
            if (rc != 1)
                fail_msg("round %d sample %d: %d (%s)", round, k, rc, f->err);
            sample(&e, (k + round) % NSAMPLES);
            assert_true(pipe_elem_equal(&e, &got));
        }
    assert_int_equal(snap_reader_next(r, &got, f->err, sizeof f->err), 0);
    assert_int_equal(snap_reader_next(r, &got, f->err, sizeof f->err), 0);
    snap_reader_close(r);

    struct snap_chunk_info info;
    assert_int_equal(snap_chunk_check(chunk_path(f, 7), &info, f->err, sizeof f->err), 0);
    assert_int_equal(info.elements, 3 * NSAMPLES);
    size_t len;
    uint8_t *data = file_read(chunk_path(f, 7), &len);
    assert_int_equal(info.bytes, len);
    assert_int_equal(info.crc32c, crc32c(data, len - 4));
    free(data);
    pipe_elem_release(&e);
    pipe_elem_release(&got);
}

static void test_empty_chunk(void **state)
{
    struct fixture *f = *state;
    struct snap_writer *w;
    assert_int_equal(snap_writer_open(f->dir, 0, &w, f->err, sizeof f->err), 0);
    assert_int_equal(snap_writer_commit(w, f->err, sizeof f->err), 0);
    size_t len;
    uint8_t *data = file_read(chunk_path(f, 0), &len);
    assert_int_equal(len, 8 + 24);
    assert_memory_equal(data, "SLSNAP01", 8);
    free(data);
    expect_i64_chunk(f, chunk_path(f, 0), 0, 0);
    struct snap_chunk_info info;
    assert_int_equal(snap_chunk_check(chunk_path(f, 0), &info, f->err, sizeof f->err), 0);
    assert_int_equal(info.elements, 0);
    assert_int_equal(info.bytes, 32);
}

/* ---- damage ---- */

/* The layout of write_i64_chunk(f, 0, 10, 2): magic 0..8; record 0 at 8 (length 8..12, crc
 * 12..16, data 16..29: 13 bytes); record 1 at 29 (data 37..50); footer at 50..74. */
#define REC0 8
#define REC1 29
#define FOOTER 50
#define FILE_LEN 74

/* Rewrites chunk 0 as the two-element chunk with data[at] XORed with x (x 0: unchanged), and
 * returns the file's bytes (FILE_LEN of them) as they were before. */
static uint8_t *damaged(struct fixture *f, size_t at, uint8_t x)
{
    write_i64_chunk(f, 0, 10, 2);
    size_t len;
    uint8_t *data = file_read(chunk_path(f, 0), &len);
    assert_int_equal(len, FILE_LEN);
    data[at] ^= x;
    file_write(chunk_path(f, 0), data, len);
    data[at] ^= x;
    return data;
}

/* Reads chunk 0 to the end and asserts it yields good elements and then fails with code and
 * the message "snapshot chunk PATH: <what>"; snap_chunk_check must say the same. */
static void expect_damage(struct fixture *f, size_t good, int code, const char *what)
{
    char want[512];
    snprintf(want, sizeof want, "snapshot chunk %s: %s", chunk_path(f, 0), what);
    struct snap_reader *r = NULL;
    int rc = snap_reader_open(chunk_path(f, 0), &r, f->err, sizeof f->err);
    if (rc == 0) {
        struct sluice_element e;
        pipe_elem_init(&e);
        for (size_t i = 0; i < good; i++) {
            rc = snap_reader_next(r, &e, f->err, sizeof f->err);
            if (rc != 1)
                fail_msg("element %zu: %d (%s), wanted %s", i, rc, f->err, want);
            assert_int_equal(*(int64_t *)(void *)e.t[0].data, 10 + (int64_t)i);
        }
        rc = snap_reader_next(r, &e, f->err, sizeof f->err);
        assert_int_equal(rc, code);
        assert_string_equal(f->err, want);
        /* A failed reader keeps failing the same way. */
        f->err[0] = '\0';
        assert_int_equal(snap_reader_next(r, &e, f->err, sizeof f->err), code);
        assert_string_equal(f->err, want);
        pipe_elem_release(&e);
        snap_reader_close(r);
    } else {
        assert_int_equal(good, 0);
        assert_int_equal(rc, code);
        assert_null(r);
        assert_string_equal(f->err, want);
    }
    struct snap_chunk_info info;
    f->err[0] = '\0';
    assert_int_equal(snap_chunk_check(chunk_path(f, 0), &info, f->err, sizeof f->err), code);
    assert_string_equal(f->err, want);
}

static void test_flipped_bytes(void **state)
{
    struct fixture *f = *state;
    free(damaged(f, 0, 0));
    expect_i64_chunk(f, chunk_path(f, 0), 10, 2);

    struct {
        size_t at;
        uint8_t x;
        size_t good;
        const char *what;
    } cases[] = {
        {0, 0x01, 0, "bad magic at offset 0"},
        {7, 0x80, 0, "bad magic at offset 0"},
        /* Record length: one shorter reads a wrong data range; far too long is refused before
         * anything is allocated. */
        {REC0, 0x01, 0, "checksum mismatch at offset 8"},
        {REC0 + 3, 0x80, 0, "bad record length 2147483661 at offset 8"},
        {REC0 + 1, 0x01, 0, "record of 269 bytes truncated at offset 8"},
        {REC1, 0x0d, 1, "bad record length 0 at offset 29"},
        /* Record checksum and data. */
        {REC0 + 4, 0x01, 0, "checksum mismatch at offset 8"},
        {REC1 + 7, 0x40, 1, "checksum mismatch at offset 29"},
        {REC0 + 8, 0x01, 0, "checksum mismatch at offset 8"},
        {REC1 + 8 + 12, 0x01, 1, "checksum mismatch at offset 29"},
        /* Footer: its mark, counts and checksum. */
        {FOOTER, 0x01, 2, "bad record length 4294967294 at offset 50"},
        {FOOTER + 4, 0x01, 2, "footer checksum mismatch at offset 50"},
        {FOOTER + 12, 0x01, 2, "footer checksum mismatch at offset 50"},
        {FOOTER + 20, 0x01, 2, "footer checksum mismatch at offset 50"},
        {FILE_LEN - 1, 0x80, 2, "footer checksum mismatch at offset 50"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        free(damaged(f, cases[i].at, cases[i].x));
        expect_damage(f, cases[i].good, SLUICE_ERR_CORRUPT, cases[i].what);
    }
}

/* Damage with consistent checksums: what only the structure reveals. */
static void test_consistent_lies(void **state)
{
    struct fixture *f = *state;

    /* A footer that claims 3 elements, with its checksum recomputed. */
    uint8_t *data = damaged(f, 0, 0);
    data[FOOTER + 4] = 3;
    uint32_t crc = pipe_tfrecord_mask(crc32c(data, FILE_LEN - 4));
    memcpy(data + FILE_LEN - 4, &crc, 4);
    file_write(chunk_path(f, 0), data, FILE_LEN);
    expect_damage(f, 2, SLUICE_ERR_CORRUPT, "footer says 3 elements, found 2 at offset 50");

    /* A footer with the wrong body length. */
    data[FOOTER + 4] = 2;
    data[FOOTER + 12] = 49;
    crc = pipe_tfrecord_mask(crc32c(data, FILE_LEN - 4));
    memcpy(data + FILE_LEN - 4, &crc, 4);
    file_write(chunk_path(f, 0), data, FILE_LEN);
    expect_damage(f, 2, SLUICE_ERR_CORRUPT, "footer says 49 body bytes, found 50 at offset 50");
    free(data);

    /* A record whose checksum is right but whose data is no element (component count 0). */
    data = damaged(f, 0, 0);
    data[REC0 + 8 + 2] = 0;
    crc = pipe_tfrecord_mask(crc32c(data + REC0 + 8, 13));
    memcpy(data + REC0 + 4, &crc, 4);
    file_write(chunk_path(f, 0), data, FILE_LEN);
    expect_damage(f, 0, SLUICE_ERR_CORRUPT,
                  "bad element at offset 8: element codec: offset 2: bad component count");

    /* Bytes after the footer. */
    uint8_t longer[FILE_LEN + 1];
    data[REC0 + 8 + 2] = 1;
    crc = pipe_tfrecord_mask(crc32c(data + REC0 + 8, 13));
    memcpy(data + REC0 + 4, &crc, 4);
    memcpy(longer, data, FILE_LEN);
    longer[FILE_LEN] = 0;
    file_write(chunk_path(f, 0), longer, sizeof longer);
    expect_damage(f, 2, SLUICE_ERR_CORRUPT, "trailing bytes after the footer at offset 74");
    free(data);
}

static void test_truncation(void **state)
{
    struct fixture *f = *state;
    uint8_t *data = damaged(f, 0, 0);
    for (size_t len = 0; len < FILE_LEN; len++) {
        file_write(chunk_path(f, 0), data, len);
        char what[128];
        size_t good;
        if (len < REC0) {
            good = 0;
            snprintf(what, sizeof what, "truncated at offset 0");
        } else if (len < REC0 + 8) {
            good = 0;
            snprintf(what, sizeof what, "truncated at offset 8");
        } else if (len < REC1) {
            good = 0;
            snprintf(what, sizeof what, "record of 13 bytes truncated at offset 8");
        } else if (len < REC1 + 8) {
            good = 1;
            snprintf(what, sizeof what, "truncated at offset 29");
        } else if (len < FOOTER) {
            good = 1;
            snprintf(what, sizeof what, "record of 13 bytes truncated at offset 29");
        } else {
            good = 2;
            snprintf(what, sizeof what, "truncated at offset 50");
        }
        expect_damage(f, good, SLUICE_ERR_CORRUPT, what);
    }
    free(data);
}

static void test_missing_chunk(void **state)
{
    struct fixture *f = *state;
    struct snap_reader *r = NULL;
    char want[512];
    snprintf(want, sizeof want, "snapshot chunk %s: not found", chunk_path(f, 3));
    assert_int_equal(snap_reader_open(chunk_path(f, 3), &r, f->err, sizeof f->err),
                     SLUICE_ERR_NOT_FOUND);
    assert_null(r);
    assert_string_equal(f->err, want);
}

/* The fuzzer's seeds were written by an independent encoder of the format: every one reads. */
static void test_seed_corpus(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *name;
        uint64_t elements;
    } seeds[] = {{"empty", 0}, {"int64", 3}, {"float32_matrix", 1}, {"strings", 2}, {"tuple", 1}};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/fuzz/corpus/fuzz_snapshot_chunk/%s",
                 SLUICE_SOURCE_DIR, seeds[i].name);
        struct snap_chunk_info info;
        int rc = snap_chunk_check(path, &info, f->err, sizeof f->err);
        if (rc != 0)
            fail_msg("%s: %s", seeds[i].name, f->err);
        assert_int_equal(info.elements, seeds[i].elements);
    }
    /* The int64 seed holds what a writer writes for 0, 1, 2, byte for byte. */
    write_i64_chunk(f, 0, 0, 3);
    size_t a, b;
    char seed[512];
    snprintf(seed, sizeof seed, "%s/tests/fuzz/corpus/fuzz_snapshot_chunk/int64",
             SLUICE_SOURCE_DIR);
    uint8_t *ours = file_read(chunk_path(f, 0), &a);
    uint8_t *theirs = file_read(seed, &b);
    assert_int_equal(a, b);
    assert_memory_equal(ours, theirs, a);
    free(ours);
    free(theirs);
}

/* ---- writers ---- */

/* The names in DIR/chunks, sorted, joined by spaces. */
static void list_chunks_dir(struct fixture *f, char *out, size_t outlen, size_t *count)
{
    struct dirent **names;
    int n = scandir(path_in(f, "chunks"), &names, NULL, alphasort);
    assert_true(n >= 0);
    out[0] = '\0';
    *count = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") != 0 && strcmp(names[i]->d_name, "..") != 0) {
            size_t l = strlen(out);
            snprintf(out + l, outlen - l, "%s%s", l ? " " : "", names[i]->d_name);
            (*count)++;
        }
        free(names[i]);
    }
    free(names);
}

static void test_unique_temp_and_replace(void **state)
{
    struct fixture *f = *state;
    struct snap_writer *w1, *w2, *w3;
    assert_int_equal(snap_writer_open(f->dir, 5, &w1, f->err, sizeof f->err), 0);
    assert_int_equal(snap_writer_open(f->dir, 5, &w2, f->err, sizeof f->err), 0);
    assert_int_equal(snap_writer_open(f->dir, 5, &w3, f->err, sizeof f->err), 0);
    char names[1024];
    size_t n;
    list_chunks_dir(f, names, sizeof names, &n);
    /* Three distinct temporary files, none under the chunk's final name. */
    assert_int_equal(n, 3);
    assert_null(strstr(names, " chunk-"));
    assert_int_equal(strncmp(names, ".chunk-000000000005.tmp.", 24), 0);
    assert_int_equal(access(chunk_path(f, 5), F_OK), -1);

    struct sluice_element e;
    pipe_elem_init(&e);
    set_i64(&e, 100);
    assert_int_equal(snap_writer_add(w1, &e, f->err, sizeof f->err), 0);
    for (int i = 0; i < 2; i++) {
        set_i64(&e, 200 + i);
        assert_int_equal(snap_writer_add(w2, &e, f->err, sizeof f->err), 0);
    }
    set_i64(&e, 300);
    assert_int_equal(snap_writer_add(w3, &e, f->err, sizeof f->err), 0);
    pipe_elem_release(&e);

    assert_int_equal(snap_writer_commit(w1, f->err, sizeof f->err), 0);
    expect_i64_chunk(f, chunk_path(f, 5), 100, 1);
    assert_int_equal(snap_writer_commit(w2, f->err, sizeof f->err), 0);
    expect_i64_chunk(f, chunk_path(f, 5), 200, 2);
    snap_writer_abort(w3);
    snap_writer_abort(NULL);
    expect_i64_chunk(f, chunk_path(f, 5), 200, 2);
    list_chunks_dir(f, names, sizeof names, &n);
    assert_string_equal(names, "chunk-000000000005");
}

static void test_writer_creates_chunks_dir(void **state)
{
    struct fixture *f = *state;
    char sub[256];
    snprintf(sub, sizeof sub, "%s/a/b", f->dir);
    struct snap_writer *w;
    assert_int_equal(snap_writer_open(sub, 0, &w, f->err, sizeof f->err), 0);
    assert_int_equal(snap_writer_commit(w, f->err, sizeof f->err), 0);
    assert_int_equal(access(path_in(f, "a/b/chunks/chunk-000000000000"), F_OK), 0);
}

/* ---- snapshot.json ---- */

static void test_meta(void **state)
{
    struct fixture *f = *state;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/snap", f->dir);
    struct snap_meta m, got;

    char want[512];
    snprintf(want, sizeof want, "%s: not a snapshot (no snapshot.json)", dir);
    assert_int_equal(snap_meta_read(dir, &got, f->err, sizeof f->err), SLUICE_ERR_NOT_FOUND);
    assert_string_equal(f->err, want);

    memset(&m, 0, sizeof m);
    m.format = SNAP_FORMAT;
    snprintf(m.dataset_id, sizeof m.dataset_id, "ds-7");
    m.pipeline = "range(10) | map(add, 1) | lines(\"\\\"q\\\"\")";
    m.chunks = 12;
    assert_int_equal(snap_meta_write(dir, &m, f->err, sizeof f->err), 0);
    struct stat st;
    assert_int_equal(stat(path_in(f, "snap/chunks"), &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(snap_meta_read(dir, &got, f->err, sizeof f->err), 0);
    assert_int_equal(got.format, SNAP_FORMAT);
    assert_string_equal(got.dataset_id, "ds-7");
    assert_string_equal(got.pipeline, m.pipeline);
    assert_int_equal(got.chunks, 12);
    snap_meta_release(&got);
    assert_null(got.pipeline);

    /* The same again is harmless; another dataset or chunk count is refused. */
    assert_int_equal(snap_meta_write(dir, &m, f->err, sizeof f->err), 0);
    m.chunks = 13;
    assert_int_equal(snap_meta_write(dir, &m, f->err, sizeof f->err), SLUICE_ERR_EXISTS);
    snprintf(want, sizeof want,
             "%s: holds a snapshot of dataset ds-7 with 12 chunks, not of dataset ds-7 with 13 "
             "chunks",
             dir);
    assert_string_equal(f->err, want);
    m.chunks = 12;
    snprintf(m.dataset_id, sizeof m.dataset_id, "ds-8");
    assert_int_equal(snap_meta_write(dir, &m, f->err, sizeof f->err), SLUICE_ERR_EXISTS);
    assert_int_equal(snap_meta_read(dir, &got, f->err, sizeof f->err), 0);
    assert_string_equal(got.dataset_id, "ds-7");
    snap_meta_release(&got);

    /* No temporary file is left beside it. */
    char names[512];
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    assert_true(n >= 0);
    names[0] = '\0';
    for (int i = 0; i < n; i++) {
        strncat(names, list[i]->d_name, sizeof names - strlen(names) - 2);
        strcat(names, " ");
        free(list[i]);
    }
    free(list);
    assert_string_equal(names, ". .. chunks snapshot.json ");

    /* Damaged or foreign meta files. */
    file_write(path_in(f, "snap/snapshot.json"), "{\"format\": 1,", 13);
    assert_int_equal(snap_meta_read(dir, &got, f->err, sizeof f->err), SLUICE_ERR_CORRUPT);
    assert_non_null(strstr(f->err, "snap/snapshot.json: line 1:"));
    const char *no_chunks = "{\"format\": 1, \"dataset_id\": \"x\", \"pipeline\": \"range(3)\"}";
    file_write(path_in(f, "snap/snapshot.json"), no_chunks, strlen(no_chunks));
    assert_int_equal(snap_meta_read(dir, &got, f->err, sizeof f->err), SLUICE_ERR_CORRUPT);
    snprintf(want, sizeof want,
             "%s/snapshot.json: missing or bad format, dataset_id, pipeline or chunks", dir);
    assert_string_equal(f->err, want);
    const char *v2 =
        "{\"format\": 2, \"dataset_id\": \"x\", \"pipeline\": \"range(3)\", \"chunks\": 1}";
    file_write(path_in(f, "snap/snapshot.json"), v2, strlen(v2));
    assert_int_equal(snap_meta_read(dir, &got, f->err, sizeof f->err), SLUICE_ERR_UNSUPPORTED);
    snprintf(want, sizeof want, "%s/snapshot.json: snapshot format 2 (this build reads 1)", dir);
    assert_string_equal(f->err, want);
}

/* ---- finalize, FAILED, status ---- */

static void write_meta(struct fixture *f, uint64_t chunks)
{
    struct snap_meta m;
    memset(&m, 0, sizeof m);
    m.format = SNAP_FORMAT;
    snprintf(m.dataset_id, sizeof m.dataset_id, "d1");
    m.pipeline = "range(5)";
    m.chunks = chunks;
    assert_int_equal(snap_meta_write(f->dir, &m, f->err, sizeof f->err), 0);
}

static json_int_t json_int_at(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static void test_finalize(void **state)
{
    struct fixture *f = *state;
    write_meta(f, 3);
    write_i64_chunk(f, 0, 0, 2);
    write_i64_chunk(f, 2, 5, 4);

    char want[512];
    snprintf(want, sizeof want, "snapshot chunk %s: not found", chunk_path(f, 1));
    assert_int_equal(snap_finalize(f->dir, 3, f->err, sizeof f->err), SLUICE_ERR_NOT_FOUND);
    assert_string_equal(f->err, want);
    assert_int_equal(access(path_in(f, "manifest.json"), F_OK), -1);

    assert_int_equal(snap_finalize(f->dir, 4, f->err, sizeof f->err), SLUICE_ERR_INVALID);
    snprintf(want, sizeof want, "%s: finalize with 4 chunks, but snapshot.json says 3", f->dir);
    assert_string_equal(f->err, want);

    /* A damaged chunk stops it too. */
    file_write(chunk_path(f, 1), "SLSNAP01", 8);
    assert_int_equal(snap_finalize(f->dir, 3, f->err, sizeof f->err), SLUICE_ERR_CORRUPT);
    snprintf(want, sizeof want, "snapshot chunk %s: truncated at offset 8", chunk_path(f, 1));
    assert_string_equal(f->err, want);
    assert_int_equal(access(path_in(f, "manifest.json"), F_OK), -1);

    write_i64_chunk(f, 1, 2, 3);
    assert_int_equal(snap_finalize(f->dir, 3, f->err, sizeof f->err), 0);

    json_error_t jerr;
    json_t *root = json_load_file(path_in(f, "manifest.json"), 0, &jerr);
    assert_non_null(root);
    assert_int_equal(json_int_at(root, "format"), 1);
    assert_string_equal(json_string_value(json_object_get(root, "dataset_id")), "d1");
    assert_int_equal(json_int_at(root, "chunk_count"), 3);
    assert_int_equal(json_int_at(root, "elements"), 9);
    json_t *chunks = json_object_get(root, "chunks");
    assert_true(json_is_array(chunks));
    assert_int_equal(json_array_size(chunks), 3);
    uint64_t total = 0;
    static const int counts[] = {2, 3, 4};
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(chunks, i);
        struct snap_chunk_info info;
        assert_int_equal(snap_chunk_check(chunk_path(f, i), &info, f->err, sizeof f->err), 0);
        assert_int_equal(json_int_at(c, "index"), i);
        assert_int_equal(json_int_at(c, "elements"), counts[i]);
        assert_int_equal(json_int_at(c, "bytes"), info.bytes);
        assert_int_equal(info.bytes, 8 + 21 * counts[i] + 24);
        assert_int_equal(json_int_at(c, "crc32c"), info.crc32c);
        total += info.bytes;
    }
    assert_int_equal(json_int_at(root, "bytes"), total);
    json_decref(root);

    /* Without a snapshot.json there is nothing to finalize. */
    char other[256];
    snprintf(other, sizeof other, "%s/none", f->dir);
    assert_int_equal(snap_finalize(other, 0, f->err, sizeof f->err), SLUICE_ERR_NOT_FOUND);
}

static void test_finalize_empty(void **state)
{
    struct fixture *f = *state;
    write_meta(f, 0);
    assert_int_equal(snap_finalize(f->dir, 0, f->err, sizeof f->err), 0);
    struct snap_disk_status st;
    assert_int_equal(snap_disk_status(f->dir, &st, f->err, sizeof f->err), 0);
    assert_true(st.complete);
    assert_int_equal(st.elements, 0);
    assert_int_equal(st.chunks, 0);
}

static void test_disk_status(void **state)
{
    struct fixture *f = *state;
    struct snap_disk_status st;
    char want[512];
    snprintf(want, sizeof want, "%s: not a snapshot (no snapshot.json)", f->dir);
    assert_int_equal(snap_disk_status(f->dir, &st, f->err, sizeof f->err), SLUICE_ERR_NOT_FOUND);
    assert_string_equal(f->err, want);

    write_meta(f, 3);
    assert_int_equal(snap_disk_status(f->dir, &st, f->err, sizeof f->err), 0);
    assert_false(st.complete);
    assert_false(st.failed);
    assert_int_equal(st.chunks, 3);
    assert_int_equal(st.committed, 0);
    assert_int_equal(st.elements, 0);

    write_i64_chunk(f, 0, 0, 2);
    write_i64_chunk(f, 2, 0, 1);
    /* Neither a writer's temporary file nor a stray name counts. */
    struct snap_writer *w;
    assert_int_equal(snap_writer_open(f->dir, 1, &w, f->err, sizeof f->err), 0);
    file_write(path_in(f, "chunks/chunk-000000000009"), "x", 1);
    file_write(path_in(f, "chunks/chunk-1"), "x", 1);
    assert_int_equal(snap_disk_status(f->dir, &st, f->err, sizeof f->err), 0);
    assert_int_equal(st.committed, 2);
    assert_false(st.complete);
    assert_int_equal(snap_writer_commit(w, f->err, sizeof f->err), 0);

    assert_int_equal(snap_finalize(f->dir, 3, f->err, sizeof f->err), 0);
    assert_int_equal(snap_disk_status(f->dir, &st, f->err, sizeof f->err), 0);
    assert_true(st.complete);
    assert_false(st.failed);
    assert_int_equal(st.committed, 3);
    assert_int_equal(st.elements, 3);

    assert_int_equal(
        snap_mark_failed(f->dir, "disk full\nwhile writing chunk 2", f->err, sizeof f->err), 0);
    size_t len;
    uint8_t *data = file_read(path_in(f, "FAILED"), &len);
    assert_int_equal(len, strlen("disk full while writing chunk 2\n"));
    assert_memory_equal(data, "disk full while writing chunk 2\n", len);
    free(data);
    assert_int_equal(snap_disk_status(f->dir, &st, f->err, sizeof f->err), 0);
    assert_true(st.failed);
    assert_string_equal(st.why, "disk full while writing chunk 2");
}

/* ---- the snapshot("DIR") source ---- */

/* Writes snapshot.json for n chunks and chunk i with counts[i] elements 10 * i + j (counts NULL:
 * no chunk). */
static void make_snapshot(struct fixture *f, const char *dir, uint64_t n, const int *counts)
{
    struct snap_meta m;
    memset(&m, 0, sizeof m);
    m.format = SNAP_FORMAT;
    snprintf(m.dataset_id, sizeof m.dataset_id, "d1");
    m.pipeline = "range(5)";
    m.chunks = n;
    assert_int_equal(snap_meta_write(dir, &m, f->err, sizeof f->err), 0);
    for (uint64_t i = 0; counts && i < n; i++) {
        if (counts[i] < 0)
            continue;
        struct snap_writer *w;
        assert_int_equal(snap_writer_open(dir, i, &w, f->err, sizeof f->err), 0);
        struct sluice_element e;
        pipe_elem_init(&e);
        for (int j = 0; j < counts[i]; j++) {
            set_i64(&e, 10 * (int64_t)i + j);
            assert_int_equal(snap_writer_add(w, &e, f->err, sizeof f->err), 0);
        }
        pipe_elem_release(&e);
        assert_int_equal(snap_writer_commit(w, f->err, sizeof f->err), 0);
    }
}

static struct pipe_spec *parse_text(const char *fmt, const char *dir)
{
    char text[512];
    text_format(text, sizeof text, fmt, dir);
    return pipeline_parse(text);
}

/* Reads run to its end (or failure) into text, one element per line; returns the final code. */
static int drain(struct pipe_run *run, char *text, size_t len)
{
    struct sluice_element e;
    struct pipe_buf b = {0};
    pipe_elem_init(&e);
    text[0] = '\0';
    int rc;
    while ((rc = pipe_run_next(run, &e)) == 1) {
        b.len = 0;
        assert_int_equal(pipe_format_elem(&b, &e), 0);
        size_t l = strlen(text);
        snprintf(text + l, len - l, "%s%s", l ? " " : "", b.p);
    }
    pipe_buf_release(&b);
    pipe_elem_release(&e);
    return rc;
}

/* Runs fmt (with %s the snapshot directory) locally and asserts its elements. */
static void expect_run(struct fixture *f, const char *fmt, const char *dir, const char *want)
{
    struct pipe_spec *spec = parse_text(fmt, dir);
    struct pipe_run *run;
    int rc = pipe_open(spec, f->reg, &run, f->err, sizeof f->err);
    if (rc)
        fail_msg("%s: open: %s", fmt, f->err);
    char got[1024];
    rc = drain(run, got, sizeof got);
    if (rc != 0)
        fail_msg("%s: %s", fmt, run->ctx.err);
    if (strcmp(got, want) != 0)
        fail_msg("%s: got \"%s\", want \"%s\"", fmt, got, want);
    pipe_run_free(run);
    pipe_spec_free(spec);
}

static void test_source_reads(void **state)
{
    struct fixture *f = *state;
    static const int counts[] = {2, 0, 3, 1};
    make_snapshot(f, f->dir, 4, counts);
    assert_int_equal(snap_finalize(f->dir, 4, f->err, sizeof f->err), 0);
    expect_run(f, "snapshot(\"%s\")", f->dir, "0 1 20 21 22 30");
    expect_run(f, "snapshot(\"%s\") | take(3)", f->dir, "0 1 20");
    expect_run(f, "snapshot(\"%s\") | skip(2) | shard(2, 1)", f->dir, "21 30");
    expect_run(f, "snapshot(\"%s\") | repeat(2) | batch(4)", f->dir,
               "[0, 1, 20, 21] [22, 30, 0, 1] [20, 21, 22, 30]");
    expect_run(f, "snapshot(\"%s\") | map(add, 1) | filter(even)", f->dir, "2 22");

    /* global_shuffle: each chunk's elements permuted among themselves, the same every run. */
    struct pipe_spec *spec = parse_text("snapshot(\"%s\") | global_shuffle(9)", f->dir);
    char first[256] = "", again[256];
    for (int k = 0; k < 2; k++) {
        struct pipe_run *run;
        assert_int_equal(pipe_open(spec, f->reg, &run, f->err, sizeof f->err), 0);
        assert_int_equal(drain(run, k ? again : first, sizeof first), 0);
        pipe_run_free(run);
    }
    assert_string_equal(first, again);
    long sum = 0;
    int n = 0;
    for (char *tok = strtok(first, " "); tok; tok = strtok(NULL, " "), n++)
        sum += strtol(tok, NULL, 10);
    assert_int_equal(n, 6);
    assert_int_equal(sum, 0 + 1 + 20 + 21 + 22 + 30);
    pipe_spec_free(spec);

    /* An empty snapshot is empty. */
    char empty[256];
    snprintf(empty, sizeof empty, "%s/empty", f->dir);
    make_snapshot(f, empty, 0, NULL);
    expect_run(f, "snapshot(\"%s\")", empty, "");
}

static void test_source_not_a_snapshot(void **state)
{
    struct fixture *f = *state;
    struct pipe_spec *spec = parse_text("snapshot(\"%s\") | take(1)", f->dir);
    char want[512];
    snprintf(want, sizeof want, "snapshot %s: not a snapshot (no snapshot.json)", f->dir);
    struct pipe_run *run = NULL;
    assert_int_equal(pipe_open(spec, f->reg, &run, f->err, sizeof f->err), SLUICE_ERR_NOT_FOUND);
    assert_null(run);
    assert_string_equal(f->err, want);
    struct pipe_split_provider p;
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, f->err, sizeof f->err),
                     SLUICE_ERR_NOT_FOUND);
    assert_string_equal(f->err, want);
    pipe_spec_free(spec);
}

static void test_source_splits(void **state)
{
    struct fixture *f = *state;
    /* Only chunk 1 exists: the splits name every chunk all the same. */
    static const int counts[] = {-1, 2, -1, -1};
    make_snapshot(f, f->dir, 4, counts);
    struct pipe_spec *spec = parse_text("snapshot(\"%s\") | repeat(2) | map(add, 1)", f->dir);
    struct pipe_split_provider p;
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, f->err, sizeof f->err), 0);
    assert_int_equal(p.plan.kind, SPLIT_FILES);
    assert_int_equal(p.plan.per_pass, 4);
    assert_int_equal(p.plan.npaths, 4);
    assert_int_equal(split_plan_total(&p.plan), 8);
    struct split sp[8];
    for (uint64_t seq = 0; seq < 8; seq++) {
        assert_int_equal(split_plan_at(&p.plan, seq, &sp[seq]), 1);
        assert_int_equal(sp[seq].repetition, seq / 4);
        assert_int_equal(sp[seq].index, seq % 4);
        assert_string_equal(sp[seq].path, chunk_path(f, seq % 4));
    }
    struct split past;
    assert_int_equal(split_plan_at(&p.plan, 8, &past), 0);
    pipe_split_provider_release(&p);

    /* A worker runs split 5 (chunk 1, second pass). */
    struct pipe_run *run;
    assert_int_equal(pipe_open_splits(spec, f->reg, &sp[5], 1, &run, f->err, sizeof f->err), 0);
    char got[256];
    assert_int_equal(drain(run, got, sizeof got), 0);
    assert_string_equal(got, "11 12");
    pipe_run_free(run);
    pipe_spec_free(spec);

    /* Under global_shuffle a pass visits every chunk once, in a seeded order. */
    spec = parse_text("snapshot(\"%s\") | global_shuffle(4)", f->dir);
    assert_int_equal(pipe_split_provider_init(&p, spec, 0, f->err, sizeof f->err), 0);
    unsigned seen = 0;
    for (uint64_t seq = 0; seq < 4; seq++) {
        struct split s;
        assert_int_equal(split_plan_at(&p.plan, seq, &s), 1);
        assert_string_equal(s.path, chunk_path(f, s.index));
        seen |= 1u << s.index;
    }
    assert_int_equal(seen, 0xf);
    pipe_split_provider_release(&p);
    pipe_spec_free(spec);
}

/* What a helper thread does to a snapshot while a reader reads it. */
struct saver {
    struct fixture *f;
    unsigned delay_ms;
    enum { SAVE_COMMIT, SAVE_FAIL, SAVE_NOTHING } what;
    struct pipe_run *run; /* cancelled when the reader is not done within 10 s */
    atomic_int done;
    uint64_t acted_ms;
};

static void *saver_main(void *arg)
{
    struct saver *s = arg;
    sleep_ms(s->delay_ms);
    char err[SLUICE_ERRMSG_SIZE];
    if (s->what == SAVE_COMMIT) {
        struct snap_writer *w;
        if (snap_writer_open(s->f->dir, 1, &w, err, sizeof err) == 0) {
            struct sluice_element e;
            pipe_elem_init(&e);
            pipe_elem_resize(&e, 1);
            pipe_tensor_set_i64(&e.t[0], 10);
            snap_writer_add(w, &e, err, sizeof err);
            pipe_elem_release(&e);
            snap_writer_commit(w, err, sizeof err);
        }
    } else if (s->what == SAVE_FAIL) {
        snap_mark_failed(s->f->dir, "worker 3: disk full", err, sizeof err);
    } else {
        pipe_run_cancel(s->run);
    }
    s->acted_ms = now_ms();
    for (int i = 0; i < 1000 && !atomic_load(&s->done); i++)
        sleep_ms(10);
    if (!atomic_load(&s->done))
        pipe_run_cancel(s->run);
    return NULL;
}

/* Opens the snapshot of f->dir (chunk 0: one element 0, chunk 1 missing), lets a thread act on it
 * after delay_ms, and reads: returns the final code, the elements in got. */
static int read_while(struct fixture *f, int what, unsigned delay_ms, char *got, size_t len,
                      uint64_t *acted_ms, uint64_t *ended_ms)
{
    static const int counts[] = {1, -1};
    make_snapshot(f, f->dir, 2, counts);
    struct pipe_spec *spec = parse_text("snapshot(\"%s\")", f->dir);
    struct pipe_run *run;
    assert_int_equal(pipe_open(spec, f->reg, &run, f->err, sizeof f->err), 0);
    struct saver s = {.f = f, .delay_ms = delay_ms, .what = what, .run = run};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, saver_main, &s), 0);
    int rc = drain(run, got, len);
    *ended_ms = now_ms();
    snprintf(f->err, sizeof f->err, "%s", run->ctx.err);
    atomic_store(&s.done, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    *acted_ms = s.acted_ms;
    pipe_run_free(run);
    pipe_spec_free(spec);
    return rc;
}

static void test_source_waits_for_chunk(void **state)
{
    struct fixture *f = *state;
    char got[256];
    uint64_t acted, ended, start = now_ms();
    int rc = read_while(f, SAVE_COMMIT, 150, got, sizeof got, &acted, &ended);
    if (rc != 0)
        fail_msg("read: %d (%s)", rc, f->err);
    assert_string_equal(got, "0 10");
    assert_true(ended >= start + 150);
    /* Found within one poll interval (and some scheduling slack) of its commit. */
    assert_true(ended <= acted + PIPE_SNAPSHOT_POLL_MAX_MS + 500);
}

static void test_source_save_fails_while_waiting(void **state)
{
    struct fixture *f = *state;
    char got[256], want[512];
    uint64_t acted, ended;
    int rc = read_while(f, SAVE_FAIL, 100, got, sizeof got, &acted, &ended);
    assert_int_equal(rc, SLUICE_ERR_TASK_FAILED);
    snprintf(want, sizeof want, "snapshot %s: the save failed: worker 3: disk full", f->dir);
    assert_string_equal(f->err, want);
    assert_string_equal(got, "0");
    assert_true(ended <= acted + PIPE_SNAPSHOT_POLL_MAX_MS + 500);

    /* A snapshot that failed before reading began fails at the first missing chunk. */
    struct pipe_spec *spec = parse_text("snapshot(\"%s\")", f->dir);
    struct pipe_run *run;
    assert_int_equal(pipe_open(spec, f->reg, &run, f->err, sizeof f->err), 0);
    assert_int_equal(drain(run, got, sizeof got), SLUICE_ERR_TASK_FAILED);
    assert_string_equal(run->ctx.err, want);
    assert_string_equal(got, "0");
    pipe_run_free(run);
    pipe_spec_free(spec);
}

static void test_source_cancel_while_waiting(void **state)
{
    struct fixture *f = *state;
    char got[256], want[512];
    uint64_t acted, ended;
    int rc = read_while(f, SAVE_NOTHING, 100, got, sizeof got, &acted, &ended);
    assert_int_equal(rc, SLUICE_ERR_CANCELLED);
    snprintf(want, sizeof want,
             "snapshot chunk %s: cancelled while waiting for the save to write it",
             chunk_path(f, 1));
    assert_string_equal(f->err, want);
    assert_string_equal(got, "0");
    /* A cancel is seen within a poll slice, not a whole backoff interval. */
    assert_true(ended <= acted + 100);
}

static void test_source_complete_without_chunk(void **state)
{
    struct fixture *f = *state;
    static const int counts[] = {2, -1};
    make_snapshot(f, f->dir, 2, counts);
    file_write(path_in(f, "manifest.json"), "{\"elements\": 2}\n", 16);
    char want[512], got[256];
    snprintf(want, sizeof want,
             "snapshot chunk %s: not found (the snapshot is complete without it)",
             chunk_path(f, 1));
    struct pipe_spec *spec = parse_text("snapshot(\"%s\")", f->dir);
    struct pipe_run *run;
    assert_int_equal(pipe_open(spec, f->reg, &run, f->err, sizeof f->err), 0);
    assert_int_equal(drain(run, got, sizeof got), SLUICE_ERR_NOT_FOUND);
    assert_string_equal(run->ctx.err, want);
    assert_string_equal(got, "0 1");
    /* The failure sticks. */
    struct sluice_element e;
    pipe_elem_init(&e);
    assert_int_equal(pipe_run_next(run, &e), SLUICE_ERR_NOT_FOUND);
    pipe_elem_release(&e);
    pipe_run_free(run);
    pipe_spec_free(spec);
}

static void test_source_damaged_chunk(void **state)
{
    struct fixture *f = *state;
    static const int counts[] = {1, 2};
    make_snapshot(f, f->dir, 2, counts);
    size_t len;
    uint8_t *data = file_read(chunk_path(f, 1), &len);
    data[REC1 + 8 + 12] ^= 1;
    file_write(chunk_path(f, 1), data, len);
    free(data);
    char want[512], got[256];
    snprintf(want, sizeof want, "snapshot chunk %s: checksum mismatch at offset 29",
             chunk_path(f, 1));
    struct pipe_spec *spec = parse_text("snapshot(\"%s\")", f->dir);
    struct pipe_run *run;
    assert_int_equal(pipe_open(spec, f->reg, &run, f->err, sizeof f->err), 0);
    assert_int_equal(drain(run, got, sizeof got), SLUICE_ERR_CORRUPT);
    assert_string_equal(run->ctx.err, want);
    assert_string_equal(got, "0 10");
    pipe_run_free(run);
    pipe_spec_free(spec);
}

static void test_source_roots(void **state)
{
    struct fixture *f = *state;
    char root[256], inside[256], outside[256], link[256];
    snprintf(root, sizeof root, "%s/root", f->dir);
    snprintf(inside, sizeof inside, "%s/root/snap", f->dir);
    snprintf(outside, sizeof outside, "%s/elsewhere", f->dir);
    snprintf(link, sizeof link, "%s/root/link", f->dir);
    assert_int_equal(mkdir(root, 0777), 0);
    static const int counts[] = {2};
    make_snapshot(f, inside, 1, counts);
    make_snapshot(f, outside, 1, counts);
    assert_int_equal(symlink(outside, link), 0);

    struct pipe_roots roots;
    const char *dirs[] = {root};
    assert_int_equal(pipe_roots_init(&roots, dirs, 1, f->err, sizeof f->err), 0);
    assert_int_equal(pipe_registry_confine(f->reg, &roots, NULL, 0, f->err, sizeof f->err), 0);
    char real_root[PATH_MAX], real_out[PATH_MAX];
    assert_non_null(realpath(root, real_root));
    assert_non_null(realpath(outside, real_out));

    expect_run(f, "snapshot(\"%s\")", inside, "0 1");
    const char *refused[] = {outside, link};
    for (int i = 0; i < 2; i++) {
        struct pipe_spec *spec = parse_text("snapshot(\"%s\")", refused[i]);
        struct pipe_run *run = NULL;
        assert_int_equal(pipe_open(spec, f->reg, &run, f->err, sizeof f->err), SLUICE_ERR_DENIED);
        char want[3 * PATH_MAX];
        snprintf(want, sizeof want, "snapshot(\"%s\"): %s is outside the data roots (%s)",
                 refused[i], real_out, real_root);
        assert_string_equal(f->err, want);
        assert_int_equal(pipe_roots_check_source(&roots, &spec->source, f->err, sizeof f->err),
                         SLUICE_ERR_DENIED);
        pipe_spec_free(spec);
    }

    /* A chunk a worker is handed is checked as it is opened, too. */
    struct pipe_spec *spec = parse_text("snapshot(\"%s\")", inside);
    struct split sp = {.seq = 0};
    snap_chunk_path(outside, 0, sp.path, sizeof sp.path);
    struct pipe_run *run;
    assert_int_equal(pipe_open_splits(spec, f->reg, &sp, 1, &run, f->err, sizeof f->err), 0);
    char got[256];
    assert_int_equal(drain(run, got, sizeof got), SLUICE_ERR_DENIED);
    assert_non_null(strstr(run->ctx.err, "is outside the data roots"));
    pipe_run_free(run);
    pipe_spec_free(spec);
    pipe_roots_release(&roots);
}

/* A worker's element limit and a function's failure name the chunk and the record's offset. */
static void test_source_limit_and_origin(void **state)
{
    struct fixture *f = *state;
    static const int counts[] = {3};
    make_snapshot(f, f->dir, 1, counts);
    struct pipe_spec *spec = parse_text("snapshot(\"%s\")", f->dir);
    struct pipe_limits limits = {.max_element_bytes = 4};
    struct pipe_run *run;
    assert_int_equal(pipe_open_limited(spec, f->reg, &limits, &run, f->err, sizeof f->err), 0);
    char got[256], want[1024];
    assert_int_equal(drain(run, got, sizeof got), SLUICE_ERR_LIMIT);
    snprintf(want, sizeof want,
             "snapshot chunk %s: offset 8: element of 8 bytes is over the worker's limit of 4 "
             "(--max-element-bytes)",
             chunk_path(f, 0));
    assert_string_equal(run->ctx.err, want);
    assert_string_equal(got, "");
    pipe_run_free(run);
    pipe_spec_free(spec);

    /* decode_jpeg refuses an int64: the message names the second record (at 8 + 21). */
    spec = parse_text("snapshot(\"%s\") | skip(1) | map(decode_jpeg)", f->dir);
    assert_int_equal(pipe_open(spec, f->reg, &run, f->err, sizeof f->err), 0);
    int rc = drain(run, got, sizeof got);
    assert_true(rc < 0);
    snprintf(want, sizeof want, " (record at %s offset 29)", chunk_path(f, 0));
    const char *msg = run->ctx.err;
    if (strlen(msg) < strlen(want) || strcmp(msg + strlen(msg) - strlen(want), want) != 0)
        fail_msg("%s: does not end in%s", msg, want);
    pipe_run_free(run);
    pipe_spec_free(spec);
}

static void test_source_static_sharding(void **state)
{
    (void)state;
    struct pipe_spec *spec = parse_text("snapshot(\"%s\")", "/snap");
    struct pipe_spec *out = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    struct shard_params file = {SLUICE_SHARD_FILE, 2, 1};
    assert_int_equal(shard_rewrite(spec, &file, NULL, 0, &out, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_false(shard_needs_files(spec, SLUICE_SHARD_FILE_OR_DATA));
    struct shard_params auto_ = {SLUICE_SHARD_FILE_OR_DATA, 2, 1};
    assert_int_equal(shard_rewrite(spec, &auto_, NULL, 0, &out, err, sizeof err), 0);
    char text[256];
    assert_true(pipe_spec_format(out, text, sizeof text) < (int)sizeof text);
    assert_string_equal(text, "snapshot(\"/snap\") | shard(2, 1)");
    pipe_spec_free(out);
    pipe_spec_free(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consistent_lies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seed_corpus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unique_temp_and_replace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_creates_chunks_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finalize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finalize_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_not_a_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_splits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_waits_for_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_save_fails_while_waiting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_cancel_while_waiting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_complete_without_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_damaged_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_roots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_limit_and_origin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_static_sharding, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
