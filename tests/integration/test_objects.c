/* s3:// and https:// sources against an S3-compatible server on 127.0.0.1 (s3rver, filled by the
 * AWS SDK for JavaScript) behind the tests' relay (tests/npm/s3_relay.mjs), which checks SigV4
 * signatures and If-Match as S3 does, counts requests and injects faults.
 *
 * lines, tfrecord and jsonl over s3:// read element for element what the same files on local disk
 * read (gzip included, global_shuffle included); an object of 40 ranges is read with two GETs in
 * flight, never more; distributed_epoch on 3 workers delivers each element exactly once after one
 * listing walk; parquet (footers read by the dispatcher when it plans, row groups by the workers)
 * and tar shards read the same as their local copies; a checkpointed read killed twice resumes to
 * each element exactly once; 12 workers over 300 objects cause the listing pages of one walk and
 * one GET per object; 5 % 503s, 1 % resets mid-body and a 2 s stall lose and duplicate nothing;
 * https with the tests' CA reads the same; and the refusals are one-line errors: outside the data
 * roots, a wrong secret key (the server's 403 text), a missing object, a bad scheme, an object
 * that is not Parquet or not tar, an object replaced while it is read. A snapshot saved by
 * `sluice snapshot save` and uploaded, and a Megatron dataset of the independent writer, read
 * over s3:// what their local copies read (sluice run, distributed_epoch, parallel_epochs), and a
 * missing chunk or .bin, a prefix outside the roots and a chunk or .bin replaced after planning
 * are one-line errors naming the object. `sluice snapshot save` into s3:// on 2 workers puts the
 * chunk objects, then snapshot.json and manifest.json (the relay's order of PUTs), and reads back
 * the pipeline's elements; saves outside the data roots, into a missing bucket or of a failing
 * pipeline are refused or fail with one-line errors (a FAILED object for the last). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pipeline/files.h"
#include "lib/clock.h"
#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/proc.h"
#include "lib/scrape.h"
#include "lib/tmp.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define LINE_FILES 6
#define LINES 20000
#define TOTAL_LINES (LINE_FILES * LINES + LINES) /* and one gzip file */
#define RUN_MS 60000
/* Parquet files of the independent writer (tests/npm/parquet_cluster_files.mjs). */
#define PQ_FILES 3
#define PQ_GROUPS 3
#define PQ_ROWS 200
/* Small objects for many workers; listed in pages of MANY_PAGE keys. */
#define MANY 300
#define MANY_PAGE 100
#define MANY_WORKERS 12
/* The snapshot saved for the snapshot("s3://...") tests: the elements of range(SNAP_ELEMS), in
 * chunks of SNAP_SPLIT (19 chunks; the default split of a range this small, 16 elements, would make
 * 188, and the relays put every object of the three copies one by one at their start). */
#define SNAP_ELEMS 3000
#define SNAP_SPLIT "160"
/* The Megatron dataset for the megatron("s3://...") tests. */
#define MG_DOCS 600

static char data[512], certs[600];
static struct proc relay, relay_tls;
static char endpoint[200], endpoint_tls[200];

/* A client killed mid-read (test_resumed) is released after 3 s. */
static const char *const dispatcher_flags[] = {"--worker-timeout-ms",
                                               "1000",
                                               "--client-timeout-ms",
                                               "3000",
                                               "--log-level",
                                               "warn",
                                               "--data-root",
                                               NULL /* set below */,
                                               NULL};
static const char *dispatcher_args[9];
static const char *worker_args[] = {"--data-root", NULL, NULL};
static char root_url[] = "s3://bkt/data";

static void mkdirs(const char *path)
{
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static void write_data(void)
{
    char dir[600], path[700], line[64];
    snprintf(data, sizeof data, "%s/s3", tmp_dir());
    snprintf(dir, sizeof dir, "%s/bkt/data", data);
    mkdirs(dir);
    for (int f = 0; f < LINE_FILES; f++) {
        snprintf(path, sizeof path, "%s/lines-%d.txt", dir, f);
        FILE *o = fopen(path, "w");
        assert_non_null(o);
        for (int i = 0; i < LINES; i++)
            fprintf(o, "%d\n", f * LINES + i);
        fclose(o);
    }
    snprintf(path, sizeof path, "%s/lines-%d.txt.gz", dir, LINE_FILES);
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    for (int i = 0; i < LINES; i++)
        gzprintf(g, "%d\n", LINE_FILES * LINES + i);
    gzclose(g);
    for (int f = 0; f < 3; f++) {
        snprintf(path, sizeof path, "%s/rec-%d.tfrecord", dir, f);
        FILE *o = fopen(path, "wb");
        assert_non_null(o);
        for (int i = 0; i < 100 + f * 50; i++) {
            int n = snprintf(line, sizeof line, "record %d.%d", f, i);
            assert_int_equal(pipe_tfrecord_write(o, line, (size_t)n), 0);
        }
        fclose(o);
        snprintf(path, sizeof path, "%s/js-%d.jsonl", dir, f);
        o = fopen(path, "w");
        assert_non_null(o);
        for (int i = 0; i < 50; i++)
            fprintf(o, "{\"id\": %d, \"text\": \"doc %d of %d\", \"v\": [%d, %d]}\n", i, i, f, i,
                    f);
        fclose(o);
    }
    /* Parquet files of an independent writer. */
    snprintf(dir, sizeof dir, "%s/bkt/data/pq", data);
    char files[16], groups[16], rows[16];
    snprintf(files, sizeof files, "%d", PQ_FILES);
    snprintf(groups, sizeof groups, "%d", PQ_GROUPS);
    snprintf(rows, sizeof rows, "%d", PQ_ROWS);
    char *pq[] = {SLUICE_NODE, SLUICE_SOURCE_DIR "/tests/npm/parquet_cluster_files.mjs",
                  dir,         files,
                  groups,      rows,
                  NULL};
    assert_int_equal(run_cmd(pq, 60000, NULL, NULL), 0);
    /* WebDataset shards packed by tar(1), one of them gzip-compressed. */
    snprintf(dir, sizeof dir, "%s/samples", data);
    mkdirs(dir);
    for (int k = 0; k < 40; k++) {
        char name[32], body[64];
        snprintf(name, sizeof name, "s%04d.txt", k);
        snprintf(body, sizeof body, "sample %d\n", k);
        file_write_in(dir, name, body);
        snprintf(name, sizeof name, "s%04d.cls", k);
        snprintf(body, sizeof body, "%d", k % 5);
        file_write_in(dir, name, body);
    }
    snprintf(path, sizeof path, "%s/bkt/data/tar", data);
    mkdirs(path);
    for (int s = 0; s < 4; s++) {
        char cmd[1600];
        int n = snprintf(cmd, sizeof cmd,
                         "/usr/bin/tar %s -cf '%s/bkt/data/tar/shard-%d.tar%s' -C '%s'",
                         s == 2 ? "-z" : "", data, s, s == 2 ? ".gz" : "", dir);
        for (int k = 10 * s; k < 10 * s + 10; k++)
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, " s%04d.txt s%04d.cls", k, k);
        assert_int_equal(system(cmd), 0);
    }
    /* Many small objects, for many workers. */
    snprintf(dir, sizeof dir, "%s/bkt/data/many", data);
    mkdirs(dir);
    for (int k = 0; k < MANY; k++) {
        char name[32], body[64];
        snprintf(name, sizeof name, "o-%04d.txt", k);
        snprintf(body, sizeof body, "%d\n%d\n", 2 * k, 2 * k + 1);
        file_write_in(dir, name, body);
    }
    /* Outside the root "s3://bkt/data", though its name begins alike. */
    snprintf(dir, sizeof dir, "%s/bkt/dataX", data);
    mkdirs(dir);
    file_write_in(dir, "x.txt", "secret\n");
    /* An object read slowly while it is replaced: 40 ranges of 4 KiB. */
    snprintf(dir, sizeof dir, "%s/bkt/big", data);
    mkdirs(dir);
    snprintf(path, sizeof path, "%s/big.txt", dir);
    FILE *o = fopen(path, "w");
    assert_non_null(o);
    for (int i = 0; i < 20000; i++)
        fprintf(o, "%07d\n", i);
    fclose(o);
    /* An object replaced after it is listed and before it is read. */
    snprintf(dir, sizeof dir, "%s/bkt/data/mut", data);
    mkdirs(dir);
    file_write_in(dir, "v.txt", "the first version\n");
    /* A bucket anyone may read, for plain https:// URLs. */
    snprintf(dir, sizeof dir, "%s/public", data);
    mkdirs(dir);
    file_write_in(dir, "p.txt", "alpha\nbeta\ngamma\n");
}

