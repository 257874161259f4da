/* A test plugin: registers map "negate" (int64 scalars) and filter "positive", using only the
 * public API, the way an external plugin would. */
#include "sluice/sluice.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int read_i64(const struct sluice_element *e, int64_t *out, char *err, size_t errlen)
{
    if (sluice_element_num_components(e) != 1 || sluice_element_dtype(e, 0) != SLUICE_INT64 ||
        sluice_element_rank(e, 0) != 0) {
        snprintf(err, errlen, "expected an int64 scalar");
        return -EINVAL;
    }
    memcpy(out, sluice_element_data(e, 0, NULL), sizeof(*out));
    return 0;
}

static int negate(struct sluice_element *elem, const struct sluice_fn_args *args, void *user,
                  char *err, size_t errlen)
{
    int64_t v;
    int rc = read_i64(elem, &v, err, errlen);
    if (rc)
        return rc;
    return sluice_element_set_int64(elem, 0, (int64_t)(0 - (uint64_t)v));
}

static int positive(const struct sluice_element *elem, const struct sluice_fn_args *args,
                    void *user, int *keep, char *err, size_t errlen)
{
    int64_t v;
    int rc = read_i64(elem, &v, err, errlen);
    if (rc)
        return rc;
    *keep = v > 0;
    return 0;
}

int sluice_plugin_init(struct sluice_registry *registry)
{
    int rc = sluice_register_map(registry, "negate", 0, 0, negate, NULL);
    if (rc)
        return rc;
    return sluice_register_filter(registry, "positive", 0, 0, positive, NULL);
}
