/* File sources: TFRecord framing against known vectors, exact read-back, every corruption and
 * truncation with its exact message, globbing, and lines() edge cases. Files live in a private
 * temporary directory removed after each test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/file.h"
#include "lib/tmp.h"

#include "common/crc32c.h"
#include "common/error.h"
#include "pipeline/files.h"
#include "pipeline/split.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

struct fixture {
    char dir[64];
    struct pipe_ctx ctx;
    struct sluice_element elem;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/sluice-test-files-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    pipe_elem_init(&f->elem);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    tmp_remove(f->dir);
    pipe_elem_release(&f->elem);
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

struct rec {
    const void *data;
    size_t len;
};

static void write_tfrecords(const char *path, const struct rec *recs, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(pipe_tfrecord_write(fp, recs[i].data, recs[i].len), 0);
    assert_int_equal(fclose(fp), 0);
}

/* A deterministic byte pattern that differs between records. */
static uint8_t *pattern(size_t len, unsigned seed)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 16);
    }
    return p;
}

static struct pipe_iter *open_one(struct fixture *f, bool tfrecord, const char *path)
{
    char *paths[1] = {(char *)path};
    struct pipe_iter *it = NULL;
    int rc = tfrecord ? pipe_tfrecord_open(paths, 1, &f->ctx, &it)
                      : pipe_lines_open(paths, 1, &f->ctx, &it);
    assert_int_equal(rc, 0);
    assert_non_null(it);
    return it;
}

/* Asserts that the next element is the scalar bytes string data[0, len). */
static void expect_bytes(struct fixture *f, struct pipe_iter *it, const void *data, size_t len)
{
    int rc = pipe_next(it, &f->elem);
    if (rc != 1)
        fail_msg("expected an element of %zu bytes, got %d (%s)", len, rc, f->ctx.err);
    assert_int_equal(f->elem.n, 1);
    const struct pipe_tensor *t = &f->elem.t[0];
    assert_int_equal(t->dtype, SLUICE_BYTES);
    assert_int_equal(t->rank, 0);
    assert_int_equal(t->len, len);
    assert_int_equal(t->offs[0], 0);
    assert_int_equal(t->offs[1], len);
    if (len > 0)
        assert_memory_equal(t->data, data, len);
}

static void expect_str(struct fixture *f, struct pipe_iter *it, const char *s)
{
    expect_bytes(f, it, s, strlen(s));
}

static void expect_end(struct fixture *f, struct pipe_iter *it)
{
    assert_int_equal(pipe_next(it, &f->elem), 0);
    assert_int_equal(pipe_next(it, &f->elem), 0);
}

