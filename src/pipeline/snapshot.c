/* Distributed snapshots on disk: chunk files, snapshot.json, manifest.json and FAILED.
 *
 * Chunk files are streamed through a stdio buffer in both directions; only one element's record is
 * held in memory at a time, and a reader never allocates more than the bytes left in the file for
 * a record. JSON files and FAILED are written whole to a temporary file beside their final name,
 * synced and renamed, and the directory is synced, so a reader sees the old file or the new one.
 * Temporary names carry the pid, a per-process counter and random bits. */
#include "snapshot.h"

#include "codec.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "element.h"
#include "files.h"
#include "format.h"
#include "objstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MAGIC_LEN 8
#define RECORD_HEADER 8u
#define FOOTER_MARK 0xffffffffu
#define FOOTER_LEN 24u
/* The longest record a reader accepts and a writer writes. */
#define MAX_RECORD ((uint64_t)CODEC_MAX_ELEMENT + ((uint64_t)1 << 20))
/* snapshot.json and manifest.json are read whole; a larger one is not ours. */
#define MAX_JSON ((size_t)256 << 20)
#define STDIO_BUF ((size_t)256 << 10)

static const uint8_t magic[MAGIC_LEN] = {'S', 'L', 'S', 'N', 'A', 'P', '0', '1'};

static void store_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_le64(const uint8_t *p)
{
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

/* ---- paths, directories, atomic files ---- */

/* The length of dir without the slashes that end it when it is a URL (an object's key takes
 * "a//b" literally, a file system does not). */
static int dir_len(const char *dir)
{
    size_t n = strlen(dir);
    if (obj_is_url(dir))
        while (n > 0 && dir[n - 1] == '/')
            n--;
    return (int)n;
}

void snap_chunk_path(const char *dir, uint64_t index, char *out, size_t outlen)
{
    snprintf(out, outlen, "%.*s/" SNAP_CHUNKS_DIR "/chunk-%012" PRIu64, dir_len(dir), dir, index);
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* A suffix no other writer on this machine uses at the same time: pid, a counter of this
 * process, and random bits (two processes in different pid namespaces may share a pid). */
static void unique_suffix(char *out, size_t outlen)
{
    static atomic_uint_fast64_t counter;
    uint64_t n = atomic_fetch_add(&counter, 1);
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)&r;
    }
    snprintf(out, outlen, "%ld.%" PRIu64 ".%016" PRIx64, (long)getpid(), n, r);
}

/* mkdir -p: creates path and its missing parents. */
static int make_dirs(const char *path, char *err, size_t errlen)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: bad directory name", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            return err_set(err, errlen, -e, "mkdir %s: %s", buf, strerror(e));
        }
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        return err_set(err, errlen, -e, "%s: %s", path, strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return err_set(err, errlen, -ENOTDIR, "%s: %s", path, strerror(ENOTDIR));
    return 0;
}

static int sync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return err_set(err, errlen, -e, "open %s: %s", dir, strerror(e));
    }
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        rc = err_set(err, errlen, -e, "fsync %s: %s", dir, strerror(e));
    }
    close(fd);
    return rc;
}

/* Writes DIR/NAME atomically: a unique temporary file in DIR, fsync, rename, fsync of DIR. */
static int write_atomic(const char *dir, const char *name, const char *data, size_t len, char *err,
                        size_t errlen)
{
    if (obj_is_url(dir)) {
        /* An object appears whole when its PUT succeeds: no temporary name is needed. */
        char *url = NULL;
        if (asprintf(&url, "%.*s/%s", dir_len(dir), dir, name) < 0)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        int rc = obj_put(url, data, len, err, errlen);
        free(url);
        return rc;
    }
    char sfx[64], tmpname[256];
    unique_suffix(sfx, sizeof sfx);
    snprintf(tmpname, sizeof tmpname, ".%s.tmp.%s", name, sfx);
    char *tmp = join(dir, tmpname);
    char *final = join(dir, name);
    int rc = 0;
    if (!tmp || !final) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        rc = err_set(err, errlen, -e, "create %s: %s", tmp, strerror(e));
        goto out;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = errno;
            rc = err_set(err, errlen, -e, "write %s: %s", tmp, strerror(e));
            break;
        }
        done += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0) {
        int e = errno;
        rc = err_set(err, errlen, -e, "fsync %s: %s", tmp, strerror(e));
    }
    if (close(fd) != 0 && rc == 0) {
        int e = errno;
        rc = err_set(err, errlen, -e, "close %s: %s", tmp, strerror(e));
    }
    if (rc == 0 && rename(tmp, final) != 0) {
        int e = errno;
        rc = err_set(err, errlen, -e, "rename %s to %s: %s", tmp, final, strerror(e));
    }
    if (rc != 0)
        unlink(tmp);
    else
        rc = sync_dir(dir, err, errlen);
