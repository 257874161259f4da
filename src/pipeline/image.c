/* Image functions: resize, center_crop, random_crop, normalize.
 *
 * Crops work in place (rows move towards the start of the buffer, never past data still to be
 * read). resize and normalize write a new tensor into a spare slot of the element and exchange it
 * with component 0, so the old buffers stay in the element for the next one. */
#include "image.h"

#include "common/error.h"
#include "common/mix64.h"
#include "element.h"
#include "map.h"
#include "registry.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The pure core ----------------------------------------------------------------------- */

/* One output coordinate's two source coordinates and the weight of the second. */
struct tap {
    int64_t i0, i1;
    double f;
};

static void taps(struct tap *t, int64_t out, int64_t in)
{
    double scale = (double)in / (double)out;
    for (int64_t x = 0; x < out; x++) {
        double s = ((double)x + 0.5) * scale - 0.5;
        if (s < 0)
            s = 0;
        if (s > (double)(in - 1))
            s = (double)(in - 1);
        int64_t i0 = (int64_t)s; /* s >= 0: truncation is floor */
        t[x].i0 = i0;
        t[x].i1 = i0 + 1 < in ? i0 + 1 : in - 1;
        t[x].f = s - (double)i0;
    }
}

int pipe_image_resize(const uint8_t *src, int64_t h, int64_t w, int64_t c, uint8_t *dst, int64_t oh,
                      int64_t ow)
{
    struct tap *tx = malloc((size_t)(ow + oh) * sizeof(*tx));
    if (!tx)
        return SLUICE_ERR_NOMEM;
    struct tap *ty = tx + ow;
    taps(tx, ow, w);
    taps(ty, oh, h);
    size_t row = (size_t)(w * c);
    for (int64_t y = 0; y < oh; y++) {
        const uint8_t *r0 = src + (size_t)ty[y].i0 * row;
        const uint8_t *r1 = src + (size_t)ty[y].i1 * row;
        double fy = ty[y].f;
        uint8_t *out = dst + (size_t)(y * ow * c);
        for (int64_t x = 0; x < ow; x++) {
            size_t a = (size_t)(tx[x].i0 * c), b = (size_t)(tx[x].i1 * c);
            double fx = tx[x].f;
            for (int64_t k = 0; k < c; k++) {
                double top = (1 - fx) * r0[a + (size_t)k] + fx * r0[b + (size_t)k];
                double bot = (1 - fx) * r1[a + (size_t)k] + fx * r1[b + (size_t)k];
                double v = (1 - fy) * top + fy * bot + 0.5;
                *out++ = v >= 255.0 ? 255 : (uint8_t)v;
            }
        }
    }
    free(tx);
    return 0;
}

void pipe_image_crop(uint8_t *buf, int64_t h, int64_t w, int64_t c, int64_t top, int64_t left,
                     int64_t oh, int64_t ow)
{
    (void)h;
    size_t in_row = (size_t)(w * c), out_row = (size_t)(ow * c);
    for (int64_t y = 0; y < oh; y++) {
        const uint8_t *from = buf + (size_t)(top + y) * in_row + (size_t)(left * c);
        uint8_t *to = buf + (size_t)y * out_row;
        if (to != from)
            memmove(to, from, out_row);
    }
}

/* A value in [0, n) from 64 random bits: the high word of the 128-bit product, whose bias is
 * below n / 2^64. */
static int64_t below(uint64_t r, int64_t n)
{
    return (int64_t)(((__uint128_t)r * (uint64_t)n) >> 64);
}

void pipe_image_crop_offset(uint64_t seed, int64_t h, int64_t w, int64_t oh, int64_t ow,
                            int64_t *top, int64_t *left)
{
    uint64_t r1 = mix64(seed), r2 = mix64(r1);
    *top = below(r1, h - oh + 1);
    *left = below(r2, w - ow + 1);
}

/* ---- Elements ---------------------------------------------------------------------------- */

struct image {
    int64_t h, w, c;
};

