/* Compressed files and WebDataset shards end to end. The inputs are made by independent writers:
 * Debian's gzip and tar programs compress and pack files this test writes (TFRecord framing comes
 * from pipe_tfrecord_write, checked against known vectors in test_files.c). The real `sluice run`
 * and a real dispatcher with workers read them; every test asserts the exact output and the
 * exact error text. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/text.h"
#include "lib/tmp.h"
#include "pipeline/files.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GZIP "/usr/bin/gzip"
#define TAR "/usr/bin/tar"

/* ---- Files -------------------------------------------------------------------------------- */

static char *path_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A path under the test's directory, malloc'd. */
static char *path_of(const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    size_t n = strlen(tmp_dir()) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", tmp_dir(), name);
    return p;
}

static void mkdir_p(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(buf, 0755);
            *s = '/';
        }
    }
    mkdir(buf, 0755);
}

/* Runs a program that must succeed. */
static void run_ok(char *const argv[])
{
    char *out = NULL, *err = NULL;
    int rc = run_cmd(argv, 60000, &out, &err);
    if (rc != 0)
        fail_msg("%s %s exited with %d: %s", argv[0], argv[1], rc, err);
    free(out);
    free(err);
}

/* gzip -n -k -f PATH: PATH.gz with a 10-byte header (no name, no time), PATH kept. */
static char *gzip_file(const char *path)
{
    char *const argv[] = {GZIP, "-n", "-k", "-f", (char *)path, NULL};
    run_ok(argv);
    size_t n = strlen(path) + 4;
    char *gz = malloc(n);
    assert_non_null(gz);
    snprintf(gz, n, "%s.gz", path);
    return gz;
}

/* ---- sluice run ---------------------------------------------------------------------------- */

/* Runs `sluice run PIPELINE [EXTRA]`; returns the exit status with stdout and stderr. */
static int sluice_run(const char *pipeline, const char *extra1, const char *extra2, char **out,
                      char **err)
{
    char *const argv[] = {
        (char *)bin_path("sluice"), "run", (char *)pipeline, (char *)extra1, (char *)extra2, NULL};
    return run_cmd(argv, 60000, out, err);
}

/* Asserts status, stdout and stderr of `sluice run PIPELINE` exactly. */
static void expect_run(const char *pipeline, int status, const char *want_out, const char *want_err)
{
    char *out = NULL, *err = NULL;
    int rc = sluice_run(pipeline, NULL, NULL, &out, &err);
    if (rc != status || strcmp(out, want_out) != 0 || strcmp(err, want_err) != 0)
        fprintf(stderr,
                "pipeline: %s\nstatus %d (want %d)\nstdout (%zu bytes):\n%.2000s\n"
                "stderr:\n%s\nwant stderr:\n%s\n",
                pipeline, rc, status, strlen(out), out, err, want_err);
    assert_int_equal(rc, status);
    assert_string_equal(out, want_out);
    assert_string_equal(err, want_err);
    free(out);
    free(err);
}

/* A pipeline text or an expected message, formatted (freed by the caller). */
static char *text_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *text_of(const char *fmt, ...)
{
    char *p = malloc(4096);
    assert_non_null(p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, 4096, fmt, ap);
    va_end(ap);
    return p;
}

/* ---- gzip: lines() ------------------------------------------------------------------------ */

/* Text of n lines "NNNNNN:xxxxxxxx\n" (16 bytes) with pseudo-random hex, so it compresses only
 * about 2:1 and the compressed stream spans many reads. */
static char *many_lines(size_t n)
{
    char *t = malloc(n * 16 + 1);
    assert_non_null(t);
    uint64_t x = 88172645463325252ull; /* xorshift64 */
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        char line[40];
        int w = snprintf(line, sizeof line, "%06zu:%08" PRIx32 "\n", i, (uint32_t)(x >> 32));
        assert_int_equal(w, 16);
        memcpy(t + i * 16, line, 16);
    }
    t[n * 16] = '\0';
    return t;
}

