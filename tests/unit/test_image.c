/* The image functions on uint8 images built in the test: resize and center_crop against references
 * computed here pixel by pixel, random_crop's determinism (the same split, seed and element give
 * the same window; different elements different ones) through the map iterator, normalize within
 * float tolerance, and every error's exact text. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "pipeline/image.h"
#include "pipeline/iter.h"
#include "pipeline/map.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sluice_registry *reg;

static uint64_t rng_state = 0x853c49e6748fea9bULL;

static uint8_t rnd8(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint8_t)(rng_state >> 56);
}

/* Sets component 0 of e to an h x w x c image (rank 2 when c == 0) of pseudo-random pixels (or
 * the given ones), and returns its pixels. */
static const uint8_t *set_image(struct sluice_element *e, int64_t h, int64_t w, int64_t c,
                                const uint8_t *px)
{
    int64_t cc = c ? c : 1;
    size_t n = (size_t)(h * w * cc);
    uint8_t *buf = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        buf[i] = px ? px[i] : rnd8();
    const int64_t shape[3] = {h, w, c};
    if (e->n == 0)
        assert_int_equal(sluice_element_set_num_components(e, 1), 0);
    assert_int_equal(sluice_element_set_tensor(e, 0, SLUICE_UINT8, c ? 3 : 2, shape, buf, n), 0);
    free(buf);
    return e->t[0].data;
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

static struct pipe_value ival(int64_t i)
{
    return (struct pipe_value){.kind = PIPE_VAL_INT, .i = i};
}

static struct pipe_value fval(double f)
{
    return (struct pipe_value){.kind = PIPE_VAL_FLOAT, .f = f};
}

/* ---- resize ------------------------------------------------------------------------------ */

/* The reference: the formula of image.h evaluated for one output value. */
static uint8_t ref_bilinear(const uint8_t *src, int64_t h, int64_t w, int64_t c, int64_t oh,
                            int64_t ow, int64_t y, int64_t x, int64_t k)
{
    double sx = ((double)x + 0.5) * ((double)w / (double)ow) - 0.5;
    double sy = ((double)y + 0.5) * ((double)h / (double)oh) - 0.5;
    sx = fmin(fmax(sx, 0.0), (double)(w - 1));
    sy = fmin(fmax(sy, 0.0), (double)(h - 1));
    int64_t x0 = (int64_t)floor(sx), y0 = (int64_t)floor(sy);
    int64_t x1 = x0 + 1 < w ? x0 + 1 : w - 1, y1 = y0 + 1 < h ? y0 + 1 : h - 1;
    double fx = sx - (double)x0, fy = sy - (double)y0;
#define P(yy, xx) ((double)src[((yy)*w + (xx)) * c + k])
    double v = (1 - fy) * ((1 - fx) * P(y0, x0) + fx * P(y0, x1)) +
               fy * ((1 - fx) * P(y1, x0) + fx * P(y1, x1));
#undef P
    double r = floor(v + 0.5);
    return (uint8_t)(r > 255 ? 255 : r);
}

static void test_resize_exact(void **state)
{
    static const int64_t cases[][5] = {
        /* h, w, c, oh, ow */
        {7, 5, 3, 3, 2},   {3, 4, 3, 8, 9},    {10, 10, 3, 10, 10},     {1, 1, 3, 4, 5},
        {5, 9, 1, 1, 1},   {13, 17, 4, 6, 11}, {375, 500, 3, 224, 224}, {6, 6, 0, 4, 9},
        {2, 50, 3, 50, 2}, {9, 7, 2, 9, 3},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t h = cases[i][0], w = cases[i][1], c = cases[i][2], oh = cases[i][3],
                ow = cases[i][4], cc = c ? c : 1;
        struct sluice_element e;
        pipe_elem_init(&e);
        const uint8_t *p = set_image(&e, h, w, c, NULL);
        uint8_t *src = malloc((size_t)(h * w * cc));
        memcpy(src, p, (size_t)(h * w * cc));
        assert_int_equal(sluice_element_set_bytes(&e, 1, "label", 5), 0);
        char err[SLUICE_ERRMSG_SIZE];
        struct pipe_value args[2] = {ival(oh), ival(ow)};
        assert_int_equal(call("resize", &e, args, 2, err), 0);
        assert_int_equal(e.n, 2);
        const struct pipe_tensor *t = &e.t[0];
        assert_int_equal(t->dtype, SLUICE_UINT8);
        assert_int_equal(t->rank, c ? 3 : 2);
        assert_int_equal(t->shape[0], oh);
        assert_int_equal(t->shape[1], ow);
        if (c)
            assert_int_equal(t->shape[2], c);
        assert_int_equal(t->len, (size_t)(oh * ow * cc));
        size_t bad = 0;
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++)
                for (int64_t k = 0; k < cc; k++)
                    bad += t->data[(y * ow + x) * cc + k] !=
                           ref_bilinear(src, h, w, cc, oh, ow, y, x, k);
        assert_int_equal(bad, 0);
        /* The label is untouched. */
        assert_int_equal(e.t[1].dtype, SLUICE_BYTES);
        assert_memory_equal(e.t[1].data, "label", 5);
        /* The same size gives the image back. */
        if (h == oh && w == ow)
            assert_memory_equal(t->data, src, (size_t)(h * w * cc));
        free(src);
        pipe_elem_release(&e);
    }
}

