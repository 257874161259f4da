/* A replica's Raft directory read through a private copy with C-Raft's raft_uv (replica_log.h).
 *
 * Happy path: list the directory, copy its regular files into a mkdtemp directory, list it
 * again (same names: the copy is one state of the directory), run raft_uv's init and load on the
 * copy on a loop of our own, close raft_uv, remove the copy. Failure modes: the directory moved
 * on during the copy (copied again, at most COPY_TRIES times), a file that cannot be read (the
 * error, naming it), damage C-Raft finds (its message, with the copy's path replaced by the
 * directory's). */
#include "replica_log.h"

#include "update_codec.h"

#include "common/error.h"

#include <raft/uv.h>
#include <uv.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLUSTER_FILE "sluice-cluster"
/* A replica that snapshots every few entries renames and removes files all the time: a copy
 * is tried this many times, a few milliseconds more apart each time (at most about a second). */
#define COPY_TRIES 20

/* ---- finding and copying the directory ------------------------------------------------------ */

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *dir, const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

int replica_log_find(const char *work_dir, char *out, size_t outlen, char *err, size_t errlen)
{
    char raft[PATH_MAX];
    if (snprintf(raft, sizeof raft, "%s/raft", work_dir) >= (int)sizeof raft)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: path too long", work_dir);
    const char *found = NULL;
    if (is_dir(raft))
        found = raft;
    else if (exists(work_dir, "metadata1") || exists(work_dir, "metadata2") ||
             exists(work_dir, CLUSTER_FILE))
        found = work_dir;
    if (!found)
        return 0;
    if (snprintf(out, outlen, "%s", found) >= (int)outlen)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: path too long", found);
    return 1;
}

/* One state of a directory: its regular files' names, sizes and modification times. */
struct listing {
    struct file {
        char name[256];
        off_t size;
        struct timespec mtime;
    } * files;
    size_t n;
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct file *)a)->name, ((const struct file *)b)->name);
}

static void listing_free(struct listing *l)
{
    free(l->files);
    l->files = NULL;
    l->n = 0;
}

static int list_dir(const char *dir, struct listing *l, char *err, size_t errlen)
{
    l->files = NULL;
    l->n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return err_set(err, errlen, -errno, "%s: %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        char path[PATH_MAX + 256];
        struct stat st;
        if (strlen(de->d_name) >= sizeof l->files[0].name)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        /* A file removed since readdir: not part of this state. */
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (l->n == cap) {
            cap = cap ? 2 * cap : 16;
            struct file *f = realloc(l->files, cap * sizeof *f);
            if (!f) {
                rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
                break;
            }
            l->files = f;
        }
        struct file *f = &l->files[l->n++];
        snprintf(f->name, sizeof f->name, "%s", de->d_name);
        f->size = st.st_size;
        f->mtime = st.st_mtim;
    }
    closedir(d);
    if (rc < 0) {
        listing_free(l);
        return rc;
    }
    if (l->n)
        qsort(l->files, l->n, sizeof *l->files, by_name);
    return 0;
}

static bool same_names(const struct listing *a, const struct listing *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->files[i].name, b->files[i].name) != 0)
            return false;
    return true;
}

static bool same_files(const struct listing *a, const struct listing *b)
{
    if (!same_names(a, b))
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (a->files[i].size != b->files[i].size ||
            a->files[i].mtime.tv_sec != b->files[i].mtime.tv_sec ||
            a->files[i].mtime.tv_nsec != b->files[i].mtime.tv_nsec)
            return false;
    return true;
}

/* Copies src/name to dst/name. Returns 0, 1 when the file is gone (renamed or removed since the
 * listing), or a negative code with a message. */