static void test_gzip_lines(void **state)
{
    (void)state;
    char *a = path_of("gz-lines/a.txt");
    char *b = path_of("gz-lines/b.txt");
    char *dir = path_of("gz-lines");
    mkdir_p(dir);
    file_write(a, "alpha\nbeta\n\ngamma", 17);
    file_write(b, "one\ntwo\n", 8);
    char *agz = gzip_file(a);
    char *bgz = gzip_file(b);

    /* By content: a .gz file, a gzip file without the suffix, and plain files, in one glob. */
    char *p = text_of("lines(\"%s\")", agz);
    expect_run(p, 0, "alpha\nbeta\n\ngamma\n", "");
    free(p);
    char *renamed = path_of("gz-lines/c.data");
    size_t len;
    uint8_t *bytes = file_read(bgz, &len);
    file_write(renamed, bytes, len);
    free(bytes);
    p = text_of("lines(\"%s/*\")", dir);
    /* a.txt, a.txt.gz, b.txt, b.txt.gz, c.data (gzip of b) in name order. */
    expect_run(p, 0, "alpha\nbeta\n\ngamma\nalpha\nbeta\n\ngamma\none\ntwo\none\ntwo\none\ntwo\n",
               "");
    free(p);

    /* Several members concatenated read as one stream: a's last line runs into b's first. */
    char *multi = path_of("gz-multi.gz");
    size_t la, lb;
    uint8_t *ga = file_read(agz, &la), *gb = file_read(bgz, &lb);
    uint8_t *cat = malloc(la + lb + la);
    memcpy(cat, ga, la);
    memcpy(cat + la, gb, lb);
    memcpy(cat + la + lb, ga, la);
    file_write(multi, cat, la + lb + la);
    p = text_of("lines(\"%s\")", multi);
    expect_run(p, 0, "alpha\nbeta\n\ngammaone\ntwo\nalpha\nbeta\n\ngamma\n", "");
    free(p);

    /* Damage: a bad block type in the first deflate block (right after the 10-byte header). */
    char *bad = path_of("gz-bad-block.gz");
    memcpy(cat, gb, lb);
    cat[10] |= 0x06;
    file_write(bad, cat, lb);
    p = text_of("lines(\"%s\")", bad);
    char *e = text_of("sluice: run: %s: offset 0: corrupt gzip stream: invalid block type\n", bad);
    expect_run(p, 1, "", e);
    free(p);
    free(e);

    /* A wrong CRC-32 in the trailer: found when the member ends, after its 8 bytes. */
    char *crc = path_of("gz-bad-crc.gz");
    memcpy(cat, gb, lb);
    cat[lb - 8] ^= 0xff;
    file_write(crc, cat, lb);
    p = text_of("lines(\"%s\")", crc);
    e = text_of("sluice: run: %s: offset 8: corrupt gzip stream: incorrect data check\n", crc);
    expect_run(p, 1, "", e);
    free(p);
    free(e);

    /* Something other than a gzip member after the first one. */
    char *trail = path_of("gz-trailing.gz");
    memcpy(cat, gb, lb);
    memcpy(cat + lb, "garbage!", 8);
    file_write(trail, cat, lb + 8);
    p = text_of("lines(\"%s\")", trail);
    e = text_of("sluice: run: %s: offset 8: corrupt gzip stream: incorrect header check\n", trail);
    expect_run(p, 1, "one\ntwo\n", e);
    free(p);
    free(e);

    free(ga);
    free(gb);
    free(cat);
    free(a);
    free(b);
    free(agz);
    free(bgz);
    free(dir);
    free(renamed);
    free(multi);
    free(bad);
    free(crc);
    free(trail);
}

/* A large file streams through the fixed buffers; cut short, it yields exactly the lines whose
 * newline lies before the offset the error names. */