out:
    free(tmp);
    free(final);
    return rc;
}

/* read_small of an object: DIR is a URL, DIR/NAME an object read front to back. */
static int read_small_object(const char *dir, const char *name, char **out, size_t *outlen,
                             char *err, size_t errlen)
{
    char *url = NULL;
    if (asprintf(&url, "%.*s/%s", dir_len(dir), dir, name) < 0)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    struct obj_reader *r = NULL;
    int rc = obj_open(url, NULL, &r, err, errlen);
    if (rc == SLUICE_ERR_NOT_FOUND)
        rc = -ENOENT; /* err keeps the server's answer */
    char *buf = NULL;
    if (rc == 0 && obj_size(r) > MAX_JSON)
        rc = err_set(err, errlen, SLUICE_ERR_CORRUPT, "%s: larger than %zu bytes", url, MAX_JSON);
    if (rc == 0 && !(buf = malloc((size_t)obj_size(r) + 1)))
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    size_t len = 0;
    while (rc == 0) {
        char why[SLUICE_ERRMSG_SIZE];
        ssize_t n = obj_read(r, buf + len, (size_t)obj_size(r) - len, why, sizeof why);
        if (n < 0)
            rc = err_set(err, errlen, (int)n, "%s: offset %zu: %s", url, len, why);
        else if (n == 0)
            break;
        else
            len += (size_t)n;
    }
    obj_close(r);
    if (rc == 0) {
        buf[len] = '\0';
        *out = buf;
        *outlen = len;
        buf = NULL;
    }
    free(buf);
    free(url);
    return rc;
}

/* Reads DIR/NAME whole (at most MAX_JSON bytes), NUL-terminated. -ENOENT when it is missing. */
static int read_small(const char *dir, const char *name, char **out, size_t *outlen, char *err,
                      size_t errlen)
{
    if (obj_is_url(dir))
        return read_small_object(dir, name, out, outlen, err, errlen);
    char *path = join(dir, name);
    if (!path)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    int rc = 0;
    char *buf = NULL;
    FILE *f = fopen(path, "rbe");
    if (!f) {
        int e = errno;
        rc = err_set(err, errlen, -e, "%s: %s", path, strerror(e));
        goto out;
    }
    size_t cap = 4096, len = 0;
    buf = malloc(cap);
    for (;;) {
        if (!buf) {
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
            break;
        }
        if (len + 1 == cap) {
            if (cap > MAX_JSON) {
                rc = err_set(err, errlen, SLUICE_ERR_CORRUPT, "%s: larger than %zu bytes", path,
                             MAX_JSON);
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - 1 - len, f);
        len += r;
        if (r == 0) {
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                rc = err_set(err, errlen, -e, "read %s: %s", path, strerror(e));
            }
            break;
        }
    }
    fclose(f);
    if (rc == 0) {
        buf[len] = '\0';
        *out = buf;
        *outlen = len;
        buf = NULL;
    }
out:
    free(buf);
    free(path);
    return rc;
}

int snap_read_small(const char *dir, const char *name, char **out, size_t *len, char *err,
                    size_t errlen)
{
    *out = NULL;
    *len = 0;
    return read_small(dir, name, out, len, err, errlen);
}

/* ---- snapshot.json ---- */

void snap_meta_release(struct snap_meta *m)
{
    free(m->pipeline);
    m->pipeline = NULL;
}

int snap_meta_read(const char *dir, struct snap_meta *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    char *text = NULL;
    size_t len = 0;
    int rc = read_small(dir, SNAP_META_FILE, &text, &len, err, errlen);
    if (rc == -ENOENT)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "%s: not a snapshot (no %s)", dir,
                       SNAP_META_FILE);
    if (rc)
        return rc;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!root)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "%s/%s: line %d: %s", dir, SNAP_META_FILE,
                       jerr.line, jerr.text);
    json_t *format = json_object_get(root, "format");
    json_t *id = json_object_get(root, "dataset_id");
    json_t *pipeline = json_object_get(root, "pipeline");
    json_t *chunks = json_object_get(root, "chunks");
    if (!json_is_integer(format) || !json_is_string(id) || !json_is_string(pipeline) ||
        !json_is_integer(chunks) || json_integer_value(chunks) < 0 ||
        json_string_length(id) >= sizeof m->dataset_id) {
        rc = err_set(err, errlen, SLUICE_ERR_CORRUPT,
                     "%s/%s: missing or bad format, dataset_id, pipeline or chunks", dir,
                     SNAP_META_FILE);
        goto out;
    }
    if (json_integer_value(format) != SNAP_FORMAT) {
        rc = err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                     "%s/%s: snapshot format %" JSON_INTEGER_FORMAT " (this build reads %d)", dir,
                     SNAP_META_FILE, json_integer_value(format), SNAP_FORMAT);
        goto out;
    }
    m->pipeline = strdup(json_string_value(pipeline));
    if (!m->pipeline) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        goto out;
    }
    m->format = SNAP_FORMAT;
    memcpy(m->dataset_id, json_string_value(id), json_string_length(id) + 1);
    m->chunks = (uint64_t)json_integer_value(chunks);