/* A snapshot saved by `sluice snapshot save` (a cluster of its own, without data roots) to
 * DIR/bkt/data/snap, uploaded with the rest, and copies of it: snapmiss without its chunk 1,
 * snapmut whose last chunk test_snapshot_changed replaces. A Megatron dataset of the
 * independent writer in DIR/bkt/data/mg/ds.{idx,bin}, and mgmiss/ds.idx without its .bin. */
static void write_snapshot_megatron(void)
{
    char dir[700], cmd[4096];
    snprintf(dir, sizeof dir, "%s/bkt/data/snap", data);
    struct cluster c;
    memset(&c, 0, sizeof c);
    assert_int_equal(cluster_start_dispatcher(&c, 0, 0), 0);
    assert_true(cluster_add_worker(&c) >= 0);
    assert_true(cluster_add_worker(&c) >= 0);
    char pl[64];
    snprintf(pl, sizeof pl, "range(%d)", SNAP_ELEMS);
    char *out = cluster_run(&c, 0, NULL, "register", pl, "--dataset-id", "nums", "--split-size",
                            SNAP_SPLIT, NULL);
    free(out);
    out = cluster_run(&c, 0, NULL, "snapshot", "save", "--dataset-id", "nums", "--path", dir,
                      "--timeout-ms", "60000", NULL);
    printf("    %s", out);
    free(out);
    assert_int_equal(cluster_stop(&c), 0);
    snprintf(cmd, sizeof cmd,
             "cp -r '%s' '%s/bkt/data/snapmiss' && rm '%s/bkt/data/snapmiss/chunks/"
             "chunk-000000000001' && cp -r '%s' '%s/bkt/data/snapmut'",
             dir, data, data, dir, data);
    assert_int_equal(system(cmd), 0);
    snprintf(dir, sizeof dir, "%s/bkt/data/mg", data);
    mkdirs(dir);
    char prefix[800], docs[16];
    snprintf(prefix, sizeof prefix, "%s/ds", dir);
    snprintf(docs, sizeof docs, "%d", MG_DOCS);
    char *argv[] = {"/usr/bin/python3",
                    SLUICE_SOURCE_DIR "/tests/megatron/write_megatron.py",
                    prefix,
                    "uint16",
                    docs,
                    "5",
                    NULL};
    assert_int_equal(run_cmd(argv, 60000, NULL, NULL), 0);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/bkt/data/mgmiss' && cp '%s.idx' '%s/bkt/data/mgmiss/'",
             data, prefix, data);
    assert_int_equal(system(cmd), 0);
}

/* The number of chunk files of the local snapshot DIR/bkt/data/snap. */
static int snapshot_chunks(void)
{
    char dir[700];
    snprintf(dir, sizeof dir, "%s/bkt/data/snap/chunks", data);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, "chunk-", 6) == 0;
    closedir(d);
    return n;
}

/* Spawns a relay; await_relay waits for it. Each puts every object of the data dir into its own
 * s3rver before it listens (seconds), so the two are started together. */
static int spawn_relay(struct proc *p, bool tls)
{
    char cert[700], key[700];
    snprintf(cert, sizeof cert, "%s/node.pem", certs);
    snprintf(key, sizeof key, "%s/node.key", certs);
    char *argv[] = {SLUICE_NODE, SLUICE_SOURCE_DIR "/tests/npm/s3_relay.mjs",
                    data,        "S3RVER",
                    "S3RVER",    tls ? "--tls" : NULL,
                    cert,        key,
                    NULL};
    return proc_spawn(p, argv);
}

static int await_relay(struct proc *p, char *addr_out, size_t len, bool tls)
{
    if (proc_await_listening(p, 60000) < 0)
        return -1;
    const char *port = strrchr(p->addr, ':');
    snprintf(addr_out, len, "%s://%s%s", tls ? "https" : "http", tls ? "localhost" : "127.0.0.1",
             port ? port : ":0");
    return 0;
}