static int copy_file(const char *src, const char *dst, const char *name, char *err, size_t errlen)
{
    char from[PATH_MAX + 256], to[PATH_MAX + 256];
    snprintf(from, sizeof from, "%s/%s", src, name);
    snprintf(to, sizeof to, "%s/%s", dst, name);
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        if (errno == ENOENT)
            return 1;
        return err_set(err, errlen, -errno, "%s: %s", from, strerror(errno));
    }
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        int e = errno;
        close(in);
        return err_set(err, errlen, -e, "copying to %s: %s", to, strerror(e));
    }
    char buf[1 << 16];
    int rc = 0;
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = err_set(err, errlen, -errno, "%s: %s", from, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                rc = err_set(err, errlen, -errno, "copying to %s: %s", to, strerror(errno));
                break;
            }
            off += w;
        }
        if (rc < 0)
            break;
    }
    close(in);
    if (close(out) != 0 && rc == 0)
        rc = err_set(err, errlen, -errno, "copying to %s: %s", to, strerror(errno));
    return rc;
}

/* Removes every file in dir (the copy, with whatever C-Raft made in it) and dir. */
static void remove_copy(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            char path[PATH_MAX + 256];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Copies the files of *l from src into a new temporary directory (its path in tmp). Returns 0,
 * 1 when a file was gone (the copy is incomplete and removed), or a negative code. */
static int copy_dir(const char *src, const struct listing *l, char *tmp, size_t tmplen, char *err,
                    size_t errlen)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    if (snprintf(tmp, tmplen, "%s/sluice-raft-XXXXXX", base) >= (int)tmplen)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: path too long", base);
    if (!mkdtemp(tmp))
        return err_set(err, errlen, -errno, "a directory for a copy in %s: %s", base,
                       strerror(errno));
    for (size_t i = 0; i < l->n; i++) {
        int rc = copy_file(src, tmp, l->files[i].name, err, errlen);
        if (rc != 0) {
            remove_copy(tmp);
            return rc;
        }
    }
    return 0;
}

/* ---- loading a copy with raft_uv ------------------------------------------------------------ */

static void on_io_closed(struct raft_io *io)
{
    *(bool *)io->data = true;
}

