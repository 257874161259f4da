/* Record and image functions through the service: a real dispatcher and workers on 127.0.0.1 read
 * TFRecord files of tf.train.Example records (encoded byte by byte in this file) and of JPEGs
 * (written by PIL through tests/fixtures/make_jpegs.py) with parse_example, decode_jpeg and
 * random_crop.
 *
 *   - parse_example in distributed_epoch and parallel_epochs: the exact multiset of features;
 *   - a record without a wanted feature fails the read, naming the feature, file and offset;
 *   - random_crop in distributed_epoch is a function of the split: a read during which a worker
 *     is killed (its splits processed again elsewhere) returns exactly the crops of an
 *     undisturbed read. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/pb.h"
#include "lib/text.h"
#include "lib/tmp.h"
#include "pipeline/files.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Short timeouts, so a killed worker's splits are handed out again within about a second. */
static const char *const short_timeouts[] = {"--worker-timeout-ms", "1000", "--client-timeout-ms",
                                             "2000", NULL};

static int setup(void **state)
{
    return (*state = cluster_new(short_timeouts, NULL, 0, 0)) ? 0 : -1;
}

/* ---- Examples, written byte by byte ------------------------------------------------------ */

/* Example {id: int64 [id], name: bytes ["rec-<id>"], vec: float [id / 2, -id] (packed)}; without
 * id when with_id is false. */
static struct pb example(int64_t id, bool with_id)
{
    struct pb fs = {0}, f, list;
    if (with_id) {
        f = (struct pb){0};
        list = (struct pb){0};
        pb_varint(&list, 1 << 3 | 0);
        pb_varint(&list, (uint64_t)id);
        pb_len(&f, 3, list.p, list.n);
        pb_entry(&fs, "id", &f);
    }
    char name[32];
    snprintf(name, sizeof(name), "rec-%lld", (long long)id);
    f = (struct pb){0};
    list = (struct pb){0};
    pb_len(&list, 1, name, strlen(name));
    pb_len(&f, 1, list.p, list.n);
    pb_entry(&fs, "name", &f);
    float v[2] = {(float)id / 2, (float)-id};
    f = (struct pb){0};
    list = (struct pb){0};
    pb_len(&list, 1, v, sizeof(v)); /* little-endian floats, as the wire has them */
    pb_len(&f, 2, list.p, list.n);
    pb_entry(&fs, "vec", &f);
    struct pb ex = {0};
    pb_len(&ex, 1, fs.p, fs.n);
    return ex;
}

#define FILES 4
#define PER_FILE 25

/* Writes FILES tfrecord files of PER_FILE Examples each into a directory of the test's own and
 * returns the glob; the record of id bad_id (if >= 0) lacks its id. */
static const char *write_examples(const char *name, int bad_id)
{
    static char glob[512];
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/%s", tmp_dir(), name);
    assert_int_equal(mkdir(dir, 0700), 0);
    for (int k = 0; k < FILES; k++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/part-%d.tfrecord", dir, k);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        for (int i = 0; i < PER_FILE; i++) {
            int id = k * PER_FILE + i;
            struct pb ex = example(id, id != bad_id);
            assert_int_equal(pipe_tfrecord_write(f, ex.p, ex.n), 0);
        }
        assert_int_equal(fclose(f), 0);
    }
    snprintf(glob, sizeof(glob), "%s/*.tfrecord", dir);
    return glob;
}

/* The sorted text of what parse_example gives for ids [0, n), each line times times. */
static char *expected_examples(int n, int times)
{
    size_t cap = (size_t)n * times * 64 + 1, off = 0;
    char *text = malloc(cap);
    text[0] = '\0';
    for (int id = 0; id < n; id++)
        for (int t = 0; t < times; t++) {
            char half[32];
            /* id / 2 in the shortest form that reads back: 0.5, 1, 1.5, ... */
            if (id % 2)
                snprintf(half, sizeof(half), "%d.5", id / 2);
            else
                snprintf(half, sizeof(half), "%d", id / 2);
            /* (float)-id: the integer 0 negated is 0, which prints as "0". */
            off += (size_t)snprintf(text + off, cap - off, "(%d, rec-%d, [%s, %s%d])\n", id, id,
                                    half, id ? "-" : "", id);
        }
    char *sorted = sorted_lines(text);
    free(text);
    return sorted;
}

static void test_parse_example(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 2);
    const char *glob = write_examples("examples", -1);
    char pipeline[1024];
    snprintf(pipeline, sizeof(pipeline),
             "tfrecord(\"%s\") | map(parse_example, \"id:int64\", \"name:bytes\", "
             "\"vec:float32[2]\")",
             glob);
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", pipeline, "--mode", "distributed_epoch", NULL);
    if (rc != 0)
        fail_msg("read failed with %d: %s", rc, err);
    char *got = sorted_lines(out), *want = expected_examples(FILES * PER_FILE, 1);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    free(err);

    /* parallel_epochs: every worker reads every file. */
    rc = cluster_cli(c, &out, &err, "read", pipeline, "--mode", "parallel_epochs", NULL);
    if (rc != 0)
        fail_msg("read failed with %d: %s", rc, err);
    got = sorted_lines(out);
    want = expected_examples(FILES * PER_FILE, 2);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(out);
    free(err);
}

