/* Host identity (docs/reading.md "Local workers"): a string that names "this host", so a reader can
 * tell which workers run beside it. Two processes are on the same host when they share the kernel
 * (its boot id) and the network namespace (the inode of /proc/self/ns/net): the same machine
 * and the same view of the network, as a trainer and a worker in one pod or on one machine are.
 * Two containers with their own network namespaces on one machine are different hosts.
 *
 * The environment variable SLUICE_HOST_ID replaces the detected identity: an operator names
 * hosts (a node name), and tests simulate several hosts on one machine.
 *
 * hostid_check and hostid_compose are pure and thread-safe; hostid_get reads the environment
 * and /proc and may be called from any thread (the result is computed once per process). */
#ifndef SLUICE_COMMON_HOSTID_H
#define SLUICE_COMMON_HOSTID_H

#include <stddef.h>

/* The longest host id in bytes; buffers hold HOSTID_MAX + 1. */
#define HOSTID_MAX 127

/* The environment variable that overrides the detected host id. */
#define HOSTID_ENV "SLUICE_HOST_ID"

/* Checks a host id: 1 to HOSTID_MAX bytes of printable ASCII without spaces (0x21 to 0x7e).
 * Returns 0, or SLUICE_ERR_INVALID with a message naming field in err:
 *   "SLUICE_HOST_ID: empty"
 *   "SLUICE_HOST_ID: byte 3 is not printable ASCII without spaces"
 *   "SLUICE_HOST_ID: 200 bytes, longer than the limit of 127" */
int hostid_check(const char *field, const char *id, char *err, size_t errlen);

/* Composes the detected host id from the contents of /proc/sys/kernel/random/boot_id (boot_id,
 * a UUID, possibly followed by a newline) and the target of the link /proc/self/ns/net (netns,
 * "net:[4026531840]"): "BOOTID-net4026531840" ("BOOTID" alone when netns is NULL or empty).
 * Writes it into out (outlen bytes, at least HOSTID_MAX + 1). Returns 0, or SLUICE_ERR_INVALID
 * with a message when boot_id is not 36 characters of hex digits and dashes or netns is not of
 * that form. */
int hostid_compose(const char *boot_id, const char *netns, char *out, size_t outlen, char *err,
                   size_t errlen);

/* This process's host id: SLUICE_HOST_ID when set (it must pass hostid_check), else the
 * composed one. Writes it into out (outlen bytes, at least HOSTID_MAX + 1). Returns 0, or a
 * negative code with a message ("SLUICE_HOST_ID: empty", "reading
 * /proc/sys/kernel/random/boot_id: No such file or directory"). The environment is read on
 * every call (cheap); /proc is read once per process. */
int hostid_get(char *out, size_t outlen, char *err, size_t errlen);

#endif
