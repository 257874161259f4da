/* A test plugin: registers map "nap_us(N)", which sleeps N microseconds and passes the element
 * on. Unlike the built-in sleep_us it does not burn a core, so a test can make a read take
 * seconds (long enough to break the network under it) with many workers on a small machine. */
#include "sluice/sluice.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

static int nap_us(struct sluice_element *elem, const struct sluice_fn_args *args, void *user,
                  char *err, size_t errlen)
{
    int64_t us;
    if (sluice_fn_arg_int(args, 0, &us) != 0 || us < 0 || us > 10000000) {
        snprintf(err, errlen, "nap_us: expected microseconds from 0 to 10000000");
        return -EINVAL;
    }
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return 0;
}

int sluice_plugin_init(struct sluice_registry *registry)
{
    return sluice_register_map(registry, "nap_us", 1, 1, nap_us, NULL);
}
