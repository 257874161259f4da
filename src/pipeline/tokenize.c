/* map(tokenize, ...) (tokenize.h): the argument check, the process-wide cache of loaded
 * tokenizers, the per-op binding and the map itself.
 *
 * Happy path: bind resolves the path (refused outside the data roots of a confined registry),
 * opens it and looks it up in the cache by resolved path, device, inode, size and modification
 * time; a miss reads the file and loads it outside the lock (two binds of one new file may both
 * load it; the second keeps the first's). Each element is encoded into the op's id buffer, then
 * copied into a spare slot that takes component 0's place. Failure modes: the file's (missing,
 * outside the roots, not a tokenizer this module loads), a "bos=TOKEN" the tokenizer lacks, or
 * "bos"/"eos" for a tokenizer without one, all on the op's first element; an element whose
 * first component is not a bytes scalar. */
#include "tokenize.h"

#include "bpe.h"
#include "common/error.h"
#include "element.h"
#include "registry.h"
#include "roots.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Options after the path: "special", "bos", "eos", "bos=TOKEN", "eos=TOKEN". */
#define MAX_OPTIONS 3
/* Loaded tokenizers kept while no op uses them. */
#define IDLE_MAX 4

/* ---- Options ------------------------------------------------------------------------------- */

struct edge {
    bool on;
    const char *name; /* "bos=TOKEN": TOKEN (not NUL-terminated), else NULL */
    size_t len;
};

struct options {
    bool special;
    struct edge bos, eos;
};

static bool starts(const char *s, size_t n, const char *prefix)
{
    size_t p = strlen(prefix);
    return n >= p && memcmp(s, prefix, p) == 0;
}

/* Reads the options of a, which the check accepted or is checking. */
static int parse_options(const struct sluice_fn_args *a, struct options *o, char *err,
                         size_t errlen)
{
    memset(o, 0, sizeof(*o));
    if (a->v[0].kind != PIPE_VAL_BYTES || a->v[0].slen == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the first argument must be the tokenizer file's path, a non-empty string");
    if (memchr(a->v[0].s, '\0', a->v[0].slen))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "the path holds a NUL byte");
    for (size_t k = 1; k < a->n; k++) {
        const struct pipe_value *v = &a->v[k];
        if (v->kind != PIPE_VAL_BYTES)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "argument %zu must be an option string (\"special\", \"bos\", "
                           "\"eos\", \"bos=TOKEN\" or \"eos=TOKEN\")",
                           k + 1);
        const char *s = v->s ? v->s : "";
        size_t n = v->slen;
        bool *flag = NULL;
        struct edge *edge = NULL;
        if (n == 7 && memcmp(s, "special", 7) == 0)
            flag = &o->special;
        else if ((n == 3 && memcmp(s, "bos", 3) == 0) || starts(s, n, "bos="))
            edge = &o->bos;
        else if ((n == 3 && memcmp(s, "eos", 3) == 0) || starts(s, n, "eos="))
            edge = &o->eos;
        if (!flag && !edge)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "unknown option \"%.*s\" (expected \"special\", \"bos\", \"eos\", "
                           "\"bos=TOKEN\" or \"eos=TOKEN\")",
                           (int)(n > 60 ? 60 : n), s);
        if ((flag && *flag) || (edge && edge->on))
            return err_set(err, errlen, SLUICE_ERR_INVALID, "option \"%.3s\" given twice", s);
        if (flag) {
            *flag = true;
            continue;
        }
        edge->on = true;
        if (n > 3) {
            if (n == 4)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "option \"%.4s\" needs a token after the '='", s);
            edge->name = s + 4;
            edge->len = n - 4;
        }
    }
    return 0;
}

static int tokenize_check(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    struct options o;
    return parse_options(a, &o, err, errlen);
}

/* ---- The cache of loaded tokenizers -------------------------------------------------------- */

