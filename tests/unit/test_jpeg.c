/* decode_jpeg against PIL: tests/fixtures/make_jpegs.py writes JPEGs with PIL at test time
 * (RGB 4:2:0 and 4:4:4, progressive, odd sizes, grayscale, CMYK, junk before the last marker) with
 * PIL's own decode of each, which decode_jpeg must match within 1 per value. Damaged and
 * oversized images give their exact errors, also through the pipeline with the record's origin;
 * random_crop after decode_jpeg repeats per split under pipe_open_splits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/file.h"
#include "lib/pipeline.h"
#include "lib/tmp.h"

#include "common/error.h"
#include "pipeline/files.h"
#include "pipeline/format.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"
#include "pipeline/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct sluice_registry *reg;
static char dir[64];

static char *path_of(const char *name)
{
    static char buf[4][256];
    static int slot;
    char *p = buf[slot++ % 4];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static int call(const char *name, struct sluice_element *e, const struct pipe_value *args,
                size_t nargs, char *err)
{
    const struct pipe_fn *fn = pipe_registry_find(reg, name);
    assert_non_null(fn);
    struct sluice_fn_args a = {args, nargs};
    err[0] = '\0';
    return fn->map(e, &a, fn->user, err, SLUICE_ERRMSG_SIZE);
}

/* An element (JPEG bytes of NAME.jpg, "cls"). */
static void load(struct sluice_element *e, const char *name)
{
    char file[64];
    snprintf(file, sizeof(file), "%s.jpg", name);
    size_t len;
    uint8_t *jpg = file_read(path_of(file), &len);
    assert_int_equal(sluice_element_set_bytes(e, 0, jpg, len), 0);
    assert_int_equal(sluice_element_set_bytes(e, 1, "cls", 3), 0);
    free(jpg);
}

/* ---- Against PIL ------------------------------------------------------------------------- */

static void test_matches_pil(void **state)
{
    static const char *const names[] = {"rgb",  "rgb444", "progressive", "odd",
                                        "gray", "cmyk",   "junk"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct sluice_element e;
        pipe_elem_init(&e);
        load(&e, names[i]);
        char err[SLUICE_ERRMSG_SIZE];
        int rc = call("decode_jpeg", &e, NULL, 0, err);
        if (rc)
            fail_msg("%s: %s", names[i], err);
        char file[64];
        snprintf(file, sizeof(file), "%s.shape", names[i]);
        char *shape = (char *)file_read(path_of(file), NULL);
        long h = 0, w = 0;
        assert_int_equal(sscanf(shape, "%ld %ld", &h, &w), 2);
        free(shape);
        snprintf(file, sizeof(file), "%s.rgb", names[i]);
        size_t rlen;
        uint8_t *want = file_read(path_of(file), &rlen);
        assert_int_equal(rlen, (size_t)(h * w * 3));

        assert_int_equal(e.n, 2);
        const struct pipe_tensor *t = &e.t[0];
        assert_int_equal(t->dtype, SLUICE_UINT8);
        assert_int_equal(t->rank, 3);
        assert_int_equal(t->shape[0], h);
        assert_int_equal(t->shape[1], w);
        assert_int_equal(t->shape[2], 3);
        assert_int_equal(t->len, rlen);
        int maxdiff = 0;
        for (size_t k = 0; k < rlen; k++) {
            int d = abs((int)t->data[k] - (int)want[k]);
            maxdiff = d > maxdiff ? d : maxdiff;
        }
        if (maxdiff > 1)
            fail_msg("%s: a value differs from PIL's decode by %d", names[i], maxdiff);
        /* The label passes through. */
        assert_int_equal(e.t[1].dtype, SLUICE_BYTES);
        assert_int_equal(e.t[1].len, 3);
        assert_memory_equal(e.t[1].data, "cls", 3);
        free(want);
        pipe_elem_release(&e);
    }
}

/* ---- Errors ------------------------------------------------------------------------------ */

static void expect_error(const char *name, const struct pipe_value *args, size_t nargs, int code,
                         const char *msg)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    load(&e, name);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(call("decode_jpeg", &e, args, nargs, err), code);
    assert_string_equal(err, msg);
    pipe_elem_release(&e);
}

static void test_errors(void **state)
{
    expect_error("notjpeg", NULL, 0, SLUICE_ERR_CORRUPT,
                 "invalid JPEG: Not a JPEG file: starts with 0x6e 0x6f");
    expect_error("truncated", NULL, 0, SLUICE_ERR_CORRUPT,
                 "invalid JPEG: Premature end of JPEG file");
    expect_error("huge", NULL, 0, SLUICE_ERR_TOO_LARGE,
                 "the image is 50000x60000 (HxW), 3000000000 pixels, over the limit of 67108864 "
                 "(map(decode_jpeg, MAX_PIXELS) raises it)");
    /* MAX_PIXELS: rgb.jpg is 48 x 64 = 3072 pixels. */
    struct pipe_value limit = {.kind = PIPE_VAL_INT, .i = 3071};
    expect_error("rgb", &limit, 1, SLUICE_ERR_TOO_LARGE,
                 "the image is 48x64 (HxW), 3072 pixels, over the limit of 3071 "
                 "(map(decode_jpeg, MAX_PIXELS) raises it)");
    limit.i = 3072;
    struct sluice_element e;
    pipe_elem_init(&e);
    load(&e, "rgb");
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(call("decode_jpeg", &e, &limit, 1, err), 0);
    assert_int_equal(e.t[0].shape[0], 48);

    /* Not bytes, or empty bytes. */
    assert_int_equal(sluice_element_set_int64(&e, 0, 1), 0);
    assert_int_equal(call("decode_jpeg", &e, NULL, 0, err), SLUICE_ERR_TYPE);
    assert_string_equal(err, "component 0 must be a scalar bytes holding a JPEG");
    assert_int_equal(sluice_element_set_bytes(&e, 0, "", 0), 0);
    assert_int_equal(call("decode_jpeg", &e, NULL, 0, err), SLUICE_ERR_CORRUPT);
    assert_string_equal(err, "invalid JPEG: tjDecompressHeader3(): Invalid argument");
    pipe_elem_release(&e);
}

