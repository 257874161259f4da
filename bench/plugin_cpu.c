/* A benchmark plugin: registers map "cpu_us(N)", which spins until its thread has used N
 * microseconds of CPU time and passes the element on. Unlike the built-in sleep_us, which spins
 * on the wall clock, an element costs the same CPU whether or not the producer's thread is
 * preempted, so CPU time measured around a read counts elements exactly (bench/xtcache.sh). */
#include "sluice/sluice.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cpu_us(struct sluice_element *elem, const struct sluice_fn_args *args, void *user,
                  char *err, size_t errlen)
{
    (void)elem;
    (void)user;
    int64_t us;
    if (sluice_fn_arg_int(args, 0, &us) != 0 || us < 0 || us > 10000000) {
        snprintf(err, errlen, "cpu_us: expected microseconds from 0 to 10000000");
        return -EINVAL;
    }
    int64_t deadline = thread_cpu_ns() + us * 1000;
    while (thread_cpu_ns() < deadline) {
    }
    return 0;
}

int sluice_plugin_init(struct sluice_registry *registry)
{
    return sluice_register_map(registry, "cpu_us", 1, 1, cpu_us, NULL);
}