static void test_missing_feature_names_the_record(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 1);
    /* id 57 is record 7 of part-2: at offset 7 records in. */
    const char *glob = write_examples("bad", 57);
    char pipeline[1024];
    snprintf(pipeline, sizeof(pipeline), "tfrecord(\"%s\") | map(parse_example, \"id:int64\")",
             glob);
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", pipeline, "--mode", "distributed_epoch", NULL);
    assert_int_equal(rc, 1);
    /* Each record before it is an Example of ids < 57 of the same file: 12 + len + 4 bytes. */
    uint64_t offset = 0;
    for (int id = 50; id < 57; id++)
        offset += 12 + example(id, true).n + 4;
    char file[512];
    snprintf(file, sizeof(file), "%s", glob);
    snprintf(strrchr(file, '/'), sizeof(file) - (size_t)(strrchr(file, '/') - file),
             "/part-2.tfrecord");
    char want[1024];
    snprintf(want, sizeof(want),
             "map(parse_example): feature 'id': missing (record at %s offset %llu)", file,
             (unsigned long long)offset);
    if (!strstr(err, want))
        fail_msg("stderr does not hold \"%s\": %s", want, err);
    free(out);
    free(err);
}

/* ---- random_crop across a worker failure ------------------------------------------------- */

/* Writes 8 files of 15 JPEGs each (PIL's rgb.jpg) and returns the glob. */
static const char *write_jpegs(void)
{
    static char glob[512];
    char dir[256], cmd[1024];
    snprintf(dir, sizeof(dir), "%s/jpegs", tmp_dir());
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tests/fixtures/make_jpegs.py %s",
             SLUICE_SOURCE_DIR, dir);
    assert_int_equal(system(cmd), 0);
    char path[512];
    snprintf(path, sizeof(path), "%s/rgb.jpg", dir);
    FILE *in = fopen(path, "rb");
    assert_non_null(in);
    static uint8_t jpg[65536];
    size_t len = fread(jpg, 1, sizeof(jpg), in);
    fclose(in);
    assert_true(len > 0 && len < sizeof(jpg));
    for (int k = 0; k < 8; k++) {
        snprintf(path, sizeof(path), "%s/shard-%d.tfrecord", dir, k);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        for (int i = 0; i < 15; i++)
            assert_int_equal(pipe_tfrecord_write(f, jpg, len), 0);
        assert_int_equal(fclose(f), 0);
    }
    snprintf(glob, sizeof(glob), "%s/*.tfrecord", dir);
    return glob;
}

static char *finish(struct proc *r)
{
    char *out = proc_read_all(r, 60000);
    int rc = proc_wait(r, 15000);
    if (rc != 0) {
        proc_stop(r, SIGKILL, 5000);
        fail_msg("sluice read exited with %d", rc);
    }
    return out;
}

static void test_random_crop_survives_worker_failure(void **state)
{
    struct cluster *c = *state;
    cluster_add_workers(c, 3);
    const char *glob = write_jpegs();
    char pipeline[1024];
    /* 120 crops of 4 x 4 at 20 ms each: a read of about a second on three workers. */
    snprintf(pipeline, sizeof(pipeline),
             "tfrecord(\"%s\") | map(decode_jpeg) | map(random_crop, 4, 4) | map(wait_us, 20000)",
             glob);

    struct proc r;
    assert_int_equal(cluster_cli_spawn(c, &r, "read", pipeline, "--mode", "distributed_epoch",
                                       "--timeout-ms", "60000", NULL),
                     0);
    char *undisturbed = finish(&r);
    assert_int_equal(count_lines(undisturbed), 120);

    /* The same read, with a worker killed in the middle: its splits are processed again by the
     * others, and must yield the same crops. */
    assert_int_equal(cluster_cli_spawn(c, &r, "read", pipeline, "--mode", "distributed_epoch",
                                       "--timeout-ms", "60000", NULL),
                     0);
    struct timespec pause = {0, 400 * 1000 * 1000};
    nanosleep(&pause, NULL);
    assert_int_equal(proc_wait(&r, 0), -2); /* still reading */
    assert_int_equal(proc_stop(&c->workers[0], SIGKILL, 10000), 128 + SIGKILL);
    char *disturbed = finish(&r);

    char *a = sorted_lines(undisturbed), *b = sorted_lines(disturbed);
    assert_int_equal(count_lines(b), 120);
    assert_string_equal(a, b);
    /* And the crops are not all alike: the first and last of the sorted lines differ. */
    const char *last = a + strlen(a) - 1;
    while (last > a && last[-1] != '\n')
        last--;
    assert_true(strncmp(a, last, (size_t)(strchr(a, '\n') - a)) != 0);
    free(a);
    free(b);
    free(undisturbed);
    free(disturbed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parse_example, setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_missing_feature_names_the_record, setup,
                                        cluster_teardown),
        cmocka_unit_test_setup_teardown(test_random_crop_survives_worker_failure, setup,
                                        cluster_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, tmp_teardown);
}