static void test_gzip_lines_large_and_truncated(void **state)
{
    (void)state;
    const size_t nlines = 120000;
    char *text = many_lines(nlines);
    size_t tlen = strlen(text);
    assert_int_equal(tlen, nlines * 16);
    char *path = path_of("big.txt");
    file_write(path, text, tlen);
    char *gz = gzip_file(path);
    size_t glen;
    uint8_t *g = file_read(gz, &glen);
    assert_true(glen > 256 * 1024); /* many refills of the 64 KiB compressed buffer */

    char *p = text_of("lines(\"%s\")", gz);
    expect_run(p, 0, text, "");
    free(p);

    /* Without its 8-byte trailer every line arrives, then the stream is truncated at its end. */
    char *cut = path_of("big-no-trailer.gz");
    file_write(cut, g, glen - 8);
    p = text_of("lines(\"%s\")", cut);
    char *e = text_of("sluice: run: %s: offset %zu: truncated gzip stream\n", cut, tlen);
    expect_run(p, 1, text, e);
    free(p);
    free(e);

    /* Cut in the middle. */
    char *half = path_of("big-half.gz");
    file_write(half, g, glen / 2);
    p = text_of("lines(\"%s\")", half);
    char *out = NULL, *err = NULL;
    assert_int_equal(sluice_run(p, NULL, NULL, &out, &err), 1);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "sluice: run: %s: offset ", half);
    assert_memory_equal(err, prefix, strlen(prefix));
    char *end = NULL;
    unsigned long long at = strtoull(err + strlen(prefix), &end, 10);
    assert_string_equal(end, ": truncated gzip stream\n");
    assert_true(at > tlen / 4 && at < tlen);
    size_t whole = 0; /* the bytes of the lines complete before the offset */
    for (size_t i = 0; i < at; i++)
        if (text[i] == '\n')
            whole = i + 1;
    assert_int_equal(strlen(out), whole);
    assert_memory_equal(out, text, whole);
    free(out);
    free(err);
    free(p);

    free(g);
    free(text);
    free(path);
    free(gz);
    free(cut);
    free(half);
}

/* ---- gzip: tfrecord() --------------------------------------------------------------------- */

static void write_records(const char *path, const char *const *recs, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(pipe_tfrecord_write(f, recs[i], strlen(recs[i])), 0);
    assert_int_equal(fclose(f), 0);
}

static void test_gzip_tfrecord(void **state)
{
    (void)state;
    /* A record larger than the 256 KiB read buffer takes the large-record path. */
    size_t big_len = 300 * 1024;
    char *big = malloc(big_len + 1);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (char)('a' + i % 26);
    big[big_len] = '\0';
    const char *recs[] = {"first", "", "third record", big, "last"};
    char *path = path_of("r.tfrecord");
    write_records(path, recs, 5);
    char *gz = gzip_file(path);

    size_t want_len = 5 + 1 + 1 + 1 + 12 + 1 + big_len + 1 + 4 + 1;
    char *want = malloc(want_len + 1);
    snprintf(want, want_len + 1, "first\n\nthird record\n%s\nlast\n", big);
    char *p = text_of("tfrecord(\"%s\")", gz);
    expect_run(p, 0, want, "");
    free(p);

    /* Plain and gzip files of one source, and a multi-member file. */
    char *multi = path_of("r-multi.tfrecord.gz");
    size_t glen;
    uint8_t *g = file_read(gz, &glen);
    uint8_t *two = malloc(2 * glen);
    memcpy(two, g, glen);
    memcpy(two + glen, g, glen);
    file_write(multi, two, 2 * glen);
    p = text_of("tfrecord(\"%s\", \"%s\", \"%s\")", path, gz, multi);
    char *out = NULL, *err = NULL;
    assert_int_equal(sluice_run(p, "--format", "count", &out, &err), 0);
    assert_string_equal(out, "20\n");
    free(out);
    free(err);
    free(p);

    /* TFRecord checksums are still verified inside a gzip file: a flipped data byte of the
     * third record (at offset 21 + 16 = 37) compressed by gzip is a bad data checksum. */
    char *flip = path_of("flip.tfrecord");
    const char *three[] = {"first", "", "third record"};
    write_records(flip, three, 3);
    size_t flen;
    uint8_t *f = file_read(flip, &flen);
    f[37 + 12] ^= 0x20;
    file_write(flip, f, flen);
    char *flipgz = gzip_file(flip);
    p = text_of("tfrecord(\"%s\")", flipgz);
    char *e = text_of("sluice: run: %s: offset 37: bad data checksum\n", flipgz);
    expect_run(p, 1, "first\n\n", e);
    free(p);
    free(e);

    /* A truncated gzip stream of TFRecords. */
    char *cut = path_of("r-cut.tfrecord.gz");
    file_write(cut, g, glen - 4);
    p = text_of("tfrecord(\"%s\")", cut);
    e = text_of("sluice: run: %s: offset %zu: truncated gzip stream\n", cut,
                (size_t)(5 * 16 + 5 + 12 + big_len + 4));
    expect_run(p, 1, want, e);
    free(p);
    free(e);

    free(f);
    free(g);
    free(two);
    free(big);
    free(want);
    free(path);
    free(gz);
    free(multi);
    free(flip);
    free(flipgz);
    free(cut);
}