out:
    json_decref(root);
    return rc;
}

/* Writes m as DIR/snapshot.json (atomically), whatever is there. */
static int meta_write_file(const char *dir, const struct snap_meta *m, char *err, size_t errlen)
{
    json_t *root =
        json_pack("{s:i, s:s, s:s, s:I}", "format", SNAP_FORMAT, "dataset_id", m->dataset_id,
                  "pipeline", m->pipeline, "chunks", (json_int_t)m->chunks);
    if (!root)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: snapshot meta does not encode (text not UTF-8?)", dir);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    if (!text)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    size_t len = strlen(text);
    char *nl = realloc(text, len + 2);
    if (!nl) {
        free(text);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    }
    text = nl;
    text[len++] = '\n';
    text[len] = '\0';
    int rc = write_atomic(dir, SNAP_META_FILE, text, len, err, errlen);
    free(text);
    return rc;
}

static bool meta_valid(const struct snap_meta *m)
{
    return m->pipeline && memchr(m->dataset_id, '\0', sizeof m->dataset_id) != NULL &&
           m->chunks <= (uint64_t)INT64_MAX;
}

/* Whether DIR's snapshot.json, if any, is of m's dataset and chunk count: 0 (also when there is
 * none), SLUICE_ERR_EXISTS, or the read's failure. */
static int meta_same(const char *dir, const struct snap_meta *m, char *err, size_t errlen)
{
    struct snap_meta old;
    int rc = snap_meta_read(dir, &old, err, errlen);
    if (rc == SLUICE_ERR_NOT_FOUND)
        return 0;
    if (rc)
        return rc;
    if (strcmp(old.dataset_id, m->dataset_id) != 0 || old.chunks != m->chunks)
        rc = err_set(err, errlen, SLUICE_ERR_EXISTS,
                     "%s: holds a snapshot of dataset %s with %" PRIu64
                     " chunks, not of dataset %s with %" PRIu64 " chunks",
                     dir, old.dataset_id, old.chunks, m->dataset_id, m->chunks);
    snap_meta_release(&old);
    return rc;
}

int snap_objects_begin(const char *dir, const struct snap_meta *m, char *err, size_t errlen)
{
    if (!obj_is_url(dir))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: not a URL", dir);
    if (!meta_valid(m))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: bad snapshot meta", dir);
    int rc = meta_same(dir, m, err, errlen);
    /* An earlier save's manifest goes first (a reader never takes the chunks being put for a
     * complete snapshot), then its FAILED; snapshot.json (of the same dataset and chunk count)
     * is put over the old one, so a reader started now waits for the chunks. */
    static const char *const names[] = {SNAP_MANIFEST_FILE, SNAP_FAILED_FILE};
    for (size_t i = 0; rc == 0 && i < sizeof names / sizeof names[0]; i++) {
        char *url = NULL;
        if (asprintf(&url, "%.*s/%s", dir_len(dir), dir, names[i]) < 0)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        rc = obj_delete(url, err, errlen);
        free(url);
    }
    if (rc == 0)
        rc = meta_write_file(dir, m, err, errlen);
    return rc;
}