/* Replaces every occurrence of from in s (of size len) by to. */
static void replace_all(char *s, size_t len, const char *from, const char *to)
{
    char out[SLUICE_ERRMSG_SIZE];
    size_t fl = strlen(from), o = 0;
    if (fl == 0)
        return;
    for (const char *p = s; *p && o + 1 < sizeof out;) {
        if (strncmp(p, from, fl) == 0) {
            o += (size_t)snprintf(out + o, sizeof out - o, "%s", to);
            if (o >= sizeof out)
                o = sizeof out - 1;
            p += fl;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    snprintf(s, len, "%s", out);
}

/* Runs raft_uv's init and load on copy. Returns 0 or a RAFT_* code with C-Raft's message in
 * msg; also reports in msg (with 0) why an older snapshot was loaded, when raft_uv skipped one. */
static int load_copy(const char *copy, struct replica_log *log, char *msg, size_t msglen)
{
    struct uv_loop_s loop;
    struct raft_uv_transport transport = {.version = 1};
    struct raft_io io = {0};
    bool closed = false;
    msg[0] = '\0';
    int rc = uv_loop_init(&loop);
    if (rc != 0) {
        snprintf(msg, msglen, "a loop: %s", uv_strerror(rc));
        return RAFT_NOMEM;
    }
    rc = raft_uv_tcp_init(&transport, &loop);
    if (rc != 0) {
        snprintf(msg, msglen, "%s", raft_strerror(rc));
        uv_loop_close(&loop);
        return rc;
    }
    io.data = &closed;
    rc = raft_uv_init(&io, &loop, copy, &transport);
    if (rc != 0) {
        snprintf(msg, msglen, "%s", io.errmsg[0] ? io.errmsg : raft_strerror(rc));
        raft_uv_tcp_close(&transport);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        return rc;
    }
    io.data = &closed;
    /* Damage is reported, never cleaned up: C-Raft's auto-recovery would drop a damaged segment
     * and load the rest. */
    raft_uv_set_auto_recovery(&io, false);
    /* The id and address only name this instance; nothing is sent or received. */
    rc = io.init(&io, 1, "127.0.0.1:0");
    if (rc != 0) {
        snprintf(msg, msglen, "%s", io.errmsg[0] ? io.errmsg : raft_strerror(rc));
        raft_uv_close(&io);
        raft_uv_tcp_close(&transport);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        return rc;
    }
    raft_term term = 0;
    raft_id voted = 0;
    raft_index start = 1;
    rc = io.load(&io, &term, &voted, &log->snapshot, &start, &log->entries, &log->n);
    if (rc != 0) {
        snprintf(msg, msglen, "%s", io.errmsg[0] ? io.errmsg : raft_strerror(rc));
        log->snapshot = NULL;
        log->entries = NULL;
        log->n = 0;
    } else {
        log->term = term;
        log->voted_for = voted;
        log->start_index = start;
        /* raft_uv loads the newest snapshot it can read and skips damaged ones silently; its
         * message for the one it skipped stays in errmsg. */
        if (io.errmsg[0])
            snprintf(msg, msglen, "%s", io.errmsg);
    }
    io.close(&io, on_io_closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    raft_uv_close(&io);
    raft_uv_tcp_close(&transport);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0 && rc == 0)
        snprintf(msg, msglen, "raft_uv left handles open");
    return rc;
}

static bool listed(const struct listing *l, const char *name)
{
    struct file key;
    snprintf(key.name, sizeof key.name, "%s", name);
    return l->n && bsearch(&key, l->files, l->n, sizeof key, by_name) != NULL;
}

/* The newest snapshot of l by (term, index), as C-Raft orders them, its data file's name in out;
 * false when there is none. A snapshot is "snapshot-TERM-INDEX-TIMESTAMP" and its ".meta", which
 * C-Raft writes last: a data file without one is not a snapshot yet. */
static bool newest_snapshot(const struct listing *l, char *out, size_t outlen, uint64_t *term,
                            uint64_t *index)
{
    bool found = false;
    for (size_t i = 0; i < l->n; i++) {
        unsigned long long t, ix, ts;
        int used = 0;
        const char *name = l->files[i].name;
        if (sscanf(name, "snapshot-%llu-%llu-%llu%n", &t, &ix, &ts, &used) != 3 ||
            strcmp(name + used, ".meta") != 0)
            continue;
        char data[256];
        snprintf(data, sizeof data, "%.*s", used, name);
        if (!listed(l, data))
            continue;
        if (!found || t > *term || (t == *term && ix > *index)) {
            found = true;
            *term = t;
            *index = ix;
            snprintf(out, outlen, "%s", data);
        }
    }
    return found;
}

static int read_cluster(const char *dir, char *out, size_t len)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, CLUSTER_FILE);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(out, 1, len - 1, f);
    fclose(f);
    out[n] = '\0';
    if (n > 0 && out[n - 1] == '\n')
        out[n - 1] = '\0';
    return 0;
}

/* Keeps the names of l's segment files ("first-last" and "open-N"), NUL-separated. */
static int keep_segments(struct replica_log *log, const struct listing *l)
{
    size_t total = 1;
    for (size_t i = 0; i < l->n; i++)
        total += strlen(l->files[i].name) + 1;
    log->segments = malloc(total);
    if (!log->segments)
        return SLUICE_ERR_NOMEM;
    char *p = log->segments;
    for (size_t i = 0; i < l->n; i++) {
        unsigned long long a, b;
        int used = 0;
        const char *name = l->files[i].name;
        bool closed =
            sscanf(name, "%llu-%llu%n", &a, &b, &used) == 2 && name[used] == '\0' && a <= b;
        if (!closed && strncmp(name, "open-", 5) != 0)
            continue;
        size_t nl = strlen(name) + 1;
        memcpy(p, name, nl);
        p += nl;
    }
    *p = '\0';
    return 0;
}

const char *replica_log_segment_of(const struct replica_log *log, uint64_t index)
{
    for (const char *p = log->segments; p && *p; p += strlen(p) + 1) {
        unsigned long long a, b;
        if (sscanf(p, "%llu-%llu", &a, &b) == 2 && a <= index && index <= b)
            return p;
    }
    return NULL;
}

