/* WebDataset sample grouping (pipeline/wds.h): member name -> key and extension, the extensions
 * tar() accepts, and the grouping of member sequences into samples, missing and duplicate
 * members included. Each grouping case is a sequence of member names and the exact transcript of
 * what the grouping said for each. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/wds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_split(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *key; /* NULL: the name belongs to no sample */
        const char *ext;
    } cases[] = {
        {"000123.jpg", "000123", "jpg"},
        {"a/b/000123.jpg", "a/b/000123", "jpg"},
        {"x.seg.png", "x", "seg.png"},
        {"dir.v2/x.seg.png", "dir.v2/x", "seg.png"},
        {"./s/000001.cls", "./s/000001", "cls"},
        {"k.", "k", ""},
        {"k..jpg", "k", ".jpg"},
        {"__key__.txt", "__key__", "txt"},
        {"README", NULL, NULL},
        {"dir.tar/README", NULL, NULL},
        {".hidden", NULL, NULL},
        {"a/.hidden.jpg", NULL, NULL},
        {"a/b/", NULL, NULL},
        {"", NULL, NULL},
        {"/abs/1.jpg", "/abs/1", "jpg"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t key_len = 12345;
        const char *ext = NULL;
        bool ok = pipe_wds_split(cases[i].name, &key_len, &ext);
        if (!cases[i].key) {
            if (ok)
                fail_msg("\"%s\": split into a sample member", cases[i].name);
            continue;
        }
        if (!ok)
            fail_msg("\"%s\": no sample member", cases[i].name);
        assert_int_equal(key_len, strlen(cases[i].key));
        assert_memory_equal(cases[i].name, cases[i].key, key_len);
        assert_string_equal(ext, cases[i].ext);
        /* The extension is a suffix of the name, right after the key's dot. */
        assert_ptr_equal(ext, cases[i].name + key_len + 1);
    }
}

static void test_ext_problem(void **state)
{
    (void)state;
    assert_null(pipe_wds_ext_problem("jpg"));
    assert_null(pipe_wds_ext_problem("seg.png"));
    assert_null(pipe_wds_ext_problem("a.b.c"));
    assert_null(pipe_wds_ext_problem("__key__"));
    assert_string_equal(pipe_wds_ext_problem(""), "a non-empty extension");
    assert_string_equal(pipe_wds_ext_problem(".jpg"), "an extension without a leading dot");
    assert_string_equal(pipe_wds_ext_problem("x/y"), "an extension without '/'");
}

/* Feeds names (then the end of the shard) and writes one word per feed: "tK" (take into
 * component K) or "-" (skip), prefixed by "D" when the previous sample was done, "E:message"
 * for an error, after which feeding stops. */
static void transcript(char *const *exts, size_t nexts, const char *const *names, char *out,
                       size_t len)
{
    struct pipe_wds g;
    pipe_wds_init(&g, exts, nexts);
    out[0] = '\0';
    size_t o = 0;
    for (size_t i = 0;; i++) {
        const char *name = names[i];
        struct pipe_wds_step step;
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc = pipe_wds_feed(&g, name, &step, err, sizeof err);
        if (o)
            o += (size_t)snprintf(out + o, len - o, " ");
        if (rc < 0) {
            assert_int_equal(rc, SLUICE_ERR_INVALID);
            snprintf(out + o, len - o, "E:%s", err);
            break;
        }
        o += (size_t)snprintf(out + o, len - o, "%s", step.done ? "D" : "");
        if (name) {
            if (step.take >= 0)
                o += (size_t)snprintf(out + o, len - o, "t%d", step.take);
            else
                o += (size_t)snprintf(out + o, len - o, "-");
        } else {
            assert_int_equal(step.take, -1);
            o += (size_t)snprintf(out + o, len - o, "$");
            break;
        }
    }
    pipe_wds_release(&g);
}

