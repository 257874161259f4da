/* Feeds arbitrary bytes to decode_jpeg as a JPEG (bounded to 2^20 pixels), then runs whatever
 * decodes through resize, center_crop, random_crop and normalize. Every call must either succeed
 * with a tensor whose dtype, shape and length agree, or fail with a message; never crash. The
 * first four bytes pick the output height and width (1..64 each) and the random seed; the rest is
 * the JPEG. */
#include "fuzz.h"

#include "common/error.h"
#include "pipeline/element.h"
#include "pipeline/registry.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sluice_registry *reg;

static int call(const char *name, struct sluice_element *e, const struct pipe_value *args,
                size_t nargs)
{
    const struct pipe_fn *fn = pipe_registry_find(reg, name);
    if (!fn)
        abort();
    struct sluice_fn_args a = {args, nargs};
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = fn->map(e, &a, fn->user, err, sizeof(err));
    if (rc != 0 && err[0] == '\0') {
        fprintf(stderr, "fuzz_image: %s failed without a message\n", name);
        abort();
    }
    return rc;
}

/* Component 0 is a uint8 image [h, w, 3] (or float32 after normalize) that its buffer holds. */
static void check(const struct sluice_element *e, enum sluice_dtype dtype, int64_t h, int64_t w)
{
    const struct pipe_tensor *t = &e->t[0];
    if (e->n != 2 || t->dtype != dtype || t->rank != 3 || (h >= 0 && t->shape[0] != h) ||
        (w >= 0 && t->shape[1] != w) || t->shape[2] != 3 ||
        t->len != (size_t)(t->shape[0] * t->shape[1] * 3) * sluice_dtype_size(dtype) ||
        e->t[1].dtype != SLUICE_INT64) {
        fprintf(stderr, "fuzz_image: bad result tensor\n");
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!reg && pipe_registry_new(&reg) != 0)
        abort();
    if (size < 4)
        return 0;
    int64_t oh = data[0] % 64 + 1, ow = data[1] % 64 + 1, seed = data[2] << 8 | data[3];
    struct sluice_element e;
    pipe_elem_init(&e);
    if (sluice_element_set_bytes(&e, 0, data + 4, size - 4) != 0 ||
        sluice_element_set_int64(&e, 1, 7) != 0)
        abort();
    struct pipe_value max = {.kind = PIPE_VAL_INT, .i = 1 << 20};
    if (call("decode_jpeg", &e, &max, 1) == 0) {
        check(&e, SLUICE_UINT8, -1, -1);
        int64_t h = e.t[0].shape[0], w = e.t[0].shape[1];
        struct sluice_element copy;
        pipe_elem_init(&copy);
        if (pipe_elem_copy(&copy, &e) != 0)
            abort();
        struct pipe_value size2[3] = {{.kind = PIPE_VAL_INT, .i = oh},
                                      {.kind = PIPE_VAL_INT, .i = ow},
                                      {.kind = PIPE_VAL_INT, .i = seed}};
        bool fits = oh <= h && ow <= w;
        if ((call("center_crop", &copy, size2, 2) == 0) != fits)
            abort();
        if (fits)
            check(&copy, SLUICE_UINT8, oh, ow);
        if ((call("random_crop", &e, size2, 3) == 0) != fits)
            abort();
        if (call("resize", &e, size2, 2) != 0)
            abort();
        check(&e, SLUICE_UINT8, oh, ow);
        struct pipe_value norm[2] = {{.kind = PIPE_VAL_FLOAT, .f = 0.5},
                                     {.kind = PIPE_VAL_FLOAT, .f = 0.25}};
        if (call("normalize", &e, norm, 2) != 0)
            abort();
        check(&e, SLUICE_FLOAT32, oh, ow);
        pipe_elem_release(&copy);
    }
    pipe_elem_release(&e);
    return 0;
}
