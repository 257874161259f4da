/* decode_jpeg through TurboJPEG's tj API (libjpeg-turbo 2.1 has no tj3 API).
 *
 * Each call reads the header, checks the size, decodes into a spare slot of the element and
 * exchanges it with component 0, whose buffer (the JPEG bytes) stays in the element for the
 * next one. A decompressor handle is made per call: it costs under a microsecond against the
 * milliseconds of a decode, and keeps the function free of state shared between threads. */
#include "jpeg.h"

#include "common/error.h"
#include "element.h"
#include "registry.h"

#include <stdbool.h>
#include <string.h>
#include <turbojpeg.h>

/* Whether a failed tjDecompress2() still produced the whole image: TurboJPEG reports libjpeg's
 * warnings as failures with TJERR_WARNING. A premature end leaves the rest of the image gray,
 * which a training set must not receive silently; the other warnings do not lose pixels. */
static bool warning_only(tjhandle tj)
{
    if (tjGetErrorCode(tj) != TJERR_WARNING)
        return false;
    const char *msg = tjGetErrorStr2(tj);
    return msg && !strstr(msg, "Premature end");
}

static int tj_fail(tjhandle tj, int code, char *err, size_t errlen)
{
    const char *msg = tjGetErrorStr2(tj);
    return err_set(err, errlen, code, "invalid JPEG: %s", msg && msg[0] ? msg : "unknown error");
}

/* In place, pixel by pixel from the first: pixel i's 3 bytes land at or before its 4. */
static void cmyk_to_rgb(uint8_t *p, size_t npixels)
{
    for (size_t i = 0; i < npixels; i++) {
        unsigned c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
        p[3 * i] = (uint8_t)((c * k + 127) / 255);
        p[3 * i + 1] = (uint8_t)((m * k + 127) / 255);
        p[3 * i + 2] = (uint8_t)((y * k + 127) / 255);
    }
}

static int decode(tjhandle tj, struct sluice_element *e, int64_t max_pixels, char *err,
                  size_t errlen)
{
    const struct pipe_tensor *in = &e->t[0];
    const unsigned char *buf = in->data;
    unsigned long len = (unsigned long)in->len;
    int w, h, subsamp, cs;
    if (tjDecompressHeader3(tj, buf, len, &w, &h, &subsamp, &cs) < 0)
        return tj_fail(tj, SLUICE_ERR_CORRUPT, err, errlen);
    if (w <= 0 || h <= 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "invalid JPEG: size %dx%d", h, w);
    int64_t pixels = (int64_t)w * h;
    if (pixels > max_pixels)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE,
                       "the image is %dx%d (HxW), %lld pixels, over the limit of %lld "
                       "(map(decode_jpeg, MAX_PIXELS) raises it)",
                       h, w, (long long)pixels, (long long)max_pixels);
    bool cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    int rc = pipe_elem_reserve(e, e->n + 1);
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    in = &e->t[0];
    buf = in->data;
    struct pipe_tensor *out = &e->t[e->n];
    out->dtype = SLUICE_UINT8;
    rc = pipe_tensor_reserve(out, (size_t)pixels * (cmyk ? 4 : 3), 0);
    if (rc)
        return err_set(err, errlen, rc, "the image is %dx%d (HxW): %s", h, w, sluice_strerror(rc));
    if (tjDecompress2(tj, buf, len, out->data, w, 0, h, cmyk ? TJPF_CMYK : TJPF_RGB, 0) < 0 &&
        !warning_only(tj))
        return tj_fail(tj, SLUICE_ERR_CORRUPT, err, errlen);
    if (cmyk)
        cmyk_to_rgb(out->data, (size_t)pixels);
    out->rank = 3;
    out->shape[0] = h;
    out->shape[1] = w;
    out->shape[2] = 3;
    out->len = (size_t)pixels * 3;
    pipe_tensor_swap(&e->t[0], out);
    return 0;
}

int pipe_fn_decode_jpeg(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                        char *err, size_t errlen)
{
    if (e->n == 0 || e->t[0].dtype != SLUICE_BYTES || e->t[0].rank != 0)
        return err_set(err, errlen, SLUICE_ERR_TYPE,
                       "component 0 must be a scalar bytes holding a JPEG");
    int64_t max_pixels = a->n > 0 ? a->v[0].i : PIPE_JPEG_MAX_PIXELS;
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "cannot create a JPEG decompressor: %s",
                       tjGetErrorStr2(NULL));
    int rc = decode(tj, e, max_pixels, err, errlen);
    tjDestroy(tj);
    return rc;
}

int pipe_check_decode_jpeg(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    if (a->n == 0)
        return 0;
    const struct pipe_value *v = &a->v[0];
    if (v->kind != PIPE_VAL_INT || v->i < 1 || v->i > PIPE_JPEG_MAX_PIXELS_LIMIT)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "MAX_PIXELS must be an integer from 1 to %lld",
                       (long long)PIPE_JPEG_MAX_PIXELS_LIMIT);
    return 0;
}
