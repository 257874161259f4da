/* This process's host id, read from the environment or /proc (see hostid.h); checking and
 * composing it is hostid.c. */

#include "common/hostid.h"

#include "common/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The composed id, computed once. */
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static int detect_rc;
static char detect_id[HOSTID_MAX + 1];
static char detect_err[SLUICE_ERRMSG_SIZE];

static void detect(void)
{
    static const char boot_path[] = "/proc/sys/kernel/random/boot_id";
    char boot[128] = "";
    FILE *f = fopen(boot_path, "r");
    if (!f) {
        detect_rc = err_set(detect_err, sizeof detect_err, -errno, "reading %s: %s", boot_path,
                            strerror(errno));
        return;
    }
    if (!fgets(boot, sizeof boot, f)) {
        fclose(f);
        detect_rc = err_set(detect_err, sizeof detect_err, SLUICE_ERR_INVALID, "reading %s: empty",
                            boot_path);
        return;
    }
    fclose(f);
    /* Without the namespace link (a kernel without it, or /proc of another view) the boot id
     * alone names the machine. */
    char ns[128] = "";
    ssize_t k = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    ns[k > 0 ? k : 0] = '\0';
    detect_rc =
        hostid_compose(boot, ns, detect_id, sizeof detect_id, detect_err, sizeof detect_err);
}

int hostid_get(char *out, size_t outlen, char *err, size_t errlen)
{
    const char *env = getenv(HOSTID_ENV);
    if (env) {
        int rc = hostid_check(HOSTID_ENV, env, err, errlen);
        if (rc < 0)
            return rc;
        if (strlen(env) >= outlen)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: does not fit", HOSTID_ENV);
        memcpy(out, env, strlen(env) + 1);
        return 0;
    }
    pthread_once(&detect_once, detect);
    if (detect_rc < 0)
        return err_set(err, errlen, detect_rc, "%s", detect_err);
    if (strlen(detect_id) >= outlen)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "host id does not fit");
    memcpy(out, detect_id, strlen(detect_id) + 1);
    return 0;
}