int snap_meta_write(const char *dir, const struct snap_meta *m, char *err, size_t errlen)
{
    if (!m->pipeline || memchr(m->dataset_id, '\0', sizeof m->dataset_id) == NULL ||
        m->chunks > (uint64_t)INT64_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: bad snapshot meta", dir);
    int rc = 0;
    if (!obj_is_url(dir)) {
        rc = make_dirs(dir, err, errlen);
        if (rc)
            return rc;
        char *chunks_dir = join(dir, SNAP_CHUNKS_DIR);
        if (!chunks_dir)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        rc = make_dirs(chunks_dir, err, errlen);
        free(chunks_dir);
        if (rc)
            return rc;
    }

    struct snap_meta old;
    rc = snap_meta_read(dir, &old, err, errlen);
    if (rc == 0) {
        bool same = strcmp(old.dataset_id, m->dataset_id) == 0 && old.chunks == m->chunks;
        if (!same)
            rc = err_set(err, errlen, SLUICE_ERR_EXISTS,
                         "%s: holds a snapshot of dataset %s with %" PRIu64
                         " chunks, not of dataset %s with %" PRIu64 " chunks",
                         dir, old.dataset_id, old.chunks, m->dataset_id, m->chunks);
        snap_meta_release(&old);
        return rc;
    }
    if (rc != SLUICE_ERR_NOT_FOUND)
        return rc;

    return meta_write_file(dir, m, err, errlen);
}

/* ---- chunk writer ---- */

struct snap_writer {
    FILE *f;
    bool object; /* final is a URL: f is an unnamed temporary file, put whole at commit */
    char *tmp, *final, *chunks_dir;
    uint64_t count, off;
    uint32_t crc; /* over every byte written so far */
    struct pipe_buf rec, scratch;
};

static void writer_free(struct snap_writer *w)
{
    free(w->tmp);
    free(w->final);
    free(w->chunks_dir);
    pipe_buf_release(&w->rec);
    pipe_buf_release(&w->scratch);
    free(w);
}

static int writer_put(struct snap_writer *w, const void *data, size_t len, char *err, size_t errlen)
{
    if (len && fwrite(data, 1, len, w->f) != len) {
        int e = errno ? errno : EIO;
        return err_set(err, errlen, -e, "write %s: %s", w->tmp, strerror(e));
    }
    w->crc = crc32c_extend(w->crc, data, len);
    w->off += len;
    return 0;
}

/* An unnamed temporary file in TMPDIR (default /tmp), for a chunk put whole at its commit. */
static int spool_open(char *err, size_t errlen)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    int fd = open(tmp, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    char path[4096];
    snprintf(path, sizeof path, "%s/.sluice-chunk-XXXXXX", tmp);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return err_set(err, errlen, -e, "creating a temporary file in %s: %s", tmp, strerror(e));
    }
    unlink(path);
    return fd;
}

/* snap_writer_open of a chunk object: spooled to a temporary file, put at commit. */
static int writer_open_object(struct snap_writer *w, const char *dir, uint64_t index, char *err,
                              size_t errlen)
{
    char final[4096];
    snap_chunk_path(dir, index, final, sizeof final);
    w->object = true;
    w->final = strdup(final);
    w->tmp = strdup(final); /* named in messages */
    if (!w->final || !w->tmp)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    int fd = spool_open(err, errlen);
    if (fd < 0)
        return fd;
    w->f = fdopen(fd, "w+b");
    if (!w->f) {
        int e = errno;
        close(fd);
        return err_set(err, errlen, -e, "fdopen: %s", strerror(e));
    }
    setvbuf(w->f, NULL, _IOFBF, STDIO_BUF);
    return 0;
}

/* Puts the spooled chunk (its footer written and flushed) as its object. */
static int writer_put_object(struct snap_writer *w, char *err, size_t errlen)
{
    void *map = mmap(NULL, (size_t)w->off, PROT_READ, MAP_SHARED, fileno(w->f), 0);
    if (map == MAP_FAILED) {
        int e = errno;
        return err_set(err, errlen, -e, "snapshot chunk %s: mapping its temporary file: %s",
                       w->final, strerror(e));
    }
    int rc = obj_put(w->final, map, (size_t)w->off, err, errlen);
    munmap(map, (size_t)w->off);
    return rc;
}

int snap_writer_open(const char *dir, uint64_t index, struct snap_writer **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    struct snap_writer *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    if (obj_is_url(dir)) {
        int rc = writer_open_object(w, dir, index, err, errlen);
        if (rc == 0)
            rc = writer_put(w, magic, MAGIC_LEN, err, errlen);
        if (rc) {
            snap_writer_abort(w);
            return rc;
        }
        *out = w;
        return 0;
    }
    char final[4096], sfx[64];
    snap_chunk_path(dir, index, final, sizeof final);
    unique_suffix(sfx, sizeof sfx);
    char tmpname[128];
    snprintf(tmpname, sizeof tmpname, ".chunk-%012" PRIu64 ".tmp.%s", index, sfx);
    w->chunks_dir = join(dir, SNAP_CHUNKS_DIR);
    w->final = strdup(final);
    w->tmp = w->chunks_dir ? join(w->chunks_dir, tmpname) : NULL;
    int rc = 0;
    if (!w->chunks_dir || !w->final || !w->tmp) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    rc = make_dirs(w->chunks_dir, err, errlen);
    if (rc)
        goto fail;
    int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        rc = err_set(err, errlen, -e, "create %s: %s", w->tmp, strerror(e));
        goto fail;
    }
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        int e = errno;
        close(fd);
        unlink(w->tmp);
        rc = err_set(err, errlen, -e, "fdopen %s: %s", w->tmp, strerror(e));
        goto fail;
    }
    setvbuf(w->f, NULL, _IOFBF, STDIO_BUF);
    rc = writer_put(w, magic, MAGIC_LEN, err, errlen);
    if (rc) {
        snap_writer_abort(w);
        return rc;
    }
    *out = w;
    return 0;