int replica_log_load(const char *dir, struct replica_log *log, char *err, size_t errlen)
{
    memset(log, 0, sizeof *log);
    if (snprintf(log->dir, sizeof log->dir, "%s", dir) >= (int)sizeof log->dir)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: path too long", dir);
    if (!is_dir(dir))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: not a directory", dir);
    read_cluster(dir, log->cluster, sizeof log->cluster);
    char msg[SLUICE_ERRMSG_SIZE];
    for (unsigned attempt = 1;; attempt++) {
        struct listing before, after, later;
        char tmp[PATH_MAX];
        int rc = list_dir(dir, &before, err, errlen);
        if (rc < 0)
            return rc;
        if (!exists(dir, "metadata1") && !exists(dir, "metadata2")) {
            listing_free(&before);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "%s: no metadata1 or metadata2: not a Raft directory (or an empty one)",
                           dir);
        }
        rc = copy_dir(dir, &before, tmp, sizeof tmp, err, errlen);
        if (rc < 0) {
            listing_free(&before);
            return rc;
        }
        if (rc == 0 && (rc = list_dir(dir, &after, err, errlen)) < 0) {
            remove_copy(tmp);
            listing_free(&before);
            return rc;
        }
        /* rc 1: a file was gone; a changed set of names: a file was renamed, made or removed
         * during the copy. Either way the copy may mix two states of the log: copy again. */
        bool moved = rc == 1 || !same_names(&before, &after);
        if (rc == 0)
            listing_free(&after);
        if (moved) {
            if (rc == 0)
                remove_copy(tmp);
            listing_free(&before);
            if (attempt == COPY_TRIES)
                return err_set(err, errlen, SLUICE_ERR_UNAVAILABLE,
                               "%s: its files changed during each of %u copies (a replica busy "
                               "taking snapshots?); try again, or stop the replica",
                               dir, COPY_TRIES);
            usleep(attempt * 5000);
            continue;
        }
        log->copies = attempt;
        rc = load_copy(tmp, log, msg, sizeof msg);
        remove_copy(tmp);
        replace_all(msg, sizeof msg, tmp, dir);
        if (rc != 0) {
            /* A file written while it was copied (the metadata, a snapshot) may fail to load
             * when the replica goes on: only damage in a directory that stood still is
             * reported as such. */
            bool changed = true;
            if (list_dir(dir, &later, err, errlen) == 0) {
                changed = !same_files(&before, &later);
                listing_free(&later);
            }
            listing_free(&before);
            if (changed && attempt < COPY_TRIES) {
                usleep(attempt * 5000);
                continue;
            }
            return err_set(err, errlen, rc == RAFT_NOMEM ? SLUICE_ERR_NOMEM : SLUICE_ERR_CORRUPT,
                           "%s: %s", dir, msg);
        }
        /* The newest snapshot on disk must be the one loaded: raft_uv falls back to an older one
         * when the newest does not load. */
        char newest[256] = "";
        uint64_t nt = 0, ni = 0;
        if (newest_snapshot(&before, newest, sizeof newest, &nt, &ni) &&
            (!log->snapshot || log->snapshot->term != nt || log->snapshot->index != ni)) {
            listing_free(&before);
            replica_log_release(log);
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "%s: %s: does not load%s%s", dir,
                           newest, msg[0] ? ": " : "", msg);
        }
        if (log->snapshot)
            snprintf(log->snapshot_file, sizeof log->snapshot_file, "%s", newest);
        rc = keep_segments(log, &before);
        listing_free(&before);
        if (rc < 0) {
            replica_log_release(log);
            return err_set(err, errlen, rc, "out of memory");
        }
        return 0;
    }
}