/* A plain TFRecord file whose first record length begins with the bytes of the gzip magic
 * (1f 8b 08: a record of 0x088b1f bytes) is still read as TFRecords: its valid record header
 * says so. */
static void test_tfrecord_that_looks_like_gzip(void **state)
{
    (void)state;
    size_t n = 0x088b1f;
    char *rec = malloc(n + 1);
    assert_non_null(rec);
    memset(rec, 'z', n);
    rec[n] = '\0';
    const char *recs[] = {rec, "tail"};
    char *path = path_of("magic.tfrecord");
    write_records(path, recs, 2);
    size_t len;
    uint8_t *bytes = file_read(path, &len);
    assert_int_equal(bytes[0], 0x1f);
    assert_int_equal(bytes[1], 0x8b);
    assert_int_equal(bytes[2], 0x08);
    free(bytes);
    char *p = text_of("tfrecord(\"%s\") | skip(1)", path);
    expect_run(p, 0, "tail\n", "");
    free(p);
    free(rec);
    free(path);
}

/* ---- tar ---------------------------------------------------------------------------------- */

/* Writes sample k's members into dir: KEY.jpg ("\xff\xd8jpeg-K\n"), KEY.cls (K % 3) and KEY.json
 * (not asked for), KEY being the 6-digit k under prefix. */
static void write_sample(const char *dir, const char *prefix, int k, bool jpg, bool cls)
{
    char name[600], data[64];
    int n;
    char sub[600];
    snprintf(sub, sizeof sub, "%s/%s", dir, prefix);
    mkdir_p(sub);
    if (jpg) {
        snprintf(name, sizeof name, "%s/%s%06d.jpg", dir, prefix, k);
        n = snprintf(data, sizeof data, "\xff\xd8jpeg-%d\n", k);
        file_write(name, data, (size_t)n);
    }
    if (cls) {
        snprintf(name, sizeof name, "%s/%s%06d.cls", dir, prefix, k);
        n = snprintf(data, sizeof data, "%d", k % 3);
        file_write(name, data, (size_t)n);
    }
    snprintf(name, sizeof name, "%s/%s%06d.json", dir, prefix, k);
    n = snprintf(data, sizeof data, "{\"k\": %d}", k);
    file_write(name, data, (size_t)n);
}

/* The text line `sluice run` prints for sample k read as (cls, jpg). */
static void sample_line(char *buf, size_t len, int k)
{
    snprintf(buf, len, "(%d, \\xff\\xd8jpeg-%d\\n)\n", k % 3, k);
}

/* Packs samples [from, to) of dir (under prefix) into shard with Debian's tar, members in sample
 * order: jpg, json, cls. extra are options for tar (e.g. "-z", "--format=pax"), NULL for none. */
static void pack_shard(const char *shard, const char *dir, const char *prefix, int from, int to,
                       const char *extra)
{
    char *argv[80];
    char names[64][600];
    int n = 0, m = 0;
    argv[n++] = TAR;
    if (extra)
        argv[n++] = (char *)extra;
    argv[n++] = "-cf";
    argv[n++] = (char *)shard;
    argv[n++] = "-C";
    argv[n++] = (char *)dir;
    for (int k = from; k < to; k++) {
        static const char *const exts[] = {"jpg", "json", "cls"};
        for (int e = 0; e < 3; e++) {
            char path[700];
            snprintf(names[m], sizeof names[m], "%s%06d.%s", prefix, k, exts[e]);
            snprintf(path, sizeof path, "%s/%s", dir, names[m]);
            struct stat st;
            if (stat(path, &st) != 0)
                continue;
            argv[n++] = names[m++];
        }
    }
    argv[n] = NULL;
    assert_true(n < 80 && m < 64);
    run_ok(argv);
}