static int setup(void **state)
{
    write_data();
    write_snapshot_megatron();
    snprintf(certs, sizeof certs, "%s/certs", tmp_dir());
    char *mk[] = {SLUICE_SOURCE_DIR "/tests/integration/make_certs.sh", certs, NULL};
    if (run_cmd(mk, 60000, NULL, NULL) != 0)
        return -1;
    if (spawn_relay(&relay, false) < 0 || spawn_relay(&relay_tls, true) < 0 ||
        await_relay(&relay, endpoint, sizeof endpoint, false) < 0 ||
        await_relay(&relay_tls, endpoint_tls, sizeof endpoint_tls, true) < 0) {
        proc_stop(&relay, SIGKILL, 5000);
        proc_stop(&relay_tls, SIGKILL, 5000);
        return -1;
    }
    char ca[700];
    snprintf(ca, sizeof ca, "%s/ca.pem", certs);
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    setenv("AWS_ENDPOINT_URL", endpoint, 1);
    setenv("AWS_CA_BUNDLE", ca, 1);
    /* Many ranges per object, so faults and resumption happen inside objects. */
    setenv("SLUICE_OBJECT_RANGE_BYTES", "4096", 1);
    setenv("SLUICE_OBJECT_RETRY_MS", "20000", 1);
    memcpy(dispatcher_args, dispatcher_flags, sizeof dispatcher_flags);
    dispatcher_args[7] = root_url;
    worker_args[1] = root_url;
    struct cluster *c = cluster_new(dispatcher_args, worker_args, 1, 0);
    if (!c)
        return -1;
    cluster_add_workers(c, 3);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    int rc = cluster_teardown(state);
    proc_stop(&relay, SIGTERM, 5000);
    proc_stop(&relay_tls, SIGTERM, 5000);
    return rc;
}

/* `sluice run PIPELINE`: stdout (malloc'd), stderr in *err when err is not NULL. */
static char *run(const char *pipeline, int want_rc, char **err)
{
    char *argv[] = {(char *)bin_path("sluice"), "run", (char *)pipeline, NULL};
    char *out = NULL, *e = NULL;
    int rc = run_cmd(argv, RUN_MS, &out, &e);
    if (rc != want_rc)
        fprintf(stderr, "sluice run %s: exit %d, want %d\n%s", pipeline, rc, want_rc, e);
    assert_int_equal(rc, want_rc);
    if (err)
        *err = e;
    else
        free(e);
    return out;
}

/* A relay's counters (GET /__relay/stats), or a control call. */
static char *relay_call(const char *base, const char *what, bool post)
{
    char url[400];
    snprintf(url, sizeof url, "%s/__relay/%s", base, what);
    char *argv[] = {"/usr/bin/curl",       "-sS", "--max-time", "10", "-X",
                    post ? "POST" : "GET", url,   NULL};
    char *out = NULL;
    assert_int_equal(run_cmd(argv, 15000, &out, NULL), 0);
    return out;
}

static long stat_of(const char *json, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *at = strstr(json, key);
    assert_non_null(at);
    return strtol(at + strlen(key), NULL, 10);
}

/* The pipeline text fmt with its "@" replaced by where. */
static char *pipeline(const char *fmt, const char *where)
{
    const char *at = strchr(fmt, '@');
    assert_non_null(at);
    char *p = NULL;
    assert_true(asprintf(&p, "%.*s%s%s", (int)(at - fmt), fmt, where, at + 1) > 0);
    return p;
}

/* The same pipeline over s3:// and over the local copy: the same text. */
static void expect_same(const char *fmt)
{
    char local[700];
    snprintf(local, sizeof local, "%s/bkt/data", data);
    char *ps = pipeline(fmt, root_url), *pl = pipeline(fmt, local);
    char *a = run(ps, 0, NULL), *b = run(pl, 0, NULL);
    assert_true(strlen(b) > 0);
    assert_string_equal(a, b);
    free(a);
    free(b);
    free(ps);
    free(pl);
}

static void test_same_as_local(void **state)
{
    (void)state;
    expect_same("lines(\"@/lines-*\")");
    expect_same("lines(\"@/lines-*\") | global_shuffle(7)");
    expect_same("tfrecord(\"@/rec-*.tfrecord\")");
    expect_same("jsonl(\"@/js-*.jsonl\", \"text\", \"id\", \"v\")");
}

/* parquet() over s3:// (footers and column chunks read at random offsets) and tar() over s3://
 * (libarchive fed block by block): the same elements as the local files. */
static void test_parquet_tar_same_as_local(void **state)
{
    (void)state;
    expect_same("parquet(\"@/pq/*.parquet\", \"id\", \"name\", \"score=-1\")");
    expect_same("parquet(\"@/pq/*.parquet\", \"name\", \"score=-1\") | global_shuffle(3)");
    expect_same("tar(\"@/tar/shard-*\", \"txt\", \"cls\")");
    expect_same("tar(\"@/tar/shard-*\", \"cls\", \"txt\") | global_shuffle(5)");
}

/* An object of 40 ranges read front to back: the same lines as its local copy, with three GETs
 * of it in flight at once and never more (its size known from the listing, the first range is
 * asked for with the two the read-ahead holds). The relay holds each GET 150 ms, as a distant
 * store would, so the three overlap however slowly this machine runs the reader. */
static void test_read_ahead(void **state)
{
    (void)state;
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    s = relay_call(endpoint, "faults?latency=150", true);
    free(s);
    char local[700];
    snprintf(local, sizeof local, "lines(\"%s/bkt/big/big.txt\")", data);
    char *a = run("lines(\"s3://bkt/big/big.txt\")", 0, NULL), *b = run(local, 0, NULL);
    assert_true(strlen(b) == 20000 * 8);
    assert_string_equal(a, b);
    free(a);
    free(b);
    s = relay_call(endpoint, "stats", false);
    printf("    one object of 40 ranges: relay %s\n", s);
    assert_int_equal(stat_of(s, "get"), 40);
    assert_int_equal(stat_of(s, "inflight"), 3);
    free(s);
    s = relay_call(endpoint, "reset", true);
    free(s);
}