fail:
    writer_free(w);
    return rc;
}

int snap_writer_add(struct snap_writer *w, const struct sluice_element *e, char *err, size_t errlen)
{
    w->rec.len = 0;
    if (codec_append_elem(&w->rec, e, false, &w->scratch))
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    if (w->rec.len > MAX_RECORD)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE,
                       "snapshot chunk %s: element of %zu bytes is over the limit of %" PRIu64,
                       w->final, w->rec.len, MAX_RECORD);
    uint8_t head[RECORD_HEADER];
    store_le32(head, (uint32_t)w->rec.len);
    store_le32(head + 4, pipe_tfrecord_mask(crc32c(w->rec.p, w->rec.len)));
    int rc = writer_put(w, head, sizeof head, err, errlen);
    if (rc == 0)
        rc = writer_put(w, w->rec.p, w->rec.len, err, errlen);
    if (rc == 0)
        w->count++;
    return rc;
}

int snap_writer_commit(struct snap_writer *w, char *err, size_t errlen)
{
    uint8_t foot[FOOTER_LEN];
    store_le32(foot, FOOTER_MARK);
    store_le64(foot + 4, w->count);
    store_le64(foot + 12, w->off);
    store_le32(foot + 20, pipe_tfrecord_mask(crc32c_extend(w->crc, foot, 20)));
    int rc = writer_put(w, foot, sizeof foot, err, errlen);
    if (rc == 0 && fflush(w->f) != 0) {
        int e = errno ? errno : EIO;
        rc = err_set(err, errlen, -e, "write %s: %s", w->tmp, strerror(e));
    }
    if (w->object) {
        if (rc == 0)
            rc = writer_put_object(w, err, errlen);
        fclose(w->f);
        w->f = NULL;
        writer_free(w);
        return rc;
    }
    if (rc == 0 && fsync(fileno(w->f)) != 0) {
        int e = errno;
        rc = err_set(err, errlen, -e, "fsync %s: %s", w->tmp, strerror(e));
    }
    if (fclose(w->f) != 0 && rc == 0) {
        int e = errno ? errno : EIO;
        rc = err_set(err, errlen, -e, "close %s: %s", w->tmp, strerror(e));
    }
    w->f = NULL;
    if (rc == 0 && rename(w->tmp, w->final) != 0) {
        int e = errno;
        rc = err_set(err, errlen, -e, "rename %s to %s: %s", w->tmp, w->final, strerror(e));
    }
    if (rc != 0)
        unlink(w->tmp);
    else
        rc = sync_dir(w->chunks_dir, err, errlen);
    writer_free(w);
    return rc;
}

void snap_writer_abort(struct snap_writer *w)
{
    if (!w)
        return;
    if (w->f)
        fclose(w->f);
    if (!w->object && w->tmp)
        unlink(w->tmp);
    writer_free(w);
}

/* ---- chunk reader ---- */

struct snap_reader {
    FILE *f;
    char *path;
    uint64_t size; /* of the file, at open */
    uint64_t off;  /* of the next record */
    uint64_t last; /* of the record read last */
    uint64_t count;
    uint32_t crc;                 /* over every byte before off */
    uint32_t footer;              /* the footer's crc32c (unmasked), once read */
    int state;                    /* 0 reading, 1 at the end, < 0 failed */
    char msg[SLUICE_ERRMSG_SIZE]; /* the failure, repeated by later calls */
    struct pipe_buf rec, scratch;
};

static int reader_fail(struct snap_reader *r, int code, char *err, size_t errlen, const char *fmt,
                       ...) __attribute__((format(printf, 5, 6)));

static int reader_fail(struct snap_reader *r, int code, char *err, size_t errlen, const char *fmt,
                       ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(r->msg, sizeof r->msg, "snapshot chunk %s: %s", r->path, what);
    r->state = code;
    return err_set(err, errlen, code, "%s", r->msg);
}