/* Asserts an error with exactly the given message, and that it stays. */
static void expect_error(struct fixture *f, struct pipe_iter *it, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void expect_error(struct fixture *f, struct pipe_iter *it, int code, const char *fmt, ...)
{
    char want[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    assert_int_equal(pipe_next(it, &f->elem), code);
    assert_string_equal(f->ctx.err, want);
    assert_int_equal(pipe_next(it, &f->elem), code);
}

/* ---- framing ----------------------------------------------------------------------------- */

static void test_mask_known_vectors(void **state)
{
    (void)state;
    /* The CRC32C check value and the RFC 3720 zero vector. */
    assert_int_equal(crc32c("123456789", 9), 0xe3069283u);
    uint8_t zeros[32] = {0};
    assert_int_equal(crc32c(zeros, 32), 0x8a9136aau);
    /* The masked crc of a zero length, as found in every TFRecord file holding an empty record:
     * crc32c of 8 zero bytes is 0x8c28b28a, rotated right by 15 bits and offset. */
    assert_int_equal(crc32c(zeros, 8), 0x8c28b28au);
    assert_int_equal(pipe_tfrecord_mask(0x8c28b28au), 0x07980329u);
    assert_int_equal(pipe_tfrecord_mask(0), 0xa282ead8u);
    /* Wrap-around of the addition. */
    assert_int_equal(pipe_tfrecord_mask(0xffffffffu), 0xa282ead7u);
}

static void test_write_exact_bytes(void **state)
{
    struct fixture *f = *state;
    const char *path = path_in(f, "hello.tfrecord");
    struct rec recs[] = {{"hello", 5}, {"", 0}};
    write_tfrecords(path, recs, 2);
    static const uint8_t want[] = {
        /* "hello": length 5, masked crc of the length, data, masked crc of the data */
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xea, 0xb2, 0x04, 0x3e, 0x68, 0x65, 0x6c,
        0x6c, 0x6f, 0xbb, 0x1f, 0x1c, 0x19,
        /* the empty record */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x29, 0x03, 0x98, 0x07, 0xd8, 0xea, 0x82,
        0xa2};
    size_t len;
    uint8_t *got = file_read(path, &len);
    assert_int_equal(len, sizeof want);
    assert_memory_equal(got, want, sizeof want);
    free(got);

    /* A hand-framed file reads back too. */
    const char *hand = path_in(f, "hand.tfrecord");
    file_write(hand, want, sizeof want);
    struct pipe_iter *it = open_one(f, true, hand);
    expect_str(f, it, "hello");
    expect_str(f, it, "");
    expect_end(f, it);
    it->ops->destroy(it);
}

static void test_write_error(void **state)
{
    (void)state;
    FILE *fp = fopen("/dev/full", "wb");
    if (!fp)
        skip();
    setvbuf(fp, NULL, _IONBF, 0);
    assert_int_equal(pipe_tfrecord_write(fp, "x", 1), -ENOSPC);
    fclose(fp);
}

/* ---- tfrecord() reading ------------------------------------------------------------------ */

static void test_tfrecord_roundtrip(void **state)
{
    struct fixture *f = *state;
    /* Sizes around the 256 KiB read buffer (a record of 262128 bytes fills it exactly with its
     * framing), a record several times larger, and many small ones that straddle refills. */
    size_t sizes[] = {0, 1, 256, 262127, 262128, 262129, 3u << 20, 0, 5};
    enum { NFIXED = sizeof sizes / sizeof sizes[0], NSMALL = 3000 };
    struct rec recs[NFIXED + NSMALL];
    uint8_t *bufs[NFIXED + NSMALL];
    for (size_t i = 0; i < NFIXED; i++) {
        bufs[i] = pattern(sizes[i], (unsigned)i);
        recs[i] = (struct rec){bufs[i], sizes[i]};
    }
    /* Every byte value. */
    for (size_t b = 0; b < 256; b++)
        bufs[2][b] = (uint8_t)b;
    for (size_t i = NFIXED; i < NFIXED + NSMALL; i++) {
        size_t len = (i * 7919) % 1000;
        bufs[i] = pattern(len, (unsigned)i);
        recs[i] = (struct rec){bufs[i], len};
    }
    const char *path = path_in(f, "data.tfrecord");
    write_tfrecords(path, recs, NFIXED + NSMALL);

    struct pipe_iter *it = open_one(f, true, path);
    for (size_t i = 0; i < NFIXED + NSMALL; i++)
        expect_bytes(f, it, recs[i].data, recs[i].len);
    expect_end(f, it);
    it->ops->destroy(it);
    for (size_t i = 0; i < NFIXED + NSMALL; i++)
        free(bufs[i]);
}

static void test_tfrecord_empty_file(void **state)
{
    struct fixture *f = *state;
    const char *path = path_in(f, "empty.tfrecord");
    file_write(path, "", 0);
    struct pipe_iter *it = open_one(f, true, path);
    expect_end(f, it);
    it->ops->destroy(it);

    /* No files at all is an empty source as well. */
    assert_int_equal(pipe_tfrecord_open(NULL, 0, &f->ctx, &it), 0);
    expect_end(f, it);
    it->ops->destroy(it);
}

/* Writes "abc" (19 bytes framed) then a record of len bytes, and returns the file's bytes. */
static uint8_t *two_records(struct fixture *f, const char *path, size_t len, size_t *total)
{
    uint8_t *data = pattern(len, 42);
    struct rec recs[] = {{"abc", 3}, {data, len}};
    write_tfrecords(path, recs, 2);
    free(data);
    return file_read(path, total);
}

/* Rewrites path with its first keep bytes and checks the error after the "abc" record. */
static void check_cut(struct fixture *f, const char *path, const uint8_t *bytes, size_t keep,
                      uint64_t needs)
{
    file_write(path, bytes, keep);
    struct pipe_iter *it = open_one(f, true, path);
    expect_str(f, it, "abc");
    expect_error(f, it, SLUICE_ERR_TRUNCATED,
                 "%s: offset 19: truncated record (needs %llu bytes, %zu left)", path,
                 (unsigned long long)needs, keep - 19);
    it->ops->destroy(it);
}

static void test_tfrecord_truncated(void **state)
{
    struct fixture *f = *state;
    const char *path = path_in(f, "cut.tfrecord");
    size_t total;
    uint8_t *bytes = two_records(f, path, 100, &total);
    assert_int_equal(total, 19 + 116);
    check_cut(f, path, bytes, 19 + 5, 12);        /* in the length */
    check_cut(f, path, bytes, 19 + 10, 12);       /* in the length's checksum */
    check_cut(f, path, bytes, 19 + 12, 116);      /* right after the header */
    check_cut(f, path, bytes, 19 + 12 + 40, 116); /* in the data */
    check_cut(f, path, bytes, 19 + 112, 116);     /* after the data */
    check_cut(f, path, bytes, 19 + 114, 116);     /* in the data's checksum */
    free(bytes);

    /* The same for a record larger than the read buffer. */
    size_t big = 1u << 20;
    bytes = two_records(f, path, big, &total);
    check_cut(f, path, bytes, 19 + 12 + 600000, 12 + big + 4);
    check_cut(f, path, bytes, 19 + 12 + big, 12 + big + 4);
    check_cut(f, path, bytes, 19 + 12 + big + 3, 12 + big + 4);
    free(bytes);

    /* A file that is only a partial header. */
    file_write(path, "\x05\x00\x00", 3);
    struct pipe_iter *it = open_one(f, true, path);
    expect_error(f, it, SLUICE_ERR_TRUNCATED,
                 "%s: offset 0: truncated record (needs 12 bytes, 3 left)", path);
    it->ops->destroy(it);
}

static void check_corrupt(struct fixture *f, const char *path, uint8_t *bytes, size_t total,
                          size_t flip, const char *what)
{
    bytes[flip] ^= 0x10;
    file_write(path, bytes, total);
    bytes[flip] ^= 0x10;
    struct pipe_iter *it = open_one(f, true, path);
    expect_str(f, it, "abc");
    expect_error(f, it, SLUICE_ERR_CORRUPT, "%s: offset 19: %s", path, what);
    it->ops->destroy(it);
}

static void test_tfrecord_bad_checksums(void **state)
{
    struct fixture *f = *state;
    const char *path = path_in(f, "bad.tfrecord");
    size_t total;
    uint8_t *bytes = two_records(f, path, 100, &total);
    check_corrupt(f, path, bytes, total, 19 + 0, "bad length checksum"); /* the length */
    check_corrupt(f, path, bytes, total, 19 + 9, "bad length checksum"); /* its checksum */
    check_corrupt(f, path, bytes, total, 19 + 12, "bad data checksum");  /* first data byte */
    check_corrupt(f, path, bytes, total, 19 + 111, "bad data checksum"); /* last data byte */
    check_corrupt(f, path, bytes, total, 19 + 113, "bad data checksum"); /* data checksum */
    free(bytes);

    size_t big = 1u << 20;
    bytes = two_records(f, path, big, &total);
    check_corrupt(f, path, bytes, total, 19 + 12 + 500000, "bad data checksum");
    check_corrupt(f, path, bytes, total, 19 + 12 + big + 2, "bad data checksum");
    free(bytes);
}

static void test_tfrecord_length_over_limit(void **state)
{
    struct fixture *f = *state;
    const char *path = path_in(f, "huge.tfrecord");
    /* A valid header claiming 2 GiB, followed by nothing: refused before any allocation. */
    static const uint8_t header[] = {0x00, 0x00, 0x00, 0x80, 0x00, 0x00,
                                     0x00, 0x00, 0xec, 0xaf, 0x30, 0x72};
    file_write(path, header, sizeof header);
    struct pipe_iter *it = open_one(f, true, path);
    expect_error(f, it, SLUICE_ERR_TOO_LARGE, "%s: offset 0: record length 2147483648 over limit",
                 path);
    it->ops->destroy(it);
}

static void test_tfrecord_glob_many_files(void **state)
{
    struct fixture *f = *state;
    /* Written out of name order; some files are empty. A directory and a file of another name
     * match nothing. */
    const int order[] = {7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 4};
    for (size_t k = 0; k < 12; k++) {
        int i = order[k];
        char name[64], rec[3][32];
        struct rec recs[3];
        int nrec = i % 4;
        for (int j = 0; j < nrec; j++) {
            snprintf(rec[j], sizeof rec[j], "file %02d record %d", i, j);
            recs[j] = (struct rec){rec[j], strlen(rec[j])};
        }
        snprintf(name, sizeof name, "part-%02d.tfrecord", i);
        write_tfrecords(path_in(f, name), recs, (size_t)nrec);
    }
    assert_int_equal(mkdir(path_in(f, "part-99.tfrecord"), 0700), 0);
    file_write(path_in(f, "other.txt"), "x", 1);

    char *glob = path_in(f, "part-*.tfrecord");
    char **paths = NULL;
    size_t npaths = 0;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_glob_expand(&glob, 1, &paths, &npaths, err, sizeof err), 0);
    assert_int_equal(npaths, 12);
    for (int i = 0; i < 12; i++) {
        char name[64];
        snprintf(name, sizeof name, "part-%02d.tfrecord", i);
        assert_string_equal(paths[i], path_in(f, name));
    }
    struct pipe_iter *it = NULL;
    assert_int_equal(pipe_tfrecord_open(paths, npaths, &f->ctx, &it), 0);
    pipe_paths_free(paths, npaths); /* the iterator keeps its own copies */
    for (int i = 0; i < 12; i++) {
        for (int j = 0; j < i % 4; j++) {
            char rec[32];
            snprintf(rec, sizeof rec, "file %02d record %d", i, j);
            expect_str(f, it, rec);
        }
    }
    expect_end(f, it);
    it->ops->destroy(it);
}

static void test_glob_expand(void **state)
{
    struct fixture *f = *state;
    file_write(path_in(f, "b1"), "", 0);
    file_write(path_in(f, "a1"), "", 0);
    file_write(path_in(f, "b2"), "", 0);
    assert_int_equal(mkdir(path_in(f, "sub"), 0700), 0);
    assert_int_equal(mkdir(path_in(f, "bdir"), 0700), 0);

    /* Overlapping patterns: the union, sorted, each file once; directories left out. */
    char *globs[] = {path_in(f, "b*"), path_in(f, "*"), path_in(f, "a1")};
    char **paths = NULL;
    size_t npaths = 0;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(pipe_glob_expand(globs, 3, &paths, &npaths, err, sizeof err), 0);
    assert_int_equal(npaths, 3);
    assert_string_equal(paths[0], path_in(f, "a1"));
    assert_string_equal(paths[1], path_in(f, "b1"));
    assert_string_equal(paths[2], path_in(f, "b2"));
    pipe_paths_free(paths, npaths);

    /* A pattern matching nothing, or only directories, is an error naming it. */
    char *missing[] = {path_in(f, "a*"), path_in(f, "*.nope")};
    paths = (char **)&err;
    assert_int_equal(pipe_glob_expand(missing, 2, &paths, &npaths, err, sizeof err),
                     SLUICE_ERR_NOT_FOUND);
    assert_null(paths);
    assert_int_equal(npaths, 0);
    char want[300];
    snprintf(want, sizeof want, "no file matches '%s'", missing[1]);
    assert_string_equal(err, want);

    char *dirs[] = {path_in(f, "su*")};
    assert_int_equal(pipe_glob_expand(dirs, 1, &paths, &npaths, err, sizeof err),
                     SLUICE_ERR_NOT_FOUND);
    snprintf(want, sizeof want, "no file matches '%s'", dirs[0]);
    assert_string_equal(err, want);
}

static void test_missing_file(void **state)
{
    struct fixture *f = *state;
    const char *good = path_in(f, "good.tfrecord");
    struct rec recs[] = {{"one", 3}};
    write_tfrecords(good, recs, 1);
    file_write(path_in(f, "good.txt"), "line\n", 5);
    const char *missing = path_in(f, "missing");

    /* Files open lazily: the error comes after the first file's elements. */
    char *paths[] = {(char *)good, (char *)missing};
    struct pipe_iter *it = NULL;
    assert_int_equal(pipe_tfrecord_open(paths, 2, &f->ctx, &it), 0);
    expect_str(f, it, "one");
    expect_error(f, it, -ENOENT, "%s: No such file or directory", missing);
    it->ops->destroy(it);

    paths[0] = path_in(f, "good.txt");
    assert_int_equal(pipe_lines_open(paths, 2, &f->ctx, &it), 0);
    expect_str(f, it, "line");
    expect_error(f, it, -ENOENT, "%s: No such file or directory", missing);
    it->ops->destroy(it);

    /* A directory opens but cannot be read. */
    paths[0] = f->dir;
    assert_int_equal(pipe_lines_open(paths, 1, &f->ctx, &it), 0);
    expect_error(f, it, -EISDIR, "%s: offset 0: Is a directory", f->dir);
    it->ops->destroy(it);
}

/* ---- lines() ----------------------------------------------------------------------------- */

static void test_lines_basic(void **state)
{
    struct fixture *f = *state;
    const char *path = path_in(f, "a.txt");

    file_write(path, "a\nbb\n\nccc", 9); /* no newline at the end */
    struct pipe_iter *it = open_one(f, false, path);
    expect_str(f, it, "a");
    expect_str(f, it, "bb");
    expect_str(f, it, "");
    expect_str(f, it, "ccc");
    expect_end(f, it);
    it->ops->destroy(it);

    file_write(path, "\n\nx\n", 4); /* the final newline ends a line, adds none */
    it = open_one(f, false, path);
    expect_str(f, it, "");
    expect_str(f, it, "");
    expect_str(f, it, "x");
    expect_end(f, it);
    it->ops->destroy(it);

    file_write(path, "x\r\ny\r\n\r", 7); /* bytes stay exact: \r is kept */
    it = open_one(f, false, path);
    expect_str(f, it, "x\r");
    expect_str(f, it, "y\r");
    expect_str(f, it, "\r");
    expect_end(f, it);
    it->ops->destroy(it);

    file_write(path, "n\0l\n\xff\n", 6); /* any byte but \n belongs to the line */
    it = open_one(f, false, path);
    expect_bytes(f, it, "n\0l", 3);
    expect_bytes(f, it, "\xff", 1);
    expect_end(f, it);
    it->ops->destroy(it);

    file_write(path, "", 0);
    it = open_one(f, false, path);
    expect_end(f, it);
    it->ops->destroy(it);
}

static void test_lines_files_do_not_join(void **state)
{
    struct fixture *f = *state;
    file_write(path_in(f, "1.txt"), "a\nb", 3);
    file_write(path_in(f, "2.txt"), "", 0);
    file_write(path_in(f, "3.txt"), "c\n", 2);
    file_write(path_in(f, "4.txt"), "\n", 1);
    char *glob = path_in(f, "*.txt");
    char **paths = NULL;
    size_t npaths = 0;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_glob_expand(&glob, 1, &paths, &npaths, err, sizeof err), 0);
    assert_int_equal(npaths, 4);
    struct pipe_iter *it = NULL;
    assert_int_equal(pipe_lines_open(paths, npaths, &f->ctx, &it), 0);
    pipe_paths_free(paths, npaths);
    expect_str(f, it, "a");
    expect_str(f, it, "b");
    expect_str(f, it, "c");
    expect_str(f, it, "");
    expect_end(f, it);
    it->ops->destroy(it);
}