/* Sorted lines of text, for comparing multisets. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *sorted(const char *text)
{
    char *copy = strdup(text);
    size_t n = 0, cap = 1024;
    char **lines = malloc(cap * sizeof *lines);
    for (char *s = strtok(copy, "\n"); s; s = strtok(NULL, "\n")) {
        if (n == cap)
            lines = realloc(lines, (cap *= 2) * sizeof *lines);
        lines[n++] = s;
    }
    qsort(lines, n, sizeof *lines, cmp_str);
    size_t len = strlen(text) + 2, at = 0;
    char *out = calloc(1, len);
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(out + at, len - at, "%s\n", lines[i]);
    free(lines);
    free(copy);
    return out;
}

static void expect_distributed(struct cluster *c, const char *fmt)
{
    char local[700];
    snprintf(local, sizeof local, "%s/bkt/data", data);
    char *ps = pipeline(fmt, root_url), *pl = pipeline(fmt, local);
    char *want = run(pl, 0, NULL);
    char *got = cluster_run(c, 0, NULL, "read", ps, "--mode", "distributed_epoch", NULL);
    char *a = sorted(got), *b = sorted(want);
    assert_string_equal(a, b);
    free(a);
    free(b);
    free(got);
    free(want);
    free(ps);
    free(pl);
}

/* distributed_epoch on 3 workers: each element exactly once, one listing walk for the job. */
static void test_distributed(void **state)
{
    struct cluster *c = *state;
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    char *p = pipeline("lines(\"@/lines-*\")", root_url);
    char *out = cluster_run(c, 0, NULL, "read", p, "--mode", "distributed_epoch", NULL);
    struct tally t = tally_range(out, TOTAL_LINES);
    print_tally("distributed_epoch over s3://", t);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    free(out);
    free(p);
    s = relay_call(endpoint, "stats", false);
    /* One page lists the 7 files: one walk, by the dispatcher, whatever the workers. */
    assert_int_equal(stat_of(s, "list"), 1);
    free(s);
    expect_distributed(c, "tfrecord(\"@/rec-*.tfrecord\")");
    expect_distributed(c, "jsonl(\"@/js-*.jsonl\", \"id\", \"text\")");
    /* A split of a parquet source is a row group: the dispatcher reads the objects' footers. */
    expect_distributed(c, "parquet(\"@/pq/*.parquet\", \"id\", \"name\")");
    expect_distributed(c, "tar(\"@/tar/shard-*\", \"txt\", \"cls\")");
}

/* A checkpointed distributed_epoch read over s3:// killed twice and resumed: each element
 * exactly once. */
static void test_resumed(void **state)
{
    struct cluster *c = *state;
    char ck[600], out[600];
    snprintf(ck, sizeof ck, "%s/objects.ck", tmp_dir());
    snprintf(out, sizeof out, "%s/objects.out", tmp_dir());
    char *p = pipeline("lines(\"@/lines-[012].txt\") | map(wait_us, 60)", root_url);
    /* The lines of 0 to 59,999 and their newlines: 348,890 bytes printed. */
    char *text = cluster_resumed_read(c, p, NULL, "2000", ck, out, 348890, 2, 120000);
    struct tally t = tally_range(text, 3 * LINES);
    print_tally("resumed twice over s3://", t);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    free(text);
    free(p);
}

/* 12 workers over 300 objects listed in pages of 100: every element once, and the relay counts
 * the 3 listing pages of one walk (the dispatcher's), however many workers. */
static void test_many_workers(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, MANY_WORKERS - 3);
    cluster_wait_registered(c);
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    char q[64];
    snprintf(q, sizeof q, "pagesize?n=%d", MANY_PAGE);
    s = relay_call(endpoint, q, true);
    free(s);
    char *p = pipeline("lines(\"@/many/o-*.txt\")", root_url);
    char *out = cluster_run(c, 0, NULL, "read", p, "--mode", "distributed_epoch", NULL);
    struct tally t = tally_range(out, 2 * MANY);
    print_tally("12 workers, 300 objects", t);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    free(out);
    free(p);
    s = relay_call(endpoint, "stats", false);
    printf("    relay: %s\n", s);
    assert_int_equal(stat_of(s, "list"), MANY / MANY_PAGE);
    assert_int_equal(stat_of(s, "get"), MANY);
    free(s);
    s = relay_call(endpoint, "reset", true);
    free(s);
}

/* parallel_epochs on 3 workers: each worker's copy complete, after one listing walk by the
 * dispatcher and none by the workers. */
static void test_parallel_listed_once(void **state)
{
    struct cluster *c = *state;
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    char *p = pipeline("lines(\"@/lines-*\")", root_url);
    char *out = cluster_run(c, 0, NULL, "read", p, "--mode", "parallel_epochs", NULL);
    char *got = sorted(out), *want = expected_range(TOTAL_LINES, 3);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    s = relay_call(endpoint, "stats", false);
    printf("    parallel_epochs, 3 workers: relay %s\n", s);
    assert_int_equal(stat_of(s, "list"), 1);
    free(s);
    free(p);
}

/* An object replaced between the dispatcher's listing and a worker's read: an error naming it
 * (the worker's first request carries the listed ETag). */
static void test_changed_after_listing(void **state)
{
    struct cluster *c = *state;
    char *id = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &id, &err, "register", "lines(\"s3://bkt/data/mut/v.txt\")",
                                 "--dataset-id", "mutable", NULL),
                     0);
    free(err);
    id[strcspn(id, "\n")] = '\0';
    assert_string_equal(id, "mutable");
    char *s = relay_call(endpoint, "replace?key=bkt/data/mut/v.txt", true);
    free(s);
    char *out = cluster_run(c, 1, &err, "read", "--dataset-id", id, NULL);
    printf("    %s", err);
    assert_non_null(strstr(err, "s3://bkt/data/mut/v.txt: changed since it was listed ("));
    assert_null(strstr(err, "#object="));
    free(err);
    free(out);
    /* Registered again under its id, the pipeline lists objects other than its jobs read. */
    out = cluster_run(c, 1, &err, "register", "lines(\"s3://bkt/data/mut/v.txt\")", "--dataset-id",
                      "mutable", NULL);
    assert_non_null(strstr(err, "dataset 'mutable' already exists with the same pipeline but "
                                "another definition: its deterministic setting differs, or the "
                                "objects its URLs list changed since it was registered (their "
                                "sizes or ETags)"));
    free(err);
    free(out);
    free(id);
}