static void test_tar_run(void **state)
{
    (void)state;
    char *dir = path_of("wds");
    char *shards = path_of("shards");
    mkdir_p(shards);
    for (int k = 0; k < 12; k++)
        write_sample(dir, "", k, true, true);
    /* Four shards: plain GNU tar, pax (as Python's tarfile writes), gzip, and one more plain. */
    char *s0 = path_of("shards/s-0.tar");
    char *s1 = path_of("shards/s-1.tar");
    char *s2 = path_of("shards/s-2.tar.gz");
    char *s3 = path_of("shards/s-3.tar");
    pack_shard(s0, dir, "", 0, 3, NULL);
    pack_shard(s1, dir, "", 3, 6, "--format=pax");
    pack_shard(s2, dir, "", 6, 9, "-z");
    pack_shard(s3, dir, "", 9, 12, NULL);
    char *empty = path_of("shards/s-4.tar");
    file_write(empty, "", 0);

    char want[4096] = "", line[128];
    for (int k = 0; k < 12; k++) {
        sample_line(line, sizeof line, k);
        strcat(want, line);
    }
    char *p = text_of("tar(\"%s/s-*\", \"cls\", \"jpg\")", shards);
    expect_run(p, 0, want, "");
    free(p);

    /* One extension: scalar bytes elements; list form of patterns. */
    p = text_of("tar([\"%s\", \"%s\"], \"cls\")", s3, s0);
    expect_run(p, 0, "0\n1\n2\n0\n1\n2\n", "");
    free(p);
    p = text_of("tar(\"%s\", \"json\", \"cls\") | take(2)", s2);
    expect_run(p, 0, "({\"k\": 6}, 0)\n({\"k\": 7}, 1)\n", "");
    free(p);

    /* Keys with directories; a member of several megabytes. */
    char *dir2 = path_of("wds2");
    write_sample(dir2, "a/b.c/", 1, true, true);
    char big[700];
    snprintf(big, sizeof big, "%s/a/b.c/000001.jpg", dir2);
    size_t big_len = 3 * 1024 * 1024 + 17;
    char *data = malloc(big_len + 1);
    for (size_t i = 0; i < big_len; i++)
        data[i] = (char)('A' + i % 23);
    data[big_len] = '\0';
    file_write(big, data, big_len);
    write_sample(dir2, "a/b.c/", 2, true, true);
    char *s5 = path_of("nested.tar");
    pack_shard(s5, dir2, "a/b.c/", 1, 3, NULL);
    p = text_of("tar(\"%s\", \"jpg\", \"cls\")", s5);
    char *want2 = malloc(big_len + 64);
    snprintf(want2, big_len + 64, "(%s, 1)\n(\\xff\\xd8jpeg-2\\n, 2)\n", data);
    expect_run(p, 0, want2, "");
    free(p);
    free(want2);
    free(data);

    free(dir);
    free(dir2);
    free(shards);
    free(s0);
    free(s1);
    free(s2);
    free(s3);
    free(s5);
    free(empty);
}