static void test_lines_long(void **state)
{
    struct fixture *f = *state;
    /* A 5 MiB line between short ones, lines ending right at and around the 256 KiB buffer
     * boundary, and a long last line without a newline. */
    size_t lens[] = {2, 5u << 20, 3, 262143, 262144, 262145, 0, 262144 * 2 + 17, 1000000};
    enum { N = sizeof lens / sizeof lens[0] };
    uint8_t *lines[N];
    size_t total = 0;
    for (size_t i = 0; i < N; i++) {
        lines[i] = pattern(lens[i], (unsigned)i + 100);
        for (size_t k = 0; k < lens[i]; k++)
            if (lines[i][k] == '\n')
                lines[i][k] = 'n';
        total += lens[i] + 1;
    }
    uint8_t *file = malloc(total);
    assert_non_null(file);
    size_t at = 0;
    for (size_t i = 0; i < N; i++) {
        memcpy(file + at, lines[i], lens[i]);
        at += lens[i];
        file[at++] = '\n';
    }
    const char *path = path_in(f, "long.txt");
    file_write(path, file, total - 1);
    struct pipe_iter *it = open_one(f, false, path);
    for (size_t i = 0; i < N; i++)
        expect_bytes(f, it, lines[i], lens[i]);
    expect_end(f, it);
    it->ops->destroy(it);
    free(file);
    for (size_t i = 0; i < N; i++)
        free(lines[i]);
}