/* 5 % 503s, 1 % resets mid-body and one 2 s stall: nothing lost, nothing duplicated. */
static void test_faults(void **state)
{
    struct cluster *c = *state;
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    s = relay_call(endpoint, "faults?p503=0.05&preset=0.01&stall=2000&seed=11", true);
    free(s);
    char *p = pipeline("lines(\"@/lines-*\")", root_url);
    char *out = cluster_run(c, 0, NULL, "read", p, "--mode", "distributed_epoch", NULL);
    struct tally t = tally_range(out, TOTAL_LINES);
    print_tally("with faults", t);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    free(out);
    free(p);
    s = relay_call(endpoint, "stats", false);
    printf("    relay: %s\n", s);
    assert_int_equal(stat_of(s, "stall"), 1);
    assert_true(stat_of(s, "s503") > 0);
    free(s);
    s = relay_call(endpoint, "reset", true);
    free(s);
}

/* The message of a failed `sluice run`, its only line. */
static void expect_error(const char *pipeline_text, const char *want)
{
    char *err = NULL;
    char *out = run(pipeline_text, 1, &err);
    if (strcmp(err, want) != 0)
        fprintf(stderr, "got:  %swant: %s", err, want);
    assert_string_equal(err, want);
    free(err);
    free(out);
}

static void test_refusals(void **state)
{
    struct cluster *c = *state;
    /* Outside the cluster's data roots: refused at registration. */
    char *err = NULL;
    char *out = cluster_run(c, 1, &err, "read", "lines(\"s3://bkt/dataX/x.txt\")", NULL);
    assert_non_null(strstr(err, "lines(\"s3://bkt/dataX/x.txt\"): s3://bkt/dataX/x.txt is outside "
                                "the data roots (s3://bkt/data)"));
    free(err);
    free(out);
    out = cluster_run(c, 1, &err, "read", "lines(\"s3://bkt/data*/x.txt\")", NULL);
    assert_non_null(strstr(err, "is outside the data roots (s3://bkt/data)"));
    free(err);
    free(out);
    /* A missing object, a missing bucket, a bad scheme. */
    expect_error("lines(\"s3://bkt/data/none.txt\")",
                 "sluice: open: no object matches 's3://bkt/data/none.txt'\n");
    expect_error("lines(\"s3://nobucket/a*.txt\")",
                 "sluice: open: s3://nobucket/a*.txt: HTTP 404: NoSuchBucket: The specified "
                 "bucket does not exist\n");
    expect_error("lines(\"ftp://bkt/data/x.txt\")",
                 "sluice: open: ftp://bkt/data/x.txt: unsupported URL scheme 'ftp' (expected "
                 "s3://, https:// or http://)\n");
    /* A wrong secret key: the server's 403, in one line. */
    setenv("AWS_SECRET_ACCESS_KEY", "wrong", 1);
    expect_error("lines(\"s3://bkt/data/lines-0.txt\")",
                 "sluice: open: s3://bkt/data/lines-0.txt: HTTP 403: SignatureDoesNotMatch: The "
                 "request signature we calculated does not match the signature you provided. "
                 "Check your key and signing method.\n");
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    /* An object that is not Parquet, and one that is no tar archive: named without the pin. */
    expect_error("parquet(\"s3://bkt/data/lines-0.txt\")",
                 "sluice: open: s3://bkt/data/lines-0.txt: not a Parquet file (no PAR1 magic)\n");
    expect_error("tar(\"s3://bkt/data/js-0.jsonl\", \"txt\")",
                 "sluice: run: s3://bkt/data/js-0.jsonl: Unrecognized archive format\n");
}

/* Starts argv (a slow read of an object) and replaces BUCKET/KEY key once the relay has
 * counted gets object GETs since the start and, with read, answered one GET of key itself whole:
 * the reader has listed what it reads and is reading it (key's ETag pinned by that answer),
 * however slowly this machine started the process, and has seconds of reading left. */
static void spawn_then_replace(struct proc *p, char **argv, long gets, const char *key, bool read)
{
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    assert_int_equal(proc_spawn(p, argv), 0);
    long long until = now_ms() + RUN_MS;
    long seen = 0, answered = 0;
    /* With read, key must have been read from once (its ETag pinned), or the reader could take
     * the new version, whole or half written, for the one it opens. */
    char answered_key[300];
    snprintf(answered_key, sizeof answered_key, "\"/%s\":", key);
    while ((seen < gets || (read && answered < 1)) && now_ms() < until) {
        usleep(20 * 1000);
        s = relay_call(endpoint, "stats", false);
        seen = stat_of(s, "get");
        const char *at = strstr(s, "\"answered\":");
        assert_non_null(at);
        at = strstr(at, answered_key);
        answered = at ? strtol(at + strlen(answered_key), NULL, 10) : 0;
        free(s);
    }
    assert_true(seen >= gets);
    assert_true(!read || answered >= 1);
    char q[300];
    snprintf(q, sizeof q, "replace?key=%s", key);
    s = relay_call(endpoint, q, true);
    free(s);
}

/* An object replaced while it is read: an error naming it, never a mix of versions. */
static void test_changed(void **state)
{
    (void)state;
    struct proc p;
    char *argv[] = {(char *)bin_path("sluice"),
                    "run",
                    "lines(\"s3://bkt/big/big.txt\") | map(wait_us, 200)",
                    "--format",
                    "count",
                    NULL};
    spawn_then_replace(&p, argv, 1, "bkt/big/big.txt", true);
    assert_int_equal(proc_wait(&p, RUN_MS), 1);
    char *log = read_text_file(p.log);
    printf("    %s", log);
    assert_non_null(strstr(log, "sluice: run: s3://bkt/big/big.txt: offset "));
    assert_non_null(strstr(log, ": changed while being read (ETag \""));
    assert_non_null(strstr(log, "HTTP 412: PreconditionFailed: At least one of the pre-conditions "
                                "you specified did not hold\n"));
    free(log);
}

/* s3:// through an https endpoint whose certificate the tests' CA signed, and a plain https://
 * URL; without the CA, the certificate is refused. */