static void test_resize_known_values(void **state)
{
    /* 1 x 2 -> 1 x 4: source x = (x + 0.5) * 0.5 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped to
     * 0, 0.25, 0.75, 1: values 0, 25.5 -> 26 (half up), 76.5 -> 77, 102. */
    struct sluice_element e;
    pipe_elem_init(&e);
    set_image(&e, 1, 2, 0, (const uint8_t[]){0, 102});
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_value args[2] = {ival(1), ival(4)};
    assert_int_equal(call("resize", &e, args, 2, err), 0);
    assert_memory_equal(e.t[0].data, ((const uint8_t[]){0, 26, 77, 102}), 4);
    /* 2 x 2 -> 1 x 1: the center, the mean of the four. */
    set_image(&e, 2, 2, 1, (const uint8_t[]){10, 20, 30, 41});
    args[0] = ival(1);
    args[1] = ival(1);
    assert_int_equal(call("resize", &e, args, 2, err), 0);
    assert_int_equal(e.t[0].data[0], 25); /* 25.25 */
    pipe_elem_release(&e);
}

/* ---- crops ------------------------------------------------------------------------------- */

static void check_window(const struct pipe_tensor *t, const uint8_t *src, int64_t w, int64_t c,
                         int64_t top, int64_t left, int64_t oh, int64_t ow)
{
    assert_int_equal(t->shape[0], oh);
    assert_int_equal(t->shape[1], ow);
    assert_int_equal(t->len, (size_t)(oh * ow * c));
    for (int64_t y = 0; y < oh; y++)
        for (int64_t x = 0; x < ow; x++)
            for (int64_t k = 0; k < c; k++)
                assert_int_equal(t->data[(y * ow + x) * c + k],
                                 src[((top + y) * w + left + x) * c + k]);
}