static void test_tar_errors(void **state)
{
    (void)state;
    char *dir = path_of("wds-bad");
    write_sample(dir, "", 0, true, true);
    write_sample(dir, "", 1, true, true);
    write_sample(dir, "", 2, true, false); /* no .cls */
    write_sample(dir, "", 3, true, true);

    /* A missing member, after the samples before it. */
    char *miss = path_of("missing.tar");
    pack_shard(miss, dir, "", 0, 4, NULL);
    char *p = text_of("tar(\"%s\", \"cls\", \"jpg\")", miss);
    char want[512], line[128];
    sample_line(want, sizeof want, 0);
    sample_line(line, sizeof line, 1);
    strcat(want, line);
    char *e = text_of("sluice: run: %s: sample 000002: missing member .cls\n", miss);
    expect_run(p, 1, want, e);
    free(p);
    free(e);

    /* Cuts of a shard of samples 0 and 1 (GNU tar: members of 512-byte header and one block of
     * data each, jpg, json, cls per sample; the end-of-archive blocks at 6144). */
    char *whole = path_of("whole.tar");
    pack_shard(whole, dir, "", 0, 2, NULL);
    size_t len;
    uint8_t *t = file_read(whole, &len);
    assert_true(len >= 6144 + 1024);
    char first[128];
    sample_line(first, sizeof first, 0);

    /* Cut in the data of sample 1's jpg (its header at 3072): libarchive's own words follow. */
    char *cut = path_of("cut-data.tar");
    file_write(cut, t, 3072 + 512 + 5);
    p = text_of("tar(\"%s\", \"cls\", \"jpg\")", cut);
    char *out = NULL, *err = NULL;
    assert_int_equal(sluice_run(p, NULL, NULL, &out, &err), 1);
    assert_string_equal(out, first);
    char prefix[700];
    snprintf(prefix, sizeof prefix, "sluice: run: %s: offset 3072: member 000001.jpg: ", cut);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("stderr: %s", err);
    assert_true(strlen(err) > strlen(prefix) + 1);
    assert_non_null(strstr(err, "runcated"));
    free(out);
    free(err);
    free(p);
    /* The same when the damaged member is not asked for: the sample before it still arrives. */
    p = text_of("tar(\"%s\", \"cls\")", cut);
    assert_int_equal(sluice_run(p, NULL, NULL, &out, &err), 1);
    assert_string_equal(out, "0\n");
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("stderr: %s", err);
    free(out);
    free(err);
    free(p);

    /* Cut at a member boundary: no end-of-archive blocks. The last sample is never complete. */
    char *cut2 = path_of("cut-boundary.tar");
    file_write(cut2, t, 6144);
    p = text_of("tar(\"%s\", \"cls\", \"jpg\")", cut2);
    e = text_of("sluice: run: %s: offset 6144: truncated tar archive (no end-of-archive blocks)\n",
                cut2);
    expect_run(p, 1, first, e);
    free(p);
    free(e);

    /* A damaged header (its checksum no longer matches). */
    char *dmg = path_of("damaged.tar");
    memcpy(t + 3072, "XXXX", 4);
    file_write(dmg, t, len);
    p = text_of("tar(\"%s\", \"cls\", \"jpg\")", dmg);
    e = text_of("sluice: run: %s: offset 3072: Damaged tar archive\n", dmg);
    expect_run(p, 1, "", e);
    free(p);
    free(e);

    /* Not an archive at all. */
    char *junk = path_of("junk.tar");
    char text[2000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + i % 26);
    file_write(junk, text, sizeof text);
    p = text_of("tar(\"%s\", \"cls\")", junk);
    e = text_of("sluice: run: %s: Unrecognized archive format\n", junk);
    expect_run(p, 1, "", e);
    free(p);
    free(e);

    /* A truncated .tar.gz. */
    char *tgz = path_of("t.tar.gz");
    pack_shard(tgz, dir, "", 0, 2, "-z");
    uint8_t *z = file_read(tgz, &len);
    file_write(tgz, z, len / 2);
    p = text_of("tar(\"%s\", \"cls\")", tgz);
    e = text_of("sluice: run: %s: truncated gzip input\n", tgz);
    expect_run(p, 1, "", e);
    free(p);
    free(e);

    free(z);
    free(t);
    free(dir);
    free(miss);
    free(whole);
    free(cut);
    free(cut2);
    free(dmg);
    free(junk);
    free(tgz);
}

/* ---- The service -------------------------------------------------------------------------- */

static int setup_cluster(void **state)
{
    return (*state = cluster_new(NULL, NULL, 1, 2)) ? 0 : -1;
}