struct cached {
    struct cached *next;
    char *path; /* resolved */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    struct bpe *bpe;
    int refs;
    uint64_t released; /* cache_clock when refs last fell to 0 */
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cached *cache;
static uint64_t cache_clock;

static bool same_file(const struct cached *c, const char *path, const struct stat *st)
{
    return strcmp(c->path, path) == 0 && c->dev == st->st_dev && c->ino == st->st_ino &&
           c->size == st->st_size && c->mtime.tv_sec == st->st_mtim.tv_sec &&
           c->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

static void cached_free(struct cached *c)
{
    bpe_free(c->bpe);
    free(c->path);
    free(c);
}

/* Unlinks, under cache_mu, the idle entries past IDLE_MAX (the longest idle first) and those of
 * path that no longer match its file; returns them as a list for the caller to free. */
static struct cached *cache_trim(const char *path, const struct stat *st)
{
    struct cached *dead = NULL;
    for (struct cached **p = &cache; *p;) {
        struct cached *c = *p;
        if (c->refs == 0 && path && strcmp(c->path, path) == 0 && !same_file(c, path, st)) {
            *p = c->next;
            c->next = dead;
            dead = c;
        } else {
            p = &c->next;
        }
    }
    for (;;) {
        size_t idle = 0;
        struct cached **oldest = NULL;
        for (struct cached **p = &cache; *p; p = &(*p)->next)
            if ((*p)->refs == 0) {
                idle++;
                if (!oldest || (*p)->released < (*oldest)->released)
                    oldest = p;
            }
        if (idle <= IDLE_MAX)
            break;
        struct cached *c = *oldest;
        *oldest = c->next;
        c->next = dead;
        dead = c;
    }
    return dead;
}

static void free_list(struct cached *c)
{
    while (c) {
        struct cached *next = c->next;
        cached_free(c);
        c = next;
    }
}

/* A held entry for the file at path (resolved) with st, or NULL. Under cache_mu. */
static struct cached *cache_find(const char *path, const struct stat *st)
{
    for (struct cached *c = cache; c; c = c->next)
        if (same_file(c, path, st)) {
            c->refs++;
            return c;
        }
    return NULL;
}

static void cache_release(struct cached *c)
{
    pthread_mutex_lock(&cache_mu);
    c->refs--;
    if (c->refs == 0)
        c->released = ++cache_clock;
    struct cached *dead = cache_trim(NULL, NULL);
    pthread_mutex_unlock(&cache_mu);
    free_list(dead);
}

void pipe_tokenize_cache_clear(void)
{
    pthread_mutex_lock(&cache_mu);
    struct cached *dead = NULL;
    for (struct cached **p = &cache; *p;) {
        struct cached *c = *p;
        if (c->refs == 0) {
            *p = c->next;
            c->next = dead;
            dead = c;
        } else {
            p = &c->next;
        }
    }
    pthread_mutex_unlock(&cache_mu);
    free_list(dead);
}

/* Reads the open file fd of size bytes whole. Returns 0 and *out (malloc'd), or a negative
 * errno. */
static int read_all(int fd, size_t size, uint8_t **out)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return SLUICE_ERR_NOMEM;
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(buf);
            return n < 0 ? -errno : SLUICE_ERR_TRUNCATED;
        }
        got += (size_t)n;
    }
    *out = buf;
    return 0;
}

/* The tokenizer of the file path names, held (cache_release gives it back). On failure a
 * negative code with the reason in err, which begins with the path as given. */
static int cache_acquire(const struct pipe_roots *roots, const char *path, struct cached **out,
                         char *err, size_t errlen)
{
    char real[PATH_MAX];
    int rc = pipe_roots_check_path(roots, "tokenizer", path, real, sizeof real, err, errlen);
    if (rc)
        return rc;
    int fd;
    do
        fd = open(real, O_RDONLY | O_CLOEXEC | (pipe_roots_active(roots) ? O_NOFOLLOW : 0));
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        rc = -errno;
        return err_set(err, errlen, rc, "%s: %s", path, sluice_strerror(rc));
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = fstat(fd, &st) < 0 ? -errno : S_ISDIR(st.st_mode) ? -EISDIR : SLUICE_ERR_INVALID;
        close(fd);
        return err_set(err, errlen, rc, "%s: %s", path,
                       rc == SLUICE_ERR_INVALID ? "not a regular file" : sluice_strerror(rc));
    }
    pthread_mutex_lock(&cache_mu);
    struct cached *c = cache_find(real, &st);
    pthread_mutex_unlock(&cache_mu);
    if (c) {
        close(fd);
        *out = c;
        return 0;
    }
    if ((uint64_t)st.st_size > BPE_MAX_FILE_BYTES) {
        close(fd);
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "%s: over %zu bytes", path,
                       BPE_MAX_FILE_BYTES);
    }
    uint8_t *data = NULL;
    rc = read_all(fd, (size_t)st.st_size, &data);
    close(fd);
    if (rc)
        return err_set(err, errlen, rc, "%s: %s", path, sluice_strerror(rc));
    struct bpe *b = NULL;
    rc = bpe_load(path, data, (size_t)st.st_size, &b, err, errlen);
    free(data);
    if (rc)
        return rc;
    struct cached *mine = calloc(1, sizeof(*mine));
    if (!mine || !(mine->path = strdup(real))) {
        free(mine);
        bpe_free(b);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    }
    mine->dev = st.st_dev;
    mine->ino = st.st_ino;
    mine->size = st.st_size;
    mine->mtime = st.st_mtim;
    mine->bpe = b;
    mine->refs = 1;
    pthread_mutex_lock(&cache_mu);
    c = cache_find(real, &st);
    struct cached *dead = NULL;
    if (!c) {
        mine->next = cache;
        cache = mine;
        c = mine;
        mine = NULL;
        dead = cache_trim(real, &st);
    }
    pthread_mutex_unlock(&cache_mu);
    if (mine)
        cached_free(mine);
    free_list(dead);
    *out = c;
    return 0;
}

/* ---- The op -------------------------------------------------------------------------------- */