static void test_center_crop_exact(void **state)
{
    static const int64_t cases[][5] = {
        {10, 12, 3, 4, 6},       {9, 9, 3, 2, 3}, {5, 7, 1, 5, 7},
        {375, 500, 3, 224, 224}, {8, 3, 4, 1, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t h = cases[i][0], w = cases[i][1], c = cases[i][2], oh = cases[i][3],
                ow = cases[i][4];
        struct sluice_element e;
        pipe_elem_init(&e);
        const uint8_t *p = set_image(&e, h, w, c, NULL);
        uint8_t *src = malloc((size_t)(h * w * c));
        memcpy(src, p, (size_t)(h * w * c));
        char err[SLUICE_ERRMSG_SIZE];
        struct pipe_value args[2] = {ival(oh), ival(ow)};
        assert_int_equal(call("center_crop", &e, args, 2, err), 0);
        /* The window starts at the offsets rounded down: (10 - 4) / 2 = 3, (9 - 2) / 2 = 3. */
        check_window(&e.t[0], src, w, c, (h - oh) / 2, (w - ow) / 2, oh, ow);
        free(src);
        pipe_elem_release(&e);
    }
}

static void test_crop_errors(void **state)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    set_image(&e, 100, 80, 3, NULL);
    char err[SLUICE_ERRMSG_SIZE];
    struct pipe_value args[3] = {ival(224), ival(224), ival(1)};
    assert_int_equal(call("center_crop", &e, args, 2, err), SLUICE_ERR_TYPE);
    assert_string_equal(err, "the image is 100x80 (HxW), smaller than the crop 224x224");
    args[0] = ival(50);
    assert_int_equal(call("random_crop", &e, args, 3, err), SLUICE_ERR_TYPE);
    assert_string_equal(err, "the image is 100x80 (HxW), smaller than the crop 50x224");
    assert_int_equal(sluice_element_set_int64(&e, 0, 3), 0);
    assert_int_equal(call("resize", &e, args, 2, err), SLUICE_ERR_TYPE);
    assert_string_equal(err, "component 0 is int64 [], expected an image of uint8 [H, W, C]");
    const int64_t shape[1] = {4};
    assert_int_equal(sluice_element_set_tensor(&e, 0, SLUICE_UINT8, 1, shape, "abcd", 4), 0);
    assert_int_equal(call("center_crop", &e, args, 2, err), SLUICE_ERR_TYPE);
    assert_string_equal(err, "component 0 is uint8 [4], expected an image of uint8 [H, W, C]");
    assert_int_equal(call("normalize", &e, (struct pipe_value[]){fval(0.5), ival(1)}, 2, err), 0);
    assert_int_equal(sluice_element_set_bytes(&e, 0, "x", 1), 0);
    assert_int_equal(call("normalize", &e, (struct pipe_value[]){fval(0.5), ival(1)}, 2, err),
                     SLUICE_ERR_TYPE);
    assert_string_equal(err, "component 0 is bytes [], expected uint8");
    pipe_elem_release(&e);
}

/* ---- random_crop ------------------------------------------------------------------------- */

/* An upstream iterator yielding count copies of one image, for the map iterator to run on. */
struct copies {
    struct pipe_iter base;
    const struct sluice_element *img;
    int left;
};

static int copies_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct copies *c = (struct copies *)it;
    if (c->left == 0)
        return 0;
    c->left--;
    assert_int_equal(pipe_elem_copy(out, c->img), 0);
    return 1;
}

static void copies_destroy(struct pipe_iter *it)
{
    free(it);
}

static const struct pipe_iter_ops copies_ops = {copies_next, copies_destroy};

/* Runs random_crop(oh, ow[, seed]) over count copies of img under env and records each window's
 * (top, left), found by matching the output against the source. */
static void crop_offsets(const struct sluice_element *img, int64_t oh, int64_t ow, bool has_seed,
                         int64_t seed, const struct pipe_map_env *env, int count, int64_t *tops,
                         int64_t *lefts)
{
    struct pipe_ctx ctx = {0};
    struct copies *up = calloc(1, sizeof(*up));
    up->base.ops = &copies_ops;
    up->base.ctx = &ctx;
    up->img = img;
    up->left = count;
    struct pipe_value args[3] = {ival(oh), ival(ow), ival(seed)};
    struct pipe_iter *it;
    assert_int_equal(pipe_map_open(pipe_registry_find(reg, "random_crop"), PIPE_FN_MAP, args,
                                   has_seed ? 3 : 2, env, &up->base, &ctx, &it),
                     0);
    struct sluice_element e;
    pipe_elem_init(&e);
    const struct pipe_tensor *src = &img->t[0];
    int64_t h = src->shape[0], w = src->shape[1], c = src->shape[2];
    for (int i = 0; i < count; i++) {
        assert_int_equal(pipe_next(it, &e), 1);
        tops[i] = lefts[i] = -1;
        for (int64_t t = 0; t + oh <= h && tops[i] < 0; t++)
            for (int64_t l = 0; l + ow <= w && tops[i] < 0; l++) {
                bool same = true;
                for (int64_t y = 0; y < oh && same; y++)
                    same = memcmp(e.t[0].data + y * ow * c, src->data + ((t + y) * w + l) * c,
                                  (size_t)(ow * c)) == 0;
                if (same) {
                    tops[i] = t;
                    lefts[i] = l;
                }
            }
        assert_true(tops[i] >= 0);
        check_window(&e.t[0], src->data, w, c, tops[i], lefts[i], oh, ow);
    }
    assert_int_equal(pipe_next(it, &e), 0);
    it->ops->destroy(it);
    pipe_elem_release(&e);
}