static void test_lines_many(void **state)
{
    struct fixture *f = *state;
    /* Many lines of varied length, so that lines straddle every refill. */
    enum { N = 20000 };
    size_t total = 0;
    for (size_t i = 0; i < N; i++)
        total += (i * 31) % 200 + 1;
    char *file = malloc(total);
    assert_non_null(file);
    size_t at = 0;
    for (size_t i = 0; i < N; i++) {
        size_t len = (i * 31) % 200;
        for (size_t k = 0; k < len; k++)
            file[at++] = (char)('a' + (i + k) % 26);
        file[at++] = '\n';
    }
    const char *path = path_in(f, "many.txt");
    file_write(path, file, total);
    struct pipe_iter *it = open_one(f, false, path);
    at = 0;
    for (size_t i = 0; i < N; i++) {
        size_t len = (i * 31) % 200;
        expect_bytes(f, it, file + at, len);
        at += len + 1;
    }
    expect_end(f, it);
    it->ops->destroy(it);
    free(file);
}

/* ---- zstd ------------------------------------------------------------------------------- */

/* Appends data compressed as one zstd frame (libzstd, level 3) to path. */
static void append_zstd_frame(const char *path, const void *data, size_t len)
{
    size_t cap = ZSTD_compressBound(len);
    uint8_t *z = malloc(cap);
    assert_non_null(z);
    size_t n = ZSTD_compress(z, cap, data, len, 3);
    assert_false(ZSTD_isError(n));
    FILE *fp = fopen(path, "ab");
    assert_non_null(fp);
    assert_int_equal(fwrite(z, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
    free(z);
}

/* A zstd file is recognised by its content: lines and records read through it, concatenated
 * frames as one stream (a line may span two frames), large files through many refills. */
static void test_zstd_sources(void **state)
{
    struct fixture *f = *state;
    const char *lz = path_in(f, "a.txt"); /* the name says nothing */
    append_zstd_frame(lz, "one\ntw", 6);
    append_zstd_frame(lz, "o\nthree\n", 8);
    struct pipe_iter *it = open_one(f, false, lz);
    expect_str(f, it, "one");
    expect_str(f, it, "two");
    expect_str(f, it, "three");
    expect_end(f, it);
    it->ops->destroy(it);

    /* TFRecords compressed whole: 200 records of up to 20 KB, through many refills. */
    const char *raw = path_in(f, "r.tfrecord");
    struct rec recs[200];
    uint8_t *bodies[200];
    for (size_t i = 0; i < 200; i++) {
        bodies[i] = pattern(i * 97 % 20000, (unsigned)i);
        recs[i] = (struct rec){bodies[i], i * 97 % 20000};
    }
    write_tfrecords(raw, recs, 200);
    size_t rlen;
    uint8_t *bytes = file_read(raw, &rlen);
    const char *tz = path_in(f, "r.tfrecord.zst");
    append_zstd_frame(tz, bytes, rlen);
    it = open_one(f, true, tz);
    for (size_t i = 0; i < 200; i++)
        expect_bytes(f, it, recs[i].data, recs[i].len);
    expect_end(f, it);
    it->ops->destroy(it);
    for (size_t i = 0; i < 200; i++)
        free(bodies[i]);
    free(bytes);
}

/* A cut or damaged zstd file is an error at the offset (of uncompressed bytes) where it shows;
 * what came before it may have been delivered. */
static void test_zstd_damage(void **state)
{
    struct fixture *f = *state;
    const char *whole = path_in(f, "w.zst");
    append_zstd_frame(whole, "alpha\nbeta\ngamma\n", 17);
    size_t len;
    uint8_t *z = file_read(whole, &len);
    /* Cut before the frame's end: the lines up to where it breaks, then the error. */
    const char *cut = path_in(f, "c.zst");
    file_write(cut, z, len - 3);
    struct pipe_iter *it = open_one(f, false, cut);
    int rc;
    while ((rc = pipe_next(it, &f->elem)) == 1)
        ;
    assert_int_equal(rc, SLUICE_ERR_TRUNCATED);
    assert_non_null(strstr(f->ctx.err, "c.zst: offset "));
    assert_non_null(strstr(f->ctx.err, ": truncated zstd stream"));
    it->ops->destroy(it);
    /* Garbage after the magic number. */
    const char *bad = path_in(f, "b.zst");
    uint8_t junk[64];
    memset(junk, 0xff, sizeof junk);
    memcpy(junk, "\x28\xb5\x2f\xfd", 4);
    file_write(bad, junk, sizeof junk);
    it = open_one(f, false, bad);
    assert_int_equal(pipe_next(it, &f->elem), SLUICE_ERR_CORRUPT);
    assert_non_null(strstr(f->ctx.err, "b.zst: offset 0: corrupt zstd stream: "));
    it->ops->destroy(it);
    /* Flipped bytes inside the frame: an error or (where zstd cannot tell) other bytes, never
     * a crash; the frame checksum, when the writer stored one, catches the rest. */
    for (size_t pos = 4; pos < len; pos++) {
        uint8_t *d = malloc(len);
        assert_non_null(d);
        memcpy(d, z, len);
        d[pos] ^= 0x55;
        const char *flip = path_in(f, "f.zst");
        file_write(flip, d, len);
        it = open_one(f, false, flip);
        while ((rc = pipe_next(it, &f->elem)) == 1)
            ;
        assert_true(rc == 0 || rc == SLUICE_ERR_CORRUPT || rc == SLUICE_ERR_TRUNCATED);
        it->ops->destroy(it);
        free(d);
    }
    free(z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_known_vectors),
        cmocka_unit_test_setup_teardown(test_write_exact_bytes, setup, teardown),
        cmocka_unit_test(test_write_error),
        cmocka_unit_test_setup_teardown(test_tfrecord_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tfrecord_empty_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tfrecord_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tfrecord_bad_checksums, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tfrecord_length_over_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tfrecord_glob_many_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_glob_expand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lines_basic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lines_files_do_not_join, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lines_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lines_many, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zstd_sources, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zstd_damage, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
