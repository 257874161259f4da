/* Host identity, the pure part: checking and composing ids (see hostid.h). Reading this
 * machine's id is hostid_get.c. */

#include "common/hostid.h"

#include "common/error.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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