#define N 64

static void test_random_crop_deterministic(void **state)
{
    /* Distinct pixels (a unique value per position in the first two channels), so every window
     * is found at exactly one offset. */
    int64_t h = 40, w = 50;
    uint8_t *px = malloc((size_t)(h * w * 3));
    for (int64_t i = 0; i < h * w; i++) {
        px[3 * i] = (uint8_t)(i & 0xff);
        px[3 * i + 1] = (uint8_t)(i >> 8);
        px[3 * i + 2] = 7;
    }
    struct sluice_element img;
    pipe_elem_init(&img);
    set_image(&img, h, w, 3, px);
    free(px);

    int64_t t1[N], l1[N], t2[N], l2[N];
    /* distributed_epoch: the same split gives the same windows, element by element. */
    struct pipe_map_env split7 = {true, 7, 0, false}, split8 = {true, 8, 0, false};
    crop_offsets(&img, 24, 24, false, 0, &split7, N, t1, l1);
    crop_offsets(&img, 24, 24, false, 0, &split7, N, t2, l2);
    assert_memory_equal(t1, t2, sizeof(t1));
    assert_memory_equal(l1, l2, sizeof(l1));
    /* ... and the windows vary from element to element over the whole range. */
    int64_t tmin = h, tmax = -1, lmin = w, lmax = -1;
    for (int i = 0; i < N; i++) {
        tmin = t1[i] < tmin ? t1[i] : tmin;
        tmax = t1[i] > tmax ? t1[i] : tmax;
        lmin = l1[i] < lmin ? l1[i] : lmin;
        lmax = l1[i] > lmax ? l1[i] : lmax;
    }
    assert_true(tmin >= 0 && tmax <= h - 24 && lmin >= 0 && lmax <= w - 24);
    assert_true(tmax - tmin >= 8 && lmax - lmin >= 8);
    /* Another split draws other windows; so does a SEED on the same split. */
    crop_offsets(&img, 24, 24, false, 0, &split8, N, t2, l2);
    assert_memory_not_equal(t1, t2, sizeof(t1));
    crop_offsets(&img, 24, 24, true, 5, &split7, N, t2, l2);
    assert_memory_not_equal(t1, t2, sizeof(t1));

    /* Elsewhere a SEED makes runs repeat, whatever the run's own key... */
    struct pipe_map_env run_a = {false, 111, 0, false}, run_b = {false, 222, 0, false};
    crop_offsets(&img, 24, 24, true, 42, &run_a, N, t1, l1);
    crop_offsets(&img, 24, 24, true, 42, &run_b, N, t2, l2);
    assert_memory_equal(t1, t2, sizeof(t1));
    assert_memory_equal(l1, l2, sizeof(l1));
    /* ... but differ between repeat() passes and seeds. */
    struct pipe_map_env pass1 = {false, 111, 1, false};
    crop_offsets(&img, 24, 24, true, 42, &pass1, N, t2, l2);
    assert_memory_not_equal(t1, t2, sizeof(t1));
    crop_offsets(&img, 24, 24, true, 43, &run_a, N, t2, l2);
    assert_memory_not_equal(t1, t2, sizeof(t1));
    /* Without a SEED the run's key decides. */
    crop_offsets(&img, 24, 24, false, 0, &run_a, N, t1, l1);
    crop_offsets(&img, 24, 24, false, 0, &run_b, N, t2, l2);
    assert_memory_not_equal(t1, t2, sizeof(t1));
    crop_offsets(&img, 24, 24, false, 0, &run_a, N, t2, l2);
    assert_memory_equal(t1, t2, sizeof(t1));

    /* A window as large as the image is the image. */
    crop_offsets(&img, h, w, true, 1, &run_a, 3, t1, l1);
    assert_int_equal(t1[0] + t1[1] + t1[2] + l1[0] + l1[1] + l1[2], 0);
    pipe_elem_release(&img);
}