/* Reads exactly len bytes at the current position. */
static int reader_get(struct snap_reader *r, void *buf, size_t len, char *err, size_t errlen)
{
    if (fread(buf, 1, len, r->f) == len)
        return 0;
    if (ferror(r->f)) {
        int e = errno ? errno : EIO;
        return reader_fail(r, -e, err, errlen, "read at offset %" PRIu64 ": %s", r->off,
                           strerror(e));
    }
    /* The file shrank after it was opened. */
    return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen, "truncated at offset %" PRIu64, r->off);
}

int snap_reader_open_file(FILE *f, const char *name, struct snap_reader **out, char *err,
                          size_t errlen)
{
    *out = NULL;
    struct snap_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(name))) {
        free(r);
        fclose(f);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    }
    r->f = f;
    int rc;
    off_t size;
    if (fseeko(f, 0, SEEK_END) != 0 || (size = ftello(f)) < 0 || fseeko(f, 0, SEEK_SET) != 0) {
        int e = errno ? errno : EIO;
        rc = reader_fail(r, -e, err, errlen, "seek: %s", strerror(e));
        snap_reader_close(r);
        return rc;
    }
    r->size = (uint64_t)size;
    uint8_t head[MAGIC_LEN];
    if (r->size < MAGIC_LEN) {
        rc = reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen, "truncated at offset 0");
    } else if ((rc = reader_get(r, head, MAGIC_LEN, err, errlen)) == 0 &&
               memcmp(head, magic, MAGIC_LEN) != 0) {
        rc = reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen, "bad magic at offset 0");
    }
    if (rc) {
        snap_reader_close(r);
        return rc;
    }
    r->crc = crc32c(head, MAGIC_LEN);
    r->off = MAGIC_LEN;
    *out = r;
    return 0;
}

int snap_reader_open(const char *path, struct snap_reader **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rbe");
    if (!f) {
        int e = errno;
        if (e == ENOENT)
            return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "snapshot chunk %s: not found", path);
        return err_set(err, errlen, -e, "snapshot chunk %s: %s", path, strerror(e));
    }
    setvbuf(f, NULL, _IOFBF, STDIO_BUF);
    return snap_reader_open_file(f, path, out, err, errlen);
}

static int read_footer(struct snap_reader *r, const uint8_t *head, char *err, size_t errlen)
{
    uint64_t at = r->off;
    uint64_t left = r->size - at;
    if (left < FOOTER_LEN)
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen, "truncated at offset %" PRIu64, at);
    if (left > FOOTER_LEN)
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen,
                           "trailing bytes after the footer at offset %" PRIu64, at + FOOTER_LEN);
    uint8_t foot[FOOTER_LEN];
    memcpy(foot, head, RECORD_HEADER);
    int rc = reader_get(r, foot + RECORD_HEADER, FOOTER_LEN - RECORD_HEADER, err, errlen);
    if (rc)
        return rc;
    uint32_t crc = crc32c_extend(r->crc, foot, 20);
    if (pipe_tfrecord_mask(crc) != load_le32(foot + 20))
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen,
                           "footer checksum mismatch at offset %" PRIu64, at);
    uint64_t count = load_le64(foot + 4), body = load_le64(foot + 12);
    if (body != at)
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen,
                           "footer says %" PRIu64 " body bytes, found %" PRIu64
                           " at offset %" PRIu64,
                           body, at, at);
    if (count != r->count)
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen,
                           "footer says %" PRIu64 " elements, found %" PRIu64 " at offset %" PRIu64,
                           count, r->count, at);
    r->footer = crc;
    r->off = r->size;
    r->state = 1;
    return 0;
}

int snap_reader_next(struct snap_reader *r, struct sluice_element *e, char *err, size_t errlen)
{
    if (r->state == 1)
        return 0;
    if (r->state < 0)
        return err_set(err, errlen, r->state, "%s", r->msg);
    uint64_t at = r->off;
    uint64_t left = r->size - at;
    if (left < RECORD_HEADER)
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen, "truncated at offset %" PRIu64, at);
    uint8_t head[RECORD_HEADER];
    int rc = reader_get(r, head, RECORD_HEADER, err, errlen);
    if (rc)
        return rc;
    uint32_t len = load_le32(head);
    if (len == FOOTER_MARK) {
        rc = read_footer(r, head, err, errlen);
        return rc ? rc : 0;
    }
    if (len == 0 || len > MAX_RECORD)
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen,
                           "bad record length %" PRIu32 " at offset %" PRIu64, len, at);
    if (len > left - RECORD_HEADER)
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen,
                           "record of %" PRIu32 " bytes truncated at offset %" PRIu64, len, at);
    if (r->rec.cap < len) {
        char *p = realloc(r->rec.p, len);
        if (!p)
            return reader_fail(r, SLUICE_ERR_NOMEM, err, errlen, "out of memory");
        r->rec.p = p;
        r->rec.cap = len;
    }
    rc = reader_get(r, r->rec.p, len, err, errlen);
    if (rc)
        return rc;
    uint32_t dcrc = crc32c(r->rec.p, len);
    if (pipe_tfrecord_mask(dcrc) != load_le32(head + 4))
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen,
                           "checksum mismatch at offset %" PRIu64, at);
    size_t pos = 0;
    char cerr[SLUICE_ERRMSG_SIZE] = "";
    rc = codec_next_elem((const uint8_t *)r->rec.p, len, &pos, e, &r->scratch, cerr, sizeof cerr);
    if (rc == SLUICE_ERR_NOMEM)
        return reader_fail(r, rc, err, errlen, "out of memory");
    if (rc != 1 || pos != len)
        return reader_fail(r, SLUICE_ERR_CORRUPT, err, errlen,
                           "bad element at offset %" PRIu64 ": %s", at,
                           rc < 0 ? cerr : "not one element record");
    r->crc = crc32c_extend(crc32c_extend(r->crc, head, RECORD_HEADER), r->rec.p, len);
    r->last = at;
    r->off = at + RECORD_HEADER + len;
    r->count++;
    return 1;
}