static void test_https(void **state)
{
    (void)state;
    setenv("AWS_ENDPOINT_URL", endpoint_tls, 1);
    expect_same("lines(\"@/lines-*\")");
    char *p = NULL;
    assert_true(asprintf(&p, "lines(\"%s/public/p.txt\")", endpoint_tls) > 0);
    char *out = run(p, 0, NULL);
    assert_string_equal(out, "alpha\nbeta\ngamma\n");
    free(out);
    char *ca = strdup(getenv("AWS_CA_BUNDLE"));
    unsetenv("AWS_CA_BUNDLE");
    char *err = NULL;
    out = run(p, 1, &err);
    printf("    %s", err);
    assert_non_null(
        strstr(err, "/public/p.txt: SSL peer certificate or SSH remote key was not OK"));
    assert_ptr_equal(strchr(err, '\n') + 1, err + strlen(err)); /* one line */
    free(err);
    free(out);
    free(p);
    setenv("AWS_CA_BUNDLE", ca, 1);
    free(ca);
    setenv("AWS_ENDPOINT_URL", endpoint, 1);
}

/* snapshot("s3://...") of a snapshot saved by `sluice snapshot save` and uploaded: element for
 * element what the local directory reads, in sluice run, distributed_epoch on 3 workers (exactly
 * once) and parallel_epochs; its chunks listed in one walk, and never by a worker. */
static void test_snapshot(void **state)
{
    struct cluster *c = *state;
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    expect_same("snapshot(\"@/snap\")");
    s = relay_call(endpoint, "stats", false);
    printf("    snapshot over s3://, sluice run: relay %s\n", s);
    assert_int_equal(stat_of(s, "list"), 1);
    free(s);
    expect_same("snapshot(\"@/snap\") | global_shuffle(5)");
    expect_same("snapshot(\"@/snap/\") | take(10)");
    expect_distributed(c, "snapshot(\"@/snap\")");
    char *p = pipeline("snapshot(\"@/snap\")", root_url);
    char *out = cluster_run(c, 0, NULL, "read", p, "--mode", "distributed_epoch", NULL);
    struct tally t = tally_range(out, SNAP_ELEMS);
    print_tally("snapshot over s3://, distributed_epoch", t);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.duplicated, 0);
    assert_int_equal(t.unexpected, 0);
    free(out);
    s = relay_call(endpoint, "reset", true);
    free(s);
    out = cluster_run(c, 0, NULL, "read", p, "--mode", "parallel_epochs", NULL);
    s = relay_call(endpoint, "stats", false);
    printf("    snapshot over s3://, parallel_epochs: relay %s\n", s);
    assert_int_equal(stat_of(s, "list"), 0); /* a worker never lists */
    free(s);
    char *got = sorted(out), *want = expected_range(SNAP_ELEMS, 3);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    free(p);
}

/* A snapshot without one of its chunks, a prefix without a snapshot, one outside the data
 * roots, and a chunk replaced after the chunks were listed: one-line errors naming the object. */
static void test_snapshot_errors(void **state)
{
    struct cluster *c = *state;
    char *err = NULL;
    char *out = cluster_run(c, 1, &err, "read", "snapshot(\"s3://bkt/dataX/snap\")", NULL);
    assert_non_null(strstr(err, "snapshot(\"s3://bkt/dataX/snap\"): s3://bkt/dataX/snap is "
                                "outside the data roots (s3://bkt/data)"));
    free(err);
    free(out);
    out = run("snapshot(\"s3://bkt/data/snapmiss\")", 1, &err);
    printf("    %s", err);
    assert_non_null(strstr(err, "snapshot chunk s3://bkt/data/snapmiss/chunks/chunk-000000000001: "
                                "not found (the snapshot is complete without it)\n"));
    free(err);
    free(out);
    out = run("snapshot(\"s3://bkt/data/nosnap\")", 1, &err);
    printf("    %s", err);
    assert_non_null(
        strstr(err, "snapshot s3://bkt/data/nosnap: not a snapshot (no snapshot.json)\n"));
    free(err);
    free(out);
    /* The last chunk replaced while the first ones are read: paced at 1 ms an element, the read
     * reaches it some 2.9 s after its first chunk (all the chunks before it), and the replace
     * follows that chunk's GET within a poll of the relay's counters. */
    int last = snapshot_chunks() - 1;
    assert_true(last >= 1);
    struct proc p;
    char *argv[] = {(char *)bin_path("sluice"),
                    "run",
                    "snapshot(\"s3://bkt/data/snapmut\") | map(wait_us, 1000)",
                    "--format",
                    "count",
                    NULL};
    char key[200], want[200];
    snprintf(key, sizeof key, "bkt/data/snapmut/chunks/chunk-%012d", last);
    /* snapshot.json, the manifest, the first chunk; the replaced chunk not yet read */
    spawn_then_replace(&p, argv, 3, key, false);
    assert_int_equal(proc_wait(&p, RUN_MS), 1);
    char *log = read_text_file(p.log);
    printf("    %s", log);
    snprintf(want, sizeof want,
             "s3://bkt/data/snapmut/chunks/chunk-%012d: changed since it was listed (", last);
    assert_non_null(strstr(log, want));
    assert_null(strstr(log, "#object="));
    free(log);
}

/* The cluster of the save tests: 2 workers, data roots s3://bkt/data and s3://nobkt/snap (a
 * bucket the server does not have). */
static const char *const save_dispatcher_args[] = {
    "--log-level", "warn", "--data-root", "s3://bkt/data", "--data-root", "s3://nobkt/snap",
    /* A worker timeout of 1 s, not the helper's 2 s: heartbeats every 200 ms and the timer every
     * 250 ms, so a save's end (its workers' reports, then the timer's finalize) is seen twice as
     * soon. */
    "--worker-timeout-ms", "1000", NULL};
static const char *const save_worker_args[] = {
    "--data-root", "s3://bkt/data", "--data-root", "s3://nobkt/snap", "--metrics-port", "0", NULL};

/* The PUT of key among the relay's puts (stats), or NULL. */
static json_t *put_of(json_t *puts, const char *key)
{
    size_t i;
    json_t *p;
    json_array_foreach(puts, i, p)
    {
        if (strcmp(json_string_value(json_object_get(p, "key")), key) == 0)
            return p;
    }
    return NULL;
}

static long long seq_of(json_t *put, const char *what)
{
    assert_non_null(put);
    return json_integer_value(json_object_get(put, what));
}