static void test_crop_offset_uniform(void **state)
{
    /* Every offset of a 3 x 4 range comes up, about equally often. */
    int counts[3][4] = {{0}};
    for (uint64_t s = 0; s < 12000; s++) {
        int64_t top, left;
        pipe_image_crop_offset(s, 10, 10, 8, 7, &top, &left);
        assert_true(top >= 0 && top <= 2 && left >= 0 && left <= 3);
        counts[top][left]++;
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            assert_true(counts[i][j] > 800 && counts[i][j] < 1200);
}

/* ---- normalize --------------------------------------------------------------------------- */

static struct pipe_value list3(double a, double b, double c)
{
    struct pipe_value *items = malloc(3 * sizeof(*items));
    items[0] = fval(a);
    items[1] = fval(b);
    items[2] = fval(c);
    return (struct pipe_value){.kind = PIPE_VAL_LIST, .items = items, .nitems = 3};
}

static void test_normalize(void **state)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    const double mean[3] = {0.485, 0.456, 0.406}, std[3] = {0.229, 0.224, 0.225};
    /* Every value in every channel. */
    uint8_t px[256 * 3];
    for (int i = 0; i < 256 * 3; i++)
        px[i] = (uint8_t)(i / 3);
    set_image(&e, 16, 16, 3, px);
    assert_int_equal(sluice_element_set_int64(&e, 1, 9), 0);
    struct pipe_value args[2] = {list3(mean[0], mean[1], mean[2]), list3(std[0], std[1], std[2])};
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(call("normalize", &e, args, 2, err), 0);
    const struct pipe_tensor *t = &e.t[0];
    assert_int_equal(t->dtype, SLUICE_FLOAT32);
    assert_int_equal(t->rank, 3);
    assert_int_equal(t->shape[0], 16);
    assert_int_equal(t->shape[2], 3);
    assert_int_equal(t->len, 256 * 3 * 4);
    const float *out = (const float *)(const void *)t->data;
    for (int i = 0; i < 256 * 3; i++) {
        double want = ((double)px[i] / 255.0 - mean[i % 3]) / std[i % 3];
        assert_float_equal(out[i], want, 1e-6 * fmax(1.0, fabs(want)));
    }
    assert_int_equal(e.t[1].dtype, SLUICE_INT64);

    /* Scalars apply to every channel and any rank. */
    set_image(&e, 2, 2, 0, (const uint8_t[]){0, 51, 255, 128});
    struct pipe_value s[2] = {fval(0.5), ival(2)};
    assert_int_equal(call("normalize", &e, s, 2, err), 0);
    out = (const float *)(const void *)e.t[0].data;
    assert_float_equal(out[0], -0.25, 1e-7);
    assert_float_equal(out[1], -0.15, 1e-7);
    assert_float_equal(out[2], 0.25, 1e-7);
    assert_float_equal(out[3], (128.0 / 255.0 - 0.5) / 2, 1e-7);

    /* A list must match the channels. */
    set_image(&e, 2, 2, 4, NULL);
    assert_int_equal(call("normalize", &e, args, 2, err), SLUICE_ERR_TYPE);
    assert_string_equal(err, "MEAN and STD have 3 values, but the image's last dimension is not "
                             "3 (shape [2, 2, 4])");
    free(args[0].items);
    free(args[1].items);
    pipe_elem_release(&e);
}