/* ---- Through the pipeline ---------------------------------------------------------------- */

/* Runs text (opened whole, or over one split when split is non-NULL) and returns the elements'
 * text, one per line, then "ERR <message>" on a failure. */
static char *run(const char *text, const struct split *split)
{
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(pipe_parse(text, &spec, err, sizeof(err)), 0);
    struct pipe_run *r = NULL;
    int rc = split ? pipe_open_splits(spec, reg, split, 1, &r, err, sizeof(err))
                   : pipe_open(spec, reg, &r, err, sizeof(err));
    if (rc)
        fail_msg("open: %s", err);
    char *out = pipeline_text(r, NULL);
    pipe_run_free(r);
    pipe_spec_free(spec);
    return out;
}

static void test_pipeline_origin(void **state)
{
    /* Records: rgb.jpg at offset 0, then notjpeg.jpg. */
    const char *path = path_of("images.tfrecord");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    size_t len, len2;
    uint8_t *jpg = file_read(path_of("rgb.jpg"), &len);
    uint8_t *bad = file_read(path_of("notjpeg.jpg"), &len2);
    assert_int_equal(pipe_tfrecord_write(f, jpg, len), 0);
    assert_int_equal(pipe_tfrecord_write(f, bad, len2), 0);
    fclose(f);
    free(jpg);
    free(bad);

    char text[512], want[1024];
    snprintf(text, sizeof(text),
             "tfrecord(\"%s\") | map(decode_jpeg) | map(center_crop, 2, 3) | map(resize, 1, 1)",
             path);
    char *got = run(text, NULL);
    /* The first image gives one pixel; the second the decoder's error, naming the record. */
    char *nl = strchr(got, '\n');
    assert_non_null(nl);
    assert_true(strncmp(got, "[[[", 3) == 0);
    snprintf(want, sizeof(want),
             "ERR map(decode_jpeg): invalid JPEG: Not a JPEG file: starts with 0x6e 0x6f (record "
             "at %s offset %zu)",
             path, 12 + len + 4);
    assert_string_equal(nl + 1, want);
    free(got);
}

/* list("<jpeg>", ...) of rgb.jpg n times, then tail. */
static char *jpeg_list(int n, const char *tail)
{
    size_t len;
    uint8_t *jpg = file_read(path_of("rgb.jpg"), &len);
    size_t cap = (size_t)n * (4 * len + 4) + strlen(tail) + 32;
    char *text = malloc(cap);
    size_t off = (size_t)snprintf(text, cap, "list(");
    for (int k = 0; k < n; k++) {
        off += (size_t)snprintf(text + off, cap - off, "%s\"", k ? ", " : "");
        for (size_t i = 0; i < len; i++)
            off += (size_t)snprintf(text + off, cap - off, "\\x%02x", jpg[i]);
        off += (size_t)snprintf(text + off, cap - off, "\"");
    }
    snprintf(text + off, cap - off, ") | %s", tail);
    free(jpg);
    return text;
}

static void test_random_crop_per_split(void **state)
{
    char *text = jpeg_list(6, "map(decode_jpeg) | map(random_crop, 16, 16)");
    struct split s = {0};
    s.seq = 3;
    s.begin = 0;
    s.end = 6;
    /* The same split processed twice (as after a worker failure): the same elements. */
    char *a = run(text, &s);
    char *b = run(text, &s);
    assert_string_equal(a, b);
    assert_int_equal(strstr(a, "ERR") == NULL, 1);
    /* The six copies of one image are cropped differently (all six equal: chance 1/1617^5). */
    char *lines[6];
    char *p = a;
    for (int i = 0; i < 6; i++) {
        lines[i] = p;
        p = strchr(p, '\n');
        assert_non_null(p);
        *p++ = '\0';
    }
    int same = 0;
    for (int i = 1; i < 6; i++)
        same += strcmp(lines[0], lines[i]) == 0;
    assert_true(same < 5);
    /* Another split number crops otherwise. */
    s.seq = 4;
    char *c = run(text, &s);
    assert_string_not_equal(b, c);
    free(a);
    free(b);
    free(c);
    free(text);

    /* Local runs: with a SEED every run alike, without one each run its own. */
    text = jpeg_list(4, "map(decode_jpeg) | map(random_crop, 16, 16, 9)");
    a = run(text, NULL);
    b = run(text, NULL);
    assert_string_equal(a, b);
    free(a);
    free(b);
    free(text);
    text = jpeg_list(4, "map(decode_jpeg) | map(random_crop, 16, 16)");
    a = run(text, NULL);
    b = run(text, NULL);
    assert_string_not_equal(a, b);
    free(a);
    free(b);
    free(text);
}

/* ---- Fixtures ---------------------------------------------------------------------------- */

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/sluice-test-jpeg-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tests/fixtures/make_jpegs.py %s",
             SLUICE_SOURCE_DIR, dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_jpeg: %s failed (needs Debian's python3-pil)\n", cmd);
        return -1;
    }
    return pipe_registry_new(&reg);
}

static int teardown(void **state)
{
    pipe_registry_free(reg);
    tmp_remove(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_pil),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_pipeline_origin),
        cmocka_unit_test(test_random_crop_per_split),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