/* `sluice snapshot save` into s3:// on 2 workers: the workers put each chunk object whole, and
 * snapshot.json and then manifest.json are put only after every chunk's PUT was answered (the
 * relay's order of events); snapshot("s3://...") then reads exactly the pipeline's elements, in
 * sluice run and in distributed_epoch. With a third of the PUTs answered 503, a save retries
 * them and reads back the same. */
static void test_snapshot_save(void **state)
{
    (void)state;
    struct cluster *c = cluster_new(save_dispatcher_args, save_worker_args, 1, 2);
    assert_non_null(c);
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    const char *src = "lines(\"s3://bkt/data/lines-*\")";
    char *out = cluster_run(c, 0, NULL, "register", src, "--dataset-id", "tosave", NULL);
    free(out);
    out = cluster_run(c, 0, NULL, "snapshot", "save", "--dataset-id", "tosave", "--path",
                      "s3://bkt/data/saved", "--timeout-ms", "60000", NULL);
    printf("    %s", out);
    assert_non_null(strstr(out, "snapshot s3://bkt/data/saved: finished, "));
    long chunks = strtol(strstr(out, "finished, ") + 10, NULL, 10);
    assert_true(chunks >= 2);
    free(out);

    /* The order of the PUTs: snapshot.json first, then every chunk once, answered 200, then the
     * manifest. */
    s = relay_call(endpoint, "stats", false);
    json_t *st = json_loads(s, 0, NULL);
    assert_non_null(st);
    free(s);
    json_t *puts = json_object_get(st, "puts");
    long long first_chunk = LLONG_MAX, last_chunk = 0;
    for (long i = 0; i < chunks; i++) {
        char key[200];
        snprintf(key, sizeof key, "bkt/data/saved/chunks/chunk-%012ld", i);
        json_t *p = put_of(puts, key);
        assert_non_null(p);
        assert_int_equal(json_integer_value(json_object_get(p, "status")), 200);
        if (seq_of(p, "end") > last_chunk)
            last_chunk = seq_of(p, "end");
        if (seq_of(p, "begin") < first_chunk)
            first_chunk = seq_of(p, "begin");
    }
    json_t *meta = put_of(puts, "bkt/data/saved/snapshot.json");
    json_t *manifest = put_of(puts, "bkt/data/saved/manifest.json");
    printf("    snapshot.json put at event %lld; %ld chunk PUTs from %lld, answered by %lld; "
           "manifest.json at %lld\n",
           seq_of(meta, "begin"), chunks, first_chunk, last_chunk, seq_of(manifest, "begin"));
    assert_int_equal(json_integer_value(json_object_get(meta, "status")), 200);
    assert_true(seq_of(meta, "end") < first_chunk);
    assert_true(seq_of(manifest, "begin") > last_chunk);
    assert_int_equal(json_integer_value(json_object_get(manifest, "status")), 200);
    assert_null(put_of(puts, "bkt/data/saved/FAILED"));
    json_decref(st);

    /* The workers count the PUTs of their chunks and the bytes they sent. */
    double puts_ok = 0, sent = 0;
    for (int i = 0; i < c->nworkers; i++) {
        struct expo e;
        cluster_scrape_worker(c, i, &e);
        double v = 0;
        if (expo_value(&e, "sluice_object_requests_total", "op=\"put\",code=\"200\"", &v) == 0)
            puts_ok += v;
        assert_int_equal(expo_value(&e, "sluice_object_bytes_sent_total", "", &v), 0);
        sent += v;
        expo_free(&e);
    }
    printf("    workers: %.0f chunk PUTs answered 200, %.0f bytes sent\n", puts_ok, sent);
    assert_true(puts_ok == (double)chunks);
    assert_true(sent > 0);

    /* Read back: the pipeline's own elements, as a multiset. */
    char *want = run(src, 0, NULL);
    char *got = run("snapshot(\"s3://bkt/data/saved\")", 0, NULL);
    char *a = sorted(got), *b = sorted(want);
    assert_true(strlen(b) > 0);
    assert_string_equal(a, b);
    free(a);
    free(got);
    got = cluster_run(c, 0, NULL, "read", "snapshot(\"s3://bkt/data/saved\")", "--mode",
                      "distributed_epoch", NULL);
    a = sorted(got);
    assert_string_equal(a, b);
    free(a);
    free(got);

    /* A read started as soon as a save is (snapshot.json is there when the command returns)
     * waits for the chunks as they are put, and reads them all. */
    const char *slow = "lines(\"s3://bkt/data/lines-[01].txt\") | map(wait_us, 100)";
    out = cluster_run(c, 0, NULL, "register", slow, "--dataset-id", "slow", NULL);
    free(out);
    out = cluster_run(c, 0, NULL, "snapshot", "save", "--dataset-id", "slow", "--path",
                      "s3://bkt/data/during", "--no-wait", NULL);
    free(out);
    got = run("snapshot(\"s3://bkt/data/during\")", 0, NULL);
    char *want2 = run("lines(\"s3://bkt/data/lines-[01].txt\")", 0, NULL);
    char *a2 = sorted(got), *b2 = sorted(want2);
    size_t nl = 0;
    for (const char *q = b2; (q = strchr(q, '\n')); q++)
        nl++;
    assert_int_equal(nl, 2 * LINES);
    assert_string_equal(a2, b2);
    free(a2);
    free(b2);
    free(got);
    free(want2);

    /* A third of the PUTs answered 503: retried, the save finishes with the same elements. */
    s = relay_call(endpoint, "faults?pput=0.34&seed=5", true);
    free(s);
    out = cluster_run(c, 0, NULL, "snapshot", "save", "--dataset-id", "tosave", "--path",
                      "s3://bkt/data/saved503", "--timeout-ms", "60000", NULL);
    printf("    %s", out);
    free(out);
    s = relay_call(endpoint, "stats", false);
    st = json_loads(s, 0, NULL);
    free(s);
    long long s503 = json_integer_value(json_object_get(json_object_get(st, "faults"), "s503"));
    printf("    with PUT faults: %lld PUTs answered 503\n", s503);
    assert_true(s503 > 0);
    json_decref(st);
    s = relay_call(endpoint, "reset", true);
    free(s);
    got = run("snapshot(\"s3://bkt/data/saved503\")", 0, NULL);
    a = sorted(got);
    assert_string_equal(a, b);
    free(a);
    free(b);
    free(got);
    free(want);
    assert_int_equal(cluster_free(c), 0);
}

