/* Image functions for map(): resize, center_crop, random_crop and normalize.
 *
 * Every one works on component 0 of the element, an image of uint8 [H, W, C] (channels last,
 * any C >= 1; a uint8 [H, W] counts as one channel and keeps its rank), and keeps the other
 * components as they are, so an (image, label) tuple passes through with its label.
 *
 *   map(resize, H, W)            bilinear to H x W, uint8 out (below)
 *   map(center_crop, H, W)       the H x W window at ((h - H) / 2, (w - W) / 2), rounded down
 *   map(random_crop, H, W[, S])  an H x W window at a pseudo-random offset, uniform over the
 *                                valid ones, drawn from pipe_fn_seed() (map.h): reproducible per
 *                                split in distributed_epoch, and with S elsewhere
 *   map(normalize, MEAN, STD)    float32 (x / 255 - MEAN) / STD, MEAN and STD each a number or a
 *                                list of C numbers (one per channel, e.g. [0.485, 0.456, 0.406])
 *
 * A crop larger than the image is an error naming both sizes (resize first); nothing is padded.
 * Pure and thread-safe; no state between elements. */
#ifndef SLUICE_PIPELINE_IMAGE_H
#define SLUICE_PIPELINE_IMAGE_H

#include "sluice/sluice.h"

#include <stddef.h>
#include <stdint.h>

/* The largest output side resize and the crops accept. */
#define PIPE_IMAGE_MAX_SIDE 65535
/* The most channels normalize takes per-channel values for. */
#define PIPE_NORMALIZE_MAX_CHANNELS 16

/* Bilinear resize of src (h x w x c, row-major) into dst (oh x ow x c), with pixel centers at
 * half-integers, as OpenCV's INTER_LINEAR and tf.image.resize(antialias=False) do: output x
 * samples source coordinate sx = (x + 0.5) * ((double)w / ow) - 0.5, clamped to [0, w - 1];
 * x0 = floor(sx), x1 = min(x0 + 1, w - 1), fx = sx - x0; likewise y. The value, in double, is
 *   (1 - fy) * ((1 - fx) * s[y0][x0] + fx * s[y0][x1]) + fy * ((1 - fx) * s[y1][x0] + fx *
 * s[y1][x1]) rounded half up. No antialiasing when shrinking. tab must hold 3 * ow entries' scratch
 * (see image.c); returns 0 or SLUICE_ERR_NOMEM. */
int pipe_image_resize(const uint8_t *src, int64_t h, int64_t w, int64_t c, uint8_t *dst, int64_t oh,
                      int64_t ow);

/* Crops buf (h x w x c) in place to the oh x ow window at (top, left), which must lie inside. */
void pipe_image_crop(uint8_t *buf, int64_t h, int64_t w, int64_t c, int64_t top, int64_t left,
                     int64_t oh, int64_t ow);

/* random_crop's offset for a window of oh x ow in h x w (oh <= h, ow <= w) from a seed. */
void pipe_image_crop_offset(uint64_t seed, int64_t h, int64_t w, int64_t oh, int64_t ow,
                            int64_t *top, int64_t *left);

/* The map functions and their argument checks, registered by pipe_builtins_register(). */
int pipe_fn_resize(struct sluice_element *e, const struct sluice_fn_args *a, void *user, char *err,
                   size_t errlen);
int pipe_fn_center_crop(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                        char *err, size_t errlen);
int pipe_fn_random_crop(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                        char *err, size_t errlen);
int pipe_fn_normalize(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                      char *err, size_t errlen);
int pipe_check_image_size(const struct sluice_fn_args *a, char *err, size_t errlen);
int pipe_check_normalize(const struct sluice_fn_args *a, char *err, size_t errlen);

#endif