uint64_t snap_reader_offset(const struct snap_reader *r)
{
    return r->last;
}

void snap_reader_close(struct snap_reader *r)
{
    if (!r)
        return;
    if (r->f)
        fclose(r->f);
    free(r->path);
    pipe_buf_release(&r->rec);
    pipe_buf_release(&r->scratch);
    free(r);
}

static int check_reader(struct snap_reader *r, struct snap_chunk_info *out, char *err,
                        size_t errlen)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    int rc;
    while ((rc = snap_reader_next(r, &e, err, errlen)) == 1)
        ;
    pipe_elem_release(&e);
    if (rc == 0) {
        out->elements = r->count;
        out->bytes = r->size;
        out->crc32c = r->footer;
    }
    return rc;
}

int snap_chunk_check(const char *path, struct snap_chunk_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct snap_reader *r;
    int rc = snap_reader_open(path, &r, err, errlen);
    if (rc)
        return rc;
    rc = check_reader(r, out, err, errlen);
    snap_reader_close(r);
    return rc;
}

int snap_chunk_check_file(FILE *f, const char *name, struct snap_chunk_info *out, char *err,
                          size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct snap_reader *r;
    int rc = snap_reader_open_file(f, name, &r, err, errlen);
    if (rc)
        return rc;
    rc = check_reader(r, out, err, errlen);
    snap_reader_close(r);
    return rc;
}

/* ---- manifest, FAILED, status ---- */

/* snap_chunk_check of a chunk file or (a URL) object. */
static int chunk_check_any(const char *path, struct snap_chunk_info *info, char *err, size_t errlen)
{
    if (!obj_is_url(path))
        return snap_chunk_check(path, info, err, errlen);
    memset(info, 0, sizeof *info);
    struct obj_reader *r;
    struct obj_fail fail;
    char why[SLUICE_ERRMSG_SIZE];
    int rc = obj_open(path, NULL, &r, why, sizeof why);
    if (rc == SLUICE_ERR_NOT_FOUND)
        return err_set(err, errlen, rc, "snapshot chunk %s: not found (%s)", path, why);
    if (rc < 0)
        return err_set(err, errlen, rc, "snapshot chunk %s", why);
    FILE *f = obj_fopen(r, &fail);
    if (!f) {
        obj_close(r);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    }
    setvbuf(f, NULL, _IOFBF, STDIO_BUF);
    rc = snap_chunk_check_file(f, path, info, err, errlen);
    if (rc < 0 && fail.code)
        rc = err_set(err, errlen, fail.code, "snapshot chunk %s: offset %" PRIu64 ": %s", path,
                     fail.at, fail.why);
    return rc;
}