/* A save outside the data roots is refused before anything is written; one into a bucket that
 * does not exist fails naming the URL; a save whose pipeline fails leaves a FAILED object. */
static void test_snapshot_save_errors(void **state)
{
    (void)state;
    struct cluster *c = cluster_new(save_dispatcher_args, save_worker_args, 1, 2);
    assert_non_null(c);
    char *out = cluster_run(c, 0, NULL, "register", "lines(\"s3://bkt/data/lines-*\")",
                            "--dataset-id", "ok", NULL);
    free(out);
    char *err = NULL;
    out = cluster_run(c, 1, &err, "snapshot", "save", "--dataset-id", "ok", "--path",
                      "s3://bkt/dataX/saved", NULL);
    printf("    %s", err);
    assert_non_null(strstr(err, "snapshot path: s3://bkt/dataX/saved is outside the data roots "
                                "(s3://bkt/data, s3://nobkt/snap)"));
    free(err);
    free(out);
    out = cluster_run(c, 1, &err, "snapshot", "save", "--dataset-id", "ok", "--path",
                      "https://bkt/data/saved", NULL);
    printf("    %s", err);
    assert_non_null(strstr(err, "only s3:// URLs are written"));
    free(err);
    free(out);
    out = cluster_run(c, 1, &err, "snapshot", "save", "--dataset-id", "ok", "--path",
                      "s3://nobkt/snap/x", "--timeout-ms", "60000", NULL);
    printf("    %s", err);
    assert_non_null(strstr(err, "s3://nobkt/snap/x/"));
    assert_non_null(strstr(err, "HTTP 404: NoSuchBucket"));
    assert_ptr_equal(strchr(err, '\n') + 1, err + strlen(err)); /* one line */
    free(err);
    free(out);
    /* A text file read as TFRecords: the workers' task fails, the save with it. */
    out = cluster_run(c, 0, NULL, "register", "tfrecord(\"s3://bkt/data/lines-*\")", "--dataset-id",
                      "bad", NULL);
    free(out);
    char *s = relay_call(endpoint, "reset", true);
    free(s);
    out = cluster_run(c, 1, &err, "snapshot", "save", "--dataset-id", "bad", "--path",
                      "s3://bkt/data/badsave", "--timeout-ms", "60000", NULL);
    printf("    %s", err);
    free(err);
    free(out);
    s = relay_call(endpoint, "stats", false);
    json_t *st = json_loads(s, 0, NULL);
    free(s);
    json_t *puts = json_object_get(st, "puts");
    json_t *failed = put_of(puts, "bkt/data/badsave/FAILED");
    assert_non_null(failed);
    assert_int_equal(json_integer_value(json_object_get(failed, "status")), 200);
    assert_null(put_of(puts, "bkt/data/badsave/manifest.json"));
    assert_non_null(put_of(puts, "bkt/data/badsave/snapshot.json")); /* as the save started */
    json_decref(st);
    out = run("snapshot(\"s3://bkt/data/badsave\")", 1, &err);
    printf("    %s", err);
    assert_non_null(strstr(err, "snapshot s3://bkt/data/badsave: the save failed: "));
    free(err);
    free(out);
    assert_int_equal(cluster_free(c), 0);
}

/* megatron("s3://...") read with ranged GETs: element for element what the local files read, in
 * sluice run and distributed_epoch on 3 workers. */
static void test_megatron(void **state)
{
    struct cluster *c = *state;
    expect_same("megatron(\"@/mg/ds\")");
    expect_same("megatron(\"@/mg/ds\") | global_shuffle(9)");
    expect_distributed(c, "megatron(\"@/mg/ds\")");
    /* The independent writer's own rendering of the documents. */
    char path[700];
    snprintf(path, sizeof path, "%s/bkt/data/mg/ds.txt", data);
    char *want = read_text_file(path);
    char *got = run("megatron(\"s3://bkt/data/mg/ds\")", 0, NULL);
    assert_string_equal(got, want);
    free(got);
    free(want);
}

/* A prefix outside the data roots, a prefix without its .bin object, and the .bin replaced
 * while documents are read: one-line errors naming the object. */
static void test_megatron_errors(void **state)
{
    struct cluster *c = *state;
    char *err = NULL;
    char *out = cluster_run(c, 1, &err, "read", "megatron(\"s3://bkt/dataX/ds\")", NULL);
    assert_non_null(strstr(err, "megatron(\"s3://bkt/dataX/ds\"): s3://bkt/dataX/ds is outside "
                                "the data roots (s3://bkt/data)"));
    free(err);
    free(out);
    out = run("megatron(\"s3://bkt/data/mgmiss/ds\")", 1, &err);
    printf("    %s", err);
    assert_non_null(strstr(err, "s3://bkt/data/mgmiss/ds.bin: HTTP 404: "));
    assert_ptr_equal(strchr(err, '\n') + 1, err + strlen(err)); /* one line */
    free(err);
    free(out);
    struct proc p;
    char *argv[] = {(char *)bin_path("sluice"),
                    "run",
                    "megatron(\"s3://bkt/data/mg/ds\") | map(wait_us, 5000)",
                    "--format",
                    "count",
                    NULL};
    spawn_then_replace(&p, argv, 1, "bkt/data/mg/ds.bin", true);
    assert_int_equal(proc_wait(&p, RUN_MS), 1);
    char *log = read_text_file(p.log);
    printf("    %s", log);
    assert_non_null(strstr(log, "s3://bkt/data/mg/ds.bin: "));
    assert_non_null(strstr(log, "HTTP 412: PreconditionFailed"));
    assert_null(strstr(log, "#object"));
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_local),
        cmocka_unit_test(test_read_ahead),
        cmocka_unit_test(test_distributed),
        cmocka_unit_test(test_parallel_listed_once),
        cmocka_unit_test(test_changed_after_listing),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_parquet_tar_same_as_local),
        cmocka_unit_test(test_resumed),
        cmocka_unit_test(test_changed),
        cmocka_unit_test(test_https),
        cmocka_unit_test(test_snapshot),
        cmocka_unit_test(test_snapshot_errors),
        cmocka_unit_test(test_snapshot_save),
        cmocka_unit_test(test_snapshot_save_errors),
        cmocka_unit_test(test_megatron),
        cmocka_unit_test(test_megatron_errors),
        cmocka_unit_test(test_many_workers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