static void test_grouping(void **state)
{
    (void)state;
    static const struct {
        const char *exts[3];
        const char *names[12]; /* NULL-terminated: the end of the shard */
        const char *want;
    } cases[] = {
        /* Two complete samples, members in either order. */
        {{"jpg", "cls"}, {"a/1.jpg", "a/1.cls", "a/2.cls", "a/2.jpg"}, "t0 t1 Dt1 t0 D$"},
        /* Unasked-for members are skipped but still part of their sample. */
        {{"cls"}, {"1.jpg", "1.cls", "1.json", "2.jpg", "2.cls"}, "- t0 - D- t0 D$"},
        /* A sample with none of the asked-for members is no sample; one with some but not all
         * is an error naming the first missing extension in the asked-for order. */
        {{"jpg", "cls"}, {"__index__.json", "1.jpg", "1.cls"}, "- t0 t1 D$"},
        {{"jpg", "cls", "txt"},
         {"1.jpg", "1.cls", "1.txt", "2.txt", "3.jpg"},
         "t0 t1 t2 Dt2 E:sample 2: missing member .jpg"},
        {{"jpg", "cls"}, {"1.jpg", "1.cls", "2.jpg"}, "t0 t1 Dt0 E:sample 2: missing member .cls"},
        /* Members of one key that are not consecutive make two samples, one incomplete. */
        {{"jpg", "cls"}, {"1.jpg", "2.jpg", "1.cls"}, "t0 E:sample 1: missing member .cls"},
        /* Duplicates of an asked-for extension are errors; of others, not. */
        {{"jpg"}, {"1.jpg", "1.jpg"}, "t0 E:sample 1: duplicate member .jpg"},
        {{"jpg"}, {"1.txt", "1.txt", "1.jpg"}, "- - t0 D$"},
        /* Extensions match whole: "seg.png" is not "png", and keys compare whole too. */
        {{"png", "seg.png"}, {"x.seg.png", "x.png"}, "t1 t0 D$"},
        {{"jpg"}, {"a/1.jpg", "b/1.jpg", "1.jpg", "10.jpg"}, "t0 Dt0 Dt0 Dt0 D$"},
        /* Names that belong to no sample are passed over without ending one. */
        {{"jpg", "cls"}, {"1.jpg", "README", "dir/", "1.cls"}, "t0 - - t1 D$"},
        /* An empty shard, and one whose samples hold nothing asked for. */
        {{"jpg"}, {NULL}, "$"},
        {{"jpg"}, {"1.txt", "2.txt"}, "- - $"},
        /* An unfinished sample at the end of the shard is checked too. */
        {{"a", "b"}, {"k.a"}, "t0 E:sample k: missing member .b"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t nexts = 0;
        while (nexts < 3 && cases[i].exts[nexts])
            nexts++;
        char got[512];
        transcript((char *const *)cases[i].exts, nexts, cases[i].names, got, sizeof got);
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, got, cases[i].want);
    }
}

/* After the end of a shard (or a reset) the next shard starts afresh: a sample does not continue
 * across shards even with the same key. */
static void test_reset_between_shards(void **state)
{
    (void)state;
    char *exts[] = {"jpg", "cls"};
    struct pipe_wds g;
    pipe_wds_init(&g, exts, 2);
    struct pipe_wds_step step;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_wds_feed(&g, "1.jpg", &step, err, sizeof err), 0);
    assert_int_equal(step.take, 0);
    pipe_wds_reset(&g);
    assert_int_equal(pipe_wds_feed(&g, "1.cls", &step, err, sizeof err), 0);
    assert_false(step.done);
    assert_int_equal(step.take, 1);
    assert_int_equal(pipe_wds_feed(&g, NULL, &step, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "sample 1: missing member .jpg");
    /* After an error the grouping starts afresh as well. */
    assert_int_equal(pipe_wds_feed(&g, "2.cls", &step, err, sizeof err), 0);
    assert_false(step.done);
    assert_int_equal(step.take, 1);
    pipe_wds_release(&g);
}

/* Keys of any length are kept whole. */
static void test_long_keys(void **state)
{
    (void)state;
    char *exts[] = {"jpg", "cls"};
    size_t n = 5000;
    char *a = malloc(n + 5), *b = malloc(n + 5);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 'k', n);
    memcpy(a + n, ".jpg", 5);
    memcpy(b, a, n);
    memcpy(b + n, ".cls", 5);
    struct pipe_wds g;
    pipe_wds_init(&g, exts, 2);
    struct pipe_wds_step step;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_wds_feed(&g, a, &step, err, sizeof err), 0);
    assert_int_equal(pipe_wds_feed(&g, b, &step, err, sizeof err), 0);
    assert_false(step.done);
    assert_int_equal(step.take, 1);
    b[n - 1] = 'x'; /* a different key of the same length */
    assert_int_equal(pipe_wds_feed(&g, b, &step, err, sizeof err), 0);
    assert_true(step.done);
    assert_int_equal(step.take, 1);
    pipe_wds_release(&g);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),     cmocka_unit_test(test_ext_problem),
        cmocka_unit_test(test_grouping),  cmocka_unit_test(test_reset_between_shards),
        cmocka_unit_test(test_long_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