static void format_shape(const struct pipe_tensor *t, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < t->rank && off < len; d++)
        off +=
            (size_t)snprintf(buf + off, len - off, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

/* Component 0 as an image: uint8 [H, W, C] or [H, W]. */
static int get_image(const struct sluice_element *e, struct image *im, char *err, size_t errlen)
{
    if (e->n == 0)
        return err_set(err, errlen, SLUICE_ERR_TYPE, "the element has no components");
    const struct pipe_tensor *t = &e->t[0];
    if (t->dtype != SLUICE_UINT8 || (t->rank != 3 && t->rank != 2)) {
        char shape[128];
        format_shape(t, shape, sizeof(shape));
        return err_set(err, errlen, SLUICE_ERR_TYPE,
                       "component 0 is %s %s, expected an image of uint8 [H, W, C]",
                       sluice_dtype_name(t->dtype), shape);
    }
    im->h = t->shape[0];
    im->w = t->shape[1];
    im->c = t->rank == 3 ? t->shape[2] : 1;
    if (im->h == 0 || im->w == 0 || im->c == 0)
        return err_set(err, errlen, SLUICE_ERR_TYPE, "the image is empty (%lldx%lldx%lld)",
                       (long long)im->h, (long long)im->w, (long long)im->c);
    return 0;
}

/* A spare slot past the element's components, for a replacement of component 0. */
static struct pipe_tensor *spare(struct sluice_element *e, char *err, size_t errlen, int *rc)
{
    *rc = pipe_elem_reserve(e, e->n + 1);
    if (*rc) {
        err_set(err, errlen, *rc, "%s", sluice_strerror(*rc));
        return NULL;
    }
    return &e->t[e->n];
}

/* Sets t's shape to the image's rank with new height, width and channels. */
static void set_image_shape(struct pipe_tensor *t, int rank, int64_t h, int64_t w, int64_t c)
{
    t->rank = rank;
    t->shape[0] = h;
    t->shape[1] = w;
    if (rank == 3)
        t->shape[2] = c;
}

int pipe_fn_resize(struct sluice_element *e, const struct sluice_fn_args *a, void *user, char *err,
                   size_t errlen)
{
    struct image im;
    int rc = get_image(e, &im, err, errlen);
    if (rc)
        return rc;
    int64_t oh = a->v[0].i, ow = a->v[1].i;
    if ((uint64_t)(oh * ow) > SIZE_MAX / 2 / (uint64_t)im.c)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "the resized image is too large");
    struct pipe_tensor *dst = spare(e, err, errlen, &rc);
    if (!dst)
        return rc;
    size_t len = (size_t)(oh * ow * im.c);
    dst->dtype = SLUICE_UINT8;
    rc = pipe_tensor_reserve(dst, len, 0);
    if (!rc)
        rc = pipe_image_resize(e->t[0].data, im.h, im.w, im.c, dst->data, oh, ow);
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    dst->len = len;
    set_image_shape(dst, e->t[0].rank, oh, ow, im.c);
    pipe_tensor_swap(&e->t[0], dst);
    return 0;
}

static int crop(struct sluice_element *e, const struct sluice_fn_args *a, bool random, char *err,
                size_t errlen)
{
    struct image im;
    int rc = get_image(e, &im, err, errlen);
    if (rc)
        return rc;
    int64_t oh = a->v[0].i, ow = a->v[1].i;
    if (oh > im.h || ow > im.w)
        return err_set(err, errlen, SLUICE_ERR_TYPE,
                       "the image is %lldx%lld (HxW), smaller than the crop %lldx%lld",
                       (long long)im.h, (long long)im.w, (long long)oh, (long long)ow);
    int64_t top, left;
    if (random) {
        bool has_seed = a->n > 2;
        uint64_t seed = pipe_fn_seed(a, has_seed, has_seed ? a->v[2].i : 0);
        pipe_image_crop_offset(seed, im.h, im.w, oh, ow, &top, &left);
    } else {
        top = (im.h - oh) / 2;
        left = (im.w - ow) / 2;
    }
    struct pipe_tensor *t = &e->t[0];
    pipe_image_crop(t->data, im.h, im.w, im.c, top, left, oh, ow);
    t->len = (size_t)(oh * ow * im.c);
    set_image_shape(t, t->rank, oh, ow, im.c);
    return 0;
}

int pipe_fn_center_crop(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                        char *err, size_t errlen)
{
    return crop(e, a, false, err, errlen);
}

int pipe_fn_random_crop(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                        char *err, size_t errlen)
{
    return crop(e, a, true, err, errlen);
}

/* ---- normalize --------------------------------------------------------------------------- */

/* MEAN or STD: a number, or a list of numbers (one per channel). */
static size_t vec_len(const struct pipe_value *v)
{
    return v->kind == PIPE_VAL_LIST ? v->nitems : 1;
}

static double vec_at(const struct pipe_value *v, size_t k)
{
    const struct pipe_value *x = v->kind == PIPE_VAL_LIST ? &v->items[k] : v;
    return x->kind == PIPE_VAL_FLOAT ? x->f : (double)x->i;
}

