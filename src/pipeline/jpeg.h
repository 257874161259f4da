/* decode_jpeg: JPEG bytes to uint8 [H, W, 3] RGB pixels through TurboJPEG (libturbojpeg).
 *
 *   map(decode_jpeg)              component 0, a scalar bytes holding a JPEG, becomes its pixels;
 *   map(decode_jpeg, MAX_PIXELS)  the same with another bound on H * W
 *
 * The other components are kept, so a (jpg, cls) pair from a WebDataset shard or the features of
 * parse_example (image first) pass through. Grayscale images are expanded to RGB, CMYK and YCCK
 * ones converted (R = C * K / 255 on the inverted values Adobe's encoders and TurboJPEG use, as
 * PIL does). Decoding uses the accurate integer DCT and smooth upsampling, TurboJPEG's defaults
 * and the same as PIL, so both agree to within 1 per value.
 *
 * Errors carry TurboJPEG's (libjpeg's) own message: "invalid JPEG: Not a JPEG file: starts with
 * 0x6e 0x6f". A JPEG cut short ("Premature end of JPEG file") is an error, as in PIL and
 * tf.io.decode_jpeg; other libjpeg warnings (e.g. extraneous bytes before a marker) are not,
 * since the image decodes whole. An image of more than MAX_PIXELS (default
 * PIPE_JPEG_MAX_PIXELS) pixels is refused from its header, before anything is allocated. */
#ifndef SLUICE_PIPELINE_JPEG_H
#define SLUICE_PIPELINE_JPEG_H

#include "sluice/sluice.h"

#include <stddef.h>
#include <stdint.h>

/* The default bound on H * W: 8192 x 8192, 192 MiB of RGB. */
#define PIPE_JPEG_MAX_PIXELS ((int64_t)1 << 26)
/* The most MAX_PIXELS may be: 1 GiB of CMYK while converting. */
#define PIPE_JPEG_MAX_PIXELS_LIMIT ((int64_t)1 << 28)

int pipe_fn_decode_jpeg(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                        char *err, size_t errlen);
int pipe_check_decode_jpeg(const struct sluice_fn_args *a, char *err, size_t errlen);

#endif
