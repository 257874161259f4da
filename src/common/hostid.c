/* Host identity: see hostid.h. */

#include "common/hostid.h"

#include "common/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int hostid_check(const char *field, const char *id, char *err, size_t errlen)
{
    size_t n = strlen(id);
    if (n == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: empty", field);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c < 0x21 || c > 0x7e)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s: byte %zu is not printable ASCII without spaces", field, i);
    }
    if (n > HOSTID_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: %zu bytes, longer than the limit of %d", field, n, HOSTID_MAX);
    return 0;
}

int hostid_compose(const char *boot_id, const char *netns, char *out, size_t outlen, char *err,
                   size_t errlen)
{
    size_t n = strlen(boot_id);
    while (n > 0 && (boot_id[n - 1] == '\n' || boot_id[n - 1] == '\r'))
        n--;
    bool ok = n == 36;
    for (size_t i = 0; ok && i < n; i++) {
        char c = boot_id[i];
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        ok = dash ? c == '-'
                  : (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    }
    if (!ok)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "the kernel's boot id is not a UUID");
    unsigned long long ino = 0;
    bool have_ns = netns && netns[0];
    if (have_ns) {
        /* "net:[4026531840]" */
        const char *p = netns;
        if (strncmp(p, "net:[", 5) != 0 || p[5] < '0' || p[5] > '9')
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "the network namespace link is not of the form net:[INODE]");
        p += 5;
        while (*p >= '0' && *p <= '9') {
            if (ino > (~0ull - 9) / 10)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "the network namespace inode is out of range");
            ino = ino * 10 + (unsigned long long)(*p++ - '0');
        }
        if (strcmp(p, "]") != 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "the network namespace link is not of the form net:[INODE]");
    }
    int w = have_ns ? snprintf(out, outlen, "%.*s-net%llu", (int)n, boot_id, ino)
                    : snprintf(out, outlen, "%.*s", (int)n, boot_id);
    if (w < 0 || (size_t)w >= outlen || w > HOSTID_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "the host id does not fit");
    return 0;
}

/* The composed id, computed once. */
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static int detect_rc;
static char detect_id[HOSTID_MAX + 1];
static char detect_err[256];

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