/* ---- Argument checks, as the dispatcher runs them ---------------------------------------- */

static void test_argument_checks(void **state)
{
    static const struct {
        const char *text, *err;
    } cases[] = {
        {"map(resize, 0, 5)", "column 12: map(resize): H must be an integer from 1 to 65535"},
        {"map(resize, 5, 65536)", "column 12: map(resize): W must be an integer from 1 to 65535"},
        {"map(resize, 5, 2.5)", "column 12: map(resize): W must be an integer from 1 to 65535"},
        {"map(resize, 5)", "column 12: map(resize) takes 2 arguments, got 1"},
        {"map(center_crop, 5, 5, 1)", "column 12: map(center_crop) takes 2 arguments, got 3"},
        {"map(random_crop, 5, 5, \"x\")", "column 12: map(random_crop): SEED must be an integer"},
        {"map(random_crop, 5)", "column 12: map(random_crop) takes 2 to 3 arguments, got 1"},
        {"map(normalize, 0.5, 0)", "column 12: map(normalize): STD must be finite and not zero"},
        {"map(normalize, 0.5, [1, 0, 2])",
         "column 12: map(normalize): STD must be finite and not zero"},
        {"map(normalize, 0.5, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17])",
         "column 12: map(normalize): STD must be a number or a list of 1 to 16 numbers"},
        {"map(normalize, 0.5, [1.0, 0.0])",
         "column 12: map(normalize): STD must be finite and not zero"},
        {"map(normalize, \"a\", 1)",
         "column 12: map(normalize): MEAN must be a number or a list of 1 to 16 numbers"},
        {"map(normalize, [[1.0]], 1)",
         "column 12: map(normalize): MEAN must be a number or a list of 1 to 16 numbers"},
        {"map(normalize, [0.1, 0.2], [1.0, 2.0, 3.0])",
         "column 12: map(normalize): MEAN has 2 values and STD 3; lists must have one per "
         "channel"},
        {"map(decode_jpeg, 0)",
         "column 12: map(decode_jpeg): MAX_PIXELS must be an integer from 1 to 268435456"},
        {"map(decode_jpeg, 1, 2)", "column 12: map(decode_jpeg) takes 0 to 1 arguments, got 2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[256], err[SLUICE_ERRMSG_SIZE] = "";
        snprintf(text, sizeof(text), "range(1) | %s", cases[i].text);
        struct pipe_spec *spec = NULL;
        int rc = pipe_parse(text, &spec, err, sizeof(err));
        if (rc == 0)
            rc = pipe_registry_check(reg, spec, err, sizeof(err));
        assert_int_equal(rc, SLUICE_ERR_PARSE);
        assert_string_equal(err, cases[i].err);
        pipe_spec_free(spec);
    }
    static const char *const ok[] = {
        "map(resize, 1, 65535)",
        "map(random_crop, 3, 4, -7)",
        "map(normalize, 0, 1)",
        "map(normalize, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])",
        "map(normalize, [1, 2, 3], 0.5)",
        "map(decode_jpeg, 268435456)",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char text[256], err[SLUICE_ERRMSG_SIZE] = "";
        snprintf(text, sizeof(text), "range(1) | %s", ok[i]);
        struct pipe_spec *spec = NULL;
        assert_int_equal(pipe_parse(text, &spec, err, sizeof(err)), 0);
        assert_int_equal(pipe_registry_check(reg, spec, err, sizeof(err)), 0);
        pipe_spec_free(spec);
    }
}

static int setup(void **state)
{
    return pipe_registry_new(&reg);
}

static int teardown(void **state)
{
    pipe_registry_free(reg);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resize_exact),
        cmocka_unit_test(test_resize_known_values),
        cmocka_unit_test(test_center_crop_exact),
        cmocka_unit_test(test_crop_errors),
        cmocka_unit_test(test_random_crop_deterministic),
        cmocka_unit_test(test_crop_offset_uniform),
        cmocka_unit_test(test_normalize),
        cmocka_unit_test(test_argument_checks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