/* Four shards of five samples: "(cls, jpg)" lines, sorted, each repeated times times. */
static char *service_shards(char *glob, size_t globlen, int times)
{
    char *dir = path_of("svc");
    char *shards = path_of("svc-shards");
    mkdir_p(shards);
    for (int k = 0; k < 20; k++)
        write_sample(dir, "", k, true, true);
    for (int s = 0; s < 4; s++) {
        char *shard = path_of("svc-shards/%d.tar", s);
        pack_shard(shard, dir, "", 5 * s, 5 * s + 5, s == 2 ? "-z" : NULL);
        free(shard);
    }
    snprintf(glob, globlen, "%s/*.tar", shards);
    char *text = malloc(20 * 64 * (size_t)times + 1);
    text[0] = '\0';
    for (int k = 0; k < 20; k++)
        for (int r = 0; r < times; r++) {
            char line[128];
            sample_line(line, sizeof line, k);
            strcat(text, line);
        }
    char *sorted = sorted_lines(text);
    free(text);
    free(dir);
    free(shards);
    return sorted;
}

static void read_sorted(struct cluster *c, const char *want, const char *pipeline, const char *mode)
{
    cluster_expect_read(c, want, pipeline, "--mode", mode, "--timeout-ms", "60000", NULL);
}

static void test_service_tar(void **state)
{
    struct cluster *c = *state;
    char glob[600];
    char *once = service_shards(glob, sizeof glob, 1);
    char *p = text_of("tar(\"%s\", \"cls\", \"jpg\") | map(wait_us, 20000)", glob);

    /* distributed_epoch: the shards are the splits; every sample exactly once. */
    read_sorted(c, once, p, "distributed_epoch");
    /* parallel_epochs: each of the two workers reads all of it. */
    char *twice = service_shards(glob, sizeof glob, 2);
    read_sorted(c, twice, p, "parallel_epochs");

    /* A batch after a file source runs in the reader: 20 samples make 4 batches of 5. */
    char *b = text_of("tar(\"%s\", \"cls\", \"jpg\") | batch(5)", glob);
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", b, "--mode", "distributed_epoch",
                                 "--format", "count", NULL),
                     0);
    assert_string_equal(out, "4\n");
    free(out);
    free(err);

    /* The dispatcher shows the pipeline, and so does its journal. */
    assert_int_equal(cluster_cli(c, &out, &err, "status", NULL), 0);
    char *shown = text_of("tar(\"%s\", \"cls\", \"jpg\") | batch(5)\n", glob);
    assert_non_null(strstr(out, shown));
    free(out);
    free(err);
    char *const dump[] = {
        (char *)bin_path("sluice"), "journal", "dump", "--work-dir", c->work_dir, NULL};
    assert_int_equal(run_cmd(dump, 30000, &out, &err), 0);
    char *rec = text_of(" pipeline='tar(\"%s\", \"cls\", \"jpg\") | batch(5)'\n", glob);
    assert_non_null(strstr(out, rec));
    free(out);
    free(err);

    free(rec);
    free(shown);
    free(b);
    free(p);
    free(once);
    free(twice);
}

/* A missing member reaches the reader as the worker's exact message. */
static void test_service_missing_member(void **state)
{
    struct cluster *c = *state;
    char *dir = path_of("svc-miss");
    write_sample(dir, "", 0, true, true);
    write_sample(dir, "", 1, false, true);
    char *shard = path_of("svc-miss.tar");
    pack_shard(shard, dir, "", 0, 2, NULL);
    char *p = text_of("tar(\"%s\", \"cls\", \"jpg\")", shard);
    char *e = text_of("sluice: read: %s: sample 000001: missing member .jpg\n", shard);
    for (int i = 0; i < 2; i++) {
        char *out = NULL, *err = NULL;
        int rc =
            cluster_cli(c, &out, &err, "read", p, "--mode",
                        i ? "distributed_epoch" : "parallel_epochs", "--timeout-ms", "60000", NULL);
        assert_int_equal(rc, 1);
        assert_string_equal(err, e);
        free(out);
        free(err);
    }
    free(e);
    free(p);
    free(shard);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gzip_lines),
        cmocka_unit_test(test_gzip_lines_large_and_truncated),
        cmocka_unit_test(test_gzip_tfrecord),
        cmocka_unit_test(test_tfrecord_that_looks_like_gzip),
        cmocka_unit_test(test_tar_run),
        cmocka_unit_test(test_tar_errors),
        cmocka_unit_test_setup_teardown(test_service_tar, setup_cluster, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_service_missing_member, setup_cluster,
                                        cluster_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, tmp_teardown);
    return rc;
}