/* Checks chunks 0..chunks-1 of DIR and makes the text of its manifest.json (malloc'd). */
static int manifest_text(const char *dir, const char *dataset_id, uint64_t chunks, char **out,
                         char *err, size_t errlen)
{
    *out = NULL;
    json_t *root = json_object();
    json_t *list = json_array();
    if (!root || !list) {
        json_decref(root);
        json_decref(list);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    }
    int rc = 0;
    uint64_t elements = 0, bytes = 0;
    for (uint64_t i = 0; i < chunks && rc == 0; i++) {
        char path[4096];
        snap_chunk_path(dir, i, path, sizeof path);
        struct snap_chunk_info info;
        rc = chunk_check_any(path, &info, err, errlen);
        if (rc)
            break;
        elements += info.elements;
        bytes += info.bytes;
        json_t *c = json_pack("{s:I, s:I, s:I, s:I}", "index", (json_int_t)i, "elements",
                              (json_int_t)info.elements, "bytes", (json_int_t)info.bytes, "crc32c",
                              (json_int_t)info.crc32c);
        if (!c || json_array_append_new(list, c) != 0)
            rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    }
    if (rc == 0 && (json_object_set_new(root, "format", json_integer(SNAP_FORMAT)) ||
                    json_object_set_new(root, "dataset_id", json_string(dataset_id)) ||
                    json_object_set_new(root, "chunk_count", json_integer((json_int_t)chunks)) ||
                    json_object_set_new(root, "elements", json_integer((json_int_t)elements)) ||
                    json_object_set_new(root, "bytes", json_integer((json_int_t)bytes)) ||
                    json_object_set(root, "chunks", list)))
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    json_decref(list);
    if (rc == 0 && !(*out = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS)))
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    json_decref(root);
    return rc;
}

int snap_finalize(const char *dir, uint64_t chunks, char *err, size_t errlen)
{
    struct snap_meta m;
    int rc = snap_meta_read(dir, &m, err, errlen);
    if (rc)
        return rc;
    if (m.chunks != chunks) {
        rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                     "%s: finalize with %" PRIu64 " chunks, but %s says %" PRIu64, dir, chunks,
                     SNAP_META_FILE, m.chunks);
        snap_meta_release(&m);
        return rc;
    }
    char *text = NULL;
    rc = manifest_text(dir, m.dataset_id, chunks, &text, err, errlen);
    snap_meta_release(&m);
    if (rc == 0)
        rc = write_atomic(dir, SNAP_MANIFEST_FILE, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

int snap_mark_failed(const char *dir, const char *why, char *err, size_t errlen)
{
    int rc = obj_is_url(dir) ? 0 : make_dirs(dir, err, errlen);
    if (rc)
        return rc;
    size_t n = strlen(why);
    char *line = malloc(n + 2);
    if (!line)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        line[i] = (why[i] == '\n' || why[i] == '\r') ? ' ' : why[i];
    line[n] = '\n';
    line[n + 1] = '\0';
    rc = write_atomic(dir, SNAP_FAILED_FILE, line, n + 1, err, errlen);
    free(line);
    return rc;
}

/* Whether name is "chunk-" and 12 digits; *index receives the number. */
static bool chunk_name(const char *name, uint64_t *index)
{
    if (strncmp(name, "chunk-", 6) != 0 || strlen(name) != 18)
        return false;
    uint64_t v = 0;
    for (int i = 6; i < 18; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    *index = v;
    return true;
}

int snap_disk_status(const char *dir, struct snap_disk_status *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct snap_meta m;
    int rc = snap_meta_read(dir, &m, err, errlen);
    if (rc)
        return rc;
    out->chunks = m.chunks;
    snap_meta_release(&m);

    char *text = NULL;
    size_t len = 0;
    rc = read_small(dir, SNAP_FAILED_FILE, &text, &len, err, errlen);
    if (rc == 0) {
        out->failed = true;
        size_t n = strcspn(text, "\r\n");
        if (n >= sizeof out->why)
            n = sizeof out->why - 1;
        memcpy(out->why, text, n);
        out->why[n] = '\0';
        free(text);
    } else if (rc != -ENOENT) {
        return rc;
    }

    rc = read_small(dir, SNAP_MANIFEST_FILE, &text, &len, err, errlen);
    if (rc == 0) {
        json_error_t jerr;
        json_t *root = json_loadb(text, len, 0, &jerr);
        free(text);
        json_t *el = root ? json_object_get(root, "elements") : NULL;
        if (!json_is_integer(el) || json_integer_value(el) < 0) {
            json_decref(root);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "%s/%s: no element count", dir,
                           SNAP_MANIFEST_FILE);
        }
        out->complete = true;
        out->elements = (uint64_t)json_integer_value(el);
        json_decref(root);
    } else if (rc != -ENOENT) {
        return rc;
    }

    char *chunks_dir = join(dir, SNAP_CHUNKS_DIR);
    if (!chunks_dir)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    DIR *d = opendir(chunks_dir);
    if (!d) {
        int e = errno;
        rc = e == ENOENT ? 0 : err_set(err, errlen, -e, "%s: %s", chunks_dir, strerror(e));
        free(chunks_dir);
        return rc;
    }
    struct dirent *de;
    uint64_t index;
    while ((de = readdir(d)) != NULL)
        if (chunk_name(de->d_name, &index) && index < out->chunks)
            out->committed++;
    closedir(d);
    free(chunks_dir);
    return 0;
}
