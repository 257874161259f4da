#include "read_checkpoint.h"

#include "common/crc32c.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'S', 'L', 'R', 'E', 'A', 'D', 'C', 'K'};
#define VERSION 1u
#define HEADER (8 + 4 + 8 + 8 + 4)
/* A checkpoint file larger than this is refused before it is read. */
#define MAX_FILE (64u << 20)

void read_ckpt_release(struct read_ckpt *c)
{
    free(c->pos);
    memset(c, 0, sizeof *c);
}

static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int read_ckpt_encode(const struct read_ckpt *c, uint8_t **out, size_t *len)
{
    if (c->pos_len > UINT32_MAX)
        return SLUICE_ERR_INVALID;
    size_t n = HEADER + c->pos_len + 4;
    uint8_t *b = malloc(n);
    if (!b)
        return SLUICE_ERR_NOMEM;
    memcpy(b, MAGIC, 8);
    put_le(b + 8, VERSION, 4);
    put_le(b + 12, c->output_bytes, 8);
    put_le(b + 20, c->printed, 8);
    put_le(b + 28, c->pos_len, 4);
    if (c->pos_len)
        memcpy(b + HEADER, c->pos, c->pos_len);
    put_le(b + n - 4, crc32c(b, n - 4), 4);
    *out = b;
    *len = n;
    return 0;
}

int read_ckpt_decode(const uint8_t *p, size_t len, struct read_ckpt *c, char *err, size_t errlen)
{
    if (len < 8 || memcmp(p, MAGIC, 8) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "not a checkpoint of 'sluice read'");
    if (len < HEADER + 4)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "cut short (%zu bytes)", len);
    if (crc32c(p, len - 4) != (uint32_t)get_le(p + len - 4, 4))
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "checksum mismatch (damaged)");
    uint32_t version = (uint32_t)get_le(p + 8, 4);
    if (version != VERSION)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "version %u, this sluice reads version %u",
                       version, VERSION);
    uint64_t pos_len = get_le(p + 28, 4);
    if (pos_len != len - HEADER - 4)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "its position has a wrong length");
    c->output_bytes = get_le(p + 12, 8);
    c->printed = get_le(p + 20, 8);
    c->pos = malloc(pos_len ? pos_len : 1);
    if (!c->pos)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    memcpy(c->pos, p + HEADER, pos_len);
    c->pos_len = pos_len;
    return 0;
}

int read_ckpt_load(const char *path, struct read_ckpt *c, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, errlen, -errno, "checkpoint %s: %s", path, strerror(errno));
    }
    struct stat st;
    int rc = 0;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) < 0) {
        rc = err_set(err, errlen, -errno, "checkpoint %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MAX_FILE) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint %s: not a checkpoint file", path);
        goto out;
    }
    size_t n = (size_t)st.st_size, got = 0;
    buf = malloc(n ? n : 1);
    if (!buf) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = err_set(err, errlen, r < 0 ? -errno : SLUICE_ERR_TRUNCATED, "checkpoint %s: %s",
                         path, r < 0 ? strerror(errno) : "cut short");
            goto out;
        }
        got += (size_t)r;
    }
    char why[SLUICE_ERRMSG_SIZE];
    rc = read_ckpt_decode(buf, n, c, why, sizeof why);
    if (rc < 0)
        err_set(err, errlen, rc, "checkpoint %s: %s", path, why);
    else
        rc = 1;
out:
    free(buf);
    close(fd);
    return rc;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int read_ckpt_store(const char *path, const struct read_ckpt *c, char *err, size_t errlen)
{
    uint8_t *b = NULL;
    size_t n = 0;
    int rc = read_ckpt_encode(c, &b, &n);
    if (rc < 0)
        return err_set(err, errlen, rc, "checkpoint %s: %s", path, sluice_strerror(rc));
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5), *dir = strdup(path);
    if (!tmp || !dir) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = err_set(err, errlen, -errno, "checkpoint %s: %s", tmp, strerror(errno));
        goto out;
    }
    rc = write_all(fd, b, n);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0) {
        err_set(err, errlen, rc, "checkpoint %s: %s", path, strerror(-rc));
        unlink(tmp);
        goto out;
    }
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) < 0)
            rc = err_set(err, errlen, -errno, "checkpoint %s: syncing its directory: %s", path,
                         strerror(errno));
        close(dfd);
    }
out:
    free(tmp);
    free(dir);
    free(b);
    return rc;
}