struct tok_op {
    struct cached *tok;
    struct bpe_state *st;
    unsigned flags;
    int32_t bos[4], eos[4];
    size_t nbos, neos;
    struct bpe_ids ids; /* the current element's, reused */
};

/* The ids an edge option adds: its named token, else the tokenizer's own. */
static int edge_ids(const struct bpe *b, const struct edge *e, const char *what, int32_t *ids,
                    size_t *n, char *err, size_t errlen)
{
    *n = 0;
    if (!e->on)
        return 0;
    if (e->name) {
        int32_t id = bpe_special_id(b, e->name, e->len);
        if (id < 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s=%.*s: the tokenizer has no such special token", what,
                           (int)(e->len > 100 ? 100 : e->len), e->name);
        ids[0] = id;
        *n = 1;
        return 0;
    }
    const int32_t *own;
    size_t k = what[0] == 'b' ? bpe_bos(b, &own) : bpe_eos(b, &own);
    if (k == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s has no %s token; name one with \"%s=TOKEN\"", bpe_kind(b),
                       what[0] == 'b' ? "BOS" : "EOS", what);
    memcpy(ids, own, k * sizeof(*ids));
    *n = k;
    return 0;
}

static void tokenize_unbind(void *state, void *user)
{
    (void)user;
    struct tok_op *op = state;
    bpe_state_free(op->st);
    cache_release(op->tok);
    free(op->ids.v);
    free(op);
}

static int tokenize_bind(const struct sluice_fn_args *a, void *user, void **state, char *err,
                         size_t errlen)
{
    struct options o;
    int rc = parse_options(a, &o, err, errlen);
    if (rc)
        return rc;
    char path[PATH_MAX];
    if (a->v[0].slen >= sizeof path)
        return err_set(err, errlen, -ENAMETOOLONG, "%s", sluice_strerror(-ENAMETOOLONG));
    memcpy(path, a->v[0].s, a->v[0].slen);
    path[a->v[0].slen] = '\0';
    struct tok_op *op = calloc(1, sizeof(*op));
    if (!op)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    /* user is the registry tokenize was registered in: its data roots apply. */
    rc = cache_acquire(pipe_registry_roots(user), path, &op->tok, err, errlen);
    if (rc) {
        free(op);
        return rc;
    }
    const struct bpe *b = op->tok->bpe;
    op->flags = o.special ? BPE_ALLOW_SPECIAL : 0;
    if ((rc = edge_ids(b, &o.bos, "bos", op->bos, &op->nbos, err, errlen)) ||
        (rc = edge_ids(b, &o.eos, "eos", op->eos, &op->neos, err, errlen)) ||
        (rc = bpe_state_new(b, &op->st))) {
        if (rc == SLUICE_ERR_NOMEM)
            err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        tokenize_unbind(op, user);
        return rc;
    }
    *state = op;
    return 0;
}

static int tokenize_map(struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                        char *err, size_t errlen)
{
    (void)a;
    struct tok_op *op = user;
    if (e->n == 0)
        return err_set(err, errlen, SLUICE_ERR_TYPE, "the element has no components");
    const struct pipe_tensor *t = &e->t[0];
    if (t->dtype != SLUICE_BYTES || t->rank != 0)
        return err_set(err, errlen, SLUICE_ERR_TYPE,
                       "component 0 is %s of rank %d, expected a bytes scalar (the text)",
                       sluice_dtype_name(t->dtype), t->rank);
    const uint8_t *text = t->data + t->offs[0];
    size_t len = (size_t)(t->offs[1] - t->offs[0]);
    struct bpe_ids *ids = &op->ids;
    ids->n = 0;
    int rc = bpe_ids_append(ids, op->bos, op->nbos);
    if (!rc && (rc = bpe_encode(op->tok->bpe, op->st, text, len, op->flags, ids, err, errlen)))
        return rc;
    if (!rc)
        rc = bpe_ids_append(ids, op->eos, op->neos);
    if (!rc)
        rc = pipe_elem_reserve(e, e->n + 1);
    struct pipe_tensor *out = &e->t[e->n];
    if (!rc) {
        out->dtype = SLUICE_INT32;
        rc = pipe_tensor_reserve(out, ids->n * sizeof(int32_t), ids->n);
    }
    if (rc)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    out->rank = 1;
    out->shape[0] = (int64_t)ids->n;
    out->len = ids->n * sizeof(int32_t);
    if (ids->n)
        memcpy(out->data, ids->v, out->len);
    pipe_tensor_swap(&e->t[0], out);
    return 0;
}

int pipe_tokenize_register(struct sluice_registry *reg)
{
    struct pipe_fn def = {
        .name = "tokenize",
        .kind = PIPE_FN_MAP,
        .min_args = 1,
        .max_args = 1 + MAX_OPTIONS,
        .map = tokenize_map,
        .check = tokenize_check,
        .bind = tokenize_bind,
        .unbind = tokenize_unbind,
        .label_arg0 = true,
        .user = reg,
    };
    return pipe_registry_add(reg, &def);
}