void replica_log_release(struct replica_log *log)
{
    if (log->snapshot) {
        raft_configuration_close(&log->snapshot->configuration);
        for (unsigned i = 0; i < log->snapshot->n_bufs; i++)
            raft_free(log->snapshot->bufs[i].base);
        raft_free(log->snapshot->bufs);
        raft_free(log->snapshot);
        log->snapshot = NULL;
    }
    if (log->entries) {
        /* Entries loaded together share a batch: each batch is freed once. */
        void *batch = NULL;
        for (size_t i = 0; i < log->n; i++) {
            if (log->entries[i].batch != batch) {
                batch = log->entries[i].batch;
                raft_free(batch);
            }
        }
        raft_free(log->entries);
        log->entries = NULL;
    }
    log->n = 0;
    free(log->segments);
    log->segments = NULL;
}

/* ---- replaying it --------------------------------------------------------------------------- */

/* Each record of a batch for visit->record, with the numbers they get when applied. */
struct record_visit {
    const struct replica_log_visit *visit;
    uint64_t first; /* the number of the batch's first record */
};

static int visit_record(void *user, uint32_t i, const struct st_update *u, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    const struct record_visit *rv = user;
    return rv->visit->record(rv->visit->user, rv->first + i, u);
}

static int visit_records(const struct replica_entry *e, const struct state *st,
                         const struct replica_log_visit *visit, char *err, size_t errlen,
                         const char *where)
{
    struct record_visit rv = {visit, st->applied + 1};
    char why[SLUICE_ERRMSG_SIZE / 2] = "";
    int rc = replica_entry_updates(e, visit_record, &rv, why, sizeof why);
    if (rc < 0 && why[0])
        return err_set(err, errlen, rc, "%s: %s", where, why);
    return rc;
}

int replica_log_replay(const struct replica_log *log, struct state *st,
                       const struct replica_log_visit *visit, char *err, size_t errlen)
{
    static const struct replica_log_visit none = {0};
    if (!visit)
        visit = &none;
    uint64_t after = 0;
    int rc;
    if (log->snapshot) {
        const struct raft_snapshot *s = log->snapshot;
        if (s->n_bufs != 1)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "%s: %u buffers, expected 1",
                           log->snapshot_file, s->n_bufs);
        char why[SLUICE_ERRMSG_SIZE / 2];
        rc = replica_state_restore(st, s->bufs[0].base, s->bufs[0].len, why, sizeof why);
        if (rc < 0)
            return err_set(err, errlen, rc,
                           "%s (index %" PRIu64 ", term %" PRIu64 "): does not decode: %s",
                           log->snapshot_file, (uint64_t)s->index, (uint64_t)s->term, why);
        after = s->index;
        if (visit->snapshot && (rc = visit->snapshot(visit->user, log, st)) != 0)
            return rc;
    }
    for (size_t i = 0; i < log->n; i++) {
        uint64_t index = log->start_index + i;
        const struct raft_entry *raw = &log->entries[i];
        bool replayed = index > after;
        const char *seg = replica_log_segment_of(log, index);
        char where[200];
        snprintf(where, sizeof where, "entry %" PRIu64 " (term %" PRIu64 ") in %s%s", index,
                 (uint64_t)raw->term, seg ? "segment " : "an open segment", seg ? seg : "");
        if (raw->type != RAFT_COMMAND) {
            if (visit->entry && (rc = visit->entry(visit->user, index, raw, NULL, replayed)) != 0)
                return rc;
            continue;
        }
        struct replica_entry e;
        char why[SLUICE_ERRMSG_SIZE / 2];
        rc = replica_entry_parse(raw->buf.base, raw->buf.len, &e, why, sizeof why);
        if (rc < 0)
            return err_set(err, errlen, rc, "%s: %s", where, why);
        if (visit->entry && (rc = visit->entry(visit->user, index, raw, &e, replayed)) != 0)
            return rc;
        if (!replayed)
            continue;
        if (visit->record && e.count &&
            (rc = visit_records(&e, st, visit, err, errlen, where)) != 0)
            return rc;
        struct state *states[1] = {st};
        rc = replica_entry_apply(&e, states, 1, NULL, why, sizeof why);
        if (rc < 0)
            return err_set(err, errlen, rc, "%s: %s", where, why);
    }
    return 0;
}