int pipe_fn_normalize(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                      char *err, size_t errlen)
{
    if (e->n == 0 || e->t[0].dtype != SLUICE_UINT8) {
        char shape[128] = "";
        if (e->n)
            format_shape(&e->t[0], shape, sizeof(shape));
        return err_set(err, errlen, SLUICE_ERR_TYPE, "component 0 is %s %s, expected uint8",
                       e->n ? sluice_dtype_name(e->t[0].dtype) : "missing", shape);
    }
    const struct pipe_value *mean = &a->v[0], *std = &a->v[1];
    size_t nm = vec_len(mean), ns = vec_len(std);
    size_t c = nm > ns ? nm : ns;
    const struct pipe_tensor *t = &e->t[0];
    if (c > 1) {
        int64_t last = t->rank ? t->shape[t->rank - 1] : 1;
        if (t->rank == 0 || last != (int64_t)c) {
            char shape[128];
            format_shape(t, shape, sizeof(shape));
            return err_set(err, errlen, SLUICE_ERR_TYPE,
                           "MEAN and STD have %zu values, but the image's last dimension is not "
                           "%zu (shape %s)",
                           c, c, shape);
        }
    }
    /* One table per channel: every uint8 value's result, computed once in double. */
    float lut[PIPE_NORMALIZE_MAX_CHANNELS][256];
    for (size_t k = 0; k < c; k++) {
        double m = vec_at(mean, nm > 1 ? k : 0), s = vec_at(std, ns > 1 ? k : 0);
        for (int x = 0; x < 256; x++)
            lut[k][x] = (float)(((double)x / 255.0 - m) / s);
    }
    uint64_t nv = pipe_tensor_num_values(t);
    if (nv > SIZE_MAX / 8)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "the image is too large");
    int rc;
    struct pipe_tensor *dst = spare(e, err, errlen, &rc);
    if (!dst)
        return rc;
    t = &e->t[0]; /* the reservation may have moved the components */
    dst->dtype = SLUICE_FLOAT32;
    rc = pipe_tensor_reserve(dst, (size_t)nv * 4, 0);
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    float *out = (float *)(void *)dst->data;
    const uint8_t *in = t->data;
    if (c == 1) {
        for (uint64_t j = 0; j < nv; j++)
            out[j] = lut[0][in[j]];
    } else {
        for (uint64_t j = 0; j < nv; j += c)
            for (size_t k = 0; k < c; k++)
                out[j + k] = lut[k][in[j + k]];
    }
    dst->len = (size_t)nv * 4;
    dst->rank = t->rank;
    memcpy(dst->shape, t->shape, sizeof(dst->shape));
    pipe_tensor_swap(&e->t[0], dst);
    return 0;
}

/* ---- Argument checks --------------------------------------------------------------------- */

int pipe_check_image_size(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    for (size_t i = 0; i < 2; i++) {
        const struct pipe_value *v = &a->v[i];
        if (v->kind != PIPE_VAL_INT || v->i < 1 || v->i > PIPE_IMAGE_MAX_SIDE)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "%s must be an integer from 1 to %d",
                           i ? "W" : "H", PIPE_IMAGE_MAX_SIDE);
    }
    if (a->n > 2 && a->v[2].kind != PIPE_VAL_INT)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "SEED must be an integer");
    return 0;
}

static int check_vec(const struct pipe_value *v, const char *name, bool nonzero, char *err,
                     size_t errlen)
{
    size_t n = vec_len(v);
    bool ok = v->kind == PIPE_VAL_INT || v->kind == PIPE_VAL_FLOAT;
    if (v->kind == PIPE_VAL_LIST) {
        ok = n >= 1 && n <= PIPE_NORMALIZE_MAX_CHANNELS;
        for (size_t k = 0; ok && k < n; k++)
            ok = v->items[k].kind == PIPE_VAL_INT || v->items[k].kind == PIPE_VAL_FLOAT;
    }
    if (!ok)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s must be a number or a list of 1 to %d numbers", name,
                       PIPE_NORMALIZE_MAX_CHANNELS);
    for (size_t k = 0; k < n; k++) {
        double x = vec_at(v, k);
        if (!isfinite(x) || (nonzero && x == 0))
            return err_set(err, errlen, SLUICE_ERR_INVALID, "%s must be finite%s", name,
                           nonzero ? " and not zero" : "");
    }
    return 0;
}

int pipe_check_normalize(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    int rc = check_vec(&a->v[0], "MEAN", false, err, errlen);
    if (!rc)
        rc = check_vec(&a->v[1], "STD", true, err, errlen);
    if (rc)
        return rc;
    size_t nm = vec_len(&a->v[0]), ns = vec_len(&a->v[1]);
    if (nm > 1 && ns > 1 && nm != ns)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "MEAN has %zu values and STD %zu; lists must have one per channel", nm, ns);
    return 0;
}
